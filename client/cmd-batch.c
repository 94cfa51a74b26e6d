/*
 * cmd-batch.c: tpctl batch FILE|-: every line of a file as a task,
 * pipelined on one connection with at most -j submits in flight.
 *
 * Each submit asks to wait for room (admission "wait"): the daemon holds it
 * while the pool's queue is full and answers when there is room, so the
 * window (-j) bounds the submits held for the batch. With
 * --no-wait-for-room, a queue_full rejection while other tasks of the batch
 * are in the pool is back-pressure, not failure: the task goes back to be sent again and the
 * window shrinks to what the pool held, growing by one with each task that
 * ends. With nothing of ours in the pool, queue_full is final (someone else
 * fills it). The first interrupt stops submitting and cancels what is in
 * flight; the second exits at once. A closed stdout stops the batch the
 * same way, quietly: nobody reads what it would say.
 *
 * Cancelled tasks are counted apart from failed ones; the cancels the batch
 * sent itself are expected, and get no line of their own.
 */
#include "config.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "tpctl.h"
#include "wire.h"

#define BATCH_DEFAULT_JOBS 16
#define BATCH_MAX_JOBS 100000
#define BATCH_TICK_MS 250       /* progress redraws while nothing ends */

enum batch_outcome { OUT_SUCCEEDED, OUT_FAILED, OUT_CANCELLED, OUT_REJECTED, OUT_ERROR };

struct batch {
	struct tpctl *opt;
	struct taskopt *to;
	struct session s;
	const char *name;
	struct batch_item *items;
	size_t n;
	size_t next;            /* the first item never sent */
	size_t *retry;          /* items to send again after queue_full */
	size_t nretry;
	size_t window, jobs;
	size_t inflight;        /* sent and not finished */
	size_t finished;
	size_t succeeded, failed, cancelled, rejected;
	bool denied;            /* an unauthenticated or forbidden error */
	bool unauthenticated;   /* said once; the batch stops */
	bool limit_refused;     /* a limit option the daemon refuses: likewise */
	bool stopping;          /* send no more */
	bool interrupted;
	bool stdout_gone;       /* stdout is a closed pipe: stop as if interrupted */
	bool quiet;
	struct progress *progress;
	uint64_t start_us;
};

/*
 * Whether the next line may go: the lines its after names are accepted
 * (their task ids known). A line whose dependency was never accepted is
 * not submitted (counted failed, said), and the one after it is looked at.
 * False: none left, or the next waits for its dependencies' answers.
 */
static bool
batch_next_ready(struct batch *b)
{
	while (b->next < b->n) {
		struct batch_item *it = &b->items[b->next], *gone = NULL;
		bool blocked = false;

		for (size_t k = 0; k < it->ndeps && gone == NULL; k++) {
			struct batch_item *d = &b->items[it->deps[k]];
			if (d->task_id != -1)
				continue;
			if (d->state == BATCH_FINISHED)
				gone = d;
			else
				blocked = true;
		}
		if (gone == NULL)
			return !blocked;
		it->state = BATCH_FINISHED;
		b->finished++;
		b->failed++;
		if (!b->stdout_gone && !b->s.stdout_gone)
			tpctl_warnx("%s:%zu: not submitted: it runs after line %zu, which was "
			    "not accepted", b->name, it->line, gone->line);
		progress_done(b->progress, PROGRESS_FAILED);
		b->next++;
	}
	return false;
}

/* A line's own fields over the options': its after's names become the lines' task ids. */
static void
batch_line_fields(struct batch *b, struct batch_item *it, json_t *req)
{
	json_t *v, *after, *one;
	const char *key;
	size_t i, k;

	json_object_foreach(it->fields, key, v) {
		if (strcmp(key, FIELD_AFTER) != 0 || !json_is_array(v)) {
			json_object_set(req, key, v);
			continue;
		}
		after = json_array();
		json_array_foreach(v, i, one) {
			const char *ref = json_string_value(one);
			for (k = 0; ref != NULL && k < it->ndeps; k++)
				if (strcmp(b->items[it->deps[k]].name, ref) == 0)
					break;
			if (ref != NULL && k < it->ndeps)
				json_array_append_new(after, json_integer(
				    (json_int_t)b->items[it->deps[k]].task_id));
			else
				json_array_append(after, one);
		}
		json_object_set_new(req, FIELD_AFTER, after);
	}
}

static int
batch_send_more(struct batch *b)
{
	struct batch_item *it;
	json_t *req;
	size_t i;

	while (!b->stopping && b->inflight < b->window) {
		if (b->nretry > 0)
			i = b->retry[--b->nretry];
		else if (batch_next_ready(b))
			i = b->next++;
		else
			break;
		it = &b->items[i];
		req = taskopt_submit(b->to, json_incref(it->task));
		if (it->fields != NULL)
			batch_line_fields(b, it, req);
		json_object_set_new(req, FIELD_ID, json_integer((json_int_t)i + 1));
		/* a submit waiting for room is answered when there is: not at once */
		if ((taskopt_waits_for_room(b->to) ? session_send_wait(&b->s, req) :
		    session_send(&b->s, req)) == -1)
			return EX_UNAVAILABLE;
		it->state = BATCH_SENT;
		b->inflight++;
	}
	return 0;
}

static int
batch_cancel(struct batch *b, struct batch_item *it)
{
	json_t *req;

	req = json_pack("{s:s, s:I}", FIELD_OP, OP_CANCEL, FIELD_TASK,
	    (json_int_t)it->task_id);
	return session_send(&b->s, req) == -1 ? EX_UNAVAILABLE : 0;
}

/* Says how a task that did not succeed ended, naming its line. */
static void
batch_say_done(struct batch *b, const struct batch_item *it, const json_t *ev)
{
	char *what = event_describe_done(ev);

	/* the line, unless the message already names it ("no such program: X") */
	if (what != NULL && it->text != NULL && strstr(what, it->text) != NULL)
		tpctl_warnx("%s:%zu: task %lld %s", b->name, it->line, (long long)it->task_id,
		    what);
	else
		tpctl_warnx("%s:%zu: task %lld %s: %s", b->name, it->line,
		    (long long)it->task_id, what != NULL ? what : "failed", it->text);
	free(what);
}

static void
batch_finish(struct batch *b, struct batch_item *it, enum batch_outcome out,
    const json_t *ev)
{
	/* once stdout is gone, nobody reads: stop quietly */
	bool say = !b->stdout_gone && !b->s.stdout_gone;
	int k;

	it->state = BATCH_FINISHED;
	b->inflight--;
	b->finished++;
	if (b->window < b->jobs)
		b->window++;
	if ((out == OUT_SUCCEEDED || out == OUT_FAILED || out == OUT_CANCELLED) &&
	    !b->quiet && !b->opt->json && say) {
		progress_clear(b->progress);
		if (event_write_result_output(ev) == -1 && errno == EPIPE) {
			b->stdout_gone = true;
			say = false;
		} else
			event_say_truncated(ev);
	}
	switch (out) {
	case OUT_SUCCEEDED:
		b->succeeded++;
		break;
	case OUT_FAILED:
		b->failed++;
		if (say)
			batch_say_done(b, it, ev);
		break;
	case OUT_CANCELLED:
		b->cancelled++;
		/* the batch's own cancels (after an interrupt) are expected */
		if (say && !b->interrupted)
			batch_say_done(b, it, ev);
		break;
	case OUT_REJECTED:
		b->rejected++;
		if (say)
			tpctl_warnx("%s:%zu: rejected: %s (%s)", b->name, it->line,
			    event_error_message(ev), event_error_code(ev));
		break;
	case OUT_ERROR:
		b->failed++;
		if (event_exit_for_error(event_error_code(ev)) == EX_NOPERM)
			b->denied = true;
		if (strcmp(event_error_code(ev), ERR_UNAUTHENTICATED) == 0) {
			/* no token: every line would say so; say it once, stop */
			if (say && !b->unauthenticated)
				event_report_error(b->name, ev);
			b->unauthenticated = b->stopping = true;
		} else if ((k = taskopt_refused_limit(b->to, it->task, ev)) != -1) {
			/* the option's limit is in every line: likewise */
			if (say && !b->limit_refused)
				taskopt_report_refused(b->to, k, ev);
			b->limit_refused = b->stopping = true;
		} else if (say)
			tpctl_warnx("%s:%zu: %s (%s)", b->name, it->line,
			    event_error_message(ev), event_error_code(ev));
		break;
	}
	progress_done(b->progress, out == OUT_SUCCEEDED ? PROGRESS_SUCCEEDED :
	    out == OUT_CANCELLED ? PROGRESS_CANCELLED : PROGRESS_FAILED);
}

/* The outcome a done stands for. */
static enum batch_outcome
batch_outcome(const json_t *ev)
{
	const char *state = event_str(ev, FIELD_STATE, "");

	if (strcmp(state, STATE_SUCCEEDED) == 0)
		return OUT_SUCCEEDED;
	if (strcmp(state, STATE_CANCELLED) == 0)
		return OUT_CANCELLED;
	return OUT_FAILED;
}

/* One event. Returns 0, or an exit code that ends the batch. */
static int
batch_event(struct batch *b, json_t *ev)
{
	const char *name = event_name(ev), *code;
	struct batch_item *it;
	int64_t id = event_id(ev);

	if (id == -1 && strcmp(name, EV_ERROR) == 0)
		return event_report_error(link_address(b->s.link), ev);
	if (id < 1 || (uint64_t)id > b->n)
		return 0;       /* a cancel's answer */
	it = &b->items[id - 1];
	if (it->state != BATCH_SENT && it->state != BATCH_ACCEPTED)
		return 0;
	if (strcmp(name, EV_ACCEPTED) == 0) {
		it->state = BATCH_ACCEPTED;
		it->task_id = event_int(ev, FIELD_TASK, -1);
		if (b->interrupted || b->stdout_gone)
			return batch_cancel(b, it);
	} else if (strcmp(name, EV_DONE) == 0)
		batch_finish(b, it, batch_outcome(ev), ev);
	else if (strcmp(name, EV_REJECTED) == 0) {
		code = event_error_code(ev);
		if (strcmp(code, ERR_QUEUE_FULL) == 0 && b->inflight > 1 &&
		    !b->stopping) {
			it->state = BATCH_PENDING;
			b->retry[b->nretry++] = (size_t)(id - 1);
			b->inflight--;
			b->window = b->inflight > 0 ? b->inflight : 1;
			return 0;
		}
		if (strcmp(code, ERR_CLOSED) == 0)
			b->stopping = true;
		batch_finish(b, it, OUT_REJECTED, ev);
	} else if (strcmp(name, EV_ERROR) == 0)
		batch_finish(b, it, OUT_ERROR, ev);
	return 0;
}

/* Submits no more and cancels what is in flight; returns how many that is. */
static size_t
batch_stop(struct batch *b, int *err)
{
	size_t i, running = 0;

	*err = 0;
	b->stopping = true;
	/* the accepted now; the rest as their accepted arrives (batch_event) */
	for (i = 0; i < b->n; i++) {
		if (b->items[i].state == BATCH_ACCEPTED &&
		    (*err = batch_cancel(b, &b->items[i])) != 0)
			return running;
		if (b->items[i].state == BATCH_ACCEPTED ||
		    b->items[i].state == BATCH_SENT)
			running++;
	}
	return running;
}

/* The first interrupt stops the batch gently; the second ends it. */
static int
batch_interrupted(struct batch *b)
{
	size_t running;
	int r;

	interrupt_take();
	if (b->interrupted || interrupt_count() >= 2)
		return EXIT_SIGNALLED + interrupt_last_signal();
	b->interrupted = true;
	running = batch_stop(b, &r);
	if (r != 0)
		return r;
	tpctl_warnx("interrupted: submitting no more, cancelling %zu task%s "
	    "(interrupt again to quit at once)", running, running == 1 ? "" : "s");
	return 0;
}

static void
batch_summary(struct batch *b)
{
	char took[FORMAT_DURATION_LEN];
	uint64_t us = tpctl_now_us() - b->start_us;
	size_t notrun = b->n - b->finished - b->inflight;

	progress_free(b->progress);
	b->progress = NULL;
	if (b->stdout_gone)
		return;         /* quietly, as a program killed by SIGPIPE */
	fflush(stdout);
	fprintf(stderr, "batch: %zu task%s in %s (%.1f/s): %zu succeeded, "
	    "%zu failed", b->n, b->n == 1 ? "" : "s",
	    format_duration(us / 1000, took, sizeof took),
	    us > 0 ? (double)b->finished * 1e6 / (double)us : 0.0,
	    b->succeeded, b->failed);
	if (b->cancelled > 0)
		fprintf(stderr, ", %zu cancelled", b->cancelled);
	if (b->rejected > 0)
		fprintf(stderr, ", %zu rejected", b->rejected);
	if (b->inflight > 0)
		fprintf(stderr, ", %zu without an answer", b->inflight);
	if (notrun > 0)
		fprintf(stderr, ", %zu not submitted", notrun);
	fputc('\n', stderr);
}

static int
batch_run(struct batch *b)
{
	json_t *ev;
	int code, res;

	if ((code = session_open(&b->s, b->opt)) != 0)
		return code;
	b->s.next_id = (int64_t)b->n + 1;      /* 1..n are the submits */
	/* submits that wait for room are not answered at once: the probe shows the daemon alive */
	if (taskopt_waits_for_room(b->to) && session_probe(&b->s, "submit") == -1)
		return EX_UNAVAILABLE;
	b->start_us = tpctl_now_us();
	progress_current = b->progress;
	progress_draw(b->progress);
	for (;;) {
		if ((code = batch_send_more(b)) != 0)
			break;
		if (b->finished == b->n || (b->stopping && b->inflight == 0))
			break;
		res = session_next(&b->s, &ev, b->progress != NULL ? BATCH_TICK_MS : -1);
		if (res == LINK_TIMEOUT) {
			progress_draw(b->progress);
			continue;
		}
		if (res == LINK_INTERRUPTED) {
			if ((code = batch_interrupted(b)) != 0)
				break;
			continue;
		}
		if (res != LINK_EVENT) {
			code = session_exit_code(res);
			break;
		}
		code = batch_event(b, ev);
		json_decref(ev);
		if (code != 0)
			break;
		if ((b->stdout_gone || b->s.stdout_gone) && !b->stopping) {
			b->stdout_gone = true;
			(void)batch_stop(b, &code);
			if (code != 0)
				break;
		}
	}
	session_close(&b->s);
	batch_summary(b);
	if (code != 0)
		return code;
	if (b->interrupted)
		return EXIT_SIGNALLED + interrupt_last_signal();
	if (b->stdout_gone)
		return EXIT_BROKEN_PIPE;
	if (b->denied)
		return EX_NOPERM;
	if (b->failed > 0 || b->cancelled > 0)
		return EXIT_TASK_FAILED;
	if (b->rejected > 0 || b->finished < b->n)
		return EX_TEMPFAIL;
	return 0;
}

static int
batch_exec(struct tpctl *opt, int argc, char **argv)
{
	static const struct option longopts[] = {
		CMD_LONGOPTS_COMMON, TASKOPT_LONGOPTS,
		{ "jobs", required_argument, NULL, 'j' },
		{ "quiet", no_argument, NULL, 'q' },
		{ "no-progress", no_argument, NULL, 'P' },
		{ NULL, 0, NULL, 0 }
	};
	struct taskopt to;
	struct batch b;
	long long jobs = BATCH_DEFAULT_JOBS;
	bool show_progress = true;
	const char *path;
	FILE *f;
	int ch, bad, code;

	memset(&b, 0, sizeof b);
	taskopt_init(&to);
	while ((ch = cmd_getopt(&cmd_batch, opt, argc, argv,
	    ":h" TASKOPT_SHORTOPTS "j:q", longopts)) != -1) {
		if (ch == 'j') {
			if (format_parse_int(optarg, 1, BATCH_MAX_JOBS, &jobs) == -1) {
				taskopt_free(&to);
				return cmd_usage_error(&cmd_batch, "-j: '%s' is not a "
				    "number from 1 to %d", optarg, BATCH_MAX_JOBS);
			}
		} else if (ch == 'q')
			b.quiet = true;
		else if (ch == 'P')
			show_progress = false;
		else if (ch == 'h' || ch == '?' ||
		    taskopt_option(&to, &cmd_batch, ch, optarg) != 1) {
			taskopt_free(&to);
			return ch == 'h' ? 0 : EX_USAGE;
		}
	}
	if (argc - optind != 1) {
		taskopt_free(&to);
		return cmd_usage_error(&cmd_batch, "one FILE (or - for stdin) is needed");
	}
	path = argv[optind];
	if (strcmp(path, "-") == 0) {
		f = stdin;
		b.name = "stdin";
	} else if ((f = fopen(path, "re")) == NULL) {
		tpctl_warnx("cannot open %s: %s", path, strerror(errno));
		taskopt_free(&to);
		return EX_NOINPUT;
	} else
		b.name = path;
	bad = batch_read(f, b.name, &to, &b.items, &b.n);
	if (f != stdin)
		fclose(f);
	if (bad > 0) {
		tpctl_warnx("%s: %d bad line%s: nothing submitted", b.name, bad,
		    bad == 1 ? "" : "s");
		batch_items_free(b.items, b.n);
		taskopt_free(&to);
		return EX_DATAERR;
	}
	if (b.n == 0) {
		tpctl_warnx("%s: no tasks", b.name);
		taskopt_free(&to);
		return 0;
	}
	/* each line runs where tpctl is, as with run (over the Unix socket) */
	for (size_t i = 0; i < b.n; i++)
		if ((code = taskopt_cwd(&to, &cmd_batch, opt, b.items[i].task)) != 0) {
			batch_items_free(b.items, b.n);
			taskopt_free(&to);
			return code;
		}
	if (interrupt_install() == -1 || (b.retry = calloc(b.n, sizeof *b.retry)) == NULL) {
		tpctl_warnx("cannot set up: %s", strerror(errno));
		batch_items_free(b.items, b.n);
		taskopt_free(&to);
		return EX_OSERR;
	}
	b.opt = opt;
	b.to = &to;
	b.jobs = b.window = (size_t)jobs;
	b.progress = show_progress ? progress_new(b.n) : NULL;
	code = batch_run(&b);
	progress_free(b.progress);      /* when batch_run could not connect */
	batch_items_free(b.items, b.n);
	free(b.retry);
	taskopt_free(&to);
	return code;
}

const struct cmd cmd_batch = {
	.name = "batch",
	.args = "[OPTIONS] FILE|-",
	.summary = "run every line of a file as a task, many at a time",
	.help =
	    "Each line of FILE (- reads stdin) is a task: a command, split into words\n"
	    "like a simple shell line ('single', \"double\" quotes and backslashes;\n"
	    "no $VAR, globs, pipes or redirections: use sh -c '...'), or, when it\n"
	    "starts with {, a task object such as {\"kind\":\"sleep\",\"ms\":100}.\n"
	    "Blank lines and lines starting with # are skipped. The tasks go out on\n"
	    "one connection with at most -j in flight. On a terminal a progress line\n"
	    "shows done/total, failures, cancelled tasks, rate and ETA (what fits in\n"
	    "the terminal's width); a summary ends the run.\n"
	    "Exits 0 when all succeeded, 1 when any failed or was cancelled, 75 when\n"
	    "some were rejected, 65 (nothing submitted) when a line is bad. The first\n"
	    "Ctrl-C stops submitting and cancels the tasks in flight; the second\n"
	    "quits. A closed stdout (| head) stops it the same way, quietly (141).\n"
	    "\n"
	    "  -j, --jobs N             at most N tasks in flight (default 16)\n"
	    "  -q, --quiet              do not print the tasks' output\n"
	    "      --no-progress        no progress line, even on a terminal\n"
	    TASKOPT_HELP,
	.exec = batch_exec,
};
