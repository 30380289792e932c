/* What each worker runs: its argv and the environment torchrun gives it.
 *
 * Pure functions of the config and the worker's place in the job, shared by the
 * agent (which spawns) and --dry-run (which prints). Arrays returned here are
 * NULL-terminated and owned by the caller (ddp_strv_free, strv.h). */
#ifndef DDP_LAUNCHER_SPAWN_WORKER_ENV_H
#define DDP_LAUNCHER_SPAWN_WORKER_ENV_H

#include "config/config.h"
#include "strv.h"

typedef struct ddp_worker_info_s {
    int local_rank, rank, local_world_size, world_size;
    int group_rank, group_world_size;
    int restart_count;
    bool use_agent_store;
    const char *master_addr; /* where the store listens */
    int master_port;
    const char *error_file; /* TORCHELASTIC_ERROR_FILE */
    char *const *job_env;   /* node 0's --env entries (multi-node), over this node's; or NULL */
    int dump_signal;        /* DDP_DUMP_SIGNAL: what a worker dumps its state on; 0: unset */
    const char *python_dir; /* --hang-dump: put first on PYTHONPATH (its sitecustomize); or NULL */
    const char *module_dir; /* the ddp_launch package's folder: put last on PYTHONPATH; or NULL */
    const char *progress_ring;  /* DDP_PROGRESS_RING (progress.h); or NULL */
    int torch_version;          /* the workers' torch (DDP_TORCH_VERSION), 0: unknown */
    const char *timer_file;     /* TORCHELASTIC_TIMER_FILE: the watchdog's FIFO; or NULL */
    const char *checkpoint_dir; /* DDP_CHECKPOINT_DIR: in-memory checkpoints'; or NULL */
    int64_t checkpoint_step;    /* DDP_CHECKPOINT_STEP where >= 0 */
} ddp_worker_info_t;

/* The folder holding the ddp_launch Python package (ddp_launch.step(), the zygote) that
 * came with this launcher: ../share/ddp-launch/python from its own folder when installed,
 * or ../worker/python in the build tree; into buf[cap]. false when neither is there. */
bool ddp_launcher_python_dir(char *buf, size_t cap);

/* That folder, for the workers' PYTHONPATH: false also where the workers' python
 * (`envp`'s PATH, PYTHONPATH, HOME) has a ddp_launch package of its own. */
bool ddp_worker_module_dir(const ddp_launch_config_t *cfg, char *const *envp, char *buf,
                           size_t cap);

/* Python's string.Template.safe_substitute(local_rank=N) on one argument, as torchrun
 * applies it: ${local_rank} and $local_rank become N, $$ becomes $, any other $ stays.
 * *out is a new string. 0 or -ENOMEM. */
int ddp_substitute_local_rank(const char *arg, int local_rank, char **out);

/* The argv of the worker with local rank `local_rank`: python -u [-m] script, or the
 * program itself with --no-python; the legacy --local_rank argument if asked; then the
 * script's arguments, substituted. argv[0] is what to execute (looked up in PATH). */
int ddp_worker_argv(const ddp_launch_config_t *cfg, int local_rank, char ***out);

/* The "NAME=VALUE" entries the launcher adds for one worker, given the launcher's own
 * environment `base` (variables that torchrun sets only when unset are left out when
 * present there; NCCL_ASYNC_ERROR_HANDLING also where the workers' torch is 2.2 or
 * later, whose torchrun sets only TORCH_NCCL_ASYNC_ERROR_HANDLING and which warns of
 * the old name). */
int ddp_worker_env_added(const ddp_launch_config_t *cfg, const ddp_worker_info_t *info,
                         char *const *base, char ***out);

/* Whether the entry "NAME=VALUE" is one of a worker's own: its ranks and sizes, where
 * the store is, its attempt and files, and with `devices` (--virtual-local-rank) its
 * CUDA_VISIBLE_DEVICES. What is not, the node's workers share (the warm-restart zygote's
 * environment, zygote.h). */
bool ddp_worker_env_own(const char *entry, bool devices);

/* `base` with `added` replacing entries of the same name. The array is new; its
 * strings are borrowed from `base` and `added` (free the array alone with free()). */
int ddp_worker_env_merge(char *const *base, char *const *added, char ***out);

/* The name torchrun gives the job in its report: the script (or module). */
const char *ddp_worker_entry_name(const ddp_launch_config_t *cfg);

#endif
