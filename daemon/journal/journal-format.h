/*
 * journal-format.h: the journal's bytes on disk, and the pure functions that
 * write and read them (no files, no threads: the writer, the reader, the
 * compactor, the unit tests and the fuzzer all go through these).
 *
 * A journal is a directory of segment files, journal.NNNNNNNNNNNN (the
 * segment's sequence number, 12 decimal digits), each made of a header and
 * records, all integers little-endian:
 *
 *   segment header (40 bytes)
 *     0  magic "tpd-jrnl"
 *     8  u32 format version (JFMT_VERSION)
 *    12  u32 flags: JFMT_SEG_SNAPSHOT, the segment holds the whole state
 *        as of its start, and every segment of a lower number is obsolete
 *    16  u64 sequence number (the file's name says the same)
 *    24  u64 creation time, wall clock, microseconds since the epoch
 *    32  u32 with JFMT_SEG_SIZED: the size the file was made with, in KiB
 *        (rounded down); zero otherwise
 *    36  u32 CRC-32C of bytes 0..35
 *
 *   record (20 bytes of header, then len bytes of payload)
 *     0  u32 CRC-32C of bytes 4..(20 + len): the rest of the header and
 *        the payload
 *     4  u32 len, at most JFMT_MAX_PAYLOAD
 *     8  u8  type (enum jrec_type)
 *     9  u8  zero, u16 zero
 *    12  u64 id: the task's id, or what the type says
 *    20  payload: fields, each a u8 tag, a length (LEB128, at most 5
 *        bytes) and that many bytes; an integer is its value in the
 *        fewest little-endian bytes (0 is no bytes). Unknown tags are
 *        skipped, so a later tpd may add fields without a new version.
 *
 * A segment is preallocated (fallocate) and its unused tail reads as zeros:
 * a record header of 20 zero bytes ends the data (no record is all zeros:
 * its CRC would not match).
 *
 * What a damaged segment means (jfmt_scan): the first record that does not
 * check (a bad CRC, a length past the end of the file, a header of zeros
 * followed by bytes that are not zeros, a bad type or reserved byte) is at
 * offset O. The writer puts a MARK record in each batch it writes after a
 * sync: its id is the offset up to which the segment was then on disk. When
 * no valid record lies anywhere after O, or none of those after O is a MARK
 * past O, the bytes from O on were never known to be on disk: a torn tail
 * (a write a crash cut short, or pages a power cut kept out of order), which
 * the reader drops. When a MARK after O says O was on disk, the bytes at O
 * changed after they were synced: that is damage, and the journal is refused
 * with the file and offset named.
 *
 * A segment with JFMT_SEG_SIZED (every one this tpd makes) was made with its
 * first record (a MARK, or a snapshot's NEXT_ID) and synced, with its size,
 * before it got its name: a file shorter than the size its header says, or
 * whose first record is missing or does not check, held records and lost
 * them. That is damage, never an empty or torn segment.
 *
 * What the records give back is checked as strictly as what a client sends:
 * a task id is at most JFMT_MAX_TASK_ID (the largest integer any JSON reader
 * keeps exact), as is a NEXT_ID.
 */
#ifndef TPD_JOURNAL_FORMAT_H
#define TPD_JOURNAL_FORMAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define JFMT_MAGIC "tpd-jrnl"
#define JFMT_VERSION 1
#define JFMT_SEG_HEADER 40
#define JFMT_REC_HEADER 20
#define JFMT_MAX_PAYLOAD (512u * 1024 * 1024)
#define JFMT_SEG_SNAPSHOT 0x1u
#define JFMT_SEG_SIZED 0x2u     /* bytes 32..35 hold its size; its first record is there */
#define JFMT_SEG_FLAGS_KNOWN (JFMT_SEG_SNAPSHOT | JFMT_SEG_SIZED)
#define JFMT_MAX_TASK_ID ((1ull << 53) - 1)
#define JFMT_NAME_PREFIX "journal."
#define JFMT_NAME_DIGITS 12
#define JFMT_MAX_SEQ 999999999999ull

enum jrec_type {
	/* id: the next task id this journal may give (a reservation, or exact at a clean stop) */
	JREC_NEXT_ID = 1,
	/* id: the task; the task as submitted (JF_* fields below) */
	JREC_ACCEPTED = 2,
	/* id: the task; JF_ATTEMPT, JF_TIME */
	JREC_STARTED = 3,
	/* id: the task; its done as sent, and what status and retention need */
	JREC_FINISHED = 4,
	/* id: the task; cancel was asked (JF_TIME) */
	JREC_CANCEL = 5,
	/* id: the task; its result is no longer retained: the task is gone */
	JREC_FORGOTTEN = 6,
	/* id: offset in this segment up to which the data was synced when this was written */
	JREC_MARK = 7,
};
#define JREC_TYPE_MAX 7

/* Payload field tags. */
enum jfield {
	JF_TIME = 1,          /* u64 wall-clock us: accepted, started, finished or cancel time */
	JF_POOL = 2,          /* text */
	JF_OWNER = 3,         /* text */
	JF_LABEL = 4,         /* text; absent = no label */
	JF_KIND = 5,          /* text: the task kind */
	JF_SPEC = 6,          /* JSON text: the submit request as received (ACCEPTED; FINISHED too:
	                       * status's spec and submit, the key, rerun), or an older build's
	                       * task object alone */
	JF_QUEUE_DEADLINE = 7, /* u64 wall-clock us the task must start by; absent = none */
	JF_ON_LOST = 8,       /* u64: 0 lost, 1 rerun */
	JF_FLAGS = 9,         /* u64: JFL_* */
	JF_ATTEMPT = 10,      /* u64, from 1 */
	JF_STATE = 11,        /* text: the terminal state */
	JF_QUEUED_US = 12,    /* u64 */
	JF_RUN_US = 13,       /* u64 */
	JF_DONE = 14,         /* text: the done event without "{" and "id" (tasks.c's done body) */
	JF_ACCEPTED_TIME = 15, /* u64 wall-clock us (in FINISHED) */
	JF_CALLER_GID = 16,   /* u64: a Unix submitter's gid (SO_PEERCRED); absent = unknown */
	/*
	 * u64 wall-clock us, in STARTED: the attempt JF_ATTEMPT has not run yet,
	 * it is due then (a retry); absent: that attempt began
	 */
	JF_RETRY_AT = 17,
};
#define JF_MAX 17

/* JF_FLAGS bits */
#define JFL_STREAM 0x1u   /* submitted with stream: true */
#define JFL_DETACH 0x2u   /* submitted with detach: true */

/* ---------------------------------------------------------------- writing */

/* A growable byte buffer. Zero-initialized is empty; failed stays set once memory ran out. */
struct jbuf {
	unsigned char *p;
	size_t len, cap;
	bool failed;
};

void jbuf_free(struct jbuf *b);
void jbuf_reset(struct jbuf *b);      /* empties it, keeping the memory */
void jbuf_add(struct jbuf *b, const void *data, size_t n);

/* Payload fields, appended to a payload being built. */
void jfield_u64(struct jbuf *b, enum jfield tag, uint64_t v);
void jfield_mem(struct jbuf *b, enum jfield tag, const void *data, size_t n);
void jfield_str(struct jbuf *b, enum jfield tag, const char *s);   /* NULL: nothing */

/*
 * Appends one whole record (header with its CRC, then payload) to out.
 * Returns its size on disk (JFMT_REC_HEADER + len), or 0 when len is past
 * JFMT_MAX_PAYLOAD or memory ran out (out->failed).
 */
size_t jrec_append(struct jbuf *out, enum jrec_type type, uint64_t id,
    const void *payload, size_t len);

/* Fills hdr[JFMT_SEG_HEADER] for segment seq. */
void jseg_header(unsigned char *hdr, uint64_t seq, uint32_t flags, uint64_t created_us);

/* Sets JFMT_SEG_SIZED and the size a header's file is made with (its checksum again). */
void jseg_header_size(unsigned char *hdr, uint64_t made_bytes);

/* "journal.000000000042" into name (at least 32 bytes). */
void jseg_name(char *name, size_t len, uint64_t seq);

/* The sequence number a directory entry's name gives, or 0 when it is not a segment's. */
uint64_t jseg_name_seq(const char *name);

/* ---------------------------------------------------------------- reading */

/* A segment header, checked. */
struct jseg_info {
	uint32_t version;
	uint32_t flags;
	uint64_t seq;
	uint64_t created_us;
	uint64_t made_bytes;        /* JFMT_SEG_SIZED: at least this many bytes; else 0 */
};

/*
 * Checks a segment header. Returns 0, or -1 with *why set to a static
 * message (too short, not a journal, bad CRC, unknown version or flags).
 */
int jseg_parse_header(const unsigned char *buf, size_t len, struct jseg_info *out,
    const char **why);

/* One record as found in a segment (payload points into the segment's bytes). */
struct jrec {
	enum jrec_type type;
	uint64_t id;
	const unsigned char *payload;
	uint32_t len;
	uint64_t offset;            /* of the record's header in the segment */
	uint32_t size;              /* JFMT_REC_HEADER + len */
};

/* Called for every valid record in order; returns 0, or -1 to stop the scan (an error of the caller's). */
typedef int (*jscan_fn)(const struct jrec *rec, void *arg);

enum jscan_end {
	JSCAN_CLEAN,     /* the records end at data_end; the rest, if any, is zeros */
	JSCAN_TORN,      /* bytes from data_end to torn_end are a torn tail (see above) */
	JSCAN_DAMAGED,   /* a record at bad_offset does not check, and records after it are durable */
	JSCAN_STOPPED,   /* the callback returned -1 */
};

struct jscan_result {
	enum jscan_end end;
	uint64_t data_end;          /* offset just after the last valid record before any damage */
	uint64_t torn_end;          /* JSCAN_TORN: offset just after the last non-zero byte */
	uint64_t torn_records;      /* JSCAN_TORN: valid records found after the gap, dropped too */
	uint64_t bad_offset;        /* JSCAN_TORN, JSCAN_DAMAGED: where the first bad record starts */
	const char *why;            /* JSCAN_TORN, JSCAN_DAMAGED: what was wrong there (static text) */
	uint64_t records;           /* valid records passed to fn */
	uint64_t last_mark;         /* the highest JREC_MARK among them */
};

/*
 * Scans a whole segment, buf[0..len) with its header (checked first: a bad
 * header is JSCAN_DAMAGED at offset 0), and calls fn for each valid record
 * up to data_end. Never reads outside buf. Returns the classification in
 * *res. The caller decides whether a torn tail is acceptable where it is
 * (only in the newest segment that holds data).
 */
void jfmt_scan(const unsigned char *buf, size_t len, jscan_fn fn, void *arg,
    struct jscan_result *res);

/* Payload fields, read one at a time. */
struct jfield_iter {
	const unsigned char *p, *end;
};

struct jfield_val {
	enum jfield tag;            /* may be a tag this tpd does not know */
	const unsigned char *data;
	uint32_t len;
};

void jfield_iter_init(struct jfield_iter *it, const void *payload, size_t len);
/* 1 with *out set, 0 at the end, -1 when the payload is malformed (a length past its end). */
int jfield_next(struct jfield_iter *it, struct jfield_val *out);
/* The field as an integer: 0, or -1 when it is longer than 8 bytes. */
int jfield_get_u64(const struct jfield_val *v, uint64_t *out);

/* The type's name, for messages ("accepted", ...), or "unknown". */
const char *jrec_type_name(unsigned type);

/* ---------------------------------------------------------------- payloads */

/* Text in a payload: not NUL-terminated; p is NULL when the field is absent. */
struct jtext {
	const char *p;
	uint32_t len;
};

/* An ACCEPTED record: the task as submitted. */
struct jaccepted {
	uint64_t time_us;           /* accepted, wall clock */
	uint64_t queue_deadline_us; /* wall clock; 0 = none */
	uint64_t flags;             /* JFL_* */
	bool rerun;                 /* on_lost: rerun */
	bool have_gid;              /* caller_gid is known (a Unix submitter) */
	uint64_t caller_gid;        /* run_as = caller without a passwd entry runs with it */
	struct jtext pool, owner, label, kind;
	struct jtext spec;           /* the submit request as received: its "task" is the task */
};

/* A STARTED record. */
struct jstarted {
	uint64_t attempt;           /* from 1 */
	uint64_t time_us;
	uint64_t retry_at_us;       /* 0: attempt began; else it is due then (wall clock) */
};

/* A FINISHED record: the done as sent, and what status, list and retention need. */
struct jfinished {
	uint64_t attempt;           /* 0 = never started */
	uint64_t time_us;           /* finished, wall clock */
	uint64_t accepted_us;       /* wall clock */
	uint64_t queued_us, run_us;
	struct jtext state, pool, owner, label, kind, done;
	struct jtext spec;          /* JF_SPEC: the submit request as received; absent: unknown */
};

/* Encodes a payload into b (appended; b->failed when memory ran out). */
void jaccepted_encode(struct jbuf *b, const struct jaccepted *a);
void jstarted_encode(struct jbuf *b, const struct jstarted *s);
void jfinished_encode(struct jbuf *b, const struct jfinished *f);
void jcancel_encode(struct jbuf *b, uint64_t time_us);

/*
 * Decodes a payload (pointers into it). Returns 0, or -1 with *why set to a
 * static message naming the field that is missing or malformed. Unknown
 * fields are skipped.
 */
int jaccepted_decode(const void *payload, size_t len, struct jaccepted *out, const char **why);
int jstarted_decode(const void *payload, size_t len, struct jstarted *out, const char **why);
int jfinished_decode(const void *payload, size_t len, struct jfinished *out, const char **why);

#endif
