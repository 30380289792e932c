/* Integration tests with real PyTorch workers on the launcher's store, for one torch
 * version given as argv[1]: "1.13" (Debian bookworm's python3-torch) or "2.6" (Debian
 * trixie's, in a root the setup builds; skipped with the reason where it cannot), or
 * "python": whichever torch the python in DDP_TEST_TORCH_PYTHON has (skipped where it is
 * unset), to test against another torch by hand.
 * gloo all_reduce and barrier with 2 and 4 ranks, TCPStore client operations, a job
 * that fails once and is restarted, PyTorch's own error.json in the report, and the
 * PyTorch FashionMNIST example training with DDP; libddp's C example under torchrun; a
 * hung job's report with each rank's Python stack; a straggler named (ddp_launch.step(),
 * and a DDP model's through ddp_launch.watch()), and --hang-timeout=auto's verdict on it. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "harness.h"
#include "io.h"

#include <glob.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *flavour; /* "1.13", "2.6" or "python" */
static th_torch_t torch;    /* its python, version and environment */

/* Runs ddp-launch with the flavour's python on `args` (NULL-terminated). */
static void launch(th_proc_t *p, const char *const *args, double timeout)
{
    const char *argv[32] = {th_launcher()};
    int n = 1;
    for (int i = 0; args[i] != NULL && n < 31; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    th_run(p, argv, torch.env, timeout);
}

static void test_gloo_two_ranks(void **state)
{
    const char *args[] = {"--standalone", "--nproc-per-node=2", th_script("gloo_allreduce.py"),
                          NULL};
    th_proc_t p;
    launch(&p, args, 300);
    TH_ASSERT(&p, th_status(&p) == 0);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.out), "rank 0 of 2 sum 3\n") != NULL);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.out), "rank 1 of 2 sum 3\n") != NULL);
    th_cleanup(&p);
}

static void test_gloo_four_ranks(void **state)
{
    /* Static rendezvous on a port the store picks (no fixed port in tests). */
    const char *args[] = {"--master-port=0", "--nproc-per-node=4", th_script("gloo_allreduce.py"),
                          NULL};
    th_proc_t p;
    launch(&p, args, 300);
    TH_ASSERT(&p, th_status(&p) == 0);
    for (int rank = 0; rank < 4; rank++) {
        char want[64];
        snprintf(want, sizeof want, "rank %d of 4 sum 10\n", rank);
        TH_ASSERT(&p, strstr(ddp_buf_str(&p.out), want) != NULL);
    }
    th_cleanup(&p);
}

/* Runs `args` to success: the straggler reports name rank 2 of the `n` ranks, no other. */
static void run_rank_2_named(th_proc_t *p, const char *const *args, int n)
{
    launch(p, args, 300);
    const char *err = ddp_buf_str(&p->err);
    TH_ASSERT(p, th_status(p) == 0);
    for (int r = 0; r < n; r++) {
        char line[64];
        snprintf(line, sizeof line, "straggler: rank %d ", r);
        TH_ASSERT(p, (strstr(err, line) != NULL) == (r == 2));
    }
    TH_ASSERT(p, strstr(err, "straggler: rank 2 (node 0 on ") != NULL);
}

/* gloo workers calling ddp_launch.step(), rank 2 sleeping 30 ms more before each
 * all_reduce: their steps take as long, but rank 2 waits least in the (timed) all_reduce:
 * the 2 s straggler reports name rank 2 and no other. */
static void test_straggler_named(void **state)
{
    const char *args[] = {"--master-port=0",
                          "--nproc-per-node=4",
                          "--straggler-report=2",
                          th_script("straggler.py"),
                          "120",
                          "10",
                          "2",
                          "gloo",
                          NULL};
    th_proc_t p;
    run_rank_2_named(&p, args, 4);
    th_cleanup(&p);
}

/* A DistributedDataParallel model given to ddp_launch.watch(): its all-reduces inside
 * backward() are each step's wait, so rank 2, whose forward pass takes 100 ms more a step,
 * is named by the 1 s reports, and no other (unseen, every rank's work was its whole step:
 * none was ever named). 100 ms and 100 steps: with 50 ms and 80 steps, a CI run's load (its
 * other suites beside it) once left no rank named: the gap must stand over 1.2x the median
 * however long a loaded machine makes each rank's own compute. */
static void test_ddp_straggler_named(void **state)
{
    const char *args[] = {"--master-port=0",
                          "--nproc-per-node=3",
                          "--straggler-report=1",
                          th_script("ddp_watch.py"),
                          "100",
                          "10",
                          "2",
                          "100",
                          NULL};
    th_proc_t p;
    run_rank_2_named(&p, args, 3);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), " ms a step in collectives)") != NULL);
    th_cleanup(&p);
}

/* --hang-timeout=auto on a DDP model given to ddp_launch.watch(): rank 1 stops stepping
 * after 30 steps, rank 0 waits in the next backward's all-reduce. The verdict names rank 1
 * and says that rank 0 waits (it named rank 0), and that the timeout is the floor (it said
 * "5x the longest step" of 0.03 s); the failure report's root cause is rank 1, and the
 * hang report's file is named. */
static void test_ddp_hang_names_the_stopped_rank(void **state)
{
    const char *args[] = {"--nproc-per-node=2",
                          "--hang-timeout=auto",
                          "--hang-timeout-floor=1",
                          "--straggler-report=0",
                          th_script("ddp_watch.py"),
                          "1000",
                          "10",
                          "-",
                          "stop=1:30",
                          NULL};
    th_proc_t p;
    launch(&p, args, 300);
    const char *err = ddp_buf_str(&p.err);
    TH_ASSERT(&p, th_status(&p) == 1);
    TH_ASSERT(&p, strstr(err, "verdict: rank 1 has made no step for ") != NULL);
    TH_ASSERT(&p, strstr(err, "(--hang-timeout=auto: 1.0 s, --hang-timeout-floor; 5x the longest "
                              "step would be ") != NULL);
    TH_ASSERT(&p, strstr(err, "; rank 0 waits in a collective") != NULL);
    TH_ASSERT(&p, strstr(err, "rank 0 has made no step") == NULL);
    TH_ASSERT(&p, strstr(err, "waiting in a collective for ") != NULL); /* rank 0's row */
    const char *root = strstr(err, "Root Cause (first observed failure):");
    TH_ASSERT(&p, root != NULL && strstr(root, "rank      : 1 (local_rank: 1)") != NULL);
    TH_ASSERT(&p, strstr(root, "/hang_report.txt") != NULL);
    th_cleanup(&p);
}

static void test_tcpstore_client(void **state)
{
    const char *args[] = {"--standalone", "--nproc-per-node=2", th_script("store_ops.py"), NULL};
    th_proc_t p;
    launch(&p, args, 300);
    TH_ASSERT(&p, th_status(&p) == 0);
    char want[128];
    snprintf(want, sizeof want, "rank 0 store ops ok (torch %s", torch.version);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.out), want) != NULL);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.out), "rank 1 saw go\n") != NULL);
    th_cleanup(&p);
}

static void test_restart_after_a_failure(void **state)
{
    const char *args[] = {"--standalone",         "--nproc-per-node=2",      "--max-restarts=1",
                          "--shutdown-timeout=5", th_script("fail_once.py"), NULL};
    th_proc_t p;
    launch(&p, args, 300);
    const char *out = ddp_buf_str(&p.out);
    TH_ASSERT(&p, th_status(&p) == 0);
    TH_ASSERT(&p, strstr(out, "rank 1 fails on attempt 0\n") != NULL);
    TH_ASSERT(&p, strstr(out, "rank 0 attempt 1 sum 3\n") != NULL);
    TH_ASSERT(&p, strstr(out, "rank 1 attempt 1 sum 3\n") != NULL);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "restarting the workers as attempt 1") != NULL);
    th_cleanup(&p);
}

/* The PyTorch example's device on a node with fewer GPUs than workers (as a lent
 * 1-GPU machine has for 2 workers): the CPU with gloo, said in one line, under auto;
 * --device=cuda an error that names the shortfall. The GPU counts are given to its
 * choose_device, which the flavour's torch imports with the example. */
static void test_fashion_device_choice(void **state)
{
    const char *argv[] = {torch.python, th_script("device_choice.py"), NULL};
    th_proc_t p;
    th_run(&p, argv, torch.env, 300);
    TH_ASSERT(&p, th_status(&p) == 0);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.out), "device choice ok\n") != NULL);
    th_cleanup(&p);
}

static void test_error_file_in_report(void **state)
{
    const char *args[] = {"--standalone",
                          "--nproc-per-node=2",
                          "--shutdown-timeout=5",
                          th_script("gloo_allreduce.py"),
                          "--fail-rank",
                          "1",
                          NULL};
    th_proc_t p;
    launch(&p, args, 300);
    const char *err = ddp_buf_str(&p.err);
    TH_ASSERT(&p, th_status(&p) == 1);
    const char *root = strstr(err, "Root Cause (first observed failure):");
    TH_ASSERT(&p, root != NULL);
    TH_ASSERT(&p, strstr(root, "  rank      : 1 (local_rank: 1)") != NULL);
    /* PyTorch's @record wrote the traceback; the report shows it, indented. */
    TH_ASSERT(&p, strstr(root, "/attempt_0/1/error.json") != NULL);
    TH_ASSERT(&p, strstr(root, "  traceback : Traceback (most recent call last):") != NULL);
    TH_ASSERT(&p, strstr(root, "  RuntimeError: deliberate failure on rank 1") != NULL);
    TH_ASSERT(&p, strstr(err, "gloo_allreduce.py FAILED") != NULL);
    th_cleanup(&p);
}

/* A rank that leaves early (exit 0) makes its peer's gloo all_reduce fail: the report's
 * root cause is the peer, and the early finish is said after it. */
static void test_early_finish_said(void **state)
{
    const char *args[] = {"--standalone",
                          "--nproc-per-node=2",
                          "--shutdown-timeout=5",
                          th_script("gloo_allreduce.py"),
                          "--leave-early",
                          "1",
                          NULL};
    th_proc_t p;
    launch(&p, args, 300);
    const char *err = ddp_buf_str(&p.err);
    TH_ASSERT(&p, th_status(&p) == 1);
    const char *root = strstr(err, "Root Cause (first observed failure):");
    TH_ASSERT(&p, root != NULL && strstr(root, "  rank      : 0 (local_rank: 0)") != NULL);
    TH_ASSERT(&p, strstr(root, "warning: rank 1 had finished (exit 0) ") != NULL);
    TH_ASSERT(&p, strstr(root, " s before rank 0's failure, while other ranks ran") != NULL);
    th_cleanup(&p);
}

/* torchrun's worker watchdog (TORCHELASTIC_ENABLE_FILE_TIMER=1) with torch's own
 * FileTimerClient: a rank stuck past its timer is killed (SIGKILL, the client's default)
 * and the report says why; timers released in time kill nothing; TORCHELASTIC_TIMER_FILE
 * names the FIFO; a malformed request, and one for a process no worker's group holds (the
 * launcher itself), are said and refused. The FIFO is gone after the job. */
static void test_watchdog_timer(void **state)
{
    char *dir = th_tmpdir(), fifo[700], fifo_var[800];
    snprintf(fifo, sizeof fifo, "%s/watchdog", dir);
    snprintf(fifo_var, sizeof fifo_var, "TORCHELASTIC_TIMER_FILE=%s", fifo);
    static const char *const modes[] = {"expire", "release", "foreign"};
    for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++) {
        const char *env[8] = {"TORCHELASTIC_ENABLE_FILE_TIMER=1", m > 0 ? fifo_var : NULL};
        for (int i = 0, n = m > 0 ? 2 : 1; i < 3 && torch.env[i] != NULL; i++)
            env[n++] = torch.env[i];
        const char *argv[] = {th_launcher(),
                              "--standalone",
                              "--nproc-per-node=2",
                              "--shutdown-timeout=5",
                              th_script("watchdog_timer.py"),
                              modes[m],
                              NULL};
        th_proc_t p;
        double started = th_now();
        th_run(&p, argv, env, 300);
        const char *out = ddp_buf_str(&p.out), *err = ddp_buf_str(&p.err);
        TH_ASSERT(&p, strstr(out, "rank 0 done\n") != NULL);
        TH_ASSERT(&p, strstr(out, "rank 1 timer file ") != NULL);
        if (m == 0) {
            TH_ASSERT(&p, th_status(&p) == 1);
            TH_ASSERT(&p, th_now() - started < 45); /* not the 60 s it slept */
            TH_ASSERT(&p, strstr(out, "rank 1 done") == NULL);
            TH_ASSERT(&p, strstr(err, "watchdog timer 'stuck_step' of local rank 1 (pid ") != NULL);
            TH_ASSERT(&p,
                      strstr(err, "  traceback : its watchdog timer 'stuck_step' expired") != NULL);
            /* Its own FIFO, in TMPDIR, and gone after. */
            const char *at = strstr(out, "rank 0 timer file ");
            char path[700] = "";
            TH_ASSERT(&p, at != NULL && sscanf(at, "rank 0 timer file %699s", path) == 1);
            TH_ASSERT(&p, strstr(path, "/watchdog_timer_") != NULL);
            TH_ASSERT(&p, access(path, F_OK) != 0);
        } else {
            TH_ASSERT(&p, th_status(&p) == 0);
            TH_ASSERT(&p, strstr(out, "rank 1 done\n") != NULL);
            char given[800];
            snprintf(given, sizeof given, "rank 1 timer file %s\n", fifo);
            TH_ASSERT(&p, strstr(out, given) != NULL);
            TH_ASSERT(&p, strstr(err, "expired") == NULL || m == 2);
            TH_ASSERT(&p, access(fifo, F_OK) != 0);
        }
        if (m == 2) {
            TH_ASSERT(&p, strstr(err, "watchdog timer: ignoring a request that is not JSON: "
                                      "not json") != NULL);
            TH_ASSERT(&p, strstr(err, "watchdog timer: ignoring a request that is too long: "
                                      "{xxx") != NULL);
            TH_ASSERT(&p, strstr(err, "watchdog timer 'foreign' of pid ") != NULL);
            TH_ASSERT(&p, strstr(err, "is no process of this node's workers: not sending it "
                                      "SIGTERM") != NULL);
        }
        th_cleanup(&p);
    }
    th_rmtree(dir);
    free(dir);
}

/* A PyTorch rank stuck outside a gloo all_reduce the other waits in, under
 * --hang-timeout and --hang-dump: the report says where each rank's Python is (from the
 * stacks faulthandler wrote on the launcher's signal, which are in the log directory),
 * before the job is stopped. */
static void test_hang_dump_python_stacks(void **state)
{
    char *logs = th_tmpdir(), log_flag[600];
    snprintf(log_flag, sizeof log_flag, "--log-dir=%s", logs);
    const char *args[] = {
        "--standalone", "--nproc-per-node=2",   "--hang-timeout=3",        "--hang-dump",
        log_flag,       "--shutdown-timeout=5", th_script("gloo_hang.py"), NULL};
    th_proc_t p;
    launch(&p, args, 300);
    const char *err = ddp_buf_str(&p.err);
    TH_ASSERT(&p, th_status(&p) == 1);
    TH_ASSERT(&p, th_count(ddp_buf_str(&p.out), "entering the second all_reduce\n") == 2);
    const char *verdict = strstr(err, "verdict: rank 0 in all_reduce (distributed_c10d.py:");
    const char *stop = strstr(err, "sending SIGTERM");
    TH_ASSERT(&p, verdict != NULL && strstr(verdict, "; rank 1 in wait_forever (gloo_hang.py:"));
    TH_ASSERT(&p, stop != NULL && verdict < stop);
    for (int rank = 0; rank < 2; rank++) {
        char pattern[700], *text = NULL;
        size_t len;
        glob_t g;
        snprintf(pattern, sizeof pattern, "%s/*/attempt_0/%d/python_stack.txt", logs, rank);
        TH_ASSERT(&p, glob(pattern, 0, NULL, &g) == 0 && g.gl_pathc == 1);
        TH_ASSERT(&p, g.gl_pathc == 1 && ddp_read_file(g.gl_pathv[0], 1 << 20, &text, &len) == 0);
        globfree(&g);
        TH_ASSERT(&p, text != NULL && strstr(text, "gloo_hang.py\", line") != NULL);
        TH_ASSERT(&p,
                  text != NULL && strstr(text, rank == 0 ? "in all_reduce" : "in wait_forever"));
        free(text);
    }
    th_cleanup(&p);
    th_rmtree(logs);
    free(logs);
}

/* Lines of `text` that contain `needle`, sorted, one string. */
static void lines_with(const char *text, const char *needle, ddp_buf_t *out)
{
    char *copy = strdup(text), *save = NULL, *lines[64];
    size_t n = 0;
    for (char *line = strtok_r(copy, "\n", &save); line != NULL && n < 64;
         line = strtok_r(NULL, "\n", &save))
        if (strstr(line, needle) != NULL)
            lines[n++] = line;
    for (size_t i = 1; i < n; i++)
        for (size_t k = i; k > 0 && strcmp(lines[k - 1], lines[k]) > 0; k--) {
            char *t = lines[k];
            lines[k] = lines[k - 1];
            lines[k - 1] = t;
        }
    for (size_t i = 0; i < n; i++)
        ddp_buf_printf(out, "%s\n", lines[i]);
    free(copy);
}

/* The files under `dir`, relative, sorted. */
static void files_under(const char *dir, ddp_buf_t *out)
{
    char cmd[1200], line[1024];
    snprintf(cmd, sizeof cmd, "cd '%s' && find . -type f | sed 's,^\\./[^/]*/,,' | sort", dir);
    FILE *f = popen(cmd, "r");
    while (f != NULL && fgets(line, sizeof line, f) != NULL)
        ddp_buf_puts(out, line);
    if (f != NULL)
        pclose(f);
}

/* ddp-launch on `args` with the flavour's environment and `more` variables (up to 2),
 * rank 1's failure at attempt 0 held until stderr says `ready` (NULL: at once). */
static void launch_after(th_proc_t *p, const char *const *args, const char *more, const char *ready,
                         double timeout)
{
    char trigger[1100];
    const char *file = th_trigger_var(trigger, sizeof trigger);
    const char *argv[32] = {th_launcher()}, *env[8];
    int n = 1, k = 0;
    for (int i = 0; args[i] != NULL && n < 31; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    for (int i = 0; torch.env[i] != NULL && k < 4; i++)
        env[k++] = torch.env[i];
    env[k++] = trigger;
    if (more != NULL)
        env[k++] = more;
    env[k] = NULL;
    th_run_after(p, argv, env, ready, file, timeout);
}

/* A rank that has not reached init_process_group is named, with the rank that waits for
 * it there and the key it waits for (rank 1's gloo address), while nothing is stopped:
 * the job goes on once it comes (the file the notice's line makes). */
static void test_late_rank_named(void **state)
{
    const char *args[] = {"--standalone",          "--nproc-per-node=2",
                          "--store-wait-notice=1", th_script("gloo_allreduce.py"),
                          "--late-rank=1",         NULL};
    th_proc_t p;
    launch_after(&p, args, NULL, "not waiting in the store: ", 300);
    TH_ASSERT(&p, th_status(&p) == 0);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.out), "rank 1 of 2 sum 3\n") != NULL);
    const char *err = ddp_buf_str(&p.err),
               *waits = strstr(err, "ddp-launch: warning: rank 0 (pid ");
    TH_ASSERT(&p, waits != NULL);
    const char *eol = strchr(waits, '\n'), *key = strstr(waits, " in the store for '");
    TH_ASSERT(&p, eol != NULL && key != NULL && key < eol);
    TH_ASSERT(&p, strncmp(strchr(waits, ')'), ") has waited ", 13) == 0); /* rank 0 alone */
    /* (torch 1.13's keys begin //worker/attempt_0/, 2.x's have no prefix) */
    TH_ASSERT(&p, strstr(key, "/default_pg/0/") != NULL && strstr(key, "/default_pg/0/") < eol);
    TH_ASSERT(&p, strncmp(eol - 27, "', which nobody has set yet", 27) == 0);
    const char *idle = strstr(err, "ddp-launch: warning: not waiting in the store: rank 1 (pid ");
    TH_ASSERT(&p, idle != NULL && strstr(idle, "): it may not have reached the call that sets "
                                               "the key (init_process_group, say)\n") != NULL);
    TH_ASSERT(&p, th_count(err, "not waiting in the store") == 1);
    th_cleanup(&p);
}

/* warm_restart.py `mode` with rank 1 failing at attempt 0, restarted once, cold or with
 * --warm-restarts (once its zygote is ready), its streams teed (files under `logs`,
 * prefixed lines on the console). */
static void run_restarted(th_proc_t *p, bool warm, const char *mode, const char *logs)
{
    char log_flag[600];
    snprintf(log_flag, sizeof log_flag, "--log-dir=%s", logs);
    const char *args[] = {"--master-port=0",
                          "--rdzv-id=warm",
                          "--nproc-per-node=2",
                          "--max-restarts=1",
                          "--shutdown-timeout=5",
                          "--tee=3",
                          log_flag,
                          warm ? "--warm-restarts" : "--role=default",
                          th_script("warm_restart.py"),
                          mode,
                          NULL};
    launch_after(p, args, NULL, warm ? "has imported torch" : NULL, 300);
}

/* A restart forked from the zygote is what a cold restart is to the script: environment,
 * argv, sys.path, __main__, session, parent-death signal, signals, limits, descriptors,
 * stdio (warm_restart.py's STATE, less what the torch 2.6 tests' shim changes in a cold
 * worker: its own path and __main__); the same files in the log directory and prefixed
 * lines; each rank its own random state. */
static void test_warm_restart_same_as_cold(void **state)
{
    char *cold_logs = th_tmpdir(), *warm_logs = th_tmpdir();
    th_proc_t cold, warm;
    ddp_buf_t cold_state = DDP_BUF_INIT, warm_state = DDP_BUF_INIT;
    ddp_buf_t cold_files = DDP_BUF_INIT, warm_files = DDP_BUF_INIT, random = DDP_BUF_INIT;
    run_restarted(&cold, false, "state", cold_logs);
    TH_ASSERT(&cold, th_status(&cold) == 0);
    run_restarted(&warm, true, "state", warm_logs);
    TH_ASSERT(&warm, th_status(&warm) == 0);
    const char *err = ddp_buf_str(&warm.err);
    TH_ASSERT(&warm, strstr(err, "warm restarts: the zygote (pid ") != NULL);
    TH_ASSERT(&warm, strstr(err, "2 of 2 workers of attempt 1 forked from the zygote") != NULL);
    TH_ASSERT(&cold, strstr(ddp_buf_str(&cold.err), "zygote") == NULL);
    lines_with(ddp_buf_str(&cold.out), "]:STATE ", &cold_state);
    lines_with(ddp_buf_str(&warm.out), "]:STATE ", &warm_state);
    TH_ASSERT(&warm, th_count(ddp_buf_str(&warm_state), "[default0]:STATE {") == 1);
    TH_ASSERT(&warm, th_count(ddp_buf_str(&warm_state), "[default1]:STATE {") == 1);
    if (strcmp(ddp_buf_str(&cold_state), ddp_buf_str(&warm_state)) != 0) {
        printf("cold:\n%s\nwarm:\n%s\n", ddp_buf_str(&cold_state), ddp_buf_str(&warm_state));
        fail_msg("a warm restart's worker differs from a cold one's");
    }
    files_under(cold_logs, &cold_files);
    files_under(warm_logs, &warm_files);
    TH_ASSERT(&warm, strstr(ddp_buf_str(&warm_files), "attempt_1/1/stdout.log\n") != NULL);
    TH_ASSERT(&warm, strcmp(ddp_buf_str(&cold_files), ddp_buf_str(&warm_files)) == 0);
    /* Every generator seeded at import (Python's random, numpy's global one and the
     * entropy of its default_rng(), torch's default one) is each worker's own, as in
     * cold ones: no draw of rank 0 is rank 1's. */
    lines_with(ddp_buf_str(&warm.out), "]:RANDOM rank ", &random);
    const char *r0 = strstr(ddp_buf_str(&random), "RANDOM rank 0 ");
    const char *r1 = strstr(ddp_buf_str(&random), "RANDOM rank 1 ");
    double random0 = 0, random1 = 0;
    unsigned long long draws0[4] = {0}, draws1[4] = {0};
    TH_ASSERT(&warm, r0 != NULL && sscanf(r0, "RANDOM rank 0 %lf %llu %llu %llu %llu", &random0,
                                          &draws0[0], &draws0[1], &draws0[2], &draws0[3]) == 5);
    TH_ASSERT(&warm, r1 != NULL && sscanf(r1, "RANDOM rank 1 %lf %llu %llu %llu %llu", &random1,
                                          &draws1[0], &draws1[1], &draws1[2], &draws1[3]) == 5);
    TH_ASSERT(&warm, random0 != random1);
    for (int i = 0; i < 4; i++)
        if (draws0[i] == draws1[i]) {
            printf("%s", ddp_buf_str(&random));
            fail_msg("warm ranks 0 and 1 drew the same numbers (draw %d)", i + 1);
        }
    ddp_buf_free(&cold_state);
    ddp_buf_free(&warm_state);
    ddp_buf_free(&cold_files);
    ddp_buf_free(&warm_files);
    ddp_buf_free(&random);
    th_cleanup(&cold);
    th_cleanup(&warm);
    th_rmtree(cold_logs);
    th_rmtree(warm_logs);
    free(cold_logs);
    free(warm_logs);
}

/* The number after `label` in `text` (0 when absent). */
static pid_t pid_after(const char *text, const char *label)
{
    const char *at = strstr(text, label);
    return at != NULL ? (pid_t)atoi(at + strlen(label)) : 0;
}

/* The launcher SIGKILLed while its warm-restarted workers run: they and the zygote end
 * (the parent-death signal set once adopted, the orphan guard); and SIGKILLed as the
 * restart begins (workers being forked): nothing of the job outlives it. */
static void test_warm_restart_no_orphans(void **state)
{
    char *logs = th_tmpdir(), mark[300];
    snprintf(mark, sizeof mark, "DDP_TEST_SESSION=%s", getenv("DDP_TEST_SESSION"));
    for (int early = 0; early < 2; early++) {
        th_proc_t p;
        char log_flag[600];
        snprintf(log_flag, sizeof log_flag, "--log-dir=%s", logs);
        const char *argv[] = {th_launcher(),
                              "--master-port=0",
                              "--nproc-per-node=2",
                              "--max-restarts=1",
                              "--shutdown-timeout=5",
                              "--warm-restarts",
                              log_flag,
                              th_script("warm_restart.py"),
                              "hold",
                              NULL};
        char trigger[1100];
        const char *file = th_trigger_var(trigger, sizeof trigger);
        const char *env[] = {torch.env[0], torch.env[1], torch.env[2], NULL, NULL};
        env[torch.env[1] == NULL ? 1 : 3] = trigger;
        th_start(&p, argv, env);
        TH_ASSERT(&p, th_wait_output(&p, 2, "has imported torch", 1, 200));
        TH_ASSERT(&p, th_touch(file));
        if (early) {
            TH_ASSERT(&p, th_wait_output(&p, 2, "restarting the workers as attempt 1", 1, 200));
        } else {
            TH_ASSERT(&p, th_wait_output(&p, 1, "HOLD rank ", 2, 200));
        }
        pid_t zygote = pid_after(ddp_buf_str(&p.err), "the zygote (pid ");
        pid_t rank0 = pid_after(ddp_buf_str(&p.out), "HOLD rank 0 pid ");
        pid_t rank1 = pid_after(ddp_buf_str(&p.out), "HOLD rank 1 pid ");
        TH_ASSERT(&p, zygote > 0);
        kill(p.pid, SIGKILL);
        TH_ASSERT(&p, th_wait_exit(&p, 30));
        TH_ASSERT(&p, th_wait_gone(zygote, 15));
        TH_ASSERT(&p, early || (rank0 > 0 && rank1 > 0 && th_wait_gone(rank0, 15) &&
                                th_wait_gone(rank1, 15)));
        TH_ASSERT(&p, th_end_marked(mark, 15) == 0);
        th_cleanup(&p);
    }
    th_rmtree(logs);
    free(logs);
}

/* --max-restarts and the exit status are what they are cold: a rank that fails on every
 * attempt is restarted warm twice, then the job ends 1, or the worker's own 7 with
 * --exit-code=worker, the report naming it. */
static void test_warm_restart_exit_codes(void **state)
{
    for (int worker_code = 0; worker_code < 2; worker_code++) {
        const char *args[] = {"--standalone",
                              "--nproc-per-node=2",
                              "--max-restarts=2",
                              "--shutdown-timeout=5",
                              "--warm-restarts",
                              worker_code ? "--exit-code=worker" : "--exit-code=torchrun",
                              th_script("warm_restart.py"),
                              "always",
                              "7",
                              NULL};
        th_proc_t p;
        launch_after(&p, args, NULL, "has imported torch", 300);
        const char *err = ddp_buf_str(&p.err);
        TH_ASSERT(&p, th_status(&p) == (worker_code ? 7 : 1));
        TH_ASSERT(&p, th_count(ddp_buf_str(&p.out), "rank 1 fails on attempt ") == 3);
        TH_ASSERT(&p, strstr(err, "restarting the workers as attempt 2 (restart 2 of 2)") != NULL);
        TH_ASSERT(&p, strstr(err, "of attempt 2 forked from the zygote") != NULL);
        TH_ASSERT(&p, strstr(err, "restarting the workers as attempt 3") == NULL);
        TH_ASSERT(&p, strstr(err, "  exitcode  : 7") != NULL);
        th_cleanup(&p);
    }
}

/* The error file of a warm-restarted worker: torch's @record writes it where a cold
 * worker's would be, and the report shows its traceback. */
static void test_warm_restart_error_file(void **state)
{
    const char *args[] = {
        "--standalone",    "--nproc-per-node=2",         "--max-restarts=1", "--shutdown-timeout=5",
        "--warm-restarts", th_script("warm_restart.py"), "record",           NULL};
    th_proc_t p;
    launch_after(&p, args, NULL, "has imported torch", 300);
    const char *err = ddp_buf_str(&p.err);
    const char *root = strstr(err, "Root Cause (first observed failure):");
    TH_ASSERT(&p, th_status(&p) == 1);
    TH_ASSERT(&p, strstr(err, "2 of 2 workers of attempt 1 forked from the zygote") != NULL);
    TH_ASSERT(&p, root != NULL && strstr(root, "/attempt_1/1/error.json") != NULL);
    TH_ASSERT(&p, strstr(root, "  RuntimeError: deliberate failure at attempt 1") != NULL);
    th_cleanup(&p);
}

/* A --preload module that initialises CUDA at import: the zygote refuses to serve and
 * says why, and the restart starts cold (and works). */
static void test_warm_restart_refuses_cuda_at_import(void **state)
{
    char path_var[1200];
    snprintf(path_var, sizeof path_var, "PYTHONPATH=%s/tests/python", th_source_dir());
    const char *args[] = {"--standalone",
                          "--nproc-per-node=2",
                          "--max-restarts=1",
                          "--shutdown-timeout=5",
                          "--warm-restarts",
                          "--preload=cuda_at_import",
                          th_script("warm_restart.py"),
                          "once",
                          NULL};
    th_proc_t p;
    launch_after(&p, args, path_var, "zygote refused", 300);
    const char *err = ddp_buf_str(&p.err);
    TH_ASSERT(&p, th_status(&p) == 0);
    TH_ASSERT(&p, strstr(err, "zygote refused to serve: importing cuda_at_import initialised "
                              "CUDA") != NULL);
    TH_ASSERT(&p, strstr(err, "local rank 0 of attempt 1 starts cold: the zygote refused") != NULL);
    TH_ASSERT(&p, strstr(err, "forked from the zygote") == NULL);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.out), "rank 1 fails on attempt 0\n") != NULL);
    th_cleanup(&p);
}

/* A new directory holding FashionMNIST (which the trixie root sees too), or NULL with a
 * line saying why not. */
static char *fashion_data(void)
{
    char *dir = th_tmpdir(), cmd[2000];
    snprintf(cmd, sizeof cmd, "cp /usr/share/datasets/fashion-mnist/*-ubyte.gz '%s'", dir);
    if (system(cmd) == 0)
        return dir;
    printf("no FashionMNIST (apt-get install dataset-fashion-mnist): not trained\n");
    th_rmtree(dir);
    free(dir);
    return NULL;
}

/* examples/torch/train_fashion.py, the course's DDP steps, trains for real on a subset of
 * FashionMNIST (copied into the test's directory, which the trixie root sees too),
 * checkpoints each epoch, and a second run resumes from the checkpoint. */
static void test_train_fashion(void **state)
{
    char *dir = fashion_data(), data[1100], ckpt[1100], path[1100];
    if (dir == NULL)
        return;
    snprintf(data, sizeof data, "--data=%s", dir);
    snprintf(ckpt, sizeof ckpt, "--checkpoint=%s/fashion.pt", dir);
    snprintf(path, sizeof path, "%s/examples/torch/train_fashion.py", th_source_dir());
    const char *args[] = {"--standalone",
                          "--nproc-per-node=2",
                          path,
                          "--model=mlp",
                          "--epochs=2",
                          "--limit-train=4000",
                          "--limit-test=1000",
                          "--log-every=20",
                          data,
                          ckpt,
                          NULL};
    th_proc_t p;
    launch(&p, args, 600);
    const char *out = ddp_buf_str(&p.out);
    TH_ASSERT(&p, th_status(&p) == 0);
    TH_ASSERT(&p, strstr(out, "training MLP on 4000 samples, 2 worker(s) x batch 64, 31 steps "
                              "per epoch\n") != NULL);
    TH_ASSERT(&p, strstr(out, "epoch 2/2 step 20/31 loss ") != NULL);
    const char *acc = strstr(out, "test accuracy ");
    TH_ASSERT(&p, acc != NULL && atof(acc + strlen("test accuracy ")) >= 60.0);
    th_cleanup(&p);
    /* Three epochs now: the checkpoint of two is there. */
    args[4] = "--epochs=3";
    launch(&p, args, 600);
    out = ddp_buf_str(&p.out);
    TH_ASSERT(&p, th_status(&p) == 0);
    TH_ASSERT(&p, strstr(out, "/fashion.pt at epoch 3 (attempt 0)\n") != NULL);
    TH_ASSERT(&p, strstr(out, "epoch 1/3") == NULL && strstr(out, "epoch 3/3 done") != NULL);
    th_cleanup(&p);
    /* FashionCNN (batch norm buffers) with fewer test samples than one share per rank:
     * rank 1 evaluates nothing, and the run still ends (it hung in DDP's buffer broadcast). */
    const char *cnn[] = {
        "--standalone",      "--nproc-per-node=2", path, "--model=cnn", "--epochs=1",
        "--limit-train=256", "--limit-test=1000",  data, NULL};
    launch(&p, cnn, 600);
    TH_ASSERT(&p, th_status(&p) == 0);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.out), "epoch 1/1 done") != NULL);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.out), "test accuracy ") != NULL);
    th_cleanup(&p);
    th_rmtree(dir);
    free(dir);
}

/* libddp's C example as a worker of PyTorch's own launcher, 2 workers: its store client
 * speaks generation 1 to torch 1.13's TCPStore (which resets 2.x's VALIDATE) and
 * generation 2 to torch 2.6's. torchrun 1.13 needs explicit --redirects and --tee maps
 * to start on Python 3.11 (rank 9 does not exist: nothing is redirected); static
 * rendezvous, as 2.6's c10d backend would want libuv. The data is copied into the test's
 * directory, which the trixie root sees. */
static void test_c_example_under_torchrun(void **state)
{
    const char *example = getenv("DDP_TEST_FASHION");
    if (example == NULL || *example == '\0') {
        printf("skipped: no C example (DDP_TEST_FASHION)\n");
        return;
    }
    char *dir = fashion_data(), data[1100], port[32];
    if (dir == NULL)
        return;
    snprintf(data, sizeof data, "--data=%s", dir);
    snprintf(port, sizeof port, "--master_port=%d", th_free_port());
    const char *argv[24] = {torch.python,    "-m", "torch.distributed.run",   "--nnodes=1",
                            "--node_rank=0", port, "--master_addr=127.0.0.1", "--nproc_per_node=2",
                            "--no_python"};
    int n = 9;
    if (strcmp(torch.version, "1.13") == 0) {
        argv[n++] = "--redirects=9:0";
        argv[n++] = "--tee=9:0";
    }
    const char *rest[] = {example, data, "--model=mlp", "--max-steps=30", "--limit-test=500", NULL};
    for (int i = 0; rest[i] != NULL; i++)
        argv[n++] = rest[i];
    argv[n] = NULL;
    th_proc_t p;
    th_run(&p, argv, torch.env, 600);
    const char *out = ddp_buf_str(&p.out);
    TH_ASSERT(&p, th_status(&p) == 0);
    TH_ASSERT(&p, strstr(out, "training MLP on 60000 samples, 2 worker(s) x batch 64") != NULL);
    const char *acc = strstr(out, "test accuracy ");
    TH_ASSERT(&p, acc != NULL && atof(acc + strlen("test accuracy ")) >= 50.0);
    th_cleanup(&p);
    th_rmtree(dir);
    free(dir);
}

int main(int argc, char **argv)
{
    flavour = argc > 1 ? argv[1] : "1.13";
    if (argc > 2) /* meson test torch-1.13 --test-args NAME: only the tests NAME matches */
        cmocka_set_test_filter(argv[2]);
    if (strcmp(flavour, "1.13") != 0 && strcmp(flavour, "2.6") != 0 &&
        strcmp(flavour, "python") != 0) {
        fprintf(stderr, "usage: %s 1.13|2.6|python (python: DDP_TEST_TORCH_PYTHON's torch)\n",
                argv[0]);
        return 2;
    }
    th_torch_prepare(&torch, flavour);
    const struct CMUnitTest tests[] = {
        TH_TEST(test_gloo_two_ranks),
        TH_TEST(test_gloo_four_ranks),
        TH_TEST(test_late_rank_named),
        TH_TEST(test_tcpstore_client),
        TH_TEST(test_restart_after_a_failure),
        TH_TEST(test_error_file_in_report),
        TH_TEST(test_early_finish_said),
        TH_TEST(test_watchdog_timer),
        TH_TEST(test_train_fashion),
        TH_TEST(test_fashion_device_choice),
        TH_TEST(test_c_example_under_torchrun),
        TH_TEST(test_hang_dump_python_stacks),
        TH_TEST(test_straggler_named),
        TH_TEST(test_ddp_straggler_named),
        TH_TEST(test_ddp_hang_names_the_stopped_rank),
        TH_TEST(test_warm_restart_same_as_cold),
        TH_TEST(test_warm_restart_no_orphans),
        TH_TEST(test_warm_restart_exit_codes),
        TH_TEST(test_warm_restart_refuses_cuda_at_import),
        TH_TEST(test_warm_restart_error_file),
    };
    return cmocka_run_group_tests_name(flavour, tests, NULL, NULL);
}
