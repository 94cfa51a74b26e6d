/*
 * redis-addr.c: a Redis address read the one way tpd and tpctl both read
 * it (redis-addr.h has the grammar).
 */
#include "config.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "redis-addr.h"

#define REDIS_ADDR_EXPECTED "unix:PATH, HOST[:PORT] or [IPV6][:PORT]"

static int redis_addr_fail(char **, const char *, ...) __attribute__((format(printf, 2, 3)));

/* Sets *cause (if wanted) and returns -1. */
static int
redis_addr_fail(char **cause, const char *fmt, ...)
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

/* Whether the n bytes at h are an IPv6 address, with a %zone or not. */
static bool
redis_addr_is_ipv6(const char *h, size_t n)
{
	char buf[INET6_ADDRSTRLEN];
	struct in6_addr a6;
	const char *pct = memchr(h, '%', n);
	size_t zone = 0;

	if (pct != NULL) {
		zone = n - (size_t)(pct - h) - 1;
		if (zone == 0 || strspn(pct + 1, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
		    "0123456789._-") < zone)
			return false;
		n = (size_t)(pct - h);
	}
	if (n == 0 || n >= sizeof buf)
		return false;
	memcpy(buf, h, n);
	buf[n] = '\0';
	return inet_pton(AF_INET6, buf, &a6) == 1;
}

/* Reads PORT at p into *port: 1 to 65535, digits only. */
static bool
redis_addr_port(const char *p, int *port)
{
	long v = 0;

	if (*p == '\0')
		return false;
	for (; *p != '\0'; p++) {
		if (*p < '0' || *p > '9')
			return false;
		if ((v = v * 10 + (*p - '0')) > 65535)
			return false;
	}
	*port = (int)v;
	return v >= 1;
}

/* Copies the n bytes at h into a->host; -1 when they do not fit. */
static int
redis_addr_host(struct redis_addr *a, const char *s, const char *h, size_t n, char **cause)
{
	if (n == 0)
		return redis_addr_fail(cause, "\"%s\" has no host (expected %s)", s,
		    REDIS_ADDR_EXPECTED);
	if (n >= sizeof a->host)
		return redis_addr_fail(cause, "\"%s\": host longer than %zu bytes", s,
		    sizeof a->host - 1);
	memcpy(a->host, h, n);
	a->host[n] = '\0';
	return 0;
}

int
redis_addr_parse(const char *s, struct redis_addr *a, char **cause)
{
	const char *path = NULL, *port = NULL, *colon;

	if (cause != NULL)
		*cause = NULL;
	memset(a, 0, sizeof *a);
	if (strncmp(s, "unix:", 5) == 0) {
		if (s[5] == '\0')
			return redis_addr_fail(cause, "unix: needs the socket's path, as unix:PATH");
		path = s + 5;
	} else if (*s == '/')
		path = s;
	if (path != NULL) {
		if (strlen(path) >= sizeof a->path)
			return redis_addr_fail(cause, "\"%s\": socket path longer than %zu bytes",
			    s, sizeof a->path - 1);
		a->is_unix = true;
		strcpy(a->path, path);
		return 0;
	}

	if (*s == '[') {
		const char *close = strchr(s, ']');

		if (close == NULL || (close[1] != '\0' && close[1] != ':'))
			return redis_addr_fail(cause, "\"%s\" is not [IPV6] or [IPV6]:PORT", s);
		if (redis_addr_host(a, s, s + 1, (size_t)(close - s - 1), cause) == -1)
			return -1;
		if (!redis_addr_is_ipv6(a->host, strlen(a->host)))
			return redis_addr_fail(cause, "\"%s\": \"%s\" is not an IPv6 address", s,
			    a->host);
		if (close[1] == ':')
			port = close + 2;
	} else if ((colon = strrchr(s, ':')) == NULL) {
		if (redis_addr_host(a, s, s, strlen(s), cause) == -1)
			return -1;
	} else if (memchr(s, ':', (size_t)(colon - s)) != NULL) {
		/* more than one colon: an IPv6 address without its brackets */
		if (!redis_addr_is_ipv6(s, (size_t)(colon - s))) {
			if (redis_addr_is_ipv6(s, strlen(s)))
				return redis_addr_fail(cause, "\"%s\": an IPv6 address goes in "
				    "brackets, as [%s] or [%s]:PORT", s, s, s);
			return redis_addr_fail(cause, "\"%s\" is not %s", s, REDIS_ADDR_EXPECTED);
		}
		if (redis_addr_host(a, s, s, (size_t)(colon - s), cause) == -1)
			return -1;
		port = colon + 1;
	} else {
		if (redis_addr_host(a, s, s, (size_t)(colon - s), cause) == -1)
			return -1;
		port = colon + 1;
	}
	if (*s != '[' && strchr(a->host, ':') == NULL && strspn(a->host,
	    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") !=
	    strlen(a->host))
		return redis_addr_fail(cause, "\"%s\": \"%s\" is not a host name or address "
		    "(expected %s)", s, a->host, REDIS_ADDR_EXPECTED);
	if (port == NULL)
		a->port = REDIS_ADDR_PORT;
	else if (!redis_addr_port(port, &a->port))
		return redis_addr_fail(cause, "\"%s\": the port must be a number from 1 to 65535",
		    s);
	return 0;
}

const char *
redis_addr_format(const struct redis_addr *a, char *buf, size_t len)
{
	if (a->is_unix)
		snprintf(buf, len, "unix:%s", a->path);
	else if (strchr(a->host, ':') != NULL)
		snprintf(buf, len, "[%s]:%d", a->host, a->port);
	else
		snprintf(buf, len, "%s:%d", a->host, a->port);
	return buf;
}
