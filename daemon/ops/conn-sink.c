/*
 * conn-sink.c: a client connection as a task's sink, the first kind of
 * sink (tasks.h): the registry hands it the task's stream events and its
 * done, and this file writes them on the connection (proto-encode.c's
 * texts, conn.c's sends), each with the id of the request that asked.
 *
 * A task names its connection by number, never by pointer: the client may
 * be gone when the done comes (conn_find then finds nothing). The dones a
 * connection is owed are counted on it (conn_done_owed) from the submit or
 * the wait until they are sent or dropped.
 */
#include "config.h"

#include <stdlib.h>

#include "base/log.h"
#include "conn-sink.h"
#include "daemon.h"
#include "net/conn.h"
#include "proto/proto.h"
#include "task/tasks.h"
#include "wire.h"

struct conn_sink {
	struct task_sink sink;
	uint64_t conn_id;
	json_t *request_id;     /* the submit's or the wait's (may be NULL) */
	bool wait;
	bool owed;              /* the done is still owed to the connection */
	bool dropped;           /* a follower that fell behind: it gets nothing more */
};

/* A stream event left the connection's hands (written, held and then sent, or dropped). */
static void
conn_sink_sent(uint64_t task, size_t weight)
{
	tasks_stream_taken(task, weight);
}

/*
 * A follower whose connection has max_output_buffer queued already: its
 * copy of the task's output weighs nothing on the task (a follower never
 * slows it), so nothing else would bound it. Its follow ends here, with
 * an error follow_dropped in place of the done; the task goes on, and a
 * wait (or a new follow) still finds it.
 */
static void
conn_sink_drop(struct conn_sink *cs, struct conn *c, struct task *t, size_t queued)
{
	size_t cap = daemon_state->conf.max_output_buffer;

	cs->dropped = true;
	log_notice("connection %llu (%s): stopped following task %llu: %zu bytes of its "
	    "output were waiting for the client (max_output_buffer is %zu)",
	    (unsigned long long)cs->conn_id, conn_peer(c), (unsigned long long)t->id, queued,
	    cap);
	conn_send_error(c, cs->request_id, ERR_FOLLOW_DROPPED, "task %llu wrote faster than "
	    "this connection read: %zu bytes of output were waiting for it (max_output_buffer "
	    "is %zu bytes), so the follow stopped here; the task goes on (wait for its done, "
	    "or follow it again)", (unsigned long long)t->id, queued, cap);
	cs->owed = false;
	conn_done_settled(c, cs->wait);
}

static void
conn_sink_event(struct task_sink *sink, struct task *t, json_t *event, size_t weight)
{
	struct conn_sink *cs = (struct conn_sink *)(void *)sink;
	struct conn *c = conn_find(cs->conn_id);
	struct proto_text pt;
	size_t queued;

	if (c == NULL || cs->dropped) {
		task_stream_taken(t, weight);
		return;
	}
	proto_encode_stream(&pt, event, cs->request_id, t->id);
	if (cs->wait && (queued = conn_queued(c)) > 0 &&
	    queued + pt.len + 1 > daemon_state->conf.max_output_buffer) {
		proto_text_free(&pt);
		task_stream_taken(t, weight);
		conn_sink_drop(cs, c, t, queued);
		return;
	}
	conn_send_stream(c, &pt, conn_sink_sent, t->id, weight);
}

static void
conn_sink_done(struct task_sink *sink, struct task *t)
{
	struct conn_sink *cs = (struct conn_sink *)(void *)sink;
	struct conn *c = conn_find(cs->conn_id);

	if (c == NULL || cs->dropped)
		return;
	/* the text is shared: a connection that cannot take it yet holds it, not the task */
	conn_send_done(c, cs->request_id, t->done_text);
	cs->owed = false;
	conn_done_settled(c, cs->wait);
}

static void
conn_sink_release(struct task_sink *sink)
{
	struct conn_sink *cs = (struct conn_sink *)(void *)sink;
	struct conn *c;

	if (cs->owed && (c = conn_find(cs->conn_id)) != NULL)
		conn_done_settled(c, cs->wait);
	json_decref(cs->request_id);
	free(cs);
}

static const struct task_sink_ops conn_sink_ops = {
	.event = conn_sink_event,
	.done = conn_sink_done,
	.release = conn_sink_release,
};

struct task_sink *
conn_sink_new(struct conn *c, json_t *request_id, bool stream, bool wait)
{
	struct conn_sink *cs = calloc(1, sizeof *cs);

	if (cs == NULL)
		return NULL;
	cs->sink.ops = &conn_sink_ops;
	cs->sink.stream = stream;
	cs->sink.paces = stream && !wait;
	cs->conn_id = conn_id(c);
	cs->request_id = json_incref(request_id);
	cs->wait = wait;
	cs->owed = true;
	conn_done_owed(c, wait);
	return &cs->sink;
}
