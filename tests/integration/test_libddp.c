/* Integration tests: libddp's CPU collectives between real worker processes under the real
 * launcher, over shared memory and over TCP, checked against a serial reference; a dead
 * peer detected, not waited on; no segment left in /dev/shm. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "error.h"
#include "harness.h"
#include "io.h"

#include <dirent.h>
#include <glob.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *collectives(void)
{
    const char *path = getenv("DDP_TEST_COLLECTIVES");
    if (path == NULL || *path == '\0')
        fail_msg("DDP_TEST_COLLECTIVES is not set: run the tests with meson test");
    return path;
}

/* A run id of its own, so that the segments of /dev/shm it may leave are its own. */
static void unique_run_id(char *flag, size_t cap, char *id, size_t id_cap)
{
    static int runs;
    snprintf(id, id_cap, "itest%d_%d", (int)getpid(), runs++);
    snprintf(flag, cap, "--rdzv-id=%s", id);
}

/* No segment of the run is left in /dev/shm (each is unlinked once mapped). */
static bool no_segment_left(const char *run_id)
{
    char prefix[128];
    bool clean = true;
    snprintf(prefix, sizeof prefix, "ddp-%s-", run_id);
    DIR *dir = opendir("/dev/shm");
    struct dirent *entry;
    while (dir != NULL && (entry = readdir(dir)) != NULL) {
        if (strncmp(entry->d_name, prefix, strlen(prefix)) == 0) {
            fprintf(stderr, "left in /dev/shm: %s\n", entry->d_name);
            clean = false;
        }
    }
    if (dir != NULL)
        closedir(dir);
    return clean;
}

/* Runs `mode` on `world` ranks under the launcher with `env`; every rank must say
 * "<ok>" and use `transport`. With `keep`, the finished run is left there to look at
 * (th_cleanup is the caller's). */
static void run_mode_keep(int world, const char *mode, const char *arg, const char *const *env,
                          const char *transport, const char *ok, th_proc_t *keep)
{
    char nproc[64], id_flag[128], id[64], line[128];
    snprintf(nproc, sizeof nproc, "--nproc-per-node=%d", world);
    unique_run_id(id_flag, sizeof id_flag, id, sizeof id);
    const char *argv[] = {th_launcher(), nproc, id_flag, "--no-python",
                          collectives(), mode,  arg,     NULL};
    th_proc_t p;
    th_run(&p, argv, env, 300);
    const char *out = ddp_buf_str(&p.out);
    TH_ASSERT(&p, th_status(&p) == 0);
    snprintf(line, sizeof line, "%s, world %d\n", ok, world);
    TH_ASSERT(&p, th_count(out, line) == world);
    if (world > 1) {
        snprintf(line, sizeof line, "transport %s\n", transport);
        TH_ASSERT(&p, th_count(out, line) == world);
    }
    TH_ASSERT(&p, no_segment_left(id));
    if (keep != NULL)
        *keep = p;
    else
        th_cleanup(&p);
}

static void run_mode(int world, const char *mode, const char *arg, const char *const *env,
                     const char *transport, const char *ok)
{
    run_mode_keep(world, mode, arg, env, transport, ok, NULL);
}

static const char *const no_shm[] = {"DDP_SHM=0", NULL};

/* Every dtype and op at sizes that do not divide by the world size, and sizes smaller than
 * it, against the serial reference; world 1 takes the no-peer path. One host: shared
 * memory, unless DDP_SHM=0 (on one rank is enough) keeps the ring on TCP. */
static void test_all_reduce_world_1(void **state)
{
    run_mode(1, "check", "100000", NULL, "tcp", "cases");
}

static void test_all_reduce_world_2_shm_large(void **state)
{
    run_mode(2, "check", "16777216", NULL, "shm", "cases"); /* 64 MiB of float32, and more */
}

/* A rank that calls ddp_init late is waited for, and the wait is said (every third of
 * DDP_TIMEOUT here), not silent. */
static void test_late_rank_is_waited_for_aloud(void **state)
{
    const char *late[] = {"DDP_TIMEOUT=6", "DDP_TEST_LATE_RANK=1:3", NULL};
    th_proc_t p;
    run_mode_keep(2, "check", "1000", late, "shm", "cases", &p);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err),
                         "rank 0: still waiting for rank 1, which has not called ddp_init yet (") !=
                      NULL);
    th_cleanup(&p);
}

/* Progress for --max-no-progress-restarts from libddp itself: attempts whose ranks time out
 * in their first all_reduce complete no collective (status 6 after K of them); attempts that
 * complete some before failing progress, and use every restart (status 1). */
static void test_no_progress_from_libddp(void **state)
{
    const char *env[] = {"DDP_TIMEOUT=1", NULL};
    const char *stuck[] = {th_launcher(),
                           "--nproc-per-node=2",
                           "--max-restarts=5",
                           "--max-no-progress-restarts=2",
                           "--no-python",
                           collectives(),
                           "skip",
                           "1",
                           "1",
                           "30",
                           NULL};
    th_proc_t p;
    th_run(&p, stuck, env, 120);
    TH_ASSERT(&p, th_status(&p) == 6);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "2 attempt(s) in a row failed without progress (no "
                                              "libddp collective completed)") != NULL);
    th_cleanup(&p);
    const char *moving[] = {th_launcher(),
                            "--nproc-per-node=2",
                            "--max-restarts=2",
                            "--max-no-progress-restarts=2",
                            "--no-python",
                            collectives(),
                            "skip",
                            "1",
                            "3",
                            "30",
                            NULL};
    th_run(&p, moving, env, 120);
    TH_ASSERT(&p, th_status(&p) == 1);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "in a row failed without progress") == NULL);
    th_cleanup(&p);
}

/* The pid of the process whose libddp segment of job `run_id`, rank 0, is in /dev/shm, or 0. */
static int shm_owner(const char *run_id)
{
    char tail[128];
    int owner = 0;
    snprintf(tail, sizeof tail, "-%s-a0-r0-", run_id);
    DIR *dir = opendir("/dev/shm");
    struct dirent *e;
    while (dir != NULL && (e = readdir(dir)) != NULL) {
        int pid, used = 0;
        if (sscanf(e->d_name, "ddp-p%d%n", &pid, &used) == 1 && used > 0 &&
            strncmp(e->d_name + used, tail, strlen(tail)) == 0)
            owner = pid;
    }
    if (dir != NULL)
        closedir(dir);
    return owner;
}

/* A rank killed between creating its shared-memory ring and the ranks' vote (here rank 1
 * never comes) cannot unlink it: the launcher removes it when the group ends. */
static void test_killed_rank_leaves_no_shared_memory(void **state)
{
    char run_id[64];
    snprintf(run_id, sizeof run_id, "shmleak%d", (int)getpid());
    char id_flag[80];
    snprintf(id_flag, sizeof id_flag, "--rdzv-id=%s", run_id);
    const char *env[] = {"DDP_TIMEOUT=60", "DDP_TEST_LATE_RANK=1:60", NULL};
    const char *argv[] = {
        th_launcher(), "--nproc-per-node=2", id_flag, "--no-python", collectives(), "check", "10",
        NULL};
    th_proc_t p;
    th_start(&p, argv, env);
    TH_ASSERT(&p, th_wait_output(&p, 2, "still waiting for rank 1", 1, 30));
    int owner = shm_owner(run_id);
    TH_ASSERT(&p, owner > 0);
    TH_ASSERT(&p, kill(owner, SIGKILL) == 0);
    TH_ASSERT(&p, th_wait_exit(&p, 60));
    TH_ASSERT(&p, th_status(&p) != 0);
    TH_ASSERT(&p, shm_owner(run_id) == 0);
    th_cleanup(&p);
}

/* A libddp job that succeeds without --log-dir leaves nothing in TMPDIR (its flight
 * recorder rings were left there, a directory a node and job). */
static void test_success_leaves_nothing(void **state)
{
    char *tmp = th_tmpdir(), var[1100];
    snprintf(var, sizeof var, "TMPDIR=%s", tmp);
    const char *env[] = {var, NULL};
    run_mode(2, "collectives", NULL, env, "shm", "collectives ok");
    DIR *dir = opendir(tmp);
    struct dirent *e;
    int left = 0;
    while (dir != NULL && (e = readdir(dir)) != NULL)
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) {
            fprintf(stderr, "left in TMPDIR: %s\n", e->d_name);
            left++;
        }
    if (dir != NULL)
        closedir(dir);
    assert_int_equal(left, 0);
    th_rmtree(tmp);
    free(tmp);
}

static void test_all_reduce_world_2_tcp(void **state)
{
    run_mode(2, "check", "1000003", no_shm, "tcp", "cases");
}

static void test_all_reduce_world_3_shm(void **state)
{
    run_mode(3, "check", "1000003", NULL, "shm", "cases");
}

static void test_all_reduce_world_4_one_rank_without_shm(void **state)
{
    const char *env[] = {"DDP_TEST_NO_SHM_RANK=2", NULL};
    run_mode(4, "check", "65537", env, "tcp", "cases");
}

static void test_all_reduce_world_5_shm(void **state)
{
    run_mode(5, "check", "65537", NULL, "shm", "cases");
}

static void test_broadcast_all_gather_barrier(void **state)
{
    for (int world = 1; world <= 4; world++)
        run_mode(world, "collectives", NULL, NULL, "shm", "collectives ok");
    run_mode(3, "collectives", NULL, no_shm, "tcp", "collectives ok");
}

/* The reducer: averages bucket by bucket while the backward pass goes on (the first
 * bucket's all-reduce begins before the last gradient is ready), 3 buckets as PyTorch's
 * assignment gives for these sizes, and names a gradient left unmarked. */
static void test_reducer_overlaps_and_averages(void **state)
{
    static const char *const layouts[] = {"separate", "block", "mixed"};
    for (int world = 1; world <= 3; world++) {
        th_proc_t p;
        /* Separate buffers are copied into buckets, one block is averaged in place; a
         * job that mixes the two must agree on the layout. */
        run_mode_keep(world, "reducer", layouts[world - 1], NULL, "shm", "reducer ok", &p);
        const char *out = ddp_buf_str(&p.out);
        TH_ASSERT(&p, th_count(out, "buckets 3\n") == world);
        if (world == 1) { /* alone: no thread, no communication (issue 35, item 5) */
            TH_ASSERT(&p, th_count(out, "communication none yes\n") == 1);
            TH_ASSERT(&p, th_count(out, "thread named no\n") == 1);
        } else {
            TH_ASSERT(&p, th_count(out, "overlap yes\n") == world);
            TH_ASSERT(&p, th_count(out, "thread named yes\n") == world); /* top -H, gdb */
        }
        TH_ASSERT(&p,
                  th_count(ddp_buf_str(&p.err), "not marked ready in this iteration (1)") == world);
        th_cleanup(&p);
    }
}

/* The reducer's no_sync accumulation and its bf16/f16 compression. */
static void test_reducer_modes(void **state)
{
    for (int world = 1; world <= 4; world++)
        run_mode(world, "reducer-modes", NULL, NULL, "shm", "reducer modes ok");
    run_mode(3, "reducer-modes", NULL, no_shm, "tcp", "reducer modes ok");
}

/* Two contexts in one process (two process groups) keep their collectives apart. */
static void test_two_groups(void **state)
{
    run_mode(3, "groups", NULL, NULL, "shm", "groups ok");
}

/* The sampler: across the ranks every sample once per epoch (PyTorch's padding aside). */
static void test_sampler_exactly_once(void **state)
{
    for (int world = 1; world <= 4; world++)
        run_mode(world, "sampler", NULL, NULL, "shm", "sampler ok");
}

/* Names in `dir` other than `allowed` (a temporary file left by a save shows here). */
static int stray_files(const char *dir, const char *const *allowed)
{
    int stray = 0;
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d != NULL && (e = readdir(d)) != NULL) {
        bool ok = e->d_name[0] == '.';
        for (int i = 0; allowed[i] != NULL && !ok; i++)
            ok = strcmp(e->d_name, allowed[i]) == 0;
        if (!ok) {
            fprintf(stderr, "unexpected in %s: %s\n", dir, e->d_name);
            stray++;
        }
    }
    if (d != NULL)
        closedir(d);
    return stray;
}

/* Checkpoint round trips, no checkpoint yet, damaged files, a file only one rank sees. */
static void test_checkpoint_round_trip(void **state)
{
    for (int world = 1; world <= 3; world += 2) {
        char *dir = th_tmpdir();
        run_mode(world, "checkpoint", dir, NULL, "shm", "checkpoint ok");
        const char *allowed[] = {"ckpt.bin", "rank0", "rank1", "rank2", NULL};
        assert_int_equal(stray_files(dir, allowed), 0);
        th_rmtree(dir);
        free(dir);
    }
}

/* Runs collective_worker.c's `mode` (its arguments after it, NULL-terminated; at most 4)
 * on 2 ranks with one restart: attempt 0 fails after step 3 (saying `failed`), attempt 1
 * resumes at step 3 on both ranks and finishes the 6 steps. */
static void run_resume(const char *const *mode, const char *const *env, const char *failed)
{
    const char *argv[12] = {th_launcher(), "--nproc-per-node=2", "--max-restarts=1", "--no-python",
                            collectives()};
    for (int i = 0; mode[i] != NULL && i < 4; i++)
        argv[5 + i] = mode[i];
    th_proc_t p;
    th_run(&p, argv, env, 120);
    const char *out = ddp_buf_str(&p.out);
    TH_ASSERT(&p, th_status(&p) == 0);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), failed) != NULL);
    TH_ASSERT(&p, strstr(out, "rank 0 attempt 1 resumed at step 3\n") != NULL);
    TH_ASSERT(&p, strstr(out, "rank 1 attempt 1 resumed at step 3\n") != NULL);
    TH_ASSERT(&p, th_count(out, "finished 6 steps on attempt 1\n") == 2);
    th_cleanup(&p);
}

/* The use they are for: attempt 0 fails after step 3, the launcher restarts the job,
 * and attempt 1 resumes from the checkpoint of step 3 instead of step 0. */
static void test_restart_resumes_from_checkpoint(void **state)
{
    char *dir = th_tmpdir();
    const char *mode[] = {"resume", dir, "6", NULL};
    run_resume(mode, NULL, "rank 1: failing after step 3");
    th_rmtree(dir);
    free(dir);
}

/* The test's DDP_CHECKPOINT_DIR on /dev/shm, as the launcher will make it ("K=V" in var). */
static char *shm_checkpoint_dir(char *var, size_t cap)
{
    char *dir = th_shm_tmpdir();
    snprintf(var, cap, "DDP_CHECKPOINT_DIR=%s", dir);
    return dir;
}

/* In-memory checkpoints (collective_worker.c's memory mode): round trips, the newest step
 * every rank holds, DDP_CHECKPOINT_STEP, misuse, another world size; each rank's two slot
 * files and nothing else in the directory, which the test removes. */
static void test_memory_checkpoints(void **state)
{
    for (int world = 1; world <= 3; world += 2) {
        char var[128];
        char *dir = shm_checkpoint_dir(var, sizeof var);
        const char *env[] = {var, NULL};
        run_mode(world, "memory", NULL, env, "shm", "memory ok");
        const char *allowed[] = {"rank0.0", "rank0.1", "rank1.0", "rank1.1",
                                 "rank2.0", "rank2.1", NULL};
        assert_int_equal(stray_files(dir, allowed), 0);
        free(dir);
    }
}

/* attempt 0's rank 1 is SIGKILLed after saving step 3 in memory; the restarted ranks load
 * step 3 from their slots and finish. */
static void test_restart_resumes_from_memory(void **state)
{
    char var[128];
    char *dir = shm_checkpoint_dir(var, sizeof var);
    const char *env[] = {var, NULL};
    const char *mode[] = {"memresume", "6", NULL};
    run_resume(mode, env, "rank 1: killed after step 3");
    free(dir);
}

/* NCCL's unique id needs no GPU: rank 0's ncclGetUniqueId reaches every rank through the
 * launcher's store, all 128 bytes of it. Without NCCL built in, the call says so. */
static void test_nccl_unique_id_exchange(void **state)
{
    const char *have = getenv("DDP_TEST_HAVE_NCCL");
    const char *argv[] = {
        th_launcher(), "--nproc-per-node=4", "--no-python", collectives(), "nccl-id", NULL};
    th_proc_t p;
    th_run(&p, argv, NULL, 120);
    const char *out = ddp_buf_str(&p.out);
    TH_ASSERT(&p, th_status(&p) == 0);
    if (have == NULL || strcmp(have, "1") != 0) {
        TH_ASSERT(&p, th_count(out, "nccl-id unavailable: nccl_unique_id: libddp was built "
                                    "without NCCL\n") == 4);
        th_cleanup(&p);
        return;
    }
    TH_ASSERT(&p, th_count(out, "nccl-id ok, world 4\n") == 4);
    /* The ranks compared their ids among themselves; the printed ones agree too. */
    const char *first = out;
    while ((first = strstr(first, "nccl-id ")) != NULL && strncmp(first, "nccl-id ok", 10) == 0)
        first++;
    TH_ASSERT(&p, first != NULL);
    char line[300];
    size_t len = strcspn(first, "\n");
    TH_ASSERT(&p, len == strlen("nccl-id ") + 256 && len < sizeof line);
    memcpy(line, first, len);
    line[len] = '\0';
    TH_ASSERT(&p, th_count(out, line) == 4);
    th_cleanup(&p);
}

/* DDP_BACKEND: nccl where no GPU is visible (or NCCL is not built in) and a bad name
 * are clear errors at init, in the report too; auto on this GPU-less machine is cpu. */
static void test_backend_choice(void **state)
{
    const char *have = getenv("DDP_TEST_HAVE_NCCL");
    bool nccl = have != NULL && strcmp(have, "1") == 0;
    const char *argv[] = {th_launcher(), "--nproc-per-node=2", "--no-python",
                          collectives(), "collectives",        NULL};
    const char *want_nccl[] = {"DDP_BACKEND=nccl", "CUDA_VISIBLE_DEVICES=", NULL};
    th_proc_t p;
    th_run(&p, argv, want_nccl, 120);
    TH_ASSERT(&p, th_status(&p) == 1);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err),
                         nccl ? "the NCCL backend needs a GPU and none is visible"
                              : "the NCCL backend is not built into this libddp") != NULL);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "traceback : libddp: error: rank ") != NULL);
    th_cleanup(&p);

    const char *bogus[] = {"DDP_BACKEND=gloo", NULL};
    th_run(&p, argv, bogus, 120);
    TH_ASSERT(&p, th_status(&p) == 1);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "DDP_BACKEND=gloo is not cpu, nccl or auto") != NULL);
    th_cleanup(&p);

    const char *automatic[] = {"DDP_BACKEND=auto", "CUDA_VISIBLE_DEVICES=", NULL};
    th_run(&p, argv, automatic, 120);
    TH_ASSERT(&p, th_status(&p) == 0);
    TH_ASSERT(&p, th_count(ddp_buf_str(&p.out), "collectives ok, world 2\n") == 2);
    th_cleanup(&p);
}

/* Four workers on a node with two GPUs (the tests' stand-in CUDA runtime,
 * FAKE_CUDA_DEVICES): ranks 2 and 3 have none of their own and say so; ranks 0 and 1 name
 * one of them as the cause, where they used to wait in NCCL's init until the launcher
 * stopped them without a word. With a GPU for each, every rank passes that agreement and
 * goes on to NCCL's own init (which fails, NCCL finding no GPU here, or fewer than 4). */
static void test_rank_without_gpu_is_named_by_all(void **state)
{
    const char *dir = getenv("DDP_TEST_FAKE_CUDART_DIR");
    if (dir == NULL || *dir == '\0') {
        printf("built without NCCL: skipped\n");
        return;
    }
    char path[4200];
    snprintf(path, sizeof path, "LD_LIBRARY_PATH=%s", dir);
    const char *argv[] = {th_launcher(), "--nproc-per-node=4", "--no-python",
                          collectives(), "collectives",        NULL};
    const char *two[] = {path, "FAKE_CUDA_DEVICES=2", "DDP_BACKEND=nccl", "DDP_TIMEOUT=600", NULL};
    th_proc_t p;
    th_run(&p, argv, two, 120);
    const char *err = ddp_buf_str(&p.err), *root = strstr(err, "Root Cause");
    TH_ASSERT(&p, th_status(&p) == 1);
    for (int rank = 2; rank < 4; rank++) {
        char line[120];
        snprintf(line, sizeof line, "rank %d: LOCAL_RANK %d has no GPU of its own: 2 visible", rank,
                 rank);
        TH_ASSERT(&p, strstr(err, line) != NULL);
    }
    for (int rank = 0; rank < 2; rank++) {
        char line[200];
        const char *said = NULL;
        for (int peer = 2; peer < 4 && said == NULL; peer++) {
            snprintf(line, sizeof line,
                     "rank %d: rank %d could not set up its GPU, so no rank can create the NCCL "
                     "communicator: LOCAL_RANK %d has no GPU of its own",
                     rank, peer, peer);
            said = strstr(err, line);
        }
        TH_ASSERT(&p, said != NULL);
    }
    TH_ASSERT(&p, strstr(err, "NCCL communicator init") == NULL);
    TH_ASSERT(&p, strstr(err, "unable to create the NCCL communicator:") == NULL);
    TH_ASSERT(&p, root != NULL && (strstr(root, "rank      : 2 (local_rank: 2)") != NULL ||
                                   strstr(root, "rank      : 3 (local_rank: 3)") != NULL));
    th_cleanup(&p);

    /* (Where fewer real GPUs are, NCCL may fail otherwise, or wait: 20 s at most.) */
    const char *four[] = {path, "FAKE_CUDA_DEVICES=4", "DDP_BACKEND=nccl", "DDP_TIMEOUT=20", NULL};
    th_run(&p, argv, four, 120);
    err = ddp_buf_str(&p.err);
    TH_ASSERT(&p, th_status(&p) == 1);
    TH_ASSERT(&p, strstr(err, "unable to create the NCCL communicator: ") != NULL ||
                      strstr(err, "NCCL communicator init: ") != NULL);
    TH_ASSERT(&p, strstr(err, "could not set up its GPU") == NULL);
    TH_ASSERT(&p, strstr(err, "has no GPU of its own") == NULL);
    th_cleanup(&p);
}

/* Where the ring listens: DDP_SOCKET_IFNAME's interface, else --local-addr (DDP_LOCAL_ADDR),
 * else the store connection's address. A choice that is no address here fails, said. */
static void test_ring_address_choice(void **state)
{
    static const struct {
        const char *flag, *env, *said;
    } cases[] = {
        {"--local-addr=127.0.0.3", NULL, NULL},
        {"--local-addr=192.0.2.123", NULL,
         "unable to listen for the other ranks on 192.0.2.123: Cannot assign requested address"},
        {"--local-addr=no-such-host.invalid", NULL,
         "DDP_LOCAL_ADDR=no-such-host.invalid (ddp-launch --local-addr): no such address"},
        {"--role=trainer", "DDP_SOCKET_IFNAME==lo", NULL},
        {"--role=trainer", "DDP_SOCKET_IFNAME=nosuch",
         "DDP_SOCKET_IFNAME=nosuch: no interface here that is up and has an address matches it"},
        {"--local-addr=192.0.2.123", "DDP_SOCKET_IFNAME=lo", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const char *argv[] = {th_launcher(), "--nproc-per-node=2", cases[i].flag, "--no-python",
                              collectives(), "collectives",        NULL};
        const char *env[] = {cases[i].env != NULL ? cases[i].env : "DDP_SOCKET_IFNAME", NULL};
        th_proc_t p;
        th_run(&p, argv, env, 120);
        printf("%s %s: status %d\n", cases[i].flag, env[0], th_status(&p));
        if (cases[i].said == NULL) {
            TH_ASSERT(&p, th_status(&p) == 0);
            TH_ASSERT(&p, th_count(ddp_buf_str(&p.out), "collectives ok, world 2\n") == 2);
        } else {
            TH_ASSERT(&p, th_status(&p) == 1);
            TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), cases[i].said) != NULL);
        }
        th_cleanup(&p);
    }
}

/* Rank 1 of 3 is SIGKILLed in the middle of an all_reduce. Its neighbours ignore SIGTERM,
 * so the launcher's stop cannot be what ends them: libddp must notice the closed
 * connection, fail with an error naming the peer, and the report names the root cause. */
static void run_dead_peer(const char *const *env)
{
    char id_flag[128], id[64];
    unique_run_id(id_flag, sizeof id_flag, id, sizeof id);
    const char *argv[] = {
        th_launcher(), "--nproc-per-node=3", id_flag, "--no-python", collectives(), "die", "1",
        NULL};
    th_proc_t p;
    double started = th_now();
    th_run(&p, argv, env, 120);
    const char *err = ddp_buf_str(&p.err);
    TH_ASSERT(&p, th_now() - started < 60); /* DDP_TIMEOUT is 600 s: a hang would show */
    TH_ASSERT(&p, th_status(&p) == 1);
    TH_ASSERT(&p, strstr(err, "rank 1: dying now") != NULL);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.out), "was never stopped") == NULL);
    /* The survivors' own error names rank 1, the peer that went away. */
    TH_ASSERT(&p, strstr(err, "rank 0: all_reduce failed") != NULL ||
                      strstr(err, "rank 2: all_reduce failed") != NULL);
    TH_ASSERT(&p, strstr(err, "rank 1 (127.0.0.1:") != NULL && strstr(err, "is gone") != NULL);
    /* The report's root cause is the rank that was killed. */
    const char *root = strstr(err, "Root Cause");
    TH_ASSERT(&p, root != NULL && strstr(root, "rank      : 1 (local_rank: 1)") != NULL);
    TH_ASSERT(&p, root != NULL && strstr(root, "Signal 9 (SIGKILL) received by PID") != NULL);
    TH_ASSERT(&p, no_segment_left(id));
    th_cleanup(&p);
}

/* A rank that leaves (its links closed) and exits with an error a moment later, after
 * its neighbour has failed for it (and made one more collective, which failed too) and
 * the stop has begun: the report's root cause is still its own failure, not the
 * neighbour's that noticed. */
static void test_peer_that_leaves_is_the_root_cause(void **state)
{
    char id_flag[128], id[64];
    unique_run_id(id_flag, sizeof id_flag, id, sizeof id);
    const char *argv[] = {
        th_launcher(), "--nproc-per-node=2", id_flag, "--no-python", collectives(), "leave", "0",
        NULL};
    const char *env[] = {"DDP_TIMEOUT=600", NULL};
    th_proc_t p;
    th_run(&p, argv, env, 120);
    const char *err = ddp_buf_str(&p.err);
    TH_ASSERT(&p, th_status(&p) == 1);
    TH_ASSERT(&p, strstr(err, "rank 0: leaving") != NULL);
    TH_ASSERT(&p, strstr(err, "rank 1: all_reduce failed") != NULL &&
                      strstr(err, "rank 0 (127.0.0.1:") != NULL && strstr(err, "is gone") != NULL);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.out), "was never stopped") == NULL);
    const char *root = strstr(err, "Root Cause");
    TH_ASSERT(&p, root != NULL && strstr(root, "rank      : 0 (local_rank: 0)") != NULL);
    TH_ASSERT(&p, root != NULL && strstr(root, "exitcode  : 5") != NULL);
    TH_ASSERT(&p, no_segment_left(id));
    th_cleanup(&p);
}

static void test_dead_peer_shm(void **state)
{
    const char *env[] = {"DDP_TIMEOUT=600", NULL};
    run_dead_peer(env);
}

static void test_dead_peer_tcp(void **state)
{
    const char *env[] = {"DDP_TIMEOUT=600", "DDP_SHM=0", NULL};
    run_dead_peer(env);
}

/* Whether `err` has rank `rank`'s message that it called `mine` while its previous rank,
 * `prev`, called `theirs` (one line; the address between them varies). */
static bool says_differ(const char *err, int rank, const char *mine, int prev, const char *theirs)
{
    char head[256], tail[256];
    snprintf(head, sizeof head, "rank %d: collectives differ: this rank called %s, but rank %d (",
             rank, mine, prev);
    snprintf(tail, sizeof tail, ") called %s; every rank must make the same collective calls",
             theirs);
    const char *at = strstr(err, head), *end = at != NULL ? strchr(at, '\n') : NULL;
    const char *found = at != NULL ? strstr(at, tail) : NULL;
    return found != NULL && (end == NULL || found < end);
}

/* Ranks whose collective calls differ fail at once, saying what each called, instead of
 * mixing data of different shapes or waiting out the timeout (600 s here; the run has
 * 120). The last rank's call differs: it and rank 0, its next, each see the other's. The
 * first to see it fails, and the launcher then stops the rest, so one of the two
 * messages is certain, and the report's root cause. */
static void run_mismatch(int world, const char *how, const char *const *env, const char *here,
                         const char *there)
{
    char nproc[64], id_flag[128], id[64], line[128];
    snprintf(nproc, sizeof nproc, "--nproc-per-node=%d", world);
    unique_run_id(id_flag, sizeof id_flag, id, sizeof id);
    const char *argv[] = {th_launcher(), nproc,      id_flag, "--no-python",
                          collectives(), "mismatch", how,     NULL};
    th_proc_t p;
    th_run(&p, argv, env, 120);
    const char *out = ddp_buf_str(&p.out), *err = ddp_buf_str(&p.err);
    TH_ASSERT(&p, th_status(&p) == 1);
    TH_ASSERT(&p, says_differ(err, world - 1, there, world - 2, here) ||
                      says_differ(err, 0, here, world - 1, there));
    const char *root = strstr(err, "Root Cause");
    TH_ASSERT(&p, root != NULL && strstr(root, "collectives differ: this rank called ") != NULL);
    snprintf(line, sizeof line, ": mismatch %s: invalid usage; then failed too\n", how);
    TH_ASSERT(&p, strstr(out, line) != NULL);
    TH_ASSERT(&p, strstr(out, "went on") == NULL && strstr(out, "no error") == NULL);
    TH_ASSERT(&p, no_segment_left(id));
    th_cleanup(&p);
}

static void test_mismatched_collectives_shm(void **state)
{
    const char *env[] = {"DDP_TIMEOUT=600", NULL};
    /* #0 is the transport vote, #1 the barrier: the mismatch is collective #2. */
    run_mismatch(2, "count", env, "all_reduce #2 of 1000 float32 (sum)",
                 "all_reduce #2 of 1001 float32 (sum)");
    run_mismatch(2, "dtype", env, "all_reduce #2 of 1000 float32 (sum)",
                 "all_reduce #2 of 1000 int32 (sum)");
    run_mismatch(2, "op", env, "all_reduce #2 of 1000 float32 (sum)",
                 "all_reduce #2 of 1000 float32 (max)");
    run_mismatch(3, "kind", env, "all_reduce #2 of 1000 float32 (sum)",
                 "broadcast #2 of 1000 float32 from rank 0");
}

/* Three ranks, and only rank 1's count differs: the report's root cause is rank 1, the
 * odd one out, not rank 0 or 2 that each disagreed with it. Its message is in the
 * documented form. */
static void test_mismatch_blames_the_odd_one_out(void **state)
{
    const char *argv[] = {
        th_launcher(), "--nproc-per-node=3", "--no-python", collectives(), "mismatch", "count", "1",
        NULL};
    /* Over the board (one host), then over the TCP ring, where each rank sees only its
     * previous rank's call and the two that see a difference compare notes in the store. */
    const char *board[] = {"DDP_TIMEOUT=600", NULL},
               *ring[] = {"DDP_TIMEOUT=600", "DDP_SHM=0", NULL};
    const char *const *envs[] = {board, ring};
    for (int i = 0; i < 2; i++) {
        th_proc_t p;
        th_run(&p, argv, envs[i], 120);
        const char *err = ddp_buf_str(&p.err), *root = strstr(err, "Root Cause");
        TH_ASSERT(&p, th_status(&p) == 1);
        TH_ASSERT(&p, root != NULL && strstr(root, "rank      : 1 (local_rank: 1)") != NULL);
        TH_ASSERT(&p, root != NULL &&
                          strstr(root, "libddp: error: rank 1: collectives differ: this "
                                       "rank called all_reduce #2 of 1001 float32") != NULL);
        th_cleanup(&p);
    }
}

static void test_mismatched_collectives_tcp(void **state)
{
    const char *env[] = {"DDP_TIMEOUT=600", "DDP_SHM=0", NULL};
    run_mismatch(2, "count", env, "all_reduce #2 of 1000 float32 (sum)",
                 "all_reduce #2 of 1001 float32 (sum)");
    run_mismatch(3, "kind", env, "all_reduce #2 of 1000 float32 (sum)",
                 "broadcast #2 of 1000 float32 from rank 0");
}

/* A rank whose peer never calls ddp_init says, in its own name, which rank and for how
 * long (DDP_TIMEOUT), not the last of its one-second waits. */
static void test_init_timeout_names_the_missing_rank(void **state)
{
    char script[600];
    snprintf(script, sizeof script, "if [ \"$LOCAL_RANK\" = 0 ]; then sleep 30; else exec '%s'; fi",
             getenv("DDP_TEST_HELLO"));
    const char *argv[] = {
        th_launcher(), "--nproc-per-node=2", "--no-python", "/bin/sh", "-c", script, NULL};
    const char *env[] = {"DDP_TIMEOUT=2", NULL};
    th_proc_t p;
    th_run(&p, argv, env, 60);
    TH_ASSERT(&p, th_status(&p) == 1);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err),
                         "rank 1: rank 0 never published its address within 2 s (DDP_TIMEOUT): "
                         "it has not called ddp_init") != NULL);
    th_cleanup(&p);
}

/* reduce, reduce_scatter, all_to_all, gather, scatter, send and recv: every dtype and
 * op against serial references on 1 to 5 ranks, counts smaller than the world and odd,
 * over shared memory and TCP; buffers that must not change do not. */
static void test_more_collectives(void **state)
{
    static const char *const one_rank_tcp[] = {"DDP_TEST_NO_SHM_RANK=1", NULL};
    run_mode(1, "more", "65537", NULL, "shm", "more ok: 180 cases"); /* world - 1 is 0 */
    for (int world = 2; world <= 5; world++)
        run_mode(world, "more", "65537", NULL, "shm", "more ok: 210 cases");
    run_mode(2, "more", "65537", no_shm, "tcp", "more ok: 210 cases");
    run_mode(3, "more", "1000", one_rank_tcp, "tcp", "more ok: 180 cases");
    run_mode(5, "more", "1000", no_shm, "tcp", "more ok: 180 cases");
}

/* A recv whose count and dtype differ from its send's fails at once, naming both; the
 * send's data is dropped and the context stays usable on both ranks (a barrier, then a
 * send and recv that match). */
static void test_send_recv_mismatch(void **state)
{
    const char *argv[] = {th_launcher(), "--nproc-per-node=2", "--no-python",
                          collectives(), "p2p-mismatch",       NULL};
    const char *env[] = {"DDP_TIMEOUT=600", NULL};
    th_proc_t p;
    th_run(&p, argv, env, 60);
    const char *out = ddp_buf_str(&p.out);
    TH_ASSERT(&p, th_status(&p) == 0);
    TH_ASSERT(&p, strstr(out, "rank 1: p2p mismatch: send and recv differ: rank 0 sent send #1 of "
                              "10 int32, but this rank's recv is send #1 of 11 float32") != NULL);
    TH_ASSERT(&p, strstr(out, "rank 0: after the mismatch: barrier and send 42\n") != NULL);
    TH_ASSERT(&p, strstr(out, "rank 1: after the mismatch: barrier and send 42\n") != NULL);
    th_cleanup(&p);
}

/* Runs `misuse CASE` on `world` ranks with `env`; the caller checks and cleans up. */
static void run_misuse(th_proc_t *p, int world, const char *how, const char *const *env)
{
    char nproc[64];
    snprintf(nproc, sizeof nproc, "--nproc-per-node=%d", world);
    const char *argv[] = {th_launcher(), nproc, "--no-python", collectives(), "misuse", how, NULL};
    th_run(p, argv, env, 60);
}

static const char *const long_timeout[] = {"DDP_TIMEOUT=600", NULL};

/* send and recv name their bad peer as a peer, on stderr in the documented form
 * ("libddp: error: rank N: ..."), and leave the context usable. */
static void test_misuse_peer(void **state)
{
    th_proc_t p;
    run_misuse(&p, 2, "peer", long_timeout);
    const char *err = ddp_buf_str(&p.err);
    TH_ASSERT(&p, th_status(&p) == 0);
    TH_ASSERT(&p, th_count(ddp_buf_str(&p.out), ": misuse peer: ok\n") == 2);
    TH_ASSERT(&p, strstr(err, "libddp: error: rank 1: send: peer 7 is not a rank of the 2\n"));
    TH_ASSERT(&p, strstr(err, "libddp: error: rank 0: recv: peer -1 is not a rank of the 2\n"));
    TH_ASSERT(&p, strstr(err, "root") == NULL);
    th_cleanup(&p);
}

/* Every kind of entry point given a NULL context or object returns DDP_EUSAGE and says
 * so, instead of crashing; the real context still works. */
static void test_misuse_null(void **state)
{
    th_proc_t p;
    run_misuse(&p, 2, "null", long_timeout);
    TH_ASSERT(&p, th_status(&p) == 0);
    TH_ASSERT(&p, th_count(ddp_buf_str(&p.out), ": misuse null: ok\n") == 2);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "libddp: error: ddp_barrier: the context is NULL"));
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "libddp: error: ddp_reducer_ready: the reducer is "
                                              "NULL"));
    th_cleanup(&p);
}

/* A call on a finalized context is refused at once (it used to spin for a minute, then
 * crash), whatever DDP_TIMEOUT is. Under AddressSanitizer the worker skips the call. */
static void test_misuse_after_finalize(void **state)
{
    th_proc_t p;
    run_misuse(&p, 2, "finalized", long_timeout);
    const char *out = ddp_buf_str(&p.out);
    TH_ASSERT(&p, th_status(&p) == 0);
    if (th_count(out, "finalized: skipped") == 0) {
        TH_ASSERT(&p, th_count(out, ": barrier after finalize: refused\n") == 2);
        TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "is not a live context"));
    }
    th_cleanup(&p);
}

/* A usage error the program handled is not the job's root cause: the crash that
 * followed is (the error file is for failures that end the context). */
static void test_handled_error_is_not_the_root_cause(void **state)
{
    th_proc_t p;
    run_misuse(&p, 2, "handled", long_timeout);
    const char *err = ddp_buf_str(&p.err), *root = strstr(err, "Root Cause");
    TH_ASSERT(&p, th_status(&p) == 1);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.out), "rank 1: recv from -1: refused\n"));
    TH_ASSERT(&p, root != NULL && strstr(root, "rank      : 1 (local_rank: 1)") != NULL);
    /* Not its error file's message; the last line it wrote may be the handled error. */
    TH_ASSERT(&p, root != NULL && strstr(root, "  error_file: <N/A>\n  traceback : Signal 11 "
                                               "(SIGSEGV)") != NULL);
    th_cleanup(&p);
}

/* A root-only usage error (gather into NULL on the root) keeps nobody waiting: the
 * root's call fails, the others' succeed, and every context goes on. */
static void test_gather_into_null_on_the_root(void **state)
{
    static const char *const tcp[] = {"DDP_TIMEOUT=600", "DDP_SHM=0", NULL};
    th_proc_t p;
    run_misuse(&p, 3, "gather-null", long_timeout);
    TH_ASSERT(&p, th_status(&p) == 0);
    TH_ASSERT(&p, th_count(ddp_buf_str(&p.out), ": misuse gather-null: ok\n") == 3);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "gather: the root's receive buffer is NULL"));
    th_cleanup(&p);
    run_misuse(&p, 3, "gather-null", tcp);
    TH_ASSERT(&p, th_status(&p) == 0);
    TH_ASSERT(&p, th_count(ddp_buf_str(&p.out), ": misuse gather-null: ok\n") == 3);
    th_cleanup(&p);
}

/* Two ranks that both send 64 MiB before receiving: rank 0 (DDP_TIMEOUT=2) gives up and
 * exits with unread data, which resets its connections; rank 1 (600 s) must report the
 * reset as DDP_ECLOSED, a peer gone, not as -ECONNRESET. */
static void test_reset_peer_is_closed(void **state)
{
    char script[600];
    snprintf(script, sizeof script,
             "if [ \"$RANK\" = 0 ]; then DDP_TIMEOUT=2; else DDP_TIMEOUT=600; fi; "
             "export DDP_TIMEOUT; exec '%s' misuse both-send",
             collectives());
    const char *argv[] = {
        th_launcher(), "--nproc-per-node=2", "--no-python", "/bin/sh", "-c", script, NULL};
    const char *env[] = {"DDP_SHM=0", NULL};
    th_proc_t p;
    th_run(&p, argv, env, 60);
    const char *out = ddp_buf_str(&p.out);
    char want[128];
    snprintf(want, sizeof want, "rank 1: both-send: %s\n", ddp_strerror(DDP_ECLOSED));
    TH_ASSERT(&p, strstr(out, "rank 0: both-send: ") != NULL);
    TH_ASSERT(&p, strstr(out, want) != NULL);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "rank 1: send: rank 0 is gone") != NULL);
    th_cleanup(&p);
}

/* Started by hand, without RANK: the message names what is missing and no rank. */
static void test_no_rank_without_a_launcher(void **state)
{
    const char *argv[] = {collectives(), "check", NULL};
    const char *env[] = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", NULL};
    th_proc_t p;
    th_run(&p, argv, env, 30);
    const char *err = ddp_buf_str(&p.err);
    TH_ASSERT(&p, th_status(&p) == 3);
    TH_ASSERT(&p, strstr(err, "libddp: error: WORLD_SIZE is not set: start this program with "
                              "ddp-launch") != NULL);
    TH_ASSERT(&p, strstr(err, "rank 0") == NULL);
    th_cleanup(&p);
}

/* The file under run directory `logs` matching `pattern` (a glob below the run's
 * directory, "attempt_0/1/flight_main.json"), read whole into a new string, or NULL. */
static char *run_file(const char *logs, const char *pattern)
{
    char want[1024];
    glob_t g;
    char *text = NULL;
    size_t len;
    snprintf(want, sizeof want, "%s/*/%s", logs, pattern);
    if (glob(want, 0, NULL, &g) == 0 && g.gl_pathc == 1)
        (void)ddp_read_file(g.gl_pathv[0], 1 << 20, &text, &len);
    globfree(&g);
    return text;
}

/* Rank 1 of 3 skips all_reduce #5 (it sleeps instead); the others wait in it. */
static void run_skip(const char *logs, const char *const *flags, const char *const *env,
                     th_proc_t *p)
{
    char log_flag[600], events[640];
    snprintf(log_flag, sizeof log_flag, "--log-dir=%s", logs);
    snprintf(events, sizeof events, "--event-log-handler=file:%s/events.jsonl", logs);
    const char *argv[16] = {th_launcher(), "--nproc-per-node=3", "--no-python", log_flag, events};
    int n = 5;
    for (int i = 0; flags[i] != NULL; i++)
        argv[n++] = flags[i];
    argv[n++] = collectives();
    argv[n++] = "skip";
    argv[n++] = "1";
    argv[n++] = "5";
    argv[n] = NULL;
    th_run(p, argv, env, 120);
}

/* What every hang report of run_skip says: the verdict, before any stop, a table row a
 * rank, the flight recorders on disk, the report file and the event. */
static void check_skip_report(th_proc_t *p, const char *logs)
{
    const char *err = ddp_buf_str(&p->err);
    const char *report = strstr(err, "hang report (");
    const char *verdict =
        strstr(err, "verdict: rank 1 never entered all_reduce #5; ranks 0, 2 wait in it\n");
    const char *stop = strstr(err, "sending SIGTERM");
    TH_ASSERT(p, th_status(p) == 1);
    TH_ASSERT(p, report != NULL && verdict != NULL && report < verdict);
    TH_ASSERT(p, stop != NULL && verdict < stop); /* before anything is stopped */
    TH_ASSERT(p, strstr(report, "  all_reduce #4 of 1000 float32 (sum)     (between collectives)"));
    TH_ASSERT(p, th_count(report, "all_reduce #5 of 1000 float32 (sum)") >= 2);
    /* Each rank's flight recorder, as JSON beside its error file: the victim's on the
     * launcher's request, and where every rank was. */
    char *victim = run_file(logs, "attempt_0/1/flight_main.json");
    TH_ASSERT(p, victim != NULL && strstr(victim, "\"rank\": 1, \"world_size\": 3"));
    TH_ASSERT(p, victim != NULL && strstr(victim, "\"reason\": \"request\""));
    TH_ASSERT(p, victim != NULL && strstr(victim, "\"entered\": 4, \"completed\": 4, "
                                                  "\"current\": null"));
    free(victim);
    for (int rank = 0; rank <= 2; rank += 2) {
        char pattern[64];
        snprintf(pattern, sizeof pattern, "attempt_0/%d/flight_main.json", rank);
        char *waiter = run_file(logs, pattern);
        TH_ASSERT(p, waiter != NULL && strstr(waiter, "\"entered\": 5, \"completed\": 4"));
        TH_ASSERT(p, waiter != NULL && strstr(waiter, "\"current\": {\"seq\": 5, \"op\": "
                                                      "\"all_reduce\", \"count\": 1000"));
        TH_ASSERT(p, waiter != NULL && th_count(waiter, "\"state\": \"done\"") == 4);
        free(waiter);
    }
    char *saved = run_file(logs, "attempt_0/hang_report.txt");
    TH_ASSERT(p, saved != NULL && strstr(saved, "verdict: rank 1 never entered all_reduce #5"));
    free(saved);
    char path[700], *events = NULL;
    size_t len;
    snprintf(path, sizeof path, "%s/events.jsonl", logs);
    TH_ASSERT(p, ddp_read_file(path, 1 << 20, &events, &len) == 0);
    const char *hang = events ? strstr(events, "\"event\": \"hang_report\"") : NULL;
    const char *stop_sent = events ? strstr(events, "\"event\": \"stop_sent\"") : NULL;
    TH_ASSERT(p, hang != NULL && strstr(hang, "\"ranks\": 3"));
    TH_ASSERT(p, hang != NULL && stop_sent != NULL && hang < stop_sent);
    free(events);
}

/* A collective that times out (DDP_TIMEOUT=3) is reported, rank by rank, before the
 * launcher stops anything: the rank that never entered it and its sequence number. */
static void test_hang_report_on_collective_timeout(void **state)
{
    char *logs = th_tmpdir();
    const char *flags[] = {NULL}, *env[] = {"DDP_TIMEOUT=3", NULL};
    th_proc_t p;
    run_skip(logs, flags, env, &p);
    check_skip_report(&p, logs);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "collective timed out: collecting where every rank "
                                              "stands before stopping anything"));
    th_cleanup(&p);
    th_rmtree(logs);
    free(logs);
}

/* On one host a collective of up to 4 KiB waits on the board for every rank, not only its
 * neighbours: a rank further away that never comes is named with how many have come
 * (rank 2 of 4 skips all_reduce #5 of 1000 floats, DDP_TIMEOUT=2). */
static void test_board_timeout_names_the_missing_rank(void **state)
{
    const char *argv[] = {
        th_launcher(), "--nproc-per-node=4", "--no-python", collectives(), "skip", "2", "5", "30",
        NULL};
    const char *env[] = {"DDP_TIMEOUT=2", NULL};
    th_proc_t p;
    th_run(&p, argv, env, 120);
    const char *err = ddp_buf_str(&p.err);
    TH_ASSERT(&p, th_status(&p) == 1);
    /* Whichever rank times out first (rank 0 names rank 2 "on this host", its neighbours by
     * address); on the ring rank 0 would have named rank 3, its previous. */
    const char *said = strstr(err, ": all_reduce: no progress with rank 2 (");
    TH_ASSERT(&p, said != NULL && strstr(said, ") for 2 s over shared memory (3 of 4 ranks have "
                                               "come to this call)") != NULL);
    TH_ASSERT(&p, strstr(err, "no progress with rank 3") == NULL);
    /* The verdict's culprit is the report's root cause: rank 2, which never came (stopped
     * by ddp-launch), not the first rank that timed out waiting for it. */
    TH_ASSERT(&p, strstr(err, "verdict: rank 2 never entered all_reduce #5") != NULL);
    const char *root = strstr(err, "Root Cause");
    TH_ASSERT(&p, root != NULL && strstr(root, "rank      : 2 (local_rank: 2)") != NULL);
    TH_ASSERT(&p, strstr(root, "stopped by ddp-launch (SIGTERM) after rank ") != NULL);
    th_cleanup(&p);
}

/* --hang-timeout finds the same hang long before libddp's own timeout, and stops the job
 * as a failure after its report; --hang-dump saves each rank's stack. */
static void test_hang_timeout_finds_a_hang(void **state)
{
    char *logs = th_tmpdir();
    /* eu-stack and gdb out of reach (PATH): the native stacks are libunwind's. */
    const char *flags[] = {"--hang-timeout=2", "--hang-dump", NULL},
               *env[] = {"DDP_TIMEOUT=300", "PATH=/nonexistent", NULL};
    th_proc_t p;
    double started = th_now();
    run_skip(logs, flags, env, &p);
    TH_ASSERT(&p, th_now() - started < 60);
    check_skip_report(&p, logs);
    const char *err = ddp_buf_str(&p.err);
    TH_ASSERT(&p, strstr(err, "no rank has made progress for 2 s (--hang-timeout)"));
    const char *hung = strstr(err, "the job hung (no progress for ");
    double quiet = 0; /* how long it was quiet, found at a look: the timeout or more */
    TH_ASSERT(&p, hung != NULL &&
                      sscanf(hung + strlen("the job hung (no progress for "), "%lf", &quiet) == 1 &&
                      quiet >= 2 && quiet < 30);
    TH_ASSERT(&p, strstr(hung, " s): rank 1 never entered") != NULL);
    /* --hang-dump: each rank's native stack, taken while it was stuck: rank 0 inside the
     * all_reduce, rank 1 asleep. Where libunwind cannot be loaded (no libunwind8, or a
     * build without its headers) the launcher says so, and there is nothing to check. */
    if (strstr(err, "--hang-dump: no native stacks: libunwind cannot be loaded") != NULL) {
        printf("skipped the native stacks: libunwind cannot be loaded here\n");
        th_cleanup(&p);
        th_rmtree(logs);
        free(logs);
        return;
    }
    TH_ASSERT(&p, strstr(err, "--hang-dump: native stacks by libunwind") != NULL);
    /* The files named are those written: no python_stack.txt from C workers. */
    TH_ASSERT(&p, strstr(err, "/<local rank>/: flight_<group>.json (3 ranks), stack.txt (3 "
                              "ranks)\n") != NULL);
    char *waiter = run_file(logs, "attempt_0/0/stack.txt"),
         *victim = run_file(logs, "attempt_0/1/stack.txt");
    TH_ASSERT(&p,
              waiter != NULL && strstr(waiter, "ddp_all_reduce") && strstr(waiter, "mode_skip"));
    TH_ASSERT(&p,
              victim != NULL && strstr(victim, "nanosleep") && !strstr(victim, "ddp_all_reduce"));
    free(waiter);
    free(victim);
    th_cleanup(&p);
    th_rmtree(logs);
    free(logs);
}

/* A job that makes progress, slowly, is not a hang: 20 all_reduces with rank 0 pausing
 * 0.3 s before each, under --hang-timeout=1. */
static void test_hang_timeout_spares_a_slow_job(void **state)
{
    const char *argv[] = {th_launcher(), "--nproc-per-node=2",
                          "--no-python", "--hang-timeout=1",
                          collectives(), "skip",
                          "0",           "21",
                          NULL};
    const char *env[] = {"DDP_TEST_PAUSE_MS=300", NULL};
    th_proc_t p;
    th_run(&p, argv, env, 120);
    TH_ASSERT(&p, th_status(&p) == 0);
    TH_ASSERT(&p, th_count(ddp_buf_str(&p.out), "finished\n") == 2);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "hang report") == NULL);
    th_cleanup(&p);
}

int main(int argc, char **argv)
{
    if (argc > 1)
        cmocka_set_test_filter(argv[1]);
    const struct CMUnitTest tests[] = {
        TH_TEST(test_all_reduce_world_1),
        TH_TEST(test_init_timeout_names_the_missing_rank),
        TH_TEST(test_all_reduce_world_2_shm_large),
        TH_TEST(test_all_reduce_world_2_tcp),
        TH_TEST(test_success_leaves_nothing),
        TH_TEST(test_late_rank_is_waited_for_aloud),
        TH_TEST(test_all_reduce_world_3_shm),
        TH_TEST(test_all_reduce_world_4_one_rank_without_shm),
        TH_TEST(test_all_reduce_world_5_shm),
        TH_TEST(test_broadcast_all_gather_barrier),
        TH_TEST(test_reducer_overlaps_and_averages),
        TH_TEST(test_reducer_modes),
        TH_TEST(test_two_groups),
        TH_TEST(test_sampler_exactly_once),
        TH_TEST(test_checkpoint_round_trip),
        TH_TEST(test_restart_resumes_from_checkpoint),
        TH_TEST(test_memory_checkpoints),
        TH_TEST(test_restart_resumes_from_memory),
        TH_TEST(test_nccl_unique_id_exchange),
        TH_TEST(test_backend_choice),
        TH_TEST(test_rank_without_gpu_is_named_by_all),
        TH_TEST(test_ring_address_choice),
        TH_TEST(test_dead_peer_shm),
        TH_TEST(test_dead_peer_tcp),
        TH_TEST(test_peer_that_leaves_is_the_root_cause),
        TH_TEST(test_mismatched_collectives_shm),
        TH_TEST(test_mismatched_collectives_tcp),
        TH_TEST(test_more_collectives),
        TH_TEST(test_send_recv_mismatch),
        TH_TEST(test_mismatch_blames_the_odd_one_out),
        TH_TEST(test_misuse_peer),
        TH_TEST(test_misuse_null),
        TH_TEST(test_misuse_after_finalize),
        TH_TEST(test_handled_error_is_not_the_root_cause),
        TH_TEST(test_gather_into_null_on_the_root),
        TH_TEST(test_reset_peer_is_closed),
        TH_TEST(test_no_rank_without_a_launcher),
        TH_TEST(test_hang_report_on_collective_timeout),
        TH_TEST(test_board_timeout_names_the_missing_rank),
        TH_TEST(test_hang_timeout_finds_a_hang),
        TH_TEST(test_hang_timeout_spares_a_slow_job),
        TH_TEST(test_killed_rank_leaves_no_shared_memory),
        TH_TEST(test_no_progress_from_libddp),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
