/* Where the job's store and coordinator live with --rdzv-backend=etcd: the launcher etcd
 * elects. Every launcher serves a store of its own before it asks (ddp_store_host_start);
 * this part opens the launcher's etcd session under ddp-launch/<run id>/, clears what a
 * finished job with the same run id left there, takes part in the election with its store's
 * "HOST:PORT", and says once where the job's store is: its own (it serves the job, as c10d's
 * endpoint host does), or the elected launcher's (it joins there, as a c10d node does). Every
 * round rule stays with the coordinator and the node thread (rdzv/coord.h, rdzv/rdzv.h).
 *
 * Runs on the agent's loop; nothing blocks. etcd that cannot be reached on any endpoint,
 * that is not etcd's v3 gateway, a refused TLS handshake, or this launcher's lease lost
 * (while the job forms: not taken again within join_timeout): the failed callback, with a
 * message that names the endpoints. */
#ifndef DDP_LAUNCHER_RDZV_ETCD_PLACE_H
#define DDP_LAUNCHER_RDZV_ETCD_PLACE_H

#include "config/config.h"
#include "log.h"

#include <stdbool.h>
#include <uv.h>

typedef struct ddp_etcd_place_s ddp_etcd_place_t;

typedef struct {
    /* The job's store is this launcher's own (`own`), or the elected launcher's at
     * host:port: once at the start, and once after each ddp_etcd_place_lost. `own`: the
     * job's last round's record in etcd (ddp_rdzv_coord_resume_from), NULL where the job
     * has none yet. */
    void (*placed)(void *ctx, bool own, const char *host, int port, const char *last_round);
    /* etcd failed this launcher (before placed, or its lease lost after): `why`. Once; the
     * part does nothing more but close. */
    void (*failed)(void *ctx, const char *why);
    /* The elected launcher, stopped (Ctrl-Z) while the job formed, found another elected
     * when it continued: `why`. It leaves; the job goes on at the other's store (its own
     * closes with no word of an end, which the others take as a lost store). Once, instead
     * of failed. */
    void (*deposed)(void *ctx, const char *why);
    /* Whether the job forms here (no worker of this launcher runs a round: before the
     * first, between rounds, waiting at the coordinator): a lease lost then (a join burst
     * that left etcd's answers late) is taken again and the launcher joins again, bounded
     * by join_timeout; lost while workers run, it was judged gone: failed (unless it
     * ended while this launcher was stopped: taken again too). */
    bool (*forming)(void *ctx);
} ddp_etcd_place_cbs_t;

/* The job's keys' prefix, "ddp-launch/<run id>/", into out[cap] (DDP_ETCD_PREFIX_MAX
 * holds every run id --rdzv-id takes): every byte of the run id but letters, digits, '.',
 * '_' and '-' written %XX (hex), so that no run id's keys lie under another's ("a/x" is
 * ddp-launch/a%2Fx/, never under ddp-launch/a/). */
#define DDP_ETCD_PREFIX_MAX (sizeof "ddp-launch//" + 3 * 255)
void ddp_etcd_place_prefix(const char *run_id, char *out, size_t cap);

/* Starts launcher `id`'s part (cfg->etcd, cfg->run_id), its own store at host:port. 0;
 * DDP_EUSAGE with `why` (no libcurl here); -ENOMEM. */
int ddp_etcd_place_start(uv_loop_t *loop, const ddp_launch_config_t *cfg, const ddp_log_t *log,
                         const char *id, const char *host, int port,
                         const ddp_etcd_place_cbs_t *cbs, void *ctx, ddp_etcd_place_t **out,
                         ddp_buf_t *why);

/* The node thread lost the job's store mid-job (its launcher's node is gone, say): the
 * elected launcher's lease is revoked where the key still names it (every launcher sees
 * the key go at once), the launchers elect another, and placed says where the job goes on
 * (this launcher's own store, which it kept listening, or the new one's). `unanswered`:
 * the thread never joined there (the store refused it, or did not answer as a store), a
 * judgement of this node alone: the lease is revoked only where its launcher does not keep
 * it alive (ddp_etcd_session_depose); where it does, failed says so. */
void ddp_etcd_place_lost(ddp_etcd_place_t *p, bool unanswered);

/* The elected launcher's coordinator formed a round: its record (copied) is kept in etcd,
 * written only where nobody else has written it since this launcher read or wrote it (a
 * coordinator taken over from stands down: said). */
void ddp_etcd_place_record(ddp_etcd_place_t *p, const char *record);

/* True where no round record write of this launcher is in flight nor waits (its last
 * answered, or given up). */
bool ddp_etcd_place_settled(const ddp_etcd_place_t *p);

/* The job is over here: the callbacks stop; the elected launcher deletes the job's keys
 * (unless `leaving`: this launcher leaves a job that goes on, whose round record the next
 * elected one takes over: its last record is written first), every launcher revokes its
 * lease (its keys go with it), all of it within 2.5 s however many endpoints etcd leaves
 * unanswered (what is left then is dropped: the lease ends by itself), then `closed(ctx)`
 * (may be NULL) is called and the part is freed once its handles have closed. */
void ddp_etcd_place_close(ddp_etcd_place_t *p, bool leaving, void (*closed)(void *ctx), void *ctx);
/* A closing part (ddp_etcd_place_close, `closed` not called yet) ends now: its requests in
 * flight dropped (a signal during the job's end acts at once). */
void ddp_etcd_place_abandon(ddp_etcd_place_t *p);

#endif
