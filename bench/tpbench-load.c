/*
 * tpbench-load.c: one thread, one epoll set, every connection.
 *
 * Each connection has `window` slots; a free slot is filled with a new
 * request at once (a sliding window, not batches). A request's id names its
 * slot, id = generation * nslots + slot, so an answer finds its slot in O(1)
 * however out of order tasks finish, and a stale or foreign id is detected.
 * Requests made in one pass over the ready connections go out in one write
 * per connection; answers are read 64 KiB at a time.
 *
 * Phases: warm-up (not counted), measured (until -d passes or -n requests
 * are done), drain (no new requests; waits up to --drain for the ones in
 * flight, so the server is idle again when tpbench exits).
 */
#include "config.h"

#include <sys/epoll.h>
#include <sys/resource.h>

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tpbench.h"
#include "tpbench-scan.h"

#define LOAD_READ 65536

struct slot {
	uint64_t id;
	uint64_t t0;
	bool busy;
};

struct conn {
	int fd;
	unsigned index;
	bool closed;
	bool want_out;          /* EPOLLOUT registered */
	char *in;
	size_t inlen, incap;
	char *out;
	size_t outoff, outlen, outcap;
	struct slot *slots;
	unsigned *free;         /* stack of free slot numbers */
	unsigned nfree;
};

enum phase { PHASE_WARMUP, PHASE_MEASURE, PHASE_DRAIN, PHASE_DONE };

struct load {
	const struct opts *o;
	struct result *r;
	int ep;
	struct conn *conns;
	uint64_t nslots;
	uint64_t inflight;
	uint64_t done;          /* requests finished in the measured phase */
	enum phase phase;
	uint64_t now, t_start, t_end, t_drain_end;
	struct rusage ru_start, ru_end;
	int live;               /* connections not closed */
};

static void *
load_alloc(size_t n)
{
	void *p = calloc(1, n);

	if (p == NULL) {
		fprintf(stderr, "tpbench: out of memory\n");
		exit(1);
	}
	return p;
}

static void
load_reserve(char **buf, size_t *cap, size_t need)
{
	if (need <= *cap)
		return;
	while (*cap < need)
		*cap = *cap ? *cap * 2 : 4096;
	*buf = realloc(*buf, *cap);
	if (*buf == NULL) {
		fprintf(stderr, "tpbench: out of memory\n");
		exit(1);
	}
}

static bool
load_measuring(const struct load *l)
{
	return l->phase == PHASE_MEASURE;
}

/* Appends one request into a free slot of c. */
static void
load_issue(struct load *l, struct conn *c)
{
	const struct opts *o = l->o;
	unsigned s = c->free[--c->nfree];
	struct slot *slot = &c->slots[s];
	uint64_t global = (uint64_t)c->index * o->window + s;
	char idbuf[32];
	int idlen;

	slot->id = (slot->id / l->nslots + 1) * l->nslots + global;
	slot->t0 = l->now;
	slot->busy = true;
	idlen = snprintf(idbuf, sizeof idbuf, "{\"id\":%" PRIu64, slot->id);
	load_reserve(&c->out, &c->outcap, c->outlen + (size_t)idlen + o->bodylen);
	memcpy(c->out + c->outlen, idbuf, (size_t)idlen);
	memcpy(c->out + c->outlen + idlen, o->body, o->bodylen);
	c->outlen += (size_t)idlen + o->bodylen;
	l->inflight++;
	if (load_measuring(l))
		l->r->sent++;
}

static void
load_watch(struct load *l, struct conn *c, bool out)
{
	struct epoll_event ev;

	if (c->want_out == out)
		return;
	ev.events = EPOLLIN | (out ? EPOLLOUT : 0);
	ev.data.ptr = c;
	epoll_ctl(l->ep, EPOLL_CTL_MOD, c->fd, &ev);
	c->want_out = out;
}

static void
load_close(struct load *l, struct conn *c, const char *why)
{
	unsigned i;

	if (c->closed)
		return;
	if (l->phase != PHASE_DONE)
		fprintf(stderr, "tpbench: connection %u: %s\n", c->index, why);
	for (i = 0; i < l->o->window; i++) {
		if (c->slots[i].busy) {
			c->slots[i].busy = false;
			l->inflight--;
			l->r->lost++;
		}
	}
	epoll_ctl(l->ep, EPOLL_CTL_DEL, c->fd, NULL);
	close(c->fd);
	c->closed = true;
	l->live--;
}

static void
load_flush(struct load *l, struct conn *c)
{
	ssize_t n;

	while (c->outoff < c->outlen) {
		n = write(c->fd, c->out + c->outoff, c->outlen - c->outoff);
		if (n == -1) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN) {
				load_watch(l, c, true);
				return;
			}
			load_close(l, c, strerror(errno));
			return;
		}
		c->outoff += (size_t)n;
	}
	c->outoff = c->outlen = 0;
	load_watch(l, c, false);
}

/* Fills the free slots of c while the phase allows more requests. */
static void
load_fill(struct load *l, struct conn *c)
{
	const struct opts *o = l->o;

	if (c->closed || l->phase == PHASE_DRAIN || l->phase == PHASE_DONE)
		return;
	while (c->nfree > 0) {
		if (o->duration_s == 0 && l->phase == PHASE_MEASURE &&
		    l->r->sent >= o->count)
			break;
		load_issue(l, c);
	}
}

/* One answer line of c. */
static void
load_answer(struct load *l, struct conn *c, const char *p, const char *end)
{
	struct result *r = l->r;
	struct scan_line sl;
	struct slot *slot;
	uint64_t global;
	bool ok = false, measured;

	if (p == end)
		return;
	if (scan_line(p, end, &sl) == -1 || !sl.id_is_uint) {
		r->unmatched++;
		if (scan_is(&sl.event, "error"))
			r->errors++;
		return;
	}
	global = sl.id_uint % l->nslots;
	if (global / l->o->window != c->index ||
	    !(slot = &c->slots[global % l->o->window])->busy ||
	    slot->id != sl.id_uint) {
		r->unmatched++;
		return;
	}
	/* progress events leave the request in flight */
	if (scan_is(&sl.event, "accepted") || scan_is(&sl.event, "started") ||
	    scan_is(&sl.event, "output"))
		return;

	measured = load_measuring(l);
	if (scan_is(&sl.event, "rejected")) {
		if (measured)
			r->rejected++;
	} else if (scan_is(&sl.event, "error")) {
		if (measured)
			r->errors++;
	} else if (scan_is(&sl.event, "done") && !scan_is(&sl.state, "succeeded")) {
		if (measured)
			r->failed++;
	} else
		ok = true;
	if (ok && measured) {
		r->ok++;
		hist_add(&r->hist, l->now - slot->t0);
	}
	if (measured)
		l->done++;
	slot->busy = false;
	c->free[c->nfree++] = (unsigned)(slot - c->slots);
	l->inflight--;
}

static void
load_read(struct load *l, struct conn *c)
{
	char *p, *end, *nl;
	ssize_t n;

	load_reserve(&c->in, &c->incap, c->inlen + LOAD_READ);
	n = read(c->fd, c->in + c->inlen, c->incap - c->inlen);
	if (n == 0) {
		load_close(l, c, "closed by the server");
		return;
	}
	if (n == -1) {
		if (errno != EAGAIN && errno != EINTR)
			load_close(l, c, strerror(errno));
		return;
	}
	c->inlen += (size_t)n;
	l->now = hist_now_ns();
	p = c->in;
	end = c->in + c->inlen;
	while ((nl = memchr(p, '\n', (size_t)(end - p))) != NULL) {
		load_answer(l, c, p, nl);
		p = nl + 1;
	}
	c->inlen = (size_t)(end - p);
	if (c->inlen > 0 && p != c->in)
		memmove(c->in, p, c->inlen);
}

/* Moves between phases as time passes or the count is reached. */
static void
load_advance(struct load *l)
{
	const struct opts *o = l->o;

	if (l->phase == PHASE_WARMUP &&
	    l->now >= l->t_start + (uint64_t)(o->warmup_s * 1e9)) {
		l->phase = PHASE_MEASURE;
		l->t_start = l->now;
		getrusage(RUSAGE_SELF, &l->ru_start);
	}
	if (l->phase == PHASE_MEASURE &&
	    ((o->duration_s > 0 &&
	      l->now >= l->t_start + (uint64_t)(o->duration_s * 1e9)) ||
	     (o->duration_s == 0 && l->done >= o->count))) {
		l->phase = PHASE_DRAIN;
		l->t_end = l->now;
		getrusage(RUSAGE_SELF, &l->ru_end);
		l->t_drain_end = l->now + (uint64_t)(o->drain_s * 1e9);
	}
	if (l->phase == PHASE_DRAIN &&
	    (l->inflight == 0 || l->now >= l->t_drain_end))
		l->phase = PHASE_DONE;
	if (l->live == 0 && l->phase != PHASE_DONE) {
		if (l->phase != PHASE_DRAIN) {
			l->t_end = l->now;
			getrusage(RUSAGE_SELF, &l->ru_end);
		}
		l->phase = PHASE_DONE;
	}
}

static int
load_timeout_ms(const struct load *l)
{
	const struct opts *o = l->o;
	uint64_t until;

	switch (l->phase) {
	case PHASE_WARMUP:
		until = l->t_start + (uint64_t)(o->warmup_s * 1e9);
		break;
	case PHASE_MEASURE:
		if (o->duration_s == 0)
			return 1000;
		until = l->t_start + (uint64_t)(o->duration_s * 1e9);
		break;
	case PHASE_DRAIN:
		until = l->t_drain_end;
		break;
	default:
		return 0;
	}
	if (until <= l->now)
		return 0;
	return (int)((until - l->now) / 1000000) + 1;
}

/* Closes and frees every connection made so far. */
static void
load_free(struct load *l)
{
	unsigned i;

	for (i = 0; l->conns != NULL && i < l->o->conns; i++) {
		struct conn *c = &l->conns[i];

		if (c->fd != -1 && !c->closed)
			close(c->fd);
		free(c->in);
		free(c->out);
		free(c->slots);
		free(c->free);
	}
	free(l->conns);
	if (l->ep != -1)
		close(l->ep);
}

static int
load_connect(struct load *l, char **cause)
{
	const struct opts *o = l->o;
	struct epoll_event ev;
	unsigned i, s;

	l->conns = load_alloc(o->conns * sizeof *l->conns);
	for (i = 0; i < o->conns; i++)
		l->conns[i].fd = -1;
	for (i = 0; i < o->conns; i++) {
		struct conn *c = &l->conns[i];

		c->index = i;
		c->fd = sock_connect(&o->target, o->connect_timeout_ms, cause);
		if (c->fd == -1)
			return -1;
		sock_nonblock(c->fd);
		c->slots = load_alloc(o->window * sizeof *c->slots);
		c->free = load_alloc(o->window * sizeof *c->free);
		for (s = 0; s < o->window; s++)
			c->free[c->nfree++] = o->window - 1 - s;
		ev.events = EPOLLIN;
		ev.data.ptr = c;
		epoll_ctl(l->ep, EPOLL_CTL_ADD, c->fd, &ev);
		l->live++;
	}
	return 0;
}

static double
load_seconds(const struct timeval *tv)
{
	return (double)tv->tv_sec + (double)tv->tv_usec / 1e6;
}

int
load_run(const struct opts *o, struct result *r, char **cause)
{
	struct epoll_event evs[256];
	struct load l;
	unsigned i;
	int n, k;

	memset(&l, 0, sizeof l);
	memset(r, 0, sizeof *r);
	l.o = o;
	l.r = r;
	l.nslots = (uint64_t)o->conns * o->window;
	signal(SIGPIPE, SIG_IGN);
	if (sock_raise_nofile(o->conns + 64, cause) == -1)
		return -1;
	l.ep = epoll_create1(EPOLL_CLOEXEC);
	if (l.ep == -1 || load_connect(&l, cause) == -1) {
		load_free(&l);
		return -1;
	}

	l.now = l.t_start = hist_now_ns();
	l.phase = o->warmup_s > 0 ? PHASE_WARMUP : PHASE_MEASURE;
	getrusage(RUSAGE_SELF, &l.ru_start);
	for (i = 0; i < o->conns; i++) {
		load_fill(&l, &l.conns[i]);
		load_flush(&l, &l.conns[i]);
	}
	while (l.phase != PHASE_DONE) {
		n = epoll_wait(l.ep, evs, 256, load_timeout_ms(&l));
		if (n == -1 && errno != EINTR) {
			if (asprintf(cause, "epoll_wait: %s", strerror(errno)) == -1)
				*cause = NULL;
			load_free(&l);
			return -1;
		}
		l.now = hist_now_ns();
		load_advance(&l);
		for (k = 0; k < n; k++) {
			struct conn *c = evs[k].data.ptr;

			if (!c->closed && (evs[k].events & (EPOLLIN | EPOLLHUP | EPOLLERR)))
				load_read(&l, c);
			load_advance(&l);
			load_fill(&l, c);
			if (!c->closed)
				load_flush(&l, c);
		}
	}
	r->elapsed_s = (double)(l.t_end - l.t_start) / 1e9;
	r->cpu_user_s = load_seconds(&l.ru_end.ru_utime) -
	    load_seconds(&l.ru_start.ru_utime);
	r->cpu_sys_s = load_seconds(&l.ru_end.ru_stime) -
	    load_seconds(&l.ru_start.ru_stime);
	load_free(&l);
	return 0;
}
