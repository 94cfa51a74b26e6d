/*
 * proto-test.c: unit test of the protocol's text (proto.h): requests
 * parsed and read into each op's struct, with the messages that name what
 * was wrong, and every encoder's event parsed back with jansson, field by
 * field, numbers included (the daemon's durations with three decimals, any
 * other number in its shortest form).
 *
 * Run one test by name: tests/proto-test encoders_parse_back
 */
#include "config.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "base/blob.h"
#include "check.h"
#include "pool/pool.h"
#include "proto/proto.h"
#include "wire.h"

/* Parses a whole event text; fails the test when it is not one JSON object. */
static json_t *
parse_back(const char *text, size_t len)
{
	json_error_t err;
	json_t *v = json_loadb(text, len, JSON_REJECT_DUPLICATES, &err);

	CHECK(v != NULL && json_is_object(v), "not a JSON object (%s): %.*s", err.text,
	    (int)len, text);
	CHECK(memchr(text, '\n', len) == NULL, "a newline inside the event: %.*s", (int)len,
	    text);
	return v;
}

static json_t *
parse_text(const struct proto_text *pt)
{
	CHECK(proto_text_ok(pt), "the %s event was not written", pt->event ? pt->event : "?");
	return parse_back(pt->data, pt->len);
}

static const char *
str(json_t *obj, const char *key)
{
	json_t *v = json_object_get(obj, key);

	CHECK(json_is_string(v), "field %s is not a string", key);
	return json_string_value(v);
}

static long long
num(json_t *obj, const char *key)
{
	json_t *v = json_object_get(obj, key);

	CHECK(json_is_integer(v), "field %s is not an integer", key);
	return json_integer_value(v);
}

/* The text of pt contains want. */
static void
has_text(const struct proto_text *pt, const char *want)
{
	CHECK(memmem(pt->data, pt->len, want, strlen(want)) != NULL, "%s not in %.*s", want,
	    (int)pt->len, pt->data);
}

/* ------------------------------------------------------------ requests */

static void
test_parse_cases(void)
{
	static const struct {
		const char *line;
		int rc;
		const char *code;       /* on failure */
		const char *msg;        /* a part of the message */
		bool has_id;
	} cases[] = {
		{ "{\"op\":\"ping\",\"id\":1}", 0, NULL, NULL, true },
		{ "{\"op\":\"ping\"}", 0, NULL, NULL, false },
		{ "{\"op\":\"ping\",\"id\":\"a\"}", 0, NULL, NULL, true },
		{ "{\"op\":", -1, ERR_BAD_JSON, "invalid JSON at byte", false },
		{ "[1,2]", -1, ERR_BAD_REQUEST, "must be a JSON object, not an array", false },
		{ "{\"id\":1}", -1, ERR_BAD_REQUEST, "missing field \"op\"", true },
		{ "{\"op\":3,\"id\":1}", -1, ERR_BAD_REQUEST, "field \"op\" must be a string", true },
		{ "{\"op\":\"ping\",\"id\":1.5}", -1, ERR_BAD_REQUEST,
		    "field \"id\" must be a string or an integer", false },
		{ "{\"op\":\"ping\",\"op\":\"ping\"}", -1, ERR_BAD_JSON, "duplicate", false },
	};

	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		struct request req;
		const char *code = NULL;
		char *msg = NULL;
		int rc = proto_parse_request(cases[i].line, strlen(cases[i].line), &req, &code,
		    &msg);

		CHECK(rc == cases[i].rc, "%s: returned %d", cases[i].line, rc);
		CHECK((req.id != NULL) == cases[i].has_id, "%s: id %s", cases[i].line,
		    req.id ? "set" : "not set");
		if (rc == -1) {
			CHECK(strcmp(code, cases[i].code) == 0, "%s: code %s", cases[i].line, code);
			CHECK(msg != NULL && strstr(msg, cases[i].msg) != NULL, "%s: message %s",
			    cases[i].line, msg ? msg : "NULL");
		} else
			CHECK(req.op != NULL, "%s: no op", cases[i].line);
		free(msg);
		proto_request_free(&req);
	}
}

/* A request nested deeper than WIRE_MAX_DEPTH is refused, and keeps its id. */
static void
test_deep_request_keeps_its_id(void)
{
	char line[4096];
	size_t n = 0;
	struct request req;
	const char *code = NULL;
	char *msg = NULL;

	n += (size_t)snprintf(line + n, sizeof line - n, "{\"op\":\"ping\",\"id\":77,\"x\":");
	for (int i = 0; i < WIRE_MAX_DEPTH + 5; i++)
		line[n++] = '[';
	for (int i = 0; i < WIRE_MAX_DEPTH + 5; i++)
		line[n++] = ']';
	line[n++] = '}';
	CHECK(proto_parse_request(line, n, &req, &code, &msg) == -1, "a deep line parsed");
	CHECK(strcmp(code, ERR_BAD_REQUEST) == 0, "code %s", code);
	CHECK(strstr(msg, "nests deeper than 64 levels") != NULL, "message %s", msg);
	CHECK(req.id != NULL && json_integer_value(req.id) == 77, "the id is lost");
	free(msg);
	proto_request_free(&req);
}

/* Parses line (it must parse) into req. */
static void
request_of(const char *line, struct request *req)
{
	const char *code = NULL;
	char *msg = NULL;

	CHECK(proto_parse_request(line, strlen(line), req, &code, &msg) == 0, "%s: %s", line,
	    msg ? msg : "?");
}

/* rc and message of one reader on one line: NULL want means it must pass. */
static void
expect_read(const char *line, int (*reader)(const struct request *, char **), const char *want)
{
	struct request req;
	char *msg = NULL;
	int rc;

	request_of(line, &req);
	rc = reader(&req, &msg);
	if (want == NULL)
		CHECK(rc == 0, "%s: refused: %s", line, msg ? msg : "?");
	else
		CHECK(rc == -1 && msg != NULL && strstr(msg, want) != NULL, "%s: %s, not \"%s\"",
		    line, rc == 0 ? "passed" : msg, want);
	free(msg);
	proto_request_free(&req);
}

static int
read_plain(const struct request *req, char **msg)
{
	return proto_read_plain(req, msg);
}

static int
read_hello(const struct request *req, char **msg)
{
	struct proto_hello h;

	return proto_read_hello(req, &h, msg);
}

static int
read_submit(const struct request *req, char **msg)
{
	struct proto_submit s;

	return proto_read_submit(req, &s, msg);
}

static int
read_task_ref(const struct request *req, char **msg)
{
	uint64_t task;

	return proto_read_task_ref(req, &task, msg);
}

static int
read_resize(const struct request *req, char **msg)
{
	struct proto_resize r;

	return proto_read_resize(req, &r, msg);
}

static int
read_shutdown(const struct request *req, char **msg)
{
	struct proto_shutdown s;

	return proto_read_shutdown(req, &s, msg);
}

static void
test_readers_name_the_field(void)
{
	expect_read("{\"op\":\"ping\",\"id\":1}", read_plain, NULL);
	expect_read("{\"op\":\"ping\",\"x\":1}", read_plain, "unknown field \"x\" in a ping request");
	expect_read("{\"op\":\"stats\",\"pool\":1}", read_plain,
	    "unknown field \"pool\" in a stats request");
	expect_read("{\"op\":\"hello\",\"token\":\"t\",\"client\":\"c\"}", read_hello, NULL);
	expect_read("{\"op\":\"hello\",\"token\":5}", read_hello,
	    "field \"token\" must be a string, not an integer");
	expect_read("{\"op\":\"submit\",\"task\":{\"kind\":\"echo\"}}", read_submit, NULL);
	expect_read("{\"op\":\"submit\"}", read_submit, "missing field \"task\"");
	expect_read("{\"op\":\"submit\",\"task\":[]}", read_submit,
	    "field \"task\" must be an object");
	expect_read("{\"op\":\"submit\",\"task\":{},\"detach\":1}", read_submit,
	    "field \"detach\" must be true or false, not an integer");
	expect_read("{\"op\":\"submit\",\"task\":{},\"queue_timeout_ms\":0}", read_submit,
	    "field \"queue_timeout_ms\" is 0, out of range 1..2592000000");
	expect_read("{\"op\":\"submit\",\"task\":{},\"priorty\":1}", read_submit,
	    "unknown field \"priorty\" in a submit request");
	expect_read("{\"op\":\"submit\",\"task\":{},\"priority\":1001}", read_submit,
	    "field \"priority\" must be an integer from -1000 to 1000");
	expect_read("{\"op\":\"submit\",\"task\":{},\"admission\":\"drop_oldest\"}",
	    read_submit, "drop_oldest is the pool's to choose");
	expect_read("{\"op\":\"resize\",\"min\":3,\"max\":2}", read_resize,
	    "field \"min\" (3) is above \"max\" (2)");
	expect_read("{\"op\":\"resize\",\"size\":3,\"max\":2}", read_resize,
	    "give it, or \"min\" and/or \"max\", not both");
	expect_read("{\"op\":\"wait\",\"task\":\"12\"}", read_task_ref, NULL);
	expect_read("{\"op\":\"wait\"}", read_task_ref, "missing field \"task\" (a task id)");
	expect_read("{\"op\":\"status\",\"task\":0}", read_task_ref,
	    "field \"task\" must be a task id (a positive integer)");
	expect_read("{\"op\":\"cancel\",\"task\":\"01\"}", read_task_ref,
	    "must be a task id (a positive integer), not \"01\"");
	expect_read("{\"op\":\"resize\",\"size\":3}", read_resize, NULL);
	expect_read("{\"op\":\"resize\"}", read_resize, "missing field \"size\"");
	/* the range is the pool's, checked by op_resize */
	expect_read("{\"op\":\"resize\",\"size\":1048577}", read_resize, NULL);
	expect_read("{\"op\":\"resize\",\"size\":\"3\"}", read_resize,
	    "field \"size\" must be an integer, not a string");
	expect_read("{\"op\":\"shutdown\",\"mode\":\"now\"}", read_shutdown, NULL);
	expect_read("{\"op\":\"shutdown\",\"mode\":\"later\"}", read_shutdown,
	    "field \"mode\" must be \"drain\" or \"now\", not \"later\"");
}

static void
test_readers_fill_their_structs(void)
{
	struct request req;
	struct proto_submit sub;
	struct proto_task_spec ts;
	struct proto_resize rs;
	struct proto_shutdown sd;
	uint64_t task = 0;
	char *msg = NULL;

	request_of("{\"op\":\"submit\",\"task\":{\"kind\":\"sleep\",\"timeout_ms\":5},"
	    "\"pool\":\"io\",\"detach\":true,\"stream\":true,\"queue_timeout_ms\":250}", &req);
	CHECK(proto_read_submit(&req, &sub, &msg) == 0, "submit: %s", msg);
	CHECK(strcmp(sub.pool, "io") == 0 && sub.detach && sub.stream &&
	    sub.queue_timeout_ms == 250, "submit's fields");
	CHECK(proto_read_task(sub.task, &ts, &msg) == 0, "task: %s", msg);
	CHECK(strcmp(ts.kind, "sleep") == 0 && ts.timeout_ms == 5, "task's fields");
	proto_request_free(&req);

	request_of("{\"op\":\"submit\",\"task\":{\"kind\":\"echo\"}}", &req);
	CHECK(proto_read_submit(&req, &sub, &msg) == 0, "submit: %s", msg);
	CHECK(strcmp(sub.pool, WIRE_DEFAULT_POOL) == 0 && !sub.detach && !sub.stream &&
	    sub.queue_timeout_ms == 0, "submit's defaults");
	CHECK(proto_read_task(sub.task, &ts, &msg) == 0 && ts.timeout_ms == 0, "no timeout");
	proto_request_free(&req);

	request_of("{\"op\":\"submit\",\"task\":{\"timeout_ms\":5}}", &req);
	CHECK(proto_read_submit(&req, &sub, &msg) == 0, "submit: %s", msg);
	CHECK(proto_read_task(sub.task, &ts, &msg) == -1 &&
	    strcmp(msg, "missing field \"kind\"") == 0, "task without a kind: %s", msg);
	free(msg);
	msg = NULL;
	proto_request_free(&req);

	request_of("{\"op\":\"status\",\"task\":\"123\"}", &req);
	CHECK(proto_read_task_ref(&req, &task, &msg) == 0 && task == 123, "task id from digits");
	proto_request_free(&req);

	request_of("{\"op\":\"resize\",\"size\":7}", &req);
	CHECK(proto_read_resize(&req, &rs, &msg) == 0 && rs.size == 7 &&
	    strcmp(rs.pool, WIRE_DEFAULT_POOL) == 0, "resize");
	proto_request_free(&req);

	request_of("{\"op\":\"shutdown\"}", &req);
	CHECK(proto_read_shutdown(&req, &sd, &msg) == 0 && !sd.now &&
	    strcmp(sd.mode, MODE_DRAIN) == 0, "shutdown's default");
	proto_request_free(&req);

	CHECK(proto_request_fields(OP_SUBMIT) != NULL && proto_request_fields("frobnicate") == NULL,
	    "the field table");
}

/* ------------------------------------------------------------ events */

static void
test_encoders_parse_back(void)
{
	json_t *id = json_integer(42), *sid = json_string("x\"y"), *ev, *err;
	struct proto_task v = { .id = 7, .pool = "default", .state = STATE_QUEUED,
	    .queued_ahead = 3 };
	struct proto_text pt;

	proto_encode_pong(&pt, id);
	ev = parse_text(&pt);
	CHECK(strcmp(str(ev, FIELD_EVENT), EV_PONG) == 0 && num(ev, FIELD_ID) == 42, "pong");
	CHECK(json_object_size(ev) == 2, "pong has 2 fields");
	json_decref(ev);
	proto_text_free(&pt);

	proto_encode_pong(&pt, NULL);
	CHECK(pt.len == strlen("{\"event\":\"pong\"}") &&
	    memcmp(pt.data, "{\"event\":\"pong\"}", pt.len) == 0, "pong without an id");
	proto_text_free(&pt);

	proto_encode_hello(&pt, sid, ROLE_ADMIN);
	ev = parse_text(&pt);
	CHECK(strcmp(str(ev, FIELD_ID), "x\"y") == 0, "a string id, escaped");
	CHECK(strcmp(str(ev, FIELD_SERVER), WIRE_SERVER_NAME) == 0 &&
	    strcmp(str(ev, FIELD_VERSION), PACKAGE_VERSION) == 0 &&
	    num(ev, FIELD_PROTOCOL) == WIRE_PROTOCOL_VERSION &&
	    strcmp(str(ev, FIELD_ROLE), ROLE_ADMIN) == 0, "hello's fields");
	json_decref(ev);
	proto_text_free(&pt);

	proto_encode_accepted(&pt, id, &v);
	ev = parse_text(&pt);
	CHECK(strcmp(str(ev, FIELD_EVENT), EV_ACCEPTED) == 0 && num(ev, FIELD_TASK) == 7 &&
	    strcmp(str(ev, FIELD_POOL), "default") == 0 && num(ev, FIELD_QUEUED) == 3,
	    "accepted's fields");
	json_decref(ev);
	proto_text_free(&pt);

	proto_encode_rejected(&pt, id, ERR_QUEUE_FULL, "pool default is full");
	ev = parse_text(&pt);
	err = json_object_get(ev, FIELD_ERROR);
	CHECK(strcmp(str(ev, FIELD_EVENT), EV_REJECTED) == 0 &&
	    strcmp(str(err, FIELD_CODE), ERR_QUEUE_FULL) == 0 &&
	    strcmp(str(err, FIELD_MESSAGE), "pool default is full") == 0, "rejected");
	json_decref(ev);
	proto_text_free(&pt);

	/* an error always has an id: null when the request had none */
	proto_encode_error(&pt, NULL, ERR_BAD_JSON, "tab\there, \"quoted\", \\, caf\xc3\xa9");
	ev = parse_text(&pt);
	err = json_object_get(ev, FIELD_ERROR);
	CHECK(json_is_null(json_object_get(ev, FIELD_ID)), "error's id is null");
	CHECK(strcmp(str(err, FIELD_MESSAGE), "tab\there, \"quoted\", \\, caf\xc3\xa9") == 0,
	    "the message reads back as written");
	has_text(&pt, "tab\\there");
	json_decref(ev);
	proto_text_free(&pt);

	proto_encode_status(&pt, id, &v);
	ev = parse_text(&pt);
	CHECK(strcmp(str(ev, FIELD_STATE), STATE_QUEUED) == 0 &&
	    json_object_get(ev, FIELD_QUEUED_MS) == NULL, "an unfinished status has no times");
	json_decref(ev);
	proto_text_free(&pt);

	proto_encode_cancelled(&pt, id, 9, STATE_CANCELLED);
	ev = parse_text(&pt);
	CHECK(strcmp(str(ev, FIELD_EVENT), EV_OK) == 0 && num(ev, FIELD_TASK) == 9 &&
	    strcmp(str(ev, FIELD_STATE), STATE_CANCELLED) == 0, "cancel's ok");
	json_decref(ev);
	proto_text_free(&pt);

	proto_encode_resized(&pt, id, "io", 4, 6, 2, 8, "kept");
	ev = parse_text(&pt);
	CHECK(strcmp(str(ev, FIELD_POOL), "io") == 0 && num(ev, FIELD_TARGET) == 4 &&
	    num(ev, FIELD_WORKERS) == 6 && num(ev, FIELD_MIN_WORKERS) == 2 &&
	    num(ev, FIELD_MAX_WORKERS) == 8 && strcmp(str(ev, FIELD_NOTE), "kept") == 0,
	    "resize's ok");
	json_decref(ev);
	proto_text_free(&pt);

	proto_encode_pool_state(&pt, id, "io", POOL_STATE_PAUSED);
	ev = parse_text(&pt);
	CHECK(strcmp(str(ev, FIELD_POOL), "io") == 0 &&
	    strcmp(str(ev, FIELD_STATE), POOL_STATE_PAUSED) == 0, "pause's ok");
	json_decref(ev);
	proto_text_free(&pt);

	proto_encode_shutting_down(&pt, NULL, MODE_NOW);
	ev = parse_text(&pt);
	CHECK(strcmp(str(ev, FIELD_MODE), MODE_NOW) == 0 && json_object_get(ev, FIELD_ID) == NULL,
	    "shutdown's ok");
	json_decref(ev);
	proto_text_free(&pt);

	json_decref(id);
	json_decref(sid);
}

/*
 * The daemon's durations: three decimals in status as in done, so 30 us
 * is 0.030 in both (a double 0.03 would be written 0.029999999999999999).
 */
static void
test_durations_have_three_decimals(void)
{
	struct proto_task v = { .id = 1, .pool = "p", .state = STATE_SUCCEEDED,
	    .finished = true, .queued_us = 30, .run_us = 1234567 };
	struct pool_snapshot snap = { .target = 0 };
	struct proto_pool_stats ps = { .name = "p", .s = &snap };
	struct proto_stats st = { .pools = &ps, .npools = 1, .version = "1",
	    .containment = CONTAINMENT_PROCESS, .phase = PHASE_RUNNING,
	    .tcp_auth = TCP_AUTH_TOKEN };
	struct proto_text pt;
	struct blob *body;

	proto_encode_status(&pt, NULL, &v);
	has_text(&pt, "\"queued_ms\":0.030,\"run_ms\":1234.567");
	proto_text_free(&pt);
	body = proto_encode_done(&v);
	CHECK(strstr(body->data, "\"queued_ms\":0.030,\"run_ms\":1234.567") != NULL, "done: %s",
	    body->data);
	blob_release(body);
	snap.oldest_queued_us = 29;
	proto_encode_stats(&pt, NULL, &st);
	has_text(&pt, "\"oldest_queued_ms\":0.029");
	proto_text_free(&pt);
}

static void
test_stats_parse_back(void)
{
	struct pool_snapshot snaps[2] = {
		{ .target = 2, .workers = 3, .busy = 1, .idle = 2, .queued = 4, .capacity = 16,
		    .limit = 64, .accepted = 100, .rejected = 5, .rejected_full = 4,
		    .succeeded = 90, .failed = 1, .timed_out = 2, .cancelled = 3, .expired = 4,
		    .closed = false },
		{ .closed = true },
	};
	struct proto_pool_stats ps[2] = {
		{ .name = "default", .s = &snaps[0] },
		{ .name = "io", .removed = true, .s = &snaps[1] },
	};
	struct proto_stats st = { .pools = ps, .npools = 2, .connections = 3, .uptime_ms = 99,
	    .tasks_outstanding = 5, .tasks_retained = 6, .tasks_retained_bytes = 7,
	    .results_forgotten = 8, .version = "0.1.0", .containment = CONTAINMENT_CGROUP,
	    .phase = PHASE_DRAINING, .tcp_auth = TCP_AUTH_NONE };
	struct proto_text pt;
	json_t *ev, *pools, *p;

	proto_encode_stats(&pt, NULL, &st);
	ev = parse_text(&pt);
	pools = json_object_get(ev, FIELD_POOLS);
	CHECK(json_array_size(pools) == 2, "two pools");
	p = json_array_get(pools, 0);
	CHECK(strcmp(str(p, FIELD_NAME), "default") == 0 && num(p, FIELD_TARGET) == 2 &&
	    num(p, FIELD_WORKERS) == 3 && num(p, FIELD_BUSY) == 1 && num(p, FIELD_IDLE) == 2 &&
	    num(p, FIELD_QUEUED) == 4 && num(p, FIELD_CAPACITY) == 16 &&
	    num(p, FIELD_LIMIT) == 64 && num(p, FIELD_ACCEPTED) == 100 &&
	    num(p, FIELD_REJECTED) == 5 && num(p, FIELD_REJECTED_FULL) == 4 &&
	    num(p, FIELD_SUCCEEDED) == 90 && num(p, FIELD_FAILED) == 1 &&
	    num(p, FIELD_TIMED_OUT) == 2 && num(p, FIELD_CANCELLED) == 3 &&
	    num(p, FIELD_EXPIRED) == 4 && json_is_false(json_object_get(p, FIELD_CLOSED)) &&
	    json_is_false(json_object_get(p, FIELD_REMOVED)) &&
	    json_is_real(json_object_get(p, FIELD_OLDEST_QUEUED_MS)), "the first pool");
	p = json_array_get(pools, 1);
	CHECK(json_is_true(json_object_get(p, FIELD_CLOSED)) &&
	    json_is_true(json_object_get(p, FIELD_REMOVED)), "the second pool");
	CHECK(num(ev, FIELD_CONNECTIONS) == 3 && num(ev, FIELD_UPTIME_MS) == 99 &&
	    num(ev, FIELD_TASKS_OUTSTANDING) == 5 && num(ev, FIELD_TASKS_RETAINED) == 6 &&
	    num(ev, FIELD_TASKS_RETAINED_BYTES) == 7 && num(ev, FIELD_RESULTS_FORGOTTEN) == 8 &&
	    strcmp(str(ev, FIELD_VERSION), "0.1.0") == 0 &&
	    strcmp(str(ev, FIELD_CONTAINMENT), CONTAINMENT_CGROUP) == 0 &&
	    strcmp(str(ev, FIELD_PHASE), PHASE_DRAINING) == 0 &&
	    strcmp(str(ev, FIELD_TCP_AUTH), TCP_AUTH_NONE) == 0, "the daemon's figures");
	json_decref(ev);
	proto_text_free(&pt);
}

/* A done: one body, shared, after each receiver's head. */
static void
test_done_with_each_receivers_id(void)
{
	json_t *result = json_pack("{s:s, s:[i, f]}", "value", "hi", "more", 1, 0.5);
	struct proto_task v = { .id = 12, .pool = "default", .state = STATE_FAILED,
	    .finished = true, .queued_us = 5, .run_us = 6, .result = result,
	    .error_code = ERR_EXIT_STATUS, .error_message = "exited with status 3" };
	json_t *ids[3] = { json_integer(1), json_string("abc"), NULL }, *ev;
	struct blob *body = proto_encode_done(&v);

	for (int i = 0; i < 3; i++) {
		struct proto_text head;
		char *line;

		proto_encode_done_head(&head, ids[i]);
		CHECK(proto_text_ok(&head), "the head");
		line = malloc(head.len + body->len);
		memcpy(line, head.data, head.len);
		memcpy(line + head.len, body->data, body->len);
		ev = parse_back(line, head.len + body->len);
		CHECK(strcmp(str(ev, FIELD_EVENT), EV_DONE) == 0 && num(ev, FIELD_TASK) == 12 &&
		    strcmp(str(ev, FIELD_STATE), STATE_FAILED) == 0, "done's fields");
		CHECK(ids[i] == NULL ? json_object_get(ev, FIELD_ID) == NULL :
		    json_equal(json_object_get(ev, FIELD_ID), ids[i]), "receiver %d's id", i);
		CHECK(json_equal(json_object_get(ev, FIELD_RESULT), result), "the result");
		CHECK(strcmp(str(json_object_get(ev, FIELD_ERROR), FIELD_CODE), ERR_EXIT_STATUS) == 0,
		    "the error");
		json_decref(ev);
		free(line);
		proto_text_free(&head);
		json_decref(ids[i]);
	}
	blob_release(body);
	json_decref(result);
}

/* A result that cannot be encoded: the done still goes out, with an internal error. */
static void
test_done_with_an_unencodable_result(void)
{
	json_t *result = json_pack("{s:o}", "value", json_stringn_nocheck("\xff\xfe", 2));
	struct proto_task v = { .id = 3, .pool = "default", .state = STATE_SUCCEEDED,
	    .finished = true, .result = result };
	struct blob *body = proto_encode_done(&v);
	char *line = malloc(body->len + 1);
	json_t *ev;

	line[0] = '{';
	memcpy(line + 1, body->data, body->len);
	ev = parse_back(line, body->len + 1);
	CHECK(json_object_get(ev, FIELD_RESULT) == NULL, "the result is left out");
	CHECK(strcmp(str(json_object_get(ev, FIELD_ERROR), FIELD_CODE), ERR_INTERNAL) == 0,
	    "an internal error instead");
	json_decref(ev);
	free(line);
	blob_release(body);
	json_decref(result);
}

static void
test_stream_events(void)
{
	json_t *out = proto_event_output(STREAM_STDERR), *started = proto_event_started(4321);
	json_t *bare = proto_event_started(0), *id = json_string("r1"), *ev;
	struct proto_text pt;

	json_object_set_new(out, FIELD_DATA, json_string("line\n"));
	proto_encode_stream(&pt, out, id, 5);
	ev = parse_text(&pt);
	CHECK(strcmp(str(ev, FIELD_EVENT), EV_OUTPUT) == 0 &&
	    strcmp(str(ev, FIELD_STREAM), STREAM_STDERR) == 0 &&
	    strcmp(str(ev, FIELD_DATA), "line\n") == 0 && strcmp(str(ev, FIELD_ID), "r1") == 0 &&
	    num(ev, FIELD_TASK) == 5, "output");
	json_decref(ev);
	proto_text_free(&pt);

	proto_encode_stream(&pt, started, NULL, 6);
	ev = parse_text(&pt);
	CHECK(num(ev, FIELD_PID) == 4321 && num(ev, FIELD_TASK) == 6 &&
	    json_object_get(ev, FIELD_ID) == NULL, "started with its pid");
	json_decref(ev);
	proto_text_free(&pt);

	proto_encode_stream(&pt, bare, NULL, 7);
	ev = parse_text(&pt);
	CHECK(json_object_get(ev, FIELD_PID) == NULL, "started without a pid");
	json_decref(ev);
	proto_text_free(&pt);

	json_decref(out);
	json_decref(started);
	json_decref(bare);
	json_decref(id);
}

/* What replaces an event that could not be written, and the refusal line. */
static void
test_unsent_and_refusal(void)
{
	json_t *id = json_integer(-9), *bad = json_stringn_nocheck("a\xc3", 2), *ev;
	struct proto_text pt, err;
	char line[256];
	size_t n;

	proto_encode_hello(&pt, id, json_string_value(bad));
	CHECK(!proto_text_ok(&pt) && pt.unencodable, "a string that is not UTF-8 is refused");
	proto_encode_unsent(&err, &pt);
	ev = parse_text(&err);
	CHECK(num(ev, FIELD_ID) == -9, "the unsent event's id");
	CHECK(strcmp(str(json_object_get(ev, FIELD_ERROR), FIELD_CODE), ERR_INTERNAL) == 0 &&
	    strstr(str(json_object_get(ev, FIELD_ERROR), FIELD_MESSAGE), "encoded") != NULL,
	    "an internal error saying why");
	json_decref(ev);
	proto_text_free(&err);
	proto_text_free(&pt);

	n = proto_encode_refusal(line, sizeof line, ERR_TOO_MANY_CONNECTIONS, "too many");
	ev = parse_back(line, n);
	CHECK(json_is_null(json_object_get(ev, FIELD_ID)) &&
	    strcmp(str(json_object_get(ev, FIELD_ERROR), FIELD_CODE),
	    ERR_TOO_MANY_CONNECTIONS) == 0, "the refusal");
	json_decref(ev);
	CHECK(proto_encode_refusal(line, 10, ERR_TOO_MANY_CONNECTIONS, "too many") == 0,
	    "a refusal that does not fit");
	json_decref(id);
	json_decref(bad);
}

/* v written and read back: equal, and, when want is given, that very text. */
static void
round_trip(json_t *v, const char *want)
{
	struct proto_text pt;
	json_t *back;
	json_error_t err;

	proto_text_init(&pt);
	proto_text_json(&pt, v);
	CHECK(proto_text_ok(&pt), "not written");
	back = json_loadb(pt.data, pt.len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &err);
	CHECK(back != NULL, "%.*s does not parse: %s", (int)pt.len, pt.data, err.text);
	CHECK(json_equal(back, v), "%.*s reads back as another value", (int)pt.len, pt.data);
	if (want != NULL)
		CHECK(pt.len == strlen(want) && memcmp(pt.data, want, pt.len) == 0,
		    "written %.*s, not %s", (int)pt.len, pt.data, want);
	json_decref(back);
	proto_text_free(&pt);
}

/* A real as the encoder writes it: the shortest %.15g..%.17g that reads back, ".0" if whole. */
static void
real_text(double d, char *buf, size_t size)
{
	for (int prec = 15; prec <= 17; prec++) {
		snprintf(buf, size, "%.*g", prec, d);
		if (prec == 17 || strtod(buf, NULL) == d)
			break;
	}
	if (strspn(buf, "0123456789-") == strlen(buf))
		strncat(buf, ".0", size - strlen(buf) - 1);
}

static void
test_values_round_trip(void)
{
	static const struct {
		double d;
		const char *text;
	} reals[] = {
		{ 0.1, "0.1" }, { 1.5, "1.5" }, { 3.0, "3.0" }, { 1e300, "1e+300" },
		{ -0.25, "-0.25" }, { 5.772, "5.772" }, { 0.030, "0.03" },
		{ 5e-324, "4.94065645841247e-324" }, { 1.0 / 3, "0.3333333333333333" },
		{ 123456789012.0, "123456789012.0" }, { 0.0, "0.0" }, { -0.0, "-0.0" },
	};
	static const char tricky[] = "nul\0, \x01, \x1f, \x7f, \"q\", \\, /, \xe2\x82\xac, "
	    "\xf0\x9f\x98\x80";
	json_t *v;
	char big[3000];

	for (size_t i = 0; i < sizeof reals / sizeof reals[0]; i++) {
		v = json_real(reals[i].d);
		round_trip(v, reals[i].text);
		json_decref(v);
	}
	/* milliseconds to the microsecond, written from the integer: as %.15g would */
	for (uint64_t i = 0; i < 100000; i++) {
		uint64_t us = i < 50000 ? i : (i * 2654435761u) % 1000000000000u;
		double ms[3] = { (double)us / 1000.0, (double)(us / 1000000) * 1000.0 +
		    (double)(us % 1000000) / 1000.0, (double)us / 1000.0 + 1e-7 };

		for (int j = 0; j < 3; j++) {
			char want[40];

			v = json_real(ms[j]);
			real_text(ms[j], want, sizeof want);
			round_trip(v, want);
			json_decref(v);
		}
	}
	v = json_integer(LLONG_MIN);
	round_trip(v, "-9223372036854775808");
	json_decref(v);
	v = json_integer(LLONG_MAX);
	round_trip(v, "9223372036854775807");
	json_decref(v);

	v = json_stringn(tricky, sizeof tricky - 1);
	round_trip(v, "\"nul\\u0000, \\u0001, \\u001F, \x7f, \\\"q\\\", \\\\, /, \xe2\x82\xac, "
	    "\xf0\x9f\x98\x80\"");
	json_decref(v);
	v = json_pack("{s:[b, b, n, {}, []], s:{s:s}, s:i}", "a", 1, 0, "\xc3\xa9t\xc3\xa9", "k",
	    "v", "z", 1);
	round_trip(v, "{\"a\":[true,false,null,{},[]],\"\xc3\xa9t\xc3\xa9\":{\"k\":\"v\"},\"z\":1}");
	json_decref(v);

	/* past the text's inline buffer, onto the heap */
	memset(big, 'x', sizeof big - 1);
	big[sizeof big - 1] = '\0';
	v = json_pack("[s, s]", big, big);
	round_trip(v, NULL);
	json_decref(v);

	/* as deep as a request may nest */
	v = json_array();
	for (int i = 1; i < WIRE_MAX_DEPTH; i++) {
		json_t *outer = json_array();
		json_array_append_new(outer, v);
		v = outer;
	}
	round_trip(v, NULL);
	json_decref(v);
}

/* A long string id is carried whole by every event (it outgrows the inline buffer). */
static void
test_long_id(void)
{
	char *s = malloc(100001);
	json_t *id, *ev;
	struct proto_text pt;

	memset(s, 'i', 100000);
	s[100000] = '\0';
	id = json_string(s);
	proto_encode_pong(&pt, id);
	ev = parse_text(&pt);
	CHECK(strcmp(str(ev, FIELD_ID), s) == 0, "the long id");
	json_decref(ev);
	proto_text_free(&pt);
	proto_encode_done_head(&pt, id);
	CHECK(proto_text_ok(&pt) && pt.len == 100000 + 9, "a done's head with a long id");
	proto_text_free(&pt);
	json_decref(id);
	free(s);
}

static const struct test_case cases[] = {
	{ "parse_cases", test_parse_cases },
	{ "deep_request_keeps_its_id", test_deep_request_keeps_its_id },
	{ "readers_name_the_field", test_readers_name_the_field },
	{ "readers_fill_their_structs", test_readers_fill_their_structs },
	{ "encoders_parse_back", test_encoders_parse_back },
	{ "durations_have_three_decimals", test_durations_have_three_decimals },
	{ "stats_parse_back", test_stats_parse_back },
	{ "done_with_each_receivers_id", test_done_with_each_receivers_id },
	{ "done_with_an_unencodable_result", test_done_with_an_unencodable_result },
	{ "stream_events", test_stream_events },
	{ "unsent_and_refusal", test_unsent_and_refusal },
	{ "values_round_trip", test_values_round_trip },
	{ "long_id", test_long_id },
};

int
main(int argc, char **argv)
{
	return test_run(cases, TEST_COUNT(cases), argc, argv);
}
