/* Node health checks (--health-check, --health-check-path, and built-in ones), run before
 * each round on every node: an unhealthy node does not join, and the job says which node
 * and which check before any worker starts.
 *
 * Built in: with --nproc-per-node=gpu, the GPUs this node should use are all still visible;
 * through NVML (loaded at run time where the driver is), no GPU has a page retirement
 * pending, a failed row remap, or volatile uncorrectable ECC errors.
 *
 * What a check does is untrusted: a path may sit on a hung file system, a driver may not
 * answer, a site's command may never end, leave jobs behind or hold its pipes open. So every
 * check runs in the checker, a process of its own (this binary again, as DDP_HEALTH_NAME):
 * the launcher's threads only wait for its verdict, each check bounded by
 * --health-check-timeout, and a cancel (a signal to the launcher) ends the wait at once.
 * The command runs in its own process group, which the orphan guard (guard.h) knows; the
 * checker is a child subreaper, so that what the command leaves, in its group or in
 * sessions of its own, comes to it and ends when the command exits (its end is its exit,
 * not EOF on its pipes), when the wait ends, or when the launcher dies. ddp_health_check
 * blocks (the rendezvous thread's); ddp_health_start runs it on libuv's thread pool for
 * the loop of a one-node job. */
#ifndef DDP_LAUNCHER_HOST_HEALTH_H
#define DDP_LAUNCHER_HOST_HEALTH_H

#include "buf.h"

#include <stdbool.h>

struct uv_loop_s; /* uv.h's loop (health.c includes it) */

/* argv[0] of the checker; main.c runs ddp_health_main when started so. */
#define DDP_HEALTH_NAME "ddp-health"
#define DDP_HEALTH_ARGC 4 /* the name, the paths, the GPUs expected, the command */

/* The checks a node runs (config/config.h's ddp_config_health_spec makes it of a job's
 * configuration). Its strings are borrowed. */
typedef struct {
    const char *command; /* --health-check: a command for sh -c, or NULL */
    const char *paths;   /* --health-check-path: ':'-separated paths to be there, or NULL */
    int gpus;            /* --nproc-per-node=gpu: the GPUs this node should see; -1: no check */
    double timeout;      /* --health-check-timeout: each check's bound (s) */
} ddp_health_spec_t;

/* What a wait for the checks is given. */
typedef struct {
    int guard_fd;  /* the orphan guard's pipe (guard.h): the command's group is told; -1 */
    int cancel_fd; /* readable once the launcher ends (a signal): the checks end now; -1 */
} ddp_health_ctx_t;

/* Runs every check that applies, in the checker, and waits for its verdict: 0 when the
 * node is healthy, `why` then saying what was checked; 1 with `why` ("check: reason") when
 * it is not (a check past --health-check-timeout among them); -ECANCELED when cancel_fd
 * became readable (the checker and its processes are ended). Blocking, on a thread that is
 * not the loop's. */
int ddp_health_check(const ddp_health_spec_t *spec, const ddp_health_ctx_t *ctx, ddp_buf_t *why);

/* Whether any check applies (one given, or --nproc-per-node=gpu). */
bool ddp_health_checks_apply(const ddp_health_spec_t *spec);

/* The checker's main: argv as DDP_HEALTH_ARGC says (an empty string: none), its verdict
 * to the launcher's socket at descriptor 3, the guard's pipe at 4 where it is open. */
int ddp_health_main(int argc, char **argv);

/* The checks of a one-node job, on libuv's thread pool. From the loop: `done(ctx, rc,
 * why)` runs on it when they end (rc as ddp_health_check's, never -ECANCELED), unless
 * cancelled first. 0 or -errno. */
typedef struct ddp_health_run_s ddp_health_run_t;
int ddp_health_start(struct uv_loop_s *loop, const ddp_health_spec_t *spec, int guard_fd,
                     void (*done)(void *ctx, int rc, const char *why), void *ctx,
                     ddp_health_run_t **out);

/* From the loop: the checks end now (`done` is not called); the run frees itself once its
 * thread has returned, which keeps the loop running until then (briefly: the checker is
 * ended, not waited out). */
void ddp_health_cancel(ddp_health_run_t *run);

/* GPU memory after a stop (--gpu-memory-reclaim-timeout): NVML, kept loaded while a wait
 * polls. Main loop. */
typedef struct ddp_gpu_memory_s ddp_gpu_memory_t;

/* Loads NVML; NULL where there is no driver or no GPU (nothing to wait for). */
ddp_gpu_memory_t *ddp_gpu_memory_open(void);

/* The most memory processes hold on one GPU (bytes; the driver's own reservation apart
 * where NVML tells it apart) and that GPU's index. Returns 0, or -EIO when NVML fails (the
 * wait then ends). */
int ddp_gpu_memory_used(ddp_gpu_memory_t *m, unsigned long long *used, int *gpu);

void ddp_gpu_memory_close(ddp_gpu_memory_t *m);

#endif
