/*
 * cmd-task.c: the commands about tasks by id that the daemon answers at
 * once: status (a table of their states) and cancel. Both send one request
 * per id, pipelined.
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
 * Sends one request per task id (pipelined) and hands each answer to fn.
 * Returns the worst exit code: 77 before 1 before 0.
 */
static int
task_per_id(struct tpctl *opt, const struct cmd *c, const char *op, int n,
    long long *ids, void (*fn)(void *, long long, json_t *), void *arg)
{
	struct task_ids t = {
		.cmd = c, .op = op, .ids = ids, .fn = fn, .arg = arg
	};
	struct session s;
	int code;

	if ((code = session_open(&s, opt)) != 0)
		return code;
	code = pipeline_run(&s, (size_t)n, false, task_ids_request,
	    task_ids_answer, &t);
	session_close(&s);
	return code != 0 ? code : t.worst;
}

struct status_rows {
	json_t *events;         /* the status events, in the order asked */
	json_t *keys;           /* extra columns, in the order first seen */
};

static void
status_collect(void *arg, long long task, json_t *ev)
{
	struct status_rows *rows = arg;
	const char *key;
	json_t *v;
	size_t i;

	(void)task;
	json_array_append(rows->events, ev);
	json_object_foreach(ev, key, v) {
		if (strcmp(key, FIELD_EVENT) == 0 || strcmp(key, FIELD_ID) == 0 ||
		    strcmp(key, FIELD_TASK) == 0 || strcmp(key, FIELD_STATE) == 0)
			continue;
		for (i = 0; i < json_array_size(rows->keys); i++)
			if (strcmp(json_string_value(json_array_get(rows->keys, i)),
			    key) == 0)
				break;
		if (i == json_array_size(rows->keys))
			json_array_append_new(rows->keys, json_string(key));
	}
}

static void
status_print(struct status_rows *rows)
{
	size_t ncols = 2 + json_array_size(rows->keys), i, r;
	const char **cells = calloc(ncols, sizeof *cells);
	char *align = calloc(ncols + 1, 1), **owned = calloc(ncols, sizeof *owned);
	struct table *t;
	json_t *ev;

	if (cells == NULL || align == NULL || owned == NULL)
		goto out;
	memset(align, 'l', ncols);
	cells[0] = "TASK";
	cells[1] = "STATE";
	for (i = 2; i < ncols; i++) {
		const char *key = json_string_value(json_array_get(rows->keys, i - 2));
		size_t klen = strlen(key);
		char *h, *p;
		/* "run_ms" is shown as a duration under RUN */
		if (klen > 3 && strcmp(key + klen - 3, "_ms") == 0)
			klen -= 3;
		h = strndup(key, klen);
		for (p = h; p != NULL && *p != '\0'; p++)
			*p = *p >= 'a' && *p <= 'z' ? (char)(*p - 'a' + 'A') : *p;
		owned[i] = h;
		cells[i] = h;
	}
	if ((t = table_new(align, cells)) == NULL)
		goto out;
	for (i = 2; i < ncols; i++)
		free(owned[i]);
	json_array_foreach(rows->events, r, ev) {
		owned[0] = format_cell(FIELD_TASK, json_object_get(ev, FIELD_TASK));
		owned[1] = strdup(event_str(ev, FIELD_STATE, "?"));
		for (i = 2; i < ncols; i++) {
			const char *key = json_string_value(json_array_get(rows->keys, i - 2));
			json_t *v = json_object_get(ev, key);
			owned[i] = v != NULL ? format_cell(key, v) : strdup("");
		}
		table_add(t, (const char *const *)owned);
		for (i = 0; i < ncols; i++)
			free(owned[i]);
	}
	table_print(t, stdout);
	table_free(t);
	memset(owned, 0, ncols * sizeof *owned);
out:
	free(cells);
	free(align);
	free(owned);
}

static int
status_exec(struct tpctl *opt, int argc, char **argv)
{
	struct status_rows rows;
	long long *ids;
	int code;

	if ((code = cmd_noopts(&cmd_status, opt, argc, argv)) != -1)
		return code;
	if ((code = cmd_parse_task_ids(&cmd_status, argc - optind, argv + optind,
	    &ids)) != 0)
		return code;
	rows.events = json_array();
	rows.keys = json_array();
	code = task_per_id(opt, &cmd_status, OP_STATUS, argc - optind, ids,
	    status_collect, &rows);
	if (!opt->json && json_array_size(rows.events) > 0)
		status_print(&rows);
	json_decref(rows.events);
	json_decref(rows.keys);
	free(ids);
	return code;
}

static int
cancel_exec(struct tpctl *opt, int argc, char **argv)
{
	long long *ids;
	int code;

	if ((code = cmd_noopts(&cmd_cancel, opt, argc, argv)) != -1)
		return code;
	if ((code = cmd_parse_task_ids(&cmd_cancel, argc - optind, argv + optind,
	    &ids)) != 0)
		return code;
	code = task_per_id(opt, &cmd_cancel, OP_CANCEL, argc - optind, ids,
	    NULL, NULL);
	free(ids);
	return code;
}

const struct cmd cmd_status = {
	.name = "status",
	.args = "ID...",
	.summary = "show tasks' states as a table",
	.help = "Asks the daemon for each task's state; prints a table.\n\n",
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
