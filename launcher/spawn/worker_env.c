/* A worker's argv and environment (see worker_env.h). */
#include "spawn/worker_env.h"

#include "buf.h"
#include "config/torch_version.h"
#include "env.h"
#include "host/signals.h"
#include "host/proc.h"
#include "template.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int ddp_substitute_local_rank(const char *arg, int local_rank, char **out)
{
    char value[16];
    snprintf(value, sizeof value, "%d", local_rank);
    const ddp_template_var_t var = {"local_rank", value};
    return ddp_template_substitute(arg, &var, 1, out);
}

const char *ddp_worker_entry_name(const ddp_launch_config_t *cfg)
{
    return cfg->script;
}

int ddp_worker_argv(const ddp_launch_config_t *cfg, int local_rank, char ***out)
{
    bool python = cfg->run_path || !cfg->no_python;
    size_t cap = (size_t)cfg->nscript_args + 6, n = 0;
    char **argv = calloc(cap, sizeof *argv);
    char rank_arg[40];
    const char *head[5];
    size_t nhead = 0;
    int err = 0;
    if (argv == NULL)
        return -ENOMEM;
    if (python) {
        head[nhead++] = cfg->python_exec;
        head[nhead++] = "-u";
        if (cfg->module && !cfg->run_path)
            head[nhead++] = "-m";
    }
    head[nhead++] = cfg->script;
    if (cfg->local_rank_arg != DDP_LOCAL_RANK_ARG_NONE) {
        snprintf(rank_arg, sizeof rank_arg, "--local%crank=${local_rank}",
                 cfg->local_rank_arg == DDP_LOCAL_RANK_ARG_DASH ? '-' : '_');
        head[nhead++] = rank_arg;
    }
    /* torchrun substitutes every argument after the executable, the script included. */
    for (size_t i = 0; i < nhead && err == 0; i++) {
        if (i == 0)
            err = (argv[n] = strdup(head[i])) ? 0 : -ENOMEM;
        else
            err = ddp_substitute_local_rank(head[i], local_rank, &argv[n]);
        n += err == 0;
    }
    for (int i = 0; i < cfg->nscript_args && err == 0; i++) {
        err = ddp_substitute_local_rank(cfg->script_args[i], local_rank, &argv[n]);
        n += err == 0;
    }
    if (err) {
        ddp_strv_free(argv);
        return err;
    }
    *out = argv;
    return 0;
}

/* Appends "NAME=VALUE" strings; the first failure sticks and later calls do nothing. */
typedef struct {
    char **items;
    size_t n, cap;
    int err;
} env_builder_t;

/* Appends `entry` ("NAME=VALUE", taken over; NULL: out of memory). */
static void push(env_builder_t *eb, char *entry)
{
    if (eb->err || entry == NULL) {
        eb->err = eb->err ? eb->err : -ENOMEM;
        free(entry);
        return;
    }
    if (eb->n + 1 >= eb->cap) {
        size_t cap = eb->cap ? eb->cap * 2 : 32;
        char **items = realloc(eb->items, cap * sizeof *items);
        if (items == NULL) {
            eb->err = -ENOMEM;
            free(entry);
            return;
        }
        eb->items = items;
        eb->cap = cap;
    }
    eb->items[eb->n++] = entry;
    eb->items[eb->n] = NULL;
}

/* Whether `entry` ("NAME=VALUE") sets `name`. */
static bool is_var(const char *entry, const char *name)
{
    size_t n = strlen(name);
    return strncmp(entry, name, n) == 0 && entry[n] == '=';
}

__attribute__((format(printf, 3, 4))) static void add_var(env_builder_t *eb, ddp_env_id_t id,
                                                          const char *fmt, ...)
{
    char *entry = NULL, *value = NULL;
    va_list ap;
    va_start(ap, fmt);
    int r = vasprintf(&value, fmt, ap);
    va_end(ap);
    if (r < 0 || asprintf(&entry, "%s=%s", ddp_env_name(id), value) < 0)
        entry = NULL;
    if (r >= 0)
        free(value);
    push(eb, entry);
}

/* The variables torchrun sets only when the user has not. */
static void add_if_unset(env_builder_t *eb, const ddp_launch_config_t *cfg,
                         const ddp_worker_info_t *info, char *const *base)
{
    static const ddp_env_id_t if_unset[] = {DDP_ENV_TORCH_NCCL_ASYNC_ERROR_HANDLING,
                                            DDP_ENV_NCCL_ASYNC_ERROR_HANDLING,
                                            DDP_ENV_OMP_NUM_THREADS};
    for (size_t i = 0; i < sizeof if_unset / sizeof if_unset[0]; i++) {
        ddp_env_id_t id = if_unset[i];
        if (ddp_env_lookup(base, ddp_env_name(id)) != NULL ||
            ddp_env_lookup(cfg->env_set, ddp_env_name(id)) != NULL)
            continue;
        if (id == DDP_ENV_OMP_NUM_THREADS && info->local_world_size <= 1)
            continue;
        if (id == DDP_ENV_NCCL_ASYNC_ERROR_HANDLING &&
            info->torch_version >= DDP_TORCH_VERSION(2, 2))
            continue;
        add_var(eb, id, "%s", ddp_env_default(id));
    }
}

/* TORCHELASTIC_SIGNALS_TO_HANDLE: torchrun 2.9 and later put it in their own environment,
 * so their workers inherit it. */
static void add_signals_to_handle(env_builder_t *eb, const ddp_launch_config_t *cfg,
                                  const ddp_worker_info_t *info)
{
    char names[DDP_MAX_SIGNALS * 16] = "", name[32];
    if (info->torch_version < DDP_TORCH_VERSION(2, 9))
        return;
    for (int i = 0; i < cfg->nsignals; i++) {
        size_t len = strlen(names);
        snprintf(names + len, sizeof names - len, "%s%s", i > 0 ? "," : "",
                 ddp_signal_name(cfg->signals[i], name, sizeof name));
    }
    add_var(eb, DDP_ENV_TORCHELASTIC_SIGNALS_TO_HANDLE, "%s", names);
}

/* --env (names config/flags.c let through): node 0's entries win over this node's; a bare NAME
 * (unset on this node of a multi-node job) only takes node 0's. What the launcher made
 * itself (PYTHONPATH with `path_set`, CUDA_VISIBLE_DEVICES with `devices`) stays. */
static void add_job_env(env_builder_t *eb, const ddp_launch_config_t *cfg,
                        const ddp_worker_info_t *info, bool path_set, bool devices)
{
    const char *visible = ddp_env_name(DDP_ENV_CUDA_VISIBLE_DEVICES);
    for (int i = 0; i < cfg->nenv && !eb->err; i++) {
        if (strchr(cfg->env_set[i], '=') == NULL)
            continue;
        size_t len = strcspn(cfg->env_set[i], "=");
        bool overridden = (path_set && is_var(cfg->env_set[i], "PYTHONPATH")) ||
                          (devices && is_var(cfg->env_set[i], visible));
        for (int k = 0; info->job_env != NULL && info->job_env[k] != NULL && !overridden; k++)
            overridden = strncmp(info->job_env[k], cfg->env_set[i], len + 1) == 0;
        if (!overridden)
            push(eb, strdup(cfg->env_set[i]));
    }
    for (int k = 0; info->job_env != NULL && info->job_env[k] != NULL && !eb->err; k++)
        if (strchr(info->job_env[k], '=') != NULL &&
            !(path_set && is_var(info->job_env[k], "PYTHONPATH")) &&
            !(devices && is_var(info->job_env[k], visible)))
            push(eb, strdup(info->job_env[k]));
}

int ddp_worker_env_added(const ddp_launch_config_t *cfg, const ddp_worker_info_t *info,
                         char *const *base, char ***out)
{
    env_builder_t eb = {0};
    /* --virtual-local-rank: the worker sees only its device, as device 0 (torchrun's). */
    bool devices = cfg->virtual_local_rank;
    add_var(&eb, DDP_ENV_LOCAL_RANK, "%d", devices ? 0 : info->local_rank);
    if (devices && cfg->virtual_devices != NULL)
        add_var(&eb, DDP_ENV_CUDA_VISIBLE_DEVICES, "%s", cfg->virtual_devices[info->local_rank]);
    else if (devices)
        add_var(&eb, DDP_ENV_CUDA_VISIBLE_DEVICES, "%d", info->local_rank);
    add_var(&eb, DDP_ENV_RANK, "%d", info->rank);
    add_var(&eb, DDP_ENV_GROUP_RANK, "%d", info->group_rank);
    add_var(&eb, DDP_ENV_ROLE_RANK, "%d", info->rank);
    add_var(&eb, DDP_ENV_ROLE_NAME, "%s", cfg->role);
    add_var(&eb, DDP_ENV_LOCAL_WORLD_SIZE, "%d", info->local_world_size);
    add_var(&eb, DDP_ENV_WORLD_SIZE, "%d", info->world_size);
    add_var(&eb, DDP_ENV_GROUP_WORLD_SIZE, "%d", info->group_world_size);
    add_var(&eb, DDP_ENV_ROLE_WORLD_SIZE, "%d", info->world_size);
    add_var(&eb, DDP_ENV_MASTER_ADDR, "%s", info->master_addr);
    add_var(&eb, DDP_ENV_MASTER_PORT, "%d", info->master_port);
    add_var(&eb, DDP_ENV_TORCHELASTIC_RESTART_COUNT, "%d", info->restart_count);
    add_var(&eb, DDP_ENV_TORCHELASTIC_MAX_RESTARTS, "%d", cfg->max_restarts);
    add_var(&eb, DDP_ENV_TORCHELASTIC_RUN_ID, "%s", cfg->run_id);
    add_var(&eb, DDP_ENV_TORCHELASTIC_USE_AGENT_STORE, "%s",
            info->use_agent_store ? "True" : "False");
    add_if_unset(&eb, cfg, info, base);
    add_var(&eb, DDP_ENV_TORCHELASTIC_ERROR_FILE, "%s", info->error_file);
    if (info->timer_file != NULL)
        add_var(&eb, DDP_ENV_TORCHELASTIC_TIMER_FILE, "%s", info->timer_file);
    add_signals_to_handle(&eb, cfg, info);
    if (info->dump_signal > 0)
        add_var(&eb, DDP_ENV_DDP_DUMP_SIGNAL, "%d", info->dump_signal);
    if (info->progress_ring != NULL)
        add_var(&eb, DDP_ENV_DDP_PROGRESS_RING, "%s", info->progress_ring);
    if (info->checkpoint_dir != NULL)
        add_var(&eb, DDP_ENV_DDP_CHECKPOINT_DIR, "%s", info->checkpoint_dir);
    if (info->checkpoint_dir != NULL && info->checkpoint_step >= 0)
        add_var(&eb, DDP_ENV_DDP_CHECKPOINT_STEP, "%lld", (long long)info->checkpoint_step);
    if (cfg->local_addr != NULL)
        add_var(&eb, DDP_ENV_DDP_LOCAL_ADDR, "%s", cfg->local_addr);
    bool path_set = info->python_dir != NULL || info->module_dir != NULL;
    if (path_set) {
        const char *name = ddp_env_name(DDP_ENV_PYTHONPATH);
        /* The value the worker would have had: node 0's --env, this node's, inherited;
         * --hang-dump's sitecustomize first, the ddp_launch package last (one installed
         * with the worker's Python comes first). */
        const char *old = info->job_env != NULL ? ddp_env_lookup(info->job_env, name) : NULL;
        old = old != NULL ? old : ddp_env_lookup(cfg->env_set, name);
        old = old != NULL ? old : ddp_env_lookup(base, name);
        const char *first = info->python_dir, *last = info->module_dir;
        add_var(&eb, DDP_ENV_PYTHONPATH, "%s%s%s%s%s", first ? first : "",
                first && ((old && *old) || last) ? ":" : "", old && *old ? old : "",
                last && old && *old ? ":" : "", last ? last : "");
    }
    add_job_env(&eb, cfg, info, path_set, devices);
    if (eb.err) {
        ddp_strv_free(eb.items);
        return eb.err;
    }
    *out = eb.items;
    return 0;
}

static size_t name_len(const char *entry)
{
    const char *eq = strchr(entry, '=');
    return eq ? (size_t)(eq - entry) : strlen(entry);
}

bool ddp_worker_env_own(const char *entry, bool devices)
{
    static const ddp_env_id_t own[] = {
        DDP_ENV_LOCAL_RANK,
        DDP_ENV_RANK,
        DDP_ENV_GROUP_RANK,
        DDP_ENV_ROLE_RANK,
        DDP_ENV_LOCAL_WORLD_SIZE,
        DDP_ENV_WORLD_SIZE,
        DDP_ENV_GROUP_WORLD_SIZE,
        DDP_ENV_ROLE_WORLD_SIZE,
        DDP_ENV_MASTER_ADDR,
        DDP_ENV_MASTER_PORT,
        DDP_ENV_TORCHELASTIC_RESTART_COUNT,
        DDP_ENV_TORCHELASTIC_ERROR_FILE,
        DDP_ENV_DDP_DUMP_SIGNAL,
        DDP_ENV_DDP_PROGRESS_RING,
        DDP_ENV_DDP_CHECKPOINT_STEP,
    };
    size_t len = name_len(entry);
    if (devices && is_var(entry, ddp_env_name(DDP_ENV_CUDA_VISIBLE_DEVICES)))
        return true;
    for (size_t i = 0; i < sizeof own / sizeof own[0]; i++) {
        const char *name = ddp_env_name(own[i]);
        if (strlen(name) == len && strncmp(entry, name, len) == 0)
            return true;
    }
    return false;
}

int ddp_worker_env_merge(char *const *base, char *const *added, char ***out)
{
    size_t nbase = 0, nadded = 0;
    while (base != NULL && base[nbase] != NULL)
        nbase++;
    while (added[nadded] != NULL)
        nadded++;
    char **env = malloc((nbase + nadded + 1) * sizeof *env);
    if (env == NULL)
        return -ENOMEM;
    size_t n = 0;
    for (size_t i = 0; i < nbase; i++) {
        size_t len = name_len(base[i]);
        bool replaced = false;
        for (size_t j = 0; j < nadded && !replaced; j++)
            replaced = name_len(added[j]) == len && strncmp(base[i], added[j], len) == 0;
        if (!replaced)
            env[n++] = base[i];
    }
    for (size_t j = 0; j < nadded; j++)
        env[n++] = added[j];
    env[n] = NULL;
    *out = env;
    return 0;
}

/* Whether the workers' python imports a ddp_launch package of its own (the wheel's, in a
 * venv): ahead of site-packages on PYTHONPATH, the launcher's would shadow it. */
static bool python_has_module(const ddp_launch_config_t *cfg, char *const *envp)
{
    char *python = NULL;
    if ((!cfg->run_path && cfg->no_python) ||
        ddp_proc_find(cfg->python_exec, ddp_env_lookup(envp, ddp_env_name(DDP_ENV_PATH)),
                      &python) != 0)
        return false;
    bool has =
        ddp_python_has_package(python, ddp_env_lookup(envp, ddp_env_name(DDP_ENV_PYTHONPATH)),
                               ddp_env_lookup(envp, ddp_env_name(DDP_ENV_HOME)), "ddp_launch");
    free(python);
    return has;
}

bool ddp_launcher_python_dir(char *buf, size_t cap)
{
    static const char *const places[] = {"../share/ddp-launch/python", "../worker/python"};
    char self[PATH_MAX];
    if (ddp_proc_self(self, sizeof self) != 0)
        return false;
    char *slash = strrchr(self, '/');
    if (slash == NULL)
        return false;
    *slash = '\0';
    for (size_t k = 0; k < sizeof places / sizeof places[0]; k++) {
        char candidate[PATH_MAX + 64], file[PATH_MAX + 96], found[PATH_MAX];
        snprintf(candidate, sizeof candidate, "%s/%s", self, places[k]);
        snprintf(file, sizeof file, "%s/ddp_launch/_progress.py", candidate);
        if (access(file, R_OK) == 0 && realpath(candidate, found) != NULL && strlen(found) < cap) {
            memcpy(buf, found, strlen(found) + 1);
            return true;
        }
    }
    return false;
}

bool ddp_worker_module_dir(const ddp_launch_config_t *cfg, char *const *envp, char *buf, size_t cap)
{
    return !python_has_module(cfg, envp) && ddp_launcher_python_dir(buf, cap);
}
