/*
 * conf.c: tpd's settings: built-in defaults, the table of keys, and the two
 * ways a key is given: a line of the configuration file, or a flag on the
 * command line (every key is both). Both go through one function
 * (key_assign) that checks and stores a value, so a value means the same
 * and is refused with the same message wherever it was written; the checks
 * between keys (a pool's size within its limit) run once, on the result.
 *
 * The file is read by the small tokenizer below (file_read), not libinih.
 * tpd needs every error with its exact line, all of them in one run, and
 * an indented line to be a line like any other; Debian's build of inih
 * gives its handler no line numbers, returns only the line of its first
 * error, and reads an indented line as the continuation of the value above.
 * The reader function that made up for that had come to do all of the
 * reading (lines, comments, trimming, section headers, the lines inih would
 * refuse), leaving inih only the split at '=' and a call order to rely on.
 * The format is small: '[section]' headers, "key = value" lines, and '#' or
 * ';' comments at the start of a line or after white space. inih's limit of
 * 198 characters a line is kept (tpd.conf(5) documents it; listen and env
 * repeat instead of growing a line).
 */
#include "config.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <arpa/inet.h>

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <grp.h>
#include <pwd.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <unistd.h>

#include "conf.h"
#include "base/log.h"
#include "redis-addr.h"
#include "units.h"
#include "wire.h"

struct conf_pool *
conf_pool_find(struct conf *c, const char *name)
{
	for (size_t i = 0; i < c->npools; i++)
		if (strcmp(c->pools[i].name, name) == 0)
			return &c->pools[i];
	return NULL;
}

struct conf_source *
conf_source_find(struct conf *c, const char *name)
{
	for (size_t i = 0; i < c->nsources; i++)
		if (strcmp(c->sources[i].name, name) == 0)
			return &c->sources[i];
	return NULL;
}

const char *
conf_limit_name(enum conf_limit l)
{
	static const char *const names[CONF_NLIMITS] = {
		[CONF_LIMIT_MEMORY_BYTES] = LIMIT_MEMORY_BYTES,
		[CONF_LIMIT_CPU_CORES] = LIMIT_CPU_CORES,
		[CONF_LIMIT_PIDS] = LIMIT_PIDS,
		[CONF_LIMIT_OPEN_FILES] = LIMIT_OPEN_FILES,
		[CONF_LIMIT_CPU_SECONDS] = LIMIT_CPU_SECONDS,
		[CONF_LIMIT_FILE_BYTES] = LIMIT_FILE_BYTES,
	};

	return (unsigned)l < CONF_NLIMITS ? names[l] : "?";
}

int
conf_parse_count(const char *s, unsigned max, unsigned *out)
{
	unsigned long long v = 0;

	if (s == NULL || *s == '\0')
		return -1;
	for (; *s != '\0'; s++) {
		if (!isdigit((unsigned char)*s))
			return -1;
		v = v * 10 + (unsigned)(*s - '0');
		if (v > max)
			return -1;
	}
	*out = (unsigned)v;
	return 0;
}

bool
conf_pool_name_ok(const char *name)
{
	size_t n = strlen(name);

	if (n == 0 || n > CONF_POOL_NAME_MAX)
		return false;
	return strspn(name, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	    "0123456789_.-") == n;
}

int
conf_split_hostport(const char *s, char *host, size_t hostlen,
    char *port, size_t portlen, char **cause)
{
	const char *colon, *h = s, *p;
	size_t hl;
	unsigned portnum;
	struct in6_addr a6;

	if (*s == '[') {
		const char *close = strchr(s, ']');
		if (close == NULL || close[1] != ':')
			return cause_set(cause, "\"%s\" is not [IPV6]:PORT", s);
		h = s + 1;
		hl = (size_t)(close - h);
		p = close + 2;
	} else {
		if ((colon = strrchr(s, ':')) == NULL)
			return cause_set(cause, "\"%s\" is not HOST:PORT", s);
		if (memchr(s, ':', (size_t)(colon - s)) != NULL)
			return cause_set(cause, "\"%s\": an IPv6 address goes in brackets, "
			    "as [::1]:PORT", s);
		hl = (size_t)(colon - s);
		p = colon + 1;
	}
	if (hl == 0)
		return cause_set(cause, "\"%s\" has no host", s);
	if (hl >= hostlen)
		return cause_set(cause, "\"%s\": host too long", s);
	memcpy(host, h, hl);
	host[hl] = '\0';
	if (*s == '[') {
		if (inet_pton(AF_INET6, host, &a6) != 1)
			return cause_set(cause, "\"%s\": \"%s\" is not an IPv6 address",
			    s, host);
	} else if (strcmp(host, "*") != 0 && strspn(host,
	    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789.-") != hl)
		return cause_set(cause, "\"%s\": \"%s\" is not a host name or address",
		    s, host);
	if (conf_parse_count(p, 65535, &portnum) == -1)
		return cause_set(cause, "\"%s\": port must be a number from 0 to 65535", s);
	if (strlen(p) >= portlen)
		return cause_set(cause, "\"%s\": port too long", s);
	strcpy(port, p);
	return 0;
}


/* ---------------------------------------------------------------- the keys */

enum conf_sect { SECT_NONE, SECT_DAEMON, SECT_EXEC, SECT_POOL, SECT_SOURCE, SECT_BAD };

/* What a key's value is read as; conf_kind_info below says how it is kept. */
enum conf_kind {
	KIND_COUNT,     /* unsigned, decimal digits */
	KIND_SIZE,      /* size_t, units.h's size */
	KIND_DURATION,  /* uint64_t milliseconds, units.h's duration */
	KIND_SOCKET,    /* char *, a Unix socket path; empty = the default rule */
	KIND_MODE,      /* mode_t, octal */
	KIND_GROUP,     /* char *, an existing group's name; empty = none */
	KIND_FILE,      /* char *, a readable file; empty = none */
	KIND_LISTEN,    /* repeatable, space-separated HOST:PORT list */
	KIND_ENV,       /* repeatable NAME=value */
	KIND_PATH,      /* char *, any path; empty = the default */
	KIND_RUN_AS,    /* a pool's run_as: daemon, caller or an existing user */
	KIND_LIMIT_SIZE,  /* uint64_t bytes, units.h's size */
	KIND_LIMIT_COUNT, /* uint64_t, decimal digits */
	KIND_LIMIT_CORES, /* uint64_t thousandths of a core, from "0.5", "2" */
	KIND_DIR,       /* char *, a directory's path; empty = the default */
	KIND_HOSTPORT,  /* char *, one HOST:PORT; empty = none */
	KIND_REDIS,     /* char *, common/redis-addr.h's: unix:PATH, HOST[:PORT], ... */
	KIND_NAME,      /* char *, a Redis key or consumer name (no white space) */
	KIND_POOL_NAME, /* char *, a pool's name (that it exists is a cross-check) */
	KIND_ENUM,      /* one word of the row's values table */
};

/* How a key's value is kept in its struct. */
enum conf_store {
	STORE_UINT,     /* unsigned */
	STORE_SIZE,     /* size_t */
	STORE_U64,      /* uint64_t */
	STORE_INT,      /* int */
	STORE_BOOL,     /* bool */
	STORE_MODE,     /* mode_t */
	STORE_STR,      /* char *, NULL when unset */
	STORE_LIST,     /* char *[max], with its count (size_t) at the row's aux */
	STORE_RUN_AS,   /* enum conf_run_as, with its user (char *) at the row's aux */
};

static const struct conf_kind_info {
	enum conf_store store;
	bool empty_ok;          /* an empty value unsets the key */
	const char *meta;       /* the value's name in --help */
} kind_info[] = {
	[KIND_COUNT] = { STORE_UINT, false, "N" },
	[KIND_SIZE] = { STORE_SIZE, false, "SIZE" },
	[KIND_DURATION] = { STORE_U64, false, "DUR" },
	[KIND_SOCKET] = { STORE_STR, true, "PATH" },
	[KIND_MODE] = { STORE_MODE, false, "MODE" },
	[KIND_GROUP] = { STORE_STR, true, "GROUP" },
	[KIND_FILE] = { STORE_STR, true, "FILE" },
	[KIND_LISTEN] = { STORE_LIST, true, "HOST:PORT" },
	[KIND_ENV] = { STORE_LIST, false, "NAME=VALUE" },
	[KIND_PATH] = { STORE_STR, true, "CGROUP" },
	[KIND_RUN_AS] = { STORE_RUN_AS, false, "USER" },
	[KIND_LIMIT_SIZE] = { STORE_U64, false, "SIZE" },
	[KIND_LIMIT_COUNT] = { STORE_U64, false, "N" },
	[KIND_LIMIT_CORES] = { STORE_U64, false, "CORES" },
	[KIND_DIR] = { STORE_STR, true, "DIR" },
	[KIND_HOSTPORT] = { STORE_STR, true, "HOST:PORT" },
	[KIND_REDIS] = { STORE_STR, false, "REDIS" },
	[KIND_NAME] = { STORE_STR, false, "NAME" },
	[KIND_POOL_NAME] = { STORE_STR, false, "POOL" },
	[KIND_ENUM] = { STORE_INT, false, NULL },       /* the enum's store and words */
};

/*
 * The words an enum-like key takes, and what each stores: an int, a bool,
 * or (STORE_STR) the word itself. An alias is read but not listed.
 */
struct conf_enum {
	enum conf_store store;
	const char *what;       /* "a level": "x" is not a level (A, B or C); NULL: "x" is not A, B or C */
	const char *meta;       /* its value in --help; NULL: the words, as A|B|C */
	struct {
		const char *word;
		int value;
		bool alias;
	} v[8];                 /* up to a NULL word */
};

static const struct conf_enum enum_log_level = { STORE_INT, "a level", "LEVEL", {
	{ "error", LOG_ERR, false }, { "warning", LOG_WARNING, false },
	{ "notice", LOG_NOTICE, false }, { "info", LOG_INFO, false },
	{ "debug", LOG_DEBUG, false }, { "warn", LOG_WARNING, true } } };
static const struct conf_enum enum_tcp_auth = { STORE_BOOL, NULL, NULL, {
	{ "token", false, false }, { "none", true, false } } };
static const struct conf_enum enum_containment = { STORE_STR, NULL, NULL, {
	{ "auto", 0, false }, { "cgroup", 0, false }, { "process", 0, false } } };
static const struct conf_enum enum_onoff = { STORE_BOOL, NULL, NULL, {
	{ "on", true, false }, { "off", false, false } } };
static const struct conf_enum enum_yesno = { STORE_BOOL, NULL, NULL, {
	{ "yes", true, false }, { "no", false, false } } };
static const struct conf_enum enum_admission = { STORE_INT, NULL, NULL, {
	{ "reject", CONF_ADMISSION_REJECT, false }, { "wait", CONF_ADMISSION_WAIT, false },
	{ "drop_oldest", CONF_ADMISSION_DROP_OLDEST, false } } };
static const struct conf_enum enum_fair = { STORE_BOOL, NULL, NULL, {
	{ "owner", true, false }, { "none", false, false } } };
static const struct conf_enum enum_journal_sync = { STORE_INT, NULL, NULL, {
	{ "commit", JOURNAL_SYNC_COMMIT, false }, { "interval", JOURNAL_SYNC_INTERVAL, false },
	{ "none", JOURNAL_SYNC_NONE, false } } };
static const struct conf_enum enum_source_type = { STORE_STR, "a source type", NULL, {
	{ "redis-stream", 0, false } } };

/* What a SIGHUP does with a key's new value. */
enum conf_reload {
	RELOAD_LIVE,    /* applied at once: a pool resized, a source restarted, the log level */
	RELOAD_NEXT,    /* read at each use: what comes next (a connection, a task) gets it */
	RELOAD_RESTART, /* read at start only: a reload keeps the running value and logs the change */
};

/*
 * One row per setting: the key of the file and its flag, how its value is
 * read and kept, its bounds, its default, what a reload does with it, and
 * the line that documents it. conf_init applies the defaults from here,
 * conf_free and conf_source_equal walk it, --help is printed from it,
 * reload.c learns from it which keys wait for a restart, and
 * tests/test_conf_table.py holds conf/tpd.conf and tpd.conf(5) to it.
 *
 * ADDING A SETTING is one row here (plus its field in struct conf and its
 * lines in conf/tpd.conf and conf/tpd.conf.5, which that test checks):
 *   { KEY(SECT_DAEMON, "max_widgets", KIND_COUNT, D(max_widgets)),
 *       .min = 1, .max = 1000, .def = "16", .reload = RELOAD_NEXT,
 *       .doc = "most widgets at once" },
 * A word-valued key is KIND_ENUM with .values pointing at a struct
 * conf_enum (its words and what each stores). Give .def as the file would
 * write it ("1M", "10min", "on"); NULL when the default is not a value (the
 * doc line then says what happens unset); a repeatable key's entries are
 * separated by "\n".
 *
 * The flag is --NAME with '_' written '-', or --FLAG when flag is set;
 * letter, when not 0, is its short flag. The flag of a [pool NAME] key
 * sets it for the pool "default" (--pool sets any pool's). The keys of
 * [source NAME] have no flag: a source is a block of the file.
 */
struct conf_key {
	enum conf_sect sect;
	const char *name;
	enum conf_kind kind;
	size_t off;             /* in struct conf, conf_pool (SECT_POOL) or conf_source (SECT_SOURCE) */
	size_t aux;             /* STORE_LIST: its count's offset; STORE_RUN_AS: its user's */
	uint64_t min, max;      /* a number's range; STORE_LIST: most entries */
	const struct conf_enum *values; /* KIND_ENUM */
	const char *def;        /* the built-in default as the file writes it; NULL: unset */
	enum conf_reload reload;
	char letter;
	const char *flag;
	const char *doc;        /* one line, for --help and as tpd.conf(5)'s gist */
};

#define KIB 1024ULL
#define MIB (1024ULL * KIB)
#define GIB (1024ULL * MIB)
#define SEC 1000ULL
#define DAY (24ULL * 3600 * SEC)
#define D(f) offsetof(struct conf, f)
#define P(f) offsetof(struct conf_pool, f)
#define S(f) offsetof(struct conf_source, f)
#define KEY(s, n, k, o) .sect = (s), .name = (n), .kind = (k), .off = (o)
#define NEXT .reload = RELOAD_NEXT
#define LIVE .reload = RELOAD_LIVE
#define RESTART .reload = RELOAD_RESTART

static const struct conf_key conf_keys[] = {
	{ KEY(SECT_DAEMON, "socket", KIND_SOCKET, D(socket)), RESTART, .letter = 's',
	    .doc = "the Unix socket clients connect to (unset: the default rule below)" },
	{ KEY(SECT_DAEMON, "socket_mode", KIND_MODE, D(socket_mode)), .max = 0777, .def = "0660",
	    RESTART, .doc = "permissions of the socket file (octal)" },
	{ KEY(SECT_DAEMON, "socket_group", KIND_GROUP, D(socket_group)), RESTART,
	    .doc = "group of the socket file (unset: tpd's own)" },
	{ KEY(SECT_DAEMON, "listen", KIND_LISTEN, D(listen)), .aux = D(nlisten),
	    .max = CONF_MAX_LISTEN, RESTART, .letter = 'l',
	    .doc = "TCP listeners (unset: no TCP); each needs token_file or tcp_auth = none" },
	{ KEY(SECT_DAEMON, "max_connections", KIND_COUNT, D(max_connections)), .min = 1,
	    .max = 1048576, .def = "1024", NEXT, .doc = "most clients connected at once" },
	{ KEY(SECT_DAEMON, "max_request_bytes", KIND_SIZE, D(max_request_bytes)), .min = 256,
	    .max = GIB, .def = "1M", NEXT, .doc = "the longest request line a client may send" },
	{ KEY(SECT_DAEMON, "max_output_buffer", KIND_SIZE, D(max_output_buffer)), .min = 64 * KIB,
	    .max = GIB, .def = "8M", NEXT,
	    .doc = "unsent output to a client past which tpd stops reading its requests" },
	{ KEY(SECT_DAEMON, "output_stall_timeout", KIND_DURATION, D(output_stall_timeout_ms)),
	    .max = DAY, .def = "60s", NEXT,
	    .doc = "a client that reads none of its answers this long is cut off (0: never)" },
	{ KEY(SECT_DAEMON, "result_ttl", KIND_DURATION, D(result_ttl_ms)), .max = 30 * DAY,
	    .def = "10min", NEXT, .doc = "how long a finished task stays retrievable" },
	{ KEY(SECT_DAEMON, "result_retain", KIND_COUNT, D(result_retain)), .max = 10000000,
	    .def = "10000", NEXT, .doc = "most finished tasks kept" },
	{ KEY(SECT_DAEMON, "result_retain_bytes", KIND_SIZE, D(result_retain_bytes)),
	    .max = 1024 * GIB, .def = "256M", NEXT, .doc = "memory the finished tasks kept may take" },
	{ KEY(SECT_DAEMON, "max_subscriptions", KIND_COUNT, D(max_subscriptions)), .min = 1,
	    .max = 10000000, .def = "10000", NEXT, .doc = "waits one connection may have pending" },
	{ KEY(SECT_DAEMON, "max_scheduled", KIND_COUNT, D(max_scheduled)), .min = 1,
	    .max = 100000000, .def = "100000", NEXT,
	    .doc = "most tasks scheduled (delay_ms, between retries) or waiting (after) at once" },
	{ KEY(SECT_DAEMON, "shutdown_timeout", KIND_DURATION, D(shutdown_timeout_ms)),
	    .max = 7 * DAY, .def = "0", NEXT,
	    .doc = "how long a drain waits for running tasks (0: however long)" },
	{ KEY(SECT_DAEMON, "log_level", KIND_ENUM, D(log_level)), .values = &enum_log_level,
	    .def = "info", LIVE,
	    .doc = "the least important message logged: error, warning, notice, info or debug" },
	{ KEY(SECT_DAEMON, "admin_group", KIND_GROUP, D(admin_group)), NEXT,
	    .doc = "a group whose members may use admin ops on the Unix socket" },
	{ KEY(SECT_DAEMON, "token_file", KIND_FILE, D(token_file)), NEXT,
	    .doc = "the tokens TCP clients present to submit" },
	{ KEY(SECT_DAEMON, "admin_token_file", KIND_FILE, D(admin_token_file)), NEXT,
	    .doc = "the tokens that allow admin ops over TCP" },
	{ KEY(SECT_DAEMON, "tcp_auth", KIND_ENUM, D(tcp_auth_none)), .values = &enum_tcp_auth,
	    .def = "token", NEXT, .doc = "none: TCP clients need no token" },
	{ KEY(SECT_DAEMON, "containment", KIND_ENUM, D(containment)), .values = &enum_containment,
	    .def = "auto", RESTART, .doc = "how exec tasks are contained" },
	{ KEY(SECT_DAEMON, "cgroup_root", KIND_PATH, D(cgroup_root)), RESTART,
	    .doc = "the cgroup2 subtree tpd owns (unset: the one it was started in)" },
	{ KEY(SECT_DAEMON, "state_dir", KIND_DIR, D(state_dir)), RESTART,
	    .doc = "the journal's directory (unset: the default rule of tpd.conf(5))" },
	{ KEY(SECT_DAEMON, "journal", KIND_ENUM, D(journal)), .values = &enum_onoff, .def = "on",
	    RESTART, .doc = "keep every accepted task on disk across restarts" },
	{ KEY(SECT_DAEMON, "journal_sync", KIND_ENUM, D(journal_sync)),
	    .values = &enum_journal_sync, .def = "commit", RESTART,
	    .doc = "what a power cut may cost the journal" },
	{ KEY(SECT_DAEMON, "journal_sync_interval", KIND_DURATION, D(journal_sync_interval_ms)),
	    .min = 1, .max = 60 * SEC, .def = "100ms", RESTART,
	    .doc = "journal_sync = interval: how often records are synced" },
	{ KEY(SECT_DAEMON, "journal_max_bytes", KIND_SIZE, D(journal_max_bytes)), .min = 256 * KIB,
	    .max = 1024 * 1024 * GIB, .def = "1G", RESTART,
	    .doc = "the journal's size on disk; past it submits are rejected" },
	{ KEY(SECT_DAEMON, "journal_segment_size", KIND_SIZE, D(journal_segment_size)),
	    .min = 64 * KIB, .max = GIB, .def = "8M", RESTART,
	    .doc = "each journal file's size, preallocated when the disk has the room" },
	{ KEY(SECT_DAEMON, "metrics_listen", KIND_HOSTPORT, D(metrics_listen)), RESTART,
	    .doc = "serve GET /metrics on this HOST:PORT (unset: off)" },
	{ KEY(SECT_DAEMON, "metrics_max_connections", KIND_COUNT, D(metrics_max_connections)),
	    .min = 1, .max = 1024, .def = "16", NEXT, .doc = "scrape connections open at once" },
	{ KEY(SECT_DAEMON, "metrics_timeout", KIND_DURATION, D(metrics_timeout_ms)), .min = 100,
	    .max = 3600 * SEC, .def = "10s", NEXT, .doc = "a scrape connection idle this long is closed" },
	{ KEY(SECT_DAEMON, "metrics_max_header_bytes", KIND_SIZE, D(metrics_max_header_bytes)),
	    .min = 1 * KIB, .max = MIB, .def = "8k", NEXT,
	    .doc = "the most a scrape's request line and headers may take" },
	{ KEY(SECT_EXEC, "output_limit", KIND_SIZE, D(exec_output_limit)), .max = GIB, .def = "1M",
	    NEXT, .doc = "output kept per stream of an exec task, unless it asks for another" },
	{ KEY(SECT_EXEC, "output_limit_max", KIND_SIZE, D(exec_output_limit_max)), .max = GIB,
	    .def = "16M", NEXT, .doc = "the largest output_limit a task may ask for" },
	{ KEY(SECT_EXEC, "kill_grace", KIND_DURATION, D(exec_kill_grace_ms)), .max = 3600 * SEC,
	    .def = "5s", NEXT, .doc = "SIGTERM to SIGKILL for a task timed out or cancelled" },
	{ KEY(SECT_EXEC, "env", KIND_ENV, D(exec_env)), .aux = D(nexec_env), .max = CONF_MAX_ENV,
	    .def = "PATH=/usr/local/bin:/usr/bin:/bin\nLANG=C.UTF-8", NEXT,
	    .doc = "a variable of exec tasks' base environment (tpd's own never leaks)" },
	{ KEY(SECT_EXEC, "stream_budget", KIND_SIZE, D(stream_budget)), .min = 4 * KIB,
	    .max = GIB, .def = "256k", NEXT,
	    .doc = "output events a streaming task may have on their way" },
	{ KEY(SECT_EXEC, "stdin_buffer", KIND_SIZE, D(exec_stdin_buffer)), .min = 4 * KIB,
	    .max = GIB, .def = "1M", NEXT,
	    .doc = "a streamed stdin held per task; past it the sender is not read" },
	{ KEY(SECT_EXEC, "output_spool", KIND_ENUM, D(exec_output_spool)), .values = &enum_onoff,
	    .def = "on", RESTART,
	    .doc = "keep exec tasks' whole output in state_dir/spool (needs the journal)" },
	{ KEY(SECT_EXEC, "output_spool_task_bytes", KIND_SIZE, D(exec_output_spool_task_bytes)),
	    .min = 4 * KIB, .max = 1024 * 1024 * GIB, .def = "1G", LIVE,
	    .doc = "most output spooled per task; the rest is not kept" },
	{ KEY(SECT_EXEC, "output_spool_bytes", KIND_SIZE, D(exec_output_spool_bytes)),
	    .min = 4 * KIB, .max = 1024 * 1024 * GIB, .def = "10G", LIVE,
	    .doc = "most spool files in all; the oldest finished tasks' go first" },
	{ KEY(SECT_POOL, "size", KIND_COUNT, P(size)), .min = 1, .max = CONF_POOL_MAX_LIMIT,
	    .def = "4", LIVE, .letter = 'w', .flag = "workers",
	    .doc = "target workers (the pool default: the number of CPUs, within its limit)" },
	{ KEY(SECT_POOL, "min_workers", KIND_COUNT, P(min_workers)), .min = 1,
	    .max = CONF_POOL_MAX_LIMIT, LIVE,
	    .doc = "an elastic pool's fewest workers (unset: size; with max_workers only: 1)" },
	{ KEY(SECT_POOL, "max_workers", KIND_COUNT, P(max_workers)), .min = 1,
	    .max = CONF_POOL_MAX_LIMIT, LIVE,
	    .doc = "an elastic pool's most workers, started as tasks come (unset: min_workers)" },
	{ KEY(SECT_POOL, "keepalive", KIND_DURATION, P(keepalive_ms)), .min = 1, .max = 7 * DAY,
	    .def = "60s", LIVE, .doc = "a worker above min_workers idle this long leaves" },
	{ KEY(SECT_POOL, "limit", KIND_COUNT, P(limit)), .min = 1, .max = CONF_POOL_MAX_LIMIT,
	    .def = "64", LIVE, .doc = "most workers a resize may ask for" },
	{ KEY(SECT_POOL, "capacity", KIND_COUNT, P(capacity)), .min = 1,
	    .max = CONF_POOL_MAX_CAPACITY, .def = "1024", LIVE, .letter = 'q', .flag = "queue",
	    .doc = "tasks that may wait when every worker is busy" },
	{ KEY(SECT_POOL, "admission", KIND_ENUM, P(admission)), .values = &enum_admission,
	    .def = "reject", LIVE,
	    .doc = "a submit to a full queue: reject, wait for room, or drop_oldest" },
	{ KEY(SECT_POOL, "admission_timeout", KIND_DURATION, P(admission_timeout_ms)), .min = 1,
	    .max = DAY, .def = "30s", LIVE,
	    .doc = "admission = wait: the longest a submit is held before queue_full" },
	{ KEY(SECT_POOL, "max_held", KIND_COUNT, P(max_held)), .max = 10000000, .def = "10000",
	    LIVE, .doc = "admission = wait: most submits held at once; past it, queue_full" },
	{ KEY(SECT_POOL, "paused", KIND_ENUM, P(paused)), .values = &enum_yesno, .def = "no",
	    LIVE, .doc = "yes: the pool starts no queued task (until resume, or this changes)" },
	{ KEY(SECT_POOL, "fair", KIND_ENUM, P(fair)), .values = &enum_fair, .def = "owner", LIVE,
	    .doc = "owner: take turns between owners at the highest priority; none: FIFO" },
	{ KEY(SECT_POOL, "max_queued_per_owner", KIND_COUNT, P(max_queued_per_owner)), .min = 1,
	    .max = CONF_POOL_MAX_CAPACITY, LIVE,
	    .doc = "most tasks one owner may have queued in the pool (unset: no limit)" },
	{ KEY(SECT_POOL, "max_running_per_owner", KIND_COUNT, P(max_running_per_owner)),
	    .min = 1, .max = CONF_POOL_MAX_LIMIT, LIVE,
	    .doc = "most tasks of one owner running at once in the pool (unset: no limit)" },
	{ KEY(SECT_POOL, "run_as", KIND_RUN_AS, P(run_as)), .aux = P(run_as_user),
	    .def = "daemon", NEXT, .doc = "who exec tasks run as: daemon, caller or a user" },
#define LIMIT_KEYS(prefix, field, what) \
	{ KEY(SECT_POOL, prefix "memory_bytes", KIND_LIMIT_SIZE, \
	    P(field[CONF_LIMIT_MEMORY_BYTES])), .min = 64 * KIB, .max = 1024 * GIB, NEXT, \
	    .doc = what "memory (unset: none)" }, \
	{ KEY(SECT_POOL, prefix "cpu_cores", KIND_LIMIT_CORES, P(field[CONF_LIMIT_CPU_CORES])), \
	    .min = 10, .max = 1024 * 1000, NEXT, .doc = what "CPU cores (unset: none)" }, \
	{ KEY(SECT_POOL, prefix "pids", KIND_LIMIT_COUNT, P(field[CONF_LIMIT_PIDS])), .min = 1, \
	    .max = 4194304, NEXT, .doc = what "processes (unset: none)" }, \
	{ KEY(SECT_POOL, prefix "open_files", KIND_LIMIT_COUNT, \
	    P(field[CONF_LIMIT_OPEN_FILES])), .min = 3, .max = 1 << 30, NEXT, \
	    .doc = what "open files (unset: none)" }, \
	{ KEY(SECT_POOL, prefix "cpu_seconds", KIND_LIMIT_COUNT, \
	    P(field[CONF_LIMIT_CPU_SECONDS])), .min = 1, .max = 366 * 24 * 3600, NEXT, \
	    .doc = what "CPU time in seconds (unset: none)" }, \
	{ KEY(SECT_POOL, prefix "file_bytes", KIND_LIMIT_SIZE, P(field[CONF_LIMIT_FILE_BYTES])), \
	    .min = 0, .max = 1024 * 1024 * GIB, NEXT, \
	    .doc = what "size of a file written (unset: none)" }
	LIMIT_KEYS("limit_", limits, "an exec task's default limit of "),
	LIMIT_KEYS("max_limit_", max_limits, "the most a task may ask for of "),
#undef LIMIT_KEYS
	{ KEY(SECT_SOURCE, "type", KIND_ENUM, S(type)), .values = &enum_source_type, LIVE,
	    .doc = "required: the source's type" },
	{ KEY(SECT_SOURCE, "redis", KIND_REDIS, S(redis)), LIVE,
	    .doc = "required: where Redis listens, unix:PATH or HOST[:PORT]" },
	{ KEY(SECT_SOURCE, "stream", KIND_NAME, S(stream)), LIVE,
	    .doc = "required: the stream of tasks" },
	{ KEY(SECT_SOURCE, "group", KIND_NAME, S(group)), LIVE,
	    .doc = "required: the consumer group to read as (created if missing)" },
	{ KEY(SECT_SOURCE, "consumer", KIND_NAME, S(consumer)), LIVE,
	    .doc = "this tpd's name in the group (unset: the host name)" },
	{ KEY(SECT_SOURCE, "pool", KIND_POOL_NAME, S(pool)), .def = "default", LIVE,
	    .doc = "the pool that runs the tasks" },
	{ KEY(SECT_SOURCE, "results", KIND_NAME, S(results)), LIVE,
	    .doc = "the stream of results (unset: STREAM:results)" },
	{ KEY(SECT_SOURCE, "dead_letter", KIND_NAME, S(dead_letter)), LIVE,
	    .doc = "the stream of entries delivered too often (unset: STREAM:dead)" },
	{ KEY(SECT_SOURCE, "claim_idle", KIND_DURATION, S(claim_idle_ms)), .min = 100, .max = DAY,
	    .def = "60s", LIVE, .doc = "an entry pending this long is claimed by another consumer" },
	{ KEY(SECT_SOURCE, "max_deliveries", KIND_COUNT, S(max_deliveries)), .min = 1,
	    .max = 1000, .def = "3", LIVE, .doc = "deliveries before an entry is a dead letter" },
	{ KEY(SECT_SOURCE, "results_maxlen", KIND_COUNT, S(results_maxlen)), .max = 1000000000,
	    .def = "100000", LIVE, .doc = "the results stream is trimmed to about this (0: never)" },
	{ KEY(SECT_SOURCE, "timeout", KIND_DURATION, S(timeout_ms)), .min = 100, .max = 600 * SEC,
	    .def = "5s", LIVE, .doc = "how long a connect or a command may wait for Redis" },
	{ KEY(SECT_SOURCE, "backoff_max", KIND_DURATION, S(backoff_max_ms)), .min = 100,
	    .max = 600 * SEC, .def = "5s", LIVE, .doc = "the longest wait between reconnects" },
};

#undef KEY
#undef NEXT
#undef LIVE
#undef RESTART
#define CONF_NKEYS (sizeof conf_keys / sizeof conf_keys[0])

static enum conf_store
key_store(const struct conf_key *k)
{
	return k->kind == KIND_ENUM ? k->values->store : kind_info[k->kind].store;
}

static const struct conf_key *
key_find(enum conf_sect sect, const char *name)
{
	for (size_t i = 0; i < CONF_NKEYS; i++)
		if (conf_keys[i].sect == sect && strcmp(conf_keys[i].name, name) == 0)
			return &conf_keys[i];
	return NULL;
}

static const char *
sect_label(enum conf_sect sect)
{
	switch (sect) {
	case SECT_DAEMON: return "[daemon]";
	case SECT_EXEC: return "[exec]";
	case SECT_POOL: return "[pool NAME]";
	case SECT_SOURCE: return "[source NAME]";
	default: return "no section";
	}
}

/* An enum's words, listed as the messages list them: "a, b or c" (sep ", ") or "a|b|c" (sep "|"). */
static void
enum_words(const struct conf_enum *e, const char *sep, const char *last, char *buf, size_t len)
{
	size_t n = 0, i = 0;

	for (size_t j = 0; e->v[j].word != NULL; j++)
		n += !e->v[j].alias;
	buf[0] = '\0';
	for (size_t j = 0; e->v[j].word != NULL; j++) {
		if (e->v[j].alias)
			continue;
		snprintf(buf + strlen(buf), len - strlen(buf), "%s%s",
		    i == 0 ? "" : i + 1 == n ? last : sep, e->v[j].word);
		i++;
	}
}

/* ---------------------------------------------------------------- the flags */

#define CONF_FLAG_MAX 48        /* a long flag's name, with its NUL */
#define FLAG_POOL 0x0fff        /* getopt_long's value for --pool */
#define FLAG_KEY 0x1000         /* and for conf_keys[i]'s flag: FLAG_KEY + i */

/* One flag of the command line, as conf_read applies it. */
struct conf_override {
	const struct conf_key *key;
	char *pool;             /* a [pool NAME] key's pool */
	char *value;
	char *label;            /* the flag and its value as written: "-w 4", "--pool io:4: size" */
	char *pool_label;       /* --pool's: "--pool io:4", for errors about the pool */
	bool pool_first;        /* the first key of its --pool: the one that reports them */
};

struct conf_flags {
	struct conf_override *v;
	size_t n, cap;
	struct option *longopts;
	char *names;            /* the keys' long names, CONF_FLAG_MAX bytes each */
	char *shortopts;
};

/* "max-request-bytes" for max_request_bytes, or the key's own flag name. */
static void
key_flag_name(const struct conf_key *k, char *buf, size_t len)
{
	snprintf(buf, len, "%s", k->flag != NULL ? k->flag : k->name);
	for (char *s = buf; *s != '\0'; s++)
		if (*s == '_')
			*s = '-';
}

struct conf_flags *
conf_flags_new(const struct option *own, const char *own_short)
{
	struct conf_flags *f;
	size_t nown = 0, j;
	char *s;

	while (own[nown].name != NULL)
		nown++;
	if ((f = calloc(1, sizeof *f)) == NULL)
		return NULL;
	f->longopts = calloc(nown + CONF_NKEYS + 2, sizeof *f->longopts);
	f->names = calloc(CONF_NKEYS, CONF_FLAG_MAX);
	f->shortopts = malloc(strlen(own_short) + 2 * CONF_NKEYS + 2);
	if (f->longopts == NULL || f->names == NULL || f->shortopts == NULL) {
		conf_flags_free(f);
		return NULL;
	}
	memcpy(f->longopts, own, nown * sizeof *own);
	j = nown;
	s = f->shortopts;
	*s++ = ':';
	s = stpcpy(s, own_short);
	for (size_t i = 0; i < CONF_NKEYS; i++) {
		char *name = f->names + i * CONF_FLAG_MAX;
		if (conf_keys[i].sect == SECT_SOURCE)
			continue;
		key_flag_name(&conf_keys[i], name, CONF_FLAG_MAX);
		f->longopts[j++] = (struct option){ name, required_argument, NULL,
		    FLAG_KEY + (int)i };
		if (conf_keys[i].letter != 0) {
			*s++ = conf_keys[i].letter;
			*s++ = ':';
		}
	}
	*s = '\0';
	f->longopts[j] = (struct option){ "pool", required_argument, NULL, FLAG_POOL };
	return f;
}

void
conf_flags_free(struct conf_flags *f)
{
	if (f == NULL)
		return;
	for (size_t i = 0; i < f->n; i++) {
		free(f->v[i].pool);
		free(f->v[i].value);
		free(f->v[i].label);
		free(f->v[i].pool_label);
	}
	free(f->v);
	free(f->longopts);
	free(f->names);
	free(f->shortopts);
	free(f);
}

const struct option *
conf_flags_longopts(const struct conf_flags *f)
{
	return f->longopts;
}

const char *
conf_flags_shortopts(const struct conf_flags *f)
{
	return f->shortopts;
}

/* Appends one key's value; pool_label is set for --pool's keys. */
static int
flags_push(struct conf_flags *f, const struct conf_key *k, const char *pool,
    const char *value, const char *pool_label, bool pool_first, char **cause,
    const char *fmt, ...) __attribute__((format(printf, 8, 9)));

static int
flags_push(struct conf_flags *f, const struct conf_key *k, const char *pool,
    const char *value, const char *pool_label, bool pool_first, char **cause,
    const char *fmt, ...)
{
	struct conf_override *o;
	va_list ap;
	int r;

	if (f->n == f->cap) {
		size_t n = f->cap ? f->cap * 2 : 16;
		if ((o = realloc(f->v, n * sizeof *o)) == NULL)
			return cause_set(cause, "out of memory");
		f->v = o;
		f->cap = n;
	}
	o = &f->v[f->n];
	memset(o, 0, sizeof *o);
	o->key = k;
	o->pool_first = pool_first;
	va_start(ap, fmt);
	r = vasprintf(&o->label, fmt, ap);
	va_end(ap);
	if (r == -1)
		o->label = NULL;
	o->value = strdup(value);
	o->pool = pool != NULL ? strdup(pool) : NULL;
	o->pool_label = pool_label != NULL ? strdup(pool_label) : NULL;
	if (o->label == NULL || o->value == NULL || (pool != NULL && o->pool == NULL) ||
	    (pool_label != NULL && o->pool_label == NULL)) {
		free(o->label);
		free(o->value);
		free(o->pool);
		free(o->pool_label);
		return cause_set(cause, "out of memory");
	}
	f->n++;
	return 0;
}

/* --pool NAME:SIZE[:CAPACITY[:LIMIT]]: up to three keys of [pool NAME]. */
static int
flags_add_pool(struct conf_flags *f, const char *flag, const char *spec, char **cause)
{
	static const char *const keys[] = { NULL, "size", "capacity", "limit" };
	char *copy, *field[4], *p, *label = NULL;
	size_t n = 0;
	int rv = 0;

	if ((copy = strdup(spec)) == NULL)
		return cause_set(cause, "out of memory");
	for (p = copy; n < 4 && p != NULL; n++) {
		field[n] = p;
		if ((p = strchr(p, ':')) != NULL)
			*p++ = '\0';
	}
	if (p != NULL || n < 2 || *field[0] == '\0') {
		free(copy);
		return cause_set(cause, "%s %s: expected NAME:SIZE[:CAPACITY[:LIMIT]]", flag, spec);
	}
	if (asprintf(&label, "%s %s", flag, spec) == -1) {
		free(copy);
		return cause_set(cause, "out of memory");
	}
	for (size_t i = 1; rv == 0 && i < n; i++)
		rv = flags_push(f, key_find(SECT_POOL, keys[i]), field[0], field[i], label,
		    i == 1, cause, "%s: %s", label, keys[i]);
	free(label);
	free(copy);
	return rv;
}

int
conf_flags_add(struct conf_flags *f, int ch, int longindex, const char *arg, char **cause)
{
	const struct conf_key *k = NULL;
	char flag[CONF_FLAG_MAX + 2];

	if (longindex >= 0)
		snprintf(flag, sizeof flag, "--%s", f->longopts[longindex].name);
	else
		snprintf(flag, sizeof flag, "-%c", ch);
	if (ch == FLAG_POOL)
		return flags_add_pool(f, flag, arg, cause);
	if (ch >= FLAG_KEY && (size_t)(ch - FLAG_KEY) < CONF_NKEYS)
		k = &conf_keys[ch - FLAG_KEY];
	for (size_t i = 0; k == NULL && ch > 0 && ch < 256 && i < CONF_NKEYS; i++)
		if (conf_keys[i].letter == ch)
			k = &conf_keys[i];
	if (k == NULL)
		return 1;
	return flags_push(f, k, k->sect == SECT_POOL ? "default" : NULL, arg, NULL, false,
	    cause, "%s %s", flag, *arg != '\0' ? arg : "\"\"");
}

/* A figure of k's kind as --help and the messages write it: "1024", "1M", "10s". */
static const char *
key_format(const struct conf_key *k, uint64_t v, char *buf, size_t len)
{
	if (k->kind == KIND_SIZE || k->kind == KIND_LIMIT_SIZE)
		return units_format_size(v, buf, len);
	if (k->kind == KIND_DURATION)
		return units_format_duration(v, buf, len);
	snprintf(buf, len, "%llu", (unsigned long long)v);
	return buf;
}

/* The value a key's flag takes, as --help names it. */
static void
key_meta(const struct conf_key *k, char *buf, size_t len)
{
	if (k->kind == KIND_ENUM && k->values->meta != NULL)
		snprintf(buf, len, "%s", k->values->meta);
	else if (k->kind == KIND_ENUM)
		enum_words(k->values, "|", "|", buf, len);
	else
		snprintf(buf, len, "%s", kind_info[k->kind].meta);
}

/*
 * The key's range (" (1 to 1024)") or ", repeatable", its default (", default
 * 1M"), and ", read at start" when only a restart applies a change.
 */
static void
key_usage_facts(FILE *out, const struct conf_key *k)
{
	char lo[32], hi[32];

	if (k->kind == KIND_LIMIT_CORES)
		fprintf(out, " (%llu.%02llu to %llu)", (unsigned long long)(k->min / 1000),
		    (unsigned long long)(k->min % 1000 / 10), (unsigned long long)(k->max / 1000));
	else if (k->kind == KIND_COUNT || k->kind == KIND_LIMIT_COUNT || k->kind == KIND_SIZE ||
	    k->kind == KIND_LIMIT_SIZE || k->kind == KIND_DURATION)
		fprintf(out, " (%s to %s)", key_format(k, k->min, lo, sizeof lo),
		    key_format(k, k->max, hi, sizeof hi));
	else if (key_store(k) == STORE_LIST)
		fprintf(out, ", repeatable");
	if (k->def != NULL) {
		fprintf(out, ", default ");
		for (const char *d = k->def; *d != '\0'; d++)
			if (*d == '\n')
				fputs(" and ", out);
			else
				fputc(*d, out);
	}
	if (k->reload == RELOAD_RESTART)
		fprintf(out, ", read at start");
}

/* The key's line of doc, under its flag. */
static void
key_usage_doc(FILE *out, const struct conf_key *k)
{
	fprintf(out, "        %s\n", k->doc);
}

void
conf_flags_usage(FILE *out)
{
	char text[CONF_NKEYS][CONF_FLAG_MAX + 64], name[CONF_FLAG_MAX], meta[64];
	int width = 0, n;

	for (size_t i = 0; i < CONF_NKEYS; i++) {
		const struct conf_key *k = &conf_keys[i];
		text[i][0] = '\0';
		key_meta(k, meta, sizeof meta);
		if (k->sect == SECT_SOURCE)
			n = snprintf(text[i], sizeof text[i], "    %s %s", k->name, meta);
		else {
			key_flag_name(k, name, sizeof name);
			if (k->letter != 0)
				n = snprintf(text[i], sizeof text[i], "-%c, --%s %s", k->letter,
				    name, meta);
			else
				n = snprintf(text[i], sizeof text[i], "    --%s %s", name, meta);
		}
		if (n > width)
			width = n;
	}
	for (size_t i = 0; i < CONF_NKEYS; i++) {
		const struct conf_key *k = &conf_keys[i];
		if (k->sect == SECT_SOURCE)
			continue;
		fprintf(out, "  %-*s  [%s] %s", width, text[i], k->sect == SECT_DAEMON ?
		    "daemon" : k->sect == SECT_EXEC ? "exec" : "pool default", k->name);
		key_usage_facts(out, k);
		fputc('\n', out);
		key_usage_doc(out, k);
	}
	fprintf(out, "      --pool NAME:SIZE[:CAPACITY[:LIMIT]]\n"
	    "  %-*s  [pool NAME] size, capacity and limit, repeatable\n", width, "");
	fprintf(out, "\nThe keys of a [source NAME] of the file (they have no flag):\n");
	for (size_t i = 0; i < CONF_NKEYS; i++) {
		const struct conf_key *k = &conf_keys[i];
		if (k->sect != SECT_SOURCE)
			continue;
		fprintf(out, "  %-*s  [source NAME] %s", width, text[i], k->name);
		key_usage_facts(out, k);
		fputc('\n', out);
		key_usage_doc(out, k);
	}
}

/* ---------------------------------------------------------------- reading */

#define CONF_MAX_ERRORS 200
#define CONF_MAX_LINE 198       /* characters of a line once its comment is cut */

struct conf_error {
	int line;               /* 0: about the file, or no line */
	bool flag;              /* about a flag: after the file's, the text whole */
	unsigned seq;           /* keeps the order of errors on one line */
	char *text;
};

/* Where a key (or "[" for the header) of a section was given. */
struct conf_seen {
	char *sect;
	char *key;
	int line;                               /* first in the file, or 0 */
	const struct conf_override *flag;       /* the last flag that set it, or NULL */
};

struct conf_load {
	const char *path;       /* NULL: no file */
	FILE *fp;
	struct conf *c;
	int line;
	char *raw;
	size_t rawcap;
	const struct conf_override *flag;       /* the flag being applied, NULL for the file */

	struct conf_error *errs;
	size_t nerrs, errcap;
	size_t dropped;         /* errors past CONF_MAX_ERRORS */

	/* the section the reader saw last, or the flag's */
	enum conf_sect sect;
	char sect_name[8 + CONF_POOL_NAME_MAX];  /* "daemon", "exec", "pool NAME", "source NAME" */
	struct conf_pool *pool;
	struct conf_source *source;

	struct conf_seen *seen;
	size_t nseen, seencap;
	bool listen_given;      /* the first listen (the file's, then a flag's) replaced c's */
};

/* Keeps text (a malloc'd error) in l; NULL text counts as dropped. */
static void
error_add(struct conf_load *l, int line, bool flag, char *text)
{
	if (text == NULL || l->nerrs == CONF_MAX_ERRORS) {
		free(text);
		l->dropped++;
		return;
	}
	if (l->nerrs == l->errcap) {
		size_t n = l->errcap ? l->errcap * 2 : 16;
		struct conf_error *e = realloc(l->errs, n * sizeof *e);
		if (e == NULL) {
			free(text);
			l->dropped++;
			return;
		}
		l->errs = e;
		l->errcap = n;
	}
	l->errs[l->nerrs].line = line;
	l->errs[l->nerrs].flag = flag;
	l->errs[l->nerrs].seq = (unsigned)l->nerrs;
	l->errs[l->nerrs].text = text;
	l->nerrs++;
}

static char * __attribute__((format(printf, 1, 0)))
vformat(const char *fmt, va_list ap)
{
	char *text;

	return vasprintf(&text, fmt, ap) == -1 ? NULL : text;
}

/* An error at a line of the file (0: about the file as a whole). */
static void __attribute__((format(printf, 3, 4)))
load_error(struct conf_load *l, int line, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	error_add(l, line, false, vformat(fmt, ap));
	va_end(ap);
}

/* An error about a flag: "tpd: LABEL: message". */
static void __attribute__((format(printf, 3, 4)))
flag_error(struct conf_load *l, const char *label, const char *fmt, ...)
{
	va_list ap;
	char *msg, *text = NULL;

	va_start(ap, fmt);
	msg = vformat(fmt, ap);
	va_end(ap);
	if (msg != NULL && asprintf(&text, "tpd: %s: %s", label, msg) == -1)
		text = NULL;
	free(msg);
	error_add(l, 0, true, text);
}

/*
 * An error about the key being read: "[SECTION] KEY: message" at the
 * file's line, or "tpd: FLAG VALUE: message" for the flag being applied.
 */
static void __attribute__((format(printf, 3, 4)))
key_error(struct conf_load *l, const char *key, const char *fmt, ...)
{
	va_list ap;
	char *msg;

	va_start(ap, fmt);
	msg = vformat(fmt, ap);
	va_end(ap);
	if (msg == NULL)
		error_add(l, l->line, l->flag != NULL, NULL);
	else if (l->flag != NULL)
		flag_error(l, l->flag->label, "%s", msg);
	else
		load_error(l, l->line, "[%s] %s: %s", l->sect_name, key, msg);
	free(msg);
}

static struct conf_seen *
seen_find(const struct conf_load *l, const char *sect, const char *key)
{
	for (size_t i = 0; i < l->nseen; i++)
		if (strcmp(l->seen[i].sect, sect) == 0 && strcmp(l->seen[i].key, key) == 0)
			return &l->seen[i];
	return NULL;
}

static struct conf_seen *
seen_add(struct conf_load *l, const char *sect, const char *key)
{
	struct conf_seen *s;

	if (l->nseen == l->seencap) {
		size_t n = l->seencap ? l->seencap * 2 : 32;
		if ((s = realloc(l->seen, n * sizeof *s)) == NULL)
			return NULL;
		l->seen = s;
		l->seencap = n;
	}
	s = &l->seen[l->nseen];
	s->sect = strdup(sect);
	s->key = strdup(key);
	s->line = 0;
	s->flag = NULL;
	if (s->sect == NULL || s->key == NULL) {
		free(s->sect);
		free(s->key);
		return NULL;
	}
	l->nseen++;
	return s;
}

/* The file gives sect/key at the current line; returns the earlier line, or 0 if first. */
static int
seen_note(struct conf_load *l, const char *sect, const char *key)
{
	struct conf_seen *s = seen_find(l, sect, key);

	if (s != NULL)
		return s->line;
	if ((s = seen_add(l, sect, key)) != NULL)
		s->line = l->line;
	return 0;
}

/* The flag being applied gives sect/key, over what the file said. */
static void
seen_flag(struct conf_load *l, const char *sect, const char *key)
{
	struct conf_seen *s = seen_find(l, sect, key);

	if (s == NULL)
		s = seen_add(l, sect, key);
	if (s != NULL)
		s->flag = l->flag;
}

/*
 * An error about sect's key about, told where src (a key of sect, or "["
 * for its header) was given: by a flag, at a line of the file, or else at
 * no line.
 */
static void __attribute__((format(printf, 5, 6)))
source_error(struct conf_load *l, const char *sect, const char *about, const char *src,
    const char *fmt, ...)
{
	const struct conf_seen *s = seen_find(l, sect, src);
	va_list ap;
	char *msg;

	va_start(ap, fmt);
	msg = vformat(fmt, ap);
	va_end(ap);
	if (msg == NULL)
		error_add(l, 0, false, NULL);
	else if (s != NULL && s->flag != NULL && strcmp(s->flag->key->name, about) == 0)
		flag_error(l, s->flag->label, "%s", msg);
	else if (s != NULL && s->flag != NULL)
		flag_error(l, s->flag->label, "[%s] %s: %s", sect, about, msg);
	else
		load_error(l, s != NULL ? s->line : 0, "[%s] %s: %s", sect, about, msg);
	free(msg);
}

/* Levenshtein distance, for "did you mean"; names are short. */
static size_t
edit_distance(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b), row[64];

	if (la >= 63 || lb >= 63)
		return SIZE_MAX;
	for (size_t j = 0; j <= lb; j++)
		row[j] = j;
	for (size_t i = 1; i <= la; i++) {
		size_t diag = row[0];
		row[0] = i;
		for (size_t j = 1; j <= lb; j++) {
			size_t up = row[j], best = diag + (a[i - 1] != b[j - 1]);
			if (up + 1 < best)
				best = up + 1;
			if (row[j - 1] + 1 < best)
				best = row[j - 1] + 1;
			row[j] = best;
			diag = up;
		}
	}
	return row[lb];
}

static void
key_unknown(struct conf_load *l, const char *name)
{
	const struct conf_key *near = NULL, *elsewhere = NULL;
	size_t best = 3;

	for (size_t i = 0; i < CONF_NKEYS; i++) {
		const struct conf_key *k = &conf_keys[i];
		size_t d;

		if (k->sect != l->sect) {
			if (strcmp(k->name, name) == 0)
				elsewhere = k;
			continue;
		}
		d = edit_distance(name, k->name);
		if (d < best) {
			best = d;
			near = k;
		}
	}
	if (elsewhere != NULL)
		key_error(l, name, "unknown key here (it belongs in %s)",
		    sect_label(elsewhere->sect));
	else if (near != NULL)
		key_error(l, name, "unknown key (did you mean %s?)", near->name);
	else
		key_error(l, name, "unknown key");
}

/* Decimal digits into a u64: 0, -1 when not digits, -2 when too large. */
static int
parse_digits(const char *s, uint64_t *out)
{
	uint64_t v = 0;

	if (*s == '\0')
		return -1;
	for (; *s != '\0'; s++) {
		if (!isdigit((unsigned char)*s))
			return -1;
		if (v > (UINT64_MAX - 9) / 10)
			return -2;
		v = v * 10 + (uint64_t)(*s - '0');
	}
	*out = v;
	return 0;
}

static void
set_string(char **slot, const char *value)
{
	free(*slot);
	*slot = *value != '\0' ? strdup(value) : NULL;
}

static void
set_group(struct conf_load *l, const struct conf_key *k, char **slot, const char *value)
{
	struct group gr, *res = NULL;
	char buf[4096];

	if (*value != '\0' &&
	    (getgrnam_r(value, &gr, buf, sizeof buf, &res) != 0 || res == NULL)) {
		key_error(l, k->name, "no group named \"%s\"", value);
		return;
	}
	set_string(slot, value);
}

/* Only the form is checked: names are resolved when tpd listens (listen.c). */
static void
set_listen(struct conf_load *l, const struct conf_key *k, const char *value)
{
	struct conf *c = l->c;
	char *copy, *tok, *save = NULL, host[256], port[8], *cause;

	if (!l->listen_given) {
		for (size_t i = 0; i < c->nlisten; i++)
			free(c->listen[i]);
		c->nlisten = 0;
		l->listen_given = true;
	}
	if ((copy = strdup(value)) == NULL)
		return;
	for (tok = strtok_r(copy, " \t", &save); tok != NULL;
	    tok = strtok_r(NULL, " \t", &save)) {
		bool dup = false;
		if (conf_split_hostport(tok, host, sizeof host, port, sizeof port,
		    &cause) == -1) {
			key_error(l, k->name, "%s", cause ? cause : "out of memory");
			free(cause);
			continue;
		}
		for (size_t i = 0; i < c->nlisten; i++)
			dup = dup || strcmp(c->listen[i], tok) == 0;
		if (dup)
			key_error(l, k->name, "%s given twice", tok);
		else if (c->nlisten == CONF_MAX_LISTEN)
			key_error(l, k->name, "%s: too many addresses (at most %d)", tok,
			    CONF_MAX_LISTEN);
		else if ((c->listen[c->nlisten] = strdup(tok)) != NULL)
			c->nlisten++;
	}
	free(copy);
}

/* One HOST:PORT, form only (resolved when tpd listens); empty: none. */
static void
set_hostport(struct conf_load *l, const struct conf_key *k, char **slot, const char *value)
{
	char host[256], port[8], *cause = NULL;

	if (value[strcspn(value, " \t")] != '\0') {
		key_error(l, k->name, "\"%s\": one HOST:PORT, not a list", value);
		return;
	}
	if (*value != '\0' && conf_split_hostport(value, host, sizeof host, port, sizeof port,
	    &cause) == -1) {
		key_error(l, k->name, "%s", cause ? cause : "out of memory");
		free(cause);
		return;
	}
	set_string(slot, value);
}

static void
set_env(struct conf_load *l, const struct conf_key *k, const char *value)
{
	struct conf *c = l->c;
	const char *eq = strchr(value, '=');
	size_t n;
	char seenkey[128];
	int first;

	if (eq == NULL || eq == value) {
		key_error(l, k->name, "\"%s\" is not NAME=value", value);
		return;
	}
	n = (size_t)(eq - value);
	if (isdigit((unsigned char)*value) || strspn(value,
	    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_") != n) {
		key_error(l, k->name, "\"%.*s\" is not a variable name (letters, digits, _)",
		    (int)n, value);
		return;
	}
	/* the file may set a variable once; a later flag replaces it, as flags do */
	snprintf(seenkey, sizeof seenkey, "env %.*s", (int)n, value);
	if (l->flag == NULL && (first = seen_note(l, l->sect_name, seenkey)) != 0) {
		key_error(l, k->name, "%.*s already set at line %d", (int)n, value, first);
		return;
	}
	for (size_t i = 0; i < c->nexec_env; i++) {
		if (strncmp(c->exec_env[i], value, n + 1) == 0) {
			set_string(&c->exec_env[i], value);
			return;
		}
	}
	if (c->nexec_env == CONF_MAX_ENV)
		key_error(l, k->name, "too many variables (at most %d)", CONF_MAX_ENV);
	else if ((c->exec_env[c->nexec_env] = strdup(value)) != NULL)
		c->nexec_env++;
}

/* A pool's run_as: "daemon", "caller" or the name of a user that exists. */
static void
set_run_as(struct conf_load *l, const struct conf_key *k, struct conf_pool *p,
    const char *value)
{
	struct passwd pw, *res = NULL;
	char buf[4096];

	free(p->run_as_user);
	p->run_as_user = NULL;
	if (strcmp(value, "daemon") == 0)
		p->run_as = CONF_RUN_AS_DAEMON;
	else if (strcmp(value, "caller") == 0)
		p->run_as = CONF_RUN_AS_CALLER;
	else if (getpwnam_r(value, &pw, buf, sizeof buf, &res) != 0 || res == NULL)
		key_error(l, k->name, "no user named \"%s\" (run_as is daemon, caller "
		    "or a user name)", value);
	else {
		p->run_as = CONF_RUN_AS_USER;
		p->run_as_user = strdup(value);
	}
}

/* "0.5", "2", "1.25": thousandths of a core; -1 when not such a number. */
static int
parse_cores(const char *s, uint64_t *out)
{
	uint64_t whole = 0, frac = 0;
	int digits = 0;

	if (!isdigit((unsigned char)*s))
		return -1;
	for (; isdigit((unsigned char)*s); s++) {
		whole = whole * 10 + (uint64_t)(*s - '0');
		if (whole > 1000000)
			return -1;
	}
	if (*s == '.') {
		for (s++; isdigit((unsigned char)*s); s++, digits++)
			if (digits < 3)
				frac = frac * 10 + (uint64_t)(*s - '0');
		if (digits == 0)
			return -1;
		for (int i = digits; i < 3; i++)
			frac *= 10;
	}
	if (*s != '\0')
		return -1;
	*out = whole * 1000 + frac;
	return 0;
}

/* limit_* and max_limit_*: a size, a count or cores, within the key's range. */
static void
set_limit(struct conf_load *l, const struct conf_key *k, void *slot, const char *value)
{
	uint64_t v = 0;
	char *why = NULL;
	int r;

	switch (k->kind) {
	case KIND_LIMIT_SIZE:
		if ((r = units_parse_size(value, &v, &why)) == -1) {
			key_error(l, k->name, "%s", why != NULL ? why : "out of memory");
			free(why);
			return;
		}
		free(why);
		if (r == -2)
			v = UINT64_MAX;
		break;
	case KIND_LIMIT_CORES:
		if (parse_cores(value, &v) == -1) {
			key_error(l, k->name, "\"%s\" is not a number of cores (like 0.5 "
			    "or 2)", value);
			return;
		}
		break;
	default:
		if ((r = parse_digits(value, &v)) == -1) {
			key_error(l, k->name, "\"%s\" is not a whole number", value);
			return;
		}
		if (r == -2)
			v = UINT64_MAX;
		break;
	}
	if (v < k->min || v > k->max) {
		if (k->kind == KIND_LIMIT_CORES)
			key_error(l, k->name, "%s is out of range (0.01 to %llu)", value,
			    (unsigned long long)(k->max / 1000));
		else
			key_error(l, k->name, "%s is out of range (%llu to %llu)", value,
			    (unsigned long long)k->min, (unsigned long long)k->max);
		return;
	}
	*(uint64_t *)slot = v;
}

/*
 * Where Redis listens, as tpctl's --redis reads it too (common/redis-addr.h:
 * unix:PATH, /PATH, HOST[:PORT], [IPV6][:PORT]); a host is resolved when tpd
 * connects.
 */
static void
set_redis(struct conf_load *l, const struct conf_key *k, void *slot, const char *value)
{
	struct redis_addr a;
	char *cause = NULL;

	if (redis_addr_parse(value, &a, &cause) == -1) {
		key_error(l, k->name, "%s", cause ? cause : "out of memory");
		free(cause);
		return;
	}
	set_string(slot, value);
}

/* A count, a size or a duration within k's range, kept in k's store. */
static void
set_number(struct conf_load *l, const struct conf_key *k, void *slot, const char *value)
{
	uint64_t v = 0;
	char lo[32], hi[32], got[32], *why = NULL;
	int r;

	if (k->kind == KIND_COUNT)
		r = parse_digits(value, &v);
	else if (k->kind == KIND_SIZE)
		r = units_parse_size(value, &v, &why);
	else
		r = units_parse_duration(value, &v, &why);
	if (r == -1 && k->kind == KIND_COUNT)
		key_error(l, k->name, "\"%s\" is not a whole number", value);
	else if (r == -1)
		key_error(l, k->name, "%s", why != NULL ? why : "out of memory");
	free(why);
	if (r == -1)
		return;
	if (r == -2 || v < k->min || v > k->max) {
		/* a count as written; a size or a duration as read, unless too large to read */
		key_error(l, k->name, "%s is out of range (%s to %s)",
		    r == -2 || k->kind == KIND_COUNT ? value : key_format(k, v, got, sizeof got),
		    key_format(k, k->min, lo, sizeof lo), key_format(k, k->max, hi, sizeof hi));
		return;
	}
	if (key_store(k) == STORE_UINT)
		*(unsigned *)slot = (unsigned)v;
	else if (key_store(k) == STORE_SIZE)
		*(size_t *)slot = (size_t)v;
	else
		*(uint64_t *)slot = v;
}

/* One word of the key's values table, kept as the table says. */
static void
set_enum(struct conf_load *l, const struct conf_key *k, void *slot, const char *value)
{
	const struct conf_enum *e = k->values;
	const char *noun;
	char words[128];

	for (size_t j = 0; e->v[j].word != NULL; j++) {
		if (strcmp(value, e->v[j].word) != 0)
			continue;
		if (e->store == STORE_BOOL)
			*(bool *)slot = e->v[j].value != 0;
		else if (e->store == STORE_STR)
			set_string(slot, value);
		else
			*(int *)slot = e->v[j].value;
		return;
	}
	enum_words(e, ", ", " or ", words, sizeof words);
	if (e->what == NULL)
		key_error(l, k->name, "\"%s\" is not %s", value, words);
	else if (strchr(words, ' ') != NULL)
		key_error(l, k->name, "\"%s\" is not %s (%s)", value, e->what, words);
	else {
		noun = strrchr(e->what, ' ') != NULL ? strrchr(e->what, ' ') + 1 : e->what;
		key_error(l, k->name, "\"%s\" is not %s (the one %s is %s)", value, e->what, noun,
		    words);
	}
}

/* Checks value against k and stores it at base + k->off. */
static void
key_set(struct conf_load *l, const struct conf_key *k, char *base, const char *value)
{
	void *slot = base + k->off;
	uint64_t v = 0;

	switch (k->kind) {
	case KIND_COUNT:
	case KIND_SIZE:
	case KIND_DURATION:
		set_number(l, k, slot, value);
		return;
	case KIND_SOCKET:
		if (strlen(value) >= sizeof ((struct sockaddr_un *)0)->sun_path) {
			key_error(l, k->name, "path longer than %zu bytes",
			    sizeof ((struct sockaddr_un *)0)->sun_path - 1);
			return;
		}
		set_string(slot, value);
		return;
	case KIND_MODE:
		if (*value == '\0' || strspn(value, "01234567") != strlen(value) ||
		    strlen(value) > 4 || (v = strtoull(value, NULL, 8)) > k->max) {
			key_error(l, k->name, "\"%s\" is not an octal mode like 0660", value);
			return;
		}
		*(mode_t *)slot = (mode_t)v;
		return;
	case KIND_GROUP:
		set_group(l, k, slot, value);
		return;
	case KIND_FILE:
		if (*value != '\0' && access(value, R_OK) == -1) {
			key_error(l, k->name, "cannot read %s: %s", value, strerror(errno));
			return;
		}
		set_string(slot, value);
		return;
	case KIND_LISTEN:
		set_listen(l, k, value);
		return;
	case KIND_ENV:
		set_env(l, k, value);
		return;
	case KIND_PATH:
	case KIND_DIR:
		set_string(slot, value);
		return;
	case KIND_HOSTPORT:
		set_hostport(l, k, slot, value);
		return;
	case KIND_RUN_AS:
		set_run_as(l, k, (struct conf_pool *)(void *)base, value);
		return;
	case KIND_LIMIT_SIZE:
	case KIND_LIMIT_COUNT:
	case KIND_LIMIT_CORES:
		set_limit(l, k, slot, value);
		return;
	case KIND_REDIS:
		set_redis(l, k, slot, value);
		return;
	case KIND_NAME:
		for (const char *p = value; *p != '\0'; p++)
			if (isspace((unsigned char)*p) || iscntrl((unsigned char)*p)) {
				key_error(l, k->name, "\"%s\": a name without white space or "
				    "control characters", value);
				return;
			}
		if (strlen(value) > CONF_SOURCE_KEY_MAX) {
			key_error(l, k->name, "longer than %d bytes", CONF_SOURCE_KEY_MAX);
			return;
		}
		set_string(slot, value);
		return;
	case KIND_ENUM:
		set_enum(l, k, slot, value);
		return;
	case KIND_POOL_NAME:
		if (!conf_pool_name_ok(value)) {
			key_error(l, k->name, "\"%s\" is not a pool name (1 to %d letters, "
			    "digits, '_', '.' or '-')", value, CONF_POOL_NAME_MAX);
			return;
		}
		set_string(slot, value);
		return;
	}
}

/* A key's value from the file or a flag: the one way a value is checked and stored. */
static void
key_assign(struct conf_load *l, const struct conf_key *k, char *base, const char *value)
{
	if (*value == '\0' && !kind_info[k->kind].empty_ok) {
		key_error(l, k->name, "empty value");
		return;
	}
	key_set(l, k, base, value);
}

/* ------------------------------------------- defaults, freeing, comparing */

static int load_finish(struct conf_load *l, char **errors);

/*
 * Sets every key of sect at base (struct conf, or a conf_pool or
 * conf_source of c) to its row's default, read as the file's value would
 * be: the table is the one place a default is written. A default the
 * table's own checks refuse is a bug of the table.
 */
static void
keys_default(struct conf *c, enum conf_sect sect, char *base)
{
	struct conf_load l = { .c = c, .sect = sect };
	char *errors = NULL, one[256];

	snprintf(l.sect_name, sizeof l.sect_name, "built-in default");
	for (size_t i = 0; i < CONF_NKEYS; i++) {
		const struct conf_key *k = &conf_keys[i];

		if (k->sect != sect)
			continue;
		if (k->def == NULL && (k->kind == KIND_LIMIT_SIZE ||
		    k->kind == KIND_LIMIT_COUNT || k->kind == KIND_LIMIT_CORES))
			*(uint64_t *)(void *)(base + k->off) = CONF_NO_LIMIT;
		for (const char *d = k->def; d != NULL && *d != '\0'; ) {
			size_t n = strcspn(d, "\n");
			snprintf(one, sizeof one, "%.*s", (int)n, d);
			key_set(&l, k, base, one);
			d += n + (d[n] == '\n');
		}
	}
	if (load_finish(&l, &errors) == -1)
		fatalx("conf.c's table: %s", errors != NULL ? errors : "out of memory");
}

/* Frees what the keys of sect own at base. */
static void
keys_free(enum conf_sect sect, char *base)
{
	for (size_t i = 0; i < CONF_NKEYS; i++) {
		const struct conf_key *k = &conf_keys[i];
		char **v = (char **)(void *)(base + k->off);

		if (k->sect != sect)
			continue;
		switch (key_store(k)) {
		case STORE_STR:
			free(*v);
			break;
		case STORE_LIST:
			for (size_t j = 0; j < *(size_t *)(void *)(base + k->aux); j++)
				free(v[j]);
			break;
		case STORE_RUN_AS:
			free(*(char **)(void *)(base + k->aux));
			break;
		default:
			break;
		}
	}
}

static bool
str_same(const char *a, const char *b)
{
	return a == NULL || b == NULL ? a == b : strcmp(a, b) == 0;
}

static size_t
store_size(enum conf_store st)
{
	switch (st) {
	case STORE_UINT: return sizeof(unsigned);
	case STORE_SIZE: return sizeof(size_t);
	case STORE_U64: return sizeof(uint64_t);
	case STORE_INT: return sizeof(int);
	case STORE_BOOL: return sizeof(bool);
	case STORE_MODE: return sizeof(mode_t);
	default: return sizeof(char *);
	}
}

/* True when key k says the same at a and b (two structs of its section). */
static bool
key_equal(const struct conf_key *k, const char *a, const char *b)
{
	char *const *va = (char *const *)(const void *)(a + k->off);
	char *const *vb = (char *const *)(const void *)(b + k->off);
	size_t n;

	switch (key_store(k)) {
	case STORE_STR:
		return str_same(*va, *vb);
	case STORE_LIST:
		if ((n = *(const size_t *)(const void *)(a + k->aux)) !=
		    *(const size_t *)(const void *)(b + k->aux))
			return false;
		for (size_t j = 0; j < n; j++)
			if (!str_same(va[j], vb[j]))
				return false;
		return true;
	case STORE_RUN_AS:
		return *(const enum conf_run_as *)(const void *)(a + k->off) ==
		    *(const enum conf_run_as *)(const void *)(b + k->off) &&
		    str_same(*(char *const *)(const void *)(a + k->aux),
		    *(char *const *)(const void *)(b + k->aux));
	default:
		return memcmp(a + k->off, b + k->off, store_size(key_store(k))) == 0;
	}
}

static void
swap_bytes(char *a, char *b, size_t n)
{
	char tmp[sizeof(uint64_t) > sizeof(char *) ? sizeof(uint64_t) : sizeof(char *)];

	memcpy(tmp, a, n);
	memcpy(a, b, n);
	memcpy(b, tmp, n);
}

/* Swaps key k's values at a and b, with what they own. */
static void
key_swap(const struct conf_key *k, char *a, char *b)
{
	switch (key_store(k)) {
	case STORE_LIST:
		for (size_t j = 0; j < k->max; j++)
			swap_bytes(a + k->off + j * sizeof(char *), b + k->off + j * sizeof(char *),
			    sizeof(char *));
		swap_bytes(a + k->aux, b + k->aux, sizeof(size_t));
		break;
	case STORE_RUN_AS:
		swap_bytes(a + k->off, b + k->off, sizeof(enum conf_run_as));
		swap_bytes(a + k->aux, b + k->aux, sizeof(char *));
		break;
	default:
		swap_bytes(a + k->off, b + k->off, store_size(key_store(k)));
		break;
	}
}

void
conf_init(struct conf *c)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	struct conf_pool *d;

	memset(c, 0, sizeof *c);
	keys_default(c, SECT_DAEMON, (char *)c);
	keys_default(c, SECT_EXEC, (char *)c);
	d = conf_pool_get(c, "default");
	d->size = cpus > 0 && cpus <= 64 ? (unsigned)cpus : 4;
}

void
conf_free(struct conf *c)
{
	free(c->path);
	keys_free(SECT_DAEMON, (char *)c);
	keys_free(SECT_EXEC, (char *)c);
	for (size_t i = 0; i < c->npools; i++) {
		free(c->pools[i].name);
		keys_free(SECT_POOL, (char *)&c->pools[i]);
	}
	for (size_t i = 0; i < c->nsources; i++) {
		free(c->sources[i].name);
		keys_free(SECT_SOURCE, (char *)&c->sources[i]);
	}
	memset(c, 0, sizeof *c);
}

struct conf_pool *
conf_pool_get(struct conf *c, const char *name)
{
	struct conf_pool *p = conf_pool_find(c, name);

	if (p != NULL)
		return p;
	if (c->npools == CONF_MAX_POOLS)
		return NULL;
	p = &c->pools[c->npools++];
	memset(p, 0, sizeof *p);
	p->name = strdup(name);
	keys_default(c, SECT_POOL, (char *)p);
	return p;
}

/* The named source, added with its defaults if missing (NULL when full). */
static struct conf_source *
conf_source_get(struct conf *c, const char *name)
{
	struct conf_source *s = conf_source_find(c, name);

	if (s != NULL)
		return s;
	if (c->nsources == CONF_MAX_SOURCES)
		return NULL;
	s = &c->sources[c->nsources++];
	memset(s, 0, sizeof *s);
	s->name = strdup(name);
	keys_default(c, SECT_SOURCE, (char *)s);
	return s;
}

bool
conf_source_equal(const struct conf_source *a, const struct conf_source *b)
{
	if (!str_same(a->name, b->name))
		return false;
	for (size_t i = 0; i < CONF_NKEYS; i++)
		if (conf_keys[i].sect == SECT_SOURCE &&
		    !key_equal(&conf_keys[i], (const char *)a, (const char *)b))
			return false;
	return true;
}

size_t
conf_keep_restart_keys(struct conf *next, struct conf *running, char *changed, size_t len)
{
	size_t n = 0;

	if (len > 0)
		changed[0] = '\0';
	for (size_t i = 0; i < CONF_NKEYS; i++) {
		const struct conf_key *k = &conf_keys[i];

		if ((k->sect != SECT_DAEMON && k->sect != SECT_EXEC) ||
		    k->reload != RELOAD_RESTART ||
		    key_equal(k, (const char *)next, (const char *)running))
			continue;
		key_swap(k, (char *)next, (char *)running);
		if (len > 0)
			snprintf(changed + strlen(changed), len - strlen(changed), "%s%s",
			    n > 0 ? ", " : "", k->name);
		n++;
	}
	return n;
}

/* The pool called name, made if missing; NULL with why set when it cannot be. */
static struct conf_pool *
pool_open(struct conf *c, const char *name, char *why, size_t len)
{
	struct conf_pool *p;

	if (!conf_pool_name_ok(name)) {
		snprintf(why, len, "a pool name is 1 to %d letters, digits, '_', '.' or '-'",
		    CONF_POOL_NAME_MAX);
		return NULL;
	}
	if ((p = conf_pool_get(c, name)) == NULL)
		snprintf(why, len, "too many pools (at most %d)", CONF_MAX_POOLS);
	return p;
}

/* A "key = value" line of the file, in the current section. */
static void
file_entry(struct conf_load *l, const char *name, const char *value)
{
	const struct conf_key *k;
	int first;

	if (l->sect == SECT_BAD)
		return;         /* the header was reported; its keys mean nothing */
	if (*name == '\0') {
		load_error(l, l->line, "a value without a key");
		return;
	}
	if (l->sect == SECT_NONE) {
		load_error(l, l->line, "%s: key outside any section (keys go under "
		    "[daemon], [exec], [pool NAME] or [source NAME])", name);
		return;
	}
	if ((k = key_find(l->sect, name)) == NULL) {
		key_unknown(l, name);
		return;
	}
	first = seen_note(l, l->sect_name, k->name);     /* a list's first line, too */
	if (k->kind != KIND_LISTEN && k->kind != KIND_ENV && first != 0) {
		key_error(l, k->name, "already set at line %d", first);
		return;
	}
	key_assign(l, k, k->sect == SECT_POOL ? (char *)l->pool : k->sect == SECT_SOURCE ?
	    (char *)l->source : (char *)l->c, value);
}

/* Cuts a comment ('#' or ';' at the start or after white space) and trims. */
static char *
line_clean(char *s)
{
	char *e;

	while (isspace((unsigned char)*s))
		s++;
	for (e = s; *e != '\0'; e++) {
		if ((*e == '#' || *e == ';') && (e == s || isspace((unsigned char)e[-1]))) {
			*e = '\0';
			break;
		}
	}
	while (e > s && isspace((unsigned char)e[-1]))
		*--e = '\0';
	return s;
}

/* A "[...]" line: sets the reader's section, or reports why it cannot. */
static void
section_open(struct conf_load *l, char *s)
{
	char *close = strchr(s, ']'), *inner, *name, why[128];
	int first;

	l->sect = SECT_BAD;
	l->pool = NULL;
	l->source = NULL;
	snprintf(l->sect_name, sizeof l->sect_name, "?");
	if (close == NULL) {
		load_error(l, l->line, "section header without \"]\"");
		return;
	}
	if (close[1] != '\0') {
		load_error(l, l->line, "text after the section header: \"%s\"", close + 1);
		return;
	}
	*close = '\0';
	inner = line_clean(s + 1);
	if (strcmp(inner, "daemon") == 0)
		l->sect = SECT_DAEMON;
	else if (strcmp(inner, "exec") == 0)
		l->sect = SECT_EXEC;
	else if (strncmp(inner, "pool", 4) == 0 &&
	    (inner[4] == '\0' || isspace((unsigned char)inner[4]))) {
		name = line_clean(inner + 4);
		if (*name == '\0') {
			load_error(l, l->line, "[pool]: a pool section needs a name, "
			    "as [pool NAME]");
			return;
		}
		if ((l->pool = pool_open(l->c, name, why, sizeof why)) == NULL) {
			load_error(l, l->line, "[pool %s]: %s", name, why);
			return;
		}
		l->sect = SECT_POOL;
		snprintf(l->sect_name, sizeof l->sect_name, "pool %s", name);
	} else if (strncmp(inner, "source", 6) == 0 &&
	    (inner[6] == '\0' || isspace((unsigned char)inner[6]))) {
		name = line_clean(inner + 6);
		if (*name == '\0') {
			load_error(l, l->line, "[source]: a source section needs a name, "
			    "as [source NAME]");
			return;
		}
		if (!conf_pool_name_ok(name)) {
			load_error(l, l->line, "[source %s]: a source name is 1 to %d letters, "
			    "digits, '_', '.' or '-'", name, CONF_POOL_NAME_MAX);
			return;
		}
		if ((l->source = conf_source_get(l->c, name)) == NULL) {
			load_error(l, l->line, "[source %s]: too many sources (at most %d)", name,
			    CONF_MAX_SOURCES);
			return;
		}
		l->sect = SECT_SOURCE;
		snprintf(l->sect_name, sizeof l->sect_name, "source %s", name);
	} else {
		load_error(l, l->line, "[%s]: unknown section (expected [daemon], [exec], "
		    "[pool NAME] or [source NAME])", inner);
		return;
	}
	if (l->sect != SECT_POOL && l->sect != SECT_SOURCE)
		snprintf(l->sect_name, sizeof l->sect_name, "%s", inner);
	if ((first = seen_note(l, l->sect_name, "[")) != 0)
		load_error(l, l->line, "[%s]: section repeated (first at line %d)",
		    l->sect_name, first);
}

/* Every line of the file, each error noted with its line number. */
static void
file_read(struct conf_load *l)
{
	char *s, *sep, *key, *value;

	while (getline(&l->raw, &l->rawcap, l->fp) != -1) {
		l->line++;
		s = l->raw;
		if (l->line == 1 && strncmp(s, "\xEF\xBB\xBF", 3) == 0)
			s += 3;         /* a UTF-8 byte order mark */
		s = line_clean(s);
		if (*s == '\0')
			continue;
		if (*s == '[') {
			section_open(l, s);
			continue;
		}
		sep = strpbrk(s, "=:");
		if (sep == NULL || *sep != '=') {
			load_error(l, l->line, "expected \"key = value\", a [section] or a comment");
			continue;
		}
		if (strlen(s) > CONF_MAX_LINE) {
			load_error(l, l->line, "line too long (at most %d characters without "
			    "comments)", CONF_MAX_LINE);
			continue;
		}
		*sep = '\0';
		key = line_clean(s);
		value = line_clean(sep + 1);
		file_entry(l, key, value);
	}
	if (ferror(l->fp))
		load_error(l, l->line + 1, "read error: %s", strerror(errno));
}

/* The flags, in command-line order, over what the file left. */
static void
flags_apply(struct conf_load *l, const struct conf_flags *f)
{
	char why[128];

	l->line = 0;
	l->listen_given = false;        /* the first -l replaces the file's list */
	for (size_t i = 0; i < f->n; i++) {
		const struct conf_override *o = &f->v[i];
		const struct conf_key *k = o->key;
		char *base = (char *)l->c;

		l->flag = o;
		l->sect = k->sect;
		if (k->sect == SECT_POOL) {
			if ((l->pool = pool_open(l->c, o->pool, why, sizeof why)) == NULL) {
				if (o->pool_first)
					flag_error(l, o->pool_label != NULL ? o->pool_label :
					    o->label, "%s", why);
				continue;
			}
			base = (char *)l->pool;
			snprintf(l->sect_name, sizeof l->sect_name, "pool %s", o->pool);
		} else
			snprintf(l->sect_name, sizeof l->sect_name, "%s",
			    k->sect == SECT_DAEMON ? "daemon" : "exec");
		if (k->kind != KIND_ENV)
			seen_flag(l, l->sect_name, k->name);
		key_assign(l, k, base, o->value);
	}
	l->flag = NULL;
}

/*
 * A pool whose size neither file nor flag gave follows a smaller limit
 * instead of failing. An elastic pool (min_workers or max_workers given)
 * keeps its minimum in size: min_workers, or 1 when only max_workers is
 * given; max_workers defaults to it.
 */
static void
conf_clamp_sizes(const struct conf_load *l, struct conf *c)
{
	for (size_t i = 0; i < c->npools; i++) {
		struct conf_pool *p = &c->pools[i];
		char sect[8 + CONF_POOL_NAME_MAX];
		bool min = false, max = false;

		snprintf(sect, sizeof sect, "pool %s", p->name);
		min = seen_find(l, sect, "min_workers") != NULL;
		max = seen_find(l, sect, "max_workers") != NULL;
		if (seen_find(l, sect, "size") != NULL)
			continue;       /* with min/max too: the cross-check says so */
		if (min || max) {
			p->size = min ? p->min_workers : 1;
			if (!max)
				p->max_workers = p->size;
		} else if (p->size > p->limit)
			p->size = p->limit;
	}
}

/*
 * What a [source NAME] leaves out and the table cannot give, as it depends
 * on the host or on another key: the consumer, results and dead_letter.
 */
static void
conf_source_defaults(struct conf *c)
{
	char host[256];

	for (size_t i = 0; i < c->nsources; i++) {
		struct conf_source *s = &c->sources[i];

		if (s->consumer == NULL) {
			if (gethostname(host, sizeof host) == -1 || host[0] == '\0')
				snprintf(host, sizeof host, "tpd");
			host[sizeof host - 1] = '\0';
			s->consumer = strdup(host);
		}
		if (s->stream != NULL && s->results == NULL &&
		    asprintf(&s->results, "%s:results", s->stream) == -1)
			s->results = NULL;
		if (s->stream != NULL && s->dead_letter == NULL &&
		    asprintf(&s->dead_letter, "%s:dead", s->stream) == -1)
			s->dead_letter = NULL;
	}
}

/*
 * A source names where Redis is, its stream and group, a pool that exists,
 * and streams for results and dead letters that are not its own stream.
 */
static void
conf_check_sources(struct conf_load *l, const struct conf *c)
{
	for (size_t i = 0; i < c->nsources; i++) {
		const struct conf_source *s = &c->sources[i];
		char sect[8 + CONF_POOL_NAME_MAX];
		bool pool_found = false;

		/* a key given with a bad value was reported: it is not missing too */
		snprintf(sect, sizeof sect, "source %s", s->name);
		if (s->type == NULL && seen_find(l, sect, "type") == NULL)
			source_error(l, sect, "type", "[", "missing (type = redis-stream)");
		if (s->redis == NULL && seen_find(l, sect, "redis") == NULL)
			source_error(l, sect, "redis", "[", "missing: where Redis listens, "
			    "unix:PATH or HOST[:PORT]");
		if (s->stream == NULL && seen_find(l, sect, "stream") == NULL)
			source_error(l, sect, "stream", "[", "missing: the stream to read "
			    "tasks from");
		if (s->group == NULL && seen_find(l, sect, "group") == NULL)
			source_error(l, sect, "group", "[", "missing: the consumer group "
			    "to read as (created if missing)");
		for (size_t j = 0; s->pool != NULL && j < c->npools; j++) {
			if (strcmp(c->pools[j].name, s->pool) != 0)
				continue;
			pool_found = true;
			if (c->pools[j].run_as == CONF_RUN_AS_CALLER)
				source_error(l, sect, "pool", seen_find(l, sect, "pool") ? "pool" :
				    "[", "pool %s runs tasks as their caller (run_as = caller), and "
				    "a task from a stream has none", s->pool);
		}
		if (s->pool != NULL && !pool_found)
			source_error(l, sect, "pool", seen_find(l, sect, "pool") ? "pool" : "[",
			    "no pool named \"%s\" (a [pool %s] section makes one)", s->pool,
			    s->pool);
		if (s->stream == NULL)
			continue;
		if (s->results != NULL && strcmp(s->results, s->stream) == 0)
			source_error(l, sect, "results", "results", "\"%s\" is the stream "
			    "tasks are read from: results need a stream of their own", s->results);
		if (s->dead_letter != NULL && strcmp(s->dead_letter, s->stream) == 0)
			source_error(l, sect, "dead_letter", "dead_letter", "\"%s\" is the "
			    "stream tasks are read from: dead letters need a stream of their "
			    "own", s->dead_letter);
		if (s->results != NULL && s->dead_letter != NULL &&
		    strcmp(s->results, s->dead_letter) == 0)
			source_error(l, sect, "dead_letter", "dead_letter", "\"%s\" is the "
			    "results stream too: dead letters need a stream of their own",
			    s->dead_letter);
	}
}

/* True when tpd can change a task's user: root, or CAP_SETUID and CAP_SETGID. */
static bool
can_setuid(void)
{
	char line[256];
	unsigned long long caps = 0;
	bool found = false;
	FILE *f;

	if (geteuid() == 0)
		return true;
	if ((f = fopen("/proc/self/status", "re")) == NULL)
		return false;
	while (fgets(line, sizeof line, f) != NULL)
		if (strncmp(line, "CapEff:", 7) == 0)
			found = sscanf(line + 7, "%llx", &caps) == 1;
	fclose(f);
	/* CAP_SETGID is 6, CAP_SETUID 7 */
	return found && (caps & (1ULL << 6)) && (caps & (1ULL << 7));
}

static conf_enforce_fn conf_enforce_hook;

void
conf_set_enforce(conf_enforce_fn fn)
{
	conf_enforce_hook = fn;
}

/*
 * A pool's run_as needs privileges; its limit_* defaults are within
 * max_limit_* and can be enforced by the daemon (conf_set_enforce).
 */
static void
conf_check_pool_exec(struct conf_load *l, const struct conf *c)
{
	struct conf_enforce en;
	char a[32], b[32];

	memset(&en, 0, sizeof en);
	if (conf_enforce_hook != NULL)
		conf_enforce_hook(c, &en);
	if (en.unusable[0] != '\0')
		source_error(l, "daemon", "containment", "containment", "%s", en.unusable);
	for (size_t i = 0; i < c->npools; i++) {
		const struct conf_pool *p = &c->pools[i];
		char sect[8 + CONF_POOL_NAME_MAX];

		snprintf(sect, sizeof sect, "pool %s", p->name);
		if (p->run_as != CONF_RUN_AS_DAEMON && !can_setuid())
			source_error(l, sect, "run_as", "run_as", "%s needs root or the "
			    "capabilities CAP_SETUID and CAP_SETGID, and tpd runs as uid %ld "
			    "without them",
			    p->run_as == CONF_RUN_AS_CALLER ? "caller" : p->run_as_user,
			    (long)geteuid());
		for (int k = 0; k < CONF_NLIMITS; k++) {
			char key[48];
			bool cores = k == CONF_LIMIT_CPU_CORES;

			if (p->limits[k] == CONF_NO_LIMIT)
				continue;
			snprintf(key, sizeof key, "limit_%s", conf_limit_name(k));
			if (en.why[k] != NULL)
				source_error(l, sect, key, key, "cannot be enforced here: %s%s%s%s",
				    en.why[k], en.note[0] != '\0' ? " (" : "", en.note,
				    en.note[0] != '\0' ? ")" : "");
			if (p->max_limits[k] == CONF_NO_LIMIT || p->limits[k] <= p->max_limits[k])
				continue;
			if (cores) {
				snprintf(a, sizeof a, "%.3f", p->limits[k] / 1000.0);
				snprintf(b, sizeof b, "%.3f", p->max_limits[k] / 1000.0);
			} else {
				snprintf(a, sizeof a, "%llu", (unsigned long long)p->limits[k]);
				snprintf(b, sizeof b, "%llu", (unsigned long long)p->max_limits[k]);
			}
			source_error(l, sect, key, key, "%s is above max_%s %s", a, key, b);
		}
	}
}

/*
 * A TCP listener lets in anyone who can connect unless clients must present
 * a token: it needs a token file (auth.c reads it), or tcp_auth = none said
 * out loud (a token file that cannot be read leaves it without one too).
 * One error for the key, naming every address, told where listen was given
 * (its first line, or the last flag that gave it).
 */
static void
conf_check_listen(struct conf_load *l, const struct conf *c)
{
	char names[CONF_MAX_LISTEN * 272] = "";

	if (c->tcp_auth_none || c->token_file != NULL || c->admin_token_file != NULL ||
	    c->nlisten == 0)
		return;
	for (size_t i = 0; i < c->nlisten; i++)
		snprintf(names + strlen(names), sizeof names - strlen(names), "%stcp %s",
		    i > 0 ? ", " : "", c->listen[i]);
	source_error(l, "daemon", "listen", "listen", "%s: a TCP listener needs a token: set "
	    "[daemon] token_file (or tcp_auth = none to let anyone who can connect in)", names);
}

/*
 * The checks between keys: a pool's size within its limit, output_limit
 * within output_limit_max. An error is told where the key that caused it
 * was given (its flag or its line), whichever way each key was given.
 */
static void
conf_cross_check(struct conf_load *l, const struct conf *c)
{
	char a[32], b[32];

	for (size_t i = 0; i < c->npools; i++) {
		const struct conf_pool *p = &c->pools[i];
		char sect[8 + CONF_POOL_NAME_MAX];
		const char *src;

		snprintf(sect, sizeof sect, "pool %s", p->name);
		src = seen_find(l, sect, "size") ? "size" : seen_find(l, sect, "limit") ?
		    "limit" : "[";
		if (seen_find(l, sect, "size") != NULL && (seen_find(l, sect, "min_workers") ||
		    seen_find(l, sect, "max_workers")))
			source_error(l, sect, "size", "size", "size is the fixed pool's shorthand "
			    "for min_workers = max_workers: give either size or min_workers/max_workers");
		else if (p->size < 1 || p->size > p->limit)
			source_error(l, sect, seen_find(l, sect, "min_workers") ? "min_workers" :
			    "size", seen_find(l, sect, "min_workers") ? "min_workers" : src,
			    "%u is %s limit %u", p->size,
			    p->size < 1 ? "below 1, the least" : "above", p->limit);
		else if (p->max_workers != 0 && p->max_workers < p->size)
			source_error(l, sect, "max_workers", "max_workers", "%u is below "
			    "min_workers %u", p->max_workers, p->size);
		else if (p->max_workers > p->limit)
			source_error(l, sect, "max_workers", seen_find(l, sect, "max_workers") ?
			    "max_workers" : "limit", "%u is above limit %u", p->max_workers, p->limit);
		if (p->limit < 1 || p->limit > CONF_POOL_MAX_LIMIT)
			source_error(l, sect, "limit", src, "%u is out of range (1 to %d)",
			    p->limit, CONF_POOL_MAX_LIMIT);
		if (p->capacity < 1 || p->capacity > CONF_POOL_MAX_CAPACITY)
			source_error(l, sect, "capacity", "capacity", "%u is out of range "
			    "(1 to %d)", p->capacity, CONF_POOL_MAX_CAPACITY);
	}
	if (c->exec_output_limit > c->exec_output_limit_max)
		source_error(l, "exec", "output_limit", seen_find(l, "exec", "output_limit") ?
		    "output_limit" : "output_limit_max", "%s is above output_limit_max %s",
		    units_format_size(c->exec_output_limit, a, sizeof a),
		    units_format_size(c->exec_output_limit_max, b, sizeof b));
	conf_check_listen(l, c);
	conf_check_pool_exec(l, c);
	conf_check_sources(l, c);
}

/* The file's errors by line, then the flags' in command-line order. */
static int
error_cmp(const void *x, const void *y)
{
	const struct conf_error *a = x, *b = y;

	if (a->flag != b->flag)
		return a->flag ? 1 : -1;
	if (a->line != b->line)
		return a->line < b->line ? -1 : 1;
	return a->seq < b->seq ? -1 : a->seq > b->seq;
}

/* Frees l; returns 0, or -1 with *errors set to every error, in order. */
static int
load_finish(struct conf_load *l, char **errors)
{
	char *out = NULL;
	size_t len = 0;
	FILE *m;
	int rv = l->nerrs > 0 || l->dropped > 0 ? -1 : 0;

	if (rv == -1 && (m = open_memstream(&out, &len)) != NULL) {
		qsort(l->errs, l->nerrs, sizeof l->errs[0], error_cmp);
		for (size_t i = 0; i < l->nerrs; i++) {
			if (i > 0)
				fputc('\n', m);
			if (!l->errs[i].flag && l->path != NULL && l->errs[i].line > 0)
				fprintf(m, "%s:%d: ", l->path, l->errs[i].line);
			else if (!l->errs[i].flag && l->path != NULL)
				fprintf(m, "%s: ", l->path);
			fputs(l->errs[i].text, m);
		}
		if (l->dropped > 0)
			fprintf(m, "%s%s: %zu more errors not shown", l->nerrs ? "\n" : "",
			    l->path ? l->path : "configuration", l->dropped);
		fclose(m);
	}
	if (errors != NULL)
		*errors = out;
	else
		free(out);
	for (size_t i = 0; i < l->nerrs; i++)
		free(l->errs[i].text);
	free(l->errs);
	for (size_t i = 0; i < l->nseen; i++) {
		free(l->seen[i].sect);
		free(l->seen[i].key);
	}
	free(l->seen);
	free(l->raw);
	return rv;
}

int
conf_read(struct conf *c, const char *path, const struct conf_flags *flags, char **errors)
{
	struct conf_load l = { .path = path, .c = c, .sect = SECT_NONE };
	bool readable = true;

	*errors = NULL;
	if (path != NULL) {
		free(c->path);
		c->path = strdup(path);
		if ((l.fp = fopen(path, "r")) == NULL) {
			load_error(&l, 0, "cannot open: %s", strerror(errno));
			readable = false;
		} else {
			file_read(&l);
			fclose(l.fp);
		}
	}
	if (flags != NULL)
		flags_apply(&l, flags);
	/* without the file, figures that it may have fixed are left unchecked */
	if (readable) {
		conf_clamp_sizes(&l, c);
		conf_source_defaults(c);
		conf_cross_check(&l, c);
	}
	return load_finish(&l, errors);
}

int
conf_load(struct conf *c, const char *path, char **errors)
{
	return conf_read(c, path, NULL, errors);
}

int
conf_validate(const struct conf *c, char **errors)
{
	struct conf_load l = { .path = NULL };

	*errors = NULL;
	conf_cross_check(&l, c);
	return load_finish(&l, errors);
}

int
conf_check_file(const char *path)
{
	struct conf c;
	char *errors;
	int rv = 0;

	conf_init(&c);
	if (conf_load(&c, path, &errors) == -1) {
		fprintf(stderr, "%s\n", errors ? errors : "out of memory");
		rv = 1;
	} else
		printf("configuration OK\n");
	free(errors);
	conf_free(&c);
	fflush(stdout);
	return rv;
}
