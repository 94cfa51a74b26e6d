/*
 * progress.c: the live progress line of tpctl batch on a terminal:
 * done/total, failed, cancelled, rate and ETA, redrawn in place at most
 * every 100ms. The line never reaches the terminal's last column: a line
 * that wrapped could not be redrawn in place (the carriage return goes back
 * to the start of its last row only). When it is too narrow, the parts at
 * the end (ETA, rate) are left out first.
 */
#include "config.h"

#include <sys/ioctl.h>

#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <unistd.h>

#include "tpctl.h"

#define PROGRESS_INTERVAL_US 100000
#define PROGRESS_MAX_LINE 256

struct progress {
	size_t total;
	size_t done;
	size_t failed;
	size_t cancelled;
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

/* The terminal's width (read at each draw: it may be resized), or 80. */
static size_t
progress_width(void)
{
	struct winsize ws;

	if (ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
		return ws.ws_col;
	return 80;
}

void
progress_draw(struct progress *p)
{
	char eta[FORMAT_DURATION_LEN] = "-", line[PROGRESS_MAX_LINE];
	char part[4][64];
	uint64_t now, elapsed;
	double rate = 0;
	size_t room, len, n, i, np = 0;

	if (p == NULL)
		return;
	now = tpctl_now_us();
	elapsed = now - p->start_us;
	if (elapsed > 0)
		rate = (double)p->done * 1e6 / (double)elapsed;
	if (rate > 0 && p->done < p->total)
		format_duration((uint64_t)((double)(p->total - p->done) / rate * 1000),
		    eta, sizeof eta);
	room = progress_width() - 1;
	if (room >= sizeof line)
		room = sizeof line - 1;
	/* the first part, cut if it must be; the others in order while they fit */
	snprintf(line, room + 1, "[%zu/%zu] %3u%%", p->done, p->total,
	    p->total > 0 ? (unsigned)(p->done * 100 / p->total) : 100u);
	snprintf(part[np++], sizeof part[0], "%zu failed", p->failed);
	if (p->cancelled > 0)
		snprintf(part[np++], sizeof part[0], "%zu cancelled", p->cancelled);
	snprintf(part[np++], sizeof part[0], "%.1f/s", rate);
	snprintf(part[np++], sizeof part[0], "ETA %s", eta);
	len = strlen(line);
	for (i = 0; i < np; i++) {
		n = strlen(part[i]);
		if (len + 2 + n > room)
			break;
		memcpy(line + len, "  ", 2);
		memcpy(line + len + 2, part[i], n + 1);
		len += 2 + n;
	}
	fprintf(stderr, "\r\033[K%s", line);
	fflush(stderr);
	p->drawn_us = now;
	p->shown = true;
}

void
progress_done(struct progress *p, enum progress_end end)
{
	if (p == NULL)
		return;
	p->done++;
	if (end == PROGRESS_FAILED)
		p->failed++;
	else if (end == PROGRESS_CANCELLED)
		p->cancelled++;
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
