/* The static rendezvous of a multi-node job (see rdzv.h). The thread's store calls are
 * bounded by short slices so that it notices, between them, the loop's events and the
 * agent's end. */
#include "rdzv.h"

#include "error.h"
#include "io.h"
#include "store_client.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SLICE      0.1  /* s: the longest a store call blocks the thread */
#define NOTE_FIRST 5.0  /* s: a wait in a rendezvous is said after this long, */
#define NOTE_EVERY 30.0 /* then every NOTE_EVERY s */

struct ddp_rdzv_s {
    const ddp_launch_config_t *cfg;
    const ddp_log_t *log;
    uv_async_t async;
    void (*on_command)(void *ctx);
    void *ctx;
    pthread_t thread;
    bool thread_started;
    pthread_mutex_t mutex;
    pthread_cond_t wake; /* the thread sleeps on it between polls */

    /* Loop to thread, under the mutex. */
    bool failed, stopped, succeeded, aborted, quit, closed;
    char event_message[1024];

    /* Thread to loop, under the mutex: commands in order (a STOP may follow a START
     * before the loop has taken it). */
    struct {
        ddp_rdzv_cmd_t cmd;
        ddp_rdzv_world_t world;
        int exit_code;
        char message[1536];
    } queue[8];
    int head, count;

    /* The thread's own. */
    bool hosting; /* this launcher's loop serves the store */
    bool dynamic; /* c10d: nodes and their ranks found per round */
    char id[320]; /* this launcher, among all: host-pid */
    char beat_key[640];
    char **member_beats; /* the beat keys of this round's nodes */
    int nmembers;
    int prev_rank;    /* this node's rank in the last round, or -1 */
    double next_beat; /* when this launcher's next heartbeat is due */
    ddp_store_client_t *client;
    char host[256];
    char prefix[512]; /* ddp-launch/rdzv/<run id>/ */
};

/* Commands, from the thread. */

static void command(ddp_rdzv_t *r, ddp_rdzv_cmd_t cmd, const ddp_rdzv_world_t *world, int exit_code,
                    const char *fmt, ...)
{
    pthread_mutex_lock(&r->mutex);
    /* The thread sends at most START, STOP and FINISH a round; a full queue keeps the
     * last slot for the newest (a FINISH supersedes what is left). */
    int n = sizeof r->queue / sizeof r->queue[0];
    if (r->count == n)
        r->count--;
    int at = (r->head + r->count++) % n;
    r->queue[at].cmd = cmd;
    if (world != NULL)
        r->queue[at].world = *world;
    r->queue[at].exit_code = exit_code;
    r->queue[at].message[0] = '\0';
    if (fmt != NULL) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(r->queue[at].message, sizeof r->queue[at].message, fmt, ap);
        va_end(ap);
    }
    if (!r->closed)
        uv_async_send(&r->async);
    pthread_mutex_unlock(&r->mutex);
}

static bool quitting(ddp_rdzv_t *r)
{
    pthread_mutex_lock(&r->mutex);
    bool quit = r->quit;
    pthread_mutex_unlock(&r->mutex);
    return quit;
}

/* Sleeps up to `seconds`, or until the loop posts something. */
static void nap(ddp_rdzv_t *r, double seconds)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    long ns = until.tv_nsec + (long)(seconds * 1e9);
    until.tv_sec += ns / 1000000000L;
    until.tv_nsec = ns % 1000000000L;
    pthread_mutex_lock(&r->mutex);
    if (!r->quit)
        pthread_cond_timedwait(&r->wake, &r->mutex, &until);
    pthread_mutex_unlock(&r->mutex);
}

static void key_of(const ddp_rdzv_t *r, char *key, size_t cap, const char *fmt, ...)
{
    va_list ap;
    size_t n = (size_t)snprintf(key, cap, "%s", r->prefix);
    va_start(ap, fmt);
    vsnprintf(key + n, cap > n ? cap - n : 0, fmt, ap);
    va_end(ap);
}

void ddp_rdzv_cleared_key(const ddp_launch_config_t *cfg, int round, char *key, size_t cap)
{
    snprintf(key, cap, "ddp-launch/rdzv/%s/%d/cleared", cfg->run_id, round);
}

/* What the last store call did wrong, for messages. */
static const char *store_error(const ddp_rdzv_t *r)
{
    return ddp_store_client_error(r->client);
}

/* Ends the job on every node: the abort key, read by the others. Best effort. */
static void abort_job(ddp_rdzv_t *r, const char *why)
{
    char key[640], value[1536];
    int n = snprintf(value, sizeof value, "node %d (%s): %s", r->cfg->node_rank, r->host, why);
    key_of(r, key, sizeof key, "abort");
    if (r->client == NULL || ddp_store_client_set(r->client, key, value, (size_t)n) != 0)
        return;
    /* Node 0's store goes with it: leave the others a moment to read why. */
    if (r->hosting)
        nap(r, 1.0);
}

/* Whether another node aborted the job; its message into why. */
static bool aborted_elsewhere(ddp_rdzv_t *r, ddp_buf_t *why)
{
    char key[640];
    key_of(r, key, sizeof key, "abort");
    const char *keys[] = {key};
    bool there = false;
    ddp_buf_t value = DDP_BUF_INIT;
    if (ddp_store_client_check(r->client, keys, 1, &there) != 0 || !there)
        return false;
    if (ddp_store_client_get(r->client, key, &value) == 0)
        ddp_buf_printf(why, "the job was ended by %s", ddp_buf_str(&value));
    ddp_buf_free(&value);
    /* Node 0's store goes with it: leave the others a moment to read why. */
    if (r->hosting)
        nap(r, 1.0);
    return true;
}

/* Whether a wait is to be said now: `*next` starts NOTE_FIRST s after the wait began,
 * and moves on NOTE_EVERY s each time it is due; never at or past the deadline. */
static bool note_due(double *next, double now, double deadline)
{
    if (now < *next || now >= deadline)
        return false;
    *next = now + NOTE_EVERY;
    return true;
}

static int connect_store(ddp_rdzv_t *r, double deadline, ddp_buf_t *why)
{
    const ddp_launch_config_t *cfg = r->cfg;
    ddp_store_client_options_t options = DDP_STORE_CLIENT_OPTIONS_DEFAULT;
    options.timeout = cfg->rdzv_conf.read_timeout; /* each store call's deadline */
    double started = ddp_clock_mono(), next_note = started + NOTE_FIRST;
    while (!quitting(r)) {
        double now = ddp_clock_mono(), left = deadline - now;
        options.connect_timeout = left < 1 ? (left > 0 ? left : 0.01) : 1;
        ddp_buf_clear(why);
        int err =
            ddp_store_client_connect(cfg->master_addr, cfg->master_port, &options, &r->client, why);
        if (err == 0)
            return 0;
        now = ddp_clock_mono();
        /* Waiting is normal while the hosting launcher starts; a long wait says why. */
        if (note_due(&next_note, now, deadline))
            ddp_log_info(r->log,
                         "still waiting for the rendezvous store at %s:%d after %.0f s (%s); "
                         "giving up in %.0f s (--rdzv-conf timeout)",
                         cfg->master_addr, cfg->master_port, now - started, ddp_buf_str(why),
                         deadline - now);
        if (now >= deadline) {
            ddp_buf_t detail = DDP_BUF_INIT;
            ddp_buf_puts(&detail, ddp_buf_str(why));
            ddp_buf_clear(why);
            ddp_buf_printf(why,
                           "node 0's rendezvous store at %s:%d could not be reached within %g s "
                           "(--rdzv-conf timeout): %s",
                           cfg->master_addr, cfg->master_port, cfg->rdzv_conf.timeout,
                           ddp_buf_str(&detail));
            ddp_buf_free(&detail);
            return DDP_ETIMEOUT;
        }
    }
    return DDP_ECLOSED;
}

/* This launcher's heartbeat, when due: beat/<node rank> counts up every
 * keep_alive_interval while the thread lives. */
static int beat(ddp_rdzv_t *r)
{
    double now = ddp_clock_mono();
    int64_t ignored;
    if (now < r->next_beat)
        return 0;
    r->next_beat = now + r->cfg->rdzv_conf.keep_alive_interval;
    return ddp_store_client_add(r->client, r->beat_key, 1, &ignored);
}

/* The other nodes' heartbeats as last seen, and when each last moved. */
typedef struct {
    int n;
    char **keys;
    ddp_buf_t *values;
    int64_t *seen;
    double *moved, next_check;
} liveness_t;

static void liveness_free(liveness_t *l)
{
    for (int i = 0; i < l->n; i++) {
        if (l->keys != NULL)
            free(l->keys[i]);
        if (l->values != NULL)
            ddp_buf_free(&l->values[i]);
    }
    free(l->keys);
    free(l->values);
    free(l->seen);
    free(l->moved);
}

static int liveness_init(ddp_rdzv_t *r, liveness_t *l)
{
    int n = r->nmembers;
    double now = ddp_clock_mono();
    *l = (liveness_t){.n = n, .next_check = now};
    l->keys = calloc((size_t)n, sizeof *l->keys);
    l->values = calloc((size_t)n, sizeof *l->values);
    l->seen = calloc((size_t)n, sizeof *l->seen);
    l->moved = calloc((size_t)n, sizeof *l->moved);
    if (l->keys == NULL || l->values == NULL || l->seen == NULL || l->moved == NULL)
        return -ENOMEM;
    for (int i = 0; i < n; i++) {
        if ((l->keys[i] = strdup(r->member_beats[i])) == NULL)
            return -ENOMEM;
        l->seen[i] = -1;
        l->moved[i] = now; /* each node has the whole timeout from the round's start */
    }
    return 0;
}

/* Beats, and once an interval reads the others' beats: *lost is the first node whose
 * heartbeat has not moved for keep_alive_max_attempt intervals, else -1. */
static int liveness_check(ddp_rdzv_t *r, liveness_t *l, int *lost)
{
    const ddp_rdzv_conf_t *conf = &r->cfg->rdzv_conf;
    double now = ddp_clock_mono();
    int err = beat(r);
    *lost = -1;
    if (err || now < l->next_check)
        return err;
    l->next_check = now + conf->keep_alive_interval / 2;
    if ((err = ddp_store_client_multi_get(r->client, (const char *const *)l->keys, (size_t)l->n,
                                          l->values)) != 0)
        return err;
    for (int i = 0; i < l->n; i++) {
        int64_t count = strtoll(ddp_buf_str(&l->values[i]), NULL, 10);
        if (count != l->seen[i]) {
            l->seen[i] = count;
            l->moved[i] = now;
        } else if (strcmp(l->keys[i], r->beat_key) != 0 && *lost < 0 &&
                   now - l->moved[i] > conf->keep_alive_interval * conf->keep_alive_max_attempt) {
            *lost = i;
        }
    }
    return 0;
}

/* This round's nodes' beat keys, in node rank order (the thread's copy). */
static int set_members(ddp_rdzv_t *r, int n, const char *const *ids)
{
    char key[640];
    for (int i = 0; i < r->nmembers; i++)
        free(r->member_beats[i]);
    free(r->member_beats);
    r->nmembers = 0;
    if ((r->member_beats = calloc((size_t)n, sizeof *r->member_beats)) == NULL)
        return -ENOMEM;
    for (int i = 0; i < n; i++) {
        if (ids != NULL)
            key_of(r, key, sizeof key, "beat/%s", ids[i]);
        else
            key_of(r, key, sizeof key, "beat/%d", i);
        if ((r->member_beats[i] = strdup(key)) == NULL)
            return -ENOMEM;
        r->nmembers = i + 1;
    }
    return 0;
}

/* Parses "nnodes nproc max_restarts host" (host: at most 255 characters). */
static bool parse_node(const char *text, int *nnodes, int *nproc, int *max_restarts, char host[256],
                       char id[320])
{
    return sscanf(text, "%d %d %d %255s %319s", nnodes, nproc, max_restarts, host, id) == 5 &&
           *nnodes > 0 && *nproc > 0 && *max_restarts >= 0;
}

/* The newest round anyone has joined (ADD on "open"): a launcher that comes back, or
 * comes late, goes there rather than to round 0. */
static int newest_round(ddp_rdzv_t *r, int *round)
{
    char key[640];
    int64_t open;
    int err;
    key_of(r, key, sizeof key, "open");
    if ((err = ddp_store_client_add(r->client, key, 0, &open)) != 0)
        return err;
    if (open > *round)
        *round = (int)open;
    else if (open < *round)
        err = ddp_store_client_add(r->client, key, *round - open, &open);
    return err;
}

/* Node rank `me` of the round is claimed by launcher `owner`, not this one: a duplicate
 * --node-rank if the owner is alive (its heartbeat moves), or this node's previous
 * launcher, lost, if it stays still for the liveness timeout. 1: the owner is gone,
 * 0: alive (a duplicate), or an error. */
static int owner_gone(ddp_rdzv_t *r, const char *owner)
{
    const ddp_rdzv_conf_t *conf = &r->cfg->rdzv_conf;
    char key[640];
    ddp_buf_t value = DDP_BUF_INIT;
    int64_t first = -1;
    double until = ddp_clock_mono() + conf->keep_alive_interval * conf->keep_alive_max_attempt;
    key_of(r, key, sizeof key, "beat/%s", owner);
    const char *keys[] = {key};
    int err = 0;
    while (err == 0 && !quitting(r) && ddp_clock_mono() < until) {
        if ((err = ddp_store_client_multi_get(r->client, keys, 1, &value)) != 0)
            break;
        int64_t count = strtoll(ddp_buf_str(&value), NULL, 10);
        if (first >= 0 && count != first) {
            ddp_buf_free(&value);
            return 0;
        }
        first = count;
        if ((err = beat(r)) == 0)
            nap(r, SLICE);
    }
    ddp_buf_free(&value);
    return err ? err : quitting(r) ? DDP_ECLOSED : 1;
}

/* Round `round`: every node arrives (within the rendezvous timeout) with the same
 * --nnodes and --max-restarts, each node rank once; this node's share of the world. */
/* Appends the node ranks whose entry (keys[i]) is not in the store yet: "1, 3". */
static void missing_nodes(ddp_rdzv_t *r, char **keys, int nnodes, ddp_buf_t *out)
{
    size_t before = out->len;
    for (int i = 0; i < nnodes; i++) {
        const char *one[] = {keys[i]};
        bool here = false;
        if (ddp_store_client_check(r->client, one, 1, &here) == 0 && !here)
            ddp_buf_printf(out, "%s%d", out->len > before ? ", " : "", i);
    }
    if (out->len == before)
        ddp_buf_puts(out, "?");
}

static int join(ddp_rdzv_t *r, int *roundp, ddp_rdzv_world_t *world, ddp_buf_t *why)
{
    const ddp_launch_config_t *cfg = r->cfg;
    int nnodes = cfg->nnodes_max, me = cfg->node_rank, err, round = *roundp;
    char key[640], value[512];
    /* This node's rank in the newest round, once: a live second claimant is a duplicate
     * --node-rank; a silent one is this node's lost launcher, which the others leave
     * behind in the next round, where this one then goes. */
    for (;;) {
        ddp_buf_t owner = DDP_BUF_INIT;
        if ((err = newest_round(r, roundp)) != 0)
            goto store_failed;
        round = *roundp;
        key_of(r, key, sizeof key, "%d/claim/%d", round, me);
        err = ddp_store_client_compare_set(r->client, key, "", 0, r->id, strlen(r->id), &owner);
        if (err == 0 && strcmp(ddp_buf_str(&owner), r->id) != 0) {
            int gone = owner_gone(r, ddp_buf_str(&owner));
            if (gone == 0) {
                ddp_buf_printf(why,
                               "node rank %d is taken: another launcher (%s) joined with "
                               "--node-rank=%d (every node needs its own, 0 to %d)",
                               me, ddp_buf_str(&owner), me, nnodes - 1);
                ddp_buf_free(&owner);
                abort_job(r, ddp_buf_str(why));
                return DDP_EUSAGE;
            }
            ddp_buf_free(&owner);
            if (gone < 0) {
                err = gone;
                goto store_failed;
            }
            ddp_log_info(r->log,
                         "round %d: node rank %d was held by a launcher that is gone: joining "
                         "the next round",
                         round, me);
            (*roundp)++;
            continue;
        }
        ddp_buf_free(&owner);
        if (err)
            goto store_failed;
        break;
    }
    int n = snprintf(value, sizeof value, "%d %d %d %s %s", nnodes, cfg->nproc_per_node,
                     cfg->max_restarts, r->host, r->id);
    key_of(r, key, sizeof key, "%d/node/%d", round, me);
    if ((err = ddp_store_client_set(r->client, key, value, (size_t)n)) != 0)
        goto store_failed;

    /* Every node, or the timeout. */
    char **keys = calloc((size_t)nnodes, sizeof *keys);
    ddp_buf_t *values = calloc((size_t)nnodes, sizeof *values);
    err = keys && values ? 0 : -ENOMEM;
    for (int i = 0; i < nnodes && err == 0; i++) {
        key_of(r, key, sizeof key, "%d/node/%d", round, i);
        if ((keys[i] = strdup(key)) == NULL)
            err = -ENOMEM;
    }
    double started = ddp_clock_mono(), deadline = started + cfg->rdzv_conf.timeout;
    double next_note = started + NOTE_FIRST;
    while (err == 0) {
        if (quitting(r)) {
            err = DDP_ECLOSED;
            break;
        }
        err = ddp_store_client_wait(r->client, (const char *const *)keys, (size_t)nnodes, SLICE);
        if (err != DDP_ETIMEOUT || (err = beat(r)) != 0)
            break;
        if (aborted_elsewhere(r, why)) {
            err = DDP_EUSAGE;
            break;
        }
        double now = ddp_clock_mono();
        bool timed_out = now >= deadline;
        if (!timed_out && !note_due(&next_note, now, deadline))
            continue;
        /* Name the nodes not here: while waiting now and then, and at the end. */
        ddp_buf_t missing = DDP_BUF_INIT;
        missing_nodes(r, keys, nnodes, &missing);
        if (!timed_out) {
            ddp_log_info(r->log,
                         "round %d: waiting for node(s) %s to join (%.0f s so far; giving up in "
                         "%.0f s, --rdzv-conf timeout)",
                         round, ddp_buf_str(&missing), now - started, deadline - now);
            ddp_buf_free(&missing);
            continue;
        }
        ddp_buf_printf(why,
                       "round %d: node(s) %s did not join within %g s (--rdzv-conf timeout); "
                       "the store is at %s:%d",
                       round, ddp_buf_str(&missing), cfg->rdzv_conf.timeout, cfg->master_addr,
                       cfg->master_port);
        ddp_buf_free(&missing);
        abort_job(r, ddp_buf_str(why));
        err = DDP_ETIMEOUT;
    }
    if (err == 0)
        err = ddp_store_client_multi_get(r->client, (const char *const *)keys, (size_t)nnodes,
                                         values);
    /* The same job everywhere; this node's ranks follow the nodes before it. */
    if (err == 0) {
        *world = (ddp_rdzv_world_t){.round = round, .nnodes = nnodes};
        char(*ids)[320] = calloc((size_t)nnodes, sizeof *ids);
        const char **id_list = calloc((size_t)nnodes, sizeof *id_list);
        if (ids == NULL || id_list == NULL)
            err = -ENOMEM;
        for (int i = 0; i < nnodes && err == 0; i++) {
            int their_nnodes, nproc, max_restarts;
            char host[256];
            id_list[i] = ids[i];
            if (!parse_node(ddp_buf_str(&values[i]), &their_nnodes, &nproc, &max_restarts, host,
                            ids[i])) {
                ddp_buf_printf(why, "node %d published a malformed entry in the store: '%.100s'", i,
                               ddp_buf_str(&values[i]));
                err = DDP_EPROTO;
            } else if (their_nnodes != nnodes) {
                ddp_buf_printf(why, "node %d (%s) runs with --nnodes=%d, node %d (%s) with %d", i,
                               host, their_nnodes, me, r->host, nnodes);
                err = DDP_EUSAGE;
            } else if (max_restarts != cfg->max_restarts) {
                ddp_buf_printf(why,
                               "node %d (%s) runs with --max-restarts=%d, node %d (%s) with %d: "
                               "the restart budget is the job's",
                               i, host, max_restarts, me, r->host, cfg->max_restarts);
                err = DDP_EUSAGE;
            }
            if (i < me)
                world->rank_offset += nproc;
            world->world_size += nproc;
        }
        world->node_rank = me;
        world->restarts = round;
        if (err == 0)
            err = set_members(r, nnodes, id_list);
        free(ids);
        free(id_list);
        if (err)
            abort_job(r, ddp_buf_str(why));
    }
    for (int i = 0; keys != NULL && i < nnodes; i++)
        free(keys[i]);
    for (int i = 0; values != NULL && i < nnodes; i++)
        ddp_buf_free(&values[i]);
    free(keys);
    free(values);
    if (err && why->len == 0)
        goto store_failed;
    return err;
store_failed:
    ddp_buf_printf(why, "round %d: %s", round, store_error(r));
    return err;
}

bool ddp_rdzv_dynamic(const ddp_launch_config_t *cfg)
{
    return cfg->nnodes_max > 1 &&
           (cfg->rdzv_backend == DDP_RDZV_C10D || cfg->nnodes_min != cfg->nnodes_max);
}

typedef struct {
    int arrival, nproc, prev_rank, max_restarts;
    char id[320];
} member_t;

/* Orders the round's nodes: last round's ranks first, in that order, then newcomers in
 * arrival order. */
static int member_order(const void *a, const void *b)
{
    const member_t *x = a, *y = b;
    int px = x->prev_rank >= 0 ? x->prev_rank : 1 << 30,
        py = y->prev_rank >= 0 ? y->prev_rank : 1 << 30;
    if (px != py)
        return px < py ? -1 : 1;
    return x->arrival - y->arrival;
}

/* Dynamic round: arrive, wait for the close (MAX nodes, or MIN for last_call_timeout),
 * then this node's rank and share. A node that arrives after the close moves on to the
 * next round (*round grows) and waits there for the running nodes to re-form. */
static int join_dynamic(ddp_rdzv_t *r, int *round, ddp_rdzv_world_t *world, ddp_buf_t *why)
{
    const ddp_launch_config_t *cfg = r->cfg;
    const ddp_rdzv_conf_t *conf = &cfg->rdzv_conf;
    double started = ddp_clock_mono(), deadline = started + conf->join_timeout;
    double next_note = started + NOTE_FIRST;
    char key[640], closed_key[640], value[512];
    int err;
    for (;;) {
        int64_t arrivals;
        /* The newest round is where to go (a restarted launcher comes back to it). */
        if ((err = newest_round(r, round)) != 0)
            goto store_failed;
        key_of(r, key, sizeof key, "%d/join", *round);
        if ((err = ddp_store_client_add(r->client, key, 1, &arrivals)) != 0)
            goto store_failed;
        int me = (int)arrivals - 1;
        int n = snprintf(value, sizeof value, "%d %d %d %s", cfg->nproc_per_node, r->prev_rank,
                         cfg->max_restarts, r->id);
        key_of(r, key, sizeof key, "%d/member/%d", *round, me);
        if ((err = ddp_store_client_set(r->client, key, value, (size_t)n)) != 0)
            goto store_failed;
        key_of(r, closed_key, sizeof closed_key, "%d/closed", *round);
        double min_since = -1;
        int64_t size = -1;
        while (size < 0) {
            const char *keys[] = {closed_key};
            if (quitting(r))
                return DDP_ECLOSED;
            err = ddp_store_client_wait(r->client, keys, 1, SLICE);
            if (err == 0) {
                ddp_buf_t got = DDP_BUF_INIT;
                if ((err = ddp_store_client_get(r->client, closed_key, &got)) == 0)
                    size = strtoll(ddp_buf_str(&got), NULL, 10);
                ddp_buf_free(&got);
                if (err)
                    goto store_failed;
                break;
            }
            if (err != DDP_ETIMEOUT || (err = beat(r)) != 0)
                goto store_failed;
            key_of(r, key, sizeof key, "%d/join", *round);
            int64_t count;
            if ((err = ddp_store_client_add(r->client, key, 0, &count)) != 0)
                goto store_failed;
            double now = ddp_clock_mono();
            if (count >= cfg->nnodes_min && min_since < 0)
                min_since = now;
            /* Full, or enough for long enough: close it at this count (the first
             * closer's count stands). */
            if (count >= cfg->nnodes_max ||
                (min_since >= 0 && now - min_since >= conf->last_call_timeout)) {
                char text[32];
                int len = snprintf(text, sizeof text, "%lld",
                                   (long long)(count < cfg->nnodes_max ? count : cfg->nnodes_max));
                ddp_buf_t current = DDP_BUF_INIT;
                err = ddp_store_client_compare_set(r->client, closed_key, "", 0, text, (size_t)len,
                                                   &current);
                ddp_buf_free(&current);
                if (err)
                    goto store_failed;
                continue; /* read it back above */
            }
            if (aborted_elsewhere(r, why))
                return DDP_EUSAGE;
            key_of(r, key, sizeof key, "finished");
            const char *done[] = {key};
            bool finished = false;
            if ((err = ddp_store_client_check(r->client, done, 1, &finished)) != 0)
                goto store_failed;
            if (finished) {
                ddp_buf_printf(why, "the job finished before this node could join it");
                return DDP_ECLOSED;
            }
            if (count < cfg->nnodes_min && note_due(&next_note, now, deadline))
                ddp_log_info(r->log,
                             "round %d: %lld node(s) here, waiting for --nnodes=%d:%d (%.0f s so "
                             "far; giving up in %.0f s, --rdzv-conf join_timeout)",
                             *round, (long long)count, cfg->nnodes_min, cfg->nnodes_max,
                             now - started, deadline - now);
            if (now >= deadline) {
                ddp_buf_printf(why,
                               "round %d: %lld node(s) joined within %g s (--rdzv-conf "
                               "join_timeout), fewer than --nnodes=%d:%d asks",
                               *round, (long long)count, conf->join_timeout, cfg->nnodes_min,
                               cfg->nnodes_max);
                return DDP_ETIMEOUT;
            }
        }
        if (me >= size) {
            /* Late: the next round, which the running nodes open for us. */
            ddp_log_info(r->log,
                         "round %d closed with %lld node(s) before this one: waiting "
                         "for the job to re-form in round %d",
                         *round, (long long)size, *round + 1);
            (*round)++;
            continue;
        }
        /* Every member's entry, then the order. */
        member_t *members = calloc((size_t)size, sizeof *members);
        const char **ids = calloc((size_t)size, sizeof *ids);
        err = members != NULL && ids != NULL ? 0 : -ENOMEM;
        for (int i = 0; i < size && err == 0; i++) {
            ddp_buf_t got = DDP_BUF_INIT;
            key_of(r, key, sizeof key, "%d/member/%d", *round, i);
            err = ddp_store_client_get(r->client, key, &got);
            members[i].arrival = i;
            if (err == 0 &&
                sscanf(ddp_buf_str(&got), "%d %d %d %319s", &members[i].nproc,
                       &members[i].prev_rank, &members[i].max_restarts, members[i].id) != 4) {
                ddp_buf_printf(why, "round %d: node %d's entry in the store is malformed", *round,
                               i);
                err = DDP_EPROTO;
            } else if (err == 0 && members[i].max_restarts != cfg->max_restarts) {
                ddp_buf_printf(why,
                               "launcher %s runs with --max-restarts=%d, this one (%s) with %d: "
                               "the restart budget is the job's",
                               members[i].id, members[i].max_restarts, r->id, cfg->max_restarts);
                err = DDP_EUSAGE;
            }
            ddp_buf_free(&got);
        }
        if (err == 0) {
            qsort(members, (size_t)size, sizeof *members, member_order);
            *world = (ddp_rdzv_world_t){.round = *round, .nnodes = (int)size};
            for (int i = 0; i < size; i++) {
                ids[i] = members[i].id;
                if (members[i].arrival == me) {
                    world->node_rank = i;
                    world->rank_offset = world->world_size;
                }
                world->world_size += members[i].nproc;
            }
            err = set_members(r, (int)size, ids);
            r->prev_rank = world->node_rank;
            /* The job's failures so far, as whoever saw the last one counted them. */
            ddp_buf_t count = DDP_BUF_INIT;
            const char *restart_keys[1] = {key};
            bool there = false;
            key_of(r, key, sizeof key, "%d/restarts", *round);
            if (err == 0 &&
                (err = ddp_store_client_check(r->client, restart_keys, 1, &there)) == 0 && there &&
                (err = ddp_store_client_get(r->client, key, &count)) == 0)
                world->restarts = (int)strtol(ddp_buf_str(&count), NULL, 10);
            ddp_buf_free(&count);
        }
        if (err && why->len == 0)
            ddp_buf_printf(why, "round %d: %s", *round,
                           err == -ENOMEM ? "out of memory" : store_error(r));
        if (err == DDP_EUSAGE)
            abort_job(r, ddp_buf_str(why));
        free(members);
        free(ids);
        return err;
    }
store_failed:
    ddp_buf_printf(why, "round %d: %s", *round, store_error(r));
    return err;
}

/* Waits for key to exist (node 0 sets it), the abort key aside. */
static int await_key(ddp_rdzv_t *r, const char *key, double timeout, ddp_buf_t *why)
{
    double deadline = ddp_clock_mono() + timeout;
    const char *keys[] = {key};
    for (;;) {
        if (quitting(r))
            return DDP_ECLOSED;
        int err = ddp_store_client_wait(r->client, keys, 1, SLICE);
        if (err == 0)
            return 0;
        if (err == DDP_ETIMEOUT)
            err = beat(r);
        if (err) {
            ddp_buf_printf(why, "%s", store_error(r));
            return err;
        }
        if (aborted_elsewhere(r, why))
            return DDP_EUSAGE;
        if (ddp_clock_mono() >= deadline) {
            ddp_buf_printf(why, "node 0 did not open the round within %g s", timeout);
            return DDP_ETIMEOUT;
        }
    }
}

/* ROUND_REFORM: the nodes changed (c10d): the next round, no restart spent. */
typedef enum { ROUND_SUCCEEDED, ROUND_FAILED, ROUND_REFORM, ROUND_ENDED } outcome_t;

/* The store stopped answering mid-job: this node ends (status 5). */
static void store_lost(ddp_rdzv_t *r)
{
    command(r, DDP_RDZV_CMD_FINISH, NULL, DDP_EXIT_RDZV_FAILED,
            "lost the rendezvous store at %s:%d: %s", r->cfg->master_addr, r->cfg->master_port,
            store_error(r));
}

/* Posts the round's failure (the first one names it; later ones keep it); *failure
 * receives the one that stands. */
static int post_failure(ddp_rdzv_t *r, const char *failed_key, const char *value,
                        ddp_buf_t *failure)
{
    ddp_buf_t current = DDP_BUF_INIT;
    int err =
        ddp_store_client_compare_set(r->client, failed_key, "", 0, value, strlen(value), &current);
    ddp_buf_clear(failure);
    ddp_buf_puts(failure, err == 0 ? ddp_buf_str(&current) : value);
    ddp_buf_free(&current);
    return err;
}

/* The round runs: relays failures both ways, and watches the other nodes' heartbeats,
 * until the local workers have all ended. */
static outcome_t watch_round(ddp_rdzv_t *r, int round, ddp_buf_t *failure, liveness_t *live)
{
    const ddp_launch_config_t *cfg = r->cfg;
    char failed_key[640], done_key[640], value[1536];
    char join_key[640], reform_key[640];
    bool posted_failure = false, told_stop = false, done_posted = false, reform = false;
    key_of(r, failed_key, sizeof failed_key, "%d/failed", round);
    key_of(r, done_key, sizeof done_key, "%d/done", round);
    key_of(r, join_key, sizeof join_key, "%d/join", round);
    key_of(r, reform_key, sizeof reform_key, "%d/reform", round);
    for (;;) {
        pthread_mutex_lock(&r->mutex);
        bool quit = r->quit, failed = r->failed, stopped = r->stopped, succeeded = r->succeeded,
             aborted = r->aborted;
        char message[sizeof r->event_message];
        memcpy(message, r->event_message, sizeof message);
        r->failed = r->stopped = r->succeeded = false;
        pthread_mutex_unlock(&r->mutex);
        if (aborted) {
            abort_job(r, message);
            return ROUND_ENDED;
        }
        if (quit)
            return ROUND_ENDED;
        int lost = -1, err = liveness_check(r, live, &lost);
        if (err == 0 && failed && !posted_failure) {
            snprintf(value, sizeof value, "node %d (%s): %s", cfg->node_rank, r->host, message);
            err = post_failure(r, failed_key, value, failure);
            posted_failure = true;
        }
        if (err == 0 && r->dynamic && !done_posted && !posted_failure && !told_stop &&
            r->nmembers < cfg->nnodes_max) {
            /* A node arrived after the close: the job re-forms with it. */
            int64_t arrivals = 0;
            err = ddp_store_client_add(r->client, join_key, 0, &arrivals);
            if (err == 0 && arrivals > r->nmembers) {
                ddp_buf_clear(failure);
                ddp_buf_printf(failure, "%lld node(s) waiting to join",
                               (long long)(arrivals - r->nmembers));
                command(r, DDP_RDZV_CMD_STOP, NULL, 0, "%s", ddp_buf_str(failure));
                told_stop = reform = true;
            }
        }
        if (err == 0 && lost >= 0 && !posted_failure && !told_stop) {
            /* A node gone silent: its launcher died, or its network went away. The
             * workers stop as for a failure there (c10d: the others re-form). */
            reform = r->dynamic;
            snprintf(value, sizeof value,
                     "node %d's launcher stopped answering: no heartbeat for %g s "
                     "(--rdzv-conf keep_alive_interval x keep_alive_max_attempt)",
                     lost,
                     cfg->rdzv_conf.keep_alive_interval * cfg->rdzv_conf.keep_alive_max_attempt);
            ddp_log_error(r->log, "%s", value);
            if (r->dynamic) /* before the failure, so that whoever reads it sees this */
                err = ddp_store_client_set(r->client, reform_key, "1", 1);
            err = err ? err : post_failure(r, failed_key, value, failure);
            posted_failure = true;
            if (done_posted)
                return reform ? ROUND_REFORM : ROUND_FAILED;
            command(r, DDP_RDZV_CMD_STOP, NULL, 0, "%s", ddp_buf_str(failure));
            told_stop = true;
        }
        if (stopped)
            return reform ? ROUND_REFORM : ROUND_FAILED;
        if (err == 0 && succeeded && !done_posted) {
            int64_t ignored;
            err = ddp_store_client_add(r->client, done_key, 1, &ignored);
            done_posted = true;
        }
        if (err == 0 && done_posted) {
            int64_t done = 0;
            err = ddp_store_client_add(r->client, done_key, 0, &done);
            if (err == 0 && done >= r->nmembers)
                return ROUND_SUCCEEDED;
        }
        /* Another node's failure: stop ours, or, when they are done already, go on to
         * the next round as they do. */
        if (err == 0 && !posted_failure && !told_stop) {
            const char *keys[] = {failed_key};
            err = ddp_store_client_wait(r->client, keys, 1, SLICE);
            if (err == 0) {
                ddp_buf_t got = DDP_BUF_INIT;
                if ((err = ddp_store_client_get(r->client, failed_key, &got)) == 0) {
                    ddp_buf_clear(failure);
                    ddp_buf_puts(failure, ddp_buf_str(&got));
                }
                ddp_buf_free(&got);
                /* c10d: a lost node is not a failure of the job: re-form. */
                const char *reform_keys[] = {reform_key};
                if (err == 0 && r->dynamic)
                    err = ddp_store_client_check(r->client, reform_keys, 1, &reform);
                if (done_posted)
                    return reform ? ROUND_REFORM : ROUND_FAILED;
                command(r, DDP_RDZV_CMD_STOP, NULL, 0, "%s", ddp_buf_str(failure));
                told_stop = true;
            } else if (err == DDP_ETIMEOUT) {
                err = 0;
            }
        } else if (err == 0) {
            nap(r, SLICE);
        }
        ddp_buf_t why = DDP_BUF_INIT;
        if (err == 0 && aborted_elsewhere(r, &why)) {
            command(r, DDP_RDZV_CMD_FINISH, NULL, DDP_EXIT_RDZV_FAILED, "%s", ddp_buf_str(&why));
            ddp_buf_free(&why);
            return ROUND_ENDED;
        }
        ddp_buf_free(&why);
        if (err) {
            store_lost(r);
            return ROUND_ENDED;
        }
    }
}

static outcome_t watch(ddp_rdzv_t *r, int round, ddp_buf_t *failure)
{
    liveness_t live;
    outcome_t outcome = ROUND_ENDED;
    if (liveness_init(r, &live) == 0)
        outcome = watch_round(r, round, failure, &live);
    else
        command(r, DDP_RDZV_CMD_FINISH, NULL, DDP_EXIT_LAUNCH_FAILED, "out of memory");
    liveness_free(&live);
    return outcome;
}

/* After success: every node says it is leaving; the host, whose store the others use,
 * waits for them (up to close_timeout) before it goes. */
static void exit_barrier(ddp_rdzv_t *r)
{
    char key[640];
    int64_t gone = 0;
    key_of(r, key, sizeof key, "exit");
    if (r->dynamic) {
        char finished[640];
        key_of(r, finished, sizeof finished, "finished");
        (void)ddp_store_client_set(r->client, finished, "1", 1);
    }
    if (ddp_store_client_add(r->client, key, 1, &gone) != 0 || !r->hosting)
        return;
    double deadline = ddp_clock_mono() + r->cfg->rdzv_conf.close_timeout;
    while (gone < r->nmembers && ddp_clock_mono() < deadline && !quitting(r)) {
        nap(r, 0.02);
        if (ddp_store_client_add(r->client, key, 0, &gone) != 0)
            return;
    }
}

/* c10d: round `round` follows a failure: the job's restart count there is `restarts`
 * (the first node to say so sets it; a newcomer reads it when it joins). */
static int count_restart(ddp_rdzv_t *r, int round, int restarts)
{
    char key[640], text[32];
    ddp_buf_t current = DDP_BUF_INIT;
    int n = snprintf(text, sizeof text, "%d", restarts);
    key_of(r, key, sizeof key, "%d/restarts", round);
    int err = ddp_store_client_compare_set(r->client, key, "", 0, text, (size_t)n, &current);
    ddp_buf_free(&current);
    return err;
}

static void *run(void *arg)
{
    ddp_rdzv_t *r = arg;
    const ddp_launch_config_t *cfg = r->cfg;
    ddp_buf_t why = DDP_BUF_INIT, failure = DDP_BUF_INIT;
    double timeout = cfg->rdzv_conf.timeout;
    if (connect_store(r, ddp_clock_mono() + timeout, &why) != 0) {
        command(r, DDP_RDZV_CMD_FINISH, NULL, DDP_EXIT_RDZV_FAILED, "%s", ddp_buf_str(&why));
        goto out;
    }
    for (int round = 0;; round++) {
        ddp_rdzv_world_t world;
        char key[640];
        ddp_buf_clear(&why);
        ddp_log_debug(r->log, "joining round %d of the rendezvous at %s:%d", round,
                      cfg->master_addr, cfg->master_port);
        int err =
            r->dynamic ? join_dynamic(r, &round, &world, &why) : join(r, &round, &world, &why);
        if (err == DDP_ECLOSED && !quitting(r) && why.len > 0) {
            /* A latecomer to a job that has finished. */
            ddp_log_warn(r->log, "%s", ddp_buf_str(&why));
            command(r, DDP_RDZV_CMD_FINISH, NULL, DDP_EXIT_OK, NULL);
            goto out;
        }
        /* The host clears the last round's keys on its loop when it starts the round;
         * the others start after that. */
        if (err == 0 && round > 0 && !r->hosting) {
            ddp_rdzv_cleared_key(cfg, round, key, sizeof key);
            err = await_key(r, key, timeout, &why);
        }
        if (err) {
            if (err != DDP_ECLOSED || !quitting(r))
                command(r, DDP_RDZV_CMD_FINISH, NULL, DDP_EXIT_RDZV_FAILED, "%s",
                        ddp_buf_str(&why));
            goto out;
        }
        command(r, DDP_RDZV_CMD_START, &world, 0, NULL);
        outcome_t outcome = watch(r, round, &failure);
        if (outcome == ROUND_ENDED)
            goto out;
        if (outcome == ROUND_SUCCEEDED) {
            exit_barrier(r);
            command(r, DDP_RDZV_CMD_FINISH, NULL, DDP_EXIT_OK, NULL);
            goto out;
        }
        /* A failure spends a restart; re-forming (c10d: the nodes changed) does not. */
        bool failed = outcome == ROUND_FAILED;
        if (failed && world.restarts >= cfg->max_restarts) {
            command(r, DDP_RDZV_CMD_FINISH, NULL, DDP_EXIT_WORKER_FAILED,
                    "the job failed in round %d, with no restart left (--max-restarts=%d): %s",
                    round, cfg->max_restarts, ddp_buf_str(&failure));
            goto out;
        }
        /* c10d: the next round's restart count, newcomers included. */
        if (r->dynamic && count_restart(r, round + 1, world.restarts + failed) != 0) {
            store_lost(r);
            goto out;
        }
        if (failed)
            ddp_log_warn(r->log, "round %d failed (%s): restarting every node as round %d", round,
                         ddp_buf_str(&failure), round + 1);
        else
            ddp_log_warn(r->log, "round %d: the nodes changed (%s): re-forming the job as round %d",
                         round, ddp_buf_str(&failure), round + 1);
    }
out:
    ddp_buf_free(&why);
    ddp_buf_free(&failure);
    return NULL;
}

static void on_async(uv_async_t *handle)
{
    ddp_rdzv_t *r = handle->data;
    r->on_command(r->ctx);
}

int ddp_rdzv_start(uv_loop_t *loop, const ddp_launch_config_t *cfg, const ddp_log_t *log,
                   bool hosting, void (*on_command)(void *ctx), void *ctx, ddp_rdzv_t **out)
{
    ddp_rdzv_t *r = calloc(1, sizeof *r);
    if (r == NULL)
        return -ENOMEM;
    r->cfg = cfg;
    r->log = log;
    r->hosting = hosting;
    r->dynamic = ddp_rdzv_dynamic(cfg);
    r->prev_rank = -1;
    r->on_command = on_command;
    r->ctx = ctx;
    if (gethostname(r->host, sizeof r->host - 1) != 0)
        strcpy(r->host, "localhost");
    snprintf(r->prefix, sizeof r->prefix, "ddp-launch/rdzv/%s/", cfg->run_id);
    snprintf(r->id, sizeof r->id, "%s-%d", r->host, (int)getpid());
    key_of(r, r->beat_key, sizeof r->beat_key, "beat/%s", r->id);
    pthread_mutex_init(&r->mutex, NULL);
    pthread_cond_init(&r->wake, NULL);
    int err = uv_async_init(loop, &r->async, on_async);
    if (err) {
        free(r);
        return err;
    }
    r->async.data = r;
    if ((err = pthread_create(&r->thread, NULL, run, r)) != 0) {
        r->closed = true;
        uv_close((uv_handle_t *)&r->async, NULL);
        *out = r; /* freed by ddp_rdzv_free after the loop has closed the handle */
        return -err;
    }
    (void)pthread_setname_np(r->thread, "ddp-rdzv");
    r->thread_started = true;
    *out = r;
    return 0;
}

void ddp_rdzv_post(ddp_rdzv_t *r, ddp_rdzv_event_t event, const char *message)
{
    pthread_mutex_lock(&r->mutex);
    switch (event) {
    case DDP_RDZV_EV_FAILED:
        r->failed = true;
        break;
    case DDP_RDZV_EV_STOPPED:
        r->stopped = true;
        break;
    case DDP_RDZV_EV_SUCCEEDED:
        r->succeeded = true;
        break;
    case DDP_RDZV_EV_ABORT:
        r->aborted = true;
        break;
    }
    if (message != NULL)
        snprintf(r->event_message, sizeof r->event_message, "%s", message);
    pthread_cond_signal(&r->wake);
    pthread_mutex_unlock(&r->mutex);
}

ddp_rdzv_cmd_t ddp_rdzv_take(ddp_rdzv_t *r, ddp_rdzv_world_t *world, int *exit_code, char *message,
                             size_t cap)
{
    pthread_mutex_lock(&r->mutex);
    ddp_rdzv_cmd_t cmd = DDP_RDZV_CMD_NONE;
    if (r->count > 0) {
        int at = r->head;
        cmd = r->queue[at].cmd;
        *world = r->queue[at].world;
        *exit_code = r->queue[at].exit_code;
        snprintf(message, cap, "%s", r->queue[at].message);
        r->head = (at + 1) % (int)(sizeof r->queue / sizeof r->queue[0]);
        r->count--;
    }
    pthread_mutex_unlock(&r->mutex);
    return cmd;
}

void ddp_rdzv_close(ddp_rdzv_t *r)
{
    if (r == NULL)
        return;
    pthread_mutex_lock(&r->mutex);
    r->quit = true;
    bool was_closed = r->closed;
    r->closed = true;
    pthread_cond_signal(&r->wake);
    pthread_mutex_unlock(&r->mutex);
    if (!was_closed)
        uv_close((uv_handle_t *)&r->async, NULL);
}

void ddp_rdzv_free(ddp_rdzv_t *r)
{
    if (r == NULL)
        return;
    if (r->thread_started)
        pthread_join(r->thread, NULL);
    ddp_store_client_close(r->client);
    for (int i = 0; i < r->nmembers; i++)
        free(r->member_beats[i]);
    free(r->member_beats);
    pthread_mutex_destroy(&r->mutex);
    pthread_cond_destroy(&r->wake);
    free(r);
}
