/* cgroup.c: exec tasks in cgroup v2 (see cgroup.h). */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/pidfd.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cgroup.h"
#include "base/clock.h"
#include "base/log.h"
#include "wire.h"

#define CGROUP_SIGNAL_MAX 512    /* processes signalled one by one (cgroup_task_signal) */

/* How long the start-up waits for a leftover task cgroup to empty. */
#define CGROUP_LEFTOVER_WAIT_MS 5000

static struct cgroup_info cgroup_state = { .why = "not set up" };
static int cgroup_tasks_fd = -1;        /* ROOT/tasks */
static atomic_uint cgroup_seq;          /* names the task cgroups: wN */
static pthread_key_t cgroup_kept;       /* a worker's empty cgroup, kept for its next task */

static void cgroup_release(struct cgroup_task *ct);
static void cgroup_kept_free(void *kept);

static const struct {
	const char *name;
	unsigned bit;
} cgroup_controllers[] = {
	{ "memory", CGROUP_MEMORY },
	{ "pids", CGROUP_PIDS },
	{ "cpu", CGROUP_CPU },
};

const struct cgroup_info *
cgroup_current(void)
{
	return &cgroup_state;
}

const char *
cgroup_containment(void)
{
	return cgroup_state.cgroup ? CONTAINMENT_CGROUP : CONTAINMENT_PROCESS;
}

/* Reads a small file of dirfd into buf (NUL-terminated). Returns its length or -1. */
static ssize_t
cgroup_read_at(int dirfd, const char *file, char *buf, size_t len)
{
	ssize_t n;
	int fd;

	if ((fd = openat(dirfd, file, O_RDONLY | O_CLOEXEC)) == -1)
		return -1;
	n = pread(fd, buf, len - 1, 0);
	close(fd);
	if (n < 0)
		return -1;
	buf[n] = '\0';
	return n;
}

static int
cgroup_write_at(int dirfd, const char *file, const char *value)
{
	size_t len = strlen(value);
	ssize_t n;
	int fd, saved;

	if ((fd = openat(dirfd, file, O_WRONLY | O_CLOEXEC)) == -1)
		return -1;
	n = write(fd, value, len);
	saved = errno;
	close(fd);
	errno = saved;
	return n == (ssize_t)len ? 0 : -1;
}

/* The value of "key N" in a flat-keyed file's text (cpu.stat, memory.events). */
static bool
cgroup_key(const char *text, const char *key, uint64_t *out)
{
	size_t klen = strlen(key);

	for (const char *p = text; p != NULL && *p != '\0'; p = strchr(p, '\n'), p = p ? p + 1 : p) {
		if (strncmp(p, key, klen) == 0 && p[klen] == ' ') {
			*out = strtoull(p + klen + 1, NULL, 10);
			return true;
		}
	}
	return false;
}

/* The cgroup2 mount point, from /proc/self/mountinfo. */
static int
cgroup_mount(char *buf, size_t len)
{
	char *line = NULL;
	size_t cap = 0;
	FILE *f;
	int rv = -1;

	if ((f = fopen("/proc/self/mountinfo", "re")) == NULL)
		return -1;
	while (getline(&line, &cap, f) != -1) {
		char root[256], point[512];
		const char *sep = strstr(line, " - ");

		if (sep == NULL || strncmp(sep + 3, "cgroup2 ", 8) != 0)
			continue;
		/* "ID PARENT MAJ:MIN ROOT POINT ..." (no spaces in ours: \040 otherwise) */
		if (sscanf(line, "%*s %*s %*s %255s %511s", root, point) != 2 ||
		    strcmp(root, "/") != 0)
			continue;
		rv = (size_t)snprintf(buf, len, "%s", point) < len ? 0 : -1;
		break;
	}
	free(line);
	fclose(f);
	return rv;
}

/* The cgroup we are in, from /proc/self/cgroup's "0::" line. */
static int
cgroup_self(char *buf, size_t len)
{
	char *line = NULL;
	size_t cap = 0;
	FILE *f;
	int rv = -1;

	if ((f = fopen("/proc/self/cgroup", "re")) == NULL)
		return -1;
	while (getline(&line, &cap, f) != -1) {
		if (strncmp(line, "0::", 3) != 0)
			continue;
		line[strcspn(line, "\n")] = '\0';
		snprintf(buf, len, "%s", line + 3);
		rv = 0;
		break;
	}
	free(line);
	fclose(f);
	return rv;
}

/* Is a process other than us in dir/daemon? Then another tpd owns the root. */
static bool
cgroup_root_busy(const char *dir)
{
	char path[600], buf[4096];
	ssize_t n;
	int fd;

	snprintf(path, sizeof path, "%s/daemon", dir);
	if ((fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) == -1)
		return false;
	n = cgroup_read_at(fd, "cgroup.procs", buf, sizeof buf);
	close(fd);
	for (char *p = buf, *end; n > 0 && *p != '\0'; p = end) {
		long pid = strtol(p, &end, 10);

		if (end == p)
			break;
		if (pid != (long)getpid())
			return true;
	}
	return false;
}

int
cgroup_probe(const char *mode, const char *root, struct cgroup_info *info,
    char **cause)
{
	char mnt[256], self[256], buf[512];
	const char *rel;
	int fd;

	memset(info, 0, sizeof *info);
	if (mode != NULL && strcmp(mode, "process") == 0) {
		snprintf(info->why, sizeof info->why, "containment = process");
		return 0;
	}
	if (cgroup_mount(mnt, sizeof mnt) == -1) {
		snprintf(info->why, sizeof info->why, "no cgroup2 file system is mounted");
		goto none;
	}
	if (root != NULL && *root != '\0') {
		size_t mlen = strlen(mnt);

		/* a path under the mount, or a cgroup path as /proc/self/cgroup has it */
		rel = strncmp(root, mnt, mlen) == 0 && root[mlen] == '/' ? root + mlen : root;
	} else {
		if (cgroup_self(self, sizeof self) == -1) {
			snprintf(info->why, sizeof info->why, "/proc/self/cgroup has no "
			    "cgroup2 line");
			goto none;
		}
		if (strcmp(self, "/") == 0) {
			snprintf(info->why, sizeof info->why, "tpd runs in the root cgroup "
			    "of %s, which is the init system's: set cgroup_root to a "
			    "subtree delegated to tpd", mnt);
			goto none;
		}
		rel = self;
	}
	while (*rel == '/')
		rel++;
	if (*rel == '\0') {
		snprintf(info->why, sizeof info->why, "cgroup_root is the root of %s, "
		    "which is the init system's", mnt);
		goto none;
	}
	if ((size_t)snprintf(info->root, sizeof info->root, "%s/%s", mnt, rel) >=
	    sizeof info->root) {
		snprintf(info->why, sizeof info->why, "cgroup_root is too long");
		goto none;
	}
	if ((fd = open(info->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) == -1) {
		snprintf(info->why, sizeof info->why, "%s: %s", info->root, strerror(errno));
		goto none;
	}
	if (faccessat(fd, "cgroup.procs", W_OK, AT_EACCESS) == -1 ||
	    faccessat(fd, ".", W_OK, AT_EACCESS) == -1) {
		snprintf(info->why, sizeof info->why, "%s is not tpd's to write (%s): "
		    "delegate it (systemd: Delegate=yes)", info->root, strerror(errno));
		close(fd);
		goto none;
	}
	if (cgroup_read_at(fd, "cgroup.controllers", buf, sizeof buf) >= 0) {
		for (size_t i = 0; i < sizeof cgroup_controllers / sizeof cgroup_controllers[0]; i++) {
			const char *p = strstr(buf, cgroup_controllers[i].name);
			size_t l = strlen(cgroup_controllers[i].name);

			if (p != NULL && (p == buf || p[-1] == ' ') &&
			    (p[l] == ' ' || p[l] == '\n' || p[l] == '\0'))
				info->controllers |= cgroup_controllers[i].bit;
		}
	}
	close(fd);
	if (cgroup_root_busy(info->root)) {
		snprintf(info->why, sizeof info->why, "%s/daemon holds another process: "
		    "another tpd uses this cgroup root", info->root);
		goto none;
	}
	info->cgroup = true;
	info->why[0] = '\0';
	return 0;

none:
	info->cgroup = false;
	info->controllers = 0;
	info->root[0] = '\0';
	if (mode != NULL && strcmp(mode, "cgroup") == 0)
		return cause_set(cause, "containment = cgroup, but %s", info->why);
	return 0;
}

/* Kills, waits for and removes one leftover cgroup (and its children) under dirfd. */
static int
cgroup_remove_tree(int parent, const char *name, uint64_t deadline)
{
	struct cgroup_task ct = { .dirfd = -1, .events_fd = -1, .peak_fd = -1 };
	DIR *d;
	struct dirent *de;
	uint64_t now;
	int fd;

	if ((ct.dirfd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) == -1)
		return -1;
	snprintf(ct.name, sizeof ct.name, "%s", name);
	ct.events_fd = openat(ct.dirfd, "cgroup.events", O_RDONLY | O_CLOEXEC);
	now = clock_now_us() / 1000;
	cgroup_task_kill_wait(&ct, deadline > now ? deadline - now : 1);
	/* a task may have made cgroups of its own below (were it delegated them) */
	if ((fd = dup(ct.dirfd)) != -1 && (d = fdopendir(fd)) != NULL) {
		while ((de = readdir(d)) != NULL)
			if (de->d_type == DT_DIR && de->d_name[0] != '.')
				cgroup_remove_tree(ct.dirfd, de->d_name, deadline);
		closedir(d);
	} else if (fd != -1)
		close(fd);
	close(ct.dirfd);
	if (ct.events_fd != -1)
		close(ct.events_fd);
	return unlinkat(parent, name, AT_REMOVEDIR);
}

/* Kills and removes every task cgroup a previous run left; logs what it did. */
static void
cgroup_clean_leftovers(void)
{
	uint64_t deadline = clock_now_us() / 1000 + CGROUP_LEFTOVER_WAIT_MS;
	struct dirent *de;
	char names[256] = "";
	size_t count = 0;
	int fd;
	DIR *d;

	if ((fd = dup(cgroup_tasks_fd)) == -1 || (d = fdopendir(fd)) == NULL) {
		if (fd != -1)
			close(fd);
		log_warn("cgroup: cannot list %s/tasks", cgroup_state.root);
		return;
	}
	while ((de = readdir(d)) != NULL) {
		char procs[64];
		int sub;

		if (de->d_type != DT_DIR || de->d_name[0] == '.')
			continue;
		if ((sub = openat(cgroup_tasks_fd, de->d_name, O_RDONLY | O_DIRECTORY |
		    O_CLOEXEC)) != -1) {
			if (cgroup_read_at(sub, "cgroup.procs", procs, sizeof procs) > 0)
				log_notice("cgroup: task cgroup %s of a previous run still "
				    "has processes (first: %.*s): killing them", de->d_name,
				    (int)strcspn(procs, "\n"), procs);
			close(sub);
		}
		if (cgroup_remove_tree(cgroup_tasks_fd, de->d_name, deadline) == -1)
			log_warn("cgroup: cannot remove %s/tasks/%s", cgroup_state.root,
			    de->d_name);
		if (strlen(names) + strlen(de->d_name) + 2 < sizeof names)
			snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s",
			    count ? " " : "", de->d_name);
		count++;
	}
	closedir(d);
	if (count > 0)
		log_notice("cgroup: removed %zu task cgroup(s) left by a previous run: %s",
		    count, names);
}

int
cgroup_setup(const char *mode, const char *root, char **cause)
{
	struct cgroup_info info;
	char buf[512], pid[32];
	int rootfd = -1, daemonfd = -1;

	if (cgroup_probe(mode, root, &info, cause) == -1)
		return -1;
	if (!info.cgroup) {
		cgroup_state = info;
		log_info("containment: process (%s)", info.why);
		return 0;
	}
	if ((rootfd = open(info.root, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) == -1)
		goto fail;
	if ((mkdirat(rootfd, "daemon", 0755) == -1 && errno != EEXIST) ||
	    (mkdirat(rootfd, "tasks", 0755) == -1 && errno != EEXIST))
		goto fail;
	if ((daemonfd = openat(rootfd, "daemon", O_RDONLY | O_DIRECTORY | O_CLOEXEC)) == -1)
		goto fail;
	snprintf(pid, sizeof pid, "%ld", (long)getpid());
	if (cgroup_write_at(daemonfd, "cgroup.procs", pid) == -1)
		goto fail;
	if ((cgroup_tasks_fd = openat(rootfd, "tasks", O_RDONLY | O_DIRECTORY |
	    O_CLOEXEC)) == -1)
		goto fail;
	/* Controllers: on for the root's children, then for the tasks' cgroups. */
	for (size_t i = 0; i < sizeof cgroup_controllers / sizeof cgroup_controllers[0]; i++) {
		char plus[16];

		if (!(info.controllers & cgroup_controllers[i].bit))
			continue;
		snprintf(plus, sizeof plus, "+%s", cgroup_controllers[i].name);
		if (cgroup_write_at(rootfd, "cgroup.subtree_control", plus) == -1 ||
		    cgroup_write_at(cgroup_tasks_fd, "cgroup.subtree_control", plus) == -1)
			log_warn("cgroup: cannot enable the %s controller for tasks",
			    cgroup_controllers[i].name);
	}
	info.controllers = 0;
	if (cgroup_read_at(cgroup_tasks_fd, "cgroup.subtree_control", buf, sizeof buf) >= 0)
		for (size_t i = 0; i < sizeof cgroup_controllers / sizeof cgroup_controllers[0]; i++)
			if (strstr(buf, cgroup_controllers[i].name) != NULL)
				info.controllers |= cgroup_controllers[i].bit;
	close(daemonfd);
	close(rootfd);
	cgroup_state = info;
	if (pthread_key_create(&cgroup_kept, cgroup_kept_free) != 0)
		goto fail;
	cgroup_clean_leftovers();
	log_info("containment: cgroup (%s; controllers:%s%s%s%s)", info.root,
	    info.controllers & CGROUP_MEMORY ? " memory" : "",
	    info.controllers & CGROUP_PIDS ? " pids" : "",
	    info.controllers & CGROUP_CPU ? " cpu" : "",
	    info.controllers == 0 ? " none" : "");
	return 0;

fail:
	snprintf(info.why, sizeof info.why, "cannot set up %s: %s", info.root,
	    strerror(errno));
	if (daemonfd != -1)
		close(daemonfd);
	if (rootfd != -1)
		close(rootfd);
	if (cgroup_tasks_fd != -1)
		close(cgroup_tasks_fd);
	cgroup_tasks_fd = -1;
	info.cgroup = false;
	info.controllers = 0;
	cgroup_state = info;
	if (mode != NULL && strcmp(mode, "cgroup") == 0)
		return cause_set(cause, "containment = cgroup, but %s", info.why);
	log_warnx("containment: process (%s)", info.why);
	return 0;
}

/* Writes a limit's file when it differs from what the cgroup has. */
static int
cgroup_limit_set(struct cgroup_task *ct, const char *file, uint64_t *applied,
    uint64_t want)
{
	bool cpu = strcmp(file, "cpu.max") == 0;
	char v[64];

	if (*applied == want)
		return 0;
	/* cpu.max: a quota per 100 ms period, 1000 millicores = 100000 us */
	if (want == 0)
		snprintf(v, sizeof v, "max%s", cpu ? " 100000" : "");
	else if (cpu)
		snprintf(v, sizeof v, "%" PRIu64 " 100000", want * 100);
	else
		snprintf(v, sizeof v, "%" PRIu64, want);
	if (cgroup_write_at(ct->dirfd, file, v) == -1)
		return -1;
	*applied = want;
	return 0;
}

/* A new, empty ROOT/tasks/wN. */
static int
cgroup_task_new(struct cgroup_task *ct, char **cause)
{
	*ct = (struct cgroup_task){ .dirfd = -1, .events_fd = -1, .peak_fd = -1 };
	snprintf(ct->name, sizeof ct->name, "w%u", atomic_fetch_add(&cgroup_seq, 1));
	if (mkdirat(cgroup_tasks_fd, ct->name, 0755) == -1) {
		if (errno != EEXIST)
			return cause_set(cause, "cannot create cgroup %s/tasks/%s: %s",
			    cgroup_state.root, ct->name, strerror(errno));
		log_warnx("cgroup: tasks/%s exists already: removing it", ct->name);
		cgroup_remove_tree(cgroup_tasks_fd, ct->name,
		    clock_now_us() / 1000 + CGROUP_LEFTOVER_WAIT_MS);
		if (mkdirat(cgroup_tasks_fd, ct->name, 0755) == -1)
			return cause_set(cause, "cannot create cgroup %s/tasks/%s: %s",
			    cgroup_state.root, ct->name, strerror(errno));
	}
	/* O_RDONLY, not O_PATH: CLONE_INTO_CGROUP wants a real directory fd */
	if ((ct->dirfd = openat(cgroup_tasks_fd, ct->name, O_RDONLY | O_DIRECTORY |
	    O_CLOEXEC)) == -1 ||
	    (ct->events_fd = openat(ct->dirfd, "cgroup.events", O_RDONLY |
	    O_CLOEXEC)) == -1) {
		cause_set(cause, "cannot open cgroup %s/tasks/%s: %s",
		    cgroup_state.root, ct->name, strerror(errno));
		ct->empty = true;
		cgroup_release(ct);
		return -1;
	}
	if (cgroup_state.controllers & CGROUP_MEMORY) {
		ct->peak_fd = openat(ct->dirfd, "memory.peak", O_RDWR | O_CLOEXEC);
		if (ct->peak_fd == -1)  /* before Linux 6.12 it cannot be written */
			ct->peak_fd = openat(ct->dirfd, "memory.peak", O_RDONLY | O_CLOEXEC);
		/* swap would let a task pass its limit; no swap file: nothing to do */
		if (cgroup_write_at(ct->dirfd, "memory.swap.max", "0") == -1 &&
		    errno != ENOENT)
			log_warn("cgroup: tasks/%s: memory.swap.max", ct->name);
		/* one OOM kill ends the whole task, not a random member */
		cgroup_write_at(ct->dirfd, "memory.oom.group", "1");
	}
	return 0;
}

/*
 * The worker's kept cgroup, if it can serve another task: its memory.peak
 * must reset (without the memory controller there is none).
 */
static bool
cgroup_task_reuse(struct cgroup_task *ct)
{
	struct cgroup_task *kept = pthread_getspecific(cgroup_kept);

	if (kept == NULL)
		return false;
	pthread_setspecific(cgroup_kept, NULL);
	*ct = *kept;
	free(kept);
	if ((cgroup_state.controllers & CGROUP_MEMORY) &&
	    (ct->peak_fd == -1 || pwrite(ct->peak_fd, "reset\n", 6, 0) != 6)) {
		cgroup_release(ct);
		return false;
	}
	ct->empty = false;
	return true;
}

int
cgroup_task_create(struct cgroup_task *ct, const struct cgroup_limits *lim,
    char **cause)
{
	if (!cgroup_task_reuse(ct) && cgroup_task_new(ct, cause) == -1)
		return -1;
	if (cgroup_limit_set(ct, "memory.max", &ct->applied.memory_bytes,
	    lim->memory_bytes) == -1 ||
	    cgroup_limit_set(ct, "pids.max", &ct->applied.pids, lim->pids) == -1 ||
	    cgroup_limit_set(ct, "cpu.max", &ct->applied.cpu_millicores,
	    lim->cpu_millicores) == -1) {
		cause_set(cause, "cannot set the limits of cgroup %s/tasks/%s: %s",
		    cgroup_state.root, ct->name, strerror(errno));
		ct->empty = true;
		cgroup_release(ct);
		return -1;
	}
	return 0;
}

/* Whether pid is in procs, a cgroup.procs text (one pid a line). */
static bool
cgroup_procs_has(const char *procs, pid_t pid)
{
	for (const char *p = procs; *p != '\0';) {
		char *end;
		long v = strtol(p, &end, 10);

		if (end == p)
			break;
		if (v == (long)pid)
			return true;
		p = end;
	}
	return false;
}

void
cgroup_task_signal(struct cgroup_task *ct, int sig)
{
	char buf[4096], again[4096];
	int fds[CGROUP_SIGNAL_MAX];
	pid_t pids[CGROUP_SIGNAL_MAX];
	size_t n = 0;

	/*
	 * The pids come from the cgroup itself, but one may exit and be given
	 * to a stranger (pid_max is often 32768) before it is signalled. So
	 * each is pinned with a pidfd first, then signalled only if it is in
	 * the cgroup still: the process the pidfd names is then the task's (a
	 * pid the task's reaped process had can only be in its cgroup again if
	 * the task made it). A longer list than buf holds: the group signal
	 * and cgroup.kill still reach the rest.
	 */
	if (ct->dirfd == -1 || cgroup_read_at(ct->dirfd, "cgroup.procs", buf, sizeof buf) <= 0)
		return;
	for (char *p = buf, *end; *p != '\0' && n < CGROUP_SIGNAL_MAX; p = end) {
		long pid = strtol(p, &end, 10);

		if (end == p)
			break;
		if (pid > 0 && (fds[n] = (int)pidfd_open((pid_t)pid, 0)) != -1)
			pids[n++] = (pid_t)pid;
	}
	if (n > 0 && cgroup_read_at(ct->dirfd, "cgroup.procs", again, sizeof again) < 0)
		again[0] = '\0';
	for (size_t i = 0; i < n; i++) {
		if (cgroup_procs_has(again, pids[i]))
			pidfd_send_signal(fds[i], sig, NULL, 0);
		close(fds[i]);
	}
}

/* True when cgroup.events says "populated 1" (or cannot be read). */
static bool
cgroup_populated(struct cgroup_task *ct)
{
	char buf[128];
	ssize_t n;

	if (ct->events_fd == -1)
		return false;
	if ((n = pread(ct->events_fd, buf, sizeof buf - 1, 0)) < 0)
		return true;
	buf[n] = '\0';
	return strstr(buf, "populated 0") == NULL;
}

int
cgroup_task_kill_wait(struct cgroup_task *ct, uint64_t timeout_ms)
{
	uint64_t deadline = clock_now_us() / 1000 + timeout_ms;

	if (ct->dirfd == -1)
		return 0;
	if (!cgroup_populated(ct)) {
		ct->empty = true;
		return 0;
	}
	if (cgroup_write_at(ct->dirfd, "cgroup.kill", "1") == -1) {
		/* before Linux 5.14: SIGKILL to each, again as long as it takes */
		cgroup_task_signal(ct, SIGKILL);
	}
	while (cgroup_populated(ct)) {
		struct pollfd pfd = { .fd = ct->events_fd, .events = POLLPRI };
		uint64_t now = clock_now_us() / 1000;

		if (now >= deadline) {
			log_warnx("cgroup: tasks/%s still has processes after SIGKILL",
			    ct->name);
			return -1;
		}
		/* the file changes (POLLPRI) when populated does */
		if (poll(&pfd, 1, (int)(deadline - now > 1000 ? 1000 : deadline - now)) == -1 &&
		    errno != EINTR)
			return -1;
		cgroup_task_signal(ct, SIGKILL);  /* without cgroup.kill; a no-op with it */
	}
	ct->empty = true;
	return 0;
}

void
cgroup_task_usage(struct cgroup_task *ct, struct cgroup_usage *u)
{
	uint64_t user = 0, system = 0, oom = 0;
	char buf[1024];
	ssize_t n;

	memset(u, 0, sizeof *u);
	if (ct->dirfd == -1)
		return;
	/* the counters of a kept cgroup count its earlier tasks too: the difference */
	if (cgroup_read_at(ct->dirfd, "cpu.stat", buf, sizeof buf) > 0 &&
	    cgroup_key(buf, "user_usec", &user) && cgroup_key(buf, "system_usec", &system)) {
		u->have_cpu = true;
		u->user_us = user - ct->base_user_us;
		u->system_us = system - ct->base_system_us;
		ct->base_user_us = user;
		ct->base_system_us = system;
	}
	if (!(cgroup_state.controllers & CGROUP_MEMORY))
		return;
	if (ct->peak_fd != -1 && (n = pread(ct->peak_fd, buf, sizeof buf - 1, 0)) > 0) {
		buf[n] = '\0';
		u->memory_peak = strtoull(buf, NULL, 10);
	}
	if (cgroup_read_at(ct->dirfd, "memory.events", buf, sizeof buf) > 0 &&
	    cgroup_key(buf, "oom_kill", &oom)) {
		u->oom_kills = oom - ct->base_oom;
		ct->base_oom = oom;
	}
}

/* Closes the cgroup's fds and removes it (an empty one goes; a busy one stays). */
static void
cgroup_release(struct cgroup_task *ct)
{
	if (ct->peak_fd != -1)
		close(ct->peak_fd);
	if (ct->events_fd != -1)
		close(ct->events_fd);
	if (ct->dirfd != -1) {
		close(ct->dirfd);
		if (unlinkat(cgroup_tasks_fd, ct->name, AT_REMOVEDIR) == -1)
			log_warn("cgroup: cannot remove %s/tasks/%s%s", cgroup_state.root,
			    ct->name, ct->empty ? "" : " (its processes are killed at the "
			    "next start)");
	}
	ct->dirfd = ct->events_fd = ct->peak_fd = -1;
}

/* A worker thread ends: its kept cgroup goes. */
static void
cgroup_kept_free(void *kept)
{
	cgroup_release(kept);
	free(kept);
}

void
cgroup_task_destroy(struct cgroup_task *ct)
{
	struct cgroup_task *kept;

	if (ct->dirfd == -1)
		return;
	if (ct->empty && pthread_getspecific(cgroup_kept) == NULL &&
	    (kept = malloc(sizeof *kept)) != NULL) {
		*kept = *ct;
		if (pthread_setspecific(cgroup_kept, kept) == 0) {
			ct->dirfd = ct->events_fd = ct->peak_fd = -1;
			return;
		}
		free(kept);
	}
	cgroup_release(ct);
}
