/* Hang reports of one node, the agent's part (agent/hang_watch.c): --hang-timeout's looks at the
 * workers' progress, and a report of where every rank stands before anything is stopped
 * (the report's parts in hang.c, the stack tools in stacks.c), found here or asked for by
 * another node. One report an attempt; a failure or a failed round met during it waits for
 * its end. Runs on the agent's loop thread. */
#ifndef DDP_LAUNCHER_AGENT_HANG_WATCH_H
#define DDP_LAUNCHER_AGENT_HANG_WATCH_H

#include "agent/group.h"
#include "agent/pause.h"

#include <stdbool.h>

typedef struct ddp_hang_watch_s ddp_hang_watch_t;

/* What found a hang. */
typedef enum {
    DDP_HANG_ASKED,     /* another node found it and asks for this node's rows */
    DDP_HANG_TIMED_OUT, /* a worker's collective timed out: its failure ends the attempt */
    DDP_HANG_STALLED,   /* no progress past a timeout: the report ends the attempt */
} ddp_hang_cause_t;

/* The part of group `g`, which reads whether the workers are stopped from `pause` (both
 * must outlive it); its handles made on g->loop. 0 or -ENOMEM. */
int ddp_hang_watch_new(ddp_group_t *g, const ddp_pause_t *pause, ddp_hang_watch_t **out);
/* Closes the handles (with the loop's others); frees, once the loop has closed them. */
void ddp_hang_watch_close(ddp_hang_watch_t *h);
void ddp_hang_watch_free(ddp_hang_watch_t *h);

/* A new attempt: no report made yet, every worker active now; --hang-timeout's looks
 * start where it is on. */
void ddp_hang_watch_attempt(ddp_hang_watch_t *h);
/* The looks end (the group stops or has ended); a report under way goes on. */
void ddp_hang_watch_stop(ddp_hang_watch_t *h);

/* Whether a report may begin: none is under way and none was made this attempt. */
bool ddp_hang_watch_may_begin(const ddp_hang_watch_t *h);
/* Whether a report is under way (a failure's stop, a re-form, the group's end wait). */
bool ddp_hang_watch_reporting(const ddp_hang_watch_t *h);

/* A report begins (where one may: ddp_hang_watch_may_begin): `why` found it, no progress
 * seen for `quiet` s against a timeout of `limit` s (a stall's: its message says both), and
 * names the local ranks with named[i] true (the hang's: their ends are its failures; NULL:
 * none, or with --hang-timeout those not waiting in a collective). */
void ddp_hang_watch_begin(ddp_hang_watch_t *h, ddp_hang_cause_t cause, const char *why,
                          double quiet, double limit, const bool *named);
/* A worker of the running attempt failed (`f`): a collective timed out begins a report.
 * True when a report is under way: the failure's stop then waits for its end (which
 * fails the round with failures[0]). */
bool ddp_hang_watch_defer_failure(ddp_hang_watch_t *h, const ddp_failure_t *f);
/* The round failed on another node (`message`): true when a report is under way, and the
 * stop waits for its end. */
bool ddp_hang_watch_defer_remote(ddp_hang_watch_t *h, const char *message);
/* Another node found a hang (CMD_HANG): this node's report, where one may begin. */
void ddp_hang_watch_asked(ddp_hang_watch_t *h);
/* This node reports: every node's `rows` came (CMD_HANG_REPORT). */
void ddp_hang_watch_rows(ddp_hang_watch_t *h, const char *rows);
/* This node's rows are in the report of the node that found the hang (CMD_HANG_DONE). */
void ddp_hang_watch_reported_elsewhere(ddp_hang_watch_t *h);
/* A signal or the job's end: the report under way ends where it is. */
void ddp_hang_watch_cancel(ddp_hang_watch_t *h);

/* The failure's message of local rank `local_rank` when the hang that stops the attempt
 * named it ("the job hung ..."), else NULL. */
const char *ddp_hang_watch_named(const ddp_hang_watch_t *h, int local_rank);

#endif
