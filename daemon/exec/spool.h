/*
 * spool.h: the whole output of exec tasks, kept in files under state_dir
 * ([exec] output_spool, doc/protocol.md), so that a wait from the start
 * (tpctl log, wait --output, follow --from-start) gives all of it, after
 * the task and across a restart, whatever output_limit kept in the result.
 *
 * One file a task, state_dir/spool/ID (mode 0600, in a directory of mode
 * 0700 that tpd owns), opened relative to the directory's descriptor with
 * O_NOFOLLOW. The file is a sequence of records, each a 4-byte header, its
 * type (one byte) and its length (3 bytes, big-endian), then that many
 * bytes:
 *   SPOOL_STDOUT, SPOOL_STDERR   output, in the order it was read (at most
 *                                SPOOL_RECORD_MAX bytes a record)
 *   SPOOL_CUT                    1 byte, why the rest was not kept
 *                                (SPOOL_WHY_*); nothing of the output follows
 *   SPOOL_END                    16 bytes: the bytes the task wrote to stdout
 *                                and to stderr (u64, big-endian), kept or not
 * A file without SPOOL_END belongs to a task that is running, or to one that
 * a crash ended (lost): what is there is what was read. A task that wrote
 * nothing has no file: its done (its result) is all there is.
 *
 * Bounds: output_spool_task_bytes of output a task (past it the task's file
 * gets SPOOL_CUT and nothing more), output_spool_bytes of files in all:
 * when a write would pass it, the files of the oldest finished tasks are
 * removed first (logged, and said to whoever asks for them); a running task
 * that still finds no room is cut (SPOOL_WHY_TOTAL). A task's file goes
 * when the registry forgets the task.
 *
 * Threads: the index of files is under a leaf mutex; a task's writer is
 * its worker's alone (reads of its figures by the loop go under the task's
 * wake_lock, exec.h).
 */
#ifndef TPD_SPOOL_H
#define TPD_SPOOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct conf;

#define SPOOL_STDOUT 1
#define SPOOL_STDERR 2
#define SPOOL_CUT 3
#define SPOOL_END 4
#define SPOOL_HEADER 4
#define SPOOL_RECORD_MAX 65536
#define SPOOL_WHY_TASK 1        /* output_spool_task_bytes */
#define SPOOL_WHY_TOTAL 2       /* output_spool_bytes, with nothing finished left to drop */
#define SPOOL_WHY_ERROR 3       /* a write failed (logged) */

/*
 * Loop thread, at start once state_dir is tpd's (the journal holds its
 * lock), before any worker: opens or makes state_dir/spool. Returns 0, or
 * -1 with *cause set. Not called: spooling is off.
 */
int spool_start(const char *state_dir, const struct conf *c, char **cause);
/*
 * Loop thread, once the registry holds the journal's tasks: counts the
 * files there; known(id) says which tasks the registry has: the others'
 * files are removed.
 */
void spool_scan(bool (*known)(uint64_t id));
/* Loop thread: the limits of c (a reload). */
void spool_configure(const struct conf *c);
void spool_stop(void);
bool spool_on(void);

/* A task's file as its worker writes it. */
struct spool_writer {
	int fd;                 /* -1: not spooling */
	uint64_t task;
	uint64_t written;       /* bytes of the file */
	uint64_t kept[2];       /* output bytes kept of stdout, stderr */
	int cut;                /* 0, or SPOOL_WHY_* */
	bool lazy;              /* the file is made at the first output */
};

/*
 * Worker: the task's writer. Its file is made at the first output (a task
 * with none, as most short commands, makes no file: a file per task made
 * and removed costs more than the task); one that ran before and has a
 * file already starts it over at once (anew: a run again starts over).
 */
void spool_writer_open(struct spool_writer *, uint64_t task);
/* Worker: n bytes of stream (0 stdout, 1 stderr); past a bound, the cut. */
void spool_writer_add(struct spool_writer *, int stream, const void *data, size_t n);
/* Worker: SPOOL_END with what the task wrote in all; closes the file. */
void spool_writer_close(struct spool_writer *, uint64_t seen_out, uint64_t seen_err);

/* Loop thread: the task's file for reading, or -1 (none: errno ENOENT). */
int spool_open_read(uint64_t task);
/* A record read back (spool_read). */
struct spool_record {
	int type;               /* SPOOL_* */
	size_t len;
	unsigned char data[SPOOL_RECORD_MAX];
};
/*
 * Loop thread: the record at *off of fd: 1 (*off moves past it), 0 at
 * the end of what is written so far (a record not whole yet included), -1
 * when it cannot be read or is damaged (logged).
 */
int spool_read(int fd, uint64_t *off, struct spool_record *r);

/* Loop thread: why the task's file was removed to make room, or NULL. */
const char *spool_dropped(uint64_t task);
/* Loop thread: the registry forgot the task: its file goes. */
void spool_forget(uint64_t task);

/* What an operator sees of the spool (stats' "spool", the tpd_spool_* metrics). */
struct spool_figures {
	uint64_t bytes;         /* of the files now */
	uint64_t max_bytes;     /* output_spool_bytes */
	uint64_t files;         /* tasks whose output has a file now */
	uint64_t dropped;       /* files removed to make room since start */
};
/* Any thread: the figures now; false when spooling is off (nothing is set). */
bool spool_figures(struct spool_figures *);

#endif
