/*
 * tpbench-hist.h: a latency histogram of bounded size (log-linear buckets,
 * under 0.8% relative error) and the monotonic clock the benchmarks share.
 */
#ifndef TPBENCH_HIST_H
#define TPBENCH_HIST_H

#include <stdint.h>

#define HIST_SUB 64                     /* buckets per power of two */
#define HIST_BUCKETS (2 * HIST_SUB + 58 * HIST_SUB)

struct hist {
	uint64_t count;
	uint64_t min, max;              /* exact, in ns */
	uint64_t bucket[HIST_BUCKETS];
};

/* Nanoseconds on CLOCK_MONOTONIC. */
uint64_t hist_now_ns(void);

void hist_reset(struct hist *h);
void hist_add(struct hist *h, uint64_t ns);

/* The value (ns) at quantile q in [0, 1]; 0 when empty. */
uint64_t hist_quantile(const struct hist *h, double q);

#endif
