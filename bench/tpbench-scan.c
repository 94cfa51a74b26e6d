/*
 * tpbench-scan.c: the shallow top-level scan of an NDJSON line (see the
 * header). It trusts the peer to send JSON: it finds members, it does not
 * validate them.
 */
#include "config.h"

#include <string.h>

#include "tpbench-scan.h"

static const char *
scan_ws(const char *p, const char *end)
{
	while (p < end && (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n'))
		p++;
	return p;
}

/* p at the opening quote; returns just past the closing quote, or NULL. */
static const char *
scan_string(const char *p, const char *end)
{
	for (p++; p < end; p++) {
		if (*p == '\\')
			p++;
		else if (*p == '"')
			return p + 1;
	}
	return NULL;
}

/* Skips one value of any type; returns the first byte after it, or NULL. */
static const char *
scan_value(const char *p, const char *end)
{
	int depth = 0;

	if (p >= end)
		return NULL;
	if (*p == '"')
		return scan_string(p, end);
	if (*p != '{' && *p != '[') {
		while (p < end && *p != ',' && *p != '}' && *p != ']' &&
		    *p != ' ' && *p != '\t' && *p != '\r' && *p != '\n')
			p++;
		return p;
	}
	for (; p < end; p++) {
		switch (*p) {
		case '"':
			p = scan_string(p, end);
			if (p == NULL)
				return NULL;
			p--;
			break;
		case '{':
		case '[':
			depth++;
			break;
		case '}':
		case ']':
			if (--depth == 0)
				return p + 1;
			break;
		}
	}
	return NULL;
}

static void
scan_take_string(const char *v, const char *after, struct scan_span *span)
{
	if (*v == '"' && after - v >= 2) {
		span->p = v + 1;
		span->len = (size_t)(after - v - 2);
	}
}

int
scan_line(const char *p, const char *end, struct scan_line *out)
{
	memset(out, 0, sizeof *out);
	p = scan_ws(p, end);
	if (p >= end || *p != '{')
		return -1;
	p = scan_ws(p + 1, end);
	if (p < end && *p == '}')
		return 0;
	while (p < end) {
		const char *key, *keyend, *v, *after;
		size_t klen;

		if (*p != '"')
			return -1;
		key = p + 1;
		keyend = scan_string(p, end);
		if (keyend == NULL)
			return -1;
		klen = (size_t)(keyend - key - 1);
		p = scan_ws(keyend, end);
		if (p >= end || *p != ':')
			return -1;
		v = scan_ws(p + 1, end);
		after = scan_value(v, end);
		if (after == NULL || after == v)
			return -1;

		if (klen == 2 && memcmp(key, "id", 2) == 0) {
			out->id.p = v;
			out->id.len = (size_t)(after - v);
			if (*v >= '0' && *v <= '9') {
				uint64_t n = 0;
				const char *q;

				for (q = v; q < after && *q >= '0' && *q <= '9'; q++)
					n = n * 10 + (uint64_t)(*q - '0');
				out->id_is_uint = (q == after);
				out->id_uint = n;
			}
		} else if (klen == 2 && memcmp(key, "op", 2) == 0)
			scan_take_string(v, after, &out->op);
		else if (klen == 5 && memcmp(key, "event", 5) == 0)
			scan_take_string(v, after, &out->event);
		else if (klen == 5 && memcmp(key, "state", 5) == 0)
			scan_take_string(v, after, &out->state);
		else if (klen == 4 && memcmp(key, "task", 4) == 0) {
			out->task.p = v;
			out->task.len = (size_t)(after - v);
		}

		p = scan_ws(after, end);
		if (p >= end)
			return -1;
		if (*p == '}')
			return 0;
		if (*p != ',')
			return -1;
		p = scan_ws(p + 1, end);
	}
	return -1;
}

bool
scan_is(const struct scan_span *span, const char *s)
{
	size_t n = strlen(s);

	return span->p != NULL && span->len == n && memcmp(span->p, s, n) == 0;
}
