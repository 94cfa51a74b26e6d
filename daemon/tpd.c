/*
 * tpd.c: the daemon's main: the command line (parsed once, into the
 * settings' flags of conf.c and tpd's own), start-up, the event loop,
 * signals, and the shutdown sequence (drain, then now; see tpd(8)).
 */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <grp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>

#include "cgroup.h"
#include "conf.h"
#include "conn.h"
#include "daemon.h"
#include "exec.h"
#include "health.h"
#include "listen.h"
#include "log.h"
#include "mailbox.h"
#include "metrics.h"
#include "pgroup.h"
#include "pools.h"
#include "sd.h"
#include "tasks.h"
#include "tokens.h"
#include "wire.h"

#define EXIT_FLUSH_MS 5000 /* at exit, how long clients get to read their last events */

struct daemon *daemon_state;
static struct daemon the_daemon;

enum { OPT_VERSION = 256 };

/* tpd's own flags; every setting's flag comes from conf.c's key table. */
static const struct option own_options[] = {
	{ "config", required_argument, NULL, 'c' },
	{ "foreground", no_argument, NULL, 'f' },
	{ "check", no_argument, NULL, 'n' },
	{ "version", no_argument, NULL, OPT_VERSION },
	{ "help", no_argument, NULL, 'h' },
	{ NULL, 0, NULL, 0 },
};

static void
usage(FILE *f)
{
	fprintf(f,
	    "usage: tpd [-fn] [-c FILE] [-s PATH] [-l HOST:PORT]... [-w N] [-q N]\n"
	    "           [--pool NAME:SIZE[:CAPACITY[:LIMIT]]]... [--KEY VALUE]...\n"
	    "\n"
	    "  -c, --config FILE        read settings from FILE (flags override it)\n"
	    "  -f, --foreground         run in the foreground (the only mode; systemd daemonizes)\n"
	    "  -n, --check              check the configuration (the file and the flags) and exit\n"
	    "      --version            print the version and exit\n"
	    "  -h, --help               print this help and exit\n"
	    "\n"
	    "Each of these sets the key of tpd.conf(5) named on its right, over the file,\n"
	    "with the file's syntax and checks:\n");
	conf_flags_usage(f);
	fprintf(f, "\n"
	    "The default socket is $RUNTIME_DIRECTORY/tpd.sock under systemd, else\n"
	    "/run/tpd/tpd.sock as root, else $XDG_RUNTIME_DIR/tpd.sock, else\n"
	    "/tmp/tpd-$UID/tpd.sock.\n");
}

static void usage_error(const char *, ...) __attribute__((format(printf, 1, 2)));

/* One line naming what was wrong on the command line (the caller exits 64). */
static void
usage_error(const char *fmt, ...)
{
	va_list ap;

	fputs("tpd: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputs(" (see tpd --help)\n", stderr);
}

/*
 * getopt_long refused the flag at arg (the word it stopped in): says whether
 * it is unknown, ambiguous, lacks a value or has one it does not take.
 */
static void
flag_refused(const struct option *opts, const char *arg, int ch)
{
	const struct option *hit = NULL;
	char matches[512] = "";
	size_t n = 0, nmatch = 0;
	bool exact = false, is_long = strncmp(arg, "--", 2) == 0;

	if (is_long) {
		n = strcspn(arg + 2, "=");
		for (const struct option *o = opts; o->name != NULL; o++) {
			if (strncmp(o->name, arg + 2, n) != 0)
				continue;
			if (o->name[n] == '\0')
				exact = true;
			if (o->name[n] == '\0' || hit == NULL)
				hit = o;
			if (nmatch++ < 4)
				snprintf(matches + strlen(matches), sizeof matches -
				    strlen(matches), "%s--%s", nmatch > 1 ? ", " : "", o->name);
		}
		/*
		 * For a long flag, optopt is its value (or 0). Otherwise arg is
		 * the word before a cluster of short flags, still being read.
		 */
		if (optopt != 0 && (hit == NULL || hit->val != optopt || (nmatch > 1 && !exact)))
			is_long = false;
	}
	if (!is_long && ch == ':')
		usage_error("-%c needs a value", optopt);
	else if (!is_long)
		usage_error("unknown flag -%c", optopt);
	else if (ch == ':')
		usage_error("%.*s needs a value", (int)(n + 2), arg);
	else if (nmatch == 1 || exact)
		usage_error("%.*s takes no value", (int)(n + 2), arg);
	else if (nmatch > 1)
		usage_error("%.*s is ambiguous: %s%s", (int)(n + 2), arg, matches,
		    nmatch > 4 ? ", ..." : "");
	else
		usage_error("unknown flag %.*s", (int)(n + 2), arg);
}

/*
 * Parses the command line, once: tpd's own flags into *path and *check, and
 * every setting into the list returned, which conf_read applies over the
 * file at start and on SIGHUP. A usage error (an unknown flag, a missing
 * value, a stray argument) exits 64; values are checked by conf_read.
 */
static struct conf_flags *
flags_parse(int argc, char **argv, char **path, bool *check)
{
	struct conf_flags *f;
	const struct option *opts;
	char *cause = NULL;
	int ch, li;

	if ((f = conf_flags_new(own_options, "c:fnh")) == NULL)
		fatalx("out of memory");
	opts = conf_flags_longopts(f);
	opterr = 0;
	optind = 1;
	for (;;) {
		li = -1;
		if ((ch = getopt_long(argc, argv, conf_flags_shortopts(f), opts, &li)) == -1)
			break;
		switch (ch) {
		case 'c':
			free(*path);
			if ((*path = strdup(optarg)) == NULL)
				fatalx("out of memory");
			continue;
		case 'f':
			continue;
		case 'n':
			*check = true;
			continue;
		case 'h':
			usage(stdout);
			conf_flags_free(f);
			exit(0);
		case OPT_VERSION:
			printf("tpd %s (malloc: %s)\n", PACKAGE_VERSION, TPD_MALLOC);
			conf_flags_free(f);
			exit(0);
		case ':':
		case '?':
			flag_refused(opts, argv[optind - 1], ch);
			goto usage;
		}
		switch (conf_flags_add(f, ch, li, optarg, &cause)) {
		case -1:
			usage_error("%s", cause ? cause : "out of memory");
			free(cause);
			goto usage;
		case 1:
			/* a bug: every option is tpd's own or a setting's */
			fatalx("flag %d has no handler", ch);
		}
	}
	if (optind < argc) {
		usage_error("unexpected argument %s", argv[optind]);
		goto usage;
	}
	return f;
usage:
	conf_flags_free(f);
	free(*path);
	exit(64);
}

/* The token files and the admin group; exits naming FILE:LINE and what is wrong. */
static void
load_auth(struct daemon *d)
{
	char *cause = NULL;

	if (tokens_load_files(d->conf.token_file, d->conf.admin_token_file, &d->tokens,
	    &cause) == -1)
		fatalx("%s", cause ? cause : "out of memory reading the token files");
	if (d->tokens != NULL)
		log_info("TCP tokens: %zu with the submit role, %zu with the admin role",
		    tokens_count(d->tokens, TOKENS_SUBMIT), tokens_count(d->tokens, TOKENS_ADMIN));
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
	case SIGCHLD:
		pgroup_reap();
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

static bool containment_ready; /* cgroup_setup ran: cgroup_current() is in force */

/*
 * conf.c's check of the pools' limit defaults: what the containment in force
 * can enforce, or before it is set up (start-up, tpd -n), what the
 * configuration being read asks for. A cgroup root that cannot be used is
 * reported by cgroup_setup or cgroup_probe itself, not here.
 */
static void
enforce_hook(const struct conf *c, struct conf_enforce *out)
{
	struct cgroup_info probe;
	char *cause = NULL;

	if (containment_ready) {
		exec_enforce(cgroup_current(), out);
		return;
	}
	if (cgroup_probe(c->containment, c->cgroup_root, &probe, &cause) == -1) {
		free(cause);
		memset(out, 0, sizeof *out);
		return;
	}
	exec_enforce(&probe, out);
}

int
main(int argc, char **argv)
{
	struct daemon *d = &the_daemon;
	struct event *sigs[4], *prune;
	const int signals[4] = { SIGTERM, SIGINT, SIGHUP, SIGCHLD };
	struct cgroup_info probe;
	struct timeval second = { 1, 0 };
	bool check = false;
	char *cause = NULL, *path = NULL;

	daemon_state = d;
	conf_set_enforce(enforce_hook);
	d->flags = flags_parse(argc, argv, &path, &check);
	conf_init(&d->conf);
	if (conf_read(&d->conf, path, d->flags, &cause) == -1) {
		log_lines(LOG_ERR, cause ? cause : "tpd: cannot read the configuration");
		exit(1);
	}
	free(path);
	/* Containment, and the pools' limit defaults it must be able to enforce. */
	if (check) {
		struct tokens *tokens;
		if (tokens_load_files(d->conf.token_file, d->conf.admin_token_file, &tokens,
		    &cause) == -1) {
			fprintf(stderr, "%s\n", cause ? cause : "out of memory");
			exit(1);
		}
		tokens_free(tokens);
		if (cgroup_probe(d->conf.containment, d->conf.cgroup_root, &probe, &cause) == -1) {
			if (d->conf.path != NULL)
				fprintf(stderr, "%s: ", d->conf.path);
			fprintf(stderr, "%s\n", cause ? cause : "out of memory");
			exit(1);
		}
		printf("configuration OK\n");
		exit(0);
	}
	log_init(d->conf.log_level);
	load_auth(d);       /* a bad token file stops tpd before anything is set up */
	/* Before any thread: tpd moves itself into its cgroup root's daemon/. */
	if (cgroup_setup(d->conf.containment, d->conf.cgroup_root, &cause) == -1)
		fatalx("%s", cause);
	containment_ready = true;
	if (!cgroup_current()->cgroup)
		pgroup_init();
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
	/* SIGCHLD only with process containment: then tpd adopts orphans to reap */
	for (int i = 0; i < 4; i++) {
		if (signals[i] == SIGCHLD && cgroup_current()->cgroup) {
			sigs[i] = NULL;
			continue;
		}
		sigs[i] = evsignal_new(d->base, signals[i], signal_cb, NULL);
		evsignal_add(sigs[i], NULL);
	}
	if (mailbox_init(d->base, tasks_handle_mail, &cause) == -1)
		fatalx("%s", cause);
	tasks_set_stream_budget(d->conf.stream_budget);
	exec_configure(&d->conf);
	if (pools_start(&d->conf, &cause) == -1)
		fatalx("%s", cause);
	/* before the listeners: once the Unix socket accepts, /metrics does too */
	if (metrics_start(d->base, &d->conf, &cause) == -1)
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
	metrics_stop();
	conn_close_all();
	pools_stop_all();
	tasks_free_all();
	exec_configure(NULL);
	mailbox_free();
	for (int i = 0; i < 4; i++)
		if (sigs[i] != NULL)
			event_free(sigs[i]);
	event_free(prune);
	event_free(d->shutdown_timer);
	event_free(d->exit_timer);
	event_base_free(d->base);
	tokens_free(d->tokens);
	conf_free(&d->conf);
	conf_flags_free(d->flags);
	log_notice("tpd stopped");
	return 0;
}
