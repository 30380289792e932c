/* The environment the nodes must agree on (see envcheck.h). */
#include "rdzv/envcheck.h"

#include "dl.h"
#include "env.h"

#include <dirent.h>
#include <dlfcn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Prefixes and names compared; NCCL variables that differ per process by design are not. */
static const char *const prefixes[] = {"NCCL_", "TORCH_NCCL_"};
static const char *const names[] = {"TORCH_DISTRIBUTED_DEBUG", "GLOO_SOCKET_IFNAME",
                                    "OMP_NUM_THREADS", "PYTHONHASHSEED"};
static const char *const per_process[] = {"NCCL_COMM_ID", "NCCL_DEBUG_FILE", "NCCL_HOSTID",
                                          "NCCL_UID"};

static bool listed(const char *name, size_t len, const char *const *list, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (strlen(list[i]) == len && memcmp(list[i], name, len) == 0)
            return true;
    return false;
}

static bool compared(const ddp_launch_config_t *cfg, const char *name, size_t len)
{
    for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++)
        if (strncmp(name, prefixes[i], strlen(prefixes[i])) == 0 && len > strlen(prefixes[i]))
            return !listed(name, len, per_process, sizeof per_process / sizeof *per_process);
    if (listed(name, len, names, sizeof names / sizeof names[0]))
        return true;
    for (int i = 0; cfg != NULL && i < cfg->nenv_check; i++)
        if (strlen(cfg->env_check[i]) == len && memcmp(cfg->env_check[i], name, len) == 0)
            return true;
    return false;
}

/* The GPUs this node's workers would see. */
static int visible_gpus(char *const *envp)
{
    for (size_t i = 0; envp[i] != NULL; i++) {
        if (strncmp(envp[i], "CUDA_VISIBLE_DEVICES=", 21) != 0)
            continue;
        const char *v = envp[i] + 21;
        int n = *v != '\0';
        for (; *v != '\0'; v++)
            n += *v == ',';
        return n;
    }
    static int devices = -1; /* the machine's do not change: one scan a process */
    if (devices >= 0)
        return devices;
    int n = 0;
    DIR *dev = opendir("/dev");
    struct dirent *e;
    while (dev != NULL && (e = readdir(dev)) != NULL) {
        const char *d = e->d_name;
        if (strncmp(d, "nvidia", 6) == 0 && d[6] >= '0' && d[6] <= '9' &&
            strspn(d + 6, "0123456789") == strlen(d + 6))
            n++;
    }
    if (dev != NULL)
        closedir(dev);
    devices = n;
    return n;
}

/* NCCL's version as ncclGetVersion gives it (2.28.3 is 22803), or 0 without NCCL; loaded
 * once a process (about 2 ms), and only by a node with GPUs. */
static int nccl_version(void)
{
    static int known = -1;
    if (known >= 0)
        return known;
    int version = 0;
    void *lib = dlopen("libnccl.so.2", RTLD_LAZY | RTLD_LOCAL);
    int (*get)(int *) = NULL;
    if (lib != NULL) {
        if (!ddp_dl_symbol(lib, "ncclGetVersion", &get, sizeof get) || get == NULL ||
            get(&version) != 0)
            version = 0;
        dlclose(lib);
    }
    known = version;
    return version;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

int ddp_envcheck_record(const ddp_launch_config_t *cfg, char *const *envp, ddp_buf_t *out)
{
    size_t n = 0, cap = 16;
    const char **lines = malloc(cap * sizeof *lines);
    for (size_t i = 0; envp[i] != NULL && lines != NULL; i++) {
        const char *eq = strchr(envp[i], '=');
        if (eq == NULL || !compared(cfg, envp[i], (size_t)(eq - envp[i])) ||
            strchr(envp[i], '\n') != NULL)
            continue;
        if (n == cap) {
            const char **more = realloc(lines, 2 * cap * sizeof *lines);
            if (more == NULL)
                break;
            lines = more;
            cap *= 2;
        }
        lines[n++] = envp[i];
    }
    if (lines == NULL)
        return -1;
    qsort(lines, n, sizeof *lines, by_name);
    int err = 0;
    for (size_t i = 0; i < n && err == 0; i++) {
        const char *eq = strchr(lines[i], '=');
        size_t value_len = strlen(eq + 1);
        err = ddp_buf_printf(out, "%.*s=%.*s%s\n", (int)(eq - lines[i]), lines[i],
                             DDP_ENVCHECK_VALUE_MAX, eq + 1,
                             value_len > DDP_ENVCHECK_VALUE_MAX ? "..." : "");
    }
    free(lines);
    for (int i = 0; i < cfg->nenv_check && err == 0; i++) /* checked here, unset */
        if (ddp_env_lookup(envp, cfg->env_check[i]) == NULL)
            err = ddp_buf_printf(out, "%s\n", cfg->env_check[i]);
    int gpus = visible_gpus(envp), version = gpus > 0 ? nccl_version() : 0;
    if (err == 0)
        err = ddp_buf_printf(out, "(visible GPUs)=%d\n", gpus);
    if (err == 0 && version > 0)
        err = ddp_buf_printf(out, "(NCCL version)=%d.%d.%d\n", version / 10000, version / 100 % 100,
                             version % 100);
    return err;
}

/* The value of `name` (len bytes) in `record`, into value[cap]; false when unset. */
/* What `record` says of `name` (len bytes): SET (its value into value[cap]), UNSET (a
 * line of the name alone: an --env-check name the node does not have), or nothing. A
 * built-in variable nothing is said of is unset; an --env-check name is not compared on
 * a node that does not check it. */
enum { NOT_CHECKED = -1, UNSET = 0, SET = 1 };

static int value_of(const char *record, const char *name, size_t len, char *value, size_t cap)
{
    for (const char *p = record; p != NULL && *p != '\0';) {
        const char *end = strchr(p, '\n');
        size_t line = end != NULL ? (size_t)(end - p) : strlen(p);
        if (line >= len && memcmp(p, name, len) == 0 && (line == len || p[len] == '=')) {
            if (line == len)
                return UNSET;
            snprintf(value, cap, "%.*s", (int)(line - len - 1), p + len + 1);
            return SET;
        }
        p = end != NULL ? end + 1 : NULL;
    }
    return compared(NULL, name, len) ? UNSET : NOT_CHECKED;
}

#define GROUPS_MAX 16 /* values of one variable told apart; O(GROUPS_MAX * n) a variable */

/* One variable across the nodes: its values, each with the nodes that have it. */
static void compare_one(const char *const *records, int n, const char *name, size_t len, int most,
                        bool *nodes, ddp_buf_t *line, int *groups)
{
    char first[DDP_ENVCHECK_VALUE_MAX + 8], value[DDP_ENVCHECK_VALUE_MAX + 8];
    bool *done = calloc((size_t)n, sizeof *done);
    *groups = 0;
    for (int i = 0; i < n && done != NULL; i++) {
        if (done[i])
            continue;
        if (*groups == GROUPS_MAX) { /* a value a node (HOSTNAME?): the rest are "others" */
            ddp_buf_printf(line, ", and more values on other nodes");
            *groups = GROUPS_MAX + most + 1;
            break;
        }
        int set = value_of(records[i], name, len, first, sizeof first);
        if (set == NOT_CHECKED) {
            done[i] = true;
            continue;
        }
        int count = 0;
        for (int j = i; j < n; j++) {
            bool same = !done[j] && value_of(records[j], name, len, value, sizeof value) == set &&
                        (set != SET || strcmp(value, first) == 0);
            nodes[j] = !same; /* format_ranks names the false ones */
            if (same) {
                done[j] = true;
                count++;
            }
        }
        for (int j = 0; j < i; j++)
            nodes[j] = true;
        if (++*groups <= most) {
            ddp_buf_puts(line, *groups > 1 ? ", " : "");
            if (set == SET)
                ddp_buf_printf(line, "'%s' on node%s ", first, count > 1 ? "s" : "");
            else
                ddp_buf_printf(line, "unset on node%s ", count > 1 ? "s" : "");
            ddp_buf_runs(line, nodes, n, 4, 0);
        }
    }
    if (*groups > most && *groups <= GROUPS_MAX)
        ddp_buf_printf(line, ", and %d other values", *groups - most);
    free(done);
}

int ddp_envcheck_compare(const char *const *records, int n, int most, ddp_buf_t *out)
{
    /* Every name some node has, each once. */
    size_t nnames = 0, cap = 0;
    char **all = NULL;
    for (int i = 0; i < n; i++) {
        for (const char *p = records[i]; p != NULL && *p != '\0';) {
            const char *end = strchr(p, '\n');
            size_t line = end != NULL ? (size_t)(end - p) : strlen(p);
            const char *eq = memchr(p, '=', line);
            size_t len = eq != NULL ? (size_t)(eq - p) : line;
            bool seen = len == 0;
            for (size_t k = 0; k < nnames && !seen; k++)
                seen = strlen(all[k]) == len && memcmp(all[k], p, len) == 0;
            if (!seen && nnames == cap) {
                char **more = realloc(all, (cap = cap ? 2 * cap : 16) * sizeof *all);
                if (more == NULL)
                    break;
                all = more;
            }
            if (!seen && (all[nnames] = strndup(p, len)) != NULL)
                nnames++;
            p = end != NULL ? end + 1 : NULL;
        }
    }
    if (nnames > 0)
        qsort(all, nnames, sizeof *all, by_name);
    bool *nodes = calloc((size_t)n, sizeof *nodes);
    int differ = 0;
    for (size_t k = 0; k < nnames && nodes != NULL; k++) {
        ddp_buf_t line = DDP_BUF_INIT;
        int groups;
        compare_one(records, n, all[k], strlen(all[k]), 3, nodes, &line, &groups);
        if (groups > 1 && ++differ <= most)
            ddp_buf_printf(out, "%s%s differs: %s", out->len > 0 ? "\n" : "", all[k],
                           ddp_buf_str(&line));
        ddp_buf_free(&line);
    }
    if (differ > most)
        ddp_buf_printf(out, "\n(and %d other variables)", differ - most);
    for (size_t k = 0; k < nnames; k++)
        free(all[k]);
    free(all);
    free(nodes);
    return differ;
}
