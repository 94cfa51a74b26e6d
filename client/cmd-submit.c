/*
 * cmd-submit.c: tpctl submit: submit a task and print its id as soon as it
 * is accepted; then wait for its done (exiting as run would), or with
 * --detach leave at once. An interrupt stops the waiting, not the task.
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "tpctl.h"
#include "wire.h"

static int
submit_done(const json_t *ev, int64_t task_id, bool json)
{
	char *what;

	if (!json && strcmp(event_str(ev, FIELD_STATE, ""), STATE_SUCCEEDED) != 0) {
		what = event_describe_done(ev);
		tpctl_warnx("task %lld %s", (long long)task_id,
		    what != NULL ? what : "failed");
		free(what);
	}
	return event_task_exit_code(ev);
}

static int
submit_exec(struct tpctl *opt, int argc, char **argv)
{
	static const struct option longopts[] = {
		CMD_LONGOPTS_COMMON, TASKOPT_LONGOPTS,
		{ "stdin", no_argument, NULL, 'i' },
		{ "task", required_argument, NULL, OPT_TASK },
		{ "detach", no_argument, NULL, 'd' },
		{ NULL, 0, NULL, 0 }
	};
	struct taskopt to;
	struct session s;
	json_t *task, *req, *ev;
	int64_t id, task_id = -1;
	bool detach = false, noticed = false;
	int ch, code, res, k;

	taskopt_init(&to);
	while ((ch = cmd_getopt(&cmd_submit, opt, argc, argv,
	    "+:h" TASKOPT_SHORTOPTS "id", longopts)) != -1) {
		if (ch == 'd') {
			detach = true;
			continue;
		}
		if (ch == 'h' || ch == '?' ||
		    taskopt_option(&to, &cmd_submit, ch, optarg) != 1) {
			taskopt_free(&to);
			return ch == 'h' ? 0 : EX_USAGE;
		}
	}
	if ((code = taskopt_build(&to, &cmd_submit, argc - optind, argv + optind,
	    &task)) != 0) {
		taskopt_free(&to);
		return code;
	}
	req = taskopt_submit(&to, json_incref(task));
	if (detach)
		json_object_set_new(req, FIELD_DETACH, json_true());

	if (interrupt_install() == -1) {
		tpctl_warnx("cannot catch signals: %s", strerror(errno));
		json_decref(req);
		code = EX_OSERR;
		goto out;
	}
	if ((code = session_open(&s, opt)) != 0) {
		json_decref(req);
		goto out;
	}
	/* waiting for room may take long: the probe shows the daemon alive meanwhile */
	if (taskopt_waits_for_room(&to) && session_probe(&s, "submit") == -1) {
		json_decref(req);
		session_close(&s);
		code = EX_UNAVAILABLE;
		goto out;
	}
	if ((id = taskopt_waits_for_room(&to) ? session_send_wait(&s, req) :
	    session_send(&s, req)) == -1) {
		session_close(&s);
		code = EX_UNAVAILABLE;
		goto out;
	}
	for (code = -1; code == -1;) {
		res = session_next(&s, &ev, task_id < 0 && !noticed && !opt->json ?
		    TASKOPT_ROOM_NOTICE_MS : -1);
		if (res == LINK_TIMEOUT && task_id < 0 && !noticed) {
			taskopt_room_notice(&to);
			noticed = true;
			continue;
		}
		if (res == LINK_INTERRUPTED) {
			interrupt_take();
			if (task_id >= 0)
				tpctl_warnx("interrupted: task %lld goes on (tpctl "
				    "wait %lld, tpctl cancel %lld)", (long long)task_id,
				    (long long)task_id, (long long)task_id);
			code = EXIT_SIGNALLED + interrupt_last_signal();
			break;
		}
		if (res != LINK_EVENT) {
			code = session_exit_code(res);
			break;
		}
		if (event_id(ev) != id && event_id(ev) != -1) {
			json_decref(ev);
			continue;
		}
		if (strcmp(event_name(ev), EV_ACCEPTED) == 0) {
			task_id = event_int(ev, FIELD_TASK, -1);
			if (!opt->json) {
				printf("%lld\n", (long long)task_id);
				fflush(stdout);
			}
			if (detach)
				code = 0;
		} else if (strcmp(event_name(ev), EV_DONE) == 0)
			code = submit_done(ev, task_id, opt->json);
		else if (strcmp(event_name(ev), EV_ERROR) == 0 &&
		    (k = taskopt_refused_limit(&to, task, ev)) != -1)
			code = taskopt_report_refused(&to, k, ev);
		else if (strcmp(event_name(ev), EV_REJECTED) == 0 ||
		    strcmp(event_name(ev), EV_ERROR) == 0)
			code = event_report_error("submit", ev);
		json_decref(ev);
	}
	session_close(&s);
out:
	json_decref(task);
	taskopt_free(&to);
	return code;
}

const struct cmd cmd_submit = {
	.name = "submit",
	.args = "[OPTIONS] [--detach] [--] CMD [ARG...]",
	.summary = "submit a task, print its id, wait for it unless --detach",
	.help =
	    "Submits CMD as an exec task (or --task JSON, a task of any kind) and\n"
	    "prints the task's id as soon as the daemon accepts it. Then waits for\n"
	    "the task to end and exits as tpctl run does (without its output: see\n"
	    "tpctl wait --output); with --detach it leaves at once. An interrupt\n"
	    "stops the waiting; the task goes on.\n"
	    "\n"
	    "  -d, --detach             do not wait: the daemon sends no done\n"
	    TASKOPT_HELP
	    "  -i, --stdin              send tpctl's stdin to the command (text or binary)\n"
	    "      --task JSON          submit this task object instead of a command,\n"
	    "                           e.g. '{\"kind\":\"sleep\",\"ms\":500}'\n",
	.exec = submit_exec,
};
