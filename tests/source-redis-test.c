/*
 * source-redis-test.c: a [source NAME] of type redis-stream against a real
 * redis-server, with a pool of the test's own in place of the daemon (a
 * struct source_host: room is its free slots, a task is a timer that
 * ends it). Checks the Redis side of the contract: back-pressure, one
 * result per entry written with its ack, bad entries answered at once,
 * claims, refreshed claims, dead letters, outages (Redis stopped and
 * started again with its data, Redis hung, Redis absent at start) and
 * both ways of stopping.
 *
 * Each test starts its own redis-server on a Unix socket in a temporary
 * directory (--port 0 --save '' --appendonly no unless the test needs its
 * data across a restart) and stops it. Everything is waited for by
 * polling Redis or the source's figures, with a deadline; nothing waits
 * by sleeping except the outages themselves.
 *
 * Usage: source-redis-test [NAME...]. Exits 77 (skipped) when
 * redis-server cannot be started, saying why.
 */
#include "config.h"

#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <errno.h>
#include <ftw.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>
#include <hiredis/hiredis.h>
#include <jansson.h>

#include "conf/conf.h"
#include "base/log.h"
#define TEST_ALARM_S 240        /* a test that hangs is killed (and says so) */
#include "check.h"
#include "source/source-redis.h"

#define SKIP 77

static const char *sanitizer_slow;      /* TPD_TEST_SLOW: deadlines stretch */
static double slow = 1;

/* ---------------------------------------------------------------- redis-server */

static char rdir[] = "/tmp/source-redis-test.XXXXXX";
static char rsock[128];
static pid_t redis_pid;
static bool redis_aof;
static redisContext *rc;        /* the test's own synchronous client */

static void
msleep(unsigned ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000 };

	while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
		;
}

/* Connects the test's client, retrying while the server starts; false if it never answers. */
static bool
rc_connect(unsigned tries)
{
	struct timeval tv = { 5, 0 };

	for (unsigned i = 0; i < tries; i++) {
		if (rc != NULL)
			redisFree(rc);
		rc = redisConnectUnixWithTimeout(rsock, tv);
		if (rc != NULL && rc->err == 0) {
			redisReply *r = redisCommand(rc, "PING");
			bool ok = r != NULL && r->type == REDIS_REPLY_STATUS;
			freeReplyObject(r);
			if (ok)
				return true;
		}
		msleep(10);
	}
	return false;
}

/* Starts redis-server on rsock; with aof, its data survives a stop and start. */
static bool
redis_start(bool aof)
{
	char logf[160];

	redis_aof = aof;
	snprintf(logf, sizeof logf, "%s/redis.log", rdir);
	if ((redis_pid = fork()) == -1)
		return false;
	if (redis_pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);       /* gone with the test, whatever happens */
		if (aof)
			execlp("redis-server", "redis-server", "--port", "0", "--unixsocket", rsock,
			    "--unixsocketperm", "700", "--dir", rdir, "--save", "", "--appendonly",
			    "yes", "--appendfsync", "always", "--logfile", logf, (char *)NULL);
		else
			execlp("redis-server", "redis-server", "--port", "0", "--unixsocket", rsock,
			    "--unixsocketperm", "700", "--dir", rdir, "--save", "", "--appendonly",
			    "no", "--logfile", logf, (char *)NULL);
		_exit(127);
	}
	if (!rc_connect(500)) {
		kill(redis_pid, SIGKILL);
		waitpid(redis_pid, NULL, 0);
		redis_pid = 0;
		return false;
	}
	return true;
}

/* A fresh start: what an earlier test left in the directory is gone. */
static int rm_entry(const char *, const struct stat *, int, struct FTW *);

static void
redis_begin(bool aof)
{
	char path[200];

	snprintf(path, sizeof path, "%s/appendonlydir", rdir);
	nftw(path, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
	CHECK(redis_start(aof), "redis-server does not start (see %s/redis.log)", rdir);
}

/* Stops it for real (SIGTERM: it writes what it must and exits) and reaps it. */
static void
redis_stop(void)
{
	if (rc != NULL) {
		redisFree(rc);
		rc = NULL;
	}
	if (redis_pid > 0) {
		kill(redis_pid, SIGCONT);
		kill(redis_pid, SIGTERM);
		waitpid(redis_pid, NULL, 0);
		redis_pid = 0;
	}
	unlink(rsock);
}

static redisReply *
cmd(const char *fmt, ...)
{
	va_list ap;
	redisReply *r;

	va_start(ap, fmt);
	r = redisvCommand(rc, fmt, ap);
	va_end(ap);
	CHECK(r != NULL, "redis: %s", rc->errstr);
	CHECK(r->type != REDIS_REPLY_ERROR, "redis: %s", r->str);
	return r;
}

static long long
cmd_int(const char *fmt, ...)
{
	va_list ap;
	redisReply *r;
	long long v;

	va_start(ap, fmt);
	r = redisvCommand(rc, fmt, ap);
	va_end(ap);
	CHECK(r != NULL && r->type == REDIS_REPLY_INTEGER, "redis: expected an integer");
	v = r->integer;
	freeReplyObject(r);
	return v;
}

/* The count of entries pending in the group (XPENDING's summary). */
static long long
pending_count(const char *stream, const char *group)
{
	redisReply *r = cmd("XPENDING %s %s", stream, group);
	long long n = r->element[0]->integer;

	freeReplyObject(r);
	return n;
}

/* Pending entries of one consumer. */
static long long
pending_of(const char *stream, const char *group, const char *consumer)
{
	redisReply *r = redisCommand(rc, "XPENDING %s %s - + 100000 %s", stream, group, consumer);
	long long n;

	CHECK(r != NULL, "redis: %s", rc->errstr);
	n = r->type == REDIS_REPLY_ARRAY ? (long long)r->elements : 0; /* no group yet: none */

	freeReplyObject(r);
	return n;
}

/* ---------------------------------------------------------------- a pool of the test's own */

struct ftask {
	struct fake *f;
	source_done_fn done;
	void *arg;
	struct event *ev;
	uint64_t id;
	char *value;            /* echo's value, as JSON */
	char *label;
	unsigned attempt;
	struct ftask *next, *prev;
};

struct fake {
	struct event_base *base;
	struct source_redis *src;
	unsigned slots;                 /* W + Q: what it accepts at once */
	unsigned in_flight, max_in_flight;
	uint64_t run_ms;                /* how long an echo task runs */
	bool closed;
	uint64_t next_id;
	unsigned accepted, full, finished;
	struct ftask *tasks;
};

static void
ftask_end(struct ftask *t, const char *state)
{
	struct fake *f = t->f;
	char *done;

	if (strcmp(state, "succeeded") == 0) {
		if (asprintf(&done, "{\"event\":\"done\",\"task\":%llu,\"pool\":\"default\","
		    "\"state\":\"succeeded\",\"queued_ms\":0,\"run_ms\":1,\"result\":{\"value\":%s}}",
		    (unsigned long long)t->id, t->value) == -1)
			abort();
	} else if (asprintf(&done, "{\"event\":\"done\",\"task\":%llu,\"pool\":\"default\","
	    "\"state\":\"%s\",\"queued_ms\":0,\"run_ms\":1,\"error\":{\"code\":\"%s\","
	    "\"message\":\"x\"}}", (unsigned long long)t->id, state, state) == -1)
		abort();
	if (t->prev != NULL)
		t->prev->next = t->next;
	else
		f->tasks = t->next;
	if (t->next != NULL)
		t->next->prev = t->prev;
	f->in_flight--;
	f->finished++;
	t->done(t->arg, state, done, strlen(done));
	free(done);
	event_free(t->ev);
	free(t->value);
	free(t->label);
	free(t);
	if (f->src != NULL)
		source_redis_kick(f->src);
}

static void
ftask_cb(evutil_socket_t fd, short what, void *arg)
{
	ftask_end(arg, "succeeded");
}

static unsigned
fake_room(void *ctx, const char *pool)
{
	struct fake *f = ctx;

	return f->closed || f->in_flight >= f->slots ? 0 : f->slots - f->in_flight;
}

static enum source_verdict
fake_submit(void *ctx, const struct source_task *st, uint64_t *task_id, char **cause)
{
	struct fake *f = ctx;
	const char *kind = json_string_value(json_object_get(st->spec, "kind"));
	json_t *ms = json_object_get(st->spec, "ms");
	struct ftask *t;
	struct timeval tv;
	uint64_t run = f->run_ms;

	if (kind == NULL || (strcmp(kind, "echo") != 0 && strcmp(kind, "sleep") != 0))
		return cause_set(cause, "unknown task kind \"%s\"", kind ? kind : "?"),
		    SOURCE_BAD;
	if (f->closed)
		return SOURCE_CLOSED;
	if (f->in_flight >= f->slots) {
		f->full++;
		return SOURCE_FULL;
	}
	CHECK((t = calloc(1, sizeof *t)) != NULL, "calloc");
	t->f = f;
	t->done = st->done;
	t->arg = st->arg;
	t->id = ++f->next_id;
	t->attempt = st->attempt;
	t->label = st->label ? strdup(st->label) : NULL;
	t->value = json_dumps(json_object_get(st->spec, "value") ? json_object_get(st->spec,
	    "value") : json_null(), JSON_ENCODE_ANY | JSON_COMPACT);
	if (strcmp(kind, "sleep") == 0 && json_is_integer(ms))
		run = (uint64_t)json_integer_value(ms);
	t->ev = evtimer_new(f->base, ftask_cb, t);
	tv.tv_sec = (time_t)(run / 1000);
	tv.tv_usec = (suseconds_t)(run % 1000) * 1000;
	evtimer_add(t->ev, &tv);
	t->next = f->tasks;
	if (f->tasks != NULL)
		f->tasks->prev = t;
	f->tasks = t;
	f->accepted++;
	if (++f->in_flight > f->max_in_flight)
		f->max_in_flight = f->in_flight;
	*task_id = t->id;
	return SOURCE_ACCEPTED;
}

/* What shutdown now does to the tasks: every one ends cancelled. */
static void
fake_cancel_all(struct fake *f)
{
	f->closed = true;
	while (f->tasks != NULL)
		ftask_end(f->tasks, "cancelled");
}

static struct event_base *base;

static void
fake_init(struct fake *f, unsigned slots, uint64_t run_ms)
{
	memset(f, 0, sizeof *f);
	f->base = base;
	f->slots = slots;
	f->run_ms = run_ms;
}

/* A source's settings, as conf.c fills them, for stream "tasks", group "g". */
static void
conf_for(struct conf_source *cs, const char *name, const char *consumer)
{
	static char redis[160];

	snprintf(redis, sizeof redis, "unix:%s", rsock);
	memset(cs, 0, sizeof *cs);
	cs->name = (char *)name;
	cs->type = (char *)"redis-stream";
	cs->redis = redis;
	cs->stream = (char *)"tasks";
	cs->group = (char *)"g";
	cs->consumer = (char *)consumer;
	cs->pool = (char *)"default";
	cs->results = (char *)"tasks:results";
	cs->dead_letter = (char *)"tasks:dead";
	cs->claim_idle_ms = 60000;
	cs->max_deliveries = 3;
	cs->results_maxlen = 100000;
	cs->timeout_ms = 2000;
	cs->backoff_max_ms = 200;
}

static struct source_redis *
source_for(struct fake *f, const struct conf_source *cs)
{
	struct source_host host = { fake_room, fake_submit, f };
	char *cause = NULL;
	struct source_redis *s = source_redis_new(base, cs, &host, &cause);

	CHECK(s != NULL, "source_redis_new: %s", cause ? cause : "?");
	f->src = s;
	return s;
}

/* ---------------------------------------------------------------- running the loop */

typedef bool (*cond_fn)(void *);

static bool ev_stop;

static void
tick_cb(evutil_socket_t fd, short what, void *arg)
{
	event_base_loopbreak(base);
}

/* Runs the loop until cond holds (checked every 5 ms), failing after seconds. */
static void
run_until(cond_fn cond, void *arg, double seconds, const char *what)
{
	struct timespec t0;
	struct timeval tv = { 0, 5000 };
	struct event *tick = event_new(base, -1, EV_PERSIST, tick_cb, NULL);

	clock_gettime(CLOCK_MONOTONIC, &t0);
	evtimer_add(tick, &tv);
	ev_stop = false;
	while (!cond(arg)) {
		CHECK(test_ms_since(&t0) < (uint64_t)(seconds * slow * 1000),
		    "timed out waiting until %s", what);
		event_base_loop(base, EVLOOP_ONCE);
	}
	event_free(tick);
}

/* Runs the loop for ms (to let something not happen). */
static void
run_for(unsigned ms)
{
	struct timespec t0;
	struct timeval tv = { 0, 5000 };
	struct event *tick = event_new(base, -1, EV_PERSIST, tick_cb, NULL);

	clock_gettime(CLOCK_MONOTONIC, &t0);
	evtimer_add(tick, &tv);
	while (test_ms_since(&t0) < ms)
		event_base_loop(base, EVLOOP_ONCE);
	event_free(tick);
}

struct want {
	const char *key;
	long long n;
};

static bool
xlen_at_least(void *arg)
{
	struct want *w = arg;

	return cmd_int("XLEN %s", w->key) >= w->n;
}

static json_t *
stats_of(struct source_redis *s)
{
	return source_redis_stats(s);
}

static long long
stat_int(struct source_redis *s, const char *key)
{
	json_t *j = stats_of(s);
	long long v = json_integer_value(json_object_get(j, key));

	json_decref(j);
	return v;
}

static bool
stat_state_is(struct source_redis *s, const char *state)
{
	json_t *j = stats_of(s);
	bool same = strcmp(json_string_value(json_object_get(j, "state")), state) == 0;

	json_decref(j);
	return same;
}

struct acked_want {
	struct source_redis *s;
	long long n;
};

static bool
acked_reached(void *arg)
{
	struct acked_want *w = arg;

	return stat_int(w->s, "acked") >= w->n;
}

/* The source has seen n acks answered (EXEC's reply comes after Redis shows the results). */
static void
wait_acked(struct source_redis *s, long long n)
{
	run_until(acked_reached, &(struct acked_want){ s, n }, 10, "the acks are answered");
}

struct state_want {
	struct source_redis *s;
	const char *state;
};

static bool
state_reached(void *arg)
{
	struct state_want *w = arg;

	return stat_state_is(w->s, w->state);
}

static void
wait_state(struct source_redis *s, const char *state)
{
	struct state_want w = { s, state };
	char what[64];

	snprintf(what, sizeof what, "the source is %s", state);
	run_until(state_reached, &w, 10, what);
}

/* ---------------------------------------------------------------- results */

struct result {
	char *entry;
	char *id;               /* the entry's own id field, or NULL */
	char *consumer;
	unsigned attempt;
	json_t *done;
};

/* Every entry of the results stream. */
static struct result *
results_read(const char *stream, size_t *n)
{
	redisReply *r = cmd("XRANGE %s - +", stream);
	struct result *res = calloc(r->elements + 1, sizeof *res);

	*n = r->elements;
	for (size_t i = 0; i < r->elements; i++) {
		redisReply *f = r->element[i]->element[1];
		for (size_t j = 0; j + 1 < f->elements; j += 2) {
			const char *k = f->element[j]->str, *v = f->element[j + 1]->str;
			if (strcmp(k, "entry") == 0)
				res[i].entry = strdup(v);
			else if (strcmp(k, "id") == 0)
				res[i].id = strdup(v);
			else if (strcmp(k, "consumer") == 0)
				res[i].consumer = strdup(v);
			else if (strcmp(k, "attempt") == 0)
				res[i].attempt = (unsigned)atoi(v);
			else if (strcmp(k, "done") == 0) {
				json_error_t err;
				res[i].done = json_loads(v, 0, &err);
				CHECK(res[i].done != NULL, "result %zu: done is not JSON: %s", i,
				    err.text);
			} else
				CHECK(0, "result %zu has an unexpected field %s", i, k);
		}
		CHECK(res[i].entry != NULL && res[i].consumer != NULL && res[i].attempt > 0 &&
		    res[i].done != NULL, "result %zu lacks a field", i);
	}
	freeReplyObject(r);
	return res;
}

static void
results_free(struct result *res, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free(res[i].entry);
		free(res[i].id);
		free(res[i].consumer);
		json_decref(res[i].done);
	}
	free(res);
}

static const char *
done_state(const struct result *r)
{
	return json_string_value(json_object_get(r->done, "state"));
}

static const char *
done_code(const struct result *r)
{
	return json_string_value(json_object_get(json_object_get(r->done, "error"), "code"));
}

static const struct result *
result_for(const struct result *res, size_t n, const char *entry)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(res[i].entry, entry) == 0)
			return &res[i];
	return NULL;
}

/* XADDs n echo entries to tasks, each with "id" = "job-I"; fills ids (malloc'd) if given. */
static void
add_echoes(unsigned n, char ***ids)
{
	char task[64], cid[32];

	if (ids != NULL)
		*ids = calloc(n, sizeof **ids);
	for (unsigned i = 0; i < n; i++) {
		snprintf(task, sizeof task, "{\"kind\":\"echo\",\"value\":%u}", i);
		snprintf(cid, sizeof cid, "job-%u", i);
		redisAppendCommand(rc, "XADD tasks * task %s id %s", task, cid);
	}
	for (unsigned i = 0; i < n; i++) {
		redisReply *r;
		CHECK(redisGetReply(rc, (void **)&r) == REDIS_OK && r->type == REDIS_REPLY_STRING,
		    "XADD");
		if (ids != NULL)
			(*ids)[i] = strdup(r->str);
		freeReplyObject(r);
	}
}

static void
free_ids(char **ids, unsigned n)
{
	for (unsigned i = 0; ids != NULL && i < n; i++)
		free(ids[i]);
	free(ids);
}

static void
stop_and_free(struct source_redis *s)
{
	source_redis_stop(s, false, NULL, NULL);
	source_redis_free(s);
}

/* ---------------------------------------------------------------- the tests */

static struct fake *sample_fake;
static unsigned sample_max;     /* most entries the consumer had pending at once */

static bool
all_results_sampling(void *arg)
{
	struct want *w = arg;
	long long p = pending_of("tasks", "g", "c1");

	if (p > sample_max)
		sample_max = (unsigned)p;
	return cmd_int("XLEN %s", w->key) >= w->n;
}

/*
 * 3000 entries through a pool that takes 7 at once: never more in flight
 * (the pool's count, and the consumer's pending count in Redis, sampled),
 * one result per entry with its fields, every entry acked.
 */
static void
test_backpressure_one_result_each(void)
{
	struct conf_source cs;
	struct fake f;
	struct source_redis *s;
	struct result *res;
	char **ids;
	size_t n;
	const unsigned N = 3000;

	redis_begin(false);
	add_echoes(N, &ids);
	fake_init(&f, 7, 1);
	conf_for(&cs, "jobs", "c1");
	s = source_for(&f, &cs);
	sample_fake = &f;
	sample_max = 0;
	run_until(all_results_sampling, &(struct want){ "tasks:results", N }, 60,
	    "every entry has a result");
	CHECK(f.max_in_flight <= 7, "the pool had %u tasks at once, more than its 7",
	    f.max_in_flight);
	CHECK(f.full == 0, "the source offered a task the pool had no room for (%u times)",
	    f.full);
	/* pending in Redis, results on their way to EXEC included: at most the pool's room */
	CHECK(sample_max <= 7, "the consumer had %u entries pending at once", sample_max);
	CHECK(sample_max >= 1, "the sampling saw nothing pending");
	res = results_read("tasks:results", &n);
	CHECK_EQ(n, N, "results");
	for (unsigned i = 0; i < N; i++) {
		const struct result *r = result_for(res, n, ids[i]);
		char cid[32];
		CHECK(r != NULL, "entry %s has no result", ids[i]);
		snprintf(cid, sizeof cid, "job-%u", i);
		CHECK(r->id != NULL && strcmp(r->id, cid) == 0, "entry %s: id %s", ids[i],
		    r->id ? r->id : "(none)");
		CHECK(strcmp(r->consumer, "c1") == 0 && r->attempt == 1, "entry %s: consumer "
		    "%s attempt %u", ids[i], r->consumer, r->attempt);
		CHECK(strcmp(done_state(r), "succeeded") == 0, "entry %s: %s", ids[i],
		    done_state(r));
		CHECK(json_integer_value(json_object_get(json_object_get(r->done, "result"),
		    "value")) == i, "entry %s: the result of another task", ids[i]);
	}
	for (size_t i = 0; i + 1 < n; i++)
		for (size_t j = i + 1; j < n && j < i + 50; j++)
			CHECK(strcmp(res[i].entry, res[j].entry) != 0, "entry %s has two results",
			    res[i].entry);
	results_free(res, n);
	CHECK_EQ(pending_count("tasks", "g"), 0, "entries left pending");
	wait_acked(s, N);
	CHECK_EQ(stat_int(s, "read"), N, "stats read");
	CHECK_EQ(stat_int(s, "acked"), N, "stats acked");
	CHECK_EQ(stat_int(s, "claimed"), 0, "stats claimed");
	CHECK(stat_state_is(s, "connected"), "state");
	stop_and_free(s);
	free_ids(ids, N);
	redis_stop();
}

/* Entries that are not tasks get a failed result at once, acked; the good ones run. */
static void
test_bad_entries_failed_at_once(void)
{
	static const struct {
		const char *fields[6];
		const char *message;    /* a piece of the message */
	} bad[] = {
		{ { "task", "{not json", NULL }, "not JSON" },
		{ { "task", "[1,2]", NULL }, "must be a JSON object" },
		{ { "task", "{\"kind\":\"echo\",\"kind\":\"x\"}", NULL }, "not JSON" },
		{ { "id", "x", NULL }, "missing field \"task\"" },
		{ { "task", "{\"kind\":\"echo\"}", "colour", "red", NULL }, "unknown field \"colour\"" },
		{ { "task", "{\"kind\":\"echo\"}", "queue_timeout_ms", "5s", NULL }, "queue_timeout_ms" },
		{ { "task", "{\"kind\":\"echo\"}", "queue_timeout_ms", "0", NULL }, "queue_timeout_ms" },
		{ { "task", "{\"kind\":\"nope\"}", NULL }, "unknown task kind" },
		{ { "task", "{\"kind\":\"echo\"}", "task", "{}", NULL }, "given twice" },
	};
	size_t nbad = sizeof bad / sizeof bad[0];
	char *ids[16], *good;
	struct conf_source cs;
	struct fake f;
	struct source_redis *s;
	struct result *res;
	size_t n;
	redisReply *r;

	redis_begin(false);
	for (size_t i = 0; i < nbad; i++) {
		const char *argv[16] = { "XADD", "tasks", "*" };
		int argc = 3;
		for (int j = 0; bad[i].fields[j] != NULL; j++)
			argv[argc++] = bad[i].fields[j];
		r = redisCommandArgv(rc, argc, argv, NULL);
		CHECK(r != NULL && r->type == REDIS_REPLY_STRING, "XADD bad %zu", i);
		ids[i] = strdup(r->str);
		freeReplyObject(r);
	}
	r = cmd("XADD tasks * task {\"kind\":\"echo\",\"value\":\"ok\"} label lbl "
	    "queue_timeout_ms 5000");
	good = strdup(r->str);
	freeReplyObject(r);
	fake_init(&f, 4, 0);
	conf_for(&cs, "jobs", "c1");
	s = source_for(&f, &cs);
	run_until(xlen_at_least, &(struct want){ "tasks:results", (long long)nbad + 1 }, 20,
	    "every entry has a result");
	res = results_read("tasks:results", &n);
	CHECK_EQ(n, nbad + 1, "results");
	for (size_t i = 0; i < nbad; i++) {
		const struct result *x = result_for(res, n, ids[i]);
		const char *msg;
		CHECK(x != NULL, "bad entry %zu has no result", i);
		CHECK(strcmp(done_state(x), "failed") == 0 && strcmp(done_code(x),
		    "bad_request") == 0, "bad entry %zu: %s %s", i, done_state(x), done_code(x));
		msg = json_string_value(json_object_get(json_object_get(x->done, "error"),
		    "message"));
		CHECK(msg != NULL && strstr(msg, bad[i].message) != NULL, "bad entry %zu: "
		    "message \"%s\" does not say \"%s\"", i, msg ? msg : "", bad[i].message);
		CHECK(json_is_null(json_object_get(x->done, "task")), "bad entry %zu has a task id",
		    i);
		free(ids[i]);
	}
	CHECK(result_for(res, n, good) != NULL &&
	    strcmp(done_state(result_for(res, n, good)), "succeeded") == 0, "the good entry");
	free(good);
	results_free(res, n);
	CHECK_EQ(pending_count("tasks", "g"), 0, "entries left pending");
	wait_acked(s, (long long)nbad + 1);
	CHECK_EQ(stat_int(s, "acked"), nbad + 1, "stats acked");
	CHECK_EQ(f.accepted, 1, "tasks run");
	stop_and_free(s);
	redis_stop();
}

/*
 * Entries a consumer that stopped left pending are claimed after
 * claim_idle and run as attempt 2; one delivered past max_deliveries goes
 * to the dead-letter stream with its reason and gets a lost result.
 */
static void
test_claims_and_dead_letter(void)
{
	struct conf_source cs;
	struct fake f;
	struct source_redis *s;
	struct result *res;
	char **ids;
	size_t n;
	redisReply *r;
	const struct result *dl;

	redis_begin(false);
	freeReplyObject(cmd("XGROUP CREATE tasks g 0 MKSTREAM"));
	add_echoes(3, &ids);
	/* a consumer that reads them and dies */
	freeReplyObject(cmd("XREADGROUP GROUP g ghost COUNT 10 STREAMS tasks >"));
	/* the third was delivered three times already */
	freeReplyObject(cmd("XCLAIM tasks g ghost 0 %s RETRYCOUNT 3", ids[2]));
	fake_init(&f, 8, 0);
	conf_for(&cs, "jobs", "c1");
	cs.claim_idle_ms = 300;
	s = source_for(&f, &cs);
	run_until(xlen_at_least, &(struct want){ "tasks:results", 3 }, 20,
	    "the three claimed entries have results");
	res = results_read("tasks:results", &n);
	CHECK_EQ(n, 3, "results");
	for (int i = 0; i < 2; i++) {
		const struct result *x = result_for(res, n, ids[i]);
		CHECK(x != NULL && strcmp(done_state(x), "succeeded") == 0, "entry %d", i);
		CHECK_EQ(x->attempt, 2, "attempt of a claimed entry");
	}
	dl = result_for(res, n, ids[2]);
	CHECK(dl != NULL && strcmp(done_state(dl), "lost") == 0 &&
	    strcmp(done_code(dl), "lost") == 0, "the dead letter's result");
	CHECK_EQ(dl->attempt, 4, "attempt of the dead letter");
	results_free(res, n);
	r = cmd("XRANGE tasks:dead - +");
	CHECK_EQ(r->elements, 1, "dead letters");
	{
		redisReply *fl = r->element[0]->element[1];
		bool entry = false, task = false, reason = false;
		for (size_t j = 0; j + 1 < fl->elements; j += 2) {
			const char *k = fl->element[j]->str, *v = fl->element[j + 1]->str;
			if (strcmp(k, "entry") == 0)
				entry = strcmp(v, ids[2]) == 0;
			else if (strcmp(k, "task") == 0)
				task = strcmp(v, "{\"kind\":\"echo\",\"value\":2}") == 0;
			else if (strcmp(k, "reason") == 0)
				reason = strstr(v, "max_deliveries") != NULL;
		}
		CHECK(entry && task && reason, "the dead letter's fields");
	}
	freeReplyObject(r);
	CHECK_EQ(f.accepted, 2, "tasks run (not the dead letter)");
	CHECK_EQ(pending_count("tasks", "g"), 0, "entries left pending");
	wait_acked(s, 3);
	CHECK_EQ(stat_int(s, "claimed"), 3, "stats claimed");
	CHECK_EQ(stat_int(s, "dead_lettered"), 1, "stats dead_lettered");
	stop_and_free(s);
	free_ids(ids, 3);
	redis_stop();
}

static bool
task_running(void *arg)
{
	struct fake *f = arg;

	return f->in_flight > 0;
}

static bool
fake_finished(void *arg)
{
	struct fake *f = arg;

	return f->finished > 0;
}

/*
 * A task running for five times claim_idle keeps its claim: a second
 * consumer, claiming all along, never takes it; its result is attempt 1.
 */
static void
test_running_task_keeps_claim(void)
{
	struct conf_source cs1, cs2;
	struct fake f1, f2;
	struct source_redis *s1, *s2;
	struct result *res;
	size_t n;

	redis_begin(false);
	freeReplyObject(cmd("XADD tasks * task {\"kind\":\"sleep\",\"ms\":1500}"));
	fake_init(&f1, 1, 0);
	conf_for(&cs1, "jobs", "c1");
	cs1.claim_idle_ms = 300;
	s1 = source_for(&f1, &cs1);
	run_until(task_running, &f1, 10, "c1 runs the task");
	fake_init(&f2, 4, 0);
	conf_for(&cs2, "jobs2", "c2");
	cs2.claim_idle_ms = 300;
	s2 = source_for(&f2, &cs2);
	run_until(fake_finished, &f1, 20, "the task ends");
	run_until(xlen_at_least, &(struct want){ "tasks:results", 1 }, 10, "its result");
	res = results_read("tasks:results", &n);
	CHECK_EQ(n, 1, "results");
	CHECK(strcmp(res[0].consumer, "c1") == 0 && res[0].attempt == 1, "the result is c1's "
	    "first attempt (%s, %u)", res[0].consumer, res[0].attempt);
	results_free(res, n);
	CHECK_EQ(stat_int(s2, "claimed"), 0, "c2 claimed");
	CHECK_EQ(f2.accepted, 0, "c2 ran");
	stop_and_free(s1);
	stop_and_free(s2);
	redis_stop();
}

struct count_at_least {
	struct fake *f;
	unsigned n;
};

static bool
finished_at_least(void *arg)
{
	struct count_at_least *c = arg;

	return c->f->finished >= c->n;
}

/*
 * Redis stopped (SIGTERM: gone, socket and all) mid-run and started again
 * with its data: the source goes down, says why, reconnects, and every
 * entry gets exactly one result; results of tasks that ended meanwhile
 * were kept and written.
 */
static void
test_redis_restart_loses_nothing(void)
{
	struct conf_source cs;
	struct fake f;
	struct source_redis *s;
	struct result *res;
	char **ids;
	size_t n;
	const unsigned N = 400;
	json_t *st;

	redis_begin(true);
	add_echoes(N, &ids);
	fake_init(&f, 4, 10);
	conf_for(&cs, "jobs", "c1");
	cs.timeout_ms = 1000;
	s = source_for(&f, &cs);
	run_until(finished_at_least, &(struct count_at_least){ &f, 50 }, 20, "50 tasks ended");
	redis_stop();
	wait_state(s, "down");
	/* tasks still end while Redis is away; their results wait */
	run_for(1500);
	st = stats_of(s);
	CHECK(json_is_string(json_object_get(st, "last_error")), "last_error while down");
	json_decref(st);
	CHECK(redis_start(true), "redis-server again");
	run_until(xlen_at_least, &(struct want){ "tasks:results", N }, 60,
	    "every entry has a result");
	wait_state(s, "connected");
	res = results_read("tasks:results", &n);
	CHECK_EQ(n, N, "results (one each)");
	for (unsigned i = 0; i < N; i++)
		CHECK(result_for(res, n, ids[i]) != NULL, "entry %s has no result", ids[i]);
	results_free(res, n);
	CHECK_EQ(pending_count("tasks", "g"), 0, "entries left pending");
	CHECK(stat_int(s, "reconnects") >= 1, "reconnects");
	stop_and_free(s);
	free_ids(ids, N);
	redis_stop();
}

/* A Redis that stops answering (SIGSTOP) is given up after timeout; SIGCONT and it goes on. */
static void
test_hung_redis_times_out(void)
{
	struct conf_source cs;
	struct fake f;
	struct source_redis *s;
	json_t *st;

	redis_begin(false);
	fake_init(&f, 2, 0);
	conf_for(&cs, "jobs", "c1");
	cs.timeout_ms = 300;
	s = source_for(&f, &cs);
	wait_state(s, "connected");
	kill(redis_pid, SIGSTOP);
	wait_state(s, "down");
	st = stats_of(s);
	CHECK(strstr(json_string_value(json_object_get(st, "last_error")), "no answer") != NULL,
	    "last_error says no answer: %s", json_string_value(json_object_get(st, "last_error")));
	json_decref(st);
	kill(redis_pid, SIGCONT);
	wait_state(s, "connected");
	add_echoes(5, NULL);
	run_until(xlen_at_least, &(struct want){ "tasks:results", 5 }, 20, "results after it");
	stop_and_free(s);
	redis_stop();
}

/* No Redis at start: down, with the reason; Redis started: it connects and works. */
static void
test_redis_absent_at_start(void)
{
	struct conf_source cs;
	struct fake f;
	struct source_redis *s;
	json_t *st;

	fake_init(&f, 2, 0);
	conf_for(&cs, "jobs", "c1");
	s = source_for(&f, &cs);
	wait_state(s, "down");
	st = stats_of(s);
	CHECK(strstr(json_string_value(json_object_get(st, "last_error")), "connect") != NULL,
	    "last_error: %s", json_string_value(json_object_get(st, "last_error")));
	json_decref(st);
	redis_begin(false);
	add_echoes(3, NULL);
	run_until(xlen_at_least, &(struct want){ "tasks:results", 3 }, 20, "results");
	stop_and_free(s);
	redis_stop();
}

static bool
in_flight_at_least(void *arg)
{
	struct count_at_least *c = arg;

	return c->f->in_flight >= c->n;
}

static bool idle_called;

static void
on_idle(struct source_redis *s, void *arg)
{
	idle_called = true;
}

static bool
is_idle(void *arg)
{
	return idle_called;
}

/* Drain: no more reads; the running tasks end and are acked; then idle. */
static void
test_stop_drain_acks_running(void)
{
	struct conf_source cs;
	struct fake f;
	struct source_redis *s;

	redis_begin(false);
	freeReplyObject(cmd("XADD tasks * task {\"kind\":\"sleep\",\"ms\":300}"));
	freeReplyObject(cmd("XADD tasks * task {\"kind\":\"sleep\",\"ms\":300}"));
	fake_init(&f, 2, 0);
	conf_for(&cs, "jobs", "c1");
	s = source_for(&f, &cs);
	run_until(in_flight_at_least, &(struct count_at_least){ &f, 2 }, 10, "two tasks run");
	idle_called = false;
	source_redis_stop(s, false, on_idle, NULL);
	add_echoes(4, NULL);    /* after the stop: never read */
	run_until(is_idle, NULL, 10, "the source is idle");
	CHECK(stat_state_is(s, "stopped"), "state stopped");
	CHECK_EQ(cmd_int("XLEN tasks:results"), 2, "results of the running tasks");
	CHECK_EQ(pending_count("tasks", "g"), 0, "pending");
	CHECK_EQ(f.accepted, 2, "tasks run");
	run_for(100);
	CHECK_EQ(f.accepted, 2, "tasks run after the stop");
	source_redis_free(s);
	redis_stop();
}

/* Now: the tasks it cancels are not acked; their entries stay pending for another consumer. */
static void
test_stop_now_leaves_pending(void)
{
	struct conf_source cs;
	struct fake f;
	struct source_redis *s;

	redis_begin(false);
	for (int i = 0; i < 3; i++)
		freeReplyObject(cmd("XADD tasks * task {\"kind\":\"sleep\",\"ms\":10000}"));
	fake_init(&f, 3, 0);
	conf_for(&cs, "jobs", "c1");
	s = source_for(&f, &cs);
	run_until(in_flight_at_least, &(struct count_at_least){ &f, 3 }, 10, "three tasks run");
	idle_called = false;
	source_redis_stop(s, true, on_idle, NULL);
	fake_cancel_all(&f);
	run_until(is_idle, NULL, 10, "the source is idle");
	CHECK_EQ(cmd_int("XLEN tasks:results"), 0, "results");
	CHECK_EQ(pending_count("tasks", "g"), 3, "pending entries");
	CHECK_EQ(stat_int(s, "acked"), 0, "acked");
	source_redis_free(s);
	redis_stop();
}

/* A results key of the wrong type stops the source before it reads (nothing acked without a result). */
static void
test_results_wrong_type_refused(void)
{
	struct conf_source cs;
	struct fake f;
	struct source_redis *s;
	json_t *st;

	redis_begin(false);
	freeReplyObject(cmd("SET tasks:results x"));
	add_echoes(2, NULL);
	fake_init(&f, 2, 0);
	conf_for(&cs, "jobs", "c1");
	s = source_for(&f, &cs);
	wait_state(s, "down");
	st = stats_of(s);
	CHECK(strstr(json_string_value(json_object_get(st, "last_error")), "not a stream") !=
	    NULL, "last_error: %s", json_string_value(json_object_get(st, "last_error")));
	json_decref(st);
	CHECK_EQ(f.accepted, 0, "tasks run");
	freeReplyObject(cmd("DEL tasks:results"));
	run_until(xlen_at_least, &(struct want){ "tasks:results", 2 }, 20, "results once fixed");
	stop_and_free(s);
	redis_stop();
}

static int
rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	return remove(path);
}

static const struct test_case cases[] = {
	{ "backpressure_one_result_each", test_backpressure_one_result_each },
	{ "bad_entries_failed_at_once", test_bad_entries_failed_at_once },
	{ "claims_and_dead_letter", test_claims_and_dead_letter },
	{ "running_task_keeps_claim", test_running_task_keeps_claim },
	{ "redis_restart_loses_nothing", test_redis_restart_loses_nothing },
	{ "hung_redis_times_out", test_hung_redis_times_out },
	{ "redis_absent_at_start", test_redis_absent_at_start },
	{ "stop_drain_acks_running", test_stop_drain_acks_running },
	{ "stop_now_leaves_pending", test_stop_now_leaves_pending },
	{ "results_wrong_type_refused", test_results_wrong_type_refused },
};

int
main(int argc, char **argv)
{
	int rv;

	if ((sanitizer_slow = getenv("TPD_TEST_SLOW")) != NULL && atof(sanitizer_slow) > 0)
		slow = atof(sanitizer_slow);
	if (mkdtemp(rdir) == NULL) {
		perror("mkdtemp");
		return 1;
	}
	snprintf(rsock, sizeof rsock, "%s/redis.sock", rdir);
	log_init(getenv("TPD_TEST_DEBUG") != NULL ? LOG_DEBUG : LOG_WARNING);
	if (!redis_start(false)) {
		printf("SKIP: redis-server cannot be started here (is the Debian package "
		    "redis-server installed?)\n");
		nftw(rdir, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
		return SKIP;
	}
	redis_stop();
	base = event_base_new();
	signal(SIGPIPE, SIG_IGN);
	rv = test_run(cases, TEST_COUNT(cases), argc, argv);
	event_base_free(base);
	nftw(rdir, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
	return rv;
}
