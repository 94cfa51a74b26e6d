/*
 * floor: the least a server speaking tpd's framing can do, to compare tpd
 * with. One thread, one epoll set, level-triggered. Each request line gets
 * exactly one answer line carrying its id verbatim:
 *
 *   ping        {"event":"pong","id":ID}
 *   submit      {"event":"done","id":ID,"task":N,"state":"succeeded",
 *                "queued_ms":0,"run_ms":0,"result":TASK}  (TASK: the
 *                request's task object, copied, so echo sizes match)
 *   other ops   {"event":"ok","id":ID}
 *
 * It parses nothing it does not need (a shallow textual scan), reads into
 * one shared buffer, and writes each read's answers in one write. Only a
 * partial line or unsent output is kept per connection, so an idle
 * connection costs a small struct: the floor for memory per connection too.
 *
 * Two more floors, each a mode of the same loop (one epoll thread; each
 * connection read once per pass, its answers of that pass in one write):
 *
 *   -j   the jansson floor: each request line parsed with json_loadb, each
 *        answer built as a jansson object and dumped (json_dumpb), the
 *        shapes above. What tpd --journal off is held to: the least a
 *        one-thread server that really parses its JSON does.
 *   -D FILE  the durable floor (-j, plus): the request lines of one loop
 *        pass (one epoll_wait's worth of reads, every connection) are
 *        appended to FILE with ONE write and ONE fdatasync, and only then
 *        are that pass's answers sent, as Redis's appendfsync always does.
 *        What tpd with its journal (journal_sync = commit) is held to. FILE
 *        is preallocated (posix_fallocate) in segments of 8 MiB, tpd's
 *        journal_segment_size default, as tpd's journal is, so that a sync
 *        writes data, not the file's size: a full segment is followed by a
 *        new one (the directory synced, the old one removed). Put FILE on
 *        the file system of tpd's state_dir (bench/run.py: its temp dir).
 *   -W FILE  the written floor: -D without the fdatasync (each pass's lines
 *        in one write, then its answers), as Redis's appendfsync everysec
 *        does between its syncs. What a per-pass write costs a one-thread
 *        server here: the measure of tpd's journal_sync = interval and none.
 *
 * usage: floor [-j] [-D FILE | -W FILE] [-s PATH] [-l HOST:PORT] [-m MAXCONN]
 * (-m: the open-file limit to raise to, default 16384 + 64)
 * Prints "floor: listening on ..." lines (with the bound TCP port), runs
 * until SIGINT/SIGTERM, then removes its socket file (and -D's segments).
 */
#include "config.h"

#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <netinet/in.h>
#include <netinet/tcp.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "tpbench-scan.h"
#include "tpbench-sock.h"

#define FLOOR_READ 65536
#define FLOOR_OUT_PAUSE (1024 * 1024)   /* stop reading a client that does not */
#define FLOOR_SEGMENT (8 * 1024 * 1024) /* -D: a segment, tpd's journal_segment_size default */

struct fconn {
	int fd;
	char *in;               /* a partial line, or NULL */
	size_t inlen;
	char *out;              /* unsent answers, or NULL */
	size_t outoff, outlen;
	bool paused;
	/* -D: this pass's answers, sent once the pass's lines are synced */
	char *held;
	size_t heldlen, heldcap;
	bool touched;           /* in the pass's list */
	bool dead;              /* closed during the pass: freed at its end */
};

static int ep;
static uint64_t task_seq;
static char rbuf[FLOOR_READ];
static char *obuf;
static size_t olen, ocap;

static bool use_jansson;        /* -j (and -D) */
static const char *log_path;    /* -D */
static int log_fd = -1, log_dirfd = -1;
static bool log_sync = true;        /* -D; -W: false */
static unsigned log_seq;        /* the segment's number: FILE.N */
static off_t log_off;           /* where the next pass's lines go */
static char *lbuf;              /* the pass's request lines */
static size_t llen, lcap;
static struct fconn **touched;  /* connections with answers held this pass */
static size_t ntouched, touched_cap;

static void
floor_fatal(const char *what)
{
	fprintf(stderr, "floor: %s: %s\n", what, strerror(errno));
	exit(1);
}

static void
out_put(const void *p, size_t n)
{
	if (olen + n > ocap) {
		while (olen + n > ocap)
			ocap = ocap ? ocap * 2 : FLOOR_READ * 2;
		obuf = realloc(obuf, ocap);
		if (obuf == NULL)
			floor_fatal("realloc");
	}
	memcpy(obuf + olen, p, n);
	olen += n;
}

#define OUT_LIT(s) out_put((s), sizeof(s) - 1)

static void
grow(char **buf, size_t *cap, size_t need)
{
	if (need <= *cap)
		return;
	while (need > *cap)
		*cap = *cap ? *cap * 2 : FLOOR_READ * 2;
	if ((*buf = realloc(*buf, *cap)) == NULL)
		floor_fatal("realloc");
}

/* -j: one request line parsed by jansson, its answer built and dumped by jansson. */
static void
floor_answer_json(const char *p, const char *end)
{
	json_error_t jerr;
	json_t *req, *ans, *id, *task;
	const char *op;
	size_t n;

	req = json_loadb(p, (size_t)(end - p), 0, &jerr);
	ans = json_object();
	if (ans == NULL)
		floor_fatal("json_object");
	if (req == NULL || !json_is_object(req)) {
		json_t *e = json_object();

		json_object_set_new(ans, "event", json_string("error"));
		json_object_set_new(e, "code", json_string("bad_json"));
		json_object_set_new(e, "message", json_string("not a JSON object"));
		json_object_set_new(ans, "error", e);
	} else {
		op = json_string_value(json_object_get(req, "op"));
		if (op == NULL)
			op = "";
		json_object_set_new(ans, "event", json_string(strcmp(op, "ping") == 0 ? "pong" :
		    strcmp(op, "submit") == 0 ? "done" : "ok"));
		if ((id = json_object_get(req, "id")) != NULL)
			json_object_set(ans, "id", id);
		if (strcmp(op, "submit") == 0) {
			json_object_set_new(ans, "task", json_integer((json_int_t)++task_seq));
			json_object_set_new(ans, "state", json_string("succeeded"));
			json_object_set_new(ans, "queued_ms", json_integer(0));
			json_object_set_new(ans, "run_ms", json_integer(0));
			task = json_object_get(req, "task");
			json_object_set(ans, "result", task != NULL ? task : json_null());
		}
	}
	n = json_dumpb(ans, NULL, 0, JSON_COMPACT);
	grow(&obuf, &ocap, olen + n + 1);
	olen += json_dumpb(ans, obuf + olen, n, JSON_COMPACT);
	obuf[olen++] = '\n';
	json_decref(ans);
	json_decref(req);
}

/* -D: a new preallocated segment FILE.N; the previous one synced away, then removed. */
static void
log_next_segment(void)
{
	char path[4096];
	int e;

	if (log_fd != -1) {
		close(log_fd);
		snprintf(path, sizeof path, "%s.%u", log_path, log_seq);
		unlink(path);
	}
	snprintf(path, sizeof path, "%s.%u", log_path, ++log_seq);
	log_fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (log_fd == -1)
		floor_fatal(path);
	if ((e = posix_fallocate(log_fd, 0, FLOOR_SEGMENT)) != 0) {
		errno = e;
		floor_fatal("posix_fallocate");
	}
	if (fsync(log_fd) == -1 || fsync(log_dirfd) == -1)
		floor_fatal("fsync");
	log_off = 0;
}

static void
log_open(void)
{
	char *dir = strdup(log_path);

	if (dir == NULL)
		floor_fatal("strdup");
	log_dirfd = open(dirname(dir), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (log_dirfd == -1)
		floor_fatal("open the directory of -D");
	free(dir);
	log_next_segment();
}

static void
log_close(void)
{
	char path[4096];

	if (log_fd == -1)
		return;
	close(log_fd);
	snprintf(path, sizeof path, "%s.%u", log_path, log_seq);
	unlink(path);
}

/* -D: the pass's lines in one write and one fdatasync (-W: no fdatasync; a new segment first when full). */
static void
log_sync_pass(void)
{
	size_t off = 0;
	ssize_t n;

	if (llen == 0)
		return;
	if (log_off + (off_t)llen > FLOOR_SEGMENT)
		log_next_segment();
	while (off < llen) {
		n = pwrite(log_fd, lbuf + off, llen - off, log_off + (off_t)off);
		if (n == -1 && errno == EINTR)
			continue;
		if (n <= 0)
			floor_fatal("pwrite");
		off += (size_t)n;
	}
	if (log_sync && fdatasync(log_fd) == -1)
		floor_fatal("fdatasync");
	log_off += (off_t)llen;
	llen = 0;
}

/* One request line; its answer goes to the shared output buffer. */
static void
floor_answer(const char *p, const char *end)
{
	struct scan_line sl;
	char num[32];

	while (p < end && (end[-1] == '\r' || end[-1] == ' '))
		end--;
	if (p == end)
		return;
	if (log_path != NULL) {
		grow(&lbuf, &lcap, llen + (size_t)(end - p) + 1);
		memcpy(lbuf + llen, p, (size_t)(end - p));
		llen += (size_t)(end - p);
		lbuf[llen++] = '\n';
	}
	if (use_jansson) {
		floor_answer_json(p, end);
		return;
	}
	if (scan_line(p, end, &sl) == -1) {
		OUT_LIT("{\"event\":\"error\",\"error\":{\"code\":\"bad_json\","
		    "\"message\":\"not a JSON object\"}}\n");
		return;
	}
	if (scan_is(&sl.op, "ping"))
		OUT_LIT("{\"event\":\"pong\"");
	else if (scan_is(&sl.op, "submit"))
		OUT_LIT("{\"event\":\"done\"");
	else
		OUT_LIT("{\"event\":\"ok\"");
	if (sl.id.p != NULL) {
		OUT_LIT(",\"id\":");
		out_put(sl.id.p, sl.id.len);
	}
	if (scan_is(&sl.op, "submit")) {
		int n = snprintf(num, sizeof num, "%" PRIu64, ++task_seq);

		OUT_LIT(",\"task\":");
		out_put(num, (size_t)n);
		OUT_LIT(",\"state\":\"succeeded\",\"queued_ms\":0,\"run_ms\":0,"
		    "\"result\":");
		if (sl.task.p != NULL)
			out_put(sl.task.p, sl.task.len);
		else
			OUT_LIT("null");
	}
	OUT_LIT("}\n");
}

static void
floor_close(struct fconn *c)
{
	if (c->dead)
		return;
	epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
	close(c->fd);
	c->dead = true;
	if (c->touched)
		return;         /* freed at the pass's end */
	free(c->in);
	free(c->out);
	free(c->held);
	free(c);
}

static void
floor_watch(struct fconn *c)
{
	struct epoll_event ev;

	ev.events = (c->paused ? 0 : EPOLLIN) | (c->out != NULL ? EPOLLOUT : 0);
	ev.data.ptr = c;
	epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
}

/* Writes what is pending; returns -1 when the connection broke. */
static int
floor_flush(struct fconn *c)
{
	bool had = c->out != NULL, paused = c->paused;
	ssize_t n;

	/* whatever waited goes first, then this pass's answers */
	if (c->out != NULL && olen > 0) {
		c->out = realloc(c->out, c->outlen + olen);
		if (c->out == NULL)
			floor_fatal("realloc");
		memcpy(c->out + c->outlen, obuf, olen);
		c->outlen += olen;
		olen = 0;
	}
	if (c->out == NULL && olen > 0) {
		size_t off = 0;

		while (off < olen) {
			n = write(c->fd, obuf + off, olen - off);
			if (n == -1 && errno == EINTR)
				continue;
			if (n == -1 && errno == EAGAIN)
				break;
			if (n == -1) {
				olen = 0;
				return -1;
			}
			off += (size_t)n;
		}
		if (off < olen) {
			c->out = malloc(olen - off);
			if (c->out == NULL)
				floor_fatal("malloc");
			memcpy(c->out, obuf + off, olen - off);
			c->outoff = 0;
			c->outlen = olen - off;
		}
		olen = 0;
	} else if (c->out != NULL) {
		while (c->outoff < c->outlen) {
			n = write(c->fd, c->out + c->outoff, c->outlen - c->outoff);
			if (n == -1 && errno == EINTR)
				continue;
			if (n == -1 && errno == EAGAIN)
				break;
			if (n == -1)
				return -1;
			c->outoff += (size_t)n;
		}
		if (c->outoff == c->outlen) {
			free(c->out);
			c->out = NULL;
			c->outoff = c->outlen = 0;
		}
	}
	c->paused = c->out != NULL && c->outlen - c->outoff > FLOOR_OUT_PAUSE;
	if (had != (c->out != NULL) || paused != c->paused)
		floor_watch(c);
	return 0;
}

/* Answers every complete line in [p, p + n); returns the partial tail's start. */
static const char *
floor_lines(const char *p, size_t n)
{
	const char *end = p + n, *nl;

	while ((nl = memchr(p, '\n', (size_t)(end - p))) != NULL) {
		floor_answer(p, nl);
		p = nl + 1;
	}
	return p;
}

/* Returns -1 when the connection ended. */
static int
floor_read(struct fconn *c)
{
	const char *rest;
	ssize_t n;

	n = read(c->fd, rbuf, sizeof rbuf);
	if (n == -1 && (errno == EAGAIN || errno == EINTR))
		return 0;
	if (n <= 0)
		return -1;
	if (c->in != NULL) {
		/* finish the kept partial line first */
		c->in = realloc(c->in, c->inlen + (size_t)n);
		if (c->in == NULL)
			floor_fatal("realloc");
		memcpy(c->in + c->inlen, rbuf, (size_t)n);
		c->inlen += (size_t)n;
		rest = floor_lines(c->in, c->inlen);
		c->inlen -= (size_t)(rest - c->in);
		if (c->inlen == 0) {
			free(c->in);
			c->in = NULL;
		} else
			memmove(c->in, rest, c->inlen);
	} else {
		rest = floor_lines(rbuf, (size_t)n);
		if (rest < rbuf + n) {
			c->inlen = (size_t)(rbuf + n - rest);
			c->in = malloc(c->inlen);
			if (c->in == NULL)
				floor_fatal("malloc");
			memcpy(c->in, rest, c->inlen);
		}
	}
	if (log_path != NULL) {
		/* held until the pass's lines are synced (floor_pass_end) */
		if (olen > 0) {
			grow(&c->held, &c->heldcap, c->heldlen + olen);
			memcpy(c->held + c->heldlen, obuf, olen);
			c->heldlen += olen;
			olen = 0;
			if (!c->touched) {
				if (ntouched == touched_cap) {
					touched_cap = touched_cap ? touched_cap * 2 : 64;
					touched = realloc(touched, touched_cap * sizeof *touched);
					if (touched == NULL)
						floor_fatal("realloc");
				}
				touched[ntouched++] = c;
				c->touched = true;
			}
		}
		return 0;
	}
	return floor_flush(c);
}

/* -D: the pass ended: its lines synced, then its answers sent (one write per connection). */
static void
floor_pass_end(void)
{
	log_sync_pass();
	for (size_t i = 0; i < ntouched; i++) {
		struct fconn *c = touched[i];

		c->touched = false;
		if (c->dead) {
			free(c->in);
			free(c->out);
			free(c->held);
			free(c);
			continue;
		}
		grow(&obuf, &ocap, c->heldlen);
		memcpy(obuf, c->held, c->heldlen);
		olen = c->heldlen;
		c->heldlen = 0;
		if (floor_flush(c) == -1)
			floor_close(c);
	}
	ntouched = 0;
}

static void
floor_accept(int lfd, bool tcp)
{
	struct epoll_event ev;
	struct fconn *c;
	int fd, one = 1;

	for (;;) {
		fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd == -1) {
			if (errno != EAGAIN && errno != EINTR)
				fprintf(stderr, "floor: accept: %s\n", strerror(errno));
			return;
		}
		if (tcp)
			setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
		c = calloc(1, sizeof *c);
		if (c == NULL)
			floor_fatal("calloc");
		c->fd = fd;
		ev.events = EPOLLIN;
		ev.data.ptr = c;
		epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
	}
}

static void
usage(void)
{
	fprintf(stderr, "usage: floor [-j] [-D FILE | -W FILE] [-s PATH] [-l HOST:PORT] [-m MAXCONN]\n");
	exit(64);
}

int
main(int argc, char **argv)
{
	struct sock_target unix_t, tcp_t;
	struct epoll_event ev, evs[256];
	/* the listeners and the signal fd are told apart by these markers */
	static char mark_unix, mark_tcp, mark_sig;
	const char *path = NULL, *hostport = NULL;
	char *cause = NULL;
	sigset_t set;
	long maxconn = 16384;
	int ch, n, k, ufd = -1, tfd = -1, sfd;

	while ((ch = getopt(argc, argv, "jD:W:s:l:m:")) != -1) {
		switch (ch) {
		case 'j':
			use_jansson = true;
			break;
		case 'D':
		case 'W':
			log_path = optarg;
			log_sync = ch == 'D';
			use_jansson = true;
			break;
		case 's':
			path = optarg;
			break;
		case 'l':
			hostport = optarg;
			break;
		case 'm':
			maxconn = strtol(optarg, NULL, 10);
			if (maxconn < 1)
				usage();
			break;
		default:
			usage();
		}
	}
	if (optind != argc || (path == NULL && hostport == NULL))
		usage();
	signal(SIGPIPE, SIG_IGN);
	if (log_path != NULL)
		log_open();
	/* short of the limit asked, the floor runs with what it got */
	if (sock_raise_nofile((rlim_t)maxconn + 64, &cause) == -1)
		fprintf(stderr, "floor: warning: %s\n", cause);
	ep = epoll_create1(EPOLL_CLOEXEC);
	if (ep == -1)
		floor_fatal("epoll_create1");
	if (path != NULL) {
		if (sock_target_unix(&unix_t, path, &cause) == -1 ||
		    (ufd = sock_listen(&unix_t, &cause)) == -1) {
			fprintf(stderr, "floor: %s\n", cause);
			return 1;
		}
		ev.events = EPOLLIN;
		ev.data.ptr = &mark_unix;
		epoll_ctl(ep, EPOLL_CTL_ADD, ufd, &ev);
		printf("floor: listening on %s\n", unix_t.name);
	}
	if (hostport != NULL) {
		if (sock_target_tcp(&tcp_t, hostport, &cause) == -1 ||
		    (tfd = sock_listen(&tcp_t, &cause)) == -1) {
			fprintf(stderr, "floor: %s\n", cause);
			return 1;
		}
		ev.events = EPOLLIN;
		ev.data.ptr = &mark_tcp;
		epoll_ctl(ep, EPOLL_CTL_ADD, tfd, &ev);
		printf("floor: listening on %s port %d\n", tcp_t.name, sock_port(tfd));
	}
	fflush(stdout);

	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	sigprocmask(SIG_BLOCK, &set, NULL);
	sfd = signalfd(-1, &set, SFD_CLOEXEC);
	ev.events = EPOLLIN;
	ev.data.ptr = &mark_sig;
	epoll_ctl(ep, EPOLL_CTL_ADD, sfd, &ev);

	for (;;) {
		n = epoll_wait(ep, evs, 256, -1);
		if (n == -1 && errno != EINTR)
			floor_fatal("epoll_wait");
		for (k = 0; k < n; k++) {
			void *p = evs[k].data.ptr;
			struct fconn *c = p;

			if (p == &mark_sig)
				goto out;
			if (p == &mark_unix || p == &mark_tcp) {
				floor_accept(p == &mark_unix ? ufd : tfd, p == &mark_tcp);
				continue;
			}
			if ((evs[k].events & EPOLLOUT) && floor_flush(c) == -1) {
				floor_close(c);
				continue;
			}
			if ((evs[k].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) &&
			    !c->paused && !c->dead && floor_read(c) == -1)
				floor_close(c);
		}
		if (log_path != NULL)
			floor_pass_end();
	}
out:
	if (path != NULL)
		unlink(path);
	log_close();
	return 0;
}
