/*
 * ops.h: the ops of the protocol (doc/protocol.md). One table (ops.c) maps
 * each op to its handler and the role it needs; handlers live in op-*.c by
 * concern: op-task.c (submit, wait, status, cancel), op-admin.c (stats,
 * resize, pause, resume, shutdown), ops.c (hello, ping). A handler reads its fields with
 * its proto_read_* (proto.h), acts, and answers with its proto_encode_*.
 * A new op is a row of that table and a handler here (see proto.h for the
 * rest). Loop thread only.
 */
#ifndef TPD_OPS_H
#define TPD_OPS_H

#include <stddef.h>

#include "net/conn.h"
#include "proto/proto.h"

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
void op_list(struct conn *, struct request *);
void op_stats(struct conn *, struct request *);
void op_resize(struct conn *, struct request *);
void op_pause(struct conn *, struct request *);
void op_resume(struct conn *, struct request *);
void op_shutdown(struct conn *, struct request *);

#endif
