/*
 * cmd-admin.c: the commands for the daemon's administrators: resize a
 * pool, and shut the daemon down.
 */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "tpctl.h"
#include "wire.h"

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
	code = session_once(opt, "resize", json_pack("{s:s, s:s, s:I}", FIELD_OP,
	    OP_RESIZE, FIELD_POOL, pool, FIELD_SIZE, (json_int_t)size), &reply);
	if (code != 0)
		return code;
	if (!opt->json) {
		long long target = event_int(reply, FIELD_TARGET, size);
		long long workers = event_int(reply, FIELD_WORKERS, -1);
		printf("pool %s: target %lld, %lld worker%s now%s\n",
		    format_safe(event_str(reply, FIELD_POOL, pool)), target, workers,
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
