/* log.h: tpd's logging. Lines go to stderr; journald reads them under systemd. */
#ifndef TPD_LOG_H
#define TPD_LOG_H

#include <stdatomic.h>
#include <syslog.h>

/*
 * Sets the level (LOG_ERR..LOG_DEBUG) and the format: when stderr is the
 * journal's stream (JOURNAL_STREAM names its device and inode), lines carry
 * "<N>" priority prefixes; otherwise they are plain, with a time stamp.
 */
void log_init(int level);
void log_set_level(int level);
int log_get_level(void);

/* Parses "error", "warning", "notice", "info", "debug"; -1 if unknown. */
int log_level_parse(const char *name);
const char *log_level_name(int level);

/*
 * Writes text (one or more lines) to stderr as it is, without time stamps:
 * each line gets a "<N>" prefix when the journal reads stderr. For start-up
 * errors that are the user's answer (a configuration's FILE:LINE: lines),
 * usable before log_init.
 */
void log_lines(int priority, const char *text);

/* log_warn appends strerror(errno); the x variants do not. */
void log_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void log_warnx(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void log_notice(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void log_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/*
 * log_debug(fmt, ...) is a macro: the level is checked where it is called,
 * so a debug line on a path taken per task costs a load and a branch while
 * the level is above debug, not a call and its arguments' evaluation.
 */
extern atomic_int log_level_now;   /* the level (log_init, log_set_level) */
void log_debug_line(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
#define log_debug(...)                                                        \
	do {                                                                  \
		if (atomic_load_explicit(&log_level_now, memory_order_relaxed) >= \
		    LOG_DEBUG)                                                \
			log_debug_line(__VA_ARGS__);                          \
	} while (0)

/*
 * For functions that return -1 and fill a char **cause: sets *cause (the
 * caller frees; NULL if out of memory, or when cause itself is NULL) and
 * returns -1, so a failure is one line: return cause_set(cause, "...", ...);
 */
int cause_set(char **cause, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* For start-up failures and broken invariants only: logs and exits 1. */
void fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
void fatalx(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

#endif
