/*
 * listen.c: the listeners. Accepting is libevent's evconnlistener; what is
 * ours is the admission of a new connection (max_connections), the pause
 * after accept() fails for lack of descriptors or memory (so the loop does
 * not spin on a listener it cannot serve), and the Unix socket's file.
 */
#include "config.h"

#include <errno.h>
#include <grp.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>

#include <event2/listener.h>

#include "auth.h"
#include "conf/conf.h"
#include "conn.h"
#include "daemon.h"
#include "listen.h"
#include "base/log.h"
#include "wire.h"

#define LISTEN_BACKLOG 1024
#define ACCEPT_PAUSE_MS 100

struct listener {
	struct evconnlistener *evl;
	struct event *resume;   /* re-enables the listener after a pause */
	bool is_unix;
	char *unlink_path;      /* the socket file we created */
	char name[128];
};

static struct listener *listeners[32];
static size_t nlisteners;

static void
accept_cb(struct evconnlistener *evl, evutil_socket_t fd, struct sockaddr *sa, int salen,
    void *arg)
{
	struct listener *l = arg;
	unsigned max = daemon_state->conf.max_connections;
	struct conn *c;

	if (conn_count() >= max) {
		char msg[128];
		log_warnx("%s: max_connections (%u) reached: refusing a client", l->name, max);
		snprintf(msg, sizeof msg, "too many connections: tpd serves at most %u at once "
		    "(max_connections); try again once one closes", max);
		conn_refuse(fd, ERR_TOO_MANY_CONNECTIONS, msg);
		return;
	}
	if ((c = conn_new(fd, l->is_unix, sa)) != NULL)
		conn_set_role(c, auth_initial_role(c));
}

static void
resume_cb(evutil_socket_t fd, short what, void *arg)
{
	struct listener *l = arg;

	evconnlistener_enable(l->evl);
}

/* accept() failed: pause on resource shortage instead of spinning; log the rest. */
static void
accept_error_cb(struct evconnlistener *evl, void *arg)
{
	struct listener *l = arg;
	int err = EVUTIL_SOCKET_ERROR();
	struct timeval tv = { 0, ACCEPT_PAUSE_MS * 1000 };

	if (err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM) {
		log_warnx("%s: accept: %s: pausing %d ms", l->name, strerror(err), ACCEPT_PAUSE_MS);
		evconnlistener_disable(evl);
		evtimer_add(l->resume, &tv);
		return;
	}
	log_warnx("%s: accept: %s", l->name, strerror(err));
}

static int
add_listener(int fd, bool is_unix, const char *name, const char *unlink_path, char **cause)
{
	struct listener *l;

	if (nlisteners == sizeof listeners / sizeof listeners[0]) {
		close(fd);
		return cause_set(cause, "%s: too many listeners", name);
	}
	if ((l = calloc(1, sizeof *l)) == NULL) {
		close(fd);
		return cause_set(cause, "%s: out of memory", name);
	}
	evutil_make_socket_nonblocking(fd);
	l->is_unix = is_unix;
	snprintf(l->name, sizeof l->name, "%s", name);
	/*
	 * Backlog 0: the socket listens already, with the backlog tpd chose
	 * (LISTEN_BACKLOG) or systemd did (an activated socket). -1 would make
	 * libevent call listen(fd, 128) again and cut it down.
	 */
	l->evl = evconnlistener_new(daemon_state->base, accept_cb, l,
	    LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC, 0, fd);
	if (l->evl == NULL) {
		close(fd);
		free(l);
		return cause_set(cause, "%s: cannot listen: %s", name, strerror(errno));
	}
	evconnlistener_set_error_cb(l->evl, accept_error_cb);
	l->resume = evtimer_new(daemon_state->base, resume_cb, l);
	l->unlink_path = unlink_path ? strdup(unlink_path) : NULL;
	listeners[nlisteners++] = l;
	return 0;
}

/* mkdir -p for the socket's directory. */
static int
make_parent_dirs(const char *path, char **cause)
{
	char *dir = strdup(path), *slash;

	if (dir == NULL)
		return cause_set(cause, "out of memory");
	if ((slash = strrchr(dir, '/')) == NULL || slash == dir) {
		free(dir);
		return 0;
	}
	*slash = '\0';
	for (char *p = dir + 1; ; p++) {
		if (*p == '/' || *p == '\0') {
			char saved = *p;
			*p = '\0';
			/* 0755: the socket's own mode decides who may connect. */
			if (mkdir(dir, 0755) == -1 && errno != EEXIST) {
				int err = errno;
				cause_set(cause, "cannot create directory %s: %s", dir, strerror(err));
				free(dir);
				return -1;
			}
			*p = saved;
			if (saved == '\0')
				break;
		}
	}
	free(dir);
	return 0;
}

/*
 * The directory that holds the socket must be tpd's own: owned by its user
 * or by root, and writable by nobody else (a root-owned sticky directory
 * such as /tmp aside: there nobody else may remove or rename what tpd
 * makes). Otherwise whoever made it first (a /tmp/tpd-UID planted by
 * another user) could replace the socket between two starts and catch
 * every client, as ssh-agent and tmux refuse such a directory.
 */
static int
check_socket_dir(const char *path, char **cause)
{
	char *dir = strdup(path), *slash;
	struct stat st;
	uid_t me = geteuid();
	int rv = 0;

	if (dir == NULL)
		return cause_set(cause, "out of memory");
	if ((slash = strrchr(dir, '/')) == NULL)
		strcpy(dir, ".");
	else if (slash == dir)
		slash[1] = '\0';
	else
		*slash = '\0';
	if (stat(dir, &st) == -1)
		rv = cause_set(cause, "socket directory %s: %s", dir, strerror(errno));
	else if (!S_ISDIR(st.st_mode))
		rv = cause_set(cause, "socket directory %s is not a directory", dir);
	else if (st.st_uid != me && st.st_uid != 0)
		rv = cause_set(cause, "socket directory %s belongs to uid %u, not to tpd's user "
		    "(uid %u) or root: another user may have made it to catch tpd's clients; "
		    "remove it, or choose another -s", dir, (unsigned)st.st_uid, (unsigned)me);
	else if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0 &&
	    !(st.st_uid == 0 && (st.st_mode & S_ISVTX) != 0))
		rv = cause_set(cause, "socket directory %s is writable by %s (mode %04o): another "
		    "user could replace the socket; chmod go-w it, or choose another -s", dir,
		    (st.st_mode & S_IWOTH) ? "others" : "its group", (unsigned)(st.st_mode & 07777));
	free(dir);
	return rv;
}

/* A socket file in the way: replace it if nobody answers on it, else refuse. */
static int
clear_stale_socket(const char *path, const struct sockaddr_un *sun, char **cause)
{
	struct stat st;
	int fd;

	if (lstat(path, &st) == -1)
		return errno == ENOENT ? 0 : cause_set(cause, "%s: %s", path, strerror(errno));
	if (!S_ISSOCK(st.st_mode))
		return cause_set(cause, "%s exists and is not a socket: remove it or choose another -s",
		    path);
	if ((fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) == -1)
		return cause_set(cause, "socket: %s", strerror(errno));
	if (connect(fd, (const struct sockaddr *)sun, sizeof *sun) == 0) {
		close(fd);
		return cause_set(cause, "%s is in use by a running daemon (is tpd already running?)",
		    path);
	}
	close(fd);
	log_info("removing stale socket %s left by a daemon that is gone", path);
	if (unlink(path) == -1 && errno != ENOENT)
		return cause_set(cause, "cannot remove stale socket %s: %s", path, strerror(errno));
	return 0;
}

int
listen_unix_busy(const char *path, char **cause)
{
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	struct stat st;
	int fd, rv = 0;

	if (strlen(path) >= sizeof sun.sun_path || lstat(path, &st) == -1 || !S_ISSOCK(st.st_mode))
		return 0;       /* listen_unix says what is wrong with it */
	strcpy(sun.sun_path, path);
	if ((fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) == -1)
		return 0;
	if (connect(fd, (const struct sockaddr *)&sun, sizeof sun) == 0)
		rv = cause_set(cause, "%s is in use by a running daemon (is tpd already running?)",
		    path);
	close(fd);
	return rv;
}

int
listen_unix(const char *path, mode_t mode, const char *group, char **cause)
{
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	char name[160];
	int fd;

	if (strlen(path) >= sizeof sun.sun_path)
		return cause_set(cause, "socket path %s is longer than %zu bytes", path,
		    sizeof sun.sun_path - 1);
	strcpy(sun.sun_path, path);
	if (make_parent_dirs(path, cause) == -1 || check_socket_dir(path, cause) == -1 ||
	    clear_stale_socket(path, &sun, cause) == -1)
		return -1;
	if ((fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) == -1)
		return cause_set(cause, "socket: %s", strerror(errno));
	if (bind(fd, (struct sockaddr *)&sun, sizeof sun) == -1) {
		int err = errno;
		close(fd);
		return cause_set(cause, "cannot bind %s: %s", path, strerror(err));
	}
	if (chmod(path, mode) == -1)
		log_warn("chmod %s", path);
	if (group != NULL) {
		struct group *gr = getgrnam(group);
		if (gr == NULL) {
			close(fd);
			unlink(path);
			return cause_set(cause, "socket_group %s: no such group", group);
		}
		if (chown(path, (uid_t)-1, gr->gr_gid) == -1)
			log_warn("chown %s to group %s", path, group);
	}
	if (listen(fd, LISTEN_BACKLOG) == -1) {
		int err = errno;
		close(fd);
		unlink(path);
		return cause_set(cause, "cannot listen on %s: %s", path, strerror(err));
	}
	snprintf(name, sizeof name, "unix %s", path);
	if (add_listener(fd, true, name, path, cause) == -1)
		return -1;
	log_info("listening on unix %s", path);
	return 0;
}

int
listen_tcp_socket(const char *hostport, const char *what, char *name, size_t namelen,
    char **cause)
{
	char host[256], port[16], bound[INET6_ADDRSTRLEN] = "?";
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE |
	    AI_NUMERICSERV }, *res;
	struct sockaddr_storage ss;
	socklen_t sslen = sizeof ss;
	unsigned bound_port = 0;
	int fd, rc, one = 1;

	char *why = NULL;

	/* The same rule as the configuration file's listen key. */
	if (conf_split_hostport(hostport, host, sizeof host, port, sizeof port, &why) == -1) {
		cause_set(cause, "%s %s (write it as 127.0.0.1:7420 or [::1]:7420)",
		    what, why ? why : hostport);
		free(why);
		return -1;
	}
	if (strcmp(host, "*") == 0)
		host[0] = '\0'; /* every address */
	if ((rc = getaddrinfo(host[0] ? host : NULL, port, &hints, &res)) != 0)
		return cause_set(cause, "%s %s: %s", what, hostport, gai_strerror(rc));
	fd = socket(res->ai_family, res->ai_socktype | SOCK_CLOEXEC, res->ai_protocol);
	if (fd == -1) {
		freeaddrinfo(res);
		return cause_set(cause, "%s %s: socket: %s", what, hostport, strerror(errno));
	}
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (res->ai_family == AF_INET6)
		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
	if (bind(fd, res->ai_addr, res->ai_addrlen) == -1 || listen(fd, LISTEN_BACKLOG) == -1) {
		int err = errno;
		freeaddrinfo(res);
		close(fd);
		return cause_set(cause, "cannot listen on %s: %s", hostport, strerror(err));
	}
	freeaddrinfo(res);
	if (getsockname(fd, (struct sockaddr *)&ss, &sslen) == 0) {
		if (ss.ss_family == AF_INET) {
			struct sockaddr_in *sin = (struct sockaddr_in *)&ss;
			inet_ntop(AF_INET, &sin->sin_addr, bound, sizeof bound);
			bound_port = ntohs(sin->sin_port);
		} else {
			struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&ss;
			inet_ntop(AF_INET6, &sin6->sin6_addr, bound, sizeof bound);
			bound_port = ntohs(sin6->sin6_port);
		}
	}
	snprintf(name, namelen, ss.ss_family == AF_INET6 ? "tcp [%s]:%u" : "tcp %s:%u",
	    bound, bound_port);
	evutil_make_socket_nonblocking(fd);
	return fd;
}

int
listen_tcp(const char *hostport, char **cause)
{
	char name[300];
	int fd;

	if ((fd = listen_tcp_socket(hostport, "listen address", name, sizeof name, cause)) == -1)
		return -1;
	if (add_listener(fd, false, name, NULL, cause) == -1)
		return -1;
	log_info("listening on %s", name);
	return 0;
}

int
listen_adopt(int fd, bool is_unix, const char *name, char **cause)
{
	if (add_listener(fd, is_unix, name, NULL, cause) == -1)
		return -1;
	log_info("listening on %s (socket activation)", name);
	return 0;
}

size_t
listen_count(void)
{
	return nlisteners;
}

const char *
listen_name(size_t i)
{
	return i < nlisteners ? listeners[i]->name : NULL;
}

void
listen_close_all(void)
{
	for (size_t i = 0; i < nlisteners; i++) {
		struct listener *l = listeners[i];
		evconnlistener_free(l->evl);
		event_free(l->resume);
		if (l->unlink_path != NULL) {
			unlink(l->unlink_path);
			free(l->unlink_path);
		}
		free(l);
	}
	nlisteners = 0;
}
