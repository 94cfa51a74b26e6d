/*
 * loop-watch.c: the loop's pauses, measured on the loop itself.
 *
 * A pause is a stretch of callbacks: the time from epoll_wait's return to
 * the end of the pass (tpd.c runs the loop one pass at a time, EVLOOP_ONCE,
 * and calls loop_watch_pass_end after each). The end of a pass costs one
 * vDSO clock read. Its start is not seen: libevent 2.1 has no hook after
 * epoll_wait (2.2's evwatch), and a clock read in every callback would cost
 * per request. So the loop is sampled instead, two ways:
 *
 * Busy: a timer fd (CLOCK_MONOTONIC, an hrtimer, not libevent's coarse
 * cached time) on the loop expires every LOOP_WATCH_TICK_US. Its readiness
 * is raised by the kernel at the due time whatever the loop does; the loop
 * sees it at its next epoll_wait, and runs its tick before any other
 * callback that epoll_wait woke: the base has two priorities, the tick
 * alone has the higher one (0), every other event the default (1). So when
 * the tick runs, nothing has run since the last pass ended (last_end): if
 * that pass was still running at the due time, the loop went
 * last_end - due past the due time without polling, recorded as the pause.
 * (Were the tick run after the pass's other callbacks, a long one among
 * them would go unseen: it ran after last_end.) The higher priority costs
 * one more epoll_wait (without waiting) in the tick's passes only.
 *
 * Every pause of a tick or more holds a due time, so each is recorded once
 * (from the earliest due it held: the expirations it missed are read as
 * one count), short by less than a tick. A shorter one is recorded only
 * when a due time falls in it, and pauses.h drops those under 1 ms anyway.
 * A pause is the loop's wall time without polling, whatever kept it: its
 * own work, a blocking call, or waiting for a CPU (on a loaded machine the
 * last is most of them).
 *
 * Idle: a tick that finds no pass but its own since the previous tick
 * stops the timer, so that an idle daemon is not woken a thousand times a
 * second. The pass of that tick goes on with the callbacks the same
 * epoll_wait woke (the last bytes of a big request, say): it is measured
 * by wall time from the tick to its end, and when that is a tick or more
 * the loop was not idle after all, the pause is recorded and the ticks
 * start again at once. Otherwise the next pass (the one after the wait,
 * which may be a long one: a big request from an idle daemon) is measured
 * by the thread's CPU time since the end of the stopping pass (the wait
 * takes none), a system call per idle spell, and then the ticks start
 * again. CPU time misses a preemption or a blocking call in that one
 * pass; the ticks, wall time, miss nothing.
 *
 * Cost while busy: a clock read per pass, and a thousand wake-ups a second
 * (a timer fd read each): nothing per request (callgrind counts 40,687
 * instructions per echo task against 40,224 without the watch, and that
 * under valgrind's 50-fold slower clock, so with 50 times the ticks per task).
 */
#include "config.h"

#include <sys/timerfd.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "base/clock.h"
#include "base/log.h"
#include "loop-watch.h"

#define LOOP_WATCH_TICK_US 1000
#define LOOP_WATCH_PRIORITIES 2 /* the tick 0, every other event 1 (libevent's default: n / 2) */

static struct {
	int fd;                     /* the timer fd, -1 when not watching */
	struct event *ev;
	bool ticking;               /* the timer runs (busy); stopped while idle */
	uint64_t due_us;            /* the earliest expiration not yet handled */
	uint64_t last_end_us;       /* when the last pass ended */
	uint64_t passes;            /* passes ended */
	uint64_t passes_at_tick;    /* passes when the previous tick ran */
	uint64_t idle_pass;         /* passes when the timer stopped (its pass not ended) */
	uint64_t stop_us;           /* when the timer stopped */
	uint64_t idle_cpu_us;       /* the thread's CPU time when the stopping pass ended */
} lw = { .fd = -1 };

static uint64_t
thread_cpu_us(void)
{
	return clock_us(CLOCK_THREAD_CPUTIME_ID);
}

/* Starts the ticks: the first one a tick from now, then every tick. */
static void
lw_tick_start(void)
{
	struct itimerspec its;

	lw.due_us = clock_now_us() + LOOP_WATCH_TICK_US;
	memset(&its, 0, sizeof its);
	its.it_value.tv_sec = (time_t)(lw.due_us / 1000000);
	its.it_value.tv_nsec = (long)(lw.due_us % 1000000) * 1000;
	its.it_interval.tv_nsec = LOOP_WATCH_TICK_US * 1000L;
	if (timerfd_settime(lw.fd, TFD_TIMER_ABSTIME, &its, NULL) == -1) {
		log_warn("loop watch: timerfd_settime");
		return;
	}
	lw.ticking = true;
	lw.passes_at_tick = lw.passes;
}

static void
lw_tick_stop(void)
{
	struct itimerspec its;

	memset(&its, 0, sizeof its);
	if (timerfd_settime(lw.fd, 0, &its, NULL) == -1)
		log_warn("loop watch: timerfd_settime");
	lw.ticking = false;
	lw.idle_pass = lw.passes;
	lw.stop_us = clock_now_us();
}

static void
lw_tick_cb(evutil_socket_t fd, short what, void *arg)
{
	struct daemon *d = arg;
	uint64_t n, late;

	(void)what;
	if (read(fd, &n, sizeof n) != (ssize_t)sizeof n || n == 0)
		return;         /* stopped since it expired, or a spurious wake-up */
	if (!lw.ticking)
		return;
	late = lw.last_end_us > lw.due_us ? lw.last_end_us - lw.due_us : 0;
	pauses_add(&d->loop_pauses, late);
	lw.due_us += n * LOOP_WATCH_TICK_US;
	/* only this tick's pass since the previous tick: the loop idles */
	if (late == 0 && lw.passes - lw.passes_at_tick <= 1)
		lw_tick_stop();
	else
		lw.passes_at_tick = lw.passes;
}

int
loop_watch_start(struct daemon *d, char **cause)
{
	lw.fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	if (lw.fd == -1) {
		if (asprintf(cause, "loop watch: timerfd_create: %s", strerror(errno)) == -1)
			*cause = NULL;
		return -1;
	}
	/* before any event is made: every event made later gets the default priority, 1 */
	if (event_base_priority_init(d->base, LOOP_WATCH_PRIORITIES) == -1) {
		if (asprintf(cause, "loop watch: cannot give the loop %d priorities",
		    LOOP_WATCH_PRIORITIES) == -1)
			*cause = NULL;
		return -1;
	}
	lw.ev = event_new(d->base, lw.fd, EV_READ | EV_PERSIST, lw_tick_cb, d);
	if (lw.ev == NULL || event_priority_set(lw.ev, 0) == -1 ||
	    event_add(lw.ev, NULL) == -1) {
		if (asprintf(cause, "loop watch: cannot add its event") == -1)
			*cause = NULL;
		loop_watch_stop();
		return -1;
	}
	lw.last_end_us = clock_now_us();
	lw_tick_start();
	return 0;
}

void
loop_watch_stop(void)
{
	if (lw.ev != NULL)
		event_free(lw.ev);
	lw.ev = NULL;
	if (lw.fd != -1)
		close(lw.fd);
	lw.fd = -1;
	lw.ticking = false;
}

void
loop_watch_pass_end(struct daemon *d)
{
	lw.passes++;
	lw.last_end_us = clock_now_us();
	if (lw.ticking || lw.fd == -1)
		return;
	if (lw.passes == lw.idle_pass + 1) {
		/* the pass that stopped the ticks: what ran after its tick */
		if (lw.last_end_us - lw.stop_us >= LOOP_WATCH_TICK_US) {
			pauses_add(&d->loop_pauses, lw.last_end_us - lw.stop_us);
			lw_tick_start();
		} else
			lw.idle_cpu_us = thread_cpu_us();
		return;
	}
	/* the first pass after an idle spell */
	pauses_add(&d->loop_pauses, thread_cpu_us() - lw.idle_cpu_us);
	lw_tick_start();
}
