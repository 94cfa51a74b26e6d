/*
 * ops.c: request dispatch, roles and authentication.
 *
 * Roles (SPEC section 2): on the Unix socket every peer may submit; admin ops
 * need root, the daemon's own uid or the configured admin group (peer
 * credentials, supplementary groups included). Over TCP, when a token file
 * is configured nothing but hello and ping works until hello presents the
 * token; admin ops over TCP need the admin token.
 */
#include "config.h"

#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "daemon.h"
#include "log.h"
#include "ops.h"
#include "proto.h"
#include "tokens.h"
#include "utf8.h"
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
};

/* True when a Unix peer is in the admin group (primary or supplementary). */
static bool
peer_in_admin_group(const struct conn *c)
{
	struct daemon *d = daemon_state;
	gid_t groups[256];
	socklen_t len = sizeof groups;
	int fd = conn_fd(c);

	if (!d->have_admin_gid)
		return false;
	if (c->gid == d->admin_gid)
		return true;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len) == -1)
		return false;
	for (size_t i = 0; i < len / sizeof groups[0]; i++)
		if (groups[i] == d->admin_gid)
			return true;
	return false;
}

enum conn_role
ops_initial_role(const struct conn *c)
{
	struct daemon *d = daemon_state;

	if (!c->is_unix)
		return d->tokens != NULL ? CONN_ROLE_NONE : CONN_ROLE_SUBMIT;
	if (c->have_creds && (c->uid == 0 || c->uid == geteuid()))
		return CONN_ROLE_ADMIN;
	/* Group membership (SO_PEERGROUPS) is looked up only when an admin op comes. */
	return CONN_ROLE_SUBMIT;
}

void
ops_bad_request(struct conn *c, struct request *req, char *msg)
{
	conn_send_error(c, req->id, ERR_BAD_REQUEST, "%s", msg ? msg : "bad request");
	free(msg);
}

void
op_hello(struct conn *c, struct request *req)
{
	struct daemon *d = daemon_state;
	struct proto_hello h;
	struct proto_text pt;
	const char *token_name = NULL;
	enum tokens_role token_role;
	char *msg = NULL;

	if (proto_read_hello(req, &h, &msg) == -1) {
		ops_bad_request(c, req, msg);
		return;
	}
	if (h.token != NULL && !c->is_unix) {
		/* compared with every token in constant time (tokens_match) */
		if (!tokens_match(d->tokens, h.token, strlen(h.token), &token_name, &token_role)) {
			log_warnx("connection %llu (%s): hello with a token that is not accepted",
			    (unsigned long long)c->id, conn_peer(c));
			conn_send_error(c, req->id, ERR_UNAUTHENTICATED, "token not accepted");
			return;
		}
		c->role = token_role == TOKENS_ADMIN ? CONN_ROLE_ADMIN : CONN_ROLE_SUBMIT;
	}
	if (c->role == CONN_ROLE_NONE) {
		conn_send_error(c, req->id, ERR_UNAUTHENTICATED,
		    "this TCP listener needs a token: send hello with \"token\"");
		return;
	}
	if (c->role == CONN_ROLE_SUBMIT && c->is_unix && peer_in_admin_group(c))
		c->role = CONN_ROLE_ADMIN;
	if (token_name != NULL) {
		char q[UTF8_QUOTE_SIZE];
		/* the token's name, never the token */
		log_info("connection %llu (%s): hello with token %s, role %s%s%s",
		    (unsigned long long)c->id, conn_peer(c), token_name,
		    c->role == CONN_ROLE_ADMIN ? ROLE_ADMIN : ROLE_SUBMIT,
		    h.client != NULL ? ", client " : "",
		    h.client != NULL ? utf8_quote(q, h.client) : "");
	} else if (h.client != NULL)
		log_debug("connection %llu (%s) is %s", (unsigned long long)c->id, conn_peer(c),
		    h.client);
	proto_encode_hello(&pt, req->id, c->role == CONN_ROLE_ADMIN ? ROLE_ADMIN : ROLE_SUBMIT);
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

/* Says no, with the reason, when the connection's role is short of the op's. */
static bool
allowed(struct conn *c, struct request *req, const struct op *op)
{
	struct daemon *d = daemon_state;

	if (op->needs == CONN_ROLE_NONE || c->role >= op->needs)
		return true;
	if (c->role == CONN_ROLE_NONE) {
		conn_send_error(c, req->id, ERR_UNAUTHENTICATED,
		    "op \"%s\" needs authentication: send hello with the token first", op->name);
		return false;
	}
	if (c->is_unix && peer_in_admin_group(c)) {
		c->role = CONN_ROLE_ADMIN;
		return true;
	}
	if (c->is_unix)
		conn_send_error(c, req->id, ERR_FORBIDDEN,
		    "op \"%s\" is for admins: root, uid %u%s%s (you are uid %u)", op->name,
		    (unsigned)geteuid(), d->conf.admin_group ? " or group " : "",
		    d->conf.admin_group ? d->conf.admin_group : "", (unsigned)c->uid);
	else
		conn_send_error(c, req->id, ERR_FORBIDDEN,
		    "op \"%s\" over TCP needs the admin token%s", op->name,
		    tokens_count(d->tokens, TOKENS_ADMIN) > 0 ? " in hello" :
		    ", and none is configured");
	return false;
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

void
ops_dispatch(struct conn *c, const char *line, size_t len)
{
	struct request req;
	const char *code;
	char *msg = NULL;

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
		if (strcmp(ops[i].name, req.op) == 0) {
			if (allowed(c, &req, &ops[i]))
				ops[i].handler(c, &req);
			proto_request_free(&req);
			return;
		}
	unknown_op(c, &req);
	proto_request_free(&req);
}
