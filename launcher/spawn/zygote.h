/* The warm-restart zygote of a node (--warm-restarts): a Python interpreter that has
 * imported the --preload modules, from which restarted workers are forked.
 *
 * Runs on the loop thread. The zygote (worker/python/ddp_launch/_zygote.py) is started in
 * the background once the first attempt's workers run (as a launcher joins, with hot
 * spares: agent/worker_start.c), with their environment less each worker's own variables; the job
 * never waits for it. Launcher and zygote talk over a
 * SOCK_SEQPACKET socket, one message a request or a reply, fields NUL-separated:
 *   to the zygote:   spawn, local rank, cwd, nofile, cpus, memory node, fallback, binding,
 *                    python stacks, guard, argc, argv..., environment... (descriptors:
 *                    stdout, stderr[, the orphan guard's pipe])
 *   to the launcher: ready, threads | refused, why | spawned, pid | failed, why
 * The zygote forks an intermediate that forks the worker and exits, so the worker is
 * adopted by the launcher, which must be a child subreaper (PR_SET_CHILD_SUBREAPER) and
 * waits for it by pid as for any worker. A request waits for its reply (two forks:
 * milliseconds) up to DDP_ZYGOTE_SPAWN_TIMEOUT_S; not ready, refused, dead or slow, the
 * caller starts the worker cold. A zygote that dies is started again, up to
 * DDP_ZYGOTE_MAX_STARTS times in all. What the zygote itself writes (an import's warning,
 * its traceback) is logged line by line, "warm restarts: zygote: ...", not written bare
 * among the workers' prefixed lines. When it imports while the workers need every CPU, the
 * caller may hold it (stopped) meanwhile: ddp_zygote_hold. */
#ifndef DDP_LAUNCHER_SPAWN_ZYGOTE_H
#define DDP_LAUNCHER_SPAWN_ZYGOTE_H

#include "buf.h"
#include "spawn/guard.h"
#include "log.h"
#include "spawn/spawn.h"

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>
#include <uv.h>

#define DDP_ZYGOTE_SPAWN_TIMEOUT_S 5.0
#define DDP_ZYGOTE_MAX_STARTS      3

typedef struct ddp_zygote_s {
    uv_loop_t *loop;
    const ddp_log_t *log;
    ddp_guard_t *guard;
    uv_poll_t *poll;     /* on fd while the zygote may still say ready or refused; NULL */
    int fd;              /* the launcher's end of the socket; -1 */
    uv_poll_t *out_poll; /* on out_fd: the zygote's own stdout and stderr, logged; NULL */
    int out_fd;          /* the read end of their pipe; -1 */
    ddp_buf_t out_line;  /* what it wrote since its last newline */
    pid_t pid;           /* 0: none runs */
    bool ready;          /* it has imported the modules and serves */
    bool held;           /* stopped by ddp_zygote_hold while it imports */
    double held_since;   /* when (monotonic s) */
    double held_s;       /* how long it has been held since it started */
    bool given_up;       /* refused, or ended too often: no more starts */
    bool own_devices;    /* each worker has its own CUDA_VISIBLE_DEVICES (--virtual-local-rank) */
    int starts;
    double started; /* when the running one started (monotonic s) */
    char why[512];  /* why it does not serve now */
    char *path, *preload;
    char **argv, **envp; /* what each start runs (owned) */
} ddp_zygote_t;

/* The entry script, _zygote.py, of the ddp_launch package that came with this launcher
 * (its installed share/ folder or the build tree's), into buf[cap]. false when absent. */
bool ddp_zygote_script(char *buf, size_t cap);

/* Starts the zygote: the executable `path` as `python` -u `script` 3 `preload` PAD, with
 * the environment `envp` (copied), registered with `guard` (borrowed, may have fd -1); PAD
 * is `room` spaces, where a worker writes its own command line for ps to show. Returns
 * 0, or -errno with the zygote given up; it says ready or why not later, on `loop`. Only
 * workers that `path` runs as `python -u` are forked from it. */
int ddp_zygote_start(ddp_zygote_t *z, uv_loop_t *loop, const ddp_log_t *log, ddp_guard_t *guard,
                     const char *path, const char *python, const char *script, const char *preload,
                     size_t room, char *const *envp);

/* After a SIGCHLD: whether the zygote was the child that ended (reaped here; another is
 * started unless it has been given up). */
bool ddp_zygote_reap(ddp_zygote_t *z);

/* While the zygote imports: `hold` stops it (SIGSTOP), so that it takes no CPU from the
 * workers; false lets it go on (SIGCONT). One that says it is ready, or is asked for a
 * worker, goes on first. */
void ddp_zygote_hold(ddp_zygote_t *z, bool hold);

/* Forks the worker `spec` describes from the zygote (its path, stdio, limits, guard and
 * binding; `python_stacks`: --hang-dump's faulthandler, as its sitecustomize arms it).
 * 0 and *pid; or a negative code with why[cap] a phrase saying why it could not (the
 * caller starts the worker cold). */
int ddp_zygote_spawn(ddp_zygote_t *z, const ddp_spawn_t *spec, bool python_stacks, pid_t *pid,
                     char *why, size_t cap);

/* Whether a worker of the environment `envp` would be forked from the zygote as far as
 * the environment goes: less each worker's own variables, it is the zygote's. Else
 * why[cap] names a variable that differs. False where no zygote was started. */
bool ddp_zygote_env_matches(const ddp_zygote_t *z, char *const *envp, char *why, size_t cap);

/* Ends the zygote (SIGKILL: it holds nothing of the job) and frees what it holds. */
void ddp_zygote_stop(ddp_zygote_t *z);

#endif
