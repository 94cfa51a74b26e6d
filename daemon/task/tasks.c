/*
 * tasks.c: the registry: every task the daemon accepted, from submit to
 * the end of its retention (loop thread only).
 *
 * tasks_submit gives a parsed task (task.c) its id, registers it and puts
 * it in its pool; its events then come back from the worker through
 * task.c's hand-off to the two handlers here: a stream event goes to the
 * task's sink that asked for them, its done to every sink on its list
 * (the submitter's first, then the waits'), each with its own id in front
 * of the one shared text. The task then stays, finished and light, for
 * wait and status until result_ttl, result_retain or result_retain_bytes
 * drops it, oldest first.
 *
 * The lifecycle hooks are called here and only here: hooks_accepted in
 * tasks_submit, hooks_started when the run's start comes back,
 * hooks_finished in task_finish. This file owns the outstanding count
 * (accepted tasks whose done is not yet processed).
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/blob.h"
#include "base/clock.h"
#include "daemon.h"
#include "base/idmap.h"
#include "base/log.h"
#include "proto/proto.h"
#include "tasks.h"
#include "wire.h"

static struct idmap *tasks;
static uint64_t next_task_id = 1;
static uint64_t outstanding;
static struct task *oldest_retained, *newest_retained;
static struct task *newest_task;    /* every registered task, newest first (list) */
static size_t nretained;
static size_t retained_bytes;       /* what the retained cost (retained_cost) */
static uint64_t results_forgotten;  /* forgotten before result_ttl for result_retain_bytes */

static struct tasks_hooks hooks[TASKS_MAX_HOOKS];
static size_t nhooks;
static bool hooks_want_start;       /* some hook has a started */
static bool start_barrier;          /* tasks_set_start_barrier */

static void task_event(struct task *, json_t *, size_t);

static json_t *owner_numbers;       /* owner string -> its number in the pools (1, 2, ...) */

/* Owners are few (users and tokens): kept for the daemon's life; out of memory, 0 (none). */
uint32_t
tasks_owner_number(const char *owner)
{
	json_t *n;

	if (owner == NULL)
		return 0;
	if (owner_numbers == NULL && (owner_numbers = json_object()) == NULL)
		return 0;
	if ((n = json_object_get(owner_numbers, owner)) != NULL)
		return (uint32_t)json_integer_value(n);
	if (json_object_set_new(owner_numbers, owner,
	    json_integer((json_int_t)json_object_size(owner_numbers) + 1)) == -1)
		return 0;
	return (uint32_t)json_object_size(owner_numbers);
}
static void task_finish(struct task *);

/* ------------------------------------------------------------ hooks */

int
tasks_add_hooks(const struct tasks_hooks *h, char **cause)
{
	if (nhooks == TASKS_MAX_HOOKS)
		return cause_set(cause, "more than %d sets of task hooks", TASKS_MAX_HOOKS);
	hooks[nhooks++] = *h;
	if (h->started != NULL)
		hooks_want_start = true;
	return 0;
}

static void
hooks_accepted(struct task *t)
{
	for (size_t i = 0; i < nhooks; i++)
		if (hooks[i].accepted != NULL)
			hooks[i].accepted(t, hooks[i].arg);
}

static void
hooks_started(struct task *t)
{
	if (t->start_seen)
		return;
	t->start_seen = true;
	for (size_t i = 0; i < nhooks; i++)
		if (hooks[i].started != NULL)
			hooks[i].started(t, hooks[i].arg);
}

static void
hooks_finished(struct task *t)
{
	for (size_t i = 0; i < nhooks; i++)
		if (hooks[i].finished != NULL)
			hooks[i].finished(t, hooks[i].arg);
}

static void
hooks_forgotten(struct task *t)
{
	for (size_t i = 0; i < nhooks; i++)
		if (hooks[i].forgotten != NULL)
			hooks[i].forgotten(t, hooks[i].arg);
}

/* The first hooks: the debug log of each task's acceptance and end. */
static void
log_accepted(struct task *t, void *arg)
{
	log_debug("task %llu (%s) accepted into pool %s", (unsigned long long)t->id,
	    t->kind->name, t->pool_name);
}

static void
log_finished(struct task *t, void *arg)
{
	log_debug("task %llu %s (queued %.3f ms, ran %.3f ms)", (unsigned long long)t->id,
	    t->final_state, t->queued_us / 1000.0, t->run_us / 1000.0);
}

int
tasks_init(char **cause)
{
	static const struct task_handlers h = { task_event, task_finish };
	static const struct tasks_hooks log_hooks = { log_accepted, NULL, log_finished, NULL, NULL };

	if (tasks == NULL && (tasks = idmap_new()) == NULL)
		return cause_set(cause, "out of memory for the task registry");
	task_set_handlers(&h);
	return tasks_add_hooks(&log_hooks, cause);
}

/* ------------------------------------------------------------ sinks */

/* The registry lets go of every sink of t (after its done, or when it goes). */
static void
release_sinks(struct task *t)
{
	struct task_sink *s, *next;

	for (s = t->sinks; s != NULL; s = next) {
		next = s->next;
		s->ops->release(s);
	}
	t->sinks = NULL;
	t->sinks_end = NULL;
	t->nstreaming = 0;
}

void
tasks_add_sink(struct task *t, struct task_sink *sink)
{
	/* in the order they come: a client may pipeline 100,000 waits on one task */
	if (t->sinks_end == NULL)
		t->sinks_end = &t->sinks;
	sink->next = NULL;
	*t->sinks_end = sink;
	t->sinks_end = &sink->next;
	if (sink->stream) {
		t->nstreaming++;
		atomic_store(&t->stream, true);
	}
}

/* Frees a task the registry had, with everything it still holds. */
static void
discard(struct task *t)
{
	if (t->list_newer != NULL)
		t->list_newer->list_older = t->list_older;
	else if (newest_task == t)
		newest_task = t->list_older;
	if (t->list_older != NULL)
		t->list_older->list_newer = t->list_newer;
	release_sinks(t);
	task_free(t);
}

/* ------------------------------------------------------------ submit */

/* ids grow (the journal's replay too, in id order): the newest task is the head of the list */
static void
list_add(struct task *t)
{
	t->list_older = newest_task;
	t->list_newer = NULL;
	if (newest_task != NULL)
		newest_task->list_newer = t;
	newest_task = t;
}

enum pool_verdict
tasks_submit(struct task *t, const struct task_options *o)
{
	enum pool_verdict v;

	t->kept_elsewhere = o->kept_elsewhere;
	if ((t->pool_name = strdup(o->pool->name)) == NULL ||
	    (o->owner != NULL && (t->owner = strdup(o->owner)) == NULL) ||
	    (t->label = strdup(o->label != NULL ? o->label : "")) == NULL) {
		free(t->pool_name);
		free(t->owner);
		free(t->label);
		t->pool_name = t->owner = t->label = NULL;
		return POOL_REJECTED_FULL;
	}
	t->id = o->id != 0 ? o->id : next_task_id;
	t->attempt = o->attempt;
	t->on_lost_rerun = o->on_lost_rerun;
	t->queued_before_us = o->queued_before_us;
	t->accepted_wall_us = o->accepted_wall_us != 0 ? o->accepted_wall_us : clock_wall_us();
	t->pool_entry = o->pool;
	t->stream = o->stream;
	t->timeout_us = o->timeout_ms * 1000;
	t->queue_timeout_ms = o->queue_timeout_ms;
	t->job.queue_deadline_us = o->queue_timeout_ms != 0 ?
	    clock_now_us() + o->queue_timeout_ms * 1000 : 0;
	t->job.priority = o->priority;
	t->job.may_wait = o->may_wait;
	t->job.owner = tasks_owner_number(t->owner);
	t->notify_start = hooks_want_start;
	t->start_barrier = start_barrier && !t->kept_elsewhere && t->kind != NULL && t->kind->effects;
	t->submit_text = o->submit_text;
	t->submit_len = o->submit_len;
	/* Registered before submitting: the done may be posted at once. */
	if (idmap_put(tasks, t->id, t) == -1) {
		free(t->pool_name);
		free(t->owner);
		free(t->label);
		t->pool_name = t->owner = t->label = NULL;
		return POOL_REJECTED_FULL;
	}
	v = pool_submit(o->pool->pool, &t->job);
	if (v != POOL_ACCEPTED) {
		idmap_remove(tasks, t->id);
		free(t->pool_name);
		free(t->owner);
		free(t->label);
		t->pool_name = t->owner = t->label = NULL;
		return v;
	}
	if (t->id >= next_task_id)
		next_task_id = t->id + 1;
	list_add(t);
	if (o->sink != NULL)
		tasks_add_sink(t, o->sink);
	outstanding++;
	pools_task_accepted(o->pool);
	hooks_accepted(t);
	t->submit_text = NULL;
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

void
tasks_view(const struct task *t, struct proto_task *v)
{
	task_describe(t, v);
	v->state = tasks_state(t);
	v->queued_ahead = t->job.queued_ahead;    /* set by pool_submit, on this thread */
	v->priority = t->job.priority;
	v->finished = t->finished;
	if (t->finished) {
		/* the worker writes the times as it ends the task: read them only once it is back */
		v->queued_us = t->queued_us;
		v->run_us = t->run_us;
	}
}

/* Whether t passes every filter of l. */
static bool
list_match(const struct task *t, const struct proto_list *l)
{
	const char *state = tasks_state(t);
	bool in = l->nstates == 0;

	for (size_t i = 0; !in && i < l->nstates; i++)
		in = strcmp(l->states[i], state) == 0;
	return in && (l->pool == NULL || strcmp(l->pool, t->pool_name) == 0) &&
	    (l->owner == NULL || (t->owner != NULL && strcmp(l->owner, t->owner) == 0)) &&
	    (l->label == NULL || strcmp(l->label, t->label != NULL ? t->label : "") == 0);
}

size_t
tasks_list(const struct proto_list *l, bool (*visible)(const struct task *, void *), void *arg,
    struct proto_task *out, size_t max, size_t max_visit, bool *more, uint64_t *resume)
{
	struct task *t = newest_task;
	size_t n = 0, visited = 0;
	uint64_t last = 0;

	tasks_prune();
	if (l->before != 0) {
		struct task *b = idmap_get(tasks, l->before);
		if (b != NULL)
			t = b->list_older;
		else
			while (t != NULL && t->id >= l->before)
				t = t->list_older;
	}
	*more = false;
	*resume = 0;
	for (; t != NULL; t = t->list_older) {
		if (visited++ == max_visit) {
			*more = true;
			*resume = last;
			break;
		}
		last = t->id;
		if (!list_match(t, l) || !visible(t, arg))
			continue;
		if (n == max) {
			*more = true;
			*resume = out[n - 1].id;
			break;
		}
		tasks_view(t, &out[n]);
		if (!t->finished && t->pool_entry != NULL)
			pool_job_times(t->pool_entry->pool, &t->job, &out[n].queued_us,
			    &out[n].run_us);
		n++;
	}
	return n;
}

void
tasks_cancel(struct task *t)
{
	if (t->finished)
		return;
	pool_cancel(t->pool_entry->pool, &t->job);
	task_wake_streams(); /* a run blocked on its stream budget sees the cancel */
}

uint64_t
tasks_outstanding(void)
{
	return outstanding;
}

/* ------------------------------------------------------------ a task's events */

/*
 * A stream event, or the start of the run (event NULL): the started hooks
 * run once, then the event goes to each sink that asked for the stream
 * (the submitter's, first on the list, and the followers'; the walk stops
 * at the last of them, so the waits behind cost nothing). Its weight stays
 * on the task's budget until the submitter's sink lets go of it, so the
 * submitter's reader paces the run; a follower's copy weighs nothing: a
 * follower never slows the task, its connection's budget bounds what
 * waits for it (conn-sink.c drops a follower past it). With no pacing
 * sink the weight is given back at once.
 */
/* An output event's bytes (its weight) reached the loop: counted on t->streamed. */
static void
count_streamed(struct task *t, json_t *event, size_t weight)
{
	const char *name = json_string_value(json_object_get(event, FIELD_EVENT));
	const char *stream = json_string_value(json_object_get(event, FIELD_STREAM));

	if (name != NULL && stream != NULL && strcmp(name, EV_OUTPUT) == 0)
		t->streamed[strcmp(stream, STREAM_STDERR) == 0] += weight;
}

static void
task_event(struct task *t, json_t *event, size_t weight)
{
	struct task_sink *s;
	unsigned left = t->nstreaming;
	bool paced = false;

	hooks_started(t);
	if (event == NULL)
		return;
	if (t->attempt > 0 && json_is_object(event) &&
	    strcmp(json_string_value(json_object_get(event, FIELD_EVENT)), EV_STARTED) == 0)
		json_object_set_new(event, FIELD_ATTEMPT, json_integer(t->attempt));
	count_streamed(t, event, weight);
	if (left == 0) {
		task_stream_taken(t, weight);
		return;
	}
	for (s = t->sinks; s != NULL && left > 0; s = s->next)
		if (s->stream) {
			bool paces = s->paces && !paced;
			paced = paced || paces;
			s->ops->event(s, t, event, paces ? weight : 0);
			left--;
		}
	if (!paced)
		task_stream_taken(t, weight);
}

void
tasks_stream_taken(uint64_t id, size_t weight)
{
	struct task *t = tasks != NULL ? idmap_get(tasks, id) : NULL;

	if (t != NULL && !t->finished)
		task_stream_taken(t, weight);
}

/*
 * What a retained task is counted for against result_retain_bytes: its
 * done text, the task itself, its pool's name and its owner. Only what does not
 * change once it is retained, so that the same figure comes off when it
 * goes.
 */
static size_t
retained_cost(const struct task *t)
{
	return t->done_text->len + sizeof (struct task) +
	    (t->pool_name != NULL ? strlen(t->pool_name) + 1 : 0) +
	    (t->owner != NULL ? strlen(t->owner) + 1 : 0);
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

/* The done came back: every sink gets it, the task is retained, light. */
static void
task_finish(struct task *t)
{
	struct pools_entry *e = t->pool_entry;
	struct task_sink *s;

	t->finished = true;
	t->finished_us = clock_now_us();
	for (s = t->sinks; s != NULL; s = s->next)
		s->ops->done(s, t);
	release_sinks(t);
	hooks_finished(t);
	task_lighten(t);
	t->pool_entry = NULL;       /* the pool may go once its last task is done */
	retain(t);
	tasks_prune();
	outstanding--;
	pools_task_finished(e);
}

/* ------------------------------------------------------------ retention */

/*
 * Why the latest forgotten tasks went (TASKS_FORGOT_*), for the message
 * that answers a wait on one: a ring, the oldest overwritten.
 */
#define FORGOT_RING 4096
static struct {
	uint64_t id;
	int why;
} forgot_ring[FORGOT_RING];
static size_t forgot_next;

int
tasks_forgotten_why(uint64_t id)
{
	for (size_t i = 0; i < FORGOT_RING; i++)
		if (forgot_ring[i].id == id)
			return forgot_ring[i].why;
	return 0;
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
		forgot_ring[forgot_next].id = t->id;
		forgot_ring[forgot_next].why = aged ? TASKS_FORGOT_TTL : counted ?
		    TASKS_FORGOT_COUNT : TASKS_FORGOT_BYTES;
		forgot_next = (forgot_next + 1) % FORGOT_RING;
		oldest_retained = t->newer;
		if (oldest_retained != NULL)
			oldest_retained->older = NULL;
		else
			newest_retained = NULL;
		nretained--;
		retained_bytes -= retained_cost(t);
		idmap_remove(tasks, t->id);
		hooks_forgotten(t);
		discard(t);
	}
}

bool
tasks_forget_oldest(void)
{
	struct task *t = oldest_retained;

	if (t == NULL)
		return false;
	results_forgotten++;
	oldest_retained = t->newer;
	if (oldest_retained != NULL)
		oldest_retained->older = NULL;
	else
		newest_retained = NULL;
	nretained--;
	retained_bytes -= retained_cost(t);
	idmap_remove(tasks, t->id);
	hooks_forgotten(t);
	discard(t);
	return true;
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

int
tasks_restore_finished(struct task *t, struct blob *done_text, const char *state,
    uint64_t finished_wall_us)
{
	uint64_t now = clock_wall_us(), age;

	if (idmap_put(tasks, t->id, t) == -1) {
		blob_release(done_text);
		task_free(t);
		return -1;
	}
	t->done_text = done_text;
	t->final_state = state;
	t->finished = true;
	/* result_ttl counts from the end, by wall time: the monotonic clock began again */
	age = now > finished_wall_us ? now - finished_wall_us : 0;
	t->finished_us = clock_now_us() > age ? clock_now_us() - age : 0;
	if (t->id >= next_task_id)
		next_task_id = t->id + 1;
	if (t->label == NULL && (t->label = strdup("")) == NULL) {
		idmap_remove(tasks, t->id);
		task_free(t);
		return -1;
	}
	list_add(t);
	retain(t);
	tasks_prune();
	return 0;
}

void
tasks_set_start_barrier(bool on)
{
	start_barrier = on;
}

struct each {
	void (*fn)(struct task *, void *);
	void *arg;
};

static void
each_one(void *value, void *arg)
{
	struct each *e = arg;

	e->fn(value, e->arg);
}

void
tasks_each(void (*fn)(struct task *t, void *arg), void *arg)
{
	struct each e = { fn, arg };

	if (tasks != NULL)
		idmap_each(tasks, each_one, &e);
}

void
tasks_set_next_id(uint64_t next)
{
	if (next > next_task_id)
		next_task_id = next;
}

uint64_t
tasks_next_id(void)
{
	return next_task_id;
}

bool
tasks_was_accepted(uint64_t id)
{
	return id >= 1 && id < next_task_id;
}

static void
free_one(void *value, void *arg)
{
	discard(value);
}

void
tasks_free_all(void)
{
	if (tasks == NULL)
		return;
	idmap_each(tasks, free_one, NULL);
	idmap_free(tasks);
	tasks = NULL;
	oldest_retained = newest_retained = newest_task = NULL;
	json_decref(owner_numbers);
	owner_numbers = NULL;
	nretained = 0;
	retained_bytes = 0;
	nhooks = 0;
	hooks_want_start = false;
	start_barrier = false;
}
