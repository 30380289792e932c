/* One launcher's session in etcd, for --rdzv-backend=etcd (on the agent's loop): its lease,
 * kept alive; its member key under it (<prefix>node/<id>); the coordinator's key
 * (<prefix>coord), watched, and taken by election; for the coordinator, the member keys
 * watched; the round's record, written with compare-and-swap.
 *
 * The join is two requests: the lease's grant, then one transaction that puts the member
 * key, reads the coordinator's key and, where an election was asked for before it, takes
 * the key where absent; a prefix with no member key under it (a finished job's leftovers)
 * is deleted by it first.
 *
 * A launcher that dies loses its lease: etcd deletes its keys when the lease ends (its TTL
 * after the last keep-alive, or at once when another launcher revokes it, having found the
 * launcher's port closed), and every watcher hears of it at once. Nothing polls: one
 * keep-alive request a launcher every TTL/3 is the steady load (every TTL while relaxed). Runs on
 * the loop's thread; the callbacks too. */
#ifndef DDP_LAUNCHER_ETCD_SESSION_H
#define DDP_LAUNCHER_ETCD_SESSION_H

#include "rdzv/etcd_client.h"

#include <stdint.h>

typedef struct ddp_etcd_session_s ddp_etcd_session_t;

typedef struct {
    /* This launcher's lease is gone (expired, revoked), or etcd could not be reached for
     * longer than its TTL: `why` says which. The session does nothing more. */
    void (*lost)(void *ctx, const char *why);
    /* The coordinator's record now, NULL while no launcher holds the key (an election is
     * due); `own` when this launcher holds it (it won an election). Called once the
     * session knows (after its start), then at each change. */
    void (*coordinator)(void *ctx, const char *record, bool own);
    /* (After ddp_etcd_session_watch_members) a member's key appeared (`there`) or went
     * away: its id. */
    void (*member)(void *ctx, const char *id, bool there);
    /* (May be NULL) whether the keep-alives may be relaxed now (the job forms: no worker
     * runs, and a burst of launchers joining may leave etcd's answers late). With it, the
     * lease is granted for three times the session's ttl; while it holds, a keep-alive
     * goes every ttl and etcd may leave them unanswered for the lease's whole time before
     * the lost callback; otherwise (and without it) every third of ttl, unanswered for at
     * most ttl. */
    bool (*relaxed)(void *ctx);
    /* (May be NULL) after ddp_etcd_session_depose(s, true): the coordinator's lease was
     * kept alive while the session watched it (its launcher lives): not revoked. */
    void (*kept_alive)(void *ctx);
} ddp_etcd_session_cbs_t;

/* Starts the session of launcher `id` under `prefix` (copied): its lease of `ttl` s, its
 * member key holding `record`, the coordinator's key watched. 0 or -ENOMEM; what fails in
 * etcd later (it cannot be reached, it refuses the lease) is the lost callback. */
int ddp_etcd_session_start(ddp_etcd_t *etcd, const char *prefix, const char *id, double ttl,
                           const char *record, const ddp_etcd_session_cbs_t *cbs, void *ctx,
                           ddp_etcd_session_t **out);

/* After the lost callback, where the loss was the lease's (its keep-alives unanswered for
 * its TTL, etcd ending it, a rejoin's own requests failing; or a join or an election that
 * etcd left unanswered in time, whose outcome is unknown):
 * after `delay` s, a new lease and the join again: its member key put again; where this
 * launcher held the coordinator's key, put again under the new lease if it still holds
 * this launcher's record, else taken where absent; otherwise taken where absent only with
 * `elect` (this launcher still elects: one placed at another's store must not take the key
 * its coordinator lost for a moment), else read. The callbacks go on as after the start:
 * the coordinator callback says the outcome; lost, a new loss. False (nothing done) for
 * any other loss. */
bool ddp_etcd_session_rejoin(ddp_etcd_session_t *s, double delay, bool elect);

/* Whether the coordinator's key is watched (by default it is, from the join on). Off: the
 * watch ends (a launcher placed at a store needs no news of the key until it loses the
 * store: a thousand watches fewer on etcd). On: the key is read, then watched from there;
 * `report`: the coordinator callback says what the read found even where it is what the
 * session knew (else only a change is said). Called before the join, it says whether the
 * join starts the watch. */
void ddp_etcd_session_watch(ddp_etcd_session_t *s, bool on, bool report);

/* Asks to be the coordinator, holding its key (under this launcher's lease) with `record`
 * (copied): the answer is the coordinator callback (`own`, or the winner's record). Asked
 * before the session has joined, the join's own transaction takes the key where absent. */
void ddp_etcd_session_elect(ddp_etcd_session_t *s, const char *record);

/* The coordinator's launcher is known to be gone (its port refused a connection, or did
 * not answer as a store): its lease is revoked, so its keys go now rather than at its TTL.
 * `unless_alive` (a judgement from this node alone, which another route to that launcher, or
 * another view of its name, would not share): first the lease's time to live is read every
 * half second until its end moves (kept alive: the kept_alive callback says so and nothing
 * is revoked) or a live launcher's keep-alive is overdue (a third of the lease's time and
 * 2 s after its last: up to 8 s for ddp-launch's 18 s leases; none where the first read
 * shows one overdue already).
 * Once the revoke is answered, the key is read (where watched and the watch has not said it
 * went): its word comes within the request timeout, a watch that never answers aside; a
 * revoke that fails loses the session (the lost callback names the endpoints). False where
 * the key is under no lease (no launcher put it: it would never go). */
bool ddp_etcd_session_depose(ddp_etcd_session_t *s, bool unless_alive);

/* For the coordinator: the member keys are watched (the member callback, for those there
 * now too). */
void ddp_etcd_session_watch_members(ddp_etcd_session_t *s);

/* After the lost callback: whether the loss was the lease's end while this launcher was
 * stopped (SIGSTOP, Ctrl-Z), not etcd's judging it gone: etcd said so to the first
 * keep-alive after it continued. The session sees a stop as its loop standing still for
 * longer than etcd may leave the keep-alives unanswered (its timer ticks every third of
 * that); etcd's silence meanwhile is not held against etcd: the time counts from the
 * continue, and a keep-alive goes at once. Such a loss may be taken again
 * (ddp_etcd_session_rejoin) while workers run. */
bool ddp_etcd_session_stopped(const ddp_etcd_session_t *s);

/* The lease the coordinator's key was under as last seen (0: none, or no key). */
int64_t ddp_etcd_session_coord_lease(const ddp_etcd_session_t *s);

/* A depose's lease check (ddp_etcd_session_depose's `unless_alive`) ends this long after
 * its first read at most, whatever the lease's own time: 8 s is when a keep-alive of
 * ddp-launch's default lease (18 s while the job forms) is overdue. */
#define DDP_ETCD_LEASE_CHECK_S 8.0

/* This launcher's lease; 0 where it was lost (etcd ended it, or left its keep-alives
 * unanswered past the limit), or where etcd leaves the last keep-alive unanswered for over
 * a second (out of reach): a revoke would be moot, or unanswered too. */
int64_t ddp_etcd_session_lease(const ddp_etcd_session_t *s);

/* Ends the session: the callbacks stop at once; its lease is revoked (its keys go with it),
 * and `done` called once etcd has answered (or failed to), unless `keep` (a test's stand-in
 * for a launcher SIGKILLed: the lease then runs out on its own; `done` is called at once).
 * The session is freed before `done` runs; `done` may be NULL. */
void ddp_etcd_session_close(ddp_etcd_session_t *s, bool keep, void (*done)(void *ctx), void *ctx);

#endif
