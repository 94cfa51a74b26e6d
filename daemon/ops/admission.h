/*
 * admission.h: a submit's way into its pool's queue, and the submits held
 * for room (a pool's admission = wait, or a submit's "admission": "wait").
 *
 * A held submit is not accepted: it has no id and is not in the journal.
 * Each pool holds its submits in arrival order, at most its max_held; the
 * oldest is tried first whenever the pool tells of room (pools.h's room
 * hooks, after the task layer's), and none jumps ahead of another. A held
 * submit ends accepted (its answer is the accepted event, as if it had been
 * accepted at once), or rejected: queue_full at its deadline
 * (admission_timeout, or the submit's shorter admission_timeout_ms), closed
 * when tpd drains or its pool is removed, quota when its owner filled its
 * max_queued_per_owner meanwhile. Its connection goes on being served while
 * it waits; a connection that closes drops its held submits, and nothing of
 * them ever runs. Loop thread only.
 */
#ifndef TPD_ADMISSION_H
#define TPD_ADMISSION_H

#include <stdbool.h>
#include <stdint.h>

#include "net/conn.h"
#include "pool/pools.h"
#include "proto/proto.h"
#include "task/tasks.h"

/* At start: the room hook and the connections' close hook. Returns 0, or -1 with *cause. */
int admission_init(char **cause);
void admission_free(void);

/*
 * Submits t into o->pool for the request req of c, and answers it: at once
 * (accepted, or rejected), or later when the submit is held (wait is the
 * admission asked: the submit's, else the pool's; timeout_ms 0 = the
 * pool's admission_timeout). t and o->sink belong to this call from here
 * on; o's strings are copied when the submit is held.
 */
void admission_submit(struct conn *c, struct request *req, struct task *t,
    const struct task_options *o, bool wait, uint64_t timeout_ms);

/* The submits held now for e. */
unsigned admission_held(const struct pools_entry *e);

/* Rejects e's held submits with closed (tpd drains, or e was removed); e NULL: every pool's. */
void admission_reject_all(struct pools_entry *e);

#endif
