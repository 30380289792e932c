/* A machine's topology as binding needs it (see topology.h): CPU sets, the tree reader
 * (sysfs or a recorded one) and the GPUs' PCI addresses and nodes. */
#include "host/topology.h"

#include "env.h"
#include "host/nvml.h"

#include <ctype.h>
#include <stdarg.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define WORD_BITS (8 * sizeof(unsigned long))
/* Bounds on what a file may claim, so a malformed tree cannot size anything huge: the kernel's
 * own limits are 8192 CPUs (NR_CPUS) and 1024 nodes. */
#define MAX_CPUS  65536
#define MAX_NODES 1024
#define MAX_GPUS  64
#define LINE_CAP  (MAX_CPUS * 6)

typedef struct {
    char pci[16];
    char uuid[96];
} gpu_t;

/* ---- CPU sets ---- */

int ddp_cpus_alloc(ddp_cpus_t *s, size_t nwords)
{
    s->bits = calloc(nwords > 0 ? nwords : 1, sizeof *s->bits);
    s->nwords = s->bits != NULL ? nwords : 0;
    return s->bits != NULL ? 0 : -ENOMEM;
}

void ddp_cpus_free(ddp_cpus_t *set)
{
    free(set->bits);
    set->bits = NULL;
    set->nwords = 0;
}

bool ddp_cpus_has(const ddp_cpus_t *s, int cpu)
{
    return cpu >= 0 && (size_t)cpu / WORD_BITS < s->nwords &&
           ((s->bits[(size_t)cpu / WORD_BITS] >> ((size_t)cpu % WORD_BITS)) & 1UL) != 0;
}

static void cpus_add(ddp_cpus_t *s, int cpu)
{
    s->bits[(size_t)cpu / WORD_BITS] |= 1UL << ((size_t)cpu % WORD_BITS);
}

void ddp_cpus_remove(ddp_cpus_t *set, int cpu)
{
    if (ddp_cpus_has(set, cpu))
        set->bits[(size_t)cpu / WORD_BITS] &= ~(1UL << ((size_t)cpu % WORD_BITS));
}

int ddp_cpus_first(const ddp_cpus_t *s)
{
    for (size_t w = 0; w < s->nwords; w++)
        if (s->bits[w] != 0)
            return (int)(w * WORD_BITS) + __builtin_ctzl(s->bits[w]);
    return -1;
}

int ddp_cpus_parse(const char *text, size_t nwords, ddp_cpus_t *out)
{
    ddp_cpus_t set;
    int err = ddp_cpus_alloc(&set, nwords);
    const char *p = text;
    while (err == 0 && *p != '\0' && !isspace((unsigned char)*p)) {
        char *end;
        if (!isdigit((unsigned char)*p)) {
            err = -EINVAL;
            break;
        }
        unsigned long lo = strtoul(p, &end, 10), hi = lo;
        p = end;
        if (*p == '-') {
            if (!isdigit((unsigned char)p[1])) {
                err = -EINVAL;
                break;
            }
            hi = strtoul(p + 1, &end, 10);
            p = end;
        }
        if (hi < lo)
            err = -EINVAL;
        else if (hi >= nwords * WORD_BITS)
            err = -ERANGE;
        for (unsigned long cpu = lo; err == 0 && cpu <= hi; cpu++)
            cpus_add(&set, (int)cpu);
        if (err == 0 && *p == ',' && !isdigit((unsigned char)*++p))
            err = -EINVAL;
    }
    while (err == 0 && isspace((unsigned char)*p))
        p++;
    if (err == 0 && *p != '\0')
        err = -EINVAL;
    if (err) {
        ddp_cpus_free(&set);
        return err;
    }
    *out = set;
    return 0;
}

int ddp_cpus_format(const ddp_cpus_t *set, ddp_buf_t *out)
{
    int err = ddp_buf_puts(out, "");
    int ncpus = (int)(set->nwords * WORD_BITS);
    bool first = true;
    for (int cpu = 0; cpu < ncpus && err == 0; cpu++) {
        if (!ddp_cpus_has(set, cpu))
            continue;
        int last = cpu;
        while (last + 1 < ncpus && ddp_cpus_has(set, last + 1))
            last++;
        err = last == cpu ? ddp_buf_printf(out, "%s%d", first ? "" : ",", cpu)
                          : ddp_buf_printf(out, "%s%d-%d", first ? "" : ",", cpu, last);
        first = false;
        cpu = last;
    }
    return err;
}

/* ---- Reading the tree ---- */

typedef struct {
    const char *root; /* "" for this machine */
    char *line;       /* LINE_CAP bytes */
    ddp_buf_t *why;
} reader_t;

/* The first line of the file at root/<format>, without its newline, in r->line; false when it
 * cannot be read. */
__attribute__((format(printf, 2, 3))) static bool read_line(reader_t *r, const char *format, ...)
{
    char path[4096];
    int n = snprintf(path, sizeof path, "%s/", r->root);
    va_list ap;
    va_start(ap, format);
    vsnprintf(path + n, sizeof path - (size_t)n, format, ap);
    va_end(ap);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return false;
    ssize_t len = read(fd, r->line, LINE_CAP - 1);
    close(fd);
    if (len < 0)
        return false;
    r->line[len] = '\0';
    r->line[strcspn(r->line, "\n")] = '\0';
    return true;
}

/* The integer in the file at root/<path>, or `otherwise`. */
static int read_int(reader_t *r, const char *path, int otherwise)
{
    char *end;
    if (!read_line(r, "%s", path))
        return otherwise;
    long v = strtol(r->line, &end, 0);
    return end != r->line && *end == '\0' && v >= -1 && v < MAX_CPUS ? (int)v : otherwise;
}

/* Parses r->line as a CPU list of `nwords`, naming `what` in the error. */
static int line_cpus(reader_t *r, const char *what, size_t nwords, ddp_cpus_t *out)
{
    int err = ddp_cpus_parse(r->line, nwords, out);
    if (err == -EINVAL || err == -ERANGE)
        ddp_buf_printf(r->why, "%s%s: '%.60s' is not a CPU list%s", r->root, what, r->line,
                       err == -ERANGE ? " within the machine's CPUs" : "");
    return err == -ERANGE ? -EINVAL : err;
}

/* The CPU list in the file at root/<path> into `set` (t's size), cleared first; false when it
 * cannot be read or holds no CPU. */
static bool read_group(reader_t *r, const char *path, ddp_cpus_t *set)
{
    ddp_cpus_t parsed;
    memset(set->bits, 0, set->nwords * sizeof *set->bits);
    if (!read_line(r, "%s", path) || ddp_cpus_parse(r->line, set->nwords, &parsed) != 0)
        return false;
    memcpy(set->bits, parsed.bits, set->nwords * sizeof *set->bits);
    ddp_cpus_free(&parsed);
    return ddp_cpus_first(set) >= 0;
}

/* The CPUs sharing the largest data or unified cache of `cpu`, into `set`; false if unknown. */
static bool read_cache_group(reader_t *r, int cpu, ddp_cpus_t *set)
{
    int best_level = -1;
    bool found = false;
    for (int index = 0; index < 16; index++) {
        char path[128];
        snprintf(path, sizeof path, "sys/devices/system/cpu/cpu%d/cache/index%d/type", cpu, index);
        if (!read_line(r, "%s", path))
            break; /* the kernel numbers a CPU's caches from 0 without gaps */
        if (strcmp(r->line, "Unified") != 0 && strcmp(r->line, "Data") != 0)
            continue;
        snprintf(path, sizeof path, "sys/devices/system/cpu/cpu%d/cache/index%d/level", cpu, index);
        int level = read_int(r, path, -1);
        if (level <= best_level)
            continue;
        snprintf(path, sizeof path, "sys/devices/system/cpu/cpu%d/cache/index%d/shared_cpu_list",
                 cpu, index);
        ddp_cpus_t group;
        if (ddp_cpus_alloc(&group, set->nwords) != 0)
            break;
        if (read_group(r, path, &group)) {
            best_level = level;
            memcpy(set->bits, group.bits, set->nwords * sizeof *set->bits);
            found = true;
        }
        ddp_cpus_free(&group);
    }
    return found;
}

/* The online CPUs, the launcher's allowed ones among them, and each one's socket, core and
 * cache. No CPU list in sysfs leaves ncpus 0. */
static int read_cpus(reader_t *r, ddp_topology_t *t)
{
    ddp_cpus_t online, allowed;
    if (!read_line(r, "sys/devices/system/cpu/online"))
        return 0;
    int err = line_cpus(r, "/sys/devices/system/cpu/online", MAX_CPUS / WORD_BITS, &online);
    if (err)
        return err;
    int last = -1;
    for (int cpu = 0; cpu < MAX_CPUS; cpu++)
        if (ddp_cpus_has(&online, cpu))
            last = cpu;
    if (last < 0) {
        ddp_cpus_free(&online);
        return 0;
    }
    size_t nwords = ((size_t)last + WORD_BITS) / WORD_BITS;
    online.nwords = nwords; /* the words past the last CPU are all zero */
    t->ncpus = last + 1;
    /* The launcher's own affinity, as /proc shows it (a recorded tree holds that one line). */
    char path[4096];
    snprintf(path, sizeof path, "%s/proc/self/status", r->root);
    FILE *status = fopen(path, "re");
    bool found = false;
    while (err == 0 && status != NULL && fgets(r->line, LINE_CAP, status) != NULL) {
        if (strncmp(r->line, "Cpus_allowed_list:", 18) != 0)
            continue;
        memmove(r->line, r->line + 18 + strspn(r->line + 18, " \t"),
                strlen(r->line + 18 + strspn(r->line + 18, " \t")) + 1);
        err = line_cpus(r, "/proc/self/status Cpus_allowed_list", MAX_CPUS / WORD_BITS, &allowed);
        found = err == 0;
    }
    if (status != NULL)
        fclose(status);
    if (err == 0)
        err = ddp_cpus_alloc(&t->allowed, nwords);
    for (size_t w = 0; err == 0 && w < nwords; w++)
        t->allowed.bits[w] = online.bits[w] & (found ? allowed.bits[w] : ~0UL);
    if (found)
        ddp_cpus_free(&allowed);
    ddp_cpus_free(&online);
    t->package = err == 0 ? malloc((size_t)t->ncpus * sizeof *t->package) : NULL;
    t->core = t->package != NULL ? malloc((size_t)t->ncpus * sizeof *t->core) : NULL;
    t->cache = t->core != NULL ? malloc((size_t)t->ncpus * sizeof *t->cache) : NULL;
    if (err == 0 && t->cache == NULL)
        err = -ENOMEM;
    for (int cpu = 0; err == 0 && cpu < t->ncpus; cpu++)
        t->package[cpu] = t->core[cpu] = t->cache[cpu] = -1;
    return err;
}

/* The online NUMA nodes, their CPUs and whether they hold memory. No node list in sysfs (a
 * kernel without NUMA) leaves nnodes 0. */
static int read_nodes(reader_t *r, ddp_topology_t *t)
{
    ddp_cpus_t online, memory = {0, NULL};
    if (t->ncpus == 0 || !read_line(r, "sys/devices/system/node/online"))
        return 0;
    int err = line_cpus(r, "/sys/devices/system/node/online", MAX_NODES / WORD_BITS, &online);
    if (err)
        return err;
    bool memory_known = read_line(r, "sys/devices/system/node/has_memory");
    if (memory_known)
        err = line_cpus(r, "/sys/devices/system/node/has_memory", MAX_NODES / WORD_BITS, &memory);
    for (int node = 0; err == 0 && node < MAX_NODES; node++)
        if (ddp_cpus_has(&online, node))
            t->nnodes = node + 1;
    t->node_cpus = err == 0 ? calloc((size_t)t->nnodes + 1, sizeof *t->node_cpus) : NULL;
    t->node_memory = t->node_cpus != NULL ? calloc((size_t)t->nnodes + 1, 1) : NULL;
    if (err == 0 && t->node_memory == NULL)
        err = -ENOMEM;
    for (int node = 0; err == 0 && node < t->nnodes; node++) {
        bool is_online = ddp_cpus_has(&online, node);
        char what[64];
        snprintf(what, sizeof what, "/sys/devices/system/node/node%d/cpulist", node);
        if (is_online && read_line(r, "sys/devices/system/node/node%d/cpulist", node))
            err = line_cpus(r, what, t->allowed.nwords, &t->node_cpus[node]);
        else
            err = ddp_cpus_alloc(&t->node_cpus[node], t->allowed.nwords);
        t->node_memory[node] = is_online && (!memory_known || ddp_cpus_has(&memory, node));
        t->nonline += is_online;
    }
    ddp_cpus_free(&online);
    ddp_cpus_free(&memory);
    return err;
}

void ddp_topology_node_allowed(const ddp_topology_t *t, int node, ddp_cpus_t *set)
{
    for (size_t w = 0; w < set->nwords; w++)
        set->bits[w] = t->node_cpus[node].bits[w] & t->allowed.bits[w];
}

/* Sets key[c] = the lowest CPU of `group` for every allowed CPU c of it. */
static void key_group(ddp_topology_t *t, const ddp_cpus_t *group, int *key)
{
    int lowest = ddp_cpus_first(group);
    for (int c = lowest; c >= 0 && c < t->ncpus; c++)
        if (ddp_cpus_has(group, c) && ddp_cpus_has(&t->allowed, c))
            key[c] = lowest;
}

/* What the modes need of the CPUs, read once per group rather than per CPU (a 256-CPU server
 * is a few hundred small reads, not thousands): the socket of each node's first allowed CPU,
 * and, for the CPUs of nodes that hold a GPU, their physical core and last-level cache. */
static int read_details(reader_t *r, ddp_topology_t *t)
{
    ddp_cpus_t group, node_set;
    int err = ddp_cpus_alloc(&group, t->allowed.nwords);
    if (err == 0 && (err = ddp_cpus_alloc(&node_set, t->allowed.nwords)) != 0)
        ddp_cpus_free(&group);
    for (int node = 0; err == 0 && node < t->nnodes; node++) {
        bool has_gpu = false;
        for (int g = 0; g < t->ngpus; g++)
            has_gpu = has_gpu || t->gpu_node[g] == node;
        ddp_topology_node_allowed(t, node, &node_set);
        int first = ddp_cpus_first(&node_set);
        if (first < 0)
            continue;
        char path[160];
        snprintf(path, sizeof path, "sys/devices/system/cpu/cpu%d/topology/physical_package_id",
                 first);
        t->package[first] = read_int(r, path, -1);
        for (int cpu = first; has_gpu && cpu < t->ncpus; cpu++) {
            if (!ddp_cpus_has(&node_set, cpu))
                continue;
            if (t->core[cpu] < 0) {
                snprintf(path, sizeof path,
                         "sys/devices/system/cpu/cpu%d/topology/thread_siblings_list", cpu);
                if (read_group(r, path, &group))
                    key_group(t, &group, t->core);
                if (t->core[cpu] < 0)
                    t->core[cpu] = cpu; /* unknown: a core of its own */
            }
            if (t->cache[cpu] < 0 && read_cache_group(r, cpu, &group))
                key_group(t, &group, t->cache);
        }
    }
    if (err == 0) {
        ddp_cpus_free(&group);
        ddp_cpus_free(&node_set);
    }
    return err;
}

/* ---- GPUs ---- */

/* This machine's GPUs in NVML's order (the PCI bus order, which is CUDA's with
 * CUDA_DEVICE_ORDER=PCI_BUS_ID and on machines of one GPU model). */
static int nvml_gpus(gpu_t *gpus, int *n, ddp_buf_t *note)
{
    ddp_nvml_t nvml;
    unsigned int total = 0;
    if (ddp_nvml_open(&nvml, note) != 0)
        return 0; /* no GPU, and the note says why */
    if (nvml.pci == NULL || nvml.uuid == NULL)
        ddp_buf_puts(note, "the NVIDIA driver's NVML lacks nvmlDeviceGetPciInfo_v3");
    else if (nvml.count(&total) != DDP_NVML_SUCCESS)
        total = 0;
    for (unsigned int i = 0; i < total && *n < MAX_GPUS; i++) {
        void *device;
        ddp_nvml_pci_t info;
        gpu_t *g = &gpus[*n];
        memset(g, 0, sizeof *g);
        if (nvml.handle(i, &device) != DDP_NVML_SUCCESS ||
            nvml.pci(device, &info) != DDP_NVML_SUCCESS)
            continue;
        snprintf(g->pci, sizeof g->pci, "%04x:%02x:%02x.0", info.domain & 0xffffu, info.bus & 0xffu,
                 info.device & 0x1fu);
        if (nvml.uuid(device, g->uuid, sizeof g->uuid) != DDP_NVML_SUCCESS)
            g->uuid[0] = '\0';
        (*n)++;
    }
    ddp_nvml_close(&nvml);
    return 0;
}

static int compare_gpus(const void *a, const void *b)
{
    return strcmp(((const gpu_t *)a)->pci, ((const gpu_t *)b)->pci);
}

/* A recorded tree's GPUs: its NVIDIA display devices (VGA or 3D controller) in PCI order, as
 * NVML enumerates them. */
static int sysfs_gpus(reader_t *r, gpu_t *gpus, int *n)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/sys/bus/pci/devices", r->root);
    DIR *dir = opendir(path);
    struct dirent *entry;
    while (dir != NULL && (entry = readdir(dir)) != NULL && *n < MAX_GPUS) {
        if (entry->d_name[0] == '.' || strlen(entry->d_name) >= sizeof gpus->pci)
            continue;
        if (!read_line(r, "sys/bus/pci/devices/%s/vendor", entry->d_name) ||
            strcmp(r->line, "0x10de") != 0 ||
            !read_line(r, "sys/bus/pci/devices/%s/class", entry->d_name) ||
            (strncmp(r->line, "0x0300", 6) != 0 && strncmp(r->line, "0x0302", 6) != 0))
            continue;
        memset(&gpus[*n], 0, sizeof *gpus);
        snprintf(gpus[*n].pci, sizeof gpus->pci, "%s", entry->d_name);
        (*n)++;
    }
    if (dir != NULL)
        closedir(dir);
    qsort(gpus, (size_t)*n, sizeof *gpus, compare_gpus);
    return 0;
}

/* The GPUs the workers see: CUDA_VISIBLE_DEVICES picks among the machine's, as CUDA reads it
 * (indices or GPU-<uuid> prefixes, up to the first entry that names no device); a MIG
 * instance, or a UUID where none is known, is a GPU whose place is unknown. */
static int visible_gpus(ddp_topology_t *t, const gpu_t *all, int nall, const char *visible)
{
    int picked[MAX_GPUS], n = 0;
    char *copy = visible != NULL ? strdup(visible) : NULL, *save = NULL;
    if (visible != NULL && copy == NULL)
        return -ENOMEM;
    if (visible == NULL)
        for (n = 0; n < nall; n++)
            picked[n] = n;
    for (char *item = copy ? strtok_r(copy, ",", &save) : NULL; item != NULL && n < MAX_GPUS;
         item = strtok_r(NULL, ",", &save)) {
        while (isspace((unsigned char)*item))
            item++;
        item[strcspn(item, " \t")] = '\0';
        char *end;
        long index = strtol(item, &end, 10);
        int found = -1;
        if (isdigit((unsigned char)*item) && *end == '\0') {
            found = index < nall ? (int)index : -2;
        } else if (strncmp(item, "GPU-", 4) == 0) {
            bool uuids = nall > 0 && all[0].uuid[0] != '\0';
            for (int g = 0; uuids && g < nall && found < 0; g++)
                if (strncmp(all[g].uuid, item, strlen(item)) == 0)
                    found = g;
            if (uuids && found < 0)
                found = -2;
        } else if (strncmp(item, "MIG-", 4) != 0) {
            found = -2;
        }
        if (found == -2)
            break; /* CUDA ignores this entry and those after it */
        picked[n++] = found;
    }
    free(copy);
    t->gpu_pci = calloc((size_t)n + 1, sizeof *t->gpu_pci);
    t->gpu_node = calloc((size_t)n + 1, sizeof *t->gpu_node);
    if (t->gpu_pci == NULL || t->gpu_node == NULL)
        return -ENOMEM;
    for (int i = 0; i < n; i++)
        if (picked[i] >= 0)
            snprintf(t->gpu_pci[i], sizeof *t->gpu_pci, "%s", all[picked[i]].pci);
    t->ngpus = n;
    return 0;
}

static int read_gpus(reader_t *r, ddp_topology_t *t, char *const *envp, bool nvml)
{
    gpu_t *all = calloc(MAX_GPUS, sizeof *all);
    ddp_buf_t note = DDP_BUF_INIT;
    int nall = 0;
    if (all == NULL)
        return -ENOMEM;
    int err = nvml ? nvml_gpus(all, &nall, &note) : sysfs_gpus(r, all, &nall);
    const char *visible = ddp_env_lookup(envp, "CUDA_VISIBLE_DEVICES");
    if (err == 0)
        err = visible_gpus(t, all, nall, visible);
    for (int g = 0; err == 0 && g < t->ngpus; g++) {
        char path[128];
        snprintf(path, sizeof path, "sys/bus/pci/devices/%s/numa_node", t->gpu_pci[g]);
        t->gpu_node[g] = t->gpu_pci[g][0] != '\0' ? read_int(r, path, -1) : -1;
    }
    if (err == 0 && t->ngpus == 0 && note.len == 0)
        err = visible != NULL && nall > 0
                  ? ddp_buf_printf(&note, "CUDA_VISIBLE_DEVICES=%s names none of this machine's %d",
                                   visible, nall)
                  : ddp_buf_puts(&note, "none is on this machine's PCI bus");
    if (err == 0 && t->ngpus == 0)
        t->gpu_note = strdup(ddp_buf_str(&note));
    ddp_buf_free(&note);
    free(all);
    return err;
}

int ddp_topology_read(ddp_topology_t *t, const char *root, char *const *envp, ddp_buf_t *why)
{
    bool here = root == NULL || strcmp(root, "/") == 0;
    return ddp_topology_read_gpus_from(t, root, envp, here, why);
}

int ddp_topology_read_gpus_from(ddp_topology_t *t, const char *root, char *const *envp, bool nvml,
                                ddp_buf_t *why)
{
    memset(t, 0, sizeof *t);
    reader_t r = {root == NULL || strcmp(root, "/") == 0 ? "" : root, malloc(LINE_CAP), why};
    if (r.line == NULL)
        return -ENOMEM;
    int err = read_cpus(&r, t);
    if (err == 0)
        err = read_nodes(&r, t);
    /* One NUMA node: nothing to bind, so neither the driver nor the CPUs' details are read. */
    if (err == 0 && t->nonline >= 2)
        err = read_gpus(&r, t, envp, nvml);
    if (err == 0 && t->nonline >= 2)
        err = read_details(&r, t);
    free(r.line);
    if (err)
        ddp_topology_free(t);
    return err;
}

void ddp_topology_free(ddp_topology_t *t)
{
    ddp_cpus_free(&t->allowed);
    for (int node = 0; t->node_cpus != NULL && node < t->nnodes; node++)
        ddp_cpus_free(&t->node_cpus[node]);
    free(t->node_cpus);
    free(t->node_memory);
    free(t->package);
    free(t->core);
    free(t->cache);
    free(t->gpu_pci);
    free(t->gpu_node);
    free(t->gpu_note);
    memset(t, 0, sizeof *t);
}
