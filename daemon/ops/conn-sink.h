/*
 * conn-sink.h: a client connection as a task's sink (tasks.h): where the
 * events of a task it submitted, or waits for, go. Loop thread only.
 */
#ifndef TPD_CONN_SINK_H
#define TPD_CONN_SINK_H

#include <stdbool.h>

#include <jansson.h>

struct conn;
struct task_sink;

/*
 * A sink that sends a task's done to c, with the request's id in front
 * (and its started/output events, when stream: only a submitter's). It
 * names c by its number, so a connection that goes first simply gets
 * nothing. A submit's (wait false) or a wait's (wait true) done is owed to
 * c from now on (conn_done_owed) until it is sent or the task goes. NULL
 * when memory ran out.
 */
struct task_sink *conn_sink_new(struct conn *c, json_t *request_id, bool stream, bool wait);

#endif
