/*
 * feed.c: a task's stdin fed from a file descriptor over a session, as
 * input requests (run -i, submit -i, send; doc/protocol.md).
 *
 * At most FEED_WINDOW bytes are in flight: sent, not yet answered. The
 * daemon answers an input once the bytes are in the task's buffer, and
 * stops reading the connection while that buffer is full, so the answers
 * stop, the window fills and tpctl stops reading its input: memory stays
 * bounded on both sides whatever the input's size. Each chunk goes as
 * "data" when it is UTF-8 text without NUL, else as "data_base64". Input
 * answers come in the order sent (the daemon answers each at once), so the
 * window is a queue of their ids and sizes.
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base64.h"
#include "tpctl.h"
#include "wire.h"

#define FEED_CHUNK 65536
#define FEED_WINDOW (4 * FEED_CHUNK)

void
feed_init(struct feed *f, int fd, bool send_eof)
{
	memset(f, 0, sizeof *f);
	f->fd = fd;
	f->send_eof = send_eof;
	f->task = -1;
}

void
feed_free(struct feed *f)
{
	free(f->buf);
	f->buf = NULL;
}

bool
feed_wants_input(const struct feed *f)
{
	return f->task >= 0 && f->fd != -1 && !f->failed && f->inflight < FEED_WINDOW &&
	    f->nsent - f->nanswered < FEED_MAX_PENDING;
}

bool
feed_busy(const struct feed *f)
{
	return f->task >= 0 && !f->failed && (f->fd != -1 || f->nanswered < f->nsent);
}

/* Sends one input request; 0, or -1 (printed). */
static int
feed_send(struct feed *f, struct session *s, const char *data, size_t len, bool eof)
{
	json_t *req = json_pack("{s:s, s:I}", FIELD_OP, OP_INPUT, FIELD_TASK,
	    (json_int_t)f->task);
	json_t *v = NULL;
	int64_t id;

	if (req == NULL)
		return -1;
	if (len > 0 && memchr(data, '\0', len) == NULL && (v = json_stringn(data, len)) != NULL)
		json_object_set_new(req, FIELD_DATA, v);
	else if (len > 0) {
		char *b64 = base64_encode(data, len);
		if (b64 == NULL) {
			json_decref(req);
			tpctl_warnx("out of memory");
			return -1;
		}
		json_object_set_new(req, FIELD_DATA_BASE64, json_string(b64));
		free(b64);
	}
	if (eof)
		json_object_set_new(req, FIELD_EOF, json_true());
	/* not owed at once: a task whose buffer is full holds the answer back */
	if ((id = session_send_wait(s, req)) == -1)
		return -1;
	f->ids[f->nsent % FEED_MAX_PENDING] = id;
	f->lens[f->nsent % FEED_MAX_PENDING] = len;
	f->nsent++;
	f->inflight += len;
	return 0;
}

int
feed_read(struct feed *f, struct session *s)
{
	ssize_t n;

	if (f->buf == NULL && (f->buf = malloc(FEED_CHUNK)) == NULL) {
		tpctl_warnx("out of memory");
		return EX_OSERR;
	}
	do
		n = read(f->fd, f->buf, FEED_CHUNK);
	while (n == -1 && errno == EINTR);
	if (n == -1 && errno == EAGAIN)
		return 0;
	if (n == -1) {
		/* what was read went; the task's stdin ends here, as at the end of the input */
		tpctl_warnx("cannot read %s: %s", f->name != NULL ? f->name : "stdin",
		    strerror(errno));
		f->read_failed = true;
		n = 0;
	}
	if (n == 0) {
		f->fd = -1;
		if (f->send_eof && feed_send(f, s, NULL, 0, true) == -1)
			return EX_UNAVAILABLE;
		return 0;
	}
	f->total += (uint64_t)n;
	return feed_send(f, s, f->buf, (size_t)n, false) == -1 ? EX_UNAVAILABLE : 0;
}

int
feed_event(struct feed *f, const json_t *ev)
{
	int64_t id = event_id(ev);
	size_t at;

	if (f->nanswered == f->nsent || id != f->ids[f->nanswered % FEED_MAX_PENDING])
		return 0;
	at = f->nanswered % FEED_MAX_PENDING;
	f->nanswered++;
	f->inflight -= f->lens[at];
	if (strcmp(event_name(ev), EV_ERROR) == 0) {
		/* the task ended, or is not ours: the rest of the input has nowhere to go */
		if (!f->failed && (!f->quiet_refusal ||
		    strcmp(event_error_code(ev), ERR_BAD_REQUEST) != 0))
			f->code = event_report_error("input", ev);
		else if (!f->failed)
			f->code = event_exit_for_error(event_error_code(ev));
		f->failed = true;
		f->fd = -1;
		return 1;
	}
	if (json_is_true(json_object_get(ev, FIELD_STDIN_CLOSED)) && !f->closed_said) {
		/* as a pipe's writer would: stop writing, quietly for the task's sake */
		f->closed_said = true;
		f->fd = -1;
		tpctl_warnx("task %lld closed its stdin: the rest of the input is not sent",
		    (long long)f->task);
	}
	return 1;
}
