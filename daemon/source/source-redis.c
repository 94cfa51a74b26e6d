/*
 * source-redis.c: tasks from a Redis stream, read through a consumer group
 * (source-redis.h has the contract; tpd.conf(5) the settings).
 *
 * hiredis's asynchronous API, on the daemon's libevent loop, over two
 * connections: the reader carries nothing but XREADGROUP ... BLOCK, so a
 * read blocked in Redis never holds up the writer, which carries the
 * setup (XGROUP CREATE, TYPE), the results (MULTI, XADD, XACK, EXEC), the
 * claims (XAUTOCLAIM, XPENDING) and the refreshes (XCLAIM JUSTID).
 * Debian 12's hiredis (0.14) has no timeouts of its own: every connection
 * has a deadline timer, armed while it owes replies, that gives up on it.
 *
 * An entry, once read, is a struct rs_entry in the table of entries this
 * source holds, keyed by its stream id, from the read until its result is
 * written (or it is given up to another consumer):
 *
 *   read / claimed --> CLAIMING (claimed: XPENDING gives the delivery count)
 *                  --> HELD (no room after all) --> RUNNING --> DONE --> WRITING --> freed
 *                  \--> DONE (bad entry, dead letter) ------^
 *
 * Every entry in the table but CLAIMING ones has its claim refreshed
 * every claim_idle/3, so that no other consumer takes it while it is
 * here. A failure of either connection (an error, an unexpected reply, a
 * deadline) drops both and reconnects after a backoff; entries WRITING go
 * back to DONE and are written again once connected, CLAIMING ones are
 * forgotten (still pending in Redis: claimed again later).
 *
 * hiredis calls a command's callback with a NULL reply when its context
 * goes away (freed by us, or lost). Those callbacks only undo their own
 * bookkeeping: a failure is acted on by whoever saw it first (the
 * disconnect callback, a deadline, a bad reply), through rs_fail, which
 * is safe inside a hiredis callback (hiredis defers freeing the context
 * whose callback is running).
 */
#include "config.h"

#include <sys/queue.h>

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>
#include <hiredis/async.h>
#include <hiredis/adapters/libevent.h>

#include "base/log.h"
#include "pool/pool.h"
#include "proto/proto.h"
#include "source-redis.h"
#include "units.h"
#include "base/utf8.h"
#include "wire.h"

#define RS_BLOCK_MS 2000        /* how long one XREADGROUP waits for entries */
#define RS_READ_MAX 100        /* entries one XREADGROUP asks for at most */
#define RS_CLAIM_MAX 100        /* entries one XAUTOCLAIM claims at most */
#define RS_BATCH_MAX 256        /* results in one MULTI/EXEC */
#define RS_REFRESH_MAX 1000     /* ids in one XCLAIM */
#define RS_POLL_MS 100          /* with no room and nothing read, look again this often */
#define RS_BACKOFF_MIN_MS 100

enum rs_state {
	RS_CONNECTING,          /* first connection, not yet up */
	RS_UP,                  /* connected and set up */
	RS_DOWN,                /* an outage: waiting to reconnect, or reconnecting */
};

enum rs_where {
	RS_CLAIMING,            /* claimed, waiting for its delivery count */
	RS_HELD,                /* read, waiting for room in the pool */
	RS_RUNNING,             /* a task of the daemon */
	RS_DONE,                /* its result waits to be written */
	RS_WRITING,             /* in a MULTI/EXEC not yet answered */
};

struct source_redis;

struct rs_entry {
	struct source_redis *s;         /* NULL once the source is freed under a running task */
	char *id;                       /* the stream entry's id */
	enum rs_where where;
	unsigned attempt;               /* its delivery count */
	char *client_id;                /* the entry's own "id" field, or NULL */
	size_t client_id_len;
	json_t *spec;                   /* the task, while HELD */
	char *label;
	uint64_t queue_timeout_ms;
	char *task_text;                /* the task field as read (for a dead letter) */
	size_t task_len;
	char *done;                     /* the done event's text, once DONE */
	size_t done_len;
	char *dead_reason;              /* set: goes to the dead-letter stream too */
	char *bad;                      /* a claimed entry that is not a task: why */
	struct rs_entry *hnext;         /* in the table's bucket */
	TAILQ_ENTRY(rs_entry) link;     /* in held or done, by where */
};

TAILQ_HEAD(rs_list, rs_entry);

/* One of the two connections. */
struct rs_conn {
	struct source_redis *s;
	const char *role;               /* "reader" or "writer", for messages */
	redisAsyncContext *ac;          /* NULL when not connected */
	unsigned owed;                  /* replies not yet in */
	uint64_t progress_us;           /* when the last reply came, or the first was owed */
	uint64_t slack_ms;              /* beyond timeout: the reader's BLOCK */
	struct event *deadline;
};

/* A MULTI/EXEC of results in flight. */
struct rs_batch {
	struct source_redis *s;
	size_t n;
	struct rs_entry *e[RS_BATCH_MAX];
};

struct source_redis {
	struct conf_source conf;        /* a copy, owned */
	struct source_host host;
	struct event_base *base;
	char owner[8 + CONF_POOL_NAME_MAX];

	/* where Redis is */
	bool is_unix;
	char *path;
	char host_name[256];
	int port;

	enum rs_state state;
	struct rs_conn rd, wr;
	unsigned setup_owed;            /* setup replies still to come */
	bool setup_failed;
	bool reading;                   /* an XREADGROUP is out */
	unsigned asked;                 /* what it asked for */
	bool claiming;                  /* an XAUTOCLAIM is out */
	char claim_cursor[48];
	char history[48];               /* reading its own pending entries from here; "": not */
	unsigned backoff_ms;
	uint64_t outage_since_us;       /* 0: no outage */
	unsigned attempts;              /* connection attempts in this outage */

	bool stopping, stop_now;
	source_redis_idle_fn idle_fn;
	void *idle_arg;
	bool idle_told;

	/* the entries held, by id */
	struct rs_entry **buckets;
	size_t nbuckets, nentries;
	struct rs_list held, done;
	size_t nheld, ndone, nwriting;

	struct event *work_ev;          /* deferred: write results, read, tell idle */
	struct event *retry_ev;
	struct event *claim_ev;
	struct event *refresh_ev;
	struct event *poll_ev;

	/* figures */
	uint64_t nread, nacked, nclaimed, ndead, nbad, nreconnects;
	char last_error[256];
	bool have_error;
};

static void rs_fail(struct source_redis *, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void rs_schedule(struct source_redis *);
static void rs_connect(struct source_redis *);
static void rs_up(struct source_redis *);
static void rs_submit(struct source_redis *, struct rs_entry *);
static void rs_done_bad(struct source_redis *, struct rs_entry *, const char *state,
    const char *code, const char *fmt, ...) __attribute__((format(printf, 5, 6)));

static uint64_t
ms_since(uint64_t us)
{
	return (clock_now_us() - us) / 1000;
}

static void
tv_ms(struct timeval *tv, uint64_t ms)
{
	tv->tv_sec = (time_t)(ms / 1000);
	tv->tv_usec = (suseconds_t)(ms % 1000) * 1000;
}

/* ---------------------------------------------------------------- the table */

static size_t
rs_hash(const char *id, size_t nbuckets)
{
	uint64_t h = 1469598103934665603ULL;

	for (; *id != '\0'; id++)
		h = (h ^ (unsigned char)*id) * 1099511628211ULL;
	return (size_t)h & (nbuckets - 1);
}

static struct rs_entry *
rs_find(const struct source_redis *s, const char *id)
{
	struct rs_entry *e;

	if (s->nbuckets == 0)
		return NULL;
	for (e = s->buckets[rs_hash(id, s->nbuckets)]; e != NULL; e = e->hnext)
		if (strcmp(e->id, id) == 0)
			return e;
	return NULL;
}

static int
rs_table_add(struct source_redis *s, struct rs_entry *e)
{
	size_t h;

	if (s->nentries >= s->nbuckets) {
		size_t n = s->nbuckets ? s->nbuckets * 2 : 64;
		struct rs_entry **b = calloc(n, sizeof *b);

		if (b == NULL)
			return -1;
		for (size_t i = 0; i < s->nbuckets; i++) {
			struct rs_entry *x, *next;
			for (x = s->buckets[i]; x != NULL; x = next) {
				size_t k = rs_hash(x->id, n);
				next = x->hnext;
				x->hnext = b[k];
				b[k] = x;
			}
		}
		free(s->buckets);
		s->buckets = b;
		s->nbuckets = n;
	}
	h = rs_hash(e->id, s->nbuckets);
	e->hnext = s->buckets[h];
	s->buckets[h] = e;
	s->nentries++;
	return 0;
}

static void
rs_table_remove(struct source_redis *s, struct rs_entry *e)
{
	struct rs_entry **p = &s->buckets[rs_hash(e->id, s->nbuckets)];

	for (; *p != NULL; p = &(*p)->hnext)
		if (*p == e) {
			*p = e->hnext;
			s->nentries--;
			return;
		}
}

static void
rs_entry_free(struct rs_entry *e)
{
	free(e->id);
	free(e->client_id);
	json_decref(e->spec);
	free(e->label);
	free(e->task_text);
	free(e->done);
	free(e->dead_reason);
	free(e->bad);
	free(e);
}

/* Takes e off its list (held, done) if it is on one. */
static void
rs_unlist(struct source_redis *s, struct rs_entry *e)
{
	if (e->where == RS_HELD) {
		TAILQ_REMOVE(&s->held, e, link);
		s->nheld--;
	} else if (e->where == RS_DONE) {
		TAILQ_REMOVE(&s->done, e, link);
		s->ndone--;
	}
}

/* Forgets e: out of the table and freed. Its stream entry, if not acked, stays pending. */
static void
rs_forget(struct source_redis *s, struct rs_entry *e)
{
	rs_unlist(s, e);
	rs_table_remove(s, e);
	rs_entry_free(e);
	rs_schedule(s);         /* maybe idle now */
}

/* e's result waits to be written: at the end of done, or at its head (a write to do again). */
static void
rs_set_done(struct source_redis *s, struct rs_entry *e, bool first)
{
	rs_unlist(s, e);
	e->where = RS_DONE;
	if (first)
		TAILQ_INSERT_HEAD(&s->done, e, link);
	else
		TAILQ_INSERT_TAIL(&s->done, e, link);
	s->ndone++;
	rs_schedule(s);
}

/* ---------------------------------------------------------------- commands */

/*
 * A command's words, gathered in one buffer as they are added and handed
 * to hiredis (redisAsyncCommandArgv, which writes Redis's protocol) with
 * their lengths, so that a word may hold any bytes.
 */
struct rs_args {
	char *p;                /* the words, one after another */
	size_t len, cap;
	size_t *off;            /* where each word starts in p, and its length */
	size_t *wlen;
	const char **argv;      /* built at send: p moves while words are added */
	int n, wcap;            /* words so far, and room for them */
	bool failed;
};

static void
args_init(struct rs_args *a)
{
	memset(a, 0, sizeof *a);
}

static void
args_free(struct rs_args *a)
{
	free(a->p);
	free(a->off);
	free(a->wlen);
	free(a->argv);
}

/* Starts another command in the same buffer. */
static void
args_reset(struct rs_args *a)
{
	a->len = 0;
	a->n = 0;
}

/* Room for n more bytes and one more word; false when memory ran out. */
static bool
args_room(struct rs_args *a, size_t n)
{
	if (a->failed)
		return false;
	if (a->len + n > a->cap) {
		size_t cap = a->cap ? a->cap : 512;
		char *p;

		while (a->len + n > cap)
			cap *= 2;
		if ((p = realloc(a->p, cap)) == NULL)
			goto fail;
		a->p = p;
		a->cap = cap;
	}
	if (a->n == a->wcap) {
		int wcap = a->wcap ? a->wcap * 2 : 16;
		size_t *off, *wlen;
		const char **argv;

		if ((off = reallocarray(a->off, (size_t)wcap, sizeof *off)) == NULL)
			goto fail;
		a->off = off;
		if ((wlen = reallocarray(a->wlen, (size_t)wcap, sizeof *wlen)) == NULL)
			goto fail;
		a->wlen = wlen;
		if ((argv = reallocarray(a->argv, (size_t)wcap, sizeof *argv)) == NULL)
			goto fail;
		a->argv = argv;
		a->wcap = wcap;
	}
	return true;
fail:
	a->failed = true;
	return false;
}

static void
args_mem(struct rs_args *a, const char *s, size_t n)
{
	if (!args_room(a, n))
		return;
	memcpy(a->p + a->len, s, n);
	a->off[a->n] = a->len;
	a->wlen[a->n] = n;
	a->len += n;
	a->n++;
}

static void
args_str(struct rs_args *a, const char *s)
{
	args_mem(a, s, strlen(s));
}

static void
args_u64(struct rs_args *a, unsigned long long v)
{
	char num[24];

	args_mem(a, num, (size_t)snprintf(num, sizeof num, "%llu", v));
}

/*
 * The deadline: armed when c starts to owe replies, and left alone as they
 * come (a timer per reply would cost more than the reply); when it fires
 * it looks at the last reply's time and waits on if that was recent.
 */
static void
conn_deadline(struct rs_conn *c, uint64_t after_ms)
{
	struct timeval tv;

	tv_ms(&tv, after_ms);
	evtimer_add(c->deadline, &tv);
}

/*
 * Sends a command on c; fn gets its reply (privdata arg). Returns 0, or -1
 * when it could not be queued (the source has failed then).
 */
static int
conn_send(struct rs_conn *c, redisCallbackFn *fn, void *arg, struct rs_args *a)
{
	struct source_redis *s = c->s;

	if (a->failed || a->n == 0) {
		rs_fail(s, "out of memory building a command");
		return -1;
	}
	if (c->ac == NULL)
		return -1;
	for (int i = 0; i < a->n; i++)
		a->argv[i] = a->p + a->off[i];
	if (redisAsyncCommandArgv(c->ac, fn, arg, a->n, a->argv, a->wlen) != REDIS_OK) {
		rs_fail(s, "%s: cannot send a command: %s", c->role,
		    c->ac != NULL && c->ac->errstr != NULL ? c->ac->errstr : "out of memory");
		return -1;
	}
	if (c->owed++ == 0) {
		c->progress_us = clock_now_us();
		if (!evtimer_pending(c->deadline, NULL))
			conn_deadline(c, s->conf.timeout_ms + c->slack_ms);
	}
	return 0;
}

/*
 * The start of every reply callback: the connection it came on, or NULL
 * when the reply is NULL (the context is going away) or stale (from a
 * context already dropped).
 */
static struct rs_conn *
conn_replied(redisAsyncContext *ac, void *reply)
{
	struct rs_conn *c = ac->data;

	if (reply == NULL || c == NULL || c->ac != ac)
		return NULL;
	if (c->owed > 0)
		c->owed--;
	c->progress_us = clock_now_us();
	return c;
}

/* For the commands inside a MULTI, whose answers EXEC carries. */
static void
ignore_cb(redisAsyncContext *ac, void *reply, void *arg)
{
	conn_replied(ac, reply);
}

static void
deadline_cb(evutil_socket_t fd, short what, void *arg)
{
	struct rs_conn *c = arg;
	uint64_t limit = c->s->conf.timeout_ms + c->slack_ms, quiet;
	char d[32];

	if (c->ac == NULL || c->owed == 0)
		return;
	if ((quiet = ms_since(c->progress_us)) < limit) {
		conn_deadline(c, limit - quiet);
		return;
	}
	rs_fail(c->s, "%s: no answer from Redis within %s", c->role,
	    units_format_duration(limit, d, sizeof d));
}

/* Drops c's context (its callbacks run with NULL replies, now or once the running one returns). */
static void
conn_drop(struct rs_conn *c)
{
	redisAsyncContext *ac = c->ac;

	c->ac = NULL;
	c->owed = 0;
	evtimer_del(c->deadline);
	if (ac != NULL)
		redisAsyncFree(ac);
}

static void
connect_cb(const redisAsyncContext *ac, int status)
{
	struct rs_conn *c = ac->data;

	if (status == REDIS_OK || c == NULL || c->ac != ac)
		return;
	c->ac = NULL;           /* hiredis frees it when this returns */
	rs_fail(c->s, "%s: cannot connect: %s", c->role,
	    ac->errstr != NULL ? ac->errstr : "error");
}

static void
disconnect_cb(const redisAsyncContext *ac, int status)
{
	struct rs_conn *c = ac->data;

	if (c == NULL || c->ac != ac)
		return;         /* one we dropped */
	c->ac = NULL;           /* being freed */
	c->owed = 0;
	evtimer_del(c->deadline);
	rs_fail(c->s, "%s: connection lost: %s", c->role,
	    ac->err != 0 && ac->errstr != NULL ? ac->errstr : "closed by the server");
}

/* Opens c; -1 (the source has failed) when it cannot even start. */
static int
conn_open(struct rs_conn *c)
{
	struct source_redis *s = c->s;
	redisAsyncContext *ac;

	ac = s->is_unix ? redisAsyncConnectUnix(s->path) :
	    redisAsyncConnect(s->host_name, s->port);
	if (ac == NULL) {
		rs_fail(s, "%s: cannot connect: out of memory", c->role);
		return -1;
	}
	if (ac->err != 0) {
		rs_fail(s, "%s: cannot connect: %s", c->role, ac->errstr);
		redisAsyncFree(ac);
		return -1;
	}
	if (!s->is_unix)
		redisEnableKeepAlive(&ac->c);   /* a peer that vanished is noticed */
	ac->data = c;
	if (redisLibeventAttach(ac, s->base) != REDIS_OK) {
		redisAsyncFree(ac);
		rs_fail(s, "%s: cannot attach to the event loop", c->role);
		return -1;
	}
	redisAsyncSetConnectCallback(ac, connect_cb);
	redisAsyncSetDisconnectCallback(ac, disconnect_cb);
	c->ac = ac;
	c->owed = 0;
	return 0;
}

/* ---------------------------------------------------------------- failure */

static void
retry_cb(evutil_socket_t fd, short what, void *arg)
{
	rs_connect(arg);
}

static void
rs_set_error(struct source_redis *s, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0)));

static void
rs_set_error(struct source_redis *s, const char *fmt, va_list ap)
{
	utf8_vformat(s->last_error, sizeof s->last_error, fmt, ap);
	s->have_error = true;
}

/*
 * Either connection failed: both are dropped, what was in flight on them
 * is put back, and a reconnect is set up after the backoff. The first
 * failure of an outage is logged as a warning, the rest at debug level.
 */
static void
rs_fail(struct source_redis *s, const char *fmt, ...)
{
	struct timeval tv;
	va_list ap;
	char d[32];

	if (s->idle_told)
		return;         /* stopped for good */
	va_start(ap, fmt);
	rs_set_error(s, fmt, ap);
	va_end(ap);
	if (s->state == RS_DOWN && s->rd.ac == NULL && s->wr.ac == NULL &&
	    evtimer_pending(s->retry_ev, NULL))
		return;         /* already down and waiting */
	if (s->outage_since_us == 0) {
		s->outage_since_us = clock_now_us();
		log_warnx("source %s: redis %s: %s; retrying with backoff (up to %s), "
		    "local submits go on", s->conf.name, s->conf.redis, s->last_error,
		    units_format_duration(s->conf.backoff_max_ms, d, sizeof d));
	} else
		log_debug("source %s: redis %s: %s", s->conf.name, s->conf.redis, s->last_error);
	s->state = RS_DOWN;
	conn_drop(&s->rd);
	conn_drop(&s->wr);
	s->reading = false;
	s->asked = 0;
	s->claiming = false;
	s->setup_owed = 0;
	evtimer_del(s->claim_ev);
	evtimer_del(s->refresh_ev);
	evtimer_del(s->poll_ev);
	if (s->backoff_ms == 0)
		s->backoff_ms = RS_BACKOFF_MIN_MS;
	tv_ms(&tv, s->backoff_ms);
	evtimer_add(s->retry_ev, &tv);
	s->backoff_ms = s->backoff_ms * 2 > s->conf.backoff_max_ms ?
	    (unsigned)s->conf.backoff_max_ms : s->backoff_ms * 2;
}

/* ---------------------------------------------------------------- setup */

static void
setup_cb(redisAsyncContext *ac, void *r, void *arg)
{
	struct source_redis *s = arg;
	redisReply *reply = r;
	const char *what = "";

	if (conn_replied(ac, r) == NULL)
		return;
	if (s->setup_owed == 0)
		return;
	s->setup_owed--;
	if (reply->type == REDIS_REPLY_ERROR) {
		/* the group exists already: fine */
		if (strncmp(reply->str, "BUSYGROUP", 9) != 0) {
			s->setup_failed = true;
			rs_fail(s, "XGROUP CREATE %s %s: %s", s->conf.stream, s->conf.group,
			    reply->str);
			return;
		}
	} else if (reply->type == REDIS_REPLY_STATUS && s->setup_owed < 2) {
		/* TYPE of results, then of dead_letter: a stream, or nothing yet */
		what = s->setup_owed == 1 ? s->conf.results : s->conf.dead_letter;
		if (strcmp(reply->str, "none") != 0 && strcmp(reply->str, "stream") != 0) {
			s->setup_failed = true;
			rs_fail(s, "%s holds a %s, not a stream: results and dead letters "
			    "cannot be written there", what, reply->str);
			return;
		}
	}
	if (s->setup_owed == 0 && !s->setup_failed)
		rs_up(s);
}

static void
rs_connect(struct source_redis *s)
{
	struct rs_args a;

	if (s->rd.ac != NULL || s->wr.ac != NULL)
		return;
	s->attempts++;
	if (s->stopping && s->nentries == 0)
		return;         /* nothing left to write: no need for Redis */
	if (conn_open(&s->wr) == -1 || (!s->stopping && conn_open(&s->rd) == -1))
		return;
	/* queued until connected; the deadline covers the connect too */
	s->setup_owed = 3;
	s->setup_failed = false;
	args_init(&a);
	args_str(&a, "XGROUP");
	args_str(&a, "CREATE");
	args_str(&a, s->conf.stream);
	args_str(&a, s->conf.group);
	args_str(&a, "0");
	args_str(&a, "MKSTREAM");
	if (conn_send(&s->wr, setup_cb, s, &a) == 0) {
		args_reset(&a);
		args_str(&a, "TYPE");
		args_str(&a, s->conf.results);
		if (conn_send(&s->wr, setup_cb, s, &a) == 0) {
			args_reset(&a);
			args_str(&a, "TYPE");
			args_str(&a, s->conf.dead_letter);
			conn_send(&s->wr, setup_cb, s, &a);
		}
	}
	args_free(&a);
}

/* Every entry but those being claimed keeps its claim: XCLAIM ... 0 ids JUSTID. */
static void
refresh_claims(struct source_redis *s)
{
	struct rs_args a;
	int base, n = 0;
	size_t base_len;

	if (s->state != RS_UP || s->nentries == 0)
		return;
	args_init(&a);
	args_str(&a, "XCLAIM");
	args_str(&a, s->conf.stream);
	args_str(&a, s->conf.group);
	args_str(&a, s->conf.consumer);
	args_str(&a, "0");
	base = a.n;
	base_len = a.len;
	for (size_t i = 0; i < s->nbuckets; i++) {
		for (struct rs_entry *e = s->buckets[i]; e != NULL; e = e->hnext) {
			if (e->where == RS_CLAIMING)
				continue;
			args_str(&a, e->id);
			if (++n == RS_REFRESH_MAX) {
				args_str(&a, "JUSTID");
				if (conn_send(&s->wr, ignore_cb, NULL, &a) == -1)
					goto out;
				a.n = base;     /* the same first words, other ids */
				a.len = base_len;
				n = 0;
			}
		}
	}
	if (n > 0) {
		args_str(&a, "JUSTID");
		conn_send(&s->wr, ignore_cb, NULL, &a);
	}
out:
	args_free(&a);
}

static void
refresh_cb(evutil_socket_t fd, short what, void *arg)
{
	struct source_redis *s = arg;
	struct timeval tv;

	refresh_claims(s);
	if (s->state == RS_UP) {
		tv_ms(&tv, s->conf.claim_idle_ms / 3 > 0 ? s->conf.claim_idle_ms / 3 : 1);
		evtimer_add(s->refresh_ev, &tv);
	}
}

static void
claim_timer(struct source_redis *s)
{
	struct timeval tv;

	tv_ms(&tv, s->conf.claim_idle_ms / 2 > 50 ? s->conf.claim_idle_ms / 2 : 50);
	evtimer_add(s->claim_ev, &tv);
}

/* Connected and set up: claims refreshed first, then results written, then reads. */
static void
rs_up(struct source_redis *s)
{
	struct timeval tv;

	if (s->outage_since_us != 0) {
		log_notice("source %s: redis %s reachable again after %.1f s", s->conf.name,
		    s->conf.redis, ms_since(s->outage_since_us) / 1000.0);
		s->nreconnects++;
	} else
		log_info("source %s: reading %s as %s/%s from redis %s into pool %s",
		    s->conf.name, s->conf.stream, s->conf.group, s->conf.consumer,
		    s->conf.redis, s->conf.pool);
	s->outage_since_us = 0;
	s->attempts = 0;
	s->backoff_ms = 0;
	s->state = RS_UP;
	/*
	 * Its own pending entries first: a read whose answer was lost with the
	 * connection (or a life of this consumer before a restart) left
	 * entries pending here that it never saw. They run now, not after
	 * claim_idle.
	 */
	snprintf(s->history, sizeof s->history, "0");
	refresh_claims(s);
	tv_ms(&tv, s->conf.claim_idle_ms / 3 > 0 ? s->conf.claim_idle_ms / 3 : 1);
	evtimer_add(s->refresh_ev, &tv);
	if (!s->stopping)
		claim_timer(s);
	rs_schedule(s);
}

/* ---------------------------------------------------------------- entries */

/* Bytes of a field name or value as a message shows them (at most 40, escaped). */
static const char *
show(char *buf, size_t size, const char *p, size_t n)
{
	size_t o = 0;

	for (size_t i = 0; i < n && o + 5 < size; i++) {
		unsigned char ch = (unsigned char)p[i];
		if (i == 40) {
			o += (size_t)snprintf(buf + o, size - o, "...");
			break;
		}
		if (ch >= 0x20 && ch < 0x7f && ch != '"' && ch != '\\')
			buf[o++] = (char)ch;
		else
			o += (size_t)snprintf(buf + o, size - o, "\\x%02x", ch);
	}
	buf[o] = '\0';
	return buf;
}

static char *
memdup0(const char *p, size_t n)
{
	char *d = malloc(n + 1);

	if (d != NULL) {
		memcpy(d, p, n);
		d[n] = '\0';
	}
	return d;
}

static bool
field_is(const redisReply *r, const char *name)
{
	return r->type == REDIS_REPLY_STRING && r->len == strlen(name) &&
	    memcmp(r->str, name, r->len) == 0;
}

/*
 * The fields of an entry, checked: task (JSON text of an object), and
 * optionally id, label and queue_timeout_ms. Fills e; returns 0, or -1
 * with a message in why (the entry is bad: failed, bad_request).
 */
static int
entry_parse(struct rs_entry *e, const redisReply *fields, bool keep_text, char *why,
    size_t whylen)
{
	const redisReply *task = NULL, *label = NULL, *qt = NULL, *cid = NULL;
	char b[200];
	json_error_t err;

	if (fields == NULL || fields->type != REDIS_REPLY_ARRAY || fields->elements % 2 != 0) {
		snprintf(why, whylen, "the entry's fields cannot be read");
		return -1;
	}
	for (size_t i = 0; i < fields->elements; i += 2) {
		const redisReply *k = fields->element[i], *v = fields->element[i + 1];
		const redisReply **slot;

		if (k->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING) {
			snprintf(why, whylen, "the entry's fields cannot be read");
			return -1;
		}
		if (field_is(k, "task"))
			slot = &task;
		else if (field_is(k, "id"))
			slot = &cid;
		else if (field_is(k, "label"))
			slot = &label;
		else if (field_is(k, "queue_timeout_ms"))
			slot = &qt;
		else {
			snprintf(why, whylen, "unknown field \"%s\" (an entry has task, and "
			    "optionally id, label and queue_timeout_ms)",
			    show(b, sizeof b, k->str, k->len));
			return -1;
		}
		if (*slot != NULL) {
			snprintf(why, whylen, "field \"%s\" given twice",
			    show(b, sizeof b, k->str, k->len));
			return -1;
		}
		*slot = v;
	}
	if (cid != NULL) {
		if ((e->client_id = memdup0(cid->str, cid->len)) == NULL)
			goto nomem;
		e->client_id_len = cid->len;
	}
	if (task == NULL) {
		snprintf(why, whylen, "missing field \"task\" (the task object as JSON text)");
		return -1;
	}
	/* a claimed entry may turn out a dead letter, which carries its task */
	if (keep_text) {
		if ((e->task_text = memdup0(task->str, task->len)) == NULL)
			goto nomem;
		e->task_len = task->len;
	}
	if (proto_json_depth(task->str, task->len) > WIRE_MAX_DEPTH - 1) {
		snprintf(why, whylen, "field \"task\" is nested deeper than %d levels",
		    WIRE_MAX_DEPTH - 1);
		return -1;
	}
	e->spec = json_loadb(task->str, task->len, JSON_REJECT_DUPLICATES, &err);
	if (e->spec == NULL) {
		utf8_format(why, whylen, "field \"task\" is not JSON: %s (at character %d)",
		    err.text, err.position);
		return -1;
	}
	if (!json_is_object(e->spec)) {
		snprintf(why, whylen, "field \"task\" must be a JSON object, as "
		    "{\"kind\":\"exec\",\"argv\":[...]}");
		return -1;
	}
	if (label != NULL) {
		if (label->len > WIRE_MAX_LABEL || !utf8_text(label->str, label->len)) {
			snprintf(why, whylen, "field \"label\" must be UTF-8 text of at most "
			    "%d bytes", WIRE_MAX_LABEL);
			return -1;
		}
		if ((e->label = memdup0(label->str, label->len)) == NULL)
			goto nomem;
	}
	if (qt != NULL) {
		uint64_t v = 0;
		size_t i;

		for (i = 0; i < qt->len && qt->str[i] >= '0' && qt->str[i] <= '9' &&
		    v <= 30ULL * 24 * 3600 * 1000; i++)
			v = v * 10 + (uint64_t)(qt->str[i] - '0');
		if (qt->len == 0 || i != qt->len || v < 1 || v > 30ULL * 24 * 3600 * 1000) {
			snprintf(why, whylen, "field \"queue_timeout_ms\" must be a decimal "
			    "number of milliseconds from 1 to %llu, not \"%s\"",
			    30ULL * 24 * 3600 * 1000, show(b, sizeof b, qt->str, qt->len));
			return -1;
		}
		e->queue_timeout_ms = v;
	}
	return 0;
nomem:
	snprintf(why, whylen, "out of memory reading the entry");
	return -1;
}

/* A new entry for id (not yet in the table), or NULL when memory ran out. */
static struct rs_entry *
entry_new(struct source_redis *s, const char *id, size_t len, unsigned attempt)
{
	struct rs_entry *e = calloc(1, sizeof *e);

	if (e == NULL || (e->id = memdup0(id, len)) == NULL) {
		free(e);
		return NULL;
	}
	e->s = s;
	e->attempt = attempt;
	if (rs_table_add(s, e) == -1) {
		rs_entry_free(e);
		return NULL;
	}
	return e;
}

/*
 * e ended without becoming a task (or as a dead letter): its done, built
 * here, with no task id, the source's pool, the state and an error.
 */
static void
rs_done_bad(struct source_redis *s, struct rs_entry *e, const char *state, const char *code,
    const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	json_t *done;

	va_start(ap, fmt);
	utf8_vformat(msg, sizeof msg, fmt, ap);
	va_end(ap);
	json_decref(e->spec);
	e->spec = NULL;
	done = json_pack("{s:s, s:n, s:s, s:s, s:i, s:i, s:{s:s, s:s}}", FIELD_EVENT, EV_DONE,
	    FIELD_TASK, FIELD_POOL, s->conf.pool, FIELD_STATE, state, FIELD_QUEUED_MS, 0,
	    FIELD_RUN_MS, 0, FIELD_ERROR, FIELD_CODE, code, FIELD_MESSAGE, msg);
	free(e->done);
	e->done = done != NULL ? json_dumps(done, JSON_COMPACT) : NULL;
	json_decref(done);
	if (e->done == NULL) {
		log_warnx("source %s: entry %s: out of memory for its result", s->conf.name, e->id);
		rs_forget(s, e);
		return;
	}
	e->done_len = strlen(e->done);
	rs_set_done(s, e, false);
}

/* An entry read or claimed, with its delivery count: to the pool, or its result at once. */
static void
rs_take(struct source_redis *s, struct rs_entry *e, const redisReply *fields)
{
	char why[512];

	if (fields == NULL || fields->type == REDIS_REPLY_NIL) {
		rs_done_bad(s, e, STATE_LOST, ERR_LOST, "the stream entry was deleted before "
		    "it ran");
		return;
	}
	if (entry_parse(e, fields, false, why, sizeof why) == -1) {
		s->nbad++;
		log_info("source %s: entry %s is not a task: %s", s->conf.name, e->id, why);
		rs_done_bad(s, e, STATE_FAILED, ERR_BAD_REQUEST, "%s", why);
		return;
	}
	e->where = RS_HELD;
	TAILQ_INSERT_TAIL(&s->held, e, link);
	s->nheld++;
	rs_submit(s, e);
}

/* Loop thread: the daemon's task for e ended. */
static void
rs_task_done(void *arg, const char *state, const char *done, size_t len)
{
	struct rs_entry *e = arg;
	struct source_redis *s = e->s;

	if (s == NULL) {
		rs_entry_free(e);       /* its source is gone */
		return;
	}
	if (s->stop_now && strcmp(state, STATE_CANCELLED) == 0) {
		/* stopped by shutdown now: another consumer runs it */
		log_debug("source %s: entry %s cancelled by the shutdown: left pending",
		    s->conf.name, e->id);
		rs_forget(s, e);
		return;
	}
	free(e->done);
	if ((e->done = memdup0(done, len)) == NULL) {
		log_warnx("source %s: entry %s: out of memory for its result: left pending",
		    s->conf.name, e->id);
		rs_forget(s, e);
		return;
	}
	e->done_len = len;
	rs_set_done(s, e, false);
}

/* Hands a HELD entry to the pool. */
static void
rs_submit(struct source_redis *s, struct rs_entry *e)
{
	struct source_task t = {
		.source = s->conf.name, .pool = s->conf.pool, .spec = e->spec, .label = e->label,
		.queue_timeout_ms = e->queue_timeout_ms, .attempt = e->attempt,
		.done = rs_task_done, .arg = e,
	};
	uint64_t task_id = 0;
	char *cause = NULL;

	if (s->stopping) {
		rs_forget(s, e);        /* pending: another consumer will run it */
		return;
	}
	switch (s->host.submit(s->host.ctx, &t, &task_id, &cause)) {
	case SOURCE_ACCEPTED:
		rs_unlist(s, e);
		e->where = RS_RUNNING;
		json_decref(e->spec);
		e->spec = NULL;
		log_debug("source %s: entry %s is task %llu (attempt %u)", s->conf.name, e->id,
		    (unsigned long long)task_id, e->attempt);
		break;
	case SOURCE_FULL:
		break;          /* stays held */
	case SOURCE_CLOSED:
		rs_forget(s, e); /* pending: another consumer will run it */
		break;
	case SOURCE_BAD:
		s->nbad++;
		log_info("source %s: entry %s is not a task: %s", s->conf.name, e->id,
		    cause ? cause : "out of memory");
		rs_done_bad(s, e, STATE_FAILED, ERR_BAD_REQUEST, "%s",
		    cause ? cause : "out of memory");
		break;
	}
	free(cause);
}

/* ---------------------------------------------------------------- reading */

/* The [id, fields] pairs of a read or claim: each taken, with the attempt given or its count to ask for. */
static void
take_entries(struct source_redis *s, const redisReply *list, bool claimed);

/*
 * A read of its own pending entries (XREADGROUP from an id, not ">"):
 * those it does not hold are taken as claimed ones (their delivery count
 * decides); an empty answer ends the history.
 */
static void
history_cb(redisAsyncContext *ac, void *r, void *arg)
{
	struct source_redis *s = arg;
	redisReply *reply = r;
	const redisReply *list = NULL;

	if (conn_replied(ac, r) == NULL) {
		s->reading = false;
		s->asked = 0;
		return;
	}
	s->reading = false;
	s->asked = 0;
	if (reply->type == REDIS_REPLY_ERROR) {
		rs_fail(s, "XREADGROUP: %s", reply->str);
		return;
	}
	/* [[stream, [[id, fields], ...]]] */
	if (reply->type == REDIS_REPLY_ARRAY && reply->elements == 1 &&
	    reply->element[0]->type == REDIS_REPLY_ARRAY && reply->element[0]->elements == 2)
		list = reply->element[0]->element[1];
	if (list == NULL || list->type != REDIS_REPLY_ARRAY || list->elements == 0) {
		s->history[0] = '\0';
	} else {
		const redisReply *last = list->element[list->elements - 1];
		if (last->type == REDIS_REPLY_ARRAY && last->elements == 2 &&
		    last->element[0]->type == REDIS_REPLY_STRING)
			snprintf(s->history, sizeof s->history, "%s", last->element[0]->str);
		else
			s->history[0] = '\0';
		take_entries(s, list, true);
	}
	rs_schedule(s);
}

static void
read_cb(redisAsyncContext *ac, void *r, void *arg)
{
	struct source_redis *s = arg;
	redisReply *reply = r;

	if (conn_replied(ac, r) == NULL) {
		s->reading = false;
		s->asked = 0;
		return;
	}
	s->reading = false;
	s->asked = 0;
	if (reply->type == REDIS_REPLY_ERROR) {
		/* NOGROUP: the group (or the stream) went away; reconnecting makes it again */
		rs_fail(s, "XREADGROUP: %s", reply->str);
		return;
	}
	if (reply->type == REDIS_REPLY_ARRAY) {
		/* [[stream, [[id, fields], ...]]] */
		for (size_t i = 0; i < reply->elements; i++) {
			const redisReply *st = reply->element[i];
			if (st->type == REDIS_REPLY_ARRAY && st->elements == 2)
				take_entries(s, st->element[1], false);
		}
	} else if (reply->type != REDIS_REPLY_NIL) {
		rs_fail(s, "XREADGROUP: an answer of type %d", reply->type);
		return;
	}
	rs_schedule(s);
}

static void pending_cb(redisAsyncContext *ac, void *r, void *arg);

static void
take_entries(struct source_redis *s, const redisReply *list, bool claimed)
{
	struct rs_args a;
	char why[512];

	if (list == NULL || list->type != REDIS_REPLY_ARRAY)
		return;
	for (size_t i = 0; i < list->elements; i++) {
		const redisReply *it = list->element[i], *id, *fields;
		struct rs_entry *e;

		if (it->type != REDIS_REPLY_ARRAY || it->elements != 2 ||
		    it->element[0]->type != REDIS_REPLY_STRING)
			continue;
		id = it->element[0];
		fields = it->element[1];
		if (claimed && rs_find(s, id->str) != NULL)
			continue;       /* ours already: claimed back after an outage */
		if ((e = entry_new(s, id->str, id->len, 1)) == NULL) {
			log_warnx("source %s: out of memory: entry %s left pending", s->conf.name,
			    id->str);
			continue;
		}
		if (!claimed) {
			s->nread++;
			rs_take(s, e, fields);
			continue;
		}
		/* claimed: its delivery count decides, so the fields wait with it */
		s->nclaimed++;
		e->where = RS_CLAIMING;
		if (fields->type == REDIS_REPLY_NIL) {
			rs_take(s, e, fields);
			continue;
		}
		/* read now (the reply goes); a bad one's reason waits with it */
		if (entry_parse(e, fields, true, why, sizeof why) == -1 &&
		    (e->bad = strdup(why)) == NULL) {
			rs_forget(s, e);
			continue;
		}
		args_init(&a);
		args_str(&a, "XPENDING");
		args_str(&a, s->conf.stream);
		args_str(&a, s->conf.group);
		args_str(&a, e->id);
		args_str(&a, e->id);
		args_str(&a, "1");
		if (conn_send(&s->wr, pending_cb, e, &a) == -1) {
			args_free(&a);
			rs_forget(s, e);
			return;
		}
		args_free(&a);
	}
}

/*
 * XPENDING for one claimed entry: [[id, consumer, idle, count]]. Past
 * max_deliveries it is a dead letter; otherwise it runs, as attempt count.
 */
static void
pending_cb(redisAsyncContext *ac, void *r, void *arg)
{
	struct rs_entry *e = arg;
	struct source_redis *s = e->s;
	redisReply *reply = r;
	const redisReply *p;
	char *bad;

	if (conn_replied(ac, r) == NULL || s->stopping) {
		rs_forget(s, e);        /* still pending: claimed again later */
		return;
	}
	if (reply->type == REDIS_REPLY_ERROR) {
		rs_forget(s, e);
		rs_fail(s, "XPENDING: %s", reply->str);
		return;
	}
	if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 1 ||
	    (p = reply->element[0])->type != REDIS_REPLY_ARRAY || p->elements != 4 ||
	    p->element[3]->type != REDIS_REPLY_INTEGER) {
		rs_forget(s, e);        /* acked meanwhile by its consumer */
		return;
	}
	e->attempt = p->element[3]->integer > 0 ? (unsigned)p->element[3]->integer : 1;
	bad = e->bad;
	e->bad = NULL;
	if (e->attempt > s->conf.max_deliveries) {
		if (asprintf(&e->dead_reason, "delivered %u times, more than max_deliveries "
		    "(%u): its consumers stopped before it ended", e->attempt,
		    s->conf.max_deliveries) == -1)
			e->dead_reason = NULL;
		log_warnx("source %s: entry %s %s: dead-lettered to %s", s->conf.name, e->id,
		    e->dead_reason ? e->dead_reason : "delivered too often", s->conf.dead_letter);
		free(bad);
		if (e->dead_reason == NULL) {
			rs_forget(s, e);
			return;
		}
		rs_done_bad(s, e, STATE_LOST, ERR_LOST, "%s; dead-lettered to %s", e->dead_reason,
		    s->conf.dead_letter);
		return;
	}
	if (bad != NULL) {
		s->nbad++;
		log_info("source %s: entry %s is not a task: %s", s->conf.name, e->id, bad);
		rs_done_bad(s, e, STATE_FAILED, ERR_BAD_REQUEST, "%s", bad);
		free(bad);
		return;
	}
	e->where = RS_HELD;
	TAILQ_INSERT_TAIL(&s->held, e, link);
	s->nheld++;
	rs_submit(s, e);
}

static void
claim_cb(redisAsyncContext *ac, void *r, void *arg)
{
	struct source_redis *s = arg;
	redisReply *reply = r;

	if (conn_replied(ac, r) == NULL) {
		s->claiming = false;
		return;
	}
	s->claiming = false;
	if (reply->type == REDIS_REPLY_ERROR) {
		rs_fail(s, "XAUTOCLAIM: %s", reply->str);
		return;
	}
	/* [next cursor, [[id, fields], ...], [deleted ids] (Redis 7)] */
	if (reply->type != REDIS_REPLY_ARRAY || reply->elements < 2 ||
	    reply->element[0]->type != REDIS_REPLY_STRING) {
		rs_fail(s, "XAUTOCLAIM: an answer of an unexpected shape");
		return;
	}
	snprintf(s->claim_cursor, sizeof s->claim_cursor, "%s", reply->element[0]->str);
	take_entries(s, reply->element[1], true);
	if (reply->elements >= 3 && reply->element[2]->type == REDIS_REPLY_ARRAY &&
	    reply->element[2]->elements > 0)
		log_info("source %s: %zu pending entries were deleted from %s before they ran",
		    s->conf.name, reply->element[2]->elements, s->conf.stream);
	rs_schedule(s);
}

/*
 * How many entries to read now: what the pool takes at once (after the
 * held entries went in), less the entries whose results are not yet
 * written, which are still pending in Redis. So the entries this consumer
 * holds (read and not yet acked) never outnumber what its pool can hold.
 */
static unsigned
rs_room(struct source_redis *s)
{
	struct rs_entry *e;
	unsigned room;
	size_t owed = s->ndone + s->nwriting;

	while ((e = TAILQ_FIRST(&s->held)) != NULL) {
		rs_submit(s, e);
		if (e == TAILQ_FIRST(&s->held))
			return 0;       /* still full */
	}
	room = s->host.room(s->host.ctx, s->conf.pool);
	return room > owed ? room - (unsigned)owed : 0;
}

static void
claim_tick(evutil_socket_t fd, short what, void *arg)
{
	struct source_redis *s = arg;
	struct rs_args a;
	unsigned room;

	if (s->state != RS_UP || s->stopping)
		return;
	claim_timer(s);
	if (s->claiming || (room = rs_room(s)) == 0)
		return;
	if (s->claim_cursor[0] == '\0')
		snprintf(s->claim_cursor, sizeof s->claim_cursor, "0-0");
	args_init(&a);
	args_str(&a, "XAUTOCLAIM");
	args_str(&a, s->conf.stream);
	args_str(&a, s->conf.group);
	args_str(&a, s->conf.consumer);
	args_u64(&a, s->conf.claim_idle_ms);
	args_str(&a, s->claim_cursor);
	args_str(&a, "COUNT");
	args_u64(&a, room < RS_CLAIM_MAX ? room : RS_CLAIM_MAX);
	if (conn_send(&s->wr, claim_cb, s, &a) == 0)
		s->claiming = true;
	args_free(&a);
}

static void
poll_cb(evutil_socket_t fd, short what, void *arg)
{
	rs_schedule(arg);
}

/* Reads as many entries as the pool can take, unless a read is out. */
static void
rs_read(struct source_redis *s)
{
	struct timeval tv;
	struct rs_args a;
	unsigned room;

	if (s->state != RS_UP || s->stopping || s->reading || s->rd.ac == NULL)
		return;
	if ((room = rs_room(s)) == 0) {
		/* the daemon kicks when a task ends; this covers the rest (a resize) */
		tv_ms(&tv, RS_POLL_MS);
		evtimer_add(s->poll_ev, &tv);
		return;
	}
	if (room > RS_READ_MAX)
		room = RS_READ_MAX;
	args_init(&a);
	args_str(&a, "XREADGROUP");
	args_str(&a, "GROUP");
	args_str(&a, s->conf.group);
	args_str(&a, s->conf.consumer);
	args_str(&a, "COUNT");
	args_u64(&a, room);
	if (s->history[0] == '\0') {
		args_str(&a, "BLOCK");
		args_u64(&a, RS_BLOCK_MS);
	}
	args_str(&a, "STREAMS");
	args_str(&a, s->conf.stream);
	args_str(&a, s->history[0] != '\0' ? s->history : ">");
	if (conn_send(&s->rd, s->history[0] != '\0' ? history_cb : read_cb, s, &a) == 0) {
		s->reading = true;
		s->asked = room;
	}
	args_free(&a);
}

/* ---------------------------------------------------------------- results */

/*
 * EXEC's answer for a batch: per entry, its XADD results (and XADD
 * dead_letter before it), then one XACK for them all.
 */
static void
exec_cb(redisAsyncContext *ac, void *r, void *arg)
{
	struct rs_batch *b = arg;
	struct source_redis *s = b->s;
	redisReply *reply = r;
	bool stale = conn_replied(ac, r) == NULL;
	size_t k = 0;

	if (stale || reply->type != REDIS_REPLY_ARRAY) {
		/* not written: written again once connected */
		for (size_t i = b->n; i-- > 0;) {
			s->nwriting--;
			rs_set_done(s, b->e[i], true);
		}
		if (!stale)
			rs_fail(s, "EXEC: %s", reply->type == REDIS_REPLY_ERROR ? reply->str :
			    "the transaction was not run");
		free(b);
		return;
	}
	for (size_t i = 0; i < b->n; i++) {
		struct rs_entry *e = b->e[i];
		int adds = e->dead_reason != NULL ? 2 : 1;

		for (int j = 0; j < adds && k < reply->elements; j++, k++) {
			const redisReply *x = reply->element[k];
			if (x->type == REDIS_REPLY_ERROR) {
				log_warnx("source %s: entry %s acked, but its %s was not written: "
				    "%s", s->conf.name, e->id, j + 1 < adds ? "dead letter" :
				    "result", x->str);
				utf8_format(s->last_error, sizeof s->last_error, "XADD %s: %s",
				    j + 1 < adds ? s->conf.dead_letter : s->conf.results, x->str);
				s->have_error = true;
			} else if (j + 1 < adds)
				s->ndead++;
		}
	}
	if (k < reply->elements && reply->element[k]->type == REDIS_REPLY_INTEGER)
		s->nacked += (uint64_t)reply->element[k]->integer;
	for (size_t i = 0; i < b->n; i++) {
		s->nwriting--;
		rs_table_remove(s, b->e[i]);
		rs_entry_free(b->e[i]);
	}
	free(b);
	rs_schedule(s);
}

/* Writes the results waiting, RS_BATCH_MAX to a MULTI/EXEC. */
static void
rs_flush(struct source_redis *s)
{
	struct rs_args a;
	struct rs_batch *b;
	struct rs_entry *e;

	while (s->state == RS_UP && s->wr.ac != NULL && !TAILQ_EMPTY(&s->done)) {
		if ((b = calloc(1, sizeof *b)) == NULL)
			return;
		b->s = s;
		args_init(&a);
		args_str(&a, "MULTI");
		if (conn_send(&s->wr, ignore_cb, NULL, &a) == -1)
			goto fail;
		while (b->n < RS_BATCH_MAX && (e = TAILQ_FIRST(&s->done)) != NULL) {
			char attempt[16];

			rs_unlist(s, e);
			e->where = RS_WRITING;
			s->nwriting++;
			b->e[b->n++] = e;
			if (e->dead_reason != NULL) {
				args_reset(&a);
				args_str(&a, "XADD");
				args_str(&a, s->conf.dead_letter);
				args_str(&a, "*");
				args_str(&a, "entry");
				args_str(&a, e->id);
				args_str(&a, "task");
				args_mem(&a, e->task_text ? e->task_text : "", e->task_len);
				args_str(&a, "reason");
				args_str(&a, e->dead_reason);
				if (conn_send(&s->wr, ignore_cb, NULL, &a) == -1)
					goto fail;
			}
			args_reset(&a);
			snprintf(attempt, sizeof attempt, "%u", e->attempt);
			args_str(&a, "XADD");
			args_str(&a, s->conf.results);
			if (s->conf.results_maxlen > 0) {
				args_str(&a, "MAXLEN");
				args_str(&a, "~");
				args_u64(&a, s->conf.results_maxlen);
			}
			args_str(&a, "*");
			args_str(&a, "done");
			args_mem(&a, e->done, e->done_len);
			args_str(&a, "entry");
			args_str(&a, e->id);
			if (e->client_id != NULL) {
				args_str(&a, "id");
				args_mem(&a, e->client_id, e->client_id_len);
			}
			args_str(&a, "consumer");
			args_str(&a, s->conf.consumer);
			args_str(&a, "attempt");
			args_str(&a, attempt);
			if (conn_send(&s->wr, ignore_cb, NULL, &a) == -1)
				goto fail;
		}
		args_reset(&a);
		args_str(&a, "XACK");
		args_str(&a, s->conf.stream);
		args_str(&a, s->conf.group);
		for (size_t i = 0; i < b->n; i++)
			args_str(&a, b->e[i]->id);
		if (conn_send(&s->wr, ignore_cb, NULL, &a) == -1)
			goto fail;
		args_reset(&a);
		args_str(&a, "EXEC");
		if (conn_send(&s->wr, exec_cb, b, &a) == -1)
			goto fail;
		args_free(&a);
	}
	return;
fail:
	/* the source failed: the batch goes back, to be written once connected */
	for (size_t i = b->n; i-- > 0;) {
		s->nwriting--;
		rs_set_done(s, b->e[i], true);
	}
	free(b);
	args_free(&a);
}

/* ---------------------------------------------------------------- the work */

static void
work_cb(evutil_socket_t fd, short what, void *arg)
{
	struct source_redis *s = arg;

	rs_flush(s);
	rs_read(s);
	if (s->stopping && s->nentries == 0 && !s->idle_told) {
		s->idle_told = true;
		conn_drop(&s->rd);
		conn_drop(&s->wr);
		evtimer_del(s->retry_ev);
		evtimer_del(s->refresh_ev);
		evtimer_del(s->claim_ev);
		evtimer_del(s->poll_ev);
		log_info("source %s: stopped (%llu read, %llu acked)", s->conf.name,
		    (unsigned long long)s->nread, (unsigned long long)s->nacked);
		if (s->idle_fn != NULL)
			s->idle_fn(s, s->idle_arg);
	}
}

/* What changed is acted on once, after the current callback: results written, a read, idle told. */
static void
rs_schedule(struct source_redis *s)
{
	if (!event_pending(s->work_ev, EV_TIMEOUT, NULL))
		event_active(s->work_ev, EV_TIMEOUT, 1);
}

/* ---------------------------------------------------------------- the source */

static char *
dup_or_null(const char *s, bool *failed)
{
	char *d;

	if (s == NULL)
		return NULL;
	if ((d = strdup(s)) == NULL)
		*failed = true;
	return d;
}

static void
conf_source_clear(struct conf_source *c)
{
	free(c->name);
	free(c->type);
	free(c->redis);
	free(c->stream);
	free(c->group);
	free(c->consumer);
	free(c->pool);
	free(c->results);
	free(c->dead_letter);
}

struct source_redis *
source_redis_new(struct event_base *base, const struct conf_source *cs,
    const struct source_host *host, char **cause)
{
	struct source_redis *s;
	char port[8];
	bool failed = false;

	if ((s = calloc(1, sizeof *s)) == NULL)
		return cause_set(cause, "out of memory"), NULL;
	s->conf = *cs;
	s->conf.name = dup_or_null(cs->name, &failed);
	s->conf.type = dup_or_null(cs->type, &failed);
	s->conf.redis = dup_or_null(cs->redis, &failed);
	s->conf.stream = dup_or_null(cs->stream, &failed);
	s->conf.group = dup_or_null(cs->group, &failed);
	s->conf.consumer = dup_or_null(cs->consumer, &failed);
	s->conf.pool = dup_or_null(cs->pool, &failed);
	s->conf.results = dup_or_null(cs->results, &failed);
	s->conf.dead_letter = dup_or_null(cs->dead_letter, &failed);
	s->host = *host;
	s->base = base;
	TAILQ_INIT(&s->held);
	TAILQ_INIT(&s->done);
	if (failed || s->conf.name == NULL || s->conf.redis == NULL || s->conf.stream == NULL ||
	    s->conf.group == NULL || s->conf.consumer == NULL || s->conf.pool == NULL ||
	    s->conf.results == NULL || s->conf.dead_letter == NULL) {
		cause_set(cause, "source %s: incomplete settings, or out of memory",
		    cs->name ? cs->name : "?");
		goto fail;
	}
	snprintf(s->owner, sizeof s->owner, "redis:%s", s->conf.name);
	if (strncmp(s->conf.redis, "unix:", 5) == 0) {
		s->is_unix = true;
		if ((s->path = strdup(s->conf.redis + 5)) == NULL)
			goto nomem;
	} else {
		if (conf_split_hostport(s->conf.redis, s->host_name, sizeof s->host_name, port,
		    sizeof port, cause) == -1)
			goto fail;
		s->port = atoi(port);
	}
	s->rd.s = s->wr.s = s;
	s->rd.role = "reader";
	s->wr.role = "writer";
	s->rd.slack_ms = RS_BLOCK_MS;
	s->rd.deadline = evtimer_new(base, deadline_cb, &s->rd);
	s->wr.deadline = evtimer_new(base, deadline_cb, &s->wr);
	s->work_ev = event_new(base, -1, 0, work_cb, s);
	s->retry_ev = evtimer_new(base, retry_cb, s);
	s->claim_ev = evtimer_new(base, claim_tick, s);
	s->refresh_ev = evtimer_new(base, refresh_cb, s);
	s->poll_ev = evtimer_new(base, poll_cb, s);
	if (s->rd.deadline == NULL || s->wr.deadline == NULL || s->work_ev == NULL ||
	    s->retry_ev == NULL || s->claim_ev == NULL || s->refresh_ev == NULL ||
	    s->poll_ev == NULL)
		goto nomem;
	s->state = RS_CONNECTING;
	rs_connect(s);
	return s;
nomem:
	cause_set(cause, "source %s: out of memory", s->conf.name);
fail:
	source_redis_free(s);
	return NULL;
}

const struct conf_source *
source_redis_conf(const struct source_redis *s)
{
	return &s->conf;
}

void
source_redis_kick(struct source_redis *s)
{
	if (s->state == RS_UP && !s->stopping && !s->reading)
		rs_schedule(s);
}

void
source_redis_stop(struct source_redis *s, bool now, source_redis_idle_fn idle, void *arg)
{
	struct rs_entry *e;

	if (now)
		s->stop_now = true;
	s->idle_fn = idle;
	s->idle_arg = arg;
	if (s->stopping) {
		rs_schedule(s);
		return;
	}
	s->stopping = true;
	log_info("source %s: stopping%s: %zu entries in flight", s->conf.name,
	    now ? " now" : "", s->nentries - s->nheld);
	/* a read blocked in Redis is dropped with its connection; entries it got stay pending */
	conn_drop(&s->rd);
	s->reading = false;
	s->asked = 0;
	evtimer_del(s->claim_ev);
	evtimer_del(s->poll_ev);
	/* held entries never reached the pool: pending, for another consumer */
	while ((e = TAILQ_FIRST(&s->held)) != NULL)
		rs_forget(s, e);
	rs_schedule(s);
}

bool
source_redis_idle(const struct source_redis *s)
{
	return s->stopping && s->nentries == 0;
}

unsigned
source_redis_asked(const struct source_redis *s)
{
	return s->asked;
}

static const char *
rs_state_name(const struct source_redis *s)
{
	if (s->stopping)
		return s->nentries == 0 && s->idle_told ? "stopped" : "draining";
	switch (s->state) {
	case RS_CONNECTING: return "connecting";
	case RS_UP: return "connected";
	default: return "down";
	}
}

json_t *
source_redis_stats(const struct source_redis *s)
{
	size_t running = 0;

	for (size_t i = 0; i < s->nbuckets; i++)
		for (struct rs_entry *e = s->buckets[i]; e != NULL; e = e->hnext)
			running += e->where == RS_RUNNING;
	return json_pack("{s:s, s:s, s:I, s:I, s:I, s:I, s:o, s:s, s:s, s:s, s:s, s:s, s:s, "
	    "s:s, s:b, s:I, s:I, s:I, s:I, s:I, s:I}",
	    "name", s->conf.name, "state", rs_state_name(s),
	    "read", (json_int_t)s->nread, "acked", (json_int_t)s->nacked,
	    "claimed", (json_int_t)s->nclaimed, "dead_lettered", (json_int_t)s->ndead,
	    "last_error", s->have_error ? json_string(s->last_error) : json_null(),
	    "redis", s->conf.redis, "stream", s->conf.stream, "group", s->conf.group,
	    "consumer", s->conf.consumer, "pool", s->conf.pool, "results", s->conf.results,
	    "dead_letter", s->conf.dead_letter, "connected", s->state == RS_UP && !s->idle_told,
	    "in_flight", (json_int_t)s->nentries, "running", (json_int_t)running,
	    "held", (json_int_t)s->nheld, "unwritten", (json_int_t)s->ndone,
	    "bad", (json_int_t)s->nbad, "reconnects", (json_int_t)s->nreconnects);
}

void
source_redis_describe(const struct source_redis *s, char *buf, size_t len)
{
	const char *st = rs_state_name(s);

	if (strcmp(st, "connected") == 0)
		snprintf(buf, len, "%s %zu in flight", s->conf.name, s->nentries);
	else if (strcmp(st, "down") == 0)
		snprintf(buf, len, "%s down (%zu in flight)", s->conf.name, s->nentries);
	else
		snprintf(buf, len, "%s %s", s->conf.name, st);
}

void
source_redis_free(struct source_redis *s)
{
	if (s == NULL)
		return;
	s->stopping = true;
	s->idle_told = true;    /* nothing more is told */
	conn_drop(&s->rd);
	conn_drop(&s->wr);
	for (size_t i = 0; i < s->nbuckets; i++) {
		struct rs_entry *e, *next;
		for (e = s->buckets[i]; e != NULL; e = next) {
			next = e->hnext;
			if (e->where == RS_RUNNING)
				e->s = NULL;    /* its done frees it */
			else
				rs_entry_free(e);
		}
	}
	free(s->buckets);
	if (s->rd.deadline != NULL)
		event_free(s->rd.deadline);
	if (s->wr.deadline != NULL)
		event_free(s->wr.deadline);
	if (s->work_ev != NULL)
		event_free(s->work_ev);
	if (s->retry_ev != NULL)
		event_free(s->retry_ev);
	if (s->claim_ev != NULL)
		event_free(s->claim_ev);
	if (s->refresh_ev != NULL)
		event_free(s->refresh_ev);
	if (s->poll_ev != NULL)
		event_free(s->poll_ev);
	free(s->path);
	conf_source_clear(&s->conf);
	free(s);
}
