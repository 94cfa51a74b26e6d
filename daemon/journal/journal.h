/*
 * journal.h: tpd's journal, the durable state in state_dir: every accepted
 * task, its starts, its end, cancels, forgets and the next task id, so that
 * a restart (after a crash too) loses nothing that was accepted. The bytes
 * on disk are in journal-format.h; the replay rules in journal-state.h.
 *
 * Loop thread only, except where a comment says otherwise. The journal has
 * two threads of its own: a sync thread (fdatasync off the loop) and a
 * maintenance thread (compaction). Neither touches the daemon's state; they
 * report through an eventfd (journal_event_fd), which the loop watches and
 * answers with journal_process.
 *
 * Group commit. The loop appends records (journal_append) as a loop pass
 * makes them; they gather in one batch, numbered by journal_batch. At the
 * end of the pass journal_flush writes the batch with one write (commit:
 * hands it to the sync thread, which writes it). What "seen" needs of a
 * batch depends on journal_sync:
 *   commit    the batch is on disk: the sync thread runs one write and one
 *             fdatasync for every batch handed over since its last one (the
 *             batches of the passes made while an fdatasync runs gather in
 *             memory and wait for the next), and the loop goes on;
 *   interval  written (in the page cache: a crash of the daemon alone loses
 *             nothing), and synced within sync_interval by the sync thread's
 *             own timer, an idle tail too;
 *   none      written; never synced but for the rare records below.
 * journal_seen says which batches have got there; settings.on_seen is called
 * each time it moves. The daemon holds every event that stands for a record
 * (accepted, started, output, done) until its batch is seen.
 *
 * Task ids: in interval and none modes, a NEXT_ID record reserving ids ahead
 * is synced before ids past the last synced reservation are seen, so that a
 * power cut never makes an id given out be given again. A clean stop writes
 * the exact next id.
 *
 * Segments: the active one takes the appends; when a batch does not fit,
 * a new one is created (written to a temporary name, preallocated,
 * fdatasynced, renamed, the directory fsynced) and the old one is sealed.
 * The first write into the new segment waits (in memory, not on the loop)
 * until the old one's last batch is synced, so that a torn tail can only be
 * in the newest segment. Each batch carries a MARK saying how far its
 * segment was on disk when it was written (journal-format.h says how the
 * reader tells a torn tail from damage with it).
 *
 * Compaction: when the dead bytes of the sealed segments outweigh the live
 * ones twice over (or the journal nears max_bytes), the maintenance thread
 * replays the sealed segments (journal-read.c), writes their live records
 * into one file, fsyncs it, renames it over the newest sealed segment with
 * the SNAPSHOT flag, fsyncs the directory and removes the older ones. The
 * loop only counts bytes: each record's journal_ref, released when the
 * record dies (journal_release), says which segment it is in.
 *
 * Failure: a failed write, fdatasync, segment creation, or compaction
 * rename (or the directory's fsync after one) marks the journal failed
 * (fsyncgate: an fdatasync is never retried on the same file). Until it
 * recovers, journal_writable says no (submits are rejected), batches are
 * not written, and journal_seen does not move: no batch that was not on
 * disk (synced, in commit) when the failure came is ever seen, so what the
 * daemon holds for it stays held. journal_tick tries, at each call (once a
 * second), to write a fresh segment holding a snapshot of the live state,
 * which the daemon gives through settings.snapshot; once it is on disk
 * every older segment is removed, every batch so far is seen, and the
 * journal works again.
 */
#ifndef TPD_JOURNAL_H
#define TPD_JOURNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "conf/conf.h"          /* enum journal_sync, a setting's values */
#include "journal-format.h"
#include "journal-read.h"

struct journal;
struct journal_snap;

/* Where a record went: its batch (which says its segment) and its size on disk. */
struct journal_ref {
	uint64_t batch;
	uint32_t size;              /* 0 = no record */
};

struct journal_settings {
	const char *dir;            /* state_dir; created (0700) if missing */
	enum journal_sync sync;
	uint64_t sync_interval_us;  /* interval mode */
	uint64_t max_bytes;         /* the journal's size on disk: submits refused past it */
	uint64_t segment_bytes;     /* 0: max_bytes / 16, within 64 KiB .. 64 MiB */
	/* Loop thread: batches up to batch may be seen now. */
	void (*on_seen)(void *arg, uint64_t batch);
	/*
	 * Sync thread, optional, called without the journal's locks: batches
	 * up to batch are on disk (written and fdatasynced), before the loop
	 * hears of it. Only leaf locks may be taken, nothing of the journal
	 * called.
	 */
	void (*on_durable)(void *arg, uint64_t batch);
	/*
	 * Loop thread, during recovery: add every live record of the daemon's
	 * state with journal_snap_add (the NEXT_ID record is the journal's).
	 */
	void (*snapshot)(void *arg, struct journal_snap *snap);
	void *arg;
};

struct journal_stats {
	const char *path;           /* state_dir */
	const char *state;          /* "ok" or "failed" */
	const char *error;          /* when failed: what failed, naming the file; else NULL */
	bool at_limit;              /* max_bytes reached: submits are refused */
	uint64_t bytes;             /* on disk, every segment */
	uint64_t max_bytes;
	unsigned segments;
	uint64_t records;           /* in the segments on disk */
	uint64_t appended;          /* records appended since start (the daemon's count) */
	/* the daemon's: what waits for a batch not yet seen (all of it, while failed) */
	size_t held_starts;         /* exec tasks whose program waits for its STARTED record */
	uint64_t segment_bytes;     /* a segment's size */
	uint64_t live_bytes;        /* of records not yet dead */
	uint64_t batches;           /* writes since start */
	uint64_t syncs;             /* fdatasyncs since start */
	uint64_t last_sync_us;      /* the last fdatasync's duration */
	uint64_t max_sync_us;
	uint64_t compactions;
	uint64_t last_compaction_us; /* the last compaction's duration (on its thread) */
	uint64_t recoveries;
	const char *sync_mode;      /* "commit", "interval", "none" */
};

/* Segment size for max_bytes, as settings.segment_bytes = 0 gives it. */
uint64_t journal_segment_bytes(uint64_t max_bytes);

/* "commit", "interval" or "none". */
const char *journal_sync_name(enum journal_sync);

/*
 * Start, step 1: creates the directory if missing (mode 0700, parents
 * too), takes its lock (flock on DIR/lock, holding tpd's pid), and reads
 * every segment (journal-read.h). Returns 0 with *out and *replay (the
 * state to rebuild from; free it with journal_replay_done once used), or
 * -1 with *cause set: one line naming the directory and the other tpd's pid
 * when the lock is held, or the file and offset of damage. A torn tail is
 * logged (file, offset, bytes dropped).
 */
int journal_open(const struct journal_settings *s, struct journal **out, struct jread **replay,
    char **cause);

/* The ref of a record the replay found (for journal_release later). */
struct journal_ref journal_replay_ref(const struct journal *, const struct jread *,
    const struct jloc *loc);

/* Frees the replay (the daemon has copied what it needed). */
void journal_replay_done(struct journal *, struct jread *);

/*
 * Start, step 2, after journal_open and the daemon's use of the replay:
 * drops the torn tail from its file, removes obsolete segments, opens the
 * newest segment for appends (or creates one), writes the first id
 * reservation, and starts the threads. Records appended before (the
 * replay's decisions) go in the first batch. Returns 0, or -1 with *cause.
 */
int journal_begin(struct journal *, char **cause);

/* The batch the next appended record goes in. */
uint64_t journal_batch(const struct journal *);

/*
 * Appends a record to the current batch. Returns where it went (size 0 when
 * memory ran out: the journal is then failed). ACCEPTED records also move
 * the id reservation along.
 */
struct journal_ref journal_append(struct journal *, enum jrec_type type, uint64_t id,
    const void *payload, size_t len);

/*
 * A task id given to a task that has no records of its own (a source's,
 * kept elsewhere: tasks.h): a NEXT_ID reservation past it is appended to
 * the current batch when the one in force (on disk or on its way) does
 * not reach half a block beyond it, so that a restart after a crash never
 * gives that id again. With journal_sync = commit the reservation goes
 * with the group commit of the pass that gave the id. True when a record was
 * appended (the batch is to be written, as after journal_append).
 */
bool journal_reserve_id(struct journal *, uint64_t id);


/* The record ref is dead (superseded, or its task forgotten): for compaction's count. */
void journal_release(struct journal *, struct journal_ref ref);

/* Writes the current batch (the end of a loop pass). Nothing to do when it is empty. */
void journal_flush(struct journal *);

/* Every batch up to this one may be seen (see above). */
uint64_t journal_seen(const struct journal *);

/* Readable when journal_process has something to do. */
int journal_event_fd(const struct journal *);

/* Handles the threads' reports: syncs done (on_seen), failures, compactions. */
void journal_process(struct journal *);

/*
 * True when a submit may be accepted: not failed and not past max_bytes.
 * Otherwise *why (when not NULL) points to a message naming the directory
 * and the cause, valid until the next call.
 */
bool journal_writable(struct journal *, const char **why);

/* True when max_bytes is reached (and the journal is not failed). */
bool journal_at_limit(const struct journal *);

/* The size of a segment (settings.segment_bytes, or the rule for 0). */
uint64_t journal_segment_size(const struct journal *);

/* Asks for a compaction now if the dead records allow one (after records died). */
void journal_compact_soon(struct journal *);

/* Once a second: recovery while failed, and the compaction check. */
void journal_tick(struct journal *);

/* Adds one record to a recovery snapshot; returns its new ref (size 0 when memory ran out). */
struct journal_ref journal_snap_add(struct journal_snap *, enum jrec_type type, uint64_t id,
    const void *payload, size_t len);

void journal_stats(struct journal *, struct journal_stats *out);

/* True while compaction runs (for tests and stats). */
bool journal_compacting(const struct journal *);

/*
 * A clean stop: writes what is pending and the exact next id, syncs (in
 * every mode), stops the threads, and releases the lock. next_id is the
 * daemon's next task id. j is freed.
 */
void journal_close(struct journal *, uint64_t next_id);

/*
 * Test hook: makes the next fdatasync of the sync thread fail with err
 * (EIO), as a disk would. Any thread.
 */
void journal_inject_sync_error(struct journal *, int err);

/*
 * Test hook: with journal_sync = commit, makes the sync thread's next write
 * (of the batches handed over) fail with err (ENOSPC, EIO). Any thread.
 */
void journal_inject_write_error(struct journal *, int err);

/*
 * Test hook: while hold is true the sync thread starts no write or
 * fdatasync (one under way ends), as a slow disk would. Any thread.
 */
void journal_hold_sync(struct journal *, bool hold);

#endif
