/*
 * durable.h: the daemon's use of its journal (journal.h): the records of
 * the registry's lifecycle (its hooks), the replay at start, the gate that
 * holds the connections' output until what it stands for is recorded, the
 * storage check of submits, and the journal's part of stats and STATUS=.
 * Loop thread only.
 */
#ifndef TPD_DURABLE_H
#define TPD_DURABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "journal.h"

struct conf;
struct event_base;

/*
 * Start, early (before any thread): takes state_dir's lock and reads the
 * journal (the conf's state_dir, or the default rule). Nothing with
 * journal = off. Exits (fatalx) with one line naming the cause: another
 * tpd's pid, or the file and offset of damage.
 */
void durable_open(const struct conf *c);

/*
 * Start, once the pools exist and before the listeners: replays what
 * durable_open read into the registry and begins the journal.
 */
void durable_start(const struct conf *c, struct event_base *base);

/* At stop (every accepted task done): a clean close with the exact next id. */
void durable_stop(void);

/* The directory the configuration names, or the default rule's, into buf. */
const char *durable_state_dir(const struct conf *c, char *buf, size_t len);

/*
 * Before any output reaches a socket (conn.c's gate): the records appended so far
 * are written. Returns the batch that output put until now waits for: it
 * may go once durable_seen() is at least that (journal_sync says when:
 * commit, once on disk). 0 with the journal off.
 */
uint64_t durable_prepare(void);

/*
 * The batch output given to a connection now depends on (conn.c marks it
 * with the least of this and durable_prepare's): the batch records are
 * appended to now, or 0 for output that depends on no record. answer: a
 * line of an answer (not a done, not a task's stream event); it depends on
 * no record when it is given while a request is handled
 * (durable_dispatch_begin) that appended none: ping, stats, status, list,
 * a refused submit, an error. Those are never held by a failed journal.
 */
uint64_t durable_output_batch(bool answer);

/* ops.c: one request is handled between these two calls. */
void durable_dispatch_begin(void);
void durable_dispatch_end(void);

/* Every batch up to this one may be seen (UINT64_MAX with the journal off). */
uint64_t durable_seen(void);

/*
 * fn is called (loop thread) each time more batches may be seen: the
 * output waiting for them may go (tpd.c gives conn_gate_seen). NULL: none.
 */
void durable_set_seen_hook(void (*fn)(void));

/*
 * True when a submit may be accepted; otherwise *why names the directory
 * and the cause (valid until the next call). Always true with the journal off.
 */
bool durable_writable(const char **why);

/*
 * Before a submit is checked: at journal_max_bytes, forgets the oldest
 * retained results (logged) and asks for a compaction, so that their room
 * comes back. Nothing otherwise.
 */
void durable_make_room(void);

/* A submit was refused (storage) for why: logged, at most once in 10 s with the count. */
void durable_refused(const char *why);

struct task;

/* Loop thread: cancel was asked of t, unfinished: a CANCEL record (a rerun is not made). */
void durable_cancel(struct task *t);

/* True when the journal is on. */
bool durable_on(void);

/* The journal's figures; false with the journal off (out untouched). */
bool durable_stats(struct journal_stats *out);

/*
 * The same as stats' "journal" object (doc/protocol.md): {"state":"off"}
 * with the journal off. A new reference; NULL when out of memory.
 */
json_t *durable_stats_json(void);

/* "journal failed: ..." for STATUS=, or NULL when it is fine or off. */
const char *durable_status(void);

#endif
