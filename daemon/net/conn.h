/*
 * conn.h: one client connection: NDJSON framing with a line limit, the
 * peer's identity and role, and output with flow control. Loop thread only.
 */
#ifndef TPD_CONN_H
#define TPD_CONN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#include <jansson.h>

enum conn_role {
	CONN_ROLE_NONE,   /* TCP before hello presented a token */
	CONN_ROLE_SUBMIT,
	CONN_ROLE_ADMIN,
};

struct blob;
struct conn_out;
struct proto_text;

struct conn;

/*
 * Wraps an accepted socket; sa is the peer's address (for TCP peers' logs).
 * Its role is CONN_ROLE_NONE until conn_set_role (the listener's, auth.c).
 */
struct conn *conn_new(int fd, bool is_unix, const struct sockaddr *sa);

/* The connection's number: what a task keeps of it (the connection may go first). */
uint64_t conn_id(const struct conn *);

/* True for a Unix socket's peer. */
bool conn_is_unix(const struct conn *);

/* A Unix peer's credentials (SO_PEERCRED); false when they are not known (TCP). */
bool conn_creds(const struct conn *, uid_t *uid, gid_t *gid, pid_t *pid);

/*
 * Who the connection's tasks belong to, as a task's owner: "uid:N" for a
 * Unix peer, "token:NAME" over TCP once hello presented a token (set by
 * auth.c), "tcp:anonymous" over TCP without one. Writes it into buf (at
 * most len bytes, NUL included) and returns buf.
 */
#define CONN_OWNER_MAX 80
const char *conn_owner(const struct conn *, char *buf, size_t len);
/* The token c authenticated with, by name (copied); NULL: none. */
void conn_set_token_name(struct conn *, const char *name);

/* The role the connection has now (auth.c decides it). */
enum conn_role conn_role(const struct conn *);
void conn_set_role(struct conn *, enum conn_role);

/*
 * The dones owed to c: a submit that is not detached, or a wait (then also
 * counted in conn_waits, against max_subscriptions), owes c one until it is
 * sent, or until its task goes without one. A connection whose peer ended
 * its input closes once nothing is owed and everything is written.
 */
void conn_done_owed(struct conn *, bool wait);
void conn_done_settled(struct conn *, bool wait);

/* The waits pending on c. */
unsigned conn_waits(const struct conn *);

/*
 * Called with a connection's id once nothing can reach its peer: as it
 * closes, and before, at its end of input, when its peer closed both ends
 * (then the connection still finishes as usual). Set by the layer that
 * keeps something per connection (admission.c's held submits); NULL for
 * none. It may be called twice for one connection.
 */
void conn_set_close_hook(void (*fn)(uint64_t id));

/* The connection with this id, or NULL if it is gone. */
struct conn *conn_find(uint64_t id);

size_t conn_count(void);

/*
 * The bytes of output queued for c in the daemon: unsent in its buffer and
 * held back (a done's text, shared, aside). A follower's stream is measured
 * against it (conn-sink.c).
 */
size_t conn_queued(const struct conn *);

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

/* The same for a submit's rejected event (proto_encode_rejected). */
void conn_send_rejected(struct conn *, json_t *id, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/*
 * Input flow control (a task's stdin buffer is full, exec-input.c): c's
 * requests are not read from the end of the current one until
 * conn_input_release with c's number (c may be gone by then).
 */
void conn_input_hold(struct conn *);
void conn_input_release(uint64_t id);

/* Closes now (unsent output is dropped). Safe inside callbacks: freeing is deferred. */
void conn_close(struct conn *, const char *why);

/*
 * The peer ended its input: stop reading, and close once every done it is
 * owed was written (a client may half-close and still read its results).
 */
void conn_close_after_flush(struct conn *);

/* True when no connection has unsent or held output (used before exiting). */
bool conn_all_flushed(void);

/* Closes every connection (at exit). */
void conn_close_all(void);

/*
 * Refuses a connection over the limit: one error line (id null; code and
 * message are plain ASCII without quotes or backslashes), then close.
 */
void conn_refuse(int fd, const char *code, const char *message);

/*
 * What conn.c is given by the top (tpd.c), so that it depends on nothing
 * above it.
 *
 * The handler of each request line (ops.c's ops_dispatch): every line is
 * answered on c, through the conn_send_* functions.
 */
typedef void (*conn_dispatch_fn)(struct conn *, const char *line, size_t len);
void conn_set_dispatch(conn_dispatch_fn);

/*
 * The output gate (durable.c's, with the journal on): output reaches a
 * socket only once what it stands for may be seen. prepare is asked before
 * bytes are sent and returns the batch the output put until then waits
 * for; seen returns the newest batch that may be seen. NULL (the default):
 * every byte may go. The gate is borrowed until it is set again.
 */
struct conn_gate {
	uint64_t (*prepare)(void);
	uint64_t (*seen)(void);
	/*
	 * The batch output given now depends on (0: none; the least of it and
	 * prepare's is its mark). answer: a line of an answer, not a done or a
	 * task's stream event.
	 */
	uint64_t (*output_batch)(bool answer);
};
void conn_set_gate(const struct conn_gate *);

/*
 * The gate moved on (its owner calls this): the connections whose output
 * waited for it are written again at the end of this loop pass.
 */
void conn_gate_seen(void);

/* The output waiting for the gate: how many connections, and their bytes not yet allowed. */
void conn_gate_held(size_t *nconns, uint64_t *bytes);

#endif
