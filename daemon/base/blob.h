/*
 * blob.h: an immutable text shared by reference. A done event's text is
 * built once, on the thread that ended the task, and then held by the task
 * (for later waits) and by every connection it is owed to but not yet
 * copied into: the last holder frees it, so a delivery held back by flow
 * control does not keep the task, and dropping the task does not cut a
 * delivery short.
 *
 * The count is not atomic: a blob is made on one thread and handed over
 * whole (through the mailbox) before anyone else sees it; from then on only
 * the loop thread holds and releases it.
 */
#ifndef TPD_BLOB_H
#define TPD_BLOB_H

#include <stddef.h>

struct blob {
	size_t refs;
	size_t len;    /* bytes of text in data */
	size_t cap;    /* room in data, while it is built */
	char data[];   /* the text, then a NUL */
};

/* A blob with room for cap bytes and a NUL, len 0, one reference; NULL when out of memory. */
struct blob *blob_new(size_t cap);

/* Grows b's room to at least cap bytes (b may move); NULL when out of memory (b is kept). */
struct blob *blob_grow(struct blob *b, size_t cap);

/* Gives back the room beyond len (b may move); done building. */
struct blob *blob_fit(struct blob *b);

/* One more holder; returns b. */
struct blob *blob_hold(struct blob *b);

/* One holder less; the last frees it. NULL is ignored. */
void blob_release(struct blob *b);

#endif
