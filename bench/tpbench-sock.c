/* tpbench-sock.c: see tpbench-sock.h. */
#include "config.h"

#include <sys/types.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <netinet/in.h>
#include <netinet/tcp.h>

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tpbench-sock.h"

static int sock_fail(char **, const char *, ...) __attribute__((format(printf, 2, 3)));

static int
sock_fail(char **cause, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	if (vasprintf(cause, fmt, ap) == -1)
		*cause = NULL;
	va_end(ap);
	return -1;
}

int
sock_target_unix(struct sock_target *t, const char *path, char **cause)
{
	struct sockaddr_un *sun = (struct sockaddr_un *)&t->addr;

	memset(t, 0, sizeof *t);
	if (strlen(path) >= sizeof sun->sun_path)
		return sock_fail(cause, "socket path too long: %s", path);
	sun->sun_family = AF_UNIX;
	strcpy(sun->sun_path, path);
	t->len = sizeof *sun;
	snprintf(t->name, sizeof t->name, "unix:%s", path);
	return 0;
}

int
sock_target_tcp(struct sock_target *t, const char *hostport, char **cause)
{
	struct addrinfo hints, *res;
	char host[256];
	const char *colon, *h = hostport;
	size_t hlen;
	int error;

	memset(t, 0, sizeof *t);
	colon = strrchr(hostport, ':');
	if (colon == NULL || colon[1] == '\0')
		return sock_fail(cause, "not HOST:PORT: %s", hostport);
	hlen = (size_t)(colon - hostport);
	if (hlen >= 2 && h[0] == '[' && h[hlen - 1] == ']') {
		h++;
		hlen -= 2;
	}
	if (hlen == 0 || hlen >= sizeof host)
		return sock_fail(cause, "bad host in %s", hostport);
	memcpy(host, h, hlen);
	host[hlen] = '\0';

	memset(&hints, 0, sizeof hints);
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_NUMERICSERV;
	error = getaddrinfo(host, colon + 1, &hints, &res);
	if (error != 0)
		return sock_fail(cause, "%s: %s", hostport, gai_strerror(error));
	memcpy(&t->addr, res->ai_addr, res->ai_addrlen);
	t->len = res->ai_addrlen;
	freeaddrinfo(res);
	snprintf(t->name, sizeof t->name, "tcp:%s", hostport);
	return 0;
}

int
sock_nonblock(int fd)
{
	int flags = fcntl(fd, F_GETFL);

	if (flags == -1)
		return -1;
	return fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

int
sock_connect(const struct sock_target *t, int timeout_ms, char **cause)
{
	struct timespec pause = { 0, 10 * 1000 * 1000 };
	int fd, waited = 0, one = 1;

	for (;;) {
		fd = socket(t->addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd == -1)
			return sock_fail(cause, "socket: %s", strerror(errno));
		if (connect(fd, (const struct sockaddr *)&t->addr, t->len) == 0)
			break;
		close(fd);
		if ((errno != ENOENT && errno != ECONNREFUSED) ||
		    waited >= timeout_ms)
			return sock_fail(cause, "connect %s: %s", t->name,
			    strerror(errno));
		nanosleep(&pause, NULL);
		waited += 10;
	}
	if (t->addr.ss_family != AF_UNIX)
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	return fd;
}

int
sock_listen(struct sock_target *t, char **cause)
{
	int fd, one = 1;

	fd = socket(t->addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd == -1)
		return sock_fail(cause, "socket: %s", strerror(errno));
	if (t->addr.ss_family == AF_UNIX)
		unlink(((struct sockaddr_un *)&t->addr)->sun_path);
	else
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (bind(fd, (struct sockaddr *)&t->addr, t->len) == -1 ||
	    listen(fd, SOMAXCONN) == -1) {
		sock_fail(cause, "listen %s: %s", t->name, strerror(errno));
		close(fd);
		return -1;
	}
	return fd;
}

int
sock_port(int fd)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof ss;

	if (getsockname(fd, (struct sockaddr *)&ss, &len) == -1)
		return -1;
	if (ss.ss_family == AF_INET)
		return ntohs(((struct sockaddr_in *)&ss)->sin_port);
	if (ss.ss_family == AF_INET6)
		return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
	return -1;
}

int
sock_raise_nofile(rlim_t want, char **cause)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) == -1)
		return sock_fail(cause, "getrlimit: %s", strerror(errno));
	if (rl.rlim_cur >= want)
		return 0;
	if (rl.rlim_max < want) {
		struct rlimit hard = { want, want };

		/* only a privileged process may raise the hard limit */
		if (setrlimit(RLIMIT_NOFILE, &hard) == 0)
			return 0;
	}
	rl.rlim_cur = rl.rlim_max < want ? rl.rlim_max : want;
	if (setrlimit(RLIMIT_NOFILE, &rl) == -1)
		return sock_fail(cause, "setrlimit: %s", strerror(errno));
	if (rl.rlim_cur < want)
		return sock_fail(cause, "open files limited to %llu, need %llu "
		    "(raise the hard limit: ulimit -Hn)",
		    (unsigned long long)rl.rlim_cur, (unsigned long long)want);
	return 0;
}
