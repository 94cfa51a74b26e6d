/*
 * journal-test: the journal's format, reader, replay rules and writer, on
 * real files in a temporary directory.
 *
 *   - CRC-32C against RFC 3720's vectors (both implementations);
 *   - the payload fields and records, their decoding and its errors;
 *   - the reader's verdicts: a clean end in zeros, a torn tail at every
 *     byte of a last record, a flipped bit before a MARK (damage) or after
 *     the last one (torn), a gap of zeros before records;
 *   - the replay rules (idempotent: a replay twice is the same state);
 *   - the writer in each sync mode: what is seen when, group commit,
 *     segment switches, the lock, a crash (a child that _exits) at every
 *     byte of its last record, damage refused with file and offset,
 *     compaction keeping the state and bounding the bytes, an fdatasync
 *     failure and the recovery by snapshot, id reservations across a crash.
 *
 * Usage: journal-test [NAME...]   (all tests when no name is given)
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "journal/crc32c.h"
#include "journal/journal.h"
#include "journal/journal-format.h"
#include "journal/journal-read.h"
#include "journal/journal-state.h"
#include "base/log.h"
/* testutil.h's latches and gates are for the thread tests: only its runner is used here */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#include "testutil.h"
#pragma GCC diagnostic pop

/* ---------------------------------------------------------------- helpers */

static char tmp_root[256];

static void
make_dir(char *dir, size_t len, const char *name)
{
	if (tmp_root[0] == '\0') {
		const char *t = getenv("TMPDIR");
		snprintf(tmp_root, sizeof tmp_root, "%s/journal-test.XXXXXX", t ? t : "/tmp");
		CHECK(mkdtemp(tmp_root) != NULL, "mkdtemp: %s", strerror(errno));
	}
	snprintf(dir, len, "%s/%s", tmp_root, name);
}

static void
remove_tree(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	char path[512];

	if (d == NULL)
		return;
	while ((de = readdir(d)) != NULL) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
		unlink(path);
	}
	closedir(d);
	rmdir(dir);
}

/* The segment files of dir, sorted; returns their count. */
static size_t
list_segments(const char *dir, uint64_t *seqs, size_t max)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	size_t n = 0;

	CHECK(d != NULL, "opendir %s", dir);
	while ((de = readdir(d)) != NULL) {
		uint64_t s = jseg_name_seq(de->d_name);
		if (s != 0 && n < max)
			seqs[n++] = s;
	}
	closedir(d);
	for (size_t i = 1; i < n; i++)
		for (size_t k = i; k > 0 && seqs[k - 1] > seqs[k]; k--) {
			uint64_t t = seqs[k];
			seqs[k] = seqs[k - 1];
			seqs[k - 1] = t;
		}
	return n;
}

static unsigned char *
read_file(const char *path, size_t *len)
{
	struct stat st;
	unsigned char *p;
	int fd = open(path, O_RDONLY);

	CHECK(fd != -1 && fstat(fd, &st) == 0, "open %s: %s", path, strerror(errno));
	p = malloc((size_t)st.st_size + 1);
	CHECK(p != NULL && read(fd, p, (size_t)st.st_size) == st.st_size, "read %s", path);
	close(fd);
	*len = (size_t)st.st_size;
	return p;
}

static void
write_file(const char *path, const void *p, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);

	CHECK(fd != -1 && write(fd, p, len) == (ssize_t)len, "write %s", path);
	close(fd);
}

/* ---------------------------------------------------------------- a small state for the writer */

/* A test journal and the "daemon" around it: what it saw and the live records it would snapshot. */
struct tj {
	struct journal *j;
	struct jread *replay;
	uint64_t seen;
	unsigned seen_calls;
	unsigned snapshots;
	/* live tasks: id -> finished or not (for the snapshot) */
	uint64_t live_ids[4096];
	bool live_done[4096];
	size_t nlive;
};

static void
tj_on_seen(void *arg, uint64_t batch)
{
	struct tj *t = arg;

	CHECK(batch >= t->seen, "seen went back from %" PRIu64 " to %" PRIu64, t->seen, batch);
	t->seen = batch;
	t->seen_calls++;
}

static void
accepted_payload(struct jbuf *b, uint64_t id)
{
	char spec[64];
	struct jaccepted a = { 0 };

	snprintf(spec, sizeof spec, "{\"kind\":\"echo\",\"value\":%" PRIu64 "}", id);
	a.time_us = 1000 + id;
	a.pool = (struct jtext){ "default", 7 };
	a.owner = (struct jtext){ "uid:0", 5 };
	a.kind = (struct jtext){ "echo", 4 };
	a.spec = (struct jtext){ spec, (uint32_t)strlen(spec) };
	jbuf_reset(b);
	jaccepted_encode(b, &a);
}

static void
finished_payload(struct jbuf *b, uint64_t id)
{
	char done[96];
	struct jfinished f = { 0 };

	snprintf(done, sizeof done, "\"event\":\"done\",\"task\":%" PRIu64 ",\"state\":\"succeeded\"}",
	    id);
	f.attempt = 1;
	f.time_us = 5000 + id;
	f.accepted_us = 1000 + id;
	f.state = (struct jtext){ "succeeded", 9 };
	f.pool = (struct jtext){ "default", 7 };
	f.kind = (struct jtext){ "echo", 4 };
	f.done = (struct jtext){ done, (uint32_t)strlen(done) };
	jbuf_reset(b);
	jfinished_encode(b, &f);
}

static void
tj_snapshot(void *arg, struct journal_snap *snap)
{
	struct tj *t = arg;
	struct jbuf b = { 0 };

	t->snapshots++;
	for (size_t i = 0; i < t->nlive; i++) {
		if (t->live_done[i]) {
			finished_payload(&b, t->live_ids[i]);
			journal_snap_add(snap, JREC_FINISHED, t->live_ids[i], b.p, b.len);
		} else {
			accepted_payload(&b, t->live_ids[i]);
			journal_snap_add(snap, JREC_ACCEPTED, t->live_ids[i], b.p, b.len);
		}
	}
	jbuf_free(&b);
}

static int
tj_open(struct tj *t, const char *dir, enum journal_sync mode, uint64_t max_bytes, char **cause)
{
	struct journal_settings s = { 0 };

	memset(t, 0, sizeof *t);
	s.dir = dir;
	s.sync = mode;
	s.sync_interval_us = 20000;
	s.max_bytes = max_bytes ? max_bytes : 1024 * 1024 * 1024;
	s.on_seen = tj_on_seen;
	s.snapshot = tj_snapshot;
	s.arg = t;
	return journal_open(&s, &t->j, &t->replay, cause);
}

/* Opens and begins, failing the test on an error. */
static void
tj_start(struct tj *t, const char *dir, enum journal_sync mode, uint64_t max_bytes)
{
	char *cause = NULL;

	CHECK(tj_open(t, dir, mode, max_bytes, &cause) == 0, "journal_open: %s", cause);
	journal_replay_done(t->j, t->replay);
	t->replay = NULL;
	CHECK(journal_begin(t->j, &cause) == 0, "journal_begin: %s", cause);
}

/* Waits for the journal's eventfd (bounded) and processes its reports. */
static void
tj_pump(struct tj *t)
{
	struct pollfd p = { journal_event_fd(t->j), POLLIN, 0 };

	CHECK(poll(&p, 1, TEST_WAIT_LIMIT_S * 1000) == 1, "the journal never reported");
	journal_process(t->j);
}

static void
tj_until_seen(struct tj *t, uint64_t batch)
{
	while (t->seen < batch)
		tj_pump(t);
}

static struct journal_ref
tj_accept(struct tj *t, uint64_t id)
{
	struct jbuf b = { 0 };
	struct journal_ref r;

	accepted_payload(&b, id);
	r = journal_append(t->j, JREC_ACCEPTED, id, b.p, b.len);
	jbuf_free(&b);
	return r;
}

static struct journal_ref
tj_finish(struct tj *t, uint64_t id)
{
	struct jbuf b = { 0 };
	struct journal_ref r;

	finished_payload(&b, id);
	r = journal_append(t->j, JREC_FINISHED, id, b.p, b.len);
	jbuf_free(&b);
	return r;
}

/* Loads dir's journal with the reader alone; returns -1 with *cause on refusal. */
static int
load(const char *dir, struct jread **r, char **cause)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY);
	int rc;

	CHECK(fd != -1, "open %s", dir);
	rc = jread_load(fd, dir, 0, r, cause);
	close(fd);
	return rc;
}

/* ---------------------------------------------------------------- crc32c */

static void
test_crc32c(void)
{
	unsigned char buf[48];
	static const unsigned char iscsi_read[48] = {
		0x01, 0xc0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
		0x00, 0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x00,
		0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x18, 0x28, 0x00, 0x00, 0x00,
		0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
	};
	uint32_t (*impl[2])(uint32_t, const void *, size_t) = { crc32c, crc32c_sw };
	unsigned char big[4099];

	test_current = "crc32c";
	for (int k = 0; k < 2; k++) {
		memset(buf, 0, 32);
		EXPECT(impl[k](0, buf, 32) == 0x8A9136AAu);
		memset(buf, 0xff, 32);
		EXPECT(impl[k](0, buf, 32) == 0x62A8AB43u);
		for (int i = 0; i < 32; i++)
			buf[i] = (unsigned char)i;
		EXPECT(impl[k](0, buf, 32) == 0x46DD794Eu);
		for (int i = 0; i < 32; i++)
			buf[i] = (unsigned char)(31 - i);
		EXPECT(impl[k](0, buf, 32) == 0x113FDB5Cu);
		EXPECT(impl[k](0, iscsi_read, 48) == 0xD9963A56u);
		EXPECT(impl[k](0, "123456789", 9) == 0xE3069283u);
		EXPECT(impl[k](0, "", 0) == 0);
	}
	/* both agree at every length and alignment, and a CRC continues across pieces */
	for (size_t i = 0; i < sizeof big; i++)
		big[i] = (unsigned char)(i * 7 + 3);
	for (size_t off = 0; off < 8; off++)
		for (size_t n = 0; n + off <= sizeof big; n += 13) {
			uint32_t whole = crc32c(0, big + off, n);
			EXPECT(whole == crc32c_sw(0, big + off, n));
			EXPECT(crc32c(crc32c(0, big + off, n / 3), big + off + n / 3, n - n / 3) == whole);
		}
	CHECK(test_failures == 0, "crc32c (%s)", crc32c_impl());
}

/* ---------------------------------------------------------------- fields, records */

static void
test_fields(void)
{
	struct jbuf b = { 0 };
	struct jaccepted a = { 0 }, a2;
	struct jfinished f = { 0 }, f2;
	struct jstarted s = { 3, 77, 0 }, s2;
	struct jfield_iter it;
	struct jfield_val v;
	const char *why = NULL;
	uint64_t x;
	char name[32];

	test_current = "fields";
	/* integers take the fewest bytes; 0 takes none */
	jfield_u64(&b, JF_TIME, 0);
	jfield_u64(&b, JF_RUN_US, 0x1234);
	jfield_u64(&b, JF_QUEUED_US, UINT64_MAX);
	jfield_iter_init(&it, b.p, b.len);
	CHECK(jfield_next(&it, &v) == 1 && v.tag == JF_TIME && v.len == 0, "zero");
	CHECK(jfield_next(&it, &v) == 1 && v.len == 2 && jfield_get_u64(&v, &x) == 0 &&
	    x == 0x1234, "0x1234");
	CHECK(jfield_next(&it, &v) == 1 && v.len == 8 && jfield_get_u64(&v, &x) == 0 &&
	    x == UINT64_MAX, "max");
	CHECK(jfield_next(&it, &v) == 0, "the end");
	/* a length running past the payload */
	b.p[b.len - 9] = 20;
	jfield_iter_init(&it, b.p, b.len);
	EXPECT(jfield_next(&it, &v) == 1 && jfield_next(&it, &v) == 1 && jfield_next(&it, &v) == -1);

	a.time_us = 123;
	a.queue_deadline_us = 456;
	a.rerun = true;
	a.flags = JFL_STREAM;
	a.pool = (struct jtext){ "io", 2 };
	a.owner = (struct jtext){ "token:ci", 8 };
	a.label = (struct jtext){ "", 0 };
	a.kind = (struct jtext){ "exec", 4 };
	a.spec = (struct jtext){ "{\"argv\":[\"true\"]}", 17 };
	jbuf_reset(&b);
	jaccepted_encode(&b, &a);
	jfield_str(&b, (enum jfield)200, "a field of a later tpd");
	CHECK(jaccepted_decode(b.p, b.len, &a2, &why) == 0, "accepted: %s", why);
	EXPECT(a2.time_us == 123 && a2.queue_deadline_us == 456 && a2.rerun && a2.flags == JFL_STREAM);
	EXPECT(a2.pool.len == 2 && memcmp(a2.pool.p, "io", 2) == 0);
	EXPECT(a2.label.p != NULL && a2.label.len == 0); /* an empty label is a label */
	EXPECT(a2.spec.len == 17 && memcmp(a2.spec.p, a.spec.p, 17) == 0);
	/* a record without its kind is refused, naming what is missing */
	jbuf_reset(&b);
	jfield_u64(&b, JF_TIME, 1);
	jfield_str(&b, JF_POOL, "default");
	jfield_str(&b, JF_SPEC, "{}");
	EXPECT(jaccepted_decode(b.p, b.len, &a2, &why) == -1 && strstr(why, "kind") != NULL);

	jbuf_reset(&b);
	jstarted_encode(&b, &s);
	EXPECT(jstarted_decode(b.p, b.len, &s2, &why) == 0 && s2.attempt == 3 && s2.time_us == 77);
	EXPECT(s2.retry_at_us == 0);
	/* a retry's: the attempt has not begun, it is due then */
	s.retry_at_us = 1234567;
	jbuf_reset(&b);
	jstarted_encode(&b, &s);
	EXPECT(jstarted_decode(b.p, b.len, &s2, &why) == 0 && s2.retry_at_us == 1234567);
	s.retry_at_us = 0;
	jbuf_reset(&b);
	jfield_u64(&b, JF_ATTEMPT, 0);
	EXPECT(jstarted_decode(b.p, b.len, &s2, &why) == -1);

	f.attempt = 2;
	f.time_us = 9;
	f.queued_us = 10;
	f.run_us = 11;
	f.state = (struct jtext){ "lost", 4 };
	f.pool = (struct jtext){ "default", 7 };
	f.done = (struct jtext){ "\"event\":\"done\"}", 15 };
	jbuf_reset(&b);
	jfinished_encode(&b, &f);
	CHECK(jfinished_decode(b.p, b.len, &f2, &why) == 0, "finished: %s", why);
	EXPECT(f2.attempt == 2 && f2.queued_us == 10 && f2.run_us == 11 && f2.owner.p == NULL);
	EXPECT(f2.state.len == 4 && f2.done.len == 15 && f2.spec.p == NULL);
	f.spec = (struct jtext){ "{\"op\":\"submit\"}", 15 };
	jbuf_reset(&b);
	jfinished_encode(&b, &f);
	EXPECT(jfinished_decode(b.p, b.len, &f2, &why) == 0 && f2.spec.len == 15 &&
	    memcmp(f2.spec.p, "{\"op\":\"submit\"}", 15) == 0);
	f.spec = (struct jtext){ NULL, 0 };

	/* names */
	jseg_name(name, sizeof name, 42);
	EXPECT(strcmp(name, "journal.000000000042") == 0);
	EXPECT(jseg_name_seq(name) == 42);
	EXPECT(jseg_name_seq("journal.00000000004") == 0);
	EXPECT(jseg_name_seq("journal.000000000042.tmp") == 0);
	EXPECT(jseg_name_seq("lock") == 0);
	jbuf_free(&b);
	CHECK(test_failures == 0, "fields");
}

/* ---------------------------------------------------------------- the reader's verdicts */

/* A segment image: header, then records, then zeros up to total. */
struct image {
	struct jbuf b;
	size_t rec_off[256];
	size_t nrec;
};

static void
image_init(struct image *im)
{
	unsigned char hdr[JFMT_SEG_HEADER];

	memset(im, 0, sizeof *im);
	jseg_header(hdr, 1, JFMT_SEG_SNAPSHOT, 42);
	jbuf_add(&im->b, hdr, sizeof hdr);
}

static void
image_rec(struct image *im, enum jrec_type type, uint64_t id, const void *p, size_t len)
{
	im->rec_off[im->nrec++] = im->b.len;
	jrec_append(&im->b, type, id, p, len);
}

static void
image_zeros(struct image *im, size_t n)
{
	unsigned char z[256] = { 0 };

	while (n > 0) {
		size_t k = n < sizeof z ? n : sizeof z;
		jbuf_add(&im->b, z, k);
		n -= k;
	}
}

static int
count_rec(const struct jrec *r, void *arg)
{
	(*(size_t *)arg)++;
	return 0;
}

static void
scan(const unsigned char *p, size_t len, struct jscan_result *res, size_t *n)
{
	*n = 0;
	jfmt_scan(p, len, count_rec, n, res);
}

static void
test_scan(void)
{
	struct image im;
	struct jscan_result res;
	struct jbuf pl = { 0 };
	size_t n, last, end;

	test_current = "scan";
	image_init(&im);
	for (uint64_t id = 1; id <= 20; id++) {
		accepted_payload(&pl, id);
		image_rec(&im, JREC_ACCEPTED, id, pl.p, pl.len);
		if (id % 5 == 0)
			image_rec(&im, JREC_MARK, im.b.len, NULL, 0); /* everything before is on disk */
	}
	for (uint64_t id = 21; id <= 23; id++) {  /* after the last MARK */
		accepted_payload(&pl, id);
		image_rec(&im, JREC_ACCEPTED, id, pl.p, pl.len);
	}
	end = im.b.len;
	last = im.rec_off[im.nrec - 1];

	/* clean: exactly the records, or the records and a preallocated tail of zeros */
	scan(im.b.p, end, &res, &n);
	CHECK(res.end == JSCAN_CLEAN && res.data_end == end && n == im.nrec, "clean (%d)", res.end);
	image_zeros(&im, 10000);
	scan(im.b.p, im.b.len, &res, &n);
	CHECK(res.end == JSCAN_CLEAN && res.data_end == end && n == im.nrec, "clean with zeros");

	/* torn at every byte of the last record, with and without the zeros after */
	for (size_t cut = last + 1; cut < end; cut++) {
		unsigned char *copy = malloc(cut + 5000);
		size_t nz = cut;

		memcpy(copy, im.b.p, cut);
		while (nz > last && copy[nz - 1] == 0)
			nz--;
		scan(copy, cut, &res, &n);
		if (nz == last) {
			/* only zeros of the record were written: nothing to drop */
			EXPECT(res.end == JSCAN_CLEAN && res.data_end == last);
		} else {
			EXPECT(res.end == JSCAN_TORN && res.bad_offset == last && res.torn_end == nz);
		}
		EXPECT(n == im.nrec - 1);
		memset(copy + cut, 0, 5000);
		scan(copy, cut + 5000, &res, &n);
		EXPECT(nz == last ? res.end == JSCAN_CLEAN : (res.end == JSCAN_TORN &&
		    res.torn_end == nz));
		free(copy);
	}

	/* a flipped bit before the last MARK: damage, at the record's offset */
	for (size_t r = 0; r < 5; r++) {
		unsigned char *copy = malloc(end);
		size_t at = im.rec_off[r] + 7 + r * 3;

		memcpy(copy, im.b.p, end);
		copy[at] ^= 0x10;
		scan(copy, end, &res, &n);
		EXPECT(res.end == JSCAN_DAMAGED && res.bad_offset == im.rec_off[r] && n == r);
		free(copy);
	}
	/* after the last MARK: never known to be on disk, a torn tail (the records after it dropped too) */
	{
		unsigned char *copy = malloc(end);
		size_t r = im.nrec - 3; /* task 21's ACCEPTED, after the last MARK */

		memcpy(copy, im.b.p, end);
		copy[im.rec_off[r] + 25] ^= 0x01;
		scan(copy, end, &res, &n);
		EXPECT(res.end == JSCAN_TORN && res.bad_offset == im.rec_off[r] && res.torn_records == 2);
		/* zeros instead (pages a power cut did not keep), the records after them kept */
		memcpy(copy, im.b.p, end);
		memset(copy + im.rec_off[r], 0, im.rec_off[r + 1] - im.rec_off[r]);
		scan(copy, end, &res, &n);
		EXPECT(res.end == JSCAN_TORN && res.bad_offset == im.rec_off[r] && res.torn_records == 2);
		free(copy);
	}
	/* a hole of zeros before a MARK that says it was on disk: damage */
	{
		unsigned char *copy = malloc(end);

		memcpy(copy, im.b.p, end);
		memset(copy + im.rec_off[2], 0, im.rec_off[3] - im.rec_off[2]);
		scan(copy, end, &res, &n);
		EXPECT(res.end == JSCAN_DAMAGED && res.bad_offset == im.rec_off[2]);
		free(copy);
	}
	/* the header: damage at 0; another version: refused with its reason */
	{
		unsigned char *copy = malloc(end);
		memcpy(copy, im.b.p, end);
		copy[9] ^= 1;
		scan(copy, end, &res, &n);
		EXPECT(res.end == JSCAN_DAMAGED && res.bad_offset == 0 && n == 0);
		scan(copy, 10, &res, &n);
		EXPECT(res.end == JSCAN_DAMAGED);
		free(copy);
	}
	jbuf_free(&pl);
	jbuf_free(&im.b);
	CHECK(test_failures == 0, "scan");
}

/* ---------------------------------------------------------------- replay rules */

struct apply_ctx {
	struct jstate *st;
	uint32_t seg;
};

static int
apply_rec(const struct jrec *r, void *arg)
{
	struct apply_ctx *c = arg;
	const char *why;

	CHECK(jstate_apply(c->st, c->seg, r, &why) == 0, "apply: %s", why);
	return 0;
}

static void
test_state_rules(void)
{
	struct image im;
	struct jbuf pl = { 0 };
	struct jstarted s;
	struct jscan_result res;
	struct jtask *const *tasks;
	size_t n;

	test_current = "state_rules";
	image_init(&im);
	for (uint64_t id = 1; id <= 6; id++) {
		accepted_payload(&pl, id);
		image_rec(&im, JREC_ACCEPTED, id, pl.p, pl.len);
	}
	s.attempt = 1;
	s.time_us = 1;
	jbuf_reset(&pl);
	jstarted_encode(&pl, &s);
	image_rec(&im, JREC_STARTED, 2, pl.p, pl.len);     /* 2 ran */
	image_rec(&im, JREC_STARTED, 3, pl.p, pl.len);
	s.attempt = 2;
	jbuf_reset(&pl);
	jstarted_encode(&pl, &s);
	image_rec(&im, JREC_STARTED, 3, pl.p, pl.len);     /* 3 was rerun */
	jbuf_reset(&pl);
	jcancel_encode(&pl, 5);
	image_rec(&im, JREC_CANCEL, 4, pl.p, pl.len);      /* 4 cancelled while queued */
	finished_payload(&pl, 5);
	image_rec(&im, JREC_FINISHED, 5, pl.p, pl.len);    /* 5 done */
	s.attempt = 1;
	jbuf_reset(&pl);
	jstarted_encode(&pl, &s);
	image_rec(&im, JREC_STARTED, 5, pl.p, pl.len);     /* ignored: finished already */
	image_rec(&im, JREC_FORGOTTEN, 6, NULL, 0);        /* 6 gone */
	image_rec(&im, JREC_STARTED, 6, pl.p, pl.len);     /* ignored: unknown */
	image_rec(&im, JREC_NEXT_ID, 100, NULL, 0);
	finished_payload(&pl, 9);
	image_rec(&im, JREC_FINISHED, 9, pl.p, pl.len);    /* a finished alone (compacted) */

	/* applied once, then the same records again: the same state */
	for (int pass = 1; pass <= 2; pass++) {
		struct apply_ctx c = { jstate_new(), 0 };
		struct jaccepted a;
		struct jfinished f;

		c.seg = jstate_add_segment(c.st, im.b.p, im.b.len);
		for (int k = 0; k < pass; k++)
			jfmt_scan(im.b.p, im.b.len, apply_rec, &c, &res);
		tasks = jstate_tasks(c.st, &n);
		CHECK(n == 6, "pass %d: %zu tasks", pass, n);
		EXPECT(tasks[0]->id == 1 && tasks[0]->flags == JT_ACCEPTED && tasks[0]->attempt == 0);
		EXPECT(tasks[1]->id == 2 && (tasks[1]->flags & JT_STARTED) && tasks[1]->attempt == 1);
		EXPECT(tasks[2]->id == 3 && tasks[2]->attempt == 2);
		EXPECT(tasks[3]->id == 4 && (tasks[3]->flags & JT_CANCELLED) && tasks[3]->cancel.size > 0);
		EXPECT(tasks[4]->id == 5 && (tasks[4]->flags & JT_FINISHED) && tasks[4]->accepted.size == 0 &&
		    tasks[4]->started.size == 0 && tasks[4]->attempt == 1);
		EXPECT(tasks[5]->id == 9 && (tasks[5]->flags & JT_FINISHED));
		EXPECT(jstate_next_id(c.st) == 100 && jstate_max_id(c.st) == 9);
		/* the decoded records point into the segment */
		EXPECT(jstate_accepted(c.st, tasks[0], &a) == 0 && a.time_us == 1001);
		EXPECT(jstate_finished(c.st, tasks[4], &f) == 0 && f.time_us == 5005);
		jstate_free(c.st);
	}
	/* a later NEXT_ID lower than the ids seen: the ids win */
	{
		struct image im2;
		struct apply_ctx c = { jstate_new(), 0 };

		image_init(&im2);
		image_rec(&im2, JREC_NEXT_ID, 3, NULL, 0);
		accepted_payload(&pl, 7);
		image_rec(&im2, JREC_ACCEPTED, 7, pl.p, pl.len);
		c.seg = jstate_add_segment(c.st, im2.b.p, im2.b.len);
		jfmt_scan(im2.b.p, im2.b.len, apply_rec, &c, &res);
		EXPECT(jstate_next_id(c.st) == 8);
		jstate_free(c.st);
		jbuf_free(&im2.b);
	}
	jbuf_free(&pl);
	jbuf_free(&im.b);
	CHECK(test_failures == 0, "state_rules");
}

/* ---------------------------------------------------------------- the writer */

static void
check_replay(const char *dir, uint64_t first, uint64_t last, bool finished, uint64_t min_next)
{
	struct jread *r;
	char *cause = NULL;
	struct jtask *const *tasks;
	size_t n;

	CHECK(load(dir, &r, &cause) == 0, "load: %s", cause);
	tasks = jstate_tasks(r->state, &n);
	CHECK(n == last - first + 1, "%zu tasks replayed, expected %" PRIu64, n, last - first + 1);
	for (size_t i = 0; i < n; i++) {
		CHECK(tasks[i]->id == first + i, "task %" PRIu64 " at %zu", tasks[i]->id, i);
		CHECK(!!(tasks[i]->flags & JT_FINISHED) == finished, "task %" PRIu64 " finished?",
		    tasks[i]->id);
	}
	CHECK(jstate_next_id(r->state) >= min_next, "next id %" PRIu64 " < %" PRIu64,
	    jstate_next_id(r->state), min_next);
	jread_free(r);
}

static void
test_writer_commit(void)
{
	char dir[300];
	struct tj t;
	struct journal_stats st;
	uint64_t b;

	test_current = "writer_commit";
	make_dir(dir, sizeof dir, "commit");
	tj_start(&t, dir, JOURNAL_SYNC_COMMIT, 0);
	CHECK(access(dir, F_OK) == 0, "state_dir created");
	/* a batch is seen only once it is synced: group commit of every record of the pass */
	for (int round = 0; round < 50; round++) {
		b = journal_batch(t.j);
		for (uint64_t id = round * 20 + 1; id <= (uint64_t)round * 20 + 20; id++)
			tj_accept(&t, id);
		journal_flush(t.j);
		CHECK(journal_seen(t.j) < b || t.seen >= b, "seen before its sync");
		tj_until_seen(&t, b);
	}
	journal_stats(t.j, &st);
	CHECK(st.syncs >= 1 && st.syncs <= 50 && st.batches == 50, "syncs %" PRIu64 " batches %"
	    PRIu64, st.syncs, st.batches);
	CHECK(strcmp(st.state, "ok") == 0 && st.records >= 1000, "stats");
	journal_close(t.j, 1001);
	check_replay(dir, 1, 1000, false, 1001);
	/* reopened: appends go on in the same segment, ids continue */
	tj_start(&t, dir, JOURNAL_SYNC_COMMIT, 0);
	for (uint64_t id = 1; id <= 1000; id++)
		tj_finish(&t, id);
	journal_flush(t.j);
	journal_close(t.j, 1001);
	check_replay(dir, 1, 1000, true, 1001);
	remove_tree(dir);
}

/* How many tasks a replay of dir (with the reader alone, as after a crash) finds. */
static size_t
replayed_tasks(const char *dir)
{
	struct jread *r;
	char *cause = NULL;
	size_t n = 0;

	CHECK(load(dir, &r, &cause) == 0, "load: %s", cause);
	jstate_tasks(r->state, &n);
	jread_free(r);
	return n;
}

/*
 * commit: while an fdatasync runs (held here, as a slow disk would), the
 * batches of the loop's passes gather in memory: nothing of them is on disk
 * or seen, so a crash then loses only records no client was shown. Once it
 * ends, one write and one fdatasync take all of them; a batch that needs a
 * new segment waits until what was handed over for the old one is synced.
 */
static void
test_commit_handover(void)
{
	char dir[300];
	struct tj t;
	struct journal_stats st;
	uint64_t b, first, syncs0, batches0;
	struct pollfd p;

	test_current = "commit_handover";
	make_dir(dir, sizeof dir, "handover");
	tj_start(&t, dir, JOURNAL_SYNC_COMMIT, 1024 * 1024); /* 64 KiB segments */
	for (uint64_t id = 1; id <= 10; id++)
		tj_accept(&t, id);
	b = journal_batch(t.j);
	journal_flush(t.j);
	tj_until_seen(&t, b);
	journal_stats(t.j, &st);
	syncs0 = st.syncs;
	batches0 = st.batches;

	journal_hold_sync(t.j, true);
	first = journal_batch(t.j);
	for (int pass = 0; pass < 5; pass++) {
		for (uint64_t id = 11 + pass * 10; id <= 20 + (uint64_t)pass * 10; id++)
			tj_accept(&t, id);
		journal_flush(t.j);
	}
	b = journal_batch(t.j) - 1;
	CHECK(b == first + 4, "5 passes made batches %" PRIu64 "..%" PRIu64, first, b);
	p = (struct pollfd){ journal_event_fd(t.j), POLLIN, 0 };
	if (poll(&p, 1, 100) == 1)
		journal_process(t.j);
	CHECK(t.seen < first, "batch %" PRIu64 " seen with no fdatasync after it", t.seen);
	CHECK(replayed_tasks(dir) == 10, "records handed over were on disk before their pass");
	journal_stats(t.j, &st);
	CHECK(st.syncs == syncs0 && st.batches == batches0 + 5, "syncs %" PRIu64 " batches %"
	    PRIu64, st.syncs - syncs0, st.batches - batches0);

	/* one pass more than the segment holds: it waits, not handed over, for a new segment */
	for (uint64_t id = 61; id <= 1000; id++)    /* about 75 KiB */
		tj_accept(&t, id);
	journal_flush(t.j);
	CHECK(journal_batch(t.j) == b + 1, "a batch for the next segment was handed over");
	journal_stats(t.j, &st);
	CHECK(st.segments == 1, "a new segment while the old one had unsynced batches");

	journal_hold_sync(t.j, false);
	tj_until_seen(&t, b);
	journal_stats(t.j, &st);
	CHECK(st.syncs == syncs0 + 1, "5 gathered batches took %" PRIu64 " fdatasyncs",
	    st.syncs - syncs0);
	CHECK(replayed_tasks(dir) == 60, "the gathered batches are on disk");
	b = journal_batch(t.j);
	tj_until_seen(&t, b);
	journal_stats(t.j, &st);
	CHECK(st.segments == 2 && strcmp(st.state, "ok") == 0, "%u segments, %s", st.segments,
	    st.state);
	journal_close(t.j, 1001);
	check_replay(dir, 1, 1000, false, 1001);
	remove_tree(dir);
}

/*
 * commit: the sync thread's write of what the loop handed over fails (a
 * full or failing disk): the journal fails naming the file, nothing of it
 * is seen, and the recovery's snapshot brings it back.
 */
static void
test_commit_write_failure(void)
{
	char dir[300];
	struct tj t;
	struct journal_stats st;
	const char *why = NULL;
	uint64_t b;

	test_current = "commit_write_failure";
	make_dir(dir, sizeof dir, "wfail");
	tj_start(&t, dir, JOURNAL_SYNC_COMMIT, 0);
	for (uint64_t id = 1; id <= 10; id++) {
		tj_accept(&t, id);
		t.live_ids[t.nlive] = id;
		t.live_done[t.nlive++] = false;
	}
	b = journal_batch(t.j);
	journal_flush(t.j);
	tj_until_seen(&t, b);
	journal_inject_write_error(t.j, ENOSPC);
	for (uint64_t id = 11; id <= 20; id++) {
		tj_accept(&t, id);
		t.live_ids[t.nlive] = id;
		t.live_done[t.nlive++] = false;
	}
	b = journal_batch(t.j);
	journal_flush(t.j);
	while (journal_writable(t.j, &why))
		tj_pump(&t);
	CHECK(strstr(why, "write to") != NULL && strstr(why, dir) != NULL &&
	    strstr(why, strerror(ENOSPC)) != NULL, "why: %s", why);
	CHECK(t.seen < b, "batch %" PRIu64 " seen, its write failed", b);
	CHECK(replayed_tasks(dir) == 10, "the failed write left records on disk");
	journal_stats(t.j, &st);
	CHECK(strcmp(st.state, "failed") == 0, "stats say %s", st.state);
	journal_tick(t.j);
	CHECK(journal_writable(t.j, &why), "still failed: %s", why);
	CHECK(t.seen >= b, "the recovery did not let the held batch be seen");
	journal_close(t.j, 21);
	check_replay(dir, 1, 20, false, 21);
	remove_tree(dir);
}

static void
test_writer_interval_none(void)
{
	char dir[300];
	struct tj t;
	struct journal_stats st;
	uint64_t b, syncs0;

	test_current = "writer_interval_none";
	make_dir(dir, sizeof dir, "interval");
	tj_start(&t, dir, JOURNAL_SYNC_INTERVAL, 0);
	journal_stats(t.j, &st);
	syncs0 = st.syncs;
	b = journal_batch(t.j);
	tj_accept(&t, 1);
	journal_flush(t.j);
	CHECK(t.seen >= b, "interval: seen once written");
	/* an idle tail is synced by the timer, without another write */
	for (int i = 0; i < 200; i++) {
		journal_stats(t.j, &st);
		if (st.syncs > syncs0)
			break;
		tj_pump(&t);
	}
	journal_stats(t.j, &st);
	CHECK(st.syncs > syncs0, "the interval timer never synced the idle tail");
	journal_close(t.j, 2);
	check_replay(dir, 1, 1, false, 2);
	remove_tree(dir);

	make_dir(dir, sizeof dir, "none");
	tj_start(&t, dir, JOURNAL_SYNC_NONE, 0);
	journal_stats(t.j, &st);
	syncs0 = st.syncs;
	for (uint64_t id = 1; id <= 100; id++) {
		b = journal_batch(t.j);
		tj_accept(&t, id);
		journal_flush(t.j);
		CHECK(t.seen >= b, "none: seen once written");
	}
	journal_stats(t.j, &st);
	CHECK(st.syncs == syncs0, "none synced %" PRIu64 " times", st.syncs - syncs0);
	journal_close(t.j, 101);
	check_replay(dir, 1, 100, false, 101);
	remove_tree(dir);
}

static void
test_lock(void)
{
	char dir[300], *cause = NULL;
	struct tj t, t2;
	char pid[32];

	test_current = "lock";
	make_dir(dir, sizeof dir, "lock");
	tj_start(&t, dir, JOURNAL_SYNC_COMMIT, 0);
	CHECK(tj_open(&t2, dir, JOURNAL_SYNC_COMMIT, 0, &cause) == -1, "a second journal opened");
	snprintf(pid, sizeof pid, "(pid %ld)", (long)getpid());
	CHECK(cause != NULL && strstr(cause, dir) != NULL && strstr(cause, pid) != NULL,
	    "the refusal names the directory and the pid: %s", cause);
	free(cause);
	journal_close(t.j, 1);
	tj_start(&t, dir, JOURNAL_SYNC_COMMIT, 0);
	journal_close(t.j, 1);
	remove_tree(dir);
}

/* A child writes n tasks (accepted, the odd ones finished) and dies without closing. */
static void
crash_child(const char *dir, enum journal_sync mode, uint64_t n, uint64_t max_bytes)
{
	pid_t pid = fork();
	int status;

	CHECK(pid != -1, "fork");
	if (pid == 0) {
		struct tj t;

		tj_start(&t, dir, mode, max_bytes);
		for (uint64_t id = 1; id <= n; id++) {
			uint64_t b = journal_batch(t.j);
			tj_accept(&t, id);
			if (id % 2 == 1)
				tj_finish(&t, id);
			journal_flush(t.j);
			if (mode == JOURNAL_SYNC_COMMIT)
				tj_until_seen(&t, b);
		}
		_exit(0);
	}
	CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0,
	    "the child failed");
}

/* The path of the newest segment of dir. */
static void
newest_segment(const char *dir, char *path, size_t len)
{
	uint64_t seqs[64];
	size_t n = list_segments(dir, seqs, 64);
	char name[32];

	CHECK(n > 0, "no segment in %s", dir);
	jseg_name(name, sizeof name, seqs[n - 1]);
	snprintf(path, len, "%s/%s", dir, name);
}

static void
test_crash_torn_tail(void)
{
	size_t cuts[10];
	char dir[300], seg[400], *cause = NULL;
	unsigned char *orig;
	size_t len, end, last;
	struct jread *r;
	struct jscan_result res;
	size_t nrec;

	test_current = "crash_torn_tail";
	make_dir(dir, sizeof dir, "torn");
	crash_child(dir, JOURNAL_SYNC_COMMIT, 30, 0);
	newest_segment(dir, seg, sizeof seg);
	orig = read_file(seg, &len);
	/* where the last record is */
	scan(orig, len, &res, &nrec);
	CHECK(res.end == JSCAN_CLEAN, "the crash left %d", res.end);
	end = res.data_end;
	{
		/* walk to the last record's offset */
		size_t off = JFMT_SEG_HEADER;
		last = off;
		while (off < end) {
			uint32_t plen = (uint32_t)orig[off + 4] | (uint32_t)orig[off + 5] << 8 |
			    (uint32_t)orig[off + 6] << 16 | (uint32_t)orig[off + 7] << 24;
			last = off;
			off += JFMT_REC_HEADER + plen;
		}
	}
	/*
	 * torn inside the last record (the bytes after the cut still the
	 * preallocated zeros; a file shorter than it was made is damage): it
	 * opens, without that record. Cuts in its header, just past it, in the
	 * middle and at its last byte (every byte is the scan test's): each is a
	 * whole start and stop, slow under the sanitizers.
	 */
	cuts[0] = 1, cuts[1] = 2, cuts[2] = 4, cuts[3] = 8, cuts[4] = 12, cuts[5] = 19;
	cuts[6] = 20, cuts[7] = 21, cuts[8] = (end - last) / 2, cuts[9] = end - last - 1;
	for (size_t k = 0; k < sizeof cuts / sizeof cuts[0]; k++) {
		size_t cut = last + cuts[k];
		struct tj t;
		size_t upto = end + 4096 < len ? end + 4096 : len;
		unsigned char *torn;
		int fd;

		if (cut <= last || cut >= end || (k > 0 && cuts[k] <= cuts[k - 1]))
			continue;
		torn = calloc(1, upto - last);
		fd = open(seg, O_WRONLY);
		/* the bytes from the last record on (what the previous round wrote there too) */
		CHECK(torn != NULL && fd != -1, "open %s", seg);
		memcpy(torn, orig + last, cut - last);
		CHECK(pwrite(fd, torn, upto - last, (off_t)last) == (ssize_t)(upto - last), "pwrite");
		close(fd);
		free(torn);
		CHECK(tj_open(&t, dir, JOURNAL_SYNC_COMMIT, 0, &cause) == 0,
		    "cut at %zu (record at %zu): %s", cut, last, cause);
		journal_replay_done(t.j, t.replay);
		CHECK(journal_begin(t.j, &cause) == 0, "begin: %s", cause);
		journal_close(t.j, 31);
		/* the tail was dropped for good: a reader finds a clean journal */
		CHECK(load(dir, &r, &cause) == 0 && r->torn == SIZE_MAX, "after the fix: %s", cause);
		jread_free(r);
	}
	free(orig);
	remove_tree(dir);
}

static void
test_damage_refused(void)
{
	char dir[300], seg[400], *cause = NULL, off[64];
	unsigned char *orig;
	size_t len, at;
	struct jscan_result res;
	size_t nrec;
	struct tj t;

	test_current = "damage_refused";
	make_dir(dir, sizeof dir, "damage");
	crash_child(dir, JOURNAL_SYNC_COMMIT, 200, 0);
	newest_segment(dir, seg, sizeof seg);
	orig = read_file(seg, &len);
	scan(orig, len, &res, &nrec);
	at = res.data_end / 2;
	orig[at] ^= 0x04;
	write_file(seg, orig, len);
	CHECK(tj_open(&t, dir, JOURNAL_SYNC_COMMIT, 0, &cause) == -1, "a damaged journal opened");
	scan(orig, len, &res, &nrec);
	snprintf(off, sizeof off, "offset %" PRIu64, res.bad_offset);
	CHECK(res.end == JSCAN_DAMAGED && strstr(cause, seg) != NULL && strstr(cause, off) != NULL,
	    "the refusal names the file and the offset: %s", cause);
	free(cause);
	free(orig);
	remove_tree(dir);
}

static void
test_segments_and_compaction(void)
{
	char dir[300];
	struct tj t;
	struct journal_stats st;
	uint64_t seqs[256], max_seen_bytes = 0, id = 0;
	struct journal_ref acc[64], fin[64];
	size_t n;

	test_current = "segments_and_compaction";
	make_dir(dir, sizeof dir, "compact");
	/* 1 MiB: segments of 64 KiB */
	tj_start(&t, dir, JOURNAL_SYNC_COMMIT, 1024 * 1024);
	for (int round = 0; round < 400; round++) {
		uint64_t b = journal_batch(t.j);

		for (int k = 0; k < 64; k++) {
			acc[k] = tj_accept(&t, id + 1 + k);
			fin[k] = tj_finish(&t, id + 1 + k);
			journal_release(t.j, acc[k]);  /* superseded by its FINISHED */
		}
		/* the previous round's tasks are forgotten: dead */
		for (int k = 0; k < 64 && round > 0; k++) {
			journal_append(t.j, JREC_FORGOTTEN, id - 63 + k, NULL, 0);
		}
		journal_flush(t.j);
		tj_until_seen(&t, b);
		for (int k = 0; k < 64; k++)
			journal_release(t.j, fin[k]);  /* as if forgotten next round */
		id += 64;
		journal_tick(t.j);
		journal_stats(t.j, &st);
		if (st.bytes > max_seen_bytes)
			max_seen_bytes = st.bytes;
		while (journal_compacting(t.j))
			tj_pump(&t);
	}
	journal_stats(t.j, &st);
	n = list_segments(dir, seqs, 256);
	printf("# compaction: %" PRIu64 " compactions, %u segments, at most %" PRIu64
	    " bytes on disk (limit %d), last compaction %.1f ms\n", st.compactions, st.segments,
	    max_seen_bytes, 1024 * 1024, st.last_compaction_us / 1000.0);
	CHECK(st.compactions > 0, "never compacted");
	CHECK(n == st.segments, "%zu files, %u counted", n, st.segments);
	CHECK(max_seen_bytes <= 1024 * 1024, "the journal grew to %" PRIu64, max_seen_bytes);
	journal_close(t.j, id + 1);
	/* the last round's tasks are all that is left, finished */
	check_replay(dir, id - 63, id, true, id + 1);
	remove_tree(dir);
}

static void
test_sync_failure_recovery(void)
{
	char dir[300];
	struct tj t;
	struct journal_stats st;
	const char *why = NULL;
	uint64_t b;

	test_current = "sync_failure_recovery";
	make_dir(dir, sizeof dir, "fail");
	tj_start(&t, dir, JOURNAL_SYNC_COMMIT, 0);
	for (uint64_t id = 1; id <= 10; id++) {
		tj_accept(&t, id);
		t.live_ids[t.nlive] = id;
		t.live_done[t.nlive++] = false;
	}
	b = journal_batch(t.j);
	journal_flush(t.j);
	tj_until_seen(&t, b);
	/* the next fdatasync fails: failed, submits refused naming the directory */
	journal_inject_sync_error(t.j, EIO);
	tj_accept(&t, 11);
	t.live_ids[t.nlive] = 11;
	t.live_done[t.nlive++] = false;
	b = journal_batch(t.j);
	journal_flush(t.j);
	while (journal_writable(t.j, &why))
		tj_pump(&t);
	CHECK(strstr(why, dir) != NULL && strstr(why, "Input/output error") != NULL, "why: %s", why);
	CHECK(t.seen < b, "a failed journal let batch %" PRIu64 " be seen, never synced", b);
	journal_stats(t.j, &st);
	CHECK(strcmp(st.state, "failed") == 0 && st.error != NULL, "stats say %s", st.state);
	/* records meanwhile are not written; the tick writes a snapshot and it works again */
	tj_finish(&t, 1);
	t.live_done[0] = true;
	journal_flush(t.j);
	journal_tick(t.j);
	CHECK(t.snapshots == 1, "no snapshot");
	CHECK(journal_writable(t.j, &why), "still failed: %s", why);
	CHECK(t.seen >= b, "the recovery's snapshot did not let the held batch be seen");
	journal_stats(t.j, &st);
	CHECK(st.segments == 1 && st.recoveries == 1, "%u segments after the recovery", st.segments);
	for (uint64_t id = 2; id <= 11; id++)
		tj_finish(&t, id);
	b = journal_batch(t.j);
	journal_flush(t.j);
	tj_until_seen(&t, b);
	journal_close(t.j, 12);
	check_replay(dir, 1, 11, true, 12);
	remove_tree(dir);
}

static void
test_ids_across_crash(void)
{
	char dir[300];
	struct jread *r;
	char *cause = NULL;

	test_current = "ids_across_crash";
	/* interval: a crash leaves the reservation: ids jump past it, never back */
	make_dir(dir, sizeof dir, "ids");
	crash_child(dir, JOURNAL_SYNC_INTERVAL, 10, 0);
	CHECK(load(dir, &r, &cause) == 0, "load: %s", cause);
	CHECK(jstate_next_id(r->state) == 1 + 65536, "next id after a crash: %" PRIu64,
	    jstate_next_id(r->state));
	jread_free(r);
	remove_tree(dir);
	/* past half a reservation, the next one is written: a crash never goes back */
	make_dir(dir, sizeof dir, "ids-many");
	crash_child(dir, JOURNAL_SYNC_INTERVAL, 40000, 0);
	CHECK(load(dir, &r, &cause) == 0, "load: %s", cause);
	CHECK(jstate_next_id(r->state) > 40000 + 32768, "next id after 40000: %" PRIu64,
	    jstate_next_id(r->state));
	jread_free(r);
	/* a clean stop writes the exact next id */
	{
		struct tj t;
		tj_start(&t, dir, JOURNAL_SYNC_INTERVAL, 0);
		journal_close(t.j, 100000);
	}
	CHECK(load(dir, &r, &cause) == 0 && jstate_next_id(r->state) == 100000, "exact: %" PRIu64,
	    jstate_next_id(r->state));
	jread_free(r);
	remove_tree(dir);
	/* commit: every accepted record is synced before it is seen: ids stay dense */
	make_dir(dir, sizeof dir, "ids2");
	crash_child(dir, JOURNAL_SYNC_COMMIT, 10, 0);
	CHECK(load(dir, &r, &cause) == 0 && jstate_next_id(r->state) == 11, "commit: %" PRIu64,
	    jstate_next_id(r->state));
	jread_free(r);
	remove_tree(dir);
}

static void
test_limit(void)
{
	char dir[300];
	struct tj t;
	struct journal_stats st;
	const char *why = NULL;
	uint64_t id = 0, b;

	test_current = "limit";
	make_dir(dir, sizeof dir, "limit");
	/* 1 MiB, every record live: the journal fills, and says so */
	tj_start(&t, dir, JOURNAL_SYNC_COMMIT, 1024 * 1024);
	while (journal_writable(t.j, &why)) {
		b = journal_batch(t.j);
		for (int k = 0; k < 32; k++)
			tj_accept(&t, ++id);
		journal_flush(t.j);
		tj_until_seen(&t, b);
		journal_tick(t.j);
		CHECK(id < 100000, "never at the limit");
	}
	CHECK(strstr(why, "journal_max_bytes") != NULL && strstr(why, dir) != NULL, "why: %s", why);
	journal_stats(t.j, &st);
	CHECK(st.at_limit && st.bytes <= 1024 * 1024, "%" PRIu64 " bytes at the limit", st.bytes);
	/* records of accepted work still go in */
	for (uint64_t k = 1; k <= 100; k++)
		tj_finish(&t, k);
	b = journal_batch(t.j);
	journal_flush(t.j);
	tj_until_seen(&t, b);
	journal_close(t.j, id + 1);
	remove_tree(dir);
}

/* A crash between a snapshot's rename and the removal of what it replaces: the snapshot wins. */
static void
test_obsolete_segments(void)
{
	char dir[300], path[400], name[32], *cause = NULL;
	struct image old, snap;
	struct jbuf pl = { 0 };
	struct jread *r;
	struct jtask *const *tasks;
	size_t n;
	unsigned char hdr[JFMT_SEG_HEADER];

	test_current = "obsolete_segments";
	make_dir(dir, sizeof dir, "obsolete");
	CHECK(mkdir(dir, 0700) == 0, "mkdir");
	image_init(&old);
	for (uint64_t id = 1; id <= 3; id++) {
		accepted_payload(&pl, id);
		image_rec(&old, JREC_ACCEPTED, id, pl.p, pl.len);
	}
	jseg_name(name, sizeof name, 4);
	snprintf(path, sizeof path, "%s/%s", dir, name);
	jseg_header(hdr, 4, 0, 1);
	memcpy(old.b.p, hdr, sizeof hdr);
	write_file(path, old.b.p, old.b.len);
	image_init(&snap);
	jseg_header(hdr, 5, JFMT_SEG_SNAPSHOT, 2);
	memcpy(snap.b.p, hdr, sizeof hdr);
	finished_payload(&pl, 2);
	image_rec(&snap, JREC_NEXT_ID, 4, NULL, 0);
	image_rec(&snap, JREC_FINISHED, 2, pl.p, pl.len);
	jseg_name(name, sizeof name, 5);
	snprintf(path, sizeof path, "%s/%s", dir, name);
	write_file(path, snap.b.p, snap.b.len);
	snprintf(path, sizeof path, "%s/%s.tmp", dir, name);
	write_file(path, "x", 1);
	CHECK(load(dir, &r, &cause) == 0, "load: %s", cause);
	tasks = jstate_tasks(r->state, &n);
	CHECK(n == 1 && tasks[0]->id == 2 && (tasks[0]->flags & JT_FINISHED), "the snapshot's state");
	CHECK(r->nobsolete == 1 && r->obsolete[0] == 4 && r->nleftovers == 1, "what is left to remove");
	CHECK(jstate_next_id(r->state) == 4, "next id");
	jread_free(r);
	{
		struct tj t;
		uint64_t seqs[8];
		tj_start(&t, dir, JOURNAL_SYNC_COMMIT, 0);
		journal_close(t.j, 4);
		CHECK(list_segments(dir, seqs, 8) == 1 && seqs[0] == 5, "the obsolete segment stays");
		CHECK(access(path, F_OK) == -1, "the leftover .tmp stays");
	}
	jbuf_free(&pl);
	jbuf_free(&old.b);
	jbuf_free(&snap.b);
	remove_tree(dir);
}

static const struct test_case cases[] = {
	{ "crc32c", test_crc32c },
	{ "fields", test_fields },
	{ "scan", test_scan },
	{ "state_rules", test_state_rules },
	{ "writer_commit", test_writer_commit },
	{ "writer_interval_none", test_writer_interval_none },
	{ "commit_handover", test_commit_handover },
	{ "commit_write_failure", test_commit_write_failure },
	{ "lock", test_lock },
	{ "crash_torn_tail", test_crash_torn_tail },
	{ "damage_refused", test_damage_refused },
	{ "segments_and_compaction", test_segments_and_compaction },
	{ "sync_failure_recovery", test_sync_failure_recovery },
	{ "ids_across_crash", test_ids_across_crash },
	{ "limit", test_limit },
	{ "obsolete_segments", test_obsolete_segments },
};

int
main(int argc, char **argv)
{
	int rc;

	log_init(getenv("TPD_TEST_VERBOSE") ? LOG_DEBUG : LOG_WARNING);
	rc = test_run(cases, TEST_COUNT(cases), argc, argv);

	if (tmp_root[0] != '\0')
		rmdir(tmp_root);
	return rc;
}
