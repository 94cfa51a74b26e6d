/* health.c: the daemon's health and live figures, for systemd's watchdog and STATUS=. */
#include "config.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "conn.h"
#include "daemon.h"
#include "durable.h"
#include "health.h"
#include "log.h"
#include "pools.h"
#include "tasks.h"

#define HEALTH_STUCK_MS 5000

int
health_check(void *arg)
{
	static bool was_unhealthy;
	char why[160] = "";

	for (size_t i = 0; i < pools_count() && why[0] == '\0'; i++) {
		struct pools_entry *e = pools_at(i);
		struct pool_snapshot s;

		pool_snapshot(e->pool, &s);
		if (!s.closed && s.target > 0 && s.workers == 0)
			snprintf(why, sizeof why, "pool %s has no worker left (target %u)",
			    e->name, s.target);
		else if (s.idle > 0 && s.queued > 0 &&
		    s.oldest_queued_us > (uint64_t)HEALTH_STUCK_MS * 1000)
			snprintf(why, sizeof why, "pool %s: %u idle workers but a task queued "
			    "for %llu ms", e->name, s.idle,
			    (unsigned long long)s.oldest_queued_us / 1000);
	}
	if (why[0] != '\0' && !was_unhealthy)
		log_warnx("unhealthy: %s", why);
	was_unhealthy = why[0] != '\0';
	return !was_unhealthy;
}

void
health_status(void *arg, char *buf, size_t len)
{
	struct daemon *d = daemon_state;
	const char *jstatus;
	size_t off = 0;
	int n;

#define APPEND(...) do {                                                      \
	n = snprintf(buf + off, len - off, __VA_ARGS__);                       \
	if (n < 0 || (size_t)n >= len - off)                                  \
		return;                                                       \
	off += (size_t)n;                                                     \
} while (0)

	buf[0] = '\0';
	if ((jstatus = durable_status()) != NULL)
		APPEND("%s; ", jstatus);
	if (d->phase != DAEMON_RUNNING)
		APPEND("%s, %llu tasks left; ", d->phase == DAEMON_DRAINING ? "draining" :
		    "stopping", (unsigned long long)tasks_outstanding());
	for (size_t i = 0; i < pools_count(); i++) {
		struct pools_entry *e = pools_at(i);
		struct pool_snapshot s;

		pool_snapshot(e->pool, &s);
		APPEND("%s %u/%u busy, %u queued%s; ", e->name, s.busy, s.workers, s.queued,
		    e->removed ? " (removed)" : "");
	}
	APPEND("%zu connections", conn_count());
#undef APPEND
}
