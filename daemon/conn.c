/*
 * conn.c: one client connection.
 *
 * Framing reads newline-delimited requests from the bufferevent's input. The
 * search for a newline resumes where the last one stopped (c->scanned), so a
 * long line arriving in pieces is scanned once. A line longer than
 * max_request_bytes is answered with request_too_large as soon as the limit
 * is passed, and the rest of it is dropped as it arrives: nothing is buffered
 * beyond the limit, and the connection stays usable after the next newline.
 *
 * Output goes to the bufferevent, which writes it when the loop next runs,
 * so the events of one loop iteration leave in one write. A client whose
 * unsent output passes max_output_buffer is disconnected; its tasks go on.
 */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "conn.h"
#include "daemon.h"
#include "idmap.h"
#include "log.h"
#include "ops.h"
#include "wire.h"

static struct idmap *conns;
static uint64_t next_conn_id = 1;

static void conn_read_cb(struct bufferevent *, void *);
static void conn_write_cb(struct bufferevent *, void *);
static void conn_event_cb(struct bufferevent *, short, void *);

static void
read_peer_creds(struct conn *c, int fd)
{
	struct ucred cred;
	socklen_t len = sizeof cred;

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0) {
		c->have_creds = true;
		c->uid = cred.uid;
		c->gid = cred.gid;
		c->pid = cred.pid;
		snprintf(c->peer, sizeof c->peer, "uid %u pid %d", (unsigned)cred.uid, (int)cred.pid);
	}
}

struct conn *
conn_new(int fd, bool is_unix, const char *peer)
{
	struct daemon *d = daemon_state;
	struct conn *c;

	if (conns == NULL && (conns = idmap_new()) == NULL) {
		close(fd);
		return NULL;
	}
	if ((c = calloc(1, sizeof *c)) == NULL) {
		close(fd);
		return NULL;
	}
	c->id = next_conn_id++;
	c->is_unix = is_unix;
	snprintf(c->peer, sizeof c->peer, "%s", peer);
	if (is_unix)
		read_peer_creds(c, fd);
	c->role = ops_initial_role(c);
	evutil_make_socket_nonblocking(fd);
	c->bev = bufferevent_socket_new(d->base, fd, BEV_OPT_CLOSE_ON_FREE);
	if (c->bev == NULL || idmap_put(conns, c->id, c) == -1) {
		if (c->bev != NULL)
			bufferevent_free(c->bev);
		else
			close(fd);
		free(c);
		return NULL;
	}
	bufferevent_setcb(c->bev, conn_read_cb, conn_write_cb, conn_event_cb, c);
	bufferevent_enable(c->bev, EV_READ | EV_WRITE);
	log_debug("connection %llu from %s", (unsigned long long)c->id, c->peer);
	return c;
}

struct conn *
conn_find(uint64_t id)
{
	return conns ? idmap_get(conns, id) : NULL;
}

size_t
conn_count(void)
{
	return conns ? idmap_count(conns) : 0;
}

static void
conn_free_deferred(evutil_socket_t fd, short what, void *arg)
{
	struct conn *c = arg;

	bufferevent_free(c->bev);
	free(c);
	daemon_maybe_exit();
}

void
conn_close(struct conn *c, const char *why)
{
	if (c->dead)
		return;
	c->dead = true;
	idmap_remove(conns, c->id);
	bufferevent_disable(c->bev, EV_READ | EV_WRITE);
	bufferevent_setcb(c->bev, NULL, NULL, NULL, NULL);
	if (why != NULL)
		log_info("connection %llu (%s) closed: %s", (unsigned long long)c->id, c->peer, why);
	event_base_once(daemon_state->base, -1, EV_TIMEOUT, conn_free_deferred, c, NULL);
}

/* A closing connection goes once nothing is owed and everything was written. */
static void
close_if_finished(struct conn *c)
{
	if (c->closing && c->awaiting == 0 &&
	    evbuffer_get_length(bufferevent_get_output(c->bev)) == 0)
		conn_close(c, NULL);
}

void
conn_close_after_flush(struct conn *c)
{
	c->closing = true;
	bufferevent_disable(c->bev, EV_READ);
	close_if_finished(c);
}

void
conn_owed_done(struct conn *c)
{
	if (c->awaiting > 0)
		c->awaiting--;
}

/*
 * Before adding an event: a client whose unsent backlog already passed the
 * cap has stopped reading, and is disconnected. Checking before rather than
 * after lets one event larger than the cap (a big done) through to a client
 * that keeps up, while a client that does not is bounded to the cap plus one
 * event.
 */
static bool
over_output_cap(struct conn *c)
{
	size_t pending = evbuffer_get_length(bufferevent_get_output(c->bev));
	size_t cap = daemon_state->conf.max_output_buffer;

	if (pending <= cap)
		return false;
	log_warnx("connection %llu (%s): %zu bytes of unsent output passed "
	    "max_output_buffer (%zu): disconnecting; its tasks go on",
	    (unsigned long long)c->id, c->peer, pending, cap);
	conn_close(c, NULL);
	return true;
}

static int
dump_to_evbuffer(const char *buf, size_t size, void *data)
{
	return evbuffer_add(data, buf, size);
}

void
conn_send(struct conn *c, json_t *event)
{
	struct evbuffer *out;

	if (c->dead || over_output_cap(c))
		return;
	out = bufferevent_get_output(c->bev);
	json_dump_callback(event, dump_to_evbuffer, out, JSON_COMPACT);
	evbuffer_add(out, "\n", 1);
}

void
conn_send_line(struct conn *c, const char *line, size_t len)
{
	struct evbuffer *out;

	if (c->dead || over_output_cap(c))
		return;
	out = bufferevent_get_output(c->bev);
	evbuffer_add(out, line, len);
	evbuffer_add(out, "\n", 1);
}

void
conn_send_raw(struct conn *c, const char *a, size_t alen, const char *b, size_t blen)
{
	struct evbuffer *out;

	if (c->dead || over_output_cap(c))
		return;
	out = bufferevent_get_output(c->bev);
	evbuffer_add(out, a, alen);
	evbuffer_add(out, b, blen);
	evbuffer_add(out, "\n", 1);
}

void
conn_send_error(struct conn *c, json_t *id, const char *code, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	json_t *ev;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	ev = json_pack("{s:s, s:O?, s:{s:s, s:s}}", "event", EV_ERROR, "id", id,
	    "error", "code", code, "message", msg);
	conn_send(c, ev);
	json_decref(ev);
}

/* Handles every complete line in the input; stops when the connection dies. */
static void
conn_read_cb(struct bufferevent *bev, void *arg)
{
	struct conn *c = arg;
	struct evbuffer *in = bufferevent_get_input(bev);
	size_t max = daemon_state->conf.max_request_bytes;
	struct evbuffer_ptr start, nl;
	size_t len;

	while (!c->dead && !c->closing && (len = evbuffer_get_length(in)) > 0) {
		evbuffer_ptr_set(in, &start, c->scanned, EVBUFFER_PTR_SET);
		nl = evbuffer_search(in, "\n", 1, &start);
		if (nl.pos == -1) {
			c->scanned = len;
			if (c->discarding) {
				evbuffer_drain(in, len);
				c->scanned = 0;
			} else if (len > max) {
				conn_send_error(c, NULL, ERR_REQUEST_TOO_LARGE,
				    "request line is longer than max_request_bytes (%zu bytes); "
				    "it is dropped up to its newline", max);
				evbuffer_drain(in, len);
				c->scanned = 0;
				c->discarding = true;
			}
			return;
		}
		size_t linelen = (size_t)nl.pos;
		c->scanned = 0;
		if (c->discarding) {
			evbuffer_drain(in, linelen + 1);
			c->discarding = false;
			continue;
		}
		if (linelen > max) {
			conn_send_error(c, NULL, ERR_REQUEST_TOO_LARGE,
			    "request line of %zu bytes is longer than max_request_bytes (%zu bytes)",
			    linelen, max);
			evbuffer_drain(in, linelen + 1);
			continue;
		}
		char *line = (char *)evbuffer_pullup(in, (ev_ssize_t)linelen + 1);
		ops_dispatch(c, line, linelen);
		evbuffer_drain(in, linelen + 1);
	}
}

static void
conn_write_cb(struct bufferevent *bev, void *arg)
{
	struct conn *c = arg;

	if (c->closing)
		close_if_finished(c);
	else if (daemon_state->phase == DAEMON_EXITING)
		daemon_maybe_exit();
}

static void
conn_event_cb(struct bufferevent *bev, short what, void *arg)
{
	struct conn *c = arg;

	if (what & BEV_EVENT_EOF) {
		/* The client closed its end: answer what it already sent, then close. */
		log_debug("connection %llu (%s): end of input", (unsigned long long)c->id, c->peer);
		conn_close_after_flush(c);
	} else if (what & BEV_EVENT_ERROR)
		conn_close(c, strerror(EVUTIL_SOCKET_ERROR()));
}

static void
flushed_check(void *value, void *arg)
{
	struct conn *c = value;
	bool *all = arg;

	if (evbuffer_get_length(bufferevent_get_output(c->bev)) > 0)
		*all = false;
}

bool
conn_all_flushed(void)
{
	bool all = true;

	if (conns != NULL)
		idmap_each(conns, flushed_check, &all);
	return all;
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

	if (conn_count() == 0)
		return;
	if ((col.list = calloc(conn_count(), sizeof *col.list)) == NULL)
		return;
	idmap_each(conns, collect_one, &col);
	struct conn **list = col.list;
	for (size_t i = 0; i < col.n; i++) {
		idmap_remove(conns, list[i]->id);
		bufferevent_free(list[i]->bev);
		free(list[i]);
	}
	free(list);
}

void
conn_refuse(int fd, const char *code, const char *message)
{
	char line[512];
	int n = snprintf(line, sizeof line,
	    "{\"event\":\"error\",\"id\":null,\"error\":{\"code\":\"%s\",\"message\":\"%s\"}}\n",
	    code, message);

	if (n > 0)
		(void)send(fd, line, (size_t)n, MSG_DONTWAIT | MSG_NOSIGNAL);
	close(fd);
}
