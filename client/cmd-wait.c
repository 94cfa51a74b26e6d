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
	int code;               /* its exit code, -1 while waiting */
};

static void
wait_print(const json_t *ev, long long task, bool output)
{
	char *what = event_describe_done(ev);
	char q[FORMAT_DURATION_LEN], used[FORMAT_USAGE_LEN];
	bool ok = strcmp(event_str(ev, FIELD_STATE, ""), STATE_SUCCEEDED) == 0;

	if (output) {
		if (!ok)
			tpctl_warnx("task %lld %s", task, what != NULL ? what : "failed");
	} else if (format_usage(event_usage(ev), used, sizeof used) != NULL)
		printf("task %lld: %s, queued %s, %s\n", task, what != NULL ? format_safe(what) : "?",
		    format_duration(event_num(ev, FIELD_QUEUED_MS, 0), q, sizeof q),
		    used);
	else
		printf("task %lld: %s, queued %s\n", task, what != NULL ? format_safe(what) : "?",
		    format_duration(event_num(ev, FIELD_QUEUED_MS, 0), q,
		    sizeof q));
	free(what);
}

struct wait_state {
	struct wait_item *items;
	bool output;            /* --output */
	bool json;
};

static json_t *
wait_request(void *arg, size_t i)
{
	struct wait_state *w = arg;

	return json_pack("{s:s, s:I}", FIELD_OP, OP_WAIT, FIELD_TASK,
	    (json_int_t)w->items[i].task);
}

static int
wait_answer(void *arg, size_t i, json_t *ev)
{
	struct wait_state *w = arg;
	struct wait_item *it = &w->items[i];
	char what[64];

	if (strcmp(event_name(ev), EV_DONE) == 0) {
		/* the task's own output first, then what tpctl says of it */
		if (w->output && !w->json &&
		    event_write_result_output(ev) == -1 && errno == EPIPE)
			return EXIT_BROKEN_PIPE;
		if (!w->json)
			wait_print(ev, it->task, w->output);
		it->code = event_task_exit_code(ev);
		return PIPELINE_SETTLED;
	}
	if (strcmp(event_name(ev), EV_ERROR) == 0) {
		/* no token: the same for every id, said once */
		if (strcmp(event_error_code(ev), ERR_UNAUTHENTICATED) == 0)
			return event_report_error("wait", ev);
		snprintf(what, sizeof what, "task %lld", it->task);
		it->code = event_report_error(what, ev);
		return PIPELINE_SETTLED;
	}
	return PIPELINE_MORE;
}

static int
wait_exec(struct tpctl *opt, int argc, char **argv)
{
	static const struct option longopts[] = {
		CMD_LONGOPTS_COMMON,
		{ "output", no_argument, NULL, 'o' },
		{ NULL, 0, NULL, 0 }
	};
	struct wait_state w;
	struct session s;
	long long *ids;
	int ch, i, n, code = 0;

	memset(&w, 0, sizeof w);
	while ((ch = cmd_getopt(&cmd_wait, opt, argc, argv, ":ho", longopts)) != -1) {
		if (ch == 'o')
			w.output = true;
		else
			return ch == 'h' ? 0 : EX_USAGE;
	}
	n = argc - optind;
	if ((code = cmd_parse_task_ids(&cmd_wait, n, argv + optind, &ids)) != 0)
		return code;
	if ((w.items = calloc((size_t)n, sizeof *w.items)) == NULL) {
		free(ids);
		return EX_OSERR;
	}
	for (i = 0; i < n; i++) {
		w.items[i].task = ids[i];
		w.items[i].code = -1;
	}
	free(ids);
	w.json = opt->json;
	if (interrupt_install() == -1) {
		tpctl_warnx("cannot catch signals: %s", strerror(errno));
		free(w.items);
		return EX_OSERR;
	}
	if ((code = session_open(&s, opt)) != 0)
		goto out;
	if (w.output && !w.json) {
		/* one task after the other, each one's whole output (tpctl log), in order */
		for (i = 0; i < n && code == 0; i++) {
			json_t *done;

			if ((code = log_task(&s, w.items[i].task, &done)) != 0) {
				if (code == EXIT_BROKEN_PIPE || code >= EXIT_SIGNALLED ||
				    code == EX_UNAVAILABLE) {
					session_close(&s);
					goto out;
				}
				w.items[i].code = code;
				code = 0;
				continue;
			}
			wait_print(done, w.items[i].task, true);
			w.items[i].code = event_task_exit_code(done);
			json_decref(done);
		}
	} else
		code = pipeline_run(&s, (size_t)n, true, wait_request, wait_answer, &w);
	session_close(&s);
	if (code != 0)
		goto out;
	if (n == 1)
		code = w.items[0].code;
	else
		for (code = 0, i = 0; i < n; i++)
			if (w.items[i].code == EX_NOPERM)
				code = EX_NOPERM;
			else if (w.items[i].code != 0 && code == 0)
				code = EXIT_TASK_FAILED;
out:
	free(w.items);
	return code;
}

const struct cmd cmd_wait = {
	.name = "wait",
	.args = "[--output] ID...",
	.summary = "wait for tasks to end; exit as run does for one task",
	.help =
	    "Waits for each task and prints a line as each ends, for an exec task\n"
	    "with what it used (cpu 0.25s user, 0.01s system, peak 12.3 MiB). With\n"
	    "one task, exits as tpctl run does (its exit status, 124 timed out,\n"
	    "128+N signal N, 1 failed); with several, 0 when all succeeded, else 1.\n"
	    "An interrupt stops the waiting; the tasks go on.\n"
	    "\n"
	    "  -o, --output             print each task's whole output instead of its\n"
	    "                           line, one task after the other (as tpctl log;\n"
	    "                           then, on stderr, a line for a task that did not\n"
	    "                           succeed)\n",
	.exec = wait_exec,
};
