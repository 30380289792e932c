/* Static rendezvous of a multi-node job: the launchers of every node meet in the store
 * that node 0's launcher hosts, form each round (attempt) of the job together and end
 * it together.
 *
 * A thread of the agent speaks to the store with the blocking client (node 0's too, over
 * its own loop's server), and hands the agent's loop commands through a uv_async: start
 * round R with this world, stop the workers (another node failed), finish with this
 * status. The loop posts what happens to the local workers: a failure, their end after
 * a stop, their success, or the launcher's own end (a signal).
 *
 * Dynamic rendezvous (c10d, --nnodes=MIN:MAX): launchers join the open round in arrival
 * order; it closes at MAX nodes, or at MIN once last_call_timeout has passed since MIN
 * were there; node ranks keep last round's order, newcomers after. A node that comes
 * after the close waits in the next round, and the running nodes re-form with it; a
 * lost node makes the others re-form without it (while MIN remain). Re-forming costs
 * no restart.
 *
 * In the store, under ddp-launch/rdzv/<run id>/ (kept when a round's keys are cleared):
 *   <round>/claim/<node rank>   ADD: a second claim is a duplicate --node-rank
 *   <round>/node/<node rank>    "nnodes nproc max_restarts host"
 *   <round>/cleared             node 0 cleared the previous round's keys (round > 0)
 *   <round>/failed              the first failure of the round, named
 *   <round>/done                nodes whose workers all succeeded (ADD)
 *   exit                        nodes gone after success (ADD); node 0 waits for all
 *   abort                       the job ends on every node, without restarts
 *   beat/<node rank or id>      heartbeats (ADD)
 * and for dynamic rendezvous:
 *   open                        the newest round (ADD)
 *   <round>/join                arrivals (ADD: the arrival index)
 *   <round>/member/<arrival>    "nproc previous_rank max_restarts id"
 *   <round>/closed              how many arrivals the round took
 *   finished                    the job succeeded: a waiting latecomer leaves */
#ifndef DDP_LAUNCHER_RDZV_H
#define DDP_LAUNCHER_RDZV_H

#include "cli.h"
#include "log.h"

#include <uv.h>

typedef struct ddp_rdzv_s ddp_rdzv_t;

typedef enum {
    DDP_RDZV_CMD_NONE,
    DDP_RDZV_CMD_START,  /* start the workers of `world` */
    DDP_RDZV_CMD_STOP,   /* another node failed (message): stop the workers */
    DDP_RDZV_CMD_FINISH, /* the job is over: exit with `exit_code` (message: why) */
} ddp_rdzv_cmd_t;

typedef struct {
    int round;       /* the rendezvous round: its store keys */
    int restarts;    /* TORCHELASTIC_RESTART_COUNT: rounds begun after a failure */
    int node_rank;   /* GROUP_RANK: given (static) or assigned (c10d) */
    int nnodes;      /* GROUP_WORLD_SIZE */
    int rank_offset; /* the global rank of this node's local rank 0 */
    int world_size;  /* the workers of every node */
} ddp_rdzv_world_t;

typedef enum {
    DDP_RDZV_EV_FAILED,    /* a local worker failed (message): the round must stop */
    DDP_RDZV_EV_STOPPED,   /* after a failure, every local worker has ended */
    DDP_RDZV_EV_SUCCEEDED, /* every local worker of the round succeeded */
    DDP_RDZV_EV_ABORT,     /* this launcher ends (message): so does the job */
} ddp_rdzv_event_t;

/* Starts the thread. `hosting`: this launcher's loop serves the store (node 0's, or the
 * c10d endpoint's). `on_command` runs on the loop when a command is ready (take it
 * with ddp_rdzv_take). */
int ddp_rdzv_start(uv_loop_t *loop, const ddp_launch_config_t *cfg, const ddp_log_t *log,
                   bool hosting, void (*on_command)(void *ctx), void *ctx, ddp_rdzv_t **out);

/* Whether `cfg` asks for dynamic (c10d, elastic) rendezvous across nodes. */
bool ddp_rdzv_dynamic(const ddp_launch_config_t *cfg);

/* From the loop: what happened to the local workers (message may be NULL). */
void ddp_rdzv_post(ddp_rdzv_t *r, ddp_rdzv_event_t event, const char *message);

/* From the loop: the next command, or DDP_RDZV_CMD_NONE when there is none left (the
 * on_command callback takes them all: one wake-up may stand for several). */
ddp_rdzv_cmd_t ddp_rdzv_take(ddp_rdzv_t *r, ddp_rdzv_world_t *world, int *exit_code, char *message,
                             size_t cap);

/* The key node 0 sets in its own store once it has cleared the keys of the rounds
 * before `round`; into key[cap]. */
void ddp_rdzv_cleared_key(const ddp_launch_config_t *cfg, int round, char *key, size_t cap);

/* From the loop, when the agent finishes: the thread is told to stop and the async
 * handle closed (the thread ends once its current store call returns). */
void ddp_rdzv_close(ddp_rdzv_t *r);

/* After the loop has ended: joins the thread and frees everything. */
void ddp_rdzv_free(ddp_rdzv_t *r);

#endif
