/*
 * check.h: how the C unit tests say a check failed.
 *
 * CHECK stops the test at the first failure, naming the test (test_current)
 * and the line: for checks whose failure makes the rest meaningless.
 * EXPECT reports and counts (test_failures) and goes on: for tables of
 * independent checks, so one run shows every mismatch.
 */
#ifndef TPD_CHECK_H
#define TPD_CHECK_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

/* Each test binary uses some of these only: unused ones are fine. */
#define TEST_MAYBE_UNUSED __attribute__((unused))

static const char *test_current TEST_MAYBE_UNUSED = "?";
static int test_failures TEST_MAYBE_UNUSED;

static void test_fail(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4), noreturn, unused));

static void
test_fail(const char *file, int line, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "FAIL %s (%s:%d): ", test_current, file, line);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

#define CHECK(cond, ...) do {						\
	if (!(cond))							\
		test_fail(__FILE__, __LINE__, __VA_ARGS__);		\
} while (0)

/* Compares two unsigned integers, printing both on failure. */
#define CHECK_EQ(got, want, what) do {					\
	unsigned long long got_ = (unsigned long long)(got);		\
	unsigned long long want_ = (unsigned long long)(want);		\
	if (got_ != want_)						\
		test_fail(__FILE__, __LINE__, "%s is %llu, expected %llu",	\
		    (what), got_, want_);				\
} while (0)

#define EXPECT(cond) do {						\
	if (!(cond)) {							\
		fprintf(stderr, "%s:%d: FAILED: %s\n", __FILE__, __LINE__, #cond); \
		test_failures++;					\
	}								\
} while (0)

#endif
