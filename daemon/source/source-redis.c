/*
 * source-redis.c: tasks from a Redis stream, read through a consumer group
 * (source-redis.h has the contract; tpd.conf(5) the settings): the
 * consumer group's state machine. The entries' format is common/'s
 * (stream-format.h); the connections to Redis, their deadlines and the
 * reconnect with backoff are redis-link.c's.
 *
 * Two connections: the reader carries nothing but XREADGROUP ... BLOCK,
 * so that a read blocked in Redis never holds up the writer, which
 * carries the setup (XGROUP CREATE, TYPE), the results (MULTI, XADD,
 * XACK, EXEC), the claims (XAUTOCLAIM, XPENDING) and the refreshes
 * (XCLAIM JUSTID).
 *
 * An entry, once read, is a struct rs_entry in the table of entries this
 * source holds, keyed by its stream id, from the read until its result is
 * written (or it is given up to another consumer):
 *
 *   read / claimed --> CLAIMING (claimed: XPENDING gives the delivery count)
 *                  --> HELD (no room after all) --> RUNNING --> DONE --> WRITING --> freed
 *                  \--> DONE (bad entry, dead letter) ------^
 *
 * The entries claimed in one go (an XAUTOCLAIM's, a read of its own
 * pending entries) wait together for one XPENDING over their range, a
 * struct rs_claim. Every entry in the table but CLAIMING ones has its
 * claim refreshed every claim_idle/3, so that no other consumer takes it
 * while it is here. A failure of either connection drops both (rlink_fail)
 * and reconnects after a backoff; entries WRITING go back to DONE and are
 * written again once connected, CLAIMING ones are forgotten (still pending
 * in Redis: claimed again later).
 */
#include "config.h"

#include <sys/queue.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>
#include <hiredis/async.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/utf8.h"
#include "proto/proto.h"
#include "redis-link.h"
#include "source-redis.h"
#include "stream-format.h"
#include "wire.h"

#define RS_BLOCK_MS 2000        /* how long one XREADGROUP waits for entries */
#define RS_READ_MAX 100         /* entries one XREADGROUP asks for at most */
#define RS_CLAIM_MAX 100        /* entries one XAUTOCLAIM claims at most */
#define RS_CLAIM_BATCH 100      /* entries one XPENDING asks about at most */
#define RS_BATCH_MAX 256        /* results in one MULTI/EXEC */
#define RS_REFRESH_MAX 1000     /* ids in one XCLAIM */
#define RS_POLL_MS 100          /* with no room and nothing read, look again this often */

enum rs_where {
	RS_CLAIMING,            /* claimed, waiting for its delivery count */
	RS_HELD,                /* read, waiting for room in the pool */
	RS_RUNNING,             /* a task of the daemon */
	RS_DONE,                /* its result waits to be written */
	RS_WRITING,             /* in a MULTI/EXEC not yet answered */
};

struct source_redis;
struct rs_claim;

struct rs_entry {
	struct source_redis *s;         /* NULL once the source is freed under a running task */
	char id[SFMT_STREAM_ID_SIZE];   /* the stream entry's id */
	enum rs_where where;
	unsigned attempt;               /* its delivery count */
	struct rs_claim *claim;         /* while CLAIMING: its XPENDING, and its place there */
	size_t claim_slot;
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

/* Entries claimed in one go, waiting for their delivery counts: one XPENDING over their range. */
struct rs_claim {
	struct source_redis *s;
	size_t n, left;                 /* entries, and those not yet answered for */
	char from[SFMT_STREAM_ID_SIZE + 1];     /* the range: from (or "(" after an id) ... */
	char to[SFMT_STREAM_ID_SIZE];   /* ... to */
	size_t asked;                   /* the COUNT of the XPENDING out */
	struct rs_entry *e[RS_CLAIM_BATCH];     /* NULL once answered for */
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
	struct rlink *link;

	unsigned setup_owed;            /* setup replies still to come */
	bool setup_failed;
	bool reading;                   /* an XREADGROUP is out */
	unsigned asked;                 /* what it asked for */
	bool claiming;                  /* an XAUTOCLAIM is out */
	char claim_cursor[SFMT_STREAM_ID_SIZE];
	char history[SFMT_STREAM_ID_SIZE]; /* reading its own pending entries from here; "": not */

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
	struct event *claim_ev;
	struct event *refresh_ev;
	struct event *poll_ev;

	/* figures */
	uint64_t nread, nacked, nclaimed, ndead, nbad;
};

static void rs_schedule(struct source_redis *);
static void rs_connect(void *);
static void rs_up(struct source_redis *);
static void rs_submit(struct source_redis *, struct rs_entry *);
static void rs_done_bad(struct source_redis *, struct rs_entry *, const char *state,
    const char *code, const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static void claim_timer(struct source_redis *);
static void claim_cb(redisAsyncContext *, void *, void *);
static void refresh_cb(evutil_socket_t, short, void *);
static void claim_tick(evutil_socket_t, short, void *);

static bool
rs_up_now(const struct source_redis *s)
{
	return rlink_state(s->link) == RLINK_UP;
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

/* ---------------------------------------------------------------- setup */

/* The link failed, both connections dropped: what was out on them is put back. */
static void
rs_down(void *arg)
{
	struct source_redis *s = arg;

	s->reading = false;
	s->asked = 0;
	s->claiming = false;
	s->setup_owed = 0;
	evtimer_del(s->claim_ev);
	evtimer_del(s->refresh_ev);
	evtimer_del(s->poll_ev);
}

static void
setup_cb(redisAsyncContext *ac, void *r, void *arg)
{
	struct source_redis *s = arg;
	redisReply *reply = r;
	const char *what = "";

	if (!rlink_replied(ac, r))
		return;
	if (s->setup_owed == 0)
		return;
	s->setup_owed--;
	if (reply->type == REDIS_REPLY_ERROR) {
		/* the group exists already: fine */
		if (strncmp(reply->str, "BUSYGROUP", 9) != 0) {
			s->setup_failed = true;
			rlink_fail(s->link, "XGROUP CREATE %s %s: %s", s->conf.stream, s->conf.group,
			    reply->str);
			return;
		}
	} else if (reply->type == REDIS_REPLY_STATUS && s->setup_owed < 2) {
		/* TYPE of results, then of dead_letter: a stream, or nothing yet */
		what = s->setup_owed == 1 ? s->conf.results : s->conf.dead_letter;
		if (strcmp(reply->str, "none") != 0 && strcmp(reply->str, "stream") != 0) {
			s->setup_failed = true;
			rlink_fail(s->link, "%s holds a %s, not a stream: results and dead letters "
			    "cannot be written there", what, reply->str);
			return;
		}
	}
	if (s->setup_owed == 0 && !s->setup_failed)
		rs_up(s);
}

/* Connects (at the start, and after each backoff), unless a stopped source needs Redis no more. */
static void
rs_connect(void *arg)
{
	struct source_redis *s = arg;
	struct rlink_cmd a;

	if (rlink_is_open(s->link, RLINK_WRITER) || rlink_is_open(s->link, RLINK_READER))
		return;
	if (s->stopping && s->nentries == 0)
		return;         /* nothing left to write: no need for Redis */
	if (rlink_open(s->link, !s->stopping) == -1)
		return;
	/* queued until connected; the deadline covers the connect too */
	s->setup_owed = 3;
	s->setup_failed = false;
	rlink_cmd_init(&a);
	rlink_cmd_str(&a, "XGROUP");
	rlink_cmd_str(&a, "CREATE");
	rlink_cmd_str(&a, s->conf.stream);
	rlink_cmd_str(&a, s->conf.group);
	rlink_cmd_str(&a, "0");
	rlink_cmd_str(&a, "MKSTREAM");
	if (rlink_send(s->link, RLINK_WRITER, setup_cb, s, &a) == 0) {
		rlink_cmd_reset(&a);
		rlink_cmd_str(&a, "TYPE");
		rlink_cmd_str(&a, s->conf.results);
		if (rlink_send(s->link, RLINK_WRITER, setup_cb, s, &a) == 0) {
			rlink_cmd_reset(&a);
			rlink_cmd_str(&a, "TYPE");
			rlink_cmd_str(&a, s->conf.dead_letter);
			rlink_send(s->link, RLINK_WRITER, setup_cb, s, &a);
		}
	}
	rlink_cmd_free(&a);
}

/* Every entry but those being claimed keeps its claim: XCLAIM ... 0 ids JUSTID. */
static void
refresh_claims(struct source_redis *s)
{
	struct rlink_cmd a;
	int base, n = 0;

	if (!rs_up_now(s) || s->nentries == 0)
		return;
	rlink_cmd_init(&a);
	rlink_cmd_str(&a, "XCLAIM");
	rlink_cmd_str(&a, s->conf.stream);
	rlink_cmd_str(&a, s->conf.group);
	rlink_cmd_str(&a, s->conf.consumer);
	rlink_cmd_str(&a, "0");
	base = a.n;
	for (size_t i = 0; i < s->nbuckets; i++) {
		for (struct rs_entry *e = s->buckets[i]; e != NULL; e = e->hnext) {
			if (e->where == RS_CLAIMING)
				continue;
			rlink_cmd_str(&a, e->id);
			if (++n == RS_REFRESH_MAX) {
				rlink_cmd_str(&a, "JUSTID");
				if (rlink_send(s->link, RLINK_WRITER, rlink_ignore_cb, NULL, &a) == -1)
					goto out;
				rlink_cmd_truncate(&a, base);   /* the same first words, other ids */
				n = 0;
			}
		}
	}
	if (n > 0) {
		rlink_cmd_str(&a, "JUSTID");
		rlink_send(s->link, RLINK_WRITER, rlink_ignore_cb, NULL, &a);
	}
out:
	rlink_cmd_free(&a);
}

static void
refresh_cb(evutil_socket_t fd, short what, void *arg)
{
	struct source_redis *s = arg;
	struct timeval tv;

	refresh_claims(s);
	if (rs_up_now(s)) {
		tv = clock_timeval_ms(s->conf.claim_idle_ms / 3 > 0 ? s->conf.claim_idle_ms / 3 : 1);
		evtimer_add(s->refresh_ev, &tv);
	}
}

static void
claim_timer(struct source_redis *s)
{
	struct timeval tv;

	tv = clock_timeval_ms(s->conf.claim_idle_ms / 2 > 50 ? s->conf.claim_idle_ms / 2 : 50);
	evtimer_add(s->claim_ev, &tv);
}

/* Connected and set up: claims refreshed first, then results written, then reads. */
static void
rs_up(struct source_redis *s)
{
	struct timeval tv;

	if (!rlink_up(s->link))
		log_info("source %s: reading %s as %s/%s from redis %s into pool %s",
		    s->conf.name, s->conf.stream, s->conf.group, s->conf.consumer,
		    s->conf.redis, s->conf.pool);
	/*
	 * Its own pending entries first: a read whose answer was lost with the
	 * connection (or a life of this consumer before a restart) left
	 * entries pending here that it never saw. They run now, not after
	 * claim_idle.
	 */
	snprintf(s->history, sizeof s->history, "0");
	refresh_claims(s);
	tv = clock_timeval_ms(s->conf.claim_idle_ms / 3 > 0 ? s->conf.claim_idle_ms / 3 : 1);
	evtimer_add(s->refresh_ev, &tv);
	if (!s->stopping)
		claim_timer(s);
	rs_schedule(s);
}

/* ---------------------------------------------------------------- entries */

/*
 * The fields of an entry: the format checked (stream-format.h), then what
 * needs more than bytes: the task a JSON object, the label UTF-8 text.
 * Fills e (its client_id whenever the entry has an id field, so that even
 * a bad entry's result names it; with keep_text its task field as read,
 * for a dead letter); returns 0, or -1 with a message in why (the entry is
 * bad: failed, bad_request).
 */
static int
entry_read(struct rs_entry *e, const redisReply *fields, bool keep_text, char *why,
    size_t whylen)
{
	struct sfmt_entry f;
	json_error_t err;
	bool shape_ok;

	shape_ok = fields != NULL && fields->type == REDIS_REPLY_ARRAY &&
	    fields->elements % 2 == 0;
	sfmt_entry_init(&f);
	for (size_t i = 0; shape_ok && i < fields->elements; i += 2) {
		const redisReply *k = fields->element[i], *v = fields->element[i + 1];

		if (k->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING)
			shape_ok = false;
		else
			sfmt_entry_field(&f, k->str, k->len, v->str, v->len);
	}
	if (f.id.p != NULL) {
		if ((e->client_id = memdup0(f.id.p, f.id.len)) == NULL)
			goto nomem;
		e->client_id_len = f.id.len;
	}
	if (keep_text && f.task.p != NULL) {
		if ((e->task_text = memdup0(f.task.p, f.task.len)) == NULL)
			goto nomem;
		e->task_len = f.task.len;
	}
	if (!shape_ok) {
		snprintf(why, whylen, "the entry's fields cannot be read");
		return -1;
	}
	if (sfmt_entry_end(&f) == -1) {
		snprintf(why, whylen, "%s", f.why);
		return -1;
	}
	if (proto_json_depth(f.task.p, f.task.len) > WIRE_MAX_DEPTH - 1) {
		snprintf(why, whylen, "field \"%s\" is nested deeper than %d levels", SFMT_TASK,
		    WIRE_MAX_DEPTH - 1);
		return -1;
	}
	e->spec = json_loadb(f.task.p, f.task.len, JSON_REJECT_DUPLICATES, &err);
	if (e->spec == NULL) {
		utf8_format(why, whylen, "field \"%s\" is not JSON: %s (at character %d)",
		    SFMT_TASK, err.text, err.position);
		return -1;
	}
	if (!json_is_object(e->spec)) {
		snprintf(why, whylen, "field \"%s\" must be a JSON object, as "
		    "{\"kind\":\"exec\",\"argv\":[...]}", SFMT_TASK);
		return -1;
	}
	if (f.label.p != NULL) {
		if (!utf8_text(f.label.p, f.label.len)) {
			snprintf(why, whylen, "field \"%s\" must be UTF-8 text of at most %d bytes",
			    SFMT_LABEL, WIRE_MAX_LABEL);
			return -1;
		}
		if ((e->label = memdup0(f.label.p, f.label.len)) == NULL)
			goto nomem;
	}
	e->queue_timeout_ms = f.queue_timeout_ms;
	return 0;
nomem:
	snprintf(why, whylen, "out of memory reading the entry");
	return -1;
}

/* A new entry for id (not yet in the table), or NULL when memory ran out or id is no stream id. */
static struct rs_entry *
entry_new(struct source_redis *s, const char *id, size_t len, unsigned attempt)
{
	struct rs_entry *e;

	if (len >= SFMT_STREAM_ID_SIZE || (e = calloc(1, sizeof *e)) == NULL)
		return NULL;
	memcpy(e->id, id, len);
	e->id[len] = '\0';
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

/* e is HELD: on the held list, then to the pool. */
static void
rs_hold(struct source_redis *s, struct rs_entry *e)
{
	e->where = RS_HELD;
	TAILQ_INSERT_TAIL(&s->held, e, link);
	s->nheld++;
	rs_submit(s, e);
}

/* An entry read, with its fields: to the pool, or its result at once. */
static void
rs_take(struct source_redis *s, struct rs_entry *e, const redisReply *fields)
{
	char why[512];

	if (fields == NULL || fields->type == REDIS_REPLY_NIL) {
		rs_done_bad(s, e, STATE_LOST, ERR_LOST, "the stream entry was deleted before "
		    "it ran");
		return;
	}
	if (entry_read(e, fields, false, why, sizeof why) == -1) {
		s->nbad++;
		log_info("source %s: entry %s is not a task: %s", s->conf.name, e->id, why);
		rs_done_bad(s, e, STATE_FAILED, ERR_BAD_REQUEST, "%s", why);
		return;
	}
	rs_hold(s, e);
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

/* ---------------------------------------------------------------- claims */

/* a < b, as stream ids (MS-SEQ, each a number) */
static bool
sid_less(const char *a, const char *b)
{
	unsigned long long ams, aseq = 0, bms, bseq = 0;
	char *end;

	ams = strtoull(a, &end, 10);
	if (*end == '-')
		aseq = strtoull(end + 1, NULL, 10);
	bms = strtoull(b, &end, 10);
	if (*end == '-')
		bseq = strtoull(end + 1, NULL, 10);
	return ams < bms || (ams == bms && aseq < bseq);
}

static void claim_pending_cb(redisAsyncContext *ac, void *r, void *arg);

/*
 * Asks for the delivery counts of c's entries not yet answered for: XPENDING
 * over their range, for this consumer (whose entries they are now). The
 * range may hold other entries of this consumer: the COUNT leaves room for
 * them, and the answer goes on from its last row if it was full.
 */
static int
claim_ask(struct source_redis *s, struct rs_claim *c)
{
	struct rlink_cmd a;
	int rc;

	c->asked = c->left + s->nentries;
	rlink_cmd_init(&a);
	rlink_cmd_str(&a, "XPENDING");
	rlink_cmd_str(&a, s->conf.stream);
	rlink_cmd_str(&a, s->conf.group);
	rlink_cmd_str(&a, c->from);
	rlink_cmd_str(&a, c->to);
	rlink_cmd_u64(&a, c->asked);
	rlink_cmd_str(&a, s->conf.consumer);
	rc = rlink_send(s->link, RLINK_WRITER, claim_pending_cb, c, &a);
	rlink_cmd_free(&a);
	return rc;
}

/* Forgets c's entries not answered for (still pending: claimed again later) and frees it. */
static void
claim_end(struct source_redis *s, struct rs_claim *c)
{
	for (size_t i = 0; i < c->n; i++)
		if (c->e[i] != NULL)
			rs_forget(s, c->e[i]);
	free(c);
}

/* Sends c (its range from its entries), or forgets them when it cannot. */
static void
claim_send(struct source_redis *s, struct rs_claim *c)
{
	const char *lo = c->e[0]->id, *hi = c->e[0]->id;

	for (size_t i = 1; i < c->n; i++) {
		if (sid_less(c->e[i]->id, lo))
			lo = c->e[i]->id;
		if (sid_less(hi, c->e[i]->id))
			hi = c->e[i]->id;
	}
	snprintf(c->from, sizeof c->from, "%s", lo);
	snprintf(c->to, sizeof c->to, "%s", hi);
	c->left = c->n;
	if (claim_ask(s, c) == -1)
		claim_end(s, c);
}

/* A claimed entry's delivery count is known: past max_deliveries a dead letter; else it runs, as attempt count. */
static void
claim_decide(struct source_redis *s, struct rs_entry *e, long long count)
{
	char *bad;

	e->attempt = count > 0 ? (unsigned)count : 1;
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
	rs_hold(s, e);
}

/*
 * XPENDING's answer for a claim: [[id, consumer, idle, count], ...]. Each
 * row of one of its entries decides that entry; an entry with no row was
 * acked meanwhile (or taken by another consumer): forgotten.
 */
static void
claim_pending_cb(redisAsyncContext *ac, void *r, void *arg)
{
	struct rs_claim *c = arg;
	struct source_redis *s = c->s;
	redisReply *reply = r;
	const redisReply *last = NULL;

	if (!rlink_replied(ac, r) || s->stopping) {
		claim_end(s, c);        /* still pending: claimed again later */
		return;
	}
	if (reply->type == REDIS_REPLY_ERROR) {
		claim_end(s, c);
		rlink_fail(s->link, "XPENDING: %s", reply->str);
		return;
	}
	if (reply->type != REDIS_REPLY_ARRAY) {
		claim_end(s, c);
		return;
	}
	for (size_t i = 0; i < reply->elements; i++) {
		const redisReply *p = reply->element[i];
		struct rs_entry *e;

		if (p->type != REDIS_REPLY_ARRAY || p->elements != 4 ||
		    p->element[0]->type != REDIS_REPLY_STRING ||
		    p->element[3]->type != REDIS_REPLY_INTEGER)
			continue;
		last = p->element[0];
		if ((e = rs_find(s, last->str)) == NULL || e->where != RS_CLAIMING ||
		    e->claim != c)
			continue;       /* another entry of this consumer's in the range */
		c->e[e->claim_slot] = NULL;
		c->left--;
		e->claim = NULL;
		claim_decide(s, e, p->element[3]->integer);
	}
	if (c->left > 0 && reply->elements >= c->asked && last != NULL &&
	    last->len < SFMT_STREAM_ID_SIZE) {
		/* a full answer: the rest of the range */
		snprintf(c->from, sizeof c->from, "(%s", last->str);
		if (claim_ask(s, c) == 0)
			return;
	}
	claim_end(s, c);
}

/* ---------------------------------------------------------------- reading */

/*
 * The [id, fields] pairs of a read or claim. A read's entries are taken
 * (attempt 1); claimed ones (an XAUTOCLAIM's, or its own pending entries
 * read again) wait for their delivery counts, which decide: one XPENDING
 * for them all (claim_send).
 */
static void
take_entries(struct source_redis *s, const redisReply *list, bool claimed)
{
	struct rs_claim *c = NULL;
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
		if (entry_read(e, fields, true, why, sizeof why) == -1 &&
		    (e->bad = strdup(why)) == NULL) {
			rs_forget(s, e);
			continue;
		}
		if (c == NULL && (c = calloc(1, sizeof *c)) == NULL) {
			rs_forget(s, e);
			continue;
		}
		c->s = s;
		e->claim = c;
		e->claim_slot = c->n;
		c->e[c->n++] = e;
		if (c->n == RS_CLAIM_BATCH) {
			claim_send(s, c);
			c = NULL;
		}
	}
	if (c != NULL)
		claim_send(s, c);
}

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

	s->reading = false;
	s->asked = 0;
	if (!rlink_replied(ac, r))
		return;
	if (reply->type == REDIS_REPLY_ERROR) {
		rlink_fail(s->link, "XREADGROUP: %s", reply->str);
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

	s->reading = false;
	s->asked = 0;
	if (!rlink_replied(ac, r))
		return;
	if (reply->type == REDIS_REPLY_ERROR) {
		/* NOGROUP: the group (or the stream) went away; reconnecting makes it again */
		rlink_fail(s->link, "XREADGROUP: %s", reply->str);
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
		rlink_fail(s->link, "XREADGROUP: an answer of type %d", reply->type);
		return;
	}
	rs_schedule(s);
}

static void
claim_cb(redisAsyncContext *ac, void *r, void *arg)
{
	struct source_redis *s = arg;
	redisReply *reply = r;

	s->claiming = false;
	if (!rlink_replied(ac, r))
		return;
	if (reply->type == REDIS_REPLY_ERROR) {
		rlink_fail(s->link, "XAUTOCLAIM: %s", reply->str);
		return;
	}
	/* [next cursor, [[id, fields], ...], [deleted ids] (Redis 7)] */
	if (reply->type != REDIS_REPLY_ARRAY || reply->elements < 2 ||
	    reply->element[0]->type != REDIS_REPLY_STRING) {
		rlink_fail(s->link, "XAUTOCLAIM: an answer of an unexpected shape");
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
	struct rlink_cmd a;
	unsigned room;

	if (!rs_up_now(s) || s->stopping)
		return;
	claim_timer(s);
	if (s->claiming || (room = rs_room(s)) == 0)
		return;
	if (s->claim_cursor[0] == '\0')
		snprintf(s->claim_cursor, sizeof s->claim_cursor, "0-0");
	rlink_cmd_init(&a);
	rlink_cmd_str(&a, "XAUTOCLAIM");
	rlink_cmd_str(&a, s->conf.stream);
	rlink_cmd_str(&a, s->conf.group);
	rlink_cmd_str(&a, s->conf.consumer);
	rlink_cmd_u64(&a, s->conf.claim_idle_ms);
	rlink_cmd_str(&a, s->claim_cursor);
	rlink_cmd_str(&a, "COUNT");
	rlink_cmd_u64(&a, room < RS_CLAIM_MAX ? room : RS_CLAIM_MAX);
	if (rlink_send(s->link, RLINK_WRITER, claim_cb, s, &a) == 0)
		s->claiming = true;
	rlink_cmd_free(&a);
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
	struct rlink_cmd a;
	unsigned room;

	if (!rs_up_now(s) || s->stopping || s->reading || !rlink_is_open(s->link, RLINK_READER))
		return;
	if ((room = rs_room(s)) == 0) {
		/* the daemon kicks when a task ends; this covers the rest (a resize) */
		tv = clock_timeval_ms(RS_POLL_MS);
		evtimer_add(s->poll_ev, &tv);
		return;
	}
	if (room > RS_READ_MAX)
		room = RS_READ_MAX;
	rlink_cmd_init(&a);
	rlink_cmd_str(&a, "XREADGROUP");
	rlink_cmd_str(&a, "GROUP");
	rlink_cmd_str(&a, s->conf.group);
	rlink_cmd_str(&a, s->conf.consumer);
	rlink_cmd_str(&a, "COUNT");
	rlink_cmd_u64(&a, room);
	if (s->history[0] == '\0') {
		rlink_cmd_str(&a, "BLOCK");
		rlink_cmd_u64(&a, RS_BLOCK_MS);
	}
	rlink_cmd_str(&a, "STREAMS");
	rlink_cmd_str(&a, s->conf.stream);
	rlink_cmd_str(&a, s->history[0] != '\0' ? s->history : ">");
	if (rlink_send(s->link, RLINK_READER, s->history[0] != '\0' ? history_cb : read_cb, s,
	    &a) == 0) {
		s->reading = true;
		s->asked = room;
	}
	rlink_cmd_free(&a);
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
	bool stale = !rlink_replied(ac, r);
	size_t k = 0;

	if (stale || reply->type != REDIS_REPLY_ARRAY) {
		/* not written: written again once connected */
		for (size_t i = b->n; i-- > 0;) {
			s->nwriting--;
			rs_set_done(s, b->e[i], true);
		}
		if (!stale)
			rlink_fail(s->link, "EXEC: %s", reply->type == REDIS_REPLY_ERROR ?
			    reply->str : "the transaction was not run");
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
				rlink_note_error(s->link, "XADD %s: %s", j + 1 < adds ?
				    s->conf.dead_letter : s->conf.results, x->str);
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

/* The XADDs of e's result (and dead letter) into a. Returns 0, or -1 when the source failed. */
static int
rs_write_entry(struct source_redis *s, struct rs_entry *e, struct rlink_cmd *a)
{
	if (e->dead_reason != NULL) {
		rlink_cmd_reset(a);
		rlink_cmd_str(a, "XADD");
		rlink_cmd_str(a, s->conf.dead_letter);
		rlink_cmd_str(a, "*");
		rlink_cmd_str(a, SFMT_ENTRY);
		rlink_cmd_str(a, e->id);
		rlink_cmd_str(a, SFMT_TASK);
		rlink_cmd_mem(a, e->task_text ? e->task_text : "", e->task_len);
		rlink_cmd_str(a, SFMT_REASON);
		rlink_cmd_str(a, e->dead_reason);
		if (rlink_send(s->link, RLINK_WRITER, rlink_ignore_cb, NULL, a) == -1)
			return -1;
	}
	rlink_cmd_reset(a);
	rlink_cmd_str(a, "XADD");
	rlink_cmd_str(a, s->conf.results);
	if (s->conf.results_maxlen > 0) {
		rlink_cmd_str(a, "MAXLEN");
		rlink_cmd_str(a, "~");
		rlink_cmd_u64(a, s->conf.results_maxlen);
	}
	rlink_cmd_str(a, "*");
	rlink_cmd_str(a, SFMT_DONE);
	rlink_cmd_mem(a, e->done, e->done_len);
	rlink_cmd_str(a, SFMT_ENTRY);
	rlink_cmd_str(a, e->id);
	if (e->client_id != NULL) {
		rlink_cmd_str(a, SFMT_ID);
		rlink_cmd_mem(a, e->client_id, e->client_id_len);
	}
	rlink_cmd_str(a, SFMT_CONSUMER);
	rlink_cmd_str(a, s->conf.consumer);
	rlink_cmd_str(a, SFMT_ATTEMPT);
	rlink_cmd_u64(a, e->attempt);
	return rlink_send(s->link, RLINK_WRITER, rlink_ignore_cb, NULL, a);
}

/* Writes the results waiting, RS_BATCH_MAX to a MULTI/EXEC. */
static void
rs_flush(struct source_redis *s)
{
	struct rlink_cmd a;
	struct rs_batch *b;
	struct rs_entry *e;

	rlink_cmd_init(&a);
	while (rs_up_now(s) && rlink_is_open(s->link, RLINK_WRITER) && !TAILQ_EMPTY(&s->done)) {
		if ((b = calloc(1, sizeof *b)) == NULL)
			break;
		b->s = s;
		rlink_cmd_reset(&a);
		rlink_cmd_str(&a, "MULTI");
		if (rlink_send(s->link, RLINK_WRITER, rlink_ignore_cb, NULL, &a) == -1)
			goto fail;
		while (b->n < RS_BATCH_MAX && (e = TAILQ_FIRST(&s->done)) != NULL) {
			rs_unlist(s, e);
			e->where = RS_WRITING;
			s->nwriting++;
			b->e[b->n++] = e;
			if (rs_write_entry(s, e, &a) == -1)
				goto fail;
		}
		rlink_cmd_reset(&a);
		rlink_cmd_str(&a, "XACK");
		rlink_cmd_str(&a, s->conf.stream);
		rlink_cmd_str(&a, s->conf.group);
		for (size_t i = 0; i < b->n; i++)
			rlink_cmd_str(&a, b->e[i]->id);
		if (rlink_send(s->link, RLINK_WRITER, rlink_ignore_cb, NULL, &a) == -1)
			goto fail;
		rlink_cmd_reset(&a);
		rlink_cmd_str(&a, "EXEC");
		if (rlink_send(s->link, RLINK_WRITER, exec_cb, b, &a) == -1)
			goto fail;
	}
	rlink_cmd_free(&a);
	return;
fail:
	/* the source failed: the batch goes back, to be written once connected */
	for (size_t i = b->n; i-- > 0;) {
		s->nwriting--;
		rs_set_done(s, b->e[i], true);
	}
	free(b);
	rlink_cmd_free(&a);
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
		rlink_close(s->link);
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
	struct rlink_settings link;
	struct source_redis *s;
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
	link.name = s->conf.name;
	link.addr = s->conf.redis;
	link.timeout_ms = s->conf.timeout_ms;
	link.reader_slack_ms = RS_BLOCK_MS;
	link.backoff_max_ms = s->conf.backoff_max_ms;
	link.down = rs_down;
	link.retry = rs_connect;
	link.arg = s;
	if ((s->link = rlink_new(base, &link, cause)) == NULL)
		goto fail;
	s->work_ev = event_new(base, -1, 0, work_cb, s);
	s->claim_ev = evtimer_new(base, claim_tick, s);
	s->refresh_ev = evtimer_new(base, refresh_cb, s);
	s->poll_ev = evtimer_new(base, poll_cb, s);
	if (s->work_ev == NULL || s->claim_ev == NULL || s->refresh_ev == NULL ||
	    s->poll_ev == NULL)
		goto nomem;
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
	if (rs_up_now(s) && !s->stopping && !s->reading)
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
	rlink_drop(s->link, RLINK_READER);
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
	switch (rlink_state(s->link)) {
	case RLINK_CONNECTING: return "connecting";
	case RLINK_UP: return "connected";
	default: return "down";
	}
}

void
source_redis_figures(const struct source_redis *s, struct source_figures *f)
{
	memset(f, 0, sizeof *f);
	f->name = s->conf.name;
	f->pool = s->conf.pool;
	f->state = rs_state_name(s);
	f->connected = rs_up_now(s) && !s->idle_told;
	f->last_error = rlink_last_error(s->link);
	f->read = s->nread;
	f->acked = s->nacked;
	f->claimed = s->nclaimed;
	f->dead_lettered = s->ndead;
	f->bad = s->nbad;
	f->reconnects = rlink_reconnects(s->link);
	f->in_flight = s->nentries;
	for (size_t i = 0; i < s->nbuckets; i++)
		for (struct rs_entry *e = s->buckets[i]; e != NULL; e = e->hnext)
			f->running += e->where == RS_RUNNING;
	f->held = s->nheld;
	f->unwritten = s->ndone;
}

json_t *
source_redis_stats(const struct source_redis *s)
{
	struct source_figures f;

	source_redis_figures(s, &f);
	return json_pack("{s:s, s:s, s:I, s:I, s:I, s:I, s:o, s:s, s:s, s:s, s:s, s:s, s:s, "
	    "s:s, s:b, s:I, s:I, s:I, s:I, s:I, s:I}",
	    "name", f.name, "state", f.state,
	    "read", (json_int_t)f.read, "acked", (json_int_t)f.acked,
	    "claimed", (json_int_t)f.claimed, "dead_lettered", (json_int_t)f.dead_lettered,
	    "last_error", f.last_error != NULL ? json_string(f.last_error) : json_null(),
	    "redis", s->conf.redis, "stream", s->conf.stream, "group", s->conf.group,
	    "consumer", s->conf.consumer, "pool", s->conf.pool, "results", s->conf.results,
	    "dead_letter", s->conf.dead_letter, "connected", f.connected,
	    "in_flight", (json_int_t)f.in_flight, "running", (json_int_t)f.running,
	    "held", (json_int_t)f.held, "unwritten", (json_int_t)f.unwritten,
	    "bad", (json_int_t)f.bad, "reconnects", (json_int_t)f.reconnects);
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
	if (s->link != NULL)
		rlink_close(s->link);
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
	rlink_free(s->link);
	if (s->work_ev != NULL)
		event_free(s->work_ev);
	if (s->claim_ev != NULL)
		event_free(s->claim_ev);
	if (s->refresh_ev != NULL)
		event_free(s->refresh_ev);
	if (s->poll_ev != NULL)
		event_free(s->poll_ev);
	conf_source_clear(&s->conf);
	free(s);
}
