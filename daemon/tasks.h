/*
 * tasks.h: the daemon's tasks from submit to retention (loop thread only,
 * except where a comment says otherwise): ids, subscribers, delivery of
 * stream events and dones, and the retained finished tasks that wait and
 * status still answer for.
 */
#ifndef TPD_TASKS_H
#define TPD_TASKS_H

#include <stdbool.h>
#include <stdint.h>

#include "mailbox.h"
#include "pool.h"
#include "pools.h"
#include "task.h"

struct conn;
struct proto_task;

/* A new task of kind, not yet submitted. */
struct task *tasks_new(const struct task_kind *kind);

/* Frees a task that was never accepted. */
void tasks_discard(struct task *t);

/*
 * Submits t to pool e on behalf of conn c (request id req_id). On
 * POOL_ACCEPTED the task is registered, counted as outstanding and has its
 * id; otherwise the caller still owns it (tasks_discard).
 */
enum pool_verdict tasks_submit(struct task *t, struct pools_entry *e, struct conn *c,
    json_t *req_id, bool detach);

/* The task with this id, running or retained, or NULL. */
struct task *tasks_find(uint64_t id);

/* The wire name of t's state now: queued, running, or its terminal state. */
const char *tasks_state(const struct task *t);

/* What the events about t say of it now (proto.h); result and error are the done's. */
void tasks_view(const struct task *t, struct proto_task *v);

/*
 * Sends t's done to c now (t finished) or when it finishes. A wait on an
 * unfinished task counts in c->subscriptions until the done is sent or the
 * task dropped; past max_subscriptions it is answered bad_request.
 */
void tasks_subscribe(struct task *t, struct conn *c, json_t *req_id);

/* Asks t to stop (queued: cancelled at once; running: cancel flag). */
void tasks_cancel(struct task *t);

/* The mailbox handler: stream events and dones from the workers. */
void tasks_handle_mail(struct mail *m);

/*
 * Drops finished tasks, oldest first: past result_ttl, beyond
 * result_retain, and while the retained cost more than result_retain_bytes.
 */
void tasks_prune(void);

/* How many finished tasks are retained, and what they are counted for in bytes. */
size_t tasks_retained(void);
size_t tasks_retained_bytes(void);

/* Finished tasks forgotten before result_ttl to stay within result_retain_bytes. */
uint64_t tasks_results_forgotten(void);

/* True when id was given to an accepted task (which may have been forgotten since). */
bool tasks_was_accepted(uint64_t id);

/* Sets the stream budget workers read (any thread may read it). */
void tasks_set_stream_budget(size_t bytes);

/* Frees everything at exit. */
void tasks_free_all(void);

#endif
