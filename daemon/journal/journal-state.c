/*
 * journal-state.c: the replay of records into tasks (rules in
 * journal-state.h). Tasks are allocated in blocks (a replay of a million
 * records should not be a million mallocs) and found through an idmap.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "base/idmap.h"
#include "journal-state.h"

#define BLOCK_TASKS 4096

struct seg_bytes {
	const unsigned char *base;
	size_t len;
};

struct task_block {
	struct task_block *next;
	size_t used;
	struct jtask t[BLOCK_TASKS];
};

struct jstate {
	struct idmap *map;
	struct task_block *blocks;
	struct seg_bytes *segs;
	size_t nsegs, segcap;
	uint64_t max_id;
	uint64_t next_id_rec;       /* the last NEXT_ID's value; 0 = none */
	struct jtask **sorted;      /* jstate_tasks' answer */
	size_t nsorted;
	bool sorted_valid;
};

struct jstate *
jstate_new(void)
{
	struct jstate *s = calloc(1, sizeof *s);

	if (s == NULL)
		return NULL;
	if ((s->map = idmap_new()) == NULL) {
		free(s);
		return NULL;
	}
	return s;
}

void
jstate_free(struct jstate *s)
{
	struct task_block *b, *next;

	if (s == NULL)
		return;
	for (b = s->blocks; b != NULL; b = next) {
		next = b->next;
		free(b);
	}
	idmap_free(s->map);
	free(s->segs);
	free(s->sorted);
	free(s);
}

uint32_t
jstate_add_segment(struct jstate *s, const unsigned char *base, size_t len)
{
	if (s->nsegs == s->segcap) {
		size_t cap = s->segcap ? s->segcap * 2 : 16;
		struct seg_bytes *p = realloc(s->segs, cap * sizeof *p);

		if (p == NULL)
			return UINT32_MAX;
		s->segs = p;
		s->segcap = cap;
	}
	s->segs[s->nsegs].base = base;
	s->segs[s->nsegs].len = len;
	return (uint32_t)s->nsegs++;
}

static struct jtask *
task_new(struct jstate *s, uint64_t id)
{
	struct task_block *b = s->blocks;
	struct jtask *t;

	if (b == NULL || b->used == BLOCK_TASKS) {
		if ((b = malloc(sizeof *b)) == NULL)
			return NULL;
		b->used = 0;
		b->next = s->blocks;
		s->blocks = b;
	}
	t = &b->t[b->used];
	memset(t, 0, sizeof *t);
	t->id = id;
	if (idmap_put(s->map, id, t) == -1)
		return NULL;
	b->used++;
	return t;
}

static void
set_loc(struct jloc *l, uint32_t seg, const struct jrec *rec)
{
	l->seg = seg;
	l->offset = rec->offset;
	l->size = rec->size;
}

int
jstate_apply(struct jstate *s, uint32_t seg, const struct jrec *rec, const char **why)
{
	struct jtask *t;
	struct jaccepted a;
	struct jstarted st;
	struct jfinished f;

	if (rec->type == JREC_MARK)
		return 0;
	if (rec->type == JREC_NEXT_ID) {
		if (rec->id > JFMT_MAX_TASK_ID + 1) {
			*why = "a next task id past the largest task id (2^53-1)";
			return -1;
		}
		s->next_id_rec = rec->id;
		return 0;
	}
	if (rec->id == 0) {
		*why = "a task record for task 0";
		return -1;
	}
	if (rec->id > JFMT_MAX_TASK_ID) {
		*why = "a task record for a task id past the largest (2^53-1)";
		return -1;
	}
	s->sorted_valid = false;
	t = idmap_get(s->map, rec->id);
	switch (rec->type) {
	case JREC_ACCEPTED:
		if (jaccepted_decode(rec->payload, rec->len, &a, why) == -1)
			return -1;
		if (t != NULL)
			break;
		if ((t = task_new(s, rec->id)) == NULL)
			goto nomem;
		t->flags = JT_ACCEPTED;
		set_loc(&t->accepted, seg, rec);
		break;
	case JREC_STARTED:
		if (jstarted_decode(rec->payload, rec->len, &st, why) == -1)
			return -1;
		if (t == NULL || (t->flags & JT_FINISHED) || st.attempt < t->attempt)
			break;
		t->flags |= JT_STARTED;
		t->attempt = (uint32_t)st.attempt;
		set_loc(&t->started, seg, rec);
		break;
	case JREC_CANCEL:
		if (t == NULL || (t->flags & JT_FINISHED))
			break;
		t->flags |= JT_CANCELLED;
		set_loc(&t->cancel, seg, rec);
		break;
	case JREC_FINISHED:
		if (jfinished_decode(rec->payload, rec->len, &f, why) == -1)
			return -1;
		if (t == NULL && (t = task_new(s, rec->id)) == NULL)
			goto nomem;
		t->flags = (t->flags & (JT_ACCEPTED | JT_STARTED | JT_CANCELLED)) | JT_FINISHED;
		if (f.attempt > t->attempt)
			t->attempt = (uint32_t)f.attempt;
		memset(&t->accepted, 0, sizeof t->accepted);
		memset(&t->started, 0, sizeof t->started);
		memset(&t->cancel, 0, sizeof t->cancel);
		set_loc(&t->finished, seg, rec);
		break;
	case JREC_FORGOTTEN:
		if (t != NULL)
			idmap_remove(s->map, rec->id);
		break;
	default:
		*why = "a record of an unknown type";
		return -1;
	}
	if (rec->id > s->max_id)
		s->max_id = rec->id;
	return 0;
nomem:
	*why = "out of memory";
	return -1;
}

uint64_t
jstate_next_id(const struct jstate *s)
{
	uint64_t next = s->max_id + 1;

	return s->next_id_rec > next ? s->next_id_rec : next;
}

uint64_t
jstate_max_id(const struct jstate *s)
{
	return s->max_id;
}

struct jtask *
jstate_find(const struct jstate *s, uint64_t id)
{
	return idmap_get(s->map, id);
}

static void
collect(void *value, void *arg)
{
	struct jstate *s = arg;

	s->sorted[s->nsorted++] = value;
}

static int
by_id(const void *a, const void *b)
{
	const struct jtask *x = *(struct jtask *const *)a, *y = *(struct jtask *const *)b;

	return x->id < y->id ? -1 : x->id > y->id;
}

struct jtask *const *
jstate_tasks(struct jstate *s, size_t *n)
{
	if (!s->sorted_valid) {
		size_t count = idmap_count(s->map);
		struct jtask **p = realloc(s->sorted, (count ? count : 1) * sizeof *p);

		if (p == NULL) {
			*n = 0;
			return NULL;
		}
		s->sorted = p;
		s->nsorted = 0;
		idmap_each(s->map, collect, s);
		qsort(s->sorted, s->nsorted, sizeof *s->sorted, by_id);
		s->sorted_valid = true;
	}
	*n = s->nsorted;
	return s->sorted;
}

const unsigned char *
jstate_record(const struct jstate *s, const struct jloc *loc)
{
	if (loc->size == 0 || loc->seg >= s->nsegs ||
	    loc->offset + loc->size > s->segs[loc->seg].len)
		return NULL;
	return s->segs[loc->seg].base + loc->offset;
}

int
jstate_accepted(const struct jstate *s, const struct jtask *t, struct jaccepted *out)
{
	const unsigned char *r = jstate_record(s, &t->accepted);
	const char *why;

	if (r == NULL)
		return -1;
	return jaccepted_decode(r + JFMT_REC_HEADER, t->accepted.size - JFMT_REC_HEADER, out, &why);
}

int
jstate_started(const struct jstate *s, const struct jtask *t, struct jstarted *out)
{
	const unsigned char *r = t->started.size != 0 ? jstate_record(s, &t->started) : NULL;
	const char *why;

	if (r == NULL)
		return -1;
	return jstarted_decode(r + JFMT_REC_HEADER, t->started.size - JFMT_REC_HEADER, out, &why);
}

int
jstate_finished(const struct jstate *s, const struct jtask *t, struct jfinished *out)
{
	const unsigned char *r = jstate_record(s, &t->finished);
	const char *why;

	if (r == NULL)
		return -1;
	return jfinished_decode(r + JFMT_REC_HEADER, t->finished.size - JFMT_REC_HEADER, out, &why);
}

static void
add_live(void *value, void *arg)
{
	const struct jtask *t = value;
	uint64_t *sum = arg;

	*sum += t->finished.size + t->accepted.size + t->started.size + t->cancel.size;
}

uint64_t
jstate_live_bytes(const struct jstate *s)
{
	uint64_t sum = 0;

	idmap_each(s->map, add_live, &sum);
	return sum;
}
