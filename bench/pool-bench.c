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
 * Then it times what each job adds to the pool's timings (pool.h's struct
 * pool_timing: one wait and one run time observed, on one thread, with
 * durations spread over the buckets), which the pool does under its lock.
 *
 * Usage: pool-bench [-n TASKS] [-q CAPACITY]
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
	unsigned n = 200000, capacity = 1024;
	int c;

	while ((c = getopt(argc, argv, "n:q:h")) != -1) {
		switch (c) {
		case 'n': n = parse_count(optarg, "-n (tasks)"); break;
		case 'q': capacity = parse_count(optarg, "-q (queue capacity)"); break;
		default:
			fprintf(stderr, "usage: pool-bench [-n TASKS] [-q CAPACITY]\n");
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
	for (size_t w = 0; w < sizeof workers / sizeof workers[0]; w++)
		for (size_t s = 0; s < sizeof submitters / sizeof submitters[0]; s++)
			run_one(workers[w], submitters[s], n, capacity);
	time_observations(n * 10);
	return 0;
}
