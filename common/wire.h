/*
 * wire.h: what tpd and tpctl share of the wire (doc/protocol.md): the names
 * of ops, events, fields, states and error codes, the framing, and the rule
 * that finds the default socket. One place, so the two programs cannot drift
 * apart.
 */
#ifndef TPD_WIRE_H
#define TPD_WIRE_H

#include <stddef.h>

#define WIRE_PROTOCOL_VERSION 1
#define WIRE_SERVER_NAME "tpd"
#define WIRE_DELIMITER '\n'          /* one JSON object per line */
#define WIRE_MAX_DEPTH 64            /* deeper nesting is bad_request */
#define WIRE_DEFAULT_MAX_REQUEST (1024 * 1024)
#define WIRE_DEFAULT_MAX_OUTPUT (8 * 1024 * 1024)
#define WIRE_DEFAULT_POOL "default"

/* ops */
#define OP_HELLO    "hello"
#define OP_PING     "ping"
#define OP_SUBMIT   "submit"
#define OP_WAIT     "wait"
#define OP_STATUS   "status"
#define OP_CANCEL   "cancel"
#define OP_STATS    "stats"
#define OP_RESIZE   "resize"
#define OP_SHUTDOWN "shutdown"
#define OP_LIST     "list"
#define OP_INPUT    "input"    /* feed a stdin_stream task's stdin */
#define OP_PAUSE    "pause"
#define OP_RESUME   "resume"

/* events */
#define EV_HELLO    "hello"
#define EV_PONG     "pong"
#define EV_ACCEPTED "accepted"
#define EV_STARTED  "started"
#define EV_OUTPUT   "output"
#define EV_DONE     "done"
#define EV_REJECTED "rejected"
#define EV_ERROR    "error"
#define EV_OK       "ok"
#define EV_STATUS   "status"
#define EV_STATS    "stats"
#define EV_LIST     "list"
#define EV_CUT      "cut"      /* a replay from the spool is missing bytes */
#define EV_RETRYING "retrying"      /* an attempt ended and another is scheduled */

/* terminal states in done, and the states status reports before them */
#define STATE_QUEUED    "queued"
#define STATE_RUNNING   "running"
#define STATE_SUCCEEDED "succeeded"
#define STATE_FAILED    "failed"
#define STATE_TIMED_OUT "timed_out"
#define STATE_CANCELLED "cancelled"
#define STATE_EXPIRED   "expired"
#define STATE_LOST      "lost"      /* running when the daemon died (journal replay) */
#define STATE_SCHEDULED "scheduled" /* accepted, due later (delay_ms, a retry, or no room yet) */
#define STATE_WAITING   "waiting"   /* accepted, waiting for its dependencies (after) */
#define STATE_SKIPPED   "skipped"   /* terminal: a dependency did not succeed */

/* error codes */
#define ERR_BAD_JSON          "bad_json"
#define ERR_BAD_REQUEST       "bad_request"
#define ERR_UNKNOWN_OP        "unknown_op"
#define ERR_REQUEST_TOO_LARGE "request_too_large"
#define ERR_UNAUTHENTICATED   "unauthenticated"
#define ERR_FORBIDDEN         "forbidden"
#define ERR_NO_SUCH_TASK      "no_such_task"
#define ERR_NO_SUCH_POOL      "no_such_pool"
#define ERR_QUEUE_FULL        "queue_full"
#define ERR_QUOTA             "quota"                /* past a per-owner limit of the pool */
#define ERR_DISPLACED         "displaced"            /* expired: drop_oldest made room */
#define ERR_CLOSED            "closed"
#define ERR_TASK_FAILED       "task_failed"
#define ERR_EXIT_STATUS       "exit_status"
#define ERR_SIGNAL            "signal"
#define ERR_SPAWN_FAILED      "spawn_failed"
#define ERR_TIMED_OUT         "timed_out"
#define ERR_CANCELLED         "cancelled"
#define ERR_EXPIRED           "expired"
#define ERR_INTERNAL          "internal"
#define ERR_OOM               "oom"                  /* an exec task passed its memory limit */
#define ERR_LOST              "lost"                 /* the state lost */
#define ERR_STORAGE           "storage"              /* the journal cannot be written */
#define ERR_TOO_MANY_CONNECTIONS "too_many_connections" /* a client past max_connections */
#define ERR_FOLLOW_DROPPED    "follow_dropped"       /* a follower read too slowly: its follow ends */
#define ERR_DEPENDENCY_FAILED "dependency_failed"    /* the state skipped */

/* roles in hello */
#define ROLE_ADMIN  "admin"
#define ROLE_SUBMIT "submit"

/* The system daemon's socket: tpd.socket's, and tpd's own as root. */
#define WIRE_SYSTEM_SOCKET "/run/tpd/tpd.sock"

/*
 * The default Unix socket: $RUNTIME_DIRECTORY/tpd.sock under systemd, else
 * WIRE_SYSTEM_SOCKET as root, else $XDG_RUNTIME_DIR/tpd.sock, else
 * /tmp/tpd-$UID/tpd.sock. tpd listens there; tpctl connects there, and to
 * WIRE_SYSTEM_SOCKET when that path does not exist. Writes into buf;
 * returns buf, or NULL when the path does not fit.
 */
char *wire_default_socket_path(char *buf, size_t len);

/*
 * Fields of requests, events and tasks, and the task kinds.
 * An event names itself in FIELD_EVENT.
 */
#define FIELD_OP               "op"
#define FIELD_ID               "id"
#define FIELD_EVENT            "event"
#define FIELD_TOKEN            "token"
#define FIELD_CLIENT           "client"
#define FIELD_SERVER           "server"
#define FIELD_VERSION          "version"
#define FIELD_PROTOCOL         "protocol"
#define FIELD_ROLE             "role"
#define FIELD_TASK             "task"
#define FIELD_POOL             "pool"
#define FIELD_OWNER            "owner"
#define FIELD_LABEL            "label"
#define FIELD_TASKS            "tasks"
#define FIELD_MORE             "more"
#define FIELD_WARNINGS         "warnings"
#define FIELD_BEFORE           "before"
#define FIELD_FROM             "from"
#define FROM_START             "start"
#define FIELD_RATE_PER_S       "rate_per_s"
#define FIELD_QUEUED_P50_MS    "queued_p50_ms"
#define FIELD_QUEUED_P99_MS    "queued_p99_ms"
#define FIELD_RUN_P50_MS       "run_p50_ms"
#define FIELD_RUN_P99_MS       "run_p99_ms"
#define WIRE_MAX_LABEL         128     /* submit's label, bytes */
#define WIRE_LIST_DEFAULT      100     /* list's limit when absent */
#define WIRE_LIST_MAX          1000    /* list's limit at most */
#define FIELD_DETACH           "detach"
#define FIELD_STREAM           "stream"
#define FIELD_QUEUE_TIMEOUT_MS "queue_timeout_ms"
#define FIELD_ON_LOST          "on_lost"        /* submit: "lost" (default) or "rerun" */
#define FIELD_ATTEMPT          "attempt"        /* started, done (journal on): 1 for the first run */
#define FIELD_JOURNAL          "journal"        /* stats */
#define FIELD_SPOOL            "spool"          /* stats: exec output files (output_spool) */
#define FIELD_LOOP             "loop"           /* stats: the loop's pauses */
#define ON_LOST_LOST           "lost"
#define ON_LOST_RERUN          "rerun"
#define FIELD_QUEUED           "queued"
#define FIELD_STATE            "state"
#define FIELD_QUEUED_MS        "queued_ms"
#define FIELD_RUN_MS           "run_ms"
#define FIELD_RESULT           "result"
#define FIELD_ERROR            "error"
#define FIELD_CODE             "code"
#define FIELD_MESSAGE          "message"
#define FIELD_DATA             "data"
#define FIELD_DATA_BASE64      "data_base64"
#define FIELD_SIZE             "size"
#define FIELD_TARGET           "target"
#define FIELD_WORKERS          "workers"
#define FIELD_MODE             "mode"
#define FIELD_PID              "pid"            /* started (exec) */
/* scheduling in a pool: submit, resize, pause/resume, stats (SPEC section 12) */
#define FIELD_PRIORITY         "priority"       /* submit, status, list: -1000..1000 */
#define WIRE_PRIORITY_MIN      (-1000)
#define WIRE_PRIORITY_MAX      1000
#define FIELD_ADMISSION        "admission"      /* submit: reject or wait; stats */
#define FIELD_ADMISSION_TIMEOUT_MS "admission_timeout_ms"
#define ADMISSION_REJECT       "reject"
#define ADMISSION_WAIT         "wait"
#define ADMISSION_DROP_OLDEST  "drop_oldest"
#define FIELD_MIN              "min"            /* resize */
#define FIELD_MAX              "max"
#define FIELD_MIN_WORKERS      "min_workers"    /* resize's ok, stats */
#define FIELD_NOTE             "note"           /* resize's ok: how long the size lasts */
#define FIELD_MAX_WORKERS      "max_workers"
#define FIELD_KEEPALIVE_MS     "keepalive_ms"
#define FIELD_HELD             "held"           /* stats: submits held now */
#define FIELD_DISPLACED        "displaced"      /* stats: a counter */
#define FIELD_REJECTED_QUOTA   "rejected_quota" /* stats: a counter */
#define FIELD_FAIR             "fair"           /* stats: "owner" or "none" */
#define FIELD_MAX_QUEUED_PER_OWNER "max_queued_per_owner"
#define FIELD_MAX_RUNNING_PER_OWNER "max_running_per_owner"
#define POOL_STATE_OPEN        "open"           /* stats pool state, pause/resume's ok */
#define POOL_STATE_PAUSED      "paused"
#define POOL_STATE_CLOSED      "closed"
#define FAIR_OWNER             "owner"
#define FAIR_NONE              "none"

/* scheduling a task: submit's fields, and what status, list and accepted say of them */
#define FIELD_DELAY_MS         "delay_ms"       /* submit: enter the queue this much later */
#define FIELD_AFTER            "after"          /* submit: ids it waits for; status: those left */
#define FIELD_AFTER_MODE       "after_mode"     /* submit: "ok" (default) or "any" */
#define AFTER_MODE_OK          "ok"
#define AFTER_MODE_ANY         "any"
#define FIELD_RETRIES          "retries"        /* submit: attempts after the first */
#define FIELD_RETRY_ON         "retry_on"       /* submit: the end states retried */
#define FIELD_RETRY_DELAY_MS   "retry_delay_ms"
#define FIELD_RETRY_DELAY_MAX_MS "retry_delay_max_ms"
#define FIELD_KEY              "key"            /* submit: the owner's idempotency key */
#define FIELD_DUPLICATE        "duplicate"      /* accepted: the key named an existing task */
#define FIELD_SPEC             "spec"           /* status: the task object as submitted */
#define FIELD_SUBMIT           "submit"         /* status: the other submit fields */
#define FIELD_COMMAND          "command"        /* list: what the task runs */
#define FIELD_DUE_MS           "due_ms"         /* status: a scheduled task is due in */
#define FIELD_RETRIED          "retried"        /* stats pool: attempts scheduled again */
#define FIELD_SCHEDULED        "scheduled"      /* stats pool: tasks scheduled now */
#define FIELD_WAITING          "waiting"        /* stats pool: tasks waiting now */
#define FIELD_SKIPPED          "skipped"        /* stats pool: tasks skipped */
#define WIRE_MAX_DELAY_MS      31536000000ull   /* delay_ms at most: a year */
#define WIRE_MAX_AFTER         64               /* after: ids at most */
#define WIRE_MAX_RETRIES       100
#define WIRE_MAX_KEY           128              /* key: bytes at most */
#define WIRE_COMMAND_MAX       200              /* list's command: bytes at most */

/* stats, and each of its pools */
#define FIELD_POOLS            "pools"
#define FIELD_SOURCES          "sources"
#define FIELD_CONNECTIONS      "connections"
#define FIELD_UPTIME_MS        "uptime_ms"
#define FIELD_TASKS_OUTSTANDING "tasks_outstanding"
#define FIELD_TASKS_RETAINED   "tasks_retained"
#define FIELD_TASKS_RETAINED_BYTES "tasks_retained_bytes"
#define FIELD_RESULTS_FORGOTTEN "results_forgotten"
#define FIELD_CONTAINMENT      "containment"
#define FIELD_PHASE            "phase"
#define FIELD_TCP_AUTH         "tcp_auth"
#define FIELD_NAME             "name"
#define FIELD_BUSY             "busy"
#define FIELD_IDLE             "idle"
#define FIELD_CAPACITY         "capacity"
#define FIELD_LIMIT            "limit"
#define FIELD_ACCEPTED         "accepted"
#define FIELD_REJECTED         "rejected"
#define FIELD_REJECTED_FULL    "rejected_full"
#define FIELD_SUCCEEDED        "succeeded"
#define FIELD_FAILED           "failed"
#define FIELD_TIMED_OUT        "timed_out"
#define FIELD_CANCELLED        "cancelled"
#define FIELD_EXPIRED          "expired"
#define FIELD_LOST             "lost"
#define FIELD_REJECTED_STORAGE "rejected_storage"
#define FIELD_OLDEST_QUEUED_MS "oldest_queued_ms"
#define FIELD_CLOSED           "closed"
#define FIELD_REMOVED          "removed"

/* stats.phase */
#define PHASE_RUNNING  "running"
#define PHASE_DRAINING "draining"
#define PHASE_STOPPING "stopping"

/* stats.tcp_auth: the [daemon] tcp_auth in force */
#define TCP_AUTH_TOKEN "token"
#define TCP_AUTH_NONE  "none"

/* stats.containment (doc/exec.md) */
#define CONTAINMENT_CGROUP  "cgroup"
#define CONTAINMENT_PROCESS "process"

/* task fields (submit.task) */
#define FIELD_KIND             "kind"
#define FIELD_TIMEOUT_MS       "timeout_ms"
#define FIELD_ARGV             "argv"
#define FIELD_ENV              "env"
#define FIELD_CWD              "cwd"
#define FIELD_STDIN            "stdin"
#define FIELD_STDIN_BASE64     "stdin_base64"   /* binary stdin, instead of stdin */
#define FIELD_STDIN_STREAM     "stdin_stream"   /* stdin comes by input requests */
#define FIELD_EOF              "eof"            /* input: the end of the stdin */
#define FIELD_BUFFERED         "buffered"       /* input's ok: bytes waiting for the program */
#define FIELD_KEPT             "kept"           /* cut: bytes replayed */
#define FIELD_SEEN             "seen"           /* cut: bytes the task wrote */
#define FIELD_STDIN_CLOSED     "stdin_closed"   /* input's ok: the program closed its stdin */
#define FIELD_OUTPUT_LIMIT     "output_limit"
#define FIELD_VALUE            "value"
#define FIELD_MS               "ms"

/* exec results, and the streams of output events */
#define FIELD_EXIT_CODE        "exit_code"
#define FIELD_SIGNAL           "signal"
#define FIELD_SIGNAL_NAME      "signal_name"    /* "SIGKILL", or null */
#define FIELD_STDOUT           "stdout"
#define FIELD_STDERR           "stderr"
#define FIELD_STDOUT_BASE64    "stdout_base64"
#define FIELD_STDERR_BASE64    "stderr_base64"
#define FIELD_TRUNCATED        "truncated"
#define STREAM_STDOUT          "stdout"
#define STREAM_STDERR          "stderr"
#define FIELD_USAGE            "usage"          /* what an exec task used */
#define FIELD_USER_MS          "user_ms"
#define FIELD_SYSTEM_MS        "system_ms"
#define FIELD_MAX_RSS_BYTES    "max_rss_bytes"
#define FIELD_MAX_RSS_UPPER_BOUND "max_rss_upper_bound" /* max_rss_bytes counts the daemon's pages too */

/* an exec task's limits: the fields of task.limits (doc/exec.md) */
#define FIELD_LIMITS           "limits"
#define LIMIT_MEMORY_BYTES     "memory_bytes"
#define LIMIT_CPU_CORES        "cpu_cores"      /* a number: 0.5 is half a core */
#define LIMIT_PIDS             "pids"
#define LIMIT_OPEN_FILES       "open_files"
#define LIMIT_CPU_SECONDS      "cpu_seconds"
#define LIMIT_FILE_BYTES       "file_bytes"

/* task kinds */
#define KIND_EXEC  "exec"
#define KIND_ECHO  "echo"
#define KIND_SLEEP "sleep"
#define KIND_SPIN  "spin"
#define KIND_FAIL  "fail"

/* shutdown modes */
#define MODE_DRAIN "drain"
#define MODE_NOW   "now"

#endif
