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

/* The 6-bit value of an alphabet character, or -1. */
static int
base64_value(unsigned char c)
{
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 'a' && c <= 'z')
		return c - 'a' + 26;
	if (c >= '0' && c <= '9')
		return c - '0' + 52;
	if (c == '+')
		return 62;
	if (c == '/')
		return 63;
	return -1;
}

unsigned char *
base64_decode(const char *s, size_t n, size_t *len)
{
	unsigned char *out, *o;

	if (n % 4 != 0) {
		errno = EINVAL;
		return NULL;
	}
	if ((out = malloc(n / 4 * 3 + 1)) == NULL)
		return NULL;
	o = out;
	for (size_t i = 0; i < n; i += 4) {
		int v[4], pad = 0;

		for (int k = 0; k < 4; k++) {
			unsigned char c = (unsigned char)s[i + k];

			/* '=' only in the last two places of the last group */
			if (c == '=' && i + 4 == n && k >= 2 &&
			    (k == 3 || s[i + 3] == '=')) {
				v[k] = 0;
				pad++;
				continue;
			}
			if ((v[k] = base64_value(c)) < 0)
				goto bad;
		}
		uint32_t w = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 |
		    (uint32_t)v[2] << 6 | (uint32_t)v[3];
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
