/*
 * tpbench-hist.c: values below 2 * HIST_SUB ns have a bucket each; above,
 * each power of two is cut into HIST_SUB equal buckets, so a bucket is never
 * wider than 1/HIST_SUB of its value. A quantile reports its bucket's middle.
 */
#include "config.h"

#include <string.h>
#include <time.h>

#include "tpbench-hist.h"

uint64_t
hist_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void
hist_reset(struct hist *h)
{
	memset(h, 0, sizeof *h);
}

static unsigned
hist_index(uint64_t v)
{
	unsigned shift;

	if (v < 2 * HIST_SUB)
		return (unsigned)v;
	/* v >> shift lands in [HIST_SUB, 2 * HIST_SUB) */
	shift = (unsigned)(63 - __builtin_clzll(v)) - 6;
	if (shift > 57)
		return HIST_BUCKETS - 1;
	return 2 * HIST_SUB + (shift - 1) * HIST_SUB +
	    (unsigned)((v >> shift) - HIST_SUB);
}

/* The middle of bucket i. */
static uint64_t
hist_value(unsigned i)
{
	unsigned shift;
	uint64_t low;

	if (i < 2 * HIST_SUB)
		return i;
	shift = (i - 2 * HIST_SUB) / HIST_SUB + 1;
	low = (uint64_t)((i - 2 * HIST_SUB) % HIST_SUB + HIST_SUB) << shift;
	return low + ((uint64_t)1 << shift) / 2;
}

void
hist_add(struct hist *h, uint64_t ns)
{
	if (h->count == 0 || ns < h->min)
		h->min = ns;
	if (ns > h->max)
		h->max = ns;
	h->count++;
	h->bucket[hist_index(ns)]++;
}

uint64_t
hist_quantile(const struct hist *h, double q)
{
	uint64_t rank, seen = 0, v;
	unsigned i;

	if (h->count == 0)
		return 0;
	if (q >= 1.0)
		return h->max;
	rank = (uint64_t)(q * (double)h->count);
	if (rank >= h->count)
		rank = h->count - 1;
	for (i = 0; i < HIST_BUCKETS; i++) {
		seen += h->bucket[i];
		if (seen > rank) {
			v = hist_value(i);
			if (v < h->min)
				v = h->min;
			if (v > h->max)
				v = h->max;
			return v;
		}
	}
	return h->max;
}
