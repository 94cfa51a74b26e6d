/*
 * proto-encode.c: every event the daemon sends, as JSON text.
 *
 * One writer (struct proto_text) writes every event, with the field names
 * of wire.h, straight into a buffer: no json_t is built for an event, so
 * the frequent ones (accepted, pong, done) cost a few copies, and every
 * number is written by the same code: the daemon's durations in
 * milliseconds with three decimals (fmt_ms), any other number in the
 * shortest form that reads back as the same double (jansson writes 17
 * digits, "0.10000000000000001"). The values an event carries (a request's
 * id, a task's result) are json_t trees written by proto_text_json; strings
 * are escaped as jansson does and must be UTF-8, else the text is marked
 * unencodable and is never sent (its sender answers proto_encode_unsent).
 *
 * The fmt.h fast paths are used here only.
 */
#include "config.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/blob.h"
#include "fmt.h"
#include "pool/pool.h"
#include "proto.h"
#include "base/utf8.h"
#include "wire.h"

#define DONE_GUESS 512          /* first room for a done's body */

/* ------------------------------------------------------------ the writer */

static void
pt_init(struct proto_text *pt, const char *event, json_t *id)
{
	pt->data = pt->inline_buf;
	pt->len = 0;
	pt->cap = sizeof pt->inline_buf;
	pt->heap = NULL;
	pt->nomem = false;
	pt->unencodable = false;
	pt->depth = 0;
	pt->members = 0;
	pt->event = event;
	pt->id = id;
}

void
proto_text_init(struct proto_text *pt)
{
	pt_init(pt, NULL, NULL);
}

void
proto_text_free(struct proto_text *pt)
{
	blob_release(pt->heap);
	pt->heap = NULL;
	pt->data = pt->inline_buf;
	pt->len = 0;
	pt->cap = sizeof pt->inline_buf;
}

/* Room for n more bytes; false once memory ran out (the text is unusable then). */
static bool
pt_room(struct proto_text *pt, size_t n)
{
	struct blob *b;
	size_t cap;

	if (pt->nomem)
		return false;
	if (pt->cap - pt->len >= n)
		return true;
	cap = pt->cap * 2 > pt->len + n ? pt->cap * 2 : pt->len + n;
	if (pt->heap == NULL) {
		if ((b = blob_new(cap)) == NULL) {
			pt->nomem = true;
			return false;
		}
		memcpy(b->data, pt->data, pt->len);
	} else if ((b = blob_grow(pt->heap, cap)) == NULL) {
		pt->nomem = true;
		return false;
	}
	pt->heap = b;
	pt->data = b->data;
	pt->cap = cap;
	return true;
}

static void
pt_mem(struct proto_text *pt, const void *s, size_t n)
{
	if (n == 0 || !pt_room(pt, n))
		return;
	memcpy(pt->data + pt->len, s, n);
	pt->len += n;
}

static void
pt_byte(struct proto_text *pt, char c)
{
	if (pt->len < pt->cap || pt_room(pt, 1))
		pt->data[pt->len++] = c;
}

/* A literal: its length is known at compile time. */
#define pt_lit(pt, s) pt_mem((pt), (s), sizeof (s) - 1)

static void
pt_u64(struct proto_text *pt, uint64_t v)
{
	char buf[24];
	struct fmt f = fmt_init(buf, sizeof buf);

	fmt_u64(&f, v);
	pt_mem(pt, buf, fmt_len(&f, buf));
}

static void
pt_i64(struct proto_text *pt, int64_t v)
{
	char buf[24];
	struct fmt f = fmt_init(buf, sizeof buf);

	fmt_i64(&f, v);
	pt_mem(pt, buf, fmt_len(&f, buf));
}

/* Microseconds as milliseconds with three decimals: 0.030, 1234.567. */
static void
pt_ms(struct proto_text *pt, uint64_t us)
{
	char buf[32];
	struct fmt f = fmt_init(buf, sizeof buf);

	fmt_ms(&f, us);
	pt_mem(pt, buf, fmt_len(&f, buf));
}

/*
 * A double in the shortest of %.15g, %.16g and %.17g that reads back as
 * itself (%.17g always does), with ".0" when it would look like an
 * integer, as jansson marks its reals.
 */
static void
pt_real(struct proto_text *pt, double v)
{
	char buf[40];
	int n = 0;

	/*
	 * The usual real is a count of milliseconds to the microsecond (an exec
	 * task's usage): v nearest to k / 1000 for an integer k, which %.15g
	 * prints as that decimal (a double is within 1.2e-16 of it, relative,
	 * and 15 digits round at 5e-16), so it is written from k, with no
	 * snprintf and strtod (0 too: a short task's usage is often 0). The
	 * same text as below, as proto-test checks.
	 */
	if (!signbit(v) && v < 1e9) {     /* not -0, not NaN */
		double k = (double)(uint64_t)(v * 1000.0 + 0.5);

		if (k / 1000.0 == v) {
			struct fmt f = fmt_init(buf, sizeof buf);
			unsigned frac = (unsigned)((uint64_t)k % 1000);

			fmt_u64(&f, (uint64_t)k / 1000);
			if (frac != 0) {
				char dec[5] = { '.', (char)('0' + frac / 100),
				    (char)('0' + frac / 10 % 10), (char)('0' + frac % 10), '\0' };
				size_t len = 4;

				while (dec[len - 1] == '0')
					len--;
				fmt_mem(&f, dec, len);
			}
			pt_mem(pt, buf, fmt_len(&f, buf));
			if (frac == 0)
				pt_lit(pt, ".0");
			return;
		}
	}
	for (int prec = 15; prec <= 17; prec++) {
		n = snprintf(buf, sizeof buf, "%.*g", prec, v);
		if (prec == 17 || strtod(buf, NULL) == v)
			break;
	}
	if (n <= 0 || (size_t)n >= sizeof buf) {
		pt->unencodable = true;
		return;
	}
	pt_mem(pt, buf, (size_t)n);
	if (strspn(buf, "0123456789-") == (size_t)n)
		pt_lit(pt, ".0");
}

/*
 * s[0..n) as a JSON string, escaped as jansson escapes: '"', '\\' and the
 * control characters, the short forms where JSON has them. Bytes that are
 * not UTF-8 make the text unencodable.
 */
static void
pt_string(struct proto_text *pt, const char *s, size_t n)
{
	const unsigned char *p = (const unsigned char *)s, *end = p + n, *run;
	char esc[8];

	pt_byte(pt, '"');
	while (p < end) {
		for (run = p; p < end && *p >= 0x20 && *p < 0x80 && *p != '"' && *p != '\\'; p++)
			;
		pt_mem(pt, run, (size_t)(p - run));
		if (p == end)
			break;
		if (*p >= 0x80) {
			/* a run of non-ASCII bytes is whole characters, or not UTF-8 */
			for (run = p; p < end && *p >= 0x80; p++)
				;
			if (!utf8_text(run, (size_t)(p - run))) {
				pt->unencodable = true;
				return;
			}
			pt_mem(pt, run, (size_t)(p - run));
			continue;
		}
		switch (*p) {
		case '"': pt_lit(pt, "\\\""); break;
		case '\\': pt_lit(pt, "\\\\"); break;
		case '\b': pt_lit(pt, "\\b"); break;
		case '\f': pt_lit(pt, "\\f"); break;
		case '\n': pt_lit(pt, "\\n"); break;
		case '\r': pt_lit(pt, "\\r"); break;
		case '\t': pt_lit(pt, "\\t"); break;
		default:
			snprintf(esc, sizeof esc, "\\u%04X", (unsigned)*p);
			pt_mem(pt, esc, 6);
			break;
		}
		p++;
	}
	pt_byte(pt, '"');
}

static void
pt_cstring(struct proto_text *pt, const char *s)
{
	pt_string(pt, s, strlen(s));
}

/* Opens an object or an array (c is '{' or '['), inside which nothing is written yet. */
static void
pt_open(struct proto_text *pt, char c)
{
	pt_byte(pt, c);
	pt->depth++;
	pt->members &= ~(UINT32_C(1) << pt->depth);
}

static void
pt_close(struct proto_text *pt, char c)
{
	pt_byte(pt, c);
	pt->depth--;
}

/* Before a member of the innermost container: a comma unless it is the first. */
static void
pt_next(struct proto_text *pt)
{
	uint32_t bit = UINT32_C(1) << pt->depth;

	if (pt->members & bit)
		pt_byte(pt, ',');
	pt->members |= bit;
}

/* "key": already quoted, with its colon (pt_key) */
static void
pt_key_text(struct proto_text *pt, const char *text, size_t n)
{
	pt_next(pt);
	pt_mem(pt, text, n);
}

/*
 * "key": for the names of wire.h, string literals that need no escaping:
 * quoted at compile time, so each key is one copy of a known length (a
 * done has a dozen keys, and every answer some).
 */
#define pt_key(pt, key) pt_key_text((pt), "\"" key "\":", sizeof ("\"" key "\":") - 1)

static void
pt_bool(struct proto_text *pt, bool b)
{
	if (b)
		pt_lit(pt, "true");
	else
		pt_lit(pt, "false");
}

void
proto_text_json(struct proto_text *pt, json_t *v)
{
	const char *key;
	json_t *member;
	size_t i;
	bool first = true;

	switch (json_typeof(v)) {
	case JSON_OBJECT:
		pt_byte(pt, '{');
		json_object_foreach(v, key, member) {
			if (!first)
				pt_byte(pt, ',');
			first = false;
			pt_cstring(pt, key);
			pt_byte(pt, ':');
			proto_text_json(pt, member);
		}
		pt_byte(pt, '}');
		break;
	case JSON_ARRAY:
		pt_byte(pt, '[');
		json_array_foreach(v, i, member) {
			if (i > 0)
				pt_byte(pt, ',');
			proto_text_json(pt, member);
		}
		pt_byte(pt, ']');
		break;
	case JSON_STRING:
		pt_string(pt, json_string_value(v), json_string_length(v));
		break;
	case JSON_INTEGER:
		pt_i64(pt, json_integer_value(v));
		break;
	case JSON_REAL:
		pt_real(pt, json_real_value(v));
		break;
	case JSON_TRUE:
		pt_lit(pt, "true");
		break;
	case JSON_FALSE:
		pt_lit(pt, "false");
		break;
	case JSON_NULL:
		pt_lit(pt, "null");
		break;
	}
}

/*
 * {"event":"NAME" and, when id is not NULL (or always, for errors),
 * "id":ID: how every event but a done's body begins.
 */
static void
pt_event(struct proto_text *pt, const char *event, json_t *id, bool id_always)
{
	pt_init(pt, event, id);
	pt_open(pt, '{');
	pt_key(pt, FIELD_EVENT);
	pt_byte(pt, '"');
	pt_mem(pt, event, strlen(event));
	pt_byte(pt, '"');
	if (id != NULL) {
		pt_key(pt, FIELD_ID);
		proto_text_json(pt, id);
	} else if (id_always) {
		pt_key(pt, FIELD_ID);
		pt_lit(pt, "null");
	}
}

static void
pt_end(struct proto_text *pt)
{
	pt_close(pt, '}');
}

/* "error":{"code":CODE,"message":MESSAGE} */
static void
pt_error(struct proto_text *pt, const char *code, const char *message)
{
	pt_key(pt, FIELD_ERROR);
	pt_open(pt, '{');
	pt_key(pt, FIELD_CODE);
	pt_cstring(pt, code);
	pt_key(pt, FIELD_MESSAGE);
	pt_cstring(pt, message != NULL ? message : code);
	pt_close(pt, '}');
}

/* ------------------------------------------------------------ the events */

void
proto_encode_pong(struct proto_text *pt, json_t *id)
{
	pt_event(pt, EV_PONG, id, false);
	pt_end(pt);
}

void
proto_encode_hello(struct proto_text *pt, json_t *id, const char *role)
{
	pt_event(pt, EV_HELLO, id, false);
	pt_key(pt, FIELD_SERVER);
	pt_cstring(pt, WIRE_SERVER_NAME);
	pt_key(pt, FIELD_VERSION);
	pt_cstring(pt, PACKAGE_VERSION);
	pt_key(pt, FIELD_PROTOCOL);
	pt_u64(pt, WIRE_PROTOCOL_VERSION);
	pt_key(pt, FIELD_ROLE);
	pt_cstring(pt, role);
	pt_end(pt);
}

void
proto_encode_accepted(struct proto_text *pt, json_t *id, const struct proto_task *v)
{
	pt_event(pt, EV_ACCEPTED, id, false);
	pt_key(pt, FIELD_TASK);
	pt_u64(pt, v->id);
	pt_key(pt, FIELD_POOL);
	pt_cstring(pt, v->pool);
	pt_key(pt, FIELD_QUEUED);
	pt_u64(pt, v->queued_ahead);
	if (v->duplicate) {
		pt_key(pt, FIELD_DUPLICATE);
		pt_bool(pt, true);
	}
	pt_end(pt);
}

void
proto_encode_rejected(struct proto_text *pt, json_t *id, const char *code, const char *message)
{
	pt_event(pt, EV_REJECTED, id, false);
	pt_error(pt, code, message);
	pt_end(pt);
}

void
proto_encode_error(struct proto_text *pt, json_t *id, const char *code, const char *message)
{
	pt_event(pt, EV_ERROR, id, true);
	pt_error(pt, code, message);
	pt_end(pt);
}

void
proto_encode_status(struct proto_text *pt, json_t *id, const struct proto_task *v)
{
	pt_event(pt, EV_STATUS, id, false);
	pt_key(pt, FIELD_TASK);
	pt_u64(pt, v->id);
	pt_key(pt, FIELD_STATE);
	pt_cstring(pt, v->state);
	pt_key(pt, FIELD_POOL);
	pt_cstring(pt, v->pool);
	if (v->owner != NULL) {
		pt_key(pt, FIELD_OWNER);
		pt_cstring(pt, v->owner);
	}
	if (v->label != NULL) {
		pt_key(pt, FIELD_LABEL);
		pt_cstring(pt, v->label);
	}
	pt_key(pt, FIELD_PRIORITY);
	pt_i64(pt, v->priority);
	if (v->finished || v->times_so_far) {
		pt_key(pt, FIELD_QUEUED_MS);
		pt_ms(pt, v->queued_us);
		pt_key(pt, FIELD_RUN_MS);
		pt_ms(pt, v->run_us);
	}
	if (v->attempt > 0) {
		pt_key(pt, FIELD_ATTEMPT);
		pt_u64(pt, v->attempt);
	}
	if (v->nafter > 0) {
		pt_key(pt, FIELD_AFTER);
		pt_open(pt, '[');
		for (size_t i = 0; i < v->nafter; i++) {
			pt_next(pt);
			pt_u64(pt, v->after[i]);
		}
		pt_close(pt, ']');
	}
	if (v->due) {
		pt_key(pt, FIELD_DUE_MS);
		pt_ms(pt, v->due_us);
	}
	if (v->command != NULL || (v->kind != NULL && *v->kind != '\0')) {
		pt_key(pt, FIELD_COMMAND);
		pt_cstring(pt, v->command != NULL ? v->command : v->kind);
	}
	if (v->spec != NULL) {
		pt_key(pt, FIELD_SPEC);
		proto_text_json(pt, v->spec);
	}
	if (v->submit != NULL) {
		pt_key(pt, FIELD_SUBMIT);
		proto_text_json(pt, v->submit);
	}
	pt_end(pt);
}

void
proto_encode_list(struct proto_text *pt, json_t *id, const struct proto_task *tasks,
    size_t ntasks, bool more, uint64_t before)
{
	pt_event(pt, EV_LIST, id, false);
	pt_key(pt, FIELD_TASKS);
	pt_open(pt, '[');
	for (size_t i = 0; i < ntasks; i++) {
		const struct proto_task *v = &tasks[i];
		pt_next(pt);
		pt_open(pt, '{');
		pt_key(pt, FIELD_TASK);
		pt_u64(pt, v->id);
		pt_key(pt, FIELD_POOL);
		pt_cstring(pt, v->pool);
		pt_key(pt, FIELD_OWNER);
		pt_cstring(pt, v->owner != NULL ? v->owner : "");
		pt_key(pt, FIELD_LABEL);
		pt_cstring(pt, v->label != NULL ? v->label : "");
		pt_key(pt, FIELD_KIND);
		pt_cstring(pt, v->kind);
		pt_key(pt, FIELD_STATE);
		pt_cstring(pt, v->state);
		pt_key(pt, FIELD_PRIORITY);
		pt_i64(pt, v->priority);
		pt_key(pt, FIELD_QUEUED_MS);
		pt_ms(pt, v->queued_us);
		pt_key(pt, FIELD_RUN_MS);
		pt_ms(pt, v->run_us);
		pt_key(pt, FIELD_COMMAND);
		pt_cstring(pt, v->command != NULL ? v->command : v->kind);
		if (v->attempt > 0) {
			pt_key(pt, FIELD_ATTEMPT);
			pt_u64(pt, v->attempt);
		}
		pt_close(pt, '}');
	}
	pt_close(pt, ']');
	pt_key(pt, FIELD_MORE);
	pt_bool(pt, more);
	if (more) {
		pt_key(pt, FIELD_BEFORE);
		pt_u64(pt, before);
	}
	pt_end(pt);
}

static void
pt_pool_stats(struct proto_text *pt, const struct proto_pool_stats *p)
{
	const struct pool_snapshot *s = p->s;

	pt_next(pt);
	pt_open(pt, '{');
	pt_key(pt, FIELD_NAME);
	pt_cstring(pt, p->name);
	pt_key(pt, FIELD_STATE);
	pt_cstring(pt, s->closed ? POOL_STATE_CLOSED : s->paused ? POOL_STATE_PAUSED :
	    POOL_STATE_OPEN);
	pt_key(pt, FIELD_TARGET);
	pt_u64(pt, s->target);
	pt_key(pt, FIELD_MIN_WORKERS);
	pt_u64(pt, s->min_workers);
	pt_key(pt, FIELD_MAX_WORKERS);
	pt_u64(pt, s->max_workers);
	pt_key(pt, FIELD_KEEPALIVE_MS);
	pt_u64(pt, s->keepalive_us / 1000);
	pt_key(pt, FIELD_WORKERS);
	pt_u64(pt, s->workers);
	pt_key(pt, FIELD_BUSY);
	pt_u64(pt, s->busy);
	pt_key(pt, FIELD_IDLE);
	pt_u64(pt, s->idle);
	pt_key(pt, FIELD_QUEUED);
	pt_u64(pt, s->queued);
	pt_key(pt, FIELD_CAPACITY);
	pt_u64(pt, s->capacity);
	pt_key(pt, FIELD_LIMIT);
	pt_u64(pt, s->limit);
	pt_key(pt, FIELD_ACCEPTED);
	pt_u64(pt, s->accepted);
	pt_key(pt, FIELD_REJECTED);
	pt_u64(pt, s->rejected);
	pt_key(pt, FIELD_REJECTED_FULL);
	pt_u64(pt, s->rejected_full);
	pt_key(pt, FIELD_REJECTED_QUOTA);
	pt_u64(pt, s->rejected_quota);
	pt_key(pt, FIELD_ADMISSION);
	pt_cstring(pt, p->admission != NULL ? p->admission : ADMISSION_REJECT);
	pt_key(pt, FIELD_HELD);
	pt_u64(pt, p->held);
	pt_key(pt, FIELD_DISPLACED);
	pt_u64(pt, s->displaced);
	pt_key(pt, FIELD_FAIR);
	pt_cstring(pt, s->fair ? FAIR_OWNER : FAIR_NONE);
	if (s->max_queued_per_owner != 0) {
		pt_key(pt, FIELD_MAX_QUEUED_PER_OWNER);
		pt_u64(pt, s->max_queued_per_owner);
	}
	if (s->max_running_per_owner != 0) {
		pt_key(pt, FIELD_MAX_RUNNING_PER_OWNER);
		pt_u64(pt, s->max_running_per_owner);
	}
	pt_key(pt, FIELD_SUCCEEDED);
	pt_u64(pt, s->succeeded);
	pt_key(pt, FIELD_FAILED);
	pt_u64(pt, s->failed);
	pt_key(pt, FIELD_TIMED_OUT);
	pt_u64(pt, s->timed_out);
	pt_key(pt, FIELD_CANCELLED);
	pt_u64(pt, s->cancelled);
	pt_key(pt, FIELD_EXPIRED);
	pt_u64(pt, s->expired);
	pt_key(pt, FIELD_LOST);
	pt_u64(pt, s->lost);
	pt_key(pt, FIELD_REJECTED_STORAGE);
	pt_u64(pt, s->rejected_storage);
	pt_key(pt, FIELD_OLDEST_QUEUED_MS);
	pt_ms(pt, s->oldest_queued_us);
	/* the last seconds (pool.h's struct pool_recent) */
	pt_key(pt, FIELD_RATE_PER_S);
	pt_real(pt, s->recent.rate_per_s);
	pt_key(pt, FIELD_QUEUED_P50_MS);
	pt_ms(pt, s->recent.queued_p50_us);
	pt_key(pt, FIELD_QUEUED_P99_MS);
	pt_ms(pt, s->recent.queued_p99_us);
	pt_key(pt, FIELD_RUN_P50_MS);
	pt_ms(pt, s->recent.run_p50_us);
	pt_key(pt, FIELD_RUN_P99_MS);
	pt_ms(pt, s->recent.run_p99_us);
	pt_key(pt, FIELD_CLOSED);
	pt_bool(pt, s->closed);
	pt_key(pt, FIELD_REMOVED);
	pt_bool(pt, p->removed);
	pt_key(pt, FIELD_SCHEDULED);
	pt_u64(pt, p->scheduled);
	pt_key(pt, FIELD_WAITING);
	pt_u64(pt, p->waiting);
	pt_key(pt, FIELD_RETRIED);
	pt_u64(pt, p->retried);
	pt_key(pt, FIELD_SKIPPED);
	pt_u64(pt, p->skipped);
	pt_close(pt, '}');
}

void
proto_encode_stats(struct proto_text *pt, json_t *id, const struct proto_stats *st)
{
	pt_event(pt, EV_STATS, id, false);
	pt_key(pt, FIELD_POOLS);
	pt_open(pt, '[');
	for (size_t i = 0; i < st->npools; i++)
		pt_pool_stats(pt, &st->pools[i]);
	pt_close(pt, ']');
	if (st->sources != NULL) {
		pt_key(pt, FIELD_SOURCES);
		proto_text_json(pt, st->sources);
	}
	pt_key(pt, FIELD_CONNECTIONS);
	pt_u64(pt, st->connections);
	pt_key(pt, FIELD_UPTIME_MS);
	pt_u64(pt, st->uptime_ms);
	pt_key(pt, FIELD_TASKS_OUTSTANDING);
	pt_u64(pt, st->tasks_outstanding);
	pt_key(pt, FIELD_TASKS_RETAINED);
	pt_u64(pt, st->tasks_retained);
	pt_key(pt, FIELD_TASKS_RETAINED_BYTES);
	pt_u64(pt, st->tasks_retained_bytes);
	pt_key(pt, FIELD_RESULTS_FORGOTTEN);
	pt_u64(pt, st->results_forgotten);
	pt_key(pt, FIELD_VERSION);
	pt_cstring(pt, st->version);
	pt_key(pt, FIELD_CONTAINMENT);
	pt_cstring(pt, st->containment);
	pt_key(pt, FIELD_PHASE);
	pt_cstring(pt, st->phase);
	if (st->journal != NULL) {
		pt_key(pt, FIELD_JOURNAL);
		proto_text_json(pt, st->journal);
	}
	if (st->loop != NULL) {
		pt_key(pt, FIELD_LOOP);
		proto_text_json(pt, st->loop);
	}
	if (st->spool != NULL) {
		pt_key(pt, FIELD_SPOOL);
		proto_text_json(pt, st->spool);
	}
	pt_key(pt, FIELD_TCP_AUTH);
	pt_cstring(pt, st->tcp_auth);
	pt_key(pt, FIELD_WARNINGS);
	pt_open(pt, '[');
	for (size_t i = 0; i < st->nwarnings; i++) {
		pt_next(pt);
		pt_cstring(pt, st->warnings[i]);
	}
	pt_close(pt, ']');
	pt_end(pt);
}

void
proto_encode_input_ok(struct proto_text *pt, json_t *id, uint64_t task, size_t buffered,
    bool stdin_closed)
{
	pt_event(pt, EV_OK, id, false);
	pt_key(pt, FIELD_TASK);
	pt_u64(pt, task);
	pt_key(pt, FIELD_BUFFERED);
	pt_u64(pt, buffered);
	if (stdin_closed) {
		pt_key(pt, FIELD_STDIN_CLOSED);
		pt_bool(pt, true);
	}
	pt_end(pt);
}

void
proto_encode_cut(struct proto_text *pt, json_t *id, uint64_t task, const char *stream,
    uint64_t kept, uint64_t seen, const char *message)
{
	pt_event(pt, EV_CUT, id, false);
	pt_key(pt, FIELD_TASK);
	pt_u64(pt, task);
	if (stream != NULL) {
		pt_key(pt, FIELD_STREAM);
		pt_cstring(pt, stream);
	}
	pt_key(pt, FIELD_KEPT);
	pt_u64(pt, kept);
	pt_key(pt, FIELD_SEEN);
	pt_u64(pt, seen);
	pt_key(pt, FIELD_MESSAGE);
	pt_cstring(pt, message);
	pt_end(pt);
}

void
proto_encode_cancelled(struct proto_text *pt, json_t *id, uint64_t task, const char *state)
{
	pt_event(pt, EV_OK, id, false);
	pt_key(pt, FIELD_TASK);
	pt_u64(pt, task);
	pt_key(pt, FIELD_STATE);
	pt_cstring(pt, state);
	pt_end(pt);
}

void
proto_encode_resized(struct proto_text *pt, json_t *id, const char *pool, unsigned target,
    unsigned workers, unsigned min_workers, unsigned max_workers, const char *note)
{
	pt_event(pt, EV_OK, id, false);
	pt_key(pt, FIELD_POOL);
	pt_cstring(pt, pool);
	pt_key(pt, FIELD_TARGET);
	pt_u64(pt, target);
	pt_key(pt, FIELD_WORKERS);
	pt_u64(pt, workers);
	pt_key(pt, FIELD_MIN_WORKERS);
	pt_u64(pt, min_workers);
	pt_key(pt, FIELD_MAX_WORKERS);
	pt_u64(pt, max_workers);
	pt_key(pt, FIELD_NOTE);
	pt_cstring(pt, note);
	pt_end(pt);
}

void
proto_encode_pool_state(struct proto_text *pt, json_t *id, const char *pool, const char *state)
{
	pt_event(pt, EV_OK, id, false);
	pt_key(pt, FIELD_POOL);
	pt_cstring(pt, pool);
	pt_key(pt, FIELD_STATE);
	pt_cstring(pt, state);
	pt_end(pt);
}

void
proto_encode_shutting_down(struct proto_text *pt, json_t *id, const char *mode)
{
	pt_event(pt, EV_OK, id, false);
	pt_key(pt, FIELD_MODE);
	pt_cstring(pt, mode);
	pt_end(pt);
}

/* The body of a done, after its "{" (and a receiver's id), into pt's blob. */
static void
pt_done_body(struct proto_text *pt, const struct proto_task *v, json_t *result,
    const char *code, const char *message)
{
	pt_init(pt, EV_DONE, NULL);
	if ((pt->heap = blob_new(DONE_GUESS)) == NULL)
		abort(); /* out of memory with a done to deliver: fail loudly */
	pt->data = pt->heap->data;
	pt->cap = pt->heap->cap;
	/* the "{" is the receiver's (proto_encode_done_head): members only */
	pt->depth = 1;
	pt_key(pt, FIELD_EVENT);
	pt_lit(pt, "\"" EV_DONE "\"");
	pt_key(pt, FIELD_TASK);
	pt_u64(pt, v->id);
	pt_key(pt, FIELD_POOL);
	pt_cstring(pt, v->pool);
	pt_key(pt, FIELD_STATE);
	pt_cstring(pt, v->state);
	pt_key(pt, FIELD_QUEUED_MS);
	pt_ms(pt, v->queued_us);
	pt_key(pt, FIELD_RUN_MS);
	pt_ms(pt, v->run_us);
	if (v->attempt > 0) {
		pt_key(pt, FIELD_ATTEMPT);
		pt_u64(pt, v->attempt);
	}
	if (result != NULL) {
		pt_key(pt, FIELD_RESULT);
		proto_text_json(pt, result);
	}
	if (code != NULL)
		pt_error(pt, code, message);
	pt_end(pt);
}

struct blob *
proto_encode_done(const struct proto_task *v)
{
	struct proto_text pt;
	struct blob *b;

	pt_done_body(&pt, v, v->result, v->error_code, v->error_message);
	if (pt.unencodable) {
		/* a kind's fault (a string that is not UTF-8): the done still goes out */
		proto_text_free(&pt);
		pt_done_body(&pt, v, NULL, ERR_INTERNAL, "the task's result could not be "
		    "encoded as JSON (a fault of tpd)");
	}
	if (!proto_text_ok(&pt))
		abort(); /* out of memory with a done to deliver: fail loudly */
	b = pt.heap;
	b->len = pt.len;
	return blob_fit(b);
}

void
proto_encode_done_head(struct proto_text *pt, json_t *id)
{
	pt_init(pt, EV_DONE, id);
	pt_byte(pt, '{');
	if (id != NULL) {
		pt_lit(pt, "\"" FIELD_ID "\":");
		proto_text_json(pt, id);
		pt_byte(pt, ',');
	}
}

json_t *
proto_event_started(int64_t pid)
{
	if (pid <= 0)
		return json_pack("{s:s}", FIELD_EVENT, EV_STARTED);
	return json_pack("{s:s, s:I}", FIELD_EVENT, EV_STARTED, FIELD_PID, (json_int_t)pid);
}

json_t *
proto_event_output(const char *stream)
{
	return json_pack("{s:s, s:s}", FIELD_EVENT, EV_OUTPUT, FIELD_STREAM, stream);
}

void
proto_encode_stream(struct proto_text *pt, json_t *event, json_t *id, uint64_t task)
{
	const char *key;
	json_t *member;

	pt_init(pt, json_string_value(json_object_get(event, FIELD_EVENT)), id);
	pt_open(pt, '{');
	json_object_foreach(event, key, member) {
		pt_next(pt);
		pt_cstring(pt, key);
		pt_byte(pt, ':');
		proto_text_json(pt, member);
	}
	if (id != NULL) {
		pt_key(pt, FIELD_ID);
		proto_text_json(pt, id);
	}
	pt_key(pt, FIELD_TASK);
	pt_u64(pt, task);
	pt_end(pt);
}

void
proto_encode_unsent(struct proto_text *pt, const struct proto_text *unsent)
{
	const char *message = unsent->unencodable ?
	    "the answer could not be encoded as JSON (a fault of tpd, logged)" :
	    "the answer could not be built (out of memory)";

	proto_encode_error(pt, unsent->id, ERR_INTERNAL, message);
	if (!proto_text_ok(pt)) {
		proto_text_free(pt);
		proto_encode_error(pt, NULL, ERR_INTERNAL, message);
	}
}

size_t
proto_encode_refusal(char *buf, size_t size, const char *code, const char *message)
{
	struct proto_text pt;
	size_t n = 0;

	proto_encode_error(&pt, NULL, code, message);
	if (proto_text_ok(&pt) && pt.len < size) {
		memcpy(buf, pt.data, pt.len);
		n = pt.len;
	}
	proto_text_free(&pt);
	return n;
}
