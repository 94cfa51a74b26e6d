/*
 * journal-sync.c: the sync thread. fdatasync takes a few hundred
 * microseconds here, and a loop that waited for it would serve a few
 * thousand batches a second at most; so the loop writes and goes on, and
 * this thread syncs. One pass syncs every batch written so far: batches
 * written while it runs wait for the next pass, so under load each sync
 * covers what a whole sync's time brought (group commit with pipelining,
 * as Redis' appendfsync always does with its own thread). The result goes
 * back through the journal's eventfd.
 *
 * With journal_sync = commit this thread writes the batches too: the loop
 * hands each pass's records over (jsync_queue: a copy under the lock), and
 * a pass here writes everything handed over since the last one with one
 * pwrite, then fdatasyncs. So while an fdatasync runs, the records of the
 * loop's passes gather in memory and go out together the moment it ends,
 * without a round trip through the loop, and the loop makes no system call
 * for them (it wakes this thread only when it sleeps). Nothing handed over
 * is seen before the fdatasync after its write, as before; a crash loses
 * only records no client was shown.
 *
 * In interval mode the same thread is the timer: it syncs when the oldest
 * write it has not covered is sync_interval old, so an idle tail is synced
 * too. A failed fdatasync is reported once and never retried on that file:
 * the loop marks the journal failed and recovers into a new file
 * (journal.c).
 *
 * After a pass that synced, settings.on_durable (if any) hears of it here,
 * before the loop does: durable.c opens the start gates of the exec tasks
 * whose STARTED records the pass covered, so that a program starts one
 * cross-CPU hand-off (through the loop) sooner.
 *
 * Lock: sy.lock, held only to exchange state, never across a system call
 * (on_durable is called without it).
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/thread.h"
#include "journal-int.h"

/* Until abs_us (monotonic), or a signal. Under sy.lock. */
static void
wait_until(struct jsync *sy, uint64_t abs_us)
{
	struct timespec ts = { (time_t)(abs_us / 1000000), (long)(abs_us % 1000000) * 1000 };

	pthread_cond_timedwait(&sy->cv, &sy->lock, &ts);
}

static void *
jsync_main(void *arg)
{
	struct journal *j = arg;
	struct jsync *sy = &j->sy;
	struct jbuf w = { 0 };      /* what a pass writes, swapped with sy->q */
	uint64_t w_off = 0;

	pthread_mutex_lock(&sy->lock);
	for (;;) {
		uint64_t now = clock_now_us(), target, gen, seq;
		bool due = sy->interval_us != 0 && sy->dirty_since_us != 0 &&
		    now >= sy->dirty_since_us + sy->interval_us;
		bool sync_active = sy->fd != -1 && sy->err == 0 && (sy->want > sy->synced || due ||
		    sy->q.len > 0 || (sy->quit && sy->final && sy->written > sy->synced));
		bool work = (!sy->held || sy->quit) && (sy->nsealed > 0 || sync_active);
		struct jsealed *sealed;
		size_t nsealed;
		int fd, inject, inject_write = 0, err = 0;
		uint64_t err_seq = 0, dt = 0, durable = 0;
		bool synced_one = false, final, stopped, werr = false;

		if (!work) {
			if (sy->quit)
				break;
			if (sy->interval_us != 0 && sy->dirty_since_us != 0)
				wait_until(sy, sy->dirty_since_us + sy->interval_us);
			else
				pthread_cond_wait(&sy->cv, &sy->lock);
			continue;
		}
		target = sy->written;
		gen = sy->gen;
		fd = sy->fd;
		seq = sy->fd_seq;
		sealed = sy->sealed;
		nsealed = sy->nsealed;
		sy->sealed = NULL;
		sy->nsealed = sy->sealed_cap = 0;
		sy->dirty_since_us = 0; /* everything written so far is covered by this pass */
		inject = sy->inject;
		sy->inject = 0;
		if (sync_active && sy->q.len > 0) {
			struct jbuf t = sy->q;

			sy->q = w;
			w = t;
			w_off = sy->q_off;
			inject_write = sy->inject_write;
			sy->inject_write = 0;
		}
		final = sy->quit && sy->final;
		stopped = sy->err != 0; /* after a failure nothing is synced again */
		pthread_mutex_unlock(&sy->lock);

		for (size_t i = 0; i < nsealed; i++) {
			if ((sealed[i].sync || final) && !stopped && err == 0 &&
			    fdatasync(sealed[i].fd) == -1) {
				err = errno;
				err_seq = sealed[i].seq;
			}
			close(sealed[i].fd);
		}
		free(sealed);
		if (err == 0 && w.len > 0) {
			if (inject_write != 0)
				errno = inject_write;
			if (inject_write != 0 || journal_write_all(fd, w.p, w.len, w_off) == -1) {
				err = errno;
				err_seq = seq;
				werr = true;
			}
		}
		jbuf_reset(&w);
		if (err == 0 && sync_active) {
			uint64_t t0 = clock_now_us();
			int r;

			if (inject != 0) {
				errno = inject;
				r = -1;
			} else
				r = fdatasync(fd);
			dt = clock_now_us() - t0;
			synced_one = true;
			if (r == -1) {
				err = errno;
				err_seq = seq;
			}
		}

		pthread_mutex_lock(&sy->lock);
		if (synced_one) {
			sy->syncs++;
			sy->last_us = dt;
			if (dt > sy->max_us)
				sy->max_us = dt;
		}
		if (gen == sy->gen) {
			if (err != 0 && sy->err == 0) {
				sy->err = err;
				sy->err_write = werr;
				sy->err_seq = err_seq;
			} else if (err == 0 && target > sy->synced) {
				sy->synced = target;
				/* fd -1: the loop failed the journal meanwhile; it says what is seen */
				if (j->on_durable != NULL && sy->fd != -1)
					durable = target;
			}
		}
		if (durable != 0) {
			/* before the loop's wake-up: a start gate opens one hand-off sooner */
			pthread_mutex_unlock(&sy->lock);
			j->on_durable(j->arg, durable);
			pthread_mutex_lock(&sy->lock);
		}
		journal_wake(j);
	}
	pthread_mutex_unlock(&sy->lock);
	jbuf_free(&w);
	return NULL;
}

int
jsync_start(struct journal *j, char **cause)
{
	struct jsync *sy = &j->sy;
	int e;

	if ((e = thread_create_unsignalled(&sy->thread, NULL, jsync_main, j)) != 0) {
		if (asprintf(cause, "journal %s: cannot start its sync thread: %s", j->dir,
		    strerror(e)) == -1)
			*cause = NULL;
		return -1;
	}
	sy->started = true;
	return 0;
}

void
jsync_stop(struct journal *j, bool final)
{
	struct jsync *sy = &j->sy;

	if (!sy->started)
		return;
	pthread_mutex_lock(&sy->lock);
	sy->quit = true;
	sy->final = final;
	pthread_cond_signal(&sy->cv);
	pthread_mutex_unlock(&sy->lock);
	pthread_join(sy->thread, NULL);
	sy->started = false;
}

void
jsync_switch(struct journal *j, int fd, uint64_t seq, bool sync, int new_fd, uint64_t new_seq)
{
	struct jsync *sy = &j->sy;

	pthread_mutex_lock(&sy->lock);
	if (fd == -1)
		goto out;
	if (sy->nsealed == sy->sealed_cap) {
		size_t cap = sy->sealed_cap ? sy->sealed_cap * 2 : 4;
		struct jsealed *p = realloc(sy->sealed, cap * sizeof *p);

		if (p == NULL) {
			/* cannot hand it over: close it here, on the loop, unsynced */
			close(fd);
			goto out;
		}
		sy->sealed = p;
		sy->sealed_cap = cap;
	}
	sy->sealed[sy->nsealed].fd = fd;
	sy->sealed[sy->nsealed].seq = seq;
	sy->sealed[sy->nsealed].sync = sync;
	sy->nsealed++;
	if (sync && sy->want < sy->written)
		sy->want = sy->written;
out:
	sy->fd = new_fd;
	sy->fd_seq = new_seq;
	pthread_cond_signal(&sy->cv);
	pthread_mutex_unlock(&sy->lock);
}

int
jsync_queue(struct journal *j, struct jbuf *buf, uint64_t off, uint64_t b)
{
	struct jsync *sy = &j->sy;

	pthread_mutex_lock(&sy->lock);
	if (sy->q.len == 0) {
		/* the thread took what was there: a swap, no copy (both keep their memory) */
		struct jbuf t = sy->q;

		sy->q = *buf;
		*buf = t;
		sy->q_off = off;
	} else {
		jbuf_add(&sy->q, buf->p, buf->len);
		if (sy->q.failed) {
			sy->q.failed = false; /* what it held is intact: jbuf_add added nothing */
			pthread_mutex_unlock(&sy->lock);
			return -1;
		}
	}
	jbuf_reset(buf);
	sy->written = b;
	sy->want = b;
	pthread_cond_signal(&sy->cv);
	pthread_mutex_unlock(&sy->lock);
	return 0;
}
