/*
 * tokens.h: the tokens a TCP client presents in hello: token files read
 * into a set of named tokens, each with a role, and the lookup of a token.
 *
 * A token file holds one "NAME TOKEN" pair a line, separated by white space
 * (spaces or tabs). Blank lines are skipped, and so are comments: lines
 * whose first character that is not white space is '#'. A file whose only
 * such line is a bare token (no name) names it "default", or "admin" in the
 * admin token file, so that a bare token in each file gives two names.
 * NAME: 1 to TOKENS_NAME_MAX of A-Z a-z 0-9 _ . - @. TOKEN: 1 to
 * TOKENS_TOKEN_MAX bytes of UTF-8 text (a JSON string carries it) without
 * white space; the name is not counted. Names are unique in a set (across
 * token_file and admin_token_file), and so are tokens. Anything else (a
 * longer token, a duplicate name or token, a name without a token, a file
 * without any token) is an error naming FILE:LINE (FILE alone for the whole
 * file) and what is wrong; an error never quotes a token.
 *
 * tokens_parse is pure (a buffer in, the set or an error out; no files, no
 * globals, no logging), so a fuzz target can call it on any bytes.
 * Loop thread only, as for any one set; separate sets are independent.
 */
#ifndef TPD_TOKENS_H
#define TPD_TOKENS_H

#include <stdbool.h>
#include <stddef.h>

#define TOKENS_TOKEN_MAX 4096           /* bytes of one token */
#define TOKENS_NAME_MAX 64              /* bytes of one name */
#define TOKENS_FILE_MAX (16 << 20)      /* bytes of one token file */

enum tokens_role {
	TOKENS_SUBMIT,  /* from token_file: may submit */
	TOKENS_ADMIN,   /* from admin_token_file: may also use admin ops */
};

struct tokens;

/* An empty set, or NULL when out of memory. */
struct tokens *tokens_new(void);

/* Frees set and its tokens (their bytes are cleared first). NULL is fine. */
void tokens_free(struct tokens *set);

/*
 * Parses the token file text buf[0..len) (any bytes; no NUL needed at the
 * end), whose name for messages is path, and adds its tokens to set with
 * role. Returns 0, or -1 with *cause set (caller frees) and set as it was
 * before the call.
 */
int tokens_parse(struct tokens *set, const char *path, const char *buf, size_t len,
    enum tokens_role role, char **cause);

/* Reads the file path (at most TOKENS_FILE_MAX bytes) and parses it as tokens_parse does. */
int tokens_load(struct tokens *set, const char *path, enum tokens_role role, char **cause);

/*
 * The tokens of both files of the configuration, token_file's with the
 * submit role and admin_token_file's with the admin role (either may be
 * NULL), in a new set: *out, NULL when both are. Returns 0, or -1 with
 * *cause set (the first error found) and *out NULL.
 */
int tokens_load_files(const char *token_file, const char *admin_token_file,
    struct tokens **out, char **cause);

/* How many tokens of role set holds (0 for a NULL set). */
size_t tokens_count(const struct tokens *set, enum tokens_role role);

/*
 * Looks up the token a client presented, given[0..len). Every token of the
 * set is compared, each in time that depends on its own length only, with
 * no early exit, so the time taken says nothing of how much of a token was
 * guessed right. Returns true and sets *name (valid while set lives) and
 * *role when it is one of set's tokens.
 */
bool tokens_match(const struct tokens *set, const char *given, size_t len,
    const char **name, enum tokens_role *role);

#endif
