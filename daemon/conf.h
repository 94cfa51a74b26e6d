/*
 * conf.h: tpd's settings. Built-in defaults, overridden by the file (-c),
 * overridden by command-line flags. Every limit lives here.
 */
#ifndef TPD_CONF_H
#define TPD_CONF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define CONF_MAX_LISTEN 16
#define CONF_MAX_POOLS 64
#define CONF_MAX_ENV 64
#define CONF_POOL_MAX_LIMIT 1024        /* most workers any pool may have */
#define CONF_POOL_MAX_CAPACITY 1000000  /* largest queue capacity */
#define CONF_POOL_NAME_MAX 32

struct conf_pool {
	char *name;
	unsigned size;          /* target workers */
	unsigned limit;         /* most workers a resize may ask for */
	unsigned capacity;      /* queue capacity */
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
	uint64_t shutdown_timeout_ms;   /* drain turns into now after this; 0 = never */
	int log_level;                  /* LOG_ERR..LOG_DEBUG (syslog.h) */
	char *admin_group;              /* may run admin ops on the Unix socket */
	char *token_file;               /* TCP submit token */
	char *admin_token_file;         /* TCP admin token */

	/* [exec] */
	size_t exec_output_limit;       /* default per-stream capture, 1 MiB */
	size_t exec_output_limit_max;   /* largest output_limit a request may ask, 16 MiB */
	uint64_t exec_kill_grace_ms;    /* SIGTERM -> SIGKILL, default 5 s */
	char *exec_env[CONF_MAX_ENV];   /* base environment, "NAME=value" */
	size_t nexec_env;
	size_t stream_budget;           /* bytes of output events a task may have in flight, 256 KiB */

	/* [pool NAME]; pools[0] is always "default" */
	struct conf_pool pools[CONF_MAX_POOLS];
	size_t npools;
};

/* Fills c with the built-in defaults (one pool "default", size = CPUs, limit 64, capacity 1024). */
void conf_init(struct conf *c);

/* Frees what c owns. */
void conf_free(struct conf *c);

/*
 * Reads path over c's current values (a value given in the file replaces the
 * one in c; the first "listen" of the file replaces c's list; "env" replaces
 * or extends c's base environment). Every error is collected as one line
 * "FILE:LINE: [SECTION] KEY: message", sorted by line; returns 0, or -1 with
 * *errors set to all of them (newline-separated, no trailing newline, caller
 * frees) and c left fit only for conf_free. Cross-checks (size <= limit,
 * output_limit <= output_limit_max) are made on the result.
 *
 * Meant for the loop thread at start-up and on SIGHUP: it uses no global
 * state of its own, but libinih's settings are process-wide and untouched.
 */
int conf_load(struct conf *c, const char *path, char **errors);

/*
 * The cross-checks of conf_load, for a conf that flags changed afterwards:
 * every pool has 1 <= size <= limit and capacity >= 1, output_limit <=
 * output_limit_max. Returns 0, or -1 with *errors set (lines naming the pool
 * or key, caller frees).
 */
int conf_validate(const struct conf *c, char **errors);

/*
 * tpd -n -c path: loads path over the built-in defaults and prints
 * "configuration OK" on stdout, or every error on stderr. Returns the exit
 * status for main: 0 when the file is good, 1 otherwise.
 */
int conf_check_file(const char *path);

/*
 * Splits "HOST:PORT" or "[IPV6]:PORT" (PORT 0..65535, HOST a name, an IPv4
 * address, "*" for every address, or a bracketed IPv6 address). Fills host (brackets removed) and
 * port; returns 0, or -1 with *cause set (caller frees).
 */
int conf_split_hostport(const char *s, char *host, size_t hostlen,
    char *port, size_t portlen, char **cause);

/* The pool called name, or NULL. */
struct conf_pool *conf_pool_find(struct conf *c, const char *name);

/* The named pool, added with defaults if missing (NULL when full). */
struct conf_pool *conf_pool_get(struct conf *c, const char *name);

/* Parses a duration: "500ms", "5s", "2m", "1h", "1d", or a bare number of ms. */
int conf_parse_duration_ms(const char *s, uint64_t *out);

/* Parses a size: "4096", "64k", "1M", "1G" (binary units). */
int conf_parse_size(const char *s, size_t *out);

/* Parses a pool or queue count: decimal digits only, at most max. */
int conf_parse_count(const char *s, unsigned max, unsigned *out);

/* True when name is fit for a pool: 1 to 32 of A-Z a-z 0-9 _ . - */
bool conf_pool_name_ok(const char *name);

#endif
