/*
 * tasks.c: a task's life in the daemon.
 *
 * The loop thread creates a task, submits it to a pool and registers it. A
 * worker runs it (task_work) and the pool calls task_pool_done on whichever
 * thread ended it; that only posts the task to the mailbox. Back on the loop
 * thread, tasks_handle_mail builds the done event once, as a string without
 * "id", and sends it to the submitter and every waiter with their own id in
 * front. The task then stays, finished and light, for wait and status until
 * result_ttl, result_retain or result_retain_bytes drops it, oldest first.
 */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "blob.h"
#include "conn.h"
#include "daemon.h"
#include "idmap.h"
#include "log.h"
#include "proto.h"
#include "tasks.h"
#include "wire.h"

struct subscriber {
	uint64_t conn_id;
	json_t *request_id;
	struct subscriber *next;
};

static struct idmap *tasks;
static uint64_t next_task_id = 1;
static struct task *oldest_retained, *newest_retained;
static size_t nretained;
static size_t retained_bytes;       /* what the retained cost (retained_cost) */
static uint64_t results_forgotten;  /* forgotten before result_ttl for result_retain_bytes */
static atomic_size_t stream_budget = 256 * 1024;

bool
task_cancelled(const struct task *t)
{
	return pool_job_cancelled(&t->job);
}

void
task_set_error(struct task *t, const char *code, const char *fmt, ...)
{
	va_list ap;

	free(t->error_message);
	t->error_code = code;
	va_start(ap, fmt);
	if (vasprintf(&t->error_message, fmt, ap) == -1)
		t->error_message = NULL;
	va_end(ap);
}

void
tasks_set_stream_budget(size_t bytes)
{
	atomic_store(&stream_budget, bytes);
}

/* Worker thread. */
int
task_emit(struct task *t, json_t *event, size_t weight)
{
	struct mail *m = calloc(1, sizeof *m);
	uint64_t deadline = 0;

	if (m == NULL) {
		json_decref(event);
		return 0;
	}
	m->kind = MAIL_EVENT;
	m->task = t;
	m->event = event;
	m->weight = weight;
	if (t->timeout_us != 0)
		deadline = t->job.started_us + t->timeout_us;
	mailbox_post_stream(m, atomic_load(&stream_budget), deadline);
	return 0;
}

/* Worker thread: the pool's work function. */
static enum pool_state
task_work(struct pool_job *j)
{
	struct task *t = j->arg;

	atomic_store(&t->started, true);
	if (t->stream && !t->kind->announces_start)
		task_emit(t, proto_event_started(0), 0);
	return t->kind->run(t);
}

static void build_done_body(struct task *t);

/* Any thread, lock not held: hands the task back to the loop. */
static void
task_pool_done(struct pool_job *j, enum pool_state state, uint64_t queued_us, uint64_t run_us)
{
	struct task *t = j->arg;
	struct mail *m = t->done_mail;

	t->state = state;
	t->queued_us = queued_us;
	t->run_us = run_us;
	/* Formatted here, on the thread that ended the task, to spare the loop. */
	build_done_body(t);
	m->kind = MAIL_DONE;
	m->task = t;
	mailbox_post(m);
}

/* Under the pool lock: let a blocked run notice the cancel. */
static void
task_on_cancel(struct pool_job *j)
{
	struct task *t = j->arg;

	if (t->kind->cancel != NULL)
		t->kind->cancel(t);
}

struct task *
tasks_new(const struct task_kind *kind)
{
	/* The task and the mail that carries its done, in one allocation. */
	struct task_with_mail {
		struct task task;
		struct mail done_mail;
	} *tm = calloc(1, sizeof *tm);
	struct task *t;

	if (tm == NULL)
		return NULL;
	t = &tm->task;
	t->done_mail = &tm->done_mail;
	t->kind = kind;
	t->job.work = task_work;
	t->job.done = task_pool_done;
	t->job.on_cancel = task_on_cancel;
	t->job.arg = t;
	return t;
}

/* The waits end (the done was sent, or the task is dropped): their connections may wait again. */
static void
free_subscribers(struct task *t)
{
	struct subscriber *s, *next;
	struct conn *c;

	for (s = t->subscribers; s != NULL; s = next) {
		next = s->next;
		if ((c = conn_find(s->conn_id)) != NULL && c->subscriptions > 0)
			c->subscriptions--;
		json_decref(s->request_id);
		free(s);
	}
	t->subscribers = NULL;
}

/* Frees what a finished task no longer needs: the kind's data and the outcome. */
static void
task_lighten(struct task *t)
{
	if (t->kind->free != NULL && t->kind_data != NULL)
		t->kind->free(t);
	t->kind_data = NULL;
	json_decref(t->result);
	t->result = NULL;
	free(t->error_message);
	t->error_message = NULL;
	json_decref(t->request_id);
	t->request_id = NULL;
	free_subscribers(t);
}

void
tasks_discard(struct task *t)
{
	task_lighten(t);
	free(t->pool_name);
	blob_release(t->done_text);
	free(t);
}

enum pool_verdict
tasks_submit(struct task *t, struct pools_entry *e, struct conn *c, json_t *req_id, bool detach)
{
	enum pool_verdict v;

	if (tasks == NULL && (tasks = idmap_new()) == NULL)
		return POOL_REJECTED_FULL;
	t->id = next_task_id;
	t->pool = e->pool;
	t->pool_entry = e;
	t->pool_name = strdup(e->name);
	t->conn_id = detach ? 0 : c->id;
	t->request_id = json_incref(req_id);
	/* Registered before submitting: the done may be posted at once. */
	if (idmap_put(tasks, t->id, t) == -1)
		return POOL_REJECTED_FULL;
	v = pool_submit(e->pool, &t->job);
	if (v != POOL_ACCEPTED) {
		idmap_remove(tasks, t->id);
		return v;
	}
	next_task_id++;
	if (!detach)
		c->awaiting++;
	e->outstanding++;
	daemon_state->outstanding++;
	return v;
}

struct task *
tasks_find(uint64_t id)
{
	tasks_prune(); /* result_ttl holds to the millisecond, not to the next timer tick */
	return tasks ? idmap_get(tasks, id) : NULL;
}

const char *
tasks_state(const struct task *t)
{
	if (t->finished)
		return t->final_state;
	return atomic_load(&t->started) ? STATE_RUNNING : STATE_QUEUED;
}

/*
 * Sends t's done, with id in front, to the connection named conn_id (if
 * still there); owed says the connection was counting on it. The text is
 * shared: a connection that cannot take it yet holds it, not the task.
 */
static void
send_done(const struct task *t, uint64_t conn_id, json_t *id, bool owed)
{
	struct conn *c = conn_find(conn_id);

	if (c == NULL || c->dead)
		return;
	if (owed)
		conn_owed_done(c);
	conn_send_done(c, id, t->done_text);
}

void
tasks_subscribe(struct task *t, struct conn *c, json_t *req_id)
{
	struct subscriber *s;

	unsigned max = daemon_state->conf.max_subscriptions;

	if (t->finished) {
		send_done(t, c->id, req_id, false);
		return;
	}
	if (c->subscriptions >= max) {
		conn_send_error(c, req_id, ERR_BAD_REQUEST, "too many waits pending on this "
		    "connection: max_subscriptions is %u; wait until some of their tasks finish "
		    "(or use another connection)", max);
		return;
	}
	if ((s = calloc(1, sizeof *s)) == NULL) {
		conn_send_error(c, req_id, ERR_INTERNAL, "out of memory");
		return;
	}
	s->conn_id = c->id;
	s->request_id = json_incref(req_id);
	s->next = t->subscribers;
	t->subscribers = s;
	c->awaiting++;
	c->subscriptions++;
}

void
tasks_cancel(struct task *t)
{
	if (t->finished)
		return;
	pool_cancel(t->pool, &t->job);
	mailbox_wake_streams(); /* a run blocked on its stream budget sees the cancel */
}

/* The wire name of a terminal state. */
static const char *
state_name(enum pool_state state)
{
	switch (state) {
	case POOL_SUCCEEDED:
		return STATE_SUCCEEDED;
	case POOL_FAILED:
		return STATE_FAILED;
	case POOL_TIMED_OUT:
		return STATE_TIMED_OUT;
	case POOL_CANCELLED:
		return STATE_CANCELLED;
	case POOL_EXPIRED:
		return STATE_EXPIRED;
	}
	return STATE_FAILED;
}

/*
 * The error a done carries: the kind's own, or for states the pool decided
 * the state's, with a message written into buf. NULL code: no error.
 */
static void
done_error(const struct task *t, const char **code, const char **message, char *buf,
    size_t len)
{
	*code = t->error_code;
	*message = t->error_message;
	if (t->state == POOL_SUCCEEDED) {
		*code = *message = NULL;
		return;
	}
	if (*code != NULL)
		return;
	switch (t->state) {
	case POOL_CANCELLED:
		*code = ERR_CANCELLED;
		snprintf(buf, len, "task was cancelled %s",
		    t->run_us > 0 || atomic_load(&t->started) ? "while running" : "before it started");
		break;
	case POOL_EXPIRED:
		*code = ERR_EXPIRED;
		snprintf(buf, len, "task waited %.3f ms in the queue, past its "
		    "queue_timeout_ms, and never started", t->queued_us / 1000.0);
		break;
	case POOL_TIMED_OUT:
		*code = ERR_TIMED_OUT;
		snprintf(buf, len, "task ran past its timeout_ms");
		break;
	default:
		*code = ERR_TASK_FAILED;
		snprintf(buf, len, "task failed");
		break;
	}
	if (*message == NULL)
		*message = buf;
}

void
tasks_view(const struct task *t, struct proto_task *v)
{
	memset(v, 0, sizeof *v);
	v->id = t->id;
	v->pool = t->pool_name;
	v->state = tasks_state(t);
	v->queued_ahead = t->job.queued_ahead;
	v->finished = t->finished;
	v->queued_us = t->queued_us;
	v->run_us = t->run_us;
}

/*
 * Builds the done event once, as the text after "{" and an optional "id"
 * (proto_encode_done). Runs on the thread that ended the task, which owns
 * the outcome until the mail reaches the loop; the pool's name is
 * immutable.
 */
static void
build_done_body(struct task *t)
{
	struct proto_task v;
	char buf[160];

	t->final_state = state_name(t->state);
	memset(&v, 0, sizeof v);
	v.id = t->id;
	v.pool = t->pool_name;
	v.state = t->final_state;
	v.finished = true;
	v.queued_us = t->queued_us;
	v.run_us = t->run_us;
	v.result = t->result;
	done_error(t, &v.error_code, &v.error_message, buf, sizeof buf);
	t->done_text = proto_encode_done(&v);
	t->done_body = t->done_text->data;
	t->done_len = t->done_text->len;
	/* Nothing reads the result once it is text: free it here rather than on the loop. */
	json_decref(t->result);
	t->result = NULL;
}

/*
 * What a retained task is counted for against result_retain_bytes: its
 * done text, the task itself (with the mail it came back in) and its pool's
 * name. Only what does not change once it is retained, so that the same
 * figure comes off when it goes.
 */
static size_t
retained_cost(const struct task *t)
{
	return t->done_len + sizeof (struct task) + sizeof (struct mail) +
	    (t->pool_name != NULL ? strlen(t->pool_name) + 1 : 0);
}

static void
retain(struct task *t)
{
	t->older = newest_retained;
	t->newer = NULL;
	if (newest_retained != NULL)
		newest_retained->newer = t;
	else
		oldest_retained = t;
	newest_retained = t;
	nretained++;
	retained_bytes += retained_cost(t);
}

static void
task_finish(struct task *t)
{
	struct pools_entry *e = t->pool_entry;

	t->finished = true;
	t->finished_us = clock_now_us();
	if (t->conn_id != 0)
		send_done(t, t->conn_id, t->request_id, true);
	for (struct subscriber *s = t->subscribers; s != NULL; s = s->next)
		send_done(t, s->conn_id, s->request_id, true);
	log_debug("task %llu %s (queued %.3f ms, ran %.3f ms)", (unsigned long long)t->id,
	    t->final_state, t->queued_us / 1000.0, t->run_us / 1000.0);
	task_lighten(t);
	retain(t);
	tasks_prune();
	daemon_state->outstanding--;
	if (e != NULL) {
		e->outstanding--;
		pools_task_finished(e);
	}
	daemon_maybe_exit();
}

/*
 * A stream event of the task keyed id left for its connection's socket
 * buffer (or with the connection): its bytes no longer count against the
 * task's stream budget. A task that finished meanwhile has no budget left
 * to give back.
 */
static void
stream_event_sent(uint64_t id, size_t weight)
{
	struct task *t = tasks != NULL ? idmap_get(tasks, id) : NULL;

	if (t != NULL && !t->finished)
		mailbox_stream_processed(t, weight);
}

/*
 * Adds "id" and "task" to a stream event and sends it to the submitter. Its
 * weight stays on the task's stream budget until the connection takes it:
 * a connection over max_output_buffer holds it back, and the worker that
 * produces the task's output blocks.
 */
static void
task_stream_event(struct task *t, json_t *event, size_t weight)
{
	struct conn *c;

	struct proto_text pt;

	if (t->conn_id == 0 || !t->stream || (c = conn_find(t->conn_id)) == NULL) {
		mailbox_stream_processed(t, weight);
		return;
	}
	proto_encode_stream(&pt, event, t->request_id, t->id);
	conn_send_stream(c, &pt, stream_event_sent, t->id, weight);
}

void
tasks_handle_mail(struct mail *m)
{
	switch (m->kind) {
	case MAIL_EVENT:
		task_stream_event(m->task, m->event, m->weight);
		json_decref(m->event);
		break;
	case MAIL_DONE:
		task_finish(m->task); /* m lives inside the task */
		return;
	}
	free(m);
}

/*
 * The oldest finished tasks go first: past result_ttl, beyond result_retain,
 * or while what they cost is above result_retain_bytes (counted in
 * results_forgotten when that is the only reason).
 */
void
tasks_prune(void)
{
	struct daemon *d = daemon_state;
	uint64_t now = clock_now_us();
	struct task *t;

	while ((t = oldest_retained) != NULL) {
		bool aged = now - t->finished_us > d->conf.result_ttl_ms * 1000;
		bool counted = nretained > d->conf.result_retain;

		if (!aged && !counted && retained_bytes <= d->conf.result_retain_bytes)
			break;
		if (!aged && !counted)
			results_forgotten++;
		oldest_retained = t->newer;
		if (oldest_retained != NULL)
			oldest_retained->older = NULL;
		else
			newest_retained = NULL;
		nretained--;
		retained_bytes -= retained_cost(t);
		idmap_remove(tasks, t->id);
		tasks_discard(t);
	}
}

size_t
tasks_retained(void)
{
	return nretained;
}

size_t
tasks_retained_bytes(void)
{
	return retained_bytes;
}

uint64_t
tasks_results_forgotten(void)
{
	return results_forgotten;
}

bool
tasks_was_accepted(uint64_t id)
{
	return id >= 1 && id < next_task_id;
}

static void
free_one(void *value, void *arg)
{
	tasks_discard(value);
}

void
tasks_free_all(void)
{
	if (tasks == NULL)
		return;
	idmap_each(tasks, free_one, NULL);
	idmap_free(tasks);
	tasks = NULL;
	oldest_retained = newest_retained = NULL;
	nretained = 0;
	retained_bytes = 0;
}
