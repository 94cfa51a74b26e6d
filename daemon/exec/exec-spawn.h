/*
 * exec-spawn.h: starting the process of an exec task.
 *
 * The child gets: its own session and so its own process group (pgid = its
 * pid), an empty signal mask, every signal at its default disposition, only
 * fds 0-2 open (stdin from a pipe or /dev/null, stdout and stderr to pipes),
 * the environment it is given and nothing of the daemon's, and the working
 * directory it is given. Optionally: another user's credentials (the
 * supplementary groups, then the gid, then the uid, each checked), resource
 * limits (setrlimit), no ambient capabilities, SIGKILL when the spawning thread dies
 * (PR_SET_PDEATHSIG, set after the credentials, which would clear it), and
 * a cgroup it starts in. (The death signal fires when the spawning
 * *thread* exits: that is the worker running the task, which reaps the
 * child before it does anything else, so in practice only the daemon's
 * death fires it.)
 *
 * The program is looked up here, in the parent, not by execvp: argv[0]
 * without a '/' is searched in the PATH of the child's environment (or
 * "/usr/bin:/bin" when it has none), and relative PATH entries, like an
 * argv[0] with a '/', are taken relative to the child's working directory,
 * as a shell that did "cd CWD" first would.
 *
 * How: clone3 with CLONE_VM | CLONE_VFORK (the child borrows the parent's
 * memory on a stack of its own, and the calling thread sleeps until it has
 * called execve or died), CLONE_PIDFD, and CLONE_INTO_CGROUP when a cgroup
 * is given, so the child is born in its cgroup and never has to be moved
 * (moving a process between cgroups is slow). glibc's posix_spawn has none
 * of the cgroup, the credentials or the death signal. The child makes raw
 * system calls only (no locks, no allocation, nothing a sanitizer
 * intercepts), and tells what failed through a close-on-exec pipe. It is
 * the child of the worker thread that spawned it, which alone reaps it
 * (the orphans tpd adopts are the main thread's: pgroup.h).
 *
 * Safe to call from several worker threads at once: every fd made here is
 * close-on-exec, and the child closes every fd above 2 besides.
 */
#ifndef TPD_SPAWN_H
#define TPD_SPAWN_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/resource.h>
#include <sys/types.h>

#define SPAWN_MAX_RLIMITS 4

/* Who the child runs as, when not as the daemon. */
struct spawn_creds {
	const char *name;       /* for messages: a user name or "uid N" */
	uid_t uid;
	gid_t gid;
	const gid_t *groups;    /* supplementary groups (setgroups) */
	size_t ngroups;
};

struct spawn_rlimit {
	int resource;           /* RLIMIT_* */
	const char *what;       /* for messages: "open_files", ... */
	struct rlimit value;
};

struct spawn_request {
	char *const *argv;      /* NULL-terminated; argv[0] names the program */
	char *const *envp;      /* the child's whole environment */
	const char *cwd;        /* NULL: the daemon's working directory */
	bool cwd_or_root;       /* cwd was a default (a home): fall back to "/" */
	bool pipe_stdin;        /* true: stdin from a pipe; false: /dev/null */
	/*
	 * true: the caller keeps its copies of the write ends of stdout and
	 * stderr (child->stdout_w, stderr_w) until it closes them, so the read
	 * ends see no end of file before that: the child's exit is not seen
	 * twice (a hang-up of its pipes, then its pidfd), and the caller reads
	 * what is left once it has closed them.
	 */
	bool hold_outputs;
	const struct spawn_creds *creds;        /* NULL: the daemon's own */
	struct spawn_rlimit rlimits[SPAWN_MAX_RLIMITS];
	size_t nrlimits;
	int cgroup_fd;          /* a cgroup directory to start in, or -1 */
	/*
	 * 0: none; else the read end of a start gate (task.h, above 2): the child,
	 * ready for execve, reads one byte from it first and goes on only
	 * with SPAWN_GATE_GO; another byte, or end of file, ends it without
	 * execve (spawn_start then fails, *gate_stopped set).
	 */
	int gate_fd;
};

#define SPAWN_GATE_GO 1

struct spawn_child {
	pid_t pid;              /* also the child's process group id */
	int pidfd;              /* readable once the child has exited */
	int stdin_fd;           /* write end of stdin, or -1 */
	int stdout_fd;          /* read ends, non-blocking */
	int stderr_fd;
	int stdout_w;           /* with hold_outputs, our write ends; else -1 */
	int stderr_w;
};

/*
 * Starts the child (the calling thread waits until it has called execve,
 * its gate's wait included). Returns 0 with *child filled, or -1 with *cause set to a
 * message a person can act on ("no such program: foo", "cannot chdir to
 * /nope: No such file or directory", "cannot execute ./x: Permission
 * denied", "cannot run as nobody: setresuid: Operation not permitted", or
 * the system call that failed); then no child exists. *gate_stopped: the
 * gate said no (or its writers are gone), and nothing ran.
 */
int spawn_start(const struct spawn_request *req, struct spawn_child *child,
    char **cause, bool *gate_stopped);

/*
 * Reaps the child (wait4, retried on EINTR): its wait status
 * and resource usage (which covers the descendants it waited for).
 * Returns 0, or -1 with errno set.
 */
int spawn_reap(pid_t pid, int *status, struct rusage *ru);

/*
 * false: start children with a fork-like clone from now on, as when clone3
 * is refused (for the unit test of that path). Call before any spawn.
 */
void spawn_use_clone3(bool use);

/*
 * A start gate's pipe: both ends close-on-exec and above 2, the write end
 * (fds[1]) non-blocking. Returns 0, or -1 with errno set.
 */
int spawn_gate_pipe(int fds[2]);

/* Closes whatever fds of child are still open (-1 marks closed ones). Does not reap. */
void spawn_close(struct spawn_child *child);

/* Closes *fd if open and sets it to -1. */
void spawn_close_fd(int *fd);

/*
 * Takes back a SIGPIPE left pending on the calling thread by a write to a pipe whose
 * reader is gone (EPIPE). The thread must have SIGPIPE blocked (exec_run does), else
 * the signal would already have been delivered.
 */
void spawn_sigpipe_take(void);

#endif
