/* GPU tests (suite gpu): libddp's NCCL backend between real workers under the real
 * launcher, one GPU per rank, and the FashionMNIST example's cuDNN path. Exits 77 (skipped) where
 * the CUDA runtime sees no GPU. */
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

/* Runs `program mode` on `world` workers under the launcher: each must print
 * "<mode> ok, world <world>". */
static void run_mode(const char *program, const char *mode, int world)
{
    char nproc[64], ok[64];
    snprintf(nproc, sizeof nproc, "--nproc-per-node=%d", world);
    snprintf(ok, sizeof ok, "%s ok, world %d\n", mode, world);
    const char *argv[] = {th_launcher(), nproc, "--no-python", program, mode, NULL};
    th_proc_t p;
    th_run(&p, argv, NULL, 600);
    TH_ASSERT(&p, th_status(&p) == 0);
    TH_ASSERT(&p, th_count(ddp_buf_str(&p.out), ok) == world);
    th_cleanup(&p);
}

static void test_collectives(void **state)
{
    run_mode(nccl_worker(), "collectives", gpus < 4 ? gpus : 4);
}

/* NCCL's reduce, reduce_scatter, point to point and the collectives made of it. */
static void test_more_collectives(void **state)
{
    run_mode(nccl_worker(), "more", gpus < 4 ? gpus : 4);
}

/* The auto backend: host buffers on the CPU ring and device buffers on NCCL in one
 * context. */
static void test_auto_backend(void **state)
{
    run_mode(nccl_worker(), "auto", gpus < 4 ? gpus : 4);
}

/* A program with host buffers alone, on the default (auto) backend, with more workers
 * than GPUs: NCCL is never needed, so nothing asks for a GPU per worker. */
static void test_host_buffers_with_more_workers_than_gpus(void **state)
{
    const char *collectives = getenv("DDP_TEST_COLLECTIVES");
    if (collectives == NULL || *collectives == '\0')
        fail_msg("DDP_TEST_COLLECTIVES is not set: run the tests with meson test");
    run_mode(collectives, "collectives", gpus + 1);
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

/* Runs `world` workers of the FashionMNIST example on `device` for 20 steps from seed 5;
 * the parameters go to `dump`. */
static void fashion_run(const char *fashion, const char *device, int world, const char *dump)
{
    char nproc[64], device_flag[64], dump_flag[600];
    snprintf(nproc, sizeof nproc, "--nproc-per-node=%d", world);
    snprintf(device_flag, sizeof device_flag, "--device=%s", device);
    snprintf(dump_flag, sizeof dump_flag, "--dump-params=%s", dump);
    const char *argv[] = {th_launcher(), nproc,      "--no-python",    fashion,
                          device_flag,   "--seed=5", "--max-steps=20", "--limit-test=500",
                          dump_flag,     NULL};
    th_proc_t p;
    th_run(&p, argv, NULL, 600);
    const char *out = ddp_buf_str(&p.out);
    TH_ASSERT(&p, th_status(&p) == 0);
    TH_ASSERT(&p, strstr(out, strcmp(device, "cuda") == 0 ? "on GPUs (cuDNN, NCCL)"
                                                          : "on CPUs (OpenBLAS)") != NULL);
    TH_ASSERT(&p, strstr(out, "test accuracy") != NULL);
    th_cleanup(&p);
}

/* The example's cuDNN + cuBLAS path against its CPU path: the same seed, samples and
 * dropout masks (the host draws them for both), FP32 without TF32, so after 20 steps the
 * parameters differ only by the rounding of other summation orders. With 1 worker, and
 * with 2 (NCCL averaging against libddp's CPU ring) where there are 2 GPUs. */
static void test_fashion_cuda_matches_cpu(void **state)
{
    const char *fashion = getenv("DDP_TEST_FASHION");
    if (fashion == NULL || *fashion == '\0') {
        printf("the example was built without cuDNN: skipped\n");
        skip();
    }
    char *dir = th_tmpdir(), cpu[600], cuda[600];
    for (int world = 1; world <= (gpus < 2 ? gpus : 2); world++) {
        snprintf(cpu, sizeof cpu, "%s/cpu-%d.bin", dir, world);
        snprintf(cuda, sizeof cuda, "%s/cuda-%d.bin", dir, world);
        fashion_run(fashion, "cpu", world, cpu);
        fashion_run(fashion, "cuda", world, cuda);
        double difference = th_relative_difference(cpu, cuda);
        printf("%d worker(s): relative difference of the parameters, cuda vs cpu: %.3g\n", world,
               difference);
        assert_true(difference <= 1e-4);
    }
    th_rmtree(dir);
    free(dir);
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
        TH_TEST(test_collectives),  TH_TEST(test_more_collectives),
        TH_TEST(test_auto_backend), TH_TEST(test_host_buffers_with_more_workers_than_gpus),
        TH_TEST(test_dead_peer),    TH_TEST(test_fashion_cuda_matches_cpu),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
