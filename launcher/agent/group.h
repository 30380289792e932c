/* The worker group's face: what the agent (agent.c) shares with its parts, and the few
 * things a part may ask of it.
 *
 * The agent owns the group and is the only one that writes it: the worker table, the
 * round, the stop, the directories and the services it started (the guard, the output,
 * the store, the rendezvous). Each part of the agent (the hang watch, the progress watch,
 * pause, the store waits, the end notes, worker start, the leftovers, the restart policy)
 * reads the group, keeps its own state in a struct of its own that no other file sees,
 * and asks the agent through the const ddp_agent_ops_t table. Everything here runs on the
 * agent's loop thread. */
#ifndef DDP_LAUNCHER_AGENT_GROUP_H
#define DDP_LAUNCHER_AGENT_GROUP_H

#include "buf.h"
#include "config/config.h"
#include "output/events.h"
#include "agent/file_timer.h"
#include "spawn/guard.h"
#include "log.h"
#include "output/output.h"
#include "rdzv/rdzv.h"
#include "rdzv/coord.h"
#include "diagnose/report.h"
#include "store/server.h"

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <uv.h>

/* The states of agent.c's table (its header comment). */
typedef enum {
    DDP_AGENT_RUNNING,
    DDP_AGENT_STOPPING,
    DDP_AGENT_WAITING,
    DDP_AGENT_CHECKING, /* one node: its health checks (health.h); after a failure (several
                         * nodes: a round after the first) its in-memory checkpoints' scan
                         * and, with several nodes, the step agreed across them
                         * (checkpoints.h, checkpoint_common.h), before an attempt */
    DDP_AGENT_DONE
} ddp_agent_state_t;

/* Why the running group is stopped. */
typedef enum {
    DDP_STOP_NONE,         /* every worker succeeded */
    DDP_STOP_FAILURE,      /* a worker failed */
    DDP_STOP_SIGNAL,       /* the launcher received a signal to forward */
    DDP_STOP_LAUNCH_ERROR, /* the launcher could not start the group */
    DDP_STOP_REMOTE,       /* a worker failed on another node */
    DDP_STOP_ABORTED,      /* the multi-node job ended (another node, or the store, gone) */
} ddp_stop_reason_t;

typedef struct ddp_worker_s {
    int local_rank, rank;
    pid_t pid; /* 0 before it is started */
    bool running;
    bool succeeded; /* in this attempt */
    bool stopped;   /* in this attempt, ended by the launcher's stop, not a failure of its own */
    char *stopped_error; /* a stopped worker's own error file's first line, or NULL */
    char *timer_expired; /* the scope of its watchdog timer that sent it a signal, or NULL */
    char *prefix;
    char *error_file;
    ddp_stream_t *out, *err;
    long peak_rss_kb;       /* its largest resident set (wait4), once it has ended */
    ddp_recent_t recent[2]; /* the last bytes of its piped stdout and stderr */
} ddp_worker_t;

typedef struct ddp_group_s ddp_group_t;

/* What a part may ask of the agent. */
typedef struct {
    /* Stops the group for `reason`: `sig` to the running workers, then the grace and
     * SIGKILL; where none runs, only the reason is kept for the group's end. */
    void (*stop)(ddp_group_t *g, int sig, ddp_stop_reason_t reason);
    /* The attempt's failure failures[first] fails the round: on every node of a
     * multi-node job, and the group stops. */
    void (*fail_round)(ddp_group_t *g, size_t first);
    /* Every worker of the attempt has ended: the group's end (its leftovers, what next). */
    void (*group_ended)(ddp_group_t *g);
    /* The leftovers' grace, or the wait for the GPUs' memory, is over: the group's end
     * goes on. */
    void (*leftovers_done)(ddp_group_t *g);
    /* The read of --progress-file at the group's end is over: the group's end goes on. */
    void (*progress_read)(ddp_group_t *g);
    /* A multi-node job's rendezvous thread starts (the coordinator first where this
     * launcher serves the store and has none yet); a failure ends the job. */
    void (*start_rendezvous)(ddp_group_t *g);
    /* The job ends with `exit_code`: now, or once the workers have stopped. */
    void (*end_job)(ddp_group_t *g, int exit_code);
    /* This launcher leaves a job that goes on elsewhere (etcd elected another while it was
     * stopped), ending with `exit_code`: where it serves the store, the store closes with
     * no word of an end (the others take it as lost and go on at the elected one's). */
    void (*leave_job)(ddp_group_t *g, int exit_code);
} ddp_agent_ops_t;

struct ddp_group_s {
    const ddp_launch_config_t *cfg;
    const ddp_log_t *log;
    uv_loop_t *loop;
    const ddp_agent_ops_t *ops;
    ddp_events_t events; /* --event-log-handler */
    char host[256];

    /* What the agent started, for the parts to use. */
    ddp_guard_t *guard;
    ddp_output_t *output;         /* where the workers' piped streams go */
    ddp_file_timer_t *file_timer; /* TORCHELASTIC_ENABLE_FILE_TIMER=1's watchdog; NULL */
    ddp_store_server_t *store;    /* the rendezvous store the workers use, where we serve it */
    int store_port;
    ddp_rdzv_t *rdzv;        /* multi-node jobs */
    ddp_rdzv_coord_t *coord; /* multi-node jobs whose store this launcher serves */
    bool subreaper;          /* what the workers leave in sessions of their own comes here */

    /* The program and the directories. */
    char *program; /* the executable, found in PATH */
    char *run_dir, *attempt_dir;
    char *python_dir;           /* --hang-dump: the sitecustomize's directory, or NULL */
    char module_dir[PATH_MAX];  /* the ddp_launch package's folder, or "" */
    const char *checkpoint_dir; /* the workers' DDP_CHECKPOINT_DIR (agent/checkpoints.h); NULL */
    int64_t checkpoint_step;    /* the attempt's DDP_CHECKPOINT_STEP; -1: unset */
    int torch_version;          /* the workers' torch (worker_spec.h), 0: unknown */
    int dump_signal;            /* what a worker dumps its state on (DDP_DUMP_SIGNAL) */
    rlim_t nofile;              /* the soft fd limit to give back to workers; 0 if unchanged */
    bool console_merged;        /* our stdout and stderr are one file: a worker's share a pipe */

    /* The workers of this node, and the failures of the current attempt: before the
     * stop, or not ours. */
    ddp_worker_t *workers;
    int nworkers, nrunning;
    ddp_failure_t *failures;
    size_t nfailures;

    /* The round: one node alone, or this node's share of what the rendezvous formed. */
    ddp_agent_state_t state;
    int attempt;
    int rank_offset, world_size, nnodes, group_rank, restart_count;
    char **job_env;       /* multi-node: node 0's --env entries for this round */
    double attempt_began; /* the wall clock's seconds at the attempt's start */
    /* When the first worker of the attempt succeeded while others ran (monotonic, and the
     * wall clock's seconds for the report); < 0: none. */
    double first_succeeded, first_succeeded_wall;

    /* The stop of the attempt. */
    ddp_stop_reason_t stop_reason;
    int stop_signal;     /* DDP_STOP_SIGNAL's */
    int sent_signal;     /* what the stop sent first */
    bool sent_sigkill;   /* the stop escalated to SIGKILL */
    int abort_exit_code; /* DDP_STOP_ABORTED's */
};

/* A worker's directory in the current attempt, <attempt dir>/<local rank>, into buf[cap]. */
void ddp_group_worker_dir(const ddp_group_t *g, const ddp_worker_t *w, char *buf, size_t cap);

/* `sig` to the process group of worker i, a failure other than its being gone warned of;
 * 0 or -errno. */
int ddp_group_signal_worker(const ddp_group_t *g, int i, int sig);
/* `sig` to the group of every running worker. */
void ddp_group_signal_running(const ddp_group_t *g, int sig);

/* The global ranks of the workers that run (`running`), else that have succeeded, as "0-2,
 * 5", appended to `out`; returns how many. */
int ddp_group_ranks_where(const ddp_group_t *g, bool running, ddp_buf_t *out);

/* The bytes worker `w` has written so far: its pipes, and its log files. */
uint64_t ddp_group_worker_output(const ddp_group_t *g, const ddp_worker_t *w);

#endif
