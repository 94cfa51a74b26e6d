/*
 * conn.c: one client connection.
 *
 * A connection is one libevent event on its socket, armed for reading (and
 * for writing only while output is stuck), and buffers that exist only while
 * they hold bytes: an idle connection costs its struct and an idmap entry.
 *
 * Reading: one read() per readiness into a scratch buffer shared by every
 * connection (the loop is single-threaded), split into lines by framing.c:
 * complete lines are handled straight from it, only the start of a line
 * whose newline has not come is kept, and each byte is searched for a
 * newline once. A line longer than max_request_bytes is answered with
 * request_too_large as soon as the limit is passed, and the rest of it is
 * dropped as it arrives: nothing is buffered beyond the limit, and the
 * connection stays usable after the next newline. The held bytes are freed
 * with the connection, never while a line of it is being handled.
 *
 * Writing: answers are appended to c->out and the connection is put on a
 * dirty list; one event, activated once per batch, runs after the callbacks
 * of the current loop iteration and writes each dirty connection with one
 * send(). So the answers of one iteration leave in one write per connection.
 * The exception is a long run of lines from one read (a pipelining client):
 * it is answered every CONN_LINES_PER_WRITE lines, so the client can send
 * more while the loop works through the rest.
 * Only when the socket does not take everything is the event armed for
 * writing.
 *
 * Flow control: a client that reads is never cut off for the size of its
 * answers, and one that does not read costs bounded memory.
 *  - The output buffer takes an answer only while nothing is held back
 *    before it and the answer fits under max_output_buffer, or the buffer
 *    is empty: an answer goes whole into the buffer, so one event larger
 *    than the cap still reaches a client that reads, alone. (A stream
 *    event is measured by its weight, the output it carries.) Every answer
 *    comes as text (proto.h): this file writes no JSON. Otherwise the
 *    answer is held back, in order, on
 *    c->out's held list: a done by reference (its shared text, blob.h, and
 *    its request's id: one copy of the text however many connections are
 *    owed it), any other line as its text. As the socket takes bytes, held
 *    answers move into the buffer by the same rule.
 *  - While the buffer is full or anything is held back, the connection's
 *    requests are not dispatched: the line being handled is finished, the
 *    rest of that read waits in the framing (at most one read), and the
 *    socket is not read. Reading resumes, held lines first, once nothing is
 *    held back and the buffer is down to half the cap (the low-water mark:
 *    a client that reads gets a full buffer's worth per pause, not one line).
 *  - A task's stream events that are held back keep their weight on the
 *    task's stream budget until they move into the buffer, so the worker
 *    producing them blocks in task_emit (task.c): a task's output is paced
 *    by its reader, and its done, sent after its output, stays behind it.
 * A connection's memory is thus its buffer (at most the cap plus one
 * answer), the rest of one read, and the held list: one small item per done
 * owed (the text is shared) plus the stream events that budgets bound.
 *
 * A client that reads nothing while its output waits is disconnected after
 * output_stall_timeout (its tasks go on). A connection whose socket did not
 * take all its output, the one case where the event is armed for writing,
 * is on the stuck list with the time its socket last took bytes; one sweep
 * timer, pending only while that list is not empty, closes those past the
 * timeout. An idle connection has neither a timer nor a time stamp.
 *
 * A connection's memory: conn_close takes a connection off every list that
 * can lead to it (the idmap, the dirty list), drops its output and held
 * answers, and puts it on the graveyard, which a zero-length timer empties.
 * The invariant: a connection is freed only when nothing can reach it any
 * more: it is dead, on no list but the graveyard, its event deleted, and no
 * callback of the loop pass that closed it can still hold it (callers may
 * look at it after conn_send, a line of it may be being handled). Freeing
 * also waits for the loop to poll once after the close: with epoll's
 * changelist, removing the event from epoll waits for that poll, and
 * closing the socket first would let a worker's new descriptor (a pipe of
 * an exec task) take its number before epoll_ctl runs on it. So the reaper
 * frees only the connections that were already dead when it last ran:
 * between that run and this one the loop polled.
 */
#include "config.h"

#include <errno.h>
#include <poll.h>
#include <stdalign.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>

#include <event2/event.h>

#include "base/blob.h"
#include "base/clock.h"
#include "conn.h"
#include "daemon.h"
#include "framing.h"
#include "base/idmap.h"
#include "base/log.h"
#include "task/mailbox.h"
#include "pool/pool.h"
#include "proto/proto.h"
#include "base/utf8.h"
#include "wire.h"

#define CONN_SCRATCH (64 * 1024)  /* bytes taken from a socket per read */
#define CONN_MARKS 4              /* the gate's batches a connection's output waits for */
#define CONN_OUT_MIN 2048         /* first allocation of an output buffer */
#define CONN_LINES_PER_WRITE 32   /* a long run of lines is answered in parts this long */
#define CONN_LINES_PER_PASS 64    /* requests of one connection handled per loop pass... */
#define CONN_PASS_US 200          /* ...or fewer, once they took this long */
#define CONN_ERROR_MAX 512        /* bytes of an error message, cut at a character boundary */

/*
 * A connection's place on one of the lists of connections (dirty, stuck,
 * yield, held): put at the head, taken off from anywhere in O(1), and on
 * the list exactly when prev is not NULL (prev: the pointer that points at
 * the connection, the list's head or the link before).
 */
struct conn_link {
	struct conn *next;
	struct conn **prev;
};

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
	unsigned waits;        /* of those, waits (max_subscriptions) */
	bool is_unix;
	bool have_creds;       /* Unix peers: uid/gid/pid are known */
	bool dead;             /* closed; freed from a deferred callback */
	bool closing;          /* the peer ended its input: close once nothing is owed */
	bool output_broken;    /* writing failed: answers are dropped, input still read */
	bool paused;           /* output over max_output_buffer: requests are not read */
	bool input_held;       /* a task's stdin buffer is full: requests are not read */
	bool dispatching;      /* a line of it is being handled */
	bool yielded;          /* handled its share of this pass: goes on in the next one */
	short events;          /* what the event is armed for: EV_READ, EV_WRITE */
	uint8_t peer_family;   /* TCP peers: AF_INET or AF_INET6 (see conn_peer) */
	uint16_t peer_port;
	uint8_t peer_addr[16];
	struct framing in;     /* the start of a line whose newline has not come */
	struct conn_out *out;  /* output not yet written; NULL when none */
	struct conn_link dirty;   /* on dirty_list: to flush at the end of the pass */
	struct conn_link stuck;   /* on stuck_list: its socket is full */
	struct conn_link yield;   /* on yield_list: goes on in the next pass */
	struct conn_link held;    /* on held_list: its output waits for the gate */
	struct conn *next_dead;   /* the graveyard (dead connections to free) */
	/*
	 * The gate's hold (the journal's, durable.c): bytes ever put in the output buffer,
	 * sent, and marked with the batch they wait for; bytes up to safe may
	 * go. marks: [end of bytes, batch], oldest first.
	 */
	uint64_t out_total, sent_total, tagged_total, safe_total;
	uint64_t dep;          /* the batch the output given since the last mark depends on */
	struct { uint64_t end, batch; } marks[CONN_MARKS];
	unsigned nmarks;
	char *token_name;         /* TCP: the token hello presented, by name; NULL: none */
	alignas(max_align_t) unsigned char evspace[]; /* its struct event */
};

/* An answer held back while the output buffer is full (see the top of the file). */
struct conn_item {
	struct conn_item *next;
	struct blob *body;      /* a done: its shared text, after the "{" */
	json_t *id;             /* a done: its request's id, or NULL */
	conn_sent_fn sent;      /* a stream event: called once it is in the buffer or dropped */
	uint64_t key;           /* sent's arguments */
	size_t weight;
	size_t len;             /* any other line: its bytes, newline included */
	char line[];
};

/* Output waiting: bytes [off, len) of data unsent, then the held answers. */
struct conn_out {
	size_t off, len, cap;
	struct conn_item *held, *held_tail;
	size_t nheld;
	size_t held_bytes;      /* the held lines' bytes (a done's shared text not counted) */
	uint64_t progress_us;   /* stuck: when the socket last took bytes */
	char data[];
};

/* A list of connections: its head, and which of a connection's links it uses. */
struct conn_list {
	struct conn *head;
	size_t link;            /* offsetof(struct conn, LINK) */
};

#define CONN_LIST(link) { NULL, offsetof(struct conn, link) }

static struct idmap *conns;
static conn_dispatch_fn dispatch;   /* the request lines' handler (conn_set_dispatch) */
static const struct conn_gate *gate; /* the output gate (conn_set_gate); NULL: none */
static struct conn_list held_list = CONN_LIST(held); /* waiting for the gate's batch */
static bool held_released;          /* the gate moved on: the held are written again */
static uint64_t next_conn_id = 1;
static size_t nunflushed;           /* live connections with output waiting */
static struct conn_list dirty_list = CONN_LIST(dirty); /* to write at the end of the pass */
static struct conn *graveyard;      /* closed since the reaper last ran */
static struct conn *doomed;         /* closed before it last ran: freed when it runs next */
static struct event *flush_ev;      /* writes the dirty */
static struct event *reap_ev;       /* frees the doomed, in the next iteration */
static struct conn_list stuck_list = CONN_LIST(stuck); /* sockets that did not take all */
static struct event *stall_ev;      /* sweeps them for output_stall_timeout */
static struct conn_list yield_list = CONN_LIST(yield); /* their next requests next pass */
static struct event *yield_ev;      /* a zero timer: runs after the next poll */
static bool flush_scheduled;
static char scratch[CONN_SCRATCH];
static unsigned lines_this_read;    /* lines handled from the current read */
static uint64_t pass_start_us;      /* when the current read (or resume) began to be
                                       handled; 0: not read yet (a read of one line) */

static struct conn_link *
link_of(const struct conn_list *l, struct conn *c)
{
	return (struct conn_link *)(void *)((char *)c + l->link);
}

/* Puts c at the head of l. False when it was on l already (nothing done). */
static bool
list_push(struct conn_list *l, struct conn *c)
{
	struct conn_link *k = link_of(l, c);

	if (k->prev != NULL)
		return false;
	k->next = l->head;
	if (l->head != NULL)
		link_of(l, l->head)->prev = &k->next;
	k->prev = &l->head;
	l->head = c;
	return true;
}

/* Takes c off l, wherever it is on it; nothing when it is not on l. */
static void
list_remove(struct conn_list *l, struct conn *c)
{
	struct conn_link *k = link_of(l, c);

	if (k->prev == NULL)
		return;
	*k->prev = k->next;
	if (k->next != NULL)
		link_of(l, k->next)->prev = k->prev;
	k->next = NULL;
	k->prev = NULL;
}

static void conn_io_cb(evutil_socket_t, short, void *);
static void conn_flush_cb(evutil_socket_t, short, void *);
static void conn_reap_cb(evutil_socket_t, short, void *);
static void conn_stall_cb(evutil_socket_t, short, void *);
static void conn_yield_cb(evutil_socket_t, short, void *);
static void conn_send_line(struct conn *, const char *, size_t);
static void conn_resume_input(struct conn *);

static struct event *
conn_event(struct conn *c)
{
	return (struct event *)(void *)c->evspace;
}

/* Arms the connection's event for what (0: not at all). */
static void
conn_set_events(struct conn *c, short what)
{
	struct event *ev = conn_event(c);

	if (c->events == what)
		return;
	if (c->events != 0)
		event_del(ev);
	c->events = what;
	if (what != 0) {
		event_assign(ev, daemon_state->base, c->fd, what | EV_PERSIST, conn_io_cb, c);
		event_add(ev, NULL);
	}
}

/* Runs conn_flush_cb once the callbacks already due this iteration have run. */
static void
conn_schedule_flush(void)
{
	if (!flush_scheduled) {
		flush_scheduled = true;
		event_active(flush_ev, EV_TIMEOUT, 0);
	}
}

static void
read_peer_creds(struct conn *c)
{
	struct ucred cred;
	socklen_t len = sizeof cred;

	if (getsockopt(c->fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0) {
		c->have_creds = true;
		c->uid = cred.uid;
		c->gid = cred.gid;
		c->pid = cred.pid;
	}
}

static void
keep_peer_addr(struct conn *c, const struct sockaddr *sa)
{
	if (sa == NULL)
		return;
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *sin = (const struct sockaddr_in *)(const void *)sa;
		c->peer_family = AF_INET;
		c->peer_port = ntohs(sin->sin_port);
		memcpy(c->peer_addr, &sin->sin_addr, sizeof sin->sin_addr);
	} else if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)(const void *)sa;
		c->peer_family = AF_INET6;
		c->peer_port = ntohs(sin6->sin6_port);
		memcpy(c->peer_addr, &sin6->sin6_addr, sizeof sin6->sin6_addr);
	}
}

const char *
conn_peer(const struct conn *c)
{
	static char buf[INET6_ADDRSTRLEN + 16];
	char host[INET6_ADDRSTRLEN] = "?";

	if (c->is_unix) {
		if (!c->have_creds)
			return "unix";
		snprintf(buf, sizeof buf, "uid %u pid %d", (unsigned)c->uid, (int)c->pid);
	} else if (c->peer_family == AF_INET || c->peer_family == AF_INET6) {
		inet_ntop(c->peer_family, c->peer_addr, host, sizeof host);
		snprintf(buf, sizeof buf, c->peer_family == AF_INET6 ? "[%s]:%u" : "%s:%u", host,
		    (unsigned)c->peer_port);
	} else
		return "unix";
	return buf;
}

/* buf = prefix then s, cut to len bytes with the NUL (as snprintf cuts); returns buf */
static char *
owner_put(char *buf, size_t len, const char *prefix, const char *s)
{
	size_t a = strlen(prefix), b = strlen(s);

	if (len == 0)
		return buf;
	if (a > len - 1)
		a = len - 1;
	if (b > len - 1 - a)
		b = len - 1 - a;
	memcpy(buf, prefix, a);
	memcpy(buf + a, s, b);
	buf[a + b] = '\0';
	return buf;
}

const char *
conn_owner(const struct conn *c, char *buf, size_t len)
{
	char num[24], *p = num + sizeof num;
	unsigned v = (unsigned)c->uid;

	/* Every submit asks (a task's owner): put together without snprintf, cut as it would. */
	if (c->is_unix && c->have_creds) {
		*--p = '\0';
		do
			*--p = (char)('0' + v % 10);
		while ((v /= 10) != 0);
		return owner_put(buf, len, "uid:", p);
	}
	if (c->is_unix)
		return owner_put(buf, len, "unix:unknown", "");  /* no SO_PEERCRED: not seen on Linux */
	if (c->token_name != NULL)
		return owner_put(buf, len, "token:", c->token_name);
	return owner_put(buf, len, "tcp:anonymous", "");
}

void
conn_set_token_name(struct conn *c, const char *name)
{
	free(c->token_name);
	c->token_name = name != NULL ? strdup(name) : NULL;
}

int
conn_fd(const struct conn *c)
{
	return c->fd;
}

struct conn *
conn_new(int fd, bool is_unix, const struct sockaddr *sa)
{
	struct daemon *d = daemon_state;
	struct conn *c;

	if (conns == NULL && (conns = idmap_new()) == NULL) {
		close(fd);
		return NULL;
	}
	if (flush_ev == NULL &&
	    (flush_ev = event_new(d->base, -1, 0, conn_flush_cb, NULL)) == NULL) {
		close(fd);
		return NULL;
	}
	if (reap_ev == NULL && (reap_ev = evtimer_new(d->base, conn_reap_cb, NULL)) == NULL) {
		close(fd);
		return NULL;
	}
	if (stall_ev == NULL && (stall_ev = evtimer_new(d->base, conn_stall_cb, NULL)) == NULL) {
		close(fd);
		return NULL;
	}
	if (yield_ev == NULL && (yield_ev = evtimer_new(d->base, conn_yield_cb, NULL)) == NULL) {
		close(fd);
		return NULL;
	}
	if ((c = calloc(1, sizeof *c + event_get_struct_event_size())) == NULL) {
		close(fd);
		return NULL;
	}
	c->id = next_conn_id++;
	c->fd = fd;
	c->is_unix = is_unix;
	if (is_unix)
		read_peer_creds(c);
	else
		keep_peer_addr(c, sa);
	evutil_make_socket_nonblocking(fd);
	if (idmap_put(conns, c->id, c) == -1) {
		close(fd);
		free(c);
		return NULL;
	}
	conn_set_events(c, EV_READ);
	log_debug("connection %llu from %s", (unsigned long long)c->id, conn_peer(c));
	return c;
}

struct conn *
conn_find(uint64_t id)
{
	return conns ? idmap_get(conns, id) : NULL;
}

size_t
conn_queued(const struct conn *c)
{
	return c->out != NULL ? c->out->len - c->out->off + c->out->held_bytes : 0;
}

size_t
conn_count(void)
{
	return conns ? idmap_count(conns) : 0;
}

static size_t
conn_pending(const struct conn *c)
{
	return c->out != NULL ? c->out->len - c->out->off : 0;
}

/* The output takes no more: over the cap, or answers already held back. */
static bool
conn_out_full(const struct conn *c)
{
	return c->out != NULL && (c->out->held != NULL ||
	    conn_pending(c) >= daemon_state->conf.max_output_buffer);
}

/* Down to the low-water mark: nothing held back, at most half the cap in the buffer. */
static bool
conn_out_drained(const struct conn *c)
{
	return c->out == NULL || (c->out->held == NULL &&
	    conn_pending(c) <= daemon_state->conf.max_output_buffer / 2);
}

/* Frees a held answer; a stream event's budget is given back. */
static void
item_free(struct conn_item *it)
{
	if (it->sent != NULL)
		it->sent(it->key, it->weight);
	blob_release(it->body);
	json_decref(it->id);
	free(it);
}

/* Arms the stall sweep, a quarter of the timeout away (10 ms to 1 s). */
static void
stall_schedule(void)
{
	uint64_t ms = daemon_state->conf.output_stall_timeout_ms / 4;
	struct timeval tv;

	if (daemon_state->conf.output_stall_timeout_ms == 0 || evtimer_pending(stall_ev, NULL))
		return;
	if (ms < 10)
		ms = 10;
	if (ms > 1000)
		ms = 1000;
	tv = clock_timeval_ms(ms);
	evtimer_add(stall_ev, &tv);
}

/* c's socket did not take all its output (progress_us is set). */
static void
stuck_add(struct conn *c)
{
	if (list_push(&stuck_list, c))
		stall_schedule();
}

static void
conn_drop_output(struct conn *c)
{
	struct conn_item *it;

	list_remove(&stuck_list, c);
	if (c->out == NULL)
		return;
	while ((it = c->out->held) != NULL) {
		c->out->held = it->next;
		item_free(it);
	}
	free(c->out);
	c->out = NULL;
	nunflushed--;
}

static void
conn_drop_input(struct conn *c)
{
	framing_reset(&c->in);
}

/* Puts c on the list of connections to write at the end of the loop pass. */
static void
dirty_add(struct conn *c)
{
	if (list_push(&dirty_list, c))
		conn_schedule_flush();
}

/*
 * Fairness: one connection's requests are handled CONN_LINES_PER_PASS at a
 * time, or for CONN_PASS_US, whichever comes first. Past that, the rest of
 * its read waits in the framing, its socket is not read, and it goes on in
 * the next loop pass, after the poll: a client that pipelines thousands of
 * costly requests (a storm of list) delays the others by one share per
 * pass, not by its whole read. (Measured: 16 connections pipelining 1,000
 * list requests each over 10,000 tasks held another client's ping 8.6 s;
 * with shares, 9 ms at the median on a loaded 2-CPU machine.)
 */
static void
yield_add(struct conn *c)
{
	struct timeval now = { 0, 0 };

	c->yielded = true;
	if (list_push(&yield_list, c) && !evtimer_pending(yield_ev, NULL))
		evtimer_add(yield_ev, &now);
}

static void
yield_remove(struct conn *c)
{
	c->yielded = false;
	list_remove(&yield_list, c);
}

/* Runs the reaper in the next loop pass, if it is not already due. */
static void
reap_schedule(void)
{
	struct timeval now = { 0, 0 };

	if (!evtimer_pending(reap_ev, NULL))
		evtimer_add(reap_ev, &now);
}

static void
conn_free(struct conn *c)
{
	if (c->events != 0)
		event_del(conn_event(c));
	conn_drop_output(c);
	conn_drop_input(c);
	close(c->fd);
	free(c->token_name);
	free(c);
}

static void (*close_hook)(uint64_t id);
static bool conn_peer_gone(const struct conn *);

void
conn_set_close_hook(void (*fn)(uint64_t id))
{
	close_hook = fn;
}

void
conn_close(struct conn *c, const char *why)
{
	if (c->dead)
		return;
	c->dead = true;
	idmap_remove(conns, c->id);
	if (close_hook != NULL)
		close_hook(c->id);
	conn_set_events(c, 0);
	conn_drop_output(c);
	list_remove(&dirty_list, c);
	list_remove(&held_list, c);
	yield_remove(c);
	if (why != NULL)
		log_info("connection %llu (%s) closed: %s", (unsigned long long)c->id, conn_peer(c),
		    why);
	c->next_dead = graveyard;
	graveyard = c;
	reap_schedule();
}

/* A closing connection goes once nothing is owed and everything was written. */
static void
close_if_finished(struct conn *c)
{
	if (c->closing && c->awaiting == 0 && c->out == NULL)
		conn_close(c, NULL);
}

void
conn_close_after_flush(struct conn *c)
{
	c->closing = true;
	conn_drop_input(c);
	conn_set_events(c, (short)(c->events & ~EV_READ));
	close_if_finished(c);
}

uint64_t
conn_id(const struct conn *c)
{
	return c->id;
}

bool
conn_is_unix(const struct conn *c)
{
	return c->is_unix;
}

bool
conn_creds(const struct conn *c, uid_t *uid, gid_t *gid, pid_t *pid)
{
	if (!c->is_unix || !c->have_creds)
		return false;
	if (uid != NULL)
		*uid = c->uid;
	if (gid != NULL)
		*gid = c->gid;
	if (pid != NULL)
		*pid = c->pid;
	return true;
}

enum conn_role
conn_role(const struct conn *c)
{
	return c->role;
}

void
conn_set_role(struct conn *c, enum conn_role role)
{
	c->role = role;
}

void
conn_done_owed(struct conn *c, bool wait)
{
	c->awaiting++;
	if (wait)
		c->waits++;
}

void
conn_done_settled(struct conn *c, bool wait)
{
	if (c->awaiting > 0)
		c->awaiting--;
	if (wait && c->waits > 0)
		c->waits--;
	close_if_finished(c);   /* a done that went out is waited for in conn_write */
}

unsigned
conn_waits(const struct conn *c)
{
	return c->waits;
}

/* Makes room for n more bytes in the output buffer; -1 when memory ran out. */
static int
out_reserve(struct conn *c, size_t n)
{
	struct conn_out *o = c->out;
	size_t pending, cap;

	if (o == NULL) {
		cap = n > CONN_OUT_MIN ? n : CONN_OUT_MIN;
		if ((o = malloc(sizeof *o + cap)) == NULL)
			return -1;
		o->off = o->len = 0;
		o->cap = cap;
		o->held = o->held_tail = NULL;
		o->nheld = 0;
		o->held_bytes = 0;
		c->out = o;
		nunflushed++;
		return 0;
	}
	if (o->cap - o->len >= n)
		return 0;
	pending = o->len - o->off;
	if (o->off > 0 && o->off >= pending) {
		/*
		 * What was written makes room, moved only when as much was sent
		 * as is left: the bytes moved never outnumber the bytes sent,
		 * however a slow reader takes them.
		 */
		memmove(o->data, o->data + o->off, pending);
		o->off = 0;
		o->len = pending;
		if (o->cap - o->len >= n)
			return 0;
	}
	cap = o->cap * 2 > o->len + n ? o->cap * 2 : o->len + n;
	if ((o = realloc(o, sizeof *o + cap)) == NULL)
		return -1;
	o->cap = cap;
	c->out = o;
	return 0;
}

/* Appends n bytes to the output buffer (room was reserved). */
static void
out_put(struct conn *c, const char *p, size_t n)
{
	memcpy(c->out->data + c->out->len, p, n);
	c->out->len += n;
	c->out_total += n;
}

void
conn_gate_held(size_t *nconns, uint64_t *bytes)
{
	*nconns = 0;
	*bytes = 0;
	for (struct conn *c = held_list.head; c != NULL; c = c->held.next) {
		(*nconns)++;
		*bytes += c->out_total - c->safe_total;
	}
}

void
conn_set_dispatch(conn_dispatch_fn fn)
{
	dispatch = fn;
}

void
conn_set_gate(const struct conn_gate *g)
{
	gate = g;
}

void
conn_gate_seen(void)
{
	if (held_list.head == NULL)
		return;
	held_released = true;
	conn_schedule_flush();
}

/*
 * How many of the n bytes c could send now may go: the output of a loop
 * pass waits until the gate says that pass may be seen (the journal's
 * records of that pass, durable.c). The bytes put since the last call are
 * marked with the batch they wait for.
 */
static size_t
gate_allows(struct conn *c, size_t n)
{
	uint64_t batch, seen;

	if (gate == NULL)
		return n;
	batch = gate->prepare();
	seen = gate->seen();
	if (c->tagged_total < c->out_total) {
		/* output that depends on no batch (output_batch) waits only behind older bytes */
		if (c->dep < batch)
			batch = c->dep;
		c->dep = 0;
		if (c->nmarks == 0 && batch <= seen)
			c->safe_total = c->out_total;
		else if (c->nmarks > 0 && batch <= c->marks[c->nmarks - 1].batch)
			c->marks[c->nmarks - 1].end = c->out_total;
		else if (c->nmarks == CONN_MARKS) {
			/* folded into the newest: it waits a little longer, never less */
			c->marks[c->nmarks - 1].end = c->out_total;
			c->marks[c->nmarks - 1].batch = batch;
		} else {
			c->marks[c->nmarks].end = c->out_total;
			c->marks[c->nmarks].batch = batch;
			c->nmarks++;
		}
		c->tagged_total = c->out_total;
	}
	while (c->nmarks > 0 && c->marks[0].batch <= seen) {
		c->safe_total = c->marks[0].end;
		memmove(&c->marks[0], &c->marks[1], (c->nmarks - 1) * sizeof c->marks[0]);
		c->nmarks--;
	}
	return c->safe_total - c->sent_total < n ? (size_t)(c->safe_total - c->sent_total) : n;
}

/* Copies a done into the output buffer: its head for c (the id), then body. -1 when out of memory. */
static int
out_add_done(struct conn *c, json_t *id, const struct blob *body)
{
	struct proto_text head;

	proto_encode_done_head(&head, id);
	if (!proto_text_ok(&head) || out_reserve(c, head.len + body->len + 1) == -1) {
		proto_text_free(&head);
		return -1; /* a parsed id always encodes: only memory can lack */
	}
	out_put(c, head.data, head.len);
	out_put(c, body->data, body->len);
	out_put(c, "\n", 1);
	proto_text_free(&head);
	return 0;
}

/* Moves held answers into the buffer while it is under the cap. -1 when out of memory. */
static int
out_refill(struct conn *c)
{
	size_t cap = daemon_state->conf.max_output_buffer;
	struct conn_item *it;

	while ((it = c->out->held) != NULL && conn_pending(c) < cap) {
		if (it->body != NULL && conn_pending(c) > 0 && it->body->len > cap - conn_pending(c))
			break; /* a done that does not fit waits for the room, or to go alone */
		if (it->body != NULL) {
			if (out_add_done(c, it->id, it->body) == -1)
				return -1;
		} else if (out_reserve(c, it->len) == -1)
			return -1;
		else
			out_put(c, it->line, it->len);
		if ((c->out->held = it->next) == NULL)
			c->out->held_tail = NULL;
		c->out->nheld--;
		c->out->held_bytes -= it->len;
		item_free(it);
	}
	return 0;
}

/* Before adding output: false when it must be dropped (dead, or writing failed). */
static bool
conn_can_send(const struct conn *c)
{
	return !c->dead && !c->output_broken;
}

/*
 * True when an answer of about len bytes may go into the buffer now: nothing
 * is held back, and it fits under the cap, or the buffer is empty (one
 * answer larger than the cap goes alone).
 */
static bool
out_takes(const struct conn *c, size_t len)
{
	size_t pending = conn_pending(c), cap = daemon_state->conf.max_output_buffer;

	return c->out == NULL || (c->out->held == NULL && pending < cap &&
	    (len <= cap - pending || pending == 0));
}

/* After adding output (ok: it all went in): queues c for the flush. */
static void
conn_sent(struct conn *c, bool ok)
{
	if (!ok) {
		/* a line cut short would break the framing: the client cannot go on */
		conn_close(c, "out of memory for its output");
		return;
	}
	if (!(c->events & EV_WRITE))
		dirty_add(c);
}

/* Holds back a new answer of len bytes of text (after the item); NULL when out of memory. */
static struct conn_item *
hold(struct conn *c, size_t len)
{
	struct conn_item *it = calloc(1, sizeof *it + len);

	if (it == NULL) {
		conn_close(c, "out of memory for its output");
		return NULL;
	}
	/* held only behind a full buffer: c->out exists, and c is dirty or armed for writing */
	if (c->out->held_tail != NULL)
		c->out->held_tail->next = it;
	else
		c->out->held = it;
	c->out->held_tail = it;
	c->out->nheld++;
	c->out->held_bytes += len;
	return it;
}

/*
 * An event whose text could not be written (a string in it is not UTF-8,
 * or memory ran out): the request still gets an answer, an error
 * "internal" with the event's id, and the daemon's log says so. Never a
 * line cut short, never silence.
 */
static void
conn_send_unsent(struct conn *c, const struct proto_text *pt)
{
	const char *name = pt->event;
	struct proto_text err;

	if (name != NULL && (strlen(name) > 32 || strspn(name, "abcdefghijklmnopqrstuvwxyz_") !=
	    strlen(name)))
		name = NULL; /* not one of ours: not worth quoting */
	log_warnx("connection %llu (%s): %s%s%s could not be %s: answered with an "
	    "internal error", (unsigned long long)c->id, conn_peer(c),
	    name != NULL ? "a \"" : "an event", name != NULL ? name : "",
	    name != NULL ? "\" event" : "", pt->unencodable ? "encoded as JSON" : "built");
	proto_encode_unsent(&err, pt);
	if (proto_text_ok(&err))
		conn_send_line(c, err.data, err.len);
	else
		conn_close(c, "out of memory for its output");
	proto_text_free(&err);
}

void
conn_send_text(struct conn *c, struct proto_text *pt)
{
	if (!conn_can_send(c))
		;
	else if (!proto_text_ok(pt))
		conn_send_unsent(c, pt);
	else
		conn_send_line(c, pt->data, pt->len);
	proto_text_free(pt);
}

/* The output c is given from now on depends on the journal's batch (0: on none). */
static void
conn_depends(struct conn *c, uint64_t batch)
{
	if (batch > c->dep)
		c->dep = batch;
}

/* Adds a line and its newline to the buffer, over the cap if need be. */
static void
out_add_line(struct conn *c, const char *line, size_t len)
{
	bool ok = out_reserve(c, len + 1) == 0;

	if (ok) {
		out_put(c, line, len);
		out_put(c, "\n", 1);
	}
	conn_sent(c, ok);
}

/* Sends a ready line (without the trailing newline). */
static void
conn_send_line(struct conn *c, const char *line, size_t len)
{
	struct conn_item *it;

	if (!conn_can_send(c))
		return;
	conn_depends(c, gate != NULL ? gate->output_batch(true) : 0);
	if (out_takes(c, len + 1))
		out_add_line(c, line, len);
	else if ((it = hold(c, len + 1)) != NULL) {
		memcpy(it->line, line, len);
		it->line[len] = '\n';
		it->len = len + 1;
	}
}

void
conn_send_done(struct conn *c, json_t *id, struct blob *body)
{
	struct conn_item *it;

	if (!conn_can_send(c))
		return;
	conn_depends(c, gate != NULL ? gate->output_batch(false) : 0);
	if (out_takes(c, body->len))
		conn_sent(c, out_add_done(c, id, body) == 0);
	else if ((it = hold(c, 0)) != NULL) {
		it->body = blob_hold(body);
		it->id = json_incref(id);
	}
}

void
conn_send_stream(struct conn *c, struct proto_text *pt, conn_sent_fn sent, uint64_t key,
    size_t weight)
{
	struct conn_item *it;

	if (!conn_can_send(c) || !proto_text_ok(pt)) {
		conn_send_text(c, pt);
		sent(key, weight);
		return;
	}
	conn_depends(c, gate != NULL ? gate->output_batch(false) : 0);
	if (out_takes(c, weight)) {
		out_add_line(c, pt->data, pt->len);
		proto_text_free(pt);
		sent(key, weight);
		return;
	}
	/* held: its weight stays on the task's budget until it leaves the list */
	if ((it = hold(c, pt->len + 1)) == NULL)
		sent(key, weight);
	else {
		memcpy(it->line, pt->data, pt->len);
		it->line[pt->len] = '\n';
		it->len = pt->len + 1;
		it->sent = sent;
		it->key = key;
		it->weight = weight;
	}
	proto_text_free(pt);
}

void
conn_send_error(struct conn *c, json_t *id, const char *code, const char *fmt, ...)
{
	char msg[CONN_ERROR_MAX];
	struct proto_text pt;
	va_list ap;

	/* cut at a character boundary, never inside one: the event must encode */
	va_start(ap, fmt);
	utf8_vformat(msg, sizeof msg, fmt, ap);
	va_end(ap);
	proto_encode_error(&pt, id, code, msg);
	conn_send_text(c, &pt);
}

void
conn_send_rejected(struct conn *c, json_t *id, const char *code, const char *fmt, ...)
{
	char msg[CONN_ERROR_MAX];
	struct proto_text pt;
	va_list ap;

	va_start(ap, fmt);
	utf8_vformat(msg, sizeof msg, fmt, ap);
	va_end(ap);
	proto_encode_rejected(&pt, id, code, msg);
	conn_send_text(c, &pt);
}

/* Stops dispatching c's requests and reading its socket (its output is full). */
static void
conn_pause_input(struct conn *c)
{
	c->paused = true;
	conn_set_events(c, (short)(c->events & ~EV_READ));
}

void
conn_input_hold(struct conn *c)
{
	c->input_held = true;
	if (!c->dispatching)
		conn_pause_input(c);
}

void
conn_input_release(uint64_t id)
{
	struct conn *c = conn_find(id);

	if (c == NULL || !c->input_held)
		return;
	c->input_held = false;
	if (c->paused && conn_out_drained(c))
		conn_resume_input(c);
}

/* Writing failed: the client can no longer receive, but what it sent before going still counts. */
static void
conn_output_failed(struct conn *c, int err)
{
	log_debug("connection %llu (%s): cannot write (%s): reading what is left",
	    (unsigned long long)c->id, conn_peer(c), strerror(err));
	c->output_broken = true;
	conn_drop_output(c);
	if (c->closing) {
		/* its input already ended: nothing is left to read */
		conn_close(c, NULL);
		return;
	}
	conn_set_events(c, (short)(c->events & ~EV_WRITE));
	if (c->paused)
		conn_resume_input(c);
	else
		conn_set_events(c, EV_READ);
}

/* c has output to send now: alive, and not waiting for the socket to take more. */
static bool
conn_can_write(const struct conn *c)
{
	return !c->dead && c->out != NULL && !(c->events & EV_WRITE);
}

/*
 * Writes what is pending with one send(), then moves held answers into the
 * room it made; arms the event for writing if anything is left. Once the
 * output is down to the low-water mark, a paused connection reads again.
 */
static void
conn_write(struct conn *c)
{
	struct conn_out *o = c->out;
	size_t avail = o->len - o->off, may = gate_allows(c, avail);
	ssize_t n = 0;

	/* what the output stands for is recorded first (the gate): the rest waits for it */
	if (may > 0)
		n = send(c->fd, o->data + o->off, may, MSG_NOSIGNAL | MSG_DONTWAIT);
	if (n == -1) {
		if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
			conn_output_failed(c, errno);
			return;
		}
		n = 0;
	}
	c->sent_total += (uint64_t)n;
	if (may < avail && (size_t)n == may) {
		/*
		 * The socket took all it may: the rest goes when the gate moves on.
		 * A failed journal holds it until its recovery: past
		 * output_stall_timeout the sweep treats it as a stalled socket.
		 */
		o->off += (size_t)n;
		list_push(&held_list, c);
		if (n > 0 || c->stuck.prev == NULL)
			o->progress_us = clock_now_us();
		stuck_add(c);
		conn_set_events(c, (short)(c->events & ~EV_WRITE));
		return;
	}
	o->off += (size_t)n;
	if (o->off == o->len)
		o->off = o->len = 0;
	if (o->held != NULL && out_refill(c) == -1) {
		conn_close(c, "out of memory for its output");
		return;
	}
	if (conn_pending(c) > 0) {
		if (n > 0 || c->stuck.prev == NULL)
			c->out->progress_us = clock_now_us();
		conn_set_events(c, (short)(c->events | EV_WRITE));
		stuck_add(c);
	} else {
		conn_drop_output(c);
		conn_set_events(c, (short)(c->events & ~EV_WRITE));
		if (c->closing)
			close_if_finished(c);
	}
	if (c->paused && !c->dead && conn_out_drained(c))
		conn_resume_input(c);
}

/*
 * In a long run of lines from one read, sends what is answered so far every
 * CONN_LINES_PER_WRITE lines, with the dones already back: the client can
 * send its next requests while the loop works through the rest, instead of
 * both waiting in turn.
 */
static void
conn_write_early(struct conn *c)
{
	if (!conn_can_write(c))
		return;
	mailbox_poll();
	if (conn_can_write(c)) /* the mail may have closed it */
		conn_write(c);
}

/*
 * The framing's callback: one request line, or one past max_request_bytes.
 * After it, a full output pauses the connection (the framing keeps the
 * rest of the read).
 */
static enum framing_next
conn_line(void *arg, enum framing_event ev, const char *line, size_t len)
{
	struct conn *c = arg;
	size_t max = daemon_state->conf.max_request_bytes;

	/* a read's share is timed only when it has more than this line (see below) */
	if (lines_this_read == 0 && pass_start_us == 0 && c->in.rest > 0)
		pass_start_us = clock_now_us();
	switch (ev) {
	case FRAMING_LINE:
		dispatch(c, line, len);
		break;
	case FRAMING_TOO_LONG:
		conn_send_error(c, NULL, ERR_REQUEST_TOO_LARGE, "request line of %zu bytes is "
		    "longer than max_request_bytes (%zu bytes)", len, max);
		break;
	case FRAMING_CUT:
		conn_send_error(c, NULL, ERR_REQUEST_TOO_LARGE, "request line is longer than "
		    "max_request_bytes (%zu bytes); it is dropped up to its newline", max);
		break;
	}
	if (c->dead || c->closing)
		return FRAMING_STOP;
	if (conn_out_full(c) || c->input_held) {
		conn_pause_input(c);
		return FRAMING_PAUSE;
	}
	/* the last line of a read is written by the flush of this pass, with the dones back by then */
	if (++lines_this_read % CONN_LINES_PER_WRITE == 0 && c->in.rest > 0) {
		conn_write_early(c);
		if (c->dead)
			return FRAMING_STOP;
	}
	/*
	 * Its share of this pass: the rest in the next one (yield_add). Only
	 * when bytes of this read are left after the line: otherwise nothing
	 * would wait, the socket is polled before it is read again anyway, and
	 * a pause would only cost two epoll_ctl calls and a loop pass (a client
	 * with 64 requests in flight sends 64 lines a read).
	 */
	if (c->in.rest > 0 && (lines_this_read >= CONN_LINES_PER_PASS ||
	    clock_now_us() - pass_start_us >= CONN_PASS_US)) {
		c->paused = true;
		conn_set_events(c, (short)(c->events & ~EV_READ));
		yield_add(c);
		return FRAMING_PAUSE;
	}
	return FRAMING_GO;
}

/* Handles n bytes just read: every complete line, keeping the start of the last. */
static void
conn_take_input(struct conn *c, const char *p, size_t n)
{
	enum framing_result r;

	lines_this_read = 0;
	pass_start_us = 0;      /* read by conn_line once the read proves to hold two lines */
	c->dispatching = true;
	r = framing_feed(&c->in, p, n, daemon_state->conf.max_request_bytes, conn_line, c);
	c->dispatching = false;
	if (r == FRAMING_NOMEM && !c->dead)
		conn_close(c, "out of memory for its input");
}

/*
 * The output drained to the low-water mark: dispatch the lines a pause
 * kept, then read the socket again (unless those lines filled it again).
 * Not while a line of c is being handled: the pause ends at its return.
 */
static void
conn_resume_input(struct conn *c)
{
	enum framing_result r;

	if (!c->paused || c->dispatching || c->dead || c->input_held || c->yielded)
		return;
	c->paused = false;
	lines_this_read = 0;
	pass_start_us = clock_now_us();
	c->dispatching = true;
	r = framing_resume(&c->in, daemon_state->conf.max_request_bytes, conn_line, c);
	c->dispatching = false;
	if (c->dead)
		return;
	if (r == FRAMING_NOMEM) {
		conn_close(c, "out of memory for its input");
		return;
	}
	if (!c->paused && !c->closing)
		conn_set_events(c, (short)(c->events | EV_READ));
}

/* One read: lines, the end of input or an error. */
/*
 * Whether the peer closed both ends, not only its output: nothing can reach
 * it any more (a held submit then goes at once: admission.c, through the
 * close hook). A Unix socket says so (POLLHUP once the peer's socket is
 * released); over TCP it shows only at the next write.
 */
static bool
conn_peer_gone(const struct conn *c)
{
	struct pollfd pfd = { .fd = c->fd, .events = 0 };

	return poll(&pfd, 1, 0) == 1 && (pfd.revents & (POLLHUP | POLLERR)) != 0;
}

static void
conn_read(struct conn *c)
{
	ssize_t n;

	if (conn_out_full(c) || c->input_held) {
		/* answers from elsewhere (dones) filled it: read again once it drains */
		conn_pause_input(c);
		return;
	}
	n = read(c->fd, scratch, sizeof scratch);
	if (n > 0) {
		conn_take_input(c, scratch, (size_t)n);
		return;
	}
	if (n == -1 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
		return;
	if (n == 0) {
		/* The client closed its end: answer what it already sent, then close. */
		log_debug("connection %llu (%s): end of input", (unsigned long long)c->id,
		    conn_peer(c));
		/* nothing reaches a peer that closed both ends: what waits for it goes now */
		if (close_hook != NULL && conn_peer_gone(c))
			close_hook(c->id);
		if (c->output_broken)
			conn_close(c, NULL);
		else
			conn_close_after_flush(c);
		return;
	}
	conn_close(c, c->output_broken ? NULL : strerror(errno));
}

static void
conn_io_cb(evutil_socket_t fd, short what, void *arg)
{
	struct conn *c = arg;

	/* Writing first: the socket takes the backlog before new answers join it. */
	if ((what & EV_WRITE) && c->out != NULL)
		conn_write(c);
	if ((what & EV_READ) && !c->dead && (c->events & EV_READ))
		conn_read(c);
}

/* Once per batch: one write for each connection with new output. */
static void
conn_flush_cb(evutil_socket_t fd, short what, void *arg)
{
	struct conn *c;

	mailbox_poll(); /* dones already back join this write (no new flush is scheduled) */
	flush_scheduled = false;
	if (held_released) {
		held_released = false;
		while ((c = held_list.head) != NULL) {
			list_remove(&held_list, c);
			dirty_add(c);
		}
	}
	while ((c = dirty_list.head) != NULL) {
		list_remove(&dirty_list, c);
		if (conn_can_write(c))
			conn_write(c);
	}
}

/*
 * The yielded connections go on: each its next share (which may yield it
 * again, onto a new list for the next pass), unless its output is full.
 */
static void
conn_yield_cb(evutil_socket_t fd, short what, void *arg)
{
	struct conn_list list = yield_list;
	struct conn *c;

	/* the list of this pass, moved here: a connection yielded again joins the next one */
	yield_list.head = NULL;
	if (list.head != NULL)
		list.head->yield.prev = &list.head;
	while ((c = list.head) != NULL) {
		yield_remove(c);
		/* paused for its share only: resumes now; for a full output, once it drains */
		if (!conn_out_full(c))
			conn_resume_input(c);
	}
}

/*
 * Frees the connections that were dead when this last ran (the loop polled
 * since), and dooms those closed since, for the next run.
 */
static void
conn_reap_cb(evutil_socket_t fd, short what, void *arg)
{
	struct conn *c;

	while ((c = doomed) != NULL) {
		doomed = c->next_dead;
		conn_free(c);
	}
	doomed = graveyard;
	graveyard = NULL;
	if (doomed != NULL)
		reap_schedule();
}

/*
 * Closes the connections whose socket took none of their output for
 * output_stall_timeout; runs while any socket is stuck.
 */
static void
conn_stall_cb(evutil_socket_t fd, short what, void *arg)
{
	uint64_t timeout_ms = daemon_state->conf.output_stall_timeout_ms, now = clock_now_us();
	struct conn *c, *next;

	for (c = stuck_list.head; c != NULL && timeout_ms != 0; c = next) {
		next = c->stuck.next;
		if (now - c->out->progress_us < timeout_ms * 1000)
			continue;
		log_warnx("connection %llu (%s): %s for %llu ms "
		    "(output_stall_timeout) with %zu bytes and %zu answers waiting: "
		    "disconnecting; its tasks go on", (unsigned long long)c->id, conn_peer(c),
		    c->held.prev != NULL ? "its output waited for the gate (the journal)" :
		    "its socket took no output",
		    (unsigned long long)((now - c->out->progress_us) / 1000), conn_pending(c),
		    c->out->nheld);
		conn_close(c, NULL);
	}
	if (stuck_list.head != NULL)
		stall_schedule();
}

bool
conn_all_flushed(void)
{
	return nunflushed == 0;
}

struct collect {
	struct conn **list;
	size_t n;
};

static void
collect_one(void *value, void *arg)
{
	struct collect *col = arg;

	col->list[col->n++] = value;
}

void
conn_close_all(void)
{
	struct collect col = { NULL, 0 };
	struct conn *c;

	if (conn_count() > 0 && (col.list = calloc(conn_count(), sizeof *col.list)) != NULL) {
		idmap_each(conns, collect_one, &col);
		for (size_t i = 0; i < col.n; i++) {
			idmap_remove(conns, col.list[i]->id);
			conn_free(col.list[i]);
		}
		free(col.list);
	}
	while ((c = graveyard) != NULL) {
		graveyard = c->next_dead;
		conn_free(c);
	}
	while ((c = doomed) != NULL) {
		doomed = c->next_dead;
		conn_free(c);
	}
	dirty_list.head = NULL;
	if (flush_ev != NULL) {
		event_free(flush_ev);
		flush_ev = NULL;
	}
	if (reap_ev != NULL) {
		event_free(reap_ev);
		reap_ev = NULL;
	}
	if (stall_ev != NULL) {
		event_free(stall_ev);
		stall_ev = NULL;
	}
	if (yield_ev != NULL) {
		event_free(yield_ev);
		yield_ev = NULL;
	}
	yield_list.head = NULL;
	stuck_list.head = NULL;
	flush_scheduled = false;
	idmap_free(conns);
	conns = NULL;
}

void
conn_refuse(int fd, const char *code, const char *message)
{
	char line[CONN_ERROR_MAX + 512];
	size_t n = proto_encode_refusal(line, sizeof line - 1, code, message);

	if (n > 0) {
		line[n++] = '\n';
		(void)send(fd, line, n, MSG_DONTWAIT | MSG_NOSIGNAL);
	}
	/*
	 * What the client sent already is read, so that closing with unread
	 * input does not reset the connection before it reads the error.
	 */
	for (int i = 0; i < 16 && recv(fd, scratch, sizeof scratch, MSG_DONTWAIT) > 0; i++)
		;
	close(fd);
}
