/*
 * utf8.h: deciding whether captured output can travel as a JSON string, and
 * messages that quote a client's strings without breaking a character.
 *
 * "Text" here is strict UTF-8 (RFC 3629: no overlong forms, no surrogates,
 * nothing above U+10FFFF) without NUL bytes. NUL is valid UTF-8, but a JSON
 * string holding \u0000 is refused by many parsers (jansson among them
 * unless JSON_ALLOW_NUL is given), so output with NUL bytes goes as base64.
 *
 * An event is JSON, and the encoder (proto-encode.c) refuses a string that
 * is not UTF-8: a message cut inside a character would leave its request
 * without its answer (an internal error would replace it). So every message that quotes a client's string goes through
 * utf8_quote, and every message formatted into a fixed buffer through
 * utf8_format: both cut only at a character boundary, mark the cut with
 * "\u2026" (an ellipsis), and turn any byte that is not UTF-8 into '?'.
 */
#ifndef TPD_UTF8_H
#define TPD_UTF8_H

#include <stdarg.h>
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

/* The most bytes of a client's string a message quotes, before the ellipsis. */
#define UTF8_QUOTE_MAX 64
/* The size of utf8_quote's buffer: the bytes kept, the ellipsis (3 bytes) and a NUL. */
#define UTF8_QUOTE_SIZE (UTF8_QUOTE_MAX + 4)

/*
 * s as a message quotes it, written into buf (UTF8_QUOTE_SIZE bytes): whole
 * when it has at most UTF8_QUOTE_MAX bytes, else cut at the last character
 * boundary within them and followed by an ellipsis. Bytes that are not
 * UTF-8 become '?'. Returns buf, for use as a printf argument.
 */
const char *utf8_quote(char *buf, const char *s);

/*
 * vsnprintf into buf (size bytes, at least 1) that never ends inside a
 * character: when the text does not fit, it is cut at a character boundary
 * and ends with an ellipsis (when size leaves room for one). Bytes that are
 * not UTF-8 (from whatever the arguments held) become '?', so the result is
 * always valid UTF-8 if the format is. Returns the length written.
 */
size_t utf8_vformat(char *buf, size_t size, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));
size_t utf8_format(char *buf, size_t size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Replaces, in place, every byte of s[0..n) that is not part of a UTF-8 character with '?'. */
void utf8_scrub(char *s, size_t n);

#endif
