/* Slurm's environment: its host lists ("node[01-04,07]"), its task counts per node, the
 * store's port of a job (pure), and the flags' defaults its variables give inside a job
 * step. */
#ifndef DDP_LAUNCHER_CONFIG_SLURM_H
#define DDP_LAUNCHER_CONFIG_SLURM_H

#include "buf.h"
#include "config/config.h"
#include "log.h"

#include <stddef.h>

/* Calls emit(ctx, host) for each host of a Slurm host list, in Slurm's order: entries
 * separated by commas, each a name with bracketed ranges ("n[1-3,7]", "r[1-2]-n[01-02]":
 * every combination, the last bracket varying fastest; a range keeps the width of its
 * zero-padded lower bound). emit returns nonzero to stop early. 0, or DDP_EINVAL with
 * the reason in `why` (unbalanced brackets, a bad range, an empty name, more than
 * 1,000,000 hosts). */
int ddp_slurm_hostlist_each(const char *list, int (*emit)(void *ctx, const char *host), void *ctx,
                            ddp_buf_t *why);

/* The first host of `list` into out[cap]. 0, or DDP_EINVAL with the reason in `why`. */
int ddp_slurm_first_host(const char *list, char *out, size_t cap, ddp_buf_t *why);

/* The number of tasks on node `node` (0-based) of a step, from Slurm's compressed counts
 * (SLURM_STEP_TASKS_PER_NODE: "2(x3),1" is 2, 2, 2, 1). 0, or DDP_EPARSE with the reason
 * in `why`. */
int ddp_slurm_tasks_on_node(const char *spec, int node, int *count, ddp_buf_t *why);

/* The store's port of a multi-node job inside Slurm when none is given: one per job step
 * (DDP_SLURM_PORT_BASE + (SLURM_JOB_ID + DDP_SLURM_STEP_STRIDE * SLURM_STEP_ID) mod
 * DDP_SLURM_PORT_SPAN, below Linux's ephemeral ports and 29500), the same on every node
 * of the step, so two jobs, or two steps of one job, sharing a node do not meet. `step_id`
 * NULL or not a number counts as step 0. -1 when `job_id` is not a number. */
#define DDP_SLURM_PORT_BASE   10000
#define DDP_SLURM_PORT_SPAN   19000
#define DDP_SLURM_STEP_STRIDE 7919 /* a prime: a job's steps spread over the span */
int ddp_slurm_port(const char *job_id, const char *step_id);

/* Within config/ (the parser's, over the flags' raw values of flags.h). Inside a Slurm job
 * step, what neither a flag nor a PET_ variable gave: --nnodes from SLURM_NNODES, --node-rank
 * from SLURM_NODEID, --master-addr from the first host of the step's node list (`host`
 * holds it while the values are applied); a step of more than one task on this node is
 * DDP_EUSAGE. After the flags: the job's own store port, and a Slurm allocation outside a
 * step started on every node through srun (cfg->slurm_fanout). */
typedef struct ddp_flag_raw_s ddp_flag_raw_t;
int ddp_slurm_defaults(ddp_flag_raw_t *raw, char *const *envp, char *host, size_t cap,
                       const ddp_log_t *log, ddp_buf_t *err);
void ddp_slurm_after(ddp_launch_config_t *cfg, const ddp_flag_raw_t *raw, char *const *envp,
                     const ddp_log_t *log);

#endif
