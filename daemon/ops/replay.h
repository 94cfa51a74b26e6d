/*
 * replay.h: a wait from the start ("stream": true, "from": "start") on a
 * task whose output is spooled (exec/spool.h): its whole output from the
 * file, paced by the client, then what it writes from then on and its
 * done. Loop thread only.
 */
#ifndef TPD_REPLAY_H
#define TPD_REPLAY_H

#include <stdint.h>

#include <jansson.h>

struct conn;

/*
 * Starts replaying task's spool file fd (taken) on c for the request id
 * (a wait, owed a done from now on). The replay reads a record, sends it
 * as an output event, and reads the next once the connection has taken
 * it; at the end of the file it follows the running task (its stream on,
 * a sink of c's on its list) or sends its done. Every byte of the file is
 * sent once, and a cut (the spool's bounds) is said by a "cut" event.
 */
void replay_start(struct conn *c, json_t *id, uint64_t task, int fd);

/* At exit: drops every replay. */
void replay_stop_all(void);

#endif
