/*
 * metrics.h: GET /metrics in the Prometheus text format, on
 * [daemon] metrics_listen (metrics.c). Loop thread only.
 */
#ifndef TPD_METRICS_H
#define TPD_METRICS_H

#include <stddef.h>

#include <event2/event.h>

#include "conf/conf.h"

/*
 * Serves /metrics on c->metrics_listen with the loop base (nothing when it
 * is not set), with c's metrics_* limits. Returns 0, or -1 with *cause set
 * (an address that cannot be listened on names it).
 */
int metrics_start(struct event_base *base, const struct conf *c, char **cause);

/*
 * SIGHUP: the limits of nc apply to the connections that come next; a
 * changed metrics_listen waits for the next start (logged).
 */
void metrics_reload(const struct conf *nc);

/* Stops serving and closes the listener and its connections (at exit). */
void metrics_stop(void);

/*
 * The metrics text of the daemon now, as a scrape gets it (appended to
 * out). Returns 0, or -1 when memory ran out.
 */
struct evbuffer;
int metrics_format(struct evbuffer *out);

#endif
