/* stream-format.c: the Redis stream entries of a tpd source (stream-format.h). */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "stream-format.h"
#include "wire.h"

static bool
key_is(const char *key, size_t keylen, const char *name)
{
	return keylen == strlen(name) && memcmp(key, name, keylen) == 0;
}

const char *
sfmt_show(char *buf, const char *p, size_t len)
{
	size_t o = 0;

	for (size_t i = 0; i < len; i++) {
		unsigned char ch = (unsigned char)p[i];

		if (i == 40) {
			memcpy(buf + o, "...", 3);
			o += 3;
			break;
		}
		if (ch >= 0x20 && ch < 0x7f && ch != '"' && ch != '\\')
			buf[o++] = (char)ch;
		else
			o += (size_t)snprintf(buf + o, SFMT_SHOW_SIZE - o, "\\x%02x", ch);
	}
	buf[o] = '\0';
	return buf;
}

void
sfmt_entry_init(struct sfmt_entry *e)
{
	memset(e, 0, sizeof *e);
}

static void entry_bad(struct sfmt_entry *, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void
entry_bad(struct sfmt_entry *e, const char *fmt, ...)
{
	va_list ap;

	if (e->bad)
		return;         /* the first fault is the one told */
	e->bad = true;
	va_start(ap, fmt);
	vsnprintf(e->why, sizeof e->why, fmt, ap);
	va_end(ap);
}

void
sfmt_entry_field(struct sfmt_entry *e, const char *key, size_t keylen, const char *value,
    size_t len)
{
	struct sfmt_bytes *slot;
	char b[SFMT_SHOW_SIZE];

	if (key_is(key, keylen, SFMT_TASK))
		slot = &e->task;
	else if (key_is(key, keylen, SFMT_ID))
		slot = &e->id;
	else if (key_is(key, keylen, SFMT_LABEL))
		slot = &e->label;
	else if (key_is(key, keylen, SFMT_QUEUE_TIMEOUT))
		slot = &e->queue_timeout;
	else {
		entry_bad(e, "unknown field \"%s\" (an entry has " SFMT_TASK ", and optionally "
		    SFMT_ID ", " SFMT_LABEL " and " SFMT_QUEUE_TIMEOUT ")", sfmt_show(b, key, keylen));
		return;
	}
	if (slot->p != NULL) {
		entry_bad(e, "field \"%s\" given twice", sfmt_show(b, key, keylen));
		return;
	}
	slot->p = value != NULL ? value : "";
	slot->len = len;
}

int
sfmt_entry_end(struct sfmt_entry *e)
{
	const struct sfmt_bytes *qt = &e->queue_timeout;
	char b[SFMT_SHOW_SIZE];

	if (!e->bad && e->task.p == NULL)
		entry_bad(e, "missing field \"%s\" (the task object as JSON text)", SFMT_TASK);
	if (!e->bad && e->label.p != NULL &&
	    (e->label.len > WIRE_MAX_LABEL || memchr(e->label.p, '\0', e->label.len) != NULL))
		entry_bad(e, "field \"%s\" must be UTF-8 text of at most %d bytes", SFMT_LABEL,
		    WIRE_MAX_LABEL);
	if (!e->bad && qt->p != NULL) {
		uint64_t v = 0;
		size_t i;

		for (i = 0; i < qt->len && qt->p[i] >= '0' && qt->p[i] <= '9' &&
		    v <= SFMT_QUEUE_TIMEOUT_MAX_MS; i++)
			v = v * 10 + (uint64_t)(qt->p[i] - '0');
		if (qt->len == 0 || i != qt->len || v < 1 || v > SFMT_QUEUE_TIMEOUT_MAX_MS)
			entry_bad(e, "field \"%s\" must be a decimal number of milliseconds from 1 "
			    "to %llu, not \"%s\"", SFMT_QUEUE_TIMEOUT, SFMT_QUEUE_TIMEOUT_MAX_MS,
			    sfmt_show(b, qt->p, qt->len));
		else
			e->queue_timeout_ms = v;
	}
	return e->bad ? -1 : 0;
}

void
sfmt_result_init(struct sfmt_result *r)
{
	memset(r, 0, sizeof *r);
}

void
sfmt_result_field(struct sfmt_result *r, const char *key, size_t keylen, const char *value,
    size_t len)
{
	struct sfmt_bytes *slot;

	if (key_is(key, keylen, SFMT_DONE))
		slot = &r->done;
	else if (key_is(key, keylen, SFMT_ENTRY))
		slot = &r->entry;
	else if (key_is(key, keylen, SFMT_ID))
		slot = &r->id;
	else if (key_is(key, keylen, SFMT_CONSUMER))
		slot = &r->consumer;
	else if (key_is(key, keylen, SFMT_ATTEMPT))
		slot = &r->attempt;
	else
		return;         /* a field a later tpd may add */
	if (slot->p == NULL) {
		slot->p = value != NULL ? value : "";
		slot->len = len;
	}
}

bool
sfmt_stream_id(const char *s, size_t len)
{
	size_t ms = 0, seq;

	while (ms < len && s[ms] >= '0' && s[ms] <= '9')
		ms++;
	if (ms == 0 || ms > 20)
		return false;
	if (ms == len)
		return true;
	if (s[ms] != '-')
		return false;
	for (seq = ms + 1; seq < len && s[seq] >= '0' && s[seq] <= '9'; seq++)
		;
	return seq == len && seq - ms - 1 >= 1 && seq - ms - 1 <= 20;
}
