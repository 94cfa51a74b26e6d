/*
 * exec-unit.c: unit test of the exec task kind. Drives task_kind_exec's
 * parse, run and cancel directly, without the daemon or the pool, spawning
 * real processes; plus the utf8, base64 and capture helpers it is built on.
 *
 * The daemon's task.c is not linked: this file carries test doubles of
 * task_cancelled, task_set_error and task_emit (named below), which record
 * events and can hold task_emit closed to act as a slow client, and of the
 * start gate (task_start_gate_arm, _disarm), opened or stopped by the test
 * as the journal's release and a cancel would.
 *
 * Synchronisation is by events and joins, never sleeps; every wait has a
 * deadline, and alarm() ends a hung run.
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <grp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "base64.h"
#include "exec/capture.h"
#define TEST_ALARM_S 120        /* per test (check.h) */
#include "check.h"
#include "conf/conf.h"
#include "exec/exec-spawn.h"
#include "exec/exec.h"
#include "exec/pgroup.h"
#include "exec/spool.h"
#include "task/task.h"
#include "base/utf8.h"
#include "wire.h"

#define TEST_WAIT_S 30

static char test_dir[] = "/tmp/exec-unit.XXXXXX";

#define CHECK_STR(got, want) do {					\
	const char *g_ = (got), *w_ = (want);				\
	if (g_ == NULL || strcmp(g_, w_) != 0)				\
		test_fail(__FILE__, __LINE__, "got \"%s\", expected \"%s\"",	\
		    g_ != NULL ? g_ : "(null)", w_);			\
} while (0)

static uint64_t
test_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* ------------------------------------------------------------------
 * Test doubles for the daemon's task.c (this binary only).
 */

struct double_task {
	struct task t;
	atomic_bool cancel;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	json_t *events;         /* every event task_emit got, in order */
	bool gate_closed;       /* task_emit blocks while set (a slow client) */
	unsigned blocked;       /* task_emit calls now waiting at the gate */
	enum pool_state state;  /* set by the runner thread */
	bool finished;
	bool recorded;          /* the start gate: the record is there already */
	bool gated;             /* armed, with gate_fd */
	int gate_fd;
	bool gate_went;         /* GO was written */
};

/* The double around t (t is its first member). */
static struct double_task *
double_of(const struct task *t)
{
	return (struct double_task *)((char *)t - offsetof(struct double_task, t));
}

/* Test double: the cancel flag the pool would keep. */
bool
task_cancelled(const struct task *t)
{
	return atomic_load(&double_of(t)->cancel);
}

/* Test double: what task.c does, minus nothing. */
void
task_set_error(struct task *t, const char *code, const char *fmt, ...)
{
	va_list ap;

	t->error_code = code;
	free(t->error_message);
	va_start(ap, fmt);
	if (vasprintf(&t->error_message, fmt, ap) == -1)
		t->error_message = NULL;
	va_end(ap);
}

/* Test double: records the event; waits at a closed gate unless cancelled. */
int
task_emit(struct task *t, json_t *event, size_t weight)
{
	struct double_task *d = double_of(t);

	(void)weight;
	pthread_mutex_lock(&d->lock);
	d->blocked++;
	pthread_cond_broadcast(&d->cond);
	while (d->gate_closed && !atomic_load(&d->cancel))
		pthread_cond_wait(&d->cond, &d->lock);
	d->blocked--;
	json_array_append_new(d->events, event);
	pthread_cond_broadcast(&d->cond);
	pthread_mutex_unlock(&d->lock);
	return 0;
}

/* Under d->lock: the gate's one byte, as task.c writes it. */
static void
double_gate_write(struct double_task *d, unsigned char byte)
{
	if (!d->gated)
		return;
	CHECK(write(d->gate_fd, &byte, 1) == 1 || errno == EPIPE, "gate write: %s",
	    strerror(errno));
	d->gated = false;
	d->gate_went = byte == TASK_GATE_GO;
}

/* Test double: the start gate, armed unless cancelled or recorded already. */
int
task_start_gate_arm(struct task *t, int fd)
{
	struct double_task *d = double_of(t);
	int known = -1;

	pthread_mutex_lock(&d->lock);
	if (atomic_load(&d->cancel))
		known = TASK_GATE_STOP;
	else if (d->recorded)
		known = TASK_GATE_GO;
	else {
		d->gated = true;
		d->gate_fd = fd;
	}
	pthread_cond_broadcast(&d->cond);
	pthread_mutex_unlock(&d->lock);
	return known;
}

bool
task_start_gate_disarm(struct task *t)
{
	struct double_task *d = double_of(t);
	bool went;

	pthread_mutex_lock(&d->lock);
	d->gated = false;
	went = d->gate_went;
	pthread_mutex_unlock(&d->lock);
	return went;
}

/* Test doubles: a streamed stdin's release mail is delivered at once (no loop here). */
void
mailbox_post(struct mail *m)
{
	m->deliver(m);
}

void
task_input_release(uint64_t conn)
{
	(void)conn;
}

/* ------------------------------------------------------------------
 * Driving the kind.
 */

static struct double_task *
task_parse_json(json_t *spec, bool stream, uint64_t timeout_ms, char **cause)
{
	struct double_task *d = calloc(1, sizeof *d);
	pthread_condattr_t ca;

	CHECK(d != NULL, "calloc");
	pthread_mutex_init(&d->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&d->cond, &ca);
	pthread_condattr_destroy(&ca);
	d->events = json_array();
	d->t.kind = &task_kind_exec;
	d->t.stream = stream;
	d->t.timeout_us = timeout_ms * 1000;
	*cause = NULL;
	if (task_kind_exec.parse(&d->t, spec, cause) == -1) {
		CHECK(d->t.kind_data == NULL, "failed parse left kind_data");
		json_decref(d->events);
		free(d);
		return NULL;
	}
	return d;
}

/* Parses a task from JSON text; fails the test if it does not parse. */
static struct double_task *
task_new(const char *json, bool stream, uint64_t timeout_ms)
{
	json_error_t jerr;
	json_t *spec = json_loads(json, 0, &jerr);
	char *cause;
	struct double_task *d;

	CHECK(spec != NULL, "bad test JSON %s: %s", json, jerr.text);
	d = task_parse_json(spec, stream, timeout_ms, &cause);
	CHECK(d != NULL, "parse of %s failed: %s", json, cause);
	json_decref(spec);
	return d;
}

static void
task_delete(struct double_task *d)
{
	task_kind_exec.free(&d->t);
	CHECK(d->t.kind_data == NULL, "free left kind_data");
	json_decref(d->t.result);
	free(d->t.error_message);
	json_decref(d->events);
	pthread_mutex_destroy(&d->lock);
	pthread_cond_destroy(&d->cond);
	free(d);
}

/* As the pool does it: the flag first, then the hooks (under a lock there). */
static void
task_cancel(struct double_task *d)
{
	atomic_store(&d->cancel, true);
	pthread_mutex_lock(&d->lock);
	double_gate_write(d, TASK_GATE_STOP);   /* task.c's task_on_cancel */
	pthread_mutex_unlock(&d->lock);
	task_kind_exec.cancel(&d->t);
	pthread_mutex_lock(&d->lock);
	pthread_cond_broadcast(&d->cond);
	pthread_mutex_unlock(&d->lock);
}

static enum pool_state
task_run(struct double_task *d)
{
	d->state = task_kind_exec.run(&d->t);
	if (d->state == POOL_SUCCEEDED)
		CHECK(d->t.error_code == NULL, "succeeded with error %s", d->t.error_code);
	else
		CHECK(d->t.error_code != NULL && d->t.error_message != NULL,
		    "state %d without an error", d->state);
	return d->state;
}

static void *
task_runner(void *arg)
{
	struct double_task *d = arg;

	task_run(d);
	pthread_mutex_lock(&d->lock);
	d->finished = true;
	pthread_cond_broadcast(&d->cond);
	pthread_mutex_unlock(&d->lock);
	return NULL;
}

/* Waits (bounded) until pred holds, under the double's lock. */
static bool
task_wait_for(struct double_task *d, bool (*pred)(struct double_task *))
{
	struct timespec ts;
	bool ok;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_sec += TEST_WAIT_S;
	pthread_mutex_lock(&d->lock);
	while (!(ok = pred(d)))
		if (pthread_cond_timedwait(&d->cond, &d->lock, &ts) == ETIMEDOUT)
			break;
	ok = pred(d);
	pthread_mutex_unlock(&d->lock);
	return ok;
}

static bool
pred_started(struct double_task *d)
{
	json_t *ev = json_array_get(d->events, 0);

	return ev != NULL && strcmp(json_string_value(json_object_get(ev, "event")), "started") == 0;
}

static bool
pred_blocked(struct double_task *d)
{
	return d->blocked > 0;
}

static bool
pred_finished(struct double_task *d)
{
	return d->finished;
}

/* Parses and runs a task to its end. */
static struct double_task *
task_do(const char *json, bool stream, uint64_t timeout_ms)
{
	struct double_task *d = task_new(json, stream, timeout_ms);

	task_run(d);
	return d;
}

/* Runs ["sh", "-c", script] to its end. */
static struct double_task *
task_sh(const char *script, bool stream, uint64_t timeout_ms)
{
	json_t *spec = json_pack("{s:[sss]}", "argv", "sh", "-c", script);
	struct double_task *d;
	char *cause;

	d = task_parse_json(spec, stream, timeout_ms, &cause);
	CHECK(d != NULL, "parse of %s failed: %s", script, cause);
	json_decref(spec);
	task_run(d);
	return d;
}

static json_t *
result_get(struct double_task *d, const char *key)
{
	CHECK(d->t.result != NULL, "no result");
	return json_object_get(d->t.result, key);
}

static const char *
result_str(struct double_task *d, const char *key)
{
	json_t *v = result_get(d, key);

	CHECK(json_is_string(v), "result.%s is not a string", key);
	return json_string_value(v);
}

static long long
result_int(struct double_task *d, const char *key)
{
	json_t *v = result_get(d, key);

	CHECK(json_is_integer(v), "result.%s is not an integer", key);
	return json_integer_value(v);
}

/* The decoded bytes of a base64 result field. */
static unsigned char *
result_b64(struct double_task *d, const char *key, size_t *len)
{
	const char *s = result_str(d, key);
	unsigned char *b = base64_decode(s, strlen(s), len);

	CHECK(b != NULL, "result.%s is not base64", key);
	return b;
}

static void
check_error(struct double_task *d, enum pool_state state, const char *code,
    const char *message)
{
	CHECK(d->state == state, "state %s, expected %s (%s: %s)",
	    pool_state_name(d->state), pool_state_name(state),
	    d->t.error_code ? d->t.error_code : "-",
	    d->t.error_message ? d->t.error_message : "-");
	CHECK_STR(d->t.error_code, code);
	if (message != NULL)
		CHECK_STR(d->t.error_message, message);
}

static void
write_file(const char *path, const char *text, mode_t mode)
{
	FILE *f = fopen(path, "w");

	CHECK(f != NULL, "fopen %s: %s", path, strerror(errno));
	fputs(text, f);
	fclose(f);
	chmod(path, mode);
}

static char *
read_file(const char *path)
{
	static char buf[256];
	FILE *f = fopen(path, "r");
	size_t n;

	if (f == NULL)
		return NULL;
	n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = '\0';
	return buf;
}

/* True when pid has exited: gone, or a zombie whose parent is not us. */
static bool
proc_gone(long pid)
{
	char path[64], *stat, *p;
	char state;
	long ppid;

	snprintf(path, sizeof path, "/proc/%ld/stat", pid);
	if ((stat = read_file(path)) == NULL || (p = strrchr(stat, ')')) == NULL)
		return true;
	if (sscanf(p + 1, " %c %ld", &state, &ppid) != 2)
		return true;
	return state == 'Z' && ppid != (long)getpid();
}

/* Our children now, from /proc/self/task/ * /children: none may be left. */
static int
count_children(void)
{
	char path[300];
	int count = 0;
	struct dirent *de;
	DIR *d = opendir("/proc/self/task");

	CHECK(d != NULL, "opendir /proc/self/task");
	while ((de = readdir(d)) != NULL) {
		char *text;

		if (de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof path, "/proc/self/task/%s/children", de->d_name);
		if ((text = read_file(path)) == NULL)
			continue;
		for (char *p = strtok(text, " \n"); p != NULL; p = strtok(NULL, " \n"))
			count++;
	}
	closedir(d);
	return count;
}

/* ------------------------------------------------------------------
 * Helpers of the kind: utf8, base64, capture.
 */

static void
test_utf8(void)
{
	static const struct {
		const char *s;
		size_t n;
		bool text;
		size_t tail;
	} cases[] = {
		{ "", 0, true, 0 },
		{ "plain ascii\n", 12, true, 0 },
		{ "caf\xc3\xa9", 5, true, 0 },
		{ "caf\xc3", 4, false, 1 },
		{ "\xe2\x82\xac", 3, true, 0 },            /* euro sign */
		{ "\xe2\x82", 2, false, 2 },
		{ "\xf0\x9f\x98\x80", 4, true, 0 },        /* emoji */
		{ "\xf0\x9f\x98", 3, false, 3 },
		{ "a\0b", 3, false, 0 },                   /* NUL: not text */
		{ "\xc0\xaf", 2, false, 0 },               /* overlong '/' */
		{ "\xe0\x80\xaf", 3, false, 0 },           /* overlong */
		{ "\xe0\x80", 2, false, 0 },               /* overlong prefix: no wait */
		{ "\xed\xa0\x80", 3, false, 0 },           /* surrogate */
		{ "\xf4\x90\x80\x80", 4, false, 0 },       /* above U+10FFFF */
		{ "\xf5", 1, false, 0 },
		{ "\xff\xfe", 2, false, 0 },
		{ "\x80", 1, false, 0 },                   /* lone continuation */
		{ "ok\xc3\xa9\xe2", 5, false, 1 },
	};

	test_current = "utf8";
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		CHECK(utf8_text(cases[i].s, cases[i].n) == cases[i].text,
		    "utf8_text case %zu", i);
		CHECK(utf8_partial_tail(cases[i].s, cases[i].n) == cases[i].tail,
		    "utf8_partial_tail case %zu: %zu", i,
		    utf8_partial_tail(cases[i].s, cases[i].n));
	}
	printf("ok - utf8: strict text check and split-character detection\n");
}

static void
test_base64(void)
{
	static const char *bad[] = { "Zg=", "Zg", "Z===", "Zh==", "Zm9=", "Zm9v!mFy",
	    "Zg==Zg==", "=Zg=", "Zm 9", "Zm8=\n" };
	unsigned char raw[300], *back;
	size_t len;
	char *enc;

	test_current = "base64";
	CHECK_STR(enc = base64_encode("", 0), "");
	free(enc);
	CHECK_STR(enc = base64_encode("f", 1), "Zg==");
	free(enc);
	CHECK_STR(enc = base64_encode("fo", 2), "Zm8=");
	free(enc);
	CHECK_STR(enc = base64_encode("foobar", 6), "Zm9vYmFy");
	free(enc);
	CHECK_STR(enc = base64_encode("\xff\xfe", 2), "//4=");
	free(enc);
	for (size_t i = 0; i < sizeof raw; i++)
		raw[i] = (unsigned char)(i * 7 + 3);
	for (size_t n = 0; n <= sizeof raw; n += 1) {
		enc = base64_encode(raw, n);
		CHECK(strlen(enc) == base64_encoded_len(n), "length for %zu", n);
		back = base64_decode(enc, strlen(enc), &len);
		CHECK(back != NULL && len == n && memcmp(back, raw, n) == 0,
		    "round trip of %zu bytes", n);
		free(back);
		free(enc);
	}
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		errno = 0;
		back = base64_decode(bad[i], strlen(bad[i]), &len);
		CHECK(back == NULL && errno == EINVAL, "\"%s\" decoded", bad[i]);
	}
	printf("ok - base64: RFC 4648 vectors, round trips of 0..300 bytes, strict decoding\n");
}

static void
test_capture(void)
{
	struct capture c;
	json_t *o;
	long n;

	test_current = "capture";
	capture_init(&c, 5);
	CHECK(capture_add(&c, "abc", 3) == 3 && !c.truncated, "under the limit");
	CHECK(capture_add(&c, "defg", 4) == 2 && c.truncated, "at the limit");
	CHECK(capture_add(&c, "hij", 3) == 0 && c.seen == 10, "past the limit");
	o = json_object();
	capture_result_set(&c, o, "stdout", "stdout_base64");
	CHECK_STR(json_string_value(json_object_get(o, "stdout")), "abcde");
	json_decref(o);
	capture_free(&c);

	/* a limit cutting a character: the text result leaves the piece out */
	capture_init(&c, 4);
	capture_add(&c, "ab\xc3\xa9\xc3\xa9", 6);
	o = json_object();
	capture_result_set(&c, o, "stdout", "stdout_base64");
	CHECK_STR(json_string_value(json_object_get(o, "stdout")), "ab\xc3\xa9");
	json_decref(o);
	capture_free(&c);

	/* streaming: a character split between reads is sent whole */
	capture_init(&c, 100);
	o = json_object();
	capture_add(&c, "x\xe2\x82", 3);
	n = capture_chunk(&c, o, "x\xe2\x82", 3, false);
	CHECK(n == 1, "first chunk is %ld bytes", n);
	CHECK_STR(json_string_value(json_object_get(o, "data")), "x");
	json_decref(o);
	o = json_object();
	capture_add(&c, "\xac!", 2);
	n = capture_chunk(&c, o, "\xac!", 2, false);
	CHECK(n == 4, "second chunk is %ld bytes", n);
	CHECK_STR(json_string_value(json_object_get(o, "data")), "\xe2\x82\xac!");
	json_decref(o);
	/* a real broken end is sent, as base64 */
	o = json_object();
	capture_add(&c, "\xe2", 1);
	CHECK(capture_chunk(&c, o, "\xe2", 1, false) == 0, "held back");
	CHECK(json_object_size(o) == 0, "nothing set for an empty chunk");
	CHECK(capture_chunk(&c, o, NULL, 0, true) == 1, "final flush");
	CHECK_STR(json_string_value(json_object_get(o, "data_base64")), "4g==");
	json_decref(o);
	capture_free(&c);
	printf("ok - capture: limit, truncation, character-safe cut and stream chunks\n");
}

/* ------------------------------------------------------------------
 * Parsing.
 */

static void
test_parse_errors(void)
{
	static const struct {
		const char *json;
		const char *message;
	} cases[] = {
		{ "{}", "task.argv is required for an exec task" },
		{ "{\"argv\": []}", "task.argv must be a non-empty array of strings" },
		{ "{\"argv\": \"ls\"}", "task.argv must be a non-empty array of strings" },
		{ "{\"argv\": [\"ls\", 1]}", "task.argv[1] must be a string" },
		{ "{\"argv\": [\"\"]}", "task.argv[0] must not be empty" },
		{ "{\"argv\": [\"ls\"], \"bogus\": 1}", "task.bogus is not a field of an exec task" },
		{ "{\"argv\": [\"ls\"], \"env\": []}", "task.env must be an object of strings" },
		{ "{\"argv\": [\"ls\"], \"env\": {\"A\": 1}}", "task.env.A must be a string (or null to remove it)" },
		{ "{\"argv\": [\"ls\"], \"env\": {\"A=B\": \"x\"}}", "task.env: \"A=B\" is not a variable name" },
		{ "{\"argv\": [\"ls\"], \"env\": {\"\": \"x\"}}", "task.env: \"\" is not a variable name" },
		{ "{\"argv\": [\"ls\"], \"cwd\": 5}", "task.cwd must be a non-empty string" },
		{ "{\"argv\": [\"ls\"], \"cwd\": \"\"}", "task.cwd must be a non-empty string" },
		{ "{\"argv\": [\"ls\"], \"stdin\": 5}", "task.stdin must be a string" },
		{ "{\"argv\": [\"ls\"], \"stdin_base64\": \"!!\"}", "task.stdin_base64 is not valid base64" },
		{ "{\"argv\": [\"ls\"], \"stdin\": \"a\", \"stdin_base64\": \"YQ==\"}", "task.stdin and task.stdin_base64 exclude each other" },
		{ "{\"argv\": [\"ls\"], \"output_limit\": 0}", "task.output_limit must be an integer from 1 to 1048576 (1M, [exec] output_limit_max)" },
		{ "{\"argv\": [\"ls\"], \"output_limit\": -3}", "task.output_limit must be an integer from 1 to 1048576 (1M, [exec] output_limit_max)" },
		{ "{\"argv\": [\"ls\"], \"output_limit\": 1048577}", "task.output_limit is 1048577, above the most this daemon allows: 1M ([exec] output_limit_max)" },
		{ "{\"argv\": [\"ls\"], \"output_limit\": 1.5}", "task.output_limit must be an integer from 1 to 1048576 (1M, [exec] output_limit_max)" },
		{ "{\"argv\": [\"ls\"], \"output_limit\": \"10\"}", "task.output_limit must be an integer from 1 to 1048576 (1M, [exec] output_limit_max)" },
	};
	json_t *spec;
	char *cause;

	test_current = "parse errors";
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		spec = json_loads(cases[i].json, 0, NULL);
		CHECK(spec != NULL, "bad JSON in case %zu", i);
		CHECK(task_parse_json(spec, false, 0, &cause) == NULL,
		    "%s was accepted", cases[i].json);
		CHECK_STR(cause, cases[i].message);
		free(cause);
		json_decref(spec);
	}
	/* a NUL inside argv (jansson can carry one) */
	spec = json_pack("{s:[s%]}", "argv", "a\0b", (size_t)3);
	CHECK(task_parse_json(spec, false, 0, &cause) == NULL, "NUL in argv accepted");
	CHECK_STR(cause, "task.argv[0] must not contain NUL");
	free(cause);
	json_decref(spec);

	/* the front end's fields are skipped; the limit's top is accepted */
	task_delete(task_new("{\"kind\": \"exec\", \"timeout_ms\": 5, \"argv\": [\"true\"], "
	    "\"output_limit\": 1048576}", false, 0));
	printf("ok - parse: %zu bad tasks refused, each naming its field\n",
	    sizeof cases / sizeof cases[0] + 1);
}

/* ------------------------------------------------------------------
 * Running.
 */

static void
test_exit_status(void)
{
	struct double_task *d;

	test_current = "exit status";
	d = task_do("{\"argv\": [\"true\"]}", false, 0);
	CHECK(d->state == POOL_SUCCEEDED, "true did not succeed: %s", d->t.error_message);
	CHECK(result_int(d, "exit_code") == 0, "exit_code");
	CHECK(json_is_null(result_get(d, "signal")), "signal not null");
	CHECK_STR(result_str(d, "stdout"), "");
	CHECK_STR(result_str(d, "stderr"), "");
	CHECK(json_is_false(result_get(d, "truncated")), "truncated");
	task_delete(d);

	d = task_do("{\"argv\": [\"sh\", \"-c\", \"exit 3\"]}", false, 0);
	check_error(d, POOL_FAILED, ERR_EXIT_STATUS, "exited with status 3");
	CHECK(result_int(d, "exit_code") == 3, "exit_code");
	CHECK(json_is_null(result_get(d, "signal")), "signal not null");
	task_delete(d);

	d = task_do("{\"argv\": [\"sh\", \"-c\", \"echo partial; kill -KILL $$\"]}", false, 0);
	check_error(d, POOL_FAILED, ERR_SIGNAL, "killed by signal 9 (SIGKILL)");
	CHECK(json_is_null(result_get(d, "exit_code")), "exit_code not null");
	CHECK(result_int(d, "signal") == SIGKILL, "signal");
	CHECK_STR(result_str(d, "signal_name"), "SIGKILL");
	CHECK_STR(result_str(d, "stdout"), "partial\n");
	task_delete(d);
	printf("ok - exit status: 0 succeeds, 3 is exit_status, SIGKILL is signal with result\n");
}

static void
test_output_and_stdin(void)
{
	struct double_task *d;
	size_t big = 1000000;
	char *text, *cause;
	json_t *spec;

	test_current = "output and stdin";
	d = task_do("{\"argv\": [\"sh\", \"-c\", \"echo out; echo err >&2; echo more\"]}", false, 0);
	CHECK_STR(result_str(d, "stdout"), "out\nmore\n");
	CHECK_STR(result_str(d, "stderr"), "err\n");
	task_delete(d);

	d = task_do("{\"argv\": [\"cat\"], \"stdin\": \"hello\\nworld\\n\"}", false, 0);
	CHECK_STR(result_str(d, "stdout"), "hello\nworld\n");
	task_delete(d);

	d = task_do("{\"argv\": [\"od\", \"-An\", \"-tx1\"], \"stdin_base64\": \"AP8B\"}", false, 0);
	CHECK_STR(result_str(d, "stdout"), " 00 ff 01\n");
	task_delete(d);

	/* no stdin: /dev/null, so cat ends at once */
	d = task_do("{\"argv\": [\"sh\", \"-c\", \"cat; readlink /proc/self/fd/0\"]}", false, 0);
	CHECK_STR(result_str(d, "stdout"), "/dev/null\n");
	task_delete(d);

	/* 1 MB through cat, both ways at once: neither side may block the other */
	text = malloc(big + 1);
	for (size_t i = 0; i < big; i++)
		text[i] = (char)('a' + i % 26);
	text[big] = '\0';
	spec = json_pack("{s:[s], s:s, s:I}", "argv", "cat", "stdin", text,
	    "output_limit", (json_int_t)big);
	d = task_parse_json(spec, false, 0, &cause);
	CHECK(d != NULL, "parse: %s", cause);
	task_run(d);
	CHECK(d->state == POOL_SUCCEEDED, "cat of 1 MB: %s", d->t.error_message);
	CHECK(strcmp(result_str(d, "stdout"), text) == 0, "1 MB came back changed");
	task_delete(d);
	json_decref(spec);

	/* a child that reads none of a large stdin: EPIPE, no SIGPIPE for us */
	spec = json_pack("{s:[s], s:s}", "argv", "true", "stdin", text);
	d = task_parse_json(spec, false, 0, &cause);
	task_run(d);
	CHECK(d->state == POOL_SUCCEEDED, "true with unread stdin: %s", d->t.error_message);
	task_delete(d);
	json_decref(spec);
	free(text);
	printf("ok - output and stdin: both streams, text and base64 stdin, /dev/null, 1 MB round trip, unread stdin\n");
}

static void
test_environment(void)
{
	struct double_task *d;
	char path[512], json[1024];

	test_current = "environment";
	/* the test process's own environment must not leak */
	setenv("TPD_LEAK_MARKER", "leaked", 1);
	d = task_do("{\"argv\": [\"env\"], \"env\": {\"FOO\": \"bar baz\"}}", false, 0);
	CHECK_STR(result_str(d, "stdout"),
	    "PATH=/usr/local/bin:/usr/bin:/bin\nLANG=C.UTF-8\nFOO=bar baz\n");
	task_delete(d);

	/* replacing and removing base variables */
	d = task_do("{\"argv\": [\"/usr/bin/env\"], \"env\": {\"LANG\": null, "
	    "\"PATH\": \"/bin\", \"X\": \"\"}}", false, 0);
	CHECK_STR(result_str(d, "stdout"), "PATH=/bin\nX=\n");
	task_delete(d);

	/* argv[0] is looked up in the child's PATH, not ours */
	snprintf(path, sizeof path, "%s/bin", test_dir);
	mkdir(path, 0755);
	snprintf(path, sizeof path, "%s/bin/tpd-test-prog", test_dir);
	write_file(path, "#!/bin/sh\necho found me\n", 0755);
	snprintf(json, sizeof json, "{\"argv\": [\"tpd-test-prog\"], "
	    "\"env\": {\"PATH\": \"/nonexistent:%s/bin\"}}", test_dir);
	d = task_do(json, false, 0);
	CHECK(d->state == POOL_SUCCEEDED, "%s", d->t.error_message);
	CHECK_STR(result_str(d, "stdout"), "found me\n");
	task_delete(d);

	/* a relative PATH entry is relative to the task's cwd */
	snprintf(json, sizeof json, "{\"argv\": [\"tpd-test-prog\"], \"cwd\": \"%s\", "
	    "\"env\": {\"PATH\": \"bin\"}}", test_dir);
	d = task_do(json, false, 0);
	CHECK(d->state == POOL_SUCCEEDED, "%s", d->t.error_message);
	task_delete(d);

	/* not executable: named as such */
	snprintf(path, sizeof path, "%s/bin/tpd-test-noexec", test_dir);
	write_file(path, "#!/bin/sh\n", 0644);
	snprintf(json, sizeof json, "{\"argv\": [\"tpd-test-noexec\"], "
	    "\"env\": {\"PATH\": \"%s/bin\"}}", test_dir);
	d = task_do(json, false, 0);
	/* (even root needs an x bit to execute) */
	check_error(d, POOL_FAILED, ERR_SPAWN_FAILED,
	    "cannot execute tpd-test-noexec: Permission denied");
	CHECK(d->t.result == NULL, "a result for a process that never ran");
	task_delete(d);
	unsetenv("TPD_LEAK_MARKER");
	printf("ok - environment: clean base plus env, daemon's not leaked, null removes, PATH of the child\n");
}

static void
test_cwd_and_spawn_errors(void)
{
	struct double_task *d;
	char json[1024], file[512], want[600];

	test_current = "cwd and spawn errors";
	snprintf(json, sizeof json, "{\"argv\": [\"pwd\"], \"cwd\": \"%s\"}", test_dir);
	d = task_do(json, false, 0);
	CHECK(d->state == POOL_SUCCEEDED, "%s", d->t.error_message);
	snprintf(want, sizeof want, "%s\n", test_dir);
	CHECK_STR(result_str(d, "stdout"), want);
	task_delete(d);

	d = task_do("{\"argv\": [\"pwd\"], \"cwd\": \"/nope/not/here\"}", false, 0);
	check_error(d, POOL_FAILED, ERR_SPAWN_FAILED,
	    "cannot chdir to /nope/not/here: No such file or directory");
	task_delete(d);

	snprintf(file, sizeof file, "%s/plainfile", test_dir);
	write_file(file, "x", 0644);
	snprintf(json, sizeof json, "{\"argv\": [\"pwd\"], \"cwd\": \"%s\"}", file);
	d = task_do(json, false, 0);
	snprintf(want, sizeof want, "cannot chdir to %s: Not a directory", file);
	check_error(d, POOL_FAILED, ERR_SPAWN_FAILED, want);
	task_delete(d);

	d = task_do("{\"argv\": [\"tpd-no-such-program\", \"x\"]}", false, 0);
	check_error(d, POOL_FAILED, ERR_SPAWN_FAILED, "no such program: tpd-no-such-program");
	CHECK(d->t.result == NULL, "a result for a process that never ran");
	task_delete(d);

	d = task_do("{\"argv\": [\"/nope/prog\"]}", false, 0);
	check_error(d, POOL_FAILED, ERR_SPAWN_FAILED, "no such program: /nope/prog");
	task_delete(d);

	/* a relative path with a slash is relative to cwd */
	snprintf(json, sizeof json, "{\"argv\": [\"./bin/tpd-test-prog\"], \"cwd\": \"%s\"}", test_dir);
	d = task_do(json, false, 0);
	CHECK(d->state == POOL_SUCCEEDED, "%s", d->t.error_message);
	task_delete(d);
	printf("ok - cwd: applied; missing dir, a file, a missing program each named in spawn_failed\n");
}

/* Runs argv through spawn_start with creds; returns its stdout (static), or NULL with *cause. */
static const char *
spawn_output(char *const *argv, const struct spawn_creds *creds, char **cause)
{
	static char out[256];
	static char path[] = "PATH=/usr/bin:/bin";     /* execve's argument is not const */
	char *const envp[] = { path, NULL };
	struct spawn_request req = { .argv = argv, .envp = envp, .cwd = "/",
	    .creds = creds, .cgroup_fd = -1 };
	struct spawn_child child;
	struct pollfd pfd;
	size_t len = 0;
	ssize_t n;
	int status;

	if (spawn_start(&req, &child, cause, &(bool){ false }) == -1)
		return NULL;
	pfd = (struct pollfd){ .fd = child.stdout_fd, .events = POLLIN };
	while (len < sizeof out - 1 && poll(&pfd, 1, TEST_WAIT_S * 1000) == 1 &&
	    (n = read(child.stdout_fd, out + len, sizeof out - 1 - len)) > 0)
		len += (size_t)n;
	out[len] = '\0';
	CHECK(spawn_reap(child.pid, &status, NULL) == 0, "reap");
	spawn_close(&child);
	return out;
}

static void
test_spawn_creds(void)
{
	static char sh[] = "sh", c[] = "-c", script[] = "echo $(id -u) $(id -g) $(id -G)";
	char *const id[] = { sh, c, script, NULL };
	gid_t groups[] = { 65534, 4 };
	struct spawn_creds nobody = { "nobody", 65534, 65534, groups, 2 };
	struct spawn_creds root = { "root", 0, 0, groups, 1 };
	const char *out;
	char *cause = NULL;
	pid_t pid;
	int status;

	test_current = "spawn credentials";
	if (geteuid() != 0) {
		printf("ok - spawn credentials # SKIP not root: cannot change users\n");
		return;
	}
	out = spawn_output(id, &nobody, &cause);
	CHECK(out != NULL, "%s", cause);
	CHECK_STR(out, "65534 65534 65534 4\n");

	/* Without the privileges, the child fails at the first drop and says so; nothing runs. */
	if ((pid = fork()) == 0) {
		if (setgroups(0, NULL) == -1 || setgid(65534) == -1 || setuid(65534) == -1)
			_exit(2);
		out = spawn_output(id, &root, &cause);
		if (out != NULL || cause == NULL ||
		    strcmp(cause, "cannot run as root: setgroups: Operation not permitted") != 0) {
			fprintf(stderr, "got %s / %s\n", out ? out : "(null)", cause ? cause : "(null)");
			_exit(1);
		}
		_exit(0);
	}
	CHECK(pid > 0 && waitpid(pid, &status, 0) == pid, "fork");
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "unprivileged spawn as root: status %d",
	    status);
	printf("ok - spawn credentials: groups, gid, uid applied; a failed drop fails the spawn\n");
}

/*
 * hold_outputs: the child's exit hangs up no pipe while the caller holds
 * its write ends (only the pidfd says it), and what the child wrote is
 * there to read, then the end of file, once the caller closes them.
 */
static void
test_spawn_hold_outputs(void)
{
	static char sh[] = "sh", c[] = "-c", script[] = "echo out; echo err >&2";
	static char path[] = "PATH=/usr/bin:/bin";
	char *const argv[] = { sh, c, script, NULL };
	char *const envp[] = { path, NULL };
	struct spawn_request req = { .argv = argv, .envp = envp, .hold_outputs = true,
	    .cgroup_fd = -1 };
	struct spawn_child child;
	struct pollfd pfd[2];
	char *cause = NULL, buf[64];
	int status;
	ssize_t n;

	test_current = "spawn hold_outputs";
	CHECK(spawn_start(&req, &child, &cause, &(bool){ false }) == 0, "%s", cause);
	CHECK(child.stdout_w > 2 && child.stderr_w > 2, "no write ends held");
	pfd[0] = (struct pollfd){ .fd = child.pidfd, .events = POLLIN };
	CHECK(poll(pfd, 1, TEST_WAIT_S * 1000) == 1, "the child did not exit");
	pfd[0] = (struct pollfd){ .fd = child.stdout_fd, .events = POLLIN };
	pfd[1] = (struct pollfd){ .fd = child.stderr_fd, .events = POLLIN };
	CHECK(poll(pfd, 2, 0) == 2 && pfd[0].revents == POLLIN && pfd[1].revents == POLLIN,
	    "after the exit: stdout %#x, stderr %#x (a hang-up, or no output)",
	    pfd[0].revents, pfd[1].revents);
	CHECK((n = read(child.stdout_fd, buf, sizeof buf)) == 4 && memcmp(buf, "out\n", 4) == 0,
	    "stdout: %zd bytes", n);
	CHECK(read(child.stdout_fd, buf, sizeof buf) == -1 && errno == EAGAIN,
	    "stdout ended while its write end is held");
	spawn_close_fd(&child.stdout_w);
	spawn_close_fd(&child.stderr_w);
	CHECK(read(child.stdout_fd, buf, sizeof buf) == 0, "no end of file on stdout");
	CHECK((n = read(child.stderr_fd, buf, sizeof buf)) == 4 && memcmp(buf, "err\n", 4) == 0,
	    "stderr: %zd bytes", n);
	CHECK(read(child.stderr_fd, buf, sizeof buf) == 0, "no end of file on stderr");
	CHECK(spawn_reap(child.pid, &status, NULL) == 0 && WIFEXITED(status) &&
	    WEXITSTATUS(status) == 0, "status %d", status);
	spawn_close(&child);
	printf("ok - spawn hold_outputs: no hang-up at the exit, the output and its end once "
	    "the write ends are closed\n");
}

/* The path taken where clone3 is refused: a fork-like clone, the same child. */
static void
test_spawn_with_clone(void)
{
	static char sh[] = "sh", c[] = "-c", script[] = "echo $(id -u) $(id -G)",
	    missing[] = "/nonexistent/tpd-prog";
	char *const id[] = { sh, c, script, NULL };
	char *const nope[] = { missing, NULL };
	gid_t groups[] = { 65534 };
	struct spawn_creds nobody = { "nobody", 65534, 65534, groups, 1 };
	const char *out;
	char *cause = NULL;

	test_current = "spawn with clone";
	spawn_use_clone3(false);
	out = spawn_output(id, geteuid() == 0 ? &nobody : NULL, &cause);
	CHECK(out != NULL, "%s", cause);
	if (geteuid() == 0)
		CHECK_STR(out, "65534 65534\n");
	CHECK(spawn_output(nope, NULL, &cause) == NULL, "a missing program ran");
	CHECK_STR(cause, "no such program: /nonexistent/tpd-prog");
	free(cause);
	spawn_use_clone3(true);
	printf("ok - spawn with a fork-like clone (no clone3): runs, drops credentials, reports "
	    "failures\n");
}

static void
test_fds_and_signals(void)
{
	struct double_task *d;
	int leak = open("/dev/null", O_RDONLY);     /* deliberately not O_CLOEXEC */
	int pipes[2];
	sigset_t block;
	unsigned long long blk, ign;
	long pid, pgid, sid;

	test_current = "fds and signals";
	CHECK(leak > 2 && pipe(pipes) == 0, "setting up inheritable fds");
	/* the shell's own fds, listed by its child ls: only 0, 1, 2 */
	d = task_do("{\"argv\": [\"sh\", \"-c\", \"ls /proc/$$/fd\"]}", false, 0);
	CHECK_STR(result_str(d, "stdout"), "0\n1\n2\n");
	task_delete(d);
	close(leak);
	close(pipes[0]);
	close(pipes[1]);

	/* signals: our blocked and ignored ones must not reach the child */
	sigemptyset(&block);
	sigaddset(&block, SIGUSR1);
	sigaddset(&block, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &block, NULL);
	signal(SIGINT, SIG_IGN);
	signal(SIGHUP, SIG_IGN);
	d = task_do("{\"argv\": [\"grep\", \"-E\", \"^Sig(Blk|Ign)\", \"/proc/self/status\"]}", false, 0);
	CHECK(sscanf(result_str(d, "stdout"), "SigBlk: %llx SigIgn: %llx", &blk, &ign) == 2,
	    "status lines: %s", result_str(d, "stdout"));
	CHECK(blk == 0, "blocked in the child: %llx", blk);
	/* none stays ignored, glibc's internal 32 and 33 included (the child resets them) */
	CHECK(ign == 0, "ignored in the child: %llx", ign);
	task_delete(d);
	pthread_sigmask(SIG_UNBLOCK, &block, NULL);
	signal(SIGINT, SIG_DFL);
	signal(SIGHUP, SIG_DFL);

	/* its own session and process group */
	d = task_sh("read -r pid comm state ppid pgid sid rest < /proc/$$/stat; "
	    "echo $pid $pgid $sid", false, 0);
	CHECK(sscanf(result_str(d, "stdout"), "%ld %ld %ld", &pid, &pgid, &sid) == 3,
	    "ps output: %s", result_str(d, "stdout"));
	CHECK(pid == pgid && pid == sid, "pid %ld pgid %ld sid %ld", pid, pgid, sid);
	task_delete(d);
	printf("ok - child: only fds 0-2, empty signal mask, no ignored signals, own session and group\n");
}

static void
test_truncation_and_binary(void)
{
	struct double_task *d;
	unsigned char *b;
	size_t len;

	test_current = "truncation and binary";
	/* 5 MB of NULs against a 1000-byte limit: binary, truncated, drained */
	d = task_do("{\"argv\": [\"head\", \"-c\", \"5000000\", \"/dev/zero\"], "
	    "\"output_limit\": 1000}", false, 0);
	CHECK(d->state == POOL_SUCCEEDED, "head: %s", d->t.error_message);
	CHECK(json_is_true(result_get(d, "truncated")), "not truncated");
	CHECK(result_get(d, "stdout") == NULL, "binary sent as text");
	b = result_b64(d, "stdout_base64", &len);
	CHECK(len == 1000, "kept %zu bytes", len);
	for (size_t i = 0; i < len; i++)
		CHECK(b[i] == 0, "byte %zu", i);
	free(b);
	task_delete(d);

	/* text truncated at the limit, the default limit otherwise */
	d = task_do("{\"argv\": [\"sh\", \"-c\", \"head -c 300000 /dev/zero | tr '\\\\0' a; "
	    "echo small >&2\"], \"output_limit\": 1000}", false, 0);
	CHECK(d->state == POOL_SUCCEEDED, "%s", d->t.error_message);
	CHECK(strlen(result_str(d, "stdout")) == 1000, "kept %zu", strlen(result_str(d, "stdout")));
	CHECK(strspn(result_str(d, "stdout"), "a") == 1000, "content");
	CHECK_STR(result_str(d, "stderr"), "small\n");
	CHECK(json_is_true(result_get(d, "truncated")), "not truncated");
	task_delete(d);

	/* cut inside a two-byte character: text without the cut piece */
	d = task_do("{\"argv\": [\"printf\", \"\\u00e9\\u00e9\\u00e9\"], \"output_limit\": 5}", false, 0);
	CHECK_STR(result_str(d, "stdout"), "\xc3\xa9\xc3\xa9");
	task_delete(d);

	d = task_do("{\"argv\": [\"printf\", \"\\\\377\\\\376\"]}", false, 0);
	CHECK_STR(result_str(d, "stdout_base64"), "//4=");
	CHECK(json_is_false(result_get(d, "truncated")), "truncated");
	task_delete(d);
	printf("ok - output: 5 MB writer cut at 1000 bytes and drained, binary as base64, text cut on a character boundary\n");
}

static void
test_stream(void)
{
	struct double_task *d;
	json_t *ev;
	size_t i, at = 0, nevents;
	struct { const char *name; char *data; size_t len; } acc[2] = {
		{ "stdout", NULL, 0 }, { "stderr", NULL, 0 },
	};
	char want[32];

	test_current = "stream";
	/* 60 lines per stream, then 20000 three-byte characters in 1000-byte writes (reads split characters) */
	d = task_sh("i=0; while [ $i -lt 60 ]; do echo line$i; echo err$i >&2; i=$((i+1)); done; "
	    "head -c 20000 /dev/zero | tr '\\0' x | sed 's/x/\xe2\x82\xac/g' | dd bs=1000 2>/dev/null",
	    true, 0);
	CHECK(d->state == POOL_SUCCEEDED, "%s", d->t.error_message);
	ev = json_array_get(d->events, 0);
	CHECK_STR(json_string_value(json_object_get(ev, "event")), "started");
	CHECK(json_integer_value(json_object_get(ev, "pid")) > 0, "started without pid");
	json_array_foreach(d->events, i, ev) {
		const char *stream, *data;

		if (i == 0)
			continue;
		CHECK_STR(json_string_value(json_object_get(ev, "event")), "output");
		stream = json_string_value(json_object_get(ev, "stream"));
		data = json_string_value(json_object_get(ev, "data"));
		CHECK(data != NULL, "event %zu is not text", i);
		for (int k = 0; k < 2; k++) {
			size_t n = strlen(data);

			if (strcmp(stream, acc[k].name) != 0)
				continue;
			acc[k].data = realloc(acc[k].data, acc[k].len + n + 1);
			memcpy(acc[k].data + acc[k].len, data, n + 1);
			acc[k].len += n;
		}
	}
	/* in order per stream, and exactly what the result holds */
	CHECK_STR(acc[0].data, result_str(d, "stdout"));
	CHECK_STR(acc[1].data, result_str(d, "stderr"));
	for (int k = 0; k < 60; k++) {
		snprintf(want, sizeof want, "line%d\n", k);
		CHECK(strncmp(acc[0].data + at, want, strlen(want)) == 0, "stdout order at %d", k);
		at += strlen(want);
	}
	for (int k = 0; k < 20000; k++, at += 3)
		CHECK(at + 3 <= acc[0].len && memcmp(acc[0].data + at, "\xe2\x82\xac", 3) == 0,
		    "character %d", k);
	CHECK(at == acc[0].len, "stdout length %zu, expected %zu", acc[0].len, at);
	at = 0;
	for (int k = 0; k < 60; k++) {
		snprintf(want, sizeof want, "err%d\n", k);
		CHECK(strncmp(acc[1].data + at, want, strlen(want)) == 0, "stderr order at %d", k);
		at += strlen(want);
	}
	CHECK(at == acc[1].len, "stderr length");
	free(acc[0].data);
	free(acc[1].data);
	nevents = json_array_size(d->events);
	task_delete(d);

	/* no stream: no events */
	d = task_do("{\"argv\": [\"echo\", \"hi\"]}", false, 0);
	CHECK(json_array_size(d->events) == 0, "events without stream");
	task_delete(d);
	printf("ok - stream: started with pid, %zu output events, in order, whole characters, equal to the result\n",
	    nevents);
}

/* Runs d on a thread; returns the thread. */
static pthread_t
task_start(struct double_task *d)
{
	pthread_t th;

	CHECK(pthread_create(&th, NULL, task_runner, d) == 0, "pthread_create");
	return th;
}

static void
test_timeout_kills_group(void)
{
	struct double_task *d;
	char json[1024], pidfile[512], *text;
	uint64_t t0, took;
	long gpid;

	test_current = "timeout";
	/*
	 * The leader waits; its child ignores SIGTERM and writes its pid. The
	 * leader dies of SIGTERM; the grandchild must be killed anyway.
	 */
	snprintf(pidfile, sizeof pidfile, "%s/leftover.pid", test_dir);
	t0 = test_now_ms();
	d = task_sh("sh -c 'trap \"\" TERM; echo $$; exec sleep 1000' & wait", false, 1000);
	took = test_now_ms() - t0;
	check_error(d, POOL_TIMED_OUT, ERR_TIMED_OUT, "timed out after 1s");
	CHECK(took >= 1000 && took < 10000, "took %llu ms", (unsigned long long)took);
	CHECK(result_int(d, "signal") == SIGTERM, "leader's signal");
	text = (char *)result_str(d, "stdout");
	CHECK((gpid = atol(text)) > 0, "no grandchild pid in \"%s\"", text);
	CHECK(proc_gone(gpid), "grandchild %ld survived the timeout", gpid);
	task_delete(d);

	/* a leader ignoring SIGTERM: SIGKILL after the grace period (200 ms here) */
	t0 = test_now_ms();
	d = task_sh("trap '' TERM; sleep 1000", false, 100);
	took = test_now_ms() - t0;
	check_error(d, POOL_TIMED_OUT, ERR_TIMED_OUT, NULL);
	CHECK(took >= 300 && took < 10000, "took %llu ms (timeout 100 + grace 200)",
	    (unsigned long long)took);
	CHECK(result_int(d, "signal") == SIGKILL, "leader's signal");
	task_delete(d);

	/* background processes left behind after a normal exit die with the task */
	snprintf(json, sizeof json, "sleep 1000 & echo $! > %s; echo hi", pidfile);
	t0 = test_now_ms();
	d = task_sh(json, false, 0);
	CHECK(d->state == POOL_SUCCEEDED, "%s", d->t.error_message);
	CHECK(test_now_ms() - t0 < 10000, "waited for the background sleep");
	CHECK_STR(result_str(d, "stdout"), "hi\n");
	gpid = atol(read_file(pidfile));
	CHECK(gpid > 0 && proc_gone(gpid), "background sleep %ld survived", gpid);
	task_delete(d);

	/*
	 * A process that left the group (its own session) and holds stdout,
	 * writing without end: the task still ends when its leader does, with
	 * what was read. The escaped process is not tracked: we kill it here.
	 */
	snprintf(json, sizeof json, "mkfifo %s/escape.fifo; "
	    "setsid sh -c 'echo $$ > %s/escape.fifo; exec yes escaped' & "
	    "read pid < %s/escape.fifo; echo $pid >&2", test_dir, test_dir, test_dir);
	t0 = test_now_ms();
	d = task_sh(json, false, 0);
	CHECK(d->state == POOL_SUCCEEDED, "%s", d->t.error_message);
	CHECK(test_now_ms() - t0 < 10000, "an escaped writer held the task");
	gpid = atol(result_str(d, "stderr"));
	CHECK(gpid > 0 && kill((pid_t)gpid, SIGKILL) == 0, "escaped pid %ld", gpid);
	text = (char *)result_str(d, "stdout");
	for (size_t at = 0; text[at] != '\0'; at += 8)
		CHECK(strncmp(text + at, "escaped\n", strlen(text + at) < 8 ? strlen(text + at) : 8) == 0,
		    "stdout at %zu", at);
	task_delete(d);
	printf("ok - timeout: SIGTERM to the group, SIGKILL after grace, TERM-ignoring grandchild and leftovers gone; an escaped writer does not hold the task\n");
}

static void
test_cancel(void)
{
	struct double_task *d;
	pthread_t th;
	uint64_t t0;

	test_current = "cancel";
	d = task_new("{\"argv\": [\"sleep\", \"1000\"]}", true, 0);
	th = task_start(d);
	CHECK(task_wait_for(d, pred_started), "never started");
	t0 = test_now_ms();
	task_cancel(d);
	CHECK(task_wait_for(d, pred_finished), "cancel did not end the run");
	pthread_join(th, NULL);
	CHECK(test_now_ms() - t0 < 5000, "cancel took too long");
	check_error(d, POOL_CANCELLED, ERR_CANCELLED, "cancelled");
	CHECK(result_int(d, "signal") == SIGTERM, "signal");
	task_delete(d);

	/* cancelled before it ran: nothing is started */
	d = task_new("{\"argv\": [\"true\"]}", true, 0);
	atomic_store(&d->cancel, true);
	task_run(d);
	check_error(d, POOL_CANCELLED, ERR_CANCELLED, NULL);
	CHECK(json_array_size(d->events) == 0 && d->t.result == NULL, "it ran");
	task_delete(d);

	/* cancel while task_emit is held by a slow client */
	d = task_new("{\"argv\": [\"sh\", \"-c\", \"while :; do echo spam; done\"]}", true, 0);
	d->gate_closed = true;
	th = task_start(d);
	CHECK(task_wait_for(d, pred_blocked), "emit never blocked");
	task_cancel(d);
	CHECK(task_wait_for(d, pred_finished), "cancel did not end a run blocked in emit");
	pthread_join(th, NULL);
	check_error(d, POOL_CANCELLED, ERR_CANCELLED, NULL);
	task_delete(d);
	printf("ok - cancel: running (SIGTERM), before start (nothing runs), while blocked by a slow client\n");
}

static bool
pred_gated(struct double_task *d)
{
	return d->gated;
}

/* Whether path exists, after a moment for a program that was let through to make it. */
static bool
gate_marker(const char *path)
{
	return access(path, F_OK) == 0;
}

/*
 * The start gate (journal on): the child is made and waits at the gate;
 * its program runs only once GO comes, never after STOP (a cancel), and at
 * once when the record is there before the spawn. Both clone paths.
 */
static void
test_start_gate(void)
{
	struct double_task *d;
	char json[1024], marker[512];
	pthread_t th;

	test_current = "start gate";
	snprintf(marker, sizeof marker, "%s/gate.marker", test_dir);
	snprintf(json, sizeof json, "{\"argv\": [\"touch\", \"%s\"]}", marker);
	for (int clone3 = 1; clone3 >= 0; clone3--) {
		spawn_use_clone3(clone3 == 1);
		unlink(marker);
		d = task_new(json, true, 0);
		d->t.start_barrier = true;
		th = task_start(d);
		CHECK(task_wait_for(d, pred_gated), "the gate was never armed");
		usleep(300 * 1000);
		CHECK(!gate_marker(marker), "the program ran before its gate opened");
		CHECK(!d->finished && json_array_size(d->events) == 0, "started before its gate opened");
		pthread_mutex_lock(&d->lock);
		double_gate_write(d, TASK_GATE_GO);
		pthread_mutex_unlock(&d->lock);
		CHECK(task_wait_for(d, pred_finished), "GO did not let it run");
		pthread_join(th, NULL);
		CHECK(d->state == POOL_SUCCEEDED, "%s", d->t.error_message);
		CHECK(gate_marker(marker), "GO came, the program did not run");
		CHECK(pred_started(d), "no started event");
		task_delete(d);

		/* a cancel while it waits: STOP, and nothing runs */
		unlink(marker);
		d = task_new(json, true, 0);
		d->t.start_barrier = true;
		th = task_start(d);
		CHECK(task_wait_for(d, pred_gated), "the gate was never armed");
		task_cancel(d);
		CHECK(task_wait_for(d, pred_finished), "STOP did not end the run");
		pthread_join(th, NULL);
		check_error(d, POOL_CANCELLED, ERR_CANCELLED, "cancelled before it started");
		CHECK(json_array_size(d->events) == 0 && d->t.result == NULL, "it started");
		usleep(100 * 1000);
		CHECK(!gate_marker(marker), "the program ran after STOP");
		task_delete(d);
	}
	spawn_use_clone3(true);

	/* the record came before the spawn: no gate */
	unlink(marker);
	d = task_new(json, false, 0);
	d->t.start_barrier = true;
	d->recorded = true;
	task_run(d);
	CHECK(d->state == POOL_SUCCEEDED && gate_marker(marker), "%s", d->t.error_message);
	task_delete(d);
	printf("ok - start gate: the child waits for GO (clone3 and clone), STOP (cancel) runs "
	    "nothing, a record there before the spawn needs no gate\n");
}

/*
 * A follower from the start that finds no spool file (it is made at the
 * first output) but comes once output passed output_limit: what it is
 * given is the whole output, from the file, not the capture's first bytes.
 */
static void
test_follow_kept_from_the_spool(void)
{
	char dir[512], path[640], *cause = NULL;
	struct double_task *d;
	struct conf c;
	struct stat sb;
	json_t *events;
	pthread_t th;
	size_t got = 0, i;
	json_t *ev;
	uint64_t until;

	test_current = "follow kept from the spool";
	snprintf(dir, sizeof dir, "%s/state", test_dir);
	CHECK(mkdir(dir, 0700) == 0, "mkdir %s", dir);
	conf_init(&c);
	CHECK(spool_start(dir, &c, &cause) == 0, "spool_start: %s", cause);
	conf_free(&c);
	d = task_new("{\"argv\": [\"sh\", \"-c\", \"head -c 3000 /dev/zero | tr '\\\\0' y; "
	    "exec sleep 1000\"], \"output_limit\": 100}", false, 0);
	d->t.id = 4242;
	th = task_start(d);
	snprintf(path, sizeof path, "%s/spool/4242", dir);
	for (until = test_now_ms() + TEST_WAIT_S * 1000;
	    (stat(path, &sb) == -1 || sb.st_size < 3000) && test_now_ms() < until;)
		usleep(10 * 1000);
	CHECK(stat(path, &sb) == 0 && sb.st_size >= 3000, "the output never reached the file");
	events = json_array();
	CHECK(task_kind_exec.follow(&d->t, events), "the run is over");
	json_array_foreach(events, i, ev) {
		const char *data = json_string_value(json_object_get(ev, "data"));

		CHECK(data != NULL, "an event without data");
		for (size_t k = 0; data[k] != '\0'; k++)
			CHECK(data[k] == 'y', "byte %zu", got + k);
		got += strlen(data);
	}
	json_decref(events);
	CHECK(got == 3000, "the follower got %zu of 3000 bytes", got);
	task_cancel(d);
	CHECK(task_wait_for(d, pred_finished), "cancel did not end the run");
	pthread_join(th, NULL);
	task_delete(d);
	spool_stop();
	printf("ok - a follower from the start that found no file gets the whole output from "
	    "the file once the capture is past output_limit\n");
}

static void *
many_worker(void *arg)
{
	unsigned *failures = arg;

	for (int i = 0; i < 100; i++) {
		struct double_task *d = task_new("{\"argv\": [\"true\"]}", false, 10000);

		if (task_run(d) != POOL_SUCCEEDED)
			__atomic_add_fetch(failures, 1, __ATOMIC_RELAXED);
		task_delete(d);
	}
	return NULL;
}

static void
test_many_and_no_zombies(void)
{
	pthread_t th[4];
	unsigned failures = 0;

	test_current = "many";
	for (int i = 0; i < 4; i++)
		CHECK(pthread_create(&th[i], NULL, many_worker, &failures) == 0, "thread");
	for (int i = 0; i < 4; i++)
		pthread_join(th[i], NULL);
	CHECK(failures == 0, "%u of 400 true tasks failed", failures);
	CHECK(count_children() == 0, "%d children left", count_children());
	CHECK(waitpid(-1, NULL, WNOHANG) == -1 && errno == ECHILD, "a child or zombie is left");
	printf("ok - 400 true tasks on 4 threads all succeed; no children or zombies left\n");
}

static void
test_reconfigure(void)
{
	struct conf c;
	struct double_task *d, *old;

	test_current = "reconfigure";
	old = task_new("{\"argv\": [\"env\"]}", false, 0);
	conf_init(&c);
	free(c.exec_env[1]);
	c.exec_env[1] = strdup("ONLY=new");
	c.exec_output_limit = 3;
	exec_configure(&c);
	conf_free(&c);
	d = task_do("{\"argv\": [\"env\"]}", false, 0);
	CHECK_STR(result_str(d, "stdout"), "PAT");
	task_delete(d);
	/* a task parsed before the reload keeps the settings it was parsed with */
	task_run(old);
	CHECK_STR(result_str(old, "stdout"), "PATH=/usr/local/bin:/usr/bin:/bin\nLANG=C.UTF-8\n");
	task_delete(old);
	d = task_do("{\"argv\": [\"env\"], \"output_limit\": 100}", false, 0);
	CHECK_STR(result_str(d, "stdout"), "PATH=/usr/local/bin:/usr/bin:/bin\nONLY=new\n");
	task_delete(d);
	printf("ok - reconfigure: new tasks see the new settings, accepted ones keep theirs\n");
}

static void
test_cleanup(void)
{
	char cmd[600];

	snprintf(cmd, sizeof cmd, "rm -rf '%s'", test_dir);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", test_dir);
}

/*
 * Forks a process that leads a group of its own, from this thread, which
 * stays until told to go: a thread's children go to the main thread when it
 * exits, and the main thread's children are the ones tpd takes for orphans.
 */
struct stranger {
	pid_t pid;
	int made[2], go[2];
};

static void *
fork_group_leader(void *arg)
{
	struct stranger *st = arg;
	char b;
	pid_t pid = fork();

	if (pid == 0) {
		setpgid(0, 0);
		for (;;)
			pause();
	}
	if (pid > 0)
		setpgid(pid, pid);      /* either side may be first */
	st->pid = pid;
	if (write(st->made[1], "x", 1) != 1 || read(st->go[0], &b, 1) < 0)
		return NULL;
	return NULL;
}

/*
 * A task's end after its leader was reaped and its pid given to a stranger
 * that leads a group of its own (pid_max 32768 wraps in seconds on a busy
 * host): pgroup_kill_wait must leave that group alone. It sent SIGKILL to
 * -pid, which killed the stranger.
 */
static void
test_reaped_leaders_pid_named_by_a_stranger(void)
{
	struct stranger st = { .pid = -1 };
	struct pgroup_task pt;
	pthread_t th;
	int status = 0;
	char b;

	CHECK(pipe(st.made) == 0 && pipe(st.go) == 0, "pipe");
	pgroup_task_prepare(&pt);
	CHECK(pthread_create(&th, NULL, fork_group_leader, &st) == 0, "pthread_create");
	CHECK(read(st.made[0], &b, 1) == 1 && st.pid > 0, "fork");
	CHECK(getpgid(st.pid) == st.pid, "the stranger leads its group");
	/* the task whose leader had that pid ends now */
	pgroup_task_begin(&pt, st.pid);
	CHECK(pgroup_kill_wait(&pt, 300) == 0, "processes left");
	CHECK(waitpid(st.pid, &status, WNOHANG) == 0, "the stranger was killed (status %d)",
	    status);
	kill(st.pid, SIGKILL);
	CHECK(waitpid(st.pid, &status, 0) == st.pid, "waitpid");
	CHECK(write(st.go[1], "x", 1) == 1, "write");
	pthread_join(th, NULL);
	close(st.made[0]);
	close(st.made[1]);
	close(st.go[0]);
	close(st.go[1]);
}

static volatile sig_atomic_t usr1_seen;

static void
usr1_count(int sig)
{
	(void)sig;
	usr1_seen++;
}

/*
 * pgroup_signal for a pid that is not a task's (0, -1: a run whose spawn
 * never happened) must not become kill(0) (tpd's own process group: the
 * daemon, and whatever started it) or kill(1). Checked in a child that
 * leads a session of its own, so that a failure signals nothing else.
 */
static void
test_no_signal_to_our_own_group(void)
{
	int status;
	pid_t pid = fork();

	CHECK(pid != -1, "fork");
	if (pid == 0) {
		struct sigaction sa = { .sa_handler = usr1_count };

		setsid();
		sigaction(SIGUSR1, &sa, NULL);
		pgroup_signal(0, -1, SIGUSR1);
		pgroup_signal(-1, -1, 0);       /* kill(1, 0) before: harmless, refused now */
		_exit(usr1_seen == 0 ? 0 : 1);
	}
	CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status), "waitpid");
	CHECK(WEXITSTATUS(status) == 0, "pgroup_signal(0) signalled its own process group");
}

/* A children list that filled its buffer loses its last pid when that may be cut. */
static void
test_children_list_cut(void)
{
	char full[] = "123 4567 89", spaced[] = "123 4567 ", shorter[] = "123 4567 89",
	    one[] = "98765";

	test_current = "children list cut";
	CHECK(pgroup_children_trim(full, 11, 12) == 9 && strcmp(full, "123 4567 ") == 0,
	    "a full buffer kept %s", full);
	CHECK(pgroup_children_trim(spaced, 9, 10) == 9, "a full buffer ending a pid lost it");
	CHECK(pgroup_children_trim(shorter, 11, 64) == 11 && strcmp(shorter, "123 4567 89") == 0,
	    "a list that did not fill its buffer was cut");
	CHECK(pgroup_children_trim(one, 5, 6) == 0 && one[0] == '\0', "a lone cut pid kept");
	printf("ok - children list: a pid a full buffer may have cut is left out\n");
}

static const struct test_case cases[] = {
	{ "utf8", test_utf8 },
	{ "base64", test_base64 },
	{ "capture", test_capture },
	{ "parse_errors", test_parse_errors },
	{ "exit_status", test_exit_status },
	{ "output_and_stdin", test_output_and_stdin },
	{ "environment", test_environment },
	{ "cwd_and_spawn_errors", test_cwd_and_spawn_errors },
	{ "spawn_creds", test_spawn_creds },
	{ "spawn_hold_outputs", test_spawn_hold_outputs },
	{ "spawn_with_clone", test_spawn_with_clone },
	{ "fds_and_signals", test_fds_and_signals },
	{ "truncation_and_binary", test_truncation_and_binary },
	{ "stream", test_stream },
	{ "timeout_kills_group", test_timeout_kills_group },
	{ "cancel", test_cancel },
	{ "start_gate", test_start_gate },
	{ "follow_kept_from_the_spool", test_follow_kept_from_the_spool },
	{ "many_and_no_zombies", test_many_and_no_zombies },
	{ "reaped_leaders_pid_named_by_a_stranger", test_reaped_leaders_pid_named_by_a_stranger },
	{ "no_signal_to_our_own_group", test_no_signal_to_our_own_group },
	{ "children_list_cut", test_children_list_cut },
	{ "reconfigure", test_reconfigure },
};

int
main(int argc, char **argv)
{
	struct conf c;
	int rc;

	setvbuf(stdout, NULL, _IOLBF, 0);
	CHECK(mkdtemp(test_dir) != NULL, "mkdtemp");
	atexit(test_cleanup);

	conf_init(&c);
	c.exec_output_limit_max = 1048576;
	c.exec_output_limit = 65536;
	c.exec_kill_grace_ms = 200;
	exec_configure(&c);
	conf_free(&c);

	rc = test_run(cases, TEST_COUNT(cases), argc, argv);
	exec_configure(NULL);
	return rc;
}
