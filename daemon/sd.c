/*
 * sd.c: tpd as a systemd service. Notifications go through sd_notify(3), the
 * watchdog interval comes from sd_watchdog_enabled(3) and listeners from
 * sd_listen_fds_with_names(3). Timers live on the daemon's event loop, so a
 * stuck loop stops the watchdog pings and systemd restarts the daemon.
 */
#include "config.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <arpa/inet.h>
#include <netinet/in.h>

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/event.h>
#include <systemd/sd-daemon.h>

#include "base/clock.h"
#include "base/log.h"
#include "sd.h"

#define SDN_STATUS_INTERVAL_USEC 1000000ULL     /* STATUS= at most once a second */
#define SDN_EXTEND_PERIOD_USEC 5000000ULL       /* during a drain, every 5 s... */
#define SDN_EXTEND_USEC 15000000ULL             /* ...ask for 15 s more */

static struct {
	struct event_base *base;
	struct sdn_hooks hooks;
	bool notify;                /* NOTIFY_SOCKET is set */
	bool ready_once;
	bool stopping;
	bool unhealthy_logged;

	struct event *status_ev;    /* once a second: live figures */
	struct event *flush_ev;     /* one-shot: a status that had to wait */
	struct event *watchdog_ev;  /* every WATCHDOG_USEC / 2 */
	struct event *extend_ev;    /* during the drain */
	uint64_t watchdog_usec;

	char *ready_fields;         /* sent after READY=1 (sdn_ready_fields) */

	char status_sent[512];
	char status_pending[512];
	bool have_pending;
	uint64_t status_sent_usec;  /* monotonic; 0 = never */
} sdn;

static void
sdn_send(const char *state)
{
	int r;

	if (!sdn.notify)
		return;
	if ((r = sd_notify(0, state)) < 0)
		log_warnx("sd_notify %.*s: %s", (int)strcspn(state, "\n"), state,
		    strerror(-r));
}

static bool
sdn_healthy(void)
{
	return sdn.hooks.healthy == NULL || sdn.hooks.healthy(sdn.hooks.arg) != 0;
}

static void
sdn_timer_add(struct event *ev, uint64_t usec)
{
	struct timeval tv = {
		.tv_sec = (time_t)(usec / 1000000),
		.tv_usec = (suseconds_t)(usec % 1000000),
	};

	event_add(ev, &tv);
}

/*
 * Sends the pending status if a second has passed since the last one, else
 * arms the one-shot flush timer for the rest of that second (plus a little:
 * libevent's clock may be coarser than ours, and an early wake-up only
 * re-arms).
 */
static void
sdn_status_flush(void)
{
	uint64_t now = clock_now_us(), elapsed = now - sdn.status_sent_usec;
	char msg[sizeof sdn.status_pending + 8];

	if (!sdn.have_pending)
		return;
	if (sdn.status_sent_usec != 0 && elapsed < SDN_STATUS_INTERVAL_USEC) {
		if (!event_pending(sdn.flush_ev, EV_TIMEOUT, NULL))
			sdn_timer_add(sdn.flush_ev, SDN_STATUS_INTERVAL_USEC - elapsed + 2000);
		return;
	}
	snprintf(msg, sizeof msg, "STATUS=%s", sdn.status_pending);
	sdn_send(msg);
	memcpy(sdn.status_sent, sdn.status_pending, sizeof sdn.status_sent);
	sdn.have_pending = false;
	sdn.status_sent_usec = now;
}

static void
sdn_status_set(const char *text)
{
	if (!sdn.notify)
		return;
	if (strcmp(text, sdn.status_sent) == 0) {
		sdn.have_pending = false;       /* an older pending text is stale now */
		return;
	}
	snprintf(sdn.status_pending, sizeof sdn.status_pending, "%s", text);
	/* STATUS= is one line: a newline would start another assignment */
	sdn.status_pending[strcspn(sdn.status_pending, "\n")] = '\0';
	sdn.have_pending = true;
	sdn_status_flush();
}

static void
sdn_status_tick(evutil_socket_t fd, short what, void *arg)
{
	char buf[sizeof sdn.status_pending];

	if (sdn.hooks.status != NULL) {
		buf[0] = '\0';
		sdn.hooks.status(sdn.hooks.arg, buf, sizeof buf);
		if (buf[0] != '\0')
			sdn_status_set(buf);
	}
}

static void
sdn_flush_tick(evutil_socket_t fd, short what, void *arg)
{
	sdn_status_flush();
}

static void
sdn_watchdog_tick(evutil_socket_t fd, short what, void *arg)
{
	if (sdn_healthy()) {
		if (sdn.unhealthy_logged)
			log_notice("healthy again: watchdog pings resume");
		sdn.unhealthy_logged = false;
		sdn_send("WATCHDOG=1");
		return;
	}
	if (!sdn.unhealthy_logged)
		log_warnx("unhealthy: watchdog pings stop until the pools recover");
	sdn.unhealthy_logged = true;
}

static void
sdn_extend_tick(evutil_socket_t fd, short what, void *arg)
{
	if (sdn_healthy())
		sdn_extend_timeout(SDN_EXTEND_USEC);
}

void
sdn_setup(struct event_base *base, const struct sdn_hooks *hooks)
{
	const char *ns = getenv("NOTIFY_SOCKET");

	memset(&sdn, 0, sizeof sdn);
	sdn.base = base;
	if (hooks != NULL)
		sdn.hooks = *hooks;
	sdn.notify = ns != NULL && *ns != '\0';
	if (!sdn.notify)
		return;
	sdn.status_ev = event_new(base, -1, EV_PERSIST, sdn_status_tick, NULL);
	sdn.flush_ev = event_new(base, -1, 0, sdn_flush_tick, NULL);
	sdn.extend_ev = event_new(base, -1, EV_PERSIST, sdn_extend_tick, NULL);
	if (sdn.status_ev == NULL || sdn.flush_ev == NULL || sdn.extend_ev == NULL)
		fatalx("sdn_setup: cannot make timers");
	/* sd_watchdog_enabled also checks WATCHDOG_PID names this process */
	if (sd_watchdog_enabled(0, &sdn.watchdog_usec) > 0 && sdn.watchdog_usec > 0) {
		sdn.watchdog_ev = event_new(base, -1, EV_PERSIST, sdn_watchdog_tick, NULL);
		if (sdn.watchdog_ev == NULL)
			fatalx("sdn_setup: cannot make the watchdog timer");
		log_debug("watchdog: every %llu ms",
		    (unsigned long long)sdn.watchdog_usec / 2000);
	}
}

void
sdn_ready_fields(const char *lines)
{
	free(sdn.ready_fields);
	sdn.ready_fields = lines != NULL ? strdup(lines) : NULL;
}

void
sdn_ready(void)
{
	char *msg = NULL;

	if (sdn.ready_fields != NULL && asprintf(&msg, "READY=1\n%s", sdn.ready_fields) != -1)
		sdn_send(msg);
	else
		sdn_send("READY=1");
	free(msg);
	if (!sdn.notify || sdn.ready_once)
		return;
	sdn.ready_once = true;
	sdn_timer_add(sdn.status_ev, SDN_STATUS_INTERVAL_USEC);
	sdn_status_tick(-1, 0, NULL);   /* the first figures right after READY=1 */
	if (sdn.watchdog_ev != NULL) {
		sdn_timer_add(sdn.watchdog_ev, sdn.watchdog_usec / 2);
		sdn_watchdog_tick(-1, 0, NULL);
	}
}

void
sdn_status(const char *fmt, ...)
{
	char buf[sizeof sdn.status_pending];
	va_list ap;

	if (!sdn.notify)
		return;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	sdn_status_set(buf);
}

void
sdn_reloading(void)
{
	sdn_send("RELOADING=1");
}

void
sdn_stopping(void)
{
	if (sdn.stopping)
		return;
	sdn.stopping = true;
	sdn_send("STOPPING=1");
	if (sdn.notify) {
		sdn_extend_timeout(SDN_EXTEND_USEC);
		sdn_timer_add(sdn.extend_ev, SDN_EXTEND_PERIOD_USEC);
	}
}

void
sdn_extend_timeout(uint64_t usec)
{
	char msg[64];

	snprintf(msg, sizeof msg, "EXTEND_TIMEOUT_USEC=%llu", (unsigned long long)usec);
	sdn_send(msg);
}

void
sdn_teardown(void)
{
	if (sdn.status_ev != NULL)
		event_free(sdn.status_ev);
	if (sdn.flush_ev != NULL)
		event_free(sdn.flush_ev);
	if (sdn.watchdog_ev != NULL)
		event_free(sdn.watchdog_ev);
	if (sdn.extend_ev != NULL)
		event_free(sdn.extend_ev);
	free(sdn.ready_fields);
	memset(&sdn, 0, sizeof sdn);
}

/* What fd is: a listening Unix or TCP stream socket, or -1 with *cause set. */
static int
sdn_classify(int fd, const char *name, enum sdn_kind *kind, char **cause)
{
	if (sd_is_socket(fd, AF_UNIX, SOCK_STREAM, 1) > 0)
		*kind = SDN_UNIX;
	else if (sd_is_socket_inet(fd, 0, SOCK_STREAM, 1, 0) > 0)
		*kind = SDN_TCP;
	else
		return cause_set(cause, "socket activation: fd %d (%s) is not a "
		    "listening Unix or TCP stream socket", fd, name);
	if (strcmp(name, "unix") == 0 && *kind != SDN_UNIX)
		return cause_set(cause, "socket activation: fd %d is named unix but is "
		    "a TCP socket", fd);
	if (strcmp(name, "tcp") == 0 && *kind != SDN_TCP)
		return cause_set(cause, "socket activation: fd %d is named tcp but is "
		    "a Unix socket", fd);
	if (strcmp(name, "unix") != 0 && strcmp(name, "tcp") != 0)
		log_info("socket activation: fd %d named \"%s\" is taken as %s", fd,
		    name, *kind == SDN_UNIX ? "unix" : "tcp");
	return 0;
}

/* The address fd is bound to, for logs: a path, "1.2.3.4:80" or "[::1]:80". */
static void
sdn_describe(int fd, char *buf, size_t len)
{
	struct sockaddr_storage ss;
	socklen_t sslen = sizeof ss;
	char host[INET6_ADDRSTRLEN] = "?";

	snprintf(buf, len, "fd %d", fd);
	if (getsockname(fd, (struct sockaddr *)&ss, &sslen) == -1)
		return;
	if (ss.ss_family == AF_UNIX) {
		const struct sockaddr_un *sun = (const struct sockaddr_un *)&ss;
		if (sslen > offsetof(struct sockaddr_un, sun_path) && sun->sun_path[0] != '\0')
			snprintf(buf, len, "%.*s", (int)(sslen - offsetof(struct sockaddr_un,
			    sun_path)), sun->sun_path);
	} else if (ss.ss_family == AF_INET) {
		const struct sockaddr_in *sin = (const struct sockaddr_in *)&ss;
		inet_ntop(AF_INET, &sin->sin_addr, host, sizeof host);
		snprintf(buf, len, "%s:%u", host, ntohs(sin->sin_port));
	} else if (ss.ss_family == AF_INET6) {
		const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)&ss;
		inet_ntop(AF_INET6, &sin6->sin6_addr, host, sizeof host);
		snprintf(buf, len, "[%s]:%u", host, ntohs(sin6->sin6_port));
	}
}

int
sdn_activation_fds(struct sdn_activated **out, char **cause)
{
	char **names = NULL;
	struct sdn_activated *a = NULL;
	int n, flags, rv;

	*out = NULL;
	if ((n = sd_listen_fds_with_names(1, &names)) < 0)
		return cause_set(cause, "socket activation: %s", strerror(-n));
	if (n > 0 && (a = calloc((size_t)n, sizeof *a)) == NULL) {
		rv = cause_set(cause, "socket activation: %s", strerror(errno));
		goto out;
	}
	for (int i = 0; i < n; i++) {
		const char *name = names != NULL && names[i] != NULL ? names[i] : "unknown";
		a[i].fd = SD_LISTEN_FDS_START + i;
		snprintf(a[i].name, sizeof a[i].name, "%s", name);
		sdn_describe(a[i].fd, a[i].addr, sizeof a[i].addr);
		if (sdn_classify(a[i].fd, name, &a[i].kind, cause) == -1) {
			rv = -1;
			goto out;
		}
		if ((flags = fcntl(a[i].fd, F_GETFL)) == -1 ||
		    fcntl(a[i].fd, F_SETFL, flags | O_NONBLOCK) == -1) {
			rv = cause_set(cause, "socket activation: fd %d: %s", a[i].fd,
			    strerror(errno));
			goto out;
		}
	}
	*out = a;
	a = NULL;
	rv = n;
out:
	free(a);
	if (names != NULL) {
		for (int i = 0; i < n; i++)
			free(names[i]);
		free(names);
	}
	return rv;
}
