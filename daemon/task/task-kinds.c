/*
 * task-kinds.c: the table of task kinds, which a submit's "kind" names.
 * A new kind is its file (task-NAME.c, implementing struct task_kind of
 * task.h), its name in wire.h (KIND_*) and one row here.
 */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "task.h"

static const struct task_kind *const kinds[] = {
	&task_kind_exec, &task_kind_echo, &task_kind_sleep, &task_kind_spin, &task_kind_fail,
};

const struct task_kind *
task_kind_find(const char *name)
{
	for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
		if (strcmp(kinds[i]->name, name) == 0)
			return kinds[i];
	return NULL;
}

const char *
task_kind_names(void)
{
	static char names[128];

	if (names[0] == '\0') {
		size_t off = 0;
		for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
			off += (size_t)snprintf(names + off, off < sizeof names ?
			    sizeof names - off : 0, "%s%s", i > 0 ? ", " : "", kinds[i]->name);
	}
	return names;
}
