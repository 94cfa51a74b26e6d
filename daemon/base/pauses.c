/* pauses.c: the record of pauses (pauses.h). */
#include "config.h"

#include "pauses.h"

const uint64_t pauses_bound_us[PAUSES_NBOUNDS] = {
	1000, 2500, 5000, 10000, 25000, 50000, 100000, 250000, 500000, 1000000,
};

const char *const pauses_bound_s[PAUSES_NBOUNDS] = {
	"0.001", "0.0025", "0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1",
};

void
pauses_add(struct pauses *p, uint64_t us)
{
	if (us < PAUSES_MIN_US)
		return;
	p->count++;
	p->sum_us += us;
	if (us > p->max_us)
		p->max_us = us;
	for (int i = PAUSES_NBOUNDS - 1; i >= 0 && us <= pauses_bound_us[i]; i--)
		p->le[i]++;
}
