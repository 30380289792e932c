/* Integration tests of the workers' progress as the launcher sees it: straggler reports
 * (--straggler-report) from libddp's flight rings and from Python's ddp_launch.step(),
 * and --hang-timeout=auto; the ddp_launch module outside ddp-launch. PyTorch (gloo)
 * workers: test_torch.c; several nodes: test_multinode.c. Python parts skip (77 for the
 * test) without python3. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "harness.h"
#include "io.h"
#include "json.h"

#include <glob.h>
#include <locale.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <wchar.h>

/* The path of tests/python/NAME, in a static buffer. */
static const char *python_script(const char *name)
{
    static char path[1024];
    snprintf(path, sizeof path, "%s/tests/python/%s", th_source_dir(), name);
    return path;
}

static const char *script(void)
{
    return python_script("straggler.py");
}

static const char *const *python_env(void)
{
    static char exec[600];
    static const char *env[2];
    const char *py = getenv("DDP_TEST_PYTHON");
    if (py == NULL || *py == '\0')
        skip();
    snprintf(exec, sizeof exec, "PYTHON_EXEC=%s", py);
    env[0] = exec;
    return env;
}

/* Whether `err` names exactly the ranks of `want` (of 0..3) as stragglers. */
static void assert_stragglers(th_proc_t *p, const char *want)
{
    const char *err = ddp_buf_str(&p->err);
    for (int r = 0; r < 4; r++) {
        char line[64];
        snprintf(line, sizeof line, "straggler: rank %d (node 0 on ", r);
        bool named = strstr(err, line) != NULL;
        if (named != (strchr(want, '0' + r) != NULL))
            fail_msg("rank %d %s named (want %s):\n%s", r, named ? "is" : "is not", want, err);
    }
}

/* 4 libddp ranks under --straggler-report=`report` (and `flag`, or NULL), running the
 * collectives helper's slow mode: `steps` all-reduces of `ms` ms each, `ranks` sleeping
 * 30 ms more a step ("-": none), with `env` (or NULL). */
static void run_slow(th_proc_t *p, const char *report, const char *flag, const char *steps,
                     const char *ms, const char *ranks, const char *const *env)
{
    char report_flag[64];
    snprintf(report_flag, sizeof report_flag, "--straggler-report=%s", report);
    const char *argv[12] = {th_launcher(), "--nproc-per-node=4", report_flag};
    int n = 3;
    if (flag != NULL)
        argv[n++] = flag;
    argv[n++] = "--no-python";
    argv[n++] = getenv("DDP_TEST_COLLECTIVES");
    argv[n++] = "slow";
    argv[n++] = steps;
    argv[n++] = ms;
    argv[n++] = ranks;
    argv[n] = NULL;
    th_run(p, argv, env, 120);
}

/* libddp: 4 ranks all-reduce 150 times, rank 2 sleeping 30 ms more a step: the 2 s
 * reports name rank 2 (and no other), whom the node's collectives waited for; the event
 * log has it, each key once (the straggler's node and host are rank_node and rank_host:
 * node and host are the reporter's, as in every event). */
static void test_libddp_straggler_named(void **state)
{
    char *dir = th_tmpdir(), events[700], flag[740];
    snprintf(events, sizeof events, "%s/events.jsonl", dir);
    snprintf(flag, sizeof flag, "--event-log-handler=file:%s", events);
    th_proc_t p;
    run_slow(&p, "2", flag, "150", "10", "2", NULL);
    TH_ASSERT(&p, th_status(&p) == 0);
    assert_stragglers(&p, "2");
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "works ") != NULL);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "the collectives waited for it ") != NULL);
    th_cleanup(&p);
    char *text = NULL;
    size_t len;
    assert_int_equal(ddp_read_file(events, 1 << 20, &text, &len), 0);
    char *line = strstr(text, "\"event\": \"straggler\"");
    if (line == NULL || strstr(line, "\"rank\": 2") == NULL)
        fail_msg("no straggler event for rank 2 in:\n%s", text);
    line[strcspn(line, "\n")] = '\0';
    if (th_count(line, "\"node\": ") != 1 || th_count(line, "\"host\": ") != 1 ||
        strstr(line, "\"rank_node\": 0, \"rank_host\": \"") == NULL)
        fail_msg("a straggler event's keys: %s", line);
    free(text);
    th_rmtree(dir);
    free(dir);
}

/* A libddp program with a reducer: its iterations are steps (libddp writes the progress
 * ring), and rank 2 is named by its work a step. */
static void test_libddp_reducer_steps(void **state)
{
    const char *env[] = {"DDP_TEST_REDUCER=1", NULL};
    th_proc_t p;
    run_slow(&p, "2", NULL, "150", "10", "2", env);
    TH_ASSERT(&p, th_status(&p) == 0);
    assert_stragglers(&p, "2");
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), " ms a step, ") != NULL);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "the collectives waited for it ") != NULL);
    th_cleanup(&p);
}

/* Two ranks equally slow: both are named. */
static void test_two_stragglers_named(void **state)
{
    th_proc_t p;
    run_slow(&p, "2", NULL, "150", "10", "1,2", NULL);
    TH_ASSERT(&p, th_status(&p) == 0);
    assert_stragglers(&p, "12");
    th_cleanup(&p);
}

/* No straggler, no line; --straggler-report=0: none even with one. */
static void test_no_straggler_no_line(void **state)
{
    th_proc_t p;
    run_slow(&p, "1", NULL, "100", "20", "-", NULL);
    TH_ASSERT(&p, th_status(&p) == 0);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "straggler") == NULL);
    th_cleanup(&p);
    run_slow(&p, "0", NULL, "100", "10", "2", NULL);
    TH_ASSERT(&p, th_status(&p) == 0);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "straggler") == NULL);
    th_cleanup(&p);
}

/* Python workers calling ddp_launch.step() (no torch): rank 2 named. */
static void test_python_straggler_named(void **state)
{
    const char *const *env = python_env();
    const char *argv[] = {
        th_launcher(), "--nproc-per-node=4", "--straggler-report=2", script(), "120", "10", "2",
        NULL};
    th_proc_t p;
    th_run(&p, argv, env, 120);
    TH_ASSERT(&p, th_status(&p) == 0);
    assert_stragglers(&p, "2");
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), " ms a step, ") != NULL);
    th_cleanup(&p);
}

/* --hang-timeout=auto: steps of 50 ms, rank 1 stops after 40: the report comes within 10x
 * the step (the rank's own timeout, learnt), names rank 1, and the job fails with a
 * failure report whose root cause is rank 1's hang. */
static void test_hang_auto_finds_a_stopped_rank(void **state)
{
    const char *const *env = python_env();
    const char *argv[] = {th_launcher(),
                          "--nproc-per-node=2",
                          "--hang-timeout=auto",
                          "--hang-timeout-floor=0.2",
                          "--straggler-report=0",
                          script(),
                          "400",
                          "50",
                          "-",
                          "stop=1:40",
                          NULL};
    th_proc_t p;
    th_run(&p, argv, env, 120);
    const char *err = ddp_buf_str(&p.err), *at = strstr(err, "rank 1 has made no step for ");
    TH_ASSERT(&p, th_status(&p) == 1);
    TH_ASSERT(&p, at != NULL);
    double idle = 0, limit = 0;
    TH_ASSERT(&p, sscanf(at, "rank 1 has made no step for %lf s (--hang-timeout=auto: %lf s", &idle,
                         &limit) == 2);
    printf("rank 1 reported after %.2f s without a step (limit %.2f s)\n", idle, limit);
    /* Reported well before a fixed timeout would (the limit learnt: 5x the longest step, 0.25
     * s for 50 ms steps; a loaded CI machine's longest step took 0.22 s once: up to 0.5 s
     * taken), and after no less than the limit; the report's own lateness given headroom
     * (an ASan build under a loaded CI machine: 0.73 s seen). */
    TH_ASSERT(&p, limit >= 0.2 && limit < 2.5 && idle >= limit && idle < limit + 2);
    TH_ASSERT(&p, strstr(err, "ddp_launch.step() #40 ") != NULL); /* its row in the table */
    /* The stop says how long rank 1 was quiet, and its timeout as the limit (above: %.1f). */
    const char *hung = strstr(err, "the job hung (no progress for ");
    double quiet = 0, said_limit = 0;
    TH_ASSERT(&p, hung != NULL && sscanf(hung + strlen("the job hung (no progress for "),
                                         "%lf s, the limit %lf s): ", &quiet, &said_limit) == 2);
    TH_ASSERT(&p, quiet > said_limit && said_limit - limit < 0.06 && limit - said_limit < 0.06);
    /* The failure report: rank 1 its root cause, the hang report's file named; rank 0
     * stopped (they were neither: a hang stop printed nothing after its SIGTERM). */
    const char *root = strstr(err, "Root Cause (first observed failure):");
    TH_ASSERT(&p, root != NULL && strstr(root, "rank      : 1 (local_rank: 1)") != NULL);
    TH_ASSERT(&p, strstr(root, "/hang_report.txt)") != NULL);
    TH_ASSERT(&p,
              strstr(root, "stopped by ddp-launch, not failures of their own: rank 0 ") != NULL);
    th_cleanup(&p);
}

/* The wall clock stepping an hour forward (NTP's step, a VM's resume) while the workers
 * are quiet is no hang: --hang-timeout measures elapsed time (it said "no rank has made
 * progress for 3601 s" and stopped the job as hung). Quiet 2.5 s at a time, under a 5 s
 * timeout; the step comes 1.2 s in, LD_PRELOADed (helpers/clock_step.c; ASan is told
 * the preload comes before it). */
static void test_clock_step_is_no_hang(void **state)
{
    char preload[700], asan[700];
    const char *lib = getenv("DDP_TEST_CLOCK_STEP_LIB"), *asan_now = getenv("ASAN_OPTIONS");
    assert_non_null(lib);
    snprintf(preload, sizeof preload, "LD_PRELOAD=%s", lib);
    snprintf(asan, sizeof asan, "ASAN_OPTIONS=%s%sverify_asan_link_order=0",
             asan_now != NULL ? asan_now : "", asan_now != NULL ? ":" : "");
    const char *env[] = {preload, asan, "DDP_TEST_CLOCK_STEP=1.2:3600", NULL};
    const char *argv[] = {th_launcher(),
                          "--nproc-per-node=2",
                          "--hang-timeout=5",
                          "--no-python",
                          "/bin/sh",
                          "-c",
                          "echo 'tick 0'; sleep 2.5; echo 'tick 1'; sleep 2.5; echo 'tick 2'",
                          NULL};
    th_proc_t p;
    th_run(&p, argv, env, 60);
    TH_ASSERT(&p, th_status(&p) == 0);
    TH_ASSERT(&p, th_count(ddp_buf_str(&p.out), "tick ") == 6);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "hang") == NULL);
    th_cleanup(&p);
}

/* Ctrl-Z for 2 s in the middle of 50 ms steps under --hang-timeout=auto (learnt: ~0.25 s)
 * is no hang: the time stopped is no rank's. */
static void test_ctrl_z_is_no_hang_for_auto(void **state)
{
    const char *const *env = python_env();
    const char *argv[] = {th_launcher(),
                          "--nproc-per-node=2",
                          "--hang-timeout=auto",
                          "--hang-timeout-floor=0.2",
                          "--straggler-report=0",
                          script(),
                          "100",
                          "50",
                          "-",
                          NULL};
    th_proc_t p;
    th_start(&p, argv, env);
    usleep(2500 * 1000); /* some 40 steps: the step time is learnt */
    TH_ASSERT(&p, kill(p.pid, SIGTSTP) == 0);
    usleep(2000 * 1000);
    TH_ASSERT(&p, kill(p.pid, SIGCONT) == 0);
    TH_ASSERT(&p, th_wait_exit(&p, 60));
    const char *err = ddp_buf_str(&p.err);
    TH_ASSERT(&p, th_status(&p) == 0);
    TH_ASSERT(&p, strstr(err, "stopped (SIGTSTP): 2 worker(s) stop with ddp-launch") != NULL);
    TH_ASSERT(&p, strstr(err, "hang") == NULL);
    th_cleanup(&p);
}

/* hang_timeouts.json's longest_s under `path` (keys, NULL-ended) of `root` (-1: none). */
static double learnt(const ddp_json_t *root, const char *const *path)
{
    const ddp_json_t *at = root;
    for (; at != NULL && *path != NULL; path++)
        at = ddp_json_get(at, *path);
    double seconds = -1;
    if (at == NULL || !ddp_json_number(ddp_json_get(at, "longest_s"), &seconds))
        return -1;
    return seconds;
}

/* A 3 s checkpoint section every 20 steps of 50 ms is its own phase: not a hang. */
static void test_hang_auto_spares_a_checkpoint(void **state)
{
    const char *const *env = python_env();
    char *dir = th_tmpdir(), flag[700];
    snprintf(flag, sizeof flag, "--log-dir=%s", dir);
    const char *argv[] = {th_launcher(),
                          "--nproc-per-node=2",
                          "--hang-timeout=auto",
                          "--hang-timeout-floor=0.2",
                          flag,
                          script(),
                          "70",
                          "50",
                          "-",
                          "checkpoint=20:3000",
                          NULL};
    th_proc_t p;
    th_run(&p, argv, env, 120);
    TH_ASSERT(&p, th_status(&p) == 0);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "hang") == NULL);
    th_cleanup(&p);
    /* What it learnt is in the run's directory. */
    char pattern[800], *text = NULL;
    size_t len;
    glob_t g;
    snprintf(pattern, sizeof pattern, "%s/*/hang_timeouts.json", dir);
    assert_int_equal(glob(pattern, 0, NULL, &g), 0);
    assert_int_equal(ddp_read_file(g.gl_pathv[0], 1 << 16, &text, &len), 0);
    globfree(&g);
    /* The checkpoint's 3 s learnt apart (3.0x, up to 4 s on a loaded machine); the step's
     * own time not taken for it (under 1 s: a loaded machine's steps of 50 ms took 0.12 s
     * once, and the check asked 0.0x). */
    static const char *const checkpoint[] = {"sections", "checkpoint", NULL};
    static const char *const step[] = {"step", NULL};
    ddp_json_t *root = NULL;
    double checkpoint_s = -1, step_s = -1;
    if (ddp_json_parse(text, len, &root) == 0) {
        checkpoint_s = learnt(root, checkpoint);
        step_s = learnt(root, step);
    }
    if (checkpoint_s < 3.0 || checkpoint_s >= 4.0 || step_s < 0.05 || step_s >= 1.0)
        fail_msg("hang_timeouts.json: %s", text);
    ddp_json_free(root);
    free(text);
    th_rmtree(dir);
    free(dir);
}

/* How often the launcher's loop thread (its main thread) has slept and woken: its
 * voluntary context switches; -1 when unreadable. */
static long loop_wakeups(pid_t pid)
{
    char path[64], line[128];
    long n = -1;
    snprintf(path, sizeof path, "/proc/%d/task/%d/status", (int)pid, (int)pid);
    FILE *f = fopen(path, "r");
    while (f != NULL && fgets(line, sizeof line, f) != NULL)
        if (sscanf(line, "voluntary_ctxt_switches: %ld", &n) == 1)
            break;
    if (f != NULL)
        fclose(f);
    return n;
}

/* A worker that writes no progress (no ring, ever) costs the launcher next to nothing:
 * under --straggler-report=1 (a look every 50 ms while there are rings) its loop wakes a
 * few times in 3 s, not 60 (at 1024 simulated nodes the looks took the launchers' steady
 * CPU from 1.9x to 3.5x a bare worker's). */
static void test_no_ring_few_looks(void **state)
{
    const char *argv[] = {th_launcher(),
                          "--nproc-per-node=1",
                          "--straggler-report=1",
                          "--no-python",
                          "/bin/sh",
                          "-c",
                          "echo started; sleep 3; echo done; exec sleep 30",
                          NULL};
    th_proc_t p;
    th_start(&p, argv, NULL);
    TH_ASSERT(&p, th_wait_output(&p, 1, "started", 1, 30));
    long before = loop_wakeups(p.pid);
    double began = th_now();
    TH_ASSERT(&p, th_wait_output(&p, 1, "done", 1, 30));
    long after = loop_wakeups(p.pid);
    double took = th_now() - began;
    printf("the loop woke %ld times in %.1f s\n", after - before, took);
    TH_ASSERT(&p, before >= 0 && after >= before);
    TH_ASSERT(&p, after - before <= 12);
    TH_ASSERT(&p, kill(p.pid, SIGTERM) == 0);
    TH_ASSERT(&p, th_wait_exit(&p, 30));
    TH_ASSERT(&p, th_status(&p) == 128 + SIGTERM);
    th_cleanup(&p);
}

/* Outside ddp-launch, ddp_launch.step(), section() and watch() do nothing (make no file,
 * register no comm hook); watch() refuses what is not a DDP model. */
static void test_module_outside_ddp_launch(void **state)
{
    const char *py = getenv("DDP_TEST_PYTHON");
    if (py == NULL || *py == '\0')
        skip();
    char *dir = th_tmpdir(), path[1100], cwd[700];
    snprintf(path, sizeof path, "PYTHONPATH=%s/worker/python", getenv("DDP_TEST_BUILD_DIR"));
    const char *argv[] = {py, "-c",
                          "import os, ddp_launch\n"
                          "for _ in range(3): ddp_launch.step()\n"
                          "with ddp_launch.section('eval'): pass\n"
                          "class DDP:\n"
                          "    def register_comm_hook(self, state, hook): raise SystemExit(3)\n"
                          "model = DDP()\n"
                          "assert ddp_launch.watch(model) is model\n"
                          "try: ddp_launch.watch(object())\n"
                          "except TypeError: print('refused')\n"
                          "print('ok', sorted(os.listdir('.')))\n",
                          NULL};
    const char *env[] = {path, "DDP_PROGRESS_RING=", NULL};
    assert_non_null(getcwd(cwd, sizeof cwd));
    assert_int_equal(chdir(dir), 0);
    th_proc_t p;
    th_run(&p, argv, env, 60);
    assert_int_equal(chdir(cwd), 0);
    TH_ASSERT(&p, th_status(&p) == 0);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.out), "refused\nok []") != NULL);
    th_cleanup(&p);
    th_rmtree(dir);
    free(dir);
}

/* A worker that forges a ring the launcher reads (a step counter of INT64_MAX; a flight
 * ring's completed 2^64-1) cannot hold the launcher's loop: the worker's output still
 * comes, and SIGTERM ends the job at once (the launcher spun at 100 %, deaf to signals,
 * its worker left a zombie and its last output lost). */
static void test_forged_rings_are_bounded(void **state)
{
    const char *const *env = python_env();
    const char *kinds[] = {"progress", "flight"};
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        const char *argv[] = {th_launcher(),
                              "--nproc-per-node=1",
                              "--straggler-report=1",
                              "--hang-timeout=auto",
                              python_script("forged_ring.py"),
                              kinds[k],
                              NULL};
        th_proc_t p;
        double began = th_now();
        th_start(&p, argv, env);
        TH_ASSERT(&p, th_wait_output(&p, 1, "tick 10", 1, 15));
        TH_ASSERT(&p, kill(p.pid, SIGTERM) == 0);
        TH_ASSERT(&p, th_wait_exit(&p, 10));
        TH_ASSERT(&p, th_status(&p) == 128 + SIGTERM);
        printf("forged %s ring: %.1f s\n", kinds[k], th_now() - began);
        th_cleanup(&p);
    }
}

/* A worker that links its files into a hung file system (a FUSE mount that never
 * answers, a dead NFS server's stand-in; tests/helpers/hung_mount.c) cannot block the
 * launcher: local rank 0 replaces its rings, stack files, stderr.log and error file with
 * links there, local rank 1 its whole directory. The launcher follows no link a worker
 * made (its loop waited in the file system, deaf to every signal): reading the rings
 * (stragglers, --hang-timeout=auto), the output comes and SIGTERM acts at once; with
 * --hang-timeout=1 --hang-dump, the hang report comes and ends the job; rank 0's failure
 * is reported (its error file, the tail of its redirected stderr). */
static void test_ring_links_into_a_hung_mount(void **state)
{
    char *dir = th_tmpdir();
    const char *script =
        "d=$(dirname \"$DDP_PROGRESS_RING\")\n"
        "if [ \"$LOCAL_RANK\" = 0 ]; then\n"
        "  for f in progress.ring flight_main.ring stack.txt python_stack.txt stderr.log "
        "error.json; do\n"
        "    rm -f \"$d/$f\" && ln -s \"$HUNG_MOUNT/$f\" \"$d/$f\" || exit 9\n"
        "  done\n"
        "else\n"
        "  mv \"$d\" \"$d.moved\" && ln -s \"$HUNG_MOUNT\" \"$d\" || exit 9\n"
        "fi\n"
        "for i in 1 2 3 4 5 6 7 8 9 10; do echo \"tick $i\"; sleep 0.1; done\n"
        "touch \"$HUNG_MOUNT.$LOCAL_RANK\"\n"
        "if [ -n \"$HUNG_FAIL\" ] && [ \"$LOCAL_RANK\" = 0 ]; then\n" /* once both ticked */
        "  for i in $(seq 200); do [ -e \"$HUNG_MOUNT.1\" ] && exit 3; sleep 0.05; done\n"
        "fi\n"
        "exec sleep 600\n";
    const struct {
        const char *flags[2], *env[2];
        int status;
    } runs[] = {
        {{"--straggler-report=1", "--hang-timeout=auto"}, {NULL}, 128 + SIGTERM},
        {{"--hang-timeout=1", "--hang-dump"}, {NULL}, 1},
        {{"--redirects=2", "--hang-timeout=auto"}, {"HUNG_FAIL=1", NULL}, 1},
    };
    for (size_t k = 0; k < sizeof runs / sizeof runs[0]; k++) {
        const char *argv[] = {getenv("DDP_TEST_HUNG_MOUNT"),
                              dir,
                              th_launcher(),
                              "--nproc-per-node=2",
                              runs[k].flags[0],
                              runs[k].flags[1],
                              "--no-python",
                              "/bin/sh",
                              "-c",
                              script,
                              NULL};
        th_proc_t p;
        double began = th_now();
        th_start(&p, argv, runs[k].env);
        bool ticked = th_wait_output(&p, 1, "tick 10", 2, 15);
        if (!ticked && p.exited && th_status(&p) == 77) { /* no FUSE here, or no privilege */
            th_cleanup(&p);
            th_rmtree(dir);
            free(dir);
            skip();
        }
        TH_ASSERT(&p, ticked);
        if (runs[k].status == 128 + SIGTERM)
            TH_ASSERT(&p, kill(p.pid, SIGTERM) == 0);
        TH_ASSERT(&p, th_wait_exit(&p, 20));
        TH_ASSERT(&p, th_status(&p) == runs[k].status);
        if (k == 1)
            TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "the job hung") != NULL);
        if (k == 2)
            TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "exited with code 3") != NULL);
        printf("%s %s, files linked into a hung mount: %.1f s\n", runs[k].flags[0],
               runs[k].flags[1], th_now() - began);
        th_cleanup(&p);
        for (int r = 0; r < 2; r++) {
            char mark[700];
            snprintf(mark, sizeof mark, "%s.%d", dir, r);
            unlink(mark);
        }
    }
    th_rmtree(dir);
    free(dir);
}

/* Two threads whose sections overlap without nesting (A enters, B enters, A leaves, B
 * leaves) leave the rank in no section: a job that steps on is no hang (the ring stayed
 * "in section 'a'", and --hang-timeout=auto stopped the healthy job at its floor). */
static void test_overlapping_sections_of_two_threads(void **state)
{
    const char *const *env = python_env();
    const char *argv[] = {th_launcher(),
                          "--nproc-per-node=1",
                          "--hang-timeout=auto",
                          "--hang-timeout-floor=1",
                          "--straggler-report=0",
                          python_script("sections.py"),
                          "overlap",
                          NULL};
    th_proc_t p;
    th_run(&p, argv, env, 60);
    TH_ASSERT(&p, th_status(&p) == 0);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.out), "done") != NULL);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "hang") == NULL);
    th_cleanup(&p);
}

/* Whether the file at `path` is valid UTF-8 (and could be read). */
static bool file_is_utf8(const char *path, char **text)
{
    size_t len;
    if (ddp_read_file(path, 1 << 20, text, &len) != 0)
        return false;
    mbstate_t mb = {0};
    const char *at = *text;
    locale_t utf8 = newlocale(LC_CTYPE_MASK, "C.UTF-8", (locale_t)0);
    locale_t was = uselocale(utf8);
    bool valid = utf8 != (locale_t)0;
    while (valid && *at != '\0') {
        size_t n = mbrtowc(NULL, at, len - (size_t)(at - *text), &mb);
        valid = n != (size_t)-1 && n != (size_t)-2 && n != 0;
        at += valid ? n : 0;
    }
    uselocale(was);
    if (utf8 != (locale_t)0)
        freelocale(utf8);
    return valid;
}

/* Section names are valid UTF-8 and safe on a terminal: one cut at 23 bytes loses the
 * character cut (hang_timeouts.json and the event log held invalid UTF-8), a terminal's
 * escape is shown as '?' (its raw bytes reached the terminal). */
static void test_section_names_are_clean(void **state)
{
    const char *const *env = python_env();
    char *dir = th_tmpdir(), logs[700], events[700], log_flag[720], event_flag[740];
    snprintf(logs, sizeof logs, "%s/logs", dir);
    snprintf(events, sizeof events, "%s/events.jsonl", dir);
    snprintf(log_flag, sizeof log_flag, "--log-dir=%s", logs);
    snprintf(event_flag, sizeof event_flag, "--event-log-handler=file:%s", events);
    const char *argv[] = {th_launcher(),
                          "--nproc-per-node=1",
                          "--hang-timeout=auto",
                          "--hang-timeout-floor=1",
                          "--straggler-report=0",
                          log_flag,
                          event_flag,
                          python_script("sections.py"),
                          "names",
                          NULL};
    th_proc_t p;
    th_run(&p, argv, env, 60);
    const char *err = ddp_buf_str(&p.err);
    TH_ASSERT(&p, th_status(&p) == 1);
    TH_ASSERT(&p, strstr(err, "rank 0 has been in section '?[31mred' for ") != NULL);
    TH_ASSERT(&p, strchr(err, '\x1b') == NULL);
    char pattern[800], *text = NULL;
    glob_t g;
    snprintf(pattern, sizeof pattern, "%s/*/hang_timeouts.json", logs);
    TH_ASSERT(&p, glob(pattern, 0, NULL, &g) == 0);
    if (!file_is_utf8(g.gl_pathv[0], &text) ||
        strstr(text, "\"\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\": {") ==
            NULL)
        fail_msg("hang_timeouts.json: %s", text != NULL ? text : "(unreadable)");
    globfree(&g);
    free(text);
    text = NULL;
    if (!file_is_utf8(events, &text))
        fail_msg("events: %s", text != NULL ? text : "(unreadable)");
    free(text);
    th_cleanup(&p);
    th_rmtree(dir);
    free(dir);
}

/* Whether the file at `path` holds exactly `want`. */
static bool file_holds(const char *path, const char *want)
{
    char *text = NULL;
    size_t len;
    bool same = ddp_read_file(path, 1 << 16, &text, &len) == 0 && len == strlen(want) &&
                memcmp(text, want, len) == 0;
    free(text);
    return same;
}

/* DDP_PROGRESS_RING naming a file that is no ring: ddp_launch.step() and libddp's reducer
 * leave it as it is and say so (they zero-filled it: a copy of /etc/passwd was
 * rewritten); a name that does not exist yet becomes a ring. */
static void test_progress_ring_never_overwrites(void **state)
{
    const char *py = getenv("DDP_TEST_PYTHON");
    if (py == NULL || *py == '\0')
        skip();
    const char *passwd = "root:x:0:0:root:/root:/bin/bash\n";
    char *dir = th_tmpdir(), file[700], fresh[700], ring_var[720], fresh_var[720], path[1100];
    snprintf(file, sizeof file, "%s/passwd", dir);
    snprintf(fresh, sizeof fresh, "%s/fresh.ring", dir);
    snprintf(ring_var, sizeof ring_var, "DDP_PROGRESS_RING=%s", file);
    snprintf(fresh_var, sizeof fresh_var, "DDP_PROGRESS_RING=%s", fresh);
    snprintf(path, sizeof path, "PYTHONPATH=%s/worker/python", getenv("DDP_TEST_BUILD_DIR"));
    FILE *f = fopen(file, "w");
    assert_non_null(f);
    fputs(passwd, f);
    fclose(f);
    const char *argv[] = {py, "-c",
                          "import ddp_launch\n"
                          "ddp_launch.step()\n"
                          "with ddp_launch.section('eval'): pass\n"
                          "ddp_launch.step()\n"
                          "print('ok')\n",
                          NULL};
    const char *env[] = {path, ring_var, NULL};
    th_proc_t p;
    th_run(&p, argv, env, 60);
    TH_ASSERT(&p, th_status(&p) == 0 && strstr(ddp_buf_str(&p.out), "ok") != NULL);
    TH_ASSERT(&p, file_holds(file, passwd));
    TH_ASSERT(&p, th_count(ddp_buf_str(&p.err), " exists and is not a progress ring") == 1);
    th_cleanup(&p);
    const char *fresh_env[] = {path, fresh_var, NULL};
    th_run(&p, argv, fresh_env, 60);
    struct stat st;
    TH_ASSERT(&p, th_status(&p) == 0 && stat(fresh, &st) == 0 && st.st_size == 2944);
    TH_ASSERT(&p, ddp_buf_str(&p.err)[0] == '\0');
    th_cleanup(&p);
    /* libddp's reducer (a program of the launcher's, the ring named otherwise). */
    char script[1500];
    snprintf(script, sizeof script, "DDP_PROGRESS_RING='%s' exec '%s' slow 3 1 -", file,
             getenv("DDP_TEST_COLLECTIVES"));
    const char *launch[] = {
        th_launcher(), "--nproc-per-node=2", "--no-python", "/bin/sh", "-c", script, NULL};
    const char *reducer[] = {"DDP_TEST_REDUCER=1", NULL};
    th_run(&p, launch, reducer, 60);
    TH_ASSERT(&p, th_status(&p) == 0);
    TH_ASSERT(&p, file_holds(file, passwd));
    TH_ASSERT(&p, th_count(ddp_buf_str(&p.err), " exists and is not a progress ring") == 2);
    th_cleanup(&p);
    th_rmtree(dir);
    free(dir);
}

int main(int argc, char **argv)
{
    if (argc > 1)
        cmocka_set_test_filter(argv[1]);
    const struct CMUnitTest tests[] = {
        TH_TEST(test_libddp_straggler_named),
        TH_TEST(test_libddp_reducer_steps),
        TH_TEST(test_two_stragglers_named),
        TH_TEST(test_no_straggler_no_line),
        TH_TEST(test_python_straggler_named),
        TH_TEST(test_hang_auto_finds_a_stopped_rank),
        TH_TEST(test_hang_auto_spares_a_checkpoint),
        TH_TEST(test_clock_step_is_no_hang),
        TH_TEST(test_ctrl_z_is_no_hang_for_auto),
        TH_TEST(test_module_outside_ddp_launch),
        TH_TEST(test_forged_rings_are_bounded),
        TH_TEST(test_ring_links_into_a_hung_mount),
        TH_TEST(test_overlapping_sections_of_two_threads),
        TH_TEST(test_section_names_are_clean),
        TH_TEST(test_progress_ring_never_overwrites),
        TH_TEST(test_no_ring_few_looks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
