/* The launcher's configuration: everything the command line, PET_* variables and
 * Slurm's environment decide, the limits, and ddp-launch's exit statuses. A plain value:
 * the parser fills it (cli.c, flags.c, slurm.c) and main resolves it (resolve.c); from then
 * on every module reads it, and none writes it. */
#ifndef DDP_LAUNCHER_CONFIG_CONFIG_H
#define DDP_LAUNCHER_CONFIG_CONFIG_H

#include "host/health.h"
#include "host/numa.h"
#include "store_codec.h"

#include <stdbool.h>
#include <stddef.h>

/* Most workers one node may run: each costs two pipes and a process group. */
#define DDP_MAX_LOCAL_WORKERS 4096
#define DDP_MAX_SIGNALS       16
#define DDP_HOST_MAX          256
/* The least --checkpoint-replica-rate: a replica's receiver ends a transfer slower than
 * this on the whole (agent/checkpoint_replicas.c). */
#define DDP_CHECKPOINT_REPLICA_MIN_RATE (64u << 10)
/* The most: a sixteenth of it (4 GiB/s) is more than most links carry already. */
#define DDP_CHECKPOINT_REPLICA_MAX_RATE (UINT64_C(64) << 30)

/* How ddp-launch exits (the table in ddp-launch(1)). */
enum {
    DDP_EXIT_OK = 0,
    DDP_EXIT_WORKER_FAILED = 1,
    DDP_EXIT_USAGE = 2,
    DDP_EXIT_LAUNCH_FAILED = 3,
    DDP_EXIT_STORE_FAILED = 4, /* the store cannot listen: port in use, address not ours */
    DDP_EXIT_RDZV_FAILED = 5,  /* the nodes could not form or keep the job (see the message) */
    DDP_EXIT_NO_PROGRESS = 6, /* restarts made no progress: the job cannot go on (do not requeue) */
    DDP_EXIT_NOT_EXECUTABLE = 126,
    DDP_EXIT_NOT_FOUND = 127,
    DDP_EXIT_SIGNAL_BASE = 128,
};

typedef enum {
    DDP_NPROC_INT,
    DDP_NPROC_CPU,
    DDP_NPROC_GPU,
    DDP_NPROC_AUTO,
    DDP_NPROC_XPU
} ddp_nproc_kind_t;
typedef enum { DDP_RDZV_STATIC, DDP_RDZV_C10D, DDP_RDZV_ETCD } ddp_rdzv_backend_t;

/* What the worker is told its local rank through, besides LOCAL_RANK. */
typedef enum {
    DDP_LOCAL_RANK_ARG_NONE,       /* torchrun, or launch --use-env */
    DDP_LOCAL_RANK_ARG_UNDERSCORE, /* --local_rank=N, torch.distributed.launch <= 1.13 */
    DDP_LOCAL_RANK_ARG_DASH,       /* --local-rank=N, torch.distributed.launch >= 2.0 */
} ddp_local_rank_arg_t;

typedef enum {
    DDP_EXIT_CODE_TORCHRUN, /* 1 for any worker failure */
    DDP_EXIT_CODE_WORKER,   /* the root cause's own status (128+N for signal N) */
} ddp_exit_code_mode_t;

/* torchrun's Std flags: which streams of a worker go to log files. */
enum { DDP_STD_NONE = 0, DDP_STD_OUT = 1, DDP_STD_ERR = 2, DDP_STD_ALL = 3 };

typedef struct ddp_std_spec_s {
    int all;     /* for every local rank ("-r 3"), or 0 with a map */
    size_t nmap; /* "-r 0:1,1:2": per local rank */
    struct {
        long local_rank;
        int std;
    } * map;
} ddp_std_spec_t;

typedef struct ddp_rdzv_conf_s {
    double join_timeout;        /* s, default 600 */
    double last_call_timeout;   /* s, default 30 */
    double close_timeout;       /* s, default 30 */
    double read_timeout;        /* s, default 60 */
    double timeout;             /* s, static rendezvous, default 900 */
    int is_host;                /* -1 unset, 0 or 1 */
    double keep_alive_interval; /* s between a launcher's heartbeats, default 1 */
    int keep_alive_max_attempt; /* heartbeats missed before a node is lost, default 3 */
} ddp_rdzv_conf_t;

/* --rdzv-backend=etcd: the cluster that decides where the job's store lives, and how to
 * speak to it (--rdzv-endpoint, --rdzv-conf protocol, cacert, cert, key; strings owned). */
typedef struct ddp_etcd_conf_s {
    char *given;      /* --rdzv-endpoint as given: "[SCHEME://]HOST[:PORT],..." */
    char **endpoints; /* each as "HOST:PORT" (default port 2379; IPv6 as [ADDR]:PORT) */
    size_t nendpoints;
    bool https, protocol_given;
    char *cacert, *cert, *key; /* TLS files, or NULL */
} ddp_etcd_conf_t;

/* The largest TLS file taken (a CA bundle is a few hundred KiB). */
#define DDP_ETCD_FILE_MAX (4 << 20)

typedef struct ddp_launch_config_s {
    /* Nodes and workers. */
    int nnodes_min, nnodes_max;
    ddp_nproc_kind_t nproc_kind;
    int nproc_per_node; /* the count: given, or found by ddp_resolve_config */
    int node_rank;

    /* Rendezvous. */
    char master_addr[DDP_HOST_MAX];
    int master_port;
    bool master_port_given; /* by --master-port, PET_MASTER_PORT or the c10d endpoint */
    int slurm_fanout;       /* > 0: in a Slurm allocation of this many nodes, outside a step: this
                               launcher starts one per node through srun (fanout.h) */
    bool slurm_step;        /* in a Slurm job step: srun starts no launcher again */
    bool store_in_step;     /* and the store's launcher is one of its tasks */
    const char *hosts;      /* --hosts: node 0 here, the others started over ssh (fanout.h) */
    const char *hostfile;   /* --hostfile: the same from a file of "host [slots=N]" lines */
    bool nproc_per_node_given; /* by --nproc-per-node or PET_NPROC_PER_NODE */
    const char *event_log;     /* --event-log-handler: null, console or file:PATH (events.h) */
    char **env_set; /* --env and --env-list: "NAME=VALUE" for every worker (owned; NULL-ended) */
    int nenv;
    char **env_check; /* --env-check: more names the nodes must agree on (owned; NULL-ended) */
    int nenv_check;
    bool env_check_strict; /* --env-check-strict: a difference ends the job (status 5) */
    ddp_rdzv_backend_t rdzv_backend;
    int hot_spares;    /* --hot-spares: c10d launchers kept waiting beyond the job's size */
    int exclude_after; /* --exclude-after: rounds in a row with failures before a node leaves */
    bool rdzv_endpoint_set;
    char rdzv_endpoint_host[DDP_HOST_MAX];
    int rdzv_endpoint_port;
    char *run_id; /* owned */
    ddp_rdzv_conf_t rdzv_conf;
    ddp_etcd_conf_t etcd;
    bool standalone;
    const char *local_addr; /* NULL: this host's name */
    ddp_codec_limits_t store_limits;
    unsigned store_busy_poll_us; /* see ddp_store_server_options_t */

    /* Supervision. */
    int max_restarts;
    double monitor_interval; /* accepted; supervision is event-driven */
    double shutdown_timeout; /* s between the stop signal and SIGKILL */
    int signals[DDP_MAX_SIGNALS];
    int nsignals;
    bool signals_given;          /* --signals-to-handle (or PET_SIGNALS_TO_HANDLE) was given */
    int passed[DDP_MAX_SIGNALS]; /* --forward-signals: to the workers, nothing stopped */
    int npassed;
    ddp_exit_code_mode_t exit_code_mode;
    /* --store-wait-notice: s a worker waits in the store before it is named (60; 0: off) */
    double store_wait_notice;
    /* --finished-wait-notice: s after this node's first worker (or all of them) finished
     * while others run before who waits for whom is said (60; 0: off) */
    double finished_wait_notice;
    double hang_timeout;     /* --hang-timeout: s with no progress before a hang report; 0: off */
    bool hang_auto;          /* --hang-timeout=auto: each rank's own, from its observed steps */
    double hang_floor;       /* --hang-timeout-floor: auto's least (default 10 s) */
    bool hang_dump;          /* --hang-dump: the report also saves every worker's stacks */
    double straggler_report; /* --straggler-report: s between reports (default 300; 0: off) */
    double straggler_threshold;       /* --straggler-threshold: x the median rank's work (1.2) */
    bool straggler_exclude;           /* --straggler-action=exclude: its node leaves at a restart */
    bool warm_restarts;               /* --warm-restarts: restarts fork from a zygote (zygote.h) */
    const char *checkpoint_dir;       /* --checkpoint-dir: in-memory checkpoints' copies; NULL */
    int checkpoint_persist_every;     /* --checkpoint-persist-every: a rank's every N-th save; 0 */
    int checkpoint_replicas;          /* --checkpoint-replicas: nodes each node's slots go to; -1:
                                       * the default (1 with several nodes) */
    uint64_t checkpoint_replica_rate; /* --checkpoint-replica-rate: bytes/s a node sends, at
                                       * least DDP_CHECKPOINT_REPLICA_MIN_RATE */
    const char *preload;              /* --preload: what the zygote imports (NULL: torch) */

    /* Health checks before each round (health.h). */
    const char *health_command; /* --health-check: a site's command, exit 0 = healthy */
    const char *health_paths;   /* --health-check-path: comma-separated paths to read */
    double health_timeout;      /* --health-check-timeout: s for the command (default 60) */
    double gpu_reclaim_timeout; /* --gpu-memory-reclaim-timeout: s (default 50; 0: no wait) */
    const char *progress_file;  /* --progress-file: holds the last checkpointed iteration */
    int max_no_progress;        /* --max-no-progress-restarts: attempts in a row (default 3) */

    /* NUMA binding. */
    ddp_numa_mode_t numa_mode; /* --numa-binding */
    bool numa_fallback;        /* --numa-binding-fallback: a worker that cannot be bound runs */
    /* [nproc_per_node], found by ddp_resolve_config (owned); NULL: no worker is bound. */
    ddp_numa_bind_t *numa_binds;
    char *numa_note; /* why nothing is bound where binding was asked (owned) */

    /* The workers' program. */
    const char *role;
    bool virtual_local_rank; /* --virtual-local-rank: LOCAL_RANK=0, one device visible each */
    /* Its CUDA_VISIBLE_DEVICES for each local rank, from this node's (owned; NULL-ended), by
     * ddp_resolve_config; NULL: the local rank itself. */
    char **virtual_devices;
    bool module, no_python, run_path;
    ddp_local_rank_arg_t local_rank_arg;
    bool local_rank_arg_given; /* by --local-rank-arg (else found in the script's text) */
    bool use_env;              /* legacy launch's --use-env: no local rank argument */
    const char *python_exec;   /* PYTHON_EXEC, else python3 or the environment's (resolve.c) */
    bool python_exec_given;    /* by PYTHON_EXEC */
    char *python_found;        /* owned: python_exec when it is the environment's */
    const char *script;
    char *script_path;  /* owned: script made a path ("./run.sh") where it was read here */
    char **script_args; /* points into argv */
    int nscript_args;

    /* Output. */
    const char *log_dir; /* NULL: a new directory under TMPDIR */
    ddp_std_spec_t redirects, tee;
    bool ranks_filter_set;
    size_t nranks_filter;
    long *ranks_filter;          /* owned */
    const char *prefix_template; /* TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE or NULL */
    /* --duplicate-stdout-filters, --duplicate-stderr-filters: a tee'd stream's lines that
     * hold any of these also go to the attempt's filtered_stdout.log or filtered_stderr.log
     * (owned, NULL-ended; NULL: none), indexed by DDP_STD_OUT and DDP_STD_ERR. */
    char **dup_filters[3];
    int ndup_filters[3];

    /* What to do. */
    bool help, version, dry_run;
} ddp_launch_config_t;

/* Whether `cfg` asks for dynamic (c10d, elastic) rendezvous across nodes. */
bool ddp_config_dynamic(const ddp_launch_config_t *cfg);

/* Who serves the job's store, as far as one launcher can tell before it starts. */
typedef enum {
    DDP_STORE_HOST_SELF,      /* this launcher: one node, or node 0 (failing to listen is fatal) */
    DDP_STORE_HOST_IF_FREE,   /* c10d: whichever launcher can bind the endpoint */
    DDP_STORE_HOST_NODE0,     /* static: node 0's launcher, not this one */
    DDP_STORE_HOST_ELSEWHERE, /* c10d with is_host=false: another launcher */
    DDP_STORE_HOST_ELECTED    /* etcd: each launcher listens, and the elected one serves */
} ddp_store_host_t;

ddp_store_host_t ddp_config_store_host(const ddp_launch_config_t *cfg);

/* torchrun's defaults (every flag unset). */
void ddp_config_defaults(ddp_launch_config_t *cfg);

/* Frees what the config owns (run id, maps, filter); it can be filled again. */
void ddp_config_free(ddp_launch_config_t *cfg);

/* The Std flags of `local_rank` under a --redirects/--tee spec. */
int ddp_std_for(const ddp_std_spec_t *spec, int local_rank);

/* Whether `local_rank`'s output may reach the console (--local-ranks-filter). */
bool ddp_config_rank_shown(const ddp_launch_config_t *cfg, int local_rank);

/* The health checks `cfg` asks of every node (host/health.h; its strings borrowed from cfg). */
void ddp_config_health_spec(const ddp_launch_config_t *cfg, ddp_health_spec_t *out);

/* Whether `spec` is an --event-log-handler (output/events.h): "null", "console" or
 * "file:PATH" with a PATH. */
bool ddp_config_events_valid(const char *spec);

#endif
