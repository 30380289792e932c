/* The orphan guard: a tiny process that kills the workers' process groups when the
 * launcher dies, however it dies.
 *
 * PR_SET_PDEATHSIG takes the workers down with a SIGKILLed launcher, but not their
 * children. The guard is forked before the loop starts, in its own session, ignoring
 * the usual termination signals; it reads the process groups to watch from a pipe
 * and, when the pipe reaches EOF without a clean goodbye (the launcher is gone),
 * SIGKILLs every group it still watches. The launcher side runs on the loop thread. */
#ifndef DDP_LAUNCHER_GUARD_H
#define DDP_LAUNCHER_GUARD_H

#include <stdbool.h>
#include <sys/types.h>

typedef struct ddp_guard_s {
    pid_t pid; /* 0 when no guard runs */
    int fd;    /* write end of the pipe; -1 when closed */
} ddp_guard_t;

/* argv[0] of the guard process, and the descriptor its pipe arrives on. */
#define DDP_GUARD_NAME "ddp-guard"
#define DDP_GUARD_ARG  "orphan-guard"
#define DDP_GUARD_FD   3

/* The guard's main loop, reading records from `fd`; ddp-launch's main() runs it when
 * started as DDP_GUARD_NAME with the single argument DDP_GUARD_ARG. Returns the exit
 * status: 0, or 2 when `fd` is not the launcher's pipe. */
int ddp_guard_main(int fd);

/* Forks the guard (which re-executes this binary as DDP_GUARD_NAME). 0 or -errno. */
int ddp_guard_start(ddp_guard_t *guard);

/* Asks the guard to kill the group led by `pgid` if the launcher dies (watch) or no
 * longer (forget). Returns 0, or -errno when the guard is gone. */
int ddp_guard_watch(ddp_guard_t *guard, pid_t pgid);
int ddp_guard_forget(ddp_guard_t *guard, pid_t pgid);

/* Says goodbye (the guard exits without killing) and reaps it. */
void ddp_guard_stop(ddp_guard_t *guard);

#endif
