/*
 * proto.c: JSON lines to requests, and each op's fields read into its
 * struct (proto.h), with messages that name the field. The fields an op
 * may have are in one table, request_fields; the events go out through
 * proto-encode.c.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base64.h"
#include "proto.h"
#include "base/utf8.h"
#include "wire.h"

size_t
proto_json_depth(const char *s, size_t len)
{
	size_t depth = 0, deepest = 0;
	bool in_string = false;

	for (size_t i = 0; i < len; i++) {
		char ch = s[i];
		if (in_string) {
			if (ch == '\\')
				i++;
			else if (ch == '"')
				in_string = false;
			continue;
		}
		switch (ch) {
		case '"': in_string = true; break;
		case '[': case '{':
			if (++depth > deepest)
				deepest = depth;
			break;
		case ']': case '}':
			if (depth > 0)
				depth--;
			break;
		}
	}
	return deepest;
}

/*
 * A copy of the JSON text s[0..len) in which every array or object that
 * opens deeper than max levels is replaced by 0, so that jansson can parse
 * the rest without building the deep tree. NULL when the brackets do not
 * match, at any depth (the text is not JSON then), or memory ran out. The
 * copy is never longer than s.
 */
static char *
json_flatten(const char *s, size_t len, size_t max, size_t *outlen)
{
	/* bit d of braces: the container open at depth d is an object */
	unsigned char *braces = calloc(len / 8 + 1, 1);
	char *out = malloc(len + 1), *o = out;
	size_t depth = 0;
	bool in_string = false;

	if (out == NULL || braces == NULL)
		goto bad;
	for (size_t i = 0; i < len; i++) {
		char ch = s[i];
		bool keep = depth <= max;       /* outside the values cut away */

		if (in_string) {
			if (ch == '\\' && i + 1 < len) {
				if (keep)
					*o++ = ch;
				ch = s[++i];
			} else if (ch == '"')
				in_string = false;
		} else if (ch == '"')
			in_string = true;
		else if (ch == '[' || ch == '{') {
			if (ch == '{')
				braces[depth / 8] |= (unsigned char)(1u << (depth % 8));
			else
				braces[depth / 8] &= (unsigned char)~(1u << (depth % 8));
			if (++depth == max + 1) {
				*o++ = '0';     /* the value that goes too deep */
				continue;
			}
		} else if (ch == ']' || ch == '}') {
			bool brace;
			if (depth == 0)
				goto bad;
			depth--;
			brace = (braces[depth / 8] >> (depth % 8)) & 1;
			if (brace != (ch == '}'))
				goto bad;
			if (depth == max)
				continue;       /* the end of a value cut away */
		}
		if (keep)
			*o++ = ch;
	}
	if (in_string || depth != 0)
		goto bad;
	free(braces);
	*outlen = (size_t)(o - out);
	return out;
bad:
	free(braces);
	free(out);
	return NULL;
}

/*
 * For a request nested too deep: its id, when the line is JSON apart from
 * its depth and is an object with a string or integer "id" at its top.
 * The deep values are cut away first (json_flatten), so only a tree of at
 * most WIRE_MAX_DEPTH levels is built. Sets req->root and req->id, or leaves
 * them NULL.
 */
static void
deep_request_id(const char *line, size_t len, struct request *req)
{
	size_t flen;
	char *flat = json_flatten(line, len, WIRE_MAX_DEPTH, &flen);
	json_t *root, *id;

	if (flat == NULL)
		return;
	root = json_loadb(flat, flen, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, NULL);
	free(flat);
	if (root == NULL)
		return;
	id = json_object_get(root, "id");
	if (id == NULL || (!json_is_string(id) && !json_is_integer(id))) {
		json_decref(root);
		return;
	}
	req->root = root;
	req->id = id;
}

static const char *
type_name(const json_t *v)
{
	switch (json_typeof(v)) {
	case JSON_OBJECT: return "an object";
	case JSON_ARRAY: return "an array";
	case JSON_STRING: return "a string";
	case JSON_INTEGER: return "an integer";
	case JSON_REAL: return "a number";
	case JSON_TRUE: case JSON_FALSE: return "a boolean";
	case JSON_NULL: return "null";
	}
	return "a value";
}

int
proto_parse_request(const char *line, size_t len, struct request *req,
    const char **code, char **msg)
{
	json_error_t err;
	const char *nul;
	json_t *op;

	memset(req, 0, sizeof *req);
	req->line = line;
	req->len = len;
	/* Each level takes two bytes at least: a short line cannot nest too deep. */
	if (len > 2 * WIRE_MAX_DEPTH && proto_json_depth(line, len) > WIRE_MAX_DEPTH) {
		*code = ERR_BAD_REQUEST;
		deep_request_id(line, len, req); /* the error still carries the id */
		return cause_set(msg, "request nests deeper than %d levels", WIRE_MAX_DEPTH);
	}
	/*
	 * JSON has no raw NUL (a string carries it as \u0000), and jansson
	 * would take a line cut at one, or skip it after a number: refused
	 * here, as any other byte that is not JSON.
	 */
	if ((nul = memchr(line, '\0', len)) != NULL) {
		*code = ERR_BAD_JSON;
		return cause_set(msg, "invalid JSON at byte %zu: a NUL byte (a string carries "
		    "one as \\u0000)", (size_t)(nul - line));
	}
	req->root = json_loadb(line, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &err);
	if (req->root == NULL) {
		*code = ERR_BAD_JSON;
		/* jansson quotes the line near the error, possibly cut inside a character */
		utf8_scrub(err.text, strlen(err.text));
		return cause_set(msg, "invalid JSON at byte %d: %s", err.position, err.text);
	}
	if (!json_is_object(req->root)) {
		*code = ERR_BAD_REQUEST;
		return cause_set(msg, "a request must be a JSON object, not %s", type_name(req->root));
	}
	req->id = json_object_get(req->root, "id");
	if (req->id != NULL && !json_is_string(req->id) && !json_is_integer(req->id)) {
		*code = ERR_BAD_REQUEST;
		cause_set(msg, "field \"id\" must be a string or an integer, not %s", type_name(req->id));
		req->id = NULL;
		return -1;
	}
	op = json_object_get(req->root, "op");
	if (op == NULL) {
		*code = ERR_BAD_REQUEST;
		return cause_set(msg, "missing field \"op\"");
	}
	if (!json_is_string(op)) {
		*code = ERR_BAD_REQUEST;
		return cause_set(msg, "field \"op\" must be a string, not %s", type_name(op));
	}
	req->op = json_string_value(op);
	return 0;
}

void
proto_request_free(struct request *req)
{
	json_decref(req->root);
	memset(req, 0, sizeof *req);
}

int
proto_scan_fields(json_t *obj, const char *const *allowed, const char *where,
    uint32_t *present, char **msg)
{
	const char *key;
	json_t *value;
	uint32_t seen = 0;

	json_object_foreach(obj, key, value) {
		unsigned i;
		/* the first byte first: a submit's key meets some 20 names, mostly other */
		for (i = 0; allowed[i] != NULL; i++)
			if (allowed[i][0] == key[0] && strcmp(allowed[i], key) == 0)
				break;
		if (allowed[i] == NULL) {
			char q[UTF8_QUOTE_SIZE];
			return cause_set(msg, "unknown field \"%s\" in %s", utf8_quote(q, key), where);
		}
		if (i < 32)
			seen |= UINT32_C(1) << i;
	}
	if (present != NULL)
		*present = seen;
	return 0;
}

int
proto_check_fields(json_t *obj, const char *const *allowed, const char *where, char **msg)
{
	return proto_scan_fields(obj, allowed, where, NULL, msg);
}

int
proto_get_string(json_t *obj, const char *key, bool required, const char **out, char **msg)
{
	json_t *v = json_object_get(obj, key);

	if (v == NULL)
		return required ? cause_set(msg, "missing field \"%s\"", key) : 0;
	if (!json_is_string(v))
		return cause_set(msg, "field \"%s\" must be a string, not %s", key, type_name(v));
	*out = json_string_value(v);
	return 0;
}

int
proto_get_bool(json_t *obj, const char *key, bool *out, char **msg)
{
	json_t *v = json_object_get(obj, key);

	if (v == NULL)
		return 0;
	if (!json_is_boolean(v))
		return cause_set(msg, "field \"%s\" must be true or false, not %s", key, type_name(v));
	*out = json_is_true(v);
	return 0;
}

int
proto_get_uint(json_t *obj, const char *key, bool required, uint64_t min, uint64_t max,
    uint64_t *out, char **msg)
{
	json_t *v = json_object_get(obj, key);
	json_int_t n;

	if (v == NULL)
		return required ? cause_set(msg, "missing field \"%s\"", key) : 0;
	if (!json_is_integer(v))
		return cause_set(msg, "field \"%s\" must be an integer, not %s", key, type_name(v));
	n = json_integer_value(v);
	if (n < 0 || (uint64_t)n < min || (uint64_t)n > max)
		return cause_set(msg, "field \"%s\" is %" JSON_INTEGER_FORMAT ", out of range %" PRIu64
		    "..%" PRIu64, key, n, min, max);
	*out = (uint64_t)n;
	return 0;
}

int
proto_get_task_id(json_t *obj, const char *key, uint64_t *out, char **msg)
{
	json_t *v = json_object_get(obj, key);

	if (v == NULL)
		return cause_set(msg, "missing field \"%s\" (a task id)", key);
	if (json_is_string(v)) {
		const char *s = json_string_value(v);
		unsigned long long n;
		char *end;

		errno = 0;
		n = strtoull(s, &end, 10);
		if (*s < '1' || *s > '9' || *end != '\0' || errno != 0) {
			char q[UTF8_QUOTE_SIZE];
			return cause_set(msg, "field \"%s\" must be a task id (a positive integer), "
			    "not \"%s\"", key, utf8_quote(q, s));
		}
		*out = n;
		return 0;
	}
	if (!json_is_integer(v) || json_integer_value(v) < 1)
		return cause_set(msg, "field \"%s\" must be a task id (a positive integer)", key);
	*out = (uint64_t)json_integer_value(v);
	return 0;
}

/* ------------------------------------------------------------ each op's fields */

static const char *const hello_fields[] = { FIELD_OP, FIELD_ID, FIELD_TOKEN, FIELD_CLIENT,
    NULL };
static const char *const plain_fields[] = { FIELD_OP, FIELD_ID, NULL };
/* in the order of submit's bits below */
static const char *const submit_fields[] = { FIELD_OP, FIELD_ID, FIELD_TASK, FIELD_POOL,
    FIELD_DETACH, FIELD_STREAM, FIELD_QUEUE_TIMEOUT_MS, FIELD_LABEL, FIELD_ON_LOST,
    FIELD_PRIORITY, FIELD_ADMISSION, FIELD_ADMISSION_TIMEOUT_MS,
    FIELD_DELAY_MS, FIELD_AFTER, FIELD_AFTER_MODE, FIELD_RETRIES, FIELD_RETRY_ON,
    FIELD_RETRY_DELAY_MS, FIELD_RETRY_DELAY_MAX_MS, FIELD_KEY, NULL };
static const char *const list_fields[] = { FIELD_OP, FIELD_ID, FIELD_STATE, FIELD_POOL,
    FIELD_OWNER, FIELD_LABEL, FIELD_LIMIT, FIELD_BEFORE, NULL };
static const char *const task_ref_fields[] = { FIELD_OP, FIELD_ID, FIELD_TASK, NULL };
static const char *const wait_fields[] = { FIELD_OP, FIELD_ID, FIELD_TASK, FIELD_STREAM,
    FIELD_FROM, NULL };
static const char *const input_fields[] = { FIELD_OP, FIELD_ID, FIELD_TASK, FIELD_DATA,
    FIELD_DATA_BASE64, FIELD_EOF, NULL };
static const char *const resize_fields[] = { FIELD_OP, FIELD_ID, FIELD_SIZE, FIELD_POOL,
    FIELD_MIN, FIELD_MAX, NULL };
static const char *const pool_ref_fields[] = { FIELD_OP, FIELD_ID, FIELD_POOL, NULL };
static const char *const shutdown_fields[] = { FIELD_OP, FIELD_ID, FIELD_MODE, NULL };

static const struct {
	const char *op;
	const char *const *fields;
	const char *where;          /* how a message names the request */
} request_fields[] = {
	{ OP_HELLO, hello_fields, "a hello request" },
	{ OP_PING, plain_fields, "a ping request" },
	{ OP_SUBMIT, submit_fields, "a submit request" },
	{ OP_WAIT, wait_fields, "a wait request" },
	{ OP_STATUS, task_ref_fields, "a status request" },
	{ OP_CANCEL, task_ref_fields, "a cancel request" },
	{ OP_STATS, plain_fields, "a stats request" },
	{ OP_RESIZE, resize_fields, "a resize request" },
	{ OP_SHUTDOWN, shutdown_fields, "a shutdown request" },
	{ OP_LIST, list_fields, "a list request" },
	{ OP_INPUT, input_fields, "an input request" },
	{ OP_PAUSE, pool_ref_fields, "a pause request" },
	{ OP_RESUME, pool_ref_fields, "a resume request" },
};

const char *const *
proto_request_fields(const char *op)
{
	for (size_t i = 0; i < sizeof request_fields / sizeof request_fields[0]; i++)
		if (strcmp(request_fields[i].op, op) == 0)
			return request_fields[i].fields;
	return NULL;
}

/* Checks req's keys against its op's row; a reader of another op is a bug. */
static int
check_request(const struct request *req, uint32_t *present, char **msg)
{
	for (size_t i = 0; i < sizeof request_fields / sizeof request_fields[0]; i++)
		if (request_fields[i].op[0] == req->op[0] &&
		    strcmp(request_fields[i].op, req->op) == 0)
			return proto_scan_fields(req->root, request_fields[i].fields,
			    request_fields[i].where, present, msg);
	return cause_set(msg, "op \"%s\" has no fields table", req->op);
}

int
proto_read_hello(const struct request *req, struct proto_hello *out, char **msg)
{
	memset(out, 0, sizeof *out);
	if (check_request(req, NULL, msg) == -1 ||
	    proto_get_string(req->root, FIELD_TOKEN, false, &out->token, msg) == -1 ||
	    proto_get_string(req->root, FIELD_CLIENT, false, &out->client, msg) == -1)
		return -1;
	return 0;
}

int
proto_read_plain(const struct request *req, char **msg)
{
	return check_request(req, NULL, msg);
}

/* submit's "after": 1 to WIRE_MAX_AFTER task ids, each kept once. */
static int
read_after(json_t *v, struct proto_submit *out, char **msg)
{
	json_t *one, *wrap;
	size_t i, k;
	uint64_t id;

	if (!json_is_array(v) || json_array_size(v) == 0 || json_array_size(v) > WIRE_MAX_AFTER)
		return cause_set(msg, "field \"%s\" must be an array of 1 to %d task ids, not %s",
		    FIELD_AFTER, WIRE_MAX_AFTER, !json_is_array(v) ? type_name(v) :
		    json_array_size(v) == 0 ? "an empty array" : "a longer array");
	if ((wrap = json_object()) == NULL)
		return cause_set(msg, "out of memory");
	json_array_foreach(v, i, one) {
		json_object_set(wrap, FIELD_AFTER, one);
		if (proto_get_task_id(wrap, FIELD_AFTER, &id, msg) == -1) {
			json_decref(wrap);
			free(*msg);
			return cause_set(msg, "field \"%s\": element %zu must be a task id (a "
			    "positive integer)", FIELD_AFTER, i);
		}
		for (k = 0; k < out->nafter && out->after[k] != id; k++)
			;
		if (k == out->nafter)
			out->after[out->nafter++] = id;
	}
	json_decref(wrap);
	return 0;
}

/* submit's "retry_on": a non-empty array of failed, timed_out, lost. */
static int
read_retry_on(json_t *v, unsigned *out, char **msg)
{
	static const struct { const char *name; unsigned bit; } states[] = {
		{ STATE_FAILED, PROTO_RETRY_FAILED }, { STATE_TIMED_OUT, PROTO_RETRY_TIMED_OUT },
		{ STATE_LOST, PROTO_RETRY_LOST },
	};
	char q[UTF8_QUOTE_SIZE];
	json_t *one;
	size_t i, k;

	if (!json_is_array(v) || json_array_size(v) == 0)
		return cause_set(msg, "field \"%s\" must be a non-empty array of states (%s, %s, "
		    "%s), not %s", FIELD_RETRY_ON, STATE_FAILED, STATE_TIMED_OUT, STATE_LOST,
		    json_is_array(v) ? "an empty array" : type_name(v));
	*out = 0;
	json_array_foreach(v, i, one) {
		if (!json_is_string(one))
			return cause_set(msg, "field \"%s\": element %zu must be a state's name, "
			    "not %s", FIELD_RETRY_ON, i, type_name(one));
		for (k = 0; k < sizeof states / sizeof states[0]; k++)
			if (strcmp(states[k].name, json_string_value(one)) == 0)
				break;
		if (k == sizeof states / sizeof states[0])
			return cause_set(msg, "field \"%s\": \"%s\" is not a state a task is retried "
			    "on (%s, %s, %s)", FIELD_RETRY_ON, utf8_quote(q, json_string_value(one)),
			    STATE_FAILED, STATE_TIMED_OUT, STATE_LOST);
		*out |= states[k].bit;
	}
	return 0;
}

/* submit's scheduling fields: delay_ms, after, after_mode, retries, retry_*, key. */
static int
read_submit_schedule(json_t *root, struct proto_submit *out, char **msg)
{
	uint64_t retries = 0;
	const char *mode = NULL;
	json_t *v;

	if (proto_get_uint(root, FIELD_DELAY_MS, false, 0, WIRE_MAX_DELAY_MS, &out->delay_ms,
	    msg) == -1 ||
	    ((v = json_object_get(root, FIELD_AFTER)) != NULL && read_after(v, out, msg) == -1) ||
	    proto_get_string(root, FIELD_AFTER_MODE, false, &mode, msg) == -1 ||
	    proto_get_uint(root, FIELD_RETRIES, false, 0, WIRE_MAX_RETRIES, &retries, msg) == -1 ||
	    ((v = json_object_get(root, FIELD_RETRY_ON)) != NULL &&
	    read_retry_on(v, &out->retry_on, msg) == -1) ||
	    proto_get_uint(root, FIELD_RETRY_DELAY_MS, false, 0, PROTO_MAX_RETRY_DELAY_MS,
	    &out->retry_delay_ms, msg) == -1 ||
	    proto_get_uint(root, FIELD_RETRY_DELAY_MAX_MS, false, 0, PROTO_MAX_RETRY_DELAY_MS,
	    &out->retry_delay_max_ms, msg) == -1 ||
	    proto_get_string(root, FIELD_KEY, false, &out->key, msg) == -1)
		return -1;
	out->retries = (unsigned)retries;
	if (mode != NULL) {
		char q[UTF8_QUOTE_SIZE];
		if (strcmp(mode, AFTER_MODE_OK) != 0 && strcmp(mode, AFTER_MODE_ANY) != 0)
			return cause_set(msg, "field \"%s\" must be \"%s\" or \"%s\", not \"%s\"",
			    FIELD_AFTER_MODE, AFTER_MODE_OK, AFTER_MODE_ANY, utf8_quote(q, mode));
		if (out->nafter == 0)
			return cause_set(msg, "field \"%s\" needs \"%s\"", FIELD_AFTER_MODE,
			    FIELD_AFTER);
		out->after_any = strcmp(mode, AFTER_MODE_ANY) == 0;
	}
	if (out->key != NULL && (*out->key == '\0' || strlen(out->key) > WIRE_MAX_KEY))
		return cause_set(msg, "field \"%s\" must be 1 to %d bytes long, not %zu",
		    FIELD_KEY, WIRE_MAX_KEY, strlen(out->key));
	return 0;
}

int
proto_read_submit(const struct request *req, struct proto_submit *out, char **msg)
{
	/* Only the fields a request has are looked up: bit F_x of present says x is there. */
	enum { F_OP, F_ID, F_TASK, F_POOL, F_DETACH, F_STREAM, F_QUEUE_TIMEOUT, F_LABEL,
	    F_ON_LOST, F_PRIORITY, F_ADMISSION, F_ADMISSION_TIMEOUT, F_DELAY, F_AFTER,
	    F_AFTER_MODE, F_RETRIES, F_RETRY_ON, F_RETRY_DELAY, F_RETRY_DELAY_MAX, F_KEY };
	uint32_t present = 0;
	json_t *root = req->root;
	const char *on_lost = ON_LOST_LOST;

	memset(out, 0, sizeof *out);
	out->pool = WIRE_DEFAULT_POOL;
	out->label = "";
	if (check_request(req, &present, msg) == -1 ||
	    ((present & 1u << F_POOL) &&
	    proto_get_string(root, FIELD_POOL, false, &out->pool, msg) == -1) ||
	    ((present & 1u << F_DETACH) && proto_get_bool(root, FIELD_DETACH, &out->detach,
	    msg) == -1) ||
	    ((present & 1u << F_STREAM) && proto_get_bool(root, FIELD_STREAM, &out->stream,
	    msg) == -1) ||
	    ((present & 1u << F_QUEUE_TIMEOUT) && proto_get_uint(root, FIELD_QUEUE_TIMEOUT_MS,
	    false, 1, PROTO_MAX_TIMEOUT_MS, &out->queue_timeout_ms, msg) == -1) ||
	    ((present & 1u << F_LABEL) &&
	    proto_get_string(root, FIELD_LABEL, false, &out->label, msg) == -1) ||
	    ((present & 1u << F_ON_LOST) &&
	    proto_get_string(root, FIELD_ON_LOST, false, &on_lost, msg) == -1) ||
	    ((present & 1u << F_ADMISSION) &&
	    proto_get_string(root, FIELD_ADMISSION, false, &out->admission, msg) == -1) ||
	    ((present & 1u << F_ADMISSION_TIMEOUT) && proto_get_uint(root,
	    FIELD_ADMISSION_TIMEOUT_MS, false, 1, PROTO_MAX_TIMEOUT_MS,
	    &out->admission_timeout_ms, msg) == -1))
		return -1;
	if (present & 1u << F_PRIORITY) {
		json_t *v = json_object_get(root, FIELD_PRIORITY);
		if (!json_is_integer(v) || json_integer_value(v) < WIRE_PRIORITY_MIN ||
		    json_integer_value(v) > WIRE_PRIORITY_MAX)
			return cause_set(msg, "field \"%s\" must be an integer from %d to %d",
			    FIELD_PRIORITY, WIRE_PRIORITY_MIN, WIRE_PRIORITY_MAX);
		out->priority = (int)json_integer_value(v);
	}
	if (out->admission != NULL && strcmp(out->admission, ADMISSION_REJECT) != 0 &&
	    strcmp(out->admission, ADMISSION_WAIT) != 0) {
		char q[UTF8_QUOTE_SIZE];
		return cause_set(msg, "field \"%s\" must be \"%s\" or \"%s\", not \"%s\" "
		    "(drop_oldest is the pool's to choose: its admission key)", FIELD_ADMISSION,
		    ADMISSION_REJECT, ADMISSION_WAIT, utf8_quote(q, out->admission));
	}
	if (strlen(out->label) > WIRE_MAX_LABEL)
		return cause_set(msg, "field \"%s\" is %zu bytes long, longer than %d",
		    FIELD_LABEL, strlen(out->label), WIRE_MAX_LABEL);
	if (strcmp(on_lost, ON_LOST_LOST) != 0 && strcmp(on_lost, ON_LOST_RERUN) != 0)
		return cause_set(msg, "field \"%s\" must be \"%s\" or \"%s\"", FIELD_ON_LOST,
		    ON_LOST_LOST, ON_LOST_RERUN);
	out->on_lost_rerun = strcmp(on_lost, ON_LOST_RERUN) == 0;
	out->retry_on = PROTO_RETRY_DEFAULT;
	out->retry_delay_ms = PROTO_RETRY_DELAY_MS;
	out->retry_delay_max_ms = PROTO_RETRY_DELAY_MAX_MS;
	if (present >> F_DELAY != 0 && read_submit_schedule(root, out, msg) == -1)
		return -1;
	out->task = (present & 1u << F_TASK) ? json_object_get(root, FIELD_TASK) : NULL;
	if (out->task == NULL)
		return cause_set(msg, "missing field \"%s\"", FIELD_TASK);
	if (!json_is_object(out->task))
		return cause_set(msg, "field \"%s\" must be an object", FIELD_TASK);
	return 0;
}

/* A state's wire name as list's filter takes it, or NULL. */
static const char *
list_state(const char *name)
{
	static const char *const states[] = { STATE_SCHEDULED, STATE_WAITING, STATE_QUEUED,
	    STATE_RUNNING, STATE_SUCCEEDED, STATE_FAILED, STATE_TIMED_OUT, STATE_CANCELLED,
	    STATE_EXPIRED, STATE_LOST, STATE_SKIPPED };

	for (size_t i = 0; i < sizeof states / sizeof states[0]; i++)
		if (strcmp(states[i], name) == 0)
			return states[i];
	return NULL;
}

/* list's "state": one state's name or an array of them. */
static int
read_list_states(json_t *v, struct proto_list *out, char **msg)
{
	static const char names[] = STATE_SCHEDULED ", " STATE_WAITING ", " STATE_QUEUED ", "
	    STATE_RUNNING ", " STATE_SUCCEEDED ", " STATE_FAILED ", " STATE_TIMED_OUT ", "
	    STATE_CANCELLED ", " STATE_EXPIRED ", " STATE_LOST ", " STATE_SKIPPED;
	char q[UTF8_QUOTE_SIZE];
	json_t *one;
	size_t i;

	if (json_is_string(v)) {
		if ((out->states[0] = list_state(json_string_value(v))) == NULL)
			return cause_set(msg, "field \"%s\": no state \"%s\" (states: %s)",
			    FIELD_STATE, utf8_quote(q, json_string_value(v)), names);
		out->nstates = 1;
		return 0;
	}
	if (!json_is_array(v) || json_array_size(v) == 0)
		return cause_set(msg, "field \"%s\" must be a state's name or a non-empty array "
		    "of them, not %s", FIELD_STATE, json_is_array(v) ? "an empty array" :
		    type_name(v));
	json_array_foreach(v, i, one) {
		const char *s;
		if (!json_is_string(one))
			return cause_set(msg, "field \"%s\": element %zu must be a state's name, "
			    "not %s", FIELD_STATE, i, type_name(one));
		if ((s = list_state(json_string_value(one))) == NULL)
			return cause_set(msg, "field \"%s\": no state \"%s\" (states: %s)",
			    FIELD_STATE, utf8_quote(q, json_string_value(one)), names);
		if (out->nstates < PROTO_LIST_MAX_STATES)
			out->states[out->nstates++] = s;    /* every state once: a repeat past them */
	}
	return 0;
}

int
proto_read_list(const struct request *req, struct proto_list *out, char **msg)
{
	json_t *root = req->root, *v;

	memset(out, 0, sizeof *out);
	out->limit = WIRE_LIST_DEFAULT;
	if (check_request(req, NULL, msg) == -1 ||
	    ((v = json_object_get(root, FIELD_STATE)) != NULL &&
	    read_list_states(v, out, msg) == -1) ||
	    proto_get_string(root, FIELD_POOL, false, &out->pool, msg) == -1 ||
	    proto_get_string(root, FIELD_OWNER, false, &out->owner, msg) == -1 ||
	    proto_get_string(root, FIELD_LABEL, false, &out->label, msg) == -1 ||
	    proto_get_uint(root, FIELD_LIMIT, false, 1, WIRE_LIST_MAX, &out->limit, msg) == -1 ||
	    (json_object_get(root, FIELD_BEFORE) != NULL &&
	    proto_get_task_id(root, FIELD_BEFORE, &out->before, msg) == -1))
		return -1;
	return 0;
}

int
proto_read_task(json_t *spec, struct proto_task_spec *out, char **msg)
{
	memset(out, 0, sizeof *out);
	if (proto_get_string(spec, FIELD_KIND, true, &out->kind, msg) == -1 ||
	    proto_get_uint(spec, FIELD_TIMEOUT_MS, false, 1, PROTO_MAX_TIMEOUT_MS,
	    &out->timeout_ms, msg) == -1)
		return -1;
	return 0;
}

int
proto_read_wait(const struct request *req, struct proto_wait *out, char **msg)
{
	json_t *root = req->root;

	memset(out, 0, sizeof *out);
	if (check_request(req, NULL, msg) == -1 ||
	    proto_get_task_id(root, FIELD_TASK, &out->task, msg) == -1 ||
	    proto_get_bool(root, FIELD_STREAM, &out->stream, msg) == -1 ||
	    proto_get_string(root, FIELD_FROM, false, &out->from, msg) == -1)
		return -1;
	if (out->from != NULL && strcmp(out->from, FROM_START) != 0) {
		char q[UTF8_QUOTE_SIZE];
		return cause_set(msg, "field \"%s\" must be \"%s\" (the output kept so far "
		    "first), not \"%s\"", FIELD_FROM, FROM_START, utf8_quote(q, out->from));
	}
	if (out->from != NULL && !out->stream)
		return cause_set(msg, "field \"%s\" needs \"%s\": true", FIELD_FROM,
		    FIELD_STREAM);
	return 0;
}

int
proto_read_input(const struct request *req, struct proto_input *out, char **msg)
{
	json_t *root = req->root, *text, *b64;

	memset(out, 0, sizeof *out);
	if (check_request(req, NULL, msg) == -1 ||
	    proto_get_task_id(root, FIELD_TASK, &out->task, msg) == -1 ||
	    proto_get_bool(root, FIELD_EOF, &out->eof, msg) == -1)
		return -1;
	text = json_object_get(root, FIELD_DATA);
	b64 = json_object_get(root, FIELD_DATA_BASE64);
	if (text != NULL && b64 != NULL)
		return cause_set(msg, "fields \"%s\" and \"%s\" exclude each other", FIELD_DATA,
		    FIELD_DATA_BASE64);
	if (text != NULL) {
		if (!json_is_string(text))
			return cause_set(msg, "field \"%s\" must be a string, not %s", FIELD_DATA,
			    type_name(text));
		out->data = json_string_value(text);
		out->len = json_string_length(text);
	} else if (b64 != NULL) {
		if (!json_is_string(b64))
			return cause_set(msg, "field \"%s\" must be a string, not %s",
			    FIELD_DATA_BASE64, type_name(b64));
		out->decoded = base64_decode(json_string_value(b64), json_string_length(b64),
		    &out->len);
		if (out->decoded == NULL)
			return cause_set(msg, errno == ENOMEM ? "out of memory" :
			    "field \"%s\" is not valid base64", FIELD_DATA_BASE64);
		out->data = (const char *)out->decoded;
	}
	if (out->data == NULL && !out->eof)
		return cause_set(msg, "an input request needs \"%s\", \"%s\" or \"%s\": true",
		    FIELD_DATA, FIELD_DATA_BASE64, FIELD_EOF);
	return 0;
}

int
proto_read_task_ref(const struct request *req, uint64_t *task, char **msg)
{
	*task = 0;
	if (check_request(req, NULL, msg) == -1 ||
	    proto_get_task_id(req->root, FIELD_TASK, task, msg) == -1)
		return -1;
	return 0;
}

int
proto_read_resize(const struct request *req, struct proto_resize *out, char **msg)
{
	static const char *const names[3] = { FIELD_SIZE, FIELD_MIN, FIELD_MAX };
	int64_t *vals[3] = { &out->size, &out->min, &out->max };
	bool *has[3] = { &out->has_size, &out->has_min, &out->has_max };
	json_t *v;

	memset(out, 0, sizeof *out);
	out->pool = WIRE_DEFAULT_POOL;
	if (check_request(req, NULL, msg) == -1 ||
	    proto_get_string(req->root, FIELD_POOL, false, &out->pool, msg) == -1)
		return -1;
	/* its range is the pool's (1..its limit), which op_resize knows and names */
	for (int i = 0; i < 3; i++) {
		if ((v = json_object_get(req->root, names[i])) == NULL)
			continue;
		if (!json_is_integer(v))
			return cause_set(msg, "field \"%s\" must be an integer, not %s", names[i],
			    type_name(v));
		*vals[i] = json_integer_value(v);
		*has[i] = true;
	}
	if (!out->has_size && !out->has_min && !out->has_max)
		return cause_set(msg, "missing field \"%s\" (or \"%s\" and/or \"%s\")",
		    FIELD_SIZE, FIELD_MIN, FIELD_MAX);
	if (out->has_size && (out->has_min || out->has_max))
		return cause_set(msg, "field \"%s\" is both bounds: give it, or \"%s\" and/or "
		    "\"%s\", not both", FIELD_SIZE, FIELD_MIN, FIELD_MAX);
	if (out->has_min && out->has_max && out->min > out->max)
		return cause_set(msg, "field \"%s\" (%lld) is above \"%s\" (%lld)", FIELD_MIN,
		    (long long)out->min, FIELD_MAX, (long long)out->max);
	return 0;
}

int
proto_read_pool_ref(const struct request *req, const char **pool, char **msg)
{
	*pool = NULL;
	if (check_request(req, NULL, msg) == -1 ||
	    proto_get_string(req->root, FIELD_POOL, true, pool, msg) == -1)
		return -1;
	return 0;
}

int
proto_read_shutdown(const struct request *req, struct proto_shutdown *out, char **msg)
{
	memset(out, 0, sizeof *out);
	out->mode = MODE_DRAIN;
	if (check_request(req, NULL, msg) == -1 ||
	    proto_get_string(req->root, FIELD_MODE, false, &out->mode, msg) == -1)
		return -1;
	if (strcmp(out->mode, MODE_DRAIN) != 0 && strcmp(out->mode, MODE_NOW) != 0) {
		char q[UTF8_QUOTE_SIZE];
		return cause_set(msg, "field \"%s\" must be \"%s\" or \"%s\", not \"%s\"",
		    FIELD_MODE, MODE_DRAIN, MODE_NOW, utf8_quote(q, out->mode));
	}
	out->now = strcmp(out->mode, MODE_NOW) == 0;
	return 0;
}
