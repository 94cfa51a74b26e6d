/*
 * tpbench: a load generator speaking tpd's protocol (NDJSON over a Unix or
 * TCP stream). It sends one kind of request over -c connections with -w in
 * flight on each, matches answers by id, and reports throughput and the
 * latency from sending a request to its completion (pong, done, ...).
 */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tpbench.h"

#define TPBENCH_MAX_ECHO (64u * 1024 * 1024)

static void
usage(FILE *f)
{
	fprintf(f,
"usage: tpbench (-s PATH | -H HOST:PORT) [-c CONNS] [-w INFLIGHT]\n"
"               [-d SECONDS | -n COUNT] [--warmup SECONDS] [--drain SECONDS]\n"
"               [--pool NAME] [--json] [--connect-timeout MS]\n"
"               (--op ping | --echo BYTES | --sleep MS | --spin MS |\n"
"                --raw JSON | --exec ARGV...)\n"
"       tpbench (-s PATH | -H HOST:PORT) --idle N [--json]\n"
"\n"
"  -s PATH            Unix socket to connect to\n"
"  -H HOST:PORT       TCP address to connect to\n"
"  -c CONNS           connections (default 1)\n"
"  -w INFLIGHT        requests in flight per connection (default 1)\n"
"  -d SECONDS         measure for this long (default 5)\n"
"  -n COUNT           or measure until COUNT requests are done\n"
"  --warmup SECONDS   run this long before measuring (default 0)\n"
"  --drain SECONDS    wait this long at most for late answers (default 10)\n"
"  --op ping          send ping; done at its pong (the default)\n"
"  --echo BYTES       submit echo tasks with a string value of BYTES bytes\n"
"  --sleep MS         submit sleep tasks\n"
"  --spin MS          submit spin tasks\n"
"  --exec ARGV...     submit exec tasks running ARGV (last: it takes every\n"
"                     argument after it)\n"
"  --raw JSON         send this request object (an id is added); done at\n"
"                     its first answer other than accepted/started/output\n"
"  --pool NAME        submit to this pool\n"
"  --idle N           hold N idle connections until stdin closes or SIGTERM\n"
"  --json             print the figures as one JSON object\n"
"\n"
"Exit status: 0 when the run went to its end (its figures say what was lost,\n"
"rejected or answered with errors), 1 when it could not run, 64 on bad usage.\n");
}

/* Appends s as a JSON string literal to buf (a malloc'd string). */
static void
json_quote(char **buf, const char *s)
{
	size_t len = strlen(*buf), cap = len + strlen(s) * 6 + 3;
	char *p;

	*buf = realloc(*buf, cap);
	if (*buf == NULL) {
		perror("tpbench");
		exit(1);
	}
	p = *buf + len;
	*p++ = '"';
	for (; *s != '\0'; s++) {
		unsigned char ch = (unsigned char)*s;

		if (ch == '"' || ch == '\\') {
			*p++ = '\\';
			*p++ = (char)ch;
		} else if (ch < 0x20)
			p += sprintf(p, "\\u%04x", ch);
		else
			*p++ = (char)ch;
	}
	*p++ = '"';
	*p = '\0';
}

static void
append(char **buf, const char *s)
{
	size_t len = strlen(*buf);

	*buf = realloc(*buf, len + strlen(s) + 1);
	if (*buf == NULL) {
		perror("tpbench");
		exit(1);
	}
	strcpy(*buf + len, s);
}

static int
parse_uint(const char *flag, const char *s, uint64_t max, uint64_t *out)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (*s == '\0' || *s == '-' || *end != '\0' || errno != 0 || v > max) {
		fprintf(stderr, "tpbench: %s wants an integer from 0 to %" PRIu64
		    ", not '%s'\n", flag, max, s);
		exit(64);
	}
	*out = v;
	return 0;
}

static double
parse_seconds(const char *flag, const char *s)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (*s == '\0' || *end != '\0' || errno != 0 || v < 0 || v > 86400) {
		fprintf(stderr, "tpbench: %s wants seconds (0 to 86400), not '%s'\n",
		    flag, s);
		exit(64);
	}
	return v;
}

/*
 * Builds the request body (everything after the id) from the chosen kind.
 * task is the task object's text, or NULL for a bare op or a raw request.
 */
static void
build_body(struct opts *o, const char *op, const char *task, const char *pool,
    const char *raw)
{
	char *b = strdup("");

	if (raw != NULL) {
		const char *rest = raw;

		while (*rest == ' ' || *rest == '\t')
			rest++;
		if (*rest != '{' || strchr(raw, '\n') != NULL) {
			fprintf(stderr, "tpbench: --raw wants one JSON object on "
			    "one line, not '%s'\n", raw);
			exit(64);
		}
		rest++;
		while (*rest == ' ' || *rest == '\t')
			rest++;
		if (*rest != '}')
			append(&b, ",");
		append(&b, rest);
	} else {
		append(&b, ",\"op\":");
		json_quote(&b, op);
		if (pool != NULL) {
			append(&b, ",\"pool\":");
			json_quote(&b, pool);
		}
		if (task != NULL) {
			append(&b, ",\"task\":");
			append(&b, task);
		}
		append(&b, "}");
	}
	append(&b, "\n");
	o->body = b;
	o->bodylen = strlen(b);
}

static void
report_text(const struct opts *o, const struct result *r)
{
	printf("target %s  conns %u  in flight %u  request %s\n",
	    o->target.name, o->conns, o->window, o->what);
	printf("measured %.3f s  ok %" PRIu64 "  failed %" PRIu64 "  rejected %"
	    PRIu64 "  errors %" PRIu64 "  unmatched %" PRIu64 "  lost %" PRIu64
	    "\n", r->elapsed_s, r->ok, r->failed, r->rejected, r->errors,
	    r->unmatched, r->lost);
	printf("throughput %.1f req/s  (tpbench CPU: user %.2f s, sys %.2f s)\n",
	    r->elapsed_s > 0 ? (double)r->ok / r->elapsed_s : 0.0,
	    r->cpu_user_s, r->cpu_sys_s);
	printf("latency us  p50 %.1f  p90 %.1f  p99 %.1f  p99.9 %.1f  max %.1f\n",
	    hist_quantile(&r->hist, 0.5) / 1e3, hist_quantile(&r->hist, 0.9) / 1e3,
	    hist_quantile(&r->hist, 0.99) / 1e3,
	    hist_quantile(&r->hist, 0.999) / 1e3, r->hist.max / 1e3);
}

static void
report_json(const struct opts *o, const struct result *r)
{
	char *what = strdup("");
	char *target = strdup("");

	json_quote(&what, o->what);
	json_quote(&target, o->target.name);
	printf("{\"target\":%s,\"conns\":%u,\"window\":%u,\"request\":%s,"
	    "\"elapsed_s\":%.6f,\"sent\":%" PRIu64 ",\"ok\":%" PRIu64
	    ",\"failed\":%" PRIu64 ",\"rejected\":%" PRIu64 ",\"errors\":%" PRIu64
	    ",\"unmatched\":%" PRIu64 ",\"lost\":%" PRIu64 ",\"rate\":%.3f,"
	    "\"cpu_user_s\":%.3f,\"cpu_sys_s\":%.3f,"
	    "\"latency_us\":{\"min\":%.3f,\"p50\":%.3f,\"p90\":%.3f,\"p99\":%.3f,"
	    "\"p99.9\":%.3f,\"max\":%.3f}}\n",
	    target, o->conns, o->window, what, r->elapsed_s, r->sent, r->ok,
	    r->failed, r->rejected, r->errors, r->unmatched, r->lost,
	    r->elapsed_s > 0 ? (double)r->ok / r->elapsed_s : 0.0,
	    r->cpu_user_s, r->cpu_sys_s, r->hist.min / 1e3,
	    hist_quantile(&r->hist, 0.5) / 1e3,
	    hist_quantile(&r->hist, 0.9) / 1e3,
	    hist_quantile(&r->hist, 0.99) / 1e3,
	    hist_quantile(&r->hist, 0.999) / 1e3, r->hist.max / 1e3);
	free(what);
	free(target);
}

enum {
	OPT_OP = 256, OPT_ECHO, OPT_SLEEP, OPT_SPIN, OPT_RAW, OPT_POOL,
	OPT_WARMUP, OPT_DRAIN, OPT_IDLE, OPT_JSON, OPT_CONNECT_TIMEOUT, OPT_HELP
};

static const struct option longopts[] = {
	{ "op", required_argument, NULL, OPT_OP },
	{ "echo", required_argument, NULL, OPT_ECHO },
	{ "sleep", required_argument, NULL, OPT_SLEEP },
	{ "spin", required_argument, NULL, OPT_SPIN },
	{ "raw", required_argument, NULL, OPT_RAW },
	{ "pool", required_argument, NULL, OPT_POOL },
	{ "warmup", required_argument, NULL, OPT_WARMUP },
	{ "drain", required_argument, NULL, OPT_DRAIN },
	{ "idle", required_argument, NULL, OPT_IDLE },
	{ "json", no_argument, NULL, OPT_JSON },
	{ "connect-timeout", required_argument, NULL, OPT_CONNECT_TIMEOUT },
	{ "help", no_argument, NULL, OPT_HELP },
	{ NULL, 0, NULL, 0 }
};

int
main(int argc, char **argv)
{
	struct opts o;
	struct result *r;
	const char *sock = NULL, *hostport = NULL, *pool = NULL, *raw = NULL;
	char *task = NULL, *cause = NULL, what[128];
	char **exec_argv = NULL;
	uint64_t v;
	int ch, i, kinds = 0;

	memset(&o, 0, sizeof o);
	o.conns = 1;
	o.window = 1;
	o.duration_s = 5;
	o.drain_s = 10;
	o.connect_timeout_ms = 0;
	snprintf(what, sizeof what, "ping");

	/* --exec takes every argument after it */
	for (i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--exec") == 0) {
			exec_argv = argv + i + 1;
			argc = i;
			argv[i] = NULL;
			break;
		}
	}

	while ((ch = getopt_long(argc, argv, "s:H:c:w:d:n:h", longopts, NULL)) != -1) {
		switch (ch) {
		case 's':
			sock = optarg;
			break;
		case 'H':
			hostport = optarg;
			break;
		case 'c':
			parse_uint("-c", optarg, 1000000, &v);
			o.conns = (unsigned)v;
			break;
		case 'w':
			parse_uint("-w", optarg, 1000000, &v);
			o.window = (unsigned)v;
			break;
		case 'd':
			o.duration_s = parse_seconds("-d", optarg);
			break;
		case 'n':
			parse_uint("-n", optarg, UINT64_MAX / 2, &o.count);
			o.duration_s = 0;
			break;
		case OPT_OP:
			if (strcmp(optarg, "ping") != 0) {
				fprintf(stderr, "tpbench: --op knows only ping "
				    "(use --raw for other requests), not '%s'\n", optarg);
				return 64;
			}
			kinds++;
			break;
		case OPT_ECHO: {
			parse_uint("--echo", optarg, TPBENCH_MAX_ECHO, &v);
			task = malloc(v + 40);
			if (task == NULL) {
				perror("tpbench");
				return 1;
			}
			strcpy(task, "{\"kind\":\"echo\",\"value\":\"");
			memset(task + strlen(task), 'x', v);
			strcpy(task + strlen("{\"kind\":\"echo\",\"value\":\"") + v,
			    "\"}");
			snprintf(what, sizeof what, "echo %" PRIu64 "B", v);
			kinds++;
			break;
		}
		case OPT_SLEEP:
		case OPT_SPIN:
			parse_uint(ch == OPT_SLEEP ? "--sleep" : "--spin", optarg,
			    86400000, &v);
			if (asprintf(&task, "{\"kind\":\"%s\",\"ms\":%" PRIu64 "}",
			    ch == OPT_SLEEP ? "sleep" : "spin", v) == -1)
				return 1;
			snprintf(what, sizeof what, "%s %" PRIu64 "ms",
			    ch == OPT_SLEEP ? "sleep" : "spin", v);
			kinds++;
			break;
		case OPT_RAW:
			raw = optarg;
			snprintf(what, sizeof what, "raw %.100s", optarg);
			o.is_raw = true;
			kinds++;
			break;
		case OPT_POOL:
			pool = optarg;
			break;
		case OPT_WARMUP:
			o.warmup_s = parse_seconds("--warmup", optarg);
			break;
		case OPT_DRAIN:
			o.drain_s = parse_seconds("--drain", optarg);
			break;
		case OPT_IDLE:
			parse_uint("--idle", optarg, 1000000, &v);
			o.idle = (unsigned)v;
			break;
		case OPT_JSON:
			o.json = true;
			break;
		case OPT_CONNECT_TIMEOUT:
			parse_uint("--connect-timeout", optarg, 3600000, &v);
			o.connect_timeout_ms = (int)v;
			break;
		case 'h':
		case OPT_HELP:
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 64;
		}
	}
	if (optind != argc) {
		fprintf(stderr, "tpbench: unexpected argument '%s'\n", argv[optind]);
		return 64;
	}
	if (exec_argv != NULL) {
		if (exec_argv[0] == NULL) {
			fprintf(stderr, "tpbench: --exec wants a program and its arguments\n");
			return 64;
		}
		task = strdup("{\"kind\":\"exec\",\"argv\":[");
		for (i = 0; exec_argv[i] != NULL; i++) {
			if (i > 0)
				append(&task, ",");
			json_quote(&task, exec_argv[i]);
		}
		append(&task, "]}");
		snprintf(what, sizeof what, "exec %.100s", exec_argv[0]);
		kinds++;
	}
	if (kinds > 1) {
		fprintf(stderr, "tpbench: choose one of --op, --echo, --sleep, "
		    "--spin, --raw, --exec\n");
		return 64;
	}
	if ((sock == NULL) == (hostport == NULL)) {
		fprintf(stderr, "tpbench: give one target: -s PATH or -H HOST:PORT\n");
		return 64;
	}
	if (o.conns == 0 || o.window == 0) {
		fprintf(stderr, "tpbench: -c and -w must be at least 1\n");
		return 64;
	}
	if (o.duration_s == 0 && o.count == 0) {
		fprintf(stderr, "tpbench: -d must be above 0 or -n at least 1\n");
		return 64;
	}
	if ((sock != NULL ? sock_target_unix(&o.target, sock, &cause) :
	    sock_target_tcp(&o.target, hostport, &cause)) == -1) {
		fprintf(stderr, "tpbench: %s\n", cause);
		return 64;
	}
	o.what = what;
	if (o.idle > 0) {
		int rc = idle_run(&o, &cause) == -1 ? 1 : 0;

		if (rc != 0)
			fprintf(stderr, "tpbench: %s\n", cause ? cause : "failed");
		free(cause);
		free(task);
		return rc;
	}
	build_body(&o, task != NULL ? "submit" : "ping", task, pool, raw);

	r = malloc(sizeof *r);
	if (r == NULL || load_run(&o, r, &cause) == -1) {
		fprintf(stderr, "tpbench: %s\n", cause ? cause : "out of memory");
		free(cause);
		free(r);
		free(task);
		free(o.body);
		return 1;
	}
	if (o.json)
		report_json(&o, r);
	else
		report_text(&o, r);
	free(r);
	free(task);
	free(o.body);
	return 0;
}
