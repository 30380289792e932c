/* What the rendezvous thread does (see rdzv.h): one launcher's phases of a multi-node job.
 *
 *   CONNECT --store reached, a coordinator there--> JOIN
 *   JOIN    --assign/<id>/<seq>: world, and our last workers have all ended--> RUN
 *             (START to the loop)
 *           --assign: end--> END (FINISH; a latecomer to a finished job exits 0)
 *   RUN     --outcome: stop-failed | stop-reform--> STOP
 *           --outcome: done | end--> END (FINISH)
 *   STOP    --said--> JOIN (the next round: the join is written and acknowledged first,
 *             then STOP goes to the loop, so the workers end while the round forms and a
 *             re-form takes the longer of their stop and the last call, not the sum)
 *   any     --the store lost, a deadline, the loop's quit or abort--> END
 *
 * In every phase the thread waits in the store for one key (its answer, or the round's
 * outcome) and is woken out of that wait by the loop's posts; it beats every
 * keep_alive_interval. Nothing here reads another launcher's state: the coordinator
 * decides, and publishes each decision once. */
#include "rdzv/node.h"

#include "host/health.h"

#include "rdzv/envcheck.h"
#include "rdzv/etcd_place.h"
#include "strv.h"
#include "error.h"
#include "hash.h"
#include "io.h"

#include <errno.h>
#include <math.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

extern char **environ;

#define NOTE_FIRST 5.0  /* s: a wait is said after this long, */
#define NOTE_EVERY 30.0 /* then every NOTE_EVERY s */
#define GRACE      60.0 /* s past the coordinator's own deadline before a launcher gives up */
/* s a static job's launcher in a Slurm step waits for node 0's store: node 0's launcher is
 * a task of the same step, started with this one, and nobody restarts it when it fails at
 * start (--master-addr not its host, its port held): waiting out the timeout helps no one. */
#define SLURM_NODE0_S 20.0

typedef enum { NODE_CONNECT, NODE_JOIN, NODE_RUN, NODE_STOP, NODE_END } node_phase_t;

/* What a wait ended with (or a negative error). */
enum { AWAIT_READY = 0, AWAIT_WOKEN = 1, AWAIT_TIMEOUT = 2 };

/* The thread's side of the mailbox with the loop (the loop's is rdzv.c). */

void ddp_rdzv_command(ddp_rdzv_t *r, ddp_rdzv_cmd_t cmd, const ddp_rdzv_world_t *world,
                      int exit_code, const char *fmt, ...)
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

ddp_rdzv_events_t ddp_rdzv_take_events(ddp_rdzv_t *r)
{
    uint64_t count;
    pthread_mutex_lock(&r->mutex);
    ddp_rdzv_events_t events = r->events;
    bool quit = r->events.quit;
    memset(&r->events, 0, sizeof r->events);
    r->events.quit = quit; /* stays: every later look sees it */
    /* Empty the eventfd under the mutex: a post after this makes it readable again. */
    while (read(r->wake_fd, &count, sizeof count) < 0 && errno == EINTR)
        ;
    pthread_mutex_unlock(&r->mutex);
    return events;
}

bool ddp_rdzv_quitting(ddp_rdzv_t *r)
{
    pthread_mutex_lock(&r->mutex);
    bool quit = r->events.quit;
    pthread_mutex_unlock(&r->mutex);
    return quit;
}

bool ddp_rdzv_ending(ddp_rdzv_t *r)
{
    pthread_mutex_lock(&r->mutex);
    bool ending = r->events.quit || r->events.aborted || r->events.leave[0] != '\0';
    pthread_mutex_unlock(&r->mutex);
    return ending;
}

void ddp_rdzv_awaiting_stop(ddp_rdzv_t *r, bool awaits)
{
    pthread_mutex_lock(&r->mutex);
    r->awaits_stop = awaits;
    pthread_mutex_unlock(&r->mutex);
}

int ddp_rdzv_take_pause_request(ddp_rdzv_t *r)
{
    pthread_mutex_lock(&r->mutex);
    int request = r->events.pause_request;
    r->events.pause_request = 0;
    pthread_mutex_unlock(&r->mutex);
    return request;
}

/* The store failed us mid-job: this node ends (status 5), saying what failed on the
 * connection that failed (the waiter's, when await_keys said so), why a store that stopped
 * answering (a timeout, not a refused or reset connection) would, and that etcd's
 * rendezvous would have gone on; with etcd, the loop is told, and a new thread joins the
 * store of the launcher elected next. */
static node_phase_t store_lost(ddp_rdzv_t *r)
{
    const ddp_store_client_t *c = r->waiter_failed ? r->waiter : r->client;
    bool etcd = r->cfg->rdzv_backend == DDP_RDZV_ETCD; /* the job moves to another store */
    bool silent = ddp_store_client_failure(c) == DDP_ETIMEOUT;
    ddp_rdzv_command(r, etcd ? DDP_RDZV_CMD_STORE_LOST : DDP_RDZV_CMD_FINISH, NULL,
                     DDP_EXIT_RDZV_FAILED, "lost the rendezvous store at %s:%d: %s%s%s",
                     r->cfg->master_addr, r->cfg->master_port, ddp_store_client_error(c),
                     silent ? "; it took this launcher's connection but stopped "
                              "answering: " DDP_STORE_CLIENT_SILENT_WHY
                              ", or its node is unreachable"
                            : "",
                     etcd     ? ""
                     : silent ? "; the job ends with it: --rdzv-backend=etcd survives the loss "
                                "of any node"
                              : "; the job ends with the launcher that served it (its node "
                                "lost?): --rdzv-backend=etcd survives the loss of any node");
    return NODE_END;
}

/* This launcher's heartbeat, when due: one ADD sent, its reply taken with the next (none
 * sent while the store host has not answered the last: it is busy, and its own loop's
 * lateness is never held against a node). */
static int beat(ddp_rdzv_t *r, double now)
{
    char key[512];
    bool sent;
    if (now < r->next_beat)
        return 0;
    r->next_beat = now + r->cfg->rdzv_conf.keep_alive_interval;
    ddp_rdzv_key(key, sizeof key, r->cfg->run_id, "beat/%s", r->id);
    return ddp_store_client_add_async(r->client, key, 1, &sent);
}

/* The beat inside a wait on the waiter: its failure is the first connection's. */
static int beat_tick(void *ctx, double now)
{
    ddp_rdzv_t *r = ctx;
    int err = beat(r, now);
    r->beat_failed = err != 0;
    return err;
}

/* Waits (on its own connection) for the keys until `deadline`, beating meanwhile on the
 * other: the WAIT stays outstanding across beats, so a beat costs the thread one wakeup
 * and the store one request. `wake_fd` readable (a post of the loop) ends it. */
static int await_keys(ddp_rdzv_t *r, const char *const *keys, size_t n, double deadline,
                      int wake_fd)
{
    ddp_store_tick_t tick = {.fn = beat_tick, .ctx = r, .due = &r->next_beat};
    double now = ddp_clock_mono();
    int err = beat(r, now);
    if (err)
        return err;
    if (now >= deadline)
        return AWAIT_TIMEOUT;
    r->beat_failed = false;
    err = ddp_store_client_wait_ticking(r->waiter, keys, n, deadline - now, wake_fd, &tick);
    if (err == 0 || err == 1)
        return err == 0 ? AWAIT_READY : AWAIT_WOKEN;
    if (err == DDP_ETIMEOUT && !r->beat_failed && ddp_clock_mono() >= deadline)
        return AWAIT_TIMEOUT;
    r->waiter_failed = !r->beat_failed;
    return err;
}

/* Waits for `key` until `deadline`, beating meanwhile; a post of the loop ends it. */
static int await_key(ddp_rdzv_t *r, const char *key, double deadline)
{
    const char *keys[] = {key};
    return await_keys(r, keys, 1, deadline, r->wake_fd);
}

/* Waits for a post of the loop only, beating meanwhile. */
static int await_post(ddp_rdzv_t *r)
{
    for (;;) {
        double now = ddp_clock_mono();
        int err = beat(r, now);
        if (err)
            return err;
        struct pollfd pfd = {.fd = r->wake_fd, .events = POLLIN};
        int ms = (int)((r->next_beat - now) * 1000) + 1;
        int n = poll(&pfd, 1, ms > 0 ? ms : 0);
        if (n > 0)
            return AWAIT_WOKEN;
        if (n < 0 && errno != EINTR)
            return -errno;
    }
}

/* Claims a note's turn: true when a wait is to be said now, and `*next` (NOTE_FIRST s after
 * the wait began) moves on NOTE_EVERY s; never at or past the deadline. */
static bool claim_note(double *next, double now, double deadline)
{
    if (now < *next || now >= deadline)
        return false;
    *next = now + NOTE_EVERY;
    return true;
}

/* The value at `key` in one round trip (a GET would WAIT for it first): the caller
 * knows it exists, or takes a missing key as empty. */
static int read_key(ddp_rdzv_t *r, const char *key, ddp_buf_t *value)
{
    const char *keys[1] = {key};
    return ddp_store_client_multi_get(r->client, keys, 1, value);
}

/* Reads the verdict in `text` (from `key`) into *v; where it is not one, the job ends
 * (FINISH) and false. */
static bool read_verdict(ddp_rdzv_t *r, const char *key, ddp_buf_t *text, ddp_rdzv_verdict_t *v)
{
    if (ddp_rdzv_verdict_parse(text->data, text->len, v))
        return true;
    ddp_rdzv_command(r, DDP_RDZV_CMD_FINISH, NULL, DDP_EXIT_RDZV_FAILED,
                     "the rendezvous store at %s:%d holds a malformed answer at '%s': '%.100s'",
                     r->cfg->master_addr, r->cfg->master_port, key, ddp_buf_str(text));
    return false;
}

/* The reporter of a hang: waits (beating) until every node's rows are in or `wait` s
 * have passed, then hands the loop those that came. */
static bool gather_hang(ddp_rdzv_t *r, const ddp_rdzv_world_t *world, double wait)
{
    size_t n = (size_t)world->nnodes;
    char **keys = calloc(n, sizeof *keys);
    ddp_buf_t *values = calloc(n, sizeof *values);
    bool ok = keys != NULL && values != NULL;
    for (size_t i = 0; ok && i < n; i++) {
        ok = (keys[i] = malloc(512)) != NULL;
        if (ok)
            ddp_rdzv_key(keys[i], 512, r->cfg->run_id, "%d/hang/%zu", world->round, i);
    }
    /* The loop's posts wait until the rows are in; its quit or abort (a Ctrl-C here: the
     * other nodes are to hear of it at once) is looked at every second. */
    double deadline = ddp_clock_mono() + wait;
    int err = AWAIT_TIMEOUT;
    while (ok && err == AWAIT_TIMEOUT && ddp_clock_mono() < deadline && !ddp_rdzv_ending(r))
        err = await_keys(r, (const char *const *)keys, n, fmin(ddp_clock_mono() + 1, deadline), -1);
    if (err == AWAIT_TIMEOUT)
        err = 0; /* what came, now */
    if (ok && err == 0)
        err = ddp_store_client_multi_get(r->client, (const char *const *)keys, n, values);
    ddp_buf_t all = DDP_BUF_INIT;
    for (size_t i = 0; ok && err == 0 && i < n; i++)
        ddp_buf_append(&all, values[i].data, values[i].len);
    for (size_t i = 0; keys != NULL && i < n; i++)
        free(keys[i]);
    for (size_t i = 0; values != NULL && i < n; i++)
        ddp_buf_free(&values[i]);
    free(keys);
    free(values);
    if (err != 0 && err != DDP_ETIMEOUT) {
        ddp_buf_free(&all);
        store_lost(r);
        return false;
    }
    pthread_mutex_lock(&r->mutex);
    free(r->hang_rows);
    r->hang_rows = strdup(ddp_buf_str(&all));
    pthread_mutex_unlock(&r->mutex);
    ddp_buf_free(&all);
    ddp_rdzv_command(r, DDP_RDZV_CMD_HANG_REPORT, NULL, 0, NULL);
    return true;
}

/* This node's hang rows into the store (<round>/hang/<node rank>). The first node to find
 * the hang (ADD <round>/hang) reports: it tells the others (<round>/news) and gathers. */
static bool publish_hang(ddp_rdzv_t *r, const ddp_rdzv_world_t *world, const ddp_rdzv_events_t *ev)
{
    char key[512];
    int64_t finders = 0;
    ddp_rdzv_key(key, sizeof key, r->cfg->run_id, "%d/hang/%d", world->round, world->node_rank);
    if (ddp_store_client_set(r->client, key, ev->hang_rows, strlen(ev->hang_rows)) != 0) {
        store_lost(r);
        return false;
    }
    ddp_rdzv_key(key, sizeof key, r->cfg->run_id, "%d/hang", world->round);
    if (ev->hang_initiate && ddp_store_client_add(r->client, key, 1, &finders) != 0) {
        store_lost(r);
        return false;
    }
    if (finders != 1) {
        ddp_rdzv_command(r, DDP_RDZV_CMD_HANG_DONE, NULL, 0, NULL);
        return true;
    }
    ddp_rdzv_news_key(key, sizeof key, r->cfg->run_id, world->round, r->pauses);
    if (ddp_store_client_set(r->client, key, "hang", 4) != 0) {
        store_lost(r);
        return false;
    }
    return gather_hang(r, world, ev->hang_wait);
}

/* Ctrl-Z on this node (1) or its continue (2) while round `round` runs, for the store's
 * host, at pause/<id> (rdzv/coord.c). */
static int send_pause_request(ddp_rdzv_t *r, int round, int request)
{
    char key[512], value[48];
    ddp_rdzv_key(key, sizeof key, r->cfg->run_id, "pause/%s", r->id);
    int n = snprintf(value, sizeof value, "%s %d", request == 1 ? "pause" : "resume", round);
    return ddp_store_client_set(r->client, key, value, (size_t)n);
}

/* The end of this node's workers in round `round` (failed or succeeded, as `ev` says), at
 * report/<id> once a round. False when the store is lost (said). */
static bool report_end(ddp_rdzv_t *r, int round, const ddp_rdzv_events_t *ev, bool *reported)
{
    char key[512];
    if (*reported || !(ev->failed || ev->succeeded))
        return true;
    ddp_rdzv_report_t rep = {.round = round, .failed = ev->failed};
    ddp_buf_t text = DDP_BUF_INIT;
    snprintf(rep.message, sizeof rep.message, "%s", ev->failed ? ev->message : "");
    ddp_rdzv_key(key, sizeof key, r->cfg->run_id, "report/%s", r->id);
    if (ddp_rdzv_report_format(&rep, &text) == 0 &&
        ddp_store_client_set(r->client, key, text.data, text.len) != 0) {
        ddp_buf_free(&text);
        store_lost(r);
        return false;
    }
    ddp_buf_free(&text);
    *reported = true;
    return true;
}

/* This launcher leaves the job alone (ddp_rdzv_post_leave): its workers' failure first, if
 * the round's report has not gone (the round fails as for any failure), then why it leaves,
 * at leave/<id>, for the store's host to say. */
static void leave(ddp_rdzv_t *r, const ddp_rdzv_world_t *world, const ddp_rdzv_events_t *ev,
                  bool *reported)
{
    char key[512];
    if (world != NULL && !report_end(r, world->round, ev, reported))
        return;
    ddp_rdzv_key(key, sizeof key, r->cfg->run_id, "leave/%s", r->id);
    (void)ddp_store_client_set(r->client, key, ev->leave, strlen(ev->leave));
}

/* This node's rank: in `world`, else in the round it last started; before any, the flag's
 * (--node-rank, static rendezvous), or -1 where rounds assign it (not yet). */
static int own_rank(const ddp_rdzv_t *r, const ddp_rdzv_world_t *world)
{
    if (world != NULL)
        return world->node_rank;
    return r->node_rank >= 0 || ddp_config_dynamic(r->cfg) ? r->node_rank : r->cfg->node_rank;
}

/* The loop's posts: false when this launcher ends (its abort told to the job, or its
 * leave). `world`: the round that runs (its workers' end is reported), or NULL between
 * rounds. */
static bool take_posts(ddp_rdzv_t *r, const ddp_rdzv_world_t *world, bool *reported)
{
    ddp_rdzv_events_t ev = ddp_rdzv_take_events(r);
    char key[512];
    /* This node's failures for the job's report, whatever else comes (the launcher may be
     * ending): at failures/<launcher id>, read by the launcher serving the store. */
    if (ev.failures != NULL) {
        ddp_rdzv_key(key, sizeof key, r->cfg->run_id, "%d/failures/%s", r->round, r->id);
        bool done = ddp_store_client_set(r->client, key, ev.failures, strlen(ev.failures)) == 0;
        pthread_mutex_lock(&r->mutex);
        r->failures_published = done;
        pthread_mutex_unlock(&r->mutex);
        free(ev.failures);
    }
    /* The latest straggler rows, at <round>/stragglers/<launcher id> (one value a node). */
    if (ev.stragglers != NULL && world != NULL && !ev.quit) {
        ddp_rdzv_key(key, sizeof key, r->cfg->run_id, "%d/stragglers/%s", world->round, r->id);
        (void)ddp_store_client_set(r->client, key, ev.stragglers, strlen(ev.stragglers));
        /* Named a straggler by the store host (--straggler-action=exclude)? */
        const char *keys[1] = {key};
        bool named = false;
        ddp_rdzv_key(key, sizeof key, r->cfg->run_id, "%d/straggler/%s", world->round, r->id);
        if (r->cfg->straggler_exclude && ddp_store_client_check(r->client, keys, 1, &named) == 0 &&
            named) {
            pthread_mutex_lock(&r->mutex);
            r->straggler_named = true;
            pthread_mutex_unlock(&r->mutex);
        }
    } /* (a store gone shows at the next call that waits on it) */
    free(ev.stragglers);
    /* Rows of a hang come before the failure it ends in. */
    if (ev.hang_rows != NULL && !ev.aborted && !ev.quit && world != NULL &&
        !publish_hang(r, world, &ev)) {
        free(ev.hang_rows);
        return false;
    }
    free(ev.hang_rows);
    if (ev.aborted) {
        char value[DDP_RDZV_MSG_MAX];
        int rank = own_rank(r, world), n;
        if (rank >= 0)
            n = snprintf(value, sizeof value, "%d node %d (%s): %s", ev.abort_signal, rank, r->host,
                         ev.message);
        else
            n = snprintf(value, sizeof value, "%d the launcher on %s (no node rank yet): %s",
                         ev.abort_signal, r->host, ev.message);
        n = n > 0 && (size_t)n < sizeof value ? n : (int)strlen(value);
        ddp_rdzv_key(key, sizeof key, r->cfg->run_id, "abort");
        (void)ddp_store_client_set(r->client, key, value, (size_t)n);
        return false;
    }
    if (ev.leave[0] != '\0') {
        leave(r, world, &ev, reported);
        return false;
    }
    if (ev.quit)
        return false;
    if (ev.pause_request != 0 && world != NULL &&
        send_pause_request(r, world->round, ev.pause_request) != 0) {
        store_lost(r);
        return false;
    }
    if (ev.stopped || ev.succeeded)
        r->local_running = false;
    return world == NULL || report_end(r, world->round, &ev, reported);
}

static node_phase_t finish(ddp_rdzv_t *r, const ddp_rdzv_verdict_t *v, bool joining)
{
    if (v->kind == DDP_RDZV_VERDICT_DONE) {
        ddp_rdzv_command(r, DDP_RDZV_CMD_FINISH, NULL, DDP_EXIT_OK, NULL);
    } else if (v->exit_code == DDP_EXIT_OK && joining) {
        /* A latecomer to a job that has finished. */
        ddp_log_warn(r->log, "%s", v->message);
        ddp_rdzv_command(r, DDP_RDZV_CMD_FINISH, NULL, DDP_EXIT_OK, NULL);
    } else {
        ddp_rdzv_command(r, DDP_RDZV_CMD_FINISH, NULL, v->exit_code, "%s", v->message);
    }
    return NODE_END;
}

/* A connection's handshake given up where this launcher ends (options.cancelled). */
static bool quitting(void *ctx)
{
    return ddp_rdzv_quitting(ctx);
}

/* s a connection the store took may wait for its handshake's answer past the slice: a store
 * host busy with a burst of joins answers late, and a connection given up is queued again
 * behind the burst. */
#define ANSWER_WITHIN 10.0

/* At most 1 s of a connection's attempts, up to `deadline`: the launcher's end (a signal)
 * is looked at between them (and within a handshake's wait, options.cancelled). */
static double connect_slice(ddp_store_client_options_t *options, double deadline)
{
    double left = deadline - ddp_clock_mono();
    options->answer_within = left < ANSWER_WITHIN ? (left > 0 ? left : 0) : ANSWER_WITHIN;
    return left < 1 ? (left > 0 ? left : 0.01) : 1;
}

/* The second connection, for the thread's WAITs (beats go on the first, so a WAIT is
 * never cancelled for one). The store has just answered on the first, but may be gone
 * since (its host's launcher ended: ours too, when we host it). */
static node_phase_t connect_waiter(ddp_rdzv_t *r)
{
    ddp_store_client_options_t options = DDP_STORE_CLIENT_OPTIONS_DEFAULT;
    ddp_buf_t why = DDP_BUF_INIT;
    double deadline = ddp_clock_mono() + r->cfg->rdzv_conf.read_timeout;
    int err;
    options.timeout = r->cfg->rdzv_conf.read_timeout;
    options.cancelled = quitting;
    options.cancel_ctx = r;
    do {
        options.connect_timeout = connect_slice(&options, deadline);
        ddp_buf_clear(&why);
        err = ddp_store_client_connect(r->cfg->master_addr, r->cfg->master_port, &options,
                                       &r->waiter, &why);
    } while (err != 0 && err != DDP_EPROTO && ddp_clock_mono() < deadline && !ddp_rdzv_quitting(r));
    if (err == 0)
        return NODE_JOIN;
    if (!ddp_rdzv_quitting(r))
        ddp_rdzv_command(r, DDP_RDZV_CMD_FINISH, NULL, DDP_EXIT_RDZV_FAILED,
                         "lost the rendezvous store at %s:%d: a second connection to it failed "
                         "for %g s (--rdzv-conf read_timeout): %s",
                         r->cfg->master_addr, r->cfg->master_port, r->cfg->rdzv_conf.read_timeout,
                         ddp_buf_str(&why));
    ddp_buf_free(&why);
    return NODE_END;
}

/* The store is not served for our job: which job it is served for, if any, named on
 * both sides (the serving launcher hears of us under its own prefix). */
static void not_our_job(ddp_rdzv_t *r)
{
    const ddp_launch_config_t *cfg = r->cfg;
    const char *keys[1] = {DDP_RDZV_SERVED_KEY};
    bool served = false;
    ddp_buf_t theirs = DDP_BUF_INIT;
    char key[512], note[600];
    if (ddp_store_client_check(r->client, keys, 1, &served) == 0 && served &&
        ddp_store_client_get(r->client, DDP_RDZV_SERVED_KEY, &theirs) == 0 && theirs.len < 200 &&
        memchr(theirs.data, '\0', theirs.len) == NULL) {
        int rank = own_rank(r, NULL);
        if (rank >= 0)
            snprintf(note, sizeof note, "a launcher of job '%s' (node %d, %s)", cfg->run_id, rank,
                     r->host);
        else
            snprintf(note, sizeof note, "a launcher of job '%s' (on %s)", cfg->run_id, r->host);
        ddp_rdzv_key(key, sizeof key, ddp_buf_str(&theirs), "stranger/%s", r->id);
        (void)ddp_store_client_set(r->client, key, note, strlen(note));
        ddp_rdzv_command(r, DDP_RDZV_CMD_FINISH, NULL, DDP_EXIT_RDZV_FAILED,
                         "the store at %s:%d serves job '%s', not this launcher's '%s' (every "
                         "node needs the same --rdzv-id)",
                         cfg->master_addr, cfg->master_port, ddp_buf_str(&theirs), cfg->run_id);
    } else {
        ddp_rdzv_command(r, DDP_RDZV_CMD_FINISH, NULL, DDP_EXIT_RDZV_FAILED,
                         "the store at %s:%d is not served by a ddp-launch of job '%s' (one "
                         "launcher of the job must serve it: --rdzv-conf is_host)",
                         cfg->master_addr, cfg->master_port, cfg->run_id);
    }
    ddp_buf_free(&theirs);
}

/* s the elected launcher's coordinator may take to start (it runs on a loop that has
 * answered etcd): seconds at most. */
#define ETCD_COORDINATOR_WAIT 10.0

/* etcd: the elected launcher's store listens before its coordinator starts (it starts once
 * that launcher has heard it won, which another may hear first): its key `keys[0]` awaited
 * a moment, in slices of 0.2 s between which the loop's end or abort is looked at (the
 * loop's posts stay for later). 0, DDP_ETIMEOUT, 1 (this launcher ends), or the store's
 * error. */
static int await_coordinator(ddp_rdzv_t *r, const char *const *keys)
{
    double deadline = ddp_clock_mono() + ETCD_COORDINATOR_WAIT;
    int err = DDP_ETIMEOUT;
    while (err == DDP_ETIMEOUT && ddp_clock_mono() < deadline) {
        if (ddp_rdzv_ending(r))
            return 1;
        err = ddp_store_client_wait(r->client, keys, 1, 0.2);
    }
    return err;
}

/* etcd: the store etcd's coordinator key names (by a host name, which the loop's probe
 * does not try) refused the connection (`refused`: it listened before its key was put, so
 * its launcher is gone, as the probe judges an address, unless this node alone cannot
 * reach it), answered, but not as a store (another program's port), or not within
 * join_timeout: the loop is told, and reads the key afresh, ends that launcher's lease where
 * it still names it and that launcher does not keep it alive, and has another elected. */
static node_phase_t elected_unanswered(ddp_rdzv_t *r, bool refused, const char *why)
{
    char prefix[DDP_ETCD_PREFIX_MAX];
    ddp_etcd_place_prefix(r->cfg->run_id, prefix, sizeof prefix);
    if (refused)
        ddp_rdzv_command(r, DDP_RDZV_CMD_STORE_UNANSWERED, NULL, DDP_EXIT_RDZV_FAILED,
                         "the store at %s:%d that etcd's key %scoord names refuses connections",
                         r->cfg->master_addr, r->cfg->master_port, prefix);
    else
        ddp_rdzv_command(r, DDP_RDZV_CMD_STORE_UNANSWERED, NULL, DDP_EXIT_RDZV_FAILED,
                         "the store at %s:%d that etcd's key %scoord names did not "
                         "answer as a ddp-launch store within %g s (--rdzv-conf join_timeout): %s",
                         r->cfg->master_addr, r->cfg->master_port, prefix,
                         r->cfg->rdzv_conf.join_timeout, why);
    return NODE_END;
}

static node_phase_t node_connect(ddp_rdzv_t *r)
{
    const ddp_launch_config_t *cfg = r->cfg;
    ddp_store_client_options_t options = DDP_STORE_CLIENT_OPTIONS_DEFAULT;
    ddp_buf_t why = DDP_BUF_INIT;
    char key[512];
    double started = ddp_clock_mono(), deadline = started + cfg->rdzv_conf.timeout;
    double next_note = started + NOTE_FIRST;
    bool dynamic = ddp_config_dynamic(cfg);
    bool in_step = cfg->store_in_step && (dynamic || cfg->node_rank != 0) &&
                   cfg->rdzv_conf.timeout > SLURM_NODE0_S;
    if (in_step)
        deadline = started + SLURM_NODE0_S;
    /* etcd: the elected launcher's store listened before its key was put. */
    bool etcd = cfg->rdzv_backend == DDP_RDZV_ETCD;
    if (etcd)
        deadline = started + cfg->rdzv_conf.join_timeout;
    options.timeout = cfg->rdzv_conf.read_timeout; /* each store call's deadline */
    options.refused_ends = etcd;
    options.cancelled = quitting; /* (a handshake then waits past the slice) */
    options.cancel_ctx = r;
    while (!ddp_rdzv_quitting(r)) {
        options.connect_timeout = connect_slice(&options, deadline);
        ddp_buf_clear(&why);
        int err = ddp_store_client_connect(cfg->master_addr, cfg->master_port, &options, &r->client,
                                           &why);
        if (err == 0)
            break;
        double now = ddp_clock_mono();
        if (etcd && (err == DDP_EPROTO || err == -ECONNREFUSED || now >= deadline)) {
            node_phase_t phase = elected_unanswered(r, err == -ECONNREFUSED, ddp_buf_str(&why));
            ddp_buf_free(&why);
            return phase;
        }
        if (err == DDP_EPROTO) { /* not a store, and waiting will not make it one */
            ddp_rdzv_command(r, DDP_RDZV_CMD_FINISH, NULL, DDP_EXIT_RDZV_FAILED,
                             "node 0's rendezvous store: %s", ddp_buf_str(&why));
            ddp_buf_free(&why);
            return NODE_END;
        }
        /* Waiting is normal while the hosting launcher starts; a long wait says why. */
        if (!ddp_rdzv_quitting(r) && claim_note(&next_note, now, deadline)) {
            ddp_log_info(r->log,
                         "still waiting for the rendezvous store at %s:%d after %.0f s (%s); "
                         "giving up in %.0f s (%s)",
                         cfg->master_addr, cfg->master_port, now - started, ddp_buf_str(&why),
                         deadline - now,
                         etcd       ? "--rdzv-conf join_timeout"
                         : !in_step ? "--rdzv-conf timeout"
                         : dynamic  ? "the store's host is a node of this Slurm step"
                                    : "node 0 is a task of this Slurm step");
        }
        if (now >= deadline && in_step) {
            ddp_rdzv_command(r, DDP_RDZV_CMD_FINISH, NULL, DDP_EXIT_RDZV_FAILED,
                             "%s rendezvous store at %s:%d is not there %g s after this Slurm "
                             "step started (%s): %s, failed at start (see its lines), or %s do "
                             "not name it; nobody restarts it in a step, so the job ends",
                             dynamic ? "the" : "node 0's", cfg->master_addr, cfg->master_port,
                             SLURM_NODE0_S, ddp_buf_str(&why),
                             dynamic ? "its host's launcher, a task of the step"
                                     : "node 0's launcher, task 0 of the step",
                             dynamic ? "--rdzv-endpoint" : "--master-addr/--master-port");
            ddp_buf_free(&why);
            return NODE_END;
        }
        if (now >= deadline) {
            ddp_rdzv_command(r, DDP_RDZV_CMD_FINISH, NULL, DDP_EXIT_RDZV_FAILED,
                             "node 0's rendezvous store at %s:%d could not be reached within "
                             "%g s (--rdzv-conf timeout): %s",
                             cfg->master_addr, cfg->master_port, cfg->rdzv_conf.timeout,
                             ddp_buf_str(&why));
            ddp_buf_free(&why);
            return NODE_END;
        }
    }
    ddp_buf_free(&why);
    if (r->client == NULL)
        return NODE_END; /* quitting */
    /* The coordinator marks the store as a ddp-launch's before any client can connect. */
    const char *keys[1] = {key};
    bool there = false;
    ddp_rdzv_key(key, sizeof key, r->cfg->run_id, "coordinator");
    if (ddp_store_client_check(r->client, keys, 1, &there) != 0)
        return store_lost(r);
    if (!there && r->cfg->rdzv_backend == DDP_RDZV_ETCD) {
        int err = await_coordinator(r, keys);
        if (err == 1 || (err != 0 && err != DDP_ETIMEOUT))
            return err == 1 ? NODE_END : store_lost(r);
        there = err == 0;
    }
    if (!there) {
        not_our_job(r);
        return NODE_END;
    }
    return connect_waiter(r);
}

/* Every NOTE_EVERY s while it waits for its place, the launcher says what the forming
 * round waits for (the coordinator's status), or what round runs: that once, as a hot
 * spare may wait for as long as the job runs. Nothing once its answer is at `answer` (its
 * place came with the round that status names). */
static void note_status(ddp_rdzv_t *r, const char *answer)
{
    char key[512];
    const char *keys[1] = {answer};
    bool there = false;
    ddp_buf_t status = DDP_BUF_INIT;
    ddp_rdzv_key(key, sizeof key, r->cfg->run_id, "status");
    if (ddp_store_client_check(r->client, keys, 1, &there) == 0 && !there &&
        read_key(r, key, &status) == 0 && status.len > 0) { /* none yet: empty */
        uint64_t hash = ddp_fnv1a64(status.data, status.len);
        if (hash != r->last_note)
            ddp_log_info(r->log, "%s", ddp_buf_str(&status));
        r->last_note = hash;
    }
    ddp_buf_free(&status);
}

static int join_record(ddp_rdzv_t *r)
{
    const ddp_launch_config_t *cfg = r->cfg;
    ddp_rdzv_join_t join = {
        .seq = ++r->seq,
        .nnodes_min = cfg->nnodes_min,
        .nnodes_max = cfg->nnodes_max,
        .node_rank = ddp_config_dynamic(cfg) ? -1 : cfg->node_rank,
        .nproc = cfg->nproc_per_node,
        .max_restarts = cfg->max_restarts,
    };
    char key[512];
    ddp_buf_t text = DDP_BUF_INIT;
    snprintf(join.host, sizeof join.host, "%s", r->host);
    ddp_rdzv_key(key, sizeof key, r->cfg->run_id, "join/%s", r->id);
    int err = ddp_rdzv_join_format(&join, &text);
    /* The environment the nodes must agree on, in the same record (envcheck.h). */
    if (err == 0 && (err = ddp_buf_puts(&text, "\n")) == 0)
        err = ddp_envcheck_record(cfg, environ, &text);
    if (err == 0)
        err = ddp_store_client_set(r->client, key, text.data, text.len);
    ddp_buf_free(&text);
    return err;
}

/* Before a round starts here: the last round's workers have all ended (the loop posts
 * it; the post wakes the thread only while it waits here). False when this launcher ends
 * instead. */
static bool await_stopped(ddp_rdzv_t *r)
{
    bool ignored = true, ok = true;
    ddp_rdzv_awaiting_stop(r, true);
    while (ok && r->local_running) {
        ok = take_posts(r, NULL, &ignored);
        int rc = ok && r->local_running ? await_post(r) : 0;
        if (rc < 0) {
            store_lost(r);
            ok = false;
        }
    }
    ddp_rdzv_awaiting_stop(r, false);
    return ok;
}

/* The lines of `text` as a NULL-terminated array (NULL when out of memory). */
static char **split_lines(const char *text)
{
    size_t n = 0, k = 0;
    for (const char *c = text; *c != '\0'; c++)
        n += *c == '\n';
    char **lines = calloc(n + 2, sizeof *lines);
    for (const char *p = text; lines != NULL && *p != '\0'; k++) {
        size_t len = strcspn(p, "\n");
        if ((lines[k] = strndup(p, len)) == NULL) {
            ddp_strv_free(lines);
            return NULL;
        }
        p += len + (p[len] == '\n');
    }
    return lines;
}

/* Node 0's --env entries, for this node's workers (the key holds one a line); read only
 * when the world says there are some (a round trip less per node and round otherwise). */
static bool read_job_env(ddp_rdzv_t *r, int nenv)
{
    char key[512];
    ddp_buf_t text = DDP_BUF_INIT;
    ddp_rdzv_key(key, sizeof key, r->cfg->run_id, "env");
    if (nenv > 0 && read_key(r, key, &text) != 0) {
        ddp_buf_free(&text);
        store_lost(r);
        return false;
    }
    char **entries = split_lines(ddp_buf_str(&text));
    ddp_buf_free(&text);
    pthread_mutex_lock(&r->mutex);
    ddp_strv_free(r->job_env);
    r->job_env = entries;
    pthread_mutex_unlock(&r->mutex);
    return true;
}

/* The last round's workers stop once the store host has our join: SET has no answer in
 * TCPStore's protocol, so a CHECK of the join key is the round trip that says so. On a
 * machine shared by thousands of launchers (bench/scale), the host then reads the joins
 * before the workers' ends take the CPU. */
static int stop_after_join(ddp_rdzv_t *r, const ddp_rdzv_verdict_t *stop)
{
    char key[512];
    const char *keys[1] = {key};
    bool there;
    if (!r->local_running)
        return 0;
    ddp_rdzv_key(key, sizeof key, r->cfg->run_id, "join/%s", r->id);
    int err = ddp_store_client_check(r->client, keys, 1, &there);
    if (err == 0)
        /* The command's code says why: 1 a failure, 0 the nodes changed (a re-form). */
        ddp_rdzv_command(r, DDP_RDZV_CMD_STOP, NULL,
                         stop->kind == DDP_RDZV_VERDICT_STOP_FAILED ? DDP_EXIT_WORKER_FAILED : 0,
                         "%s", stop->message);
    return err;
}

/* What this node's health checks came to. */
typedef enum { CHECKED_HEALTHY, CHECKED_UNHEALTHY, CHECKED_ENDING } checked_t;

/* Before each join, and before a place that came after a wait: this node's health checks
 * (health.h), `before` naming which. Unhealthy, it does not join (or take the place): the
 * job ends on every node (the abort record names this node and the check), before any
 * worker of the round starts; with hot spares only this launcher leaves. A signal to the
 * launcher meanwhile ends the checks at once (CHECKED_ENDING: the loop's posts are taken,
 * its abort told to the job). */
static checked_t healthy_to_join(ddp_rdzv_t *r, const char *before)
{
    const ddp_launch_config_t *cfg = r->cfg;
    ddp_health_ctx_t ctx = {.guard_fd = r->guard_fd, .cancel_fd = r->end_fd};
    bool ignored = false;
    ddp_health_spec_t spec;
    ddp_config_health_spec(cfg, &spec);
    if (!ddp_health_checks_apply(&spec))
        return CHECKED_HEALTHY;
    ddp_buf_t why = DDP_BUF_INIT;
    int rc = ddp_health_check(&spec, &ctx, &why);
    if (rc == -ECANCELED) {
        ddp_buf_free(&why);
        (void)take_posts(r, NULL, &ignored);
        return CHECKED_ENDING;
    }
    if (rc == 0) {
        ddp_log_info(r->log, "health check before %s passed: %s", before, ddp_buf_str(&why));
        ddp_buf_free(&why);
        return CHECKED_HEALTHY;
    }
    pthread_mutex_lock(&r->mutex);
    r->unhealthy = true;
    pthread_mutex_unlock(&r->mutex);
    /* With hot spares only this launcher leaves (a spare takes its place); otherwise the abort
     * record ends the job on every node, naming this one. */
    bool alone = ddp_config_dynamic(cfg) && cfg->hot_spares > 0;
    bool spare = strncmp(before, "taking its place", 16) == 0; /* a spare promoted */
    if (alone) { /* the store's host says why it leaves (leave/<id>, as any leaving) */
        char key[512], value[DDP_RDZV_MSG_MAX];
        int n = snprintf(value, sizeof value, "it failed its health check before %s: %s", before,
                         ddp_buf_str(&why));
        ddp_rdzv_key(key, sizeof key, cfg->run_id, "leave/%s", r->id);
        (void)ddp_store_client_set(r->client, key, value,
                                   n > 0 && (size_t)n < sizeof value ? (size_t)n : strlen(value));
    } else {
        char key[512], value[DDP_RDZV_MSG_MAX], node[32] = "the node";
        if (!ddp_config_dynamic(cfg))
            snprintf(node, sizeof node, "node %d", cfg->node_rank);
        int n = snprintf(value, sizeof value, "%s on %s, which failed its health check: %s", node,
                         r->host, ddp_buf_str(&why));
        ddp_rdzv_key(key, sizeof key, cfg->run_id, "abort");
        (void)ddp_store_client_set(r->client, key, value,
                                   n > 0 && (size_t)n < sizeof value ? (size_t)n : strlen(value));
    }
    ddp_rdzv_command(r, DDP_RDZV_CMD_FINISH, NULL, DDP_EXIT_RDZV_FAILED,
                     "this node failed its health check: %s; %s", ddp_buf_str(&why),
                     !alone  ? "it does not join, and the job ends (no worker of the round "
                               "started)"
                     : spare ? "it leaves the job, and another hot spare or the elastic rules "
                               "take the place it was given"
                             : "it leaves the job, and a hot spare takes its place");
    ddp_buf_free(&why);
    return CHECKED_UNHEALTHY;
}

/* Checks this node's health again for a place in `world` that came after a wait, where
 * hot spares are: a spare promoted into a lost node's place, or a launcher whose place is in
 * a later round than the one it joined for. Its checks ran when it joined; a GPU may have
 * broken since. True when it takes the place. */
static bool check_health_for_place(ddp_rdzv_t *r, const ddp_rdzv_world_t *world)
{
    char before[96];
    if (r->cfg->hot_spares <= 0 || world->round <= r->round + 1)
        return true;
    snprintf(before, sizeof before, "taking its place in round %d", world->round);
    return healthy_to_join(r, before) == CHECKED_HEALTHY;
}

/* A pause of the job, as the news or a waiting launcher's assign key says it. */
typedef struct {
    int round, number;
    bool store_stops; /* the store's host was stopped: the store stands still with it */
    bool own;         /* this launcher's own (Ctrl-Z here) */
    char who[320];    /* the node that was stopped, in words */
} pause_t;

/* Node `p->who` was stopped (Ctrl-Z there) as pause number `p->number` (rdzv/coord.c):
 * this node's workers stop too, and the thread waits for <round>/resume.<number> with no
 * deadline and no heartbeat, since the store may stand still (a store that goes away
 * closes the connection). Where it answers meanwhile, this node's own pause requests go
 * at once (the resume of its own pause among them); else they wait for the resume. 0
 * once continued, 1 when this launcher ends meanwhile (posts to take), or a store error.
 * The loop's other posts wait until the resume. */
static int await_resume(ddp_rdzv_t *r, const pause_t *p)
{
    char key[512];
    const char *keys[1] = {key};
    uint64_t count;
    int err, deferred = 0;
    ddp_rdzv_key(key, sizeof key, r->cfg->run_id, "%d/resume.%d", p->round, p->number);
    ddp_rdzv_command(r, DDP_RDZV_CMD_PAUSE, NULL, p->own, "%s", p->who);
    while ((err = ddp_store_client_wait_or_wake(r->waiter, keys, 1, INFINITY, r->wake_fd)) == 1) {
        if (ddp_rdzv_ending(r))
            return 1;
        while (read(r->wake_fd, &count, sizeof count) < 0 && errno == EINTR)
            ;
        int request = ddp_rdzv_take_pause_request(r);
        if (request != 0 && p->store_stops)
            deferred = request;
        else if (request != 0 && (err = send_pause_request(r, p->round, request)) != 0)
            return err;
    }
    if (err) {
        r->waiter_failed = true;
        return err;
    }
    /* The beat sent before the pause has its answer now: take it, and beat afresh. */
    if ((err = ddp_store_client_ping(r->client)) != 0)
        return err;
    r->next_beat = 0;
    ddp_rdzv_command(r, DDP_RDZV_CMD_CONTINUE, NULL, p->own, "%s", p->who);
    if (deferred != 0 && (err = send_pause_request(r, p->round, deferred)) != 0)
        return err;
    return 0;
}

/* The pause of round `round` in `text`, "K host|node ID WHO" (after the news' "pause "),
 * or false. */
static bool pause_from(const ddp_rdzv_t *r, const char *text, int round, pause_t *p)
{
    char kind[8], id[DDP_RDZV_ID_MAX];
    int who = 0;
    if (sscanf(text, "%d %7s %95s %n", &p->number, kind, id, &who) != 3 || who == 0 ||
        p->number < 1 || (strcmp(kind, "host") != 0 && strcmp(kind, "node") != 0))
        return false;
    p->round = round;
    p->store_stops = strcmp(kind, "host") == 0;
    p->own = strcmp(id, r->id) == 0;
    snprintf(p->who, sizeof p->who, "%s", text + who);
    return true;
}

/* A waiting launcher's answer at `key`: a verdict, or "pause R K host|node ID WHO" (round
 * R paused by a node's Ctrl-Z); ANSWER_END where this launcher ends (the store lost, or a
 * malformed answer: said). */
enum { ANSWER_END, ANSWER_VERDICT, ANSWER_PAUSE };
static int read_answer(ddp_rdzv_t *r, const char *key, ddp_rdzv_verdict_t *v, pause_t *pause)
{
    ddp_buf_t text = DDP_BUF_INIT;
    int round = -1, at = 0, answer = ANSWER_END;
    if (read_key(r, key, &text) != 0)
        (void)store_lost(r);
    else if (sscanf(ddp_buf_str(&text), "pause %d %n", &round, &at) == 1 && at > 0 && round >= 0 &&
             pause_from(r, ddp_buf_str(&text) + at, round, pause))
        answer = ANSWER_PAUSE;
    else if (read_verdict(r, key, &text, v))
        answer = ANSWER_VERDICT;
    ddp_buf_free(&text);
    return answer;
}

/* `stop`: the last round's outcome, whose STOP the loop gets once our join is written
 * (NULL on the first join). */
static node_phase_t node_join(ddp_rdzv_t *r, ddp_rdzv_world_t *world,
                              const ddp_rdzv_verdict_t *stop)
{
    const ddp_launch_config_t *cfg = r->cfg;
    if (healthy_to_join(r, "joining") != CHECKED_HEALTHY)
        return NODE_END;
    /* The wait counts from the join: the checks' own time is no wait for a place. */
    double wait = ddp_config_dynamic(cfg) ? cfg->rdzv_conf.join_timeout : cfg->rdzv_conf.timeout;
    double started = ddp_clock_mono(), deadline = started + wait + GRACE;
    /* A hot spare waits for its place as long as the job runs: the coordinator ends its
     * wait (a place, the job's end, or not needed). */
    if (ddp_config_dynamic(cfg) && cfg->hot_spares > 0)
        deadline = INFINITY;
    double next_note = started + NOTE_FIRST;
    char key[512];
    if (join_record(r) != 0 || (stop != NULL && stop_after_join(r, stop) != 0))
        return store_lost(r);
    int told = 0; /* pauses of the store's host told here (Ctrl-Z there) */
    ddp_rdzv_assign_key(key, sizeof key, r->cfg->run_id, r->id, r->seq, told);
    ddp_log_debug(r->log, "joined the rendezvous at %s:%d; waiting for a place in a round",
                  cfg->master_addr, cfg->master_port);
    for (;;) {
        double now = ddp_clock_mono();
        int rc = await_key(r, key, fmin(next_note, deadline));
        bool ignored = false;
        ddp_rdzv_verdict_t v;
        if (rc == AWAIT_READY) {
            pause_t pause;
            int answer = read_answer(r, key, &v, &pause);
            if (answer == ANSWER_END)
                return NODE_END;
            if (answer == ANSWER_PAUSE) { /* the job's clock stood still, and this wait's */
                double since = ddp_clock_mono();
                int err = await_resume(r, &pause);
                if (err < 0)
                    return store_lost(r);
                if (!take_posts(r, NULL, &ignored)) /* (those that came meanwhile) */
                    return NODE_END;
                deadline += ddp_clock_mono() - since;
                next_note = ddp_clock_mono() + NOTE_FIRST;
                ddp_rdzv_assign_key(key, sizeof key, r->cfg->run_id, r->id, r->seq, ++told);
                continue;
            }
            if (v.kind != DDP_RDZV_VERDICT_WORLD)
                return finish(r, &v, true);
            if (!check_health_for_place(r, &v.world) || !await_stopped(r))
                return NODE_END;
            if (v.message[0] != '\0') /* the nodes' environments differ */
                ddp_log_warn(r->log, "%s", v.message);
            if (!read_job_env(r, v.world.nenv))
                return NODE_END;
            *world = v.world;
            r->round = v.world.round;
            r->node_rank = v.world.node_rank;
            r->local_running = true;
            ddp_rdzv_command(r, DDP_RDZV_CMD_START, world, 0, NULL);
            return NODE_RUN;
        }
        if (rc < 0)
            return store_lost(r);
        if (rc == AWAIT_WOKEN && !take_posts(r, NULL, &ignored))
            return NODE_END;
        now = ddp_clock_mono();
        if (now >= deadline) {
            ddp_rdzv_command(r, DDP_RDZV_CMD_FINISH, NULL, DDP_EXIT_RDZV_FAILED,
                             "the rendezvous at %s:%d gave this node no place within %.0f s",
                             cfg->master_addr, cfg->master_port, wait + GRACE);
            return NODE_END;
        }
        if (claim_note(&next_note, now, deadline))
            note_status(r, key);
    }
}

static node_phase_t node_run(ddp_rdzv_t *r, const ddp_rdzv_world_t *world, ddp_rdzv_verdict_t *v)
{
    char key[512], news[512];
    bool reported = false, hang_seen = false;
    ddp_rdzv_key(key, sizeof key, r->cfg->run_id, "%d/outcome", world->round);
    /* <round>/news comes with the outcome, or with a hang report that another node asks
     * this one's rows for, or with a pause of the store's host (then the next news is at
     * news.<pauses>); after a hang the thread waits for the outcome itself. */
    r->pauses = 0;
    ddp_rdzv_news_key(news, sizeof news, r->cfg->run_id, world->round, r->pauses);
    for (;;) {
        int rc = await_key(r, hang_seen ? key : news, INFINITY);
        if (rc < 0)
            return store_lost(r);
        if (rc == AWAIT_WOKEN && !take_posts(r, world, &reported))
            return NODE_END;
        if (rc != AWAIT_READY)
            continue;
        /* news holds the outcome, or "hang" from a hang's reporter */
        const char *from = hang_seen ? key : news;
        ddp_buf_t text = DDP_BUF_INIT;
        if (read_key(r, from, &text) != 0) {
            ddp_buf_free(&text);
            return store_lost(r);
        }
        if (!hang_seen && text.len == 4 && memcmp(text.data, "hang", 4) == 0) {
            ddp_buf_free(&text);
            hang_seen = true;
            ddp_rdzv_command(r, DDP_RDZV_CMD_HANG, NULL, 0, NULL);
            continue;
        }
        pause_t pause;
        if (!hang_seen && text.len > 6 && memcmp(text.data, "pause ", 6) == 0 &&
            pause_from(r, ddp_buf_str(&text) + 6, world->round, &pause) &&
            pause.number == r->pauses + 1) {
            ddp_buf_free(&text);
            if (await_resume(r, &pause) < 0)
                return store_lost(r);
            if (!take_posts(r, world, &reported))
                return NODE_END;
            r->pauses = pause.number;
            ddp_rdzv_news_key(news, sizeof news, r->cfg->run_id, world->round, r->pauses);
            continue;
        }
        bool ok = read_verdict(r, from, &text, v);
        ddp_buf_free(&text);
        if (!ok)
            return NODE_END;
        if (v->kind == DDP_RDZV_VERDICT_END && v->exit_code != DDP_EXIT_OK) {
            /* The job failed: this node's workers stop on FINISH; the thread stays (and
             * beats) until they have, so that their failures reach the job's report. */
            finish(r, v, false);
            (void)await_stopped(r);
            return NODE_END;
        }
        if (v->kind == DDP_RDZV_VERDICT_DONE || v->kind == DDP_RDZV_VERDICT_END)
            return finish(r, v, false);
        if (v->kind == DDP_RDZV_VERDICT_WORLD) {
            ddp_rdzv_command(r, DDP_RDZV_CMD_FINISH, NULL, DDP_EXIT_RDZV_FAILED,
                             "the rendezvous store at %s:%d holds a world where round %d's "
                             "outcome should be",
                             r->cfg->master_addr, r->cfg->master_port, world->round);
            return NODE_END;
        }
        return NODE_STOP;
    }
}

static node_phase_t node_stop(const ddp_rdzv_t *r, const ddp_rdzv_world_t *world,
                              const ddp_rdzv_verdict_t *v)
{
    if (v->kind == DDP_RDZV_VERDICT_STOP_FAILED)
        ddp_log_warn(r->log, "round %d failed (%s): restarting every node as round %d",
                     world->round, v->message, world->round + 1);
    else
        ddp_log_warn(r->log, "round %d: the nodes changed (%s): re-forming the job as round %d",
                     world->round, v->message, world->round + 1);
    return NODE_JOIN;
}

void *ddp_rdzv_node_run(void *arg)
{
    ddp_rdzv_t *r = arg;
    ddp_rdzv_world_t world = {0};
    ddp_rdzv_verdict_t outcome;
    const ddp_rdzv_verdict_t *stop = NULL; /* the outcome the next join is to act on */
    node_phase_t phase = NODE_CONNECT;
    r->round = -1;
    r->node_rank = -1;
    while (phase != NODE_END) {
        switch (phase) {
        case NODE_CONNECT:
            phase = node_connect(r);
            break;
        case NODE_JOIN:
            phase = node_join(r, &world, stop);
            break;
        case NODE_RUN:
            phase = node_run(r, &world, &outcome);
            break;
        case NODE_STOP:
            phase = node_stop(r, &world, &outcome);
            stop = &outcome;
            break;
        case NODE_END:
            break;
        }
    }
    return NULL;
}
