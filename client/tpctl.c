/*
 * tpctl.c: the client's entry: global options, the environment, the
 * command table, help and usage errors, and the command-line helpers every
 * command shares (its options, durations, task ids).
 */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tpctl.h"
#include "units.h"
#include "wire.h"

const char *tpctl_prog = "tpctl";

static const struct cmd *const cmds[] = {
	&cmd_run, &cmd_submit, &cmd_wait, &cmd_status, &cmd_list, &cmd_follow, &cmd_log, &cmd_send,
	&cmd_rerun, &cmd_cancel, &cmd_stats, &cmd_resize, &cmd_pause, &cmd_resume,
	&cmd_shutdown, &cmd_ping, &cmd_batch, &cmd_top, &cmd_enqueue, &cmd_results, NULL
};

uint64_t
tpctl_now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

void
tpctl_warnx(const char *fmt, ...)
{
	va_list ap;
	char *msg = NULL;

	progress_clear(progress_current);
	fflush(stdout);
	va_start(ap, fmt);
	/* the daemon's words (and a task's label, a program's name) may carry escapes */
	if (vasprintf(&msg, fmt, ap) == -1)
		msg = NULL;
	va_end(ap);
	fprintf(stderr, "%s: %s\n", tpctl_prog, msg != NULL ? format_safe(msg) :
	    "(out of memory for a message)");
	free(msg);
}

/*
 * The system daemon's socket, which tpctl tries when the default rule's
 * does not exist: WIRE_SYSTEM_SOCKET, or TPCTL_SYSTEM_SOCKET (for tests,
 * which cannot put a daemon in /run).
 */
const char *
tpctl_system_socket(void)
{
	const char *env = getenv("TPCTL_SYSTEM_SOCKET");

	return env != NULL && *env != '\0' ? env : WIRE_SYSTEM_SOCKET;
}

static void
tpctl_usage(FILE *f)
{
	char path[256], where[512];
	const struct cmd *const *c;

	if (wire_default_socket_path(path, sizeof path) == NULL)
		snprintf(where, sizeof where, "(too long)");
	else if (strcmp(path, tpctl_system_socket()) == 0)
		snprintf(where, sizeof where, "%s", path);
	else
		snprintf(where, sizeof where, "%s,\n                           "
		    "else %s", path, tpctl_system_socket());
	fprintf(f,
	    "usage: tpctl [-s PATH | -H HOST:PORT] [--token-file FILE] [--json]\n"
	    "             [--connect-timeout DUR] [--timeout-answer DUR] COMMAND [ARG...]\n"
	    "\n"
	    "Sends tasks to tpd, the task-pool daemon, and administers it.\n"
	    "\n"
	    "Commands:\n");
	for (c = cmds; *c != NULL; c++)
		fprintf(f, "  %-9s %s\n", (*c)->name, (*c)->summary);
	fprintf(f,
	    "\n"
	    "Options:\n"
	    "  -s, --socket PATH        the daemon's Unix socket ($TPD_SOCKET;\n"
	    "                           default here: %s)\n"
	    "  -H, --host HOST:PORT     connect over TCP instead ($TPD_HOST)\n"
	    "      --token-file FILE    present the token in FILE first (TCP; $TPD_TOKEN_FILE)\n"
	    "      --json               print the daemon's events as received, one JSON\n"
	    "                           object per line (also after the command)\n"
	    "      --connect-timeout DUR  give up connecting after DUR (default 5s;\n"
	    "                           0: no limit)\n"
	    "      --timeout-answer DUR  give up when an answer due at once (anything but\n"
	    "                           a task's end) takes longer (default 10s; 0: no limit)\n"
	    "  -h, --help               this help; tpctl COMMAND --help for a command's\n"
	    "  -V, --version            the version\n"
	    "\n"
	    "Durations: 500ms, 5s, 1.5s, 2m, 1h.\n"
	    "Exit status: 0 success; run and wait: the task's exit status, 124 timed out,\n"
	    "128+N killed by signal N; 1 a task failed or the daemon refused a request;\n"
	    "64 usage error; 69 daemon unreachable, no answer in time or connection lost;\n"
	    "75 rejected (queue full or shutting down); 77 not permitted; 130 interrupted.\n"
	    "See tpctl(1).\n", where);
}

void
cmd_print_help(const struct cmd *c, FILE *f)
{
	fprintf(f, "usage: tpctl %s %s\n\n%s\n", c->name, c->args, c->summary);
	if (c->help != NULL && *c->help != '\0')
		fprintf(f, "\n%s", c->help);
	fprintf(f, "  -h, --help               this help\n"
	    "      --json               print the daemon's events as received\n");
}

int
cmd_usage_error(const struct cmd *c, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s %s: ", tpctl_prog, c->name);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\nusage: tpctl %s %s (see tpctl %s --help)\n", c->name,
	    c->args, c->name);
	return EX_USAGE;
}

int
cmd_getopt(const struct cmd *c, struct tpctl *opt, int argc, char **argv,
    const char *optstring, const struct option *longopts)
{
	int ch;

	opterr = 0;
	for (;;) {
		ch = getopt_long(argc, argv, optstring, longopts, NULL);
		switch (ch) {
		case OPT_JSON:
			opt->json = true;
			continue;
		case 'h':
			cmd_print_help(c, stdout);
			return 'h';
		case ':':
			cmd_usage_error(c, "option %s needs a value", argv[optind - 1]);
			return '?';
		case '?':
			if (optopt != 0)
				cmd_usage_error(c, "unknown option -%c", optopt);
			else
				cmd_usage_error(c, "unknown option %s", argv[optind - 1]);
			return '?';
		default:
			return ch;
		}
	}
}

int
cmd_duration_arg(const struct cmd *c, const char *option, const char *arg,
    uint64_t *ms)
{
	char *cause;

	if (units_parse_duration(arg, ms, &cause) == 0)
		return 0;
	cmd_usage_error(c, "%s: %s", option, cause != NULL ? cause : arg);
	free(cause);
	return -1;
}

int
cmd_noopts(const struct cmd *c, struct tpctl *opt, int argc, char **argv)
{
	static const struct option longopts[] = {
		CMD_LONGOPTS_COMMON, { NULL, 0, NULL, 0 }
	};
	int ch;

	while ((ch = cmd_getopt(c, opt, argc, argv, ":h", longopts)) != -1)
		return ch == 'h' ? 0 : EX_USAGE;
	return -1;
}

int
cmd_parse_task_ids(const struct cmd *c, int argc, char **argv, long long **ids)
{
	int i;

	if (argc == 0)
		return cmd_usage_error(c, "a task id is needed");
	if ((*ids = calloc((size_t)argc, sizeof **ids)) == NULL)
		return EX_OSERR;
	for (i = 0; i < argc; i++)
		if (format_parse_int(argv[i], 0, INT64_MAX, &(*ids)[i]) == -1) {
			free(*ids);
			*ids = NULL;
			return cmd_usage_error(c, "'%s' is not a task id (the number "
			    "submit printed)", argv[i]);
		}
	return 0;
}

static const struct cmd *
tpctl_find(const char *name)
{
	const struct cmd *const *c;

	for (c = cmds; *c != NULL; c++)
		if (strcmp((*c)->name, name) == 0)
			return *c;
	return NULL;
}

int
tpctl_resolve(struct tpctl *opt)
{
	static char path[4096];
	const char *env_socket = getenv("TPD_SOCKET"), *env_host = getenv("TPD_HOST");

	if (env_socket != NULL && *env_socket == '\0')
		env_socket = NULL;
	if (env_host != NULL && *env_host == '\0')
		env_host = NULL;
	if (opt->socket_path == NULL && opt->host == NULL) {
		if (env_socket != NULL && env_host != NULL) {
			fprintf(stderr, "%s: TPD_SOCKET and TPD_HOST are both set: "
			    "unset one, or choose with -s or -H\n", tpctl_prog);
			return EX_USAGE;
		}
		opt->socket_path = env_socket;
		opt->host = env_host;
	}
	if (opt->socket_path == NULL && opt->host == NULL) {
		if (wire_default_socket_path(path, sizeof path) == NULL) {
			fprintf(stderr, "%s: the default socket path is too long: "
			    "name the socket with -s PATH\n", tpctl_prog);
			return EX_USAGE;
		}
		opt->socket_path = path;
		opt->socket_default = true;
		/* the system daemon's, for users whose own default has none */
		if (strcmp(path, tpctl_system_socket()) != 0)
			opt->socket_fallback = tpctl_system_socket();
	}
	if (opt->token_file == NULL && getenv("TPD_TOKEN_FILE") != NULL &&
	    *getenv("TPD_TOKEN_FILE") != '\0')
		opt->token_file = getenv("TPD_TOKEN_FILE");
	return 0;
}

int
main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "host", required_argument, NULL, 'H' },
		{ "token-file", required_argument, NULL, 'T' },
		{ "json", no_argument, NULL, OPT_JSON },
		{ "connect-timeout", required_argument, NULL, 'C' },
		{ "timeout-answer", required_argument, NULL, 'A' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 }
	};
	struct tpctl opt;
	const struct cmd *c;
	bool socket_set = false, host_set = false;
	char *cause;
	int ch, r;

	memset(&opt, 0, sizeof opt);
	opt.connect_timeout_ms = TPCTL_DEFAULT_CONNECT_TIMEOUT_MS;
	opt.answer_timeout_ms = TPCTL_DEFAULT_ANSWER_TIMEOUT_MS;
	/* a closed socket or stdout is an error return, not a silent death */
	signal(SIGPIPE, SIG_IGN);

	opterr = 0;
	while ((ch = getopt_long(argc, argv, "+:s:H:hV", longopts, NULL)) != -1) {
		switch (ch) {
		case 's':
			opt.socket_path = optarg;
			socket_set = true;
			break;
		case 'H':
			opt.host = optarg;
			host_set = true;
			break;
		case 'T':
			opt.token_file = optarg;
			break;
		case OPT_JSON:
			opt.json = true;
			break;
		case 'C':
			if (units_parse_duration(optarg, &opt.connect_timeout_ms,
			    &cause) != 0) {
				fprintf(stderr, "%s: --connect-timeout: %s\n", tpctl_prog,
				    cause != NULL ? cause : optarg);
				free(cause);
				return EX_USAGE;
			}
			break;
		case 'A':
			if (format_parse_duration(optarg, &opt.answer_timeout_ms) == -1) {
				fprintf(stderr, "%s: --timeout-answer: '%s' is not a "
				    "duration (use 500ms, 5s or 2m)\n", tpctl_prog, optarg);
				return EX_USAGE;
			}
			opt.answer_timeout_set = true;
			break;
		case 'h':
			tpctl_usage(stdout);
			return 0;
		case 'V':
			printf("tpctl %s (protocol %d)\n", PACKAGE_VERSION,
			    WIRE_PROTOCOL_VERSION);
			return 0;
		case ':':
			fprintf(stderr, "%s: option %s needs a value (see tpctl --help)\n",
			    tpctl_prog, argv[optind - 1]);
			return EX_USAGE;
		default:
			if (optopt != 0)
				fprintf(stderr, "%s: unknown option -%c (see tpctl --help)\n",
				    tpctl_prog, optopt);
			else
				fprintf(stderr, "%s: unknown option %s (see tpctl --help)\n",
				    tpctl_prog, argv[optind - 1]);
			return EX_USAGE;
		}
	}
	if (socket_set && host_set) {
		fprintf(stderr, "%s: -s and -H both name the daemon: give one\n",
		    tpctl_prog);
		return EX_USAGE;
	}
	argc -= optind;
	argv += optind;
	if (argc == 0) {
		tpctl_usage(stderr);
		return EX_USAGE;
	}
	if (strcmp(argv[0], "help") == 0) {
		if (argc == 1) {
			tpctl_usage(stdout);
			return 0;
		}
		if ((c = tpctl_find(argv[1])) == NULL) {
			fprintf(stderr, "%s: unknown command '%s' (see tpctl --help)\n",
			    tpctl_prog, argv[1]);
			return EX_USAGE;
		}
		cmd_print_help(c, stdout);
		return 0;
	}
	if ((c = tpctl_find(argv[0])) == NULL) {
		fprintf(stderr, "%s: unknown command '%s' (see tpctl --help)\n",
		    tpctl_prog, argv[0]);
		return EX_USAGE;
	}
	optind = 0;     /* restart getopt for the command's own options */
	r = c->exec(&opt, argc, argv);
	if (fflush(stdout) == EOF && r == 0) {
		if (errno == EPIPE)
			return EXIT_BROKEN_PIPE;        /* quietly: nobody reads */
		fprintf(stderr, "%s: cannot write the output: %s\n", tpctl_prog,
		    strerror(errno));
		r = EX_IOERR;
	}
	return r;
}
