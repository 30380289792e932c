/* Dynamic (c10d) rendezvous at the coordinator: launchers join in arrival order; the
 * round closes at MAX (every live launcher of the last round back), or at MIN once
 * last_call_timeout has passed since MIN were there and every live launcher of the last
 * round is back; node ranks keep the last round's order, newcomers after (a lost node's
 * rank to the first waiting launcher with its worker count, so that the other nodes' global
 * ranks stay: hot spares with another count are refused as they come). In a re-form
 * the last round's live launchers count as there from the stop: each has its outcome and
 * is on its way back (one lost stops counting), so the last call runs while they stop
 * their workers and rejoin, not after. A join while a round of fewer than MAX runs
 * re-forms the job, and so does a lost launcher (no restart spent either way). Fewer
 * than MIN for join_timeout ends the job. */
#include "rdzv/backend.h"

#include <errno.h>
#include <stdlib.h>

static int c10d_init(ddp_rdzv_coord_t *c)
{
    c->place_nproc = calloc((size_t)c->cfg->nnodes_max, sizeof *c->place_nproc);
    return c->place_nproc != NULL ? 0 : -ENOMEM;
}

/* Launchers there towards MIN: the joined, and the last round's live ones not back yet. */
static int there(const ddp_rdzv_coord_t *c)
{
    return c->njoined + c->nawaited;
}

/* Last round's ranks first, in that order, then newcomers in arrival order. */
static int member_order(const void *a, const void *b)
{
    const ddp_rdzv_member_t *x = *(ddp_rdzv_member_t *const *)a,
                            *y = *(ddp_rdzv_member_t *const *)b;
    int px = x->node_rank >= 0 ? x->node_rank : 1 << 30,
        py = y->node_rank >= 0 ? y->node_rank : 1 << 30;
    if (px != py)
        return px < py ? -1 : 1;
    return x->arrival < y->arrival ? -1 : x->arrival > y->arrival;
}

/* The last call runs from the moment MIN are there (an awaited launcher lost stops it). */
static void track_min(ddp_rdzv_coord_t *c, double now)
{
    if (there(c) < c->cfg->nnodes_min)
        c->min_since = -1;
    else if (c->min_since < 0)
        c->min_since = now;
}

/* Place `i` of the closing round, which no launcher of the last round keeps, goes to the
 * first of all[0..joined) not placed yet that runs as many workers as the place's last
 * holder (every other node's global ranks then stay), else to the first not placed (the
 * ranks of the nodes after it move: said). */
static void fill_place(ddp_rdzv_coord_t *c, ddp_rdzv_member_t **all, bool *placed, int joined,
                       ddp_rdzv_member_t **ranked, int i)
{
    int nproc = i < c->nplaces ? c->place_nproc[i] : -1, k = 0, first = -1;
    for (; k < joined && (placed[k] || all[k]->join.nproc != nproc); k++)
        if (first < 0 && !placed[k])
            first = k;
    if (k == joined)
        k = first;
    ranked[i] = all[k];
    placed[k] = true;
    if (c->round == 0 || all[k]->node_rank >= 0)
        return;
    ddp_log_info(c->log,
                 "rendezvous: round %d: the launcher on %s, waiting as a hot spare, takes node "
                 "rank %d",
                 c->round, all[k]->join.host, i);
    if (nproc >= 0 && all[k]->join.nproc != nproc)
        ddp_log_warn(c->log,
                     "rendezvous: round %d: node rank %d ran %d worker(s), and its new launcher "
                     "on %s runs %d: the global ranks of the nodes after it move",
                     c->round, i, nproc, all[k]->join.host, all[k]->join.nproc);
}

static int c10d_close(ddp_rdzv_coord_t *c, double now, ddp_rdzv_member_t **ranked)
{
    const ddp_launch_config_t *cfg = c->cfg;
    track_min(c, now);
    /* Full: MAX there, and every live launcher of the last round back (hot spares alone
     * can make MAX: they take lost nodes' places, never a returning node's). */
    bool full = c->njoined >= cfg->nnodes_max && c->nawaited == 0;
    bool last_call_over = c->njoined >= cfg->nnodes_min && c->min_since >= 0 &&
                          now - c->min_since >= cfg->rdzv_conf.last_call_timeout &&
                          c->nawaited == 0;
    if (!full && !last_call_over)
        return 0;
    int n = 0, joined = 0;
    ddp_rdzv_member_t **all = malloc((size_t)(c->njoined > 0 ? c->njoined : 1) * sizeof *all);
    if (all == NULL)
        return 0;
    for (size_t i = 0; i < c->nmembers && joined < c->njoined; i++)
        if (c->members[i]->joined)
            all[joined++] = c->members[i];
    qsort(all, (size_t)joined, sizeof *all, member_order);
    n = joined < cfg->nnodes_max ? joined : cfg->nnodes_max;
    /* Each launcher of the last round keeps its node rank where it is still in the round;
     * the places left (a lost node's) go to the others in order: a hot spare takes a lost
     * node's ranks, and every other node's stay as they were. */
    bool *placed = calloc((size_t)(joined > 0 ? joined : 1), sizeof *placed);
    if (placed == NULL) {
        free(all);
        return 0;
    }
    for (int i = 0; i < n; i++)
        ranked[i] = NULL;
    for (int k = 0; k < joined; k++) {
        int r = all[k]->node_rank;
        if (r >= 0 && r < n && ranked[r] == NULL) {
            ranked[r] = all[k];
            placed[k] = true;
        }
    }
    for (int i = 0; i < n; i++)
        if (ranked[i] == NULL)
            fill_place(c, all, placed, joined, ranked, i);
    for (int i = 0; i < n; i++)
        c->place_nproc[i] = ranked[i]->join.nproc;
    c->nplaces = n;
    free(placed);
    free(all);
    c->min_since = -1;
    return n;
}

static bool c10d_waiting(ddp_rdzv_coord_t *c, double now, ddp_buf_t *status)
{
    const ddp_launch_config_t *cfg = c->cfg;
    double deadline = c->forming_since + cfg->rdzv_conf.join_timeout;
    bool enough = c->njoined >= cfg->nnodes_min;
    bool expired = !enough && now >= deadline;
    if (enough || (!expired && now < c->next_status))
        return false;
    if (expired)
        ddp_buf_printf(status,
                       "round %d: %d node(s) joined within %g s (--rdzv-conf join_timeout), fewer "
                       "than --nnodes=%d:%d asks",
                       c->round, c->njoined, cfg->rdzv_conf.join_timeout, cfg->nnodes_min,
                       cfg->nnodes_max);
    else
        ddp_buf_printf(status,
                       "round %d: %d node(s) here, waiting for --nnodes=%d:%d (%.0f s so far; "
                       "giving up in %.0f s, --rdzv-conf join_timeout)",
                       c->round, c->njoined, cfg->nnodes_min, cfg->nnodes_max,
                       now - c->forming_since, deadline - now);
    return expired;
}

static double c10d_due(const ddp_rdzv_coord_t *c)
{
    return c->min_since >= 0 ? c->min_since + c->cfg->rdzv_conf.last_call_timeout : -1;
}

static bool c10d_reform_on_join(const ddp_rdzv_coord_t *c)
{
    return c->nrunning < c->cfg->nnodes_max;
}

const ddp_rdzv_backend_ops_t ddp_rdzv_c10d_backend = {
    .name = "c10d",
    .init = c10d_init,
    .close = c10d_close,
    .due = c10d_due,
    .waiting = c10d_waiting,
    .reform_on_join = c10d_reform_on_join,
    .loss_reforms = true,
};
