/*
 * task.c: the worker side of a task's life, and its hand-off to the loop.
 *
 * A task enters the pool through its job (task_work, task_pool_done,
 * task_on_cancel). A worker runs the kind (task_work); the pool calls
 * task_pool_done on whichever thread ended the task, which writes the done
 * text there (proto_encode_done: the loop only copies it) and posts the
 * task to the mailbox. The stream events a run emits (task_emit) travel the
 * same way, after waiting for the task's stream budget. On the loop thread
 * each message goes to the registry's handlers (task_set_handlers, tasks.c).
 *
 * The start of a task with effects (start_barrier: an exec task with the
 * journal on) waits for its STARTED record to be seen (durable.c calls
 * task_start_recorded from the journal's seen hook). A kind without
 * gates_start waits here, on the worker, before its run. An exec run does
 * not wait: it arms a start gate (task_start_gate_arm), a pipe its child
 * reads one byte from just before execve, and prepares and clones the
 * child while the record is synced; task_start_recorded writes GO into the
 * pipe itself, on the loop thread, so the program starts without waking
 * the worker first. A cancel before that writes STOP instead
 * (task_on_cancel). Either way the run's end waits for the release, so
 * that a late release never opens the next attempt's gate.
 *
 * The stream budget: while more than stream_budget bytes of a task's
 * events are not yet taken by its receiver (task_stream_taken), task_emit
 * waits, on budget.cv under budget.lock, until the receiver takes some, the
 * task is cancelled, or its timeout passes. budget.lock is a leaf lock;
 * nothing is called while it is held.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/blob.h"
#include "proto/proto.h"
#include "task.h"
#include "wire.h"

/* A stream event on its way to the loop. */
struct task_mail {
	struct mail mail;
	struct task *task;
	json_t *event;              /* NULL: the run began */
	size_t weight;
};

static struct task_handlers handlers;

static struct {
	pthread_mutex_t lock;       /* guards every task's stream_pending, and waiters */
	pthread_cond_t cv;          /* task_emit waits here for room */
	pthread_once_t once;
	unsigned waiters;
	atomic_size_t bytes;        /* stream_budget */
} budget = { .lock = PTHREAD_MUTEX_INITIALIZER, .once = PTHREAD_ONCE_INIT,
    .bytes = 256 * 1024 };

/*
 * The wait of a start_barrier task for its STARTED record, and its start
 * gate (a leaf lock: only write(2) on a gate's pipe is done under it).
 */
static struct {
	pthread_mutex_t lock;
	pthread_cond_t cv;
} recorded = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER };

/* Under the record lock: writes the gate's one byte, and disarms it. */
static void
gate_write(struct task *t, unsigned char byte)
{
	ssize_t n;

	if (!t->start_gated)
		return;
	do
		n = write(t->start_gate_fd, &byte, 1);
	while (n == -1 && errno == EINTR);
	/* EPIPE: the child is gone already (its spawn failed): the run reports that */
	t->start_gated = false;
	t->start_gate_fd = -1;
	t->start_gate_go = byte == TASK_GATE_GO && n == 1;
}

void
task_start_recorded(struct task *t)
{
	pthread_mutex_lock(&recorded.lock);
	t->start_recorded = true;
	gate_write(t, TASK_GATE_GO);
	pthread_cond_broadcast(&recorded.cv);
	pthread_mutex_unlock(&recorded.lock);
}

int
task_start_gate_arm(struct task *t, int fd)
{
	int known = -1;

	pthread_mutex_lock(&recorded.lock);
	t->start_gate_go = false;
	/* the cancel flag is set before the cancel hook runs (and takes this lock) */
	if (task_cancelled(t))
		known = TASK_GATE_STOP;
	else if (t->start_recorded)
		known = TASK_GATE_GO;
	else {
		t->start_gated = true;
		t->start_gate_fd = fd;
	}
	pthread_mutex_unlock(&recorded.lock);
	return known;
}

bool
task_start_gate_disarm(struct task *t)
{
	bool go;

	pthread_mutex_lock(&recorded.lock);
	t->start_gated = false;
	t->start_gate_fd = -1;
	go = t->start_gate_go;
	pthread_mutex_unlock(&recorded.lock);
	return go;
}

static void
budget_init(void)
{
	pthread_condattr_t ca;

	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&budget.cv, &ca);
	pthread_condattr_destroy(&ca);
}

void
task_set_handlers(const struct task_handlers *h)
{
	handlers = *h;
}

static void (*task_input_release_fn)(uint64_t);

void
task_set_input_release(void (*fn)(uint64_t conn))
{
	task_input_release_fn = fn;
}

void
task_input_release(uint64_t conn)
{
	if (task_input_release_fn != NULL)
		task_input_release_fn(conn);
}

void
task_set_stream_budget(size_t bytes)
{
	atomic_store(&budget.bytes, bytes);
}

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

const char *
task_state_name(enum pool_state state)
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

/* A duration for a message: 850 ms, 1.2 s, 90 s (microseconds in, no trailing .0). */
static void
task_human_us(char *buf, size_t len, uint64_t us)
{
	if (us < 1000000)
		snprintf(buf, len, "%.*f ms", us < 10000 && us % 1000 != 0 ? 1 : 0, us / 1000.0);
	else if (us < 10000000 && us % 1000000 >= 50000)
		snprintf(buf, len, "%.1f s", us / 1e6);
	else
		snprintf(buf, len, "%.0f s", us / 1e6);
}

/* "waited 1.2 s in the queue, longer than its queue_timeout_ms of 1 s" */
static void
task_expired_message(const struct task *t, char *buf, size_t len)
{
	char waited[32], limit[32];

	task_human_us(waited, sizeof waited, t->queued_us);
	task_human_us(limit, sizeof limit, t->queue_timeout_ms * 1000);
	snprintf(buf, len, "task waited %s in the queue, longer than its queue_timeout_ms "
	    "of %s, and never started", waited, limit);
}

void
task_describe(const struct task *t, struct proto_task *v)
{
	memset(v, 0, sizeof *v);
	v->id = t->id;
	v->pool = t->pool_name;
	v->owner = t->owner;
	v->attempt = t->attempt;
	v->label = t->label;
	v->kind = t->kind != NULL ? t->kind->name : ""; /* "": a task the journal knew only by its end */
}

/* Loop thread: a stream event (or the start) reaches the registry. */
static void
task_mail_deliver(struct mail *m)
{
	struct task_mail *tm = (struct task_mail *)(void *)m;

	handlers.event(tm->task, tm->event, tm->weight);
	json_decref(tm->event);
	free(tm);
}

/*
 * Worker thread: waits, unless the task is cancelled or deadline_us
 * (monotonic, 0 = none) passes, while more than the budget of t's events
 * wait; then counts weight in and posts the event.
 */
static void
post_event(struct task *t, json_t *event, size_t weight, uint64_t deadline_us)
{
	struct task_mail *tm = calloc(1, sizeof *tm);
	size_t limit = atomic_load(&budget.bytes);
	struct timespec ts;

	if (tm == NULL) {
		json_decref(event);
		return;
	}
	tm->mail.deliver = task_mail_deliver;
	tm->task = t;
	tm->event = event;
	tm->weight = weight;
	pthread_once(&budget.once, budget_init);
	pthread_mutex_lock(&budget.lock);
	while (t->stream_pending > limit && !task_cancelled(t)) {
		budget.waiters++;
		if (deadline_us == 0)
			pthread_cond_wait(&budget.cv, &budget.lock);
		else if (clock_now_us() < deadline_us) {
			ts.tv_sec = (time_t)(deadline_us / 1000000);
			ts.tv_nsec = (long)(deadline_us % 1000000) * 1000;
			pthread_cond_timedwait(&budget.cv, &budget.lock, &ts);
		}
		budget.waiters--;
		if (deadline_us != 0 && clock_now_us() >= deadline_us)
			break;
	}
	t->stream_pending += weight;
	pthread_mutex_unlock(&budget.lock);
	mailbox_post(&tm->mail);
}

int
task_emit(struct task *t, json_t *event, size_t weight)
{
	uint64_t deadline = 0;

	if (event == NULL)
		return 0;
	if (t->timeout_us != 0)
		deadline = t->job.started_us + t->timeout_us;
	post_event(t, event, weight, deadline);
	return 0;
}

void
task_stream_taken(struct task *t, size_t weight)
{
	pthread_once(&budget.once, budget_init);
	pthread_mutex_lock(&budget.lock);
	t->stream_pending -= weight;
	if (budget.waiters > 0)
		pthread_cond_broadcast(&budget.cv);
	pthread_mutex_unlock(&budget.lock);
}

void
task_wake_streams(void)
{
	pthread_once(&budget.once, budget_init);
	pthread_mutex_lock(&budget.lock);
	pthread_cond_broadcast(&budget.cv);
	pthread_mutex_unlock(&budget.lock);
}

/* Worker thread: waits until t's start is recorded. */
static void
start_wait(struct task *t)
{
	pthread_mutex_lock(&recorded.lock);
	while (!t->start_recorded)
		pthread_cond_wait(&recorded.cv, &recorded.lock);
	pthread_mutex_unlock(&recorded.lock);
}

/* Worker thread: the pool's work function. */
static enum pool_state
task_work(struct pool_job *j)
{
	struct task *t = j->arg;
	enum pool_state state;

	atomic_store(&t->started, true);
	if (t->stream && !t->kind->announces_start)
		task_emit(t, proto_event_started(0), 0);
	else if (t->notify_start)
		post_event(t, NULL, 0, 0);      /* no event: weighs nothing, never waits */
	/* the loop records the start (durable.c) before the program may run */
	if (t->start_barrier && !t->kind->gates_start)
		start_wait(t);
	state = t->kind->run(t);
	/*
	 * A gated run may end before its record is seen (its spawn failed): the
	 * release still comes, and must reach this attempt, not a retry's,
	 * whose gate is its own. A cancelled task has no next attempt, and its
	 * release may never come (a journal that cannot sync, then a stop): it
	 * does not wait, and its finish takes it off the journal's list of
	 * starts waiting (durable.c).
	 */
	if (t->start_barrier && t->kind->gates_start && !task_cancelled(t))
		start_wait(t);
	return state;
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
		if (t->job.displaced) {
			/* drop_oldest: set by the pool before it called done, read after */
			*code = ERR_DISPLACED;
			snprintf(buf, len, "task was displaced from the full queue of pool %s by a "
			    "newer one (admission = drop_oldest) before it started",
			    t->pool_name != NULL ? t->pool_name : "?");
			break;
		}
		*code = ERR_EXPIRED;
		task_expired_message(t, buf, len);
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

/* Loop thread: the done reaches the registry (the mail lives inside the task). */
static void
task_done_deliver(struct mail *m)
{
	struct task *t = (struct task *)(void *)((char *)m - offsetof(struct task, done_mail));

	handlers.done(t);
}

void
task_rearm(struct task *t)
{
	blob_release(t->done_text);
	t->done_text = NULL;
	free(t->error_message);
	t->error_message = NULL;
	t->error_code = NULL;
	json_decref(t->result);
	t->result = NULL;
	t->final_state = NULL;
	atomic_store(&t->started, false);
	pthread_mutex_lock(&recorded.lock);
	t->start_recorded = false;
	t->start_gated = false;
	t->start_gate_fd = -1;
	t->start_gate_go = false;
	pthread_mutex_unlock(&recorded.lock);
}

void
task_post_done(struct task *t)
{
	t->done_mail.deliver = task_done_deliver;
	mailbox_post(&t->done_mail);
}

/*
 * Any thread, pool lock not held: the task ended. Its done is written
 * here, on the thread that ended it, which owns the outcome until the mail
 * reaches the loop (the pool's name is immutable); then it goes back.
 */
static void
task_pool_done(struct pool_job *j, enum pool_state state, uint64_t queued_us, uint64_t run_us)
{
	struct task *t = j->arg;
	struct proto_task v;
	char buf[160];

	t->state = state;
	queued_us += t->queued_before_us;
	t->queued_us = queued_us;
	t->run_us = run_us;
	t->final_state = task_state_name(state);
	task_describe(t, &v);
	v.state = t->final_state;
	v.finished = true;
	v.queued_us = queued_us;
	v.run_us = run_us;
	v.result = t->result;
	done_error(t, &v.error_code, &v.error_message, buf, sizeof buf);
	t->done_text = proto_encode_done(&v);
	/* Nothing reads the result once it is text: free it here rather than on the loop. */
	json_decref(t->result);
	t->result = NULL;
	t->done_mail.deliver = task_done_deliver;
	mailbox_post(&t->done_mail);
}

/* Under the pool lock: let a blocked run notice the cancel (the kind's leaf lock only). */
static void
task_on_cancel(struct pool_job *j)
{
	struct task *t = j->arg;

	/* a gated start that has not opened never does: its program never runs */
	pthread_mutex_lock(&recorded.lock);
	gate_write(t, TASK_GATE_STOP);
	pthread_mutex_unlock(&recorded.lock);
	if (t->kind->cancel != NULL)
		t->kind->cancel(t);
}

struct task *
task_parse(const struct task_kind *kind, json_t *spec, const struct task_context *ctx,
    char **msg)
{
	struct task *t = calloc(1, sizeof *t);

	*msg = NULL;
	if (t == NULL)
		return NULL;
	t->kind = kind;
	t->job.work = task_work;
	t->job.done = task_pool_done;
	t->job.on_cancel = task_on_cancel;
	t->job.arg = t;
	t->pool_conf = ctx->pool_conf;
	t->caller = ctx->caller;
	if (kind->parse(t, spec, msg) == -1) {
		task_free(t);   /* a parse that failed may have left data behind too */
		return NULL;
	}
	return t;
}

void
task_lighten(struct task *t)
{
	if (t->kind != NULL && t->kind->free != NULL && t->kind_data != NULL)
		t->kind->free(t);
	t->kind_data = NULL;
	json_decref(t->result);
	t->result = NULL;
	free(t->error_message);
	t->error_message = NULL;
	t->pool_conf = NULL;        /* the settings may go with a reload */
}

void
task_free(struct task *t)
{
	if (t == NULL)
		return;
	task_lighten(t);
	blob_release(t->done_text);
	free(t->after);
	free(t->dependents);
	free(t->key);
	free(t->request);
	free(t->command);
	free(t->pool_name);
	free(t->owner);
	free(t->label);
	free(t);
}
