/*
 * mailbox.c: worker -> loop messages, one eventfd wake-up per batch.
 *
 * Posting is lock-free: a message is pushed on a stack with compare-and-swap
 * and the pusher that finds the stack empty wakes the loop. The loop takes
 * the whole stack with one exchange and reverses it, which restores the
 * order of posting (a task's stream events before its done). The mutex is
 * only for the stream budget, where a worker may have to wait.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "mailbox.h"
#include "task.h"

static _Atomic(struct mail *) inbox; /* newest first */

static struct {
	pthread_mutex_t lock;      /* guards stream budgets and waiters */
	pthread_cond_t stream_cv;  /* stream posters wait here for budget */
	unsigned stream_waiters;
	int efd;
	struct event *ev;
	mailbox_handler handler;
} mb = { .lock = PTHREAD_MUTEX_INITIALIZER, .efd = -1 };

/* Loop thread: take everything posted so far and handle it unlocked. */
static void
mailbox_drain(evutil_socket_t fd, short what, void *arg)
{
	uint64_t n;
	struct mail *m, *next, *fifo = NULL;

	/* Read before taking the list: a post after this read wakes us again. */
	if (read(fd, &n, sizeof n) == -1 && errno != EAGAIN)
		return;
	m = atomic_exchange_explicit(&inbox, NULL, memory_order_acquire);
	for (; m != NULL; m = next) { /* newest first -> oldest first */
		next = m->next;
		m->next = fifo;
		fifo = m;
	}
	for (m = fifo; m != NULL; m = next) {
		next = m->next;
		mb.handler(m);
	}
}

/*
 * Loop thread: handles what is already posted, without waiting for the
 * eventfd's wake-up. Called just before the loop writes its replies, so a
 * done that arrived meanwhile leaves in the same write as its accepted.
 */
void
mailbox_poll(void)
{
	if (atomic_load_explicit(&inbox, memory_order_relaxed) != NULL)
		mailbox_drain(mb.efd, EV_READ, NULL);
}

int
mailbox_init(struct event_base *base, mailbox_handler handler, char **cause)
{
	pthread_condattr_t ca;

	mb.handler = handler;
	if ((mb.efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) == -1) {
		if (asprintf(cause, "eventfd: %s", strerror(errno)) == -1)
			*cause = NULL;
		return -1;
	}
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&mb.stream_cv, &ca);
	pthread_condattr_destroy(&ca);
	mb.ev = event_new(base, mb.efd, EV_READ | EV_PERSIST, mailbox_drain, NULL);
	event_add(mb.ev, NULL);
	return 0;
}

void
mailbox_free(void)
{
	if (mb.ev != NULL)
		event_free(mb.ev);
	if (mb.efd != -1)
		close(mb.efd);
	mb.ev = NULL;
	mb.efd = -1;
}

/* Pushes m; true when the inbox was empty, so the loop must be woken. */
static bool
push(struct mail *m)
{
	struct mail *head = atomic_load_explicit(&inbox, memory_order_relaxed);

	do
		m->next = head;
	while (!atomic_compare_exchange_weak_explicit(&inbox, &head, m,
	    memory_order_release, memory_order_relaxed));
	return head == NULL;
}

static void
wake_loop(void)
{
	uint64_t one = 1;

	/* EAGAIN means the counter is already non-zero: the loop will wake. */
	if (write(mb.efd, &one, sizeof one) == -1 && errno != EAGAIN)
		abort();
}

void
mailbox_post(struct mail *m)
{
	if (push(m))
		wake_loop();
}

void
mailbox_post_stream(struct mail *m, size_t budget, uint64_t deadline_us)
{
	struct task *t = m->task;
	struct timespec ts;

	pthread_mutex_lock(&mb.lock);
	while (t->stream_pending > budget && !task_cancelled(t)) {
		mb.stream_waiters++;
		if (deadline_us == 0)
			pthread_cond_wait(&mb.stream_cv, &mb.lock);
		else if (clock_now_us() < deadline_us) {
			ts.tv_sec = (time_t)(deadline_us / 1000000);
			ts.tv_nsec = (long)(deadline_us % 1000000) * 1000;
			pthread_cond_timedwait(&mb.stream_cv, &mb.lock, &ts);
		}
		mb.stream_waiters--;
		if (deadline_us != 0 && clock_now_us() >= deadline_us)
			break;
	}
	t->stream_pending += m->weight;
	pthread_mutex_unlock(&mb.lock);
	if (push(m))
		wake_loop();
}

void
mailbox_stream_processed(struct task *t, size_t weight)
{
	pthread_mutex_lock(&mb.lock);
	t->stream_pending -= weight;
	if (mb.stream_waiters > 0)
		pthread_cond_broadcast(&mb.stream_cv);
	pthread_mutex_unlock(&mb.lock);
}

void
mailbox_wake_streams(void)
{
	pthread_mutex_lock(&mb.lock);
	pthread_cond_broadcast(&mb.stream_cv);
	pthread_mutex_unlock(&mb.lock);
}
