/* Hang reports of one node (see agent/hang_watch.h; the report's parts in hang.c, the stack
 * tools in stacks.c):
 *
 *   IDLE        a libddp collective timed out, --hang-timeout passed with no progress,
 *               or another node asked  --> COLLECTING (the dump signal to the workers
 *               that catch it, --hang-dump's tools started)
 *   COLLECTING  the pause for the workers' dumps has passed and the tools have ended
 *               --> one node: the report, then DONE; several: WAITING (rows to the
 *               rendezvous)
 *   WAITING     every node's rows (the reporter prints them), another node's report,
 *               or the bound  --> DONE
 *   COLLECTING, WAITING  a signal or the job's end  --> DONE
 *   DONE        a new attempt  --> IDLE
 *
 * One report an attempt. A failure or a failed round met during it waits for its end
 * (`deferred`), and the agent goes on then (ddp_agent_ops_t). */
#include "agent/hang_watch.h"

#include "diagnose/hang.h"
#include "diagnose/stacks.h"
#include "io.h"
#include "progress.h"
#include "rdzv/record.h"
#include "strv.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define HANG_PAUSE_MS 500  /* for the workers' own dumps */
#define HANG_TOOLS_S  15.0 /* each stack tool's limit */
#define HANG_GATHER_S 10.0 /* the reporter's wait for the other nodes' rows */

typedef enum { HANG_IDLE, HANG_COLLECTING, HANG_WAITING, HANG_DONE } hang_phase_t;

/* What COLLECTING still waits for. */
enum { AWAIT_PAUSE = 1, AWAIT_STACKS = 2 };

/* What waits for the report's end: a failure's stop comes before a remote one. */
typedef enum { DEFER_NONE, DEFER_REMOTE, DEFER_FAILURE } deferred_t;

/* --hang-timeout's view of a worker's progress at the last look (hang.h). */
typedef struct {
    bool has_ring;     /* libddp's flight recorder: progress is a finished collective */
    uint64_t progress; /* its rings' finished collectives */
    double cpu;        /* without a ring: its CPU seconds, */
    uint64_t output;   /* and the bytes of its output */
    double active_at;  /* when it last made progress (monotonic: a clock step is none) */
    bool named;        /* named by the hang that stops the attempt: its end is its failure */
} watched_t;

struct ddp_hang_watch_s {
    ddp_group_t *g;
    const ddp_pause_t *pause;
    uv_timer_t timer; /* --hang-timeout: looks at every worker's progress */
    uv_timer_t wait;  /* the report's pauses and bounds */
    hang_phase_t phase;
    ddp_hang_cause_t cause;
    unsigned awaited; /* COLLECTING: AWAIT_* */
    double quiet;     /* how long no progress was seen when the current hang was found (s) */
    double limit;     /* ... and the timeout it passed (s) */
    char why[240];    /* what found it */
    /* The stop it ends in ("the job hung ...": "" before): the failure of the ranks it
     * names, for the report. */
    char message[DDP_RDZV_MSG_MAX];
    deferred_t deferred;
    char deferred_message[DDP_RDZV_MSG_MAX];
    watched_t *workers; /* by local rank */
};

int ddp_hang_watch_new(ddp_group_t *g, const ddp_pause_t *pause, ddp_hang_watch_t **out)
{
    ddp_hang_watch_t *h = calloc(1, sizeof *h);
    if (h == NULL || (h->workers = calloc((size_t)g->nworkers + 1, sizeof *h->workers)) == NULL) {
        free(h);
        return -ENOMEM;
    }
    h->g = g;
    h->pause = pause;
    uv_timer_init(g->loop, &h->timer);
    h->timer.data = h;
    uv_timer_init(g->loop, &h->wait);
    h->wait.data = h;
    *out = h;
    return 0;
}

void ddp_hang_watch_close(ddp_hang_watch_t *h)
{
    uv_close((uv_handle_t *)&h->timer, NULL);
    uv_close((uv_handle_t *)&h->wait, NULL);
}

void ddp_hang_watch_free(ddp_hang_watch_t *h)
{
    if (h == NULL)
        return;
    free(h->workers);
    free(h);
}

bool ddp_hang_watch_may_begin(const ddp_hang_watch_t *h)
{
    return h->phase == HANG_IDLE;
}

bool ddp_hang_watch_reporting(const ddp_hang_watch_t *h)
{
    return h->phase == HANG_COLLECTING || h->phase == HANG_WAITING;
}

const char *ddp_hang_watch_named(const ddp_hang_watch_t *h, int local_rank)
{
    return h->workers[local_rank].named && h->message[0] != '\0' ? h->message : NULL;
}

/* When worker i last made progress: a Ctrl-Z's stop is nobody's quiet time. */
static double active_at(const ddp_hang_watch_t *h, int i)
{
    double resumed = ddp_pause_resumed_at(h->pause);
    return h->workers[i].active_at > resumed ? h->workers[i].active_at : resumed;
}

static void on_hang_stacks_done(void *ctx);
static void on_hang_wait(uv_timer_t *timer);

void ddp_hang_watch_begin(ddp_hang_watch_t *h, ddp_hang_cause_t cause, const char *why,
                          double quiet, double limit, const bool *named)
{
    ddp_group_t *g = h->g;
    if (h->phase != HANG_IDLE)
        return;
    h->phase = HANG_COLLECTING;
    h->cause = cause;
    h->awaited = AWAIT_PAUSE;
    if (cause == DDP_HANG_STALLED) {
        h->quiet = quiet;
        h->limit = limit;
    }
    snprintf(h->why, sizeof h->why, "%s", why);
    for (int i = 0; i < g->nworkers; i++)
        h->workers[i].named = named != NULL && named[i];
    uv_timer_stop(&h->timer);
    ddp_log_warn(g->log, "%s: collecting where every rank stands before stopping anything", why);
    pid_t *pids = calloc((size_t)g->nworkers, sizeof *pids);
    char **paths = calloc((size_t)g->nworkers + 1, sizeof *paths);
    int n = 0;
    for (int i = 0; i < g->nworkers; i++) {
        ddp_worker_t *w = &g->workers[i];
        if (!w->running)
            continue;
        if (ddp_hang_catches(w->pid, g->dump_signal))
            kill(w->pid, g->dump_signal);
        if (pids != NULL && paths != NULL &&
            asprintf(&paths[n], "%s/%d/stack.txt", g->attempt_dir, w->local_rank) > 0)
            pids[n++] = w->pid;
    }
    const char *tool = NULL;
    if (g->cfg->hang_dump && pids != NULL && paths != NULL &&
        ddp_stacks_start(g->loop, pids, paths, n, HANG_TOOLS_S, on_hang_stacks_done, h, &tool) ==
            0) {
        h->awaited |= AWAIT_STACKS;
        if (tool == NULL)
            ddp_log_warn(g->log, "--hang-dump: no native stacks: libunwind cannot be loaded "
                                 "(Debian's libunwind8) and neither eu-stack (elfutils) nor gdb "
                                 "is on PATH");
        else
            ddp_log_info(g->log, "--hang-dump: native stacks by %s", tool);
    }
    ddp_strv_free(paths);
    free(pids);
    ddp_buf_t fields = DDP_BUF_INIT;
    ddp_events_int(&fields, "attempt", g->attempt);
    ddp_events_str(&fields, "reason", why);
    ddp_events_emit(&g->events, "hang_suspected", &fields);
    ddp_buf_free(&fields);
    uv_timer_start(&h->wait, on_hang_wait, HANG_PAUSE_MS, 0);
}

/* Where the report's files are: hang_report.txt, and of each rank's those some local rank
 * wrote: libddp's flight recorder (flight_<group>.json), the native and Python stacks of
 * --hang-dump. */
static void say_hang_files(const ddp_group_t *g)
{
    static const char *const kinds[] = {"flight_*.json", "stack.txt", "python_stack.txt"};
    ddp_buf_t found = DDP_BUF_INIT;
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        int ranks = 0;
        for (int i = 0; i < g->nworkers; i++) {
            char dir[PATH_MAX];
            ddp_group_worker_dir(g, &g->workers[i], dir, sizeof dir);
            ranks += ddp_hang_dir_has(dir, kinds[k]);
        }
        if (ranks > 0)
            ddp_buf_printf(&found, "%s%s (%d rank%s)", found.len > 0 ? ", " : "",
                           k == 0 ? "flight_<group>.json" : kinds[k], ranks, ranks > 1 ? "s" : "");
    }
    if (found.len > 0)
        ddp_log_info(g->log,
                     "this report is kept in %s/hang_report.txt, each rank's files of it in "
                     "%s/<local rank>/: %s",
                     g->attempt_dir, g->attempt_dir, ddp_buf_str(&found));
    else
        ddp_log_info(g->log, "this report is kept in %s/hang_report.txt", g->attempt_dir);
    ddp_buf_free(&found);
}

/* The table of every node's rows `text` on stderr and in the attempt's hang_report.txt,
 * an event; its verdict into *verdict. */
static void print_report(ddp_hang_watch_t *h, const char *text, ddp_buf_t *verdict)
{
    const ddp_group_t *g = h->g;
    ddp_hang_row_t *rows = NULL;
    size_t n = 0;
    ddp_buf_t table = DDP_BUF_INIT;
    if (ddp_hang_rows_parse(text, &rows, &n) != 0)
        ddp_log_warn(g->log, "a node's hang rows were malformed: the report holds those before");
    ddp_hang_sort(rows, n);
    ddp_hang_table(rows, n, &table);
    /* Nothing for the rows to judge by: what found the hang here (--hang-timeout=auto's
     * rank) says more than they do. */
    if (ddp_hang_verdict(rows, n, verdict) == DDP_HANG_VERDICT_BLIND &&
        h->cause == DDP_HANG_STALLED && g->cfg->hang_auto) {
        ddp_buf_clear(verdict);
        ddp_buf_puts(verdict, h->why);
    }
    ddp_log_error(g->log, "hang report (%s), before anything is stopped:", h->why);
    (void)ddp_write_all(2, table.data, table.len);
    ddp_log_error(g->log, "verdict: %s", ddp_buf_str(verdict));
    say_hang_files(g);
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/hang_report.txt", g->attempt_dir);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd >= 0) {
        ddp_buf_printf(&table, "verdict: %s\n", ddp_buf_str(verdict));
        (void)ddp_write_all(fd, table.data, table.len);
        close(fd);
    }
    ddp_buf_t fields = DDP_BUF_INIT;
    ddp_events_int(&fields, "attempt", g->attempt);
    ddp_events_str(&fields, "reason", h->why);
    ddp_events_int(&fields, "ranks", (long long)n);
    ddp_events_str(&fields, "verdict", ddp_buf_str(verdict));
    ddp_events_emit(&g->events, "hang_report", &fields);
    ddp_buf_free(&fields);
    ddp_buf_free(&table);
    free(rows);
}

/* The report ends (`verdict` NULL where another node printed it or the rows never came),
 * and what waited for it goes on: the deferred stop, else a stall's own. */
static void end_report(ddp_hang_watch_t *h, const char *verdict)
{
    ddp_group_t *g = h->g;
    uv_timer_stop(&h->wait);
    h->phase = HANG_DONE;
    /* Found here, the attempt stops for it (this node's stop, or the round's): the
     * failure of the ranks it names, in the job's report. */
    if (h->cause == DDP_HANG_STALLED && verdict != NULL)
        snprintf(h->message, sizeof h->message,
                 "the job hung (no progress for %.3g s, the limit %.3g s): %s (the hang "
                 "report: %s/hang_report.txt)",
                 h->quiet, h->limit, verdict, g->attempt_dir);
    else if (h->cause == DDP_HANG_STALLED)
        snprintf(h->message, sizeof h->message,
                 "the job hung: %s (the hang report is printed by the node that found it "
                 "first)",
                 h->why);
    if (h->deferred == DEFER_FAILURE) {
        g->ops->fail_round(g, 0);
    } else if (h->deferred == DEFER_REMOTE) {
        ddp_log_warn(g->log, "the round failed on another node (%s)", h->deferred_message);
        g->ops->stop(g, SIGTERM, DDP_STOP_REMOTE);
    } else if (h->cause == DDP_HANG_STALLED && (verdict != NULL || g->rdzv == NULL)) {
        char message[DDP_RDZV_MSG_MAX];
        snprintf(message, sizeof message,
                 "the job hung (no progress for %.3g s, the limit %.3g s): %s", h->quiet, h->limit,
                 verdict != NULL ? verdict : "see the report");
        ddp_log_error(g->log, "%s; stopping it as a failure", message);
        if (g->rdzv != NULL)
            ddp_rdzv_post(g->rdzv, DDP_RDZV_EV_FAILED, message);
        g->ops->stop(g, SIGTERM, DDP_STOP_FAILURE);
    }
    if (g->nrunning == 0)
        g->ops->group_ended(g);
}

void ddp_hang_watch_rows(ddp_hang_watch_t *h, const char *rows)
{
    if (h->phase != HANG_WAITING || rows == NULL)
        return;
    ddp_buf_t verdict = DDP_BUF_INIT;
    print_report(h, rows, &verdict);
    end_report(h, ddp_buf_str(&verdict));
    ddp_buf_free(&verdict);
}

void ddp_hang_watch_reported_elsewhere(ddp_hang_watch_t *h)
{
    if (h->phase != HANG_WAITING)
        return;
    ddp_log_info(h->g->log, "this node's ranks are in the hang report of the node that found "
                            "the hang");
    end_report(h, NULL);
}

void ddp_hang_watch_cancel(ddp_hang_watch_t *h)
{
    if (!ddp_hang_watch_reporting(h))
        return;
    uv_timer_stop(&h->wait);
    h->phase = HANG_DONE;
}

/* What the progress ring in `dir` says (ddp_launch.step(), section()), into buf[cap]; NULL
 * when there is none. *waits: it waits in a (timed) collective. */
static const char *progress_activity(const char *dir, char *buf, size_t cap, bool *waits)
{
    char path[PATH_MAX + 32];
    ddp_progress_ring_t ring;
    double now = ddp_clock_mono();
    snprintf(path, sizeof path, "%s/%s", dir, DDP_PROGRESS_FILE);
    if (ddp_progress_read(path, &ring) != 0)
        return NULL;
    if (ring.last_step_ns > 0)
        snprintf(buf, cap, "ddp_launch.step() #%lld %.1f s ago", (long long)ring.steps,
                 now - (double)ring.last_step_ns / 1e9);
    else
        snprintf(buf, cap, "no ddp_launch.step() yet");
    if (ring.section > 0 && ring.section <= DDP_PROGRESS_SECTIONS) {
        size_t len = strlen(buf);
        snprintf(buf + len, cap - len, ", in section '%s' for %.1f s",
                 ring.sections[ring.section - 1].name, now - (double)ring.section_ns / 1e9);
    }
    *waits = ring.collective_ns > 0 && ring.collective_ns <= now * 1e9;
    if (*waits) {
        size_t len = strlen(buf);
        snprintf(buf + len, cap - len, ", waiting in a collective for %.1f s",
                 now - (double)ring.collective_ns / 1e9);
    }
    return buf;
}

/* The rows of this node's workers: printed (one node) or handed to the rendezvous. Found
 * by --hang-timeout here, the hang's ranks are those not waiting in a collective (auto's
 * verdict has named its own). */
static void collected(ddp_hang_watch_t *h)
{
    ddp_group_t *g = h->g;
    ddp_hang_row_t *rows = calloc((size_t)g->nworkers, sizeof *rows);
    ddp_buf_t text = DDP_BUF_INIT;
    double now = ddp_clock_wall();
    bool name = h->cause == DDP_HANG_STALLED && !g->cfg->hang_auto;
    int named = 0;
    for (int i = 0; rows != NULL && i < g->nworkers; i++) {
        ddp_worker_t *w = &g->workers[i];
        char dir[PATH_MAX];
        bool waits = false;
        ddp_group_worker_dir(g, w, dir, sizeof dir);
        rows[i].rank = w->rank;
        if (ddp_hang_row_from_dir(dir, now, &rows[i]) == 0) {
            waits = rows[i].current != 0 && !rows[i].failed;
        } else {
            char frame[200];
            if (w->running) {
                char activity[120];
                const char *says = progress_activity(dir, activity, sizeof activity, &waits);
                ddp_hang_row_from_proc(w->pid, w->rank, ddp_clock_mono() - active_at(h, i), says,
                                       &rows[i]);
                size_t len = strlen(rows[i].note);
                if (ddp_hang_python_frame(dir, frame, sizeof frame))
                    snprintf(rows[i].note + len, sizeof rows[i].note - len, "; Python in %s",
                             frame);
            } else {
                rows[i].peer = -1;
                snprintf(rows[i].note, sizeof rows[i].note, "no libddp ring; it has ended");
            }
        }
        rows[i].rank = w->rank;
        if (name)
            h->workers[i].named = w->running && !waits;
        named += name && h->workers[i].named;
    }
    /* Every rank of a single node waits in a collective: each is the hang's. */
    for (int i = 0; name && named == 0 && g->rdzv == NULL && i < g->nworkers; i++)
        h->workers[i].named = g->workers[i].running;
    if (rows != NULL)
        ddp_hang_rows_format(rows, (size_t)g->nworkers, &text);
    free(rows);
    if (g->rdzv != NULL) {
        h->phase = HANG_WAITING;
        ddp_rdzv_post_hang(g->rdzv, h->cause != DDP_HANG_ASKED, HANG_GATHER_S, ddp_buf_str(&text));
        uv_timer_start(&h->wait, on_hang_wait, (uint64_t)((HANG_GATHER_S + 5) * 1000), 0);
    } else {
        ddp_buf_t verdict = DDP_BUF_INIT;
        print_report(h, ddp_buf_str(&text), &verdict);
        end_report(h, ddp_buf_str(&verdict));
        ddp_buf_free(&verdict);
    }
    ddp_buf_free(&text);
}

static void on_hang_stacks_done(void *ctx)
{
    ddp_hang_watch_t *h = ctx;
    h->awaited &= ~(unsigned)AWAIT_STACKS;
    if (h->phase == HANG_COLLECTING && h->awaited == 0)
        collected(h);
}

static void on_hang_wait(uv_timer_t *timer)
{
    ddp_hang_watch_t *h = timer->data;
    if (h->phase == HANG_COLLECTING) {
        h->awaited &= ~(unsigned)AWAIT_PAUSE;
        if (h->awaited == 0)
            collected(h);
    } else if (h->phase == HANG_WAITING) {
        ddp_log_warn(h->g->log, "the hang report did not come within %g s", HANG_GATHER_S + 5);
        end_report(h, NULL);
    }
}

/* Whether failure `f` of the attempt is a libddp collective timing out. */
static bool timed_out(const ddp_group_t *g, const ddp_failure_t *f)
{
    char dir[PATH_MAX];
    ddp_hang_row_t row;
    ddp_group_worker_dir(g, &g->workers[f->local_rank], dir, sizeof dir);
    return ddp_hang_row_from_dir(dir, ddp_clock_wall(), &row) == 0 && row.timed_out;
}

bool ddp_hang_watch_defer_failure(ddp_hang_watch_t *h, const ddp_failure_t *f)
{
    /* A collective that timed out: where every rank stands comes first. */
    if (h->phase == HANG_IDLE && timed_out(h->g, f)) {
        char why[128];
        snprintf(why, sizeof why, "rank %d's collective timed out", f->rank);
        ddp_hang_watch_begin(h, DDP_HANG_TIMED_OUT, why, 0, 0, NULL);
    }
    /* During a report a failure's stop waits for it (the round fails with the first
     * failure: there is none before a report starts, which a failure would stop). */
    if (!ddp_hang_watch_reporting(h))
        return false;
    h->deferred = DEFER_FAILURE;
    return true;
}

bool ddp_hang_watch_defer_remote(ddp_hang_watch_t *h, const char *message)
{
    if (!ddp_hang_watch_reporting(h))
        return false;
    if (h->deferred == DEFER_NONE)
        h->deferred = DEFER_REMOTE; /* (a failure's stop comes first) */
    snprintf(h->deferred_message, sizeof h->deferred_message, "%s", message);
    return true;
}

void ddp_hang_watch_asked(ddp_hang_watch_t *h)
{
    if (h->g->state == DDP_AGENT_RUNNING && h->phase == HANG_IDLE)
        ddp_hang_watch_begin(h, DDP_HANG_ASKED, "another node found a hang", 0, 0, NULL);
}

/* --hang-timeout: a worker with a ring progresses when it finishes a collective; one
 * without, when it writes output or uses a tenth of a CPU. None for the timeout: a hang. */
static void on_hang_timer(uv_timer_t *timer)
{
    ddp_hang_watch_t *h = timer->data;
    const ddp_group_t *g = h->g;
    double now = ddp_clock_mono(), idle = -1; /* a step of the wall clock is no hang */
    double interval = (double)uv_timer_get_repeat(timer) / 1000.0;
    if (g->state != DDP_AGENT_RUNNING || h->phase != HANG_IDLE || g->nrunning == 0 ||
        ddp_pause_stopped(h->pause))
        return;
    for (int i = 0; i < g->nworkers; i++) {
        const ddp_worker_t *w = &g->workers[i];
        watched_t *v = &h->workers[i];
        char dir[PATH_MAX];
        bool found, active;
        if (!w->running)
            continue;
        ddp_group_worker_dir(g, w, dir, sizeof dir);
        uint64_t progress = ddp_hang_progress(dir, &found);
        if (found) {
            active = !v->has_ring || progress != v->progress;
            v->has_ring = true;
            v->progress = progress;
        } else {
            double cpu = ddp_hang_cpu_seconds(w->pid);
            uint64_t output = ddp_group_worker_output(g, w);
            active = output != v->output || cpu - v->cpu >= 0.1 * interval;
            v->cpu = cpu;
            v->output = output;
        }
        if (active)
            v->active_at = now;
        double quiet = now - active_at(h, i);
        if (idle < 0 || quiet < idle)
            idle = quiet;
    }
    if (idle >= g->cfg->hang_timeout) {
        char why[160];
        snprintf(why, sizeof why, "no rank has made progress for %.0f s (--hang-timeout)", idle);
        ddp_hang_watch_begin(h, DDP_HANG_STALLED, why, idle, g->cfg->hang_timeout, NULL);
    }
}

void ddp_hang_watch_attempt(ddp_hang_watch_t *h)
{
    const ddp_group_t *g = h->g;
    double now = ddp_clock_mono();
    h->phase = HANG_IDLE;
    h->deferred = DEFER_NONE;
    h->message[0] = '\0';
    for (int i = 0; i < g->nworkers; i++)
        h->workers[i] = (watched_t){.active_at = now};
    if (g->cfg->hang_timeout > 0) {
        /* A few looks per timeout, at most one a second. */
        double every = g->cfg->hang_timeout / 4 < 1 ? g->cfg->hang_timeout / 4 : 1;
        uint64_t ms = every * 1000 < 50 ? 50 : (uint64_t)(every * 1000);
        uv_timer_start(&h->timer, on_hang_timer, ms, ms);
    }
}

void ddp_hang_watch_stop(ddp_hang_watch_t *h)
{
    uv_timer_stop(&h->timer);
}
