/*
 * pgroup.h: signalling an exec task's process group and making sure nothing
 * of it survives the task.
 *
 * The group's id is the pid of the task's child (exec-spawn.h). That id cannot be
 * given to another process while the child is unreaped or any process still
 * has it as its group id, so signalling -pgid never hits a stranger.
 */
#ifndef TPD_PGROUP_H
#define TPD_PGROUP_H

#include <stdint.h>
#include <sys/types.h>

/*
 * Sends sig to every process of group pgid and, through leader_pidfd, to the
 * leader itself (it may have left the group). Never blocks.
 */
void pgroup_signal(pid_t pgid, int leader_pidfd, int sig);

/*
 * Call after the leader has been reaped. SIGKILLs whatever is left of group
 * pgid and waits, without spinning, until each of those processes has exited
 * (a process that was orphaned may linger as a zombie until its new parent
 * reaps it: it has exited, holds nothing but its pid and counts as gone).
 * Waits at most timeout_ms. Returns the number of processes still running
 * then (0 normally), or -1 when the group could not be inspected.
 */
int pgroup_kill_wait(pid_t pgid, uint64_t timeout_ms);

#endif
