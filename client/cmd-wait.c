/*
 * cmd-wait.c: tpctl wait ID...: one wait request per task, pipelined; a
 * line per task as its done arrives (or, with --output, the output it
 * captured). Exits as run does for one task; for several, 0 when all
 * succeeded, else 1. An interrupt stops the waiting, not the tasks.
 */
#include "config.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "tpctl.h"
#include "wire.h"

struct wait_item {
	long long task;
	int64_t req;            /* the wait request's id */
	int code;               /* its exit code, -1 while waiting */
};

/* Parses the task ids. Returns 0 or EX_USAGE (printed). */
int
cmd_parse_task_ids(const struct cmd *c, int argc, char **argv, long long **ids)
{
	int i;

	if (argc == 0)
		return cmd_usage_error(c, "a task id is needed");
	if ((*ids = calloc((size_t)argc, sizeof **ids)) == NULL)
		return EX_OSERR;
	for (i = 0; i < argc; i++)
		if (format_parse_int(argv[i], 0, INT64_MAX, &(*ids)[i]) == -1) {
			free(*ids);
			*ids = NULL;
			return cmd_usage_error(c, "'%s' is not a task id (the number "
			    "submit printed)", argv[i]);
		}
	return 0;
}

static void
wait_print(const json_t *ev, long long task, bool output)
{
	char *what = event_describe_done(ev);
	char q[FORMAT_DURATION_LEN];
	bool ok = strcmp(event_str(ev, FIELD_STATE, ""), STATE_SUCCEEDED) == 0;

	if (output) {
		if (!ok)
			tpctl_warnx("task %lld %s", task, what != NULL ? what : "failed");
	} else
		printf("task %lld: %s, queued %s\n", task, what != NULL ? what : "?",
		    format_duration(event_num(ev, FIELD_QUEUED_MS, 0), q,
		    sizeof q));
	free(what);
}

static int
wait_exec(struct tpctl *opt, int argc, char **argv)
{
	static const struct option longopts[] = {
		CMD_LONGOPTS_COMMON,
		{ "output", no_argument, NULL, 'o' },
		{ NULL, 0, NULL, 0 }
	};
	struct wait_item *items;
	struct session s;
	long long *ids;
	json_t *ev, *req;
	bool output = false;
	int ch, i, n, left, res, code = 0;
	char what[64];

	while ((ch = cmd_getopt(&cmd_wait, opt, argc, argv, ":ho", longopts)) != -1) {
		if (ch == 'o')
			output = true;
		else
			return ch == 'h' ? 0 : EX_USAGE;
	}
	n = argc - optind;
	if ((code = cmd_parse_task_ids(&cmd_wait, n, argv + optind, &ids)) != 0)
		return code;
	if ((items = calloc((size_t)n, sizeof *items)) == NULL) {
		free(ids);
		return EX_OSERR;
	}
	if (interrupt_install() == -1) {
		tpctl_warnx("cannot catch signals: %s", strerror(errno));
		free(ids);
		free(items);
		return EX_OSERR;
	}
	if ((code = session_open(&s, opt)) != 0)
		goto out;
	/* a done may take as long as its task: the pong bounds the rest */
	if (session_probe(&s, "wait") == -1) {
		code = EX_UNAVAILABLE;
		goto out;
	}
	for (i = 0; i < n; i++) {
		items[i].task = ids[i];
		items[i].code = -1;
		req = json_pack("{s:s, s:I}", FIELD_OP, OP_WAIT, FIELD_TASK,
		    (json_int_t)ids[i]);
		if ((items[i].req = session_send_wait(&s, req)) == -1) {
			code = EX_UNAVAILABLE;
			goto out;
		}
	}
	for (left = n; left > 0;) {
		res = session_next(&s, &ev, -1);
		if (res == LINK_INTERRUPTED) {
			interrupt_take();
			tpctl_warnx("interrupted: stopped waiting; the tasks go on");
			code = EXIT_SIGNALLED + interrupt_last_signal();
			goto out;
		}
		if (res != LINK_EVENT) {
			code = session_exit_code(res);
			goto out;
		}
		if (event_id(ev) == -1 && strcmp(event_name(ev), EV_ERROR) == 0) {
			code = event_report_error(link_address(s.link), ev);
			json_decref(ev);
			goto out;
		}
		for (i = 0; i < n; i++)
			if (items[i].req == event_id(ev) && items[i].code == -1)
				break;
		if (i == n) {
			json_decref(ev);
			continue;
		}
		if (strcmp(event_name(ev), EV_DONE) == 0) {
			if (!opt->json)
				wait_print(ev, items[i].task, output);
			if (output && !opt->json &&
			    event_write_result_output(ev) == -1 && errno == EPIPE) {
				json_decref(ev);
				code = EXIT_BROKEN_PIPE;
				goto out;
			}
			items[i].code = event_task_exit_code(ev);
			left--;
		} else if (strcmp(event_name(ev), EV_ERROR) == 0) {
			snprintf(what, sizeof what, "task %lld", items[i].task);
			items[i].code = event_report_error(what, ev);
			left--;
		}
		json_decref(ev);
	}
	if (n == 1)
		code = items[0].code;
	else
		for (code = 0, i = 0; i < n; i++)
			if (items[i].code == EX_NOPERM)
				code = EX_NOPERM;
			else if (items[i].code != 0 && code == 0)
				code = EXIT_TASK_FAILED;
out:
	if (s.link != NULL)
		session_close(&s);
	free(ids);
	free(items);
	return code;
}

const struct cmd cmd_wait = {
	.name = "wait",
	.args = "[--output] ID...",
	.summary = "wait for tasks to end; exit as run does for one task",
	.help =
	    "Waits for each task and prints a line as each ends. With one task,\n"
	    "exits as tpctl run does (its exit status, 124 timed out, 128+N signal N,\n"
	    "1 failed); with several, 0 when all succeeded, else 1. An interrupt\n"
	    "stops the waiting; the tasks go on.\n"
	    "\n"
	    "  -o, --output             print the output each task captured instead\n"
	    "                           of its line (failures still go to stderr)\n",
	.exec = wait_exec,
};
