/*
 * journal-fuzzer.c: libFuzzer target for the journal's reader: any bytes
 * as a segment, read by jfmt_scan as tpd reads its journal at start, and
 * every record it passes replayed into a jstate.
 *
 * The first byte chooses how the rest becomes a segment: raw (as it is),
 * raw after a valid header, or framed: the rest read as (type, id, length,
 * payload) chunks made into records with valid checksums (so the replay's
 * field decoding is reached), then optionally a flipped byte, a cut, or
 * trailing zeros. Beyond what ASan, UBSan and LeakSanitizer catch, it
 * aborts when a promise of journal-format.h breaks:
 *   - the records passed are exactly those of the forward walk from the
 *     header, each one checking, contiguous, ending at data_end;
 *   - CLEAN: only zeros after data_end; TORN and DAMAGED: bad_offset is
 *     data_end, torn_end is just after the last non-zero byte;
 *   - TORN means no valid record after bad_offset is a MARK past it, and
 *     DAMAGED (unless the search ran out of budget) that one is: checked
 *     by brute force on inputs of up to 4 KiB;
 *   - the replay is idempotent: every record applied twice in a row gives
 *     the same tasks as once, in id order, with a next id past every id
 *     seen, and the record each live task needs decodes.
 */
#include "config.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "journal/crc32c.h"
#include "journal/journal-format.h"
#include "journal/journal-state.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void __attribute__((noreturn, format(printf, 1, 2)))
broken(const char *fmt, ...)
{
	va_list ap;

	fputs("journal-fuzzer: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	abort();
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

/* A valid record at off, checked the slow way: 1 with *type, *id, *size; else 0. */
static int
valid_at(const unsigned char *buf, size_t len, size_t off, unsigned *type, uint64_t *id,
    size_t *size)
{
	uint32_t plen;

	if (len - off < JFMT_REC_HEADER)
		return 0;
	plen = get32(buf + off + 4);
	if (buf[off + 8] < 1 || buf[off + 8] > JREC_TYPE_MAX || buf[off + 9] || buf[off + 10] ||
	    buf[off + 11] || plen > JFMT_MAX_PAYLOAD || plen > len - off - JFMT_REC_HEADER)
		return 0;
	if (crc32c(0, buf + off + 4, JFMT_REC_HEADER - 4 + plen) != get32(buf + off))
		return 0;
	*type = buf[off + 8];
	*id = get64(buf + off + 12);
	*size = JFMT_REC_HEADER + plen;
	return 1;
}

struct walk {
	const unsigned char *buf;
	size_t len;
	size_t next;                /* where the next record must start */
	size_t count;
	struct jstate *st;
	uint32_t seg;
	int apply_failed;
	int times;                  /* how many times each record is applied */
};

static int
on_record(const struct jrec *r, void *arg)
{
	struct walk *w = arg;
	unsigned type;
	uint64_t id;
	size_t size;
	const char *why;

	if (r->offset != w->next)
		broken("a record at %llu, expected at %zu", (unsigned long long)r->offset, w->next);
	if (!valid_at(w->buf, w->len, (size_t)r->offset, &type, &id, &size) || type != r->type ||
	    id != r->id || size != r->size || r->payload != w->buf + r->offset + JFMT_REC_HEADER)
		broken("a record passed that does not check at %llu", (unsigned long long)r->offset);
	w->next += r->size;
	w->count++;
	for (int k = 0; k < w->times && !w->apply_failed; k++)
		if (jstate_apply(w->st, w->seg, r, &why) == -1) {
			if (why == NULL || strchr(why, '\n') != NULL)
				broken("an apply error without a one-line message");
			if (k > 0)
				broken("a record applied once is refused the second time");
			w->apply_failed = 1;
		}
	return 0;
}

static int
all_zero(const unsigned char *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i])
			return 0;
	return 1;
}

/* Same tasks in both states. */
static void
same_tasks(struct jstate *a, struct jstate *b)
{
	size_t na, nb;
	struct jtask *const *ta = jstate_tasks(a, &na), *const *tb = jstate_tasks(b, &nb);

	if (ta == NULL || tb == NULL)
		return; /* out of memory */
	if (na != nb)
		broken("a replay twice gave %zu tasks, once %zu", nb, na);
	for (size_t i = 0; i < na; i++) {
		if (i > 0 && ta[i - 1]->id >= ta[i]->id)
			broken("tasks out of id order");
		if (ta[i]->id != tb[i]->id || ta[i]->flags != tb[i]->flags ||
		    ta[i]->attempt != tb[i]->attempt)
			broken("a replay twice changed task %llu", (unsigned long long)ta[i]->id);
		if (jstate_next_id(a) <= ta[i]->id)
			broken("next id %llu not past task %llu", (unsigned long long)jstate_next_id(a),
			    (unsigned long long)ta[i]->id);
	}
	if (jstate_next_id(a) != jstate_next_id(b))
		broken("a replay twice changed the next id");
}

static void
check(const unsigned char *buf, size_t len)
{
	struct jscan_result res;
	struct walk w = { buf, len, JFMT_SEG_HEADER, 0, jstate_new(), 0, 0, 1 };
	struct jstate *twice = jstate_new();
	size_t end;

	if (w.st == NULL || twice == NULL) {
		jstate_free(w.st);
		jstate_free(twice);
		return;
	}
	w.seg = jstate_add_segment(w.st, buf, len);
	jfmt_scan(buf, len, on_record, &w, &res);
	if (res.records != w.count)
		broken("%llu records counted, %zu passed", (unsigned long long)res.records, w.count);
	if (res.end == JSCAN_DAMAGED && res.bad_offset == 0 && w.count == 0)
		goto replay; /* the header */
	if (res.data_end != w.next)
		broken("data_end %llu, the records end at %zu", (unsigned long long)res.data_end, w.next);
	switch (res.end) {
	case JSCAN_CLEAN:
		if (!all_zero(buf + res.data_end, len - res.data_end))
			broken("clean, with data after data_end");
		break;
	case JSCAN_TORN:
	case JSCAN_DAMAGED:
		if (res.bad_offset != res.data_end || res.why == NULL)
			broken("bad_offset %llu is not data_end", (unsigned long long)res.bad_offset);
		if (res.end == JSCAN_DAMAGED)
			break;
		end = len;
		while (end > res.bad_offset && buf[end - 1] == 0)
			end--;
		if (res.torn_end != end)
			broken("torn_end %llu, the last non-zero byte ends at %zu",
			    (unsigned long long)res.torn_end, end);
		break;
	case JSCAN_STOPPED:
		broken("stopped without the callback asking");
	}
	if ((res.end == JSCAN_TORN || res.end == JSCAN_DAMAGED) && len <= 4096) {
		int marked = 0;
		for (size_t p = (size_t)res.bad_offset + 1; p < len && !marked; p++) {
			unsigned type;
			uint64_t id;
			size_t size;
			if (valid_at(buf, len, p, &type, &id, &size) && type == JREC_MARK &&
			    id > res.bad_offset)
				marked = 1;
		}
		if (res.end == JSCAN_TORN && marked)
			broken("torn, but a MARK after %llu says it was on disk",
			    (unsigned long long)res.bad_offset);
		if (res.end == JSCAN_DAMAGED && !marked && strstr(res.why, "too large") == NULL)
			broken("damaged at %llu without a MARK past it", (unsigned long long)res.bad_offset);
	}
replay:
	/* each record twice: the same state */
	if (!w.apply_failed) {
		size_t n;
		struct jtask *const *t;
		struct walk w2 = { buf, len, JFMT_SEG_HEADER, 0, twice, 0, 0, 2 };
		struct jscan_result r2;

		w2.seg = jstate_add_segment(twice, buf, len);
		jfmt_scan(buf, len, on_record, &w2, &r2);
		if (!w2.apply_failed)
			same_tasks(w.st, twice);
		/* what the replay hands the daemon decodes */
		t = jstate_tasks(w.st, &n);
		for (size_t i = 0; t != NULL && i < n; i++) {
			struct jaccepted a;
			struct jfinished f;
			if ((t[i]->flags & JT_FINISHED) && jstate_finished(w.st, t[i], &f) == -1)
				broken("a finished task whose record does not decode");
			if (!(t[i]->flags & JT_FINISHED) && jstate_accepted(w.st, t[i], &a) == -1)
				broken("an accepted task whose record does not decode");
		}
	}
	jstate_free(w.st);
	jstate_free(twice);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct jbuf seg = { 0 };
	unsigned char hdr[JFMT_SEG_HEADER];
	uint8_t mode;

	if (size == 0)
		return 0;
	mode = data[0];
	data++;
	size--;
	switch (mode & 3) {
	case 0:
		check(data, size);
		return 0;
	case 1:
		jseg_header(hdr, 1, mode & 4 ? JFMT_SEG_SNAPSHOT : 0, 7);
		jbuf_add(&seg, hdr, sizeof hdr);
		jbuf_add(&seg, data, size);
		break;
	default:
		/* chunks: type, id (1 byte), length (1 byte), payload */
		jseg_header(hdr, 1, 0, 7);
		jbuf_add(&seg, hdr, sizeof hdr);
		while (size >= 3) {
			unsigned type = data[0] % (JREC_TYPE_MAX + 2);
			uint64_t id = data[1];
			size_t n = data[2] < size - 3 ? data[2] : size - 3;

			if (type == 0)
				break; /* the rest is a raw tail */
			if (type == JREC_MARK || type == JREC_NEXT_ID)
				id = seg.len * (data[1] & 1); /* a MARK at where it is, or 0 */
			jrec_append(&seg, (enum jrec_type)(type > JREC_TYPE_MAX ? JREC_ACCEPTED : type),
			    id, data + 3, n);
			data += 3 + n;
			size -= 3 + n;
		}
		if (size > 0) {
			data++;
			size--;
		}
		if ((mode & 0x30) == 0x10 && size > 0 && seg.len > JFMT_SEG_HEADER) {
			/* flip a byte somewhere after the header */
			seg.p[JFMT_SEG_HEADER + data[0] % (seg.len - JFMT_SEG_HEADER)] ^= 1u << (mode >> 6);
		} else if ((mode & 0x30) == 0x20 && size > 0 && seg.len > 0) {
			seg.len -= data[0] % seg.len; /* a cut */
		} else {
			jbuf_add(&seg, data, size);
			for (int i = 0; i < (mode >> 4) * 16; i++)
				jbuf_add(&seg, "", 1); /* zeros after */
		}
		break;
	}
	if (!seg.failed)
		check(seg.p, seg.len);
	jbuf_free(&seg);
	return 0;
}
