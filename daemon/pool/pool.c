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
 *    x->wake_lock (task-exec.c, to write to the run's eventfd), and before
 *    them task.c's record lock (to stop a start gate: one write to a pipe).
 *    Lock order: pool->lock, then one of those; never the other way round.
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
 *  - Room (pool_want_room): the one who waits for a queue slot arms want_room;
 *    every locked section that may free a slot (a job leaves the queue, the
 *    capacity or the target grows) disarms it there when there is room and
 *    calls cfg->room right after unlocking. Arming checks at once too, so a
 *    slot freed between a refused submit and the arming is not missed.
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

#include "base/thread.h"
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

/*
 * The queue. Jobs wait in owner queues, one per (owner, priority) that has
 * jobs queued, oldest first (job->next/prev). Each priority present has a
 * level: its jobs in entry order (job->lnext/lprev, for drop_oldest and the
 * watcher), and a binary heap of its owner queues that may start (owners
 * not at max_running_per_owner), least key on top. The key is (the owner's
 * last start, the head job's entry) with fair, the head's entry alone
 * without. A key only grows (an owner's start is a later one, a head that
 * leaves is followed by a younger one), so heap entries are refreshed
 * lazily: pick compares the top's stored key with its real one and sifts it
 * down when it grew, so a start touches one heap, whatever other priorities
 * the owner has jobs at. Two bitmaps say which levels have jobs (present)
 * and which have a startable owner queue (runnable); top is the highest
 * runnable one.
 */
#define LEVELS (POOL_PRIORITY_MAX - POOL_PRIORITY_MIN + 1)
#define LEVEL_WORDS ((LEVELS + 63) / 64)
#define NOT_IN_HEAP ((size_t)-1)

struct pool_owner {
	uint32_t id;
	uint64_t last_started;      /* p->starts at its last start; 0 = never */
	unsigned queued, running;
	bool blocked;               /* at max_running_per_owner: out of the heaps */
	struct pool_oqueue *oqs;    /* one per level it has jobs queued at */
	struct pool_oqueue *spare;  /* kept for the next one: no allocation per job */
};

struct level {
	unsigned count;             /* jobs queued at this priority */
	unsigned noqs;              /* owner queues with jobs here, started or blocked */
	struct pool_job *head, *tail;  /* every job here, in entry order */
	struct pool_oqueue **heap;
	size_t nheap, heapcap;
};

struct pool_oqueue {
	struct pool_job *head, *tail;
	unsigned count;
	unsigned level;             /* index into p->levels */
	struct level *lv;           /* p->levels[level] */
	struct pool_owner *owner;
	size_t heap_at;             /* NOT_IN_HEAP when out (blocked owner) */
	uint64_t key_started, key_seq;  /* the key it sits in the heap with */
	struct pool_oqueue *onext;  /* the owner's next */
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
	unsigned min_workers, max_workers;
	uint64_t keepalive_us;
	bool paused, fair, drop_oldest;
	bool grow_failing;        /* warned once; cleared by a start that works */
	unsigned max_queued_per_owner, max_running_per_owner;
	unsigned with_deadline;   /* queued jobs that have a deadline */
	uint64_t watch_until_us;  /* when the watcher next wakes; 0 = never */
	bool closed;

	struct level *levels[LEVELS];   /* made on first use, kept */
	uint64_t present[LEVEL_WORDS];  /* levels with jobs */
	uint64_t runnable[LEVEL_WORDS]; /* levels with a startable owner queue */
	int top;                        /* highest runnable level, -1: none */
	int top_present;                /* highest level with jobs, -1: none */
	struct pool_owner **owners;     /* by owner number, made on first use, kept */
	size_t nowners;
	struct pool_owner *last_owner;  /* the last one found: one owner costs no lookup */
	uint64_t seq;                   /* entries into the queue */
	uint64_t starts;                /* jobs started */
	struct job_list running;

	struct worker *threads;   /* started and not yet joined */
	unsigned joiners;
	unsigned serial;
	pool_thread_start_fn thread_start;
	pool_room_fn room;        /* cfg->room, with its argument */
	void *room_arg;
	pool_warn_fn warn;
	void *warn_arg;
	bool want_room;           /* pool_want_room armed it; cleared when it fires */

	uint64_t accepted, rejected_full, rejected_closed, rejected_quota, rejected_storage;
	uint64_t displaced, grow_failures;
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

/* ---- the queue (lock held; see struct level) */

static void
bit_set(uint64_t *bits, unsigned i)
{
	bits[i / 64] |= 1ULL << (i % 64);
}

static void
bit_clear(uint64_t *bits, unsigned i)
{
	bits[i / 64] &= ~(1ULL << (i % 64));
}

/* The highest set bit at or below from, or -1. */
static int
bit_highest(const uint64_t *bits, int from)
{
	if (from < 0)
		return -1;
	for (int w = from / 64; w >= 0; w--) {
		uint64_t v = bits[w];
		if (w == from / 64 && from % 64 != 63)
			v &= (2ULL << (from % 64)) - 1;
		if (v != 0)
			return w * 64 + 63 - __builtin_clzll(v);
	}
	return -1;
}

/* The lowest set bit, or -1. */
static int
bit_lowest(const uint64_t *bits)
{
	for (int w = 0; w < LEVEL_WORDS; w++)
		if (bits[w] != 0)
			return w * 64 + __builtin_ctzll(bits[w]);
	return -1;
}

static unsigned
level_of(int priority)
{
	if (priority < POOL_PRIORITY_MIN)
		priority = POOL_PRIORITY_MIN;
	if (priority > POOL_PRIORITY_MAX)
		priority = POOL_PRIORITY_MAX;
	return (unsigned)(priority - POOL_PRIORITY_MIN);
}

static bool
key_less(const struct pool *p, const struct pool_oqueue *a, const struct pool_oqueue *b)
{
	if (p->fair && a->key_started != b->key_started)
		return a->key_started < b->key_started;
	return a->key_seq < b->key_seq;
}

static void
heap_put(struct level *lv, size_t i, struct pool_oqueue *oq)
{
	lv->heap[i] = oq;
	oq->heap_at = i;
}

static void
heap_up(const struct pool *p, struct level *lv, size_t i)
{
	struct pool_oqueue *oq = lv->heap[i];

	while (i > 0 && key_less(p, oq, lv->heap[(i - 1) / 2])) {
		heap_put(lv, i, lv->heap[(i - 1) / 2]);
		i = (i - 1) / 2;
	}
	heap_put(lv, i, oq);
}

static void
heap_down(const struct pool *p, struct level *lv, size_t i)
{
	struct pool_oqueue *oq = lv->heap[i];

	for (;;) {
		size_t c = 2 * i + 1;
		if (c >= lv->nheap)
			break;
		if (c + 1 < lv->nheap && key_less(p, lv->heap[c + 1], lv->heap[c]))
			c++;
		if (!key_less(p, lv->heap[c], oq))
			break;
		heap_put(lv, i, lv->heap[c]);
		i = c;
	}
	heap_put(lv, i, oq);
}

/* The key oq would have now. */
static void
oq_key(struct pool_oqueue *oq)
{
	oq->key_started = oq->owner->last_started;
	oq->key_seq = oq->head->seq;
}

/* Puts oq in its level's heap (room reserved by enqueue_prepare). */
static void
heap_insert(struct pool *p, struct pool_oqueue *oq)
{
	struct level *lv = oq->lv;

	oq_key(oq);
	lv->heap[lv->nheap] = oq;
	oq->heap_at = lv->nheap++;
	heap_up(p, lv, oq->heap_at);
	if (lv->nheap == 1) {
		bit_set(p->runnable, oq->level);
		if ((int)oq->level > p->top)
			p->top = (int)oq->level;
	}
}

static void
heap_delete(struct pool *p, struct pool_oqueue *oq)
{
	struct level *lv = oq->lv;
	size_t i = oq->heap_at;

	oq->heap_at = NOT_IN_HEAP;
	if (--lv->nheap != i) {
		struct pool_oqueue *last = lv->heap[lv->nheap];
		heap_put(lv, i, last);
		/* the last one may belong above or below where the deleted one was */
		heap_up(p, lv, i);
		if (last->heap_at == i)
			heap_down(p, lv, i);
	}
	if (lv->nheap == 0) {
		bit_clear(p->runnable, oq->level);
		if ((int)oq->level == p->top)
			p->top = bit_highest(p->runnable, (int)oq->level);
	}
}

/* An owner at its running limit leaves the heaps; one below it comes back. */
static void
owner_block(struct pool *p, struct pool_owner *o)
{
	o->blocked = true;
	for (struct pool_oqueue *oq = o->oqs; oq != NULL; oq = oq->onext)
		if (oq->heap_at != NOT_IN_HEAP)
			heap_delete(p, oq);
}

static void
owner_unblock(struct pool *p, struct pool_owner *o)
{
	o->blocked = false;
	for (struct pool_oqueue *oq = o->oqs; oq != NULL; oq = oq->onext)
		heap_insert(p, oq);
}

static bool
owner_at_cap(const struct pool *p, const struct pool_owner *o)
{
	return p->max_running_per_owner != 0 && o->running >= p->max_running_per_owner;
}

/* The owner's books, made on first use (NULL: out of memory). */
static struct pool_owner *
owner_get(struct pool *p, uint32_t id)
{
	struct pool_owner *o;

	if (p->last_owner != NULL && p->last_owner->id == id)
		return p->last_owner;
	if (id >= p->nowners) {
		size_t n = p->nowners ? p->nowners : 16;
		struct pool_owner **grown;
		while (n <= id)
			n *= 2;
		if ((grown = realloc(p->owners, n * sizeof *grown)) == NULL)
			return NULL;
		memset(grown + p->nowners, 0, (n - p->nowners) * sizeof *grown);
		p->owners = grown;
		p->nowners = n;
	}
	if ((o = p->owners[id]) == NULL) {
		if ((o = calloc(1, sizeof *o)) == NULL)
			return NULL;
		o->id = id;
		p->owners[id] = o;
	}
	p->last_owner = o;
	return o;
}

/* Jobs the owner numbered id has queued, without making its books. */
static unsigned
owner_queued(const struct pool *p, uint32_t id)
{
	return id < p->nowners && p->owners[id] != NULL ? p->owners[id]->queued : 0;
}

/*
 * Makes sure j can be queued without allocating later: its owner's books,
 * its level, an owner queue for it there (*fresh when new, not linked yet)
 * and a heap slot. Returns 0, or -1 when out of memory (nothing to undo).
 */
static int
enqueue_prepare(struct pool *p, struct pool_job *j, struct pool_oqueue **fresh)
{
	unsigned li = level_of(j->priority);
	struct pool_owner *o;
	struct pool_oqueue *oq;
	struct level *lv;

	*fresh = NULL;
	if ((o = owner_get(p, j->owner)) == NULL)
		return -1;
	if ((lv = p->levels[li]) == NULL) {
		if ((lv = calloc(1, sizeof *lv)) == NULL)
			return -1;
		p->levels[li] = lv;
	}
	for (oq = o->oqs; oq != NULL; oq = oq->onext)
		if (oq->level == li)
			break;
	if (oq == NULL) {
		if (lv->heapcap <= lv->noqs) {
			size_t n = lv->heapcap ? lv->heapcap * 2 : 4;
			struct pool_oqueue **h = realloc(lv->heap, n * sizeof *h);
			if (h == NULL)
				return -1;
			lv->heap = h;
			lv->heapcap = n;
		}
		if ((oq = o->spare) != NULL)
			o->spare = NULL;
		else if ((oq = malloc(sizeof *oq)) == NULL)
			return -1;
		memset(oq, 0, sizeof *oq);
		oq->level = li;
		oq->lv = lv;
		oq->owner = o;
		oq->heap_at = NOT_IN_HEAP;
		*fresh = oq;
	}
	j->oq = oq;
	return 0;
}

/* enqueue_prepare's fresh owner queue, not used after all. */
static void
enqueue_unprepare(struct pool_oqueue *fresh)
{
	if (fresh != NULL && fresh->owner->spare == NULL)
		fresh->owner->spare = fresh;
	else
		free(fresh);
}

/* Links a prepared j at the tail of its owner queue and its level. */
static void
enqueue(struct pool *p, struct pool_job *j, struct pool_oqueue *fresh)
{
	struct pool_oqueue *oq = j->oq;
	struct pool_owner *o = oq->owner;
	struct level *lv = oq->lv;

	j->seq = ++p->seq;
	j->next = NULL;
	j->prev = oq->tail;
	if (oq->tail != NULL)
		oq->tail->next = j;
	else
		oq->head = j;
	oq->tail = j;
	oq->count++;
	j->lnext = NULL;
	j->lprev = lv->tail;
	if (lv->tail != NULL)
		lv->tail->lnext = j;
	else
		lv->head = j;
	lv->tail = j;
	if (lv->count++ == 0) {
		bit_set(p->present, oq->level);
		if ((int)oq->level > p->top_present)
			p->top_present = (int)oq->level;
	}
	o->queued++;
	if (fresh != NULL) {
		oq->onext = o->oqs;
		o->oqs = oq;
		lv->noqs++;
		if (!o->blocked)
			heap_insert(p, oq);
	}
	p->queued++;
	if (!p->paused)
		atomic_store_explicit(&p->queued_hint, p->queued, memory_order_relaxed);
}

/*
 * Takes j off the queue, counting it out. An owner queue left empty leaves
 * its heap and its owner; the heap entry of one whose head left is
 * refreshed lazily by pick.
 */
static void
dequeue(struct pool *p, struct pool_job *j)
{
	struct pool_oqueue *oq = j->oq;
	struct pool_owner *o = oq->owner;
	struct level *lv = oq->lv;

	if (j->prev != NULL)
		j->prev->next = j->next;
	else
		oq->head = j->next;
	if (j->next != NULL)
		j->next->prev = j->prev;
	else
		oq->tail = j->prev;
	if (j->lprev != NULL)
		j->lprev->lnext = j->lnext;
	else
		lv->head = j->lnext;
	if (j->lnext != NULL)
		j->lnext->lprev = j->lprev;
	else
		lv->tail = j->lprev;
	j->next = j->prev = j->lnext = j->lprev = NULL;
	j->oq = NULL;
	o->queued--;
	if (--lv->count == 0) {
		bit_clear(p->present, oq->level);
		if ((int)oq->level == p->top_present)
			p->top_present = bit_highest(p->present, (int)oq->level);
	}
	if (--oq->count == 0) {
		struct pool_oqueue **op;
		if (oq->heap_at != NOT_IN_HEAP)
			heap_delete(p, oq);
		for (op = &o->oqs; *op != oq; op = &(*op)->onext)
			;
		*op = oq->onext;
		lv->noqs--;
		enqueue_unprepare(oq);
	}
	p->queued--;
	atomic_store_explicit(&p->queued_hint, p->paused ? 0 : p->queued, memory_order_relaxed);
	if (j->queue_deadline_us != 0)
		p->with_deadline--;
	/*
	 * Closed and empty for good: the watcher's work is over, and so is the
	 * workers' (some may sleep beside jobs they could not start: an owner
	 * at its running limit, whose last queued job was just cancelled).
	 */
	if (p->closed && p->queued == 0) {
		pthread_cond_signal(&p->watch_cv);
		pthread_cond_broadcast(&p->work_cv);
	}
}

/*
 * The job to start next, or NULL (paused, empty, or every owner with jobs
 * at its running limit). Stale heap tops are refreshed here.
 */
static struct pool_job *
pick(struct pool *p)
{
	if (p->paused)
		return NULL;
	while (p->top >= 0) {
		struct level *lv = p->levels[p->top];
		struct pool_oqueue *oq = lv->heap[0];

		/* alone in its heap (one owner): its key does not matter, it stays stale */
		if (lv->nheap == 1 ||
		    (oq->key_seq == oq->head->seq && oq->key_started == oq->owner->last_started))
			return oq->head;
		oq_key(oq);
		heap_down(p, lv, 0);
	}
	return NULL;
}

/* Whether pick would find a job. */
static bool
startable(const struct pool *p)
{
	return !p->paused && p->top >= 0;
}

/* j, just picked, starts: its owner's turn and running count move on. */
static void
dequeue_started(struct pool *p, struct pool_job *j)
{
	struct pool_owner *o = j->oq->owner;

	dequeue(p, j);
	o->last_started = ++p->starts;
	o->running++;
	if (!o->blocked && owner_at_cap(p, o))
		owner_block(p, o);
}

/* A started job ended: its owner may start again. */
static void
owner_ended(struct pool *p, struct pool_owner *o)
{
	o->running--;
	if (o->blocked && !owner_at_cap(p, o))
		owner_unblock(p, o);
}

/* Calls fn for every queued job (fn may dequeue the one it is given). */
static void
each_queued(struct pool *p, void (*fn)(struct pool *, struct pool_job *, void *), void *arg)
{
	for (int li = bit_highest(p->present, LEVELS - 1); li >= 0;
	    li = li > 0 ? bit_highest(p->present, li - 1) : -1) {
		struct pool_job *j, *next;
		for (j = p->levels[li]->head; j != NULL; j = next) {
			next = j->lnext;
			fn(p, j, arg);
		}
	}
}

/* Jobs queued at priorities above level li. */
static unsigned
queued_above(const struct pool *p, unsigned li)
{
	unsigned n = 0;

	for (int l = p->top_present; l > (int)li; l = bit_highest(p->present, l - 1))
		n += p->levels[l]->count;
	return n;
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
 *
 * wake_due is the rule alone: it counts the wake-up as on its way and
 * leaves the signal to the caller, who may send it after unlocking (a
 * worker woken under the lock would only wait for it again: a second futex
 * call on each side).
 */
static bool
wake_due(struct pool *p)
{
	if (p->sleepers > p->waking && p->waking == 0 &&
	    atomic_load_explicit(&p->spinners, memory_order_relaxed) == 0) {
		p->waking++;
		return true;
	}
	return false;
}

static void
wake_one(struct pool *p)
{
	if (wake_due(p))
		pthread_cond_signal(&p->work_cv);
}

/*
 * Whether a job submitted now would find a place (lock held): running jobs,
 * and jobs handed to an idle worker, take no queue slot, so idle is the
 * workers that will stay and are not running anything.
 */
static bool
has_room(const struct pool *p)
{
	unsigned serving = p->registered < p->target ? p->registered : p->target;
	unsigned idle = serving > p->busy && !p->paused ? serving - p->busy : 0;

	return p->queued < p->capacity + idle;
}

/*
 * Lock held: true when the room notification is armed and there is room
 * now; it is disarmed, and the caller calls room_tell once it has unlocked.
 */
static bool
room_due(struct pool *p)
{
	if (!p->want_room || p->closed || !has_room(p))
		return false;
	p->want_room = false;
	return true;
}

/* Lock not held: tells the one who armed the notification. */
static void
room_tell(struct pool *p, bool due)
{
	if (due)
		p->room(p, p->room_arg);
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
	if (startable(p))
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

/*
 * Lock held: a worker with nothing to take waits for work. Above
 * min_workers it waits at most until it has been idle for keepalive since
 * idle_since; returns true when that time has come (the caller leaves).
 */
static bool
worker_sleep(struct pool *p, uint64_t idle_since)
{
	struct timespec ts;
	uint64_t until;
	int rc = 0;

	p->sleepers++;
	if (p->registered > p->min_workers) {
		until = idle_since + p->keepalive_us;
		ts.tv_sec = (time_t)(until / 1000000);
		ts.tv_nsec = (long)(until % 1000000) * 1000;
		rc = pthread_cond_timedwait(&p->work_cv, &p->lock, &ts);
	} else
		pthread_cond_wait(&p->work_cv, &p->lock);
	p->sleepers--;
	if (p->waking > 0)
		p->waking--;
	return rc == ETIMEDOUT || (p->registered > p->min_workers &&
	    clock_now_us() >= idle_since + p->keepalive_us);
}

static void *
worker_main(void *arg)
{
	struct worker *w = arg;
	struct pool *p = w->pool;
	struct pool_job *j, *ran = NULL; /* ran: counted finished, its done not yet called */
	enum pool_state state = POOL_FAILED;
	uint64_t now, run_us = 0, idle_since = 0;
	bool spun = false, due, wake;

	current_worker = w;
	pthread_mutex_lock(&p->lock);
	for (;;) {
		/* The one decision point: leave, take the next job, or wait. */
		if (p->registered > p->target)
			break;
		if ((j = pick(p)) == NULL) {
			if (p->closed && p->queued == 0)
				break;
			if (ran == NULL && spun) {
				if (idle_since == 0)
					idle_since = clock_now_us();
				if (worker_sleep(p, idle_since) && pick(p) == NULL &&
				    p->registered > p->min_workers && !p->closed) {
					/* idle for keepalive above the minimum: the pool wants one less */
					if (p->target > p->min_workers)
						p->target--;
					break;
				}
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
		idle_since = 0;
		now = clock_now_us();
		if (j->queue_deadline_us != 0 && now >= j->queue_deadline_us) {
			/* Past its deadline before the watcher saw it: expire, never run. */
			struct job_list one = { NULL, NULL };
			dequeue(p, j);
			j->where = POOL_JOB_FINISHED;
			observe_expired(p, j, now);
			list_append(&one, j);
			due = room_due(p);
			pthread_mutex_unlock(&p->lock);
			room_tell(p, due);
			deliver_unrun(&one, POOL_EXPIRED, now);
			pthread_mutex_lock(&p->lock);
			continue;
		}
		dequeue_started(p, j);
		/* more than this worker can take: bring in the next (signalled after the unlock) */
		wake = startable(p) && wake_due(p);
		j->where = POOL_JOB_RUNNING;
		j->started_us = now;
		list_append(&p->running, j);
		p->busy++;
		pool_timing_started(&p->timing, now, now - j->enqueued_us);
		due = room_due(p);
		pthread_mutex_unlock(&p->lock);
		if (wake)
			pthread_cond_signal(&p->work_cv);
		room_tell(p, due);

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
		owner_ended(p, p->owners[j->owner]);   /* made when it was queued, kept */
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

struct watch {
	uint64_t now, earliest;
	struct job_list expired;
};

/* each_queued: expires j when its deadline passed, else keeps the earliest. */
static void
watch_one(struct pool *p, struct pool_job *j, void *arg)
{
	struct watch *wa = arg;

	if (j->queue_deadline_us == 0)
		return;
	if (j->queue_deadline_us <= wa->now)
		finish_unrun(p, j, POOL_EXPIRED, wa->now, &wa->expired);
	else if (wa->earliest == 0 || j->queue_deadline_us < wa->earliest)
		wa->earliest = j->queue_deadline_us;
}

/* Expires queued jobs whose deadline passed; sleeps until the next one. */
static void *
watcher_main(void *arg)
{
	struct worker *w = arg;
	struct pool *p = w->pool;
	uint64_t now, earliest;
	struct timespec ts;

	current_worker = w;
	pthread_mutex_lock(&p->lock);
	while (!p->closed || p->queued > 0) {
		struct watch wa = { clock_now_us(), 0, { NULL, NULL } };
		struct job_list expired;

		if (p->with_deadline > 0)
			each_queued(p, watch_one, &wa);
		now = wa.now;
		earliest = wa.earliest;
		expired = wa.expired;
		if (expired.head != NULL) {
			bool due = room_due(p);
			pthread_mutex_unlock(&p->lock);
			room_tell(p, due);
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
	if (cfg->max_workers != 0 && (cfg->max_workers < cfg->size || cfg->max_workers > cfg->limit)) {
		set_cause(cause, "pool %s: max_workers %u is out of range %u..%u",
		    cfg->name, cfg->max_workers, cfg->size, cfg->limit);
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
	pthread_cond_init(&p->joined_cv, NULL);
	/* Both wait with deadlines on CLOCK_MONOTONIC: queue deadlines, keepalive. */
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&p->watch_cv, &ca);
	pthread_cond_init(&p->work_cv, &ca);
	pthread_condattr_destroy(&ca);
	p->limit = cfg->limit;
	p->capacity = cfg->capacity;
	p->target = cfg->size;
	p->min_workers = cfg->size;
	p->max_workers = cfg->max_workers != 0 ? cfg->max_workers : cfg->size;
	p->keepalive_us = cfg->keepalive_us != 0 ? cfg->keepalive_us : 60 * 1000000ULL;
	p->paused = cfg->paused;
	p->fair = !cfg->no_fair;
	p->drop_oldest = cfg->drop_oldest;
	p->max_queued_per_owner = cfg->max_queued_per_owner;
	p->max_running_per_owner = cfg->max_running_per_owner;
	p->top = p->top_present = -1;
	p->warn = cfg->warn;
	p->warn_arg = cfg->warn_arg;
	p->thread_start = cfg->thread_start ? cfg->thread_start : thread_create_unsignalled;
	p->room = cfg->room;
	p->room_arg = cfg->room_arg;
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

/*
 * Lock held: starts workers while jobs wait that no idle worker will take
 * and the pool may grow. A start that fails leaves the jobs queued; the
 * first failure of a streak is put in *warn (the caller tells it unlocked).
 */
static void
grow_for_queue(struct pool *p, char **warn)
{
	int rc;

	while (!p->paused && !p->closed && p->registered < p->max_workers &&
	    p->registered == p->target && p->queued > p->registered - p->busy) {
		p->target++;
		if ((rc = start_thread(p, false)) != 0) {
			p->target--;
			p->grow_failures++;
			if (!p->grow_failing && warn != NULL && *warn == NULL)
				set_cause(warn, "pool %s: cannot start a worker to grow past %u "
				    "(the task stays queued): %s", p->name, p->registered,
				    strerror(rc));
			p->grow_failing = true;
			return;
		}
		p->grow_failing = false;
	}
}

/* Tells a warning from grow_for_queue, unlocked. */
static void
warn_tell(struct pool *p, char *msg)
{
	if (msg != NULL && p->warn != NULL)
		p->warn(p, msg, p->warn_arg);
	free(msg);
}

/* The oldest job of the lowest priority present, if it is not above priority (lock held). */
static struct pool_job *
displaceable(const struct pool *p, int priority)
{
	int low = bit_lowest(p->present);

	if (low < 0 || low > (int)level_of(priority))
		return NULL;
	return p->levels[low]->head;
}

enum pool_verdict
pool_submit(struct pool *p, struct pool_job *j)
{
	struct job_list displaced = { NULL, NULL };
	struct pool_oqueue *fresh;
	struct pool_job *victim = NULL;
	struct level *lv;
	char *warn = NULL;
	uint64_t now;
	bool wake;

	pthread_mutex_lock(&p->lock);
	if (p->closed) {
		p->rejected_closed++;
		pthread_mutex_unlock(&p->lock);
		return POOL_REJECTED_CLOSED;
	}
	if (p->max_queued_per_owner != 0 && owner_queued(p, j->owner) >= p->max_queued_per_owner) {
		p->rejected_quota++;
		pthread_mutex_unlock(&p->lock);
		return POOL_REJECTED_QUOTA;
	}
	if (!has_room(p) && (!p->drop_oldest || (victim = displaceable(p, j->priority)) == NULL)) {
		if (!j->may_wait)
			p->rejected_full++;
		pthread_mutex_unlock(&p->lock);
		return POOL_REJECTED_FULL;
	}
	now = clock_now_us();
	/* Displaced first: it may empty the owner queue the new job goes to. */
	if (victim != NULL) {
		victim->displaced = true;
		p->displaced++;
		finish_unrun(p, victim, POOL_EXPIRED, now, &displaced);
	}
	if (enqueue_prepare(p, j, &fresh) == -1) {
		p->rejected_full++;     /* out of memory: no room, as far as the caller can tell */
		pthread_mutex_unlock(&p->lock);
		deliver_unrun(&displaced, POOL_EXPIRED, now);
		return POOL_REJECTED_FULL;
	}
	/* no other thread sees j before the unlock, which orders this store: no fence needed */
	atomic_store_explicit(&j->cancel_requested, false, memory_order_relaxed);
	j->where = POOL_JOB_QUEUED;
	j->displaced = false;
	j->enqueued_us = now;
	j->started_us = 0;
	enqueue(p, j, fresh);
	lv = j->oq->lv;
	j->queued_ahead = queued_above(p, j->oq->level);
	if (!p->fair || lv->noqs <= 1)
		j->queued_ahead += lv->count - 1;
	else {
		unsigned k = j->oq->count - 1, bound = k + (k + 1) * (lv->noqs - 1);
		j->queued_ahead += bound < lv->count - 1 ? bound : lv->count - 1;
	}
	p->accepted++;
	if (j->queue_deadline_us != 0) {
		p->with_deadline++;
		if (p->watch_until_us == 0 || j->queue_deadline_us < p->watch_until_us) {
			p->watch_until_us = j->queue_deadline_us;
			pthread_cond_signal(&p->watch_cv);
		}
	}
	grow_for_queue(p, &warn);
	wake = startable(p) && wake_due(p);
	pthread_mutex_unlock(&p->lock);
	/* after the unlock: the worker it wakes takes the lock at once (wake_due) */
	if (wake)
		pthread_cond_signal(&p->work_cv);
	warn_tell(p, warn);
	deliver_unrun(&displaced, POOL_EXPIRED, now);
	return POOL_ACCEPTED;
}

void
pool_want_room(struct pool *p)
{
	bool due;

	pthread_mutex_lock(&p->lock);
	p->want_room = p->room != NULL && !p->closed;
	due = room_due(p);
	pthread_mutex_unlock(&p->lock);
	room_tell(p, due);
}

int
pool_resize(struct pool *p, unsigned size, char **cause)
{
	return pool_resize_bounds(p, size, size, cause);
}

int
pool_resize_bounds(struct pool *p, unsigned min, unsigned max, char **cause)
{
	struct worker *exited;
	int rc = 0, ret = 0;
	char *warn = NULL;
	bool due;

	pthread_mutex_lock(&p->lock);
	if (p->closed) {
		pthread_mutex_unlock(&p->lock);
		set_cause(cause, "pool %s is shutting down", p->name);
		return -1;
	}
	if (min < 1 || min > p->limit || max < min || max > p->limit) {
		pthread_mutex_unlock(&p->lock);
		if (min == max)
			set_cause(cause, "size %u is out of range 1..%u for pool %s",
			    min, p->limit, p->name);
		else
			set_cause(cause, "min %u and max %u are out of range for pool %s "
			    "(1 <= min <= max <= %u)", min, max, p->name, p->limit);
		return -1;
	}
	p->min_workers = min;
	p->max_workers = max;
	if (p->target < min)
		p->target = min;
	if (p->target > max)
		p->target = max;
	/* Threads are started under the lock, so the newest target always wins. */
	while (p->registered < p->target) {
		if ((rc = start_thread(p, false)) != 0) {
			p->target = p->registered > 0 ? p->registered : 1;
			set_cause(cause, "pool %s: started only %u of %u workers: %s",
			    p->name, p->registered, min, strerror(rc));
			ret = -1;
			break;
		}
	}
	if (ret == 0)
		grow_for_queue(p, &warn);
	/* idle surplus workers leave; idle ones above a lower min see their keepalive again */
	pthread_cond_broadcast(&p->work_cv);
	exited = take_exited(p, false);
	due = room_due(p);
	pthread_mutex_unlock(&p->lock);
	room_tell(p, due);
	warn_tell(p, warn);
	if (exited != NULL) {
		join_all(exited);
		joined(p);
	}
	return ret;
}

void
pool_set_keepalive(struct pool *p, uint64_t keepalive_us)
{
	pthread_mutex_lock(&p->lock);
	p->keepalive_us = keepalive_us > 0 ? keepalive_us : 1;
	pthread_cond_broadcast(&p->work_cv);   /* sleepers take the new deadline */
	pthread_mutex_unlock(&p->lock);
}

bool
pool_set_paused(struct pool *p, bool paused)
{
	char *warn = NULL;
	bool was, due;

	pthread_mutex_lock(&p->lock);
	was = p->paused;
	p->paused = paused && !p->closed;  /* a drain runs the queue: nothing pauses it */
	atomic_store_explicit(&p->queued_hint, p->paused ? 0 : p->queued, memory_order_relaxed);
	if (was && !p->paused) {
		grow_for_queue(p, &warn);
		pthread_cond_broadcast(&p->work_cv);
	}
	due = room_due(p);
	pthread_mutex_unlock(&p->lock);
	room_tell(p, due);
	warn_tell(p, warn);
	return was;
}

void
pool_set_fair(struct pool *p, bool fair)
{
	pthread_mutex_lock(&p->lock);
	if (p->fair != fair) {
		p->fair = fair;
		/* another order: every heap is made again */
		for (unsigned li = 0; li < LEVELS; li++) {
			struct level *lv = p->levels[li];
			if (lv == NULL || lv->nheap < 2)
				continue;
			for (size_t i = lv->nheap / 2; i-- > 0;)
				heap_down(p, lv, i);
		}
	}
	pthread_mutex_unlock(&p->lock);
}

void
pool_set_drop_oldest(struct pool *p, bool drop_oldest)
{
	pthread_mutex_lock(&p->lock);
	p->drop_oldest = drop_oldest;
	pthread_mutex_unlock(&p->lock);
}

void
pool_set_owner_limits(struct pool *p, unsigned max_queued, unsigned max_running)
{
	pthread_mutex_lock(&p->lock);
	p->max_queued_per_owner = max_queued;
	p->max_running_per_owner = max_running;
	for (size_t i = 0; i < p->nowners; i++) {
		struct pool_owner *o = p->owners[i];
		if (o == NULL)
			continue;
		if (o->blocked && !owner_at_cap(p, o))
			owner_unblock(p, o);
		else if (!o->blocked && owner_at_cap(p, o))
			owner_block(p, o);
	}
	if (startable(p))
		pthread_cond_broadcast(&p->work_cv);
	pthread_mutex_unlock(&p->lock);
}

bool
pool_over_quota(struct pool *p, uint32_t owner)
{
	bool over;

	pthread_mutex_lock(&p->lock);
	over = p->max_queued_per_owner != 0 && owner_queued(p, owner) >= p->max_queued_per_owner;
	if (over)
		p->rejected_quota++;
	pthread_mutex_unlock(&p->lock);
	return over;
}

void
pool_count_rejected(struct pool *p, enum pool_verdict v)
{
	pthread_mutex_lock(&p->lock);
	if (v == POOL_REJECTED_FULL)
		p->rejected_full++;
	else if (v == POOL_REJECTED_CLOSED)
		p->rejected_closed++;
	else if (v == POOL_REJECTED_QUOTA)
		p->rejected_quota++;
	pthread_mutex_unlock(&p->lock);
}

int
pool_set_capacity(struct pool *p, unsigned capacity, char **cause)
{
	bool due;

	if (capacity < 1) {
		set_cause(cause, "capacity must be at least 1");
		return -1;
	}
	pthread_mutex_lock(&p->lock);
	p->capacity = capacity;
	due = room_due(p);
	pthread_mutex_unlock(&p->lock);
	room_tell(p, due);
	return 0;
}

int
pool_set_limit(struct pool *p, unsigned limit, char **cause)
{
	pthread_mutex_lock(&p->lock);
	if (limit < 1 || limit < p->max_workers) {
		unsigned max = p->max_workers;
		pthread_mutex_unlock(&p->lock);
		set_cause(cause, "limit %u is below the current max_workers %u", limit, max);
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
	bool due = false;

	pthread_mutex_lock(&p->lock);
	now = clock_now_us();
	where = j->where;
	if (where == POOL_JOB_QUEUED) {
		finish_unrun(p, j, POOL_CANCELLED, now, &one);
		due = room_due(p);
	} else if (where == POOL_JOB_RUNNING && !atomic_exchange(&j->cancel_requested, true) &&
	    j->on_cancel != NULL)
		j->on_cancel(j);
	pthread_mutex_unlock(&p->lock);
	room_tell(p, due);
	deliver_unrun(&one, POOL_CANCELLED, now);
	return where;
}

bool
pool_job_cancelled(const struct pool_job *j)
{
	return atomic_load(&j->cancel_requested);
}

struct cancel_all {
	uint64_t now;
	struct job_list cancelled;
};

static void
cancel_one(struct pool *p, struct pool_job *j, void *arg)
{
	struct cancel_all *ca = arg;

	finish_unrun(p, j, POOL_CANCELLED, ca->now, &ca->cancelled);
}

void
pool_close(struct pool *p, enum pool_close_mode mode)
{
	struct cancel_all ca = { clock_now_us(), { NULL, NULL } };
	struct pool_job *j;

	pthread_mutex_lock(&p->lock);
	p->closed = true;
	/* a drain runs the queue to its end: a paused pool starts again */
	p->paused = false;
	atomic_store_explicit(&p->queued_hint, p->queued, memory_order_relaxed);
	p->want_room = false;
	if (mode == POOL_NOW) {
		each_queued(p, cancel_one, &ca);
		for (j = p->running.head; j != NULL; j = j->next)
			if (!atomic_exchange(&j->cancel_requested, true) && j->on_cancel != NULL)
				j->on_cancel(j);
	}
	pthread_cond_broadcast(&p->work_cv);
	pthread_cond_signal(&p->watch_cv); /* it leaves if the queue is already empty */
	pthread_mutex_unlock(&p->lock);
	deliver_unrun(&ca.cancelled, POOL_CANCELLED, ca.now);
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
	for (unsigned li = 0; li < LEVELS; li++)
		if (p->levels[li] != NULL) {
			free(p->levels[li]->heap);
			free(p->levels[li]);
		}
	for (size_t i = 0; i < p->nowners; i++)
		if (p->owners[i] != NULL) {
			free(p->owners[i]->spare);
			free(p->owners[i]);
		}
	free(p->owners);
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
	s->min_workers = p->min_workers;
	s->max_workers = p->max_workers;
	s->keepalive_us = p->keepalive_us;
	s->paused = p->paused;
	s->fair = p->fair;
	s->drop_oldest = p->drop_oldest;
	s->max_queued_per_owner = p->max_queued_per_owner;
	s->max_running_per_owner = p->max_running_per_owner;
	s->workers = p->registered;
	s->busy = p->busy;
	s->idle = p->registered > p->busy ? p->registered - p->busy : 0;
	s->sleeping = p->sleepers;
	s->queued = p->queued;
	s->capacity = p->capacity;
	s->limit = p->limit;
	s->closed = p->closed;
	s->accepted = p->accepted;
	s->rejected_full = p->rejected_full;
	s->rejected_closed = p->rejected_closed;
	s->rejected_quota = p->rejected_quota;
	s->rejected_storage = p->rejected_storage;
	s->displaced = p->displaced;
	s->grow_failures = p->grow_failures;
	s->rejected = p->rejected_full + p->rejected_closed + p->rejected_quota +
	    p->rejected_storage;
	s->lost = p->lost;
	s->succeeded = p->succeeded;
	s->failed = p->failed;
	s->timed_out = p->timed_out;
	s->cancelled = p->cancelled;
	s->expired = p->expired;
	s->oldest_queued_us = 0;
	for (int li = bit_highest(p->present, LEVELS - 1); li >= 0; li = bit_highest(p->present, li - 1))
		if (now - p->levels[li]->head->enqueued_us > s->oldest_queued_us)
			s->oldest_queued_us = now - p->levels[li]->head->enqueued_us;
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
