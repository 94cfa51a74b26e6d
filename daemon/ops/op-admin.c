/* op-admin.c: stats, and the admin ops resize, pause, resume and shutdown. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "net/auth.h"
#include "exec/cgroup.h"
#include "net/conn.h"
#include "daemon.h"
#include "journal/durable.h"
#include "base/log.h"
#include "admission.h"
#include "ops.h"
#include "pool/pools.h"
#include "proto/proto.h"
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

void
op_stats(struct conn *c, struct request *req)
{
	struct daemon *d = daemon_state;
	struct proto_pool_stats pools[CONF_MAX_POOLS * 2];
	struct proto_stats st;
	struct proto_journal_stats pj;
	struct journal_stats js;
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
		pool_snapshot(e->pool, &pools[i].s);
		pools[i].s.cancelled += e->ended_unqueued; /* before they entered the queue */
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
	st.phase = phase_name(d->phase);
	memset(&pj, 0, sizeof pj);
	pj.state = "off";
	if (durable_stats(&js)) {
		pj.state = js.state;
		pj.path = js.path;
		pj.error = js.error;
		pj.sync = js.sync_mode;
		pj.at_limit = js.at_limit;
		pj.bytes = js.bytes;
		pj.max_bytes = js.max_bytes;
		pj.segment_bytes = journal_segment_bytes(js.max_bytes);
		pj.segments = js.segments;
		pj.records = js.records;
		pj.appended = js.appended;
		pj.batches = js.batches;
		pj.syncs = js.syncs;
		pj.last_sync_us = js.last_sync_us;
		pj.max_sync_us = js.max_sync_us;
		pj.compactions = js.compactions;
		pj.last_compaction_us = js.last_compaction_us;
		pj.recoveries = js.recoveries;
	}
	st.journal = &pj;
	st.tcp_auth = auth_tcp_mode();
	st.sources = sources_stats();
	proto_encode_stats(&pt, req->id, &st);
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
	daemon_begin_shutdown(sd.now);
}
