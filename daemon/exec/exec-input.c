/*
 * exec-input.c: a streamed stdin (submit with "stdin_stream": true, then
 * input requests; doc/protocol.md).
 *
 * The loop thread appends each input's bytes to the task's buffer and wakes
 * the worker (the cancel eventfd: the run's ppoll watches it); the worker
 * writes what the pipe takes. Flow control is the same as for output, the
 * other way round: once the buffer holds stdin_buffer bytes or more, the
 * input is still taken (the request is answered), but the connection that
 * sent it is not read any more (conn.c's input hold) until the worker has
 * taken the buffer down to half of stdin_buffer. So a task's buffer is at
 * most stdin_buffer plus one request per holder, whatever the size of the
 * input, and a program that reads slowly paces its writer.
 *
 * The release crosses from the worker to the loop thread by a mail
 * embedded in the buffer, posted at most once at a time. The run posts
 * its last mail before its done, and the mailbox keeps the order, so the
 * buffer (in the task's kind data) outlives every mail. A task that never
 * ran (cancelled or expired in the queue) has no worker: its holders are
 * released by exec_input_destroy on the loop thread.
 */
#include "config.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "exec.h"
#include "exec-spawn.h"
#include "base/log.h"

void
exec_input_init(struct exec_input *in, size_t limit)
{
	memset(in, 0, sizeof *in);
	pthread_mutex_init(&in->lock, NULL);
	in->limit = limit;
}

/* Loop thread: the holders may be read again. */
static void
exec_input_release(uint64_t *held)
{
	for (int i = 0; i < EXEC_INPUT_HOLDERS; i++)
		if (held[i] != 0)
			task_input_release(held[i]);
}

void
exec_input_destroy(struct exec_input *in)
{
	/* loop thread, after the run (if any) and its mails: no lock needed */
	exec_input_release(in->held);
	free(in->buf);
	in->buf = NULL;
	pthread_mutex_destroy(&in->lock);
}

/* Loop thread: the worker made room (or the run ended). */
static void
exec_input_deliver(struct mail *m)
{
	struct exec_input *in = (struct exec_input *)(void *)((char *)m -
	    offsetof(struct exec_input, mail));
	uint64_t held[EXEC_INPUT_HOLDERS];

	pthread_mutex_lock(&in->lock);
	memcpy(held, in->held, sizeof held);
	memset(in->held, 0, sizeof in->held);
	in->mail_posted = false;
	pthread_mutex_unlock(&in->lock);
	exec_input_release(held);
}

/* Under in->lock, worker: hands the holders to the loop once there is room. */
static void
exec_input_room(struct exec_input *in)
{
	bool any = false;

	if (in->mail_posted || (!in->over && in->len - in->off > in->limit / 2))
		return;
	for (int i = 0; i < EXEC_INPUT_HOLDERS; i++)
		any |= in->held[i] != 0;
	if (!any)
		return;
	in->mail_posted = true;
	in->mail.deliver = exec_input_deliver;
	mailbox_post(&in->mail);
}

int
exec_input_add(struct task *t, const void *data, size_t len, bool eof, uint64_t conn,
    size_t *buffered, bool *dropped, char **cause)
{
	struct exec_task *x = t->kind_data;
	struct exec_input *in;
	int full = 0;

	if (x == NULL || !x->stdin_stream)
		return cause_set(cause, "task %llu does not take input: submit it with "
		    "\"stdin_stream\": true", (unsigned long long)t->id);
	in = &x->in;
	pthread_mutex_lock(&in->lock);
	if (in->over) {
		pthread_mutex_unlock(&in->lock);
		return cause_set(cause, "task %llu has ended: its stdin takes no more input",
		    (unsigned long long)t->id);
	}
	if (in->eof) {
		pthread_mutex_unlock(&in->lock);
		return cause_set(cause, "task %llu: its stdin was already ended (eof): it "
		    "takes no more input", (unsigned long long)t->id);
	}
	*dropped = in->program_closed && len > 0;
	if (len > 0 && !in->program_closed) {
		if (in->off > 0 && in->len + len > in->cap) {
			memmove(in->buf, in->buf + in->off, in->len - in->off);
			in->len -= in->off;
			in->off = 0;
		}
		if (in->len + len > in->cap) {
			size_t cap = in->cap > 0 ? in->cap : 65536;
			unsigned char *nb;

			while (cap < in->len + len)
				cap *= 2;
			if ((nb = realloc(in->buf, cap)) == NULL) {
				pthread_mutex_unlock(&in->lock);
				return cause_set(cause, "out of memory for task %llu's input",
				    (unsigned long long)t->id);
			}
			in->buf = nb;
			in->cap = cap;
		}
		memcpy(in->buf + in->len, data, len);
		in->len += len;
	}
	in->eof = eof;
	*buffered = in->len - in->off;
	if (*buffered >= in->limit) {
		int free_slot = -1;

		for (int i = 0; i < EXEC_INPUT_HOLDERS; i++) {
			if (in->held[i] == conn) {
				free_slot = i;
				break;
			}
			if (in->held[i] == 0 && free_slot == -1)
				free_slot = i;
		}
		/* past EXEC_INPUT_HOLDERS feeders at once, the others are not held */
		if (free_slot != -1) {
			in->held[free_slot] = conn;
			full = 1;
		}
	}
	pthread_mutex_unlock(&in->lock);

	/* the run's ppoll watches the cancel eventfd: it looks at the buffer again */
	pthread_mutex_lock(&x->wake_lock);
	if (x->wake_fd != -1) {
		uint64_t one = 1;
		if (write(x->wake_fd, &one, sizeof one) == -1 && errno != EAGAIN)
			log_warn("exec: cannot wake task %llu", (unsigned long long)t->id);
	}
	pthread_mutex_unlock(&x->wake_lock);
	return full;
}

bool
exec_input_ready(struct exec_input *in)
{
	bool ready;

	pthread_mutex_lock(&in->lock);
	ready = in->off < in->len || in->eof;
	pthread_mutex_unlock(&in->lock);
	return ready;
}

void
exec_input_write(struct exec_input *in, int *fd, uint64_t task)
{
	pthread_mutex_lock(&in->lock);
	while (*fd != -1 && in->off < in->len) {
		ssize_t n = write(*fd, in->buf + in->off, in->len - in->off);

		if (n == -1) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN)
				break;
			if (errno == EPIPE) {
				spawn_sigpipe_take();
				log_debug("exec: task %llu closed its stdin; later input "
				    "is dropped", (unsigned long long)task);
			} else
				log_warn("exec: task %llu: writing stdin", (unsigned long long)task);
			in->program_closed = true;
			in->off = in->len = 0;
			spawn_close_fd(fd);
			break;
		}
		in->off += (size_t)n;
	}
	if (in->off == in->len) {
		in->off = in->len = 0;
		if (in->eof)
			spawn_close_fd(fd);
	}
	exec_input_room(in);
	pthread_mutex_unlock(&in->lock);
}

void
exec_input_end(struct exec_input *in)
{
	pthread_mutex_lock(&in->lock);
	in->over = true;
	free(in->buf);
	in->buf = NULL;
	in->off = in->len = in->cap = 0;
	exec_input_room(in);
	pthread_mutex_unlock(&in->lock);
}
