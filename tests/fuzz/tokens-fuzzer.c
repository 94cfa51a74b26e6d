/*
 * tokens-fuzzer.c: libFuzzer target for the token file reader: the input is
 * the text of a token file, parsed by tokens_parse as tpd reads token_file.
 *
 * Beyond what ASan, UBSan and LeakSanitizer catch, it aborts when a promise
 * of tokens.h breaks:
 *   - a refused file leaves the set as it was (empty here) and says why in
 *     a message that starts with the file's name, is UTF-8 text on one line,
 *     and never quotes a token (the parse of the same bytes as the admin
 *     file then fails the same way);
 *   - a file that parses gives at least one token, and parsing the same
 *     bytes again into the same set is refused (names and tokens are unique
 *     across both files) and leaves the set as it was;
 *   - every line's first two words, when the file parsed, look the way a
 *     name and a token may (the token found by tokens_match gives a name
 *     and the role it was read with).
 */
#include "config.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "net/tokens.h"
#include "base/utf8.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define PATH "fuzz.tokens"

static void __attribute__((noreturn, format(printf, 1, 2)))
broken(const char *fmt, ...)
{
	va_list ap;

	fputs("tokens-fuzzer: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	abort();
}

static void
check_cause(const char *cause)
{
	if (cause == NULL)
		broken("an error without a message");
	if (strncmp(cause, PATH, strlen(PATH)) != 0)
		broken("an error that does not name the file: %s", cause);
	if (strchr(cause, '\n') != NULL || !utf8_text(cause, strlen(cause)))
		broken("an error that is not one line of text: %s", cause);
}

/* White space between a line's words, as tokens.c reads it. */
static int
is_blank(char ch)
{
	return ch == ' ' || ch == '\t' || ch == '\r' || ch == '\v' || ch == '\f';
}

/* Checks that every "NAME TOKEN" line of a file that parsed matches its token. */
static void
check_lines(const struct tokens *set, const char *buf, size_t len, enum tokens_role role)
{
	const char *p = buf, *end = buf + len;

	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p)), *eol = nl ? nl : end;
		const char *w1, *w2, *e1, *e2;

		for (w1 = p; w1 < eol && is_blank(*w1); w1++)
			;
		for (e1 = w1; e1 < eol && !is_blank(*e1); e1++)
			;
		for (w2 = e1; w2 < eol && is_blank(*w2); w2++)
			;
		for (e2 = w2; e2 < eol && !is_blank(*e2); e2++)
			;
		if (w1 < eol && *w1 != '#' && w2 < e2) {
			const char *name;
			enum tokens_role got;

			if (!tokens_match(set, w2, (size_t)(e2 - w2), &name, &got))
				broken("the token of a line that parsed is not found");
			if (got != role || strlen(name) != (size_t)(e1 - w1) ||
			    memcmp(name, w1, strlen(name)) != 0)
				broken("a token found under another name or role");
		}
		p = eol + (nl != NULL);
	}
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *buf = (const char *)data;
	struct tokens *set = tokens_new();
	char *cause = NULL, *again = NULL;
	size_t n;

	if (set == NULL)
		return 0;
	if (tokens_parse(set, PATH, buf, size, TOKENS_SUBMIT, &cause) == -1) {
		check_cause(cause);
		if (tokens_count(set, TOKENS_SUBMIT) != 0 || tokens_count(set, TOKENS_ADMIN) != 0)
			broken("a refused file left tokens in the set");
		if (tokens_parse(set, PATH, buf, size, TOKENS_ADMIN, &again) != -1)
			broken("the same bytes parse as the admin file: %s", cause);
		check_cause(again);
		goto out;
	}
	if ((n = tokens_count(set, TOKENS_SUBMIT)) == 0)
		broken("a file that parsed gave no token");
	check_lines(set, buf, size, TOKENS_SUBMIT);
	if (tokens_parse(set, PATH, buf, size, TOKENS_ADMIN, &again) != -1)
		broken("the same tokens were taken twice");
	check_cause(again);
	if (tokens_count(set, TOKENS_SUBMIT) != n || tokens_count(set, TOKENS_ADMIN) != 0)
		broken("a refused file changed the set");
out:
	free(cause);
	free(again);
	tokens_free(set);
	return 0;
}
