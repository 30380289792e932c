/* A launcher's session in etcd (see etcd_session.h). Every request is one call of the
 * client; the session holds each it may have in flight, one of a kind, and cancels them all
 * when it closes (no callback comes after a cancel). */
#include "rdzv/etcd_session.h"

#include "error.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The session's calls, one of each in flight at most. */
enum {
    CALL_GRANT,
    CALL_JOIN,
    CALL_RANGE,
    CALL_WATCH,
    CALL_ELECT,
    CALL_KEEPALIVE,
    CALL_DEPOSE,
    CALL_MEMBERS,
    CALL_MEMBERS_WATCH,
    NCALLS
};

/* Revokes of a lost coordinator's lease sent, where each is lost or late, and the pause
 * before the next (times the sends so far: one restart of a member or proxy takes not all). */
#define DEPOSE_SENDS    3
#define DEPOSE_PAUSE_MS 250

/* A ddp-launch launcher keeps its lease alive at least every third of the lease's time (up
 * to a second more: its timer ticks); one late by this much more in all (its loop busy,
 * etcd slow) is still taken to be alive. Its lease's time to live is read this often. */
#define KEEPALIVE_LATE_S 2.0
#define ALIVE_READ_S     0.5

typedef enum { SESSION_STARTING, SESSION_RUNNING, SESSION_LOST } session_phase_t;

/* A depose of the coordinator's lease (ddp_etcd_session_depose). Unless the lease is kept
 * alive (`unless_alive`), its time to live is read first (`reading`): the latest the
 * lease's end can be by the reads so far (loop s, 0 before the first), when the first and
 * the one in flight were sent, and etcd's raft term at the reads (a new leader restarts
 * them). */
typedef struct {
    int64_t lease; /* the deposed coordinator's */
    int sent;      /* revokes of it sent */
    bool reading;
    double end, from, read_sent;
    int64_t term;
} depose_t;

struct ddp_etcd_session_s {
    ddp_etcd_t *etcd;
    uv_loop_t *loop;
    char *prefix, *id, *record, *elect_record;
    char member_key[1024], coord_key[1024];
    bool joined;     /* once: a prefix is cleared at the first join only */
    bool lease_lost; /* (LOST) the loss was the lease's: it may be taken again */
    bool lease_gone; /* the lease was lost (gone, or etcd out of reach): none to revoke */
    int64_t held;    /* at a rejoin: the lost lease, where it held the coordinator's key */
    bool unwatched;  /* the coordinator's key is not watched (ddp_etcd_session_watch) */
    bool owner;      /* it took the coordinator's key, and has not seen another take it since (a
                      * delete is not another's: its lease's loss deletes it too) */
    double ttl, lease_ttl; /* the keep-alive limit, and the lease's own time (see relaxed) */
    ddp_etcd_session_cbs_t cbs;
    void *ctx;
    session_phase_t phase;
    int64_t lease;
    uv_timer_t keepalive;
    uv_timer_t deadline; /* when etcd's silence reaches the limit (see overdue) */
    double last_alive;   /* monotonic s of the last keep-alive etcd answered */
    double ticked_at;    /* monotonic s of the keep-alive timer's last tick */
    bool stopped;        /* the loop stood still (SIGSTOP, Ctrl-Z) since etcd last answered */
    double relaxed_at;   /* monotonic s when the keep-alives were last seen relaxed */
    bool paced_relaxed;  /* the keep-alives went at the relaxed pace at the last tick */
    ddp_etcd_call_t *calls[NCALLS];
    /* The coordinator's key as last seen: its record, lease and revision. */
    char *coord;
    int64_t coord_lease, coord_rev;
    bool coord_known;
    depose_t depose;     /* the last depose this launcher asked (set whole at each) */
    uv_timer_t redepose; /* the pause before a revoke is sent again, or a lease read again */
    int64_t members_rev;
    bool watch_members; /* the coordinator's: the member keys are watched */
    /* A watch that ended (the member it spoke to gone) is set up again after `backoff` s
     * (doubling up to 1 s while etcd cannot be reached: the keep-alives judge how long). */
    uv_timer_t retry;
    double backoff;
};

static double now_s(const ddp_etcd_session_t *s)
{
    return (double)uv_now(s->loop) / 1000.0;
}

static void key_of(const ddp_etcd_session_t *s, const char *what, char *key, size_t cap)
{
    snprintf(key, cap, "%s%s", s->prefix, what);
}

static void lose(ddp_etcd_session_t *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The session is over: the lost callback, once. */
static void lose(ddp_etcd_session_t *s, const char *fmt, ...)
{
    char why[800];
    va_list ap;
    if (s->phase == SESSION_LOST)
        return;
    s->phase = SESSION_LOST;
    uv_timer_stop(&s->keepalive);
    uv_timer_stop(&s->deadline);
    uv_timer_stop(&s->retry);
    uv_timer_stop(&s->redepose);
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    for (int i = 0; i < NCALLS; i++) {
        ddp_etcd_cancel(s->calls[i]);
        s->calls[i] = NULL;
    }
    s->cbs.lost(s->ctx, why);
}

static void lose_lease(ddp_etcd_session_t *s, bool again, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* As lose, for a loss of the lease (unanswered keep-alives, etcd ending it, a join that
 * could not take a new one): `again`, ddp_etcd_session_rejoin may take another. */
static void lose_lease(ddp_etcd_session_t *s, bool again, const char *fmt, ...)
{
    char why[800];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    s->lease_lost = again;
    s->lease_gone = true;
    lose(s, "%s", why);
}

static int post(ddp_etcd_session_t *s, int which, const char *path, const char *body, bool stream,
                ddp_etcd_cb_t cb)
{
    int err = ddp_etcd_post(s->etcd, path, body, stream, cb, s, &s->calls[which]);
    if (err != 0)
        lose(s, "etcd: unable to send %s: %s", path, ddp_strerror(err));
    return err;
}

/* The coordinator's key. */

/* What the watch or a read says the coordinator's key now is (kv NULL: deleted). */
static void coord_seen(ddp_etcd_session_t *s, const ddp_json_t *kv, int64_t revision)
{
    ddp_buf_t value = DDP_BUF_INIT;
    int64_t lease = 0;
    if (revision != 0 && revision < s->coord_rev)
        return; /* older than what was seen */
    if (kv != NULL && ddp_etcd_bytes(kv, "value", &value) != 0) {
        ddp_buf_free(&value);
        lose(s, "etcd: the coordinator's key at %scoord holds no base64 value", s->prefix);
        return;
    }
    if (kv != NULL)
        (void)ddp_etcd_int(kv, "lease", &lease);
    char *record = kv != NULL ? ddp_buf_steal(&value) : NULL;
    bool same = s->coord_known && ((record == NULL && s->coord == NULL) ||
                                   (record != NULL && s->coord != NULL &&
                                    strcmp(record, s->coord) == 0 && lease == s->coord_lease));
    free(s->coord);
    s->coord = record;
    s->coord_lease = lease;
    s->coord_rev = revision;
    s->coord_known = true;
    if (record != NULL && lease != s->lease)
        s->owner = false;
    ddp_buf_free(&value);
    if (!same && s->phase == SESSION_RUNNING)
        s->cbs.coordinator(s->ctx, s->coord, s->coord != NULL && lease == s->lease);
}

static void resync_later(ddp_etcd_session_t *s);

/* A message of the watch s->calls[call]: true where the watch has ended (the member it
 * spoke to went, or etcd ended it), after asking for what it watched to be read again,
 * then watched from there; false for a live watch's message (the backoff starts over). */
static bool watch_ended(ddp_etcd_session_t *s, int call, int err, const ddp_json_t *reply)
{
    if (err == 0 && ddp_json_get(reply, "canceled") == NULL) {
        s->backoff = 0;
        return false;
    }
    if (err == 0)
        ddp_etcd_cancel(s->calls[call]);
    s->calls[call] = NULL;
    resync_later(s);
    return true;
}

static void on_coord_watch(void *ctx, int err, const ddp_json_t *reply, const char *why)
{
    ddp_etcd_session_t *s = ctx;
    (void)why;
    if (watch_ended(s, CALL_WATCH, err, reply))
        return;
    for (const ddp_json_t *e = ddp_json_first(ddp_json_get(reply, "events")); e != NULL;
         e = ddp_json_next(e)) {
        const char *type = ddp_json_string(ddp_json_get(e, "type"), NULL);
        const ddp_json_t *kv = ddp_json_get(e, "kv");
        int64_t rev = 0;
        (void)ddp_etcd_int(kv, "mod_revision", &rev);
        coord_seen(s, type != NULL && strcmp(type, "DELETE") == 0 ? NULL : kv, rev);
    }
}

static void watch_coord(ddp_etcd_session_t *s, int64_t from)
{
    char key[1024];
    ddp_buf_t body = DDP_BUF_INIT;
    ddp_etcd_cancel(s->calls[CALL_WATCH]); /* (one watch at most: no other outlives it) */
    s->calls[CALL_WATCH] = NULL;
    key_of(s, "coord", key, sizeof key);
    if (ddp_etcd_body_watch(&body, key, false, from) == 0)
        (void)post(s, CALL_WATCH, "/v3/watch", ddp_buf_str(&body), true, on_coord_watch);
    ddp_buf_free(&body);
}

static void on_coord_range(void *ctx, int err, const ddp_json_t *reply, const char *why)
{
    ddp_etcd_session_t *s = ctx;
    (void)why;
    s->calls[CALL_RANGE] = NULL;
    int64_t revision = 0;
    if (err != 0 || !ddp_etcd_int(ddp_json_get(reply, "header"), "revision", &revision)) {
        resync_later(s); /* the keep-alives judge whether etcd is gone */
        return;
    }
    const ddp_json_t *kv = ddp_json_first(ddp_json_get(reply, "kvs"));
    int64_t rev = 0;
    (void)ddp_etcd_int(kv, "mod_revision", &rev);
    s->coord_rev = 0;
    coord_seen(s, kv, rev);
    if (s->phase == SESSION_RUNNING && !s->unwatched)
        watch_coord(s, revision + 1); /* what changes after the read */
}

/* The coordinator's key read, then watched from that revision on. */
static void resync_coord(ddp_etcd_session_t *s)
{
    char key[1024];
    ddp_buf_t body = DDP_BUF_INIT;
    key_of(s, "coord", key, sizeof key);
    if (ddp_etcd_body_range(&body, key, false) == 0)
        (void)post(s, CALL_RANGE, "/v3/kv/range", ddp_buf_str(&body), false, on_coord_range);
    ddp_buf_free(&body);
}

static void resync_members(ddp_etcd_session_t *s);

static void on_retry(uv_timer_t *timer)
{
    ddp_etcd_session_t *s = timer->data;
    if (s->phase != SESSION_RUNNING)
        return;
    if (!s->unwatched && s->calls[CALL_WATCH] == NULL && s->calls[CALL_RANGE] == NULL)
        resync_coord(s);
    if (s->watch_members && s->calls[CALL_MEMBERS_WATCH] == NULL && s->calls[CALL_MEMBERS] == NULL)
        resync_members(s);
}

static void resync_later(ddp_etcd_session_t *s)
{
    s->backoff = s->backoff <= 0 ? 0.05 : s->backoff * 2 > 1 ? 1 : s->backoff * 2;
    if (!uv_is_active((uv_handle_t *)&s->retry))
        uv_timer_start(&s->retry, on_retry, (uint64_t)(s->backoff * 1000), 0);
}

/* Keep-alives. */

/* Whether the keep-alives are relaxed now (see ddp_etcd_session_cbs_t). */
static bool relaxed(const ddp_etcd_session_t *s)
{
    return s->cbs.relaxed != NULL && s->cbs.relaxed(s->ctx);
}

/* How long etcd may leave the keep-alives unanswered now. */
static double limit(const ddp_etcd_session_t *s)
{
    return relaxed(s) ? s->lease_ttl : s->ttl;
}

/* Whether etcd has left the keep-alives unanswered past the limit. Relaxed ones go every
 * ttl: once no longer relaxed (the job has formed), the stricter limit counts from then
 * on, not from an answer that may be older than it. */
static bool overdue(ddp_etcd_session_t *s)
{
    double since = s->last_alive;
    if (relaxed(s))
        s->relaxed_at = now_s(s);
    else if (s->relaxed_at > since)
        since = s->relaxed_at;
    return now_s(s) - since > limit(s);
}

static void on_keepalive(void *ctx, int err, const ddp_json_t *reply, const char *why);
static bool stood_still(ddp_etcd_session_t *s);

/* The lease is lost at the limit itself, not at the next keep-alive's timeout or tick
 * after it: a timer for the moment overdue would say so, set again at every answer and
 * tick (the limit changes when the keep-alives stop being relaxed). */
static void on_deadline(uv_timer_t *timer)
{
    ddp_etcd_session_t *s = timer->data;
    if (stood_still(s))
        return;
    if (overdue(s))
        lose_lease(s, true, "etcd at %s did not answer a keep-alive for %g s",
                   ddp_etcd_endpoints(s->etcd), limit(s));
    else
        uv_timer_start(&s->deadline, on_deadline, 1, 0); /* (a rounding short of it) */
}

static void arm_deadline(ddp_etcd_session_t *s)
{
    double since = s->last_alive;
    if (!relaxed(s) && s->relaxed_at > since)
        since = s->relaxed_at;
    double left = since + limit(s) - now_s(s);
    uv_timer_start(&s->deadline, on_deadline, left > 0 ? (uint64_t)(left * 1000) + 1 : 1, 0);
}

static void send_keepalive(ddp_etcd_session_t *s)
{
    char body[64];
    snprintf(body, sizeof body, "{\"ID\": \"%lld\"}", (long long)s->lease);
    (void)post(s, CALL_KEEPALIVE, "/v3/lease/keepalive", body, false, on_keepalive);
}

/* Whether the loop itself stood still for longer than etcd may leave the keep-alives
 * unanswered (the keep-alive timer ticks every third of ttl): this launcher was stopped
 * (SIGSTOP, Ctrl-Z) and sent nothing meanwhile. Then etcd's silence says nothing: the
 * time counts from now, and a keep-alive goes at once (the one in flight, if any, may
 * have timed out while the launcher stood still). Its answer says whether the lease
 * outlived the stop. */
static bool stood_still(ddp_etcd_session_t *s)
{
    uv_update_time(s->loop);
    double now = now_s(s);
    if (now - s->ticked_at <= limit(s))
        return false;
    s->ticked_at = s->last_alive = now;
    s->stopped = true;
    arm_deadline(s);
    ddp_etcd_cancel(s->calls[CALL_KEEPALIVE]);
    s->calls[CALL_KEEPALIVE] = NULL;
    send_keepalive(s);
    return true;
}

static void on_keepalive(void *ctx, int err, const ddp_json_t *reply, const char *why)
{
    ddp_etcd_session_t *s = ctx;
    s->calls[CALL_KEEPALIVE] = NULL;
    int64_t ttl = 0;
    if (err == 0 && ddp_etcd_int(ddp_json_get(reply, "result"), "TTL", &ttl) && ttl > 0) {
        s->last_alive = now_s(s);
        s->stopped = false;
        arm_deadline(s);
        return;
    }
    if (err == 0 && (s->stopped || stood_still(s))) { /* (a stop's loss: taken again) */
        s->stopped = true;
        lose_lease(s, true,
                   "etcd ended this launcher's lease (%lld) while the launcher was stopped "
                   "(its %g s ran out without a keep-alive, or it was revoked)",
                   (long long)s->lease, s->lease_ttl);
        return;
    }
    const char *lost = err == 0 ? ddp_etcd_data_lost(s->etcd) : NULL;
    if (lost != NULL) { /* (a member restarted from an empty data directory) */
        lose_lease(s, true, "etcd at %s lost its data (%s): this job's keys are gone",
                   ddp_etcd_endpoint(s->etcd), lost);
        return;
    }
    if (err == 0) { /* etcd answered: the lease is gone */
        lose_lease(s, true,
                   "etcd ended this launcher's lease (%lld): it was judged gone (its keep-alives "
                   "late by over %g s, or revoked by a launcher that found it dead)",
                   (long long)s->lease, s->lease_ttl);
        return;
    }
    if (!stood_still(s) && overdue(s))
        lose_lease(s, true, "etcd at %s could not be reached for %g s: %s",
                   ddp_etcd_endpoints(s->etcd), limit(s), why);
}

static void on_keepalive_timer(uv_timer_t *timer)
{
    ddp_etcd_session_t *s = timer->data;
    if (stood_still(s))
        return;
    s->ticked_at = now_s(s);
    s->paced_relaxed = relaxed(s);
    if (!overdue(s)) /* (which sees whether they are relaxed still) */
        arm_deadline(s);
    if (s->calls[CALL_KEEPALIVE] != NULL) { /* the last one has not come back */
        if (overdue(s))
            lose_lease(s, true, "etcd at %s did not answer a keep-alive for %g s",
                       ddp_etcd_endpoints(s->etcd), limit(s));
        return;
    }
    /* Relaxed, a keep-alive every third of the lease's own time (every third tick). */
    if (relaxed(s) && now_s(s) - s->last_alive < s->lease_ttl / 3 - s->ttl / 6)
        return;
    send_keepalive(s);
}

/* The join: the lease, then one transaction for the member key and the coordinator's key
 * (cleared first where no launcher has a key under the prefix; taken where absent, when
 * an election was asked for before the join), then the watch from there. */

static void join_of(const ddp_etcd_session_t *s, ddp_etcd_join_t *j)
{
    *j = (ddp_etcd_join_t){.prefix = s->prefix,
                           .member_key = s->member_key,
                           .member = s->record,
                           .coord_key = s->coord_key,
                           .record = s->elect_record,
                           .lease = s->lease,
                           .clear = !s->joined,
                           .keep = s->held != 0 && s->elect_record != NULL};
}

/* This launcher's put took the coordinator's key (its election record, under its lease, at
 * `revision`): known at once, before any watch says it, and told. */
static void hold_coordinator(ddp_etcd_session_t *s, int64_t revision)
{
    free(s->coord);
    s->coord = strdup(s->elect_record);
    s->coord_lease = s->lease;
    s->owner = true;
    s->coord_rev = revision;
    s->coord_known = true;
    s->cbs.coordinator(s->ctx, s->coord, true);
}

static void join_reply(ddp_etcd_session_t *s, const ddp_etcd_join_t *j, const ddp_json_t *reply,
                       int64_t revision)
{
    const ddp_json_t *elect = NULL, *kv = NULL;
    bool held = ddp_etcd_succeeded(reply) && (j->clear || j->keep); /* cleared, or kept */
    for (const ddp_json_t *r = ddp_json_first(ddp_json_get(reply, "responses")); r != NULL && !held;
         r = ddp_json_next(r)) {
        const ddp_json_t *txn = ddp_json_get(r, "response_txn");
        if (txn != NULL && ddp_etcd_succeeded(txn)) {
            elect = txn;
            break;
        }
        const ddp_json_t *range = ddp_json_get(
            txn != NULL ? ddp_json_first(ddp_json_get(txn, "responses")) : r, "response_range");
        if (range != NULL)
            kv = ddp_json_first(ddp_json_get(range, "kvs"));
    }
    s->phase = SESSION_RUNNING;
    s->joined = true;
    s->held = 0;
    s->coord_rev = 0;
    s->coord_known = false;
    if ((held && j->keep) || elect != NULL) { /* what the put wrote */
        hold_coordinator(s, revision);
    } else {
        int64_t rev = 0;
        (void)ddp_etcd_int(kv, "mod_revision", &rev);
        coord_seen(s, kv, rev);
    }
    /* (Where the coordinator callback asked for a read meanwhile, the read's watch.) */
    if (s->phase == SESSION_RUNNING && !s->unwatched && s->calls[CALL_RANGE] == NULL)
        watch_coord(s, revision + 1); /* what changes after the join */
}

static void on_join(void *ctx, int err, const ddp_json_t *reply, const char *why)
{
    ddp_etcd_session_t *s = ctx;
    s->calls[CALL_JOIN] = NULL;
    int64_t revision = 0;
    if (err != 0 || !ddp_etcd_int(ddp_json_get(reply, "header"), "revision", &revision)) {
        /* A join unanswered in time (or lost with its connection after it went: DDP_ETIMEOUT
         * too) may have taken the coordinator's key all the same: the next join keeps it
         * where it holds this launcher's record. */
        if (s->elect_record != NULL)
            s->owner = true;
        lose_lease(s, s->joined || err == DDP_ETIMEOUT,
                   "unable to use etcd: unable to join under %s: %s", s->prefix,
                   err ? why : "its answer has no revision: not etcd's v3 gateway");
        return;
    }
    ddp_etcd_join_t j;
    join_of(s, &j);
    join_reply(s, &j, reply, revision);
}

static void on_grant(void *ctx, int err, const ddp_json_t *reply, const char *why)
{
    ddp_etcd_session_t *s = ctx;
    s->calls[CALL_GRANT] = NULL;
    if (err != 0 || !ddp_etcd_int(reply, "ID", &s->lease) || s->lease == 0) {
        lose_lease(s, s->joined || err == DDP_ETIMEOUT,
                   "unable to use etcd at %s: unable to take a lease: %s",
                   ddp_etcd_endpoints(s->etcd),
                   err ? why : "its answer has no lease: not etcd's v3 gateway");
        return;
    }
    s->last_alive = s->ticked_at = now_s(s);
    s->paced_relaxed = relaxed(s);
    s->lease_gone = false;
    ddp_etcd_data_lost_clear(s->etcd); /* (a loss before it is not this lease's) */
    uint64_t every = (uint64_t)(s->ttl * 1000 / 3);
    uv_timer_start(&s->keepalive, on_keepalive_timer, every, every);
    arm_deadline(s);
    ddp_etcd_join_t j;
    ddp_buf_t body = DDP_BUF_INIT;
    join_of(s, &j);
    if (ddp_etcd_body_join(&body, &j) == 0)
        (void)post(s, CALL_JOIN, "/v3/kv/txn", ddp_buf_str(&body), false, on_join);
    else
        lose(s, "out of memory");
    ddp_buf_free(&body);
}

static char *dup_or(const char *text, bool *ok)
{
    char *copy = strdup(text);
    *ok = *ok && copy != NULL;
    return copy;
}

int ddp_etcd_session_start(ddp_etcd_t *etcd, const char *prefix, const char *id, double ttl,
                           const char *record, const ddp_etcd_session_cbs_t *cbs, void *ctx,
                           ddp_etcd_session_t **out)
{
    ddp_etcd_session_t *s = calloc(1, sizeof *s);
    if (s == NULL)
        return -ENOMEM;
    bool ok = true;
    s->etcd = etcd;
    s->loop = ddp_etcd_loop(etcd);
    s->prefix = dup_or(prefix, &ok);
    s->id = dup_or(id, &ok);
    s->record = dup_or(record, &ok);
    s->ttl = ttl;
    s->lease_ttl = cbs->relaxed != NULL ? 3 * ttl : ttl;
    s->cbs = *cbs;
    s->ctx = ctx;
    if (!ok) {
        free(s->prefix);
        free(s->id);
        free(s->record);
        free(s);
        return -ENOMEM;
    }
    snprintf(s->member_key, sizeof s->member_key, "%snode/%s", prefix, id);
    key_of(s, "coord", s->coord_key, sizeof s->coord_key);
    uv_timer_init(s->loop, &s->keepalive);
    uv_timer_init(s->loop, &s->deadline);
    uv_timer_init(s->loop, &s->retry);
    uv_timer_init(s->loop, &s->redepose);
    s->keepalive.data = s->deadline.data = s->retry.data = s->redepose.data = s;
    char body[64];
    snprintf(body, sizeof body, "{\"TTL\": %lld}", (long long)(s->lease_ttl + 0.999));
    *out = s;
    (void)post(s, CALL_GRANT, "/v3/lease/grant", body, false, on_grant);
    return 0;
}

void ddp_etcd_session_watch(ddp_etcd_session_t *s, bool on, bool report)
{
    bool was = !s->unwatched;
    s->unwatched = !on;
    if (s->phase != SESSION_RUNNING || (on && was && !report))
        return;
    ddp_etcd_cancel(s->calls[CALL_WATCH]);
    ddp_etcd_cancel(s->calls[CALL_RANGE]);
    s->calls[CALL_WATCH] = s->calls[CALL_RANGE] = NULL;
    if (!on)
        return;
    if (report)
        s->coord_known = false; /* the read's word is said, changed or not */
    s->backoff = 0;
    resync_coord(s);
}

/* A rejoin: after the delay, a new lease and the join again. */

static void on_rejoin_timer(uv_timer_t *timer)
{
    ddp_etcd_session_t *s = timer->data;
    char body[64];
    snprintf(body, sizeof body, "{\"TTL\": %lld}", (long long)(s->lease_ttl + 0.999));
    (void)post(s, CALL_GRANT, "/v3/lease/grant", body, false, on_grant);
}

bool ddp_etcd_session_rejoin(ddp_etcd_session_t *s, double delay, bool elect)
{
    if (s->phase != SESSION_LOST || !s->lease_lost)
        return false;
    /* The coordinator's key is kept where it still holds this launcher's record; taken
     * where absent only by a launcher that still elects. */
    s->held = s->owner ? s->lease : 0;
    if (s->held == 0 && !elect) {
        free(s->elect_record);
        s->elect_record = NULL;
    }
    s->phase = SESSION_STARTING;
    s->lease_lost = false;
    s->stopped = false;
    s->lease = 0;
    s->backoff = 0;
    uv_timer_start(&s->retry, on_rejoin_timer, (uint64_t)(delay * 1000), 0);
    return true;
}

/* Election. */

static void on_elect(void *ctx, int err, const ddp_json_t *reply, const char *why)
{
    ddp_etcd_session_t *s = ctx;
    s->calls[CALL_ELECT] = NULL;
    if (err != 0) { /* unanswered in time, it may have won all the same (see on_join) */
        s->owner = true;
        lose_lease(s, err == DDP_ETIMEOUT, "etcd: unable to take the coordinator's key: %s", why);
        return;
    }
    /* Won or lost, the watch says what the key holds now; a reply read here comes first. */
    int64_t revision = 0;
    (void)ddp_etcd_int(ddp_json_get(reply, "header"), "revision", &revision);
    bool won = ddp_etcd_succeeded(reply);
    if (won) { /* what the put wrote, before the watch says it */
        hold_coordinator(s, revision);
        return;
    }
    for (const ddp_json_t *r = ddp_json_first(ddp_json_get(reply, "responses")); r != NULL;
         r = ddp_json_next(r)) {
        const ddp_json_t *kv =
            ddp_json_first(ddp_json_get(ddp_json_get(r, "response_range"), "kvs"));
        int64_t rev = 0;
        (void)ddp_etcd_int(kv, "mod_revision", &rev);
        if (kv != NULL)
            coord_seen(s, kv, rev);
    }
}

void ddp_etcd_session_elect(ddp_etcd_session_t *s, const char *record)
{
    if (s->phase == SESSION_LOST || s->calls[CALL_ELECT] != NULL)
        return;
    free(s->elect_record);
    s->elect_record = strdup(record);
    if (s->phase == SESSION_STARTING || s->elect_record == NULL)
        return; /* the join takes the key where absent */
    ddp_buf_t body = DDP_BUF_INIT;
    if (ddp_etcd_body_create(&body, s->coord_key, record, strlen(record), s->lease) == 0)
        (void)post(s, CALL_ELECT, "/v3/kv/txn", ddp_buf_str(&body), false, on_elect);
    ddp_buf_free(&body);
}

static void on_depose(void *ctx, int err, const ddp_json_t *reply, const char *why);

static void send_revoke(ddp_etcd_session_t *s)
{
    char body[64];
    snprintf(body, sizeof body, "{\"ID\": \"%lld\"}", (long long)s->depose.lease);
    s->depose.sent++;
    (void)post(s, CALL_DEPOSE, "/v3/lease/revoke", body, false, on_depose);
}

static void read_lease(ddp_etcd_session_t *s);

static void on_redepose(uv_timer_t *timer)
{
    ddp_etcd_session_t *s = timer->data;
    if (s->phase == SESSION_RUNNING && s->calls[CALL_DEPOSE] == NULL && s->depose.reading)
        read_lease(s);
    else if (s->phase == SESSION_RUNNING && s->calls[CALL_DEPOSE] == NULL)
        send_revoke(s);
}

static void on_depose(void *ctx, int err, const ddp_json_t *reply, const char *why)
{
    ddp_etcd_session_t *s = ctx;
    (void)reply;
    s->calls[CALL_DEPOSE] = NULL;
    if (s->phase != SESSION_RUNNING)
        return;
    if (err == DDP_ETIMEOUT && s->depose.sent < DEPOSE_SENDS) {
        /* Lost or late, it may have been done: sent again after a pause (done, it is "lease
         * not found"). */
        uv_timer_start(&s->redepose, on_redepose, (uint64_t)DEPOSE_PAUSE_MS * s->depose.sent, 0);
        return;
    }
    if (err != 0 && err != DDP_ETIMEOUT && strstr(why, "lease not found") == NULL) {
        lose(s, "etcd: unable to end the lost coordinator's lease: %s", why);
        return;
    }
    /* The lease's keys went with it, or (every answer lost) may have. Where the watch has
     * not said so yet, the key is read now and its word said: a watch taken and never
     * answered (a buffering proxy in front of the gateway, a wedged member) would leave the
     * depose waiting with no deadline; the read has the request's. A key still under the
     * lease (no revoke reached etcd) is said again, and judged again by the place. */
    if (!s->unwatched && s->coord_known && s->coord != NULL && s->coord_lease == s->depose.lease)
        ddp_etcd_session_watch(s, true, true);
}

static void read_lease(ddp_etcd_session_t *s);

/* A read of the deposed lease's time to live answered (ddp_etcd_session_depose's
 * `unless_alive`). etcd says the whole seconds left, truncated (etcd 3.4, as measured), as
 * of a moment between the request's sending and its answer: the lease's end is before
 * answer + TTL + 1, and at or after sent + TTL. A lease nobody keeps alive keeps its end; a
 * keep-alive moves it later by the time since the one before. The reads go on every
 * ALIVE_READ_S, DDP_ETCD_LEASE_CHECK_S at most from the first: one whose end is at or after every
 * end read before moved: the lease was kept alive (kept_alive said, no revoke). A read sent once a
 * live launcher's keep-alive was due (a third of the lease's time after the last, KEEPALIVE_LATE_S
 * late) that shows no move, or "no such lease", and the bound reached with reads that show no move
 * (a lease kept alive less often: taken as gone, as without the check): the lease revoked. A read
 * that failed (etcd slow, a member restarting), or whose answer is no lease's (a TTL below -1 or
 * above the lease's time, no time granted), is sent again; reads across a new raft term start over
 * (a new leader gives every lease its whole time again, which is no keep-alive); none answered
 * within the bound loses the session (the lease of a launcher that may live is not ended on one
 * node's view, unchecked). */
static void on_lease_read(void *ctx, int err, const ddp_json_t *reply, const char *why)
{
    ddp_etcd_session_t *s = ctx;
    s->calls[CALL_DEPOSE] = NULL;
    if (s->phase != SESSION_RUNNING)
        return;
    int64_t ttl = -2, granted = 0, term = 0;
    bool answered = err == 0 && ddp_etcd_int(reply, "TTL", &ttl);
    bool gone = answered && ttl == -1; /* etcd's word for no such lease */
    bool read = answered && ttl >= 0 && ddp_etcd_int(reply, "grantedTTL", &granted) &&
                granted > 0 && ttl <= granted;
    (void)ddp_etcd_int(ddp_json_get(reply, "header"), "raft_term", &term);
    if (read && term != s->depose.term) {
        /* A new leader gives every lease its whole time again: the reads start over. */
        s->depose.term = term;
        s->depose.end = 0;
    }
    if (read && s->depose.end > 0 && s->depose.read_sent + (double)ttl >= s->depose.end) {
        s->depose.reading = false;
        if (s->cbs.kept_alive != NULL)
            s->cbs.kept_alive(s->ctx);
        return;
    }
    double due = s->depose.from + DDP_ETCD_LEASE_CHECK_S;
    if (read) {
        double end = now_s(s) + (double)ttl + 1;
        if (s->depose.end == 0 || end < s->depose.end)
            s->depose.end = end;
        double overdue = s->depose.end - (double)granted + (double)granted / 3 + KEEPALIVE_LATE_S;
        due = overdue < due ? overdue : due;
    }
    if (!gone && s->depose.read_sent < due) {
        uv_timer_start(&s->redepose, on_redepose, (uint64_t)(ALIVE_READ_S * 1000), 0);
        return;
    }
    s->depose.reading = false;
    if (!gone && s->depose.end == 0) {
        lose(s,
             "etcd at %s did not answer whether the elected launcher keeps its lease alive "
             "within %g s (%s): its lease is not ended on this launcher's view alone",
             ddp_etcd_endpoints(s->etcd), DDP_ETCD_LEASE_CHECK_S,
             err != 0 ? why : "its answers held no time to live a lease can have");
        return;
    }
    s->depose.sent = 0;
    send_revoke(s);
}

static void read_lease(ddp_etcd_session_t *s)
{
    char body[64];
    snprintf(body, sizeof body, "{\"ID\": \"%lld\"}", (long long)s->depose.lease);
    s->depose.read_sent = now_s(s);
    (void)post(s, CALL_DEPOSE, "/v3/lease/timetolive", body, false, on_lease_read);
}

bool ddp_etcd_session_depose(ddp_etcd_session_t *s, bool unless_alive)
{
    if (s->coord_known && s->coord != NULL && s->coord_lease == 0)
        return false;
    bool busy = s->calls[CALL_DEPOSE] != NULL || uv_is_active((uv_handle_t *)&s->redepose);
    if (s->phase != SESSION_RUNNING || s->coord_lease == 0 || s->coord_lease == s->lease ||
        (busy && s->depose.lease == s->coord_lease))
        return true;
    /* Another lease's read, revoke or pause (the key named another meanwhile): this one's
     * now; that one's keys are no longer the coordinator's. */
    ddp_etcd_cancel(s->calls[CALL_DEPOSE]);
    s->calls[CALL_DEPOSE] = NULL;
    uv_timer_stop(&s->redepose);
    s->depose = (depose_t){.lease = s->coord_lease,
                           .reading = unless_alive && s->cbs.kept_alive != NULL,
                           .from = now_s(s)};
    if (s->depose.reading)
        read_lease(s);
    else
        send_revoke(s);
    return true;
}

/* Members, for the coordinator. */

static void member_event(ddp_etcd_session_t *s, const ddp_json_t *kv, bool there)
{
    ddp_buf_t key = DDP_BUF_INIT;
    size_t skip = strlen(s->prefix) + strlen("node/");
    if (ddp_etcd_bytes(kv, "key", &key) == 0 && key.len > skip && key.len < skip + 200)
        s->cbs.member(s->ctx, key.data + skip, there);
    ddp_buf_free(&key);
}

static void watch_members(ddp_etcd_session_t *s, int64_t from);

static void on_members_watch(void *ctx, int err, const ddp_json_t *reply, const char *why)
{
    ddp_etcd_session_t *s = ctx;
    (void)why;
    if (watch_ended(s, CALL_MEMBERS_WATCH, err, reply))
        return;
    for (const ddp_json_t *e = ddp_json_first(ddp_json_get(reply, "events")); e != NULL;
         e = ddp_json_next(e)) {
        const char *type = ddp_json_string(ddp_json_get(e, "type"), NULL);
        const ddp_json_t *kv = ddp_json_get(e, "kv");
        int64_t rev = 0;
        if (ddp_etcd_int(kv, "mod_revision", &rev) && rev > s->members_rev)
            s->members_rev = rev;
        member_event(s, kv, type == NULL || strcmp(type, "DELETE") != 0);
        if (s->phase != SESSION_RUNNING)
            return;
    }
}

static void watch_members(ddp_etcd_session_t *s, int64_t from)
{
    char key[1024];
    ddp_buf_t body = DDP_BUF_INIT;
    key_of(s, "node/", key, sizeof key);
    if (ddp_etcd_body_watch(&body, key, true, from) == 0)
        (void)post(s, CALL_MEMBERS_WATCH, "/v3/watch", ddp_buf_str(&body), true, on_members_watch);
    ddp_buf_free(&body);
}

static void on_members(void *ctx, int err, const ddp_json_t *reply, const char *why)
{
    ddp_etcd_session_t *s = ctx;
    s->calls[CALL_MEMBERS] = NULL;
    int64_t revision = 0;
    if (err != 0 || !ddp_etcd_int(ddp_json_get(reply, "header"), "revision", &revision)) {
        (void)why;
        resync_later(s); /* the keep-alives judge whether etcd is gone */
        return;
    }
    s->members_rev = revision;
    for (const ddp_json_t *kv = ddp_json_first(ddp_json_get(reply, "kvs"));
         kv != NULL && s->phase == SESSION_RUNNING; kv = ddp_json_next(kv))
        member_event(s, kv, true);
    if (s->phase == SESSION_RUNNING)
        watch_members(s, revision + 1);
}

static void resync_members(ddp_etcd_session_t *s)
{
    char key[1024];
    ddp_buf_t body = DDP_BUF_INIT;
    key_of(s, "node/", key, sizeof key);
    if (ddp_etcd_body_range(&body, key, true) == 0)
        (void)post(s, CALL_MEMBERS, "/v3/kv/range", ddp_buf_str(&body), false, on_members);
    ddp_buf_free(&body);
}

void ddp_etcd_session_watch_members(ddp_etcd_session_t *s)
{
    if (s->phase != SESSION_RUNNING || s->watch_members)
        return;
    s->watch_members = true;
    resync_members(s);
}

bool ddp_etcd_session_stopped(const ddp_etcd_session_t *s)
{
    return s->stopped;
}

int64_t ddp_etcd_session_coord_lease(const ddp_etcd_session_t *s)
{
    return s->coord_known ? s->coord_lease : 0;
}

int64_t ddp_etcd_session_lease(const ddp_etcd_session_t *s)
{
    /* A keep-alive goes every third of the limit and is answered at once: one unanswered
     * for a second more says etcd is out of reach now. The pace is the one they went at at
     * the last tick, not the limit now: a launcher ending while the job forms is no longer
     * relaxed (its place closes), but its last keep-alive went at the relaxed pace. */
    double every = (s->paced_relaxed ? s->lease_ttl : s->ttl) / 3;
    bool unanswered = now_s(s) - s->last_alive > every + 1;
    return s->lease_gone || unanswered ? 0 : s->lease;
}

/* The end. */

typedef struct {
    void (*done)(void *ctx);
    void *ctx;
} closing_t;

static void on_revoked(void *ctx, int err, const ddp_json_t *reply, const char *why)
{
    closing_t *c = ctx; /* NULL: nobody waits for it */
    (void)err, (void)reply, (void)why;
    if (c == NULL)
        return;
    c->done(c->ctx);
    free(c);
}

static void free_session(uv_handle_t *handle)
{
    ddp_etcd_session_t *s = handle->data;
    if (!uv_is_closing((uv_handle_t *)&s->deadline)) { /* the keep-alive timer's: then these */
        uv_close((uv_handle_t *)&s->deadline, free_session);
        return;
    }
    if (!uv_is_closing((uv_handle_t *)&s->retry)) {
        uv_close((uv_handle_t *)&s->retry, free_session);
        return;
    }
    if (!uv_is_closing((uv_handle_t *)&s->redepose)) {
        uv_close((uv_handle_t *)&s->redepose, free_session);
        return;
    }
    free(s->prefix);
    free(s->id);
    free(s->record);
    free(s->elect_record);
    free(s->coord);
    free(s);
}

void ddp_etcd_session_close(ddp_etcd_session_t *s, bool keep, void (*done)(void *ctx), void *ctx)
{
    char body[64];
    closing_t *c = NULL;
    for (int i = 0; i < NCALLS; i++) {
        ddp_etcd_cancel(s->calls[i]);
        s->calls[i] = NULL;
    }
    s->phase = SESSION_LOST;
    uv_timer_stop(&s->keepalive);
    uv_timer_stop(&s->deadline);
    uv_timer_stop(&s->retry);
    uv_timer_stop(&s->redepose);
    /* The revoke is left to run; a closing context only for whoever waits for it (a client
     * freed first drops the call unanswered, and nothing is left behind). */
    if (!keep && ddp_etcd_session_lease(s) != 0 &&
        (done == NULL || (c = malloc(sizeof *c)) != NULL)) {
        if (c != NULL) {
            c->done = done;
            c->ctx = ctx;
        }
        snprintf(body, sizeof body, "{\"ID\": \"%lld\"}", (long long)s->lease);
        if (ddp_etcd_post(s->etcd, "/v3/lease/revoke", body, false, on_revoked, c, NULL) != 0) {
            free(c);
            c = NULL;
        }
    }
    uv_close((uv_handle_t *)&s->keepalive, free_session);
    if (c == NULL && done != NULL)
        done(ctx);
}
