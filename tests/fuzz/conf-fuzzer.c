/*
 * conf-fuzzer.c: libFuzzer target for the configuration file reader. The
 * input is written to a memfd and read by path, as tpd -c reads a file:
 * conf_init, conf_load, and when the file loads, conf_validate (as tpd.c
 * and reload.c do).
 *
 * Beyond what ASan, UBSan and LeakSanitizer catch, it aborts when a promise
 * of conf.h breaks:
 *   - conf_load returns 0 with no errors, or -1 with errors, each line
 *     "FILE:LINE: ..." or "FILE: ...", sorted by line, every LINE one of
 *     the file's (or the one after its last, for a read error);
 *   - a file that loads passes conf_validate, and gives values the daemon
 *     can use as they are: pools named as conf_pool_name_ok wants, the
 *     default pool first, 1 <= size <= limit <= CONF_POOL_MAX_LIMIT,
 *     capacity in range, listen addresses that split, env entries
 *     NAME=value, output_limit <= output_limit_max.
 */
#include "config.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "conf/conf.h"
#include "base/log.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int conf_fd = -1;
static char conf_path[64];

static void __attribute__((noreturn, format(printf, 1, 2)))
broken(const char *fmt, ...)
{
	va_list ap;

	fputs("conf-fuzzer: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	abort();
}

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
	if ((conf_fd = memfd_create("tpd.conf", MFD_CLOEXEC)) == -1) {
		perror("conf-fuzzer: memfd_create");
		exit(1);
	}
	snprintf(conf_path, sizeof conf_path, "/proc/self/fd/%d", conf_fd);
	log_init(LOG_ERR);
	return 0;
}

/* Every line of errors names the file, then a line of it (sorted) or none. */
static void
check_errors(const char *errors, unsigned nlines)
{
	size_t plen = strlen(conf_path);
	unsigned last = 0;

	for (const char *p = errors; p != NULL && *p != '\0'; ) {
		const char *eol = strchr(p, '\n');
		size_t len = eol != NULL ? (size_t)(eol - p) : strlen(p);

		if (len < plen + 2 || strncmp(p, conf_path, plen) != 0 || p[plen] != ':')
			broken("error line without the file's name: \"%.*s\"", (int)len, p);
		if (isdigit((unsigned char)p[plen + 1])) {
			char *end;
			unsigned long line = strtoul(p + plen + 1, &end, 10);
			if (*end != ':' || line < 1 || line > nlines + 1)
				broken("error at line %lu of a file of %u lines: \"%.*s\"", line,
				    nlines, (int)len, p);
			if (line < last)
				broken("errors not sorted: line %lu after line %u", line, last);
			last = (unsigned)line;
		} else if (p[plen + 1] != ' ')
			broken("error line neither FILE:LINE: nor FILE: \"%.*s\"", (int)len, p);
		p = eol != NULL ? eol + 1 : NULL;
	}
}

/* A conf that loaded: fit for the daemon as it is. */
static void
check_conf(const struct conf *c)
{
	char host[256], port[8], *cause = NULL, *errors = NULL;

	if (conf_validate(c, &errors) != 0)
		broken("a loaded file fails conf_validate: %s", errors ? errors : "?");
	if (c->npools < 1 || c->npools > CONF_MAX_POOLS || strcmp(c->pools[0].name, "default") != 0)
		broken("%zu pools, the first \"%s\"", c->npools,
		    c->npools > 0 ? c->pools[0].name : "");
	for (size_t i = 0; i < c->npools; i++) {
		const struct conf_pool *p = &c->pools[i];
		if (!conf_pool_name_ok(p->name))
			broken("pool name \"%s\" loaded", p->name);
		if (p->size < 1 || p->size > p->limit || p->limit > CONF_POOL_MAX_LIMIT ||
		    p->capacity < 1 || p->capacity > CONF_POOL_MAX_CAPACITY)
			broken("pool %s: size %u, limit %u, capacity %u", p->name, p->size,
			    p->limit, p->capacity);
		for (size_t j = 0; j < i; j++)
			if (strcmp(c->pools[j].name, p->name) == 0)
				broken("pool %s twice", p->name);
	}
	if (c->nlisten > CONF_MAX_LISTEN)
		broken("%zu listen addresses", c->nlisten);
	for (size_t i = 0; i < c->nlisten; i++) {
		if (conf_split_hostport(c->listen[i], host, sizeof host, port, sizeof port,
		    &cause) == -1)
			broken("listen %s loaded but does not split: %s", c->listen[i],
			    cause ? cause : "?");
	}
	if (c->nexec_env > CONF_MAX_ENV)
		broken("%zu env entries", c->nexec_env);
	for (size_t i = 0; i < c->nexec_env; i++) {
		const char *e = c->exec_env[i], *eq = strchr(e, '=');
		if (eq == NULL || eq == e)
			broken("env entry \"%s\" is not NAME=value", e);
	}
	if (c->exec_output_limit > c->exec_output_limit_max)
		broken("output_limit %zu above output_limit_max %zu", c->exec_output_limit,
		    c->exec_output_limit_max);
	if (c->max_request_bytes < 256 || c->socket_mode > 0777)
		broken("max_request_bytes %zu, socket_mode %o", c->max_request_bytes,
		    (unsigned)c->socket_mode);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct conf c;
	char *errors = NULL;
	unsigned nlines = 1;
	int r;

	if (ftruncate(conf_fd, 0) == -1 || pwrite(conf_fd, data, size, 0) != (ssize_t)size)
		broken("cannot write the memfd");
	for (size_t i = 0; i < size; i++)
		nlines += data[i] == '\n';
	conf_init(&c);
	r = conf_load(&c, conf_path, &errors);
	if (r == 0 && errors != NULL)
		broken("conf_load succeeded with errors: %s", errors);
	if (r == -1 && errors == NULL)
		broken("conf_load failed without errors");
	if (r != 0 && r != -1)
		broken("conf_load returned %d", r);
	if (r == 0)
		check_conf(&c);
	else
		check_errors(errors, nlines);
	free(errors);
	conf_free(&c);
	return 0;
}
