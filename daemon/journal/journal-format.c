/*
 * journal-format.c: encoding and checking the journal's bytes (the layout
 * is in journal-format.h). Pure functions over memory: no file, no global
 * state, safe on any thread.
 */
#include "config.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "crc32c.h"
#include "journal-format.h"

/* How many bytes the search for records after a bad one may checksum, on top of 8 per byte. */
#define SCAN_BUDGET (64u * 1024 * 1024)

static void
put32(unsigned char *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static void
put64(unsigned char *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t
get32(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t
get64(const unsigned char *p)
{
	return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32;
}

/* ---------------------------------------------------------------- jbuf */

void
jbuf_free(struct jbuf *b)
{
	free(b->p);
	b->p = NULL;
	b->len = b->cap = 0;
	b->failed = false;
}

void
jbuf_reset(struct jbuf *b)
{
	b->len = 0;
	b->failed = false;
}

static bool
jbuf_grow(struct jbuf *b, size_t n)
{
	size_t cap;
	unsigned char *p;

	if (b->failed)
		return false;
	if (b->cap - b->len >= n)
		return true;
	if (n > SIZE_MAX / 2 - b->len) {
		b->failed = true;
		return false;
	}
	cap = b->cap < 256 ? 256 : b->cap;
	while (cap - b->len < n)
		cap *= 2;
	if ((p = realloc(b->p, cap)) == NULL) {
		b->failed = true;
		return false;
	}
	b->p = p;
	b->cap = cap;
	return true;
}

void
jbuf_add(struct jbuf *b, const void *data, size_t n)
{
	if (n == 0 || !jbuf_grow(b, n))
		return;
	memcpy(b->p + b->len, data, n);
	b->len += n;
}

/* ---------------------------------------------------------------- fields */

/* LEB128 of v into p (at most 5 bytes for a u32); returns the byte count. */
static size_t
put_leb(unsigned char *p, uint32_t v)
{
	size_t n = 0;

	do {
		unsigned char c = v & 0x7f;
		v >>= 7;
		p[n++] = c | (v != 0 ? 0x80 : 0);
	} while (v != 0);
	return n;
}

void
jfield_mem(struct jbuf *b, enum jfield tag, const void *data, size_t n)
{
	unsigned char head[6];
	size_t h;

	if (n > JFMT_MAX_PAYLOAD) {
		b->failed = true;
		return;
	}
	head[0] = (unsigned char)tag;
	h = 1 + put_leb(head + 1, (uint32_t)n);
	if (!jbuf_grow(b, h + n))
		return;
	memcpy(b->p + b->len, head, h);
	if (n > 0)
		memcpy(b->p + b->len + h, data, n);
	b->len += h + n;
}

void
jfield_u64(struct jbuf *b, enum jfield tag, uint64_t v)
{
	unsigned char bytes[8];
	size_t n = 0;

	while (v != 0) {
		bytes[n++] = (unsigned char)v;
		v >>= 8;
	}
	jfield_mem(b, tag, bytes, n);
}

void
jfield_str(struct jbuf *b, enum jfield tag, const char *s)
{
	if (s != NULL)
		jfield_mem(b, tag, s, strlen(s));
}

void
jfield_iter_init(struct jfield_iter *it, const void *payload, size_t len)
{
	it->p = payload;
	it->end = it->p + len;
}

int
jfield_next(struct jfield_iter *it, struct jfield_val *out)
{
	uint32_t n = 0;
	int shift = 0;

	if (it->p == it->end)
		return 0;
	out->tag = (enum jfield)*it->p++;
	for (;;) {
		unsigned char c;

		if (it->p == it->end || shift > 28)
			return -1;
		c = *it->p++;
		if (shift == 28 && (c & 0x70) != 0)
			return -1; /* past 32 bits */
		n |= (uint32_t)(c & 0x7f) << shift;
		shift += 7;
		if ((c & 0x80) == 0)
			break;
	}
	if ((size_t)(it->end - it->p) < n)
		return -1;
	out->data = it->p;
	out->len = n;
	it->p += n;
	return 1;
}

int
jfield_get_u64(const struct jfield_val *v, uint64_t *out)
{
	uint64_t x = 0;

	if (v->len > 8)
		return -1;
	for (uint32_t i = 0; i < v->len; i++)
		x |= (uint64_t)v->data[i] << (8 * i);
	*out = x;
	return 0;
}

/* ---------------------------------------------------------------- records */

static uint32_t
rec_crc(const unsigned char *hdr, const unsigned char *payload, uint32_t len)
{
	uint32_t c = crc32c(0, hdr + 4, JFMT_REC_HEADER - 4);

	return len > 0 ? crc32c(c, payload, len) : c;
}

size_t
jrec_append(struct jbuf *out, enum jrec_type type, uint64_t id, const void *payload, size_t len)
{
	unsigned char *h;

	if (len > JFMT_MAX_PAYLOAD || !jbuf_grow(out, JFMT_REC_HEADER + len)) {
		out->failed = true;
		return 0;
	}
	h = out->p + out->len;
	memset(h, 0, JFMT_REC_HEADER);
	put32(h + 4, (uint32_t)len);
	h[8] = (unsigned char)type;
	put64(h + 12, id);
	if (len > 0)
		memcpy(h + JFMT_REC_HEADER, payload, len);
	put32(h, rec_crc(h, h + JFMT_REC_HEADER, (uint32_t)len));
	out->len += JFMT_REC_HEADER + len;
	return JFMT_REC_HEADER + len;
}

const char *
jrec_type_name(unsigned type)
{
	static const char *const names[JREC_TYPE_MAX + 1] = {
		[JREC_NEXT_ID] = "next-id", [JREC_ACCEPTED] = "accepted",
		[JREC_STARTED] = "started", [JREC_FINISHED] = "finished",
		[JREC_CANCEL] = "cancel", [JREC_FORGOTTEN] = "forgotten",
		[JREC_MARK] = "mark",
	};

	return type >= 1 && type <= JREC_TYPE_MAX ? names[type] : "unknown";
}

/* ---------------------------------------------------------------- segments */

void
jseg_header(unsigned char *hdr, uint64_t seq, uint32_t flags, uint64_t created_us)
{
	memset(hdr, 0, JFMT_SEG_HEADER);
	memcpy(hdr, JFMT_MAGIC, 8);
	put32(hdr + 8, JFMT_VERSION);
	put32(hdr + 12, flags);
	put64(hdr + 16, seq);
	put64(hdr + 24, created_us);
	put32(hdr + 36, crc32c(0, hdr, 36));
}

void
jseg_header_size(unsigned char *hdr, uint64_t made_bytes)
{
	uint64_t kib = made_bytes / 1024;

	put32(hdr + 12, get32(hdr + 12) | JFMT_SEG_SIZED);
	put32(hdr + 32, kib > UINT32_MAX ? UINT32_MAX : (uint32_t)kib);
	put32(hdr + 36, crc32c(0, hdr, 36));
}

int
jseg_parse_header(const unsigned char *buf, size_t len, struct jseg_info *out, const char **why)
{
	if (len < JFMT_SEG_HEADER) {
		*why = "shorter than a segment header";
		return -1;
	}
	if (memcmp(buf, JFMT_MAGIC, 8) != 0) {
		*why = "not a tpd journal segment (bad magic)";
		return -1;
	}
	if (get32(buf + 36) != crc32c(0, buf, 36)) {
		*why = "the segment header's checksum does not match";
		return -1;
	}
	out->version = get32(buf + 8);
	out->flags = get32(buf + 12);
	out->seq = get64(buf + 16);
	out->created_us = get64(buf + 24);
	if (out->version != JFMT_VERSION) {
		*why = out->version > JFMT_VERSION ? "written by a newer tpd (a later format version)" :
		    "an unknown format version";
		return -1;
	}
	if ((out->flags & ~JFMT_SEG_FLAGS_KNOWN) != 0 ||
	    (!(out->flags & JFMT_SEG_SIZED) && get32(buf + 32) != 0)) {
		*why = "unknown flags in the segment header";
		return -1;
	}
	out->made_bytes = out->flags & JFMT_SEG_SIZED ? (uint64_t)get32(buf + 32) * 1024 : 0;
	return 0;
}

void
jseg_name(char *name, size_t len, uint64_t seq)
{
	snprintf(name, len, "%s%0*" PRIu64, JFMT_NAME_PREFIX, JFMT_NAME_DIGITS, seq);
}

uint64_t
jseg_name_seq(const char *name)
{
	size_t plen = strlen(JFMT_NAME_PREFIX);
	uint64_t seq = 0;

	if (strncmp(name, JFMT_NAME_PREFIX, plen) != 0 || strlen(name) != plen + JFMT_NAME_DIGITS)
		return 0;
	for (const char *p = name + plen; *p != '\0'; p++) {
		if (*p < '0' || *p > '9')
			return 0;
		seq = seq * 10 + (uint64_t)(*p - '0');
	}
	return seq;
}

/* ---------------------------------------------------------------- scanning */

/* True when p[0..n) is all zeros (a preallocated tail: megabytes, so a word at a time). */
static bool
all_zero(const unsigned char *p, size_t n)
{
	uint64_t w, acc = 0;

	while (n > 0 && ((uintptr_t)p & 7) != 0) {
		if (*p++ != 0)
			return false;
		n--;
	}
	for (; n >= 64; p += 64, n -= 64) {
		for (int i = 0; i < 8; i++) {
			memcpy(&w, p + 8 * i, sizeof w);
			acc |= w;
		}
		if (acc != 0)
			return false;
	}
	while (n-- > 0)
		if (*p++ != 0)
			return false;
	return true;
}

/* Whether a valid record starts at off: NULL with *rec filled, or a static message saying what is wrong. */
static const char *
rec_check(const unsigned char *buf, size_t len, size_t off, struct jrec *rec)
{
	const unsigned char *h = buf + off;
	uint32_t plen;

	if (len - off < JFMT_REC_HEADER)
		return "a record header cut short by the end of the file";
	plen = get32(h + 4);
	if (h[8] == 0 || h[8] > JREC_TYPE_MAX || h[9] != 0 || h[10] != 0 || h[11] != 0)
		return all_zero(h, JFMT_REC_HEADER) ? "zeros, then more data" :
		    "a record header with an unknown type or reserved bytes set";
	if (plen > JFMT_MAX_PAYLOAD || plen > len - off - JFMT_REC_HEADER)
		return "a record whose length runs past the end of the file";
	if (get32(h) != rec_crc(h, h + JFMT_REC_HEADER, plen))
		return "a record whose checksum does not match";
	rec->type = (enum jrec_type)h[8];
	rec->id = get64(h + 12);
	rec->payload = h + JFMT_REC_HEADER;
	rec->len = plen;
	rec->offset = off;
	rec->size = JFMT_REC_HEADER + plen;
	return NULL;
}

/*
 * The bytes at bad do not hold a record: torn tail or damage? Looks at every
 * offset after it for a valid record (the cheap header checks first, the
 * checksum within a budget) and at the MARKs among them.
 */
static void
classify(const unsigned char *buf, size_t len, size_t bad, const char *why,
    struct jscan_result *res)
{
	size_t end = len, budget = SCAN_BUDGET + 8 * len;
	struct jrec rec;

	res->data_end = bad;
	res->bad_offset = bad;
	res->why = why;
	while (end > bad && buf[end - 1] == 0)
		end--;
	res->torn_end = end;
	/* A record has a non-zero type byte at +8: none can start at end - 8 or later. */
	for (size_t p = bad + 1; p + 8 < end && len - p >= JFMT_REC_HEADER; p++) {
		const unsigned char *h = buf + p;
		uint32_t plen;

		if (h[8] == 0 || h[8] > JREC_TYPE_MAX || h[9] != 0 || h[10] != 0 || h[11] != 0)
			continue;
		plen = get32(h + 4);
		if (plen > JFMT_MAX_PAYLOAD || plen > len - p - JFMT_REC_HEADER)
			continue;
		if (budget < plen + JFMT_REC_HEADER) {
			res->end = JSCAN_DAMAGED;
			res->why = "damaged data too large to tell a torn tail from damage";
			return;
		}
		budget -= plen + JFMT_REC_HEADER;
		if (rec_check(buf, len, p, &rec) != NULL)
			continue;
		res->torn_records++;
		if (rec.type == JREC_MARK && rec.id > bad) {
			res->end = JSCAN_DAMAGED;
			return;
		}
	}
	res->end = JSCAN_TORN;
}

void
jfmt_scan(const unsigned char *buf, size_t len, jscan_fn fn, void *arg, struct jscan_result *res)
{
	struct jseg_info info;
	const char *why;
	struct jrec rec;
	size_t off;

	memset(res, 0, sizeof *res);
	if (jseg_parse_header(buf, len, &info, &why) == -1) {
		res->end = JSCAN_DAMAGED;
		res->why = why;
		return;
	}
	off = JFMT_SEG_HEADER;
	for (;;) {
		if (off == len || (len - off <= JFMT_REC_HEADER && all_zero(buf + off, len - off)) ||
		    (len - off >= JFMT_REC_HEADER && all_zero(buf + off, JFMT_REC_HEADER) &&
		    all_zero(buf + off + JFMT_REC_HEADER, len - off - JFMT_REC_HEADER))) {
			res->end = JSCAN_CLEAN;
			res->data_end = off;
			return;
		}
		if ((why = rec_check(buf, len, off, &rec)) != NULL) {
			classify(buf, len, off, why, res);
			return;
		}
		res->records++;
		if (rec.type == JREC_MARK && rec.id > res->last_mark)
			res->last_mark = rec.id;
		if (fn != NULL && fn(&rec, arg) == -1) {
			res->end = JSCAN_STOPPED;
			res->data_end = off;
			return;
		}
		off += rec.size;
	}
}

/* ---------------------------------------------------------------- payloads */

static void
put_text(struct jbuf *b, enum jfield tag, struct jtext t)
{
	if (t.p != NULL)
		jfield_mem(b, tag, t.p, t.len);
}

void
jaccepted_encode(struct jbuf *b, const struct jaccepted *a)
{
	jfield_u64(b, JF_TIME, a->time_us);
	put_text(b, JF_POOL, a->pool);
	put_text(b, JF_OWNER, a->owner);
	put_text(b, JF_LABEL, a->label);
	put_text(b, JF_KIND, a->kind);
	if (a->queue_deadline_us != 0)
		jfield_u64(b, JF_QUEUE_DEADLINE, a->queue_deadline_us);
	if (a->rerun)
		jfield_u64(b, JF_ON_LOST, 1);
	if (a->flags != 0)
		jfield_u64(b, JF_FLAGS, a->flags);
	if (a->have_gid)
		jfield_u64(b, JF_CALLER_GID, a->caller_gid);
	put_text(b, JF_SPEC, a->spec); /* last: the longest */
}

void
jstarted_encode(struct jbuf *b, const struct jstarted *s)
{
	jfield_u64(b, JF_ATTEMPT, s->attempt);
	jfield_u64(b, JF_TIME, s->time_us);
	if (s->retry_at_us != 0)
		jfield_u64(b, JF_RETRY_AT, s->retry_at_us);
}

void
jfinished_encode(struct jbuf *b, const struct jfinished *f)
{
	if (f->attempt != 0)
		jfield_u64(b, JF_ATTEMPT, f->attempt);
	jfield_u64(b, JF_TIME, f->time_us);
	jfield_u64(b, JF_ACCEPTED_TIME, f->accepted_us);
	jfield_u64(b, JF_QUEUED_US, f->queued_us);
	jfield_u64(b, JF_RUN_US, f->run_us);
	put_text(b, JF_STATE, f->state);
	put_text(b, JF_POOL, f->pool);
	put_text(b, JF_OWNER, f->owner);
	put_text(b, JF_LABEL, f->label);
	put_text(b, JF_KIND, f->kind);
	put_text(b, JF_DONE, f->done);
	put_text(b, JF_SPEC, f->spec);
}

void
jcancel_encode(struct jbuf *b, uint64_t time_us)
{
	jfield_u64(b, JF_TIME, time_us);
}

/*
 * Walks a payload's fields: ints[tag] for the integer tags asked for in
 * int_tags, texts[tag] for the others. A field given twice keeps the last.
 * Returns 0, or -1 with *why set.
 */
static int
decode_fields(const void *payload, size_t len, uint64_t *ints, uint32_t int_tags,
    struct jtext *texts, uint32_t *seen, const char **why)
{
	struct jfield_iter it;
	struct jfield_val v;
	int r;

	*seen = 0;
	jfield_iter_init(&it, payload, len);
	while ((r = jfield_next(&it, &v)) == 1) {
		if (v.tag == 0 || v.tag > JF_MAX)
			continue; /* a field of a later tpd */
		if (int_tags & 1u << v.tag) {
			if (jfield_get_u64(&v, &ints[v.tag]) == -1) {
				*why = "an integer field longer than 8 bytes";
				return -1;
			}
		} else {
			texts[v.tag].p = (const char *)v.data;
			texts[v.tag].len = v.len;
		}
		*seen |= 1u << v.tag;
	}
	if (r == -1) {
		*why = "a field whose length runs past the end of the record";
		return -1;
	}
	return 0;
}

#define BIT(tag) (1u << (tag))

int
jaccepted_decode(const void *payload, size_t len, struct jaccepted *out, const char **why)
{
	uint64_t ints[JF_MAX + 1] = { 0 };
	struct jtext texts[JF_MAX + 1];
	uint32_t seen;

	memset(texts, 0, sizeof texts);
	memset(out, 0, sizeof *out);
	if (decode_fields(payload, len, ints, BIT(JF_TIME) | BIT(JF_QUEUE_DEADLINE) |
	    BIT(JF_ON_LOST) | BIT(JF_FLAGS) | BIT(JF_CALLER_GID), texts, &seen, why) == -1)
		return -1;
	if ((seen & (BIT(JF_TIME) | BIT(JF_POOL) | BIT(JF_KIND) | BIT(JF_SPEC))) !=
	    (BIT(JF_TIME) | BIT(JF_POOL) | BIT(JF_KIND) | BIT(JF_SPEC))) {
		*why = "an accepted record without its time, pool, kind or task";
		return -1;
	}
	if (ints[JF_ON_LOST] > 1) {
		*why = "an accepted record with an unknown on_lost";
		return -1;
	}
	out->time_us = ints[JF_TIME];
	out->queue_deadline_us = ints[JF_QUEUE_DEADLINE];
	out->flags = ints[JF_FLAGS];
	out->rerun = ints[JF_ON_LOST] == 1;
	out->have_gid = (seen & BIT(JF_CALLER_GID)) != 0;
	out->caller_gid = ints[JF_CALLER_GID];
	out->pool = texts[JF_POOL];
	out->owner = texts[JF_OWNER];
	out->label = texts[JF_LABEL];
	out->kind = texts[JF_KIND];
	out->spec = texts[JF_SPEC];
	return 0;
}

int
jstarted_decode(const void *payload, size_t len, struct jstarted *out, const char **why)
{
	uint64_t ints[JF_MAX + 1] = { 0 };
	struct jtext texts[JF_MAX + 1];
	uint32_t seen;

	memset(texts, 0, sizeof texts);
	memset(out, 0, sizeof *out);
	if (decode_fields(payload, len, ints, BIT(JF_ATTEMPT) | BIT(JF_TIME) | BIT(JF_RETRY_AT),
	    texts, &seen, why) == -1)
		return -1;
	if (!(seen & BIT(JF_ATTEMPT)) || ints[JF_ATTEMPT] == 0 || ints[JF_ATTEMPT] > UINT32_MAX) {
		*why = "a started record without a valid attempt";
		return -1;
	}
	out->attempt = ints[JF_ATTEMPT];
	out->time_us = ints[JF_TIME];
	out->retry_at_us = ints[JF_RETRY_AT];
	return 0;
}

int
jfinished_decode(const void *payload, size_t len, struct jfinished *out, const char **why)
{
	uint64_t ints[JF_MAX + 1] = { 0 };
	struct jtext texts[JF_MAX + 1];
	uint32_t seen;

	memset(texts, 0, sizeof texts);
	memset(out, 0, sizeof *out);
	if (decode_fields(payload, len, ints, BIT(JF_ATTEMPT) | BIT(JF_TIME) |
	    BIT(JF_ACCEPTED_TIME) | BIT(JF_QUEUED_US) | BIT(JF_RUN_US), texts, &seen, why) == -1)
		return -1;
	if ((seen & (BIT(JF_TIME) | BIT(JF_STATE) | BIT(JF_POOL) | BIT(JF_DONE))) !=
	    (BIT(JF_TIME) | BIT(JF_STATE) | BIT(JF_POOL) | BIT(JF_DONE))) {
		*why = "a finished record without its time, state, pool or done";
		return -1;
	}
	if (ints[JF_ATTEMPT] > UINT32_MAX) {
		*why = "a finished record with an attempt out of range";
		return -1;
	}
	out->attempt = ints[JF_ATTEMPT];
	out->time_us = ints[JF_TIME];
	out->accepted_us = ints[JF_ACCEPTED_TIME];
	out->queued_us = ints[JF_QUEUED_US];
	out->run_us = ints[JF_RUN_US];
	out->state = texts[JF_STATE];
	out->pool = texts[JF_POOL];
	out->owner = texts[JF_OWNER];
	out->label = texts[JF_LABEL];
	out->kind = texts[JF_KIND];
	out->done = texts[JF_DONE];
	out->spec = texts[JF_SPEC];
	return 0;
}
