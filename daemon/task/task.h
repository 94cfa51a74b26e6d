/*
 * task.h: one task, the interface every task kind implements, and the
 * worker side of a task's life (task.c): what a kind's run may call, and
 * the hand-off of its events and its end to the loop thread.
 *
 * A task has a parse part (loop thread: validate and copy the request's
 * "task" object), a run part (one worker thread, outside the pool lock) and
 * a done part (loop thread, after the pool's done callback has handed it
 * back through the mailbox: the registry's, tasks.h). Between submit and
 * done the worker owns the fields marked "worker"; the loop thread does not
 * touch them. jansson does no locking, so a json_t is never shared: the
 * worker builds the result and gives it up with the completion.
 */
#ifndef TPD_TASK_H
#define TPD_TASK_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <jansson.h>

#include "mailbox.h"
#include "pool/pool.h"

struct blob;
struct task;
struct task_sink;
struct pools_entry;
struct conf_pool;

/* What a follower's replay of a spool lacks: kept of seen bytes of stdout, stderr. */
struct task_spool_gap {
	bool cut;
	uint64_t kept[2], seen[2];
	/*
	 * the run sends its output as events (another receiver streams it), and
	 * some of what the file holds is still on its way to the loop as events
	 */
	bool in_flight;
};

struct task_kind {
	const char *name;           /* a KIND_* of wire.h */
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
	 * a wait. Must not block, and may take only a leaf lock of its own
	 * (pool.c names them). May be NULL when run polls task_cancelled.
	 */
	void (*cancel)(struct task *t);
	/*
	 * Loop thread, for a wait that follows t from the start: turns t's
	 * stream on and, in the same step, appends to events (an array) the
	 * output its run has kept so far as output events, so that each byte
	 * is either in them or in an event sent later. Returns false when the
	 * run is already over (its done is on its way): then nothing is
	 * appended, and the follower should take no stream events (some of
	 * the run's are still on their way, the rest not) but the done, whose
	 * result holds the output. May be NULL (nothing kept: the stream is
	 * turned on without it).
	 */
	bool (*follow)(struct task *t, json_t *events);
	/*
	 * Loop thread, for a follower from the start that has replayed t's
	 * spool (exec/spool.h) up to byte at: 1 when the run has written no
	 * more, and then t's stream is on (as with follow: each byte is in
	 * the file before at, or in an event sent later), with *gap saying
	 * what of the output the file lacks (a cut spool); 0 when the file
	 * has grown (replay on); 3 when the file is read but the run streams
	 * and events of bytes in it have not reached the loop yet (ask again
	 * a moment later: a sink added now would get those bytes twice); 2
	 * when the run has not begun (the stream is on: everything comes
	 * live); -1 when the run is over (the file is whole: replay it to its
	 * end). NULL: the kind keeps no spool.
	 */
	int (*spool_catch_up)(struct task *t, uint64_t at, struct task_spool_gap *gap);
	/*
	 * Loop thread: len bytes for t's stdin (the input op) from connection
	 * conn, and eof when they are its last. Returns 0 (taken: *buffered
	 * bytes wait now; *dropped when the program had closed its stdin and
	 * they were thrown away), 1 (taken, and the buffer is full: the
	 * caller stops reading conn until task_input_release(conn)), or -1
	 * with *cause set (bad_request). NULL: the kind takes no input.
	 */
	int (*input)(struct task *t, const void *data, size_t len, bool eof, uint64_t conn,
	    size_t *buffered, bool *dropped, char **cause);
	/* Loop thread: frees kind_data. May be NULL. */
	void (*free)(struct task *t);
	/* run emits "started" itself (exec: when the process starts). */
	bool announces_start;
	/*
	 * run has effects outside tpd (exec: a program): with the journal on,
	 * its worker waits until the start is recorded before running it.
	 */
	bool effects;
	/*
	 * With effects: run does not wait for the record before it begins;
	 * it holds back what has effects itself, behind a start gate
	 * (task_start_gate_arm), and prepares the rest meanwhile.
	 */
	bool gates_start;
};

/* Who submitted a task, as its kind's parse may need it (exec's run_as = caller). */
struct task_caller {
	bool via_unix;              /* submitted on the Unix socket */
	bool have_creds;            /* ... with the peer's credentials known: */
	uid_t uid;
	gid_t gid;
};

/* What a kind's parse may read besides the request: task_parse's context. */
struct task_context {
	const struct conf_pool *pool_conf;  /* the pool's settings; NULL: built-in */
	struct task_caller caller;
};

struct task {
	uint64_t id;                /* the registry's, from submit on */
	const struct task_kind *kind;
	void *kind_data;
	uint64_t timeout_us;        /* 0 = none (the submit's timeout_ms) */
	uint64_t queue_timeout_ms;  /* 0 = none (the submit's), for the expired message */
	/*
	 * Its run sends started/output events (task_emit): from submit with
	 * stream, or from when a wait with stream follows it (set by the loop,
	 * read by the worker as it reads output).
	 */
	atomic_bool stream;
	struct pool_job job;        /* the pool's handle; job.arg == this task */

	/* for the kind's parse (loop thread), from its context */
	const struct conf_pool *pool_conf;
	struct task_caller caller;

	/* worker: the outcome, read by the loop thread after done */
	json_t *result;             /* NULL = no result */
	const char *error_code;     /* an ERR_* name; NULL on success */
	char *error_message;        /* malloc'd; NULL on success */

	/* set when the pool hands the task back, on the thread that ended it */
	enum pool_state state;
	uint64_t queued_us;
	uint64_t run_us;
	const char *final_state;    /* STATE_* of state */
	struct blob *done_text;     /* the done's body (proto_encode_done), shared */

	atomic_bool started;        /* set by the worker when run begins */
	bool notify_start;          /* the registry hears when the run begins (its hooks) */
	bool start_barrier;         /* the run waits for start_recorded (or its gate does) */
	bool start_recorded;        /* under task.c's record lock */
	bool start_gated;           /* under the record lock: start_gate_fd is armed */
	int start_gate_fd;          /* under the record lock: the gate's write end */
	bool start_gate_go;         /* under the record lock: GO was written to it */
	const char *submit_text;    /* task_options.submit_text: borrowed, in tasks_submit */
	size_t submit_len;

	/* the registry's (tasks.c), loop thread only */
	struct pools_entry *pool_entry; /* its pool; alive until this task's done */
	char *pool_name;
	char *owner;                /* "uid:N", "token:NAME", "tcp:anonymous", ...: set at submit */
	bool kept_elsewhere;        /* task_options.kept_elsewhere: not in the journal */
	uint32_t attempt;           /* its run's number, from 1 (journal on); 0: not counted */
	bool on_lost_rerun;         /* runs again after a crash rather than ending lost */
	uint64_t queued_before_us;  /* queued before a restart: added to its queued_ms */
	uint64_t accepted_wall_us;  /* wall clock, for the journal */
	void *jdata;                /* the journal's (durable.c) */
	char *label;                /* submit's label, "" when none */
	struct task *list_older, *list_newer; /* every registered task, by id (list) */
	struct task_sink *sinks;    /* where its events go: the submitter's first, then waits */
	struct task_sink **sinks_end; /* the last one's next (NULL: no sink yet) */
	unsigned nstreaming;        /* sinks on the list that want the stream events */
	/*
	 * bytes of stdout's [0] and stderr's [1] output events that reached the
	 * loop: a follower from the start replays what was kept up to there,
	 * the events still on their way bring the rest (each byte once)
	 */
	uint64_t streamed[2];
	bool start_seen;            /* the started hooks ran */
	bool finished;              /* done processed on the loop thread */
	uint64_t finished_us;
	uint64_t finished_wall_us;  /* when it ended, wall clock (a dependent's delay counts from it) */
	struct task *older, *newer; /* retention list of finished tasks */
	size_t retained_size;       /* what it counts against result_retain_bytes (tasks.c) */

	/* the registry's scheduling (tasks.c): delay, dependencies, retries, key */
	unsigned char sched;        /* TASKS_SCHED_* (tasks.c): where it is without a queue slot */
	bool cancel_asked;          /* tasks_cancel: no more attempts */
	bool after_any;             /* after_mode "any" */
	unsigned char retry_on;     /* PROTO_RETRY_* bits */
	unsigned short retries;     /* attempts after the first it may make */
	unsigned short nafter;      /* its dependencies (after), those not yet ended first */
	unsigned short after_left;  /* how many of them have not ended */
	uint64_t *after;            /* their ids (malloc'd); NULL: none */
	uint64_t skip_by;           /* a dependency that ended other than succeeded (after_mode ok) */
	uint64_t *dependents;       /* ids of the tasks waiting for this one (malloc'd) */
	uint32_t ndependents, dependents_cap;
	uint64_t delay_ms;          /* submit's delay_ms */
	uint64_t retry_delay_ms, retry_delay_max_ms;
	uint64_t due_wall_us;       /* scheduled: enters its queue then (wall clock) */
	size_t heap_index;          /* scheduled: its place in the registry's heap of due times */
	struct task *due_next;      /* due with no room yet: its pool's list of them */
	char *key;                  /* submit's key, NULL: none */
	char *request;              /* the submit request as received (status's spec and submit) */
	size_t request_len;
	char *command;              /* list's command (tasks_command); NULL: its kind's name */

	/* task.c's: bytes of its stream events not yet taken (under its budget lock) */
	size_t stream_pending;
	struct mail done_mail;      /* the done's trip: no allocation on the hot path */
};

/*
 * What the loop thread does with what a task's worker hands back: the
 * registry's (tasks.c), set once at start.
 *   event   a stream event (started, output) and the bytes it weighs
 *           against the task's stream budget, to give back with
 *           task_stream_taken; or NULL event and 0: the run began (only
 *           for a task with notify_start)
 *   done    the task ended; its state, times and done_text are set
 */
struct task_handlers {
	void (*event)(struct task *t, json_t *event, size_t weight);
	void (*done)(struct task *t);
};
void task_set_handlers(const struct task_handlers *);

/* The kind named name, or NULL (task-kinds.c). */
const struct task_kind *task_kind_find(const char *name);

/* The kinds' names, "exec, echo, ...", for messages (task-kinds.c). */
const char *task_kind_names(void);

/*
 * Loop thread: a new task of kind, its spec parsed by the kind in ctx.
 * NULL with *msg set (the request's bad_request), or with *msg NULL when
 * memory ran out.
 */
struct task *task_parse(const struct task_kind *kind, json_t *spec,
    const struct task_context *ctx, char **msg);

/*
 * Loop thread: t, in no pool's hands, ended without running: its
 * done_text and final_state are set; its done reaches the registry's
 * handler on a later pass, as a run's does (so an answer sent now goes
 * first).
 */
void task_post_done(struct task *t);

/*
 * Loop thread: t's run ended and another follows (a retry): what the run
 * left (its done, result, error) goes, and the worker side starts as new
 * (not started, its start not recorded). Its kind's data is kept: a kind's
 * run reads it and leaves it as it was.
 */
void task_rearm(struct task *t);

/* Loop thread: frees a task the registry no longer has (or never had). */
void task_free(struct task *t);

/* Loop thread: what a finished task no longer needs (its kind's data, its outcome). */
void task_lighten(struct task *t);

/*
 * What the events about t say of it that does not change once it is
 * submitted (its id, its pool; next: owner, label, attempt): the part of
 * proto.h's struct proto_task that both the done (task_pool_done, on the
 * worker) and accepted and status (tasks_view, on the loop) carry. Any
 * thread.
 */
struct proto_task;
void task_describe(const struct task *t, struct proto_task *v);

/* The wire name of a terminal state (STATE_*). */
const char *task_state_name(enum pool_state state);

/* True once cancel was asked (worker side poll). */
bool task_cancelled(const struct task *t);

/* Sets t->error_code and a formatted t->error_message (worker side). */
void task_set_error(struct task *t, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/*
 * Worker thread: sends an event ("started", "output": proto.h's
 * proto_event_*) to the task's sink. Takes ownership of event; the loop
 * adds "id" and "task". weight is the bytes the event carries; while more
 * than the stream budget of this task's events wait for the loop thread,
 * the call blocks (or returns early, 0, once the task is cancelled or its
 * timeout passes), so a chatty task cannot fill memory. Returns 0.
 */
int task_emit(struct task *t, json_t *event, size_t weight);

/* Loop thread: weight bytes of t's stream events were taken; a blocked task_emit may go on. */
void task_stream_taken(struct task *t, size_t weight);

/*
 * Loop thread: t's start is recorded (durable.c, once its batch may be
 * seen); a worker waiting for it before the run (start_barrier) goes on.
 */
void task_start_recorded(struct task *t);

/*
 * The start gate of a kind with gates_start (exec): the run makes a pipe
 * and arms the gate with its write end (non-blocking); whatever holds the
 * effects back (exec: the child, before execve) reads one byte from the
 * read end. TASK_GATE_GO is written once the STARTED record may be seen
 * (task_start_recorded, on the loop thread, which never waits for the run);
 * TASK_GATE_STOP once the task is cancelled first (the pool's cancel hook):
 * then nothing with effects may happen. End of file (tpd died: every copy
 * of the write end is closed) means the same as STOP. The one byte is
 * written under the record lock, so at most once.
 */
#define TASK_GATE_STOP 0
#define TASK_GATE_GO 1
/*
 * Worker, for a start_barrier task of a gates_start kind: arms the gate
 * with fd. Returns -1 when armed (the byte comes later, through fd), else
 * what is known already, without touching fd: TASK_GATE_GO (the record is
 * there) or TASK_GATE_STOP (the task is cancelled).
 */
int task_start_gate_arm(struct task *t, int fd);
/*
 * Worker: nothing writes to the armed fd from now on (the caller may
 * close it). Returns true when TASK_GATE_GO was written to it.
 */
bool task_start_gate_disarm(struct task *t);

/*
 * Loop thread: a connection held because a task's stdin buffer was full
 * may be read again: calls the function set at start (the connection
 * layer's), which finds it by its number (it may be gone).
 */
void task_set_input_release(void (*fn)(uint64_t conn));
void task_input_release(uint64_t conn);

/* Any thread: wakes every task_emit blocked on its budget (after a cancel, at shutdown). */
void task_wake_streams(void);

/* Sets the stream budget (stream_budget) task_emit waits for; any thread may read it. */
void task_set_stream_budget(size_t bytes);

/* The kinds. */
extern const struct task_kind task_kind_echo;
extern const struct task_kind task_kind_sleep;
extern const struct task_kind task_kind_spin;
extern const struct task_kind task_kind_fail;
extern const struct task_kind task_kind_exec;

#endif
