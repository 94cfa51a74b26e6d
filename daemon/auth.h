/*
 * auth.h: who may do what (auth.c), loop thread only. The role a
 * connection starts with (peer credentials, listener kind), hello's token,
 * the admin group, and whether a connection's role allows an op.
 *
 * On the Unix socket every peer may submit; admin ops need root, the
 * daemon's own uid or the configured admin group (peer credentials,
 * supplementary groups included). Over TCP, when token files are configured
 * nothing but hello and ping works until hello presents a token; admin ops
 * over TCP need an admin token.
 */
#ifndef TPD_AUTH_H
#define TPD_AUTH_H

#include <stdbool.h>
#include <stddef.h>

#include "conf.h"
#include "conn.h"

/* The token files and the admin group of a configuration, loaded and looked up. */
struct auth;

/* Loads c's token files and looks up its admin group. Returns 0, or -1 with *cause set. */
int auth_load(const struct conf *c, struct auth **out, char **cause);

/* Puts a in force (start, reload), logging its token counts; the previous one is freed. */
void auth_install(struct auth *a);

void auth_free(struct auth *a);

/* At exit: frees the one in force. */
void auth_free_all(void);

/* The role a new connection starts with. */
enum conn_role auth_initial_role(const struct conn *c);

/*
 * hello: a token (NULL: none) checked over TCP, the role it gives set on
 * c, and the admin group looked up for a Unix peer. Returns 0, or -1 with
 * *code and msg (len bytes) saying why c stays as it is.
 */
int auth_hello(struct conn *c, const char *token, const char *client, const char **code,
    char *msg, size_t len);

/*
 * Whether c's role allows an op that needs role needs (named op, for the
 * message); a Unix peer is looked up in the admin group when it must be.
 * false with *code and msg set: the request's answer.
 */
bool auth_allowed(struct conn *c, enum conn_role needs, const char *op, const char **code,
    char *msg, size_t len);

/* ROLE_ADMIN or ROLE_SUBMIT, as hello names a role. */
const char *auth_role_name(enum conn_role role);

#endif
