/*
 * daemon.h: the state of the running daemon, owned by the event-loop thread.
 * Everything here is "loop thread only" unless a field says otherwise.
 *
 * Who owns the counters the shutdown looks at: the registry (tasks.c)
 * counts the accepted tasks whose done is not processed
 * (tasks_outstanding), each connection the dones it is owed (conn.c), each
 * pool its own tasks (pools.c). tpd.c decides once per pass of the loop,
 * in one place, whether the daemon may leave (see tpd.c).
 */
#ifndef TPD_DAEMON_H
#define TPD_DAEMON_H

#include <stdbool.h>
#include <stdint.h>

#include <event2/event.h>

#include "conf/conf.h"

enum daemon_phase {
	DAEMON_RUNNING,
	DAEMON_DRAINING,     /* no new submits; accepted tasks run to their end */
	DAEMON_STOPPING_NOW, /* queued tasks cancelled, running ones asked to stop */
	DAEMON_EXITING,      /* every done delivered; flushing and leaving the loop */
};

struct daemon {
	struct event_base *base;
	struct conf conf;
	struct conf_flags *flags;  /* the command line's settings, applied over the file (start, SIGHUP) */
	enum daemon_phase phase;
	bool leave;                /* the exit flush timed out: leave the loop now */
	uint64_t started_us;
	struct event *shutdown_timer;
	struct event *exit_timer;
};

extern struct daemon *daemon_state;

/* Starts a drain or a stop now (tpd(8)). A second call can upgrade drain to now. */
void daemon_begin_shutdown(bool now);

/* SIGHUP: re-reads the configuration file and applies it (reload.c). */
void daemon_reload(void);

#endif
