/*
 * event.c: reading the daemon's events: fields, errors and the exit codes
 * they stand for, a finished task's outcome, and its output.
 */
#include "config.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tpctl.h"
#include "wire.h"
/* the daemon's encoder and this decoder are one file, shared */
#include "base64.h"

const char *
event_name(const json_t *ev)
{
	return event_str(ev, FIELD_EVENT, "");
}

int64_t
event_id(const json_t *ev)
{
	json_t *id = json_object_get(ev, FIELD_ID);

	return json_is_integer(id) ? json_integer_value(id) : -1;
}

int64_t
event_int(const json_t *obj, const char *name, int64_t def)
{
	json_t *v = json_object_get(obj, name);

	return json_is_integer(v) ? json_integer_value(v) : def;
}

double
event_num(const json_t *obj, const char *name, double def)
{
	json_t *v = json_object_get(obj, name);

	return json_is_number(v) ? json_number_value(v) : def;
}

const char *
event_str(const json_t *obj, const char *name, const char *def)
{
	json_t *v = json_object_get(obj, name);

	return json_is_string(v) ? json_string_value(v) : def;
}

const char *
event_error_code(const json_t *ev)
{
	return event_str(json_object_get(ev, FIELD_ERROR), FIELD_CODE, "");
}

const char *
event_error_message(const json_t *ev)
{
	return event_str(json_object_get(ev, FIELD_ERROR), FIELD_MESSAGE, "");
}

int
event_exit_for_error(const char *code)
{
	if (strcmp(code, ERR_UNAUTHENTICATED) == 0 ||
	    strcmp(code, ERR_FORBIDDEN) == 0)
		return EX_NOPERM;
	if (strcmp(code, ERR_QUEUE_FULL) == 0 || strcmp(code, ERR_CLOSED) == 0 ||
	    strcmp(code, ERR_QUOTA) == 0)
		return EX_TEMPFAIL;
	return EXIT_TASK_FAILED;
}

bool event_token_presented;

int
event_report_error(const char *what, const json_t *ev)
{
	const char *code = event_error_code(ev);
	const char *message = event_error_message(ev);

	if (*code == '\0')
		code = "unknown";
	if (*message == '\0')
		message = "the daemon gave no reason";
	/* the daemon speaks of its protocol (a hello); say what to do here */
	if (strcmp(code, ERR_UNAUTHENTICATED) == 0 && !event_token_presented)
		message = "the daemon needs a token first: name the file that holds "
		    "it with --token-file FILE (or TPD_TOKEN_FILE)";
	if (what != NULL)
		tpctl_warnx("%s: %s (%s)", what, message, code);
	else
		tpctl_warnx("%s (%s)", message, code);
	return event_exit_for_error(code);
}

int
event_task_exit_code(const json_t *done)
{
	const char *state = event_str(done, FIELD_STATE, "");
	const char *code = event_error_code(done);
	json_t *result = json_object_get(done, FIELD_RESULT);
	int64_t n;

	if (strcmp(state, STATE_SUCCEEDED) == 0)
		return 0;
	if (strcmp(state, STATE_TIMED_OUT) == 0)
		return EXIT_TIMED_OUT;
	if (strcmp(state, STATE_FAILED) == 0) {
		if (strcmp(code, ERR_SIGNAL) == 0) {
			n = event_int(result, FIELD_SIGNAL, 0);
			if (n > 0 && n < 128)
				return EXIT_SIGNALLED + (int)n;
		}
		if (strcmp(code, ERR_EXIT_STATUS) == 0) {
			n = event_int(result, FIELD_EXIT_CODE, 1);
			if (n > 0 && n < 256)
				return (int)n;
		}
	}
	return EXIT_TASK_FAILED;
}

/*
 * A signal's name as the daemon and doc/exec.md write it, "SIGKILL": the
 * result's signal_name when it has one, else this system's name for the
 * number, else "signal N".
 */
static const char *
event_signal_name(const json_t *result, int64_t n, char *buf, size_t len)
{
	const char *name = event_str(result, FIELD_SIGNAL_NAME, NULL), *abbrev;

	if (name != NULL && *name != '\0')
		return name;
	if (n > 0 && n < NSIG && (abbrev = sigabbrev_np((int)n)) != NULL)
		snprintf(buf, len, "SIG%s", abbrev);
	else
		snprintf(buf, len, "signal %lld", (long long)n);
	return buf;
}

json_t *
event_usage(const json_t *done)
{
	json_t *usage = json_object_get(json_object_get(done, FIELD_RESULT), FIELD_USAGE);

	return json_is_object(usage) ? usage : NULL;
}

/*
 * An oom's limit: the daemon names it in its message, "... (memory_bytes
 * N)". Returns 0, or -1 when the message does not say.
 */
static int
event_oom_limit(const char *message, uint64_t *bytes)
{
	const char *p = strstr(message, LIMIT_MEMORY_BYTES " ");
	unsigned long long v;
	char *end;

	if (p == NULL)
		return -1;
	p += sizeof LIMIT_MEMORY_BYTES;
	if (*p < '0' || *p > '9')
		return -1;
	errno = 0;
	v = strtoull(p, &end, 10);
	if (errno != 0 || end == p)
		return -1;
	*bytes = v;
	return 0;
}

char *
event_describe_done(const json_t *done)
{
	const char *state = event_str(done, FIELD_STATE, "");
	const char *code = event_error_code(done);
	const char *message = event_error_message(done);
	json_t *result = json_object_get(done, FIELD_RESULT);
	char buf[FORMAT_DURATION_LEN], name[32], limit[FORMAT_BYTES_LEN], *s = NULL;
	uint64_t bytes;
	int64_t n;
	int r;

	format_duration(event_num(done, FIELD_RUN_MS, 0), buf, sizeof buf);
	if (strcmp(state, STATE_SUCCEEDED) == 0)
		r = asprintf(&s, "succeeded in %s", buf);
	else if (strcmp(code, ERR_EXIT_STATUS) == 0)
		r = asprintf(&s, "failed with exit status %lld after %s",
		    (long long)event_int(result, FIELD_EXIT_CODE, -1), buf);
	else if (strcmp(code, ERR_SIGNAL) == 0) {
		n = event_int(result, FIELD_SIGNAL, 0);
		r = asprintf(&s, "killed by signal %lld (%s) after %s", (long long)n,
		    event_signal_name(result, n, name, sizeof name), buf);
	} else if (strcmp(code, ERR_OOM) == 0) {
		if (event_oom_limit(message, &bytes) == 0)
			r = asprintf(&s, "killed: it passed its memory limit of %s",
			    format_bytes(bytes, limit, sizeof limit));
		else
			r = asprintf(&s, "killed: it passed its memory limit");
	} else if (strcmp(state, STATE_TIMED_OUT) == 0)
		r = asprintf(&s, "timed out after %s", buf);
	else if (*message != '\0' && strcmp(message, state) != 0 &&
	    strcmp(message, code) != 0)
		r = asprintf(&s, "%s: %s", *state != '\0' ? state : "failed", message);
	else
		r = asprintf(&s, "%s", *state != '\0' ? state : "failed");
	if (r == -1)
		return NULL;
	return s;
}

int
event_write_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;
	ssize_t n;

	if (fd == STDOUT_FILENO)
		fflush(stdout);
	else if (fd == STDERR_FILENO)
		fflush(stderr);
	while (len > 0) {
		n = write(fd, p, len);
		if (n == -1 && errno == EINTR)
			continue;
		if (n == -1)
			return -1;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* Writes a string, or the base64 form's bytes, to fd. */
static int
event_write_field(int fd, const json_t *obj, const char *text, const char *b64)
{
	json_t *v;
	unsigned char *buf;
	size_t len;
	int r;

	if ((v = json_object_get(obj, text)) != NULL && json_is_string(v))
		return event_write_all(fd, json_string_value(v), json_string_length(v));
	if ((v = json_object_get(obj, b64)) != NULL && json_is_string(v)) {
		buf = base64_decode(json_string_value(v), json_string_length(v), &len);
		if (buf == NULL) {
			tpctl_warnx("cannot decode %s: %s", b64, errno == ENOMEM ?
			    "out of memory" : "not base64");
			return 0;
		}
		r = event_write_all(fd, buf, len);
		free(buf);
		return r;
	}
	return 0;
}

/* An exec task's result: it always has exit_code (null when a signal ended it). */
static bool
event_is_exec_result(const json_t *result)
{
	return json_is_object(result) &&
	    json_object_get(result, FIELD_EXIT_CODE) != NULL;
}

int
event_write_result_output(const json_t *done)
{
	json_t *result = json_object_get(done, FIELD_RESULT);
	char *text;
	int r;

	if (result == NULL || json_is_null(result))
		return 0;
	if (!event_is_exec_result(result)) {
		/* another kind's result: what it returned, as one line of JSON */
		if ((text = json_dumps(result, JSON_COMPACT | JSON_ENCODE_ANY)) == NULL) {
			errno = ENOMEM;
			return -1;
		}
		r = event_write_all(STDOUT_FILENO, text, strlen(text));
		free(text);
		return r == -1 ? -1 : event_write_all(STDOUT_FILENO, "\n", 1);
	}
	if (event_write_field(STDOUT_FILENO, result, FIELD_STDOUT,
	    FIELD_STDOUT_BASE64) == -1)
		return -1;
	return event_write_field(STDERR_FILENO, result, FIELD_STDERR,
	    FIELD_STDERR_BASE64);
}

int
event_write_output(const json_t *ev)
{
	const char *stream = event_str(ev, FIELD_STREAM, STREAM_STDOUT);
	int fd = strcmp(stream, STREAM_STDERR) == 0 ? STDERR_FILENO : STDOUT_FILENO;

	return event_write_field(fd, ev, FIELD_DATA, FIELD_DATA_BASE64);
}
