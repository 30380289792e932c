/* Where the job's store is, the agent's part (agent/placement.c), with
 * --rdzv-backend=etcd: etcd elects the launcher that serves it (rdzv/etcd_place.h); this
 * launcher then coordinates the job at its own store, or joins the elected one's. When the
 * job's store is lost mid-job, this node's workers stop as for a re-form, etcd elects
 * another, and a new rendezvous thread joins it once both are done. The configuration the
 * agent runs with is this part's copy of the caller's, its store's address the elected
 * launcher's. Other backends: the caller's configuration, and nothing to do. Runs on the
 * agent's loop thread; asks the agent through ops (start_rendezvous, end_job, stop). */
#ifndef DDP_LAUNCHER_AGENT_PLACEMENT_H
#define DDP_LAUNCHER_AGENT_PLACEMENT_H

#include "agent/group.h"

typedef struct ddp_placement_s ddp_placement_t;

/* The part of group `g` (which must outlive it), for the job of `cfg` (which must outlive
 * it too). 0 or -ENOMEM. */
int ddp_placement_new(ddp_group_t *g, const ddp_launch_config_t *cfg, ddp_placement_t **out);
/* The configuration the agent runs with (g->cfg): the part's copy under etcd, else `cfg`. */
const ddp_launch_config_t *ddp_placement_cfg(const ddp_placement_t *p);

/* etcd: asks etcd where the job's store is, this launcher's own (g->store, listening on
 * g->store_port) a candidate. The rendezvous starts once it is known
 * (ops->start_rendezvous); a failure ends the job (ops->end_job, status 5). */
void ddp_placement_start(ddp_placement_t *p);
/* The rendezvous thread lost the job's store (`message` says how; `unanswered`: it never
 * joined there, see ddp_etcd_place_lost): the workers stop as for a re-form (ops->stop),
 * and etcd elects the next store. */
void ddp_placement_store_lost(ddp_placement_t *p, const char *message, bool unanswered);
/* Between rounds (g->state WAITING): where the store was lost and etcd has placed the job
 * again, the lost store's rendezvous thread retires (kept until ddp_placement_free) and a
 * new one starts (ops->start_rendezvous). Otherwise nothing. */
void ddp_placement_rejoin(ddp_placement_t *p);

/* The job is over here: etcd's side closed (`leaving`: the job goes on without this
 * launcher, its keys kept), this launcher's idle store too. Where this launcher leaves
 * serving the job's store (g->store, taken), that store closes once etcd has its last
 * round record and its lease is revoked: the others, finding it lost, go on at the next
 * elected launcher's, which counts the restart that record has. `closed(ctx)` once etcd's
 * side has closed (within 2.5 s; not called where p is NULL). */
void ddp_placement_close(ddp_placement_t *p, bool leaving, void (*closed)(void *ctx), void *ctx);
/* During the close: etcd's side ends now, what it still asks etcd dropped (a signal). */
void ddp_placement_abandon(ddp_placement_t *p);
/* After the loop: the retired rendezvous threads, and the part. */
void ddp_placement_free(ddp_placement_t *p);

#endif
