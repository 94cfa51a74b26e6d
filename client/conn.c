/*
 * conn.c: one connection to tpd: connect over a Unix socket or TCP with a
 * timeout, then newline-delimited JSON both ways (SPEC section 2).
 *
 * The socket is non-blocking once connected, and every wait is one poll()
 * on the socket and the interrupt pipe, so a signal or a deadline never
 * leaves tpctl stuck in a read or a write. Requests are queued and written
 * while events are read: a client that only wrote, never read, could fill
 * the daemon's output buffer and be disconnected.
 */
#include "config.h"

#include <sys/socket.h>
#include <sys/un.h>

#include <netinet/in.h>
#include <netinet/tcp.h>

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tpctl.h"
#include "wire.h"

/* Longest event line accepted from the daemon (a done with large output). */
#define CONN_MAX_LINE ((size_t)1 << 30)
#define CONN_READ_SIZE 65536

struct conn {
	int fd;
	char *address;          /* "/run/tpd/tpd.sock" or "host:port" */

	char *in;               /* received bytes */
	size_t inlen, incap;
	size_t start;           /* first byte not yet returned as a line */
	size_t scan;            /* bytes before scan hold no newline past start */
	const char *line;       /* the last line returned (in in[]) */
	size_t linelen;

	char *out;              /* queued request lines */
	size_t outlen, outcap;
	size_t outoff;          /* bytes of out already sent */

	uint64_t last_io_us;    /* when bytes last moved either way */
};

static char *
conn_xasprintf(const char *fmt, ...)
{
	va_list ap;
	char *s;

	va_start(ap, fmt);
	if (vasprintf(&s, fmt, ap) == -1)
		s = NULL;
	va_end(ap);
	return s;
}

/* A hint for a connect error, after the error itself. */
static const char *
conn_hint(int error, bool tcp)
{
	switch (error) {
	case ENOENT:
		return " (is tpd running? start it, or name its socket with -s PATH or TPD_SOCKET)";
	case ECONNREFUSED:
		return tcp ? " (is tpd listening there? see tpd -l)" :
		    " (is tpd running? the socket file is left from a daemon that is gone)";
	case EACCES:
	case EPERM:
		return " (ask for access to the socket's group, or run as the daemon's user)";
	case ETIMEDOUT:
	case EAGAIN:
		return " (is tpd overloaded or stopped? try a longer --connect-timeout)";
	default:
		return "";
	}
}

static int
conn_set_nonblock(int fd)
{
	int flags = fcntl(fd, F_GETFL);

	if (flags == -1 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) == -1)
		return -1;
	return 0;
}

static void
conn_timeval(uint64_t ms, struct timeval *tv)
{
	tv->tv_sec = ms / 1000;
	tv->tv_usec = (ms % 1000) * 1000;
}

/*
 * A Unix socket's connect completes or fails at once, unless the listen
 * backlog is full: then it blocks, for at most SO_SNDTIMEO on Linux.
 */
static int
conn_open_unix(const char *path, uint64_t timeout_ms, char **cause)
{
	struct sockaddr_un sun;
	struct timeval tv;
	int fd, saved;

	memset(&sun, 0, sizeof sun);
	sun.sun_family = AF_UNIX;
	if (strlen(path) >= sizeof sun.sun_path) {
		*cause = conn_xasprintf("cannot connect to %s: the path is longer "
		    "than a Unix socket address allows (%zu bytes)", path,
		    sizeof sun.sun_path - 1);
		return -1;
	}
	memcpy(sun.sun_path, path, strlen(path) + 1);

	if ((fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) == -1) {
		*cause = conn_xasprintf("cannot create a socket: %s", strerror(errno));
		return -1;
	}
	conn_timeval(timeout_ms, &tv);
	if (timeout_ms > 0)
		(void)setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
	while (connect(fd, (struct sockaddr *)&sun, sizeof sun) == -1) {
		if (errno == EINTR)
			continue;
		saved = errno;
		close(fd);
		if (saved == EAGAIN || saved == EWOULDBLOCK || saved == EINPROGRESS)
			saved = ETIMEDOUT;
		*cause = conn_xasprintf("cannot connect to %s: %s%s", path,
		    strerror(saved), conn_hint(saved, false));
		return -1;
	}
	memset(&tv, 0, sizeof tv);
	(void)setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
	return fd;
}

/* Splits "host:port" or "[v6]:port" into host and port (in buf). */
static int
conn_split_host(const char *hostport, char *buf, size_t len, char **host,
    char **port)
{
	char *colon;

	if (strlen(hostport) >= len)
		return -1;
	strcpy(buf, hostport);
	if (buf[0] == '[') {
		char *close_bracket = strchr(buf, ']');
		if (close_bracket == NULL || close_bracket[1] != ':')
			return -1;
		*close_bracket = '\0';
		*host = buf + 1;
		*port = close_bracket + 2;
	} else {
		if ((colon = strrchr(buf, ':')) == NULL)
			return -1;
		*colon = '\0';
		*host = buf;
		*port = colon + 1;
		if (strchr(*host, ':') != NULL)   /* bare IPv6 needs brackets */
			return -1;
	}
	if (**host == '\0' || **port == '\0')
		return -1;
	return 0;
}

/* Waits for a non-blocking connect; returns 0 or an errno value. */
static int
conn_wait_connect(int fd, uint64_t deadline_us)
{
	struct pollfd pfd = { .fd = fd, .events = POLLOUT };
	socklen_t len = sizeof(int);
	int error = 0, n;

	for (;;) {
		uint64_t now = tpctl_now_us();
		int ms = now >= deadline_us ? 0 : (int)((deadline_us - now + 999) / 1000);
		n = poll(&pfd, 1, ms);
		if (n == -1 && errno == EINTR)
			continue;
		if (n == -1)
			return errno;
		if (n == 0)
			return ETIMEDOUT;
		break;
	}
	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len) == -1)
		return errno;
	return error;
}

static int
conn_open_tcp(const char *hostport, uint64_t timeout_ms, char **cause)
{
	struct addrinfo hints, *res, *ai;
	char buf[512], *host, *port;
	uint64_t deadline;
	int fd = -1, error = 0, one = 1, gai;

	if (conn_split_host(hostport, buf, sizeof buf, &host, &port) == -1) {
		*cause = conn_xasprintf("cannot connect to %s: HOST:PORT expected "
		    "(an IPv6 address in brackets: [::1]:7420)", hostport);
		return -1;
	}
	memset(&hints, 0, sizeof hints);
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	if ((gai = getaddrinfo(host, port, &hints, &res)) != 0) {
		*cause = conn_xasprintf("cannot connect to %s: %s", hostport,
		    gai_strerror(gai));
		return -1;
	}
	deadline = tpctl_now_us() + timeout_ms * 1000;
	for (ai = res; ai != NULL; ai = ai->ai_next) {
		fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC |
		    SOCK_NONBLOCK, ai->ai_protocol);
		if (fd == -1) {
			error = errno;
			continue;
		}
		if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0)
			error = 0;
		else if (errno == EINPROGRESS)
			error = conn_wait_connect(fd, deadline);
		else
			error = errno;
		if (error == 0)
			break;
		close(fd);
		fd = -1;
	}
	freeaddrinfo(res);
	if (fd == -1) {
		*cause = conn_xasprintf("cannot connect to %s: %s%s", hostport,
		    error == ETIMEDOUT ? "timed out" : strerror(error),
		    conn_hint(error, true));
		return -1;
	}
	/* requests are small lines: send each at once */
	(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	return fd;
}

struct conn *
conn_open(const char *path, const char *host, uint64_t timeout_ms, char **cause)
{
	struct conn *c;
	int fd;

	if (host != NULL)
		fd = conn_open_tcp(host, timeout_ms, cause);
	else
		fd = conn_open_unix(path, timeout_ms, cause);
	if (fd == -1)
		return NULL;
	if (conn_set_nonblock(fd) == -1) {
		*cause = conn_xasprintf("cannot set up the socket: %s", strerror(errno));
		close(fd);
		return NULL;
	}
	if ((c = calloc(1, sizeof *c)) == NULL ||
	    (c->address = strdup(host != NULL ? host : path)) == NULL) {
		free(c);
		close(fd);
		*cause = conn_xasprintf("out of memory");
		return NULL;
	}
	c->fd = fd;
	c->last_io_us = tpctl_now_us();
	return c;
}

void
conn_close(struct conn *c)
{
	if (c == NULL)
		return;
	close(c->fd);
	free(c->address);
	free(c->in);
	free(c->out);
	free(c);
}

const char *
conn_address(const struct conn *c)
{
	return c->address;
}

uint64_t
conn_last_io_us(const struct conn *c)
{
	return c->last_io_us;
}

const char *
conn_last_line(const struct conn *c, size_t *len)
{
	*len = c->linelen;
	return c->line;
}

static int
conn_reserve(char **buf, size_t *cap, size_t need)
{
	size_t ncap;
	char *nbuf;

	if (need <= *cap)
		return 0;
	ncap = *cap == 0 ? CONN_READ_SIZE : *cap;
	while (ncap < need)
		ncap *= 2;
	if ((nbuf = realloc(*buf, ncap)) == NULL)
		return -1;
	*buf = nbuf;
	*cap = ncap;
	return 0;
}

/* Writes what the socket takes now. Returns 0, or CONN_LOST. */
static int
conn_write_some(struct conn *c, char **cause)
{
	ssize_t n;

	while (c->outoff < c->outlen) {
		n = send(c->fd, c->out + c->outoff, c->outlen - c->outoff,
		    MSG_NOSIGNAL);
		if (n == -1) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return 0;
			*cause = conn_xasprintf("lost the connection to %s: %s",
			    c->address, strerror(errno));
			return CONN_LOST;
		}
		c->outoff += (size_t)n;
		c->last_io_us = tpctl_now_us();
	}
	c->outoff = c->outlen = 0;
	return 0;
}

int
conn_send(struct conn *c, const json_t *req, char **cause)
{
	char *s;
	size_t len;

	/* compact JSON never contains a raw newline: strings escape it */
	if ((s = json_dumps(req, JSON_COMPACT)) == NULL) {
		*cause = conn_xasprintf("cannot encode a request");
		return -1;
	}
	len = strlen(s);
	if (conn_reserve(&c->out, &c->outcap, c->outlen + len + 1) == -1) {
		free(s);
		*cause = conn_xasprintf("out of memory");
		return -1;
	}
	memcpy(c->out + c->outlen, s, len);
	c->out[c->outlen + len] = WIRE_DELIMITER;
	c->outlen += len + 1;
	free(s);
	return conn_write_some(c, cause) == 0 ? 0 : -1;
}

/* The next complete line in the buffer as an event; 0 when there is none. */
static int
conn_take_line(struct conn *c, json_t **ev, char **cause)
{
	json_error_t jerr;
	char *nl;
	size_t len;

	while (c->scan < c->inlen) {
		nl = memchr(c->in + c->scan, WIRE_DELIMITER, c->inlen - c->scan);
		if (nl == NULL) {
			c->scan = c->inlen;
			break;
		}
		c->line = c->in + c->start;
		len = (size_t)(nl - c->line);
		c->start = c->scan = len + c->start + 1;
		if (len > 0 && c->line[len - 1] == '\r')
			len--;
		if (len == 0)
			continue;
		c->linelen = len;
		*ev = jsonline_load(c->line, len, &jerr);
		if (*ev == NULL) {
			*cause = conn_xasprintf("%s sent a line that is not JSON "
			    "(%s): is it a tpd socket?", c->address, jerr.text);
			return CONN_BAD;
		}
		if (!json_is_object(*ev)) {
			json_decref(*ev);
			*cause = conn_xasprintf("%s sent JSON that is not an "
			    "object: is it a tpd socket?", c->address);
			return CONN_BAD;
		}
		return CONN_EVENT;
	}
	if (c->inlen - c->start > CONN_MAX_LINE) {
		*cause = conn_xasprintf("%s sent a line longer than %zu bytes",
		    c->address, CONN_MAX_LINE);
		return CONN_BAD;
	}
	return 0;
}

/* Reads what is there. Returns 0, or CONN_LOST. */
static int
conn_read_some(struct conn *c, char **cause)
{
	ssize_t n;

	for (;;) {
		if (conn_reserve(&c->in, &c->incap, c->inlen + CONN_READ_SIZE) == -1) {
			*cause = conn_xasprintf("out of memory");
			return CONN_LOST;
		}
		n = read(c->fd, c->in + c->inlen, c->incap - c->inlen);
		if (n > 0) {
			c->inlen += (size_t)n;
			c->last_io_us = tpctl_now_us();
			return 0;
		}
		if (n == -1 && errno == EINTR)
			continue;
		if (n == -1 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return 0;
		if (n == 0)
			*cause = conn_xasprintf("%s closed the connection%s",
			    c->address, c->inlen > c->start ?
			    " in the middle of a line" : "");
		else
			*cause = conn_xasprintf("lost the connection to %s: %s",
			    c->address, strerror(errno));
		return CONN_LOST;
	}
}

static int
conn_poll_ms(uint64_t deadline_us, int timeout_ms)
{
	uint64_t now;

	if (timeout_ms < 0)
		return -1;
	now = tpctl_now_us();
	if (now >= deadline_us)
		return 0;
	return (int)((deadline_us - now + 999) / 1000);
}

int
conn_recv(struct conn *c, json_t **ev, int timeout_ms, char **cause)
{
	struct pollfd pfd[2];
	uint64_t deadline;
	int n, r, nfds;

	*ev = NULL;
	c->line = NULL;     /* the last line returned is no longer needed */
	c->linelen = 0;
	deadline = tpctl_now_us() + (timeout_ms > 0 ? (uint64_t)timeout_ms * 1000 : 0);
	for (;;) {
		if ((r = conn_take_line(c, ev, cause)) != 0)
			return r;
		/* no whole line left: move the partial one to the front */
		if (c->start > 0) {
			memmove(c->in, c->in + c->start, c->inlen - c->start);
			c->inlen -= c->start;
			c->scan -= c->start;
			c->start = 0;
		}

		pfd[0].fd = c->fd;
		pfd[0].events = POLLIN | (c->outoff < c->outlen ? POLLOUT : 0);
		pfd[0].revents = 0;
		nfds = 1;
		if (interrupt_fd() != -1) {
			pfd[1].fd = interrupt_fd();
			pfd[1].events = POLLIN;
			pfd[1].revents = 0;
			nfds = 2;
		}
		n = poll(pfd, nfds, conn_poll_ms(deadline, timeout_ms));
		if (n == -1 && errno == EINTR)
			continue;   /* the handler wrote to the pipe: poll sees it next */
		if (n == -1) {
			*cause = conn_xasprintf("poll: %s", strerror(errno));
			return CONN_LOST;
		}
		if (n == 0)
			return CONN_TIMEOUT;
		if (nfds == 2 && (pfd[1].revents & POLLIN))
			return CONN_INTERRUPTED;
		if ((pfd[0].revents & POLLOUT) &&
		    (r = conn_write_some(c, cause)) != 0)
			return r;
		if ((pfd[0].revents & (POLLIN | POLLHUP | POLLERR)) &&
		    (r = conn_read_some(c, cause)) != 0)
			return r;
	}
}

int
conn_flush(struct conn *c, int timeout_ms, char **cause)
{
	struct pollfd pfd;
	uint64_t deadline = tpctl_now_us() + (uint64_t)(timeout_ms > 0 ? timeout_ms : 0) * 1000;
	int n;

	while (c->outoff < c->outlen) {
		if (conn_write_some(c, cause) != 0)
			return -1;
		if (c->outoff == c->outlen)
			break;
		pfd.fd = c->fd;
		pfd.events = POLLOUT;
		n = poll(&pfd, 1, conn_poll_ms(deadline, timeout_ms));
		if (n == -1 && errno == EINTR)
			continue;
		if (n <= 0) {
			*cause = conn_xasprintf("cannot send to %s: %s", c->address,
			    n == 0 ? "timed out" : strerror(errno));
			return -1;
		}
	}
	return 0;
}
