/*
 * metrics.c: GET /metrics in the Prometheus text format (0.0.4), served by
 * libevent's own HTTP server (evhttp) on the daemon's loop: no thread of
 * its own, and nothing kept between scrapes. Each scrape formats what the
 * pools hold now (pool_snapshot, pool_timings: counters and histograms
 * kept under each pool's lock), the sources' (sources_each) and the
 * daemon's own figures.
 *
 * Limits, each a key of tpd.conf(5): only GET /metrics is served (another
 * path is 404, another method on /metrics 405); a request's line and
 * headers take at most metrics_max_header_bytes (evhttp answers 413 past
 * it) and a request body none; a request must be complete within
 * metrics_timeout of the accept (or of the answer to the one before it on
 * the connection), else the connection is closed: evhttp's own timeout
 * starts again at every byte, so a client sending a byte a second (a
 * slowloris) would hold its slot for hours; at most metrics_max_connections
 * are open at once. At the cap the
 * listener stops accepting, so more scrapers wait in the kernel's backlog
 * until one closes; that is logged once each time the cap is reached.
 *
 * evhttp in libevent 2.1 has no connection cap and tells nobody when a
 * connection it accepted closes before a request came. It asks
 * evhttp_set_bevcb's callback for the bufferevent of every connection it
 * accepts, though: tpd makes it, counts it, and keeps a reference to it
 * (bufferevent_incref). When evhttp frees the connection, bufferevent_free
 * clears the callbacks it had set and drops evhttp's reference; ours keeps
 * the bufferevent (and its socket, half closed by evhttp) until a sweep
 * sees the callbacks gone and drops it too, which closes the socket and
 * frees a slot. The sweep runs at each accept and on a timer: every second
 * while scrapes are open, every 100 ms at the cap. (A pass-through filter
 * bufferevent, whose free callback would say it at once, does not work:
 * evhttp writes an error reply while writing is disabled, and a filter
 * never passes on what was written then.)
 */
#include "config.h"

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/listener.h>

#include "exec/spool.h"
#include "journal/durable.h"
#include "net/conn.h"
#include "daemon.h"
#include "net/listen.h"
#include "base/clock.h"
#include "base/log.h"
#include "metrics.h"
#include "pool/pool.h"
#include "pool/pools.h"
#include "source/source.h"
#include "source/sources.h"
#include "task/tasks.h"

#define METRICS_PATH "/metrics"
#define METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"
#define ACCEPT_PAUSE_MS 100

static struct {
	struct event_base *base;
	struct evhttp *http;
	struct evconnlistener *evl;
	struct event *resume;       /* re-enables accepting after accept() ran out of fds */
	char *listen;               /* the address served (a copy of metrics_listen) */
	char name[128];             /* "tcp 127.0.0.1:9100" */
	unsigned max_connections;
	struct bufferevent **conns; /* every connection's bufferevent, referenced until swept */
	uint64_t *deadline_us;      /* conns[i]'s next request is due by then (clock_now_us) */
	uint64_t timeout_us;        /* metrics_timeout */
	unsigned connections;       /* how many: the open connections, give or take a sweep */
	unsigned conns_cap;         /* slots in conns */
	struct event *sweep;        /* the timer of conns_sweep */
	bool at_cap;                /* the listener is off because of the cap */
	bool paused;                /* the listener is off after an accept() error */
} m;

/* ---- the text */

/* The Prometheus bounds of the histograms, 1 ms to 1 h: each one of pool.c's bounds. */
static const struct {
	const char *le;
	uint64_t us;
} metrics_bounds[] = {
	{ "0.001", 1000 }, { "0.0025", 2500 }, { "0.005", 5000 }, { "0.01", 10000 },
	{ "0.025", 25000 }, { "0.05", 50000 }, { "0.1", 100000 }, { "0.25", 250000 },
	{ "0.5", 500000 }, { "1", 1000000 }, { "2.5", 2500000 }, { "5", 5000000 },
	{ "10", 10000000 }, { "30", 30000000 }, { "60", 60000000 }, { "120", 120000000 },
	{ "300", 300000000 }, { "600", 600000000 }, { "1800", 1800000000 },
	{ "3600", 3600000000ULL },
};

/* One pool's figures; entries of one name (a removed pool and its successor) added up. */
struct metrics_pool {
	const char *name;
	bool live;                  /* has an entry that is not removed */
	unsigned held;              /* submits held for room (pools_entry.held) */
	struct pool_snapshot s;
	struct pool_hist queued, run;
	uint64_t scheduled, waiting, retried, skipped;  /* the task layer's (pools.h) */
};

static void
pool_add(struct metrics_pool *mp, const struct pools_entry *e)
{
	struct pool_snapshot s;
	struct pool_hist queued, run;

	pool_snapshot(e->pool, &s);
	pool_timings(e->pool, &queued, &run);
	pool_hist_merge(&mp->queued, &queued);
	pool_hist_merge(&mp->run, &run);
	/* what a pool is set to: the live entry's; what it holds and did: the sum */
	if (!e->removed || !mp->live) {
		mp->s.target = s.target;
		mp->s.capacity = s.capacity;
		mp->s.limit = s.limit;
		mp->s.min_workers = s.min_workers;
		mp->s.max_workers = s.max_workers;
	}
	mp->held += e->held;
	mp->s.rejected_quota += s.rejected_quota;
	mp->s.displaced += s.displaced;
	mp->live = mp->live || !e->removed;
	mp->s.workers += s.workers;
	mp->s.busy += s.busy;
	mp->s.queued += s.queued;
	mp->s.accepted += s.accepted;
	mp->s.rejected_full += s.rejected_full;
	mp->s.rejected_closed += s.rejected_closed;
	mp->s.succeeded += s.succeeded;
	mp->s.failed += s.failed;
	mp->s.timed_out += s.timed_out;
	mp->s.cancelled += s.cancelled;
	mp->s.expired += s.expired;
	mp->s.lost += s.lost;
	mp->s.rejected_storage += s.rejected_storage;
	mp->s.cancelled += e->ended_unqueued;   /* before they entered the queue */
	mp->scheduled += e->scheduled;
	mp->waiting += e->waiting;
	mp->retried += e->retried;
	mp->skipped += e->skipped;
	if (s.oldest_queued_us > mp->s.oldest_queued_us)
		mp->s.oldest_queued_us = s.oldest_queued_us;
}

/* The pools by name, in the order of the daemon's list; NULL when out of memory. */
static struct metrics_pool *
pools_collect(size_t *n)
{
	size_t count = pools_count(), used = 0;
	struct metrics_pool *mp = calloc(count > 0 ? count : 1, sizeof *mp);

	if (mp == NULL)
		return NULL;
	for (size_t i = 0; i < count; i++) {
		struct pools_entry *e = pools_at(i);
		size_t j;

		for (j = 0; j < used && strcmp(mp[j].name, e->name) != 0; j++)
			;
		if (j == used)
			mp[used++].name = e->name;
		pool_add(&mp[j], e);
	}
	*n = used;
	return mp;
}

static void
family(struct evbuffer *out, const char *name, const char *type, const char *help)
{
	evbuffer_add_printf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* name{pool="P"[,extra]} value: pool names are letters, digits, '_', '.', '-': no escaping. */
static void
sample(struct evbuffer *out, const char *name, const char *pool, const char *extra,
    unsigned long long v)
{
	evbuffer_add_printf(out, "%s{pool=\"%s\"%s%s} %llu\n", name, pool,
	    extra != NULL ? "," : "", extra != NULL ? extra : "", v);
}

/*
 * One gauge family: its HELP and TYPE, then one sample per pool of the unsigned field at
 * off in the pool's snapshot.
 */
static void
pool_gauge(struct evbuffer *out, const char *name, const char *help,
    const struct metrics_pool *mp, size_t n, size_t off)
{
	family(out, name, "gauge", help);
	for (size_t i = 0; i < n; i++)
		sample(out, name, mp[i].name, NULL,
		    *(const unsigned *)(const void *)((const char *)&mp[i].s + off));
}

static void
histogram(struct evbuffer *out, const char *name, const struct metrics_pool *mp, size_t n,
    bool queued)
{
	for (size_t i = 0; i < n; i++) {
		const struct pool_hist *h = queued ? &mp[i].queued : &mp[i].run;

		for (size_t b = 0; b < sizeof metrics_bounds / sizeof metrics_bounds[0]; b++)
			evbuffer_add_printf(out, "%s_bucket{pool=\"%s\",le=\"%s\"} %llu\n", name,
			    mp[i].name, metrics_bounds[b].le,
			    (unsigned long long)pool_hist_count_le(h, metrics_bounds[b].us));
		evbuffer_add_printf(out, "%s_bucket{pool=\"%s\",le=\"+Inf\"} %llu\n", name,
		    mp[i].name, (unsigned long long)h->count);
		evbuffer_add_printf(out, "%s_sum{pool=\"%s\"} %llu.%06llu\n", name, mp[i].name,
		    (unsigned long long)(h->sum_us / 1000000),
		    (unsigned long long)(h->sum_us % 1000000));
		evbuffer_add_printf(out, "%s_count{pool=\"%s\"} %llu\n", name, mp[i].name,
		    (unsigned long long)h->count);
	}
}

/* The loop's pauses (obs/loop-watch.c): a histogram of those of 1 ms or more. */
static void
metrics_loop(struct evbuffer *out, const struct pauses *p)
{
	family(out, "tpd_loop_pause_seconds", "histogram", "How long the event loop went "
	    "without polling (its pauses of 1 ms or more, sampled every millisecond).");
	for (size_t b = 0; b < PAUSES_NBOUNDS; b++)
		evbuffer_add_printf(out, "tpd_loop_pause_seconds_bucket{le=\"%s\"} %llu\n",
		    pauses_bound_s[b], (unsigned long long)p->le[b]);
	evbuffer_add_printf(out, "tpd_loop_pause_seconds_bucket{le=\"+Inf\"} %llu\n",
	    (unsigned long long)p->count);
	evbuffer_add_printf(out, "tpd_loop_pause_seconds_sum %llu.%06llu\n",
	    (unsigned long long)(p->sum_us / 1000000), (unsigned long long)(p->sum_us % 1000000));
	evbuffer_add_printf(out, "tpd_loop_pause_seconds_count %llu\n",
	    (unsigned long long)p->count);
}

/* A label value in the text format: backslash, double quote and newline escaped. */
static void
label_value(struct evbuffer *out, const char *s)
{
	for (; *s != '\0'; s++) {
		if (*s == '\\' || *s == '"')
			evbuffer_add_printf(out, "\\%c", *s);
		else if (*s == '\n')
			evbuffer_add(out, "\\n", 2);
		else
			evbuffer_add(out, s, 1);
	}
}

/* The sources' families: each a field of struct source_figures. */
enum metrics_src_field {
	SRC_UP, SRC_READ, SRC_ACKED, SRC_CLAIMED, SRC_DEAD, SRC_IN_FLIGHT, SRC_NFIELDS
};

static const struct {
	const char *name, *type, *help;
} metrics_src[SRC_NFIELDS] = {
	{ "tpd_source_up", "gauge", "1 when the source is connected to its Redis and set up, "
	    "0 while it connects, is down or stopped." },
	{ "tpd_source_entries_read_total", "counter", "New stream entries the source read "
	    "(claimed ones count in tpd_source_entries_claimed_total)." },
	{ "tpd_source_entries_acked_total", "counter", "Stream entries acknowledged, each with "
	    "its result written." },
	{ "tpd_source_entries_claimed_total", "counter", "Stream entries taken over from "
	    "consumers that stopped." },
	{ "tpd_source_entries_dead_lettered_total", "counter", "Stream entries delivered more "
	    "than max_deliveries times, moved to the dead-letter stream." },
	{ "tpd_source_entries_in_flight", "gauge", "Stream entries read and not yet "
	    "acknowledged." },
};

struct metrics_src_pass {
	struct evbuffer *out;
	enum metrics_src_field field;
	size_t count;
};

static void
source_sample(const struct source_figures *f, void *arg)
{
	struct metrics_src_pass *p = arg;
	unsigned long long v = 0;

	p->count++;
	if (p->out == NULL)
		return;
	switch (p->field) {
	case SRC_UP: v = f->connected; break;
	case SRC_READ: v = f->read; break;
	case SRC_ACKED: v = f->acked; break;
	case SRC_CLAIMED: v = f->claimed; break;
	case SRC_DEAD: v = f->dead_lettered; break;
	case SRC_IN_FLIGHT: v = f->in_flight; break;
	default: return;
	}
	evbuffer_add_printf(p->out, "%s{source=\"", metrics_src[p->field].name);
	label_value(p->out, f->name);
	evbuffer_add_printf(p->out, "\",pool=\"");
	label_value(p->out, f->pool);
	evbuffer_add_printf(p->out, "\"} %llu\n", v);
}

/* The [source NAME] sections' families, when there are any. */
static void
sources_format(struct evbuffer *out)
{
	struct metrics_src_pass p = { NULL, SRC_UP, 0 };

	sources_each(source_sample, &p);
	if (p.count == 0)
		return;
	p.out = out;
	for (int k = 0; k < SRC_NFIELDS; k++) {
		p.field = (enum metrics_src_field)k;
		family(out, metrics_src[k].name, metrics_src[k].type, metrics_src[k].help);
		sources_each(source_sample, &p);
	}
}

/* A family of one sample without labels. */
struct metrics_plain {
	const char *name, *type, *help;
};

/* The families fam[0..n) and their samples v[0..n). */
static void
plain_samples(struct evbuffer *out, const struct metrics_plain *fam,
    const unsigned long long *v, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		family(out, fam[i].name, fam[i].type, fam[i].help);
		evbuffer_add_printf(out, "%s %llu\n", fam[i].name, v[i]);
	}
}

/* The journal's series (none with the journal off). */
static void
metrics_journal(struct evbuffer *out)
{
	struct journal_stats js;
	static const struct metrics_plain fam[] = {
		{ "tpd_journal_failed", "gauge", "1 while the journal cannot be written (submits are "
		    "refused with storage; what depends on lost records waits), else 0." },
		{ "tpd_journal_at_limit", "gauge", "1 while the journal is at journal_max_bytes." },
		{ "tpd_journal_bytes", "gauge", "Bytes the journal's segments take on disk." },
		{ "tpd_journal_max_bytes", "gauge", "journal_max_bytes." },
		{ "tpd_journal_syncs_total", "counter", "fdatasync calls of the journal." },
		{ "tpd_journal_recoveries_total", "counter", "Times a failed journal was written "
		    "afresh." },
		{ "tpd_journal_held_bytes", "gauge", "Output bytes waiting for the journal." },
		{ "tpd_journal_held_starts", "gauge", "Exec tasks whose program waits for its start "
		    "record." },
	};
	unsigned long long v[8];
	size_t nheld;
	uint64_t held;

	if (!durable_stats(&js))
		return;
	conn_gate_held(&nheld, &held);
	v[0] = strcmp(js.state, "failed") == 0;
	v[1] = js.at_limit;
	v[2] = js.bytes;
	v[3] = js.max_bytes;
	v[4] = js.syncs;
	v[5] = js.recoveries;
	v[6] = held;
	v[7] = js.held_starts;
	plain_samples(out, fam, v, sizeof fam / sizeof fam[0]);
}

/* The spool's series (none when output_spool is off). */
static void
metrics_spool(struct evbuffer *out)
{
	static const struct metrics_plain fam[] = {
		{ "tpd_spool_bytes", "gauge", "Bytes of exec tasks' output files (output_spool)." },
		{ "tpd_spool_max_bytes", "gauge", "output_spool_bytes." },
		{ "tpd_spool_files", "gauge", "Exec tasks whose output has a file now." },
		{ "tpd_spool_dropped_total", "counter", "Output files of finished tasks removed to "
		    "stay under output_spool_bytes." },
	};
	struct spool_figures f;
	unsigned long long v[4];

	if (!spool_figures(&f))
		return;
	v[0] = f.bytes;
	v[1] = f.max_bytes;
	v[2] = f.files;
	v[3] = f.dropped;
	plain_samples(out, fam, v, sizeof fam / sizeof fam[0]);
}

int
metrics_format(struct evbuffer *out)
{
	static const struct {
		const char *state;
		size_t off;
	} ends[] = {
		{ "succeeded", offsetof(struct pool_snapshot, succeeded) },
		{ "failed", offsetof(struct pool_snapshot, failed) },
		{ "timed_out", offsetof(struct pool_snapshot, timed_out) },
		{ "cancelled", offsetof(struct pool_snapshot, cancelled) },
		{ "expired", offsetof(struct pool_snapshot, expired) },
		{ "lost", offsetof(struct pool_snapshot, lost) },
	};
	struct daemon *d = daemon_state;
	struct metrics_pool *mp;
	char extra[64];
	size_t n, i;

	if ((mp = pools_collect(&n)) == NULL)
		return -1;

	family(out, "tpd_build_info", "gauge", "The version of tpd (the value is always 1).");
	evbuffer_add_printf(out, "tpd_build_info{version=\"");
	label_value(out, PACKAGE_VERSION);
	evbuffer_add_printf(out, "\"} 1\n");
	family(out, "tpd_uptime_seconds", "gauge", "Seconds since tpd started.");
	evbuffer_add_printf(out, "tpd_uptime_seconds %.3f\n",
	    (double)(clock_now_us() - d->started_us) / 1e6);
	family(out, "tpd_connections", "gauge", "Client connections open now (the protocol's, "
	    "not these scrapes').");
	evbuffer_add_printf(out, "tpd_connections %zu\n", conn_count());
	family(out, "tpd_tasks_outstanding", "gauge", "Accepted tasks whose done is not "
	    "delivered yet.");
	evbuffer_add_printf(out, "tpd_tasks_outstanding %llu\n",
	    (unsigned long long)tasks_outstanding());
	metrics_journal(out);
	metrics_spool(out);
	metrics_loop(out, &d->loop_pauses);

	family(out, "tpd_tasks_submitted_total", "counter", "Submissions the pool accepted.");
	for (i = 0; i < n; i++)
		sample(out, "tpd_tasks_submitted_total", mp[i].name, NULL, mp[i].s.accepted);
	family(out, "tpd_tasks_rejected_total", "counter", "Submissions refused, by reason "
	    "(the error code of the rejected event).");
	for (i = 0; i < n; i++) {
		sample(out, "tpd_tasks_rejected_total", mp[i].name, "reason=\"queue_full\"",
		    mp[i].s.rejected_full);
		sample(out, "tpd_tasks_rejected_total", mp[i].name, "reason=\"closed\"",
		    mp[i].s.rejected_closed);
		sample(out, "tpd_tasks_rejected_total", mp[i].name, "reason=\"quota\"",
		    mp[i].s.rejected_quota);
		sample(out, "tpd_tasks_rejected_total", mp[i].name, "reason=\"storage\"",
		    mp[i].s.rejected_storage);
	}
	family(out, "tpd_submits_held", "gauge", "Submits held until their pool's queue has "
	    "room (admission wait): not accepted, not tasks.");
	for (i = 0; i < n; i++)
		sample(out, "tpd_submits_held", mp[i].name, NULL, mp[i].held);
	family(out, "tpd_tasks_finished_total", "counter", "Tasks that ended, by terminal state.");
	for (i = 0; i < n; i++)
		for (size_t k = 0; k < sizeof ends / sizeof ends[0]; k++) {
			snprintf(extra, sizeof extra, "state=\"%s\"", ends[k].state);
			sample(out, "tpd_tasks_finished_total", mp[i].name, extra,
			    *(const uint64_t *)(const void *)((const char *)&mp[i].s + ends[k].off));
		}
	for (i = 0; i < n; i++)
		sample(out, "tpd_tasks_finished_total", mp[i].name, "state=\"skipped\"",
		    mp[i].skipped);
	family(out, "tpd_tasks_scheduled", "gauge", "Tasks scheduled (a delay, between "
	    "attempts, or due with no room yet): accepted, not queued.");
	for (i = 0; i < n; i++)
		sample(out, "tpd_tasks_scheduled", mp[i].name, NULL, mp[i].scheduled);
	family(out, "tpd_tasks_waiting", "gauge", "Tasks waiting for their dependencies.");
	for (i = 0; i < n; i++)
		sample(out, "tpd_tasks_waiting", mp[i].name, NULL, mp[i].waiting);
	family(out, "tpd_task_retries_total", "counter", "Attempts scheduled again after "
	    "one ended in a state of their retry_on.");
	for (i = 0; i < n; i++)
		sample(out, "tpd_task_retries_total", mp[i].name, NULL, mp[i].retried);

	pool_gauge(out, "tpd_queue_length", "Tasks waiting in the queue.",
	    mp, n, offsetof(struct pool_snapshot, queued));
	pool_gauge(out, "tpd_queue_capacity", "Queue slots (idle workers take tasks "
	    "beyond them).", mp, n, offsetof(struct pool_snapshot, capacity));
	family(out, "tpd_queue_oldest_seconds", "gauge", "How long the oldest queued task "
	    "has waited (0 when none waits).");
	for (i = 0; i < n; i++)
		evbuffer_add_printf(out, "tpd_queue_oldest_seconds{pool=\"%s\"} %.6f\n",
		    mp[i].name, (double)mp[i].s.oldest_queued_us / 1e6);
	pool_gauge(out, "tpd_workers", "Worker threads of the pool now.",
	    mp, n, offsetof(struct pool_snapshot, workers));
	pool_gauge(out, "tpd_workers_busy", "Workers running a task.",
	    mp, n, offsetof(struct pool_snapshot, busy));
	pool_gauge(out, "tpd_workers_target", "The size the pool is set to (resize, "
	    "size).", mp, n, offsetof(struct pool_snapshot, target));
	pool_gauge(out, "tpd_workers_min", "The fewest workers the pool keeps "
	    "(min_workers).", mp, n, offsetof(struct pool_snapshot, min_workers));
	pool_gauge(out, "tpd_workers_max", "The most workers the pool starts as tasks "
	    "come (max_workers).", mp, n, offsetof(struct pool_snapshot, max_workers));

	family(out, "tpd_task_queued_seconds", "histogram", "How long tasks waited in the "
	    "queue, observed when they started or expired.");
	histogram(out, "tpd_task_queued_seconds", mp, n, true);
	family(out, "tpd_task_run_seconds", "histogram", "How long tasks ran, observed when "
	    "they ended.");
	histogram(out, "tpd_task_run_seconds", mp, n, false);
	sources_format(out);
	free(mp);
	return 0;
}

/* ---- the server */

/* A request came whole and was answered: the connection's next one is due within the timeout. */
static void
request_answered(struct evhttp_request *req)
{
	struct evhttp_connection *evcon = evhttp_request_get_connection(req);
	struct bufferevent *bev = evcon != NULL ? evhttp_connection_get_bufferevent(evcon) : NULL;

	for (unsigned i = 0; bev != NULL && i < m.connections; i++)
		if (m.conns[i] == bev && m.deadline_us[i] != 0)
			m.deadline_us[i] = clock_now_us() + m.timeout_us;
}

static void
reply_text(struct evhttp_request *req, int code, const char *reason, const char *text)
{
	struct evbuffer *body = evbuffer_new();
	struct evkeyvalq *headers = evhttp_request_get_output_headers(req);

	evhttp_add_header(headers, "Content-Type", "text/plain; charset=utf-8");
	if (code == HTTP_BADMETHOD)
		evhttp_add_header(headers, "Allow", "GET");
	if (body != NULL)
		evbuffer_add_printf(body, "%s\n", text);
	request_answered(req);
	evhttp_send_reply(req, code, reason, body);
	if (body != NULL)
		evbuffer_free(body);
}

static void
metrics_request(struct evhttp_request *req, void *arg)
{
	const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
	const char *path = uri != NULL ? evhttp_uri_get_path(uri) : NULL;
	struct evbuffer *body;

	if (path == NULL || strcmp(path, METRICS_PATH) != 0) {
		reply_text(req, HTTP_NOTFOUND, "Not Found",
		    "not found: tpd serves only GET " METRICS_PATH);
		return;
	}
	if (evhttp_request_get_command(req) != EVHTTP_REQ_GET) {
		reply_text(req, HTTP_BADMETHOD, "Method Not Allowed",
		    "method not allowed: " METRICS_PATH " takes GET only");
		return;
	}
	if ((body = evbuffer_new()) == NULL || metrics_format(body) == -1) {
		if (body != NULL)
			evbuffer_free(body);
		reply_text(req, HTTP_INTERNAL, "Internal Server Error", "out of memory");
		return;
	}
	evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type",
	    METRICS_CONTENT_TYPE);
	log_debug("metrics: %zu bytes for %s", evbuffer_get_length(body),
	    evhttp_request_get_host(req) != NULL ? evhttp_request_get_host(req) : "a scrape");
	request_answered(req);
	evhttp_send_reply(req, HTTP_OK, "OK", body);
	evbuffer_free(body);
}

/* Accepting stops at the cap or after an accept() error, and resumes when neither holds. */
static void
listener_update(void)
{
	if (m.evl == NULL)
		return;
	if (m.at_cap || m.paused)
		evconnlistener_disable(m.evl);
	else
		evconnlistener_enable(m.evl);
}

#define SWEEP_MS 1000          /* while connections are open */
#define SWEEP_AT_CAP_MS 100     /* while scrapers wait for a slot */

/*
 * Closes the connections whose request did not come whole by their
 * deadline: shutdown() makes evhttp read the end and free the connection,
 * which the next sweep then drops. Returns the earliest deadline still to
 * come (0: none).
 */
static uint64_t
conns_expire(void)
{
	uint64_t now = clock_now_us(), next = 0;

	for (unsigned i = 0; i < m.connections; i++) {
		evutil_socket_t fd = bufferevent_getfd(m.conns[i]);
		if (m.deadline_us[i] == 0 || fd == -1)
			continue;
		if (m.deadline_us[i] <= now) {
			log_info("metrics: a connection sent no whole request within "
			    "metrics_timeout (%llu ms) of its start: closing it",
			    (unsigned long long)(m.timeout_us / 1000));
			m.deadline_us[i] = 0;
			shutdown(fd, SHUT_RDWR);
		} else if (next == 0 || m.deadline_us[i] < next)
			next = m.deadline_us[i];
	}
	return next;
}

/* Drops the connections evhttp has freed: their bufferevents had their callbacks cleared. */
static void
conns_sweep(void)
{
	bufferevent_data_cb rcb, wcb;
	bufferevent_event_cb ecb;
	uint64_t next, now;
	unsigned i = 0;

	while (i < m.connections) {
		struct bufferevent *bev = m.conns[i];

		bufferevent_getcb(bev, &rcb, &wcb, &ecb, NULL);
		if (rcb != NULL || wcb != NULL || ecb != NULL) {
			i++;
			continue;
		}
		m.conns[i] = m.conns[--m.connections];
		m.deadline_us[i] = m.deadline_us[m.connections];
		bufferevent_decref(bev);        /* the last reference: the socket closes */
	}
	next = conns_expire();
	if (m.at_cap && m.connections < m.max_connections) {
		m.at_cap = false;
		listener_update();
	}
	if (m.sweep != NULL && m.connections > 0) {
		uint64_t us = (m.at_cap ? SWEEP_AT_CAP_MS : SWEEP_MS) * 1000;
		struct timeval tv;
		now = clock_now_us();
		if (next != 0 && next > now && next - now < us)
			us = next - now;
		if (us < 10000)
			us = 10000;
		tv.tv_sec = (time_t)(us / 1000000);
		tv.tv_usec = (suseconds_t)(us % 1000000);
		evtimer_add(m.sweep, &tv);
	}
}

static void
sweep_cb(evutil_socket_t fd, short what, void *arg)
{
	conns_sweep();
}

/* evhttp accepted a connection and asks for its bufferevent. */
static struct bufferevent *
conn_bufferevent(struct event_base *base, void *arg)
{
	struct bufferevent *bev;

	conns_sweep();
	if (m.connections == m.conns_cap) {
		unsigned cap = m.conns_cap > 0 ? m.conns_cap * 2 : 16;
		struct bufferevent **c = realloc(m.conns, cap * sizeof *c);
		uint64_t *dl;

		if (c == NULL)
			return NULL;    /* evhttp makes one of its own, uncounted */
		m.conns = c;
		if ((dl = realloc(m.deadline_us, cap * sizeof *dl)) == NULL)
			return NULL;
		m.deadline_us = dl;
		m.conns_cap = cap;
	}
	if ((bev = bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE)) == NULL)
		return NULL;
	bufferevent_incref(bev);
	m.deadline_us[m.connections] = clock_now_us() + m.timeout_us;
	m.conns[m.connections++] = bev;
	if (m.connections >= m.max_connections && !m.at_cap) {
		m.at_cap = true;
		log_warnx("metrics: metrics_max_connections (%u) reached: more scrapes wait "
		    "until one closes", m.max_connections);
		listener_update();
	}
	if (m.connections == 1 || m.at_cap || !evtimer_pending(m.sweep, NULL)) {
		uint64_t us = m.at_cap ? SWEEP_AT_CAP_MS * 1000 : SWEEP_MS * 1000;
		struct timeval tv;
		if (m.timeout_us < us)
			us = m.timeout_us;
		tv.tv_sec = (time_t)(us / 1000000);
		tv.tv_usec = (suseconds_t)(us % 1000000);
		evtimer_add(m.sweep, &tv);
	}
	return bev;
}

static void
resume_cb(evutil_socket_t fd, short what, void *arg)
{
	m.paused = false;
	listener_update();
}

/* accept() failed: pause on a shortage of descriptors or memory instead of spinning. */
static void
accept_error_cb(struct evconnlistener *evl, void *arg)
{
	int err = EVUTIL_SOCKET_ERROR();
	struct timeval tv = { 0, ACCEPT_PAUSE_MS * 1000 };

	if (err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM) {
		log_warnx("metrics: %s: accept: %s: pausing %d ms", m.name, strerror(err),
		    ACCEPT_PAUSE_MS);
		m.paused = true;
		listener_update();
		evtimer_add(m.resume, &tv);
		return;
	}
	log_warnx("metrics: %s: accept: %s", m.name, strerror(err));
}

/* The limits that apply to connections from now on. */
static void
apply_limits(const struct conf *c)
{
	struct timeval tv = clock_timeval_ms(c->metrics_timeout_ms);

	m.max_connections = c->metrics_max_connections;
	m.timeout_us = c->metrics_timeout_ms * 1000;
	evhttp_set_timeout_tv(m.http, &tv);
	evhttp_set_max_headers_size(m.http, (ev_ssize_t)c->metrics_max_header_bytes);
	evhttp_set_max_body_size(m.http, 0);
	m.at_cap = m.connections >= m.max_connections;
	listener_update();
	conns_sweep();
}

int
metrics_start(struct event_base *base, const struct conf *c, char **cause)
{
	int fd;

	if (c->metrics_listen == NULL)
		return 0;
	if ((fd = listen_tcp_socket(c->metrics_listen, "metrics_listen", m.name, sizeof m.name,
	    cause)) == -1)
		return -1;
	m.base = base;
	if ((m.http = evhttp_new(base)) == NULL ||
	    (m.listen = strdup(c->metrics_listen)) == NULL ||
	    (m.resume = evtimer_new(base, resume_cb, NULL)) == NULL ||
	    (m.sweep = evtimer_new(base, sweep_cb, NULL)) == NULL ||
	    (m.evl = evconnlistener_new(base, NULL, NULL, LEV_OPT_CLOSE_ON_FREE |
	    LEV_OPT_CLOSE_ON_EXEC, 0, fd)) == NULL) {   /* 0: it listens already (listen.c) */
		if (m.evl == NULL)
			close(fd);
		metrics_stop();
		return cause_set(cause, "metrics_listen %s: out of memory", c->metrics_listen);
	}
	/* every method reaches metrics_request, which answers 405 for all but GET */
	evhttp_set_allowed_methods(m.http, 0xffff);
	evhttp_set_gencb(m.http, metrics_request, NULL);
	evhttp_set_bevcb(m.http, conn_bufferevent, NULL);
	if (evhttp_bind_listener(m.http, m.evl) == NULL) {
		evconnlistener_free(m.evl);
		m.evl = NULL;
		metrics_stop();
		return cause_set(cause, "metrics_listen %s: out of memory", c->metrics_listen);
	}
	/* evhttp set its own accept callback; the error callback is tpd's */
	evconnlistener_set_error_cb(m.evl, accept_error_cb);
	apply_limits(c);
	log_info("metrics: serving GET " METRICS_PATH " on %s (at most %u connection%s)",
	    m.name, m.max_connections, m.max_connections == 1 ? "" : "s");
	return 0;
}

void
metrics_reload(const struct conf *nc)
{
	const char *was = m.listen, *now = nc->metrics_listen;

	if ((was == NULL) != (now == NULL) || (was != NULL && strcmp(was, now) != 0))
		log_warnx("reload: metrics_listen takes effect at the next start; /metrics "
		    "stays %s%s", was != NULL ? "on " : "off", was != NULL ? m.name : "");
	if (m.http != NULL)
		apply_limits(nc);
}

void
metrics_stop(void)
{
	/* evhttp_free frees the listener it was bound to, and every connection */
	if (m.http != NULL)
		evhttp_free(m.http);
	else if (m.evl != NULL)
		evconnlistener_free(m.evl);
	if (m.resume != NULL)
		event_free(m.resume);
	if (m.sweep != NULL)
		event_free(m.sweep);
	/* evhttp has freed every connection: ours are the last references */
	for (unsigned i = 0; i < m.connections; i++)
		bufferevent_decref(m.conns[i]);
	free(m.conns);
	free(m.deadline_us);
	free(m.listen);
	m.conns = NULL;
	m.deadline_us = NULL;
	m.connections = m.conns_cap = 0;
	m.http = NULL;
	m.evl = NULL;
	m.resume = NULL;
	m.sweep = NULL;
	m.listen = NULL;
	m.at_cap = m.paused = false;
}
