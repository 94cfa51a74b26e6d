/*
 * progress.c: the live progress line of tpctl batch on a terminal:
 * done/total, failed, rate and ETA, redrawn in place at most every 100ms.
 */
#include "config.h"

#include <stdlib.h>
#include <unistd.h>

#include "tpctl.h"

#define PROGRESS_INTERVAL_US 100000

struct progress {
	size_t total;
	size_t done;
	size_t failed;
	uint64_t start_us;
	uint64_t drawn_us;      /* when the line was last drawn */
	bool shown;             /* the line is on the screen */
};

struct progress *progress_current;

struct progress *
progress_new(size_t total)
{
	struct progress *p;

	if (!isatty(STDERR_FILENO) || (p = calloc(1, sizeof *p)) == NULL)
		return NULL;
	p->total = total;
	p->start_us = tpctl_now_us();
	return p;
}

void
progress_draw(struct progress *p)
{
	char eta[FORMAT_DURATION_LEN] = "-";
	uint64_t now, elapsed;
	double rate = 0;

	if (p == NULL)
		return;
	now = tpctl_now_us();
	elapsed = now - p->start_us;
	if (elapsed > 0)
		rate = (double)p->done * 1e6 / (double)elapsed;
	if (rate > 0 && p->done < p->total)
		format_duration((uint64_t)((double)(p->total - p->done) / rate * 1000),
		    eta, sizeof eta);
	fprintf(stderr, "\r\033[K[%zu/%zu] %3u%%  %zu failed  %.1f/s  ETA %s",
	    p->done, p->total,
	    p->total > 0 ? (unsigned)(p->done * 100 / p->total) : 100u,
	    p->failed, rate, eta);
	fflush(stderr);
	p->drawn_us = now;
	p->shown = true;
}

void
progress_done(struct progress *p, bool failed)
{
	if (p == NULL)
		return;
	p->done++;
	if (failed)
		p->failed++;
	if (tpctl_now_us() - p->drawn_us >= PROGRESS_INTERVAL_US || p->done == p->total)
		progress_draw(p);
}

void
progress_clear(struct progress *p)
{
	if (p == NULL || !p->shown)
		return;
	fputs("\r\033[K", stderr);
	fflush(stderr);
	p->shown = false;
	p->drawn_us = 0;        /* redraw at the next chance */
}

void
progress_free(struct progress *p)
{
	progress_clear(p);
	if (progress_current == p)
		progress_current = NULL;
	free(p);
}
