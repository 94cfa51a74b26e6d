/*
 * sources.h: the daemon's [source NAME] sections, each a source-redis.c
 * consumer plugged into the registry (sources.c; loop thread only).
 *
 * A source's tasks are submitted with tasks_submit like a client's, owned
 * by "redis:NAME", with a sink of sources.c's that hands each task's done
 * to its source (which writes it to the results stream and acks the
 * entry). A finished hook tells the sources of that pool that it may have
 * room again.
 */
#ifndef TPD_SOURCES_H
#define TPD_SOURCES_H

#include <stdbool.h>
#include <stddef.h>

#include <event2/event.h>
#include <jansson.h>

#include "conf/conf.h"

/* At start: one source per [source NAME] of c. Returns 0, or -1 with *cause set. */
int sources_start(struct event_base *base, const struct conf *c, char **cause);

/*
 * SIGHUP, with the new settings: a source gone from nc stops (drain: its
 * running tasks still end and are acked) and goes once idle; a changed one
 * is stopped so and a new one started with nc's keys; a new one starts.
 */
void sources_reload(const struct conf *nc);

/* The pools' figures changed (a resize, a reload): sources may read again. */
void sources_kick(void);

/* Shutdown: no more reads; with now, entries whose tasks are cancelled stay pending. */
void sources_stop(bool now);

/* True when no source has a task in flight or a result left to write. */
bool sources_idle(void);

/* The stats' sources array (new reference). */
json_t *sources_stats(void);

/*
 * Calls fn with each source's figures (source.h), once per name: a
 * source replaced by a reload and still draining is left out while its
 * successor runs, so that no name is counted twice.
 */
struct source_figures;
void sources_each(void (*fn)(const struct source_figures *, void *arg), void *arg);

/* Appends "; source NAME ..." phrases for systemd's STATUS= to buf (of len, holding a string). */
void sources_describe(char *buf, size_t len);

/* Frees every source (at exit). */
void sources_free_all(void);

#endif
