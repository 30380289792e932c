/* What the workers leave behind, the agent's part (agent/leftovers.c): this launcher is a
 * child subreaper, so what a worker starts in a session or process group of its own comes
 * to it once its parent has ended; such processes are found and ended at the end of every
 * attempt, and what else is adopted is reaped as it ends. Runs on the agent's loop
 * thread. */
#ifndef DDP_LAUNCHER_AGENT_LEFTOVERS_H
#define DDP_LAUNCHER_AGENT_LEFTOVERS_H

#include "agent/group.h"
#include "agent/worker_start.h"

#include <stdbool.h>

typedef struct ddp_leftovers_s ddp_leftovers_t;

/* Makes this launcher a child subreaper; whether it could (said at debug level where
 * not). */
bool ddp_leftovers_become_subreaper(const ddp_log_t *log);

/* The part of group `g`, which leaves the zygote of `start` alone (both must outlive it).
 * 0 or -ENOMEM. */
int ddp_leftovers_new(ddp_group_t *g, const ddp_worker_start_t *start, ddp_leftovers_t **out);
void ddp_leftovers_free(ddp_leftovers_t *l);

/* After a SIGCHLD: what this launcher adopted, reaped where it has ended. */
void ddp_leftovers_reap_adopted(ddp_leftovers_t *l);
/* At a group's end, once every worker has been reaped: the processes the workers left in
 * sessions or process groups of their own. Those newly found get SIGTERM (named, with the
 * `grace` that follows) or, `kill_now`, SIGKILL, as do those found before (which outlived
 * the grace). Returns how many are left, reaped ones aside (0 where this launcher is no
 * subreaper). */
int ddp_leftovers_escaped(ddp_leftovers_t *l, bool kill_now, double grace);

#endif
