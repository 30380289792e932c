/* Starting one worker process: its own session and process group, a parent-death
 * signal, its standard streams, exec.
 *
 * Runs on the loop thread. The child shares the launcher's memory until it execs
 * (clone with CLONE_VM | CLONE_VFORK, as posix_spawn; fork where that is refused);
 * signals are blocked around it so no handler of the launcher runs in the child.
 * Exits are observed by the agent (SIGCHLD, waitpid by pid), not here. */
#ifndef DDP_LAUNCHER_SPAWN_SPAWN_H
#define DDP_LAUNCHER_SPAWN_SPAWN_H

#include "host/numa.h"

#include <stdbool.h>
#include <stddef.h>
#include <sys/resource.h>
#include <sys/types.h>

typedef struct ddp_spawn_s {
    const char *path;  /* the executable, as found by ddp_proc_find (host/proc.h) */
    char *const *argv; /* argv[0] is shown as the program name */
    char *const *envp;
    int stdout_fd;               /* dup'd onto 1 in the child; -1 inherits the launcher's */
    int stderr_fd;               /* dup'd onto 2 in the child; -1 inherits */
    rlim_t nofile;               /* soft RLIMIT_NOFILE to restore in the child; 0 leaves it */
    int guard_fd;                /* the orphan guard's pipe (guard.h), or -1 */
    const ddp_numa_bind_t *bind; /* --numa-binding: its CPUs and memory node, or NULL */
    bool bind_fallback;          /* a binding the kernel refuses is a warning, not exit 126 */
    int local_rank;              /* for the binding's messages */
    bool has_fd3;                /* fd3 is dup'd onto descriptor 3 in the child */
    int fd3;                     /* (the warm-restart zygote's socket, zygote.h) */
} ddp_spawn_t;

/* Starts a child and execs. In the child: PR_SET_PDEATHSIG=SIGKILL (so the worker dies with
 * the launcher), setsid() (its own process group, led by its pid), the group written
 * to the orphan guard's pipe (so the guard knows it before any program of the group
 * runs, even when the launcher dies before fork returns; a guard that is gone does not
 * stop the start), default signal dispositions and an empty mask, the standard streams, the
 * binding's CPU affinity and preferred memory node (a refusal: a message on its stderr and exit
 * 126, unless bind_fallback). If exec
 * fails, the child writes why to its stderr and exits 127 (not found) or 126. Returns 0 and the
 * pid, or -errno when the child cannot be made. */
int ddp_spawn(const ddp_spawn_t *spec, pid_t *pid);

#endif
