/*
 * conn.h: one client connection: NDJSON framing with a line limit, the
 * peer's identity and role, and output with flow control. Loop thread only.
 */
#ifndef TPD_CONN_H
#define TPD_CONN_H

#include <stdalign.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#include <jansson.h>

#include "framing.h"

enum conn_role {
	CONN_ROLE_NONE,   /* TCP before hello presented a token */
	CONN_ROLE_SUBMIT,
	CONN_ROLE_ADMIN,
};

struct blob;
struct conn_out;
struct proto_text;

/*
 * Kept small: an idle connection is this struct, its libevent event (in
 * evspace) and an idmap entry. Buffers exist only while they hold bytes.
 */
struct conn {
	uint64_t id;
	int fd;
	uid_t uid;             /* Unix peers with have_creds */
	gid_t gid;
	pid_t pid;
	enum conn_role role;
	unsigned awaiting;     /* dones still owed to this connection (submits and waits) */
	unsigned subscriptions; /* waits pending on unfinished tasks (max_subscriptions) */
	bool is_unix;
	bool have_creds;       /* Unix peers: uid/gid/pid are known */
	bool dead;             /* closed; freed from a deferred callback */
	bool closing;          /* the peer ended its input: close once nothing is owed */
	bool output_broken;    /* writing failed: answers are dropped, input still read */
	bool paused;           /* output over max_output_buffer: requests are not read */
	bool dispatching;      /* a line of it is being handled */
	short events;          /* what the event is armed for: EV_READ, EV_WRITE */
	uint8_t peer_family;   /* TCP peers: AF_INET or AF_INET6 (see conn_peer) */
	uint16_t peer_port;
	uint8_t peer_addr[16];
	struct framing in;     /* the start of a line whose newline has not come */
	struct conn_out *out;  /* output not yet written; NULL when none */
	struct conn *next_dirty;  /* the list of connections to flush... */
	struct conn **prev_dirty; /* ...which c is on when this is not NULL */
	struct conn *next_stuck;  /* the list of connections whose socket is full... */
	struct conn **prev_stuck; /* ...which c is on when this is not NULL */
	struct conn *next_dead;   /* the graveyard (dead connections to free) */
	alignas(max_align_t) unsigned char evspace[]; /* its struct event */
};

/* Wraps an accepted socket; sa is the peer's address (for TCP peers' logs). */
struct conn *conn_new(int fd, bool is_unix, const struct sockaddr *sa);

/* The connection with this id, or NULL if it is gone. */
struct conn *conn_find(uint64_t id);

size_t conn_count(void);

/* The socket. */
int conn_fd(const struct conn *);

/*
 * The peer for logs: "uid 1000 pid 42", "127.0.0.1:5555" or "[::1]:5555".
 * A static buffer, valid until the next call.
 */
const char *conn_peer(const struct conn *);

/*
 * Every send goes out whole, in the order of the calls. While c's unsent
 * output is at max_output_buffer or more, an answer is held back, in order,
 * and copied into the output only as the client reads; meanwhile c's
 * requests are not read (flow control, see conn.c).
 */

/*
 * Sends an event's text (proto.h) as a line, and frees the text. A text
 * that could not be written (not proto_text_ok) is answered with an error
 * "internal" carrying the event's id (proto_encode_unsent), and logged.
 */
void conn_send_text(struct conn *, struct proto_text *);

/*
 * Sends a done: the head for its id (proto_encode_done_head), then body,
 * the shared text of the event after its "{" (blob.h). A done held back
 * holds body and id, not the task.
 */
void conn_send_done(struct conn *, json_t *id, struct blob *body);

/*
 * Sends a stream event of a task (started, output) as conn_send_text
 * does, then calls sent(key, weight) once the event is in the output
 * buffer, or dropped (c gone or broken): while it is held back, the task's
 * stream budget stays taken, so the worker producing the output blocks.
 */
typedef void (*conn_sent_fn)(uint64_t key, size_t weight);
void conn_send_stream(struct conn *, struct proto_text *, conn_sent_fn sent, uint64_t key,
    size_t weight);

/*
 * Sends an error event (proto_encode_error) with a formatted message, cut
 * at a character boundary when longer than 511 bytes (conn.c).
 */
void conn_send_error(struct conn *, json_t *id, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Closes now (unsent output is dropped). Safe inside callbacks: freeing is deferred. */
void conn_close(struct conn *, const char *why);

/*
 * The peer ended its input: stop reading, and close once every done it is
 * owed was written (a client may half-close and still read its results).
 */
void conn_close_after_flush(struct conn *);

/* A done owed to c is being sent: a closing c goes once that is written. */
void conn_owed_done(struct conn *c);

/* True when no connection has unsent or held output (used before exiting). */
bool conn_all_flushed(void);

/* Closes every connection (at exit). */
void conn_close_all(void);

/*
 * Refuses a connection over the limit: one error line (id null; code and
 * message are plain ASCII without quotes or backslashes), then close.
 */
void conn_refuse(int fd, const char *code, const char *message);

#endif
