/*
 * conf.h: tpd's settings. Built-in defaults (conf.c's key table), overridden by
 * the file (the default one, or -c: tpd.c chooses),
 * overridden by command-line flags, both read and checked by the same code
 * (conf.c's key table). Every limit lives here.
 */
#ifndef TPD_CONF_H
#define TPD_CONF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#define CONF_MAX_LISTEN 16
#define CONF_MAX_POOLS 64
#define CONF_MAX_ENV 64
#define CONF_POOL_MAX_LIMIT 1024        /* most workers any pool may have */
#define CONF_POOL_MAX_CAPACITY 1000000  /* largest queue capacity */
#define CONF_POOL_NAME_MAX 32
#define CONF_MAX_SOURCES 32
#define CONF_SOURCE_KEY_MAX 512         /* a Redis key or consumer name in a [source NAME] */

/* An exec task's limits, in the order of the limit_* keys (doc/exec.md). */
enum conf_limit {
	CONF_LIMIT_MEMORY_BYTES,
	CONF_LIMIT_CPU_CORES,   /* kept in thousandths of a core */
	CONF_LIMIT_PIDS,
	CONF_LIMIT_OPEN_FILES,
	CONF_LIMIT_CPU_SECONDS,
	CONF_LIMIT_FILE_BYTES,
	CONF_NLIMITS,
};
#define CONF_NO_LIMIT UINT64_MAX

/* journal_sync: when the journal's records may be seen (journal.h). */
enum journal_sync {
	JOURNAL_SYNC_COMMIT,
	JOURNAL_SYNC_INTERVAL,
	JOURNAL_SYNC_NONE,
};

/* Who a pool's exec tasks run as. */
enum conf_run_as {
	CONF_RUN_AS_DAEMON,     /* the daemon's own user */
	CONF_RUN_AS_CALLER,     /* the submitting Unix peer */
	CONF_RUN_AS_USER,       /* run_as_user */
};

/* What a pool does with a submit that finds its queue full (admission). */
enum conf_admission {
	CONF_ADMISSION_REJECT,
	CONF_ADMISSION_WAIT,
	CONF_ADMISSION_DROP_OLDEST,
};

struct conf_pool {
	char *name;
	unsigned size;          /* target workers; with min_workers/max_workers: min_workers */
	unsigned min_workers;   /* as read (0: unset); size holds the value in force */
	unsigned max_workers;   /* 0: size (a fixed pool) */
	uint64_t keepalive_ms;  /* an idle worker above the minimum leaves after this */
	int admission;          /* enum conf_admission */
	uint64_t admission_timeout_ms; /* the longest a submit is held (wait) */
	unsigned max_held;      /* most submits held at once (wait) */
	bool paused;            /* starts paused */
	bool fair;              /* take turns between owners (fair = owner) */
	unsigned max_queued_per_owner;  /* 0: no limit */
	unsigned max_running_per_owner; /* 0: no limit */
	unsigned limit;         /* most workers a resize may ask for */
	unsigned capacity;      /* queue capacity */
	enum conf_run_as run_as;
	char *run_as_user;      /* CONF_RUN_AS_USER */
	uint64_t limits[CONF_NLIMITS];          /* limit_*: defaults; CONF_NO_LIMIT none */
	uint64_t max_limits[CONF_NLIMITS];      /* max_limit_*: maxima; CONF_NO_LIMIT none */
};

/*
 * A [source NAME]: tasks consumed from a Redis stream through a consumer
 * group (source-redis.h). The names are those of the file; NAME has the
 * characters of a pool name.
 */
struct conf_source {
	char *name;
	char *type;             /* "redis-stream" (the only type) */
	char *redis;            /* "unix:PATH" or "HOST:PORT" */
	char *stream;
	char *group;
	char *consumer;         /* default: the host name */
	char *pool;             /* default "default" */
	char *results;          /* default STREAM:results */
	char *dead_letter;      /* default STREAM:dead */
	uint64_t claim_idle_ms; /* default 60 s */
	unsigned max_deliveries; /* default 3 */
	unsigned results_maxlen; /* default 100000; 0: results are not trimmed */
	uint64_t timeout_ms;    /* connect and command timeout, default 5 s */
	uint64_t backoff_max_ms; /* longest wait between reconnects, default 5 s */
};

struct conf {
	char *path;                     /* the file read, or NULL */

	/* [daemon] */
	char *socket;                   /* NULL = the default rule (wire.h) */
	mode_t socket_mode;             /* default 0660 */
	char *socket_group;             /* NULL = leave the group as created */
	char *listen[CONF_MAX_LISTEN];  /* HOST:PORT */
	size_t nlisten;
	unsigned max_connections;       /* default 1024 */
	size_t max_request_bytes;       /* default 1 MiB */
	size_t max_output_buffer;       /* default 8 MiB */
	uint64_t output_stall_timeout_ms; /* a client reading none of its output goes; 60 s; 0 = never */
	uint64_t result_ttl_ms;         /* finished tasks kept for wait/status; default 10 min */
	unsigned result_retain;         /* and at most this many; default 10000 */
	size_t result_retain_bytes;     /* and their results in at most this; default 256 MiB */
	unsigned max_subscriptions;     /* waits pending per connection; default 10000 */
	unsigned max_scheduled;         /* scheduled and waiting tasks at once; default 100000 */
	uint64_t shutdown_timeout_ms;   /* drain turns into now after this; 0 = never */
	int log_level;                  /* LOG_ERR..LOG_DEBUG (syslog.h) */
	char *admin_group;              /* may run admin ops on the Unix socket */
	char *token_file;               /* TCP submit token */
	char *admin_token_file;         /* TCP admin token */
	bool tcp_auth_none;             /* tcp_auth = none: TCP without a token (default: token) */
	char *containment;              /* "auto" (default), "cgroup" or "process" */
	char *cgroup_root;              /* NULL: the cgroup tpd was started in */
	char *state_dir;                /* the journal's directory; NULL: the default rule */
	bool journal;                   /* default on */
	int journal_sync;               /* enum journal_sync; default commit */
	uint64_t journal_sync_interval_ms; /* interval mode; default 100 ms */
	size_t journal_max_bytes;       /* the journal's size on disk; default 1 GiB */
	size_t journal_segment_size;    /* a segment, at most journal_max_bytes / 16; default 8 MiB */
	char *metrics_listen;           /* HOST:PORT of GET /metrics; NULL = off */
	unsigned metrics_max_connections; /* open scrape connections at once; default 16 */
	uint64_t metrics_timeout_ms;    /* a scrape connection idle this long is closed; 10 s */
	size_t metrics_max_header_bytes; /* a scrape's request line and headers; 8 KiB */

	/* [exec] */
	size_t exec_output_limit;       /* default per-stream capture, 1 MiB */
	size_t exec_output_limit_max;   /* largest output_limit a request may ask, 16 MiB */
	uint64_t exec_kill_grace_ms;    /* SIGTERM -> SIGKILL, default 5 s */
	char *exec_env[CONF_MAX_ENV];   /* base environment, "NAME=value" */
	size_t nexec_env;
	size_t stream_budget;           /* bytes of output events a task may have in flight, 256 KiB */
	size_t exec_stdin_buffer;       /* a streamed stdin's bytes held per task, 1 MiB */
	bool exec_output_spool;         /* keep whole outputs under state_dir; default on */
	size_t exec_output_spool_task_bytes; /* most spooled per task, 1 GiB */
	size_t exec_output_spool_bytes; /* most spooled in all, 10 GiB */

	/* [pool NAME]; pools[0] is always "default" */
	struct conf_pool pools[CONF_MAX_POOLS];
	size_t npools;

	/* [source NAME] */
	struct conf_source sources[CONF_MAX_SOURCES];
	size_t nsources;
};

/*
 * Fills c with the built-in defaults, from conf.c's key table (one pool
 * "default", its size the number of CPUs).
 */
void conf_init(struct conf *c);

/* Frees what c owns. */
void conf_free(struct conf *c);

/*
 * The command line's settings. Every key of the file is a flag too, named
 * after it (--max-request-bytes sets [daemon] max_request_bytes), a few with
 * a short or a special name (-s, -l, -w, -q, --limit; see conf_flags_usage),
 * and --pool NAME:SIZE[:CAPACITY[:LIMIT]] sets a [pool NAME]'s keys. tpd
 * parses its command line once, at start, into a conf_flags: a list of
 * (key, value as written, flag as written); conf_read applies it over the
 * file, at start and again on SIGHUP, with the file's checks and messages.
 * A flag given twice counts the last time; -l and --env add up, as their
 * keys do in the file, and the first of them replaces the file's list.
 */
struct conf_flags;
struct option;

/*
 * A new, empty list, with getopt_long's tables: own (the program's own
 * options, ending with a zeroed entry) and own_short (their letters, as
 * getopt takes them), followed by the options of every key and --pool.
 * The short string starts with ':' (a missing value is reported as ':').
 * NULL when out of memory.
 */
struct conf_flags *conf_flags_new(const struct option *own, const char *own_short);
void conf_flags_free(struct conf_flags *f);
const struct option *conf_flags_longopts(const struct conf_flags *f);
const char *conf_flags_shortopts(const struct conf_flags *f);

/*
 * Records what getopt_long gave back (ch, the index it set or -1, optarg).
 * Returns 1 when ch is not a setting's flag (the program's own), 0 when
 * recorded, -1 with *cause set (caller frees) when the flag's form is
 * wrong (--pool without NAME:SIZE) or memory ran out. Values are checked
 * only by conf_read.
 */
int conf_flags_add(struct conf_flags *f, int ch, int longindex, const char *arg,
    char **cause);

/*
 * Writes two help lines per setting, from conf.c's key table: its flag and
 * value, the key it sets, its range, its default and "read at start" when
 * only a restart applies a change; then its line of doc. The keys of
 * [source NAME], which have no flag, follow.
 */
void conf_flags_usage(FILE *out);

/*
 * Reads path (NULL: no file) over c's current values, then applies flags
 * (NULL: none) over the result, then makes the cross-checks (size <= limit,
 * output_limit <= output_limit_max) on the whole. The file is read as
 * conf_load says. Errors about a flag come after the file's, in command-line
 * order, as "tpd: FLAG VALUE: message", the message the same text as for
 * the key in the file. Returns 0, or -1 with *errors set (all of them,
 * newline-separated, caller frees) and c fit only for conf_free.
 */
int conf_read(struct conf *c, const char *path, const struct conf_flags *flags,
    char **errors);

/*
 * Reads path over c's current values (a value given in the file replaces the
 * one in c; the first "listen" of the file replaces c's list; "env" replaces
 * or extends c's base environment). Every error is collected as one line
 * "FILE:LINE: [SECTION] KEY: message", sorted by line; returns 0, or -1 with
 * *errors set to all of them (newline-separated, no trailing newline, caller
 * frees) and c left fit only for conf_free. Cross-checks (size <= limit,
 * output_limit <= output_limit_max) are made on the result.
 *
 * Meant for the loop thread at start-up and on SIGHUP; it uses no global
 * state.
 */
int conf_load(struct conf *c, const char *path, char **errors);

/*
 * The cross-checks of conf_load, for a conf changed afterwards: every pool
 * has 1 <= size <= limit and capacity >= 1, output_limit <=
 * output_limit_max. Returns 0, or -1 with *errors set (lines naming the pool
 * or key, caller frees).
 */
int conf_validate(const struct conf *c, char **errors);

/*
 * What the daemon can enforce of the pools' limit_* defaults: why[k] says
 * why limit k cannot be enforced (NULL: it can), note adds what applies to
 * all of them (empty: nothing). Filled by the hook for the configuration
 * just read (its containment and cgroup_root decide), so that a default the
 * system cannot enforce is an error of the key that set it, told where it
 * was given (FILE:LINE or its flag) like every other value's error; so is
 * a containment that cannot be had (containment = cgroup on a cgroup root
 * tpd cannot use).
 */
struct conf_enforce {
	const char *why[CONF_NLIMITS];
	char note[1100];
	char unusable[1100];    /* the containment asked for cannot be had: an error of containment */
};
typedef void (*conf_enforce_fn)(const struct conf *c, struct conf_enforce *out);

/* Sets the hook conf_read and conf_validate use (NULL, the default: no such check). */
void conf_set_enforce(conf_enforce_fn fn);

/*
 * tpd -n -c path: loads path over the built-in defaults and prints
 * "configuration OK" on stdout, or every error on stderr. Returns the exit
 * status for main: 0 when the file is good, 1 otherwise.
 */
int conf_check_file(const char *path);

/*
 * Splits "HOST:PORT" or "[IPV6]:PORT" (PORT 0..65535, HOST a name, an IPv4
 * address, "*" for every address, or a bracketed IPv6 address). Fills host (brackets removed) and
 * port; returns 0, or -1 with *cause set (caller frees). Names are not
 * resolved: listen.c does that when it listens.
 */
int conf_split_hostport(const char *s, char *host, size_t hostlen,
    char *port, size_t portlen, char **cause);

/* The pool called name, or NULL. */
struct conf_pool *conf_pool_find(struct conf *c, const char *name);

/* The named pool, added with defaults if missing (NULL when full). */
struct conf_pool *conf_pool_get(struct conf *c, const char *name);

/* The source called name, or NULL. */
struct conf_source *conf_source_find(struct conf *c, const char *name);

/* True when a and b say the same in every key (a reload keeps such a source running). */
bool conf_source_equal(const struct conf_source *a, const struct conf_source *b);

/*
 * A reload's keys that only a restart applies (their row's reload class in
 * conf.c): each [daemon] or [exec] one whose value differs between next
 * (just read) and running (in force) is swapped, so that next keeps the
 * running value and running, about to be freed, takes the new one. Writes
 * their names into changed ("journal, journal_sync"; "" for none, cut to
 * len) and returns how many there were.
 */
size_t conf_keep_restart_keys(struct conf *next, struct conf *running, char *changed,
    size_t len);

/* Parses a pool or queue count: decimal digits only, at most max. */
int conf_parse_count(const char *s, unsigned max, unsigned *out);

/* The wire and file name of a limit ("memory_bytes", ...). */
const char *conf_limit_name(enum conf_limit l);

/* True when name is fit for a pool: 1 to 32 of A-Z a-z 0-9 _ . - */
bool conf_pool_name_ok(const char *name);

#endif
