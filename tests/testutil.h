/*
 * testutil.h: small helpers for the C unit tests.
 *
 * Tests synchronise with latches and gates (a mutex and a condition each),
 * never with sleeps. A wait carries a generous deadline only as a guard: if
 * it passes, the test fails with the name of what it was waiting for instead
 * of hanging the suite.
 */
#ifndef TPD_TESTUTIL_H
#define TPD_TESTUTIL_H

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* How long any single wait may take before the test is declared hung. */
#define TEST_WAIT_LIMIT_S 30

/* A test that hangs where no latch guards it (a join, say) is killed after this. */
#define TEST_ALARM_S (2 * TEST_WAIT_LIMIT_S)

#include "check.h"

static void
test_deadline(struct timespec *ts)
{
	clock_gettime(CLOCK_MONOTONIC, ts);
	ts->tv_sec += TEST_WAIT_LIMIT_S;
}

static void
test_cond_init(pthread_cond_t *c)
{
	pthread_condattr_t ca;

	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(c, &ca);
	pthread_condattr_destroy(&ca);
}

/* A counter that threads can wait on until it reaches a value. */
struct latch {
	pthread_mutex_t m;
	pthread_cond_t c;
	unsigned n;
};

static void
latch_init(struct latch *l)
{
	pthread_mutex_init(&l->m, NULL);
	test_cond_init(&l->c);
	l->n = 0;
}

static void
latch_destroy(struct latch *l)
{
	pthread_mutex_destroy(&l->m);
	pthread_cond_destroy(&l->c);
}

static void
latch_up(struct latch *l)
{
	pthread_mutex_lock(&l->m);
	l->n++;
	pthread_cond_broadcast(&l->c);
	pthread_mutex_unlock(&l->m);
}

static unsigned
latch_get(struct latch *l)
{
	unsigned n;

	pthread_mutex_lock(&l->m);
	n = l->n;
	pthread_mutex_unlock(&l->m);
	return n;
}

/* Waits until the latch has counted to at least n. */
#define latch_wait(l, n, what) latch_wait_at(__FILE__, __LINE__, (l), (n), (what))

static void
latch_wait_at(const char *file, int line, struct latch *l, unsigned n, const char *what)
{
	struct timespec ts;

	test_deadline(&ts);
	pthread_mutex_lock(&l->m);
	while (l->n < n) {
		if (pthread_cond_timedwait(&l->c, &l->m, &ts) == ETIMEDOUT) {
			unsigned have = l->n;
			pthread_mutex_unlock(&l->m);
			test_fail(file, line, "timed out after %d s waiting for %s (%u of %u)",
			    TEST_WAIT_LIMIT_S, what, have, n);
		}
	}
	pthread_mutex_unlock(&l->m);
}

/* A door that stays shut until opened; waiters may also be let out early. */
struct gate {
	pthread_mutex_t m;
	pthread_cond_t c;
	bool open;
};

static void
gate_init(struct gate *g)
{
	pthread_mutex_init(&g->m, NULL);
	test_cond_init(&g->c);
	g->open = false;
}

static void
gate_destroy(struct gate *g)
{
	pthread_mutex_destroy(&g->m);
	pthread_cond_destroy(&g->c);
}

static void
gate_open(struct gate *g)
{
	pthread_mutex_lock(&g->m);
	g->open = true;
	pthread_cond_broadcast(&g->c);
	pthread_mutex_unlock(&g->m);
}

/* Wakes the waiters so they re-check their own reason to leave. */
static void
gate_poke(struct gate *g)
{
	pthread_mutex_lock(&g->m);
	pthread_cond_broadcast(&g->c);
	pthread_mutex_unlock(&g->m);
}

/*
 * Waits until the gate opens or leave(arg) is true (checked under the gate's
 * mutex, so a gate_poke after leave becomes true is never lost). Returns
 * true when the gate opened.
 */
static bool
gate_wait_or(struct gate *g, bool (*leave)(const void *), const void *arg)
{
	struct timespec ts;
	bool opened;

	test_deadline(&ts);
	pthread_mutex_lock(&g->m);
	while (!g->open && (leave == NULL || !leave(arg))) {
		if (pthread_cond_timedwait(&g->c, &g->m, &ts) == ETIMEDOUT) {
			pthread_mutex_unlock(&g->m);
			test_fail(__FILE__, __LINE__, "timed out after %d s at a gate",
			    TEST_WAIT_LIMIT_S);
		}
	}
	opened = g->open;
	pthread_mutex_unlock(&g->m);
	return opened;
}

#endif
