/* The --dry-run listing (see dry_run.h). */
#include "dry_run.h"

#include "buf.h"
#include "ckpt_file.h"
#include "env.h"
#include "error.h"
#include "fanout/fanout.h"
#include "io.h"
#include "output/logs.h"
#include "progress.h"
#include "config/torch_version.h"
#include "spawn/worker_env.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *sink_name(ddp_sink_t sink)
{
    switch (sink) {
    case DDP_SINK_NULL:
        return "discarded";
    case DDP_SINK_FILE:
        return "log file";
    case DDP_SINK_CONSOLE:
        return "console";
    case DDP_SINK_TEE:
        return "log file and console";
    }
    return "?";
}

/* Who serves a multi-node job's store, as far as this node can tell before it starts. */
static const char *store_host(const ddp_launch_config_t *cfg)
{
    switch (ddp_config_store_host(cfg)) {
    case DDP_STORE_HOST_SELF:
        return cfg->rdzv_backend == DDP_RDZV_C10D ? "hosted by this launcher (is_host)"
                                                  : "hosted by this node";
    case DDP_STORE_HOST_NODE0:
        return "hosted by node 0";
    case DDP_STORE_HOST_ELSEWHERE:
        return "hosted by another launcher (is_host=0)";
    case DDP_STORE_HOST_ELECTED:
        return "hosted by the launcher etcd elects (this address is this launcher's own)";
    case DDP_STORE_HOST_IF_FREE:
        break;
    }
    return "hosted by the launcher that can bind it";
}

/* What --numa-binding gives worker `lr`: its CPUs and memory node, or why it is not bound. */
static const char *numa_text(const ddp_launch_config_t *cfg, int lr)
{
    if (cfg->numa_binds != NULL && cfg->numa_binds[lr].text != NULL)
        return cfg->numa_binds[lr].text;
    if (cfg->numa_note != NULL)
        return cfg->numa_note;
    return "not bound (--numa-binding-fallback)";
}

/* One worker's lines: its ranks, argv, streams, the variables it gets, its binding. */
static int print_worker(const ddp_launch_config_t *cfg, int lr, int rank, char **argv, char **added,
                        ddp_buf_t *out)
{
    int err = ddp_buf_printf(out, "worker %d: rank %d, local rank %d\n  argv:", lr, rank, lr);
    for (char **p = argv; *p && err == 0; p++) {
        err = ddp_buf_puts(out, " ");
        if (err == 0)
            err = ddp_shell_word(out, *p);
    }
    if (err == 0)
        err = ddp_buf_printf(out, "\n  stdout: %s, stderr: %s\n  env:\n",
                             sink_name(ddp_logs_sink(cfg, lr, DDP_STD_OUT)),
                             sink_name(ddp_logs_sink(cfg, lr, DDP_STD_ERR)));
    for (char **p = added; *p && err == 0; p++) {
        err = ddp_buf_puts(out, "    ");
        if (err == 0)
            err = ddp_shell_word(out, *p);
        if (err == 0)
            err = ddp_buf_puts(out, "\n");
    }
    if (err == 0 && cfg->numa_mode != DDP_NUMA_OFF)
        err = ddp_buf_printf(out, "  numa binding (%s): %s\n", ddp_numa_mode_name(cfg->numa_mode),
                             numa_text(cfg, lr));
    return err;
}

/* --warm-restarts: what the restarts will be. */
static int warm_restarts_line(const ddp_launch_config_t *cfg, ddp_buf_t *out)
{
    if (cfg->no_python && !cfg->run_path)
        return ddp_buf_printf(out,
                              "restarts: cold (--warm-restarts: the workers are not Python)\n");
    return ddp_buf_printf(out,
                          "restarts: forked from a zygote that imports %s (--warm-restarts), "
                          "once it is ready\n",
                          cfg->preload != NULL ? cfg->preload : "torch");
}

/* --checkpoint-dir's copy of each rank (what a one-node job's start puts in place: the
 * same checks), said a line each; the step every rank's copy is of, -1 where they differ or
 * one is not there or not used. Reads; makes and writes nothing. */
static int64_t persisted_step(const ddp_launch_config_t *cfg, ddp_buf_t *out)
{
    int64_t step = -1;
    for (int rank = 0; rank < cfg->nproc_per_node; rank++) {
        char path[PATH_MAX];
        ddp_buf_t why = DDP_BUF_INIT;
        ddp_ckpt_header_t h = {0};
        uint64_t size;
        snprintf(path, sizeof path, "%s/rank%d.ckpt", cfg->checkpoint_dir, rank);
        int fd = ddp_open_worker_file(path), err = fd < 0 ? fd : 0;
        if (err == 0)
            err = ddp_ckpt_pread_header(fd, &h, &size, &why);
        if (err == 0)
            err = ddp_ckpt_copy_check(fd, &h, rank, cfg->nproc_per_node, NULL, &why);
        if (fd >= 0)
            close(fd);
        if (err == 0)
            ddp_buf_printf(out,
                           "--checkpoint-dir: rank %d would start from its step %" PRId64 " (%s)\n",
                           rank, h.step, path);
        else if (err == -ENOENT)
            ddp_buf_printf(out, "--checkpoint-dir: rank %d has no copy there (%s)\n", rank, path);
        else
            ddp_buf_printf(out, "--checkpoint-dir: %s would not be used: %s\n", path,
                           why.len > 0 ? ddp_buf_str(&why) : ddp_strerror(err));
        ddp_buf_free(&why);
        step = err != 0 || (rank > 0 && h.step != step) ? -1 : h.step;
        if (step < 0)
            break;
    }
    return step;
}

/* In-memory checkpoints: the workers' DDP_CHECKPOINT_DIR (the user's, or the /dev/shm
 * directory the launcher would make, into dir[cap]; "" where the user's) and the
 * DDP_CHECKPOINT_STEP --checkpoint-dir's copies would give (*step, -1: none), said. */
static int checkpoints_plan(const ddp_launch_config_t *cfg, char *const *envp, char *dir,
                            size_t cap, int64_t *step, ddp_buf_t *out)
{
    const char *name = ddp_env_name(DDP_ENV_DDP_CHECKPOINT_DIR), *own;
    struct stat st;
    *step = -1;
    dir[0] = '\0';
    if ((own = ddp_env_lookup(cfg->env_set, name)) != NULL ||
        (own = ddp_env_lookup(envp, name)) != NULL)
        return ddp_buf_printf(out,
                              "in-memory checkpoints: DDP_CHECKPOINT_DIR=%s, yours (used as it is, "
                              "never removed, nothing copied from it)\n",
                              own);
    ddp_ckpt_shm_dir_name(dir, cap, cfg->run_id, "<pid>", "<random>");
    int err = ddp_buf_printf(out,
                             "in-memory checkpoints: in %s, made at the start (0700), removed at "
                             "the job's end\n",
                             dir);
    if (err != 0 || cfg->checkpoint_dir == NULL)
        return err;
    int missing = stat(cfg->checkpoint_dir, &st) == 0 ? 0 : -errno;
    if (missing != 0 || !S_ISDIR(st.st_mode))
        return ddp_buf_printf(out, "--checkpoint-dir %s: %s; no checkpoint would be copied there\n",
                              cfg->checkpoint_dir,
                              missing != 0 ? ddp_strerror(missing) : "it is not a directory");
    if (cfg->nnodes_max > 1)
        return ddp_buf_printf(out,
                              "--checkpoint-dir: copies are written to %s; a multi-node job "
                              "does not start from them yet\n",
                              cfg->checkpoint_dir);
    *step = persisted_step(cfg, out);
    return 0;
}

int ddp_dry_run_print(const ddp_launch_config_t *cfg, char *const *envp, int fd)
{
    ddp_buf_t out = DDP_BUF_INIT;
    char *error_file = NULL;
    int err = ddp_buf_printf(&out,
                             "ddp-launch --dry-run: %d worker(s) on node %d of %d, "
                             "max restarts %d, run id %s; nothing is started\n",
                             cfg->nproc_per_node, cfg->node_rank, cfg->nnodes_max,
                             cfg->max_restarts, cfg->run_id);
    if (err == 0 && cfg->nnodes_max == 1)
        err = ddp_buf_printf(&out, "the store would listen on %s:%d%s\n", cfg->master_addr,
                             cfg->master_port,
                             cfg->master_port == 0 ? " (0: a free port, chosen at start)" : "");
    else if (err == 0)
        err = ddp_buf_printf(
            &out,
            "the rendezvous store: %s:%d, %s\n"
            "the ranks below take this node as node %d and every node as running %d worker(s); "
            "the rendezvous decides%s\n",
            cfg->master_addr, cfg->master_port, store_host(cfg), cfg->node_rank,
            cfg->nproc_per_node,
            cfg->rdzv_backend != DDP_RDZV_STATIC
                ? " (node ranks come in the order nodes join, WORLD_SIZE with the nodes "
                  "that do)"
                : "");
    char torch_at[4096];
    int torch = ddp_torch_version_of_workers(cfg, envp, torch_at, sizeof torch_at);
    if (err == 0 && torch != 0)
        err = ddp_buf_printf(&out, "the workers' torch: %d.%d (%s)\n", torch / 1000, torch % 1000,
                             torch_at);
    if (err == 0 && cfg->warm_restarts)
        err = warm_restarts_line(cfg, &out);
    char checkpoint_dir[PATH_MAX];
    int64_t checkpoint_step = -1;
    if (err == 0)
        err = checkpoints_plan(cfg, envp, checkpoint_dir, sizeof checkpoint_dir, &checkpoint_step,
                               &out);
    char module_dir[PATH_MAX];
    bool have_module = ddp_worker_module_dir(cfg, envp, module_dir, sizeof module_dir);
    for (int lr = 0; lr < cfg->nproc_per_node && err == 0; lr++) {
        char **argv = NULL, **added = NULL;
        int rank = cfg->node_rank * cfg->nproc_per_node + lr;
        free(error_file);
        if (asprintf(&error_file, "%s/%s_<random>/attempt_0/%d/error.json",
                     cfg->log_dir ? cfg->log_dir : "<new directory in $TMPDIR>", cfg->run_id,
                     lr) < 0) {
            error_file = NULL;
            err = -ENOMEM;
            break;
        }
        char ring[PATH_MAX + 32];
        snprintf(ring, sizeof ring, "%.*s%s", (int)(strlen(error_file) - strlen("error.json")),
                 error_file, DDP_PROGRESS_FILE);
        ddp_worker_info_t info = {
            .local_rank = lr,
            .rank = rank,
            .local_world_size = cfg->nproc_per_node,
            .world_size = cfg->nproc_per_node * cfg->nnodes_max,
            .group_rank = cfg->node_rank,
            .group_world_size = cfg->nnodes_max,
            .restart_count = 0,
            .use_agent_store = true,
            .master_addr = cfg->master_addr,
            .master_port = cfg->master_port,
            .error_file = error_file,
            .torch_version = torch,
            .module_dir = have_module ? module_dir : NULL,
            .progress_ring = ring,
            .checkpoint_dir = checkpoint_dir[0] != '\0' ? checkpoint_dir : NULL,
            .checkpoint_step = checkpoint_step,
        };
        if ((err = ddp_worker_argv(cfg, lr, &argv)) == 0 &&
            (err = ddp_worker_env_added(cfg, &info, envp, &added)) == 0) {
            err = print_worker(cfg, lr, rank, argv, added, &out);
        }
        ddp_strv_free(argv);
        ddp_strv_free(added);
    }
    free(error_file);
    if (err == 0)
        err = ddp_write_all(fd, out.data, out.len);
    ddp_buf_free(&out);
    return err;
}
