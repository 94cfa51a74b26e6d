/*
 * replay.c: a task's spooled output replayed to a follower from the start.
 *
 * One record at a time: a record becomes an output event sent with
 * conn_send_stream, whose callback says when the connection has taken it
 * (at once when its output buffer has room, else once the client has
 * read enough: flow control, conn.c). The callback only marks the replay
 * ready; a loop event then goes on with it, so a replay never writes to a
 * connection from inside that connection's own write. A step sends at
 * most REPLAY_BURST records, then lets the loop serve others.
 *
 * At the end of what the file holds, the task's kind says whether its run
 * has written more (read on), is still running with nothing more written
 * (its stream is turned on in the same step, the sink goes on its list:
 * from here on its events come live), or is over (the file is whole). A
 * finished task gets its done after the last record.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>

#include "base/log.h"
#include "conn-sink.h"
#include "daemon.h"
#include "exec/capture.h"
#include "exec/spool.h"
#include "net/conn.h"
#include "proto/proto.h"
#include "replay.h"
#include "task/tasks.h"
#include "wire.h"

#define REPLAY_BURST 16
#define REPLAY_IN_FLIGHT_US 1000  /* how soon to look again while events are on their way */

struct replay {
	uint64_t key;
	uint64_t conn;
	uint64_t task;
	json_t *request_id;
	struct task_sink *sink;     /* c's: owed a done from the start */
	int fd;
	uint64_t off;
	bool waiting;               /* an event is held back: wait for its callback */
	bool ready;                 /* on the ready list */
	bool over_seen;             /* the run was over at this offset already */
	int cut;                    /* SPOOL_WHY_* from a cut record */
	bool ended;                 /* the end record was read */
	uint64_t kept[2], seen[2];
	struct event *retry_ev;     /* the file is read, events of it still on their way */
	struct replay *next, *next_ready;
};

static struct replay *replays, *ready_head;
static struct event *ready_ev;
static uint64_t next_key = 1;
static struct spool_record record;  /* the loop's one read buffer */

static void replay_step(struct replay *);

static struct replay *
replay_find(uint64_t key)
{
	for (struct replay *r = replays; r != NULL; r = r->next)
		if (r->key == key)
			return r;
	return NULL;
}

static void
replay_free(struct replay *r)
{
	struct replay **p;

	for (p = &replays; *p != NULL; p = &(*p)->next)
		if (*p == r) {
			*p = r->next;
			break;
		}
	for (p = &ready_head; *p != NULL; p = &(*p)->next_ready)
		if (*p == r) {
			*p = r->next_ready;
			break;
		}
	if (r->retry_ev != NULL)
		event_free(r->retry_ev);
	if (r->sink != NULL)
		r->sink->ops->release(r->sink);
	json_decref(r->request_id);
	if (r->fd != -1)
		close(r->fd);
	free(r);
}

static void
replay_ready_cb(evutil_socket_t fd, short what, void *arg)
{
	while (ready_head != NULL) {
		struct replay *r = ready_head;

		ready_head = r->next_ready;
		r->ready = false;
		replay_step(r);
	}
}

static void
replay_schedule(struct replay *r)
{
	if (r->ready)
		return;
	if (ready_ev == NULL &&
	    (ready_ev = event_new(daemon_state->base, -1, 0, replay_ready_cb, NULL)) == NULL) {
		log_warnx("replay: out of memory");
		return;
	}
	r->ready = true;
	r->next_ready = ready_head;
	ready_head = r;
	event_active(ready_ev, 0, 0);
}

/* The connection took the event (or dropped it): the replay may go on. */
static void
replay_sent(uint64_t key, size_t weight)
{
	struct replay *r = replay_find(key);

	(void)weight;
	if (r == NULL)
		return;
	r->waiting = false;
	replay_schedule(r);
}

/* A "cut" event for stream i when the file lacks some of it. */
static void
replay_say_cut(struct replay *r, struct conn *c, int i, uint64_t kept, uint64_t seen, int why)
{
	static const char *const names[2] = { STREAM_STDOUT, STREAM_STDERR };
	struct proto_text pt;
	char msg[256];

	snprintf(msg, sizeof msg, "task %llu: %s: %llu of %llu bytes were kept in the "
	    "spool: %s", (unsigned long long)r->task, names[i], (unsigned long long)kept,
	    (unsigned long long)seen, why == SPOOL_WHY_TASK ? "the task passed "
	    "output_spool_task_bytes" : why == SPOOL_WHY_TOTAL ? "output_spool_bytes was "
	    "full of running tasks' output" : "writing the spool failed (see tpd's log)");
	proto_encode_cut(&pt, r->request_id, r->task, names[i], kept, seen, msg);
	conn_send_text(c, &pt);
}

/* The file is replayed to its end: the cut said, then the done (or the sink waits for it). */
static void
replay_finish(struct replay *r, struct conn *c)
{
	struct task *t = tasks_find(r->task);

	for (int i = 0; i < 2; i++)
		if (r->ended ? r->kept[i] < r->seen[i] : r->cut != 0)
			replay_say_cut(r, c, i, r->kept[i], r->ended ? r->seen[i] : r->kept[i],
			    r->cut != 0 ? r->cut : SPOOL_WHY_ERROR);
	if (t == NULL)
		conn_send_error(c, r->request_id, ERR_NO_SUCH_TASK, "task %llu was forgotten "
		    "while its output was replayed", (unsigned long long)r->task);
	else if (t->finished)
		r->sink->ops->done(r->sink, t);
	else {
		tasks_add_sink(t, r->sink);     /* its done comes there */
		r->sink = NULL;
	}
	replay_free(r);
}

static void
replay_retry_cb(evutil_socket_t fd, short what, void *arg)
{
	struct replay *r = replay_find((uint64_t)(uintptr_t)arg);

	if (r != NULL && !r->waiting)
		replay_step(r);
}

/*
 * The run streams to another receiver and events of bytes the file holds
 * are on their way to the loop: the sink goes on the task's list only once
 * they arrived (they go to the others; this one has them from the file),
 * so it gets each byte once. A timer, not an active event: the loop must
 * poll its mailbox in between. The wait is one hand-off from a worker.
 */
static void
replay_wait_in_flight(struct replay *r)
{
	struct timeval tv = { 0, REPLAY_IN_FLIGHT_US };

	if (r->retry_ev == NULL && (r->retry_ev = evtimer_new(daemon_state->base,
	    replay_retry_cb, (void *)(uintptr_t)r->key)) == NULL) {
		log_warnx("replay: out of memory");
		return;
	}
	evtimer_add(r->retry_ev, &tv);
}

/* Nothing more in the file for now: follow the task live, read on, or finish. */
static bool
replay_at_end(struct replay *r, struct conn *c)
{
	struct task *t = tasks_find(r->task);
	struct task_spool_gap gap;
	int k;

	if (t == NULL || t->finished || t->kind == NULL || t->kind->spool_catch_up == NULL) {
		replay_finish(r, c);
		return false;
	}
	k = t->kind->spool_catch_up(t, r->off, &gap);
	if (k == 0)
		return true;
	if (k == 3) {
		replay_wait_in_flight(r);
		return false;
	}
	if (k == -1) {
		/* the run is over: its file is whole; a second look finds nothing more */
		if (r->over_seen) {
			replay_finish(r, c);
			return false;
		}
		r->over_seen = true;
		return true;
	}
	for (int i = 0; i < 2; i++)
		if (gap.cut && gap.kept[i] < gap.seen[i])
			replay_say_cut(r, c, i, gap.kept[i], gap.seen[i], r->cut != 0 ? r->cut :
			    SPOOL_WHY_TASK);
	/* live from here: the stream is on, and the sink is on the list in the same turn */
	r->sink->stream = true;
	tasks_add_sink(t, r->sink);
	r->sink = NULL;
	replay_free(r);
	return false;
}

static void
replay_step(struct replay *r)
{
	struct conn *c = conn_find(r->conn);
	struct proto_text pt;
	json_t *ev;
	int n, i, sent = 0;

	if (c == NULL) {
		replay_free(r);
		return;
	}
	while (!r->waiting) {
		if (sent == REPLAY_BURST) {
			replay_schedule(r);
			return;
		}
		n = spool_read(r->fd, &r->off, &record);
		if (n == -1) {
			r->cut = r->cut != 0 ? r->cut : SPOOL_WHY_ERROR;
			replay_finish(r, c);
			return;
		}
		if (n == 0) {
			if (!replay_at_end(r, c))
				return;
			continue;
		}
		if (record.type == SPOOL_CUT) {
			r->cut = record.len > 0 ? record.data[0] : SPOOL_WHY_ERROR;
			continue;
		}
		if (record.type == SPOOL_END) {
			for (int b = 0; b < 8; b++) {
				r->seen[0] = r->seen[0] << 8 | record.data[b];
				r->seen[1] = r->seen[1] << 8 | record.data[8 + b];
			}
			r->ended = true;
			replay_finish(r, c);
			return;
		}
		i = record.type == SPOOL_STDERR;
		ev = proto_event_output(i ? STREAM_STDERR : STREAM_STDOUT);

		r->kept[i] += record.len;
		if (ev == NULL || capture_json_set(ev, FIELD_DATA, FIELD_DATA_BASE64, record.data,
		    record.len) == -1) {
			json_decref(ev);
			log_warnx("replay: task %llu: out of memory", (unsigned long long)r->task);
			r->cut = SPOOL_WHY_ERROR;
			replay_finish(r, c);
			return;
		}
		proto_encode_stream(&pt, ev, r->request_id, r->task);
		json_decref(ev);
		r->waiting = true;
		sent++;
		conn_send_stream(c, &pt, replay_sent, r->key, record.len);
		if (r->waiting)
			return;         /* held back: replay_sent goes on */
		r->ready = false;       /* replay_sent scheduled it: this loop goes on instead */
		for (struct replay **p = &ready_head; *p != NULL; p = &(*p)->next_ready)
			if (*p == r) {
				*p = r->next_ready;
				break;
			}
		if ((c = conn_find(r->conn)) == NULL) {
			replay_free(r);
			return;
		}
	}
}

void
replay_start(struct conn *c, json_t *id, uint64_t task, int fd)
{
	struct replay *r = calloc(1, sizeof *r);

	if (r == NULL || (r->sink = conn_sink_new(c, id, false, true)) == NULL) {
		free(r);
		close(fd);
		conn_send_error(c, id, ERR_INTERNAL, "out of memory");
		return;
	}
	r->key = next_key++;
	r->conn = conn_id(c);
	r->task = task;
	r->request_id = json_incref(id);
	r->fd = fd;
	r->next = replays;
	replays = r;
	replay_step(r);
}

void
replay_stop_all(void)
{
	while (replays != NULL)
		replay_free(replays);
	if (ready_ev != NULL)
		event_free(ready_ev);
	ready_ev = NULL;
}
