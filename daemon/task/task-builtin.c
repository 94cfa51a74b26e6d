/*
 * task-builtin.c: the kinds that need no process: echo, sleep, spin, fail.
 * sleep and spin honour cancel and timeout_ms promptly: sleep waits on a
 * condition the cancel hook signals, spin polls the cancel flag as it burns.
 */
#include "config.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "proto/proto.h"
#include "task.h"
#include "wire.h"

#define MAX_TASK_MS (7ull * 24 * 3600 * 1000) /* a week */

/* ---- echo */

static int
echo_parse(struct task *t, json_t *spec, char **cause)
{
	static const char *const fields[] = { FIELD_KIND, FIELD_TIMEOUT_MS, FIELD_VALUE, NULL };
	json_t *value;

	if (proto_check_fields(spec, fields, "an echo task", cause) == -1)
		return -1;
	value = json_object_get(spec, FIELD_VALUE);
	/*
	 * Handed over, not shared: the task takes the value and the request
	 * lets go of it, so only the worker touches it from now on (jansson's
	 * reference counts are atomic; its objects are not locked).
	 */
	if (value == NULL) {
		t->kind_data = json_null();
		return 0;
	}
	t->kind_data = json_incref(value);
	json_object_del(spec, FIELD_VALUE);
	return 0;
}

static enum pool_state
echo_run(struct task *t)
{
	/* built directly: json_pack would parse its format for every echo */
	json_t *r = json_object();

	if (r != NULL && json_object_set(r, FIELD_VALUE, t->kind_data) == -1) {
		json_decref(r);
		r = NULL;
	}
	t->result = r;
	return POOL_SUCCEEDED;
}

static void
json_data_free(struct task *t)
{
	json_decref(t->kind_data);
}

const struct task_kind task_kind_echo = {
	.name = KIND_ECHO, .parse = echo_parse, .run = echo_run, .free = json_data_free,
};

/* ---- fail */

static int
fail_parse(struct task *t, json_t *spec, char **cause)
{
	static const char *const fields[] = { FIELD_KIND, FIELD_TIMEOUT_MS, FIELD_MESSAGE, NULL };
	const char *message = "task failed as asked";

	if (proto_check_fields(spec, fields, "a fail task", cause) == -1 ||
	    proto_get_string(spec, FIELD_MESSAGE, false, &message, cause) == -1)
		return -1;
	t->kind_data = strdup(message);
	return 0;
}

static enum pool_state
fail_run(struct task *t)
{
	task_set_error(t, ERR_TASK_FAILED, "%s", (const char *)t->kind_data);
	return POOL_FAILED;
}

static void
plain_free(struct task *t)
{
	free(t->kind_data);
}

const struct task_kind task_kind_fail = {
	.name = KIND_FAIL, .parse = fail_parse, .run = fail_run, .free = plain_free,
};

/* ---- sleep and spin */

struct timed {
	uint64_t ms;
	pthread_mutex_t lock;
	pthread_cond_t cv;  /* signalled by the cancel hook */
};

static int
timed_parse(struct task *t, json_t *spec, char **cause, const char *where)
{
	static const char *const fields[] = { FIELD_KIND, FIELD_TIMEOUT_MS, FIELD_MS, NULL };
	struct timed *td;
	uint64_t ms = 0;
	pthread_condattr_t ca;

	if (proto_check_fields(spec, fields, where, cause) == -1 ||
	    proto_get_uint(spec, FIELD_MS, true, 0, MAX_TASK_MS, &ms, cause) == -1)
		return -1;
	if ((td = calloc(1, sizeof *td)) == NULL)
		return -1;
	td->ms = ms;
	pthread_mutex_init(&td->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&td->cv, &ca);
	pthread_condattr_destroy(&ca);
	t->kind_data = td;
	return 0;
}

static int
sleep_parse(struct task *t, json_t *spec, char **cause)
{
	return timed_parse(t, spec, cause, "a sleep task");
}

static int
spin_parse(struct task *t, json_t *spec, char **cause)
{
	return timed_parse(t, spec, cause, "a spin task");
}

/* When the task must stop: after ms, or at its timeout if that comes first. */
static void
timed_ends(const struct task *t, const struct timed *td, uint64_t *end, bool *times_out)
{
	uint64_t start = clock_now_us();

	*end = start + td->ms * 1000;
	*times_out = t->timeout_us != 0 && t->timeout_us < td->ms * 1000;
	if (*times_out)
		*end = start + t->timeout_us;
}

static enum pool_state
timed_result(struct task *t, bool cancelled, bool times_out)
{
	if (cancelled)
		return POOL_CANCELLED;
	if (times_out) {
		task_set_error(t, ERR_TIMED_OUT, "task ran past its timeout_ms (%llu ms)",
		    (unsigned long long)(t->timeout_us / 1000));
		return POOL_TIMED_OUT;
	}
	t->result = json_null();
	return POOL_SUCCEEDED;
}

static enum pool_state
sleep_run(struct task *t)
{
	struct timed *td = t->kind_data;
	uint64_t end;
	bool times_out, cancelled;
	struct timespec ts;

	timed_ends(t, td, &end, &times_out);
	ts.tv_sec = (time_t)(end / 1000000);
	ts.tv_nsec = (long)(end % 1000000) * 1000;
	pthread_mutex_lock(&td->lock);
	while (!(cancelled = task_cancelled(t)) && clock_now_us() < end)
		pthread_cond_timedwait(&td->cv, &td->lock, &ts);
	pthread_mutex_unlock(&td->lock);
	return timed_result(t, cancelled, times_out);
}

/* Under the pool lock: a short critical section, never a wait. */
static void
sleep_cancel(struct task *t)
{
	struct timed *td = t->kind_data;

	pthread_mutex_lock(&td->lock);
	pthread_cond_signal(&td->cv);
	pthread_mutex_unlock(&td->lock);
}

static enum pool_state
spin_run(struct task *t)
{
	struct timed *td = t->kind_data;
	uint64_t end;
	bool times_out, cancelled;
	volatile uint64_t sink = 0;

	timed_ends(t, td, &end, &times_out);
	while (!(cancelled = task_cancelled(t)) && clock_now_us() < end)
		for (int i = 0; i < 1000; i++)
			sink += (uint64_t)i;
	(void)sink; /* burnt, never read: clang counts a volatile += as no use */
	return timed_result(t, cancelled, times_out);
}

static void
timed_free(struct task *t)
{
	struct timed *td = t->kind_data;

	pthread_mutex_destroy(&td->lock);
	pthread_cond_destroy(&td->cv);
	free(td);
}

const struct task_kind task_kind_sleep = {
	.name = KIND_SLEEP, .parse = sleep_parse, .run = sleep_run, .cancel = sleep_cancel,
	.free = timed_free,
};

const struct task_kind task_kind_spin = {
	.name = KIND_SPIN, .parse = spin_parse, .run = spin_run, .free = timed_free,
};
