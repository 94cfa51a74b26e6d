/*
 * ops.h: the ops of the protocol (SPEC section 2). One table maps each op to
 * its handler and the role it needs; handlers live in op-*.c by concern.
 * Loop thread only.
 */
#ifndef TPD_OPS_H
#define TPD_OPS_H

#include <stddef.h>

#include "conn.h"
#include "proto.h"

/* The role a new connection starts with (peer credentials, listener kind). */
enum conn_role ops_initial_role(const struct conn *c);

/* Parses one request line and runs its op; every outcome is answered on c. */
void ops_dispatch(struct conn *c, const char *line, size_t len);

/* Sends an error for a request whose fields were wrong (msg is freed). */
void ops_bad_request(struct conn *c, struct request *req, char *msg);

/* The handlers. */
void op_hello(struct conn *, struct request *);
void op_ping(struct conn *, struct request *);
void op_submit(struct conn *, struct request *);
void op_wait(struct conn *, struct request *);
void op_status(struct conn *, struct request *);
void op_cancel(struct conn *, struct request *);
void op_stats(struct conn *, struct request *);
void op_resize(struct conn *, struct request *);
void op_shutdown(struct conn *, struct request *);

#endif
