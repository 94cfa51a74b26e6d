/*
 * task-exec.c: the exec task kind: its settings, parsing a request's task
 * object, cancel and free. Running is exec-run.c; starting the process is
 * exec-spawn.c; output is capture.c.
 *
 * Request fields (doc/exec.md), all copied here on the loop thread so no
 * json_t crosses to the worker:
 *   argv          non-empty array of strings, argv[0] non-empty (required)
 *   env           object: NAME -> string, added to the configured base
 *                 environment (replacing a base variable of the same name);
 *                 NAME -> null removes a base variable (tpd extension)
 *   cwd           string: working directory
 *   stdin         string: the child's stdin (else /dev/null)
 *   stdin_base64  the same, base64-encoded, for binary input (tpd extension;
 *                 excludes stdin)
 *   stdin_stream  true: stdin comes by input requests (exec-input.c); excludes
 *                 stdin and stdin_base64
 *   output_limit  integer, 1..[exec] output_limit_max: bytes kept per stream
 *   limits        object: memory_bytes, cpu_cores, pids, open_files,
 *                 cpu_seconds, file_bytes; each replaces the pool's limit_*
 *                 default and may not pass its max_limit_*; one that the
 *                 containment in force cannot enforce is refused, naming it
 * "kind" and "timeout_ms" belong to the front end; anything else is refused
 * with a message naming the field.
 *
 * The pool's run_as is taken here too: the submitter's uid and gid for
 * caller, the user's name for a user; the passwd and group look-ups are left
 * to the worker (exec-run.c), so that a slow name service never stalls the
 * loop thread.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base64.h"
#include "cgroup.h"
#include "exec.h"
#include "base/log.h"
#include "base/utf8.h"
#include "units.h"
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
	s->stdin_buffer = c->exec_stdin_buffer;
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
		x->env_given |= strcmp(name, "HOME") == 0 ? EXEC_ENV_HOME :
		    strcmp(name, "USER") == 0 ? EXEC_ENV_USER :
		    strcmp(name, "LOGNAME") == 0 ? EXEC_ENV_LOGNAME :
		    strcmp(name, "SHELL") == 0 ? EXEC_ENV_SHELL : 0;
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

const char *
exec_limit_unenforceable(const struct cgroup_info *ci, enum conf_limit l)
{
	switch (l) {
	case CONF_LIMIT_MEMORY_BYTES:           /* memory.max, else RLIMIT_AS */
	case CONF_LIMIT_OPEN_FILES:             /* RLIMIT_NOFILE */
	case CONF_LIMIT_CPU_SECONDS:            /* RLIMIT_CPU */
	case CONF_LIMIT_FILE_BYTES:             /* RLIMIT_FSIZE */
		return NULL;
	case CONF_LIMIT_PIDS:
		if (ci->cgroup && (ci->controllers & CGROUP_PIDS))
			return NULL;
		return ci->cgroup ? "the pids controller is not enabled for tpd's cgroup "
		    "root" : "containment is process, and only a cgroup's pids "
		    "controller bounds a task's processes (RLIMIT_NPROC counts every "
		    "process of the user)";
	case CONF_LIMIT_CPU_CORES:
		if (ci->cgroup && (ci->controllers & CGROUP_CPU))
			return NULL;
		return ci->cgroup ? "the cpu controller is not enabled for tpd's cgroup "
		    "root" : "containment is process, and only a cgroup's cpu "
		    "controller bounds a task's share of the CPUs";
	case CONF_NLIMITS:
		break;
	}
	return "unknown limit";
}

void
exec_enforce(const struct cgroup_info *ci, struct conf_enforce *out)
{
	memset(out, 0, sizeof *out);
	for (int k = 0; k < CONF_NLIMITS; k++)
		out->why[k] = exec_limit_unenforceable(ci, k);
	if (!ci->cgroup && ci->why[0] != '\0')
		snprintf(out->note, sizeof out->note, "cgroup containment is not in force: %s",
		    ci->why);
}

/* One limit of the request's limits object, or -1 with *cause set. */
static int
exec_parse_limit(enum conf_limit k, json_t *v, uint64_t *out, char **cause)
{
	const char *name = conf_limit_name(k);
	json_int_t n, least;

	if (k == CONF_LIMIT_CPU_CORES) {
		double d = json_number_value(v);

		if (!json_is_number(v) || !(d >= 0.01) || d > 1024)
			return cause_set(cause, "task.limits.cpu_cores must be a number of "
			    "cores from 0.01 to 1024 (0.5 is half a core)");
		*out = (uint64_t)(d * 1000 + 0.5);
		return 0;
	}
	n = json_integer_value(v);
	least = k == CONF_LIMIT_FILE_BYTES ? 0 : k == CONF_LIMIT_OPEN_FILES ? 3 : 1;

	if (!json_is_integer(v) || n < least)
		return cause_set(cause, "task.limits.%s must be an integer of at least %lld",
		    name, (long long)least);
	*out = (uint64_t)n;
	return 0;
}

/*
 * The limits in force: the request's, else the pool's default, else the
 * pool's maximum (a pool with a maximum has no unlimited tasks). Each must
 * be within the maximum and enforceable here.
 */
static int
exec_parse_limits(struct task *t, struct exec_task *x, json_t *v, char **cause)
{
	const struct conf_pool *p = t->pool_conf;
	const char *key, *pool = p != NULL ? p->name : WIRE_DEFAULT_POOL;
	bool given[CONF_NLIMITS] = { false };
	json_t *value;

	for (int k = 0; k < CONF_NLIMITS; k++)
		x->limits[k] = CONF_NO_LIMIT;
	if (v != NULL && !json_is_object(v))
		return cause_set(cause, "task.limits must be an object (memory_bytes, "
		    "cpu_cores, pids, open_files, cpu_seconds, file_bytes)");
	if (v != NULL) {
		json_object_foreach(v, key, value) {
			int k;

			for (k = 0; k < CONF_NLIMITS; k++)
				if (strcmp(key, conf_limit_name(k)) == 0)
					break;
			if (k == CONF_NLIMITS)
				return cause_set(cause, "task.limits.%s is not a limit (memory_bytes, "
				    "cpu_cores, pids, open_files, cpu_seconds, file_bytes)", key);
			if (exec_parse_limit(k, value, &x->limits[k], cause) == -1)
				return -1;
			given[k] = true;
		}
	}
	for (int k = 0; k < CONF_NLIMITS; k++) {
		const char *why, *name = conf_limit_name(k);
		bool cores = k == CONF_LIMIT_CPU_CORES;

		if (!given[k] && p != NULL)
			x->limits[k] = p->limits[k] != CONF_NO_LIMIT ? p->limits[k] :
			    p->max_limits[k];
		if (x->limits[k] == CONF_NO_LIMIT)
			continue;
		if (p != NULL && p->max_limits[k] != CONF_NO_LIMIT &&
		    x->limits[k] > p->max_limits[k]) {
			if (cores)
				return cause_set(cause, "task.limits.cpu_cores is %.3f, above the "
				    "maximum %.3f of pool %s (max_limit_cpu_cores)",
				    x->limits[k] / 1000.0, p->max_limits[k] / 1000.0, pool);
			return cause_set(cause, "task.limits.%s is %llu, above the maximum %llu "
			    "of pool %s (max_limit_%s)", name, (unsigned long long)x->limits[k],
			    (unsigned long long)p->max_limits[k], pool, name);
		}
		if ((why = exec_limit_unenforceable(cgroup_current(), k)) != NULL)
			return cause_set(cause, "task.limits.%s cannot be enforced here: %s%s",
			    name, why, given[k] ? "" : " (the pool's default)");
	}
	return 0;
}

/* The pool's run_as, with what the worker needs to look the user up. */
static int
exec_parse_run_as(struct task *t, struct exec_task *x, char **cause)
{
	const struct conf_pool *p = t->pool_conf;

	x->run_as = p != NULL ? p->run_as : CONF_RUN_AS_DAEMON;
	switch (x->run_as) {
	case CONF_RUN_AS_DAEMON:
		return 0;
	case CONF_RUN_AS_CALLER:
		/* op_submit refuses TCP and credential-less peers; checked again */
		if (!t->caller.via_unix || !t->caller.have_creds)
			return cause_set(cause, "pool %s runs tasks as their caller: submit "
			    "on the Unix socket", p->name);
		x->uid = t->caller.uid;
		x->gid = t->caller.gid;
		return 0;
	case CONF_RUN_AS_USER:
		if ((x->user = strdup(p->run_as_user)) == NULL)
			return cause_set(cause, "out of memory");
		return 0;
	}
	return 0;
}

static void exec_free(struct task *t);

static int
exec_parse(struct task *t, json_t *spec, char **cause)
{
	json_t *argv = NULL, *env = NULL, *cwd = NULL, *in = NULL, *in64 = NULL, *instream = NULL;
	json_t *limit = NULL, *limits = NULL, *value;
	struct exec_task *x;
	const char *key;

	*cause = NULL;
	json_object_foreach(spec, key, value) {
		if (strcmp(key, FIELD_KIND) == 0 || strcmp(key, FIELD_TIMEOUT_MS) == 0)
			continue;
		else if (strcmp(key, FIELD_ARGV) == 0)
			argv = value;
		else if (strcmp(key, FIELD_ENV) == 0)
			env = value;
		else if (strcmp(key, FIELD_CWD) == 0)
			cwd = value;
		else if (strcmp(key, FIELD_STDIN) == 0)
			in = value;
		else if (strcmp(key, FIELD_STDIN_BASE64) == 0)
			in64 = value;
		else if (strcmp(key, FIELD_STDIN_STREAM) == 0)
			instream = value;
		else if (strcmp(key, FIELD_OUTPUT_LIMIT) == 0)
			limit = value;
		else if (strcmp(key, FIELD_LIMITS) == 0)
			limits = value;
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
		exec_input_init(&x->in, 0);
		cause_set(cause, "out of memory");
		goto fail;
	}
	exec_input_init(&x->in, x->settings->stdin_buffer);
	if (instream != NULL) {
		if (!json_is_boolean(instream)) {
			cause_set(cause, "task.stdin_stream must be true or false");
			goto fail;
		}
		x->stdin_stream = json_is_true(instream);
		if (x->stdin_stream && (in != NULL || in64 != NULL)) {
			cause_set(cause, "task.stdin_stream excludes task.%s: the input comes "
			    "either whole with the submit or by input requests",
			    in != NULL ? FIELD_STDIN : FIELD_STDIN_BASE64);
			goto fail;
		}
	}
	if (exec_parse_argv(x, argv, cause) == -1 ||
	    exec_parse_env(x, env, cause) == -1 ||
	    exec_parse_stdin(x, in, in64, cause) == -1 ||
	    exec_parse_limits(t, x, limits, cause) == -1 ||
	    exec_parse_run_as(t, x, cause) == -1)
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
			char max[32], got[32];

			units_format_size(x->settings->output_limit_max, max, sizeof max);
			if (json_is_integer(limit) && n >= 1)
				cause_set(cause, "task.output_limit is %s, above the most this "
				    "daemon allows: %s ([exec] output_limit_max)",
				    units_format_size((uint64_t)n, got, sizeof got), max);
			else
				cause_set(cause, "task.output_limit must be an integer from 1 to "
				    "%zu (%s, [exec] output_limit_max)",
				    x->settings->output_limit_max, max);
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

/* A follower from the start: the stream on, and what the run kept so far. */
static bool
exec_follow(struct task *t, json_t *events)
{
	struct exec_task *x = t->kind_data;
	bool over;

	pthread_mutex_lock(&x->wake_lock);
	over = x->run == NULL && x->run_over;
	if (!over) {
		atomic_store(&t->stream, true);
		if (x->run != NULL)
			exec_run_kept(x->run, events);
	}
	pthread_mutex_unlock(&x->wake_lock);
	return !over;
}

static int
exec_spool_catch_up(struct task *t, uint64_t at, struct task_spool_gap *gap)
{
	struct exec_task *x = t->kind_data;
	int r;

	memset(gap, 0, sizeof *gap);
	pthread_mutex_lock(&x->wake_lock);
	if (x->run == NULL) {
		r = x->run_over ? -1 : 2;
		if (r == 2)
			atomic_store(&t->stream, true);
	} else if (exec_run_spooled(x->run, gap) > at)
		r = 0;
	else if (gap->in_flight)
		r = 3;
	else {
		atomic_store(&t->stream, true);
		r = 1;
	}
	pthread_mutex_unlock(&x->wake_lock);
	return r;
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
	free(x->user);
	free(x->stdin_data);
	exec_input_destroy(&x->in);
	pthread_mutex_destroy(&x->wake_lock);
	free(x);
	t->kind_data = NULL;
}

const struct task_kind task_kind_exec = {
	.name = KIND_EXEC,
	.parse = exec_parse,
	.run = exec_run,
	.cancel = exec_cancel,
	.follow = exec_follow,
	.input = exec_input_add,
	.spool_catch_up = exec_spool_catch_up,
	.free = exec_free,
	.announces_start = true,        /* "started" once the process runs (exec-run.c) */
	.effects = true,                /* a program: its start is recorded before it runs */
	.gates_start = true,            /* the child waits at its start gate (exec-spawn.c) */
};
