/*
 * tpbench-idle.c: hold many idle connections, for the daemon's memory per
 * connection. A connection counts as held once the server has answered a
 * ping on it, so the server has really accepted it and built its state.
 * When all are held, one line goes to stdout; then tpbench waits, measuring
 * nothing, until stdin closes or SIGINT/SIGTERM arrives.
 */
#include "config.h"

#include <sys/epoll.h>
#include <sys/signalfd.h>

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tpbench.h"
#include "tpbench-scan.h"

/* Answers on fd (one ping each); returns 1 when its pong came, -1 on failure. */
static int
idle_answer(int fd, unsigned index)
{
	char buf[4096];
	struct scan_line sl;
	char *nl;
	ssize_t n;

	n = read(fd, buf, sizeof buf);
	if (n == -1 && (errno == EAGAIN || errno == EINTR))
		return 0;
	if (n <= 0) {
		fprintf(stderr, "tpbench: idle connection %u: %s\n", index,
		    n == 0 ? "closed by the server" : strerror(errno));
		return -1;
	}
	nl = memchr(buf, '\n', (size_t)n);
	if (nl == NULL || scan_line(buf, nl, &sl) == -1 ||
	    !scan_is(&sl.event, "pong")) {
		fprintf(stderr, "tpbench: idle connection %u: answered %.*s\n",
		    index, (int)(nl ? nl - buf : n), buf);
		return -1;
	}
	return 1;
}

/* Reads the pongs that are ready; returns how many came, or -1. */
static int
idle_collect(int ep, int timeout_ms)
{
	struct epoll_event evs[256];
	int n, k, got = 0, rc;

	n = epoll_wait(ep, evs, 256, timeout_ms);
	for (k = 0; k < n; k++) {
		unsigned index = evs[k].data.u32;
		int fd = (int)(evs[k].data.u64 >> 32);

		rc = idle_answer(fd, index);
		if (rc == -1)
			return -1;
		if (rc == 1) {
			/* answered: nothing more to read, stop watching */
			epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL);
			got++;
		}
	}
	return got;
}

static int
idle_wait_for_end(const struct opts *o, int *fds)
{
	struct epoll_event ev, evs[16];
	sigset_t set;
	unsigned i;
	int ep, sfd, n, k;

	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	sigprocmask(SIG_BLOCK, &set, NULL);
	sfd = signalfd(-1, &set, SFD_CLOEXEC);
	ep = epoll_create1(EPOLL_CLOEXEC);
	ev.events = EPOLLIN;
	ev.data.u64 = (uint64_t)-1;
	epoll_ctl(ep, EPOLL_CTL_ADD, sfd, &ev);
	ev.data.u64 = (uint64_t)-2;
	epoll_ctl(ep, EPOLL_CTL_ADD, 0, &ev);
	/* a connection the server closes while held is reported */
	for (i = 0; i < o->idle; i++) {
		ev.events = EPOLLRDHUP;
		ev.data.u64 = i;
		epoll_ctl(ep, EPOLL_CTL_ADD, fds[i], &ev);
	}
	for (;;) {
		n = epoll_wait(ep, evs, 16, -1);
		for (k = 0; k < n; k++) {
			if (evs[k].data.u64 == (uint64_t)-1)
				return 0;
			if (evs[k].data.u64 == (uint64_t)-2) {
				char buf[256];

				if (read(0, buf, sizeof buf) <= 0)
					return 0;
				continue;
			}
			fprintf(stderr, "tpbench: idle connection %u closed by "
			    "the server\n", (unsigned)evs[k].data.u64);
			epoll_ctl(ep, EPOLL_CTL_DEL, fds[evs[k].data.u64], NULL);
		}
	}
}

int
idle_run(const struct opts *o, char **cause)
{
	struct epoll_event ev;
	uint64_t t0 = hist_now_ns();
	unsigned i, held = 0;
	int *fds, ep, rc;
	char line[64];

	signal(SIGPIPE, SIG_IGN);
	if (sock_raise_nofile(o->idle + 64, cause) == -1)
		return -1;
	fds = malloc(o->idle * sizeof *fds);
	ep = epoll_create1(EPOLL_CLOEXEC);
	if (fds == NULL || ep == -1) {
		if (asprintf(cause, "out of memory") == -1)
			*cause = NULL;
		free(fds);
		return -1;
	}
	for (i = 0; i < o->idle; i++)
		fds[i] = -1;
	for (i = 0; i < o->idle; i++) {
		int len;

		fds[i] = sock_connect(&o->target, o->connect_timeout_ms, cause);
		if (fds[i] == -1)
			goto fail;
		sock_nonblock(fds[i]);
		len = snprintf(line, sizeof line, "{\"id\":%u,\"op\":\"ping\"}\n", i);
		if (write(fds[i], line, (size_t)len) != len) {
			if (asprintf(cause, "idle connection %u: write failed", i) == -1)
				*cause = NULL;
			goto fail;
		}
		ev.events = EPOLLIN;
		ev.data.u64 = ((uint64_t)fds[i] << 32) | i;
		epoll_ctl(ep, EPOLL_CTL_ADD, fds[i], &ev);
		/* take the pongs as they come, so no buffer piles up */
		if (i % 128 == 127) {
			if ((rc = idle_collect(ep, 0)) == -1)
				goto fail;
			held += (unsigned)rc;
		}
	}
	while (held < o->idle) {
		if ((rc = idle_collect(ep, 10000)) <= 0) {
			if (rc == 0 && asprintf(cause, "%u of %u idle connections "
			    "unanswered after 10 s", o->idle - held, o->idle) == -1)
				*cause = NULL;
			goto fail;
		}
		held += (unsigned)rc;
	}
	close(ep);
	ep = -1;
	if (o->json)
		printf("{\"idle\":%u,\"connect_s\":%.3f}\n", held,
		    (double)(hist_now_ns() - t0) / 1e9);
	else
		printf("idle: %u connections held (each answered a ping) in "
		    "%.3f s; close stdin or send SIGTERM to end\n", held,
		    (double)(hist_now_ns() - t0) / 1e9);
	fflush(stdout);
	rc = idle_wait_for_end(o, fds);
	for (i = 0; i < o->idle; i++)
		close(fds[i]);
	free(fds);
	return rc;
fail:
	for (i = 0; i < o->idle; i++)
		if (fds[i] != -1)
			close(fds[i]);
	free(fds);
	if (ep != -1)
		close(ep);
	if (*cause == NULL && asprintf(cause, "idle connections failed (see above)") == -1)
		*cause = NULL;
	return -1;
}
