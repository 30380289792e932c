/* The rendezvous coordinator (see rdzv/coord.h; phases in rdzv/backend.h). Runs on the
 * loop of the launcher that serves the store; never blocks, never closes a connection. */
#include "rdzv/coord.h"

#include "error.h"
#include "io.h"
#include "rdzv/backend.h"
#include "rdzv/envcheck.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TICK_MS      100 /* deadlines, last calls and the liveness check */
#define STATUS_EVERY 1.0 /* s between refreshes of what a forming round waits for */
/* A tick this late (s) means the loop was busy: nobody's silence is judged on it. */
#define LATE_TICK   1.0
#define STATS_EVERY 5.0 /* s between the debug lines on the store's load */

/* The verdict at `key`, and at `also` too when it is not NULL. */
static void publish(ddp_rdzv_coord_t *c, const char *key, const char *also,
                    const ddp_rdzv_verdict_t *v)
{
    ddp_buf_t text = DDP_BUF_INIT;
    if (ddp_rdzv_verdict_format(v, &text) != 0 ||
        ddp_store_server_set(c->server, key, text.data, text.len) != 0 ||
        (also != NULL && ddp_store_server_set(c->server, also, text.data, text.len) != 0))
        ddp_log_error(c->log, "rendezvous: unable to publish '%s': out of memory", key);
    ddp_buf_free(&text);
}

static void publish_assign(ddp_rdzv_coord_t *c, const ddp_rdzv_member_t *m,
                           const ddp_rdzv_verdict_t *v)
{
    char key[512];
    ddp_rdzv_assign_key(key, sizeof key, c->cfg->run_id, m->id, m->join.seq, m->assign_pauses);
    publish(c, key, NULL, v);
}

static void end_pause(ddp_rdzv_coord_t *c);

static void publish_outcome(ddp_rdzv_coord_t *c, const ddp_rdzv_verdict_t *v)
{
    char key[512], news[512];
    end_pause(c); /* the launchers that wait for the resume read the news after it */
    ddp_rdzv_key(key, sizeof key, c->cfg->run_id, "%d/outcome", c->round);
    /* What the running launchers wait on: the outcome itself (read in the one round trip
     * after their wait), or a hang report's request, or a pause. */
    ddp_rdzv_news_key(news, sizeof news, c->cfg->run_id, c->round, c->pauses);
    publish(c, key, news, v);
    c->outcome_published = true;
}

/* A launcher waiting for a place (a hot spare, a latecomer) is told of the pause on at its
 * assign key, and waits for the same resume as the running ones; its answer comes at the
 * next assign key (ddp_rdzv_assign_key). */
static void tell_pause(ddp_rdzv_coord_t *c, ddp_rdzv_member_t *m)
{
    char key[512], text[sizeof c->pause_text + 32];
    if (!c->paused || !m->joined || m->own || m->lost || !m->connected)
        return;
    int n = snprintf(text, sizeof text, "pause %d %s", c->round, c->pause_text);
    ddp_rdzv_assign_key(key, sizeof key, c->cfg->run_id, m->id, m->join.seq, m->assign_pauses);
    if (ddp_store_server_set(c->server, key, text, (size_t)n) == 0)
        m->assign_pauses++;
}

/* Member `by` (Ctrl-Z on its node) pauses the running round, or joins the pause on: its
 * launchers are told at the round's news ("pause K host|node ID WHO") to stop their workers and
 * wait, without heartbeats, for <round>/resume.K, which comes once every node that paused has
 * continued (pause_off). False where the others cannot be told (no round running, its
 * outcome out, a hang report under way): that node stops alone. */
static bool turn_pause_on(ddp_rdzv_coord_t *c, ddp_rdzv_member_t *by)
{
    if (by->pausing)
        return true;
    if (!c->paused) {
        char news[512];
        ddp_buf_t text = DDP_BUF_INIT;
        ddp_rdzv_news_key(news, sizeof news, c->cfg->run_id, c->round, c->pauses);
        ddp_store_key_t key = {(const uint8_t *)news, strlen(news)};
        /* Only a running round's launchers wait on its news (and the joined ones on their
         * assign keys); one there already (an outcome, a hang report) is theirs to read
         * first. */
        if (c->phase != COORD_RUNNING || c->outcome_published || c->nrunning + c->njoined < 2 ||
            ddp_store_exists(ddp_store_server_store(c->server), key))
            return false;
        /* "host": the store stands still with it; "node": it answers meanwhile. */
        int err = by->own
                      ? ddp_buf_printf(&text, "pause %d host %s the node serving the job's store",
                                       c->pauses + 1, by->id)
                      : ddp_buf_printf(&text, "pause %d node %s node %d (%.200s)", c->pauses + 1,
                                       by->id, by->node_rank, by->join.host);
        if (err == 0)
            err = ddp_store_server_set(c->server, news, text.data, text.len);
        if (err == 0) /* (the text is empty where it could not be made) */
            snprintf(c->pause_text, sizeof c->pause_text, "%s",
                     ddp_buf_str(&text) + strlen("pause "));
        ddp_buf_free(&text);
        if (err != 0)
            return false;
        c->paused = true;
        c->pauses++;
        for (size_t i = 0; i < c->nmembers; i++)
            tell_pause(c, c->members[i]);
    }
    by->pausing = true;
    c->npausing++;
    return true;
}

/* Member `by` continued: the pause ends once no node that paused is still stopped. */
static void pause_off(ddp_rdzv_coord_t *c, ddp_rdzv_member_t *by)
{
    if (!by->pausing)
        return;
    by->pausing = false;
    if (--c->npausing == 0)
        end_pause(c);
}

static ddp_rdzv_member_t *own_member(const ddp_rdzv_coord_t *c)
{
    for (size_t i = 0; i < c->nmembers; i++)
        if (c->members[i]->own)
            return c->members[i];
    return NULL;
}

int ddp_rdzv_coord_pause(ddp_rdzv_coord_t *c)
{
    ddp_rdzv_member_t *own = own_member(c);
    return own != NULL && turn_pause_on(c, own) ? c->pauses : 0;
}

/* The pause on, if one is: the launchers waiting for it go on (also when the round ends
 * or the job does before the nodes that paused continue). */
static void end_pause(ddp_rdzv_coord_t *c)
{
    char key[512];
    if (!c->paused)
        return;
    c->paused = false;
    c->npausing = 0;
    for (size_t i = 0; i < c->nmembers; i++)
        c->members[i]->pausing = false;
    ddp_rdzv_key(key, sizeof key, c->cfg->run_id, "%d/resume.%d", c->round, c->pauses);
    if (ddp_store_server_set(c->server, key, "1", 1) != 0)
        ddp_log_error(c->log, "rendezvous: unable to publish '%s': out of memory", key);
}

void ddp_rdzv_coord_resume(ddp_rdzv_coord_t *c, int pause)
{
    ddp_rdzv_member_t *own = own_member(c);
    if (pause == c->pauses && own != NULL)
        pause_off(c, own);
}

bool ddp_rdzv_coord_paused(const ddp_rdzv_coord_t *c)
{
    return c->paused;
}

/* "pause R" or "resume R" at pause/<id>: Ctrl-Z on that node while round R runs, and its
 * continue. */
static void on_pause_request(ddp_rdzv_coord_t *c, ddp_rdzv_member_t *m, const uint8_t *value,
                             size_t len)
{
    char text[64];
    int round = -1, end = 0;
    if (len >= sizeof text)
        return;
    memcpy(text, value, len);
    text[len] = '\0';
    bool pause = sscanf(text, "pause %d%n", &round, &end) == 1 && (size_t)end == len;
    bool resume = !pause && sscanf(text, "resume %d%n", &round, &end) == 1 && (size_t)end == len;
    if ((!pause && !resume) || round != c->round || !m->in_round) {
        ddp_log_debug(c->log, "rendezvous: launcher %s's pause request '%s' is not for now", m->id,
                      text);
        return;
    }
    if (pause && !turn_pause_on(c, m))
        ddp_log_warn(c->log,
                     "node %d (%s) was stopped (Ctrl-Z there) while the job cannot pause (no "
                     "round running, or its end or a hang report on the way): it stops alone",
                     m->node_rank, m->join.host);
    else if (resume)
        pause_off(c, m);
}

/* The keep-alive limit: a member silent this long (s) is lost. */
static double beat_limit(const ddp_rdzv_coord_t *c)
{
    return c->cfg->rdzv_conf.keep_alive_interval * c->cfg->rdzv_conf.keep_alive_max_attempt;
}

/* Sends joined member `m` away alone (status 5, `message` on its side), the job left as it
 * is: a launcher that does not belong to the running job. */
static void refuse(ddp_rdzv_coord_t *c, ddp_rdzv_member_t *m, const char *message)
{
    ddp_rdzv_verdict_t end = {.kind = DDP_RDZV_VERDICT_END, .exit_code = DDP_EXIT_RDZV_FAILED};
    snprintf(end.message, sizeof end.message, "%s", message);
    if (m->join.node_rank >= 0)
        ddp_log_warn(c->log, "rendezvous: refused launcher %s (node %d, %s): %s", m->id,
                     m->join.node_rank, m->join.host, message);
    else
        ddp_log_warn(c->log, "rendezvous: refused launcher %s (on %s): %s", m->id, m->join.host,
                     message);
    publish_assign(c, m, &end);
    if (m->joined) {
        m->joined = false;
        c->njoined--;
        if (c->backend->forget != NULL)
            c->backend->forget(c, m);
    }
}

/* OVER: once no other launcher is connected, `left` lets our own one go. */
static void check_left(ddp_rdzv_coord_t *c)
{
    if (c->phase != COORD_OVER || c->left_published || c->nconnected > 0)
        return;
    char key[512];
    ddp_rdzv_key(key, sizeof key, c->cfg->run_id, "left");
    if (ddp_store_server_set(c->server, key, "1", 1) == 0)
        c->left_published = true;
}

/* The job is over: the running round's outcome and every waiting launcher's assign
 * say so, and so will the answer to any later join. */
static void job_over(ddp_rdzv_coord_t *c, int exit_code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void job_over(ddp_rdzv_coord_t *c, int exit_code, const char *fmt, ...)
{
    if (c->phase == COORD_OVER)
        return;
    ddp_rdzv_verdict_t *end = &c->end;
    *end = (ddp_rdzv_verdict_t){.kind = DDP_RDZV_VERDICT_END, .exit_code = exit_code};
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(end->message, sizeof end->message, fmt, ap);
    va_end(ap);
    ddp_log_debug(c->log, "rendezvous: the job ends (%d): %s", exit_code, end->message);
    if (c->phase == COORD_RUNNING && !c->outcome_published)
        publish_outcome(c, end);
    c->phase = COORD_OVER;
    for (size_t i = 0; i < c->nmembers; i++) {
        ddp_rdzv_member_t *m = c->members[i];
        if (m->joined && !m->lost)
            publish_assign(c, m, end);
        m->joined = false;
    }
    check_left(c);
}

/* Every member's workers succeeded. */
static void job_done(ddp_rdzv_coord_t *c)
{
    ddp_rdzv_verdict_t done = {.kind = DDP_RDZV_VERDICT_DONE};
    publish_outcome(c, &done);
    job_over(c, DDP_EXIT_OK, "the job finished before this node could join it");
}

static void tell_record(ddp_rdzv_coord_t *c, int round, int restarts, int n);

/* The running round stops (a failure, a lost or a new node); the next one forms. */
static void round_stop_as(ddp_rdzv_coord_t *c, bool failed, int exit_code, const char *message)
{
    if (failed && c->restarts >= c->cfg->max_restarts) {
        job_over(c, exit_code,
                 "the job failed in round %d, with no restart left (--max-restarts=%d): %s",
                 c->round, c->cfg->max_restarts, message);
        return;
    }
    ddp_rdzv_verdict_t stop = {.kind = failed ? DDP_RDZV_VERDICT_STOP_FAILED
                                              : DDP_RDZV_VERDICT_STOP_REFORM};
    snprintf(stop.message, sizeof stop.message, "%s", message);
    publish_outcome(c, &stop);
    /* A failed round is a restart spent from now on: etcd's record says so before the next
     * round forms, so that a launcher taking the job over meanwhile (this one leaves, its
     * node excluded) counts it as this coordinator would. */
    if (failed)
        tell_record(c, c->round, c->restarts + 1, c->nrunning);
    for (int i = 0; i < c->nrunning; i++) {
        ddp_rdzv_member_t *m = c->running[i];
        m->in_round = false;
        if (!m->lost && !m->joined) {
            m->awaited = true;
            c->nawaited++;
        }
    }
    c->nrunning = 0;
    c->restarts += failed;
    c->round++;
    c->phase = COORD_FORMING;
    c->forming_since = ddp_clock_mono();
    c->min_since = -1;
    c->next_status = 0;
}

/* A round that ends because a worker failed (exit 1 when no restart is left). */
static void round_stop(ddp_rdzv_coord_t *c, bool failed, const char *message)
{
    round_stop_as(c, failed, DDP_EXIT_WORKER_FAILED, message);
}

/* The members' environment records, compared (envcheck.h): a difference is a warning in
 * `message` for every node, or with --env-check-strict the end of the job (false). */
static bool check_environments(ddp_rdzv_coord_t *c, ddp_rdzv_member_t **ranked, int n,
                               char *message, size_t cap)
{
    const char **records = malloc((size_t)n * sizeof *records);
    ddp_buf_t diff = DDP_BUF_INIT;
    if (records == NULL)
        return true;
    for (int i = 0; i < n; i++)
        records[i] = ranked[i]->env;
    int differ = ddp_envcheck_compare(records, n, 5, &diff);
    free(records);
    bool strict = c->cfg->env_check_strict;
    if (differ > 0 && strict)
        job_over(c, DDP_EXIT_RDZV_FAILED,
                 "the nodes' environments differ (--env-check-strict: no worker started):\n%s",
                 ddp_buf_str(&diff));
    else if (differ > 0)
        snprintf(message, cap,
                 "the nodes' environments differ (a multi-node job may hang or "
                 "fail in its first collective):\n%s",
                 ddp_buf_str(&diff));
    ddp_buf_free(&diff);
    return differ == 0 || !strict;
}

static void status_running(ddp_rdzv_coord_t *c, int n);

/* The forming round closes with ranked[0..n): each learns its share, at its assign key. */
static const char *running_id(void *ctx, int i)
{
    const ddp_rdzv_coord_t *c = ctx;
    return c->running[i]->id;
}

/* The round's record, for etcd (ddp_rdzv_coord_on_formed): `round` and the restarts spent
 * with it, the running members' ids (the first n). */
static void tell_record(ddp_rdzv_coord_t *c, int round, int restarts, int n)
{
    ddp_buf_t record = DDP_BUF_INIT;
    if (c->formed != NULL &&
        ddp_rdzv_round_record_format(&record, round, restarts, running_id, c, n) == 0)
        c->formed(c->formed_ctx, ddp_buf_str(&record));
    ddp_buf_free(&record);
}

static void form_round(ddp_rdzv_coord_t *c, ddp_rdzv_member_t **ranked, int n)
{
    if (c->round > 0) {
        /* The last round's keys go, as between attempts on one node; ours stay. (Every
         * member has rejoined, but a node's old workers may still be stopping: each
         * launcher starts its new ones only after they end, yet a slow one could still
         * write here.) */
        size_t cleared = ddp_store_clear(ddp_store_server_store(c->server), DDP_STORE_KEEP);
        ddp_log_debug(c->log, "cleared %zu key(s) of round %d from the store", cleared,
                      c->round - 1);
    }
    int world_size = 0;
    for (int i = 0; i < n; i++)
        world_size += ranked[i]->join.nproc;
    double now = ddp_clock_mono();
    ddp_rdzv_verdict_t v = {.kind = DDP_RDZV_VERDICT_WORLD};
    if (!check_environments(c, ranked, n, v.message, sizeof v.message))
        return;
    v.world = (ddp_rdzv_world_t){.round = c->round,
                                 .restarts = c->restarts,
                                 .nnodes = n,
                                 .world_size = world_size,
                                 .nenv = c->cfg->nenv};
    c->phase = COORD_RUNNING;
    c->nrunning = n;
    c->nsucceeded = 0;
    c->outcome_published = false;
    c->pauses = 0; /* (a pause ended with the last round's outcome) */
    for (int i = 0; i < n; i++) {
        ddp_rdzv_member_t *m = ranked[i];
        c->running[i] = m;
        m->joined = false;
        m->in_round = true;
        m->succeeded = false;
        m->node_rank = i;
        m->last_beat = now; /* a fresh keep-alive window for the round */
        c->njoined--;
        v.world.node_rank = i;
        publish_assign(c, m, &v);
        v.world.rank_offset += m->join.nproc;
    }
    status_running(c, n);
    ddp_log_debug(c->log, "rendezvous: round %d formed: %d node(s), %d workers", c->round, n,
                  world_size);
    tell_record(c, c->round, c->restarts, n);
}

static void on_tick(uv_timer_t *timer);

/* Forms the round if it can close now; else, when it can close at a known time (a last
 * call's end), the next tick comes then rather than up to TICK_MS later. */
/* --hot-spares=K: while a round runs, the first K launchers left waiting (by arrival) stay
 * as spares; the others are told they are not needed. */
static int by_arrival(const void *a, const void *b)
{
    const ddp_rdzv_member_t *x = *(ddp_rdzv_member_t *const *)a,
                            *y = *(ddp_rdzv_member_t *const *)b;
    return x->arrival < y->arrival ? -1 : x->arrival > y->arrival;
}

static void release_extra_spares(ddp_rdzv_coord_t *c)
{
    if (c->cfg->hot_spares <= 0 || c->njoined <= c->cfg->hot_spares)
        return;
    ddp_rdzv_member_t **waiting = malloc((size_t)c->njoined * sizeof *waiting);
    int n = 0;
    for (size_t i = 0; waiting != NULL && i < c->nmembers && n < c->njoined; i++)
        if (c->members[i]->joined)
            waiting[n++] = c->members[i];
    if (waiting != NULL)
        qsort(waiting, (size_t)n, sizeof *waiting, by_arrival);
    for (int k = c->cfg->hot_spares; waiting != NULL && k < n; k++) {
        ddp_rdzv_member_t *m = waiting[k];
        ddp_rdzv_verdict_t end = {.kind = DDP_RDZV_VERDICT_END, .exit_code = DDP_EXIT_RDZV_FAILED};
        snprintf(end.message, sizeof end.message,
                 "the job runs with its nodes and has %d hot spare(s) waiting already "
                 "(--hot-spares): the launcher on %.200s is not needed",
                 c->cfg->hot_spares, m->join.host);
        m->joined = false;
        c->njoined--;
        publish_assign(c, m, &end);
    }
    free(waiting);
}

/* --hot-spares: a launcher waiting while a round runs with all the nodes it may have is a
 * spare, which takes a lost node's place with that node's global ranks. With a
 * --nproc-per-node no node of the round has, it could not without moving every other
 * node's: it is sent away as it comes. O(nodes), for each spare. */
static void refuse_misfit_spare(ddp_rdzv_coord_t *c, ddp_rdzv_member_t *m)
{
    enum { NAMED_MAX = 4 };
    int named[NAMED_MAX], nnamed = 0;
    bool fits = false;
    if (c->cfg->hot_spares <= 0 || c->phase != COORD_RUNNING || c->nrunning < c->cfg->nnodes_max ||
        !m->joined || m->own)
        return;
    ddp_buf_t why = DDP_BUF_INIT, counts = DDP_BUF_INIT;
    for (int i = 0; i < c->nrunning && !fits; i++) {
        int nproc = c->running[i]->join.nproc, k = 0;
        fits = nproc == m->join.nproc;
        while (k < nnamed && named[k] != nproc)
            k++;
        if (k == nnamed && nnamed < NAMED_MAX) {
            ddp_buf_printf(&counts, "%s%d", nnamed > 0 ? " or " : "", nproc);
            named[nnamed++] = nproc;
        }
    }
    if (!fits &&
        ddp_buf_printf(&why,
                       "with --nproc-per-node=%d this launcher cannot be a hot spare of this job: "
                       "its nodes run %s worker(s) each, and a spare takes a lost node's place "
                       "with that node's global ranks, every other node keeping its own (give "
                       "a spare the --nproc-per-node of the nodes it may replace)",
                       m->join.nproc, ddp_buf_str(&counts)) == 0)
        refuse(c, m, ddp_buf_str(&why));
    ddp_buf_free(&why);
    ddp_buf_free(&counts);
}

/* Resumed from a round record (etcd) that names none of the launchers joined now: the old
 * job's launchers are all gone (the whole job crashed and was started again within a
 * lease's time, the record's launcher not deposed yet), and this is a new job. Survivors
 * of a lost elected launcher are in the record (a round that closes with hot spares alone
 * before any of them rejoins, after the last call at --nnodes' minimum, is a new job's
 * too). */
static bool resumed_by_nobody(const ddp_rdzv_coord_t *c)
{
    if (!c->resumed)
        return false;
    for (size_t i = 0; i < c->nmembers; i++)
        if (c->members[i]->joined && c->members[i]->node_rank >= 0)
            return false;
    return true;
}

static void try_close(ddp_rdzv_coord_t *c, double now)
{
    if (c->phase != COORD_FORMING)
        return;
    /* A new job's round is round 0, with the whole restart budget (set as it closes, so
     * that its ranks are chosen as a first round's; put back where it does not). */
    int round = c->round, restarts = c->restarts;
    bool fresh = resumed_by_nobody(c);
    if (fresh)
        c->round = c->restarts = 0;
    int n = c->backend->close(c, now, c->running);
    if (fresh && n > 0) {
        ddp_log_info(c->log,
                     "rendezvous: the round record of round %d (%d restart(s) spent) names no "
                     "launcher of this job: a new job, from round 0 with the whole restart "
                     "budget (the old job's launchers are gone)",
                     round - 1, restarts);
        free(c->last_ranks);
        c->last_ranks = NULL;
    } else if (fresh) {
        c->round = round;
        c->restarts = restarts;
    }
    if (n > 0) {
        c->resumed = false;
        form_round(c, c->running, n);
        for (size_t i = 0; c->phase == COORD_RUNNING && i < c->nmembers; i++)
            refuse_misfit_spare(c, c->members[i]);
        release_extra_spares(c);
        return;
    }
    /* (A time already past waits for something else: a join or a loss calls us.) */
    double due = c->backend->due != NULL ? c->backend->due(c) : -1;
    if (due <= now || !uv_is_active((uv_handle_t *)&c->timer))
        return;
    /* (+1: the loop's clock is in whole ms, behind ours by up to one.) */
    uint64_t ms = (uint64_t)((due - now) * 1000) + 1;
    if (ms < uv_timer_get_due_in(&c->timer))
        uv_timer_start(&c->timer, on_tick, ms, TICK_MS);
}

/* `m` is gone: it leaves whatever it was part of. */
static void member_lost(ddp_rdzv_coord_t *c, ddp_rdzv_member_t *m, const char *why)
{
    if (m->lost)
        return;
    m->lost = true;
    m->lost_joined = m->joined;
    if (m->joined) {
        m->joined = false;
        c->njoined--;
        if (c->backend->forget != NULL)
            c->backend->forget(c, m);
    }
    if (m->awaited) {
        m->awaited = false;
        c->nawaited--;
    }
    if (c->phase == COORD_RUNNING && m->in_round && !c->outcome_published) {
        char message[DDP_RDZV_MSG_MAX];
        snprintf(message, sizeof message, "node %d (%.255s)%s: %s", m->node_rank, m->join.host,
                 m->left ? " left the job" : "'s launcher stopped answering", why);
        ddp_log_debug(c->log, "rendezvous: %s", message);
        /* A static job inside a Slurm step cannot get it back: srun starts no task again,
         * so the next round would only wait out its timeout. */
        if (!c->backend->loss_reforms && c->cfg->slurm_step) {
            job_over(c, DDP_EXIT_RDZV_FAILED,
                     "%s; in a Slurm job step nothing starts it again (srun restarts no "
                     "task): the job ends instead of waiting for it",
                     message);
            return;
        }
        /* A job that cannot re-form without it and has no restart left could not keep its
         * nodes: 5, as the man page says, not a worker's failure. */
        round_stop_as(c, !c->backend->loss_reforms, DDP_EXIT_RDZV_FAILED, message);
    }
    if (c->phase == COORD_FORMING)
        try_close(c, ddp_clock_mono());
}

/* Whether join `j` has the job's flags; else why not into `why`, naming both sides (`us`:
 * this side in words). */
static bool same_job(const ddp_rdzv_coord_t *c, const ddp_rdzv_member_t *m,
                     const ddp_rdzv_join_t *j, const char *us, ddp_buf_t *why)
{
    const ddp_launch_config_t *cfg = c->cfg;
    char who[DDP_RDZV_ID_MAX + 300];
    if (j->node_rank >= 0)
        snprintf(who, sizeof who, "node %d (%s)", j->node_rank, j->host);
    else
        snprintf(who, sizeof who, "launcher %s", m->id);
    if (j->nnodes_min != cfg->nnodes_min || j->nnodes_max != cfg->nnodes_max) {
        if (j->nnodes_min == j->nnodes_max && cfg->nnodes_min == cfg->nnodes_max)
            ddp_buf_printf(why, "%s runs with --nnodes=%d, %s with %d", who, j->nnodes_max, us,
                           cfg->nnodes_max);
        else
            ddp_buf_printf(why, "%s runs with --nnodes=%d:%d, %s with %d:%d", who, j->nnodes_min,
                           j->nnodes_max, us, cfg->nnodes_min, cfg->nnodes_max);
        return false;
    }
    if (j->max_restarts != cfg->max_restarts) {
        ddp_buf_printf(why,
                       "%s runs with --max-restarts=%d, %s with %d (the restart budget is "
                       "the job's)",
                       who, j->max_restarts, us, cfg->max_restarts);
        return false;
    }
    return true;
}

/* Whether `j` belongs to our job; else the job ends while it forms its first round (a node
 * of it started with other flags: it could not form as asked), and once it has run, only
 * `m` is sent away (a stray: another job's launcher, or one started by mistake). */
static bool admit_flags(ddp_rdzv_coord_t *c, ddp_rdzv_member_t *m, const ddp_rdzv_join_t *j)
{
    char us[300];
    bool formed = c->phase == COORD_RUNNING || c->round > 0;
    ddp_buf_t why = DDP_BUF_INIT;
    if (formed)
        snprintf(us, sizeof us, "the running job");
    else if (c->backend == &ddp_rdzv_static_backend)
        snprintf(us, sizeof us, "node %d (%s)", c->cfg->node_rank, c->host);
    else
        snprintf(us, sizeof us, "this one (%s)", c->own_id);
    bool same = same_job(c, m, j, us, &why);
    if (!same && formed) {
        ddp_buf_puts(&why, "; it is not part of that job (another job or Slurm step on the same "
                           "store? give each its own --master-port and --rdzv-id)");
        refuse(c, m, ddp_buf_str(&why));
    } else if (!same) {
        job_over(c, DDP_EXIT_RDZV_FAILED, "%s", ddp_buf_str(&why));
        publish_assign(c, m, &c->end);
    }
    ddp_buf_free(&why);
    return same;
}

static void on_join(ddp_rdzv_coord_t *c, ddp_rdzv_member_t *m, const ddp_rdzv_join_t *j)
{
    double now = ddp_clock_mono();
    if (m->joined) { /* a join again before an answer: the newest counts */
        m->joined = false;
        c->njoined--;
        if (c->backend->forget != NULL)
            c->backend->forget(c, m);
    }
    if (j->seq != m->join.seq) /* (a join taken again keeps where its answer goes) */
        m->assign_pauses = 0;
    m->join = *j;
    m->last_beat = now;
    m->lost_joined = false;
    if (c->phase == COORD_OVER) {
        publish_assign(c, m, &c->end);
        return;
    }
    if (!admit_flags(c, m, j))
        return;
    if (m->awaited) {
        m->awaited = false;
        c->nawaited--;
    }
    m->joined = true;
    m->arrival = c->arrivals++;
    c->njoined++;
    tell_pause(c, m); /* (joined while ours is about to stop) */
    ddp_buf_t why = DDP_BUF_INIT;
    if (c->backend->admit != NULL && c->backend->admit(c, m, now, &why) != 0) {
        job_over(c, DDP_EXIT_RDZV_FAILED, "%s", ddp_buf_str(&why));
    } else if (c->phase == COORD_RUNNING && !c->outcome_published &&
               c->backend->reform_on_join(c)) {
        char message[64];
        snprintf(message, sizeof message, "%d node(s) waiting to join", c->njoined);
        round_stop(c, false, message);
    } else if (c->phase == COORD_RUNNING) {
        refuse_misfit_spare(c, m);
        release_extra_spares(c);
    }
    ddp_buf_free(&why);
    try_close(c, now);
}

static void on_report(ddp_rdzv_coord_t *c, ddp_rdzv_member_t *m, const ddp_rdzv_report_t *r)
{
    if (c->phase != COORD_RUNNING || r->round != c->round || !m->in_round || c->outcome_published)
        return;
    if (r->failed) {
        char message[DDP_RDZV_MSG_MAX];
        snprintf(message, sizeof message, "node %d (%.255s): %.1200s", m->node_rank, m->join.host,
                 r->message);
        round_stop(c, true, message);
        try_close(c, ddp_clock_mono()); /* the last call runs from the stop */
        return;
    }
    if (!m->succeeded) {
        m->succeeded = true;
        if (++c->nsucceeded == c->nrunning)
            job_done(c);
    }
}

/* Resumed: launcher `id`'s node rank in the last round of the coordinator it takes over
 * from (it keeps its place, as with c10d across rounds), else -1. */
static int last_rank(const ddp_rdzv_coord_t *c, const char *id)
{
    size_t len = strlen(id);
    int rank = 0;
    for (const char *p = c->last_ranks; p != NULL && *p != '\0'; rank++) {
        size_t word = strcspn(p, " ");
        if (word == len && memcmp(p, id, len) == 0)
            return rank;
        p += word + (p[word] == ' ');
    }
    return -1;
}

static ddp_rdzv_member_t *member_new(ddp_rdzv_coord_t *c, const uint8_t *id, size_t len)
{
    if (len == 0 || len >= DDP_RDZV_ID_MAX || memchr(id, '/', len) != NULL)
        return NULL;
    if (c->nmembers == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 64;
        ddp_rdzv_member_t **members = realloc(c->members, cap * sizeof *members);
        ddp_rdzv_member_t **running = realloc(c->running, cap * sizeof *running);
        if (members != NULL)
            c->members = members;
        if (running != NULL)
            c->running = running;
        if (members == NULL || running == NULL)
            return NULL;
        c->cap = cap;
    }
    ddp_rdzv_member_t *m = calloc(1, sizeof *m);
    if (m == NULL)
        return NULL;
    memcpy(m->id, id, len);
    m->connected = true;
    m->own = strcmp(m->id, c->own_id) == 0;
    m->node_rank = last_rank(c, m->id);
    m->dup_since = -1;
    c->members[c->nmembers++] = m;
    c->nconnected += !m->own;
    return m;
}

/* This launcher's --env entries, one a line, for every node's workers ("env"). */
static int publish_env(ddp_rdzv_coord_t *c, ddp_store_server_t *server)
{
    ddp_buf_t text = DDP_BUF_INIT;
    char key[512];
    int err = 0;
    for (int i = 0; i < c->cfg->nenv && err == 0; i++) {
        if (strchr(c->cfg->env_set[i], '=') != NULL)
            err = ddp_buf_printf(&text, "%s\n", c->cfg->env_set[i]);
        else
            ddp_log_warn(c->log,
                         "--env %s: not set on this node, node 0, whose --env values the "
                         "workers of every node get: they get none (give %s=VALUE here)",
                         c->cfg->env_set[i], c->cfg->env_set[i]);
    }
    ddp_rdzv_key(key, sizeof key, c->cfg->run_id, "env");
    if (err == 0)
        err = ddp_store_server_set(server, key, text.len > 0 ? text.data : "", text.len);
    ddp_buf_free(&text);
    return err;
}

/* A launcher ended for a signal ("SIG node N (host): why"): the job ends with 128+SIG,
 * which every launcher forwards to its workers where it forwards that signal. */
static void on_abort(ddp_rdzv_coord_t *c, const void *value, size_t len)
{
    char text[1300], *rest;
    snprintf(text, sizeof text, "%.*s", (int)(len < sizeof text - 1 ? len : sizeof text - 1),
             (const char *)value);
    long sig = strtol(text, &rest, 10);
    bool ok = rest != text && *rest == ' ' && sig > 0 && sig < 65;
    /* A negative number is the exit status a launcher ended the job with (no progress). */
    bool status = rest != text && *rest == ' ' && sig < 0 && sig > -256;
    if (status)
        job_over(c, (int)-sig, "the job was ended by %s", rest + 1);
    else
        job_over(c, ok ? DDP_EXIT_SIGNAL_BASE + (int)sig : DDP_EXIT_RDZV_FAILED,
                 "the job was ended by %s", ok ? rest + 1 : text);
}

/* "WHY" at leave/<id>: that launcher leaves the job alone (--exclude-after,
 * --straggler-action=exclude), and the others go on without it (a hot spare, or the
 * elastic rules, take its place). */
static void on_leave(ddp_rdzv_coord_t *c, ddp_rdzv_member_t *m, const uint8_t *value, size_t len)
{
    char why[400];
    snprintf(why, sizeof why, "%.*s", (int)(len < sizeof why - 1 ? len : sizeof why - 1),
             (const char *)value);
    if (m->node_rank >= 0)
        ddp_log_warn(c->log, "rendezvous: node %d (%s) leaves the job: %s", m->node_rank,
                     m->join.host, why);
    else
        ddp_log_warn(c->log, "rendezvous: the launcher on %s leaves the job: %s", m->join.host,
                     why);
    m->left = true;
    member_lost(c, m, why);
}

/* A launcher judged lost for its silence (hung, or starved on a busy machine) that
 * writes again while still connected is alive after all: it is watched again, and a
 * join it was waiting on when judged lost is taken again (nothing else would answer it:
 * it waits for its place while the others wait for it), unless a new launcher has its
 * place: then it is told so, and the job goes on. `joining`: this write is a new join,
 * which counts instead. */
static void revive(ddp_rdzv_coord_t *c, ddp_rdzv_member_t *m, bool joining)
{
    m->lost = false;
    m->last_beat = ddp_clock_mono();
    ddp_log_info(c->log, "rendezvous: launcher %s, judged lost for its silence, is back", m->id);
    if (!m->lost_joined || joining)
        return;
    m->lost_joined = false;
    const ddp_rdzv_member_t *taker =
        c->backend->taken_by != NULL ? c->backend->taken_by(c, m) : NULL;
    if (taker == NULL) {
        on_join(c, m, &m->join);
        return;
    }
    ddp_rdzv_verdict_t out = {.kind = DDP_RDZV_VERDICT_END, .exit_code = DDP_EXIT_RDZV_FAILED};
    snprintf(out.message, sizeof out.message,
             "node rank %d went to another launcher (%s) while this one was silent past the "
             "keep-alive limit (%g s)",
             m->join.node_rank, taker->id, beat_limit(c));
    publish_assign(c, m, &out);
}

/* The write of `key` (under our prefix) by a launcher's connection, tagged `*tag`. */
static void on_write(void *ctx, void **tag, ddp_store_key_t key, const uint8_t *value, size_t len)
{
    ddp_rdzv_coord_t *c = ctx;
    const char *rest = (const char *)key.data + c->prefix_len;
    size_t rest_len = key.len - c->prefix_len;
    ddp_rdzv_member_t *m = *tag;
    if (rest_len > 5 && memcmp(rest, "join/", 5) == 0) {
        ddp_rdzv_join_t join;
        if (m == NULL && (m = member_new(c, (const uint8_t *)rest + 5, rest_len - 5)) == NULL) {
            ddp_log_warn(c->log, "rendezvous: a join under an unusable name was ignored");
            return;
        }
        *tag = m;
        if (m->left) /* (it said it leaves) */
            return;
        if (m->lost && m->connected)
            revive(c, m, true);
        /* The join's own line, then its environment record (envcheck.h). */
        const uint8_t *nl = memchr(value, '\n', len);
        size_t head = nl != NULL ? (size_t)(nl - value) : len;
        free(m->env);
        m->env = nl != NULL ? strndup((const char *)nl + 1, len - head - 1) : NULL;
        if (!ddp_rdzv_join_parse(value, head, &join)) {
            ddp_log_warn(c->log, "rendezvous: launcher %s sent a malformed join: ignored", m->id);
            return;
        }
        on_join(c, m, &join);
    } else if (m != NULL && rest_len > 5 && memcmp(rest, "beat/", 5) == 0) {
        m->last_beat = ddp_clock_mono();
        if (m->lost && m->connected && !m->left)
            revive(c, m, false);
    } else if (m != NULL && rest_len > 7 && memcmp(rest, "report/", 7) == 0) {
        ddp_rdzv_report_t report;
        if (ddp_rdzv_report_parse(value, len, &report))
            on_report(c, m, &report);
        else
            ddp_log_warn(c->log, "rendezvous: launcher %s sent a malformed report", m->id);
    } else if (m != NULL && rest_len > 6 && memcmp(rest, "pause/", 6) == 0) {
        on_pause_request(c, m, value, len);
    } else if (m != NULL && rest_len > 6 && memcmp(rest, "leave/", 6) == 0) {
        on_leave(c, m, value, len);
    } else if (rest_len == 5 && memcmp(rest, "abort", 5) == 0) {
        on_abort(c, value, len);
    } else if (rest_len > 9 && memcmp(rest, "stranger/", 9) == 0) {
        /* A launcher of another job (--rdzv-id) came here, and has left saying so. */
        ddp_log_warn(c->log,
                     "rendezvous: %.*s came to this store, which serves job '%s': it "
                     "is not part of this job (every node needs the same --rdzv-id)",
                     (int)(len < 400 ? len : 400), (const char *)value, c->cfg->run_id);
    }
}

static void on_close(void *ctx, void *tag)
{
    ddp_rdzv_coord_t *c = ctx;
    ddp_rdzv_member_t *m = tag;
    if (!m->connected)
        return;
    m->connected = false;
    c->nconnected -= !m->own;
    member_lost(c, m, "its connection to the store closed");
    check_left(c);
}

/* Members silent past the keep-alive limit are lost. A late tick judges nobody: the
 * loop was busy, and the beats it has not read yet are not the launchers' fault. */
static void check_liveness(ddp_rdzv_coord_t *c, double now)
{
    bool late = c->last_tick > 0 && now - c->last_tick > LATE_TICK;
    double limit = beat_limit(c);
    for (size_t i = 0; i < c->nmembers; i++) {
        ddp_rdzv_member_t *m = c->members[i];
        if (m->lost || !m->connected)
            continue;
        if (late || c->paused) { /* (launchers wait for the resume without beats) */
            m->last_beat = now;
        } else if (now - m->last_beat > limit) {
            char why[160];
            snprintf(why, sizeof why,
                     "no heartbeat for %g s (--rdzv-conf keep_alive_interval x "
                     "keep_alive_max_attempt)",
                     limit);
            member_lost(c, m, why);
        }
    }
    c->last_tick = now;
}

/* What the launchers waiting for a place read now and then (rdzv/node.c). */
static void set_status(ddp_rdzv_coord_t *c, const ddp_buf_t *status)
{
    char key[512];
    ddp_rdzv_key(key, sizeof key, c->cfg->run_id, "status");
    (void)ddp_store_server_set(c->server, key, status->data, status->len);
}

static void refresh_status(ddp_rdzv_coord_t *c, double now)
{
    ddp_buf_t status = DDP_BUF_INIT;
    bool expired = c->backend->waiting(c, now, &status);
    if (expired) {
        job_over(c, DDP_EXIT_RDZV_FAILED, "%s", ddp_buf_str(&status));
    } else if (status.len > 0) {
        c->next_status = now + STATUS_EVERY;
        set_status(c, &status);
    }
    ddp_buf_free(&status);
}

/* A round formed: a launcher that waits now (a hot spare, or one come too late for this
 * round) reads so, not the forming round's last count. */
static void status_running(ddp_rdzv_coord_t *c, int n)
{
    ddp_buf_t status = DDP_BUF_INIT;
    const ddp_launch_config_t *cfg = c->cfg;
    bool full = n >= cfg->nnodes_max;
    if (ddp_buf_printf(&status, "round %d runs with %d node(s)%s (--nnodes=%d:%d); ", c->round, n,
                       full ? ", all it may have" : "", cfg->nnodes_min, cfg->nnodes_max) == 0 &&
        ddp_buf_puts(&status, full && cfg->hot_spares > 0
                                  ? "this launcher waits as a hot spare for a lost node's place"
                                  : "this launcher waits to join the next round") == 0)
        set_status(c, &status);
    ddp_buf_free(&status);
}

/* Whether a launcher still connected may yet read the outcome: one judged lost (silent
 * past the keep-alive limit: hung, cut off, or done reading) is not waited for. */
static bool someone_reading(const ddp_rdzv_coord_t *c)
{
    for (size_t i = 0; c->nconnected > 0 && i < c->nmembers; i++)
        if (c->members[i]->connected && !c->members[i]->own && !c->members[i]->lost)
            return true;
    return false;
}

/* The other launchers' failures of the last round, for the job's report (O(N), once). */
static void collect_failures(ddp_rdzv_coord_t *c)
{
    ddp_store_t *store = ddp_store_server_store(c->server);
    for (size_t i = 0; c->failures != NULL && i < c->nmembers; i++) {
        char key[512];
        const uint8_t *value;
        size_t len;
        if (c->members[i]->own)
            continue;
        ddp_rdzv_key(key, sizeof key, c->cfg->run_id, "%d/failures/%s", c->round,
                     c->members[i]->id);
        ddp_store_key_t k = {(const uint8_t *)key, strlen(key)};
        if (ddp_store_get(store, k, &value, &len))
            (void)ddp_buf_append(c->failures, value, len);
    }
}

void ddp_rdzv_coord_stragglers(ddp_rdzv_coord_t *c, ddp_buf_t *out)
{
    ddp_store_t *store = ddp_store_server_store(c->server);
    for (int i = 0; c->phase == COORD_RUNNING && i < c->nrunning; i++) {
        const ddp_rdzv_member_t *m = c->running[i];
        char key[512];
        const uint8_t *value;
        size_t len;
        if (m == NULL || m->own || m->lost)
            continue;
        ddp_rdzv_key(key, sizeof key, c->cfg->run_id, "%d/stragglers/%s", c->round, m->id);
        ddp_store_key_t k = {(const uint8_t *)key, strlen(key)};
        if (ddp_store_get(store, k, &value, &len))
            (void)ddp_buf_append(out, value, len);
    }
}

void ddp_rdzv_coord_name_straggler(ddp_rdzv_coord_t *c, int node_rank, const char *why)
{
    if (c->phase != COORD_RUNNING || node_rank < 0 || node_rank >= c->nrunning ||
        c->running[node_rank] == NULL)
        return;
    char key[512];
    ddp_rdzv_key(key, sizeof key, c->cfg->run_id, "%d/straggler/%s", c->round,
                 c->running[node_rank]->id);
    ddp_store_key_t k = {(const uint8_t *)key, strlen(key)};
    (void)ddp_store_set(ddp_store_server_store(c->server), k, (const uint8_t *)why, strlen(why));
}

/* Finishing: closes the server once the others have gone or stopped answering (or at the
 * deadline); whether it did. The scan is O(N) a tick, and only while finishing. */
static bool close_once_left(ddp_rdzv_coord_t *c, double now)
{
    if (!c->finishing || (now < c->finish_deadline && someone_reading(c)))
        return false;
    ddp_store_server_t *server = c->server;
    void (*closed)(void *) = c->closed;
    void *ctx = c->closed_ctx;
    collect_failures(c);
    ddp_rdzv_coord_close(c);
    ddp_store_server_close(server);
    if (closed != NULL)
        closed(ctx);
    return true;
}

/* For operators (and bench/scale): the store's load, at debug level. */
static void log_stats(ddp_rdzv_coord_t *c, double now)
{
    if (now < c->next_stats)
        return;
    c->next_stats = now + STATS_EVERY;
    ddp_log_debug(c->log,
                  "rendezvous: round %d, %zu other launcher(s) connected; the store has served "
                  "%llu requests in %.3f s",
                  c->round, c->nconnected, (unsigned long long)ddp_store_server_requests(c->server),
                  now - c->started);
}

static void on_tick(uv_timer_t *timer)
{
    ddp_rdzv_coord_t *c = timer->data;
    double now = ddp_clock_mono();
    if (close_once_left(c, now))
        return;
    log_stats(c, now);
    ddp_buf_t why = DDP_BUF_INIT;
    check_liveness(c, now);
    if (c->phase != COORD_OVER && c->backend->tick != NULL && c->backend->tick(c, now, &why) != 0)
        job_over(c, DDP_EXIT_RDZV_FAILED, "%s", ddp_buf_str(&why));
    ddp_buf_free(&why);
    try_close(c, now);
    if (c->phase == COORD_FORMING)
        refresh_status(c, now);
}

void ddp_rdzv_coord_finish(ddp_rdzv_coord_t *c, double linger, int sig, ddp_buf_t *failures,
                           void (*closed)(void *ctx), void *ctx)
{
    c->failures = failures;
    c->closed = closed;
    c->closed_ctx = ctx;
    end_pause(c);
    /* (A signal's own abort record may still be on its way from our rendezvous thread.) */
    if (c->phase != COORD_OVER && sig < 0) /* an exit status of its own: no progress */
        job_over(c, -sig,
                 "the job was ended by the launcher serving the store (%s): the job's attempts "
                 "made no progress",
                 c->own_id);
    else if (c->phase != COORD_OVER && sig > 0)
        job_over(c, DDP_EXIT_SIGNAL_BASE + sig,
                 "the job was ended by the launcher serving the store (%s): it received SIG%s",
                 c->own_id, sigabbrev_np(sig) != NULL ? sigabbrev_np(sig) : "a signal");
    else if (c->phase != COORD_OVER)
        job_over(c, DDP_EXIT_RDZV_FAILED, "the launcher serving the store (%s) has ended",
                 c->own_id);
    c->finishing = true;
    c->finish_deadline = ddp_clock_mono() + linger;
    (void)close_once_left(c, ddp_clock_mono());
}

void ddp_rdzv_coord_leave_now(ddp_rdzv_coord_t *c)
{
    if (c->finishing)
        c->finish_deadline = 0;
}

static void on_timer_closed(uv_handle_t *handle)
{
    ddp_rdzv_coord_t *c = handle->data;
    for (size_t i = 0; i < c->nmembers; i++) {
        free(c->members[i]->env);
        free(c->members[i]);
    }
    free(c->members);
    free(c->running);
    free(c->holders);
    free(c->place_nproc);
    free(c->last_ranks);
    free(c);
}

/* What the backends may ask of the coordinator (backend.h). */
static const ddp_rdzv_coord_services_t services = {
    .beat_limit = beat_limit,
    .refuse = refuse,
};

int ddp_rdzv_coord_start(uv_loop_t *loop, ddp_store_server_t *server,
                         const ddp_launch_config_t *cfg, const ddp_log_t *log, const char *own_id,
                         ddp_rdzv_coord_t **out)
{
    ddp_rdzv_coord_t *c = calloc(1, sizeof *c);
    if (c == NULL)
        return -ENOMEM;
    c->loop = loop;
    c->server = server;
    c->cfg = cfg;
    c->log = log;
    c->backend = ddp_config_dynamic(cfg) ? &ddp_rdzv_c10d_backend : &ddp_rdzv_static_backend;
    c->services = &services;
    snprintf(c->own_id, sizeof c->own_id, "%s", own_id);
    ddp_rdzv_own_host(cfg, c->host, sizeof c->host);
    ddp_rdzv_key(c->prefix, sizeof c->prefix, cfg->run_id, "%s", "");
    c->prefix_len = strlen(c->prefix);
    c->started = c->forming_since = ddp_clock_mono();
    c->min_since = -1;
    char key[512];
    ddp_rdzv_key(key, sizeof key, cfg->run_id, "coordinator");
    int err = c->backend->init(c);
    if (err == 0)
        err = ddp_store_server_set(server, key, own_id, strlen(own_id));
    if (err == 0)
        err = ddp_store_server_set(server, DDP_RDZV_SERVED_KEY, cfg->run_id, strlen(cfg->run_id));
    if (err == 0)
        err = publish_env(c, server);
    if (err) {
        free(c->holders);
        free(c->place_nproc);
        free(c);
        return err;
    }
    c->watch = (ddp_store_server_watch_t){c->prefix, on_write, on_close, c};
    ddp_store_server_watch(server, &c->watch);
    uv_timer_init(loop, &c->timer);
    c->timer.data = c;
    uv_timer_start(&c->timer, on_tick, TICK_MS, TICK_MS);
    *out = c;
    return 0;
}

int ddp_rdzv_coord_resume_from(ddp_rdzv_coord_t *c, const char *record)
{
    int round, restarts;
    const char *ranks;
    if (c->nmembers > 1 || c->round > 0 ||
        ddp_rdzv_round_record_parse(record, &round, &restarts, &ranks) != 0)
        return DDP_EPARSE;
    if ((c->last_ranks = strdup(ranks)) == NULL)
        return -ENOMEM;
    c->round = round + 1;
    c->restarts = restarts;
    c->resumed = true;
    for (size_t i = 0; i < c->nmembers; i++) /* (our own, joined already) */
        c->members[i]->node_rank = last_rank(c, c->members[i]->id);
    ddp_log_info(c->log, "rendezvous: taking the job over after round %d (%d restart(s) spent)",
                 round, restarts);
    return 0;
}

void ddp_rdzv_coord_leaves(ddp_rdzv_coord_t *c, const char *why)
{
    if (c->phase != COORD_RUNNING || c->outcome_published)
        return; /* stopped already: the failure was counted then */
    char message[DDP_RDZV_MSG_MAX];
    snprintf(message, sizeof message,
             "the launcher serving the job's store (on %.255s) leaves the job: %.400s; the job "
             "goes on at the store of the launcher etcd elects next",
             c->host, why);
    round_stop(c, true, message);
}

void ddp_rdzv_coord_on_formed(ddp_rdzv_coord_t *c, void (*formed)(void *ctx, const char *record),
                              void *ctx)
{
    c->formed = formed;
    c->formed_ctx = ctx;
}

void ddp_rdzv_coord_close(ddp_rdzv_coord_t *c)
{
    if (c == NULL)
        return;
    ddp_store_server_watch(c->server, NULL);
    uv_close((uv_handle_t *)&c->timer, on_timer_closed);
}
