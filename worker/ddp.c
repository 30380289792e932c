/* libddp's context: init from the launcher's environment, rank information.
 *
 * Runs on the caller's thread; holds no global state. */
#include "ddp.h"

#include "env.h"
#include "error.h"
#include "log.h"
#include "parse.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>

struct ddp_s {
    ddp_log_t log;
    int rank, world_size;
    int local_rank, local_world_size;
    int restart_count;
};

/* Reads an integer variable in [min, max]; a missing or bad one is logged by name. */
static int read_int(const ddp_log_t *log, ddp_env_id_t id, long min, long max, int *out)
{
    const char *name = ddp_env_name(id);
    const char *text = getenv(name);
    long v;
    if (text == NULL || *text == '\0') {
        ddp_log_error(log,
                      "%s is not set: start this program with ddp-launch (or torchrun), which "
                      "sets RANK, WORLD_SIZE, LOCAL_RANK and LOCAL_WORLD_SIZE",
                      name);
        return DDP_EUSAGE;
    }
    if (ddp_parse_long(text, min, max, &v) != 0) {
        ddp_log_error(log, "%s=%s is not an integer between %ld and %ld", name, text, min, max);
        return DDP_EUSAGE;
    }
    *out = (int)v;
    return 0;
}

int ddp_init(ddp_t **out)
{
    ddp_t *ddp = calloc(1, sizeof *ddp);
    int err;
    if (ddp == NULL)
        return -ENOMEM;
    ddp_log_init(&ddp->log, "libddp", DDP_LOG_INFO);
    if ((err = read_int(&ddp->log, DDP_ENV_WORLD_SIZE, 1, INT_MAX, &ddp->world_size)) != 0 ||
        (err = read_int(&ddp->log, DDP_ENV_RANK, 0, ddp->world_size - 1, &ddp->rank)) != 0 ||
        (err = read_int(&ddp->log, DDP_ENV_LOCAL_WORLD_SIZE, 1, ddp->world_size,
                        &ddp->local_world_size)) != 0 ||
        (err = read_int(&ddp->log, DDP_ENV_LOCAL_RANK, 0, ddp->local_world_size - 1,
                        &ddp->local_rank)) != 0)
        goto fail;
    if (getenv(ddp_env_name(DDP_ENV_TORCHELASTIC_RESTART_COUNT)) != NULL &&
        (err = read_int(&ddp->log, DDP_ENV_TORCHELASTIC_RESTART_COUNT, 0, INT_MAX,
                        &ddp->restart_count)) != 0)
        goto fail;
    *out = ddp;
    return 0;
fail:
    free(ddp);
    return err;
}

int ddp_rank(const ddp_t *ddp)
{
    return ddp->rank;
}

int ddp_world_size(const ddp_t *ddp)
{
    return ddp->world_size;
}

int ddp_local_rank(const ddp_t *ddp)
{
    return ddp->local_rank;
}

int ddp_local_world_size(const ddp_t *ddp)
{
    return ddp->local_world_size;
}

int ddp_restart_count(const ddp_t *ddp)
{
    return ddp->restart_count;
}

void ddp_finalize(ddp_t *ddp)
{
    free(ddp);
}
