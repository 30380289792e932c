/* Whether a failed attempt made progress, and when the job cannot (see agent_internal.h):
 * --progress-file's value, libddp's completed collectives, and where neither tells,
 * attempts that fail the same way at their start. Runs on the loop thread. */
#include "agent_internal.h"

#include "error.h"
#include "hang.h"
#include "io.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define PROGRESS_FILE_MAX 4096 /* bytes: an integer and some room */
#define SHOWN_MAX         40   /* bytes of what it holds, in the line that says so */

/* What `text` (len bytes) begins with, for a line: its first SHOWN_MAX bytes less trailing
 * blanks, printable ASCII as it is and any other byte as \xNN. */
static void show_text(const char *text, size_t len, ddp_buf_t *out)
{
    while (len > 0 && strchr(" \t\r\n", text[len - 1]) != NULL)
        len--;
    for (size_t i = 0; i < len && i < SHOWN_MAX; i++) {
        unsigned char c = (unsigned char)text[i];
        ddp_buf_printf(out, c >= 0x20 && c < 0x7f ? "%c" : "\\x%02x", c);
    }
    if (len > SHOWN_MAX)
        ddp_buf_puts(out, "...");
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
static void say_unreadable(ddp_agent_t *a, int err, const char *text, size_t len)
{
    if (a->progress_file_said)
        return;
    a->progress_file_said = true;
    const char *path = a->cfg->progress_file;
    ddp_buf_t what = DDP_BUF_INIT;
    if (err == 0) {
        ddp_buf_puts(&what, "it holds '");
        show_text(text, len, &what);
        ddp_buf_puts(&what, "'");
    } else if (err == DDP_ENOTFILE) {
        ddp_buf_printf(&what, "it is %s", file_kind(path));
    } else if (err == DDP_ETOOBIG) {
        ddp_buf_printf(&what, "it holds more than %d bytes", PROGRESS_FILE_MAX);
    } else {
        ddp_buf_puts(&what, ddp_strerror(err));
    }
    ddp_log_warn(a->log,
                 "unable to read --progress-file %s: %s, where the last checkpointed iteration "
                 "is expected, as a bare integer (\"100\"): whether an attempt progressed is not "
                 "judged by it",
                 path, ddp_buf_str(&what));
    ddp_buf_free(&what);
}

long long ddp_agent_progress_file_value(ddp_agent_t *a)
{
    char *text = NULL;
    size_t len = 0;
    long long value = DDP_PROGRESS_UNREADABLE;
    int err = ddp_read_file(a->cfg->progress_file, PROGRESS_FILE_MAX, &text, &len);
    if (err == -ENOENT)
        return -1;
    if (err == 0) {
        char *end;
        errno = 0;
        long long v = strtoll(text, &end, 10);
        while (*end == ' ' || *end == '\n' || *end == '\r' || *end == '\t')
            end++;
        if (end != text && *end == '\0' && v >= 0 && errno == 0 && memchr(text, '\0', len) == NULL)
            value = v;
    }
    if (value == DDP_PROGRESS_UNREADABLE)
        say_unreadable(a, err, text, len);
    free(text);
    return value;
}

/* Whether the attempt that just failed made progress: --progress-file's value went up, or
 * (libddp workers) a collective completed. -1 when neither can tell. */
static int attempt_progressed(ddp_agent_t *a)
{
    int measured = -1;
    if (a->cfg->progress_file != NULL) {
        long long v = ddp_agent_progress_file_value(a);
        if (v != DDP_PROGRESS_UNREADABLE) /* one that cannot be read tells nothing */
            measured = v > a->last_progress;
        if (measured > 0) {
            a->last_progress = v;
            return 1;
        }
    }
    for (int i = 0; i < a->nworkers && a->attempt_dir != NULL; i++) {
        char dir[PATH_MAX];
        bool found = false;
        ddp_agent_worker_dir(a, &a->workers[i], dir, sizeof dir);
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
static char *start_failure(const ddp_agent_t *a)
{
    if (a->nfailures == 0)
        return NULL;
    const ddp_failure_t *root = &a->failures[ddp_report_root(a->failures, a->nfailures)];
    if (root->host != NULL || root->timestamp - a->attempt_began > START_FAILURE_S)
        return NULL;
    char what[64], *summary = ddp_failure_said(root), *how = NULL;
    if (summary != NULL &&
        asprintf(&how, "%s: %s", ddp_failure_describe(root, what, sizeof what), summary) < 0)
        how = NULL;
    free(summary);
    return how;
}

/* Where nothing tells progress: whether this attempt failed at its start as the one before
 * did (then a->same_failures counts it). */
static bool failed_the_same_way(ddp_agent_t *a)
{
    char *how = start_failure(a);
    bool same = how != NULL && a->failed_as != NULL && strcmp(how, a->failed_as) == 0;
    a->same_failures = how == NULL ? 0 : same ? a->same_failures + 1 : 1;
    free(a->failed_as);
    a->failed_as = how;
    return same;
}

/* Once a job, at its first restart: how many failed attempts without progress end it,
 * where they can end it before --max-restarts does. */
static void say_budget(ddp_agent_t *a)
{
    const ddp_launch_config_t *cfg = a->cfg;
    if (a->no_progress_budget_said || cfg->max_no_progress <= 0 ||
        cfg->max_no_progress > cfg->max_restarts)
        return;
    a->no_progress_budget_said = true;
    char measure[160];
    if (cfg->progress_file != NULL)
        snprintf(measure, sizeof measure, "--progress-file's value rising");
    else
        snprintf(measure, sizeof measure,
                 "a libddp collective completing; where none tells, attempts that fail the same "
                 "way within %.0f s of their start count",
                 START_FAILURE_S);
    ddp_log_info(a->log,
                 "the job ends with status %d (do not requeue) once %d attempts in a row fail "
                 "without progress, before --max-restarts=%d runs out "
                 "(--max-no-progress-restarts=%d; progress: %s)",
                 DDP_EXIT_NO_PROGRESS, cfg->max_no_progress, cfg->max_restarts,
                 cfg->max_no_progress, measure);
}

/* ddp_agent_no_progress, but for the first restart's line. */
static const char *judge(ddp_agent_t *a, char *message, size_t cap)
{
    int progressed = attempt_progressed(a);
    char why[DDP_LAST_LINE_MAX + 200];
    const char *reason = "same_failure_at_start";
    if (progressed < 0) {
        if (!failed_the_same_way(a) || a->cfg->max_no_progress <= 0 ||
            a->same_failures < a->cfg->max_no_progress)
            return NULL;
        a->no_progress = a->same_failures;
        snprintf(why, sizeof why, "each the same way within %.0f s of its start: %s",
                 START_FAILURE_S, a->failed_as);
    } else if (progressed > 0) {
        a->no_progress = 0;
        return NULL;
    } else {
        a->no_progress++;
        if (a->cfg->max_no_progress <= 0 || a->no_progress < a->cfg->max_no_progress)
            return NULL;
        reason = a->cfg->progress_file != NULL ? "progress_file" : "libddp";
        snprintf(why, sizeof why, "%s",
                 a->cfg->progress_file != NULL ? "--progress-file did not advance"
                                               : "no libddp collective completed");
    }
    snprintf(message, cap,
             "%d attempt(s) in a row failed without progress (%s): the job cannot make "
             "progress, and is not restarted (status %d: do not requeue)",
             a->no_progress, why, DDP_EXIT_NO_PROGRESS);
    return reason;
}

const char *ddp_agent_no_progress(ddp_agent_t *a, char *message, size_t cap)
{
    const char *reason = judge(a, message, cap);
    if (reason == NULL)
        say_budget(a);
    return reason;
}
