/*
 * sd.h: tpd as a systemd service (libsystemd): readiness, status, reload and
 * stop notifications, the watchdog, and listeners passed by socket activation.
 *
 * The prefix is sdn_ because libsystemd owns sd_*. Every function here is for
 * the loop thread only. Without NOTIFY_SOCKET in the environment the
 * notifications do nothing and no timer runs; without WATCHDOG_USEC (for this
 * pid) there is no watchdog timer. NOTIFY_SOCKET and WATCHDOG_USEC stay in
 * the environment: exec tasks get a clean base environment, never tpd's.
 *
 * What goes out, in the order a normal life sends it:
 *   READY=1                      sdn_ready(), once listening, with the
 *   X_TPD_LISTEN=...             lines of sdn_ready_fields: tpd's, naming
 *                                each listener ("tcp 127.0.0.1:41234"), so
 *                                a test learns the port it was given
 *   STATUS=<live figures>        at most once a second from then on
 *   WATCHDOG=1                   every WATCHDOG_USEC/2, while healthy
 *   RELOADING=1 ... READY=1      sdn_reloading(), sdn_ready() around SIGHUP
 *   STOPPING=1                   sdn_stopping(), at the start of shutdown
 *   EXTEND_TIMEOUT_USEC=15000000 every 5 s while the drain runs and is healthy
 */
#ifndef TPD_SD_H
#define TPD_SD_H

#include <stddef.h>
#include <stdint.h>

struct event_base;

/* Nonzero while the daemon can do its work (the pools are not stuck). */
typedef int (*sdn_healthy_fn)(void *arg);

/* Writes one line of live figures (pools, connections) into buf, for STATUS=. */
typedef void (*sdn_status_fn)(void *arg, char *buf, size_t len);

struct sdn_hooks {
	sdn_healthy_fn healthy;     /* NULL: always healthy */
	sdn_status_fn status;       /* NULL: only sdn_status() sets STATUS= */
	void *arg;
};

/*
 * Remembers base and the hooks (copied). Call once, before sdn_ready; the
 * hooks are called from timers on base, on the loop thread.
 */
void sdn_setup(struct event_base *base, const struct sdn_hooks *hooks);

/*
 * READY=1. The first call starts the status timer (once a second, through
 * hooks.status) and, when WATCHDOG_USEC names this process, the watchdog
 * timer (every WATCHDOG_USEC/2: WATCHDOG=1 if hooks.healthy says so, else a
 * warning, once, and no ping, so systemd restarts a stuck daemon). Later
 * calls (after a reload) only send READY=1.
 */
void sdn_ready(void);

/*
 * STATUS=text. Sent at once unless one went out less than a second ago; then
 * the newest text waits for that second to end (a later call replaces it).
 * Text equal to the last one sent is not sent again.
 */
void sdn_status(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/*
 * Lines sent with every READY=1 after it ("NAME=value", one a line,
 * without a trailing newline; copied; NULL for none). Call after sdn_setup. systemd ignores the
 * names it does not know; sd_notify(3) asks that they start with X_.
 */
void sdn_ready_fields(const char *lines);

/* RELOADING=1; follow with sdn_ready() when the reload is done (or refused). */
void sdn_reloading(void);

/*
 * STOPPING=1, and from then on EXTEND_TIMEOUT_USEC every few seconds while
 * the loop runs and hooks.healthy says so, so that a long drain is not killed
 * by TimeoutStopSec while a stuck one still is.
 */
void sdn_stopping(void);

/* EXTEND_TIMEOUT_USEC=usec: the current start, reload or stop may take usec more. */
void sdn_extend_timeout(uint64_t usec);

/* Stops the timers and frees them; nothing is sent afterwards. */
void sdn_teardown(void);

enum sdn_kind {
	SDN_UNIX,   /* a listening AF_UNIX stream socket */
	SDN_TCP,    /* a listening AF_INET or AF_INET6 stream socket */
};

struct sdn_activated {
	int fd;                 /* close-on-exec and non-blocking */
	enum sdn_kind kind;
	char name[64];          /* FileDescriptorName=: "unix", "tcp", or another */
	char addr[128];         /* what it listens on: a path, "1.2.3.4:80", "[::1]:80" */
};

/*
 * The listening sockets systemd passed (sd_listen_fds_with_names; the
 * LISTEN_* variables are then removed from the environment). A socket named
 * "unix" must be a listening Unix stream socket and one named "tcp" a
 * listening TCP socket; others are classified by their family. Returns the
 * count (0 when not socket-activated; *out is then NULL) with *out an array
 * the caller frees, or -1 with *cause set (caller frees) when a passed fd is
 * not what its name says or not a listening stream socket.
 */
int sdn_activation_fds(struct sdn_activated **out, char **cause);

#endif
