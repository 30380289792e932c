/* In-memory checkpoints, the agent's part (agent/checkpoints.c): the directory on /dev/shm
 * the workers keep their slots in (common/ckpt.h's contract), made once for the job, named
 * in every worker's DDP_CHECKPOINT_DIR, cold or forked from the zygote, kept across
 * restarts, and removed at the job's end with what it holds (by the orphan guard where
 * the launcher is SIGKILLed). A DDP_CHECKPOINT_DIR the user set is theirs: used, never
 * removed. After a failure, before a one-node job's next attempt, every rank's slots are
 * read on a thread (pread and ckpt.h's sequence lock, a checksum verified where one was
 * written) for the step every rank holds complete: the workers' DDP_CHECKPOINT_STEP. In
 * the launcher's own directory, the slots are checksummed as they complete, on a thread
 * (agent/checkpoint_sums.h), and with --checkpoint-dir copied to disk; a new job starts from
 * the copies there (one node: put in place before the loop runs; several: its ranks', on the
 * first scan's thread). The rest runs on the agent's loop thread. */
#ifndef DDP_LAUNCHER_AGENT_CHECKPOINTS_H
#define DDP_LAUNCHER_AGENT_CHECKPOINTS_H

#include "agent/checkpoint_replicas.h"
#include "config/config.h"
#include "log.h"
#include "spawn/guard.h"

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

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

/* Reads the slots of ranks first_rank .. first_rank + nranks - 1 of a job of `world_size`
 * (every rank of a one-node job; a multi-node round's on this node) on a thread of `loop`'s pool,
 * and calls done(ctx) on the loop once the step every rank holds complete is known
 * (ddp_checkpoints_step). A slot that fails its checks is said in one line (rank, slot, why) and
 * not counted. Several nodes and --checkpoint-dir: the first scan puts those ranks' copies
 * there in place first. False where there is no directory or the thread cannot start (said): `done`
 * is not called. */
bool ddp_checkpoints_scan(ddp_checkpoints_t *c, uv_loop_t *loop, int first_rank, int nranks,
                          int world_size, void (*done)(void *ctx), void *ctx);
/* A scan under way stops at its next look (the job ends): `done` still comes, with no
 * step. */
void ddp_checkpoints_cancel(ddp_checkpoints_t *c);
/* The step the last scan found every rank holds complete; -1: none (DDP_CHECKPOINT_STEP
 * unset: the ranks agree where they can, common/ckpt.h). */
int64_t ddp_checkpoints_step(const ddp_checkpoints_t *c);

/* The steps local rank i (of the last scan's ranks) holds usable, into steps[0 ..]: their
 * number, 0 to 2 (none where the last scan was cancelled or did not run). For the step
 * agreed across nodes (agent/checkpoint_common.h). */
int ddp_checkpoints_rank_steps(const ddp_checkpoints_t *c, int i, int64_t steps[2]);

/* The replicas of other nodes' ranks the last scan found usable here (each read and
 * checked as a slot is), into *out (the part's, until the next scan): their number. */
size_t ddp_checkpoints_replica_steps(const ddp_checkpoints_t *c, const ddp_replica_step_t **out);

/* Several nodes (and --checkpoint-replicas not 0, the directory the launcher's): the port
 * it takes other nodes' replicas on (agent/checkpoint_replicas.h); 0: none. */
int ddp_checkpoints_replica_port(const ddp_checkpoints_t *c);
/* Its secret (agent/checkpoint_replicas.h); "" none. */
const char *ddp_checkpoints_replica_key(const ddp_checkpoints_t *c);
/* Its listener (agent/checkpoint_replicas.h), to be told the address published; NULL: none. */
ddp_checkpoint_replicas_t *ddp_checkpoints_replicas(const ddp_checkpoints_t *c);

/* A round began: this node's ranks' slots go to `peers` (n; copied) from now on. */
void ddp_checkpoints_replicate(ddp_checkpoints_t *c, int first_rank, int nranks, int world_size,
                               const ddp_replica_peer_t *peers, int n);

/* The most bytes the directory's files held (the checksums' thread's looks); 0 where the
 * directory is not the launcher's. */
uint64_t ddp_checkpoints_held(const ddp_checkpoints_t *c);

/* Whether --checkpoint-dir's copies were put in place for the first attempt, or are to be
 * by the next scan (several nodes): its start then reads the slots as a restart's does. */
bool ddp_checkpoints_restored(const ddp_checkpoints_t *c);

/* Removes the directory this launcher made and what it holds (said where it cannot),
 * once no worker runs; then frees. With `persist` (the job failed or was stopped) and
 * --checkpoint-dir, every rank's newest checkpoint is copied there first. */
void ddp_checkpoints_free(ddp_checkpoints_t *c, bool persist);

#endif
