/* What comes after a group's end, the agent's part (agent/policy.c): the restart
 * policy. It returns a decision (go on, restart, leave, end with status N) and the agent
 * acts on it. A failed attempt that would be restarted is judged first: the job cannot
 * progress (--max-no-progress-restarts: --progress-file's value, libddp's completed
 * collectives, and where neither tells, attempts that fail the same way at their start),
 * or this node leaves it (--exclude-after, --straggler-action=exclude). Runs on the
 * agent's loop thread. */
#ifndef DDP_LAUNCHER_AGENT_POLICY_H
#define DDP_LAUNCHER_AGENT_POLICY_H

#include "agent/group.h"

#include <stdbool.h>

typedef struct ddp_policy_s ddp_policy_t;

typedef enum {
    DDP_POLICY_RESTART, /* one node: the next attempt here */
    DDP_POLICY_GO_ON,   /* several nodes: the rendezvous decides the next round */
    DDP_POLICY_LEAVE,   /* this node leaves the job alone; the others go on */
    DDP_POLICY_END,     /* the job ends with `status` */
} ddp_policy_kind_t;

typedef struct {
    ddp_policy_kind_t kind;
    /* RESTART, GO_ON: the job goes on after a failure (the GPUs' memory is waited for
     * first, and the attempt is judged). */
    bool after_failure;
    int status; /* LEAVE, END: ddp-launch's exit status */
    /* LEAVE: why, for the store's host to say; END: the line that ends the job on every
     * node (it cannot progress), or "" where the job's end is this node's alone. */
    char why[DDP_LAST_LINE_MAX + 400];
} ddp_policy_decision_t;

/* The part of group `g` (which must outlive it). 0 or -ENOMEM. */
int ddp_policy_new(ddp_group_t *g, ddp_policy_t **out);
void ddp_policy_free(ddp_policy_t *p);

/* Once the loop runs, before the first attempt: --progress-file's value now is the
 * progress the job starts from (a resumed job's checkpoint), read off the loop. */
void ddp_policy_begin(ddp_policy_t *p);
/* At the group's end, where a failed attempt is to be judged (ddp_policy_judge): true
 * when --progress-file is read first (off the loop, at most a few
 * seconds: a file system that does not answer is said, and the attempt not judged by
 * it); ops->progress_read then goes on, once however often this is called before. False:
 * nothing to read, go on at once. */
bool ddp_policy_measure(ddp_policy_t *p);
/* A signal while the group's end waits for that read: true when it is given up
 * (ops->progress_read comes at once); false when none is under way. */
bool ddp_policy_cut_short(ddp_policy_t *p);

/* What comes after the group's end, by its stop: pure. */
void ddp_policy_next(const ddp_policy_t *p, ddp_policy_decision_t *d);
/* After a failed attempt that would go on (d->after_failure): true, with *d the job's end
 * (status 6) or this node's leaving (status 5), when it cannot go on or this node leaves
 * (said, with its event); `straggler_named`: one of this node's ranks was named a
 * straggler here. Counts the attempts without progress and the rounds in a row this
 * node's workers failed in. */
bool ddp_policy_judge(ddp_policy_t *p, bool straggler_named, ddp_policy_decision_t *d);

/* A failed job's status: 1, or with --exit-code=worker the root cause's own. */
int ddp_policy_failure_status(const ddp_group_t *g);

#endif
