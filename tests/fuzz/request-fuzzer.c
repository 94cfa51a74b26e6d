/*
 * request-fuzzer.c: libFuzzer target for one request line. The input goes
 * through proto_parse_request; when it parses, through the checks its op
 * applies to its fields (proto_scan_fields, proto_get_*), and for a submit
 * through the task kind's parse (task_kind_find, kind->parse: exec's argv,
 * env, cwd, stdin and output_limit checks, the built-ins' fields). Nothing
 * runs: no loop, no pool, no process.
 *
 * Beyond what ASan, UBSan and LeakSanitizer catch, it aborts when a promise
 * of proto.h or of the protocol breaks:
 *   - a line that fails gets bad_json or bad_request, with a message;
 *   - req->id is a string or an integer when set, and is set whenever the
 *     line is a JSON object with such an id (so the error can carry it);
 *   - every message (the parser's, a field check's, a kind's) is UTF-8
 *     text: it goes out as a JSON string in an error event, and a message
 *     cut inside a character could not be sent at all;
 *   - an exec task that parses is fit to spawn (argv[0] non-empty, every
 *     env entry NAME=value, output_limit within its bounds).
 *
 * The ops' field lists and bounds are those of ops.c, op-task.c and
 * op-admin.c, where they are static; keep them in step. tasks.c (which
 * needs the whole daemon) is replaced by the few functions at the end:
 * task_kind_find over the same kinds, and task_cancelled, task_set_error and
 * task_emit, which only a run calls and which abort if reached.
 */
#include "config.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "exec.h"
#include "proto.h"
#include "task.h"
#include "utf8.h"
#include "wire.h"

#define MAX_TIMEOUT_MS (30ull * 24 * 3600 * 1000)       /* op-task.c */
#define MAX_RESIZE (1u << 20)                           /* op-admin.c */

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

/* The request fields every op allows, then the op's own (NULL-terminated). */
static int
check_fields(json_t *root, const char *const *fields, const char *where)
{
	char *msg = NULL;

	return outcome(where, proto_check_fields(root, fields, where, &msg), msg);
}

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
check_uint(json_t *obj, const char *key, bool required, uint64_t min, uint64_t max,
    uint64_t *out)
{
	uint64_t v = 0;
	char *msg = NULL;
	int r = outcome(key, proto_get_uint(obj, key, required, min, max, &v, &msg), msg);

	if (r == 0 && json_object_get(obj, key) != NULL && (v < min || v > max))
		broken("%s: %llu passed as within %llu..%llu", key, (unsigned long long)v,
		    (unsigned long long)min, (unsigned long long)max);
	if (r == 0 && out != NULL)
		*out = v;
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

/* op-task.c's parse_task, without the task table. */
static void
check_task(json_t *spec)
{
	const struct task_kind *kind;
	const char *kind_name = NULL;
	uint64_t timeout_ms = 0;
	struct task t;
	char *msg = NULL;
	int r;

	if (outcome("kind", proto_get_string(spec, "kind", true, &kind_name, &msg), msg) == -1 ||
	    check_uint(spec, "timeout_ms", false, 1, MAX_TIMEOUT_MS, &timeout_ms) == -1)
		return;
	if (kind_name == NULL)
		broken("task parsed without a kind");
	if ((kind = task_kind_find(kind_name)) == NULL)
		return;
	memset(&t, 0, sizeof t);
	t.kind = kind;
	t.timeout_us = timeout_ms * 1000;
	msg = NULL;
	r = outcome(kind->name, kind->parse(&t, spec, &msg), msg);
	if (r == 0 && t.kind_data == NULL)
		broken("%s task parsed without its data", kind->name);
	if (r == 0 && kind == &task_kind_exec)
		check_exec_task(t.kind_data);
	/* As tasks_discard: a parse that failed may have left data behind too. */
	if (kind->free != NULL && t.kind_data != NULL)
		kind->free(&t);
}

/* op_submit's checks, in its order. */
static void
check_submit(json_t *root)
{
	static const char *const fields[] = { "op", "id", "task", "pool", "detach", "stream",
	    "queue_timeout_ms", NULL };
	uint32_t present = 0;
	char *msg = NULL;
	json_t *spec;

	if (outcome("submit", proto_scan_fields(root, fields, "a submit request", &present,
	    &msg), msg) == -1)
		return;
	for (unsigned i = 0; fields[i] != NULL; i++)
		if (((present >> i) & 1) != (json_object_get(root, fields[i]) != NULL))
			broken("proto_scan_fields: bit %u (%s) is wrong", i, fields[i]);
	if (check_string(root, "pool", false) == -1 || check_bool(root, "detach") == -1 ||
	    check_bool(root, "stream") == -1 ||
	    check_uint(root, "queue_timeout_ms", false, 1, MAX_TIMEOUT_MS, NULL) == -1)
		return;
	spec = json_object_get(root, "task");
	if (spec != NULL && json_is_object(spec))
		check_task(spec);
}

static void
check_op(const struct request *req)
{
	static const char *const plain[] = { "op", "id", NULL };
	static const char *const by_task[] = { "op", "id", "task", NULL };
	static const char *const hello[] = { "op", "id", "token", "client", NULL };
	static const char *const resize[] = { "op", "id", "size", "pool", NULL };
	static const char *const shutdown[] = { "op", "id", "mode", NULL };
	json_t *root = req->root;
	const char *op = req->op;

	if (strcmp(op, OP_HELLO) == 0) {
		if (check_fields(root, hello, "a hello request") == 0 &&
		    check_string(root, "token", false) == 0)
			check_string(root, "client", false);
	} else if (strcmp(op, OP_PING) == 0 || strcmp(op, OP_STATS) == 0)
		check_fields(root, plain, "a ping or stats request");
	else if (strcmp(op, OP_SUBMIT) == 0)
		check_submit(root);
	else if (strcmp(op, OP_WAIT) == 0 || strcmp(op, OP_STATUS) == 0 ||
	    strcmp(op, OP_CANCEL) == 0) {
		if (check_fields(root, by_task, "a wait, status or cancel request") == 0)
			check_task_id(root, "task");
	} else if (strcmp(op, OP_RESIZE) == 0) {
		if (check_fields(root, resize, "a resize request") == 0 &&
		    check_uint(root, "size", true, 1, MAX_RESIZE, NULL) == 0)
			check_string(root, "pool", false);
	} else if (strcmp(op, OP_SHUTDOWN) == 0) {
		if (check_fields(root, shutdown, "a shutdown request") == 0)
			check_string(root, "mode", false);
	}
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
		check_uint(root, key, false, 0, UINT64_MAX, NULL);
		check_task_id(root, key);
	}
}

/* The id the line carries, read by jansson alone (NULL if none usable). */
static json_t *
plain_id(const uint8_t *data, size_t size, json_t **root)
{
	json_t *id;

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
 * tasks.c's part, for the parse functions only.
 */

static const struct task_kind *const kinds[] = {
	&task_kind_exec, &task_kind_echo, &task_kind_sleep, &task_kind_spin, &task_kind_fail,
};

const struct task_kind *
task_kind_find(const char *name)
{
	for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
		if (strcmp(kinds[i]->name, name) == 0)
			return kinds[i];
	return NULL;
}

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
