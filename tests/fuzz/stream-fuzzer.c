/*
 * stream-fuzzer.c: libFuzzer target for the readers of common/'s Redis
 * stream format (stream-format.h): the input is a list of fields, each a
 * length byte and that many bytes (the last one cut where the input ends),
 * taken as KEY VALUE pairs the way a stream entry's fields come from Redis.
 * Each field is copied into a buffer of its own exact size, so that a read
 * past it is caught.
 *
 * The fields are read as a task entry (sfmt_entry_field, sfmt_entry_end)
 * and as a result entry (sfmt_result_field), every value as a stream id
 * (sfmt_stream_id) and every key for a message (sfmt_show). Beyond what
 * ASan, UBSan and LeakSanitizer catch, it aborts when a promise breaks,
 * checked against a model written here from the header's words:
 *   - an entry is good exactly when every key is one of task, id, label and
 *     queue_timeout_ms, none given twice, task is there, the label has at
 *     most WIRE_MAX_LABEL bytes and no NUL, and queue_timeout_ms is decimal
 *     digits (leading zeros allowed) from 1 to SFMT_QUEUE_TIMEOUT_MAX_MS;
 *     a good entry gives each field's bytes and that number;
 *   - good or bad, the entry's id is the first id field's bytes, when it has
 *     one (so that a bad entry's result names it);
 *   - a bad entry says why in one line of printable ASCII that fits
 *     SFMT_WHY_SIZE uncut;
 *   - a result gives the first of each of its fields, and ignores others;
 *   - a stream id is MS or MS-SEQ, each 1 to 20 digits;
 *   - sfmt_show writes printable ASCII only, into SFMT_SHOW_SIZE bytes.
 */
#include "config.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stream-format.h"
#include "wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FIELDS_MAX 64

static void __attribute__((noreturn, format(printf, 1, 2)))
broken(const char *fmt, ...)
{
	va_list ap;

	fputs("stream-fuzzer: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	abort();
}

struct field {
	char *p;                /* a buffer of exactly len bytes (NULL for 0) */
	size_t len;
};

static bool
is(const struct field *f, const char *name)
{
	return f->len == strlen(name) && memcmp(f->p, name, f->len) == 0;
}

static bool
same(struct sfmt_bytes b, const struct field *f)
{
	return b.p != NULL && b.len == f->len && (f->len == 0 || b.p == f->p);
}

static void
check_text(const char *what, const char *s, size_t size)
{
	size_t n = strnlen(s, size);

	if (n == size)
		broken("%s is not NUL-terminated within %zu bytes", what, size);
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] >= 0x7f)
			broken("%s holds byte 0x%02x: %s", what, (unsigned char)s[i], s);
}

/* The model's verdict on queue_timeout_ms: its value, or 0 when out of the grammar or range. */
static uint64_t
model_qt(const struct field *f)
{
	uint64_t v = 0;

	if (f->len == 0)
		return 0;
	for (size_t i = 0; i < f->len; i++) {
		if (f->p[i] < '0' || f->p[i] > '9')
			return 0;
		if (v <= SFMT_QUEUE_TIMEOUT_MAX_MS)     /* past it, it stays past it */
			v = v * 10 + (uint64_t)(f->p[i] - '0');
	}
	return v >= 1 && v <= SFMT_QUEUE_TIMEOUT_MAX_MS ? v : 0;
}

static void
check_entry(const struct field *kv, size_t n)
{
	static const char *const known[] = { SFMT_TASK, SFMT_ID, SFMT_LABEL, SFMT_QUEUE_TIMEOUT };
	const struct field *first[4] = { NULL, NULL, NULL, NULL };
	struct sfmt_entry e;
	bool good = true;
	uint64_t qt = 0;
	int rc;

	sfmt_entry_init(&e);
	for (size_t i = 0; i + 1 < n; i += 2) {
		size_t k;

		sfmt_entry_field(&e, kv[i].p, kv[i].len, kv[i + 1].p, kv[i + 1].len);
		for (k = 0; k < 4 && !is(&kv[i], known[k]); k++)
			;
		if (k == 4)
			good = false;
		else if (first[k] != NULL)
			good = false;
		else
			first[k] = &kv[i + 1];
	}
	rc = sfmt_entry_end(&e);
	if (first[0] == NULL)
		good = false;
	if (first[2] != NULL && (first[2]->len > WIRE_MAX_LABEL ||
	    (first[2]->len > 0 && memchr(first[2]->p, '\0', first[2]->len) != NULL)))
		good = false;
	if (first[3] != NULL && (qt = model_qt(first[3])) == 0)
		good = false;
	if (first[1] != NULL ? !same(e.id, first[1]) : e.id.p != NULL)
		broken("the entry's id is not its first id field (%zu bytes given)",
		    first[1] != NULL ? first[1]->len : 0);
	if ((rc == 0) != good || e.bad != (rc == -1))
		broken("an entry judged %s, the model says %s (%s)", rc == 0 ? "good" : "bad",
		    good ? "good" : "bad", e.why);
	if (rc == -1) {
		check_text("why", e.why, sizeof e.why);
		if (strlen(e.why) == 0 || strlen(e.why) >= sizeof e.why - 1)
			broken("why is empty or cut: %s", e.why);
		return;
	}
	if (!same(e.task, first[0]))
		broken("the task is not the task field");
	if (first[2] != NULL ? !same(e.label, first[2]) : e.label.p != NULL)
		broken("the label is not the label field");
	if (e.queue_timeout_ms != qt)
		broken("queue_timeout_ms %llu, the model says %llu",
		    (unsigned long long)e.queue_timeout_ms, (unsigned long long)qt);
}

static void
check_result(const struct field *kv, size_t n)
{
	static const char *const names[] = { SFMT_DONE, SFMT_ENTRY, SFMT_ID, SFMT_CONSUMER,
	    SFMT_ATTEMPT };
	const struct field *first[5] = { NULL, NULL, NULL, NULL, NULL };
	struct sfmt_result r;
	struct sfmt_bytes got[5];

	sfmt_result_init(&r);
	for (size_t i = 0; i + 1 < n; i += 2) {
		sfmt_result_field(&r, kv[i].p, kv[i].len, kv[i + 1].p, kv[i + 1].len);
		for (size_t k = 0; k < 5; k++)
			if (is(&kv[i], names[k]) && first[k] == NULL)
				first[k] = &kv[i + 1];
	}
	got[0] = r.done;
	got[1] = r.entry;
	got[2] = r.id;
	got[3] = r.consumer;
	got[4] = r.attempt;
	for (size_t k = 0; k < 5; k++)
		if (first[k] != NULL ? !same(got[k], first[k]) : got[k].p != NULL)
			broken("a result's %s is not its first %s field", names[k], names[k]);
}

static bool
model_stream_id(const struct field *f)
{
	size_t i = 0, ms, seq;

	while (i < f->len && f->p[i] >= '0' && f->p[i] <= '9')
		i++;
	ms = i;
	if (ms < 1 || ms > 20)
		return false;
	if (i == f->len)
		return true;
	if (f->p[i++] != '-')
		return false;
	seq = i;
	while (i < f->len && f->p[i] >= '0' && f->p[i] <= '9')
		i++;
	return i == f->len && i - seq >= 1 && i - seq <= 20;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct field kv[FIELDS_MAX];
	char show[SFMT_SHOW_SIZE];
	size_t n = 0, at = 0;

	while (at < size && n < FIELDS_MAX) {
		size_t len = data[at++];

		if (len > size - at)
			len = size - at;
		kv[n].len = len;
		kv[n].p = len > 0 ? malloc(len) : NULL;
		if (len > 0) {
			if (kv[n].p == NULL)
				abort();
			memcpy(kv[n].p, data + at, len);
		}
		at += len;
		n++;
	}
	check_entry(kv, n);
	check_result(kv, n);
	for (size_t i = 0; i < n; i++) {
		if (sfmt_stream_id(kv[i].p, kv[i].len) != model_stream_id(&kv[i]))
			broken("sfmt_stream_id says %d for field %zu (%zu bytes)",
			    !model_stream_id(&kv[i]), i, kv[i].len);
		sfmt_show(show, kv[i].p, kv[i].len);
		check_text("sfmt_show's output", show, sizeof show);
	}
	for (size_t i = 0; i < n; i++)
		free(kv[i].p);
	return 0;
}
