/*
 * loop-watch.h: how long the event loop goes without returning to
 * epoll_wait (its pauses), recorded in daemon.h's loop_pauses for stats'
 * "loop" object and /metrics' tpd_loop_pause_seconds (loop-watch.c says
 * how). Loop thread only.
 */
#ifndef TPD_LOOP_WATCH_H
#define TPD_LOOP_WATCH_H

#include "daemon.h"

/*
 * Starts watching d's loop (a timer fd on d->base). To be called before any
 * event of d->base is made: it gives the base two priorities (the watch's
 * tick 0, every event made after it the default, 1). Returns 0, or -1 with
 * *cause set.
 */
int loop_watch_start(struct daemon *d, char **cause);

/* Stops watching (at exit). */
void loop_watch_stop(void);

/*
 * A pass of the loop (one event_base_loop with EVLOOP_ONCE) just ended:
 * tpd.c calls it after each. One monotonic clock read (the vDSO's, no
 * system call) while the loop is busy.
 */
void loop_watch_pass_end(struct daemon *d);

#endif
