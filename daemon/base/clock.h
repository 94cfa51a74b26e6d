/*
 * clock.h: the daemon's clocks, in microseconds. Every time tpd measures
 * or compares comes from here: clock_now_us (monotonic: durations,
 * deadlines, queue and run times) or clock_wall_us (the wall clock: what
 * the journal's records keep, a result's age across restarts). Header
 * only, so that anything (the pool built alone, a test, a fuzzer) has it
 * without linking more. Any thread.
 */
#ifndef TPD_CLOCK_H
#define TPD_CLOCK_H

#include <stdint.h>
#include <time.h>

/* clk's time in microseconds (CLOCK_MONOTONIC, CLOCK_REALTIME, CLOCK_BOOTTIME). */
static inline uint64_t
clock_us(clockid_t clk)
{
	struct timespec ts;

	clock_gettime(clk, &ts);
	return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

/* Monotonic clock: durations and deadlines (a pool's queue deadlines too). */
static inline uint64_t
clock_now_us(void)
{
	return clock_us(CLOCK_MONOTONIC);
}

/* Wall clock, since the epoch: what outlives tpd (the journal's records). */
static inline uint64_t
clock_wall_us(void)
{
	return clock_us(CLOCK_REALTIME);
}

#endif
