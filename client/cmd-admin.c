/*
 * cmd-admin.c: the one-request commands: status, cancel, stats, resize,
 * shutdown and ping.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "tpctl.h"
#include "wire.h"

/* The default for ping --timeout, unless --timeout-answer is given. */
#define PING_TIMEOUT_MS 5000

/* Parses the options of a command that has none but the common ones. */
static int
admin_noopts(const struct cmd *c, struct tpctl *opt, int argc, char **argv)
{
	static const struct option longopts[] = {
		CMD_LONGOPTS_COMMON, { NULL, 0, NULL, 0 }
	};
	int ch;

	while ((ch = cmd_getopt(c, opt, argc, argv, ":h", longopts)) != -1)
		return ch == 'h' ? 0 : EX_USAGE;
	return -1;
}

struct admin_tasks {
	const struct cmd *cmd;
	const char *op;
	long long *ids;
	void (*fn)(void *, long long, json_t *);
	void *arg;
	int worst;              /* 77 before 1 before 0 */
};

static json_t *
admin_task_request(void *arg, size_t i)
{
	struct admin_tasks *at = arg;

	return json_pack("{s:s, s:I}", FIELD_OP, at->op, FIELD_TASK,
	    (json_int_t)at->ids[i]);
}

static int
admin_task_answer(void *arg, size_t i, json_t *ev)
{
	struct admin_tasks *at = arg;
	char what[64];
	int code;

	if (strcmp(event_name(ev), EV_ERROR) == 0) {
		snprintf(what, sizeof what, "%s %lld", at->cmd->name, at->ids[i]);
		code = event_report_error(what, ev);
		if (code == EX_NOPERM || at->worst == 0)
			at->worst = code;
	} else if (at->fn != NULL)
		at->fn(at->arg, at->ids[i], ev);
	return PIPELINE_SETTLED;
}

/*
 * Sends one request per task id (pipelined) and hands each answer to fn.
 * Returns the worst exit code: 77 before 1 before 0.
 */
static int
admin_per_task(struct tpctl *opt, const struct cmd *c, const char *op, int n,
    long long *ids, void (*fn)(void *, long long, json_t *), void *arg)
{
	struct admin_tasks at = {
		.cmd = c, .op = op, .ids = ids, .fn = fn, .arg = arg
	};
	struct session s;
	int code;

	if ((code = session_open(&s, opt)) != 0)
		return code;
	code = pipeline_run(&s, (size_t)n, false, admin_task_request,
	    admin_task_answer, &at);
	session_close(&s);
	return code != 0 ? code : at.worst;
}

/* A field's value as table text: durations for *_ms, JSON for the rest. */
static char *
admin_cell(const char *key, const json_t *v)
{
	char buf[FORMAT_DURATION_LEN];
	size_t klen = strlen(key);

	if (json_is_number(v) && klen > 3 && strcmp(key + klen - 3, "_ms") == 0 &&
	    json_number_value(v) >= 0)
		return strdup(format_duration(json_number_value(v), buf, sizeof buf));
	if (json_is_string(v))
		return strdup(json_string_value(v));
	if (json_is_null(v))
		return strdup("-");
	return json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
}

struct status_rows {
	json_t *events;         /* the status events, in the order asked */
	json_t *keys;           /* extra columns, in the order first seen */
};

static void
status_collect(void *arg, long long task, json_t *ev)
{
	struct status_rows *rows = arg;
	const char *key;
	json_t *v;
	size_t i;

	(void)task;
	json_array_append(rows->events, ev);
	json_object_foreach(ev, key, v) {
		if (strcmp(key, FIELD_EVENT) == 0 || strcmp(key, FIELD_ID) == 0 ||
		    strcmp(key, FIELD_TASK) == 0 || strcmp(key, FIELD_STATE) == 0)
			continue;
		for (i = 0; i < json_array_size(rows->keys); i++)
			if (strcmp(json_string_value(json_array_get(rows->keys, i)),
			    key) == 0)
				break;
		if (i == json_array_size(rows->keys))
			json_array_append_new(rows->keys, json_string(key));
	}
}

static void
status_print(struct status_rows *rows)
{
	size_t ncols = 2 + json_array_size(rows->keys), i, r;
	const char **cells = calloc(ncols, sizeof *cells);
	char *align = calloc(ncols + 1, 1), **owned = calloc(ncols, sizeof *owned);
	struct table *t;
	json_t *ev;

	if (cells == NULL || align == NULL || owned == NULL)
		goto out;
	memset(align, 'l', ncols);
	cells[0] = "TASK";
	cells[1] = "STATE";
	for (i = 2; i < ncols; i++) {
		const char *key = json_string_value(json_array_get(rows->keys, i - 2));
		size_t klen = strlen(key);
		char *h, *p;
		/* "run_ms" is shown as a duration under RUN */
		if (klen > 3 && strcmp(key + klen - 3, "_ms") == 0)
			klen -= 3;
		h = strndup(key, klen);
		for (p = h; p != NULL && *p != '\0'; p++)
			*p = *p >= 'a' && *p <= 'z' ? (char)(*p - 'a' + 'A') : *p;
		owned[i] = h;
		cells[i] = h;
	}
	if ((t = table_new(align, cells)) == NULL)
		goto out;
	for (i = 2; i < ncols; i++)
		free(owned[i]);
	json_array_foreach(rows->events, r, ev) {
		owned[0] = admin_cell(FIELD_TASK, json_object_get(ev, FIELD_TASK));
		owned[1] = strdup(event_str(ev, FIELD_STATE, "?"));
		for (i = 2; i < ncols; i++) {
			const char *key = json_string_value(json_array_get(rows->keys, i - 2));
			json_t *v = json_object_get(ev, key);
			owned[i] = v != NULL ? admin_cell(key, v) : strdup("");
		}
		table_add(t, (const char *const *)owned);
		for (i = 0; i < ncols; i++)
			free(owned[i]);
	}
	table_print(t, stdout);
	table_free(t);
	memset(owned, 0, ncols * sizeof *owned);
out:
	free(cells);
	free(align);
	free(owned);
}

static int
status_exec(struct tpctl *opt, int argc, char **argv)
{
	struct status_rows rows;
	long long *ids;
	int code;

	if ((code = admin_noopts(&cmd_status, opt, argc, argv)) != -1)
		return code;
	if ((code = cmd_parse_task_ids(&cmd_status, argc - optind, argv + optind,
	    &ids)) != 0)
		return code;
	rows.events = json_array();
	rows.keys = json_array();
	code = admin_per_task(opt, &cmd_status, OP_STATUS, argc - optind, ids,
	    status_collect, &rows);
	if (!opt->json && json_array_size(rows.events) > 0)
		status_print(&rows);
	json_decref(rows.events);
	json_decref(rows.keys);
	free(ids);
	return code;
}

static int
cancel_exec(struct tpctl *opt, int argc, char **argv)
{
	long long *ids;
	int code;

	if ((code = admin_noopts(&cmd_cancel, opt, argc, argv)) != -1)
		return code;
	if ((code = cmd_parse_task_ids(&cmd_cancel, argc - optind, argv + optind,
	    &ids)) != 0)
		return code;
	code = admin_per_task(opt, &cmd_cancel, OP_CANCEL, argc - optind, ids,
	    NULL, NULL);
	free(ids);
	return code;
}

/* Sends one request and returns its answer, or an exit code. */
static int
admin_call(struct tpctl *opt, const char *what, json_t *req, json_t **reply)
{
	struct session s;
	int code;

	*reply = NULL;
	if ((code = session_open(&s, opt)) != 0) {
		json_decref(req);
		return code;
	}
	code = session_call(&s, req, reply);
	session_close(&s);
	if (code != 0)
		return code;
	if (strcmp(event_name(*reply), EV_ERROR) == 0) {
		code = event_report_error(what, *reply);
		json_decref(*reply);
		*reply = NULL;
	}
	return code;
}

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
	return admin_cell(key, v);
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

	if ((code = admin_noopts(&cmd_stats, opt, argc, argv)) != -1)
		return code;
	if (argc > optind)
		return cmd_usage_error(&cmd_stats, "no arguments expected");
	code = admin_call(opt, "stats", json_pack("{s:s}", FIELD_OP, OP_STATS),
	    &reply);
	if (code != 0)
		return code;
	if (!opt->json)
		stats_print(reply);
	json_decref(reply);
	return 0;
}

static int
resize_exec(struct tpctl *opt, int argc, char **argv)
{
	static const struct option longopts[] = {
		CMD_LONGOPTS_COMMON,
		{ "pool", required_argument, NULL, 'p' },
		{ NULL, 0, NULL, 0 }
	};
	const char *pool = WIRE_DEFAULT_POOL;
	long long size;
	json_t *reply;
	int ch, code;

	while ((ch = cmd_getopt(&cmd_resize, opt, argc, argv, ":hp:", longopts)) != -1) {
		if (ch == 'p')
			pool = optarg;
		else
			return ch == 'h' ? 0 : EX_USAGE;
	}
	if (argc - optind != 1)
		return cmd_usage_error(&cmd_resize, "the new size is needed");
	if (format_parse_int(argv[optind], 0, INT32_MAX, &size) == -1)
		return cmd_usage_error(&cmd_resize, "'%s' is not a number of workers",
		    argv[optind]);
	code = admin_call(opt, "resize", json_pack("{s:s, s:s, s:I}", FIELD_OP,
	    OP_RESIZE, FIELD_POOL, pool, FIELD_SIZE, (json_int_t)size), &reply);
	if (code != 0)
		return code;
	if (!opt->json) {
		long long target = event_int(reply, FIELD_TARGET, size);
		long long workers = event_int(reply, FIELD_WORKERS, -1);
		printf("pool %s: target %lld, %lld worker%s now%s\n",
		    event_str(reply, FIELD_POOL, pool), target, workers,
		    workers == 1 ? "" : "s", workers > target ?
		    " (the surplus leave as they finish their tasks)" : "");
	}
	json_decref(reply);
	return 0;
}

static int
shutdown_exec(struct tpctl *opt, int argc, char **argv)
{
	static const struct option longopts[] = {
		CMD_LONGOPTS_COMMON,
		{ "now", no_argument, NULL, 'n' },
		{ "wait", no_argument, NULL, 'w' },
		{ NULL, 0, NULL, 0 }
	};
	struct session s;
	bool now = false, wait = false;
	json_t *reply, *ev;
	int ch, code, res;

	while ((ch = cmd_getopt(&cmd_shutdown, opt, argc, argv, ":hnw", longopts)) != -1) {
		if (ch == 'n')
			now = true;
		else if (ch == 'w')
			wait = true;
		else
			return ch == 'h' ? 0 : EX_USAGE;
	}
	if (argc > optind)
		return cmd_usage_error(&cmd_shutdown, "no arguments expected");
	if ((code = session_open(&s, opt)) != 0)
		return code;
	code = session_call(&s, json_pack("{s:s, s:s}", FIELD_OP, OP_SHUTDOWN,
	    FIELD_MODE, now ? MODE_NOW : MODE_DRAIN), &reply);
	if (code == 0 && strcmp(event_name(reply), EV_ERROR) == 0)
		code = event_report_error("shutdown", reply);
	json_decref(reply);
	/* the daemon closes every connection as it exits */
	while (code == 0 && wait) {
		char *cause = NULL;
		res = link_recv(s.link, &ev, -1, &cause);
		json_decref(ev);
		if (res == LINK_BAD) {
			tpctl_warnx("%s", cause);
			code = EX_PROTOCOL;
		}
		free(cause);
		if (res == LINK_LOST)
			break;
	}
	session_close(&s);
	return code;
}

static int
ping_exec(struct tpctl *opt, int argc, char **argv)
{
	static const struct option longopts[] = {
		CMD_LONGOPTS_COMMON,
		{ "timeout", required_argument, NULL, 't' },
		{ NULL, 0, NULL, 0 }
	};
	uint64_t timeout, start, rtt;
	struct session s;
	json_t *reply, *hello = NULL;
	int ch, code;

	timeout = opt->answer_timeout_set ? opt->answer_timeout_ms : PING_TIMEOUT_MS;
	while ((ch = cmd_getopt(&cmd_ping, opt, argc, argv, ":ht:", longopts)) != -1) {
		if (ch != 't')
			return ch == 'h' ? 0 : EX_USAGE;
		if (cmd_duration_arg(&cmd_ping, "--timeout", optarg, &timeout) == -1)
			return EX_USAGE;
	}
	if (argc > optind)
		return cmd_usage_error(&cmd_ping, "no arguments expected");
	if ((code = session_open(&s, opt)) != 0)
		return code;
	s.answer_timeout_ms = timeout;
	s.answer_option = "--timeout";
	start = tpctl_now_us();
	code = session_call(&s, json_pack("{s:s}", FIELD_OP, OP_PING), &reply);
	rtt = tpctl_now_us() - start;
	if (code == 0 && strcmp(event_name(reply), EV_PONG) != 0) {
		code = event_report_error("ping", reply);
		json_decref(reply);
	} else if (code == 0) {
		json_decref(reply);
		/* who answered: hello names the server (its errors do not matter) */
		if (opt->token_file == NULL && session_call(&s, json_pack("{s:s, s:s}",
		    FIELD_OP, OP_HELLO, FIELD_CLIENT, "tpctl/" PACKAGE_VERSION),
		    &hello) == 0 &&
		    strcmp(event_name(hello), EV_HELLO) != 0) {
			json_decref(hello);
			hello = NULL;
		}
		if (!opt->json) {
			printf("pong from %s in %.3fms", link_address(s.link),
			    (double)rtt / 1000.0);
			if (hello != NULL)
				printf(" (%s %s, protocol %lld, role %s)",
				    event_str(hello, FIELD_SERVER, "?"),
				    event_str(hello, FIELD_VERSION, "?"),
				    (long long)event_int(hello, FIELD_PROTOCOL, 0),
				    event_str(hello, FIELD_ROLE, "?"));
			printf("\n");
		}
		json_decref(hello);
	}
	session_close(&s);
	return code;
}

const struct cmd cmd_status = {
	.name = "status",
	.args = "ID...",
	.summary = "show tasks' states as a table",
	.help = "Asks the daemon for each task's state; prints a table.\n\n",
	.exec = status_exec,
};

const struct cmd cmd_cancel = {
	.name = "cancel",
	.args = "ID...",
	.summary = "cancel tasks (a finished task is left as it was)",
	.help =
	    "Cancels each task: a queued one never runs, a running one is stopped\n"
	    "(exec: SIGTERM to its process group, then SIGKILL). Its waiters get a\n"
	    "done with state cancelled. Prints nothing on success.\n\n",
	.exec = cancel_exec,
};

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

const struct cmd cmd_resize = {
	.name = "resize",
	.args = "[--pool P] N",
	.summary = "set a pool's number of workers (admin)",
	.help =
	    "Sets the pool's target size. Growing starts the threads before the\n"
	    "answer; shrinking never interrupts a task: surplus workers leave when\n"
	    "they would take their next one.\n"
	    "\n"
	    "  -p, --pool P             the pool (default: \"default\")\n",
	.exec = resize_exec,
};

const struct cmd cmd_shutdown = {
	.name = "shutdown",
	.args = "[--now] [--wait]",
	.summary = "stop the daemon, draining its tasks (admin)",
	.help =
	    "Stops the daemon. By default it drains: new submits are rejected, the\n"
	    "accepted tasks run to their end, then it exits.\n"
	    "\n"
	    "  -n, --now                cancel queued and running tasks instead\n"
	    "  -w, --wait               return once the daemon has closed the connection\n",
	.exec = shutdown_exec,
};

const struct cmd cmd_ping = {
	.name = "ping",
	.args = "[--timeout DUR]",
	.summary = "check that the daemon answers",
	.help =
	    "Sends ping and prints the round trip time and who answered.\n"
	    "Exits 69 when no pong comes within the timeout.\n"
	    "\n"
	    "  -t, --timeout DUR        wait at most DUR for the pong (default 5s, or\n"
	    "                           --timeout-answer when that is given; 0: no limit)\n",
	.exec = ping_exec,
};
