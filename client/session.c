/*
 * session.c: a connection to tpd with the global options applied: the
 * hello with a token, request ids, --json echo of every event, the answer
 * timeout, and the exit codes for a connection that failed.
 *
 * Every request but wait is answered at once: a daemon that owes such an
 * answer and sends nothing at all for --timeout-answer is stopped, hung or
 * overloaded, and tpctl gives up (exit 69) rather than wait for ever. The
 * clock restarts whenever bytes move either way, so a long event arriving
 * slowly, or a large request going out slowly, is not mistaken for
 * silence. What only a task's end answers (a wait's done, a submit's done,
 * a run's output) is waited for as long as the task takes.
 */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "tpctl.h"
#include "wire.h"

/* The longest token file read. */
#define SESSION_MAX_TOKEN 4096

/* Reads the token: the file's first line, without trailing blanks. */
static int
session_read_token(const char *path, char **token)
{
	char buf[SESSION_MAX_TOKEN + 1];
	size_t n;
	FILE *f;

	if ((f = fopen(path, "re")) == NULL) {
		tpctl_warnx("cannot read the token file %s: %s", path, strerror(errno));
		return EX_NOINPUT;
	}
	n = fread(buf, 1, SESSION_MAX_TOKEN, f);
	if (ferror(f)) {
		tpctl_warnx("cannot read the token file %s: %s", path, strerror(errno));
		fclose(f);
		return EX_NOINPUT;
	}
	fclose(f);
	buf[n] = '\0';
	buf[strcspn(buf, "\r\n")] = '\0';
	n = strlen(buf);
	while (n > 0 && (buf[n - 1] == ' ' || buf[n - 1] == '\t'))
		buf[--n] = '\0';
	if (n == 0) {
		tpctl_warnx("the token file %s is empty: it should hold the token "
		    "on its first line", path);
		return EX_NOINPUT;
	}
	if ((*token = strdup(buf)) == NULL)
		return EX_OSERR;
	return 0;
}

/* Presents the token and waits for the daemon's verdict. */
static int
session_hello(struct session *s, const char *token)
{
	json_t *req, *reply;
	int r;

	req = json_pack("{s:s, s:s, s:s}", FIELD_OP, OP_HELLO, FIELD_TOKEN, token,
	    FIELD_CLIENT, "tpctl/" PACKAGE_VERSION);
	if (req == NULL) {
		tpctl_warnx("the token in %s is not UTF-8 text", s->opt->token_file);
		return EX_DATAERR;
	}
	r = session_call(s, req, &reply);
	if (r != 0)
		return r;
	if (strcmp(event_name(reply), EV_ERROR) == 0) {
		/* one line: whose token, and the daemon's reason */
		tpctl_warnx("the daemon at %s refused the token in %s: %s (%s)",
		    link_address(s->link), s->opt->token_file,
		    *event_error_message(reply) != '\0' ?
		    event_error_message(reply) : "no reason given",
		    *event_error_code(reply) != '\0' ? event_error_code(reply) :
		    "unknown");
		r = event_exit_for_error(event_error_code(reply));
		json_decref(reply);
		return r;
	}
	event_token_presented = true;
	json_decref(reply);
	return 0;
}

int
session_open(struct session *s, struct tpctl *opt)
{
	char *cause = NULL, *token = NULL;
	int r;

	memset(s, 0, sizeof *s);
	s->opt = opt;
	s->next_id = 1;
	s->answer_timeout_ms = opt->answer_timeout_ms;
	s->answer_option = "--timeout-answer";
	s->probe_id = -1;
	if ((r = tpctl_resolve(opt)) != 0)
		return r;
	if (opt->token_file != NULL &&
	    (r = session_read_token(opt->token_file, &token)) != 0)
		return r;
	s->link = link_open(opt->socket_path, opt->socket_fallback, opt->host,
	    opt->connect_timeout_ms, &cause);
	if (s->link == NULL) {
		tpctl_warnx("%s", cause);
		free(cause);
		free(token);
		return EX_UNAVAILABLE;
	}
	if (opt->host == NULL && opt->socket_default &&
	    link_check_daemon(s->link, tpctl_system_socket(), &cause) == -1) {
		tpctl_warnx("%s", cause);
		free(cause);
		free(token);
		session_close(s);
		return EX_NOPERM;
	}
	if (token != NULL) {
		r = session_hello(s, token);
		explicit_bzero(token, strlen(token));
		free(token);
		if (r != 0) {
			session_close(s);
			return r;
		}
	}
	return 0;
}

void
session_close(struct session *s)
{
	link_close(s->link);
	s->link = NULL;
	free(s->owed);
	s->owed = NULL;
	s->owed_head = s->owed_len = s->owed_cap = 0;
}

/* Notes that the daemon owes an answer to request id at once. */
static int
session_owe(struct session *s, int64_t id, const json_t *req)
{
	struct session_owed *o;
	size_t ncap;

	if (s->owed_head == s->owed_len)
		s->owed_head = s->owed_len = 0;
	if (s->owed_len == s->owed_cap) {
		if (s->owed_head > 0) {
			/* the answered front makes room */
			memmove(s->owed, s->owed + s->owed_head,
			    (s->owed_len - s->owed_head) * sizeof *s->owed);
			s->owed_len -= s->owed_head;
			s->owed_head = 0;
		} else {
			ncap = s->owed_cap == 0 ? 16 : s->owed_cap * 2;
			if ((o = reallocarray(s->owed, ncap, sizeof *o)) == NULL)
				return -1;
			s->owed = o;
			s->owed_cap = ncap;
		}
	}
	o = &s->owed[s->owed_len++];
	o->id = id;
	o->sent_us = tpctl_now_us();
	snprintf(o->what, sizeof o->what, "%s", event_str(req, FIELD_OP, "a request"));
	return 0;
}

/* An event with this id answers the oldest request owed that has it. */
static void
session_settle(struct session *s, int64_t id)
{
	size_t i;

	if (id < 0)
		return;
	for (i = s->owed_head; i < s->owed_len; i++)
		if (s->owed[i].id == id) {
			s->owed[i].id = INT64_MIN;
			break;
		}
	while (s->owed_head < s->owed_len && s->owed[s->owed_head].id == INT64_MIN)
		s->owed_head++;
}

/*
 * How long the oldest owed answer may still take, in ms: -1 when none is
 * owed (or there is no limit), 0 when it is late.
 */
static int
session_answer_left(const struct session *s)
{
	uint64_t since, due, now;

	if (s->owed_head == s->owed_len || s->answer_timeout_ms == 0)
		return -1;
	since = s->owed[s->owed_head].sent_us;
	if (link_last_io_us(s->link) > since)
		since = link_last_io_us(s->link);
	due = since + s->answer_timeout_ms * 1000;
	now = tpctl_now_us();
	if (now >= due)
		return 0;
	if ((due - now + 999) / 1000 > INT_MAX)
		return INT_MAX;
	return (int)((due - now + 999) / 1000);
}

static void
session_no_answer(const struct session *s)
{
	char buf[FORMAT_DURATION_LEN];

	tpctl_warnx("no answer from %s to %s within %s (is tpd stopped or "
	    "overloaded? try a longer %s)", link_address(s->link),
	    s->owed[s->owed_head].what, format_duration((double)s->answer_timeout_ms,
	    buf, sizeof buf), s->answer_option);
}

/* Gives req an id and queues it. Returns the id, or -1 (printed). */
static int64_t
session_send_req(struct session *s, json_t *req, bool owed)
{
	char *cause = NULL;
	int64_t id;

	if (json_is_integer(json_object_get(req, FIELD_ID)))
		id = json_integer_value(json_object_get(req, FIELD_ID));
	else {
		id = s->next_id++;
		json_object_set_new(req, FIELD_ID, json_integer(id));
	}
	if (owed && session_owe(s, id, req) == -1) {
		tpctl_warnx("out of memory");
		json_decref(req);
		return -1;
	}
	if (link_send(s->link, req, &cause) == -1) {
		tpctl_warnx("%s", cause);
		free(cause);
		json_decref(req);
		return -1;
	}
	json_decref(req);
	return id;
}

int64_t
session_send(struct session *s, json_t *req)
{
	return session_send_req(s, req, true);
}

int64_t
session_send_wait(struct session *s, json_t *req)
{
	return session_send_req(s, req, false);
}

int
session_probe(struct session *s, const char *what)
{
	json_t *req = json_pack("{s:s}", FIELD_OP, OP_PING);

	if ((s->probe_id = session_send(s, req)) == -1)
		return -1;
	/* name the requests the pong stands for, not the ping */
	snprintf(s->owed[s->owed_len - 1].what, sizeof s->owed->what, "%s", what);
	return 0;
}

int
session_next(struct session *s, json_t **ev, int timeout_ms)
{
	uint64_t deadline = 0;
	char *cause = NULL;
	const char *line;
	size_t len;
	int r, wait, left;
	bool answer_bound, looked = false;

	if (timeout_ms >= 0)
		deadline = tpctl_now_us() + (uint64_t)timeout_ms * 1000;
	for (;;) {
		wait = -1;
		if (timeout_ms >= 0) {
			uint64_t now = tpctl_now_us();
			wait = now >= deadline ? 0 :
			    (int)((deadline - now + 999) / 1000);
		}
		/*
		 * An owed answer due sooner shortens the wait. One that is late
		 * ends it, after one look at the socket: tpctl itself may have
		 * been busy (writing to a slow stdout) while the answer came.
		 */
		left = session_answer_left(s);
		if (left == 0 && looked) {
			session_no_answer(s);
			*ev = NULL;
			return SESSION_NO_ANSWER;
		}
		looked = left == 0;
		answer_bound = left >= 0 && (wait < 0 || left <= wait);
		if (answer_bound)
			wait = left;
		r = link_recv(s->link, ev, wait, &cause);
		if (r == LINK_TIMEOUT && answer_bound)
			continue;       /* late, or bytes moved meanwhile: see again */
		if (r != LINK_EVENT)
			break;
		session_settle(s, event_id(*ev));
		if (s->probe_id != -1 && event_id(*ev) == s->probe_id) {
			json_decref(*ev);       /* the probe's pong is tpctl's own */
			*ev = NULL;
			s->probe_id = -1;
			continue;
		}
		if (s->opt->json && !s->stdout_gone) {
			line = link_last_line(s->link, &len);
			fwrite(line, 1, len, stdout);
			fputc('\n', stdout);
			if (fflush(stdout) == EOF && errno == EPIPE)
				s->stdout_gone = true;
		}
		break;
	}
	if (r == LINK_LOST || r == LINK_BAD)
		tpctl_warnx("%s", cause);
	free(cause);
	return r;
}

int
session_exit_code(int result)
{
	switch (result) {
	case LINK_BAD:
		return EX_PROTOCOL;
	case LINK_INTERRUPTED:
		return EXIT_INTERRUPTED;
	default:
		return EX_UNAVAILABLE;
	}
}

int
session_call(struct session *s, json_t *req, json_t **reply)
{
	int64_t id;
	json_t *ev;
	int r;

	*reply = NULL;
	if ((id = session_send(s, req)) == -1)
		return EX_UNAVAILABLE;
	for (;;) {
		if ((r = session_next(s, &ev, -1)) != LINK_EVENT)
			return session_exit_code(r);
		/* an error without an id concerns the whole connection */
		if (event_id(ev) == id || (event_id(ev) == -1 &&
		    strcmp(event_name(ev), EV_ERROR) == 0)) {
			*reply = ev;
			return 0;
		}
		json_decref(ev);
	}
}

int
session_once(struct tpctl *opt, const char *what, json_t *req, json_t **reply)
{
	struct session s;
	int code;

	*reply = NULL;
	if ((code = session_open(&s, opt)) != 0) {
		json_decref(req);
		return code;
	}
	code = session_call(&s, req, reply);
	session_close(&s);
	if (code != 0)
		return code;
	if (strcmp(event_name(*reply), EV_ERROR) == 0) {
		code = event_report_error(what, *reply);
		json_decref(*reply);
		*reply = NULL;
	}
	return code;
}
