/*
 * pools.h: the daemon's named pools (loop thread only). Each pool is
 * independent; "default" always exists. A pool removed by a reload is closed
 * and stays here, draining, until its last task is done.
 */
#ifndef TPD_POOLS_H
#define TPD_POOLS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#include <event2/event.h>

#include "conf/conf.h"
#include "pool.h"

struct task;

struct pools_entry {
	char *name;
	struct pool *pool;
	bool removed;       /* closed by a reload; freed once drained */
	unsigned long outstanding; /* accepted tasks whose done is not yet processed (pools.c's) */
	/* the task layer's (tasks.c): its tasks without a queue slot yet, and its counters */
	struct task *due_head, *due_tail; /* due with no room yet, oldest due first */
	unsigned long scheduled, waiting;
	uint64_t retried, skipped, ended_unqueued; /* ended_unqueued: cancelled before queued */
	atomic_bool room_due;   /* the pool told of room; the loop has not run the hooks yet */
	unsigned held;          /* submits held for room now (admission.c's; stats, metrics) */
};

/*
 * Creates every pool of c; room notifications wake the loop of base.
 * Returns 0, or -1 with *cause set.
 */
int pools_start(struct event_base *base, const struct conf *c, char **cause);

/* Creates one more pool. Returns 0, or -1 with *cause set. */
int pools_add(const struct conf_pool *cp, char **cause);

/* The pool called name that accepts work (removed pools are not found). */
struct pools_entry *pools_find(const char *name);

size_t pools_count(void);
struct pools_entry *pools_at(size_t i);

/* Closes every pool (drain or now). */
void pools_close_all(enum pool_close_mode mode);

/* Closes a pool for good; it is freed once its outstanding tasks are done. */
void pools_remove(struct pools_entry *e);

/* The registry accepted a task into e, or processed the done of one (outstanding). */
void pools_task_accepted(struct pools_entry *e);
/* ... and frees e once it was removed and has none left. */
void pools_task_finished(struct pools_entry *e);

/*
 * Room: the one door for everyone who waits for a queue slot of a pool.
 * When a slot frees in a pool armed by pools_want_room, the pool tells the
 * loop (from whatever thread freed it), and on a later loop pass the room
 * hooks run for that pool, once, in the order they were added: the task
 * layer's (due tasks enter first), then the held submits'. A hook submits
 * until the pool refuses, then calls pools_want_room again if it still has
 * someone waiting. Loop thread only.
 */
typedef void (*pools_room_fn)(struct pools_entry *e, void *arg);

#define POOLS_MAX_ROOM_HOOKS 4

/* Adds a room hook. Returns 0, or -1 when there are POOLS_MAX_ROOM_HOOKS already. */
int pools_add_room_hook(pools_room_fn fn, void *arg);

/*
 * Arms e's notification: the hooks run for e once room frees (on the next
 * loop pass when there is room now). Arming twice is arming once.
 */
void pools_want_room(struct pools_entry *e);

/* Runs the room hooks for e now (what the notification leads to). */
void pools_room(struct pools_entry *e);

/* Joins and frees every pool (at exit). */
void pools_stop_all(void);

#endif
