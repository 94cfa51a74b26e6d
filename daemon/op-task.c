/* op-task.c: the ops about tasks: submit, wait, status, cancel. */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf.h"
#include "daemon.h"
#include "fmt.h"
#include "ops.h"
#include "pools.h"
#include "tasks.h"
#include "utf8.h"
#include "wire.h"

#define MAX_TIMEOUT_MS (30ull * 24 * 3600 * 1000) /* a month */

static void send_rejected(struct conn *, struct request *, const char *, const char *, ...)
    __attribute__((format(printf, 4, 5)));

static void
send_rejected(struct conn *c, struct request *req, const char *code, const char *fmt, ...)
{
	char msg[256];
	va_list ap;

	va_start(ap, fmt);
	utf8_vformat(msg, sizeof msg, fmt, ap); /* never cut inside a character */
	va_end(ap);
	ops_reply(c, req, EV_REJECTED, json_pack("{s:{s:s, s:s}}", "error", "code", code,
	    "message", msg));
}

/* Reads the request's "task" object into a new task; NULL after answering the error. */
static struct task *
parse_task(struct conn *c, struct request *req, json_t *spec, const struct pools_entry *e)
{
	const struct task_kind *kind;
	const char *kind_name = NULL;
	uint64_t timeout_ms = 0;
	struct task *t;
	char *msg = NULL;

	if (proto_get_string(spec, "kind", true, &kind_name, &msg) == -1 ||
	    proto_get_uint(spec, "timeout_ms", false, 1, MAX_TIMEOUT_MS, &timeout_ms, &msg) == -1) {
		ops_bad_request(c, req, msg);
		return NULL;
	}
	if ((kind = task_kind_find(kind_name)) == NULL) {
		char q[UTF8_QUOTE_SIZE];
		conn_send_error(c, req->id, ERR_BAD_REQUEST, "unknown task kind \"%s\" "
		    "(kinds: exec, echo, sleep, spin, fail)", utf8_quote(q, kind_name));
		return NULL;
	}
	if ((t = tasks_new(kind)) == NULL) {
		conn_send_error(c, req->id, ERR_INTERNAL, "out of memory");
		return NULL;
	}
	t->timeout_us = timeout_ms * 1000;
	/* what the kind may need: the pool's settings (run_as, limits) and the submitter */
	t->pool_conf = conf_pool_find(&daemon_state->conf, e->name);
	t->via_unix = c->is_unix;
	t->have_creds = c->is_unix && c->have_creds;
	t->uid = c->uid;
	t->gid = c->gid;
	if (kind->parse(t, spec, &msg) == -1) {
		tasks_discard(t);
		ops_bad_request(c, req, msg);
		return NULL;
	}
	return t;
}

void
op_submit(struct conn *c, struct request *req)
{
	/* Only the fields a request has are looked up: bit F_x of present says x is there. */
	enum { F_OP, F_ID, F_TASK, F_POOL, F_DETACH, F_STREAM, F_QUEUE_TIMEOUT, F_COUNT };
	static const char *const fields[F_COUNT + 1] = { [F_OP] = "op", [F_ID] = "id",
	    [F_TASK] = "task", [F_POOL] = "pool", [F_DETACH] = "detach", [F_STREAM] = "stream",
	    [F_QUEUE_TIMEOUT] = "queue_timeout_ms", [F_COUNT] = NULL };
	uint32_t present = 0;
	const char *pool_name = WIRE_DEFAULT_POOL;
	bool detach = false, stream = false;
	uint64_t queue_timeout_ms = 0;
	struct pools_entry *e;
	json_t *spec;
	struct task *t;
	char *msg = NULL;

	if (proto_scan_fields(req->root, fields, "a submit request", &present, &msg) == -1 ||
	    ((present & 1u << F_POOL) &&
	    proto_get_string(req->root, "pool", false, &pool_name, &msg) == -1) ||
	    ((present & 1u << F_DETACH) && proto_get_bool(req->root, "detach", &detach, &msg) == -1) ||
	    ((present & 1u << F_STREAM) && proto_get_bool(req->root, "stream", &stream, &msg) == -1) ||
	    ((present & 1u << F_QUEUE_TIMEOUT) &&
	    proto_get_uint(req->root, "queue_timeout_ms", false, 1, MAX_TIMEOUT_MS,
	    &queue_timeout_ms, &msg) == -1)) {
		ops_bad_request(c, req, msg);
		return;
	}
	spec = json_object_get(req->root, "task");
	if (spec == NULL || !json_is_object(spec)) {
		conn_send_error(c, req->id, ERR_BAD_REQUEST, spec == NULL ?
		    "missing field \"task\"" : "field \"task\" must be an object");
		return;
	}
	if ((e = pools_find(pool_name)) == NULL) {
		char q[UTF8_QUOTE_SIZE];
		send_rejected(c, req, ERR_NO_SUCH_POOL, "no pool named \"%s\"", utf8_quote(q, pool_name));
		return;
	}
	const struct conf_pool *cp = conf_pool_find(&daemon_state->conf, e->name);
	if (cp != NULL && cp->run_as == CONF_RUN_AS_CALLER && !(c->is_unix && c->have_creds)) {
		conn_send_error(c, req->id, ERR_FORBIDDEN, "pool %s runs tasks as their caller "
		    "(run_as = caller): submit on the Unix socket", e->name);
		return;
	}
	if ((t = parse_task(c, req, spec, e)) == NULL)
		return;
	t->stream = stream;
	if (queue_timeout_ms != 0)
		t->job.queue_deadline_us = clock_now_us() + queue_timeout_ms * 1000;
	switch (tasks_submit(t, e, c, req->id, detach)) {
	case POOL_ACCEPTED:
		break;
	case POOL_REJECTED_CLOSED:
		tasks_discard(t);
		send_rejected(c, req, ERR_CLOSED, "pool %s is closed: tpd is shutting down", e->name);
		return;
	case POOL_REJECTED_FULL:
		tasks_discard(t);
		send_rejected(c, req, ERR_QUEUE_FULL, "pool %s is full: every worker is busy "
		    "and its queue is at capacity", e->name);
		return;
	}
	/* The answer comes before the done: the done is handled on a later loop turn. */
	/* Pool names are at most CONF_POOL_NAME_MAX safe characters: this fits. */
	char ev_fields[96 + CONF_POOL_NAME_MAX];
	struct fmt f = fmt_init(ev_fields, sizeof ev_fields - 1);
	fmt_str(&f, "\"task\":");
	fmt_u64(&f, t->id);
	fmt_str(&f, ",\"pool\":");
	fmt_str(&f, e->name_json);
	fmt_str(&f, ",\"queued\":");
	fmt_u64(&f, t->job.queued_ahead);
	*f.p = '\0';
	ops_reply_fields(c, req->id, EV_ACCEPTED, ev_fields);
}

/* The task a request names; NULL after answering no_such_task. */
static struct task *
find_task(struct conn *c, struct request *req, const char *what)
{
	static const char *const fields[] = { "op", "id", "task", NULL };
	uint64_t id = 0;
	struct task *t;
	char *msg = NULL;

	if (proto_check_fields(req->root, fields, what, &msg) == -1 ||
	    proto_get_task_id(req->root, "task", &id, &msg) == -1) {
		ops_bad_request(c, req, msg);
		return NULL;
	}
	if ((t = tasks_find(id)) == NULL) {
		const struct conf *cf = &daemon_state->conf;
		if (tasks_was_accepted(id))
			conn_send_error(c, req->id, ERR_NO_SUCH_TASK, "task %llu finished and was "
			    "forgotten, to stay under the limits on finished tasks: result_ttl "
			    "(%llu ms), result_retain (%u tasks), result_retain_bytes (%zu bytes)",
			    (unsigned long long)id, (unsigned long long)cf->result_ttl_ms,
			    cf->result_retain, cf->result_retain_bytes);
		else
			conn_send_error(c, req->id, ERR_NO_SUCH_TASK, "no task %llu: never "
			    "submitted", (unsigned long long)id);
	}
	return t;
}

void
op_wait(struct conn *c, struct request *req)
{
	struct task *t = find_task(c, req, "a wait request");

	if (t != NULL)
		tasks_subscribe(t, c, req->id);
}

void
op_status(struct conn *c, struct request *req)
{
	struct task *t = find_task(c, req, "a status request");

	if (t == NULL)
		return;
	json_t *ev = json_pack("{s:I, s:s, s:s}", "task", (json_int_t)t->id,
	    "state", tasks_state(t), "pool", t->pool_name);
	if (t->finished) {
		json_object_set_new(ev, "queued_ms", json_real(t->queued_us / 1000.0));
		json_object_set_new(ev, "run_ms", json_real(t->run_us / 1000.0));
	}
	ops_reply(c, req, EV_STATUS, ev);
}

void
op_cancel(struct conn *c, struct request *req)
{
	struct task *t = find_task(c, req, "a cancel request");

	if (t == NULL)
		return;
	tasks_cancel(t);
	ops_reply(c, req, EV_OK, json_pack("{s:I, s:s}", "task", (json_int_t)t->id,
	    "state", tasks_state(t)));
}
