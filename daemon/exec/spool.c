/*
 * spool.c: exec tasks' whole output in files under state_dir (spool.h).
 *
 * The index is a list of the tasks that have a file (or had one, removed
 * to make room: the entry stays until the task is forgotten, to say so),
 * in the order of their ids: the oldest first, so making room walks from
 * the head. Its mutex is a leaf, held by a worker while it reserves room
 * for a write (and removes older files for it), by the loop while it
 * forgets a task; the writes themselves go outside it.
 */
#include "config.h"

#include <sys/stat.h>
#include <sys/uio.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "conf/conf.h"
#include "base/log.h"
#include "spool.h"

struct spool_entry {
	uint64_t id;
	uint64_t bytes;             /* of its file */
	bool finished;              /* its writer closed it (or it was there at start) */
	bool dropped;               /* removed to make room */
	struct spool_entry *prev, *next;
};

static pthread_mutex_t spool_lock = PTHREAD_MUTEX_INITIALIZER;
static int spool_dirfd = -1;
static char spool_path[4096];
static struct spool_entry *spool_head, *spool_tail;
static atomic_uint_fast64_t spool_total;
static atomic_uint_fast64_t spool_ndropped;
static atomic_uint_fast64_t spool_nfiles;   /* entries with a file (not dropped) */
static atomic_size_t spool_task_max;
static atomic_uint_fast64_t spool_total_max;

static void
spool_name(char *buf, size_t len, uint64_t id)
{
	snprintf(buf, len, "%" PRIu64, id);
}

/* Under spool_lock: the entry of id, or NULL. Recent ids are near the tail. */
static struct spool_entry *
spool_find(uint64_t id)
{
	for (struct spool_entry *e = spool_tail; e != NULL; e = e->prev)
		if (e->id == id)
			return e;
	return NULL;
}

/* Under spool_lock: a new entry for id, in id order; NULL when out of memory. */
static struct spool_entry *
spool_insert(uint64_t id)
{
	struct spool_entry *e = calloc(1, sizeof *e), *after;

	if (e == NULL)
		return NULL;
	e->id = id;
	for (after = spool_tail; after != NULL && after->id > id; after = after->prev)
		;
	e->prev = after;
	e->next = after != NULL ? after->next : spool_head;
	if (e->next != NULL)
		e->next->prev = e;
	else
		spool_tail = e;
	if (after != NULL)
		after->next = e;
	else
		spool_head = e;
	return e;
}

static void
spool_unlink_entry(struct spool_entry *e)
{
	if (e->prev != NULL)
		e->prev->next = e->next;
	else
		spool_head = e->next;
	if (e->next != NULL)
		e->next->prev = e->prev;
	else
		spool_tail = e->prev;
	free(e);
}

/* Under spool_lock: removes e's file; its bytes are free again. */
static void
spool_remove_file(struct spool_entry *e)
{
	char name[32];

	spool_name(name, sizeof name, e->id);
	if (unlinkat(spool_dirfd, name, 0) == -1 && errno != ENOENT)
		log_warn("spool: cannot remove %s/%s", spool_path, name);
	atomic_fetch_sub(&spool_total, e->bytes);
	e->bytes = 0;
	if (!e->dropped)
		atomic_fetch_sub(&spool_nfiles, 1);
}

bool
spool_on(void)
{
	return spool_dirfd != -1;
}

void
spool_configure(const struct conf *c)
{
	atomic_store(&spool_task_max, c->exec_output_spool_task_bytes);
	atomic_store(&spool_total_max, c->exec_output_spool_bytes);
}

/* The spool directory: made if missing, tpd's own and closed to others. */
static int
spool_open_dir(const char *state_dir, char **cause)
{
	int parent, fd;
	struct stat st;

	if ((size_t)snprintf(spool_path, sizeof spool_path, "%s/spool", state_dir) >=
	    sizeof spool_path)
		return cause_set(cause, "spool: state_dir %s: path too long", state_dir);
	if ((parent = open(state_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) == -1)
		return cause_set(cause, "spool: cannot open %s: %s", state_dir, strerror(errno));
	if (mkdirat(parent, "spool", 0700) == -1 && errno != EEXIST) {
		cause_set(cause, "spool: cannot make %s: %s", spool_path, strerror(errno));
		close(parent);
		return -1;
	}
	fd = openat(parent, "spool", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	close(parent);
	if (fd == -1)
		return cause_set(cause, "spool: cannot open %s: %s%s", spool_path, strerror(errno),
		    errno == ELOOP || errno == ENOTDIR ? " (it must be a directory, not a "
		    "symbolic link)" : "");
	if (fstat(fd, &st) == -1 || st.st_uid != geteuid() || (st.st_mode & 077) != 0) {
		close(fd);
		return cause_set(cause, "spool: %s must be a directory of tpd's user (uid %u) "
		    "that no one else may enter (mode 0700): remove it or fix its owner and "
		    "mode", spool_path, (unsigned)geteuid());
	}
	spool_dirfd = fd;
	return 0;
}

/*
 * Counts the files there are; removes those of tasks the registry does not
 * know (forgotten while tpd was down) and anything that is not a task's
 * file.
 */
void
spool_scan(bool (*known)(uint64_t id))
{
	int fd = openat(spool_dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *dir = fd != -1 ? fdopendir(fd) : NULL;
	struct dirent *de;
	size_t kept = 0, removed = 0;

	if (dir == NULL) {
		log_warn("spool: cannot read %s", spool_path);
		if (fd != -1)
			close(fd);
		return;
	}
	while ((de = readdir(dir)) != NULL) {
		struct spool_entry *e;
		struct stat st;
		char *end;
		uint64_t id;

		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		errno = 0;
		id = strtoull(de->d_name, &end, 10);
		if (errno != 0 || *end != '\0' || id == 0 || !known(id) ||
		    fstatat(spool_dirfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) == -1 ||
		    !S_ISREG(st.st_mode)) {
			if (unlinkat(spool_dirfd, de->d_name, 0) == 0)
				removed++;
			continue;
		}
		pthread_mutex_lock(&spool_lock);
		/* a task queued again may have started its file already */
		if (spool_find(id) != NULL) {
			pthread_mutex_unlock(&spool_lock);
			continue;
		}
		if ((e = spool_insert(id)) == NULL) {
			pthread_mutex_unlock(&spool_lock);
			break;
		}
		e->bytes = (uint64_t)st.st_size;
		e->finished = true;
		atomic_fetch_add(&spool_total, e->bytes);
		atomic_fetch_add(&spool_nfiles, 1);
		pthread_mutex_unlock(&spool_lock);
		kept++;
	}
	closedir(dir);
	log_info("spool: %s: %zu task outputs kept (%" PRIu64 " bytes), %zu files of "
	    "forgotten tasks removed", spool_path, kept, (uint64_t)atomic_load(&spool_total),
	    removed);
}

int
spool_start(const char *state_dir, const struct conf *c, char **cause)
{
	spool_configure(c);
	return spool_open_dir(state_dir, cause);
}

void
spool_stop(void)
{
	pthread_mutex_lock(&spool_lock);
	while (spool_head != NULL)
		spool_unlink_entry(spool_head);
	if (spool_dirfd != -1)
		close(spool_dirfd);
	spool_dirfd = -1;
	atomic_store(&spool_total, 0);
	atomic_store(&spool_nfiles, 0);
	pthread_mutex_unlock(&spool_lock);
}

/* Makes w's file (anew), with its entry. */
static void
spool_writer_create(struct spool_writer *w)
{
	uint64_t task = w->task;
	struct spool_entry *e;
	char name[32];
	bool fresh;

	w->lazy = false;
	spool_name(name, sizeof name, task);
	pthread_mutex_lock(&spool_lock);
	if ((fresh = (e = spool_find(task)) == NULL) && (e = spool_insert(task)) == NULL) {
		pthread_mutex_unlock(&spool_lock);
		log_warnx("spool: task %" PRIu64 ": out of memory: its output is not kept", task);
		return;
	}
	/* a file again: the entry is new, or its file was removed to make room */
	if (fresh || e->dropped)
		atomic_fetch_add(&spool_nfiles, 1);
	/* a task that runs again (on_lost rerun) starts its file over */
	atomic_fetch_sub(&spool_total, e->bytes);
	e->bytes = 0;
	e->finished = false;
	e->dropped = false;
	pthread_mutex_unlock(&spool_lock);
	w->fd = openat(spool_dirfd, name, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC,
	    0600);
	if (w->fd == -1)
		log_warn("spool: cannot create %s/%s: task %" PRIu64 "'s output is not kept",
		    spool_path, name, task);
}

void
spool_writer_open(struct spool_writer *w, uint64_t task)
{
	bool known;

	memset(w, 0, sizeof *w);
	w->fd = -1;
	w->task = task;
	if (spool_dirfd == -1)
		return;
	pthread_mutex_lock(&spool_lock);
	known = spool_find(task) != NULL;
	pthread_mutex_unlock(&spool_lock);
	/* a task with a file already (a run before this one) starts it over now */
	if (known)
		spool_writer_create(w);
	else
		w->lazy = true;
}

/*
 * Room for n more bytes of w's file, making it by removing the files of the
 * oldest finished tasks. false: there is none to remove.
 */
static bool
spool_reserve(struct spool_writer *w, size_t n)
{
	uint64_t max = atomic_load(&spool_total_max);
	struct spool_entry *self, *e;
	bool ok = true;

	pthread_mutex_lock(&spool_lock);
	self = spool_find(w->task);
	for (e = spool_head; atomic_load(&spool_total) + n > max && e != NULL; e = e->next) {
		if (!e->finished || e->dropped || e == self || e->bytes == 0)
			continue;
		log_info("spool: removed the output of task %" PRIu64 " (%" PRIu64 " bytes), the "
		    "oldest finished, to stay under output_spool_bytes (%" PRIu64 " bytes)",
		    e->id, e->bytes, max);
		spool_remove_file(e);
		e->dropped = true;
		atomic_fetch_add(&spool_ndropped, 1);
	}
	if (atomic_load(&spool_total) + n > max)
		ok = false;
	else {
		atomic_fetch_add(&spool_total, n);
		if (self != NULL)
			self->bytes += n;
	}
	pthread_mutex_unlock(&spool_lock);
	return ok;
}

/* Counts n bytes of w's file without asking for room (the small records). */
static void
spool_account(struct spool_writer *w, size_t n)
{
	struct spool_entry *e;

	pthread_mutex_lock(&spool_lock);
	atomic_fetch_add(&spool_total, n);
	if ((e = spool_find(w->task)) != NULL)
		e->bytes += n;
	pthread_mutex_unlock(&spool_lock);
}

/* Writes one record (counted already, or small enough not to be: the cut, the end). */
static int
spool_record(struct spool_writer *w, int type, const void *data, size_t n)
{
	unsigned char h[SPOOL_HEADER] = { (unsigned char)type, (unsigned char)(n >> 16),
	    (unsigned char)(n >> 8), (unsigned char)n };
	struct iovec iov[2] = { { h, sizeof h }, { (void *)data, n } };
	size_t want = sizeof h + n, done = 0;

	while (done < want) {
		ssize_t r = writev(w->fd, iov, n > 0 ? 2 : 1);

		if (r == -1 && errno == EINTR)
			continue;
		if (r == -1) {
			log_warn("spool: writing %s/%" PRIu64 ": task %" PRIu64 "'s output is "
			    "kept only up to here", spool_path, w->task, w->task);
			return -1;
		}
		done += (size_t)r;
		/* a short write to a regular file: go on from where it stopped */
		for (int i = 0; i < 2 && r > 0; i++) {
			size_t take = (size_t)r < iov[i].iov_len ? (size_t)r : iov[i].iov_len;
			iov[i].iov_base = (char *)iov[i].iov_base + take;
			iov[i].iov_len -= take;
			r -= (ssize_t)take;
		}
	}
	w->written += want;
	return 0;
}

/* The rest is not kept, for why. */
static void
spool_cut(struct spool_writer *w, int why)
{
	unsigned char b = (unsigned char)why;

	if (w->cut != 0)
		return;
	w->cut = why;
	if (why == SPOOL_WHY_TASK)
		log_info("spool: task %" PRIu64 ": its output passed output_spool_task_bytes "
		    "(%zu bytes): the rest is not kept", w->task, atomic_load(&spool_task_max));
	else if (why == SPOOL_WHY_TOTAL)
		log_info("spool: task %" PRIu64 ": no room under output_spool_bytes (%" PRIu64
		    " bytes) and no finished task's output to remove: the rest is not kept",
		    w->task, (uint64_t)atomic_load(&spool_total_max));
	if (why != SPOOL_WHY_ERROR) {
		spool_account(w, SPOOL_HEADER + 1);
		spool_record(w, SPOOL_CUT, &b, 1);
	}
}

void
spool_writer_add(struct spool_writer *w, int stream, const void *data, size_t n)
{
	size_t max = atomic_load(&spool_task_max);
	uint64_t kept = w->kept[0] + w->kept[1];
	const char *p = data;

	if (w->lazy && n > 0)
		spool_writer_create(w);
	if (w->fd == -1 || w->cut != 0)
		return;
	while (n > 0) {
		size_t take = n < SPOOL_RECORD_MAX ? n : SPOOL_RECORD_MAX;

		if (kept >= max) {
			spool_cut(w, SPOOL_WHY_TASK);
			return;
		}
		if (take > max - kept)
			take = (size_t)(max - kept);
		if (!spool_reserve(w, SPOOL_HEADER + take)) {
			spool_cut(w, SPOOL_WHY_TOTAL);
			return;
		}
		if (spool_record(w, stream == 0 ? SPOOL_STDOUT : SPOOL_STDERR, p, take) == -1) {
			spool_cut(w, SPOOL_WHY_ERROR);
			return;
		}
		w->kept[stream] += take;
		kept += take;
		p += take;
		n -= take;
	}
}

void
spool_writer_close(struct spool_writer *w, uint64_t seen_out, uint64_t seen_err)
{
	unsigned char end[16];
	struct spool_entry *e;

	if (w->fd == -1)
		return;
	for (int i = 0; i < 8; i++) {
		end[i] = (unsigned char)(seen_out >> (56 - 8 * i));
		end[8 + i] = (unsigned char)(seen_err >> (56 - 8 * i));
	}
	/* the end is written, room or not: it is what tells a whole file from a cut one */
	spool_account(w, SPOOL_HEADER + sizeof end);
	spool_record(w, SPOOL_END, end, sizeof end);
	close(w->fd);
	w->fd = -1;
	pthread_mutex_lock(&spool_lock);
	if ((e = spool_find(w->task)) != NULL)
		e->finished = true;
	pthread_mutex_unlock(&spool_lock);
}

int
spool_open_read(uint64_t task)
{
	char name[32];

	if (spool_dirfd == -1) {
		errno = ENOENT;
		return -1;
	}
	spool_name(name, sizeof name, task);
	return openat(spool_dirfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
}

int
spool_read(int fd, uint64_t *off, struct spool_record *r)
{
	unsigned char h[SPOOL_HEADER];
	ssize_t n;

	n = pread(fd, h, sizeof h, (off_t)*off);
	if (n == -1) {
		log_warn("spool: reading a task's output");
		return -1;
	}
	if (n < (ssize_t)sizeof h)
		return 0;
	r->type = h[0];
	r->len = (size_t)h[1] << 16 | (size_t)h[2] << 8 | h[3];
	if (r->len > SPOOL_RECORD_MAX || r->type < SPOOL_STDOUT || r->type > SPOOL_END) {
		log_warnx("spool: a task's output file is damaged at offset %" PRIu64
		    ": the rest is not replayed", *off);
		return -1;
	}
	n = pread(fd, r->data, r->len, (off_t)(*off + sizeof h));
	if (n == -1) {
		log_warn("spool: reading a task's output");
		return -1;
	}
	if ((size_t)n < r->len)
		return 0;
	*off += sizeof h + r->len;
	return 1;
}

const char *
spool_dropped(uint64_t task)
{
	struct spool_entry *e;
	bool dropped;

	pthread_mutex_lock(&spool_lock);
	dropped = (e = spool_find(task)) != NULL && e->dropped;
	pthread_mutex_unlock(&spool_lock);
	return dropped ? "its whole output was removed to make room for newer tasks' "
	    "(output_spool_bytes): only what the result kept (output_limit) is left" : NULL;
}

void
spool_forget(uint64_t task)
{
	struct spool_entry *e;

	if (spool_dirfd == -1)
		return;
	pthread_mutex_lock(&spool_lock);
	/* the forgotten are the oldest: from the head */
	for (e = spool_head; e != NULL && e->id != task; e = e->next)
		;
	if (e != NULL) {
		spool_remove_file(e);
		spool_unlink_entry(e);
	}
	pthread_mutex_unlock(&spool_lock);
}

bool
spool_figures(struct spool_figures *f)
{
	if (!spool_on())
		return false;
	f->bytes = atomic_load(&spool_total);
	f->max_bytes = atomic_load(&spool_total_max);
	f->files = atomic_load(&spool_nfiles);
	f->dropped = atomic_load(&spool_ndropped);
	return true;
}
