/*
 * conf-test: conf_load reads every key into struct conf as documented, keeps
 * what the file leaves alone, and collects every error with its line. The
 * table of broken files, run through `tpd -n`, is tests/test_conf.py.
 */
#include "config.h"

#include <ftw.h>
#include <getopt.h>
#include <grp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <unistd.h>

#include "check.h"
#include "conf/conf.h"

static char dir[] = "/tmp/conf-test.XXXXXX";


/* Writes text to a new file in the test directory; returns its path. */
static char *
write_file(const char *name, const char *text)
{
	char *path;
	FILE *f;

	if (asprintf(&path, "%s/%s", dir, name) == -1)
		abort();
	if ((f = fopen(path, "w")) == NULL || fputs(text, f) == EOF || fclose(f) != 0) {
		perror(path);
		exit(1);
	}
	return path;
}

static const char *
env_get(const struct conf *c, const char *name)
{
	size_t n = strlen(name);

	for (size_t i = 0; i < c->nexec_env; i++)
		if (strncmp(c->exec_env[i], name, n) == 0 && c->exec_env[i][n] == '=')
			return c->exec_env[i] + n + 1;
	return NULL;
}

static void
test_every_key(void)
{
	struct group *gr = getgrgid(getgid());
	char *text, *path, *errors;
	struct conf c;
	struct conf_pool *p;

	EXPECT(gr != NULL);
	if (gr == NULL)
		return;
	/* the config file itself serves as a readable token file */
	if (asprintf(&text,
	    "\xEF\xBB\xBF# a full configuration\n"
	    "[daemon]\n"
	    "socket = %s/tpd.sock\n"
	    "  socket_mode = 0600   # indented, with a comment\n"
	    "socket_group = %s\n"
	    "listen = 127.0.0.1:0 [::1]:7420\n"
	    "listen = localhost:7421 ; semicolon comment\n"
	    "max_connections = 10\n"
	    "max_request_bytes = 64k\n"
	    "max_output_buffer = 1M\n"
	    "output_stall_timeout = 90s\n"
	    "result_ttl = 5min\n"
	    "result_retain = 7\n"
	    "result_retain_bytes = 3M\n"
	    "max_subscriptions = 9\n"
	    "shutdown_timeout = 30s\n"
	    "log_level = debug\n"
	    "admin_group = %s\n"
	    "token_file = %s/full.conf\n"
	    "admin_token_file = %s/full.conf\n"
	    "\n"
	    "[exec]\n"
	    "output_limit = 2M\n"
	    "output_limit_max = 4M\n"
	    "kill_grace = 250ms\n"
	    "env = LANG=C\n"
	    "env = FOO=bar=baz\n"
	    "stream_budget = 8k\n"
	    "[pool default]\n"
	    "size = 2\n"
	    "limit = 8\n"
	    "capacity = 16\n"
	    "[pool io]\n"
	    "size = 16\n"
	    "limit = 32\n"
	    "[pool empty.one]\n",
	    dir, gr->gr_name, gr->gr_name, dir, dir) == -1)
		abort();
	path = write_file("full.conf", text);
	conf_init(&c);
	EXPECT(conf_load(&c, path, &errors) == 0);
	if (errors != NULL)
		fprintf(stderr, "unexpected errors:\n%s\n", errors);
	EXPECT(errors == NULL);
	EXPECT(strcmp(c.path, path) == 0);
	EXPECT(c.socket != NULL && strstr(c.socket, "/tpd.sock") != NULL);
	EXPECT(c.socket_mode == 0600);
	EXPECT(c.socket_group != NULL && strcmp(c.socket_group, gr->gr_name) == 0);
	EXPECT(c.nlisten == 3);
	EXPECT(c.nlisten == 3 && strcmp(c.listen[0], "127.0.0.1:0") == 0 &&
	    strcmp(c.listen[1], "[::1]:7420") == 0 &&
	    strcmp(c.listen[2], "localhost:7421") == 0);
	EXPECT(c.max_connections == 10);
	EXPECT(c.max_request_bytes == 65536);
	EXPECT(c.max_output_buffer == 1024 * 1024);
	EXPECT(c.output_stall_timeout_ms == 90000);
	EXPECT(c.result_ttl_ms == 5 * 60 * 1000);
	EXPECT(c.result_retain == 7);
	EXPECT(c.result_retain_bytes == 3 * 1024 * 1024);
	EXPECT(c.max_subscriptions == 9);
	EXPECT(c.shutdown_timeout_ms == 30000);
	EXPECT(c.log_level == LOG_DEBUG);
	EXPECT(c.admin_group != NULL && strcmp(c.admin_group, gr->gr_name) == 0);
	EXPECT(c.token_file != NULL && strcmp(c.token_file, path) == 0);
	EXPECT(c.admin_token_file != NULL && strcmp(c.admin_token_file, path) == 0);
	EXPECT(c.exec_output_limit == 2 * 1024 * 1024);
	EXPECT(c.exec_output_limit_max == 4 * 1024 * 1024);
	EXPECT(c.exec_kill_grace_ms == 250);
	EXPECT(env_get(&c, "LANG") != NULL && strcmp(env_get(&c, "LANG"), "C") == 0);
	EXPECT(env_get(&c, "FOO") != NULL && strcmp(env_get(&c, "FOO"), "bar=baz") == 0);
	EXPECT(env_get(&c, "PATH") != NULL);        /* the base stays */
	EXPECT(c.stream_budget == 8192);
	EXPECT(c.npools == 3);
	EXPECT(strcmp(c.pools[0].name, "default") == 0);
	EXPECT(c.pools[0].size == 2 && c.pools[0].limit == 8 && c.pools[0].capacity == 16);
	p = conf_pool_find(&c, "io");
	EXPECT(p != NULL && p->size == 16 && p->limit == 32 && p->capacity == 1024);
	p = conf_pool_find(&c, "empty.one");
	EXPECT(p != NULL && p->size == 4 && p->limit == 64 && p->capacity == 1024);
	conf_free(&c);
	free(path);
	free(text);
	printf("ok: every key is read into struct conf\n");
}

/* [source NAME]: every key read, and what a section leaves out filled in. */
static void
test_sources(void)
{
	char *path, *errors, host[256];
	struct conf c;
	struct conf_source *s;

	path = write_file("sources.conf",
	    "[pool io]\n"
	    "[source jobs]\n"
	    "type = redis-stream\n"
	    "redis = unix:/run/redis/redis.sock\n"
	    "stream = tasks\n"
	    "group = tpd\n"
	    "consumer = host-a\n"
	    "pool = io\n"
	    "results = done\n"
	    "dead_letter = dead\n"
	    "claim_idle = 2s\n"
	    "max_deliveries = 5\n"
	    "results_maxlen = 0\n"
	    "timeout = 250ms\n"
	    "backoff_max = 1min\n"
	    "[source plain]\n"
	    "type = redis-stream\n"
	    "redis = [::1]:6379\n"
	    "stream = t2\n"
	    "group = g\n");
	conf_init(&c);
	EXPECT(conf_load(&c, path, &errors) == 0);
	if (errors != NULL)
		fprintf(stderr, "unexpected errors:\n%s\n", errors);
	free(errors);
	EXPECT(c.nsources == 2);
	s = conf_source_find(&c, "jobs");
	EXPECT(s != NULL);
	if (s != NULL) {
		EXPECT(strcmp(s->type, "redis-stream") == 0);
		EXPECT(strcmp(s->redis, "unix:/run/redis/redis.sock") == 0);
		EXPECT(strcmp(s->stream, "tasks") == 0 && strcmp(s->group, "tpd") == 0);
		EXPECT(strcmp(s->consumer, "host-a") == 0 && strcmp(s->pool, "io") == 0);
		EXPECT(strcmp(s->results, "done") == 0 && strcmp(s->dead_letter, "dead") == 0);
		EXPECT(s->claim_idle_ms == 2000 && s->max_deliveries == 5);
		EXPECT(s->results_maxlen == 0 && s->timeout_ms == 250);
		EXPECT(s->backoff_max_ms == 60000);
	}
	s = conf_source_find(&c, "plain");
	EXPECT(s != NULL);
	if (s != NULL) {
		EXPECT(gethostname(host, sizeof host) == 0 && strcmp(s->consumer, host) == 0);
		EXPECT(strcmp(s->pool, "default") == 0);
		EXPECT(strcmp(s->results, "t2:results") == 0);
		EXPECT(strcmp(s->dead_letter, "t2:dead") == 0);
		EXPECT(s->claim_idle_ms == 60000 && s->max_deliveries == 3);
		EXPECT(s->results_maxlen == 100000 && s->timeout_ms == 5000);
		EXPECT(s->backoff_max_ms == 5000);
		EXPECT(conf_source_equal(s, s));
		EXPECT(!conf_source_equal(s, conf_source_find(&c, "jobs")));
	}
	EXPECT(conf_source_find(&c, "nope") == NULL);
	conf_free(&c);
	free(path);
	printf("ok: [source NAME] keys and defaults\n");
}

static void
test_defaults_kept(void)
{
	char *path = write_file("small.conf", "[pool default]\nlimit = 1\n"), *errors;
	struct conf c, d;

	conf_init(&c);
	conf_init(&d);
	EXPECT(conf_load(&c, path, &errors) == 0);
	free(errors);
	/* size was not given: it follows the smaller limit instead of failing */
	EXPECT(c.pools[0].size == 1 && c.pools[0].limit == 1);
	EXPECT(c.max_connections == d.max_connections);
	EXPECT(c.max_request_bytes == d.max_request_bytes);
	EXPECT(c.result_retain_bytes == 256 * 1024 * 1024 && c.max_subscriptions == 10000);
	EXPECT(c.socket_mode == 0660 && c.socket == NULL && c.nlisten == 0);
	EXPECT(c.nexec_env == d.nexec_env);
	conf_free(&c);
	conf_free(&d);
	free(path);
	printf("ok: keys the file leaves alone keep their defaults\n");
}

/* Every error of one file, each with its line, in line order. */
static void
test_errors_collected(void)
{
	char *path = write_file("bad.conf",
	    "size = 3\n"                                /* 1 */
	    "[daemon]\n"                                /* 2 */
	    "sockt = /x\n"                              /* 3 */
	    "max_connections = many\n"                  /* 4 */
	    "max_connections = 5\n"                     /* 5: given twice, even if 4 was bad */
	    "socket_mode = 0999\n"                      /* 6 */
	    "listen = 127.0.0.1\n"                      /* 7 */
	    "just words\n"                              /* 8 */
	    "[pool io]\n"                               /* 9 */
	    "size = 80\n"                               /* 10 */
	    "capacity = 0\n"                            /* 11 */
	    "[nope]\n"                                  /* 12 */
	    "whatever = 1\n"                            /* 13: in a bad section: silent */
	    "[exec]\n"                                  /* 14 */
	    "kill_grace = soon\n");                     /* 15 */
	char *errors = NULL;
	struct conf c;
	static const char *const want[] = {
		":1: size: key outside any section",
		":3: [daemon] sockt: unknown key (did you mean socket?)",
		":4: [daemon] max_connections: \"many\" is not a whole number",
		":5: [daemon] max_connections: already set at line 4",
		":6: [daemon] socket_mode: \"0999\" is not an octal mode like 0660",
		":7: [daemon] listen: \"127.0.0.1\" is not HOST:PORT",
		":8: expected \"key = value\"",
		":10: [pool io] size: 80 is above limit 64",
		":11: [pool io] capacity: 0 is out of range (1 to 1000000)",
		":12: [nope]: unknown section",
		":15: [exec] kill_grace: \"soon\" is not a duration",
	};
	const char *at;
	size_t lines = 1;

	conf_init(&c);
	EXPECT(conf_load(&c, path, &errors) == -1);
	EXPECT(errors != NULL);
	if (errors == NULL)
		return;
	at = errors;
	for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
		const char *hit = strstr(at, want[i]);
		if (hit == NULL)
			fprintf(stderr, "missing or out of order: %s\n", want[i]);
		EXPECT(hit != NULL);
		if (hit != NULL)
			at = hit;
	}
	for (const char *s = errors; *s != '\0'; s++)
		lines += *s == '\n';
	EXPECT(lines == sizeof want / sizeof want[0]);
	EXPECT(strncmp(errors, path, strlen(path)) == 0);
	if (test_failures)
		fprintf(stderr, "errors were:\n%s\n", errors);
	free(errors);
	conf_free(&c);
	free(path);
	printf("ok: every error is reported with its line, in order\n");
}

static void
test_missing_file(void)
{
	char *errors;
	struct conf c;

	conf_init(&c);
	EXPECT(conf_load(&c, "/nonexistent/tpd.conf", &errors) == -1);
	EXPECT(errors != NULL && strcmp(errors,
	    "/nonexistent/tpd.conf: cannot open: No such file or directory") == 0);
	free(errors);
	conf_free(&c);
	printf("ok: a missing file is one clear error\n");
}

static void
test_validate(void)
{
	char *errors;
	struct conf c;

	conf_init(&c);
	EXPECT(conf_validate(&c, &errors) == 0 && errors == NULL);
	c.pools[0].size = 100;          /* as -w 100 would */
	EXPECT(conf_validate(&c, &errors) == -1);
	EXPECT(errors != NULL && strcmp(errors,
	    "[pool default] size: 100 is above limit 64") == 0);
	free(errors);
	conf_free(&c);
	printf("ok: conf_validate checks flags applied after the file\n");
}

static void
test_hostport(void)
{
	static const struct {
		const char *in, *host, *port;
	} good[] = {
		{ "127.0.0.1:7420", "127.0.0.1", "7420" },
		{ "[::1]:0", "::1", "0" },
		{ "localhost:65535", "localhost", "65535" },
		{ "*:7420", "*", "7420" },
	};
	static const char *const bad[] = {
		"127.0.0.1", ":7420", "::1:7420", "[::1]7420", "[zz]:1", "host:65536",
		"host:-1", "host:", "a b:1",
	};
	char host[64], port[8], *cause;

	for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
		EXPECT(conf_split_hostport(good[i].in, host, sizeof host, port, sizeof port,
		    &cause) == 0);
		EXPECT(strcmp(host, good[i].host) == 0 && strcmp(port, good[i].port) == 0);
	}
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		cause = NULL;
		EXPECT(conf_split_hostport(bad[i], host, sizeof host, port, sizeof port,
		    &cause) == -1);
		EXPECT(cause != NULL && strstr(cause, bad[i]) != NULL);
		free(cause);
	}
	printf("ok: HOST:PORT and [IPV6]:PORT are split, the rest refused\n");
}

static void
test_check_file(void)
{
	char *good = write_file("good.conf", "[pool default]\nsize = 1\n");

	EXPECT(conf_check_file(good) == 0);
	EXPECT(conf_check_file("/nonexistent/tpd.conf") == 1);
	free(good);
	printf("ok: conf_check_file returns main's exit status\n");
}

/* What getopt_long would give back for name ("--workers" or "-w") with arg. */
static int
add_flag(struct conf_flags *f, const char *name, const char *arg)
{
	const struct option *o = conf_flags_longopts(f);
	char *cause = NULL;
	int r;

	if (name[1] != '-')
		r = conf_flags_add(f, name[1], -1, arg, &cause);
	else {
		int i;
		for (i = 0; o[i].name != NULL && strcmp(o[i].name, name + 2) != 0; i++)
			;
		CHECK(o[i].name != NULL, "no flag %s", name);
		r = conf_flags_add(f, o[i].val, i, arg, &cause);
	}
	free(cause);
	return r;
}

/* Flags over a file: each replaces the file's value, the last of a flag wins, -l and --env add up. */
static void
test_flags_over_the_file(void)
{
	static const struct option own[] = {
		{ "config", required_argument, NULL, 'c' },
		{ NULL, 0, NULL, 0 },
	};
	char *path = write_file("flags.conf",
	    "[daemon]\n"
	    "listen = 127.0.0.1:1 127.0.0.1:2\n"
	    "tcp_auth = none\n"
	    "shutdown_timeout = 1.5s\n"
	    "max_connections = 7\n"
	    "[exec]\n"
	    "env = FOO=file\n"
	    "env = KEPT=yes\n"
	    "[pool default]\n"
	    "size = 2\n"
	    "limit = 4\n");
	struct conf_flags *f = conf_flags_new(own, "c:");
	struct conf c;
	struct conf_pool *p;
	char *errors = NULL, *cause = NULL;

	CHECK(f != NULL, "conf_flags_new");
	EXPECT(strncmp(conf_flags_shortopts(f), ":c:", 3) == 0);
	EXPECT(strchr(conf_flags_shortopts(f), 'w') != NULL);
	EXPECT(conf_flags_add(f, 'c', 0, "x", &cause) == 1);     /* the program's own */
	EXPECT(add_flag(f, "--pool", "io") == -1);
	EXPECT(add_flag(f, "-l", "127.0.0.1:3") == 0);
	EXPECT(add_flag(f, "--listen", "127.0.0.1:4") == 0);
	EXPECT(add_flag(f, "--tcp-auth", "none") == 0);      /* a TCP listener needs a token else */
	EXPECT(add_flag(f, "--env", "FOO=flag") == 0);
	EXPECT(add_flag(f, "--env", "BAR=x") == 0);
	EXPECT(add_flag(f, "-w", "3") == 0);
	EXPECT(add_flag(f, "--workers", "8") == 0);
	EXPECT(add_flag(f, "--limit", "8") == 0);
	EXPECT(add_flag(f, "--pool", "io:2:8:4") == 0);
	EXPECT(add_flag(f, "--max-request-bytes", "1.5M") == 0);
	EXPECT(add_flag(f, "--kill-grace", "0.25s") == 0);
	conf_init(&c);
	EXPECT(conf_read(&c, path, f, &errors) == 0);
	if (errors != NULL)
		fprintf(stderr, "unexpected errors:\n%s\n", errors);
	free(errors);
	EXPECT(c.nlisten == 2 && strcmp(c.listen[0], "127.0.0.1:3") == 0 &&
	    strcmp(c.listen[1], "127.0.0.1:4") == 0);
	EXPECT(c.shutdown_timeout_ms == 1500);
	EXPECT(c.max_connections == 7);
	EXPECT(c.max_request_bytes == 1572864);
	EXPECT(c.exec_kill_grace_ms == 250);
	EXPECT(env_get(&c, "FOO") != NULL && strcmp(env_get(&c, "FOO"), "flag") == 0);
	EXPECT(env_get(&c, "BAR") != NULL && strcmp(env_get(&c, "BAR"), "x") == 0);
	EXPECT(env_get(&c, "KEPT") != NULL && strcmp(env_get(&c, "KEPT"), "yes") == 0);
	EXPECT(c.pools[0].size == 8 && c.pools[0].limit == 8);
	p = conf_pool_find(&c, "io");
	EXPECT(p != NULL && p->size == 2 && p->capacity == 8 && p->limit == 4);
	conf_free(&c);

	/* the same flags without a file: the built-in defaults under them */
	conf_init(&c);
	EXPECT(conf_read(&c, NULL, f, &errors) == 0 && errors == NULL);
	EXPECT(c.path == NULL && c.nlisten == 2 && c.shutdown_timeout_ms == 0);
	conf_free(&c);
	conf_flags_free(f);

	/* errors: the file's by line, then the flags' in their order, each named its way */
	f = conf_flags_new(own, "c:");
	CHECK(f != NULL, "conf_flags_new");
	EXPECT(add_flag(f, "--result-ttl", "5") == 0);
	EXPECT(add_flag(f, "-w", "9") == 0);
	EXPECT(add_flag(f, "--pool", "a/b:1:2") == 0);
	conf_init(&c);
	EXPECT(conf_read(&c, path, f, &errors) == -1);
	if (asprintf(&cause,
	    "tpd: --result-ttl 5: 5: add a unit, as 5s or 5ms\n"
	    "tpd: --pool a/b:1:2: a pool name is 1 to 32 letters, digits, '_', '.' or '-'\n"
	    "tpd: -w 9: 9 is above limit 4") == -1)
		abort();
	if (errors == NULL || strcmp(errors, cause) != 0)
		fprintf(stderr, "errors were:\n%s\nexpected:\n%s\n", errors ? errors : "", cause);
	EXPECT(errors != NULL && strcmp(errors, cause) == 0);
	free(cause);
	free(errors);
	conf_free(&c);
	conf_flags_free(f);
	free(path);
	printf("ok: flags apply over the file, checked as its keys are\n");
}

/* The grammar of common/units.h in the file: fractions, and a unit that must be there. */
static void
test_file_units(void)
{
	char *path = write_file("units.conf",
	    "[daemon]\n"
	    "shutdown_timeout = 1.5s\n"
	    "result_ttl = 0.5h\n"
	    "max_request_bytes = 1.5M\n"
	    "max_output_buffer = 64KiB\n"), *errors;
	struct conf c;

	conf_init(&c);
	EXPECT(conf_load(&c, path, &errors) == 0 && errors == NULL);
	EXPECT(c.shutdown_timeout_ms == 1500 && c.result_ttl_ms == 1800000);
	EXPECT(c.max_request_bytes == 1572864 && c.max_output_buffer == 65536);
	conf_free(&c);
	free(path);
	path = write_file("bare.conf", "[daemon]\nshutdown_timeout = 5\n[exec]\nkill_grace = 0\n");
	conf_init(&c);
	EXPECT(conf_load(&c, path, &errors) == -1);
	EXPECT(errors != NULL && strstr(errors, ":2: [daemon] shutdown_timeout: 5: add a unit, "
	    "as 5s or 5ms") != NULL && strchr(errors, '\n') == NULL);
	free(errors);
	conf_free(&c);
	free(path);
	printf("ok: durations and sizes read as tpctl reads them\n");
}

static int
remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	return remove(path);
}

int
main(void)
{
	if (mkdtemp(dir) == NULL) {
		perror("mkdtemp");
		return 1;
	}
	test_every_key();
	test_sources();
	test_defaults_kept();
	test_errors_collected();
	test_missing_file();
	test_validate();
	test_hostport();
	test_check_file();
	test_flags_over_the_file();
	test_file_units();
	if (nftw(dir, remove_entry, 8, FTW_DEPTH | FTW_PHYS) == -1)
		perror(dir);
	if (test_failures) {
		fprintf(stderr, "%d checks failed\n", test_failures);
		return 1;
	}
	return 0;
}
