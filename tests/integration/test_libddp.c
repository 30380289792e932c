/* Integration tests: libddp's CPU collectives between real worker processes under the real
 * launcher, checked against a serial reference, and a dead peer detected, not waited on. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *collectives(void)
{
    const char *path = getenv("DDP_TEST_COLLECTIVES");
    if (path == NULL || *path == '\0')
        fail_msg("DDP_TEST_COLLECTIVES is not set: run the tests with meson test");
    return path;
}

static void run_check(int world, const char *max_elements)
{
    char nproc[64], ok[64];
    snprintf(nproc, sizeof nproc, "--nproc-per-node=%d", world);
    snprintf(ok, sizeof ok, "world %d\n", world);
    const char *argv[] = {th_launcher(), nproc,        "--no-python", collectives(),
                          "check",       max_elements, NULL};
    th_proc_t p;
    th_run(&p, argv, NULL, 300);
    TH_ASSERT(&p, th_status(&p) == 0);
    TH_ASSERT(&p, th_count(ddp_buf_str(&p.out), "check ok: ") == world);
    TH_ASSERT(&p, th_count(ddp_buf_str(&p.out), ok) == world);
    th_cleanup(&p);
}

/* Every dtype and op at sizes that do not divide by the world size, and sizes smaller than
 * it; world 1 takes the no-peer path. */
static void test_all_reduce_world_1(void **state)
{
    run_check(1, "100000");
}

static void test_all_reduce_world_2_large(void **state)
{
    run_check(2, "16777216"); /* 64 MiB of float32, and the odd sizes around it */
}

static void test_all_reduce_world_3(void **state)
{
    run_check(3, "1000003");
}

static void test_all_reduce_world_5(void **state)
{
    run_check(5, "65537");
}

static void test_broadcast_all_gather_barrier(void **state)
{
    for (int world = 1; world <= 4; world++) {
        char nproc[64], ok[64];
        snprintf(nproc, sizeof nproc, "--nproc-per-node=%d", world);
        snprintf(ok, sizeof ok, "collectives ok, world %d\n", world);
        const char *argv[] = {th_launcher(), nproc,         "--no-python",
                              collectives(), "collectives", NULL};
        th_proc_t p;
        th_run(&p, argv, NULL, 120);
        TH_ASSERT(&p, th_status(&p) == 0);
        TH_ASSERT(&p, th_count(ddp_buf_str(&p.out), ok) == world);
        th_cleanup(&p);
    }
}

/* Rank 1 of 3 is SIGKILLed in the middle of an all_reduce. Its neighbours ignore SIGTERM,
 * so the launcher's stop cannot be what ends them: libddp must notice the closed
 * connection, fail with an error naming the peer, and the report names the root cause. */
static void test_dead_peer_is_an_error_not_a_hang(void **state)
{
    const char *argv[] = {
        th_launcher(), "--nproc-per-node=3", "--no-python", collectives(), "die", "1", NULL};
    const char *env[] = {"DDP_TIMEOUT=600", NULL}; /* a hang would outlast the test */
    th_proc_t p;
    double started = th_now();
    th_run(&p, argv, env, 120);
    const char *err = ddp_buf_str(&p.err);
    TH_ASSERT(&p, th_now() - started < 60);
    TH_ASSERT(&p, th_status(&p) == 1);
    TH_ASSERT(&p, strstr(err, "rank 1: dying now") != NULL);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.out), "was never stopped") == NULL);
    /* The survivors' own error names rank 1, the peer that went away. */
    TH_ASSERT(&p, strstr(err, "rank 0: all_reduce failed") != NULL ||
                      strstr(err, "rank 2: all_reduce failed") != NULL);
    TH_ASSERT(&p, strstr(err, "rank 1 (127.0.0.1:") != NULL && strstr(err, "is gone") != NULL);
    /* The report's root cause is the rank that was killed. */
    TH_ASSERT(&p, strstr(err, "Signal 9 (SIGKILL) received by PID") != NULL);
    th_cleanup(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        TH_TEST(test_all_reduce_world_1),           TH_TEST(test_all_reduce_world_2_large),
        TH_TEST(test_all_reduce_world_3),           TH_TEST(test_all_reduce_world_5),
        TH_TEST(test_broadcast_all_gather_barrier), TH_TEST(test_dead_peer_is_an_error_not_a_hang),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
