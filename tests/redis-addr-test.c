/*
 * redis-addr-test: the Redis address (common/redis-addr.h) that a source's
 * redis key and tpctl's --redis share: every form either read before they
 * shared it, the port 6379 when left out, the address written back in
 * full, and the message for what is refused.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "redis-addr.h"

static const struct {
	const char *in;
	const char *path;       /* NULL: host and port */
	const char *host;
	int port;
	const char *full;       /* redis_addr_format's */
} good[] = {
	{ "unix:/run/redis/redis.sock", "/run/redis/redis.sock", NULL, 0,
	    "unix:/run/redis/redis.sock" },
	{ "unix:relative.sock", "relative.sock", NULL, 0, "unix:relative.sock" },
	{ "/run/redis.sock", "/run/redis.sock", NULL, 0, "unix:/run/redis.sock" },
	{ "127.0.0.1:6380", NULL, "127.0.0.1", 6380, "127.0.0.1:6380" },
	{ "127.0.0.1", NULL, "127.0.0.1", 6379, "127.0.0.1:6379" },
	{ "localhost", NULL, "localhost", 6379, "localhost:6379" },
	{ "redis.example.net:1", NULL, "redis.example.net", 1, "redis.example.net:1" },
	{ "redis_1:65535", NULL, "redis_1", 65535, "redis_1:65535" },
	{ "redis:06379", NULL, "redis", 6379, "redis:6379" },
	{ "[::1]:7000", NULL, "::1", 7000, "[::1]:7000" },
	{ "[::1]", NULL, "::1", 6379, "[::1]:6379" },
	{ "[fe80::1%eth0]:6379", NULL, "fe80::1%eth0", 6379, "[fe80::1%eth0]:6379" },
	{ "[2001:db8::ffff:1.2.3.4]", NULL, "2001:db8::ffff:1.2.3.4", 6379,
	    "[2001:db8::ffff:1.2.3.4]:6379" },
	/* tpctl took an IPv6 address without brackets when a port followed */
	{ "::1:6380", NULL, "::1", 6380, "[::1]:6380" },
	{ "2001:db8::1:80", NULL, "2001:db8::1", 80, "[2001:db8::1]:80" },
};

static const struct {
	const char *in;
	const char *why;
} bad[] = {
	{ "", "\"\" has no host (expected unix:PATH, HOST[:PORT] or [IPV6][:PORT])" },
	{ "unix:", "unix: needs the socket's path, as unix:PATH" },
	{ ":6379", "\":6379\" has no host (expected unix:PATH, HOST[:PORT] or [IPV6][:PORT])" },
	{ "localhost:", "\"localhost:\": the port must be a number from 1 to 65535" },
	{ "localhost:0", "\"localhost:0\": the port must be a number from 1 to 65535" },
	{ "localhost:65536", "\"localhost:65536\": the port must be a number from 1 to 65535" },
	{ "localhost:99999999999999999999",
	    "\"localhost:99999999999999999999\": the port must be a number from 1 to 65535" },
	{ "localhost:+80", "\"localhost:+80\": the port must be a number from 1 to 65535" },
	{ "localhost: 80", "\"localhost: 80\": the port must be a number from 1 to 65535" },
	{ "localhost:http", "\"localhost:http\": the port must be a number from 1 to 65535" },
	{ "*:6379", "\"*:6379\": \"*\" is not a host name or address "
	    "(expected unix:PATH, HOST[:PORT] or [IPV6][:PORT])" },
	{ "my host", "\"my host\": \"my host\" is not a host name or address "
	    "(expected unix:PATH, HOST[:PORT] or [IPV6][:PORT])" },
	{ "[::1", "\"[::1\" is not [IPV6] or [IPV6]:PORT" },
	{ "[::1]6379", "\"[::1]6379\" is not [IPV6] or [IPV6]:PORT" },
	{ "[]:6379", "\"[]:6379\" has no host (expected unix:PATH, HOST[:PORT] or [IPV6][:PORT])" },
	{ "[redis]:6379", "\"[redis]:6379\": \"redis\" is not an IPv6 address" },
	{ "[1.2.3.4]:6379", "\"[1.2.3.4]:6379\": \"1.2.3.4\" is not an IPv6 address" },
	{ "[fe80::1%]:6379", "\"[fe80::1%]:6379\": \"fe80::1%\" is not an IPv6 address" },
	{ "[::1]:0", "\"[::1]:0\": the port must be a number from 1 to 65535" },
	/* without brackets and a port, an IPv6 address would be ambiguous */
	{ "::1", "\"::1\": an IPv6 address goes in brackets, as [::1] or [::1]:PORT" },
	{ "fe80::1", "\"fe80::1\": an IPv6 address goes in brackets, as [fe80::1] or "
	    "[fe80::1]:PORT" },
	{ "a:b:c", "\"a:b:c\" is not unix:PATH, HOST[:PORT] or [IPV6][:PORT]" },
};

static void
test_forms_read(void)
{
	struct redis_addr a;
	char *why, full[REDIS_ADDR_TEXT_MAX];

	for (size_t i = 0; i < TEST_COUNT(good); i++) {
		int rv = redis_addr_parse(good[i].in, &a, &why);

		if (rv != 0)
			fprintf(stderr, "%s: refused: %s\n", good[i].in, why ? why : "");
		EXPECT(rv == 0 && why == NULL);
		free(why);
		if (rv != 0)
			continue;
		if (good[i].path != NULL)
			EXPECT(a.is_unix && strcmp(a.path, good[i].path) == 0);
		else
			EXPECT(!a.is_unix && strcmp(a.host, good[i].host) == 0 &&
			    a.port == good[i].port);
		redis_addr_format(&a, full, sizeof full);
		if (strcmp(full, good[i].full) != 0)
			fprintf(stderr, "%s: written back as %s\n", good[i].in, full);
		EXPECT(strcmp(full, good[i].full) == 0);
	}
	printf("ok: %zu addresses read, written back in full\n", TEST_COUNT(good));
}

static void
test_bad_refused_with_reason(void)
{
	struct redis_addr a;
	char *why;

	for (size_t i = 0; i < TEST_COUNT(bad); i++) {
		int rv = redis_addr_parse(bad[i].in, &a, &why);

		if (rv != -1 || why == NULL || strcmp(why, bad[i].why) != 0)
			fprintf(stderr, "%s: rv %d, %s\n", bad[i].in, rv, why ? why : "");
		EXPECT(rv == -1 && why != NULL && strcmp(why, bad[i].why) == 0);
		free(why);
		EXPECT(redis_addr_parse(bad[i].in, &a, NULL) == -1);
	}
	printf("ok: %zu addresses refused with their reason\n", TEST_COUNT(bad));
}

/* The longest a sockaddr_un takes is read; one byte more is refused, not cut. */
static void
test_path_length(void)
{
	struct redis_addr a;
	char in[sizeof a.path + 8], host[300], *why;
	size_t max = sizeof a.path - 1;

	memcpy(in, "unix:", 5);
	memset(in + 5, 'p', max);
	in[5 + max] = '\0';
	CHECK(redis_addr_parse(in, &a, NULL) == 0 && a.is_unix && strlen(a.path) == max,
	    "a path of %zu bytes is read", max);
	in[5 + max] = 'p';
	in[6 + max] = '\0';
	CHECK(redis_addr_parse(in, &a, &why) == -1 && why != NULL &&
	    strstr(why, "socket path longer than") != NULL, "one byte more: %s", why);
	free(why);

	memset(host, 'h', sizeof host - 1);
	host[sizeof host - 1] = '\0';
	CHECK(redis_addr_parse(host, &a, &why) == -1 && why != NULL &&
	    strstr(why, "host longer than 255 bytes") != NULL, "a long host: %s", why);
	free(why);
	printf("ok: the longest socket path is read, a longer one and a long host refused\n");
}

static const struct test_case cases[] = {
	{ "forms_read", test_forms_read },
	{ "bad_refused_with_reason", test_bad_refused_with_reason },
	{ "path_length", test_path_length },
};

int
main(int argc, char **argv)
{
	return test_run(cases, TEST_COUNT(cases), argc, argv);
}
