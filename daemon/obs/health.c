/*
 * health.c: the daemon's health and live figures, for systemd's watchdog
 * and STATUS=: the phase, each pool's busy workers and queue, and, when its
 * last seconds saw tasks, its rate and the p99 of queue waits and run times
 * (pool.h's recent figures), then the connections.
 */
#include "config.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "net/conn.h"
#include "journal/durable.h"
#include "health.h"
#include "base/log.h"
#include "pool/pools.h"
#include "shutdown.h"
#include "source/sources.h"
#include "task/tasks.h"

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
			snprintf(why, sizeof why, "pool %s: %u idle worker%s but a task queued "
			    "for %llu ms", e->name, s.idle, s.idle == 1 ? "" : "s",
			    (unsigned long long)s.oldest_queued_us / 1000);
	}
	if (why[0] != '\0' && !was_unhealthy)
		log_warnx("unhealthy: %s", why);
	was_unhealthy = why[0] != '\0';
	return !was_unhealthy;
}

/* A duration for people: 850us, 1.2ms, 30ms, 2.5s, 90s. */
static const char *
health_us(uint64_t us, char *buf, size_t len)
{
	if (us < 1000)
		snprintf(buf, len, "%lluus", (unsigned long long)us);
	else if (us < 10000)
		snprintf(buf, len, "%.1fms", us / 1000.0);
	else if (us < 1000000)
		snprintf(buf, len, "%.0fms", us / 1000.0);
	else if (us < 10000000)
		snprintf(buf, len, "%.1fs", us / 1e6);
	else
		snprintf(buf, len, "%.0fs", us / 1e6);
	return buf;
}

void
health_status(void *arg, char *buf, size_t len)
{
	const char *jstatus;
	char d1[32];
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
	if (shutdown_phase() != DAEMON_RUNNING)
		APPEND("%s, %llu task%s left; ", shutdown_phase() == DAEMON_DRAINING ? "draining" :
		    "stopping", (unsigned long long)tasks_outstanding(),
		    tasks_outstanding() == 1 ? "" : "s");
	for (size_t i = 0; i < pools_count(); i++) {
		struct pools_entry *e = pools_at(i);
		struct pool_snapshot s;

		pool_snapshot(e->pool, &s);
		APPEND("%s %u/%u busy, %u queued", e->name, s.busy, s.workers, s.queued);
		/* the last seconds, when they saw tasks */
		if (s.recent.rate_per_s > 0)
			APPEND(", %.1f tasks/s", s.recent.rate_per_s);
		if (s.recent.started > 0)
			APPEND(", wait p99 %s", health_us(s.recent.queued_p99_us, d1, sizeof d1));
		if (s.recent.ended > 0)
			APPEND(", run p99 %s", health_us(s.recent.run_p99_us, d1, sizeof d1));
		APPEND("%s; ", e->removed ? " (removed)" : "");
	}
	APPEND("%zu connection%s", conn_count(), conn_count() == 1 ? "" : "s");
#undef APPEND
	sources_describe(buf, len);
}
