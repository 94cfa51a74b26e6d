/*
 * journal-read.c: a journal directory, mapped and replayed (the rules are
 * in journal-read.h). Each segment is mapped read-only as a whole: a
 * replay reads every byte once, and the state points into the maps, so a
 * finished task's done is never copied before the daemon takes it.
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "journal-read.h"
#include "base/log.h"

struct replay_ctx {
	struct jstate *state;
	uint32_t index;
	const char *why;
	uint64_t offset;
};

static int
replay_one(const struct jrec *rec, void *arg)
{
	struct replay_ctx *c = arg;

	if (jstate_apply(c->state, c->index, rec, &c->why) == -1) {
		c->offset = rec->offset;
		return -1;
	}
	return 0;
}

static int
by_seq(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

void
jread_free(struct jread *r)
{
	if (r == NULL)
		return;
	for (size_t i = 0; i < r->nsegs; i++)
		if (r->segs[i].map != NULL)
			munmap((void *)r->segs[i].map, r->segs[i].len);
	for (size_t i = 0; i < r->nleftovers; i++)
		free(r->leftovers[i]);
	free(r->leftovers);
	free(r->segs);
	free(r->obsolete);
	jstate_free(r->state);
	free(r);
}

/* Lists the directory: segment numbers (sorted) and leftover temporary files. */
static int
list_dir(int dirfd, const char *dir, uint64_t max_seq, struct jread *r, uint64_t **seqs,
    size_t *nseqs, char **cause)
{
	size_t cap = 0;
	struct dirent *de;
	DIR *d;
	int fd;

	*seqs = NULL;
	*nseqs = 0;
	if ((fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC)) == -1 ||
	    (d = fdopendir(fd)) == NULL) {
		int e = errno;
		if (fd != -1)
			close(fd);
		return cause_set(cause, "journal %s: cannot list it: %s", dir, strerror(e));
	}
	while ((errno = 0, de = readdir(d)) != NULL) {
		size_t n = strlen(de->d_name);
		uint64_t seq;

		if (n > 4 && strcmp(de->d_name + n - 4, ".tmp") == 0 &&
		    strncmp(de->d_name, JFMT_NAME_PREFIX, strlen(JFMT_NAME_PREFIX)) == 0) {
			char **p = realloc(r->leftovers, (r->nleftovers + 1) * sizeof *p);
			if (p == NULL || (p[r->nleftovers] = strdup(de->d_name)) == NULL) {
				if (p != NULL)
					r->leftovers = p;
				closedir(d);
				return cause_set(cause, "out of memory");
			}
			r->leftovers = p;
			r->nleftovers++;
			continue;
		}
		if ((seq = jseg_name_seq(de->d_name)) == 0 || (max_seq != 0 && seq > max_seq))
			continue;
		if (*nseqs == cap) {
			size_t ncap = cap ? cap * 2 : 16;
			uint64_t *p = realloc(*seqs, ncap * sizeof *p);
			if (p == NULL) {
				closedir(d);
				return cause_set(cause, "out of memory");
			}
			*seqs = p;
			cap = ncap;
		}
		(*seqs)[(*nseqs)++] = seq;
	}
	if (errno != 0) {
		int e = errno;
		closedir(d);
		return cause_set(cause, "journal %s: cannot list it: %s", dir, strerror(e));
	}
	closedir(d);
	if (*nseqs > 1)
		qsort(*seqs, *nseqs, sizeof **seqs, by_seq);
	return 0;
}

int
journal_open_file(int dirfd, const char *dir, const char *name, int flags, char **cause)
{
	struct stat st;
	int fd;

	/* O_NONBLOCK: a FIFO planted in a segment's place must not hang the start */
	if ((fd = openat(dirfd, name, flags | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0600)) == -1)
		return cause_set(cause, "journal %s/%s: cannot open it: %s%s", dir, name,
		    strerror(errno), errno == ELOOP ? " (a symbolic link: refused)" : "");
	if (fstat(fd, &st) == -1) {
		int e = errno;
		close(fd);
		return cause_set(cause, "journal %s/%s: cannot stat it: %s", dir, name, strerror(e));
	}
	if (!S_ISREG(st.st_mode) || st.st_uid != geteuid()) {
		close(fd);
		if (!S_ISREG(st.st_mode))
			return cause_set(cause, "journal %s/%s: not a regular file: refused (move it "
			    "away)", dir, name);
		return cause_set(cause, "journal %s/%s: owned by uid %u, not by tpd's user (uid %u): "
		    "refused (move it away)", dir, name, (unsigned)st.st_uid, (unsigned)geteuid());
	}
	if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) == -1) {
		int e = errno;
		close(fd);
		return cause_set(cause, "journal %s/%s: fcntl: %s", dir, name, strerror(e));
	}
	return fd;
}

/* Maps one segment file; its header is checked by the caller. */
static int
map_segment(int dirfd, const char *dir, uint64_t seq, struct jread_seg *s, char **cause)
{
	char name[32];
	struct stat st;
	void *p;
	int fd;

	jseg_name(name, sizeof name, seq);
	memset(s, 0, sizeof *s);
	s->seq = seq;
	if ((fd = journal_open_file(dirfd, dir, name, O_RDONLY, cause)) == -1)
		return -1;
	if (fstat(fd, &st) == -1) {
		int e = errno;
		close(fd);
		return cause_set(cause, "journal %s/%s: cannot stat it: %s", dir, name, strerror(e));
	}
	s->len = (size_t)st.st_size;
	s->blocks_bytes = (uint64_t)st.st_blocks * 512;
	if (s->len > 0) {
		if ((p = mmap(NULL, s->len, PROT_READ, MAP_PRIVATE, fd, 0)) == MAP_FAILED) {
			int e = errno;
			close(fd);
			return cause_set(cause, "journal %s/%s: cannot map it: %s", dir, name,
			    strerror(e));
		}
		madvise(p, s->len, MADV_SEQUENTIAL);
		s->map = p;
	}
	close(fd);
	return 0;
}

/*
 * -1 with *cause when an earlier segment of r ended torn: a torn tail is only ever the
 * crash's last write, so a segment with records after it means the tear is damage.
 */
static int
torn_before(const struct jread *r, const char *dir, char **cause)
{
	const struct jread_seg *t;
	char name[32];

	if (r->torn == SIZE_MAX)
		return 0;
	t = &r->segs[r->torn];
	jseg_name(name, sizeof name, t->seq);
	return cause_set(cause, "journal %s/%s: damaged at offset %" PRIu64 ": %s, and a later "
	    "segment holds records", dir, name, t->scan.bad_offset, t->scan.why);
}

int
jread_load(int dirfd, const char *dir, uint64_t max_seq, struct jread **out, char **cause)
{
	struct jread *r = calloc(1, sizeof *r);
	uint64_t *seqs = NULL;
	size_t nseqs = 0, first = 0;
	char name[32];

	*out = NULL;
	if (r == NULL || (r->state = jstate_new()) == NULL) {
		jread_free(r);
		return cause_set(cause, "out of memory");
	}
	r->torn = SIZE_MAX;
	if (list_dir(dirfd, dir, max_seq, r, &seqs, &nseqs, cause) == -1)
		goto fail;
	if (nseqs > 0 && ((r->segs = calloc(nseqs, sizeof *r->segs)) == NULL ||
	    (r->obsolete = calloc(nseqs, sizeof *r->obsolete)) == NULL)) {
		cause_set(cause, "out of memory");
		goto fail;
	}
	/* Every header first: the newest snapshot decides where the replay begins. */
	for (size_t i = 0; i < nseqs; i++) {
		struct jread_seg *s = &r->segs[i];
		struct jseg_info info;
		const char *why;

		r->nsegs = i + 1;
		if (map_segment(dirfd, dir, seqs[i], s, cause) == -1)
			goto fail;
		jseg_name(name, sizeof name, seqs[i]);
		if (jseg_parse_header(s->map, s->len, &info, &why) == -1) {
			cause_set(cause, "journal %s/%s: damaged at offset 0: %s", dir, name, why);
			goto fail;
		}
		if (info.seq != seqs[i]) {
			cause_set(cause, "journal %s/%s: damaged at offset 0: its header says "
			    "segment %" PRIu64, dir, name, info.seq);
			goto fail;
		}
		s->flags = info.flags;
		s->made_bytes = info.made_bytes;
		if (s->len < info.made_bytes) {
			cause_set(cause, "journal %s/%s: damaged: the file is %zu bytes, shorter than "
			    "the %" PRIu64 " it was made with: records it held are gone", dir, name,
			    s->len, info.made_bytes);
			goto fail;
		}
		if (info.flags & JFMT_SEG_SNAPSHOT)
			first = i;
	}
	for (size_t i = 0; i < first; i++) {
		r->obsolete[r->nobsolete++] = r->segs[i].seq;
		munmap((void *)r->segs[i].map, r->segs[i].len);
	}
	if (first > 0) {
		memmove(r->segs, r->segs + first, (r->nsegs - first) * sizeof *r->segs);
		r->nsegs -= first;
	}

	for (size_t i = 0; i < r->nsegs; i++) {
		struct jread_seg *s = &r->segs[i];
		struct replay_ctx c = { r->state, 0, NULL, 0 };

		jseg_name(name, sizeof name, s->seq);
		if ((s->index = jstate_add_segment(r->state, s->map, s->len)) == UINT32_MAX) {
			cause_set(cause, "out of memory");
			goto fail;
		}
		c.index = s->index;
		jfmt_scan(s->map, s->len, replay_one, &c, &s->scan);
		r->records += s->scan.records;
		/* its first record was on disk before the file had its name */
		if ((s->flags & JFMT_SEG_SIZED) && s->scan.end != JSCAN_STOPPED &&
		    (s->scan.records == 0 || (s->scan.end != JSCAN_CLEAN &&
		    s->scan.bad_offset == JFMT_SEG_HEADER))) {
			cause_set(cause, "journal %s/%s: damaged at offset %u: %s: its first record, on "
			    "disk since the segment was made, is gone", dir, name, JFMT_SEG_HEADER,
			    s->scan.records == 0 && s->scan.end == JSCAN_CLEAN ? "no record" :
			    s->scan.why);
			goto fail;
		}
		switch (s->scan.end) {
		case JSCAN_STOPPED:
			cause_set(cause, "journal %s/%s: damaged at offset %" PRIu64 ": %s", dir, name,
			    c.offset, c.why);
			goto fail;
		case JSCAN_DAMAGED:
			cause_set(cause, "journal %s/%s: damaged at offset %" PRIu64 ": %s, and "
			    "records written after it was on disk follow", dir, name,
			    s->scan.bad_offset, s->scan.why);
			goto fail;
		case JSCAN_TORN:
			if (torn_before(r, dir, cause) == -1)
				goto fail;
			r->torn = i;
			break;
		case JSCAN_CLEAN:
			if (s->scan.records == 0)
				break;
			if (torn_before(r, dir, cause) == -1)
				goto fail;
			break;
		}
	}
	free(seqs);
	*out = r;
	return 0;
fail:
	free(seqs);
	jread_free(r);
	return -1;
}
