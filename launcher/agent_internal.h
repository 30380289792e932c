/* The agent's insides, shared by its files and no other: agent.c (the lifecycle, the
 * state table in its header comment), agent_hang.c (hang reports: finding a hang,
 * collecting every rank's place, the report, then what waited for it), agent_say.c
 * (what is said of a job's end beside the report), agent_progress.c, agent_warm.c,
 * agent_orphans.c, agent_waits.c and agent_pause.c (Ctrl-Z). */
#ifndef DDP_LAUNCHER_AGENT_INTERNAL_H
#define DDP_LAUNCHER_AGENT_INTERNAL_H

#include "config.h"
#include "events.h"
#include "file_timer.h"
#include "guard.h"
#include "health.h"
#include "log.h"
#include "output.h"
#include "rdzv.h"
#include "session.h"
#include "straggler.h"
#include "rdzv_coord.h"
#include "rdzv_record.h"
#include "report.h"
#include "store_server.h"
#include "zygote.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <uv.h>

/* The states of agent.c's table (its header comment). */
typedef enum {
    AGENT_RUNNING,
    AGENT_STOPPING,
    AGENT_WAITING,
    AGENT_CHECKING, /* one node: its health checks before an attempt (health.h) */
    AGENT_DONE
} agent_state_t;

typedef enum {
    STOP_NONE,         /* every worker succeeded */
    STOP_FAILURE,      /* a worker failed */
    STOP_SIGNAL,       /* the launcher received a signal to forward */
    STOP_LAUNCH_ERROR, /* the launcher could not start the group */
    STOP_REMOTE,       /* a worker failed on another node */
    STOP_ABORTED,      /* the multi-node job ended (another node, or the store, gone) */
} stop_reason_t;

typedef struct ddp_agent_s ddp_agent_t;

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
    long peak_rss_kb; /* its largest resident set (wait4), once it has ended */
    /* --hang-timeout's view of its progress at the last look (hang.h). */
    bool has_ring;     /* libddp's flight recorder: progress is a finished collective */
    uint64_t progress; /* its rings' finished collectives */
    double cpu;        /* without a ring: its CPU seconds, */
    uint64_t output;   /* and the bytes of its output */
    double active_at;  /* when it last made progress (monotonic: a clock step is none) */
    bool paused;       /* stopped by a Ctrl-Z (here, or where the store is): continued after */
    /* --hang-timeout=auto (agent_progress.c). */
    uint64_t collectives;   /* its flight ring's completed collectives at the last look */
    double moved_at;        /* when those last changed (monotonic); 0: not yet */
    int64_t waits_since_ns; /* its progress ring: waiting in a collective since; 0: not */
    bool hung; /* named by the hang that stops the attempt: its end is the report's failure */
    uint64_t output_at_finish; /* its output when the attempt's first worker finished */
    ddp_recent_t recent[2];    /* the last bytes of its piped stdout and stderr */
    /* --warm-restarts (agent_warm.c): its main thread's seconds running or waiting for a
     * CPU, at the importing zygote's last look. */
    double runnable;
} ddp_worker_t;

/* What --hang-timeout=auto has learnt (kept across attempts). */
typedef struct {
    double step_s; /* the longest time between two steps outside sections */
    int64_t steps; /* the most steps one rank has taken: judged from AUTO_WARMUP on */
    double gap_s;  /* libddp: the longest time between two collectives */
    uint64_t collectives;
    char names[DDP_PROGRESS_SECTIONS][DDP_PROGRESS_NAME];
    double section_s[DDP_PROGRESS_SECTIONS];
    int nsections;
    bool dirty; /* changed since written to <run dir>/hang_timeouts.json */
} ddp_learnt_t;

/* A hang report's phases (see hang_begin). */
typedef enum { HANG_IDLE, HANG_COLLECTING, HANG_WAITING } hang_phase_t;

struct ddp_agent_s {
    const ddp_launch_config_t *cfg;
    const ddp_log_t *log;
    uv_loop_t loop;
    uv_signal_t sigchld;
    ddp_session_t session; /* a node --hosts started: its ssh session's end */
    uv_signal_t forwarded[DDP_MAX_SIGNALS];
    uv_signal_t unforwarded[DDP_MAX_SIGNALS]; /* the other signals that would end us */
    uv_signal_t passed[DDP_MAX_SIGNALS];      /* --forward-signals: passed, nothing stopped */
    uv_signal_t tstp;                         /* Ctrl-Z: the workers stop too (agent_pause.c) */
    uv_signal_t cont;                         /* continued before that stop (same) */
    uv_signal_t winch;      /* the terminal resized: the workers' pseudo-terminals too (same) */
    uv_timer_t pause_timer; /* Ctrl-Z where the store is: the others are told, then we stop */
    int pause;              /* that pause's number (ddp_rdzv_coord_pause) while it is on */
    bool pause_asked;       /* another node serves the store: asked it to pause the job */
    bool job_paused;        /* the job's pause of this node's Ctrl-Z is on (its news came) */
    bool remote_paused;     /* another node's pause of the job is on (its workers stopped) */
    double paused_at;       /* when the workers were last stopped by a Ctrl-Z */
    bool paused;            /* they are (the store's host stopped: this loop runs on) */
    double resumed_at;      /* when they were last continued: no quiet time before it */
    int unforwarded_sig[DDP_MAX_SIGNALS];
    int nunforwarded;
    uv_timer_t kill_timer;
    uv_timer_t wait_timer; /* some workers finished, others run (here or on other nodes):
                            * said after WAIT_NOTE_S */
    /* The attempt's first failure (failures[blame_first]) blames a local rank that still
     * runs (a peer whose call differed, say): the stop waits up to BLAME_GRACE_S for that
     * rank's own end, so the report's root cause is its failure, not our SIGTERM. */
    uv_timer_t blame_timer;
    int torch_version;   /* the workers' torch (worker_spec.h), 0: unknown */
    bool env_compared;   /* this node's --env values were held against node 0's */
    bool console_merged; /* our stdout and stderr are one file: a worker's share a pipe */
    /* The workers have ended and left processes in their groups: their grace
     * (agent.c's leftovers), until leftover_deadline (CLOCK_MONOTONIC). */
    uv_timer_t leftover_timer;
    bool leftover_wait;
    double leftover_deadline;
    /* Then, before the next attempt or round, the GPUs' memory back under the tolerance
     * (--gpu-memory-reclaim-timeout): the same timer and deadline polls NVML. */
    ddp_gpu_memory_t *reclaim;
    double reclaim_started;
    bool reclaimed;    /* the wait is over for this group's end */
    bool ran_a_round;  /* this launcher has been in a round (else, in a later one: a spare) */
    int failed_rounds; /* rounds in a row in which this node's own workers failed */
    /* Progress between failed attempts (--max-no-progress-restarts). */
    int no_progress;              /* failed attempts in a row without progress */
    long long last_progress;      /* --progress-file's value after the last attempt; -1: none yet */
    bool progress_file_said;      /* that --progress-file cannot be read as an integer */
    bool no_progress_budget_said; /* at the first restart: --max-no-progress-restarts */
    /* Where nothing tells progress: attempts in a row that failed the same way at their
     * start (within START_FAILURE_S), and how (their root cause's status and text). */
    int same_failures;
    char *failed_as;
    double attempt_began; /* the wall clock's seconds at the attempt's start */
    bool blame_wait;
    /* The same timer: the first failure is a worker killed by a signal this launcher
     * handles, which it did not send: its own may be on the way (SIGNAL_GRACE_S). */
    bool signal_wait;
    size_t blame_first;
    /* When the first worker of the attempt finished while others ran (monotonic, and the
     * wall clock's seconds for the report); < 0: none. */
    double first_finished, first_finished_wall;
    /* When every worker here succeeded and the job went on waiting for other nodes'
     * (monotonic); < 0: not so waiting. */
    double nodes_wait_since;
    bool stop_notice_due; /* the kill timer says first that the workers have not exited */
    ddp_guard_t guard;
    bool guard_warned;
    ddp_store_server_t *store; /* the rendezvous store the workers use */
    int store_port;
    ddp_output_t output; /* where the workers' piped streams go */
    char *program;       /* the executable, found in PATH */
    char *base_dir, *run_dir, *attempt_dir;
    bool base_created;
    rlim_t nofile; /* the soft fd limit to give back to workers; 0 if unchanged */
    char host[256];
    ddp_buf_t remote_failures;   /* serving the store: the other nodes' failures (report.h) */
    bool served_store;           /* this launcher's coordinator finished the job's rendezvous */
    ddp_rdzv_coord_t *lingering; /* finished: the coordinator the others still read from */
    bool linger_ignored;         /* lingering: the job's own signal came once more, ignored */

    /* This node's share of the job: one node alone, or what the rendezvous formed. */
    ddp_rdzv_t *rdzv;        /* multi-node jobs */
    char **job_env;          /* multi-node: node 0's --env entries for this round */
    ddp_events_t events;     /* --event-log-handler */
    long long oom_kills;     /* the memory cgroup's OOM kills when the attempt started; -1 */
    ddp_rdzv_coord_t *coord; /* multi-node jobs whose store this launcher serves */
    int rank_offset, world_size, nnodes, group_rank, restart_count;
    int abort_exit_code; /* STOP_ABORTED's */

    int attempt;
    agent_state_t state;
    ddp_health_run_t *health; /* CHECKING: the checks that run */
    stop_reason_t stop_reason;
    int stop_signal;
    int sent_signal; /* what the stop of this attempt sent first */
    ddp_worker_t *workers;
    int nworkers, nrunning;
    bool sent_sigkill;       /* the stop of this attempt escalated to SIGKILL */
    ddp_failure_t *failures; /* of the current attempt: before the stop, or not ours */
    size_t nfailures;
    size_t failures_before_stop; /* of them, recorded before the current stop began */
    int exit_code;
    bool loop_ready; /* the loop was initialised: agent_free closes it */

    /* Hang reports (hang_begin). */
    uv_timer_t hang_timer;     /* --hang-timeout: looks at every worker's progress */
    uv_timer_t progress_timer; /* stragglers and --hang-timeout=auto (agent_progress.c) */
    ddp_straggler_acc_t *accs; /* each worker's sums over the straggler window */
    ddp_flight_ring_t *rings;  /* a copy of each worker's busiest flight ring, this look */
    bool *has_flight;
    uint64_t common_seq;                                 /* collectives compared for arrivals */
    ddp_straggler_entry_t latest[DDP_STRAGGLER_ENTRIES]; /* the node's last entry a collective */
    double window_start, report_at;
    double learnt_written_at;
    bool straggler_named; /* (store host) one of this node's ranks: it leaves at a restart */
    ddp_learnt_t learnt;
    double hang_limit;    /* the timeout that found the current hang (s) */
    double tick_limit;    /* --hang-timeout=auto: the shortest timeout at the last look (s) */
    uv_timer_t hang_wait; /* the report's pauses and bounds */
    hang_phase_t hang;
    bool hang_done;     /* this attempt's report is made (one an attempt) */
    bool hang_found;    /* by this node (else another asked for our rows) */
    bool hang_stalled;  /* found by --hang-timeout: the report ends the attempt */
    char hang_why[240]; /* what found it */
    /* The stop it ends in ("the job hung ...": "" before): the failure of the ranks it
     * names (ddp_worker_t.hung), for the report. */
    char hang_message[DDP_RDZV_MSG_MAX];
    bool hang_paused;      /* the dumps' pause has passed */
    bool hang_stacks_done; /* --hang-dump's tools have ended */
    bool deferred_failure; /* a worker failed during the report: its stop waits */
    bool deferred_remote;  /* the round failed elsewhere during the report: the same */
    char deferred_message[DDP_RDZV_MSG_MAX];
    int dump_signal;           /* DDP_DUMP_SIGNAL */
    char *python_dir;          /* --hang-dump: the sitecustomize's directory */
    char module_dir[PATH_MAX]; /* the ddp_launch package's folder, or "" */
    /* This launcher is a child subreaper (agent_orphans.c): what a worker starts in a
     * session or process group of its own comes to it when its parent ends; those found
     * at a group's end (escaped[nescaped]) are ended with its leftovers. */
    bool subreaper;
    pid_t *escaped;
    int nescaped, escaped_cap;
    /* --warm-restarts (zygote.h): the zygote starts with the first attempt's workers (a
     * hot spare's as it joins), imports while they leave a CPU free (looked at on
     * zygote_timer; the last look at zygote_looked), and later attempts' workers fork from
     * it (and come to this subreaper). */
    bool warm;
    char zygote_script[PATH_MAX];
    ddp_zygote_t zygote;
    uv_timer_t zygote_timer;
    double zygote_looked;
    /* --store-wait-notice (agent_waits.c): its looks, and the age of the oldest wait the
     * last notice named (0: none since the long waits last ended). */
    uv_timer_t store_wait_timer;
    double wait_noted;
    /* TORCHELASTIC_ENABLE_FILE_TIMER=1: torchrun's worker watchdog (file_timer.h); NULL. */
    ddp_file_timer_t *file_timer;
    bool zygote_started;
    bool cold_said; /* this attempt's line on why a worker started cold */
    int forked;     /* this attempt's workers forked from the zygote */
};

/* A worker's directory in the current attempt: <attempt dir>/<local rank>. */
static inline void ddp_agent_worker_dir(const ddp_agent_t *a, const ddp_worker_t *w, char *buf,
                                        size_t cap)
{
    snprintf(buf, cap, "%s/%d", a->attempt_dir, w->local_rank);
}

/* agent.c: the stop of the running group (signal `sig`, then the grace timer); the
 * failure of the round (its first failure's index); the group's end, once none runs. */
void ddp_agent_begin_stop(ddp_agent_t *a, int sig, stop_reason_t reason);
void ddp_agent_fail_round(ddp_agent_t *a, size_t first);
void ddp_agent_group_finished(ddp_agent_t *a);
void ddp_agent_unhealthy_event(ddp_agent_t *a, const char *why);

/* agent_say.c. The OOM kills counted by this launcher's memory cgroup (-1: unknown; its
 * file's path into where[cap] unless NULL); the message for a worker they ended (NULL when
 * they did not: malloc'd); the report of a failed job with what goes with it (`elsewhere`:
 * the job's report, with this node's failures, is printed by the launcher serving the
 * store: here only a line that says so). */
long long ddp_agent_oom_kills(char *where, size_t cap);
char *ddp_agent_oom_message(ddp_agent_t *a, const ddp_worker_t *w, int status);
void ddp_agent_print_report(ddp_agent_t *a, bool elsewhere);
/* agent_no_progress.c. --progress-file's integer; -1 where there is none (no such file);
 * DDP_PROGRESS_UNREADABLE where it cannot be read as one (said once a job: what it holds,
 * what is expected). */
#define DDP_PROGRESS_UNREADABLE (-2)
long long ddp_agent_progress_file_value(ddp_agent_t *a);
/* After a failed attempt that would be restarted: NULL while the job can go on; else why
 * it cannot (the no_progress_stop event's reason: progress_file, libddp or
 * same_failure_at_start), with the line that says so in message[cap]. Counts the attempts
 * without progress in a->no_progress. */
const char *ddp_agent_no_progress(ddp_agent_t *a, char *message, size_t cap);
/* This node's ranks that finished while others ran, before the job failed on another
 * node, as a warning with the likely cause; nothing where none did. Once an attempt. */
void ddp_agent_say_left_early(ddp_agent_t *a);
/* The global ranks of the workers that run (`running`), else that have finished, as "0-2,
 * 5", appended to `out`; returns how many. */
int ddp_agent_ranks_where(const ddp_agent_t *a, bool running, ddp_buf_t *out);

/* agent_hang.c. A report begins (found: by this node, else another asked for our rows;
 * stalled: by --hang-timeout, so the report ends the attempt as a failure); the report
 * of every node's rows `text` is printed, its verdict into *verdict; it ends (verdict
 * NULL where another node printed it or the rows never came) and what waited goes on;
 * a signal or the job's end cancels it. --hang-timeout's look every `ms`. */
/* The bytes worker `w` has written so far: its pipes, and its log files. */
uint64_t ddp_agent_worker_output(const ddp_agent_t *a, const ddp_worker_t *w);
void ddp_agent_hang_begin(ddp_agent_t *a, bool found, bool stalled, const char *why);
void ddp_agent_hang_print(ddp_agent_t *a, const char *text, ddp_buf_t *verdict);
void ddp_agent_hang_end(ddp_agent_t *a, const char *verdict);
void ddp_agent_hang_cancel(ddp_agent_t *a);
void ddp_agent_hang_watch(ddp_agent_t *a, uint64_t ms);

/* agent_progress.c: starts the looks at the workers' progress of a new attempt (stragglers,
 * --hang-timeout=auto), where either is on; stop with uv_timer_stop(&a->progress_timer). */
void ddp_agent_progress_start(ddp_agent_t *a);
void ddp_agent_progress_free(ddp_agent_t *a);

/* agent_waits.c: starts the looks at the store's long waits of a new attempt, where this
 * launcher serves the store and --store-wait-notice is on; stop with
 * uv_timer_stop(&a->store_wait_timer). */
void ddp_agent_store_waits_start(ddp_agent_t *a);

/* agent.c: worker w's environment for this attempt, torchrun's (worker_spec.h) with its
 * error file `error_file`; *added holds the strings *envp points to, both the caller's. */
int ddp_agent_worker_env(ddp_agent_t *a, const ddp_worker_t *w, const char *error_file,
                         char ***added, char ***envp);

/* agent_warm.c (--warm-restarts): whether it applies (where the launcher is a child
 * subreaper), said where it cannot; the zygote, once the first attempt's workers run (or
 * as a launcher that may be a hot spare joins), and its looks while it imports (again
 * after a SIGCHLD has started another: ddp_agent_watch_zygote); starting a worker (forked
 * from the zygote where it serves, else cold, why said once an attempt; 0 or -errno). */
void ddp_agent_warm_restarts(ddp_agent_t *a);
void ddp_agent_start_zygote(ddp_agent_t *a);
void ddp_agent_watch_zygote(ddp_agent_t *a);
int ddp_agent_spawn_worker(ddp_agent_t *a, ddp_worker_t *w, const ddp_spawn_t *spec);

/* agent_orphans.c: this launcher made a child subreaper (a->subreaper where it could);
 * what it adopted reaped, after a SIGCHLD; at a group's end, once every worker has been
 * reaped, the processes the workers left in sessions or process groups of their own:
 * those newly found get SIGTERM (named, with the `grace` that follows) or, `kill_now`,
 * SIGKILL, as do those found before (which outlived the grace); returns how many are
 * left, reaped ones aside (0 where this launcher is no subreaper). */
void ddp_agent_subreaper(ddp_agent_t *a);
void ddp_agent_reap_adopted(ddp_agent_t *a);
int ddp_agent_escaped(ddp_agent_t *a, bool kill_now, double grace);

/* agent.c: `sig` to the process group of worker i, a failure other than its being gone
 * warned of; 0 or -errno. */
int ddp_agent_signal_worker(ddp_agent_t *a, int i, int sig);
/* Signals the group of every running worker. */
void ddp_agent_signal_running(ddp_agent_t *a, int sig);

/* agent_pause.c: Ctrl-Z (SIGTSTP) stops the running workers with the launcher, and they
 * continue with it; its handle made (by setup_loop) and started, unless SIGTSTP was
 * ignored when ddp-launch started (0 or a libuv error). */
void ddp_agent_pause_init(ddp_agent_t *a);
int ddp_agent_pause_start(ddp_agent_t *a);
/* Node `who` of the job was stopped (`pause`, Ctrl-Z there) or continued: this node's
 * workers too, unless that node is this one (`own`: its Ctrl-Z stops them itself). */
void ddp_agent_remote_pause(ddp_agent_t *a, bool pause, bool own, const char *who);

#endif
