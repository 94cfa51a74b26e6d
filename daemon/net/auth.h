/*
 * auth.h: who may do what (auth.c), loop thread only. The role a
 * connection starts with (peer credentials, listener kind), hello's token,
 * the admin group, and whether a connection's role allows an op.
 *
 * On the Unix socket every peer may submit; admin ops need root, the
 * daemon's own uid or the configured admin group (peer credentials,
 * supplementary groups included). Over TCP, when token files are configured
 * nothing but hello and ping works until hello presents a token; admin ops
 * over TCP need an admin token. A TCP listener needs a token file, or
 * tcp_auth = none (then TCP peers need no token, and may still give one).
 *
 * A task is for its owner and for admins (wait, status, cancel, list,
 * its streamed output): the owner is the submitter's conn_owner ("uid:N",
 * "token:NAME", "tcp:anonymous"); a task owned by anything else
 * ("redis:NAME") is for admins only.
 */
#ifndef TPD_AUTH_H
#define TPD_AUTH_H

#include <stdbool.h>
#include <stddef.h>

#include "conf/conf.h"
#include "conn.h"

struct task;

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

/*
 * Whether a TCP listener (named, for the message) may be served with a's
 * settings (NULL: the ones in force): a token file, or tcp_auth = none,
 * then logged as a warning when warn is set. -1 with *cause set: it may not.
 */
int auth_check_tcp(const struct auth *a, const char *listener, bool warn, char **cause);

/* TCP_AUTH_TOKEN or TCP_AUTH_NONE, as stats names the setting in force. */
const char *auth_tcp_mode(void);

/*
 * At start, once the listeners are up (their names, listen_name): warns
 * of a token file that group or others may read, and, when tpd runs as
 * root, of each pool that runs its tasks as root (run_as = daemon) while
 * someone who is not root can get in (TCP, a Unix socket others or a
 * group may connect to). Logged; the latter kept for stats (auth_warnings).
 */
void auth_check_exposure(const struct conf *, const char *const *listeners, size_t n);
/* The warnings auth_check_exposure kept, for stats; returns how many. */
size_t auth_warnings(const char *const **out);

/*
 * Whether c may see and act on t: c is its owner or an admin (a Unix peer
 * is looked up in the admin group when it must be). Logs nothing: for a
 * listing, which skips what is not c's.
 */
bool auth_may_see_task(struct conn *c, const struct task *t);

/*
 * The same for an op that names t (wait, status, cancel, a follow): false
 * with *code (forbidden) and msg set, which say "task N is not yours" and
 * never whose it is, and a line in the log naming the peer.
 */
bool auth_task_allowed(struct conn *c, const struct task *t, const char *op, const char **code,
    char *msg, size_t len);

/* ROLE_ADMIN or ROLE_SUBMIT, as hello names a role. */
const char *auth_role_name(enum conn_role role);

#endif
