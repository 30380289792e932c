/* Every environment variable ddp-launch or libddp reads or writes, declared once.
 *
 * Each entry gives the name, the default used when it is unset (NULL: no default) and
 * one line on its meaning; ddp-launch(1) documents the same list. The PET_<FLAG>
 * variables are a family derived from the flag table in launcher/config/cli.c. Pure. */
#ifndef DDP_COMMON_ENV_H
#define DDP_COMMON_ENV_H

#define DDP_ENV_MAP(X)                                                                           \
    /* The worker environment: written by the launcher (torchrun's contract). */                 \
    X(LOCAL_RANK, NULL, "rank of the worker among the workers of its node")                      \
    X(RANK, NULL, "global rank of the worker")                                                   \
    X(GROUP_RANK, NULL, "rank of the worker's node (its agent) in this round")                   \
    X(GROUP_WORLD_SIZE, NULL, "number of nodes in this round")                                   \
    X(ROLE_RANK, NULL, "rank of the worker among the workers of its role")                       \
    X(ROLE_WORLD_SIZE, NULL, "number of workers of the worker's role")                           \
    X(ROLE_NAME, NULL, "the --role of the workers")                                              \
    X(LOCAL_WORLD_SIZE, NULL, "number of workers on the worker's node")                          \
    X(WORLD_SIZE, NULL, "number of workers in the job")                                          \
    X(MASTER_ADDR, NULL, "host of the rendezvous store")                                         \
    X(MASTER_PORT, NULL, "port of the rendezvous store")                                         \
    X(TORCHELASTIC_USE_AGENT_STORE, NULL, "True when the launcher hosts the store")              \
    X(TORCHELASTIC_RESTART_COUNT, NULL, "attempt number of the worker group, from 0")            \
    X(TORCHELASTIC_MAX_RESTARTS, NULL, "the --max-restarts of the job")                          \
    X(TORCHELASTIC_RUN_ID, NULL, "the --rdzv-id of the job")                                     \
    X(TORCHELASTIC_ERROR_FILE, NULL, "where a failing worker writes its error.json")             \
    X(TORCHELASTIC_SIGNALS_TO_HANDLE, NULL, "--signals-to-handle, for torch >= 2.9's workers")   \
    X(TORCHELASTIC_TIMER_FILE, NULL, "the watchdog's FIFO (TORCHELASTIC_ENABLE_FILE_TIMER=1)")   \
    X(TORCH_NCCL_ASYNC_ERROR_HANDLING, "1", "NCCL async error handling in torch >= 2.2")         \
    X(NCCL_ASYNC_ERROR_HANDLING, "1", "NCCL async error handling in torch < 2.2")                \
    X(OMP_NUM_THREADS, "1", "OpenMP threads per worker; set to 1 when unset and nproc > 1")      \
    X(PYTHONPATH, NULL, "with --hang-dump, ddp-launch's sitecustomize directory comes first")    \
    /* Read by the launcher. */                                                                  \
    X(PYTHON_EXEC, "python3", "interpreter that runs Python training scripts (with -u)")         \
    X(TORCHELASTIC_ENABLE_FILE_TIMER, NULL, "1: the launcher serves torchrun's worker watchdog") \
    X(HOME, NULL, "the user's site (~/.local) where the workers' torch is looked for")           \
    X(TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE, NULL,                                               \
      "prefix of tee'd console lines: ${rank}, ${local_rank}, ${role_name}")                     \
    X(DDP_LAUNCH_LOG_LEVEL, "info", "verbosity of ddp-launch: error, warning, info or debug")    \
    X(LOGLEVEL, NULL,                                                                            \
      "torchrun's verbosity (DEBUG, INFO, WARNING, ...): where no DDP_LAUNCH_LOG_LEVEL")         \
    X(DDP_TOPOLOGY_ROOT, "/",                                                                    \
      "--numa-binding reads sysfs under this directory (a recorded tree) instead of /")          \
    X(CUDA_VISIBLE_DEVICES, NULL, "the GPUs workers see: counted for gpu, bound near for NUMA")  \
    X(DDP_LAUNCH_SSH, "ssh", "the command (words split at blanks) --hosts starts nodes with")    \
    X(DDP_LAUNCH_SSH_NODE, NULL,                                                                 \
      "set by --hosts on the nodes it starts: the launcher ends when its stdin (ssh) ends")      \
    X(TMPDIR, "/tmp", "where the default --log-dir is created")                                  \
    X(GLOO_SOCKET_IFNAME, NULL, "torch gloo's interface; unset: a loopback hostname warned of")  \
    X(PATH, "/usr/local/bin:/usr/bin:/bin", "where worker programs are looked up")               \
    X(SLURM_NNODES, NULL, "Slurm: --nnodes where neither the flag nor PET_NNODES gives it")      \
    X(SLURM_NODEID, NULL, "Slurm: --node-rank where neither the flag nor PET_ gives it")         \
    X(SLURM_JOB_NODELIST, NULL, "Slurm: its first host is --master-addr where none is given")    \
    X(SLURM_STEP_NODELIST, NULL, "Slurm: in a step, its first host is --master-addr")            \
    X(SLURM_JOB_ID, NULL, "Slurm: the job's store port (--master-port) where none is given")     \
    X(SLURM_STEP_ID, NULL, "Slurm: set in a step (srun); unset, the launcher runs srun")         \
    X(SLURM_JOB_NUM_NODES, NULL, "Slurm: the allocation's nodes, one launcher each")             \
    X(SLURM_STEP_TASKS_PER_NODE, NULL, "Slurm: a step of more than one task a node is refused")  \
    X(SLURMD_NODENAME, NULL, "Slurm: set in a batch script; a script missing there stops it")    \
    /* Read by libddp. */                                                                        \
    X(DDP_TIMEOUT, "300", "libddp: seconds for init and for each collective")                    \
    X(DDP_SHM, "1", "libddp: 0 keeps a one-host ring on TCP instead of shared memory")           \
    X(DDP_BACKEND, "auto", "libddp: cpu, nccl or auto, where the program's options say auto")    \
    X(DDP_DUMP_SIGNAL, NULL, "set by ddp-launch: the signal a worker dumps its state on")        \
    X(DDP_PROGRESS_RING, NULL, "set by ddp-launch: where ddp_launch.step() records progress")    \
    X(DDP_CHECKPOINT_DIR, NULL,                                                                  \
      "the tmpfs directory of the workers' in-memory checkpoints (common/ckpt.h); unset: none")  \
    X(DDP_CHECKPOINT_STEP, NULL,                                                                 \
      "after a restart, the step every rank's checkpoint load gives; unset: each its newest")    \
    X(DDP_LOCAL_ADDR, NULL, "set by ddp-launch --local-addr: the address libddp's ring offers")  \
    X(DDP_SOCKET_IFNAME, NULL, "libddp: the ring's interface (NCCL_SOCKET_IFNAME's syntax)")

typedef enum {
#define DDP_ENV_ENUM(name, def, help) DDP_ENV_##name,
    DDP_ENV_MAP(DDP_ENV_ENUM)
#undef DDP_ENV_ENUM
        DDP_ENV__COUNT
} ddp_env_id_t;

const char *ddp_env_name(ddp_env_id_t id);
const char *ddp_env_default(ddp_env_id_t id);
const char *ddp_env_help(ddp_env_id_t id);

/* The variable's value in this process, or its default when unset or empty. */
const char *ddp_env_get(ddp_env_id_t id);

/* The value of `name` in an environment array like environ (NULL when absent). */
const char *ddp_env_lookup(char *const *envp, const char *name);

#endif
