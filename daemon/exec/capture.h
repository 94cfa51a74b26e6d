/*
 * capture.h: one output stream of an exec task (stdout or stderr): the bytes
 * kept for the result, bounded by the task's output_limit, and the JSON form
 * those bytes travel in (a string when they are text, base64 otherwise; see
 * utf8.h for "text").
 *
 * Worker thread only: a capture belongs to the run that fills it.
 */
#ifndef TPD_CAPTURE_H
#define TPD_CAPTURE_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

struct capture {
	char *buf;
	size_t len;             /* bytes kept */
	size_t size;            /* allocated; grows up to limit */
	size_t limit;           /* most bytes kept */
	size_t seen;            /* bytes offered, kept or not */
	bool truncated;         /* some bytes were discarded */

	/* streaming: an incomplete UTF-8 sequence held back for the next chunk */
	char carry[4];
	size_t ncarry;
};

void capture_init(struct capture *c, size_t limit);
void capture_free(struct capture *c);

/*
 * Offers n bytes. Keeps the prefix that fits under the limit and returns its
 * length; the rest is discarded and marks the capture truncated. Running out
 * of memory is treated like reaching the limit (logged), so the child is
 * still drained and never blocks.
 */
size_t capture_add(struct capture *c, const void *data, size_t n);

/*
 * Sets obj[text_key] to data as a string when it is text, else
 * obj[b64_key] to its base64. Returns 0, or -1 when out of memory.
 */
int capture_json_set(json_t *obj, const char *text_key, const char *b64_key,
    const void *data, size_t len);

/*
 * Sets the capture's field in a result ("stdout" or "stdout_base64", ...).
 * When the limit cut a character in two, the cut piece is left out so that
 * a text capture stays text.
 */
int capture_result_set(const struct capture *c, json_t *result,
    const char *text_key, const char *b64_key);

/*
 * Streaming: forms the next "output" event's payload from data (bytes just
 * read, kept by capture_add or not: the stream is not cut by the limit). A
 * multi-byte character split between two reads is held back and sent whole
 * with the next chunk; at the end (final true) what is held back is sent as
 * it is. Sets obj["data"] or
 * obj["data_base64"]; returns the payload's length in bytes (0: nothing to
 * send, obj untouched), or -1 when out of memory.
 */
long capture_chunk(struct capture *c, json_t *obj, const void *data,
    size_t n, bool final);

#endif
