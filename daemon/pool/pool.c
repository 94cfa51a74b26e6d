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
 * Timings: every job leaving the queue (to run, or expired) adds its wait to
 * the pool's histograms, and every job that ran adds its run time when it
 * ends, in the locked sections that already book those moments; the
 * histograms are fixed arrays inside struct pool (pool.h's struct
 * pool_timing), so observing allocates nothing and costs one histogram add.
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

	uint64_t accepted, rejected_full, rejected_closed, rejected_storage;
	uint64_t succeeded, failed, timed_out, cancelled, expired, lost;

	struct pool_timing timing;      /* queue waits and run times */
};

/* The worker record of the current thread, to refuse a worker's own join. */
static _Thread_local struct worker *current_worker;

static void *worker_main(void *);
static void *watcher_main(void *);

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

void
pool_count_lost(struct pool *p)
{
	pthread_mutex_lock(&p->lock);
	p->lost++;
	pthread_mutex_unlock(&p->lock);
}

void
pool_count_rejected_storage(struct pool *p)
{
	pthread_mutex_lock(&p->lock);
	p->rejected_storage++;
	pthread_mutex_unlock(&p->lock);
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

/* ---- timings (pure functions; the pool calls them under its lock) */

/* Ten bounds a decade (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8) from 10 us to 80 s. */
#define DECADE(u) 10 * (u), 12 * (u), 15 * (u), 20 * (u), 25 * (u), 30 * (u), \
	40 * (u), 50 * (u), 60 * (u), 80 * (u)
#define S 1000000ULL

const uint64_t pool_hist_bounds_us[POOL_HIST_NBOUNDS] = {
	1, 2, 3, 4, 5, 6, 8,
	DECADE(1ULL), DECADE(10ULL), DECADE(100ULL), DECADE(1000ULL), DECADE(10000ULL),
	DECADE(100000ULL), DECADE(1000000ULL),
	100 * S, 120 * S, 150 * S, 200 * S, 250 * S, 300 * S, 400 * S, 500 * S, 600 * S,
	800 * S, 1000 * S, 1200 * S, 1500 * S, 1800 * S, 2400 * S, 3000 * S, 3600 * S,
};
#undef DECADE
#undef S

/*
 * The first bucket whose bound is at least 2^k, for us of k + 1 bits: from
 * there, the bucket of us is at most three steps on (no octave holds more
 * than three bounds). pool-test checks this table against the bounds.
 */
static const uint8_t octave_first[33] = {
	0, 1, 3, 6, 10, 13, 16, 19, 22, 25, 28, 31, 34, 37, 40, 43, 46, 49, 52, 55,
	58, 61, 64, 67, 70, 73, 76, 79, 82, 85, 88, 91, 94,
};

/* The bucket of us: the first whose bound is at least us, or the overflow bucket. */
static size_t
hist_bucket(uint64_t us)
{
	unsigned k;
	size_t i;

	if (us == 0)
		return 0;
	k = 63 - (unsigned)__builtin_clzll(us);
	if (k >= sizeof octave_first - 1)
		return POOL_HIST_NBOUNDS;       /* 2^32 us and more: past the last bound */
	/* three steps, without a branch: octave_first[k] + 2 <= 93 is always a bound */
	i = octave_first[k];
	i += pool_hist_bounds_us[i] < us;
	i += pool_hist_bounds_us[i] < us;
	i += pool_hist_bounds_us[i] < us;
	return i;
}

void
pool_hist_add(struct pool_hist *h, uint64_t us)
{
	h->bucket[hist_bucket(us)]++;
	if (h->count == 0 || us < h->min_us)
		h->min_us = us;
	if (us > h->max_us)
		h->max_us = us;
	h->count++;
	h->sum_us += us;
}

void
pool_hist_merge(struct pool_hist *into, const struct pool_hist *from)
{
	if (from->count == 0)
		return;
	for (size_t i = 0; i <= POOL_HIST_NBOUNDS; i++)
		into->bucket[i] += from->bucket[i];
	if (into->count == 0 || from->min_us < into->min_us)
		into->min_us = from->min_us;
	if (from->max_us > into->max_us)
		into->max_us = from->max_us;
	into->count += from->count;
	into->sum_us += from->sum_us;
}

uint64_t
pool_hist_count_le(const struct pool_hist *h, uint64_t bound_us)
{
	uint64_t n = 0;

	for (size_t i = 0; i < POOL_HIST_NBOUNDS && pool_hist_bounds_us[i] <= bound_us; i++)
		n += h->bucket[i];
	return n;
}

uint64_t
pool_hist_quantile(const struct pool_hist *h, double q)
{
	double rank, below = 0, lo, hi, v;
	size_t i;

	if (h->count == 0)
		return 0;
	if (q > 1)
		q = 1;
	rank = q * (double)h->count;
	for (i = 0; i <= POOL_HIST_NBOUNDS; i++) {
		if (h->bucket[i] > 0 && below + (double)h->bucket[i] >= rank)
			break;
		below += (double)h->bucket[i];
	}
	if (i > POOL_HIST_NBOUNDS)
		return h->max_us;
	lo = i == 0 ? 0 : (double)pool_hist_bounds_us[i - 1];
	hi = i == POOL_HIST_NBOUNDS ? (double)h->max_us : (double)pool_hist_bounds_us[i];
	v = lo + (hi - lo) * (rank - below) / (double)h->bucket[i];
	/* No estimate outside what was seen: one observation is its own every quantile. */
	if (v < (double)h->min_us)
		v = (double)h->min_us;
	if (v > (double)h->max_us)
		v = (double)h->max_us;
	return (uint64_t)(v + 0.5);
}

void
pool_timing_init(struct pool_timing *t, uint64_t now_us)
{
	memset(t, 0, sizeof *t);
	t->since_us = now_us;
	t->window = now_us / POOL_RECENT_WINDOW_US + 1;
}

/* Keeps the extremes of a window: v observed in it (first: nothing before). */
static void
extremes_add(uint64_t *min, uint64_t *max, uint64_t v, bool first)
{
	if (first || v < *min)
		*min = v;
	if (first || v > *max)
		*max = v;
}

/*
 * Moves the marks on when now_us is in a later window than the current
 * one: the current window's mark becomes the one before's, unless that
 * window is not the one just before (the histograms then are the mark of
 * both). Extremes 0 and 0 stand for a window that saw nothing.
 */
static void
timing_window(struct pool_timing *t, uint64_t now_us)
{
	uint64_t w = now_us / POOL_RECENT_WINDOW_US + 1;

	if (w <= t->window)
		return;         /* this window (or a thread's clock read before it took the lock) */
	if (w == t->window + 1) {
		t->queued_mark[1] = t->queued_mark[0];
		t->run_mark[1] = t->run_mark[0];
		t->queued_min[1] = t->queued_min[0];
		t->queued_max[1] = t->queued_max[0];
		t->run_min[1] = t->run_min[0];
		t->run_max[1] = t->run_max[0];
	} else {
		t->queued_mark[1] = t->queued;
		t->run_mark[1] = t->run;
		t->queued_min[1] = t->queued_max[1] = t->run_min[1] = t->run_max[1] = 0;
	}
	t->queued_mark[0] = t->queued;
	t->run_mark[0] = t->run;
	t->queued_min[0] = t->queued_max[0] = t->run_min[0] = t->run_max[0] = 0;
	t->window = w;
}

void
pool_timing_started(struct pool_timing *t, uint64_t now_us, uint64_t queued_us)
{
	timing_window(t, now_us);
	extremes_add(&t->queued_min[0], &t->queued_max[0], queued_us,
	    t->queued.count == t->queued_mark[0].count);
	pool_hist_add(&t->queued, queued_us);
}

void
pool_timing_ended(struct pool_timing *t, uint64_t now_us, uint64_t run_us)
{
	uint64_t sec = now_us / 1000000 + 1;
	size_t slot = (size_t)(sec % POOL_RECENT_SLOTS);

	timing_window(t, now_us);
	extremes_add(&t->run_min[0], &t->run_max[0], run_us, t->run.count == t->run_mark[0].count);
	pool_hist_add(&t->run, run_us);
	if (t->second[slot] > sec)
		return;         /* a clock read long before the lock: too old for the ring */
	if (t->second[slot] != sec) {
		t->second[slot] = sec;
		t->ended[slot] = 0;
	}
	t->ended[slot]++;
}

/*
 * The observations of h since mark, with the extremes of the windows they
 * fall in (n windows of min/max, the current one first).
 */
static void
hist_since(struct pool_hist *out, const struct pool_hist *h, const struct pool_hist *mark,
    const uint64_t *min, const uint64_t *max, size_t n)
{
	bool any = false;

	memset(out, 0, sizeof *out);
	out->count = h->count - mark->count;
	if (out->count == 0)
		return;
	out->sum_us = h->sum_us - mark->sum_us;
	for (size_t i = 0; i <= POOL_HIST_NBOUNDS; i++)
		out->bucket[i] = h->bucket[i] - mark->bucket[i];
	/* a window with nothing in it has min = max = 0: only the others count */
	for (size_t i = 0; i < n; i++) {
		if (min[i] == 0 && max[i] == 0)
			continue;
		extremes_add(&out->min_us, &out->max_us, min[i], !any);
		extremes_add(&out->min_us, &out->max_us, max[i], false);
		any = true;
	}
	if (!any)
		out->max_us = h->max_us;
}

void
pool_timing_recent(const struct pool_timing *t, uint64_t now_us, struct pool_recent *out)
{
	struct pool_hist queued, run;
	uint64_t w = now_us / POOL_RECENT_WINDOW_US + 1, sec = now_us / 1000000 + 1;
	uint64_t first = sec >= POOL_RECENT_RATE_S ? sec - (POOL_RECENT_RATE_S - 1) : 1;
	uint64_t ended = 0, from_us;
	double span;

	memset(out, 0, sizeof *out);
	if (w <= t->window) {
		/* the current window and the one before: everything since the older mark */
		hist_since(&queued, &t->queued, &t->queued_mark[1], t->queued_min, t->queued_max, 2);
		hist_since(&run, &t->run, &t->run_mark[1], t->run_min, t->run_max, 2);
	} else if (w == t->window + 1) {
		/* nothing yet in this window: the one before is what the marks call current */
		hist_since(&queued, &t->queued, &t->queued_mark[0], t->queued_min, t->queued_max, 1);
		hist_since(&run, &t->run, &t->run_mark[0], t->run_min, t->run_max, 1);
	} else {
		memset(&queued, 0, sizeof queued);
		memset(&run, 0, sizeof run);
	}
	out->started = queued.count;
	out->ended = run.count;
	out->queued_p50_us = pool_hist_quantile(&queued, 0.5);
	out->queued_p99_us = pool_hist_quantile(&queued, 0.99);
	out->run_p50_us = pool_hist_quantile(&run, 0.5);
	out->run_p99_us = pool_hist_quantile(&run, 0.99);

	/* The rate: the seconds first..sec (the current one partly), over the time they span. */
	for (size_t i = 0; i < POOL_RECENT_SLOTS; i++)
		if (t->second[i] >= first && t->second[i] <= sec)
			ended += t->ended[i];
	from_us = (first - 1) * 1000000;
	if (from_us < t->since_us)
		from_us = t->since_us;
	span = now_us > from_us ? (double)(now_us - from_us) / 1e6 : 0;
	if (span < 1)
		span = 1;       /* a pool younger than a second: no rate from a sliver of time */
	out->rate_per_s = (double)ended / span;
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

/* A job left the queue at now without running (lock held): its wait is observed. */
static void
observe_expired(struct pool *p, struct pool_job *j, uint64_t now)
{
	p->expired++;
	pool_timing_started(&p->timing, now, now - j->enqueued_us);
}

/*
 * Marks a queued job finished without running, at now (the time its done
 * will report); done is called later, unlocked. A cancelled job's wait is
 * not observed: it neither started nor expired.
 */
static void
finish_unrun(struct pool *p, struct pool_job *j, enum pool_state state, uint64_t now,
    struct job_list *out)
{
	dequeue(p, j);
	j->where = POOL_JOB_FINISHED;
	if (state == POOL_EXPIRED)
		observe_expired(p, j, now);
	else
		p->cancelled++;
	list_append(out, j);
}

/* Calls done for jobs that ended without running at now. Lock not held. */
static void
deliver_unrun(struct job_list *jobs, enum pool_state state, uint64_t now)
{
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
			observe_expired(p, j, now);
			list_append(&one, j);
			pthread_mutex_unlock(&p->lock);
			deliver_unrun(&one, POOL_EXPIRED, now);
			pthread_mutex_lock(&p->lock);
			continue;
		}
		j->where = POOL_JOB_RUNNING;
		j->started_us = now;
		list_append(&p->running, j);
		p->busy++;
		pool_timing_started(&p->timing, now, now - j->enqueued_us);
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
		pool_timing_ended(&p->timing, j->started_us + run_us, run_us);
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
				finish_unrun(p, j, POOL_EXPIRED, now, &expired);
			else if (earliest == 0 || j->queue_deadline_us < earliest)
				earliest = j->queue_deadline_us;
		}
		if (expired.head != NULL) {
			pthread_mutex_unlock(&p->lock);
			deliver_unrun(&expired, POOL_EXPIRED, now);
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
	pool_timing_init(&p->timing, clock_now_us());

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
	uint64_t now;

	pthread_mutex_lock(&p->lock);
	now = clock_now_us();
	where = j->where;
	if (where == POOL_JOB_QUEUED)
		finish_unrun(p, j, POOL_CANCELLED, now, &one);
	else if (where == POOL_JOB_RUNNING && !atomic_exchange(&j->cancel_requested, true) &&
	    j->on_cancel != NULL)
		j->on_cancel(j);
	pthread_mutex_unlock(&p->lock);
	deliver_unrun(&one, POOL_CANCELLED, now);
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
	uint64_t now;

	pthread_mutex_lock(&p->lock);
	now = clock_now_us();
	p->closed = true;
	if (mode == POOL_NOW) {
		while ((j = p->queue.head) != NULL)
			finish_unrun(p, j, POOL_CANCELLED, now, &cancelled);
		for (j = p->running.head; j != NULL; j = j->next)
			if (!atomic_exchange(&j->cancel_requested, true) && j->on_cancel != NULL)
				j->on_cancel(j);
	}
	pthread_cond_broadcast(&p->work_cv);
	pthread_cond_signal(&p->watch_cv); /* it leaves if the queue is already empty */
	pthread_mutex_unlock(&p->lock);
	deliver_unrun(&cancelled, POOL_CANCELLED, now);
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
pool_job_times(struct pool *p, const struct pool_job *j, uint64_t *queued_us, uint64_t *run_us)
{
	uint64_t now;

	pthread_mutex_lock(&p->lock);
	now = clock_now_us();
	*queued_us = *run_us = 0;
	if (j->where == POOL_JOB_QUEUED)
		*queued_us = now > j->enqueued_us ? now - j->enqueued_us : 0;
	else if (j->where != POOL_JOB_NEW && j->started_us != 0) {
		*queued_us = j->started_us - j->enqueued_us;
		*run_us = now > j->started_us ? now - j->started_us : 0;
	}
	pthread_mutex_unlock(&p->lock);
}

void
pool_snapshot(struct pool *p, struct pool_snapshot *s)
{
	uint64_t now;

	pthread_mutex_lock(&p->lock);
	now = clock_now_us();
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
	s->rejected_storage = p->rejected_storage;
	s->rejected = p->rejected_full + p->rejected_closed + p->rejected_storage;
	s->lost = p->lost;
	s->succeeded = p->succeeded;
	s->failed = p->failed;
	s->timed_out = p->timed_out;
	s->cancelled = p->cancelled;
	s->expired = p->expired;
	s->oldest_queued_us = p->queue.head ? now - p->queue.head->enqueued_us : 0;
	pool_timing_recent(&p->timing, now, &s->recent);
	pthread_mutex_unlock(&p->lock);
}

void
pool_timings(struct pool *p, struct pool_hist *queued, struct pool_hist *run)
{
	pthread_mutex_lock(&p->lock);
	if (queued != NULL)
		*queued = p->timing.queued;
	if (run != NULL)
		*run = p->timing.run;
	pthread_mutex_unlock(&p->lock);
}
