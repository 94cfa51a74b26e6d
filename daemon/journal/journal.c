/*
 * journal.c: the journal's loop side: the directory and its lock, the
 * segments, the batch, the write, what may be seen, failure and recovery,
 * the compaction trigger and the stats (the design is in journal.h, the
 * threads in journal-sync.c and journal-compact.c, who owns what in
 * journal-int.h).
 *
 * Who writes: in interval and none modes the loop, as a batch is one
 * pwrite into the page cache (microseconds) that must be there before it is
 * seen. In commit mode a batch is seen only after an fdatasync, so the loop
 * hands it to the sync thread, which writes what the passes gathered while
 * its last fdatasync ran with one pwrite and syncs it (journal-sync.c):
 * where each batch goes is still decided here. The loop never waits for
 * either: what waits is the events the daemon holds until their batch is
 * seen.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "journal-int.h"
#include "base/log.h"

#define MIN_SEGMENT (64u * 1024)
#define MAX_SEGMENT (64u * 1024 * 1024)
#define LOG_REPEAT_US (60ull * 1000000) /* a recovery failing the same way is logged again after this */

static void journal_fail(struct journal *j, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void maybe_compact(struct journal *j);
static void flush(struct journal *j, bool force);

void
journal_wake(struct journal *j)
{
	uint64_t one = 1;

	if (write(j->efd, &one, sizeof one) == -1 && errno != EAGAIN)
		return; /* the counter is full: a wake-up is pending anyway */
}

uint64_t
journal_segment_bytes(uint64_t max_bytes)
{
	uint64_t s = max_bytes / 16;

	if (s < MIN_SEGMENT)
		s = MIN_SEGMENT;
	if (s > MAX_SEGMENT)
		s = MAX_SEGMENT;
	return s & ~(uint64_t)4095;
}

const char *
journal_sync_name(enum journal_sync s)
{
	switch (s) {
	case JOURNAL_SYNC_COMMIT:
		return "commit";
	case JOURNAL_SYNC_INTERVAL:
		return "interval";
	case JOURNAL_SYNC_NONE:
		return "none";
	}
	return "?";
}

/* ---------------------------------------------------------------- the directory */

/* mkdir -p with mode 0700 for what is missing. */
static int
make_dirs(const char *dir, char **cause)
{
	char *p, *copy = strdup(dir), c;
	struct stat st;

	if (copy == NULL)
		return cause_set(cause, "out of memory");
	for (p = copy + 1; ; p++) {
		if (*p != '/' && *p != '\0')
			continue;
		c = *p;
		*p = '\0';
		if (mkdir(copy, 0700) == -1 && errno != EEXIST) {
			int e = errno;
			cause_set(cause, "state_dir %s: cannot create %s: %s", dir, copy, strerror(e));
			free(copy);
			return -1;
		}
		*p = c;
		if (c == '\0')
			break;
	}
	free(copy);
	if (stat(dir, &st) == -1)
		return cause_set(cause, "state_dir %s: %s", dir, strerror(errno));
	if (!S_ISDIR(st.st_mode))
		return cause_set(cause, "state_dir %s: not a directory", dir);
	return 0;
}

/*
 * The state directory must be tpd's own: owned by its user and writable by
 * nobody else. Otherwise another user could plant files in it (a segment
 * whose exec tasks would run as tpd's user, symlinks in place of the files
 * tpd writes): such a directory is refused, whatever it holds.
 */
static int
check_dir_owner(struct journal *j, char **cause)
{
	struct stat st;

	if (fstat(j->dirfd, &st) == -1)
		return cause_set(cause, "state_dir %s: %s", j->dir, strerror(errno));
	if (st.st_uid != geteuid())
		return cause_set(cause, "state_dir %s is owned by uid %u, not by tpd's user (uid %u): "
		    "refused, as another user could plant files in it; give a directory of tpd's "
		    "own (--state-dir), or --journal off", j->dir, (unsigned)st.st_uid,
		    (unsigned)geteuid());
	if (st.st_mode & (S_IWGRP | S_IWOTH))
		return cause_set(cause, "state_dir %s is writable by %s (mode %04o): refused, as "
		    "they could plant files in it; chmod go-w it, or give another (--state-dir)",
		    j->dir, (st.st_mode & S_IWOTH) ? "others" : "its group",
		    (unsigned)(st.st_mode & 07777));
	return 0;
}

/* flock on DIR/lock, which holds the holder's pid. */
static int
take_lock(struct journal *j, char **cause)
{
	char buf[32];
	ssize_t n;
	int fd;

	if ((fd = journal_open_file(j->dirfd, j->dir, "lock", O_RDWR | O_CREAT, cause)) == -1)
		return -1;
	for (int tries = 0; flock(fd, LOCK_EX | LOCK_NB) == -1; tries++) {
		int e = errno;
		if (e == EWOULDBLOCK) {
			struct timespec ts = { 0, 10 * 1000 * 1000 };
			long pid = 0;
			n = pread(fd, buf, sizeof buf - 1, 0);
			buf[n > 0 ? n : 0] = '\0';
			pid = strtol(buf, NULL, 10);
			/*
			 * The tpd that wrote its pid is gone (killed): what still holds
			 * the lock is a child it was starting, between its clone and its
			 * exec (which closes the lock). That takes moments: wait up to 5 s.
			 */
			if (pid > 0 && kill((pid_t)pid, 0) == -1 && errno == ESRCH && tries < 500) {
				nanosleep(&ts, NULL);
				continue;
			}
			close(fd);
			if (pid > 0)
				return cause_set(cause, "state_dir %s is in use by another tpd (pid %ld): "
				    "give another --state-dir, or --journal off", j->dir, pid);
			return cause_set(cause, "state_dir %s is in use by another tpd: give another "
			    "--state-dir, or --journal off", j->dir);
		}
		close(fd);
		return cause_set(cause, "state_dir %s: cannot lock it: %s", j->dir, strerror(e));
	}
	n = snprintf(buf, sizeof buf, "%ld\n", (long)getpid());
	if (ftruncate(fd, 0) == -1 || pwrite(fd, buf, (size_t)n, 0) != n) {
		int e = errno;
		close(fd);
		return cause_set(cause, "state_dir %s: cannot write its lock file: %s", j->dir,
		    strerror(e));
	}
	j->lockfd = fd;
	return 0;
}

static struct jseg *
active(struct journal *j)
{
	return j->nsegs > 0 ? &j->segs[j->nsegs - 1] : NULL;
}

static int
segs_push(struct journal *j, const struct jseg *s)
{
	if (j->nsegs == j->segcap) {
		size_t cap = j->segcap ? j->segcap * 2 : 16;
		struct jseg *p = realloc(j->segs, cap * sizeof *p);
		if (p == NULL)
			return -1;
		j->segs = p;
		j->segcap = cap;
	}
	j->segs[j->nsegs++] = *s;
	return 0;
}

/* The segment holding records of batch b, or NULL. */
static struct jseg *
seg_of_batch(struct journal *j, uint64_t b)
{
	size_t lo = 0, hi = j->nsegs;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (j->segs[mid].batch_hi < b)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo < j->nsegs && j->segs[lo].batch_lo <= b && b <= j->segs[lo].batch_hi)
		return &j->segs[lo];
	return NULL;
}

static struct journal *
journal_alloc(const struct journal_settings *s)
{
	struct journal *j = calloc(1, sizeof *j);
	pthread_condattr_t ca;

	if (j == NULL || (j->dir = strdup(s->dir)) == NULL) {
		free(j);
		return NULL;
	}
	j->dirfd = j->lockfd = j->efd = j->active_fd = -1;
	j->sync = s->sync;
	j->interval_us = s->sync_interval_us;
	j->max_bytes = s->max_bytes;
	j->seg_bytes = s->segment_bytes ? s->segment_bytes : journal_segment_bytes(s->max_bytes);
	j->on_seen = s->on_seen;
	j->on_durable = s->on_durable;
	j->snapshot = s->snapshot;
	j->arg = s->arg;
	j->batch = 1;
	pthread_mutex_init(&j->dirlock, NULL);
	pthread_mutex_init(&j->sy.lock, NULL);
	pthread_mutex_init(&j->mt.lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&j->sy.cv, &ca);
	pthread_condattr_destroy(&ca);
	pthread_cond_init(&j->mt.cv, NULL);
	j->sy.fd = -1;
	j->sy.interval_us = j->sync == JOURNAL_SYNC_INTERVAL ? j->interval_us : 0;
	return j;
}

static void
journal_free(struct journal *j)
{
	if (j == NULL)
		return;
	if (j->active_fd != -1)
		close(j->active_fd);
	if (j->efd != -1)
		close(j->efd);
	if (j->dirfd != -1)
		close(j->dirfd);
	if (j->lockfd != -1)
		close(j->lockfd); /* releases the flock */
	for (size_t i = 0; i < j->nleftovers; i++)
		free(j->leftovers[i]);
	free(j->leftovers);
	free(j->obsolete);
	free(j->segs);
	jbuf_free(&j->pending);
	jbuf_free(&j->sy.q);
	free(j->sy.sealed);
	free(j->mt.cause);
	free(j->error);
	free(j->why);
	free(j->last_logged);
	pthread_mutex_destroy(&j->dirlock);
	pthread_mutex_destroy(&j->sy.lock);
	pthread_mutex_destroy(&j->mt.lock);
	pthread_cond_destroy(&j->sy.cv);
	pthread_cond_destroy(&j->mt.cv);
	free(j->dir);
	free(j);
}

/* Adds to each replayed segment the bytes of its records the state still needs. */
static void
count_live(struct journal *j, struct jread *r, uint64_t *live)
{
	struct jtask *const *tasks;
	size_t n;

	tasks = jstate_tasks(r->state, &n);
	for (size_t i = 0; tasks != NULL && i < n; i++) {
		const struct jloc *locs[4] = { &tasks[i]->accepted, &tasks[i]->started,
		    &tasks[i]->cancel, &tasks[i]->finished };
		for (int k = 0; k < 4; k++)
			if (locs[k]->size != 0 && locs[k]->seg < r->nsegs)
				live[locs[k]->seg] += locs[k]->size;
	}
}

int
journal_open(const struct journal_settings *s, struct journal **out, struct jread **replay,
    char **cause)
{
	struct journal *j = journal_alloc(s);
	struct jread *r = NULL;
	uint64_t *live = NULL;
	char name[32];

	*out = NULL;
	*replay = NULL;
	if (j == NULL)
		return cause_set(cause, "out of memory");
	if (make_dirs(j->dir, cause) == -1)
		goto fail;
	if ((j->dirfd = open(j->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) == -1) {
		cause_set(cause, "state_dir %s: %s", j->dir, strerror(errno));
		goto fail;
	}
	if (check_dir_owner(j, cause) == -1)
		goto fail;
	if ((j->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) == -1) {
		cause_set(cause, "eventfd: %s", strerror(errno));
		goto fail;
	}
	if (take_lock(j, cause) == -1)
		goto fail;
	if (jread_load(j->dirfd, j->dir, 0, &r, cause) == -1)
		goto fail;
	if (r->nsegs > 0 && (live = calloc(r->nsegs, sizeof *live)) == NULL) {
		cause_set(cause, "out of memory");
		goto fail;
	}
	count_live(j, r, live);
	for (size_t i = 0; i < r->nsegs; i++) {
		const struct jread_seg *rs = &r->segs[i];
		struct jseg seg = { 0 };
		uint64_t data;

		seg.seq = rs->seq;
		seg.data_end = rs->scan.data_end;
		seg.alloc = rs->blocks_bytes > rs->len ? rs->blocks_bytes : rs->len;
		seg.records = rs->scan.records;
		seg.batch_lo = seg.batch_hi = i + 1;
		seg.synced_to = seg.data_end; /* journal_begin syncs the one it appends to */
		seg.last_mark = rs->scan.last_mark;
		data = seg.data_end - JFMT_SEG_HEADER;
		seg.dead = data > live[i] ? data - live[i] : 0;
		if (segs_push(j, &seg) == -1) {
			cause_set(cause, "out of memory");
			goto fail;
		}
	}
	j->batch = r->nsegs + 1;
	j->written = j->seen = j->batch - 1;
	j->sy.written = j->sy.synced = j->sy.want = j->written;
	if (r->torn != SIZE_MAX) {
		const struct jread_seg *t = &r->segs[r->torn];
		j->torn_seq = t->seq;
		j->torn_off = t->scan.bad_offset;
		j->torn_end = t->scan.torn_end;
		jseg_name(name, sizeof name, t->seq);
		if (t->scan.torn_records > 0)
			log_warnx("journal %s/%s: torn tail at offset %" PRIu64 " dropped: %" PRIu64
			    " bytes (%s), with %" PRIu64 " records after a gap that were never "
			    "known to be on disk", j->dir, name, j->torn_off, j->torn_end - j->torn_off,
			    t->scan.why, t->scan.torn_records);
		else
			log_warnx("journal %s/%s: torn tail at offset %" PRIu64 " dropped: %" PRIu64
			    " bytes (%s)", j->dir, name, j->torn_off, j->torn_end - j->torn_off,
			    t->scan.why);
	}
	if (r->nobsolete > 0 && (j->obsolete = malloc(r->nobsolete * sizeof *j->obsolete)) != NULL) {
		memcpy(j->obsolete, r->obsolete, r->nobsolete * sizeof *j->obsolete);
		j->nobsolete = r->nobsolete;
	}
	j->leftovers = r->leftovers;
	j->nleftovers = r->nleftovers;
	r->leftovers = NULL;
	r->nleftovers = 0;
	j->max_task_id = jstate_max_id(r->state);
	j->next_at_load = jstate_next_id(r->state);
	log_info("journal %s: %zu segments, %" PRIu64 " records replayed, next task id %" PRIu64,
	    j->dir, r->nsegs, r->records, j->next_at_load);
	free(live);
	*out = j;
	*replay = r;
	return 0;
fail:
	free(live);
	jread_free(r);
	journal_free(j);
	return -1;
}

struct journal_ref
journal_replay_ref(const struct journal *j, const struct jread *r, const struct jloc *loc)
{
	struct journal_ref ref = { 0, 0 };

	if (loc->size != 0 && loc->seg < r->nsegs) {
		ref.batch = (uint64_t)loc->seg + 1;
		ref.size = loc->size;
	}
	return ref;
}

void
journal_replay_done(struct journal *j, struct jread *r)
{
	jread_free(r);
}

int
journal_write_all(int fd, const void *buf, size_t len, uint64_t off)
{
	size_t done = 0;

	while (done < len) {
		ssize_t n = pwrite(fd, (const char *)buf + done, len - done, (off_t)(off + done));
		if (n == -1 && errno == EINTR)
			continue;
		if (n == -1)
			return -1;
		if (n == 0) {
			errno = ENOSPC;
			return -1;
		}
		done += (size_t)n;
	}
	return 0;
}

/*
 * Creates name.tmp in the state directory for writing: O_EXCL and
 * O_NOFOLLOW, so that whatever lies there (a leftover of a crash, or a
 * symlink someone planted) is removed, never followed or reused. Returns
 * the fd or -1 with errno.
 */
int
journal_create_tmp(int dirfd, const char *tmp)
{
	int fd;

	fd = openat(dirfd, tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd == -1 && errno == EEXIST && unlinkat(dirfd, tmp, 0) == 0)
		fd = openat(dirfd, tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	return fd;
}

/*
 * Makes room for a segment of want bytes from the start of fd: all of it
 * when the file system has it; otherwise, when the disk has too little
 * free space for a whole segment, nothing (logged once): the records are
 * written as they come, and a full disk shows at a write. Returns the
 * bytes made, or -1 with errno for any other failure.
 */
static int64_t
preallocate(struct journal *j, int fd, const char *name, uint64_t want, uint64_t need)
{
	int e = posix_fallocate(fd, 0, (off_t)want);

	if (e == 0)
		return (int64_t)want;
	if (e == ENOSPC || e == EOPNOTSUPP || e == EINVAL) {
		if (!j->prealloc_logged) {
			log_warnx("journal %s/%s: cannot preallocate a segment of %" PRIu64 " bytes "
			    "(%s): writing segments without preallocation (see journal_segment_size)",
			    j->dir, name, want, strerror(e));
			j->prealloc_logged = true;
		}
		return (int64_t)need;
	}
	errno = e;
	return -1;
}

/*
 * Creates segment seq holding data (a snapshot's records; NULL: a first
 * MARK) with flags: a temporary file, its header (JFMT_SEG_SIZED) and data,
 * preallocated to at least seg_bytes when the disk has the room,
 * fdatasynced, renamed into place, the directory fsynced. Returns the fd
 * (read-write) with *end (where its data ends) and *made (its size), or -1
 * with *cause set.
 */
static int
segment_create(struct journal *j, uint64_t seq, uint32_t flags, const struct jbuf *data,
    uint64_t *end, uint64_t *made, char **cause)
{
	char name[32], tmp[40];
	unsigned char hdr[JFMT_SEG_HEADER];
	struct jbuf first = { 0 };
	uint64_t size;
	int64_t got;
	int fd;

	if (data == NULL) {
		/* a record synced with the header: a file without it lost records (journal-format.h) */
		jrec_append(&first, JREC_MARK, JFMT_SEG_HEADER + JFMT_REC_HEADER, NULL, 0);
		if (first.failed)
			return cause_set(cause, "out of memory");
		data = &first;
	}
	size = JFMT_SEG_HEADER + data->len;
	jseg_name(name, sizeof name, seq);
	snprintf(tmp, sizeof tmp, "%s.tmp", name);
	if ((fd = journal_create_tmp(j->dirfd, tmp)) == -1) {
		cause_set(cause, "journal %s/%s: cannot create it: %s", j->dir, tmp, strerror(errno));
		jbuf_free(&first);
		return -1;
	}
	if ((got = preallocate(j, fd, tmp, size > j->seg_bytes ? size : j->seg_bytes, size)) == -1) {
		cause_set(cause, "journal %s/%s: cannot allocate %" PRIu64 " bytes: %s", j->dir, tmp,
		    size > j->seg_bytes ? size : j->seg_bytes, strerror(errno));
		goto fail;
	}
	jseg_header(hdr, seq, flags, clock_wall_us());
	jseg_header_size(hdr, (uint64_t)got);
	if (journal_write_all(fd, hdr, sizeof hdr, 0) == -1 ||
	    journal_write_all(fd, data->p, data->len, JFMT_SEG_HEADER) == -1) {
		cause_set(cause, "journal %s/%s: write: %s", j->dir, tmp, strerror(errno));
		goto fail;
	}
	if (fdatasync(fd) == -1) {
		cause_set(cause, "journal %s/%s: fdatasync: %s", j->dir, tmp, strerror(errno));
		goto fail;
	}
	if (renameat(j->dirfd, tmp, j->dirfd, name) == -1) {
		cause_set(cause, "journal %s/%s: rename: %s", j->dir, name, strerror(errno));
		goto fail;
	}
	if (fsync(j->dirfd) == -1) {
		cause_set(cause, "journal %s: fsync of the directory: %s", j->dir, strerror(errno));
		close(fd);
		unlinkat(j->dirfd, name, 0);
		jbuf_free(&first);
		return -1;
	}
	*end = size;
	*made = (uint64_t)got;
	jbuf_free(&first);
	return fd;
fail:
	close(fd);
	unlinkat(j->dirfd, tmp, 0);
	jbuf_free(&first);
	return -1;
}

/* The journal cannot be written: says so once, refuses submits; nothing more is seen until recover(). */
static void
journal_fail(struct journal *j, const char *fmt, ...)
{
	va_list ap;
	char *msg = NULL;

	if (j->failed)
		return;
	va_start(ap, fmt);
	if (vasprintf(&msg, fmt, ap) == -1)
		msg = NULL;
	va_end(ap);
	j->failed = true;
	free(j->error);
	j->error = msg;
	/* fsyncgate: no file of this journal is synced again; recovery writes a new one */
	pthread_mutex_lock(&j->sy.lock);
	j->sy.fd = -1;
	for (size_t i = 0; i < j->sy.nsealed; i++)
		j->sy.sealed[i].sync = false;
	pthread_mutex_unlock(&j->sy.lock);
	log_warnx("journal %s: %s: new submits are refused (storage) until it can be written "
	    "again", j->dir, msg ? msg : "out of memory");
	j->switch_wait = false;
	j->switch_defer = false;
	/*
	 * Nothing counts as seen that was not on disk when this happened: what
	 * waits for a batch written since the last sync (or never written) waits
	 * for the recovery, whose snapshot holds it.
	 */
	j->nhold = 0;
}

int
journal_begin(struct journal *j, char **cause)
{
	char name[32];
	struct jseg *a;
	bool removed = false;

	for (size_t i = 0; i < j->nleftovers; i++)
		if (unlinkat(j->dirfd, j->leftovers[i], 0) == 0)
			removed = true;
	for (size_t i = 0; i < j->nobsolete; i++) {
		jseg_name(name, sizeof name, j->obsolete[i]);
		if (unlinkat(j->dirfd, name, 0) == 0)
			removed = true;
	}
	if (removed)
		fsync(j->dirfd);
	if (j->torn_seq != 0) {
		/* zeros over the torn bytes: the next start finds a clean end there */
		static const unsigned char zeros[65536];
		uint64_t off = j->torn_off;
		int fd;

		jseg_name(name, sizeof name, j->torn_seq);
		if ((fd = journal_open_file(j->dirfd, j->dir, name, O_WRONLY, cause)) == -1)
			return -1;
		while (off < j->torn_end) {
			size_t n = j->torn_end - off < sizeof zeros ? j->torn_end - off : sizeof zeros;
			if (journal_write_all(fd, zeros, n, off) == -1)
				break;
			off += n;
		}
		if (off < j->torn_end || fdatasync(fd) == -1) {
			int e = errno;
			close(fd);
			return cause_set(cause, "journal %s/%s: cannot drop its torn tail: %s", j->dir,
			    name, strerror(e));
		}
		close(fd);
		j->torn_seq = 0;
	}
	/*
	 * Appends go to the newest segment while it has room, else to a new
	 * one. Either way it is synced first: what a crash left in the page
	 * cache is on disk before anything is written after it (MARKs say so).
	 */
	a = active(j);
	if (a != NULL) {
		struct stat st;
		char *why = NULL;
		int fd;

		jseg_name(name, sizeof name, a->seq);
		if ((fd = journal_open_file(j->dirfd, j->dir, name, O_RDWR, &why)) == -1) {
			journal_fail(j, "%s", why ? why : "out of memory");
			free(why);
		} else if (fdatasync(fd) == -1) {
			journal_fail(j, "fdatasync of %s/%s: %s", j->dir, name, strerror(errno));
			close(fd);
		} else if (a->data_end >= j->seg_bytes - j->seg_bytes / 4)
			close(fd);
		else if (fstat(fd, &st) == 0 && (uint64_t)st.st_size < j->seg_bytes &&
		    preallocate(j, fd, name, j->seg_bytes, (uint64_t)st.st_size) == -1) {
			journal_fail(j, "cannot allocate %s/%s: %s", j->dir, name, strerror(errno));
			close(fd);
		} else {
			if (fstat(fd, &st) == 0 && (uint64_t)st.st_blocks * 512 > a->alloc)
				a->alloc = (uint64_t)st.st_blocks * 512;
			a->synced_to = a->data_end;
			j->active_fd = fd;
		}
	}
	if (!j->failed && j->active_fd == -1) {
		uint64_t seq = a != NULL ? a->seq + 1 : 1, end = 0, made = 0;
		struct jseg seg = { 0 };
		char *why = NULL;

		if ((j->active_fd = segment_create(j, seq, a == NULL ? JFMT_SEG_SNAPSHOT : 0, NULL,
		    &end, &made, &why)) == -1) {
			journal_fail(j, "%s", why ? why : "out of memory");
			free(why);
		} else {
			seg.seq = seq;
			seg.data_end = seg.synced_to = seg.last_mark = end;
			seg.records = 1;
			seg.dead = end - JFMT_SEG_HEADER;
			seg.alloc = made;
			seg.batch_lo = j->batch;
			seg.batch_hi = j->batch - 1;
			if (segs_push(j, &seg) == -1) {
				close(j->active_fd);
				j->active_fd = -1;
				return cause_set(cause, "out of memory");
			}
		}
	}
	if (j->active_fd != -1) {
		j->sy.fd = j->active_fd;
		j->sy.fd_seq = active(j)->seq;
	}
	j->begun = true;
	/* The first reservation of ids, synced before any id is given (interval, none). */
	j->reserved = j->next_at_load > j->max_task_id ? j->next_at_load : j->max_task_id + 1;
	if (j->sync != JOURNAL_SYNC_COMMIT && !j->failed) {
		uint64_t v = j->reserved + JOURNAL_ID_BLOCK;
		journal_append(j, JREC_NEXT_ID, v, NULL, 0);
		j->pending_sync = true;
		j->reserve_value = v;
		j->reserve_batch = j->batch;
	}
	/* The replay's decisions and the reservation: on disk before the listeners open. */
	if (j->pending.len > 0 && !j->failed) {
		uint64_t b = j->batch;
		flush(j, true);
		if (!j->failed && j->written >= b) {
			if (fdatasync(j->active_fd) == -1)
				journal_fail(j, "fdatasync of %s: %s", j->dir, strerror(errno));
			else {
				j->sy.synced = j->sy.want = j->written;
				j->nhold = 0;
				if (j->reserve_value != 0) {
					j->reserved = j->reserve_value;
					j->reserve_value = 0;
				}
				a = active(j);
				a->synced_to = a->data_end;
				j->seen = j->written;
				if (j->on_seen != NULL)
					j->on_seen(j->arg, j->seen);
			}
		}
	}
	if (jsync_start(j, cause) == -1)
		return -1;
	if (jmaint_start(j, cause) == -1)
		return -1;
	return 0;
}

uint64_t
journal_batch(const struct journal *j)
{
	return j->batch;
}

uint64_t
journal_seen(const struct journal *j)
{
	return j->seen;
}

int
journal_event_fd(const struct journal *j)
{
	return j->efd;
}

struct journal_ref
journal_append(struct journal *j, enum jrec_type type, uint64_t id, const void *payload,
    size_t len)
{
	struct journal_ref ref = { j->batch, 0 };
	size_t size = jrec_append(&j->pending, type, id, payload, len);

	if (size == 0) {
		/* out of memory (or a record past JFMT_MAX_PAYLOAD): nothing of this batch is kept */
		journal_fail(j, "cannot build a %s record: %s", jrec_type_name(type),
		    len > JFMT_MAX_PAYLOAD ? "too large" : "out of memory");
		jbuf_reset(&j->pending);
		j->pending_records = 0;
		return ref;
	}
	ref.size = (uint32_t)size;
	j->pending_records++;
	if (type == JREC_ACCEPTED && id > j->max_task_id) {
		j->max_task_id = id;
		if (j->sync != JOURNAL_SYNC_COMMIT && j->begun) {
			uint64_t cover = j->reserve_value != 0 ? j->reserve_value : j->reserved;

			/* past the synced reservation: this batch waits for one to be synced */
			if (id >= j->reserved)
				j->pending_sync = true;
			if (id + JOURNAL_ID_BLOCK / 2 >= cover) {
				uint64_t v = (id > cover ? id : cover) + JOURNAL_ID_BLOCK;
				jrec_append(&j->pending, JREC_NEXT_ID, v, NULL, 0);
				j->pending_records++;
				j->pending_dead += JFMT_REC_HEADER;
				j->pending_sync = true;
				j->reserve_value = v;
				j->reserve_batch = j->batch;
			}
		}
	}
	if (type == JREC_NEXT_ID || type == JREC_MARK)
		j->pending_dead += size;
	return ref;
}

bool
journal_reserve_id(struct journal *j, uint64_t id)
{
	uint64_t cover, v;

	if (!j->begun || j->failed)
		return false;
	cover = j->reserve_value != 0 ? j->reserve_value : j->reserved;
	if (id + JOURNAL_ID_BLOCK / 2 < cover)
		return false;
	v = (id >= cover ? id + 1 : cover) + JOURNAL_ID_BLOCK;
	if (jrec_append(&j->pending, JREC_NEXT_ID, v, NULL, 0) == 0) {
		journal_fail(j, "cannot build a %s record: out of memory",
		    jrec_type_name(JREC_NEXT_ID));
		return false;
	}
	j->pending_records++;
	j->pending_dead += JFMT_REC_HEADER;
	j->pending_sync = true;
	j->reserve_value = v;
	j->reserve_batch = j->batch;
	return true;
}

void
journal_release(struct journal *j, struct journal_ref ref)
{
	struct jseg *s;

	if (ref.size == 0)
		return;
	if (ref.batch == j->batch) {
		j->pending_dead += ref.size;
		return;
	}
	if ((s = seg_of_batch(j, ref.batch)) == NULL)
		return;
	s->dead += ref.size;
	if (s->dead > s->data_end - JFMT_SEG_HEADER)
		s->dead = s->data_end - JFMT_SEG_HEADER;
	if (j->compacting && s->seq <= j->compact_max)
		j->compact_dead += ref.size;
}

/* The batch is seen, or held for a sync (interval, none modes; commit waits for every sync). */
static void
batch_written(struct journal *j, uint64_t b, bool needs_sync)
{
	if (j->sync == JOURNAL_SYNC_COMMIT)
		return;
	if (needs_sync) {
		if (j->nhold < JOURNAL_RING)
			j->hold[j->nhold++] = b;
		else
			j->hold[j->nhold - 1] = b; /* its sync covers the one it replaces */
		return;
	}
	if (j->nhold > 0)
		return; /* behind a batch that waits: seen with it */
	j->seen = b;
	if (j->on_seen != NULL)
		j->on_seen(j->arg, b);
}

/* Opens the next segment and seals the active one. Returns 0, or -1 (the journal failed). */
static int
segment_switch(struct journal *j)
{
	struct jseg *a = active(j), seg = { 0 };
	uint64_t end = 0, made = 0;
	char *why = NULL;
	int fd;

	seg.seq = a->seq + 1;
	if ((fd = segment_create(j, seg.seq, 0, NULL, &end, &made, &why)) == -1) {
		journal_fail(j, "%s", why ? why : "out of memory");
		free(why);
		return -1;
	}
	seg.data_end = seg.synced_to = seg.last_mark = end;
	seg.records = 1;
	seg.dead = end - JFMT_SEG_HEADER;
	seg.alloc = made;
	seg.batch_lo = j->batch;
	seg.batch_hi = j->batch - 1;
	if (segs_push(j, &seg) == -1) {
		close(fd);
		journal_fail(j, "out of memory");
		return -1;
	}
	jsync_switch(j, j->active_fd, a->seq, j->sync != JOURNAL_SYNC_NONE, fd, seg.seq);
	j->active_fd = fd;
	maybe_compact(j);
	return 0;
}

/*
 * Writes the pending batch: with journal_sync = commit, hands it to the
 * sync thread, which writes it (with the batches of the passes made while
 * its fdatasync ran) and syncs it; unless forced (the thread does not run:
 * journal_begin, journal_close), when the loop writes it itself.
 */
static void
flush(struct journal *j, bool force)
{
	struct jseg *a;
	uint64_t b, mark = 0;
	size_t len;
	bool needs_sync, handed;
	char name[32];

	if (j->pending.len == 0 || !j->begun)
		return; /* before journal_begin, records wait for it */
	if (j->failed || j->active_fd == -1) {
		/* nothing is written: the recovery's snapshot will hold what these records say */
		jbuf_reset(&j->pending);
		j->pending_records = j->pending_dead = 0;
		j->pending_sync = false;
		j->batch++;     /* not seen: what waits for it waits for the recovery */
		return;
	}
	if (j->switch_wait)
		return;
	handed = j->sync == JOURNAL_SYNC_COMMIT && j->sy.started && !force;
	a = active(j);
	if (a->data_end > JFMT_SEG_HEADER + JFMT_REC_HEADER && /* more than its opening MARK */
	    a->data_end + j->pending.len + JFMT_REC_HEADER > j->seg_bytes) {
		/*
		 * What the sync thread was handed is for the active segment: the
		 * switch waits until all of it is synced (journal_process).
		 */
		if (handed && j->written > j->seen) {
			j->switch_defer = true;
			return;
		}
		if (segment_switch(j) == -1) {
			journal_flush(j); /* failed: the batch is dropped, the snapshot will hold it */
			return;
		}
		a = active(j);
		if (j->sync != JOURNAL_SYNC_NONE) {
			/* written once the old segment's last batch is on disk (journal_process) */
			j->switch_wait = true;
			j->switch_batch = j->written;
			return;
		}
	}
	/* How far this segment is on disk: a MARK for the reader (journal-format.h). */
	if (j->sync == JOURNAL_SYNC_NONE)
		mark = a->data_end;
	else
		mark = a->synced_to;
	if (mark > a->last_mark && mark > JFMT_SEG_HEADER) {
		jrec_append(&j->pending, JREC_MARK, mark, NULL, 0);
		j->pending_records++;
		j->pending_dead += JFMT_REC_HEADER;
		a->last_mark = mark;
	}
	if (j->pending.failed) {
		journal_fail(j, "out of memory");
		journal_flush(j);
		return;
	}
	len = j->pending.len;
	if (handed) {
		/* the sync thread writes it, with what the passes before handed over */
		if (jsync_queue(j, &j->pending, a->data_end, j->batch) == -1) {
			journal_fail(j, "out of memory");
			journal_flush(j);
			return;
		}
	} else if (journal_write_all(j->active_fd, j->pending.p, len, a->data_end) == -1) {
		jseg_name(name, sizeof name, a->seq);
		journal_fail(j, "write to %s/%s: %s", j->dir, name, strerror(errno));
		journal_flush(j);
		return;
	}
	b = j->batch++;
	needs_sync = j->pending_sync;
	a->data_end += len;
	if (a->data_end > a->alloc)
		a->alloc = a->data_end;
	a->records += j->pending_records;
	a->dead += j->pending_dead;
	a->batch_hi = b;
	j->written = b;
	j->batches++;
	j->ring[j->ring_next].batch = b;
	j->ring[j->ring_next].seq = a->seq;
	j->ring[j->ring_next].end = a->data_end;
	j->ring_next = (j->ring_next + 1) % JOURNAL_RING;
	jbuf_reset(&j->pending);
	j->pending_records = j->pending_dead = 0;
	j->pending_sync = false;

	if (!handed) {
		pthread_mutex_lock(&j->sy.lock);
		j->sy.written = b;
		if (j->sync == JOURNAL_SYNC_COMMIT || needs_sync) {
			j->sy.want = b;
			pthread_cond_signal(&j->sy.cv);
		}
		if (j->sy.dirty_since_us == 0) {
			j->sy.dirty_since_us = clock_now_us();
			/* interval: the thread's timer starts from this write (it is armed until its pass) */
			if (j->sync == JOURNAL_SYNC_INTERVAL)
				pthread_cond_signal(&j->sy.cv);
		}
		pthread_mutex_unlock(&j->sy.lock);
	}
	batch_written(j, b, needs_sync);
}

void
journal_flush(struct journal *j)
{
	flush(j, false);
}

/*
 * Every batch up to synced is on disk: MARK positions, reservations, held
 * batches, seen (the caller calls on_seen).
 */
static void
synced_to(struct journal *j, uint64_t synced)
{
	struct jseg *a = active(j);

	for (size_t i = 0; i < JOURNAL_RING; i++)
		if (j->ring[i].batch != 0 && j->ring[i].batch <= synced && a != NULL &&
		    j->ring[i].seq == a->seq && j->ring[i].end > a->synced_to)
			a->synced_to = j->ring[i].end;
	if (j->reserve_value != 0 && synced >= j->reserve_batch) {
		j->reserved = j->reserve_value;
		j->reserve_value = 0;
	}
	if (j->sync == JOURNAL_SYNC_COMMIT) {
		if (synced > j->seen)
			j->seen = synced;
	} else {
		size_t k = 0;
		while (k < j->nhold && j->hold[k] <= synced)
			k++;
		memmove(j->hold, j->hold + k, (j->nhold - k) * sizeof *j->hold);
		j->nhold -= k;
		j->seen = j->nhold > 0 ? j->hold[0] - 1 : j->written;
	}
}

static void compaction_done(struct journal *j);

/* The sync thread's write (of what the loop handed over) or fdatasync failed: the journal fails. */
static void
sync_failed(struct journal *j, int err, bool write, uint64_t seq)
{
	char name[32];

	jseg_name(name, sizeof name, seq);
	if (write) {
		journal_fail(j, "write to %s/%s: %s", j->dir, name, strerror(err));
		return;
	}
	log_warnx("journal %s/%s: fdatasync failed: %s: the file is not trusted any "
	    "more (it is never synced again)", j->dir, name, strerror(err));
	journal_fail(j, "fdatasync of %s/%s: %s", j->dir, name, strerror(err));
}

void
journal_process(struct journal *j)
{
	uint64_t n, synced;
	int err;
	uint64_t err_seq;
	bool done, err_write;

	if (read(j->efd, &n, sizeof n) == -1 && errno != EAGAIN)
		return;
	pthread_mutex_lock(&j->sy.lock);
	synced = j->sy.synced;
	err = j->sy.err;
	err_write = j->sy.err_write;
	err_seq = j->sy.err_seq;
	pthread_mutex_unlock(&j->sy.lock);
	if (err != 0 && !j->failed)
		sync_failed(j, err, err_write, err_seq);
	if (!j->failed) {
		uint64_t before = j->seen;

		synced_to(j, synced);
		/*
		 * What waited for this sync is written first, so that the next
		 * fdatasync starts before the loop sends what this one lets out.
		 */
		if (j->switch_wait && synced >= j->switch_batch) {
			j->switch_wait = false;
			flush(j, false);
		} else if (j->switch_defer && j->written <= j->seen) {
			j->switch_defer = false;
			flush(j, false);
		}
		if (j->seen > before && j->on_seen != NULL)
			j->on_seen(j->arg, j->seen);
	}
	pthread_mutex_lock(&j->mt.lock);
	done = j->mt.done;
	pthread_mutex_unlock(&j->mt.lock);
	if (done)
		compaction_done(j);
}

/* ---------------------------------------------------------------- limits, compaction */

static uint64_t
bytes_on_disk(const struct journal *j)
{
	uint64_t sum = 0;

	for (size_t i = 0; i < j->nsegs; i++)
		sum += j->segs[i].alloc;
	return sum;
}

static bool
at_limit(const struct journal *j)
{
	const struct jseg *a = j->nsegs > 0 ? &j->segs[j->nsegs - 1] : NULL;
	uint64_t room = a != NULL && a->data_end < j->seg_bytes ? j->seg_bytes - a->data_end : 0;

	return room < j->seg_bytes / 4 && bytes_on_disk(j) + j->seg_bytes > j->max_bytes;
}

bool
journal_at_limit(const struct journal *j)
{
	return !j->failed && at_limit(j);
}

uint64_t
journal_segment_size(const struct journal *j)
{
	return j->seg_bytes;
}

void
journal_compact_soon(struct journal *j)
{
	maybe_compact(j);
}

bool
journal_writable(struct journal *j, const char **why)
{
	free(j->why);
	j->why = NULL;
	if (j->failed) {
		if (asprintf(&j->why, "the journal in %s cannot be written: %s", j->dir,
		    j->error ? j->error : "out of memory") == -1)
			j->why = NULL;
	} else if (at_limit(j)) {
		if (asprintf(&j->why, "the journal in %s is at journal_max_bytes (%" PRIu64
		    " bytes on disk, the limit %" PRIu64 "): its live records need the room; "
		    "raise journal_max_bytes, or keep fewer results (result_retain, "
		    "result_retain_bytes)", j->dir, bytes_on_disk(j), j->max_bytes) == -1)
			j->why = NULL;
	} else
		return true;
	if (why != NULL)
		*why = j->why != NULL ? j->why : "the journal cannot be written";
	return false;
}

/*
 * Asks for a compaction of every sealed segment when their dead bytes are
 * more than twice their live ones (and half a segment at least), or when
 * the journal nears max_bytes and a quarter of a segment can be won back.
 */
static void
maybe_compact(struct journal *j)
{
	uint64_t data = 0, dead = 0;
	bool near_limit = bytes_on_disk(j) + 2 * j->seg_bytes > j->max_bytes;

	if (j->compacting || j->failed || !j->mt.started || j->nsegs < 2)
		return;
	for (size_t i = 0; i + 1 < j->nsegs; i++) {
		data += j->segs[i].data_end - JFMT_SEG_HEADER;
		dead += j->segs[i].dead;
	}
	if (!(near_limit && dead >= j->seg_bytes / 4) &&
	    !(dead >= j->seg_bytes / 2 && dead > 2 * (data - dead)))
		return;
	j->compacting = true;
	j->compact_max = j->segs[j->nsegs - 2].seq;
	j->compact_dead = 0;
	log_debug("journal %s: compacting segments up to %" PRIu64 " (%" PRIu64 " of %" PRIu64
	    " bytes dead)", j->dir, j->compact_max, dead, data);
	jmaint_request(j, j->compact_max, j->segs[j->nsegs - 1].seq,
	    j->segs[j->nsegs - 1].data_end);
}

static void
compaction_done(struct journal *j)
{
	struct jmaint *mt = &j->mt;
	int rc;
	char *cause;
	uint64_t out_seq, out_bytes, out_records, duration, gen;
	size_t keep = 0;
	uint64_t lo = 0;
	bool dir_failed;

	pthread_mutex_lock(&mt->lock);
	mt->done = false;
	rc = mt->rc;
	dir_failed = mt->dir_failed;
	cause = mt->cause;
	mt->cause = NULL;
	out_seq = mt->out_seq;
	out_bytes = mt->out_bytes;
	out_records = mt->out_records;
	duration = mt->duration_us;
	gen = mt->done_gen;
	pthread_mutex_unlock(&mt->lock);
	j->compacting = false;
	if (gen != atomic_load(&mt->gen)) {
		free(cause); /* a recovery made it obsolete */
		return;
	}
	if (rc == -1 && dir_failed) {
		journal_fail(j, "%s", cause ? cause : "compaction failed");
		free(cause);
		return;
	}
	if (rc == -1) {
		log_warnx("journal %s: compaction failed: %s", j->dir, cause ? cause : "out of memory");
		free(cause);
		return;
	}
	j->compactions++;
	j->last_compaction_us = duration;
	/* Segments up to out_seq are now the one file out_seq. */
	for (size_t i = 0; i < j->nsegs; i++) {
		struct jseg *s = &j->segs[i];
		if (s->seq < out_seq) {
			if (lo == 0)
				lo = s->batch_lo;
			continue;
		}
		if (s->seq == out_seq) {
			if (lo != 0)
				s->batch_lo = lo;
			s->data_end = s->synced_to = s->last_mark = out_bytes;
			s->alloc = out_bytes;
			s->records = out_records;
			s->dead = j->compact_dead < out_bytes - JFMT_SEG_HEADER ? j->compact_dead :
			    out_bytes - JFMT_SEG_HEADER;
		}
		j->segs[keep++] = *s;
	}
	j->nsegs = keep;
	log_info("journal %s: compacted into segment %" PRIu64 ": %" PRIu64 " bytes, %" PRIu64
	    " records, in %.1f ms", j->dir, out_seq, out_bytes, out_records, duration / 1000.0);
	maybe_compact(j);
}

bool
journal_compacting(const struct journal *j)
{
	return j->compacting;
}

/* ---------------------------------------------------------------- recovery */

struct journal_ref
journal_snap_add(struct journal_snap *s, enum jrec_type type, uint64_t id, const void *payload,
    size_t len)
{
	struct journal_ref ref = { s->batch, 0 };
	size_t size = jrec_append(&s->buf, type, id, payload, len);

	if (size != 0) {
		ref.size = (uint32_t)size;
		s->records++;
	}
	return ref;
}

/* Writes a snapshot of the daemon's state into a fresh segment; the journal works again. */
static void
recover(struct journal *j)
{
	struct journal_snap snap = { j, { 0 }, 0, 0 };
	struct jseg seg = { 0 };
	uint64_t seq = 1, now = clock_now_us(), next, end = 0, made = 0;
	char *why = NULL, name[32];
	int fd;

	if (j->snapshot == NULL)
		return;
	if (j->segcap == 0) {
		if ((j->segs = malloc(16 * sizeof *j->segs)) == NULL)
			return;
		j->segcap = 16;
	}
	for (size_t i = 0; i < j->nsegs; i++)
		if (j->segs[i].seq >= seq)
			seq = j->segs[i].seq + 1;
	/* What is pending is in the daemon's state: the snapshot has it. */
	jbuf_reset(&j->pending);
	j->pending_records = j->pending_dead = 0;
	j->pending_sync = false;
	j->batch++;
	snap.batch = j->batch;
	next = j->max_task_id + 1 > j->reserved ? j->max_task_id + 1 : j->reserved;
	if (j->reserve_value > next)
		next = j->reserve_value;        /* a reservation not yet synced is kept too */
	if (j->sync != JOURNAL_SYNC_COMMIT)
		next += JOURNAL_ID_BLOCK;
	jrec_append(&snap.buf, JREC_NEXT_ID, next, NULL, 0);
	j->snapshot(j->arg, &snap);
	if (snap.buf.failed) {
		why = strdup("out of memory building the snapshot");
		goto fail;
	}
	atomic_fetch_add(&j->mt.gen, 1); /* a compaction in flight is now obsolete */
	pthread_mutex_lock(&j->dirlock);
	fd = segment_create(j, seq, JFMT_SEG_SNAPSHOT, &snap.buf, &end, &made, &why);
	if (fd == -1) {
		pthread_mutex_unlock(&j->dirlock);
		goto fail;
	}
	for (size_t i = 0; i < j->nsegs; i++) {
		jseg_name(name, sizeof name, j->segs[i].seq);
		unlinkat(j->dirfd, name, 0);
	}
	fsync(j->dirfd);
	pthread_mutex_unlock(&j->dirlock);

	seg.seq = seq;
	seg.data_end = seg.synced_to = seg.last_mark = JFMT_SEG_HEADER + snap.buf.len;
	seg.alloc = made;
	seg.records = snap.records + 1;
	seg.dead = JFMT_REC_HEADER;
	seg.batch_lo = seg.batch_hi = snap.batch;
	j->segs[0] = seg; /* segcap >= 1 */
	j->nsegs = 1;
	pthread_mutex_lock(&j->sy.lock);
	j->sy.gen++;
	j->sy.err = 0;
	j->sy.err_write = false;
	jbuf_reset(&j->sy.q);   /* handed over for the old files: the snapshot has it */
	j->sy.written = j->sy.synced = j->sy.want = snap.batch;
	j->sy.dirty_since_us = 0;
	pthread_mutex_unlock(&j->sy.lock);
	jsync_switch(j, j->active_fd, 0, false, fd, seq);
	j->active_fd = fd;
	j->batch = snap.batch + 1;
	j->written = j->seen = snap.batch;
	j->nhold = 0;
	j->switch_wait = false;
	j->switch_defer = false;
	j->compacting = false;
	j->reserved = next;
	j->reserve_value = 0;
	memset(j->ring, 0, sizeof j->ring);
	j->failed = false;
	j->recoveries++;
	free(j->last_logged);
	j->last_logged = NULL;
	jseg_name(name, sizeof name, seq);
	log_notice("journal %s: writable again: the live state (%" PRIu64 " records, %zu bytes) "
	    "is in %s; submits are accepted", j->dir, snap.records, snap.buf.len, name);
	jbuf_free(&snap.buf);
	if (j->on_seen != NULL)
		j->on_seen(j->arg, j->seen);
	return;
fail:
	jbuf_free(&snap.buf);
	if (why == NULL)
		why = strdup("out of memory");
	if (j->last_logged == NULL || strcmp(j->last_logged, why ? why : "") != 0 ||
	    now - j->last_logged_us >= LOG_REPEAT_US) {
		log_warnx("journal %s: still cannot be written: %s (tried again each second)",
		    j->dir, why ? why : "out of memory");
		free(j->last_logged);
		j->last_logged = why;
		j->last_logged_us = now;
	} else
		free(why);
}

void
journal_tick(struct journal *j)
{
	if (j->failed && j->begun)
		recover(j);
	else
		maybe_compact(j);
}

/* ---------------------------------------------------------------- stats, close */

void
journal_stats(struct journal *j, struct journal_stats *out)
{
	memset(out, 0, sizeof *out);
	out->path = j->dir;
	out->state = j->failed ? "failed" : "ok";
	out->error = j->failed ? (j->error ? j->error : "out of memory") : NULL;
	out->at_limit = !j->failed && at_limit(j);
	out->bytes = bytes_on_disk(j);
	out->max_bytes = j->max_bytes;
	out->segments = (unsigned)j->nsegs;
	for (size_t i = 0; i < j->nsegs; i++) {
		out->records += j->segs[i].records;
		out->live_bytes += j->segs[i].data_end - JFMT_SEG_HEADER - j->segs[i].dead;
	}
	out->batches = j->batches;
	pthread_mutex_lock(&j->sy.lock);
	out->syncs = j->sy.syncs;
	out->last_sync_us = j->sy.last_us;
	out->max_sync_us = j->sy.max_us;
	pthread_mutex_unlock(&j->sy.lock);
	out->compactions = j->compactions;
	out->last_compaction_us = j->last_compaction_us;
	out->recoveries = j->recoveries;
	out->sync_mode = journal_sync_name(j->sync);
}

void
journal_inject_sync_error(struct journal *j, int err)
{
	pthread_mutex_lock(&j->sy.lock);
	j->sy.inject = err;
	pthread_mutex_unlock(&j->sy.lock);
}

void
journal_inject_write_error(struct journal *j, int err)
{
	pthread_mutex_lock(&j->sy.lock);
	j->sy.inject_write = err;
	pthread_mutex_unlock(&j->sy.lock);
}

void
journal_hold_sync(struct journal *j, bool hold)
{
	pthread_mutex_lock(&j->sy.lock);
	j->sy.held = hold;
	pthread_cond_signal(&j->sy.cv);
	pthread_mutex_unlock(&j->sy.lock);
}

void
journal_close(struct journal *j, uint64_t next_id)
{
	if (j == NULL)
		return;
	jmaint_stop(j);
	/*
	 * The sync thread writes and syncs what it has (every mode) and the
	 * sealed segments, then leaves.
	 */
	jsync_stop(j, !j->failed);
	if (j->sy.err != 0 && !j->failed)
		sync_failed(j, j->sy.err, j->sy.err_write, j->sy.err_seq);
	if (j->begun && !j->failed && j->active_fd != -1) {
		j->switch_wait = false;
		journal_append(j, JREC_NEXT_ID, next_id, NULL, 0);
		flush(j, true);
		if (!j->failed && fdatasync(j->active_fd) == -1)
			log_warn("journal %s: fdatasync at the stop", j->dir);
		/* none: sealed segments were closed unsynced; the stop syncs them too */
		if (!j->failed && j->sync == JOURNAL_SYNC_NONE)
			syncfs(j->dirfd);
	}
	/* fds sealed after the thread left */
	for (size_t i = 0; i < j->sy.nsealed; i++) {
		if (j->sy.sealed[i].sync && !j->failed)
			fdatasync(j->sy.sealed[i].fd);
		close(j->sy.sealed[i].fd);
	}
	j->sy.nsealed = 0;
	journal_free(j);
}
