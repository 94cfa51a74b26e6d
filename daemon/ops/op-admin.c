/* op-admin.c: stats, and the admin ops resize, pause, resume and shutdown. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "net/auth.h"
#include "exec/cgroup.h"
#include "exec/spool.h"
#include "net/conn.h"
#include "daemon.h"
#include "journal/durable.h"
#include "base/log.h"
#include "admission.h"
#include "ops.h"
#include "pool/pools.h"
#include "proto/proto.h"
#include "shutdown.h"
#include "source/sources.h"
#include "task/tasks.h"
#include "base/utf8.h"
#include "wire.h"

/* A pool's admission key as stats names it. */
static const char *
admission_name(const struct pools_entry *e)
{
	const struct conf_pool *cp = conf_pool_find(&daemon_state->conf, e->name);

	switch (cp != NULL ? cp->admission : CONF_ADMISSION_REJECT) {
	case CONF_ADMISSION_WAIT: return ADMISSION_WAIT;
	case CONF_ADMISSION_DROP_OLDEST: return ADMISSION_DROP_OLDEST;
	default: return ADMISSION_REJECT;
	}
}

/* The phase as stats names it. */
static const char *
phase_name(enum daemon_phase phase)
{
	switch (phase) {
	case DAEMON_RUNNING:
		return PHASE_RUNNING;
	case DAEMON_DRAINING:
		return PHASE_DRAINING;
	default:
		return PHASE_STOPPING;
	}
}

/* Stats' "loop" object: the loop's pauses of 1 ms or more (obs/loop-watch.c measures them). */
static json_t *
stats_loop(const struct pauses *p)
{
	json_t *o = json_object(), *le = json_object();

	if (o == NULL || le == NULL) {
		json_decref(o);
		json_decref(le);
		return NULL;
	}
	for (size_t i = 0; i < PAUSES_NBOUNDS; i++) {
		char ms[16];

		snprintf(ms, sizeof ms, "%g", (double)pauses_bound_us[i] / 1000.0);
		json_object_set_new(le, ms, json_integer((json_int_t)p->le[i]));
	}
	json_object_set_new(o, "longest_pause_ms", json_real((double)p->max_us / 1000.0));
	json_object_set_new(o, "pauses", json_integer((json_int_t)p->count));
	json_object_set_new(o, "pause_sum_ms", json_real((double)p->sum_us / 1000.0));
	json_object_set_new(o, "pauses_le_ms", le);
	return o;
}

/* Stats' "spool" object: exec tasks' output files, or NULL when spooling is off. */
static json_t *
stats_spool(void)
{
	struct spool_figures f;

	if (!spool_figures(&f))
		return NULL;
	return json_pack("{sI sI sI sI}", "bytes", (json_int_t)f.bytes,
	    "max_bytes", (json_int_t)f.max_bytes, "files", (json_int_t)f.files,
	    "dropped", (json_int_t)f.dropped);
}

void
op_stats(struct conn *c, struct request *req)
{
	struct daemon *d = daemon_state;
	struct proto_pool_stats pools[CONF_MAX_POOLS * 2];
	struct pool_snapshot snaps[CONF_MAX_POOLS * 2];
	struct proto_stats st;
	struct proto_text pt;
	char *msg = NULL;

	if (proto_read_plain(req, &msg) == -1) {
		ops_bad_request(c, req, msg);
		return;
	}
	memset(&st, 0, sizeof st);
	for (size_t i = 0; i < pools_count() && i < sizeof pools / sizeof pools[0]; i++) {
		struct pools_entry *e = pools_at(i);
		pools[i].name = e->name;
		pools[i].removed = e->removed;
		pool_snapshot(e->pool, &snaps[i]);
		snaps[i].cancelled += e->ended_unqueued; /* before they entered the queue */
		pools[i].s = &snaps[i];
		pools[i].scheduled = e->scheduled;
		pools[i].waiting = e->waiting;
		pools[i].retried = e->retried;
		pools[i].skipped = e->skipped;
		pools[i].admission = admission_name(e);
		pools[i].held = admission_held(e);
		st.npools++;
	}
	st.pools = pools;
	st.connections = conn_count();
	st.uptime_ms = (clock_now_us() - d->started_us) / 1000;
	st.tasks_outstanding = tasks_outstanding();
	st.tasks_retained = tasks_retained();
	st.tasks_retained_bytes = tasks_retained_bytes();
	st.results_forgotten = tasks_results_forgotten();
	st.version = PACKAGE_VERSION;
	st.containment = cgroup_containment();
	st.phase = phase_name(shutdown_phase());
	st.journal = durable_stats_json();
	if (st.journal != NULL && durable_on()) {
		/* what waits for the journal: the output part is the connections' */
		size_t nheld;
		uint64_t held;

		conn_gate_held(&nheld, &held);
		json_object_set_new(st.journal, "held_connections", json_integer((json_int_t)nheld));
		json_object_set_new(st.journal, "held_bytes", json_integer((json_int_t)held));
	}
	st.tcp_auth = auth_tcp_mode();
	st.nwarnings = auth_warnings(&st.warnings);
	st.sources = sources_stats();
	st.loop = stats_loop(&d->loop_pauses);
	st.spool = stats_spool();
	proto_encode_stats(&pt, req->id, &st);
	json_decref(st.journal);
	json_decref(st.loop);
	json_decref(st.spool);
	json_decref(st.sources);
	conn_send_text(c, &pt);
}

void
op_resize(struct conn *c, struct request *req)
{
	struct proto_resize rs;
	struct proto_text pt;
	struct pools_entry *e;
	struct pool_snapshot s;
	int64_t min, max;
	char *msg = NULL;

	if (proto_read_resize(req, &rs, &msg) == -1) {
		ops_bad_request(c, req, msg);
		return;
	}
	if ((e = pools_find(rs.pool)) == NULL) {
		char q[UTF8_QUOTE_SIZE];
		conn_send_error(c, req->id, ERR_NO_SUCH_POOL, "no pool named \"%s\"",
		    utf8_quote(q, rs.pool));
		return;
	}
	pool_snapshot(e->pool, &s);
	/* size is both bounds; min or max alone keeps the other one */
	min = rs.has_size ? rs.size : rs.has_min ? rs.min : s.min_workers;
	max = rs.has_size ? rs.size : rs.has_max ? rs.max : s.max_workers;
	if (rs.has_size && (rs.size < 1 || rs.size > s.limit)) {
		conn_send_error(c, req->id, ERR_BAD_REQUEST,
		    "field \"size\" is %lld, out of range 1..%u: pool %s's limit is %u "
		    "(its limit setting)", (long long)rs.size, s.limit, e->name, s.limit);
		return;
	}
	if (min < 1 || max > s.limit || min > max) {
		conn_send_error(c, req->id, ERR_BAD_REQUEST,
		    "min %lld and max %lld are out of range for pool %s: 1 <= min <= max <= %u "
		    "(its limit setting)%s", (long long)min, (long long)max, e->name, s.limit,
		    min > max && !(rs.has_min && rs.has_max) ? "; the bound not given stays "
		    "as it is" : "");
		return;
	}
	if (pool_resize_bounds(e->pool, (unsigned)min, (unsigned)max, &msg) == -1) {
		pool_snapshot(e->pool, &s);
		conn_send_error(c, req->id, s.closed ? ERR_CLOSED : ERR_INTERNAL, "%s",
		    msg ? msg : "resize failed");
		log_warnx("resize of pool %s to %lld..%lld: %s", e->name, (long long)min,
		    (long long)max, msg ? msg : "failed");
		free(msg);
		return;
	}
	pool_snapshot(e->pool, &s);
	log_info("pool %s resized to %u..%u by connection %llu (%s); %u worker%s now", e->name,
	    s.min_workers, s.max_workers, (unsigned long long)conn_id(c), conn_peer(c),
	    s.workers, s.workers == 1 ? "" : "s");
	proto_encode_resized(&pt, req->id, e->name, s.target, s.workers, s.min_workers,
	    s.max_workers, "kept until a restart, or a reload that changes the pool's size, "
	    "min_workers or max_workers in the configuration file");
	sources_kick();         /* the pool may take more at once */
	conn_send_text(c, &pt);
}

/* pause and resume: a paused pool starts no queued task; the answer is its state. */
static void
op_pause_resume(struct conn *c, struct request *req, bool pause)
{
	struct proto_text pt;
	struct pools_entry *e;
	const char *pool;
	char *msg = NULL;
	bool was;

	if (proto_read_pool_ref(req, &pool, &msg) == -1) {
		ops_bad_request(c, req, msg);
		return;
	}
	if ((e = pools_find(pool)) == NULL) {
		char q[UTF8_QUOTE_SIZE];
		conn_send_error(c, req->id, ERR_NO_SUCH_POOL, "no pool named \"%s\"",
		    utf8_quote(q, pool));
		return;
	}
	was = pool_set_paused(e->pool, pause);
	if (was != pause)
		log_info("pool %s %s by connection %llu (%s)", e->name, pause ? "paused" : "resumed",
		    (unsigned long long)conn_id(c), conn_peer(c));
	proto_encode_pool_state(&pt, req->id, e->name, pause ? POOL_STATE_PAUSED : POOL_STATE_OPEN);
	if (!pause)
		sources_kick();
	conn_send_text(c, &pt);
}

void
op_pause(struct conn *c, struct request *req)
{
	op_pause_resume(c, req, true);
}

void
op_resume(struct conn *c, struct request *req)
{
	op_pause_resume(c, req, false);
}

void
op_shutdown(struct conn *c, struct request *req)
{
	struct proto_shutdown sd;
	struct proto_text pt;
	char *msg = NULL;

	if (proto_read_shutdown(req, &sd, &msg) == -1) {
		ops_bad_request(c, req, msg);
		return;
	}
	log_notice("shutdown (%s) asked by connection %llu (%s)", sd.mode,
	    (unsigned long long)conn_id(c), conn_peer(c));
	proto_encode_shutting_down(&pt, req->id, sd.mode);
	conn_send_text(c, &pt);
	shutdown_begin(sd.now);
}
