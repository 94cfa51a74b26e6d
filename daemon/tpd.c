/*
 * tpd.c: the daemon's main: the command line (parsed once, into the
 * settings' flags of conf.c and tpd's own), start-up as a table of steps
 * undone in reverse, the event loop, and signals. The shutdown sequence
 * (drain, then now; see tpd(8)) is shutdown.c's.
 */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <event2/event.h>

#include "net/auth.h"
#include "ops/admission.h"
#include "exec/cgroup.h"
#include "conf/conf.h"
#include "net/conn.h"
#include "daemon.h"
#include "journal/durable.h"
#include "exec/exec.h"
#include "obs/health.h"
#include "net/listen.h"
#include "ops/replay.h"
#include "base/log.h"
#include "task/mailbox.h"
#include "obs/metrics.h"
#include "obs/loop-watch.h"
#include "exec/pgroup.h"
#include "ops/ops.h"
#include "exec/spool.h"
#include "pool/pools.h"
#include "reload.h"
#include "sd.h"
#include "shutdown.h"
#include "source/sources.h"
#include "task/tasks.h"
#include "wire.h"

struct daemon *daemon_state;
static struct daemon the_daemon;

enum { OPT_VERSION = 256 };

/* The file read without -c when it exists; $TPD_CONFIG names another (tpd(8)). */
#define CONF_DEFAULT_PATH SYSCONFDIR "/tpd/tpd.conf"

/* Which configuration file was read, for the log and tpd -n ("no file (-c none)"). */
static char conf_what[600];

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
	    "  -c, --config FILE        read settings from FILE (flags override it); none: no\n"
	    "                           file (default: " CONF_DEFAULT_PATH " if it exists)\n"
	    "  -f, --foreground         run in the foreground (the only mode; systemd daemonizes)\n"
	    "  -n, --check              check the configuration (the file and the flags) and exit\n"
	    "      --version            print the version and exit\n"
	    "  -h, --help               print this help and exit\n"
	    "\n"
	    "Each of these sets the key of tpd.conf(5) named on its right, over the file,\n"
	    "with the file's syntax and checks; a key \"read at start\" keeps its running\n"
	    "value at a SIGHUP, the others take the new one:\n");
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

/*
 * The configuration file to read: -c FILE; none for -c none; else the
 * default ($TPD_CONFIG, or CONF_DEFAULT_PATH) when it exists. Says which
 * in conf_what.
 */
static char *
conf_choose(char *given)
{
	const char *def = getenv("TPD_CONFIG");
	struct stat st;
	char *path;

	if (given != NULL && strcmp(given, "none") == 0) {
		free(given);
		snprintf(conf_what, sizeof conf_what, "no file (-c none)");
		return NULL;
	}
	if (given == NULL) {
		if (def == NULL || *def == '\0')
			def = CONF_DEFAULT_PATH;
		if (stat(def, &st) == -1 && errno == ENOENT) {
			snprintf(conf_what, sizeof conf_what, "no file (%s does not exist)", def);
			return NULL;
		}
		if ((given = strdup(def)) == NULL)
			fatalx("out of memory");
	}
	path = given;
	snprintf(conf_what, sizeof conf_what, "%s", path);
	return path;
}

static void
signal_cb(evutil_socket_t sig, short what, void *arg)
{
	switch (sig) {
	case SIGTERM:
	case SIGINT:
		log_notice("SIG%s received", sigabbrev_np((int)sig));
		shutdown_begin(shutdown_phase() != DAEMON_RUNNING);
		break;
	case SIGHUP:
		daemon_reload();
		break;
	}
}

/* Once a second: finished tasks past their retention, and the orphans that exited (pgroup.h). */
static void
prune_cb(evutil_socket_t fd, short what, void *arg)
{
	tasks_prune();
	pgroup_reap();
}

static bool containment_ready; /* cgroup_setup ran: cgroup_current() is in force */

/*
 * conf.c's check of the pools' limit defaults: what the containment in force
 * can enforce, or before it is set up (start-up, tpd -n), what the
 * configuration being read asks for. A containment that cannot be had
 * (containment = cgroup on a cgroup root tpd cannot use) is told to conf.c,
 * which reports it where containment was given.
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
		memset(out, 0, sizeof *out);
		snprintf(out->unusable, sizeof out->unusable, "%s", cause != NULL ? cause :
		    "out of memory");
		free(cause);
		return;
	}
	exec_enforce(&probe, out);
}

/* A TCP listener's check (auth_check_tcp), the listener named as tpd names it. */
static int
check_tcp_listener(const struct auth *a, const char *hostport, bool warn, char **cause)
{
	char name[200];

	snprintf(name, sizeof name, "tcp %s", hostport);
	return auth_check_tcp(a, name, warn, cause);
}

/*
 * tpd -n: the configuration is read already, with errors (every one of the
 * file and the flags, FILE:LINE each) or not; the token files are read too.
 * Prints every error, or which file was read and that it is good, and exits.
 */
static void __attribute__((noreturn))
check_only(struct daemon *d, const char *errors)
{
	struct auth *a = NULL;
	char *cause = NULL;
	bool bad = errors != NULL;

	if (errors != NULL)
		fprintf(stderr, "%s\n", errors);
	if (auth_load(&d->conf, &a, &cause) == -1) {
		fprintf(stderr, "%s\n", cause != NULL ? cause : "out of memory");
		bad = true;
	}
	auth_free(a);
	if (bad)
		exit(1);
	printf("configuration OK: %s\n", conf_what);
	/* a warning, not an error: part of the verdict on stdout */
	if (d->conf.journal && d->conf.journal_max_bytes < d->conf.result_retain_bytes)
		printf("warning: journal_max_bytes (%llu) is smaller than "
		    "result_retain_bytes (%llu): at journal_max_bytes the oldest retained results "
		    "are forgotten to make room\n",
		    (unsigned long long)d->conf.journal_max_bytes,
		    (unsigned long long)d->conf.result_retain_bytes);
	exit(0);
}

/* ------------------------------------------------------------ the steps */

static struct event *signal_events[3];
static struct event *prune_timer;

static void
start_log(struct daemon *d)
{
	log_init(d->conf.log_level);
}

static void
stop_log(struct daemon *d)
{
	conf_free(&d->conf);
	conf_flags_free(d->flags);
	log_notice("tpd stopped");
}

/* Which configuration file was read, once nothing stops the start in one line. */
static void
log_configuration(struct daemon *d)
{
	log_info("configuration: %s", conf_what);
}

/*
 * The token files and the admin group; exits naming FILE:LINE and what is
 * wrong, or the listen address that would let anyone in without a token
 * (socket-activated TCP sockets are checked when they are adopted).
 */
static void
start_auth(struct daemon *d)
{
	struct auth *a;
	char *cause = NULL;

	if (auth_load(&d->conf, &a, &cause) == -1)
		fatalx("%s", cause ? cause : "out of memory reading the token files");
	auth_install(a);
	if (getenv("LISTEN_FDS") != NULL)
		return;                 /* socket-activated: start_listeners checks */
	for (size_t i = 0; i < d->conf.nlisten; i++)
		if (check_tcp_listener(NULL, d->conf.listen[i], true, &cause) == -1)
			fatalx("%s", cause);
}

static void
stop_auth(struct daemon *d)
{
	auth_free_all();
}

/*
 * A daemon already answering on the Unix socket: said in one line, before
 * anything else is set up or logged. Under socket activation systemd owns
 * the socket, and start_listeners takes what it passed.
 */
static void
start_busy_check(struct daemon *d)
{
	char path[512];
	const char *socket_path = d->conf.socket;
	char *cause = NULL;

	if (getenv("LISTEN_FDS") != NULL)
		return;
	if (socket_path == NULL && (socket_path = wire_default_socket_path(path,
	    sizeof path)) == NULL)
		return;
	if (listen_unix_busy(socket_path, &cause) == -1)
		fatalx("%s", cause);
}

/* Before any thread: tpd moves itself into its cgroup root's daemon/. */
static void
start_containment(struct daemon *d)
{
	char *cause = NULL;

	if (cgroup_setup(d->conf.containment, d->conf.cgroup_root, &cause) == -1)
		fatalx("%s", cause);
	containment_ready = true;
	/* SIGCHLD blocked from here on, in every thread; subreaper with process */
	pgroup_init(!cgroup_current()->cgroup);
	signal(SIGPIPE, SIG_IGN);
}

/*
 * The changelist folds a connection's interest changes within one loop
 * turn into one epoll_ctl; conn.c closes sockets only after the next
 * poll, which this mode needs.
 */
static void
start_loop(struct daemon *d)
{
	struct event_config *ec = event_config_new();

	if (ec != NULL)
		event_config_set_flag(ec, EVENT_BASE_FLAG_EPOLL_USE_CHANGELIST);
	d->base = ec != NULL ? event_base_new_with_config(ec) : NULL;
	if (ec != NULL)
		event_config_free(ec);
	if (d->base == NULL)
		fatalx("cannot create the event loop");
	d->started_us = clock_now_us();
}

static void
stop_loop(struct daemon *d)
{
	event_base_free(d->base);
	d->base = NULL;
}

/* The loop's pauses (stats' "loop", tpd_loop_pause_seconds): loop-watch.c. First on the base. */
static void
start_loop_watch(struct daemon *d)
{
	char *cause = NULL;

	if (loop_watch_start(d, &cause) == -1)
		fatalx("%s", cause != NULL ? cause : "loop watch: out of memory");
}

static void
stop_loop_watch(struct daemon *d)
{
	(void)d;
	loop_watch_stop();
}

/*
 * Signals are caught before the socket exists: a SIGTERM sent as soon as
 * the socket appears is handled (a clean shutdown once the loop runs), not
 * the default action that kills tpd mid-start. Not SIGCHLD: it stays
 * blocked (pgroup.h), and the orphans tpd adopts are reaped by prune_cb.
 */
static void
start_signals(struct daemon *d)
{
	static const int signals[3] = { SIGTERM, SIGINT, SIGHUP };

	for (int i = 0; i < 3; i++) {
		if ((signal_events[i] = evsignal_new(d->base, signals[i], signal_cb, NULL)) == NULL ||
		    evsignal_add(signal_events[i], NULL) == -1)
			fatalx("cannot catch signal %d", signals[i]);
	}
}

static void
stop_signals(struct daemon *d)
{
	for (int i = 0; i < 3; i++)
		if (signal_events[i] != NULL) {
			event_free(signal_events[i]);
			signal_events[i] = NULL;
		}
}

static void
start_mailbox(struct daemon *d)
{
	char *cause = NULL;

	if (mailbox_init(d->base, &cause) == -1)
		fatalx("%s", cause ? cause : "out of memory");
}

static void
stop_mailbox(struct daemon *d)
{
	mailbox_free();
}

/* The registry (and its hooks), and the stream budget the workers read. */
static void
start_tasks(struct daemon *d)
{
	char *cause = NULL;

	if (tasks_init(&cause) == -1)
		fatalx("%s", cause ? cause : "out of memory");
	task_set_stream_budget(d->conf.stream_budget);
	/* a connection held by a full stdin buffer is read again (exec-input.c) */
	task_set_input_release(conn_input_release);
}

static void
stop_tasks(struct daemon *d)
{
	tasks_free_all();
}

/* The journal's lock and read: a second tpd on state_dir stops here, before any thread. */
static void
open_journal(struct daemon *d)
{
	durable_open(&d->conf);
}

/*
 * The journal: replayed into the registry and the pools before anyone
 * connects. With it on, it is the connections' output gate: what a client
 * reads is recorded first (durable.c).
 */
static void
start_journal(struct daemon *d)
{
	static const struct conn_gate gate = { durable_prepare, durable_seen,
	    durable_output_batch };

	durable_set_seen_hook(conn_gate_seen);
	durable_start(&d->conf, d->base);
	if (durable_on())
		conn_set_gate(&gate);
}

static void
stop_journal(struct daemon *d)
{
	conn_set_gate(NULL);
	durable_stop();
	durable_set_seen_hook(NULL);
}

static bool
spool_known(uint64_t id)
{
	return tasks_find(id) != NULL;
}

static void
spool_hook_forgotten(struct task *t, void *arg)
{
	spool_forget(t->id);
}

/*
 * [exec] output_spool: whole outputs under state_dir/spool, which needs
 * the state_dir that the journal holds (locked, tpd's). With the journal
 * off there is no such directory: outputs are kept only as far as
 * output_limit, and the log says so once. The directory is opened before
 * the workers start (a task the journal queues again may start at once),
 * its files are counted once the journal has brought the registry back.
 */
static void
open_spool(struct daemon *d)
{
	char dir[4096], *cause = NULL;

	if (!d->conf.exec_output_spool)
		return;
	if (!d->conf.journal) {
		log_info("output_spool is on but journal is off: there is no state_dir to keep "
		    "whole outputs in; results keep what output_limit allows");
		return;
	}
	if (spool_start(durable_state_dir(&d->conf, dir, sizeof dir), &d->conf, &cause) == -1)
		fatalx("%s", cause != NULL ? cause : "out of memory");
}

static void
scan_spool(struct daemon *d)
{
	static const struct tasks_hooks hooks = { .forgotten = spool_hook_forgotten };
	char *cause = NULL;

	if (!spool_on())
		return;
	spool_scan(spool_known);
	if (tasks_add_hooks(&hooks, &cause) == -1)
		fatalx("%s", cause != NULL ? cause : "out of memory");
}

static void
stop_spool(struct daemon *d)
{
	spool_stop();
}

static void
start_exec(struct daemon *d)
{
	exec_configure(&d->conf);
}

static void
stop_exec(struct daemon *d)
{
	exec_configure(NULL);
}

static void
start_pools(struct daemon *d)
{
	char *cause = NULL;

	if (pools_start(d->base, &d->conf, &cause) == -1)
		fatalx("%s", cause);
}

/* A drain holds no one for the future: held submits are rejected closed. */
static void
admission_shutdown(bool now)
{
	admission_reject_all(NULL);
}

/* Held submits (admission = wait): the pools' room hook, the connections' close hook. */
static void
start_admission(struct daemon *d)
{
	char *cause = NULL;

	if (admission_init(&cause) == -1)
		fatalx("%s", cause ? cause : "out of memory");
	if (shutdown_add_hook(admission_shutdown) == -1)
		fatalx("too many shutdown hooks");
}

static void
stop_admission(struct daemon *d)
{
	admission_free();
}

/* The [source NAME] sections: each connects in the background. */
static void
start_sources(struct daemon *d)
{
	char *cause = NULL;

	if (sources_start(d->base, &d->conf, &cause) == -1)
		fatalx("%s", cause ? cause : "out of memory");
}

static void
stop_sources(struct daemon *d)
{
	sources_free_all();
}

/* Joins every pool's threads: the loop has left, every accepted task is done. */
static void
stop_pools(struct daemon *d)
{
	pools_stop_all();
}

/* Each request line a connection reads is run by the op table (ops.c). */
static void
start_conns(struct daemon *d)
{
	conn_set_dispatch(ops_dispatch);
}

static void
stop_conns(struct daemon *d)
{
	replay_stop_all();
	conn_close_all();
}

/* GET /metrics on [daemon] metrics_listen, if set (metrics.c). */
static void
start_metrics(struct daemon *d)
{
	char *cause = NULL;

	if (metrics_start(d->base, &d->conf, &cause) == -1)
		fatalx("%s", cause ? cause : "out of memory");
}

static void
stop_metrics(struct daemon *d)
{
	metrics_stop();
}

/*
 * The listeners: those systemd passed, else the settings' Unix socket and
 * TCP addresses. Readiness (and each bound port) is told by READY=1 once
 * every listener is up (start_systemd), not by the order they start in.
 */
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
		if (!is_unix && auth_check_tcp(NULL, name, true, &cause) == -1)
			fatalx("%s", cause);
		if (listen_adopt(act[i].fd, is_unix, name, &cause) == -1)
			fatalx("%s", cause);
		have_unix = have_unix || is_unix;
		have_tcp = have_tcp || !is_unix;
	}
	free(act);
	/* what systemd passed wins: say so when the settings named another */
	if (have_unix && d->conf.socket != NULL)
		log_notice("socket activation: systemd passed a Unix socket; the socket %s "
		    "(-s or socket =) is not used", d->conf.socket);
	if (have_tcp && d->conf.nlisten > 0)
		log_notice("socket activation: systemd passed a TCP socket; the %zu address%s "
		    "of -l or listen = %s not used", d->conf.nlisten,
		    d->conf.nlisten == 1 ? "" : "es", d->conf.nlisten == 1 ? "is" : "are");
	for (size_t i = 0; nact > 0 && !have_tcp && i < d->conf.nlisten; i++)
		if (check_tcp_listener(NULL, d->conf.listen[i], true, &cause) == -1)
			fatalx("%s", cause);
	if (have_unix)
		socket_path = NULL;
	else if (socket_path == NULL && (socket_path = wire_default_socket_path(path, sizeof path)) == NULL)
		fatalx("the default socket path is too long: use -s PATH");
	if (socket_path != NULL &&
	    listen_unix(socket_path, d->conf.socket_mode, d->conf.socket_group, &cause) == -1)
		fatalx("%s", cause);
	for (size_t i = 0; !have_tcp && i < d->conf.nlisten; i++)
		if (listen_tcp(d->conf.listen[i], &cause) == -1) {
			listen_close_all();     /* the socket file made above goes too */
			fatalx("%s", cause);
		}
	{
		const char *names[32];
		size_t n = 0;
		for (; n < listen_count() && n < 32; n++)
			names[n] = listen_name(n);
		auth_check_exposure(&d->conf, names, n);
	}
}

static void
stop_listeners(struct daemon *d)
{
	listen_close_all();
}

static void
start_timers(struct daemon *d)
{
	struct timeval second = { 1, 0 };

	shutdown_timers_start(d->base);
	if ((prune_timer = event_new(d->base, -1, EV_PERSIST, prune_cb, NULL)) == NULL)
		fatalx("cannot make the timers");
	evtimer_add(prune_timer, &second);
}

static void
stop_timers(struct daemon *d)
{
	event_free(prune_timer);
	prune_timer = NULL;
	shutdown_timers_stop();
}

/* Ready: the log says so, and systemd hears it (READY=1). */
static void
start_systemd(struct daemon *d)
{
	char fields[4096];
	size_t off = 0;

	log_notice("tpd %s ready (%s backend)", PACKAGE_VERSION, event_base_get_method(d->base));
	sdn_setup(d->base, &(struct sdn_hooks){ health_check, health_status, NULL });
	/* X_TPD_LISTEN=unix PATH, =tcp HOST:PORT: each listener, the bound port included */
	fields[0] = '\0';
	for (size_t i = 0; i < listen_count(); i++) {
		const char *name = listen_name(i);
		int n;
		if (strchr(name, '\n') != NULL)
			continue;       /* a path with a newline would end the line */
		n = snprintf(fields + off, sizeof fields - off, "%sX_TPD_LISTEN=%s",
		    off > 0 ? "\n" : "", name);
		if (n < 0 || (size_t)n >= sizeof fields - off) {
			fields[off] = '\0';
			break;
		}
		off += (size_t)n;
	}
	sdn_ready_fields(off > 0 ? fields : NULL);
	sdn_ready();
}

static void
stop_systemd(struct daemon *d)
{
	sdn_teardown();
}

/*
 * The start, one step after another; the stop is the same steps undone in
 * the opposite order, once the loop has left. A step that cannot be done
 * exits naming why (fatalx): nothing is served until every step is done.
 */
static const struct step {
	void (*start)(struct daemon *);
	void (*stop)(struct daemon *);
} steps[] = {
	{ start_log, stop_log },                /* the configuration's log level */
	{ start_auth, stop_auth },              /* a bad token file stops tpd before anything else */
	{ start_busy_check, NULL },             /* a live daemon on the socket: one line */
	{ open_journal, NULL },                 /* state_dir's lock, the journal read */
	{ log_configuration, NULL },            /* which file was read */
	{ start_containment, NULL },            /* before any thread */
	{ start_loop, stop_loop },
	{ start_loop_watch, stop_loop_watch },
	{ start_signals, stop_signals },
	{ start_mailbox, stop_mailbox },        /* worker -> loop */
	{ start_tasks, stop_tasks },            /* the registry */
	{ start_exec, stop_exec },              /* [exec] settings */
	{ open_spool, stop_spool },             /* state_dir/spool, before any worker */
	{ start_pools, stop_pools },            /* the workers start here */
	{ start_admission, stop_admission },    /* after the task layer's room hook */
	{ start_journal, stop_journal },        /* state_dir: the replay */
	{ scan_spool, NULL },                   /* state_dir/spool: the files of known tasks */
	{ start_sources, stop_sources },        /* [source NAME]: tasks from Redis streams */
	{ start_conns, stop_conns },            /* connections come with the listeners */
	{ start_metrics, stop_metrics },        /* before the listeners: /metrics answers once they do */
	{ start_listeners, stop_listeners },
	{ start_timers, stop_timers },          /* shutdown_timeout, the exit flush, pruning */
	{ start_systemd, stop_systemd },        /* READY=1 */
};

int
main(int argc, char **argv)
{
	struct daemon *d = &the_daemon;
	bool check = false;
	char *cause = NULL, *path = NULL;
	size_t i;

	daemon_state = d;
	conf_set_enforce(enforce_hook);
	d->flags = flags_parse(argc, argv, &path, &check);
	path = conf_choose(path);
	conf_init(&d->conf);
	if (conf_read(&d->conf, path, d->flags, &cause) == -1) {
		if (check)
			check_only(d, cause != NULL ? cause : "tpd: out of memory");
		log_lines(LOG_ERR, cause ? cause : "tpd: cannot read the configuration");
		exit(1);
	}
	free(path);
	if (check)
		check_only(d, NULL);

	for (i = 0; i < sizeof steps / sizeof steps[0]; i++)
		if (steps[i].start != NULL)
			steps[i].start(d);
	/* One pass of the loop at a time; after each, its end noted and the one exit decision. */
	while (!shutdown_may_leave()) {
		if (event_base_loop(d->base, EVLOOP_ONCE) == -1)
			fatalx("the event loop failed");
		loop_watch_pass_end(d);
	}
	while (i-- > 0)
		if (steps[i].stop != NULL)
			steps[i].stop(d);
	return 0;
}
