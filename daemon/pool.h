/*
 * pool.h: a resizable pool of worker threads in front of a bounded FIFO queue.
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
 *  - Workers registered at the pool follow its target: growing starts real
 *    threads before pool_resize returns; a surplus worker leaves only at the
 *    point where it would take its next job. Running jobs are never interrupted.
 */
#ifndef TPD_POOL_H
#define TPD_POOL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

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

	/* Owned by the pool. */
	atomic_bool cancel_requested;
	enum pool_job_where where;
	uint64_t enqueued_us;
	uint64_t started_us;
	unsigned queued_ahead;        /* jobs ahead of it in the queue when accepted */
	struct pool_job *next;
	struct pool_job *prev;
};

/* A consistent copy of a pool's figures, taken under its lock. */
struct pool_snapshot {
	unsigned target;
	unsigned workers;       /* registered: running or waiting for a job */
	unsigned busy;          /* running a job */
	unsigned idle;          /* registered and not running a job */
	unsigned queued;
	unsigned capacity;
	unsigned limit;
	bool closed;
	uint64_t accepted;
	uint64_t rejected;      /* rejected_full + rejected_closed */
	uint64_t rejected_full;
	uint64_t rejected_closed;
	uint64_t succeeded;
	uint64_t failed;
	uint64_t timed_out;
	uint64_t cancelled;
	uint64_t expired;
	uint64_t oldest_queued_us; /* age of the head of the queue; 0 when empty */
};

/* The thread starter: pthread_create, or a test's fault injector. */
typedef int (*pool_thread_start_fn)(pthread_t *, const pthread_attr_t *,
    void *(*)(void *), void *);

struct pool_config {
	const char *name;       /* copied; used in thread names */
	unsigned size;          /* 1..limit */
	unsigned limit;         /* >= 1 */
	unsigned capacity;      /* >= 1 */
	pool_thread_start_fn thread_start; /* NULL = pthread_create */
};

/* Monotonic clock in microseconds, the clock of queue deadlines. */
uint64_t clock_now_us(void);

/*
 * Creates a pool and starts cfg->size workers. On failure returns NULL with
 * *cause set (caller frees); no thread is left behind.
 */
struct pool *pool_create(const struct pool_config *cfg, char **cause);

const char *pool_name(const struct pool *);

/* Accepts or rejects job at once. On POOL_ACCEPTED the job belongs to the pool until done. */
enum pool_verdict pool_submit(struct pool *, struct pool_job *job);

/*
 * Sets the target to size (1..limit). Growing starts the missing threads
 * before returning; shrinking wakes idle workers, which leave where they
 * would take their next job. Returns 0, or -1 with *cause set when size is
 * out of range, the pool is closed, or a thread failed to start (then the
 * threads that started stay and the target becomes the current count).
 */
int pool_resize(struct pool *, unsigned size, char **cause);

/* Changes the queue capacity (>= 1); jobs already queued stay. */
int pool_set_capacity(struct pool *, unsigned capacity, char **cause);

/* Changes the largest size pool_resize accepts (>= current target). */
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

/* Terminal state names as on the wire: "succeeded", "failed", ... */
const char *pool_state_name(enum pool_state);

#endif
