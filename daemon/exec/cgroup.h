/*
 * cgroup.h: containment of exec tasks in cgroup v2.
 *
 * tpd owns one subtree of the cgroup2 hierarchy, its cgroup root:
 * [daemon] cgroup_root, by default the cgroup tpd was started in (the one
 * systemd gives a unit with Delegate=yes). At start tpd moves itself into
 * ROOT/daemon, enables the memory, pids and cpu controllers it can for
 * ROOT/tasks, kills and removes what a previous run left in ROOT/tasks,
 * and then gives every exec task a cgroup of its own, ROOT/tasks/wN: the
 * task's process is cloned straight into it, its limits are the cgroup's
 * files, and its end is cgroup.kill and "populated 0" in cgroup.events.
 * Nothing a task starts can leave its cgroup (an unprivileged process
 * cannot write to cgroup.procs outside it).
 *
 * A cgroup is one task's at a time. Creating and removing one costs more
 * than a tenth of a short task, so a worker keeps its last one, empty, for
 * its next task: the usage is then the difference of the counters, the
 * limits are written again where they differ, and memory.peak is reset
 * (Linux 6.12; where it cannot be, a cgroup with the memory controller is
 * used once). One that is not empty at the task's end is never used again.
 *
 * Where that is not possible (no cgroup2 mount, the root is the hierarchy's
 * own, not writable, or another tpd's), containment is "process" (pgroup.h)
 * and the reason is logged; [daemon] containment = cgroup makes it an error
 * instead, containment = process skips cgroups altogether.
 *
 * cgroup_setup runs once at start, before any thread; the rest is read-only
 * after it and may be called from any worker.
 */
#ifndef TPD_CGROUP_H
#define TPD_CGROUP_H

#include <stdbool.h>
#include <stdint.h>

/* The controllers tpd uses, as bits. */
#define CGROUP_MEMORY 0x1
#define CGROUP_PIDS 0x2
#define CGROUP_CPU 0x4

/* What the configuration asks for, and what a probe or the setup found. */
struct cgroup_info {
	bool cgroup;            /* containment is cgroup */
	unsigned controllers;   /* CGROUP_*: usable for task cgroups */
	char root[512];         /* the root's directory, when cgroup */
	char why[1024];         /* when not cgroup: why */
};

/*
 * Looks without changing anything (tpd -n, and the limits check): would
 * containment be cgroup with this mode ("auto", "cgroup", "process") and
 * root (NULL: the default)? Fills *info. Returns 0, or -1 with *cause set
 * when mode is "cgroup" and it cannot be.
 */
int cgroup_probe(const char *mode, const char *root, struct cgroup_info *info,
    char **cause);

/*
 * At start, once, before any thread: probes, then sets the subtree up as
 * described above. Returns 0 (containment is cgroup or process, logged), or
 * -1 with *cause set when mode is "cgroup" and it cannot be.
 */
int cgroup_setup(const char *mode, const char *root, char **cause);

/* What cgroup_setup settled on (process before it ran). */
const struct cgroup_info *cgroup_current(void);

/* "cgroup" or "process": the stats field. */
const char *cgroup_containment(void);

/* A task cgroup's limits; 0: none ("max"). */
struct cgroup_limits {
	uint64_t memory_bytes;  /* memory.max, with memory.swap.max 0 */
	uint64_t pids;          /* pids.max */
	uint64_t cpu_millicores; /* cpu.max */
};

/* One task's cgroup. */
struct cgroup_task {
	int dirfd;              /* the directory, for CLONE_INTO_CGROUP; -1: none */
	int events_fd;          /* cgroup.events, polled for POLLPRI */
	int peak_fd;            /* memory.peak (reset and read through it), or -1 */
	char name[32];          /* its name under ROOT/tasks */
	struct cgroup_limits applied;   /* what its files say now */
	uint64_t base_user_us, base_system_us, base_oom; /* counters when the task began */
	bool empty;             /* it was empty at the task's end */
};

/*
 * A cgroup for one task, with lim applied: the worker's kept one, or a new
 * ROOT/tasks/wN. Returns 0, or -1 with *cause set.
 */
int cgroup_task_create(struct cgroup_task *ct, const struct cgroup_limits *lim,
    char **cause);

/* Sends sig to every process in the cgroup. */
void cgroup_task_signal(struct cgroup_task *ct, int sig);

/*
 * Kills everything left in the cgroup (cgroup.kill, unless it is empty
 * already) and waits, polling cgroup.events, until it is empty, at most
 * timeout_ms. Returns 0 when it is empty, -1 otherwise (logged).
 */
int cgroup_task_kill_wait(struct cgroup_task *ct, uint64_t timeout_ms);

/* What the task used, from cpu.stat, memory.peak and memory.events. */
struct cgroup_usage {
	uint64_t user_us, system_us;
	uint64_t memory_peak;   /* bytes; 0: not known (no memory controller) */
	uint64_t oom_kills;     /* memory.events oom_kill */
	bool have_cpu;          /* cpu.stat was read */
};

void cgroup_task_usage(struct cgroup_task *ct, struct cgroup_usage *u);

/*
 * The task is over: keeps an empty cgroup for the worker's next task, else
 * removes it (one still holding processes stays until the next start).
 */
void cgroup_task_destroy(struct cgroup_task *ct);

#endif
