/*
 * conf.c: tpd's settings: built-in defaults, the value parsers shared with
 * the command line, and the configuration file (read with libinih).
 */
#include "config.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <arpa/inet.h>

#include <ctype.h>
#include <errno.h>
#include <grp.h>
#include <ini.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <unistd.h>

#include "conf.h"
#include "log.h"

/* A safe base environment for exec tasks; the daemon's own never leaks. */
static const char *const default_exec_env[] = {
	"PATH=/usr/local/bin:/usr/bin:/bin",
	"LANG=C.UTF-8",
};

void
conf_init(struct conf *c)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);

	memset(c, 0, sizeof *c);
	c->socket_mode = 0660;
	c->max_connections = 1024;
	c->max_request_bytes = 1024 * 1024;
	c->max_output_buffer = 8 * 1024 * 1024;
	c->output_stall_timeout_ms = 60 * 1000;
	c->result_ttl_ms = 10 * 60 * 1000;
	c->result_retain = 10000;
	c->shutdown_timeout_ms = 0;
	c->log_level = LOG_INFO;
	c->exec_output_limit = 1024 * 1024;
	c->exec_output_limit_max = 16 * 1024 * 1024;
	c->exec_kill_grace_ms = 5000;
	c->stream_budget = 256 * 1024;
	for (size_t i = 0; i < sizeof default_exec_env / sizeof default_exec_env[0]; i++)
		c->exec_env[c->nexec_env++] = strdup(default_exec_env[i]);
	struct conf_pool *d = conf_pool_get(c, "default");
	d->size = cpus > 0 && cpus <= 64 ? (unsigned)cpus : 4;
}

void
conf_free(struct conf *c)
{
	free(c->path);
	free(c->socket);
	free(c->socket_group);
	for (size_t i = 0; i < c->nlisten; i++)
		free(c->listen[i]);
	free(c->admin_group);
	free(c->token_file);
	free(c->admin_token_file);
	for (size_t i = 0; i < c->nexec_env; i++)
		free(c->exec_env[i]);
	for (size_t i = 0; i < c->npools; i++)
		free(c->pools[i].name);
	memset(c, 0, sizeof *c);
}

struct conf_pool *
conf_pool_find(struct conf *c, const char *name)
{
	for (size_t i = 0; i < c->npools; i++)
		if (strcmp(c->pools[i].name, name) == 0)
			return &c->pools[i];
	return NULL;
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
	p->name = strdup(name);
	p->size = 4;
	p->limit = 64;
	p->capacity = 1024;
	return p;
}

/* The digits that start s (no sign, no space), and where they end. */
static int
leading_number(const char *s, unsigned long long *v, char **end)
{
	if (s == NULL || !isdigit((unsigned char)*s))
		return -1;
	errno = 0;
	*v = strtoull(s, end, 10);
	return errno != 0 ? -1 : 0;
}

int
conf_parse_duration_ms(const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v;
	uint64_t mult = 1;

	if (leading_number(s, &v, &end) == -1)
		return -1;
	if (strcmp(end, "") == 0 || strcmp(end, "ms") == 0)
		mult = 1;
	else if (strcmp(end, "s") == 0)
		mult = 1000;
	else if (strcmp(end, "m") == 0 || strcmp(end, "min") == 0)
		mult = 60 * 1000;
	else if (strcmp(end, "h") == 0)
		mult = 3600 * 1000;
	else if (strcmp(end, "d") == 0)
		mult = 24 * 3600 * 1000;
	else
		return -1;
	if (v > UINT64_MAX / mult)
		return -1;
	*out = v * mult;
	return 0;
}

int
conf_parse_size(const char *s, size_t *out)
{
	char *end;
	unsigned long long v;
	size_t mult = 1;

	if (leading_number(s, &v, &end) == -1)
		return -1;
	switch (*end) {
	case '\0': break;
	case 'k': case 'K': mult = 1024; end++; break;
	case 'm': case 'M': mult = 1024 * 1024; end++; break;
	case 'g': case 'G': mult = 1024 * 1024 * 1024; end++; break;
	default: return -1;
	}
	if (*end == 'i' || *end == 'B')
		end += (*end == 'i' && end[1] == 'B') ? 2 : 1;
	if (*end != '\0' || v > SIZE_MAX / mult)
		return -1;
	*out = (size_t)v * mult;
	return 0;
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

/* ---------------------------------------------------------------- the file */

/*
 * The file is read with libinih. Debian builds it without line numbers in
 * the handler and inih reports only its first error, so a reader function
 * feeds inih one line at a time: it counts lines, cuts comments ('#' or ';'
 * at the start of a line or after white space), trims, notes section headers
 * (so an empty [pool NAME] still makes a pool, and errors can name a
 * header's line) and reports the lines inih would reject. inih then splits
 * the line into key and value and calls the handler before asking for the
 * next line, so the reader's line number is the handler's. Errors are
 * collected, never fatal: one run names them all.
 */

enum conf_sect { SECT_NONE, SECT_DAEMON, SECT_EXEC, SECT_POOL, SECT_BAD };

enum conf_kind {
	KIND_COUNT,     /* unsigned, decimal digits */
	KIND_SIZE,      /* size_t, with an optional k/M/G */
	KIND_DURATION,  /* uint64_t milliseconds, with an optional unit */
	KIND_SOCKET,    /* char *, a Unix socket path; empty = the default rule */
	KIND_MODE,      /* mode_t, octal */
	KIND_GROUP,     /* char *, an existing group's name; empty = none */
	KIND_FILE,      /* char *, a readable file; empty = none */
	KIND_LOGLEVEL,  /* int, a log.h level */
	KIND_LISTEN,    /* repeatable, space-separated HOST:PORT list */
	KIND_ENV,       /* repeatable NAME=value */
};

struct conf_key {
	enum conf_sect sect;
	const char *name;
	enum conf_kind kind;
	size_t off;             /* in struct conf, or in struct conf_pool for SECT_POOL */
	uint64_t min, max;
};

#define KIB 1024ULL
#define MIB (1024ULL * KIB)
#define GIB (1024ULL * MIB)
#define SEC 1000ULL
#define DAY (24ULL * 3600 * SEC)
#define D(f) offsetof(struct conf, f)
#define P(f) offsetof(struct conf_pool, f)

static const struct conf_key conf_keys[] = {
	{ SECT_DAEMON, "socket", KIND_SOCKET, D(socket), 0, 0 },
	{ SECT_DAEMON, "socket_mode", KIND_MODE, D(socket_mode), 0, 0777 },
	{ SECT_DAEMON, "socket_group", KIND_GROUP, D(socket_group), 0, 0 },
	{ SECT_DAEMON, "listen", KIND_LISTEN, D(listen), 0, 0 },
	{ SECT_DAEMON, "max_connections", KIND_COUNT, D(max_connections), 1, 1048576 },
	{ SECT_DAEMON, "max_request_bytes", KIND_SIZE, D(max_request_bytes), 256, GIB },
	{ SECT_DAEMON, "max_output_buffer", KIND_SIZE, D(max_output_buffer), 64 * KIB, GIB },
	{ SECT_DAEMON, "output_stall_timeout", KIND_DURATION, D(output_stall_timeout_ms), 0, DAY },
	{ SECT_DAEMON, "result_ttl", KIND_DURATION, D(result_ttl_ms), 0, 30 * DAY },
	{ SECT_DAEMON, "result_retain", KIND_COUNT, D(result_retain), 0, 10000000 },
	{ SECT_DAEMON, "shutdown_timeout", KIND_DURATION, D(shutdown_timeout_ms), 0, 7 * DAY },
	{ SECT_DAEMON, "log_level", KIND_LOGLEVEL, D(log_level), 0, 0 },
	{ SECT_DAEMON, "admin_group", KIND_GROUP, D(admin_group), 0, 0 },
	{ SECT_DAEMON, "token_file", KIND_FILE, D(token_file), 0, 0 },
	{ SECT_DAEMON, "admin_token_file", KIND_FILE, D(admin_token_file), 0, 0 },
	{ SECT_EXEC, "output_limit", KIND_SIZE, D(exec_output_limit), 0, GIB },
	{ SECT_EXEC, "output_limit_max", KIND_SIZE, D(exec_output_limit_max), 0, GIB },
	{ SECT_EXEC, "kill_grace", KIND_DURATION, D(exec_kill_grace_ms), 0, 3600 * SEC },
	{ SECT_EXEC, "env", KIND_ENV, D(exec_env), 0, 0 },
	{ SECT_EXEC, "stream_budget", KIND_SIZE, D(stream_budget), 4 * KIB, GIB },
	{ SECT_POOL, "size", KIND_COUNT, P(size), 1, CONF_POOL_MAX_LIMIT },
	{ SECT_POOL, "limit", KIND_COUNT, P(limit), 1, CONF_POOL_MAX_LIMIT },
	{ SECT_POOL, "capacity", KIND_COUNT, P(capacity), 1, CONF_POOL_MAX_CAPACITY },
};

#define CONF_MAX_ERRORS 200

struct conf_error {
	int line;               /* 0: about the file, or no line */
	unsigned seq;           /* keeps the order of errors on one line */
	char *text;
};

/* Where a key (or "[" for the header) of a section was first given. */
struct conf_seen {
	char *sect;
	char *key;
	int line;
};

struct conf_load {
	const char *path;       /* NULL: conf_validate, no file */
	FILE *fp;
	struct conf *c;
	int line;
	char *raw;
	size_t rawcap;

	struct conf_error *errs;
	size_t nerrs, errcap;
	size_t dropped;         /* errors past CONF_MAX_ERRORS */

	/* the section the reader saw last */
	enum conf_sect sect;
	char sect_name[8 + CONF_POOL_NAME_MAX];  /* "daemon", "exec", "pool NAME" */
	struct conf_pool *pool;

	struct conf_seen *seen;
	size_t nseen, seencap;
	bool listen_given;      /* the file's first listen replaced c's list */
};

static void __attribute__((format(printf, 3, 4)))
load_error(struct conf_load *l, int line, const char *fmt, ...)
{
	va_list ap;
	char *text;

	if (l->nerrs == CONF_MAX_ERRORS) {
		l->dropped++;
		return;
	}
	if (l->nerrs == l->errcap) {
		size_t n = l->errcap ? l->errcap * 2 : 16;
		struct conf_error *e = realloc(l->errs, n * sizeof *e);
		if (e == NULL) {
			l->dropped++;
			return;
		}
		l->errs = e;
		l->errcap = n;
	}
	va_start(ap, fmt);
	if (vasprintf(&text, fmt, ap) == -1)
		text = NULL;
	va_end(ap);
	if (text == NULL) {
		l->dropped++;
		return;
	}
	l->errs[l->nerrs].line = line;
	l->errs[l->nerrs].seq = (unsigned)l->nerrs;
	l->errs[l->nerrs].text = text;
	l->nerrs++;
}

/* An error about a key of the current section, at the current line. */
#define key_error(l, key, fmt, ...) \
	load_error(l, (l)->line, "[%s] %s: " fmt, (l)->sect_name, key, __VA_ARGS__)

static const struct conf_seen *
seen_find(const struct conf_load *l, const char *sect, const char *key)
{
	for (size_t i = 0; i < l->nseen; i++)
		if (strcmp(l->seen[i].sect, sect) == 0 && strcmp(l->seen[i].key, key) == 0)
			return &l->seen[i];
	return NULL;
}

/* Records where sect/key was given; returns the earlier line, or 0 if first. */
static int
seen_note(struct conf_load *l, const char *sect, const char *key)
{
	const struct conf_seen *old = seen_find(l, sect, key);

	if (old != NULL)
		return old->line;
	if (l->nseen == l->seencap) {
		size_t n = l->seencap ? l->seencap * 2 : 32;
		struct conf_seen *s = realloc(l->seen, n * sizeof *s);
		if (s == NULL)
			return 0;
		l->seen = s;
		l->seencap = n;
	}
	l->seen[l->nseen].sect = strdup(sect);
	l->seen[l->nseen].key = strdup(key);
	l->seen[l->nseen].line = l->line;
	if (l->seen[l->nseen].sect == NULL || l->seen[l->nseen].key == NULL) {
		free(l->seen[l->nseen].sect);
		free(l->seen[l->nseen].key);
		return 0;
	}
	l->nseen++;
	return 0;
}

static int
seen_line(const struct conf_load *l, const char *sect, const char *key)
{
	const struct conf_seen *s = seen_find(l, sect, key);

	return s != NULL ? s->line : 0;
}

/* "1G", "64k", "300": a size the way a person would write it in the file. */
static const char *
fmt_size(uint64_t v, char *buf, size_t len)
{
	if (v != 0 && v % GIB == 0)
		snprintf(buf, len, "%lluG", (unsigned long long)(v / GIB));
	else if (v != 0 && v % MIB == 0)
		snprintf(buf, len, "%lluM", (unsigned long long)(v / MIB));
	else if (v != 0 && v % KIB == 0)
		snprintf(buf, len, "%lluk", (unsigned long long)(v / KIB));
	else
		snprintf(buf, len, "%llu", (unsigned long long)v);
	return buf;
}

static const char *
fmt_duration(uint64_t ms, char *buf, size_t len)
{
	if (ms != 0 && ms % DAY == 0)
		snprintf(buf, len, "%llud", (unsigned long long)(ms / DAY));
	else if (ms != 0 && ms % (3600 * SEC) == 0)
		snprintf(buf, len, "%lluh", (unsigned long long)(ms / (3600 * SEC)));
	else if (ms != 0 && ms % (60 * SEC) == 0)
		snprintf(buf, len, "%llumin", (unsigned long long)(ms / (60 * SEC)));
	else if (ms != 0 && ms % SEC == 0)
		snprintf(buf, len, "%llus", (unsigned long long)(ms / SEC));
	else
		snprintf(buf, len, "%llums", (unsigned long long)ms);
	return buf;
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

static const char *
sect_label(enum conf_sect sect)
{
	switch (sect) {
	case SECT_DAEMON: return "[daemon]";
	case SECT_EXEC: return "[exec]";
	case SECT_POOL: return "[pool NAME]";
	default: return "no section";
	}
}

static void
key_unknown(struct conf_load *l, const char *name)
{
	const struct conf_key *near = NULL, *elsewhere = NULL;
	size_t best = 3;

	for (size_t i = 0; i < sizeof conf_keys / sizeof conf_keys[0]; i++) {
		const struct conf_key *k = &conf_keys[i];
		if (k->sect != l->sect) {
			if (strcmp(k->name, name) == 0)
				elsewhere = k;
			continue;
		}
		size_t d = edit_distance(name, k->name);
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
		key_error(l, name, "unknown key%s", "");
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
	snprintf(seenkey, sizeof seenkey, "env %.*s", (int)n, value);
	if ((first = seen_note(l, l->sect_name, seenkey)) != 0) {
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

/* Checks value against k and stores it at base + k->off. */
static void
key_set(struct conf_load *l, const struct conf_key *k, char *base, const char *value)
{
	void *slot = base + k->off;
	uint64_t v = 0;
	size_t sz;
	char lo[32], hi[32], got[32];
	int r;

	switch (k->kind) {
	case KIND_COUNT:
		if ((r = parse_digits(value, &v)) == -1) {
			key_error(l, k->name, "\"%s\" is not a whole number", value);
			return;
		}
		if (r == -2 || v < k->min || v > k->max) {
			key_error(l, k->name, "%s is out of range (%llu to %llu)", value,
			    (unsigned long long)k->min, (unsigned long long)k->max);
			return;
		}
		*(unsigned *)slot = (unsigned)v;
		return;
	case KIND_SIZE:
		if (conf_parse_size(value, &sz) == -1) {
			key_error(l, k->name, "\"%s\" is not a size (a number of bytes, "
			    "or with k, M or G)", value);
			return;
		}
		if (sz < k->min || sz > k->max) {
			key_error(l, k->name, "%s is out of range (%s to %s)",
			    fmt_size(sz, got, sizeof got), fmt_size(k->min, lo, sizeof lo),
			    fmt_size(k->max, hi, sizeof hi));
			return;
		}
		*(size_t *)slot = sz;
		return;
	case KIND_DURATION:
		if (conf_parse_duration_ms(value, &v) == -1) {
			key_error(l, k->name, "\"%s\" is not a duration (like 500ms, 5s, "
			    "2min, 1h, 1d)", value);
			return;
		}
		if (v < k->min || v > k->max) {
			key_error(l, k->name, "%s is out of range (%s to %s)",
			    fmt_duration(v, got, sizeof got),
			    fmt_duration(k->min, lo, sizeof lo),
			    fmt_duration(k->max, hi, sizeof hi));
			return;
		}
		*(uint64_t *)slot = v;
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
	case KIND_LOGLEVEL:
		if ((r = log_level_parse(value)) == -1) {
			key_error(l, k->name, "\"%s\" is not a level (error, warning, notice, "
			    "info or debug)", value);
			return;
		}
		*(int *)slot = r;
		return;
	case KIND_LISTEN:
		set_listen(l, k, value);
		return;
	case KIND_ENV:
		set_env(l, k, value);
		return;
	}
}

static int
conf_ini_handler(void *arg, const char *section, const char *name, const char *value)
{
	struct conf_load *l = arg;
	const struct conf_key *k = NULL;
	int first;

	/* The reader's own record of the section is used: it knows the header's line. */
	(void)section;
	if (l->sect == SECT_BAD)
		return 1;       /* the header was reported; its keys mean nothing */
	if (*name == '\0') {
		load_error(l, l->line, "a value without a key");
		return 1;
	}
	if (l->sect == SECT_NONE) {
		load_error(l, l->line, "%s: key outside any section (keys go under "
		    "[daemon], [exec] or [pool NAME])", name);
		return 1;
	}
	for (size_t i = 0; i < sizeof conf_keys / sizeof conf_keys[0]; i++)
		if (conf_keys[i].sect == l->sect && strcmp(conf_keys[i].name, name) == 0)
			k = &conf_keys[i];
	if (k == NULL) {
		key_unknown(l, name);
		return 1;
	}
	if (k->kind != KIND_LISTEN && k->kind != KIND_ENV &&
	    (first = seen_note(l, l->sect_name, k->name)) != 0) {
		key_error(l, k->name, "already set at line %d", first);
		return 1;
	}
	if (*value == '\0' && k->kind != KIND_SOCKET && k->kind != KIND_GROUP &&
	    k->kind != KIND_FILE && k->kind != KIND_LISTEN) {
		key_error(l, k->name, "empty value%s", "");
		return 1;
	}
	key_set(l, k, k->sect == SECT_POOL ? (char *)l->pool : (char *)l->c, value);
	return 1;
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
	char *close = strchr(s, ']'), *inner, *name;
	int first;

	l->sect = SECT_BAD;
	l->pool = NULL;
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
		if (!conf_pool_name_ok(name)) {
			load_error(l, l->line, "[pool %s]: a pool name is 1 to %d letters, "
			    "digits, '_', '.' or '-'", name, CONF_POOL_NAME_MAX);
			return;
		}
		if ((l->pool = conf_pool_get(l->c, name)) == NULL) {
			load_error(l, l->line, "[pool %s]: too many pools (at most %d)",
			    name, CONF_MAX_POOLS);
			return;
		}
		l->sect = SECT_POOL;
		snprintf(l->sect_name, sizeof l->sect_name, "pool %s", name);
	} else {
		load_error(l, l->line, "[%s]: unknown section (expected [daemon], [exec] "
		    "or [pool NAME])", inner);
		return;
	}
	if (l->sect != SECT_POOL)
		snprintf(l->sect_name, sizeof l->sect_name, "%s", inner);
	if ((first = seen_note(l, l->sect_name, "[")) != 0)
		load_error(l, l->line, "[%s]: section repeated (first at line %d)",
		    l->sect_name, first);
}

/* inih's fgets-style reader: the next line, cleaned, or "\n" for a bad one. */
static char *
conf_ini_reader(char *str, int num, void *arg)
{
	struct conf_load *l = arg;
	char *s, *sep;
	size_t n;

	if (getline(&l->raw, &l->rawcap, l->fp) == -1)
		return NULL;
	l->line++;
	s = l->raw;
	if (l->line == 1 && strncmp(s, "\xEF\xBB\xBF", 3) == 0)
		s += 3;         /* a UTF-8 byte order mark */
	s = line_clean(s);
	n = strlen(s);
	snprintf(str, (size_t)num, "\n");
	if (*s == '[') {
		section_open(l, s);
		return str;     /* inih's idea of the section is not used */
	}
	if (*s == '\0')
		return str;
	sep = strpbrk(s, "=:");
	if (sep == NULL || *sep != '=') {
		load_error(l, l->line, "expected \"key = value\", a [section] or a comment");
		return str;
	}
	if (n + 2 > (size_t)num) {
		load_error(l, l->line, "line too long (at most %d characters without "
		    "comments)", num - 2);
		return str;
	}
	snprintf(str, (size_t)num, "%s\n", s);
	return str;
}

/* A pool whose size the file left alone follows a smaller limit instead of failing. */
static void
conf_clamp_sizes(const struct conf_load *l, struct conf *c)
{
	for (size_t i = 0; i < c->npools; i++) {
		struct conf_pool *p = &c->pools[i];
		char sect[8 + CONF_POOL_NAME_MAX];

		snprintf(sect, sizeof sect, "pool %s", p->name);
		if (seen_line(l, sect, "size") == 0 && p->size > p->limit)
			p->size = p->limit;
	}
}

/*
 * The checks between keys: a pool's size within its limit, output_limit
 * within output_limit_max. Errors name the line of the key that caused them
 * when there is a file.
 */
static void
conf_cross_check(struct conf_load *l, const struct conf *c)
{
	char a[32], b[32];

	for (size_t i = 0; i < c->npools; i++) {
		const struct conf_pool *p = &c->pools[i];
		char sect[8 + CONF_POOL_NAME_MAX];
		int size_line, limit_line, line;

		snprintf(sect, sizeof sect, "pool %s", p->name);
		size_line = seen_line(l, sect, "size");
		limit_line = seen_line(l, sect, "limit");
		line = size_line ? size_line : limit_line ? limit_line : seen_line(l, sect, "[");
		if (p->size < 1 || p->size > p->limit)
			load_error(l, line, "[%s] size: %u is %s limit %u", sect, p->size,
			    p->size < 1 ? "below 1, the least" : "above", p->limit);
		if (p->limit < 1 || p->limit > CONF_POOL_MAX_LIMIT)
			load_error(l, line, "[%s] limit: %u is out of range (1 to %d)", sect,
			    p->limit, CONF_POOL_MAX_LIMIT);
		if (p->capacity < 1 || p->capacity > CONF_POOL_MAX_CAPACITY)
			load_error(l, seen_line(l, sect, "capacity"), "[%s] capacity: %u is "
			    "out of range (1 to %d)", sect, p->capacity, CONF_POOL_MAX_CAPACITY);
	}
	if (c->exec_output_limit > c->exec_output_limit_max) {
		int line = seen_line(l, "exec", "output_limit");
		load_error(l, line ? line : seen_line(l, "exec", "output_limit_max"),
		    "[exec] output_limit: %s is above output_limit_max %s",
		    fmt_size(c->exec_output_limit, a, sizeof a),
		    fmt_size(c->exec_output_limit_max, b, sizeof b));
	}
}

static int
error_cmp(const void *x, const void *y)
{
	const struct conf_error *a = x, *b = y;

	if (a->line != b->line)
		return a->line < b->line ? -1 : 1;
	return a->seq < b->seq ? -1 : a->seq > b->seq;
}

/* Frees l; returns 0, or -1 with *errors set to every error, sorted by line. */
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
			if (l->path != NULL && l->errs[i].line > 0)
				fprintf(m, "%s:%d: ", l->path, l->errs[i].line);
			else if (l->path != NULL)
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
conf_load(struct conf *c, const char *path, char **errors)
{
	struct conf_load l = { .path = path, .c = c, .sect = SECT_NONE };
	int r;

	*errors = NULL;
	free(c->path);
	c->path = strdup(path);
	if ((l.fp = fopen(path, "r")) == NULL) {
		load_error(&l, 0, "cannot open: %s", strerror(errno));
		return load_finish(&l, errors);
	}
	r = ini_parse_stream(conf_ini_reader, &l, conf_ini_handler, &l);
	if (ferror(l.fp))
		load_error(&l, l.line + 1, "read error: %s", strerror(errno));
	else if (r < 0)
		load_error(&l, 0, "out of memory while reading");
	else if (r > 0 && l.nerrs == 0)
		load_error(&l, r, "not understood");    /* the reader should have said why */
	fclose(l.fp);
	conf_clamp_sizes(&l, c);
	conf_cross_check(&l, c);
	return load_finish(&l, errors);
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
