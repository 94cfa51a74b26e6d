/*
 * exec-spawn.h: starting the process of an exec task with posix_spawn.
 *
 * The child gets: its own session and so its own process group (pgid = its
 * pid), an empty signal mask, every catchable signal at its default
 * disposition (but for glibc's two internal signals, 32 and 33, which
 * glibc's posix_spawn always leaves ignored and which programs of glibc set
 * up again themselves), only fds 0-2 open (stdin from a pipe or /dev/null, stdout and
 * stderr to pipes), the environment it is given and nothing of the daemon's,
 * and the working directory it is given.
 *
 * The program is looked up by spawn itself, not by posix_spawnp, because
 * posix_spawnp searches the daemon's PATH: here argv[0] without a '/' is
 * searched in the PATH of the child's environment (or "/usr/bin:/bin" when it
 * has none), and relative PATH entries, like an argv[0] with a '/', are taken
 * relative to the child's working directory, as a shell that did "cd CWD"
 * first would.
 *
 * Safe to call from several worker threads at once: every fd made here is
 * close-on-exec, and the child closes every fd above 2 besides.
 */
#ifndef TPD_SPAWN_H
#define TPD_SPAWN_H

#include <stdbool.h>
#include <sys/types.h>

struct spawn_request {
	char *const *argv;      /* NULL-terminated; argv[0] names the program */
	char *const *envp;      /* the child's whole environment */
	const char *cwd;        /* NULL: the daemon's working directory */
	bool pipe_stdin;        /* true: stdin from a pipe; false: /dev/null */
};

struct spawn_child {
	pid_t pid;              /* also the child's process group id */
	int pidfd;              /* readable once the child has exited */
	int stdin_fd;           /* write end of stdin, or -1 */
	int stdout_fd;          /* read ends, non-blocking */
	int stderr_fd;
};

/*
 * Starts the child. Returns 0 with *child filled, or -1 with *cause set to a
 * message a person can act on ("no such program: foo", "cannot chdir to
 * /nope: No such file or directory", "cannot execute ./x: Permission
 * denied", or the system call that failed); then no child exists.
 */
int spawn_start(const struct spawn_request *req, struct spawn_child *child,
    char **cause);

/* Closes whatever fds of child are still open (-1 marks closed ones). Does not reap. */
void spawn_close(struct spawn_child *child);

/* Closes *fd if open and sets it to -1. */
void spawn_close_fd(int *fd);

#endif
