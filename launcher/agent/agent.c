/* The worker group's lifecycle on one libuv loop (see agent.h).
 *
 * Its states and what moves it, each a loop event (SIGCHLD reaped by pid, never
 * waitpid(-1); a forwarded signal; the grace timer; a rendezvous command):
 *
 *   state     event                                        next
 *   --------  -------------------------------------------  ------------------------------
 *   (start)   one node                                     RUNNING (attempt 0), or
 *                                                          CHECKING where health checks apply
 *   (start)   several nodes                                WAITING
 *   CHECKING  the checkpoints read (after a failure: the   CHECKING (the health checks; with
 *             step every rank holds)                       several nodes, the step agreed
 *                                                          across them), or RUNNING
 *   CHECKING  several nodes: the step agreed, or not       RUNNING (round R's workers)
 *   CHECKING  several nodes: rendezvous STOP               WAITING (the step's reading ended)
 *   CHECKING  the checks passed                            RUNNING (the attempt's workers)
 *   CHECKING  a check failed, or a signal (the checks are  DONE (no worker started)
 *             ended at once)
 *   WAITING   rendezvous START (round R's world)           RUNNING (attempt R), or CHECKING
 *                                                          (R > 0: the checkpoints' step)
 *   WAITING   rendezvous FINISH, or a forwarded signal     DONE
 *   RUNNING   a worker failed, a signal, STOP, FINISH      STOPPING (signal the groups, arm
 *                                                          the grace timer)
 *   RUNNING   every worker succeeded                       DONE, or WAITING (several nodes)
 *   STOPPING  the grace timer fires                        STOPPING (SIGKILL to the groups)
 *   STOPPING  the last worker ended: a restart left (one   RUNNING (attempt N+1), or
 *             node)                                        CHECKING (its in-memory
 *                                                          checkpoints, its health checks)
 *   STOPPING  the last worker ended, several nodes, after  WAITING (the rendezvous decides)
 *             a failure here or elsewhere
 *   STOPPING  the last worker ended otherwise              DONE
 *   DONE      (handles closing; uv_run returns)            -
 *
 * Worker output is read as its pipes become readable (output.c), throughout. A hang
 * report (agent/hang_watch.c) runs inside RUNNING: the stop a failure would begin waits for
 * it. */
#include "agent/agent.h"

#include "agent/checkpoint_common.h"
#include "agent/checkpoints.h"
#include "agent/end_notes.h"
#include "agent/group.h"
#include "agent/hang_watch.h"
#include "agent/leftovers.h"
#include "agent/pause.h"
#include "agent/placement.h"
#include "agent/policy.h"
#include "agent/progress_watch.h"
#include "agent/store_host.h"
#include "agent/store_waits.h"
#include "agent/worker_start.h"
#include "diagnose/report.h"
#include "diagnose/stacks.h"
#include "env.h"
#include "error.h"
#include "fanout/session.h"
#include "host/health.h"
#include "host/signals.h"
#include "io.h"
#include "output/events.h"
#include "output/logs.h"
#include "output/output.h"
#include "parse.h"
#include "rdzv/coord.h"
#include "rdzv/rdzv.h"
#include "rdzv/record.h"
#include "spawn/guard.h"
#include "host/proc.h"
#include "spawn/worker_env.h"
#include "store/server.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <uv.h>

extern char **environ;

/* How the attempt's first failure waits before it stops the group (first_failure). */
typedef enum {
    FIRST_FAILURE_NOW,    /* no wait: stopped at once */
    FIRST_FAILURE_BLAMES, /* for a local rank it blames to end on its own (BLAME_GRACE_S) */
    FIRST_FAILURE_SIGNAL, /* for a signal this launcher handles to come here too */
} first_failure_wait_t;

typedef struct ddp_agent_s {
    ddp_group_t g; /* the face the parts see (agent/group.h); written here only */
    /* The parts, each with its own state (their headers). */
    ddp_pause_t *pause;
    ddp_hang_watch_t *hang;
    ddp_progress_watch_t *progress;
    ddp_store_waits_t *waits;
    ddp_end_notes_t *notes;
    ddp_worker_start_t *start;
    ddp_leftovers_t *leftovers;
    ddp_policy_t *policy;
    ddp_checkpoints_t *checkpoints;
    ddp_checkpoint_common_t *common; /* CHECKING, several nodes: the step being agreed */
    int scanned_for;                 /* the attempt (round) the last checkpoints' scan began for */

    uv_loop_t loop;
    uv_signal_t sigchld;
    ddp_session_t session; /* a node --hosts started: its ssh session's end */
    uv_signal_t forwarded[DDP_MAX_SIGNALS];
    uv_signal_t unforwarded[DDP_MAX_SIGNALS]; /* the other signals that would end us */
    uv_signal_t passed[DDP_MAX_SIGNALS];      /* --forward-signals: passed, nothing stopped */
    int unforwarded_sig[DDP_MAX_SIGNALS];
    int nunforwarded;
    uv_timer_t kill_timer;
    /* The attempt's first failure (failures[blame_first]) blames a local rank that still
     * runs (a peer whose call differed, say), or is a death by a signal this launcher
     * handles: the stop waits briefly (first_failure). */
    uv_timer_t blame_timer;
    first_failure_wait_t first_wait;
    size_t blame_first;
    bool env_compared;    /* this node's --env values were held against node 0's */
    bool ran_a_round;     /* this launcher has been in a round (else, in a later one: a spare) */
    bool stop_notice_due; /* the kill timer says first that the workers have not exited */
    size_t failures_before_stop; /* of the failures, recorded before the current stop began */
    ddp_guard_t guard;
    ddp_output_t output;
    char *base_dir;
    bool base_created;
    ddp_buf_t remote_failures;   /* serving the store: the other nodes' failures (report.h) */
    bool served_store;           /* this launcher's coordinator finished the job's rendezvous */
    bool store_leaves;           /* etcd: serving the store, it leaves a job that goes on */
    ddp_rdzv_coord_t *lingering; /* finished: the coordinator the others still read from */
    bool linger_ignored;         /* lingering: the job's own signal came once more, ignored */
    bool etcd_closing;           /* finished: etcd's side still ends the job's keys */
    bool signals_closed;         /* finished: the signal handles closed */
    ddp_health_run_t *health;    /* CHECKING: the checks that run */
    int exit_code;
    bool loop_ready;  /* the loop was initialised: agent_free closes it */
    bool parts_ready; /* made on the loop (new_parts): closed by finish() or agent_free */
    /* Where the job's store is (--rdzv-backend=etcd), and the configuration the agent runs
     * with (g.cfg): agent/placement.h. */
    ddp_placement_t *placement;
} ddp_agent_t;

static ddp_agent_t *agent_of(ddp_group_t *g)
{
    return (ddp_agent_t *)(void *)((char *)g - offsetof(ddp_agent_t, g));
}

static const char *signame(int sig, char *buf, size_t cap)
{
    return ddp_signal_name(sig, buf, cap);
}

/* "0, 2, 3" for the local ranks of the running workers (at most 16 named). */
static void running_ranks(const ddp_agent_t *a, char *buf, size_t cap)
{
    size_t len = 0;
    int named = 0;
    buf[0] = '\0';
    for (int i = 0; i < a->g.nworkers && len < cap; i++) {
        if (!a->g.workers[i].running)
            continue;
        if (named == 16) {
            snprintf(buf + len, cap - len, ", ...");
            break;
        }
        int n = snprintf(buf + len, cap - len, "%s%d", named ? ", " : "", i);
        len += n > 0 ? (size_t)n : 0;
        named++;
    }
}

/* How long the loop waits for the console writer to catch up before it says what became of
 * a worker: the worker's last lines come first on a console that keeps up; one that is
 * stalled (a pager, a full pipe) is not waited for longer. */
#define CONSOLE_CATCH_UP_S 0.5

/* Reads what the worker's pipes hold, closes them when `close_after`, and lets the console
 * catch up with them. */
static void worker_drain(ddp_agent_t *a, ddp_worker_t *w, bool close_after)
{
    /* Each call may close (and NULL) the worker's pointer: read both first. */
    ddp_stream_t *out = w->out, *err = w->err;
    ddp_output_drain(out, close_after);
    ddp_output_drain(err, close_after);
    ddp_output_flush(&a->output, CONSOLE_CATCH_UP_S);
}

/* The node_unhealthy event: this node failed its health check (`why`). */
static void unhealthy_event(ddp_agent_t *a, const char *why)
{
    ddp_buf_t fields = DDP_BUF_INIT;
    ddp_events_str(&fields, "reason", why);
    ddp_events_emit(&a->g.events, "node_unhealthy", &fields);
    ddp_buf_free(&fields);
}

/* Stopping and finishing. */

static void swallow_signal(int sig)
{
    (void)sig;
}

/* Closing a signal's handle gives it back its default action, which for most of them
 * ends the launcher: between the job's end and exit (the last output, the report) that
 * would lose both and the exit status (Slurm signals every node's launcher, and the
 * next may come now). The first of each is swallowed instead; SA_RESETHAND: a second one
 * acts as it would. */
static void close_signal_handle(uv_signal_t *h)
{
    int sig = h->signum; /* 0 once closed, or where it never started */
    uv_close((uv_handle_t *)h, NULL);
    if (sig <= 0)
        return;
    struct sigaction sa = {.sa_handler = swallow_signal, .sa_flags = SA_RESTART | SA_RESETHAND};
    sigemptyset(&sa.sa_mask);
    (void)sigaction(sig, &sa, NULL);
}

static void close_signal_handles(ddp_agent_t *a)
{
    a->signals_closed = true;
    for (int i = 0; i < a->g.cfg->nsignals; i++)
        close_signal_handle(&a->forwarded[i]);
    for (int i = 0; i < a->nunforwarded; i++)
        close_signal_handle(&a->unforwarded[i]);
    for (int i = 0; i < a->g.cfg->npassed; i++)
        close_signal_handle(&a->passed[i]);
}

/* Finished: the signal handles close once neither the store the others read from nor
 * etcd's side is left (a signal meanwhile cuts either short). */
static void end_signals(ddp_agent_t *a)
{
    if (a->lingering == NULL && a->g.coord == NULL && !a->etcd_closing && !a->signals_closed)
        close_signal_handles(a);
}

static void on_store_closed(void *ctx)
{
    ddp_agent_t *a = ctx;
    a->lingering = NULL;
    end_signals(a);
}

static void on_placement_closed(void *ctx)
{
    ddp_agent_t *a = ctx;
    a->etcd_closing = false;
    end_signals(a);
}

/* The parts' handles, with the loop's others. */
static void close_parts(ddp_agent_t *a)
{
    if (a->pause != NULL)
        ddp_pause_close(a->pause);
    if (a->hang != NULL)
        ddp_hang_watch_close(a->hang);
    if (a->progress != NULL)
        ddp_progress_watch_close(a->progress);
    if (a->waits != NULL)
        ddp_store_waits_close(a->waits);
    if (a->start != NULL)
        ddp_worker_start_close(a->start);
    if (a->leftovers != NULL)
        ddp_leftovers_close(a->leftovers);
    if (a->notes != NULL)
        ddp_end_notes_close(a->notes);
    a->parts_ready = false;
}

static void finish(ddp_agent_t *a)
{
    a->g.state = DDP_AGENT_DONE;
    if (a->health != NULL) /* its processes end now; the loop runs until its thread returns */
        ddp_health_cancel(a->health);
    a->health = NULL;
    ddp_checkpoints_cancel(a->checkpoints); /* a scan under way: its thread returns at once */
    ddp_checkpoint_common_cancel(a->common);
    a->common = NULL;
    ddp_rdzv_close(a->g.rdzv);
    if (a->store_leaves) {
        /* Its store closes with no word of an end (once etcd has the round record, the
         * placement closes it): the other launchers take it as lost and go on at the store
         * of the launcher etcd elects next. */
        ddp_rdzv_coord_close(a->g.coord);
        a->g.coord = NULL;
    }
    a->etcd_closing = a->placement != NULL; /* (its word may come at once) */
    ddp_placement_close(a->placement, a->store_leaves, on_placement_closed, a);
    if (a->g.coord != NULL) {
        /* The other nodes read how the job ended from our store: it stays until they
         * have left, up to close_timeout, whatever the outcome (a node slow to read a
         * failure would otherwise see only the store gone, and stop its workers with
         * SIGTERM instead of the job's signal). Our signal handlers stay as long: Slurm
         * signals every node's launcher, and this one may have stopped already for
         * another's news of the same signal. */
        a->lingering = a->g.coord;
        a->g.coord = NULL;
        a->served_store = true;
        ddp_rdzv_coord_finish(a->lingering, a->g.cfg->rdzv_conf.close_timeout,
                              a->g.stop_reason == DDP_STOP_SIGNAL    ? a->g.stop_signal
                              : a->exit_code == DDP_EXIT_NO_PROGRESS ? -DDP_EXIT_NO_PROGRESS
                                                                     : 0,
                              &a->remote_failures, on_store_closed, a);
    } else {
        /* The handlers first: a test (or Slurm) that sees the store's port closed may
         * signal at once, and the first signal is then the one swallowed. (Not while etcd's
         * side still ends the job's keys: a signal cuts that short.) */
        end_signals(a);
        ddp_store_server_close(a->g.store);
    }
    a->g.store = NULL;
    uv_close((uv_handle_t *)&a->sigchld, NULL);
    uv_close((uv_handle_t *)&a->kill_timer, NULL);
    uv_close((uv_handle_t *)&a->blame_timer, NULL);
    close_parts(a);
    ddp_output_close_handles(&a->output);
    ddp_session_close(&a->session);
    ddp_file_timer_close(a->g.file_timer);
}

/* The stop's signal. A worker stopped (SIGSTOP, Ctrl-Z) that handles it would keep it
 * pending until the grace period ends: SIGCONT after the signal, so it acts on it now.
 * Only to a worker that was stopped before the signal: a SIGCONT discards a pending
 * SIGSTOP, and a worker that acts on the signal at once may be stopping itself with one
 * (ASan's leak check at exit attaches to its threads with ptrace: a SIGCONT cancelled
 * that attach, and the worker spun until the SIGKILL). */
static void signal_to_stop(ddp_agent_t *a, int sig)
{
    for (int i = 0; i < a->g.nworkers; i++) {
        if (!a->g.workers[i].running)
            continue;
        bool stopped = sig != SIGKILL && sig != SIGCONT && ddp_proc_stopped(a->g.workers[i].pid);
        (void)ddp_group_signal_worker(&a->g, i, sig);
        if (stopped)
            (void)ddp_group_signal_worker(&a->g, i, SIGCONT);
    }
}

/* The launcher signals its running workers: `sig`, why, to how many. */
static void stop_event(const ddp_agent_t *a, const char *name, int sig)
{
    static const char *const reasons[] = {"none",         "failure", "signal",
                                          "launch_error", "remote",  "aborted"};
    ddp_buf_t fields = DDP_BUF_INIT;
    char sig_name[32];
    ddp_events_str(&fields, "signal", signame(sig, sig_name, sizeof sig_name));
    ddp_events_str(&fields, "reason",
                   (size_t)a->g.stop_reason < sizeof reasons / sizeof reasons[0]
                       ? reasons[a->g.stop_reason]
                       : "?");
    ddp_events_int(&fields, "attempt", a->g.attempt);
    ddp_events_int(&fields, "workers", a->g.nrunning);
    ddp_events_emit(&a->g.events, name, &fields);
    ddp_buf_free(&fields);
}

/* A stop for a signal (Ctrl-C) that the workers have not obeyed after this long is
 * said, with what to do, rather than waited out in silence. */
#define STOP_NOTICE_S 2.0

static void on_kill_timer(uv_timer_t *timer)
{
    ddp_agent_t *a = timer->data;
    char ranks[160], name[32];
    if (a->g.nrunning == 0)
        return;
    running_ranks(a, ranks, sizeof ranks);
    const char *plural = a->g.nrunning == 1 ? "" : "s";
    if (a->stop_notice_due) {
        double left = a->g.cfg->shutdown_timeout - STOP_NOTICE_S;
        a->stop_notice_due = false;
        ddp_log_warn(a->g.log,
                     "%d worker(s) have not exited yet (local rank%s %s): SIGKILL in %g s, or "
                     "now on a second signal (%s again: a second Ctrl-C)",
                     a->g.nrunning, plural, ranks, left,
                     signame(a->g.stop_signal, name, sizeof name));
        uv_timer_start(&a->kill_timer, on_kill_timer, (uint64_t)(left * 1000.0), 0);
        return;
    }
    ddp_log_warn(a->g.log,
                 "%d worker(s) still running %g s after the stop signal (local rank%s %s): "
                 "sending SIGKILL to %s process group%s",
                 a->g.nrunning, a->g.cfg->shutdown_timeout, plural, ranks,
                 a->g.nrunning == 1 ? "its" : "their", plural);
    a->g.sent_sigkill = true;
    stop_event(a, "sigkill_sent", SIGKILL);
    ddp_group_signal_running(&a->g, SIGKILL);
}

/* The stop of the running group: `sig` to the workers' groups, then the grace timer. */
static void begin_stop(ddp_agent_t *a, int sig, ddp_stop_reason_t reason)
{
    char ranks[160], name[32];
    ddp_end_notes_stop(a->notes);
    ddp_hang_watch_stop(a->hang);
    ddp_progress_watch_stop(a->progress);
    ddp_store_waits_stop(a->waits);
    uv_timer_stop(&a->blame_timer);
    a->first_wait = FIRST_FAILURE_NOW;
    a->g.state = DDP_AGENT_STOPPING;
    a->g.stop_reason = reason;
    a->g.sent_signal = sig;
    a->failures_before_stop = a->g.nfailures;
    running_ranks(a, ranks, sizeof ranks);
    const char *plural = a->g.nrunning == 1 ? "" : "s";
    ddp_log_warn(a->g.log,
                 "stopping %d worker(s): sending %s to the process group%s of local rank%s %s; "
                 "SIGKILL after %g s",
                 a->g.nrunning, signame(sig, name, sizeof name), plural, plural, ranks,
                 a->g.cfg->shutdown_timeout);
    signal_to_stop(a, sig);
    stop_event(a, "stop_sent", sig);
    double wait = a->g.cfg->shutdown_timeout;
    a->stop_notice_due = reason == DDP_STOP_SIGNAL && wait > 2 * STOP_NOTICE_S;
    if (a->stop_notice_due)
        wait = STOP_NOTICE_S;
    uv_timer_start(&a->kill_timer, on_kill_timer, (uint64_t)(wait * 1000.0), 0);
}

/* Forgets the failures of workers that `sig` killed: it was the job's stop signal, sent
 * to every process at once (the launcher's came a moment later), not their failure. */
static void forget_killed_by(ddp_agent_t *a, int sig)
{
    size_t kept = 0;
    for (size_t i = 0; i < a->g.nfailures; i++) {
        if (a->g.failures[i].exitcode == -sig)
            ddp_failure_free(&a->g.failures[i]);
        else
            a->g.failures[kept++] = a->g.failures[i];
    }
    a->g.nfailures = kept;
}

static void clear_failures(ddp_agent_t *a)
{
    for (size_t i = 0; i < a->g.nfailures; i++)
        ddp_failure_free(&a->g.failures[i]);
    a->g.nfailures = 0;
    a->failures_before_stop = 0;
}

static int group_start(ddp_agent_t *a);
static int start_workers(ddp_agent_t *a);

static void group_ended_measured(ddp_agent_t *a);
static void group_ended_after_leftovers(ddp_agent_t *a);

/* Every worker of the attempt has ended: clean up the groups and decide what next. */
static void group_ended(ddp_agent_t *a)
{
    uv_timer_stop(&a->kill_timer);
    ddp_end_notes_stop(a->notes);
    uv_timer_stop(&a->blame_timer);
    a->first_wait = FIRST_FAILURE_NOW;
    ddp_hang_watch_stop(a->hang);
    ddp_progress_watch_stop(a->progress);
    ddp_store_waits_stop(a->waits);
    if (ddp_policy_measure(a->policy))
        return; /* ops->progress_read goes on */
    group_ended_measured(a);
}

/* The group's end once --progress-file was read: what its workers left. */
static void group_ended_measured(ddp_agent_t *a)
{
    if (ddp_leftovers_end(a->leftovers))
        return; /* ops->leftovers_done goes on */
    group_ended_after_leftovers(a);
}

/* A multi-node job has one failure report, printed by the launcher serving the store: this
 * node's failures go there through the rendezvous. */
static void post_failures(ddp_agent_t *a)
{
    ddp_buf_t lines = DDP_BUF_INIT;
    int err = 0;
    for (size_t i = 0; i < a->g.nfailures && err == 0; i++)
        err = ddp_failure_to_json(&a->g.failures[i], a->g.host, &lines);
    if (err == 0)
        ddp_rdzv_post_failures(a->g.rdzv, ddp_buf_str(&lines));
    ddp_buf_free(&lines);
}

/* Serving the store: the other nodes' failures join this node's in the job's report (a
 * line that is not one is said and skipped). */
static void merge_remote_failures(ddp_agent_t *a)
{
    const char *p = a->remote_failures.data, *end = p + a->remote_failures.len;
    while (p != NULL && p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t len = nl != NULL ? (size_t)(nl - p) : (size_t)(end - p);
        ddp_failure_t f, *grown;
        if (len > 0 && ddp_failure_from_json(p, len, &f) != 0) {
            ddp_log_warn(a->g.log, "another node's failure record is not one: '%.80s'", p);
        } else if (len > 0 &&
                   (grown = realloc(a->g.failures, (a->g.nfailures + 1) * sizeof *grown)) != NULL) {
            a->g.failures = grown;
            a->g.failures[a->g.nfailures++] = f;
        } else if (len > 0) {
            ddp_failure_free(&f);
        }
        p = nl != NULL ? nl + 1 : NULL;
    }
}

static void start_rendezvous(ddp_agent_t *a);

/* What the policy decided (agent/policy.h), done. */
static void act_on(ddp_agent_t *a, const ddp_policy_decision_t *d)
{
    switch (d->kind) {
    case DDP_POLICY_GO_ON:
        a->g.state = DDP_AGENT_WAITING;
        if (a->g.stop_reason == DDP_STOP_NONE)
            ddp_end_notes_nodes_wait(a->notes);
        ddp_rdzv_post(
            a->g.rdzv,
            a->g.stop_reason == DDP_STOP_NONE ? DDP_RDZV_EV_SUCCEEDED : DDP_RDZV_EV_STOPPED, NULL);
        ddp_placement_rejoin(a->placement);
        return;
    case DDP_POLICY_RESTART: {
        a->g.attempt++;
        ddp_log_warn(a->g.log, "restarting the workers as attempt %d (restart %d of %d)",
                     a->g.attempt, a->g.attempt, a->g.cfg->max_restarts);
        ddp_buf_t fields = DDP_BUF_INIT;
        ddp_events_int(&fields, "attempt", a->g.attempt);
        ddp_events_int(&fields, "max_restarts", a->g.cfg->max_restarts);
        ddp_events_emit(&a->g.events, "restart", &fields);
        ddp_buf_free(&fields);
        clear_failures(a);
        /* PyTorch 2.x keys have no attempt prefix: a restarted worker must not read the
         * failed attempt's values (a stale NCCL unique id, say). */
        size_t cleared = ddp_store_clear(ddp_store_server_store(a->g.store), DDP_STORE_KEEP);
        ddp_log_debug(a->g.log, "cleared %zu key(s) of attempt %d from the store", cleared,
                      a->g.attempt - 1);
        /* On failure group_start stops what it started or finishes the agent. */
        (void)group_start(a);
        return;
    }
    case DDP_POLICY_LEAVE:
        /* The store's host is told why (it says so), and this node prints its own failure
         * report. (Where it is the store's host, the job ends with it; but with etcd it
         * goes on at the store of the next launcher etcd elects.) */
        if (a->g.coord == NULL)
            ddp_rdzv_post_leave(a->g.rdzv, d->why);
        else if ((a->store_leaves = a->g.cfg->rdzv_backend == DDP_RDZV_ETCD))
            ddp_rdzv_coord_leaves(a->g.coord, d->why); /* the round's failure counted */
        break;
    case DDP_POLICY_END:
        if (d->why[0] != '\0' && a->g.rdzv != NULL) /* every node's end, through the rendezvous */
            ddp_rdzv_post_end(a->g.rdzv, d->status, d->why);
        break;
    }
    a->exit_code = d->status;
    finish(a);
}

/* The rest of the group's end, once nothing of it is left. */
static void group_ended_after_leftovers(ddp_agent_t *a)
{
    /* A signal during the leftovers' grace began a stop with nobody left to stop: its
     * timer must not hold the loop. */
    uv_timer_stop(&a->kill_timer);
    bool again = ddp_leftovers_reclaimed(a->leftovers); /* back after the GPUs' wait */
    if (!again) {
        ddp_leftovers_remove_shm(a->leftovers);
        if (a->g.rdzv != NULL && a->g.nfailures > 0)
            post_failures(a);
    }
    for (int i = 0; i < a->g.nworkers; i++) {
        ddp_worker_t *w = &a->g.workers[i];
        if (w->pid <= 0)
            continue;
        (void)ddp_guard_forget(&a->guard, w->pid); /* again if forgotten at reap: a no-op */
        worker_drain(a, w, true);
        free(w->prefix);
        free(w->error_file);
        w->prefix = w->error_file = NULL;
        w->pid = 0;
    }
    ddp_policy_decision_t next;
    ddp_policy_next(a->policy, &next);
    /* A failed attempt that would go on is judged first: the job may not. */
    if (!again && next.after_failure &&
        ddp_policy_judge(a->policy, ddp_progress_watch_take_straggler(a->progress), &next)) {
        act_on(a, &next);
        return;
    }
    /* Before the job goes on, the GPUs' memory: ops->leftovers_done comes back here. */
    if (ddp_leftovers_reclaim(a->leftovers, next.after_failure))
        return;
    act_on(a, &next);
}

/* Workers. */

/* A worker's event: its attempt, ranks and pid, then `more` (may be NULL). */
static void worker_event(const ddp_agent_t *a, const ddp_worker_t *w, const char *name,
                         const ddp_buf_t *more)
{
    ddp_buf_t fields = DDP_BUF_INIT;
    ddp_events_int(&fields, "attempt", a->g.attempt);
    ddp_events_int(&fields, "rank", w->rank);
    ddp_events_int(&fields, "local_rank", w->local_rank);
    ddp_events_int(&fields, "pid", w->pid);
    if (more != NULL)
        ddp_buf_append(&fields, more->data, more->len);
    ddp_events_emit(&a->g.events, name, &fields);
    ddp_buf_free(&fields);
}

/* The last line worker `w` wrote where the launcher reads it, stderr's else stdout's, in
 * buf[cap]; false when there is none. */
static bool last_line(const ddp_worker_t *w, char *buf, size_t cap)
{
    return ddp_recent_line(&w->recent[1], buf, cap)[0] != '\0' ||
           ddp_recent_line(&w->recent[0], buf, cap)[0] != '\0';
}

/* Worker `w` exited 0 (at `now`, the wall clock's): the attempt's first to, while it runs,
 * is remembered, and who waits for whom is said now and then (agent/end_notes.h). */
static void worker_succeeded(ddp_agent_t *a, ddp_worker_t *w, double now)
{
    ddp_log_debug(a->g.log, "worker rank %d (local rank %d, pid %d) finished", w->rank,
                  w->local_rank, (int)w->pid);
    w->succeeded = true;
    if (a->g.state != DDP_AGENT_RUNNING || a->g.first_succeeded >= 0)
        return;
    a->g.first_succeeded = ddp_clock_mono();
    a->g.first_succeeded_wall = now;
    if (a->g.nrunning > 0)
        ddp_end_notes_first_succeeded(a->notes);
}

static void worker_ended(ddp_agent_t *a, ddp_worker_t *w, int status, double now)
{
    char what[64];
    w->running = false;
    a->g.nrunning--;
    ddp_buf_t fields = DDP_BUF_INIT;
    if (WIFEXITED(status))
        ddp_events_int(&fields, "exit_code", WEXITSTATUS(status));
    else
        ddp_events_str(&fields, "signal", signame(WTERMSIG(status), what, sizeof what));
    ddp_events_str(&fields, "while", a->g.state == DDP_AGENT_RUNNING ? "running" : "stopping");
    /* A group with nobody left may be reused by an unrelated process at once: the guard
     * forgets it now, not when the whole attempt ends (a group with members left is
     * forgotten then, after kill_leftovers; while it has members its number is taken). */
    if (kill(-w->pid, 0) != 0 && errno == ESRCH)
        (void)ddp_guard_forget(&a->guard, w->pid);
    /* What the worker printed before it died comes before what we say about it. */
    worker_drain(a, w, false);
    char line[DDP_LAST_LINE_MAX + 1];
    bool has_line = last_line(w, line, sizeof line);
    if (has_line && status != 0)
        ddp_events_str(&fields, "last_line", line);
    worker_event(a, w, "worker_exited", &fields);
    ddp_buf_free(&fields);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
        worker_succeeded(a, w, now);
        return;
    }
    ddp_failure_t f;
    if (ddp_failure_init(&f, w->rank, w->local_rank, w->pid, status, now, w->error_file) != 0) {
        ddp_log_error(a->g.log, "out of memory while recording a worker failure");
        return;
    }
    if (has_line)
        (void)ddp_failure_set_last_line(&f, line, strlen(line)); /* no memory: no line */
    char *oom = ddp_end_notes_oom_message(a->notes, w, status);
    if (oom != NULL && f.message == NULL) /* the report's line for it */
        f.message = oom;
    else
        free(oom);
    if (w->timer_expired != NULL && f.message == NULL && WIFSIGNALED(status) &&
        asprintf(&f.message, "its watchdog timer '%s' expired (TORCHELASTIC_ENABLE_FILE_TIMER)",
                 w->timer_expired) < 0)
        f.message = NULL;
    ddp_stop_state_t stop = {
        .stopping = a->g.state != DDP_AGENT_RUNNING,
        .for_failure = a->g.state == DDP_AGENT_STOPPING && a->g.stop_reason == DDP_STOP_FAILURE,
        .sent_signal = a->g.sent_signal,
        .sent_sigkill = a->g.sent_sigkill,
        .recorded_before = a->failures_before_stop,
    };
    /* A rank the hang named, ended by its stop: the report's failure (nothing else is). */
    const char *hung = ddp_hang_watch_named(a->hang, w->local_rank);
    if (hung != NULL) {
        free(f.message);
        f.message = strdup(hung); /* NULL: no memory, no message */
    }
    if (hung == NULL && !ddp_report_own_failure(&f, status, &stop, a->g.failures, a->g.nfailures)) {
        /* Ended by our stop signal (or exiting on its own meanwhile): not a root cause. */
        ddp_log_debug(a->g.log, "worker rank %d (pid %d) %s", w->rank, (int)w->pid,
                      ddp_failure_describe(&f, what, sizeof what));
        w->stopped = true;
        if (f.message != NULL) /* it wrote its own error before our signal came */
            w->stopped_error = ddp_failure_summary(f.message);
        ddp_failure_free(&f);
        return;
    }
    int blamer = ddp_report_blamer(a->g.failures, a->g.nfailures, f.rank);
    if (stop.stopping && blamer >= 0 && f.message == NULL && WIFSIGNALED(status)) {
        char *said = ddp_failure_summary(
            a->g.failures[blamer].message != NULL ? a->g.failures[blamer].message : "");
        if (asprintf(&f.message, "stopped by ddp-launch (%s) after rank %d's failure named it: %s",
                     signame(WTERMSIG(status), what, sizeof what), a->g.failures[blamer].rank,
                     said != NULL ? said : "") < 0)
            f.message = NULL;
        free(said);
    }
    char core[400], cwd[PATH_MAX];
    ddp_core_dump_note(status, w->pid, NULL, -1, getcwd(cwd, sizeof cwd) ? cwd : ".", core,
                       sizeof core);
    ddp_log_error(a->g.log, "worker rank %d (local rank %d, pid %d) %s%s", w->rank, w->local_rank,
                  (int)w->pid, ddp_failure_describe(&f, what, sizeof what), core);
    a->g.failures[a->g.nfailures++] = f;
}

/* The attempt's first failure (failures[first]) ends the round: on every node of a
 * multi-node job. */
static void fail_round(ddp_agent_t *a, size_t first)
{
    if (a->g.rdzv != NULL && first < a->g.nfailures) {
        char what[64], message[320];
        const ddp_failure_t *f = &a->g.failures[first];
        /* What it said, so every node's line names the cause, not only its exit. */
        char *said = ddp_failure_said(f);
        snprintf(message, sizeof message, "worker rank %d (local rank %d, pid %d) %s%s%.160s",
                 f->rank, f->local_rank, (int)f->pid, ddp_failure_describe(f, what, sizeof what),
                 said != NULL ? ": " : "", said != NULL ? said : "");
        free(said);
        ddp_rdzv_post(a->g.rdzv, DDP_RDZV_EV_FAILED, message);
    }
    if (a->g.nrunning > 0)
        begin_stop(a, SIGTERM, DDP_STOP_FAILURE);
    else
        a->g.stop_reason = DDP_STOP_FAILURE;
}

/* How long the stop waits for a blamed local rank's own end (it noticed the same
 * fault a moment later: a call that differs is seen by every rank of the board). */
#define BLAME_GRACE_S 3.0

/* Whether a failure recorded so far blames a local rank that is still running (the
 * first may blame one that has ended, which blames one that runs). */
static bool blames_running(const ddp_agent_t *a)
{
    for (size_t k = 0; k < a->g.nfailures; k++) {
        for (int i = 0; a->g.failures[k].peer_rank >= 0 && i < a->g.nworkers; i++) {
            if (a->g.workers[i].rank == a->g.failures[k].peer_rank && a->g.workers[i].running)
                return true;
        }
    }
    return false;
}

/* How long a worker's death by a signal this launcher handles (SIGTERM, say) that it did
 * not send waits for the launcher's own: Slurm's scancel and systemd's stop signal every
 * process of the job at once, and the workers' deaths may be seen first. Without the wait
 * the job restarted, and the new workers were stopped a moment later. */
#define SIGNAL_GRACE_S 0.5

/* Whether failure `f` is a worker killed by one of the signals this launcher handles. */
static bool killed_by_handled_signal(const ddp_agent_t *a, const ddp_failure_t *f)
{
    for (int i = 0; f->exitcode < 0 && i < a->g.cfg->nsignals; i++)
        if (a->g.cfg->signals[i] == -f->exitcode)
            return true;
    return false;
}

static void end_blame_wait(ddp_agent_t *a)
{
    uv_timer_stop(&a->blame_timer);
    a->first_wait = FIRST_FAILURE_NOW;
    fail_round(a, a->blame_first);
}

static void on_blame_timer(uv_timer_t *timer)
{
    ddp_agent_t *a = timer->data;
    if (a->first_wait != FIRST_FAILURE_NOW && a->g.state == DDP_AGENT_RUNNING) {
        if (a->first_wait == FIRST_FAILURE_BLAMES)
            ddp_log_info(a->g.log,
                         "a rank another's failure blames has not ended on its own in %g s",
                         BLAME_GRACE_S);
        end_blame_wait(a);
        if (a->g.nrunning == 0 &&
            !ddp_hang_watch_reporting(a->hang)) /* killed, all, by that signal */
            group_ended(a);
    }
}

/* The attempt's first failure, failures[first]: its stop, unless it blames a local rank
 * that still runs (then that rank's own end first, briefly), or a signal killed it that
 * this launcher may be receiving too (then that, briefly). */
static void first_failure(ddp_agent_t *a, size_t first)
{
    bool blames = blames_running(a);
    if (!blames && !killed_by_handled_signal(a, &a->g.failures[first])) {
        fail_round(a, first);
        return;
    }
    a->first_wait = blames ? FIRST_FAILURE_BLAMES : FIRST_FAILURE_SIGNAL;
    a->blame_first = first;
    uv_timer_start(&a->blame_timer, on_blame_timer,
                   (uint64_t)((blames ? BLAME_GRACE_S : SIGNAL_GRACE_S) * 1000), 0);
}

static void on_sigchld(uv_signal_t *handle, int signum)
{
    (void)signum;
    ddp_agent_t *a = handle->data;
    size_t failures_before = a->g.nfailures;
    double now = ddp_clock_wall();
    ddp_worker_start_reap(a->start);
    /* A subreaper's, or a container's init's (pid 1: torchrun as a pod's command): the
     * orphans of a worker that died (its DataLoader processes) are ours to reap. */
    if (a->g.subreaper || getpid() == 1)
        ddp_leftovers_reap_adopted(a->leftovers);
    if (a->g.state == DDP_AGENT_DONE || a->g.state == DDP_AGENT_WAITING ||
        a->g.state == DDP_AGENT_CHECKING)
        return;
    /* Reap every worker that has ended (signals coalesce), then act once. */
    for (int i = 0; i < a->g.nworkers; i++) {
        ddp_worker_t *w = &a->g.workers[i];
        int status;
        pid_t r;
        struct rusage usage = {0};
        if (!w->running)
            continue;
        do
            r = wait4(w->pid, &status, WNOHANG, &usage);
        while (r < 0 && errno == EINTR);
        if (r == 0)
            continue;
        if (r < 0) {
            ddp_log_error(a->g.log, "unable to wait for worker local rank %d (pid %d): %s", i,
                          (int)w->pid, strerror(errno));
            status = W_EXITCODE(255, 0);
        }
        w->peak_rss_kb = usage.ru_maxrss;
        worker_ended(a, w, status, now);
    }
    /* The first failure starts the stop (later ones come while it runs), on every node
     * of a multi-node job. */
    if (a->first_wait != FIRST_FAILURE_NOW) {
        if (a->first_wait == FIRST_FAILURE_BLAMES && !blames_running(a))
            end_blame_wait(a);
    } else if (a->g.nfailures > failures_before && a->g.state == DDP_AGENT_RUNNING) {
        /* A collective that timed out: where every rank stands comes first, and the stop
         * waits for the report. */
        if (!ddp_hang_watch_defer_failure(a->hang, &a->g.failures[failures_before]))
            first_failure(a, failures_before);
    }
    if (a->g.nrunning == 0 && !ddp_hang_watch_reporting(a->hang) &&
        a->first_wait != FIRST_FAILURE_SIGNAL)
        group_ended(a);
}

/* A signal after the job ended, while the other nodes read how from our store: the job's
 * own signal once (Slurm signals every node's launcher; this one may have stopped for
 * another's news of it) is ignored; another signal, or it again, closes the store now. */
static void signal_while_lingering(ddp_agent_t *a, int sig)
{
    char name[32];
    signame(sig, name, sizeof name);
    if (a->etcd_closing) { /* the lease ends by itself; the status stays the job's */
        ddp_log_info(a->g.log,
                     "received %s after the job ended: leaving its keys in etcd to "
                     "their lease's end",
                     name);
        ddp_placement_abandon(a->placement);
    }
    if (a->lingering == NULL)
        return;
    if (sig == a->exit_code - DDP_EXIT_SIGNAL_BASE && !a->linger_ignored) {
        a->linger_ignored = true;
        ddp_log_info(a->g.log,
                     "received %s after the job ended by it: the other nodes are still reading "
                     "how from this node's store",
                     name);
        return;
    }
    ddp_log_warn(a->g.log,
                 "received %s: closing the store now, before every other node has read how the "
                 "job ended",
                 name);
    ddp_rdzv_coord_leave_now(a->lingering);
}

/* The launcher received `sig`: the workers get `send` (the signal itself when it is to
 * be forwarded, else SIGTERM), the job stops, and ddp-launch exits 128+sig. */
static void stop_for_signal(ddp_agent_t *a, int sig, int send)
{
    char name[32], sent[32];
    signame(sig, name, sizeof name);
    signame(send, sent, sizeof sent);
    bool reporting = ddp_hang_watch_reporting(a->hang);
    if (a->g.state == DDP_AGENT_DONE) {
        signal_while_lingering(a, sig);
        return;
    }
    if (a->g.state == DDP_AGENT_CHECKING) { /* nothing runs but the checks or the
                                             * checkpoints' scan and agreement */
        ddp_log_warn(a->g.log, "received %s %s: ending; no worker started", name,
                     a->health != NULL ? "during the health check"
                                       : "while reading the in-memory checkpoints");
        if (a->g.rdzv != NULL) {
            char message[96];
            snprintf(message, sizeof message, "its launcher received %s", name);
            ddp_rdzv_post_abort(a->g.rdzv, sig, message);
        }
        a->exit_code = DDP_EXIT_SIGNAL_BASE + sig;
        a->g.stop_reason = DDP_STOP_SIGNAL;
        a->g.stop_signal = sig;
        finish(a);
        return;
    }
    ddp_hang_watch_cancel(a->hang);
    if (a->g.rdzv != NULL) {
        char message[96];
        snprintf(message, sizeof message, "its launcher received %s", name);
        ddp_rdzv_post_abort(a->g.rdzv, sig, message);
    }
    /* Every worker has ended, and the group's end waits: for --progress-file's read (given
     * up), or for what they left (which goes at once). The job ends with it. */
    if (ddp_policy_cut_short(a->policy) || ddp_leftovers_cut_short(a->leftovers)) {
        ddp_log_warn(a->g.log, "received %s: ending now (the workers have ended)", name);
        a->g.stop_reason = DDP_STOP_SIGNAL;
        a->g.stop_signal = sig;
        return;
    }
    if (a->g.state == DDP_AGENT_WAITING) {
        ddp_log_warn(a->g.log, "received %s between rounds: ending", name);
        a->exit_code = DDP_EXIT_SIGNAL_BASE + sig;
        /* The store's launcher ends the job as this signal's (its own abort record may
         * not have reached its store yet): the others stop their workers with it. */
        a->g.stop_reason = DDP_STOP_SIGNAL;
        a->g.stop_signal = sig;
        finish(a);
        return;
    }
    if (a->g.stop_reason == DDP_STOP_SIGNAL) {
        ddp_log_warn(a->g.log, "received %s again: sending SIGKILL to the workers now", name);
        a->g.sent_sigkill = true;
        stop_event(a, "sigkill_sent", SIGKILL);
        ddp_group_signal_running(&a->g, SIGKILL);
        return;
    }
    bool waited = a->first_wait == FIRST_FAILURE_SIGNAL; /* after it had killed workers */
    if (waited)
        forget_killed_by(a, sig);
    if (waited && a->g.nrunning == 0)
        ddp_log_warn(a->g.log, "received %s: ending (it has ended the workers already)", name);
    else if (send == sig)
        ddp_log_warn(a->g.log, "received %s: forwarding it to the %d worker(s) and stopping them",
                     name, a->g.nrunning);
    else
        ddp_log_warn(a->g.log,
                     "received %s, which --signals-to-handle does not forward: stopping the %d "
                     "worker(s) with %s",
                     name, a->g.nrunning, sent);
    a->g.stop_signal = sig;
    if (a->g.state == DDP_AGENT_RUNNING && waited && a->g.nrunning == 0) {
        uv_timer_stop(&a->blame_timer);
        a->first_wait = FIRST_FAILURE_NOW;
        a->g.state = DDP_AGENT_STOPPING;
        a->g.stop_reason = DDP_STOP_SIGNAL;
        group_ended(a);
    } else if (a->g.state == DDP_AGENT_RUNNING) {
        begin_stop(a, send, DDP_STOP_SIGNAL);
        if (reporting && a->g.nrunning == 0) /* every worker ended during the report */
            group_ended(a);
    } else {
        /* Already stopping for a failure: the job now ends instead of restarting. A
         * stop that sent this very signal (another node's, forwarded) sends it once. */
        a->g.stop_reason = DDP_STOP_SIGNAL;
        if (a->g.sent_signal != send)
            ddp_group_signal_running(&a->g, send);
    }
}

/* --forward-signals: the workers get it (Slurm's early warning, say, to checkpoint) and
 * go on; nothing is stopped. */
static void on_passed_signal(uv_signal_t *handle, int sig)
{
    ddp_agent_t *a = handle->data;
    char name[32];
    if (a->g.state != DDP_AGENT_RUNNING || a->g.nrunning == 0)
        return;
    ddp_log_info(a->g.log,
                 "received %s: passing it to the %d worker(s), which go on (--forward-signals)",
                 signame(sig, name, sizeof name), a->g.nrunning);
    ddp_group_signal_running(&a->g, sig);
}

/* Whether --forward-signals takes `sig` (over --signals-to-handle). */
static bool passed_signal(const ddp_launch_config_t *cfg, int sig)
{
    for (int i = 0; i < cfg->npassed; i++)
        if (cfg->passed[i] == sig)
            return true;
    return false;
}

static void on_forwarded_signal(uv_signal_t *handle, int sig)
{
    stop_for_signal(handle->data, sig, sig);
}

/* A signal that would end ddp-launch outright: the workers stop and the report comes. */
static void on_unforwarded_signal(uv_signal_t *handle, int sig)
{
    stop_for_signal(handle->data, sig, SIGTERM);
}

/* Worker `w` of the attempt starts (agent/worker_start.h), and its entry records it. */
static int start_worker(ddp_agent_t *a, ddp_worker_t *w)
{
    ddp_started_t started;
    int err = ddp_worker_start_spawn(a->start, w, &started);
    if (err != 0)
        return err;
    w->pid = started.pid;
    w->prefix = started.prefix;
    w->error_file = started.error_file;
    w->running = true;
    a->g.nrunning++;
    w->recent[0].len = w->recent[1].len = 0;
    if (started.out != NULL)
        ddp_output_watch(started.out, &w->out, &w->recent[0], w->local_rank);
    if (started.err != NULL)
        ddp_output_watch(started.err, &w->err, &w->recent[1], w->local_rank);
    ddp_log_debug(a->g.log, "started worker rank %d (local rank %d) as pid %d", w->rank,
                  w->local_rank, (int)w->pid);
    worker_event(a, w, "worker_started", NULL);
    return 0;
}

/* A one-node job's health checks before each attempt ended (a multi-node job's run on the
 * rendezvous thread before each join): healthy, the attempt's workers start; unhealthy,
 * the job ends (5) before any worker. */
static void checks_done(void *ctx, int rc, const char *why)
{
    ddp_agent_t *a = ctx;
    a->health = NULL;
    if (a->g.state != DDP_AGENT_CHECKING)
        return;
    if (rc == 0) {
        ddp_log_info(a->g.log, "health check before attempt %d passed: %s", a->g.attempt, why);
        (void)start_workers(a);
        return;
    }
    ddp_log_error(a->g.log,
                  "this node failed its health check before attempt %d: %s; no worker started",
                  a->g.attempt, why);
    unhealthy_event(a, why);
    a->exit_code = DDP_EXIT_RDZV_FAILED;
    finish(a);
}

static int checks_then_workers(ddp_agent_t *a);

/* How many of the round's next nodes this node replicates to: --checkpoint-replicas (1 by
 * default), at most the nodes less one and 64. */
static int replica_targets(const ddp_agent_t *a)
{
    int want = a->g.cfg->checkpoint_replicas < 0 ? 1 : a->g.cfg->checkpoint_replicas;
    want = want < a->g.nnodes - 1 ? want : a->g.nnodes - 1;
    return want < 64 ? want : 64;
}

/* The round's next --checkpoint-replicas nodes (in node order, after this one) that take
 * replicas, told to the checkpoints' sender; capped at the nodes less one (said). */
static void replicate_to(ddp_agent_t *a, const ddp_checkpoint_common_t *x)
{
    ddp_replica_peer_t peers[64];
    int want = a->g.cfg->checkpoint_replicas < 0 ? 1 : a->g.cfg->checkpoint_replicas, n = 0;
    if (want > a->g.nnodes - 1 && a->g.cfg->checkpoint_replicas > 0) /* (asked, not the default) */
        ddp_log_info(a->g.log,
                     "--checkpoint-replicas=%d: round %d has %d other node(s); each node's "
                     "checkpoints go to %d",
                     want, a->g.attempt, a->g.nnodes - 1, a->g.nnodes - 1);
    want = replica_targets(a);
    for (int k = 1; k <= want && n < 64; k++) {
        const ddp_replica_peer_t *p =
            ddp_checkpoint_common_peer(x, (a->g.group_rank + k) % a->g.nnodes);
        if (p->port > 0)
            peers[n++] = *p;
    }
    ddp_checkpoint_replicas_job_rate(ddp_checkpoints_replicas(a->checkpoints),
                                     ddp_checkpoint_common_rate(x));
    ddp_checkpoints_replicate(a->checkpoints, a->g.rank_offset, a->g.nworkers, a->g.world_size,
                              peers, n);
}

/* The nodes have agreed on the step (agent/checkpoint_common.h): the round's workers. */
static void step_agreed(void *ctx, ddp_checkpoint_common_t *x, int64_t step)
{
    ddp_agent_t *a = ctx;
    if (x != a->common || a->g.state != DDP_AGENT_CHECKING)
        return; /* the round stopped, or the job ended, meanwhile */
    a->common = NULL;
    a->g.checkpoint_step = step;
    replicate_to(a, x);
    (void)start_workers(a);
}

/* A multi-node round after the first: this node's ranks' steps (the last scan's) published
 * and every node's read, for the step every rank of the round holds (CHECKING until it is
 * known); where that cannot begin (said), the workers at once. As group_start. */
static int agree_step(ddp_agent_t *a)
{
    ddp_ckpt_rank_steps_t *ranks = calloc((size_t)a->g.nworkers, sizeof *ranks);
    for (int i = 0; ranks != NULL && i < a->g.nworkers; i++)
        ranks[i].n = ddp_checkpoints_rank_steps(a->checkpoints, i, ranks[i].step);
    ddp_checkpoint_common_round_t round = {.round = a->g.attempt,
                                           .node_rank = a->g.group_rank,
                                           .nnodes = a->g.nnodes,
                                           .world_size = a->g.world_size,
                                           .first_rank = a->g.rank_offset,
                                           .nranks = a->g.nworkers,
                                           .timeout = a->g.cfg->rdzv_conf.read_timeout,
                                           .targets = replica_targets(a),
                                           .replica_port =
                                               ddp_checkpoints_replica_port(a->checkpoints),
                                           .replicas = ddp_checkpoints_replicas(a->checkpoints),
                                           .dir = ddp_checkpoints_dir(a->checkpoints)};
    snprintf(round.replica_key, sizeof round.replica_key, "%s",
             ddp_checkpoints_replica_key(a->checkpoints));
    const ddp_replica_step_t *reps;
    size_t nreps = ddp_checkpoints_replica_steps(a->checkpoints, &reps);
    ddp_checkpoint_replicas_world(round.replicas, a->g.world_size); /* (taken from now on) */
    int err = ranks == NULL
                  ? -ENOMEM
                  : ddp_checkpoint_common_start(&a->loop, a->g.cfg, a->g.log, &round, ranks, reps,
                                                nreps, step_agreed, a, &a->common);
    free(ranks);
    if (err != 0)
        return start_workers(a);
    a->g.state = DDP_AGENT_CHECKING;
    return 0;
}

/* The checkpoints' scan is over: the step the workers resume from (agreed with the other
 * nodes first, where there are some), then the attempt. */
static void checkpoints_read(void *ctx)
{
    ddp_agent_t *a = ctx;
    if (a->g.state != DDP_AGENT_CHECKING || a->scanned_for != a->g.attempt)
        return; /* a signal ended the job, or the round stopped, meanwhile */
    if (a->g.rdzv != NULL) {
        (void)agree_step(a);
        return;
    }
    a->g.checkpoint_step = ddp_checkpoints_step(a->checkpoints);
    (void)checks_then_workers(a);
}

/* Starts attempt a->g.attempt. After a failure (or a multi-node round after the first) the
 * in-memory checkpoints are read first, for the step every rank holds (off the loop:
 * CHECKING until it is known): this node's ranks' slots, then, with several nodes, the
 * step agreed with the others. On failure the started workers are stopped (or the agent
 * finished when none started) and the error is returned. */
static int group_start(ddp_agent_t *a)
{
    a->g.checkpoint_step = -1;
    bool after = a->g.attempt > 0 || ddp_checkpoints_restored(a->checkpoints);
    a->scanned_for = a->g.attempt;
    if (after && ddp_checkpoints_scan(a->checkpoints, &a->loop, a->g.rank_offset, a->g.nworkers,
                                      a->g.world_size, checkpoints_read, a)) {
        a->g.state = DDP_AGENT_CHECKING;
        return 0;
    }
    /* (No slots read here: none held. Round 0 too where --checkpoint-replicas is not 0, for
     * the nodes' ports: a flag, the same on every node, so that all of them publish.) */
    if (a->g.rdzv != NULL && (after || a->g.cfg->checkpoint_replicas != 0))
        return agree_step(a);
    return checks_then_workers(a);
}

/* The attempt's health checks first where they apply to a one-node job (off the loop:
 * CHECKING until they end), else its workers at once; as group_start. */
static int checks_then_workers(ddp_agent_t *a)
{
    ddp_health_spec_t checks;
    ddp_config_health_spec(a->g.cfg, &checks);
    if (a->g.rdzv != NULL || !ddp_health_checks_apply(&checks))
        return start_workers(a);
    a->g.state = DDP_AGENT_CHECKING;
    int err = ddp_health_start(&a->loop, &checks, a->guard.fd, checks_done, a, &a->health);
    if (err != 0) {
        ddp_log_error(a->g.log, "unable to run the health checks before attempt %d: %s",
                      a->g.attempt, ddp_strerror(err));
        a->exit_code = DDP_EXIT_LAUNCH_FAILED;
        finish(a);
    }
    return err;
}

/* Starts the workers of attempt a->g.attempt. On failure the started workers are stopped
 * (or the agent finished when none started) and the error is returned. */
static int start_workers(ddp_agent_t *a)
{
    ddp_end_notes_attempt(a->notes);
    a->g.attempt_began = ddp_clock_wall();
    a->g.first_succeeded = -1;
    for (int i = 0; i < a->g.nworkers; i++) {
        a->g.workers[i].succeeded = a->g.workers[i].stopped = false;
        free(a->g.workers[i].stopped_error);
        a->g.workers[i].stopped_error = NULL;
        free(a->g.workers[i].timer_expired);
        a->g.workers[i].timer_expired = NULL;
    }
    free(a->g.attempt_dir);
    a->g.attempt_dir = NULL;
    a->g.state = DDP_AGENT_RUNNING;
    a->g.stop_reason = DDP_STOP_NONE;
    a->g.sent_sigkill = false;
    ddp_hang_watch_attempt(a->hang);
    ddp_file_timer_clear(a->g.file_timer); /* the last attempt's workers are gone */
    int err =
        ddp_logs_make_attempt_dir(a->g.run_dir, a->g.attempt, a->g.nworkers, &a->g.attempt_dir);
    if (err) {
        ddp_log_error(a->g.log, "unable to create attempt_%d under %s: %s", a->g.attempt,
                      a->g.run_dir, ddp_strerror(err));
        goto fail;
    }
    ddp_worker_start_attempt(a->start);
    for (int i = 0; i < a->g.nworkers; i++) {
        ddp_worker_t *w = &a->g.workers[i];
        w->local_rank = i;
        w->rank = a->g.rank_offset + i;
        if ((err = start_worker(a, w)) != 0)
            goto fail;
    }
    int forked = ddp_worker_start_forked(a->start);
    if (forked > 0)
        ddp_log_info(a->g.log,
                     "warm restarts: %d of %d workers of attempt %d forked from the zygote", forked,
                     a->g.nworkers, a->g.attempt);
    ddp_worker_start_zygote(a->start);
    ddp_progress_watch_attempt(a->progress);
    ddp_store_waits_attempt(a->waits);
    return 0;
fail:
    if (a->g.nrunning > 0) {
        begin_stop(a, SIGTERM, DDP_STOP_LAUNCH_ERROR);
    } else {
        a->exit_code = DDP_EXIT_LAUNCH_FAILED;
        finish(a);
    }
    return err;
}

/* Multi-node jobs: what the rendezvous thread decided, for every node alike. */

/* This node's own --env values against node 0's, which its workers get instead: said
 * once a job where they differ. A bare NAME (unset here) and a name node 0 does not give
 * say nothing: the workers get node 0's value, or this node's. */
static void compare_job_env(ddp_agent_t *a)
{
    const ddp_launch_config_t *cfg = a->g.cfg;
    if (a->env_compared || a->g.coord != NULL || a->g.job_env == NULL)
        return;
    a->env_compared = true;
    for (int i = 0; i < cfg->nenv; i++) {
        const char *entry = cfg->env_set[i];
        size_t len = strcspn(entry, "=");
        char name[256];
        if (entry[len] != '=' || len >= sizeof name)
            continue;
        snprintf(name, sizeof name, "%.*s", (int)len, entry);
        const char *own = entry + len + 1, *theirs = ddp_env_lookup(a->g.job_env, name);
        if (theirs != NULL && strcmp(own, theirs) != 0)
            ddp_log_warn(a->g.log,
                         "--env %s: this node's value '%.60s' differs from node 0's '%.60s', "
                         "which the workers get",
                         name, own, theirs);
    }
}

static void round_start(ddp_agent_t *a, const ddp_rdzv_world_t *world)
{
    a->g.attempt = world->round;
    a->g.restart_count = world->restarts;
    a->g.group_rank = world->node_rank;
    a->g.rank_offset = world->rank_offset;
    a->g.world_size = world->world_size;
    a->g.nnodes = world->nnodes;
    clear_failures(a);
    ddp_strv_free(a->g.job_env);
    a->g.job_env = ddp_rdzv_job_env(a->g.rdzv);
    compare_job_env(a);
    /* The coordinator has cleared the last round's keys from the store already. */
    a->g.events.node_rank = world->node_rank;
    ddp_buf_t fields = DDP_BUF_INIT;
    ddp_events_int(&fields, "round", world->round);
    ddp_events_int(&fields, "nnodes", world->nnodes);
    ddp_events_int(&fields, "world_size", world->world_size);
    ddp_events_int(&fields, "first_rank", world->rank_offset);
    ddp_events_emit(&a->g.events, "round_formed", &fields);
    ddp_buf_free(&fields);
    ddp_log_info(a->g.log, "round %d: %d node(s), %d workers; this is node %d, with ranks %d to %d",
                 world->round, world->nnodes, world->world_size, world->node_rank,
                 world->rank_offset, world->rank_offset + a->g.nworkers - 1);
    if (a->g.cfg->hot_spares > 0 && world->round > 0 && !a->ran_a_round) {
        ddp_log_info(a->g.log, "this launcher waited as a hot spare: it takes node rank %d",
                     world->node_rank);
        ddp_buf_t spare = DDP_BUF_INIT;
        ddp_events_int(&spare, "round", world->round);
        ddp_events_int(&spare, "node_rank", world->node_rank);
        ddp_events_emit(&a->g.events, "spare_promoted", &spare);
        ddp_buf_free(&spare);
    }
    a->ran_a_round = true;
    (void)group_start(a);
}

/* The signal that stops the workers when another node ends the job with `exit_code`:
 * the signal that node received (128+N) where this one forwards it, else SIGTERM. */
static int peer_signal(const ddp_agent_t *a, int exit_code)
{
    int sig = exit_code - DDP_EXIT_SIGNAL_BASE;
    for (int i = 0; i < a->g.cfg->nsignals && sig > 0; i++)
        if (a->g.cfg->signals[i] == sig)
            return sig;
    return SIGTERM;
}

/* The rendezvous stops this node's workers: the round failed on another node (exit_code
 * not 0), or the nodes changed. While a hang report is being made, after it. */
static void remote_stop(ddp_agent_t *a, int exit_code, const char *message)
{
    if (a->g.state == DDP_AGENT_CHECKING) { /* no worker started yet: the step not agreed */
        ddp_log_info(a->g.log, "the round stopped before its workers started (%s)", message);
        ddp_checkpoints_cancel(a->checkpoints);
        ddp_checkpoint_common_cancel(a->common);
        a->common = NULL;
        a->g.state = DDP_AGENT_WAITING;
        ddp_rdzv_post(a->g.rdzv, DDP_RDZV_EV_STOPPED, NULL);
        return;
    }
    if (a->g.state == DDP_AGENT_RUNNING && ddp_hang_watch_defer_remote(a->hang, message))
        return; /* after the report */
    if (a->g.state != DDP_AGENT_RUNNING || a->g.nrunning == 0)
        return;
    if (exit_code != 0) {
        ddp_log_warn(a->g.log, "the round failed on another node (%s)", message);
        ddp_end_notes_left_early(a->notes);
    } else { /* a node joined or left an elastic job: no failure */
        ddp_log_info(a->g.log,
                     "the nodes changed (%s): stopping this node's workers to re-form "
                     "the job",
                     message);
    }
    begin_stop(a, SIGTERM, DDP_STOP_REMOTE);
}

/* The job ends here with `exit_code`: now, or once the workers have stopped. */
static void end_job(ddp_agent_t *a, int exit_code)
{
    if (a->g.nrunning > 0) {
        a->g.abort_exit_code = exit_code;
        if (a->g.state == DDP_AGENT_RUNNING)
            begin_stop(a, peer_signal(a, exit_code), DDP_STOP_ABORTED);
        else
            a->g.stop_reason = DDP_STOP_ABORTED;
    } else {
        a->exit_code = exit_code;
        finish(a);
    }
}

static void on_rdzv_command(void *ctx)
{
    ddp_agent_t *a = ctx;
    ddp_rdzv_world_t world;
    char message[1536];
    int exit_code;
    ddp_rdzv_cmd_t cmd;
    while (a->g.state != DDP_AGENT_DONE &&
           (cmd = ddp_rdzv_take(a->g.rdzv, &world, &exit_code, message, sizeof message)) !=
               DDP_RDZV_CMD_NONE) {
        switch (cmd) {
        case DDP_RDZV_CMD_NONE:
            break;
        case DDP_RDZV_CMD_START:
            if (a->g.state == DDP_AGENT_WAITING)
                round_start(a, &world);
            break;
        case DDP_RDZV_CMD_HANG:
            ddp_hang_watch_asked(a->hang);
            break;
        case DDP_RDZV_CMD_HANG_REPORT: {
            char *rows = ddp_rdzv_take_hang_rows(a->g.rdzv);
            ddp_hang_watch_rows(a->hang, rows);
            free(rows);
            break;
        }
        case DDP_RDZV_CMD_HANG_DONE:
            ddp_hang_watch_reported_elsewhere(a->hang);
            break;
        case DDP_RDZV_CMD_PAUSE:
        case DDP_RDZV_CMD_CONTINUE:
            ddp_pause_remote(a->pause, cmd == DDP_RDZV_CMD_PAUSE, exit_code == 1, message);
            break;
        case DDP_RDZV_CMD_STOP:
            remote_stop(a, exit_code, message);
            break;
        case DDP_RDZV_CMD_STORE_LOST:
        case DDP_RDZV_CMD_STORE_UNANSWERED:
            ddp_placement_store_lost(a->placement, message, cmd == DDP_RDZV_CMD_STORE_UNANSWERED);
            break;
        case DDP_RDZV_CMD_FINISH:
            ddp_hang_watch_cancel(a->hang);
            if (ddp_rdzv_unhealthy(a->g.rdzv))
                unhealthy_event(a, message);
            if (exit_code == DDP_EXIT_WORKER_FAILED && a->g.nfailures > 0)
                exit_code = ddp_policy_failure_status(&a->g); /* the report names the cause */
            else if (exit_code != DDP_EXIT_OK)
                ddp_log_error(a->g.log, "%s", message);
            if (exit_code == DDP_EXIT_WORKER_FAILED)
                ddp_end_notes_left_early(a->notes);
            end_job(a, exit_code);
            break;
        }
    }
}

/* Setup and teardown. */

/* Every store client costs a descriptor (a torch 1.13 client two) and every worker up
 * to four while it starts: raise the soft limit to the hard one, and give the workers
 * back the limit they would have had. */
static void raise_nofile(ddp_agent_t *a)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= rl.rlim_max)
        return;
    rlim_t old = rl.rlim_cur;
    rl.rlim_cur = rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &rl) == 0)
        a->g.nofile = old;
    else
        ddp_log_debug(a->g.log, "unable to raise the open file limit to %llu: %s",
                      (unsigned long long)rl.rlim_max, strerror(errno));
}

static void announce_log_dir(void *ctx, const char *dir)
{
    (void)ddp_guard_log_dir(ctx, dir); /* without a guard: nobody to tell */
}

/* Whether descriptors a and b are the same file (device and inode). */
static bool same_file(int a, int b)
{
    struct stat sa, sb;
    return fstat(a, &sa) == 0 && fstat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
           sa.st_ino == sb.st_ino;
}

static bool any_file_output(const ddp_launch_config_t *cfg)
{
    for (int i = 0; i < cfg->nproc_per_node; i++) {
        ddp_sink_t out = ddp_logs_sink(cfg, i, DDP_STD_OUT),
                   err = ddp_logs_sink(cfg, i, DDP_STD_ERR);
        if (out == DDP_SINK_FILE || out == DDP_SINK_TEE || err == DDP_SINK_FILE ||
            err == DDP_SINK_TEE)
            return true;
    }
    return false;
}

/* The watchdog's callbacks (file_timer.h): whose process `pid` is (each worker leads its
 * own process group), and the event of a timer that fired. */
static int timer_owner(void *ctx, pid_t pid)
{
    ddp_agent_t *a = ctx;
    pid_t group = getpgid(pid);
    for (int i = 0; i < a->g.nworkers; i++)
        if (a->g.workers[i].running && (a->g.workers[i].pid == pid || a->g.workers[i].pid == group))
            return i;
    return -1;
}

static void timer_fired(void *ctx, pid_t pid, int local_rank, const char *scope, int sig)
{
    ddp_agent_t *a = ctx;
    char name[32];
    ddp_buf_t fields = DDP_BUF_INIT;
    ddp_events_int(&fields, "local_rank", local_rank);
    ddp_events_int(&fields, "rank", a->g.workers[local_rank].rank);
    ddp_events_int(&fields, "pid", pid);
    ddp_events_str(&fields, "scope", scope);
    ddp_events_str(&fields, "signal", ddp_signal_name(sig, name, sizeof name));
    ddp_events_emit(&a->g.events, "timer_expired", &fields);
    ddp_buf_free(&fields);
    free(a->g.workers[local_rank].timer_expired); /* for the report's line on its end */
    a->g.workers[local_rank].timer_expired = strdup(scope);
}

/* Keeps a signal ignored that whoever started ddp-launch ignored (nohup: SIGHUP), by it and
 * by its workers (torchrun's handler ends the job on the hangup nohup was to survive): true
 * when it was, said once where it would have been handled. */
static bool keep_ignored(const ddp_agent_t *a, int sig)
{
    struct sigaction sa;
    char name[32];
    if (sigaction(sig, NULL, &sa) != 0 || sa.sa_handler != SIG_IGN)
        return false;
    /* A shell's background job ignores SIGINT and SIGQUIT: nothing to say of those. */
    ddp_log(a->g.log, sig == SIGHUP ? DDP_LOG_INFO : DDP_LOG_DEBUG,
            "%s was ignored when ddp-launch started (nohup, say): it stays ignored, by "
            "ddp-launch and its workers",
            signame(sig, name, sizeof name));
    return true;
}

/* Creates the loop's handles and starts them. Only the first signal handle can fail
 * to initialize (it creates the loop's signal pipe); after that nothing can, so a
 * failure later leaves every handle ready for finish(). */
static int setup_loop(ddp_agent_t *a, bool *handles_ready)
{
    int err = uv_signal_init(&a->loop, &a->sigchld);
    if (err)
        return err;
    uv_timer_init(&a->loop, &a->kill_timer);
    uv_timer_init(&a->loop, &a->blame_timer);
    for (int i = 0; i < a->g.cfg->nsignals; i++) {
        uv_signal_init(&a->loop, &a->forwarded[i]);
        a->forwarded[i].data = a;
    }
    for (int i = 0; i < a->g.cfg->npassed; i++) {
        uv_signal_init(&a->loop, &a->passed[i]);
        a->passed[i].data = a;
    }
    /* The other signals whose default would end ddp-launch stop the job instead. */
    const int *all;
    size_t nall = ddp_signal_forwardables(&all);
    for (size_t k = 0; k < nall && a->nunforwarded < DDP_MAX_SIGNALS; k++) {
        bool forwarded = passed_signal(a->g.cfg, all[k]);
        for (int i = 0; i < a->g.cfg->nsignals; i++)
            forwarded = forwarded || a->g.cfg->signals[i] == all[k];
        if (forwarded)
            continue;
        a->unforwarded_sig[a->nunforwarded] = all[k];
        uv_signal_t *h = &a->unforwarded[a->nunforwarded++];
        uv_signal_init(&a->loop, h);
        h->data = a;
    }
    a->sigchld.data = a;
    a->kill_timer.data = a;
    a->blame_timer.data = a;
    /* The console writer's handle is the only one that can fail to open: first, so that
     * finish() closes only what is open. */
    if ((err = ddp_output_start(&a->output)) != 0)
        return err;
    *handles_ready = true;
    ddp_session_watch(&a->loop, &a->session, a->g.log);
    if (a->g.file_timer != NULL &&
        (err = ddp_file_timer_watch(a->g.file_timer, &a->loop, timer_owner, timer_fired, a)) != 0)
        return err;
    if ((err = uv_signal_start(&a->sigchld, on_sigchld, SIGCHLD)) != 0 ||
        (err = ddp_pause_start(a->pause)) != 0)
        return err;
    for (int i = 0; i < a->g.cfg->nsignals; i++) {
        if (passed_signal(a->g.cfg, a->g.cfg->signals[i]))
            continue; /* --forward-signals takes it */
        if (!a->g.cfg->signals_given && keep_ignored(a, a->g.cfg->signals[i]))
            continue;
        if ((err = uv_signal_start(&a->forwarded[i], on_forwarded_signal, a->g.cfg->signals[i])) !=
            0)
            return err;
    }
    for (int i = 0; i < a->g.cfg->npassed; i++) {
        if ((err = uv_signal_start(&a->passed[i], on_passed_signal, a->g.cfg->passed[i])) != 0)
            return err;
    }
    for (int i = 0; i < a->nunforwarded; i++) {
        if (keep_ignored(a, a->unforwarded_sig[i]))
            continue;
        if ((err = uv_signal_start(&a->unforwarded[i], on_unforwarded_signal,
                                   a->unforwarded_sig[i])) != 0)
            return err;
    }
    return 0;
}

/* --event-log-handler, and its first event. */
static int open_events(ddp_agent_t *a)
{
    const ddp_launch_config_t *cfg = a->g.cfg;
    int err = ddp_events_open(&a->g.events, cfg->event_log, cfg->run_id,
                              ddp_config_dynamic(cfg) ? -1 : cfg->node_rank);
    if (err) {
        ddp_log_error(a->g.log, "--event-log-handler=%s: %s", cfg->event_log, strerror(-err));
        return DDP_EXIT_LAUNCH_FAILED;
    }
    ddp_buf_t fields = DDP_BUF_INIT;
    ddp_events_int(&fields, "nproc_per_node", cfg->nproc_per_node);
    ddp_events_int(&fields, "nnodes_min", cfg->nnodes_min);
    ddp_events_int(&fields, "nnodes_max", cfg->nnodes_max);
    ddp_events_int(&fields, "max_restarts", cfg->max_restarts);
    ddp_events_str(&fields, "program", cfg->script);
    ddp_events_emit(&a->g.events, "job_started", &fields);
    ddp_buf_free(&fields);
    return 0;
}

/* Everything before the loop runs: the program found, the log directory, the orphan
 * guard, the loop itself. 0, or the exit status to return (what failed is logged);
 * agent_free undoes whatever was done either way. */
/* TORCHELASTIC_ENABLE_FILE_TIMER=1 (torchrun's, read from this launcher's environment):
 * the watchdog's FIFO, at TORCHELASTIC_TIMER_FILE or a new name in TMPDIR; the workers
 * are told where. A FIFO that cannot be made ends the job before it starts. */
static int create_file_timer(ddp_agent_t *a)
{
    const char *enable = ddp_env_get(DDP_ENV_TORCHELASTIC_ENABLE_FILE_TIMER);
    if (enable == NULL || strcmp(enable, "1") != 0)
        return 0;
    ddp_buf_t why = DDP_BUF_INIT;
    const char *path = ddp_env_get(DDP_ENV_TORCHELASTIC_TIMER_FILE);
    int err = ddp_file_timer_create(path != NULL && *path != '\0' ? path : NULL,
                                    ddp_logs_temp_dir(NULL), a->g.log, &a->g.file_timer, &why);
    if (err != 0)
        ddp_log_error(a->g.log, "TORCHELASTIC_ENABLE_FILE_TIMER=1: %s", ddp_buf_str(&why));
    else
        ddp_log_info(a->g.log, "watchdog timers (TORCHELASTIC_ENABLE_FILE_TIMER=1) at %s",
                     ddp_file_timer_path(a->g.file_timer));
    ddp_buf_free(&why);
    return err != 0 ? DDP_EXIT_LAUNCH_FAILED : 0;
}

/* What the parts may ask of the agent (agent/group.h). */
static void op_stop(ddp_group_t *g, int sig, ddp_stop_reason_t reason)
{
    if (g->nrunning > 0)
        begin_stop(agent_of(g), sig, reason);
    else
        g->stop_reason = reason;
}

static void op_fail_round(ddp_group_t *g, size_t first)
{
    fail_round(agent_of(g), first);
}

static void op_group_ended(ddp_group_t *g)
{
    group_ended(agent_of(g));
}

/* The two waits of a group's end (what the workers left, --progress-file's read) may see
 * the job end meanwhile: another node's FINISH (end_job) finishes the agent at once, as
 * no worker runs; the end's rest is then not for this agent to do (a second finish would
 * close its handles twice). */
static void op_leftovers_done(ddp_group_t *g)
{
    if (agent_of(g)->g.state != DDP_AGENT_DONE)
        group_ended_after_leftovers(agent_of(g));
}

static void op_progress_read(ddp_group_t *g)
{
    if (agent_of(g)->g.state != DDP_AGENT_DONE)
        group_ended_measured(agent_of(g));
}

static void op_start_rendezvous(ddp_group_t *g)
{
    start_rendezvous(agent_of(g));
}

static void op_end_job(ddp_group_t *g, int exit_code)
{
    end_job(agent_of(g), exit_code);
}

static void op_leave_job(ddp_group_t *g, int exit_code)
{
    ddp_agent_t *a = agent_of(g);
    a->store_leaves = g->coord != NULL && g->cfg->rdzv_backend == DDP_RDZV_ETCD;
    end_job(a, exit_code);
}

static const ddp_agent_ops_t agent_ops = {
    .stop = op_stop,
    .fail_round = op_fail_round,
    .group_ended = op_group_ended,
    .leftovers_done = op_leftovers_done,
    .progress_read = op_progress_read,
    .start_rendezvous = op_start_rendezvous,
    .end_job = op_end_job,
    .leave_job = op_leave_job,
};

/* The parts of the agent (the policy aside, made first), on the loop, wired to what each
 * asks of another. 0 or -ENOMEM (those made are closed and freed with the others). */
static int new_parts(ddp_agent_t *a)
{
    ddp_group_t *g = &a->g;
    int err;
    a->parts_ready = true;
    if ((err = ddp_pause_new(g, &a->pause)) != 0 ||
        (err = ddp_hang_watch_new(g, a->pause, &a->hang)) != 0 ||
        (err = ddp_progress_watch_new(g, a->hang, a->pause, &a->progress)) != 0 ||
        (err = ddp_store_waits_new(g, &a->waits)) != 0 ||
        (err = ddp_worker_start_new(g, &a->start)) != 0 ||
        (err = ddp_end_notes_new(g, &a->notes)) != 0)
        return err;
    return ddp_leftovers_new(g, a->start, &a->leftovers);
}

/* The job's log directory (said where it is), what the workers find there (--hang-dump's
 * sitecustomize), and what they are told (the module's folder, the dump signal). 0, or
 * the exit status when the directory cannot be made (said). */
static int make_run_dir(ddp_agent_t *a)
{
    const ddp_launch_config_t *cfg = a->g.cfg;
    const ddp_log_t *log = a->g.log;
    const char *under = cfg->log_dir != NULL ? cfg->log_dir : ddp_logs_temp_dir(log);
    int err = ddp_logs_make_run_dir(cfg->log_dir, cfg->run_id, announce_log_dir, &a->guard,
                                    &a->base_dir, &a->base_created, &a->g.run_dir);
    if (err != 0) {
        ddp_log_error(log, "unable to create the log directory under %s: %s", under,
                      ddp_strerror(err));
        return DDP_EXIT_LAUNCH_FAILED;
    }
    /* The signal a worker dumps its state on: a real-time one, which programs seldom use
     * (and which is sent only to a worker that catches it). */
    a->g.dump_signal = SIGRTMIN + 6;
    if (!ddp_worker_module_dir(cfg, environ, a->g.module_dir, sizeof a->g.module_dir))
        a->g.module_dir[0] = '\0';
    if (cfg->hang_dump && (asprintf(&a->g.python_dir, "%s/python", a->g.run_dir) < 0 ||
                           (err = ddp_stacks_write_sitecustomize(a->g.python_dir)) != 0)) {
        ddp_log_warn(log, "--hang-dump: unable to write %s/sitecustomize.py: %s; no Python stacks",
                     a->g.python_dir ? a->g.python_dir : a->g.run_dir, ddp_strerror(err));
        free(a->g.python_dir);
        a->g.python_dir = NULL;
    }
    if (any_file_output(cfg))
        ddp_log_info(log, "worker logs go to %s", a->g.run_dir);
    else
        ddp_log_debug(log, "log directory: %s", a->g.run_dir);
    return 0;
}

static int agent_new(const ddp_launch_config_t *cfg, const ddp_log_t *log, ddp_agent_t **out)
{
    ddp_agent_t *a = calloc(1, sizeof *a);
    int err;
    if (a == NULL) {
        ddp_log_error(log, "out of memory");
        return DDP_EXIT_LAUNCH_FAILED;
    }
    *out = a;
    a->g.log = log;
    a->g.loop = &a->loop;
    a->g.ops = &agent_ops;
    a->g.guard = &a->guard;
    a->g.output = &a->output;
    a->g.events.fd = -1;
    a->g.nworkers = cfg->nproc_per_node;
    /* Where the store is, which says the configuration; the policy, first. */
    if (ddp_placement_new(&a->g, cfg, &a->placement) != 0) {
        ddp_log_error(log, "out of memory");
        return DDP_EXIT_LAUNCH_FAILED;
    }
    a->g.cfg = ddp_placement_cfg(a->placement);
    if (ddp_policy_new(&a->g, &a->policy) != 0) {
        ddp_log_error(log, "out of memory");
        return DDP_EXIT_LAUNCH_FAILED;
    }
    a->g.world_size = cfg->nproc_per_node; /* one node; the rendezvous sets them per round */
    a->g.nnodes = 1;
    a->g.console_merged = same_file(1, 2);
    ddp_output_init(&a->output, &a->loop, log, a->g.console_merged);
    a->guard.fd = -1;
    a->exit_code = DDP_EXIT_LAUNCH_FAILED;
    if (gethostname(a->g.host, sizeof a->g.host - 1) != 0) /* for messages and the report */
        strcpy(a->g.host, "localhost");
    if ((err = open_events(a)) != 0)
        return err;
    if ((err = ddp_worker_start_find_program(cfg, log, a->g.host, &a->g.program,
                                             &a->g.torch_version)) != 0)
        return err;
    a->g.workers = calloc((size_t)a->g.nworkers, sizeof *a->g.workers);
    a->g.failures = calloc((size_t)a->g.nworkers, sizeof *a->g.failures);
    if (a->g.workers == NULL || a->g.failures == NULL) {
        ddp_log_error(log, "out of memory for %d workers", a->g.nworkers);
        return DDP_EXIT_LAUNCH_FAILED;
    }
    raise_nofile(a);
    /* The guard is forked before the loop exists, so it holds none of its state,
     * and before the log directory, which it removes if the launcher dies with it empty. */
    if ((err = ddp_guard_start(&a->guard)) != 0)
        ddp_log_warn(log,
                     "unable to start the orphan guard: %s; workers still die with "
                     "ddp-launch, but their children may not",
                     ddp_strerror(err));
    if ((err = uv_loop_init(&a->loop)) != 0) {
        ddp_log_error(log, "unable to set up the event loop: %s", uv_strerror(err));
        return DDP_EXIT_LAUNCH_FAILED;
    }
    a->loop_ready = true;
    ddp_policy_begin(a->policy); /* the progress the job starts from */
    if ((err = make_run_dir(a)) != 0)
        return err;
    a->g.subreaper = ddp_leftovers_become_subreaper(log);
    if ((err = ddp_checkpoints_new(cfg, log, &a->guard, &a->checkpoints)) != 0 ||
        (err = new_parts(a)) != 0) {
        ddp_log_error(log, "out of memory");
        return DDP_EXIT_LAUNCH_FAILED;
    }
    a->g.checkpoint_dir = ddp_checkpoints_dir(a->checkpoints);
    a->g.checkpoint_step = -1;
    return create_file_timer(a);
}

/* A multi-node job: the coordinator where this launcher serves the store, and this
 * launcher's rendezvous thread. A failure finishes the agent. */
static void start_rendezvous(ddp_agent_t *a)
{
    const ddp_launch_config_t *cfg = a->g.cfg;
    char id[DDP_RDZV_ID_MAX], store[DDP_HOST_MAX + 16];
    int err = 0;
    ddp_rdzv_launcher_id(id, a->g.host);
    a->g.state = DDP_AGENT_WAITING;
    if (a->g.store != NULL && a->g.coord == NULL) /* (etcd: started at placement) */
        err = ddp_rdzv_coord_start(&a->loop, a->g.store, cfg, a->g.log, id, &a->g.coord);
    if (err == 0)
        err = ddp_rdzv_start(&a->loop, cfg, a->g.log, id, a->guard.fd, on_rdzv_command, a,
                             &a->g.rdzv);
    if (err != 0) {
        ddp_log_error(a->g.log, "unable to start the rendezvous: %s", ddp_strerror(err));
        finish(a);
    } else if (ddp_config_dynamic(cfg)) {
        ddp_host_port_text(store, sizeof store, cfg->master_addr, cfg->master_port);
        ddp_log_info(a->g.log, "joining the elastic job (%d to %d nodes) at %s%s", cfg->nnodes_min,
                     cfg->nnodes_max, store, a->g.store != NULL ? ", hosting its store" : "");
        if (cfg->hot_spares > 0) /* this launcher may wait as a spare: its zygote meanwhile */
            ddp_worker_start_zygote(a->start);
    } else {
        ddp_host_port_text(store, sizeof store, cfg->master_addr, cfg->master_port);
        ddp_log_info(a->g.log, "node %d of %d: joining the job at %s", cfg->node_rank,
                     cfg->nnodes_max, store);
    }
}

/* The loop's handles, the store, then the rendezvous or the first attempt. A failure
 * finishes the agent: the loop then only closes what was opened. */
static void agent_start(ddp_agent_t *a)
{
    bool handles_ready = false;
    int err = setup_loop(a, &handles_ready);
    if (err != 0) {
        ddp_log_error(a->g.log, "unable to set up the event loop: %s", uv_strerror(err));
        if (handles_ready)
            finish(a);
    } else if (ddp_store_host_start(&a->loop, a->g.cfg, a->g.log, a->g.nworkers, &a->g.store,
                                    &a->g.store_port) != 0) {
        a->exit_code = DDP_EXIT_STORE_FAILED;
        finish(a);
    } else if (a->g.cfg->rdzv_backend == DDP_RDZV_ETCD) {
        a->g.state = DDP_AGENT_WAITING; /* the rendezvous starts once etcd has placed it */
        ddp_placement_start(a->placement);
    } else if (a->g.cfg->nnodes_max > 1) {
        start_rendezvous(a);
    } else {
        (void)group_start(a);
    }
}

/* After the loop (or instead of it): the report, then everything agent_new made. */
static int agent_free(ddp_agent_t *a, int exit_code)
{
    if (a->loop_ready) {
        if (a->parts_ready) { /* the loop never ran (finish closes them) */
            close_parts(a);
            uv_run(&a->loop, UV_RUN_NOWAIT);
        }
        bool elsewhere =
            a->g.rdzv != NULL && !a->served_store && ddp_rdzv_failures_published(a->g.rdzv);
        ddp_rdzv_free(a->g.rdzv);
        ddp_strv_free(a->g.job_env);
        exit_code = a->exit_code;
        ddp_output_stop(&a->output); /* every worker line is out before the report */
        if (a->served_store)
            merge_remote_failures(a);
        /* The report names what went wrong, also when a signal ended the job meanwhile. */
        if (a->g.nfailures > 0)
            ddp_end_notes_report(a->notes, elsewhere);
        uv_loop_close(&a->loop);
    }
    /* Every worker has ended (what they left too): the checkpoints' directory goes while
     * the guard still would remove it. */
    uint64_t checkpoint_bytes = ddp_checkpoints_held(a->checkpoints);
    bool checkpoints = a->g.checkpoint_dir != NULL;
    ddp_checkpoints_free(a->checkpoints, exit_code != DDP_EXIT_OK);
    ddp_guard_stop(&a->guard);
    if (a->base_created) /* of a job that succeeded, the rings are nothing to keep */
        ddp_logs_remove_if_empty(a->base_dir, exit_code == DDP_EXIT_OK);
    clear_failures(a);
    ddp_buf_t fields = DDP_BUF_INIT;
    ddp_events_int(&fields, "exit_code", exit_code);
    if (checkpoints)
        ddp_events_int(&fields, "checkpoint_bytes", (long long)checkpoint_bytes);
    ddp_events_emit(&a->g.events, "job_ended", &fields);
    ddp_buf_free(&fields);
    ddp_events_close(&a->g.events);
    free(a->g.failures);
    ddp_buf_free(&a->remote_failures);
    ddp_file_timer_free(a->g.file_timer);
    for (int i = 0; a->g.workers != NULL && i < a->g.nworkers; i++) {
        free(a->g.workers[i].stopped_error);
        free(a->g.workers[i].timer_expired);
        /* (a job ended before its group's end was seen: etcd's quorum lost, say) */
        free(a->g.workers[i].prefix);
        free(a->g.workers[i].error_file);
    }
    free(a->g.workers);
    free(a->g.program);
    free(a->base_dir);
    free(a->g.run_dir);
    free(a->g.attempt_dir);
    free(a->g.python_dir);
    ddp_pause_free(a->pause);
    ddp_hang_watch_free(a->hang);
    ddp_progress_watch_free(a->progress);
    ddp_store_waits_free(a->waits);
    ddp_end_notes_free(a->notes);
    ddp_worker_start_free(a->start);
    ddp_leftovers_free(a->leftovers);
    ddp_policy_free(a->policy);
    ddp_placement_free(a->placement);
    free(a);
    return exit_code;
}

int ddp_agent_run(const ddp_launch_config_t *cfg, const ddp_log_t *log)
{
    ddp_agent_t *a = NULL;
    signal(SIGPIPE, SIG_IGN); /* a closed console must not kill the job */
    int exit_code = agent_new(cfg, log, &a);
    if (a == NULL)
        return exit_code;
    if (exit_code == 0) {
        agent_start(a);
        uv_run(&a->loop, UV_RUN_DEFAULT);
    }
    return agent_free(a, exit_code);
}
