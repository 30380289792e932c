/* Integration tests: health checks as a hostile check or file system would have them.
 * Nothing a check does reaches the launcher: its processes (its group, its background
 * jobs, what it started in sessions of its own) end with it, even when ddp-launch is
 * SIGKILLed; its end is its exit; a path on a hung file system (a FUSE mount that never
 * answers, tests/helpers/hung_mount.c) is bounded by the timeout; a signal during a check
 * acts at once, on one node or several; a hot spare is checked again before it takes a
 * place. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "harness.h"
#include "io.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static const char *out(const th_proc_t *p)
{
    return ddp_buf_str(&p->out);
}

static const char *err(const th_proc_t *p)
{
    return ddp_buf_str(&p->err);
}

/* Waits until the file at `path` exists (a check's own mark that it runs). */
static bool wait_file(const char *path, double timeout)
{
    for (double deadline = th_now() + timeout; th_now() < deadline;) {
        if (access(path, F_OK) == 0)
            return true;
        nanosleep(&(struct timespec){.tv_nsec = 10 * 1000 * 1000}, NULL);
    }
    return false;
}

/* The pid a check wrote into `path`, or -1. */
static pid_t pid_in(const char *path)
{
    char *text = NULL;
    size_t len = 0;
    pid_t pid = -1;
    if (ddp_read_file(path, 64, &text, &len) == 0 && len > 0)
        pid = (pid_t)atoi(text);
    free(text);
    return pid;
}

/* SIGKILL of ddp-launch during --health-check: the check's shell, its background job and
 * a job it started in a session of its own all end (they ran on for good). */
static void test_sigkill_during_check_ends_its_processes(void **state)
{
    char *dir = th_tmpdir(), check[1600], ready[600];
    snprintf(check, sizeof check,
             "--health-check=echo $$ > '%s/sh'; sleep 301 & echo $! > '%s/bg'; "
             "setsid sleep 302 & echo $! > '%s/setsid'; : > '%s/ready'; wait",
             dir, dir, dir, dir);
    snprintf(ready, sizeof ready, "%s/ready", dir);
    const char *argv[] = {th_launcher(), check, "--no-python", "/bin/echo", "started", NULL};
    th_proc_t p;
    th_start(&p, argv, NULL);
    TH_ASSERT(&p, wait_file(ready, 30));
    kill(p.pid, SIGKILL);
    TH_ASSERT(&p, th_wait_exit(&p, 10));
    static const char *const names[] = {"sh", "bg", "setsid"};
    for (size_t i = 0; i < 3; i++) {
        char path[700];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        pid_t pid = pid_in(path);
        TH_ASSERT(&p, pid > 0);
        if (!th_wait_gone(pid, 10)) {
            kill(pid, SIGKILL);
            th_dump(&p);
            fail_msg("the check's %s (pid %d) outlived a SIGKILLed ddp-launch", names[i], (int)pid);
        }
    }
    TH_ASSERT(&p, strstr(out(&p), "started") == NULL);
    th_cleanup(&p);
    th_rmtree(dir);
    free(dir);
}

/* A check's end is its exit: a check that exits 0 is healthy at once, though a job it left
 * in its process group ("sleep &") or in a session of its own (setsid, holding the
 * check's stderr) still runs; those end with the check, before any worker starts (a
 * setsid job made the node unhealthy after the whole timeout, and outlived the job). */
static void test_check_ends_at_its_exit_with_what_it_left(void **state)
{
    char *dir = th_tmpdir(), check[1200], script[1200];
    snprintf(check, sizeof check,
             "--health-check=sleep 202 & echo $! > '%s/bg'; setsid sleep 203 & "
             "echo $! > '%s/setsid'; exit 0",
             dir, dir);
    snprintf(script, sizeof script,
             "for f in bg setsid; do kill -0 $(cat '%s/'$f) 2>/dev/null && echo $f alive || "
             "echo $f gone; done",
             dir);
    const char *argv[] = {th_launcher(), check,     "--health-check-timeout=20",
                          "--no-python", "/bin/sh", "-c",
                          script,        NULL};
    th_proc_t p;
    double started = th_now();
    th_run(&p, argv, NULL, 60);
    TH_ASSERT(&p, th_status(&p) == 0);
    TH_ASSERT(&p, th_now() - started < 10); /* not the timeout */
    TH_ASSERT(&p, strstr(out(&p), "bg gone") != NULL);
    TH_ASSERT(&p, strstr(out(&p), "setsid gone") != NULL);
    th_cleanup(&p);
    for (const char *name = "bg"; name != NULL; name = strcmp(name, "bg") == 0 ? "setsid" : NULL) {
        char path[700];
        snprintf(path, sizeof path, "%s/%s", dir, name);
        pid_t pid = pid_in(path);
        if (pid > 0)
            kill(pid, SIGKILL); /* (a failed run's, by pid) */
    }
    th_rmtree(dir);
    free(dir);
}

/* SIGTERM or Ctrl-C during a one-node job's health check: ddp-launch ends at once with
 * 128+N, the check ends with it, and no worker starts (the signal was acted on only once
 * the check ended, and the workers were started anyway). */
static void test_signal_during_check_acts_at_once(void **state)
{
    static const int sigs[] = {SIGTERM, SIGINT};
    for (size_t i = 0; i < 2; i++) {
        char *dir = th_tmpdir(), check[800], ready[600];
        snprintf(check, sizeof check, "--health-check=: > '%s/ready'; exec sleep 30", dir);
        snprintf(ready, sizeof ready, "%s/ready", dir);
        const char *argv[] = {th_launcher(), check, "--no-python", "/bin/echo", "started", NULL};
        th_proc_t p;
        th_start(&p, argv, NULL);
        TH_ASSERT(&p, wait_file(ready, 30));
        double sent = th_now();
        kill(p.pid, sigs[i]);
        TH_ASSERT(&p, th_wait_exit(&p, 10));
        TH_ASSERT(&p, th_now() - sent < 3);
        TH_ASSERT(&p, th_status(&p) == 128 + sigs[i]);
        TH_ASSERT(&p, strstr(out(&p), "started") == NULL);
        TH_ASSERT(&p,
                  strstr(err(&p), "during the health check: ending; no worker started") != NULL);
        th_cleanup(&p);
        th_rmtree(dir);
        free(dir);
    }
}

/* A launcher of a static job of two nodes on this machine; `flags` one argument or NULL. */
static void start_static(th_proc_t *p, int port, const char *run_id, int rank, const char *flags,
                         const char *const *env)
{
    char nnodes[32], node_rank[32], master_port[32], id[128];
    snprintf(nnodes, sizeof nnodes, "--nnodes=2");
    snprintf(node_rank, sizeof node_rank, "--node-rank=%d", rank);
    snprintf(master_port, sizeof master_port, "--master-port=%d", port);
    snprintf(id, sizeof id, "--rdzv-id=%s", run_id);
    const char *argv[12] = {th_launcher(), nnodes, node_rank, master_port, id};
    int n = 5;
    if (flags != NULL)
        argv[n++] = flags;
    argv[n++] = "--no-python";
    argv[n++] = "/bin/sh";
    argv[n++] = "-c";
    argv[n++] = "echo RANK=$RANK";
    argv[n] = NULL;
    th_start(p, argv, env);
}

/* Ctrl-C on node 1 of a static job during its health check before the join (on the
 * rendezvous thread): node 1 ends at once with 130 and the job ends with it on node 0; no
 * worker starts. */
static void test_signal_during_check_before_join(void **state)
{
    char *dir = th_tmpdir(), check[800], ready[600], run_id[64];
    int port = th_free_port();
    snprintf(run_id, sizeof run_id, "health-%d-%d", (int)getpid(), port);
    snprintf(check, sizeof check, "--health-check=: > '%s/ready'; exec sleep 30", dir);
    snprintf(ready, sizeof ready, "%s/ready", dir);
    th_proc_t n0, n1;
    start_static(&n0, port, run_id, 0, NULL, NULL);
    start_static(&n1, port, run_id, 1, check, NULL);
    TH_ASSERT(&n1, wait_file(ready, 30));
    double sent = th_now();
    kill(n1.pid, SIGINT);
    TH_ASSERT(&n1, th_wait_exit(&n1, 10));
    TH_ASSERT(&n1, th_now() - sent < 3);
    TH_ASSERT(&n1, th_status(&n1) == 130);
    TH_ASSERT(&n0, th_wait_exit(&n0, 20));
    TH_ASSERT(&n0, th_status(&n0) == 130);
    TH_ASSERT(&n0, strstr(out(&n0), "RANK=") == NULL);
    TH_ASSERT(&n1, strstr(out(&n1), "RANK=") == NULL);
    th_cleanup(&n0);
    th_cleanup(&n1);
    th_rmtree(dir);
    free(dir);
}

/* A node whose health check takes longer than the first note of its wait (5 s) joins the
 * round its join completes: it says nothing of waiting for the next round (it read the
 * status of the round it was joining, formed with it, as a round it was waiting behind). */
static void test_slow_check_joins_without_a_wrong_note(void **state)
{
    char run_id[64];
    int port = th_free_port();
    snprintf(run_id, sizeof run_id, "health-%d-%d", (int)getpid(), port);
    const char *info[] = {"DDP_LAUNCH_LOG_LEVEL=info", NULL};
    th_proc_t n0, n1;
    start_static(&n0, port, run_id, 0, NULL, NULL);
    start_static(&n1, port, run_id, 1, "--health-check=sleep 5.5", info);
    TH_ASSERT(&n0, th_wait_exit(&n0, 60) && th_status(&n0) == 0);
    TH_ASSERT(&n1, th_wait_exit(&n1, 60) && th_status(&n1) == 0);
    TH_ASSERT(&n1, strstr(out(&n1), "RANK=1") != NULL);
    TH_ASSERT(&n1, strstr(err(&n1), "health check before joining passed") != NULL);
    TH_ASSERT(&n1, strstr(err(&n1), "waits to join the next round") == NULL);
    th_cleanup(&n0);
    th_cleanup(&n1);
}

/* --health-check-timeout=0.1, the least: the endless check is ended each time, well
 * within a second (a timeout shorter than the check's own setpgid left it running: the
 * launcher then waited for the whole command). */
static void test_least_timeout_ends_the_check(void **state)
{
    for (int i = 0; i < 3; i++) {
        const char *argv[] = {th_launcher(),
                              "--health-check=exec sleep 30",
                              "--health-check-timeout=0.1",
                              "--no-python",
                              "/bin/echo",
                              "started",
                              NULL};
        th_proc_t p;
        double started = th_now();
        th_run(&p, argv, NULL, 60);
        TH_ASSERT(&p, th_status(&p) == 5);
        TH_ASSERT(&p, th_now() - started < 5);
        /* (On a loaded machine the check may not even have begun: said so.) */
        TH_ASSERT(&p, strstr(err(&p), "did not finish within 0.1 s") != NULL ||
                          strstr(err(&p), "did not begin within 0.1 s") != NULL);
        TH_ASSERT(&p, strstr(out(&p), "started") == NULL);
        th_cleanup(&p);
    }
}

/* Whether process `pid`, one of its threads or a descendant of its (the launcher under the
 * hung mount's helper, its checker) waits in the kernel uninterruptibly (state D: on the
 * hung mount); `depth` generations are looked at. */
static bool waits_in_kernel(pid_t pid, int depth)
{
    char path[96];
    if (th_proc_state(pid) == 'D')
        return true;
    snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
    DIR *tasks = opendir(path);
    struct dirent *task;
    bool waits = false;
    while (!waits && tasks != NULL && (task = readdir(tasks)) != NULL) {
        if (task->d_name[0] < '0' || task->d_name[0] > '9')
            continue;
        char *text = NULL;
        size_t len = 0;
        const char *after;
        snprintf(path, sizeof path, "/proc/%d/task/%.16s/stat", (int)pid, task->d_name);
        if (ddp_read_file(path, 4096, &text, &len) == 0 && (after = strrchr(text, ')')) != NULL)
            waits = after[2] == 'D';
        free(text);
        text = NULL;
        snprintf(path, sizeof path, "/proc/%d/task/%.16s/children", (int)pid, task->d_name);
        if (!waits && depth > 0 && ddp_read_file(path, 4096, &text, &len) == 0)
            for (char *c = text, *end; *c != '\0' && !waits; c = end) {
                long child = strtol(c, &end, 10);
                if (end == c)
                    break;
                waits = waits_in_kernel((pid_t)child, depth - 1);
            }
        free(text);
    }
    if (tasks != NULL)
        closedir(tasks);
    return waits;
}

/* The launcher with `flags` (NULL-terminated) and the program /bin/echo started, beside a
 * FUSE mount that never answers at `dir` (tests/helpers/hung_mount.c: in a mount namespace
 * of its own, which takes the mount with it whatever happens to the test); false (the test
 * then skips) where no FUSE mount can be made. */
static bool start_beside_hung_mount(th_proc_t *p, const char *dir, const char *const *flags)
{
    const char *argv[16] = {getenv("DDP_TEST_HUNG_MOUNT"), dir, th_launcher()};
    int n = 3;
    for (int i = 0; flags[i] != NULL && n < 12; i++)
        argv[n++] = flags[i];
    argv[n++] = "--no-python";
    argv[n++] = "/bin/echo";
    argv[n++] = "started";
    argv[n] = NULL;
    th_start(p, argv, NULL);
    if (th_wait_exit(p, 0.3) && th_status(p) == 77) {
        printf("skipped: %s", err(p));
        th_cleanup(p);
        return false;
    }
    return true;
}

/* --health-check-path on a file system that never answers (a dead NFS server): the node is
 * unhealthy once the timeout has passed, naming the path; and a SIGTERM while the check
 * waits there ends ddp-launch at once (it sat in the kernel, deaf to signals, for good). */
static void test_hung_path_is_bounded(void **state)
{
    char *dir = th_tmpdir(), hung[700], flag[800];
    snprintf(hung, sizeof hung, "%s/hung", dir);
    assert_int_equal(mkdir(hung, 0700), 0);
    snprintf(flag, sizeof flag, "--health-check-path=/tmp,%s/data", hung);
    const char *bounded[] = {flag, "--health-check-timeout=1", NULL};
    th_proc_t p;
    double started = th_now();
    if (!start_beside_hung_mount(&p, hung, bounded))
        goto out;
    TH_ASSERT(&p, th_wait_exit(&p, 15));
    TH_ASSERT(&p, th_now() - started < 8);
    TH_ASSERT(&p, th_status(&p) == 5);
    char said[900];
    snprintf(said, sizeof said, "--health-check-path: %s/data did not answer within 1 s", hung);
    TH_ASSERT(&p, strstr(err(&p), said) != NULL);
    TH_ASSERT(&p, strstr(out(&p), "started") == NULL);
    th_cleanup(&p);

    /* A signal while the check waits on the mount (passed on by the mount's helper). */
    snprintf(flag, sizeof flag, "--health-check-path=%s", hung);
    const char *waiting[] = {flag, NULL};
    if (!start_beside_hung_mount(&p, hung, waiting))
        goto out;
    bool blocked = false;
    for (double deadline = th_now() + 20; !blocked && th_now() < deadline;) {
        blocked = waits_in_kernel(p.pid, 3);
        if (!blocked)
            nanosleep(&(struct timespec){.tv_nsec = 20 * 1000 * 1000}, NULL);
    }
    TH_ASSERT(&p, blocked);
    double sent = th_now();
    kill(p.pid, SIGTERM);
    TH_ASSERT(&p, th_wait_exit(&p, 10));
    TH_ASSERT(&p, th_now() - sent < 5);
    TH_ASSERT(&p, th_status(&p) == 128 + SIGTERM);
    TH_ASSERT(&p, strstr(out(&p), "started") == NULL);
    th_cleanup(&p);
out:
    th_rmtree(dir);
    free(dir);
}

/* A hot spare is checked again before it takes a place: its check passed when it joined,
 * fails once a lost node's place comes, and it leaves instead of starting its workers (it
 * was promoted unchecked), the store's host saying why (it left without a word). */
static void test_spare_checked_before_its_place(void **state)
{
    char *dir = th_tmpdir(), flags[600], check[800], broken[700];
    int port = th_free_port();
    snprintf(flags, sizeof flags,
             "--nnodes=2:2 --rdzv-backend=c10d --rdzv-endpoint=127.0.0.1:%d --master-port=%d "
             "--rdzv-id=spare-%d "
             "--rdzv-conf=last_call_timeout=1,join_timeout=60 --hot-spares=1",
             port, port, port);
    snprintf(broken, sizeof broken, "%s/broken", dir);
    snprintf(check, sizeof check, "--health-check=test ! -e '%s'", broken);
    const char *script = "echo \"RANK=$RANK\"; exec sleep 600";
    th_proc_t node[3];
    for (int i = 0; i < 3; i++) {
        const char *argv[16];
        char copy[1400], *save = NULL;
        int n = 0;
        snprintf(copy, sizeof copy, "%s", flags);
        argv[n++] = th_launcher();
        for (char *tok = strtok_r(copy, " ", &save); tok != NULL; tok = strtok_r(NULL, " ", &save))
            argv[n++] = tok;
        if (i == 2)
            argv[n++] = check;
        argv[n++] = "--no-python";
        argv[n++] = "/bin/sh";
        argv[n++] = "-c";
        argv[n++] = script;
        argv[n] = NULL;
        const char *debug[] = {"DDP_LAUNCH_LOG_LEVEL=debug", NULL};
        th_start(&node[i], argv, i == 2 ? debug : NULL);
        if (i == 0)
            TH_ASSERT(&node[0], th_wait_output(&node[0], 2, "hosting its store", 1, 30));
        if (i == 1)
            for (int k = 0; k < 2; k++)
                TH_ASSERT(&node[k], th_wait_output(&node[k], 1, "RANK=", 1, 30));
    }
    th_proc_t *spare = &node[2];
    TH_ASSERT(spare, th_wait_output(spare, 2, "waiting for a place in a round", 1, 30));
    TH_ASSERT(spare, strstr(err(spare), "health check before joining passed") != NULL);
    TH_ASSERT(spare, th_touch(broken));
    kill(node[1].pid, SIGKILL); /* (not the store's host: the job would end with it) */
    TH_ASSERT(spare, th_wait_exit(spare, 30));
    TH_ASSERT(spare, th_status(spare) == 5);
    TH_ASSERT(spare, strstr(err(spare), "this node failed its health check") != NULL);
    TH_ASSERT(spare, strstr(out(spare), "RANK=") == NULL);
    /* The store's host says why it left (it said only that a launcher was lost). */
    TH_ASSERT(&node[0], th_wait_output(&node[0], 2,
                                       "leaves the job: it failed its health check "
                                       "before taking its place in round",
                                       1, 30));
    kill(node[0].pid, SIGTERM);
    for (int i = 0; i < 3; i++) {
        TH_ASSERT(&node[i], th_wait_exit(&node[i], 30));
        th_cleanup(&node[i]);
    }
    th_rmtree(dir);
    free(dir);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        TH_TEST(test_sigkill_during_check_ends_its_processes),
        TH_TEST(test_check_ends_at_its_exit_with_what_it_left),
        TH_TEST(test_signal_during_check_acts_at_once),
        TH_TEST(test_signal_during_check_before_join),
        TH_TEST(test_slow_check_joins_without_a_wrong_note),
        TH_TEST(test_least_timeout_ends_the_check),
        TH_TEST(test_hung_path_is_bounded),
        TH_TEST(test_spare_checked_before_its_place),
    };
    if (argc > 1)
        cmocka_set_test_filter(argv[1]);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
