/* idmap.c: chained hashing with power-of-two buckets, doubled when the load passes 1. */
#include "config.h"

#include <stdlib.h>

#include "idmap.h"

struct idmap_entry {
	uint64_t id;
	void *value;
	struct idmap_entry *next;
};

struct idmap {
	struct idmap_entry **buckets;
	size_t nbuckets; /* a power of two */
	size_t count;
};

static size_t
slot(uint64_t id, size_t nbuckets)
{
	/* Fibonacci hashing spreads sequential ids over the buckets. */
	return (size_t)((id * 11400714819323198485ull) >> 32) & (nbuckets - 1);
}

struct idmap *
idmap_new(void)
{
	struct idmap *m = calloc(1, sizeof *m);

	if (m == NULL)
		return NULL;
	m->nbuckets = 64;
	if ((m->buckets = calloc(m->nbuckets, sizeof *m->buckets)) == NULL) {
		free(m);
		return NULL;
	}
	return m;
}

void
idmap_free(struct idmap *m)
{
	struct idmap_entry *e, *next;

	if (m == NULL)
		return;
	for (size_t i = 0; i < m->nbuckets; i++)
		for (e = m->buckets[i]; e != NULL; e = next) {
			next = e->next;
			free(e);
		}
	free(m->buckets);
	free(m);
}

static void
grow(struct idmap *m)
{
	size_t n = m->nbuckets * 2;
	struct idmap_entry **b = calloc(n, sizeof *b), *e, *next;

	if (b == NULL)
		return; /* stay at the current size: slower, still correct */
	for (size_t i = 0; i < m->nbuckets; i++)
		for (e = m->buckets[i]; e != NULL; e = next) {
			size_t s;

			next = e->next;
			s = slot(e->id, n);
			e->next = b[s];
			b[s] = e;
		}
	free(m->buckets);
	m->buckets = b;
	m->nbuckets = n;
}

int
idmap_put(struct idmap *m, uint64_t id, void *value)
{
	struct idmap_entry *e = malloc(sizeof *e);
	size_t s;

	if (e == NULL)
		return -1;
	if (m->count >= m->nbuckets)
		grow(m);
	s = slot(id, m->nbuckets);
	e->id = id;
	e->value = value;
	e->next = m->buckets[s];
	m->buckets[s] = e;
	m->count++;
	return 0;
}

void *
idmap_get(const struct idmap *m, uint64_t id)
{
	for (struct idmap_entry *e = m->buckets[slot(id, m->nbuckets)]; e != NULL; e = e->next)
		if (e->id == id)
			return e->value;
	return NULL;
}

void *
idmap_remove(struct idmap *m, uint64_t id)
{
	struct idmap_entry **ep = &m->buckets[slot(id, m->nbuckets)], *e;

	for (; (e = *ep) != NULL; ep = &e->next)
		if (e->id == id) {
			void *value = e->value;
			*ep = e->next;
			free(e);
			m->count--;
			return value;
		}
	return NULL;
}

size_t
idmap_count(const struct idmap *m)
{
	return m->count;
}

void
idmap_each(const struct idmap *m, void (*fn)(void *, void *), void *arg)
{
	for (size_t i = 0; i < m->nbuckets; i++)
		for (struct idmap_entry *e = m->buckets[i]; e != NULL; e = e->next)
			fn(e->value, arg);
}
