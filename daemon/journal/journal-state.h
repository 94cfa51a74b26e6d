/*
 * journal-state.h: what a journal's records add up to: for every task not
 * yet forgotten, where its live records are (the ones a replay needs), and
 * the next task id. Built by replaying records in order (jstate_apply);
 * read by the daemon at start (to rebuild its tasks) and by compaction (to
 * copy the live records into one segment). Pure memory: the segments'
 * bytes belong to the caller (journal-read.c maps them) and must stay
 * while the state is read. One thread at a time.
 *
 * The rules, which make a replay idempotent (a record applied twice in a
 * row changes nothing) and monotonic (nothing goes back from finished):
 *  - ACCEPTED creates the task (a second one for a known id is ignored);
 *  - STARTED with an attempt at least the known one records the start;
 *  - CANCEL marks an unfinished task;
 *  - FINISHED ends it: from then on only that record is live (it carries
 *    what status, list and retention need); later STARTED, CANCEL and
 *    ACCEPTED records for it are ignored;
 *  - FORGOTTEN drops the task: none of its records is live any more;
 *  - NEXT_ID: the last one read counts; the next id is the larger of it
 *    and one past the largest task id seen;
 *  - MARK is for the reader only (journal-format.h).
 * A record about an unknown task other than ACCEPTED and FINISHED is
 * ignored: its task was forgotten, or compacted away, before.
 */
#ifndef TPD_JOURNAL_STATE_H
#define TPD_JOURNAL_STATE_H

#include <stddef.h>
#include <stdint.h>

#include "journal-format.h"

/* Where a record is: in the segment the caller numbered seg, at offset, size bytes in all. */
struct jloc {
	uint64_t offset;
	uint32_t seg;
	uint32_t size;              /* 0 = no such record */
};

/* jtask.flags */
#define JT_ACCEPTED  0x1u
#define JT_STARTED   0x2u
#define JT_CANCELLED 0x4u
#define JT_FINISHED  0x8u

struct jtask {
	uint64_t id;
	unsigned flags;
	uint32_t attempt;           /* of the last STARTED (or FINISHED); 0 = never started */
	struct jloc accepted, started, cancel, finished;
};

struct jstate;

struct jstate *jstate_new(void);
void jstate_free(struct jstate *);

/*
 * Registers the bytes of a segment (whole, with its header) and returns the
 * number records in it are applied under.
 */
uint32_t jstate_add_segment(struct jstate *, const unsigned char *base, size_t len);

/*
 * Applies one record of segment seg. Returns 0, or -1 with *why set (a
 * static message) when a record that checked has content this tpd cannot
 * read (a missing field), or when memory ran out.
 */
int jstate_apply(struct jstate *, uint32_t seg, const struct jrec *rec, const char **why);

/* The next task id: max(last NEXT_ID, largest id seen + 1), at least 1. */
uint64_t jstate_next_id(const struct jstate *);

/* The largest task id a record named (0 when none). */
uint64_t jstate_max_id(const struct jstate *);

/*
 * The tasks not forgotten, in id order (the order they were accepted in).
 * The array belongs to the state; valid until the next jstate_apply.
 */
struct jtask *const *jstate_tasks(struct jstate *, size_t *n);

/* The task with this id, or NULL. */
struct jtask *jstate_find(const struct jstate *, uint64_t id);

/* The bytes of a record (its header first), NULL for a loc with no record. */
const unsigned char *jstate_record(const struct jstate *, const struct jloc *loc);

/* The decoded payloads of a task's records (pointers into the segment's bytes); 0 or -1. */
int jstate_accepted(const struct jstate *, const struct jtask *, struct jaccepted *out);
int jstate_finished(const struct jstate *, const struct jtask *, struct jfinished *out);
/* Its STARTED record (the last start); -1 when it has none. */
int jstate_started(const struct jstate *, const struct jtask *, struct jstarted *out);

/* The sum of the sizes of every live record (the bytes compaction would keep). */
uint64_t jstate_live_bytes(const struct jstate *);

#endif
