/*
 * exec-spawn.c: starting an exec task's process (see exec-spawn.h).
 *
 * The parent prepares everything that may allocate or block (the program's
 * path, the pipes, the working directory's fd, the group list) and then
 * clones. The child, sharing the parent's memory while the calling thread
 * sleeps, only makes system calls through syscall(2) (spawn_child_main),
 * writes a struct spawn_failure where the parent finds it when a step
 * fails, and exits 127: into the parent's memory, which it shares, with
 * clone3 (the parent resumes only once the child has called execve or
 * exited, so what it finds there is all there is: a pipe made for every
 * task cost as much again); through an error pipe with the fork-like
 * clone, whose end of file means execve succeeded (it is close-on-exec).
 *
 * The start gate (req->gate_fd; task.h): with the journal on, a program
 * runs only once its STARTED record may be seen. The child does every step
 * first, while the record is being written and synced, then reads one byte
 * from the gate, the last thing before execve; the loop thread writes it
 * there as soon as the record is seen, with no hop through the worker. So
 * the clone and the child's steps are off the sync's critical path. While
 * the child waits, the calling thread sleeps in clone3 (CLONE_VFORK), so
 * the child's stack and arguments stay alive, and every signal stays
 * blocked in the child (a handler of the daemon must never run there). If
 * tpd dies meanwhile, the child cannot run the program: it has closed its
 * copies of the daemon's fds (so the last write end of the gate goes with
 * the daemon, and the read sees end of file), and PR_SET_PDEATHSIG kills
 * it besides. A child spawned meanwhile by another worker holds a copy of
 * this gate's write end only until its own close_range, which comes before
 * its own gate. Without the gate (journal off) nothing waits.
 *
 * Two ways to clone, the same child:
 *  - clone3 (Linux 5.7) with CLONE_VM | CLONE_VFORK | CLONE_PIDFD and
 *    CLONE_INTO_CGROUP, through a few lines of assembly (x86-64 and arm64)
 *    that call the child's function on its own stack: a C function cannot
 *    survive its stack pointer changing under it. clone3 has no wrapper in
 *    glibc 2.36.
 *  - elsewhere, or when clone3 is refused (ENOSYS: an old kernel, or a
 *    container's seccomp filter), clone with CLONE_PIDFD as a plain fork:
 *    the child runs on a copy of the daemon's memory (slower, and no
 *    stack switch to get wrong; glibc's clone() wrapper is avoided because
 *    sanitizers intercept it), and a child with a cgroup joins it itself,
 *    by writing "0" to its cgroup.procs before execve (a migration).
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/pidfd.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "exec-spawn.h"
#include "base/log.h"

/* PATH when the child's environment has none (what execvp uses). */
#define SPAWN_DEFAULT_PATH "/usr/bin:/bin"
/* The child's stack: it only makes system calls. */
#define SPAWN_STACK_SIZE (64 * 1024)

#ifndef CLONE_PIDFD
#define CLONE_PIDFD 0x00001000
#endif
#ifndef CLONE_INTO_CGROUP
#define CLONE_INTO_CGROUP 0x200000000ULL
#endif
#ifndef SYS_clone3
#define SYS_clone3 435
#endif
#ifndef SYS_close_range
#define SYS_close_range 436
#endif
/* 32-bit ABIs have 16-bit ids in the plain calls. */
#ifdef SYS_setresuid32
#define SPAWN_SYS_SETRESUID SYS_setresuid32
#define SPAWN_SYS_SETRESGID SYS_setresgid32
#define SPAWN_SYS_SETGROUPS SYS_setgroups32
#else
#define SPAWN_SYS_SETRESUID SYS_setresuid
#define SPAWN_SYS_SETRESGID SYS_setresgid
#define SPAWN_SYS_SETGROUPS SYS_setgroups
#endif

/* The kernel's struct clone_args, version 2 (with cgroup). */
struct spawn_clone_args {
	uint64_t flags;
	uint64_t pidfd;
	uint64_t child_tid;
	uint64_t parent_tid;
	uint64_t exit_signal;
	uint64_t stack;
	uint64_t stack_size;
	uint64_t tls;
	uint64_t set_tid;
	uint64_t set_tid_size;
	uint64_t cgroup;
};

/* The kernel's struct sigaction on x86-64 and arm64 (and most others). */
struct spawn_ksigaction {
	void (*handler)(int);
	unsigned long flags;
	void (*restorer)(void);
	uint64_t mask;
};

/* The step of the child that failed. */
enum spawn_step {
	SPAWN_STEP_SIGNALS,
	SPAWN_STEP_SETSID,
	SPAWN_STEP_FDS,
	SPAWN_STEP_CGROUP,
	SPAWN_STEP_GROUPS,
	SPAWN_STEP_GID,
	SPAWN_STEP_UID,
	SPAWN_STEP_DEATHSIG,
	SPAWN_STEP_RLIMIT,
	SPAWN_STEP_CHDIR,
	SPAWN_STEP_GATE,
	SPAWN_STEP_EXEC,
};

/* What the child writes to the error pipe when a step fails. */
struct spawn_failure {
	int step;
	int error;
	int index;              /* SPAWN_STEP_RLIMIT: which one */
};

/* What the child reads: prepared by the parent, which sleeps meanwhile. */
struct spawn_child_args {
	const struct spawn_request *req;
	const char *path;
	int in, out, err;       /* our pipe ends for 0-2; in -1: /dev/null */
	int dirfd;              /* AT_FDCWD: stay where the daemon is */
	int errfd;              /* the error pipe's write end (above 2), or -1: failure */
	int errfd_read;         /* the parent's end of it, or -1 */
	volatile int failed;    /* errfd -1: the child set failure, and exited */
	struct spawn_failure failure;
	int gatefd;             /* the start gate's read end (above 2), or -1 */
	int procs_fd;           /* the cgroup's cgroup.procs, or -1 */
	pid_t parent;           /* the daemon's pid */
};

/* Set once clone3 was refused: glibc's clone from then on. */
static atomic_bool spawn_no_clone3;

#if defined(__x86_64__) || defined(__aarch64__)
#define SPAWN_HAVE_CLONE3 1
/*
 * long spawn_clone3(struct spawn_clone_args *args, size_t size,
 *     int (*fn)(void *), void *arg): clone3; the child calls fn(arg) on the
 * stack args gives it and exits with what fn returns. Returns the child's
 * pid, or -errno, in the parent.
 */
long spawn_clone3(struct spawn_clone_args *, size_t, int (*)(void *), void *)
    __attribute__((visibility("hidden")));
#if defined(__x86_64__)
__asm__(
	".pushsection .text\n"
	".globl spawn_clone3\n"
	".hidden spawn_clone3\n"
	".type spawn_clone3, @function\n"
	"spawn_clone3:\n"
	"	movq %rdx, %r8\n"       /* fn and arg survive the syscall in r8, r9 */
	"	movq %rcx, %r9\n"
	"	movl $" "435" ", %eax\n"
	"	syscall\n"
	"	testq %rax, %rax\n"
	"	jnz 1f\n"
	"	xorl %ebp, %ebp\n"      /* the child: no frame above this one */
	"	movq %r9, %rdi\n"
	"	andq $-16, %rsp\n"
	"	call *%r8\n"
	"	movl %eax, %edi\n"
	"	movl $60, %eax\n"       /* exit */
	"	syscall\n"
	"	hlt\n"
	"1:	ret\n"
	".size spawn_clone3, .-spawn_clone3\n"
	".popsection\n");
#else
__asm__(
	".pushsection .text\n"
	".globl spawn_clone3\n"
	".hidden spawn_clone3\n"
	".type spawn_clone3, %function\n"
	"spawn_clone3:\n"
	"	mov x9, x2\n"           /* fn and arg survive the svc in x9, x10 */
	"	mov x10, x3\n"
	"	mov x8, #435\n"
	"	svc #0\n"
	"	cbnz x0, 1f\n"
	"	mov x29, xzr\n"         /* the child: no frame above this one */
	"	mov x30, xzr\n"
	"	mov x0, x10\n"
	"	blr x9\n"
	"	mov x8, #93\n"          /* exit */
	"	svc #0\n"
	"1:	ret\n"
	".size spawn_clone3, .-spawn_clone3\n"
	".popsection\n");
#endif
#endif

/*
 * The child, between clone and execve. It shares the daemon's memory (and
 * its thread's TLS, errno included) while the parent thread sleeps: only
 * system calls, no libc function that could take a lock or that a
 * sanitizer intercepts, and no instrumentation.
 */
#define SPAWN_CHILD __attribute__((noinline, no_sanitize("address", "thread", "undefined")))

SPAWN_CHILD static int
spawn_child_fail(const struct spawn_child_args *a, enum spawn_step step, int index)
{
	struct spawn_failure f = { .step = (int)step, .error = errno, .index = index };

	if (a->errfd == -1) {
		/* clone3: the parent sleeps until this child exits, then reads this */
		struct spawn_child_args *shared = (struct spawn_child_args *)a;

		shared->failure = f;
		shared->failed = 1;
	} else
		syscall(SYS_write, a->errfd, &f, sizeof f);
	return 127;
}

/* Puts fd on target (fd is above 2, so never one of 0-2 already placed). */
SPAWN_CHILD static int
spawn_child_dup(int fd, int target)
{
	return (int)syscall(SYS_dup3, fd, target, 0);
}

SPAWN_CHILD static int
spawn_child_main(void *arg)
{
	const struct spawn_child_args *a = arg;
	const struct spawn_request *req = a->req;
	struct spawn_ksigaction dfl = { .handler = SIG_DFL };
	uint64_t empty = 0;
	unsigned lo = 3;
	int fd, keep[2];

	/* Every signal to its default (the mask still blocks them all). */
	for (int sig = 1; sig < 65; sig++) {
		if (sig == SIGKILL || sig == SIGSTOP)
			continue;
		if (syscall(SYS_rt_sigaction, sig, &dfl, NULL, sizeof empty) == -1 &&
		    errno != EINVAL)
			return spawn_child_fail(a, SPAWN_STEP_SIGNALS, sig);
	}
	if (syscall(SYS_setsid) == -1)
		return spawn_child_fail(a, SPAWN_STEP_SETSID, 0);

	if (a->in != -1) {
		if (spawn_child_dup(a->in, 0) == -1)
			return spawn_child_fail(a, SPAWN_STEP_FDS, 0);
	} else {
		if ((fd = (int)syscall(SYS_openat, AT_FDCWD, "/dev/null", O_RDONLY)) == -1)
			return spawn_child_fail(a, SPAWN_STEP_FDS, 0);
		if (fd != 0 && (spawn_child_dup(fd, 0) == -1 || syscall(SYS_close, fd) == -1))
			return spawn_child_fail(a, SPAWN_STEP_FDS, 0);
	}
	if (spawn_child_dup(a->out, 1) == -1 || spawn_child_dup(a->err, 2) == -1)
		return spawn_child_fail(a, SPAWN_STEP_FDS, 1);

	/* Without CLONE_INTO_CGROUP: join the cgroup, before anything can fork. */
	if (a->procs_fd != -1 && syscall(SYS_write, a->procs_fd, "0", 1) != 1)
		return spawn_child_fail(a, SPAWN_STEP_CGROUP, 0);

	/* Groups, then gid, then uid: each needs the privileges the next drops. */
	if (req->creds != NULL) {
		const struct spawn_creds *c = req->creds;

		if (syscall(SPAWN_SYS_SETGROUPS, c->ngroups, c->groups) == -1)
			return spawn_child_fail(a, SPAWN_STEP_GROUPS, 0);
		if (syscall(SPAWN_SYS_SETRESGID, c->gid, c->gid, c->gid) == -1)
			return spawn_child_fail(a, SPAWN_STEP_GID, 0);
		if (syscall(SPAWN_SYS_SETRESUID, c->uid, c->uid, c->uid) == -1)
			return spawn_child_fail(a, SPAWN_STEP_UID, 0);
	}
	/*
	 * A daemon given CAP_SETUID/CAP_SETGID as ambient capabilities (a
	 * systemd drop-in) must not hand them on: execve recomputes a task's
	 * capabilities without them. (EINVAL: a kernel without ambient ones.)
	 */
	if (syscall(SYS_prctl, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) == -1 &&
	    errno != EINVAL)
		return spawn_child_fail(a, SPAWN_STEP_UID, 1);
	/*
	 * After the credentials, which clear it. The daemon may have died
	 * before this: then our parent is someone else already.
	 */
	if (syscall(SYS_prctl, PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) == -1)
		return spawn_child_fail(a, SPAWN_STEP_DEATHSIG, 0);
	if (syscall(SYS_getppid) != a->parent) {
		errno = ESRCH;
		return spawn_child_fail(a, SPAWN_STEP_DEATHSIG, 1);
	}
	for (size_t i = 0; i < req->nrlimits; i++) {
		const struct spawn_rlimit *l = &req->rlimits[i];
		struct { uint64_t cur, max; } v = { l->value.rlim_cur, l->value.rlim_max };

		if (syscall(SYS_prlimit64, 0, l->resource, &v, NULL) == -1)
			return spawn_child_fail(a, SPAWN_STEP_RLIMIT, (int)i);
	}
	/* As the task's user: the directory must be theirs to enter. */
	if (a->dirfd != AT_FDCWD && syscall(SYS_fchdir, a->dirfd) == -1 &&
	    (!req->cwd_or_root || syscall(SYS_chdir, "/") == -1))
		return spawn_child_fail(a, SPAWN_STEP_CHDIR, 0);

	/*
	 * Everything above 2 but the error pipe and the gate (close-on-exec)
	 * goes: the daemon's copy of the gate's write end too, so that the
	 * daemon's death is the gate's end of file.
	 */
	keep[0] = a->errfd;
	keep[1] = a->gatefd;
	if (keep[0] == -1 || (keep[1] != -1 && keep[1] < keep[0])) {
		keep[1] = keep[0];
		keep[0] = a->gatefd;
	}
	for (int i = 0; i < 2; i++) {
		if (keep[i] == -1)
			continue;
		if ((unsigned)keep[i] > lo)
			syscall(SYS_close_range, lo, keep[i] - 1, 0);
		lo = (unsigned)keep[i] + 1;
	}
	syscall(SYS_close_range, lo, ~0U, 0);

	/*
	 * Ready: the program runs only once its start is recorded. Every
	 * signal is still blocked, and SIGKILL (the daemon's death, above)
	 * ends the wait as well as end of file does.
	 */
	if (a->gatefd != -1) {
		unsigned char go = 0;
		long n;

		do
			n = syscall(SYS_read, a->gatefd, &go, 1);
		while (n == -1 && errno == EINTR);
		if (n != 1 || go != SPAWN_GATE_GO) {
			errno = n == -1 ? errno : n == 0 ? EPIPE : ECANCELED;
			return spawn_child_fail(a, SPAWN_STEP_GATE, 0);
		}
	}

	syscall(SYS_rt_sigprocmask, SIG_SETMASK, &empty, NULL, sizeof empty);
	syscall(SYS_execve, a->path, req->argv, req->envp);
	return spawn_child_fail(a, SPAWN_STEP_EXEC, 0);
}

void
spawn_use_clone3(bool use)
{
	atomic_store(&spawn_no_clone3, !use);
}

void
spawn_close_fd(int *fd)
{
	if (*fd != -1) {
		close(*fd);
		*fd = -1;
	}
}

void
spawn_sigpipe_take(void)
{
	sigset_t pipe_set;
	struct timespec zero = { 0, 0 };

	sigemptyset(&pipe_set);
	sigaddset(&pipe_set, SIGPIPE);
	while (sigtimedwait(&pipe_set, NULL, &zero) == -1 && errno == EINTR)
		;
}

void
spawn_close(struct spawn_child *child)
{
	spawn_close_fd(&child->pidfd);
	spawn_close_fd(&child->stdin_fd);
	spawn_close_fd(&child->stdout_fd);
	spawn_close_fd(&child->stderr_fd);
	spawn_close_fd(&child->stdout_w);
	spawn_close_fd(&child->stderr_w);
}

int
spawn_reap(pid_t pid, int *status, struct rusage *ru)
{
	while (wait4(pid, status, 0, ru) == -1)
		if (errno != EINTR)
			return -1;
	return 0;
}

/*
 * Moves fd above 2, so that the child's dup onto 0-2 can never overwrite
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

/* A pipe being made failed: closes both ends, keeps errno; returns -1. */
static int
spawn_pipe_fail(int fds[2])
{
	int saved = errno;

	spawn_close_fd(&fds[0]);
	spawn_close_fd(&fds[1]);
	errno = saved;
	return -1;
}

/* pipe2(O_CLOEXEC) with both ends above 2. */
static int
spawn_pipe(int fds[2])
{
	if (pipe2(fds, O_CLOEXEC) == -1)
		return -1;
	fds[0] = spawn_fd_above2(fds[0]);
	fds[1] = spawn_fd_above2(fds[1]);
	if (fds[0] == -1 || fds[1] == -1)
		return spawn_pipe_fail(fds);
	return 0;
}

/* Our end of a pipe just made: its only status flag is O_NONBLOCK, so no F_GETFL first. */
static int
spawn_nonblock(int fd)
{
	return fcntl(fd, F_SETFL, O_NONBLOCK);
}

int
spawn_gate_pipe(int fds[2])
{
	if (spawn_pipe(fds) == -1)
		return -1;
	if (spawn_nonblock(fds[1]) == -1)
		return spawn_pipe_fail(fds);
	return 0;
}

/*
 * Opens the working directory the child will chdir to: the child changes to
 * it with fchdir, so the directory checked here is the one it gets (as the
 * task's user: see spawn_child_main). Returns the fd, AT_FDCWD when cwd is
 * NULL, or -1 with *cause set. A default cwd (or_root) that cannot be
 * opened is "/".
 */
static int
spawn_open_cwd(const char *cwd, bool or_root, char **cause)
{
	int fd;

	if (cwd == NULL)
		return AT_FDCWD;
	fd = open(cwd, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (fd == -1 && or_root)
		fd = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (fd != -1)
		fd = spawn_fd_above2(fd);
	if (fd == -1 || (!or_root && faccessat(AT_FDCWD, cwd, X_OK, AT_EACCESS) == -1)) {
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
 * directory (or AT_FDCWD). Returns the path to give execve (relative
 * ones are resolved by the child after its fchdir), or NULL with *cause set.
 */
static char *
spawn_resolve(const char *prog, char *const *envp, int dirfd, char **cause)
{
	const char *path, *p, *end;
	size_t plen = strlen(prog);
	bool denied = false;
	char *candidate, buf[PATH_MAX];

	if (strchr(prog, '/') != NULL) {
		if ((candidate = strdup(prog)) == NULL)
			cause_set(cause, "cannot start %s: %s", prog, strerror(errno));
		return candidate;
	}
	path = spawn_env_path(envp);
	for (p = path;; p = end + 1) {
		struct stat sb;
		/* an empty entry means the working directory */
		const char *dir = p;
		size_t dlen;

		end = strchrnul(p, ':');
		if ((dlen = (size_t)(end - p)) == 0) {
			dir = ".";
			dlen = 1;
		}
		/* one longer than a path may be is found by no one (ENAMETOOLONG) */
		if (dlen + 1 + plen < sizeof buf) {
			memcpy(buf, dir, dlen);
			buf[dlen] = '/';
			memcpy(buf + dlen + 1, prog, plen + 1);
			if (fstatat(dirfd, buf, &sb, 0) == 0 && S_ISREG(sb.st_mode)) {
				if (faccessat(dirfd, buf, X_OK, AT_EACCESS) == 0) {
					if ((candidate = strdup(buf)) == NULL)
						cause_set(cause, "cannot start %s: %s", prog,
						    strerror(errno));
					return candidate;
				}
				denied = true;
			}
		}
		if (*end == '\0')
			break;
	}
	if (denied)
		cause_set(cause, "cannot execute %s: %s", prog, strerror(EACCES));
	else
		cause_set(cause, "no such program: %s", prog);
	return NULL;
}

/*
 * Clones the child (see the top of this file). Returns its pid with
 * *pidfd set, or -1 with errno set.
 */
static pid_t
spawn_clone(struct spawn_child_args *a, int cgroup_fd, int *pidfd)
{
	char *stack;
	sigset_t all, old;
	long pid = -1;
	int saved;

	if ((stack = malloc(SPAWN_STACK_SIZE)) == NULL)
		return -1;
	/*
	 * The child starts with every signal blocked: a handler of the daemon
	 * must never run in it. It sets the defaults, then unblocks.
	 */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
#ifdef SPAWN_HAVE_CLONE3
	if (!atomic_load(&spawn_no_clone3)) {
		struct spawn_clone_args ca = {
			.flags = CLONE_VM | CLONE_VFORK | CLONE_PIDFD |
			    (cgroup_fd != -1 ? CLONE_INTO_CGROUP : 0),
			.pidfd = (uintptr_t)pidfd,
			.exit_signal = SIGCHLD,
			.stack = (uintptr_t)stack,
			.stack_size = SPAWN_STACK_SIZE,
			.cgroup = cgroup_fd != -1 ? (uint64_t)cgroup_fd : 0,
		};

		a->procs_fd = -1;
		pid = spawn_clone3(&ca, sizeof ca, spawn_child_main, a);
		if (pid < 0) {
			errno = (int)-pid;
			pid = -1;
			if (errno == ENOSYS) {
				atomic_store(&spawn_no_clone3, true);
				log_warnx("exec: clone3 is not available: tasks start "
				    "with clone, and join their cgroup by themselves");
			}
		}
	}
	if (pid == -1 && atomic_load(&spawn_no_clone3))
#endif
	{
		int fds[2];

		a->procs_fd = -1;
		if (cgroup_fd != -1 && (a->procs_fd = openat(cgroup_fd, "cgroup.procs",
		    O_WRONLY | O_CLOEXEC)) == -1)
			goto out;
		/* a copy of our memory: the child's failure comes through a pipe */
		if (a->errfd == -1) {
			if (spawn_pipe(fds) == -1)
				goto out;
			a->errfd = fds[1];
			a->errfd_read = fds[0];
		}
		/* the pidfd comes in parent_tid, the third argument on every ABI */
		pid = syscall(SYS_clone, (unsigned long)(CLONE_PIDFD | SIGCHLD), 0UL,
		    pidfd, 0UL, 0UL);
		if (pid == 0)
			syscall(SYS_exit_group, spawn_child_main(a));
	}
out:
	saved = errno;
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (a->procs_fd != -1)
		close(a->procs_fd);
	/* CLONE_VFORK: the child has called execve or exited; its stack is free. */
	free(stack);
	errno = saved;
	return (pid_t)pid;
}

/* What a failed step of the child means, for a person. */
static void
spawn_failure_cause(const struct spawn_request *req, const char *path,
    const struct spawn_failure *f, char **cause)
{
	const char *err = strerror(f->error);
	const char *who = req->creds != NULL ? req->creds->name : "";

	switch ((enum spawn_step)f->step) {
	case SPAWN_STEP_EXEC:
		if (f->error == ENOENT || f->error == ENOTDIR)
			cause_set(cause, "no such program: %s", path);
		else
			cause_set(cause, "cannot execute %s: %s", path, err);
		return;
	case SPAWN_STEP_CHDIR:
		cause_set(cause, "cannot chdir to %s: %s", req->cwd, err);
		return;
	case SPAWN_STEP_GROUPS:
		cause_set(cause, "cannot run as %s: setgroups: %s", who, err);
		return;
	case SPAWN_STEP_GID:
		cause_set(cause, "cannot run as %s: setresgid: %s", who, err);
		return;
	case SPAWN_STEP_UID:
		cause_set(cause, "cannot run as %s: setresuid: %s", who, err);
		return;
	case SPAWN_STEP_RLIMIT:
		if (f->index >= 0 && (size_t)f->index < req->nrlimits) {
			cause_set(cause, "cannot set the %s limit: setrlimit: %s",
			    req->rlimits[f->index].what, err);
			return;
		}
		break;
	case SPAWN_STEP_CGROUP:
		cause_set(cause, "cannot start %s in its cgroup: %s", path, err);
		return;
	case SPAWN_STEP_DEATHSIG:
		cause_set(cause, "cannot start %s: %s", path, f->index == 1 ?
		    "the daemon is exiting" : err);
		return;
	case SPAWN_STEP_GATE:
		cause_set(cause, "cannot start %s: %s", path, f->error == ECANCELED ?
		    "the task was cancelled before its start was recorded" :
		    "its start could not be recorded");
		return;
	case SPAWN_STEP_SIGNALS:
	case SPAWN_STEP_SETSID:
	case SPAWN_STEP_FDS:
		break;
	}
	cause_set(cause, "cannot start %s: %s (step %d)", path, err, f->step);
}

int
spawn_start(const struct spawn_request *req, struct spawn_child *child,
    char **cause, bool *gate_stopped)
{
	int in[2] = { -1, -1 }, out[2] = { -1, -1 }, err[2] = { -1, -1 };
	int fail[2] = { -1, -1 };
	struct spawn_failure f = { 0 };
	struct spawn_child_args a;
	int dirfd, pidfd = -1;
	ssize_t n;
	char *path;
	pid_t pid;

	*child = (struct spawn_child){ .pid = -1, .pidfd = -1, .stdin_fd = -1,
	    .stdout_fd = -1, .stderr_fd = -1, .stdout_w = -1, .stderr_w = -1 };
	*gate_stopped = false;
	if ((dirfd = spawn_open_cwd(req->cwd, req->cwd_or_root, cause)) == -1)
		return -1;
	if ((path = spawn_resolve(req->argv[0], req->envp, dirfd, cause)) == NULL)
		goto fail_dir;
	if ((req->pipe_stdin && spawn_pipe(in) == -1) || spawn_pipe(out) == -1 ||
	    spawn_pipe(err) == -1) {
		cause_set(cause, "cannot start %s: pipe: %s", req->argv[0],
		    strerror(errno));
		goto fail_pipes;
	}
	a = (struct spawn_child_args){ .req = req, .path = path, .in = in[0],
	    .out = out[1], .err = err[1], .dirfd = dirfd, .errfd = -1, .errfd_read = -1,
	    .gatefd = req->gate_fd > 2 ? req->gate_fd : -1, .procs_fd = -1,
	    .parent = getpid() };
	pid = spawn_clone(&a, req->cgroup_fd, &pidfd);
	fail[0] = a.errfd_read;     /* the fork-like clone's error pipe, if it made one */
	fail[1] = a.errfd;
	if (pid == -1) {
		cause_set(cause, "cannot start %s: clone: %s", path, strerror(errno));
		goto fail_pipes;
	}
	spawn_close_fd(&fail[1]);
	if (fail[0] != -1) {
		do
			n = read(fail[0], &f, sizeof f);
		while (n == -1 && errno == EINTR);
		spawn_close_fd(&fail[0]);
	} else if (a.failed) {
		f = a.failure;
		n = (ssize_t)sizeof f;
	} else
		n = 0;
	if (n != 0) {
		/* a step failed (or the pipe did: a bug), and the child has exited */
		if (n == (ssize_t)sizeof f) {
			spawn_failure_cause(req, path, &f, cause);
			*gate_stopped = f.step == SPAWN_STEP_GATE;
		}
		else
			cause_set(cause, "cannot start %s: reading its error pipe: %s",
			    path, n == -1 ? strerror(errno) : "short read");
		close(pidfd);
		spawn_reap(pid, &(int){ 0 }, NULL);
		goto fail_pipes;
	}

	child->pid = pid;
	child->pidfd = pidfd;
	spawn_close_fd(&in[0]);
	if (req->hold_outputs) {
		child->stdout_w = out[1];
		child->stderr_w = err[1];
	} else {
		spawn_close_fd(&out[1]);
		spawn_close_fd(&err[1]);
	}
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
		pidfd_send_signal(pidfd, SIGKILL, NULL, 0);
		spawn_reap(pid, &(int){ 0 }, NULL);
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
	spawn_close_fd(&fail[0]);
	spawn_close_fd(&fail[1]);
fail_dir_path:
	free(path);
fail_dir:
	if (dirfd != AT_FDCWD)
		close(dirfd);
	return -1;
}
