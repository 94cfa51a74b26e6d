/*
 * sources.c: the daemon's side of the task sources ([source NAME], of type
 * redis-stream: source-redis.c). Each source gets a struct source_host
 * made of the daemon's parts:
 *  - room: the pool's idle workers plus its free queue slots
 *    (pool_snapshot), but never more than its workers and queue less the
 *    tasks whose done the loop has not yet processed (a worker is idle
 *    before its task's done reaches the source), less what the pool's
 *    other sources asked Redis for and have not yet received, so that two
 *    sources of one pool never read more than it takes at once;
 *  - submit: the entry's task checked as a submit's is (proto_read_task,
 *    the kind's parse in the pool's context, with no caller), submitted
 *    through the registry (tasks_submit) with the owner "redis:NAME" and a
 *    sink of this file's, whose done hands the done's text to the source.
 * A finished hook (tasks_hooks) kicks the sources of the task's pool: a
 * slot is free again. Sources removed or changed by a reload stop (drain)
 * and are freed once they have nothing left; at shutdown they all stop,
 * and tpd leaves only once their last results are written (or the exit
 * flush runs out: an entry whose result was not written stays pending and
 * Redis delivers it again).
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/blob.h"
#include "conf/conf.h"
#include "daemon.h"
#include "base/log.h"
#include "pool/pools.h"
#include "proto/proto.h"
#include "source-redis.h"
#include "sources.h"
#include "task/tasks.h"
#include "base/utf8.h"
#include "wire.h"

#define SOURCES_OWNER_PREFIX "redis:"

struct src {
	struct source_redis *sr;
	char *owner;            /* "redis:NAME" */
	bool retired;           /* removed or replaced by a reload: freed once idle */
	struct src *next;
};

/* A source's task's sink: its done goes to the source. */
struct src_sink {
	struct task_sink base;
	source_done_fn done;
	void *arg;
};

static struct src *src_list;
static struct event_base *src_base;
static bool hooks_added;

static void
sink_event(struct task_sink *sink, struct task *t, json_t *event, size_t weight)
{
	tasks_stream_taken(t->id, weight); /* never asked for: nothing held */
}

/* The done's JSON text is "{" and its shared body; the source copies what it keeps. */
static void
sink_done(struct task_sink *sink, struct task *t)
{
	struct src_sink *ss = (struct src_sink *)sink;
	const struct blob *b = t->done_text;
	char *text;

	if ((text = malloc(b->len + 2)) == NULL) {
		/* the entry stays pending: Redis delivers it again */
		log_warnx("task %llu: out of memory for its source's result",
		    (unsigned long long)t->id);
		return;
	}
	text[0] = '{';
	memcpy(text + 1, b->data, b->len);
	text[b->len + 1] = '\0';
	ss->done(ss->arg, t->final_state, text, b->len + 1);
	free(text);
}

static void
sink_release(struct task_sink *sink)
{
	free(sink);
}

static const struct task_sink_ops src_sink_ops = { sink_event, sink_done, sink_release };

static struct src *
src_of(void *ctx)
{
	return ctx;
}

static unsigned
host_room(void *ctx, const char *pool)
{
	struct src *me = src_of(ctx);
	struct pools_entry *e = pools_find(pool);
	struct pool_snapshot s;
	unsigned long held;
	unsigned room, others = 0;

	if (e == NULL)
		return 0;
	pool_snapshot(e->pool, &s);
	if (s.closed)
		return 0;
	room = s.idle + (s.capacity > s.queued ? s.capacity - s.queued : 0);
	/* a task the pool is done with, its done not yet on the loop, still holds its entry */
	held = e->outstanding;
	if (held >= (unsigned long)s.workers + s.capacity)
		return 0;
	if (room > s.workers + s.capacity - held)
		room = s.workers + s.capacity - (unsigned)held;
	for (struct src *o = src_list; o != NULL; o = o->next)
		if (o != me && strcmp(source_redis_conf(o->sr)->pool, pool) == 0)
			others += source_redis_asked(o->sr);
	return room > others ? room - others : 0;
}

static enum source_verdict
host_submit(void *ctx, const struct source_task *st, uint64_t *task_id, char **cause)
{
	struct src *me = src_of(ctx);
	const struct task_kind *kind;
	const struct conf_pool *cp;
	struct proto_task_spec ts;
	struct task_context tctx;
	struct task_options o;
	struct pools_entry *e;
	struct src_sink *sink;
	struct task *t;
	char *msg = NULL;

	if ((e = pools_find(st->pool)) == NULL)
		return SOURCE_CLOSED;   /* removed by a reload: another consumer runs it */
	if (proto_read_task(st->spec, &ts, &msg) == -1) {
		*cause = msg;
		return SOURCE_BAD;
	}
	if ((kind = task_kind_find(ts.kind)) == NULL) {
		char q[UTF8_QUOTE_SIZE];
		cause_set(cause, "unknown task kind \"%s\" (kinds: %s)", utf8_quote(q, ts.kind),
		    task_kind_names());
		return SOURCE_BAD;
	}
	cp = conf_pool_find(&daemon_state->conf, e->name);
	if (cp != NULL && cp->run_as == CONF_RUN_AS_CALLER) {
		cause_set(cause, "pool %s runs tasks as their caller (run_as = caller): a "
		    "stream's tasks have no caller", e->name);
		return SOURCE_BAD;
	}
	memset(&tctx, 0, sizeof tctx);
	tctx.pool_conf = cp;
	if ((t = task_parse(kind, st->spec, &tctx, &msg)) == NULL) {
		if (msg == NULL)
			cause_set(cause, "out of memory");
		else
			*cause = msg;
		return SOURCE_BAD;
	}
	if ((sink = calloc(1, sizeof *sink)) == NULL) {
		task_free(t);
		return SOURCE_FULL;     /* tried again later */
	}
	sink->base.ops = &src_sink_ops;
	sink->done = st->done;
	sink->arg = st->arg;
	memset(&o, 0, sizeof o);
	o.pool = e;
	o.sink = &sink->base;
	o.timeout_ms = ts.timeout_ms;
	o.queue_timeout_ms = st->queue_timeout_ms;
	o.owner = me->owner;
	o.kept_elsewhere = true;    /* Redis delivers it again: the journal leaves it out */
	o.label = st->label;
	o.spec = st->spec;         /* list's command */
	switch (tasks_submit(t, &o)) {
	case POOL_ACCEPTED:
		*task_id = t->id;
		return SOURCE_ACCEPTED;
	case POOL_REJECTED_FULL:
	case POOL_REJECTED_QUOTA:
		task_free(t);
		free(sink);
		return SOURCE_FULL;
	case POOL_REJECTED_CLOSED:
	default:
		task_free(t);
		free(sink);
		return SOURCE_CLOSED;
	}
}

/* A task ended: its pool has a slot again, for the sources that read into it. */
static void
finished_hook(struct task *t, void *arg)
{
	for (struct src *s = src_list; s != NULL; s = s->next)
		if (!s->retired && t->pool_name != NULL &&
		    strcmp(source_redis_conf(s->sr)->pool, t->pool_name) == 0)
			source_redis_kick(s->sr);
}

static struct src *
src_new(const struct conf_source *cs, char **cause)
{
	struct src *s;
	struct source_host host = { host_room, host_submit, NULL };
	size_t n = strlen(SOURCES_OWNER_PREFIX) + strlen(cs->name) + 1;

	if ((s = calloc(1, sizeof *s)) == NULL || (s->owner = malloc(n)) == NULL) {
		free(s);
		return cause_set(cause, "out of memory"), NULL;
	}
	snprintf(s->owner, n, "%s%s", SOURCES_OWNER_PREFIX, cs->name);
	host.ctx = s;
	if ((s->sr = source_redis_new(src_base, cs, &host, cause)) == NULL) {
		free(s->owner);
		free(s);
		return NULL;
	}
	s->next = src_list;
	src_list = s;
	return s;
}

static void
src_free(struct src *s)
{
	source_redis_free(s->sr);
	free(s->owner);
	free(s);
}

/* A retired source has nothing left: it goes. */
static void
src_idle_cb(struct source_redis *sr, void *arg)
{
	struct src *s = arg, **p;

	for (p = &src_list; *p != NULL; p = &(*p)->next)
		if (*p == s) {
			*p = s->next;
			break;
		}
	src_free(s);
}

static void
src_retire(struct src *s)
{
	s->retired = true;
	source_redis_stop(s->sr, false, src_idle_cb, s);
}

int
sources_start(struct event_base *base, const struct conf *c, char **cause)
{
	struct tasks_hooks h = { .finished = finished_hook };

	src_base = base;
	if (!hooks_added) {
		if (tasks_add_hooks(&h, cause) == -1)
			return -1;
		hooks_added = true;
	}
	for (size_t i = 0; i < c->nsources; i++)
		if (src_new(&c->sources[i], cause) == NULL)
			return -1;
	return 0;
}

void
sources_reload(const struct conf *nc)
{
	struct src *s, *next;
	char *cause = NULL;

	for (s = src_list; s != NULL; s = next) {
		const struct conf_source *old, *cs;

		next = s->next;
		if (s->retired)
			continue;
		old = source_redis_conf(s->sr);
		cs = conf_source_find((struct conf *)nc, old->name);
		if (cs != NULL && conf_source_equal(cs, old))
			continue;
		log_notice("reload: source %s %s: it stops reading, and goes once its running "
		    "tasks are acked", old->name, cs == NULL ? "removed" : "changed");
		src_retire(s);
	}
	for (size_t i = 0; i < nc->nsources; i++) {
		const struct conf_source *cs = &nc->sources[i];
		bool running = false;

		for (s = src_list; s != NULL && !running; s = s->next)
			running = !s->retired && strcmp(source_redis_conf(s->sr)->name,
			    cs->name) == 0;
		if (running)
			continue;
		if (src_new(cs, &cause) == NULL) {
			log_warnx("reload: source %s: %s", cs->name, cause ? cause :
			    "out of memory");
			free(cause);
			cause = NULL;
		} else
			log_notice("reload: source %s started", cs->name);
	}
}

void
sources_kick(void)
{
	for (struct src *s = src_list; s != NULL; s = s->next)
		if (!s->retired)
			source_redis_kick(s->sr);
}

void
sources_stop(bool now)
{
	for (struct src *s = src_list; s != NULL; s = s->next)
		source_redis_stop(s->sr, now, s->retired ? src_idle_cb : NULL,
		    s->retired ? s : NULL);
}

bool
sources_idle(void)
{
	for (struct src *s = src_list; s != NULL; s = s->next)
		if (!source_redis_idle(s->sr))
			return false;
	return true;
}

json_t *
sources_stats(void)
{
	json_t *a = json_array();

	for (struct src *s = src_list; a != NULL && s != NULL; s = s->next) {
		json_t *o = source_redis_stats(s->sr);
		if (o != NULL)
			json_array_append_new(a, o);
	}
	return a;
}

void
sources_each(void (*fn)(const struct source_figures *, void *arg), void *arg)
{
	struct source_figures f;

	for (struct src *s = src_list; s != NULL; s = s->next) {
		const char *name = source_redis_conf(s->sr)->name;
		bool successor = false;

		for (struct src *o = src_list; s->retired && o != NULL && !successor; o = o->next)
			successor = !o->retired && strcmp(source_redis_conf(o->sr)->name, name) == 0;
		if (successor)
			continue;
		source_redis_figures(s->sr, &f);
		fn(&f, arg);
	}
}

void
sources_describe(char *buf, size_t len)
{
	size_t off = strlen(buf);

	for (struct src *s = src_list; s != NULL && off + 3 < len; s = s->next) {
		char phrase[256];
		int n;

		source_redis_describe(s->sr, phrase, sizeof phrase);
		n = snprintf(buf + off, len - off, "; %s", phrase);
		if (n < 0 || (size_t)n >= len - off) {
			buf[off] = '\0';
			return;
		}
		off += (size_t)n;
	}
}

void
sources_free_all(void)
{
	struct src *s;

	while ((s = src_list) != NULL) {
		src_list = s->next;
		src_free(s);
	}
}
