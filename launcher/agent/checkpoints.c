/* In-memory checkpoints, the agent's part (see agent/checkpoints.h): the directory's life,
 * and the scan of the slots before a restart. The directory's making (at the job's start)
 * and removal (at its end, when no worker runs) run on the agent's loop thread: the
 * launcher's own tmpfs. The slots are the workers' files: read on a thread of the loop's
 * pool only (scan_slots), with pread, never a mapping, bounded by the files' own sizes and
 * cut short by a cancel; what it found is said on the loop. */
#include "agent/checkpoints.h"

#include "agent/checkpoint_replicas.h"
#include "agent/checkpoint_sums.h"
#include "ckpt_file.h"
#include "env.h"
#include "error.h"
#include "io.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Where the directory is made: a tmpfs on every Linux the launcher runs on. */
#define SHM_DIR "/dev/shm"

/* One slot as the scan found it. */
typedef struct {
    bool usable;   /* complete, checked, its data its checksum where one was written */
    int64_t step;  /* a usable slot's */
    char why[400]; /* why it is not usable, where that is to be said; "" */
} slot_seen_t;

typedef struct {
    uv_work_t work;
    ddp_checkpoints_t *c;
    int first_rank, nranks, world_size;
    const char *restore_from; /* --checkpoint-dir, where its copies are put in place first */
    slot_seen_t *seen;        /* 2 a rank: rank first_rank + i's slot s at 2 * i + s */
    ddp_replica_step_t *reps; /* the usable replicas of other nodes' slots here */
    size_t nreps;
    void (*done)(void *ctx);
    void *ctx;
} scan_t;

struct ddp_checkpoints_s {
    const ddp_log_t *log;
    char dir[PATH_MAX];                  /* the directory this launcher made; "" none */
    scan_t *scan;                        /* a scan under way, or NULL */
    ddp_checkpoint_sums_t *sums;         /* the checksums' thread, where the directory is ours */
    ddp_checkpoint_replicas_t *replicas; /* several nodes: replicas taken and sent */
    bool restored;                       /* --checkpoint-dir's copies were put in place */
    const char *restore_from;            /* several nodes: --checkpoint-dir (cfg's), whose
                                          * copies of this node's ranks the first scan puts
                                          * in place; NULL once one did */
    atomic_bool cancel;                  /* it stops at its next look */
    int64_t step;                        /* what the last scan found, -1: none */
    int64_t (*found)[2];                 /* ... each rank's usable steps (-1: none), nfound ranks */
    int nfound;
    ddp_replica_step_t *reps; /* ... the usable replicas here, nreps */
    size_t nreps;
};

extern char **environ;

/* /dev/shm/ddp-ckpt-<run id>-<pid>-<random>, mode 0700: the guard is told of it before it
 * is made (a launcher SIGKILLed in between leaves nothing), and told to forget it where it
 * could not be made (the name is another's: it is not the guard's to remove). Said where it
 * cannot be made. */
static void make_dir(ddp_checkpoints_t *c, const ddp_launch_config_t *cfg, ddp_guard_t *guard)
{
    char uuid[37], pid[16], unique[16], path[sizeof c->dir];
    int err = ddp_random_uuid(uuid);
    if (err == 0) {
        snprintf(pid, sizeof pid, "%d", (int)getpid());
        snprintf(unique, sizeof unique, "%.8s%.4s", uuid, uuid + 9);
        ddp_ckpt_shm_dir_name(path, sizeof path, cfg->run_id, pid, unique);
        if (guard->fd >= 0 && ddp_guard_checkpoint_dir(guard, path) != 0)
            ddp_log_debug(c->log, "the orphan guard was not told of %s", path);
        if (mkdir(path, 0700) != 0) {
            err = -errno;
            if (guard->fd >= 0)
                (void)ddp_guard_checkpoint_dir(guard, "");
        }
    }
    if (err != 0) {
        ddp_log_warn(c->log,
                     "in-memory checkpoints: unable to create a directory in " SHM_DIR
                     ": %s; the workers' checkpoint saves do nothing",
                     ddp_strerror(err));
        return;
    }
    snprintf(c->dir, sizeof c->dir, "%s", path);
    ddp_log_debug(c->log, "in-memory checkpoints go to %s", c->dir);
}

/* Whether --checkpoint-dir names a directory (said where not: nothing is copied there). */
static bool persist_dir_ok(const ddp_launch_config_t *cfg, const ddp_log_t *log)
{
    struct stat st;
    int err = stat(cfg->checkpoint_dir, &st) == 0 ? 0 : -errno;
    if (err == 0 && S_ISDIR(st.st_mode))
        return true;
    ddp_log_warn(log, "--checkpoint-dir %s: %s; no checkpoint is copied there", cfg->checkpoint_dir,
                 err != 0 ? ddp_strerror(err) : "it is not a directory");
    return false;
}

/* --checkpoint-dir (`from`) on a new job: the copy there (rank<R>.ckpt) of each rank from
 * first_rank to first_rank + nranks - 1 of a world of `world`, checked (ddp_ckpt_copy_check),
 * put in place as its slot 0 (written under another name and renamed, as common/ckpt.h says),
 * said. Blocking: before the loop runs (one node), or on the scan's thread (several: the
 * ranks are known once the round is), where `cancel` ends it. Whether any was. */
static bool restore(ddp_checkpoints_t *c, const char *from, int first_rank, int nranks, int world,
                    const atomic_bool *cancel)
{
    bool any = false;
    for (int rank = first_rank; rank < first_rank + nranks; rank++) {
        char path[PATH_MAX], name[32];
        ddp_buf_t why = DDP_BUF_INIT;
        ddp_ckpt_header_t h = {0};
        uint64_t size;
        snprintf(path, sizeof path, "%s/rank%d.ckpt", from, rank);
        snprintf(name, sizeof name, DDP_CKPT_SLOT_FILE, rank, 0);
        int fd = ddp_open_worker_file(path), err = fd < 0 ? fd : 0;
        if (err == 0)
            err = ddp_ckpt_pread_header(fd, &h, &size, &why);
        if (err == 0)
            err = ddp_ckpt_copy_check(fd, &h, rank, world, cancel, &why);
        if (err == 0)
            err = ddp_ckpt_copy(fd, &h, c->dir, name, cancel, &why);
        if (fd >= 0)
            close(fd);
        if (err == 0)
            ddp_log_info(c->log,
                         "in-memory checkpoints: rank %d starts from its step %" PRId64 " (%s)",
                         rank, h.step, path);
        else if (err != -ENOENT && err != -ECANCELED)
            ddp_log_warn(c->log, "in-memory checkpoints: %s is not used: %s", path,
                         why.len > 0 ? ddp_buf_str(&why) : ddp_strerror(err));
        any = any || err == 0;
        ddp_buf_free(&why);
    }
    return any;
}

int ddp_checkpoints_new(const ddp_launch_config_t *cfg, const ddp_log_t *log, ddp_guard_t *guard,
                        ddp_checkpoints_t **out)
{
    ddp_checkpoints_t *c = calloc(1, sizeof *c);
    if (c == NULL)
        return -ENOMEM;
    c->log = log;
    c->step = -1;
    const char *name = ddp_env_name(DDP_ENV_DDP_CHECKPOINT_DIR), *own;
    if ((own = ddp_env_lookup(cfg->env_set, name)) != NULL ||
        (own = ddp_env_lookup(environ, name)) != NULL)
        ddp_log_debug(log, "in-memory checkpoints go to %s (DDP_CHECKPOINT_DIR, yours)", own);
    else
        make_dir(c, cfg, guard);
    const char *persist =
        c->dir[0] != '\0' && cfg->checkpoint_dir != NULL && persist_dir_ok(cfg, log)
            ? cfg->checkpoint_dir
            : NULL;
    /* The replicas' sender first: the sums' thread tells it of each new sum. */
    if (c->dir[0] != '\0' && cfg->nnodes_max > 1 && cfg->checkpoint_replicas != 0 &&
        ddp_checkpoint_replicas_start(c->dir, cfg->checkpoint_replica_rate, log, &c->replicas) != 0)
        c->replicas = NULL; /* said */
    if (c->dir[0] != '\0' &&
        ddp_checkpoint_sums_start(c->dir, persist, cfg->checkpoint_persist_every,
                                  ddp_checkpoint_replicas_summed, c->replicas, log, &c->sums) != 0)
        c->sums = NULL; /* said: the slots are loaded without a checksum */
    if (persist != NULL && guard->fd >= 0 && ddp_guard_persist_dir(guard, persist) != 0)
        ddp_log_debug(log, "the orphan guard was not told of %s", persist);
    if (persist != NULL && cfg->nnodes_max > 1) {
        c->restore_from = persist;
    } else if (persist != NULL) {
        /* One node: the temporaries of copiers that died midway removed first (a multi-node
         * job's directory may be shared with live copiers of other hosts, whose pids mean
         * nothing here). */
        ddp_buf_t removed = DDP_BUF_INIT;
        if (ddp_ckpt_remove_stale(persist, 0, &removed) > 0)
            ddp_log_info(log, "--checkpoint-dir: removed what copies cut short left: %s",
                         ddp_buf_str(&removed));
        ddp_buf_free(&removed);
        c->restored = restore(c, persist, 0, cfg->nproc_per_node, cfg->nproc_per_node, NULL);
    }
    *out = c;
    return 0;
}

const char *ddp_checkpoints_dir(const ddp_checkpoints_t *c)
{
    return c != NULL && c->dir[0] != '\0' ? c->dir : NULL;
}

/* The slot file at `path` of rank `rank`, as common/ckpt.h says a reader that shares it
 * with its writer reads it: the header, checked; a complete slot of this rank and world
 * size; its data against its checksum where one of its generation was written; the
 * header again, dropped where its generation or state changed. A slot not complete, not
 * there, or rewritten meanwhile is no checkpoint (not said); one that fails a check is,
 * in out->why. */
static void read_slot(const char *path, int rank, int world_size, const atomic_bool *cancel,
                      slot_seen_t *out)
{
    ddp_buf_t why = DDP_BUF_INIT;
    ddp_ckpt_header_t h, again;
    uint64_t size, size_again;
    int fd = ddp_open_worker_file(path), err = fd < 0 ? fd : 0;
    *out = (slot_seen_t){.step = -1};
    if (err == 0)
        err = ddp_ckpt_pread_header(fd, &h, &size, &why);
    if (err == 0 && h.state != DDP_CKPT_COMPLETE)
        goto out;
    struct stat st;
    if (err == 0 && fstat(fd, &st) != 0)
        err = -errno;
    if (err == 0)
        err = ddp_ckpt_size_check(&h, &st, &why);
    if (err == 0 && (h.rank != (uint32_t)rank || h.world_size != (uint32_t)world_size))
        err = (ddp_buf_printf(&why, "it is rank %u's of a world of %u", h.rank, h.world_size),
               DDP_EPARSE);
    if (err == 0 && h.checksum_generation == h.generation)
        err = ddp_ckpt_verify_file(fd, &h, cancel, &why);
    if (err == 0 && (ddp_ckpt_pread_header(fd, &again, &size_again, NULL) != 0 ||
                     again.generation != h.generation || again.state != DDP_CKPT_COMPLETE))
        goto out;
    if (err == 0) {
        out->usable = true;
        out->step = h.step;
    } else if (err != -ENOENT && err != -ECANCELED) {
        snprintf(out->why, sizeof out->why, "%s",
                 why.len > 0 ? ddp_buf_str(&why) : ddp_strerror(err));
    }
out:
    if (fd >= 0)
        close(fd);
    ddp_buf_free(&why);
}

/* The pool's thread: the replicas in the directory (replica<R>.<s>, agent/
 * checkpoint_replicas.h) read as slots are, the usable ones kept, at most 2 a rank; the
 * asides of drops a worker killed midway left removed first (their room is the job's). */
static void scan_replicas(scan_t *s)
{
    (void)ddp_ckpt_remove_stale_drops(s->c->dir);
    DIR *d = opendir(s->c->dir);
    char path[PATH_MAX + 300];
    size_t cap = 2 * (size_t)s->world_size;
    s->reps = d != NULL ? calloc(cap + 1, sizeof *s->reps) : NULL;
    for (struct dirent *e; s->reps != NULL && s->nreps < cap && (e = readdir(d)) != NULL;) {
        int rank, slot, end = 0;
        if (sscanf(e->d_name, "replica%d.%d%n", &rank, &slot, &end) != 2 ||
            e->d_name[end] != '\0' || rank < 0 || rank >= s->world_size || slot < 0 || slot > 1)
            continue;
        slot_seen_t seen;
        snprintf(path, sizeof path, "%s/%s", s->c->dir, e->d_name);
        read_slot(path, rank, s->world_size, &s->c->cancel, &seen);
        if (seen.usable)
            s->reps[s->nreps++] = (ddp_replica_step_t){.node = -1, .rank = rank, .step = seen.step};
        else if (seen.why[0] != '\0')
            ddp_log_debug(s->c->log, "in-memory checkpoints: the replica %s is not counted: %s",
                          path, seen.why);
    }
    if (d != NULL)
        closedir(d);
}

/* The pool's thread: every rank's two slots, and the replicas. */
static void scan_slots(uv_work_t *work)
{
    scan_t *s = work->data;
    char path[PATH_MAX + 32];
    if (s->restore_from != NULL)
        (void)restore(s->c, s->restore_from, s->first_rank, s->nranks, s->world_size,
                      &s->c->cancel);
    for (int i = 0; i < s->nranks; i++)
        for (int slot = 0; slot < 2; slot++) {
            slot_seen_t *seen = &s->seen[2 * i + slot];
            if (ddp_ckpt_slot_path(path, sizeof path, s->c->dir, s->first_rank + i, slot) == 0)
                read_slot(path, s->first_rank + i, s->world_size, &s->c->cancel, seen);
            else
                *seen = (slot_seen_t){.step = -1};
        }
    if (s->nranks < s->world_size) /* several nodes */
        scan_replicas(s);
}

/* Whether rank i holds step `step` usable. */
static bool holds(const scan_t *s, int i, int64_t step)
{
    const slot_seen_t *slot = &s->seen[2 * i];
    return (slot[0].usable && slot[0].step == step) || (slot[1].usable && slot[1].step == step);
}

/* The newest step every rank holds usable, -1: none. */
static int64_t common_step(const scan_t *s)
{
    int64_t best = -1;
    for (int k = 0; k < 2 && s->nranks > 0; k++) {
        const slot_seen_t *candidate = &s->seen[k]; /* the first rank's */
        bool everyone = candidate->usable && candidate->step > best;
        for (int i = 1; i < s->nranks && everyone; i++)
            everyone = holds(s, i, candidate->step);
        if (everyone)
            best = candidate->step;
    }
    return best;
}

/* Each rank's usable steps kept for ddp_checkpoints_rank_steps (none where cancelled, or out
 * of memory). */
static void keep_found(ddp_checkpoints_t *c, scan_t *s, bool cancelled)
{
    free(c->found);
    c->found = cancelled ? NULL : calloc((size_t)s->nranks, sizeof *c->found);
    c->nfound = c->found != NULL ? s->nranks : 0;
    for (int i = 0; i < c->nfound; i++)
        for (int slot = 0; slot < 2; slot++)
            c->found[i][slot] = s->seen[2 * i + slot].usable ? s->seen[2 * i + slot].step : -1;
    free(c->reps);
    c->reps = cancelled ? NULL : s->reps;
    c->nreps = c->reps != NULL ? s->nreps : 0;
    if (cancelled)
        free(s->reps);
    s->reps = NULL;
}

/* Back on the loop: what was found said, the step kept, and the agent called. */
static void scan_done(uv_work_t *work, int status)
{
    scan_t *s = work->data;
    ddp_checkpoints_t *c = s->c;
    bool cancelled = status != 0 || atomic_load(&c->cancel);
    if (!cancelled)
        c->restore_from = NULL; /* (put in place: once; a cancelled one is done again) */
    for (int i = 0; i < s->nranks && !cancelled; i++)
        for (int slot = 0; slot < 2; slot++)
            if (s->seen[2 * i + slot].why[0] != '\0')
                ddp_log_warn(c->log,
                             "in-memory checkpoints: rank %d's slot %d (%s/" DDP_CKPT_SLOT_FILE
                             ") is not counted: %s",
                             s->first_rank + i, slot, c->dir, s->first_rank + i, slot,
                             s->seen[2 * i + slot].why);
    c->step = cancelled ? -1 : common_step(s);
    keep_found(c, s, cancelled);
    uint64_t held = ddp_checkpoint_sums_held(c->sums, NULL);
    if (s->nranks < s->world_size) /* several nodes: the step is agreed across them */
        ddp_log_debug(c->log,
                      "in-memory checkpoints: the newest step this node's ranks hold: %" PRId64,
                      c->step);
    else if (c->step >= 0)
        ddp_log_info(c->log,
                     "in-memory checkpoints: the workers resume from step %" PRId64
                     ", the newest every rank holds complete (DDP_CHECKPOINT_STEP); the launcher "
                     "holds %" PRIu64 " bytes of checkpoints",
                     c->step, held);
    else if (!cancelled && held > 0) /* (a job that saves none hears nothing of it) */
        ddp_log_info(c->log,
                     "in-memory checkpoints: no step every rank holds complete; the launcher holds "
                     "%" PRIu64 " bytes of checkpoints",
                     held);
    c->scan = NULL;
    free(s->seen);
    free(s->reps);
    void (*done)(void *) = s->done;
    void *ctx = s->ctx;
    free(s);
    done(ctx);
}

bool ddp_checkpoints_scan(ddp_checkpoints_t *c, uv_loop_t *loop, int first_rank, int nranks,
                          int world_size, void (*done)(void *ctx), void *ctx)
{
    c->step = -1;
    c->nfound = 0;
    c->nreps = 0;
    if (c->dir[0] == '\0' || c->scan != NULL || nranks <= 0)
        return false;
    scan_t *s = calloc(1, sizeof *s);
    slot_seen_t *seen = calloc(2 * (size_t)nranks, sizeof *seen);
    int err = s == NULL || seen == NULL ? UV_ENOMEM : 0;
    if (err == 0) {
        *s = (scan_t){.c = c,
                      .first_rank = first_rank,
                      .nranks = nranks,
                      .world_size = world_size,
                      .restore_from = c->restore_from,
                      .seen = seen,
                      .done = done,
                      .ctx = ctx};
        s->work.data = s;
        atomic_store(&c->cancel, false);
        err = uv_queue_work(loop, &s->work, scan_slots, scan_done);
    }
    if (err != 0) {
        ddp_log_warn(c->log,
                     "in-memory checkpoints: unable to read the slots: %s; the ranks "
                     "agree on a step where they can",
                     uv_strerror(err));
        free(s);
        free(seen);
        return false;
    }
    c->scan = s;
    return true;
}

void ddp_checkpoints_cancel(ddp_checkpoints_t *c)
{
    if (c != NULL)
        atomic_store(&c->cancel, true);
}

uint64_t ddp_checkpoints_held(const ddp_checkpoints_t *c)
{
    uint64_t peak;
    (void)ddp_checkpoint_sums_held(c != NULL ? c->sums : NULL, &peak);
    return peak;
}

int ddp_checkpoints_rank_steps(const ddp_checkpoints_t *c, int i, int64_t steps[2])
{
    int n = 0;
    for (int slot = 0; c != NULL && i >= 0 && i < c->nfound && slot < 2; slot++)
        if (c->found[i][slot] >= 0)
            steps[n++] = c->found[i][slot];
    return n;
}

size_t ddp_checkpoints_replica_steps(const ddp_checkpoints_t *c, const ddp_replica_step_t **out)
{
    *out = c != NULL ? c->reps : NULL;
    return c != NULL ? c->nreps : 0;
}

int ddp_checkpoints_replica_port(const ddp_checkpoints_t *c)
{
    return ddp_checkpoint_replicas_port(c != NULL ? c->replicas : NULL);
}

ddp_checkpoint_replicas_t *ddp_checkpoints_replicas(const ddp_checkpoints_t *c)
{
    return c != NULL ? c->replicas : NULL;
}

const char *ddp_checkpoints_replica_key(const ddp_checkpoints_t *c)
{
    return ddp_checkpoint_replicas_key(c != NULL ? c->replicas : NULL);
}

void ddp_checkpoints_replicate(ddp_checkpoints_t *c, int first_rank, int nranks, int world_size,
                               const ddp_replica_peer_t *peers, int n)
{
    ddp_checkpoint_replicas_round(c != NULL ? c->replicas : NULL, first_rank, nranks, world_size,
                                  peers, n);
}

int64_t ddp_checkpoints_step(const ddp_checkpoints_t *c)
{
    return c != NULL ? c->step : -1;
}

bool ddp_checkpoints_restored(const ddp_checkpoints_t *c)
{
    return c != NULL && (c->restored || c->restore_from != NULL);
}

void ddp_checkpoints_free(ddp_checkpoints_t *c, bool persist)
{
    if (c == NULL)
        return;
    uint64_t peak, received = ddp_checkpoint_replicas_received(c->replicas);
    (void)ddp_checkpoint_sums_held(c->sums, &peak);
    ddp_checkpoint_sums_stop(c->sums, persist); /* (first: it tells the replicas' sender) */
    ddp_checkpoint_replicas_stop(c->replicas);
    if (received > 0)
        ddp_log_info(c->log,
                     "in-memory checkpoints: %" PRIu64 " bytes of other nodes' replicas "
                     "were received and kept",
                     received);
    if (c->dir[0] != '\0' && peak > 0)
        ddp_log_info(c->log, "in-memory checkpoints: the launcher held %" PRIu64 " bytes at most",
                     peak);
    int err = c->dir[0] != '\0' ? ddp_ckpt_remove_dir(c->dir) : 0;
    if (err != 0 && err != -ENOENT)
        ddp_log_warn(c->log, "unable to remove the checkpoint directory %s: %s", c->dir,
                     ddp_strerror(err));
    free(c->found);
    free(c->reps);
    free(c);
}
