/* The rendezvous of a multi-node job, as each launcher takes part in it: a thread of
 * the agent speaks to the store with the blocking client (the hosting launcher's too,
 * over its own loop's server) and hands the agent's loop commands through a uv_async:
 * start round R with this world, stop the workers (the round ends elsewhere), finish
 * with this status. The loop posts what happens to the local workers: a failure, their
 * end after a stop, their success, or the launcher's own end (a signal); each post also
 * wakes the thread out of its store wait (an eventfd beside the socket).
 *
 * What a round is, who is in it and how it ends is decided by the coordinator on the
 * hosting launcher's loop (rdzv/coord.h); this side joins, waits for its answer, runs
 * the round while it waits for the round's outcome, reports its workers' end, and
 * beats every keep_alive_interval. Static rendezvous (--node-rank given) and c10d
 * (--nnodes=MIN:MAX, node ranks assigned per round, stable across rounds) differ only
 * at the coordinator (rdzv/static.c, rdzv/c10d.c). Keys: rdzv/record.h. */
#ifndef DDP_LAUNCHER_RDZV_RDZV_H
#define DDP_LAUNCHER_RDZV_RDZV_H

#include "config/config.h"
#include "log.h"
#include "rdzv/record.h"

#include <uv.h>

typedef struct ddp_rdzv_s ddp_rdzv_t;

/* Starts the thread of the launcher whose id is `id` (ddp_rdzv_launcher_id; copied).
 * `on_command` runs on the loop when a command is ready (take it with ddp_rdzv_take).
 * `guard_fd`: the orphan guard's pipe, for the health checks' processes (or -1). */
int ddp_rdzv_start(uv_loop_t *loop, const ddp_launch_config_t *cfg, const ddp_log_t *log,
                   const char *id, int guard_fd, void (*on_command)(void *ctx), void *ctx,
                   ddp_rdzv_t **out);

/* From the loop: what happened to the local workers (message may be NULL). */
void ddp_rdzv_post(ddp_rdzv_t *r, ddp_rdzv_event_t event, const char *message);

/* From the loop: this launcher received signal `sig` and ends (message: why); every other
 * node ends too, with 128+sig, and forwards `sig` to its workers where it forwards it
 * (so a signal Slurm sends every node reaches every worker, whichever node gets it
 * first). */
void ddp_rdzv_post_abort(ddp_rdzv_t *r, int sig, const char *message);

/* From the loop: this launcher ends the job with `exit_code` (message: why; no progress),
 * and so does every other node. */
void ddp_rdzv_post_end(ddp_rdzv_t *r, int exit_code, const char *message);

/* From the loop, while a round runs: this node's hang rows (text, copied); `initiate`
 * when this node found the hang (the first such node reports: it waits for every node's
 * rows, at most `wait` s, and hands them back with CMD_HANG_REPORT; the others get
 * CMD_HANG_DONE once theirs are in). */
void ddp_rdzv_post_hang(ddp_rdzv_t *r, bool initiate, double wait, const char *rows);

/* From the loop, before it posts the end of its workers (STOPPED): this node's failures, as
 * lines of ddp_failure_to_json (copied), for the job-wide report that the launcher serving
 * the store prints (ddp_rdzv_coord_finish). After a failed job's FINISH the thread waits for
 * them (beating, so the store waits too) before it ends. */
void ddp_rdzv_post_failures(ddp_rdzv_t *r, const char *lines);

/* From the loop: this launcher leaves the job alone (`why`, which the store's host says:
 * "its workers failed in 2 round(s) in a row (--exclude-after=2)"), and the others go on
 * (a hot spare, or the elastic rules, take its place): the thread writes the failure of its
 * workers it has not reported yet, then why it leaves, and ends. This node's failures are
 * its own to print from then on (ddp_rdzv_failures_published says no). */
void ddp_rdzv_post_leave(ddp_rdzv_t *r, const char *why);

/* From the loop, while a round runs: this node's straggler rows (straggler.h; copied), for
 * the launcher serving the store, which reads the latest of every node at its report
 * (ddp_rdzv_coord_collect). */
void ddp_rdzv_post_stragglers(ddp_rdzv_t *r, const char *rows);

/* From the loop, on a node other than the store's host: Ctrl-Z here while a round runs
 * (`pause`: every node's workers stop with this one's, and wait for its continue), or its
 * continue. The other nodes are told with CMD_PAUSE and CMD_CONTINUE, and so is this one
 * (the command's exit code 1: its own pause). */
void ddp_rdzv_post_pause(ddp_rdzv_t *r, bool pause);

/* From the loop: whether the store host has named one of this node's ranks a straggler
 * (ddp_rdzv_coord_name_straggler; looked for with each post of the rows). */
bool ddp_rdzv_straggler_named(ddp_rdzv_t *r);

/* After the loop has ended (the thread told to stop): waits for the thread's end, then
 * says whether this node's failures reached the store (the job's report has them), so
 * this node need not print its own; never after ddp_rdzv_post_leave. */
bool ddp_rdzv_failures_published(ddp_rdzv_t *r);

/* From the loop: whether this node failed its health check before a round (the FINISH that
 * follows says which check and why). */
bool ddp_rdzv_unhealthy(ddp_rdzv_t *r);

/* From the loop, after CMD_HANG_REPORT: every node's rows that came, one text (malloc'd;
 * the caller frees), or NULL. */
char *ddp_rdzv_take_hang_rows(ddp_rdzv_t *r);

/* From the loop: the next command, or DDP_RDZV_CMD_NONE when there is none left (the
 * on_command callback takes them all: one wake-up may stand for several). */
ddp_rdzv_cmd_t ddp_rdzv_take(ddp_rdzv_t *r, ddp_rdzv_world_t *world, int *exit_code, char *message,
                             size_t cap);

/* From the loop, after a START: a copy of node 0's --env entries ("NAME=VALUE",
 * NULL-terminated; free with ddp_strv_free), for every worker of the round; NULL when out
 * of memory. */
char **ddp_rdzv_job_env(ddp_rdzv_t *r);

/* From the loop, when the agent finishes: the thread is told to stop and the async
 * handle closed (the thread ends once its current store call returns). */
void ddp_rdzv_close(ddp_rdzv_t *r);

/* After the loop has ended: joins the thread and frees everything. */
void ddp_rdzv_free(ddp_rdzv_t *r);

#endif
