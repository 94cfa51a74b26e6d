/*
 * proto.h: the protocol's text, both ways. Requests come in as JSON lines
 * and are read into one struct per op (proto.c); events go out as JSON
 * lines written by one encoder per event (proto-encode.c). Both use the
 * names of common/wire.h, so a renamed field is a compile error on both
 * sides (tpd and tpctl). Errors are messages a person can act on, naming
 * the field.
 *
 * Adding an op (say "list"): its name in wire.h (OP_LIST); its fields and
 * a reader here (struct proto_list, proto_read_list, and its row of the
 * field table in proto.c); its event's encoder here (proto_encode_list in
 * proto-encode.c); its handler in the op-*.c of its concern; and its row in
 * ops.c's table, with the role it needs. Adding a field to the events about
 * a task (owner, label, attempt, usage): a member of struct proto_task,
 * filled by task_describe (task.c) when it is fixed at submit (owner,
 * label, attempt), or by task_pool_done (the done) and tasks_view (status,
 * once finished) when the run gives it (usage), and written by the
 * encoders of accepted, status and done below.
 */
#ifndef TPD_PROTO_H
#define TPD_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "pool/pool.h"
#include "wire.h"

struct blob;

/* ------------------------------------------------------------ requests (proto.c) */

#define PROTO_MAX_TIMEOUT_MS (30ull * 24 * 3600 * 1000) /* timeout_ms, queue_timeout_ms: a month */

struct request {
	const char *line;   /* the line as received (borrowed: for the time of its dispatch) */
	size_t len;
	json_t *root;       /* the whole request object (owned) */
	json_t *id;         /* borrowed from root; NULL when absent */
	const char *op;     /* borrowed from root */
};

/*
 * Parses one line. Returns 0, or -1 with *code (ERR_BAD_JSON or
 * ERR_BAD_REQUEST) and *msg (caller frees) set; req->id is set whenever the
 * line was an object with a usable id, so the error can carry it (a line
 * nested deeper than WIRE_MAX_DEPTH too, when it is JSON apart from that).
 */
int proto_parse_request(const char *line, size_t len, struct request *req,
    const char **code, char **msg);

void proto_request_free(struct request *req);

/*
 * The readers of each op's fields. Each returns 0 with the struct filled
 * (strings borrowed from req), or -1 with *msg set (caller frees): the
 * request is answered bad_request with it. They check that every field is
 * one the op knows, of its type and within its bounds, in the order a
 * client meets them; nothing else (a pool's existence is the op's).
 */

/* hello: token and client, each NULL when absent. */
struct proto_hello {
	const char *token;
	const char *client;
};
int proto_read_hello(const struct request *, struct proto_hello *, char **msg);

/* ping and stats: no fields of their own. */
int proto_read_plain(const struct request *, char **msg);

/* submit's own fields; the task object's are read by proto_read_task. */
struct proto_submit {
	const char *pool;           /* WIRE_DEFAULT_POOL when absent */
	bool detach;
	bool stream;
	uint64_t queue_timeout_ms;  /* 0: none */
	bool on_lost_rerun;         /* on_lost: "rerun" */
	const char *label;          /* "" when absent; at most WIRE_MAX_LABEL bytes */
	json_t *task;               /* the task object (borrowed) */
	/* scheduling (doc/protocol.md "Delay, dependencies, retries, keys") */
	uint64_t delay_ms;          /* 0: none */
	uint64_t after[WIRE_MAX_AFTER]; /* the dependencies, each once, in the order given */
	size_t nafter;
	bool after_any;             /* after_mode "any" */
	unsigned retries;           /* 0..WIRE_MAX_RETRIES */
	unsigned retry_on;          /* PROTO_RETRY_* bits */
	uint64_t retry_delay_ms;    /* before attempt 2; doubled for each later one */
	uint64_t retry_delay_max_ms;
	const char *key;            /* NULL: none; 1..WIRE_MAX_KEY bytes */
	int priority;               /* WIRE_PRIORITY_MIN..MAX, 0 when absent */
	const char *admission;      /* NULL (the pool's), ADMISSION_REJECT or ADMISSION_WAIT */
	uint64_t admission_timeout_ms; /* 0: the pool's admission_timeout */
};
#define PROTO_RETRY_FAILED    0x1u
#define PROTO_RETRY_TIMED_OUT 0x2u
#define PROTO_RETRY_LOST      0x4u
#define PROTO_RETRY_DEFAULT   (PROTO_RETRY_FAILED | PROTO_RETRY_TIMED_OUT | PROTO_RETRY_LOST)
#define PROTO_RETRY_DELAY_MS  1000
#define PROTO_RETRY_DELAY_MAX_MS 300000
#define PROTO_MAX_RETRY_DELAY_MS (24ull * 3600 * 1000)  /* retry_delay(_max)_ms: a day */
int proto_read_submit(const struct request *, struct proto_submit *, char **msg);

/* The fields of a task object every kind has; the kind's parse reads the rest. */
struct proto_task_spec {
	const char *kind;
	uint64_t timeout_ms;        /* 0: none */
};
int proto_read_task(json_t *spec, struct proto_task_spec *, char **msg);

/* wait: the task, and whether to follow its stream (from the output kept so far). */
struct proto_wait {
	uint64_t task;
	bool stream;
	const char *from;           /* NULL, or FROM_START */
};
int proto_read_wait(const struct request *, struct proto_wait *, char **msg);

/*
 * input: bytes for a stdin_stream task's stdin (data, or data_base64
 * decoded: malloc'd, the caller frees it), and whether they are its last.
 */
struct proto_input {
	uint64_t task;
	const char *data;           /* borrowed from the request, or NULL */
	size_t len;
	unsigned char *decoded;     /* data_base64's bytes (data points here too) */
	bool eof;
};
int proto_read_input(const struct request *, struct proto_input *, char **msg);

/* status and cancel: the task they name. */
int proto_read_task_ref(const struct request *, uint64_t *task, char **msg);

/* list: its filters (NULL: any) and its page. */
#define PROTO_LIST_MAX_STATES 16
struct proto_list {
	const char *states[PROTO_LIST_MAX_STATES]; /* STATE_* names; nstates 0: any */
	size_t nstates;
	const char *pool;
	const char *owner;
	const char *label;
	uint64_t limit;             /* 1..WIRE_LIST_MAX, WIRE_LIST_DEFAULT when absent */
	uint64_t before;            /* 0: from the newest; else tasks older than this id */
};
int proto_read_list(const struct request *, struct proto_list *, char **msg);

struct proto_resize {
	int64_t size;               /* any integer: the op checks it against the pool's limit */
	int64_t min, max;           /* the bounds asked for, when has_min / has_max */
	bool has_size, has_min, has_max;  /* size, or min and/or max (not both kinds) */
	const char *pool;           /* WIRE_DEFAULT_POOL when absent */
};
int proto_read_resize(const struct request *, struct proto_resize *, char **msg);

/* pause and resume: the pool (required). */
int proto_read_pool_ref(const struct request *, const char **pool, char **msg);

struct proto_shutdown {
	const char *mode;           /* MODE_DRAIN or MODE_NOW */
	bool now;
};
int proto_read_shutdown(const struct request *, struct proto_shutdown *, char **msg);

/* The fields op may have (NULL-terminated), or NULL for an op not in the table. */
const char *const *proto_request_fields(const char *op);

/* Fails naming the first key of obj not in allowed (NULL-terminated). */
int proto_check_fields(json_t *obj, const char *const *allowed, const char *where, char **msg);
/* proto_check_fields, also setting bit i of *present when allowed[i] is there (i < 32). */
int proto_scan_fields(json_t *obj, const char *const *allowed, const char *where,
    uint32_t *present, char **msg);

/* Each getter: absent and not required leaves *out unchanged and returns 0. */
int proto_get_string(json_t *obj, const char *key, bool required, const char **out, char **msg);
int proto_get_bool(json_t *obj, const char *key, bool *out, char **msg);
int proto_get_uint(json_t *obj, const char *key, bool required, uint64_t min, uint64_t max,
    uint64_t *out, char **msg);

/* A task id: a positive integer (or a string of digits, as tpctl users type them). */
int proto_get_task_id(json_t *obj, const char *key, uint64_t *out, char **msg);

/* Deepest nesting of arrays and objects in a JSON text (strings skipped). */
size_t proto_json_depth(const char *text, size_t len);

/* ------------------------------------------------------------ events (proto-encode.c) */

/*
 * The text of one event, as one line without its newline. An encoder
 * starts it (no init needed) and writes the whole event; the text lives in
 * the struct's own buffer, or on the heap once it outgrows it
 * (proto_text_free). When memory ran out or a value could not be encoded
 * (a string that is not UTF-8), proto_text_ok is false and the text must
 * not be sent; event and id say what it was, for the error that replaces
 * it (proto_encode_unsent).
 */
#define PROTO_TEXT_INLINE 512

struct proto_text {
	char *data;                 /* the text: inline, or heap->data */
	size_t len;
	size_t cap;
	struct blob *heap;
	bool nomem;
	bool unencodable;
	unsigned depth;             /* objects and arrays open */
	uint32_t members;           /* bit d: the container at depth d has a member */
	const char *event;          /* the event's name (static) */
	json_t *id;                 /* its request's id (borrowed), or NULL */
	char inline_buf[PROTO_TEXT_INLINE];
};

static inline bool
proto_text_ok(const struct proto_text *pt)
{
	return !pt->nomem && !pt->unencodable;
}

/* An empty text (the encoders start theirs themselves). */
void proto_text_init(struct proto_text *);

/* Frees what the text took on the heap; it is empty again. */
void proto_text_free(struct proto_text *);

/*
 * What the events about one task say of it: task_describe and tasks_view
 * fill it for accepted and status, task_pool_done for the done, whose text
 * is written from it on the worker that ended the task. New fields of
 * those events go here.
 */
struct proto_task {
	uint64_t id;
	const char *pool;           /* its pool's name */
	const char *owner;          /* who it belongs to (status); NULL: not known */
	const char *label;          /* submit's label (status, list); NULL: none */
	const char *kind;           /* its kind's name (list) */
	const char *state;          /* STATE_*: queued, running or its terminal state */
	unsigned queued_ahead;      /* accepted: tasks ahead of it in the queue */
	int priority;               /* status, list: -1000..1000 */
	bool finished;              /* queued_us and run_us are known */
	bool times_so_far;          /* ... or, for an unfinished task, its times until now */
	uint64_t queued_us;
	uint64_t run_us;
	uint32_t attempt;           /* done: its run's number (journal on), 0 = not said */
	json_t *result;             /* done: the result, NULL = none */
	const char *error_code;     /* done: ERR_*, NULL = no error */
	const char *error_message;
	bool duplicate;             /* accepted: an existing task, found by its key */
	const char *command;        /* list: what it runs (tasks.h's tasks_command) */
	json_t *spec;               /* status: the task object as submitted (borrowed), or NULL */
	json_t *submit;             /* status: the other submit fields (borrowed), or NULL */
	const uint64_t *after;      /* status: the dependencies not yet ended */
	size_t nafter;
	bool due;                   /* status: a scheduled task, due in due_us */
	uint64_t due_us;
};

struct pool_snapshot;

/* The figures of one pool in stats (pool.h's snapshot, borrowed). */
struct proto_pool_stats {
	const char *name;
	const struct pool_snapshot *s;
	bool removed;
	/* the task layer's (tasks.h's struct tasks_pool_figures) */
	uint64_t scheduled, waiting, retried, skipped;
	const char *admission;      /* ADMISSION_* */
	unsigned held;              /* submits held now (admission = wait) */
};

struct proto_stats {
	const struct proto_pool_stats *pools;
	size_t npools;
	uint64_t connections;
	uint64_t uptime_ms;
	uint64_t tasks_outstanding;
	uint64_t tasks_retained;
	uint64_t tasks_retained_bytes;
	uint64_t results_forgotten;
	const char *version;
	const char *containment;    /* CONTAINMENT_* */
	const char *phase;          /* PHASE_* */
	const char *tcp_auth;       /* TCP_AUTH_* */
	json_t *journal;            /* the journal's object (durable_stats_json; borrowed) */
	json_t *loop;               /* the loop's pauses (borrowed), or NULL */
	json_t *spool;              /* exec output files (borrowed), or NULL: spooling off */
	json_t *sources;            /* an array, one object per [source NAME] (borrowed) */
	const char *const *warnings; /* what is open too wide (auth_warnings) */
	size_t nwarnings;
};

/*
 * The encoders, one per event; id is the request's (NULL: none). The
 * daemon's own durations (queued_ms, run_ms, oldest_queued_ms) are written
 * with three decimals (microseconds), any other number in the shortest
 * form that reads back as the same value.
 */
void proto_encode_pong(struct proto_text *, json_t *id);
void proto_encode_hello(struct proto_text *, json_t *id, const char *role);
void proto_encode_accepted(struct proto_text *, json_t *id, const struct proto_task *);
void proto_encode_rejected(struct proto_text *, json_t *id, const char *code, const char *message);
void proto_encode_error(struct proto_text *, json_t *id, const char *code, const char *message);
void proto_encode_status(struct proto_text *, json_t *id, const struct proto_task *);
void proto_encode_stats(struct proto_text *, json_t *id, const struct proto_stats *);
/* ok to cancel: the task and its state after the cancel. */
/* input's answer: the bytes the task's stdin buffer holds now; stdin_closed when dropped. */
void proto_encode_input_ok(struct proto_text *, json_t *id, uint64_t task, size_t buffered,
    bool stdin_closed);
/*
 * cut: a replay of stream of task (wait from "start") is missing bytes:
 * kept were replayed of the seen the task wrote; message says why.
 */
void proto_encode_cut(struct proto_text *, json_t *id, uint64_t task, const char *stream,
    uint64_t kept, uint64_t seen, const char *message);
void proto_encode_cancelled(struct proto_text *, json_t *id, uint64_t task, const char *state);
/*
 * ok to resize: the pool, its new target and its workers now, its bounds,
 * and a note saying how long the new size lasts.
 */
void proto_encode_resized(struct proto_text *, json_t *id, const char *pool, unsigned target,
    unsigned workers, unsigned min_workers, unsigned max_workers, const char *note);

/* ok to pause or resume: the pool and its state now (POOL_STATE_*). */
void proto_encode_pool_state(struct proto_text *, json_t *id, const char *pool,
    const char *state);
/*
 * list: the tasks of one page (each as status has it, with its kind, and
 * times so far for an unfinished one: queued_us and run_us set, finished
 * false), newest first, and whether older ones may match too: then before,
 * the id to ask again before.
 */
void proto_encode_list(struct proto_text *, json_t *id, const struct proto_task *tasks,
    size_t ntasks, bool more, uint64_t before);
/* ok to shutdown: the mode. */
void proto_encode_shutting_down(struct proto_text *, json_t *id, const char *mode);

/*
 * A done is written once, on the worker that ended the task, as its body:
 * the text after "{" and the receiver's "id" (a blob, shared by every
 * receiver: blob.h). A result that cannot be encoded is replaced by an
 * internal error. Aborts when memory runs out: a done is never lost.
 */
struct blob *proto_encode_done(const struct proto_task *);

/*
 * What goes before a done's body for one receiver: {"id":ID, or { alone
 * when id is NULL.
 */
void proto_encode_done_head(struct proto_text *, json_t *id);

/*
 * The stream events of a running task, built on the worker as objects
 * (the exec kind adds the output's data: capture.h); the loop adds the
 * receiver's id and the task's number as it writes them
 * (proto_encode_stream). NULL when memory ran out.
 */
json_t *proto_event_started(int64_t pid);
json_t *proto_event_output(const char *stream);
void proto_encode_stream(struct proto_text *, json_t *event, json_t *id, uint64_t task);

/*
 * The answer that replaces an event that could not be sent (unsent is not
 * proto_text_ok): an error "internal" with its id, saying that the answer
 * could not be built or encoded. A long id that cannot be copied for lack
 * of memory gives way to null.
 */
void proto_encode_unsent(struct proto_text *, const struct proto_text *unsent);

/*
 * An error line written without allocating, into buf (size bytes), for a
 * client that has no connection yet (conn_refuse): id null; code and
 * message are plain text of the daemon's. Returns its length, 0 when it
 * does not fit.
 */
size_t proto_encode_refusal(char *buf, size_t size, const char *code, const char *message);

/*
 * Appends v's JSON text: the writer of every value the encoders carry
 * (ids, results, errors), exposed for the unit test.
 */
void proto_text_json(struct proto_text *, json_t *v);

#endif
