/*
 * tasks.h: the registry of the daemon's tasks, from submit to retention
 * (tasks.c; loop thread only): ids, submission with its options, the sinks
 * a task's events go to, the lifecycle hooks, and the finished tasks kept
 * for wait and status.
 *
 * Where a new source of tasks plugs in (a Redis stream consumer, say): it
 * parses a task (task_parse, task.h), submits it with struct task_options,
 * its own struct task_sink as the sink, and gets the task's stream events
 * and its done there, never through the op layer. Where a journal plugs
 * in: struct tasks_hooks, called at accepted, started and finished. Where a
 * new option of a submit goes (owner, label, attempt, on_lost): struct
 * task_options, copied onto the task by tasks_submit.
 */
#ifndef TPD_TASKS_H
#define TPD_TASKS_H

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "pool/pool.h"
#include "pool/pools.h"
#include "task.h"

struct proto_task;

/*
 * Where a task's events go: the connection that submitted it or waits for
 * it (conn-sink.c), or any other receiver. The registry calls these on the
 * loop thread; a sink is on one task's list, and belongs to the registry
 * once given to it (tasks_submit, tasks_add_sink) until release.
 */
struct task_sink;

struct task_sink_ops {
	/*
	 * A stream event of t (started, output: a JSON object without "id"
	 * and "task", proto_encode_stream adds them), for a sink that asked
	 * for them (stream). weight is what the event holds of t's stream
	 * budget: the sink gives it back with tasks_stream_taken(t->id,
	 * weight) once the event is out of its hands (sent, dropped), so a
	 * receiver that does not keep up pauses the task's output. event is
	 * borrowed.
	 */
	void (*event)(struct task_sink *, struct task *t, json_t *event, size_t weight);
	/* t finished: its done's body is t->done_text (shared; blob_hold it to keep it). */
	void (*done)(struct task_sink *, struct task *t);
	/* The registry lets go of the sink: after done, or when t goes without one. */
	void (*release)(struct task_sink *);
};

struct task_sink {
	const struct task_sink_ops *ops;
	bool stream;                /* wants the stream events: a submitter's, or a follower's */
	bool paces;                 /* its receiver paces the task (the submitter's stream only) */
	struct task_sink *next;     /* the registry's: the task's list */
};

/* What a submit asks besides the task itself. */
struct task_options {
	struct pools_entry *pool;   /* where it runs */
	struct task_sink *sink;     /* its submitter's, or NULL: detached (waits may find it) */
	bool stream;                /* started/output events to the sink */
	uint64_t timeout_ms;        /* 0: none */
	uint64_t queue_timeout_ms;  /* 0: none; past it a queued task ends expired */
	const char *owner;          /* who it belongs to: "uid:N", "token:NAME", ... (copied) */
	bool on_lost_rerun;         /* on_lost: "rerun" */
	/*
	 * kept elsewhere: its source delivers it again after a crash (a Redis
	 * stream's pending entry), so the journal leaves it out: replaying it
	 * too would run it twice, and its source's sink is gone after a restart.
	 */
	bool kept_elsewhere;
	/*
	 * the submit request as received, whose "task" is the task (the journal
	 * keeps it: a kind's parse may take fields out of the parsed object, and
	 * dumping the object again cost a tenth of the loop's time per submit)
	 */
	const char *submit_text;
	size_t submit_len;
	/* a task the journal brings back at start (durable.c); 0 for a new submit: */
	uint64_t id;                /* its id */
	uint32_t attempt;           /* its run's number (0: none counted) */
	uint64_t queued_before_us;  /* how long it was queued before the restart */
	uint64_t accepted_wall_us;  /* when it was first accepted, wall clock */
	/* what comes next goes here (label), onto the task */
	const char *label;          /* the client's name for it, NULL or "": none (copied) */
	/* scheduling (all zero: none): the submit's fields, proto.h's struct proto_submit */
	json_t *spec;               /* the task object (borrowed): list's command */
	uint64_t delay_ms;
	const uint64_t *after;      /* dependencies: ids of registered tasks (or forgotten ones) */
	size_t nafter;
	bool after_any;
	unsigned retries;
	unsigned retry_on;          /* PROTO_RETRY_* */
	uint64_t retry_delay_ms, retry_delay_max_ms;
	const char *key;            /* NULL: none (copied) */
	uint64_t due_wall_us;       /* the journal's replay: due then (wall clock), 0: by delay_ms */
	/* what comes next goes here, onto the task */
	int priority;               /* -1000..1000: higher starts first (pool.h) */
	bool may_wait;              /* refused for room, it is held: not counted rejected */
	/* what comes next goes here (attempt, on_lost), onto the task */
};

/*
 * The lifecycle hooks, each called in one place on the loop thread, in
 * the order they were added: accepted (tasks_submit, once the task has its
 * id and is in its pool's queue), started (its run began on a worker),
 * finished (its done is written and sent; t->done_text, t->final_state and
 * the times are set). Any of them may be NULL; a started hook costs one
 * more hand-off per task, so the tasks only report their start while one
 * is added.
 */
struct tasks_hooks {
	void (*accepted)(struct task *t, void *arg);
	void (*started)(struct task *t, void *arg);
	void (*finished)(struct task *t, void *arg);
	/* a finished task is no longer retained (tasks_prune): it is gone */
	void (*forgotten)(struct task *t, void *arg);
	void *arg;
};

#define TASKS_MAX_HOOKS 8

/*
 * The small number the pools know owner by (pool.h's job owner), given on
 * first sight and kept; 0 for NULL.
 */
uint32_t tasks_owner_number(const char *owner);

/* At start: the registry takes the tasks' hand-offs (task_set_handlers) and logs each task. */
int tasks_init(char **cause);

/* Adds hooks (copied; at most TASKS_MAX_HOOKS). Returns 0, or -1 with *cause set. */
int tasks_add_hooks(const struct tasks_hooks *hooks, char **cause);

/*
 * Submits t (parsed, not yet registered) as o says. On POOL_ACCEPTED the
 * task is registered with its id, its sink on its list, counted as
 * outstanding until its done; otherwise nothing changed, the caller still
 * owns t (task_free) and o->sink (its release).
 */
enum pool_verdict tasks_submit(struct task *t, const struct task_options *o);

/*
 * Copies a submit's scheduling fields (delay, after, retries, key) onto o,
 * borrowed from sub as o's other pointers are: the one place a submit and
 * the journal's replay of one read them from.
 */
struct proto_submit;
void tasks_options_schedule(struct task_options *o, const struct proto_submit *sub);

/*
 * Start, the journal's replay (durable.c): a task that ended before the
 * restart, retained again as it was (done_text is its done's body, state
 * its terminal state, finished_wall_us when it ended, wall clock), or one
 * that ends now without running (lost). t is a task_parse'd task or a
 * bare calloc'd one (kind NULL) with id, pool_name and owner set; the
 * registry takes it. Returns 0, or -1 (memory) with t freed.
 */
int tasks_restore_finished(struct task *t, struct blob *done_text, const char *state,
    uint64_t finished_wall_us);

/*
 * With the journal on (durable.c): a task whose kind has effects outside
 * tpd waits, on its worker, for task_start_recorded before its run.
 */
void tasks_set_start_barrier(bool on);

/* Calls fn for every task, running or retained (any order). */
void tasks_each(void (*fn)(struct task *t, void *arg), void *arg);

/* Ids continue from here (the journal's next id), never below what was given. */
void tasks_set_next_id(uint64_t next);

/* The next id a submit would get. */
uint64_t tasks_next_id(void);

/* The task with this id, running or retained, or NULL. */
struct task *tasks_find(uint64_t id);

/* The wire name of t's state now: queued, running, or its terminal state. */
const char *tasks_state(const struct task *t);

/* What the events about t say of it now (proto.h). */
void tasks_view(const struct task *t, struct proto_task *v);

/*
 * Sends t's done to sink too, when it finishes (t is not finished yet);
 * with sink->stream, its stream events from now on as well (a follower:
 * t's run starts sending them if it did not).
 */
void tasks_add_sink(struct task *t, struct task_sink *sink);

/*
 * A stream event of the task numbered id left its sink: weight bytes of
 * its stream budget are free again. Nothing when the task is gone or
 * finished (its budget went with it).
 */
void tasks_stream_taken(uint64_t id, size_t weight);

/*
 * list: up to max tasks matching l (every filter of it) that visible says
 * the asker may see, newest first, older than l->before when it is set,
 * viewed into out (times so far for unfinished ones; the views borrow from
 * the tasks until the registry next changes). Returns how many; *more
 * says whether older ones may match too, and *resume is then the id to
 * ask again before (the last task viewed, or the last one visited when
 * max_visit tasks were visited first: one request's walk is bounded, so a
 * storm of list does not stall the loop).
 */
struct proto_list;
size_t tasks_list(const struct proto_list *l, bool (*visible)(const struct task *, void *),
    void *arg, struct proto_task *out, size_t max, size_t max_visit, bool *more,
    uint64_t *resume);

/*
 * Asks t to stop (scheduled, waiting, queued: cancelled at once; running:
 * cancel flag). No attempt of it follows.
 */
void tasks_cancel(struct task *t);

/*
 * The door of every pool's queue: t (registered, not in a queue) enters
 * its pool's queue through pool_submit, here and nowhere else; its
 * queue_timeout counts from now. Returns the pool's verdict; on a refusal
 * t is where it was.
 */
enum pool_verdict tasks_enqueue(struct task *t);

/*
 * Room may have freed in e's queue: its due tasks enter, oldest due first,
 * until the pool refuses one (a room hook, pools.h).
 */
void tasks_pool_room(struct pools_entry *e);

/*
 * The task of owner with key, running or retained, or NULL (keys of
 * different owners never meet).
 */
struct task *tasks_find_key(const char *owner, const char *key);

/* Tasks scheduled or waiting now (max_scheduled bounds them). */
size_t tasks_scheduled_count(void);

/*
 * Shutdown: scheduled and waiting tasks hold no one. With keep (a drain
 * with the journal on) they stay as they are for the next start, no longer
 * outstanding, and get no done; otherwise they end cancelled now.
 */
void tasks_shutdown(bool keep);

/*
 * The hook the journal adds for retries: t's attempt ended and the next
 * is scheduled at t->due_wall_us (t->attempt is the next's number).
 */
void tasks_set_retry_hook(void (*fn)(struct task *t));

/*
 * What list shows as a task's command, from its task object: an exec
 * task's argv, each argument quoted as a POSIX shell needs it, cut at
 * WIRE_COMMAND_MAX bytes on a character boundary; NULL for a built-in
 * kind (its name says it) or when memory ran out.
 */
char *tasks_command(json_t *spec);

/*
 * status's spec and submit of t, from the request it was accepted with:
 * new references, or NULL when it is not known (a task the journal kept
 * from an older build).
 */
void tasks_request_view(const struct task *t, json_t **spec, json_t **submit);

/* Accepted tasks whose done is not yet processed. */
uint64_t tasks_outstanding(void);

/*
 * Drops finished tasks, oldest first: past result_ttl, beyond
 * result_retain, and while the retained cost more than result_retain_bytes.
 */
void tasks_prune(void);

/*
 * Which limit made the registry forget task id, for one of the latest
 * forgotten: TASKS_FORGOT_TTL (result_ttl), _COUNT (result_retain), _BYTES
 * (result_retain_bytes); 0 when not known.
 */
#define TASKS_FORGOT_TTL 1
#define TASKS_FORGOT_COUNT 2
#define TASKS_FORGOT_BYTES 3
int tasks_forgotten_why(uint64_t id);

/*
 * Forgets the oldest retained result (counted in results_forgotten), as
 * retention would; false when none is retained. The journal's room at
 * journal_max_bytes (durable.c).
 */
bool tasks_forget_oldest(void);

/* How many finished tasks are retained, and what they are counted for in bytes. */
size_t tasks_retained(void);
size_t tasks_retained_bytes(void);

/* Finished tasks forgotten before result_ttl to stay within result_retain_bytes. */
uint64_t tasks_results_forgotten(void);

/* True when id was given to an accepted task (which may have been forgotten since). */
bool tasks_was_accepted(uint64_t id);

/* Frees everything at exit. */
void tasks_free_all(void);

#endif
