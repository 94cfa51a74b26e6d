/*
 * shutdown.h: the daemon's phase and its way out (tpd(8)). A drain or a
 * stop now begins here, whoever asks (SIGTERM and SIGINT in tpd.c, the
 * shutdown op in op-admin.c, shutdown_timeout), and tpd.c's loop asks here,
 * once per pass, whether tpd may leave. Loop thread only.
 */
#ifndef TPD_SHUTDOWN_H
#define TPD_SHUTDOWN_H

#include <stdbool.h>

struct event_base;

enum daemon_phase {
	DAEMON_RUNNING,
	DAEMON_DRAINING,     /* no new submits; accepted tasks run to their end */
	DAEMON_STOPPING_NOW, /* queued tasks cancelled, running ones asked to stop */
	DAEMON_EXITING,      /* every done delivered; flushing and leaving the loop */
};

/* The phase now (DAEMON_RUNNING until shutdown_begin). */
enum daemon_phase shutdown_phase(void);

/*
 * Starts a drain, or a stop now: the sources stop reading, the pools
 * close, and with a drain, shutdown_timeout starts (past it, the drain
 * becomes a stop now). A second call can upgrade a drain to now.
 */
void shutdown_begin(bool now);

/*
 * The one exit decision, once per pass of the loop: true once every
 * accepted task's done is processed and every connection's output and
 * source's result is written, or when the exit flush ran out.
 */
bool shutdown_may_leave(void);

/* Start and stop: the timers of shutdown_timeout and of the exit flush, on base. */
void shutdown_timers_start(struct event_base *base);
void shutdown_timers_stop(void);

#endif
