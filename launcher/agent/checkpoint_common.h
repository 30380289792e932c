/* In-memory checkpoints across nodes (agent/checkpoint_common.c): the step every rank of a
 * multi-node round holds, agreed through the round's store before its workers start, at a
 * cost at the store of O(N) keys and bytes a round for N nodes. Each node publishes the
 * complete steps its ranks hold (its scan, agent/checkpoints.h) at <round>/ckpt/<node
 * rank>. The round's node 0 alone (the aggregator) waits (bounded) for every node's record,
 * reads them all in one request and takes the newest step every rank of the round holds,
 * itself or as a replica on some node: the workers' DDP_CHECKPOINT_STEP. A record also says
 * where its node takes replicas (agent/checkpoint_replicas.h) and which it holds; node 0
 * publishes one plan (<round>/ckpt-plan): the step, the job's replica rate, and for each
 * rank that lacks the step the nodes holding its replica (where they take requests), or
 * "none" and why no step can be agreed. Every other node waits for that one key (bounded:
 * node 0 lost, no step), fetches what it lacks from a replica's holder before the workers
 * start and reads the records of the nodes it replicates to (k keys). Then, where the plan
 * has a step, each node publishes its outcome (<round>/ckpt-done/<node rank>); node 0 waits
 * for every node's and sets the round's verdict (<round>/ckpt-verdict), which every node
 * with a step takes: a fetch that failed anywhere leaves every node's step unset. The
 * store's work and the fetches run on a thread of the loop's pool, the store's on a
 * connection of its own; a peer's record, plan, outcome or verdict is untrusted text,
 * parsed strictly. The rest runs on the agent's loop. */
#ifndef DDP_LAUNCHER_AGENT_CHECKPOINT_COMMON_H
#define DDP_LAUNCHER_AGENT_CHECKPOINT_COMMON_H

#include "agent/checkpoint_replicas.h"
#include "buf.h"
#include "config/config.h"
#include "log.h"

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#define DDP_CKPT_COMMON_STEPS 4 /* the steps a record may list for one rank */

/* The complete steps one rank holds (n of them, in any order); n = -1: no record said. */
typedef struct {
    int n;
    int64_t step[DDP_CKPT_COMMON_STEPS];
} ddp_ckpt_rank_steps_t;

/* A node's record: "ckpt1 HOST PORT KEY FIRST N" (HOST PORT: where it takes replicas, KEY
 * its secret, agent/checkpoint_replicas.h; "- 0 -" none), for each of its N ranks from FIRST on "
 * K" and its K steps, then " M" and the M replicas of other ranks it holds, each " RANK STEP",
 * then " RATE" where self->rate says one (its --checkpoint-replica-rate). 0, or -ENOMEM. */
int ddp_checkpoint_common_format(const ddp_replica_peer_t *self, int first_rank, int nranks,
                                 const ddp_ckpt_rank_steps_t *ranks, const ddp_replica_step_t *reps,
                                 size_t nreps, ddp_buf_t *out);

/* Parses a node's record (len bytes at text, no NUL needed) into *peer, held[first ..
 * first+N-1] of a round of `world_size` ranks and its replicas into reps[0 .. *nreps-1]
 * (room for 2 * world_size; node -1), refusing any field out of range (a host of other
 * than [0-9A-Za-z.:%-], a port over 65535, more than 2 replicas a rank of the world), a rank
 * outside the world or already said by another record, anything after the last field. 0,
 * or DDP_EPARSE with `why` (held, *peer and *nreps untouched). */
int ddp_checkpoint_common_parse(const char *text, size_t len, int world_size,
                                ddp_ckpt_rank_steps_t *held, ddp_replica_peer_t *peer,
                                ddp_replica_step_t *reps, size_t *nreps, ddp_buf_t *why);

/* The newest step that every one of the `world_size` ranks holds, itself (held) or as a
 * replica on some node (reps, n of them; may be 0); -1 where there is none, or a rank no
 * record said (n < 0). */
int64_t ddp_checkpoint_common_step(const ddp_ckpt_rank_steps_t *held, int world_size,
                                   const ddp_replica_step_t *reps, size_t nreps);

/* A holder of a rank's replica of the plan's step: node `node`, which takes requests at
 * `peer` (its rate unused). */
typedef struct {
    int rank, node;
    ddp_replica_peer_t peer;
} ddp_ckpt_plan_fetch_t;

/* The round's plan, made by its node 0 from every node's record: the step (-1: none every
 * rank holds), the job's replica rate (the lowest published; 0: none said), whether any rank
 * holds a step, and for each rank lacking the step the nodes holding its replica of it
 * (fetch[0 .. nfetch-1], in node order a rank); or, where no step can be agreed, why
 * (`none`, not empty). */
typedef struct {
    int64_t step;
    uint64_t rate;
    bool any;
    ddp_ckpt_plan_fetch_t *fetch;
    size_t nfetch;
    ddp_buf_t none;
} ddp_ckpt_plan_t;

#define DDP_CKPT_PLAN_INIT               \
    {                                    \
        .step = -1, .none = DDP_BUF_INIT \
    }

/* The plan's text: "none WHY" where plan->none says why, else "plan1 STEP RATE ANY F" (STEP
 * "-" where none, ANY 0 or 1) and F entries " RANK NODE HOST PORT KEY". 0, or -ENOMEM. */
int ddp_checkpoint_common_plan_format(const ddp_ckpt_plan_t *plan, ddp_buf_t *out);

/* Parses a plan (len bytes at text, a peer's: no NUL needed) of a round of `world_size`
 * ranks on `nnodes` nodes into *plan (freed first; "none WHY": its WHY, each byte outside
 * printable ASCII as '?', into plan->none), refusing a rank or node out of range, an entry
 * without a step, a host, port or key that is not one (agent/checkpoint_replicas.h), a rate
 * out of --checkpoint-replica-rate's range, more entries than world_size * nnodes, an empty
 * WHY, anything after the last field. 0; DDP_EPARSE with `why` (*plan then has no step);
 * -ENOMEM. */
int ddp_checkpoint_common_plan_parse(const char *text, size_t len, int world_size, int nnodes,
                                     ddp_ckpt_plan_t *plan, ddp_buf_t *why);

void ddp_checkpoint_common_plan_free(ddp_ckpt_plan_t *plan);

typedef struct ddp_checkpoint_common_s ddp_checkpoint_common_t;

/* Where and what a node agrees on. */
typedef struct {
    int round, node_rank, nnodes, world_size, first_rank, nranks;
    double timeout;   /* s: the wait for every node's record (node 0), for the plan (the others) */
    int targets;      /* the nodes after this one (in node order) it replicates to: their
                       * records are read, for ddp_checkpoint_common_peer */
    int replica_port; /* where this node takes replicas (its address: the store's view); 0 */
    char replica_key[DDP_REPLICA_KEY_CHARS + 1]; /* what a request there carries */
    ddp_checkpoint_replicas_t *replicas;         /* the listener, told that address (it may take
                                                  * another port there); NULL: replica_port as it is */
    const char *dir; /* the launcher's checkpoint directory, where a rank's checkpoint held
                      * as a replica elsewhere is fetched to; NULL: none (copied) */
} ddp_checkpoint_common_round_t;

/* Publishes this node's record (its ranks' steps, `ranks`: nranks entries, and the replicas
 * of other ranks it holds, `reps`: nreps; copied) in the round's store at cfg's master
 * address and takes the round's plan (node 0: reads every node's record and publishes it),
 * on a thread of `loop`'s pool; where a rank of this node lacks the step every rank holds,
 * fetches it from a node holding its replica into the directory
 * (agent/checkpoint_replicas.h). Then done(ctx, x, step) on the loop, with that step or -1
 * (why said in one line: a node that did not publish within the timeout, a record that is
 * not one, node 0's plan not published or not one, the store not reached, a replica that
 * could not be fetched here or on another node, named).
 * 0 and *out (the caller's until `done`), or an error (said): `done` is not called. */
int ddp_checkpoint_common_start(uv_loop_t *loop, const ddp_launch_config_t *cfg,
                                const ddp_log_t *log, const ddp_checkpoint_common_round_t *round,
                                const ddp_ckpt_rank_steps_t *ranks, const ddp_replica_step_t *reps,
                                size_t nreps,
                                void (*done)(void *ctx, ddp_checkpoint_common_t *x, int64_t step),
                                void *ctx, ddp_checkpoint_common_t **out);

/* In `done`: the job's replica rate, the lowest --checkpoint-replica-rate of this node's
 * and of the records node 0 read (0: none said). */
uint64_t ddp_checkpoint_common_rate(const ddp_checkpoint_common_t *x);

/* In `done`: where node i takes replicas (its record's; port 0: none, or no record, or, but
 * on node 0, a node other than the round's `targets` next ones). */
const ddp_replica_peer_t *ddp_checkpoint_common_peer(const ddp_checkpoint_common_t *x, int i);

/* Ends the wait under way at once (the job ends, or the round stopped): `done` still comes,
 * with -1 and nothing said. */
void ddp_checkpoint_common_cancel(ddp_checkpoint_common_t *x);

#endif
