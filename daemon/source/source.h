/*
 * source.h: what a task source needs of the daemon, and what it gets back.
 *
 * A source (source-redis.c: a Redis stream read through a consumer group)
 * turns the entries it reads into tasks of one pool, on the loop thread.
 * It needs three things of the daemon, given as a struct source_host:
 *  - room: how many tasks the pool can accept at once now (idle workers
 *    plus free queue slots, read from the pool), so that it reads no more
 *    entries than that: back-pressure instead of rejection;
 *  - submit: a task built from an entry, checked as a submit's is, run on
 *    the source's behalf (owner "redis:NAME");
 *  - and, through the submission's done callback, each accepted task's
 *    done event, once, when the task ends.
 * Nothing here knows about connections: the daemon delivers the done to
 * the source as it delivers one to a client.
 */
#ifndef TPD_SOURCE_H
#define TPD_SOURCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

enum source_verdict {
	SOURCE_ACCEPTED,        /* the task is the daemon's now: done will be called once */
	SOURCE_FULL,            /* no room in the pool now: the source tries again later */
	SOURCE_CLOSED,          /* the pool is closed (tpd is stopping, or it was removed) */
	SOURCE_BAD,             /* not a task: *cause says what is wrong (bad_request) */
};

/*
 * Loop thread, on a later turn than the submit: the task ended. state is
 * its terminal state's wire name ("succeeded", "cancelled", ...); done is
 * its done event, the JSON text of one object (len bytes, no newline),
 * valid during the call.
 */
typedef void (*source_done_fn)(void *arg, const char *state, const char *done, size_t len);

/* A task a source asks the daemon to run. */
struct source_task {
	const char *source;             /* the source's name: the task's owner is redis:NAME */
	const char *pool;
	json_t *spec;                   /* the task object (borrowed: a reference is taken to keep it) */
	const char *label;              /* NULL: none */
	uint64_t queue_timeout_ms;      /* 0: none */
	unsigned attempt;               /* the entry's delivery count (1 for the first) */
	source_done_fn done;
	void *arg;                      /* done's first argument */
};

/* A source's figures, for stats and /metrics. */
struct source_figures {
	const char *name, *pool;
	const char *state;              /* connecting, connected, down, draining, stopped */
	bool connected;
	const char *last_error;         /* NULL when none yet */
	uint64_t read, acked, claimed, dead_lettered, bad, reconnects;
	size_t in_flight;               /* entries read and not yet acked */
	size_t running, held, unwritten;
};

struct source_host {
	/* How many tasks pool can accept at once now; 0 when it is closed or gone. */
	unsigned (*room)(void *ctx, const char *pool);
	/*
	 * Submits t. On SOURCE_ACCEPTED sets *task_id, and t->done will be
	 * called once, never from within this call. On SOURCE_BAD sets
	 * *cause (caller frees) to a message naming what is wrong.
	 */
	enum source_verdict (*submit)(void *ctx, const struct source_task *t, uint64_t *task_id,
	    char **cause);
	void *ctx;
};

#endif
