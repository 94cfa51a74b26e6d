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
#include "fmt.h"
#include "log.h"
#include "ops.h"
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
ops_reply(struct conn *c, struct request *req, const char *event, json_t *extra)
{
	json_t *ev = NULL;

	/* extra is a json_pack result: NULL when it could not be built */
	if (extra == NULL || (ev = json_object()) == NULL ||
	    json_object_set_new(ev, "event", json_string(event)) == -1 ||
	    (req->id != NULL && json_object_set(ev, "id", req->id) == -1) ||
	    json_object_update(ev, extra) == -1) {
		json_decref(ev);
		json_decref(extra);
		conn_send_error(c, req->id, ERR_INTERNAL, "the %s event could not be built "
		    "(out of memory)", event);
		return;
	}
	json_decref(extra);
	conn_send(c, ev);
	json_decref(ev);
}

size_t
ops_id_text(json_t *id, char *buf, size_t len)
{
	if (json_is_integer(id)) {
		struct fmt f = fmt_init(buf, len);
		fmt_i64(&f, json_integer_value(id));
		return fmt_len(&f, buf);
	}
	return json_dumpb(id, buf, len, JSON_ENCODE_ANY | JSON_COMPACT);
}

void
ops_reply_fields(struct conn *c, json_t *id, const char *event, const char *fields)
{
	char line[512], idbuf[256], *idtext = idbuf, *buf = line, *heap_id = NULL;
	size_t idlen = 0, need;

	if (id != NULL) {
		idlen = ops_id_text(id, idbuf, sizeof idbuf);
		if (idlen == 0 || idlen >= sizeof idbuf) { /* a very long string id */
			if ((idtext = heap_id = json_dumps(id, JSON_ENCODE_ANY | JSON_COMPACT)) == NULL)
				return;
			idlen = strlen(idtext);
		}
	}
	/* {"event":"E","id":I,F} */
	need = 16 + strlen(event) + (id != NULL ? 6 + idlen : 0) +
	    (fields != NULL ? 1 + strlen(fields) : 0);
	if (need > sizeof line && (buf = malloc(need)) == NULL) {
		free(heap_id);
		return;
	}
	struct fmt f = fmt_init(buf, need);
	fmt_str(&f, "{\"event\":\"");
	fmt_str(&f, event);
	fmt_mem(&f, "\"", 1);
	if (id != NULL) {
		fmt_str(&f, ",\"id\":");
		fmt_mem(&f, idtext, idlen);
	}
	if (fields != NULL) {
		fmt_mem(&f, ",", 1);
		fmt_str(&f, fields);
	}
	fmt_mem(&f, "}", 1);
	conn_send_line(c, buf, fmt_len(&f, buf));
	if (buf != line)
		free(buf);
	free(heap_id);
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
	static const char *const fields[] = { "op", "id", "token", "client", NULL };
	struct daemon *d = daemon_state;
	const char *token = NULL, *client = NULL, *token_name = NULL;
	enum tokens_role token_role;
	char *msg = NULL;

	if (proto_check_fields(req->root, fields, "a hello request", &msg) == -1 ||
	    proto_get_string(req->root, "token", false, &token, &msg) == -1 ||
	    proto_get_string(req->root, "client", false, &client, &msg) == -1) {
		ops_bad_request(c, req, msg);
		return;
	}
	if (token != NULL && !c->is_unix) {
		/* compared with every token in constant time (tokens_match) */
		if (!tokens_match(d->tokens, token, strlen(token), &token_name, &token_role)) {
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
		    client != NULL ? ", client " : "", client != NULL ? utf8_quote(q, client) : "");
	} else if (client != NULL)
		log_debug("connection %llu (%s) is %s", (unsigned long long)c->id, conn_peer(c),
		    client);
	ops_reply(c, req, EV_HELLO, json_pack("{s:s, s:s, s:i, s:s}",
	    "server", WIRE_SERVER_NAME, "version", PACKAGE_VERSION,
	    "protocol", WIRE_PROTOCOL_VERSION,
	    "role", c->role == CONN_ROLE_ADMIN ? ROLE_ADMIN : ROLE_SUBMIT));
}

void
op_ping(struct conn *c, struct request *req)
{
	static const char *const fields[] = { "op", "id", NULL };
	char *msg = NULL;

	if (proto_check_fields(req->root, fields, "a ping request", &msg) == -1) {
		ops_bad_request(c, req, msg);
		return;
	}
	ops_reply_fields(c, req->id, EV_PONG, NULL);
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
	char q[UTF8_QUOTE_SIZE];
	conn_send_error(c, req.id, ERR_UNKNOWN_OP, "unknown op \"%s\" (ops: hello, ping, "
	    "submit, wait, status, cancel, stats, resize, shutdown)", utf8_quote(q, req.op));
	proto_request_free(&req);
}
