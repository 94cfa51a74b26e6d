/* op-admin.c: stats, and the admin ops resize and shutdown. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "net/auth.h"
#include "exec/cgroup.h"
#include "net/conn.h"
#include "daemon.h"
#include "journal/durable.h"
#include "base/log.h"
#include "ops.h"
#include "pool/pools.h"
#include "proto/proto.h"
#include "source/sources.h"
#include "task/tasks.h"
#include "base/utf8.h"
#include "wire.h"

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
	if (rs.size < 1 || rs.size > s.limit) {
		conn_send_error(c, req->id, ERR_BAD_REQUEST,
		    "field \"size\" is %lld, out of range 1..%u: pool %s's limit is %u "
		    "(its limit setting)", (long long)rs.size, s.limit, e->name, s.limit);
		return;
	}
	if (pool_resize(e->pool, (unsigned)rs.size, &msg) == -1) {
		pool_snapshot(e->pool, &s);
		conn_send_error(c, req->id, s.closed ? ERR_CLOSED : ERR_INTERNAL, "%s",
		    msg ? msg : "resize failed");
		log_warnx("resize of pool %s to %llu: %s", e->name, (unsigned long long)rs.size,
		    msg ? msg : "failed");
		free(msg);
		return;
	}
	pool_snapshot(e->pool, &s);
	log_info("pool %s resized to %u by connection %llu (%s); %u worker%s now", e->name,
	    s.target, (unsigned long long)conn_id(c), conn_peer(c), s.workers,
	    s.workers == 1 ? "" : "s");
	proto_encode_resized(&pt, req->id, e->name, s.target, s.workers);
	sources_kick();         /* the pool may take more at once */
	conn_send_text(c, &pt);
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
