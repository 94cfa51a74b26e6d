/*
 * sd-test: the systemd module against a test-owned NOTIFY_SOCKET and
 * hand-made LISTEN_FDS: READY=1, then STATUS= no more than once a second,
 * WATCHDOG=1 at half WATCHDOG_USEC only while healthy, RELOADING=1 and
 * STOPPING=1 with EXTEND_TIMEOUT_USEC; and socket activation's fds checked
 * against their names. The whole daemon under systemd's tools is
 * tests/test_systemd.py.
 */
#include "config.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <netinet/in.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "check.h"
#include "base/log.h"
#include "sd.h"



#define MAX_MSGS 256

struct msg {
	char text[512];
	double at;              /* seconds since the start */
};

static struct {
	int fd;                 /* the notify socket */
	struct msg msgs[MAX_MSGS];
	int n;
	int healthy;
	int status_calls;
	double start;
} t;

static double
now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int
hook_healthy(void *arg)
{
	return t.healthy;
}

/* Different figures on every call, so that every tick would want to send. */
static void
hook_status(void *arg, char *buf, size_t len)
{
	snprintf(buf, len, "figures %d", ++t.status_calls);
}

/* Takes every datagram waiting on the notify socket. */
static void
drain(void)
{
	char buf[512];
	ssize_t r;

	while ((r = recv(t.fd, buf, sizeof buf - 1, MSG_DONTWAIT)) > 0) {
		buf[r] = '\0';
		if (t.n < MAX_MSGS) {
			snprintf(t.msgs[t.n].text, sizeof t.msgs[t.n].text, "%s", buf);
			t.msgs[t.n].at = now() - t.start;
			t.n++;
		}
	}
}

static void
on_notify(evutil_socket_t fd, short what, void *arg)
{
	drain();
}

/* Runs base for ms milliseconds. */
static void
run_for(struct event_base *base, int ms)
{
	struct timeval tv = { .tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000 };

	event_base_loopexit(base, &tv);
	event_base_dispatch(base);
	drain();
}

static int
count(const char *prefix, int from, int to)
{
	int n = 0;

	for (int i = from; i < to; i++)
		n += strncmp(t.msgs[i].text, prefix, strlen(prefix)) == 0;
	return n;
}

static int
first(const char *prefix)
{
	for (int i = 0; i < t.n; i++)
		if (strncmp(t.msgs[i].text, prefix, strlen(prefix)) == 0)
			return i;
	return -1;
}

static char dir[] = "/tmp/sd-test.XXXXXX";   /* the tests' sockets (main makes it) */

static void
test_notify(void)
{
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	struct sdn_hooks hooks = { hook_healthy, hook_status, NULL };
	struct event_base *base = event_base_new();
	struct event *ev;
	char pid[32];
	int mark, last_status = -1;

	snprintf(sun.sun_path, sizeof sun.sun_path, "%s/notify", dir);
	t.fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (t.fd == -1 || bind(t.fd, (struct sockaddr *)&sun, sizeof sun) == -1) {
		perror("notify socket");
		exit(1);
	}
	setenv("NOTIFY_SOCKET", sun.sun_path, 1);
	setenv("WATCHDOG_USEC", "200000", 1);           /* pings every 100 ms */
	snprintf(pid, sizeof pid, "%d", (int)getpid());
	setenv("WATCHDOG_PID", pid, 1);
	t.healthy = 1;
	t.start = now();
	ev = event_new(base, t.fd, EV_READ | EV_PERSIST, on_notify, NULL);
	event_add(ev, NULL);

	sdn_setup(base, &hooks);
	sdn_status("starting");         /* before READY=1: sent, nothing else runs */
	run_for(base, 50);
	EXPECT(t.n == 1 && strcmp(t.msgs[0].text, "STATUS=starting") == 0);
	t.n = 0;

	sdn_ready();
	run_for(base, 2300);
	EXPECT(t.n > 0 && strcmp(t.msgs[0].text, "READY=1") == 0);
	/* the first figures wait for the second after "starting" to end */
	EXPECT(first("WATCHDOG=1") == 1);
	EXPECT(first("STATUS=") > 1 && t.msgs[first("STATUS=")].at >= 1.0);
	/* STATUS= at most once a second, though the figures change on every tick */
	for (int i = 0; i < t.n; i++) {
		if (strncmp(t.msgs[i].text, "STATUS=", 7) != 0)
			continue;
		/*
		 * "at" is when this test read the datagram, not when it was sent:
		 * a read that comes late makes the next gap look shorter. tpd waits
		 * a full second by its own clock (sd.c), so 50 ms of read jitter is
		 * allowed here; a daemon that sent on every tick would be 0.1 s apart.
		 */
		if (last_status >= 0)
			EXPECT(t.msgs[i].at - t.msgs[last_status].at >= 0.95);
		last_status = i;
	}
	EXPECT(count("STATUS=", 0, t.n) >= 1 && count("STATUS=", 0, t.n) <= 3);
	EXPECT(count("WATCHDOG=1", 0, t.n) >= 10);
	printf("ok: READY=1, then STATUS= %d times in 2.3 s, WATCHDOG=1 %d times\n",
	    count("STATUS=", 0, t.n), count("WATCHDOG=1", 0, t.n));

	/* an explicit status within the second waits, and the newest one wins */
	mark = t.n;
	t.status_calls = 0;
	sdn_teardown();
	sdn_setup(base, &(struct sdn_hooks){ hook_healthy, NULL, NULL });
	setenv("WATCHDOG_USEC", "200000", 1);
	sdn_status("one");
	sdn_status("two");
	sdn_status("three");
	run_for(base, 10);
	EXPECT(count("STATUS=", mark, t.n) == 1);
	sdn_ready();
	run_for(base, 1300);
	EXPECT(count("STATUS=one", mark, t.n) == 1);
	EXPECT(count("STATUS=two", mark, t.n) == 0);
	EXPECT(count("STATUS=three", mark, t.n) == 1);
	printf("ok: statuses within a second wait; the newest is sent\n");

	/* unhealthy: no pings; healthy again: pings resume */
	t.healthy = 0;
	run_for(base, 150);             /* a ping may have been on its way */
	mark = t.n;
	run_for(base, 500);
	EXPECT(count("WATCHDOG=1", mark, t.n) == 0);
	t.healthy = 1;
	mark = t.n;
	run_for(base, 500);
	EXPECT(count("WATCHDOG=1", mark, t.n) >= 2);
	printf("ok: no WATCHDOG=1 while unhealthy, pings resume after\n");

	mark = t.n;
	sdn_reloading();
	sdn_ready();
	sdn_stopping();
	sdn_stopping();                 /* a second SIGTERM does not repeat it */
	run_for(base, 20);
	{
		int r = -1, rd = -1, s = -1, x = -1;
		for (int i = mark; i < t.n; i++) {
			const char *m = t.msgs[i].text;
			if (r < 0 && strcmp(m, "RELOADING=1") == 0)
				r = i;
			else if (rd < 0 && strcmp(m, "READY=1") == 0)
				rd = i;
			else if (s < 0 && strcmp(m, "STOPPING=1") == 0)
				s = i;
			else if (x < 0 && strcmp(m, "EXTEND_TIMEOUT_USEC=15000000") == 0)
				x = i;
		}
		EXPECT(r >= 0 && rd > r && s > rd && x > s);
		EXPECT(count("STOPPING=1", mark, t.n) == 1);
	}
	printf("ok: RELOADING=1, READY=1, STOPPING=1, EXTEND_TIMEOUT_USEC= in order\n");

	/* a watchdog for another pid is not ours */
	sdn_teardown();
	setenv("WATCHDOG_PID", "1", 1);
	setenv("WATCHDOG_USEC", "200000", 1);
	sdn_setup(base, &hooks);
	sdn_ready();
	mark = t.n;
	run_for(base, 400);
	EXPECT(count("WATCHDOG=1", mark, t.n) == 0);
	sdn_teardown();
	printf("ok: no pings when WATCHDOG_PID names another process\n");

	/* without NOTIFY_SOCKET nothing is sent and nothing breaks */
	unsetenv("NOTIFY_SOCKET");
	sdn_setup(base, &hooks);
	sdn_ready();
	sdn_status("x");
	sdn_stopping();
	mark = t.n;
	run_for(base, 100);
	EXPECT(t.n == mark);
	sdn_teardown();
	printf("ok: nothing is sent without NOTIFY_SOCKET\n");

	event_free(ev);
	event_base_free(base);
	close(t.fd);
	unlink(sun.sun_path);
}

static int
listener_unix(const char *path)
{
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);

	if (strlen(path) >= sizeof sun.sun_path)
		abort();
	memcpy(sun.sun_path, path, strlen(path) + 1);
	if (fd == -1 || bind(fd, (struct sockaddr *)&sun, sizeof sun) == -1 ||
	    listen(fd, 4) == -1) {
		perror(path);
		exit(1);
	}
	return fd;
}

static int
listener_tcp(void)
{
	struct sockaddr_in sin = { .sin_family = AF_INET };
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd == -1 || bind(fd, (struct sockaddr *)&sin, sizeof sin) == -1 ||
	    listen(fd, 4) == -1) {
		perror("tcp listener");
		exit(1);
	}
	return fd;
}

/* Puts fds at 3, 4, ... and sets LISTEN_* as systemd would. */
static void
pass_fds(const int *fds, int n, const char *names)
{
	char buf[32];

	for (int i = 0; i < n; i++) {
		if (dup2(fds[i], 3 + i) == -1) {
			perror("dup2");
			exit(1);
		}
	}
	snprintf(buf, sizeof buf, "%d", (int)getpid());
	setenv("LISTEN_PID", buf, 1);
	snprintf(buf, sizeof buf, "%d", n);
	setenv("LISTEN_FDS", buf, 1);
	if (names != NULL)
		setenv("LISTEN_FDNAMES", names, 1);
	else
		unsetenv("LISTEN_FDNAMES");
}

static void
test_activation(void)
{
	struct sdn_activated *a;
	char path[256], *cause = NULL;
	int fds[2], moved[2], n, dgram;

	/* not activated */
	unsetenv("LISTEN_FDS");
	unsetenv("LISTEN_PID");
	EXPECT(sdn_activation_fds(&a, &cause) == 0 && a == NULL);

	/* keep the listeners well above 3 and 4, where systemd puts them */
	snprintf(path, sizeof path, "%s/unix.sock", dir);
	fds[0] = listener_unix(path);
	fds[1] = listener_tcp();
	moved[0] = fcntl(fds[0], F_DUPFD, 20);
	moved[1] = fcntl(fds[1], F_DUPFD, 20);
	close(fds[0]);
	close(fds[1]);

	pass_fds(moved, 2, "unix:tcp");
	n = sdn_activation_fds(&a, &cause);
	EXPECT(n == 2);
	if (n == 2) {
		EXPECT(a[0].fd == 3 && a[0].kind == SDN_UNIX && strcmp(a[0].name, "unix") == 0);
		EXPECT(strcmp(a[0].addr, path) == 0);
		EXPECT(strncmp(a[1].addr, "127.0.0.1:", 10) == 0 && atoi(a[1].addr + 10) > 0);
		EXPECT(a[1].fd == 4 && a[1].kind == SDN_TCP && strcmp(a[1].name, "tcp") == 0);
		EXPECT((fcntl(3, F_GETFL) & O_NONBLOCK) && (fcntl(3, F_GETFD) & FD_CLOEXEC));
	}
	free(a);
	EXPECT(getenv("LISTEN_FDS") == NULL && getenv("LISTEN_FDNAMES") == NULL);
	printf("ok: fds named unix and tcp come back with their kinds, env cleared\n");

	/* names that lie are refused, naming the fd */
	pass_fds(moved, 2, "tcp:unix");
	EXPECT(sdn_activation_fds(&a, &cause) == -1);
	EXPECT(cause != NULL && strstr(cause, "fd 3 is named tcp but is a Unix socket") != NULL);
	free(cause);
	cause = NULL;

	/* names systemd-socket-activate gives by default: classified by family */
	pass_fds(moved, 2, NULL);
	n = sdn_activation_fds(&a, &cause);
	EXPECT(n == 2 && a[0].kind == SDN_UNIX && a[1].kind == SDN_TCP);
	free(a);

	/* a datagram socket is not a listener */
	dgram = socket(AF_UNIX, SOCK_DGRAM, 0);
	pass_fds(&dgram, 1, "unix");
	EXPECT(sdn_activation_fds(&a, &cause) == -1);
	EXPECT(cause != NULL && strstr(cause, "not a listening") != NULL);
	free(cause);
	printf("ok: a misnamed fd or a non-listener is refused with its fd number\n");
	close(dgram);
	close(moved[0]);
	close(moved[1]);
	unlink(path);
}

static const struct test_case cases[] = {
	{ "notify", test_notify },
	{ "activation", test_activation },
};

int
main(int argc, char **argv)
{
	int rc;

	log_init(LOG_WARNING);
	if (mkdtemp(dir) == NULL) {
		perror("mkdtemp");
		return 1;
	}
	rc = test_run(cases, TEST_COUNT(cases), argc, argv);
	rmdir(dir);
	return rc;
}
