/*
 * framing-fuzzer.c: libFuzzer target for the line framing of framing.c,
 * the code that splits what a client sends into request lines.
 *
 * The input's first four bytes choose the line limit (1 to 4096), how the
 * rest is cut into pieces and when the callback pauses; the rest is the byte
 * stream. It is fed in those pieces, with pauses resumed either at once or
 * after the next piece was fed behind them, and every event is checked
 * against a model that splits the whole stream at once:
 *   - every line of at most the limit (a "\r" before its "\n" counted) comes
 *     as FRAMING_LINE, whole, without its "\r", in order, empty ones skipped;
 *   - every longer one comes as exactly one FRAMING_TOO_LONG (with its full
 *     length) or FRAMING_CUT (with a length past the limit), in its place;
 *   - an unfinished line at the end is held (at most the limit), or was cut
 *     when it passed the limit; nothing is pending once resumed.
 * Beyond that, ASan, UBSan and LeakSanitizer catch what they catch.
 */
#include "config.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "net/framing.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void __attribute__((noreturn, format(printf, 1, 2)))
broken(const char *fmt, ...)
{
	va_list ap;

	fputs("framing-fuzzer: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	abort();
}

/* What the model expects next, as the whole stream splits. */
struct expect {
	const char *s, *end;    /* the stream */
	size_t max;
};

/* The next event the model gives: 1 (a line: *line, *len), 2 (over the limit: *len), 0 (none). */
static int
model_next(struct expect *e, const char **line, size_t *len)
{
	for (;;) {
		const char *nl = memchr(e->s, '\n', (size_t)(e->end - e->s));
		size_t n;

		if (nl == NULL)
			return 0;
		n = (size_t)(nl - e->s);
		*line = e->s;
		e->s = nl + 1;
		if (n > e->max) {
			*len = n;
			return 2;
		}
		if (n > 0 && (*line)[n - 1] == '\r')
			n--;
		if (n == 0)
			continue;
		*len = n;
		return 1;
	}
}

struct run {
	struct expect model;
	uint32_t pauses;        /* bit i: pause after the i-th event (mod 32) */
	unsigned events;
};

static enum framing_next
on_event(void *arg, enum framing_event ev, const char *line, size_t len)
{
	struct run *r = arg;
	const char *want = NULL;
	size_t wlen = 0;
	int kind = model_next(&r->model, &want, &wlen);

	switch (ev) {
	case FRAMING_LINE:
		if (kind != 1 || len != wlen || memcmp(line, want, len) != 0)
			broken("event %u: a line of %zu bytes where the model has %s of %zu",
			    r->events, len, kind == 1 ? "a line" : kind == 2 ? "one too long" :
			    "nothing", wlen);
		break;
	case FRAMING_TOO_LONG:
		if (kind != 2 || len != wlen || line != NULL)
			broken("event %u: too long (%zu bytes) where the model has kind %d of %zu",
			    r->events, len, kind, wlen);
		break;
	case FRAMING_CUT:
		if (line != NULL || len <= r->model.max)
			broken("event %u: a cut at %zu bytes, limit %zu", r->events, len,
			    r->model.max);
		if (kind == 1)
			broken("event %u: a cut where the model has a line", r->events);
		if (kind == 0) {
			/* the unfinished last line: the model has it whole, past the limit */
			if ((size_t)(r->model.end - r->model.s) <= r->model.max)
				broken("event %u: an unfinished line cut within the limit", r->events);
			r->model.s = r->model.end;
		}
		break;
	}
	return (r->pauses >> (r->events++ % 32)) & 1 ? FRAMING_PAUSE : FRAMING_GO;
}

/* Resumes until nothing is pending. */
static void
drain(struct framing *f, struct run *r)
{
	enum framing_result res;

	while ((res = framing_resume(f, r->model.max, on_event, r)) == FRAMING_PAUSED)
		;
	if (res != FRAMING_DONE || framing_pending(f) != 0)
		broken("resume left %zu bytes pending (result %d)", framing_pending(f), res);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct framing f = FRAMING_INIT;
	struct run r;
	const char *p;
	size_t n, off = 0, piece;
	uint8_t cut;
	bool resume_late;

	if (size < 4)
		return 0;
	memset(&r, 0, sizeof r);
	r.model.max = 1 + ((size_t)data[0] << 8 | data[1]) % 4096;
	cut = data[2];
	resume_late = data[1] & 1;
	r.pauses = (uint32_t)data[3] * 0x01010101u;
	p = (const char *)data + 4;
	n = size - 4;
	r.model.s = p;
	r.model.end = p + n;
	while (off < n) {
		enum framing_result res;

		/* pieces of 1 to 256 bytes, or the rest at once */
		piece = cut == 0 ? n - off : 1 + (size_t)((cut * (off + 7)) % 256);
		if (piece > n - off)
			piece = n - off;
		res = framing_feed(&f, p + off, piece, r.model.max, on_event, &r);
		off += piece;
		if (res == FRAMING_NOMEM)
			broken("out of memory");
		if (res == FRAMING_PAUSED && (!resume_late || off == n))
			drain(&f, &r);
	}
	drain(&f, &r);
	{
		/* what is left in the model (past empty lines) is the unfinished last line */
		const char *line;
		size_t len, left;

		if (model_next(&r.model, &line, &len) != 0)
			broken("the model has lines the framing never gave");
		left = (size_t)(r.model.end - r.model.s);
		if (left <= r.model.max && framing_held(&f) != left)
			broken("%zu bytes of an unfinished line held, %zu expected",
			    framing_held(&f), left);
		if (framing_held(&f) > r.model.max)
			broken("%zu bytes held, past the limit %zu", framing_held(&f), r.model.max);
	}
	framing_reset(&f);
	return 0;
}
