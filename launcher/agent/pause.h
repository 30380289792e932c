/* The terminal's signals, the agent's part (agent/pause.c): Ctrl-Z (SIGTSTP) stops the
 * running workers with the launcher, and they continue with it; a multi-node job's other
 * nodes stop and continue with it too, and this node's workers with theirs. A resize
 * (SIGWINCH) is passed on. Runs on the agent's loop thread. */
#ifndef DDP_LAUNCHER_AGENT_PAUSE_H
#define DDP_LAUNCHER_AGENT_PAUSE_H

#include "agent/group.h"

#include <stdbool.h>

typedef struct ddp_pause_s ddp_pause_t;

/* The part of group `g` (which must outlive it), its handles made on g->loop. 0 or
 * -ENOMEM. */
int ddp_pause_new(ddp_group_t *g, ddp_pause_t **out);
/* Starts the handles, unless SIGTSTP was ignored when ddp-launch started (0 or a libuv
 * error). */
int ddp_pause_start(ddp_pause_t *p);
/* Closes the handles (with the loop's others); frees, once the loop has closed them. */
void ddp_pause_close(ddp_pause_t *p);
void ddp_pause_free(ddp_pause_t *p);

/* Whether the workers are stopped by a Ctrl-Z (here, or where the store is: this loop
 * runs on meanwhile); their quiet time then is nobody's. */
bool ddp_pause_stopped(const ddp_pause_t *p);
/* When (monotonic s) the workers were last continued, 0 never: no quiet time before it. */
double ddp_pause_resumed_at(const ddp_pause_t *p);

/* Node `who` of the job was stopped (`pause`, Ctrl-Z there) or continued: this node's
 * workers too, unless that node is this one (`own`: its Ctrl-Z stops them itself). */
void ddp_pause_remote(ddp_pause_t *p, bool pause, bool own, const char *who);

#endif
