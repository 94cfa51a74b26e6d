/*
 * redis-link.c: a source's two hiredis connections, their deadlines and
 * the reconnect with backoff (redis-link.h has the contract).
 */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/adapters/libevent.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/utf8.h"
#include "redis-addr.h"
#include "redis-link.h"
#include "units.h"

#define RLINK_BACKOFF_MIN_MS 100

struct rlink;

/* One of the two connections. */
struct rlink_conn {
	struct rlink *l;
	const char *role;               /* "reader" or "writer", for messages */
	redisAsyncContext *ac;          /* NULL when not connected */
	unsigned owed;                  /* replies not yet in */
	uint64_t progress_us;           /* when the last reply came, or the first was owed */
	uint64_t slack_ms;              /* beyond timeout: the reader's BLOCK */
	struct event *deadline;
};

struct rlink {
	struct rlink_settings set;      /* copies, owned: name, and addr written in full */
	struct event_base *base;
	struct redis_addr addr;         /* set.addr, read */

	enum rlink_state state;
	bool closed;
	struct rlink_conn c[2];         /* by enum rlink_role */
	struct event *retry_ev;
	unsigned backoff_ms;
	uint64_t outage_since_us;       /* 0: no outage */
	uint64_t reconnects;
	char last_error[256];
	bool have_error;
};

/* ---------------------------------------------------------------- commands */

void
rlink_cmd_init(struct rlink_cmd *cmd)
{
	memset(cmd, 0, sizeof *cmd);
}

void
rlink_cmd_free(struct rlink_cmd *cmd)
{
	free(cmd->argv);
	free(cmd->len);
}

void
rlink_cmd_reset(struct rlink_cmd *cmd)
{
	cmd->n = 0;
	cmd->nnums = 0;
}

void
rlink_cmd_truncate(struct rlink_cmd *cmd, int n)
{
	if (n < cmd->n)
		cmd->n = n;
}

void
rlink_cmd_mem(struct rlink_cmd *cmd, const char *p, size_t len)
{
	if (cmd->failed)
		return;
	if (cmd->n == cmd->cap) {
		int cap = cmd->cap ? cmd->cap * 2 : 16;
		const char **argv;
		size_t *lens;

		if ((argv = reallocarray(cmd->argv, (size_t)cap, sizeof *argv)) == NULL) {
			cmd->failed = true;
			return;
		}
		cmd->argv = argv;
		if ((lens = reallocarray(cmd->len, (size_t)cap, sizeof *lens)) == NULL) {
			cmd->failed = true;
			return;
		}
		cmd->len = lens;
		cmd->cap = cap;
	}
	cmd->argv[cmd->n] = p;
	cmd->len[cmd->n] = len;
	cmd->n++;
}

void
rlink_cmd_str(struct rlink_cmd *cmd, const char *s)
{
	rlink_cmd_mem(cmd, s, strlen(s));
}

void
rlink_cmd_u64(struct rlink_cmd *cmd, uint64_t v)
{
	char *num;
	int n;

	if (cmd->nnums == RLINK_CMD_NUMS) {
		cmd->failed = true;
		return;
	}
	num = cmd->nums[cmd->nnums++];
	n = snprintf(num, sizeof cmd->nums[0], "%llu", (unsigned long long)v);
	rlink_cmd_mem(cmd, num, (size_t)n);
}

/* ---------------------------------------------------------------- deadlines */

/*
 * The deadline: armed when a connection starts to owe replies, and left
 * alone as they come (a timer per reply would cost more than the reply);
 * when it fires it looks at the last reply's time and waits on if that
 * was recent.
 */
static void
conn_deadline(struct rlink_conn *c, uint64_t after_ms)
{
	struct timeval tv;

	tv = clock_timeval_ms(after_ms);
	evtimer_add(c->deadline, &tv);
}

static void
deadline_cb(evutil_socket_t fd, short what, void *arg)
{
	struct rlink_conn *c = arg;
	uint64_t limit = c->l->set.timeout_ms + c->slack_ms, quiet;
	char d[32];

	if (c->ac == NULL || c->owed == 0)
		return;
	if ((quiet = (clock_now_us() - c->progress_us) / 1000) < limit) {
		conn_deadline(c, limit - quiet);
		return;
	}
	rlink_fail(c->l, "%s: no answer from Redis within %s", c->role,
	    units_format_duration(limit, d, sizeof d));
}

int
rlink_send(struct rlink *l, enum rlink_role role, redisCallbackFn *fn, void *arg,
    const struct rlink_cmd *cmd)
{
	struct rlink_conn *c = &l->c[role];

	if (cmd->failed || cmd->n == 0) {
		rlink_fail(l, "out of memory building a command");
		return -1;
	}
	if (c->ac == NULL)
		return -1;
	if (redisAsyncCommandArgv(c->ac, fn, arg, cmd->n, cmd->argv, cmd->len) != REDIS_OK) {
		rlink_fail(l, "%s: cannot send a command: %s", c->role,
		    c->ac != NULL && c->ac->errstr != NULL ? c->ac->errstr : "out of memory");
		return -1;
	}
	if (c->owed++ == 0) {
		c->progress_us = clock_now_us();
		if (!evtimer_pending(c->deadline, NULL))
			conn_deadline(c, l->set.timeout_ms + c->slack_ms);
	}
	return 0;
}

bool
rlink_replied(redisAsyncContext *ac, void *reply)
{
	struct rlink_conn *c = ac->data;

	if (reply == NULL || c == NULL || c->ac != ac)
		return false;
	if (c->owed > 0)
		c->owed--;
	c->progress_us = clock_now_us();
	return true;
}

void
rlink_ignore_cb(redisAsyncContext *ac, void *reply, void *arg)
{
	rlink_replied(ac, reply);
}

/* ---------------------------------------------------------------- connections */

/* Drops c's context (its callbacks run with NULL replies, now or once the running one returns). */
static void
conn_drop(struct rlink_conn *c)
{
	redisAsyncContext *ac = c->ac;

	c->ac = NULL;
	c->owed = 0;
	if (c->deadline != NULL)
		evtimer_del(c->deadline);
	if (ac != NULL)
		redisAsyncFree(ac);
}

static void
connect_cb(const redisAsyncContext *ac, int status)
{
	struct rlink_conn *c = ac->data;

	if (status == REDIS_OK || c == NULL || c->ac != ac)
		return;
	c->ac = NULL;           /* hiredis frees it when this returns */
	rlink_fail(c->l, "%s: cannot connect: %s", c->role,
	    ac->errstr != NULL ? ac->errstr : "error");
}

static void
disconnect_cb(const redisAsyncContext *ac, int status)
{
	struct rlink_conn *c = ac->data;

	if (c == NULL || c->ac != ac)
		return;         /* one we dropped */
	c->ac = NULL;           /* being freed */
	c->owed = 0;
	evtimer_del(c->deadline);
	rlink_fail(c->l, "%s: connection lost: %s", c->role,
	    ac->err != 0 && ac->errstr != NULL ? ac->errstr : "closed by the server");
}

/* Opens c; -1 (the link has failed) when it cannot even start. */
static int
conn_open(struct rlink_conn *c)
{
	struct rlink *l = c->l;
	redisAsyncContext *ac;

	ac = l->addr.is_unix ? redisAsyncConnectUnix(l->addr.path) :
	    redisAsyncConnect(l->addr.host, l->addr.port);
	if (ac == NULL) {
		rlink_fail(l, "%s: cannot connect: out of memory", c->role);
		return -1;
	}
	if (ac->err != 0) {
		rlink_fail(l, "%s: cannot connect: %s", c->role, ac->errstr);
		redisAsyncFree(ac);
		return -1;
	}
	if (!l->addr.is_unix)
		redisEnableKeepAlive(&ac->c);   /* a peer that vanished is noticed */
	ac->data = c;
	if (redisLibeventAttach(ac, l->base) != REDIS_OK) {
		redisAsyncFree(ac);
		rlink_fail(l, "%s: cannot attach to the event loop", c->role);
		return -1;
	}
	redisAsyncSetConnectCallback(ac, connect_cb);
	redisAsyncSetDisconnectCallback(ac, disconnect_cb);
	c->ac = ac;
	c->owed = 0;
	return 0;
}

int
rlink_open(struct rlink *l, bool reader)
{
	if (l->closed)
		return -1;
	if (conn_open(&l->c[RLINK_WRITER]) == -1 ||
	    (reader && conn_open(&l->c[RLINK_READER]) == -1))
		return -1;
	return 0;
}

bool
rlink_is_open(const struct rlink *l, enum rlink_role role)
{
	return l->c[role].ac != NULL;
}

void
rlink_drop(struct rlink *l, enum rlink_role role)
{
	conn_drop(&l->c[role]);
}

void
rlink_close(struct rlink *l)
{
	l->closed = true;
	conn_drop(&l->c[RLINK_READER]);
	conn_drop(&l->c[RLINK_WRITER]);
	evtimer_del(l->retry_ev);
}

/* ---------------------------------------------------------------- failure */

static void
retry_cb(evutil_socket_t fd, short what, void *arg)
{
	struct rlink *l = arg;

	l->set.retry(l->set.arg);
}

static void
set_error(struct rlink *l, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0)));

static void
set_error(struct rlink *l, const char *fmt, va_list ap)
{
	utf8_vformat(l->last_error, sizeof l->last_error, fmt, ap);
	l->have_error = true;
}

void
rlink_note_error(struct rlink *l, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	set_error(l, fmt, ap);
	va_end(ap);
}

void
rlink_fail(struct rlink *l, const char *fmt, ...)
{
	struct timeval tv;
	va_list ap;
	char d[32];

	if (l->closed)
		return;         /* stopped for good */
	va_start(ap, fmt);
	set_error(l, fmt, ap);
	va_end(ap);
	if (l->state == RLINK_DOWN && l->c[0].ac == NULL && l->c[1].ac == NULL &&
	    evtimer_pending(l->retry_ev, NULL))
		return;         /* already down and waiting */
	if (l->outage_since_us == 0) {
		l->outage_since_us = clock_now_us();
		log_warnx("source %s: redis %s: %s; retrying with backoff (up to %s), "
		    "local submits go on", l->set.name, l->set.addr, l->last_error,
		    units_format_duration(l->set.backoff_max_ms, d, sizeof d));
	} else
		log_debug("source %s: redis %s: %s", l->set.name, l->set.addr, l->last_error);
	l->state = RLINK_DOWN;
	conn_drop(&l->c[RLINK_READER]);
	conn_drop(&l->c[RLINK_WRITER]);
	l->set.down(l->set.arg);
	if (l->backoff_ms == 0)
		l->backoff_ms = RLINK_BACKOFF_MIN_MS;
	tv = clock_timeval_ms(l->backoff_ms);
	evtimer_add(l->retry_ev, &tv);
	l->backoff_ms = l->backoff_ms * 2 > l->set.backoff_max_ms ?
	    (unsigned)l->set.backoff_max_ms : l->backoff_ms * 2;
}

bool
rlink_up(struct rlink *l)
{
	bool outage = l->outage_since_us != 0;

	if (outage) {
		log_notice("source %s: redis %s reachable again after %.1f s", l->set.name,
		    l->set.addr, (double)(clock_now_us() - l->outage_since_us) / 1e6);
		l->reconnects++;
	}
	l->outage_since_us = 0;
	l->backoff_ms = 0;
	l->state = RLINK_UP;
	return outage;
}

enum rlink_state
rlink_state(const struct rlink *l)
{
	return l->state;
}

const char *
rlink_last_error(const struct rlink *l)
{
	return l->have_error ? l->last_error : NULL;
}

uint64_t
rlink_reconnects(const struct rlink *l)
{
	return l->reconnects;
}

/* ---------------------------------------------------------------- the link */

struct rlink *
rlink_new(struct event_base *base, const struct rlink_settings *s, char **cause)
{
	struct rlink *l;
	char text[REDIS_ADDR_TEXT_MAX];

	if ((l = calloc(1, sizeof *l)) == NULL)
		return cause_set(cause, "out of memory"), NULL;
	l->set = *s;
	l->base = base;
	l->state = RLINK_CONNECTING;
	l->set.name = l->set.addr = NULL;
	if (redis_addr_parse(s->addr, &l->addr, cause) == -1)
		goto fail;
	/* the messages name the port even when the key left it out */
	redis_addr_format(&l->addr, text, sizeof text);
	if ((l->set.name = strdup(s->name)) == NULL || (l->set.addr = strdup(text)) == NULL)
		goto nomem;
	for (int i = 0; i < 2; i++) {
		l->c[i].l = l;
		l->c[i].role = i == RLINK_READER ? "reader" : "writer";
		if ((l->c[i].deadline = evtimer_new(base, deadline_cb, &l->c[i])) == NULL)
			goto nomem;
	}
	l->c[RLINK_READER].slack_ms = s->reader_slack_ms;
	if ((l->retry_ev = evtimer_new(base, retry_cb, l)) == NULL)
		goto nomem;
	return l;
nomem:
	cause_set(cause, "out of memory");
fail:
	rlink_free(l);
	return NULL;
}

void
rlink_free(struct rlink *l)
{
	if (l == NULL)
		return;
	l->closed = true;
	for (int i = 0; i < 2; i++) {
		conn_drop(&l->c[i]);
		if (l->c[i].deadline != NULL)
			event_free(l->c[i].deadline);
	}
	if (l->retry_ev != NULL)
		event_free(l->retry_ev);
	free((char *)l->set.name);
	free((char *)l->set.addr);
	free(l);
}
