/* pools.c: the named pools of the daemon. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "pools.h"

static struct pools_entry *entries[CONF_MAX_POOLS * 2];
static size_t nentries;

static void free_if_drained(struct pools_entry *);

int
pools_add(const struct conf_pool *cp, char **cause)
{
	struct pool_config pc = {
		.name = cp->name, .size = cp->size, .limit = cp->limit, .capacity = cp->capacity,
	};
	struct pools_entry *e;

	if (nentries == sizeof entries / sizeof entries[0]) {
		if (asprintf(cause, "too many pools") == -1)
			*cause = NULL;
		return -1;
	}
	if ((e = calloc(1, sizeof *e)) == NULL || (e->name = strdup(cp->name)) == NULL) {
		free(e);
		if (asprintf(cause, "out of memory") == -1)
			*cause = NULL;
		return -1;
	}
	if ((e->pool = pool_create(&pc, cause)) == NULL) {
		free(e->name);
		free(e);
		return -1;
	}
	entries[nentries++] = e;
	log_info("pool %s: %u worker%s (limit %u), queue capacity %u",
	    cp->name, cp->size, cp->size == 1 ? "" : "s", cp->limit, cp->capacity);
	return 0;
}

int
pools_start(const struct conf *c, char **cause)
{
	for (size_t i = 0; i < c->npools; i++)
		if (pools_add(&c->pools[i], cause) == -1)
			return -1;
	return 0;
}

struct pools_entry *
pools_find(const char *name)
{
	for (size_t i = 0; i < nentries; i++)
		if (!entries[i]->removed && strcmp(entries[i]->name, name) == 0)
			return entries[i];
	return NULL;
}

size_t
pools_count(void)
{
	return nentries;
}

struct pools_entry *
pools_at(size_t i)
{
	return i < nentries ? entries[i] : NULL;
}

void
pools_close_all(enum pool_close_mode mode)
{
	for (size_t i = 0; i < nentries; i++)
		pool_close(entries[i]->pool, mode);
}

static void
pools_free_entry(size_t i)
{
	struct pools_entry *e = entries[i];

	/* Every task is done, so the workers leave at once: this join is short. */
	pool_shutdown(e->pool, POOL_DRAIN, NULL);
	pool_free(e->pool);
	free(e->name);
	free(e);
	memmove(&entries[i], &entries[i + 1], (nentries - i - 1) * sizeof entries[0]);
	nentries--;
}

void
pools_remove(struct pools_entry *e)
{
	e->removed = true;
	pool_close(e->pool, POOL_DRAIN);
	log_info("pool %s removed: draining %lu tasks", e->name, e->outstanding);
	free_if_drained(e);
}

void
pools_task_accepted(struct pools_entry *e)
{
	e->outstanding++;
}

void
pools_task_finished(struct pools_entry *e)
{
	e->outstanding--;
	free_if_drained(e);
}

static void
free_if_drained(struct pools_entry *e)
{
	if (!e->removed || e->outstanding > 0)
		return;
	for (size_t i = 0; i < nentries; i++)
		if (entries[i] == e) {
			log_info("pool %s drained and gone", e->name);
			pools_free_entry(i);
			return;
		}
}

void
pools_stop_all(void)
{
	while (nentries > 0)
		pools_free_entry(nentries - 1);
}
