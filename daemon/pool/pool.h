/*
 * pool.h: an elastic pool of worker threads in front of a bounded queue that
 * starts the highest priority first, takes turns between owners, and keeps
 * FIFO order among equals.
 *
 * No libevent and no JSON here: a pool runs opaque jobs. The caller embeds a
 * struct pool_job in its own record, fills the public part, and keeps the
 * record alive until the job's done callback has run (and, if it calls
 * pool_cancel, until it knows done has run).
 *
 * Semantics (the README's "The worker pool" says them for users):
 *  - pool_submit accepts or rejects at one point, under the pool lock that
 *    pool_close also takes. A rejected job never runs and its done callback
 *    is never called.
 *  - An accepted job ends in exactly one call of its done callback, with one
 *    terminal state and its queued and run times.
 *  - Workers registered at the pool follow its target, which stays between
 *    min_workers and max_workers: growing starts real threads before
 *    pool_resize returns; a surplus worker leaves only at the point where it
 *    would take its next job. Running jobs are never interrupted.
 *  - A pool grows before it queues: a submit that finds no idle worker while
 *    the pool has fewer than max_workers starts one at once (a thread that
 *    cannot start leaves the job queued; warn says so once, until a start
 *    works again). A worker above min_workers that has been idle for
 *    keepalive leaves, at the point where it would take its next job.
 *  - Order (the one place that decides it is pick, under the lock): the
 *    highest priority present first; among the jobs of that priority, with
 *    fair, the oldest job of the owner whose last job started longest ago
 *    (never: first); without fair, or with one owner, the oldest job. An
 *    owner running max_running_per_owner jobs is passed over until one of
 *    them ends. A paused pool starts nothing.
 *  - Admission (pool_submit, under the lock): an owner with
 *    max_queued_per_owner jobs queued is refused (POOL_REJECTED_QUOTA);
 *    then a full queue refuses (POOL_REJECTED_FULL) or, with drop_oldest,
 *    displaces the oldest job of the lowest priority present when that is
 *    not above the new job's: the displaced job ends POOL_EXPIRED with its
 *    displaced flag set.
 *  - start and accept cost O(log n) in the jobs of one priority (a heap of
 *    owners per priority, fed lazily); one owner at one priority is a FIFO.
 *  - Each pool keeps its timings in fixed-size histograms (no allocation per
 *    job): how long jobs waited in the queue (observed when a job starts, or
 *    expires) and how long they ran (observed when it ends), since the pool
 *    was made and over the last seconds, with the rate of jobs ending.
 */
#ifndef TPD_POOL_H
#define TPD_POOL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/clock.h"

struct pool;
struct pool_job;

enum pool_state {
	POOL_SUCCEEDED,
	POOL_FAILED,
	POOL_TIMED_OUT,
	POOL_CANCELLED,
	POOL_EXPIRED,
};

/* Why pool_submit said no. */
enum pool_verdict {
	POOL_ACCEPTED,
	POOL_REJECTED_FULL,   /* queue at capacity */
	POOL_REJECTED_CLOSED, /* pool is shutting down */
	POOL_REJECTED_QUOTA,  /* its owner has max_queued_per_owner jobs queued */
};

enum pool_close_mode {
	POOL_DRAIN, /* queued jobs still run */
	POOL_NOW,   /* queued jobs end cancelled at once; running ones see their cancel flag */
};

/*
 * Runs on a worker thread, never under the pool lock. Returns the job's
 * terminal state: POOL_SUCCEEDED, POOL_FAILED, POOL_TIMED_OUT or
 * POOL_CANCELLED. Long jobs poll pool_job_cancelled().
 */
typedef enum pool_state (*pool_work_fn)(struct pool_job *);

/*
 * Called exactly once for every accepted job, never under the pool lock, on
 * the thread that ended the job: the worker that ran it, the watcher that
 * expired it, or the thread that cancelled it while queued (pool_cancel,
 * pool_close with POOL_NOW). Times are in microseconds.
 */
typedef void (*pool_done_fn)(struct pool_job *, enum pool_state,
    uint64_t queued_us, uint64_t run_us);

/*
 * Called under the pool lock when cancel is asked of a running job, so that a
 * job blocked in a wait can be woken (write to a pipe, signal a condition).
 * Must not block and must not call back into the pool; it may take only a
 * leaf lock (the top of pool.c names the ones tpd takes).
 */
typedef void (*pool_cancel_fn)(struct pool_job *);

/* Where a job is; changed only under the pool lock. */
enum pool_job_where {
	POOL_JOB_NEW,
	POOL_JOB_QUEUED,
	POOL_JOB_RUNNING,
	POOL_JOB_FINISHED,
};

struct pool_job {
	/* Filled by the caller before pool_submit. */
	pool_work_fn work;
	pool_done_fn done;
	pool_cancel_fn on_cancel;     /* optional */
	void *arg;                    /* the caller's own pointer */
	uint64_t queue_deadline_us;   /* clock_now_us() deadline to start by; 0 = none */
	int priority;                 /* POOL_PRIORITY_MIN..MAX, higher starts first; 0 default */
	uint32_t owner;               /* a small number per distinct owner; 0 = no owner */
	/*
	 * the caller holds the job when refused for room and submits it again
	 * later: that refusal is not counted as rejected (pool_count_rejected
	 * counts the caller's final one)
	 */
	bool may_wait;

	/*
	 * Owned by the pool. In this order so that what a submit and a start
	 * write fits, with the caller's part, in two cache lines.
	 */
	atomic_bool cancel_requested;
	bool displaced;               /* ended POOL_EXPIRED by drop_oldest (read in done) */
	enum pool_job_where where;
	uint64_t enqueued_us;
	uint64_t started_us;
	uint64_t seq;                 /* entry order into the queue */
	struct pool_job *next;        /* its owner's queue at its priority, or a pool list */
	struct pool_job *prev;
	struct pool_job *lnext;       /* every queued job of its priority, in entry order */
	struct pool_job *lprev;
	struct pool_oqueue *oq;       /* the owner's queue it is in while queued */
	/*
	 * jobs that would start before it if nothing else arrived, when
	 * accepted: exact with one owner; with several sharing its priority
	 * under fair, at most this many
	 */
	unsigned queued_ahead;
};

/*
 * A histogram of durations in microseconds, on fixed bucket bounds
 * (pool_hist_bounds_us: 1 us to 1 h, ten buckets a decade from 10 us; the
 * last bucket counts everything longer). Counts are per bucket, not
 * cumulative.
 */
#define POOL_HIST_NBOUNDS 94
struct pool_hist {
	uint64_t count;
	uint64_t sum_us;
	uint64_t min_us, max_us;    /* of what was observed; 0 when count is 0 */
	uint64_t bucket[POOL_HIST_NBOUNDS + 1]; /* bucket[i]: bounds[i-1] < us <= bounds[i] */
};

/* The upper bounds of the buckets, increasing; every Prometheus bound of metrics.c is one. */
extern const uint64_t pool_hist_bounds_us[POOL_HIST_NBOUNDS];

/* Counts one observation. */
void pool_hist_add(struct pool_hist *, uint64_t us);

/* Adds from's observations to into. */
void pool_hist_merge(struct pool_hist *into, const struct pool_hist *from);

/* Observations at or below bound_us, which must be one of the bounds (cumulative count). */
uint64_t pool_hist_count_le(const struct pool_hist *, uint64_t bound_us);

/*
 * The q-quantile (0 < q <= 1) estimated from the buckets: interpolated
 * linearly inside the bucket that holds it, as Prometheus's
 * histogram_quantile does, and kept within the smallest and largest value
 * observed. 0 when nothing was observed.
 */
uint64_t pool_hist_quantile(const struct pool_hist *, double q);

/*
 * A pool's timings, in fixed memory: the histograms of queue waits and run
 * times since the pool was made, and what the last seconds are made of
 * without a histogram of their own: marks (copies of the histograms) taken
 * when each window of POOL_RECENT_WINDOW_US begins, so that the current
 * window and the one before are the histograms minus the older mark; and
 * the jobs that ended after running, per second, in a ring of seconds. One
 * observation is one histogram add. The functions take the time
 * (clock_now_us) so that tests can drive them; the pool calls them under
 * its lock.
 */
#define POOL_RECENT_WINDOW_US 5000000ULL
#define POOL_RECENT_RATE_S 5        /* the rate is over this many seconds */
#define POOL_RECENT_SLOTS 8
struct pool_timing {
	struct pool_hist queued;    /* since creation */
	struct pool_hist run;
	uint64_t window;            /* the current window's number + 1 */
	/* [0]: at the start of the current window; [1]: of the one before */
	struct pool_hist queued_mark[2], run_mark[2];
	/* the extremes of each of those two windows, [0] the current one */
	uint64_t queued_min[2], queued_max[2], run_min[2], run_max[2];
	uint64_t second[POOL_RECENT_SLOTS]; /* second number + 1 each slot counts; 0 = empty */
	uint64_t ended[POOL_RECENT_SLOTS];
	uint64_t since_us;          /* when counting began (the pool's creation) */
};

/* What pool_timing_recent makes of the last seconds. */
struct pool_recent {
	double rate_per_s;          /* jobs that ended after running, per second, last 5 s */
	uint64_t started;           /* jobs whose queue wait was observed in the last 5 to 10 s */
	uint64_t ended;             /* jobs whose run time was */
	uint64_t queued_p50_us, queued_p99_us; /* 0 when started is 0 */
	uint64_t run_p50_us, run_p99_us;       /* 0 when ended is 0 */
};

void pool_timing_init(struct pool_timing *, uint64_t now_us);
/* A job left the queue at now_us (started or expired) after waiting queued_us. */
void pool_timing_started(struct pool_timing *, uint64_t now_us, uint64_t queued_us);
/* A job that ran ended at now_us after running run_us. */
void pool_timing_ended(struct pool_timing *, uint64_t now_us, uint64_t run_us);
/* The last seconds as of now_us. */
void pool_timing_recent(const struct pool_timing *, uint64_t now_us, struct pool_recent *out);

/* A consistent copy of a pool's figures, taken under its lock. */
struct pool_snapshot {
	unsigned target;        /* the workers the pool wants now, min_workers..max_workers */
	unsigned min_workers, max_workers;
	uint64_t keepalive_us;
	bool paused;
	bool fair;
	bool drop_oldest;
	unsigned max_queued_per_owner, max_running_per_owner; /* 0: no limit */
	unsigned workers;       /* registered: running or waiting for a job */
	unsigned busy;          /* running a job */
	unsigned idle;          /* registered and not running a job */
	unsigned sleeping;      /* of those, asleep waiting for work (tests wait for it) */
	unsigned queued;
	unsigned capacity;
	unsigned limit;
	bool closed;
	uint64_t accepted;
	uint64_t rejected;      /* rejected_full + rejected_closed + rejected_quota + rejected_storage */
	uint64_t rejected_full;
	uint64_t rejected_closed;
	uint64_t rejected_quota;
	uint64_t rejected_storage; /* refused by the journal (the daemon counts them here) */
	uint64_t displaced;     /* jobs expired by drop_oldest (also counted in expired) */
	uint64_t grow_failures; /* worker threads that could not be started to grow */
	uint64_t succeeded;
	uint64_t failed;
	uint64_t timed_out;
	uint64_t cancelled;
	uint64_t expired;
	uint64_t lost;          /* ended lost at a restart (the journal's replay counts them) */
	uint64_t oldest_queued_us; /* age of the head of the queue; 0 when empty */
	struct pool_recent recent;  /* the last seconds */
};

#define POOL_PRIORITY_MIN (-1000)
#define POOL_PRIORITY_MAX 1000

/*
 * Someone waits for room (pool_want_room) and a queue slot may be free now:
 * a queued job started, was cancelled, expired or displaced, the capacity
 * grew, the pool was resumed or grew. Called once per pool_want_room, never
 * under the pool lock, on whatever thread freed the slot; it must be quick
 * (tpd's sets a flag and wakes the loop) and may call pool_want_room again
 * only through its consumer, not from inside this call.
 */
typedef void (*pool_room_fn)(struct pool *, void *arg);

/*
 * The thread starter: pthread_create's signature; by default
 * thread_create_unsignalled (base/thread.h: workers take no asynchronous
 * signals), or a test's fault injector.
 */
typedef int (*pool_thread_start_fn)(pthread_t *, const pthread_attr_t *,
    void *(*)(void *), void *);

/*
 * Something worth a log line happened (a worker could not be started to
 * grow). Called off the lock, once per streak of failures.
 */
typedef void (*pool_warn_fn)(struct pool *, const char *msg, void *arg);

struct pool_config {
	const char *name;       /* copied; used in thread names */
	unsigned size;          /* min_workers, 1..limit */
	unsigned max_workers;   /* size..limit; 0 = size (a fixed pool) */
	unsigned limit;         /* >= 1 */
	unsigned capacity;      /* >= 1 */
	uint64_t keepalive_us;  /* idle time after which a worker above size leaves; 0 = 60 s */
	bool paused;            /* starts paused */
	bool no_fair;           /* FIFO within a priority instead of turns between owners */
	bool drop_oldest;       /* a full queue displaces instead of refusing */
	unsigned max_queued_per_owner;  /* 0: no limit */
	unsigned max_running_per_owner; /* 0: no limit */
	pool_thread_start_fn thread_start; /* NULL = thread_create_unsignalled */
	pool_room_fn room;      /* optional: told when room frees after pool_want_room */
	void *room_arg;
	pool_warn_fn warn;      /* optional */
	void *warn_arg;
};

/*
 * Creates a pool and starts cfg->size workers. On failure returns NULL with
 * *cause set (caller frees); no thread is left behind.
 */
struct pool *pool_create(const struct pool_config *cfg, char **cause);

const char *pool_name(const struct pool *);

/* Accepts or rejects job at once. On POOL_ACCEPTED the job belongs to the pool until done. */
enum pool_verdict pool_submit(struct pool *, struct pool_job *job);

/*
 * Arms the room notification: cfg->room is called once, as soon as a job
 * submitted now would find a queue slot (at once, on this thread, when
 * there is room already). Arming again before it fired changes nothing.
 * A closed pool never calls it.
 */
void pool_want_room(struct pool *);

/*
 * Sets the target to size (1..limit): min_workers = max_workers = size.
 * Growing starts the missing threads before returning; shrinking wakes idle
 * workers, which leave where they would take their next job. Returns 0, or
 * -1 with *cause set when size is out of range, the pool is closed, or a
 * thread failed to start (then the threads that started stay and the
 * target becomes the current count).
 */
int pool_resize(struct pool *, unsigned size, char **cause);

/*
 * Sets min_workers and max_workers (1 <= min <= max <= limit); the target
 * is kept between them (raised to min at once, lowered to max
 * cooperatively), and grows for queued jobs up to max. Errors as
 * pool_resize, nothing changed when the bounds are wrong.
 */
int pool_resize_bounds(struct pool *, unsigned min, unsigned max, char **cause);

/* How long an idle worker above min_workers stays (> 0). */
void pool_set_keepalive(struct pool *, uint64_t keepalive_us);

/*
 * Pauses (no queued job starts; running ones go on, submits still queue)
 * or resumes the pool. Returns whether it was paused before.
 */
bool pool_set_paused(struct pool *, bool paused);

/* The order and admission rules of pool_config, changed on a live pool. */
void pool_set_fair(struct pool *, bool fair);
void pool_set_drop_oldest(struct pool *, bool drop_oldest);
void pool_set_owner_limits(struct pool *, unsigned max_queued, unsigned max_running);

/*
 * Whether a job of owner would be refused now for max_queued_per_owner
 * (without submitting it): a caller that holds jobs behind others asks
 * before holding one more. Such a refusal is counted as pool_submit's.
 */
bool pool_over_quota(struct pool *, uint32_t owner);

/* Counts a rejection a caller gave itself for the pool (a held job given up: queue_full). */
void pool_count_rejected(struct pool *, enum pool_verdict);

/* Changes the queue capacity (>= 1); jobs already queued stay. */
int pool_set_capacity(struct pool *, unsigned capacity, char **cause);

/* Changes the largest size pool_resize accepts (>= current max_workers). */
int pool_set_limit(struct pool *, unsigned limit, char **cause);

/*
 * Asks a job to stop. Queued: removed and completed as cancelled before this
 * returns (done called on this thread). Running: its cancel flag is set and
 * on_cancel called. Finished or not yet submitted: nothing. Returns the
 * job's position when asked.
 */
enum pool_job_where pool_cancel(struct pool *, struct pool_job *job);

/* True once cancel was asked of this job (polled by work functions). */
bool pool_job_cancelled(const struct pool_job *job);

/*
 * Stops accepting jobs; in POOL_NOW mode also cancels queued and running
 * jobs. Does not wait. Calling it again with POOL_NOW upgrades a drain.
 */
void pool_close(struct pool *, enum pool_close_mode mode);

/*
 * pool_close, then waits until every worker has been joined (joins happen
 * outside the lock). Returns 0, or -1 with *cause set when called from one of
 * the pool's own workers (a worker cannot wait for itself); then nothing changed.
 */
int pool_shutdown(struct pool *, enum pool_close_mode mode, char **cause);

/* Frees a pool after pool_shutdown returned 0. */
void pool_free(struct pool *);

void pool_snapshot(struct pool *, struct pool_snapshot *out);

/*
 * An accepted job's times so far, under the lock: how long it waited in
 * the queue (until now while it is queued) and how long it has run (0
 * until it starts).
 */
void pool_job_times(struct pool *, const struct pool_job *job, uint64_t *queued_us,
    uint64_t *run_us);

/*
 * Copies the pool's histograms since its creation: queue waits (a job is
 * observed when it starts or expires; one cancelled while queued is not)
 * and run times (observed when a job that ran ends). Either may be NULL.
 */
void pool_timings(struct pool *, struct pool_hist *queued, struct pool_hist *run);

/* Counts a task of the pool that ended lost at a restart (it never ran here). */
void pool_count_lost(struct pool *);

/* Counts a submit to the pool the journal refused (storage). */
void pool_count_rejected_storage(struct pool *);

/* Terminal state names as on the wire: "succeeded", "failed", ... */
const char *pool_state_name(enum pool_state);

#endif
