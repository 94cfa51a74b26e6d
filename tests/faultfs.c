/*
 * faultfs.c: an LD_PRELOAD shim that makes file system calls on the files
 * of one directory fail as a failing disk would, for the journal's tests
 * (test_journal_faults.py). Nothing outside the tests uses it.
 *
 * FAULTFS_DIR names the directory (its files and itself are affected);
 * FAULTFS_CTL names a control file, read again whenever it changes, of
 * rules, one a line:
 *     OP SKIP ERR COUNT
 * OP is one of write (write, pwrite), sync (fdatasync, fsync of a file),
 * syncdir (fsync of the directory), create (open with O_CREAT), rename (to a
 * new name), replace (a rename over a file), alloc (posix_fallocate,
 * fallocate). Each call of OP on the directory
 * counts for every rule of OP; a rule fires on the calls after its first
 * SKIP, COUNT times (0: for ever), with errno ERR (a number), or, with ERR
 * "short", writes half of what was asked and returns that, or with ERR
 * "slowMS" (slow1000) makes the call MS milliseconds late and then lets it
 * succeed (a slow disk). The first rule that fires wins. Counters start
 * again when the file changes. Each fault made is appended to FAULTFS_HITS
 * (when set) as "OP PATH ERR".
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdbool.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAX_RULES 16
#define ERR_SHORT (-1)

struct rule {
	char op[16];
	long skip, count, seen;
	int err;
	long slow_ms;               /* ERR slowMS: err 0, the call is this late */
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct rule rules[MAX_RULES];
static int nrules;
static struct stat ctl_st;
static __thread int in_shim; /* the shim's own calls are not counted */

static void
load_rules(void)
{
	const char *ctl = getenv("FAULTFS_CTL");
	struct stat st;
	char line[128];
	FILE *f;

	if (ctl == NULL || stat(ctl, &st) == -1) {
		nrules = 0;
		memset(&ctl_st, 0, sizeof ctl_st);
		return;
	}
	if (st.st_ino == ctl_st.st_ino && st.st_mtim.tv_sec == ctl_st.st_mtim.tv_sec &&
	    st.st_mtim.tv_nsec == ctl_st.st_mtim.tv_nsec && st.st_size == ctl_st.st_size)
		return;
	ctl_st = st;
	nrules = 0;
	if ((f = fopen(ctl, "r")) == NULL)
		return;
	while (nrules < MAX_RULES && fgets(line, sizeof line, f) != NULL) {
		struct rule *r = &rules[nrules];
		char err[16];

		if (sscanf(line, "%15s %ld %15s %ld", r->op, &r->skip, err, &r->count) != 4)
			continue;
		r->err = strcmp(err, "short") == 0 ? ERR_SHORT : atoi(err);
		r->slow_ms = strncmp(err, "slow", 4) == 0 ? atol(err + 4) : 0;
		r->seen = 0;
		nrules++;
	}
	fclose(f);
}

/* True when path is the directory or in it. */
static bool
in_dir(const char *path)
{
	const char *dir = getenv("FAULTFS_DIR");
	size_t n;

	if (dir == NULL || path == NULL)
		return false;
	n = strlen(dir);
	return strncmp(path, dir, n) == 0 && (path[n] == '\0' || path[n] == '/');
}

static bool
fd_path(int fd, char *buf, size_t len)
{
	char link[64];
	ssize_t n;

	snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
	if ((n = readlink(link, buf, len - 1)) <= 0)
		return false;
	buf[n] = '\0';
	return true;
}

/* The path of name relative to dirfd, in buf. */
static bool
at_path(int dirfd, const char *name, char *buf, size_t len)
{
	char d[PATH_MAX];

	if (name[0] == '/') {
		snprintf(buf, len, "%s", name);
		return true;
	}
	if (dirfd == AT_FDCWD) {
		if (getcwd(d, sizeof d) == NULL)
			return false;
	} else if (!fd_path(dirfd, d, sizeof d))
		return false;
	return (size_t)snprintf(buf, len, "%s/%s", d, name) < len;
}

/* The error to make for this call of op on path (0: none, ERR_SHORT: a short write). */
static int
fault(const char *op, const char *path)
{
	int err = 0;
	long slow = 0;
	bool fired = false;
	const char *hits;

	if (!in_dir(path))
		return 0;
	pthread_mutex_lock(&lock);
	in_shim++;
	load_rules();
	for (int i = 0; i < nrules; i++) {
		struct rule *r = &rules[i];
		if (strcmp(r->op, op) != 0)
			continue;
		r->seen++;
		if (!fired && r->seen > r->skip && (r->count == 0 || r->seen <= r->skip + r->count)) {
			fired = r->err != 0 || r->slow_ms != 0;
			err = r->err;
			slow = r->slow_ms;
		}
	}
	if (err != 0 && (hits = getenv("FAULTFS_HITS")) != NULL) {
		FILE *f = fopen(hits, "a");
		if (f != NULL) {
			fprintf(f, "%s %s %d\n", op, path, err);
			fclose(f);
		}
	}
	in_shim--;
	pthread_mutex_unlock(&lock);
	if (slow > 0) {
		struct timespec ts = { slow / 1000, slow % 1000 * 1000000 };

		while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
			continue;
	}
	return err;
}

static int
fd_fault(const char *op, int fd)
{
	char p[PATH_MAX];

	if (in_shim || getenv("FAULTFS_DIR") == NULL || !fd_path(fd, p, sizeof p))
		return 0;
	return fault(op, p);
}

static void *p_write, *p_pwrite, *p_fdatasync, *p_fsync, *p_renameat, *p_openat,
    *p_posix_fallocate, *p_fallocate;

static void *
sym(void **p, const char *name)
{
	if (*p == NULL)
		*p = dlsym(RTLD_NEXT, name);
	return *p;
}

/* The libc function the shim stands in front of. */
#define REAL(name) ((__typeof__(name) *)sym(&p_##name, #name))

ssize_t
write(int fd, const void *buf, size_t n)
{
	int e = fd_fault("write", fd);

	if (e == ERR_SHORT && n > 1)
		return REAL(write)(fd, buf, n / 2);
	if (e > 0) {
		errno = e;
		return -1;
	}
	return REAL(write)(fd, buf, n);
}

ssize_t
pwrite(int fd, const void *buf, size_t n, off_t off)
{
	int e = fd_fault("write", fd);

	if (e == ERR_SHORT && n > 1)
		return REAL(pwrite)(fd, buf, n / 2, off);
	if (e > 0) {
		errno = e;
		return -1;
	}
	return REAL(pwrite)(fd, buf, n, off);
}

ssize_t
pwrite64(int fd, const void *buf, size_t n, off_t off)
{
	return pwrite(fd, buf, n, off);
}

int
fdatasync(int fd)
{
	int e = fd_fault("sync", fd);

	if (e > 0) {
		errno = e;
		return -1;
	}
	return REAL(fdatasync)(fd);
}

int
fsync(int fd)
{
	struct stat st;
	int e = fd_fault(fstat(fd, &st) == 0 && S_ISDIR(st.st_mode) ? "syncdir" : "sync", fd);

	if (e > 0) {
		errno = e;
		return -1;
	}
	return REAL(fsync)(fd);
}

int
renameat(int olddirfd, const char *oldpath, int newdirfd, const char *newpath)
{
	char p[PATH_MAX];
	int e = 0;

	if (!in_shim && at_path(newdirfd, newpath, p, sizeof p)) {
		struct stat st;
		e = fault(fstatat(newdirfd, newpath, &st, 0) == 0 ? "replace" : "rename", p);
	}
	if (e > 0) {
		errno = e;
		return -1;
	}
	return REAL(renameat)(olddirfd, oldpath, newdirfd, newpath);
}

int
openat(int dirfd, const char *path, int flags, ...)
{
	char p[PATH_MAX];
	mode_t mode = 0;
	va_list ap;
	int e = 0;

	if (flags & (O_CREAT | O_TMPFILE)) {
		va_start(ap, flags);
		mode = (mode_t)va_arg(ap, int);
		va_end(ap);
		if (!in_shim && at_path(dirfd, path, p, sizeof p))
			e = fault("create", p);
	}
	if (e > 0) {
		errno = e;
		return -1;
	}
	return REAL(openat)(dirfd, path, flags, mode);
}

int
openat64(int dirfd, const char *path, int flags, ...)
{
	mode_t mode = 0;
	va_list ap;

	if (flags & (O_CREAT | O_TMPFILE)) {
		va_start(ap, flags);
		mode = (mode_t)va_arg(ap, int);
		va_end(ap);
	}
	return openat(dirfd, path, flags, mode);
}

int
posix_fallocate(int fd, off_t off, off_t len)
{
	int e = fd_fault("alloc", fd);

	if (e > 0)
		return e;
	return REAL(posix_fallocate)(fd, off, len);
}

int
posix_fallocate64(int fd, off_t off, off_t len)
{
	return posix_fallocate(fd, off, len);
}

int
fallocate(int fd, int mode, off_t off, off_t len)
{
	int e = fd_fault("alloc", fd);

	if (e > 0) {
		errno = e;
		return -1;
	}
	return REAL(fallocate)(fd, mode, off, len);
}
