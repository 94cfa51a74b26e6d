/*
 * format.c: what tpctl shows people and reads from them: durations
 * ("500ms", "2.1s", "3m"), sizes ("12.3 MiB"), integers, what a task used,
 * table cells, and aligned tables. Durations and sizes are read with common/units.c, the grammar tpd
 * reads too.
 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <locale.h>
#include <stdlib.h>
#include <string.h>
#include <wchar.h>

#include "tpctl.h"
#include "units.h"
#include "wire.h"

/* The grammar of common/units.h, as tpd's flags and tpd.conf read it. */
int
format_parse_duration(const char *s, uint64_t *ms)
{
	return units_parse_duration(s, ms, NULL) == 0 ? 0 : -1;
}

char *
format_duration(double ms, char *buf, size_t len)
{
	unsigned long long v;

	if (!(ms >= 0))         /* negative or NaN */
		ms = 0;
	if (ms < 9.95 && ms != 0 && ms != (double)(unsigned long long)ms) {
		snprintf(buf, len, ms < 0.995 ? "%.2fms" : "%.1fms", ms);
		return buf;
	}
	v = (unsigned long long)(ms + 0.5);
	if (ms > 1.8e19)
		v = ~0ULL;
	if (v < 1000)
		snprintf(buf, len, "%llums", v);
	else if (v < 10000 && (v % 1000) / 100 != 0)
		snprintf(buf, len, "%llu.%llus", v / 1000, (v % 1000) / 100);
	else if (v < 60000)
		snprintf(buf, len, "%llus", v / 1000);
	else if (v < 3600000) {
		if ((v / 1000) % 60 != 0)
			snprintf(buf, len, "%llum%llus", v / 60000, (v / 1000) % 60);
		else
			snprintf(buf, len, "%llum", v / 60000);
	} else if (v < 86400000ULL) {
		if ((v / 60000) % 60 != 0)
			snprintf(buf, len, "%lluh%llum", v / 3600000, (v / 60000) % 60);
		else
			snprintf(buf, len, "%lluh", v / 3600000);
	} else {
		if ((v / 3600000) % 24 != 0)
			snprintf(buf, len, "%llud%lluh", v / 86400000, (v / 3600000) % 24);
		else
			snprintf(buf, len, "%llud", v / 86400000);
	}
	return buf;
}

int
format_parse_size(const char *s, uint64_t *out)
{
	return units_parse_size(s, out, NULL) == 0 ? 0 : -1;
}

char *
format_bytes(uint64_t bytes, char *buf, size_t len)
{
	static const char *const units[] = { "KiB", "MiB", "GiB", "TiB", "PiB", "EiB" };
	double v = (double)bytes / 1024;
	size_t u = 0;

	if (bytes < 1024) {
		snprintf(buf, len, "%llu B", (unsigned long long)bytes);
		return buf;
	}
	/* the unit that keeps it below 1024 once rounded to a tenth */
	while (v >= 1023.95 && u + 1 < sizeof units / sizeof units[0]) {
		v /= 1024;
		u++;
	}
	if (bytes % (1ULL << (10 * (u + 1))) == 0)
		snprintf(buf, len, "%.0f %s", v, units[u]);
	else
		snprintf(buf, len, "%.1f %s", v, units[u]);
	return buf;
}

char *
format_usage(const json_t *usage, char *buf, size_t len)
{
	char peak[FORMAT_BYTES_LEN];
	json_t *rss;
	int n;

	if (!json_is_object(usage) ||
	    !json_is_number(json_object_get(usage, FIELD_USER_MS)) ||
	    !json_is_number(json_object_get(usage, FIELD_SYSTEM_MS)))
		return NULL;
	n = snprintf(buf, len, "cpu %.2fs user, %.2fs system",
	    event_num(usage, FIELD_USER_MS, 0) / 1000,
	    event_num(usage, FIELD_SYSTEM_MS, 0) / 1000);
	rss = json_object_get(usage, FIELD_MAX_RSS_BYTES);
	if (json_is_integer(rss) && json_integer_value(rss) >= 0 && n >= 0 &&
	    (size_t)n < len)
		snprintf(buf + n, len - (size_t)n, ", peak %s%s",
		    json_is_true(json_object_get(usage, FIELD_MAX_RSS_UPPER_BOUND)) ?
		    "at most " : "",
		    format_bytes((uint64_t)json_integer_value(rss), peak, sizeof peak));
	return buf;
}

int
format_parse_int(const char *s, long long min, long long max, long long *out)
{
	long long v;
	char *end;

	if (*s == '\0' || isspace((unsigned char)*s))
		return -1;
	errno = 0;
	v = strtoll(s, &end, 10);
	if (errno != 0 || *end != '\0' || v < min || v > max)
		return -1;
	*out = v;
	return 0;
}

char *
format_cell(const char *key, const json_t *v)
{
	char buf[FORMAT_DURATION_LEN];
	size_t klen = strlen(key);

	if (json_is_number(v) && klen > 3 && strcmp(key + klen - 3, "_ms") == 0 &&
	    json_number_value(v) >= 0)
		return strdup(format_duration(json_number_value(v), buf, sizeof buf));
	if (json_is_string(v))
		return strdup(json_string_value(v));
	if (json_is_null(v))
		return strdup("-");
	return json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
}

/* A control character at s (C0, DEL, or C1 in UTF-8): its length, else 0. */
static size_t
format_control_len(const unsigned char *s)
{
	if (*s < 0x20 || *s == 0x7f)
		return 1;
	if (s[0] == 0xc2 && s[1] >= 0x80 && s[1] <= 0x9f)
		return 2;
	return 0;
}

const char *
format_safe(const char *s)
{
	static char *slots[FORMAT_SAFE_SLOTS];
	static size_t next;
	const unsigned char *p;
	size_t n = 0, k;
	char *out, *o;

	if (s == NULL)
		return NULL;
	for (p = (const unsigned char *)s; *p != '\0'; p += k ? k : 1)
		if ((k = format_control_len(p)) != 0)
			n++;
	if (n == 0)
		return s;
	if ((out = malloc(strlen(s) + n * 6 + 1)) == NULL)
		return "(a text tpctl could not show safely: out of memory)";
	for (p = (const unsigned char *)s, o = out; *p != '\0'; )
		if ((k = format_control_len(p)) == 1) {
			o += sprintf(o, "\\x%02x", *p);
			p++;
		} else if (k == 2) {
			o += sprintf(o, "\\u%04x", p[1]);
			p += 2;
		} else
			*o++ = (char)*p++;
	*o = '\0';
	free(slots[next]);
	slots[next] = out;
	next = (next + 1) % FORMAT_SAFE_SLOTS;
	return out;
}

char *
format_command(const char *command)
{
	char *s = strdup(command != NULL ? command : "-"), *p;

	for (p = s; p != NULL && *p != '\0'; p++)
		if ((unsigned char)*p < 0x20 || *p == 0x7f)
			*p = '?';
	return s;
}

struct table {
	char *align;
	size_t ncols;
	char **cells;           /* rows * ncols, the first row the headers */
	size_t nrows;
};

struct table *
table_new(const char *align, const char *const *headers)
{
	struct table *t;

	if ((t = calloc(1, sizeof *t)) == NULL || (t->align = strdup(align)) == NULL) {
		free(t);
		return NULL;
	}
	t->ncols = strlen(align);
	table_add(t, headers);
	return t;
}

void
table_add(struct table *t, const char *const *cells)
{
	char **n;
	size_t i;

	n = realloc(t->cells, (t->nrows + 1) * t->ncols * sizeof *n);
	if (n == NULL)
		return;
	t->cells = n;
	for (i = 0; i < t->ncols; i++)
		n[t->nrows * t->ncols + i] = strdup(cells[i] != NULL ? format_safe(cells[i]) : "");
	t->nrows++;
}

size_t
format_width(const char *s)
{
	static locale_t utf8;
	static bool tried;
	locale_t old;
	mbstate_t st;
	size_t w = 0, left = strlen(s), n;
	wchar_t wc;
	int cw;

	/* the columns a terminal gives s: an accent 1, an emoji or a CJK character 2 */
	if (!tried) {
		tried = true;
		utf8 = newlocale(LC_CTYPE_MASK, "C.UTF-8", (locale_t)0);
	}
	if (utf8 == (locale_t)0)
		return left;
	old = uselocale(utf8);
	memset(&st, 0, sizeof st);
	while (left > 0) {
		n = mbrtowc(&wc, s, left, &st);
		if (n == (size_t)-1 || n == (size_t)-2 || n == 0) {
			/* a byte that is not UTF-8 shows as one replacement */
			memset(&st, 0, sizeof st);
			w++;
			s++;
			left--;
			continue;
		}
		cw = wcwidth(wc);
		w += cw < 0 ? 1 : (size_t)cw;
		s += n;
		left -= n;
	}
	uselocale(old);
	return w;
}

/* Writes cell padded with blanks to width columns (on the left when right). */
static void
table_pad(FILE *f, const char *cell, size_t width, bool right)
{
	size_t w = format_width(cell);

	if (!right)
		fputs(cell, f);
	for (; w < width; w++)
		fputc(' ', f);
	if (right)
		fputs(cell, f);
}

void
table_print(const struct table *t, FILE *f)
{
	size_t *width, r, c, w;
	const char *cell;

	if ((width = calloc(t->ncols, sizeof *width)) == NULL)
		return;
	for (r = 0; r < t->nrows; r++)
		for (c = 0; c < t->ncols; c++) {
			cell = t->cells[r * t->ncols + c];
			w = cell != NULL ? format_width(cell) : 0;
			if (w > width[c])
				width[c] = w;
		}
	for (r = 0; r < t->nrows; r++) {
		size_t ncols = t->ncols;
		/* empty cells at the end of a row are left out: no trailing blanks */
		while (ncols > 1 && (t->cells[r * t->ncols + ncols - 1] == NULL ||
		    *t->cells[r * t->ncols + ncols - 1] == '\0'))
			ncols--;
		for (c = 0; c < ncols; c++) {
			cell = t->cells[r * t->ncols + c];
			if (cell == NULL)
				cell = "";
			if (c > 0)
				fputs("  ", f);
			if (t->align[c] == 'r')
				table_pad(f, cell, width[c], true);
			else if (c + 1 == ncols)
				fputs(cell, f);     /* no trailing blanks */
			else
				table_pad(f, cell, width[c], false);
		}
		fputc('\n', f);
	}
	free(width);
}

void
table_free(struct table *t)
{
	size_t i;

	if (t == NULL)
		return;
	for (i = 0; i < t->nrows * t->ncols; i++)
		free(t->cells[i]);
	free(t->cells);
	free(t->align);
	free(t);
}
