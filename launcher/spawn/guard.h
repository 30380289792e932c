/* The orphan guard: a tiny process that kills the workers' process groups when the
 * launcher dies, however it dies.
 *
 * PR_SET_PDEATHSIG takes the workers down with a SIGKILLed launcher, but not their
 * children. The guard is forked before the loop starts, in its own session, ignoring
 * the usual termination signals; it reads the process groups to watch from a pipe
 * and, when the pipe reaches EOF without a clean goodbye (the launcher is gone),
 * SIGKILLs every group it still watches, removes the default log directory if
 * nothing was written into it, and the in-memory checkpoints' directory with its
 * files. The launcher side runs on the loop thread. */
#ifndef DDP_LAUNCHER_SPAWN_GUARD_H
#define DDP_LAUNCHER_SPAWN_GUARD_H

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

/* The guard learns of a group from the group's first process itself, before it runs
 * any program (spawn.c writes DDP_GUARD_WATCH's record, its pid, to `fd`): a launcher
 * killed between fork and its own next step leaves no group unknown to the guard. */

/* Whether the guard is still there (a record it ignores). 0, or -errno when it is gone. */
int ddp_guard_check(ddp_guard_t *guard);

/* Tells the guard that the group led by `pgid` is gone or no longer its to kill, so that
 * a later group that reuses the number is not taken for it. 0, or -errno. */
int ddp_guard_forget(ddp_guard_t *guard, pid_t pgid);

/* The default log directory, told before it is made: when the launcher dies, the guard
 * removes it if it holds no file. 0, or -errno. */
int ddp_guard_log_dir(ddp_guard_t *guard, const char *dir);

/* The in-memory checkpoints' directory this launcher makes (agent/checkpoints.h), told
 * before it is made: when the launcher dies, the guard removes it and its files once the
 * workers are SIGKILLed. "" forgets it (it could not be made). 0, or -errno. */
int ddp_guard_checkpoint_dir(ddp_guard_t *guard, const char *dir);

/* --checkpoint-dir: when the launcher dies, the guard removes from it what a copy cut
 * short left, the launcher's own temporaries (ddp_ckpt_remove_stale with its pid), once the
 * workers are SIGKILLed. 0, or -errno. */
int ddp_guard_persist_dir(ddp_guard_t *guard, const char *dir);

/* Says goodbye (the guard exits without killing) and reaps it. */
void ddp_guard_stop(ddp_guard_t *guard);

#endif
