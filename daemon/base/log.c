/* log.c: one line per message on stderr, with journald priority prefixes when it listens. */
#include "config.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "log.h"

/*
 * Read by every thread that logs, set by the loop thread (start, SIGHUP):
 * atomic, so a reload can change it while workers log. log_to_journal is
 * set once, by log_init, before any thread starts.
 */
atomic_int log_level_now = LOG_INFO;
static bool log_to_journal;

static const char *const level_names[] = {
	[LOG_EMERG] = "emerg", [LOG_ALERT] = "alert", [LOG_CRIT] = "crit",
	[LOG_ERR] = "error", [LOG_WARNING] = "warning", [LOG_NOTICE] = "notice",
	[LOG_INFO] = "info", [LOG_DEBUG] = "debug",
};

/* JOURNAL_STREAM is "DEV:INODE" of the stream journald gave us; it must still be stderr. */
static bool
stderr_is_journal(void)
{
	const char *js = getenv("JOURNAL_STREAM");
	unsigned long long dev, ino;
	struct stat st;

	if (js == NULL || sscanf(js, "%llu:%llu", &dev, &ino) != 2)
		return false;
	if (fstat(STDERR_FILENO, &st) == -1)
		return false;
	return (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino;
}

void
log_init(int level)
{
	atomic_store_explicit(&log_level_now, level, memory_order_relaxed);
	log_to_journal = stderr_is_journal();
}

void
log_set_level(int level)
{
	atomic_store_explicit(&log_level_now, level, memory_order_relaxed);
}

int
log_get_level(void)
{
	return atomic_load_explicit(&log_level_now, memory_order_relaxed);
}

int
log_level_parse(const char *name)
{
	for (int i = LOG_ERR; i <= LOG_DEBUG; i++)
		if (strcmp(name, level_names[i]) == 0)
			return i;
	if (strcmp(name, "warn") == 0)
		return LOG_WARNING;
	return -1;
}

const char *
log_level_name(int level)
{
	if (level < LOG_EMERG || level > LOG_DEBUG)
		return "unknown";
	return level_names[level];
}

void
log_lines(int priority, const char *text)
{
	bool journal = stderr_is_journal();

	while (text != NULL && *text != '\0') {
		size_t n = strcspn(text, "\n");
		if (journal)
			fprintf(stderr, "<%d>%.*s\n", priority, (int)n, text);
		else
			fprintf(stderr, "%.*s\n", (int)n, text);
		text += n + (text[n] == '\n');
	}
}

/*
 * Copies text into out (len bytes, NUL included) with its control
 * characters escaped: "\n", "\t", "\x1b", and C1 controls in UTF-8 as
 * "\u009b". A message is one line: a string a peer chose (hello's client,
 * a Redis server's error, a label) cannot begin a forged line of its own,
 * nor carry a "<0>" to journald at the start of one.
 */
static void
log_escape(char *out, size_t len, const char *text)
{
	const unsigned char *p = (const unsigned char *)text;
	size_t o = 0;

	while (*p != '\0' && o + 7 < len) {
		if (*p == '\n' || *p == '\t') {
			out[o++] = '\\';
			out[o++] = *p == '\n' ? 'n' : 't';
			p++;
		} else if (*p < 0x20 || *p == 0x7f) {
			o += (size_t)snprintf(out + o, len - o, "\\x%02x", *p);
			p++;
		} else if (p[0] == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f) {
			o += (size_t)snprintf(out + o, len - o, "\\u%04x", p[1]);
			p += 2;
		} else
			out[o++] = (char)*p++;
	}
	out[o] = '\0';
}

static void __attribute__((format(printf, 3, 0)))
log_vwrite(int priority, const char *suffix, const char *fmt, va_list ap)
{
	char raw[2048], msg[2048 * 2];
	char stamp[32] = "";
	struct timespec ts;
	struct tm tm;

	if (priority > atomic_load_explicit(&log_level_now, memory_order_relaxed))
		return;
	vsnprintf(raw, sizeof raw, fmt, ap);
	log_escape(msg, sizeof msg, raw);
	if (log_to_journal) {
		fprintf(stderr, "<%d>%s%s%s\n", priority, msg,
		    suffix ? ": " : "", suffix ? suffix : "");
		return;
	}
	clock_gettime(CLOCK_REALTIME, &ts);
	localtime_r(&ts.tv_sec, &tm);
	strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M:%S", &tm);
	fprintf(stderr, "%s.%03ld tpd[%d] %s: %s%s%s\n", stamp, ts.tv_nsec / 1000000,
	    (int)getpid(), level_names[priority], msg,
	    suffix ? ": " : "", suffix ? suffix : "");
}

#define LOG_FN(name, prio, with_errno)                                        \
	void name(const char *fmt, ...)                                       \
	{                                                                     \
		int saved = errno;                                            \
		va_list ap;                                                   \
		va_start(ap, fmt);                                            \
		log_vwrite(prio, with_errno ? strerror(saved) : NULL, fmt, ap); \
		va_end(ap);                                                   \
		errno = saved;                                                \
	}

LOG_FN(log_warn, LOG_WARNING, true)
LOG_FN(log_warnx, LOG_WARNING, false)
LOG_FN(log_notice, LOG_NOTICE, false)
LOG_FN(log_info, LOG_INFO, false)
LOG_FN(log_debug_line, LOG_DEBUG, false)

int
cause_set(char **cause, const char *fmt, ...)
{
	va_list ap;

	if (cause == NULL)
		return -1;
	va_start(ap, fmt);
	if (vasprintf(cause, fmt, ap) == -1)
		*cause = NULL;
	va_end(ap);
	return -1;
}

void
fatal(const char *fmt, ...)
{
	int saved = errno;
	va_list ap;

	va_start(ap, fmt);
	log_vwrite(LOG_ERR, strerror(saved), fmt, ap);
	va_end(ap);
	exit(1);
}

void
fatalx(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	log_vwrite(LOG_ERR, NULL, fmt, ap);
	va_end(ap);
	exit(1);
}
