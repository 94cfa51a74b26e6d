/*
 * cmd-run.c: tpctl run: submit a task with stream: true, copy its output to
 * tpctl's own as the output events arrive, and exit with the task's code.
 * The first interrupt cancels the task and waits for its done; the second
 * exits at once. tpctl follow: the same for a task already submitted (a
 * wait with stream: true), from any connection; an interrupt only stops
 * the following.
 */
#include "config.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "tpctl.h"
#include "wire.h"

/* How long run waits for its cancel to be answered once its stdout is gone. */
#define RUN_FLUSH_MS 1000

struct run {
	struct session s;
	const struct taskopt *to;
	json_t *task;           /* as submitted */
	int64_t submit_id;
	int64_t task_id;        /* -1 until accepted */
	bool cancel_wanted;     /* interrupted: cancel once accepted */
	bool cancel_sent;
	bool streamed[2];       /* an output event came for stdout, stderr */
	bool verbose;           /* -v: say what the task used */
	bool follow;            /* tpctl follow: submit_id is the wait's */
	struct feed feed;       /* -i: tpctl's stdin, streamed to the task */
	uint64_t accepted_us;   /* when accepted: a task not started a second later is said queued */
	int64_t ahead;          /* the accepted event's queued */
	bool started;           /* its started came (or its output, or its done) */
	bool queued_said;
};

/* How long a run waits for its task to start before saying it is queued. */
#define RUN_QUEUED_SAY_MS 1000

static int
run_cancel(struct run *r)
{
	json_t *req;

	r->cancel_wanted = true;
	if (r->task_id < 0 || r->cancel_sent)
		return 0;
	req = json_pack("{s:s, s:I}", FIELD_OP, OP_CANCEL, FIELD_TASK,
	    (json_int_t)r->task_id);
	if (feed_busy(&r->feed)) {
		/*
		 * The daemon may not be reading this connection (the task's stdin
		 * buffer is full, and a task that is not reading keeps it so):
		 * the cancel goes on a connection of its own.
		 */
		json_t *reply = NULL;
		int code = session_once(r->s.opt, "cancel", req, &reply);
		json_decref(reply);
		if (code != 0)
			return -1;
		r->cancel_sent = true;
		r->feed.fd = -1;
		return 0;
	}
	if (session_send(&r->s, req) == -1)
		return -1;
	r->cancel_sent = true;
	return 0;
}

/* The first interrupt cancels; the second gives up. Returns an exit code or -1. */
static int
run_interrupted(struct run *r)
{
	interrupt_take();
	if (interrupt_count() >= 2 || r->cancel_wanted) {
		if (r->task_id >= 0)
			tpctl_warnx("interrupted: stopped waiting for task %lld",
			    (long long)r->task_id);
		return EXIT_SIGNALLED + interrupt_last_signal();
	}
	if (r->task_id >= 0)
		tpctl_warnx("cancelling task %lld (interrupt again to stop waiting)",
		    (long long)r->task_id);
	else
		tpctl_warnx("cancelling the task once the daemon accepts it "
		    "(interrupt again to stop waiting)");
	if (run_cancel(r) == -1)
		return EX_UNAVAILABLE;
	return -1;
}

/*
 * stdout or stderr is gone: cancel the task and leave as if by SIGPIPE.
 * The cancel's answer is awaited (briefly): a daemon that meets the closed
 * socket while writing output may drop the connection before it reads a
 * cancel sent just before the close.
 */
static int
run_broken_pipe(struct run *r)
{
	uint64_t deadline = tpctl_now_us() + RUN_FLUSH_MS * 1000;
	int64_t cancel_id = r->s.next_id;
	char *cause = NULL;
	json_t *ev;
	int res;

	if (r->cancel_sent || run_cancel(r) == -1 || !r->cancel_sent)
		return EXIT_BROKEN_PIPE;
	for (;;) {
		uint64_t now = tpctl_now_us();
		if (now >= deadline)
			break;
		res = link_recv(r->s.link, &ev, (int)((deadline - now + 999) / 1000),
		    &cause);
		if (res != LINK_EVENT)
			break;
		res = event_id(ev) == cancel_id ||
		    strcmp(event_name(ev), EV_DONE) == 0;
		json_decref(ev);
		if (res)
			break;
	}
	free(cause);
	return EXIT_BROKEN_PIPE;
}

/* The task is over: say how, unless its exit status says it all. */
static int
run_end(struct run *r, const json_t *ev)
{
	const char *state = event_str(ev, FIELD_STATE, "");
	json_t *result = json_object_get(ev, FIELD_RESULT);
	char *what;

	if (strcmp(state, STATE_CANCELLED) == 0 && r->cancel_sent)
		return EXIT_SIGNALLED + interrupt_last_signal();
	if (r->s.opt->json)
		return event_task_exit_code(ev);
	/*
	 * A daemon that did not stream leaves the output in the result; a
	 * kind other than exec returns a result to print as it is.
	 */
	if (result != NULL && !json_is_null(result)) {
		json_t *copy = json_deep_copy(result);
		json_t *wrap = json_object();
		if (r->streamed[0]) {
			json_object_del(copy, FIELD_STDOUT);
			json_object_del(copy, FIELD_STDOUT_BASE64);
		}
		if (r->streamed[1]) {
			json_object_del(copy, FIELD_STDERR);
			json_object_del(copy, FIELD_STDERR_BASE64);
		}
		json_object_set_new(wrap, FIELD_RESULT, copy);
		if (event_write_result_output(wrap) == -1 && errno == EPIPE) {
			json_decref(wrap);
			return EXIT_BROKEN_PIPE;
		}
		json_decref(wrap);
		/* streamed output is whole: only the result's copy is cut */
		if (json_is_true(json_object_get(result, FIELD_TRUNCATED)) &&
		    !r->streamed[0] && !r->streamed[1])
			tpctl_warnx("task %lld: output was cut at the output limit "
			    "(see --output-limit)", (long long)r->task_id);
	}
	if (strcmp(state, STATE_SUCCEEDED) != 0 &&
	    strcmp(event_error_code(ev), ERR_EXIT_STATUS) != 0) {
		what = event_describe_done(ev);
		tpctl_warnx("task %lld %s", (long long)r->task_id,
		    what != NULL ? what : state);
		free(what);
	}
	return event_task_exit_code(ev);
}

/* run_end, and with -v what the task used, in one line after everything else. */
static int
run_done(struct run *r, const json_t *ev)
{
	char used[FORMAT_USAGE_LEN];
	int code = run_end(r, ev);

	if (r->verbose && format_usage(event_usage(ev), used, sizeof used) != NULL)
		tpctl_warnx("task %lld: %s", (long long)r->task_id, used);
	return code;
}

/* One event of our task. Returns an exit code when it ends the run, else -1. */
static int
run_event(struct run *r, json_t *ev)
{
	const char *name = event_name(ev);
	int64_t id = event_id(ev);
	int k;

	if (id == -1 && strcmp(name, EV_ERROR) == 0)
		return event_report_error(link_address(r->s.link), ev);
	if (feed_event(&r->feed, ev))
		return -1;      /* an input's answer (a refusal: the task has ended) */
	if (id != r->submit_id) {
		/* the cancel's answer: an error there is worth a word */
		if (strcmp(name, EV_ERROR) == 0)
			event_report_error("cancel", ev);
		return -1;
	}
	if (strcmp(name, EV_STARTED) == 0 || strcmp(name, EV_DONE) == 0 ||
	    strcmp(name, EV_OUTPUT) == 0)
		r->started = true;
	if (strcmp(name, EV_ACCEPTED) == 0) {
		r->task_id = event_int(ev, FIELD_TASK, -1);
		r->accepted_us = tpctl_now_us();
		r->ahead = event_int(ev, FIELD_QUEUED, 0);
		if (r->feed.fd != -1)
			r->feed.task = r->task_id;      /* its stdin may flow now */
		if (r->cancel_wanted && run_cancel(r) == -1)
			return EX_UNAVAILABLE;
	} else if (strcmp(name, EV_OUTPUT) == 0) {
		bool err = strcmp(event_str(ev, FIELD_STREAM, ""), STREAM_STDERR) == 0;
		r->streamed[err] = true;
		if (!r->s.opt->json && event_write_output(ev) == -1) {
			if (errno == EPIPE)
				return run_broken_pipe(r);
			tpctl_warnx("cannot write the task's output: %s", strerror(errno));
			return EX_IOERR;
		}
	} else if (strcmp(name, EV_DONE) == 0)
		return run_done(r, ev);
	else if (strcmp(name, EV_RETRYING) == 0) {
		char *what = event_describe_done(ev);
		char in[FORMAT_DURATION_LEN];
		/* an attempt ended: the next follows after its delay */
		if (!r->s.opt->json)
			tpctl_warnx("task %lld attempt %lld %s; attempt %lld in %s",
			    (long long)r->task_id, (long long)event_int(ev, FIELD_ATTEMPT, 0),
			    what != NULL ? what : "failed",
			    (long long)event_int(ev, FIELD_ATTEMPT, 0) + 1,
			    format_duration(event_num(ev, FIELD_DELAY_MS, 0), in, sizeof in));
		free(what);
	} else if (strcmp(name, EV_ERROR) == 0 &&
	    (k = taskopt_refused_limit(r->to, r->task, ev)) != -1)
		return taskopt_report_refused(r->to, k, ev);
	else if (strcmp(name, EV_REJECTED) == 0 || strcmp(name, EV_ERROR) == 0)
		return event_report_error(r->follow ? "follow" : "submit", ev);
	return -1;
}

/*
 * Catches the signals, connects and sends req (taken) for r: its answer is
 * owed at once (a submit's accepted) or not (a wait's done). 0, or the exit code.
 */
static int
run_begin(struct run *r, struct tpctl *opt, json_t *req, bool owed)
{
	int code;

	if (interrupt_install() == -1) {
		tpctl_warnx("cannot catch signals: %s", strerror(errno));
		json_decref(req);
		return EX_OSERR;
	}
	if ((code = session_open(&r->s, opt)) != 0) {
		json_decref(req);
		return code;
	}
	/* an answer not owed at once (waiting for room, or a task's end): probe the daemon first */
	if (!owed && session_probe(&r->s, r->follow ? "follow" : "submit") == -1) {
		json_decref(req);
		session_close(&r->s);
		return EX_UNAVAILABLE;
	}
	r->submit_id = owed ? session_send(&r->s, req) : session_send_wait(&r->s, req);
	if (r->submit_id == -1) {
		session_close(&r->s);
		return EX_UNAVAILABLE;
	}
	return 0;
}

/*
 * A command's stdin that is a pipe or a file stays with tpctl unless -i
 * sends it: one line says so, since `tpctl run -- sort < file` reads as if
 * it would.
 */
static void
run_stdin_hint(void)
{
	struct stat st;

	if (fstat(STDIN_FILENO, &st) == 0 && (S_ISFIFO(st.st_mode) ||
	    (S_ISREG(st.st_mode) && st.st_size > 0)))
		tpctl_warnx("hint: stdin is a %s, and the task does not get it: give -i "
		    "(--stdin) to send it", S_ISFIFO(st.st_mode) ? "pipe" : "file");
}

static int
run_exec(struct tpctl *opt, int argc, char **argv)
{
	static const struct option longopts[] = {
		CMD_LONGOPTS_COMMON, TASKOPT_LONGOPTS,
		{ "stdin", no_argument, NULL, 'i' },
		{ "stdin-open", no_argument, NULL, OPT_STDIN_OPEN },
		{ "task", required_argument, NULL, OPT_TASK },
		{ "verbose", no_argument, NULL, 'v' },
		{ NULL, 0, NULL, 0 }
	};
	struct taskopt to;
	struct run r;
	json_t *task, *req, *ev;
	bool verbose = false, noticed = false;
	int ch, code, res;

	taskopt_init(&to);
	to.stream_stdin = true;
	while ((ch = cmd_getopt(&cmd_run, opt, argc, argv,
	    "+:h" TASKOPT_SHORTOPTS "iv", longopts)) != -1) {
		if (ch == 'v') {
			verbose = true;
			continue;
		}
		if (ch == 'h' || ch == '?') {
			taskopt_free(&to);
			return ch == 'h' ? 0 : EX_USAGE;
		}
		if (taskopt_option(&to, &cmd_run, ch, optarg) != 1) {
			taskopt_free(&to);
			return EX_USAGE;
		}
	}
	if ((code = taskopt_build(&to, &cmd_run, argc - optind, argv + optind,
	    &task)) != 0) {
		taskopt_free(&to);
		return code;
	}
	if ((code = taskopt_cwd(&to, &cmd_run, opt, task)) != 0) {
		json_decref(task);
		taskopt_free(&to);
		return code;
	}
	if (!to.read_stdin && !to.stdin_open)
		run_stdin_hint();
	memset(&r, 0, sizeof r);
	r.task_id = -1;
	r.to = &to;
	r.task = json_incref(task);
	r.verbose = verbose;
	feed_init(&r.feed, to.read_stdin ? STDIN_FILENO : -1, !to.stdin_open);
	r.feed.quiet_refusal = true;
	req = taskopt_submit(&to, task);
	json_object_set_new(req, FIELD_STREAM, json_true());

	if ((code = run_begin(&r, opt, req, !taskopt_waits_for_room(&to))) != 0)
		goto out;
	for (code = -1; code == -1;) {
		int wait = -1;

		if (r.task_id < 0 && !noticed && !opt->json)
			wait = TASKOPT_ROOM_NOTICE_MS;
		else if (r.accepted_us != 0 && !r.started && !r.queued_said && !opt->json) {
			uint64_t at = r.accepted_us + RUN_QUEUED_SAY_MS * 1000, now = tpctl_now_us();
			wait = now >= at ? 0 : (int)((at - now + 999) / 1000);
		}
		link_watch(r.s.link, feed_wants_input(&r.feed) ? r.feed.fd : -1);
		res = session_next(&r.s, &ev, wait);
		if (res == LINK_TIMEOUT && r.task_id < 0 && !noticed) {
			/* a second without an answer: it waits for room in its pool */
			taskopt_room_notice(&to);
			noticed = true;
			continue;
		}
		if (res == LINK_TIMEOUT && wait >= 0) {
			/* a second without a start: it waits for a worker, say so */
			r.queued_said = true;
			tpctl_warnx("task %lld is queued (%lld ahead of it when accepted); "
			    "waiting for a worker", (long long)r.task_id, (long long)r.ahead);
			continue;
		}
		if (res == LINK_INTERRUPTED) {
			code = run_interrupted(&r);
			continue;
		}
		if (res == LINK_INPUT) {
			if ((code = feed_read(&r.feed, &r.s)) == 0)
				code = -1;
			continue;
		}
		if (res != LINK_EVENT) {
			if (r.task_id >= 0)
				tpctl_warnx("task %lld may still be running: see "
				    "tpctl wait %lld", (long long)r.task_id,
				    (long long)r.task_id);
			code = session_exit_code(res);
			break;
		}
		code = run_event(&r, ev);
		json_decref(ev);
		if (code == -1 && r.s.stdout_gone)
			code = run_broken_pipe(&r);
	}
	session_close(&r.s);
out:
	feed_free(&r.feed);
	json_decref(r.task);
	taskopt_free(&to);
	return code;
}

static int
follow_exec(struct tpctl *opt, int argc, char **argv)
{
	static const struct option longopts[] = {
		CMD_LONGOPTS_COMMON,
		{ "from-start", no_argument, NULL, 'a' },
		{ "verbose", no_argument, NULL, 'v' },
		{ NULL, 0, NULL, 0 }
	};
	struct taskopt to;
	struct run r;
	json_t *req, *ev;
	long long *ids = NULL;
	bool from_start = false;
	int ch, code, res;

	memset(&r, 0, sizeof r);
	feed_init(&r.feed, -1, false);
	while ((ch = cmd_getopt(&cmd_follow, opt, argc, argv, "+:hav", longopts)) != -1) {
		if (ch == 'v')
			r.verbose = true;
		else if (ch == 'a')
			from_start = true;
		else
			return ch == 'h' ? 0 : EX_USAGE;
	}
	if (argc - optind != 1)
		return cmd_usage_error(&cmd_follow, "one task id expected");
	if ((code = cmd_parse_task_ids(&cmd_follow, 1, argv + optind, &ids)) != 0)
		return code;
	taskopt_init(&to);
	r.to = &to;
	r.follow = true;
	r.task_id = ids[0];
	free(ids);
	req = json_pack("{s:s,s:I,s:b}", FIELD_OP, OP_WAIT, FIELD_TASK, (json_int_t)r.task_id,
	    FIELD_STREAM, 1);
	if (from_start)
		json_object_set_new(req, FIELD_FROM, json_string(FROM_START));
	if ((code = run_begin(&r, opt, req, false)) != 0)
		goto out;
	for (code = -1; code == -1;) {
		res = session_next(&r.s, &ev, -1);
		if (res == LINK_INTERRUPTED) {
			/* the task is not ours to cancel: stop following it */
			tpctl_warnx("stopped following task %lld (it goes on: tpctl wait %lld)",
			    (long long)r.task_id, (long long)r.task_id);
			code = EXIT_SIGNALLED + interrupt_last_signal();
			break;
		}
		if (res != LINK_EVENT) {
			code = session_exit_code(res);
			break;
		}
		code = run_event(&r, ev);
		json_decref(ev);
		if (code == -1 && r.s.stdout_gone)
			code = EXIT_BROKEN_PIPE;
	}
	session_close(&r.s);
out:
	taskopt_free(&to);
	return code;
}

/*
 * The submit that repeats a task, from its status: its spec, and its
 * submit fields but key (the repeat is a task of its own) and after (what
 * it waited for has ended). NULL (printed) when the status lacks them.
 */
static json_t *
rerun_request(const json_t *st, long long id)
{
	json_t *spec = json_object_get(st, FIELD_SPEC);
	json_t *fields = json_object_get(st, FIELD_SUBMIT), *req, *v;
	const char *key;

	if (!json_is_object(spec)) {
		tpctl_warnx("rerun %lld: the daemon does not say what the task was (an older "
		    "tpd, or a task its journal kept from one)", id);
		return NULL;
	}
	req = json_pack("{s:s, s:O}", FIELD_OP, OP_SUBMIT, FIELD_TASK, spec);
	json_object_foreach(fields, key, v)
		if (strcmp(key, FIELD_KEY) != 0 && strcmp(key, FIELD_AFTER) != 0 &&
		    strcmp(key, FIELD_AFTER_MODE) != 0)
			json_object_set(req, key, v);
	return req;
}

/*
 * tpctl rerun ID: the task's spec submitted again as a new task; prints the
 * new id, or with --wait follows it as run does.
 */
static int
rerun_exec(struct tpctl *opt, int argc, char **argv)
{
	static const struct option longopts[] = {
		CMD_LONGOPTS_COMMON,
		{ "wait", no_argument, NULL, 'w' },
		{ "verbose", no_argument, NULL, 'v' },
		{ NULL, 0, NULL, 0 }
	};
	struct taskopt to;
	struct session s;
	struct run r;
	json_t *req, *st = NULL, *ev;
	long long *ids = NULL, id;
	bool wait = false;
	int ch, code, res;

	memset(&r, 0, sizeof r);
	while ((ch = cmd_getopt(&cmd_rerun, opt, argc, argv, "+:hwv", longopts)) != -1) {
		if (ch == 'w')
			wait = true;
		else if (ch == 'v')
			r.verbose = true;
		else
			return ch == 'h' ? 0 : EX_USAGE;
	}
	if (argc - optind != 1)
		return cmd_usage_error(&cmd_rerun, "one task id expected");
	if ((code = cmd_parse_task_ids(&cmd_rerun, 1, argv + optind, &ids)) != 0)
		return code;
	id = ids[0];
	free(ids);
	req = json_pack("{s:s, s:I}", FIELD_OP, OP_STATUS, FIELD_TASK, (json_int_t)id);
	if ((code = session_once(opt, "rerun", req, &st)) != 0)
		return code;
	req = rerun_request(st, id);
	json_decref(st);
	if (req == NULL)
		return EXIT_TASK_FAILED;
	if (wait) {
		taskopt_init(&to);
		r.to = &to;
		r.task_id = -1;
		r.task = json_incref(json_object_get(req, FIELD_TASK));
		json_object_set_new(req, FIELD_STREAM, json_true());
		json_object_del(req, FIELD_DETACH);
		if ((code = run_begin(&r, opt, req, true)) != 0)
			goto out;
		for (code = -1; code == -1;) {
			res = session_next(&r.s, &ev, -1);
			if (res == LINK_INTERRUPTED) {
				code = run_interrupted(&r);
				continue;
			}
			if (res != LINK_EVENT) {
				code = session_exit_code(res);
				break;
			}
			code = run_event(&r, ev);
			json_decref(ev);
			if (code == -1 && r.s.stdout_gone)
				code = run_broken_pipe(&r);
		}
		session_close(&r.s);
out:
		json_decref(r.task);
		taskopt_free(&to);
		return code;
	}
	json_object_set_new(req, FIELD_DETACH, json_true());
	if ((code = session_open(&s, opt)) != 0) {
		json_decref(req);
		return code;
	}
	if (session_call(&s, req, &ev) == 0) {
		if (strcmp(event_name(ev), EV_ACCEPTED) == 0) {
			if (!opt->json)
				printf("%lld\n", (long long)event_int(ev, FIELD_TASK, -1));
			code = 0;
		} else
			code = event_report_error("rerun", ev);
		json_decref(ev);
	} else
		code = EX_UNAVAILABLE;
	session_close(&s);
	return code;
}

const struct cmd cmd_rerun = {
	.name = "rerun",
	.args = "[--wait] [-v] ID",
	.summary = "submit a task again as a new task (same command, env, cwd, pool)",
	.help =
	    "Asks the daemon what task ID was (its status's spec and submit fields)\n"
	    "and submits the same again as a new task, with the same fields but its\n"
	    "key and after; prints the new id. Works on a finished task too (while it\n"
	    "is retained).\n"
	    "\n"
	    "  -w, --wait               follow the new task as run does: its output,\n"
	    "                           then exit with its exit status\n"
	    "  -v, --verbose            with --wait: at the end, what the task used\n",
	.exec = rerun_exec,
};

const struct cmd cmd_follow = {
	.name = "follow",
	.args = "[--from-start] [-v] ID",
	.summary = "stream a submitted task's output, exit with its exit status",
	.help =
	    "Follows task ID from this connection, whoever submitted it: copies its\n"
	    "stdout and stderr as they arrive, from now on, and exits as run does\n"
	    "(its exit status, 124 timed out, 128+N signal N, 1 failed). A finished\n"
	    "task's output is printed at once. Ctrl-C stops following (130);\n"
	    "the task goes on.\n"
	    "\n"
	    "  -a, --from-start         first the task's whole output so far (the\n"
	    "                           daemon's spool, as tpctl log), then what follows\n"
	    "  -v, --verbose            at the end, say on stderr what the task used\n",
	.exec = follow_exec,
};

const struct cmd cmd_run = {
	.name = "run",
	.args = "[OPTIONS] [--] CMD [ARG...]",
	.summary = "run a command, stream its output, exit with its exit status",
	.help =
	    "Submits CMD as an exec task, copies its stdout and stderr to tpctl's as\n"
	    "they arrive, and exits with its exit status: 124 if it timed out, 128+N\n"
	    "if signal N ended it, 1 if it could not start or failed otherwise.\n"
	    "The first Ctrl-C (or SIGTERM, SIGHUP) cancels the task and waits for it\n"
	    "to end; a second one exits at once.\n"
	    "\n"
	    TASKOPT_HELP
	    "  -i, --stdin              stream tpctl's stdin to the command (text or\n"
	    "                           binary, any size, paced by the command)\n"
	    "      --stdin-open         leave the command's stdin open (after -i's input)\n"
	    "                           for tpctl send, until send --eof\n"
	    "      --task JSON          run this task object instead of a command,\n"
	    "                           e.g. '{\"kind\":\"sleep\",\"ms\":500}'; a kind\n"
	    "                           but exec prints its result as one JSON line\n"
	    "  -v, --verbose            at the end, say on stderr what the task used:\n"
	    "                           cpu 0.25s user, 0.01s system, peak 12.3 MiB\n",
	.exec = run_exec,
};
