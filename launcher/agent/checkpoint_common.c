/* In-memory checkpoints across nodes (see agent/checkpoint_common.h): the records and the
 * plan, pure, and their exchange through the round's store. The exchange runs on a thread of
 * the loop's pool with a blocking store client of its own: a connection bounded by
 * CONNECT_S and the record's SET; on node 0 a WAIT for every node's key (bounded by the
 * round's timeout, ended at once by a cancel through an eventfd), one MULTI_GET and the
 * plan's SET; on the others a WAIT and a read of the plan and one MULTI_GET of the targets'
 * records. After the fetches, where the plan has a step, the outcome's SET, then on node 0
 * a WAIT and a MULTI_GET of every node's outcome and the verdict's COMPARE_SET, on the
 * others with a step a WAIT and a read of the verdict. What it found is said on the loop. */
#include "agent/checkpoint_common.h"

#include "ckpt.h"
#include "io.h"
#include "error.h"
#include "rdzv/record.h"
#include "store_client.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

/* s: one attempt at the exchange's connection to the store (the round's cancel is looked
 * at between attempts, up to the round's timeout): a store host busy with a thousand
 * nodes' rounds answers late, and the node whose connection fails publishes no record,
 * for which node 0 waits that timeout. */
#define CONNECT_S 5.0
/* The record's first word (its version). */
#define RECORD_TAG "ckpt1"
/* The plan's first word (its version). */
#define PLAN_TAG "plan1"
/* The nodes named where some did not publish. */
#define MISSING_SAID 8
/* The most of a node's reason it has no step that its outcome carries. */
#define OUTCOME_WHY_MAX 400
/* ms: the rest before a fetch's holders are all tried once more. */
#define FETCH_RETRY_MS 500
#define FETCH_MARGIN_S                                                    \
    5 /* a round's fetches end this long before the others' wait for this \
       * node's outcome (the round's timeout) ends; half of it at least */

struct ddp_checkpoint_common_s {
    uv_work_t work;
    const ddp_log_t *log;
    char host[256];
    int port;
    ddp_checkpoint_common_round_t round;
    char **keys;      /* every node's key, by node rank */
    char **outcomes;  /* every node's outcome's key (its step, or why none), by node rank */
    char *plan_key;   /* the round's plan's key: node 0's */
    char *verdict;    /* the round's verdict's key: node 0's proposal */
    ddp_buf_t record; /* this node's */
    int wake_fd;      /* eventfd: written by a cancel */
    atomic_bool cancelled;
    ddp_ckpt_rank_steps_t *ranks; /* this node's, nranks entries */
    ddp_replica_peer_t *peers;    /* every node's replica port, by node rank (node 0), or the
                                   * targets' (the others) */
    ddp_ckpt_plan_t plan;         /* the round's: node 0's own, or read */
    bool planned;                 /* the plan is known (node 0, or read and parsed) */
    ddp_ckpt_rank_steps_t *held;  /* world_size entries */
    ddp_replica_step_t *reps;     /* the replicas this node holds, nreps */
    size_t nreps;
    ddp_replica_step_t *all_reps; /* every node's, nall_reps (node: whose) */
    size_t nall_reps;
    char dir[PATH_MAX]; /* where a replica is fetched to; "" none */
    uint64_t rate;      /* --checkpoint-replica-rate: a fetch's */
    ddp_buf_t fetched;  /* the fetches done, a line each, said on the loop */
    int64_t step;       /* the result; -1: none */
    ddp_buf_t why;      /* why there is none, where that is to be said */
    void (*done)(void *ctx, ddp_checkpoint_common_t *x, int64_t step);
    void *ctx;
};

int ddp_checkpoint_common_format(const ddp_replica_peer_t *self, int first_rank, int nranks,
                                 const ddp_ckpt_rank_steps_t *ranks, const ddp_replica_step_t *reps,
                                 size_t nreps, ddp_buf_t *out)
{
    bool none =
        self->port <= 0 || self->host[0] == '\0' || strlen(self->key) != DDP_REPLICA_KEY_CHARS;
    int err = ddp_buf_printf(out, RECORD_TAG " %s %d %s %d %d", none ? "-" : self->host,
                             none ? 0 : self->port, none ? "-" : self->key, first_rank, nranks);
    for (int i = 0; i < nranks && err == 0; i++) {
        int n = ranks[i].n < 0 ? 0 : ranks[i].n;
        err = ddp_buf_printf(out, " %d", n);
        for (int k = 0; k < n && err == 0; k++)
            err = ddp_buf_printf(out, " %" PRId64, ranks[i].step[k]);
    }
    if (err == 0)
        err = ddp_buf_printf(out, " %zu", nreps);
    for (size_t i = 0; i < nreps && err == 0; i++)
        err = ddp_buf_printf(out, " %d %" PRId64, reps[i].rank, reps[i].step);
    if (err == 0 && self->rate > 0)
        err = ddp_buf_printf(out, " %" PRIu64, self->rate);
    return err;
}

/* A number of the record at *p (before end): " " then 1 to 19 decimal digits, at most max
 * (>= 0; refused before it could overflow). Moves *p past it. */
static bool take_number(const char **p, const char *end, int64_t max, int64_t *out)
{
    const char *at = *p;
    if (at >= end || *at != ' ')
        return false;
    at++;
    int64_t value = 0;
    int digits = 0;
    for (; at < end && *at >= '0' && *at <= '9' && digits < 19; at++, digits++) {
        int digit = *at - '0';
        if (value > (max - digit) / 10)
            return false;
        value = value * 10 + digit;
    }
    if (digits == 0 || (at < end && *at >= '0' && *at <= '9') || value > max)
        return false;
    *p = at;
    *out = value;
    return true;
}

/* The host of the record at *p: " " then 1 to 63 of [0-9A-Za-z.:%-] ("-": none). */
static bool take_host(const char **p, const char *end, char host[64])
{
    const char *at = *p;
    size_t n = 0;
    if (at >= end || *at++ != ' ')
        return false;
    for (; at < end && n < 63 &&
           (strchr(".:%-", *at) != NULL || (*at >= '0' && *at <= '9') ||
            (*at >= 'a' && *at <= 'z') || (*at >= 'A' && *at <= 'Z'));
         at++)
        host[n++] = *at;
    host[n] = '\0';
    if (n == 0 || (at < end && *at != ' '))
        return false;
    *p = at;
    return true;
}

/* A replica port's key at *p: " " then "-" (none: key[0] = 0) or DDP_REPLICA_KEY_CHARS of
 * [0-9a-f]. Moves *p past it. */
static bool take_key(const char **p, const char *end, char key[DDP_REPLICA_KEY_CHARS + 1])
{
    const char *at = *p;
    size_t n = 0;
    if (at >= end || *at++ != ' ')
        return false;
    if (at < end && *at == '-' && (at + 1 == end || at[1] == ' ')) {
        key[0] = '\0';
        *p = at + 1;
        return true;
    }
    for (; at < end && n < DDP_REPLICA_KEY_CHARS &&
           ((*at >= '0' && *at <= '9') || (*at >= 'a' && *at <= 'f'));
         at++)
        key[n++] = *at;
    key[n] = '\0';
    if (n != DDP_REPLICA_KEY_CHARS || (at < end && *at != ' '))
        return false;
    *p = at;
    return true;
}

/* The N ranks' steps of a record at *p into mine[0 .. n-1]: each " K" and K steps. */
static int take_ranks(const char **p, const char *end, int64_t first, int64_t n,
                      const ddp_ckpt_rank_steps_t *held, ddp_ckpt_rank_steps_t *mine,
                      ddp_buf_t *why)
{
    int64_t count, step;
    for (int64_t i = 0; i < n; i++) {
        if (held[first + i].n >= 0)
            return ddp_buf_printf(why, "rank %" PRId64 " is said by another node", first + i),
                   DDP_EPARSE;
        if (!take_number(p, end, DDP_CKPT_COMMON_STEPS, &count))
            return ddp_buf_printf(why, "rank %" PRId64 "'s count of steps is not one (0 to %d)",
                                  first + i, DDP_CKPT_COMMON_STEPS),
                   DDP_EPARSE;
        mine[i].n = (int)count;
        for (int64_t k = 0; k < count; k++) {
            if (!take_number(p, end, DDP_CKPT_MAX_STEP, &step))
                return ddp_buf_printf(why, "rank %" PRId64 "'s steps are not numbers (0 to %lld)",
                                      first + i, (long long)DDP_CKPT_MAX_STEP),
                       DDP_EPARSE;
            mine[i].step[k] = step;
        }
    }
    return 0;
}

/* The replicas of a record at *p: " M" (at most 2 a rank of the world), then M pairs " RANK
 * STEP", into reps[0 .. M-1] (reps: room for 2 * world_size). */
static int take_replicas(const char **p, const char *end, int world_size, ddp_replica_step_t *reps,
                         size_t *nreps, ddp_buf_t *why)
{
    int64_t m, rank, step;
    if (!take_number(p, end, 2 * (int64_t)world_size, &m))
        return ddp_buf_printf(why, "its count of replicas is not one"), DDP_EPARSE;
    for (int64_t i = 0; i < m; i++) {
        if (!take_number(p, end, world_size - 1, &rank) ||
            !take_number(p, end, DDP_CKPT_MAX_STEP, &step))
            return ddp_buf_printf(why, "its replica %" PRId64 " is not a rank and a step", i),
                   DDP_EPARSE;
        reps[i] = (ddp_replica_step_t){.node = -1, .rank = (int)rank, .step = step};
    }
    *nreps = (size_t)m;
    return 0;
}

int ddp_checkpoint_common_parse(const char *text, size_t len, int world_size,
                                ddp_ckpt_rank_steps_t *held, ddp_replica_peer_t *peer,
                                ddp_replica_step_t *reps, size_t *nreps, ddp_buf_t *why)
{
    const char *p = text, *end = text + len;
    size_t tag = strlen(RECORD_TAG), m = 0;
    int64_t first, n, port;
    ddp_replica_peer_t said;
    if (len < tag || memcmp(text, RECORD_TAG, tag) != 0)
        return ddp_buf_printf(why, "it does not start with '" RECORD_TAG "'"), DDP_EPARSE;
    p += tag;
    if (!take_host(&p, end, said.host) || !take_number(&p, end, 65535, &port) ||
        !take_key(&p, end, said.key))
        return ddp_buf_printf(why, "its replica address is not one"), DDP_EPARSE;
    said.port = strcmp(said.host, "-") == 0 || said.key[0] == '\0' ? 0 : (int)port;
    if (said.port == 0)
        said.host[0] = said.key[0] = '\0';
    if (!take_number(&p, end, world_size, &first) || !take_number(&p, end, world_size, &n) ||
        first + n > world_size)
        return ddp_buf_printf(why, "its ranks are not a range of a world of %d", world_size),
               DDP_EPARSE;
    ddp_ckpt_rank_steps_t *mine = calloc((size_t)n + 1, sizeof *mine);
    if (mine == NULL)
        return ddp_buf_printf(why, "out of memory"), -ENOMEM;
    int err = take_ranks(&p, end, first, n, held, mine, why);
    if (err == 0)
        err = take_replicas(&p, end, world_size, reps, &m, why);
    int64_t rate = 0;
    if (err == 0 && p != end &&
        (!take_number(&p, end, (int64_t)DDP_CHECKPOINT_REPLICA_MAX_RATE, &rate) ||
         (uint64_t)rate < DDP_CHECKPOINT_REPLICA_MIN_RATE))
        err = (ddp_buf_printf(why, "its replica rate is not one"), DDP_EPARSE);
    said.rate = (uint64_t)rate;
    if (err == 0 && p != end)
        err = (ddp_buf_printf(why, "it goes on after its last field"), DDP_EPARSE);
    for (int64_t i = 0; i < n && err == 0; i++)
        held[first + i] = mine[i];
    if (err == 0) {
        *peer = said;
        *nreps = m;
    }
    free(mine);
    return err;
}

/* Whether rank i holds `step`. */
static bool holds(const ddp_ckpt_rank_steps_t *r, int64_t step)
{
    for (int k = 0; k < r->n; k++)
        if (r->step[k] == step)
            return true;
    return false;
}

/* Each rank's steps held as replicas (at most DDP_CKPT_COMMON_STEPS a rank, the first
 * said), into by_rank[world_size]. */
static void replicas_by_rank(const ddp_replica_step_t *reps, size_t nreps,
                             ddp_ckpt_rank_steps_t *by_rank)
{
    for (size_t i = 0; i < nreps; i++) {
        ddp_ckpt_rank_steps_t *r = &by_rank[reps[i].rank];
        if (!holds(r, reps[i].step) && r->n < DDP_CKPT_COMMON_STEPS)
            r->step[r->n++] = reps[i].step;
    }
}

int64_t ddp_checkpoint_common_step(const ddp_ckpt_rank_steps_t *held, int world_size,
                                   const ddp_replica_step_t *reps, size_t nreps)
{
    int64_t best = -1;
    for (int i = 0; i < world_size; i++)
        if (held[i].n < 0)
            return -1;
    ddp_ckpt_rank_steps_t *copies = calloc((size_t)world_size + 1, sizeof *copies);
    if (copies == NULL)
        return -1;
    replicas_by_rank(reps, nreps, copies);
    /* The candidates: rank 0's steps, its own and its replicas'. */
    for (int k = 0; world_size > 0 && k < held[0].n + copies[0].n; k++) {
        int64_t candidate = k < held[0].n ? held[0].step[k] : copies[0].step[k - held[0].n];
        bool everyone = candidate > best;
        for (int i = 1; i < world_size && everyone; i++)
            everyone = holds(&held[i], candidate) || holds(&copies[i], candidate);
        if (everyone)
            best = candidate;
    }
    free(copies);
    return best;
}

/* Up to OUTCOME_WHY_MAX bytes of a peer's text (len at text), each byte outside printable
 * ASCII as '?', onto out. */
static void put_text(ddp_buf_t *out, const char *text, size_t len)
{
    for (size_t i = 0; i < len && i < OUTCOME_WHY_MAX; i++)
        ddp_buf_printf(out, "%c", text[i] >= ' ' && text[i] <= '~' ? text[i] : '?');
}

void ddp_checkpoint_common_plan_free(ddp_ckpt_plan_t *plan)
{
    free(plan->fetch);
    ddp_buf_free(&plan->none);
    *plan = (ddp_ckpt_plan_t)DDP_CKPT_PLAN_INIT;
}

int ddp_checkpoint_common_plan_format(const ddp_ckpt_plan_t *plan, ddp_buf_t *out)
{
    if (plan->none.len > 0)
        return ddp_buf_printf(out, "none %s", ddp_buf_str(&plan->none));
    int err = plan->step < 0 ? ddp_buf_printf(out, PLAN_TAG " -")
                             : ddp_buf_printf(out, PLAN_TAG " %" PRId64, plan->step);
    if (err == 0)
        err = ddp_buf_printf(out, " %" PRIu64 " %d %zu", plan->rate, plan->any ? 1 : 0,
                             plan->step < 0 ? (size_t)0 : plan->nfetch);
    for (size_t i = 0; i < plan->nfetch && plan->step >= 0 && err == 0; i++) {
        const ddp_ckpt_plan_fetch_t *f = &plan->fetch[i];
        err = ddp_buf_printf(out, " %d %d %s %d %s", f->rank, f->node, f->peer.host, f->peer.port,
                             f->peer.key);
    }
    return err;
}

/* The plan's entries at *p (count of them) into plan->fetch. */
static int take_fetches(const char **p, const char *end, int world_size, int nnodes, int64_t count,
                        ddp_ckpt_plan_t *plan, ddp_buf_t *why)
{
    size_t cap = 0;
    for (int64_t i = 0; i < count; i++) {
        int64_t rank, node, port;
        ddp_ckpt_plan_fetch_t f = {.rank = 0};
        if (!take_number(p, end, world_size - 1, &rank) ||
            !take_number(p, end, nnodes - 1, &node) || !take_host(p, end, f.peer.host) ||
            strcmp(f.peer.host, "-") == 0 || !take_number(p, end, 65535, &port) || port == 0 ||
            !take_key(p, end, f.peer.key) || f.peer.key[0] == '\0')
            return ddp_buf_printf(why, "its fetch %" PRId64 " is not a rank, a node and an address",
                                  i),
                   DDP_EPARSE;
        if (plan->nfetch == cap) {
            cap = cap == 0 ? 16 : 2 * cap;
            ddp_ckpt_plan_fetch_t *grown = realloc(plan->fetch, cap * sizeof *grown);
            if (grown == NULL)
                return ddp_buf_printf(why, "out of memory"), -ENOMEM;
            plan->fetch = grown;
        }
        f.rank = (int)rank;
        f.node = (int)node;
        f.peer.port = (int)port;
        plan->fetch[plan->nfetch++] = f;
    }
    return 0;
}

int ddp_checkpoint_common_plan_parse(const char *text, size_t len, int world_size, int nnodes,
                                     ddp_ckpt_plan_t *plan, ddp_buf_t *why)
{
    const char *p = text, *end = text + len;
    size_t tag = strlen(PLAN_TAG);
    int64_t step = -1, rate, any, count;
    ddp_checkpoint_common_plan_free(plan);
    if (len > 5 && memcmp(text, "none ", 5) == 0) {
        put_text(&plan->none, text + 5, len - 5);
        return 0;
    }
    if (len < tag || memcmp(text, PLAN_TAG, tag) != 0)
        return ddp_buf_printf(why, "it starts with neither '" PLAN_TAG "' nor 'none '"), DDP_EPARSE;
    p += tag;
    if (end - p >= 2 && memcmp(p, " -", 2) == 0 && (end - p == 2 || p[2] == ' '))
        p += 2;
    else if (!take_number(&p, end, DDP_CKPT_MAX_STEP, &step))
        return ddp_buf_printf(why, "its step is not one"), DDP_EPARSE;
    if (!take_number(&p, end, (int64_t)DDP_CHECKPOINT_REPLICA_MAX_RATE, &rate) ||
        (rate > 0 && (uint64_t)rate < DDP_CHECKPOINT_REPLICA_MIN_RATE))
        return ddp_buf_printf(why, "its replica rate is not one"), DDP_EPARSE;
    if (!take_number(&p, end, 1, &any))
        return ddp_buf_printf(why, "its word of any step held is not 0 or 1"), DDP_EPARSE;
    if (!take_number(&p, end, step < 0 ? 0 : (int64_t)world_size * nnodes, &count))
        return ddp_buf_printf(why, "its count of fetches is not one"), DDP_EPARSE;
    int err = take_fetches(&p, end, world_size, nnodes, count, plan, why);
    if (err == 0 && p != end)
        err = (ddp_buf_printf(why, "it goes on after its last field"), DDP_EPARSE);
    if (err != 0) {
        ddp_checkpoint_common_plan_free(plan);
        return err;
    }
    plan->step = step;
    plan->rate = (uint64_t)rate;
    plan->any = any == 1;
    return 0;
}

/* The nodes whose key is not there (values as MULTI_GET gives them), into `why`. */
static void say_missing(ddp_checkpoint_common_t *x, const ddp_buf_t *values)
{
    int missing = 0;
    ddp_buf_printf(&x->why, "node(s)");
    for (int i = 0; i < x->round.nnodes; i++)
        if (values[i].len == 0 && missing++ < MISSING_SAID)
            ddp_buf_printf(&x->why, " %d", i);
    ddp_buf_printf(&x->why, "%s published no record within %.0f s",
                   missing > MISSING_SAID ? " ..." : "", x->round.timeout);
}

/* Node i's record parsed into x->held, x->peers[i] and, its replicas, x->all_reps. */
static int take_record(ddp_checkpoint_common_t *x, int i, const ddp_buf_t *value)
{
    ddp_buf_t why = DDP_BUF_INIT;
    size_t m = 0, cap = 2 * (size_t)x->round.world_size;
    ddp_replica_step_t *grown =
        realloc(x->all_reps, (x->nall_reps + cap + 1) * sizeof *x->all_reps);
    int err = grown == NULL ? -ENOMEM : 0;
    if (grown != NULL)
        x->all_reps = grown;
    if (err == 0)
        err = ddp_checkpoint_common_parse(value->data != NULL ? value->data : "", value->len,
                                          x->round.world_size, x->held, &x->peers[i],
                                          x->all_reps + x->nall_reps, &m, &why);
    if (err != 0)
        ddp_buf_printf(&x->why, "node %d's record is not one: %s", i,
                       why.len > 0 ? ddp_buf_str(&why) : ddp_strerror(err));
    for (size_t k = 0; k < m; k++)
        x->all_reps[x->nall_reps + k].node = i;
    x->nall_reps += m;
    ddp_buf_free(&why);
    return err;
}

/* Every node's record read and parsed into x->held, then the step. */
static void read_records(ddp_checkpoint_common_t *x, ddp_store_client_t *client, bool timed_out)
{
    size_t n = (size_t)x->round.nnodes;
    ddp_buf_t *values = calloc(n, sizeof *values);
    int err = values == NULL ? -ENOMEM : 0;
    if (err == 0)
        err = ddp_store_client_multi_get(client, (const char *const *)x->keys, n, values);
    if (err != 0)
        ddp_buf_printf(&x->why, "unable to read the nodes' records: %s",
                       err == -ENOMEM ? ddp_strerror(err) : ddp_store_client_error(client));
    else if (timed_out)
        say_missing(x, values);
    for (size_t i = 0; i < n && err == 0 && !timed_out; i++)
        err = take_record(x, (int)i, &values[i]);
    for (int i = 0; i < x->round.world_size && err == 0 && !timed_out; i++)
        x->plan.any = x->plan.any || x->held[i].n > 0;
    if (err == 0 && !timed_out)
        x->step =
            ddp_checkpoint_common_step(x->held, x->round.world_size, x->all_reps, x->nall_reps);
    for (size_t i = 0; values != NULL && i < n; i++)
        ddp_buf_free(&values[i]);
    free(values);
}

/* A rest of `ms`, ended by `wake` becoming readable: false where it did. */
static bool rest(int wake, int ms)
{
    struct pollfd p = {.fd = wake, .events = POLLIN};
    int n;
    while ((n = poll(&p, 1, ms)) < 0 && errno == EINTR) {
    }
    return n <= 0;
}

/* Each rank of this node that does not hold x->step itself: fetched from a node holding its
 * replica of that step, each such node tried in node order, and all of them once more after
 * FETCH_RETRY_MS where none gave it (one flooded or gone holder costs a try, never the
 * step); where none can, said, and the step left unset here. All of them within the
 * round's timeout less FETCH_MARGIN_S (half of it at least), so that holders that trickle
 * end this node's fetches before the other nodes stop waiting for its outcome. */
static void fetch_missing(ddp_checkpoint_common_t *x)
{
    double margin = x->round.timeout / 2 < FETCH_MARGIN_S ? x->round.timeout / 2 : FETCH_MARGIN_S,
           deadline = x->round.timeout > 0 ? ddp_clock_mono() + x->round.timeout - margin : 0;
    for (int i = 0; i < x->round.nranks && x->step >= 0; i++) {
        int rank = x->round.first_rank + i;
        if (holds(&x->ranks[i], x->step))
            continue;
        const ddp_ckpt_plan_fetch_t *from = NULL;
        bool any = false;
        ddp_buf_t why = DDP_BUF_INIT;
        uint64_t bytes = 0;
        double began = ddp_clock_mono();
        int err = -ENOENT;
        for (int attempt = 0; attempt < 2 && err != 0 && err != -ECANCELED && x->dir[0] != '\0';
             attempt++) {
            if (attempt > 0 && (!any || !rest(x->wake_fd, FETCH_RETRY_MS)))
                break; /* (none to try again, or the wake: the job ends) */
            for (size_t k = 0; k < x->plan.nfetch && err != 0 && err != -ECANCELED; k++) {
                const ddp_ckpt_plan_fetch_t *f = &x->plan.fetch[k];
                if (f->rank != rank)
                    continue;
                any = true;
                from = f;
                ddp_buf_clear(&why);
                err = ddp_checkpoint_replicas_fetch(
                    &f->peer, x->dir, rank, x->step, x->round.world_size, x->round.nranks,
                    ddp_checkpoint_common_rate(x), deadline, x->wake_fd, &bytes, &why);
            }
        }
        if (err == 0)
            ddp_buf_printf(&x->fetched,
                           "rank %d's step %" PRId64 " fetched from node %d's replica (%" PRIu64
                           " bytes in %.2f s)\n",
                           rank, x->step, from->node, bytes, ddp_clock_mono() - began);
        else if (from == NULL || x->dir[0] == '\0')
            ddp_buf_printf(&x->why,
                           "rank %d's step %" PRId64 " is held by no node that takes requests",
                           rank, x->step);
        else
            ddp_buf_printf(&x->why,
                           "unable to fetch rank %d's step %" PRId64
                           " from node %d (%s:%d), the last of those holding it, each tried "
                           "twice: %s",
                           rank, x->step, from->node, from->peer.host, from->peer.port,
                           why.len > 0 ? ddp_buf_str(&why) : ddp_strerror(err));
        if (err != 0)
            x->step = -1;
        ddp_buf_free(&why);
    }
}

/* Node 0: the plan of what it read (x->step, x->why, x->plan.any said by read_records): the
 * job's replica rate, and each replica of the step of a rank that lacks it, held by a node
 * that takes requests (in node order: all_reps is). */
static int make_plan(ddp_checkpoint_common_t *x)
{
    ddp_ckpt_plan_t *plan = &x->plan;
    plan->rate = ddp_checkpoint_common_rate(x);
    if (x->why.len > 0)
        return ddp_buf_printf(&plan->none, "%s", ddp_buf_str(&x->why));
    plan->step = x->step;
    if (x->step < 0)
        return 0;
    plan->fetch = calloc(x->nall_reps + 1, sizeof *plan->fetch);
    if (plan->fetch == NULL)
        return -ENOMEM;
    for (size_t k = 0; k < x->nall_reps; k++) {
        const ddp_replica_step_t *rep = &x->all_reps[k];
        if (rep->step != x->step || x->peers[rep->node].port <= 0 ||
            holds(&x->held[rep->rank], x->step))
            continue;
        plan->fetch[plan->nfetch++] = (ddp_ckpt_plan_fetch_t){
            .rank = rep->rank, .node = rep->node, .peer = x->peers[rep->node]};
    }
    return 0;
}

/* Node 0: every node's record waited for (bounded), read, and the round's plan published. */
static int aggregate(ddp_checkpoint_common_t *x, ddp_store_client_t *client)
{
    ddp_buf_t text = DDP_BUF_INIT;
    int err = ddp_store_client_wait_or_wake(client, (const char *const *)x->keys,
                                            (size_t)x->round.nnodes, x->round.timeout, x->wake_fd);
    if (err == 0 || err == DDP_ETIMEOUT) {
        read_records(x, client, err == DDP_ETIMEOUT);
        x->planned = true;
        err = make_plan(x);
        if (err == 0)
            err = ddp_checkpoint_common_plan_format(&x->plan, &text);
        if (err == 0 && !atomic_load(&x->cancelled) &&
            ddp_store_client_set(client, x->plan_key, text.data, text.len) != 0 && x->why.len == 0)
            ddp_buf_printf(&x->why, "unable to publish the round's plan: %s",
                           ddp_store_client_error(client));
        if (err != 0 && x->why.len == 0)
            ddp_buf_printf(&x->why, "unable to make the round's plan: %s", ddp_strerror(err));
        err = 0;
    } else if (err < 0) {
        ddp_buf_printf(&x->why, "%s", ddp_store_client_error(client));
    }
    ddp_buf_free(&text);
    return err;
}

/* s: how much longer than the round's timeout a node waits for what node 0 publishes after
 * a wait of that timeout of its own: that its reason, not this node's timeout, is said. */
static double node0_margin(const ddp_checkpoint_common_t *x)
{
    return x->round.timeout / 2 < FETCH_MARGIN_S ? x->round.timeout / 2 : FETCH_MARGIN_S;
}

/* One key node 0 publishes (`what`: "plan", "verdict"), waited for (bounded) and read into
 * *value; where it cannot be, why into x->why. 0, or an error (-ECANCELED on a cancel). */
static int node0_key(ddp_checkpoint_common_t *x, ddp_store_client_t *client, const char *key,
                     const char *what, ddp_buf_t *value)
{
    double timeout = x->round.timeout + node0_margin(x);
    int err = ddp_store_client_wait_or_wake(client, &key, 1, timeout, x->wake_fd);
    if (err == 1) /* (the wake) */
        return -ECANCELED;
    if (err == DDP_ETIMEOUT)
        ddp_buf_printf(&x->why, "node 0 published no %s of the round within %g s", what, timeout);
    if (err == 0 && (err = ddp_store_client_multi_get(client, &key, 1, value)) == 0 &&
        value->len == 0)
        err = (ddp_buf_printf(&x->why, "node 0's %s of the round is empty", what), DDP_EPARSE);
    if (err != 0 && err != -ECANCELED && x->why.len == 0)
        ddp_buf_printf(&x->why, "unable to read node 0's %s of the round: %s", what,
                       ddp_store_client_error(client));
    return err;
}

/* The records of the round's `targets` nodes after this one, into x->peers (a bad or missing
 * one: none there): one MULTI_GET. */
static void read_targets(ddp_checkpoint_common_t *x, ddp_store_client_t *client)
{
    int n = x->round.targets < x->round.nnodes - 1 ? x->round.targets : x->round.nnodes - 1;
    const char **keys = calloc((size_t)n + 1, sizeof *keys);
    ddp_buf_t *values = calloc((size_t)n + 1, sizeof *values), why = DDP_BUF_INIT;
    ddp_ckpt_rank_steps_t *held = calloc((size_t)x->round.world_size + 1, sizeof *held);
    ddp_replica_step_t *reps = calloc(2 * (size_t)x->round.world_size + 1, sizeof *reps);
    size_t nreps;
    for (int k = 0; keys != NULL && k < n; k++)
        keys[k] = x->keys[(x->round.node_rank + 1 + k) % x->round.nnodes];
    if (n > 0 && keys != NULL && values != NULL && held != NULL && reps != NULL &&
        ddp_store_client_multi_get(client, keys, (size_t)n, values) == 0)
        for (int k = 0; k < n; k++) {
            int node = (x->round.node_rank + 1 + k) % x->round.nnodes;
            for (int i = 0; i < x->round.world_size; i++)
                held[i].n = -1;
            ddp_buf_clear(&why);
            (void)ddp_checkpoint_common_parse(values[k].data != NULL ? values[k].data : "",
                                              values[k].len, x->round.world_size, held,
                                              &x->peers[node], reps, &nreps, &why);
        }
    for (int k = 0; values != NULL && k < n; k++)
        ddp_buf_free(&values[k]);
    ddp_buf_free(&why);
    free(keys);
    free(values);
    free(held);
    free(reps);
}

/* A node but node 0: the round's plan waited for (bounded), read and parsed into x->plan,
 * then its step taken (or why there is none), and the targets' records read. */
static int take_plan(ddp_checkpoint_common_t *x, ddp_store_client_t *client)
{
    ddp_buf_t value = DDP_BUF_INIT, why = DDP_BUF_INIT;
    int err = node0_key(x, client, x->plan_key, "plan", &value);
    if (err == 0 &&
        (err = ddp_checkpoint_common_plan_parse(value.data, value.len, x->round.world_size,
                                                x->round.nnodes, &x->plan, &why)) != 0)
        ddp_buf_printf(&x->why, "node 0's plan of the round is not one: %s",
                       why.len > 0 ? ddp_buf_str(&why) : ddp_strerror(err));
    x->planned = err == 0;
    if (err == 0 && x->plan.none.len > 0)
        ddp_buf_printf(&x->why, "%s", ddp_buf_str(&x->plan.none));
    else if (err == 0)
        x->step = x->plan.step;
    if (err != -ECANCELED && !atomic_load(&x->cancelled))
        read_targets(x, client);
    ddp_buf_free(&value);
    ddp_buf_free(&why);
    return err == -ECANCELED ? err : 0;
}

/* An outcome or the verdict (`value`, untrusted; `whose`: "node N's outcome", "the round's
 * verdict"): whether it is "step S" with the plan's S; where not, why, onto `why`: the
 * reason it gives ("none WHY"), or what it is. */
static bool agrees(const ddp_checkpoint_common_t *x, const char *whose, const ddp_buf_t *value,
                   ddp_buf_t *why)
{
    char want[48];
    size_t len = (size_t)snprintf(want, sizeof want, "step %" PRId64, x->plan.step);
    const char *text = value->data != NULL ? value->data : "";
    if (value->len == len && memcmp(text, want, len) == 0)
        return true;
    if (value->len > 5 && memcmp(text, "none ", 5) == 0) {
        put_text(why, text + 5, value->len - 5);
    } else {
        ddp_buf_printf(why, "%s is not %s: '", whose, want);
        put_text(why, text, value->len);
        ddp_buf_printf(why, "'");
    }
    return false;
}

/* Node 0: what it proposes as the round's verdict, into `proposal`: "step S" where every
 * node's outcome (waited for, bounded) is the plan's step, else "none" and why. */
static void propose(ddp_checkpoint_common_t *x, ddp_store_client_t *client, ddp_buf_t *proposal)
{
    size_t n = (size_t)x->round.nnodes;
    char whose[64];
    ddp_buf_t why = DDP_BUF_INIT, *values = calloc(n, sizeof *values);
    int err = values == NULL
                  ? -ENOMEM
                  : ddp_store_client_wait_or_wake(client, (const char *const *)x->outcomes, n,
                                                  x->round.timeout, x->wake_fd);
    if (err == 0 || err == DDP_ETIMEOUT) {
        bool timed_out = err == DDP_ETIMEOUT;
        err = ddp_store_client_multi_get(client, (const char *const *)x->outcomes, n, values);
        for (size_t i = 0; i < n && err == 0 && why.len == 0; i++)
            if (values[i].len == 0 && timed_out)
                ddp_buf_printf(&why, "node %zu said no outcome within %.0f s", i, x->round.timeout);
            else if (snprintf(whose, sizeof whose, "node %zu's outcome", i) > 0)
                (void)agrees(x, whose, &values[i], &why); /* ("none": its words name it) */
    }
    if (err != 0 && why.len == 0)
        ddp_buf_printf(&why, "unable to read the nodes' outcomes: %s",
                       err == -ENOMEM ? ddp_strerror(err) : ddp_store_client_error(client));
    if (why.len > 0)
        ddp_buf_printf(proposal, "none %s", ddp_buf_str(&why));
    else
        ddp_buf_printf(proposal, "step %" PRId64, x->plan.step);
    for (size_t i = 0; values != NULL && i < n; i++)
        ddp_buf_free(&values[i]);
    free(values);
    ddp_buf_free(&why);
}

/* The store's connection for the exchange (`why`: the failure). */
static int connect_store(ddp_checkpoint_common_t *x, ddp_store_client_t **out, ddp_buf_t *why)
{
    ddp_store_client_options_t options = DDP_STORE_CLIENT_OPTIONS_DEFAULT;
    double deadline = ddp_clock_mono() + (x->round.timeout > CONNECT_S ? x->round.timeout : 0);
    int err;
    options.timeout = x->round.timeout + node0_margin(x);
    do {
        double left = deadline - ddp_clock_mono();
        options.connect_timeout = left > CONNECT_S ? CONNECT_S : left > 1 ? left : 1;
        ddp_buf_clear(why);
        err = ddp_store_client_connect(x->host, x->port, &options, out, why);
    } while (err != 0 && err != DDP_EPROTO && err != DDP_EPARSE && ddp_clock_mono() < deadline &&
             !atomic_load(&x->cancelled));
    return err;
}

/* A node but node 0: the round's verdict waited for (bounded), read into `verdict`; where none
 * came (node 0 lost, or late), "none" proposed with the wait's reason (the first kept) and
 * the verdict taken. */
static int take_verdict(ddp_checkpoint_common_t *x, ddp_store_client_t *client, ddp_buf_t *verdict)
{
    int err = node0_key(x, client, x->verdict, "verdict", verdict);
    if (err == DDP_ETIMEOUT) {
        ddp_buf_t none = DDP_BUF_INIT;
        ddp_buf_printf(&none, "none node %d: %s", x->round.node_rank, ddp_buf_str(&x->why));
        ddp_buf_clear(&x->why);
        ddp_buf_clear(verdict);
        err = ddp_store_client_compare_set(client, x->verdict, "", 0, none.data, none.len, verdict);
        ddp_buf_free(&none);
    }
    return err;
}

/* The verdict again on a new connection (take_verdict), the first having failed after this
 * node's outcome went (node 0's COMPARE_SET may be in, its answer lost; another node's read
 * of it failed), so that this node ends on the round's one verdict, not alone on none. */
static int verdict_again(ddp_checkpoint_common_t *x, ddp_buf_t *verdict)
{
    ddp_store_client_t *c = NULL;
    ddp_buf_t why = DDP_BUF_INIT;
    int err = connect_store(x, &c, &why);
    ddp_buf_clear(&x->why);
    ddp_buf_clear(verdict);
    if (err == 0)
        err = take_verdict(x, c, verdict);
    if (err != 0 && err != -ECANCELED && x->why.len == 0)
        ddp_buf_printf(&x->why, "unable to read the round's verdict on a new connection: %s",
                       c != NULL ? ddp_store_client_error(c) : ddp_buf_str(&why));
    if (c != NULL)
        ddp_store_client_close(c);
    ddp_buf_free(&why);
    return err;
}

/* Where the plan has a step (or this node could not take it), after the fetches: this
 * node's outcome ("step S", or "none"
 * and why it has no step) published at <round>/ckpt-done/<node rank>. Node 0 then waits
 * for every node's and sets the round's verdict at <round>/ckpt-verdict (COMPARE_SET: the
 * first kept), and every node with a step takes it (waited for, bounded; where node 0
 * publishes none in time, this node proposes "none" in its place), so that a node whose
 * fetch failed, or whose wait ran out, leaves every node's step unset, not its own only. */
static void agree_outcome(ddp_checkpoint_common_t *x, ddp_store_client_t *client)
{
    ddp_buf_t mine = DDP_BUF_INIT, verdict = DDP_BUF_INIT;
    bool stepped = x->step >= 0 && x->why.len == 0;
    if (!stepped) {
        ddp_buf_printf(&mine, "none node %d: ", x->round.node_rank);
        put_text(&mine, x->why.data, x->why.len);
    } else {
        ddp_buf_printf(&mine, "step %" PRId64, x->step);
    }
    int err = ddp_store_client_set(client, x->outcomes[x->round.node_rank], mine.data, mine.len);
    if (err == 0 && x->round.node_rank == 0) {
        ddp_buf_clear(&mine);
        propose(x, client, &mine);
        if (atomic_load(&x->cancelled)) /* (the round stopped: no proposal of its) */
            goto out;
        err =
            ddp_store_client_compare_set(client, x->verdict, "", 0, mine.data, mine.len, &verdict);
    } else if (err == 0 && stepped) {
        err = take_verdict(x, client, &verdict);
    }
    if (err != 0 && err != -ECANCELED && stepped && !atomic_load(&x->cancelled))
        err = verdict_again(x, &verdict);
    if (err == 0 && stepped && !agrees(x, "the round's verdict", &verdict, &x->why))
        x->step = -1;
    if (err != 0) {
        if (x->why.len == 0 && err != -ECANCELED)
            ddp_buf_printf(&x->why, "unable to agree on the nodes' outcomes: %s",
                           ddp_store_client_error(client));
        x->step = -1;
    }
out:
    ddp_buf_free(&mine);
    ddp_buf_free(&verdict);
}

/* The pool's thread. */
static void exchange(uv_work_t *work)
{
    ddp_checkpoint_common_t *x = work->data;
    ddp_store_client_t *client = NULL;
    ddp_buf_t why = DDP_BUF_INIT;
    int err = atomic_load(&x->cancelled) ? -ECANCELED : 0;
    if (err == 0 && (err = connect_store(x, &client, &why)) != 0)
        ddp_buf_printf(&x->why, "unable to reach the store at %s:%d: %s", x->host, x->port,
                       why.len > 0 ? ddp_buf_str(&why) : ddp_strerror(err));
    ddp_replica_peer_t self = {.port = x->round.replica_port, .rate = x->rate};
    snprintf(self.key, sizeof self.key, "%s", x->round.replica_key);
    if (err == 0 && self.port > 0 &&
        ddp_store_client_local_address(client, self.host, sizeof self.host) != 0)
        self.port = 0; /* (no address: no replicas to here) */
    if (err == 0 && self.port > 0 && x->round.replicas != NULL)
        self.port = ddp_checkpoint_replicas_listen_at(x->round.replicas, self.host);
    if (err == 0)
        err = ddp_checkpoint_common_format(&self, x->round.first_rank, x->round.nranks, x->ranks,
                                           x->reps, x->nreps, &x->record);
    if (err == 0 && (err = ddp_store_client_set(client, x->keys[x->round.node_rank], x->record.data,
                                                x->record.len)) != 0)
        ddp_buf_printf(&x->why, "%s", ddp_store_client_error(client));
    if (err == 0)
        err = x->round.node_rank == 0 ? aggregate(x, client) : take_plan(x, client);
    if (err == 0 && x->step >= 0 && x->why.len == 0)
        fetch_missing(x);
    /* (A node that could not take the plan says so at once: node 0 then waits for it no
     * longer, where the plan has a step.) */
    if (err == 0 && (!x->planned || (x->plan.step >= 0 && x->plan.none.len == 0)) &&
        !atomic_load(&x->cancelled))
        agree_outcome(x, client);
    if (atomic_load(&x->cancelled)) { /* nothing to say */
        ddp_buf_clear(&x->why);
        x->step = -1;
    }
    if (client != NULL)
        ddp_store_client_close(client);
    ddp_buf_free(&why);
}

static void common_free(ddp_checkpoint_common_t *x)
{
    for (int i = 0; x->keys != NULL && i < x->round.nnodes; i++)
        free(x->keys[i]);
    for (int i = 0; x->outcomes != NULL && i < x->round.nnodes; i++)
        free(x->outcomes[i]);
    free(x->keys);
    free(x->outcomes);
    free(x->verdict);
    free(x->plan_key);
    ddp_checkpoint_common_plan_free(&x->plan);
    if (x->wake_fd >= 0)
        close(x->wake_fd);
    ddp_buf_free(&x->record);
    ddp_buf_free(&x->why);
    ddp_buf_free(&x->fetched);
    free(x->ranks);
    free(x->reps);
    free(x->all_reps);
    free(x->peers);
    free(x->held);
    free(x);
}

/* Back on the loop: said, and the agent called. */
static void exchanged(uv_work_t *work, int status)
{
    ddp_checkpoint_common_t *x = work->data;
    int64_t step = status == 0 && !atomic_load(&x->cancelled) ? x->step : -1;
    for (const char *line = ddp_buf_str(&x->fetched); *line != '\0';) {
        size_t len = strcspn(line, "\n");
        ddp_log_info(x->log, "in-memory checkpoints: %.*s", (int)len, line);
        line += len + (line[len] == '\n');
    }
    if (x->why.len > 0)
        ddp_log_warn(x->log,
                     "in-memory checkpoints: no step agreed across the nodes (%s): "
                     "DDP_CHECKPOINT_STEP is left unset, the ranks agree where they can",
                     ddp_buf_str(&x->why));
    else if (step >= 0)
        ddp_log_info(x->log,
                     "in-memory checkpoints: the workers resume from step %" PRId64
                     ", the newest every rank of the round's %d nodes holds (DDP_CHECKPOINT_STEP)",
                     step, x->round.nnodes);
    else if (x->plan.any)
        ddp_log_info(x->log,
                     "in-memory checkpoints: no step every rank of the round's %d nodes "
                     "holds",
                     x->round.nnodes);
    x->done(x->ctx, x, step);
    common_free(x);
}

/* The keys and this node's record, into x. 0 or -ENOMEM. */
static int prepare(ddp_checkpoint_common_t *x, const ddp_launch_config_t *cfg,
                   const ddp_ckpt_rank_steps_t *ranks, const ddp_replica_step_t *reps, size_t nreps)
{
    char key[512];
    const ddp_checkpoint_common_round_t *r = &x->round;
    x->keys = calloc((size_t)r->nnodes, sizeof *x->keys);
    x->outcomes = calloc((size_t)r->nnodes, sizeof *x->outcomes);
    x->held = calloc((size_t)r->world_size, sizeof *x->held);
    x->peers = calloc((size_t)r->nnodes, sizeof *x->peers);
    x->ranks = calloc((size_t)r->nranks + 1, sizeof *x->ranks);
    if (x->keys == NULL || x->outcomes == NULL || x->held == NULL || x->peers == NULL ||
        x->ranks == NULL)
        return -ENOMEM;
    memcpy(x->ranks, ranks, (size_t)r->nranks * sizeof *ranks);
    x->reps = calloc(nreps + 1, sizeof *x->reps);
    if (x->reps == NULL)
        return -ENOMEM;
    if (nreps > 0) /* (reps may be NULL then) */
        memcpy(x->reps, reps, nreps * sizeof *reps);
    x->nreps = nreps;
    snprintf(x->dir, sizeof x->dir, "%s", r->dir != NULL ? r->dir : "");
    for (int i = 0; i < r->world_size; i++)
        x->held[i].n = -1;
    for (int i = 0; i < r->nnodes; i++) {
        ddp_rdzv_key(key, sizeof key, cfg->run_id, "%d/ckpt/%d", r->round, i);
        if ((x->keys[i] = strdup(key)) == NULL)
            return -ENOMEM;
        ddp_rdzv_key(key, sizeof key, cfg->run_id, "%d/ckpt-done/%d", r->round, i);
        if ((x->outcomes[i] = strdup(key)) == NULL)
            return -ENOMEM;
    }
    ddp_rdzv_key(key, sizeof key, cfg->run_id, "%d/ckpt-plan", r->round);
    if ((x->plan_key = strdup(key)) == NULL)
        return -ENOMEM;
    ddp_rdzv_key(key, sizeof key, cfg->run_id, "%d/ckpt-verdict", r->round);
    return (x->verdict = strdup(key)) == NULL ? -ENOMEM : 0;
}

int ddp_checkpoint_common_start(uv_loop_t *loop, const ddp_launch_config_t *cfg,
                                const ddp_log_t *log, const ddp_checkpoint_common_round_t *round,
                                const ddp_ckpt_rank_steps_t *ranks, const ddp_replica_step_t *reps,
                                size_t nreps,
                                void (*done)(void *ctx, ddp_checkpoint_common_t *x, int64_t step),
                                void *ctx, ddp_checkpoint_common_t **out)
{
    ddp_checkpoint_common_t *x = calloc(1, sizeof *x);
    if (x == NULL)
        return -ENOMEM;
    *x = (ddp_checkpoint_common_t){.log = log,
                                   .port = cfg->master_port,
                                   .round = *round,
                                   .record = DDP_BUF_INIT,
                                   .why = DDP_BUF_INIT,
                                   .fetched = DDP_BUF_INIT,
                                   .plan = DDP_CKPT_PLAN_INIT,
                                   .step = -1,
                                   .rate = cfg->checkpoint_replica_rate,
                                   .done = done,
                                   .ctx = ctx};
    snprintf(x->host, sizeof x->host, "%s", cfg->master_addr);
    x->work.data = x;
    x->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    int err = x->wake_fd < 0 ? -errno : 0;
    if (err == 0 && (round->nnodes <= 0 || round->node_rank >= round->nnodes ||
                     round->first_rank + round->nranks > round->world_size))
        err = -EINVAL; /* our own bug */
    if (err == 0)
        err = prepare(x, cfg, ranks, reps, nreps);
    if (err == 0)
        err = uv_queue_work(loop, &x->work, exchange, exchanged);
    if (err != 0) {
        ddp_log_warn(log,
                     "in-memory checkpoints: unable to agree on a step with the other nodes: %s; "
                     "DDP_CHECKPOINT_STEP is left unset",
                     ddp_strerror(err));
        common_free(x);
        return err;
    }
    *out = x;
    return 0;
}

uint64_t ddp_checkpoint_common_rate(const ddp_checkpoint_common_t *x)
{
    uint64_t rate = x->rate;
    if (x->plan.rate > 0 && (rate == 0 || x->plan.rate < rate))
        rate = x->plan.rate;
    for (int i = 0; x->peers != NULL && i < x->round.nnodes; i++)
        if (x->peers[i].rate > 0 && (rate == 0 || x->peers[i].rate < rate))
            rate = x->peers[i].rate;
    return rate;
}

const ddp_replica_peer_t *ddp_checkpoint_common_peer(const ddp_checkpoint_common_t *x, int i)
{
    static const ddp_replica_peer_t none = {.port = 0};
    return i >= 0 && i < x->round.nnodes ? &x->peers[i] : &none;
}

void ddp_checkpoint_common_cancel(ddp_checkpoint_common_t *x)
{
    if (x == NULL)
        return;
    atomic_store(&x->cancelled, true);
    uint64_t one = 1;
    if (write(x->wake_fd, &one, sizeof one) < 0) {
        /* (full: already woken) */
    }
}
