/* pgroup.c: killing an exec task's process group and waiting until it is gone (see pgroup.h). */
#include "config.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/pidfd.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "pgroup.h"

void
pgroup_signal(pid_t pgid, int leader_pidfd, int sig)
{
	if (kill(-pgid, sig) == -1 && errno != ESRCH)
		log_warn("exec: kill(-%ld, %d)", (long)pgid, sig);
	if (leader_pidfd != -1 && getpgid(pgid) != pgid)
		pidfd_send_signal(leader_pidfd, sig, NULL, 0);
}

/*
 * Reads /proc/PID/stat: the state letter and the process group. The command
 * name in parentheses may hold anything, so parsing starts after the last ')'.
 * Returns 0, or -1 when the process is gone or the file is unreadable.
 */
static int
pgroup_stat(const char *pid, char *state, long *pgrp)
{
	char path[64], buf[512], *p;
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
	if ((p = strrchr(buf, ')')) == NULL)
		return -1;
	/* ") S ppid pgrp ..." */
	if (sscanf(p + 1, " %c %*d %ld", state, pgrp) != 2)
		return -1;
	return 0;
}

/*
 * Opens a pidfd for every live process of group pgid, SIGKILLing each
 * (again: one may have been forked just as the group was signalled). Grows
 * *fds as needed. Returns the count, or -1 when /proc cannot be read.
 */
static int
pgroup_collect(pid_t pgid, struct pollfd **fds, size_t *size)
{
	struct dirent *de;
	DIR *d;
	int n = 0;

	if ((d = opendir("/proc")) == NULL)
		return -1;
	while ((de = readdir(d)) != NULL) {
		char state;
		long pgrp;
		int fd;

		if (!isdigit((unsigned char)de->d_name[0]))
			continue;
		if (pgroup_stat(de->d_name, &state, &pgrp) == -1 ||
		    pgrp != (long)pgid || state == 'Z' || state == 'X')
			continue;
		if ((fd = pidfd_open((pid_t)atol(de->d_name), 0)) == -1)
			continue;       /* gone meanwhile */
		pidfd_send_signal(fd, SIGKILL, NULL, 0);
		if ((size_t)n == *size) {
			size_t grown = *size != 0 ? *size * 2 : 8;
			struct pollfd *p = realloc(*fds, grown * sizeof *p);

			if (p == NULL) {
				close(fd);
				break;  /* wait for the ones we have */
			}
			*fds = p;
			*size = grown;
		}
		(*fds)[n++] = (struct pollfd){ .fd = fd, .events = POLLIN };
	}
	closedir(d);
	return n;
}

static uint64_t
pgroup_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

int
pgroup_kill_wait(pid_t pgid, uint64_t timeout_ms)
{
	struct pollfd *fds = NULL;
	size_t size = 0;
	uint64_t deadline = pgroup_now_ms() + timeout_ms;
	int n, left;

	/* Fast path: the leader was alone (and is reaped). */
	if (kill(-pgid, SIGKILL) == -1 && errno == ESRCH)
		return 0;
	/*
	 * Someone is left: a descendant, or only zombies of orphans that
	 * their new parent has not reaped yet. Wait on a pidfd for each live
	 * one; a pidfd turns readable when its process has exited.
	 */
	if ((n = pgroup_collect(pgid, &fds, &size)) == -1) {
		log_warn("exec: cannot read /proc to wait for group %ld", (long)pgid);
		return -1;
	}
	left = n;
	while (left > 0) {
		uint64_t now = pgroup_now_ms();
		int ready;

		if (now >= deadline)
			break;
		ready = poll(fds, (nfds_t)n, (int)(deadline - now > 1000 ? 1000 : deadline - now));
		if (ready == -1 && errno != EINTR)
			break;
		for (int i = 0; i < n && ready > 0; i++) {
			if (fds[i].fd >= 0 && fds[i].revents != 0) {
				close(fds[i].fd);
				fds[i].fd = -1; /* poll skips negative fds */
				left--;
				ready--;
			}
		}
	}
	for (int i = 0; i < n; i++)
		if (fds[i].fd >= 0)
			close(fds[i].fd);
	free(fds);
	if (left > 0)
		log_warnx("exec: %d process(es) of group %ld still running after SIGKILL",
		    left, (long)pgid);
	return left;
}
