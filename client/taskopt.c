/*
 * taskopt.c: the task options run, submit and batch share (--pool,
 * --timeout, --queue-timeout, --env, --cwd, --output-limit, --stdin,
 * --task), and the submit request built from them.
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base64.h"
#include "tpctl.h"
#include "units.h"
#include "wire.h"

/* The most of tpctl's stdin that --stdin sends. */
#define TASKOPT_MAX_STDIN ((size_t)64 << 20)

void
taskopt_init(struct taskopt *to)
{
	memset(to, 0, sizeof *to);
}

void
taskopt_free(struct taskopt *to)
{
	json_decref(to->env);
	json_decref(to->task);
	taskopt_init(to);
}

static int
taskopt_env(struct taskopt *to, const struct cmd *c, const char *arg)
{
	const char *eq = strchr(arg, '='), *value;
	char *name;
	json_t *v;

	if (eq == arg || *arg == '\0') {
		cmd_usage_error(c, "--env: '%s' should be NAME=VALUE (or NAME, to "
		    "pass on tpctl's own value)", arg);
		return -1;
	}
	if (eq == NULL) {
		if ((value = getenv(arg)) == NULL) {
			cmd_usage_error(c, "--env %s: %s is not set here (give "
			    "NAME=VALUE)", arg, arg);
			return -1;
		}
		name = strdup(arg);
	} else {
		value = eq + 1;
		name = strndup(arg, (size_t)(eq - arg));
	}
	if (name == NULL)
		return -1;
	if (to->env == NULL)
		to->env = json_object();
	if ((v = json_string(value)) == NULL) {
		cmd_usage_error(c, "--env %s: the value is not UTF-8 text", name);
		free(name);
		return -1;
	}
	json_object_set_new(to->env, name, v);
	free(name);
	return 0;
}

int
taskopt_option(struct taskopt *to, const struct cmd *c, int ch, const char *arg)
{
	json_error_t jerr;
	char *cause;

	switch (ch) {
	case 'p':
		to->pool = arg;
		return 1;
	case 't':
		if (cmd_duration_arg(c, "--timeout", arg, &to->timeout_ms) == -1)
			return -1;
		to->timeout_set = to->timeout_ms != 0;  /* 0: none, no timeout_ms */
		return 1;
	case OPT_QUEUE_TIMEOUT:
		if (cmd_duration_arg(c, "--queue-timeout", arg,
		    &to->queue_timeout_ms) == -1)
			return -1;
		to->queue_timeout_set = to->queue_timeout_ms != 0;
		return 1;
	case 'e':
		return taskopt_env(to, c, arg) == -1 ? -1 : 1;
	case 'C':
		to->cwd = arg;
		return 1;
	case OPT_OUTPUT_LIMIT:
		if (units_parse_size(arg, &to->output_limit, &cause) != 0) {
			cmd_usage_error(c, "--output-limit: %s", cause != NULL ? cause : arg);
			free(cause);
			return -1;
		}
		to->output_limit_set = true;
		return 1;
	case 'i':
		to->read_stdin = true;
		return 1;
	case OPT_TASK:
		json_decref(to->task);
		to->task = json_loads(arg, JSON_REJECT_DUPLICATES, &jerr);
		if (to->task == NULL) {
			cmd_usage_error(c, "--task: not JSON: %s", jerr.text);
			return -1;
		}
		if (!json_is_object(to->task) ||
		    !json_is_string(json_object_get(to->task, FIELD_KIND))) {
			cmd_usage_error(c, "--task: a task object with a \"kind\" is "
			    "needed, e.g. '{\"kind\":\"sleep\",\"ms\":1000}'");
			return -1;
		}
		return 1;
	default:
		return 0;
	}
}

void
taskopt_apply(const struct taskopt *to, json_t *task)
{
	const char *key;
	json_t *env, *v;

	if (to->timeout_set && json_object_get(task, FIELD_TIMEOUT_MS) == NULL)
		json_object_set_new(task, FIELD_TIMEOUT_MS,
		    json_integer((json_int_t)to->timeout_ms));
	if (strcmp(event_str(task, FIELD_KIND, ""), KIND_EXEC) != 0)
		return;
	if (to->env != NULL) {
		if (!json_is_object(env = json_object_get(task, FIELD_ENV))) {
			env = json_object();
			json_object_set_new(task, FIELD_ENV, env);
		}
		json_object_foreach(to->env, key, v)   /* the task's own win */
			if (json_object_get(env, key) == NULL)
				json_object_set(env, key, v);
	}
	if (to->cwd != NULL && json_object_get(task, FIELD_CWD) == NULL)
		json_object_set_new(task, FIELD_CWD, json_string(to->cwd));
	if (to->output_limit_set && json_object_get(task, FIELD_OUTPUT_LIMIT) == NULL)
		json_object_set_new(task, FIELD_OUTPUT_LIMIT,
		    json_integer((json_int_t)to->output_limit));
}

/*
 * Reads all of tpctl's stdin as the task's stdin: text as stdin, anything
 * else (not UTF-8, or with a NUL, which the protocol's strings cannot
 * hold) as stdin_base64.
 */
static int
taskopt_read_stdin(const struct cmd *c, json_t *task)
{
	size_t len = 0, cap = 65536;
	char *buf = malloc(cap), *nbuf, *b64;
	ssize_t n;
	json_t *v;

	if (buf == NULL)
		return EX_OSERR;
	for (;;) {
		if (len == cap) {
			if (cap >= TASKOPT_MAX_STDIN) {
				free(buf);
				tpctl_warnx("%s --stdin: more than %zu MiB on stdin",
				    c->name, TASKOPT_MAX_STDIN >> 20);
				return EX_DATAERR;
			}
			if ((nbuf = realloc(buf, cap * 2)) == NULL) {
				free(buf);
				return EX_OSERR;
			}
			buf = nbuf;
			cap *= 2;
		}
		n = read(STDIN_FILENO, buf + len, cap - len);
		if (n == -1 && errno == EINTR)
			continue;
		if (n == -1) {
			tpctl_warnx("%s --stdin: cannot read stdin: %s", c->name,
			    strerror(errno));
			free(buf);
			return EX_IOERR;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	if (memchr(buf, '\0', len) == NULL && (v = json_stringn(buf, len)) != NULL) {
		free(buf);
		json_object_del(task, FIELD_STDIN_BASE64);
		json_object_set_new(task, FIELD_STDIN, v);
		return 0;
	}
	b64 = base64_encode(buf, len);
	free(buf);
	if (b64 == NULL || (v = json_string(b64)) == NULL) {
		free(b64);
		return EX_OSERR;
	}
	free(b64);
	json_object_del(task, FIELD_STDIN);
	json_object_set_new(task, FIELD_STDIN_BASE64, v);
	return 0;
}

json_t *
taskopt_exec_task(char **argv, int argc, char **bad)
{
	json_t *task, *args, *v;
	int i;

	task = json_object();
	args = json_array();
	json_object_set_new(task, FIELD_KIND, json_string(KIND_EXEC));
	json_object_set_new(task, FIELD_ARGV, args);
	for (i = 0; i < argc; i++) {
		if ((v = json_string(argv[i])) == NULL) {
			*bad = argv[i];
			json_decref(task);
			return NULL;
		}
		json_array_append_new(args, v);
	}
	return task;
}

int
taskopt_build(struct taskopt *to, const struct cmd *c, int argc, char **argv,
    json_t **taskp)
{
	json_t *task;
	char *bad;
	int r;

	*taskp = NULL;
	if (to->task != NULL) {
		if (argc > 0)
			return cmd_usage_error(c, "give --task or a command, not both");
		task = json_incref(to->task);
	} else {
		if (argc == 0)
			return cmd_usage_error(c, "a command to run is needed");
		if ((task = taskopt_exec_task(argv, argc, &bad)) == NULL)
			return cmd_usage_error(c, "the argument '%s' is not UTF-8 "
			    "text (the wire carries text)", bad);
	}
	taskopt_apply(to, task);
	if (to->read_stdin && (r = taskopt_read_stdin(c, task)) != 0) {
		json_decref(task);
		return r;
	}
	*taskp = task;
	return 0;
}

json_t *
taskopt_submit(const struct taskopt *to, json_t *task)
{
	json_t *req = json_object();

	json_object_set_new(req, FIELD_OP, json_string(OP_SUBMIT));
	json_object_set_new(req, FIELD_TASK, task);
	if (to->pool != NULL)
		json_object_set_new(req, FIELD_POOL, json_string(to->pool));
	if (to->queue_timeout_set)
		json_object_set_new(req, FIELD_QUEUE_TIMEOUT_MS,
		    json_integer((json_int_t)to->queue_timeout_ms));
	return req;
}
