/*
 * mailbox.h: the hand-off from worker threads to the event-loop thread.
 *
 * A message is a struct mail embedded in its sender's record, with the
 * function the loop calls for it. Posting is a lock-free push (a
 * compare-and-swap on a stack), and only the push that finds the mailbox
 * empty wakes the loop, through an eventfd: a burst of completions costs one
 * wake-up. The loop takes the whole stack with one exchange, restores the
 * order of posting, and calls each message's function, unlocked. The
 * mailbox knows nothing of what it carries.
 */
#ifndef TPD_MAILBOX_H
#define TPD_MAILBOX_H

#include <event2/event.h>

struct mail;

/* Loop thread: handles m; m belongs to the function from then on. */
typedef void (*mail_fn)(struct mail *m);

struct mail {
	mail_fn deliver;        /* set by the sender */
	struct mail *next;      /* the mailbox's */
};

/* Loop thread, at start. Returns 0, or -1 with *cause set. */
int mailbox_init(struct event_base *, char **cause);
void mailbox_free(void);

/* Loop thread: handles the messages already posted, if any (see mailbox.c). */
void mailbox_poll(void);

/* Any thread: posts m, which is handed to m->deliver on the loop thread, in posting order. */
void mailbox_post(struct mail *m);

#endif
