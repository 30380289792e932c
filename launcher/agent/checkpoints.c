/* In-memory checkpoints, the agent's part (see agent/checkpoints.h): the directory's life.
 * Runs on the agent's loop thread; what it does to the file system here (one mkdtemp at
 * the job's start, the removal at its end, when no worker runs) is the launcher's own
 * tmpfs, not a worker's file. */
#include "agent/checkpoints.h"

#include "ckpt_file.h"
#include "env.h"
#include "error.h"
#include "io.h"

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Where the directory is made: a tmpfs on every Linux the launcher runs on. */
#define SHM_DIR "/dev/shm"
/* The run id's characters kept in the directory's name. */
#define NAME_ID_MAX 48

struct ddp_checkpoints_s {
    const ddp_log_t *log;
    char dir[PATH_MAX]; /* the directory this launcher made; "" none */
};

extern char **environ;

/* The run id as a file name's part: [A-Za-z0-9._-], others '_', at most NAME_ID_MAX. */
static void name_part(const char *run_id, char *out)
{
    size_t n = 0;
    for (; run_id != NULL && run_id[n] != '\0' && n < NAME_ID_MAX; n++) {
        char c = run_id[n];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '.' || c == '_' || c == '-';
        out[n] = ok ? c : '_';
    }
    out[n] = '\0';
}

/* /dev/shm/ddp-ckpt-<run id>-<pid>-<random>, mode 0700: the guard is told of it before it
 * is made (a launcher SIGKILLed in between leaves nothing), and told to forget it where it
 * could not be made (the name is another's: it is not the guard's to remove). Said where it
 * cannot be made. */
static void make_dir(ddp_checkpoints_t *c, const ddp_launch_config_t *cfg, ddp_guard_t *guard)
{
    char id[NAME_ID_MAX + 1], uuid[37], path[sizeof c->dir];
    name_part(cfg->run_id, id);
    int err = ddp_random_uuid(uuid);
    if (err == 0) {
        snprintf(path, sizeof path, SHM_DIR "/ddp-ckpt-%s-%d-%.8s%.4s", id, (int)getpid(), uuid,
                 uuid + 9);
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

int ddp_checkpoints_new(const ddp_launch_config_t *cfg, const ddp_log_t *log, ddp_guard_t *guard,
                        ddp_checkpoints_t **out)
{
    ddp_checkpoints_t *c = calloc(1, sizeof *c);
    if (c == NULL)
        return -ENOMEM;
    c->log = log;
    const char *name = ddp_env_name(DDP_ENV_DDP_CHECKPOINT_DIR), *own;
    if ((own = ddp_env_lookup(cfg->env_set, name)) != NULL ||
        (own = ddp_env_lookup(environ, name)) != NULL)
        ddp_log_debug(log, "in-memory checkpoints go to %s (DDP_CHECKPOINT_DIR, yours)", own);
    else
        make_dir(c, cfg, guard);
    *out = c;
    return 0;
}

const char *ddp_checkpoints_dir(const ddp_checkpoints_t *c)
{
    return c != NULL && c->dir[0] != '\0' ? c->dir : NULL;
}

void ddp_checkpoints_free(ddp_checkpoints_t *c)
{
    if (c == NULL)
        return;
    int err = c->dir[0] != '\0' ? ddp_ckpt_remove_dir(c->dir) : 0;
    if (err != 0 && err != -ENOENT)
        ddp_log_warn(c->log, "unable to remove the checkpoint directory %s: %s", c->dir,
                     ddp_strerror(err));
    free(c);
}
