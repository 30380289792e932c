/* NUMA binding (--numa-binding): the machine's topology and each worker's CPUs and memory node.
 *
 * The topology is read from the kernel (sysfs, the launcher's own Cpus_allowed_list) and the
 * GPUs' PCI addresses from the driver (NVML, loaded at run time; CUDA_VISIBLE_DEVICES applied),
 * or, for tests and for planning another machine with --dry-run, from a recorded tree under a
 * root directory (DDP_TOPOLOGY_ROOT; its GPUs are the NVIDIA display devices in PCI order).
 * The modes and their meaning are torchrun's (torch/numa/binding.py): the worker of local rank
 * i is bound near GPU i. Main thread, before the loop; the binding itself is applied by the
 * spawned child between clone and exec (spawn.c), so no numactl runs. */
#ifndef DDP_LAUNCHER_HOST_NUMA_H
#define DDP_LAUNCHER_HOST_NUMA_H

#include "buf.h"
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

/* A set of CPUs laid out as the kernel's affinity masks: bit i of bits[i / bits per long]. */
typedef struct ddp_cpus_s {
    size_t nwords;
    unsigned long *bits;
} ddp_cpus_t;

/* One worker's binding, applied in its child before exec. */
typedef struct ddp_numa_bind_s {
    ddp_cpus_t cpus; /* the CPUs it may run on; nwords 0: not bound */
    int mem_node;    /* the node its memory is preferred on (MPOL_PREFERRED), or -1 */
    int gpu;         /* the visible GPU it is bound near */
    char *text;      /* "CPUs 0-15,128-143, memory node 0", for messages (owned) */
} ddp_numa_bind_t;

/* What binding needs to know of a machine. Every array is owned. */
typedef struct ddp_topology_s {
    int ncpus;          /* one more than the highest CPU number the kernel knows */
    ddp_cpus_t allowed; /* online CPUs the launcher may run on (its Cpus_allowed_list) */
    /* Per CPU, read only where a mode may need it (-1 elsewhere): */
    int *package; /* [ncpus] socket (physical_package_id) of each node's first allowed CPU */
    int *core;    /* [ncpus] the lowest CPU of its physical core, for nodes with a GPU */
    int *cache;   /* [ncpus] the lowest CPU sharing its last-level cache, for nodes with a GPU */
    int nnodes;   /* one more than the highest online NUMA node; 0: no NUMA in sysfs */
    int nonline;  /* online NUMA nodes */
    ddp_cpus_t *node_cpus; /* [nnodes] each node's CPUs (empty: offline or memory only) */
    bool *node_memory;     /* [nnodes] whether the node has memory */
    int ngpus;             /* GPUs the workers see, in CUDA's order (not read: one node) */
    char (*gpu_pci)[16];   /* [ngpus] PCI address ("0000:18:00.0"), "" unknown */
    int *gpu_node;         /* [ngpus] NUMA node, -1 unknown */
    char *gpu_note;        /* why no GPU is seen, or NULL (owned) */
} ddp_topology_t;

/* Reads the machine under `root` ("/" or NULL: this machine, its GPUs through NVML; another
 * directory: a recorded tree). `envp` gives CUDA_VISIBLE_DEVICES. Missing parts are left
 * unknown (no NUMA nodes, no GPU: see ddp_numa_applies). Returns 0, -ENOMEM, or -EINVAL with
 * `why` when a file of the tree is malformed. */
int ddp_topology_read(ddp_topology_t *t, const char *root, char *const *envp, ddp_buf_t *why);

/* As ddp_topology_read, the GPUs from NVML when `nvml` (ddp_topology_read: only for this
 * machine), else from the tree's NVIDIA display devices. */
int ddp_topology_read_gpus_from(ddp_topology_t *t, const char *root, char *const *envp, bool nvml,
                                ddp_buf_t *why);

void ddp_topology_free(ddp_topology_t *t);

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

/* "0-3,8-11" for a set; "" when empty. */
int ddp_cpus_format(const ddp_cpus_t *set, ddp_buf_t *out);

/* Parses a kernel CPU list ("0-3,8-11\n", "" empty) into a set of `nwords` words; numbers at
 * or above nwords * bits per long are -ERANGE, other malformed text -EINVAL. */
int ddp_cpus_parse(const char *text, size_t nwords, ddp_cpus_t *out);

void ddp_cpus_free(ddp_cpus_t *set);

#endif
