/*
 * daemon.h: the state of the running daemon, owned by the event-loop thread.
 * Everything here is "loop thread only" unless a field says otherwise.
 */
#ifndef TPD_DAEMON_H
#define TPD_DAEMON_H

#include <stdbool.h>
#include <stdint.h>

#include <event2/event.h>

#include "conf.h"

struct pool;
struct tokens;

enum daemon_phase {
	DAEMON_RUNNING,
	DAEMON_DRAINING,     /* no new submits; accepted tasks run to their end */
	DAEMON_STOPPING_NOW, /* queued tasks cancelled, running ones asked to stop */
	DAEMON_EXITING,      /* every done delivered; flushing and leaving the loop */
};

struct daemon {
	struct event_base *base;
	struct conf conf;
	struct conf_flags *flags;  /* the command line's settings, applied over the file (start, SIGHUP) */
	enum daemon_phase phase;
	uint64_t started_us;
	uint64_t outstanding;      /* accepted tasks whose done is not yet processed */
	struct event *shutdown_timer;
	struct event *exit_timer;
	struct tokens *tokens;     /* NULL = TCP needs no token (tokens.h) */
	bool have_admin_gid;
	unsigned admin_gid;
};

extern struct daemon *daemon_state;

/* Starts a drain or a stop now (SPEC section 4). A second call can upgrade drain to now. */
void daemon_begin_shutdown(bool now);

/* Called when outstanding drops or a connection drains: exits the loop when nothing is left. */
void daemon_maybe_exit(void);

/* SIGHUP: re-reads the configuration file and applies it (reload.c). */
void daemon_reload(void);

#endif
