/*
 * units.h: the one grammar of durations and sizes, for tpd (its flags and
 * tpd.conf) and tpctl alike, so that a value means the same in both.
 *
 *   duration  NUMBER UNIT, UNIT one of ms, s, m or min, h, d: 250ms, 1.5s,
 *             2min, 1h. A bare number is refused ("5: add a unit, as 5s or
 *             5ms"), except 0.
 *   size      NUMBER [k|M|G] [B|iB], powers of 1024, letters in either case:
 *             65536, 64k, 64KiB, 1.5M.
 *
 * NUMBER is decimal digits with an optional fraction (1.5, 0.25). A fraction
 * must come out whole in the unit counted (milliseconds, bytes): 1.5k is
 * 1536, 1.1k and 0.5ms are refused. No sign, no space, no exponent.
 */
#ifndef TPD_UNITS_H
#define TPD_UNITS_H

#include <stddef.h>
#include <stdint.h>

/*
 * Parses a duration into *ms. Returns 0; -1 when s is not a duration; -2
 * when it is one but too large for 64 bits of milliseconds. On failure *ms
 * is untouched and *cause (unless cause is NULL) is one line saying why,
 * quoting s (caller frees; NULL when out of memory).
 */
int units_parse_duration(const char *s, uint64_t *ms, char **cause);

/* Parses a size into *bytes; returns and explains as units_parse_duration. */
int units_parse_size(const char *s, uint64_t *bytes, char **cause);

/* A size as the grammar writes it, in the largest unit keeping it whole: "1G", "64k", "300". */
const char *units_format_size(uint64_t bytes, char *buf, size_t len);

/* A duration likewise: "7d", "1h", "10min", "5s", "250ms". */
const char *units_format_duration(uint64_t ms, char *buf, size_t len);

#endif
