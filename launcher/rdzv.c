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

#define SLICE 0.1 /* s: the longest a store call blocks the thread */

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
    if (r->cfg->node_rank == 0)
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
    if (r->cfg->node_rank == 0)
        nap(r, 1.0);
    return true;
}

static int connect_store(ddp_rdzv_t *r, double deadline, ddp_buf_t *why)
{
    const ddp_launch_config_t *cfg = r->cfg;
    ddp_store_client_options_t options = DDP_STORE_CLIENT_OPTIONS_DEFAULT;
    options.timeout = 30;
    while (!quitting(r)) {
        double left = deadline - ddp_clock_mono();
        options.connect_timeout = left < 1 ? (left > 0 ? left : 0.01) : 1;
        ddp_buf_clear(why);
        int err =
            ddp_store_client_connect(cfg->master_addr, cfg->master_port, &options, &r->client, why);
        if (err == 0)
            return 0;
        if (ddp_clock_mono() >= deadline) {
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
    char key[640];
    int64_t ignored;
    if (now < r->next_beat)
        return 0;
    r->next_beat = now + r->cfg->rdzv_conf.keep_alive_interval;
    key_of(r, key, sizeof key, "beat/%d", r->cfg->node_rank);
    return ddp_store_client_add(r->client, key, 1, &ignored);
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
    int n = r->cfg->nnodes_max;
    char key[640];
    double now = ddp_clock_mono();
    *l = (liveness_t){.n = n, .next_check = now};
    l->keys = calloc((size_t)n, sizeof *l->keys);
    l->values = calloc((size_t)n, sizeof *l->values);
    l->seen = calloc((size_t)n, sizeof *l->seen);
    l->moved = calloc((size_t)n, sizeof *l->moved);
    if (l->keys == NULL || l->values == NULL || l->seen == NULL || l->moved == NULL)
        return -ENOMEM;
    for (int i = 0; i < n; i++) {
        key_of(r, key, sizeof key, "beat/%d", i);
        if ((l->keys[i] = strdup(key)) == NULL)
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
        } else if (i != r->cfg->node_rank && *lost < 0 &&
                   now - l->moved[i] > conf->keep_alive_interval * conf->keep_alive_max_attempt) {
            *lost = i;
        }
    }
    return 0;
}

/* Parses "nnodes nproc max_restarts host" (host: at most 255 characters). */
static bool parse_node(const char *text, int *nnodes, int *nproc, int *max_restarts, char host[256])
{
    return sscanf(text, "%d %d %d %255s", nnodes, nproc, max_restarts, host) == 4 && *nnodes > 0 &&
           *nproc > 0 && *max_restarts >= 0;
}

/* Round `round`: every node arrives (within the rendezvous timeout) with the same
 * --nnodes and --max-restarts, each node rank once; this node's share of the world. */
static int join(ddp_rdzv_t *r, int round, ddp_rdzv_world_t *world, ddp_buf_t *why)
{
    const ddp_launch_config_t *cfg = r->cfg;
    int nnodes = cfg->nnodes_max, me = cfg->node_rank, err;
    char key[640], value[512];
    int64_t claims;
    key_of(r, key, sizeof key, "%d/claim/%d", round, me);
    if ((err = ddp_store_client_add(r->client, key, 1, &claims)) != 0)
        goto store_failed;
    if (claims > 1) {
        ddp_buf_printf(why,
                       "node rank %d is taken: another launcher joined with --node-rank=%d "
                       "(every node needs its own, 0 to %d)",
                       me, me, nnodes - 1);
        abort_job(r, ddp_buf_str(why));
        return DDP_EUSAGE;
    }
    int n = snprintf(value, sizeof value, "%d %d %d %s", nnodes, cfg->nproc_per_node,
                     cfg->max_restarts, r->host);
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
    double deadline = ddp_clock_mono() + cfg->rdzv_conf.timeout;
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
        if (ddp_clock_mono() < deadline)
            continue;
        /* Name the nodes that never came. */
        ddp_buf_t missing = DDP_BUF_INIT;
        for (int i = 0; i < nnodes; i++) {
            const char *one[] = {keys[i]};
            bool here = false;
            if (ddp_store_client_check(r->client, one, 1, &here) == 0 && !here)
                ddp_buf_printf(&missing, "%s%d", missing.len ? ", " : "", i);
        }
        ddp_buf_printf(why,
                       "round %d: node(s) %s did not join within %g s (--rdzv-conf timeout); "
                       "the store is at %s:%d",
                       round, missing.len ? ddp_buf_str(&missing) : "?", cfg->rdzv_conf.timeout,
                       cfg->master_addr, cfg->master_port);
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
        for (int i = 0; i < nnodes && err == 0; i++) {
            int their_nnodes, nproc, max_restarts;
            char host[256];
            if (!parse_node(ddp_buf_str(&values[i]), &their_nnodes, &nproc, &max_restarts, host)) {
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

typedef enum { ROUND_SUCCEEDED, ROUND_FAILED, ROUND_ENDED } outcome_t;

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
    bool posted_failure = false, told_stop = false, done_posted = false;
    key_of(r, failed_key, sizeof failed_key, "%d/failed", round);
    key_of(r, done_key, sizeof done_key, "%d/done", round);
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
        if (err == 0 && lost >= 0 && !posted_failure && !told_stop) {
            /* A node gone silent: its launcher died, or its network went away. The
             * workers stop as for a failure there. */
            snprintf(value, sizeof value,
                     "node %d's launcher stopped answering: no heartbeat for %g s "
                     "(--rdzv-conf keep_alive_interval x keep_alive_max_attempt)",
                     lost,
                     cfg->rdzv_conf.keep_alive_interval * cfg->rdzv_conf.keep_alive_max_attempt);
            ddp_log_error(r->log, "%s", value);
            err = post_failure(r, failed_key, value, failure);
            posted_failure = true;
            if (done_posted)
                return ROUND_FAILED;
            command(r, DDP_RDZV_CMD_STOP, NULL, 0, "%s", ddp_buf_str(failure));
            told_stop = true;
        }
        if (stopped)
            return ROUND_FAILED;
        if (err == 0 && succeeded && !done_posted) {
            int64_t ignored;
            err = ddp_store_client_add(r->client, done_key, 1, &ignored);
            done_posted = true;
        }
        if (err == 0 && done_posted) {
            int64_t done = 0;
            err = ddp_store_client_add(r->client, done_key, 0, &done);
            if (err == 0 && done >= cfg->nnodes_max)
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
                if (done_posted)
                    return ROUND_FAILED;
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
            command(r, DDP_RDZV_CMD_FINISH, NULL, DDP_EXIT_RDZV_FAILED,
                    "lost the rendezvous store at %s:%d: %s", cfg->master_addr, cfg->master_port,
                    store_error(r));
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

/* After success: every node says it is leaving; node 0, whose store the others use,
 * waits for them (a bounded time) before it goes. */
static void exit_barrier(ddp_rdzv_t *r)
{
    char key[640];
    int64_t gone = 0;
    key_of(r, key, sizeof key, "exit");
    if (ddp_store_client_add(r->client, key, 1, &gone) != 0 || r->cfg->node_rank != 0)
        return;
    double deadline = ddp_clock_mono() + 30;
    while (gone < r->cfg->nnodes_max && ddp_clock_mono() < deadline && !quitting(r)) {
        nap(r, 0.02);
        if (ddp_store_client_add(r->client, key, 0, &gone) != 0)
            return;
    }
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
        int err = join(r, round, &world, &why);
        /* Node 0 clears the last round's keys on its loop when it starts the round; the
         * others start after that. */
        if (err == 0 && round > 0 && cfg->node_rank != 0) {
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
        if (round >= cfg->max_restarts) {
            command(r, DDP_RDZV_CMD_FINISH, NULL, DDP_EXIT_WORKER_FAILED,
                    "the job failed in round %d, with no restart left (--max-restarts=%d): %s",
                    round, cfg->max_restarts, ddp_buf_str(&failure));
            goto out;
        }
        ddp_log_warn(r->log, "round %d failed (%s): restarting every node as round %d", round,
                     ddp_buf_str(&failure), round + 1);
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
                   void (*on_command)(void *ctx), void *ctx, ddp_rdzv_t **out)
{
    ddp_rdzv_t *r = calloc(1, sizeof *r);
    if (r == NULL)
        return -ENOMEM;
    r->cfg = cfg;
    r->log = log;
    r->on_command = on_command;
    r->ctx = ctx;
    if (gethostname(r->host, sizeof r->host - 1) != 0)
        strcpy(r->host, "localhost");
    snprintf(r->prefix, sizeof r->prefix, "ddp-launch/rdzv/%s/", cfg->run_id);
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
    pthread_mutex_destroy(&r->mutex);
    pthread_cond_destroy(&r->wake);
    free(r);
}
