/*
 * reload.c: SIGHUP. The configuration file is read again, with the flags
 * of the command line (parsed once, at start) over it as at start-up, into a
 * new struct conf. Any error (in the
 * file, the cross-checks or a token file) refuses the whole reload: every
 * error is logged and nothing changes. Otherwise it is applied at once,
 * connections kept:
 *  - pools: sizes, limits, capacities and the order and admission keys
 *    change live (pool_resize_bounds and friends; a live resize or pause
 *    stays until the file's own value changes), new pools start, pools gone from the file stop accepting and
 *    drain, then go away ("default" always exists);
 *  - log_level, limits read at use (max_connections, max_request_bytes,
 *    max_output_buffer, output_stall_timeout, result_ttl, result_retain,
 *    result_retain_bytes, max_subscriptions, shutdown_timeout), [exec]
 *    (exec_configure), stream_budget, tokens, tcp_auth and admin_group take
 *    effect for what comes next (a TCP listener left without a token
 *    refuses the reload);
 *  - sources: a [source NAME] gone or changed stops reading and goes once
 *    its running tasks are acked (a changed one starts again with its new
 *    keys at once), a new one starts (sources.c);
 *  - the keys that only a restart applies (the listeners, containment, the
 *    journal's: their row in conf.c's key table says so) keep their running
 *    values, and the ones the file changed are logged by name (the other
 *    metrics_* limits apply to the scrapes that come next).
 *
 * daemon_state->conf is replaced here, on the loop thread: worker threads
 * must never read it (exec tasks hold a reference to the settings they
 * started with, see exec.h).
 */
#include "config.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "net/auth.h"
#include "conf/conf.h"
#include "daemon.h"
#include "exec/exec.h"
#include "net/listen.h"
#include "ops/admission.h"
#include "base/log.h"
#include "obs/metrics.h"
#include "pool/pools.h"
#include "sd.h"
#include "source/sources.h"
#include "task/task.h"

/*
 * One pool to its new figures. The limit goes first when it grows and last
 * when it shrinks, so that each step is within the bounds pool.c checks.
 * The worker bounds follow the file only when the file's own figures
 * changed (old is the running configuration's pool, NULL for none): a live
 * resize stays until the file says another size (or the new limit is below
 * it), and a live pause or resume until the file's paused changes.
 */
static void
reload_pool(struct pools_entry *e, const struct conf_pool *cp, const struct conf_pool *old)
{
	struct pool_snapshot s;
	char *cause = NULL;
	unsigned min = cp->size, max = cp->max_workers != 0 ? cp->max_workers : cp->size;
	bool limit_first, bounds_changed;

	pool_snapshot(e->pool, &s);
	bounds_changed = old == NULL || old->size != cp->size ||
	    (old->max_workers != 0 ? old->max_workers : old->size) != max;
	if (!bounds_changed && s.max_workers <= cp->limit) {
		min = s.min_workers;    /* the live resize stays */
		max = s.max_workers;
	} else if (!bounds_changed)
		log_info("pool %s: the live size %u..%u is above the new limit %u: the file's "
		    "%u..%u applies", e->name, s.min_workers, s.max_workers, cp->limit, min, max);
	limit_first = cp->limit >= s.max_workers;
	if (limit_first && cp->limit != s.limit &&
	    pool_set_limit(e->pool, cp->limit, &cause) == -1)
		goto fail;
	if ((min != s.min_workers || max != s.max_workers) &&
	    pool_resize_bounds(e->pool, min, max, &cause) == -1)
		goto fail;
	if (!limit_first && pool_set_limit(e->pool, cp->limit, &cause) == -1)
		goto fail;
	if (cp->capacity != s.capacity && pool_set_capacity(e->pool, cp->capacity, &cause) == -1)
		goto fail;
	pool_set_keepalive(e->pool, cp->keepalive_ms * 1000);
	pool_set_fair(e->pool, cp->fair);
	pool_set_drop_oldest(e->pool, cp->admission == CONF_ADMISSION_DROP_OLDEST);
	pool_set_owner_limits(e->pool, cp->max_queued_per_owner, cp->max_running_per_owner);
	if (old == NULL || old->paused != cp->paused) {
		if (pool_set_paused(e->pool, cp->paused) != cp->paused)
			log_info("pool %s %s (paused = %s)", e->name,
			    cp->paused ? "paused" : "resumed", cp->paused ? "yes" : "no");
	}
	if (min != s.min_workers || max != s.max_workers || cp->limit != s.limit ||
	    cp->capacity != s.capacity)
		log_info("pool %s: workers %u..%u -> %u..%u, limit %u -> %u, capacity %u -> %u",
		    e->name, s.min_workers, s.max_workers, min, max, s.limit, cp->limit,
		    s.capacity, cp->capacity);
	return;
fail:
	log_warnx("reload: pool %s: %s", e->name, cause ? cause : "out of memory");
	free(cause);
}

static void
reload_pools(struct conf *nc)
{
	char *cause = NULL;

	/* pools gone from the file drain and go away; removing shifts nothing we still use */
	for (size_t i = 0; i < pools_count(); i++) {
		struct pools_entry *e = pools_at(i);
		if (!e->removed && conf_pool_find(nc, e->name) == NULL) {
			admission_reject_all(e);        /* no room will come: closed */
			pools_remove(e);
			i = (size_t)-1;     /* the entry may have been freed: start over */
		}
	}
	for (size_t i = 0; i < nc->npools; i++) {
		struct pools_entry *e = pools_find(nc->pools[i].name);
		if (e != NULL)
			reload_pool(e, &nc->pools[i],
			    conf_pool_find(&daemon_state->conf, nc->pools[i].name));
		else if (pools_add(&nc->pools[i], &cause) == -1) {
			log_warnx("reload: pool %s: %s", nc->pools[i].name,
			    cause ? cause : "out of memory");
			free(cause);
			cause = NULL;
		}
	}
}

/* Logs a multi-line error text one line at a time (journald keeps lines apart). */
static void
reload_log_errors(const char *errors)
{
	const char *s = errors;

	while (s != NULL && *s != '\0') {
		size_t n = strcspn(s, "\n");
		log_warnx("%.*s", (int)n, s);
		s += n + (s[n] == '\n');
	}
}

void
daemon_reload(void)
{
	struct daemon *d = daemon_state;
	struct conf nc, old;
	struct auth *auth = NULL;
	char *errors = NULL, *path, changed[512];
	size_t n;

	if (d->conf.path == NULL) {
		log_notice("SIGHUP: no configuration file (-c) to read again; nothing changed");
		return;
	}
	if (d->phase != DAEMON_RUNNING) {
		log_notice("SIGHUP while shutting down: ignored");
		return;
	}
	sdn_reloading();
	log_notice("SIGHUP: reading %s again", d->conf.path);
	conf_init(&nc);
	if ((path = strdup(d->conf.path)) == NULL)
		goto refused;
	if (conf_read(&nc, path, d->flags, &errors) == -1 ||
	    auth_load(&nc, &auth, &errors) == -1)
		goto refused;
	/* the TCP listeners stay: a reload may not leave one without a token */
	for (size_t i = 0; i < listen_count(); i++)
		if (strncmp(listen_name(i), "tcp ", 4) == 0 &&
		    auth_check_tcp(auth, listen_name(i), false, &errors) == -1)
			goto refused;

	metrics_reload(&nc);        /* before the swap: it says where /metrics stays */
	/* what stats, the journal and the listeners say stays true until the next start */
	if ((n = conf_keep_restart_keys(&nc, &d->conf, changed, sizeof changed)) > 0)
		log_warnx("reload: %s take%s effect at the next start; the running value%s "
		    "stay%s", changed, n == 1 ? "s" : "", n == 1 ? "" : "s", n == 1 ? "s" : "");
	reload_pools(&nc);
	log_set_level(nc.log_level);
	task_set_stream_budget(nc.stream_budget);
	auth_install(auth);
	old = d->conf;
	d->conf = nc;
	memset(&nc, 0, sizeof nc);  /* its memory belongs to d->conf now */
	conf_free(&old);
	exec_configure(&d->conf);   /* tasks already running keep the settings they took */
	sources_reload(&d->conf);   /* after the pools: a new source's pool exists */
	sources_kick();             /* pools may have grown */
	log_notice("configuration reloaded: %zu pool%s", d->conf.npools,
	    d->conf.npools == 1 ? "" : "s");
	goto out;
refused:
	auth_free(auth);
	reload_log_errors(errors ? errors : "reload: out of memory");
	log_warnx("reload refused: the running configuration stays");
out:
	conf_free(&nc);
	free(errors);
	free(path);
	sdn_ready();
}
