/*
 * pools.c: the named pools of the daemon, and the door to their room.
 *
 * Room: a pool armed by pools_want_room calls pools_room_told on whatever
 * thread freed a slot; that sets the entry's room_due and, when it was
 * not set yet, wakes the loop through one eventfd. The loop reads the
 * eventfd, then runs the room hooks of every entry whose room_due it
 * clears: at most one run per pool per loop pass, however many slots
 * freed meanwhile.
 */
#include "config.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "base/log.h"
#include "pools.h"

static struct pools_entry *entries[CONF_MAX_POOLS * 2];
static size_t nentries;

static struct {
	pools_room_fn fn;
	void *arg;
} room_hooks[POOLS_MAX_ROOM_HOOKS];
static size_t nroom_hooks;

static int room_fd = -1;        /* the pools' wake-up of the loop */
static struct event *room_ev;

static void free_if_drained(struct pools_entry *);

/* Any thread: the pool of arg has room for whoever armed it. */
static void
pools_room_told(struct pool *p, void *arg)
{
	struct pools_entry *e = arg;
	uint64_t one = 1;

	/* EAGAIN: the counter is already non-zero, the loop will wake. */
	if (!atomic_exchange(&e->room_due, true) &&
	    write(room_fd, &one, sizeof one) == -1 && errno != EAGAIN)
		abort();
}

/* Loop thread: the eventfd woke us; run the hooks of each pool told of room. */
static void
pools_room_ready(evutil_socket_t fd, short what, void *arg)
{
	uint64_t n;

	/* Read before looking: a pool told after this read wakes us again. */
	if (read(fd, &n, sizeof n) == -1 && errno != EAGAIN)
		return;
	for (size_t i = 0; i < nentries; i++) {
		struct pools_entry *e = entries[i];
		if (atomic_exchange(&e->room_due, false))
			pools_room(e);
		if (i < nentries && entries[i] != e)
			i--;    /* a hook freed e (a removed pool drained): the next took its place */
	}
}

int
pools_add_room_hook(pools_room_fn fn, void *arg)
{
	if (nroom_hooks == POOLS_MAX_ROOM_HOOKS)
		return -1;
	room_hooks[nroom_hooks].fn = fn;
	room_hooks[nroom_hooks].arg = arg;
	nroom_hooks++;
	return 0;
}

void
pools_want_room(struct pools_entry *e)
{
	pool_want_room(e->pool);
}

void
pools_room(struct pools_entry *e)
{
	for (size_t i = 0; i < nroom_hooks; i++)
		room_hooks[i].fn(e, room_hooks[i].arg);
}

/* Any thread, off the pool's lock: what the pool has to say (once per streak). */
static void
pools_warn(struct pool *p, const char *msg, void *arg)
{
	log_warnx("%s", msg);
}

int
pools_add(const struct conf_pool *cp, char **cause)
{
	struct pool_config pc = {
		.name = cp->name, .size = cp->size, .max_workers = cp->max_workers,
		.limit = cp->limit, .capacity = cp->capacity,
		.keepalive_us = cp->keepalive_ms * 1000, .paused = cp->paused, .no_fair = !cp->fair,
		.drop_oldest = cp->admission == CONF_ADMISSION_DROP_OLDEST,
		.max_queued_per_owner = cp->max_queued_per_owner,
		.max_running_per_owner = cp->max_running_per_owner,
		.warn = pools_warn,
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
	if (room_fd != -1) {
		pc.room = pools_room_told;
		pc.room_arg = e;
	}
	if ((e->pool = pool_create(&pc, cause)) == NULL) {
		free(e->name);
		free(e);
		return -1;
	}
	entries[nentries++] = e;
	if (cp->max_workers > cp->size)
		log_info("pool %s: %u to %u workers (keepalive %llu ms, limit %u), queue capacity %u%s",
		    cp->name, cp->size, cp->max_workers, (unsigned long long)cp->keepalive_ms,
		    cp->limit, cp->capacity, cp->paused ? ", paused" : "");
	else
		log_info("pool %s: %u worker%s (limit %u), queue capacity %u%s",
		    cp->name, cp->size, cp->size == 1 ? "" : "s", cp->limit, cp->capacity,
		    cp->paused ? ", paused" : "");
	return 0;
}

int
pools_start(struct event_base *base, const struct conf *c, char **cause)
{
	if ((room_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) == -1) {
		if (asprintf(cause, "eventfd: %s", strerror(errno)) == -1)
			*cause = NULL;
		return -1;
	}
	if ((room_ev = event_new(base, room_fd, EV_READ | EV_PERSIST, pools_room_ready,
	    NULL)) == NULL || event_add(room_ev, NULL) == -1) {
		if (asprintf(cause, "cannot watch the pools' eventfd") == -1)
			*cause = NULL;
		return -1;
	}
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
	if (room_ev != NULL)
		event_free(room_ev);
	room_ev = NULL;
	if (room_fd != -1)
		close(room_fd);
	room_fd = -1;
	nroom_hooks = 0;
}
