/*
 * admission.c: a submit into its pool's queue, answered at once or held
 * until the queue has room (admission.h says the rules).
 *
 * Each pool with held submits has a FIFO of them here. A held submit keeps
 * everything the submit needs to be tried again (the parsed task, its
 * options with copies of their strings, the request's id, its sink) and a
 * timer for its deadline; it counts as a done owed to its connection
 * (conn_done_owed), so a client that ends its input still gets the answer.
 * The pool's room hook tries the oldest first and stops at the first
 * refusal for room, arming the pool's notification again (pools.h). A
 * connection's close drops its held submits (conn.c's close hook); a count
 * per connection spares the walk for the connections that hold none.
 */
#include "config.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "admission.h"
#include "base/idmap.h"
#include "base/log.h"
#include "base/utf8.h"
#include "conf/conf.h"
#include "daemon.h"
#include "wire.h"

struct hpool;

struct held {
	struct held *next, *prev;   /* its pool's, oldest first */
	struct hpool *hp;
	uint64_t conn_id;
	json_t *req_id;
	struct task *t;
	struct task_options o;      /* its strings point at the copies below */
	char *owner, *label, *line, *key;
	uint64_t *after;            /* o.after's copy */
	json_t *spec;               /* o.spec, held (a reference) */
	struct event *timer;        /* its deadline */
	uint64_t timeout_ms;
};

struct hpool {
	struct pools_entry *e;
	struct held *head, *tail;
	unsigned n;
};

static struct hpool hpools[CONF_MAX_POOLS * 2];
static size_t nhpools;
static struct idmap *by_conn;   /* connection id -> how many it holds (as a pointer) */

static struct hpool *
hpool_find(const struct pools_entry *e)
{
	for (size_t i = 0; i < nhpools; i++)
		if (hpools[i].e == e)
			return &hpools[i];
	return NULL;
}

static struct hpool *
hpool_get(struct pools_entry *e)
{
	struct hpool *hp = hpool_find(e);

	if (hp == NULL && nhpools < sizeof hpools / sizeof hpools[0]) {
		hp = &hpools[nhpools++];
		memset(hp, 0, sizeof *hp);
		hp->e = e;
	}
	return hp;
}

unsigned
admission_held(const struct pools_entry *e)
{
	return e->held;
}

static void
conn_count_add(uint64_t id, int delta)
{
	uintptr_t n = (uintptr_t)idmap_get(by_conn, id);

	n = (uintptr_t)((intptr_t)n + delta);
	if (n == 0)
		idmap_remove(by_conn, id);
	else if (idmap_put(by_conn, id, (void *)n) == -1)
		log_warnx("admission: out of memory counting connection %llu's held submits",
		    (unsigned long long)id);
}


/*
 * Answers the verdict v of t's submit on c (NULL: gone): the accepted
 * event, or a rejection, after which t and the sink are let go.
 */
static void
answer(struct conn *c, json_t *id, struct task *t, const struct task_options *o,
    enum pool_verdict v)
{
	const struct conf_pool *cp;
	struct proto_task view;
	struct proto_text pt;

	if (v == POOL_ACCEPTED) {
		/* the answer comes before the done: the done is handled on a later loop turn */
		if (c != NULL) {
			tasks_view(t, &view);
			proto_encode_accepted(&pt, id, &view);
			conn_send_text(c, &pt);
		}
		return;
	}
	task_free(t);
	if (c != NULL) {
		switch (v) {
		case POOL_REJECTED_CLOSED:
			conn_send_rejected(c, id, ERR_CLOSED, "pool %s is closed: tpd is shutting down",
			    o->pool->name);
			break;
		case POOL_REJECTED_QUOTA:
			cp = conf_pool_find(&daemon_state->conf, o->pool->name);
			conn_send_rejected(c, id, ERR_QUOTA, "pool %s: its owner %s already has %u "
			    "tasks queued, its max_queued_per_owner", o->pool->name,
			    o->owner != NULL ? o->owner : "(none)",
			    cp != NULL ? cp->max_queued_per_owner : 0);
			break;
		default:
			conn_send_rejected(c, id, ERR_QUEUE_FULL, "pool %s is full: every worker is busy "
			    "and its queue is at capacity", o->pool->name);
			break;
		}
	}
	if (o->sink != NULL)
		o->sink->ops->release(o->sink);   /* after the answer: c may be closing */
}

/* Takes h off its pool and frees what it holds but its task and sink. */
static void
held_unlink(struct held *h)
{
	struct hpool *hp = h->hp;

	if (h->prev != NULL)
		h->prev->next = h->next;
	else
		hp->head = h->next;
	if (h->next != NULL)
		h->next->prev = h->prev;
	else
		hp->tail = h->prev;
	hp->n--;
	hp->e->held--;
	conn_count_add(h->conn_id, -1);
	if (h->timer != NULL)
		event_free(h->timer);
	if (hp->n == 0) {
		/* the last one: the slot goes, so a removed pool's entry is never kept here */
		*hp = hpools[--nhpools];
	}
}

static void
held_free(struct held *h)
{
	json_decref(h->req_id);
	free(h->owner);
	free(h->label);
	free(h->line);
	free(h->key);
	free(h->after);
	json_decref(h->spec);
	free(h);
}

/* h leaves with its answer: the verdict v of its last try (or the rejection given). */
static void
held_end(struct held *h, enum pool_verdict v)
{
	struct conn *c = conn_find(h->conn_id);

	held_unlink(h);
	answer(c, h->req_id, h->t, &h->o, v);
	if (c != NULL)
		conn_done_settled(c, false);
	held_free(h);
}

static void
held_timeout(evutil_socket_t fd, short what, void *arg)
{
	struct held *h = arg;
	struct conn *c = conn_find(h->conn_id);
	const char *pool = h->o.pool->name;

	held_unlink(h);
	task_free(h->t);
	pool_count_rejected(h->o.pool->pool, POOL_REJECTED_FULL);
	if (c != NULL)
		conn_send_rejected(c, h->req_id, ERR_QUEUE_FULL, "pool %s is full: held %llu ms "
		    "(admission_timeout) and no room came in its queue", pool,
		    (unsigned long long)h->timeout_ms);
	if (h->o.sink != NULL)
		h->o.sink->ops->release(h->o.sink);
	if (c != NULL)
		conn_done_settled(c, false);
	held_free(h);
}

/* The pool of e has room: its held submits go in, oldest first, until it refuses. */
static void
admission_room(struct pools_entry *e, void *arg)
{
	struct hpool *hp;
	struct held *h;
	enum pool_verdict v;

	while ((hp = hpool_find(e)) != NULL && (h = hp->head) != NULL) {
		v = tasks_submit(h->t, &h->o);
		if (v == POOL_REJECTED_FULL) {
			pools_want_room(e);
			return;
		}
		held_end(h, v);
	}
}

/*
 * Nothing reaches the connection numbered id any more (closed, or its peer
 * gone): its held submits go, unanswered, never run; what they were owed
 * is settled while the connection is still there.
 */
static void
admission_conn_closed(uint64_t id)
{
	struct conn *c;

	if (by_conn == NULL || idmap_get(by_conn, id) == NULL)
		return;
	c = conn_find(id);
	for (size_t i = 0; i < nhpools;) {
		struct pools_entry *pe = hpools[i].e;
		struct held *h, *next;
		for (h = hpools[i].head; h != NULL; h = next) {
			next = h->next;         /* NULL when h is the pool's last: its slot goes */
			if (h->conn_id != id)
				continue;
			held_unlink(h);
			task_free(h->t);
			if (h->o.sink != NULL)
				h->o.sink->ops->release(h->o.sink);
			if (c != NULL)
				conn_done_settled(c, false);
			held_free(h);
		}
		if (i < nhpools && hpools[i].e == pe)
			i++;                    /* else the slot holds another pool now */
	}
}

/* Holds t's submit; false when it cannot be held (max_held, memory: then it is not). */
static bool
hold(struct conn *c, struct request *req, struct task *t, const struct task_options *o,
    uint64_t timeout_ms, const char **why)
{
	const struct conf_pool *cp = conf_pool_find(&daemon_state->conf, o->pool->name);
	unsigned max_held = cp != NULL ? cp->max_held : 0;
	struct hpool *hp = hpool_find(o->pool);
	struct timeval tv;
	struct held *h;

	*why = "max_held";
	if ((hp != NULL ? hp->n : 0) >= max_held)
		return false;
	*why = "memory";
	if ((hp = hpool_get(o->pool)) == NULL)
		return false;
	if ((h = calloc(1, sizeof *h)) == NULL) {
		if (hp->n == 0)
			*hp = hpools[--nhpools];        /* no empty slot stays */
		return false;
	}
	h->o = *o;
	if ((o->owner != NULL && (h->owner = strdup(o->owner)) == NULL) ||
	    (o->label != NULL && (h->label = strdup(o->label)) == NULL) ||
	    (o->submit_text != NULL && (h->line = malloc(o->submit_len + 1)) == NULL) ||
	    (o->key != NULL && (h->key = strdup(o->key)) == NULL) ||
	    (o->nafter > 0 && (h->after = calloc(o->nafter, sizeof *h->after)) == NULL) ||
	    (h->timer = evtimer_new(daemon_state->base, held_timeout, h)) == NULL) {
		held_free(h);
		if (hp->n == 0)
			*hp = hpools[--nhpools];
		return false;
	}
	if (h->line != NULL) {
		memcpy(h->line, o->submit_text, o->submit_len);
		h->line[o->submit_len] = '\0';
	}
	h->o.owner = h->owner;
	h->o.label = h->label;
	h->o.submit_text = h->line;
	/* the scheduling fields borrow from the request, which goes after this pass */
	h->o.key = h->key;
	if (h->after != NULL)
		memcpy(h->after, o->after, o->nafter * sizeof *h->after);
	h->o.after = h->after;
	h->o.spec = h->spec = json_incref(o->spec);
	h->t = t;
	h->hp = hp;
	h->conn_id = conn_id(c);
	h->req_id = json_incref(req->id);
	h->timeout_ms = timeout_ms;
	tv.tv_sec = (time_t)(timeout_ms / 1000);
	tv.tv_usec = (suseconds_t)(timeout_ms % 1000) * 1000;
	evtimer_add(h->timer, &tv);
	h->prev = hp->tail;
	if (hp->tail != NULL)
		hp->tail->next = h;
	else
		hp->head = h;
	hp->tail = h;
	hp->n++;
	hp->e->held++;
	conn_count_add(h->conn_id, 1);
	conn_done_owed(c, false);   /* answered later: the connection stays for it */
	pools_want_room(o->pool);
	return true;
}

void
admission_submit(struct conn *c, struct request *req, struct task *t,
    const struct task_options *opts, bool wait, uint64_t timeout_ms)
{
	const struct conf_pool *cp = conf_pool_find(&daemon_state->conf, opts->pool->name);
	struct task_options mine = *opts, *o = &mine;
	uint64_t pool_timeout = cp != NULL ? cp->admission_timeout_ms : 30000;
	const struct hpool *hp = hpool_find(o->pool);
	enum pool_verdict v = POOL_REJECTED_FULL;
	const char *why;

	/* a refusal for room that holds the submit is not a rejection (pool.h) */
	mine.may_wait = wait;
	/* held submits go in in the order they came: none jumps ahead of one held */
	if (!wait || hp == NULL || hp->n == 0)
		v = tasks_submit(t, o);
	else if (pool_over_quota(o->pool->pool, tasks_owner_number(o->owner)))
		v = POOL_REJECTED_QUOTA;        /* at once, also behind held submits */
	if (v == POOL_REJECTED_FULL && wait) {
		if (timeout_ms == 0 || timeout_ms > pool_timeout)
			timeout_ms = pool_timeout;
		if (hold(c, req, t, o, timeout_ms, &why))
			return;
		pool_count_rejected(o->pool->pool, POOL_REJECTED_FULL);
		if (strcmp(why, "max_held") == 0) {
			task_free(t);
			conn_send_rejected(c, req->id, ERR_QUEUE_FULL, "pool %s is full and already "
			    "holds %u submits waiting for room, its max_held", o->pool->name,
			    cp != NULL ? cp->max_held : 0);
			if (o->sink != NULL)
				o->sink->ops->release(o->sink);
			return;
		}
	}
	answer(c, req->id, t, o, v);
}

void
admission_reject_all(struct pools_entry *e)
{
	struct hpool *hp;

	/* a pool's slot goes with its last held submit */
	while ((hp = e != NULL ? hpool_find(e) : nhpools > 0 ? &hpools[0] : NULL) != NULL &&
	    hp->head != NULL) {
		pool_count_rejected(hp->e->pool, POOL_REJECTED_CLOSED);
		held_end(hp->head, POOL_REJECTED_CLOSED);
	}
}

int
admission_init(char **cause)
{
	if ((by_conn = idmap_new()) == NULL)
		return cause_set(cause, "out of memory");
	if (pools_add_room_hook(admission_room, NULL) == -1)
		return cause_set(cause, "too many room hooks");
	conn_set_close_hook(admission_conn_closed);
	return 0;
}

void
admission_free(void)
{
	admission_reject_all(NULL);
	conn_set_close_hook(NULL);
	idmap_free(by_conn);
	by_conn = NULL;
}
