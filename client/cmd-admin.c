/*
 * cmd-admin.c: the commands for the daemon's administrators: resize,
 * pause and resume a pool, and shut the daemon down.
 */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "tpctl.h"
#include "wire.h"

#define OPT_MIN 2001
#define OPT_MAX 2002

static int
resize_exec(struct tpctl *opt, int argc, char **argv)
{
	static const struct option longopts[] = {
		CMD_LONGOPTS_COMMON,
		{ "pool", required_argument, NULL, 'p' },
		{ "min", required_argument, NULL, OPT_MIN },
		{ "max", required_argument, NULL, OPT_MAX },
		{ NULL, 0, NULL, 0 }
	};
	const char *pool = WIRE_DEFAULT_POOL, *min_arg = NULL, *max_arg = NULL;
	long long size = 0, min = 0, max = 0;
	json_t *reply, *req;
	int ch, code;

	while ((ch = cmd_getopt(&cmd_resize, opt, argc, argv, ":hp:", longopts)) != -1) {
		if (ch == 'p')
			pool = optarg;
		else if (ch == OPT_MIN)
			min_arg = optarg;
		else if (ch == OPT_MAX)
			max_arg = optarg;
		else
			return ch == 'h' ? 0 : EX_USAGE;
	}
	if (min_arg != NULL && format_parse_int(min_arg, 0, INT32_MAX, &min) == -1)
		return cmd_usage_error(&cmd_resize, "--min: '%s' is not a number of workers", min_arg);
	if (max_arg != NULL && format_parse_int(max_arg, 0, INT32_MAX, &max) == -1)
		return cmd_usage_error(&cmd_resize, "--max: '%s' is not a number of workers", max_arg);
	if (min_arg != NULL || max_arg != NULL) {
		if (argc - optind != 0)
			return cmd_usage_error(&cmd_resize, "give N, or --min and/or --max, not both");
	} else if (argc - optind != 1)
		return cmd_usage_error(&cmd_resize, "the new size is needed (N, or --min/--max)");
	else if (format_parse_int(argv[optind], 0, INT32_MAX, &size) == -1)
		return cmd_usage_error(&cmd_resize, "'%s' is not a number of workers",
		    argv[optind]);
	req = json_pack("{s:s, s:s}", FIELD_OP, OP_RESIZE, FIELD_POOL, pool);
	if (min_arg == NULL && max_arg == NULL)
		json_object_set_new(req, FIELD_SIZE, json_integer((json_int_t)size));
	if (min_arg != NULL)
		json_object_set_new(req, FIELD_MIN, json_integer((json_int_t)min));
	if (max_arg != NULL)
		json_object_set_new(req, FIELD_MAX, json_integer((json_int_t)max));
	code = session_once(opt, "resize", req, &reply);
	if (code != 0)
		return code;
	if (!opt->json) {
		long long target = event_int(reply, FIELD_TARGET, size);
		long long workers = event_int(reply, FIELD_WORKERS, -1);
		long long lo = event_int(reply, FIELD_MIN_WORKERS, target);
		long long hi = event_int(reply, FIELD_MAX_WORKERS, target);
		if (lo == hi)
			printf("pool %s: target %lld, %lld worker%s now%s\n",
			    event_str(reply, FIELD_POOL, pool), target, workers,
			    workers == 1 ? "" : "s", workers > target ?
			    " (the surplus leave as they finish their tasks)" : "");
		else
			printf("pool %s: %lld to %lld workers, target %lld, %lld now\n",
			    event_str(reply, FIELD_POOL, pool), lo, hi, target, workers);
		if (event_str(reply, FIELD_NOTE, NULL) != NULL)
			printf("(%s)\n", event_str(reply, FIELD_NOTE, ""));
	}
	json_decref(reply);
	return 0;
}

/* pause and resume: POOL is required, there is no default to pause by mistake. */
static int
pause_resume(const struct cmd *cmd, const char *op, struct tpctl *opt, int argc, char **argv)
{
	json_t *reply;
	int code;

	if ((code = cmd_noopts(cmd, opt, argc, argv)) != -1)
		return code;
	if (argc - optind != 1)
		return cmd_usage_error(cmd, "the pool's name is needed");
	code = session_once(opt, op, json_pack("{s:s, s:s}", FIELD_OP, op, FIELD_POOL,
	    argv[optind]), &reply);
	if (code != 0)
		return code;
	if (!opt->json)
		printf("pool %s: %s\n", event_str(reply, FIELD_POOL, argv[optind]),
		    event_str(reply, FIELD_STATE, "?"));
	json_decref(reply);
	return 0;
}

static int
pause_exec(struct tpctl *opt, int argc, char **argv)
{
	return pause_resume(&cmd_pause, OP_PAUSE, opt, argc, argv);
}

static int
resume_exec(struct tpctl *opt, int argc, char **argv)
{
	return pause_resume(&cmd_resume, OP_RESUME, opt, argc, argv);
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

const struct cmd cmd_resize = {
	.name = "resize",
	.args = "[--pool P] N | [--pool P] --min N --max N",
	.summary = "set a pool's number of workers, or its bounds (admin)",
	.help =
	    "Sets the pool's size: N workers (min_workers = max_workers = N), or an\n"
	    "elastic pool's bounds (the one not given stays). Growing starts the\n"
	    "threads before the answer; shrinking never interrupts a task: surplus\n"
	    "workers leave when they would take their next one. The new size stays\n"
	    "until a restart, or a reload that changes the pool's size, min_workers\n"
	    "or max_workers in the configuration file (a reload that leaves them as\n"
	    "they were keeps it).\n"
	    "\n"
	    "  -p, --pool P             the pool (default: \"default\")\n"
	    "      --min N              the fewest workers the pool keeps\n"
	    "      --max N              the most it starts as tasks come\n",
	.exec = resize_exec,
};

const struct cmd cmd_pause = {
	.name = "pause",
	.args = "POOL",
	.summary = "start no queued task of a pool until resumed (admin)",
	.help =
	    "Pauses POOL: it starts none of its queued tasks; running tasks go on\n"
	    "and submits are still accepted (and queue). Lasts until tpctl resume,\n"
	    "a restart, or a reload that changes the pool's paused key.\n",
	.exec = pause_exec,
};

const struct cmd cmd_resume = {
	.name = "resume",
	.args = "POOL",
	.summary = "start a paused pool's queued tasks again (admin)",
	.help = "Resumes POOL: its queued tasks start again, highest priority first.\n",
	.exec = resume_exec,
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
