/* The workers' progress while an attempt runs, the agent's part (agent/progress_watch.c):
 * straggler reports (--straggler-report; straggler.h) and --hang-timeout=auto, both from
 * the workers' progress rings (ddp_launch.step(), progress.h) or libddp's flight rings.
 * Runs on the agent's loop thread. */
#ifndef DDP_LAUNCHER_AGENT_PROGRESS_WATCH_H
#define DDP_LAUNCHER_AGENT_PROGRESS_WATCH_H

#include "agent/group.h"
#include "agent/hang_watch.h"
#include "agent/pause.h"

#include <stdbool.h>

typedef struct ddp_progress_watch_s ddp_progress_watch_t;

/* The part of group `g`, which begins --hang-timeout=auto's reports on `hang` and reads
 * whether the workers are stopped from `pause` (all must outlive it); its handle made on
 * g->loop. 0 or -ENOMEM. */
int ddp_progress_watch_new(ddp_group_t *g, ddp_hang_watch_t *hang, const ddp_pause_t *pause,
                           ddp_progress_watch_t **out);
/* Closes the handle (with the loop's others); frees, once the loop has closed it. */
void ddp_progress_watch_close(ddp_progress_watch_t *p);
void ddp_progress_watch_free(ddp_progress_watch_t *p);

/* A new attempt's workers run: the looks start, where stragglers or --hang-timeout=auto
 * are on (what auto has learnt stays across attempts). */
void ddp_progress_watch_attempt(ddp_progress_watch_t *p);
/* The looks end (the group stops or has ended). */
void ddp_progress_watch_stop(ddp_progress_watch_t *p);

/* --straggler-action=exclude: whether a report here named one of this node's ranks a
 * straggler since the last call (then forgotten). */
bool ddp_progress_watch_take_straggler(ddp_progress_watch_t *p);

#endif
