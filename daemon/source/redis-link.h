/*
 * redis-link.h: a source's way to Redis: two hiredis asynchronous
 * connections on the daemon's libevent loop, their deadlines, and the
 * reconnect with backoff after a failure. Loop thread only.
 *
 * The reader carries nothing but the source's blocking reads, so that a
 * read blocked in Redis never holds up the writer, which carries the rest.
 * Debian 12's hiredis (0.14) has no timeouts of its own: each connection
 * has a deadline timer, armed while it owes replies, that gives up on it
 * when no reply came within timeout (the reader's within timeout plus its
 * slack: the BLOCK of its reads). With hiredis >= 1.0 as the minimum,
 * redisAsyncSetTimeout could take the timers' place.
 *
 * A failure of either connection (a connect refused, a connection lost, a
 * deadline, or what the source calls one: an error reply, an answer of an
 * unexpected shape) drops both, calls the source's down callback, and
 * calls its retry callback after a backoff that doubles from 100 ms up to
 * backoff_max. The first failure of an outage is logged as a warning, the
 * rest at debug level; rlink_up ends the outage.
 *
 * hiredis calls a command's callback with a NULL reply when its context
 * goes away (dropped here, or lost). Such callbacks only undo their own
 * bookkeeping: rlink_replied tells them apart. rlink_fail is safe inside a
 * hiredis callback (hiredis defers freeing the context whose callback is
 * running).
 */
#ifndef TPD_REDIS_LINK_H
#define TPD_REDIS_LINK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <event2/event.h>
#include <hiredis/hiredis.h>
#include <hiredis/async.h>

enum rlink_role { RLINK_WRITER, RLINK_READER };

enum rlink_state {
	RLINK_CONNECTING,       /* the first connection, not yet up */
	RLINK_UP,               /* rlink_up was called since the last failure */
	RLINK_DOWN,             /* an outage: waiting to reconnect, or reconnecting */
};

struct rlink_settings {
	const char *name;       /* the source's name, for messages */
	const char *addr;       /* common/redis-addr.h's: unix:PATH, HOST[:PORT], ... */
	uint64_t timeout_ms;    /* a connection owing replies gives up after this */
	uint64_t reader_slack_ms; /* the reader's replies may take this much longer */
	uint64_t backoff_max_ms;
	void (*down)(void *arg);  /* both dropped after a failure: put back what was in flight */
	void (*retry)(void *arg); /* the backoff is over: connect again (rlink_open) */
	void *arg;
};

struct rlink;

/* A link for s (addr copied), not yet connected. NULL with *cause set when addr cannot be read. */
struct rlink *rlink_new(struct event_base *, const struct rlink_settings *s, char **cause);

/* Drops both connections (their callbacks run with NULL replies) and frees it. */
void rlink_free(struct rlink *);

/*
 * Opens the writer, and the reader too with reader. Commands sent now
 * wait until connected; the deadline covers the connect. Returns 0, or -1
 * when it could not even start (the link has failed then).
 */
int rlink_open(struct rlink *, bool reader);

/* True when that connection is open (or opening). */
bool rlink_is_open(const struct rlink *, enum rlink_role);

enum rlink_state rlink_state(const struct rlink *);

/* The setup on the new connections succeeded: an outage is over (logged). True when there was one. */
bool rlink_up(struct rlink *);

/* Either connection failed: as the contract above says. Does nothing once closed. */
void rlink_fail(struct rlink *, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Remembers an error that is not a failure (a result refused), for rlink_last_error. */
void rlink_note_error(struct rlink *, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The last failure or noted error (NULL when none yet). */
const char *rlink_last_error(const struct rlink *);

/* Outages ended so far. */
uint64_t rlink_reconnects(const struct rlink *);

/* Drops one connection (no failure: a stop). */
void rlink_drop(struct rlink *, enum rlink_role);

/* Stopped for good: both dropped, no retry; failures are ignored from now on. */
void rlink_close(struct rlink *);

/*
 * A command's words as (pointer, length) pairs, so that a word may hold any
 * bytes and nothing is copied before hiredis writes Redis's protocol: the
 * words pointed at must stay valid until rlink_send returns. Numbers are
 * written into the command itself (at most RLINK_CMD_NUMS of them).
 */
#define RLINK_CMD_NUMS 4
struct rlink_cmd {
	const char **argv;
	size_t *len;
	int n, cap;
	bool failed;                    /* out of memory, or too many numbers */
	int nnums;
	char nums[RLINK_CMD_NUMS][24];
};

void rlink_cmd_init(struct rlink_cmd *);
void rlink_cmd_free(struct rlink_cmd *);
/* Empties it for another command (keeping its memory). */
void rlink_cmd_reset(struct rlink_cmd *);
/* Keeps its first n words (and every number written so far). */
void rlink_cmd_truncate(struct rlink_cmd *, int n);
void rlink_cmd_mem(struct rlink_cmd *, const char *p, size_t len);
void rlink_cmd_str(struct rlink_cmd *, const char *s);
void rlink_cmd_u64(struct rlink_cmd *, uint64_t v);

/*
 * Sends cmd on that connection; fn gets its reply (arg as privdata).
 * Returns 0, or -1 when it could not be queued (the connection is not
 * open, or the link has failed: an empty or failed cmd is a failure too).
 */
int rlink_send(struct rlink *, enum rlink_role, redisCallbackFn *fn, void *arg,
    const struct rlink_cmd *cmd);

/*
 * The start of every reply callback: true when the reply counts (not NULL,
 * from a context still in use); it is counted as received then.
 */
bool rlink_replied(redisAsyncContext *ac, void *reply);

/* A reply callback for the commands whose answer EXEC (or nothing) carries. */
void rlink_ignore_cb(redisAsyncContext *ac, void *reply, void *arg);

#endif
