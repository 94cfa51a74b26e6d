/*
 * cmd-list.c: tpctl list: the daemon's tasks as a table, newest first (id,
 * label, pool, state, how long each waited and ran, owner), filtered by
 * state, pool, label or owner. On the Unix socket it asks for the tasks of
 * tpctl's own uid unless --all is given (an admin's list is every task);
 * over TCP the daemon knows the token's name, tpctl does not, so it asks
 * for every task the connection may see: an admin token's, every task.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tpctl.h"
#include "wire.h"

#define LIST_OPT_STATE  1200
#define LIST_OPT_ALL    1201
#define LIST_OPT_LABEL  1202
#define LIST_OPT_OWNER  1203
#define LIST_OPT_LIMIT  1204
#define LIST_OPT_BEFORE 1205

static const char *const list_states[] = { STATE_SCHEDULED, STATE_WAITING, STATE_QUEUED,
    STATE_RUNNING, STATE_SUCCEEDED, STATE_FAILED, STATE_TIMED_OUT, STATE_CANCELLED,
    STATE_EXPIRED, STATE_LOST, STATE_SKIPPED, NULL };

/* Adds each state of a comma-separated list to states; -1 (printed) on a bad one. */
static int
list_add_states(json_t *states, const char *arg)
{
	char *copy = strdup(arg), *p, *next;
	size_t i;

	if (copy == NULL)
		return -1;
	for (p = copy; p != NULL; p = next) {
		if ((next = strchr(p, ',')) != NULL)
			*next++ = '\0';
		for (i = 0; list_states[i] != NULL; i++)
			if (strcmp(list_states[i], p) == 0)
				break;
		if (list_states[i] == NULL) {
			cmd_usage_error(&cmd_list, "--state: no state \"%s\" (states: scheduled, "
			    "waiting, queued, running, succeeded, failed, timed_out, cancelled, "
			    "expired, lost, skipped)", p);
			free(copy);
			return -1;
		}
		json_array_append_new(states, json_string(p));
	}
	free(copy);
	return 0;
}

/* A task's time so far or in all, for people: "-" for a queued task's run. */
static char *
list_time(const json_t *task, const char *key, bool shown)
{
	char buf[FORMAT_DURATION_LEN];

	if (!shown)
		return strdup("-");
	return strdup(format_duration(event_num(task, key, 0), buf, sizeof buf));
}

static void
list_print(const json_t *ev)
{
	/* the same columns as status's (cmd-task.c) */
	static const char *const headers[] = { "TASK", "LABEL", "POOL", "STATE", "QUEUED",
	    "RUN", "OWNER", "PRI", "COMMAND" };
	json_t *tasks = json_object_get(ev, FIELD_TASKS), *t;
	struct table *table;
	char *cells[9];
	size_t i, j;

	if (json_array_size(tasks) == 0) {
		/* the daemon visits so many tasks per request: older ones may match */
		if (json_is_true(json_object_get(ev, FIELD_MORE)))
			printf("no tasks among the newest; (more: tpctl list --before %lld)\n",
			    (long long)event_int(ev, FIELD_BEFORE, 0));
		else
			printf("no tasks\n");
		return;
	}
	if ((table = table_new("rlllrrlrl", headers)) == NULL)
		return;
	json_array_foreach(tasks, i, t) {
		const char *state = event_str(t, FIELD_STATE, "?");
		cells[0] = format_cell(FIELD_TASK, json_object_get(t, FIELD_TASK));
		cells[1] = strdup(*event_str(t, FIELD_LABEL, "") != '\0' ?
		    event_str(t, FIELD_LABEL, "") : "-");
		cells[2] = strdup(event_str(t, FIELD_POOL, "?"));
		/* a later attempt (a retry, a rerun after a restart): running#2 */
		if (event_int(t, FIELD_ATTEMPT, 0) > 1) {
			if (asprintf(&cells[3], "%s#%lld", state,
			    (long long)event_int(t, FIELD_ATTEMPT, 0)) == -1)
				cells[3] = NULL;
		} else
			cells[3] = strdup(state);
		cells[4] = list_time(t, FIELD_QUEUED_MS, true);
		/* a queued task has not run; an expired or skipped one never will */
		cells[5] = list_time(t, FIELD_RUN_MS, strcmp(state, STATE_QUEUED) != 0 &&
		    strcmp(state, STATE_EXPIRED) != 0 && strcmp(state, STATE_SKIPPED) != 0 &&
		    strcmp(state, STATE_SCHEDULED) != 0 && strcmp(state, STATE_WAITING) != 0);
		cells[6] = strdup(event_str(t, FIELD_OWNER, "-"));
		if (asprintf(&cells[7], "%lld", (long long)event_int(t, FIELD_PRIORITY, 0)) == -1)
			cells[7] = NULL;
		cells[8] = format_command(event_str(t, FIELD_COMMAND, event_str(t, FIELD_KIND,
		    "-")));
		table_add(table, (const char *const *)cells);
		for (j = 0; j < 9; j++)
			free(cells[j]);
	}
	table_print(table, stdout);
	table_free(table);
	if (json_is_true(json_object_get(ev, FIELD_MORE)))
		printf("(more: tpctl list --before %lld)\n", (long long)event_int(ev,
		    FIELD_BEFORE, event_int(json_array_get(tasks, json_array_size(tasks) - 1),
		    FIELD_TASK, 0)));
}

static int
list_exec(struct tpctl *opt, int argc, char **argv)
{
	static const struct option longopts[] = {
		CMD_LONGOPTS_COMMON,
		{ "state", required_argument, NULL, LIST_OPT_STATE },
		{ "pool", required_argument, NULL, 'p' },
		{ "label", required_argument, NULL, LIST_OPT_LABEL },
		{ "owner", required_argument, NULL, LIST_OPT_OWNER },
		{ "all", no_argument, NULL, LIST_OPT_ALL },
		{ "limit", required_argument, NULL, LIST_OPT_LIMIT },
		{ "before", required_argument, NULL, LIST_OPT_BEFORE },
		{ NULL, 0, NULL, 0 }
	};
	json_t *req = json_pack("{s:s}", FIELD_OP, OP_LIST), *states = json_array(), *reply;
	const char *owner = NULL;
	char own[64];
	long long n;
	bool all = false;
	int ch, code = EX_USAGE;

	while ((ch = cmd_getopt(&cmd_list, opt, argc, argv, "+:hp:", longopts)) != -1) {
		switch (ch) {
		case 'h':
			code = 0;
			goto out;
		case LIST_OPT_STATE:
			if (list_add_states(states, optarg) == -1)
				goto out;
			break;
		case 'p':
			json_object_set_new(req, FIELD_POOL, json_string(optarg));
			break;
		case LIST_OPT_LABEL:
			if (json_object_set_new(req, FIELD_LABEL, json_string(optarg)) == -1) {
				cmd_usage_error(&cmd_list, "--label: not UTF-8");
				goto out;
			}
			break;
		case LIST_OPT_OWNER:
			owner = optarg;
			break;
		case LIST_OPT_ALL:
			all = true;
			break;
		case LIST_OPT_LIMIT:
			if (format_parse_int(optarg, 1, WIRE_LIST_MAX, &n) == -1) {
				cmd_usage_error(&cmd_list, "--limit: a whole number from 1 to %d, "
				    "not \"%s\"", WIRE_LIST_MAX, optarg);
				goto out;
			}
			json_object_set_new(req, FIELD_LIMIT, json_integer(n));
			break;
		case LIST_OPT_BEFORE:
			if (format_parse_int(optarg, 1, INT64_MAX, &n) == -1) {
				cmd_usage_error(&cmd_list, "--before: a task id, not \"%s\"", optarg);
				goto out;
			}
			json_object_set_new(req, FIELD_BEFORE, json_integer(n));
			break;
		default:
			goto out;
		}
	}
	if (argc > optind) {
		cmd_usage_error(&cmd_list, "no arguments expected");
		goto out;
	}
	if ((code = tpctl_resolve(opt)) != 0)
		goto out;
	if (owner == NULL && !all && opt->host == NULL) {
		snprintf(own, sizeof own, "uid:%u", (unsigned)geteuid());  /* as SO_PEERCRED sees it */
		owner = own;
	}
	if (owner != NULL && json_object_set_new(req, FIELD_OWNER, json_string(owner)) == -1) {
		code = cmd_usage_error(&cmd_list, "--owner: not UTF-8");
		goto out;
	}
	if (json_array_size(states) > 0)
		json_object_set(req, FIELD_STATE, states);
	code = session_once(opt, "list", req, &reply);
	req = NULL;
	if (code != 0)
		goto out;
	if (!opt->json)
		list_print(reply);
	json_decref(reply);
out:
	json_decref(req);
	json_decref(states);
	return code;
}

const struct cmd cmd_list = {
	.name = "list",
	.args = "[--state S[,S...]] [-p POOL] [--label L] [--owner O | --all] [--limit N]\n"
	    "            [--before ID]",
	.summary = "list tasks, newest first",
	.help =
	    "Prints one row per task, newest first: its id, label, pool, state, how\n"
	    "long it waited in the queue and ran (so far, for an unfinished one),\n"
	    "and its owner (uid:N, token:NAME, tcp:anonymous). The daemon shows a\n"
	    "client its own tasks, and an admin every task.\n\n"
	    "      --state S[,S...]     only tasks in these states (queued, running,\n"
	    "                           succeeded, failed, timed_out, cancelled,\n"
	    "                           expired, lost); repeatable\n"
	    "  -p, --pool P             only tasks of pool P\n"
	    "      --label L            only tasks labelled exactly L\n"
	    "      --owner O            only tasks of owner O (an admin's question)\n"
	    "      --all                every task the daemon shows this client (on the\n"
	    "                           Unix socket, without it: this user's own)\n"
	    "      --limit N            at most N tasks (default 100, at most 1000)\n"
	    "      --before ID          the page after task ID (older ones)\n",
	.exec = list_exec,
};
