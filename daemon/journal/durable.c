/*
 * durable.c: what the daemon keeps in its journal, and how it comes back.
 *
 * The registry's hooks (tasks.h) write the records: ACCEPTED in the
 * accepted hook (the task as submitted: the submit request as received, its
 * pool, owner, flags, queue deadline in wall time, on_lost), STARTED in the
 * started hook (its attempt), FINISHED in the finished hook (its done's
 * body as sent, with what retention needs), FORGOTTEN when retention drops
 * it. Each task keeps, in t->jdata, where its live records went (their
 * journal_ref), released as they die, so that compaction knows what is
 * dead, and its ACCEPTED payload while it is unfinished, for a recovery's
 * snapshot.
 *
 * The order "written before it is seen": every byte a client reads goes
 * through conn_write, which asks its gate, durable_prepare, first. That writes the
 * records appended since (one write: the group commit of what the loop did
 * in this pass; a pass with records also writes them at its end, output or
 * not; with journal_sync = commit the journal's sync thread makes that write,
 * with those of the passes made during its fdatasync) and says which batch the connection's new output waits for; the
 * connection sends only the bytes whose batch journal_seen has reached, and
 * keeps the rest until the journal moves on (seen_cb, the seen hook: tpd.c
 * gives conn.c durable_prepare and durable_seen as its output gate, and
 * conn_gate_seen as this file's seen hook).
 * With journal_sync = commit a batch is seen once the sync thread's
 * fdatasync covers it; the loop never waits for it: it goes on reading
 * requests and handling dones, which gather in the next batch, synced by
 * the next fdatasync as soon as the running one ends (one fdatasync, about
 * 280 us on this machine, for every record of a pass or more). interval
 * and none see a batch once it is written (and, rarely, once an id
 * reservation is synced).
 *
 * The built-in kinds (echo, sleep, spin, fail) have no effect outside tpd:
 * their run is seen only through their events, which wait like any output,
 * so their STARTED record goes with the group commit of the pass that sees
 * the start, before any of their events. It is built only then, when the
 * pass's records are written (durable_prepare: the deferred starts), and
 * only for a task still running: when the pass sees the end too (an echo),
 * only the FINISHED record, which says as much, is written. An exec task's
 * program has effects of its own: it runs only once its STARTED record may
 * be seen (task.c's start_barrier and start gate, released by
 * task_start_recorded from seen_cb; with journal_sync = commit already from
 * the sync thread once the fdatasync that covers the record returns:
 * durable_cb).
 *
 * A retry (tasks_set_retry_hook): when an attempt ends and another is
 * scheduled, a STARTED record of the next attempt with JF_RETRY_AT (its due
 * time) says it has not run yet. A delay needs no record of its own: the
 * ACCEPTED record's request has delay_ms, and its acceptance time is kept.
 *
 * Replay (durable_start): finished tasks are retained again (retention
 * applied again, by wall time), with their request (FINISHED's JF_SPEC:
 * status's spec and submit, their key); tasks never started are submitted
 * again, in id order, with their ids, their queued_ms counting from the
 * first accept, and their request's scheduling fields read as the submit
 * was: a delayed task is scheduled for its first due time, a waiting one
 * waits again for those of its dependencies not ended (a dependency has a
 * lower id, so it is back first), a task between attempts is scheduled for
 * its recorded time; a task that had started ends lost, or runs again with
 * its attempt + 1 when submitted with on_lost "rerun" or with lost in its
 * retry_on (after its retry delay); a task cancelled before it ran ends
 * cancelled; a task whose pool is gone ends lost. Ids go on after the
 * highest the journal knew.
 */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <pthread.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>
#include <jansson.h>

#include "base/blob.h"
#include "base/clock.h"
#include "conf/conf.h"
#include "daemon.h"
#include "durable.h"
#include "base/log.h"
#include "base/utf8.h"
#include "pool/pools.h"
#include "proto/proto.h"
#include "task/tasks.h"
#include "wire.h"

/* What a task's records are (t->jdata). */
struct jdata {
	struct journal_ref accepted, started, cancel, finished;
	struct jbuf payload;        /* its ACCEPTED payload, while unfinished */
	uint64_t finished_wall_us;
	uint64_t retry_at_us;       /* its STARTED record says: the next attempt is due then */
	uint64_t started_wall_us;   /* a deferred start's time, for its record */
	bool start_deferred;        /* on the deferred starts: its STARTED record is not built yet */
};

static struct journal *journal;
static enum journal_sync sync_mode;
static bool pending;                /* records appended since the last write */
static uint64_t appended;           /* records appended since start (stats) */
static uint64_t needless_starts;    /* of those, deferred starts that never needed a record */
static uint64_t wanted;             /* the batch of the last record appended */
static struct event *journal_ev, *tick_ev, *gate_ev;
static void (*seen_hook)(void);     /* durable_set_seen_hook */
static char status_line[512];
static char state_path[4096];

/*
 * Tasks whose worker waits for their STARTED record (start_barrier), until
 * the next gate. Released by the loop (seen_cb) or, with journal_sync =
 * commit, already by the sync thread (durable_cb), whichever comes first:
 * waiting_lock guards the list (taken before task.c's record lock, a leaf;
 * nothing else is called under it). A task leaves the list (release or
 * waiting_drop) before it can be freed, so the sync thread never touches a
 * freed one.
 */
static pthread_mutex_t waiting_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
	struct task *t;
	uint64_t batch;             /* of its STARTED record */
} *waiting;
static size_t nwaiting, waiting_cap;

/* A request is being handled; appended counted this many records when it began. */
static bool dispatching;
static uint64_t dispatch_appended;

/*
 * The deferred starts: built-in tasks whose STARTED record is appended at
 * the next write of the pass's records (durable_prepare), if they are still
 * running then. Each counts as appended when it is deferred, so that output
 * and answers wait for the batch it will be in exactly as for a record
 * appended at once. A task leaves the list when its record is appended or
 * when it ends (hook_finished), before it can be freed. Loop thread only.
 */
static struct task **deferred;
static size_t ndeferred, deferred_cap;

/* During the replay: the task being submitted again, with its records already on disk. */
static struct jdata *replaying;

const char *
durable_state_dir(const struct conf *c, char *buf, size_t len)
{
	const char *env, *home;
	struct passwd *pw;

	if (c->state_dir != NULL) {
		snprintf(buf, len, "%s", c->state_dir);
		return buf;
	}
	if ((env = getenv("STATE_DIRECTORY")) != NULL && *env != '\0') {
		/* systemd's StateDirectory=: a colon-separated list, the first is tpd's */
		snprintf(buf, len, "%.*s", (int)strcspn(env, ":"), env);
		return buf;
	}
	if (geteuid() == 0) {
		snprintf(buf, len, "/var/lib/tpd");
		return buf;
	}
	if ((env = getenv("XDG_STATE_HOME")) != NULL && *env == '/') {
		snprintf(buf, len, "%s/tpd", env);
		return buf;
	}
	home = getenv("HOME");
	if ((home == NULL || *home == '\0') && (pw = getpwuid(geteuid())) != NULL)
		home = pw->pw_dir;
	snprintf(buf, len, "%s/.local/state/tpd", home != NULL ? home : "");
	return buf;
}

/* Something went in batch: it is written at the end of this pass, and output from now on waits for it. */
static void
append_wanted(uint64_t batch)
{
	if (!pending)
		event_active(gate_ev, EV_TIMEOUT, 0);
	pending = true;
	wanted = batch;
}

static void
append(enum jrec_type type, uint64_t id, const struct jbuf *b, struct journal_ref *ref)
{
	struct journal_ref r;

	if (journal == NULL)
		return;
	appended++;
	r = journal_append(journal, type, id, b != NULL ? b->p : NULL,
	    b != NULL ? b->len : 0);
	append_wanted(r.batch);
	if (ref != NULL)
		*ref = r;
}

static uint64_t released_bytes;     /* of records released since start (make_room counts) */

static void
release(struct journal_ref *ref)
{
	if (ref->size != 0) {
		journal_release(journal, *ref);
		released_bytes += ref->size;
	}
	ref->size = 0;
}

/* ------------------------------------------------------------ payloads */

/* A string as a payload's text: absent when NULL or empty. */
static struct jtext
text_of(const char *s)
{
	struct jtext t = { NULL, 0 };

	if (s != NULL && *s != '\0') {
		t.p = s;
		t.len = (uint32_t)strlen(s);
	}
	return t;
}

/*
 * The task object of an ACCEPTED record's text: the submit request as it
 * was received, whose "task" it is (a record of an older build holds the
 * task object itself). NULL when it is neither.
 */
static json_t *
submitted_task(const struct jtext *text, json_error_t *jerr, int *priority)
{
	json_t *root, *task;

	*priority = 0;
	root = json_loadb(text->p, text->len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, jerr);
	if (root == NULL || json_object_get(root, FIELD_OP) == NULL)
		return root;
	/* the submit's own fields that are replayed with it (read as proto.c did) */
	if (json_is_integer(json_object_get(root, FIELD_PRIORITY)))
		*priority = (int)json_integer_value(json_object_get(root, FIELD_PRIORITY));
	task = json_incref(json_object_get(root, FIELD_TASK));
	json_decref(root);
	return task;
}

static void
accepted_payload(struct task *t, const char *text, size_t len, struct jbuf *b)
{
	struct jaccepted a;
	uint64_t now_mono = clock_now_us();

	memset(&a, 0, sizeof a);
	a.time_us = t->accepted_wall_us;
	if (t->job.queue_deadline_us != 0)
		a.queue_deadline_us = t->accepted_wall_us +
		    (t->job.queue_deadline_us > now_mono ? t->job.queue_deadline_us - now_mono : 0);
	a.flags = t->stream ? JFL_STREAM : 0;
	a.rerun = t->on_lost_rerun;
	a.have_gid = t->caller.have_creds;
	a.caller_gid = t->caller.gid;
	a.pool = text_of(t->pool_name);
	a.owner = text_of(t->owner);
	a.label = text_of(t->label);
	a.kind = text_of(t->kind->name);
	if (text != NULL) {
		a.spec.p = text;
		a.spec.len = (uint32_t)len;
	}
	jaccepted_encode(b, &a);
}

static void
finished_payload(struct task *t, uint64_t finished_wall_us, struct jbuf *b)
{
	struct jfinished f;

	memset(&f, 0, sizeof f);
	f.attempt = t->attempt;
	f.time_us = finished_wall_us;
	f.accepted_us = t->accepted_wall_us;
	f.queued_us = t->queued_us;
	f.run_us = t->run_us;
	f.state = text_of(t->final_state);
	f.pool = text_of(t->pool_name);
	f.owner = text_of(t->owner);
	f.label = text_of(t->label);
	f.kind = text_of(t->kind != NULL ? t->kind->name : NULL);
	f.done.p = t->done_text->data;
	f.done.len = (uint32_t)t->done_text->len;
	if (t->request != NULL) {
		f.spec.p = t->request;   /* status's spec and submit, the key, rerun */
		f.spec.len = (uint32_t)t->request_len;
	}
	jfinished_encode(b, &f);
}

/* ------------------------------------------------------------ the hooks */

static void
hook_accepted(struct task *t, void *arg)
{
	struct jdata *jd;

	if (replaying != NULL) {
		t->jdata = replaying;
		replaying = NULL;
		return;
	}
	if (t->kept_elsewhere) {
		/* no records: its source brings it back (tasks.h); its id is never given again */
		if (journal != NULL && journal_reserve_id(journal, t->id))
			append_wanted(journal_batch(journal));
		return;
	}
	if ((jd = calloc(1, sizeof *jd)) == NULL) {
		log_warnx("journal: out of memory for task %llu's records", (unsigned long long)t->id);
		return;
	}
	t->jdata = jd;
	accepted_payload(t, t->submit_text, t->submit_len, &jd->payload);
	append(JREC_ACCEPTED, t->id, &jd->payload, &jd->accepted);
}

/*
 * An array of n elements of size bytes in *cap's room, with room for one
 * more: arr itself, or its copy twice as large (64 the first time). Out of
 * memory, tpd stops naming what: what it holds cannot be dropped.
 */
static void *
room_for_one(void *arr, size_t n, size_t *cap, size_t size, const char *what)
{
	size_t c;

	if (n < *cap)
		return arr;
	c = *cap ? *cap * 2 : 64;
	if ((arr = realloc(arr, c * size)) == NULL)
		fatalx("journal: out of memory for %s", what);
	*cap = c;
	return arr;
}

/* t's STARTED record of its current attempt, started at wall_us, is appended now. */
static void
append_started(struct task *t, struct jdata *jd, uint64_t wall_us)
{
	struct jbuf b = { 0 };
	struct jstarted s = { t->attempt, wall_us, 0 };

	jstarted_encode(&b, &s);
	release(&jd->started);
	append(JREC_STARTED, t->id, &b, &jd->started);
	jbuf_free(&b);
}

/* The deferred starts' records go in the batch about to be written. */
static void
append_deferred(void)
{
	for (size_t i = 0; i < ndeferred; i++) {
		struct task *t = deferred[i];
		struct jdata *jd = t->jdata;

		jd->start_deferred = false;
		appended--;     /* counted when it was deferred */
		append_started(t, jd, jd->started_wall_us);
	}
	ndeferred = 0;
}

/*
 * A built-in kind started: its STARTED record waits for the pass's write
 * (the deferred starts), and counts as appended from now.
 */
static void
defer_start(struct task *t, struct jdata *jd)
{
	if (journal == NULL)
		return; /* stopped: nothing is written any more (as append) */
	release(&jd->started);
	if (!jd->start_deferred) {
		deferred = room_for_one(deferred, ndeferred, &deferred_cap, sizeof *deferred,
		    "the starts of a pass");
		deferred[ndeferred++] = t;
		jd->start_deferred = true;
		appended++;
	}
	jd->started_wall_us = clock_wall_us();
	append_wanted(journal_batch(journal));
}

/* t ended, retries or went into a snapshot: off the deferred starts, without a record. */
static void
undefer(struct task *t)
{
	struct jdata *jd = t->jdata;

	jd->start_deferred = false;
	for (size_t i = 0; i < ndeferred; i++)
		if (deferred[i] == t) {
			deferred[i] = deferred[--ndeferred];
			return;
		}
}

static void
hook_started(struct task *t, void *arg)
{
	struct jdata *jd = t->jdata;

	if (jd != NULL) {
		jd->retry_at_us = 0;
		if (t->start_barrier)
			append_started(t, jd, clock_wall_us());
		else
			defer_start(t, jd);
	}
	if (t->start_barrier) {
		pthread_mutex_lock(&waiting_lock);
		waiting = room_for_one(waiting, nwaiting, &waiting_cap, sizeof *waiting,
		    "the tasks waiting for their start");
		waiting[nwaiting].t = t;
		waiting[nwaiting].batch = journal_batch(journal);
		nwaiting++;
		pthread_mutex_unlock(&waiting_lock);
		pending = true;
	}
}

/*
 * t's attempt ended and the next (t->attempt) is due at t->due_wall_us: a
 * STARTED record of that attempt with JF_RETRY_AT says it has not run yet,
 * so that a restart schedules it again at that time.
 */
static void
hook_retry(struct task *t)
{
	struct jdata *jd = t->jdata;
	struct jbuf b = { 0 };
	struct jstarted s = { t->attempt, clock_wall_us(), t->due_wall_us };

	if (jd == NULL)
		return;
	if (jd->start_deferred) {
		/* the attempt that ended needs no record: this one says what comes next */
		undefer(t);
		needless_starts++;
	}
	jd->retry_at_us = t->due_wall_us;
	jstarted_encode(&b, &s);
	release(&jd->started);
	append(JREC_STARTED, t->id, &b, &jd->started);
	jbuf_free(&b);
}

/*
 * The STARTED records up to batch seen may be seen: their programs may run.
 * Loop or sync thread.
 */
static void
release_waiting(uint64_t seen)
{
	size_t i, k = 0;

	pthread_mutex_lock(&waiting_lock);
	for (i = 0; i < nwaiting; i++) {
		if (waiting[i].batch <= seen)
			task_start_recorded(waiting[i].t);
		else
			waiting[k++] = waiting[i];
	}
	nwaiting = k;
	pthread_mutex_unlock(&waiting_lock);
}

/*
 * Sync thread (journal.h's on_durable): the batches up to batch are on
 * disk. Their STARTED records are durable, which is all a program waits
 * for: its gate opens now, without a round trip through the loop. (The
 * loop's seen_cb releases the same ones again, finding them gone.)
 */
static void
durable_cb(void *arg, uint64_t batch)
{
	(void)arg;
	release_waiting(batch);
}

/*
 * t finished: a start of it still on the list (a cancelled run, which does
 * not wait for its release: task.c) leaves it, as t may be freed.
 */
static void
waiting_drop(const struct task *t)
{
	size_t i, k = 0;

	pthread_mutex_lock(&waiting_lock);
	for (i = 0; i < nwaiting; i++)
		if (waiting[i].t != t)
			waiting[k++] = waiting[i];
	nwaiting = k;
	pthread_mutex_unlock(&waiting_lock);
}

static void
hook_finished(struct task *t, void *arg)
{
	struct jdata *jd = t->jdata;
	struct jbuf b = { 0 };

	waiting_drop(t);
	if (jd == NULL)
		return;
	/*
	 * A built-in kind's start and end seen before the pass's records were
	 * written (an echo): it has no STARTED record at all, as its FINISHED
	 * goes in the batch the STARTED would have been in and says as much;
	 * nothing of the task was seen before that batch. (An exec task's
	 * STARTED is seen before its program runs: it is never deferred.)
	 */
	if (jd->start_deferred) {
		undefer(t);
		needless_starts++;
	}
	jd->finished_wall_us = clock_wall_us();
	finished_payload(t, jd->finished_wall_us, &b);
	append(JREC_FINISHED, t->id, &b, &jd->finished);
	jbuf_free(&b);
	release(&jd->accepted);
	release(&jd->started);
	release(&jd->cancel);
	jbuf_free(&jd->payload);
}

void
durable_cancel(struct task *t)
{
	struct jdata *jd = t->jdata;
	struct jbuf b = { 0 };

	if (journal == NULL || jd == NULL || t->finished || jd->cancel.size != 0)
		return;
	jcancel_encode(&b, clock_wall_us());
	append(JREC_CANCEL, t->id, &b, &jd->cancel);
	jbuf_free(&b);
}

static void
hook_forgotten(struct task *t, void *arg)
{
	struct jdata *jd = t->jdata;
	struct journal_ref r = { 0, 0 };

	if (jd == NULL)
		return;
	release(&jd->accepted);
	release(&jd->started);
	release(&jd->cancel);
	release(&jd->finished);
	jbuf_free(&jd->payload);
	free(jd);
	t->jdata = NULL;
	append(JREC_FORGOTTEN, t->id, NULL, &r);
	release(&r);            /* a forget is dead once written: compaction drops the task */
}

/* A recovery's snapshot: every live record of the registry. */
static void
snap_one(struct task *t, void *arg)
{
	struct journal_snap *snap = arg;
	struct jdata *jd = t->jdata;
	struct jbuf b = { 0 };
	struct jstarted s;
	bool started;

	if (jd == NULL)
		return;
	if (t->finished) {
		finished_payload(t, jd->finished_wall_us, &b);
		jd->finished = journal_snap_add(snap, JREC_FINISHED, t->id, b.p, b.len);
		jbuf_free(&b);
		return;
	}
	jd->accepted = journal_snap_add(snap, JREC_ACCEPTED, t->id, jd->payload.p,
	    jd->payload.len);
	started = jd->started.size != 0;
	if (jd->start_deferred) {
		/* the snapshot holds its start: nothing is left to append for it */
		undefer(t);
		needless_starts++;
		started = true;
	}
	if (started) {
		s.attempt = t->attempt;
		s.time_us = clock_wall_us();
		s.retry_at_us = jd->retry_at_us;
		jstarted_encode(&b, &s);
		jd->started = journal_snap_add(snap, JREC_STARTED, t->id, b.p, b.len);
		jbuf_free(&b);
	}
	if (jd->cancel.size != 0) {
		jcancel_encode(&b, clock_wall_us());
		jd->cancel = journal_snap_add(snap, JREC_CANCEL, t->id, b.p, b.len);
		jbuf_free(&b);
	}
}

static void
snapshot_cb(void *arg, struct journal_snap *snap)
{
	tasks_each(snap_one, snap);
}

/* ------------------------------------------------------------ the gate */

uint64_t
durable_prepare(void)
{
	if (journal == NULL)
		return 0;
	if (pending) {
		append_deferred();
		pending = false;
		journal_flush(journal);
	}
	return wanted;
}

uint64_t
durable_output_batch(bool answer)
{
	if (journal == NULL)
		return 0;
	if (answer && dispatching && appended == dispatch_appended)
		return 0;
	return journal_batch(journal);
}

void
durable_dispatch_begin(void)
{
	dispatching = true;
	dispatch_appended = appended;
}

void
durable_dispatch_end(void)
{
	dispatching = false;
}

uint64_t
durable_seen(void)
{
	return journal != NULL ? journal_seen(journal) : UINT64_MAX;
}

/* The journal's batches up to batch may be seen (journal.h's on_seen). */
static void
seen_cb(void *arg, uint64_t batch)
{
	release_waiting(batch);
	if (seen_hook != NULL)
		seen_hook();
}

void
durable_set_seen_hook(void (*fn)(void))
{
	seen_hook = fn;
}

static void
gate_cb(evutil_socket_t fd, short what, void *arg)
{
	durable_prepare();
}

static void
journal_cb(evutil_socket_t fd, short what, void *arg)
{
	journal_process(journal);
}

static void
tick_cb(evutil_socket_t fd, short what, void *arg)
{
	journal_tick(journal);
	durable_prepare();      /* a recovery's records */
}

/* ------------------------------------------------------------ the replay */

/* The wire's name for a state a record names (static text), or NULL. */
static const char *
state_name(const struct jtext *s)
{
	static const char *const names[] = { STATE_SUCCEEDED, STATE_FAILED, STATE_TIMED_OUT,
	    STATE_CANCELLED, STATE_EXPIRED, STATE_LOST };

	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
		if (strlen(names[i]) == s->len && memcmp(names[i], s->p, s->len) == 0)
			return names[i];
	return NULL;
}

static char *
text_dup(const struct jtext *s)
{
	char *p;

	if (s->p == NULL)
		return NULL;
	if ((p = malloc(s->len + 1)) == NULL)
		fatalx("journal replay: out of memory");
	memcpy(p, s->p, s->len);
	p[s->len] = '\0';
	return p;
}

/* The kind a record names, or NULL. */
static const struct task_kind *
kind_of(const struct jtext *s)
{
	const struct task_kind *k;
	char *name = text_dup(s);

	k = name != NULL ? task_kind_find(name) : NULL;
	free(name);
	return k;
}

static struct blob *
blob_of(const char *p, size_t len)
{
	struct blob *b = blob_new(len + 1);

	if (b == NULL)
		fatalx("journal replay: out of memory");
	memcpy(b->data, p, len);
	b->data[len] = '\0';
	b->len = len;
	return b;
}

/*
 * What the journal gives back is checked as strictly as what a client
 * sends: a text is UTF-8 without control characters (a done's text goes
 * out as one wire line: a newline in it would make two), and a label is no
 * longer than a client may give. NULL when it is fine, else what is wrong.
 */
static const char *
replay_text_bad(const struct jtext *s, size_t max)
{
	if (s->p == NULL)
		return NULL;
	if (max != 0 && s->len > max)
		return "longer than allowed";
	if (!utf8_text(s->p, s->len))
		return "not UTF-8";
	for (uint32_t i = 0; i < s->len; i++)
		if ((unsigned char)s->p[i] < 0x20 || s->p[i] == 0x7f)
			return "holds a control character";
	return NULL;
}

/* Refuses the start when a record's texts are not what tpd writes. */
static void
replay_check_texts(uint64_t id, const char *rec, const struct jtext *texts[],
    const char *const names[], const size_t max[], size_t n)
{
	const char *bad;

	for (size_t i = 0; i < n; i++)
		if ((bad = replay_text_bad(texts[i], max[i])) != NULL)
			fatalx("journal %s: damaged: task %llu's %s record: its %s %s; tpd never "
			    "writes that (move the journal away to start, losing what it held)",
			    state_path, (unsigned long long)id, rec, names[i], bad);
}

/*
 * The submit request a record kept, parsed (NULL: absent, not JSON, or a
 * bare task object of an older build).
 */
static json_t *
request_of(const struct jtext *text)
{
	json_t *root;

	if (text->p == NULL ||
	    (root = json_loadb(text->p, text->len, JSON_REJECT_DUPLICATES, NULL)) == NULL)
		return NULL;
	if (!json_is_object(root) || json_object_get(root, FIELD_OP) == NULL) {
		json_decref(root);
		return NULL;
	}
	return root;
}

/* t's request as a record kept it, with what comes of it: its key and its command. */
static void
restore_request(struct task *t, const struct jtext *text)
{
	json_t *root = request_of(text);
	const char *key;

	if (text->p == NULL)
		return;
	t->request = text_dup(text);
	t->request_len = text->len;
	if (root == NULL)
		return;
	if ((key = json_string_value(json_object_get(root, FIELD_KEY))) != NULL &&
	    (t->key = strdup(key)) == NULL)
		fatalx("journal replay: out of memory");
	t->command = tasks_command(json_object_get(root, FIELD_TASK));
	json_decref(root);
}

/* A retained result comes back. */
static void
replay_finished(struct journal *j, struct jread *rd, const struct jtask *jt)
{
	struct jfinished f;
	struct task *t;
	struct jdata *jd;
	const char *state;

	if (jstate_finished(rd->state, jt, &f) == -1 || (state = state_name(&f.state)) == NULL)
		fatalx("journal %s: task %llu's finished record cannot be read",
		    state_path, (unsigned long long)jt->id);
	{
		const struct jtext *texts[] = { &f.done, &f.pool, &f.owner, &f.label, &f.kind };
		static const char *const names[] = { "done", "pool", "owner", "label", "kind" };
		static const size_t max[] = { 0, 0, 0, WIRE_MAX_LABEL, 0 };

		replay_check_texts(jt->id, "finished", texts, names, max, 5);
	}
	if ((t = calloc(1, sizeof *t)) == NULL || (jd = calloc(1, sizeof *jd)) == NULL)
		fatalx("journal replay: out of memory");
	t->id = jt->id;
	t->pool_name = text_dup(&f.pool);
	t->owner = text_dup(&f.owner);
	t->label = text_dup(&f.label);
	if (t->pool_name == NULL)
		t->pool_name = strdup("");
	t->attempt = (uint32_t)f.attempt;
	t->accepted_wall_us = f.accepted_us;
	t->queued_us = f.queued_us;
	t->run_us = f.run_us;
	t->kind = kind_of(&f.kind);
	restore_request(t, &f.spec);
	jd->finished = journal_replay_ref(j, rd, &jt->finished);
	jd->finished_wall_us = f.time_us;
	t->jdata = jd;
	if (tasks_restore_finished(t, blob_of(f.done.p, f.done.len), state, f.time_us) == -1)
		fatalx("journal replay: out of memory");
}

/* A task that cannot run again ends now (lost, or cancelled), with its FINISHED record. */
static void
end_now(struct task *t, struct jdata *jd, const struct jaccepted *a, const char *state,
    uint64_t started_us,
    const char *fmt, ...) __attribute__((format(printf, 6, 7)));

/*
 * started_us: when its last start was recorded (0: never started). Its
 * queued_ms is the wait until that start, never the time until the restart.
 */
static void
end_now(struct task *t, struct jdata *jd, const struct jaccepted *a, const char *state,
    uint64_t started_us,
    const char *fmt, ...)
{
	struct pools_entry *e;
	struct proto_task v;
	char msg[512];
	va_list ap;
	uint64_t now = clock_wall_us();
	struct jbuf b = { 0 };

	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	t->final_state = state;
	if (started_us != 0)
		t->queued_us = started_us > a->time_us ? started_us - a->time_us : 0;
	else
		t->queued_us = now > a->time_us ? now - a->time_us : 0;
	if (strcmp(state, STATE_LOST) == 0 && t->pool_name != NULL &&
	    (e = pools_find(t->pool_name)) != NULL)
		pool_count_lost(e->pool);
	task_describe(t, &v);
	v.state = state;
	v.finished = true;
	v.queued_us = t->queued_us;
	v.error_code = state;       /* lost and cancelled: the code is the state's name */
	v.error_message = msg;
	t->done_text = proto_encode_done(&v);
	jd->finished_wall_us = now;
	finished_payload(t, now, &b);
	append(JREC_FINISHED, t->id, &b, &jd->finished);
	jbuf_free(&b);
	release(&jd->accepted);
	release(&jd->started);
	release(&jd->cancel);
	jbuf_free(&jd->payload);
	t->jdata = jd;
	log_notice("%s", msg);
	if (tasks_restore_finished(t, t->done_text, state, now) == -1)
		fatalx("journal replay: out of memory");
}

/* The delay before the attempt after attempt n, as tasks.c counts it (without its jitter). */
static uint64_t
retry_delay_us(const struct proto_submit *sub, uint32_t n)
{
	uint64_t d = sub->retry_delay_ms;

	for (uint32_t i = 1; i < n && d < sub->retry_delay_max_ms; i++)
		d *= 2;
	return (d > sub->retry_delay_max_ms ? sub->retry_delay_max_ms : d) * 1000;
}

/*
 * An unfinished task: queued again, scheduled again (its delay, its next
 * attempt), waiting again for its dependencies, run again, or ended.
 */
static void
replay_unfinished(struct journal *j, struct jread *rd, const struct jtask *jt)
{
	struct jaccepted a;
	struct jstarted st;
	struct jdata *jd;
	struct task *t = NULL, *bare;
	struct pools_entry *e;
	struct task_options o;
	struct task_context ctx;
	struct proto_task_spec ts;
	struct proto_submit sub;
	struct request req;
	const struct task_kind *kind;
	const unsigned char *rec;
	json_t *spec = NULL, *root = NULL;
	json_error_t jerr;
	char *pool, *owner, *label, *msg = NULL;
	uint64_t now = clock_wall_us(), due = 0;
	uint32_t attempt = jt->attempt + 1;
	int priority = 0;
	bool ran = (jt->flags & JT_STARTED) != 0;
	bool cancelled = (jt->flags & JT_CANCELLED) != 0;
	bool retry = false, held;
	struct jstarted started;
	uint64_t started_us = 0;

	if (jstate_accepted(rd->state, jt, &a) == -1)
		fatalx("journal %s: task %llu's accepted record cannot be read",
		    state_path, (unsigned long long)jt->id);
	if (ran && jstate_started(rd->state, jt, &started) == 0)
		started_us = started.time_us;
	{
		const struct jtext *texts[] = { &a.pool, &a.owner, &a.label, &a.kind };
		static const char *const names[] = { "pool", "owner", "label", "kind" };
		static const size_t max[] = { 0, 0, WIRE_MAX_LABEL, 0 };

		replay_check_texts(jt->id, "accepted", texts, names, max, 4);
	}
	if ((jd = calloc(1, sizeof *jd)) == NULL)
		fatalx("journal replay: out of memory");
	jd->accepted = journal_replay_ref(j, rd, &jt->accepted);
	jd->started = journal_replay_ref(j, rd, &jt->started);
	jd->cancel = journal_replay_ref(j, rd, &jt->cancel);
	rec = jstate_record(rd->state, &jt->accepted);
	jbuf_add(&jd->payload, rec + JFMT_REC_HEADER, jt->accepted.size - JFMT_REC_HEADER);
	pool = text_dup(&a.pool);
	owner = text_dup(&a.owner);
	label = text_dup(&a.label);
	e = pool != NULL ? pools_find(pool) : NULL;

	/* the submit's own fields (delay, after, retries, key): read as the submit was */
	memset(&sub, 0, sizeof sub);
	sub.retry_delay_ms = PROTO_RETRY_DELAY_MS;
	sub.retry_delay_max_ms = PROTO_RETRY_DELAY_MAX_MS;
	if ((root = request_of(&a.spec)) != NULL) {
		memset(&req, 0, sizeof req);
		req.root = root;
		req.op = OP_SUBMIT;
		if (proto_read_submit(&req, &sub, &msg) == -1) {
			free(msg);
			msg = NULL;
			memset(&sub, 0, sizeof sub);
		}
	}
	/* between two attempts: its STARTED record names the next and when it is due */
	if (ran && (rec = jstate_record(rd->state, &jt->started)) != NULL &&
	    jstarted_decode(rec + JFMT_REC_HEADER, jt->started.size - JFMT_REC_HEADER, &st,
	    &(const char *){ NULL }) == 0 && st.retry_at_us != 0) {
		ran = false;
		retry = true;
		attempt = (uint32_t)st.attempt;
		due = st.retry_at_us;
		jd->retry_at_us = st.retry_at_us;
	} else if (ran && !cancelled && sub.retries > 0 && (sub.retry_on & PROTO_RETRY_LOST) &&
	    jt->attempt <= sub.retries) {
		/* lost is in its retry_on: the next attempt, after its delay */
		ran = false;
		retry = true;
		due = now + retry_delay_us(&sub, jt->attempt);
		log_notice("task %llu was running when tpd stopped (attempt %u): lost is in its "
		    "retry_on, attempt %u follows", (unsigned long long)jt->id, jt->attempt, attempt);
	}
	held = retry || sub.delay_ms > 0 || sub.nafter > 0;

	if (e != NULL && (!ran || (a.rerun && !cancelled)) && !(cancelled && !ran) &&
	    a.spec.p != NULL && (spec = submitted_task(&a.spec, &jerr, &priority)) != NULL &&
	    proto_read_task(spec, &ts, &msg) == 0 &&
	    (kind = task_kind_find(ts.kind)) != NULL) {
		memset(&ctx, 0, sizeof ctx);
		ctx.pool_conf = conf_pool_find(&daemon_state->conf, e->name);
		if (owner != NULL && strncmp(owner, "uid:", 4) == 0) {
			uid_t uid = (uid_t)strtoul(owner + 4, NULL, 10);
			struct passwd *pw = getpwuid(uid);
			ctx.caller.via_unix = true;
			/*
			 * The gid the peer had (SO_PEERCRED), kept in the record: a
			 * caller the passwd database does not know runs with its uid
			 * and that gid, as at submit (doc/exec.md), not lost.
			 */
			if (a.have_gid && a.caller_gid <= UINT32_MAX) {
				ctx.caller.have_creds = true;
				ctx.caller.uid = uid;
				ctx.caller.gid = (gid_t)a.caller_gid;
			} else if (pw != NULL) {
				ctx.caller.have_creds = true;
				ctx.caller.uid = pw->pw_uid;
				ctx.caller.gid = pw->pw_gid;
			}
		}
		t = task_parse(kind, spec, &ctx, &msg);
	}
	if (t != NULL) {
		memset(&o, 0, sizeof o);
		o.pool = e;
		o.owner = owner;
		o.stream = (a.flags & JFL_STREAM) != 0;
		o.timeout_ms = ts.timeout_ms;
		o.on_lost_rerun = a.rerun;
		o.label = label;
		o.priority = priority;
		o.id = jt->id;
		o.attempt = attempt;
		o.accepted_wall_us = a.time_us;
		o.submit_text = a.spec.p;
		o.submit_len = a.spec.len;
		o.spec = spec;
		tasks_options_schedule(&o, &sub);
		if (retry) {
			/* its next attempt is due at its own time, its dependencies long met */
			o.delay_ms = 0;
			o.after = NULL;
			o.nafter = 0;
		}
		o.due_wall_us = due != 0 && due <= now ? now : due;
		if (held) {
			/* its queue time counts from when it enters the queue */
			o.queue_timeout_ms = sub.queue_timeout_ms;
		} else {
			o.queued_before_us = now > a.time_us ? now - a.time_us : 0;
			if (a.queue_deadline_us != 0)
				o.queue_timeout_ms = a.queue_deadline_us > now ?
				    (a.queue_deadline_us - now + 999) / 1000 : 1;
		}
		replaying = jd;
		if (tasks_submit(t, &o) == POOL_ACCEPTED) {
			if (ran)
				log_notice("task %llu was running when tpd stopped: it runs again "
				    "(on_lost rerun, attempt %u)", (unsigned long long)jt->id,
				    o.attempt);
			goto out;
		}
		replaying = NULL;
		task_free(t);
		msg = NULL;
		if ((bare = calloc(1, sizeof *bare)) == NULL)
			fatalx("journal replay: out of memory");
		bare->id = jt->id;
		bare->pool_name = pool;
		bare->owner = owner;
		bare->label = label;
		bare->kind = kind_of(&a.kind);
		bare->attempt = jt->attempt;
		bare->accepted_wall_us = a.time_us;
		restore_request(bare, &a.spec);
		pool = owner = label = NULL;
		end_now(bare, jd, &a, STATE_LOST, started_us, "task %llu could not be queued again at the "
		    "restart: the queue of pool %s is full", (unsigned long long)jt->id,
		    bare->pool_name);
		goto out;
	}
	if ((bare = calloc(1, sizeof *bare)) == NULL)
		fatalx("journal replay: out of memory");
	bare->id = jt->id;
	bare->pool_name = pool != NULL ? pool : strdup("");
	bare->owner = owner;
	bare->label = label;
	bare->kind = kind_of(&a.kind);
	bare->attempt = jt->attempt;
	bare->accepted_wall_us = a.time_us;
	restore_request(bare, &a.spec);
	pool = owner = label = NULL;
	if (e == NULL)
		end_now(bare, jd, &a, STATE_LOST, started_us, "task %llu's pool %s no longer exists",
		    (unsigned long long)jt->id, bare->pool_name);
	else if (cancelled && !ran)
		end_now(bare, jd, &a, STATE_CANCELLED, started_us, "task %llu was cancelled before it "
		    "started", (unsigned long long)jt->id);
	else if (ran && cancelled)
		end_now(bare, jd, &a, STATE_LOST, started_us, "task %llu was running, and asked to cancel, "
		    "when tpd stopped (attempt %u); it is not run again", (unsigned long long)
		    jt->id, jt->attempt);
	else if (ran)
		end_now(bare, jd, &a, STATE_LOST, started_us, "task %llu was running when tpd stopped "
		    "(attempt %u); it is not run again (on_lost is lost)", (unsigned long long)
		    jt->id, jt->attempt);
	else
		end_now(bare, jd, &a, STATE_LOST, started_us, "task %llu cannot be read back from the "
		    "journal: %s", (unsigned long long)jt->id, msg != NULL ? msg :
		    "its task object is not valid");
out:
	free(msg);
	free(pool);
	free(owner);
	free(label);
	json_decref(spec);
	json_decref(root);
}

static struct jread *rd;            /* from durable_open to durable_start */

void
durable_open(const struct conf *c)
{
	struct journal_settings s;
	char dir[4096], *cause = NULL;

	if (!c->journal)
		return;
	memset(&s, 0, sizeof s);
	s.dir = durable_state_dir(c, dir, sizeof dir);
	s.sync = (enum journal_sync)c->journal_sync;
	s.sync_interval_us = c->journal_sync_interval_ms * 1000;
	s.max_bytes = c->journal_max_bytes;
	s.segment_bytes = journal_segment_bytes(c->journal_max_bytes);
	if (c->journal_segment_size != 0 && c->journal_segment_size < s.segment_bytes)
		s.segment_bytes = c->journal_segment_size & ~(uint64_t)4095;
	s.snapshot = snapshot_cb;
	s.on_seen = seen_cb;
	if (s.sync == JOURNAL_SYNC_COMMIT)
		s.on_durable = durable_cb;
	sync_mode = s.sync;
	snprintf(state_path, sizeof state_path, "%s", dir);
	if (journal_open(&s, &journal, &rd, &cause) == -1)
		fatalx("%s", cause != NULL ? cause : "journal: out of memory");
}

void
durable_start(const struct conf *c, struct event_base *base)
{
	static const struct tasks_hooks hooks = { hook_accepted, hook_started, hook_finished,
	    hook_forgotten, NULL };
	struct jtask *const *all;
	struct timeval second = { 1, 0 };
	char *cause = NULL;
	size_t n, requeued = 0, restored = 0;
	uint64_t t0 = clock_now_us();

	if (journal == NULL)
		return;
	if ((gate_ev = event_new(base, -1, 0, gate_cb, NULL)) == NULL)
		fatalx("journal: cannot make its event");
	if (tasks_add_hooks(&hooks, &cause) == -1)
		fatalx("%s", cause);
	tasks_set_retry_hook(hook_retry);
	tasks_set_start_barrier(true);
	tasks_set_next_id(jstate_next_id(rd->state));
	all = jstate_tasks(rd->state, &n);
	for (size_t i = 0; i < n; i++) {
		if (all[i]->flags & JT_FINISHED) {
			replay_finished(journal, rd, all[i]);
			restored++;
		} else {
			replay_unfinished(journal, rd, all[i]);
			requeued++;
		}
	}
	tasks_set_next_id(jstate_next_id(rd->state));
	journal_replay_done(journal, rd);
	rd = NULL;
	if (journal_begin(journal, &cause) == -1)
		fatalx("%s", cause != NULL ? cause : "journal: out of memory");
	durable_prepare();
	log_info("journal %s (sync %s): %zu finished tasks and %zu unfinished read back in "
	    "%.3f ms; next task id %llu", state_path, journal_sync_name(sync_mode), restored, requeued,
	    (clock_now_us() - t0) / 1000.0, (unsigned long long)tasks_next_id());
	journal_ev = event_new(base, journal_event_fd(journal), EV_READ | EV_PERSIST, journal_cb,
	    NULL);
	tick_ev = event_new(base, -1, EV_PERSIST, tick_cb, NULL);
	if (journal_ev == NULL || tick_ev == NULL || event_add(journal_ev, NULL) == -1 ||
	    evtimer_add(tick_ev, &second) == -1)
		fatalx("journal: cannot watch its events");
}

/* At stop: what a task kept of its records goes (the registry frees the task after). */
static void
free_jdata(struct task *t, void *arg)
{
	struct jdata *jd = t->jdata;

	if (jd == NULL)
		return;
	jbuf_free(&jd->payload);
	free(jd);
	t->jdata = NULL;
}

void
durable_stop(void)
{
	if (journal == NULL)
		return;
	event_free(journal_ev);
	event_free(tick_ev);
	journal_ev = tick_ev = NULL;
	append_deferred();      /* a task still running keeps its start across the restart */
	journal_close(journal, tasks_next_id());
	journal = NULL;
	tasks_each(free_jdata, NULL);
	release_waiting(UINT64_MAX);
	event_free(gate_ev);
	gate_ev = NULL;
	pthread_mutex_lock(&waiting_lock);
	free(waiting);
	waiting = NULL;
	waiting_cap = 0;
	pthread_mutex_unlock(&waiting_lock);
	free(deferred);
	deferred = NULL;
	ndeferred = deferred_cap = 0;
}

bool
durable_on(void)
{
	return journal != NULL;
}

void
durable_make_room(void)
{
	static uint64_t logged_us;
	uint64_t want, before = released_bytes, now = clock_now_us();
	size_t n = 0;

	if (journal == NULL || !journal_at_limit(journal))
		return;
	/*
	 * The oldest retained results go first, as retention would drop them:
	 * half a segment of their records dies, which compaction (on its
	 * thread) then wins back, rather than every submit being refused while
	 * finished results fill the journal.
	 */
	want = journal_segment_size(journal) / 2;
	while (released_bytes - before < want && tasks_forget_oldest())
		n++;
	if (n == 0)
		return;
	durable_prepare();              /* the FORGOTTEN records: dead once written */
	journal_compact_soon(journal);
	if (logged_us == 0 || now - logged_us >= 10 * 1000000ull) {
		log_warnx("journal %s is at journal_max_bytes: the %zu oldest retained results "
		    "forgotten to make room (raise journal_max_bytes, or lower result_retain_bytes)",
		    state_path, n);
		logged_us = now;
	}
}

void
durable_refused(const char *why)
{
	static uint64_t last_us, count;
	uint64_t now = clock_now_us();

	count++;
	if (last_us != 0 && now - last_us < 10 * 1000000ull)
		return;
	log_warnx("%llu submit%s refused (storage)%s: %s", (unsigned long long)count,
	    count == 1 ? "" : "s", last_us != 0 ? " in the last 10 s" : "", why);
	last_us = now;
	count = 0;
}

bool
durable_writable(const char **why)
{
	return journal == NULL || journal_writable(journal, why);
}

bool
durable_stats(struct journal_stats *out)
{
	if (journal == NULL)
		return false;
	journal_stats(journal, out);
	out->appended = appended - needless_starts;
	pthread_mutex_lock(&waiting_lock);
	out->held_starts = nwaiting;
	pthread_mutex_unlock(&waiting_lock);
	out->segment_bytes = journal_segment_size(journal);
	return true;
}

json_t *
durable_stats_json(void)
{
	struct journal_stats js;

	if (!durable_stats(&js))
		return json_pack("{s:s}", "state", "off");
	return json_pack("{s:s, s:s, s:s*, s:s, s:b, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, "
	    "s:f, s:f, s:I, s:f, s:I, s:I}",
	    "state", js.state, "path", js.path, "error", js.error, "sync", js.sync_mode,
	    "at_limit", js.at_limit, "bytes", (json_int_t)js.bytes,
	    "max_bytes", (json_int_t)js.max_bytes,
	    "segment_bytes", (json_int_t)js.segment_bytes,
	    "segments", (json_int_t)js.segments, "records", (json_int_t)js.records,
	    "records_written", (json_int_t)js.appended, "batches", (json_int_t)js.batches,
	    "syncs", (json_int_t)js.syncs, "last_sync_ms", js.last_sync_us / 1000.0,
	    "max_sync_ms", js.max_sync_us / 1000.0, "compactions", (json_int_t)js.compactions,
	    "last_compaction_ms", js.last_compaction_us / 1000.0,
	    "recoveries", (json_int_t)js.recoveries, "held_starts", (json_int_t)js.held_starts);
}

const char *
durable_status(void)
{
	const char *why;

	if (journal == NULL || journal_writable(journal, &why))
		return NULL;
	snprintf(status_line, sizeof status_line, "journal: %s", why);
	return status_line;
}
