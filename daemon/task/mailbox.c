/*
 * mailbox.c: worker -> loop messages, one eventfd wake-up per batch.
 *
 * Posting is lock-free: a message is pushed on a stack with compare-and-swap
 * and the pusher that finds the stack empty wakes the loop. The loop takes
 * the whole stack with one exchange and reverses it, which restores the
 * order of posting (a task's stream events before its done). There is no
 * lock here: a worker that must wait (a task's stream budget) waits in
 * task.c before it posts.
 */
#include "config.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "base/log.h"
#include "mailbox.h"

static _Atomic(struct mail *) inbox; /* newest first */

static struct {
	int efd;
	struct event *ev;
} mb = { .efd = -1 };

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
		m->deliver(m);
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
mailbox_init(struct event_base *base, char **cause)
{
	if ((mb.efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) == -1)
		return cause_set(cause, "eventfd: %s", strerror(errno));
	if ((mb.ev = event_new(base, mb.efd, EV_READ | EV_PERSIST, mailbox_drain, NULL)) == NULL ||
	    event_add(mb.ev, NULL) == -1)
		return cause_set(cause, "cannot watch the mailbox's eventfd");
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

void
mailbox_post(struct mail *m)
{
	uint64_t one = 1;

	/* EAGAIN means the counter is already non-zero: the loop will wake. */
	if (push(m) && write(mb.efd, &one, sizeof one) == -1 && errno != EAGAIN)
		abort();
}
