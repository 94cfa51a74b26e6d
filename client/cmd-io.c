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
