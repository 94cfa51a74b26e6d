/*
 * link.c: one connection to tpd: connect over a Unix socket (the default
 * one, or the system daemon's when that does not exist) or TCP with a
 * timeout, then newline-delimited JSON both ways (doc/protocol.md).
 *
 * The socket is non-blocking once connected, and every wait is one poll()
 * on the socket and the interrupt pipe, so a signal or a deadline never
 * leaves tpctl stuck in a read or a write. Requests are queued and written
 * while events are read: a client that only wrote, never read, could fill
 * the daemon's output buffer and be disconnected.
 */
#include "config.h"

#include <sys/socket.h>
#include <sys/stat.h>
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
#define LINK_MAX_LINE ((size_t)1 << 30)
#define LINK_READ_SIZE 65536

struct link {
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
	int watch_fd;           /* link_watch's, or -1 */
};

static char *link_xasprintf(const char *, ...) __attribute__((format(printf, 1, 2)));

static char *
link_xasprintf(const char *fmt, ...)
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
link_hint(int error, bool tcp)
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
link_set_nonblock(int fd)
{
	int flags = fcntl(fd, F_GETFL);

	if (flags == -1 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) == -1)
		return -1;
	return 0;
}

static void
link_timeval(uint64_t ms, struct timeval *tv)
{
	tv->tv_sec = ms / 1000;
	tv->tv_usec = (ms % 1000) * 1000;
}

/*
 * A Unix socket's connect completes or fails at once, unless the listen
 * backlog is full: then it blocks, for at most SO_SNDTIMEO on Linux.
 * Returns the fd, or -1 with *error (an errno value) and *cause set.
 */
static int
link_open_unix(const char *path, uint64_t timeout_ms, int *error, char **cause)
{
	struct sockaddr_un sun;
	struct timeval tv;
	struct stat st;
	int fd, saved;

	memset(&sun, 0, sizeof sun);
	sun.sun_family = AF_UNIX;
	if (strlen(path) >= sizeof sun.sun_path) {
		*error = ENAMETOOLONG;
		*cause = link_xasprintf("cannot connect to %s: the path is longer "
		    "than a Unix socket address allows (%zu bytes)", path,
		    sizeof sun.sun_path - 1);
		return -1;
	}
	memcpy(sun.sun_path, path, strlen(path) + 1);

	if ((fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) == -1) {
		*error = errno;
		*cause = link_xasprintf("cannot create a socket: %s", strerror(errno));
		return -1;
	}
	link_timeval(timeout_ms, &tv);
	if (timeout_ms > 0)
		(void)setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
	while (connect(fd, (struct sockaddr *)&sun, sizeof sun) == -1) {
		if (errno == EINTR)
			continue;
		saved = errno;
		close(fd);
		if (saved == EAGAIN || saved == EWOULDBLOCK || saved == EINPROGRESS)
			saved = ETIMEDOUT;
		*error = saved;
		if (saved == ECONNREFUSED && stat(path, &st) == 0 && !S_ISSOCK(st.st_mode))
			/* a file that is no socket refuses too: say what it is */
			*cause = link_xasprintf("cannot connect to %s: it is not a socket but a "
			    "%s (name tpd's socket with -s PATH or TPD_SOCKET)", path,
			    S_ISDIR(st.st_mode) ? "directory" : S_ISREG(st.st_mode) ?
			    "regular file" : "file of another kind");
		else
			*cause = link_xasprintf("cannot connect to %s: %s%s", path,
			    strerror(saved), link_hint(saved, false));
		return -1;
	}
	memset(&tv, 0, sizeof tv);
	(void)setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
	return fd;
}

/*
 * Connects to path or, when there is no such file, to fallback (the
 * system daemon's socket); when neither answers, the message names both.
 * *used is the path connected to.
 */
static int
link_open_unix_or(const char *path, const char *fallback, uint64_t timeout_ms,
    const char **used, char **cause)
{
	char *first = NULL;
	int fd, error, error2;

	*used = path;
	fd = link_open_unix(path, timeout_ms, &error, &first);
	if (fd != -1 || fallback == NULL || error != ENOENT) {
		*cause = first;
		return fd;
	}
	*used = fallback;
	if ((fd = link_open_unix(fallback, timeout_ms, &error2, cause)) != -1) {
		free(first);
		return fd;
	}
	free(first);
	free(*cause);
	*cause = link_xasprintf("cannot connect to tpd: tried %s (%s) and %s "
	    "(%s)%s", path, strerror(error), fallback, strerror(error2),
	    link_hint(error2, false));
	return -1;
}

/* Splits "host:port" or "[v6]:port" into host and port (in buf). */
static int
link_split_host(const char *hostport, char *buf, size_t len, char **host,
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

/* Waits for a non-blocking connect (deadline 0: for ever); returns 0 or an errno value. */
static int
link_wait_connect(int fd, uint64_t deadline_us)
{
	struct pollfd pfd = { .fd = fd, .events = POLLOUT };
	socklen_t len = sizeof(int);
	int error = 0, n;

	for (;;) {
		uint64_t now = tpctl_now_us();
		int ms = deadline_us == 0 ? -1 : now >= deadline_us ? 0 :
		    (int)((deadline_us - now + 999) / 1000);
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
link_open_tcp(const char *hostport, uint64_t timeout_ms, char **cause)
{
	struct addrinfo hints, *res, *ai;
	char buf[512], *host, *port;
	uint64_t deadline;
	int fd = -1, error = 0, one = 1, gai;

	if (link_split_host(hostport, buf, sizeof buf, &host, &port) == -1) {
		*cause = link_xasprintf("cannot connect to %s: HOST:PORT expected "
		    "(an IPv6 address in brackets: [::1]:7420)", hostport);
		return -1;
	}
	memset(&hints, 0, sizeof hints);
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	if ((gai = getaddrinfo(host, port, &hints, &res)) != 0) {
		*cause = link_xasprintf("cannot connect to %s: %s", hostport,
		    gai_strerror(gai));
		return -1;
	}
	deadline = timeout_ms == 0 ? 0 : tpctl_now_us() + timeout_ms * 1000;
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
			error = link_wait_connect(fd, deadline);
		else
			error = errno;
		if (error == 0)
			break;
		close(fd);
		fd = -1;
	}
	freeaddrinfo(res);
	if (fd == -1) {
		*cause = link_xasprintf("cannot connect to %s: %s%s", hostport,
		    error == ETIMEDOUT ? "timed out" : strerror(error),
		    link_hint(error, true));
		return -1;
	}
	/* requests are small lines: send each at once */
	(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	return fd;
}

struct link *
link_open(const char *path, const char *fallback, const char *host,
    uint64_t timeout_ms, char **cause)
{
	struct link *lk;
	int fd;

	if (host != NULL)
		fd = link_open_tcp(host, timeout_ms, cause);
	else
		fd = link_open_unix_or(path, fallback, timeout_ms, &path, cause);
	if (fd == -1)
		return NULL;
	if (link_set_nonblock(fd) == -1) {
		*cause = link_xasprintf("cannot set up the socket: %s", strerror(errno));
		close(fd);
		return NULL;
	}
	if ((lk = calloc(1, sizeof *lk)) == NULL ||
	    (lk->address = strdup(host != NULL ? host : path)) == NULL) {
		free(lk);
		close(fd);
		*cause = link_xasprintf("out of memory");
		return NULL;
	}
	lk->fd = fd;
	lk->watch_fd = -1;
	lk->last_io_us = tpctl_now_us();
	return lk;
}

/*
 * Who may answer on a socket of the default rule. On the user's own path
 * ($XDG_RUNTIME_DIR or /tmp/tpd-$UID, or $RUNTIME_DIRECTORY), anyone who
 * made the directory first could listen there: another user's fake daemon
 * would get the task's command line and environment and answer what it
 * likes. So the directory must be the user's and writable by no one else,
 * and the peer (SO_PEERCRED: who called listen()) the user. On the system
 * socket, the peer is root (tpd as root, or systemd's socket activation)
 * or the owner of the socket's directory, which root owns or no one else
 * may write.
 */
int
link_check_daemon(struct link *lk, const char *system_socket, char **cause)
{
	bool system = strcmp(lk->address, system_socket) == 0;
	char *dir = strdup(lk->address), *slash;
	struct ucred cred;
	socklen_t len = sizeof cred;
	struct stat st;
	uid_t me = getuid();
	int rv = -1;

	if (dir == NULL) {
		*cause = link_xasprintf("out of memory");
		return -1;
	}
	if ((slash = strrchr(dir, '/')) == NULL)
		strcpy(dir, ".");
	else if (slash == dir)
		slash[1] = '\0';
	else
		*slash = '\0';
	if (getsockopt(lk->fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == -1)
		*cause = link_xasprintf("%s: cannot tell who listens there (SO_PEERCRED: %s): "
		    "not sending anything to it", lk->address, strerror(errno));
	else if (stat(dir, &st) == -1)
		*cause = link_xasprintf("%s: %s", dir, strerror(errno));
	else if (!system && st.st_uid != me)
		*cause = link_xasprintf("%s belongs to uid %u, not to you (uid %u): another user "
		    "may have made it to catch your tasks; not sending anything to the daemon "
		    "there (remove the directory, or name a socket with -s)", dir,
		    (unsigned)st.st_uid, (unsigned)me);
	else if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0 && !(system && st.st_uid == 0))
		*cause = link_xasprintf("%s is writable by %s (mode %04o): another user could "
		    "have replaced the socket; not sending anything to the daemon there (chmod go-w "
		    "it, or name a socket with -s)", dir,
		    (st.st_mode & S_IWOTH) ? "others" : "its group",
		    (unsigned)(st.st_mode & 07777));
	else if (!system && cred.uid != me)
		*cause = link_xasprintf("the daemon on %s runs as uid %u, not as you (uid %u): "
		    "another user's program listens on your socket; not sending anything to it "
		    "(name a socket with -s if that daemon is the one you want)", lk->address,
		    (unsigned)cred.uid, (unsigned)me);
	else if (system && cred.uid != 0 && cred.uid != st.st_uid)
		*cause = link_xasprintf("the daemon on %s runs as uid %u, neither root nor the "
		    "owner of %s (uid %u): not sending anything to it (name a socket with -s if "
		    "that daemon is the one you want)", lk->address, (unsigned)cred.uid, dir,
		    (unsigned)st.st_uid);
	else if (system && st.st_uid != 0 && st.st_uid != cred.uid)
		*cause = link_xasprintf("%s belongs to uid %u, neither root nor the daemon's "
		    "user (uid %u): not sending anything to it", dir, (unsigned)st.st_uid,
		    (unsigned)cred.uid);
	else
		rv = 0;
	free(dir);
	return rv;
}

void
link_close(struct link *lk)
{
	if (lk == NULL)
		return;
	close(lk->fd);
	free(lk->address);
	free(lk->in);
	free(lk->out);
	free(lk);
}

const char *
link_address(const struct link *lk)
{
	return lk->address;
}

uint64_t
link_last_io_us(const struct link *lk)
{
	return lk->last_io_us;
}

const char *
link_last_line(const struct link *lk, size_t *len)
{
	*len = lk->linelen;
	return lk->line;
}

static int
link_reserve(char **buf, size_t *cap, size_t need)
{
	size_t ncap;
	char *nbuf;

	if (need <= *cap)
		return 0;
	ncap = *cap == 0 ? LINK_READ_SIZE : *cap;
	while (ncap < need)
		ncap *= 2;
	if ((nbuf = realloc(*buf, ncap)) == NULL)
		return -1;
	*buf = nbuf;
	*cap = ncap;
	return 0;
}

static int link_read_some(struct link *, char **);

/*
 * Writing failed: the daemon closed its end. It may have said why first
 * (too_many_connections past max_connections, then close): read what it
 * sent. True when a whole line came, which the caller then reads as the
 * answer, instead of a "Broken pipe".
 */
static bool
link_said_why(struct link *lk)
{
	char *cause = NULL;

	for (int i = 0; i < 16 && link_read_some(lk, &cause) == 0; i++)
		if (memchr(lk->in + lk->start, WIRE_DELIMITER, lk->inlen - lk->start) != NULL)
			return true;
	free(cause);
	return lk->inlen > lk->start &&
	    memchr(lk->in + lk->start, WIRE_DELIMITER, lk->inlen - lk->start) != NULL;
}

/* Writes what the socket takes now. Returns 0, or LINK_LOST. */
static int
link_write_some(struct link *lk, char **cause)
{
	ssize_t n;

	while (lk->outoff < lk->outlen) {
		n = send(lk->fd, lk->out + lk->outoff, lk->outlen - lk->outoff,
		    MSG_NOSIGNAL);
		if (n == -1) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return 0;
			if ((errno == EPIPE || errno == ECONNRESET) && link_said_why(lk)) {
				/* its last words (too_many_connections) are read next */
				lk->outoff = lk->outlen = 0;
				return 0;
			}
			*cause = link_xasprintf("lost the connection to %s: %s",
			    lk->address, strerror(errno));
			return LINK_LOST;
		}
		lk->outoff += (size_t)n;
		lk->last_io_us = tpctl_now_us();
	}
	lk->outoff = lk->outlen = 0;
	return 0;
}

int
link_send(struct link *lk, const json_t *req, char **cause)
{
	char *s;
	size_t len;

	/* compact JSON never contains a raw newline: strings escape it */
	if ((s = json_dumps(req, JSON_COMPACT)) == NULL) {
		*cause = link_xasprintf("cannot encode a request");
		return -1;
	}
	len = strlen(s);
	if (link_reserve(&lk->out, &lk->outcap, lk->outlen + len + 1) == -1) {
		free(s);
		*cause = link_xasprintf("out of memory");
		return -1;
	}
	memcpy(lk->out + lk->outlen, s, len);
	lk->out[lk->outlen + len] = WIRE_DELIMITER;
	lk->outlen += len + 1;
	free(s);
	return link_write_some(lk, cause) == 0 ? 0 : -1;
}

/* The next complete line in the buffer as an event; 0 when there is none. */
static int
link_take_line(struct link *lk, json_t **ev, char **cause)
{
	json_error_t jerr;
	char *nl;
	size_t len;

	while (lk->scan < lk->inlen) {
		nl = memchr(lk->in + lk->scan, WIRE_DELIMITER, lk->inlen - lk->scan);
		if (nl == NULL) {
			lk->scan = lk->inlen;
			break;
		}
		lk->line = lk->in + lk->start;
		len = (size_t)(nl - lk->line);
		lk->start = lk->scan = len + lk->start + 1;
		if (len > 0 && lk->line[len - 1] == '\r')
			len--;
		if (len == 0)
			continue;
		lk->linelen = len;
		*ev = jsonline_load(lk->line, len, &jerr);
		if (*ev == NULL) {
			*cause = link_xasprintf("%s sent a line that is not JSON "
			    "(%s): is it a tpd socket?", lk->address, jerr.text);
			return LINK_BAD;
		}
		if (!json_is_object(*ev)) {
			json_decref(*ev);
			*cause = link_xasprintf("%s sent JSON that is not an "
			    "object: is it a tpd socket?", lk->address);
			return LINK_BAD;
		}
		return LINK_EVENT;
	}
	if (lk->inlen - lk->start > LINK_MAX_LINE) {
		*cause = link_xasprintf("%s sent a line longer than %zu bytes",
		    lk->address, LINK_MAX_LINE);
		return LINK_BAD;
	}
	return 0;
}

/* Reads what is there. Returns 0, or LINK_LOST. */
static int
link_read_some(struct link *lk, char **cause)
{
	ssize_t n;

	for (;;) {
		if (link_reserve(&lk->in, &lk->incap, lk->inlen + LINK_READ_SIZE) == -1) {
			*cause = link_xasprintf("out of memory");
			return LINK_LOST;
		}
		n = read(lk->fd, lk->in + lk->inlen, lk->incap - lk->inlen);
		if (n > 0) {
			lk->inlen += (size_t)n;
			lk->last_io_us = tpctl_now_us();
			return 0;
		}
		if (n == -1 && errno == EINTR)
			continue;
		if (n == -1 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return 0;
		if (n == 0)
			*cause = link_xasprintf("%s closed the connection%s",
			    lk->address, lk->inlen > lk->start ?
			    " in the middle of a line" : "");
		else
			*cause = link_xasprintf("lost the connection to %s: %s",
			    lk->address, strerror(errno));
		return LINK_LOST;
	}
}

static int
link_poll_ms(uint64_t deadline_us, int timeout_ms)
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
link_recv(struct link *lk, json_t **ev, int timeout_ms, char **cause)
{
	struct pollfd pfd[3];
	uint64_t deadline;
	int n, r, nfds, at_watch;

	*ev = NULL;
	lk->line = NULL;     /* the last line returned is no longer needed */
	lk->linelen = 0;
	deadline = tpctl_now_us() + (timeout_ms > 0 ? (uint64_t)timeout_ms * 1000 : 0);
	for (;;) {
		if ((r = link_take_line(lk, ev, cause)) != 0)
			return r;
		/* no whole line left: move the partial one to the front */
		if (lk->start > 0) {
			memmove(lk->in, lk->in + lk->start, lk->inlen - lk->start);
			lk->inlen -= lk->start;
			lk->scan -= lk->start;
			lk->start = 0;
		}

		pfd[0].fd = lk->fd;
		pfd[0].events = POLLIN | (lk->outoff < lk->outlen ? POLLOUT : 0);
		pfd[0].revents = 0;
		nfds = 1;
		if (interrupt_fd() != -1) {
			pfd[1].fd = interrupt_fd();
			pfd[1].events = POLLIN;
			pfd[1].revents = 0;
			nfds = 2;
		}
		at_watch = -1;
		if (lk->watch_fd != -1) {
			at_watch = nfds;
			pfd[nfds].fd = lk->watch_fd;
			pfd[nfds].events = POLLIN;
			pfd[nfds].revents = 0;
			nfds++;
		}
		n = poll(pfd, (nfds_t)nfds, link_poll_ms(deadline, timeout_ms));
		if (n == -1 && errno == EINTR)
			continue;   /* the handler wrote to the pipe: poll sees it next */
		if (n == -1) {
			*cause = link_xasprintf("poll: %s", strerror(errno));
			return LINK_LOST;
		}
		if (n == 0)
			return LINK_TIMEOUT;
		if (interrupt_fd() != -1 && (pfd[1].revents & POLLIN))
			return LINK_INTERRUPTED;
		if ((pfd[0].revents & POLLOUT) &&
		    (r = link_write_some(lk, cause)) != 0)
			return r;
		if ((pfd[0].revents & (POLLIN | POLLHUP | POLLERR)) &&
		    (r = link_read_some(lk, cause)) != 0)
			return r;
		/* events first: they may close the window this input would go in */
		if (at_watch != -1 && pfd[at_watch].revents != 0 &&
		    (r = link_take_line(lk, ev, cause)) == 0)
			return LINK_INPUT;
		if (at_watch != -1 && pfd[at_watch].revents != 0)
			return r;
	}
}

void
link_watch(struct link *lk, int fd)
{
	lk->watch_fd = fd;
}

int
link_flush(struct link *lk, int timeout_ms, char **cause)
{
	struct pollfd pfd;
	uint64_t deadline = tpctl_now_us() + (uint64_t)(timeout_ms > 0 ? timeout_ms : 0) * 1000;
	int n;

	while (lk->outoff < lk->outlen) {
		if (link_write_some(lk, cause) != 0)
			return -1;
		if (lk->outoff == lk->outlen)
			break;
		pfd.fd = lk->fd;
		pfd.events = POLLOUT;
		n = poll(&pfd, 1, link_poll_ms(deadline, timeout_ms));
		if (n == -1 && errno == EINTR)
			continue;
		if (n <= 0) {
			*cause = link_xasprintf("cannot send to %s: %s", lk->address,
			    n == 0 ? "timed out" : strerror(errno));
			return -1;
		}
	}
	return 0;
}
