/*
 * taskopt.c: the task options run, submit and batch share (--pool,
 * --timeout, --queue-timeout, --env, --cwd, --output-limit, the limits
 * --memory, --cpus, --pids, --open-files, --cpu-seconds, --file-size,
 * --stdin, --task), and the submit request built from them.
 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base64.h"
#include "tpctl.h"
#include "units.h"
#include "wire.h"

/* The most of tpctl's stdin that --stdin sends. */
#define TASKOPT_MAX_STDIN ((size_t)64 << 20)

/*
 * The limit options, in the order of OPT_MEMORY... and limit_arg, with the
 * least value the daemon takes (doc/exec.md): a value below it is a usage
 * error here rather than a bad_request there.
 */
enum taskopt_limit_type { TL_SIZE, TL_COUNT, TL_CORES, TL_SECONDS };
static const struct taskopt_limit {
	const char *option;
	const char *field;
	enum taskopt_limit_type type;
	long long least;
} taskopt_limits[] = {
	{ "--memory", LIMIT_MEMORY_BYTES, TL_SIZE, 1 },
	{ "--cpus", LIMIT_CPU_CORES, TL_CORES, 0 },
	{ "--pids", LIMIT_PIDS, TL_COUNT, 1 },
	{ "--open-files", LIMIT_OPEN_FILES, TL_COUNT, 3 },
	{ "--cpu-seconds", LIMIT_CPU_SECONDS, TL_SECONDS, 1 },
	{ "--file-size", LIMIT_FILE_BYTES, TL_SIZE, 0 },
};
_Static_assert(sizeof taskopt_limits / sizeof taskopt_limits[0] == TASKOPT_NLIMITS,
    "a row per limit option");
/* The daemon's range of cpu_cores, in thousandths of a core (its unit). */
#define TASKOPT_MIN_MILLICORES 10
#define TASKOPT_MAX_MILLICORES 1024000

void
taskopt_init(struct taskopt *to)
{
	memset(to, 0, sizeof *to);
	to->retries = -1;
}

void
taskopt_free(struct taskopt *to)
{
	json_decref(to->env);
	json_decref(to->task);
	json_decref(to->limits);
	json_decref(to->after);
	json_decref(to->retry_on);
	taskopt_init(to);
}

/* --after ID[,ID...]: each a task id, added to to->after; -1 (printed) on a bad one. */
static int
taskopt_after(struct taskopt *to, const struct cmd *c, const char *arg)
{
	char *copy = strdup(arg), *p, *next;
	long long id;

	if (copy == NULL)
		return -1;
	if (to->after == NULL)
		to->after = json_array();
	for (p = copy; p != NULL; p = next) {
		if ((next = strchr(p, ',')) != NULL)
			*next++ = '\0';
		if (format_parse_int(p, 1, INT64_MAX, &id) == -1) {
			cmd_usage_error(c, "--after: '%s' is not a task id", p);
			free(copy);
			return -1;
		}
		json_array_append_new(to->after, json_integer((json_int_t)id));
	}
	free(copy);
	if (json_array_size(to->after) > WIRE_MAX_AFTER)
		return cmd_usage_error(c, "--after: more than %d tasks", WIRE_MAX_AFTER), -1;
	return 0;
}

/* --retry-on STATE[,STATE...]: failed, timed_out, lost. */
static int
taskopt_retry_on(struct taskopt *to, const struct cmd *c, const char *arg)
{
	char *copy = strdup(arg), *p, *next;

	if (copy == NULL)
		return -1;
	json_decref(to->retry_on);
	to->retry_on = json_array();
	for (p = copy; p != NULL; p = next) {
		if ((next = strchr(p, ',')) != NULL)
			*next++ = '\0';
		if (strcmp(p, STATE_FAILED) != 0 && strcmp(p, STATE_TIMED_OUT) != 0 &&
		    strcmp(p, STATE_LOST) != 0) {
			cmd_usage_error(c, "--retry-on: '%s' is not failed, timed_out or lost", p);
			free(copy);
			return -1;
		}
		json_array_append_new(to->retry_on, json_string(p));
	}
	free(copy);
	return 0;
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

/*
 * A number of cores: digits with an optional fraction (0.5, 2, 1.25), in
 * thousandths of a core, the daemon's unit: a finer fraction is refused
 * rather than rounded. Returns 0, or -1 with *why set.
 */
static int
taskopt_parse_cores(const char *s, uint64_t *milli, const char **why)
{
	uint64_t v = 0;

	*why = "is not a number of cores from 0.01 to 1024 (0.5 is half a core)";
	if (!isdigit((unsigned char)*s))
		return -1;
	for (; isdigit((unsigned char)*s); s++)  /* whole cores, bounded: no overflow */
		if ((v = v * 10 + (uint64_t)(*s - '0')) > TASKOPT_MAX_MILLICORES / 1000)
			return -1;
	v *= 1000;
	if (*s == '.') {
		if (!isdigit((unsigned char)*++s))
			return -1;
		for (uint64_t unit = 100; isdigit((unsigned char)*s); s++) {
			if (unit == 0 && *s != '0') {
				*why = "is finer than a thousandth of a core";
				return -1;
			}
			v += unit * (uint64_t)(*s - '0');
			unit /= 10;
		}
	}
	if (*s != '\0' || v < TASKOPT_MIN_MILLICORES || v > TASKOPT_MAX_MILLICORES)
		return -1;
	*milli = v;
	return 0;
}

/* --memory and the other limits: task.limits.FIELD, or -1 (printed). */
static int
taskopt_limit(struct taskopt *to, const struct cmd *c, size_t k, const char *arg)
{
	const struct taskopt_limit *l = &taskopt_limits[k];
	const char *why;
	char *cause = NULL;
	long long n;
	uint64_t v;
	json_t *value;
	int r;

	switch (l->type) {
	case TL_SIZE:
		if ((r = units_parse_size(arg, &v, &cause)) != 0 || v > INT64_MAX) {
			if (r == 0)
				cmd_usage_error(c, "%s: %s is too large", l->option, arg);
			else
				cmd_usage_error(c, "%s: %s", l->option, cause != NULL ?
				    cause : arg);
			free(cause);
			return -1;
		}
		if (v < (uint64_t)l->least) {
			cmd_usage_error(c, "%s: '%s': the least is %lld byte%s (leave "
			    "%s out for the pool's default)", l->option, arg, l->least,
			    l->least == 1 ? "" : "s", l->option);
			return -1;
		}
		value = json_integer((json_int_t)v);
		break;
	case TL_SECONDS:
		/* a bare number is seconds; a duration must be whole seconds */
		if (format_parse_int(arg, l->least, INT64_MAX, &n) == 0) {
			value = json_integer((json_int_t)n);
			break;
		}
		if (!isdigit((unsigned char)*arg) || strspn(arg, "0123456789") ==
		    strlen(arg) || units_parse_duration(arg, &v, NULL) != 0 ||
		    v % 1000 != 0 || v / 1000 < (uint64_t)l->least ||
		    v / 1000 > INT64_MAX) {
			cmd_usage_error(c, "%s: '%s' is not a whole number of seconds "
			    "of at least %lld (90, or 2min)", l->option, arg, l->least);
			return -1;
		}
		value = json_integer((json_int_t)(v / 1000));
		break;
	case TL_COUNT:
		if (format_parse_int(arg, l->least, INT64_MAX, &n) == -1) {
			cmd_usage_error(c, "%s: '%s' is not a whole number of at least "
			    "%lld", l->option, arg, l->least);
			return -1;
		}
		value = json_integer((json_int_t)n);
		break;
	case TL_CORES:
	default:
		if (taskopt_parse_cores(arg, &v, &why) == -1) {
			cmd_usage_error(c, "%s: '%s' %s", l->option, arg, why);
			return -1;
		}
		value = json_real((double)v / 1000.0);
		break;
	}
	if (value == NULL)
		return -1;
	if (to->limits == NULL && (to->limits = json_object()) == NULL) {
		json_decref(value);
		return -1;
	}
	json_object_set_new(to->limits, l->field, value);
	to->limit_arg[k] = arg;
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
	case OPT_LABEL: {
		json_t *s = json_string(arg);
		json_decref(s);
		if (s == NULL)
			return cmd_usage_error(c, "--label: not UTF-8"), -1;
		if (strlen(arg) > WIRE_MAX_LABEL)
			return cmd_usage_error(c, "--label: %zu bytes, longer than %d",
			    strlen(arg), WIRE_MAX_LABEL), -1;
		to->label = arg;
		return 1;
	}
	case OPT_PRIORITY:
		if (format_parse_int(arg, WIRE_PRIORITY_MIN, WIRE_PRIORITY_MAX, &to->priority) == -1)
			return cmd_usage_error(c, "--priority: '%s' is not an integer from %d to %d",
			    arg, WIRE_PRIORITY_MIN, WIRE_PRIORITY_MAX), -1;
		to->priority_set = true;
		return 1;
	case OPT_NO_WAIT_ROOM:
		to->no_wait_for_room = true;
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
		to->output_limit_arg = arg;
		return 1;
	case OPT_MEMORY:
	case OPT_CPUS:
	case OPT_PIDS:
	case OPT_OPEN_FILES:
	case OPT_CPU_SECONDS:
	case OPT_FILE_SIZE:
		return taskopt_limit(to, c, (size_t)(ch - OPT_LIMIT_FIRST), arg) == -1 ?
		    -1 : 1;
	case 'i':
		to->read_stdin = true;
		return 1;
	case OPT_STDIN_OPEN:
		to->stdin_open = true;
		return 1;
	case OPT_DELAY:
		if (cmd_duration_arg(c, "--delay", arg, &to->delay_ms) == -1)
			return -1;
		if (to->delay_ms > WIRE_MAX_DELAY_MS)
			return cmd_usage_error(c, "--delay: '%s' is longer than a year", arg), -1;
		to->delay_set = to->delay_ms != 0;
		return 1;
	case OPT_AFTER:
		return taskopt_after(to, c, arg) == -1 ? -1 : 1;
	case OPT_AFTER_ANY:
		to->after_any = true;
		return 1;
	case OPT_RETRIES:
		if (format_parse_int(arg, 0, WIRE_MAX_RETRIES, &to->retries) == -1)
			return cmd_usage_error(c, "--retries: '%s' is not a number from 0 "
			    "to %d", arg, WIRE_MAX_RETRIES), -1;
		return 1;
	case OPT_RETRY_ON:
		return taskopt_retry_on(to, c, arg) == -1 ? -1 : 1;
	case OPT_RETRY_DELAY:
		if (cmd_duration_arg(c, "--retry-delay", arg, &to->retry_delay_ms) == -1)
			return -1;
		to->retry_delay_set = true;
		return 1;
	case OPT_KEY:
		if (*arg == '\0' || strlen(arg) > WIRE_MAX_KEY)
			return cmd_usage_error(c, "--key: 1 to %d bytes, not %zu", WIRE_MAX_KEY,
			    strlen(arg)), -1;
		to->key = arg;
		return 1;
	case OPT_ON_LOST:
		if (strcmp(arg, ON_LOST_LOST) != 0 && strcmp(arg, ON_LOST_RERUN) != 0)
			return cmd_usage_error(c, "--on-lost: '%s' is not lost or rerun", arg), -1;
		to->on_lost = arg;
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
	if (to->limits != NULL) {
		json_t *limits = json_object_get(task, FIELD_LIMITS);
		if (limits == NULL) {
			limits = json_object();
			json_object_set_new(task, FIELD_LIMITS, limits);
		}
		/* the task's own win; a limits that is not an object is the daemon's to refuse */
		if (json_is_object(limits))
			json_object_foreach(to->limits, key, v)
				if (json_object_get(limits, key) == NULL)
					json_object_set(limits, key, v);
	}
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
		if (to->limits != NULL &&
		    strcmp(event_str(task, FIELD_KIND, ""), KIND_EXEC) != 0) {
			size_t k;
			for (k = 0; to->limit_arg[k] == NULL; k++)
				;
			json_decref(task);
			return cmd_usage_error(c, "%s: only exec tasks take limits, and "
			    "the --task is of kind \"%s\"", taskopt_limits[k].option,
			    event_str(to->task, FIELD_KIND, ""));
		}
	} else {
		if (argc == 0)
			return cmd_usage_error(c, "a command to run is needed");
		if ((task = taskopt_exec_task(argv, argc, &bad)) == NULL)
			return cmd_usage_error(c, "the argument '%s' is not UTF-8 "
			    "text (the wire carries text)", bad);
	}
	taskopt_apply(to, task);
	if ((to->read_stdin && to->stream_stdin) || to->stdin_open) {
		if (strcmp(event_str(task, FIELD_KIND, ""), KIND_EXEC) != 0) {
			json_decref(task);
			return cmd_usage_error(c, "--stdin: only exec tasks take stdin, and the "
			    "--task is of kind \"%s\"", event_str(to->task, FIELD_KIND, ""));
		}
		json_object_del(task, FIELD_STDIN);
		json_object_del(task, FIELD_STDIN_BASE64);
		json_object_set_new(task, FIELD_STDIN_STREAM, json_true());
	} else if (to->read_stdin && (r = taskopt_read_stdin(c, task)) != 0) {
		json_decref(task);
		return r;
	}
	*taskp = task;
	return 0;
}

int
taskopt_cwd(const struct taskopt *to, const struct cmd *c, struct tpctl *opt, json_t *task)
{
	char here[PATH_MAX], *joined;
	int code;

	const char *given = event_str(task, FIELD_CWD, NULL);

	if (strcmp(event_str(task, FIELD_KIND, ""), KIND_EXEC) != 0 ||
	    (given != NULL && (to->cwd == NULL || strcmp(given, to->cwd) != 0)))
		return 0;       /* a --task's own cwd is sent as written */
	if ((code = tpctl_resolve(opt)) != 0)
		return code;
	if (opt->host != NULL) {
		/* over TCP the daemon is elsewhere: only an absolute path means anything there */
		if (to->cwd != NULL && to->cwd[0] != '/')
			return cmd_usage_error(c, "--cwd %s: a relative directory means nothing on "
			    "the daemon's host (over TCP): give an absolute path", to->cwd);
		return 0;
	}
	if (to->cwd != NULL && to->cwd[0] == '/')
		return 0;
	if (getcwd(here, sizeof here) == NULL) {
		if (to->cwd != NULL) {
			tpctl_warnx("--cwd %s: cannot resolve it: the current directory is "
			    "unknown (%s)", to->cwd, strerror(errno));
			return EX_OSERR;
		}
		tpctl_warnx("the current directory is unknown (%s): the task starts in the "
		    "daemon's default directory", strerror(errno));
		return 0;
	}
	if (to->cwd == NULL || strcmp(to->cwd, ".") == 0) {
		json_object_set_new(task, FIELD_CWD, json_string(here));
		return 0;
	}
	if (asprintf(&joined, "%s%s%s", here, strcmp(here, "/") == 0 ? "" : "/", to->cwd) == -1)
		return EX_OSERR;
	json_object_set_new(task, FIELD_CWD, json_string(joined));
	free(joined);
	return 0;
}

const char *
taskopt_scheduling(const struct taskopt *to)
{
	return to->delay_set ? "--delay" : to->after != NULL ? "--after" :
	    to->after_any ? "--after-any" : to->retries >= 0 ? "--retries" :
	    to->retry_on != NULL ? "--retry-on" : to->retry_delay_set ? "--retry-delay" :
	    to->key != NULL ? "--key" : to->on_lost != NULL ? "--on-lost" : NULL;
}

json_t *
taskopt_submit(const struct taskopt *to, json_t *task)
{
	json_t *req = json_object();

	json_object_set_new(req, FIELD_OP, json_string(OP_SUBMIT));
	json_object_set_new(req, FIELD_TASK, task);
	if (to->pool != NULL)
		json_object_set_new(req, FIELD_POOL, json_string(to->pool));
	if (to->label != NULL)
		json_object_set_new(req, FIELD_LABEL, json_string(to->label));
	if (to->queue_timeout_set)
		json_object_set_new(req, FIELD_QUEUE_TIMEOUT_MS,
		    json_integer((json_int_t)to->queue_timeout_ms));
	if (to->delay_set)
		json_object_set_new(req, FIELD_DELAY_MS, json_integer((json_int_t)to->delay_ms));
	if (to->after != NULL)
		json_object_set(req, FIELD_AFTER, to->after);
	if (to->after_any)
		json_object_set_new(req, FIELD_AFTER_MODE, json_string(AFTER_MODE_ANY));
	if (to->retries >= 0)
		json_object_set_new(req, FIELD_RETRIES, json_integer((json_int_t)to->retries));
	if (to->retry_on != NULL)
		json_object_set(req, FIELD_RETRY_ON, to->retry_on);
	if (to->retry_delay_set)
		json_object_set_new(req, FIELD_RETRY_DELAY_MS,
		    json_integer((json_int_t)to->retry_delay_ms));
	if (to->key != NULL)
		json_object_set_new(req, FIELD_KEY, json_string(to->key));
	if (to->on_lost != NULL)
		json_object_set_new(req, FIELD_ON_LOST, json_string(to->on_lost));
	if (to->priority_set)
		json_object_set_new(req, FIELD_PRIORITY, json_integer((json_int_t)to->priority));
	json_object_set_new(req, FIELD_ADMISSION,
	    json_string(to->no_wait_for_room ? ADMISSION_REJECT : ADMISSION_WAIT));
	return req;
}

bool
taskopt_waits_for_room(const struct taskopt *to)
{
	return !to->no_wait_for_room;
}

void
taskopt_room_notice(const struct taskopt *to)
{
	tpctl_warnx("waiting for room in pool %s", to->pool != NULL ? to->pool : WIRE_DEFAULT_POOL);
}

int
taskopt_refused_limit(const struct taskopt *to, const json_t *task, const json_t *ev)
{
	static const char prefix[] = "task.limits.";
	const char *msg = event_error_message(ev), *name;
	json_t *given;
	size_t k, len;

	if (strcmp(event_error_code(ev), ERR_BAD_REQUEST) == 0 && to->output_limit_set &&
	    strncmp(msg, "task.output_limit ", 18) == 0 &&
	    json_integer_value(json_object_get(task, FIELD_OUTPUT_LIMIT)) ==
	    (json_int_t)to->output_limit)
		return TASKOPT_NLIMITS;
	if (to->limits == NULL || strcmp(event_error_code(ev), ERR_BAD_REQUEST) != 0 ||
	    strncmp(msg, prefix, sizeof prefix - 1) != 0)
		return -1;
	name = msg + sizeof prefix - 1;
	for (k = 0; k < TASKOPT_NLIMITS; k++) {
		len = strlen(taskopt_limits[k].field);
		if (strncmp(name, taskopt_limits[k].field, len) == 0 &&
		    !isalnum((unsigned char)name[len]) && name[len] != '_')
			break;
	}
	if (k == TASKOPT_NLIMITS || to->limit_arg[k] == NULL)
		return -1;
	/* the task's own value (a --task or batch line that set it) is not the option's */
	given = json_object_get(json_object_get(task, FIELD_LIMITS), taskopt_limits[k].field);
	if (given == NULL || !json_equal(given, json_object_get(to->limits,
	    taskopt_limits[k].field)))
		return -1;
	return (int)k;
}

int
taskopt_report_refused(const struct taskopt *to, int k, const json_t *ev)
{
	if (k == TASKOPT_NLIMITS) {
		/* the daemon's words after the field's name: "is 17M, above ..." */
		const char *msg = event_error_message(ev), *above = strstr(msg, "above ");

		tpctl_warnx("--output-limit %s: %s (%s)", to->output_limit_arg,
		    above != NULL ? above : msg + 18, event_error_code(ev));
		return event_exit_for_error(event_error_code(ev));
	}
	tpctl_warnx("%s %s: %s (%s)", taskopt_limits[k].option, to->limit_arg[k],
	    event_error_message(ev), event_error_code(ev));
	return event_exit_for_error(event_error_code(ev));
}
