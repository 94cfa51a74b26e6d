/*
 * tpctl.h: the client's shared declarations: global options, the command
 * table, the connection, the session built on it, event helpers, formatting,
 * progress and interrupt handling. The wire's names come from wire.h.
 */
#ifndef TPCTL_H
#define TPCTL_H

#include <getopt.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sysexits.h>

#include <jansson.h>

#include "stream-format.h"

/* Exit codes (tpctl(1); sysexits.h for the rest). */
#define EXIT_TASK_FAILED 1      /* a task failed, or the daemon refused a request */
#define EXIT_TIMED_OUT   124    /* like timeout(1) */
#define EXIT_SIGNALLED   128    /* + the signal number */
#define EXIT_INTERRUPTED 130    /* 128 + SIGINT */
#define EXIT_BROKEN_PIPE 141    /* 128 + SIGPIPE: tpctl's stdout was closed */

#define TPCTL_DEFAULT_CONNECT_TIMEOUT_MS 5000
#define TPCTL_DEFAULT_ANSWER_TIMEOUT_MS  10000

/* Global options, from the command line and the environment. */
struct tpctl {
	const char *socket_path;        /* -s, TPD_SOCKET, or the default rule */
	const char *socket_fallback;    /* the system socket, when socket_path
					   (the default rule's) does not exist */
	bool socket_default;            /* socket_path is the default rule's: check who answers */
	const char *host;               /* -H HOST:PORT, TPD_HOST; wins over socket_path */
	const char *token_file;         /* --token-file, TPD_TOKEN_FILE */
	bool json;                      /* --json: print events as received */
	uint64_t connect_timeout_ms;    /* --connect-timeout; 0: wait for ever */
	uint64_t answer_timeout_ms;     /* --timeout-answer; 0: wait for ever */
	bool answer_timeout_set;        /* given on the command line */
};

struct cmd {
	const char *name;
	const char *args;               /* synopsis after the name */
	const char *summary;            /* one line for tpctl --help */
	const char *help;               /* the options, for tpctl CMD --help */
	int (*exec)(struct tpctl *, int argc, char **argv);
};

/* tpctl.c: the entry, and helpers for the commands' command lines. */
extern const char *tpctl_prog;
/*
 * Fills in the daemon's address and token file from the environment
 * (TPD_SOCKET, TPD_HOST, TPD_TOKEN_FILE) and the default rule where the
 * command line named none. Returns 0 or EX_USAGE (printed).
 */
int tpctl_resolve(struct tpctl *);
/* The system daemon's socket: $TPCTL_SYSTEM_SOCKET, else WIRE_SYSTEM_SOCKET. */
const char *tpctl_system_socket(void);
/* Prints "tpctl CMD: message" and a pointer to --help; returns EX_USAGE. */
int cmd_usage_error(const struct cmd *, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Prints the command's help to f. */
void cmd_print_help(const struct cmd *, FILE *f);
/*
 * getopt_long for a command's options (argv[0] is the command's name; start
 * with optind = 0). Handles --json itself; on -h/--help prints the help and
 * returns 'h' (the caller returns 0); on an unknown option or a missing
 * value prints why and returns '?' (the caller returns EX_USAGE).
 * optstring must begin with ":" (or "+:") and contain "h"; longopts must
 * contain CMD_LONGOPTS_COMMON.
 */
#define OPT_JSON 1000
#define CMD_LONGOPTS_COMMON \
	{ "help", no_argument, NULL, 'h' }, { "json", no_argument, NULL, OPT_JSON }
int cmd_getopt(const struct cmd *, struct tpctl *, int argc, char **argv,
    const char *optstring, const struct option *longopts);
/*
 * Parses the options of a command that takes none but the common ones:
 * returns -1 to go on (optind at the arguments), or the exit code (0 after
 * --help, EX_USAGE).
 */
int cmd_noopts(const struct cmd *, struct tpctl *, int argc, char **argv);
/* Parses a duration option's value, or prints why not (returns -1). */
int cmd_duration_arg(const struct cmd *, const char *option, const char *arg,
    uint64_t *ms);
/* Prints "tpctl: message" to stderr (after clearing any progress line). */
void tpctl_warnx(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Parses task ids. Returns 0 or EX_USAGE (printed). */
int cmd_parse_task_ids(const struct cmd *, int argc, char **argv, long long **ids);

/* The commands. */
extern const struct cmd cmd_run, cmd_submit, cmd_wait, cmd_status, cmd_cancel,
    cmd_stats, cmd_resize, cmd_shutdown, cmd_ping, cmd_batch, cmd_top, cmd_list,
    cmd_follow, cmd_send, cmd_log, cmd_rerun, cmd_pause, cmd_resume;
/* The commands that work with a tpd source's Redis streams (hiredis). */
extern const struct cmd cmd_enqueue, cmd_results;

/* redislink.c: tpctl's connection to Redis (hiredis's synchronous API). */
struct redisContext;
/* The address given, else $TPD_REDIS, else NULL. */
const char *redislink_address(const char *given);
/*
 * Connects to addr (common/redis-addr.h's: unix:PATH, /PATH, HOST[:PORT],
 * [IPV6][:PORT], port 6379 when left out), giving up after timeout_ms (0:
 * never). NULL with *code set (EX_USAGE, EX_UNAVAILABLE, EX_OSERR; printed,
 * naming the address with its port) when it cannot.
 */
struct redisContext *redislink_open(const struct cmd *, const char *addr,
    uint64_t timeout_ms, int *code);
/*
 * Sends a command and waits for its reply, which may take long, beside
 * the interrupts: 0 with *reply set (caller frees), -1 on an error (see
 * redislink_failed), -2 when a signal arrived.
 */
struct redisReply;
int redislink_call(struct redisContext *, int argc, const char **argv, struct redisReply **reply);
/* After a command failed: prints why; the exit code (69 lost, 128+N interrupted, 1). */
int redislink_failed(struct redisContext *, const char *addr, const char *what);
/* A result entry's fields (an [id, fields] of a stream read), as common/stream-format.h reads them. */
struct sfmt_result;
void redislink_result(const struct redisReply *fields, struct sfmt_result *r);

/* cmd-stats.c: the table of a stats event's sources (nothing when there are none), after a blank line. */
void stats_sources_print(const json_t *sources, FILE *f);

/* cmd-results.c: following a source's results stream (enqueue --wait too). */
struct results_follow {
	struct redisContext *rc;
	const char *addr;
	const char *stream;             /* the results stream */
	char last[SFMT_STREAM_ID_SIZE + 1]; /* read after this id ("$": new ones only) */
	bool json;                      /* one JSON object per result */
	bool output;                    /* the tasks' output instead of a line */
	char **entries;                 /* the task entries waited for, or none: all */
	int *codes;                     /* their exit codes, -1 until their result */
	size_t nentries, left;
	long long count;                /* without entries: stop after this many (0: never) */
	long long seen;
};
/* Reads and prints until every entry has its result (or count). 0, or an exit code (printed). */
int results_follow_run(struct results_follow *);
/* The exit code for the entries, as wait's for tasks. */
int results_follow_code(const struct results_follow *);
/* Starts rf just before entry's time (a result comes after its entry). */
void results_follow_from_entry(struct results_follow *, const char *entry);

/* link.c: one stream socket carrying newline-delimited JSON. */
struct link;

enum link_result {
	LINK_EVENT = 1,         /* *ev is set */
	LINK_TIMEOUT = 0,       /* the deadline passed */
	LINK_LOST = -1,         /* closed, reset or failed I/O: *cause says which */
	LINK_BAD = -2,          /* the daemon sent a line tpctl cannot read */
	LINK_INTERRUPTED = -3,  /* a signal arrived (interrupt.c) */
	LINK_INPUT = 2,         /* the fd given to link_watch can be read */
};

/*
 * Connects to a Unix socket path (or, when path does not exist and fallback
 * is not NULL, to fallback), or to HOST:PORT when host is set (IPv6 as
 * [::1]:7420), giving up after timeout_ms. Returns NULL with *cause set to a
 * line naming the address (the addresses tried), the error and a hint.
 */
/*
 * For a socket found by the default rule: checks that the daemon that
 * answered on lk is the one expected there (link.c): on the user's own
 * path (not system_socket) a daemon of the user's, in a directory of the
 * user's that no one else may write; on the system socket, root or the
 * owner of its directory, which root owns or no one else may write.
 * Returns 0, or -1 with *cause set to a line saying what is wrong.
 */
int link_check_daemon(struct link *lk, const char *system_socket, char **cause);

struct link *link_open(const char *path, const char *fallback, const char *host,
    uint64_t timeout_ms, char **cause);
void link_close(struct link *);
/* The address, for messages. */
const char *link_address(const struct link *);
/* Queues one request line and sends what the socket takes now. */
int link_send(struct link *, const json_t *req, char **cause);
/*
 * Sends queued requests and returns the next event, waiting at most
 * timeout_ms (-1 = forever). Returns a link_result.
 */
int link_recv(struct link *, json_t **ev, int timeout_ms, char **cause);
/* The raw line of the last event, without its newline. */
const char *link_last_line(const struct link *, size_t *len);
/* Sends everything queued, waiting at most timeout_ms. */
int link_flush(struct link *, int timeout_ms, char **cause);
/*
 * link_recv also waits for fd to be readable (or at its end), returning
 * LINK_INPUT then, when no whole event is there; -1: none.
 */
void link_watch(struct link *, int fd);
/* When bytes last moved either way (tpctl_now_us), or when it was opened. */
uint64_t link_last_io_us(const struct link *);

/*
 * session.c: a connection, the options and the request ids. The session
 * keeps the requests whose first answer the daemon owes at once (every
 * request but wait) and gives up when the daemon has been silent for the
 * answer timeout while one is owed: session_next returns SESSION_NO_ANSWER
 * after printing what it waited for.
 */
struct session_owed {
	int64_t id;             /* INT64_MIN once answered */
	uint64_t sent_us;
	char what[16];          /* the request's op, for the message */
};

struct session {
	struct tpctl *opt;
	struct link *link;
	int64_t next_id;
	bool stdout_gone;       /* --json output met a closed stdout (EPIPE) */
	uint64_t answer_timeout_ms;     /* from --timeout-answer; 0: for ever */
	const char *answer_option;      /* the option to name in the message */
	struct session_owed *owed;      /* in the order sent */
	size_t owed_head, owed_len, owed_cap;
	int64_t probe_id;       /* session_probe's ping, or -1 */
};

/* session_next's result when an owed answer did not come in time (printed). */
#define SESSION_NO_ANSWER (-4)

/* Connects and, with a token file, says hello. Returns 0 or an exit code. */
int session_open(struct session *, struct tpctl *);
void session_close(struct session *);
/*
 * Sends req (taken) with a fresh integer id, unless it has one; its first
 * answer is owed at once. Returns the id, or -1 (printed).
 */
int64_t session_send(struct session *, json_t *req);
/* The same for a wait request, whose first answer may take as long as the task. */
int64_t session_send_wait(struct session *, json_t *req);
/*
 * Sends a ping whose pong is owed at once, before requests whose answers
 * may take as long as a task (waits): the pong shows the daemon alive and
 * reading, and it answers what it answers at once (a wait's no_such_task)
 * as it reads the requests that follow. First, not last: a large done
 * already there would come before a pong sent after it, and a daemon
 * disconnects a client with that much unsent when the next answer is due.
 * The pong is neither returned nor printed; what names the requests in the
 * message if it does not come.
 */
int session_probe(struct session *, const char *what);
/*
 * The next event (printed as received with --json; when stdout is a closed
 * pipe, stdout_gone is set and printing stops), waiting at most timeout_ms
 * (-1: as long as no owed answer is late). Returns a link_result or
 * SESSION_NO_ANSWER; on LINK_LOST, LINK_BAD and SESSION_NO_ANSWER a message
 * has been printed.
 */
int session_next(struct session *, json_t **ev, int timeout_ms);
/*
 * Sends req and waits for the first event answering it. Returns 0 with
 * *reply set, or an exit code (printed).
 */
int session_call(struct session *, json_t *req, json_t **reply);
/*
 * Opens a session, sends req (taken) and closes it. Returns 0 with *reply
 * set to the answer, or an exit code (printed; an error answer is reported
 * as what: message).
 */
int session_once(struct tpctl *, const char *what, json_t *req, json_t **reply);
/* The exit code for a session_next result that is not LINK_EVENT. */
int session_exit_code(int result);

/* pipeline.c: several requests at once, answers matched by id. */
/* Makes the i-th request of a pipeline. */
typedef json_t *(*pipeline_request_fn)(void *arg, size_t i);
/*
 * Takes an event answering the i-th request (the pipeline frees it):
 * returns PIPELINE_SETTLED when that request is done with, PIPELINE_MORE
 * when more is to come for it, or an exit code that ends the pipeline.
 */
typedef int (*pipeline_answer_fn)(void *arg, size_t i, json_t *ev);
#define PIPELINE_SETTLED 0
#define PIPELINE_MORE    (-1)
/*
 * Sends n requests at once (wait requests, after the probe that bounds
 * them, when waits is set; see session_probe) and hands each event for one
 * not yet settled to answer. An error without an id ends the pipeline
 * (reported), and so does an interrupt ("stopped waiting", 128+N). Returns
 * 0 once every request is settled, or an exit code (printed).
 */
int pipeline_run(struct session *, size_t n, bool waits,
    pipeline_request_fn request, pipeline_answer_fn answer, void *arg);

/* feed.c: a task's stdin fed from a descriptor as input requests (run -i, send). */
#define FEED_MAX_PENDING 64
struct feed {
	int fd;                 /* the input; -1 at its end, or once it is of no use */
	const char *name;       /* for messages; NULL: stdin */
	int64_t task;           /* -1 until known: nothing is read before */
	bool send_eof;          /* end the task's stdin when the input ends */
	bool failed;            /* an input was refused (printed): code says how to exit */
	bool closed_said;       /* the task closed its stdin (said once) */
	bool quiet_refusal;     /* a bad_request input is not printed (run: the task ended) */
	bool read_failed;       /* reading the input failed (printed) */
	int code;
	uint64_t total;         /* bytes read */
	size_t inflight;        /* bytes sent, not yet answered */
	int64_t ids[FEED_MAX_PENDING];  /* the unanswered inputs' ids and sizes */
	size_t lens[FEED_MAX_PENDING];
	uint64_t nsent, nanswered;
	char *buf;
};
void feed_init(struct feed *, int fd, bool send_eof);
void feed_free(struct feed *);
/* Whether to watch the input now (a task, room in the window, not at its end). */
bool feed_wants_input(const struct feed *);
/* Input left to send or answers to come. */
bool feed_busy(const struct feed *);
/* The input is readable: sends a chunk (or the eof). 0, or an exit code (printed). */
int feed_read(struct feed *, struct session *);
/* 1 when ev answers one of the inputs (taken into account; a refusal is printed), else 0. */
int feed_event(struct feed *, const json_t *ev);

/*
 * cmd-io.c: prints task id's whole output on s (a wait from the start:
 * the daemon's spool, else what the result kept), stdout to stdout,
 * stderr to stderr, a cut said on stderr, following a running task to its
 * end. 0 with *done set (the caller frees it), or an exit code (printed).
 */
int log_task(struct session *s, long long id, json_t **done);

/* taskopt.c: the task options run, submit and batch share. */
#define TASKOPT_NLIMITS 6               /* --memory ... --file-size */
struct taskopt {
	const char *pool;               /* --pool */
	const char *label;              /* --label */
	uint64_t timeout_ms;            /* --timeout */
	bool timeout_set;               /* and not 0, which means none */
	uint64_t queue_timeout_ms;      /* --queue-timeout */
	bool queue_timeout_set;         /* likewise */
	json_t *env;                    /* --env NAME=VALUE..., or NULL */
	const char *cwd;                /* --cwd */
	uint64_t output_limit;          /* --output-limit */
	bool output_limit_set;
	const char *output_limit_arg;   /* as given */
	bool read_stdin;                /* --stdin: send tpctl's stdin */
	bool stream_stdin;              /* ... as a stream of input requests (run, submit) */
	bool stdin_open;                /* --stdin-open: stdin_stream, left open for send */
	json_t *task;                   /* --task JSON, or NULL */
	json_t *limits;                 /* --memory, --cpus, ...: task.limits, or NULL */
	const char *limit_arg[TASKOPT_NLIMITS]; /* each limit option's value as given */
	long long priority;             /* --priority */
	bool priority_set;
	bool no_wait_for_room;          /* --no-wait-for-room: a full queue refuses at once */
	/* scheduling: the submit's fields (doc/protocol.md), absent unless given */
	uint64_t delay_ms;              /* --delay */
	bool delay_set;
	json_t *after;                  /* --after ID[,ID...]: an array of ids, or NULL */
	bool after_any;                 /* --after-any */
	long long retries;              /* --retries; -1: not given */
	json_t *retry_on;               /* --retry-on STATE[,STATE...]: an array, or NULL */
	uint64_t retry_delay_ms;        /* --retry-delay */
	bool retry_delay_set;
	const char *key;                /* --key */
	const char *on_lost;            /* --on-lost lost|rerun */
};
#define OPT_QUEUE_TIMEOUT 1001
#define OPT_OUTPUT_LIMIT  1002
#define OPT_TASK          1003
#define OPT_LABEL         1004
#define OPT_STDIN_OPEN    1005
#define OPT_PRIORITY      1006
#define OPT_NO_WAIT_ROOM  1007
#define OPT_DELAY         1020
#define OPT_AFTER         1021
#define OPT_AFTER_ANY     1022
#define OPT_RETRIES       1023
#define OPT_RETRY_ON      1024
#define OPT_RETRY_DELAY   1025
#define OPT_KEY           1026
#define OPT_ON_LOST       1027
/* The limit options, in the order of limit_arg (taskopt.c's table). */
#define OPT_LIMIT_FIRST   1100
#define OPT_MEMORY        1100
#define OPT_CPUS          1101
#define OPT_PIDS          1102
#define OPT_OPEN_FILES    1103
#define OPT_CPU_SECONDS   1104
#define OPT_FILE_SIZE     1105
/* Short and long forms of the options every task-submitting command takes. */
#define TASKOPT_SHORTOPTS "p:t:e:C:"
#define TASKOPT_LONGOPTS \
	{ "pool", required_argument, NULL, 'p' }, \
	{ "label", required_argument, NULL, OPT_LABEL }, \
	{ "priority", required_argument, NULL, OPT_PRIORITY }, \
	{ "no-wait-for-room", no_argument, NULL, OPT_NO_WAIT_ROOM }, \
	{ "timeout", required_argument, NULL, 't' }, \
	{ "queue-timeout", required_argument, NULL, OPT_QUEUE_TIMEOUT }, \
	{ "env", required_argument, NULL, 'e' }, \
	{ "cwd", required_argument, NULL, 'C' }, \
	{ "output-limit", required_argument, NULL, OPT_OUTPUT_LIMIT }, \
	{ "memory", required_argument, NULL, OPT_MEMORY }, \
	{ "cpus", required_argument, NULL, OPT_CPUS }, \
	{ "pids", required_argument, NULL, OPT_PIDS }, \
	{ "open-files", required_argument, NULL, OPT_OPEN_FILES }, \
	{ "cpu-seconds", required_argument, NULL, OPT_CPU_SECONDS }, \
	{ "file-size", required_argument, NULL, OPT_FILE_SIZE }, \
	{ "delay", required_argument, NULL, OPT_DELAY }, \
	{ "after", required_argument, NULL, OPT_AFTER }, \
	{ "after-any", no_argument, NULL, OPT_AFTER_ANY }, \
	{ "retries", required_argument, NULL, OPT_RETRIES }, \
	{ "retry-on", required_argument, NULL, OPT_RETRY_ON }, \
	{ "retry-delay", required_argument, NULL, OPT_RETRY_DELAY }, \
	{ "key", required_argument, NULL, OPT_KEY }, \
	{ "on-lost", required_argument, NULL, OPT_ON_LOST }
#define TASKOPT_HELP \
	"  -p, --pool P             submit to pool P (default: the daemon's \"default\")\n" \
	"      --label TEXT         name the task (up to 128 bytes): status and list\n" \
	"                           show it, list --label finds it\n" \
	"      --priority N         start before lower priorities (-1000 to 1000;\n" \
	"                           default 0)\n" \
	"      --no-wait-for-room   a full queue refuses the task at once (exit 75)\n" \
	"                           instead of holding it until there is room\n" \
	"  -t, --timeout DUR        end the task after DUR (state timed_out; 0: never)\n" \
	"      --queue-timeout DUR  give up if it waits in the queue longer (expired;\n" \
	"                           0: never)\n" \
	"  -e, --env NAME=VALUE     add to the command's environment (NAME alone:\n" \
	"                           pass on tpctl's own value); repeatable\n" \
	"  -C, --cwd DIR            run the command in DIR (on the daemon's host)\n" \
	"      --output-limit SIZE  capture at most SIZE bytes per stream (64k, 1M)\n" \
	"      --memory SIZE        limit the task's memory (512M): with cgroups it\n" \
	"                           is killed past it (oom), else allocations fail\n" \
	"      --cpus N             limit it to N cores of CPU time (0.5: half a core)\n" \
	"      --pids N             limit its processes and threads to N at once\n" \
	"      --open-files N       limit each process's open files (at least 3)\n" \
	"      --cpu-seconds N      limit each process's CPU time (90, or 2min)\n" \
	"      --file-size SIZE     limit the size of each file it writes (10M)\n" \
	"      --delay DUR          enter the queue DUR from now (scheduled until then)\n" \
	"      --after ID[,ID...]   wait until those tasks succeeded (waiting); skipped\n" \
	"                           if one does not; repeatable\n" \
	"      --after-any          ... until they ended, in any state\n" \
	"      --retries N          run it again up to N times when it fails (0-100)\n" \
	"      --retry-on STATES    which ends are retried: failed,timed_out,lost\n" \
	"                           (default all three)\n" \
	"      --retry-delay DUR    before the second attempt (default 1s), doubled\n" \
	"                           for each later one, up to 5min\n" \
	"      --key KEY            at most one task of yours with KEY: a submit that\n" \
	"                           repeats it gets the existing task\n" \
	"      --on-lost rerun      run it again if tpd died while it ran (default:\n" \
	"                           it ends lost)\n"
void taskopt_init(struct taskopt *);
void taskopt_free(struct taskopt *);
/* Handles one option: 1 taken, 0 not a task option, -1 bad value (printed). */
int taskopt_option(struct taskopt *, const struct cmd *, int ch, const char *arg);
/* Adds the options' defaults to a task object that lacks them. */
void taskopt_apply(const struct taskopt *, json_t *task);
/* An exec task for argv; NULL with *bad set when an argument is not UTF-8. */
json_t *taskopt_exec_task(char **argv, int argc, char **bad);
/* The task: --task, or exec of argv; 0 or an exit code (printed). */
int taskopt_build(struct taskopt *, const struct cmd *, int argc, char **argv,
    json_t **task);
/*
 * The exec task's directory as tpctl sends it: over the Unix socket its
 * own current directory by default, and a relative --cwd made absolute
 * against it; over TCP a relative --cwd is a usage error and no default is
 * sent. 0 or an exit code (printed).
 */
int taskopt_cwd(const struct taskopt *, const struct cmd *, struct tpctl *, json_t *task);
/* The first scheduling option given (--delay, --after, ...), or NULL. */
const char *taskopt_scheduling(const struct taskopt *);
/* A submit request carrying task (taken). */
json_t *taskopt_submit(const struct taskopt *, json_t *task);
/*
 * Whether the submit waits for room (admission "wait": the default), so
 * that its answer may take long: send it with session_send_wait.
 */
bool taskopt_waits_for_room(const struct taskopt *);
/* After a second without an answer: "waiting for room in pool P" on stderr, once. */
#define TASKOPT_ROOM_NOTICE_MS 1000
void taskopt_room_notice(const struct taskopt *);
/*
 * The limit an error event refuses (a bad_request about task.limits.NAME:
 * beyond the pool's maximum, or not enforceable there) when it came from
 * the options, task holding the option's value: its index in limit_arg,
 * TASKOPT_NLIMITS for --output-limit (task.output_limit), or -1.
 */
int taskopt_refused_limit(const struct taskopt *, const json_t *task, const json_t *ev);
/* Prints that refusal in one line naming the option; returns the exit code. */
int taskopt_report_refused(const struct taskopt *, int limit, const json_t *ev);

/* batch-parse.c: the lines of a batch file. */
enum batch_state { BATCH_PENDING, BATCH_SENT, BATCH_ACCEPTED, BATCH_FINISHED };
struct batch_item {
	size_t line;                    /* its line in the file */
	char *text;                     /* the start of the line, for messages */
	json_t *task;
	enum batch_state state;
	int64_t task_id;                /* once accepted, else -1 */
	/* a line {"task": ..., FIELD: ...}: its own submit fields (they win over options) */
	json_t *fields;                 /* NULL: a plain line */
	char *name;                     /* its "name", that later lines' after may give */
	size_t *deps;                   /* the earlier lines its after names */
	size_t ndeps;
};
/*
 * Splits a command line into words by the rules in tpctl(1). Returns the
 * number of words (0 for a blank or comment line; *words NULL-terminated),
 * or -1 with *cause set.
 */
int batch_split(const char *line, char ***words, const char **cause);
void batch_words_free(char **words);
/*
 * Reads every line of f (named name in messages) as a task, with the
 * options' defaults applied. Prints each bad line as NAME:LINE: why and
 * returns how many there were.
 */
int batch_read(FILE *f, const char *name, const struct taskopt *,
    struct batch_item **items, size_t *n);
void batch_items_free(struct batch_item *, size_t n);

/* jsonline.c: parsing event lines. */
/*
 * json_loadb of one line (JSON_ALLOW_NUL), with its long string values
 * decoded outside jansson's lexer for speed; the same result and errors.
 */
json_t *jsonline_load(const char *line, size_t len, json_error_t *err);

/* event.c: reading events. */
const char *event_name(const json_t *ev);
/* The request id of ev, or -1 when absent or not an integer. */
int64_t event_id(const json_t *ev);
/* The integer field name of obj, or def. */
int64_t event_int(const json_t *obj, const char *name, int64_t def);
/* The number (integer or real) field name of obj, or def. */
double event_num(const json_t *obj, const char *name, double def);
/* The string field name of obj, or def. */
const char *event_str(const json_t *obj, const char *name, const char *def);
/* The error code and message of an error/rejected/done event ("" if none). */
const char *event_error_code(const json_t *ev);
const char *event_error_message(const json_t *ev);
/* The exit code for a daemon error code: 77, 75 or 1. */
int event_exit_for_error(const char *code);
/*
 * Prints "tpctl: what: message (code)"; returns event_exit_for_error. For
 * unauthenticated, unless a token was presented, the message says to give
 * --token-file instead of the daemon's words about its protocol.
 */
int event_report_error(const char *what, const json_t *ev);
/* The session presented a token, and the daemon took it. */
extern bool event_token_presented;
/*
 * The exit code a finished task stands for, as tpctl run exits: 0, the exec
 * task's exit status, 124 timed out, 128+N signal N, 1 otherwise.
 */
int event_task_exit_code(const json_t *done);
/* The usage in a done's result (an exec task's), or NULL. */
json_t *event_usage(const json_t *done);
/*
 * One line describing a done event ("exit status 3", "killed by signal 9
 * (SIGKILL)", "killed: it passed its memory limit of 512 MiB").
 */
char *event_describe_done(const json_t *done);
/*
 * Writes what a finished task returned: an exec result's captured stdout
 * and stderr to fds 1 and 2 (decoding the _base64 forms); another kind's
 * result as one line of JSON on fd 1 (nothing for a null result, as
 * sleep's). Returns 0, or -1 with errno (EPIPE).
 */
int event_write_result_output(const json_t *done);
/* A done whose result was cut by the output limit: says so on stderr. */
void event_say_truncated(const json_t *done);
/* Writes an output event's data to fd 1 or 2. Returns 0, or -1 with errno. */
int event_write_output(const json_t *ev);
/* Writes all of buf to fd, retrying short writes and EINTR. */
int event_write_all(int fd, const void *buf, size_t len);

/* format.c: durations and tables. */
/* Parses "500ms", "5s", "1.5s", "2m", "1h" (a unit is required; "0" is 0). */
int format_parse_duration(const char *s, uint64_t *ms);
/* Formats ms as "0.25ms", "2.5ms", "500ms", "2.1s", "42s", "3m", "3m12s", "1h5m", "2d3h". */
char *format_duration(double ms, char *buf, size_t len);
#define FORMAT_DURATION_LEN 32
/* Parses a size: "4096", "64k", "1M", "1G". */
int format_parse_size(const char *s, uint64_t *out);
/* Formats bytes for people: "900 B", "512 KiB", "12.3 MiB", "1.5 GiB". */
char *format_bytes(uint64_t bytes, char *buf, size_t len);

/* cmd-stats.c: one line saying how the daemon's journal is (stats' "journal"), for stats and top. */
void stats_journal_line(const json_t *stats, FILE *f);
#define FORMAT_BYTES_LEN 32
/*
 * What an exec task used (its result's usage), in one line: "cpu 0.25s
 * user, 0.01s system, peak 12.3 MiB"; NULL when usage is not one.
 */
char *format_usage(const json_t *usage, char *buf, size_t len);
#define FORMAT_USAGE_LEN 96
/* Parses a decimal integer in [min, max]. */
int format_parse_int(const char *s, long long min, long long max, long long *out);
/*
 * A field's value as table text (allocated): a duration for a *_ms
 * number, a string as it is, "-" for null, JSON for the rest.
 */
char *format_cell(const char *key, const json_t *v);
/*
 * A task's command (list, status) as table text (allocated): its control
 * characters (a newline in an argument, an escape) shown as '?', so that
 * a row stays one line and the terminal takes nothing from it.
 */
char *format_command(const char *command);

/*
 * s made safe for a terminal: a control character (C0, DEL, C1: ESC, BEL,
 * CSI, a newline...) as an escape, "\x1b" or "\u009b", the rest as it
 * is. For every string of the daemon's (or of a task's metadata) that
 * tpctl shows in a table or a message; never for a task's own output,
 * nor --json. Returns s itself when nothing needed escaping, else a copy
 * valid until FORMAT_SAFE_SLOTS more calls; NULL gives NULL.
 */
#define FORMAT_SAFE_SLOTS 8
const char *format_safe(const char *s);

/* An aligned text table: columns left ('l') or right ('r') aligned. */
struct table;
struct table *table_new(const char *align, const char *const *headers);
/* Adds a row of as many strings as columns (copied, made safe: format_safe). */
void table_add(struct table *, const char *const *cells);
/* Prints the table, columns padded to their display width (format_width). */
void table_print(const struct table *, FILE *f);
/* The terminal columns UTF-8 text s takes (a byte that is not UTF-8: one). */
size_t format_width(const char *s);
void table_free(struct table *);

/* progress.c: a live progress line on a terminal, cut to its width. */
struct progress;
/* A progress line on stderr, if stderr is a terminal; NULL otherwise. */
struct progress *progress_new(size_t total);
enum progress_end { PROGRESS_SUCCEEDED, PROGRESS_FAILED, PROGRESS_CANCELLED };
/* Counts one finished task and redraws, at most every 100ms. */
void progress_done(struct progress *, enum progress_end);
/* Erases the line, before other output to the terminal. */
void progress_clear(struct progress *);
/* Redraws now. */
void progress_draw(struct progress *);
void progress_free(struct progress *);
/* The progress line currently shown, cleared by tpctl_warnx (may be NULL). */
extern struct progress *progress_current;

/* interrupt.c: SIGINT (and SIGTERM, SIGHUP) as events in the poll loop. */
/* Catches the signals; each one wakes link_recv (LINK_INTERRUPTED). */
int interrupt_install(void);
/* The fd link_recv polls, or -1. */
int interrupt_fd(void);
/* Takes the signals that arrived since the last call; returns how many. */
int interrupt_take(void);
/* All signals so far, and the last one's number. */
int interrupt_count(void);
int interrupt_last_signal(void);

/* time */
uint64_t tpctl_now_us(void);

#endif
