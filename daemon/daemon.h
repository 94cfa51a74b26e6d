/*
 * daemon.h: the state of the running daemon, owned by the event-loop thread.
 * Everything here is "loop thread only" unless a field says otherwise.
 *
 * Set up by tpd.c; read by every folder above conf (the settings in force,
 * the loop's event base). The daemon's phase and the shutdown are
 * shutdown.h's.
 */
#ifndef TPD_DAEMON_H
#define TPD_DAEMON_H

#include <stdbool.h>
#include <stdint.h>

#include <event2/event.h>

#include "base/pauses.h"
#include "conf/conf.h"

struct daemon {
	struct event_base *base;
	struct conf conf;
	struct conf_flags *flags;  /* the command line's settings, applied over the file (start, SIGHUP) */
	uint64_t started_us;
	struct pauses loop_pauses;  /* the loop's pauses (obs/loop-watch.c measures them) */
};

extern struct daemon *daemon_state;

#endif
