/*
 * mailbox.h: the hand-off from worker threads to the event-loop thread.
 *
 * Workers post messages (a task's done, a task's stream event) under one
 * mutex and wake the loop through an eventfd only when the mailbox was empty,
 * so a burst of completions costs one wake-up. The loop takes the whole list
 * under the lock and processes it unlocked.
 */
#ifndef TPD_MAILBOX_H
#define TPD_MAILBOX_H

#include <stddef.h>

#include <event2/event.h>
#include <jansson.h>

struct task;

enum mail_kind {
	MAIL_DONE,  /* the task ended; the pool handed it back */
	MAIL_EVENT, /* a stream event of a running task */
};

struct mail {
	enum mail_kind kind;
	struct task *task;
	json_t *event;   /* MAIL_EVENT */
	size_t weight;   /* MAIL_EVENT: bytes counted against the stream budget */
	struct mail *next;
};

typedef void (*mailbox_handler)(struct mail *);

/* Loop thread, at start: handler is called on the loop thread for each message. */
int mailbox_init(struct event_base *, mailbox_handler, char **cause);
void mailbox_free(void);

/* Loop thread: handles the messages already posted, if any (see mailbox.c). */
void mailbox_poll(void);

/* Any thread: posts m (malloc'd; the handler frees it). */
void mailbox_post(struct mail *m);

/*
 * Worker thread: posts a stream event, first waiting while more than budget
 * bytes of this task's events are unprocessed, unless the task is cancelled
 * or its deadline (monotonic us, 0 = none) passes.
 */
void mailbox_post_stream(struct mail *m, size_t budget, uint64_t deadline_us);

/* Loop thread: a stream event of t was processed; frees weight bytes of its budget. */
void mailbox_stream_processed(struct task *t, size_t weight);

/* Any thread: wakes workers blocked in mailbox_post_stream (after a cancel). */
void mailbox_wake_streams(void);

#endif
