/* A machine's topology, as NUMA binding (numa.h) needs it: which CPUs the launcher may use,
 * its NUMA nodes with their CPUs and memory, physical cores and last-level caches, and the
 * GPUs the workers see with their PCI addresses and nodes.
 *
 * The topology is read from the kernel (sysfs, the launcher's own Cpus_allowed_list) and the
 * GPUs' PCI addresses from the driver (NVML, loaded at run time; CUDA_VISIBLE_DEVICES applied),
 * or, for tests and for planning another machine with --dry-run, from a recorded tree under a
 * root directory (DDP_TOPOLOGY_ROOT; its GPUs are the NVIDIA display devices in PCI order).
 * Main thread, before the loop. */
#ifndef DDP_LAUNCHER_HOST_TOPOLOGY_H
#define DDP_LAUNCHER_HOST_TOPOLOGY_H

#include "buf.h"

#include <stdbool.h>
#include <stddef.h>

/* A set of CPUs laid out as the kernel's affinity masks: bit i of bits[i / bits per long]. */
typedef struct ddp_cpus_s {
    size_t nwords;
    unsigned long *bits;
} ddp_cpus_t;

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

/* Node `node`'s CPUs that the launcher may use, into `set` (allocated to t's size). */
void ddp_topology_node_allowed(const ddp_topology_t *t, int node, ddp_cpus_t *set);

/* "0-3,8-11" for a set; "" when empty. */
int ddp_cpus_format(const ddp_cpus_t *set, ddp_buf_t *out);

/* Parses a kernel CPU list ("0-3,8-11\n", "" empty) into a set of `nwords` words; numbers at
 * or above nwords * bits per long are -ERANGE, other malformed text -EINVAL. */
int ddp_cpus_parse(const char *text, size_t nwords, ddp_cpus_t *out);

void ddp_cpus_free(ddp_cpus_t *set);

/* A set of `nwords` words, empty. 0 or -ENOMEM. */
int ddp_cpus_alloc(ddp_cpus_t *set, size_t nwords);
/* Whether `cpu` is in the set. */
bool ddp_cpus_has(const ddp_cpus_t *set, int cpu);
/* Takes `cpu` out of the set. */
void ddp_cpus_remove(ddp_cpus_t *set, int cpu);
/* The lowest CPU of the set, or -1. */
int ddp_cpus_first(const ddp_cpus_t *set);

#endif
