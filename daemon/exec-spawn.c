/* exec-spawn.c: starting an exec task's process with posix_spawn (see exec-spawn.h). */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/pidfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "exec-spawn.h"
#include "log.h"

/* PATH when the child's environment has none (what execvp uses). */
#define SPAWN_DEFAULT_PATH "/usr/bin:/bin"

void
spawn_close_fd(int *fd)
{
	if (*fd != -1) {
		close(*fd);
		*fd = -1;
	}
}

void
spawn_close(struct spawn_child *child)
{
	spawn_close_fd(&child->pidfd);
	spawn_close_fd(&child->stdin_fd);
	spawn_close_fd(&child->stdout_fd);
	spawn_close_fd(&child->stderr_fd);
}

/*
 * Moves fd above 2, so that the child's dup2 onto 0-2 can never overwrite
 * another of our pipe ends (only possible when the daemon runs with 0-2
 * closed). Keeps close-on-exec. Returns the fd, or -1.
 */
static int
spawn_fd_above2(int fd)
{
	int moved;

	if (fd > 2)
		return fd;
	moved = fcntl(fd, F_DUPFD_CLOEXEC, 3);
	close(fd);
	return moved;
}

/* pipe2(O_CLOEXEC) with both ends above 2. */
static int
spawn_pipe(int fds[2])
{
	if (pipe2(fds, O_CLOEXEC) == -1)
		return -1;
	fds[0] = spawn_fd_above2(fds[0]);
	fds[1] = spawn_fd_above2(fds[1]);
	if (fds[0] == -1 || fds[1] == -1) {
		int saved = errno;

		spawn_close_fd(&fds[0]);
		spawn_close_fd(&fds[1]);
		errno = saved;
		return -1;
	}
	return 0;
}

/* Our end of a pipe just made: its only status flag is O_NONBLOCK, so no F_GETFL first. */
static int
spawn_nonblock(int fd)
{
	return fcntl(fd, F_SETFL, O_NONBLOCK);
}

/*
 * Opens the working directory the child will chdir to: the child changes to
 * it with fchdir, so the directory checked here is the one it gets. Returns
 * the fd, AT_FDCWD when cwd is NULL, or -1 with *cause set.
 */
static int
spawn_open_cwd(const char *cwd, char **cause)
{
	int fd;

	if (cwd == NULL)
		return AT_FDCWD;
	fd = open(cwd, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (fd != -1)
		fd = spawn_fd_above2(fd);
	if (fd == -1 || faccessat(AT_FDCWD, cwd, X_OK, AT_EACCESS) == -1) {
		cause_set(cause, "cannot chdir to %s: %s", cwd, strerror(errno));
		if (fd != -1)
			close(fd);
		return -1;
	}
	return fd;
}

/* The value of PATH in envp, or the default. */
static const char *
spawn_env_path(char *const *envp)
{
	for (; *envp != NULL; envp++)
		if (strncmp(*envp, "PATH=", 5) == 0)
			return *envp + 5;
	return SPAWN_DEFAULT_PATH;
}

/*
 * Finds the program as described in exec-spawn.h. dirfd is the child's working
 * directory (or AT_FDCWD). Returns the path to give posix_spawn (relative
 * ones are resolved by the child after its fchdir), or NULL with *cause set.
 */
static char *
spawn_resolve(const char *prog, char *const *envp, int dirfd, char **cause)
{
	const char *path, *p, *end;
	bool denied = false;
	char *candidate;

	if (strchr(prog, '/') != NULL) {
		if ((candidate = strdup(prog)) == NULL)
			cause_set(cause, "cannot start %s: %s", prog, strerror(errno));
		return candidate;
	}
	path = spawn_env_path(envp);
	for (p = path;; p = end + 1) {
		struct stat sb;
		int n;

		end = strchrnul(p, ':');
		/* an empty entry means the working directory */
		if (end == p)
			n = asprintf(&candidate, "./%s", prog);
		else
			n = asprintf(&candidate, "%.*s/%s", (int)(end - p), p, prog);
		if (n == -1) {
			cause_set(cause, "cannot start %s: %s", prog, strerror(errno));
			return NULL;
		}
		if (fstatat(dirfd, candidate, &sb, 0) == 0 && S_ISREG(sb.st_mode)) {
			if (faccessat(dirfd, candidate, X_OK, AT_EACCESS) == 0)
				return candidate;
			denied = true;
		}
		free(candidate);
		if (*end == '\0')
			break;
	}
	if (denied)
		cause_set(cause, "cannot execute %s: %s", prog, strerror(EACCES));
	else
		cause_set(cause, "no such program: %s", prog);
	return NULL;
}

/* Builds the attributes: own session, empty mask, default dispositions. */
static int
spawn_attr_init(posix_spawnattr_t *attr)
{
	sigset_t mask, defaults;
	int error;

	if ((error = posix_spawnattr_init(attr)) != 0)
		return error;
	sigemptyset(&mask);
	sigfillset(&defaults);
	/*
	 * POSIX_SPAWN_SETSID rather than POSIX_SPAWN_SETPGROUP: a new session
	 * is also a new process group whose id is the child's pid, and it
	 * detaches the child from any terminal tpd -f was started from (a
	 * Ctrl-C there never reaches tasks; a task opening /dev/tty cannot
	 * reach the daemon's terminal).
	 */
	if ((error = posix_spawnattr_setflags(attr, POSIX_SPAWN_SETSID |
	    POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF)) != 0 ||
	    (error = posix_spawnattr_setsigmask(attr, &mask)) != 0 ||
	    (error = posix_spawnattr_setsigdefault(attr, &defaults)) != 0) {
		posix_spawnattr_destroy(attr);
		return error;
	}
	return 0;
}

/* The child's fds: 0-2 from our pipes, fchdir, then everything above 2 closed. */
static int
spawn_actions_init(posix_spawn_file_actions_t *fa, int in, int out, int err,
    int dirfd)
{
	int error;

	if ((error = posix_spawn_file_actions_init(fa)) != 0)
		return error;
	if (in != -1)
		error = posix_spawn_file_actions_adddup2(fa, in, 0);
	else
		error = posix_spawn_file_actions_addopen(fa, 0, "/dev/null",
		    O_RDONLY, 0);
	if (error == 0)
		error = posix_spawn_file_actions_adddup2(fa, out, 1);
	if (error == 0)
		error = posix_spawn_file_actions_adddup2(fa, err, 2);
	if (error == 0 && dirfd != AT_FDCWD)
		error = posix_spawn_file_actions_addfchdir_np(fa, dirfd);
	if (error == 0)
		error = posix_spawn_file_actions_addclosefrom_np(fa, 3);
	if (error != 0)
		posix_spawn_file_actions_destroy(fa);
	return error;
}

int
spawn_start(const struct spawn_request *req, struct spawn_child *child,
    char **cause)
{
	int in[2] = { -1, -1 }, out[2] = { -1, -1 }, err[2] = { -1, -1 };
	int dirfd, error;
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t attr;
	char *path;
	pid_t pid;

	*child = (struct spawn_child){ .pid = -1, .pidfd = -1, .stdin_fd = -1,
	    .stdout_fd = -1, .stderr_fd = -1 };
	if ((dirfd = spawn_open_cwd(req->cwd, cause)) == -1)
		return -1;
	if ((path = spawn_resolve(req->argv[0], req->envp, dirfd, cause)) == NULL)
		goto fail_dir;
	if ((req->pipe_stdin && spawn_pipe(in) == -1) || spawn_pipe(out) == -1 ||
	    spawn_pipe(err) == -1) {
		cause_set(cause, "cannot start %s: pipe: %s", req->argv[0],
		    strerror(errno));
		goto fail_pipes;
	}
	if ((error = spawn_attr_init(&attr)) != 0) {
		cause_set(cause, "cannot start %s: posix_spawnattr: %s",
		    req->argv[0], strerror(error));
		goto fail_pipes;
	}
	if ((error = spawn_actions_init(&fa, in[0], out[1], err[1], dirfd)) != 0) {
		cause_set(cause, "cannot start %s: posix_spawn_file_actions: %s",
		    req->argv[0], strerror(error));
		posix_spawnattr_destroy(&attr);
		goto fail_pipes;
	}
	error = posix_spawn(&pid, path, &fa, &attr, req->argv, req->envp);
	posix_spawn_file_actions_destroy(&fa);
	posix_spawnattr_destroy(&attr);
	if (error != 0) {
		/* the working directory was checked, so this is about the program */
		if (error == ENOENT || error == ENOTDIR)
			cause_set(cause, "no such program: %s", path);
		else
			cause_set(cause, "cannot execute %s: %s", path,
			    strerror(error));
		goto fail_pipes;
	}

	/*
	 * The child cannot be reaped by anyone but us (nothing in tpd calls
	 * waitpid(-1) or ignores SIGCHLD), so its pid stays valid until we
	 * reap it and pidfd_open cannot name another process.
	 */
	child->pid = pid;
	if ((child->pidfd = pidfd_open(pid, 0)) == -1) {
		cause_set(cause, "cannot watch %s: pidfd_open: %s", path,
		    strerror(errno));
		kill(-pid, SIGKILL);
		kill(pid, SIGKILL);
		while (waitpid(pid, NULL, 0) == -1 && errno == EINTR)
			;
		child->pid = -1;
		goto fail_pipes;
	}
	spawn_close_fd(&in[0]);
	spawn_close_fd(&out[1]);
	spawn_close_fd(&err[1]);
	child->stdin_fd = in[1];
	child->stdout_fd = out[0];
	child->stderr_fd = err[0];
	if ((child->stdin_fd != -1 && spawn_nonblock(child->stdin_fd) == -1) ||
	    spawn_nonblock(child->stdout_fd) == -1 ||
	    spawn_nonblock(child->stderr_fd) == -1) {
		/* F_SETFL on our own pipe cannot fail short of a bug; say so anyway */
		cause_set(cause, "cannot start %s: fcntl: %s", path,
		    strerror(errno));
		kill(-pid, SIGKILL);
		while (waitpid(pid, NULL, 0) == -1 && errno == EINTR)
			;
		spawn_close(child);
		child->pid = -1;
		goto fail_dir_path;
	}
	free(path);
	if (dirfd != AT_FDCWD)
		close(dirfd);
	return 0;

fail_pipes:
	spawn_close_fd(&in[0]);
	spawn_close_fd(&in[1]);
	spawn_close_fd(&out[0]);
	spawn_close_fd(&out[1]);
	spawn_close_fd(&err[0]);
	spawn_close_fd(&err[1]);
fail_dir_path:
	free(path);
fail_dir:
	if (dirfd != AT_FDCWD)
		close(dirfd);
	return -1;
}
