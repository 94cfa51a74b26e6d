/*
 * fmt.h: text building for the hot paths (accepted, pong, a done event),
 * where snprintf's format parsing cost more than the rest of the reply.
 * A struct fmt writes into a caller's buffer and remembers an overflow.
 * Only the event encoder (proto-encode.c) uses it: every number on the
 * wire is written there.
 */
#ifndef TPD_FMT_H
#define TPD_FMT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

struct fmt {
	char *p;
	char *end;
	bool overflow;
};

static inline struct fmt
fmt_init(char *buf, size_t len)
{
	struct fmt f = { buf, buf + len, false };
	return f;
}

static inline void
fmt_mem(struct fmt *f, const char *s, size_t n)
{
	if (f->overflow || (size_t)(f->end - f->p) < n) {
		f->overflow = true;
		return;
	}
	memcpy(f->p, s, n);
	f->p += n;
}

static inline void
fmt_str(struct fmt *f, const char *s)
{
	fmt_mem(f, s, strlen(s));
}

static inline void
fmt_u64(struct fmt *f, uint64_t v)
{
	char digits[20];
	size_t n = sizeof digits;

	do
		digits[--n] = (char)('0' + v % 10);
	while ((v /= 10) != 0);
	fmt_mem(f, digits + n, sizeof digits - n);
}

static inline void
fmt_i64(struct fmt *f, int64_t v)
{
	if (v < 0) {
		fmt_mem(f, "-", 1);
		fmt_u64(f, (uint64_t)0 - (uint64_t)v);
	} else
		fmt_u64(f, (uint64_t)v);
}

/* Microseconds as milliseconds with three decimals: what "%.3f" of us / 1000.0 prints. */
static inline void
fmt_ms(struct fmt *f, uint64_t us)
{
	char frac[4] = { '.', (char)('0' + us / 100 % 10), (char)('0' + us / 10 % 10),
	    (char)('0' + us % 10) };

	fmt_u64(f, us / 1000);
	fmt_mem(f, frac, sizeof frac);
}

/* Bytes written so far; 0 after an overflow. */
static inline size_t
fmt_len(const struct fmt *f, const char *buf)
{
	return f->overflow ? 0 : (size_t)(f->p - buf);
}

#endif
