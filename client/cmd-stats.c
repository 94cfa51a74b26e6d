/*
 * cmd-stats.c: tpctl stats: the daemon's version, phase, uptime and
 * connections, then two tables of one row per pool: what the pool is now
 * (its state, workers and queue) and what became of the tasks it accepted;
 * and with [source NAME] sections, a table of one row per source (its
 * state, entries in flight, counts, last error). The second adds up:
 * ACCEPTED is QUEUED + RUNNING + each end's count, at every moment, as the
 * pool counts them all under one lock (a retried task counts once per
 * attempt; SKIPPED tasks never entered the pool).
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tpctl.h"
#include "wire.h"

#define STATS_MAX_COLS 16

/* One column: its header and the field it shows (NULL: the pool's state). */
struct stats_col {
	const char *header;
	const char *key;
};

static const struct stats_col stats_now[] = {
	{ "POOL", FIELD_NAME }, { "STATE", NULL }, { "TARGET", FIELD_TARGET },
	{ "MIN-MAX", FIELD_MIN_WORKERS },
	{ "WORKERS", FIELD_WORKERS }, { "BUSY", FIELD_BUSY }, { "QUEUED", FIELD_QUEUED },
	{ "HELD", FIELD_HELD }, { "CAPACITY", FIELD_CAPACITY }, { "LIMIT", FIELD_LIMIT },
	{ "OLDEST", FIELD_OLDEST_QUEUED_MS }, { "SCHEDULED", FIELD_SCHEDULED },
	{ "WAITING", FIELD_WAITING }, { NULL, NULL }
};

static const struct stats_col stats_tasks[] = {
	{ "POOL", FIELD_NAME }, { "ACCEPTED", FIELD_ACCEPTED }, { "QUEUED", FIELD_QUEUED },
	{ "RUNNING", FIELD_BUSY }, { "SUCCEEDED", FIELD_SUCCEEDED }, { "FAILED", FIELD_FAILED },
	{ "TIMED_OUT", FIELD_TIMED_OUT }, { "CANCELLED", FIELD_CANCELLED },
	{ "EXPIRED", FIELD_EXPIRED }, { "DISPLACED", FIELD_DISPLACED },
	{ "REJECTED", FIELD_REJECTED }, { "QUOTA", FIELD_REJECTED_QUOTA }, { "LOST", FIELD_LOST },
	{ "SKIPPED", FIELD_SKIPPED }, { "RETRIED", FIELD_RETRIED }, { NULL, NULL }
};

/* The sources: what each is now, and what became of the entries it read. */
static const struct stats_col stats_sources[] = {
	{ "SOURCE", FIELD_NAME }, { "STATE", "state" }, { "POOL", "pool" },
	{ "IN_FLIGHT", "in_flight" }, { "READ", "read" }, { "CLAIMED", "claimed" },
	{ "ACKED", "acked" }, { "DEAD_LETTERED", "dead_lettered" },
	{ "LAST_ERROR", "last_error" }, { NULL, NULL }
};
#define STATS_SOURCES_ALIGN "lllrrrrrl"


void
stats_journal_line(const json_t *ev, FILE *f)
{
	const json_t *j = json_object_get(ev, FIELD_JOURNAL);
	const char *state = event_str(j, "state", NULL);
	char bytes[FORMAT_BYTES_LEN], max[FORMAT_BYTES_LEN], held[FORMAT_BYTES_LEN];

	if (state == NULL)
		return;
	if (strcmp(state, "off") == 0) {
		fprintf(f, "journal: off (nothing survives a restart)\n");
		return;
	}
	format_bytes((uint64_t)event_int(j, "bytes", 0), bytes, sizeof bytes);
	format_bytes((uint64_t)event_int(j, "max_bytes", 0), max, sizeof max);
	if (strcmp(state, "failed") == 0) {
		char *why = format_cell("error", json_object_get(j, "error"));

		fprintf(f, "journal: FAILED: %s; submits are refused (storage), and %lld "
		    "connection%s' output (%s) and %lld task start%s wait for its recovery\n",
		    why != NULL ? format_safe(why) : "?", (long long)event_int(j, "held_connections", 0),
		    event_int(j, "held_connections", 0) == 1 ? "" : "s",
		    format_bytes((uint64_t)event_int(j, "held_bytes", 0), held, sizeof held),
		    (long long)event_int(j, "held_starts", 0),
		    event_int(j, "held_starts", 0) == 1 ? "" : "s");
		free(why);
		return;
	}
	fprintf(f, "journal: %s%s, %s of %s in %lld segment%s, sync %s, %lld syncs\n",
	    state, json_is_true(json_object_get(j, "at_limit")) ? " but AT ITS LIMIT "
	    "(journal_max_bytes: submits are refused)" : "", bytes, max,
	    (long long)event_int(j, "segments", 0), event_int(j, "segments", 0) == 1 ? "" : "s",
	    event_str(j, "sync", "?"), (long long)event_int(j, "syncs", 0));
}

/*
 * Exec tasks' output files (stats' "spool"; none when output_spool is off):
 * how much of output_spool_bytes they take, and how many were removed to
 * make room (their tasks' whole output can no longer be read).
 */
static void
stats_spool_line(const json_t *ev, FILE *f)
{
	const json_t *sp = json_object_get(ev, FIELD_SPOOL);
	char bytes[FORMAT_BYTES_LEN], max[FORMAT_BYTES_LEN];
	long long files = event_int(sp, "files", 0), dropped = event_int(sp, "dropped", 0);

	if (!json_is_object(sp))
		return;
	fprintf(f, "spool: %lld task output%s, %s of %s, %lld removed to make room\n", files,
	    files == 1 ? "" : "s", format_bytes((uint64_t)event_int(sp, "bytes", 0), bytes,
	    sizeof bytes), format_bytes((uint64_t)event_int(sp, "max_bytes", 0), max, sizeof max),
	    dropped);
}

/*
 * The loop's pauses since the start (stats' "loop"): how long every client
 * waited, at worst, behind the daemon's longest stretch without polling.
 */
static void
stats_loop_line(const json_t *ev, FILE *f)
{
	const json_t *loop = json_object_get(ev, FIELD_LOOP);
	const json_t *longest = json_object_get(loop, "longest_pause_ms");
	int64_t pauses = event_int(loop, "pauses", 0);
	int64_t upto10 = event_int(json_object_get(loop, "pauses_le_ms"), "10", pauses);

	if (!json_is_number(longest))
		return;
	fprintf(f, "loop: longest pause %.1f ms since the start; %lld pause%s of 1 ms or more, "
	    "%lld over 10 ms\n", json_number_value(longest), (long long)pauses,
	    pauses == 1 ? "" : "s", (long long)(pauses - upto10));
}

/* open, paused, closed (shutting down: it takes no more tasks) or removed (by SIGHUP). */
static const char *
stats_pool_state(const json_t *pool)
{
	if (json_is_true(json_object_get(pool, FIELD_REMOVED)))
		return "removed";
	if (strcmp(event_str(pool, FIELD_STATE, ""), POOL_STATE_PAUSED) == 0)
		return POOL_STATE_PAUSED;
	if (json_is_true(json_object_get(pool, FIELD_CLOSED)))
		return "closed";
	if (json_object_get(pool, FIELD_CLOSED) == NULL)
		return "-";
	return "open";
}

static char *
stats_cell(const json_t *pool, const char *key)
{
	char buf[FORMAT_DURATION_LEN];
	json_t *v;
	char *s;

	if (key == NULL)
		return strdup(stats_pool_state(pool));
	if (strcmp(key, FIELD_MIN_WORKERS) == 0 && json_object_get(pool, key) != NULL &&
	    asprintf(&s, "%lld-%lld", (long long)event_int(pool, FIELD_MIN_WORKERS, 0),
	    (long long)event_int(pool, FIELD_MAX_WORKERS, 0)) != -1)
		return s;
	if (strcmp(key, FIELD_OLDEST_QUEUED_MS) == 0)
		return strdup(event_int(pool, FIELD_QUEUED, 0) > 0 ?
		    format_duration(event_num(pool, key, 0), buf, sizeof buf) : "-");
	if ((v = json_object_get(pool, key)) == NULL)
		return strdup("-");
	if (json_is_integer(v) && asprintf(&s, "%lld",
	    (long long)json_integer_value(v)) != -1)
		return s;
	return format_cell(key, v);
}

/* A table of one row per object of rows; aligns NULL: the first column and the pool's state left, the rest right. */
static void
stats_table(const json_t *pools, const struct stats_col *cols, const char *aligns, FILE *f)
{
	const char *headers[STATS_MAX_COLS];
	char *cells[STATS_MAX_COLS], align[STATS_MAX_COLS + 1];
	struct table *t;
	json_t *pool;
	size_t i, j, n;

	for (n = 0; cols[n].header != NULL; n++) {
		headers[n] = cols[n].header;
		align[n] = aligns != NULL ? aligns[n] : n == 0 || cols[n].key == NULL ? 'l' : 'r';
	}
	align[n] = '\0';
	if ((t = table_new(align, headers)) == NULL)
		return;
	json_array_foreach(pools, i, pool) {
		for (j = 0; j < n; j++)
			cells[j] = stats_cell(pool, cols[j].key);
		table_add(t, (const char *const *)cells);
		for (j = 0; j < n; j++)
			free(cells[j]);
	}
	table_print(t, f);
	table_free(t);
}

void
stats_sources_print(const json_t *sources, FILE *f)
{
	if (json_array_size(sources) == 0)
		return;
	fprintf(f, "\n");
	stats_table(sources, stats_sources, STATS_SOURCES_ALIGN, f);
}

static void
stats_print(const json_t *ev)
{
	const char *phase = format_safe(event_str(ev, FIELD_PHASE, NULL));
	const char *version = format_safe(event_str(ev, FIELD_VERSION, NULL));
	const char *containment = format_safe(event_str(ev, FIELD_CONTAINMENT, NULL));
	const char *tcp_auth = event_str(ev, FIELD_TCP_AUTH, NULL);
	json_t *pools = json_object_get(ev, FIELD_POOLS);
	char up[FORMAT_DURATION_LEN];

	printf("tpd%s%s:", version != NULL ? " " : "", version != NULL ? version : "");
	if (phase != NULL && strcmp(phase, PHASE_DRAINING) == 0)
		printf(" draining (no new tasks; the accepted ones run to their end),");
	else if (phase != NULL)
		printf(" %s,", phase);
	printf(" up %s, %lld connection%s",
	    format_duration(event_num(ev, FIELD_UPTIME_MS, 0), up, sizeof up),
	    (long long)event_int(ev, FIELD_CONNECTIONS, 0),
	    event_int(ev, FIELD_CONNECTIONS, 0) == 1 ? "" : "s");
	if (containment != NULL)
		printf(", tasks contained by %s", containment);
	printf("\n");
	if (tcp_auth != NULL && strcmp(tcp_auth, TCP_AUTH_NONE) == 0)
		fprintf(stderr, "tpctl: warning: the daemon lets TCP clients in without a token "
		    "(tcp_auth = none)\n");
	for (size_t i = 0; i < json_array_size(json_object_get(ev, FIELD_WARNINGS)); i++)
		fprintf(stderr, "tpctl: warning: %s\n", format_safe(json_string_value(
		    json_array_get(json_object_get(ev, FIELD_WARNINGS), i))));
	stats_table(pools, stats_now, NULL, stdout);
	printf("\n");
	stats_table(pools, stats_tasks, NULL, stdout);
	stats_sources_print(json_object_get(ev, FIELD_SOURCES), stdout);
	printf("\n");
	stats_loop_line(ev, stdout);
	if (json_object_get(ev, FIELD_JOURNAL) != NULL)
		stats_journal_line(ev, stdout);
	stats_spool_line(ev, stdout);
}

static int
stats_exec(struct tpctl *opt, int argc, char **argv)
{
	json_t *reply;
	int code;

	if ((code = cmd_noopts(&cmd_stats, opt, argc, argv)) != -1)
		return code;
	if (argc > optind)
		return cmd_usage_error(&cmd_stats, "no arguments expected");
	code = session_once(opt, "stats", json_pack("{s:s}", FIELD_OP, OP_STATS),
	    &reply);
	if (code != 0)
		return code;
	if (!opt->json)
		stats_print(reply);
	json_decref(reply);
	return 0;
}

const struct cmd cmd_stats = {
	.name = "stats",
	.args = "",
	.summary = "show the pools' figures as tables",
	.help =
	    "Prints the daemon's version, phase (running, draining, stopping),\n"
	    "uptime and connections, then two tables of one row per pool. The first\n"
	    "is the pool now: its state (open; closed: shutting down; removed: gone\n"
	    "from the configuration, finishing its tasks), target and current\n"
	    "workers, busy workers, queued tasks and the queue's capacity, the\n"
	    "resize limit, and how long the oldest queued task has waited. The\n"
	    "second counts the tasks since start: ACCEPTED = QUEUED + RUNNING +\n"
	    "SUCCEEDED + FAILED + TIMED_OUT + CANCELLED + EXPIRED; REJECTED were\n"
	    "never accepted (by reason: a full queue, closed, quota, or storage: the\n"
	    "journal); LOST ended lost at this start (running when tpd stopped),\n"
	    "outside that sum. With [source NAME] sections, a third table has a row\n"
	    "per source: its state (connecting, connected, down, draining, stopped),\n"
	    "pool, the entries in flight (read, not yet acknowledged), the entries\n"
	    "read, claimed from stopped consumers, acknowledged and dead-lettered\n"
	    "since start, and the last Redis error. Lines after the tables give the\n"
	    "event loop's longest pause since the start (how long every client waited,\n"
	    "at worst, behind the daemon's longest stretch without polling) and how\n"
	    "the journal is: ok, at its limit, or failed (and what waits for it).\n\n",
	.exec = stats_exec,
};
