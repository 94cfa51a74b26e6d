/*
 * pool-bench.c: throughput and latency of the pool with trivial jobs.
 *
 * For W workers and S submitter threads, pushes N jobs that do nothing
 * through one pool and prints jobs per second and the median and 99th
 * percentile of submit-to-completion latency (from the accepted submit to
 * the end of the done callback's clock read, on the worker). A submitter
 * refused with queue_full retries the same job at once (after a yield) and
 * counts the retry, so every job completes.
 *
 * Then the cost of the queue's order at depth: with the one worker held by
 * a first job, it submits Q jobs (one thread: the accept cost, per job),
 * then lets the worker go and times the drain (the start cost: take, run
 * nothing, book, per job), for 1 and 1,000 owners and 1 and 20 priorities,
 * in the CPU time of the thread that does it (a shared machine's other
 * load does not count).
 * Built against a pool without priorities or owners, it times the first
 * row only (the FIFO of one owner), for a side-by-side comparison.
 *
 * Then it times what each job adds to the pool's timings (pool.h's struct
 * pool_timing: one wait and one run time observed, on one thread, with
 * durations spread over the buckets), which the pool does under its lock.
 *
 * Usage: pool-bench [-n TASKS] [-q CAPACITY] [-d DEPTH] [-r ROUNDS] [-1]
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "pool/pool.h"

struct bjob {
	struct pool_job pj;
	struct bench *b;
	uint64_t submit_ns;     /* written before each submit attempt */
	uint64_t latency_ns;    /* written by done */
};

struct bench {
	struct pool *pool;
	struct bjob *jobs;
	unsigned n;
	unsigned submitters;
	pthread_barrier_t start;
	atomic_uint completed;
	atomic_ulong retries;
	pthread_mutex_t m;
	pthread_cond_t all_done;
	uint64_t end_ns;        /* under m */
	bool finished;          /* under m */
};

struct submitter {
	struct bench *b;
	unsigned first, count;
	pthread_t tid;
};

static uint64_t
now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000 + (uint64_t)ts.tv_nsec;
}

static enum pool_state
bjob_work(struct pool_job *pj)
{
	return POOL_SUCCEEDED;
}

static void
bjob_done(struct pool_job *pj, enum pool_state state, uint64_t q, uint64_t r)
{
	struct bjob *j = (struct bjob *)pj;
	struct bench *b = j->b;
	uint64_t t = now_ns();

	j->latency_ns = t - j->submit_ns;
	if (atomic_fetch_add(&b->completed, 1) + 1 == b->n) {
		pthread_mutex_lock(&b->m);
		b->end_ns = t;
		b->finished = true;
		pthread_cond_signal(&b->all_done);
		pthread_mutex_unlock(&b->m);
	}
}

static void *
submitter_main(void *arg)
{
	struct submitter *s = arg;
	struct bench *b = s->b;
	unsigned long retries = 0;

	pthread_barrier_wait(&b->start);
	for (unsigned k = s->first; k < s->first + s->count; k++) {
		struct bjob *j = &b->jobs[k];

		for (;;) {
			/* A rejected job is never touched by the pool: safe to rewrite. */
			j->submit_ns = now_ns();
			if (pool_submit(b->pool, &j->pj) == POOL_ACCEPTED)
				break;
			retries++;
			sched_yield();
		}
	}
	atomic_fetch_add(&b->retries, retries);
	return NULL;
}

static int
cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static void
die(const char *what, const char *cause)
{
	fprintf(stderr, "pool-bench: %s: %s\n", what, cause ? cause : strerror(errno));
	exit(1);
}

static void
run_one(unsigned workers, unsigned submitters, unsigned n, unsigned capacity)
{
	struct pool_config cfg = {
		.name = "bench", .size = workers, .limit = workers, .capacity = capacity, .thread_start = NULL,
	};
	struct submitter subs[16];
	struct bench b;
	uint64_t *lat, t0, elapsed;
	char *cause = NULL;
	unsigned i, per;

	memset(&b, 0, sizeof b);
	b.n = n;
	b.submitters = submitters;
	atomic_init(&b.completed, 0);
	atomic_init(&b.retries, 0);
	pthread_mutex_init(&b.m, NULL);
	pthread_cond_init(&b.all_done, NULL);
	if ((b.jobs = calloc(n, sizeof *b.jobs)) == NULL || (lat = calloc(n, sizeof *lat)) == NULL)
		die("memory", NULL);
	for (i = 0; i < n; i++) {
		b.jobs[i].pj.work = bjob_work;
		b.jobs[i].pj.done = bjob_done;
		b.jobs[i].b = &b;
	}
	if ((b.pool = pool_create(&cfg, &cause)) == NULL)
		die("pool_create", cause);
	pthread_barrier_init(&b.start, NULL, submitters + 1);

	per = n / submitters;
	for (i = 0; i < submitters; i++) {
		subs[i].b = &b;
		subs[i].first = i * per;
		subs[i].count = i == submitters - 1 ? n - i * per : per;
		if ((errno = pthread_create(&subs[i].tid, NULL, submitter_main, &subs[i])) != 0)
			die("pthread_create", NULL);
	}
	t0 = now_ns();
	pthread_barrier_wait(&b.start);
	for (i = 0; i < submitters; i++)
		pthread_join(subs[i].tid, NULL);
	pthread_mutex_lock(&b.m);
	while (!b.finished)
		pthread_cond_wait(&b.all_done, &b.m);
	elapsed = b.end_ns - t0;
	pthread_mutex_unlock(&b.m);
	if (pool_shutdown(b.pool, POOL_DRAIN, &cause) != 0)
		die("pool_shutdown", cause);
	pool_free(b.pool);

	for (i = 0; i < n; i++)
		lat[i] = b.jobs[i].latency_ns;
	qsort(lat, n, sizeof *lat, cmp_u64);
	printf("%7u %10u %8u %12.0f %10.1f %10.1f %10lu\n", workers, submitters, n,
	    (double)n / ((double)elapsed / 1e9), (double)lat[n / 2] / 1e3,
	    (double)lat[(size_t)n * 99 / 100] / 1e3, atomic_load(&b.retries));
	fflush(stdout);

	pthread_barrier_destroy(&b.start);
	pthread_mutex_destroy(&b.m);
	pthread_cond_destroy(&b.all_done);
	free(lat);
	free(b.jobs);
}

static unsigned
parse_count(const char *s, const char *what)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno != 0 || *end != '\0' || v < 1 || v > 100000000) {
		fprintf(stderr, "pool-bench: %s must be a whole number from 1 to 100000000, not \"%s\"\n",
		    what, s);
		exit(2);
	}
	return (unsigned)v;
}

/* ---- the queue at depth */

/* The calling thread's CPU time: what it cost, whatever else the machine runs. */
static uint64_t
thread_cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000 + (uint64_t)ts.tv_nsec;
}

struct djob {
	struct pool_job pj;
	atomic_uint *done;
	uint64_t *cpu_mark;     /* the worker's CPU time is written here, at the start of work */
	pthread_mutex_t *gm;    /* the first job waits here until released */
	pthread_cond_t *gc;
	bool *released;
};

static enum pool_state
djob_work(struct pool_job *pj)
{
	struct djob *j = (struct djob *)pj;

	if (j->gm != NULL) {
		pthread_mutex_lock(j->gm);
		while (!*j->released)
			pthread_cond_wait(j->gc, j->gm);
		pthread_mutex_unlock(j->gm);
	}
	if (j->cpu_mark != NULL)
		*j->cpu_mark = thread_cpu_ns();
	return POOL_SUCCEEDED;
}

static void
djob_done(struct pool_job *pj, enum pool_state state, uint64_t q, uint64_t r)
{
	atomic_fetch_add(((struct djob *)pj)->done, 1);
}

static unsigned
pool_snapshot_busy(struct pool *p)
{
	struct pool_snapshot s;

	pool_snapshot(p, &s);
	return s.busy;
}

static void
run_depth_once(unsigned depth, unsigned owners, unsigned priorities, double *accept, double *start)
{
	struct pool_config cfg = {
		.name = "depth", .size = 1, .limit = 1, .capacity = depth + 1,
	};
	pthread_mutex_t gm = PTHREAD_MUTEX_INITIALIZER;
	pthread_cond_t gc = PTHREAD_COND_INITIALIZER;
	bool released = false;
	atomic_uint done;
	struct djob *jobs;
	struct pool *p;
	char *cause = NULL;
	uint64_t c0, c1, w0 = 0, w1 = 0;
	unsigned i;

	atomic_init(&done, 0);
	if ((jobs = calloc(depth + 1, sizeof *jobs)) == NULL)
		die("memory", NULL);
	for (i = 0; i <= depth; i++) {
		jobs[i].pj.work = djob_work;
		jobs[i].pj.done = djob_done;
		jobs[i].done = &done;
#ifdef POOL_PRIORITY_MAX
		/* owners and priorities mixed, not in runs: every accept changes owner */
		jobs[i].pj.owner = i % owners + 1;
		jobs[i].pj.priority = (int)((i / owners) % priorities);
#endif
	}
	jobs[0].gm = &gm;
	jobs[0].gc = &gc;
	jobs[0].released = &released;
	/* the worker's CPU time from the end of the first job to the start of the last */
	jobs[0].cpu_mark = &w0;
	jobs[depth].cpu_mark = &w1;
	if ((p = pool_create(&cfg, &cause)) == NULL)
		die("pool_create", cause);
	if (pool_submit(p, &jobs[0].pj) != POOL_ACCEPTED)
		die("submit", "the first job was refused");
	while (pool_snapshot_busy(p) == 0)
		sched_yield();
	c0 = thread_cpu_ns();
	for (i = 1; i <= depth; i++)
		if (pool_submit(p, &jobs[i].pj) != POOL_ACCEPTED)
			die("submit", "refused below capacity");
	c1 = thread_cpu_ns();
	pthread_mutex_lock(&gm);
	released = true;
	pthread_cond_signal(&gc);
	pthread_mutex_unlock(&gm);
	while (atomic_load(&done) < depth + 1)
		sched_yield();
	if (pool_shutdown(p, POOL_DRAIN, &cause) != 0)
		die("pool_shutdown", cause);
	pool_free(p);
	free(jobs);
	*accept = (double)(c1 - c0) / depth;
	*start = (double)(w1 - w0) / depth;
}

/* The median of rounds runs: the machine may be shared, one run says little. */
static int
cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static void
run_depth(unsigned depth, unsigned owners, unsigned priorities, unsigned rounds)
{
	double accept[64], start[64];

	if (rounds > 64)
		rounds = 64;
	for (unsigned r = 0; r < rounds; r++)
		run_depth_once(depth, owners, priorities, &accept[r], &start[r]);
	qsort(accept, rounds, sizeof accept[0], cmp_double);
	qsort(start, rounds, sizeof start[0], cmp_double);
	printf("%8u %7u %10u %12.1f %12.1f %12.1f %12.1f\n", depth, owners, priorities,
	    accept[rounds / 2], start[rounds / 2], accept[0], start[0]);
	fflush(stdout);
}

/* The pool's own bookkeeping of one job's timings, in nanoseconds a job. */
static void
time_observations(unsigned n)
{
	static struct pool_timing t;
	uint64_t start, end, now_us = clock_now_us(), x = 88172645463325252ULL, sink = 0;
	struct pool_recent r;

	pool_timing_init(&t, now_us);
	start = now_ns();
	for (unsigned i = 0; i < n; i++) {
		uint64_t us;
		/* xorshift: durations of 1 us to about 1 s, spread across the buckets */
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		us = (x & 0xfffff) >> (x >> 60);
		pool_timing_started(&t, now_us + i / 64, us);
		pool_timing_ended(&t, now_us + i / 64, us / 3);
	}
	end = now_ns();
	pool_timing_recent(&t, now_us + n / 64, &r);
	sink += r.started;
	printf("timings: %.1f ns a job (a wait and a run time observed, %u jobs; %llu recent)\n",
	    (double)(end - start) / n, n, (unsigned long long)sink);
}

int
main(int argc, char **argv)
{
	static const unsigned workers[] = { 1, 2, 4 }, submitters[] = { 1, 4 };
	unsigned n = 200000, capacity = 1024, depth = 100000, rounds = 9, only = 0;
	int c;

	while ((c = getopt(argc, argv, "n:q:d:r:1h")) != -1) {
		switch (c) {
		case 'n': n = parse_count(optarg, "-n (tasks)"); break;
		case 'q': capacity = parse_count(optarg, "-q (queue capacity)"); break;
		case 'd': depth = parse_count(optarg, "-d (queue depth)"); break;
		case 'r': rounds = parse_count(optarg, "-r (rounds of the depth runs)"); break;
		case '1': only = 1; break;
		default:
			fprintf(stderr, "usage: pool-bench [-n TASKS] [-q CAPACITY] [-d DEPTH] [-r ROUNDS] [-1]\n");
			return c == 'h' ? 0 : 2;
		}
	}
	if (n < 4) {
		fprintf(stderr, "pool-bench: -n must be at least 4\n");
		return 2;
	}
	printf("pool-bench: %u trivial tasks per row, queue capacity %u, %ld CPUs\n",
	    n, capacity, sysconf(_SC_NPROCESSORS_ONLN));
	printf("latency: accepted submit to completion, in microseconds\n");
	printf("%7s %10s %8s %12s %10s %10s %10s\n", "workers", "submitters", "tasks", "tasks/s",
	    "p50 us", "p99 us", "retries");
	for (size_t w = 0; w < sizeof workers / sizeof workers[0] && !only; w++)
		for (size_t s = 0; s < sizeof submitters / sizeof submitters[0]; s++)
			run_one(workers[w], submitters[s], n, capacity);
	printf("the queue at depth: one worker, ns a job to accept (one submitter) and to start\n"
	    "(take it, run nothing, book it), in thread CPU time; median and best of %u rounds\n",
	    rounds);
	printf("%8s %7s %10s %12s %12s %12s %12s\n", "queued", "owners", "priorities",
	    "accept ns", "start ns", "best accept", "best start");
	run_depth(depth, 1, 1, rounds);
	if (only)
		return 0;       /* -1: the FIFO row alone (a profile, a comparison) */
#ifdef POOL_PRIORITY_MAX
	run_depth(depth, 1, 20, rounds);
	run_depth(depth, 1000, 1, rounds);
	run_depth(depth, 1000, 20, rounds);
#endif
	time_observations(n * 10);
	return 0;
}
