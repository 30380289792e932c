/* In-memory checkpoints, the agent's part (agent/checkpoints.c): the directory on /dev/shm
 * the workers keep their slots in (common/ckpt.h's contract), made once for the job, named
 * in every worker's DDP_CHECKPOINT_DIR, cold or forked from the zygote, kept across
 * restarts, and removed at the job's end with what it holds (by the orphan guard where
 * the launcher is SIGKILLed). A DDP_CHECKPOINT_DIR the user set is theirs: used, never
 * removed. Runs on the agent's loop thread. */
#ifndef DDP_LAUNCHER_AGENT_CHECKPOINTS_H
#define DDP_LAUNCHER_AGENT_CHECKPOINTS_H

#include "config/config.h"
#include "log.h"
#include "spawn/guard.h"

typedef struct ddp_checkpoints_s ddp_checkpoints_t;

/* Where the workers' checkpoints go: DDP_CHECKPOINT_DIR where the user set it (in the
 * environment or with --env), else a new directory on /dev/shm (mode 0700, named after
 * the run id and unique), told to `guard`. Where it cannot be made, one line says why and
 * the job runs without (saves do nothing). 0 and *out, or -ENOMEM. */
int ddp_checkpoints_new(const ddp_launch_config_t *cfg, const ddp_log_t *log, ddp_guard_t *guard,
                        ddp_checkpoints_t **out);

/* The directory for the workers' DDP_CHECKPOINT_DIR, or NULL where the launcher names none
 * (the user's own is in their environment already, or there is none). */
const char *ddp_checkpoints_dir(const ddp_checkpoints_t *c);

/* Removes the directory this launcher made and what it holds (said where it cannot),
 * once no worker runs; then frees. */
void ddp_checkpoints_free(ddp_checkpoints_t *c);

#endif
