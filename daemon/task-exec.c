/* task-exec.c: placeholder until the exec kind lands: exec answers bad_request. */
#include "config.h"

#include <stdio.h>

#include "task.h"

static int
exec_parse(struct task *t, json_t *spec, char **cause)
{
	if (asprintf(cause, "task kind \"exec\" is not built yet") == -1)
		*cause = NULL;
	return -1;
}

static enum pool_state
exec_run(struct task *t)
{
	return POOL_FAILED;
}

const struct task_kind task_kind_exec = {
	.name = "exec", .parse = exec_parse, .run = exec_run,
};
