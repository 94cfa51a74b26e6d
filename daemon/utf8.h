/*
 * utf8.h: deciding whether captured output can travel as a JSON string.
 *
 * "Text" here is strict UTF-8 (RFC 3629: no overlong forms, no surrogates,
 * nothing above U+10FFFF) without NUL bytes. NUL is valid UTF-8, but a JSON
 * string holding \u0000 is refused by many parsers (jansson among them
 * unless JSON_ALLOW_NUL is given), so output with NUL bytes goes as base64.
 */
#ifndef TPD_UTF8_H
#define TPD_UTF8_H

#include <stdbool.h>
#include <stddef.h>

/* True when s[0..n) is text as defined above. */
bool utf8_text(const void *s, size_t n);

/*
 * The length (1 to 3) of an incomplete but so far valid multi-byte sequence
 * at the end of s[0..n), or 0 when s does not end inside one. Used to split
 * a stream of output at character boundaries.
 */
size_t utf8_partial_tail(const void *s, size_t n);

#endif
