/* Integration tests: every worker exit code and fatal signal is reported correctly,
 * the root cause is the failed rank, error.json files reach the report, and a worker
 * that cannot start is said why. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "harness.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Every code in a plain build; in a sanitized one (its launches ten times as slow: 190 s
 * of CI for the one path 256 times) the codes at each edge: 0, 1, the shell's 126-128,
 * signal-like 128+n, 255. */
static void test_every_exit_code(void **state)
{
    static const int edges[] = {0, 1, 2, 3, 64, 125, 126, 127, 128, 129, 134, 137, 143, 254, 255};
    int ncodes = th_sanitized() ? (int)(sizeof edges / sizeof edges[0]) : 256;
    for (int k = 0; k < ncodes; k++) {
        int code = th_sanitized() ? edges[k] : k;
        char text[16], want[64];
        snprintf(text, sizeof text, "%d", code);
        const char *argv[] = {th_launcher(), "--no-python", th_worker(), "exit", text, NULL};
        th_proc_t p;
        th_run(&p, argv, NULL, 60);
        /* torchrun's convention: 1 for any failure. */
        TH_ASSERT(&p, th_status(&p) == (code == 0 ? 0 : 1));
        snprintf(want, sizeof want, "  exitcode  : %d (pid: ", code);
        TH_ASSERT(&p, (strstr(ddp_buf_str(&p.err), want) != NULL) == (code != 0));
        snprintf(want, sizeof want, "exited with code %d\n", code);
        TH_ASSERT(&p, (strstr(ddp_buf_str(&p.err), want) != NULL) == (code != 0));
        th_cleanup(&p);

        /* --exit-code=worker passes the worker's own status through. */
        const char *pass[] = {
            th_launcher(), "--exit-code=worker", "--no-python", th_worker(), "exit", text, NULL};
        th_run(&p, pass, NULL, 60);
        TH_ASSERT(&p, th_status(&p) == code);
        th_cleanup(&p);
    }
}

static void test_fatal_signals(void **state)
{
    static const int signals[] = {SIGSEGV, SIGABRT, SIGKILL, SIGTERM, SIGBUS,
                                  SIGFPE,  SIGILL,  SIGINT,  SIGHUP};
    for (size_t i = 0; i < sizeof signals / sizeof signals[0]; i++) {
        int sig = signals[i];
        char name[32], want[128];
        snprintf(name, sizeof name, "SIG%s", sigabbrev_np(sig));
        const char *argv[] = {th_launcher(), "--no-python", th_worker(), "signal", name, NULL};
        th_proc_t p;
        th_run(&p, argv, NULL, 60);
        TH_ASSERT(&p, th_status(&p) == 1);
        snprintf(want, sizeof want, "  exitcode  : -%d (pid: ", sig);
        TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), want) != NULL);
        snprintf(want, sizeof want, "  traceback : Signal %d (%s) received by PID ", sig, name);
        TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), want) != NULL);
        snprintf(want, sizeof want, "was killed by %s\n", name);
        TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), want) != NULL);
        th_cleanup(&p);

        const char *pass[] = {
            th_launcher(), "--exit-code=worker", "--no-python", th_worker(), "signal", name, NULL};
        th_run(&p, pass, NULL, 60);
        TH_ASSERT(&p, th_status(&p) == 128 + sig);
        th_cleanup(&p);
    }
}

static void test_root_cause_is_the_failed_rank(void **state)
{
    /* Local rank 1 exits 7; ranks 0 and 2 wait and must be stopped, not reported. */
    const char *argv[] = {
        th_launcher(), "--nproc-per-node=3", "--no-python", th_worker(), "exit", "7", "1", NULL};
    th_proc_t p;
    th_run(&p, argv, NULL, 60);
    const char *err = ddp_buf_str(&p.err);
    TH_ASSERT(&p, th_status(&p) == 1);
    TH_ASSERT(&p, strstr(err, "worker rank 1 (local rank 1, pid ") != NULL);
    TH_ASSERT(&p, strstr(err, "stopping 2 worker(s): sending SIGTERM to the process groups of "
                              "local ranks 0, 2;") != NULL);
    const char *root = strstr(err, "Root Cause (first observed failure):\n");
    TH_ASSERT(&p, root != NULL);
    TH_ASSERT(&p, strstr(root, "  rank      : 1 (local_rank: 1)\n  exitcode  : 7 (pid: ") != NULL);
    TH_ASSERT(&p, strstr(err, "Failures:\n  <NO_OTHER_FAILURES>\n") != NULL);
    TH_ASSERT(&p, strstr(err, "ddp-test-worker FAILED\n") != NULL);
    th_cleanup(&p);
}

static void test_error_files_reach_the_report(void **state)
{
    th_proc_t p;
    const char *nested[] = {th_launcher(), "--no-python", th_worker(), "error-file",
                            "nested",      "3",           NULL};
    th_run(&p, nested, NULL, 60);
    const char *err = ddp_buf_str(&p.err);
    TH_ASSERT(&p, th_status(&p) == 1);
    TH_ASSERT(&p, strstr(err, "/attempt_0/0/error.json\n") != NULL);
    TH_ASSERT(&p, strstr(err, "  traceback : Traceback (most recent call last):\n"
                              "    File \"train.py\", line 3\n"
                              "  RuntimeError: boom on rank 0\n") != NULL);
    th_cleanup(&p);

    const char *flat[] = {th_launcher(), "--no-python", th_worker(), "error-file",
                          "flat",        "4",           NULL};
    th_run(&p, flat, NULL, 60);
    TH_ASSERT(&p, th_status(&p) == 1);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "  traceback : flat failure of rank 0\n") != NULL);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "last line :") == NULL);
    th_cleanup(&p);

    /* No error file: the last line the worker wrote (stderr's before stdout's; one not
     * ended by a newline too) is in the report, under the traceback. */
    const char *said[] = {
        th_launcher(),
        "--no-python",
        "/bin/sh",
        "-c",
        "echo loading; printf 'fatal: no data in /x\\n\\n' >&2; echo next; exit 3",
        NULL};
    th_run(&p, said, NULL, 60);
    TH_ASSERT(&p, th_status(&p) == 1);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "  traceback : <N/A> (the program wrote no error "
                                              "file; see its stderr)\n  last line : fatal: no "
                                              "data in /x\n") != NULL);
    th_cleanup(&p);
    said[4] = "printf 'partial line'; exit 3";
    th_run(&p, said, NULL, 60);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "\n  last line : partial line\n") != NULL);
    th_cleanup(&p);

    /* A broken error file is shown as such; the report still comes. */
    const char *garbage[] = {th_launcher(), "--no-python", th_worker(), "error-file",
                             "garbage",     "5",           NULL};
    th_run(&p, garbage, NULL, 60);
    TH_ASSERT(&p, th_status(&p) == 1);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "<the error file is not valid JSON>") != NULL);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "  exitcode  : 5 (pid: ") != NULL);
    th_cleanup(&p);
}

/* The last line a worker wrote, in the report, is the worker's text in the launcher's
 * lines: an OSC 52 clipboard write, a screen clear and a DEL are shown escaped there (the
 * worker's own stderr on the console is its own, as torchrun passes it). */
static void test_last_line_shown_escaped(void **state)
{
    th_proc_t p;
    const char *said[] = {th_launcher(),
                          "--no-python",
                          "/bin/sh",
                          "-c",
                          "printf 'ok\\n\\033]52;c;aGk=\\007\\033[2J gone \\177\\n' >&2; exit 3",
                          NULL};
    th_run(&p, said, NULL, 60);
    const char *err = ddp_buf_str(&p.err), *root = strstr(err, "Root Cause (first observed");
    TH_ASSERT(&p, th_status(&p) == 1);
    TH_ASSERT(&p, strstr(err, "\n  last line : \\x1b]52;c;aGk=\\x07\\x1b[2J gone \\x7f\n") != NULL);
    TH_ASSERT(&p, root != NULL && strpbrk(root, "\x1b\x07\x7f") == NULL);
    th_cleanup(&p);
}

/* An error file that is not a regular file (a FIFO nobody writes, a directory) must not
 * hang the launcher on its loop's thread: the report says what it found. */
static void test_error_file_that_is_no_file(void **state)
{
    static const struct {
        const char *make, *said;
    } kinds[] = {
        {"mkfifo \"$TORCHELASTIC_ERROR_FILE\"", "<unable to read the error file: it is not a "
                                                "regular file>"},
        {"mkdir \"$TORCHELASTIC_ERROR_FILE\"", "<unable to read the error file: it is not a "
                                               "regular file>"},
    };
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        char script[160];
        snprintf(script, sizeof script, "%s && exit 3", kinds[i].make);
        const char *argv[] = {th_launcher(), "--no-python", "/bin/sh", "-c", script, NULL};
        th_proc_t p;
        double started = th_now();
        th_run(&p, argv, NULL, 30);
        TH_ASSERT(&p, th_now() - started < 10);
        TH_ASSERT(&p, th_status(&p) == 1);
        TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), kinds[i].said) != NULL);
        TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "  exitcode  : 3 (pid: ") != NULL);
        th_cleanup(&p);
    }
}

/* A memory cgroup of 64 MiB under this process's own (v1 or v2), for the launcher of the
 * next test; false (and why) where none can be made. */
static bool make_memory_cgroup(char *dir, size_t cap)
{
    char line[512];
    bool made = false;
    FILE *f = fopen("/proc/self/cgroup", "r");
    while (f != NULL && !made && fgets(line, sizeof line, f) != NULL) {
        line[strcspn(line, "\n")] = '\0';
        char *rel = strrchr(line, ':'), limit[700];
        bool v1 = strstr(line, ":memory:") != NULL, v2 = strncmp(line, "0::", 3) == 0;
        if (rel == NULL || (!v1 && !v2))
            continue;
        snprintf(dir, cap, "%s%s/ddp-oom-%d", v1 ? "/sys/fs/cgroup/memory" : "/sys/fs/cgroup",
                 rel + 1, (int)getpid());
        snprintf(limit, sizeof limit, "%s/%s", dir, v1 ? "memory.limit_in_bytes" : "memory.max");
        if (mkdir(dir, 0755) != 0)
            continue;
        FILE *l = fopen(limit, "w");
        made = l != NULL && fputs("67108864", l) >= 0;
        if (l != NULL && fclose(l) != 0)
            made = false;
        if (!made)
            rmdir(dir);
    }
    if (f != NULL)
        fclose(f);
    return made;
}

/* A worker the kernel's OOM killer ends (its cgroup's limit, 64 MiB, against 300 MiB) is
 * reported as out of memory, with the counter it was read from and its peak RSS; the
 * other worker is not. */
static void test_out_of_memory_is_named(void **state)
{
    char dir[600], cmd[1600];
    if (!make_memory_cgroup(dir, sizeof dir)) {
        printf("no memory cgroup can be made here (not root, no memory controller): skipped\n");
        return;
    }
    snprintf(cmd, sizeof cmd,
             "echo $$ > '%s/cgroup.procs' && exec '%s' --nproc-per-node=2 --no-python "
             "/usr/bin/python3 -c \"import os, time\nif os.environ['RANK'] == '1':\n"
             "    b = b'x' * (300 << 20)\nelse:\n    time.sleep(5)\"",
             dir, th_launcher());
    const char *argv[] = {"/bin/sh", "-c", cmd, NULL};
    th_proc_t p;
    th_run(&p, argv, NULL, 120);
    const char *err = ddp_buf_str(&p.err);
    TH_ASSERT(&p, th_status(&p) == 1);
    TH_ASSERT(&p, strstr(err, "rank      : 1 (local_rank: 1)") != NULL);
    TH_ASSERT(&p,
              strstr(err, "out of memory: the kernel's OOM killer ended it (oom_kill ") != NULL);
    TH_ASSERT(&p, strstr(err, "its peak RSS was ") != NULL);
    th_cleanup(&p);
    /* Its processes have ended; the kernel may take a moment to let the group go. */
    double deadline = th_now() + 5;
    while (rmdir(dir) != 0 && th_now() < deadline) {
        struct timespec tick = {0, 50 * 1000 * 1000};
        nanosleep(&tick, NULL);
    }
}

/* Some workers finished, one goes on: after --finished-wait-notice (60 s by default; 3 here)
 * the launcher says who finished and who
 * it waits for, so a job that only looks silent is told from a hung one; a warning, with
 * the likely cause, where those running have written nothing since. In a two-node job
 * whose node 1 has finished while node 0 runs, node 1 says so (before, it waited without
 * a word). */
static void test_waiting_for_the_rest_is_said(void **state)
{
    const char *argv[] = {th_launcher(),
                          "--nproc-per-node=4",
                          "--finished-wait-notice=3",
                          "--no-python",
                          "/bin/sh",
                          "-c",
                          "if [ $RANK = 2 ]; then exec sleep 100; fi",
                          NULL};
    /* Beside it, a job whose running rank writes: no word of a wait for good. */
    const char *chatty[] = {th_launcher(),
                            "--nproc-per-node=2",
                            "--finished-wait-notice=3",
                            "--no-python",
                            "/bin/sh",
                            "-c",
                            "if [ $RANK = 1 ]; then i=0; while [ $i -lt 200 ]; do echo step $i; "
                            "sleep 0.5; i=$((i + 1)); done; fi",
                            NULL};
    char port[64];
    snprintf(port, sizeof port, "--master-port=%d", th_free_port());
    const char *node0[] = {th_launcher(),
                           "--nnodes=2",
                           "--node-rank=0",
                           "--master-addr=127.0.0.1",
                           port,
                           "--finished-wait-notice=3",
                           "--no-python",
                           "/bin/sleep",
                           "100",
                           NULL};
    const char *node1[] = {th_launcher(),
                           "--nnodes=2",
                           "--node-rank=1",
                           "--nproc-per-node=2",
                           "--master-addr=127.0.0.1",
                           port,
                           "--finished-wait-notice=3",
                           "--no-python",
                           "/bin/true",
                           NULL};
    th_proc_t p, q, n0, n1;
    th_start(&p, argv, NULL);
    th_start(&q, chatty, NULL);
    th_start(&n0, node0, NULL);
    th_start(&n1, node1, NULL);
    /* (the seconds said: 3, or more on a loaded machine) */
    TH_ASSERT(&p, th_wait_output(&p, 2,
                                 "warning: ranks 0-1, 3 finished; waiting for rank 2 (still "
                                 "running for ",
                                 1, 60));
    TH_ASSERT(&p, th_wait_output(&p, 2,
                                 " s); nothing written since the first finished: a rank waiting "
                                 "in a collective for a finished one",
                                 1, 10));
    double said = atof(strstr(ddp_buf_str(&p.err), "(still running for ") + 19);
    TH_ASSERT(&p, said >= 3 && said < 10);
    TH_ASSERT(&q, th_wait_output(&q, 2, "rank 0 finished; waiting for rank 1 (still running for ",
                                 1, 30));
    TH_ASSERT(&q, strstr(ddp_buf_str(&q.err), "warning: rank 0 finished") == NULL);
    TH_ASSERT(&n1,
              th_wait_output(&n1, 2, "warning: this node's ranks 1-2 finished (exit 0) ", 1, 30));
    TH_ASSERT(&n1, th_wait_output(&n1, 2,
                                  " s ago; the job waits for the other nodes' workers: were they "
                                  "waiting in a collective for these ranks",
                                  1, 10));
    TH_ASSERT(&n0, strstr(ddp_buf_str(&n0.err), "finished (exit 0)") == NULL);
    TH_ASSERT(&p, kill(p.pid, SIGTERM) == 0 && kill(q.pid, SIGTERM) == 0);
    TH_ASSERT(&n0, kill(n0.pid, SIGTERM) == 0);
    TH_ASSERT(&p, th_wait_exit(&p, 60) && th_wait_exit(&q, 60));
    TH_ASSERT(&n0, th_wait_exit(&n0, 60) && th_wait_exit(&n1, 60));
    TH_ASSERT(&p, th_status(&p) == 128 + SIGTERM);
    TH_ASSERT(&n0, th_status(&n0) == 128 + SIGTERM);
    th_cleanup(&p);
    th_cleanup(&q);
    th_cleanup(&n0);
    th_cleanup(&n1);
}

/* Ranks that finished while the others ran, before a failure, are said after the report
 * (a loop left early on some ranks ends their peers' collectives); not ranks that
 * finished after it. */
static void test_finished_first_is_said(void **state)
{
    const char *first[] = {th_launcher(), "--nproc-per-node=3",
                           "--no-python", "/bin/sh",
                           "-c",          "if [ $RANK = 0 ]; then sleep 2; exit 3; fi",
                           NULL};
    th_proc_t p;
    th_run(&p, first, NULL, 60);
    TH_ASSERT(&p, th_status(&p) == 1);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "warning: ranks 1-2 had finished (exit 0) ") != NULL);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err),
                         " s before rank 0's failure, while other ranks ran") != NULL);
    th_cleanup(&p);
    const char *after[] = {
        th_launcher(), "--nproc-per-node=2",
        "--no-python", "/bin/sh",
        "-c",          "if [ $RANK = 0 ]; then exit 3; fi; trap '' TERM; sleep 1",
        NULL};
    th_run(&p, after, NULL, 60);
    TH_ASSERT(&p, th_status(&p) == 1);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), ": 0 (local_rank: 0)\n") != NULL);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "had finished") == NULL);
    th_cleanup(&p);
}

/* After the report, the ranks the launcher's stop ended are told apart from the failure:
 * with the signal that ended them, and SIGKILL when the grace period ran out. */
static void test_stopped_ranks_told_apart(void **state)
{
    const char *quick[] = {th_launcher(), "--nproc-per-node=3",
                           "--no-python", "/bin/sh",
                           "-c",          "if [ $RANK = 1 ]; then exit 2; fi; exec sleep 30",
                           NULL};
    th_proc_t p;
    th_run(&p, quick, NULL, 60);
    TH_ASSERT(&p, th_status(&p) == 1);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "stopped by ddp-launch, not failures of their own: "
                                              "ranks 0, 2 (SIGTERM)\n") != NULL);
    th_cleanup(&p);
    /* A stopped rank that had written its own error.json (as gloo's "Connection closed by
     * peer" does) has it said beside the list. */
    const char *wrote[] = {
        th_launcher(),
        "--nproc-per-node=2",
        "--no-python",
        "/bin/sh",
        "-c",
        "if [ $RANK = 1 ]; then sleep 1; exit 2; fi; printf '{\"message\": \"gloo: Connection "
        "closed by peer\", \"timestamp\": 1}' > \"$TORCHELASTIC_ERROR_FILE\"; exec sleep 30",
        NULL};
    th_run(&p, wrote, NULL, 60);
    TH_ASSERT(&p, th_status(&p) == 1);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "rank 0, stopped, had written its own error.json "
                                              "first: gloo: Connection closed by peer\n") != NULL);
    th_cleanup(&p);
    /* Rank 1 fails once rank 0 ignores SIGTERM (else the stop could come first). */
    char *dir = th_tmpdir(), ready[600];
    snprintf(ready, sizeof ready, "READY=%s/ignoring", dir);
    const char *env[] = {ready, NULL};
    const char *stubborn[] = {
        th_launcher(),
        "--nproc-per-node=2",
        "--shutdown-timeout=1",
        "--no-python",
        "/bin/sh",
        "-c",
        "if [ $RANK = 1 ]; then i=0; while [ ! -e \"$READY\" ] && [ $i -lt 200 ]; do "
        "sleep 0.05; i=$((i + 1)); done; exit 2; fi; trap '' TERM; : > \"$READY\"; sleep 30",
        NULL};
    th_run(&p, stubborn, env, 60);
    TH_ASSERT(&p, th_status(&p) == 1);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "not failures of their own: rank 0 (SIGTERM, then "
                                              "SIGKILL)\n") != NULL);
    th_cleanup(&p);
    th_rmtree(dir);
    free(dir);
}

/* Out of file descriptors while starting the workers: the cause and the limit are said
 * (the launcher stopped the started ones and ended 3 without a word why). */
static void test_out_of_descriptors_is_said(void **state)
{
    const char *argv[] = {"/bin/sh",     "-c",          "ulimit -n 40 && exec \"$@\"",
                          "sh",          th_launcher(), "--nproc-per-node=16",
                          "--no-python", "/bin/sleep",  "2",
                          NULL};
    th_proc_t p;
    th_run(&p, argv, NULL, 60);
    const char *err = ddp_buf_str(&p.err);
    TH_ASSERT(&p, th_status(&p) == 3);
    TH_ASSERT(&p, strstr(err, "error: unable to start worker local rank ") != NULL);
    TH_ASSERT(&p,
              strstr(err, "Too many open files (this process is out of file descriptors") != NULL);
    TH_ASSERT(&p, strstr(err, "the limit here is 40, its hard limit 40: raise it with ulimit -n") !=
                      NULL);
    th_cleanup(&p);
}

/* A worker that dumps core: the error line says where the core went (here core_pattern
 * is a plain name: the working directory's file). Where this machine keeps no cores
 * (hard limit 0, or a core_pattern handed to a program), only the rest is checked. The
 * worker raises its own soft limit: an ASan launcher has set its own to 0. */
static void test_core_dump_is_said(void **state)
{
    char *dir = th_tmpdir(), pattern[128] = "", want[700];
    FILE *f = fopen("/proc/sys/kernel/core_pattern", "r");
    if (f != NULL && fgets(pattern, sizeof pattern, f) == NULL)
        pattern[0] = '\0';
    if (f != NULL)
        fclose(f);
    pattern[strcspn(pattern, "\n")] = '\0';
    struct rlimit core;
    bool plain = getrlimit(RLIMIT_CORE, &core) == 0 && core.rlim_max != 0 && pattern[0] != '\0' &&
                 pattern[0] != '|' && strchr(pattern, '%') == NULL && pattern[0] != '/';
    const char *argv[] = {"/bin/sh",
                          "-c",
                          "ulimit -c unlimited 2>/dev/null; cd \"$0\" && "
                          "exec \"$@\"",
                          dir,
                          th_launcher(),
                          "--nproc-per-node=1",
                          "--no-python",
                          "/bin/sh",
                          "-c",
                          "ulimit -c \"$(ulimit -H -c)\" 2>/dev/null; kill -SEGV $$$$",
                          NULL};
    th_proc_t p;
    th_run(&p, argv, NULL, 60);
    const char *err = ddp_buf_str(&p.err);
    TH_ASSERT(&p, th_status(&p) == 1);
    TH_ASSERT(&p, strstr(err, ") was killed by SIGSEGV") != NULL);
    snprintf(want, sizeof want, "was killed by SIGSEGV (core dumped: %s/%s", dir, pattern);
    printf("core_pattern '%s': %s\n", pattern, plain ? "checked" : "not checked");
    TH_ASSERT(&p, !plain || strstr(err, want) != NULL);
    th_cleanup(&p);
    th_rmtree(dir);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        TH_TEST(test_every_exit_code),
        TH_TEST(test_fatal_signals),
        TH_TEST(test_root_cause_is_the_failed_rank),
        TH_TEST(test_error_files_reach_the_report),
        TH_TEST(test_last_line_shown_escaped),
        TH_TEST(test_error_file_that_is_no_file),
        TH_TEST(test_out_of_memory_is_named),
        TH_TEST(test_waiting_for_the_rest_is_said),
        TH_TEST(test_finished_first_is_said),
        TH_TEST(test_stopped_ranks_told_apart),
        TH_TEST(test_out_of_descriptors_is_said),
        TH_TEST(test_core_dump_is_said),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
