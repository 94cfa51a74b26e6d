/*
 * exec-run.c: running an exec task on a worker thread.
 *
 * One worker waits for its one child with ppoll over: the child's stdout and
 * stderr pipes, its stdin pipe while there is input left to write, a pidfd
 * of the child, and an eventfd that the kind's cancel hook writes to. The
 * timeout is the ppoll timeout, computed from a monotonic deadline. Nothing
 * spins, and the child is reaped with waitpid(pid) for its own pid only:
 * tpd never calls waitpid(-1) and never ignores SIGCHLD, so workers cannot
 * take each other's children.
 *
 * The life of a run:
 *  1. spawn (exec-spawn.c); then "started" (stream only), with the child's pid
 *     (the kind announces its own start: a program that cannot be started
 *     gets no "started", only its failed done).
 *  2. Wait. Output is kept up to output_limit bytes per stream (capture.c);
 *     later bytes are read and thrown away, so the child never blocks on a
 *     full pipe. With stream: true each kept chunk is also sent as an
 *     "output" event at once, so the concatenated events of a stream are
 *     exactly the result's capture of it.
 *  3. The end comes when the child (the group's leader) exits, or the
 *     timeout passes or cancel is asked: then the whole group gets SIGTERM
 *     (and SIGCONT, for stopped members), and the wait goes on for the
 *     leader until kill_grace_ms has passed.
 *  4. In every case the group then gets SIGKILL, the leader is reaped, and
 *     whatever was left of the group is waited for until it has exited
 *     (pgroup.c). So background processes a command leaves behind do not
 *     outlive its task, and a process ignoring SIGTERM is gone when done is
 *     sent. (A descendant that moved to a session of its own has escaped the
 *     group and is not tracked; if it holds the output pipes, the run stops
 *     reading at what is buffered.)
 *  5. The pipes are drained of what the group wrote before it died.
 *
 * A slow client: task_emit blocks while this task has more than the stream
 * budget of output events not yet taken by the loop thread. Then this run
 * stops reading, the pipes fill and the child blocks in write: memory stays
 * bounded and no output is lost. task_emit stops waiting on cancel and at
 * the task's deadline, so both still end the task on time. Since events stop
 * at output_limit, a task never emits more than output_limit bytes per
 * stream. The front end gives the budget back only as the client's
 * connection takes the events (flow control, conn.c), so a slow reader
 * paces the run; one that reads nothing for output_stall_timeout is
 * disconnected, the task goes on, and its result still holds the full
 * capture for wait.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include "capture.h"
#include "exec-spawn.h"
#include "exec.h"
#include "log.h"
#include "pgroup.h"
#include "wire.h"

#define EXEC_READ_SIZE 65536
/* Shortest wait for a killed group's members, whatever kill_grace_ms says. */
#define EXEC_KILL_WAIT_MIN_MS 1000

/* Why the wait for the child ended. */
enum exec_end {
	EXEC_END_EXITED,        /* it exited by itself */
	EXEC_END_TIMED_OUT,
	EXEC_END_CANCELLED,
};

struct exec_stream {
	const char *name;       /* "stdout" or "stderr" */
	int *fd;                /* the child's read end, in run->child */
	struct capture cap;
};

struct exec_run {
	struct task *t;
	struct exec_task *x;
	struct spawn_child child;
	struct exec_stream out;
	struct exec_stream err;
	size_t stdin_off;       /* bytes of stdin written */
	char *buf;              /* EXEC_READ_SIZE */
	int wake_fd;
	bool leader_exited;
	enum exec_end end;
	uint64_t deadline_us;   /* timeout; 0 = none */
	uint64_t kill_at_us;    /* after SIGTERM: when the grace period ends */
	char *internal;         /* a failure of tpd's own, ending the run */
};

/* Creates the cancel eventfd and shows it to the cancel hook. */
static int
exec_wake_open(struct exec_run *r)
{
	int fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);

	if (fd == -1)
		return -1;
	pthread_mutex_lock(&r->x->wake_lock);
	r->x->wake_fd = fd;
	pthread_mutex_unlock(&r->x->wake_lock);
	r->wake_fd = fd;
	return 0;
}

/* Hides the eventfd from the cancel hook, then closes it. */
static void
exec_wake_close(struct exec_run *r)
{
	if (r->wake_fd == -1)
		return;
	pthread_mutex_lock(&r->x->wake_lock);
	r->x->wake_fd = -1;
	pthread_mutex_unlock(&r->x->wake_lock);
	close(r->wake_fd);
	r->wake_fd = -1;
}

/* Records a failure of tpd's own (errno set by what failed); the first one wins. */
static void
exec_internal(struct exec_run *r, const char *what)
{
	int saved = errno;

	log_warnx("exec: task %llu: %s: %s", (unsigned long long)r->t->id, what,
	    strerror(saved));
	if (r->internal == NULL && asprintf(&r->internal, "%s: %s", what,
	    strerror(saved)) == -1)
		r->internal = NULL;
}

static void
exec_emit_started(struct exec_run *r)
{
	json_t *ev = json_pack("{s:s, s:I}", "event", EV_STARTED, "pid",
	    (json_int_t)r->child.pid);

	if (ev != NULL)
		task_emit(r->t, ev, 0);
}

/* Sends the next output event of s (stream only); final flushes what was held back. */
static void
exec_stream_emit(struct exec_run *r, struct exec_stream *s, const char *data,
    size_t n, bool final)
{
	json_t *ev = json_pack("{s:s, s:s}", "event", EV_OUTPUT, "stream", s->name);
	long len;

	if (ev == NULL || (len = capture_chunk(&s->cap, ev, data, n, final)) == -1) {
		log_warnx("exec: task %llu: out of memory sending output",
		    (unsigned long long)r->t->id);
		json_decref(ev);
		return;
	}
	if (len == 0) {
		json_decref(ev);
		return;
	}
	task_emit(r->t, ev, (size_t)len);
}

/*
 * Reads once from s. Returns 1 after data, 0 at end of file (the fd is then
 * closed), -1 when nothing was there.
 */
static int
exec_stream_read(struct exec_run *r, struct exec_stream *s)
{
	ssize_t n;
	size_t kept;

	if (*s->fd == -1)
		return 0;
	do
		n = read(*s->fd, r->buf, EXEC_READ_SIZE);
	while (n == -1 && errno == EINTR);
	if (n == -1 && errno == EAGAIN)
		return -1;
	if (n <= 0) {
		if (n == -1)
			log_warn("exec: task %llu: reading %s",
			    (unsigned long long)r->t->id, s->name);
		spawn_close_fd(s->fd);
		return 0;
	}
	kept = capture_add(&s->cap, r->buf, (size_t)n);
	if (r->t->stream && kept > 0)
		exec_stream_emit(r, s, r->buf, kept, false);
	return 1;
}

/*
 * Writes what the pipe takes of the rest of stdin; closes it when all is
 * written or the child closed its end. SIGPIPE is blocked on this thread
 * for a run with stdin (exec_run), and one raised by a write here is taken back, so
 * EPIPE is all that is seen.
 */
static void
exec_stdin_write(struct exec_run *r)
{
	struct exec_task *x = r->x;
	int *fd = &r->child.stdin_fd;

	while (*fd != -1 && r->stdin_off < x->stdin_len) {
		ssize_t n = write(*fd, x->stdin_data + r->stdin_off,
		    x->stdin_len - r->stdin_off);

		if (n == -1) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN)
				return;
			if (errno == EPIPE) {
				sigset_t pipe_set;
				struct timespec zero = { 0, 0 };

				sigemptyset(&pipe_set);
				sigaddset(&pipe_set, SIGPIPE);
				while (sigtimedwait(&pipe_set, NULL, &zero) == -1 &&
				    errno == EINTR)
					;
			} else
				log_warn("exec: task %llu: writing stdin",
				    (unsigned long long)r->t->id);
			break;  /* the child does not want the rest */
		}
		r->stdin_off += (size_t)n;
	}
	spawn_close_fd(fd);
}

/* Timeout or cancel: SIGTERM to the group, then the grace period. */
static void
exec_terminate(struct exec_run *r, enum exec_end end)
{
	r->end = end;
	pgroup_signal(r->child.pid, r->child.pidfd, SIGTERM);
	pgroup_signal(r->child.pid, r->child.pidfd, SIGCONT);
	r->kill_at_us = clock_now_us() + r->x->settings->kill_grace_ms * 1000;
}

/* Waits until the leader exits, or the grace period after SIGTERM ends. */
static void
exec_wait(struct exec_run *r)
{
	while (!r->leader_exited) {
		struct pollfd pfd[5];
		int n = 0, at_pid, at_wake = -1, at_out = -1, at_err = -1, at_in = -1;
		uint64_t now = clock_now_us(), until;
		struct timespec ts, *tsp = NULL;

		if (r->end == EXEC_END_EXITED && task_cancelled(r->t)) {
			exec_terminate(r, EXEC_END_CANCELLED);
			continue;
		}
		until = r->end == EXEC_END_EXITED ? r->deadline_us : r->kill_at_us;
		if (until != 0 && now >= until) {
			if (r->end != EXEC_END_EXITED)
				return;         /* grace is over */
			exec_terminate(r, EXEC_END_TIMED_OUT);
			continue;
		}
		if (until != 0) {
			ts.tv_sec = (time_t)((until - now) / 1000000);
			ts.tv_nsec = (long)((until - now) % 1000000 * 1000);
			tsp = &ts;
		}

		at_pid = n;
		pfd[n++] = (struct pollfd){ .fd = r->child.pidfd, .events = POLLIN };
		if (r->end == EXEC_END_EXITED) {
			at_wake = n;
			pfd[n++] = (struct pollfd){ .fd = r->wake_fd, .events = POLLIN };
		}
		if (r->child.stdout_fd != -1) {
			at_out = n;
			pfd[n++] = (struct pollfd){ .fd = r->child.stdout_fd, .events = POLLIN };
		}
		if (r->child.stderr_fd != -1) {
			at_err = n;
			pfd[n++] = (struct pollfd){ .fd = r->child.stderr_fd, .events = POLLIN };
		}
		if (r->child.stdin_fd != -1) {
			at_in = n;
			pfd[n++] = (struct pollfd){ .fd = r->child.stdin_fd, .events = POLLOUT };
		}

		if (ppoll(pfd, (nfds_t)n, tsp, NULL) == -1) {
			if (errno == EINTR)
				continue;
			exec_internal(r, "ppoll");
			return;
		}
		/* the exit first: a cancel racing with it leaves a finished task as it is */
		if (pfd[at_pid].revents != 0)
			r->leader_exited = true;
		if (at_out != -1 && pfd[at_out].revents != 0)
			exec_stream_read(r, &r->out);
		if (at_err != -1 && pfd[at_err].revents != 0)
			exec_stream_read(r, &r->err);
		if (at_in != -1 && pfd[at_in].revents != 0)
			exec_stdin_write(r);
		if (at_wake != -1 && pfd[at_wake].revents != 0) {
			uint64_t count;

			/* reset the counter; the cancel flag says what it meant */
			if (read(r->wake_fd, &count, sizeof count) == -1 &&
			    errno != EAGAIN)
				log_warn("exec: task %llu: eventfd",
				    (unsigned long long)r->t->id);
		}
	}
}

/*
 * Reads what the dead group left in s: at most one pipe's capacity, since
 * a process that escaped the group could go on writing for ever.
 */
static void
exec_stream_drain(struct exec_run *r, struct exec_stream *s)
{
	int capacity = *s->fd != -1 ? fcntl(*s->fd, F_GETPIPE_SZ) : 0;
	size_t most = capacity > 0 ? (size_t)capacity : 1024 * 1024;
	size_t before = s->cap.seen;

	while (*s->fd != -1 && s->cap.seen - before < most &&
	    exec_stream_read(r, s) == 1)
		;
}

/*
 * However the wait ended: SIGKILL to the group, reap the leader, wait for
 * the rest of the group, take what is left in the pipes. Returns the
 * leader's wait status.
 */
static int
exec_finish(struct exec_run *r)
{
	struct exec_settings *s = r->x->settings;
	uint64_t wait_ms = s->kill_grace_ms > EXEC_KILL_WAIT_MIN_MS ?
	    s->kill_grace_ms : EXEC_KILL_WAIT_MIN_MS;
	int status = 0;

	/* before the reap: until then the leader's pid cannot name another group */
	pgroup_signal(r->child.pid, r->child.pidfd, SIGKILL);
	while (waitpid(r->child.pid, &status, 0) == -1) {
		if (errno != EINTR) {
			/* only possible if something else reaped our child */
			exec_internal(r, "waitpid");
			break;
		}
	}
	spawn_close_fd(&r->child.pidfd);
	spawn_close_fd(&r->child.stdin_fd);
	pgroup_kill_wait(r->child.pid, wait_ms);

	/* Every writer of the group is gone: the pipes end at what they hold. */
	exec_stream_drain(r, &r->out);
	exec_stream_drain(r, &r->err);
	if (r->child.stdout_fd != -1 || r->child.stderr_fd != -1)
		log_debug("exec: task %llu: an escaped process holds its output; "
		    "keeping what was buffered", (unsigned long long)r->t->id);
	if (r->t->stream) {
		exec_stream_emit(r, &r->out, NULL, 0, true);
		exec_stream_emit(r, &r->err, NULL, 0, true);
	}
	return status;
}

/* "SIGKILL" for 9, or "signal 42" when the number has no name. */
static void
exec_signal_name(int sig, char *buf, size_t len)
{
	const char *abbrev = sigabbrev_np(sig);

	if (abbrev != NULL)
		snprintf(buf, len, "SIG%s", abbrev);
	else
		snprintf(buf, len, "signal %d", sig);
}

/*
 * The result, whenever the process ran:
 *   exit_code    its exit status, or null when a signal ended it
 *   signal       the number of that signal, or null when it exited
 *   signal_name  "SIGKILL", ..., or null (tpd extension)
 *   stdout, stderr (or stdout_base64, stderr_base64 when not text)
 *   truncated    true when either stream passed output_limit
 */
static json_t *
exec_result(struct exec_run *r, int status)
{
	json_t *res = json_object();
	char name[32];

	if (res == NULL)
		return NULL;
	if (WIFSIGNALED(status)) {
		exec_signal_name(WTERMSIG(status), name, sizeof name);
		json_object_set_new(res, "exit_code", json_null());
		json_object_set_new(res, "signal", json_integer(WTERMSIG(status)));
		json_object_set_new(res, "signal_name", json_string(name));
	} else {
		json_object_set_new(res, "exit_code", json_integer(WEXITSTATUS(status)));
		json_object_set_new(res, "signal", json_null());
		json_object_set_new(res, "signal_name", json_null());
	}
	if (capture_result_set(&r->out.cap, res, "stdout", "stdout_base64") == -1 ||
	    capture_result_set(&r->err.cap, res, "stderr", "stderr_base64") == -1) {
		json_decref(res);
		return NULL;
	}
	json_object_set_new(res, "truncated",
	    json_boolean(r->out.cap.truncated || r->err.cap.truncated));
	return res;
}

/* The terminal state, with the error of every state but succeeded. */
static enum pool_state
exec_state(struct exec_run *r, int status)
{
	struct task *t = r->t;
	char name[32];

	if (r->internal != NULL) {
		task_set_error(t, ERR_INTERNAL, "%s", r->internal);
		return POOL_FAILED;
	}
	switch (r->end) {
	case EXEC_END_TIMED_OUT:
		task_set_error(t, ERR_TIMED_OUT, "timed out after %llu ms",
		    (unsigned long long)(t->timeout_us / 1000));
		return POOL_TIMED_OUT;
	case EXEC_END_CANCELLED:
		task_set_error(t, ERR_CANCELLED, "cancelled");
		return POOL_CANCELLED;
	case EXEC_END_EXITED:
		break;
	}
	if (WIFSIGNALED(status)) {
		exec_signal_name(WTERMSIG(status), name, sizeof name);
		task_set_error(t, ERR_SIGNAL, "killed by signal %d (%s)",
		    WTERMSIG(status), name);
		return POOL_FAILED;
	}
	if (WEXITSTATUS(status) != 0) {
		task_set_error(t, ERR_EXIT_STATUS, "exited with status %d",
		    WEXITSTATUS(status));
		return POOL_FAILED;
	}
	return POOL_SUCCEEDED;
}

enum pool_state
exec_run(struct task *t)
{
	struct exec_task *x = t->kind_data;
	struct exec_run r = {
		.t = t,
		.x = x,
		.out = { .name = "stdout" },
		.err = { .name = "stderr" },
		.wake_fd = -1,
		.end = EXEC_END_EXITED,
	};
	struct spawn_request req = {
		.argv = x->argv,
		.envp = x->env,
		.cwd = x->cwd,
		.pipe_stdin = x->stdin_data != NULL,
	};
	enum pool_state state;
	sigset_t pipe_set, old_mask;
	char *cause = NULL;
	int status;

	if (task_cancelled(t)) {
		task_set_error(t, ERR_CANCELLED, "cancelled before it started");
		return POOL_CANCELLED;
	}
	r.deadline_us = t->timeout_us != 0 ? clock_now_us() + t->timeout_us : 0;
	if ((r.buf = malloc(EXEC_READ_SIZE)) == NULL || exec_wake_open(&r) == -1) {
		task_set_error(t, ERR_SPAWN_FAILED, "cannot start %s: %s",
		    x->argv[0], strerror(errno));
		free(r.buf);
		return POOL_FAILED;
	}
	if (spawn_start(&req, &r.child, &cause) == -1) {
		task_set_error(t, ERR_SPAWN_FAILED, "%s",
		    cause != NULL ? cause : "cannot start the program");
		free(cause);
		exec_wake_close(&r);
		free(r.buf);
		return POOL_FAILED;
	}
	if (x->stdin_data != NULL) {
		/* Writing stdin to a child that closed it must fail with EPIPE, not kill tpd. */
		sigemptyset(&pipe_set);
		sigaddset(&pipe_set, SIGPIPE);
		pthread_sigmask(SIG_BLOCK, &pipe_set, &old_mask);
	}

	r.out.fd = &r.child.stdout_fd;
	r.err.fd = &r.child.stderr_fd;
	capture_init(&r.out.cap, x->output_limit);
	capture_init(&r.err.cap, x->output_limit);
	if (t->stream)
		exec_emit_started(&r);
	if (x->stdin_data != NULL)
		exec_stdin_write(&r);   /* often all of it fits the pipe at once */

	exec_wait(&r);
	status = exec_finish(&r);
	exec_wake_close(&r);
	spawn_close(&r.child);
	if (x->stdin_data != NULL)
		pthread_sigmask(SIG_SETMASK, &old_mask, NULL);

	t->result = exec_result(&r, status);
	if (t->result == NULL && r.internal == NULL)
		r.internal = strdup("out of memory building the result");
	state = exec_state(&r, status);
	capture_free(&r.out.cap);
	capture_free(&r.err.cap);
	free(r.internal);
	free(r.buf);
	return state;
}
