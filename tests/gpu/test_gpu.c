/* GPU tests (suite gpu): libddp's NCCL backend between real workers under the real
 * launcher, one GPU per rank. Exits 77 (skipped) where the CUDA runtime sees no GPU. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int gpus;

static const char *nccl_worker(void)
{
    const char *path = getenv("DDP_TEST_NCCL_WORKER");
    if (path == NULL || *path == '\0')
        fail_msg("DDP_TEST_NCCL_WORKER is not set: run the tests with meson test");
    return path;
}

static void test_collectives(void **state)
{
    int world = gpus < 4 ? gpus : 4;
    char nproc[64], ok[64];
    snprintf(nproc, sizeof nproc, "--nproc-per-node=%d", world);
    snprintf(ok, sizeof ok, "collectives ok, world %d\n", world);
    const char *argv[] = {th_launcher(), nproc, "--no-python", nccl_worker(), "collectives", NULL};
    th_proc_t p;
    th_run(&p, argv, NULL, 600);
    TH_ASSERT(&p, th_status(&p) == 0);
    TH_ASSERT(&p, th_count(ddp_buf_str(&p.out), ok) == world);
    th_cleanup(&p);
}

/* A rank killed mid-all-reduce: the others end with an error (NCCL's, or libddp's abort
 * after DDP_TIMEOUT), never a hang. */
static void test_dead_peer(void **state)
{
    if (gpus < 2) {
        printf("one GPU: no peer to lose\n");
        return;
    }
    const char *argv[] = {
        th_launcher(), "--nproc-per-node=2", "--no-python", nccl_worker(), "die", "1", NULL};
    const char *env[] = {"DDP_TIMEOUT=20", NULL};
    th_proc_t p;
    double started = th_now();
    th_run(&p, argv, env, 180);
    const char *err = ddp_buf_str(&p.err);
    TH_ASSERT(&p, th_status(&p) == 1);
    TH_ASSERT(&p, th_now() - started < 120);
    TH_ASSERT(&p, strstr(err, "rank 1: dying now") != NULL);
    TH_ASSERT(&p, strstr(err, "rank 0: all_reduce failed") != NULL);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.out), "was never stopped") == NULL);
    th_cleanup(&p);
}

int main(void)
{
    /* How many GPUs the CUDA runtime sees, asked of the worker program itself. */
    const char *argv[] = {nccl_worker(), "count", NULL};
    th_proc_t p;
    th_run(&p, argv, NULL, 60);
    const char *out = ddp_buf_str(&p.out);
    if (th_status(&p) != 0 || sscanf(out, "gpus %d", &gpus) != 1 || gpus < 1) {
        printf("no GPU (%s): skipped\n",
               th_status(&p) == 0 ? "the runtime sees none" : "no CUDA runtime or driver");
        th_cleanup(&p);
        return 77;
    }
    th_cleanup(&p);
    const struct CMUnitTest tests[] = {
        TH_TEST(test_collectives),
        TH_TEST(test_dead_peer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
