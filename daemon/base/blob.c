/* blob.c: shared immutable texts (see blob.h). */
#include "config.h"

#include <stdlib.h>

#include "blob.h"

struct blob *
blob_new(size_t cap)
{
	struct blob *b = malloc(sizeof *b + cap + 1);

	if (b == NULL)
		return NULL;
	b->refs = 1;
	b->len = 0;
	b->cap = cap;
	b->data[0] = '\0';
	return b;
}

struct blob *
blob_grow(struct blob *b, size_t cap)
{
	struct blob *nb;

	if (cap <= b->cap)
		return b;
	if ((nb = realloc(b, sizeof *b + cap + 1)) == NULL)
		return NULL;
	nb->cap = cap;
	return nb;
}

struct blob *
blob_fit(struct blob *b)
{
	struct blob *nb;

	b->data[b->len] = '\0';
	if (b->cap - b->len <= 4096)
		return b;
	/* a large text should not keep a doubling's slack for as long as it is retained */
	if ((nb = realloc(b, sizeof *b + b->len + 1)) == NULL)
		return b;
	nb->cap = nb->len;
	return nb;
}

struct blob *
blob_hold(struct blob *b)
{
	b->refs++;
	return b;
}

void
blob_release(struct blob *b)
{
	if (b != NULL && --b->refs == 0)
		free(b);
}
