/*
 * tokens.c: token files (the format is in tokens.h) and the lookup of the
 * token a TCP client presents.
 *
 * One reader for start-up (tpd.c) and SIGHUP (reload.c): both build a new
 * set from token_file and admin_token_file and use it only when both files
 * are right, so a reload with a broken file keeps the tokens in force.
 * Tokens are secrets: they are cleared before their memory is freed, and
 * no message ever quotes one (a line of one word might be a token, so it is
 * not quoted either).
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "tokens.h"
#include "base/utf8.h"

struct token {
	char *name;
	char *secret;           /* NUL-terminated, len bytes */
	size_t len;
	enum tokens_role role;
	char *path;             /* where it was given, for messages about a duplicate */
	int line;
};

struct tokens {
	struct token *v;
	size_t n, cap;
};

/* One line's fields, as the parser sees them. */
struct tokens_line {
	const char *path;
	int line;
	const char *name, *secret;
	size_t name_len, secret_len;
};

struct tokens *
tokens_new(void)
{
	return calloc(1, sizeof (struct tokens));
}

static void
token_clear(struct token *t)
{
	if (t->secret != NULL) {
		explicit_bzero(t->secret, t->len);
		free(t->secret);
	}
	free(t->name);
	free(t->path);
	memset(t, 0, sizeof *t);
}

/* Drops the tokens from index n on. */
static void
tokens_truncate(struct tokens *set, size_t n)
{
	while (set->n > n)
		token_clear(&set->v[--set->n]);
}

void
tokens_free(struct tokens *set)
{
	if (set == NULL)
		return;
	tokens_truncate(set, 0);
	free(set->v);
	free(set);
}

size_t
tokens_count(const struct tokens *set, enum tokens_role role)
{
	size_t n = 0;

	for (size_t i = 0; set != NULL && i < set->n; i++)
		n += set->v[i].role == role;
	return n;
}

static bool
is_blank(char ch)
{
	return ch == ' ' || ch == '\t' || ch == '\r' || ch == '\v' || ch == '\f';
}

static bool
name_ok(const char *s, size_t n)
{
	if (n == 0 || n > TOKENS_NAME_MAX)
		return false;
	for (size_t i = 0; i < n; i++) {
		char ch = s[i];
		if (!(ch >= 'a' && ch <= 'z') && !(ch >= 'A' && ch <= 'Z') &&
		    !(ch >= '0' && ch <= '9') && ch != '_' && ch != '.' && ch != '-' && ch != '@')
			return false;
	}
	return true;
}

/* Checks one NAME TOKEN pair against the rules and the set, and adds it. */
static int
token_add(struct tokens *set, const struct tokens_line *l, enum tokens_role role, char **cause)
{
	struct token *t;

	if (!name_ok(l->name, l->name_len))
		return cause_set(cause, "%s:%d: the name is not 1 to %d letters, digits, '_', "
		    "'.', '-' or '@'", l->path, l->line, TOKENS_NAME_MAX);
	if (l->secret_len > TOKENS_TOKEN_MAX)
		return cause_set(cause, "%s:%d: the token of \"%.*s\" is %zu bytes, longer than "
		    "%d bytes", l->path, l->line, (int)l->name_len, l->name, l->secret_len,
		    TOKENS_TOKEN_MAX);
	if (!utf8_text(l->secret, l->secret_len))
		return cause_set(cause, "%s:%d: the token of \"%.*s\" is not UTF-8 text, so no "
		    "client could send it", l->path, l->line, (int)l->name_len, l->name);
	for (size_t i = 0; i < set->n; i++) {
		const struct token *o = &set->v[i];
		if (strlen(o->name) == l->name_len && memcmp(o->name, l->name, l->name_len) == 0)
			return cause_set(cause, "%s:%d: the name \"%s\" is given twice (first at "
			    "%s:%d); names are unique across token_file and admin_token_file",
			    l->path, l->line, o->name, o->path, o->line);
		if (o->len == l->secret_len && memcmp(o->secret, l->secret, o->len) == 0)
			return cause_set(cause, "%s:%d: the token of \"%.*s\" is also the token of "
			    "\"%s\" (%s:%d); each token must differ", l->path, l->line,
			    (int)l->name_len, l->name, o->name, o->path, o->line);
	}
	if (set->n == set->cap) {
		size_t cap = set->cap ? set->cap * 2 : 8;
		struct token *v = realloc(set->v, cap * sizeof *v);
		if (v == NULL)
			return cause_set(cause, "%s: out of memory", l->path);
		set->v = v;
		set->cap = cap;
	}
	t = &set->v[set->n];
	memset(t, 0, sizeof *t);
	t->role = role;
	t->line = l->line;
	t->len = l->secret_len;
	t->name = strndup(l->name, l->name_len);
	t->path = strdup(l->path);
	if ((t->secret = malloc(l->secret_len + 1)) != NULL) {
		memcpy(t->secret, l->secret, l->secret_len);
		t->secret[l->secret_len] = '\0';
	}
	if (t->name == NULL || t->path == NULL || t->secret == NULL) {
		token_clear(t);
		return cause_set(cause, "%s: out of memory", l->path);
	}
	set->n++;
	return 0;
}

/*
 * Splits the line s[0..n) into l's name and secret: 0 for a blank line or a
 * comment, 1 for one word (in l->secret), 2 for a pair, -1 with *cause set.
 */
static int
line_split(const char *s, size_t n, struct tokens_line *l, char **cause)
{
	const char *p = s, *end = s + n, *w[2] = { NULL, NULL };
	size_t wlen[2] = { 0, 0 };
	int words = 0;

	if (memchr(s, '\0', n) != NULL)
		return cause_set(cause, "%s:%d: a NUL byte", l->path, l->line);
	while (p < end && is_blank(*p))
		p++;
	if (p == end || *p == '#')
		return 0;
	while (p < end) {
		const char *q = p;
		while (q < end && !is_blank(*q))
			q++;
		if (words == 2)
			return cause_set(cause, "%s:%d: more than a name and a token (a token "
			    "has no white space in it)", l->path, l->line);
		w[words] = p;
		wlen[words++] = (size_t)(q - p);
		while (q < end && is_blank(*q))
			q++;
		p = q;
	}
	if (words == 1) {
		l->secret = w[0];
		l->secret_len = wlen[0];
		return 1;
	}
	l->name = w[0];
	l->name_len = wlen[0];
	l->secret = w[1];
	l->secret_len = wlen[1];
	return 2;
}

int
tokens_parse(struct tokens *set, const char *path, const char *buf, size_t len,
    enum tokens_role role, char **cause)
{
	const char *p = buf, *end = buf + len;
	struct tokens_line bare = { 0 };
	size_t base = set->n;
	int line = 0, entries = 0;

	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		const char *e = nl != NULL ? nl : end;
		struct tokens_line l = { .path = path };
		int r;

		l.line = ++line;
		if ((r = line_split(p, (size_t)(e - p), &l, cause)) == -1)
			goto fail;
		p = nl != NULL ? nl + 1 : end;
		if (r == 0)
			continue;
		/* one word is a bare token when it is the file's only line, else a mistake */
		if ((r == 1 && entries > 0) || (r == 2 && bare.line != 0)) {
			cause_set(cause, "%s:%d: a name without a token, or a token without a "
			    "name (only a file whose only line is a token may leave out its "
			    "name)", path,
			    r == 1 ? l.line : bare.line);
			goto fail;
		}
		entries++;
		if (r == 1)
			bare = l;
		else if (token_add(set, &l, role, cause) == -1)
			goto fail;
	}
	if (entries == 0) {
		cause_set(cause, "%s: no token in it (it is empty, or has only blank lines and "
		    "comments)", path);
		goto fail;
	}
	if (bare.line != 0) {
		bare.name = role == TOKENS_ADMIN ? "admin" : "default";
		bare.name_len = strlen(bare.name);
		if (token_add(set, &bare, role, cause) == -1)
			goto fail;
	}
	return 0;
fail:
	tokens_truncate(set, base);
	return -1;
}

int
tokens_load(struct tokens *set, const char *path, enum tokens_role role, char **cause)
{
	char *buf = NULL, *grown;
	size_t len = 0, cap = 0;
	ssize_t n;
	int fd, rv, err;

	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) == -1)
		return cause_set(cause, "%s: cannot open: %s", path, strerror(errno));
	for (;;) {
		if (len == cap) {
			if (cap > TOKENS_FILE_MAX) {
				rv = cause_set(cause, "%s: longer than %d bytes: not a token file",
				    path, TOKENS_FILE_MAX);
				goto out;
			}
			cap = cap ? cap * 2 : 4096;
			/* grown by copying, so no copy of a token is freed uncleared */
			if ((grown = malloc(cap)) == NULL) {
				rv = cause_set(cause, "%s: out of memory", path);
				goto out;
			}
			if (buf != NULL) {
				memcpy(grown, buf, len);
				explicit_bzero(buf, len);
				free(buf);
			}
			buf = grown;
		}
		if ((n = read(fd, buf + len, cap - len)) == -1) {
			if (errno == EINTR)
				continue;
			err = errno;
			rv = cause_set(cause, "%s: cannot read: %s", path, strerror(err));
			goto out;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	rv = tokens_parse(set, path, buf, len, role, cause);
out:
	close(fd);
	if (buf != NULL) {
		explicit_bzero(buf, cap);
		free(buf);
	}
	return rv;
}

int
tokens_load_files(const char *token_file, const char *admin_token_file,
    struct tokens **out, char **cause)
{
	struct tokens *set;

	*out = NULL;
	if (token_file == NULL && admin_token_file == NULL)
		return 0;
	if ((set = tokens_new()) == NULL)
		return cause_set(cause, "out of memory reading the token files");
	if ((token_file != NULL && tokens_load(set, token_file, TOKENS_SUBMIT, cause) == -1) ||
	    (admin_token_file != NULL &&
	    tokens_load(set, admin_token_file, TOKENS_ADMIN, cause) == -1)) {
		tokens_free(set);
		return -1;
	}
	*out = set;
	return 0;
}

/* 1 when want[0..wlen) equals given[0..glen), in time that depends on wlen only. */
static unsigned
token_equal(const char *want, size_t wlen, const char *given, size_t glen)
{
	unsigned char diff = wlen != glen;

	for (size_t i = 0; i < wlen; i++)
		diff |= (unsigned char)want[i] ^ (unsigned char)(i < glen ? given[i] : 0);
	return 1u & ((diff - 1u) >> 8);  /* 1 when diff is 0, without a branch */
}

bool
tokens_match(const struct tokens *set, const char *given, size_t len,
    const char **name, enum tokens_role *role)
{
	size_t found = 0;
	unsigned any = 0;

	if (set == NULL)
		return false;
	/* every token, no early exit: the index of the match is selected by mask */
	for (size_t i = 0; i < set->n; i++) {
		unsigned eq = token_equal(set->v[i].secret, set->v[i].len, given, len);
		size_t mask = (size_t)0 - eq;
		found = (found & ~mask) | (i & mask);
		any |= eq;
	}
	if (!any)
		return false;
	*name = set->v[found].name;
	*role = set->v[found].role;
	return true;
}
