/*
 * shutdown.c: the daemon's phase and its way out (shutdown.h).
 *
 * Running, then draining (no new submits; accepted tasks run to their end)
 * or stopping now (queued tasks cancelled, running ones asked to stop),
 * then exiting once the done of every accepted task is processed: tpd
 * leaves when every connection's output is written and every source's
 * results are in Redis, or when the exit flush (EXIT_FLUSH_MS) runs out (a
 * source's entry whose result was not written stays pending: Redis
 * delivers it again). Who owns the counters looked at: the registry
 * (tasks_outstanding), each connection (conn_all_flushed), each source
 * (sources_idle).
 */
#include "config.h"

#include <stdbool.h>
#include <stdint.h>

#include <event2/event.h>

#include "base/clock.h"
#include "base/log.h"
#include "daemon.h"
#include "journal/durable.h"
#include "net/conn.h"
#include "pool/pools.h"
#include "sd.h"
#include "shutdown.h"
#include "source/sources.h"
#include "task/tasks.h"

#define EXIT_FLUSH_MS 5000 /* at exit, how long clients get to read their last events */

static enum daemon_phase phase = DAEMON_RUNNING;
static bool leave;                  /* the exit flush timed out: leave the loop now */
static struct event *shutdown_timer, *exit_timer;

enum daemon_phase
shutdown_phase(void)
{
	return phase;
}

static void
shutdown_timeout_cb(evutil_socket_t fd, short what, void *arg)
{
	log_warnx("shutdown_timeout passed with tasks still running: stopping now");
	shutdown_begin(true);
}

static void
exit_timeout_cb(evutil_socket_t fd, short what, void *arg)
{
	if (!sources_idle())
		log_warnx("sources' last results not written to Redis within %d ms: exiting "
		    "anyway (their entries stay pending: Redis delivers them again)",
		    EXIT_FLUSH_MS);
	if (!conn_all_flushed())
		log_warnx("clients did not read their last events within %d ms: exiting anyway",
		    EXIT_FLUSH_MS);
	leave = true;
}

static void (*begin_hooks[SHUTDOWN_MAX_HOOKS])(bool now);
static size_t nbegin_hooks;

int
shutdown_add_hook(void (*fn)(bool now))
{
	if (nbegin_hooks == SHUTDOWN_MAX_HOOKS)
		return -1;
	begin_hooks[nbegin_hooks++] = fn;
	return 0;
}

void
shutdown_begin(bool now)
{
	const struct conf *c = &daemon_state->conf;

	if (phase == DAEMON_RUNNING) {
		sdn_stopping();
		phase = now ? DAEMON_STOPPING_NOW : DAEMON_DRAINING;
		log_notice("shutting down (%s): %llu task%s outstanding", now ? "now" : "drain",
		    (unsigned long long)tasks_outstanding(), tasks_outstanding() == 1 ? "" : "s");
		sources_stop(now);      /* first: a task cancelled by now stays pending */
		tasks_shutdown(!now && durable_on()); /* scheduled, waiting: kept, or cancelled */
		pools_close_all(now ? POOL_NOW : POOL_DRAIN);
		for (size_t i = 0; i < nbegin_hooks; i++)
			begin_hooks[i](now);
		if (!now && c->shutdown_timeout_ms > 0) {
			struct timeval tv = clock_timeval_ms(c->shutdown_timeout_ms);
			evtimer_add(shutdown_timer, &tv);
		}
	} else if (now && phase == DAEMON_DRAINING) {
		phase = DAEMON_STOPPING_NOW;
		log_notice("shutdown turned into now: cancelling %llu outstanding task%s",
		    (unsigned long long)tasks_outstanding(), tasks_outstanding() == 1 ? "" : "s");
		sources_stop(true);
		tasks_shutdown(false);
		pools_close_all(POOL_NOW);
	}
	task_wake_streams();    /* a run blocked on its stream budget sees the cancel */
}

bool
shutdown_may_leave(void)
{
	struct timeval tv = clock_timeval_ms(EXIT_FLUSH_MS);

	if (leave)
		return true;
	if (phase == DAEMON_RUNNING || tasks_outstanding() > 0)
		return false;
	if (phase != DAEMON_EXITING) {
		phase = DAEMON_EXITING;
		log_info("every accepted task is done; flushing %zu connection%s", conn_count(),
		    conn_count() == 1 ? "" : "s");
		evtimer_add(exit_timer, &tv);
	}
	return conn_all_flushed() && sources_idle();
}

void
shutdown_timers_start(struct event_base *base)
{
	shutdown_timer = evtimer_new(base, shutdown_timeout_cb, NULL);
	exit_timer = evtimer_new(base, exit_timeout_cb, NULL);
	if (shutdown_timer == NULL || exit_timer == NULL)
		fatalx("cannot make the shutdown's timers");
}

void
shutdown_timers_stop(void)
{
	if (shutdown_timer != NULL)
		event_free(shutdown_timer);
	if (exit_timer != NULL)
		event_free(exit_timer);
	shutdown_timer = exit_timer = NULL;
}
