/*
 * tpd.c: the daemon's main: flags over the configuration, start-up, the
 * event loop, signals, and the shutdown sequence (SPEC section 4).
 */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>

#include "conf.h"
#include "conn.h"
#include "daemon.h"
#include "exec.h"
#include "health.h"
#include "listen.h"
#include "log.h"
#include "mailbox.h"
#include "pools.h"
#include "sd.h"
#include "tasks.h"
#include "wire.h"

#define EXIT_FLUSH_MS 5000 /* at exit, how long clients get to read their last events */

struct daemon *daemon_state;
static struct daemon the_daemon;
static int saved_argc;       /* the command line, applied again on SIGHUP */
static char **saved_argv;

static void
usage(FILE *f)
{
	fprintf(f,
	    "usage: tpd [-f] [-n] [-c FILE] [-s PATH] [-l HOST:PORT]... [-w N] [-q N]\n"
	    "           [--log-level LEVEL] [--pool NAME:SIZE[:CAPACITY[:LIMIT]]]...\n"
	    "\n"
	    "  -c, --config FILE        read settings from FILE (flags override it)\n"
	    "  -f, --foreground         run in the foreground (the only mode; systemd daemonizes)\n"
	    "  -n, --check              check the configuration and exit\n"
	    "  -s, --socket PATH        Unix socket (default: %s)\n"
	    "  -l, --listen HOST:PORT   TCP listener, repeatable (none by default)\n"
	    "  -w, --workers N          workers of the default pool\n"
	    "  -q, --queue N            queue capacity of the default pool\n"
	    "      --limit N            most workers a resize of the default pool may ask for\n"
	    "      --pool SPEC          another pool, NAME:SIZE[:CAPACITY[:LIMIT]]\n"
	    "      --log-level LEVEL    error, warning, notice, info or debug\n"
	    "      --max-connections N, --max-request-bytes SIZE, --max-output-buffer SIZE,\n"
	    "      --output-stall-timeout DUR, --result-ttl DUR, --result-retain N,\n"
	    "      --shutdown-timeout DUR, --socket-mode MODE, --socket-group GROUP,\n"
	    "      --admin-group GROUP, --token-file FILE, --admin-token-file FILE\n"
	    "                           as the [daemon] keys of tpd.conf(5)\n"
	    "      --version            print the version and exit\n"
	    "  -h, --help               print this help and exit\n",
	    "$RUNTIME_DIRECTORY/tpd.sock, /run/tpd/tpd.sock, $XDG_RUNTIME_DIR/tpd.sock or "
	    "/tmp/tpd-$UID/tpd.sock");
}

enum {
	OPT_LOG_LEVEL = 256, OPT_VERSION, OPT_POOL, OPT_LIMIT, OPT_MAX_CONNECTIONS,
	OPT_MAX_REQUEST, OPT_MAX_OUTPUT, OPT_RESULT_TTL, OPT_RESULT_RETAIN, OPT_SHUTDOWN_TIMEOUT,
	OPT_SOCKET_MODE, OPT_SOCKET_GROUP, OPT_ADMIN_GROUP, OPT_TOKEN_FILE, OPT_ADMIN_TOKEN_FILE,
	OPT_OUTPUT_STALL,
};

static const struct option long_options[] = {
	{ "config", required_argument, NULL, 'c' },
	{ "foreground", no_argument, NULL, 'f' },
	{ "check", no_argument, NULL, 'n' },
	{ "socket", required_argument, NULL, 's' },
	{ "listen", required_argument, NULL, 'l' },
	{ "workers", required_argument, NULL, 'w' },
	{ "queue", required_argument, NULL, 'q' },
	{ "limit", required_argument, NULL, OPT_LIMIT },
	{ "pool", required_argument, NULL, OPT_POOL },
	{ "log-level", required_argument, NULL, OPT_LOG_LEVEL },
	{ "max-connections", required_argument, NULL, OPT_MAX_CONNECTIONS },
	{ "max-request-bytes", required_argument, NULL, OPT_MAX_REQUEST },
	{ "max-output-buffer", required_argument, NULL, OPT_MAX_OUTPUT },
	{ "output-stall-timeout", required_argument, NULL, OPT_OUTPUT_STALL },
	{ "result-ttl", required_argument, NULL, OPT_RESULT_TTL },
	{ "result-retain", required_argument, NULL, OPT_RESULT_RETAIN },
	{ "shutdown-timeout", required_argument, NULL, OPT_SHUTDOWN_TIMEOUT },
	{ "socket-mode", required_argument, NULL, OPT_SOCKET_MODE },
	{ "socket-group", required_argument, NULL, OPT_SOCKET_GROUP },
	{ "admin-group", required_argument, NULL, OPT_ADMIN_GROUP },
	{ "token-file", required_argument, NULL, OPT_TOKEN_FILE },
	{ "admin-token-file", required_argument, NULL, OPT_ADMIN_TOKEN_FILE },
	{ "version", no_argument, NULL, OPT_VERSION },
	{ "help", no_argument, NULL, 'h' },
	{ NULL, 0, NULL, 0 },
};

static unsigned
parse_count(const char *flag, const char *arg, unsigned min, unsigned max)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(arg, &end, 10);
	if (*arg == '\0' || *end != '\0' || errno != 0 || v < min || v > max) {
		fprintf(stderr, "tpd: %s %s: expected a whole number from %u to %u\n",
		    flag, arg, min, max);
		exit(64);
	}
	return (unsigned)v;
}

static size_t
parse_size_flag(const char *flag, const char *arg)
{
	size_t v;

	if (conf_parse_size(arg, &v) == -1 || v == 0) {
		fprintf(stderr, "tpd: %s %s: expected a size such as 65536, 64k or 8M\n", flag, arg);
		exit(64);
	}
	return v;
}

static uint64_t
parse_duration_flag(const char *flag, const char *arg)
{
	uint64_t v;

	if (conf_parse_duration_ms(arg, &v) == -1) {
		fprintf(stderr, "tpd: %s %s: expected a duration such as 500ms, 5s or 2m\n",
		    flag, arg);
		exit(64);
	}
	return v;
}

static void
replace(char **slot, const char *value)
{
	free(*slot);
	*slot = strdup(value);
}

/* --pool NAME:SIZE[:CAPACITY[:LIMIT]] */
static void
add_pool_flag(struct conf *c, const char *spec)
{
	char *copy = strdup(spec), *name, *size, *capacity, *limit, *save = NULL;
	struct conf_pool *cp;

	name = strtok_r(copy, ":", &save);
	size = strtok_r(NULL, ":", &save);
	capacity = strtok_r(NULL, ":", &save);
	limit = strtok_r(NULL, ":", &save);
	if (name != NULL && !conf_pool_name_ok(name)) {
		fprintf(stderr, "tpd: --pool %s: a pool name is 1 to %d letters, digits, '_', '.' "
		    "or '-'\n", spec, CONF_POOL_NAME_MAX);
		exit(64);
	}
	if (name == NULL || size == NULL || (cp = conf_pool_get(c, name)) == NULL) {
		fprintf(stderr, "tpd: --pool %s: expected NAME:SIZE[:CAPACITY[:LIMIT]]\n", spec);
		exit(64);
	}
	if (limit != NULL)
		cp->limit = parse_count("--pool limit", limit, 1, 4096);
	cp->size = parse_count("--pool size", size, 1, 4096);
	if (capacity != NULL)
		cp->capacity = parse_count("--pool capacity", capacity, 1, 1u << 24);
	if (cp->limit < cp->size)
		cp->limit = cp->size;
	free(copy);
}

/* Flags are read twice: first for -c and -n, then over the file's settings. */
static void
apply_flags(int argc, char **argv, struct conf *c, bool only_early, bool *check)
{
	struct conf_pool *def;
	int ch, level;

	optind = 1;
	while ((ch = getopt_long(argc, argv, "c:fns:l:w:q:h", long_options, NULL)) != -1) {
		if (only_early) {
			switch (ch) {
			case 'c': replace(&c->path, optarg); break;
			case 'n': *check = true; break;
			case 'h': usage(stdout); exit(0);
			case OPT_VERSION: printf("tpd %s (malloc: %s)\n", PACKAGE_VERSION, TPD_MALLOC); exit(0);
			case '?': usage(stderr); exit(64);
			}
			continue;
		}
		def = conf_pool_get(c, WIRE_DEFAULT_POOL);
		switch (ch) {
		case 's': replace(&c->socket, optarg); break;
		case 'l':
			if (c->nlisten == CONF_MAX_LISTEN) {
				fprintf(stderr, "tpd: at most %d -l listeners\n", CONF_MAX_LISTEN);
				exit(64);
			}
			c->listen[c->nlisten++] = strdup(optarg);
			break;
		case 'w': def->size = parse_count("-w", optarg, 1, 4096); break;
		case 'q': def->capacity = parse_count("-q", optarg, 1, 1u << 24); break;
		case OPT_LIMIT: def->limit = parse_count("--limit", optarg, 1, 4096); break;
		case OPT_POOL: add_pool_flag(c, optarg); break;
		case OPT_LOG_LEVEL:
			if ((level = log_level_parse(optarg)) == -1) {
				fprintf(stderr, "tpd: --log-level %s: expected error, warning, notice, "
				    "info or debug\n", optarg);
				exit(64);
			}
			c->log_level = level;
			break;
		case OPT_MAX_CONNECTIONS:
			c->max_connections = parse_count("--max-connections", optarg, 1, 1u << 24);
			break;
		case OPT_MAX_REQUEST: c->max_request_bytes = parse_size_flag("--max-request-bytes", optarg); break;
		case OPT_MAX_OUTPUT: c->max_output_buffer = parse_size_flag("--max-output-buffer", optarg); break;
		case OPT_OUTPUT_STALL:
			c->output_stall_timeout_ms = parse_duration_flag("--output-stall-timeout", optarg);
			break;
		case OPT_RESULT_TTL: c->result_ttl_ms = parse_duration_flag("--result-ttl", optarg); break;
		case OPT_RESULT_RETAIN: c->result_retain = parse_count("--result-retain", optarg, 0, 1u << 24); break;
		case OPT_SHUTDOWN_TIMEOUT:
			c->shutdown_timeout_ms = parse_duration_flag("--shutdown-timeout", optarg);
			break;
		case OPT_SOCKET_MODE: {
			char *end;
			unsigned long m = strtoul(optarg, &end, 8);
			if (*optarg == '\0' || *end != '\0' || m > 0777) {
				fprintf(stderr, "tpd: --socket-mode %s: expected an octal mode such as 0660\n", optarg);
				exit(64);
			}
			c->socket_mode = (mode_t)m;
			break;
		}
		case OPT_SOCKET_GROUP: replace(&c->socket_group, optarg); break;
		case OPT_ADMIN_GROUP: replace(&c->admin_group, optarg); break;
		case OPT_TOKEN_FILE: replace(&c->token_file, optarg); break;
		case OPT_ADMIN_TOKEN_FILE: replace(&c->admin_token_file, optarg); break;
		}
	}
	if (!only_early && optind < argc) {
		fprintf(stderr, "tpd: unexpected argument %s\n", argv[optind]);
		exit(64);
	}
	if (!only_early) {
		def = conf_pool_get(c, WIRE_DEFAULT_POOL);
		if (def->limit < def->size)
			def->limit = def->size;
	}
}

void
daemon_apply_flags(struct conf *c)
{
	bool check = false;

	apply_flags(saved_argc, saved_argv, c, false, &check);
}

/* Reads the first line of a token file; exits naming the file on failure. */
static char *
read_token(const char *path, const char *key)
{
	char buf[512];
	FILE *f = fopen(path, "r");

	if (f == NULL)
		fatal("%s %s", key, path);
	if (fgets(buf, sizeof buf, f) == NULL) {
		fclose(f);
		fatalx("%s %s: empty", key, path);
	}
	fclose(f);
	buf[strcspn(buf, "\r\n")] = '\0';
	if (buf[0] == '\0')
		fatalx("%s %s: empty first line", key, path);
	return strdup(buf);
}

static void
load_auth(struct daemon *d)
{
	if (d->conf.token_file != NULL)
		d->submit_token = read_token(d->conf.token_file, "token_file");
	if (d->conf.admin_token_file != NULL)
		d->admin_token = read_token(d->conf.admin_token_file, "admin_token_file");
	if (d->conf.admin_group != NULL) {
		struct group *gr = getgrnam(d->conf.admin_group);
		if (gr == NULL)
			fatalx("admin_group %s: no such group", d->conf.admin_group);
		d->have_admin_gid = true;
		d->admin_gid = gr->gr_gid;
	}
}

static void
shutdown_timeout_cb(evutil_socket_t fd, short what, void *arg)
{
	log_warnx("shutdown_timeout passed with tasks still running: stopping now");
	daemon_begin_shutdown(true);
}

static void
exit_timeout_cb(evutil_socket_t fd, short what, void *arg)
{
	log_warnx("clients did not read their last events within %d ms: exiting anyway",
	    EXIT_FLUSH_MS);
	event_base_loopexit(daemon_state->base, NULL);
}

void
daemon_begin_shutdown(bool now)
{
	struct daemon *d = daemon_state;

	if (d->phase == DAEMON_RUNNING) {
		sdn_stopping();
		d->phase = now ? DAEMON_STOPPING_NOW : DAEMON_DRAINING;
		log_notice("shutting down (%s): %llu tasks outstanding", now ? "now" : "drain",
		    (unsigned long long)d->outstanding);
		pools_close_all(now ? POOL_NOW : POOL_DRAIN);
		if (!now && d->conf.shutdown_timeout_ms > 0) {
			struct timeval tv = {
				(time_t)(d->conf.shutdown_timeout_ms / 1000),
				(suseconds_t)(d->conf.shutdown_timeout_ms % 1000) * 1000,
			};
			evtimer_add(d->shutdown_timer, &tv);
		}
	} else if (now && d->phase == DAEMON_DRAINING) {
		d->phase = DAEMON_STOPPING_NOW;
		log_notice("shutdown turned into now: cancelling %llu outstanding tasks",
		    (unsigned long long)d->outstanding);
		pools_close_all(POOL_NOW);
	}
	mailbox_wake_streams();
	daemon_maybe_exit();
}

void
daemon_maybe_exit(void)
{
	struct daemon *d = daemon_state;
	struct timeval tv = { EXIT_FLUSH_MS / 1000, (EXIT_FLUSH_MS % 1000) * 1000 };

	if (d->phase == DAEMON_RUNNING || d->outstanding > 0)
		return;
	if (d->phase != DAEMON_EXITING) {
		d->phase = DAEMON_EXITING;
		log_info("every accepted task is done; flushing %zu connections", conn_count());
		evtimer_add(d->exit_timer, &tv);
	}
	if (conn_all_flushed())
		event_base_loopexit(d->base, NULL);
}

static void
signal_cb(evutil_socket_t sig, short what, void *arg)
{
	struct daemon *d = daemon_state;

	switch (sig) {
	case SIGTERM:
	case SIGINT:
		log_notice("%s received", strsignal((int)sig));
		daemon_begin_shutdown(d->phase != DAEMON_RUNNING);
		break;
	case SIGHUP:
		daemon_reload();
		break;
	}
}

static void
prune_cb(evutil_socket_t fd, short what, void *arg)
{
	tasks_prune();
}

static void
start_listeners(struct daemon *d)
{
	char path[512], name[200];
	char *cause = NULL;
	const char *socket_path = d->conf.socket;
	struct sdn_activated *act;
	bool have_unix = false, have_tcp = false;
	int nact;

	/* Socket activation: a kind systemd passed replaces the one the settings name. */
	if ((nact = sdn_activation_fds(&act, &cause)) == -1)
		fatalx("%s", cause);
	for (int i = 0; i < nact; i++) {
		bool is_unix = act[i].kind == SDN_UNIX;
		snprintf(name, sizeof name, "%s %s", is_unix ? "unix" : "tcp", act[i].addr);
		if (listen_adopt(act[i].fd, is_unix, name, &cause) == -1)
			fatalx("%s", cause);
		have_unix = have_unix || is_unix;
		have_tcp = have_tcp || !is_unix;
	}
	free(act);
	if (have_unix)
		socket_path = NULL;
	else if (socket_path == NULL && (socket_path = wire_default_socket_path(path, sizeof path)) == NULL)
		fatalx("the default socket path is too long: use -s PATH");
	/* TCP first: once the Unix socket accepts, every listener does (tests rely on it) */
	for (size_t i = 0; !have_tcp && i < d->conf.nlisten; i++)
		if (listen_tcp(d->conf.listen[i], &cause) == -1)
			fatalx("%s", cause);
	if (socket_path != NULL &&
	    listen_unix(socket_path, d->conf.socket_mode, d->conf.socket_group, &cause) == -1)
		fatalx("%s", cause);
}

int
main(int argc, char **argv)
{
	struct daemon *d = &the_daemon;
	struct event *sigs[3], *prune;
	const int signals[3] = { SIGTERM, SIGINT, SIGHUP };
	struct timeval second = { 1, 0 };
	bool check = false;
	char *cause = NULL;

	daemon_state = d;
	saved_argc = argc;
	saved_argv = argv;
	conf_init(&d->conf);
	apply_flags(argc, argv, &d->conf, true, &check);
	if (d->conf.path != NULL) {
		char *path = strdup(d->conf.path);
		if (conf_load(&d->conf, path, &cause) == -1) {
			log_lines(LOG_ERR, cause ? cause : "tpd: cannot read the configuration");
			exit(1);
		}
		free(path);
	}
	apply_flags(argc, argv, &d->conf, false, &check);
	if (conf_validate(&d->conf, &cause) == -1) {
		log_lines(LOG_ERR, cause ? cause : "tpd: out of memory");
		exit(1);
	}
	if (check) {
		printf("configuration OK\n");
		exit(0);
	}
	log_init(d->conf.log_level);
	load_auth(d);
	signal(SIGPIPE, SIG_IGN);

	/*
	 * The changelist folds a connection's interest changes within one loop
	 * turn into one epoll_ctl; conn.c closes sockets only after the next
	 * poll, which this mode needs.
	 */
	struct event_config *ec = event_config_new();
	if (ec != NULL)
		event_config_set_flag(ec, EVENT_BASE_FLAG_EPOLL_USE_CHANGELIST);
	d->base = ec != NULL ? event_base_new_with_config(ec) : NULL;
	if (ec != NULL)
		event_config_free(ec);
	if (d->base == NULL)
		fatalx("cannot create the event loop");
	d->started_us = clock_now_us();
	/*
	 * Signals are caught before the socket exists: a SIGTERM sent as soon
	 * as the socket appears is handled (a clean shutdown once the loop
	 * runs), not the default action that kills tpd mid-start.
	 */
	for (int i = 0; i < 3; i++) {
		sigs[i] = evsignal_new(d->base, signals[i], signal_cb, NULL);
		evsignal_add(sigs[i], NULL);
	}
	if (mailbox_init(d->base, tasks_handle_mail, &cause) == -1)
		fatalx("%s", cause);
	tasks_set_stream_budget(d->conf.stream_budget);
	exec_configure(&d->conf);
	if (pools_start(&d->conf, &cause) == -1)
		fatalx("%s", cause);
	start_listeners(d);

	d->shutdown_timer = evtimer_new(d->base, shutdown_timeout_cb, NULL);
	d->exit_timer = evtimer_new(d->base, exit_timeout_cb, NULL);
	prune = event_new(d->base, -1, EV_PERSIST, prune_cb, NULL);
	evtimer_add(prune, &second);
	log_notice("tpd %s ready (%s backend)", PACKAGE_VERSION, event_base_get_method(d->base));
	sdn_setup(d->base, &(struct sdn_hooks){ health_check, health_status, NULL });
	sdn_ready();

	event_base_dispatch(d->base);
	sdn_teardown();

	listen_close_all();
	conn_close_all();
	pools_stop_all();
	tasks_free_all();
	exec_configure(NULL);
	mailbox_free();
	for (int i = 0; i < 3; i++)
		event_free(sigs[i]);
	event_free(prune);
	event_free(d->shutdown_timer);
	event_free(d->exit_timer);
	event_base_free(d->base);
	free(d->submit_token);
	free(d->admin_token);
	conf_free(&d->conf);
	log_notice("tpd stopped");
	return 0;
}
