/*
 * request-fuzzer.c: libFuzzer target for one request line. The input goes
 * through proto_parse_request; when it parses, through the reader of the
 * op it names (proto_read_hello, proto_read_submit, ...: the daemon's own
 * field tables and bounds, proto.c), and for a submit through the task
 * kind's parse (proto_read_task, task_kind_find of task-kinds.c,
 * kind->parse: exec's argv, env, cwd, stdin and output_limit checks, the
 * built-ins' fields). Nothing runs: no loop, no pool, no process.
 *
 * Beyond what ASan, UBSan and LeakSanitizer catch, it aborts when a promise
 * of proto.h or of the protocol breaks:
 *   - a line that fails gets bad_json or bad_request, with a message;
 *   - req->id is a string or an integer when set, and is set whenever the
 *     line is a JSON object with such an id (so the error can carry it);
 *   - every message (the parser's, a reader's, a kind's) is UTF-8 text: it
 *     goes out as a JSON string in an error event, and a message cut
 *     inside a character could not be sent at all;
 *   - what a reader accepts is within its bounds (PROTO_MAX_*), of the
 *     types it promises, and an error event quoting its message encodes;
 *   - an exec task that parses is fit to spawn (argv[0] non-empty, every
 *     env entry NAME=value, output_limit within its bounds).
 *
 * The worker side of task.h (task_cancelled, task_set_error, task_emit,
 * the start gate), which only a run calls, is replaced at the end by
 * functions that abort if reached.
 */
#include "config.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "exec/exec.h"
#include "proto/proto.h"
#include "task/task.h"
#include "base/utf8.h"
#include "wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void __attribute__((noreturn, format(printf, 1, 2)))
broken(const char *fmt, ...)
{
	va_list ap;

	fputs("request-fuzzer: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	abort();
}

/* A check's outcome: -1 has a message that can travel in an error event. */
static int
outcome(const char *what, int r, char *msg)
{
	if (r == -1) {
		if (msg == NULL)
			broken("%s failed without a message", what);
		if (!utf8_text(msg, strlen(msg)))
			broken("%s: message is not UTF-8 text: \"%s\"", what, msg);
	} else if (r != 0)
		broken("%s returned %d", what, r);
	free(msg);
	return r;
}

/* A getter's outcome on any member: a value in range, or a message. */
static int
check_string(json_t *obj, const char *key, bool required)
{
	const char *s = NULL;
	char *msg = NULL;

	return outcome(key, proto_get_string(obj, key, required, &s, &msg), msg);
}

static int
check_bool(json_t *obj, const char *key)
{
	bool b = false;
	char *msg = NULL;

	return outcome(key, proto_get_bool(obj, key, &b, &msg), msg);
}

static int
check_uint(json_t *obj, const char *key, bool required, uint64_t min, uint64_t max)
{
	uint64_t v = 0;
	char *msg = NULL;
	int r = outcome(key, proto_get_uint(obj, key, required, min, max, &v, &msg), msg);

	if (r == 0 && json_object_get(obj, key) != NULL && (v < min || v > max))
		broken("%s: %llu passed as within %llu..%llu", key, (unsigned long long)v,
		    (unsigned long long)min, (unsigned long long)max);
	return r;
}

static int
check_task_id(json_t *obj, const char *key)
{
	uint64_t id = 0;
	char *msg = NULL;
	int r = outcome(key, proto_get_task_id(obj, key, &id, &msg), msg);

	if (r == 0 && id == 0)
		broken("%s: task id 0 accepted", key);
	return r;
}

/* A reader's error is answered in an error event: its text must encode. */
static void
check_error_encodes(json_t *id, const char *msg)
{
	struct proto_text pt;

	proto_encode_error(&pt, id, ERR_BAD_REQUEST, msg);
	if (!proto_text_ok(&pt))
		broken("the error event for \"%s\" does not encode", msg);
	proto_text_free(&pt);
}

/* A reader's outcome: -1 with a message an error event can carry. */
static int
read_outcome(const struct request *req, const char *what, int r, char *msg)
{
	if (r == -1 && msg != NULL)
		check_error_encodes(req->id, msg);
	return outcome(what, r, msg);
}

/* A string the reader says is there must be one. */
static void
check_read_string(json_t *root, const char *key, const char *got, const char *dflt)
{
	json_t *v = json_object_get(root, key);

	if (v == NULL ? (dflt == NULL ? got != NULL : got == NULL || strcmp(got, dflt) != 0) :
	    (!json_is_string(v) || got != json_string_value(v)))
		broken("%s read as %s", key, got ? got : "NULL");
}

/* What the exec kind hands to the worker must be fit to spawn. */
static void
check_exec_task(const struct exec_task *x)
{
	if (x->argv == NULL || x->argv[0] == NULL || x->argv[0][0] == '\0')
		broken("exec task parsed without a program");
	if (x->env == NULL)
		broken("exec task parsed without an environment");
	for (char **e = x->env; *e != NULL; e++)
		if (strchr(*e, '=') == NULL || **e == '=')
			broken("exec env entry \"%s\" is not NAME=value", *e);
	if (x->cwd != NULL && x->cwd[0] == '\0')
		broken("exec task parsed with an empty cwd");
	if (x->output_limit < 1 || x->output_limit > x->settings->output_limit_max)
		broken("exec output_limit %zu out of 1..%zu", x->output_limit,
		    x->settings->output_limit_max);
	if (x->stdin_data == NULL && x->stdin_len != 0)
		broken("exec stdin of %zu bytes without data", x->stdin_len);
}

/* op-task.c's parse_task, without the registry. */
static void
check_task(json_t *spec)
{
	const struct task_kind *kind;
	struct proto_task_spec ts;
	struct task t;
	char *msg = NULL;
	int r;

	if (outcome("task", proto_read_task(spec, &ts, &msg), msg) == -1)
		return;
	if (ts.kind == NULL)
		broken("task parsed without a kind");
	if (ts.timeout_ms > PROTO_MAX_TIMEOUT_MS)
		broken("timeout_ms %llu passed", (unsigned long long)ts.timeout_ms);
	if ((kind = task_kind_find(ts.kind)) == NULL)
		return;
	memset(&t, 0, sizeof t);
	t.kind = kind;
	t.timeout_us = ts.timeout_ms * 1000;
	msg = NULL;
	r = outcome(kind->name, kind->parse(&t, spec, &msg), msg);
	if (r == 0 && t.kind_data == NULL)
		broken("%s task parsed without its data", kind->name);
	if (r == 0 && kind == &task_kind_exec)
		check_exec_task(t.kind_data);
	/* As task_parse does: a parse that failed may have left data behind too. */
	if (kind->free != NULL && t.kind_data != NULL)
		kind->free(&t);
}

/* The scheduling fields a submit was accepted with are within their bounds (proto.c). */
static void
check_submit_schedule(json_t *root, const struct proto_submit *sub)
{
	json_t *after = json_object_get(root, FIELD_AFTER);

	if (sub->delay_ms > WIRE_MAX_DELAY_MS)
		broken("delay_ms %llu passed", (unsigned long long)sub->delay_ms);
	if (sub->nafter > WIRE_MAX_AFTER || (after != NULL && sub->nafter == 0) ||
	    (after == NULL && sub->nafter != 0))
		broken("after read as %zu ids", sub->nafter);
	for (size_t i = 0; i < sub->nafter; i++) {
		if (sub->after[i] == 0)
			broken("after read the id 0");
		for (size_t k = 0; k < i; k++)
			if (sub->after[k] == sub->after[i])
				broken("after kept the id %llu twice",
				    (unsigned long long)sub->after[i]);
	}
	if (sub->after_any && sub->nafter == 0)
		broken("after_mode read without after");
	if (sub->retries > WIRE_MAX_RETRIES)
		broken("retries %u passed", sub->retries);
	if (sub->retry_on == 0 || (sub->retry_on & ~PROTO_RETRY_DEFAULT) != 0)
		broken("retry_on read as %#x", sub->retry_on);
	if (sub->retry_delay_ms > PROTO_MAX_RETRY_DELAY_MS ||
	    sub->retry_delay_max_ms > PROTO_MAX_RETRY_DELAY_MS)
		broken("a retry delay out of range passed");
	if (sub->key != NULL && (*sub->key == '\0' || strlen(sub->key) > WIRE_MAX_KEY))
		broken("a key of %zu bytes passed", strlen(sub->key));
	check_read_string(root, FIELD_KEY, sub->key, NULL);
}

/* op_submit's reading, in its order, and the field bits it relies on. */
static void
check_submit(const struct request *req)
{
	const char *const *fields = proto_request_fields(OP_SUBMIT);
	struct proto_submit sub;
	uint32_t present = 0;
	char *msg = NULL;

	if (fields == NULL)
		broken("no field table for submit");
	if (outcome("submit fields", proto_scan_fields(req->root, fields, "a submit request",
	    &present, &msg), msg) == 0)
		for (unsigned i = 0; fields[i] != NULL; i++)
			if (((present >> i) & 1) != (json_object_get(req->root, fields[i]) != NULL))
				broken("proto_scan_fields: bit %u (%s) is wrong", i, fields[i]);
	msg = NULL;
	if (read_outcome(req, "submit", proto_read_submit(req, &sub, &msg), msg) == -1)
		return;
	check_read_string(req->root, FIELD_POOL, sub.pool, WIRE_DEFAULT_POOL);
	if (sub.queue_timeout_ms > PROTO_MAX_TIMEOUT_MS)
		broken("queue_timeout_ms %llu passed", (unsigned long long)sub.queue_timeout_ms);
	if (sub.task == NULL || !json_is_object(sub.task))
		broken("submit read without a task object");
	check_submit_schedule(req->root, &sub);
	check_task(sub.task);
}

/* A list's filters are what the request said, its page within range. */
static void
check_list(const struct request *req)
{
	static const char *const states[] = {
		STATE_SCHEDULED, STATE_WAITING, STATE_QUEUED, STATE_RUNNING, STATE_SUCCEEDED,
		STATE_FAILED, STATE_TIMED_OUT, STATE_CANCELLED, STATE_EXPIRED, STATE_LOST,
		STATE_SKIPPED, NULL
	};
	json_t *root = req->root;
	struct proto_list l;
	char *msg = NULL;

	if (read_outcome(req, OP_LIST, proto_read_list(req, &l, &msg), msg) != 0)
		return;
	if (l.nstates > PROTO_LIST_MAX_STATES)
		broken("list read %zu states", l.nstates);
	for (size_t i = 0; i < l.nstates; i++) {
		size_t k = 0;
		while (states[k] != NULL && strcmp(states[k], l.states[i]) != 0)
			k++;
		if (states[k] == NULL)
			broken("list read the state \"%s\"", l.states[i]);
	}
	if (l.nstates == 0 && json_object_get(root, FIELD_STATE) != NULL)
		broken("list read a state filter as none");
	check_read_string(root, FIELD_POOL, l.pool, NULL);
	check_read_string(root, FIELD_OWNER, l.owner, NULL);
	check_read_string(root, FIELD_LABEL, l.label, NULL);
	if (l.limit < 1 || l.limit > WIRE_LIST_MAX)
		broken("list limit %llu read", (unsigned long long)l.limit);
	if (json_object_get(root, FIELD_BEFORE) != NULL && l.before == 0)
		broken("list before read as 0");
}

static void
check_op(const struct request *req)
{
	json_t *root = req->root;
	const char *op = req->op;
	char *msg = NULL;

	if (strcmp(op, OP_HELLO) == 0) {
		struct proto_hello h;
		if (read_outcome(req, op, proto_read_hello(req, &h, &msg), msg) == 0) {
			check_read_string(root, FIELD_TOKEN, h.token, NULL);
			check_read_string(root, FIELD_CLIENT, h.client, NULL);
		}
	} else if (strcmp(op, OP_PING) == 0 || strcmp(op, OP_STATS) == 0)
		read_outcome(req, op, proto_read_plain(req, &msg), msg);
	else if (strcmp(op, OP_SUBMIT) == 0)
		check_submit(req);
	else if (strcmp(op, OP_WAIT) == 0) {
		struct proto_wait w;
		if (read_outcome(req, op, proto_read_wait(req, &w, &msg), msg) == 0 &&
		    (w.task == 0 || (w.from != NULL && (!w.stream || strcmp(w.from, FROM_START) != 0))))
			broken("wait read task %llu stream %d from %s", (unsigned long long)w.task,
			    w.stream, w.from ? w.from : "NULL");
	} else if (strcmp(op, OP_LIST) == 0)
		check_list(req);
	else if (strcmp(op, OP_STATUS) == 0 || strcmp(op, OP_CANCEL) == 0) {
		uint64_t task = 0;
		if (read_outcome(req, op, proto_read_task_ref(req, &task, &msg), msg) == 0 &&
		    task == 0)
			broken("%s read task 0", op);
	} else if (strcmp(op, OP_RESIZE) == 0) {
		struct proto_resize rs;
		if (read_outcome(req, op, proto_read_resize(req, &rs, &msg), msg) == 0) {
			/* the range is the pool's (op_resize): the reader passes the integers on */
			json_t *size = json_object_get(root, FIELD_SIZE);
			json_t *min = json_object_get(root, FIELD_MIN), *max = json_object_get(root,
			    FIELD_MAX);
			if (rs.has_size == (rs.has_min || rs.has_max))
				broken("resize read size %d, min %d, max %d: one kind of bound, not "
				    "both or none", rs.has_size, rs.has_min, rs.has_max);
			if (rs.has_size && (!json_is_integer(size) || json_integer_value(size) != rs.size))
				broken("resize size %lld read", (long long)rs.size);
			if (rs.has_min && (!json_is_integer(min) || json_integer_value(min) != rs.min))
				broken("resize min %lld read", (long long)rs.min);
			if (rs.has_max && (!json_is_integer(max) || json_integer_value(max) != rs.max))
				broken("resize max %lld read", (long long)rs.max);
			check_read_string(root, FIELD_POOL, rs.pool, WIRE_DEFAULT_POOL);
		}
	} else if (strcmp(op, OP_PAUSE) == 0 || strcmp(op, OP_RESUME) == 0) {
		const char *pool = NULL;
		if (read_outcome(req, op, proto_read_pool_ref(req, &pool, &msg), msg) == 0)
			check_read_string(root, FIELD_POOL, pool, NULL);
	} else if (strcmp(op, OP_INPUT) == 0) {
		struct proto_input in;
		if (read_outcome(req, op, proto_read_input(req, &in, &msg), msg) == 0) {
			if (in.task == 0)
				broken("input read task 0");
			if (in.data == NULL && in.len != 0)
				broken("input read %zu bytes of no data", in.len);
			if (in.data == NULL && !in.eof)
				broken("input read neither data nor eof");
			free(in.decoded);
		}
	} else if (strcmp(op, OP_SHUTDOWN) == 0) {
		struct proto_shutdown sd;
		if (read_outcome(req, op, proto_read_shutdown(req, &sd, &msg), msg) == 0 &&
		    (sd.now ? strcmp(sd.mode, MODE_NOW) : strcmp(sd.mode, MODE_DRAIN)) != 0)
			broken("shutdown mode %s read as now=%d", sd.mode, sd.now);
	} else if (proto_request_fields(op) != NULL)
		broken("op %s has a field table but no check here", op);
}

/* Every getter on every member: each type of value meets each check once. */
static void
check_getters(json_t *root)
{
	const char *key;
	json_t *value;

	json_object_foreach(root, key, value) {
		check_string(root, key, false);
		check_bool(root, key);
		check_uint(root, key, false, 0, UINT64_MAX);
		check_task_id(root, key);
	}
}

/* The id the line carries, read by jansson alone (NULL if none usable). */
static json_t *
plain_id(const uint8_t *data, size_t size, json_t **root)
{
	json_t *id;

	/* a raw NUL is no JSON (jansson would stop reading a number there): bad_json, no id */
	if (memchr(data, '\0', size) != NULL) {
		*root = NULL;
		return NULL;
	}
	*root = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY,
	    NULL);
	if (*root == NULL || !json_is_object(*root))
		return NULL;
	id = json_object_get(*root, "id");
	return json_is_string(id) || json_is_integer(id) ? id : NULL;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct request req;
	const char *code = NULL;
	char *msg = NULL;
	json_t *root, *id = plain_id(data, size, &root);
	int r;

	r = proto_parse_request((const char *)data, size, &req, &code, &msg);
	if (req.id != NULL && !json_is_string(req.id) && !json_is_integer(req.id))
		broken("req->id is neither a string nor an integer");
	if (id != NULL && (req.id == NULL || !json_equal(id, req.id)))
		broken("the line's id is lost (the request %s)", r == 0 ? "parsed" : msg);
	if (r == -1) {
		if (code == NULL || (strcmp(code, ERR_BAD_JSON) != 0 &&
		    strcmp(code, ERR_BAD_REQUEST) != 0))
			broken("proto_parse_request failed with code %s", code ? code : "NULL");
		outcome("proto_parse_request", r, msg);
	} else {
		if (outcome("proto_parse_request", r, msg) == 0 && req.op == NULL)
			broken("a request parsed without an op");
		check_getters(req.root);
		check_op(&req);
	}
	proto_request_free(&req);
	json_decref(root);
	return 0;
}

/* ------------------------------------------------------------------
 * task.h's worker side, which only a run calls: never reached here.
 */

bool
task_cancelled(const struct task *t)
{
	broken("task_cancelled called: task %llu is running", (unsigned long long)t->id);
}

void
task_set_error(struct task *t, const char *code, const char *fmt, ...)
{
	broken("task_set_error(%s) called: task %llu is running", code,
	    (unsigned long long)t->id);
}

int
task_emit(struct task *t, json_t *event, size_t weight)
{
	broken("task_emit called: task %llu is running", (unsigned long long)t->id);
}

int
task_start_gate_arm(struct task *t, int fd)
{
	(void)fd;
	broken("task_start_gate_arm called: task %llu is starting", (unsigned long long)t->id);
}

bool
task_start_gate_disarm(struct task *t)
{
	broken("task_start_gate_disarm called: task %llu is starting", (unsigned long long)t->id);
}

/* A streamed stdin's hand-offs (exec-input.c): only a run makes them, never reached here. */
void
mailbox_post(struct mail *m)
{
	(void)m;
	broken("mailbox_post called: a streamed stdin is being fed");
}

void
task_input_release(uint64_t conn)
{
	broken("task_input_release called for connection %llu", (unsigned long long)conn);
}
