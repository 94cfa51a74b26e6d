/*
 * units-test: the grammar of durations and sizes (common/units.h) that tpd's
 * flags, tpd.conf and tpctl share: what each accepts, its value, and the
 * message for what it refuses.
 */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "units.h"

static const struct {
	const char *in;
	uint64_t ms;
} good_durations[] = {
	{ "0", 0 }, { "00", 0 }, { "0.0", 0 }, { "0ms", 0 }, { "0s", 0 },
	{ "250ms", 250 }, { "5s", 5000 }, { "1.5s", 1500 }, { "0.5s", 500 },
	{ "0.001s", 1 }, { "1.250s", 1250 }, { "2m", 120000 }, { "2min", 120000 },
	{ "1.5min", 90000 }, { "1h", 3600000 }, { "0.25h", 900000 }, { "1d", 86400000 },
	{ "1.5d", 129600000 }, { "18446744073709551615ms", UINT64_MAX },
};

static const struct {
	const char *in;
	int rv;
	const char *why;
} bad_durations[] = {
	{ "5", -1, "5: add a unit, as 5s or 5ms" },
	{ "1.5", -1, "1.5: add a unit, as 1.5s or 1.5ms" },
	{ "", -1, "\"\" is not a duration (like 500ms, 5s, 2min, 1h, 1d)" },
	{ "soon", -1, "\"soon\" is not a duration (like 500ms, 5s, 2min, 1h, 1d)" },
	{ "5 s", -1, "\"5 s\" is not a duration (like 500ms, 5s, 2min, 1h, 1d)" },
	{ " 5s", -1, "\" 5s\" is not a duration (like 500ms, 5s, 2min, 1h, 1d)" },
	{ "-5s", -1, "\"-5s\" is not a duration (like 500ms, 5s, 2min, 1h, 1d)" },
	{ "5S", -1, "\"5S\" is not a duration (like 500ms, 5s, 2min, 1h, 1d)" },
	{ "5sec", -1, "\"5sec\" is not a duration (like 500ms, 5s, 2min, 1h, 1d)" },
	{ ".5s", -1, "\".5s\" is not a duration (like 500ms, 5s, 2min, 1h, 1d)" },
	{ "5.s", -1, "\"5.s\" is not a duration (like 500ms, 5s, 2min, 1h, 1d)" },
	{ "1e3ms", -1, "\"1e3ms\" is not a duration (like 500ms, 5s, 2min, 1h, 1d)" },
	{ "0.5ms", -1, "\"0.5ms\" is not a whole number of milliseconds" },
	{ "1.0001s", -1, "\"1.0001s\" is not a whole number of milliseconds" },
	{ "18446744073709551616ms", -2, "18446744073709551616ms is too large" },
	{ "213503982334601d", -2, "213503982334601d is too large" },
};

static const struct {
	const char *in;
	uint64_t bytes;
} good_sizes[] = {
	{ "0", 0 }, { "65536", 65536 }, { "64k", 65536 }, { "64K", 65536 },
	{ "64kB", 65536 }, { "64KB", 65536 }, { "64KiB", 65536 }, { "64kib", 65536 },
	{ "1M", 1048576 }, { "1m", 1048576 }, { "1MiB", 1048576 }, { "1MB", 1048576 },
	{ "1G", 1073741824 }, { "1GiB", 1073741824 }, { "1.5k", 1536 }, { "1.5M", 1572864 },
	{ "0.5G", 536870912 }, { "0.0009765625k", 1 }, { "2.0", 2 },
	{ "16777215G", 16777215ULL << 30 },
};

static const struct {
	const char *in;
	int rv;
	const char *why;
} bad_sizes[] = {
	{ "lots", -1, "\"lots\" is not a size (a number of bytes, or with k, M or G)" },
	{ "", -1, "\"\" is not a size (a number of bytes, or with k, M or G)" },
	{ "1T", -1, "\"1T\" is not a size (a number of bytes, or with k, M or G)" },
	{ "1B", -1, "\"1B\" is not a size (a number of bytes, or with k, M or G)" },
	{ "64ki", -1, "\"64ki\" is not a size (a number of bytes, or with k, M or G)" },
	{ "64 k", -1, "\"64 k\" is not a size (a number of bytes, or with k, M or G)" },
	{ "-1", -1, "\"-1\" is not a size (a number of bytes, or with k, M or G)" },
	{ "1.1k", -1, "\"1.1k\" is not a whole number of bytes" },
	{ "0.5", -1, "\"0.5\" is not a whole number of bytes" },
	{ "18446744073709551616", -2, "18446744073709551616 is too large" },
	{ "17179869184G", -2, "17179869184G is too large" },
};

static void
test_durations(void)
{
	uint64_t v;
	char *why;
	int rv;

	for (size_t i = 0; i < sizeof good_durations / sizeof good_durations[0]; i++) {
		v = 12345;
		rv = units_parse_duration(good_durations[i].in, &v, &why);
		if (rv != 0 || v != good_durations[i].ms)
			fprintf(stderr, "%s: rv %d, %llu ms, %s\n", good_durations[i].in, rv,
			    (unsigned long long)v, why ? why : "");
		EXPECT(rv == 0 && v == good_durations[i].ms && why == NULL);
		free(why);
	}
	for (size_t i = 0; i < sizeof bad_durations / sizeof bad_durations[0]; i++) {
		v = 12345;
		rv = units_parse_duration(bad_durations[i].in, &v, &why);
		if (rv != bad_durations[i].rv || why == NULL || strcmp(why, bad_durations[i].why) != 0)
			fprintf(stderr, "%s: rv %d, %s\n", bad_durations[i].in, rv, why ? why : "");
		EXPECT(rv == bad_durations[i].rv && v == 12345);
		EXPECT(why != NULL && strcmp(why, bad_durations[i].why) == 0);
		free(why);
		EXPECT(units_parse_duration(bad_durations[i].in, &v, NULL) == bad_durations[i].rv);
	}
	printf("ok: %zu durations read, %zu refused with their reason\n",
	    sizeof good_durations / sizeof good_durations[0],
	    sizeof bad_durations / sizeof bad_durations[0]);
}

static void
test_sizes(void)
{
	uint64_t v;
	char *why;
	int rv;

	for (size_t i = 0; i < sizeof good_sizes / sizeof good_sizes[0]; i++) {
		v = 12345;
		rv = units_parse_size(good_sizes[i].in, &v, &why);
		if (rv != 0 || v != good_sizes[i].bytes)
			fprintf(stderr, "%s: rv %d, %llu bytes, %s\n", good_sizes[i].in, rv,
			    (unsigned long long)v, why ? why : "");
		EXPECT(rv == 0 && v == good_sizes[i].bytes && why == NULL);
		free(why);
	}
	for (size_t i = 0; i < sizeof bad_sizes / sizeof bad_sizes[0]; i++) {
		v = 12345;
		rv = units_parse_size(bad_sizes[i].in, &v, &why);
		if (rv != bad_sizes[i].rv || why == NULL || strcmp(why, bad_sizes[i].why) != 0)
			fprintf(stderr, "%s: rv %d, %s\n", bad_sizes[i].in, rv, why ? why : "");
		EXPECT(rv == bad_sizes[i].rv && v == 12345);
		EXPECT(why != NULL && strcmp(why, bad_sizes[i].why) == 0);
		free(why);
	}
	printf("ok: %zu sizes read, %zu refused with their reason\n",
	    sizeof good_sizes / sizeof good_sizes[0], sizeof bad_sizes / sizeof bad_sizes[0]);
}

/* What the formatters write, the parsers read back as the same value. */
static void
test_format_round_trip(void)
{
	static const uint64_t sizes[] = { 0, 1, 300, 1024, 65536, 1536, 1 << 20, 3ULL << 30 };
	static const uint64_t durations[] = { 0, 1, 250, 1000, 1500, 60000, 90000,
	    3600000, 86400000, 7 * 86400000ULL };
	static const char *const shown[] = { "0", "1", "300", "1k", "64k", "1536", "1M", "3G" };
	char buf[32];
	uint64_t v;

	for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
		units_format_size(sizes[i], buf, sizeof buf);
		EXPECT(strcmp(buf, shown[i]) == 0);
		EXPECT(units_parse_size(buf, &v, NULL) == 0 && v == sizes[i]);
	}
	for (size_t i = 0; i < sizeof durations / sizeof durations[0]; i++) {
		units_format_duration(durations[i], buf, sizeof buf);
		EXPECT(units_parse_duration(buf, &v, NULL) == 0 && v == durations[i]);
	}
	EXPECT(strcmp(units_format_duration(0, buf, sizeof buf), "0ms") == 0);
	EXPECT(strcmp(units_format_duration(600000, buf, sizeof buf), "10min") == 0);
	EXPECT(strcmp(units_format_duration(7 * 86400000ULL, buf, sizeof buf), "7d") == 0);
	printf("ok: formatted sizes and durations read back the same\n");
}

static const struct test_case cases[] = {
	{ "durations", test_durations },
	{ "sizes", test_sizes },
	{ "format_round_trip", test_format_round_trip },
};

int
main(int argc, char **argv)
{
	return test_run(cases, TEST_COUNT(cases), argc, argv);
}
