/* NUMA binding: torchrun's four modes over a machine's topology (see numa.h). */
#include "host/numa.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const mode_names[] = {NULL, "node", "socket", "exclusive", "core-complex"};

const char *ddp_numa_mode_name(ddp_numa_mode_t mode)
{
    return (size_t)mode < sizeof mode_names / sizeof *mode_names ? mode_names[mode] : NULL;
}

bool ddp_numa_applies(const ddp_topology_t *t, int nworkers, ddp_buf_t *why)
{
    if (t->nonline < 2) {
        ddp_buf_puts(why, t->nonline == 1
                              ? "this machine has one NUMA node"
                              : "the kernel shows no NUMA nodes (/sys/devices/system/node)");
        return false;
    }
    if (t->ngpus == 0) {
        ddp_buf_printf(why, "no GPU is visible (%s)", t->gpu_note ? t->gpu_note : "none found");
        return false;
    }
    for (int g = 0; g < nworkers && g < t->ngpus; g++) {
        if (t->gpu_node[g] >= 0 && t->gpu_node[g] < t->nnodes)
            continue;
        if (t->gpu_pci[g][0] == '\0')
            ddp_buf_printf(why, "GPU %d's PCI address is unknown (a MIG instance or a UUID)", g);
        else
            ddp_buf_printf(why, "GPU %d (%s) reports NUMA node %d", g, t->gpu_pci[g],
                           t->gpu_node[g]);
        return false;
    }
    return true;
}

/* The visible GPUs on `node`, ascending; *rel: the place of `gpu` among them. */
static int gpus_on_node(const ddp_topology_t *t, int node, int gpu, int *rel)
{
    int n = 0;
    for (int g = 0; g < t->ngpus; g++) {
        if (g == gpu)
            *rel = n;
        n += t->gpu_node[g] == node;
    }
    return n;
}

/* Sorts the groups keys[i] (sizes[i] CPUs each), stably: by key, or by size, largest first.
 * Insertion sort: a node has at most a few hundred. */
static void sort_groups(int *keys, int *sizes, int n, bool by_size)
{
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && (by_size ? sizes[j - 1] < sizes[j] : keys[j - 1] > keys[j]); j--) {
            int k = keys[j], s = sizes[j];
            keys[j] = keys[j - 1];
            sizes[j] = sizes[j - 1];
            keys[j - 1] = k;
            sizes[j - 1] = s;
        }
}

/* The distinct keys (core or cache, per CPU in `key`) of the CPUs of `set`, ascending, with the
 * number of CPUs of each: keys[] and sizes[] hold t->ncpus. Returns how many. */
static int distinct_keys(const ddp_topology_t *t, const ddp_cpus_t *set, const int *key, int *keys,
                         int *sizes)
{
    int n = 0;
    for (int cpu = 0; cpu < t->ncpus; cpu++) {
        if (!ddp_cpus_has(set, cpu))
            continue;
        int k = 0;
        while (k < n && keys[k] != key[cpu])
            k++;
        if (k == n) {
            keys[n] = key[cpu];
            sizes[n++] = 0;
        }
        sizes[k]++;
    }
    sort_groups(keys, sizes, n, false);
    return n;
}

/* Keeps in `set` only the CPUs whose key is one of keys[from..to). */
static void keep_keys(const ddp_topology_t *t, ddp_cpus_t *set, const int *key, const int *keys,
                      int from, int to)
{
    for (int cpu = 0; cpu < t->ncpus; cpu++) {
        bool keep = false;
        for (int k = from; k < to && !keep; k++)
            keep = key[cpu] == keys[k];
        if (!keep)
            ddp_cpus_remove(set, cpu);
    }
}

static int bind_socket(const ddp_topology_t *t, int node, ddp_cpus_t *set)
{
    ddp_cpus_t other;
    int first = ddp_cpus_first(set), err = ddp_cpus_alloc(&other, set->nwords);
    int package = first >= 0 ? t->package[first] : -1;
    for (int n = 0; err == 0 && package >= 0 && n < t->nnodes; n++) {
        ddp_topology_node_allowed(t, n, &other);
        int lowest = ddp_cpus_first(&other);
        if (n == node || lowest < 0 || t->package[lowest] != package)
            continue;
        for (size_t w = 0; w < set->nwords; w++)
            set->bits[w] |= other.bits[w];
    }
    ddp_cpus_free(&other);
    return err;
}

static int bind_exclusive(const ddp_topology_t *t, int node, int gpu, ddp_cpus_t *set,
                          ddp_buf_t *why)
{
    int rel = 0, peers = gpus_on_node(t, node, gpu, &rel);
    int *keys = malloc(2 * (size_t)t->ncpus * sizeof *keys);
    if (keys == NULL)
        return -ENOMEM;
    int ncores = distinct_keys(t, set, t->core, keys, keys + t->ncpus);
    int err = 0;
    if (ncores < peers) {
        ddp_buf_printf(why,
                       "NUMA node %d has %d physical core(s) ddp-launch may use for its %d GPUs",
                       node, ncores, peers);
        err = -EINVAL;
    } else {
        int per = ncores / peers, extra = ncores % peers;
        int from = rel * per + (rel < extra ? rel : extra);
        keep_keys(t, set, t->core, keys, from, from + per + (rel < extra));
    }
    free(keys);
    return err;
}

static int bind_core_complex(const ddp_topology_t *t, int node, int gpu, ddp_cpus_t *set)
{
    int rel = 0;
    gpus_on_node(t, node, gpu, &rel);
    int *keys = malloc(2 * (size_t)t->ncpus * sizeof *keys);
    if (keys == NULL)
        return -ENOMEM;
    int *sizes = keys + t->ncpus;
    int n = distinct_keys(t, set, t->cache, keys, sizes);
    /* The largest complexes first, then the lowest CPU: a stable order every worker agrees on. */
    sort_groups(keys, sizes, n, true);
    if (n > 0)
        keep_keys(t, set, t->cache, keys, rel % n, rel % n + 1);
    free(keys);
    return 0;
}

static int describe(ddp_numa_bind_t *b, int node)
{
    ddp_buf_t text = DDP_BUF_INIT;
    int err = ddp_buf_puts(&text, "CPUs ");
    if (err == 0)
        err = ddp_cpus_format(&b->cpus, &text);
    if (err == 0)
        err = b->mem_node >= 0
                  ? ddp_buf_printf(&text, ", memory node %d", b->mem_node)
                  : ddp_buf_printf(&text, ", memory anywhere (node %d has none)", node);
    if (err == 0 && (b->text = strdup(ddp_buf_str(&text))) == NULL)
        err = -ENOMEM;
    ddp_buf_free(&text);
    return err;
}

int ddp_numa_bind_for(const ddp_topology_t *t, ddp_numa_mode_t mode, int local_rank,
                      ddp_numa_bind_t *out, ddp_buf_t *why)
{
    ddp_numa_bind_t b = {{0, NULL}, -1, local_rank, NULL};
    if (local_rank >= t->ngpus) {
        ddp_buf_printf(why, "there is no GPU %d to bind it near: %d GPU(s) visible", local_rank,
                       t->ngpus);
        return -EINVAL;
    }
    int node = t->gpu_node[local_rank];
    if (node < 0 || node >= t->nnodes) {
        ddp_buf_printf(why, "the NUMA node of GPU %d is unknown", local_rank);
        return -EINVAL;
    }
    int err = ddp_cpus_alloc(&b.cpus, t->allowed.nwords);
    if (err)
        return err;
    ddp_topology_node_allowed(t, node, &b.cpus);
    if (ddp_cpus_first(&b.cpus) < 0) {
        ddp_buf_t mine = DDP_BUF_INIT;
        ddp_cpus_format(&t->allowed, &mine);
        ddp_buf_printf(why,
                       "NUMA node %d of GPU %d (%s) has no CPU ddp-launch may use (it may use %s)",
                       node, local_rank, t->gpu_pci[local_rank], ddp_buf_str(&mine));
        ddp_buf_free(&mine);
        err = -EINVAL;
    } else if (mode == DDP_NUMA_SOCKET) {
        err = bind_socket(t, node, &b.cpus);
    } else if (mode == DDP_NUMA_EXCLUSIVE) {
        err = bind_exclusive(t, node, local_rank, &b.cpus, why);
    } else if (mode == DDP_NUMA_CORE_COMPLEX) {
        err = bind_core_complex(t, node, local_rank, &b.cpus);
    }
    b.mem_node = t->node_memory[node] ? node : -1;
    if (err == 0)
        err = describe(&b, node);
    if (err) {
        ddp_cpus_free(&b.cpus);
        return err;
    }
    *out = b;
    return 0;
}

void ddp_numa_binds_free(ddp_numa_bind_t *binds, int nworkers)
{
    for (int i = 0; binds != NULL && i < nworkers; i++) {
        ddp_cpus_free(&binds[i].cpus);
        free(binds[i].text);
    }
    free(binds);
}

int ddp_numa_plan(ddp_numa_mode_t mode, bool fallback, int nworkers, const char *root,
                  char *const *envp, const ddp_log_t *log, ddp_numa_bind_t **binds, ddp_buf_t *why)
{
    ddp_topology_t t;
    ddp_numa_bind_t *all = NULL;
    const char *name = ddp_numa_mode_name(mode);
    int err = ddp_topology_read(&t, root, envp, why);
    if (err || !ddp_numa_applies(&t, nworkers, why))
        goto out;
    all = calloc((size_t)nworkers, sizeof *all);
    if (all == NULL) {
        err = -ENOMEM;
        goto out;
    }
    for (int lr = 0; lr < nworkers && err == 0; lr++) {
        ddp_buf_t reason = DDP_BUF_INIT;
        all[lr].mem_node = -1;
        err = ddp_numa_bind_for(&t, mode, lr, &all[lr], &reason);
        if (err == -EINVAL && fallback) {
            ddp_log_warn(log,
                         "--numa-binding=%s: worker local rank %d runs unbound: %s "
                         "(--numa-binding-fallback)",
                         name, lr, ddp_buf_str(&reason));
            err = 0;
        } else if (err == -EINVAL) {
            ddp_buf_printf(why, "unable to bind worker local rank %d (--numa-binding=%s): %s", lr,
                           name, ddp_buf_str(&reason));
        } else if (err == 0) {
            ddp_log_info(log, "--numa-binding=%s: worker local rank %d near GPU %d (%s): %s", name,
                         lr, lr, t.gpu_pci[lr], all[lr].text);
        }
        ddp_buf_free(&reason);
    }
out:
    ddp_topology_free(&t);
    if (err) {
        ddp_numa_binds_free(all, nworkers);
        return err;
    }
    *binds = all;
    return 0;
}
