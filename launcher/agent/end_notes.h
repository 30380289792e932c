/* What a launcher says of a job's end beyond the report's table, the agent's part
 * (agent/end_notes.c): a worker the kernel's OOM killer ended, the root cause's last lines of
 * stderr where they went to its log file only, the ranks that succeeded first or that the
 * launcher's own stop ended, and a Python without torch; and, while some ranks have succeeded
 * and others run (here, or on other nodes), now and then who waits for whom. Runs on the
 * agent's loop thread, and after it (the report). */
#ifndef DDP_LAUNCHER_AGENT_END_NOTES_H
#define DDP_LAUNCHER_AGENT_END_NOTES_H

#include "agent/group.h"

#include <stdbool.h>

typedef struct ddp_end_notes_s ddp_end_notes_t;

/* The part of group `g` (which must outlive it), its handle made on g->loop. 0 or
 * -ENOMEM. */
int ddp_end_notes_new(ddp_group_t *g, ddp_end_notes_t **out);
/* Closes the handle (with the loop's others); frees, once the loop has closed it. */
void ddp_end_notes_close(ddp_end_notes_t *n);
void ddp_end_notes_free(ddp_end_notes_t *n);

/* A new attempt starts: the OOM kills counted so far are not its own; nothing said of it
 * yet. */
void ddp_end_notes_attempt(ddp_end_notes_t *n);
/* The attempt's first worker succeeded (g->first_succeeded) while others run: what they
 * wrote so far, and a note after a minute, then every five, of who waits for whom (a
 * warning when they have written nothing since). */
void ddp_end_notes_first_succeeded(ddp_end_notes_t *n);
/* Every worker here succeeded and the job waits for the other nodes' workers: a note after
 * a minute, then every five. */
void ddp_end_notes_nodes_wait(ddp_end_notes_t *n);
/* The notes end (the group stops, or has ended). */
void ddp_end_notes_stop(ddp_end_notes_t *n);
/* The message for worker `w`, ended with waitpid status `status`, where the OOM killer
 * ended it (malloc'd); NULL when it did not. */
char *ddp_end_notes_oom_message(ddp_end_notes_t *n, const ddp_worker_t *w, int status);
/* This node's ranks that succeeded while others ran, before the job failed on another
 * node, as a warning with the likely cause; nothing where none did. Once an attempt. */
void ddp_end_notes_left_early(ddp_end_notes_t *n);
/* The report of a failed job with what goes with it (`elsewhere`: the job's report, with
 * this node's failures, is printed by the launcher serving the store: here only a line
 * that says so). */
void ddp_end_notes_report(ddp_end_notes_t *n, bool elsewhere);

#endif
