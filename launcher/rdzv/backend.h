/* The coordinator's state and its backends: what differs between static rendezvous
 * (--node-rank given, every node needed) and c10d (--nnodes=MIN:MAX, ranks assigned).
 * Internal to rdzv/coord.c, rdzv/static.c and rdzv/c10d.c; everything runs on the
 * coordinator's loop.
 *
 * The coordinator's phases (one round at a time, `round` counting up):
 *
 *   FORMING --backend close(): members ranked--> RUNNING (assign/<id>/<seq> written)
 *   RUNNING --a failure, a lost member, a joiner (c10d)--> FORMING of round+1
 *                                                (<round>/outcome: stop-failed|reform)
 *   RUNNING --every member succeeded--> OVER (outcome: done)
 *   any     --abort, a refused join, no restart left, formation timed out--> OVER
 *                                                (outcome and pending assigns: end)
 *   OVER: joins are answered with the job's end; `left` is set once the others leave.
 *   RUNNING, the store's host stopped (Ctrl-Z): "pause K" at the round's news key, and
 *                                                <round>/resume.K once it continues */
#ifndef DDP_LAUNCHER_RDZV_BACKEND_H
#define DDP_LAUNCHER_RDZV_BACKEND_H

#include "config/config.h"
#include "log.h"
#include "rdzv/record.h"
#include "store/server.h"

#include <uv.h>

/* (coord.h's, which this header does not need: the backends see the coordinator's state
 * here, and its services through the table below.) */
typedef struct ddp_rdzv_coord_s ddp_rdzv_coord_t;

typedef struct ddp_rdzv_member_s {
    char id[DDP_RDZV_ID_MAX];
    ddp_rdzv_join_t join; /* its latest join record */
    bool own;             /* our own launcher's (not counted among the others) */
    bool connected;       /* its connection to the store is open */
    bool lost;            /* gone: connection closed, or silent past the keep-alive limit */
    bool left;            /* left the job alone, saying why (leave/<id>): never back */
    bool joined;          /* waiting in the forming round */
    bool lost_joined;     /* judged lost while joined: its join is taken again if it revives */
    bool awaited;         /* ran the last round, alive, not yet back (c10d waits for it) */
    bool in_round;        /* a member of the running round */
    bool succeeded;       /* its workers succeeded in the running round */
    int node_rank;        /* in the running round, else in the last one it ran; -1 */
    uint64_t arrival;     /* join order */
    double last_beat;     /* monotonic s */
    double dup_since;     /* static: claims a rank a live launcher holds, since; < 0 */
    int assign_pauses;    /* pauses told at its assign key while joined: where the next goes */
    bool pausing;         /* stopped by a Ctrl-Z there: the pause on lasts until it continues */
    char *env;            /* its environment record (envcheck.h), from its latest join */
} ddp_rdzv_member_t;

typedef enum { COORD_FORMING, COORD_RUNNING, COORD_OVER } ddp_rdzv_phase_t;

typedef struct ddp_rdzv_backend_ops_s ddp_rdzv_backend_ops_t;

/* What a backend may ask of the coordinator (coord.c's, at c->services). */
typedef struct {
    /* The keep-alive limit: a member silent this long (s) is lost. */
    double (*beat_limit)(const ddp_rdzv_coord_t *c);
    /* Sends joined member `m` away alone (status 5, `message` on its side), the job left as
     * it is: a launcher that does not belong to the running job. */
    void (*refuse)(ddp_rdzv_coord_t *c, ddp_rdzv_member_t *m, const char *message);
} ddp_rdzv_coord_services_t;

struct ddp_rdzv_coord_s {
    uv_loop_t *loop;
    uv_timer_t timer;
    ddp_store_server_t *server;
    const ddp_launch_config_t *cfg;
    const ddp_log_t *log;
    const ddp_rdzv_backend_ops_t *backend;
    const ddp_rdzv_coord_services_t *services;
    ddp_store_server_watch_t watch;
    char prefix[320]; /* ddp-launch/rdzv/<run id>/ */
    size_t prefix_len;
    char own_id[DDP_RDZV_ID_MAX];
    char host[256];

    ddp_rdzv_member_t **members; /* every launcher ever seen (stable pointers) */
    size_t nmembers, cap;
    size_t nconnected; /* connected members other than our own */
    uint64_t arrivals;

    ddp_rdzv_phase_t phase;
    int round, restarts;
    ddp_buf_t *failures;             /* finishing: where the others' failures go (the agent's) */
    double forming_since, min_since; /* c10d: since MIN joined, or < 0 */
    int njoined, nawaited;
    ddp_rdzv_member_t **running; /* the running round's members by node rank */
    int nrunning, nsucceeded;
    bool outcome_published;
    int pauses;           /* the running round's (Ctrl-Z here): its news key is news.<pauses> */
    bool paused;          /* the last pause's resume is not out yet */
    int npausing;         /* members pausing (their own Ctrl-Z) in the pause on */
    char pause_text[400]; /* its news after "pause ": "K host|node ID WHO" */

    ddp_rdzv_member_t **holders; /* static: by node rank, the launcher that claims it */
    int nheld;                   /* static: holders that have joined the forming round */
    int npending;                /* static: joined claimants of a rank held by another */
    int *place_nproc;            /* c10d: by node rank, the workers of the last round's node */
    int nplaces;                 /* c10d: the last round's nodes */

    ddp_rdzv_verdict_t end; /* OVER: how the job ended, for joins that come later */
    bool left_published;
    bool finishing;            /* our launcher is done: close the server once the others left */
    double finish_deadline;    /* ... or at this time */
    void (*closed)(void *ctx); /* finishing: called once the server is closed */
    void *closed_ctx;
    double last_tick, next_status, next_stats, started;
    /* etcd: called as each round forms, with its record (ddp_rdzv_round_record_format),
     * which etcd keeps for a coordinator that takes the job over; NULL: none. */
    void (*formed)(void *ctx, const char *record);
    void *formed_ctx;
    char *last_ranks; /* resumed: the last round's launcher ids by node rank (malloc'd) */
    bool resumed;     /* resumed, and no round formed since */
};

struct ddp_rdzv_backend_ops_s {
    const char *name;
    /* Sets up the backend's own state (after the coordinator's). 0 or -ENOMEM. */
    int (*init)(ddp_rdzv_coord_t *c);
    /* `m` has joined the forming round (m->joined is set). 0, or DDP_EUSAGE with `why`
     * when the job cannot go on (a duplicate node rank). Optional, as are forget and
     * tick. */
    int (*admit)(ddp_rdzv_coord_t *c, ddp_rdzv_member_t *m, double now, ddp_buf_t *why);
    /* A joined member leaves the forming round (lost). */
    void (*forget)(ddp_rdzv_coord_t *c, ddp_rdzv_member_t *m);
    /* When the forming round can close now: its members in node-rank order into
     * ranked[] (room for every member), returning how many; else 0. */
    int (*close)(ddp_rdzv_coord_t *c, double now, ddp_rdzv_member_t **ranked);
    /* When (monotonic s) close() may answer yes with nothing else happening (the end of
     * a last call), or < 0: the coordinator calls it then, not at its next tick. NULL:
     * only joins and losses close a round. */
    double (*due)(const ddp_rdzv_coord_t *c);
    /* What the forming round waits for, into `status`; true when its deadline has passed
     * (`status` is then the error that ends the job). */
    bool (*waiting)(ddp_rdzv_coord_t *c, double now, ddp_buf_t *status);
    /* Called every tick until the job is over (pending claims). 0 or DDP_EUSAGE with
     * `why`. */
    int (*tick)(ddp_rdzv_coord_t *c, double now, ddp_buf_t *why);
    /* The live launcher that has taken `m`'s place while `m` was judged lost (static:
     * a new launcher with its node rank), or NULL. Optional. */
    const ddp_rdzv_member_t *(*taken_by)(const ddp_rdzv_coord_t *c, const ddp_rdzv_member_t *m);
    /* Whether a join while the round runs makes it re-form (c10d, below MAX). */
    bool (*reform_on_join)(const ddp_rdzv_coord_t *c);
    /* Whether a lost member re-forms the job (c10d) rather than failing the round. */
    bool loss_reforms;
};

extern const ddp_rdzv_backend_ops_t ddp_rdzv_static_backend;
extern const ddp_rdzv_backend_ops_t ddp_rdzv_c10d_backend;

#endif
