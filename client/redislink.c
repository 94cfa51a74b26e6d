/*
 * redislink.c: tpctl's connection to Redis, for the commands that work
 * with a tpd source's streams (enqueue, results): hiredis's synchronous
 * API, one command at a time. The address is read as tpd.conf's
 * [source NAME] redis key is (common/redis-addr.h): unix:PATH, /PATH,
 * HOST[:PORT] or [IPV6][:PORT], the port 6379 when left out.
 */
#include "config.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "redis-addr.h"
#include "stream-format.h"
#include "tpctl.h"

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
	struct redis_addr a;
	char full[REDIS_ADDR_TEXT_MAX], *cause = NULL;
	redisContext *rc;

	*code = EX_USAGE;
	if (addr == NULL) {
		cmd_usage_error(c, "--redis ADDR is needed (unix:PATH or HOST[:PORT]; or set "
		    "TPD_REDIS)");
		return NULL;
	}
	if (redis_addr_parse(addr, &a, &cause) == -1) {
		if (cause == NULL) {
			tpctl_warnx("out of memory");
			*code = EX_OSERR;
			return NULL;
		}
		cmd_usage_error(c, "--redis %s", cause);
		free(cause);
		return NULL;
	}
	/* the messages name the port even when it was left out */
	redis_addr_format(&a, full, sizeof full);
	if (a.is_unix)
		rc = timeout_ms > 0 ? redisConnectUnixWithTimeout(a.path, tv) :
		    redisConnectUnix(a.path);
	else
		rc = timeout_ms > 0 ? redisConnectWithTimeout(a.host, a.port, tv) :
		    redisConnect(a.host, a.port);
	*code = EX_UNAVAILABLE;
	if (rc == NULL) {
		tpctl_warnx("cannot connect to redis at %s: out of memory", full);
		*code = EX_OSERR;
		return NULL;
	}
	if (rc->err != 0) {
		tpctl_warnx("cannot connect to redis at %s: %s", full, rc->errstr);
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

void
redislink_result(const redisReply *kv, struct sfmt_result *r)
{
	sfmt_result_init(r);
	if (kv->type != REDIS_REPLY_ARRAY)
		return;
	for (size_t i = 0; i + 1 < kv->elements; i += 2) {
		const redisReply *k = kv->element[i], *v = kv->element[i + 1];

		if (k->type == REDIS_REPLY_STRING && v->type == REDIS_REPLY_STRING)
			sfmt_result_field(r, k->str, k->len, v->str, v->len);
	}
}
