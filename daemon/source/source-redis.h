/*
 * source-redis.h: a [source NAME] of type redis-stream: tasks read from a
 * Redis stream through a consumer group, their dones written to a results
 * stream. Loop thread only.
 *
 * The contract (tpd.conf(5), README "More than one machine"):
 *  - It reads at most as many entries as the pool can accept at once
 *    (source_host.room), with XREADGROUP ... BLOCK on a connection of its
 *    own, so that a blocked read never delays a write on the other.
 *  - An entry becomes a task (source_host.submit); a bad entry (not JSON,
 *    not a task, unknown fields) becomes a done with state failed and
 *    code bad_request at once. When a task ends, its done goes to the
 *    results stream and the entry is acknowledged in one MULTI/EXEC.
 *  - At each connect it first reads its own pending entries (XREADGROUP
 *    from 0): those it does not hold (a read's answer lost with the
 *    connection, a life before a restart) run at once, as claimed ones.
 *    Entries pending longer than claim_idle (their consumer stopped) are
 *    claimed (XAUTOCLAIM); a running task keeps its claim fresh (XCLAIM
 *    JUSTID). An entry delivered more than max_deliveries times goes to
 *    the dead-letter stream, gets a done with state lost, and is acked.
 *  - Redis down or gone: retried with backoff up to backoff_max, logged
 *    once per outage, shown by source_redis_stats; finished tasks' results
 *    wait in memory and are written once Redis is back.
 *  - Stop (drain): no more reads; running tasks end and are acked. Stop
 *    now: a task cancelled by it is left pending for another consumer.
 */
#ifndef TPD_SOURCE_REDIS_H
#define TPD_SOURCE_REDIS_H

#include <stdbool.h>
#include <stddef.h>

#include <event2/event.h>
#include <jansson.h>

#include "conf/conf.h"
#include "source.h"

struct source_redis;

/* Called (on a later loop turn, never from within a call into the source) when a stopped source has nothing left. */
typedef void (*source_redis_idle_fn)(struct source_redis *, void *arg);

/*
 * A source for cs (copied), on base, asking host. Connects at once (in the
 * background: the first outcome is logged). NULL with *cause set when
 * memory runs out or cs->redis cannot be read.
 */
struct source_redis *source_redis_new(struct event_base *base, const struct conf_source *cs,
    const struct source_host *host, char **cause);

/* The settings it runs with. */
const struct conf_source *source_redis_conf(const struct source_redis *);

/* The pool may have room again (a task ended, the pool grew): read if so. */
void source_redis_kick(struct source_redis *);

/*
 * Stops reading. Running tasks still end and are acked; with now, a task
 * that ends cancelled is not (its entry stays pending for another
 * consumer). idle, if not NULL, is called once nothing is left in flight
 * and every result is written (at once on a later turn when nothing was).
 */
void source_redis_stop(struct source_redis *, bool now, source_redis_idle_fn idle, void *arg);

/* True once stopped with nothing left: no task in flight, no result unwritten. */
bool source_redis_idle(const struct source_redis *);

/* Entries asked for and not yet arrived: room another source of the pool should leave. */
unsigned source_redis_asked(const struct source_redis *);

/* Its figures now (source.h), for stats and /metrics; the strings are the source's, valid until it changes. */
void source_redis_figures(const struct source_redis *, struct source_figures *f);

/*
 * The stats object: name, state (connecting, connected, down, draining,
 * stopped), read, acked, claimed, dead_lettered, last_error (null when
 * none yet), and more (doc/protocol.md).
 */
json_t *source_redis_stats(const struct source_redis *);

/* One phrase for systemd's STATUS=: "jobs down", "jobs 3 in flight". */
void source_redis_describe(const struct source_redis *, char *buf, size_t len);

/* Closes its connections and frees it; tasks still running keep their done callback's argument (a stopped source should be idle first). */
void source_redis_free(struct source_redis *);

#endif
