/*
 * batch-parse.c: reads the lines of a batch file into tasks. A line is a
 * command split into words by a small part of the shell's rules (see
 * batch_split and tpctl(1)), or, when it starts with '{', a task object.
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "tpctl.h"
#include "wire.h"

static bool
batch_blank(char c)
{
	return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

void
batch_words_free(char **words)
{
	char **w;

	if (words == NULL)
		return;
	for (w = words; *w != NULL; w++)
		free(*w);
	free(words);
}

/*
 * Blanks separate words. 'single quotes' keep everything up to the next
 * quote; "double quotes" keep everything but \" \\ \$ \` which lose their
 * backslash; a backslash outside quotes keeps the next character; a # at
 * the start of a word starts a comment. Nothing is expanded: no $VAR, no
 * ~, no globs, and | ; & < > are plain characters (sh -c '...' runs a
 * shell).
 */
int
batch_split(const char *line, char ***wordsp, const char **cause)
{
	size_t len = strlen(line), n = 0, w;
	char **words = NULL, **nwords, *word;
	const char *p = line;

	*wordsp = NULL;
	for (;;) {
		while (batch_blank(*p))
			p++;
		if (*p == '\0' || *p == '#')
			break;
		if ((word = malloc(len + 1)) == NULL) {
			*cause = "out of memory";
			goto fail;
		}
		w = 0;
		while (*p != '\0' && !batch_blank(*p)) {
			if (*p == '\'') {
				for (p++; *p != '\0' && *p != '\''; p++)
					word[w++] = *p;
				if (*p == '\0') {
					*cause = "a single quote is not closed";
					free(word);
					goto fail;
				}
				p++;
			} else if (*p == '"') {
				for (p++; *p != '\0' && *p != '"'; p++) {
					if (*p == '\\' && p[1] != '\0' &&
					    strchr("\"\\$`", p[1]) != NULL)
						p++;
					word[w++] = *p;
				}
				if (*p == '\0') {
					*cause = "a double quote is not closed";
					free(word);
					goto fail;
				}
				p++;
			} else if (*p == '\\') {
				if (p[1] == '\0' || p[1] == '\n') {
					*cause = "a backslash ends the line (a command "
					    "cannot go on to the next line)";
					free(word);
					goto fail;
				}
				word[w++] = p[1];
				p += 2;
			} else
				word[w++] = *p++;
		}
		word[w] = '\0';
		if ((nwords = realloc(words, (n + 2) * sizeof *words)) == NULL) {
			*cause = "out of memory";
			free(word);
			goto fail;
		}
		words = nwords;
		words[n++] = word;
		words[n] = NULL;
	}
	*wordsp = words;
	return (int)n;

fail:
	batch_words_free(words);
	return -1;
}

/* Whether s is a task id written as text: digits, not starting with 0. */
static bool
batch_id_text(const char *s)
{
	return *s >= '1' && *s <= '9' && strspn(s, "0123456789") == strlen(s);
}

/*
 * A submit line, {"name": N, "after": [...], FIELD: ..., "task": {...}}:
 * its task, its own fields on it, its name, and the earlier lines its after
 * names (by their name; numbers and digit strings are task ids). 0, or -1
 * with *bad set.
 */
static int
batch_line_fields(json_t *obj, struct batch_item *items, size_t n, struct batch_item *it,
    const char **bad, char **badbuf)
{
	json_t *name = json_object_get(obj, FIELD_NAME), *after, *one;
	size_t i, k;

	if (name != NULL && (!json_is_string(name) || json_string_length(name) == 0 ||
	    batch_id_text(json_string_value(name)))) {
		*bad = "\"name\" must be a word for later lines' \"after\" (not a number)";
		return -1;
	}
	for (k = 0; name != NULL && k < n; k++)
		if (items[k].name != NULL && strcmp(items[k].name, json_string_value(name)) == 0) {
			if (asprintf(badbuf, "the name \"%s\" is line %zu's already",
			    json_string_value(name), items[k].line) == -1)
				*badbuf = NULL;
			*bad = *badbuf != NULL ? *badbuf : "a name given twice";
			return -1;
		}
	after = json_object_get(obj, FIELD_AFTER);
	if (after != NULL && json_is_array(after)) {
		if ((it->deps = calloc(json_array_size(after) + 1, sizeof *it->deps)) == NULL) {
			*bad = "out of memory";
			return -1;
		}
		json_array_foreach(after, i, one) {
			const char *ref = json_string_value(one);
			if (ref == NULL || batch_id_text(ref))
				continue;       /* a task id: the daemon checks it */
			for (k = 0; k < n; k++)
				if (items[k].name != NULL && strcmp(items[k].name, ref) == 0)
					break;
			if (k == n) {
				if (asprintf(badbuf, "\"after\": no earlier line is named \"%s\"",
				    ref) == -1)
					*badbuf = NULL;
				*bad = *badbuf != NULL ? *badbuf : "\"after\" names no earlier line";
				return -1;
			}
			it->deps[it->ndeps++] = k;
		}
	}
	if (name != NULL && (it->name = strdup(json_string_value(name))) == NULL) {
		*bad = "out of memory";
		return -1;
	}
	it->fields = json_deep_copy(obj);
	json_object_del(it->fields, FIELD_TASK);
	json_object_del(it->fields, FIELD_NAME);
	return 0;
}

/* One line as a task: NULL when blank, or on an error (*bad set); *obj: a submit line's. */
static json_t *
batch_line_task(const char *line, const char **bad, char **badbuf, json_t **obj)
{
	json_error_t jerr;
	const char *p = line;
	char **words, *arg;
	json_t *task;
	int n;

	*bad = NULL;
	while (batch_blank(*p))
		p++;
	if (*p == '{') {
		task = json_loads(p, JSON_REJECT_DUPLICATES, &jerr);
		if (task == NULL) {
			if (asprintf(badbuf, "not a JSON task object: %s", jerr.text) == -1)
				*badbuf = NULL;
			*bad = *badbuf != NULL ? *badbuf : "not a JSON task object";
			return NULL;
		}
		if (json_is_object(task) && json_is_object(json_object_get(task, FIELD_TASK)) &&
		    json_object_get(task, FIELD_KIND) == NULL) {
			/* a submit line: the task and its own fields */
			*obj = task;
			task = json_incref(json_object_get(*obj, FIELD_TASK));
		}
		if (!json_is_object(task) ||
		    !json_is_string(json_object_get(task, FIELD_KIND))) {
			json_decref(task);
			*bad = "a task object needs a \"kind\", e.g. "
			    "{\"kind\":\"exec\",\"argv\":[\"true\"]}";
			return NULL;
		}
		return task;
	}
	if ((n = batch_split(p, &words, bad)) <= 0)
		return NULL;
	if ((task = taskopt_exec_task(words, n, &arg)) == NULL)
		*bad = "an argument is not UTF-8 text";
	batch_words_free(words);
	return task;
}

/*
 * The kinds and their fields, as the daemon takes them (doc/protocol.md,
 * doc/exec.md): a batch checks every line before submitting any, so that a
 * typo on line 900 does not leave 899 tasks submitted. Types and values
 * are the daemon's to check.
 */
static const struct {
	const char *kind;
	const char *required;
	const char *fields[10];
} batch_kinds[] = {
	{ KIND_EXEC, FIELD_ARGV, { FIELD_ARGV, FIELD_ENV, FIELD_CWD, FIELD_STDIN,
	    FIELD_STDIN_BASE64, FIELD_STDIN_STREAM, FIELD_OUTPUT_LIMIT, FIELD_LIMITS, NULL } },
	{ KIND_ECHO, NULL, { FIELD_VALUE, NULL } },
	{ KIND_SLEEP, FIELD_MS, { FIELD_MS, NULL } },
	{ KIND_SPIN, FIELD_MS, { FIELD_MS, NULL } },
	{ KIND_FAIL, NULL, { FIELD_MESSAGE, NULL } },
};

/* NULL when task's kind and fields are ones the daemon takes, else why not (in buf). */
static const char *
batch_check_task(const json_t *task, char *buf, size_t len)
{
	const char *kind = json_string_value(json_object_get(task, FIELD_KIND)), *key;
	json_t *v;
	size_t k, i, off = 0;

	for (k = 0; k < sizeof batch_kinds / sizeof batch_kinds[0]; k++)
		if (strcmp(kind, batch_kinds[k].kind) == 0)
			break;
	if (k == sizeof batch_kinds / sizeof batch_kinds[0]) {
		off = (size_t)snprintf(buf, len, "unknown task kind \"%s\" (kinds:", kind);
		for (k = 0; k < sizeof batch_kinds / sizeof batch_kinds[0] && off < len; k++)
			off += (size_t)snprintf(buf + off, len - off, "%s %s", k > 0 ? "," : "",
			    batch_kinds[k].kind);
		if (off < len)
			snprintf(buf + off, len - off, ")");
		return buf;
	}
	json_object_foreach((json_t *)task, key, v) {
		if (strcmp(key, FIELD_KIND) == 0 || strcmp(key, FIELD_TIMEOUT_MS) == 0)
			continue;
		for (i = 0; batch_kinds[k].fields[i] != NULL; i++)
			if (strcmp(key, batch_kinds[k].fields[i]) == 0)
				break;
		if (batch_kinds[k].fields[i] == NULL) {
			snprintf(buf, len, "\"%s\" is not a field of a%s %s task", key,
			    kind[0] == 'e' ? "n" : "", kind);
			return buf;
		}
	}
	if (batch_kinds[k].required != NULL &&
	    json_object_get(task, batch_kinds[k].required) == NULL) {
		snprintf(buf, len, "a%s %s task needs \"%s\"", kind[0] == 'e' ? "n" : "", kind,
		    batch_kinds[k].required);
		return buf;
	}
	return NULL;
}

int
batch_read(FILE *f, const char *name, const struct taskopt *to,
    struct batch_item **itemsp, size_t *np)
{
	struct batch_item *items = NULL, *nitems;
	size_t n = 0, cap = 0, lineno = 0, linecap = 0, len;
	char *line = NULL, *badbuf, why[256];
	const char *bad;
	ssize_t got;
	json_t *task, *obj;
	int errors = 0;

	while ((got = getline(&line, &linecap, f)) != -1) {
		lineno++;
		len = (size_t)got;
		while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
			line[--len] = '\0';
		if (strlen(line) != len) {
			tpctl_warnx("%s:%zu: a NUL byte in the line", name, lineno);
			errors++;
			continue;
		}
		badbuf = NULL;
		obj = NULL;
		task = batch_line_task(line, &bad, &badbuf, &obj);
		if (task == NULL) {
			if (bad != NULL) {
				tpctl_warnx("%s:%zu: %s", name, lineno, bad);
				errors++;
			}
			free(badbuf);
			json_decref(obj);
			continue;
		}
		taskopt_apply(to, task);
		if ((bad = batch_check_task(task, why, sizeof why)) != NULL) {
			tpctl_warnx("%s:%zu: %s", name, lineno, bad);
			json_decref(task);
			errors++;
			continue;
		}
		if (n == cap) {
			cap = cap == 0 ? 64 : cap * 2;
			if ((nitems = realloc(items, cap * sizeof *items)) == NULL) {
				json_decref(task);
				errors++;
				break;
			}
			items = nitems;
		}
		memset(&items[n], 0, sizeof items[n]);
		items[n].line = lineno;
		items[n].task = task;
		items[n].task_id = -1;
		items[n].text = strndup(line, 72);
		if (obj != NULL && batch_line_fields(obj, items, n, &items[n], &bad,
		    &badbuf) == -1) {
			tpctl_warnx("%s:%zu: %s", name, lineno, bad);
			free(badbuf);
			errors++;
		}
		json_decref(obj);
		n++;
	}
	if (ferror(f)) {
		tpctl_warnx("cannot read %s: %s", name, strerror(errno));
		errors++;
	}
	free(line);
	*itemsp = items;
	*np = n;
	return errors;
}

void
batch_items_free(struct batch_item *items, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++) {
		json_decref(items[i].task);
		json_decref(items[i].fields);
		free(items[i].text);
		free(items[i].name);
		free(items[i].deps);
	}
	free(items);
}
