/*
 * cmd-top.c: tpctl top: a live view of the daemon's pools, drawn with plain
 * ANSI sequences (no curses) and refreshed each second from one stats
 * request: each pool's target, workers, busy, queue, tasks per second and
 * the median and 99th percentile of queue wait and run time over the last
 * seconds, rejections, and the daemon's phase and connections.
 *
 * On a terminal it takes the alternate screen, hides the cursor and reads
 * keys without echo (ISIG stays on: Ctrl-C is SIGINT, seen through
 * interrupt.c's pipe); q leaves with 0, Ctrl-C with 130, and the terminal
 * is given back as it was on every way out. When stdout is not a terminal
 * it prints one snapshot, without escapes, and exits.
 */
#include "config.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "tpctl.h"
#include "wire.h"

#define TOP_REFRESH_MS 1000
#define TOP_NCOLS 15

/*
 * TARGET shows an elastic pool's bounds too: "2 (1-8)"; HELD: submits
 * waiting for room; SCHEDULED: accepted tasks due later (a delay, a retry's
 * backoff) or due with the queue full; WAITING: accepted tasks waiting for
 * their dependencies. The last two are not in QUEUED: they hold no queue
 * slot until they are due.
 */
static const char *const top_headers[TOP_NCOLS] = {
	"POOL", "TARGET", "WORKERS", "BUSY", "QUEUED", "TASKS/S", "WAIT p50", "p99",
	"RUN p50", "p99", "REJECTED", "STATE", "HELD", "SCHEDULED", "WAITING",
};

struct top {
	bool live;                      /* drawing on a terminal */
	bool keys;                      /* stdin is a terminal: q is read */
	bool raw;                       /* the terminal's modes were changed */
	struct termios saved;
	int stderr_fd;                  /* the real stderr while messages are held, or -1 */
	FILE *held;                     /* messages written while the view is shown */
};

static volatile sig_atomic_t top_resized;

static void
top_winch(int sig)
{
	top_resized = 1;
}

/*
 * A duration of the last seconds' figures: "27us", "1.2ms", "3.5s"; "-" when
 * absent or 0, which the daemon sends when no task of the window had one
 * (a real quantile is at least the histogram's first bucket, 1 us).
 */
static void
top_duration(const json_t *pool, const char *key, char *buf, size_t len)
{
	json_t *v = json_object_get(pool, key);
	double ms;

	if (!json_is_number(v) || json_number_value(v) <= 0) {
		snprintf(buf, len, "-");
		return;
	}
	ms = json_number_value(v);
	if (ms < 1)
		snprintf(buf, len, "%.0fus", ms * 1000);
	else
		format_duration(ms, buf, len);
}

static const char *
top_pool_state(const json_t *pool)
{
	if (json_is_true(json_object_get(pool, "removed")))
		return "removed";
	if (json_is_true(json_object_get(pool, "closed")))
		return "closed";
	if (strcmp(event_str(pool, FIELD_STATE, ""), POOL_STATE_PAUSED) == 0)
		return POOL_STATE_PAUSED;
	return "open";
}

/*
 * The screen's text for one stats event, as lines of at most width columns
 * (0: no limit); live adds the keys' line.
 */
static char *
top_render(const json_t *ev, unsigned width, bool live, size_t *len)
{
	const char *phase = format_safe(event_str(ev, "phase", "running"));
	const char *version = format_safe(event_str(ev, FIELD_VERSION, ""));
	json_t *pools = json_object_get(ev, FIELD_POOLS), *pool;
	char up[FORMAT_DURATION_LEN], cells[TOP_NCOLS][32], clock[16];
	const char *row[TOP_NCOLS];
	struct table *t;
	time_t now = time(NULL);
	struct tm tm;
	char *text = NULL, *out, *p, *nl, *end;
	size_t textlen = 0, n = 0;
	FILE *f;
	long long conns = event_int(ev, FIELD_CONNECTIONS, 0);
	size_t i;

	if ((f = open_memstream(&text, &textlen)) == NULL)
		return NULL;
	localtime_r(&now, &tm);
	strftime(clock, sizeof clock, "%H:%M:%S", &tm);
	fprintf(f, "tpd %s  %s  up %s  %lld connection%s  %s\n\n", version, phase,
	    format_duration(event_num(ev, FIELD_UPTIME_MS, 0), up, sizeof up), conns,
	    conns == 1 ? "" : "s", clock);
	if ((t = table_new("lrrrrrrrrrrlrrr", top_headers)) == NULL) {
		fclose(f);
		free(text);
		return NULL;
	}
	json_array_foreach(pools, i, pool) {
		json_t *rate = json_object_get(pool, FIELD_RATE_PER_S);

		for (size_t c = 0; c < TOP_NCOLS; c++)
			row[c] = cells[c];
		snprintf(cells[0], sizeof cells[0], "%s", event_str(pool, "name", "?"));
		if (event_int(pool, FIELD_MIN_WORKERS, 0) != event_int(pool, FIELD_MAX_WORKERS, 0))
			snprintf(cells[1], sizeof cells[1], "%lld (%lld-%lld)",
			    (long long)event_int(pool, "target", 0),
			    (long long)event_int(pool, FIELD_MIN_WORKERS, 0),
			    (long long)event_int(pool, FIELD_MAX_WORKERS, 0));
		else
			snprintf(cells[1], sizeof cells[1], "%lld",
			    (long long)event_int(pool, "target", 0));
		snprintf(cells[2], sizeof cells[2], "%lld", (long long)event_int(pool, "workers", 0));
		snprintf(cells[3], sizeof cells[3], "%lld", (long long)event_int(pool, "busy", 0));
		snprintf(cells[4], sizeof cells[4], "%lld/%lld",
		    (long long)event_int(pool, "queued", 0), (long long)event_int(pool, "capacity", 0));
		if (json_is_number(rate))
			snprintf(cells[5], sizeof cells[5], "%.1f", json_number_value(rate));
		else
			snprintf(cells[5], sizeof cells[5], "-");
		top_duration(pool, FIELD_QUEUED_P50_MS, cells[6], sizeof cells[6]);
		top_duration(pool, FIELD_QUEUED_P99_MS, cells[7], sizeof cells[7]);
		top_duration(pool, FIELD_RUN_P50_MS, cells[8], sizeof cells[8]);
		top_duration(pool, FIELD_RUN_P99_MS, cells[9], sizeof cells[9]);
		snprintf(cells[10], sizeof cells[10], "%lld",
		    (long long)event_int(pool, "rejected", 0));
		snprintf(cells[11], sizeof cells[11], "%s", top_pool_state(pool));
		snprintf(cells[12], sizeof cells[12], "%lld", (long long)event_int(pool, FIELD_HELD, 0));
		snprintf(cells[13], sizeof cells[13], "%lld",
		    (long long)event_int(pool, FIELD_SCHEDULED, 0));
		snprintf(cells[14], sizeof cells[14], "%lld",
		    (long long)event_int(pool, FIELD_WAITING, 0));
		table_add(t, row);
	}
	table_print(t, f);
	table_free(t);
	stats_sources_print(json_object_get(ev, FIELD_SOURCES), f);
	if (json_object_get(ev, FIELD_JOURNAL) != NULL) {
		fprintf(f, "\n");
		stats_journal_line(ev, f);
	}
	fprintf(f, "\nTASKS/S: ran to an end, per second, last 5 s.  WAIT, RUN: queue wait "
	    "and run time, last 5-10 s.\n%s", live ? "q: quit\n" : "");
	if (fclose(f) != 0) {
		free(text);
		return NULL;
	}
	if (width == 0) {
		*len = textlen;
		return text;
	}
	/* every line cut to the width (the text is ASCII but for pool names, which are too) */
	if ((out = malloc(textlen + 1)) == NULL) {
		free(text);
		return NULL;
	}
	for (p = text, end = text + textlen; p < end; p = nl + 1) {
		size_t l;

		if ((nl = memchr(p, '\n', (size_t)(end - p))) == NULL)
			nl = end;
		l = (size_t)(nl - p) < width ? (size_t)(nl - p) : width;
		memcpy(out + n, p, l);
		n += l;
		out[n++] = '\n';
	}
	free(text);
	*len = n;
	return out;
}

/*
 * Gives the terminal back: the normal screen, the cursor, the modes it
 * had; then the messages written meanwhile (a lost connection's, say),
 * which the alternate screen would have taken with it.
 */
static void
top_restore(struct top *tp)
{
	char buf[4096];
	size_t n;

	if (tp->live) {
		fputs("\033[?25h\033[?1049l", stdout);
		fflush(stdout);
		tp->live = false;
	}
	if (tp->raw) {
		tcsetattr(STDIN_FILENO, TCSAFLUSH, &tp->saved);
		tp->raw = false;
	}
	if (tp->stderr_fd != -1) {
		fflush(stderr);
		dup2(tp->stderr_fd, STDERR_FILENO);
		close(tp->stderr_fd);
		tp->stderr_fd = -1;
		rewind(tp->held);
		while ((n = fread(buf, 1, sizeof buf, tp->held)) > 0)
			fwrite(buf, 1, n, stderr);
		fclose(tp->held);
		tp->held = NULL;
	}
}

static int
top_setup(struct top *tp)
{
	struct termios raw;
	struct sigaction sa;

	memset(&sa, 0, sizeof sa);
	sa.sa_handler = top_winch;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = 0;        /* poll returns EINTR: the screen is redrawn at once */
	sigaction(SIGWINCH, &sa, NULL);
	if (isatty(STDIN_FILENO) && tcgetattr(STDIN_FILENO, &tp->saved) == 0) {
		raw = tp->saved;
		raw.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
		raw.c_cc[VMIN] = 1;
		raw.c_cc[VTIME] = 0;
		if (tcsetattr(STDIN_FILENO, TCSAFLUSH, &raw) == 0)
			tp->raw = tp->keys = true;
	}
	/* messages wait in a file until the screen is given back */
	tp->stderr_fd = -1;
	if ((tp->held = tmpfile()) != NULL) {
		fflush(stderr);
		if ((tp->stderr_fd = dup(STDERR_FILENO)) == -1 ||
		    dup2(fileno(tp->held), STDERR_FILENO) == -1) {
			if (tp->stderr_fd != -1)
				close(tp->stderr_fd);
			tp->stderr_fd = -1;
			fclose(tp->held);
			tp->held = NULL;
		}
	}
	fputs("\033[?1049h\033[?25l\033[H\033[2J", stdout);
	fflush(stdout);
	tp->live = true;
	return 0;
}

/* Draws the screen from the top, each line cleared to its end, then the rest cleared. */
static void
top_draw(const char *text, size_t len)
{
	const char *p = text, *end = text + len, *nl;
	unsigned short rows = 0;
	struct winsize ws;
	unsigned shown = 0;

	if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0)
		rows = ws.ws_row;
	fputs("\033[H", stdout);
	while (p < end && (rows == 0 || shown < rows)) {
		nl = memchr(p, '\n', (size_t)(end - p));
		if (nl == NULL)
			nl = end;
		fwrite(p, 1, (size_t)(nl - p), stdout);
		fputs("\033[K", stdout);
		shown++;
		if (nl < end && (rows == 0 || shown < rows))
			fputs("\r\n", stdout);
		p = nl + 1;
	}
	fputs("\033[J", stdout);
	fflush(stdout);
}

static unsigned
top_width(void)
{
	struct winsize ws;

	if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
		return ws.ws_col;
	return 80;
}

/* One stats request; 0 with *ev set, or an exit code (printed). */
static int
top_stats(struct session *s, json_t **ev)
{
	int code = session_call(s, json_pack("{s:s}", FIELD_OP, OP_STATS), ev);

	if (code != 0)
		return code;
	if (strcmp(event_name(*ev), EV_STATS) != 0) {
		code = event_report_error("stats", *ev);
		json_decref(*ev);
		*ev = NULL;
		return code != 0 ? code : EXIT_TASK_FAILED;
	}
	return 0;
}

/* The exit code for the signals interrupt.c caught: 130 for SIGINT, 128+N for the others. */
static int
top_signalled(void)
{
	return EXIT_SIGNALLED + interrupt_last_signal();
}

static int
top_exec(struct tpctl *opt, int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "once", no_argument, NULL, '1' }, CMD_LONGOPTS_COMMON, { NULL, 0, NULL, 0 }
	};
	struct session s;
	struct top tp;
	json_t *ev = NULL;
	char *text;
	size_t len;
	bool once = false;
	int ch, code;

	while ((ch = cmd_getopt(&cmd_top, opt, argc, argv, ":h1", longopts)) != -1) {
		switch (ch) {
		case '1':
			once = true;
			break;
		case 'h':
			return 0;
		default:
			return EX_USAGE;
		}
	}
	if (argc > optind)
		return cmd_usage_error(&cmd_top, "no arguments expected");
	if (opt->json)
		once = true;    /* --json: the stats event, once */
	if (!isatty(STDOUT_FILENO))
		once = true;
	if (interrupt_install() == -1) {
		tpctl_warnx("cannot catch signals: %s", strerror(errno));
		return EX_OSERR;
	}
	if ((code = session_open(&s, opt)) != 0)
		return code;
	if (once) {
		if ((code = top_stats(&s, &ev)) == 0 && !opt->json) {
			if ((text = top_render(ev, 0, false, &len)) != NULL) {
				fwrite(text, 1, len, stdout);
				free(text);
			}
		}
		json_decref(ev);
		session_close(&s);
		return code;
	}

	memset(&tp, 0, sizeof tp);
	tp.stderr_fd = -1;
	top_setup(&tp);
	for (;;) {
		uint64_t next;
		bool redraw = false;

		if ((code = top_stats(&s, &ev)) != 0) {
			if (code == EXIT_INTERRUPTED)
				code = top_signalled();
			break;
		}
		next = tpctl_now_us() + TOP_REFRESH_MS * 1000ULL;
		do {
			if ((text = top_render(ev, top_width(), true, &len)) != NULL) {
				top_draw(text, len);
				free(text);
			}
			redraw = false;
			/* keys, signals and the next refresh */
			while (!redraw) {
				struct pollfd pfd[2] = {
					{ tp.keys ? STDIN_FILENO : -1, POLLIN, 0 },
					{ interrupt_fd(), POLLIN, 0 },
				};
				uint64_t t = tpctl_now_us();
				int ms = t >= next ? 0 : (int)((next - t + 999) / 1000);
				int n = poll(pfd, 2, ms);

				if (n == -1 && errno == EINTR) {
					if (top_resized) {
						top_resized = 0;
						redraw = true;
					}
					continue;
				}
				if (n == 0)
					break;  /* time for new figures */
				if (pfd[1].revents & POLLIN) {
					interrupt_take();
					code = top_signalled();
					goto out;
				}
				if (pfd[0].revents & POLLIN) {
					char key[16];
					ssize_t r = read(STDIN_FILENO, key, sizeof key);
					if (r > 0 && (memchr(key, 'q', (size_t)r) != NULL ||
					    memchr(key, 'Q', (size_t)r) != NULL)) {
						code = 0;
						goto out;
					}
					if (r == 0)
						tp.keys = false;        /* stdin closed: signals only */
				} else if (pfd[0].revents & (POLLHUP | POLLERR))
					tp.keys = false;
			}
		} while (redraw);
		json_decref(ev);
		ev = NULL;
	}
out:
	json_decref(ev);
	top_restore(&tp);
	session_close(&s);
	return code;
}

const struct cmd cmd_top = {
	.name = "top",
	.args = "[--once]",
	.summary = "a live view of the pools, refreshed each second",
	.help =
	    "Shows the daemon's phase, uptime and connections, and a row per pool:\n"
	    "its target and current workers, busy workers, queued tasks and the\n"
	    "queue's capacity, the tasks that ran to an end per second over the last\n"
	    "5 s, the median and 99th percentile of their queue wait and run time\n"
	    "over the last 5 to 10 s (\"-\" when the pool ran nothing then), the\n"
	    "submissions it rejected, and its state. Refreshed each second; q leaves\n"
	    "(exit 0), Ctrl-C too (exit 130). When stdout is not a terminal, or with\n"
	    "--once, prints the view once and exits.\n\n"
	    "      --once               print one snapshot and exit\n",
	.exec = top_exec,
};
