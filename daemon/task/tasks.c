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
 *
 * Every task enters its pool's queue through tasks_enqueue (pool_submit is
 * called there and nowhere else): a plain submit at once (refused: nothing
 * was accepted), a delayed, released or retried one when it is due (refused
 * for room: it waits, scheduled, on its pool's list of due tasks, and the
 * pool's room hook lets it in before held submits). An attempt that ends
 * in a state of its retry_on is not finished: task_finish schedules the
 * next (task_retry), and the task's one done is its last attempt's.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "base/blob.h"
#include "base/clock.h"
#include "daemon.h"
#include "base/idmap.h"
#include "base/log.h"
#include "base/utf8.h"
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

/*
 * Scheduling: where a task is while it has no queue slot (t->sched). A
 * scheduled task waits in one min-heap of due times (wall clock) with one
 * libevent timer for its head, so a waiting task costs its place in the
 * array and no loop time; once due it enters its pool's queue through
 * tasks_enqueue, or, when the pool has no room, waits on the pool's list of
 * due tasks (oldest due first) until room frees (tasks_pool_room). A
 * waiting task is known to each of its dependencies (their dependents), so
 * a task's end releases or skips exactly the tasks that wait for it, in
 * that pass, without a scan.
 */
#define TASKS_SCHED_NONE    0   /* in its pool (queued, running), finished, or ending */
#define TASKS_SCHED_HEAP    1   /* scheduled: in the heap until due */
#define TASKS_SCHED_DUE     2   /* scheduled: due, on its pool's list until room frees */
#define TASKS_SCHED_WAITING 3   /* waiting for its dependencies */
#define TASKS_SCHED_KEPT    4   /* scheduled or waiting at a drain: left for the next start */

static struct task **heap;          /* scheduled tasks, earliest due first */
static size_t nheap, heap_cap;
static struct event *due_ev;        /* the heap head's timer */
static uint64_t due_armed;          /* the due time due_ev is set for; 0: not set */
static size_t nscheduled;           /* scheduled and waiting (max_scheduled) */
static json_t *keys;                /* "owner\nkey" -> task id */
static void (*retry_hook)(struct task *);
static bool shutting_down, keep_at_shutdown;
static bool in_room;                /* tasks_pool_room is running */
static bool popping;                /* due_cb takes due tasks off the heap: it sets the timer after */

static void task_event(struct task *, json_t *, size_t);
static void room_hook(struct pools_entry *, void *);

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
static void keys_remove(struct task *);

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

	srandom((unsigned)(clock_wall_us() ^ (uint64_t)getpid())); /* the retries' jitter */
	if (tasks == NULL && (tasks = idmap_new()) == NULL)
		return cause_set(cause, "out of memory for the task registry");
	task_set_handlers(&h);
	if (pools_add_room_hook(room_hook, NULL) == -1)
		return cause_set(cause, "too many room hooks");
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

/* ------------------------------------------------------------ keys */

/* The map's name of owner's key: the owner has no newline, so the first one splits them. */
static char *
keys_name(const char *owner, const char *key)
{
	char *name;

	if (asprintf(&name, "%s\n%s", owner != NULL ? owner : "", key) == -1)
		return NULL;
	return name;
}

struct task *
tasks_find_key(const char *owner, const char *key)
{
	char *name;
	json_t *id;

	if (keys == NULL || (name = keys_name(owner, key)) == NULL)
		return NULL;
	id = json_object_get(keys, name);
	free(name);
	return id != NULL ? tasks_find((uint64_t)json_integer_value(id)) : NULL;
}

static void
keys_put(struct task *t)
{
	char *name;

	if (t->key == NULL)
		return;
	if ((keys == NULL && (keys = json_object()) == NULL) ||
	    (name = keys_name(t->owner, t->key)) == NULL)
		return;
	json_object_set_new(keys, name, json_integer((json_int_t)t->id));
	free(name);
}

/* t's key is free again (t is forgotten), unless another task holds it now. */
static void
keys_remove(struct task *t)
{
	char *name;
	json_t *id;

	if (t->key == NULL || keys == NULL || (name = keys_name(t->owner, t->key)) == NULL)
		return;
	id = json_object_get(keys, name);
	if (id != NULL && (uint64_t)json_integer_value(id) == t->id)
		json_object_del(keys, name);
	free(name);
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
	keys_remove(t);
	task_free(t);
}

/* ------------------------------------------------------------ scheduling */

static bool
sched_counted(unsigned char s)
{
	return s == TASKS_SCHED_HEAP || s == TASKS_SCHED_DUE || s == TASKS_SCHED_WAITING;
}

/* Moves t to s, keeping its pool's figures and max_scheduled's count. */
static void
sched_set(struct task *t, unsigned char s)
{
	struct pools_entry *e = t->pool_entry;

	if (sched_counted(t->sched)) {
		nscheduled--;
		if (e != NULL && t->sched == TASKS_SCHED_WAITING)
			e->waiting--;
		else if (e != NULL)
			e->scheduled--;
	}
	if (sched_counted(s)) {
		nscheduled++;
		if (e != NULL && s == TASKS_SCHED_WAITING)
			e->waiting++;
		else if (e != NULL)
			e->scheduled++;
	}
	t->sched = s;
}

size_t
tasks_scheduled_count(void)
{
	return nscheduled;
}

static bool
heap_less(const struct task *a, const struct task *b)
{
	return a->due_wall_us < b->due_wall_us ||
	    (a->due_wall_us == b->due_wall_us && a->id < b->id);
}

static void
heap_set(size_t i, struct task *t)
{
	heap[i] = t;
	t->heap_index = i;
}

static void
heap_up(size_t i)
{
	struct task *t = heap[i];

	while (i > 0 && heap_less(t, heap[(i - 1) / 2])) {
		heap_set(i, heap[(i - 1) / 2]);
		i = (i - 1) / 2;
	}
	heap_set(i, t);
}

static void
heap_down(size_t i)
{
	struct task *t = heap[i];
	size_t c;

	while ((c = 2 * i + 1) < nheap) {
		if (c + 1 < nheap && heap_less(heap[c + 1], heap[c]))
			c++;
		if (!heap_less(heap[c], t))
			break;
		heap_set(i, heap[c]);
		i = c;
	}
	heap_set(i, t);
}

static void due_cb(evutil_socket_t, short, void *);

/* The timer follows the heap's head: set when the head's due time changed. */
static void
heap_arm(void)
{
	uint64_t now, wait;
	struct timeval tv;

	if (popping)
		return;
	if (nheap == 0) {
		if (due_ev != NULL && due_armed != 0)
			evtimer_del(due_ev);
		due_armed = 0;
		return;
	}
	if (heap[0]->due_wall_us == due_armed)
		return;
	if (due_ev == NULL && (due_ev = evtimer_new(daemon_state->base, due_cb, NULL)) == NULL)
		fatalx("out of memory for the scheduled tasks' timer");
	now = clock_wall_us();
	wait = heap[0]->due_wall_us > now ? heap[0]->due_wall_us - now : 0;
	tv.tv_sec = (time_t)(wait / 1000000);
	tv.tv_usec = (suseconds_t)(wait % 1000000);
	evtimer_add(due_ev, &tv);
	due_armed = heap[0]->due_wall_us;
}

static void
heap_push(struct task *t)
{
	if (nheap == heap_cap) {
		size_t cap = heap_cap != 0 ? heap_cap * 2 : 1024;
		struct task **p = realloc(heap, cap * sizeof *p);
		if (p == NULL)
			fatalx("out of memory for %zu scheduled tasks", nheap + 1);
		heap = p;
		heap_cap = cap;
	}
	heap_set(nheap++, t);
	heap_up(nheap - 1);
	heap_arm();
}

static void
heap_remove(struct task *t)
{
	size_t i = t->heap_index;
	struct task *last = heap[--nheap];

	if (i < nheap) {
		heap_set(i, last);
		heap_up(i);
		heap_down(last->heap_index);
	}
	heap_arm();
}

/* Takes t off e's list of due tasks (a cancel: the list is short, room is what it lacks). */
static void
due_unlink(struct pools_entry *e, struct task *t)
{
	struct task **pp, *prev = NULL;

	for (pp = &e->due_head; *pp != NULL; prev = *pp, pp = &(*pp)->due_next)
		if (*pp == t) {
			*pp = t->due_next;
			if (e->due_tail == t)
				e->due_tail = prev;
			t->due_next = NULL;
			return;
		}
}

/* Takes t out of wherever it waits without a queue slot. */
static void
sched_detach(struct task *t)
{
	if (t->sched == TASKS_SCHED_HEAP)
		heap_remove(t);
	else if (t->sched == TASKS_SCHED_DUE && t->pool_entry != NULL)
		due_unlink(t->pool_entry, t);
	sched_set(t, TASKS_SCHED_NONE);
}

/*
 * t ends without running (skipped, cancelled while scheduled or waiting,
 * its pool gone): its done goes out on a later pass, as a run's would.
 */
static void
end_unrun(struct task *t, const char *state, const char *code, const char *message)
{
	struct proto_task v;

	sched_detach(t);
	t->cancel_asked = true;     /* no attempt follows */
	t->final_state = state;
	t->queued_us = t->run_us = 0;
	task_describe(t, &v);
	v.state = state;
	v.finished = true;
	v.error_code = code;
	v.error_message = message;
	blob_release(t->done_text);
	t->done_text = proto_encode_done(&v);
	if (t->pool_entry != NULL && strcmp(state, STATE_SKIPPED) == 0)
		t->pool_entry->skipped++;
	else if (t->pool_entry != NULL)
		t->pool_entry->ended_unqueued++;
	task_post_done(t);
}

enum pool_verdict
tasks_enqueue(struct task *t)
{
	t->job.queue_deadline_us = t->queue_timeout_ms != 0 ?
	    clock_now_us() + t->queue_timeout_ms * 1000 : 0;
	return pool_submit(t->pool_entry->pool, &t->job);
}

/* A scheduled task is due (or a released one has no delay): into its queue, or in line for room. */
static void
task_due(struct task *t)
{
	struct pools_entry *e = t->pool_entry;
	enum pool_verdict v = POOL_REJECTED_FULL;
	char msg[256];

	if (t->sched == TASKS_SCHED_HEAP) {
		heap_remove(t);
		sched_set(t, TASKS_SCHED_NONE);     /* not in the heap: never removed twice */
	}
	t->job.may_wait = true;     /* refused for room, it waits here: not a rejection */
	if (e->due_head == NULL)    /* otherwise older due tasks go first */
		v = tasks_enqueue(t);
	switch (v) {
	case POOL_ACCEPTED:
		break;
	case POOL_REJECTED_FULL:
	case POOL_REJECTED_QUOTA:   /* a scheduled task is never refused: it waits for room */
		sched_set(t, TASKS_SCHED_DUE);
		t->due_next = NULL;
		if (e->due_tail != NULL)
			e->due_tail->due_next = t;
		else
			e->due_head = t;
		e->due_tail = t;
		pools_want_room(e);
		break;
	case POOL_REJECTED_CLOSED:
		snprintf(msg, sizeof msg, "task %llu could not enter its queue: pool %s was "
		    "closed before it was due", (unsigned long long)t->id, e->name);
		end_unrun(t, STATE_LOST, ERR_LOST, msg);
		break;
	}
}

static void
due_cb(evutil_socket_t fd, short what, void *arg)
{
	uint64_t now = clock_wall_us();

	due_armed = 0;
	popping = true;
	while (nheap > 0 && heap[0]->due_wall_us <= now)
		task_due(heap[0]);
	popping = false;
	heap_arm();
}

/* The first room hook (pools.h): due tasks enter before held submits are accepted. */
static void
room_hook(struct pools_entry *e, void *arg)
{
	tasks_pool_room(e);
}

void
tasks_pool_room(struct pools_entry *e)
{
	struct task *t;
	enum pool_verdict v;
	char msg[256];

	if (in_room)
		return;
	in_room = true;
	while ((t = e->due_head) != NULL) {
		if ((v = tasks_enqueue(t)) == POOL_REJECTED_FULL || v == POOL_REJECTED_QUOTA) {
			pools_want_room(e);
			break;
		}
		e->due_head = t->due_next;
		if (e->due_head == NULL)
			e->due_tail = NULL;
		t->due_next = NULL;
		sched_set(t, TASKS_SCHED_NONE);
		if (v == POOL_REJECTED_CLOSED) {
			snprintf(msg, sizeof msg, "task %llu could not enter its queue: pool %s was "
			    "closed before it had room", (unsigned long long)t->id, e->name);
			end_unrun(t, STATE_LOST, ERR_LOST, msg);
		}
	}
	in_room = false;
}

/*
 * t's dependencies allow it: due now, or after its delay, counted from
 * base (wall clock: the last dependency's end, or its acceptance).
 */
static void
task_release(struct task *t, uint64_t due)
{
	if (due > clock_wall_us()) {
		t->due_wall_us = due;
		sched_set(t, TASKS_SCHED_HEAP);
		heap_push(t);
		return;
	}
	sched_set(t, TASKS_SCHED_NONE);
	task_due(t);
}

/* A dependency ended other than succeeded: t (after_mode ok) never runs. */
static void
task_skip(struct task *t, const struct task *dep)
{
	char msg[256];

	t->skip_by = dep->id;
	snprintf(msg, sizeof msg, "task %llu it depends on ended %s: it does not run",
	    (unsigned long long)dep->id, dep->final_state);
	end_unrun(t, STATE_SKIPPED, ERR_DEPENDENCY_FAILED, msg);
}

/* t ended: the tasks waiting for it go on, or are skipped, in this pass. */
static void
release_dependents(struct task *t)
{
	bool ok = strcmp(t->final_state, STATE_SUCCEEDED) == 0;

	for (uint32_t i = 0; i < t->ndependents; i++) {
		struct task *d = idmap_get(tasks, t->dependents[i]);
		unsigned short k;

		if (d == NULL || d->sched != TASKS_SCHED_WAITING)
			continue;
		if (!ok && !d->after_any) {
			task_skip(d, t);
			continue;
		}
		for (k = 0; k < d->after_left && d->after[k] != t->id; k++)
			;
		if (k == d->after_left)
			continue;
		d->after[k] = d->after[--d->after_left];   /* the ended ones go past after_left */
		d->after[d->after_left] = t->id;
		if (d->after_left == 0)
			task_release(d, d->delay_ms > 0 ? clock_wall_us() + d->delay_ms * 1000 : 0);
	}
	free(t->dependents);
	t->dependents = NULL;
	t->ndependents = t->dependents_cap = 0;
}

static int
dependents_add(struct task *dep, uint64_t id)
{
	if (dep->ndependents == dep->dependents_cap) {
		uint32_t cap = dep->dependents_cap != 0 ? dep->dependents_cap * 2 : 4;
		uint64_t *p = realloc(dep->dependents, cap * sizeof *p);
		if (p == NULL)
			return -1;
		dep->dependents = p;
		dep->dependents_cap = cap;
	}
	dep->dependents[dep->ndependents++] = id;
	return 0;
}

/*
 * A new task with a delay, dependencies or a due time from the journal:
 * waiting, scheduled, in its queue, or skipped at once.
 */
static void
task_hold(struct task *t, const struct task_options *o)
{
	uint64_t base = t->accepted_wall_us, due;
	const struct task *failed = NULL;

	for (unsigned short i = 0; i < t->nafter; i++) {
		struct task *d = idmap_get(tasks, t->after[i]);
		uint64_t id;

		if (d == NULL)
			continue;   /* forgotten since (a replay): it ended and let this one go */
		if (d->finished) {
			if (strcmp(d->final_state, STATE_SUCCEEDED) != 0 && !t->after_any &&
			    failed == NULL)
				failed = d;
			if (d->finished_wall_us > base)
				base = d->finished_wall_us;
			continue;
		}
		if (dependents_add(d, t->id) == -1)
			fatalx("out of memory for the tasks waiting for task %llu",
			    (unsigned long long)d->id);
		/* the ones not ended first (status's after) */
		id = t->after[i];
		t->after[i] = t->after[t->after_left];
		t->after[t->after_left++] = id;
	}
	if (failed != NULL) {
		task_skip(t, failed);
		return;
	}
	if (t->after_left > 0) {
		sched_set(t, TASKS_SCHED_WAITING);
		return;
	}
	due = o->due_wall_us != 0 ? o->due_wall_us :
	    t->delay_ms > 0 ? base + t->delay_ms * 1000 : 0;
	task_release(t, due);
}

/* ------------------------------------------------------------ retries */

void
tasks_set_retry_hook(void (*fn)(struct task *t))
{
	retry_hook = fn;
}

/* The delay before the attempt after attempt n: doubled each time up to the cap, then +0..10%. */
static uint64_t
retry_delay_ms(const struct task *t, uint32_t n)
{
	uint64_t d = t->retry_delay_ms;

	for (uint32_t i = 1; i < n && d < t->retry_delay_max_ms; i++)
		d *= 2;
	if (d > t->retry_delay_max_ms)
		d = t->retry_delay_max_ms;
	return d + (d >= 10 ? (uint64_t)random() % (d / 10 + 1) : 0);
}

/* Whether t's attempt that just ended in state is followed by another. */
static bool
retry_wanted(const struct task *t, const char *state)
{
	unsigned bit = 0;

	if (t->cancel_asked || t->retries == 0 || t->attempt == 0 || t->attempt > t->retries ||
	    (shutting_down && !keep_at_shutdown))
		return false;
	if (strcmp(state, STATE_FAILED) == 0)
		bit = PROTO_RETRY_FAILED;
	else if (strcmp(state, STATE_TIMED_OUT) == 0)
		bit = PROTO_RETRY_TIMED_OUT;
	else if (strcmp(state, STATE_LOST) == 0)
		bit = PROTO_RETRY_LOST;
	return (t->retry_on & bit) != 0;
}

/* The error object of t's done (the attempt that ended), for its retrying event. */
static json_t *
done_error_of(const struct task *t)
{
	json_t *done, *err = NULL;
	char *text;

	if (t->done_text == NULL || (text = malloc(t->done_text->len + 1)) == NULL)
		return NULL;
	text[0] = '{';
	memcpy(text + 1, t->done_text->data, t->done_text->len);
	if ((done = json_loadb(text, t->done_text->len + 1, 0, NULL)) != NULL)
		err = json_incref(json_object_get(done, FIELD_ERROR));
	json_decref(done);
	free(text);
	return err;
}

/*
 * t's attempt ended in a state of its retry_on with attempts left: its
 * followers hear retrying, and it is scheduled again for the next.
 */
static void
task_retry(struct task *t)
{
	struct pools_entry *e = t->pool_entry;
	uint64_t delay = retry_delay_ms(t, t->attempt);
	json_t *ev, *err;
	struct task_sink *s;

	ev = json_pack("{s:s, s:I, s:s, s:I}", FIELD_EVENT, EV_RETRYING, FIELD_ATTEMPT,
	    (json_int_t)t->attempt, FIELD_STATE, t->final_state, FIELD_DELAY_MS,
	    (json_int_t)delay);
	if (ev != NULL && (err = done_error_of(t)) != NULL)
		json_object_set_new(ev, FIELD_ERROR, err);
	if (ev != NULL)
		for (s = t->sinks; s != NULL; s = s->next)
			if (s->stream)
				s->ops->event(s, t, ev, 0);
	json_decref(ev);
	log_debug("task %llu attempt %u %s: attempt %u in %llu ms", (unsigned long long)t->id,
	    t->attempt, t->final_state, t->attempt + 1, (unsigned long long)delay);
	task_rearm(t);
	t->start_seen = false;
	t->attempt++;
	t->due_wall_us = clock_wall_us() + delay * 1000;
	e->retried++;
	if (retry_hook != NULL)
		retry_hook(t);
	if (shutting_down) {
		/* a drain with the journal: the next attempt is the next start's */
		t->sched = TASKS_SCHED_KEPT;
		release_sinks(t);
		t->pool_entry = NULL;
		outstanding--;
		pools_task_finished(e);
		return;
	}
	sched_set(t, TASKS_SCHED_HEAP);
	heap_push(t);
}

/* ------------------------------------------------------------ shutdown */

static void
collect_held(struct task *t, void *arg)
{
	json_t *list = arg;

	if (sched_counted(t->sched))
		json_array_append_new(list, json_integer((json_int_t)t->id));
}

void
tasks_shutdown(bool keep)
{
	json_t *held = json_array(), *id;
	size_t i;

	if (!shutting_down)
		keep_at_shutdown = keep;
	shutting_down = true;
	if (held == NULL)
		fatalx("out of memory at shutdown");
	tasks_each(collect_held, held);
	json_array_foreach(held, i, id) {
		struct task *t = idmap_get(tasks, (uint64_t)json_integer_value(id));
		struct pools_entry *e = t->pool_entry;
		char msg[160];

		if (keep) {
			sched_detach(t);
			t->sched = TASKS_SCHED_KEPT;
			release_sinks(t);
			t->pool_entry = NULL;
			outstanding--;
			pools_task_finished(e);
			continue;
		}
		snprintf(msg, sizeof msg, "task was cancelled before it started: tpd shut down "
		    "while it was %s", tasks_state(t));
		end_unrun(t, STATE_CANCELLED, ERR_CANCELLED, msg);
	}
	if (keep && json_array_size(held) > 0)
		log_notice("%zu scheduled or waiting task%s stay in the journal for the next start",
		    json_array_size(held), json_array_size(held) == 1 ? "" : "s");
	json_decref(held);
}

/* ------------------------------------------------------------ what status and list show */

/* Whether an argument needs quotes in a POSIX shell. */
static bool
shell_plain(const char *s)
{
	if (*s == '\0')
		return false;
	for (; *s != '\0'; s++)
		if (strchr("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
		    "_@%+=:,./-", *s) == NULL)
			return false;
	return true;
}

char *
tasks_command(json_t *spec)
{
	json_t *kind = json_object_get(spec, FIELD_KIND), *argv, *arg;
	char *out = NULL;
	size_t i, len = 0, cap = 0;

	if (!json_is_string(kind) || strcmp(json_string_value(kind), KIND_EXEC) != 0 ||
	    !json_is_array(argv = json_object_get(spec, FIELD_ARGV)))
		return NULL;
	json_array_foreach(argv, i, arg) {
		const char *a = json_string_value(arg);
		size_t need = (a != NULL ? strlen(a) * 4 : 0) + 4;
		char *p;

		if (a == NULL)
			continue;
		if (len + need + 1 > cap) {
			cap = (len + need + 1) * 2;
			if ((p = realloc(out, cap)) == NULL) {
				free(out);
				return NULL;
			}
			out = p;
		}
		if (len > 0)
			out[len++] = ' ';
		if (shell_plain(a)) {
			memcpy(out + len, a, strlen(a));
			len += strlen(a);
		} else {
			out[len++] = '\'';
			for (; *a != '\0'; a++) {
				if (*a == '\'') {
					memcpy(out + len, "'\\''", 4);
					len += 4;
				} else
					out[len++] = *a;
			}
			out[len++] = '\'';
		}
		if (len > WIRE_COMMAND_MAX)
			break;
	}
	if (out == NULL)
		return strdup("");
	if (len > WIRE_COMMAND_MAX) {
		len = WIRE_COMMAND_MAX;
		len -= utf8_partial_tail(out, len);
	}
	out[len] = '\0';
	return out;
}

void
tasks_request_view(const struct task *t, json_t **spec, json_t **submit)
{
	static const char *const fields[] = { FIELD_POOL, FIELD_LABEL, "priority", FIELD_KEY,
	    FIELD_AFTER, FIELD_AFTER_MODE, FIELD_DELAY_MS, FIELD_RETRIES, FIELD_RETRY_ON,
	    FIELD_RETRY_DELAY_MS, FIELD_RETRY_DELAY_MAX_MS, FIELD_QUEUE_TIMEOUT_MS, FIELD_ON_LOST,
	    NULL };
	json_t *root, *v;

	*spec = *submit = NULL;
	if (t->request == NULL ||
	    (root = json_loadb(t->request, t->request_len, 0, NULL)) == NULL)
		return;
	if (json_object_get(root, FIELD_OP) == NULL) {
		*spec = root;           /* a bare task object (a journal of an older build) */
		return;
	}
	*spec = json_incref(json_object_get(root, FIELD_TASK));
	if ((*submit = json_object()) != NULL)
		for (size_t i = 0; fields[i] != NULL; i++)
			if ((v = json_object_get(root, fields[i])) != NULL)
				json_object_set(*submit, fields[i], v);
	json_decref(root);
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

/* Undoes what tasks_submit copied onto t (a refused submit: the caller frees t). */
static void
unfill(struct task *t)
{
	free(t->pool_name);
	free(t->owner);
	free(t->label);
	free(t->key);
	free(t->request);
	free(t->command);
	free(t->after);
	t->pool_name = t->owner = t->label = t->key = t->request = t->command = NULL;
	t->after = NULL;
}

/* Copies what a submit asks onto t; -1 when memory ran out. */
static int
fill(struct task *t, const struct task_options *o)
{
	if ((t->pool_name = strdup(o->pool->name)) == NULL ||
	    (o->owner != NULL && (t->owner = strdup(o->owner)) == NULL) ||
	    (t->label = strdup(o->label != NULL ? o->label : "")) == NULL ||
	    (o->key != NULL && (t->key = strdup(o->key)) == NULL) ||
	    (o->nafter > 0 && (t->after = calloc(o->nafter, sizeof *t->after)) == NULL))
		return -1;
	if (o->submit_text != NULL) {
		if ((t->request = malloc(o->submit_len + 1)) == NULL)
			return -1;
		memcpy(t->request, o->submit_text, o->submit_len);
		t->request[o->submit_len] = '\0';
		t->request_len = o->submit_len;
	}
	if (o->spec != NULL && t->kind == &task_kind_exec && (t->command = tasks_command(o->spec)) == NULL)
		return -1;
	if (o->nafter > 0)
		memcpy(t->after, o->after, o->nafter * sizeof *t->after);
	t->nafter = (unsigned short)o->nafter;
	t->after_any = o->after_any;
	t->delay_ms = o->delay_ms;
	t->retries = (unsigned short)o->retries;
	t->retry_on = (unsigned char)o->retry_on;
	t->retry_delay_ms = o->retry_delay_ms;
	t->retry_delay_max_ms = o->retry_delay_max_ms;
	return 0;
}

void
tasks_options_schedule(struct task_options *o, const struct proto_submit *sub)
{
	o->delay_ms = sub->delay_ms;
	o->after = sub->after;
	o->nafter = sub->nafter;
	o->after_any = sub->after_any;
	o->retries = sub->retries;
	o->retry_on = sub->retry_on;
	o->retry_delay_ms = sub->retry_delay_ms;
	o->retry_delay_max_ms = sub->retry_delay_max_ms;
	o->key = sub->key;
}

enum pool_verdict
tasks_submit(struct task *t, const struct task_options *o)
{
	/* held: accepted now, into the queue later (never refused for room once accepted) */
	bool held = o->delay_ms > 0 || o->nafter > 0 || o->due_wall_us != 0;
	enum pool_verdict v;

	if (held && shutting_down && o->id == 0)
		return POOL_REJECTED_CLOSED;    /* a drain holds no one for the future */
	t->kept_elsewhere = o->kept_elsewhere;
	if (fill(t, o) == -1) {
		unfill(t);
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
	t->job.priority = o->priority;
	t->job.may_wait = o->may_wait;
	t->job.owner = tasks_owner_number(t->owner);
	t->notify_start = hooks_want_start;
	t->start_barrier = start_barrier && !t->kept_elsewhere && t->kind != NULL && t->kind->effects;
	t->submit_text = o->submit_text;
	t->submit_len = o->submit_len;
	/* Registered before submitting: the done may be posted at once. */
	if (idmap_put(tasks, t->id, t) == -1) {
		unfill(t);
		return POOL_REJECTED_FULL;
	}
	/* the door (tasks_enqueue): a refusal leaves nothing accepted, nothing journaled */
	if (!held && (v = tasks_enqueue(t)) != POOL_ACCEPTED) {
		idmap_remove(tasks, t->id);
		unfill(t);
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
	keys_put(t);
	t->submit_text = NULL;
	if (held)
		task_hold(t, o);
	return POOL_ACCEPTED;
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
	switch (t->sched) {
	case TASKS_SCHED_HEAP:
	case TASKS_SCHED_DUE:
		return STATE_SCHEDULED;
	case TASKS_SCHED_WAITING:
		return STATE_WAITING;
	case TASKS_SCHED_KEPT:
		return t->after_left > 0 ? STATE_WAITING : STATE_SCHEDULED;
	}
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
	v->command = t->command;
	if (!t->finished && t->after_left > 0) {
		v->after = t->after;
		v->nafter = t->after_left;
	}
	if (!t->finished && (t->sched == TASKS_SCHED_HEAP || t->sched == TASKS_SCHED_KEPT) &&
	    t->after_left == 0 && t->due_wall_us != 0) {
		uint64_t now = clock_wall_us();
		v->due = true;
		v->due_us = t->due_wall_us > now ? t->due_wall_us - now : 0;
	}
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
		if (!t->finished && t->pool_entry != NULL && t->sched == TASKS_SCHED_NONE)
			pool_job_times(t->pool_entry->pool, &t->job, &out[n].queued_us,
			    &out[n].run_us);
		n++;
	}
	return n;
}

void
tasks_cancel(struct task *t)
{
	char msg[160];

	if (t->finished)
		return;
	t->cancel_asked = true;
	if (t->sched == TASKS_SCHED_KEPT)
		return;         /* shutting down: the journal's cancel record ends it at the next start */
	if (t->sched != TASKS_SCHED_NONE) {
		snprintf(msg, sizeof msg, "task was cancelled before it started (it was %s)",
		    tasks_state(t));
		end_unrun(t, STATE_CANCELLED, ERR_CANCELLED, msg);
		return;
	}
	if (t->pool_entry == NULL)
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
 * change once it is retained; retain keeps the figure in the task
 * (retained_size), so that the same one comes off when it goes, and a
 * prune, which walks the oldest tasks, touches none of their strings.
 */
static size_t
retained_cost(const struct task *t)
{
	return t->done_text->len + sizeof (struct task) +
	    (t->pool_name != NULL ? strlen(t->pool_name) + 1 : 0) +
	    (t->owner != NULL ? strlen(t->owner) + 1 : 0) +
	    (t->request != NULL ? t->request_len + 1 : 0) +
	    (t->command != NULL ? strlen(t->command) + 1 : 0) +
	    (t->key != NULL ? strlen(t->key) + 1 : 0);
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
	t->retained_size = retained_cost(t);
	retained_bytes += t->retained_size;
}

/* The done came back: every sink gets it, the task is retained, light. */
static void
task_finish(struct task *t)
{
	struct pools_entry *e = t->pool_entry;
	struct task_sink *s;

	if (retry_wanted(t, t->final_state)) {
		task_retry(t);
		return;
	}
	t->finished = true;
	t->finished_us = clock_now_us();
	t->finished_wall_us = clock_wall_us();
	for (s = t->sinks; s != NULL; s = s->next)
		s->ops->done(s, t);
	release_sinks(t);
	hooks_finished(t);
	task_lighten(t);
	t->pool_entry = NULL;       /* the pool may go once its last task is done */
	retain(t);
	release_dependents(t);
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
		retained_bytes -= t->retained_size;
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
	retained_bytes -= t->retained_size;
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
	t->finished_wall_us = finished_wall_us;
	keys_put(t);
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
	if (due_ev != NULL)
		event_free(due_ev);
	due_ev = NULL;
	due_armed = 0;
	free(heap);
	heap = NULL;
	nheap = heap_cap = nscheduled = 0;
	json_decref(keys);
	keys = NULL;
	retry_hook = NULL;
	shutting_down = keep_at_shutdown = false;
	json_decref(owner_numbers);
	owner_numbers = NULL;
	nretained = 0;
	retained_bytes = 0;
	nhooks = 0;
	hooks_want_start = false;
	start_barrier = false;
}
