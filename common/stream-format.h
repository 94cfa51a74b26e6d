/*
 * stream-format.h: the Redis stream entries of a tpd [source NAME] (README
 * "More than one machine", tpd.conf(5)), shared by tpd (daemon/source: it
 * reads task entries, writes results and dead letters) and tpctl (enqueue
 * writes task entries, results reads results): the field names, the
 * limits, and the readers of a task entry and of a result entry.
 *
 * Pure: no hiredis, no JSON, nothing allocated. A field is bytes with a
 * length (a Redis value may hold any byte, NUL included); what a reader
 * returns points into the fields it was given.
 *
 * A task entry (XADD STREAM * FIELD VALUE ...):
 *   task              the task object as JSON text (required)
 *   id                the entry's own id: any bytes, given back with its result
 *   label             the task's label: UTF-8 text of at most WIRE_MAX_LABEL bytes
 *   queue_timeout_ms  decimal milliseconds, 1 to SFMT_QUEUE_TIMEOUT_MAX_MS
 * Any other field, or one given twice, makes the entry bad: it gets a
 * result at once (state failed, code bad_request) saying what was wrong,
 * with its id field when it has one. The reader here checks all of the
 * above but what needs more than bytes: that the task is a JSON object
 * (nested at most WIRE_MAX_DEPTH - 1 deep) and the label UTF-8 text are
 * the daemon's to check.
 *
 * A result entry (XADD RESULTS [MAXLEN ~ N] * ...), one per task entry:
 *   done      the done event, as JSON text
 *   entry     the task entry's stream id
 *   id        the task entry's id field, when it had one (bad entries too)
 *   consumer  the consumer that read it
 *   attempt   its delivery count (1 for the first), decimal
 *
 * A dead letter (XADD DEAD_LETTER * ...), for an entry delivered more than
 * max_deliveries times: entry, task (its task field as read, or empty),
 * reason.
 *
 * A stream id is MS-SEQ, two decimal 64-bit numbers: at most 41 bytes.
 */
#ifndef TPD_STREAM_FORMAT_H
#define TPD_STREAM_FORMAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* a task entry's fields */
#define SFMT_TASK          "task"
#define SFMT_ID            "id"
#define SFMT_LABEL         "label"
#define SFMT_QUEUE_TIMEOUT "queue_timeout_ms"

/* a result's fields (and id, as above) */
#define SFMT_DONE          "done"
#define SFMT_ENTRY         "entry"
#define SFMT_CONSUMER      "consumer"
#define SFMT_ATTEMPT       "attempt"

/* a dead letter's fields (and entry, task) */
#define SFMT_REASON        "reason"

#define SFMT_QUEUE_TIMEOUT_MAX_MS (30ULL * 24 * 3600 * 1000)   /* 30 days */
#define SFMT_STREAM_ID_SIZE 48  /* holds any stream id, MS-SEQ, and its NUL */
#define SFMT_WHY_SIZE 320       /* holds any of sfmt_entry's messages */

/* Bytes of a field: p NULL when absent. */
struct sfmt_bytes {
	const char *p;
	size_t len;
};

/* A task entry being read: sfmt_entry_init, sfmt_entry_field for each field, sfmt_entry_end. */
struct sfmt_entry {
	struct sfmt_bytes task;
	struct sfmt_bytes id;           /* the first id field, even in a bad entry */
	struct sfmt_bytes label;
	struct sfmt_bytes queue_timeout;
	uint64_t queue_timeout_ms;      /* after sfmt_entry_end: 0 when none */
	bool bad;
	char why[SFMT_WHY_SIZE];        /* when bad: what is wrong, one line of ASCII */
};

void sfmt_entry_init(struct sfmt_entry *);

/*
 * One field of the entry, in the entry's order. The first fault found
 * (an unknown field, one given twice) is kept in why; later fields are
 * still looked at for the entry's id.
 */
void sfmt_entry_field(struct sfmt_entry *, const char *key, size_t keylen, const char *value,
    size_t len);

/*
 * After the last field: the task field is there, the label no longer
 * than WIRE_MAX_LABEL, queue_timeout_ms in range (then set). Returns 0,
 * or -1 with bad set and why filled.
 */
int sfmt_entry_end(struct sfmt_entry *);

/* A result entry's fields, as sfmt_result_field found them (the first of each; others ignored). */
struct sfmt_result {
	struct sfmt_bytes done, entry, id, consumer, attempt;
};

void sfmt_result_init(struct sfmt_result *);
void sfmt_result_field(struct sfmt_result *, const char *key, size_t keylen, const char *value,
    size_t len);

/* True when s[0..len) is a stream id as Redis writes one (MS-SEQ) or as it reads one (MS). */
bool sfmt_stream_id(const char *s, size_t len);

/*
 * Up to 40 bytes of p[0..len) for a message: printable ASCII as it is,
 * other bytes, '"' and '\\' as \xNN, "..." after a cut. buf of at least
 * SFMT_SHOW_SIZE bytes.
 */
#define SFMT_SHOW_SIZE 168
const char *sfmt_show(char *buf, const char *p, size_t len);

#endif
