/*
 * task-exec.c: the exec task kind: its settings, parsing a request's task
 * object, cancel and free. Running is exec-run.c; starting the process is
 * exec-spawn.c; output is capture.c.
 *
 * Request fields (SPEC section 2), all copied here on the loop thread so no
 * json_t crosses to the worker:
 *   argv          non-empty array of strings, argv[0] non-empty (required)
 *   env           object: NAME -> string, added to the configured base
 *                 environment (replacing a base variable of the same name);
 *                 NAME -> null removes a base variable (tpd extension)
 *   cwd           string: working directory
 *   stdin         string: the child's stdin (else /dev/null)
 *   stdin_base64  the same, base64-encoded, for binary input (tpd extension;
 *                 excludes stdin)
 *   output_limit  integer, 1..[exec] output_limit_max: bytes kept per stream
 * "kind" and "timeout_ms" belong to the front end; anything else is refused
 * with a message naming the field.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base64.h"
#include "exec.h"
#include "log.h"
#include "utf8.h"
#include "wire.h"

/* The settings new tasks take; exec_settings_lock guards the pointer. */
static pthread_mutex_t exec_settings_lock = PTHREAD_MUTEX_INITIALIZER;
static struct exec_settings *exec_settings_current;

static void
exec_strv_free(char **v)
{
	if (v == NULL)
		return;
	for (char **p = v; *p != NULL; p++)
		free(*p);
	free(v);
}

static void
exec_settings_release(struct exec_settings *s)
{
	if (s == NULL || atomic_fetch_sub(&s->refs, 1) != 1)
		return;
	exec_strv_free(s->env);
	free(s);
}

/* A new settings object copied from c, with one reference; NULL when out of memory. */
static struct exec_settings *
exec_settings_new(const struct conf *c)
{
	struct exec_settings *s = calloc(1, sizeof *s);

	if (s == NULL)
		return NULL;
	atomic_init(&s->refs, 1);
	s->output_limit = c->exec_output_limit;
	s->output_limit_max = c->exec_output_limit_max;
	if (s->output_limit > s->output_limit_max)
		s->output_limit = s->output_limit_max;
	s->kill_grace_ms = c->exec_kill_grace_ms;
	if ((s->env = calloc(c->nexec_env + 1, sizeof *s->env)) == NULL)
		goto fail;
	for (size_t i = 0; i < c->nexec_env; i++)
		if ((s->env[i] = strdup(c->exec_env[i])) == NULL)
			goto fail;
	return s;
fail:
	exec_settings_release(s);
	return NULL;
}

void
exec_configure(const struct conf *c)
{
	struct exec_settings *s = NULL, *old;

	if (c != NULL && (s = exec_settings_new(c)) == NULL) {
		/* keep the old settings rather than none */
		log_warnx("exec: out of memory applying the configuration");
		return;
	}
	pthread_mutex_lock(&exec_settings_lock);
	old = exec_settings_current;
	exec_settings_current = s;
	pthread_mutex_unlock(&exec_settings_lock);
	exec_settings_release(old);
}

/* A reference to the current settings; the built-in defaults if none were configured. */
static struct exec_settings *
exec_settings_get(void)
{
	struct exec_settings *s;

	pthread_mutex_lock(&exec_settings_lock);
	if (exec_settings_current == NULL) {
		struct conf defaults;

		conf_init(&defaults);
		exec_settings_current = exec_settings_new(&defaults);
		conf_free(&defaults);
	}
	if ((s = exec_settings_current) != NULL)
		atomic_fetch_add(&s->refs, 1);
	pthread_mutex_unlock(&exec_settings_lock);
	return s;
}

/* A copy of a JSON string without NUL bytes, or NULL (not a string, has NUL, no memory). */
static char *
exec_cstring(json_t *v)
{
	const char *s = json_string_value(v);

	if (s == NULL || strlen(s) != json_string_length(v))
		return NULL;
	return strdup(s);
}

static int
exec_parse_argv(struct exec_task *x, json_t *v, char **cause)
{
	size_t n = json_array_size(v);

	if (!json_is_array(v) || n == 0)
		return cause_set(cause, "task.argv must be a non-empty array of strings");
	if ((x->argv = calloc(n + 1, sizeof *x->argv)) == NULL)
		return cause_set(cause, "out of memory");
	for (size_t i = 0; i < n; i++) {
		json_t *a = json_array_get(v, i);

		if (!json_is_string(a))
			return cause_set(cause, "task.argv[%zu] must be a string", i);
		if ((x->argv[i] = exec_cstring(a)) == NULL)
			return cause_set(cause, "task.argv[%zu] must not contain NUL", i);
	}
	if (x->argv[0][0] == '\0')
		return cause_set(cause, "task.argv[0] must not be empty");
	return 0;
}

/* Index of variable name (length len) in env (n entries), or -1. */
static ssize_t
exec_env_find(char **env, size_t n, const char *name, size_t len)
{
	for (size_t i = 0; i < n; i++)
		if (strncmp(env[i], name, len) == 0 && env[i][len] == '=')
			return (ssize_t)i;
	return -1;
}

/* The child's environment: the base, then the request's env over it. */
static int
exec_parse_env(struct exec_task *x, json_t *v, char **cause)
{
	char **base = x->settings->env;
	size_t nbase = 0, n = 0, max;
	const char *name;
	json_t *value;

	if (v != NULL && !json_is_object(v))
		return cause_set(cause, "task.env must be an object of strings");
	while (base[nbase] != NULL)
		nbase++;
	max = nbase + (v != NULL ? json_object_size(v) : 0);
	if ((x->env = calloc(max + 1, sizeof *x->env)) == NULL)
		return cause_set(cause, "out of memory");
	for (; n < nbase; n++)
		if ((x->env[n] = strdup(base[n])) == NULL)
			return cause_set(cause, "out of memory");
	if (v == NULL)
		return 0;
	json_object_foreach(v, name, value) {
		size_t len = strlen(name);
		ssize_t at = exec_env_find(x->env, n, name, len);
		char *entry, q[UTF8_QUOTE_SIZE];

		if (len == 0 || strchr(name, '=') != NULL)
			return cause_set(cause, "task.env: \"%s\" is not a variable name",
			    utf8_quote(q, name));
		if (json_is_null(value)) {
			if (at >= 0) {
				free(x->env[at]);
				memmove(&x->env[at], &x->env[at + 1],
				    (n - (size_t)at) * sizeof *x->env);
				n--;
			}
			continue;
		}
		if (!json_is_string(value))
			return cause_set(cause, "task.env.%s must be a string (or null to remove it)",
			    utf8_quote(q, name));
		if (strlen(json_string_value(value)) != json_string_length(value))
			return cause_set(cause, "task.env.%s must not contain NUL", utf8_quote(q, name));
		if (asprintf(&entry, "%s=%s", name, json_string_value(value)) == -1)
			return cause_set(cause, "out of memory");
		if (at >= 0) {
			free(x->env[at]);
			x->env[at] = entry;
		} else
			x->env[n++] = entry;
	}
	x->env[n] = NULL;
	return 0;
}

static int
exec_parse_stdin(struct exec_task *x, json_t *text, json_t *b64, char **cause)
{
	if (text != NULL && b64 != NULL)
		return cause_set(cause, "task.stdin and task.stdin_base64 exclude each other");
	if (text != NULL) {
		if (!json_is_string(text))
			return cause_set(cause, "task.stdin must be a string");
		x->stdin_len = json_string_length(text);
		if ((x->stdin_data = malloc(x->stdin_len + 1)) == NULL)
			return cause_set(cause, "out of memory");
		memcpy(x->stdin_data, json_string_value(text), x->stdin_len + 1);
	} else if (b64 != NULL) {
		if (!json_is_string(b64))
			return cause_set(cause, "task.stdin_base64 must be a string");
		x->stdin_data = base64_decode(json_string_value(b64),
		    json_string_length(b64), &x->stdin_len);
		if (x->stdin_data == NULL)
			return cause_set(cause, errno == ENOMEM ? "out of memory" :
			    "task.stdin_base64 is not valid base64");
	}
	return 0;
}

static void exec_free(struct task *t);

static int
exec_parse(struct task *t, json_t *spec, char **cause)
{
	json_t *argv = NULL, *env = NULL, *cwd = NULL, *in = NULL, *in64 = NULL;
	json_t *limit = NULL, *value;
	struct exec_task *x;
	const char *key;

	*cause = NULL;
	json_object_foreach(spec, key, value) {
		if (strcmp(key, "kind") == 0 || strcmp(key, "timeout_ms") == 0)
			continue;
		else if (strcmp(key, "argv") == 0)
			argv = value;
		else if (strcmp(key, "env") == 0)
			env = value;
		else if (strcmp(key, "cwd") == 0)
			cwd = value;
		else if (strcmp(key, "stdin") == 0)
			in = value;
		else if (strcmp(key, "stdin_base64") == 0)
			in64 = value;
		else if (strcmp(key, "output_limit") == 0)
			limit = value;
		else {
			char q[UTF8_QUOTE_SIZE];
			return cause_set(cause, "task.%s is not a field of an exec task",
			    utf8_quote(q, key));
		}
	}
	if (argv == NULL)
		return cause_set(cause, "task.argv is required for an exec task");

	if ((x = calloc(1, sizeof *x)) == NULL)
		return cause_set(cause, "out of memory");
	pthread_mutex_init(&x->wake_lock, NULL);
	x->wake_fd = -1;
	t->kind_data = x;
	if ((x->settings = exec_settings_get()) == NULL) {
		cause_set(cause, "out of memory");
		goto fail;
	}
	if (exec_parse_argv(x, argv, cause) == -1 ||
	    exec_parse_env(x, env, cause) == -1 ||
	    exec_parse_stdin(x, in, in64, cause) == -1)
		goto fail;
	if (cwd != NULL) {
		if (!json_is_string(cwd) || json_string_length(cwd) == 0) {
			cause_set(cause, "task.cwd must be a non-empty string");
			goto fail;
		}
		if ((x->cwd = exec_cstring(cwd)) == NULL) {
			cause_set(cause, "task.cwd must not contain NUL");
			goto fail;
		}
	}
	x->output_limit = x->settings->output_limit;
	if (limit != NULL) {
		json_int_t n = json_integer_value(limit);

		if (!json_is_integer(limit) || n < 1 ||
		    (uint64_t)n > x->settings->output_limit_max) {
			cause_set(cause, "task.output_limit must be an integer from 1 to %zu",
			    x->settings->output_limit_max);
			goto fail;
		}
		x->output_limit = (size_t)n;
	}
	return 0;
fail:
	exec_free(t);
	return -1;
}

/*
 * Under the pool lock: wakes a run blocked in ppoll. An eventfd write of 1
 * never blocks (the counter cannot get near overflow). Before run publishes
 * its fd the cancel flag alone does the job: run checks it after publishing.
 */
static void
exec_cancel(struct task *t)
{
	struct exec_task *x = t->kind_data;
	uint64_t one = 1;

	pthread_mutex_lock(&x->wake_lock);
	if (x->wake_fd != -1 && write(x->wake_fd, &one, sizeof one) == -1 &&
	    errno != EAGAIN)
		log_warn("exec: cannot wake task %llu", (unsigned long long)t->id);
	pthread_mutex_unlock(&x->wake_lock);
}

static void
exec_free(struct task *t)
{
	struct exec_task *x = t->kind_data;

	if (x == NULL)
		return;
	exec_settings_release(x->settings);
	exec_strv_free(x->argv);
	exec_strv_free(x->env);
	free(x->cwd);
	free(x->stdin_data);
	pthread_mutex_destroy(&x->wake_lock);
	free(x);
	t->kind_data = NULL;
}

const struct task_kind task_kind_exec = {
	.name = "exec",
	.parse = exec_parse,
	.run = exec_run,
	.cancel = exec_cancel,
	.free = exec_free,
	.announces_start = true,        /* "started" once the process runs (exec-run.c) */
};
