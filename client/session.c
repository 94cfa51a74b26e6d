/*
 * session.c: a connection to tpd with the global options applied: the
 * hello with a token, request ids, --json echo of every event, and the exit
 * codes for a connection that failed.
 */
#include "config.h"

#include <errno.h>
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
	r = session_call(s, req, &reply, (int)s->opt->connect_timeout_ms);
	if (r != 0)
		return r;
	if (strcmp(event_name(reply), EV_ERROR) == 0) {
		r = event_report_error("hello", reply);
		tpctl_warnx("the daemon at %s refused the token from %s",
		    conn_address(s->conn), s->opt->token_file);
		json_decref(reply);
		return r;
	}
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
	if ((r = tpctl_resolve(opt)) != 0)
		return r;
	if (opt->token_file != NULL &&
	    (r = session_read_token(opt->token_file, &token)) != 0)
		return r;
	s->conn = conn_open(opt->socket_path, opt->host, opt->connect_timeout_ms,
	    &cause);
	if (s->conn == NULL) {
		tpctl_warnx("%s", cause);
		free(cause);
		free(token);
		return EX_UNAVAILABLE;
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
	conn_close(s->conn);
	s->conn = NULL;
}

int64_t
session_send(struct session *s, json_t *req)
{
	char *cause = NULL;
	int64_t id;

	if (json_is_integer(json_object_get(req, FIELD_ID)))
		id = json_integer_value(json_object_get(req, FIELD_ID));
	else {
		id = s->next_id++;
		json_object_set_new(req, FIELD_ID, json_integer(id));
	}
	if (conn_send(s->conn, req, &cause) == -1) {
		tpctl_warnx("%s", cause);
		free(cause);
		json_decref(req);
		return -1;
	}
	json_decref(req);
	return id;
}

int
session_next(struct session *s, json_t **ev, int timeout_ms)
{
	char *cause = NULL;
	const char *line;
	size_t len;
	int r;

	r = conn_recv(s->conn, ev, timeout_ms, &cause);
	if (r == CONN_EVENT && s->opt->json && !s->stdout_gone) {
		line = conn_last_line(s->conn, &len);
		fwrite(line, 1, len, stdout);
		fputc('\n', stdout);
		if (fflush(stdout) == EOF && errno == EPIPE)
			s->stdout_gone = true;
	}
	if (r == CONN_LOST || r == CONN_BAD)
		tpctl_warnx("%s", cause);
	free(cause);
	return r;
}

int
session_exit_code(int conn_result)
{
	switch (conn_result) {
	case CONN_BAD:
		return EX_PROTOCOL;
	case CONN_INTERRUPTED:
		return EXIT_INTERRUPTED;
	default:
		return EX_UNAVAILABLE;
	}
}

int
session_call(struct session *s, json_t *req, json_t **reply, int timeout_ms)
{
	uint64_t deadline;
	int64_t id;
	json_t *ev;
	int r, left;
	char buf[FORMAT_DURATION_LEN];

	*reply = NULL;
	if ((id = session_send(s, req)) == -1)
		return EX_UNAVAILABLE;
	deadline = tpctl_now_us() + (uint64_t)(timeout_ms > 0 ? timeout_ms : 0) * 1000;
	for (;;) {
		left = -1;
		if (timeout_ms >= 0) {
			uint64_t now = tpctl_now_us();
			left = now >= deadline ? 0 : (int)((deadline - now + 999) / 1000);
		}
		r = session_next(s, &ev, left);
		if (r == CONN_TIMEOUT) {
			tpctl_warnx("no answer from %s within %s", conn_address(s->conn),
			    format_duration((uint64_t)timeout_ms, buf, sizeof buf));
			return EX_UNAVAILABLE;
		}
		if (r != CONN_EVENT)
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
