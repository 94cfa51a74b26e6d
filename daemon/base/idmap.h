/* idmap.h: a map from 64-bit ids (tasks, connections) to pointers. Not thread-safe. */
#ifndef TPD_IDMAP_H
#define TPD_IDMAP_H

#include <stddef.h>
#include <stdint.h>

struct idmap;

struct idmap *idmap_new(void);
void idmap_free(struct idmap *);
/* Returns 0, or -1 when out of memory. An id is put at most once. */
int idmap_put(struct idmap *, uint64_t id, void *value);
void *idmap_get(const struct idmap *, uint64_t id);
/* Removes id and returns its value, or NULL. */
void *idmap_remove(struct idmap *, uint64_t id);
size_t idmap_count(const struct idmap *);
/* Calls fn for every value; fn must not change the map. */
void idmap_each(const struct idmap *, void (*fn)(void *value, void *arg), void *arg);

#endif
