/* capture.c: bounded capture of one output stream and its JSON form (see capture.h). */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "base64.h"
#include "capture.h"
#include "base/log.h"
#include "base/utf8.h"
#include "wire.h"

#define CAPTURE_FIRST_SIZE 4096

void
capture_init(struct capture *c, size_t limit)
{
	memset(c, 0, sizeof *c);
	c->limit = limit;
}

void
capture_free(struct capture *c)
{
	free(c->buf);
	c->buf = NULL;
	c->len = c->size = 0;
}

/* Makes room for want bytes in all (want <= limit); false when out of memory. */
static bool
capture_grow(struct capture *c, size_t want)
{
	size_t size = c->size != 0 ? c->size : CAPTURE_FIRST_SIZE;
	char *buf;

	if (want <= c->size)
		return true;
	while (size < want)
		size = size > c->limit / 2 ? c->limit : size * 2;
	if (size > c->limit)
		size = c->limit;
	if ((buf = realloc(c->buf, size)) == NULL)
		return false;
	c->buf = buf;
	c->size = size;
	return true;
}

size_t
capture_add(struct capture *c, const void *data, size_t n)
{
	size_t room = c->limit - c->len, keep = n < room ? n : room;

	c->seen += n;
	if (keep > 0 && !capture_grow(c, c->len + keep)) {
		log_warnx("exec: out of memory capturing output; discarding the rest");
		c->limit = c->len;
		keep = 0;
	}
	if (keep > 0) {
		memcpy(c->buf + c->len, data, keep);
		c->len += keep;
	}
	if (keep < n)
		c->truncated = true;
	return keep;
}

int
capture_json_set(json_t *obj, const char *text_key, const char *b64_key,
    const void *data, size_t len)
{
	json_t *v = NULL;
	const char *key = text_key;

	if (utf8_text(data, len))
		v = json_stringn(data, len);
	if (v == NULL) {
		/* not text (or jansson disagreed): base64 */
		char *b64 = base64_encode(data, len);

		if (b64 == NULL)
			return -1;
		v = json_stringn_nocheck(b64, base64_encoded_len(len));
		free(b64);
		key = b64_key;
	}
	if (v == NULL || json_object_set_new(obj, key, v) != 0)
		return -1;
	return 0;
}

/*
 * The bytes at the end of a truncated capture that the result leaves out: a
 * character the limit cut in two, when everything before it is text.
 */
static size_t
capture_text_cut(const struct capture *c)
{
	size_t cut;

	if (!c->truncated || c->len == 0)
		return 0;
	cut = utf8_partial_tail(c->buf, c->len);
	if (cut > 0 && !utf8_text(c->buf, c->len - cut))
		cut = 0;
	return cut;
}

int
capture_result_set(const struct capture *c, json_t *result,
    const char *text_key, const char *b64_key)
{
	return capture_json_set(result, text_key, b64_key,
	    c->buf != NULL ? c->buf : "", c->len - capture_text_cut(c));
}

long
capture_chunk(struct capture *c, json_t *obj, const void *data, size_t n,
    bool final)
{
	size_t total = c->ncarry + n, hold;
	char *chunk;
	int rc;

	if (total == 0)
		return 0;
	if ((chunk = malloc(total)) == NULL)
		return -1;
	memcpy(chunk, c->carry, c->ncarry);
	if (n > 0)
		memcpy(chunk + c->ncarry, data, n);
	/* at the end what is held back goes as it is: the stream is never cut */
	hold = final ? 0 : utf8_partial_tail(chunk, total);
	if (hold > total)
		hold = total;
	/* after the final chunk nothing is carried over: a cut piece is dropped */
	c->ncarry = final ? 0 : hold;
	memcpy(c->carry, chunk + total - hold, c->ncarry);
	total -= hold;
	rc = total > 0 ? capture_json_set(obj, FIELD_DATA, FIELD_DATA_BASE64, chunk, total) : 0;
	free(chunk);
	return rc == 0 ? (long)total : -1;
}
