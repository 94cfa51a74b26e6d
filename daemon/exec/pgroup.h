/*
 * pgroup.h: containment "process": ending every process of an exec task
 * without cgroups.
 *
 * A task's leader (the child of exec-spawn.h) has a session and process
 * group of its own, whose id is its pid. That id cannot be given to another
 * process while the leader is unreaped or any process still has it as its
 * group or session id, so signalling -pgid before the reap never hits a
 * stranger. After the reap it may (pid_max is often 32768: a busy host
 * wraps it in seconds): then only signal 0 goes to -pgid, and a walk that
 * finds the leader's pid alive again takes nothing by that group or session.
 *
 * Processes that leave the group (setsid, setpgid) are followed too:
 * pgroup_init makes tpd a child subreaper (PR_SET_CHILD_SUBREAPER), so a
 * process whose parent dies is re-parented to tpd instead of to init. At a
 * task's end, pgroup_kill_wait kills (a) the members of its group and
 * session, (b) every live descendant of those, through the parent links,
 * and (c) the orphans re-parented to tpd that belong to it, with their
 * descendants. Which task an orphan comes from is told by its session or
 * group when it kept the task's; otherwise tpd cannot know, and counts the
 * orphan as belonging to every task that was running when it started (its
 * start time): it is ended with the first of them to end. With one exec
 * task at a time that is exact; with several, an escaped orphan may be
 * ended by another task's end, never outlive its own.
 *
 * SIGCHLD is blocked in every thread of tpd and never taken (pgroup_init):
 * a task's leader is waited for through its pidfd (exec-run.c), and a
 * SIGCHLD per task only woke the loop thread for nothing. Orphans are
 * reaped without it: those a task's end killed, and any other that has
 * exited by then, at that end (pgroup_kill_wait); those that exit by
 * themselves meanwhile, by the loop thread's sweep once a second
 * (pgroup_reap). Both hold pgroup_lock while they reap, so a pid read from
 * the children list cannot be reaped, reused by a worker's new leader and
 * then taken by mistake.
 *
 * What this cannot catch (doc/exec.md): the death of the daemon itself.
 * The leader gets SIGKILL then (PR_SET_PDEATHSIG), but its group and every
 * escaped process are re-parented to init, and nothing ends them.
 */
#ifndef TPD_PGROUP_H
#define TPD_PGROUP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/*
 * At start, before any thread: blocks SIGCHLD (in every containment: a
 * thread made later inherits the mask); with containment process also
 * makes tpd a child subreaper.
 */
void pgroup_init(bool subreaper);

/*
 * Sends sig to every process of group pgid and, through leader_pidfd, to the
 * leader itself (it may have left the group). Never blocks. A pgid of 1 or
 * less (tpd's own group, or every process) is refused and logged.
 */
void pgroup_signal(pid_t pgid, int leader_pidfd, int sig);

/* A running task, for telling which orphans are whose. */
struct pgroup_task {
	pid_t leader;
	uint64_t start_ticks;   /* boot time in clock ticks, just before the spawn */
	struct pgroup_task *next;
};

/* Before the spawn: notes the start time. */
void pgroup_task_prepare(struct pgroup_task *pt);

/* After the spawn: registers the task (leader is its pid). */
void pgroup_task_begin(struct pgroup_task *pt, pid_t leader);

/*
 * Call after the leader has been reaped. SIGKILLs whatever is left of the
 * task as described above and waits, without spinning, until each of those
 * processes has exited; then reaps the orphans that have exited. Waits at
 * most timeout_ms. Returns the number of processes still running then (0
 * normally), or -1 when /proc could not be read. Unregisters the task.
 */
int pgroup_kill_wait(struct pgroup_task *pt, uint64_t timeout_ms);

/*
 * A children list (/proc/PID/task/TID/children: pids, each followed by a
 * space) of n bytes read into a buffer of size bytes, NUL-terminated
 * after them: a read that filled the buffer (n is size - 1) may end in a
 * cut pid, which could name any process; it is cut off. Returns the
 * length kept.
 */
size_t pgroup_children_trim(char *buf, size_t n, size_t size);

/*
 * The main (loop) thread, once a second: reaps exited orphans, which are
 * its own children, never a worker's (a task's leader).
 */
void pgroup_reap(void);

#endif
