/* Node health checks (--health-check, --health-check-path, and built-in ones), run before
 * each round on every node: an unhealthy node does not join, and the job says which node
 * and which check before any worker starts.
 *
 * Built in: with --nproc-per-node=gpu, the GPUs this node should use are all still visible;
 * through NVML (loaded at run time where the driver is), no GPU has a page retirement
 * pending, a failed row remap, or volatile uncorrectable ECC errors. A site's own command
 * runs with a time limit (--health-check-timeout) in its own process group. Blocking:
 * called on the rendezvous thread (multi-node) or the loop before a single node's
 * attempt; it touches no launcher state. */
#ifndef DDP_LAUNCHER_HEALTH_H
#define DDP_LAUNCHER_HEALTH_H

#include "buf.h"
#include "config.h"

/* Runs every check that applies. Returns 0 when the node is healthy, `why` then saying what
 * was checked; 1 with `why` ("check: reason") when it is not; -ENOMEM. */
int ddp_health_check(const ddp_launch_config_t *cfg, ddp_buf_t *why);

/* Whether any check applies to `cfg` (one given, or --nproc-per-node=gpu). */
bool ddp_health_checks_apply(const ddp_launch_config_t *cfg);

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
