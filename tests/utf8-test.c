/*
 * utf8-test: messages quoting a client's string are cut only at character
 * boundaries (utf8_quote, utf8_format), whatever the alignment of the cut,
 * and what is not UTF-8 becomes '?' (utf8_scrub). Every result is checked
 * with utf8_text, the test captured output uses.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "base/utf8.h"

#define ELLIPSIS "\xE2\x80\xA6"

/* Characters of 1 to 4 bytes. */
static const char *const chars[] = { "a", "\xC3\xA9", "\xE2\x82\xAC", "\xF0\x9D\x84\x9E" };

/* shift ASCII bytes, then count copies of ch. */
static char *
make(size_t shift, const char *ch, size_t count)
{
	size_t n = strlen(ch);
	char *s = malloc(shift + n * count + 1), *p = s;

	CHECK(s != NULL, "out of memory");
	memset(p, 'x', shift);
	p += shift;
	for (size_t i = 0; i < count; i++, p += n)
		memcpy(p, ch, n);
	*p = '\0';
	return s;
}

static void
test_quote_cuts_at_boundaries(void)
{
	char q[UTF8_QUOTE_SIZE];

	test_current = "quote";
	for (size_t c = 0; c < sizeof chars / sizeof chars[0]; c++)
		for (size_t shift = 0; shift < 4; shift++)
			for (size_t count = 0; count < 40; count++) {
				char *s = make(shift, chars[c], count);
				size_t n = strlen(s), got;

				utf8_quote(q, s);
				got = strlen(q);
				EXPECT(utf8_text(q, got));
				if (n <= UTF8_QUOTE_MAX)
					EXPECT(strcmp(q, s) == 0);
				else {
					/* a prefix, as long as it can be, then the ellipsis */
					size_t keep = got - 3;
					EXPECT(got >= 3 && strcmp(q + keep, ELLIPSIS) == 0);
					EXPECT(memcmp(q, s, keep) == 0);
					EXPECT(keep <= UTF8_QUOTE_MAX);
					EXPECT(keep + strlen(chars[c]) > UTF8_QUOTE_MAX);
				}
				free(s);
			}
	printf("ok: utf8_quote cuts at character boundaries, with an ellipsis\n");
}

static void
test_format_cuts_at_boundaries(void)
{
	char buf[64];

	test_current = "format";
	for (size_t size = 1; size <= sizeof buf; size++)
		for (size_t c = 0; c < sizeof chars / sizeof chars[0]; c++)
			for (size_t shift = 0; shift < 4; shift++) {
				char *s = make(shift, chars[c], 30);
				size_t len = utf8_format(buf, size, "k=%s", s);
				size_t full = 2 + strlen(s);

				EXPECT(len == strlen(buf) && len < size);
				EXPECT(utf8_text(buf, len));
				if (full < size)
					EXPECT(len == full && strncmp(buf + 2, s, full - 2) == 0);
				else if (size > 4)
					EXPECT(len >= 3 && strcmp(buf + len - 3, ELLIPSIS) == 0);
				free(s);
			}
	printf("ok: utf8_format never leaves part of a character\n");
}

static void
test_scrub(void)
{
	static const struct {
		const char *in, *out;
	} cases[] = {
		{ "plain", "plain" },
		{ "\xC3\xA9t\xC3\xA9", "\xC3\xA9t\xC3\xA9" },
		{ "a\xC3", "a?" },                      /* cut short */
		{ "\xE2\x82", "??" },
		{ "\xF0\x9D\x84", "???" },
		{ "\xFF\xFE", "??" },                   /* never UTF-8 */
		{ "\xC0\xAF", "??" },                   /* overlong */
		{ "\xED\xA0\x80", "???" },              /* a surrogate */
		{ "\x80" "ok", "?ok" },                 /* a lone continuation */
		{ "\xE2\x82\xE2\x82\xAC", "??\xE2\x82\xAC" }, /* the next character survives */
	};
	char buf[32];

	test_current = "scrub";
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		snprintf(buf, sizeof buf, "%s", cases[i].in);
		utf8_scrub(buf, strlen(buf));
		if (strcmp(buf, cases[i].out) != 0) {
			fprintf(stderr, "scrub case %zu: got \"%s\"\n", i, buf);
			test_failures++;
		}
	}
	/* a quoted or formatted string that was not UTF-8 comes out as text */
	utf8_quote(buf, "\xFF" "abc\xC3");
	EXPECT(strcmp(buf, "?abc?") == 0);
	utf8_format(buf, sizeof buf, "near '%s'", "\"\\u\xC3");
	EXPECT(strcmp(buf, "near '\"\\u?'") == 0);
	printf("ok: utf8_scrub turns what is not UTF-8 into '?'\n");
}

static const struct test_case cases[] = {
	{ "quote_cuts_at_boundaries", test_quote_cuts_at_boundaries },
	{ "format_cuts_at_boundaries", test_format_cuts_at_boundaries },
	{ "scrub", test_scrub },
};

int
main(int argc, char **argv)
{
	return test_run(cases, TEST_COUNT(cases), argc, argv);
}
