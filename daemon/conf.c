/* conf.c: tpd's settings: built-in defaults and the value parsers shared with the command line. */
#include "config.h"

#include <ctype.h>
#include <stdio.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <unistd.h>

#include "conf.h"

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

int
conf_parse_duration_ms(const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v;
	uint64_t mult = 1;

	if (s == NULL || !isdigit((unsigned char)*s))
		return -1;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno != 0)
		return -1;
	if (strcmp(end, "") == 0 || strcmp(end, "ms") == 0)
		mult = 1;
	else if (strcmp(end, "s") == 0)
		mult = 1000;
	else if (strcmp(end, "m") == 0 || strcmp(end, "min") == 0)
		mult = 60 * 1000;
	else if (strcmp(end, "h") == 0)
		mult = 3600 * 1000;
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

	if (s == NULL || !isdigit((unsigned char)*s))
		return -1;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno != 0)
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
conf_load(struct conf *c, const char *path, char **errors)
{
	if (asprintf(errors, "%s: configuration files are not supported yet", path) == -1)
		*errors = NULL;
	return -1;
}
