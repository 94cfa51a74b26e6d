/*
 * cmd-task.c: the commands about tasks by id that the daemon answers at
 * once: status (a table of their states) and cancel. Both send one request
 * per id, pipelined. status then asks for the done of each finished task
 * (a wait, answered at once) for what it used: the status event does not
 * carry it.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "tpctl.h"
#include "wire.h"

struct task_ids {
	const struct cmd *cmd;
	const char *op;
	long long *ids;
	void (*fn)(void *, long long, json_t *);
	void *arg;
	int worst;              /* 77 before 1 before 0 */
};

static json_t *
task_ids_request(void *arg, size_t i)
{
	struct task_ids *t = arg;

	return json_pack("{s:s, s:I}", FIELD_OP, t->op, FIELD_TASK,
	    (json_int_t)t->ids[i]);
}

static int
task_ids_answer(void *arg, size_t i, json_t *ev)
{
	struct task_ids *t = arg;
	char what[64];
	int code;

	if (strcmp(event_name(ev), EV_ERROR) == 0) {
		/* no token: the same for every id, said once */
		if (strcmp(event_error_code(ev), ERR_UNAUTHENTICATED) == 0)
			return event_report_error(t->cmd->name, ev);
		snprintf(what, sizeof what, "%s %lld", t->cmd->name, t->ids[i]);
		code = event_report_error(what, ev);
		if (code == EX_NOPERM || t->worst == 0)
			t->worst = code;
	} else if (t->fn != NULL)
		t->fn(t->arg, t->ids[i], ev);
	return PIPELINE_SETTLED;
}

/*
 * Sends one request per task id (pipelined) on s and hands each answer to
 * fn. Returns the worst exit code: 77 before 1 before 0.
 */
static int
task_per_id(struct session *s, const struct cmd *c, const char *op, int n,
    long long *ids, void (*fn)(void *, long long, json_t *), void *arg)
{
	struct task_ids t = {
		.cmd = c, .op = op, .ids = ids, .fn = fn, .arg = arg
	};
	int code;

	code = pipeline_run(s, (size_t)n, false, task_ids_request,
	    task_ids_answer, &t);
	return code != 0 ? code : t.worst;
}

struct status_rows {
	json_t *events;         /* the status events, in the order asked */
	json_t *usage;          /* each row's usage, or null */
	size_t *fetch;          /* the rows whose usage is asked for */
};

static void
status_collect(void *arg, long long task, json_t *ev)
{
	struct status_rows *rows = arg;
	json_t *v;

	(void)task;
	json_array_append(rows->events, ev);
	v = json_object_get(ev, FIELD_USAGE);
	json_array_append(rows->usage, json_is_object(v) ? v : json_null());
}

/* A state whose task has ended, so that a wait is answered at once, and may have run. */
static bool
status_ran(const char *state)
{
	return strcmp(state, STATE_SUCCEEDED) == 0 || strcmp(state, STATE_FAILED) == 0 ||
	    strcmp(state, STATE_TIMED_OUT) == 0 || strcmp(state, STATE_CANCELLED) == 0 ||
	    strcmp(state, STATE_LOST) == 0;
}

static json_t *
status_usage_request(void *arg, size_t i)
{
	struct status_rows *rows = arg;
	json_t *ev = json_array_get(rows->events, rows->fetch[i]);

	return json_pack("{s:s, s:O}", FIELD_OP, OP_WAIT, FIELD_TASK,
	    json_object_get(ev, FIELD_TASK));
}

/* A finished task's done: its usage, if it has one. An error leaves the row without. */
static int
status_usage_answer(void *arg, size_t i, json_t *ev)
{
	struct status_rows *rows = arg;
	json_t *usage;

	if (strcmp(event_name(ev), EV_DONE) == 0 && (usage = event_usage(ev)) != NULL)
		json_array_set(rows->usage, rows->fetch[i], usage);
	return PIPELINE_SETTLED;
}

/*
 * Asks for the done of every finished task without a usage, for its
 * usage. Returns 0 or an exit code (printed).
 */
static int
status_fetch_usage(struct session *s, struct status_rows *rows)
{
	size_t i, n = 0;
	json_t *ev;
	int code;

	if ((rows->fetch = calloc(json_array_size(rows->events) + 1,
	    sizeof *rows->fetch)) == NULL)
		return EX_OSERR;
	json_array_foreach(rows->events, i, ev)
		if (json_is_null(json_array_get(rows->usage, i)) &&
		    json_is_integer(json_object_get(ev, FIELD_TASK)) &&
		    status_ran(event_str(ev, FIELD_STATE, "")))
			rows->fetch[n++] = i;
	code = pipeline_run(s, n, false, status_usage_request, status_usage_answer, rows);
	free(rows->fetch);
	rows->fetch = NULL;
	return code;
}

/*
 * The same columns and conventions as list's (cmd-list.c): TASK (right),
 * LABEL, POOL, STATE, QUEUED, RUN (times so far for an unfinished task, "-"
 * for what is not there), OWNER, PRI, and what it used last, the widest.
 */
static void
status_print(struct status_rows *rows)
{
	static const char *const headers[] = { "TASK", "LABEL", "POOL", "STATE", "QUEUED",
	    "RUN", "OWNER", "PRI", "COMMAND", "USAGE" };
	static const char *const keys[] = { FIELD_TASK, FIELD_LABEL, FIELD_POOL, FIELD_STATE,
	    FIELD_QUEUED_MS, FIELD_RUN_MS, FIELD_OWNER };
	char used[FORMAT_USAGE_LEN], *cells[10];
	bool have_usage = false;
	struct table *t;
	json_t *ev, *usage;
	size_t i, r, ncols;

	json_array_foreach(rows->usage, r, usage)
		have_usage = have_usage || !json_is_null(usage);
	ncols = have_usage ? 10 : 9;
	if ((t = table_new(have_usage ? "rlllrrlrll" : "rlllrrlrl", headers)) == NULL)
		return;
	json_array_foreach(rows->events, r, ev) {
		const char *state = event_str(ev, FIELD_STATE, "");

		for (i = 0; i < 7; i++) {
			json_t *v = json_object_get(ev, keys[i]);
			/* a task that has not run, or never will: "-", as list says */
			if (i == 5 && (strcmp(state, STATE_QUEUED) == 0 ||
			    strcmp(state, STATE_SCHEDULED) == 0 || strcmp(state, STATE_WAITING) == 0 ||
			    strcmp(state, STATE_EXPIRED) == 0 || strcmp(state, STATE_SKIPPED) == 0))
				v = NULL;
			cells[i] = v != NULL && !(json_is_string(v) && *json_string_value(v) ==
			    '\0') ? format_cell(keys[i], v) : strdup("-");
		}
		/* a later attempt (a retry, a rerun after a restart): running#2, as list shows it */
		if (event_int(ev, FIELD_ATTEMPT, 0) > 1) {
			free(cells[3]);
			if (asprintf(&cells[3], "%s#%lld", state,
			    (long long)event_int(ev, FIELD_ATTEMPT, 0)) == -1)
				cells[3] = NULL;
		}
		if (asprintf(&cells[7], "%lld", (long long)event_int(ev, FIELD_PRIORITY, 0)) == -1)
			cells[7] = NULL;
		cells[8] = format_command(event_str(ev, FIELD_COMMAND, event_str(ev, FIELD_KIND,
		    NULL)));
		if (have_usage)
			cells[9] = strdup(format_usage(json_array_get(rows->usage, r),
			    used, sizeof used) != NULL ? used : "");
		table_add(t, (const char *const *)cells);
		for (i = 0; i < ncols; i++)
			free(cells[i]);
	}
	table_print(t, stdout);
	table_free(t);
}

static int
status_exec(struct tpctl *opt, int argc, char **argv)
{
	struct status_rows rows = { NULL, NULL, NULL };
	struct session s;
	long long *ids;
	int code, fetched;

	if ((code = cmd_noopts(&cmd_status, opt, argc, argv)) != -1)
		return code;
	if ((code = cmd_parse_task_ids(&cmd_status, argc - optind, argv + optind,
	    &ids)) != 0)
		return code;
	if ((code = session_open(&s, opt)) != 0) {
		free(ids);
		return code;
	}
	rows.events = json_array();
	rows.usage = json_array();
	code = task_per_id(&s, &cmd_status, OP_STATUS, argc - optind, ids,
	    status_collect, &rows);
	/* what the states were is worth printing even if the usage cannot follow */
	if (code == 0 || code == EXIT_TASK_FAILED || code == EX_NOPERM) {
		if ((fetched = status_fetch_usage(&s, &rows)) != 0)
			code = fetched;
	}
	session_close(&s);
	if (!opt->json && json_array_size(rows.events) > 0)
		status_print(&rows);
	json_decref(rows.events);
	json_decref(rows.usage);
	free(ids);
	return code;
}

static int
cancel_exec(struct tpctl *opt, int argc, char **argv)
{
	struct session s;
	long long *ids;
	int code;

	if ((code = cmd_noopts(&cmd_cancel, opt, argc, argv)) != -1)
		return code;
	if ((code = cmd_parse_task_ids(&cmd_cancel, argc - optind, argv + optind,
	    &ids)) != 0)
		return code;
	if ((code = session_open(&s, opt)) == 0) {
		code = task_per_id(&s, &cmd_cancel, OP_CANCEL, argc - optind, ids,
		    NULL, NULL);
		session_close(&s);
	}
	free(ids);
	return code;
}

const struct cmd cmd_status = {
	.name = "status",
	.args = "ID...",
	.summary = "show tasks' states as a table",
	.help =
	    "Asks the daemon for each task's state; prints a table. For a finished\n"
	    "exec task the table shows what it used (cpu 0.25s user, 0.01s system,\n"
	    "peak 12.3 MiB), from its done, asked for with a wait (with --json,\n"
	    "that done is printed after the status events).\n\n",
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
