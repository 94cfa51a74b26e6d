/*
 * framing-test: daemon/net/framing.c against a model of its contract. One input
 * of every kind of line (short, empty, CRLF, a lone CR, exactly the limit,
 * one byte over, far over, unfinished at the end) is fed cut at every byte,
 * cut at every pair of bytes, and one byte at a time, with and without the
 * callback pausing; every run must give the events the model says (with
 * where each line ends, as f->rest tells it during the callback), and never
 * hold more than the limit.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "net/framing.h"

#define MAX 16          /* the line limit of the tests */
#define MAX_EVENTS 256

struct event {
	enum framing_event ev;
	size_t len;
	size_t end;             /* the stream's offset after the event's newline (CUT: the
	                           end of the bytes given) */
	char line[4 * MAX];
};

struct log {
	struct event e[MAX_EVENTS];
	size_t n;
	unsigned pause_every;   /* the callback pauses after every this many events; 0 never */
	unsigned stop_at;       /* it stops at this event (1-based); 0 never */
	unsigned calls;
	const struct framing *f; /* when set, each event's end is taken from f->rest */
	size_t given;           /* the stream's bytes given so far */
};

static enum framing_next
record(void *arg, enum framing_event ev, const char *line, size_t len)
{
	struct log *l = arg;
	struct event *e;

	CHECK(l->n < MAX_EVENTS, "too many events");
	e = &l->e[l->n++];
	e->ev = ev;
	e->len = len;
	if (l->f != NULL) {
		CHECK(l->f->rest <= l->given, "rest %zu, past the %zu bytes given", l->f->rest,
		    l->given);
		e->end = l->given - l->f->rest;
	}
	if (ev == FRAMING_LINE) {
		CHECK(line != NULL && len > 0 && len <= MAX, "a line of %zu bytes", len);
		CHECK(memchr(line, '\n', len) == NULL, "a newline inside a line");
		memcpy(e->line, line, len);
	} else
		CHECK(line == NULL, "an over-long line's bytes were handed over");
	l->calls++;
	if (l->stop_at != 0 && l->calls == l->stop_at)
		return FRAMING_STOP;
	if (l->pause_every != 0 && l->calls % l->pause_every == 0)
		return FRAMING_PAUSE;
	return FRAMING_GO;
}

/*
 * The model: the events of input[0, n) fed in pieces ending at cuts[] (the
 * last piece ends at n), and the bytes left held at the end.
 */
static void
model(const char *input, size_t n, const size_t *cuts, size_t ncuts, struct log *out,
    size_t *held)
{
	size_t s = 0, e, b, len;

	out->n = 0;
	*held = 0;
	while (s < n) {
		const char *nl = memchr(input + s, '\n', n - s);
		bool cut = false;

		e = nl != NULL ? (size_t)(nl - input) : n;
		/* a piece ending inside the line, before its newline, past the limit */
		for (size_t i = 0; i <= ncuts && !cut; i++) {
			b = i < ncuts ? cuts[i] : n;
			if (b > s && b <= e && b - s > MAX) {
				struct event *ev = &out->e[out->n++];
				ev->ev = FRAMING_CUT;
				ev->len = b - s;
				ev->end = b;
				cut = true;
			}
		}
		if (nl == NULL) {
			if (!cut)
				*held = e - s;
			break;
		}
		len = e - s;
		if (!cut && len > MAX) {
			struct event *ev = &out->e[out->n++];
			ev->ev = FRAMING_TOO_LONG;
			ev->len = len;
			ev->end = e + 1;
		} else if (!cut) {
			if (len > 0 && input[e - 1] == '\r')
				len--;
			if (len > 0) {
				struct event *ev = &out->e[out->n++];
				ev->ev = FRAMING_LINE;
				ev->len = len;
				ev->end = e + 1;
				memcpy(ev->line, input + s, len);
			}
		}
		s = e + 1;
	}
}

static void
same_events(const struct log *got, const struct log *want, const char *what)
{
	CHECK(got->n == want->n, "%s: %zu events, the model says %zu", what, got->n, want->n);
	for (size_t i = 0; i < got->n; i++) {
		const struct event *g = &got->e[i], *w = &want->e[i];
		CHECK(g->ev == w->ev && g->len == w->len, "%s: event %zu is (%d, %zu), the model "
		    "says (%d, %zu)", what, i, (int)g->ev, g->len, (int)w->ev, w->len);
		CHECK(got->f == NULL || g->end == w->end, "%s: event %zu ends at %zu by rest, the model says %zu",
		    what, i, g->end, w->end);
		CHECK(g->ev != FRAMING_LINE || memcmp(g->line, w->line, g->len) == 0,
		    "%s: line %zu differs", what, i);
	}
}

/* Feeds one piece, resuming after every pause as a paused reader would. */
static void
feed(struct framing *f, const char *p, size_t n, struct log *l)
{
	enum framing_result r = framing_feed(f, p, n, MAX, record, l);

	while (r == FRAMING_PAUSED) {
		CHECK(framing_held(f) == 0, "bytes held while paused");
		r = framing_resume(f, MAX, record, l);
	}
	CHECK(r == FRAMING_DONE, "feed: result %d", (int)r);
	CHECK(framing_pending(f) == 0, "bytes left unsplit");
	CHECK(framing_held(f) <= MAX, "%zu bytes held, past the limit", framing_held(f));
}

/* Feeds input in pieces ending at cuts and compares with the model. */
static void
run(const char *input, size_t n, const size_t *cuts, size_t ncuts, unsigned pause_every,
    const char *what)
{
	static struct log got, want;
	struct framing f = FRAMING_INIT;
	size_t start = 0, held;

	memset(&got, 0, sizeof got);
	got.pause_every = pause_every;
	got.f = &f;
	for (size_t i = 0; i <= ncuts; i++) {
		size_t end = i < ncuts ? cuts[i] : n;
		got.given = end;
		feed(&f, input + start, end - start, &got);
		start = end;
	}
	model(input, n, cuts, ncuts, &want, &held);
	same_events(&got, &want, what);
	if (!f.discarding)
		CHECK(framing_held(&f) == held, "%s: %zu bytes held, the model says %zu", what,
		    framing_held(&f), held);
	framing_reset(&f);
	CHECK(f.buf == NULL && !f.discarding, "reset keeps something");
}

static const char input[] =
    "{\"op\":\"ping\"}\n"     /* short */
    "\n"                      /* empty */
    "crlf line\r\n"           /* CRLF */
    "\r\n"                    /* a lone CR: empty */
    "0123456789abcdef\n"      /* exactly MAX */
    "0123456789abcdefg\n"     /* MAX + 1 */
    "ends in cr 12345\r\n"    /* MAX with its CR */
    "a line three times as long as the limit is\n"
    "x\n"
    "unfinished";

static void
test_every_cut(void)
{
	size_t n = sizeof input - 1;

	test_current = "every cut";
	for (unsigned pause = 0; pause <= 3; pause++) {
		run(input, n, NULL, 0, pause, "whole");
		for (size_t i = 0; i <= n; i++) {
			char what[64];
			snprintf(what, sizeof what, "cut at %zu, pausing every %u", i, pause);
			run(input, n, &i, 1, pause, what);
		}
	}
}

static void
test_every_pair_of_cuts(void)
{
	size_t n = sizeof input - 1, cuts[2];

	test_current = "every pair of cuts";
	for (cuts[0] = 0; cuts[0] <= n; cuts[0]++)
		for (cuts[1] = cuts[0]; cuts[1] <= n; cuts[1]++) {
			char what[64];
			snprintf(what, sizeof what, "cuts at %zu and %zu", cuts[0], cuts[1]);
			run(input, n, cuts, 2, cuts[0] % 3, what);
		}
}

static void
test_byte_at_a_time(void)
{
	size_t n = sizeof input - 1, cuts[sizeof input];

	test_current = "one byte at a time";
	for (size_t i = 0; i < n; i++)
		cuts[i] = i + 1;
	for (unsigned pause = 0; pause <= 2; pause++)
		run(input, n, cuts, n - 1, pause, "one byte at a time");
}

/* Bytes fed while paused wait behind the kept ones; order is kept. */
static void
test_feeding_while_paused(void)
{
	static struct log got, want;
	struct framing f = FRAMING_INIT;
	const char *a = "one\ntwo\nthr", *b = "ee\nfour\n";
	char all[64];
	size_t held;
	enum framing_result r;

	test_current = "feeding while paused";
	memset(&got, 0, sizeof got);
	got.pause_every = 1;
	got.f = &f;
	got.given = strlen(a);
	r = framing_feed(&f, a, strlen(a), MAX, record, &got);
	CHECK(r == FRAMING_PAUSED && got.n == 1, "paused after the first line");
	CHECK(framing_pending(&f) == strlen(a) - 4, "the rest is kept: %zu", framing_pending(&f));
	got.pause_every = 0;
	got.given += strlen(b);
	r = framing_feed(&f, b, strlen(b), MAX, record, &got);
	CHECK(r == FRAMING_DONE && framing_pending(&f) == 0 && framing_held(&f) == 0,
	    "everything split: %d", (int)r);
	snprintf(all, sizeof all, "%s%s", a, b);
	model(all, strlen(all), NULL, 0, &want, &held);
	same_events(&got, &want, "fed while paused");
	framing_reset(&f);
}

/* Feeding nothing (even from NULL) changes nothing. */
static void
test_empty_feed(void)
{
	static struct log got;
	struct framing f = FRAMING_INIT;

	test_current = "empty feed";
	memset(&got, 0, sizeof got);
	CHECK(framing_feed(&f, NULL, 0, MAX, record, &got) == FRAMING_DONE && f.buf == NULL,
	    "nothing held");
	CHECK(framing_feed(&f, "par", 3, MAX, record, &got) == FRAMING_DONE &&
	    framing_feed(&f, NULL, 0, MAX, record, &got) == FRAMING_DONE &&
	    framing_held(&f) == 3 && got.n == 0, "the held start stays");
	framing_reset(&f);
}

/* A stop drops the rest of what was given; what was held before it is gone too. */
static void
test_stop(void)
{
	static struct log got;
	struct framing f = FRAMING_INIT;
	const char *a = "one\ntwo\nthree\nfou";

	test_current = "stop";
	memset(&got, 0, sizeof got);
	got.stop_at = 2;
	CHECK(framing_feed(&f, a, strlen(a), MAX, record, &got) == FRAMING_STOPPED, "stopped");
	CHECK(got.n == 2 && framing_pending(&f) == 0 && framing_held(&f) == 0 && f.buf == NULL,
	    "nothing kept after a stop");
}

/* A pause at the CUT of an unfinished line leaves nothing to resume; the drop goes on. */
static void
test_pause_at_a_cut(void)
{
	static struct log got;
	struct framing f = FRAMING_INIT;
	char longline[3 * MAX];

	test_current = "pause at a cut";
	memset(longline, 'z', sizeof longline);
	memset(&got, 0, sizeof got);
	got.pause_every = 1;
	CHECK(framing_feed(&f, longline, sizeof longline, MAX, record, &got) == FRAMING_PAUSED,
	    "paused");
	CHECK(got.n == 1 && got.e[0].ev == FRAMING_CUT && got.e[0].len == sizeof longline,
	    "one cut");
	CHECK(framing_pending(&f) == 0 && framing_resume(&f, MAX, record, &got) == FRAMING_DONE,
	    "nothing to resume");
	got.pause_every = 0;
	CHECK(framing_feed(&f, "zz\nok\n", 6, MAX, record, &got) == FRAMING_DONE, "fed");
	CHECK(got.n == 2 && got.e[1].ev == FRAMING_LINE && got.e[1].len == 2 &&
	    memcmp(got.e[1].line, "ok", 2) == 0, "the next line after the drop");
	framing_reset(&f);
}

/* The limit may change between calls (a reload): what is held is judged by the new one. */
static void
test_limit_changes(void)
{
	static struct log got;
	struct framing f = FRAMING_INIT;

	test_current = "limit changes";
	memset(&got, 0, sizeof got);
	CHECK(framing_feed(&f, "0123456789", 10, 16, record, &got) == FRAMING_DONE &&
	    framing_held(&f) == 10, "held under the first limit");
	CHECK(framing_feed(&f, "ab", 2, 8, record, &got) == FRAMING_DONE, "fed");
	CHECK(got.n == 1 && got.e[0].ev == FRAMING_CUT && got.e[0].len == 12, "cut by the new limit");
	CHECK(framing_feed(&f, "\nshort\n", 7, 8, record, &got) == FRAMING_DONE && got.n == 2 &&
	    got.e[1].ev == FRAMING_LINE, "the next line passes");
	framing_reset(&f);
}

static const struct test_case cases[] = {
	{ "every_cut", test_every_cut },
	{ "every_pair_of_cuts", test_every_pair_of_cuts },
	{ "byte_at_a_time", test_byte_at_a_time },
	{ "feeding_while_paused", test_feeding_while_paused },
	{ "empty_feed", test_empty_feed },
	{ "stop", test_stop },
	{ "pause_at_a_cut", test_pause_at_a_cut },
	{ "limit_changes", test_limit_changes },
};

int
main(int argc, char **argv)
{
	return test_run(cases, TEST_COUNT(cases), argc, argv);
}
