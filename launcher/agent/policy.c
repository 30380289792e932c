/* The restart policy (see agent/policy.h): what comes after a group's end, and
 * whether a failed attempt made progress and when the job cannot: --progress-file's
 * value, libddp's completed collectives, and where neither tells, attempts that fail the
 * same way at their start; whether this node leaves the job. Runs on the loop thread. */
#include "agent/policy.h"

#include "diagnose/hang.h"
#include "error.h"
#include "host/proc.h"
#include "io.h"
#include "rdzv/rdzv.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#define PROGRESS_FILE_MAX 4096 /* bytes: an integer and some room */
#define SHOWN_MAX         40   /* bytes of what it holds, in the line that says so */

#define PROGRESS_READ_S 3.0 /* s: a read of --progress-file that takes longer is given up */

/* --progress-file's value where it cannot be read as an integer. */
#define PROGRESS_UNREADABLE (-2)

/* A read of --progress-file, off the loop (libuv's pool, the file read by a child of its
 * own: a file system that does not answer holds neither the loop nor a pool thread). */
typedef struct {
    uv_work_t work;
    ddp_policy_t *p; /* NULL once the policy is freed: the read's end frees it alone */
    char *path;
    int cancel_fd; /* an eventfd: written to give the read up */
    int err;       /* ddp_proc_read_file_bounded's */
    char *text;
    size_t len;
    bool given_up; /* the cancel_fd was written */
} progress_read_t;

struct ddp_policy_s {
    ddp_group_t *g;
    int failed_rounds; /* rounds in a row in which this node's own workers failed */
    /* Progress between failed attempts (--max-no-progress-restarts). */
    int no_progress;              /* failed attempts in a row without progress */
    long long last_progress;      /* --progress-file's value after the last attempt; -1: none yet */
    bool progress_file_said;      /* that --progress-file cannot be read as an integer */
    progress_read_t *reading;     /* the read under way, or NULL */
    bool baseline_read;           /* the first read, the progress the job starts from, ended */
    bool measure_wanted;          /* the group's end waits for a read (ops->progress_read) */
    long long measured;           /* the last read's value (as progress_file_value's) */
    bool no_progress_budget_said; /* at the first restart: --max-no-progress-restarts */
    /* Where nothing tells progress: attempts in a row that failed the same way at their
     * start (within START_FAILURE_S), and how (their root cause's status and text). */
    int same_failures;
    char *failed_as;
};

int ddp_policy_new(ddp_group_t *g, ddp_policy_t **out)
{
    ddp_policy_t *p = calloc(1, sizeof *p);
    if (p == NULL)
        return -ENOMEM;
    p->g = g;
    p->last_progress = -1;
    p->measured = PROGRESS_UNREADABLE;
    *out = p;
    return 0;
}

void ddp_policy_free(ddp_policy_t *p)
{
    if (p == NULL)
        return;
    if (p->reading != NULL) { /* its end, on the loop or never, frees it */
        uint64_t one = 1;
        p->reading->p = NULL;
        while (write(p->reading->cancel_fd, &one, sizeof one) < 0 && errno == EINTR)
            ;
    }
    free(p->failed_as);
    free(p);
}

/* What `text` (len bytes) begins with, for a line: its first SHOWN_MAX bytes less trailing
 * blanks, as a terminal may show them (ddp_buf_printable_cut). */
static void show_text(const char *text, size_t len, ddp_buf_t *out)
{
    while (len > 0 && strchr(" \t\r\n", text[len - 1]) != NULL)
        len--;
    (void)ddp_buf_printable_cut(out, text, len, SHOWN_MAX, false);
}

/* What the file at `path` is when it is not a regular file: "a directory", "a FIFO", ... */
static const char *file_kind(const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return "not a regular file";
    return S_ISDIR(st.st_mode)    ? "a directory"
           : S_ISFIFO(st.st_mode) ? "a FIFO"
           : S_ISSOCK(st.st_mode) ? "a socket"
           : S_ISCHR(st.st_mode)  ? "a character device"
           : S_ISBLK(st.st_mode)  ? "a block device"
                                  : "not a regular file";
}

/* Says, once a job, why --progress-file cannot be read as an integer: `err` (the read's
 * error, 0 when it read `text`) and what was expected. */
static void say_unreadable(ddp_policy_t *p, int err, const char *text, size_t len)
{
    if (p->progress_file_said)
        return;
    p->progress_file_said = true;
    const char *path = p->g->cfg->progress_file;
    ddp_buf_t what = DDP_BUF_INIT;
    if (err == 0) {
        ddp_buf_puts(&what, "it holds '");
        show_text(text, len, &what);
        ddp_buf_puts(&what, "'");
    } else if (err == DDP_ENOTFILE) {
        ddp_buf_printf(&what, "it is %s", file_kind(path));
    } else if (err == DDP_ETOOBIG) {
        ddp_buf_printf(&what, "it holds more than %d bytes", PROGRESS_FILE_MAX);
    } else if (err == 1) {
        ddp_buf_printf(&what,
                       "it did not answer within %.0f s (a file system that does not answer?)",
                       PROGRESS_READ_S);
    } else {
        ddp_buf_puts(&what, ddp_strerror(err));
    }
    ddp_log_warn(p->g->log,
                 "unable to read --progress-file %s: %s, where the last checkpointed iteration "
                 "is expected, as a bare integer (\"100\"): whether an attempt progressed is not "
                 "judged by it",
                 path, ddp_buf_str(&what));
    ddp_buf_free(&what);
}

/* --progress-file's integer from a read's end (ddp_proc_read_file_bounded's `err`, and the
 * `text` read); -1 where there is none (no such file); PROGRESS_UNREADABLE where it cannot
 * be read as one (said once a job: what it holds, what is expected). */
static long long progress_value_of(ddp_policy_t *p, int err, const char *text, size_t len)
{
    long long value = PROGRESS_UNREADABLE;
    if (err == -ENOENT)
        return -1;
    if (err == -ECANCELED)
        return PROGRESS_UNREADABLE; /* given up for a signal: the job ends */
    if (err == 0) {
        char *end;
        errno = 0;
        long long v = strtoll(text, &end, 10);
        while (*end == ' ' || *end == '\n' || *end == '\r' || *end == '\t')
            end++;
        if (end != text && *end == '\0' && v >= 0 && errno == 0 && memchr(text, '\0', len) == NULL)
            value = v;
    }
    if (value == PROGRESS_UNREADABLE)
        say_unreadable(p, err, text, len);
    return value;
}

static int start_read(ddp_policy_t *p);

static void read_on_pool(uv_work_t *work)
{
    progress_read_t *r = work->data;
    r->err = ddp_proc_read_file_bounded(r->path, PROGRESS_FILE_MAX, PROGRESS_READ_S, r->cancel_fd,
                                        &r->text, &r->len);
}

/* The group's end goes on with the value measured. */
static void measured(ddp_policy_t *p, long long value)
{
    p->measured = value;
    p->measure_wanted = false;
    p->g->ops->progress_read(p->g);
}

static void read_ended(uv_work_t *work, int status)
{
    progress_read_t *r = work->data;
    ddp_policy_t *p = r->p;
    if (status == UV_ECANCELED)
        r->err = -ECANCELED;
    if (p != NULL) {
        p->reading = NULL;
        long long value = progress_value_of(p, r->err, r->text, r->len);
        if (!p->baseline_read) { /* the progress the job starts from (a resumed job's) */
            p->baseline_read = true;
            p->last_progress = value == PROGRESS_UNREADABLE ? -1 : value;
            if (p->measure_wanted && (r->err == -ECANCELED || start_read(p) != 0))
                measured(p, PROGRESS_UNREADABLE);
        } else if (p->measure_wanted) {
            measured(p, value);
        }
    }
    close(r->cancel_fd);
    free(r->text);
    free(r->path);
    free(r);
}

/* Starts a read of --progress-file (p->reading). 0 or -errno. */
static int start_read(ddp_policy_t *p)
{
    progress_read_t *r = calloc(1, sizeof *r);
    if (r == NULL)
        return -ENOMEM;
    r->p = p;
    r->work.data = r;
    r->cancel_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    r->path = strdup(p->g->cfg->progress_file);
    int err = r->cancel_fd < 0 ? -errno : r->path == NULL ? -ENOMEM : 0;
    if (err == 0)
        err = uv_queue_work(p->g->loop, &r->work, read_on_pool, read_ended);
    if (err != 0) {
        if (r->cancel_fd >= 0)
            close(r->cancel_fd);
        free(r->path);
        free(r);
        return err;
    }
    p->reading = r;
    return 0;
}

void ddp_policy_begin(ddp_policy_t *p)
{
    if (p->g->cfg->progress_file == NULL || p->baseline_read || p->reading != NULL)
        return;
    if (start_read(p) != 0)
        p->baseline_read = true; /* none: every attempt's value is progress */
}

bool ddp_policy_measure(ddp_policy_t *p)
{
    if (p->measure_wanted) /* the group's end again (a SIGCHLD, the read's own): one read */
        return true;
    ddp_policy_decision_t next;
    ddp_policy_next(p, &next);
    if (p->g->cfg->progress_file == NULL || !next.after_failure) /* nothing judged */
        return false;
    p->measure_wanted = true;
    if (p->reading != NULL) /* the first read's end starts this one */
        return true;
    if (start_read(p) != 0) {
        p->measure_wanted = false;
        p->measured = PROGRESS_UNREADABLE;
        return false;
    }
    return true;
}

bool ddp_policy_cut_short(ddp_policy_t *p)
{
    if (!p->measure_wanted || p->reading == NULL)
        return false;
    if (p->reading->given_up)
        return true;
    p->reading->given_up = true;
    uint64_t one = 1;
    while (write(p->reading->cancel_fd, &one, sizeof one) < 0 && errno == EINTR)
        ;
    uv_cancel((uv_req_t *)&p->reading->work); /* not begun: read_ended at once */
    return true;
}

/* Measures whether the attempt that just failed made progress: 1 when --progress-file's
 * value went up (kept as the last progress) or (libddp workers) a collective completed, 0
 * when not, -1 when neither can tell. */
static int measure_progress(ddp_policy_t *p)
{
    const ddp_group_t *g = p->g;
    int measured = -1;
    if (g->cfg->progress_file != NULL) {
        long long v = p->measured;    /* ddp_policy_measure's, at the group's end */
        if (v != PROGRESS_UNREADABLE) /* one that cannot be read tells nothing */
            measured = v > p->last_progress;
        if (measured > 0) {
            p->last_progress = v;
            return 1;
        }
    }
    for (int i = 0; i < g->nworkers && g->attempt_dir != NULL; i++) {
        char dir[PATH_MAX];
        bool found = false;
        ddp_group_worker_dir(g, &g->workers[i], dir, sizeof dir);
        uint64_t done = ddp_hang_progress(dir, &found);
        if (found && done > 0)
            return 1;
        if (found)
            measured = 0;
    }
    return measured;
}

#define START_FAILURE_S 10.0 /* a failure this soon after its attempt's start: at the start */

/* How the failed attempt failed, when at its start: its root cause's status and what it
 * said (the error file's exception, else its last line; any rank: which rank fails first
 * varies), malloc'd; NULL when the root cause came later, on another node, or said
 * nothing. */
static char *start_failure(const ddp_group_t *g)
{
    if (g->nfailures == 0)
        return NULL;
    const ddp_failure_t *root = &g->failures[ddp_report_root(g->failures, g->nfailures)];
    if (root->host != NULL || root->timestamp - g->attempt_began > START_FAILURE_S)
        return NULL;
    char what[64], *summary = ddp_failure_said(root), *how = NULL;
    if (summary != NULL &&
        asprintf(&how, "%s: %s", ddp_failure_describe(root, what, sizeof what), summary) < 0)
        how = NULL;
    free(summary);
    return how;
}

/* Where nothing tells progress: counts this attempt among those in a row that failed the
 * same way at their start (p->same_failures, p->failed_as); whether it failed as the one
 * before did. */
static bool count_same_failures(ddp_policy_t *p)
{
    char *how = start_failure(p->g);
    bool same = how != NULL && p->failed_as != NULL && strcmp(how, p->failed_as) == 0;
    p->same_failures = how == NULL ? 0 : same ? p->same_failures + 1 : 1;
    free(p->failed_as);
    p->failed_as = how;
    return same;
}

/* Once a job, at its first restart: how many failed attempts without progress end it,
 * where they can end it before --max-restarts does. */
static void say_budget(ddp_policy_t *p)
{
    const ddp_launch_config_t *cfg = p->g->cfg;
    if (p->no_progress_budget_said || cfg->max_no_progress <= 0 ||
        cfg->max_no_progress > cfg->max_restarts)
        return;
    p->no_progress_budget_said = true;
    char measure[160];
    if (cfg->progress_file != NULL)
        snprintf(measure, sizeof measure, "--progress-file's value rising");
    else
        snprintf(measure, sizeof measure,
                 "a libddp collective completing; where none tells, attempts that fail the same "
                 "way within %.0f s of their start count",
                 START_FAILURE_S);
    ddp_log_info(p->g->log,
                 "the job ends with status %d (do not requeue) once %d attempts in a row fail "
                 "without progress, before --max-restarts=%d runs out "
                 "(--max-no-progress-restarts=%d; progress: %s)",
                 DDP_EXIT_NO_PROGRESS, cfg->max_no_progress, cfg->max_restarts,
                 cfg->max_no_progress, measure);
}

/* Whether the job cannot progress after the failed attempt: NULL while it can go on; else
 * why (the no_progress_stop event's reason: progress_file, libddp or
 * same_failure_at_start), with the line that says so in message[cap]. Counts the attempts
 * without progress in p->no_progress. */
static const char *judge_progress(ddp_policy_t *p, char *message, size_t cap)
{
    const ddp_launch_config_t *cfg = p->g->cfg;
    int progressed = measure_progress(p);
    char why[DDP_LAST_LINE_MAX + 200];
    const char *reason = "same_failure_at_start";
    if (progressed < 0) {
        if (!count_same_failures(p) || cfg->max_no_progress <= 0 ||
            p->same_failures < cfg->max_no_progress)
            return NULL;
        p->no_progress = p->same_failures;
        snprintf(why, sizeof why, "each the same way within %.0f s of its start: %s",
                 START_FAILURE_S, p->failed_as);
    } else if (progressed > 0) {
        p->no_progress = 0;
        return NULL;
    } else {
        p->no_progress++;
        if (cfg->max_no_progress <= 0 || p->no_progress < cfg->max_no_progress)
            return NULL;
        reason = cfg->progress_file != NULL ? "progress_file" : "libddp";
        snprintf(why, sizeof why, "%s",
                 cfg->progress_file != NULL ? "--progress-file did not advance"
                                            : "no libddp collective completed");
    }
    snprintf(message, cap,
             "%d attempt(s) in a row failed without progress (%s): the job cannot make "
             "progress, and is not restarted (status %d: do not requeue)",
             p->no_progress, why, DDP_EXIT_NO_PROGRESS);
    return reason;
}

/* Ends the job with status 6 (every node's, through the rendezvous) when it cannot
 * progress, said with its event. True when it ends. */
static bool end_without_progress(ddp_policy_t *p, ddp_policy_decision_t *d)
{
    const ddp_group_t *g = p->g;
    const char *reason = judge_progress(p, d->why, sizeof d->why);
    if (reason == NULL) {
        say_budget(p);
        return false;
    }
    ddp_log_error(g->log, "%s", d->why);
    ddp_buf_t fields = DDP_BUF_INIT;
    ddp_events_int(&fields, "attempts", p->no_progress);
    ddp_events_str(&fields, "reason", reason);
    ddp_events_emit(&g->events, "no_progress_stop", &fields);
    ddp_buf_free(&fields);
    d->kind = DDP_POLICY_END;
    d->status = DDP_EXIT_NO_PROGRESS;
    return true;
}

/* This node leaves the job alone (status 5), the others going on without it: the store's
 * host is told `why` (it says so), and this node prints its own failure report. */
static void leave(ddp_policy_decision_t *d, const char *why)
{
    d->kind = DDP_POLICY_LEAVE;
    d->status = DDP_EXIT_RDZV_FAILED;
    snprintf(d->why, sizeof d->why, "%s", why);
}

/* --straggler-action=exclude: this node leaves when a rank of it was named a straggler
 * (said, with its event), unless it serves the store and its leaving would end the job (not
 * with etcd: the job goes on at the next elected launcher's store). True when it leaves. */
static bool leave_for_straggler(ddp_policy_t *p, bool named, ddp_policy_decision_t *d)
{
    const ddp_group_t *g = p->g;
    if (!g->cfg->straggler_exclude || !(named || ddp_rdzv_straggler_named(g->rdzv)))
        return false;
    if (g->coord != NULL && g->cfg->rdzv_backend != DDP_RDZV_ETCD) {
        ddp_log_warn(g->log, "a rank of this node was named a straggler, but this node serves "
                             "the job's store: it stays (--straggler-action=exclude)");
        return false;
    }
    ddp_log_error(g->log,
                  "a rank of this node was named a straggler (--straggler-action=exclude): it "
                  "leaves the job at this restart%s",
                  g->cfg->hot_spares > 0 ? ", and a hot spare takes its place" : "");
    ddp_buf_t fields = DDP_BUF_INIT;
    ddp_events_str(&fields, "reason", "straggler");
    ddp_events_emit(&g->events, "node_excluded", &fields);
    ddp_buf_free(&fields);
    leave(d, "a rank of it was named a straggler (--straggler-action=exclude)");
    return true;
}

/* --exclude-after=K: counts the rounds in a row this node's own workers failed in; at K it
 * leaves the job (a hot spare, or the elastic rules, take its place). True when it
 * leaves. */
static bool leave_if_excluded(ddp_policy_t *p, bool straggler_named, ddp_policy_decision_t *d)
{
    const ddp_group_t *g = p->g;
    const ddp_launch_config_t *cfg = g->cfg;
    if (g->rdzv == NULL)
        return false;
    if (leave_for_straggler(p, straggler_named, d))
        return true;
    p->failed_rounds = g->nfailures > 0 ? p->failed_rounds + 1 : 0;
    if (cfg->exclude_after <= 0 || p->failed_rounds < cfg->exclude_after)
        return false;
    ddp_log_error(g->log,
                  "this node's workers failed in %d round(s) in a row (--exclude-after=%d): it "
                  "leaves the job%s",
                  p->failed_rounds, cfg->exclude_after,
                  cfg->hot_spares > 0 ? ", and a hot spare takes its place" : "");
    ddp_buf_t fields = DDP_BUF_INIT;
    ddp_events_int(&fields, "rounds", p->failed_rounds);
    ddp_events_emit(&g->events, "node_excluded", &fields);
    ddp_buf_free(&fields);
    char why[128];
    snprintf(why, sizeof why, "its workers failed in %d round(s) in a row (--exclude-after=%d)",
             p->failed_rounds, cfg->exclude_after);
    leave(d, why);
    return true;
}

bool ddp_policy_judge(ddp_policy_t *p, bool straggler_named, ddp_policy_decision_t *d)
{
    return end_without_progress(p, d) || leave_if_excluded(p, straggler_named, d);
}

int ddp_policy_failure_status(const ddp_group_t *g)
{
    if (g->cfg->exit_code_mode == DDP_EXIT_CODE_WORKER && g->nfailures > 0)
        return ddp_failure_status(&g->failures[ddp_report_root(g->failures, g->nfailures)]);
    return DDP_EXIT_WORKER_FAILED;
}

void ddp_policy_next(const ddp_policy_t *p, ddp_policy_decision_t *d)
{
    const ddp_group_t *g = p->g;
    bool failed = g->stop_reason == DDP_STOP_FAILURE || g->stop_reason == DDP_STOP_REMOTE;
    *d = (ddp_policy_decision_t){.kind = DDP_POLICY_END};
    /* A multi-node job goes on as the rendezvous decides, for every node alike. */
    if (g->rdzv != NULL && (failed || g->stop_reason == DDP_STOP_NONE)) {
        d->kind = DDP_POLICY_GO_ON;
        d->after_failure = failed;
        return;
    }
    switch (g->stop_reason) {
    case DDP_STOP_NONE:
        d->status = DDP_EXIT_OK;
        break;
    case DDP_STOP_SIGNAL:
        d->status = DDP_EXIT_SIGNAL_BASE + g->stop_signal;
        break;
    case DDP_STOP_LAUNCH_ERROR:
        d->status = DDP_EXIT_LAUNCH_FAILED;
        break;
    case DDP_STOP_REMOTE:
    case DDP_STOP_FAILURE:
        if (g->attempt < g->cfg->max_restarts) {
            d->kind = DDP_POLICY_RESTART;
            d->after_failure = true;
        } else {
            d->status = ddp_policy_failure_status(g);
        }
        break;
    case DDP_STOP_ABORTED:
        d->status = g->abort_exit_code;
        break;
    }
}
