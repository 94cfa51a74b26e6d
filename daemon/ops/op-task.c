/* op-task.c: the ops about tasks: submit, wait, status, cancel, list, input. */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "net/auth.h"
#include "conf/conf.h"
#include "admission.h"
#include "conn-sink.h"
#include "daemon.h"
#include "journal/durable.h"
#include "base/log.h"
#include "ops.h"
#include "replay.h"
#include "exec/spool.h"
#include "pool/pool.h"
#include "pool/pools.h"
#include "proto/proto.h"
#include "task/tasks.h"
#include "base/utf8.h"
#include "units.h"
#include "wire.h"


/* Reads the request's "task" object into a new task; NULL after answering the error. */
static struct task *
parse_task(struct conn *c, struct request *req, json_t *spec, const struct pools_entry *e,
    uint64_t *timeout_ms)
{
	const struct task_kind *kind;
	struct proto_task_spec ts;
	struct task_context ctx;
	struct task *t;
	char *msg = NULL;

	if (proto_read_task(spec, &ts, &msg) == -1) {
		ops_bad_request(c, req, msg);
		return NULL;
	}
	if ((kind = task_kind_find(ts.kind)) == NULL) {
		char q[UTF8_QUOTE_SIZE];
		conn_send_error(c, req->id, ERR_BAD_REQUEST, "unknown task kind \"%s\" "
		    "(kinds: %s)", utf8_quote(q, ts.kind), task_kind_names());
		return NULL;
	}
	/* what the kind may need: the pool's settings (run_as, limits) and the submitter */
	memset(&ctx, 0, sizeof ctx);
	ctx.pool_conf = conf_pool_find(&daemon_state->conf, e->name);
	ctx.caller.via_unix = conn_is_unix(c);
	ctx.caller.have_creds = conn_creds(c, &ctx.caller.uid, &ctx.caller.gid, NULL);
	if ((t = task_parse(kind, spec, &ctx, &msg)) == NULL) {
		if (msg == NULL)
			conn_send_error(c, req->id, ERR_INTERNAL, "out of memory");
		else
			ops_bad_request(c, req, msg);
		return NULL;
	}
	*timeout_ms = ts.timeout_ms;
	return t;
}

/*
 * A submit whose key names a task of the same owner: accepted for that
 * task, with duplicate, then (unless detach) its events as a wait gets them.
 */
static void
submit_duplicate(struct conn *c, struct request *req, struct task *t,
    const struct proto_submit *sub)
{
	struct proto_task view;
	struct proto_text pt;
	struct task_sink *sink;

	tasks_view(t, &view);
	view.duplicate = true;
	proto_encode_accepted(&pt, req->id, &view);
	conn_send_text(c, &pt);
	if (sub->detach)
		return;
	if (t->finished) {
		conn_send_done(c, req->id, t->done_text);
		return;
	}
	if (conn_waits(c) >= daemon_state->conf.max_subscriptions) {
		/* its events are a wait's: counted as one */
		conn_send_error(c, req->id, ERR_BAD_REQUEST, "too many waits pending on this "
		    "connection: max_subscriptions is %u; the duplicate's task is %llu",
		    daemon_state->conf.max_subscriptions, (unsigned long long)t->id);
		return;
	}
	if ((sink = conn_sink_new(c, req->id, sub->stream, true)) == NULL) {
		conn_send_error(c, req->id, ERR_INTERNAL, "out of memory");
		return;
	}
	tasks_add_sink(t, sink);
}

/*
 * The dependencies of a submit: each a task the submitter may wait on.
 * Returns false after answering no_such_task or forbidden, naming the field.
 */
static bool
submit_after_allowed(struct conn *c, struct request *req, const struct proto_submit *sub)
{
	const char *code;
	char why[256];
	struct task *d;

	for (size_t i = 0; i < sub->nafter; i++) {
		if ((d = tasks_find(sub->after[i])) == NULL) {
			conn_send_error(c, req->id, ERR_NO_SUCH_TASK, "field \"%s\": no task %llu "
			    "(%s)", FIELD_AFTER, (unsigned long long)sub->after[i],
			    tasks_was_accepted(sub->after[i]) ? "it finished and was forgotten" :
			    "never submitted");
			return false;
		}
		if (!auth_task_allowed(c, d, OP_WAIT, &code, why, sizeof why)) {
			conn_send_error(c, req->id, code, "field \"%s\": %s", FIELD_AFTER, why);
			return false;
		}
	}
	return true;
}

void
op_submit(struct conn *c, struct request *req)
{
	struct proto_submit sub;
	struct task_options o;
	char owner[CONN_OWNER_MAX];
	const struct conf_pool *cp;
	struct pools_entry *e;
	struct task *t;
	const char *why;
	char *msg = NULL;

	if (proto_read_submit(req, &sub, &msg) == -1) {
		ops_bad_request(c, req, msg);
		return;
	}
	conn_owner(c, owner, sizeof owner);
	if (sub.key != NULL && (t = tasks_find_key(owner, sub.key)) != NULL) {
		submit_duplicate(c, req, t, &sub);
		return;
	}
	if (durable_on())
		durable_make_room();    /* (without the journal, not even its clock read) */
	if (!durable_writable(&why)) {
		/* nothing is accepted that the journal cannot keep; accepted work goes on */
		if ((e = pools_find(sub.pool)) != NULL)
			pool_count_rejected_storage(e->pool);
		durable_refused(why);
		conn_send_rejected(c, req->id, ERR_STORAGE, "%s", why);
		return;
	}
	if ((e = pools_find(sub.pool)) == NULL) {
		char q[UTF8_QUOTE_SIZE], names[160] = "";
		size_t off = 0;

		/* the pools there are, as tpd -n's "did you mean" would help */
		for (size_t i = 0; i < pools_count() && off < sizeof names; i++)
			if (!pools_at(i)->removed)
				off += (size_t)snprintf(names + off, sizeof names - off, "%s%s",
				    off > 0 ? ", " : "", pools_at(i)->name);
		conn_send_rejected(c, req->id, ERR_NO_SUCH_POOL, "no pool named \"%s\" (pools: %s)",
		    utf8_quote(q, sub.pool), names);
		return;
	}
	cp = conf_pool_find(&daemon_state->conf, e->name);
	if (cp != NULL && cp->run_as == CONF_RUN_AS_CALLER && !conn_creds(c, NULL, NULL, NULL)) {
		log_info("connection %llu (%s): submit to pool %s forbidden: run_as = caller",
		    (unsigned long long)conn_id(c), conn_peer(c), e->name);
		conn_send_error(c, req->id, ERR_FORBIDDEN, "pool %s runs tasks as their caller "
		    "(run_as = caller): submit on the Unix socket", e->name);
		return;
	}
	if (!submit_after_allowed(c, req, &sub))
		return;
	if ((sub.delay_ms > 0 || sub.nafter > 0) &&
	    tasks_scheduled_count() >= daemon_state->conf.max_scheduled) {
		conn_send_rejected(c, req->id, ERR_QUEUE_FULL, "%zu tasks are scheduled or waiting already: "
		    "max_scheduled is %u", tasks_scheduled_count(), daemon_state->conf.max_scheduled);
		return;
	}
	memset(&o, 0, sizeof o);
	o.submit_text = req->line;  /* what the journal keeps (tasks.h) */
	o.submit_len = req->len;
	if ((t = parse_task(c, req, sub.task, e, &o.timeout_ms)) == NULL)
		return;
	o.pool = e;
	o.owner = owner;
	o.stream = sub.stream;
	o.label = sub.label;
	o.queue_timeout_ms = sub.queue_timeout_ms;
	o.on_lost_rerun = sub.on_lost_rerun;
	/* attempts are counted with the journal, and for a task that may make several */
	o.attempt = durable_on() || sub.retries > 0 ? 1 : 0;
	o.spec = sub.task;
	tasks_options_schedule(&o, &sub);
	o.priority = sub.priority;
	if (!sub.detach && (o.sink = conn_sink_new(c, req->id, sub.stream, false)) == NULL) {
		task_free(t);
		conn_send_error(c, req->id, ERR_INTERNAL, "out of memory");
		return;
	}
	admission_submit(c, req, t, &o, sub.admission != NULL ?
	    strcmp(sub.admission, ADMISSION_WAIT) == 0 :
	    cp != NULL && cp->admission == CONF_ADMISSION_WAIT, sub.admission_timeout_ms);
}

/*
 * The task numbered id, for the op named op; NULL after answering
 * no_such_task, or forbidden when it is not c's (auth.c). A task that does
 * not exist is no_such_task for anyone: its id tells no more than the
 * order of submissions does.
 */
static struct task *
find_task_id(struct conn *c, struct request *req, uint64_t id, const char *op)
{
	struct task *t;
	const char *code;
	char why[256];

	if ((t = tasks_find(id)) == NULL) {
		const struct conf *cf = &daemon_state->conf;
		char ttl[32], bytes[32];

		units_format_duration(cf->result_ttl_ms, ttl, sizeof ttl);
		units_format_size(cf->result_retain_bytes, bytes, sizeof bytes);
		switch (tasks_was_accepted(id) ? tasks_forgotten_why(id) : -1) {
		case TASKS_FORGOT_TTL:
			conn_send_error(c, req->id, ERR_NO_SUCH_TASK, "task %llu finished more "
			    "than result_ttl (%s) ago and was forgotten", (unsigned long long)id,
			    ttl);
			break;
		case TASKS_FORGOT_COUNT:
			conn_send_error(c, req->id, ERR_NO_SUCH_TASK, "task %llu finished and was "
			    "forgotten: result_retain keeps the last %u finished tasks",
			    (unsigned long long)id, cf->result_retain);
			break;
		case TASKS_FORGOT_BYTES:
			conn_send_error(c, req->id, ERR_NO_SUCH_TASK, "task %llu finished and was "
			    "forgotten: the finished tasks kept passed result_retain_bytes (%s)",
			    (unsigned long long)id, bytes);
			break;
		case 0:
			conn_send_error(c, req->id, ERR_NO_SUCH_TASK, "task %llu finished and was "
			    "forgotten, to stay under the limits on finished tasks: result_ttl "
			    "(%s), result_retain (%u tasks), result_retain_bytes (%s)",
			    (unsigned long long)id, ttl, cf->result_retain, bytes);
			break;
		default:
			conn_send_error(c, req->id, ERR_NO_SUCH_TASK, "no task %llu: never "
			    "submitted", (unsigned long long)id);
			break;
		}
		return NULL;
	}
	if (!auth_task_allowed(c, t, op, &code, why, sizeof why)) {
		conn_send_error(c, req->id, code, "%s", why);
		return NULL;
	}
	return t;
}

/* The task a request names; NULL after answering bad_request, no_such_task or forbidden. */
static struct task *
find_task(struct conn *c, struct request *req, const char *op)
{
	uint64_t id = 0;
	char *msg = NULL;

	if (proto_read_task_ref(req, &id, &msg) == -1) {
		ops_bad_request(c, req, msg);
		return NULL;
	}
	return find_task_id(c, req, id, op);
}

/*
 * A finished task's done is sent at once; an unfinished one's when it
 * comes, counted against max_subscriptions until then. With stream the
 * wait follows the task: its output from now on (from "start": what it
 * kept so far first), its started if it has not started yet, then its
 * done.
 */
void
op_wait(struct conn *c, struct request *req)
{
	unsigned max = daemon_state->conf.max_subscriptions;
	struct task_sink *sink;
	struct proto_wait w;
	struct task *t;
	char *msg = NULL;

	if (proto_read_wait(req, &w, &msg) == -1) {
		ops_bad_request(c, req, msg);
		return;
	}
	if ((t = find_task_id(c, req, w.task, OP_WAIT)) == NULL)
		return;
	if (w.from != NULL && t->kind != NULL && t->kind->spool_catch_up != NULL) {
		/* the whole output from its spool file, running or finished, after a restart too */
		const char *dropped;
		int fd;

		if (!t->finished && conn_waits(c) >= max) {
			conn_send_error(c, req->id, ERR_BAD_REQUEST, "too many waits pending on "
			    "this connection: max_subscriptions is %u; wait until some of their "
			    "tasks finish (or use another connection)", max);
			return;
		}
		if ((fd = spool_open_read(t->id)) != -1) {
			replay_start(c, req->id, t->id, fd);
			return;
		}
		if ((dropped = spool_dropped(t->id)) != NULL) {
			struct proto_text pt;
			char m[320];

			snprintf(m, sizeof m, "task %llu: %s", (unsigned long long)t->id, dropped);
			proto_encode_cut(&pt, req->id, t->id, NULL, 0, 0, m);
			conn_send_text(c, &pt);
		}
	}
	if (t->finished) {
		conn_send_done(c, req->id, t->done_text);
		return;
	}
	if (conn_waits(c) >= max) {
		conn_send_error(c, req->id, ERR_BAD_REQUEST, "too many waits pending on this "
		    "connection: max_subscriptions is %u; wait until some of their tasks finish "
		    "(or use another connection)", max);
		return;
	}
	if ((sink = conn_sink_new(c, req->id, w.stream, true)) == NULL) {
		conn_send_error(c, req->id, ERR_INTERNAL, "out of memory");
		return;
	}
	if (w.from != NULL && t->kind->follow != NULL) {
		/* what it kept so far, before anything its run sends from now on */
		json_t *kept = json_array(), *ev;
		size_t i;
		/* a run already over: its done (with the output) alone, not the tail of its events */
		if (kept != NULL && !t->kind->follow(t, kept))
			sink->stream = false;
		json_array_foreach(kept, i, ev) {
			struct proto_text pt;
			proto_encode_stream(&pt, ev, req->id, t->id);
			conn_send_text(c, &pt);
		}
		json_decref(kept);
	}
	tasks_add_sink(t, sink);
}

void
op_status(struct conn *c, struct request *req)
{
	struct task *t = find_task(c, req, OP_STATUS);
	struct proto_task view;
	struct proto_text pt;

	if (t == NULL)
		return;
	tasks_view(t, &view);
	if (!t->finished && t->pool_entry != NULL) {
		/* as list shows them: the times so far */
		pool_job_times(t->pool_entry->pool, &t->job, &view.queued_us, &view.run_us);
		view.times_so_far = true;
	}
	tasks_request_view(t, &view.spec, &view.submit);
	proto_encode_status(&pt, req->id, &view);
	json_decref(view.spec);
	json_decref(view.submit);
	conn_send_text(c, &pt);
}

void
op_cancel(struct conn *c, struct request *req)
{
	struct task *t = find_task(c, req, OP_CANCEL);
	struct proto_text pt;

	if (t == NULL)
		return;
	durable_cancel(t);
	tasks_cancel(t);
	proto_encode_cancelled(&pt, req->id, t->id, tasks_state(t));
	conn_send_text(c, &pt);
}

/*
 * Bytes for a stdin_stream task's stdin (exec-input.c), for its owner and
 * admins. Answered ok once they are in the task's buffer; when that is
 * full, this connection is not read any more until the task has taken
 * enough (conn_input_hold).
 */
void
op_input(struct conn *c, struct request *req)
{
	struct proto_input in;
	struct proto_text pt;
	struct task *t;
	size_t buffered = 0;
	bool dropped = false;
	char *msg = NULL;
	int r;

	if (proto_read_input(req, &in, &msg) == -1) {
		free(in.decoded);
		ops_bad_request(c, req, msg);
		return;
	}
	if ((t = find_task_id(c, req, in.task, OP_INPUT)) == NULL) {
		free(in.decoded);
		return;
	}
	if (t->finished)
		r = cause_set(&msg, "task %llu has ended: its stdin takes no more input",
		    (unsigned long long)t->id);
	else if (t->kind->input == NULL)
		r = cause_set(&msg, "task %llu is a %s task: only an exec task submitted with "
		    "\"stdin_stream\": true takes input", (unsigned long long)t->id,
		    t->kind->name);
	else
		r = t->kind->input(t, in.data, in.len, in.eof, conn_id(c), &buffered, &dropped,
		    &msg);
	free(in.decoded);
	if (r == -1) {
		ops_bad_request(c, req, msg);
		return;
	}
	proto_encode_input_ok(&pt, req->id, t->id, buffered, dropped);
	conn_send_text(c, &pt);
	if (r == 1)
		conn_input_hold(c);
}

/* Whether the connection arg may see t: its owner's or an admin's (auth.c). */
static bool
list_visible(const struct task *t, void *arg)
{
	return auth_may_see_task(arg, t);
}

/*
 * Up to limit tasks matching the filters, newest first, from at most
 * OPS_LIST_VISIT_MAX tasks visited (the rest: more, and where to go on). A connection that
 * is not an admin's sees its own tasks only (auth_may_see_task): the
 * others are left out, not refused.
 */
void
op_list(struct conn *c, struct request *req)
{
	struct proto_list l;
	struct proto_task *views;
	struct proto_text pt;
	uint64_t resume = 0;
	bool more = false;
	size_t n;
	char *msg = NULL;

	if (proto_read_list(req, &l, &msg) == -1) {
		ops_bad_request(c, req, msg);
		return;
	}
	if ((views = calloc(l.limit, sizeof *views)) == NULL) {
		conn_send_error(c, req->id, ERR_INTERNAL, "out of memory");
		return;
	}
	n = tasks_list(&l, list_visible, c, views, l.limit, OPS_LIST_VISIT_MAX, &more, &resume);
	proto_encode_list(&pt, req->id, views, n, more, resume);
	free(views);
	conn_send_text(c, &pt);
}
