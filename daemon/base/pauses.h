/*
 * pauses.h: a record of pauses, durations of PAUSES_MIN_US or more: how
 * many, their sum, the longest, and a histogram over fixed bounds from 1 ms
 * to 1 s (pauses.c), cumulative as Prometheus wants it. Plain data without
 * locking: its writer and its readers share one thread (the loop's pauses:
 * obs/loop-watch.c writes daemon.h's loop_pauses, stats and /metrics read).
 */
#ifndef TPD_PAUSES_H
#define TPD_PAUSES_H

#include <stdint.h>

#define PAUSES_MIN_US 1000      /* shorter ones are not recorded */
#define PAUSES_NBOUNDS 10

struct pauses {
	uint64_t count;             /* recorded */
	uint64_t sum_us;
	uint64_t max_us;            /* the longest; 0 before the first */
	uint64_t le[PAUSES_NBOUNDS]; /* le[i]: those of at most pauses_bound_us[i] */
};

/* The bounds in microseconds (1 ms, 2.5 ms ... 1 s), and as seconds in text ("0.001"). */
extern const uint64_t pauses_bound_us[PAUSES_NBOUNDS];
extern const char *const pauses_bound_s[PAUSES_NBOUNDS];

/* Records a pause of us microseconds; one shorter than PAUSES_MIN_US is ignored. */
void pauses_add(struct pauses *, uint64_t us);

#endif
