/* Whether a failed attempt made progress, and when the job cannot (see agent_internal.h):
 * --progress-file's value, libddp's completed collectives, and where neither tells,
 * attempts that fail the same way at their start. Runs on the loop thread. */
#include "agent_internal.h"

#include "hang.h"
#include "io.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --progress-file's integer, or -1 (missing, unreadable, not a number). */
long long ddp_agent_progress_file_value(const char *path)
{
    char *text = NULL;
    size_t len;
    long long value = -1;
    if (ddp_read_file(path, 4096, &text, &len) == 0) {
        char *end;
        long long v = strtoll(text, &end, 10);
        while (*end == ' ' || *end == '\n' || *end == '\r' || *end == '\t')
            end++;
        if (end != text && *end == '\0' && v >= 0)
            value = v;
    }
    free(text);
    return value;
}

/* Whether the attempt that just failed made progress: --progress-file's value went up, or
 * (libddp workers) a collective completed. -1 when neither can tell. */
static int attempt_progressed(ddp_agent_t *a)
{
    int measured = -1;
    if (a->cfg->progress_file != NULL) {
        long long v = ddp_agent_progress_file_value(a->cfg->progress_file);
        measured = v > a->last_progress;
        if (v > a->last_progress)
            a->last_progress = v;
        if (measured)
            return 1;
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

const char *ddp_agent_no_progress(ddp_agent_t *a, char *message, size_t cap)
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
