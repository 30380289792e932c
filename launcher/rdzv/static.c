/* Static rendezvous at the coordinator: every node rank 0..nnodes-1 claimed by one live
 * launcher (--node-rank), all of them joined, within --rdzv-conf timeout. A claim of a
 * rank held by another launcher waits: if the holder is lost within the keep-alive
 * limit, the claimant takes its place (a lost node's launcher started again); if the
 * holder stays alive, the rank is a duplicate: while the job forms, the job ends; while
 * it runs, only the claimant is sent away (it does not belong to the job). */
#include "rdzv/backend.h"

#include "error.h"

#include <errno.h>
#include <stdlib.h>

static int static_init(ddp_rdzv_coord_t *c)
{
    c->holders = calloc((size_t)c->cfg->nnodes_max, sizeof *c->holders);
    return c->holders != NULL ? 0 : -ENOMEM;
}

/* `m` holds its rank, and counts towards the forming round. */
static void take_rank(ddp_rdzv_coord_t *c, ddp_rdzv_member_t *m)
{
    c->holders[m->join.node_rank] = m;
    if (m->dup_since >= 0)
        c->npending--;
    m->dup_since = -1;
    c->nheld++;
}

static int static_admit(ddp_rdzv_coord_t *c, ddp_rdzv_member_t *m, double now, ddp_buf_t *why)
{
    int rank = m->join.node_rank;
    if (rank < 0 || rank >= c->cfg->nnodes_max) {
        ddp_buf_printf(why, "launcher %s joined without a node rank of 0 to %d", m->id,
                       c->cfg->nnodes_max - 1);
        return DDP_EUSAGE;
    }
    ddp_rdzv_member_t *holder = c->holders[rank];
    if (holder == NULL || holder == m || holder->lost) {
        take_rank(c, m);
        return 0;
    }
    m->dup_since = now;
    c->npending++;
    return 0;
}

static void static_forget(ddp_rdzv_coord_t *c, ddp_rdzv_member_t *m)
{
    if (m->dup_since >= 0) {
        m->dup_since = -1;
        c->npending--;
    } else if (c->holders[m->join.node_rank] == m) {
        c->nheld--;
    }
}

static int static_close(ddp_rdzv_coord_t *c, double now, ddp_rdzv_member_t **ranked)
{
    (void)now;
    int n = c->cfg->nnodes_max;
    if (c->nheld < n || c->npending > 0)
        return 0;
    for (int i = 0; i < n; i++)
        ranked[i] = c->holders[i];
    c->nheld = 0; /* they leave the forming round for the running one */
    return n;
}

static bool static_waiting(ddp_rdzv_coord_t *c, double now, ddp_buf_t *status)
{
    const ddp_launch_config_t *cfg = c->cfg;
    double deadline = c->forming_since + cfg->rdzv_conf.timeout;
    bool expired = now >= deadline;
    if (!expired && now < c->next_status)
        return false;
    int n = cfg->nnodes_max;
    bool *here = calloc((size_t)n, sizeof *here);
    if (here == NULL)
        return false;
    for (int i = 0; i < n; i++)
        here[i] = c->holders[i] != NULL && c->holders[i]->joined && !c->holders[i]->lost;
    ddp_buf_t missing = DDP_BUF_INIT;
    ddp_buf_runs(&missing, here, n, 20, 0);
    free(here);
    if (expired)
        ddp_buf_printf(status,
                       "round %d: node(s) %s did not join within %g s (--rdzv-conf timeout); "
                       "the store is at %s:%d",
                       c->round, ddp_buf_str(&missing), cfg->rdzv_conf.timeout, cfg->master_addr,
                       ddp_store_server_port(c->server));
    else
        ddp_buf_printf(status,
                       "round %d: waiting for node(s) %s to join (%.0f s so far; giving up in "
                       "%.0f s, --rdzv-conf timeout)",
                       c->round, ddp_buf_str(&missing), now - c->forming_since, deadline - now);
    ddp_buf_free(&missing);
    return expired;
}

/* Claims of a held rank: the claimant takes it once the holder is lost; a holder still
 * alive after the keep-alive limit makes it a duplicate. */
static int static_tick(ddp_rdzv_coord_t *c, double now, ddp_buf_t *why)
{
    double limit = c->services->beat_limit(c) + 0.5;
    for (size_t i = 0; i < c->nmembers && c->npending > 0; i++) {
        ddp_rdzv_member_t *m = c->members[i];
        if (!m->joined || m->dup_since < 0)
            continue;
        int rank = m->join.node_rank;
        ddp_rdzv_member_t *holder = c->holders[rank];
        if (holder == NULL || holder->lost) {
            take_rank(c, m);
        } else if (holder->in_round && now - m->dup_since > limit) {
            /* The job runs with the rank's holder alive: the newcomer is not part of it
             * (another job's launcher on the same port, say), and the job goes on. */
            char message[DDP_RDZV_MSG_MAX];
            snprintf(message, sizeof message,
                     "node rank %d of job '%s' is held by a running launcher (%s on %s): this "
                     "launcher is not part of that job (another job or Slurm step on the same "
                     "store? give each its own --master-port and --rdzv-id)",
                     rank, c->cfg->run_id, holder->id, holder->join.host);
            c->services->refuse(c, m, message);
        } else if (now - m->dup_since > limit) {
            ddp_buf_printf(why,
                           "node rank %d is taken: another launcher (%s) joined with "
                           "--node-rank=%d (every node needs its own, 0 to %d)",
                           rank, holder->id, rank, c->cfg->nnodes_max - 1);
            return DDP_EUSAGE;
        }
    }
    return 0;
}

static const ddp_rdzv_member_t *static_taken_by(const ddp_rdzv_coord_t *c,
                                                const ddp_rdzv_member_t *m)
{
    int rank = m->join.node_rank;
    if (rank < 0 || rank >= c->cfg->nnodes_max)
        return NULL;
    const ddp_rdzv_member_t *holder = c->holders[rank];
    return holder != NULL && holder != m && !holder->lost ? holder : NULL;
}

static bool static_reform_on_join(const ddp_rdzv_coord_t *c)
{
    (void)c;
    return false;
}

const ddp_rdzv_backend_ops_t ddp_rdzv_static_backend = {
    .name = "static",
    .init = static_init,
    .admit = static_admit,
    .forget = static_forget,
    .close = static_close,
    .waiting = static_waiting,
    .tick = static_tick,
    .taken_by = static_taken_by,
    .reform_on_join = static_reform_on_join,
    .loss_reforms = false,
};
