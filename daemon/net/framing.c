/*
 * framing.c: lines out of a byte stream (see framing.h for the contract).
 *
 * The held bytes live in one allocation that exists only while it holds
 * something: the start of an unfinished line, data[0, held), or after a
 * pause the bytes not yet split, data[off, off + pending). The two never
 * coexist: a pause comes right after a line, when nothing is held, and
 * while bytes wait no new line is begun.
 *
 * Complete lines are handed to the callback from the caller's bytes; only a
 * line that began in an earlier piece is assembled in data first. The bytes
 * of an unfinished line are known to hold no newline, so each byte is
 * searched once.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "framing.h"

#define FRAMING_MIN 256 /* first allocation */

struct framing_buf {
	size_t cap;
	size_t held;          /* data[0, held): the start of a line, no newline in it */
	size_t off, pending;  /* data[off, off + pending): bytes not yet split */
	char data[];
};

/* Room for need bytes in data (what is there is kept); -1 when memory ran out. */
static int
buf_reserve(struct framing *f, size_t need)
{
	struct framing_buf *b = f->buf;
	size_t cap;

	if (b != NULL && b->cap >= need)
		return 0;
	cap = b != NULL ? b->cap * 2 : FRAMING_MIN;
	if (cap < need)
		cap = need;
	if ((b = realloc(b, sizeof *b + cap)) == NULL)
		return -1;
	if (f->buf == NULL)
		b->held = b->off = b->pending = 0;
	b->cap = cap;
	f->buf = b;
	return 0;
}

/* Frees the buffer once it holds nothing. */
static void
buf_trim(struct framing *f)
{
	if (f->buf != NULL && f->buf->held == 0 && f->buf->pending == 0) {
		free(f->buf);
		f->buf = NULL;
	}
}

/* Appends n bytes to the held start of a line. */
static int
hold(struct framing *f, const char *p, size_t n)
{
	size_t held = f->buf != NULL ? f->buf->held : 0;

	if (n == 0)
		return 0;
	if (buf_reserve(f, held + n) == -1)
		return -1;
	memcpy(f->buf->data + held, p, n);
	f->buf->held = held + n;
	return 0;
}

/* Hands one complete line of len bytes at p (within the limit) to fn. */
static enum framing_next
deliver(const char *p, size_t len, framing_fn fn, void *arg)
{
	if (len > 0 && p[len - 1] == '\r')
		len--;
	return len > 0 ? fn(arg, FRAMING_LINE, p, len) : FRAMING_GO;
}

static enum framing_result
result_of(enum framing_next next)
{
	switch (next) {
	case FRAMING_PAUSE:
		return FRAMING_PAUSED;
	case FRAMING_STOP:
		return FRAMING_STOPPED;
	default:
		return FRAMING_DONE;
	}
}

/*
 * Splits p[0, n). On FRAMING_DONE, p[*used, n) is the start of a line for
 * the caller to hold (within the limit, with what is held already); on
 * FRAMING_PAUSED, p[*used, n) is not split yet. Only a line completing
 * what is held touches f->buf, so p may point into f->buf when nothing is
 * held.
 */
static enum framing_result
split(struct framing *f, const char *p, size_t n, size_t max, framing_fn fn, void *arg,
    size_t *used)
{
	const char *start = p, *end = p + n, *nl;
	size_t held = f->buf != NULL ? f->buf->held : 0, len;
	enum framing_next next;

	*used = 0;
	if (f->discarding || held > 0) {
		/* The rest of a line begun before. */
		nl = memchr(p, '\n', n);
		f->rest = nl != NULL ? (size_t)(end - nl - 1) : 0;
		if (f->discarding) {
			*used = n;
			if (nl == NULL)
				return FRAMING_DONE;
			f->discarding = false;
			next = FRAMING_GO;
		} else if (nl == NULL) {
			if (held + n <= max)
				return FRAMING_DONE; /* all of it joins what is held */
			f->buf->held = 0;
			f->discarding = true;
			*used = n;
			return result_of(fn(arg, FRAMING_CUT, NULL, held + n));
		} else if ((len = held + (size_t)(nl - p)) > max) {
			f->buf->held = 0;
			next = fn(arg, FRAMING_TOO_LONG, NULL, len);
		} else {
			if (hold(f, p, (size_t)(nl - p)) == -1)
				return FRAMING_NOMEM;
			f->buf->held = 0; /* the line is still there for the call */
			next = deliver(f->buf->data, len, fn, arg);
		}
		p = nl + 1;
		*used = (size_t)(p - start);
		if (next != FRAMING_GO)
			return result_of(next);
	}
	while (p < end) {
		if ((nl = memchr(p, '\n', (size_t)(end - p))) == NULL) {
			if ((size_t)(end - p) <= max)
				return FRAMING_DONE; /* the caller holds p[*used, n) */
			f->discarding = true;
			*used = n;
			f->rest = 0;
			return result_of(fn(arg, FRAMING_CUT, NULL, (size_t)(end - p)));
		}
		len = (size_t)(nl - p);
		f->rest = (size_t)(end - nl - 1);
		next = len > max ? fn(arg, FRAMING_TOO_LONG, NULL, len) : deliver(p, len, fn, arg);
		p = nl + 1;
		*used = (size_t)(p - start);
		if (next != FRAMING_GO)
			return result_of(next);
	}
	return FRAMING_DONE;
}

enum framing_result
framing_resume(struct framing *f, size_t max, framing_fn fn, void *arg)
{
	struct framing_buf *b = f->buf;
	enum framing_result r;
	size_t used, left;

	if (b == NULL || b->pending == 0)
		return FRAMING_DONE;
	/* Nothing is held while bytes wait: split reads data without moving it. */
	r = split(f, b->data + b->off, b->pending, max, fn, arg, &used);
	switch (r) {
	case FRAMING_DONE:
		left = b->pending - used;
		memmove(b->data, b->data + b->off + used, left);
		b->held = left;
		b->off = b->pending = 0;
		break;
	case FRAMING_PAUSED:
		b->off += used;
		b->pending -= used;
		break;
	default:
		b->off = b->pending = 0;
		break;
	}
	buf_trim(f);
	return r;
}

enum framing_result
framing_feed(struct framing *f, const char *p, size_t n, size_t max, framing_fn fn, void *arg)
{
	enum framing_result r;
	size_t used;

	if (n == 0)
		return framing_resume(f, max, fn, arg);
	if (f->buf != NULL && f->buf->pending > 0) {
		/* Bytes wait from a pause: these go behind them. */
		struct framing_buf *b = f->buf;
		if (b->off > 0) {
			memmove(b->data, b->data + b->off, b->pending);
			b->off = 0;
		}
		if (buf_reserve(f, b->pending + n) == -1)
			return FRAMING_NOMEM;
		memcpy(f->buf->data + f->buf->pending, p, n);
		f->buf->pending += n;
		return framing_resume(f, max, fn, arg);
	}
	r = split(f, p, n, max, fn, arg, &used);
	switch (r) {
	case FRAMING_DONE:
		if (hold(f, p + used, n - used) == -1)
			r = FRAMING_NOMEM;
		break;
	case FRAMING_PAUSED:
		if (used < n) {
			if (buf_reserve(f, n - used) == -1)
				return FRAMING_NOMEM;
			memcpy(f->buf->data, p + used, n - used);
			f->buf->off = 0;
			f->buf->pending = n - used;
		}
		break;
	default:
		break;
	}
	buf_trim(f);
	return r;
}

size_t
framing_pending(const struct framing *f)
{
	return f->buf != NULL ? f->buf->pending : 0;
}

size_t
framing_held(const struct framing *f)
{
	return f->buf != NULL ? f->buf->held : 0;
}

void
framing_reset(struct framing *f)
{
	free(f->buf);
	f->buf = NULL;
	f->discarding = false;
	f->rest = 0;
}
