/* --hang-dump's stacks: each worker's native stack, taken by libunwind (unwind.h, in a
 * helper process) or, where it cannot be loaded, by eu-stack (elfutils) or gdb -batch,
 * whichever PATH has, into a file of its log directory; and the Python side:
 * a sitecustomize.py, first on the workers' PYTHONPATH, that arms Python's faulthandler
 * on the launcher's dump signal.
 *
 * On the loop thread. The tools run as libuv processes (reaped by libuv by their pids,
 * apart from the workers the agent reaps), each bounded in time. */
#ifndef DDP_LAUNCHER_DIAGNOSE_STACKS_H
#define DDP_LAUNCHER_DIAGNOSE_STACKS_H

#include <sys/types.h>
#include <uv.h>

typedef struct ddp_stacks_s ddp_stacks_t;

/* Starts the tool on each of the `n` pids, its output (and errors) into paths[i]; `done`
 * runs on the loop once every tool has ended or been killed after `timeout` s (with
 * none found or none started: at once, from a zero timer). *tool says which it runs
 * ("libunwind", "eu-stack", "gdb", or NULL for none). 0, or -ENOMEM. The object frees itself after
 * `done`. */
int ddp_stacks_start(uv_loop_t *loop, const pid_t *pids, char *const *paths, int n, double timeout,
                     void (*done)(void *ctx), void *ctx, const char **tool);

/* Writes <dir>/sitecustomize.py (dir created). 0 or -errno. */
int ddp_stacks_write_sitecustomize(const char *dir);

#endif
