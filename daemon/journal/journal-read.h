/*
 * journal-read.h: reading a journal directory back: every segment file
 * mapped, checked and replayed in order into a jstate (journal-state.h).
 * Used at start (the whole journal) and by compaction (the sealed
 * segments). Any thread; the result belongs to its caller.
 *
 * Which segments count: the newest one whose header has JFMT_SEG_SNAPSHOT
 * (a compaction's or a recovery's output) and every later one; older ones
 * are obsolete (a crash came between the snapshot's rename and their
 * removal) and listed to be removed. A torn tail (journal-format.h) is
 * accepted in the last segment that holds data, and dropped; anywhere else
 * it is damage. Damage is refused with the file and the offset named.
 */
#ifndef TPD_JOURNAL_READ_H
#define TPD_JOURNAL_READ_H

#include <stddef.h>
#include <stdint.h>

#include "journal-format.h"
#include "journal-state.h"

struct jread_seg {
	uint64_t seq;
	uint32_t flags;             /* the header's */
	uint64_t made_bytes;        /* JFMT_SEG_SIZED: the size it was made with; else 0 */
	const unsigned char *map;   /* the whole file, read-only */
	size_t len;                 /* the file's size */
	uint64_t blocks_bytes;      /* what it takes on disk (st_blocks) */
	uint32_t index;             /* its number in the state */
	struct jscan_result scan;
};

struct jread {
	struct jstate *state;
	struct jread_seg *segs;     /* replayed, oldest first */
	size_t nsegs;
	uint64_t *obsolete;         /* sequence numbers of segments to remove */
	size_t nobsolete;
	char **leftovers;           /* names of *.tmp files a crash left (to remove) */
	size_t nleftovers;
	size_t torn;                /* index in segs of the segment with a torn tail, or SIZE_MAX */
	uint64_t records;           /* valid records replayed */
};

/*
 * Reads the segments of the directory open as dirfd (named dir in
 * messages) whose sequence numbers are at most max_seq (0: all) and
 * replays them. Returns 0 with *out set, or -1 with *cause set to one line
 * naming the file and the offset (or the system call that failed).
 */
int jread_load(int dirfd, const char *dir, uint64_t max_seq, struct jread **out, char **cause);

/* Unmaps the segments and frees everything, the state too. */
void jread_free(struct jread *);

/*
 * Opens name in the state directory open as dirfd (named dir in messages)
 * with flags (O_CREAT: mode 0600): never through a symbolic link, never
 * blocking (a FIFO), and only a regular file owned by tpd's user. Returns
 * the fd, or -1 with *cause naming the file and what is wrong with it.
 */
int journal_open_file(int dirfd, const char *dir, const char *name, int flags, char **cause);

#endif
