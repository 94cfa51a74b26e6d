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
 * Reads path over c's current values. Every error is collected as one line
 * "FILE:LINE: message" naming the key; returns 0, or -1 with *errors set to
 * all of them (newline-separated, caller frees) and c left unusable.
 */
int conf_load(struct conf *c, const char *path, char **errors);

/* The pool called name, or NULL. */
struct conf_pool *conf_pool_find(struct conf *c, const char *name);

/* The named pool, added with defaults if missing (NULL when full). */
struct conf_pool *conf_pool_get(struct conf *c, const char *name);

/* Parses a duration: "500ms", "5s", "2m", "1h", or a bare number of ms. */
int conf_parse_duration_ms(const char *s, uint64_t *out);

/* Parses a size: "4096", "64k", "1M", "1G" (binary units). */
int conf_parse_size(const char *s, size_t *out);

#endif
