/*
 * health.h: what tpd tells systemd about itself: whether it is healthy (for
 * the watchdog) and its live figures (for STATUS=). Loop thread only; these
 * are the hooks of sdn_setup (sd.h).
 */
#ifndef TPD_HEALTH_H
#define TPD_HEALTH_H

#include <stddef.h>

/*
 * Nonzero unless a pool is stuck: an open pool with a target but no worker
 * left, or a pool with idle workers and a task queued for longer than
 * HEALTH_STUCK_MS (a lost wake-up). The loop's own health is that this runs
 * at all: it is called from a timer on the loop. The first reason found is
 * logged when health is lost.
 */
int health_check(void *arg);

/*
 * One line for STATUS=: the phase, each pool's busy/workers and queue (and
 * its tasks/s and p99 wait and run time while it has recent tasks), the
 * connections.
 */
void health_status(void *arg, char *buf, size_t len);

#endif
