/* Long waits in the store, the agent's part (agent/store_waits.c; --store-wait-notice): a
 * worker blocked in a WAIT for a key nobody has set is named once the wait passes the
 * notice, with the ranks of this node that do not wait. Runs on the loop thread of the
 * launcher that serves the store. */
#ifndef DDP_LAUNCHER_AGENT_STORE_WAITS_H
#define DDP_LAUNCHER_AGENT_STORE_WAITS_H

#include "agent/group.h"

typedef struct ddp_store_waits_s ddp_store_waits_t;

/* The part of group `g` (which must outlive it), its handle made on g->loop. 0 or
 * -ENOMEM. */
int ddp_store_waits_new(ddp_group_t *g, ddp_store_waits_t **out);
/* Closes the handle (with the loop's others); frees, once the loop has closed it. */
void ddp_store_waits_close(ddp_store_waits_t *w);
void ddp_store_waits_free(ddp_store_waits_t *w);

/* A new attempt's workers run: the looks start, where this launcher serves the store and
 * --store-wait-notice is on. */
void ddp_store_waits_attempt(ddp_store_waits_t *w);
/* The looks end (the group stops or has ended). */
void ddp_store_waits_stop(ddp_store_waits_t *w);

#endif
