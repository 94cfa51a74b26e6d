/*
 * units.c: durations and sizes (units.h). The arithmetic is exact, on
 * integers: a fraction is multiplied into the unit digit by digit from its
 * last, each step a division by ten that must leave nothing over, so 1.5s is
 * 1500 ms and 0.0009765625k one byte, with no floating point to round them.
 */
#include "config.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "units.h"

#define KIB 1024ULL
#define MIB (1024ULL * KIB)
#define GIB (1024ULL * MIB)
#define SEC 1000ULL
#define MIN (60ULL * SEC)
#define HOUR (60ULL * MIN)
#define DAY (24ULL * HOUR)

static const struct {
	const char *name;
	uint64_t ms;
} duration_units[] = {
	{ "ms", 1 }, { "s", SEC }, { "m", MIN }, { "min", MIN }, { "h", HOUR }, { "d", DAY },
};

/* A NUMBER as written: its whole part and the digits of its fraction. */
struct units_number {
	uint64_t whole;
	bool whole_overflow;    /* more than 64 bits */
	const char *frac;       /* the digits after '.', or NULL */
	size_t nfrac;
	bool zero;              /* every digit a 0 */
};

static int units_fail(char **, int, const char *, ...) __attribute__((format(printf, 3, 4)));

/* Sets *cause (if wanted) and returns rv. */
static int
units_fail(char **cause, int rv, const char *fmt, ...)
{
	va_list ap;

	if (cause == NULL)
		return rv;
	va_start(ap, fmt);
	if (vasprintf(cause, fmt, ap) == -1)
		*cause = NULL;
	va_end(ap);
	return rv;
}

/* Reads the NUMBER at s; returns where it ends, or NULL when s does not start with one. */
static const char *
units_number_scan(const char *s, struct units_number *n)
{
	memset(n, 0, sizeof *n);
	n->zero = true;
	if (!isdigit((unsigned char)*s))
		return NULL;
	for (; isdigit((unsigned char)*s); s++) {
		unsigned d = (unsigned)(*s - '0');
		n->zero = n->zero && d == 0;
		if (n->whole > (UINT64_MAX - d) / 10)
			n->whole_overflow = true;
		else
			n->whole = n->whole * 10 + d;
	}
	if (*s != '.')
		return s;
	n->frac = ++s;
	if (!isdigit((unsigned char)*s))
		return NULL;
	for (; isdigit((unsigned char)*s); s++) {
		n->zero = n->zero && *s == '0';
		n->nfrac++;
	}
	return s;
}

/* n times mult, exactly: 0, -1 when not a whole number, -2 past 64 bits. */
static int
units_number_value(const struct units_number *n, uint64_t mult, uint64_t *out)
{
	uint64_t frac = 0, t;

	/* frac stays below mult, so t below 10 * mult: no overflow here */
	for (size_t i = n->nfrac; i-- > 0;) {
		t = (uint64_t)(n->frac[i] - '0') * mult + frac;
		if (t % 10 != 0)
			return -1;
		frac = t / 10;
	}
	if (n->whole_overflow || n->whole > (UINT64_MAX - frac) / mult)
		return -2;
	*out = n->whole * mult + frac;
	return 0;
}

int
units_parse_duration(const char *s, uint64_t *ms, char **cause)
{
	struct units_number n;
	const char *unit;
	uint64_t mult = 0, v;
	int r;

	if (cause != NULL)
		*cause = NULL;
	if (s == NULL || (unit = units_number_scan(s, &n)) == NULL)
		goto bad;
	if (*unit == '\0') {
		uint64_t in_s, in_ms;
		bool s_ok, ms_ok;

		if (n.zero) {
			*ms = 0;
			return 0;
		}
		/* suggest only what would be taken: 1.5 is 1.5s, never 1.5ms */
		s_ok = units_number_value(&n, SEC, &in_s) == 0;
		ms_ok = units_number_value(&n, 1, &in_ms) == 0;
		if (s_ok && ms_ok)
			return units_fail(cause, -1, "%s: add a unit, as %ss or %sms", s, s, s);
		if (s_ok)
			return units_fail(cause, -1, "%s: add a unit, as %ss", s, s);
		return units_fail(cause, -1, "%s: add a unit (ms, s, min, h, d), for a whole "
		    "number of milliseconds", s);
	}
	for (size_t i = 0; i < sizeof duration_units / sizeof duration_units[0]; i++)
		if (strcmp(unit, duration_units[i].name) == 0)
			mult = duration_units[i].ms;
	if (mult == 0)
		goto bad;
	if ((r = units_number_value(&n, mult, &v)) == -1)
		return units_fail(cause, -1, "\"%s\" is not a whole number of milliseconds", s);
	if (r == -2)
		return units_fail(cause, -2, "%s is too large", s);
	*ms = v;
	return 0;
bad:
	return units_fail(cause, -1, "\"%s\" is not a duration (like 500ms, 5s, 2min, 1h, 1d)",
	    s != NULL ? s : "");
}

int
units_parse_size(const char *s, uint64_t *bytes, char **cause)
{
	struct units_number n;
	const char *unit;
	uint64_t mult = 1, v;
	int r;

	if (cause != NULL)
		*cause = NULL;
	if (s == NULL || (unit = units_number_scan(s, &n)) == NULL)
		goto bad;
	if (*unit != '\0') {
		switch (tolower((unsigned char)*unit)) {
		case 'k': mult = KIB; break;
		case 'm': mult = MIB; break;
		case 'g': mult = GIB; break;
		default: goto bad;
		}
		unit++;
		if (*unit != '\0' && strcasecmp(unit, "b") != 0 && strcasecmp(unit, "ib") != 0)
			goto bad;
	}
	if ((r = units_number_value(&n, mult, &v)) == -1)
		return units_fail(cause, -1, "\"%s\" is not a whole number of bytes", s);
	if (r == -2)
		return units_fail(cause, -2, "%s is too large", s);
	*bytes = v;
	return 0;
bad:
	return units_fail(cause, -1, "\"%s\" is not a size (a number of bytes, or with k, M or G)",
	    s != NULL ? s : "");
}

const char *
units_format_size(uint64_t v, char *buf, size_t len)
{
	if (v != 0 && v % GIB == 0)
		snprintf(buf, len, "%lluG", (unsigned long long)(v / GIB));
	else if (v != 0 && v % MIB == 0)
		snprintf(buf, len, "%lluM", (unsigned long long)(v / MIB));
	else if (v != 0 && v % KIB == 0)
		snprintf(buf, len, "%lluk", (unsigned long long)(v / KIB));
	else
		snprintf(buf, len, "%llu", (unsigned long long)v);
	return buf;
}

const char *
units_format_duration(uint64_t ms, char *buf, size_t len)
{
	if (ms != 0 && ms % DAY == 0)
		snprintf(buf, len, "%llud", (unsigned long long)(ms / DAY));
	else if (ms != 0 && ms % HOUR == 0)
		snprintf(buf, len, "%lluh", (unsigned long long)(ms / HOUR));
	else if (ms != 0 && ms % MIN == 0)
		snprintf(buf, len, "%llumin", (unsigned long long)(ms / MIN));
	else if (ms != 0 && ms % SEC == 0)
		snprintf(buf, len, "%llus", (unsigned long long)(ms / SEC));
	else
		snprintf(buf, len, "%llums", (unsigned long long)ms);
	return buf;
}
