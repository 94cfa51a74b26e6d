/*
 * tpbench.h: what tpbench's parts share: the options, the figures of a run,
 * and the two modes (load and idle).
 */
#ifndef TPBENCH_H
#define TPBENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tpbench-hist.h"
#include "tpbench-sock.h"

struct opts {
	struct sock_target target;
	unsigned conns;            /* -c */
	unsigned window;           /* -w: requests in flight per connection */
	double duration_s;         /* -d (0 = use count) */
	uint64_t count;            /* -n */
	double warmup_s;           /* --warmup: not measured */
	double drain_s;            /* --drain: most time to wait for late answers */
	int connect_timeout_ms;    /* --connect-timeout */
	unsigned idle;             /* --idle N: hold N connections instead */
	bool json;

	/*
	 * Every request is "{\"id\":" ID body: body is the rest of the
	 * object, from the comma after the id to the newline.
	 */
	char *body;
	size_t bodylen;
	char *what;                /* the request, for reports ("echo 64B") */
	bool is_raw;               /* --raw: done at the first non-progress event */
};

struct result {
	uint64_t sent;             /* requests written during the measured time */
	uint64_t ok;               /* pong, ok, done succeeded, ... */
	uint64_t failed;           /* done with another state */
	uint64_t rejected;
	uint64_t errors;           /* error events answering a request */
	uint64_t unmatched;        /* lines with no or an unknown id */
	uint64_t lost;             /* requests in flight on a connection that closed */
	double elapsed_s;          /* the measured time */
	double cpu_user_s;         /* tpbench's own CPU in the measured time */
	double cpu_sys_s;
	struct hist hist;          /* send to completion, ok requests only */
};

/* Runs the load; returns 0, or -1 with *cause set when it could not run. */
int load_run(const struct opts *o, struct result *r, char **cause);

/*
 * Opens o->idle connections, each answering one ping; prints when all are
 * held; waits for stdin to close or SIGINT/SIGTERM. Returns 0 or -1.
 */
int idle_run(const struct opts *o, char **cause);

#endif
