/*
 * tpbench-scan.h: a textual scan of one NDJSON line's top-level members.
 *
 * The benchmark programs must not cost more per line than the server they
 * measure, so they do not build a JSON tree: they walk the object once,
 * note where "op", "event", "state", "id" and "task" are, and skip every
 * other value (strings with escapes, nested objects and arrays) by counting.
 */
#ifndef TPBENCH_SCAN_H
#define TPBENCH_SCAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct scan_span {
	const char *p;          /* NULL when the member is absent */
	size_t len;
};

struct scan_line {
	struct scan_span op;     /* string contents, without quotes */
	struct scan_span event;
	struct scan_span state;
	struct scan_span id;     /* the raw value text (number or quoted string) */
	struct scan_span task;   /* the raw value text */
	bool id_is_uint;
	uint64_t id_uint;        /* when id_is_uint */
};

/*
 * Scans the object in [p, end) (no newline). Returns 0, or -1 when the line
 * is not a JSON object as far as this shallow scan can tell.
 */
int scan_line(const char *p, const char *end, struct scan_line *out);

/* True when span equals the NUL-terminated s. */
bool scan_is(const struct scan_span *span, const char *s);

#endif
