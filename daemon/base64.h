/* base64.h: RFC 4648 base64 (standard alphabet, padded) for binary output and stdin. */
#ifndef TPD_BASE64_H
#define TPD_BASE64_H

#include <stddef.h>

/* The length of the encoding of n bytes, without the terminating NUL. */
size_t base64_encoded_len(size_t n);

/* Encodes s[0..n) into a new NUL-terminated string; NULL when out of memory. */
char *base64_encode(const void *s, size_t n);

/*
 * Decodes s[0..n) strictly: only the standard alphabet, a length that is a
 * multiple of 4, '=' only as final padding, no whitespace. Returns a new
 * buffer (NUL-terminated for convenience) and its length in *len, or NULL
 * when the input is not base64 (errno EINVAL) or memory ran out (ENOMEM).
 */
unsigned char *base64_decode(const char *s, size_t n, size_t *len);

#endif
