/*
 * pool.c: the resizable worker pool.
 *
 * Locking and ownership (keep these true):
 *
 *  - One mutex per pool, pool->lock, guards everything in struct pool and the
 *    pool-owned fields of every job in it (where, next/prev, times). There is
 *    no other lock in this file, so there is no lock order to get wrong. The
 *    cancel flag is atomic so that work functions can poll it unlocked.
 *  - User code never runs under the lock: work and done callbacks are called
 *    with it released. on_cancel is the one exception: it runs under
 *    pool->lock (pool_cancel, pool_close with POOL_NOW), must not block and
 *    must not call back into the pool, and may take only a leaf lock, one
 *    under which nothing else is locked or waited for. In tpd, on_cancel is
 *    task.c's task_on_cancel, which calls the kind's cancel hook, and the
 *    leaf locks it may take are exactly these: the sleep kind's timed->lock
 *    (task-builtin.c, to signal its condition) and the exec kind's
 *    x->wake_lock (task-exec.c, to write to the run's eventfd). Lock order:
 *    pool->lock, then one of those; never the other way round.
 *  - Admission is decided at one point: pool_submit, under the lock. Closing
 *    takes the same lock, so every submission is either in the queue before
 *    the pool closes (and will end in exactly one done) or rejected.
 *  - A worker decides whether to leave, take a job or wait at one point: the
 *    top of worker_main's loop, under the lock. A surplus worker (registered >
 *    target) unregisters there, before taking anything, so two surplus
 *    workers can never both see "one too many" and leave the queue without
 *    a consumer, and a later resize acts on the newest target.
 *  - pthread_join is always called without the lock: an exiting worker may
 *    still need it. Every started thread stays on pool->threads until a
 *    joiner takes it off; pool->joiners counts joins in progress so that a
 *    second shutdown waits for the first one's joins.
 *  - Jobs are owned by the caller's record. The pool only links them; a job
 *    leaves the pool's hands when where becomes POOL_JOB_FINISHED (under the
 *    lock), after which done is called once and the pool never touches it.
 *  - A worker books a finished job (counters, FINISHED) in the same locked
 *    section where it takes its next one, and calls the finished job's done
 *    right after unlocking: one lock round per job instead of two.
 *  - queued_hint and spinners are atomics read without the lock, only to
 *    decide whether to keep spinning (spin_for_work) or to spare a wake-up;
 *    every decision that matters is made again under the lock.
 *  - Wake-ups (wake_one): at most one sleeping worker is on its way at a
 *    time; a worker that takes a job and sees more queued wakes the next.
 *    No job can be stranded: a worker sleeps only after finding the queue
 *    empty under the lock, a submit that finds no worker on its way and no
 *    spinner wakes one, and a spinner re-checks the queue under the lock
 *    before it sleeps.
 *
 * How tpd uses the pool (the rules across threads, kept in the files named):
 *
 *  - The event-loop thread owns the listeners and every connection (conn.c);
 *    workers never touch them.
 *  - A task enters the pool self-contained: its kind's parse (loop thread)
 *    copies its inputs or takes its json_t over from the request, never
 *    shares it, since jansson does no locking (task-builtin.c, task-exec.c).
 *  - A task has a work part (task_work, on a worker: task.c) and a done
 *    part (task_finish, on the loop thread: the registry, tasks.c); it
 *    lives until the done part ran, then stays, light, for wait and status.
 *  - The pool's done callback (task_pool_done) only writes the done's text
 *    and pushes the task on the mailbox, waking the loop only when the
 *    mailbox was empty; the loop takes the whole mailbox at once and
 *    handles it unlocked (mailbox.c).
 *  - A task names its client by connection id, not pointer: the client may
 *    be gone when the done arrives (conn-sink.c, conn_find).
 *
 * Besides the workers, each pool has one watcher thread that expires queued
 * jobs whose queue deadline passed, so an expiry is delivered on time even
 * when every worker is busy with a long job. It is not counted as a worker
 * and lives until the pool is closed and its queue is empty (nothing can be
 * queued after that), so deadlines keep firing during a drain.
 */
#include "config.h"

#include <errno.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "pool.h"

struct worker {
	struct pool *pool;
	pthread_t tid;
	unsigned serial;
	bool is_watcher;
	struct worker *next;     /* on pool->threads until joined */
};

struct job_list {
	struct pool_job *head;
	struct pool_job *tail;
};

/* How long a worker that just finished a job spins for the next one before it sleeps. */
#define POOL_SPIN_US 50

struct pool {
	atomic_uint queued_hint;  /* p->queued, for spinners to read unlocked */
	atomic_uint spinners;
	bool may_spin;            /* more than one CPU; set at creation */
	unsigned sleepers;        /* workers in pthread_cond_wait on work_cv */
	unsigned waking;          /* of those, signalled and not yet awake */
	pthread_mutex_t lock;
	pthread_cond_t work_cv;   /* idle workers wait here */
	pthread_cond_t watch_cv;  /* the deadline watcher waits here */
	pthread_cond_t joined_cv; /* shutdowners wait here for other joiners */

	char *name;
	unsigned target;
	unsigned limit;
	unsigned capacity;
	unsigned registered;      /* workers counted against the target */
	unsigned busy;            /* workers running a job */
	unsigned queued;
	unsigned with_deadline;   /* queued jobs that have a deadline */
	uint64_t watch_until_us;  /* when the watcher next wakes; 0 = never */
	bool closed;

	struct job_list queue;    /* FIFO, head is the oldest */
	struct job_list running;

	struct worker *threads;   /* started and not yet joined */
	unsigned joiners;
	unsigned serial;
	pool_thread_start_fn thread_start;

	uint64_t accepted, rejected_full, rejected_closed;
	uint64_t succeeded, failed, timed_out, cancelled, expired;
};

/* The worker record of the current thread, to refuse a worker's own join. */
static _Thread_local struct worker *current_worker;

static void *worker_main(void *);
static void *watcher_main(void *);

uint64_t
clock_now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

static void __attribute__((format(printf, 2, 3)))
set_cause(char **cause, const char *fmt, ...)
{
	va_list ap;

	if (cause == NULL)
		return;
	va_start(ap, fmt);
	if (vasprintf(cause, fmt, ap) == -1)
		*cause = NULL;
	va_end(ap);
}

const char *
pool_state_name(enum pool_state s)
{
	switch (s) {
	case POOL_SUCCEEDED: return "succeeded";
	case POOL_FAILED: return "failed";
	case POOL_TIMED_OUT: return "timed_out";
	case POOL_CANCELLED: return "cancelled";
	case POOL_EXPIRED: return "expired";
	}
	return "failed";
}

/* ---- job lists (lock held) */

static void
list_append(struct job_list *l, struct pool_job *j)
{
	j->next = NULL;
	j->prev = l->tail;
	if (l->tail != NULL)
		l->tail->next = j;
	else
		l->head = j;
	l->tail = j;
}

static void
list_remove(struct job_list *l, struct pool_job *j)
{
	if (j->prev != NULL)
		j->prev->next = j->next;
	else
		l->head = j->next;
	if (j->next != NULL)
		j->next->prev = j->prev;
	else
		l->tail = j->prev;
	j->next = j->prev = NULL;
}

/* Takes j off the queue, counting it out. */
static void
dequeue(struct pool *p, struct pool_job *j)
{
	list_remove(&p->queue, j);
	p->queued--;
	atomic_store_explicit(&p->queued_hint, p->queued, memory_order_relaxed);
	if (j->queue_deadline_us != 0)
		p->with_deadline--;
	/* Closed and empty for good: the watcher's work is over. */
	if (p->closed && p->queue.head == NULL)
		pthread_cond_signal(&p->watch_cv);
}

/* Marks a queued job finished without running; done is called later, unlocked. */
static void
finish_unrun(struct pool *p, struct pool_job *j, enum pool_state state, struct job_list *out)
{
	dequeue(p, j);
	j->where = POOL_JOB_FINISHED;
	if (state == POOL_EXPIRED)
		p->expired++;
	else
		p->cancelled++;
	list_append(out, j);
}

/* Calls done for jobs that ended without running. Lock not held. */
static void
deliver_unrun(struct job_list *jobs, enum pool_state state)
{
	uint64_t now = clock_now_us();
	struct pool_job *j, *next;

	for (j = jobs->head; j != NULL; j = next) {
		next = j->next;
		j->next = j->prev = NULL;
		j->done(j, state, now - j->enqueued_us, 0);
	}
}

/* ---- threads */

static void
name_thread(struct worker *w)
{
	char name[16];

	snprintf(name, sizeof name, "%s%.8s/%u", w->is_watcher ? "t~" : "t:",
	    w->pool->name, w->serial);
	pthread_setname_np(w->tid, name);
}

/* Starts one thread and puts it on pool->threads. Lock held. */
static int
start_thread(struct pool *p, bool is_watcher)
{
	struct worker *w;
	int rc;

	if ((w = calloc(1, sizeof *w)) == NULL)
		return ENOMEM;
	w->pool = p;
	w->is_watcher = is_watcher;
	w->serial = ++p->serial;
	if (!is_watcher)
		p->registered++;
	rc = p->thread_start(&w->tid, NULL, is_watcher ? watcher_main : worker_main, w);
	if (rc != 0) {
		if (!is_watcher)
			p->registered--;
		free(w);
		return rc;
	}
	name_thread(w);
	w->next = p->threads;
	p->threads = w;
	return 0;
}

/* Joins the given threads, lock not held, and frees their records. */
static void
join_all(struct worker *list)
{
	struct worker *w, *next;

	for (w = list; w != NULL; w = next) {
		next = w->next;
		pthread_join(w->tid, NULL);
		free(w);
	}
}

/*
 * Takes the threads that have left off pool->threads (lock held), counting
 * the caller as a joiner. The caller joins them unlocked, then calls
 * joined().
 */
static struct worker *
take_exited(struct pool *p, bool everything)
{
	struct worker *taken = NULL, **wp = &p->threads, *w;

	while ((w = *wp) != NULL) {
		/* A thread that left cleared its pool pointer under the lock. */
		if (everything || w->pool == NULL) {
			*wp = w->next;
			w->next = taken;
			taken = w;
		} else
			wp = &w->next;
	}
	if (taken != NULL)
		p->joiners++;
	return taken;
}

static void
joined(struct pool *p)
{
	pthread_mutex_lock(&p->lock);
	p->joiners--;
	pthread_cond_broadcast(&p->joined_cv);
	pthread_mutex_unlock(&p->lock);
}

/*
 * Wakes one sleeping worker for queued work (lock held), unless one is
 * already on its way or a spinner will take the work. A woken worker that
 * finds more work queued after taking its job wakes the next one, so a
 * burst brings in as many workers as it needs, one wake-up at a time, and a
 * trickle of short jobs keeps going to the same warm worker instead of
 * waking a cold one for every job.
 */
static void
wake_one(struct pool *p)
{
	if (p->sleepers > p->waking && p->waking == 0 &&
	    atomic_load_explicit(&p->spinners, memory_order_relaxed) == 0) {
		p->waking++;
		pthread_cond_signal(&p->work_cv);
	}
}

/* The thread leaves the pool's books. Lock held; the thread returns right after. */
static void
leave(struct worker *w, bool registered)
{
	struct pool *p = w->pool;

	if (registered)
		p->registered--;
	w->pool = NULL; /* marks it joinable by take_exited */
	/* It may have been woken for a job it will not take: pass the wake-up on. */
	if (p->queue.head != NULL)
		wake_one(p);
}

static void
count_end(struct pool *p, enum pool_state state)
{
	switch (state) {
	case POOL_SUCCEEDED: p->succeeded++; break;
	case POOL_TIMED_OUT: p->timed_out++; break;
	case POOL_CANCELLED: p->cancelled++; break;
	case POOL_EXPIRED: p->expired++; break;
	case POOL_FAILED: p->failed++; break;
	}
}

/* Calls done for a job that ran. Lock not held. */
static void
deliver_ran(struct pool_job *j, enum pool_state state, uint64_t run_us)
{
	j->done(j, state, j->started_us - j->enqueued_us, run_us);
}

/*
 * A worker that just finished a job and finds the queue empty spins for a
 * moment before it sleeps: a job submitted in that moment starts without a
 * futex wake-up, which costs tens of microseconds across CPUs. One spinner
 * per pool, and only on machines with more than one CPU, so a spinner never
 * takes the CPU the event loop needs. Lock not held; returns when work may
 * have arrived or the moment passed.
 */
static void
spin_for_work(struct pool *p)
{
	uint64_t until;

	if (!p->may_spin)
		return;
	if (atomic_fetch_add(&p->spinners, 1) >= 1) {
		atomic_fetch_sub(&p->spinners, 1);
		return;
	}
	until = clock_now_us() + POOL_SPIN_US;
	/*
	 * sched_yield, not a busy pause: on a machine as small as two CPUs the
	 * event loop (and the clients) must get the CPU whenever they want it.
	 */
	while (atomic_load_explicit(&p->queued_hint, memory_order_relaxed) == 0 &&
	    clock_now_us() < until)
		sched_yield();
	atomic_fetch_sub(&p->spinners, 1);
}

static void *
worker_main(void *arg)
{
	struct worker *w = arg;
	struct pool *p = w->pool;
	struct pool_job *j, *ran = NULL; /* ran: counted finished, its done not yet called */
	enum pool_state state = POOL_FAILED;
	uint64_t now, run_us = 0;
	bool spun = false;

	current_worker = w;
	pthread_mutex_lock(&p->lock);
	for (;;) {
		/* The one decision point: leave, take the next job, or wait. */
		if (p->registered > p->target)
			break;
		if ((j = p->queue.head) == NULL) {
			if (p->closed)
				break;
			if (ran == NULL && spun) {
				p->sleepers++;
				pthread_cond_wait(&p->work_cv, &p->lock);
				p->sleepers--;
				if (p->waking > 0)
					p->waking--;
				continue;
			}
			/* Nothing to take: deliver the last done, or spin a moment, then decide again. */
			pthread_mutex_unlock(&p->lock);
			if (ran != NULL) {
				deliver_ran(ran, state, run_us);
				ran = NULL;
			} else {
				spin_for_work(p);
				spun = true;
			}
			pthread_mutex_lock(&p->lock);
			continue;
		}
		dequeue(p, j);
		if (p->queue.head != NULL)
			wake_one(p); /* more than this worker can take: bring in the next */
		now = clock_now_us();
		if (j->queue_deadline_us != 0 && now >= j->queue_deadline_us) {
			/* Past its deadline before the watcher saw it: expire, never run. */
			struct job_list one = { NULL, NULL };
			j->where = POOL_JOB_FINISHED;
			p->expired++;
			list_append(&one, j);
			pthread_mutex_unlock(&p->lock);
			deliver_unrun(&one, POOL_EXPIRED);
			pthread_mutex_lock(&p->lock);
			continue;
		}
		j->where = POOL_JOB_RUNNING;
		j->started_us = now;
		list_append(&p->running, j);
		p->busy++;
		pthread_mutex_unlock(&p->lock);

		/* The previous job's done, now that this one is taken: one lock per job. */
		if (ran != NULL)
			deliver_ran(ran, state, run_us);
		spun = false;

		state = j->work(j);
		if (state != POOL_SUCCEEDED && state != POOL_FAILED &&
		    state != POOL_TIMED_OUT && state != POOL_CANCELLED)
			state = POOL_FAILED;
		run_us = clock_now_us() - j->started_us;

		pthread_mutex_lock(&p->lock);
		list_remove(&p->running, j);
		j->where = POOL_JOB_FINISHED;
		p->busy--;
		count_end(p, state);
		ran = j;
	}
	leave(w, true);
	pthread_mutex_unlock(&p->lock);
	if (ran != NULL)
		deliver_ran(ran, state, run_us);
	return NULL;
}

/* Expires queued jobs whose deadline passed; sleeps until the next one. */
static void *
watcher_main(void *arg)
{
	struct worker *w = arg;
	struct pool *p = w->pool;
	struct pool_job *j, *next;
	uint64_t now, earliest;
	struct timespec ts;

	current_worker = w;
	pthread_mutex_lock(&p->lock);
	while (!p->closed || p->queue.head != NULL) {
		struct job_list expired = { NULL, NULL };

		now = clock_now_us();
		earliest = 0;
		for (j = p->queue.head; j != NULL && p->with_deadline > 0; j = next) {
			next = j->next;
			if (j->queue_deadline_us == 0)
				continue;
			if (j->queue_deadline_us <= now)
				finish_unrun(p, j, POOL_EXPIRED, &expired);
			else if (earliest == 0 || j->queue_deadline_us < earliest)
				earliest = j->queue_deadline_us;
		}
		if (expired.head != NULL) {
			pthread_mutex_unlock(&p->lock);
			deliver_unrun(&expired, POOL_EXPIRED);
			pthread_mutex_lock(&p->lock);
			continue;
		}
		p->watch_until_us = earliest;
		if (earliest == 0) {
			pthread_cond_wait(&p->watch_cv, &p->lock);
		} else {
			/* The condition uses CLOCK_MONOTONIC, the clock of deadlines. */
			ts.tv_sec = (time_t)(earliest / 1000000);
			ts.tv_nsec = (long)(earliest % 1000000) * 1000;
			pthread_cond_timedwait(&p->watch_cv, &p->lock, &ts);
		}
	}
	leave(w, false);
	pthread_mutex_unlock(&p->lock);
	return NULL;
}

/* ---- the public face */

struct pool *
pool_create(const struct pool_config *cfg, char **cause)
{
	struct pool *p;
	pthread_condattr_t ca;
	int rc = 0;

	if (cfg->name == NULL) {
		set_cause(cause, "a pool needs a name");
		return NULL;
	}
	if (cfg->limit < 1) {
		set_cause(cause, "pool %s: limit must be at least 1", cfg->name);
		return NULL;
	}
	if (cfg->size < 1 || cfg->size > cfg->limit) {
		set_cause(cause, "pool %s: size %u is out of range 1..%u",
		    cfg->name, cfg->size, cfg->limit);
		return NULL;
	}
	if (cfg->capacity < 1) {
		set_cause(cause, "pool %s: capacity must be at least 1", cfg->name);
		return NULL;
	}
	if ((p = calloc(1, sizeof *p)) == NULL || (p->name = strdup(cfg->name)) == NULL) {
		free(p);
		set_cause(cause, "pool %s: out of memory", cfg->name);
		return NULL;
	}
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->work_cv, NULL);
	pthread_cond_init(&p->joined_cv, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&p->watch_cv, &ca);
	pthread_condattr_destroy(&ca);
	p->limit = cfg->limit;
	p->capacity = cfg->capacity;
	p->target = cfg->size;
	p->thread_start = cfg->thread_start ? cfg->thread_start : pthread_create;
	p->may_spin = sysconf(_SC_NPROCESSORS_ONLN) > 1;

	pthread_mutex_lock(&p->lock);
	while (p->registered < p->target && rc == 0)
		rc = start_thread(p, false);
	if (rc != 0)
		set_cause(cause, "pool %s: cannot start worker %u of %u: %s",
		    cfg->name, p->registered + 1, cfg->size, strerror(rc));
	else if ((rc = start_thread(p, true)) != 0)
		set_cause(cause, "pool %s: cannot start its deadline watcher: %s",
		    cfg->name, strerror(rc));
	pthread_mutex_unlock(&p->lock);
	if (rc != 0) {
		/* The threads that did start are joined: none is left behind. */
		pool_shutdown(p, POOL_NOW, NULL);
		pool_free(p);
		return NULL;
	}
	return p;
}

const char *
pool_name(const struct pool *p)
{
	return p->name;
}

enum pool_verdict
pool_submit(struct pool *p, struct pool_job *j)
{
	unsigned serving, idle;

	pthread_mutex_lock(&p->lock);
	if (p->closed) {
		p->rejected_closed++;
		pthread_mutex_unlock(&p->lock);
		return POOL_REJECTED_CLOSED;
	}
	/*
	 * Running jobs, and jobs handed to an idle worker, take no queue slot:
	 * idle is the workers that will stay and are not running anything.
	 */
	serving = p->registered < p->target ? p->registered : p->target;
	idle = serving > p->busy ? serving - p->busy : 0;
	if (p->queued >= p->capacity + idle) {
		p->rejected_full++;
		pthread_mutex_unlock(&p->lock);
		return POOL_REJECTED_FULL;
	}
	atomic_store(&j->cancel_requested, false);
	j->where = POOL_JOB_QUEUED;
	j->enqueued_us = clock_now_us();
	j->started_us = 0;
	j->queued_ahead = p->queued;
	list_append(&p->queue, j);
	p->queued++;
	atomic_store_explicit(&p->queued_hint, p->queued, memory_order_relaxed);
	p->accepted++;
	if (j->queue_deadline_us != 0) {
		p->with_deadline++;
		if (p->watch_until_us == 0 || j->queue_deadline_us < p->watch_until_us) {
			p->watch_until_us = j->queue_deadline_us;
			pthread_cond_signal(&p->watch_cv);
		}
	}
	wake_one(p);
	pthread_mutex_unlock(&p->lock);
	return POOL_ACCEPTED;
}

int
pool_resize(struct pool *p, unsigned size, char **cause)
{
	struct worker *exited;
	int rc = 0, ret = 0;

	pthread_mutex_lock(&p->lock);
	if (p->closed) {
		pthread_mutex_unlock(&p->lock);
		set_cause(cause, "pool %s is shutting down", p->name);
		return -1;
	}
	if (size < 1 || size > p->limit) {
		pthread_mutex_unlock(&p->lock);
		set_cause(cause, "size %u is out of range 1..%u for pool %s",
		    size, p->limit, p->name);
		return -1;
	}
	p->target = size;
	/* Threads are started under the lock, so the newest target always wins. */
	while (p->registered < p->target) {
		if ((rc = start_thread(p, false)) != 0) {
			p->target = p->registered > 0 ? p->registered : 1;
			set_cause(cause, "pool %s: started only %u of %u workers: %s",
			    p->name, p->registered, size, strerror(rc));
			ret = -1;
			break;
		}
	}
	if (p->registered > p->target)
		pthread_cond_broadcast(&p->work_cv); /* idle surplus workers leave */
	exited = take_exited(p, false);
	pthread_mutex_unlock(&p->lock);
	if (exited != NULL) {
		join_all(exited);
		joined(p);
	}
	return ret;
}

int
pool_set_capacity(struct pool *p, unsigned capacity, char **cause)
{
	if (capacity < 1) {
		set_cause(cause, "capacity must be at least 1");
		return -1;
	}
	pthread_mutex_lock(&p->lock);
	p->capacity = capacity;
	pthread_mutex_unlock(&p->lock);
	return 0;
}

int
pool_set_limit(struct pool *p, unsigned limit, char **cause)
{
	pthread_mutex_lock(&p->lock);
	if (limit < 1 || limit < p->target) {
		unsigned target = p->target;
		pthread_mutex_unlock(&p->lock);
		set_cause(cause, "limit %u is below the current target %u", limit, target);
		return -1;
	}
	p->limit = limit;
	pthread_mutex_unlock(&p->lock);
	return 0;
}

enum pool_job_where
pool_cancel(struct pool *p, struct pool_job *j)
{
	struct job_list one = { NULL, NULL };
	enum pool_job_where where;

	pthread_mutex_lock(&p->lock);
	where = j->where;
	if (where == POOL_JOB_QUEUED)
		finish_unrun(p, j, POOL_CANCELLED, &one);
	else if (where == POOL_JOB_RUNNING && !atomic_exchange(&j->cancel_requested, true) &&
	    j->on_cancel != NULL)
		j->on_cancel(j);
	pthread_mutex_unlock(&p->lock);
	deliver_unrun(&one, POOL_CANCELLED);
	return where;
}

bool
pool_job_cancelled(const struct pool_job *j)
{
	return atomic_load(&j->cancel_requested);
}

void
pool_close(struct pool *p, enum pool_close_mode mode)
{
	struct job_list cancelled = { NULL, NULL };
	struct pool_job *j;

	pthread_mutex_lock(&p->lock);
	p->closed = true;
	if (mode == POOL_NOW) {
		while ((j = p->queue.head) != NULL)
			finish_unrun(p, j, POOL_CANCELLED, &cancelled);
		for (j = p->running.head; j != NULL; j = j->next)
			if (!atomic_exchange(&j->cancel_requested, true) && j->on_cancel != NULL)
				j->on_cancel(j);
	}
	pthread_cond_broadcast(&p->work_cv);
	pthread_cond_signal(&p->watch_cv); /* it leaves if the queue is already empty */
	pthread_mutex_unlock(&p->lock);
	deliver_unrun(&cancelled, POOL_CANCELLED);
}

int
pool_shutdown(struct pool *p, enum pool_close_mode mode, char **cause)
{
	struct worker *taken;

	if (current_worker != NULL && current_worker->pool == p) {
		set_cause(cause, "a worker of pool %s cannot wait for its own pool", p->name);
		return -1;
	}
	pool_close(p, mode);

	pthread_mutex_lock(&p->lock);
	/* Workers and the watcher all leave once the queue is empty. */
	while (p->threads != NULL || p->joiners > 0) {
		if (p->threads == NULL) {
			pthread_cond_wait(&p->joined_cv, &p->lock);
			continue;
		}
		taken = take_exited(p, true);
		pthread_mutex_unlock(&p->lock);
		join_all(taken);
		pthread_mutex_lock(&p->lock);
		p->joiners--;
		pthread_cond_broadcast(&p->joined_cv);
	}
	pthread_mutex_unlock(&p->lock);
	return 0;
}

void
pool_free(struct pool *p)
{
	if (p == NULL)
		return;
	pthread_mutex_destroy(&p->lock);
	pthread_cond_destroy(&p->work_cv);
	pthread_cond_destroy(&p->watch_cv);
	pthread_cond_destroy(&p->joined_cv);
	free(p->name);
	free(p);
}

void
pool_snapshot(struct pool *p, struct pool_snapshot *s)
{
	pthread_mutex_lock(&p->lock);
	s->target = p->target;
	s->workers = p->registered;
	s->busy = p->busy;
	s->idle = p->registered > p->busy ? p->registered - p->busy : 0;
	s->queued = p->queued;
	s->capacity = p->capacity;
	s->limit = p->limit;
	s->closed = p->closed;
	s->accepted = p->accepted;
	s->rejected_full = p->rejected_full;
	s->rejected_closed = p->rejected_closed;
	s->rejected = p->rejected_full + p->rejected_closed;
	s->succeeded = p->succeeded;
	s->failed = p->failed;
	s->timed_out = p->timed_out;
	s->cancelled = p->cancelled;
	s->expired = p->expired;
	s->oldest_queued_us = p->queue.head ? clock_now_us() - p->queue.head->enqueued_us : 0;
	pthread_mutex_unlock(&p->lock);
}
