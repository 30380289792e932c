/* agent/checkpoint_common.c's records, pure: a node's record formatted and parsed back; what
 * a peer could write instead (each refused, the ranks it would have said left alone); the
 * newest step every rank holds; the round's plan formatted and parsed back, and what node 0
 * could write instead. Then the exchange of N nodes against a real store server: the step
 * agreed, at O(N) keys at the store in all. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "agent/checkpoint_common.h"
#include "error.h"
#include "rdzv/record.h"
#include "store/server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define WORLD 6

static void unsaid(ddp_ckpt_rank_steps_t *held, int n)
{
    for (int i = 0; i < n; i++)
        held[i] = (ddp_ckpt_rank_steps_t){.n = -1};
}

static ddp_replica_peer_t peer;
static ddp_replica_step_t reps[2 * WORLD];
static size_t nreps;

static int parse(const char *text, ddp_ckpt_rank_steps_t *held)
{
    ddp_buf_t why = DDP_BUF_INIT;
    peer = (ddp_replica_peer_t){"untouched", 1, "", 0};
    nreps = 99;
    int err =
        ddp_checkpoint_common_parse(text, strlen(text), WORLD, held, &peer, reps, &nreps, &why);
    assert_true((err == 0) == (why.len == 0));
    ddp_buf_free(&why);
    return err;
}

/* Two nodes' records, formatted and parsed into one world: the step every rank holds. */
static void test_round_trip_and_step(void **state)
{
    (void)state;
    ddp_ckpt_rank_steps_t mine[3] = {{2, {7, 8}}, {2, {8, 7}}, {1, {7}}};
    ddp_ckpt_rank_steps_t theirs[3] = {{2, {6, 7}}, {2, {7, 8}}, {0, {0}}};
    ddp_ckpt_rank_steps_t held[WORLD];
    ddp_buf_t text = DDP_BUF_INIT;
    unsaid(held, WORLD);
    ddp_replica_peer_t self = {"10.1.2.3", 40000, "0123456789abcdef0123456789abcdef", 0},
                       none = {"", 0, "", 0};
    /* Node 1 holds rank 5's replicas of steps 7 and 6 (node 2's, say, lost). */
    ddp_replica_step_t held_here[2] = {{-1, 5, 7}, {-1, 5, 6}};
    assert_int_equal(ddp_checkpoint_common_format(&self, 0, 3, mine, NULL, 0, &text), 0);
    assert_string_equal(
        ddp_buf_str(&text),
        "ckpt1 10.1.2.3 40000 0123456789abcdef0123456789abcdef 0 3 2 7 8 2 8 7 1 7 0");
    assert_int_equal(parse(ddp_buf_str(&text), held), 0);
    assert_string_equal(peer.host, "10.1.2.3");
    assert_int_equal(peer.port, 40000);
    assert_string_equal(peer.key, self.key);
    assert_int_equal(peer.rate, 0);                                         /* (none said) */
    assert_int_equal(ddp_checkpoint_common_step(held, WORLD, NULL, 0), -1); /* ranks 3-5 unsaid */
    /* Its --checkpoint-replica-rate, where it says one, last; one out of range refused. */
    self.rate = 1u << 20;
    ddp_buf_clear(&text);
    assert_int_equal(ddp_checkpoint_common_format(&self, 0, 3, mine, NULL, 0, &text), 0);
    assert_string_equal(
        ddp_buf_str(&text),
        "ckpt1 10.1.2.3 40000 0123456789abcdef0123456789abcdef 0 3 2 7 8 2 8 7 1 7 0 1048576");
    unsaid(held, WORLD);
    assert_int_equal(parse(ddp_buf_str(&text), held), 0);
    assert_int_equal(peer.rate, 1u << 20);
    unsaid(held, WORLD);
    assert_int_equal(
        parse("ckpt1 10.1.2.3 40000 0123456789abcdef0123456789abcdef 0 3 2 7 8 2 8 7 1 7 0 1",
              held),
        DDP_EPARSE);
    unsaid(held, WORLD);
    assert_int_equal(
        parse("ckpt1 10.1.2.3 40000 0123456789abcdef0123456789abcdef 0 3 2 7 8 2 8 7 1 7 0", held),
        0);
    ddp_buf_clear(&text);
    assert_int_equal(ddp_checkpoint_common_format(&none, 3, 3, theirs, held_here, 2, &text), 0);
    assert_string_equal(ddp_buf_str(&text), "ckpt1 - 0 - 3 3 2 6 7 2 7 8 0 2 5 7 5 6");
    assert_int_equal(parse(ddp_buf_str(&text), held), 0);
    assert_string_equal(peer.host, "");
    assert_int_equal(peer.port, 0);
    assert_string_equal(peer.key, "");
    assert_int_equal(held[4].n, 2);
    assert_int_equal(held[4].step[1], 8);
    assert_int_equal(nreps, 2);
    assert_int_equal(reps[1].rank, 5);
    assert_int_equal(reps[1].step, 6);
    assert_int_equal(ddp_checkpoint_common_step(held, WORLD, NULL, 0), -1); /* rank 5 holds none */
    assert_int_equal(ddp_checkpoint_common_step(held, WORLD, reps, nreps), 7); /* a replica does */
    reps[0].step = 9;
    assert_int_equal(ddp_checkpoint_common_step(held, WORLD, reps, nreps), -1);
    held[5] = (ddp_ckpt_rank_steps_t){1, {7}};
    assert_int_equal(ddp_checkpoint_common_step(held, WORLD, NULL, 0), 7);
    held[2] = (ddp_ckpt_rank_steps_t){2, {8, 7}};
    held[3] = (ddp_ckpt_rank_steps_t){2, {8, 7}};
    held[5] = (ddp_ckpt_rank_steps_t){2, {7, 8}};
    assert_int_equal(ddp_checkpoint_common_step(held, WORLD, NULL, 0), 8);
    ddp_buf_free(&text);
}

/* What a peer could write instead of a record: each refused, nothing it says kept. */
static void test_bad_records_refused(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "", "ckpt2 - 0 0 1 0", "ckpt1 - 0 -", "ckpt1 - 0 - 0", "ckpt1 - 0 - 0 1",
        "ckpt1 - 0 - 0 1 1", "ckpt1 - 0 - 0 1 1 x",
        "ckpt1 - 0 - 0 1 5 1 2 3 4 5",            /* more steps than a rank may list */
        "ckpt1 - 0 - 0 1 1 -3",                   /* steps are not negative */
        "ckpt1 - 0 - 0 1 1 4611686018427387905",  /* beyond DDP_CKPT_MAX_STEP */
        "ckpt1 - 0 - 0 1 1 99999999999999999999", /* 20 digits */
        "ckpt1 - 0 - 5 2 0 0",                    /* ranks beyond the world */
        "ckpt1 - 0 - 9 0", "ckpt1 - 0 - 0 7", "ckpt1 - 0 - 0 1 0 ", "ckpt1 - 0 - 0 1 0 0 0",
        "ckpt1 - 0 - 0 1 1 3\n", "ckpt1 - 0 -  0 1 0", "ckpt1 - 0 - +0 1 0", "ckpt1 - 0 - 0 2 1 3",
        "ckpt1", "ckpt1 10.0.0.1", "ckpt1 10.0.0.1 65536 0 1 0", /* a port beyond 65535 */
        /* 19 digits, beyond int64_t: refused, never wrapped into range */
        "ckpt1 10.0.0.1 9999999999999999999 0123456789abcdef0123456789abcdef 0 1 0",
        "ckpt1 - 0 - 0 1 1 9999999999999999999", "ckpt1 - 0 - 0 1 0 1 0 9999999999999999999",
        "ckpt1 - 0 - 9999999999999999999 1 0",
        "ckpt1 10.0.0.1/8 1 0 1 0", /* a host of other characters */
        "ckpt1 a;b 1 0 1 0",
        "ckpt1 0123456789012345678901234567890123456789012345678901234567890123 1 0 1 0 0",
        "ckpt1 - 0 - 0 1 0 1 6 3", /* a replica of a rank beyond the world */
        "ckpt1 - 0 - 0 1 0 13 0 1 0 1 0 1 0 1 0 1 0 1 0 1 0 1 0 1 0 1 0 1 0 1 0 1 0 1 0 1 0 1",
        "ckpt1 - 0 - 0 1 0 2 1 3", /* fewer replicas than said */
        "ckpt1 - 0 - 0 1 0 1 1 3 4",
        "ckpt1 10.0.0.1 5 0123456789abcdef 0 1 0 0", /* a key of other than 128 bits */
        "ckpt1 10.0.0.1 5 0123456789ABCDEF0123456789ABCDEF 0 1 0 0",
        "ckpt1 10.0.0.1 5 0123456789abcdef0123456789abcdef0 0 1 0 0",
        "ckpt1 10.0.0.1 5 0 1 0 0", /* no key */
    };
    ddp_ckpt_rank_steps_t held[WORLD];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        unsaid(held, WORLD);
        if (parse(bad[i], held) != DDP_EPARSE)
            fail_msg("'%s' was taken", bad[i]);
        for (int r = 0; r < WORLD; r++)
            assert_int_equal(held[r].n, -1);
        assert_string_equal(peer.host, "untouched");
        assert_int_equal(nreps, 99);
    }
    /* A rank said twice (by two nodes' records): the second refused. */
    unsaid(held, WORLD);
    assert_int_equal(parse("ckpt1 ::1 5 0123456789abcdef0123456789abcdef 0 2 1 3 0 0", held), 0);
    assert_string_equal(peer.host, "::1");
    assert_int_equal(parse("ckpt1 - 0 - 1 1 1 4 0", held), DDP_EPARSE);
    assert_string_equal(peer.host, "untouched");
    assert_int_equal(held[1].n, 0);
    /* Not NUL-terminated: only len bytes are read. */
    unsaid(held, WORLD);
    ddp_buf_t why = DDP_BUF_INIT;
    assert_int_equal(ddp_checkpoint_common_parse("ckpt1 - 0 - 0 1 1 3 0999", 21, WORLD, held, &peer,
                                                 reps, &nreps, &why),
                     0);
    assert_int_equal(held[0].step[0], 3);
    ddp_buf_free(&why);
}

/* A plan formatted and parsed back; "none WHY" taken with its bytes made printable. */
static void test_plan_round_trip(void **state)
{
    (void)state;
    ddp_ckpt_plan_fetch_t fetch[2] = {
        {4, 1, {"10.1.2.3", 40000, "0123456789abcdef0123456789abcdef", 0}},
        {4, 2, {"fd00::2", 40001, "fedcba9876543210fedcba9876543210", 0}}};
    ddp_ckpt_plan_t plan = {.step = 8, .rate = 1 << 20, .any = true, .fetch = fetch, .nfetch = 2},
                    back = DDP_CKPT_PLAN_INIT;
    ddp_buf_t text = DDP_BUF_INIT, why = DDP_BUF_INIT;
    assert_int_equal(ddp_checkpoint_common_plan_format(&plan, &text), 0);
    assert_string_equal(ddp_buf_str(&text),
                        "plan1 8 1048576 1 2 4 1 10.1.2.3 40000 0123456789abcdef0123456789abcdef "
                        "4 2 fd00::2 40001 fedcba9876543210fedcba9876543210");
    assert_int_equal(ddp_checkpoint_common_plan_parse(text.data, text.len, WORLD, 3, &back, &why),
                     0);
    assert_int_equal(back.step, 8);
    assert_int_equal(back.rate, 1 << 20);
    assert_true(back.any);
    assert_int_equal(back.nfetch, 2);
    assert_int_equal(back.none.len, 0);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(back.fetch[i].rank, 4);
        assert_int_equal(back.fetch[i].node, i + 1);
        assert_string_equal(back.fetch[i].peer.host, fetch[i].peer.host);
        assert_int_equal(back.fetch[i].peer.port, fetch[i].peer.port);
        assert_string_equal(back.fetch[i].peer.key, fetch[i].peer.key);
    }
    /* No step: "-", and no fetches written. */
    plan.step = -1;
    plan.any = false;
    plan.rate = 0;
    ddp_buf_clear(&text);
    assert_int_equal(ddp_checkpoint_common_plan_format(&plan, &text), 0);
    assert_string_equal(ddp_buf_str(&text), "plan1 - 0 0 0");
    assert_int_equal(ddp_checkpoint_common_plan_parse(text.data, text.len, WORLD, 3, &back, &why),
                     0);
    assert_int_equal(back.step, -1);
    assert_int_equal(back.nfetch, 0);
    /* None: why, as node 0 said it; a peer's bytes made printable. */
    ddp_buf_clear(&text);
    ddp_buf_printf(&plan.none, "node 2 published no record within 10 s");
    assert_int_equal(ddp_checkpoint_common_plan_format(&plan, &text), 0);
    assert_string_equal(ddp_buf_str(&text), "none node 2 published no record within 10 s");
    assert_int_equal(ddp_checkpoint_common_plan_parse(text.data, text.len, WORLD, 3, &back, &why),
                     0);
    assert_string_equal(ddp_buf_str(&back.none), "node 2 published no record within 10 s");
    assert_int_equal(back.step, -1);
    assert_int_equal(ddp_checkpoint_common_plan_parse("none a\nb\033", 9, WORLD, 3, &back, &why),
                     0);
    assert_string_equal(ddp_buf_str(&back.none), "a?b?");
    assert_int_equal(why.len, 0);
    ddp_checkpoint_common_plan_free(&back);
    ddp_buf_free(&plan.none);
    ddp_buf_free(&text);
}

/* What node 0 (or whoever wrote the key) could write instead of a plan: each refused, with
 * why, and no step taken from it. */
static void test_bad_plans_refused(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "",
        "none",
        "none ",
        "plan2 1 0 0 0",
        "plan1",
        "plan1 1",
        "plan1 1 0",
        "plan1 1 0 0",
        "plan1 1 0 2 0", /* ANY not 0 or 1 */
        "plan1 -1 0 0 0",
        "plan1 -- 0 0 0",                   /* steps are not negative */
        "plan1 4611686018427387905 0 0 0",  /* beyond DDP_CKPT_MAX_STEP */
        "plan1 99999999999999999999 0 0 0", /* 20 digits */
        "plan1 1 5 0 0",                    /* a rate below --checkpoint-replica-rate's */
        "plan1 1 0 0 0 ",
        "plan1 1 0 0 0\n",
        "plan1  1 0 0 0",
        "plan1 +1 0 0 0",
        "plan1 - 0 0 1 0 0 10.0.0.1 5 0123456789abcdef0123456789abcdef", /* a fetch, no step */
        "plan1 1 0 0 1",                                                 /* fewer than said */
        "plan1 1 0 0 1 6 0 10.0.0.1 5 0123456789abcdef0123456789abcdef", /* a rank beyond */
        "plan1 1 0 0 1 0 3 10.0.0.1 5 0123456789abcdef0123456789abcdef", /* a node beyond */
        "plan1 1 0 0 1 0 0 - 5 0123456789abcdef0123456789abcdef",        /* no host */
        "plan1 1 0 0 1 0 0 a;b 5 0123456789abcdef0123456789abcdef",
        "plan1 1 0 0 1 0 0 10.0.0.1 0 0123456789abcdef0123456789abcdef", /* no port */
        "plan1 1 0 0 1 0 0 10.0.0.1 65536 0123456789abcdef0123456789abcdef",
        "plan1 1 0 0 1 0 0 10.0.0.1 5 -",                /* no key */
        "plan1 1 0 0 1 0 0 10.0.0.1 5 0123456789abcdef", /* a key of other than 128 bits */
        "plan1 1 0 0 19 0 0 10.0.0.1 5 0123456789abcdef0123456789abcdef", /* > 6 * 3 entries */
        "plan1 1 0 0 1 0 0 10.0.0.1 5 0123456789abcdef0123456789abcdef 1",
        "step 1",
        "ckpt1 - 0 - 0 1 0",
    };
    ddp_ckpt_plan_t plan = DDP_CKPT_PLAN_INIT;
    ddp_buf_t why = DDP_BUF_INIT;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ddp_buf_clear(&why);
        if (ddp_checkpoint_common_plan_parse(bad[i], strlen(bad[i]), WORLD, 3, &plan, &why) !=
            DDP_EPARSE)
            fail_msg("'%s' was taken", bad[i]);
        assert_true(why.len > 0);
        assert_int_equal(plan.step, -1);
        assert_int_equal(plan.nfetch, 0);
        assert_int_equal(plan.none.len, 0);
    }
    /* Not NUL-terminated: only len bytes are read. */
    assert_int_equal(
        ddp_checkpoint_common_plan_parse("plan1 7 0 1 0999", 13, WORLD, 3, &plan, &why), 0);
    assert_int_equal(plan.step, 7);
    ddp_checkpoint_common_plan_free(&plan);
    ddp_buf_free(&why);
}

/* The exchange of a round of `nnodes` nodes (a rank each, all holding steps 3 and 5, but the
 * last, which holds 3 alone; node `missing` never there, -1 none, its record `bad` where
 * not NULL) on one loop against a real store server: every node's step, and the keys the
 * store was asked about; what the nodes warned of onto `said` where not NULL. */
typedef struct {
    int done;
    int64_t step[64];
    ddp_checkpoint_common_t *x[64];
} exchange_t;

static void exchanged(void *ctx, ddp_checkpoint_common_t *x, int64_t step)
{
    exchange_t *e = ctx;
    for (int i = 0; i < 64; i++)
        if (e->x[i] == x)
            e->step[i] = step;
    e->done++;
}

/* A proxy in front of the store for one node: its first connection is cut (both ways) once
 * the request holding `cut_after` has gone through and been answered (a store host's
 * network fault); later connections pass. */
typedef struct {
    int listen_fd, port, store_port;
    const char *cut_after;
    atomic_bool stop, cut;
    pthread_t thread;
} cutter_t;

static void pass(cutter_t *k, int fd, bool first)
{
    struct sockaddr_in addr = {.sin_family = AF_INET,
                               .sin_port = htons((uint16_t)k->store_port),
                               .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int up = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    char buf[65536];
    bool armed = false;
    if (up < 0 || connect(up, (struct sockaddr *)&addr, sizeof addr) != 0)
        goto out;
    struct pollfd p[2] = {{.fd = fd, .events = POLLIN}, {.fd = up, .events = POLLIN}};
    while (!atomic_load(&k->stop)) {
        if (poll(p, 2, 100) <= 0)
            continue;
        for (int i = 0; i < 2; i++) {
            if (p[i].revents == 0)
                continue;
            ssize_t got = recv(p[i].fd, buf, sizeof buf, 0);
            if (got <= 0 || send(p[1 - i].fd, buf, (size_t)got, MSG_NOSIGNAL) != got)
                goto out;
            if (first && i == 0 && memmem(buf, (size_t)got, k->cut_after, strlen(k->cut_after)))
                armed = true;
            else if (armed && i == 1) { /* (its answer went back: cut now) */
                atomic_store(&k->cut, true);
                goto out;
            }
        }
    }
out:
    if (up >= 0)
        close(up);
    close(fd);
}

static void *cutter_run(void *arg)
{
    cutter_t *k = arg;
    bool first = true;
    struct pollfd p = {.fd = k->listen_fd, .events = POLLIN};
    while (!atomic_load(&k->stop)) {
        if (poll(&p, 1, 100) <= 0)
            continue;
        int fd = accept(k->listen_fd, NULL, NULL);
        if (fd >= 0)
            pass(k, fd, first); /* (one connection at a time: a node's exchange is one) */
        first = false;
    }
    return NULL;
}

static cutter_t *cutter; /* where set, node 1 of exchange_keys goes through it */

static uint64_t exchange_keys(int nnodes, int missing, const char *bad, double timeout,
                              int64_t *steps, ddp_buf_t *said)
{
    static int jobs;
    uv_loop_t loop;
    ddp_log_t log;
    ddp_buf_t why = DDP_BUF_INIT;
    ddp_store_server_t *server;
    ddp_launch_config_t cfg = {.master_port = 0};
    exchange_t e = {0};
    char run_id[32];
    ddp_log_init(&log, "test_checkpoint_common", said != NULL ? DDP_LOG_WARN : DDP_LOG_ERROR);
    if (said != NULL)
        assert_true((log.fd = memfd_create("said", MFD_CLOEXEC)) >= 0);
    ddp_store_server_options_t options = {
        .host = "127.0.0.1", .port = 0, .limits = DDP_CODEC_LIMITS_DEFAULT, .log = &log};
    assert_int_equal(uv_loop_init(&loop), 0);
    assert_int_equal(ddp_store_server_start(&loop, &options, &server, &why), 0);
    snprintf(cfg.master_addr, sizeof cfg.master_addr, "127.0.0.1");
    cfg.master_port = ddp_store_server_port(server);
    snprintf(run_id, sizeof run_id, "job%d", ++jobs);
    cfg.run_id = run_id;
    if (bad != NULL) {
        char key[256];
        ddp_rdzv_key(key, sizeof key, run_id, "%d/ckpt/%d", 1, missing);
        assert_int_equal(ddp_store_set(ddp_store_server_store(server),
                                       (ddp_store_key_t){(const uint8_t *)key, strlen(key)},
                                       (const uint8_t *)bad, strlen(bad)),
                         0);
    }
    int started = 0;
    for (int i = 0; i < nnodes; i++) {
        ddp_ckpt_rank_steps_t mine = {2, {3, 5}};
        e.step[i] = -2;
        if (i == missing)
            continue;
        started++;
        if (i == nnodes - 1)
            mine = (ddp_ckpt_rank_steps_t){1, {3}};
        ddp_checkpoint_common_round_t round = {.round = 1,
                                               .node_rank = i,
                                               .nnodes = nnodes,
                                               .world_size = nnodes,
                                               .first_rank = i,
                                               .nranks = 1,
                                               .timeout = timeout,
                                               .targets = 1};
        cfg.master_port = ddp_store_server_port(server);
        if (cutter != NULL && i == 1) {
            cutter->store_port = cfg.master_port;
            cfg.master_port = cutter->port;
        }
        assert_int_equal(ddp_checkpoint_common_start(&loop, &cfg, &log, &round, &mine, NULL, 0,
                                                     exchanged, &e, &e.x[i]),
                         0);
    }
    while (e.done < started)
        uv_run(&loop, UV_RUN_ONCE);
    uint64_t keys = ddp_store_server_keys(server);
    memcpy(steps, e.step, (size_t)nnodes * sizeof *steps);
    ddp_store_server_close(server);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&loop), 0);
    if (said != NULL) {
        char chunk[4096];
        ssize_t n;
        assert_int_equal(lseek(log.fd, 0, SEEK_SET), 0);
        while ((n = read(log.fd, chunk, sizeof chunk)) > 0)
            ddp_buf_append(said, chunk, (size_t)n);
        close(log.fd);
    }
    ddp_buf_free(&why);
    return keys;
}

/* N nodes agree on step 3 (the newest every rank holds) at O(N) keys at the store: node 0
 * alone reads every node's record and outcome (about 4 N keys), the others a handful each;
 * each node reading all N records and outcomes (as it once did) is 4 N^2. */
static void test_exchange_costs_o_n_keys(void **state)
{
    (void)state;
    int64_t steps[64];
    int sizes[2] = {8, 48};
    uint64_t keys[2];
    for (int k = 0; k < 2; k++) {
        int n = sizes[k];
        keys[k] = exchange_keys(n, -1, NULL, 20, steps, NULL);
        for (int i = 0; i < n; i++)
            assert_int_equal(steps[i], 3);
        printf("%d nodes: %llu keys at the store (%.1f a node)\n", n, (unsigned long long)keys[k],
               (double)keys[k] / n);
        if (keys[k] > 12 * (uint64_t)n)
            fail_msg("%d nodes asked the store about %llu keys: not O(N)", n,
                     (unsigned long long)keys[k]);
    }
}

/* How many times `what` is in `text`. */
static int count(const char *text, const char *what)
{
    int n = 0;
    for (const char *at = text; (at = strstr(at, what)) != NULL; at += strlen(what))
        n++;
    return n;
}

/* Node 0 lost: the others wait for its plan the round's timeout and half of it (1.5 s here),
 * then go on without a step, each saying so. */
static void test_node_0_lost_no_step(void **state)
{
    (void)state;
    int64_t steps[64];
    ddp_buf_t said = DDP_BUF_INIT;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    (void)exchange_keys(3, 0, NULL, 1, steps, &said);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    assert_int_equal(steps[0], -2); /* (never there) */
    assert_int_equal(steps[1], -1);
    assert_int_equal(steps[2], -1);
    double took = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    assert_true(took >= 1.4 && took < 10);
    assert_int_equal(count(ddp_buf_str(&said), "no step agreed across the nodes (node 0 "
                                               "published no plan of the round within 1.5 s)"),
                     2);
    ddp_buf_free(&said);
}

/* A node's record that is not one: node 0's reason, in its plan, said by every node at once
 * (no wait: every key is there). */
static void test_bad_record_said_by_every_node(void **state)
{
    (void)state;
    int64_t steps[64];
    ddp_buf_t said = DDP_BUF_INIT;
    (void)exchange_keys(4, 2, "ckpt1 - 0 - 2 1 9", 20, steps, &said);
    for (int i = 0; i < 4; i++)
        assert_int_equal(steps[i], i == 2 ? -2 : -1);
    assert_int_equal(count(ddp_buf_str(&said), "no step agreed across the nodes (node 2's record "
                                               "is not one: rank 2's count of steps is not one"),
                     3);
    ddp_buf_free(&said);
}

/* Node 1's connection to the store cut once its outcome went in (round 7's
 * reset-after-outcome.sh): its read of the verdict failed and it left the step unset while
 * node 0 and the others resumed from it. It now reads the verdict again on a new connection
 * and ends on the round's one verdict, step 3 everywhere. */
static void test_connection_lost_after_outcome_one_verdict(void **state)
{
    (void)state;
    int64_t steps[64];
    cutter_t k = {.cut_after = "ckpt-done/1"};
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof addr;
    k.listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(k.listen_fd >= 0);
    assert_int_equal(bind(k.listen_fd, (struct sockaddr *)&addr, sizeof addr), 0);
    assert_int_equal(listen(k.listen_fd, 8), 0);
    assert_int_equal(getsockname(k.listen_fd, (struct sockaddr *)&addr, &len), 0);
    k.port = ntohs(addr.sin_port);
    assert_int_equal(pthread_create(&k.thread, NULL, cutter_run, &k), 0);
    cutter = &k;
    (void)exchange_keys(3, -1, NULL, 5, steps, NULL);
    cutter = NULL;
    atomic_store(&k.stop, true);
    pthread_join(k.thread, NULL);
    close(k.listen_fd);
    assert_true(atomic_load(&k.cut));
    for (int i = 0; i < 3; i++)
        if (steps[i] != 3)
            fail_msg("node %d's step %lld, not the round's 3", i, (long long)steps[i]);
}

int main(void)
{
    setenv("UV_THREADPOOL_SIZE", "64", 1); /* (each node's exchange holds a thread) */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip_and_step),
        cmocka_unit_test(test_bad_records_refused),
        cmocka_unit_test(test_plan_round_trip),
        cmocka_unit_test(test_bad_plans_refused),
        cmocka_unit_test(test_exchange_costs_o_n_keys),
        cmocka_unit_test(test_node_0_lost_no_step),
        cmocka_unit_test(test_bad_record_said_by_every_node),
        cmocka_unit_test(test_connection_lost_after_outcome_one_verdict),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
