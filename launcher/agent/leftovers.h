/* What the workers leave behind, the agent's part (agent/leftovers.c), at a group's end:
 * processes left in the workers' process groups, and, this launcher being a child
 * subreaper, those a worker started in a session or process group of its own (they come
 * to it once their parent has ended): SIGTERM, a grace, SIGKILL. Before the job goes on
 * after a failure, the GPUs' memory the stopped workers held, back under a tolerance
 * (--gpu-memory-reclaim-timeout); and libddp's shared memory they left. What else is
 * adopted is reaped as it ends. Runs on the agent's loop thread. */
#ifndef DDP_LAUNCHER_AGENT_LEFTOVERS_H
#define DDP_LAUNCHER_AGENT_LEFTOVERS_H

#include "agent/group.h"
#include "agent/worker_start.h"

#include <stdbool.h>

typedef struct ddp_leftovers_s ddp_leftovers_t;

/* Makes this launcher a child subreaper; whether it could (said at debug level where
 * not). */
bool ddp_leftovers_become_subreaper(const ddp_log_t *log);

/* The part of group `g`, which leaves the zygote of `start` alone (both must outlive it);
 * its handle made on g->loop. 0 or -ENOMEM. */
int ddp_leftovers_new(ddp_group_t *g, const ddp_worker_start_t *start, ddp_leftovers_t **out);
/* Closes the handle (with the loop's others); frees, once the loop has closed it. */
void ddp_leftovers_close(ddp_leftovers_t *l);
void ddp_leftovers_free(ddp_leftovers_t *l);

/* After a SIGCHLD: what this launcher adopted, reaped where it has ended. */
void ddp_leftovers_reap_adopted(ddp_leftovers_t *l);

/* Every worker of the group has been reaped: SIGTERM for what they left, and a grace. True
 * while it runs (or another wait of this part does): the agent hears of its end through
 * ops->leftovers_done. False when nothing was left (what a SIGKILLed group still holds is
 * sent SIGKILL): the group's end goes on at once. */
bool ddp_leftovers_end(ddp_leftovers_t *l);
/* Before the job goes on (`goes_on`: after a failure): when a GPU still holds more than
 * the tolerance, a wait for it; true when it has begun (ops->leftovers_done when over).
 * False when there is nothing to wait for, or when the wait for this group's end is over
 * (ddp_leftovers_reclaimed). */
bool ddp_leftovers_reclaim(ddp_leftovers_t *l, bool goes_on);
/* Whether the GPUs' wait for this group's end is over: its end came back after it. */
bool ddp_leftovers_reclaimed(const ddp_leftovers_t *l);
/* A signal: a grace or a wait under way ends at its next look; true when one was. */
bool ddp_leftovers_cut_short(ddp_leftovers_t *l);
/* What libddp's shared memory a worker that died between creating its ring and the ranks'
 * vote (after which it unlinks it) left in /dev/shm: its names begin with the creator's
 * pid, and every worker of the group is gone. */
void ddp_leftovers_remove_shm(const ddp_leftovers_t *l);

#endif
