/*
 * utf8.c: strict UTF-8 checks for captured output, and cuts of messages at
 * character boundaries (see utf8.h for what counts as text, and why).
 */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "utf8.h"

/*
 * For a lead byte: how many continuation bytes follow, and the range the
 * first of them must be in (that range is what rules out overlong forms,
 * surrogates and code points above U+10FFFF). Returns -1 for a byte that
 * cannot start a multi-byte sequence.
 */
static int
utf8_lead(unsigned char c, unsigned char *lo, unsigned char *hi)
{
	*lo = 0x80;
	*hi = 0xBF;
	if (c >= 0xC2 && c <= 0xDF)
		return 1;
	if (c >= 0xE0 && c <= 0xEF) {
		if (c == 0xE0)
			*lo = 0xA0;     /* overlong below U+0800 */
		else if (c == 0xED)
			*hi = 0x9F;     /* surrogates U+D800..U+DFFF */
		return 2;
	}
	if (c >= 0xF0 && c <= 0xF4) {
		if (c == 0xF0)
			*lo = 0x90;     /* overlong below U+10000 */
		else if (c == 0xF4)
			*hi = 0x8F;     /* above U+10FFFF */
		return 3;
	}
	return -1;
}

bool
utf8_text(const void *s, size_t n)
{
	const unsigned char *p = s;
	size_t i = 0;

	while (i < n) {
		unsigned char c = p[i], lo, hi;
		int need;

		if (c == 0)
			return false;
		if (c < 0x80) {
			i++;
			continue;
		}
		need = utf8_lead(c, &lo, &hi);
		if (need < 0 || n - i <= (size_t)need)
			return false;
		if (p[i + 1] < lo || p[i + 1] > hi)
			return false;
		for (int k = 2; k <= need; k++)
			if ((p[i + k] & 0xC0) != 0x80)
				return false;
		i += (size_t)need + 1;
	}
	return true;
}

size_t
utf8_partial_tail(const void *s, size_t n)
{
	const unsigned char *p = s;

	/* Walk back over at most three continuation bytes to the lead byte. */
	for (size_t k = 1; k <= 3 && k <= n; k++) {
		unsigned char c = p[n - k], lo, hi;
		int need;

		if ((c & 0xC0) == 0x80)
			continue;
		need = utf8_lead(c, &lo, &hi);
		if (need < 0 || (size_t)need < k)
			return 0;       /* ASCII, invalid, or a complete sequence */
		if (k >= 2 && (p[n - k + 1] < lo || p[n - k + 1] > hi))
			return 0;       /* already invalid: nothing to wait for */
		return k;
	}
	return 0;
}

void
utf8_scrub(char *s, size_t n)
{
	unsigned char *p = (unsigned char *)s;
	size_t i = 0;

	while (i < n) {
		unsigned char c = p[i], lo, hi;
		int need;
		bool ok;

		if (c < 0x80) {
			i++;
			continue;
		}
		need = utf8_lead(c, &lo, &hi);
		ok = need > 0 && n - i > (size_t)need && p[i + 1] >= lo && p[i + 1] <= hi;
		for (int k = 2; ok && k <= need; k++)
			ok = (p[i + k] & 0xC0) == 0x80;
		if (!ok) {
			p[i++] = '?';   /* one byte at a time: what follows may start a character */
			continue;
		}
		i += (size_t)need + 1;
	}
}

/* The length of s[0..n) cut to at most max bytes, never inside a character. */
static size_t
utf8_cut(const char *s, size_t n, size_t max)
{
	if (n <= max)
		return n;
	return max - utf8_partial_tail(s, max);
}

#define ELLIPSIS "\xE2\x80\xA6"      /* U+2026 */
#define ELLIPSIS_LEN 3

const char *
utf8_quote(char *buf, const char *s)
{
	size_t n = strlen(s), keep = utf8_cut(s, n, UTF8_QUOTE_MAX);

	memcpy(buf, s, keep);
	utf8_scrub(buf, keep);
	if (keep < n) {
		memcpy(buf + keep, ELLIPSIS, ELLIPSIS_LEN);
		keep += ELLIPSIS_LEN;
	}
	buf[keep] = '\0';
	return buf;
}

size_t
utf8_vformat(char *buf, size_t size, const char *fmt, va_list ap)
{
	int r = vsnprintf(buf, size, fmt, ap);
	size_t len;

	if (r < 0) {
		buf[0] = '\0';
		return 0;
	}
	len = (size_t)r;
	if (len >= size) {
		/* cut: vsnprintf kept size - 1 bytes; make room for the ellipsis */
		bool mark = size > ELLIPSIS_LEN + 1;
		len = size - 1 - (mark ? ELLIPSIS_LEN : 0);
		len -= utf8_partial_tail(buf, len);
		if (mark) {
			memcpy(buf + len, ELLIPSIS, ELLIPSIS_LEN);
			len += ELLIPSIS_LEN;
		}
		buf[len] = '\0';
	}
	utf8_scrub(buf, len);
	return len;
}

size_t
utf8_format(char *buf, size_t size, const char *fmt, ...)
{
	va_list ap;
	size_t len;

	va_start(ap, fmt);
	len = utf8_vformat(buf, size, fmt, ap);
	va_end(ap);
	return len;
}
