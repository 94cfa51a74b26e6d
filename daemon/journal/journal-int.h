/*
 * journal-int.h: the journal's insides, shared by journal.c (the loop's
 * part), journal-sync.c (the sync thread) and journal-compact.c (the
 * maintenance thread). Nothing outside the journal includes it.
 *
 * Who owns what:
 *  - The loop thread owns struct journal but for sy and mt, every segment's
 *    bookkeeping (where each batch goes is decided there), the pending
 *    batch, and the active segment's fd for writing in interval and none
 *    modes, and in commit mode while the sync thread is not running.
 *  - sy (the sync thread's mailbox) is guarded by sy.lock. The sync thread
 *    fdatasyncs sy.fd, the active segment (the loop may write it at the
 *    same time: pwrite and fdatasync on one fd are safe together), and owns
 *    the fds in sy.sealed, which it syncs once more (unless told not to)
 *    and closes. The loop never closes an fd it gave the sync thread.
 *    In commit mode the loop hands its batches to sy.q instead of writing
 *    them: the sync thread writes them (one write for all the batches
 *    handed over since its last pass) at the offset the loop gave, then
 *    fdatasyncs (journal-sync.c says why). sy.q holds bytes for sy.fd only:
 *    the loop switches segments only when nothing handed over is unsynced.
 *  - mt (the maintenance thread's mailbox) is guarded by mt.lock. The
 *    maintenance thread reads sealed segments, which nobody writes any
 *    more, through its own fds.
 *  - dirlock orders the directory changes of compaction (a rename over a
 *    segment, removals) against the loop's recovery, which makes the
 *    compaction's result obsolete: compaction renames only while holding
 *    it and only if mt.gen is still the generation it was started with.
 *  - Lock order: dirlock, then mt.lock or sy.lock; never both of those.
 */
#ifndef TPD_JOURNAL_INT_H
#define TPD_JOURNAL_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/clock.h"
#include "journal.h"

#define JOURNAL_ID_BLOCK 65536      /* ids one NEXT_ID reservation covers */
#define JOURNAL_RING 64             /* recent writes kept for MARKs */

/* One segment file, as the loop counts it. */
struct jseg {
	uint64_t seq;
	uint64_t data_end;          /* offset after its last record */
	uint64_t alloc;             /* bytes it takes on disk */
	uint64_t dead;              /* bytes of its records released since */
	uint64_t records;
	uint64_t batch_lo, batch_hi; /* refs with a batch in [lo, hi] are here */
	uint64_t synced_to;         /* offset known on disk */
	uint64_t last_mark;         /* the last MARK written in it */
};

struct jsealed {
	int fd;
	uint64_t seq;
	bool sync;                  /* fdatasync before closing */
};

struct jsync {
	pthread_t thread;
	bool started;
	pthread_mutex_t lock;
	pthread_cond_t cv;          /* the thread waits here (CLOCK_MONOTONIC) */
	int fd;                     /* the active segment, -1 = none */
	uint64_t fd_seq;
	struct jsealed *sealed;
	size_t nsealed, sealed_cap;
	struct jbuf q;              /* commit: batches handed over, to be written at q_off */
	uint64_t q_off;
	uint64_t written;           /* the last batch written or handed over (the loop sets it) */
	uint64_t want;              /* sync every batch up to this one as soon as possible */
	uint64_t synced;            /* every batch up to this one is on disk (the thread sets it) */
	uint64_t dirty_since_us;    /* monotonic time of the first write not yet covered; 0 = none */
	uint64_t interval_us;       /* 0 = no timer (commit, none) */
	uint64_t gen;               /* bumped by recovery: a pass of an older one changes nothing */
	int err;                    /* a failed fdatasync or write of sy.q (errno), for the loop */
	bool err_write;             /* err is the write's */
	uint64_t err_seq;           /* the segment it failed on */
	bool quit;
	bool final;                 /* at quit: sync every sealed and the active one, in any mode */
	uint64_t syncs, last_us, max_us;
	int inject;                 /* test hook: the next fdatasync fails with this */
	int inject_write;           /* test hook: the next write of sy.q fails with this */
	bool held;                  /* test hook: no pass starts until released */
};

struct jmaint {
	pthread_t thread;
	bool started;
	pthread_mutex_t lock;
	pthread_cond_t cv;
	bool quit;
	bool job;                   /* a compaction is asked for */
	uint64_t job_max;           /* of the segments up to this one */
	uint64_t job_active_seq;    /* the active segment, whose FORGOTTEN records up to */
	uint64_t job_active_end;    /* ...this offset (written already) drop their tasks too */
	uint64_t job_gen;
	bool running;
	/* the result, for the loop */
	bool done;
	int rc;                     /* 0, or -1 with cause */
	bool dir_failed;            /* rc -1 at the rename or the directory's fsync: the journal fails */
	char *cause;
	uint64_t out_seq, out_bytes, out_records, out_live, duration_us, done_gen;
	atomic_uint_fast64_t gen;   /* bumped to abort a compaction in flight */
};

struct journal {
	char *dir;
	int dirfd;
	int lockfd;
	int efd;                    /* eventfd: the threads' reports */
	enum journal_sync sync;
	uint64_t interval_us, max_bytes, seg_bytes;
	void (*on_seen)(void *, uint64_t);
	void (*on_durable)(void *, uint64_t);
	void (*snapshot)(void *, struct journal_snap *);
	void *arg;
	bool begun;

	struct jseg *segs;          /* oldest first; the last is the active one */
	size_t nsegs, segcap;
	int active_fd;

	struct jbuf pending;        /* the current batch */
	uint64_t pending_records, pending_dead;
	bool pending_sync;          /* the batch must be synced before it is seen */
	uint64_t batch;             /* the current batch's number */
	uint64_t written;           /* the last batch written */
	uint64_t seen;
	uint64_t hold[JOURNAL_RING]; /* interval, none: written batches waiting for a sync */
	size_t nhold;
	struct { uint64_t batch, seq, end; } ring[JOURNAL_RING]; /* recent writes */
	size_t ring_next;
	bool switch_wait;           /* a new segment waits for the old one's last sync */
	bool switch_defer;          /* commit: a batch for a new segment waits until sy.q is synced */
	uint64_t switch_batch;

	uint64_t max_task_id;
	uint64_t next_at_load;
	uint64_t reserved;          /* ids below this may be given: the synced reservation */
	uint64_t reserve_value;     /* a reservation written, not yet synced (0 = none) */
	uint64_t reserve_batch;

	bool prealloc_logged;       /* a segment could not be preallocated: said once */
	bool failed;
	char *error;
	char *why;                  /* journal_writable's message */
	char *last_logged;          /* the last recovery failure logged */
	uint64_t last_logged_us;

	/* replay leftovers, for journal_begin */
	uint64_t torn_seq, torn_off, torn_end; /* torn_seq 0 = none */
	uint64_t *obsolete;
	size_t nobsolete;
	char **leftovers;
	size_t nleftovers;

	/* compaction, as the loop sees it */
	bool compacting;
	uint64_t compact_max;
	uint64_t compact_dead;      /* released during it, in the segments it covers */

	uint64_t batches, compactions, last_compaction_us, recoveries;

	struct jsync sy;
	struct jmaint mt;
	pthread_mutex_t dirlock;
};

struct journal_snap {
	struct journal *j;
	struct jbuf buf;
	uint64_t batch;
	uint64_t records;
};

/* journal.c, for the compaction too: creates name.tmp (O_EXCL, O_NOFOLLOW); -1 with errno. */
int journal_create_tmp(int dirfd, const char *tmp);

/* journal-sync.c */
int jsync_start(struct journal *j, char **cause);
void jsync_stop(struct journal *j, bool final);
/*
 * Loop: hands fd (segment seq, -1 = none) over, to be synced once more if
 * sync is set (asked at once) and closed, and makes new_fd the one synced.
 */
void jsync_switch(struct journal *j, int fd, uint64_t seq, bool sync, int new_fd,
    uint64_t new_seq);
/*
 * Loop, commit mode, the thread running: hands batch b over, the bytes of
 * buf to be written at off of the active segment (contiguous with what was
 * handed over before) and synced. buf is left empty. -1 when memory ran out
 * (nothing was handed over).
 */
int jsync_queue(struct journal *j, struct jbuf *buf, uint64_t off, uint64_t b);

/* journal-compact.c */
int jmaint_start(struct journal *j, char **cause);
void jmaint_stop(struct journal *j);
void jmaint_request(struct journal *j, uint64_t max_seq, uint64_t active_seq,
    uint64_t active_end);

/* journal.c, for the threads: wakes the loop (any thread). */
void journal_wake(struct journal *j);

/*
 * Writes all of buf at off (pwrite, again after EINTR or a short write);
 * -1 with errno (ENOSPC for a write that wrote nothing). Any thread.
 */
int journal_write_all(int fd, const void *buf, size_t len, uint64_t off);

#endif
