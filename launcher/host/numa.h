/* NUMA binding (--numa-binding): each worker's CPUs and memory node, placed over the
 * machine's topology (topology.h).
 *
 * The modes and their meaning are torchrun's (torch/numa/binding.py): the worker of local
 * rank i is bound near GPU i. Main thread, before the loop; the binding itself is applied by
 * the spawned child between clone and exec (spawn/spawn.c), so no numactl runs. */
#ifndef DDP_LAUNCHER_HOST_NUMA_H
#define DDP_LAUNCHER_HOST_NUMA_H

#include "buf.h"
#include "host/topology.h"
#include "log.h"

#include <stdbool.h>
#include <stddef.h>

typedef enum {
    DDP_NUMA_OFF,
    DDP_NUMA_NODE,        /* every CPU of the GPU's NUMA node */
    DDP_NUMA_SOCKET,      /* every CPU of the NUMA nodes of the GPU's socket */
    DDP_NUMA_EXCLUSIVE,   /* a disjoint share of the node's physical cores per GPU of the node */
    DDP_NUMA_CORE_COMPLEX /* one set of cores sharing a last-level cache, a different one per
                             GPU of the node where there are enough */
} ddp_numa_mode_t;

/* torchrun's spelling of a mode ("node", ...), or NULL for DDP_NUMA_OFF. */
const char *ddp_numa_mode_name(ddp_numa_mode_t mode);

/* One worker's binding, applied in its child before exec. */
typedef struct ddp_numa_bind_s {
    ddp_cpus_t cpus; /* the CPUs it may run on; nwords 0: not bound */
    int mem_node;    /* the node its memory is preferred on (MPOL_PREFERRED), or -1 */
    int gpu;         /* the visible GPU it is bound near */
    char *text;      /* "CPUs 0-15,128-143, memory node 0", for messages (owned) */
} ddp_numa_bind_t;

/* Whether binding means anything on this machine for `nworkers` workers: false with the
 * reason (one NUMA node, no GPU, a GPU whose node is unknown) when it is a no-op. */
bool ddp_numa_applies(const ddp_topology_t *t, int nworkers, ddp_buf_t *why);

/* The binding of the worker of `local_rank` under `mode`. Returns 0, -ENOMEM, or -EINVAL
 * with `why` (no GPU for it, no CPU it may use near its GPU, fewer physical cores than GPUs
 * on the node for exclusive). */
int ddp_numa_bind_for(const ddp_topology_t *t, ddp_numa_mode_t mode, int local_rank,
                      ddp_numa_bind_t *out, ddp_buf_t *why);

/* Every local rank's binding for the job (*binds: `nworkers` entries, owned by the caller,
 * freed with ddp_numa_binds_free), from the machine under `root` (see ddp_topology_read). A
 * no-op machine is one info line and *binds NULL. A worker that cannot be bound is an error
 * naming it, or with `fallback` a warning and that worker unbound. Returns 0, -ENOMEM or
 * -EINVAL with `why`. */
int ddp_numa_plan(ddp_numa_mode_t mode, bool fallback, int nworkers, const char *root,
                  char *const *envp, const ddp_log_t *log, ddp_numa_bind_t **binds, ddp_buf_t *why);

void ddp_numa_binds_free(ddp_numa_bind_t *binds, int nworkers);

#endif
