/*
 * journal-compact.c: the maintenance thread, which compacts the sealed
 * segments. The loop asks for the segments up to seq M (all sealed: nobody
 * writes them any more); this thread replays them (journal-read.c, its own
 * mappings), so it learns their live records without asking the loop for
 * anything, then writes those records, as they are (their checksums hold
 * anywhere), after a NEXT_ID into journal.M.tmp: preallocated, written in
 * large writes, fdatasynced. Under dirlock, unless the loop's recovery made
 * it obsolete meanwhile (mt.gen moved), it renames that over journal.M with
 * the SNAPSHOT flag, fsyncs the directory, removes the older segments and
 * fsyncs the directory again. A crash at any point leaves either the old
 * segments or the new one in charge (journal-read.h: the newest snapshot
 * wins; a .tmp is removed at start).
 *
 * The loop's part is a request and a result: no pause of the loop grows
 * with the journal's size.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/thread.h"
#include "journal-int.h"
#include "journal-read.h"
#include "base/log.h"

#define OUT_CHUNK (1024 * 1024)

struct out {
	int fd;
	struct jbuf buf;
	uint64_t off;
	int err;
};

/* Writes p[0..n) at the output's end; the first error stays in o->err. */
static void
out_write(struct out *o, const void *p, size_t n)
{
	if (o->err != 0)
		return;
	if (journal_write_all(o->fd, p, n, o->off) == -1)
		o->err = errno;
	else
		o->off += n;
}

static void
out_flush(struct out *o)
{
	out_write(o, o->buf.p, o->buf.len);
	jbuf_reset(&o->buf);
}

static void
out_add(struct out *o, const void *p, size_t n)
{
	if (o->buf.len + n > OUT_CHUNK)
		out_flush(o);
	if (n >= OUT_CHUNK) {
		out_write(o, p, n);  /* a large record goes straight from the map */
		return;
	}
	jbuf_add(&o->buf, p, n);
	if (o->buf.failed)
		o->err = ENOMEM;
}

static void
add_loc(struct out *o, const struct jstate *st, const struct jloc *l, uint64_t *records)
{
	const unsigned char *r = jstate_record(st, l);

	if (r != NULL) {
		out_add(o, r, l->size);
		(*records)++;
	}
}

static int
forget_one(const struct jrec *rec, void *arg)
{
	const char *why;

	if (rec->type == JREC_FORGOTTEN)
		jstate_apply(arg, 0, rec, &why);
	return 0;
}

/*
 * The tasks forgotten by records of the active segment (up to end, which
 * the loop wrote already and never writes again) are dropped from the
 * sealed segments' state: at journal_max_bytes the oldest results are
 * forgotten to make room (durable.c), and their FORGOTTEN records are in
 * the active segment. Nothing else of it is taken (it stays in charge of
 * its own records).
 */
static void
forget_from_active(struct journal *j, struct jstate *st, uint64_t seq, uint64_t end)
{
	struct jscan_result res;
	char name[32], *cause = NULL;
	unsigned char *buf;
	size_t done = 0;
	int fd;

	jseg_name(name, sizeof name, seq);
	if ((fd = journal_open_file(j->dirfd, j->dir, name, O_RDONLY, &cause)) == -1) {
		free(cause);
		return;
	}
	if ((buf = malloc(end)) == NULL) {
		close(fd);
		return;
	}
	while (done < end) {
		ssize_t n = pread(fd, buf + done, end - done, (off_t)done);
		if (n <= 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		done += (size_t)n;
	}
	close(fd);
	if (done == end)
		jfmt_scan(buf, end, forget_one, st, &res);
	free(buf);
}

/* One compaction of the segments up to max_seq; fills the result fields of mt. */
static void
compact(struct journal *j, uint64_t max_seq, uint64_t active_seq, uint64_t active_end,
    uint64_t gen)
{
	struct jmaint *mt = &j->mt;
	struct jread *r = NULL;
	struct out o = { -1, { 0 }, 0, 0 };
	char *cause = NULL, name[32], tmp[40] = "";
	unsigned char hdr[JFMT_SEG_HEADER];
	struct jtask *const *tasks;
	struct jbuf next = { 0 };
	uint64_t t0 = clock_now_us(), total, records = 0, seq;
	size_t n;
	int rc = -1;
	bool dir_failed = false;

	if (jread_load(j->dirfd, j->dir, max_seq, &r, &cause) == -1)
		goto done;
	if (r->nsegs == 0) {
		cause_set(&cause, "journal %s: no segment to compact", j->dir);
		goto done;
	}
	if (active_seq > max_seq && active_end > JFMT_SEG_HEADER)
		forget_from_active(j, r->state, active_seq, active_end);
	seq = r->segs[r->nsegs - 1].seq;
	if (r->torn != SIZE_MAX) {
		cause_set(&cause, "journal %s: a sealed segment has a torn tail at offset %" PRIu64,
		    j->dir, r->segs[r->torn].scan.bad_offset);
		goto done;
	}
	if ((tasks = jstate_tasks(r->state, &n)) == NULL) {
		cause_set(&cause, "out of memory");
		goto done;
	}
	jrec_append(&next, JREC_NEXT_ID, jstate_next_id(r->state), NULL, 0);
	total = JFMT_SEG_HEADER + next.len + jstate_live_bytes(r->state);
	jseg_name(name, sizeof name, seq);
	snprintf(tmp, sizeof tmp, "%s.tmp", name);
	if ((o.fd = journal_create_tmp(j->dirfd, tmp)) == -1) {
		cause_set(&cause, "journal %s/%s: cannot create it: %s", j->dir, tmp, strerror(errno));
		goto done;
	}
	if ((errno = posix_fallocate(o.fd, 0, (off_t)total)) != 0) {
		cause_set(&cause, "journal %s/%s: cannot allocate %" PRIu64 " bytes: %s", j->dir, tmp,
		    total, strerror(errno));
		goto done;
	}
	jseg_header(hdr, seq, JFMT_SEG_SNAPSHOT, clock_wall_us());
	jseg_header_size(hdr, total);
	out_add(&o, hdr, sizeof hdr);
	out_add(&o, next.p, next.len);
	for (size_t i = 0; i < n && o.err == 0; i++) {
		const struct jtask *t = tasks[i];

		if (atomic_load(&mt->gen) != gen)
			break;
		if (t->flags & JT_FINISHED)
			add_loc(&o, r->state, &t->finished, &records);
		else {
			add_loc(&o, r->state, &t->accepted, &records);
			add_loc(&o, r->state, &t->started, &records);
			add_loc(&o, r->state, &t->cancel, &records);
		}
	}
	out_flush(&o);
	if (o.err != 0) {
		cause_set(&cause, "journal %s/%s: cannot write it: %s", j->dir, tmp, strerror(o.err));
		goto done;
	}
	if (fdatasync(o.fd) == -1) {
		cause_set(&cause, "journal %s/%s: fdatasync: %s", j->dir, tmp, strerror(errno));
		goto done;
	}
	close(o.fd);
	o.fd = -1;

	pthread_mutex_lock(&j->dirlock);
	if (atomic_load(&mt->gen) != gen) {
		pthread_mutex_unlock(&j->dirlock);
		cause_set(&cause, "compaction abandoned: the journal was recovered meanwhile");
		goto done;
	}
	/*
	 * Past this point a failure leaves the directory in a state nobody
	 * knows (a rename that may or may not be on disk): the loop fails the
	 * journal, whose recovery writes the whole live state afresh.
	 */
	if (renameat(j->dirfd, tmp, j->dirfd, name) == -1) {
		int e = errno;
		pthread_mutex_unlock(&j->dirlock);
		cause_set(&cause, "journal %s/%s: cannot rename its compaction into place: %s",
		    j->dir, name, strerror(e));
		dir_failed = true;
		goto done;
	}
	tmp[0] = '\0'; /* renamed: nothing to remove */
	if (fsync(j->dirfd) == -1) {
		int e = errno;
		pthread_mutex_unlock(&j->dirlock);
		cause_set(&cause, "journal %s: fsync of the directory after compacting into %s: %s",
		    j->dir, name, strerror(e));
		dir_failed = true;
		goto done;
	}
	for (size_t i = 0; i + 1 < r->nsegs; i++) {
		jseg_name(name, sizeof name, r->segs[i].seq);
		unlinkat(j->dirfd, name, 0);
	}
	for (size_t i = 0; i < r->nobsolete; i++) {
		jseg_name(name, sizeof name, r->obsolete[i]);
		unlinkat(j->dirfd, name, 0);
	}
	fsync(j->dirfd);
	pthread_mutex_unlock(&j->dirlock);
	rc = 0;
	pthread_mutex_lock(&mt->lock);
	mt->out_seq = seq;
	mt->out_bytes = total;
	mt->out_records = records + 1;
	mt->out_live = total - JFMT_SEG_HEADER;
	pthread_mutex_unlock(&mt->lock);
done:
	if (o.fd != -1)
		close(o.fd);
	if (rc == -1 && tmp[0] != '\0')
		unlinkat(j->dirfd, tmp, 0);
	jbuf_free(&o.buf);
	jbuf_free(&next);
	jread_free(r);
	pthread_mutex_lock(&mt->lock);
	mt->rc = rc;
	mt->dir_failed = dir_failed;
	free(mt->cause);
	mt->cause = cause;
	mt->duration_us = clock_now_us() - t0;
	mt->done_gen = gen;
	mt->done = true;
	mt->running = false;
	pthread_mutex_unlock(&mt->lock);
	journal_wake(j);
}

static void *
jmaint_main(void *arg)
{
	struct journal *j = arg;
	struct jmaint *mt = &j->mt;

	pthread_mutex_lock(&mt->lock);
	for (;;) {
		uint64_t max, gen, aseq, aend;

		while (!mt->quit && !mt->job)
			pthread_cond_wait(&mt->cv, &mt->lock);
		if (mt->quit)
			break;
		mt->job = false;
		mt->running = true;
		max = mt->job_max;
		aseq = mt->job_active_seq;
		aend = mt->job_active_end;
		gen = mt->job_gen;
		pthread_mutex_unlock(&mt->lock);
		compact(j, max, aseq, aend, gen);
		pthread_mutex_lock(&mt->lock);
	}
	pthread_mutex_unlock(&mt->lock);
	return NULL;
}

int
jmaint_start(struct journal *j, char **cause)
{
	int e;

	if ((e = thread_create_unsignalled(&j->mt.thread, NULL, jmaint_main, j)) != 0) {
		if (asprintf(cause, "journal %s: cannot start its maintenance thread: %s", j->dir,
		    strerror(e)) == -1)
			*cause = NULL;
		return -1;
	}
	j->mt.started = true;
	return 0;
}

void
jmaint_stop(struct journal *j)
{
	struct jmaint *mt = &j->mt;

	if (!mt->started)
		return;
	atomic_fetch_add(&mt->gen, 1); /* a compaction in flight gives up */
	pthread_mutex_lock(&mt->lock);
	mt->quit = true;
	pthread_cond_signal(&mt->cv);
	pthread_mutex_unlock(&mt->lock);
	pthread_join(mt->thread, NULL);
	mt->started = false;
}

void
jmaint_request(struct journal *j, uint64_t max_seq, uint64_t active_seq, uint64_t active_end)
{
	struct jmaint *mt = &j->mt;

	pthread_mutex_lock(&mt->lock);
	mt->job = true;
	mt->job_max = max_seq;
	mt->job_active_seq = active_seq;
	mt->job_active_end = active_end;
	mt->job_gen = atomic_load(&mt->gen);
	pthread_cond_signal(&mt->cv);
	pthread_mutex_unlock(&mt->lock);
}
