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
#include "task/task.h"

/* Loop thread: takes copies of c's [exec] settings; NULL drops them. */
void exec_configure(const struct conf *c);

/* Immutable once published; freed with the last reference. */
struct exec_settings {
	atomic_uint refs;
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

/* One exec task's inputs (loop thread, parse) and wake-up fd (run/cancel). */
struct exec_task {
	struct exec_settings *settings; /* a reference */
	char **argv;                    /* NULL-terminated */
	char **env;                     /* the child's whole environment, NULL-terminated */
	char *cwd;                      /* NULL: the daemon's */
	unsigned char *stdin_data;      /* NULL: stdin is /dev/null */
	size_t stdin_len;
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

#endif
