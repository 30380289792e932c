/* What a launcher says of a job's end beyond the report itself (see agent/end_notes.h):
 * a worker the kernel's OOM killer ended, the root cause's last lines of stderr where
 * they went to its log file only, the ranks the launcher's own stop ended, and a Python
 * without torch; and while some ranks have finished and others run, who waits for whom.
 * Runs on the loop thread (the report after it). */
#include "agent/end_notes.h"

#include "config/pyscan.h"
#include "host/signals.h"
#include "io.h"
#include "spawn/worker_env.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define WAIT_EVERY_S 300 /* after --finished-wait-notice, then every WAIT_EVERY_S s */

struct ddp_end_notes_s {
    ddp_group_t *g;
    long long oom_kills;  /* the memory cgroup's OOM kills when the attempt started; -1 */
    bool left_early_said; /* this attempt's ranks that finished first */
    /* Some workers finished while others run (here, or on other nodes): said after
     * --finished-wait-notice, then every WAIT_EVERY_S. */
    uv_timer_t wait_timer;
    uint64_t *output_at_success; /* by local rank: its output when the first finished */
    /* When every worker here succeeded and the job went on waiting for other nodes'
     * (monotonic); < 0: not so waiting. */
    double nodes_wait_since;
};

static long long oom_kills(char *where, size_t cap);

int ddp_end_notes_new(ddp_group_t *g, ddp_end_notes_t **out)
{
    ddp_end_notes_t *n = calloc(1, sizeof *n);
    if (n == NULL || (n->output_at_success =
                          calloc((size_t)g->nworkers + 1, sizeof *n->output_at_success)) == NULL) {
        free(n);
        return -ENOMEM;
    }
    n->g = g;
    n->oom_kills = -1;
    n->nodes_wait_since = -1;
    uv_timer_init(g->loop, &n->wait_timer);
    n->wait_timer.data = n;
    *out = n;
    return 0;
}

void ddp_end_notes_close(ddp_end_notes_t *n)
{
    uv_close((uv_handle_t *)&n->wait_timer, NULL);
}

void ddp_end_notes_free(ddp_end_notes_t *n)
{
    if (n == NULL)
        return;
    free(n->output_at_success);
    free(n);
}

void ddp_end_notes_attempt(ddp_end_notes_t *n)
{
    n->oom_kills = oom_kills(NULL, 0);
    n->left_early_said = false;
    n->nodes_wait_since = -1;
}

void ddp_end_notes_stop(ddp_end_notes_t *n)
{
    uv_timer_stop(&n->wait_timer);
}

/* After --finished-wait-notice (not at all where 0), then every WAIT_EVERY_S. */
static void start_wait_timer(ddp_end_notes_t *n, uv_timer_cb cb)
{
    double first = n->g->cfg->finished_wait_notice;
    if (first > 0)
        uv_timer_start(&n->wait_timer, cb, (uint64_t)(first * 1000 + 0.5), WAIT_EVERY_S * 1000);
}

/* Some workers finished and others still run (a rank stuck, or only slower): said once a
 * while, so a silent job is not taken for a hung one, nor the reverse. */
static void on_wait_timer(uv_timer_t *timer)
{
    ddp_end_notes_t *n = timer->data;
    const ddp_group_t *g = n->g;
    if (g->state != DDP_AGENT_RUNNING || g->nrunning == 0)
        return;
    ddp_buf_t done = DDP_BUF_INIT, running = DDP_BUF_INIT;
    int ndone = ddp_group_ranks_where(g, false, &done);
    int nrunning = ddp_group_ranks_where(g, true, &running);
    bool silent = true; /* nothing written by those running since the first finished */
    for (int i = 0; i < g->nworkers; i++)
        if (g->workers[i].running &&
            ddp_group_worker_output(g, &g->workers[i]) != n->output_at_success[i])
            silent = false;
    /* Silent since: more likely a wait that never ends than work. */
    ddp_log(g->log, silent ? DDP_LOG_WARN : DDP_LOG_INFO,
            "rank%s %s finished; waiting for rank%s %s (still running for %.0f s)%s",
            ndone > 1 ? "s" : "", ddp_buf_str(&done), nrunning > 1 ? "s" : "",
            ddp_buf_str(&running), ddp_clock_mono() - g->first_succeeded,
            silent
                ? "; nothing written since the first finished: a rank waiting in a collective for "
                  "a finished one (a loop left early on some ranks, data of uneven length) waits "
                  "for good"
                : "");
    ddp_buf_free(&done);
    ddp_buf_free(&running);
}

void ddp_end_notes_first_succeeded(ddp_end_notes_t *n)
{
    const ddp_group_t *g = n->g;
    for (int i = 0; i < g->nworkers; i++)
        if (g->workers[i].running)
            n->output_at_success[i] = ddp_group_worker_output(g, &g->workers[i]);
    start_wait_timer(n, on_wait_timer);
}

/* Every worker here succeeded, and the job waits for other nodes' workers: said once that
 * has lasted --finished-wait-notice (the ranks of a DDP job end within seconds of each other), then
 * every WAIT_EVERY_S. */
static void on_nodes_wait_timer(uv_timer_t *timer)
{
    ddp_end_notes_t *n = timer->data;
    const ddp_group_t *g = n->g;
    if (g->state != DDP_AGENT_WAITING || n->nodes_wait_since < 0)
        return;
    ddp_buf_t done = DDP_BUF_INIT;
    int ndone = ddp_group_ranks_where(g, false, &done);
    double waited = ddp_clock_mono() - n->nodes_wait_since;
    bool first = waited < g->cfg->finished_wait_notice + WAIT_EVERY_S / 2;
    ddp_log(g->log, first ? DDP_LOG_WARN : DDP_LOG_INFO,
            "this node's rank%s %s finished (exit 0) %.0f s ago; the job waits for the other "
            "nodes' workers%s",
            ndone > 1 ? "s" : "", ddp_buf_str(&done), waited,
            first ? ": were they waiting in a collective for these ranks (a loop left early on "
                    "some ranks, data of uneven length), they would wait for good; their "
                    "nodes' logs say whether they still train"
                  : "");
    ddp_buf_free(&done);
}

void ddp_end_notes_nodes_wait(ddp_end_notes_t *n)
{
    n->nodes_wait_since = ddp_clock_mono();
    start_wait_timer(n, on_nodes_wait_timer);
}

/* The OOM kills of this launcher's memory cgroup, which its workers share (cgroup v2's
 * memory.events, v1's memory.oom_control; its path into where[cap] unless NULL); -1 where
 * neither can be read. */
static long long oom_kills(char *where, size_t cap)
{
    char line[512], path[PATH_MAX];
    long long kills = -1;
    FILE *f = fopen("/proc/self/cgroup", "r");
    while (f != NULL && kills < 0 && fgets(line, sizeof line, f) != NULL) {
        line[strcspn(line, "\n")] = '\0';
        char *rel = strrchr(line, ':');
        bool v1 = strstr(line, ":memory:") != NULL, v2 = strncmp(line, "0::", 3) == 0;
        if (rel == NULL || (!v1 && !v2))
            continue;
        snprintf(path, sizeof path,
                 v1 ? "/sys/fs/cgroup/memory%s/memory.oom_control"
                    : "/sys/fs/cgroup%s/memory.events",
                 rel + 1);
        FILE *counts = fopen(path, "r");
        char entry[128];
        while (counts != NULL && fgets(entry, sizeof entry, counts) != NULL)
            if (sscanf(entry, "oom_kill %lld", &kills) == 1 && where != NULL)
                snprintf(where, cap, "%s", path);
        if (counts != NULL)
            fclose(counts);
    }
    if (f != NULL)
        fclose(f);
    return kills;
}

/* A worker killed by SIGKILL that no stop of ours sent, while its memory cgroup counted
 * an OOM kill: the kernel's OOM killer ended it. The message says so, where to read it,
 * and how much memory the worker had. NULL otherwise (or out of memory). */
char *ddp_end_notes_oom_message(ddp_end_notes_t *n, const ddp_worker_t *w, int status)
{
    char where[PATH_MAX];
    if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL || n->g->sent_sigkill ||
        n->oom_kills < 0)
        return NULL;
    long long now = oom_kills(where, sizeof where);
    if (now <= n->oom_kills)
        return NULL;
    char *text;
    if (asprintf(&text,
                 "out of memory: the kernel's OOM killer ended it (oom_kill %lld -> %lld in %s); "
                 "its peak RSS was %ld MiB",
                 n->oom_kills, now, where, w->peak_rss_kb / 1024) < 0)
        return NULL;
    n->oom_kills = now; /* the next one is another's */
    return text;
}

/* A Python script that imports torch failed without an error file (@record writes one
 * once torch is imported): if the interpreter has no torch at all (find_spec, which
 * imports nothing), say which interpreter ran it and how to pick another. Many machines
 * have a python3 on PATH without torch. */
static void say_if_torch_is_missing(const ddp_group_t *g, bool python)
{
    const ddp_failure_t *root = &g->failures[ddp_report_root(g->failures, g->nfailures)];
    char *text = NULL, cmd[PATH_MAX + 200];
    size_t len;
    if (!python || g->cfg->module || root->host != NULL || root->exitcode != 1 ||
        root->message != NULL || strchr(g->program, '\'') != NULL ||
        ddp_read_file(g->cfg->script, DDP_PYSCAN_MAX, &text, &len) != 0)
        return;
    bool imports = ddp_pyscan_imports(text, len, "torch");
    free(text);
    if (!imports)
        return;
    snprintf(cmd, sizeof cmd,
             "timeout 10 '%s' -c 'import importlib.util, sys; "
             "sys.exit(3 if importlib.util.find_spec(\"torch\") is None else 0)' "
             ">/dev/null 2>&1",
             g->program);
    int status = system(cmd);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 3)
        ddp_log_error(
            g->log,
            "the workers' Python interpreter %s has no module named 'torch': set "
            "PYTHON_EXEC to a python that has it (for example PYTHON_EXEC=/usr/bin/python3 "
            "where Debian's python3-torch is installed)",
            g->program);
}

#define TAIL_LINES 10
#define TAIL_BYTES 4096

/* The root cause's stderr went to its log file only (--redirects without --tee): its last
 * lines follow the report, since they were not on the console; in the launcher's lines,
 * with escape sequences and control characters shown escaped (ddp_buf_printable). */
static void say_stderr_tail(const ddp_group_t *g)
{
    const ddp_failure_t *root = &g->failures[ddp_report_root(g->failures, g->nfailures)];
    int local_rank = root->local_rank;
    if (root->host != NULL) /* another node's: its files are there */
        return;
    if (g->attempt_dir == NULL || !(ddp_std_for(&g->cfg->redirects, local_rank) & DDP_STD_ERR) ||
        (ddp_std_for(&g->cfg->tee, local_rank) & DDP_STD_ERR))
        return;
    char path[PATH_MAX], tail[TAIL_BYTES + 1];
    snprintf(path, sizeof path, "%s/%d/stderr.log", g->attempt_dir, local_rank);
    int fd = ddp_open_worker_file(path);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || st.st_size == 0) {
        if (fd >= 0)
            close(fd);
        return;
    }
    off_t from = st.st_size > TAIL_BYTES ? st.st_size - TAIL_BYTES : 0;
    ssize_t n = pread(fd, tail, TAIL_BYTES, from);
    close(fd);
    if (n <= 0)
        return;
    tail[n] = '\0';
    /* The last TAIL_LINES lines (a partial first line of the window dropped). */
    char *start = tail, *end = tail + n;
    if (from > 0)
        start = strchr(tail, '\n') != NULL ? strchr(tail, '\n') + 1 : end;
    if (end > start && end[-1] == '\n')
        *--end = '\0';
    char *p = end;
    for (int count = 0; p > start; p--)
        if (p[-1] == '\n' && ++count == TAIL_LINES)
            break;
    start = p;
    ddp_buf_t out = DDP_BUF_INIT;
    ddp_buf_printf(&out, "the last lines of rank %d's stderr (%s):\n", root->rank, path);
    for (char *line = start; *line != '\0';) {
        size_t len = strcspn(line, "\n");
        ddp_buf_puts(&out, "  | ");
        ddp_buf_printable(&out, line, len, false);
        ddp_buf_puts(&out, "\n");
        line += len + (line[len] == '\n');
    }
    (void)ddp_write_all(2, out.data, out.len);
    ddp_buf_free(&out);
}

/* The ranks the launcher's stop ended, told apart from the failures above. */
static void say_stopped(const ddp_group_t *g)
{
    ddp_buf_t ranks = DDP_BUF_INIT;
    char name[32];
    int n = 0;
    for (int i = 0; i < g->nworkers; i++) {
        if (!g->workers[i].stopped)
            continue;
        if (n++ < 16)
            ddp_buf_printf(&ranks, "%s%d", ranks.len > 0 ? ", " : "", g->workers[i].rank);
    }
    if (n > 16)
        ddp_buf_puts(&ranks, ", ...");
    if (n > 0)
        ddp_log_info(g->log, "stopped by ddp-launch, not failures of their own: rank%s %s (%s%s)",
                     n > 1 ? "s" : "", ddp_buf_str(&ranks),
                     ddp_signal_name(g->sent_signal, name, sizeof name),
                     g->sent_sigkill ? ", then SIGKILL" : "");
    for (int i = 0; i < g->nworkers; i++) {
        const ddp_worker_t *w = &g->workers[i];
        if (w->stopped && w->stopped_error != NULL)
            ddp_log_info(g->log, "rank %d, stopped, had written its own error.json first: %.300s",
                         w->rank, w->stopped_error);
    }
    ddp_buf_free(&ranks);
}

/* This node's ranks that finished (exit 0) while others ran, `ago` s before what `before`
 * names: the likely cause of a failure that came after (a loop left early on some ranks),
 * though it is another rank's. */
static void say_left_early(const ddp_group_t *g, double ago, const char *before)
{
    ddp_buf_t done = DDP_BUF_INIT;
    int n = ddp_group_ranks_where(g, false, &done);
    ddp_log_warn(g->log,
                 "%srank%s %s had finished (exit 0) %.1f s before %s, while other ranks ran: a "
                 "rank that leaves the training loop early (a break on some ranks, data of "
                 "uneven length) makes the collectives of the others fail (gloo: \"Connection "
                 "closed by peer\") or wait for good (NCCL)",
                 g->rdzv != NULL ? "this node's " : "", n > 1 ? "s" : "", ddp_buf_str(&done),
                 ago > 0 ? ago : 0.0, before);
    ddp_buf_free(&done);
}

void ddp_end_notes_left_early(ddp_end_notes_t *n)
{
    const ddp_group_t *g = n->g;
    if (n->left_early_said || g->first_succeeded < 0 || g->nfailures > 0)
        return; /* (this node's report says it) */
    say_left_early(g, ddp_clock_mono() - g->first_succeeded, "the round failed on another node");
    n->left_early_said = true; /* once an attempt */
}

/* After this node's report: its ranks that finished before the root cause failed. */
static void say_succeeded_first(const ddp_end_notes_t *n)
{
    const ddp_group_t *g = n->g;
    if (n->left_early_said || g->first_succeeded < 0 || g->nfailures == 0)
        return;
    const ddp_failure_t *root = &g->failures[ddp_report_root(g->failures, g->nfailures)];
    /* The finish is when its exit was seen, the failure when its error.json was written
     * (else its exit seen): a failure the finish ended comes a moment later, or earlier. */
    double after = root->timestamp - g->first_succeeded_wall;
    char before[64];
    snprintf(before, sizeof before, "rank %d's failure", root->rank);
    if (root->host == NULL && after >= -1.0)
        say_left_early(g, after, before);
}

void ddp_end_notes_report(ddp_end_notes_t *n, bool elsewhere)
{
    const ddp_group_t *g = n->g;
    ddp_buf_t report = DDP_BUF_INIT;
    bool python = g->cfg->run_path || !g->cfg->no_python;
    if (elsewhere) {
        ddp_buf_t ranks = DDP_BUF_INIT;
        for (size_t i = 0; i < g->nfailures; i++)
            ddp_buf_printf(&ranks, "%s%d", i ? ", " : "", g->failures[i].rank);
        ddp_log_error(g->log,
                      "this node's failures (rank%s %s) are in the job's failure report, printed "
                      "by the launcher serving the store at %s:%d",
                      g->nfailures > 1 ? "s" : "", ddp_buf_str(&ranks), g->cfg->master_addr,
                      g->cfg->master_port);
        ddp_buf_free(&ranks);
    } else if (ddp_buf_puts(&report, "\n") == 0 &&
               ddp_report_format(&report, ddp_worker_entry_name(g->cfg), g->host, g->failures,
                                 g->nfailures, python) == 0) {
        (void)ddp_write_all(2, report.data, report.len);
    }
    ddp_buf_free(&report);
    say_stderr_tail(g);
    say_succeeded_first(n);
    say_stopped(g);
    say_if_torch_is_missing(g, python);
}
