/*
 * exec-run.c: running an exec task on a worker thread.
 *
 * One worker waits for its one child with ppoll over: the child's stdout and
 * stderr pipes, its stdin pipe while there is input left to write, a pidfd
 * of the child, and an eventfd that the kind's cancel hook writes to. The
 * worker holds its own write ends of stdout and stderr until the end
 * (spawn_request.hold_outputs): the pipes never hang up while it waits, so
 * a child's exit wakes it once, through the pidfd, not a second time for
 * the hang-up of its pipes (a `true` task's wait was as often two as one). The
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
 *     full pipe. With stream: true each chunk read is also sent as an
 *     "output" event at once. Every chunk also goes to the task's spool
 *     file (spool.c) within its bounds, in the same step under wake_lock,
 *     so a follower from the start finds each byte in the file or in a
 *     later event. A streamed stdin (exec-input.c) is written as input
 *     requests bring it; the pipe is watched only while there is some.
 *  3. The end comes when the child (the group's leader) exits, or the
 *     timeout passes or cancel is asked: then the whole group gets SIGTERM
 *     (and SIGCONT, for stopped members), and the wait goes on for the
 *     leader until kill_grace_ms has passed.
 *  4. In every case the group then gets SIGKILL, the leader is reaped, and
 *     whatever was left of the task is killed and waited for until it has
 *     exited: the task's cgroup (cgroup.c), or, with containment process,
 *     its group, session, descendants and orphans (pgroup.c). So
 *     background processes a command leaves behind do not outlive its
 *     task, and a process ignoring SIGTERM is gone when done is sent.
 *  5. The pipes are drained of what the task wrote before it died, and the
 *     usage is read: the cgroup's cpu.stat and memory.peak, or the
 *     leader's wait4 rusage (which covers the descendants it waited for).
 *
 * Before the spawn the worker looks up the user of run_as (passwd entry,
 * groups, HOME/USER/LOGNAME/SHELL, the home as the default cwd), turns the
 * task's limits into the cgroup's files and the child's rlimits, and
 * takes the task's cgroup (cgroup.h: the worker's kept one, or a new one).
 *
 * A slow client: task_emit blocks while this task has more than the stream
 * budget of output events not yet taken by the loop thread. Then this run
 * stops reading, the pipes fill and the child blocks in write: memory stays
 * bounded and no output is lost. task_emit stops waiting on cancel and at
 * the task's deadline, so both still end the task on time. Since events stop
 * at output_limit, a task never emits more than output_limit bytes per
 * stream. The task's sink gives the budget back only as the client's
 * connection takes the events (flow control, conn.c), so a slow reader
 * paces the run; one that reads nothing for output_stall_timeout is
 * disconnected, the task goes on, and its result still holds the full
 * capture for wait.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <pwd.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include "capture.h"
#include "cgroup.h"
#include "exec-spawn.h"
#include "exec.h"
#include "base/log.h"
#include "pgroup.h"
#include "spool.h"
#include "units.h"
#include "proto/proto.h"
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
	/* under wake_lock: the stream is sent from byte from on (the run saw it on then) */
	bool streaming;
	uint64_t from;
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
	bool killed_after_grace; /* the leader outlived SIGTERM's grace: SIGKILL ended it */
	enum exec_end end;
	uint64_t deadline_us;   /* timeout; 0 = none */
	uint64_t kill_at_us;    /* after SIGTERM: when the grace period ends */
	char *internal;         /* a failure of tpd's own, ending the run */
	int gate_w;             /* the start gate's write end while armed, or -1 */

	bool in_cgroup;         /* containment cgroup: cg is the task's */
	struct cgroup_task cg;
	struct pgroup_task pg;  /* containment process */
	struct rusage ru;       /* the leader's, from wait4 */
	struct spool_writer spool; /* the whole output, under state_dir (spool.h) */

	/* run_as */
	struct spawn_creds creds;
	char who[64];           /* the user's name, or "uid N" */
	gid_t *groups;
	char *pwbuf;            /* the passwd entry's strings */
	char **env;             /* x->env with the user's variables; NULL: x->env */
	const char *home;       /* the default cwd */
};

/*
 * A worker's cancel eventfd, kept from run to run (made and closed for
 * every task, it cost about as much as the task's pipes); closed when the
 * thread leaves. A count a cancel left in it is read by the next run's
 * first wait, which then finds its own task not cancelled and goes on.
 */
static pthread_key_t exec_wake_key;
static pthread_once_t exec_wake_once = PTHREAD_ONCE_INIT;

static void
exec_wake_fd_close(void *p)
{
	close((int)(intptr_t)p - 1);
}

static void
exec_wake_key_make(void)
{
	if (pthread_key_create(&exec_wake_key, exec_wake_fd_close) != 0)
		fatalx("exec: pthread_key_create");
}

/* The calling thread's eventfd (made at its first run), or -1. */
static int
exec_wake_fd(void)
{
	intptr_t v;
	int fd;

	pthread_once(&exec_wake_once, exec_wake_key_make);
	/* stored as fd + 1: NULL is "none" */
	if ((v = (intptr_t)pthread_getspecific(exec_wake_key)) != 0)
		return (int)v - 1;
	if ((fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) == -1)
		return -1;
	if (pthread_setspecific(exec_wake_key, (void *)(intptr_t)(fd + 1)) != 0) {
		close(fd);
		return -1;
	}
	return fd;
}

/* Shows the thread's cancel eventfd to the cancel hook. */
static int
exec_wake_open(struct exec_run *r)
{
	int fd = exec_wake_fd();

	if (fd == -1)
		return -1;
	pthread_mutex_lock(&r->x->wake_lock);
	r->x->wake_fd = fd;
	pthread_mutex_unlock(&r->x->wake_lock);
	r->wake_fd = fd;
	return 0;
}

/* Hides the eventfd from the cancel hook (the thread keeps it). */
static void
exec_wake_close(struct exec_run *r)
{
	if (r->wake_fd == -1)
		return;
	pthread_mutex_lock(&r->x->wake_lock);
	r->x->wake_fd = -1;
	pthread_mutex_unlock(&r->x->wake_lock);
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
	json_t *ev = proto_event_started(r->child.pid);

	if (ev != NULL)
		task_emit(r->t, ev, 0);
}

/* Sends the next output event of s (stream only); final flushes what was held back. */
static void
exec_stream_emit(struct exec_run *r, struct exec_stream *s, const char *data,
    size_t n, bool final)
{
	json_t *ev = proto_event_output(s->name);
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

uint64_t
exec_run_spooled(struct exec_run *r, struct task_spool_gap *gap)
{
	memset(gap, 0, sizeof *gap);
	/* read while streaming, and not yet arrived as events (t->streamed: the loop's, as this) */
	gap->in_flight = (r->out.streaming && r->out.cap.seen > r->out.from + r->t->streamed[0]) ||
	    (r->err.streaming && r->err.cap.seen > r->err.from + r->t->streamed[1]);
	if (r->spool.cut != 0) {
		gap->cut = true;
		gap->kept[0] = r->spool.kept[0];
		gap->kept[1] = r->spool.kept[1];
		gap->seen[0] = r->out.cap.seen;
		gap->seen[1] = r->err.cap.seen;
	}
	return r->spool.written;
}

/*
 * exec_run_kept from the run's spool file, when a capture let bytes go
 * past output_limit: the file holds them all (spool.c writes it in the
 * same step as the capture, under wake_lock). Only a follower that found
 * no file an instant before comes here (the file is made at the first
 * output), so the file is short. upto: what to give of each stream.
 * Returns 0, or -1 when the file cannot be read (the captures are used).
 */
static int
exec_run_kept_file(struct exec_run *r, json_t *events, const uint64_t upto[2])
{
	struct spool_record *rec = malloc(sizeof *rec);
	uint64_t off = 0, given[2] = { 0, 0 };
	int fd = -1;

	if (rec == NULL || (fd = spool_open_read(r->t->id)) == -1) {
		free(rec);
		return -1;
	}
	while (off < r->spool.written && spool_read(fd, &off, rec) == 1) {
		int i = rec->type == SPOOL_STDOUT ? 0 : rec->type == SPOOL_STDERR ? 1 : -1;
		size_t take;
		json_t *ev;

		if (i == -1 || given[i] >= upto[i])
			continue;
		take = upto[i] - given[i] < rec->len ? (size_t)(upto[i] - given[i]) : rec->len;
		if ((ev = proto_event_output(i == 0 ? STREAM_STDOUT : STREAM_STDERR)) == NULL ||
		    capture_json_set(ev, FIELD_DATA, FIELD_DATA_BASE64, rec->data, take) == -1 ||
		    json_array_append_new(events, ev) == -1)
			log_warnx("exec: task %llu: out of memory replaying its output",
			    (unsigned long long)r->t->id);
		given[i] += take;
	}
	close(fd);
	free(rec);
	return 0;
}

void
exec_run_kept(struct exec_run *r, json_t *events)
{
	struct exec_stream *streams[2] = { &r->out, &r->err };
	uint64_t upto[2];

	for (int i = 0; i < 2; i++)
		upto[i] = streams[i]->streaming ? streams[i]->from + r->t->streamed[i] :
		    streams[i]->cap.seen;
	if (r->spool.written > 0 && (r->out.cap.seen > r->out.cap.len ||
	    r->err.cap.seen > r->err.cap.len) && exec_run_kept_file(r, events, upto) == 0)
		return;

	for (int i = 0; i < 2; i++) {
		const struct capture *c = &streams[i]->cap;
		size_t len = c->len;
		json_t *ev;
		/*
		 * Once the run sends the stream, the bytes from `from` on travel as
		 * events: those that reached the loop (t->streamed) are replayed
		 * here, those still on their way reach the new follower as they
		 * come. Without it, an event read before the follow and delivered
		 * after it came twice.
		 */
		if (streams[i]->streaming && streams[i]->from + r->t->streamed[i] < len)
			len = (size_t)(streams[i]->from + r->t->streamed[i]);
		if (len == 0 || (ev = proto_event_output(streams[i]->name)) == NULL)
			continue;
		if (capture_json_set(ev, FIELD_DATA, FIELD_DATA_BASE64, c->buf, len) == -1 ||
		    json_array_append_new(events, ev) == -1)
			log_warnx("exec: task %llu: out of memory replaying its output",
			    (unsigned long long)r->t->id);
	}
}

/*
 * Reads once from s. Returns 1 after data, 0 at end of file (the fd is then
 * closed), -1 when nothing was there.
 */
static int
exec_stream_read(struct exec_run *r, struct exec_stream *s)
{
	ssize_t n;
	bool stream;

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
	/* kept and streamed or not in one step: a follower from the start sees each byte once */
	pthread_mutex_lock(&r->x->wake_lock);
	capture_add(&s->cap, r->buf, (size_t)n);
	spool_writer_add(&r->spool, s == &r->err, r->buf, (size_t)n);
	stream = atomic_load(&r->t->stream);
	if (stream && !s->streaming) {
		s->streaming = true;
		s->from = s->cap.seen - (size_t)n;
	}
	pthread_mutex_unlock(&r->x->wake_lock);
	/* the stream carries everything read: output_limit bounds only what the result keeps */
	if (stream)
		exec_stream_emit(r, s, r->buf, (size_t)n, false);
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

	if (x->stdin_stream) {
		exec_input_write(&x->in, fd, r->t->id);
		return;
	}
	while (*fd != -1 && r->stdin_off < x->stdin_len) {
		ssize_t n = write(*fd, x->stdin_data + r->stdin_off,
		    x->stdin_len - r->stdin_off);

		if (n == -1) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN)
				return;
			if (errno == EPIPE)
				spawn_sigpipe_take();
			else
				log_warn("exec: task %llu: writing stdin",
				    (unsigned long long)r->t->id);
			break;  /* the child does not want the rest */
		}
		r->stdin_off += (size_t)n;
	}
	spawn_close_fd(fd);
}

/* Sets NAME=value in r->env (a copy of x->env, made on first use). */
static int
exec_env_set(struct exec_run *r, const char *name, const char *value)
{
	size_t n = 0, len = strlen(name);
	char *entry, **env;

	if (r->env == NULL) {
		while (r->x->env[n] != NULL)
			n++;
		if ((r->env = calloc(n + 5, sizeof *r->env)) == NULL)
			return -1;
		for (size_t i = 0; i < n; i++)
			if ((r->env[i] = strdup(r->x->env[i])) == NULL)
				return -1;
	}
	if (asprintf(&entry, "%s=%s", name, value) == -1)
		return -1;
	for (env = r->env; *env != NULL; env++) {
		if (strncmp(*env, name, len) == 0 && (*env)[len] == '=') {
			free(*env);
			*env = entry;
			return 0;
		}
	}
	*env = entry;   /* room for the four was made */
	return 0;
}

/*
 * run_as: the user's passwd entry, groups (getgrouplist, as initgroups
 * would), variables and home. A caller without a passwd entry runs with
 * its uid and gid only, no variables, in "/". Returns 0 (r->creds ready),
 * or -1 with *cause set.
 */
static int
exec_user_resolve(struct exec_run *r, char **cause)
{
	struct exec_task *x = r->x;
	struct passwd pw, *res = NULL;
	long size = sysconf(_SC_GETPW_R_SIZE_MAX);
	int ngroups = 32, error;

	if (size < 1024)
		size = 16384;
	if ((r->pwbuf = malloc((size_t)size)) == NULL)
		return cause_set(cause, "cannot start %s: out of memory", x->argv[0]);
	if (x->run_as == CONF_RUN_AS_CALLER) {
		snprintf(r->who, sizeof r->who, "uid %ld", (long)x->uid);
		error = getpwuid_r(x->uid, &pw, r->pwbuf, (size_t)size, &res);
	} else {
		snprintf(r->who, sizeof r->who, "%s", x->user);
		error = getpwnam_r(x->user, &pw, r->pwbuf, (size_t)size, &res);
	}
	if (res == NULL && (x->run_as == CONF_RUN_AS_USER || error != 0))
		return cause_set(cause, "cannot run as %s: %s", r->who, error != 0 ?
		    strerror(error) : "no such user");
	r->creds.name = r->who;
	if (res == NULL) {
		/* a caller the passwd database does not know */
		r->creds.uid = x->uid;
		r->creds.gid = x->gid;
		if ((r->groups = malloc(sizeof *r->groups)) == NULL)
			return cause_set(cause, "cannot start %s: out of memory", x->argv[0]);
		r->groups[0] = x->gid;
		r->creds.groups = r->groups;
		r->creds.ngroups = 1;
		r->home = "/";
		return 0;
	}
	r->creds.uid = pw.pw_uid;
	/* a caller keeps the gid it connected with; a named user gets its own */
	r->creds.gid = x->run_as == CONF_RUN_AS_CALLER ? x->gid : pw.pw_gid;
	snprintf(r->who, sizeof r->who, "%s", pw.pw_name);
	for (;;) {
		gid_t *g = realloc(r->groups, (size_t)ngroups * sizeof *g);
		int want = ngroups;

		if (g == NULL)
			return cause_set(cause, "cannot start %s: out of memory", x->argv[0]);
		r->groups = g;
		if (getgrouplist(pw.pw_name, r->creds.gid, r->groups, &want) != -1) {
			ngroups = want;
			break;
		}
		if (want <= ngroups || want > 65536)
			return cause_set(cause, "cannot run as %s: getgrouplist failed", r->who);
		ngroups = want;
	}
	r->creds.groups = r->groups;
	r->creds.ngroups = (size_t)ngroups;
	r->home = pw.pw_dir != NULL && pw.pw_dir[0] != '\0' ? pw.pw_dir : "/";
	if ((!(x->env_given & EXEC_ENV_HOME) && exec_env_set(r, "HOME", r->home) == -1) ||
	    (!(x->env_given & EXEC_ENV_USER) && exec_env_set(r, "USER", pw.pw_name) == -1) ||
	    (!(x->env_given & EXEC_ENV_LOGNAME) &&
	    exec_env_set(r, "LOGNAME", pw.pw_name) == -1) ||
	    (!(x->env_given & EXEC_ENV_SHELL) && exec_env_set(r, "SHELL",
	    pw.pw_shell != NULL && pw.pw_shell[0] != '\0' ? pw.pw_shell : "/bin/sh") == -1))
		return cause_set(cause, "cannot start %s: out of memory", x->argv[0]);
	return 0;
}

/* The rlimits for the task's limits (memory_bytes only without memory.max). */
static void
exec_rlimits(struct exec_run *r, struct spawn_request *req)
{
	const uint64_t *lim = r->x->limits;
	bool memory_cg = r->in_cgroup && (cgroup_current()->controllers & CGROUP_MEMORY);
	struct spawn_rlimit *rl = req->rlimits;

	if (lim[CONF_LIMIT_OPEN_FILES] != CONF_NO_LIMIT)
		rl[req->nrlimits++] = (struct spawn_rlimit){ RLIMIT_NOFILE, LIMIT_OPEN_FILES,
		    { lim[CONF_LIMIT_OPEN_FILES], lim[CONF_LIMIT_OPEN_FILES] } };
	/* SIGXCPU at the limit, SIGKILL a second later for one that ignores it */
	if (lim[CONF_LIMIT_CPU_SECONDS] != CONF_NO_LIMIT)
		rl[req->nrlimits++] = (struct spawn_rlimit){ RLIMIT_CPU, LIMIT_CPU_SECONDS,
		    { lim[CONF_LIMIT_CPU_SECONDS], lim[CONF_LIMIT_CPU_SECONDS] + 1 } };
	if (lim[CONF_LIMIT_FILE_BYTES] != CONF_NO_LIMIT)
		rl[req->nrlimits++] = (struct spawn_rlimit){ RLIMIT_FSIZE, LIMIT_FILE_BYTES,
		    { lim[CONF_LIMIT_FILE_BYTES], lim[CONF_LIMIT_FILE_BYTES] } };
	if (lim[CONF_LIMIT_MEMORY_BYTES] != CONF_NO_LIMIT && !memory_cg)
		rl[req->nrlimits++] = (struct spawn_rlimit){ RLIMIT_AS, LIMIT_MEMORY_BYTES,
		    { lim[CONF_LIMIT_MEMORY_BYTES], lim[CONF_LIMIT_MEMORY_BYTES] } };
}

/* The task's cgroup, with the limits the cgroup enforces. */
static int
exec_cgroup_create(struct exec_run *r, char **cause)
{
	const uint64_t *lim = r->x->limits;
	unsigned have = cgroup_current()->controllers;
	struct cgroup_limits cl = { 0 };

	if ((have & CGROUP_MEMORY) && lim[CONF_LIMIT_MEMORY_BYTES] != CONF_NO_LIMIT)
		cl.memory_bytes = lim[CONF_LIMIT_MEMORY_BYTES];
	if ((have & CGROUP_PIDS) && lim[CONF_LIMIT_PIDS] != CONF_NO_LIMIT)
		cl.pids = lim[CONF_LIMIT_PIDS];
	if ((have & CGROUP_CPU) && lim[CONF_LIMIT_CPU_CORES] != CONF_NO_LIMIT)
		cl.cpu_millicores = lim[CONF_LIMIT_CPU_CORES];
	if (cgroup_task_create(&r->cg, &cl, cause) == -1)
		return -1;
	r->in_cgroup = true;
	return 0;
}

/* Timeout or cancel: SIGTERM to the group, then the grace period. */
static void
exec_terminate(struct exec_run *r, enum exec_end end)
{
	r->end = end;
	pgroup_signal(r->child.pid, r->child.pidfd, SIGTERM);
	pgroup_signal(r->child.pid, r->child.pidfd, SIGCONT);
	if (r->in_cgroup) {
		/* and to those that left the group: the cgroup holds them all */
		cgroup_task_signal(&r->cg, SIGTERM);
		cgroup_task_signal(&r->cg, SIGCONT);
	}
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
		/* a streamed stdin is watched only while it has bytes (or its end) to give */
		if (r->child.stdin_fd != -1 &&
		    (!r->x->stdin_stream || exec_input_ready(&r->x->in))) {
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
	size_t before = s->cap.seen, most = 0;

	while (*s->fd != -1 && exec_stream_read(r, s) == 1) {
		/* asked only of a pipe that held something (most end at once) */
		if (most == 0) {
			int capacity = fcntl(*s->fd, F_GETPIPE_SZ);

			most = capacity > 0 ? (size_t)capacity : 1024 * 1024;
		}
		if (s->cap.seen - before >= most)
			break;
	}
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
	r->killed_after_grace = r->end != EXEC_END_EXITED && !r->leader_exited;
	/* an exited leader needs no signal of its own, wherever its group went */
	pgroup_signal(r->child.pid, r->leader_exited ? -1 : r->child.pidfd, SIGKILL);
	if (r->in_cgroup)
		cgroup_task_kill_wait(&r->cg, wait_ms);
	/* only possible if something else reaped our child */
	if (spawn_reap(r->child.pid, &status, &r->ru) == -1)
		exec_internal(r, "wait4");
	spawn_close_fd(&r->child.pidfd);
	spawn_close_fd(&r->child.stdin_fd);
	if (!r->in_cgroup)
		pgroup_kill_wait(&r->pg, wait_ms);

	/* Every writer of the group is gone, ours with these: the pipes end at what they hold. */
	spawn_close_fd(&r->child.stdout_w);
	spawn_close_fd(&r->child.stderr_w);
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

static double
exec_tv_ms(const struct timeval *tv)
{
	return (double)tv->tv_sec * 1000.0 + (double)tv->tv_usec / 1000.0;
}

/*
 * usage: user_ms and system_ms of the whole task (the cgroup's cpu.stat, or
 * the leader's rusage, which covers what it waited for), max_rss_bytes (the
 * cgroup's memory.peak, or the largest of the leader and what it waited
 * for).
 */
static json_t *
exec_usage(struct exec_run *r, const struct cgroup_usage *cu)
{
	double user_ms = exec_tv_ms(&r->ru.ru_utime), system_ms = exec_tv_ms(&r->ru.ru_stime);
	uint64_t rss = (uint64_t)r->ru.ru_maxrss * 1024;

	if (cu->have_cpu) {
		user_ms = (double)cu->user_us / 1000.0;
		system_ms = (double)cu->system_us / 1000.0;
	}
	if (cu->memory_peak != 0)
		rss = cu->memory_peak;
	/*
	 * ru_maxrss counts the daemon's pages the program shared until its
	 * execve (doc/exec.md): then the figure is only an upper bound.
	 */
	return json_pack("{s:f, s:f, s:I, s:b}", FIELD_USER_MS, user_ms, FIELD_SYSTEM_MS,
	    system_ms, FIELD_MAX_RSS_BYTES, (json_int_t)rss, FIELD_MAX_RSS_UPPER_BOUND,
	    cu->memory_peak == 0);
}

/*
 * The result, whenever the process ran:
 *   exit_code    its exit status, or null when a signal ended it
 *   signal       the number of that signal, or null when it exited
 *   signal_name  "SIGKILL", ..., or null (tpd extension)
 *   stdout, stderr (or stdout_base64, stderr_base64 when not text)
 *   truncated    true when either stream passed output_limit
 *   usage        what it used (exec_usage)
 */
static json_t *
exec_result(struct exec_run *r, int status, const struct cgroup_usage *cu)
{
	json_t *res = json_object();
	char name[32];

	if (res == NULL)
		return NULL;
	if (WIFSIGNALED(status)) {
		exec_signal_name(WTERMSIG(status), name, sizeof name);
		json_object_set_new(res, FIELD_EXIT_CODE, json_null());
		json_object_set_new(res, FIELD_SIGNAL, json_integer(WTERMSIG(status)));
		json_object_set_new(res, FIELD_SIGNAL_NAME, json_string(name));
	} else {
		json_object_set_new(res, FIELD_EXIT_CODE, json_integer(WEXITSTATUS(status)));
		json_object_set_new(res, FIELD_SIGNAL, json_null());
		json_object_set_new(res, FIELD_SIGNAL_NAME, json_null());
	}
	if (capture_result_set(&r->out.cap, res, FIELD_STDOUT, FIELD_STDOUT_BASE64) == -1 ||
	    capture_result_set(&r->err.cap, res, FIELD_STDERR, FIELD_STDERR_BASE64) == -1) {
		json_decref(res);
		return NULL;
	}
	json_object_set_new(res, FIELD_TRUNCATED,
	    json_boolean(r->out.cap.truncated || r->err.cap.truncated));
	json_object_set_new(res, FIELD_USAGE, exec_usage(r, cu));
	return res;
}

/* The terminal state, with the error of every state but succeeded. */
static enum pool_state
exec_state(struct exec_run *r, int status, const struct cgroup_usage *cu)
{
	struct task *t = r->t;
	char name[32], after[32], grace[32];

	if (r->internal != NULL) {
		task_set_error(t, ERR_INTERNAL, "%s", r->internal);
		return POOL_FAILED;
	}
	switch (r->end) {
	case EXEC_END_TIMED_OUT:
		units_format_duration(t->timeout_us / 1000, after, sizeof after);
		if (r->killed_after_grace) {
			/* its run_ms is the timeout plus the grace: say both */
			units_format_duration(r->x->settings->kill_grace_ms, grace, sizeof grace);
			task_set_error(t, ERR_TIMED_OUT, "timed out after %s; killed (SIGKILL) %s "
			    "later, as SIGTERM did not end it", after, grace);
		} else
			task_set_error(t, ERR_TIMED_OUT, "timed out after %s", after);
		return POOL_TIMED_OUT;
	case EXEC_END_CANCELLED:
		task_set_error(t, ERR_CANCELLED, "cancelled");
		return POOL_CANCELLED;
	case EXEC_END_EXITED:
		break;
	}
	if (cu->oom_kills > 0 && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
		task_set_error(t, ERR_OOM, "killed for passing its memory limit "
		    "(memory_bytes %llu)", (unsigned long long)r->x->limits[CONF_LIMIT_MEMORY_BYTES]);
		return POOL_FAILED;
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

/* Frees what the run's preparation made (run_as, the cgroup). */
static void
exec_run_free(struct exec_run *r)
{
	if (r->in_cgroup)
		cgroup_task_destroy(&r->cg);
	if (r->env != NULL) {
		for (char **e = r->env; *e != NULL; e++)
			free(*e);
		free(r->env);
	}
	free(r->groups);
	free(r->pwbuf);
	free(r->buf);
}

/*
 * What the spawn needs beyond the request: the user (run_as), the
 * rlimits, the cgroup. Returns 0, or -1 with *cause set.
 */
static int
exec_prepare(struct exec_run *r, struct spawn_request *req, char **cause)
{
	struct exec_task *x = r->x;

	if (x->run_as != CONF_RUN_AS_DAEMON) {
		if (exec_user_resolve(r, cause) == -1)
			return -1;
		req->creds = &r->creds;
		if (r->env != NULL)
			req->envp = r->env;
		if (req->cwd == NULL) {
			req->cwd = r->home;
			req->cwd_or_root = true;
		}
	}
	if (cgroup_current()->cgroup && exec_cgroup_create(r, cause) == -1)
		return -1;
	if (r->in_cgroup)
		req->cgroup_fd = r->cg.dirfd;
	else
		pgroup_task_prepare(&r->pg);
	exec_rlimits(r, req);
	return 0;
}

/*
 * The start gate (task.h, exec-spawn.c): with the journal on, the child
 * waits on it for the STARTED record. Returns 0 (req->gate_fd set, or left
 * 0 when the record is there already or nothing waits for one), 1 when the
 * task is cancelled (nothing may start), -1 with *cause set.
 */
static int
exec_gate_open(struct exec_run *r, struct spawn_request *req, char **cause)
{
	int fds[2];

	if (!r->t->start_barrier)
		return 0;
	if (spawn_gate_pipe(fds) == -1) {
		cause_set(cause, "cannot start %s: pipe: %s", r->x->argv[0], strerror(errno));
		return -1;
	}
	switch (task_start_gate_arm(r->t, fds[1])) {
	case -1:
		req->gate_fd = fds[0];
		r->gate_w = fds[1];
		return 0;
	case TASK_GATE_GO:
		close(fds[0]);
		close(fds[1]);
		return 0;
	default:
		close(fds[0]);
		close(fds[1]);
		return 1;
	}
}

/* After the spawn (the child passed the gate, or is gone): disarms it, closes the pipe. */
static void
exec_gate_close(struct exec_run *r, struct spawn_request *req)
{
	if (req->gate_fd == 0)
		return;
	task_start_gate_disarm(r->t);
	close(req->gate_fd);
	req->gate_fd = 0;
	spawn_close_fd(&r->gate_w);
}

static enum pool_state exec_run_input(struct task *t);

/* Any end of the run ends a streamed stdin: later input is refused, its holders released. */
enum pool_state
exec_run(struct task *t)
{
	struct exec_task *x = t->kind_data;
	enum pool_state state = exec_run_input(t);

	exec_input_end(&x->in);
	return state;
}

static enum pool_state
exec_run_input(struct task *t)
{
	struct exec_task *x = t->kind_data;
	struct exec_run r = {
		.t = t,
		.x = x,
		.out = { .name = STREAM_STDOUT },
		.err = { .name = STREAM_STDERR },
		.wake_fd = -1,
		.gate_w = -1,
		.end = EXEC_END_EXITED,
		.cg = { .dirfd = -1, .events_fd = -1, .peak_fd = -1 },
	};
	struct spawn_request req = {
		.argv = x->argv,
		.envp = x->env,
		.cwd = x->cwd,
		.pipe_stdin = x->stdin_data != NULL || x->stdin_stream,
		.hold_outputs = true,
		.cgroup_fd = -1,
	};
	struct cgroup_usage cu = { 0 };
	enum pool_state state;
	sigset_t pipe_set, old_mask;
	char *cause = NULL;
	int status, gate = 0;
	bool stopped = false;

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
	if (exec_prepare(&r, &req, &cause) == -1 ||
	    (gate = exec_gate_open(&r, &req, &cause)) == -1 ||
	    (gate == 0 && spawn_start(&req, &r.child, &cause, &stopped) == -1)) {
		exec_gate_close(&r, &req);
		exec_wake_close(&r);
		exec_run_free(&r);
		if (gate == 1 || (stopped && task_cancelled(t))) {
			free(cause);
			task_set_error(t, ERR_CANCELLED, "cancelled before it started");
			return POOL_CANCELLED;
		}
		task_set_error(t, ERR_SPAWN_FAILED, "%s",
		    cause != NULL ? cause : "cannot start the program");
		free(cause);
		return POOL_FAILED;
	}
	exec_gate_close(&r, &req);
	if (!r.in_cgroup)
		pgroup_task_begin(&r.pg, r.child.pid);
	if (req.pipe_stdin) {
		/* Writing stdin to a child that closed it must fail with EPIPE, not kill tpd. */
		sigemptyset(&pipe_set);
		sigaddset(&pipe_set, SIGPIPE);
		pthread_sigmask(SIG_BLOCK, &pipe_set, &old_mask);
	}

	r.out.fd = &r.child.stdout_fd;
	r.err.fd = &r.child.stderr_fd;
	capture_init(&r.out.cap, x->output_limit);
	capture_init(&r.err.cap, x->output_limit);
	spool_writer_open(&r.spool, t->id);
	pthread_mutex_lock(&x->wake_lock);
	x->run = &r;
	pthread_mutex_unlock(&x->wake_lock);
	if (t->stream)
		exec_emit_started(&r);
	if (req.pipe_stdin)
		exec_stdin_write(&r);   /* often all of it fits the pipe at once */

	exec_wait(&r);
	status = exec_finish(&r);
	pthread_mutex_lock(&x->wake_lock);
	spool_writer_close(&r.spool, r.out.cap.seen, r.err.cap.seen);
	x->run = NULL;              /* its output is all in the result from here on */
	x->run_over = true;
	pthread_mutex_unlock(&x->wake_lock);
	exec_wake_close(&r);
	spawn_close(&r.child);
	if (req.pipe_stdin)
		pthread_sigmask(SIG_SETMASK, &old_mask, NULL);
	if (r.in_cgroup)
		cgroup_task_usage(&r.cg, &cu);

	t->result = exec_result(&r, status, &cu);
	if (t->result == NULL && r.internal == NULL)
		r.internal = strdup("out of memory building the result");
	state = exec_state(&r, status, &cu);
	capture_free(&r.out.cap);
	capture_free(&r.err.cap);
	free(r.internal);
	exec_run_free(&r);
	return state;
}
