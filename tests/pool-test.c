/*
 * pool-test.c: the resizable pool under controlled interleavings.
 *
 * Every pool here starts its threads through tracked_start, which counts
 * start attempts, can fail a chosen one (EAGAIN), and counts thread
 * functions that returned. Jobs block on gates and report to latches, so
 * each test decides who runs when; nothing waits by sleeping.
 *
 * Usage: pool-test [NAME...]   (all tests when no name is given)
 * TPD_STRESS_SUBMISSIONS=N overrides the stress test's submission count.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pool/pool.h"
#include "testutil.h"

/* ---- thread tracking and start-failure injection */

struct tracker {
	pthread_mutex_t m;
	unsigned attempts;      /* calls of tracked_start */
	unsigned started;       /* threads actually created */
	unsigned fail_at;       /* the attempt number that fails; 0 = none */
	struct latch exited;    /* thread functions that returned */
	struct gate *hold;      /* new threads wait here before their function; NULL: none */
	struct latch held;      /* threads that reached the hold */
};

static struct tracker tracker = { .m = PTHREAD_MUTEX_INITIALIZER };

struct trampoline {
	void *(*fn)(void *);
	void *arg;
	struct gate *hold;
};

static void *
tracked_main(void *arg)
{
	struct trampoline t = *(struct trampoline *)arg;
	void *ret;

	free(arg);
	if (t.hold != NULL) {
		latch_up(&tracker.held);
		gate_wait_or(t.hold, NULL, NULL);
	}
	ret = t.fn(t.arg);
	latch_up(&tracker.exited);
	return ret;
}

static int
tracked_start(pthread_t *tid, const pthread_attr_t *attr, void *(*fn)(void *), void *arg)
{
	struct trampoline *t;
	bool fail;
	int rc;

	pthread_mutex_lock(&tracker.m);
	fail = ++tracker.attempts == tracker.fail_at;
	pthread_mutex_unlock(&tracker.m);
	if (fail)
		return EAGAIN;
	if ((t = malloc(sizeof *t)) == NULL)
		return ENOMEM;
	t->fn = fn;
	t->arg = arg;
	pthread_mutex_lock(&tracker.m);
	t->hold = tracker.hold;
	pthread_mutex_unlock(&tracker.m);
	if ((rc = pthread_create(tid, attr, tracked_main, t)) != 0) {
		free(t);
		return rc;
	}
	pthread_mutex_lock(&tracker.m);
	tracker.started++;
	pthread_mutex_unlock(&tracker.m);
	return 0;
}

static unsigned
tracker_started(void)
{
	unsigned n;

	pthread_mutex_lock(&tracker.m);
	n = tracker.started;
	pthread_mutex_unlock(&tracker.m);
	return n;
}

static unsigned
tracker_attempts(void)
{
	unsigned n;

	pthread_mutex_lock(&tracker.m);
	n = tracker.attempts;
	pthread_mutex_unlock(&tracker.m);
	return n;
}

/* Threads created and not yet returned from their function. */
static unsigned
tracker_live(void)
{
	return tracker_started() - latch_get(&tracker.exited);
}

/* Makes attempt number n (counting from the next one as 1) fail; 0 = none. */
static void
tracker_fail_in(unsigned n)
{
	pthread_mutex_lock(&tracker.m);
	tracker.fail_at = n == 0 ? 0 : tracker.attempts + n;
	pthread_mutex_unlock(&tracker.m);
}

static void
tracker_reset(void)
{
	CHECK(tracker_live() == 0, "%u threads of an earlier test are still alive", tracker_live());
	pthread_mutex_lock(&tracker.m);
	tracker.attempts = tracker.started = tracker.fail_at = 0;
	pthread_mutex_unlock(&tracker.m);
	latch_destroy(&tracker.exited);
	latch_init(&tracker.exited);
	latch_destroy(&tracker.held);
	latch_init(&tracker.held);
	tracker.hold = NULL;
}

/* New threads wait at g before their function (NULL: they go at once). */
static void
tracker_hold(struct gate *g)
{
	pthread_mutex_lock(&tracker.m);
	tracker.hold = g;
	pthread_mutex_unlock(&tracker.m);
}

/* ---- test jobs */

/* What a test's jobs report to. */
struct ctx {
	struct latch started;
	struct latch done;
	atomic_uint seq;
};

struct tjob {
	struct pool_job pj;             /* first: a pool_job pointer is a tjob pointer */
	struct ctx *ctx;
	unsigned id;
	struct gate *gate;              /* work blocks here when set */
	bool watch_cancel;              /* leave the gate early when cancelled */
	enum pool_state result;         /* what work returns */
	void (*action)(struct tjob *);  /* run inside work, before blocking */
	void (*in_done)(struct tjob *); /* run inside done */
	struct pool *pool;              /* for actions */
	struct latch *cancel_seen;      /* counted up by on_cancel */

	atomic_uint runs;
	atomic_uint dones;
	/* Written by work or done, read after the done latch. */
	unsigned start_seq;
	pthread_t ran_on;
	pthread_t done_on;
	enum pool_state state;
	uint64_t queued_us, run_us;
	int action_rc;
	char *action_cause;
};

static bool
job_cancel_seen(const void *arg)
{
	return pool_job_cancelled(arg);
}

static enum pool_state
job_work(struct pool_job *pj)
{
	struct tjob *t = (struct tjob *)pj;

	atomic_fetch_add(&t->runs, 1);
	t->ran_on = pthread_self();
	t->start_seq = atomic_fetch_add(&t->ctx->seq, 1) + 1;
	if (t->action != NULL)
		t->action(t);
	latch_up(&t->ctx->started);
	if (t->gate != NULL &&
	    !gate_wait_or(t->gate, t->watch_cancel ? job_cancel_seen : NULL, pj))
		return POOL_CANCELLED;
	return t->result;
}

/* Called under the pool lock: only wakes the job. */
static void
job_on_cancel(struct pool_job *pj)
{
	struct tjob *t = (struct tjob *)pj;

	if (t->gate != NULL)
		gate_poke(t->gate);
	if (t->cancel_seen != NULL)
		latch_up(t->cancel_seen);
}

static void
job_done(struct pool_job *pj, enum pool_state state, uint64_t queued_us, uint64_t run_us)
{
	struct tjob *t = (struct tjob *)pj;

	t->state = state;
	t->queued_us = queued_us;
	t->run_us = run_us;
	t->done_on = pthread_self();
	if (t->in_done != NULL)
		t->in_done(t);
	atomic_fetch_add(&t->dones, 1);
	latch_up(&t->ctx->done);
}

static void
ctx_init(struct ctx *c)
{
	latch_init(&c->started);
	latch_init(&c->done);
	atomic_init(&c->seq, 0);
}

static void
ctx_destroy(struct ctx *c)
{
	latch_destroy(&c->started);
	latch_destroy(&c->done);
}

static void
job_init(struct tjob *t, struct ctx *c, unsigned id, struct gate *g)
{
	memset(t, 0, sizeof *t);
	t->pj.work = job_work;
	t->pj.done = job_done;
	t->pj.on_cancel = job_on_cancel;
	t->ctx = c;
	t->id = id;
	t->gate = g;
	t->watch_cancel = true;
	t->result = POOL_SUCCEEDED;
	atomic_init(&t->runs, 0);
	atomic_init(&t->dones, 0);
	atomic_init(&t->pj.cancel_requested, false);
}

static void
jobs_init(struct tjob *t, size_t n, struct ctx *c, struct gate *g)
{
	for (size_t i = 0; i < n; i++)
		job_init(&t[i], c, (unsigned)i, g);
}

static struct pool *
pool_make(const char *name, unsigned size, unsigned limit, unsigned capacity)
{
	struct pool_config cfg = {
		.name = name, .size = size, .limit = limit, .capacity = capacity, .thread_start = tracked_start,
	};
	struct pool *p;
	char *cause = NULL;

	tracker_reset();
	p = pool_create(&cfg, &cause);
	CHECK(p != NULL, "pool_create: %s", cause ? cause : "?");
	return p;
}

#define submit_ok(p, t) do {						\
	enum pool_verdict v_ = pool_submit((p), &(t)->pj);		\
	CHECK(v_ == POOL_ACCEPTED, "job %u not accepted (verdict %d)", (t)->id, (int)v_); \
} while (0)

/* Shuts the pool down, checks that no thread is left, frees it. */
static void
pool_finish(struct pool *p, enum pool_close_mode mode)
{
	char *cause = NULL;

	CHECK(pool_shutdown(p, mode, &cause) == 0, "pool_shutdown: %s", cause ? cause : "?");
	CHECK_EQ(tracker_live(), 0, "threads alive after pool_shutdown returned");
	pool_free(p);
}

static struct pool_snapshot
snap(struct pool *p)
{
	struct pool_snapshot s;

	pool_snapshot(p, &s);
	return s;
}

static void
check_contains(const char *file, int line, const char *s, const char *want)
{
	if (s == NULL || strstr(s, want) == NULL)
		test_fail(file, line, "message \"%s\" does not say \"%s\"", s ? s : "(null)", want);
}
#define CHECK_SAYS(s, want) check_contains(__FILE__, __LINE__, (s), (want))

/* ---- 1. growing starts a real thread */

static void
test_grow_starts_real_thread(void)
{
	struct ctx c;
	struct gate g1, g2;
	struct tjob a, b;
	struct pool *p;
	char *cause = NULL;

	ctx_init(&c);
	gate_init(&g1);
	gate_init(&g2);
	p = pool_make("grow", 1, 4, 4);
	job_init(&a, &c, 1, &g1);
	job_init(&b, &c, 2, &g2);

	submit_ok(p, &a);
	latch_wait(&c.started, 1, "the first job to start");
	submit_ok(p, &b);
	CHECK_EQ(snap(p).queued, 1, "queued behind the one busy worker");

	CHECK(pool_resize(p, 2, &cause) == 0, "resize to 2: %s", cause);
	/* The thread exists when resize returns: one worker, the watcher, the new one. */
	CHECK_EQ(tracker_started(), 3, "threads started by creation and resize");
	CHECK_EQ(snap(p).workers, 2, "workers right after resize");

	latch_wait(&c.started, 2, "the second job to start on the new worker");
	CHECK_EQ(atomic_load(&a.dones), 0, "first job's completions while it is blocked");
	CHECK(!pthread_equal(a.ran_on, b.ran_on), "both jobs ran on the same thread");

	gate_open(&g1);
	gate_open(&g2);
	latch_wait(&c.done, 2, "both jobs to complete");
	CHECK(a.state == POOL_SUCCEEDED && b.state == POOL_SUCCEEDED, "states %d %d",
	    a.state, b.state);
	pool_finish(p, POOL_DRAIN);
	gate_destroy(&g1);
	gate_destroy(&g2);
	ctx_destroy(&c);
}

/* ---- 2. a surplus worker leaves before taking the next job */

static void
test_shrink_surplus_leaves(void)
{
	struct ctx c;
	struct gate g1, g2;
	struct tjob a, b, q;
	struct pool *p;
	struct pool_snapshot s;
	char *cause = NULL;

	ctx_init(&c);
	gate_init(&g1);
	gate_init(&g2);
	p = pool_make("shrink", 2, 4, 4);
	job_init(&a, &c, 1, &g1);
	job_init(&b, &c, 2, &g2);
	job_init(&q, &c, 3, NULL);

	submit_ok(p, &a);
	submit_ok(p, &b);
	latch_wait(&c.started, 2, "two jobs running");
	submit_ok(p, &q);

	CHECK(pool_resize(p, 1, &cause) == 0, "resize to 1: %s", cause);
	s = snap(p);
	CHECK_EQ(s.target, 1, "target after shrink");
	CHECK_EQ(s.workers, 2, "workers while both are busy (shrink is cooperative)");

	gate_open(&g1);
	latch_wait(&c.done, 1, "the released job to complete");
	latch_wait(&tracker.exited, 1, "the surplus worker to exit");
	s = snap(p);
	CHECK_EQ(s.workers, 1, "workers after the surplus one left");
	CHECK_EQ(s.queued, 1, "the queued job is still queued");
	CHECK_EQ(atomic_load(&q.runs), 0, "runs of the queued job taken by the leaving worker");

	gate_open(&g2);
	latch_wait(&c.done, 3, "the remaining worker to run the queued job");
	CHECK_EQ(atomic_load(&q.runs), 1, "runs of the queued job");
	CHECK(pthread_equal(q.ran_on, b.ran_on), "queued job ran on another thread than the remaining worker");
	CHECK(!pthread_equal(q.ran_on, a.ran_on), "queued job ran on the surplus worker");
	CHECK_EQ(tracker_started(), 3, "threads ever started (2 workers + watcher)");
	pool_finish(p, POOL_DRAIN);
	gate_destroy(&g1);
	gate_destroy(&g2);
	ctx_destroy(&c);
}

/* ---- 3. resizes in a row act on the newest target */

static void
test_resize_follows_newest_target(void)
{
	struct ctx c;
	struct gate g1, g2, g3;
	struct tjob first[3], second[3], third[3];
	struct pool *p;
	struct pool_snapshot s;
	char *cause = NULL;
	int i, k;

	ctx_init(&c);
	gate_init(&g1);
	gate_init(&g2);
	gate_init(&g3);
	p = pool_make("newest", 3, 4, 8);
	jobs_init(first, 3, &c, &g1);
	jobs_init(second, 3, &c, &g2);
	jobs_init(third, 3, &c, &g3);

	/* Busy workers: 3 -> 1 -> 3 must neither start nor stop anything. */
	for (i = 0; i < 3; i++)
		submit_ok(p, &first[i]);
	latch_wait(&c.started, 3, "three jobs running");
	CHECK(pool_resize(p, 1, &cause) == 0, "resize to 1: %s", cause);
	CHECK(pool_resize(p, 3, &cause) == 0, "resize to 3: %s", cause);
	s = snap(p);
	CHECK_EQ(s.target, 3, "target");
	CHECK_EQ(s.workers, 3, "workers");
	CHECK_EQ(tracker_started(), 4, "threads started (3 workers + watcher, none new)");
	gate_open(&g1);
	latch_wait(&c.done, 3, "the first three jobs");

	/* The same three threads still serve: three blocking jobs start at once on them. */
	for (i = 0; i < 3; i++)
		submit_ok(p, &second[i]);
	latch_wait(&c.started, 6, "three more jobs running on the same workers");
	CHECK_EQ(latch_get(&tracker.exited), 0, "threads exited");
	for (i = 0; i < 3; i++) {
		bool seen = false;
		for (k = 0; k < 3; k++)
			seen |= pthread_equal(second[i].ran_on, first[k].ran_on);
		CHECK(seen, "job %d ran on a thread that did not exist before", i);
	}
	gate_open(&g2);
	latch_wait(&c.done, 6, "the second three jobs");

	/* Idle workers: shrink really lets two go, and growing brings two new ones. */
	CHECK(pool_resize(p, 1, &cause) == 0, "resize to 1: %s", cause);
	latch_wait(&tracker.exited, 2, "two idle surplus workers to exit");
	CHECK_EQ(snap(p).workers, 1, "workers after idle shrink");
	CHECK(pool_resize(p, 3, &cause) == 0, "resize to 3: %s", cause);
	CHECK_EQ(snap(p).workers, 3, "workers after growing again");
	CHECK_EQ(tracker_started(), 6, "threads started");
	/* 1 and 3 at once while idle: whatever left in between was replaced. */
	CHECK(pool_resize(p, 1, &cause) == 0 && pool_resize(p, 3, &cause) == 0, "%s", cause);
	s = snap(p);
	CHECK_EQ(s.target, 3, "target");
	CHECK_EQ(s.workers, 3, "workers after 3 -> 1 -> 3 while idle");
	for (i = 0; i < 3; i++)
		submit_ok(p, &third[i]);
	latch_wait(&c.started, 9, "three jobs running after the idle resizes");
	gate_open(&g3);
	latch_wait(&c.done, 9, "all jobs");
	pool_finish(p, POOL_DRAIN);
	gate_destroy(&g1);
	gate_destroy(&g2);
	gate_destroy(&g3);
	ctx_destroy(&c);
}

/* ---- 4. a full queue rejects at once */

static void
test_full_queue_rejects(void)
{
	struct ctx c;
	struct gate g;
	struct tjob j[4];
	struct pool *p;
	struct pool_snapshot s;

	ctx_init(&c);
	gate_init(&g);
	p = pool_make("full", 1, 1, 2);
	jobs_init(j, 4, &c, &g);

	submit_ok(p, &j[0]);
	latch_wait(&c.started, 1, "the busy worker");
	submit_ok(p, &j[1]);
	submit_ok(p, &j[2]);
	CHECK(pool_submit(p, &j[3].pj) == POOL_REJECTED_FULL, "submit past capacity not rejected as full");
	s = snap(p);
	CHECK_EQ(s.queued, 2, "queued");
	CHECK_EQ(s.accepted, 3, "accepted");
	CHECK_EQ(s.rejected_full, 1, "rejected_full");
	CHECK_EQ(s.rejected, 1, "rejected");
	CHECK(j[3].pj.where == POOL_JOB_NEW, "a rejected job is not the pool's");

	gate_open(&g);
	latch_wait(&c.done, 3, "the accepted jobs");
	pool_finish(p, POOL_DRAIN);
	CHECK_EQ(atomic_load(&j[3].runs), 0, "runs of the rejected job");
	CHECK_EQ(atomic_load(&j[3].dones), 0, "completions of the rejected job");
	gate_destroy(&g);
	ctx_destroy(&c);
}

/* ---- the room notification: once per arming, when a queue slot frees */

struct room_seen {
	struct latch calls;
	pthread_t last_on;
};

static void
room_count(struct pool *p, void *arg)
{
	struct room_seen *r = arg;

	r->last_on = pthread_self();
	latch_up(&r->calls);
}

static void
test_room_told_once_per_arming(void)
{
	struct ctx c;
	struct gate g;
	struct tjob a, b, d, e;
	struct room_seen r;
	struct pool_config cfg = {
		.name = "room", .size = 1, .limit = 1, .capacity = 1,
		.thread_start = tracked_start, .room = room_count, .room_arg = &r,
	};
	struct pool *p;
	char *cause = NULL;

	ctx_init(&c);
	gate_init(&g);
	latch_init(&r.calls);
	tracker_reset();
	CHECK((p = pool_create(&cfg, &cause)) != NULL, "pool_create: %s", cause ? cause : "?");
	job_init(&a, &c, 1, &g);
	job_init(&b, &c, 2, &g);
	job_init(&d, &c, 3, &g);
	job_init(&e, &c, 4, &g);

	submit_ok(p, &a);
	latch_wait(&c.started, 1, "the first job running");
	submit_ok(p, &b);
	CHECK(pool_submit(p, &d.pj) == POOL_REJECTED_FULL, "a full pool accepted");
	/* Full: arming does not fire, nor does it without arming when a slot frees. */
	pool_want_room(p);
	pool_want_room(p);
	CHECK_EQ(latch_get(&r.calls), 0, "told of room while the queue is full");

	/* The cancel of the queued job frees its slot: told once, on this thread. */
	CHECK(pool_cancel(p, &b.pj) == POOL_JOB_QUEUED, "cancel of the queued job");
	CHECK_EQ(latch_get(&r.calls), 1, "told of room by the cancel");
	CHECK(pthread_equal(r.last_on, pthread_self()), "told on another thread than the canceller");
	submit_ok(p, &d);
	CHECK(pool_submit(p, &e.pj) == POOL_REJECTED_FULL, "a full pool accepted");

	/* A worker taking the queued job frees its slot: told on the worker. */
	pool_want_room(p);
	gate_open(&g);
	latch_wait(&r.calls, 2, "the room told when the worker took the queued job");
	latch_wait(&c.done, 3, "the jobs");     /* ran_on is written by the jobs: read after */
	CHECK(pthread_equal(r.last_on, d.ran_on) || pthread_equal(r.last_on, a.ran_on),
	    "told on another thread than the worker");
	CHECK_EQ(latch_get(&r.calls), 2, "told again without an arming");

	/* Room already: arming tells at once, on the arming thread. */
	pool_want_room(p);
	CHECK_EQ(latch_get(&r.calls), 3, "told at once when there is room");
	CHECK(pthread_equal(r.last_on, pthread_self()), "an arming with room told elsewhere");

	/* A closed pool never tells. */
	submit_ok(p, &e);
	pool_finish(p, POOL_DRAIN);
	CHECK_EQ(latch_get(&r.calls), 3, "told of room after the close");
	latch_destroy(&r.calls);
	gate_destroy(&g);
	ctx_destroy(&c);
}

/* ---- elastic pools, pause, order, fair share, quotas, drop_oldest */

static struct pool *
pool_make_cfg(struct pool_config *cfg)
{
	struct pool *p;
	char *cause = NULL;

	cfg->thread_start = tracked_start;
	tracker_reset();
	p = pool_create(cfg, &cause);
	CHECK(p != NULL, "pool_create: %s", cause ? cause : "?");
	return p;
}

static void
test_elastic_grows_before_queueing(void)
{
	struct pool_config cfg = { .name = "elastic", .size = 1, .max_workers = 3, .limit = 4,
	    .capacity = 1 };
	struct ctx c;
	struct gate g;
	struct tjob j[4];
	struct pool *p;
	struct pool_snapshot s;

	ctx_init(&c);
	gate_init(&g);
	jobs_init(j, 4, &c, &g);
	p = pool_make_cfg(&cfg);
	submit_ok(p, &j[0]);
	latch_wait(&c.started, 1, "the first job on the one worker");
	/* no idle worker and room to grow: a worker is started for it before submit returns */
	submit_ok(p, &j[1]);
	s = snap(p);
	CHECK(s.workers == 2 && s.target == 2, "workers %u target %u after the 2nd", s.workers,
	    s.target);
	submit_ok(p, &j[2]);
	CHECK_EQ(snap(p).workers, 3, "workers after the 3rd");
	latch_wait(&c.started, 3, "three running at once: none waited in the queue");
	/* at max_workers: the next one queues */
	submit_ok(p, &j[3]);
	s = snap(p);
	CHECK(s.workers == 3 && s.queued == 1, "at max: workers %u queued %u", s.workers, s.queued);
	CHECK(s.min_workers == 1 && s.max_workers == 3, "bounds %u..%u", s.min_workers, s.max_workers);
	gate_open(&g);
	latch_wait(&c.done, 4, "every job");
	pool_finish(p, POOL_DRAIN);
	gate_destroy(&g);
	ctx_destroy(&c);
}

static void
test_keepalive_exit_racing_a_submit(void)
{
	struct pool_config cfg = { .name = "keepalive", .size = 1, .max_workers = 2, .limit = 2,
	    .capacity = 64, .keepalive_us = 2000 };
	enum { ROUNDS = 400 };
	struct ctx c;
	struct gate g;
	struct tjob two[2], *race;
	struct pool *p;
	unsigned started;

	ctx_init(&c);
	gate_init(&g);
	jobs_init(two, 2, &c, &g);
	p = pool_make_cfg(&cfg);
	/* grown to 2 by two blocked jobs; idle past keepalive, the one above min leaves */
	submit_ok(p, &two[0]);
	submit_ok(p, &two[1]);
	latch_wait(&c.started, 2, "two running");
	gate_open(&g);
	latch_wait(&c.done, 2, "both done");
	latch_wait(&tracker.exited, 1, "the worker above min_workers to leave after keepalive");
	CHECK(snap(p).workers == 1 && snap(p).target == 1, "back to 1: workers %u target %u",
	    snap(p).workers, snap(p).target);

	/*
	 * Submits land while the worker above the minimum is deciding to leave:
	 * pairs of jobs grow the pool, and each round waits for them while the
	 * keepalive (2 ms) ends some workers between rounds and races others.
	 * Every job runs exactly once, whoever takes it.
	 */
	CHECK((race = calloc(2 * ROUNDS, sizeof *race)) != NULL, "memory");
	jobs_init(race, 2 * ROUNDS, &c, NULL);
	for (unsigned i = 0; i < ROUNDS; i++) {
		submit_ok(p, &race[2 * i]);
		submit_ok(p, &race[2 * i + 1]);
		latch_wait(&c.done, 2 + 2 * (i + 1), "a round's two jobs");
		CHECK(snap(p).workers >= 1 && snap(p).workers <= 2, "workers %u", snap(p).workers);
		for (unsigned k = 0; k < i % 5; k++)
			sched_yield();
	}
	for (unsigned i = 0; i < 2 * ROUNDS; i++)
		CHECK(atomic_load(&race[i].runs) == 1 && atomic_load(&race[i].dones) == 1,
		    "job %u ran %u times, ended %u times", i, atomic_load(&race[i].runs),
		    atomic_load(&race[i].dones));
	/* idle again: every worker above one leaves; the watcher and one worker stay */
	started = tracker_started();
	latch_wait(&tracker.exited, started - 2, "the workers above min_workers to leave");
	CHECK_EQ(snap(p).workers, 1, "workers at the end");
	pool_finish(p, POOL_DRAIN);
	free(race);
	gate_destroy(&g);
	ctx_destroy(&c);
}

static void
test_grow_racing_a_resize_down(void)
{
	struct pool_config cfg = { .name = "growdown", .size = 1, .max_workers = 3, .limit = 3,
	    .capacity = 4 };
	struct ctx c;
	struct gate g, hold;
	struct tjob a, b;
	struct pool *p;
	char *cause = NULL;

	ctx_init(&c);
	gate_init(&g);
	gate_init(&hold);
	job_init(&a, &c, 1, &g);
	job_init(&b, &c, 2, NULL);
	p = pool_make_cfg(&cfg);
	submit_ok(p, &a);
	latch_wait(&c.started, 1, "a running");
	/* b grows the pool; the new thread is held before it reaches its decision point */
	tracker_hold(&hold);
	submit_ok(p, &b);
	latch_wait(&tracker.held, 1, "the grown thread at the hold");
	CHECK_EQ(snap(p).workers, 2, "workers while the new one is held");
	/* meanwhile the pool is resized down to 1: the new worker is surplus */
	CHECK(pool_resize_bounds(p, 1, 1, &cause) == 0, "resize: %s", cause);
	gate_open(&hold);
	latch_wait(&tracker.exited, 1, "the surplus new worker to leave");
	CHECK(atomic_load(&b.runs) == 0 && snap(p).queued == 1, "b waits for the one worker");
	gate_open(&g);
	latch_wait(&c.done, 2, "both jobs");
	CHECK(pthread_equal(b.ran_on, a.ran_on), "b ran on the remaining worker");
	CHECK(atomic_load(&b.runs) == 1, "b ran %u times", atomic_load(&b.runs));
	CHECK_EQ(snap(p).workers, 1, "workers");
	pool_finish(p, POOL_DRAIN);
	gate_destroy(&g);
	gate_destroy(&hold);
	ctx_destroy(&c);
}

struct warned {
	struct latch n;
	char last[256];
};

static void
warn_count(struct pool *p, const char *msg, void *arg)
{
	struct warned *w = arg;

	snprintf(w->last, sizeof w->last, "%s", msg);
	latch_up(&w->n);
}

static void
test_grow_that_cannot_start_a_thread(void)
{
	struct warned w;
	struct pool_config cfg = { .name = "nogrow", .size = 1, .max_workers = 2, .limit = 3,
	    .capacity = 8, .warn = warn_count, .warn_arg = &w };
	struct ctx c;
	struct gate g;
	struct tjob j[5];
	struct pool *p;
	char *cause = NULL;

	ctx_init(&c);
	gate_init(&g);
	latch_init(&w.n);
	jobs_init(j, 5, &c, &g);
	p = pool_make_cfg(&cfg);
	submit_ok(p, &j[0]);
	latch_wait(&c.started, 1, "the first job");
	/* the thread to grow for b cannot start: b is accepted and stays queued, said once */
	tracker_fail_in(1);
	submit_ok(p, &j[1]);
	CHECK(snap(p).workers == 1 && snap(p).queued == 1, "b queued on the one worker");
	CHECK_EQ(latch_get(&w.n), 1, "warnings after the first failure");
	CHECK_SAYS(w.last, "cannot start a worker");
	tracker_fail_in(1);
	submit_ok(p, &j[2]);
	CHECK_EQ(latch_get(&w.n), 1, "warnings after a second failure in a row (once per streak)");
	CHECK_EQ(snap(p).grow_failures, 2, "grow failures counted");
	/* the next start works: the pool grows, and the streak ends */
	submit_ok(p, &j[3]);
	CHECK_EQ(snap(p).workers, 2, "grown at the third try");
	latch_wait(&c.started, 2, "b on the new worker");
	/* a new streak is told again */
	tracker_fail_in(1);
	CHECK(pool_resize_bounds(p, 1, 3, &cause) == 0, "resize: %s", cause);
	CHECK_EQ(latch_get(&w.n), 2, "a new streak of failures is told");
	submit_ok(p, &j[4]);
	gate_open(&g);
	latch_wait(&c.done, 5, "every job, none lost to a failed start");
	for (int i = 0; i < 5; i++)
		CHECK_EQ(atomic_load(&j[i].runs), 1, "runs of a job");
	pool_finish(p, POOL_DRAIN);
	latch_destroy(&w.n);
	gate_destroy(&g);
	ctx_destroy(&c);
}

static void
test_pause_and_resume(void)
{
	struct pool_config cfg = { .name = "pause", .size = 2, .limit = 2, .capacity = 3,
	    .paused = true };
	struct ctx c;
	struct gate g;
	struct tjob j[4], run, after;
	struct pool *p;
	struct pool_snapshot s;

	ctx_init(&c);
	gate_init(&g);
	jobs_init(j, 4, &c, NULL);
	job_init(&run, &c, 10, &g);
	job_init(&after, &c, 11, NULL);
	p = pool_make_cfg(&cfg);
	for (int i = 0; i < 3; i++)
		submit_ok(p, &j[i]);
	/* paused: idle workers take nothing, so they give no room beyond the capacity */
	CHECK(pool_submit(p, &j[3].pj) == POOL_REJECTED_FULL, "a 4th into 3 slots while paused");
	s = snap(p);
	CHECK(s.paused && s.queued == 3 && s.busy == 0, "paused %d queued %u busy %u", s.paused,
	    s.queued, s.busy);
	CHECK(pool_set_paused(p, false), "it was paused");
	latch_wait(&c.done, 3, "the queued jobs after resume");
	/* a pause leaves a running job alone and holds the queued ones */
	submit_ok(p, &run);
	latch_wait(&c.started, 4, "the gated job running");
	CHECK(!pool_set_paused(p, true), "it was open");
	submit_ok(p, &after);
	gate_open(&g);
	latch_wait(&c.done, 4, "the running job ends while paused");
	CHECK(snap(p).queued == 1 && atomic_load(&after.runs) == 0, "the queued one waits");
	pool_set_paused(p, false);
	latch_wait(&c.done, 5, "the queued one after resume");
	/* a drain runs the queue even of a paused pool */
	pool_set_paused(p, true);
	job_init(&after, &c, 12, NULL);
	submit_ok(p, &after);
	pool_finish(p, POOL_DRAIN);
	CHECK_EQ(atomic_load(&after.runs), 1, "a paused pool's queued job ran in the drain");
	gate_destroy(&g);
	ctx_destroy(&c);
}

static void
test_priority_order(void)
{
	struct pool_config cfg = { .name = "prio", .size = 1, .limit = 1, .capacity = 16,
	    .paused = true };
	static const int prio[9] = { 0, 5, -3, 5, 0, -3, 1000, -1000, 5 };
	/* highest first, FIFO among equals: by index */
	static const unsigned want[9] = { 6, 1, 3, 8, 0, 4, 2, 5, 7 };
	struct ctx c;
	struct tjob j[9];
	struct pool *p;

	ctx_init(&c);
	jobs_init(j, 9, &c, NULL);
	p = pool_make_cfg(&cfg);
	for (int i = 0; i < 9; i++) {
		j[i].pj.priority = prio[i];
		submit_ok(p, &j[i]);
	}
	CHECK_EQ(j[8].pj.queued_ahead, 3, "ahead of the last 5: 1000 and two 5s");
	pool_set_paused(p, false);
	latch_wait(&c.done, 9, "every job");
	for (unsigned k = 0; k < 9; k++)
		CHECK(j[want[k]].start_seq == k + 1, "job %u (priority %d) started %u-th, want %u-th",
		    want[k], prio[want[k]], j[want[k]].start_seq, k + 1);
	pool_finish(p, POOL_DRAIN);
	ctx_destroy(&c);
}

static void
fair_case(bool fair, const unsigned *want)
{
	struct pool_config cfg = { .name = "fair", .size = 1, .limit = 1, .capacity = 16,
	    .paused = true, .no_fair = !fair };
	struct ctx c;
	struct tjob j[13];
	struct pool *p;

	ctx_init(&c);
	jobs_init(j, 13, &c, NULL);
	p = pool_make_cfg(&cfg);
	/* owner 1: ten jobs; owner 2: one; owner 3: two, all at one priority */
	for (int i = 0; i < 13; i++) {
		j[i].pj.owner = i < 10 ? 1 : i == 10 ? 2 : 3;
		submit_ok(p, &j[i]);
	}
	pool_set_paused(p, false);
	latch_wait(&c.done, 13, "every job");
	for (unsigned k = 0; k < 13; k++)
		CHECK(j[want[k]].start_seq == k + 1, "fair %d: job %u (owner %u) started %u-th, "
		    "want %u-th", fair, want[k], j[want[k]].pj.owner, j[want[k]].start_seq, k + 1);
	pool_finish(p, POOL_DRAIN);
	ctx_destroy(&c);
}

static void
test_fair_share_between_owners(void)
{
	/*
	 * Owners that never started go first, oldest head first (1, 2, 3); then
	 * the one whose last start is the oldest: 1, then 3, then 1's rest.
	 */
	static const unsigned fair[13] = { 0, 10, 11, 1, 12, 2, 3, 4, 5, 6, 7, 8, 9 };
	static const unsigned fifo[13] = { 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12 };

	fair_case(true, fair);
	fair_case(false, fifo);
}

static void
test_owner_quotas(void)
{
	struct pool_config qcfg = { .name = "quota", .size = 1, .limit = 1, .capacity = 16,
	    .paused = true, .max_queued_per_owner = 2 };
	struct pool_config rcfg = { .name = "running", .size = 3, .limit = 3, .capacity = 16,
	    .max_running_per_owner = 1 };
	struct ctx c;
	struct gate g;
	struct tjob j[4], r[4];
	struct pool *p;
	struct pool_snapshot s;

	ctx_init(&c);
	gate_init(&g);
	jobs_init(j, 4, &c, NULL);
	p = pool_make_cfg(&qcfg);
	j[0].pj.owner = j[1].pj.owner = j[2].pj.owner = 7;
	j[3].pj.owner = 8;
	submit_ok(p, &j[0]);
	submit_ok(p, &j[1]);
	CHECK(pool_submit(p, &j[2].pj) == POOL_REJECTED_QUOTA, "owner 7's third: quota");
	submit_ok(p, &j[3]);
	s = snap(p);
	CHECK(s.rejected_quota == 1 && s.rejected == 1 && s.accepted == 3, "counters");
	CHECK(pool_over_quota(p, 7) && !pool_over_quota(p, 8), "over quota asked");
	pool_set_paused(p, false);
	latch_wait(&c.done, 3, "the accepted ones");
	pool_finish(p, POOL_DRAIN);
	CHECK_EQ(atomic_load(&j[2].runs), 0, "the refused one never ran");

	/* at max_running_per_owner, an owner is passed over for the next */
	jobs_init(r, 4, &c, &g);
	r[0].pj.owner = r[1].pj.owner = r[2].pj.owner = 1;
	r[3].pj.owner = 2;
	p = pool_make_cfg(&rcfg);
	for (int i = 0; i < 4; i++)
		submit_ok(p, &r[i]);
	latch_wait(&c.started, 5, "owner 1's first and owner 2's");
	s = snap(p);
	CHECK(s.busy == 2 && s.queued == 2, "owner 1 kept at its cap: busy %u queued %u", s.busy,
	    s.queued);
	CHECK(atomic_load(&r[3].runs) == 1 && atomic_load(&r[1].runs) == 0, "who runs");
	/* a higher cap lets the next start at once */
	pool_set_owner_limits(p, 0, 2);
	latch_wait(&c.started, 6, "owner 1's second under the new cap");
	gate_open(&g);
	latch_wait(&c.done, 7, "every job");
	pool_finish(p, POOL_DRAIN);
	gate_destroy(&g);
	ctx_destroy(&c);
}

static void
test_drop_oldest_never_displaces_a_higher_priority(void)
{
	struct pool_config cfg = { .name = "drop", .size = 1, .limit = 1, .capacity = 2,
	    .drop_oldest = true };
	struct ctx c;
	struct gate g;
	struct tjob run, j[5];
	struct pool *p;
	struct pool_snapshot s;

	ctx_init(&c);
	gate_init(&g);
	job_init(&run, &c, 0, &g);
	jobs_init(j, 5, &c, NULL);
	p = pool_make_cfg(&cfg);
	submit_ok(p, &run);
	latch_wait(&c.started, 1, "the busy worker");
	j[0].pj.priority = 5;
	j[1].pj.priority = 5;
	j[2].pj.priority = 0;
	j[3].pj.priority = 5;
	j[4].pj.priority = 7;
	submit_ok(p, &j[0]);
	submit_ok(p, &j[1]);
	/* every queued one is above it: refused, nothing displaced */
	CHECK(pool_submit(p, &j[2].pj) == POOL_REJECTED_FULL, "a lower one displaced a higher");
	/* an equal one displaces the oldest of the lowest present: j[0] */
	submit_ok(p, &j[3]);
	latch_wait(&c.done, 1, "the displaced one's done");
	CHECK(atomic_load(&j[0].dones) == 1 && j[0].state == POOL_EXPIRED && j[0].pj.displaced &&
	    atomic_load(&j[0].runs) == 0, "j0 displaced: state %s", pool_state_name(j[0].state));
	/* a higher one displaces the oldest of the lowest present (5): j[1] */
	submit_ok(p, &j[4]);
	latch_wait(&c.done, 2, "the second displaced one");
	CHECK(j[1].pj.displaced && atomic_load(&j[3].dones) == 0, "j1 went, j3 stays");
	s = snap(p);
	CHECK(s.displaced == 2 && s.expired == 2 && s.queued == 2 && s.rejected_full == 1,
	    "displaced %llu expired %llu queued %u", (unsigned long long)s.displaced,
	    (unsigned long long)s.expired, s.queued);
	gate_open(&g);
	latch_wait(&c.done, 5, "every accepted job");
	CHECK(j[4].start_seq < j[3].start_seq, "7 before 5");
	pool_finish(p, POOL_DRAIN);
	gate_destroy(&g);
	ctx_destroy(&c);
}

/*
 * Found by the stress: a worker asleep beside a job it cannot start (its
 * owner at max_running_per_owner) in a closed pool must leave when that
 * job is cancelled and the queue is empty for good.
 */
static void
test_drain_wakes_workers_when_the_last_blocked_job_goes(void)
{
	struct pool_config cfg = { .name = "blocked", .size = 2, .limit = 2, .capacity = 4,
	    .max_running_per_owner = 1 };
	struct ctx c;
	struct gate g;
	struct tjob a, b;
	struct pool *p;

	ctx_init(&c);
	gate_init(&g);
	job_init(&a, &c, 1, &g);
	job_init(&b, &c, 2, NULL);
	a.pj.owner = b.pj.owner = 3;
	p = pool_make_cfg(&cfg);
	submit_ok(p, &a);
	latch_wait(&c.started, 1, "a running");
	submit_ok(p, &b);       /* its owner is at its cap: the other worker sleeps beside it */
	pool_close(p, POOL_DRAIN);
	while (snap(p).sleeping < 1)
		sched_yield();  /* asleep again after the close's wake-up, b still queued */
	CHECK(pool_cancel(p, &b.pj) == POOL_JOB_QUEUED, "b cancelled while queued");
	latch_wait(&tracker.exited, 2, "the watcher and the idle worker to leave the closed, empty pool");
	gate_open(&g);
	pool_finish(p, POOL_DRAIN);
	CHECK(b.state == POOL_CANCELLED && atomic_load(&b.runs) == 0, "b never ran");
	gate_destroy(&g);
	ctx_destroy(&c);
}

/* ---- 5. submitters, resizers and shutdowners all at once */

#define STRESS_SUBMITTERS 8

struct sjob {
	struct pool_job pj;
	atomic_uint runs;
	atomic_uint dones;
	atomic_bool cancel_found_queued;   /* pool_cancel answered POOL_JOB_QUEUED */
	atomic_bool cancel_found_running;  /* pool_cancel answered POOL_JOB_RUNNING */
	enum pool_verdict verdict;
	enum pool_state state;
	bool fails;
};

struct stress {
	struct pool *pool;
	struct sjob *jobs;
	unsigned total;
	unsigned per_submitter;
	enum pool_close_mode modes[2];
	pthread_barrier_t start;
	atomic_uint submitted;
	struct latch three_quarters;         /* three quarters of the submissions made */
	struct latch shut;          /* shutdowners returned */
	atomic_uint cancels_queued, cancels_running;
	atomic_uint resizes;
	struct sjob late[STRESS_SUBMITTERS]; /* one more per submitter, after shutdown */
};

static enum pool_state
sjob_work(struct pool_job *pj)
{
	struct sjob *j = (struct sjob *)pj;

	atomic_fetch_add(&j->runs, 1);
	if (pool_job_cancelled(pj))
		return POOL_CANCELLED;
	return j->fails ? POOL_FAILED : POOL_SUCCEEDED;
}

static void
sjob_done(struct pool_job *pj, enum pool_state state, uint64_t q, uint64_t r)
{
	struct sjob *j = (struct sjob *)pj;

	j->state = state;
	atomic_fetch_add(&j->dones, 1);
}

static void
sjob_init(struct sjob *j, unsigned k)
{
	memset(j, 0, sizeof *j);
	j->pj.work = sjob_work;
	j->pj.done = sjob_done;
	j->fails = k % 7 == 3;
	/* priorities and owners mixed in: the order is pool.c's, every fate still counted */
	j->pj.priority = (int)(k % 5) * 10 - 20;
	j->pj.owner = k % 13;
	atomic_init(&j->runs, 0);
	atomic_init(&j->dones, 0);
	atomic_init(&j->cancel_found_queued, false);
	atomic_init(&j->cancel_found_running, false);
	atomic_init(&j->pj.cancel_requested, false);
}

struct stress_arg {
	struct stress *st;
	unsigned index;
};

static void
stress_cancel(struct stress *st, struct sjob *j)
{
	switch (pool_cancel(st->pool, &j->pj)) {
	case POOL_JOB_QUEUED:
		atomic_store(&j->cancel_found_queued, true);
		atomic_fetch_add(&st->cancels_queued, 1);
		break;
	case POOL_JOB_RUNNING:
		atomic_store(&j->cancel_found_running, true);
		atomic_fetch_add(&st->cancels_running, 1);
		break;
	default:
		break;
	}
}

static void *
stress_submitter(void *arg)
{
	struct stress_arg *a = arg;
	struct stress *st = a->st;
	unsigned k, first = a->index * st->per_submitter;

	pthread_barrier_wait(&st->start);
	for (k = first; k < first + st->per_submitter; k++) {
		st->jobs[k].verdict = pool_submit(st->pool, &st->jobs[k].pj);
		/* Every 16th accepted job is cancelled at once: queued, running or done by now. */
		if (k % 16 == 5 && st->jobs[k].verdict == POOL_ACCEPTED)
			stress_cancel(st, &st->jobs[k]);
		if (atomic_fetch_add(&st->submitted, 1) + 1 == st->total * 3 / 4)
			latch_up(&st->three_quarters);
		/* Backs off so that the workers get the lock too and most jobs are taken. */
		if (st->jobs[k].verdict == POOL_REJECTED_FULL)
			sched_yield();
	}
	/* After both shutdowns returned, a submission can only be refused as closed. */
	latch_wait(&st->shut, 2, "both shutdowners");
	st->late[a->index].verdict = pool_submit(st->pool, &st->late[a->index].pj);
	return NULL;
}

static void *
stress_resizer(void *arg)
{
	struct stress_arg *a = arg;
	struct stress *st = a->st;
	unsigned seed = 12345 + a->index;
	char *cause = NULL;

	pthread_barrier_wait(&st->start);
	/* Until the pool closes (the shutdowners close it at three quarters). */
	for (unsigned round = 0;; round++) {
		unsigned r = (unsigned)rand_r(&seed), lo = 1 + r % 3, hi = lo + (r >> 4) % 4;
		/* now and then a pause, new per-owner caps, another order */
		if (round % 8 == 1)
			pool_set_paused(st->pool, true);
		else if (round % 8 == 2)
			pool_set_paused(st->pool, false);
		else if (round % 8 == 5)
			pool_set_owner_limits(st->pool, (r >> 8) % 2 ? 20 + (r >> 9) % 40 : 0,
			    (r >> 12) % 3);
		else if (round % 8 == 6)
			pool_set_fair(st->pool, (r >> 14) % 2);
		if ((round % 2 ? pool_resize(st->pool, 1 + r % 6, &cause) :
		    pool_resize_bounds(st->pool, lo, hi, &cause)) == 0) {
			atomic_fetch_add(&st->resizes, 1);
			/* Lets surplus workers reach their exit before the next target. */
			sched_yield();
			continue;
		}
		/* The only refusal expected here is the pool closing. */
		CHECK(snap(st->pool).closed, "resize failed on an open pool: %s", cause);
		free(cause);
		break;
	}
	return NULL;
}

static void *
stress_shutdowner(void *arg)
{
	struct stress_arg *a = arg;
	struct stress *st = a->st;
	char *cause = NULL;

	pthread_barrier_wait(&st->start);
	latch_wait(&st->three_quarters, 1, "three quarters of the submissions");
	CHECK(pool_shutdown(st->pool, st->modes[a->index], &cause) == 0, "pool_shutdown: %s", cause);
	CHECK_EQ(tracker_live(), 0, "threads alive when a shutdown returned");
	latch_up(&st->shut);
	return NULL;
}

static unsigned
stress_submissions(void)
{
	const char *env = getenv("TPD_STRESS_SUBMISSIONS");

	if (env != NULL && *env != '\0')
		return (unsigned)strtoul(env, NULL, 10);
#if defined(__SANITIZE_THREAD__)
	return 100000;  /* TSan makes every lock operation several times slower */
#else
	return 200000;
#endif
}

/*
 * One round: total submissions over 8 submitters (cancelling some of their
 * jobs), with 2 resizers and 2 shutdowners (closing at three quarters) at
 * the same time.
 */
static void
stress_round(unsigned total, enum pool_close_mode m0, enum pool_close_mode m1)
{
	struct stress st;
	struct stress_arg args[STRESS_SUBMITTERS + 4];
	pthread_t tids[STRESS_SUBMITTERS + 4];
	void *(*mains[STRESS_SUBMITTERS + 4])(void *);
	struct pool_snapshot s;
	uint64_t accepted = 0, full = 0, quota = 0, closed = 0, succeeded = 0, failed = 0, cancelled = 0;
	unsigned i, n = 0;
	bool now = m0 == POOL_NOW || m1 == POOL_NOW;

	memset(&st, 0, sizeof st);
	st.per_submitter = total / STRESS_SUBMITTERS;
	st.total = st.per_submitter * STRESS_SUBMITTERS;
	st.modes[0] = m0;
	st.modes[1] = m1;
	CHECK((st.jobs = calloc(st.total, sizeof *st.jobs)) != NULL, "out of memory");
	for (i = 0; i < st.total; i++)
		sjob_init(&st.jobs[i], i);
	for (i = 0; i < STRESS_SUBMITTERS; i++)
		sjob_init(&st.late[i], i);
	atomic_init(&st.submitted, 0);
	atomic_init(&st.cancels_queued, 0);
	atomic_init(&st.cancels_running, 0);
	atomic_init(&st.resizes, 0);
	latch_init(&st.three_quarters);
	latch_init(&st.shut);
	pthread_barrier_init(&st.start, NULL, STRESS_SUBMITTERS + 4);
	st.pool = pool_make("stress", 4, 6, 256);

	for (i = 0; i < STRESS_SUBMITTERS; i++, n++) {
		args[n] = (struct stress_arg){ &st, i };
		mains[n] = stress_submitter;
	}
	for (i = 0; i < 2; i++, n++) {
		args[n] = (struct stress_arg){ &st, i };
		mains[n] = stress_resizer;
	}
	for (i = 0; i < 2; i++, n++) {
		args[n] = (struct stress_arg){ &st, i };
		mains[n] = stress_shutdowner;
	}

	for (i = 0; i < n; i++)
		CHECK(pthread_create(&tids[i], NULL, mains[i], &args[i]) == 0, "pthread_create");
	for (i = 0; i < n; i++)
		pthread_join(tids[i], NULL);

	for (i = 0; i < st.total; i++) {
		struct sjob *j = &st.jobs[i];
		unsigned runs = atomic_load(&j->runs), dones = atomic_load(&j->dones);

		if (j->verdict != POOL_ACCEPTED) {
			CHECK(runs == 0 && dones == 0, "rejected job %u ran %u times, completed %u times",
			    i, runs, dones);
			if (j->verdict == POOL_REJECTED_FULL)
				full++;
			else if (j->verdict == POOL_REJECTED_QUOTA)
				quota++;
			else
				closed++;
			continue;
		}
		accepted++;
		CHECK(dones == 1, "accepted job %u completed %u times", i, dones);
		if (atomic_load(&j->cancel_found_queued))
			CHECK(j->state == POOL_CANCELLED && runs == 0,
			    "job %u cancelled while queued ended %s after %u runs", i,
			    pool_state_name(j->state), runs);
		if (j->state == POOL_CANCELLED) {
			/* Cancelled by its submitter (queued or running) or by shutdown now. */
			if (runs == 0)
				CHECK(now || atomic_load(&j->cancel_found_queued),
				    "job %u cancelled unrun, but nobody cancelled it while queued", i);
			else
				CHECK(runs == 1 && (now || atomic_load(&j->cancel_found_running)),
				    "job %u cancelled after %u runs without a cancel while running", i, runs);
			cancelled++;
			continue;
		}
		CHECK(runs == 1, "accepted job %u ran %u times", i, runs);
		CHECK(j->state == (j->fails ? POOL_FAILED : POOL_SUCCEEDED),
		    "job %u ended %s", i, pool_state_name(j->state));
		if (j->fails)
			failed++;
		else
			succeeded++;
	}
	for (i = 0; i < STRESS_SUBMITTERS; i++) {
		CHECK(st.late[i].verdict == POOL_REJECTED_CLOSED, "a submission after shutdown was not rejected as closed");
		CHECK(atomic_load(&st.late[i].runs) == 0 && atomic_load(&st.late[i].dones) == 0,
		    "a late job ran");
	}
	closed += STRESS_SUBMITTERS;

	s = snap(st.pool);
	CHECK_EQ(s.accepted, accepted, "pool accepted counter");
	CHECK_EQ(s.rejected_full, full, "pool rejected_full counter");
	CHECK_EQ(s.rejected_closed, closed, "pool rejected_closed counter");
	CHECK_EQ(s.rejected_quota, quota, "pool rejected_quota counter");
	CHECK_EQ(s.rejected, full + closed + quota, "pool rejected counter");
	CHECK_EQ(s.succeeded, succeeded, "pool succeeded counter");
	CHECK_EQ(s.failed, failed, "pool failed counter");
	CHECK_EQ(s.cancelled, cancelled, "pool cancelled counter");
	CHECK_EQ(s.expired + s.timed_out, 0, "expired and timed out");
	CHECK_EQ(s.workers + s.busy + s.queued, 0, "workers, busy and queued after shutdown");
	CHECK_EQ(tracker_live(), 0, "threads alive");
	CHECK(accepted > 0, "no submission was accepted");
	printf("#   %s+%s: %u submissions: %llu accepted (%llu succeeded, %llu failed, "
	    "%llu cancelled), %llu rejected full, %llu quota, %llu rejected closed; cancel found %u queued "
	    "and %u running; %u resizes, %u threads started\n",
	    m0 == POOL_NOW ? "now" : "drain", m1 == POOL_NOW ? "now" : "drain", st.total,
	    (unsigned long long)accepted, (unsigned long long)succeeded,
	    (unsigned long long)failed, (unsigned long long)cancelled,
	    (unsigned long long)full, (unsigned long long)quota, (unsigned long long)closed,
	    atomic_load(&st.cancels_queued), atomic_load(&st.cancels_running),
	    atomic_load(&st.resizes), tracker_started());

	pool_free(st.pool);
	pthread_barrier_destroy(&st.start);
	latch_destroy(&st.three_quarters);
	latch_destroy(&st.shut);
	free(st.jobs);
}

static void
test_stress_submit_resize_shutdown(void)
{
	unsigned total = stress_submissions();

	CHECK(total >= 2 * STRESS_SUBMITTERS, "TPD_STRESS_SUBMISSIONS is too small");
	stress_round(total / 2, POOL_DRAIN, POOL_DRAIN);
	stress_round(total / 2, POOL_DRAIN, POOL_NOW);
}

/* ---- 6. shrink, then shut down at once with jobs queued */

struct shutter {
	struct pool *pool;
	enum pool_close_mode mode;
	int rc;
	char *cause;
	struct latch returned;
};

static void *
shutter_main(void *arg)
{
	struct shutter *sh = arg;

	sh->rc = pool_shutdown(sh->pool, sh->mode, &sh->cause);
	latch_up(&sh->returned);
	return NULL;
}

static void
test_shrink_then_shutdown(void)
{
	struct ctx c;
	struct gate g;
	struct tjob busy[3], queued[5], late;
	struct shutter sh;
	struct pool *p;
	struct pool_snapshot s;
	pthread_t tid;
	char *cause = NULL;
	int i;

	ctx_init(&c);
	gate_init(&g);
	p = pool_make("drain", 3, 4, 8);
	jobs_init(busy, 3, &c, &g);
	jobs_init(queued, 5, &c, NULL);
	job_init(&late, &c, 99, NULL);

	for (i = 0; i < 3; i++)
		submit_ok(p, &busy[i]);
	latch_wait(&c.started, 3, "three busy workers");
	for (i = 0; i < 5; i++)
		submit_ok(p, &queued[i]);
	CHECK(pool_resize(p, 1, &cause) == 0, "resize to 1: %s", cause);

	/* Close first (what shutdown does first), so the checks below are not racing it. */
	pool_close(p, POOL_DRAIN);
	memset(&sh, 0, sizeof sh);
	sh.pool = p;
	sh.mode = POOL_DRAIN;
	latch_init(&sh.returned);
	CHECK(pthread_create(&tid, NULL, shutter_main, &sh) == 0, "pthread_create");

	CHECK(pool_submit(p, &late.pj) == POOL_REJECTED_CLOSED, "submit after close not rejected as closed");
	CHECK(pool_resize(p, 2, &cause) == -1, "resize after close succeeded");
	CHECK_SAYS(cause, "shutting down");
	free(cause);
	s = snap(p);
	CHECK(s.closed, "snapshot not closed");
	CHECK_EQ(s.queued, 5, "queued jobs kept by the drain");
	CHECK_EQ(latch_get(&sh.returned), 0, "shutdown returned while jobs were blocked");

	gate_open(&g);
	pthread_join(tid, NULL);
	CHECK(sh.rc == 0, "pool_shutdown: %s", sh.cause);
	CHECK_EQ(tracker_live(), 0, "threads alive after shutdown returned");
	CHECK_EQ(latch_get(&c.done), 8, "completions");
	for (i = 0; i < 5; i++) {
		CHECK_EQ(atomic_load(&queued[i].runs), 1, "runs of a queued job");
		CHECK(queued[i].state == POOL_SUCCEEDED, "queued job %d ended %s", i,
		    pool_state_name(queued[i].state));
		/* Only the one worker left after the shrink took jobs from the queue. */
		CHECK(pthread_equal(queued[i].ran_on, queued[0].ran_on),
		    "queued jobs ran on more than one worker after shrinking to 1");
	}
	CHECK_EQ(atomic_load(&late.runs) + atomic_load(&late.dones), 0, "runs and completions of the late job");
	s = snap(p);
	CHECK_EQ(s.workers, 0, "workers");
	CHECK_EQ(s.succeeded, 8, "succeeded");
	CHECK_EQ(s.rejected_closed, 1, "rejected_closed");
	pool_free(p);
	latch_destroy(&sh.returned);
	gate_destroy(&g);
	ctx_destroy(&c);
}

/* ---- 7. a failing job leaves its worker serving */

static void
test_failing_job_keeps_worker(void)
{
	struct ctx c;
	struct tjob j[4];
	struct pool *p;
	struct pool_snapshot s;
	int i;

	ctx_init(&c);
	p = pool_make("fail", 1, 1, 8);
	jobs_init(j, 4, &c, NULL);
	j[0].result = POOL_FAILED;
	j[1].result = (enum pool_state)99;  /* garbage from a buggy kind */
	j[2].result = POOL_EXPIRED;         /* not the work's to claim */
	for (i = 0; i < 4; i++)
		submit_ok(p, &j[i]);
	latch_wait(&c.done, 4, "four completions");
	for (i = 0; i < 3; i++)
		CHECK(j[i].state == POOL_FAILED, "job %d ended in state %d, not failed", i,
		    (int)j[i].state);
	CHECK(j[3].state == POOL_SUCCEEDED, "job after the failures ended %s",
	    pool_state_name(j[3].state));
	for (i = 1; i < 4; i++)
		CHECK(pthread_equal(j[i].ran_on, j[0].ran_on), "job %d ran on another worker", i);
	s = snap(p);
	CHECK_EQ(s.failed, 3, "failed");
	CHECK_EQ(s.succeeded, 1, "succeeded");
	CHECK_EQ(s.expired, 0, "expired");
	CHECK_EQ(s.workers, 1, "workers");
	CHECK_EQ(tracker_started(), 2, "threads started (no replacement worker)");
	pool_finish(p, POOL_DRAIN);
	ctx_destroy(&c);
}

/* ---- 8. a thread that cannot start */

static void
test_thread_start_failure(void)
{
	struct pool_config cfg = {
		.name = "inject", .size = 3, .limit = 8, .capacity = 4, .thread_start = tracked_start,
	};
	struct ctx c;
	struct gate g;
	struct tjob j[3];
	struct pool *p;
	struct pool_snapshot s;
	char *cause = NULL;

	/* Construction: the second worker fails; the first is joined. */
	tracker_reset();
	tracker_fail_in(2);
	CHECK(pool_create(&cfg, &cause) == NULL, "pool_create succeeded without its second thread");
	CHECK_SAYS(cause, "cannot start worker 2 of 3");
	free(cause);
	cause = NULL;
	CHECK_EQ(tracker_attempts(), 2, "start attempts");
	CHECK_EQ(tracker_started(), 1, "threads started");
	CHECK_EQ(tracker_live(), 0, "threads left alive by the failed construction");

	/* Construction: the watcher fails. */
	cfg.size = 1;
	tracker_reset();
	tracker_fail_in(2);
	CHECK(pool_create(&cfg, &cause) == NULL, "pool_create succeeded without its watcher");
	CHECK_SAYS(cause, "watcher");
	free(cause);
	cause = NULL;
	CHECK_EQ(tracker_live(), 0, "threads left alive by the failed construction");

	/* A grow from 1 to 4 whose second new thread fails: 2 workers stay and serve. */
	ctx_init(&c);
	gate_init(&g);
	p = pool_make("inject", 1, 8, 4);
	tracker_fail_in(2);
	CHECK(pool_resize(p, 4, &cause) == -1, "resize succeeded though a thread failed to start");
	CHECK_SAYS(cause, "started only 2 of 4");
	free(cause);
	cause = NULL;
	s = snap(p);
	CHECK_EQ(s.target, 2, "target after the partial grow");
	CHECK_EQ(s.workers, 2, "workers after the partial grow");
	CHECK_EQ(tracker_live(), 3, "threads alive (2 workers + watcher)");

	jobs_init(j, 3, &c, &g);
	submit_ok(p, &j[0]);
	submit_ok(p, &j[1]);
	latch_wait(&c.started, 2, "both surviving workers running a job");
	CHECK(!pthread_equal(j[0].ran_on, j[1].ran_on), "both jobs on one thread");

	/* The fault is gone: the next grow works. */
	CHECK(pool_resize(p, 3, &cause) == 0, "resize to 3: %s", cause);
	submit_ok(p, &j[2]);
	latch_wait(&c.started, 3, "the third worker running a job");
	gate_open(&g);
	latch_wait(&c.done, 3, "all jobs");
	pool_finish(p, POOL_DRAIN);
	gate_destroy(&g);
	ctx_destroy(&c);
}

/* ---- 9. shutdown now */

static void
test_shutdown_now(void)
{
	struct ctx c;
	struct gate g, stubborn_gate;
	struct tjob running[2], stubborn, queued[4];
	struct latch cancel_seen;
	struct shutter sh;
	struct pool *p;
	struct pool_snapshot s;
	pthread_t tid;
	char *cause = NULL;
	int i;

	ctx_init(&c);
	gate_init(&g);
	gate_init(&stubborn_gate);
	latch_init(&cancel_seen);
	p = pool_make("now", 3, 3, 8);
	jobs_init(running, 2, &c, &g);
	job_init(&stubborn, &c, 9, &stubborn_gate);
	stubborn.watch_cancel = false;      /* finishes on its own, later */
	stubborn.cancel_seen = &cancel_seen;
	jobs_init(queued, 4, &c, &g);

	submit_ok(p, &running[0]);
	submit_ok(p, &running[1]);
	submit_ok(p, &stubborn);
	latch_wait(&c.started, 3, "three jobs running");
	for (i = 0; i < 4; i++)
		submit_ok(p, &queued[i]);

	memset(&sh, 0, sizeof sh);
	sh.pool = p;
	sh.mode = POOL_NOW;
	latch_init(&sh.returned);
	CHECK(pthread_create(&tid, NULL, shutter_main, &sh) == 0, "pthread_create");

	/* Cancelled running jobs end at once; the stubborn one keeps its worker. */
	latch_wait(&cancel_seen, 1, "the stubborn job to be asked to cancel");
	latch_wait(&c.done, 6, "queued and cooperative running jobs to complete");
	CHECK_EQ(atomic_load(&stubborn.dones), 0, "stubborn job's completions before it returned");
	CHECK_EQ(latch_get(&sh.returned), 0, "shutdown returned while a job was running");
	gate_open(&stubborn_gate);
	pthread_join(tid, NULL);
	CHECK(sh.rc == 0, "pool_shutdown: %s", sh.cause);
	CHECK_EQ(tracker_live(), 0, "threads alive");

	for (i = 0; i < 2; i++) {
		CHECK(running[i].state == POOL_CANCELLED, "running job %d ended %s", i,
		    pool_state_name(running[i].state));
		CHECK(pool_job_cancelled(&running[i].pj), "cancel flag of running job %d", i);
		CHECK_EQ(atomic_load(&running[i].dones), 1, "completions of a running job");
	}
	CHECK(stubborn.state == POOL_SUCCEEDED, "stubborn job ended %s", pool_state_name(stubborn.state));
	CHECK_EQ(atomic_load(&stubborn.dones), 1, "completions of the stubborn job");
	for (i = 0; i < 4; i++) {
		CHECK(queued[i].state == POOL_CANCELLED, "queued job %d ended %s", i,
		    pool_state_name(queued[i].state));
		CHECK_EQ(atomic_load(&queued[i].runs), 0, "runs of a queued job");
		CHECK_EQ(atomic_load(&queued[i].dones), 1, "completions of a queued job");
		CHECK_EQ(queued[i].run_us, 0, "run time of a job that never ran");
		CHECK(pthread_equal(queued[i].done_on, tid), "queued job's done not on the shutdown thread");
	}
	s = snap(p);
	CHECK_EQ(s.cancelled, 6, "cancelled");
	CHECK_EQ(s.succeeded, 1, "succeeded");
	CHECK_EQ(s.workers + s.queued + s.busy, 0, "workers, queued and busy");
	/* A second shutdown finds nothing to do and returns at once. */
	CHECK(pool_shutdown(p, POOL_NOW, &cause) == 0, "second shutdown: %s", cause);
	CHECK_EQ(latch_get(&c.done), 7, "completions (exactly one each)");
	pool_free(p);
	latch_destroy(&sh.returned);
	latch_destroy(&cancel_seen);
	gate_destroy(&g);
	gate_destroy(&stubborn_gate);
	ctx_destroy(&c);
}

/* A drain turned into now: what is still queued is cancelled then. */
static void
test_drain_upgraded_to_now(void)
{
	struct ctx c;
	struct gate g;
	struct tjob running, queued[3];
	struct pool *p;
	int i;

	ctx_init(&c);
	gate_init(&g);
	p = pool_make("upgrade", 1, 1, 8);
	job_init(&running, &c, 0, &g);
	jobs_init(queued, 3, &c, NULL);
	submit_ok(p, &running);
	latch_wait(&c.started, 1, "the running job");
	for (i = 0; i < 3; i++)
		submit_ok(p, &queued[i]);
	pool_close(p, POOL_DRAIN);
	CHECK_EQ(snap(p).queued, 3, "queued after a drain close");
	CHECK_EQ(latch_get(&c.done), 0, "completions after a drain close");
	pool_finish(p, POOL_NOW);
	CHECK(running.state == POOL_CANCELLED, "running job ended %s", pool_state_name(running.state));
	for (i = 0; i < 3; i++) {
		CHECK(queued[i].state == POOL_CANCELLED, "queued job %d ended %s", i,
		    pool_state_name(queued[i].state));
		CHECK_EQ(atomic_load(&queued[i].runs), 0, "runs of a queued job");
	}
	gate_destroy(&g);
	ctx_destroy(&c);
}

/* ---- 10. queue deadline */

static void
test_queue_deadline_expires(void)
{
	struct ctx c;
	struct gate g;
	struct tjob blocker, late, plain, past;
	struct pool *p;
	struct pool_snapshot s;
	uint64_t t0;

	ctx_init(&c);
	gate_init(&g);
	p = pool_make("deadline", 1, 1, 4);
	job_init(&blocker, &c, 0, &g);
	job_init(&late, &c, 1, NULL);
	job_init(&plain, &c, 2, NULL);
	job_init(&past, &c, 3, NULL);

	submit_ok(p, &blocker);
	latch_wait(&c.started, 1, "the long job");
	t0 = clock_now_us();
	late.pj.queue_deadline_us = t0 + 50000;
	submit_ok(p, &late);
	submit_ok(p, &plain);

	/* The only worker stays blocked: the expiry must come without it. */
	latch_wait(&c.done, 1, "the queued job to expire");
	CHECK_EQ(atomic_load(&late.dones), 1, "completions of the expiring job");
	CHECK(late.state == POOL_EXPIRED, "job ended %s, not expired", pool_state_name(late.state));
	CHECK(late.pj.enqueued_us + late.queued_us >= late.pj.queue_deadline_us,
	    "queued %llu us, ending before its deadline", (unsigned long long)late.queued_us);
	CHECK(clock_now_us() >= late.pj.queue_deadline_us, "expired before its deadline");
	CHECK_EQ(late.run_us, 0, "run time of an expired job");
	CHECK(!pthread_equal(late.done_on, blocker.ran_on), "expiry delivered by the busy worker");
	CHECK_EQ(atomic_load(&blocker.dones), 0, "long job completed before the expiry");
	s = snap(p);
	CHECK_EQ(s.expired, 1, "expired");
	CHECK_EQ(s.queued, 1, "queued (the job without a deadline)");

	gate_open(&g);
	latch_wait(&c.done, 3, "the long job and the job without a deadline");
	CHECK(plain.state == POOL_SUCCEEDED, "job without a deadline ended %s",
	    pool_state_name(plain.state));
	CHECK_EQ(atomic_load(&late.runs), 0, "runs of the expired job");

	/* A deadline already past when submitted: expired, never run (worker or watcher). */
	past.pj.queue_deadline_us = 1;
	submit_ok(p, &past);
	latch_wait(&c.done, 4, "the already-late job");
	CHECK(past.state == POOL_EXPIRED, "already-late job ended %s", pool_state_name(past.state));
	CHECK_EQ(atomic_load(&past.runs), 0, "runs of the already-late job");
	CHECK_EQ(snap(p).expired, 2, "expired");
	pool_finish(p, POOL_DRAIN);
	gate_destroy(&g);
	ctx_destroy(&c);
}

/* Deadlines keep firing while a drain waits for a long job. */
static void
test_deadline_during_drain(void)
{
	struct ctx c;
	struct gate g;
	struct tjob blocker, late;
	struct shutter sh;
	struct pool *p;
	pthread_t tid;

	ctx_init(&c);
	gate_init(&g);
	p = pool_make("drain-deadline", 1, 1, 4);
	job_init(&blocker, &c, 0, &g);
	job_init(&late, &c, 1, NULL);
	submit_ok(p, &blocker);
	latch_wait(&c.started, 1, "the long job");
	late.pj.queue_deadline_us = clock_now_us() + 20000;
	submit_ok(p, &late);

	memset(&sh, 0, sizeof sh);
	sh.pool = p;
	sh.mode = POOL_DRAIN;
	latch_init(&sh.returned);
	CHECK(pthread_create(&tid, NULL, shutter_main, &sh) == 0, "pthread_create");
	latch_wait(&c.done, 1, "the queued job to expire during the drain");
	CHECK(late.state == POOL_EXPIRED, "job ended %s", pool_state_name(late.state));
	CHECK_EQ(atomic_load(&blocker.dones), 0, "long job completions");
	gate_open(&g);
	pthread_join(tid, NULL);
	CHECK(sh.rc == 0, "pool_shutdown: %s", sh.cause);
	CHECK_EQ(tracker_live(), 0, "threads alive");
	pool_free(p);
	latch_destroy(&sh.returned);
	gate_destroy(&g);
	ctx_destroy(&c);
}

/* ---- admission: W idle workers + Q queue slots */

static void
test_admission_idle_plus_capacity(void)
{
	struct ctx c;
	struct gate g;
	struct tjob j[12];
	struct pool *p;
	struct pool_snapshot s;
	char *cause = NULL;
	int i;

	ctx_init(&c);
	gate_init(&g);
	p = pool_make("admit", 3, 4, 4);
	jobs_init(j, 12, &c, &g);

	/* One burst: 3 idle workers + 4 slots, whether or not workers woke yet. */
	for (i = 0; i < 7; i++)
		submit_ok(p, &j[i]);
	CHECK(pool_submit(p, &j[7].pj) == POOL_REJECTED_FULL, "8th submission of a 3+4 pool not rejected");
	latch_wait(&c.started, 3, "three workers busy");
	s = snap(p);
	CHECK_EQ(s.busy, 3, "busy");
	CHECK_EQ(s.idle, 0, "idle");
	CHECK_EQ(s.queued, 4, "queued");
	CHECK(pool_submit(p, &j[8].pj) == POOL_REJECTED_FULL, "submission to a full pool not rejected");

	/* A grown worker takes one queued job, freeing exactly one slot. */
	CHECK(pool_resize(p, 4, &cause) == 0, "resize to 4: %s", cause);
	latch_wait(&c.started, 4, "the new worker busy");
	submit_ok(p, &j[9]);
	CHECK(pool_submit(p, &j[10].pj) == POOL_REJECTED_FULL, "admission past the new slot");
	CHECK_EQ(snap(p).rejected_full, 3, "rejected_full");

	gate_open(&g);
	latch_wait(&c.done, 8, "the accepted jobs");
	pool_finish(p, POOL_DRAIN);
	gate_destroy(&g);
	ctx_destroy(&c);

	/* Idle workers above the target are leaving and do not count. */
	ctx_init(&c);
	gate_init(&g);
	p = pool_make("admit-shrunk", 3, 4, 2);
	jobs_init(j, 12, &c, &g);
	CHECK(pool_resize(p, 1, &cause) == 0, "resize to 1: %s", cause);
	for (i = 0; i < 3; i++)
		submit_ok(p, &j[i]);
	CHECK(pool_submit(p, &j[3].pj) == POOL_REJECTED_FULL, "4th submission to a 1+2 pool not rejected");
	gate_open(&g);
	latch_wait(&c.done, 3, "the accepted jobs");
	pool_finish(p, POOL_DRAIN);
	gate_destroy(&g);
	ctx_destroy(&c);
}

/* ---- a worker cannot wait for its own pool */

static struct pool *other_pool;

static void
action_shutdown_own(struct tjob *t)
{
	t->action_rc = pool_shutdown(t->pool, POOL_DRAIN, &t->action_cause);
}

static void
action_shutdown_other(struct tjob *t)
{
	t->action_rc = pool_shutdown(other_pool, POOL_DRAIN, &t->action_cause);
}

static void
action_close_own(struct tjob *t)
{
	pool_close(t->pool, POOL_DRAIN);
}

static void
test_worker_cannot_shutdown_own_pool(void)
{
	struct ctx c;
	struct tjob self, after, expiring, other, closer, refused;
	struct gate g;
	struct pool *p;
	struct pool_config cfg = {
		.name = "other", .size = 1, .limit = 1, .capacity = 1, .thread_start = tracked_start,
	};
	char *cause = NULL;

	ctx_init(&c);
	gate_init(&g);
	p = pool_make("self", 1, 2, 4);
	job_init(&self, &c, 0, NULL);
	self.pool = p;
	self.action = action_shutdown_own;
	submit_ok(p, &self);
	latch_wait(&c.done, 1, "the job that tries to shut down its pool");
	CHECK(self.action_rc == -1, "a worker's pool_shutdown of its own pool returned %d", self.action_rc);
	CHECK_SAYS(self.action_cause, "cannot wait for its own pool");
	free(self.action_cause);
	/* Nothing changed: still open and serving. */
	CHECK(!snap(p).closed, "refused shutdown closed the pool");
	job_init(&after, &c, 1, NULL);
	submit_ok(p, &after);
	latch_wait(&c.done, 2, "a job after the refused shutdown");

	/* The deadline watcher delivers expiries; it cannot wait for its pool either. */
	job_init(&expiring, &c, 2, NULL);
	job_init(&other, &c, 3, &g);
	submit_ok(p, &other);
	latch_wait(&c.started, 3, "the blocking job");
	expiring.pool = p;
	expiring.in_done = action_shutdown_own;
	expiring.pj.queue_deadline_us = 1;
	submit_ok(p, &expiring);
	latch_wait(&c.done, 3, "the expiry");
	CHECK(expiring.state == POOL_EXPIRED, "ended %s", pool_state_name(expiring.state));
	CHECK(expiring.action_rc == -1, "the watcher's pool_shutdown of its own pool returned %d",
	    expiring.action_rc);
	free(expiring.action_cause);
	gate_open(&g);
	latch_wait(&c.done, 4, "the blocking job");

	/* A worker may shut down another pool, and may close its own without waiting. */
	other_pool = pool_create(&cfg, &cause);
	CHECK(other_pool != NULL, "pool_create: %s", cause);
	job_init(&other, &c, 4, NULL);
	other.action = action_shutdown_other;
	submit_ok(p, &other);
	latch_wait(&c.done, 5, "the job that shuts down another pool");
	CHECK(other.action_rc == 0, "shutting down another pool: %s", other.action_cause);
	CHECK(snap(other_pool).closed && snap(other_pool).workers == 0, "the other pool is not down");
	pool_free(other_pool);

	job_init(&closer, &c, 5, NULL);
	closer.pool = p;
	closer.action = action_close_own;
	submit_ok(p, &closer);
	latch_wait(&c.done, 6, "the job that closes its pool");
	job_init(&refused, &c, 6, NULL);
	CHECK(pool_submit(p, &refused.pj) == POOL_REJECTED_CLOSED, "submission after a worker closed the pool");
	pool_finish(p, POOL_DRAIN);
	gate_destroy(&g);
	ctx_destroy(&c);
}

/* ---- snapshot, oldest_queued, times, limits */

static void
pass_ms(unsigned ms)
{
	/* Lets time pass for a duration check; no thread waits on it. */
	struct timespec ts = { 0, (long)ms * 1000000 };

	while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
		;
}

static void
test_snapshot_and_times(void)
{
	struct ctx c;
	struct gate g;
	struct tjob j[6];
	struct pool *p;
	struct pool_snapshot s;
	uint64_t t0, t1;
	char *cause = NULL;

	ctx_init(&c);
	gate_init(&g);
	p = pool_make("snap", 2, 5, 3);
	jobs_init(j, 6, &c, &g);

	s = snap(p);
	CHECK(s.target == 2 && s.workers == 2 && s.busy == 0 && s.idle == 2 && s.queued == 0 &&
	    s.capacity == 3 && s.limit == 5 && !s.closed, "fresh snapshot: target %u workers %u "
	    "busy %u idle %u queued %u capacity %u limit %u", s.target, s.workers, s.busy,
	    s.idle, s.queued, s.capacity, s.limit);
	CHECK(s.accepted + s.rejected + s.succeeded + s.failed + s.cancelled + s.expired +
	    s.timed_out + s.oldest_queued_us == 0, "fresh counters not zero");

	submit_ok(p, &j[0]);
	submit_ok(p, &j[1]);
	latch_wait(&c.started, 2, "two busy workers");
	t0 = clock_now_us();
	submit_ok(p, &j[2]);
	submit_ok(p, &j[3]);
	pass_ms(20);
	s = snap(p);
	t1 = clock_now_us();
	CHECK(s.busy == 2 && s.idle == 0 && s.queued == 2, "busy %u idle %u queued %u",
	    s.busy, s.idle, s.queued);
	CHECK(s.oldest_queued_us >= 20000 && s.oldest_queued_us <= t1 - t0,
	    "oldest_queued_us %llu outside [20000, %llu]", (unsigned long long)s.oldest_queued_us,
	    (unsigned long long)(t1 - t0));

	/* Capacity and limit changes. */
	submit_ok(p, &j[4]);
	CHECK(pool_submit(p, &j[5].pj) == POOL_REJECTED_FULL, "submission past capacity 3");
	CHECK(pool_set_capacity(p, 0, &cause) == -1, "capacity 0 accepted");
	CHECK_SAYS(cause, "capacity");
	free(cause);
	CHECK(pool_set_capacity(p, 4, &cause) == 0, "capacity 4: %s", cause);
	submit_ok(p, &j[5]);
	CHECK(pool_set_limit(p, 1, &cause) == -1, "limit below the target accepted");
	CHECK_SAYS(cause, "below the current max_workers");
	free(cause);
	CHECK(pool_resize(p, 6, &cause) == -1, "resize past the limit accepted");
	CHECK_SAYS(cause, "out of range 1..5");
	free(cause);
	CHECK(pool_set_limit(p, 6, &cause) == 0, "limit 6: %s", cause);
	s = snap(p);
	CHECK(s.capacity == 4 && s.limit == 6 && s.queued == 4, "capacity %u limit %u queued %u",
	    s.capacity, s.limit, s.queued);
	CHECK_EQ(s.accepted, 6, "accepted");
	CHECK_EQ(s.rejected, 1, "rejected");

	/* Cancel one queued job, then let the rest run. */
	CHECK(pool_cancel(p, &j[3].pj) == POOL_JOB_QUEUED, "cancel of a queued job");
	CHECK_EQ(snap(p).cancelled, 1, "cancelled");
	gate_open(&g);
	latch_wait(&c.done, 6, "all jobs");
	s = snap(p);
	CHECK(s.succeeded == 5 && s.cancelled == 1 && s.busy == 0 && s.queued == 0 &&
	    s.oldest_queued_us == 0, "succeeded %llu cancelled %llu busy %u queued %u oldest %llu",
	    (unsigned long long)s.succeeded, (unsigned long long)s.cancelled, s.busy, s.queued,
	    (unsigned long long)s.oldest_queued_us);
	/* The first jobs ran while the queued ones waited: run vs queued time. */
	CHECK(j[0].run_us >= 20000 && j[0].queued_us < j[0].run_us, "running job: queued %llu run %llu",
	    (unsigned long long)j[0].queued_us, (unsigned long long)j[0].run_us);
	CHECK(j[2].queued_us >= 20000, "queued job: queued %llu", (unsigned long long)j[2].queued_us);
	pool_finish(p, POOL_DRAIN);
	gate_destroy(&g);
	ctx_destroy(&c);
}

/* ---- cancel */

static void
test_cancel(void)
{
	struct ctx c;
	struct gate g, g2;
	struct tjob running, queued, stubborn, unsent;
	struct pool *p;

	ctx_init(&c);
	gate_init(&g);
	gate_init(&g2);
	p = pool_make("cancel", 1, 1, 4);
	job_init(&running, &c, 0, &g);
	job_init(&queued, &c, 1, &g);
	job_init(&stubborn, &c, 2, &g2);
	stubborn.watch_cancel = false;
	job_init(&unsent, &c, 3, NULL);

	CHECK(pool_cancel(p, &unsent.pj) == POOL_JOB_NEW, "cancel of a job never submitted");
	CHECK_EQ(atomic_load(&unsent.dones), 0, "completions of a job never submitted");

	submit_ok(p, &running);
	latch_wait(&c.started, 1, "the running job");
	submit_ok(p, &queued);
	/* Queued: removed and completed on this thread before cancel returns. */
	CHECK(pool_cancel(p, &queued.pj) == POOL_JOB_QUEUED, "cancel of a queued job");
	CHECK_EQ(atomic_load(&queued.dones), 1, "completions right after cancel");
	CHECK(queued.state == POOL_CANCELLED && pthread_equal(queued.done_on, pthread_self()),
	    "queued job ended %s", pool_state_name(queued.state));
	CHECK(pool_cancel(p, &queued.pj) == POOL_JOB_FINISHED, "second cancel of a queued job");
	CHECK_EQ(snap(p).queued, 0, "queued");

	/* Running: the flag is set and the job leaves on its own. */
	CHECK(pool_cancel(p, &running.pj) == POOL_JOB_RUNNING, "cancel of a running job");
	latch_wait(&c.done, 2, "the cancelled running job");
	CHECK(running.state == POOL_CANCELLED, "running job ended %s", pool_state_name(running.state));
	CHECK(pool_cancel(p, &running.pj) == POOL_JOB_FINISHED, "cancel of a finished job");

	/* A running job that ignores the flag ends as it ends, once. */
	submit_ok(p, &stubborn);
	latch_wait(&c.started, 2, "the stubborn job");
	CHECK(pool_cancel(p, &stubborn.pj) == POOL_JOB_RUNNING, "cancel of the stubborn job");
	CHECK(pool_job_cancelled(&stubborn.pj), "cancel flag not set");
	gate_open(&g2);
	latch_wait(&c.done, 3, "the stubborn job");
	CHECK(stubborn.state == POOL_SUCCEEDED, "stubborn job ended %s", pool_state_name(stubborn.state));
	CHECK_EQ(atomic_load(&queued.dones) + atomic_load(&running.dones) + atomic_load(&stubborn.dones),
	    3, "completions");
	CHECK_EQ(snap(p).cancelled, 2, "cancelled");
	pool_finish(p, POOL_DRAIN);
	gate_destroy(&g);
	gate_destroy(&g2);
	ctx_destroy(&c);
}

/* ---- bad arguments get clear errors */

static void
test_bad_arguments(void)
{
	struct pool_config cfg = {
		.name = "bad", .size = 0, .limit = 4, .capacity = 4, .thread_start = tracked_start,
	};
	struct pool *p;
	char *cause = NULL;

	tracker_reset();
	CHECK(pool_create(&cfg, &cause) == NULL, "size 0 accepted");
	CHECK_SAYS(cause, "size 0 is out of range 1..4");
	free(cause);
	cfg.size = 5;
	CHECK(pool_create(&cfg, &cause) == NULL, "size above the limit accepted");
	CHECK_SAYS(cause, "size 5 is out of range 1..4");
	free(cause);
	cfg.size = 1;
	cfg.capacity = 0;
	CHECK(pool_create(&cfg, &cause) == NULL, "capacity 0 accepted");
	CHECK_SAYS(cause, "capacity must be at least 1");
	free(cause);
	cfg.capacity = 1;
	cfg.limit = 0;
	CHECK(pool_create(&cfg, &cause) == NULL, "limit 0 accepted");
	CHECK_SAYS(cause, "limit must be at least 1");
	free(cause);
	cfg.name = NULL;
	cfg.limit = 1;
	CHECK(pool_create(&cfg, &cause) == NULL, "a pool without a name accepted");
	free(cause);
	CHECK_EQ(tracker_attempts(), 0, "threads attempted for bad configurations");

	p = pool_make("bad", 1, 4, 1);
	CHECK(strcmp(pool_name(p), "bad") == 0, "pool_name is %s", pool_name(p));
	CHECK(pool_resize(p, 0, &cause) == -1, "resize to 0 accepted");
	CHECK_SAYS(cause, "size 0 is out of range 1..4 for pool bad");
	free(cause);
	CHECK(pool_resize(p, 5, &cause) == -1, "resize to 5 accepted");
	free(cause);
	CHECK_EQ(snap(p).target, 1, "target after refused resizes");
	CHECK(strcmp(pool_state_name(POOL_SUCCEEDED), "succeeded") == 0 &&
	    strcmp(pool_state_name(POOL_FAILED), "failed") == 0 &&
	    strcmp(pool_state_name(POOL_TIMED_OUT), "timed_out") == 0 &&
	    strcmp(pool_state_name(POOL_CANCELLED), "cancelled") == 0 &&
	    strcmp(pool_state_name(POOL_EXPIRED), "expired") == 0, "state names");
	pool_finish(p, POOL_DRAIN);
}

/* ---- pools side by side */

static void
test_pools_are_independent(void)
{
	struct pool_config cfg = {
		.name = "b", .size = 1, .limit = 2, .capacity = 2, .thread_start = tracked_start,
	};
	struct ctx c;
	struct gate g;
	struct tjob blocker, other;
	struct pool *a, *b;
	char *cause = NULL;

	ctx_init(&c);
	gate_init(&g);
	a = pool_make("a", 1, 2, 2);
	CHECK((b = pool_create(&cfg, &cause)) != NULL, "pool_create: %s", cause);
	job_init(&blocker, &c, 0, &g);
	job_init(&other, &c, 1, NULL);
	submit_ok(a, &blocker);
	latch_wait(&c.started, 1, "pool a's worker busy");
	submit_ok(b, &other);
	latch_wait(&c.done, 1, "pool b's job while pool a is blocked");
	/* Shutting b down neither waits for nor touches a. */
	CHECK(pool_shutdown(b, POOL_NOW, &cause) == 0, "shutdown b: %s", cause);
	pool_free(b);
	CHECK(!snap(a).closed && snap(a).busy == 1, "pool a changed by pool b's shutdown");
	CHECK(!pool_job_cancelled(&blocker.pj), "pool a's job cancelled by pool b's shutdown");
	gate_open(&g);
	latch_wait(&c.done, 2, "pool a's job");
	CHECK(blocker.state == POOL_SUCCEEDED, "ended %s", pool_state_name(blocker.state));
	pool_finish(a, POOL_DRAIN);
	gate_destroy(&g);
	ctx_destroy(&c);
}

/* ---- timings: histograms, the recent windows, and what a pool observes */

static void
test_histogram(void)
{
	/* the bounds metrics.c gives Prometheus, from 1 ms to 1 h */
	static const uint64_t prom[] = { 1000, 2500, 5000, 10000, 25000, 50000, 100000,
	    250000, 500000, 1000000, 2500000, 5000000, 10000000, 30000000, 60000000,
	    120000000, 300000000, 600000000, 1800000000, 3600000000 };
	struct pool_hist h, m;
	uint64_t v;

	for (size_t i = 1; i < POOL_HIST_NBOUNDS; i++)
		CHECK(pool_hist_bounds_us[i - 1] < pool_hist_bounds_us[i], "bounds %zu, %zu "
		    "not increasing", i - 1, i);
	CHECK_EQ(pool_hist_bounds_us[0], 1, "the first bound");
	CHECK_EQ(pool_hist_bounds_us[POOL_HIST_NBOUNDS - 1], 3600000000ULL, "the last bound");
	for (size_t i = 0; i < sizeof prom / sizeof prom[0]; i++) {
		bool found = false;
		for (size_t j = 0; j < POOL_HIST_NBOUNDS; j++)
			found = found || pool_hist_bounds_us[j] == prom[i];
		CHECK(found, "%llu us is not a bound", (unsigned long long)prom[i]);
	}
	/* no bucket is wider than a third of its bound, past the first few microseconds */
	for (size_t i = 8; i < POOL_HIST_NBOUNDS; i++)
		CHECK(pool_hist_bounds_us[i] * 3 <= pool_hist_bounds_us[i - 1] * 4,
		    "bucket %zu: %llu..%llu", i, (unsigned long long)pool_hist_bounds_us[i - 1],
		    (unsigned long long)pool_hist_bounds_us[i]);

	/* every value falls in the bucket the bounds say (bound-1, bound, bound+1 of each) */
	for (size_t i = 0; i < POOL_HIST_NBOUNDS; i++)
		for (uint64_t d = 0; d < 3; d++) {
			uint64_t us = pool_hist_bounds_us[i] + d - 1;
			size_t want = 0;
			while (want < POOL_HIST_NBOUNDS && pool_hist_bounds_us[want] < us)
				want++;
			memset(&h, 0, sizeof h);
			pool_hist_add(&h, us);
			CHECK_EQ(h.bucket[want], 1, "the bucket of a value next to a bound");
		}
	for (uint64_t us = 1ULL << 31; us != 0; us <<= 1) {
		memset(&h, 0, sizeof h);
		pool_hist_add(&h, us);
		CHECK_EQ(h.bucket[POOL_HIST_NBOUNDS], us > 3600000000ULL, "a long value's bucket");
	}

	memset(&h, 0, sizeof h);
	CHECK_EQ(pool_hist_quantile(&h, 0.5), 0, "the median of nothing");
	/* a value on a bound counts at that bound (Prometheus's le), one above it does not */
	pool_hist_add(&h, 0);
	pool_hist_add(&h, 1000);
	pool_hist_add(&h, 1001);
	pool_hist_add(&h, 3600000000ULL);
	pool_hist_add(&h, 3600000001ULL);
	CHECK_EQ(h.count, 5, "count");
	CHECK_EQ(h.sum_us, 7200002002ULL, "sum");
	CHECK_EQ(h.min_us, 0, "min");
	CHECK_EQ(h.max_us, 3600000001ULL, "max");
	CHECK_EQ(pool_hist_count_le(&h, 1), 1, "at or below 1 us");
	CHECK_EQ(pool_hist_count_le(&h, 1000), 2, "at or below 1 ms");
	CHECK_EQ(pool_hist_count_le(&h, 1200), 3, "at or below 1.2 ms");
	CHECK_EQ(pool_hist_count_le(&h, 3600000000ULL), 4, "at or below 1 h");
	CHECK_EQ(h.bucket[POOL_HIST_NBOUNDS], 1, "past the last bound");

	/* one value is its own every quantile */
	memset(&h, 0, sizeof h);
	pool_hist_add(&h, 27);
	CHECK_EQ(pool_hist_quantile(&h, 0.5), 27, "the median of one value");
	CHECK_EQ(pool_hist_quantile(&h, 0.99), 27, "p99 of one value");

	/* 1..100 ms, once each: the estimates are within their bucket's width */
	memset(&h, 0, sizeof h);
	for (uint64_t ms = 1; ms <= 100; ms++)
		pool_hist_add(&h, ms * 1000);
	v = pool_hist_quantile(&h, 0.5);
	CHECK(v >= 40000 && v <= 50000, "p50 of 1..100 ms is %llu us", (unsigned long long)v);
	v = pool_hist_quantile(&h, 0.99);
	CHECK(v >= 80000 && v <= 100000, "p99 of 1..100 ms is %llu us", (unsigned long long)v);
	CHECK_EQ(pool_hist_quantile(&h, 1), 100000, "the largest");

	/* merging adds up */
	memset(&m, 0, sizeof m);
	pool_hist_add(&m, 5);
	pool_hist_merge(&m, &h);
	CHECK(m.count == 101 && m.min_us == 5 && m.max_us == 100000 &&
	    m.sum_us == h.sum_us + 5, "merged: count %llu min %llu max %llu",
	    (unsigned long long)m.count, (unsigned long long)m.min_us,
	    (unsigned long long)m.max_us);
	CHECK_EQ(pool_hist_count_le(&m, 1000), 2, "merged, at or below 1 ms");
}

static void
test_recent_windows_and_rate(void)
{
	const uint64_t s = 1000000, t0 = 1000 * s; /* a window and a second start at t0 */
	struct pool_timing r;
	struct pool_recent f;

	pool_timing_init(&r, t0);
	pool_timing_recent(&r, t0, &f);
	CHECK(f.rate_per_s == 0 && f.started == 0 && f.ended == 0 && f.queued_p50_us == 0 &&
	    f.run_p99_us == 0, "a fresh pool's figures are not zero");

	/* A young pool: three ends in its first half second are three a second, not six. */
	pool_timing_ended(&r, t0 + s / 2, 10);
	pool_timing_ended(&r, t0 + s / 2, 10);
	pool_timing_ended(&r, t0 + s / 2, 10);
	pool_timing_recent(&r, t0 + s / 2, &f);
	CHECK(f.rate_per_s == 3 && f.ended == 3 && f.run_p50_us == 10,
	    "young pool: rate %g ended %llu p50 %llu", f.rate_per_s,
	    (unsigned long long)f.ended, (unsigned long long)f.run_p50_us);

	/* Ten ends a second for 20 s: the rate is over the last 5 s, whole seconds. */
	pool_timing_init(&r, t0);
	for (uint64_t sec = 0; sec < 20; sec++)
		for (uint64_t k = 0; k < 10; k++)
			pool_timing_ended(&r, t0 + sec * s + k * (s / 10), 1000 + sec);
	pool_timing_recent(&r, t0 + 20 * s, &f);
	/* seconds 16..19 hold 40 ends, second 20 none yet: 40 over 4 s */
	CHECK(f.rate_per_s == 10, "steady rate %g", f.rate_per_s);
	pool_timing_recent(&r, t0 + 20 * s + s / 2, &f);
	CHECK(f.rate_per_s > 8.8 && f.rate_per_s < 8.9, "rate half a second into a quiet "
	    "second: %g (40 over 4.5 s)", f.rate_per_s);
	/* the quantiles are of the current window (20..25 s) and the one before (15..20 s) */
	CHECK_EQ(f.ended, 50, "ends in the windows");
	CHECK(f.run_p50_us >= 1015 && f.run_p50_us <= 1019 && f.run_p99_us == 1019,
	    "run p50 %llu p99 %llu", (unsigned long long)f.run_p50_us,
	    (unsigned long long)f.run_p99_us);
	/* 10 s on, nothing recent is left */
	pool_timing_recent(&r, t0 + 30 * s, &f);
	CHECK(f.rate_per_s == 0 && f.ended == 0 && f.run_p99_us == 0,
	    "after 10 quiet seconds: rate %g ended %llu", f.rate_per_s,
	    (unsigned long long)f.ended);

	/* Queue waits go by the same windows; a time older than the current window (a
	 * clock read long before the lock was taken) counts in the current one. */
	pool_timing_init(&r, t0);
	pool_timing_started(&r, t0 + 1 * s, 700);
	pool_timing_started(&r, t0 + 11 * s, 500);    /* the window of 10..15 s */
	pool_timing_started(&r, t0 + 1 * s, 600);
	pool_timing_ended(&r, t0 + 1 * s, 99999);
	pool_timing_recent(&r, t0 + 11 * s, &f);
	CHECK(f.started == 2 && f.queued_p50_us == 500 && f.queued_p99_us >= 590 &&
	    f.queued_p99_us <= 600 && f.ended == 1,
	    "started %llu p50 %llu p99 %llu ended %llu", (unsigned long long)f.started,
	    (unsigned long long)f.queued_p50_us, (unsigned long long)f.queued_p99_us,
	    (unsigned long long)f.ended);
	/* the window after: still there; two windows on: gone */
	pool_timing_recent(&r, t0 + 16 * s, &f);
	CHECK_EQ(f.started, 2, "waits one window on");
	pool_timing_recent(&r, t0 + 21 * s, &f);
	CHECK_EQ(f.started, 0, "waits two windows on");
}

static void
test_pool_observes_timings(void)
{
	struct ctx c;
	struct gate g;
	struct tjob a, b, expiring, cancelled;
	struct pool_hist queued, run;
	struct pool_snapshot s;
	struct pool *p;

	ctx_init(&c);
	gate_init(&g);
	p = pool_make("time", 1, 1, 4);
	job_init(&a, &c, 0, &g);
	job_init(&b, &c, 1, &g);
	job_init(&expiring, &c, 2, NULL);
	job_init(&cancelled, &c, 3, NULL);
	pool_timings(p, &queued, &run);
	CHECK(queued.count == 0 && run.count == 0, "a fresh pool observed something");

	submit_ok(p, &a);
	latch_wait(&c.started, 1, "a running");
	submit_ok(p, &b);
	submit_ok(p, &cancelled);
	expiring.pj.queue_deadline_us = 1;      /* long past: the watcher expires it */
	submit_ok(p, &expiring);
	latch_wait(&c.done, 1, "the expired job's done");
	CHECK(expiring.state == POOL_EXPIRED, "ended %s", pool_state_name(expiring.state));
	CHECK(pool_cancel(p, &cancelled.pj) == POOL_JOB_QUEUED, "cancel of a queued job");
	/* a started and expiring expired: two waits; nothing ended after running */
	pool_timings(p, &queued, &run);
	CHECK(queued.count == 2 && run.count == 0, "queued %llu run %llu",
	    (unsigned long long)queued.count, (unsigned long long)run.count);
	CHECK_EQ(queued.sum_us, expiring.queued_us + a.pj.started_us - a.pj.enqueued_us,
	    "the waits observed, against the expired job's done and a's start");

	gate_open(&g);
	latch_wait(&c.done, 4, "every job");
	pool_timings(p, &queued, &run);
	/* the histograms hold exactly what the dones said */
	CHECK_EQ(queued.count, 3, "waits observed (a, b, the expired one; not the cancelled)");
	CHECK_EQ(queued.sum_us, a.queued_us + b.queued_us + expiring.queued_us, "waits' sum");
	CHECK_EQ(run.count, 2, "run times observed");
	CHECK_EQ(run.sum_us, a.run_us + b.run_us, "run times' sum");
	s = snap(p);
	/* The recent figures hold the last 5 to 10 s: this check needs a run that quick. */
	if (clock_now_us() - a.pj.enqueued_us > 4000000) {
		fprintf(stderr, "pool_observes_timings: the jobs ran more than 4 s ago; "
		    "the recent figures are not checked\n");
		goto out;
	}
	CHECK(s.recent.started == 3 && s.recent.ended == 2, "recent: started %llu ended %llu",
	    (unsigned long long)s.recent.started, (unsigned long long)s.recent.ended);
	/* two ends, within the last 5 s, over at least a second */
	CHECK(s.recent.rate_per_s > 0 && s.recent.rate_per_s <= 2, "rate %g",
	    s.recent.rate_per_s);
	CHECK(s.recent.run_p99_us >= s.recent.run_p50_us &&
	    s.recent.run_p99_us <= (a.run_us > b.run_us ? a.run_us : b.run_us) &&
	    s.recent.run_p50_us >= (a.run_us < b.run_us ? a.run_us : b.run_us),
	    "run p50 %llu p99 %llu for runs of %llu and %llu us",
	    (unsigned long long)s.recent.run_p50_us, (unsigned long long)s.recent.run_p99_us,
	    (unsigned long long)a.run_us, (unsigned long long)b.run_us);
out:
	pool_finish(p, POOL_DRAIN);
	gate_destroy(&g);
	ctx_destroy(&c);
}

static const struct test_case cases[] = {
	{ "grow_starts_real_thread", test_grow_starts_real_thread },
	{ "shrink_surplus_leaves", test_shrink_surplus_leaves },
	{ "resize_follows_newest_target", test_resize_follows_newest_target },
	{ "full_queue_rejects", test_full_queue_rejects },
	{ "stress_submit_resize_shutdown", test_stress_submit_resize_shutdown },
	{ "shrink_then_shutdown", test_shrink_then_shutdown },
	{ "failing_job_keeps_worker", test_failing_job_keeps_worker },
	{ "thread_start_failure", test_thread_start_failure },
	{ "shutdown_now", test_shutdown_now },
	{ "drain_upgraded_to_now", test_drain_upgraded_to_now },
	{ "queue_deadline_expires", test_queue_deadline_expires },
	{ "deadline_during_drain", test_deadline_during_drain },
	{ "admission_idle_plus_capacity", test_admission_idle_plus_capacity },
	{ "worker_cannot_shutdown_own_pool", test_worker_cannot_shutdown_own_pool },
	{ "snapshot_and_times", test_snapshot_and_times },
	{ "cancel", test_cancel },
	{ "bad_arguments", test_bad_arguments },
	{ "pools_are_independent", test_pools_are_independent },
	{ "histogram", test_histogram },
	{ "recent_windows_and_rate", test_recent_windows_and_rate },
	{ "pool_observes_timings", test_pool_observes_timings },
	{ "room_told_once_per_arming", test_room_told_once_per_arming },
	{ "elastic_grows_before_queueing", test_elastic_grows_before_queueing },
	{ "keepalive_exit_racing_a_submit", test_keepalive_exit_racing_a_submit },
	{ "grow_racing_a_resize_down", test_grow_racing_a_resize_down },
	{ "grow_that_cannot_start_a_thread", test_grow_that_cannot_start_a_thread },
	{ "pause_and_resume", test_pause_and_resume },
	{ "priority_order", test_priority_order },
	{ "fair_share_between_owners", test_fair_share_between_owners },
	{ "owner_quotas", test_owner_quotas },
	{ "drop_oldest_never_displaces_a_higher_priority",
	    test_drop_oldest_never_displaces_a_higher_priority },
	{ "drain_wakes_workers_when_the_last_blocked_job_goes",
	    test_drain_wakes_workers_when_the_last_blocked_job_goes },
};

int
main(int argc, char **argv)
{
	latch_init(&tracker.exited);
	latch_init(&tracker.held);
	return test_run_all(cases, sizeof cases / sizeof cases[0], argc, argv);
}
