/*
 * tokens-test: the token file format of tokens.h, case by case: what a file
 * may hold, every error with its FILE:LINE (and never the token in it), a
 * failed parse leaving the set as it was, and the lookup (a prefix or an
 * extension of a token is not it). tests/test_auth.py drives the same files
 * through the daemon.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "net/tokens.h"

static bool
has(const struct tokens *set, const char *token, const char *name, enum tokens_role role)
{
	const char *got_name = NULL;
	enum tokens_role got_role;

	if (!tokens_match(set, token, strlen(token), &got_name, &got_role))
		return false;
	return strcmp(got_name, name) == 0 && got_role == role;
}

static bool
refused(const struct tokens *set, const char *token, size_t len)
{
	const char *name;
	enum tokens_role role;

	return !tokens_match(set, token, len, &name, &role);
}

/* Parses text as F with role into a new set; the set, or NULL with *cause set. */
static struct tokens *
parse(const char *text, enum tokens_role role, char **cause)
{
	struct tokens *set = tokens_new();

	CHECK(set != NULL, "out of memory");
	*cause = NULL;
	if (tokens_parse(set, "F", text, strlen(text), role, cause) == -1) {
		tokens_free(set);
		return NULL;
	}
	return set;
}

static void
test_good_files(void)
{
	struct tokens *set;
	char *cause;

	test_current = "good";
	set = parse("s3cret\n", TOKENS_SUBMIT, &cause);
	CHECK(set != NULL, "a bare token: %s", cause);
	EXPECT(has(set, "s3cret", "default", TOKENS_SUBMIT));
	EXPECT(tokens_count(set, TOKENS_SUBMIT) == 1 && tokens_count(set, TOKENS_ADMIN) == 0);
	tokens_free(set);

	set = parse("# the admin token\n\n  r00t  \r\n", TOKENS_ADMIN, &cause);
	CHECK(set != NULL, "a bare admin token among comments: %s", cause);
	EXPECT(has(set, "r00t", "admin", TOKENS_ADMIN));
	tokens_free(set);

	set = parse("ci tok-ci\n# a comment\n\n\tops\t tok#ops \r\nalice.b@x-y_1 t\xC3\xA9", TOKENS_SUBMIT,
	    &cause);
	CHECK(set != NULL, "pairs: %s", cause);
	EXPECT(has(set, "tok-ci", "ci", TOKENS_SUBMIT));
	EXPECT(has(set, "tok#ops", "ops", TOKENS_SUBMIT));
	EXPECT(has(set, "t\xC3\xA9", "alice.b@x-y_1", TOKENS_SUBMIT));
	EXPECT(tokens_count(set, TOKENS_SUBMIT) == 3);
	/* the lookup: nothing near a token is it */
	EXPECT(refused(set, "tok-c", 5));
	EXPECT(refused(set, "tok-cii", 7));
	EXPECT(refused(set, "", 0));
	EXPECT(refused(set, "ci", 2));
	EXPECT(refused(set, "tok-ci\0", 7));
	tokens_free(set);
	EXPECT(refused(NULL, "x", 1));
	printf("ok: bare tokens, NAME TOKEN pairs, comments and blanks\n");
}

static void
test_lengths(void)
{
	char *text = malloc(TOKENS_TOKEN_MAX + 64), *cause;
	struct tokens *set;

	test_current = "lengths";
	CHECK(text != NULL, "out of memory");
	/* name, then TOKENS_TOKEN_MAX bytes: the longest token */
	strcpy(text, "long ");
	memset(text + 5, 'k', TOKENS_TOKEN_MAX);
	strcpy(text + 5 + TOKENS_TOKEN_MAX, "\n");
	set = parse(text, TOKENS_SUBMIT, &cause);
	CHECK(set != NULL, "a token of %d bytes: %s", TOKENS_TOKEN_MAX, cause);
	EXPECT(tokens_match(set, text + 5, TOKENS_TOKEN_MAX, &(const char *){ NULL },
	    &(enum tokens_role){ 0 }));
	EXPECT(refused(set, text + 5, TOKENS_TOKEN_MAX - 1));
	tokens_free(set);

	/* one more byte, on line 2: an error naming F:2, without the token */
	memmove(text + 1, text, 5 + TOKENS_TOKEN_MAX);
	text[0] = '\n';
	strcpy(text + 6 + TOKENS_TOKEN_MAX, "k\n");
	CHECK(parse(text, TOKENS_SUBMIT, &cause) == NULL, "a token of %d bytes is refused",
	    TOKENS_TOKEN_MAX + 1);
	CHECK(cause != NULL, "no cause");
	EXPECT(strncmp(cause, "F:2: ", 5) == 0);
	EXPECT(strstr(cause, "4097 bytes") != NULL && strstr(cause, "4096") != NULL);
	EXPECT(strstr(cause, "kkkk") == NULL);
	free(cause);

	/* a bare token is bounded the same way */
	CHECK(parse(text + 6, TOKENS_SUBMIT, &cause) == NULL, "a bare token of 4097 bytes");
	EXPECT(strncmp(cause, "F:1: ", 5) == 0 && strstr(cause, "longer than 4096") != NULL);
	free(cause);
	free(text);
	printf("ok: a token of %d bytes works, one byte more is an error at its line\n",
	    TOKENS_TOKEN_MAX);
}

static void
test_errors(void)
{
	static const struct {
		const char *text, *prefix, *words;
	} cases[] = {
		{ "", "F: ", "no token" },
		{ "# only a comment\n\n   \n", "F: ", "no token" },
		{ "a t1\nb t2\na t3\n", "F:3: ", "\"a\" is given twice (first at F:1)" },
		{ "a same\nb same\n", "F:2: ", "also the token of \"a\" (F:1)" },
		{ "a t1\nlonely\n", "F:2: ", "a name without a token" },
		{ "lonely\na t1\n", "F:1: ", "a name without a token" },
		{ "one\ntwo\n", "F:2: ", "a name without a token" },
		{ "a t1 t2\n", "F:1: ", "more than a name and a token" },
		{ "a t1\nb\0t\n", "F:2: ", "NUL" },
		{ "b:ad t1\n", "F:1: ", "the name is not" },
		{ "a t\xFF\n", "F:1: ", "not UTF-8" },
		{ "default t1\nsecret-word\n", "F:2: ", "a name without a token" },
	};
	char *cause;

	test_current = "errors";
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		struct tokens *set = tokens_new();
		size_t len = strlen(cases[i].text);

		if (i == 8)
			len = 9;        /* the case with a NUL byte */
		cause = NULL;
		CHECK(set != NULL, "out of memory");
		if (tokens_parse(set, "F", cases[i].text, len, TOKENS_SUBMIT, &cause) != -1) {
			fprintf(stderr, "case %zu: accepted\n", i);
			test_failures++;
		} else if (cause == NULL || strncmp(cause, cases[i].prefix,
		    strlen(cases[i].prefix)) != 0 || strstr(cause, cases[i].words) == NULL ||
		    strstr(cause, "secret-word") != NULL || strstr(cause, "t1") != NULL) {
			fprintf(stderr, "case %zu: %s\n", i, cause ? cause : "(no cause)");
			test_failures++;
		}
		EXPECT(tokens_count(set, TOKENS_SUBMIT) == 0);
		free(cause);
		tokens_free(set);
	}
	printf("ok: %zu broken files, each an error at FILE:LINE that quotes no token\n",
	    sizeof cases / sizeof cases[0]);
}

static void
test_two_files_share_names(void)
{
	struct tokens *set = tokens_new();
	char *cause = NULL;

	test_current = "two files";
	CHECK(set != NULL, "out of memory");
	CHECK(tokens_parse(set, "S", "ci tok1\nops tok2\n", 17, TOKENS_SUBMIT, &cause) == 0,
	    "%s", cause);
	/* a name of the other file: refused, and the set is as it was */
	CHECK(tokens_parse(set, "A", "root tok3\nci tok4\n", 18, TOKENS_ADMIN, &cause) == -1,
	    "a name given in both files");
	EXPECT(strstr(cause, "A:2: ") == cause && strstr(cause, "first at S:1") != NULL);
	free(cause);
	EXPECT(tokens_count(set, TOKENS_ADMIN) == 0 && tokens_count(set, TOKENS_SUBMIT) == 2);
	EXPECT(refused(set, "tok3", 4));
	EXPECT(has(set, "tok2", "ops", TOKENS_SUBMIT));
	/* a token of the other file too */
	CHECK(tokens_parse(set, "A", "root tok1\n", 10, TOKENS_ADMIN, &cause) == -1,
	    "a token given in both files");
	EXPECT(strstr(cause, "A:1: ") == cause && strstr(cause, "tok1") == NULL);
	free(cause);
	/* the set goes on after a refused file */
	CHECK(tokens_parse(set, "A", "root tok3\n", 10, TOKENS_ADMIN, &cause) == 0, "%s", cause);
	EXPECT(has(set, "tok3", "root", TOKENS_ADMIN));
	EXPECT(has(set, "tok1", "ci", TOKENS_SUBMIT));
	tokens_free(set);

	set = tokens_new();
	CHECK(set != NULL, "out of memory");
	CHECK(tokens_parse(set, "S", "s\n", 2, TOKENS_SUBMIT, &cause) == 0, "%s", cause);
	CHECK(tokens_parse(set, "A", "a\n", 2, TOKENS_ADMIN, &cause) == 0, "%s", cause);
	EXPECT(has(set, "s", "default", TOKENS_SUBMIT));
	EXPECT(has(set, "a", "admin", TOKENS_ADMIN));
	tokens_free(set);
	printf("ok: names and tokens are unique across both files\n");
}

static void
test_load_files(void)
{
	char dir[] = "/tmp/tokens-test.XXXXXX", path[64], missing[64];
	struct tokens *set = NULL;
	char *cause = NULL;
	FILE *f;

	test_current = "load";
	CHECK(mkdtemp(dir) != NULL, "mkdtemp");
	snprintf(path, sizeof path, "%s/tok", dir);
	snprintf(missing, sizeof missing, "%s/missing", dir);
	CHECK((f = fopen(path, "w")) != NULL, "%s", path);
	fputs("ci tok-ci\nops tok-ops\n", f);
	fclose(f);
	CHECK(tokens_load_files(path, NULL, &set, &cause) == 0, "%s", cause);
	EXPECT(has(set, "tok-ops", "ops", TOKENS_SUBMIT));
	tokens_free(set);
	CHECK(tokens_load_files(NULL, NULL, &set, &cause) == 0 && set == NULL, "no files");
	CHECK(tokens_load_files(path, missing, &set, &cause) == -1 && set == NULL, "missing file");
	EXPECT(strstr(cause, missing) == cause && strstr(cause, "cannot open") != NULL);
	free(cause);
	CHECK(tokens_load_files(path, path, &set, &cause) == -1, "the same file twice");
	EXPECT(strstr(cause, "given twice") != NULL);
	free(cause);
	unlink(path);
	rmdir(dir);
	printf("ok: tokens_load_files reads both files, or names the one that is wrong\n");
}

static const struct test_case cases[] = {
	{ "good_files", test_good_files },
	{ "lengths", test_lengths },
	{ "errors", test_errors },
	{ "two_files_share_names", test_two_files_share_names },
	{ "load_files", test_load_files },
};

int
main(int argc, char **argv)
{
	return test_run(cases, TEST_COUNT(cases), argc, argv);
}
