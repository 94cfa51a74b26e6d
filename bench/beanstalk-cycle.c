/*
 * beanstalk-cycle: beanstalkd's put/reserve/delete job cycle, driven the
 * way tpbench drives tpd (one thread, epoll, pipelined), to compare tpd's
 * echo tasks with a job-queue daemon doing the nearest thing.
 *
 * A cycle is one job put, reserved by a consumer and deleted; its latency
 * runs from the put being sent to the DELETED answer. Two shapes:
 *
 *   -m pipe  one producer connection keeps -w jobs in the system (put, not
 *            yet deleted); -C consumer connections each pipeline reserves
 *            (-w / -C of them) and delete each job as it arrives. A delete
 *            is sent before the reserve that replaces it: with at most -w
 *            reserves ahead of any delete, the pipeline cannot deadlock.
 *   -m conn  -c connections each run put, reserve, delete in turn.
 *
 * Each run uses a tube of its own. The measurement ends at -d (or -n
 * cycles) without a drain: a pipelined reserve cannot be taken back, so the
 * jobs still in the tube are left to the server when the connections close.
 *
 * usage: beanstalk-cycle (-s PATH | -H HOST:PORT) [-m pipe|conn] [-w N]
 *          [-C N] [-c N] [-b BYTES] [-d SECONDS | -n COUNT]
 *          [--warmup SECONDS] [--json]
 */
#include "config.h"

#include <sys/epoll.h>

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tpbench-hist.h"
#include "tpbench-sock.h"

/* what a connection expects next, in order */
enum bexp { EXP_INSERTED, EXP_RESERVED, EXP_DELETED, EXP_USING, EXP_WATCHING };

struct bconn {
	int fd;
	bool producer, consumer;
	char *in;
	size_t inlen, incap;
	char *out;
	size_t outlen, outcap;
	/* a ring of expected answers, with the put time each cycle carries */
	enum bexp *exp;
	uint64_t *t0;
	unsigned head, count, cap;
};

static struct bconn *conns;
static unsigned nconns;
static const char *body;
static size_t bodylen;
static unsigned window = 64;
static uint64_t in_system;            /* jobs put and not yet deleted */
static bool measuring, stopping;
static uint64_t cycles, t_now;
static struct hist hist;

static void
die(const char *what)
{
	fprintf(stderr, "beanstalk-cycle: %s\n", what);
	exit(1);
}

static void
bc_out(struct bconn *c, const char *p, size_t n)
{
	if (c->outlen + n > c->outcap) {
		while (c->outlen + n > c->outcap)
			c->outcap = c->outcap ? c->outcap * 2 : 4096;
		if ((c->out = realloc(c->out, c->outcap)) == NULL)
			die("out of memory");
	}
	memcpy(c->out + c->outlen, p, n);
	c->outlen += n;
}

static void
bc_expect(struct bconn *c, enum bexp e, uint64_t t0)
{
	unsigned i;

	if (c->count == c->cap)
		die("too many answers pending");
	i = (c->head + c->count++) % c->cap;
	c->exp[i] = e;
	c->t0[i] = t0;
}

static void
bc_put(struct bconn *c)
{
	char line[64];
	int n = snprintf(line, sizeof line, "put 0 0 60 %zu\r\n", bodylen);

	bc_out(c, line, (size_t)n);
	bc_out(c, body, bodylen);
	bc_out(c, "\r\n", 2);
	bc_expect(c, EXP_INSERTED, t_now);
	in_system++;
}

static void
bc_reserve(struct bconn *c, uint64_t t0)
{
	bc_out(c, "reserve\r\n", 9);
	bc_expect(c, EXP_RESERVED, t0);
}

static void
bc_flush(struct bconn *c)
{
	size_t off = 0;
	ssize_t n;

	/* small pipelined writes: a blocking write keeps this simple */
	while (off < c->outlen) {
		n = write(c->fd, c->out + off, c->outlen - off);
		if (n == -1 && errno == EINTR)
			continue;
		if (n == -1)
			die("write failed");
		off += (size_t)n;
	}
	c->outlen = 0;
}

static void
bc_cycle_done(uint64_t t0)
{
	in_system--;
	if (measuring) {
		cycles++;
		hist_add(&hist, t_now - t0);
	}
}

/*
 * One answer line (and, for RESERVED, its body) of c. Returns the bytes it
 * used, or 0 when more must be read.
 */
static size_t
bc_answer(struct bconn *c, bool pipe_mode, struct bconn *producer)
{
	char *nl, line[128], reply[64];
	unsigned long long id, bytes;
	enum bexp e;
	uint64_t t0;
	size_t used;

	nl = memchr(c->in, '\n', c->inlen);
	if (nl == NULL)
		return 0;
	used = (size_t)(nl - c->in) + 1;
	snprintf(line, sizeof line, "%.*s", (int)(used > 100 ? 100 : used), c->in);
	if (c->count == 0)
		die("an answer nobody asked for");
	e = c->exp[c->head];
	t0 = c->t0[c->head];
	if (e == EXP_INSERTED && sscanf(line, "INSERTED %llu", &id) == 1) {
		if (!pipe_mode)
			bc_reserve(c, t0);
	} else if (e == EXP_RESERVED &&
	    sscanf(line, "RESERVED %llu %llu", &id, &bytes) == 2) {
		if (c->inlen < used + bytes + 2)
			return 0;
		used += bytes + 2;
		snprintf(reply, sizeof reply, "delete %llu\r\n", id);
		bc_out(c, reply, strlen(reply));
		/* pipe mode: the put time comes from the job's body */
		if (pipe_mode)
			sscanf(c->in + (nl - c->in) + 1, "%16" SCNx64, &t0);
		c->head = (c->head + 1) % c->cap;
		c->count--;
		bc_expect(c, EXP_DELETED, t0);
		if (pipe_mode && !stopping)
			bc_reserve(c, 0);
		return used;
	} else if ((e == EXP_USING && strncmp(line, "USING ", 6) == 0) ||
	    (e == EXP_WATCHING && strncmp(line, "WATCHING ", 9) == 0)) {
		/* the run's own tube is set */
	} else if (e == EXP_DELETED && strncmp(line, "DELETED", 7) == 0) {
		bc_cycle_done(t0);
		if (!stopping) {
			if (pipe_mode)
				bc_put(producer);
			else
				bc_put(c);
		}
	} else {
		fprintf(stderr, "beanstalk-cycle: unexpected answer: %s", line);
		exit(1);
	}
	c->head = (c->head + 1) % c->cap;
	c->count--;
	return used;
}

int
main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "warmup", required_argument, NULL, 'W' },
		{ NULL, 0, NULL, 0 }
	};
	struct sock_target target;
	struct epoll_event ev, evs[64];
	const char *sock = NULL, *hostport = NULL, *mode = "pipe";
	char *cause = NULL, *b, tube[64];
	double duration = 5, warmup = 0;
	uint64_t count = 0, t_start, t_end = 0;
	unsigned consumers = 1, nconn_conn = 64, i, bytes = 64;
	bool json = false, pipe_mode;
	int ch, n, k, ep;

	while ((ch = getopt_long(argc, argv, "s:H:m:w:C:c:b:d:n:", longopts, NULL)) != -1) {
		switch (ch) {
		case 's': sock = optarg; break;
		case 'H': hostport = optarg; break;
		case 'm': mode = optarg; break;
		case 'w': window = (unsigned)strtoul(optarg, NULL, 10); break;
		case 'C': consumers = (unsigned)strtoul(optarg, NULL, 10); break;
		case 'c': nconn_conn = (unsigned)strtoul(optarg, NULL, 10); break;
		case 'b': bytes = (unsigned)strtoul(optarg, NULL, 10); break;
		case 'd': duration = strtod(optarg, NULL); break;
		case 'n': count = strtoull(optarg, NULL, 10); duration = 0; break;
		case 'W': warmup = strtod(optarg, NULL); break;
		case 'j': json = true; break;
		default:
			fprintf(stderr, "usage: beanstalk-cycle (-s PATH | -H HOST:PORT) "
			    "[-m pipe|conn] [-w N] [-C N] [-c N] [-b BYTES] "
			    "[-d SECONDS | -n COUNT] [--warmup SECONDS] [--json]\n");
			return 64;
		}
	}
	pipe_mode = strcmp(mode, "pipe") == 0;
	if ((!pipe_mode && strcmp(mode, "conn") != 0) || window == 0 ||
	    consumers == 0 || consumers > window || nconn_conn == 0 ||
	    bytes < 16 || (sock == NULL) == (hostport == NULL) ||
	    (duration <= 0 && count == 0))
		die("bad arguments: -m pipe|conn, -w >= -C >= 1, -c >= 1, -b >= 16, "
		    "one of -s/-H, -d > 0 or -n >= 1");
	if ((sock ? sock_target_unix(&target, sock, &cause) :
	    sock_target_tcp(&target, hostport, &cause)) == -1)
		die(cause);
	signal(SIGPIPE, SIG_IGN);
	if (sock_raise_nofile(nconn_conn + 64, &cause) == -1)
		die(cause);

	/* the body starts with the put time in hex (pipe mode reads it back) */
	if ((b = malloc(bytes)) == NULL)
		die("out of memory");
	memset(b, 'x', bytes);
	body = b;
	bodylen = bytes;

	nconns = pipe_mode ? 1 + consumers : nconn_conn;
	if ((conns = calloc(nconns, sizeof *conns)) == NULL)
		die("out of memory");
	ep = epoll_create1(EPOLL_CLOEXEC);
	for (i = 0; i < nconns; i++) {
		struct bconn *c = &conns[i];

		c->fd = sock_connect(&target, 5000, &cause);
		if (c->fd == -1)
			die(cause);
		c->cap = 4 * window + 8;
		c->exp = calloc(c->cap, sizeof *c->exp);
		c->t0 = calloc(c->cap, sizeof *c->t0);
		if (c->exp == NULL || c->t0 == NULL)
			die("out of memory");
		c->producer = !pipe_mode || i == 0;
		c->consumer = !pipe_mode || i > 0;
		ev.events = EPOLLIN;
		ev.data.ptr = c;
		epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev);
	}

	t_now = t_start = hist_now_ns();
	measuring = warmup <= 0;
	/* a tube of the run's own, so no job of an earlier run is taken */
	snprintf(tube, sizeof tube, "cycle-%ld-%" PRIu64, (long)getpid(), t_now);
	for (i = 0; i < nconns; i++) {
		struct bconn *c = &conns[i];
		char cmd[128];

		if (c->producer) {
			snprintf(cmd, sizeof cmd, "use %s\r\n", tube);
			bc_out(c, cmd, strlen(cmd));
			bc_expect(c, EXP_USING, 0);
		}
		if (c->consumer) {
			snprintf(cmd, sizeof cmd, "watch %s\r\nignore default\r\n", tube);
			bc_out(c, cmd, strlen(cmd));
			bc_expect(c, EXP_WATCHING, 0);
			bc_expect(c, EXP_WATCHING, 0);
		}
	}
	if (pipe_mode) {
		for (i = 0; i < window; i++) {
			char stamp[17];

			/* every put carries its own time: rewrite the stamp */
			snprintf(stamp, sizeof stamp, "%016" PRIx64, t_now);
			memcpy(b, stamp, 16);
			bc_put(&conns[0]);
		}
		for (i = 1; i < nconns; i++) {
			unsigned r = window / consumers + (i - 1 < window % consumers);
			unsigned j;

			for (j = 0; j < r; j++)
				bc_reserve(&conns[i], 0);
		}
	} else {
		for (i = 0; i < nconns; i++)
			bc_put(&conns[i]);
	}
	for (i = 0; i < nconns; i++)
		bc_flush(&conns[i]);

	for (;;) {
		n = epoll_wait(ep, evs, 64, 100);
		t_now = hist_now_ns();
		if (!measuring && !stopping &&
		    t_now >= t_start + (uint64_t)(warmup * 1e9)) {
			measuring = true;
			t_start = t_now;
		}
		if (measuring && !stopping &&
		    ((duration > 0 && t_now >= t_start + (uint64_t)(duration * 1e9)) ||
		     (duration <= 0 && cycles >= count))) {
			stopping = true;
			measuring = false;
			t_end = t_now;
		}
		if (stopping)
			break;
		if (pipe_mode) {
			char stamp[17];

			snprintf(stamp, sizeof stamp, "%016" PRIx64, t_now);
			memcpy(b, stamp, 16);
		}
		for (k = 0; k < n; k++) {
			struct bconn *c = evs[k].data.ptr;
			ssize_t r;
			size_t used, off = 0;

			if (c->inlen + 65536 > c->incap) {
				c->incap = c->inlen + 65536;
				if ((c->in = realloc(c->in, c->incap)) == NULL)
					die("out of memory");
			}
			r = read(c->fd, c->in + c->inlen, c->incap - c->inlen);
			if (r <= 0) {
				if (r == -1 && errno == EINTR)
					continue;
				die("beanstalkd closed a connection");
			}
			c->inlen += (size_t)r;
			for (;;) {
				char *saved = c->in;
				size_t savedlen = c->inlen;

				c->in = saved + off;
				c->inlen = savedlen - off;
				used = bc_answer(c, pipe_mode, &conns[0]);
				c->in = saved;
				c->inlen = savedlen;
				if (used == 0)
					break;
				off += used;
			}
			c->inlen -= off;
			memmove(c->in, c->in + off, c->inlen);
			for (i = 0; i < nconns; i++)
				if (conns[i].outlen > 0)
					bc_flush(&conns[i]);
		}
	}
	{
		double elapsed = (double)(t_end - t_start) / 1e9;
		double rate = elapsed > 0 ? (double)cycles / elapsed : 0;

		if (json)
			printf("{\"mode\":\"%s\",\"window\":%u,\"consumers\":%u,"
			    "\"conns\":%u,\"bytes\":%u,\"ok\":%" PRIu64 ",\"elapsed_s\":%.6f,"
			    "\"rate\":%.3f,\"latency_us\":{\"p50\":%.3f,\"p90\":%.3f,"
			    "\"p99\":%.3f,\"p99.9\":%.3f,\"max\":%.3f}}\n", mode, window,
			    consumers, nconns, bytes, cycles, elapsed, rate,
			    hist_quantile(&hist, 0.5) / 1e3, hist_quantile(&hist, 0.9) / 1e3,
			    hist_quantile(&hist, 0.99) / 1e3,
			    hist_quantile(&hist, 0.999) / 1e3, hist.max / 1e3);
		else
			printf("beanstalk-cycle %s: %" PRIu64 " cycles in %.3f s: %.1f/s, "
			    "latency us p50 %.1f p99 %.1f max %.1f\n", mode, cycles,
			    elapsed, rate, hist_quantile(&hist, 0.5) / 1e3,
			    hist_quantile(&hist, 0.99) / 1e3, hist.max / 1e3);
	}
	return 0;
}
