/*
 * redis-addr.h: the one reading of a Redis address, for tpd (a source's
 * redis key) and tpctl (--redis, $TPD_REDIS) alike, so that an address
 * means the same in both:
 *
 *   unix:PATH     Redis's Unix socket (PATH shorter than a sockaddr_un's)
 *   /PATH         the same, an absolute path given alone
 *   HOST[:PORT]   a host name or IPv4 address (letters, digits, . - _)
 *   [IPV6][:PORT] an IPv6 address in brackets (a %zone too)
 *
 * PORT is 1 to 65535, REDIS_ADDR_PORT (Redis's own) when left out. For
 * what older versions of tpctl took, an IPv6 address without brackets is
 * read when a port follows it (::1:6379 is [::1]:6379); without a port it
 * is refused, asking for the brackets (2001:db8::1 could be either).
 * Names are not resolved here: hiredis does that at each connect.
 */
#ifndef TPD_REDIS_ADDR_H
#define TPD_REDIS_ADDR_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/un.h>

#define REDIS_ADDR_PORT 6379

struct redis_addr {
	bool is_unix;
	char path[sizeof ((struct sockaddr_un *)0)->sun_path]; /* is_unix: the socket */
	char host[256];         /* !is_unix: the host, brackets removed */
	int port;               /* !is_unix: 1 to 65535 */
};

/*
 * Reads s into *a. Returns 0, or -1 with *a unspecified and *cause
 * (unless cause is NULL) one line saying what was wrong, quoting s
 * (caller frees; NULL when out of memory).
 */
int redis_addr_parse(const char *s, struct redis_addr *a, char **cause);

/*
 * a written back in full, port included, for messages: "unix:PATH",
 * "HOST:PORT" or "[IPV6]:PORT". Returns buf (cut short when len is too
 * small: REDIS_ADDR_TEXT_MAX always fits).
 */
#define REDIS_ADDR_TEXT_MAX (sizeof ((struct redis_addr *)0)->host + 16)
const char *redis_addr_format(const struct redis_addr *a, char *buf, size_t len);

#endif
