/* What every part of the agent may do with the worker group (see agent/group.h): name a
 * worker's directory, signal its process group, list ranks, count its output. Reads the
 * group, writes nothing of it; runs on the agent's loop thread. */
#include "agent/group.h"

#include "error.h"
#include "io.h"
#include "host/proc.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

void ddp_group_worker_dir(const ddp_group_t *g, const ddp_worker_t *w, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s/%d", g->attempt_dir, w->local_rank);
}

int ddp_group_signal_worker(const ddp_group_t *g, int i, int sig)
{
    const ddp_worker_t *w = &g->workers[i];
    int err = ddp_proc_signal_group(w->pid, sig);
    if (err && err != -ESRCH)
        ddp_log_warn(g->log, "unable to signal worker local rank %d (pid %d): %s", i, (int)w->pid,
                     ddp_strerror(err));
    return err;
}

void ddp_group_signal_running(const ddp_group_t *g, int sig)
{
    for (int i = 0; i < g->nworkers; i++) {
        if (g->workers[i].running)
            (void)ddp_group_signal_worker(g, i, sig);
    }
}

int ddp_group_ranks_where(const ddp_group_t *g, bool running, ddp_buf_t *out)
{
    bool *other = calloc((size_t)g->nworkers, sizeof *other); /* format_ranks names the false */
    int n = 0;
    for (int i = 0; other != NULL && i < g->nworkers; i++) {
        other[i] = !(running ? g->workers[i].running : g->workers[i].succeeded);
        n += !other[i];
    }
    if (other != NULL)
        ddp_buf_runs(out, other, g->nworkers, 8, g->rank_offset);
    free(other);
    return n;
}

uint64_t ddp_group_worker_output(const ddp_group_t *g, const ddp_worker_t *w)
{
    uint64_t bytes = ddp_output_bytes(w->out) + ddp_output_bytes(w->err);
    for (int k = 0; k < 2 && g->attempt_dir != NULL; k++) {
        char path[PATH_MAX];
        struct stat st;
        snprintf(path, sizeof path, "%s/%d/%s", g->attempt_dir, w->local_rank,
                 k == 0 ? "stdout.log" : "stderr.log");
        if (ddp_stat_worker_file(path, &st) == 0 && S_ISREG(st.st_mode))
            bytes += (uint64_t)st.st_size;
    }
    return bytes;
}
