/*
 * redislink.c: tpctl's connection to Redis, for the commands that work
 * with a tpd source's streams (enqueue, results): hiredis's synchronous
 * API, one command at a time. The address is written as tpd.conf's
 * [source NAME] redis key is: unix:PATH, HOST:PORT or [IPV6]:PORT.
 */
#include "config.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "tpctl.h"

/* Redis's own port, for a --redis HOST without one. */
#define REDISLINK_DEFAULT_PORT 6379

const char *
redislink_address(const char *given)
{
	const char *env = getenv("TPD_REDIS");

	if (given != NULL)
		return given;
	return env != NULL && *env != '\0' ? env : NULL;
}

redisContext *
redislink_open(const struct cmd *c, const char *addr, uint64_t timeout_ms, int *code)
{
	struct timeval tv = { (time_t)(timeout_ms / 1000), (suseconds_t)(timeout_ms % 1000) * 1000 };
	redisContext *rc;
	char host[256];
	const char *colon;
	long port;
	char *end;

	*code = EX_USAGE;
	if (addr == NULL) {
		cmd_usage_error(c, "--redis ADDR is needed (unix:PATH or HOST:PORT; or set "
		    "TPD_REDIS)");
		return NULL;
	}
	if (strncmp(addr, "unix:", 5) == 0) {
		if (addr[5] == '\0') {
			cmd_usage_error(c, "--redis unix: needs the socket's path, as unix:PATH");
			return NULL;
		}
		rc = timeout_ms > 0 ? redisConnectUnixWithTimeout(addr + 5, tv) :
		    redisConnectUnix(addr + 5);
	} else {
		const char *h = addr;
		size_t hl;

		if (*addr == '[') {
			const char *close = strchr(addr, ']');
			if (close == NULL || close[1] != ':') {
				cmd_usage_error(c, "--redis %s: expected [IPV6]:PORT", addr);
				return NULL;
			}
			h = addr + 1;
			hl = (size_t)(close - h);
			colon = close + 1;
		} else if ((colon = strrchr(addr, ':')) == NULL) {
			/* a host alone: Redis's own port, as redis-cli -h HOST */
			colon = addr + strlen(addr);
			hl = strlen(addr);
		} else
			hl = (size_t)(colon - addr);
		errno = 0;
		end = NULL;
		port = *colon == '\0' ? REDISLINK_DEFAULT_PORT : strtol(colon + 1, &end, 10);
		if (hl == 0 || hl >= sizeof host || (end != NULL && *end != '\0') ||
		    (*colon == ':' && colon[1] == '\0') ||
		    errno != 0 || port < 1 || port > 65535) {
			cmd_usage_error(c, "--redis %s: expected unix:PATH, HOST or HOST:PORT "
			    "(port 1 to 65535; 6379 without one)", addr);
			return NULL;
		}
		memcpy(host, h, hl);
		host[hl] = '\0';
		rc = timeout_ms > 0 ? redisConnectWithTimeout(host, (int)port, tv) :
		    redisConnect(host, (int)port);
	}
	*code = EX_UNAVAILABLE;
	if (rc == NULL) {
		tpctl_warnx("cannot connect to redis at %s: out of memory", addr);
		*code = EX_OSERR;
		return NULL;
	}
	if (rc->err != 0) {
		tpctl_warnx("cannot connect to redis at %s: %s", addr, rc->errstr);
		redisFree(rc);
		return NULL;
	}
	/* the connect's timeout stays on the socket: a blocking read takes it off */
	tv.tv_sec = 0;
	tv.tv_usec = 0;
	redisSetTimeout(rc, tv);
	*code = 0;
	return rc;
}

int
redislink_failed(redisContext *rc, const char *addr, const char *what)
{
	if (interrupt_count() > 0)
		return EXIT_SIGNALLED + interrupt_last_signal();
	if (rc->err == REDIS_ERR_IO || rc->err == REDIS_ERR_EOF) {
		tpctl_warnx("%s: connection to redis at %s lost: %s", what, addr,
		    rc->err == REDIS_ERR_EOF ? "closed by the server" : rc->errstr);
		return EX_UNAVAILABLE;
	}
	tpctl_warnx("%s: redis at %s: %s", what, addr, rc->errstr);
	return EXIT_TASK_FAILED;
}

/*
 * One command whose reply may take long (XREAD BLOCK): hiredis's own read
 * retries on EINTR, so the reply is waited for here, in poll() beside the
 * interrupt pipe (interrupt.c), and read once the socket has data.
 */
int
redislink_call(redisContext *rc, int argc, const char **argv, redisReply **reply)
{
	struct pollfd pfd[2] = { { rc->fd, POLLIN, 0 }, { interrupt_fd(), POLLIN, 0 } };
	void *r = NULL;
	int done = 0;

	*reply = NULL;
	if (redisAppendCommandArgv(rc, argc, argv, NULL) != REDIS_OK)
		return -1;
	while (!done)
		if (redisBufferWrite(rc, &done) != REDIS_OK)
			return -1;
	for (;;) {
		if (redisGetReplyFromReader(rc, &r) != REDIS_OK)
			return -1;
		if (r != NULL) {
			*reply = r;
			return 0;
		}
		if (poll(pfd, pfd[1].fd >= 0 ? 2 : 1, -1) == -1 && errno != EINTR)
			return -1;
		if (interrupt_count() > 0)
			return -2;
		if ((pfd[0].revents & (POLLIN | POLLHUP | POLLERR)) && redisBufferRead(rc) != REDIS_OK)
			return -1;
	}
}
