/* Where the job's store lives with --rdzv-backend=etcd (see etcd_place.h).
 *
 * Phases:
 *   ELECTING --the session's join (its member key put, the coordinator's key taken where
 *              absent, one transaction; a prefix with no member key under it, a finished
 *              job's, deleted first) says: none (elect), another's-->
 *              PLACED (placed callback); ours--> READING
 *   READING --the job's round record read (none, or the last round's)--> PLACED
 *   (ELECTING, another's) PROBING --its store answers a handshake (or cannot be probed:
 *              a name, whose lookup would block the loop: the node thread's connection
 *              judges, a refusal told as a lost store; no connection in time)--> PLACED;
 *              refuses the connection (a dead
 *              job's record, its lease still running), or takes it and answers otherwise
 *              or not within a lease's time while the job forms (another program's port)--> its
 * lease revoked --> ELECTING (under no lease: FAILED) PLACED --ddp_etcd_place_lost: the key read
 * afresh (it is watched only while a depose waits for it to go: a placed launcher needs no news of
 * it): it still names the lost store: its launcher's lease revoked (its keys go); none: elect-->
 *            ELECTING (placed again, the new one); it names another store already-->
 *            PROBING it
 *   any but FAILED, CLOSING --the lease lost while the job forms (forming callback), or
 *              ended while this launcher was stopped (Ctrl-Z)--> the same phase, under a
 *              new lease (the session's rejoin; its word on the key comes again: the
 *              elected launcher that finds another's there--> FAILED)
 *   ELECTING, PLACED --etcd unreachable, not etcd, the lease lost while workers run (but
 *              for a stop) or not taken again within join_timeout--> FAILED
 *   ELECTING, PROBING --the coordinator's key changed to another record while the election
 *              judged one, and no store placed within join_timeout of that change (the
 *              loop's stops not counted): a key that keeps changing--> FAILED
 *   any --ddp_etcd_place_close--> CLOSING (the prefix deleted by the elected but where it
 *                                         leaves a job that goes on, the lease
 *                                         revoked, the client freed) */
#include "rdzv/etcd_place.h"

#include "error.h"
#include "parse.h"
#include "rdzv/etcd_client.h"
#include "rdzv/etcd_session.h"
#include "store_codec.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef enum {
    PLACE_ELECTING,
    PLACE_READING,
    PLACE_PROBING,
    PLACE_PLACED,
    PLACE_FAILED,
    PLACE_CLOSING
} phase_t;

/* Unanswered round record writes remembered in a row (one a round: more is a flapping
 * etcd; the oldest are forgotten). */
#define UNSURE_MAX 8

struct ddp_etcd_place_s {
    const ddp_log_t *log;
    ddp_etcd_t *etcd;
    ddp_etcd_session_t *session;
    ddp_etcd_place_cbs_t cbs;
    void *ctx;
    phase_t phase;
    bool own;     /* this launcher's store is the job's */
    char *placed; /* the coordinator's record the job is at (malloc'd) */
    char *latest; /* the record the key holds as last seen, NULL: none (malloc'd) */
    ddp_etcd_call_t *reading, *writing;   /* the round record's (writing: or its read back) */
    ddp_etcd_call_t *deleting, *revoking; /* (CLOSING) the prefix's, the lease's */
    uv_timer_t bound;                     /* (CLOSING) the end's deadline (CLOSE_BOUND) */
    bool ended;                           /* (CLOSING) its handles close, then it is freed */
    int64_t state_rev;                    /* its revision as this coordinator knows it */
    void (*closed)(void *ctx);            /* (CLOSING) told once the last request is done */
    void *closed_ctx;
    char *pending;            /* a record to write once the last write is in */
    char *sent;               /* the record of the write in flight (or read back after it) */
    char *unsure[UNSURE_MAX]; /* records whose writes etcd may have done, unanswered, since
                               * the last write known in (oldest first) */
    int nunsure;
    bool again;            /* `pending` is a failed write's record, sent again once */
    struct probe_s *probe; /* PROBING: the connection to the elected store */
    double ttl, join_timeout;
    /* (ELECTING, PROBING) election_s from the first change of the coordinator's key while
     * this election judged a record to a store placed: each record is judged within bounds of
     * its own (a probe, a lease check, the node thread's connection), not a key that keeps
     * changing. `judging`: the last record judged (malloc'd), `changes` since. An election
     * ends with a store this node reached (its own, a probe answered, or the job at one
     * until it was lost), not with one the node thread never joined. */
    uv_timer_t election;
    uint64_t election_end; /* its deadline, loop ms (0: none yet) */
    char *judging;
    int64_t judging_lease;
    int changes;
    int open;         /* (CLOSING) handles not closed yet: the last frees the place */
    bool relocating;  /* (ELECTING) the job's store was lost: the key's next word decides */
    bool judged_here; /* (relocating) the loss judged from this node alone (see place_lost) */
    /* (ELECTING) a depose waiting on whether the elected launcher keeps its lease alive:
     * the store's "host:port " as the key names it, and what this node saw of it. */
    char judged_named[300], judged[600];
    bool judged_slow; /* ... it was the probe's silence: a live one is joined all the same */
    char judged_host[256];
    int judged_port;
    bool rejoining;                   /* the lease was lost while the job formed: taken again */
    bool answered;                    /* etcd answered a join of this launcher's once */
    int unanswered;                   /* first joins etcd left unanswered */
    double rejoin_since;              /* loop s of the first loss since the last join */
    char prefix[DDP_ETCD_PREFIX_MAX]; /* ddp-launch/<run id, escaped>/ */
    char id[128], record[400];
};

/* The end's requests (the last round record where the elected launcher leaves, the
 * prefix's delete, the lease's revoke) are given this many seconds in all, however many
 * endpoints etcd leaves unanswered: the lease ends by itself after its time, and a new
 * job clears a prefix no live launcher holds. */
#define CLOSE_BOUND 2.5

/* First joins etcd may leave unanswered before this launcher ends (a join burst's late
 * answers are taken again; an endpoint that never answers is said after these). */
#define FIRST_TRIES 3

/* How a depose judged from this node alone is checked first, said in its warning. */
#define UNLESS_ALIVE                                                                          \
    "unless its launcher keeps its lease alive (read in etcd until a keep-alive is overdue, " \
    "8 s at most)"

static void probe_drop(struct probe_s *pr);

static void fail(ddp_etcd_place_t *p, const char *why)
{
    if (p->phase == PLACE_FAILED || p->phase == PLACE_CLOSING)
        return;
    p->phase = PLACE_FAILED;
    uv_timer_stop(&p->election);
    if (p->probe != NULL) /* (it frees itself once its handles have closed) */
        probe_drop(p->probe);
    p->cbs.failed(p->ctx, why);
}

static void on_election_timeout(uv_timer_t *timer);
static double probe_silence_s(const ddp_etcd_place_t *p);

/* The election's bound: join_timeout, and at least one record's whole judgement (the
 * probe's silence, then a lease check and its last read's request timeout), so that a key
 * changed once, to a live store that is slow, is judged as any first record is. */
static double election_s(const ddp_etcd_place_t *p)
{
    double one = probe_silence_s(p) + DDP_ETCD_LEASE_CHECK_S + p->ttl / 3 + 1;
    return p->join_timeout > one ? p->join_timeout : one;
}

/* The election's deadline kept: election_s from its first change (set where none is),
 * its timer started for what is left of it. */
static void election_deadline(ddp_etcd_place_t *p)
{
    uint64_t now = uv_now(ddp_etcd_loop(p->etcd));
    if (p->election_end == 0)
        p->election_end = now + (uint64_t)(election_s(p) * 1000);
    uv_timer_start(&p->election, on_election_timeout,
                   p->election_end > now ? p->election_end - now : 0, 0);
}

/* The key kept changing for join_timeout while this election judged its records. A loop
 * that stood still meanwhile (Ctrl-Z: the job's pause) counts from its continue. */
static void on_election_timeout(uv_timer_t *timer)
{
    ddp_etcd_place_t *p = timer->data;
    if (p->phase != PLACE_ELECTING && p->phase != PLACE_PROBING)
        return;
    if (ddp_etcd_session_stopped(p->session)) {
        p->election_end = 0;
        election_deadline(p);
        return;
    }
    char why[1600];
    ddp_buf_t last = DDP_BUF_INIT;
    if (p->latest != NULL) /* (another program's bytes, maybe: shown escaped) */
        (void)ddp_buf_printable_cut(&last, p->latest, strlen(p->latest), 200, false);
    snprintf(why, sizeof why,
             "etcd at %s: no store was placed within %g s (--rdzv-conf join_timeout, or one "
             "record's probe and lease check where longer) of the first change of the "
             "coordinator's key %scoord while this launcher judged its record: it changed %d "
             "time(s), each record gone or not a ddp-launch store this node could join (last: "
             "'%s'); is another program writing under ddp-launch/?",
             ddp_etcd_endpoints(p->etcd), election_s(p), p->prefix, p->changes,
             p->latest != NULL ? ddp_buf_str(&last) : "none");
    ddp_buf_free(&last);
    fail(p, why);
}

/* (ELECTING) `record` is the one to judge now: another than the last judged, or the same
 * under another lease (re-put: its lease check starts over), starts the election's deadline
 * (once: not moved by the next). */
static void judging(ddp_etcd_place_t *p, const char *record)
{
    int64_t lease = ddp_etcd_session_coord_lease(p->session);
    if (p->judging != NULL && strcmp(p->judging, record) == 0 && p->judging_lease == lease)
        return;
    p->judging_lease = lease;
    if (p->judging != NULL && p->changes++ == 0)
        election_deadline(p);
    free(p->judging);
    p->judging = strdup(record);
}

/* A store this node reached: the election is over (its next starts afresh). */
static void election_over(ddp_etcd_place_t *p)
{
    uv_timer_stop(&p->election);
    free(p->judging);
    p->judging = NULL;
    p->changes = 0;
    p->election_end = 0;
}

static void read_state(ddp_etcd_place_t *p);
static void on_coordinator(void *ctx, const char *record, bool own);
static int probe(ddp_etcd_place_t *p, const char *host, int port);
static void placed_elsewhere(ddp_etcd_place_t *p, const char *host, int port);

/* While the job forms, the lease is kept alive at a third of the pace (see the session's
 * relaxed callback): a thousand launchers joining at once load etcd with their keep-alives
 * as much as with their joins. */
static bool on_relaxed(void *ctx)
{
    const ddp_etcd_place_t *p = ctx;
    return p->cbs.forming(p->ctx);
}

/* A random fraction in [0, 1) of this launcher's own: rejoins spread over time. */
static double jitter(void)
{
    uint64_t x = uv_hrtime() ^ ((uint64_t)getpid() * 0x9e3779b97f4a7c15ull);
    x ^= x >> 29;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 32;
    return (double)(x % 1000000) / 1e6;
}

/* The session is lost: while the job forms, or after this launcher was stopped (Ctrl-Z:
 * the job's pause, no node judged lost meanwhile), a lost lease is taken again (after a
 * random part of a keep-alive period, so that launchers that lost theirs together do not
 * come back together), until join_timeout has passed since the first loss. */
static void on_lost(void *ctx, const char *why)
{
    ddp_etcd_place_t *p = ctx;
    double now = (double)uv_now(ddp_etcd_loop(p->etcd)) / 1000.0;
    bool stopped = ddp_etcd_session_stopped(p->session), forming = p->cbs.forming(p->ctx);
    if (p->phase == PLACE_FAILED || p->phase == PLACE_CLOSING || (!forming && !stopped)) {
        fail(p, why);
        return;
    }
    if (!p->answered && ++p->unanswered >= FIRST_TRIES) {
        /* Never answered: no etcd there (a port that takes connections and says nothing),
         * not a join burst's late answer: said now, not after join_timeout. */
        char text[1400];
        snprintf(text, sizeof text, "etcd at %s did not answer this launcher's first %d joins: %s",
                 ddp_etcd_endpoints(p->etcd), FIRST_TRIES, why);
        fail(p, text);
        return;
    }
    if (!p->rejoining)
        p->rejoin_since = now;
    double delay = p->ttl / 3 * (0.25 + 0.75 * jitter());
    if (now + delay - p->rejoin_since > p->join_timeout) {
        char text[1400];
        snprintf(text, sizeof text,
                 "etcd at %s: this launcher's lease could not be taken again within %g s "
                 "(--rdzv-conf join_timeout): %s",
                 ddp_etcd_endpoints(p->etcd), p->join_timeout, why);
        fail(p, text);
        return;
    }
    if (!ddp_etcd_session_rejoin(p->session, delay, p->phase == PLACE_ELECTING)) {
        fail(p, why);
        return;
    }
    p->rejoining = true;
    if (!p->answered)
        ddp_log_warn(p->log, "etcd: %s: trying again in %.2f s (%d of %d)", why, delay,
                     p->unanswered + 1, FIRST_TRIES);
    else
        ddp_log_warn(p->log, "etcd: %s: %s: taking a new lease and joining again in %.2f s", why,
                     forming ? "the job forms" : "the job goes on", delay);
}

/* "HOST:PORT ID" (IPv6 as [ADDR]:PORT): the host and port, or false. */
static bool parse_record(const char *record, char *host, size_t cap, int *port)
{
    const char *colon = NULL;
    size_t len = strcspn(record, " ");
    for (size_t i = 0; i < len; i++)
        if (record[i] == ':')
            colon = record + i;
    char *end;
    long n = colon != NULL ? strtol(colon + 1, &end, 10) : -1;
    size_t hlen = colon != NULL ? (size_t)(colon - record) : 0;
    if (colon == NULL || end != record + len || n < 1 || n > 65535 || hlen == 0 || hlen >= cap)
        return false;
    if (record[0] == '[' && hlen > 2 && record[hlen - 1] == ']')
        record++, hlen -= 2;
    memcpy(host, record, hlen);
    host[hlen] = '\0';
    *port = (int)n;
    return true;
}

static void key_of(const ddp_etcd_place_t *p, const char *what, char *key, size_t cap)
{
    snprintf(key, cap, "%s%s", p->prefix, what);
}

static void on_state(void *ctx, int err, const ddp_json_t *reply, const char *why)
{
    ddp_etcd_place_t *p = ctx;
    p->reading = NULL;
    ddp_buf_t value = DDP_BUF_INIT;
    const ddp_json_t *kv = ddp_json_first(ddp_json_get(reply, "kvs"));
    if (err != 0 || (kv != NULL && ddp_etcd_bytes(kv, "value", &value) != 0)) {
        char text[1000];
        snprintf(text, sizeof text, "unable to read the job's round record: %s",
                 err != 0 ? why : "not base64");
        ddp_buf_free(&value);
        fail(p, text);
        return;
    }
    p->state_rev = 0;
    if (kv != NULL)
        (void)ddp_etcd_int(kv, "mod_revision", &p->state_rev);
    p->phase = PLACE_PLACED;
    p->own = true;
    election_over(p);
    ddp_etcd_session_watch(p->session, false, false);
    ddp_log_info(p->log, "etcd: elected: this launcher serves the job's store");
    p->cbs.placed(p->ctx, true, NULL, 0, kv != NULL ? ddp_buf_str(&value) : NULL);
    ddp_buf_free(&value);
}

static void read_state(ddp_etcd_place_t *p)
{
    char key[DDP_ETCD_PREFIX_MAX + 16];
    ddp_buf_t body = DDP_BUF_INIT;
    key_of(p, "state", key, sizeof key);
    if (ddp_etcd_body_range(&body, key, false) != 0 ||
        ddp_etcd_post(p->etcd, "/v3/kv/range", ddp_buf_str(&body), false, on_state, p,
                      &p->reading) != 0)
        fail(p, "out of memory");
    ddp_buf_free(&body);
}

static void write_state(ddp_etcd_place_t *p);

static void end_session(ddp_etcd_place_t *p);

/* The next record's write, or the leaving one's end once its last is in. */
static void after_write(ddp_etcd_place_t *p)
{
    if (p->pending != NULL)
        write_state(p);
    if (p->writing == NULL && p->phase == PLACE_CLOSING) /* the leaving one's last is in */
        end_session(p);
}

static void unsure_clear(ddp_etcd_place_t *p)
{
    for (int i = 0; i < p->nunsure; i++)
        free(p->unsure[i]);
    p->nunsure = 0;
}

static void unsure_add(ddp_etcd_place_t *p, char *record)
{
    if (p->nunsure == UNSURE_MAX) {
        free(p->unsure[0]);
        memmove(p->unsure, p->unsure + 1, sizeof p->unsure[0] * (UNSURE_MAX - 1));
        p->nunsure--;
    }
    p->unsure[p->nunsure++] = record;
}

static bool unsure_has(const ddp_etcd_place_t *p, const char *record)
{
    for (int i = 0; i < p->nunsure; i++)
        if (strcmp(p->unsure[i], record) == 0)
            return true;
    return false;
}

/* The round record read back after a write that failed or was unanswered: the key holds
 * this launcher's (the record sent, one of its unanswered ones, or untouched since its
 * last write: its revision taken, the record sent again where it is not in), or another
 * launcher's (a coordinator that took the job over while this one was deposed: its record
 * stands). */
static void on_state_checked(void *ctx, int err, const ddp_json_t *reply, const char *why)
{
    ddp_etcd_place_t *p = ctx;
    p->writing = NULL;
    char *sent = p->sent;
    p->sent = NULL;
    ddp_buf_t value = DDP_BUF_INIT;
    const ddp_json_t *kv = ddp_json_first(ddp_json_get(reply, "kvs"));
    int64_t rev = 0;
    if (err != 0 || (kv != NULL && (ddp_etcd_bytes(kv, "value", &value) != 0 ||
                                    !ddp_etcd_int(kv, "mod_revision", &rev)))) {
        /* Unknown: kept as one that may be in (the next write's compare says). */
        ddp_log_warn(p->log, "etcd: unable to read the job's round record back: %s",
                     err != 0 ? why : "not etcd's reply");
        unsure_add(p, sent);
        sent = NULL;
    } else if (kv != NULL ? rev != p->state_rev && strcmp(ddp_buf_str(&value), sent) != 0 &&
                                !unsure_has(p, ddp_buf_str(&value))
                          : p->state_rev != 0) {
        ddp_log_warn(p->log, "etcd: the job's round record was written by another launcher: "
                             "this one no longer coordinates the job in etcd's eyes");
        free(p->pending);
        p->pending = NULL;
    } else {
        p->state_rev = rev;
        unsure_clear(p);
        bool in = kv != NULL && strcmp(ddp_buf_str(&value), sent) == 0;
        if (!in && p->pending == NULL && !p->again) { /* not done: once more */
            p->pending = sent;
            p->again = true;
            sent = NULL;
        }
    }
    ddp_buf_free(&value);
    free(sent);
    after_write(p);
}

static void on_state_written(void *ctx, int err, const ddp_json_t *reply, const char *why)
{
    ddp_etcd_place_t *p = ctx;
    p->writing = NULL;
    if (err != 0 || !ddp_etcd_succeeded(reply)) {
        /* etcd may have done it (its answer lost or late), or the compare failed (written
         * since, by this launcher's unanswered write or by another): read back to know. */
        if (err != 0)
            ddp_log_warn(p->log,
                         "etcd: unable to write the job's round record: %s: reading it "
                         "back",
                         why);
        char key[DDP_ETCD_PREFIX_MAX + 16];
        ddp_buf_t body = DDP_BUF_INIT;
        key_of(p, "state", key, sizeof key);
        if (ddp_etcd_body_range(&body, key, false) != 0 ||
            ddp_etcd_post(p->etcd, "/v3/kv/range", ddp_buf_str(&body), false, on_state_checked, p,
                          &p->writing) != 0)
            ddp_log_warn(p->log, "etcd: unable to read the job's round record back: out of "
                                 "memory");
        ddp_buf_free(&body);
        if (p->writing != NULL)
            return;
    } else {
        (void)ddp_etcd_int(ddp_json_get(reply, "header"), "revision", &p->state_rev);
        p->again = false;
        unsure_clear(p);
    }
    free(p->sent);
    p->sent = NULL;
    after_write(p);
}

static void write_state(ddp_etcd_place_t *p)
{
    char key[DDP_ETCD_PREFIX_MAX + 16];
    ddp_buf_t body = DDP_BUF_INIT;
    char *record = p->pending;
    p->pending = NULL;
    key_of(p, "state", key, sizeof key);
    if (ddp_etcd_body_put_if(&body, key, record, strlen(record), p->state_rev) != 0 ||
        ddp_etcd_post(p->etcd, "/v3/kv/txn", ddp_buf_str(&body), false, on_state_written, p,
                      &p->writing) != 0) {
        ddp_log_warn(p->log, "etcd: unable to write the job's round record: out of memory");
        free(record);
    } else {
        free(p->sent);
        p->sent = record;
    }
    ddp_buf_free(&body);
}

void ddp_etcd_place_record(ddp_etcd_place_t *p, const char *record)
{
    if (p == NULL || p->phase != PLACE_PLACED || !p->own)
        return;
    free(p->pending); /* (the newest round's is the one to keep) */
    p->pending = strdup(record);
    p->again = false;
    if (p->writing == NULL && p->pending != NULL)
        write_state(p);
}

bool ddp_etcd_place_settled(const ddp_etcd_place_t *p)
{
    return p->writing == NULL && p->pending == NULL;
}

static void placed_elsewhere(ddp_etcd_place_t *p, const char *host, int port)
{
    p->phase = PLACE_PLACED;
    uv_timer_stop(&p->election); /* (until the node thread says whether it joined there) */
    ddp_etcd_session_watch(p->session, false, false);
    p->own = false;
    ddp_log_info(p->log, "etcd: the job's store is the elected launcher's");
    p->cbs.placed(p->ctx, false, host, port, NULL);
}

/* A connection to the elected launcher's store, before the job goes there, and one
 * handshake on it (generation 2's VALIDATE and a PING, which every ddp-launch store
 * answers): a record that outlived its launcher (SIGKILLed, its lease not run out yet) is
 * refused at once; one naming a port where another program listens (a dead job's port
 * taken since) is answered wrongly, or not within a lease's time while the job forms
 * (probe_silence_s), by which a live launcher's loop would have lost its lease too. */
typedef struct probe_s {
    ddp_etcd_place_t *p; /* NULL once the place has closed */
    uv_tcp_t tcp;
    uv_connect_t connect;
    uv_write_t write;
    uv_timer_t timer;
    uint8_t request[16], reply[8];
    size_t got; /* bytes of the reply read */
    uint32_t nonce;
    bool connected;
    char host[256];
    int port, open;
} probe_t;

/* A probe's end: how the store answered. */
typedef enum {
    PROBE_ANSWERED,    /* as a ddp-launch store */
    PROBE_REFUSED,     /* nobody listens: its launcher is gone */
    PROBE_UNJUDGED,    /* no connection in time, or none can be tried: the node thread judges */
    PROBE_NOT_A_STORE, /* connected, and answered otherwise */
    PROBE_SILENT,      /* connected, and no answer within probe_silence_s */
} probe_result_t;

static void probe_closed(uv_handle_t *handle)
{
    probe_t *pr = handle->data;
    if (--pr->open == 0)
        free(pr);
}

/* The key still names the store at host:port (nothing changed meanwhile): its lease
 * revoked (`warning` said), then the key's going is awaited; a key under no lease is no
 * launcher's (said, naming the address and `what` of it, not waited for: nothing would
 * delete it). */
static void depose_named(ddp_etcd_place_t *p, const char *host, int port, const char *what,
                         const char *warning, bool unless_alive)
{
    char named[300];
    p->phase = PLACE_ELECTING;
    snprintf(named, sizeof named, strchr(host, ':') != NULL ? "[%s]:%d " : "%s:%d ", host, port);
    if (p->latest == NULL || strncmp(p->latest, named, strlen(named)) != 0) {
        on_coordinator(p, p->latest, false); /* it went, or another was elected, meanwhile */
        return;
    }
    snprintf(p->judged_named, sizeof p->judged_named, "%s", named);
    snprintf(p->judged, sizeof p->judged, "%s", what);
    snprintf(p->judged_host, sizeof p->judged_host, "%s", host);
    p->judged_port = port;
    p->judged_slow = false;
    ddp_etcd_session_watch(p->session, true, false); /* then says the key is gone */
    if (!ddp_etcd_session_depose(p->session, unless_alive)) {
        char why[1400];
        snprintf(why, sizeof why,
                 "etcd at %s: the coordinator's key %scoord names %.*s, which %s, and is under "
                 "no lease (no launcher put it): delete it",
                 ddp_etcd_endpoints(p->etcd), p->prefix, (int)strlen(named) - 1, named, what);
        fail(p, why);
        return;
    }
    ddp_log_warn(p->log, "etcd: %s", warning);
}

static void probe_end(probe_t *pr, probe_result_t result, const char *what)
{
    ddp_etcd_place_t *p = pr->p;
    if (!uv_is_closing((uv_handle_t *)&pr->timer)) {
        uv_close((uv_handle_t *)&pr->timer, probe_closed);
        uv_close((uv_handle_t *)&pr->tcp, probe_closed);
    }
    if (p == NULL)
        return;
    if (p->probe == pr)
        p->probe = NULL;
    pr->p = NULL;
    if (p->phase != PLACE_PROBING)
        return; /* (failed, or closing, meanwhile) */
    if (result == PROBE_ANSWERED)
        election_over(p);
    if (result == PROBE_ANSWERED || result == PROBE_UNJUDGED) {
        placed_elsewhere(p, pr->host, pr->port);
        return;
    }
    char warning[2000], store[DDP_HOST_MAX + 16];
    ddp_host_port_text(store, sizeof store, pr->host, pr->port);
    if (result == PROBE_REFUSED)
        snprintf(warning, sizeof warning,
                 "the elected launcher's store at %s refuses connections: %s, ending that "
                 "lease, then electing another",
                 store, UNLESS_ALIVE);
    else
        snprintf(warning, sizeof warning,
                 "the coordinator's key %scoord names %s, which %s: it did not answer as a "
                 "ddp-launch store (another program's port?): %s, ending that lease, then "
                 "electing another",
                 p->prefix, store, what, UNLESS_ALIVE);
    depose_named(p, pr->host, pr->port, result == PROBE_REFUSED ? "refuses connections" : what,
                 warning, true);
    p->judged_slow = result == PROBE_SILENT;
}

/* The probe ended unjudged (the place failed or closes). */
static void probe_drop(probe_t *pr)
{
    probe_end(pr, PROBE_UNJUDGED, NULL);
}

static void on_probe_alloc(uv_handle_t *handle, size_t size, uv_buf_t *buf)
{
    probe_t *pr = handle->data;
    (void)size;
    *buf = uv_buf_init((char *)pr->reply + pr->got, (unsigned)(sizeof pr->reply - pr->got));
}

/* PING's answer is its nonce, 4 bytes; anything else is not a ddp-launch store's. */
static void on_probe_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf)
{
    probe_t *pr = stream->data;
    char what[200];
    (void)buf;
    if (nread < 0) {
        snprintf(what, sizeof what, "closed the connection at its handshake (%s)",
                 uv_strerror((int)nread));
        probe_end(pr, PROBE_NOT_A_STORE, what);
        return;
    }
    pr->got += (size_t)nread;
    if (pr->got < 4)
        return;
    bool ours = pr->got == 4 && memcmp(pr->reply, &pr->nonce, 4) == 0;
    probe_end(pr, ours ? PROBE_ANSWERED : PROBE_NOT_A_STORE,
              "answered its handshake with bytes a TCPStore does not send");
}

static void on_probe_timer(uv_timer_t *timer);

static void on_probe_written(uv_write_t *req, int status)
{
    if (status != 0 && status != UV_ECANCELED)
        probe_end(req->data, PROBE_NOT_A_STORE, "closed the connection at its handshake");
}

/* How long a store that took the probe's connection may stay silent: the lease's time while
 * the job forms (three times the keep-alive limit), not the limit itself: under a burst of
 * joins the elected launcher's loop is as busy as etcd, and a live store wrongly judged
 * silent would be deposed. */
static double probe_silence_s(const ddp_etcd_place_t *p)
{
    return 3 * p->ttl;
}

/* Connected: VALIDATE and PING sent, the answer due within PROBE_SILENCE_S. */
static void probe_handshake(probe_t *pr)
{
    ddp_buf_t out = DDP_BUF_INIT;
    pr->nonce = (uint32_t)(uv_hrtime() ^ ((uint64_t)getpid() << 16));
    int err = ddp_codec_put_op(&out, DDP_CODEC_GEN2, DDP_CODEC_VALIDATE);
    if (err == 0)
        err = ddp_codec_put_u32(&out, DDP_CODEC_MAGIC);
    if (err == 0)
        err = ddp_codec_put_op(&out, DDP_CODEC_GEN2, DDP_CODEC_PING);
    if (err == 0)
        err = ddp_codec_put_u32(&out, pr->nonce);
    if (err != 0 || out.len > sizeof pr->request) {
        ddp_buf_free(&out);
        probe_end(pr, PROBE_UNJUDGED, NULL);
        return;
    }
    memcpy(pr->request, out.data, out.len);
    uv_buf_t buf = uv_buf_init((char *)pr->request, (unsigned)out.len);
    ddp_buf_free(&out);
    pr->connected = true;
    uv_timer_stop(&pr->timer);
    uv_timer_start(&pr->timer, on_probe_timer, (uint64_t)(probe_silence_s(pr->p) * 1000), 0);
    pr->write.data = pr;
    err = uv_write(&pr->write, (uv_stream_t *)&pr->tcp, &buf, 1, on_probe_written);
    if (err == 0)
        err = uv_read_start((uv_stream_t *)&pr->tcp, on_probe_alloc, on_probe_read);
    if (err != 0)
        probe_end(pr, PROBE_NOT_A_STORE, "closed the connection at its handshake");
}

static void on_probe_connect(uv_connect_t *req, int status)
{
    probe_t *pr = req->data;
    if (status == 0 && pr->p != NULL)
        probe_handshake(pr);
    else
        probe_end(pr, status == UV_ECONNREFUSED ? PROBE_REFUSED : PROBE_UNJUDGED, NULL);
}

static void on_probe_timer(uv_timer_t *timer)
{
    probe_t *pr = timer->data;
    char what[200];
    snprintf(what, sizeof what,
             "took the connection and said nothing for %g s (a lease's time while the job "
             "forms)",
             pr->p != NULL ? probe_silence_s(pr->p) : 0.0);
    probe_end(pr, pr->connected ? PROBE_SILENT : PROBE_UNJUDGED, what);
}

/* 0: the probe runs (PROBING); else none can (a host name: the node thread's connection
 * judges). The connection is given a third of the keep-alive limit (a host that does not
 * answer it is not judged from here), the handshake the whole limit. */
static int probe(ddp_etcd_place_t *p, const char *host, int port)
{
    struct sockaddr_storage addr;
    uv_loop_t *loop = ddp_etcd_loop(p->etcd);
    if (uv_ip4_addr(host, port, (struct sockaddr_in *)&addr) != 0 &&
        uv_ip6_addr(host, port, (struct sockaddr_in6 *)&addr) != 0)
        return -EINVAL;
    probe_t *pr = calloc(1, sizeof *pr);
    if (pr == NULL)
        return -ENOMEM;
    pr->p = p;
    snprintf(pr->host, sizeof pr->host, "%s", host);
    pr->port = port;
    uv_tcp_init(loop, &pr->tcp);
    uv_timer_init(loop, &pr->timer);
    pr->open = 2;
    pr->tcp.data = pr->timer.data = pr->connect.data = pr;
    p->probe = pr;
    p->phase = PLACE_PROBING;
    uv_timer_start(&pr->timer, on_probe_timer, (uint64_t)(p->ttl / 3 * 1000), 0);
    int err =
        uv_tcp_connect(&pr->connect, &pr->tcp, (const struct sockaddr *)&addr, on_probe_connect);
    if (err != 0)
        probe_end(pr, err == UV_ECONNREFUSED ? PROBE_REFUSED : PROBE_UNJUDGED, NULL);
    return 0;
}

/* (ELECTING, after ddp_etcd_place_lost) what the key holds now: still the lost store's
 * launcher, whose lease is then revoked (its keys go now rather than at its lease's end;
 * the watch says so); none; or another's. True where that is handled here. */
static bool relocate(ddp_etcd_place_t *p, const char *record)
{
    p->relocating = false;
    bool same = record != NULL && p->placed != NULL && strcmp(record, p->placed) == 0;
    const char *placed = p->placed != NULL ? p->placed : "?";
    int len = (int)strcspn(placed, " ");
    if (same && p->judged_here) {
        snprintf(p->judged_named, sizeof p->judged_named, "%.*s ", len, placed);
        snprintf(p->judged, sizeof p->judged, "%s", "did not answer this node's connection");
        p->judged_slow = false; /* (the node thread waited for it: join_timeout) */
    }
    if (same && !ddp_etcd_session_depose(p->session, p->judged_here)) {
        fail(p, "etcd: the coordinator's key names the lost store and is under no lease (no "
                "launcher put it): delete it");
        return true;
    }
    ddp_log_warn(p->log, "etcd: the job's store at %.*s is lost: %s%s", len, placed,
                 same && p->judged_here ? UNLESS_ALIVE ", " : "",
                 same             ? "ending its launcher's lease, then electing another"
                 : record == NULL ? "electing another launcher"
                                  : "another launcher is elected already");
    return same;
}

/* (ELECTING) the elected launcher whose store this node judged gone keeps its lease alive:
 * it lives, and only this node cannot reach its store. This launcher ends, saying so; the
 * job is not moved for one node's view. A store that only stayed silent for the probe (its
 * loop busy with a burst of joins) is joined all the same: the node thread's connection
 * waits for it within join_timeout, and judges again. */
static void on_kept_alive(void *ctx)
{
    ddp_etcd_place_t *p = ctx;
    if (p->phase != PLACE_ELECTING || p->latest == NULL || p->judged_named[0] == '\0' ||
        strncmp(p->latest, p->judged_named, strlen(p->judged_named)) != 0)
        return; /* the key changed meanwhile: its word has been taken */
    if (p->judged_slow) {
        ddp_log_warn(p->log,
                     "etcd: the elected launcher keeps its lease alive (it lives): its store at "
                     "%.*s is slow, not gone; joining it (--rdzv-conf join_timeout)",
                     (int)strlen(p->judged_named) - 1, p->judged_named);
        placed_elsewhere(p, p->judged_host, p->judged_port);
        return;
    }
    char why[1400];
    snprintf(why, sizeof why,
             "etcd: the elected launcher keeps its lease alive (it lives), yet from this node "
             "its store at %.*s %s: this node reaches that name or address otherwise than the "
             "job's launchers do (the --local-addr given there, /etc/hosts or DNS here, a "
             "firewall between); this launcher ends, the job is left as it is",
             (int)strlen(p->judged_named) - 1, p->judged_named, p->judged);
    fail(p, why);
}

static void on_coordinator(void *ctx, const char *record, bool own)
{
    ddp_etcd_place_t *p = ctx;
    char host[256];
    int port = 0;
    char *copy = record != NULL ? strdup(record) : NULL; /* (record may be p->latest) */
    bool lost = record != NULL && copy == NULL;
    free(p->latest);
    p->latest = copy;
    record = copy;
    if (lost) {
        fail(p, "out of memory");
        return;
    }
    p->answered = true;
    if (p->rejoining) { /* the session's join again: its word on the coordinator's key */
        p->rejoining = false;
        ddp_log_info(p->log, "etcd: joined again, under a new lease");
        if (p->phase == PLACE_PLACED && p->own && !own) {
            p->phase = PLACE_FAILED;
            p->cbs.deposed(p->ctx, "etcd: another launcher was elected while this one's lease "
                                   "was lost: this launcher leaves, and the job goes on at the "
                                   "elected one's store");
            return;
        }
    }
    /* Placed, the job stays where it is until the node thread says its store is lost
     * (ddp_etcd_place_lost): a key that changes meanwhile (the job's end deletes it) is
     * no news for this launcher yet. */
    if (p->phase != PLACE_ELECTING || (p->relocating && relocate(p, record)))
        return;
    if (record == NULL) {
        ddp_etcd_session_elect(p->session, p->record);
        return;
    }
    if (!own)
        judging(p, record);
    if (!own && !parse_record(record, host, sizeof host, &port)) {
        char why[1400];
        snprintf(why, sizeof why,
                 "etcd at %s: the coordinator's key %scoord holds '%.200s', not a launcher's "
                 "HOST:PORT (another program's key under ddp-launch/?)",
                 ddp_etcd_endpoints(p->etcd), p->prefix, record);
        fail(p, why);
        return;
    }
    free(p->placed);
    p->placed = strdup(record);
    if (own) { /* the job's last round first, to resume from */
        p->phase = PLACE_READING;
        read_state(p);
        return;
    }
    /* This launcher's own store's address under a lease not its own: under another
     * launcher's id, that launcher has gone (this one listens there now: a restart with a
     * fixed --master-port), its lease not run out yet; under this launcher's own id, a
     * join of its own took the key under the lease it held then, the join's answer lost,
     * and it joined again under a new one. Probed, the store would answer as the job's. */
    size_t addr_len = strcspn(p->record, " ") + 1;
    if (!own && strncmp(record, p->record, addr_len) == 0) {
        bool mine = strcmp(record, p->record) == 0;
        char warning[2000];
        snprintf(warning, sizeof warning,
                 "the coordinator's key %scoord names %.*s, this launcher's own store, %s: "
                 "ending that lease, then electing another",
                 p->prefix, (int)addr_len - 1, record,
                 mine ? "under a lease this launcher held before (a join whose answer was lost)"
                      : "under another launcher's id (a launcher gone since, this one listening "
                        "at its port)");
        depose_named(p, host, port, "is this launcher's own store", warning, false);
        return;
    }
    if (probe(p, host, port) != 0)
        placed_elsewhere(p, host, port);
}

/* A launcher's keep-alive limit in seconds: twice the rendezvous' (6 s by default), at
 * least etcd's least lease, 2 s. */
static double lease_s(const ddp_launch_config_t *cfg)
{
    double limit = 2 * cfg->rdzv_conf.keep_alive_interval * cfg->rdzv_conf.keep_alive_max_attempt;
    return limit > 2 ? limit : 2;
}

void ddp_etcd_place_prefix(const char *run_id, char *out, size_t cap)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t n = (size_t)snprintf(out, cap, "ddp-launch/");
    for (const unsigned char *c = (const unsigned char *)run_id; *c != '\0' && n + 4 < cap; c++) {
        if ((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
            *c == '.' || *c == '_' || *c == '-') {
            out[n++] = (char)*c;
            continue;
        }
        out[n++] = '%';
        out[n++] = hex[*c >> 4];
        out[n++] = hex[*c & 15];
    }
    out[n++] = '/';
    out[n] = '\0';
}

int ddp_etcd_place_start(uv_loop_t *loop, const ddp_launch_config_t *cfg, const ddp_log_t *log,
                         const char *id, const char *host, int port,
                         const ddp_etcd_place_cbs_t *cbs, void *ctx, ddp_etcd_place_t **out,
                         ddp_buf_t *why)
{
    ddp_etcd_place_t *p = calloc(1, sizeof *p);
    if (p == NULL)
        return -ENOMEM;
    p->log = log;
    p->cbs = *cbs;
    p->ctx = ctx;
    /* The keep-alive limit is twice the rendezvous' (6 s by default, at least etcd's least
     * lease, 2 s), kept alive every third of it once workers run: a launcher sends etcd a
     * request every 2 s. The lease itself is three times that, kept alive every 6 s while
     * the job forms (on_relaxed). */
    /* The lease is kept alive every third of its time: a request every 2 s by default. */
    p->ttl = lease_s(cfg);
    p->join_timeout = cfg->rdzv_conf.join_timeout;
    ddp_etcd_place_prefix(cfg->run_id, p->prefix, sizeof p->prefix);
    snprintf(p->id, sizeof p->id, "%s", id);
    snprintf(p->record, sizeof p->record, strchr(host, ':') != NULL ? "[%s]:%d %s" : "%s:%d %s",
             host, port, id);
    ddp_etcd_opts_t opts = {
        .endpoints = (const char *const *)cfg->etcd.endpoints,
        .nendpoints = cfg->etcd.nendpoints,
        .https = cfg->etcd.https,
        .cacert = cfg->etcd.cacert,
        .cert = cfg->etcd.cert,
        .key = cfg->etcd.key,
        .timeout = p->ttl / 3,
    };
    int err = ddp_etcd_new(loop, &opts, log, &p->etcd, why);
    if (err != 0) {
        free(p);
        return err;
    }
    p->phase = PLACE_ELECTING;
    ddp_etcd_session_cbs_t session_cbs = {on_lost, on_coordinator, NULL, /* no member watch */
                                          on_relaxed, on_kept_alive};
    err = ddp_etcd_session_start(p->etcd, p->prefix, p->id, p->ttl, p->record, &session_cbs, p,
                                 &p->session);
    if (err != 0) {
        ddp_etcd_free(p->etcd);
        free(p);
        return err;
    }
    uv_timer_init(loop, &p->election);
    p->election.data = p;
    p->open = 1;
    ddp_etcd_session_elect(p->session, p->record);    /* at the join, where none is */
    ddp_etcd_session_watch(p->session, false, false); /* until a depose waits for the key */
    *out = p;
    return 0;
}

void ddp_etcd_place_lost(ddp_etcd_place_t *p, bool unanswered)
{
    if (p->phase != PLACE_PLACED)
        return;
    p->phase = PLACE_ELECTING;
    p->relocating = true;
    p->judged_here = unanswered;
    if (!unanswered)
        election_over(p);    /* (the job was at that store: this is a new election) */
    else if (p->changes > 0) /* (the same election goes on, its deadline with it) */
        election_deadline(p);
    /* The key read afresh (nothing watched it while the job was placed), then watched: its
     * word goes to on_coordinator. */
    ddp_etcd_session_watch(p->session, true, true);
}

/* The end. */

static void on_handle_closed(uv_handle_t *handle)
{
    ddp_etcd_place_t *p = handle->data;
    if (--p->open > 0)
        return;
    if (p->closed != NULL)
        p->closed(p->closed_ctx);
    free(p->placed);
    free(p->latest);
    free(p->judging);
    free(p->pending);
    free(p->sent);
    unsure_clear(p);
    ddp_etcd_free(p->etcd); /* (drops what is still in flight, unanswered) */
    free(p);
}

/* The end is over, done or cut short: the requests still in flight dropped. */
static void ended(ddp_etcd_place_t *p)
{
    if (p->ended)
        return;
    p->ended = true;
    ddp_etcd_cancel(p->writing);
    ddp_etcd_cancel(p->deleting);
    ddp_etcd_cancel(p->revoking);
    p->writing = p->deleting = p->revoking = NULL;
    if (p->session != NULL)
        ddp_etcd_session_close(p->session, true, NULL, NULL);
    p->session = NULL;
    uv_close((uv_handle_t *)&p->election, on_handle_closed);
    uv_close((uv_handle_t *)&p->bound, on_handle_closed);
}

static void on_revoked(void *ctx, int err, const ddp_json_t *reply, const char *why)
{
    ddp_etcd_place_t *p = ctx;
    (void)err, (void)reply, (void)why; /* (not revoked: it ends after its time) */
    p->revoking = NULL;
    ended(p);
}

/* The session closed, its lease revoked (this launcher's keys go with it). */
static void end_session(ddp_etcd_place_t *p)
{
    char body[64];
    int64_t lease = p->session != NULL ? ddp_etcd_session_lease(p->session) : 0;
    if (p->session != NULL)
        ddp_etcd_session_close(p->session, true, NULL, NULL);
    p->session = NULL;
    snprintf(body, sizeof body, "{\"ID\": \"%lld\"}", (long long)lease);
    if (lease == 0 ||
        ddp_etcd_post(p->etcd, "/v3/lease/revoke", body, false, on_revoked, p, &p->revoking) != 0)
        ended(p);
}

static void on_deleted(void *ctx, int err, const ddp_json_t *reply, const char *why)
{
    ddp_etcd_place_t *p = ctx;
    (void)reply;
    p->deleting = NULL;
    if (err != 0)
        ddp_log_warn(p->log, "etcd: unable to delete the job's keys under %s: %s", p->prefix, why);
    end_session(p);
}

static void on_bound(uv_timer_t *timer)
{
    ddp_etcd_place_t *p = timer->data;
    ddp_log_warn(p->log,
                 "etcd at %s did not answer the job's end within %g s: %s left to %s lease's end",
                 ddp_etcd_endpoints(p->etcd), CLOSE_BOUND,
                 p->revoking != NULL ? "this launcher's keys" : "the job's keys",
                 p->revoking != NULL ? "its" : "their");
    ended(p);
}

void ddp_etcd_place_close(ddp_etcd_place_t *p, bool leaving, void (*closed)(void *ctx), void *ctx)
{
    if (p == NULL) {
        if (closed != NULL)
            closed(ctx);
        return;
    }
    p->closed = closed;
    p->closed_ctx = ctx;
    bool own = p->phase == PLACE_PLACED && p->own && !leaving;
    /* The elected launcher leaving a job that goes on: its last round record (a failed
     * round's restart counted) goes in before its lease, so that the next one counts it. */
    bool flush =
        p->phase == PLACE_PLACED && p->own && leaving && (p->writing != NULL || p->pending != NULL);
    probe_t *pr = p->probe;
    p->probe = NULL;
    p->phase = PLACE_CLOSING;
    uv_timer_stop(&p->election);
    uv_timer_init(ddp_etcd_loop(p->etcd), &p->bound);
    p->bound.data = p;
    p->open++;
    uv_timer_start(&p->bound, on_bound, (uint64_t)(CLOSE_BOUND * 1000), 0);
    if (pr != NULL) /* (it frees itself once its handles have closed) */
        probe_drop(pr);
    ddp_etcd_cancel(p->reading);
    p->reading = NULL;
    if (flush && p->writing == NULL)
        write_state(p);
    if (flush && p->writing != NULL)
        return; /* on_state_written ends the session */
    ddp_etcd_cancel(p->writing);
    p->writing = NULL;
    ddp_log_debug(p->log, "etcd: the job's end here%s",
                  own ? ": deleting the job's keys, then this launcher's lease" : "");
    ddp_buf_t body = DDP_BUF_INIT;
    /* The elected launcher ends the job's keys: a new job with this run id starts clean. */
    if (own && ddp_etcd_body_range(&body, p->prefix, true) == 0 &&
        ddp_etcd_post(p->etcd, "/v3/kv/deleterange", ddp_buf_str(&body), false, on_deleted, p,
                      &p->deleting) == 0) {
        ddp_buf_free(&body);
        return;
    }
    ddp_buf_free(&body);
    end_session(p);
}

void ddp_etcd_place_abandon(ddp_etcd_place_t *p)
{
    if (p != NULL && p->phase == PLACE_CLOSING)
        ended(p);
}
