/* Hang reports of one node (see agent_internal.h; the report's parts in hang.c, the
 * stack tools in stacks.c):
 *
 *   IDLE        a libddp collective timed out, --hang-timeout passed with no progress,
 *               or another node asked  --> COLLECTING (the dump signal to the workers
 *               that catch it, --hang-dump's tools started)
 *   COLLECTING  the pause for the workers' dumps has passed and the tools have ended
 *               --> one node: the report, then IDLE; several: WAITING (rows to the
 *               rendezvous)
 *   WAITING     every node's rows (the reporter prints them), another node's report,
 *               or the bound  --> IDLE
 *
 * One report an attempt. A failure or a failed round met during it waits for its end
 * (deferred_*); a signal or the job's end cancels it. */
#include "agent_internal.h"

#include "hang.h"
#include "io.h"
#include "progress.h"
#include "stacks.h"
#include "worker_spec.h"

#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define HANG_PAUSE_MS 500  /* for the workers' own dumps */
#define HANG_TOOLS_S  15.0 /* each stack tool's limit */
#define HANG_GATHER_S 10.0 /* the reporter's wait for the other nodes' rows */

uint64_t ddp_agent_worker_output(const ddp_agent_t *a, const ddp_worker_t *w)
{
    uint64_t bytes = ddp_output_bytes(w->out) + ddp_output_bytes(w->err);
    for (int k = 0; k < 2 && a->attempt_dir != NULL; k++) {
        char path[PATH_MAX];
        struct stat st;
        snprintf(path, sizeof path, "%s/%d/%s", a->attempt_dir, w->local_rank,
                 k == 0 ? "stdout.log" : "stderr.log");
        if (ddp_stat_worker_file(path, &st) == 0 && S_ISREG(st.st_mode))
            bytes += (uint64_t)st.st_size;
    }
    return bytes;
}

static void on_hang_stacks_done(void *ctx);
static void on_hang_wait(uv_timer_t *timer);

void ddp_agent_hang_begin(ddp_agent_t *a, bool found, bool stalled, const char *why)
{
    a->hang = HANG_COLLECTING;
    a->hang_found = found;
    a->hang_stalled = stalled;
    a->hang_paused = false;
    a->hang_stacks_done = true;
    snprintf(a->hang_why, sizeof a->hang_why, "%s", why);
    uv_timer_stop(&a->hang_timer);
    ddp_log_warn(a->log, "%s: collecting where every rank stands before stopping anything", why);
    pid_t *pids = calloc((size_t)a->nworkers, sizeof *pids);
    char **paths = calloc((size_t)a->nworkers + 1, sizeof *paths);
    int n = 0;
    for (int i = 0; i < a->nworkers; i++) {
        ddp_worker_t *w = &a->workers[i];
        if (!w->running)
            continue;
        if (ddp_hang_catches(w->pid, a->dump_signal))
            kill(w->pid, a->dump_signal);
        if (pids != NULL && paths != NULL &&
            asprintf(&paths[n], "%s/%d/stack.txt", a->attempt_dir, w->local_rank) > 0)
            pids[n++] = w->pid;
    }
    const char *tool = NULL;
    if (a->cfg->hang_dump && pids != NULL && paths != NULL &&
        ddp_stacks_start(&a->loop, pids, paths, n, HANG_TOOLS_S, on_hang_stacks_done, a, &tool) ==
            0) {
        a->hang_stacks_done = false;
        if (tool == NULL)
            ddp_log_warn(a->log, "--hang-dump: no native stacks: libunwind cannot be loaded "
                                 "(Debian's libunwind8) and neither eu-stack (elfutils) nor gdb "
                                 "is on PATH");
        else
            ddp_log_info(a->log, "--hang-dump: native stacks by %s", tool);
    }
    ddp_strv_free(paths);
    free(pids);
    ddp_buf_t fields = DDP_BUF_INIT;
    ddp_events_int(&fields, "attempt", a->attempt);
    ddp_events_str(&fields, "reason", why);
    ddp_events_emit(&a->events, "hang_suspected", &fields);
    ddp_buf_free(&fields);
    uv_timer_start(&a->hang_wait, on_hang_wait, HANG_PAUSE_MS, 0);
}

/* Where the report's files are: hang_report.txt, and of each rank's those some local rank
 * wrote: libddp's flight recorder (flight_<group>.json), the native and Python stacks of
 * --hang-dump. */
static void say_hang_files(const ddp_agent_t *a)
{
    static const char *const kinds[] = {"flight_*.json", "stack.txt", "python_stack.txt"};
    ddp_buf_t found = DDP_BUF_INIT;
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        int ranks = 0;
        for (int i = 0; i < a->nworkers; i++) {
            char dir[PATH_MAX];
            ddp_agent_worker_dir(a, &a->workers[i], dir, sizeof dir);
            ranks += ddp_hang_dir_has(dir, kinds[k]);
        }
        if (ranks > 0)
            ddp_buf_printf(&found, "%s%s (%d rank%s)", found.len > 0 ? ", " : "",
                           k == 0 ? "flight_<group>.json" : kinds[k], ranks, ranks > 1 ? "s" : "");
    }
    if (found.len > 0)
        ddp_log_info(a->log,
                     "this report is kept in %s/hang_report.txt, each rank's files of it in "
                     "%s/<local rank>/: %s",
                     a->attempt_dir, a->attempt_dir, ddp_buf_str(&found));
    else
        ddp_log_info(a->log, "this report is kept in %s/hang_report.txt", a->attempt_dir);
    ddp_buf_free(&found);
}

/* The table on stderr and in the attempt's hang_report.txt, an event. */
void ddp_agent_hang_print(ddp_agent_t *a, const char *text, ddp_buf_t *verdict)
{
    ddp_hang_row_t *rows = NULL;
    size_t n = 0;
    ddp_buf_t table = DDP_BUF_INIT;
    if (ddp_hang_rows_parse(text, &rows, &n) != 0)
        ddp_log_warn(a->log, "a node's hang rows were malformed: the report holds those before");
    ddp_hang_sort(rows, n);
    ddp_hang_table(rows, n, &table);
    ddp_hang_verdict(rows, n, verdict);
    /* No libddp ring to judge by: what found the hang here (--hang-timeout=auto's rank) says
     * more than the rows. */
    if (a->hang_found && strncmp(ddp_buf_str(verdict), "no rank runs libddp", 19) == 0 &&
        strstr(a->hang_why, "--hang-timeout=auto") != NULL) {
        ddp_buf_clear(verdict);
        ddp_buf_puts(verdict, a->hang_why);
    }
    ddp_log_error(a->log, "hang report (%s), before anything is stopped:", a->hang_why);
    (void)ddp_write_all(2, table.data, table.len);
    ddp_log_error(a->log, "verdict: %s", ddp_buf_str(verdict));
    say_hang_files(a);
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/hang_report.txt", a->attempt_dir);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd >= 0) {
        ddp_buf_printf(&table, "verdict: %s\n", ddp_buf_str(verdict));
        (void)ddp_write_all(fd, table.data, table.len);
        close(fd);
    }
    ddp_buf_t fields = DDP_BUF_INIT;
    ddp_events_int(&fields, "attempt", a->attempt);
    ddp_events_str(&fields, "reason", a->hang_why);
    ddp_events_int(&fields, "ranks", (long long)n);
    ddp_events_str(&fields, "verdict", ddp_buf_str(verdict));
    ddp_events_emit(&a->events, "hang_report", &fields);
    ddp_buf_free(&fields);
    ddp_buf_free(&table);
    free(rows);
}

void ddp_agent_hang_end(ddp_agent_t *a, const char *verdict)
{
    uv_timer_stop(&a->hang_wait);
    a->hang = HANG_IDLE;
    a->hang_done = true;
    /* Found here, the attempt stops for it (this node's stop, or the round's): the
     * failure of the ranks it names, in the job's report. */
    if (a->hang_found && a->hang_stalled && verdict != NULL)
        snprintf(a->hang_message, sizeof a->hang_message,
                 "the job hung (no progress for %.3g s): %s (the hang report: "
                 "%s/hang_report.txt)",
                 a->hang_limit, verdict, a->attempt_dir);
    else if (a->hang_found && a->hang_stalled)
        snprintf(a->hang_message, sizeof a->hang_message,
                 "the job hung: %s (the hang report is printed by the node that found it "
                 "first)",
                 a->hang_why);
    if (a->deferred_failure) {
        ddp_agent_fail_round(a, 0);
    } else if (a->deferred_remote) {
        ddp_log_warn(a->log, "the round failed on another node (%s)", a->deferred_message);
        if (a->nrunning > 0)
            ddp_agent_begin_stop(a, SIGTERM, STOP_REMOTE);
        else
            a->stop_reason = STOP_REMOTE;
    } else if (a->hang_stalled && (verdict != NULL || a->rdzv == NULL)) {
        char message[DDP_RDZV_MSG_MAX];
        snprintf(message, sizeof message, "the job hung (no progress for %.3g s): %s",
                 a->hang_limit, verdict != NULL ? verdict : "see the report");
        ddp_log_error(a->log, "%s; stopping it as a failure", message);
        if (a->rdzv != NULL)
            ddp_rdzv_post(a->rdzv, DDP_RDZV_EV_FAILED, message);
        if (a->nrunning > 0)
            ddp_agent_begin_stop(a, SIGTERM, STOP_FAILURE);
        else
            a->stop_reason = STOP_FAILURE;
    }
    if (a->nrunning == 0)
        ddp_agent_group_finished(a);
}

void ddp_agent_hang_cancel(ddp_agent_t *a)
{
    uv_timer_stop(&a->hang_wait);
    a->hang = HANG_IDLE;
    a->hang_done = true;
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
static void hang_collected(ddp_agent_t *a)
{
    ddp_hang_row_t *rows = calloc((size_t)a->nworkers, sizeof *rows);
    ddp_buf_t text = DDP_BUF_INIT;
    double now = ddp_clock_wall();
    bool name = a->hang_found && a->hang_stalled && !a->cfg->hang_auto;
    int named = 0;
    for (int i = 0; rows != NULL && i < a->nworkers; i++) {
        ddp_worker_t *w = &a->workers[i];
        char dir[PATH_MAX];
        bool waits = false;
        ddp_agent_worker_dir(a, w, dir, sizeof dir);
        if (ddp_hang_row_from_dir(dir, now, &rows[i]) == 0) {
            waits = rows[i].current != 0 && !rows[i].failed;
        } else {
            char frame[200];
            if (w->running) {
                char activity[120];
                const char *says = progress_activity(dir, activity, sizeof activity, &waits);
                ddp_hang_row_from_proc(w->pid, w->rank, ddp_clock_mono() - w->active_at, says,
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
            w->hung = w->running && !waits;
        named += name && w->hung;
    }
    /* Every rank of a single node waits in a collective: each is the hang's. */
    for (int i = 0; name && named == 0 && a->rdzv == NULL && i < a->nworkers; i++)
        a->workers[i].hung = a->workers[i].running;
    if (rows != NULL)
        ddp_hang_rows_format(rows, (size_t)a->nworkers, &text);
    free(rows);
    if (a->rdzv != NULL) {
        a->hang = HANG_WAITING;
        ddp_rdzv_post_hang(a->rdzv, a->hang_found, HANG_GATHER_S, ddp_buf_str(&text));
        uv_timer_start(&a->hang_wait, on_hang_wait, (uint64_t)((HANG_GATHER_S + 5) * 1000), 0);
    } else {
        ddp_buf_t verdict = DDP_BUF_INIT;
        ddp_agent_hang_print(a, ddp_buf_str(&text), &verdict);
        ddp_agent_hang_end(a, ddp_buf_str(&verdict));
        ddp_buf_free(&verdict);
    }
    ddp_buf_free(&text);
}

static void on_hang_stacks_done(void *ctx)
{
    ddp_agent_t *a = ctx;
    a->hang_stacks_done = true;
    if (a->hang == HANG_COLLECTING && a->hang_paused)
        hang_collected(a);
}

static void on_hang_wait(uv_timer_t *timer)
{
    ddp_agent_t *a = timer->data;
    if (a->hang == HANG_COLLECTING) {
        a->hang_paused = true;
        if (a->hang_stacks_done)
            hang_collected(a);
    } else if (a->hang == HANG_WAITING) {
        ddp_log_warn(a->log, "the hang report did not come within %g s", HANG_GATHER_S + 5);
        ddp_agent_hang_end(a, NULL);
    }
}

/* --hang-timeout: a worker with a ring progresses when it finishes a collective; one
 * without, when it writes output or uses a tenth of a CPU. None for the timeout: a hang. */
static void on_hang_timer(uv_timer_t *timer)
{
    ddp_agent_t *a = timer->data;
    double now = ddp_clock_mono(), idle = -1; /* a step of the wall clock is no hang */
    double interval = (double)uv_timer_get_repeat(timer) / 1000.0;
    if (a->state != AGENT_RUNNING || a->hang != HANG_IDLE || a->hang_done || a->nrunning == 0 ||
        a->paused)
        return;
    for (int i = 0; i < a->nworkers; i++) {
        ddp_worker_t *w = &a->workers[i];
        char dir[PATH_MAX];
        bool found, active;
        if (!w->running)
            continue;
        ddp_agent_worker_dir(a, w, dir, sizeof dir);
        uint64_t progress = ddp_hang_progress(dir, &found);
        if (found) {
            active = !w->has_ring || progress != w->progress;
            w->has_ring = true;
            w->progress = progress;
        } else {
            double cpu = ddp_hang_cpu_seconds(w->pid);
            uint64_t output = ddp_agent_worker_output(a, w);
            active = output != w->output || cpu - w->cpu >= 0.1 * interval;
            w->cpu = cpu;
            w->output = output;
        }
        if (active)
            w->active_at = now;
        if (idle < 0 || now - w->active_at < idle)
            idle = now - w->active_at;
    }
    if (idle >= a->cfg->hang_timeout) {
        char why[160];
        snprintf(why, sizeof why, "no rank has made progress for %.0f s (--hang-timeout)", idle);
        a->hang_limit = a->cfg->hang_timeout;
        ddp_agent_hang_begin(a, true, true, why);
    }
}

void ddp_agent_hang_watch(ddp_agent_t *a, uint64_t ms)
{
    uv_timer_start(&a->hang_timer, on_hang_timer, ms, ms);
}
