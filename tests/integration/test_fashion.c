/* Integration tests: the FashionMNIST example trains for real on Debian's
 * dataset-fashion-mnist under the real launcher: accuracy targets, DDP's equivalence
 * with one worker of twice the batch, resuming after a worker is killed mid-epoch (bit
 * for bit, dropout included), and clear errors for missing or damaged data. Skipped (77) where the
 * dataset is absent. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "harness.h"

#include <dirent.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DATA "/usr/share/datasets/fashion-mnist"

static const char *example(void)
{
    const char *path = getenv("DDP_TEST_FASHION");
    if (path == NULL || *path == '\0')
        fail_msg("DDP_TEST_FASHION is not set: run the tests with meson test");
    return path;
}

/* The test accuracy the run printed, in percent; -1 if none. */
static double accuracy(const char *out)
{
    const char *line = strstr(out, "test accuracy ");
    return line != NULL ? atof(line + strlen("test accuracy ")) : -1;
}

static void test_mlp_one_epoch_two_workers(void **state)
{
    const char *argv[] = {th_launcher(), "--nproc-per-node=2", "--no-python", example(), "--model",
                          "mlp",         "--epochs",           "1",           NULL};
    th_proc_t p;
    th_run(&p, argv, NULL, 300);
    const char *out = ddp_buf_str(&p.out);
    TH_ASSERT(&p, th_status(&p) == 0);
    TH_ASSERT(&p, strstr(out, "training MLP on 60000 samples, 2 worker(s) x batch 64") != NULL);
    TH_ASSERT(&p, strstr(out, "epoch 1/1 step 100/468 loss ") != NULL); /* progress lines */
    TH_ASSERT(&p, accuracy(out) >= 85.0);
    th_cleanup(&p);
}

static void test_cnn_one_epoch_two_workers(void **state)
{
    const char *argv[] = {th_launcher(), "--nproc-per-node=2", "--no-python", example(), "--model",
                          "cnn",         "--epochs",           "1",           NULL};
    th_proc_t p;
    th_run(&p, argv, NULL, 1200);
    const char *out = ddp_buf_str(&p.out);
    TH_ASSERT(&p, th_status(&p) == 0);
    TH_ASSERT(&p, strstr(out, "training FashionCNN on 60000 samples") != NULL);
    TH_ASSERT(&p, accuracy(out) >= 88.0);
    th_cleanup(&p);
}

/* Runs `world` workers of batch `batch` for 10 steps from seed 3; the parameters go to
 * `dump`. */
static void run_steps(int world, const char *batch, const char *dump, bool sync_bn)
{
    char nproc[64], dump_flag[600];
    snprintf(nproc, sizeof nproc, "--nproc-per-node=%d", world);
    snprintf(dump_flag, sizeof dump_flag, "--dump-params=%s", dump);
    const char *argv[] = {th_launcher(),
                          nproc,
                          "--no-python",
                          example(),
                          "--batch-size",
                          batch,
                          "--no-dropout",
                          "--max-steps=10",
                          "--seed=3",
                          "--limit-test=200",
                          dump_flag,
                          sync_bn ? "--sync-bn" : NULL,
                          NULL};
    th_proc_t p;
    th_run(&p, argv, NULL, 300);
    TH_ASSERT(&p, th_status(&p) == 0);
    th_cleanup(&p);
}

/* DDP is data parallelism, not a different algorithm: 2 workers x batch 16 and 1 worker
 * x batch 32 see the same samples each step (the sampler), average the same gradient (the
 * reducer) and, with --sync-bn, the same batch statistics: after 10 steps their
 * parameters agree to float rounding. Without --sync-bn they do not, which shows the
 * comparison can tell. */
static void test_two_workers_equal_one_with_twice_the_batch(void **state)
{
    char *dir = th_tmpdir(), one[600], two[600], two_local_bn[600];
    snprintf(one, sizeof one, "%s/one.bin", dir);
    snprintf(two, sizeof two, "%s/two.bin", dir);
    snprintf(two_local_bn, sizeof two_local_bn, "%s/two-local-bn.bin", dir);
    run_steps(1, "32", one, true);
    run_steps(2, "16", two, true);
    run_steps(2, "16", two_local_bn, false);
    double same = th_relative_difference(one, two),
           local = th_relative_difference(one, two_local_bn);
    printf("relative difference: %.3g with --sync-bn, %.3g without\n", same, local);
    assert_true(same <= 1e-5);
    assert_true(local > 1e-4);
    th_rmtree(dir);
    free(dir);
}

/* Runs 3 MLP workers for 20 steps with `optimizer` and `zero` ("" for none); the
 * parameters go to `dump`; returns the optimizer line rank 0 printed (a new string). */
static char *run_optimizer(const char *optimizer, const char *zero, const char *dump)
{
    char dump_flag[2000], opt_flag[64], zero_flag[64];
    snprintf(dump_flag, sizeof dump_flag, "--dump-params=%s", dump);
    snprintf(opt_flag, sizeof opt_flag, "--optimizer=%s", optimizer);
    snprintf(zero_flag, sizeof zero_flag, "--zero=%s", zero);
    const char *argv[] = {th_launcher(),
                          "--nproc-per-node=3",
                          "--no-python",
                          example(),
                          "--model=mlp",
                          "--max-steps=20",
                          "--seed=5",
                          "--limit-test=200",
                          dump_flag,
                          opt_flag,
                          *zero ? zero_flag : NULL,
                          NULL};
    th_proc_t p;
    th_run(&p, argv, NULL, 300);
    TH_ASSERT(&p, th_status(&p) == 0);
    const char *line = strstr(ddp_buf_str(&p.out), "optimizer ");
    char *said = line != NULL ? strndup(line, strcspn(line, "\n")) : NULL;
    th_cleanup(&p);
    return said;
}

/* ZeRO stages 1 and 2 with SGD (momentum) and Adam: each rank keeps a third of the
 * optimizer's state, and the parameters after 20 steps are those of the unsharded run
 * (stage 1 averages as the reducer does; stage 2's reduce-scatter adds in another order:
 * float rounding). */
static void test_zero_matches_the_unsharded_run(void **state)
{
    char *dir = th_tmpdir();
    static const char *const optimizers[] = {"sgd", "adam"};
    for (int o = 0; o < 2; o++) {
        char path[3][600];
        char *said[3];
        static const char *const zero[] = {"", "1", "2"};
        for (int z = 0; z < 3; z++) {
            snprintf(path[z], sizeof path[z], "%s/%s-%d.bin", dir, optimizers[o], z);
            said[z] = run_optimizer(optimizers[o], zero[z], path[z]);
            printf("%s\n", said[z] ? said[z] : "(no optimizer line)");
        }
        double one = th_relative_difference(path[0], path[1]),
               two = th_relative_difference(path[0], path[2]);
        printf("%s: relative difference %.3g with stage 1, %.3g with stage 2\n", optimizers[o], one,
               two);
        assert_true(one <= 1e-6 && two <= 1e-5);
        /* The state: a third on each rank (SGD: 918.5 KiB of momentum for the MLP). */
        const char *whole = o == 0 ? "(918.5 KiB unsharded)" : "(1837.1 KiB unsharded)";
        const char *third = o == 0 ? "306.2 KiB on each rank" : "612.4 KiB on each rank";
        assert_non_null(said[0] && strstr(said[0], whole));
        assert_non_null(said[1] && strstr(said[1], "ZeRO stage 1") && strstr(said[1], third));
        assert_non_null(said[2] && strstr(said[2], "ZeRO stage 2") && strstr(said[2], third));
        for (int z = 0; z < 3; z++)
            free(said[z]);
    }
    th_rmtree(dir);
    free(dir);
}

/* --parallel dp (DataParallel's pattern, threads of one process): 2 replicas x batch 16
 * take the steps 1 worker x batch 32 takes (the same samples; the gradients summed,
 * weighed by slice): the same parameters to float rounding. It is one process: under a
 * launcher of 2 workers it is refused. */
static void test_data_parallel_threads(void **state)
{
    char *dir = th_tmpdir(), flag[2][700];
    const char *batch[] = {"--batch-size=16", "--batch-size=32"};
    for (int i = 0; i < 2; i++) {
        snprintf(flag[i], sizeof flag[i], "--dump-params=%s/%d.bin", dir, i);
        const char *argv[] = {example(),
                              "--model=mlp",
                              "--no-dropout",
                              "--seed=3",
                              "--max-steps=10",
                              "--limit-test=200",
                              batch[i],
                              flag[i],
                              i == 0 ? "--parallel=dp" : NULL,
                              "--replicas=2",
                              NULL};
        th_proc_t p;
        th_run(&p, argv, NULL, 300);
        TH_ASSERT(&p, th_status(&p) == 0);
        if (i == 0) {
            TH_ASSERT(&p, strstr(ddp_buf_str(&p.out), "DataParallel: 2 replica thread(s) x batch "
                                                      "16") != NULL);
            TH_ASSERT(&p, strstr(ddp_buf_str(&p.out), "inference: ") != NULL);
        }
        th_cleanup(&p);
    }
    char a[800], b[800];
    snprintf(a, sizeof a, "%s/0.bin", dir);
    snprintf(b, sizeof b, "%s/1.bin", dir);
    double diff = th_relative_difference(a, b);
    printf("relative difference, 2 replica threads x 16 against 1 worker x 32: %.3g\n", diff);
    assert_true(diff <= 1e-5);
    const char *two[] = {th_launcher(),   "--nproc-per-node=2", "--no-python", example(),
                         "--parallel=dp", "--max-steps=1",      NULL};
    th_proc_t p;
    th_run(&p, two, NULL, 120);
    TH_ASSERT(&p, th_status(&p) != 0);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "--parallel dp is one process") != NULL);
    th_cleanup(&p);
    th_rmtree(dir);
    free(dir);
}

/* The pid of the worker of rank `rank` in the job `run_id`, from /proc. */
static pid_t find_worker(const char *run_id, int rank)
{
    char want_id[128], want_rank[32], path[64], env[16384];
    snprintf(want_id, sizeof want_id, "TORCHELASTIC_RUN_ID=%s", run_id);
    snprintf(want_rank, sizeof want_rank, "RANK=%d", rank);
    DIR *proc = opendir("/proc");
    struct dirent *e;
    pid_t found = -1;
    while (proc != NULL && found < 0 && (e = readdir(proc)) != NULL) {
        pid_t pid = (pid_t)atoi(e->d_name);
        if (pid <= 0)
            continue;
        snprintf(path, sizeof path, "/proc/%d/environ", (int)pid);
        FILE *f = fopen(path, "rb");
        if (f == NULL)
            continue;
        size_t len = fread(env, 1, sizeof env - 1, f);
        fclose(f);
        env[len] = '\0';
        bool id = false, r = false;
        for (size_t i = 0; i < len; i += strlen(env + i) + 1) {
            id = id || strcmp(env + i, want_id) == 0;
            r = r || strcmp(env + i, want_rank) == 0;
        }
        if (id && r)
            found = pid;
    }
    if (proc != NULL)
        closedir(proc);
    return found;
}

/* The first line comes when it is printed, not with the first progress line (a pipe's
 * buffer held it): FashionCNN's one epoch of 468 steps logs only at its end. */
static void test_first_line_is_not_held(void **state)
{
    const char *argv[] = {th_launcher(), "--nproc-per-node=2", "--no-python",      example(),
                          "--model=cnn", "--epochs=1",         "--log-every=1000", NULL};
    th_proc_t p;
    th_start(&p, argv, NULL);
    TH_ASSERT(&p, th_wait_output(&p, 1, "training FashionCNN on 60000 samples", 1, 120));
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.out), "epoch 1/1") == NULL);
    TH_ASSERT(&p, kill(p.pid, SIGTERM) == 0);
    TH_ASSERT(&p, th_wait_exit(&p, 60));
    th_cleanup(&p);
}

/* Starts the example (`args`, at most 12; `env` as th_start's) under the launcher with one
 * restart allowed, waits for `needle` on its stdout, SIGKILLs the worker of rank 1 and
 * waits for the job's end: the launcher restarts it, and the example resumes from its
 * checkpoint, saying `resumed`. */
static void run_killed_once(th_proc_t *p, const char *needle, const char *const *args,
                            const char *const *env, const char *resumed)
{
    char id_flag[64], run_id[48];
    snprintf(run_id, sizeof run_id, "fm%d", (int)getpid());
    snprintf(id_flag, sizeof id_flag, "--rdzv-id=%s", run_id);
    const char *argv[20] = {th_launcher(), "--nproc-per-node=2", "--max-restarts=1",
                            id_flag,       "--no-python",        example()};
    for (int i = 0; i < 12 && args[i] != NULL; i++)
        argv[6 + i] = args[i];
    th_start(p, argv, env);
    TH_ASSERT(p, th_wait_output(p, 1, needle, 1, 120));
    pid_t victim = find_worker(run_id, 1);
    TH_ASSERT(p, victim > 0);
    TH_ASSERT(p, kill(victim, SIGKILL) == 0);
    TH_ASSERT(p, th_wait_exit(p, 300));
    TH_ASSERT(p, th_status(p) == 0);
    TH_ASSERT(p, strstr(ddp_buf_str(&p->err), "restarting the workers as attempt 1") != NULL);
    TH_ASSERT(p, strstr(ddp_buf_str(&p->out), resumed) != NULL);
}

/* A worker SIGKILLed in the middle of epoch 2: the launcher restarts the job, which
 * resumes from the checkpoint rank 0 wrote after epoch 1 and finishes. */
static void test_killed_worker_resumes_from_checkpoint(void **state)
{
    char *dir = th_tmpdir(), ckpt[600];
    snprintf(ckpt, sizeof ckpt, "--checkpoint=%s/fm.ckpt", dir);
    const char *args[] = {"--model=mlp",   "--epochs=3", "--limit-train=20000",
                          "--log-every=5", ckpt,         NULL};
    th_proc_t p;
    run_killed_once(&p, "epoch 2/3 step 20/", args, NULL, "at epoch 2 (attempt 1)\n");
    const char *out = ddp_buf_str(&p.out);
    TH_ASSERT(&p, strstr(out, "epoch 3/3 done") != NULL);
    TH_ASSERT(&p, accuracy(out) > 70.0);
    th_cleanup(&p);
    th_rmtree(dir);
    free(dir);
}

/* Whether the files at `a` and `b` hold the same bytes (and could be read). */
static bool same_bytes(const char *a, const char *b)
{
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    bool same = fa != NULL && fb != NULL;
    int ca = 0, cb = 0;
    while (same && ca != EOF) {
        ca = getc(fa);
        cb = getc(fb);
        same = ca == cb;
    }
    if (fa != NULL)
        fclose(fa);
    if (fb != NULL)
        fclose(fb);
    return same;
}

/* FashionCNN has dropout: a run killed in epoch 2 and resumed from the checkpoint of
 * epoch 1 draws the masks the uninterrupted run drew, so the two end with the same
 * parameters, bit for bit (epochs of 3200 samples, 25 steps: the kill comes at step 2 of 25;
 * 12800 took 100 s of the sanitizer phase for the same check). */
static void test_resumed_run_with_dropout_is_bitwise_equal(void **state)
{
    char *dir = th_tmpdir(), ckpt[2][600], dump[2][600], dump_path[2][600];
    for (int i = 0; i < 2; i++) {
        snprintf(ckpt[i], sizeof ckpt[i], "--checkpoint=%s/fm%d.ckpt", dir, i);
        snprintf(dump_path[i], sizeof dump_path[i], "%s/params%d.bin", dir, i);
        snprintf(dump[i], sizeof dump[i], "--dump-params=%s", dump_path[i]);
    }
    const char *args[] = {"--model=cnn",
                          "--epochs=2",
                          "--limit-train=3200",
                          "--limit-test=200",
                          "--seed=5",
                          "--log-every=1",
                          ckpt[0],
                          dump[0],
                          NULL};
    const char *argv[] = {th_launcher(), "--nproc-per-node=2",
                          "--no-python", example(),
                          args[0],       args[1],
                          args[2],       args[3],
                          args[4],       args[5],
                          args[6],       args[7],
                          NULL};
    th_proc_t p;
    th_run(&p, argv, NULL, 300);
    TH_ASSERT(&p, th_status(&p) == 0);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.out), "epoch 2/2 done") != NULL);
    th_cleanup(&p);
    args[6] = ckpt[1];
    args[7] = dump[1];
    run_killed_once(&p, "epoch 2/2 step 2/", args, NULL, "at epoch 2 (attempt 1)\n");
    th_cleanup(&p);
    assert_true(same_bytes(dump_path[0], dump_path[1]));
    th_rmtree(dir);
    free(dir);
}

/* In-memory checkpoints every step (--checkpoint-every=1, in the test's DDP_CHECKPOINT_DIR):
 * a worker SIGKILLed in the middle of the epoch, the restarted job resumes within it, at the
 * newest step both ranks saved, and ends with the parameters of a run that was not stopped,
 * bit for bit (FashionCNN: dropout's generator and batch norm's statistics are each rank's
 * state). */
static void test_killed_worker_resumes_from_memory(void **state)
{
    char *dir = th_tmpdir(), *shm = th_shm_tmpdir(), dump[2][700], dump_path[2][600], var[600];
    for (int i = 0; i < 2; i++) {
        snprintf(dump_path[i], sizeof dump_path[i], "%s/params%d.bin", dir, i);
        snprintf(dump[i], sizeof dump[i], "--dump-params=%s", dump_path[i]);
    }
    snprintf(var, sizeof var, "DDP_CHECKPOINT_DIR=%s", shm);
    const char *args[] = {"--model=cnn",          "--epochs=1", "--limit-train=6400",
                          "--limit-test=200",     "--seed=5",   "--log-every=1",
                          "--checkpoint-every=1", dump[0],      NULL};
    const char *argv[] = {th_launcher(), "--nproc-per-node=2",
                          "--no-python", example(),
                          args[0],       args[1],
                          args[2],       args[3],
                          args[4],       args[5],
                          dump[0],       NULL};
    th_proc_t p;
    th_run(&p, argv, NULL, 300);
    TH_ASSERT(&p, th_status(&p) == 0);
    th_cleanup(&p);
    args[7] = dump[1];
    const char *env[] = {var, NULL};
    run_killed_once(&p, "epoch 1/1 step 20/", args, env, "resumed from memory at epoch 1 step ");
    const char *resumed = strstr(ddp_buf_str(&p.out), "resumed from memory at epoch 1 step ");
    int step = atoi(resumed + strlen("resumed from memory at epoch 1 step "));
    TH_ASSERT(&p, step >= 20 && step <= 50);
    th_cleanup(&p);
    assert_true(same_bytes(dump_path[0], dump_path[1]));
    th_rmtree(dir);
    free(dir);
    free(shm);
}

/* Missing and damaged data are errors that name the file (and the package). */
static void test_bad_data_is_a_clear_error(void **state)
{
    char *dir = th_tmpdir(), flag[600], cmd[2000];
    snprintf(flag, sizeof flag, "--data=%s", dir);
    const char *argv[] = {th_launcher(), "--no-python", example(), flag, NULL};
    th_proc_t p;
    th_run(&p, argv, NULL, 60);
    TH_ASSERT(&p, th_status(&p) == 1);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "train-images-idx3-ubyte: No such file") != NULL);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "dataset-fashion-mnist") != NULL);
    th_cleanup(&p);
    /* The real files, the training images cut short. */
    snprintf(cmd, sizeof cmd,
             "cp %s/*.gz '%s' && gzip -dc %s/train-images-idx3-ubyte.gz | head -c 100000 | "
             "gzip > '%s/train-images-idx3-ubyte.gz'",
             DATA, dir, DATA, dir);
    assert_int_equal(system(cmd), 0);
    th_run(&p, argv, NULL, 60);
    TH_ASSERT(&p, th_status(&p) == 1);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "train-images-idx3-ubyte.gz is truncated") != NULL);
    th_cleanup(&p);
    /* Labels that are not labels. */
    snprintf(cmd, sizeof cmd,
             "cp %s/train-images-idx3-ubyte.gz '%s' && echo garbage | gzip > "
             "'%s/t10k-labels-idx1-ubyte.gz'",
             DATA, dir, dir);
    assert_int_equal(system(cmd), 0);
    th_run(&p, argv, NULL, 60);
    TH_ASSERT(&p, th_status(&p) == 1);
    TH_ASSERT(&p,
              strstr(ddp_buf_str(&p.err), "t10k-labels-idx1-ubyte.gz is not an IDX file") != NULL);
    th_cleanup(&p);
    th_rmtree(dir);
    free(dir);
}

/* Runs the example under the launcher with `hidden` (directories, ':' between them; those
 * that do not exist are left) covered by empty tmpfs mounts, in a mount namespace of its
 * own; `args` (at most 4) go to the example. */
static void run_hiding(th_proc_t *p, const char *hidden, const char *const *args)
{
    const char *argv[16] = {"/usr/bin/unshare",
                            "--mount",
                            "/bin/sh",
                            "-c",
                            "IFS=:; for d in $0; do [ ! -d \"$d\" ] || "
                            "mount -t tmpfs none \"$d\" || exit; done; unset IFS; exec \"$@\"",
                            hidden,
                            th_launcher(),
                            "--no-python",
                            example()};
    for (int i = 0; i < 4 && args[i] != NULL; i++)
        argv[9 + i] = args[i];
    th_run(p, argv, NULL, 120);
}

/* The CUDA toolkit hidden (DDP_TEST_CUDA_ROOT: its directories, ':' between them; on a
 * GPU machine also the CUDA wheels beside torch): the program still starts and trains on
 * the CPU, since only the GPU module links CUDA, and --device cuda names the library that
 * is missing. */
static void test_runs_where_cuda_is_absent(void **state)
{
    const char *cuda = getenv("DDP_TEST_CUDA_ROOT"), *module = getenv("DDP_TEST_FASHION_GPU");
    if (cuda == NULL || *cuda == '\0' || (strchr(cuda, ':') == NULL && access(cuda, F_OK) != 0)) {
        printf("no CUDA toolkit here: nothing to hide\n");
        return;
    }
    const char *probe[] = {"/usr/bin/unshare", "--mount", "/bin/true", NULL};
    th_proc_t p;
    if (!th_succeeds(probe, 30)) {
        printf("cannot make a mount namespace (not root?): skipped\n");
        return;
    }
    const char *cpu[] = {"--max-steps=3", "--limit-test=200", NULL};
    run_hiding(&p, cuda, cpu);
    TH_ASSERT(&p, th_status(&p) == 0);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.out), "on CPUs (OpenBLAS)") != NULL);
    TH_ASSERT(&p, accuracy(ddp_buf_str(&p.out)) >= 0);
    th_cleanup(&p);
    if (module == NULL || strcmp(module, "1") != 0)
        return; /* built without cuDNN: --device cuda says so, whatever is installed */
    const char *gpu[] = {"--device=cuda", NULL};
    run_hiding(&p, cuda, gpu);
    const char *err = ddp_buf_str(&p.err);
    TH_ASSERT(&p, th_status(&p) == 1);
    TH_ASSERT(&p, strstr(err, "--device cuda: cannot load the GPU module") != NULL);
    TH_ASSERT(&p, strstr(err, "cannot open shared object file") != NULL);
    TH_ASSERT(&p, strstr(err, "add their directory to LD_LIBRARY_PATH") != NULL);
    th_cleanup(&p);
}

/* A rank whose NCCL init fails (rank 1 asks for --device cuda on this GPU-less machine;
 * rank 0 trains on the CPU and waits for it) says so under its own rank and why, and the
 * report names it; before, a failed init was printed as rank 0's "invalid usage". */
static void test_failed_init_names_its_rank(void **state)
{
    const char *module = getenv("DDP_TEST_FASHION_GPU");
    if (module == NULL || strcmp(module, "1") != 0) {
        printf("built without the GPU module: --device cuda stops before init\n");
        return;
    }
    char script[800];
    snprintf(script, sizeof script,
             "if [ \"$RANK\" = 1 ]; then exec '%s' --device=cuda; fi; exec '%s' --max-steps=3",
             example(), example());
    const char *argv[] = {
        th_launcher(), "--nproc-per-node=2", "--no-python", "/bin/sh", "-c", script, NULL};
    const char *env[] = {"CUDA_VISIBLE_DEVICES=", "DDP_TIMEOUT=600", NULL};
    th_proc_t p;
    th_run(&p, argv, env, 120);
    const char *err = ddp_buf_str(&p.err), *root = strstr(err, "Root Cause");
    TH_ASSERT(&p, th_status(&p) == 1);
    TH_ASSERT(&p, strstr(err, "libddp: error: rank 1: the NCCL backend needs a GPU and none is "
                              "visible") != NULL);
    TH_ASSERT(&p, strstr(err, "fashion-mnist: rank 1: init: ") != NULL);
    TH_ASSERT(&p, strstr(err, "fashion-mnist: rank 0: init") == NULL);
    TH_ASSERT(&p, root != NULL && strstr(root, "rank      : 1 (local_rank: 1)") != NULL);
    TH_ASSERT(&p, root != NULL && strstr(root, "needs a GPU and none is visible") != NULL);
    th_cleanup(&p);
}

int main(int argc, char **argv)
{
    if (argc > 1) /* meson test fashion --test-args NAME: only the tests NAME matches */
        cmocka_set_test_filter(argv[1]);
    if (access(DATA "/train-images-idx3-ubyte.gz", R_OK) != 0) {
        printf("no FashionMNIST in %s (apt-get install dataset-fashion-mnist): skipped\n", DATA);
        return 77;
    }
    const struct CMUnitTest tests[] = {
        TH_TEST(test_bad_data_is_a_clear_error),
        TH_TEST(test_runs_where_cuda_is_absent),
        TH_TEST(test_failed_init_names_its_rank),
        TH_TEST(test_mlp_one_epoch_two_workers),
        TH_TEST(test_first_line_is_not_held),
        TH_TEST(test_two_workers_equal_one_with_twice_the_batch),
        TH_TEST(test_zero_matches_the_unsharded_run),
        TH_TEST(test_data_parallel_threads),
        TH_TEST(test_killed_worker_resumes_from_checkpoint),
        TH_TEST(test_resumed_run_with_dropout_is_bitwise_equal),
        TH_TEST(test_killed_worker_resumes_from_memory),
        TH_TEST(test_cnn_one_epoch_two_workers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
