/* base64.c: RFC 4648 base64 encoding and strict decoding. */
#include "config.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#include "base64.h"

static const char base64_alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

size_t
base64_encoded_len(size_t n)
{
	return (n + 2) / 3 * 4;
}

char *
base64_encode(const void *s, size_t n)
{
	const unsigned char *p = s;
	char *out, *o;
	size_t i;

	if (n > (SIZE_MAX - 1) / 4 * 3 - 2) {
		errno = ENOMEM;
		return NULL;
	}
	if ((out = malloc(base64_encoded_len(n) + 1)) == NULL)
		return NULL;
	o = out;
	for (i = 0; i + 3 <= n; i += 3) {
		uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8 | p[i + 2];

		*o++ = base64_alphabet[v >> 18];
		*o++ = base64_alphabet[(v >> 12) & 63];
		*o++ = base64_alphabet[(v >> 6) & 63];
		*o++ = base64_alphabet[v & 63];
	}
	if (n - i == 1) {
		uint32_t v = (uint32_t)p[i] << 16;

		*o++ = base64_alphabet[v >> 18];
		*o++ = base64_alphabet[(v >> 12) & 63];
		*o++ = '=';
		*o++ = '=';
	} else if (n - i == 2) {
		uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8;

		*o++ = base64_alphabet[v >> 18];
		*o++ = base64_alphabet[(v >> 12) & 63];
		*o++ = base64_alphabet[(v >> 6) & 63];
		*o++ = '=';
	}
	*o = '\0';
	return out;
}

/*
 * The 6-bit value of each byte, or BAD for a byte outside the alphabet. A
 * table, not a chain of ranges: decoding a large binary result is a loop
 * over this and nothing else (about six times faster).
 */
#define BAD 0x80
static const unsigned char base64_values[256] = {
#define R8(x) x, x, x, x, x, x, x, x
	R8(BAD), R8(BAD), R8(BAD), R8(BAD), R8(BAD),               /* 0x00-0x27 */
	BAD, BAD, BAD, 62, BAD, BAD, BAD, 63,                      /* ( ) * + , - . / */
	52, 53, 54, 55, 56, 57, 58, 59, 60, 61,                    /* 0-9 */
	BAD, BAD, BAD, BAD, BAD, BAD, BAD,                         /* : ; < = > ? @ */
	0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,                  /* A-M */
	13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25,        /* N-Z */
	BAD, BAD, BAD, BAD, BAD, BAD,                              /* [ \ ] ^ _ ` */
	26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38,        /* a-m */
	39, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51,        /* n-z */
	BAD, BAD, BAD, BAD, BAD,                                   /* { | } ~ DEL */
	R8(BAD), R8(BAD), R8(BAD), R8(BAD), R8(BAD), R8(BAD), R8(BAD), R8(BAD),
	R8(BAD), R8(BAD), R8(BAD), R8(BAD), R8(BAD), R8(BAD), R8(BAD), R8(BAD),
#undef R8
};

unsigned char *
base64_decode(const char *s, size_t n, size_t *len)
{
	const unsigned char *p = (const unsigned char *)s;
	unsigned char *out, *o;
	size_t full;

	if (n % 4 != 0) {
		errno = EINVAL;
		return NULL;
	}
	if ((out = malloc(n / 4 * 3 + 1)) == NULL)
		return NULL;
	o = out;
	/* Every group but the last has no padding. */
	full = n >= 4 ? n - 4 : 0;
	for (size_t i = 0; i < full; i += 4) {
		unsigned a = base64_values[p[i]], b = base64_values[p[i + 1]],
		    c = base64_values[p[i + 2]], d = base64_values[p[i + 3]];
		uint32_t w;

		if ((a | b | c | d) & BAD)
			goto bad;
		w = (uint32_t)a << 18 | (uint32_t)b << 12 | (uint32_t)c << 6 | d;
		*o++ = (unsigned char)(w >> 16);
		*o++ = (unsigned char)(w >> 8);
		*o++ = (unsigned char)w;
	}
	if (n > 0) {
		const unsigned char *g = p + full;
		/* '=' only in the last two places of the last group */
		int pad = g[3] == '=' ? (g[2] == '=' ? 2 : 1) : 0;
		unsigned a = base64_values[g[0]], b = base64_values[g[1]],
		    c = pad == 2 ? 0 : base64_values[g[2]], d = pad >= 1 ? 0 : base64_values[g[3]];
		uint32_t w;

		if ((a | b | c | d) & BAD)
			goto bad;
		w = (uint32_t)a << 18 | (uint32_t)b << 12 | (uint32_t)c << 6 | d;
		/* the bits a padded group leaves over must be zero (canonical form) */
		if ((pad == 1 && (w & 0xFF) != 0) || (pad == 2 && (w & 0xFFFF) != 0))
			goto bad;
		*o++ = (unsigned char)(w >> 16);
		if (pad < 2)
			*o++ = (unsigned char)(w >> 8);
		if (pad < 1)
			*o++ = (unsigned char)w;
	}
	*o = '\0';
	*len = (size_t)(o - out);
	return out;
bad:
	free(out);
	errno = EINVAL;
	return NULL;
}
