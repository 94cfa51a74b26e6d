/* op-admin.c: stats, and the admin ops resize and shutdown. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "cgroup.h"
#include "conn.h"
#include "daemon.h"
#include "log.h"
#include "ops.h"
#include "pools.h"
#include "tasks.h"
#include "utf8.h"
#include "wire.h"

static json_t *
pool_json(const struct pools_entry *e)
{
	struct pool_snapshot s;

	pool_snapshot(e->pool, &s);
	return json_pack("{s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:I, s:I, s:I, s:I, s:I, s:I, "
	    "s:I, s:I, s:f, s:b, s:b}",
	    "name", e->name, "target", s.target, "workers", s.workers, "busy", s.busy,
	    "idle", s.idle, "queued", s.queued, "capacity", s.capacity, "limit", s.limit,
	    "accepted", (json_int_t)s.accepted, "rejected", (json_int_t)s.rejected,
	    "rejected_full", (json_int_t)s.rejected_full,
	    "succeeded", (json_int_t)s.succeeded, "failed", (json_int_t)s.failed,
	    "timed_out", (json_int_t)s.timed_out, "cancelled", (json_int_t)s.cancelled,
	    "expired", (json_int_t)s.expired, "oldest_queued_ms", s.oldest_queued_us / 1000.0,
	    "closed", s.closed, "removed", e->removed);
}

void
op_stats(struct conn *c, struct request *req)
{
	static const char *const fields[] = { "op", "id", NULL };
	struct daemon *d = daemon_state;
	json_t *pools = json_array();
	char *msg = NULL;

	if (proto_check_fields(req->root, fields, "a stats request", &msg) == -1) {
		json_decref(pools);
		ops_bad_request(c, req, msg);
		return;
	}
	for (size_t i = 0; i < pools_count(); i++)
		json_array_append_new(pools, pool_json(pools_at(i)));
	ops_reply(c, req, EV_STATS, json_pack("{s:o, s:I, s:I, s:I, s:I, s:I, s:I, s:s, s:s, s:s}",
	    "pools", pools, "connections", (json_int_t)conn_count(),
	    "uptime_ms", (json_int_t)((clock_now_us() - d->started_us) / 1000),
	    "tasks_outstanding", (json_int_t)d->outstanding,
	    "tasks_retained", (json_int_t)tasks_retained(),
	    "tasks_retained_bytes", (json_int_t)tasks_retained_bytes(),
	    "results_forgotten", (json_int_t)tasks_results_forgotten(),
	    "version", PACKAGE_VERSION,
	    "containment", cgroup_containment(),
	    "phase", d->phase == DAEMON_RUNNING ? "running" :
	    d->phase == DAEMON_DRAINING ? "draining" : "stopping"));
}

void
op_resize(struct conn *c, struct request *req)
{
	static const char *const fields[] = { "op", "id", "size", "pool", NULL };
	const char *pool_name = WIRE_DEFAULT_POOL;
	struct pools_entry *e;
	struct pool_snapshot s;
	uint64_t size = 0;
	char *msg = NULL;

	if (proto_check_fields(req->root, fields, "a resize request", &msg) == -1 ||
	    proto_get_uint(req->root, "size", true, 1, 1u << 20, &size, &msg) == -1 ||
	    proto_get_string(req->root, "pool", false, &pool_name, &msg) == -1) {
		ops_bad_request(c, req, msg);
		return;
	}
	if ((e = pools_find(pool_name)) == NULL) {
		char q[UTF8_QUOTE_SIZE];
		conn_send_error(c, req->id, ERR_NO_SUCH_POOL, "no pool named \"%s\"",
		    utf8_quote(q, pool_name));
		return;
	}
	pool_snapshot(e->pool, &s);
	if (size > s.limit) {
		conn_send_error(c, req->id, ERR_BAD_REQUEST,
		    "field \"size\" is %llu, above the limit %u of pool %s",
		    (unsigned long long)size, s.limit, e->name);
		return;
	}
	if (pool_resize(e->pool, (unsigned)size, &msg) == -1) {
		pool_snapshot(e->pool, &s);
		conn_send_error(c, req->id, s.closed ? ERR_CLOSED : ERR_INTERNAL, "%s",
		    msg ? msg : "resize failed");
		log_warnx("resize of pool %s to %llu: %s", e->name, (unsigned long long)size,
		    msg ? msg : "failed");
		free(msg);
		return;
	}
	pool_snapshot(e->pool, &s);
	log_info("pool %s resized to %u by connection %llu (%s); %u workers now", e->name,
	    s.target, (unsigned long long)c->id, conn_peer(c), s.workers);
	ops_reply(c, req, EV_OK, json_pack("{s:s, s:i, s:i}", "pool", e->name,
	    "target", s.target, "workers", s.workers));
}

void
op_shutdown(struct conn *c, struct request *req)
{
	static const char *const fields[] = { "op", "id", "mode", NULL };
	const char *mode = "drain";
	char *msg = NULL;

	if (proto_check_fields(req->root, fields, "a shutdown request", &msg) == -1 ||
	    proto_get_string(req->root, "mode", false, &mode, &msg) == -1) {
		ops_bad_request(c, req, msg);
		return;
	}
	if (strcmp(mode, "drain") != 0 && strcmp(mode, "now") != 0) {
		char q[UTF8_QUOTE_SIZE];
		conn_send_error(c, req->id, ERR_BAD_REQUEST,
		    "field \"mode\" must be \"drain\" or \"now\", not \"%s\"", utf8_quote(q, mode));
		return;
	}
	log_notice("shutdown (%s) asked by connection %llu (%s)", mode,
	    (unsigned long long)c->id, conn_peer(c));
	ops_reply(c, req, EV_OK, json_pack("{s:s}", "mode", mode));
	daemon_begin_shutdown(strcmp(mode, "now") == 0);
}
