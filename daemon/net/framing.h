/*
 * framing.h: splitting a byte stream into lines, with a length limit.
 *
 * Pure C (no event loop, no JSON, no global state): bytes go in as they
 * arrive, in pieces of any size, and a callback is called for each complete
 * line, and for each line longer than the limit. Complete lines are handed
 * over straight from the bytes given when they are whole there; only the
 * start of a line whose newline has not come is kept. Each byte is searched
 * for a newline once, however the line arrives.
 *
 * A line ends at "\n"; a "\r" just before it is dropped too, and empty lines
 * are skipped. The limit counts the bytes before the "\n" (a "\r" included):
 * a line of max bytes passes, one of max + 1 does not. A line that passes
 * the limit before its newline is reported at once (FRAMING_CUT) and its
 * bytes are dropped up to its newline as they arrive: nothing is kept
 * beyond the limit.
 *
 * The callback may pause: the bytes not yet split are then kept (copied, so
 * the caller may reuse its buffer) until framing_resume splits them. Feeding
 * more while paused is allowed; the new bytes wait behind the kept ones.
 */
#ifndef TPD_FRAMING_H
#define TPD_FRAMING_H

#include <stdbool.h>
#include <stddef.h>

struct framing_buf;

/* All zero is the start of a stream (as from calloc or FRAMING_INIT). */
struct framing {
	struct framing_buf *buf; /* held bytes; NULL when none */
	bool discarding;         /* dropping the rest of a line past the limit */
	size_t rest;             /* for the callback, during its call: the bytes given
	                            after the newline of the line it is told of, not
	                            split yet (0: that line ends what was given, so a
	                            pause there would keep nothing) */
};

#define FRAMING_INIT { NULL, false, 0 }

enum framing_event {
	FRAMING_LINE,     /* a complete line: line and len (without "\r\n"; len > 0) */
	FRAMING_TOO_LONG, /* a complete line longer than the limit: len bytes (line NULL) */
	FRAMING_CUT,      /* a line passed the limit before its newline: len bytes so far
	                     (line NULL); the rest of it is dropped up to its newline */
};

enum framing_next {
	FRAMING_GO,       /* go on with the next line */
	FRAMING_PAUSE,    /* stop after this line; keep the rest for framing_resume */
	FRAMING_STOP,     /* stop and drop the rest of the bytes given (the stream is
	                     then at an unknown point: reset f before feeding more) */
};

/*
 * Called for each line. line points into the bytes given or into f's own
 * buffer and is valid only during the call. The callback must not call a
 * framing function on the same f.
 */
typedef enum framing_next (*framing_fn)(void *arg, enum framing_event ev,
    const char *line, size_t len);

enum framing_result {
	FRAMING_DONE,     /* every byte was used; an unfinished line may be held */
	FRAMING_PAUSED,   /* the callback paused: framing_pending() bytes wait */
	FRAMING_STOPPED,  /* the callback stopped; the bytes after its line are gone */
	FRAMING_NOMEM,    /* out of memory keeping bytes: the stream cannot go on */
};

/*
 * Splits n bytes at p into lines, calling fn for each. max is the longest
 * line accepted, in bytes (at least 1); it may change between calls. When
 * bytes wait from a pause they are split first. p may be NULL when n is 0.
 */
enum framing_result framing_feed(struct framing *f, const char *p, size_t n, size_t max,
    framing_fn fn, void *arg);

/* Splits the bytes kept by a pause (nothing to do when none wait). */
enum framing_result framing_resume(struct framing *f, size_t max, framing_fn fn, void *arg);

/* Bytes given and not yet split (kept by a pause). */
size_t framing_pending(const struct framing *f);

/* Bytes of an unfinished line held (at most the limit). */
size_t framing_held(const struct framing *f);

/* Drops everything held: the next byte starts a line. Frees f's memory. */
void framing_reset(struct framing *f);

#endif
