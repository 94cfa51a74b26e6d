/*
 * wire.h: what tpd and tpctl share of the wire (SPEC section 2): the names of
 * ops, events, fields, states and error codes, the framing, and the rule that
 * finds the default socket. One place, so the two programs cannot drift apart.
 */
#ifndef TPD_WIRE_H
#define TPD_WIRE_H

#include <stddef.h>

#define WIRE_PROTOCOL_VERSION 1
#define WIRE_SERVER_NAME "tpd"
#define WIRE_DELIMITER '\n'          /* one JSON object per line */
#define WIRE_MAX_DEPTH 64            /* deeper nesting is bad_request */
#define WIRE_DEFAULT_MAX_REQUEST (1024 * 1024)
#define WIRE_DEFAULT_MAX_OUTPUT (8 * 1024 * 1024)
#define WIRE_DEFAULT_POOL "default"

/* ops */
#define OP_HELLO    "hello"
#define OP_PING     "ping"
#define OP_SUBMIT   "submit"
#define OP_WAIT     "wait"
#define OP_STATUS   "status"
#define OP_CANCEL   "cancel"
#define OP_STATS    "stats"
#define OP_RESIZE   "resize"
#define OP_SHUTDOWN "shutdown"

/* events */
#define EV_HELLO    "hello"
#define EV_PONG     "pong"
#define EV_ACCEPTED "accepted"
#define EV_STARTED  "started"
#define EV_OUTPUT   "output"
#define EV_DONE     "done"
#define EV_REJECTED "rejected"
#define EV_ERROR    "error"
#define EV_OK       "ok"
#define EV_STATUS   "status"
#define EV_STATS    "stats"

/* terminal states in done, and the states status reports before them */
#define STATE_QUEUED    "queued"
#define STATE_RUNNING   "running"
#define STATE_SUCCEEDED "succeeded"
#define STATE_FAILED    "failed"
#define STATE_TIMED_OUT "timed_out"
#define STATE_CANCELLED "cancelled"
#define STATE_EXPIRED   "expired"

/* error codes */
#define ERR_BAD_JSON          "bad_json"
#define ERR_BAD_REQUEST       "bad_request"
#define ERR_UNKNOWN_OP        "unknown_op"
#define ERR_REQUEST_TOO_LARGE "request_too_large"
#define ERR_UNAUTHENTICATED   "unauthenticated"
#define ERR_FORBIDDEN         "forbidden"
#define ERR_NO_SUCH_TASK      "no_such_task"
#define ERR_NO_SUCH_POOL      "no_such_pool"
#define ERR_QUEUE_FULL        "queue_full"
#define ERR_CLOSED            "closed"
#define ERR_TASK_FAILED       "task_failed"
#define ERR_EXIT_STATUS       "exit_status"
#define ERR_SIGNAL            "signal"
#define ERR_SPAWN_FAILED      "spawn_failed"
#define ERR_TIMED_OUT         "timed_out"
#define ERR_CANCELLED         "cancelled"
#define ERR_EXPIRED           "expired"
#define ERR_INTERNAL          "internal"

/* roles in hello */
#define ROLE_ADMIN  "admin"
#define ROLE_SUBMIT "submit"

/*
 * The default Unix socket (SPEC section 1): $RUNTIME_DIRECTORY/tpd.sock under
 * systemd, else /run/tpd/tpd.sock as root, else $XDG_RUNTIME_DIR/tpd.sock,
 * else /tmp/tpd-$UID/tpd.sock. Writes into buf; returns buf, or NULL when the
 * path does not fit.
 */
char *wire_default_socket_path(char *buf, size_t len);

#endif
