/*
 * ops.c: request dispatch. One table maps each op to its handler and the
 * role it needs (who may: auth.c); the handlers live in op-*.c by concern,
 * and the connection ops (hello, ping) here. Every request gets its answer
 * on its connection: an event, or an error naming what was wrong.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "journal/durable.h"
#include "net/auth.h"
#include "base/log.h"
#include "ops.h"
#include "proto/proto.h"
#include "base/utf8.h"
#include "wire.h"

struct op {
	const char *name;
	void (*handler)(struct conn *, struct request *);
	enum conn_role needs;
};

static const struct op ops[] = {
	{ OP_HELLO, op_hello, CONN_ROLE_NONE },
	{ OP_PING, op_ping, CONN_ROLE_NONE },
	{ OP_SUBMIT, op_submit, CONN_ROLE_SUBMIT },
	{ OP_WAIT, op_wait, CONN_ROLE_SUBMIT },
	{ OP_STATUS, op_status, CONN_ROLE_SUBMIT },
	{ OP_CANCEL, op_cancel, CONN_ROLE_SUBMIT },
	{ OP_STATS, op_stats, CONN_ROLE_SUBMIT },
	{ OP_RESIZE, op_resize, CONN_ROLE_ADMIN },
	{ OP_SHUTDOWN, op_shutdown, CONN_ROLE_ADMIN },
	{ OP_LIST, op_list, CONN_ROLE_SUBMIT },
	{ OP_INPUT, op_input, CONN_ROLE_SUBMIT },
	{ OP_PAUSE, op_pause, CONN_ROLE_ADMIN },
	{ OP_RESUME, op_resume, CONN_ROLE_ADMIN },
};

void
ops_bad_request(struct conn *c, struct request *req, char *msg)
{
	conn_send_error(c, req->id, ERR_BAD_REQUEST, "%s", msg ? msg : "bad request");
	free(msg);
}

void
op_hello(struct conn *c, struct request *req)
{
	struct proto_hello h;
	struct proto_text pt;
	const char *code;
	char *msg = NULL, why[256];

	if (proto_read_hello(req, &h, &msg) == -1) {
		ops_bad_request(c, req, msg);
		return;
	}
	if (auth_hello(c, h.token, h.client, &code, why, sizeof why) == -1) {
		conn_send_error(c, req->id, code, "%s", why);
		return;
	}
	proto_encode_hello(&pt, req->id, auth_role_name(conn_role(c)));
	conn_send_text(c, &pt);
}

void
op_ping(struct conn *c, struct request *req)
{
	struct proto_text pt;
	char *msg = NULL;

	if (proto_read_plain(req, &msg) == -1) {
		ops_bad_request(c, req, msg);
		return;
	}
	proto_encode_pong(&pt, req->id);
	conn_send_text(c, &pt);
}

/* unknown_op, naming the ops of the table. */
static void
unknown_op(struct conn *c, const struct request *req)
{
	char q[UTF8_QUOTE_SIZE], names[256] = "";
	size_t off = 0;

	for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
		off += (size_t)snprintf(names + off, off < sizeof names ? sizeof names - off : 0,
		    "%s%s", i > 0 ? ", " : "", ops[i].name);
	conn_send_error(c, req->id, ERR_UNKNOWN_OP, "unknown op \"%s\" (ops: %s)",
	    utf8_quote(q, req->op), names);
}

static void ops_dispatch_one(struct conn *c, const char *line, size_t len);

void
ops_dispatch(struct conn *c, const char *line, size_t len)
{
	/* what the answer depends on: the records its handling appends (durable.h) */
	durable_dispatch_begin();
	ops_dispatch_one(c, line, len);
	durable_dispatch_end();
}

static void
ops_dispatch_one(struct conn *c, const char *line, size_t len)
{
	struct request req;
	const char *code;
	char *msg = NULL, why[512];

	/* Empty lines (and a CR of CRLF) are ignored. */
	while (len > 0 && (line[len - 1] == '\r' || line[len - 1] == ' ' || line[len - 1] == '\t'))
		len--;
	if (len == 0)
		return;
	if (proto_parse_request(line, len, &req, &code, &msg) == -1) {
		conn_send_error(c, req.id, code, "%s", msg ? msg : "bad request");
		free(msg);
		proto_request_free(&req);
		return;
	}
	for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
		if (ops[i].name[0] == req.op[0] && strcmp(ops[i].name, req.op) == 0) {
			if (auth_allowed(c, ops[i].needs, ops[i].name, &code, why, sizeof why))
				ops[i].handler(c, &req);
			else
				conn_send_error(c, req.id, code, "%s", why);
			proto_request_free(&req);
			return;
		}
	unknown_op(c, &req);
	proto_request_free(&req);
}
