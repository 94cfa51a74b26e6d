/*
 * task.h: one submitted task, and the interface every task kind implements.
 *
 * A task has a parse part (loop thread: validate and copy the request's
 * "task" object), a run part (one worker thread, outside the pool lock) and
 * a done part (loop thread, after the pool's done callback has handed it back
 * through the mailbox). Between submit and done the worker owns the fields
 * marked "worker"; the loop thread does not touch them. jansson does no
 * locking, so a json_t is never shared: the worker builds the result and
 * gives it up with the completion.
 */
#ifndef TPD_TASK_H
#define TPD_TASK_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <jansson.h>

#include "pool.h"

struct blob;
struct task;
struct subscriber;
struct pools_entry;
struct conf_pool;

struct task_kind {
	const char *name;
	/*
	 * Loop thread. Checks the kind's fields of spec (the request's "task"
	 * object; "kind" and "timeout_ms" are already taken) and stores what
	 * run needs in t->kind_data. Returns 0, or -1 with *cause set to a
	 * message naming the field (the request gets bad_request).
	 */
	int (*parse)(struct task *t, json_t *spec, char **cause);
	/*
	 * Worker thread. Does the work; fills t->result and, unless the task
	 * succeeded, t->error_code and t->error_message. Honours
	 * t->timeout_us (returning POOL_TIMED_OUT) and task_cancelled(t)
	 * (returning POOL_CANCELLED). Returns the terminal state.
	 */
	enum pool_state (*run)(struct task *t);
	/*
	 * Under the pool lock, on the cancelling thread: wake a run blocked in
	 * a wait. Must not block. May be NULL when run polls task_cancelled.
	 */
	void (*cancel)(struct task *t);
	/* Loop thread: frees kind_data. May be NULL. */
	void (*free)(struct task *t);
	/* run emits "started" itself (exec: when the process starts). */
	bool announces_start;
};

struct task {
	uint64_t id;
	const struct task_kind *kind;
	void *kind_data;
	uint64_t timeout_us;        /* 0 = none */
	bool stream;                /* send started/output events */
	struct pool_job job;        /* the pool's handle; job.arg == this task */

	/* worker: the outcome, read by the loop thread after done */
	json_t *result;             /* NULL = no result */
	const char *error_code;     /* an ERR_* name; NULL on success */
	char *error_message;        /* malloc'd; NULL on success */

	/* set when the pool hands the task back */
	enum pool_state state;
	uint64_t queued_us;
	uint64_t run_us;

	/* for the kind's parse (loop thread): set by op_submit before it */
	const struct conf_pool *pool_conf; /* the pool's settings; NULL: built-in */
	bool via_unix;              /* submitted on the Unix socket */
	bool have_creds;            /* ... with the peer's credentials known: */
	uid_t uid;
	gid_t gid;

	/* front end (loop thread only, except where marked) */
	struct pool *pool;          /* the pool it was submitted to */
	struct pools_entry *pool_entry; /* its entry; alive until this task's done */
	char *pool_name;
	uint64_t conn_id;           /* the submitter's connection; 0 once detached */
	json_t *request_id;         /* the submit request's id (may be NULL) */
	struct subscriber *subscribers; /* wait requests for its done */
	atomic_bool started;        /* set by the worker when run begins */
	bool finished;              /* done processed on the loop thread */
	struct blob *done_text;     /* the done event without "{" and "id", once finished
	                               (shared with the connections still owed it) */
	const char *done_body;      /* its text */
	size_t done_len;            /* its length */
	const char *final_state;    /* wire name of the terminal state */
	uint64_t finished_us;
	struct task *older, *newer; /* retention list of finished tasks */

	/* stream budget (mailbox lock) */
	size_t stream_pending;

	/* the done's trip through the mailbox: no allocation on the hot path */
	struct mail *done_mail;
};

/* The kind named name, or NULL (task-kinds.c). */
const struct task_kind *task_kind_find(const char *name);

/* The kinds' names, "exec, echo, ...", for messages (task-kinds.c). */
const char *task_kind_names(void);

/* True once cancel was asked (worker side poll). */
bool task_cancelled(const struct task *t);

/* Sets t->error_code and a formatted t->error_message (worker side). */
void task_set_error(struct task *t, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/*
 * Worker thread: sends an event ("started", "output") to the task's
 * subscribers. Takes ownership of event; the front end adds "id" and
 * "task". weight is the bytes the event carries; while more than the
 * stream budget of this task's events wait for the loop thread, the call
 * blocks (or returns early, 0, once the task is cancelled), so a chatty
 * task cannot fill memory. Returns 0.
 */
int task_emit(struct task *t, json_t *event, size_t weight);

/* The kinds. */
extern const struct task_kind task_kind_echo;
extern const struct task_kind task_kind_sleep;
extern const struct task_kind task_kind_spin;
extern const struct task_kind task_kind_fail;
extern const struct task_kind task_kind_exec;

#endif
