/*
 * loop-watch-test.c: the loop's pause measurement (obs/loop-watch.c) on a
 * real libevent base, passes run as tpd.c runs them (one EVLOOP_ONCE, then
 * loop_watch_pass_end), with the interleavings forced: a callback woken in
 * the same epoll_wait as the tick that stops the ticks, a long pass after
 * an idle spell, and an idle spell that records nothing.
 */
#include "config.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "check.h"
#include "base/clock.h"
#include "base/log.h"
#include "daemon.h"
#include "obs/loop-watch.h"

struct daemon *daemon_state;

/* What the next readable pipe's callback does: sleep (wall) or spin (CPU). */
static uint64_t cb_sleep_us, cb_spin_us;

static void
sleep_us(uint64_t us)
{
	struct timespec ts = { (time_t)(us / 1000000), (long)(us % 1000000) * 1000 };

	while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
		;
}

static void
busy_cb(evutil_socket_t fd, short what, void *arg)
{
	char b[16];
	uint64_t until;

	(void)what;
	(void)arg;
	if (read(fd, b, sizeof b) < 0)
		return;
	if (cb_sleep_us != 0)
		sleep_us(cb_sleep_us);
	for (until = clock_us(CLOCK_THREAD_CPUTIME_ID) + cb_spin_us;
	    cb_spin_us != 0 && clock_us(CLOCK_THREAD_CPUTIME_ID) < until;)
		;
}

struct rig {
	struct daemon d;
	struct event *ev;
	int p[2];
};

static void
rig_start(struct rig *r)
{
	char *cause = NULL;

	memset(r, 0, sizeof *r);
	CHECK((r->d.base = event_base_new()) != NULL, "event_base_new");
	CHECK(loop_watch_start(&r->d, &cause) == 0, "loop_watch_start: %s", cause ? cause : "?");
	CHECK(pipe(r->p) == 0, "pipe");
	r->ev = event_new(r->d.base, r->p[0], EV_READ | EV_PERSIST, busy_cb, NULL);
	CHECK(r->ev != NULL && event_add(r->ev, NULL) == 0, "the pipe's event");
}

static void
rig_stop(struct rig *r)
{
	event_free(r->ev);
	loop_watch_stop();
	event_base_free(r->d.base);
	close(r->p[0]);
	close(r->p[1]);
}

/* One pass of the loop, as tpd.c runs it. */
static void
pass(struct rig *r)
{
	CHECK(event_base_loop(r->d.base, EVLOOP_ONCE) == 0, "event_base_loop");
	loop_watch_pass_end(&r->d);
}

static void
wake(struct rig *r)
{
	CHECK(write(r->p[1], "x", 1) == 1, "write");
}

/* One pass whose pipe callback sleeps sleep for (wall time) and spins spin for (CPU time). */
static void
pass_busy(struct rig *r, uint64_t sleep, uint64_t spin)
{
	cb_sleep_us = sleep;
	cb_spin_us = spin;
	pass(r);
	cb_sleep_us = cb_spin_us = 0;
}

/* The watch recorded one pause, of min_us to max_us. */
static void
check_one_pause(const struct rig *r, uint64_t min_us, uint64_t max_us)
{
	const struct pauses *p = &r->d.loop_pauses;

	CHECK(p->count == 1 && p->max_us >= min_us && p->max_us < max_us,
	    "%llu pauses, the longest %llu us (expected one of %llu to %llu us)",
	    (unsigned long long)p->count, (unsigned long long)p->max_us,
	    (unsigned long long)min_us, (unsigned long long)max_us);
}

/*
 * The first tick finds no pass since the watch started: it stops the
 * ticks. Its epoll_wait also woke the pipe, whose callback (after the
 * tick: lower priority) takes 60 ms: that pause is recorded, and the
 * ticks start again (the loop was not idle).
 */
static void
test_long_callback_in_the_pass_that_stops_the_ticks(void)
{
	struct rig r;

	rig_start(&r);
	sleep_us(3000);         /* the tick is due */
	wake(&r);               /* and the pipe readable: one epoll_wait takes both */
	pass_busy(&r, 60000, 0);
	check_one_pause(&r, 55000, 1000000);
	/* ticking again: a tick is due in a millisecond and wakes the loop (else: the alarm) */
	pass(&r);
	rig_stop(&r);
}

/*
 * A tick stops the ticks in a pass of its own (idle); an idle spell of
 * 200 ms records nothing; the pass after it, 30 ms of CPU, is recorded as
 * about that (by CPU time: a loaded machine does not lengthen it), not
 * with the idle spell in it.
 */
static void
test_idle_spell_then_a_long_pass(void)
{
	struct rig r;

	rig_start(&r);
	sleep_us(3000);
	pass(&r);               /* the tick alone: the ticks stop */
	CHECK(r.d.loop_pauses.count == 0, "a pause in the idle tick's pass");
	sleep_us(200000);       /* idle: nothing wakes the loop */
	wake(&r);
	pass_busy(&r, 0, 30000);
	check_one_pause(&r, 25000, 150000);
	rig_stop(&r);
}

static const struct test_case cases[] = {
	{ "long_callback_in_the_pass_that_stops_the_ticks",
	  test_long_callback_in_the_pass_that_stops_the_ticks },
	{ "idle_spell_then_a_long_pass", test_idle_spell_then_a_long_pass },
};

int
main(int argc, char **argv)
{
	log_init(LOG_WARNING);
	return test_run(cases, TEST_COUNT(cases), argc, argv);
}
