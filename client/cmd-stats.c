/*
 * cmd-stats.c: tpctl stats: the daemon's uptime and connections, then one
 * row per pool.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tpctl.h"
#include "wire.h"

static char *
stats_num(const json_t *pool, const char *key)
{
	json_t *v = json_object_get(pool, key);
	char *s;

	if (v == NULL)
		return strdup("-");
	if (json_is_integer(v) && asprintf(&s, "%lld",
	    (long long)json_integer_value(v)) != -1)
		return s;
	return format_cell(key, v);
}

static void
stats_print(const json_t *ev)
{
	static const char *const headers[] = {
		"POOL", "TARGET", "WORKERS", "BUSY", "QUEUED", "CAPACITY", "LIMIT",
		"ACCEPTED", "REJECTED", "SUCCEEDED", "FAILED", "OLDEST"
	};
	static const char *const keys[] = {
		"name", "target", "workers", "busy", "queued", "capacity", "limit",
		"accepted", "rejected", "succeeded", "failed", "oldest_queued_ms"
	};
	char *cells[sizeof keys / sizeof keys[0]];
	char up[FORMAT_DURATION_LEN], buf[FORMAT_DURATION_LEN];
	struct table *t;
	json_t *pool;
	size_t i, j;

	printf("tpd: up %s, %lld connection%s\n",
	    format_duration(event_num(ev, FIELD_UPTIME_MS, 0), up, sizeof up),
	    (long long)event_int(ev, FIELD_CONNECTIONS, 0),
	    event_int(ev, FIELD_CONNECTIONS, 0) == 1 ? "" : "s");
	if ((t = table_new("lrrrrrrrrrrr", headers)) == NULL)
		return;
	json_array_foreach(json_object_get(ev, FIELD_POOLS), i, pool) {
		for (j = 0; j < sizeof keys / sizeof keys[0]; j++)
			cells[j] = stats_num(pool, keys[j]);
		free(cells[0]);
		cells[0] = strdup(event_str(pool, "name", "?"));
		free(cells[j - 1]);
		cells[j - 1] = strdup(event_int(pool, "queued", 0) > 0 ?
		    format_duration(event_num(pool, "oldest_queued_ms", 0),
		    buf, sizeof buf) : "-");
		table_add(t, (const char *const *)cells);
		for (j = 0; j < sizeof keys / sizeof keys[0]; j++)
			free(cells[j]);
	}
	table_print(t, stdout);
	table_free(t);
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
	.summary = "show the pools' figures as a table",
	.help =
	    "Prints the daemon's uptime and connections, then one row per pool:\n"
	    "target and current workers, busy workers, queued tasks and the queue's\n"
	    "capacity, the resize limit, counters since start, and how long the\n"
	    "oldest queued task has waited.\n\n",
	.exec = stats_exec,
};
