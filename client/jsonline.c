/*
 * jsonline.c: one event line to a json_t, fast when it carries long strings.
 *
 * jansson's lexer reads a string a byte at a time through a callback and
 * an append per byte, then copies it again to unescape it: about 20ns a
 * byte, so a done carrying 16 MB of output took 0.3s to parse, nearly all
 * of tpctl's time reading it. jansson still parses every line here, but in
 * a long line the long string values (the output of a task, plain or
 * base64) are first taken out: each is checked and unescaped by the JSON
 * rules below in one tight pass and replaced in a copy of the line by a
 * short placeholder string; jansson parses that copy, and the placeholders
 * in the tree are replaced by the values.
 *
 * Nothing here decides what is JSON: the structure is jansson's. A lifted
 * string that breaks a rule jansson enforces (a control character, a bad
 * escape, a lone surrogate, bad UTF-8), a placeholder not found exactly
 * once among the values of the tree (the string was a key, or a duplicate
 * key dropped it), or a copy jansson refuses sends the whole original line
 * to jansson, for its verdict and its error message. A placeholder carries
 * a random nonce, so a daemon's string cannot pass for one.
 */
#include "config.h"

#include <sys/random.h>

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tpctl.h"

/* Lines shorter than this go to jansson as they are. */
#define JSONLINE_MIN_LINE 65536
/* String values at least this long (with their escapes) are taken out. */
#define JSONLINE_MIN_STRING 4096

#define JSONLINE_FLAGS JSON_ALLOW_NUL
/* A placeholder: "\u0000tpctl-lift-NONCE-INDEX" (a NUL, then ASCII). */
#define JSONLINE_TAG "tpctl-lift-"

struct jsonline_value {
	const char *data;       /* the value: into the line, or buf */
	size_t len;
	char *buf;              /* the unescaped value, when it had escapes */
	int found;              /* placeholders met in the tree */
};

/* Bytes that stand for themselves in a JSON string: ASCII from 0x20, but \ and ". */
static unsigned char jsonline_plain[256];
static uint64_t jsonline_nonce;
/* A placeholder's value up to its index: NUL, JSONLINE_TAG, the nonce, '-'. */
static char jsonline_prefix[64];
static size_t jsonline_prefix_len;

static void
jsonline_init(void)
{
	int c;

	if (jsonline_nonce != 0)
		return;
	for (c = 0x20; c < 0x80; c++)
		jsonline_plain[c] = c != '\\' && c != '"';
	if (getrandom(&jsonline_nonce, sizeof jsonline_nonce, GRND_NONBLOCK) !=
	    sizeof jsonline_nonce)
		jsonline_nonce = tpctl_now_us() ^ ((uint64_t)getpid() << 32);
	jsonline_nonce |= 1;
	jsonline_prefix[0] = '\0';
	jsonline_prefix_len = 1 + (size_t)snprintf(jsonline_prefix + 1,
	    sizeof jsonline_prefix - 1, JSONLINE_TAG "%016" PRIx64 "-", jsonline_nonce);
}

/*
 * The length of the UTF-8 sequence at s (n bytes left), or 0 when it is
 * not one jansson accepts: no overlong forms, no surrogates, at most
 * U+10FFFF.
 */
static size_t
jsonline_utf8(const unsigned char *s, size_t n)
{
	uint32_t cp;
	size_t len, i;

	if (s[0] >= 0xC2 && s[0] <= 0xDF)
		len = 2, cp = s[0] & 0x1F;
	else if (s[0] >= 0xE0 && s[0] <= 0xEF)
		len = 3, cp = s[0] & 0x0F;
	else if (s[0] >= 0xF0 && s[0] <= 0xF4)
		len = 4, cp = s[0] & 0x07;
	else
		return 0;
	if (n < len)
		return 0;
	for (i = 1; i < len; i++) {
		if ((s[i] & 0xC0) != 0x80)
			return 0;
		cp = cp << 6 | (s[i] & 0x3F);
	}
	if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
	    cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
		return 0;
	return len;
}

/* Four hex digits at s, or -1. */
static int32_t
jsonline_hex4(const unsigned char *s)
{
	int32_t v = 0;
	int i;

	for (i = 0; i < 4; i++) {
		v <<= 4;
		if (s[i] >= '0' && s[i] <= '9')
			v |= s[i] - '0';
		else if (s[i] >= 'a' && s[i] <= 'f')
			v |= s[i] - 'a' + 10;
		else if (s[i] >= 'A' && s[i] <= 'F')
			v |= s[i] - 'A' + 10;
		else
			return -1;
	}
	return v;
}

/*
 * Decodes the escape at s (n bytes left, s[0] is the backslash) into out.
 * Returns the bytes of s it used, or 0 when it is not valid JSON.
 */
static size_t
jsonline_escape(const unsigned char *s, size_t n, char *out, size_t *outlen)
{
	int32_t cp, lo;
	size_t used = 6;

	if (n < 2)
		return 0;
	switch (s[1]) {
	case '"': case '\\': case '/':
		*out = (char)s[1];
		*outlen = 1;
		return 2;
	case 'b': *out = '\b'; *outlen = 1; return 2;
	case 'f': *out = '\f'; *outlen = 1; return 2;
	case 'n': *out = '\n'; *outlen = 1; return 2;
	case 'r': *out = '\r'; *outlen = 1; return 2;
	case 't': *out = '\t'; *outlen = 1; return 2;
	case 'u':
		break;
	default:
		return 0;
	}
	if (n < 6 || (cp = jsonline_hex4(s + 2)) < 0)
		return 0;
	if (cp >= 0xDC00 && cp <= 0xDFFF)
		return 0;               /* a low surrogate first */
	if (cp >= 0xD800 && cp <= 0xDBFF) {
		if (n < 12 || s[6] != '\\' || s[7] != 'u' ||
		    (lo = jsonline_hex4(s + 8)) < 0xDC00 || lo > 0xDFFF)
			return 0;       /* a high surrogate alone */
		cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
		used = 12;
	}
	if (cp < 0x80) {
		out[0] = (char)cp;
		*outlen = 1;
	} else if (cp < 0x800) {
		out[0] = (char)(0xC0 | cp >> 6);
		out[1] = (char)(0x80 | (cp & 0x3F));
		*outlen = 2;
	} else if (cp < 0x10000) {
		out[0] = (char)(0xE0 | cp >> 12);
		out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
		out[2] = (char)(0x80 | (cp & 0x3F));
		*outlen = 3;
	} else {
		out[0] = (char)(0xF0 | cp >> 18);
		out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
		out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
		out[3] = (char)(0x80 | (cp & 0x3F));
		*outlen = 4;
	}
	return used;
}

/* Whether any byte of w is below n (n at most 128), or equal to c. */
#define JSONLINE_ONES 0x0101010101010101ULL
#define JSONLINE_HIGH 0x8080808080808080ULL
#define JSONLINE_HAS_LESS(w, n) \
	((((w) - JSONLINE_ONES * (n)) & ~(w) & JSONLINE_HIGH) != 0)
#define JSONLINE_HAS(w, c) JSONLINE_HAS_LESS((w) ^ (JSONLINE_ONES * (c)), 1)

/* The end of the run of plain bytes (jsonline_plain) from s[i], eight at a time. */
static size_t
jsonline_plain_run(const unsigned char *s, size_t i, size_t n)
{
	uint64_t w;

	for (; i + 8 <= n; i += 8) {
		memcpy(&w, s + i, 8);
		if ((w & JSONLINE_HIGH) != 0 || JSONLINE_HAS_LESS(w, 0x20) ||
		    JSONLINE_HAS(w, '\\') || JSONLINE_HAS(w, '"'))
			break;
	}
	while (i < n && jsonline_plain[s[i]])
		i++;
	return i;
}

/*
 * Checks and unescapes the body of a string token (between its quotes).
 * A body without escapes is its own value (v->data points into it); one
 * with escapes is unescaped into v->buf, never longer than the body.
 * Returns -1 when jansson would refuse it.
 */
static int
jsonline_unescape(const char *body, size_t n, struct jsonline_value *v)
{
	const unsigned char *s = (const unsigned char *)body;
	char *buf = NULL;
	size_t i = 0, j, o = 0, k, len;

	while (i < n) {
		j = jsonline_plain_run(s, i, n);
		if (buf != NULL) {
			memcpy(buf + o, s + i, j - i);
			o += j - i;
		}
		if ((i = j) == n)
			break;
		if (s[i] >= 0x80) {
			if ((k = jsonline_utf8(s + i, n - i)) == 0)
				goto bad;
			if (buf != NULL) {
				memcpy(buf + o, s + i, k);
				o += k;
			}
			i += k;
		} else if (s[i] == '\\') {
			if (buf == NULL) {
				if ((buf = malloc(n)) == NULL)
					goto bad;
				memcpy(buf, s, i);
				o = i;
			}
			if ((k = jsonline_escape(s + i, n - i, buf + o, &len)) == 0)
				goto bad;
			o += len;
			i += k;
		} else
			goto bad;       /* a control character (or a stray quote) */
	}
	v->buf = buf;
	v->data = buf != NULL ? buf : body;
	v->len = buf != NULL ? o : n;
	return 0;
bad:
	free(buf);
	return -1;
}

/* The end of the string token whose opening quote is at p: its closing quote, or NULL. */
static const char *
jsonline_string_end(const char *p, const char *end)
{
	const char *q = p + 1, *b;

	while ((q = memchr(q, '"', (size_t)(end - q))) != NULL) {
		/* escaped when an odd number of backslashes come before it */
		for (b = q; b > p + 1 && b[-1] == '\\'; b--)
			;
		if ((q - b) % 2 == 0)
			return q;
		q++;
	}
	return NULL;
}

/* The index of the value v is the placeholder of, or -1. */
static long
jsonline_placeholder(const json_t *v, size_t nvals)
{
	const char *s;
	char *end;
	size_t len;
	unsigned long k;

	if (!json_is_string(v))
		return -1;
	s = json_string_value(v);
	len = json_string_length(v);
	if (len <= jsonline_prefix_len ||
	    memcmp(s, jsonline_prefix, jsonline_prefix_len) != 0 ||
	    s[jsonline_prefix_len] < '0' || s[jsonline_prefix_len] > '9')
		return -1;
	k = strtoul(s + jsonline_prefix_len, &end, 10);
	if (end != s + len || k >= nvals)
		return -1;
	return (long)k;
}

/* Puts the values back for their placeholders under j. */
static void
jsonline_restore(json_t *j, struct jsonline_value *vals, size_t nvals)
{
	json_t *v;
	void *it;
	size_t i;
	long k;

	if (json_is_object(j)) {
		for (it = json_object_iter(j); it != NULL;
		    it = json_object_iter_next(j, it)) {
			v = json_object_iter_value(it);
			if ((k = jsonline_placeholder(v, nvals)) == -1) {
				jsonline_restore(v, vals, nvals);
				continue;
			}
			/* a failed set leaves it uncounted: the line is read again */
			if (json_object_iter_set_new(j, it, json_stringn_nocheck(
			    vals[k].data, vals[k].len)) == 0)
				vals[k].found++;
		}
	} else if (json_is_array(j)) {
		json_array_foreach(j, i, v) {
			if ((k = jsonline_placeholder(v, nvals)) == -1) {
				jsonline_restore(v, vals, nvals);
				continue;
			}
			if (json_array_set_new(j, i, json_stringn_nocheck(
			    vals[k].data, vals[k].len)) == 0)
				vals[k].found++;
		}
	}
}

/*
 * A copy of the line with its long string values taken out into vals, or
 * NULL (no long value, out of memory, or one jansson would refuse).
 */
static char *
jsonline_lift(const char *line, size_t len, struct jsonline_value **vals,
    size_t *nvals, size_t *outlen)
{
	const char *p = line, *end = line + len, *q, *next;
	struct jsonline_value *v = NULL, *nv;
	size_t n = 0, cap = 0, o = 0, copied = 0;
	char *out = NULL;

	while ((q = memchr(p, '"', (size_t)(end - p))) != NULL) {
		if ((next = jsonline_string_end(q, end)) == NULL)
			goto fail;
		next++;
		p = next;
		if ((size_t)(next - q) < JSONLINE_MIN_STRING)
			continue;
		if (out == NULL && (out = malloc(len)) == NULL)
			goto fail;
		if (n == cap) {
			cap = cap == 0 ? 4 : cap * 2;
			if ((nv = reallocarray(v, cap, sizeof *v)) == NULL)
				goto fail;
			v = nv;
		}
		memset(&v[n], 0, sizeof v[n]);
		if (jsonline_unescape(q + 1, (size_t)(next - q - 2), &v[n]) == -1)
			goto fail;
		n++;
		/* what came before it, then the placeholder (far shorter than it) */
		memcpy(out + o, line + copied, (size_t)(q - line) - copied);
		o += (size_t)(q - line) - copied;
		o += (size_t)snprintf(out + o, len - o, "\"\\u0000" JSONLINE_TAG
		    "%016" PRIx64 "-%zu\"", jsonline_nonce, n - 1);
		copied = (size_t)(next - line);
	}
	if (n == 0)
		goto fail;
	memcpy(out + o, line + copied, len - copied);
	o += len - copied;
	*vals = v;
	*nvals = n;
	*outlen = o;
	return out;
fail:
	while (n > 0)
		free(v[--n].buf);
	free(v);
	free(out);
	return NULL;
}

json_t *
jsonline_load(const char *line, size_t len, json_error_t *err)
{
	struct jsonline_value *vals = NULL;
	size_t nvals = 0, outlen, i;
	json_t *j = NULL;
	char *out;
	bool ok;

	if (len < JSONLINE_MIN_LINE)
		return json_loadb(line, len, JSONLINE_FLAGS, err);
	jsonline_init();
	if ((out = jsonline_lift(line, len, &vals, &nvals, &outlen)) != NULL &&
	    (j = json_loadb(out, outlen, JSONLINE_FLAGS, err)) != NULL) {
		jsonline_restore(j, vals, nvals);
		for (ok = true, i = 0; i < nvals; i++)
			ok = ok && vals[i].found == 1;
		if (!ok) {
			json_decref(j);
			j = NULL;
		}
	}
	for (i = 0; i < nvals; i++)
		free(vals[i].buf);
	free(vals);
	free(out);
	/* nothing taken out, or something amiss: jansson reads it all */
	if (j == NULL)
		j = json_loadb(line, len, JSONLINE_FLAGS, err);
	return j;
}
