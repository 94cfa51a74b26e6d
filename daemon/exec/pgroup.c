/* pgroup.c: ending an exec task's processes without cgroups (see pgroup.h). */
#include "config.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/pidfd.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/log.h"
#include "pgroup.h"

/*
 * The running tasks (process containment), for attributing orphans; held
 * too while orphans are reaped (pgroup.h).
 */
static pthread_mutex_t pgroup_lock = PTHREAD_MUTEX_INITIALIZER;
static struct pgroup_task *pgroup_running;
static bool pgroup_subreaper;
/*
 * The main thread's /proc/self/task/PID/children, open for good
 * (pgroup_init): every task's end reads it (pgroup_orphans), and opening
 * it each time (a path walk, a dentry made and killed) was a tenth of a
 * worker's time a `true` task. A seq_file: pread at offset 0 makes it
 * anew, and concurrent readers take its lock in turn. -1: opened per read.
 */
static int pgroup_children_fd = -1;
static long pgroup_hz;                  /* /proc's clock ticks a second; set at start */

/* One process of a /proc walk. */
struct pgroup_proc {
	pid_t pid, ppid, pgrp, sid;
	unsigned long long start;       /* clock ticks after boot */
	char state;
	signed char mark;               /* -1 unknown, 0 not the task's, 1 the task's */
};

struct pgroup_walk {
	struct pgroup_proc *p;
	size_t n, size;
	pid_t *orphans;                 /* the main thread's children, sorted */
	size_t norphans, orphans_size;
};

/* The main thread's children file (see pgroup_children_fd), or -1. */
static int
pgroup_children_open(void)
{
	char path[64];

	snprintf(path, sizeof path, "/proc/self/task/%ld/children", (long)getpid());
	return open(path, O_RDONLY | O_CLOEXEC);
}

void
pgroup_init(bool subreaper)
{
	sigset_t chld;

	/* blocked, it stays pending once and costs nothing more: no thread is woken */
	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	pthread_sigmask(SIG_BLOCK, &chld, NULL);
	pgroup_hz = sysconf(_SC_CLK_TCK);
	if (!subreaper)
		return;
	if (prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == -1) {
		log_warn("exec: PR_SET_CHILD_SUBREAPER: processes that leave a task's "
		    "group and lose their parent are not followed");
		return;
	}
	pgroup_subreaper = true;
	pgroup_children_fd = pgroup_children_open();
}

void
pgroup_signal(pid_t pgid, int leader_pidfd, int sig)
{
	/* -0 is tpd's own group and -1 is every process it may signal: never a task's */
	if (pgid <= 1) {
		log_warnx("exec: no signal %d to process group %ld (not a task's: a bug)", sig,
		    (long)pgid);
		return;
	}
	if (kill(-pgid, sig) == -1 && errno != ESRCH)
		log_warn("exec: kill(-%ld, %d)", (long)pgid, sig);
	if (leader_pidfd != -1 && getpgid(pgid) != pgid)
		pidfd_send_signal(leader_pidfd, sig, NULL, 0);
}

static unsigned long long
pgroup_now_ticks(void)
{
	unsigned long long hz = pgroup_hz > 0 ? (unsigned long long)pgroup_hz : 100;

	return clock_us(CLOCK_BOOTTIME) / (1000000ULL / hz);
}

void
pgroup_task_prepare(struct pgroup_task *pt)
{
	*pt = (struct pgroup_task){ .leader = -1, .start_ticks = pgroup_now_ticks() };
}

void
pgroup_task_begin(struct pgroup_task *pt, pid_t leader)
{
	pt->leader = leader;
	pthread_mutex_lock(&pgroup_lock);
	pt->next = pgroup_running;
	pgroup_running = pt;
	pthread_mutex_unlock(&pgroup_lock);
}

static void
pgroup_task_end(struct pgroup_task *pt)
{
	pthread_mutex_lock(&pgroup_lock);
	for (struct pgroup_task **pp = &pgroup_running; *pp != NULL; pp = &(*pp)->next) {
		if (*pp == pt) {
			*pp = pt->next;
			break;
		}
	}
	pthread_mutex_unlock(&pgroup_lock);
	pt->next = NULL;
}

/*
 * Reads /proc/PID/stat. The command name in parentheses may hold anything,
 * so parsing starts after the last ')'. Returns 0, or -1 when the process
 * is gone or the file is unreadable.
 */
static int
pgroup_stat(const char *pid, struct pgroup_proc *p)
{
	char path[64], buf[1024], *s;
	int ppid, pgrp, sid;
	ssize_t n;
	int fd;

	snprintf(path, sizeof path, "/proc/%s/stat", pid);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) == -1)
		return -1;
	n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	if ((s = strrchr(buf, ')')) == NULL)
		return -1;
	/* ") S ppid pgrp session tty tpgid flags 4x faults 4x times prio nice threads 0 start" */
	if (sscanf(s + 1, " %c %d %d %d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d "
	    "%*d %*d %*d %*d %llu", &p->state, &ppid, &pgrp, &sid, &p->start) != 5)
		return -1;
	p->pid = (pid_t)atol(pid);
	p->ppid = ppid;
	p->pgrp = pgrp;
	p->sid = sid;
	p->mark = -1;
	return 0;
}

static int
pgroup_proc_cmp(const void *a, const void *b)
{
	const struct pgroup_proc *x = a, *y = b;

	return (x->pid > y->pid) - (x->pid < y->pid);
}

/* Every process, sorted by pid. Returns 0, or -1 when /proc cannot be read. */
static int
pgroup_walk(struct pgroup_walk *w)
{
	struct dirent *de;
	DIR *d;

	w->n = 0;
	if ((d = opendir("/proc")) == NULL)
		return -1;
	while ((de = readdir(d)) != NULL) {
		if (!isdigit((unsigned char)de->d_name[0]))
			continue;
		if (w->n == w->size) {
			size_t grown = w->size != 0 ? w->size * 2 : 256;
			struct pgroup_proc *p = realloc(w->p, grown * sizeof *p);

			if (p == NULL)
				break;
			w->p = p;
			w->size = grown;
		}
		if (pgroup_stat(de->d_name, &w->p[w->n]) == 0)
			w->n++;
	}
	closedir(d);
	if (w->n > 0)
		qsort(w->p, w->n, sizeof *w->p, pgroup_proc_cmp);
	return 0;
}

static struct pgroup_proc *
pgroup_find(struct pgroup_walk *w, pid_t pid)
{
	struct pgroup_proc key = { .pid = pid };

	if (w->n == 0)
		return NULL;
	return bsearch(&key, w->p, w->n, sizeof *w->p, pgroup_proc_cmp);
}

static int
pgroup_pid_cmp(const void *a, const void *b)
{
	pid_t x = *(const pid_t *)a, y = *(const pid_t *)b;

	return (x > y) - (x < y);
}

size_t
pgroup_children_trim(char *buf, size_t n, size_t size)
{
	if (n + 1 < size || n == 0 || isspace((unsigned char)buf[n - 1]))
		return n;
	while (n > 0 && !isspace((unsigned char)buf[n - 1]))
		n--;
	buf[n] = '\0';
	return n;
}

/*
 * The orphans tpd adopted: a subreaper's new children are its first live
 * thread's, the main thread's, which spawns nothing itself (the leaders are
 * the workers' children). Fills w->orphans when w is not NULL. Returns the
 * count, or -1 when /proc/self/task/PID/children cannot be read.
 */
static int
pgroup_orphans(struct pgroup_walk *w)
{
	char buf[4096];
	ssize_t n;
	int fd, count = 0;

	if ((fd = pgroup_children_fd) != -1)
		n = pread(fd, buf, sizeof buf - 1, 0);
	else {
		if ((fd = pgroup_children_open()) == -1)
			return -1;
		n = read(fd, buf, sizeof buf - 1);
		close(fd);
	}
	if (n < 0)
		return -1;
	buf[n] = '\0';
	pgroup_children_trim(buf, (size_t)n, sizeof buf);
	if (w != NULL)
		w->norphans = 0;
	for (char *p = buf, *end; *p != '\0'; p = end) {
		long pid = strtol(p, &end, 10);

		if (end == p)
			break;
		count++;
		if (w == NULL)
			continue;
		if (w->norphans == w->orphans_size) {
			size_t grown = w->orphans_size ? w->orphans_size * 2 : 64;
			pid_t *o = realloc(w->orphans, grown * sizeof *o);

			if (o == NULL)
				return -1;
			w->orphans = o;
			w->orphans_size = grown;
		}
		w->orphans[w->norphans++] = (pid_t)pid;
	}
	if (w != NULL && w->norphans > 0)
		qsort(w->orphans, w->norphans, sizeof *w->orphans, pgroup_pid_cmp);
	/* a full buffer may have cut the list: then there are many, and that is all we need */
	return count;
}

static bool
pgroup_is_orphan(const struct pgroup_walk *w, pid_t pid)
{
	return w->norphans > 0 &&
	    bsearch(&pid, w->orphans, w->norphans, sizeof pid, pgroup_pid_cmp) != NULL;
}

/* Is pid the leader of a running task (another one than pt)? Under pgroup_lock. */
static bool
pgroup_other_leader(const struct pgroup_task *pt, pid_t pid)
{
	for (const struct pgroup_task *r = pgroup_running; r != NULL; r = r->next)
		if (r != pt && r->leader == pid)
			return true;
	return false;
}

/*
 * Is p one of pt's processes (pgroup.h)? Under pgroup_lock. reused: the
 * leader (reaped by now) has a live namesake, so its pid was given to a
 * stranger, and a group or session of that id is the stranger's.
 */
static bool
pgroup_is_task(struct pgroup_walk *w, const struct pgroup_task *pt,
    struct pgroup_proc *p, pid_t self, bool reused)
{
	struct pgroup_proc *chain[64];
	size_t n = 0;
	bool mine = false;

	/* Up the parent links to a process whose answer is known, or a root. */
	while (p != NULL && p->mark == -1 && n < sizeof chain / sizeof chain[0]) {
		chain[n++] = p;
		if (p->pid == self) {
			p->mark = 0;
			break;
		}
		if (!reused && (p->pgrp == pt->leader || p->sid == pt->leader)) {
			p->mark = 1;
			break;
		}
		if (p->ppid == self) {
			/* an orphan tpd adopted, or another task's leader */
			if (!pgroup_is_orphan(w, p->pid) || pgroup_other_leader(pt, p->pid) ||
			    pgroup_other_leader(pt, p->sid) || pgroup_other_leader(pt, p->pgrp))
				p->mark = 0;
			else
				p->mark = p->start >= pt->start_ticks;
			break;
		}
		p = pgroup_find(w, p->ppid);
	}
	if (n > 0 && chain[n - 1]->mark != -1)
		mine = chain[n - 1]->mark == 1;
	else if (p != NULL && p->mark != -1)
		mine = p->mark == 1;
	for (size_t i = 0; i < n; i++)
		chain[i]->mark = mine;
	return mine;
}

/* Opens a pidfd for p, checking it is still the process the walk saw. */
static int
pgroup_open(const struct pgroup_proc *p)
{
	struct pgroup_proc again;
	char pid[16];
	int fd;

	if ((fd = pidfd_open(p->pid, 0)) == -1)
		return -1;
	snprintf(pid, sizeof pid, "%ld", (long)p->pid);
	if (pgroup_stat(pid, &again) == -1 || again.start != p->start) {
		close(fd);
		return -1;
	}
	return fd;
}

/*
 * One round: SIGKILL to each live process of the task, then a wait until
 * they have exited. Returns the count found (0: none left), or -1.
 */
static int
pgroup_round(struct pgroup_walk *w, struct pgroup_task *pt, uint64_t deadline,
    int *left)
{
	struct pollfd *fds = NULL;
	size_t nfds = 0;
	pid_t self = getpid();
	int found = 0;
	bool reused;

	/* the orphans first: one adopted during the walk is seen by the next round */
	if (pgroup_orphans(w) == -1 || pgroup_walk(w) == -1)
		return -1;
	reused = pgroup_find(w, pt->leader) != NULL;
	pthread_mutex_lock(&pgroup_lock);
	for (size_t i = 0; i < w->n; i++) {
		struct pgroup_proc *p = &w->p[i];
		int fd;

		if (p->state == 'Z' || p->state == 'X' || !pgroup_is_task(w, pt, p, self, reused))
			continue;
		if (fds == NULL && (fds = calloc(w->n, sizeof *fds)) == NULL)
			break;
		if ((fd = pgroup_open(p)) == -1)
			continue;
		pidfd_send_signal(fd, SIGKILL, NULL, 0);
		fds[nfds++] = (struct pollfd){ .fd = fd, .events = POLLIN };
		found++;
	}
	pthread_mutex_unlock(&pgroup_lock);

	*left = (int)nfds;
	while (*left > 0) {
		uint64_t now = clock_now_us() / 1000;
		int ready;

		if (now >= deadline)
			break;
		ready = poll(fds, (nfds_t)nfds, (int)(deadline - now > 1000 ? 1000 : deadline - now));
		if (ready == -1 && errno != EINTR)
			break;
		for (size_t i = 0; i < nfds && ready > 0; i++) {
			if (fds[i].fd >= 0 && fds[i].revents != 0) {
				close(fds[i].fd);
				fds[i].fd = -1; /* poll skips negative fds */
				(*left)--;
				ready--;
			}
		}
	}
	for (size_t i = 0; i < nfds; i++)
		if (fds[i].fd >= 0)
			close(fds[i].fd);
	free(fds);
	return found;
}

/*
 * Reaps the orphans that have exited, from any thread: each by its pid
 * (waitid reaches a child of another thread of tpd), under pgroup_lock so
 * that no pid of the list is reaped and reused meanwhile (pgroup.h); a
 * pid of the main thread's children list is never a worker's leader.
 * Returns the count of orphans left (running ones), or -1.
 */
static int
pgroup_reap_exited(void)
{
	struct pgroup_walk w = { 0 };
	int left;

	pthread_mutex_lock(&pgroup_lock);
	if ((left = pgroup_orphans(&w)) > 0) {
		for (size_t i = 0; i < w.norphans; i++) {
			siginfo_t si;

			memset(&si, 0, sizeof si);
			if (waitid(P_PID, (id_t)w.orphans[i], &si, WEXITED | WNOHANG) == 0 &&
			    si.si_pid != 0) {
				log_debug("exec: reaped orphan %ld", (long)si.si_pid);
				left--;
			}
		}
	}
	pthread_mutex_unlock(&pgroup_lock);
	free(w.orphans);
	return left;
}

int
pgroup_kill_wait(struct pgroup_task *pt, uint64_t timeout_ms)
{
	struct pgroup_walk w = { 0 };
	uint64_t deadline = clock_now_us() / 1000 + timeout_ms;
	int found, left = 0;

	/*
	 * Fast path: the group is empty (so all of it is reaped, and its
	 * children re-parented) and tpd has no orphan, or only exited ones
	 * (reaped here): nothing is left. The leader is reaped, so its pid
	 * may name a stranger's group by now: the probe is signal 0 (the
	 * group had its SIGKILL before the reap).
	 */
	if (pt->leader <= 1) {
		log_warnx("exec: no task leader to end (%ld: a bug)", (long)pt->leader);
		pgroup_task_end(pt);
		return 0;
	}
	if (kill(-pt->leader, 0) == -1 && errno == ESRCH &&
	    (!pgroup_subreaper || pgroup_orphans(NULL) == 0 || pgroup_reap_exited() == 0)) {
		pgroup_task_end(pt);
		return 0;
	}
	/* Rounds until one finds nothing: a round's kills re-parent their children. */
	do {
		if ((found = pgroup_round(&w, pt, deadline, &left)) == -1) {
			log_warn("exec: cannot read /proc to end the processes of "
			    "task leader %ld", (long)pt->leader);
			break;
		}
	} while (found > 0 && left == 0 && clock_now_us() / 1000 < deadline);
	/* those killed were waited for until they exited: orphans by now, or reaped */
	if (pgroup_subreaper)
		pgroup_reap_exited();
	free(w.p);
	free(w.orphans);
	pgroup_task_end(pt);
	if (left > 0)
		log_warnx("exec: %d process(es) of task leader %ld still running after "
		    "SIGKILL", left, (long)pt->leader);
	return found == -1 ? -1 : left;
}

void
pgroup_reap(void)
{
	siginfo_t si;

	/* busy: a task's end holds it, and reaps the exited orphans itself */
	if (!pgroup_subreaper || pthread_mutex_trylock(&pgroup_lock) != 0)
		return;
	/* __WNOTHREAD: this thread's children, the orphans, never a worker's leader */
	for (;;) {
		memset(&si, 0, sizeof si);
		if (waitid(P_ALL, 0, &si, WEXITED | WNOHANG | __WNOTHREAD) == -1 ||
		    si.si_pid == 0)
			break;
		log_debug("exec: reaped orphan %ld", (long)si.si_pid);
	}
	pthread_mutex_unlock(&pgroup_lock);
}
