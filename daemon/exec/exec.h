/*
 * exec.h: the exec task kind (doc/exec.md): settings from the daemon's
 * configuration, and what the kind's files share.
 *
 * The daemon calls exec_configure at start and on every reload (loop
 * thread); exec_configure(NULL) at exit drops the settings. Each task takes
 * a reference to the settings current when it is parsed and keeps them to
 * its end, so a reload never changes a task that is already accepted and
 * never races with a running worker.
 */
#ifndef TPD_EXEC_H
#define TPD_EXEC_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "conf/conf.h"
#include "task/mailbox.h"
#include "task/task.h"

/* Loop thread: takes copies of c's [exec] settings; NULL drops them. */
void exec_configure(const struct conf *c);

/* Immutable once published; freed with the last reference. */
struct exec_settings {
	atomic_uint refs;
	size_t stdin_buffer;            /* a streamed stdin's bytes held per task */
	size_t output_limit;            /* default per-stream capture */
	size_t output_limit_max;        /* most a request may ask for */
	uint64_t kill_grace_ms;         /* SIGTERM -> SIGKILL */
	char **env;                     /* base environment, "NAME=value", NULL-terminated */
};

/* The variables run_as sets from the passwd entry, unless the request's env did. */
#define EXEC_ENV_HOME 0x1
#define EXEC_ENV_USER 0x2
#define EXEC_ENV_LOGNAME 0x4
#define EXEC_ENV_SHELL 0x8

struct cgroup_info;

/*
 * Which limits containment ci can enforce (task-exec.c): NULL when limit l
 * can be, else why not (for bad_request and configuration errors).
 */
const char *exec_limit_unenforceable(const struct cgroup_info *ci, enum conf_limit l);

/*
 * What containment ci can enforce of the pools' limit_* defaults, for
 * conf.c's check of them (conf_set_enforce): why each limit cannot be, and
 * a note on the containment when it is not cgroup.
 */
void exec_enforce(const struct cgroup_info *ci, struct conf_enforce *out);

/*
 * A streamed stdin (stdin_stream: true; exec-input.c): the bytes input
 * requests brought that the program has not read yet. The loop thread
 * appends (exec_input_add), the worker writes them to the pipe
 * (exec_input_write). Past limit bytes the connections that sent them are
 * held (not read) until the worker has taken the buffer down to half of
 * it: a mail (mailbox.h) hands their release to the loop thread. lock is a
 * leaf: nothing else is taken under it.
 */
#define EXEC_INPUT_HOLDERS 4
struct exec_input {
	pthread_mutex_t lock;
	unsigned char *buf;
	size_t off, len, cap;           /* bytes [off, len) wait */
	size_t limit;                   /* stdin_buffer */
	bool eof;                       /* an input with eof came: no more */
	bool over;                      /* the run ended: no more */
	bool program_closed;            /* the program closed its stdin: input is dropped */
	uint64_t held[EXEC_INPUT_HOLDERS]; /* connections not read meanwhile; 0: free */
	bool mail_posted;
	struct mail mail;
};

/* One exec task's inputs (loop thread, parse) and wake-up fd (run/cancel). */
struct exec_task {
	struct exec_settings *settings; /* a reference */
	char **argv;                    /* NULL-terminated */
	char **env;                     /* the child's whole environment, NULL-terminated */
	char *cwd;                      /* NULL: the daemon's */
	unsigned char *stdin_data;      /* NULL: stdin is /dev/null */
	size_t stdin_len;
	bool stdin_stream;              /* stdin comes by input requests (in) */
	struct exec_input in;
	size_t output_limit;            /* per stream */
	uint64_t limits[CONF_NLIMITS];  /* in force; CONF_NO_LIMIT: none */

	/* run_as (task-exec.c): the user is looked up on the worker, at run */
	enum conf_run_as run_as;
	uid_t uid;                      /* CONF_RUN_AS_CALLER: the peer's */
	gid_t gid;
	char *user;                     /* CONF_RUN_AS_USER */
	unsigned env_given;             /* EXEC_ENV_* the request's env set or removed */

	/*
	 * The eventfd the cancel hook writes to, -1 outside run. wake_lock
	 * keeps the hook (under the pool lock) from writing to an fd that run
	 * is closing. Lock order: pool lock, then wake_lock; run never calls
	 * into the pool while holding it.
	 */
	pthread_mutex_t wake_lock;
	int wake_fd;
	/*
	 * The run while its output is read (exec-run.c), else NULL; under
	 * wake_lock, which also covers reading its captures and deciding to
	 * stream what was read (exec_run_kept, for a follower from the start).
	 */
	struct exec_run *run;
	bool run_over;                  /* under wake_lock: run is NULL for good */
};

/* Worker thread: the kind's run (exec-run.c). */
enum pool_state exec_run(struct task *t);

/*
 * Loop thread, under x->wake_lock: appends to events the output run has
 * kept so far, up to where the events still on their way to the loop
 * begin (t->streamed): those reach a new follower themselves.
 */
struct exec_run;
void exec_run_kept(struct exec_run *run, json_t *events);
/* Under x->wake_lock: the bytes run has written to its spool file, and what that lacks. */
uint64_t exec_run_spooled(struct exec_run *run, struct task_spool_gap *gap);

/*
 * exec-input.c. Loop thread: the kind's input hook (task.h). Any thread:
 * init and destroy. Worker: whether the pipe has bytes (or its end) to take,
 * writing them, and the end of the run (no more input, holders released).
 */
void exec_input_init(struct exec_input *in, size_t limit);
void exec_input_destroy(struct exec_input *in);
int exec_input_add(struct task *t, const void *data, size_t len, bool eof, uint64_t conn,
    size_t *buffered, bool *dropped, char **cause);
bool exec_input_ready(struct exec_input *in);
/* Writes what the pipe takes; closes *fd at the end of the input or when the program closed it. */
void exec_input_write(struct exec_input *in, int *fd, uint64_t task);
void exec_input_end(struct exec_input *in);

#endif
