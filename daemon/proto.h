/*
 * proto.h: requests from JSON lines, and the checks every op applies to its
 * fields. Errors are messages a person can act on, naming the field.
 */
#ifndef TPD_PROTO_H
#define TPD_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

struct request {
	json_t *root;       /* the whole request object (owned) */
	json_t *id;         /* borrowed from root; NULL when absent */
	const char *op;     /* borrowed from root */
};

/*
 * Parses one line. Returns 0, or -1 with *code (ERR_BAD_JSON or
 * ERR_BAD_REQUEST) and *msg (caller frees) set; req->id is set whenever the
 * line was an object with a usable id, so the error can carry it (a line
 * nested deeper than WIRE_MAX_DEPTH too, when it is JSON apart from that).
 */
int proto_parse_request(const char *line, size_t len, struct request *req,
    const char **code, char **msg);

void proto_request_free(struct request *req);

/* Fails naming the first key of obj not in allowed (NULL-terminated). */
int proto_check_fields(json_t *obj, const char *const *allowed, const char *where, char **msg);
/* proto_check_fields, also setting bit i of *present when allowed[i] is there (i < 32). */
int proto_scan_fields(json_t *obj, const char *const *allowed, const char *where,
    uint32_t *present, char **msg);

/* Each getter: absent and not required leaves *out unchanged and returns 0. */
int proto_get_string(json_t *obj, const char *key, bool required, const char **out, char **msg);
int proto_get_bool(json_t *obj, const char *key, bool *out, char **msg);
int proto_get_uint(json_t *obj, const char *key, bool required, uint64_t min, uint64_t max,
    uint64_t *out, char **msg);

/* A task id: a positive integer (or a string of digits, as tpctl users type them). */
int proto_get_task_id(json_t *obj, const char *key, uint64_t *out, char **msg);

/* Deepest nesting of arrays and objects in a JSON text (strings skipped). */
size_t proto_json_depth(const char *text, size_t len);

#endif
