/*
 * check.h: the C unit tests' runner, and how they say a check failed.
 *
 * A test binary is a table of named tests (struct test_case) and a main
 * that returns test_run(cases, TEST_COUNT(cases), argc, argv): every test,
 * or only those named on the command line (`tests/pool-test cancel`), each
 * under an alarm of TEST_ALARM_S seconds (a file may define its own before
 * including this), each named as it passes.
 *
 * CHECK stops the test at the first failure, naming the test (test_current)
 * and the line: for checks whose failure makes the rest meaningless.
 * EXPECT reports and counts (test_failures) and goes on: for tables of
 * independent checks, so one run shows every mismatch; test_run fails at
 * the end when any did.
 */
#ifndef TPD_CHECK_H
#define TPD_CHECK_H

#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifndef TEST_ALARM_S
#define TEST_ALARM_S 60         /* a test that hangs is killed (and says so) */
#endif

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

/* A table of named tests, run by test_run. */
struct test_case {
	const char *name;
	void (*fn)(void);
};

#define TEST_COUNT(cases) (sizeof (cases) / sizeof (cases)[0])

static uint64_t TEST_MAYBE_UNUSED
test_ms_since(const struct timespec *t0)
{
	struct timespec t1;

	clock_gettime(CLOCK_MONOTONIC, &t1);
	return (uint64_t)(t1.tv_sec - t0->tv_sec) * 1000 +
	    (uint64_t)((t1.tv_nsec - t0->tv_nsec) / 1000000);
}

static void
test_on_alarm(int sig)
{
	static const char msg[] = " hung: killed by its alarm\n";

	(void)sig;
	(void)!write(STDERR_FILENO, "FAIL ", 5);
	(void)!write(STDERR_FILENO, test_current, strlen(test_current));
	(void)!write(STDERR_FILENO, msg, sizeof msg - 1);
	_exit(1);
}

/*
 * Runs every test of the table, or those named in argv[1..]; prints "ok N
 * NAME (MS ms)" for each. Returns main's status: 1 when a name matches no
 * test (the names are listed) or an EXPECT failed; a failed CHECK exits.
 */
static int TEST_MAYBE_UNUSED
test_run(const struct test_case *cases, size_t n, int argc, char **argv)
{
	struct timespec t0;

	for (int k = 1; k < argc; k++) {
		size_t i;
		for (i = 0; i < n && strcmp(argv[k], cases[i].name) != 0; i++)
			;
		if (i == n) {
			fprintf(stderr, "%s: no test named %s; the tests are:", argv[0], argv[k]);
			for (i = 0; i < n; i++)
				fprintf(stderr, " %s", cases[i].name);
			fputc('\n', stderr);
			return 1;
		}
	}
	signal(SIGALRM, test_on_alarm);
	for (size_t i = 0; i < n; i++) {
		int wanted = argc <= 1;

		for (int k = 1; k < argc; k++)
			wanted = wanted || strcmp(argv[k], cases[i].name) == 0;
		if (!wanted)
			continue;
		test_current = cases[i].name;
		clock_gettime(CLOCK_MONOTONIC, &t0);
		alarm(TEST_ALARM_S);
		cases[i].fn();
		alarm(0);
		printf("ok %zu %s (%llu ms)\n", i + 1, cases[i].name,
		    (unsigned long long)test_ms_since(&t0));
		fflush(stdout);
	}
	test_current = "?";
	if (test_failures > 0) {
		fprintf(stderr, "%d check%s failed\n", test_failures, test_failures == 1 ? "" : "s");
		return 1;
	}
	return 0;
}

#endif
