/* The rendezvous coordinator: the one place that decides a multi-node job's rounds.
 *
 * It runs on the loop of the launcher that serves the store (node 0's, or the c10d
 * endpoint's), beside the store server, and sees the launchers' rendezvous writes as
 * they happen (ddp_store_server_watch): joins, reports, heartbeats, aborts. It forms each
 * round (which launchers, in which node-rank order, with which share of the world),
 * notices a lost launcher (its connection to the store closes, or its heartbeats stop),
 * and publishes every decision once, in a key that each launcher waits on
 * (rdzv/record.h). Every launcher, its own host's included, is a client of the store
 * (rdzv.c); none reads the others' state.
 *
 * Costs: a join, a report or a heartbeat is O(1) here; forming a round of N nodes is
 * O(N log N) once; the liveness check is O(N) per tick, in memory, on this loop (no
 * store round trip, so a busy store cannot make a live node look silent: a tick that
 * comes late, the loop having been busy, judges nobody). Store traffic is O(N) per
 * heartbeat interval for the whole job.
 *
 * Invariant (one round for everyone): only the coordinator closes a round, numbers it
 * and assigns its members; a launcher learns its round and node rank only from its own
 * assign key, written once per join. So every launcher that runs round R runs it with
 * the same members, and no two groups can advance separately. */
#ifndef DDP_LAUNCHER_RDZV_COORD_H
#define DDP_LAUNCHER_RDZV_COORD_H

#include "config/config.h"
#include "log.h"
#include "store/server.h"

#include <uv.h>

typedef struct ddp_rdzv_coord_s ddp_rdzv_coord_t;

/* Starts coordinating the job of `cfg` through `server` (both must outlive it).
 * `own_id`: the id of this process's own launcher (ddp_rdzv_launcher_id). */
int ddp_rdzv_coord_start(uv_loop_t *loop, ddp_store_server_t *server,
                         const ddp_launch_config_t *cfg, const ddp_log_t *log, const char *own_id,
                         ddp_rdzv_coord_t **out);

/* From the loop, while a round runs: the straggler rows the running round's other
 * launchers last posted (ddp_rdzv_post_stragglers), appended to `out`. O(nodes). */
void ddp_rdzv_coord_stragglers(ddp_rdzv_coord_t *coord, ddp_buf_t *out);

/* From the loop: node `node_rank` of the running round has a straggler (`why`, the report's
 * line): its launcher finds out at its next post of rows (ddp_rdzv_straggler_named). */
void ddp_rdzv_coord_name_straggler(ddp_rdzv_coord_t *coord, int node_rank, const char *why);

/* From the loop: this launcher stops (Ctrl-Z) while a round runs. The other launchers
 * of the round are told to stop their workers too, and to wait, without heartbeats, for
 * ddp_rdzv_coord_resume(pause) once this one continues: the store they would beat on
 * stands still with it. The pause's number (> 0), or 0 where the others cannot be told
 * (no round running, its outcome out, a hang report under way): this node stops alone.
 * Another node's Ctrl-Z pauses the job the same way (its launcher asks at pause/<id>),
 * and the pause lasts until every node that paused it has continued. */
int ddp_rdzv_coord_pause(ddp_rdzv_coord_t *coord);
void ddp_rdzv_coord_resume(ddp_rdzv_coord_t *coord, int pause);
/* Whether a pause of the job is on (another node's Ctrl-Z holds it after ours). */
bool ddp_rdzv_coord_paused(const ddp_rdzv_coord_t *coord);

/* Our launcher ends: the job ends with it if it has not (the others are told: with
 * 128+`sig` when it ends for signal `sig`, which they forward, else status 5), and once
 * every other launcher has left, or after `linger` seconds, the coordinator closes the
 * server and itself (`sig` < 0: the job ends with status -sig, this launcher's own
 * verdict). The server is the coordinator's to close from now on. Just before, the
 * failures the other launchers posted for the last round (ddp_rdzv_post_failures) are
 * appended to `failures` (lines of ddp_failure_to_json; it must outlive the loop), for the
 * job's one report. Then `closed(ctx)` is called (the loop may end): the caller keeps its
 * signal handlers until then, since a launcher killed by a signal while it lingers takes
 * the news from those yet to read it. */
void ddp_rdzv_coord_finish(ddp_rdzv_coord_t *coord, double linger, int sig, ddp_buf_t *failures,
                           void (*closed)(void *ctx), void *ctx);

/* While finishing: close the server at the next tick, whoever is still reading. */
void ddp_rdzv_coord_leave_now(ddp_rdzv_coord_t *coord);

/* etcd: the coordinator takes over a job whose last round `record` describes
 * (ddp_rdzv_round_record_format): its rounds go on from the next, with its restarts spent,
 * and each launcher of it keeps its node rank when it joins (a hot spare takes a lost one's).
 * Before any launcher but our own has joined. 0, DDP_EPARSE, -ENOMEM. */
int ddp_rdzv_coord_resume_from(ddp_rdzv_coord_t *coord, const char *record);

/* etcd: this coordinator's launcher leaves the job (`why`: its node excluded after a
 * failure), which goes on at the next elected launcher's store: a round still running is
 * stopped as failed now (its own failure's report may not have come), every node told why,
 * the restart counted in etcd's record as at any failure (the next coordinator resumes from
 * it), or the job ends where no restart is left. */
void ddp_rdzv_coord_leaves(ddp_rdzv_coord_t *coord, const char *why);

/* etcd: `formed(ctx, record)` as each round forms, with its record (copy it), and as one
 * fails with a restart left (its record, one more restart spent: where this coordinator's
 * launcher leaves then, the next one counts that restart). */
void ddp_rdzv_coord_on_formed(ddp_rdzv_coord_t *coord,
                              void (*formed)(void *ctx, const char *record), void *ctx);

/* Stops watching and closes the timer at once (the server stays open); freed once the
 * loop has closed it. NULL is harmless. */
void ddp_rdzv_coord_close(ddp_rdzv_coord_t *coord);

#endif
