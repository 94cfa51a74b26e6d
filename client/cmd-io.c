/*
 * cmd-io.c: a task's input and output after the fact: tpctl send (feeds a
 * running task's stdin, submitted with -i or "stdin_stream": true) and
 * tpctl log (a task's whole output, from the daemon's spool).
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tpctl.h"
#include "wire.h"

static int
send_exec(struct tpctl *opt, int argc, char **argv)
{
	static const struct option longopts[] = {
		CMD_LONGOPTS_COMMON,
		{ "eof", no_argument, NULL, 'e' },
		{ NULL, 0, NULL, 0 }
	};
	struct session s;
	struct feed f;
	long long *ids = NULL;
	const char *file = NULL;
	bool eof = false;
	json_t *ev;
	int ch, code, res, fd = STDIN_FILENO;

	while ((ch = cmd_getopt(&cmd_send, opt, argc, argv, "+:he", longopts)) != -1) {
		if (ch == 'e')
			eof = true;
		else
			return ch == 'h' ? 0 : EX_USAGE;
	}
	if (argc - optind < 1 || argc - optind > 2)
		return cmd_usage_error(&cmd_send, "a task id and at most one file expected");
	if ((code = cmd_parse_task_ids(&cmd_send, 1, argv + optind, &ids)) != 0)
		return code;
	if (argc - optind == 2 && strcmp(argv[optind + 1], "-") != 0) {
		file = argv[optind + 1];
		if ((fd = open(file, O_RDONLY | O_CLOEXEC)) == -1) {
			tpctl_warnx("send: cannot open %s: %s", file, strerror(errno));
			free(ids);
			return EX_NOINPUT;
		}
	}
	feed_init(&f, fd, eof);
	f.name = file;
	f.task = ids[0];
	free(ids);
	if (interrupt_install() == -1) {
		tpctl_warnx("cannot catch signals: %s", strerror(errno));
		code = EX_OSERR;
		goto out;
	}
	if ((code = session_open(&s, opt)) != 0)
		goto out;
	/* until the input is sent and every input answered (or one refused) */
	while (code == 0 && feed_busy(&f)) {
		link_watch(s.link, feed_wants_input(&f) ? f.fd : -1);
		res = session_next(&s, &ev, -1);
		if (res == LINK_INTERRUPTED) {
			tpctl_warnx("interrupted: %llu bytes sent to task %lld",
			    (unsigned long long)f.total, (long long)f.task);
			code = EXIT_SIGNALLED + interrupt_last_signal();
			break;
		}
		if (res == LINK_INPUT) {
			code = feed_read(&f, &s);
			continue;
		}
		if (res != LINK_EVENT) {
			code = session_exit_code(res);
			break;
		}
		if (!feed_event(&f, ev) && event_id(ev) == -1 &&
		    strcmp(event_name(ev), EV_ERROR) == 0)
			code = event_report_error(link_address(s.link), ev);
		json_decref(ev);
	}
	if (code == 0 && f.failed)
		code = f.code;
	if (code == 0 && f.read_failed)
		code = EX_IOERR;
	session_close(&s);
out:
	if (file != NULL)
		close(fd);
	feed_free(&f);
	return code;
}

const struct cmd cmd_send = {
	.name = "send",
	.args = "[--eof] ID [FILE]",
	.summary = "feed a running task's stdin (one submitted with -i)",
	.help =
	    "Sends FILE (or tpctl's stdin, or - for it) to the stdin of task ID, a\n"
	    "task submitted with --stdin (-i) or \"stdin_stream\": true, as pueue send\n"
	    "does. The input is paced by the task: tpctl waits while the task's\n"
	    "buffer is full, so an input of any size costs little memory. Several\n"
	    "sends may follow each other; the task's stdin stays open until --eof.\n"
	    "Exits 0 once the daemon has taken it all; 1 when the task has ended or\n"
	    "its stdin was already closed, 77 when the task is not yours.\n"
	    "\n"
	    "  -e, --eof                end the task's stdin after this input (with\n"
	    "                           /dev/null as FILE: just end it)\n",
	.exec = send_exec,
};

int
log_task(struct session *s, long long id, json_t **done)
{
	json_t *req, *ev, *result, *copy, *wrap;
	bool streamed[2] = { false, false };
	int64_t rid;
	int res, code = -1;

	*done = NULL;
	req = json_pack("{s:s, s:I, s:b, s:s}", FIELD_OP, OP_WAIT, FIELD_TASK, (json_int_t)id,
	    FIELD_STREAM, 1, FIELD_FROM, FROM_START);
	if ((rid = session_send_wait(s, req)) == -1)
		return EX_UNAVAILABLE;
	while (code == -1) {
		res = session_next(s, &ev, -1);
		if (res == LINK_INTERRUPTED) {
			tpctl_warnx("interrupted: stopped reading task %lld's output", id);
			return EXIT_SIGNALLED + interrupt_last_signal();
		}
		if (res != LINK_EVENT)
			return session_exit_code(res);
		if (event_id(ev) != rid) {
			if (event_id(ev) == -1 && strcmp(event_name(ev), EV_ERROR) == 0)
				code = event_report_error(link_address(s->link), ev);
			json_decref(ev);
			continue;
		}
		if (strcmp(event_name(ev), EV_OUTPUT) == 0) {
			int err = strcmp(event_str(ev, FIELD_STREAM, ""), STREAM_STDERR) == 0;
			streamed[err] = true;
			if (!s->opt->json && event_write_output(ev) == -1) {
				json_decref(ev);
				return errno == EPIPE ? EXIT_BROKEN_PIPE : EX_IOERR;
			}
		} else if (strcmp(event_name(ev), EV_CUT) == 0) {
			/* never cut without a word */
			tpctl_warnx("%s", event_str(ev, FIELD_MESSAGE, "part of the output was not kept"));
		} else if (strcmp(event_name(ev), EV_DONE) == 0) {
			*done = ev;
			code = 0;
			break;
		} else if (strcmp(event_name(ev), EV_ERROR) == 0) {
			char what[64];
			snprintf(what, sizeof what, "task %lld", id);
			code = event_report_error(what, ev);
		}
		json_decref(ev);
	}
	if (code != 0 || s->opt->json)
		return code;
	/* what was not replayed from a spool (none kept there): the result's, and its cut */
	result = json_object_get(*done, FIELD_RESULT);
	if (result == NULL || json_is_null(result) || (streamed[0] && streamed[1]))
		return 0;
	copy = json_deep_copy(result);
	wrap = json_object();
	if (streamed[0]) {
		json_object_del(copy, FIELD_STDOUT);
		json_object_del(copy, FIELD_STDOUT_BASE64);
	}
	if (streamed[1]) {
		json_object_del(copy, FIELD_STDERR);
		json_object_del(copy, FIELD_STDERR_BASE64);
	}
	json_object_set_new(wrap, FIELD_RESULT, copy);
	json_object_set_new(wrap, FIELD_TASK, json_integer(id));
	if (event_write_result_output(wrap) == -1) {
		json_decref(wrap);
		return errno == EPIPE ? EXIT_BROKEN_PIPE : EX_IOERR;
	}
	if (!streamed[0] && !streamed[1])
		event_say_truncated(wrap);
	json_decref(wrap);
	return 0;
}

static int
log_exec(struct tpctl *opt, int argc, char **argv)
{
	struct session s;
	long long *ids = NULL;
	json_t *done;
	int code, n;

	if ((code = cmd_noopts(&cmd_log, opt, argc, argv)) != -1)
		return code;
	n = argc - optind;
	if (n != 1)
		return cmd_usage_error(&cmd_log, "one task id expected");
	if ((code = cmd_parse_task_ids(&cmd_log, 1, argv + optind, &ids)) != 0)
		return code;
	if (interrupt_install() == -1) {
		tpctl_warnx("cannot catch signals: %s", strerror(errno));
		free(ids);
		return EX_OSERR;
	}
	if ((code = session_open(&s, opt)) != 0) {
		free(ids);
		return code;
	}
	code = log_task(&s, ids[0], &done);
	json_decref(done);
	session_close(&s);
	free(ids);
	return code;
}

const struct cmd cmd_log = {
	.name = "log",
	.args = "ID",
	.summary = "print a task's whole output (stdout to stdout, stderr to stderr)",
	.help =
	    "Prints the whole output of task ID, from the start: what the daemon\n"
	    "spooled under its state_dir ([exec] output_spool), however large, also\n"
	    "after the task ended and after a restart; stdout to stdout, stderr to\n"
	    "stderr. A running task is followed to its end (Ctrl-C stops; the task\n"
	    "goes on). Where the spool does not hold it all (its bounds, or spooling\n"
	    "off), what is missing is said on stderr, and what the task's result\n"
	    "kept (its output limit) is printed instead. Exits 0 once printed.\n",
	.exec = log_exec,
};
