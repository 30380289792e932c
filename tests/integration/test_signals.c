/* Integration tests: signals to ddp-launch reach the workers, the grace period ends in
 * SIGKILL, no worker or grandchild outlives the launcher, even a SIGKILLed one, and
 * Ctrl-Z stops the workers with it. */
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
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdbool.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Reads the pids printed by "ready <rank> <pid>" or "pids <pid> <child>" lines. */
static int collect_pids(const char *text, const char *word, pid_t *pids, int max)
{
    int n = 0;
    size_t len = strlen(word);
    for (const char *at = strstr(text, word); at != NULL && n < max; at = strstr(at + len, word)) {
        int a, b;
        if (sscanf(at + len, " %d %d", &a, &b) != 2)
            continue;
        if (strcmp(word, "ready") == 0) {
            pids[n++] = b;
        } else {
            pids[n++] = a;
            if (n < max)
                pids[n++] = b;
        }
    }
    return n;
}

static void expect_all_gone(th_proc_t *p, const pid_t *pids, int n)
{
    for (int i = 0; i < n; i++) {
        if (!th_wait_gone(pids[i], 20)) {
            th_dump(p);
            kill(pids[i], SIGKILL);
            fail_msg("process %d outlived ddp-launch", (int)pids[i]);
        }
    }
}

static void test_sigterm_is_forwarded(void **state)
{
    const char *argv[] = {
        th_launcher(), "--nproc-per-node=2", "--no-python", th_worker(), "catch", "SIGTERM", NULL};
    th_proc_t p;
    th_start(&p, argv, NULL);
    TH_ASSERT(&p, th_wait_output(&p, 1, "ready", 2, 30));
    kill(p.pid, SIGTERM);
    TH_ASSERT(&p, th_wait_exit(&p, 30));
    TH_ASSERT(&p, th_status(&p) == 128 + SIGTERM);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.out), "caught SIGTERM 0\n") != NULL);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.out), "caught SIGTERM 1\n") != NULL);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "received SIGTERM: forwarding it") != NULL);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "SIGKILL to their") == NULL);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "FAILED") == NULL);
    th_cleanup(&p);
}

static void test_grace_then_sigkill(void **state)
{
    const char *argv[] = {th_launcher(),
                          "--nproc-per-node=2",
                          "--shutdown-timeout=1",
                          "--no-python",
                          th_worker(),
                          "wait",
                          "ignore-term",
                          NULL};
    th_proc_t p;
    pid_t pids[2];
    th_start(&p, argv, NULL);
    TH_ASSERT(&p, th_wait_output(&p, 1, "ready", 2, 30));
    TH_ASSERT(&p, collect_pids(ddp_buf_str(&p.out), "ready", pids, 2) == 2);
    double sent = th_now();
    kill(p.pid, SIGTERM);
    TH_ASSERT(&p, th_wait_exit(&p, 30));
    double took = th_now() - sent;
    TH_ASSERT(&p, th_status(&p) == 128 + SIGTERM);
    /* Each step is logged: the forward, the stop, the SIGKILL after the grace. */
    const char *err = ddp_buf_str(&p.err);
    TH_ASSERT(&p, strstr(err, "received SIGTERM") != NULL);
    TH_ASSERT(&p, strstr(err, "stopping 2 worker(s): sending SIGTERM") != NULL);
    TH_ASSERT(&p, strstr(err, "still running 1 s after the stop signal") != NULL);
    TH_ASSERT(&p, strstr(err, "sending SIGKILL to their process groups") != NULL);
    TH_ASSERT(&p, took >= 0.9); /* the grace was given */
    expect_all_gone(&p, pids, 2);
    th_cleanup(&p);
}

/* torchrun's TORCH_ELASTIC_SHUTDOWN_TIMEOUT is the grace where --shutdown-timeout (or its
 * PET_) is not given; the flag wins over it; a bad value is a usage error naming it. */
static void test_grace_from_torch_elastic_variable(void **state)
{
    static const struct {
        const char *flag, *grace;
    } cases[] = {{NULL, "1"}, {"--shutdown-timeout=2", "2"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *argv[8] = {th_launcher()};
        int n = 1;
        if (cases[i].flag != NULL)
            argv[n++] = cases[i].flag;
        const char *tail[] = {"--no-python", th_worker(), "wait", "ignore-term", NULL};
        for (int k = 0; tail[k] != NULL; k++)
            argv[n++] = tail[k];
        argv[n] = NULL;
        const char *env[] = {"TORCH_ELASTIC_SHUTDOWN_TIMEOUT=1", NULL};
        th_proc_t p;
        th_start(&p, argv, env);
        TH_ASSERT(&p, th_wait_output(&p, 1, "ready", 1, 30));
        kill(p.pid, SIGTERM);
        TH_ASSERT(&p, th_wait_exit(&p, 30));
        TH_ASSERT(&p, th_status(&p) == 128 + SIGTERM);
        char said[96];
        snprintf(said, sizeof said, "still running %s s after the stop signal", cases[i].grace);
        TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), said) != NULL);
        th_cleanup(&p);
    }
    const char *argv[] = {th_launcher(), "--no-python", "/bin/true", NULL};
    const char *bad[] = {"TORCH_ELASTIC_SHUTDOWN_TIMEOUT=soon", NULL};
    th_proc_t p;
    th_run(&p, argv, bad, 30);
    TH_ASSERT(&p, th_status(&p) == 2);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "TORCH_ELASTIC_SHUTDOWN_TIMEOUT: invalid value "
                                              "'soon'") != NULL);
    th_cleanup(&p);
}

static void test_sigusr1_can_be_forwarded(void **state)
{
    const char *argv[] = {th_launcher(), "--signals-to-handle=SIGTERM,SIGUSR1",
                          "--no-python", th_worker(),
                          "catch",       "SIGUSR1",
                          NULL};
    th_proc_t p;
    th_start(&p, argv, NULL);
    TH_ASSERT(&p, th_wait_output(&p, 1, "ready", 1, 30));
    kill(p.pid, SIGUSR1);
    TH_ASSERT(&p, th_wait_exit(&p, 30));
    TH_ASSERT(&p, th_status(&p) == 128 + SIGUSR1);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.out), "caught SIGUSR1 0\n") != NULL);
    th_cleanup(&p);
}

/* A signal that is not forwarded but would end ddp-launch outright (SIGUSR1, SIGALRM)
 * stops the workers with SIGTERM and ends with 128+N and its message, instead of
 * killing the launcher. */
/* --forward-signals=SIGUSR1 (Slurm's --signal=USR1@60): each worker gets it, handles it
 * (a checkpoint) and goes on; nothing is stopped and the job succeeds. */
static void test_forwarded_signal_stops_nothing(void **state)
{
    char *dir = th_tmpdir(), mark[600];
    snprintf(mark, sizeof mark, "%s/go", dir);
    /* Each worker loops (up to 30 s) until the test makes the file $0 names. */
    const char *argv[] = {th_launcher(),
                          "--nproc-per-node=2",
                          "--forward-signals=SIGUSR1",
                          "--no-python",
                          "/bin/sh",
                          "-c",
                          "trap 'echo checkpoint $RANK' USR1; echo ready; i=0; "
                          "while [ $i -lt 600 ] && [ ! -f \"$0\" ]; do sleep 0.05; i=$((i+1)); "
                          "done; echo went on $RANK",
                          mark,
                          NULL};
    th_proc_t p;
    th_start(&p, argv, NULL);
    TH_ASSERT(&p, th_wait_output(&p, 1, "ready", 2, 30));
    TH_ASSERT(&p, kill(p.pid, SIGUSR1) == 0);
    TH_ASSERT(&p, th_wait_output(&p, 1, "checkpoint ", 2, 30));
    FILE *f = fopen(mark, "w");
    TH_ASSERT(&p, f != NULL);
    fclose(f);
    TH_ASSERT(&p, th_wait_exit(&p, 30));
    TH_ASSERT(&p, th_status(&p) == 0);
    TH_ASSERT(&p, th_count(ddp_buf_str(&p.out), "went on ") == 2);
    TH_ASSERT(&p,
              strstr(ddp_buf_str(&p.err), "passing it to the 2 worker(s), which go on") != NULL);
    th_cleanup(&p);
    th_rmtree(dir);
    free(dir);
}

static void test_unforwarded_signal_stops_cleanly(void **state)
{
    static const int sigs[] = {SIGUSR1, SIGALRM};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
        const char *argv[] = {
            th_launcher(), "--nproc-per-node=2", "--no-python", th_worker(), "catch", "SIGTERM",
            NULL};
        th_proc_t p;
        th_start(&p, argv, NULL);
        TH_ASSERT(&p, th_wait_output(&p, 1, "ready", 2, 30));
        kill(p.pid, sigs[i]);
        TH_ASSERT(&p, th_wait_exit(&p, 30));
        TH_ASSERT(&p, th_status(&p) == 128 + sigs[i]);
        TH_ASSERT(&p, strstr(ddp_buf_str(&p.out), "caught SIGTERM 0\n") != NULL);
        TH_ASSERT(&p, strstr(ddp_buf_str(&p.out), "caught SIGTERM 1\n") != NULL);
        TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "which --signals-to-handle does not forward: "
                                                  "stopping the 2 worker(s) with SIGTERM") != NULL);
        th_cleanup(&p);
    }
}

static void test_second_signal_kills_at_once(void **state)
{
    const char *argv[] = {
        th_launcher(), "--shutdown-timeout=600", "--no-python", th_worker(), "wait", "ignore-term",
        NULL};
    th_proc_t p;
    th_start(&p, argv, NULL);
    TH_ASSERT(&p, th_wait_output(&p, 1, "ready", 1, 30));
    kill(p.pid, SIGTERM);
    TH_ASSERT(&p, th_wait_output(&p, 2, "stopping 1 worker(s)", 1, 30));
    /* A worker that does not exit is said after 2 s, with what a second signal does. */
    TH_ASSERT(&p, th_wait_output(&p, 2,
                                 "1 worker(s) have not exited yet (local rank 0): SIGKILL in 598 "
                                 "s, or now on a second signal (SIGTERM again: a second Ctrl-C)",
                                 1, 30));
    kill(p.pid, SIGTERM);
    /* Well before the 600 s grace. */
    TH_ASSERT(&p, th_wait_exit(&p, 30));
    TH_ASSERT(&p, th_status(&p) == 128 + SIGTERM);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "received SIGTERM again: sending SIGKILL") != NULL);
    th_cleanup(&p);
}

/* Whether something listens on 127.0.0.1:port. */
static bool listening(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bool yes = fd >= 0 && connect(fd, (struct sockaddr *)&addr, sizeof addr) == 0;
    if (fd >= 0)
        close(fd);
    return yes;
}

/* Whether the process has ended, without reading its output. */
static bool ended(const th_proc_t *p)
{
    struct pollfd fd = {.fd = p->pidfd, .events = POLLIN};
    return poll(&fd, 1, 0) == 1;
}

/* Lines of `text` that begin with "[default0]:" (a plain loop: under ASan, strstr over a
 * megabyte thousands of times is quadratic). */
static int prefixed_lines(const char *text)
{
    static const char prefix[] = "[default0]:";
    int n = 0;
    for (const char *line = text; *line != '\0';) {
        n += strncmp(line, prefix, sizeof prefix - 1) == 0;
        const char *nl = strchr(line, '\n');
        if (nl == NULL)
            break;
        line = nl + 1;
    }
    return n;
}

/* After the job's end, the launcher still writes what the console has not taken and the
 * report: a signal then (Slurm signals every node's launcher, one may have ended for
 * another's news of it) must not kill it and lose them; a second one of it does. Here
 * the console (this test's pipe, unread) holds the launcher in its last writes: the
 * store's port closed says the job has ended and its signal handlers are gone. */
static void test_signal_after_the_end(void **state)
{
    for (int signals = 1; signals <= 2; signals++) {
        char port[32];
        snprintf(port, sizeof port, "--master-port=%d", th_free_port());
        const char *argv[] = {th_launcher(),
                              port,
                              "--tee=3",
                              "--no-python",
                              "/bin/sh",
                              "-c",
                              "echo ready; seq 1 50000; echo last line",
                              NULL};
        th_proc_t p;
        th_start(&p, argv, NULL);
        TH_ASSERT(&p, th_wait_output(&p, 1, "ready", 1, 30));
        int port_number = atoi(strchr(port, '=') + 1);
        double deadline = th_now() + 30;
        while (listening(port_number) && th_now() < deadline)
            usleep(20 * 1000);
        TH_ASSERT(&p, !listening(port_number));
        TH_ASSERT(&p, !ended(&p)); /* held by the console */
        for (int i = 0; i < signals; i++) {
            TH_ASSERT(&p, kill(p.pid, SIGUSR1) == 0);
            usleep(200 * 1000);
        }
        TH_ASSERT(&p, th_wait_exit(&p, 60));
        if (signals == 1) {
            TH_ASSERT(&p, th_status(&p) == 0);
            const char *out = ddp_buf_str(&p.out);
            TH_ASSERT(&p, strstr(out, "[default0]:50000\n[default0]:last line\n") != NULL);
            TH_ASSERT(&p, prefixed_lines(out) == 50002);
        } else {
            TH_ASSERT(&p, th_status(&p) == 128 + SIGUSR1);
        }
        th_cleanup(&p);
    }
}

static void test_sigkill_leaves_no_orphans(void **state)
{
    const char *argv[] = {th_launcher(), "--nproc-per-node=3", "--no-python",
                          th_worker(),   "grandchild",         NULL};
    th_proc_t p;
    pid_t pids[6];
    th_start(&p, argv, NULL);
    TH_ASSERT(&p, th_wait_output(&p, 1, "pids", 3, 30));
    TH_ASSERT(&p, collect_pids(ddp_buf_str(&p.out), "pids", pids, 6) == 6);
    kill(p.pid, SIGKILL);
    TH_ASSERT(&p, th_wait_exit(&p, 30));
    /* Workers (parent-death signal) and their children (the guard) all go. */
    expect_all_gone(&p, pids, 6);
    th_cleanup(&p);
}

/* Entries of a directory, "." and ".." aside. */
static int entries(const char *path)
{
    DIR *dir = opendir(path);
    struct dirent *entry;
    int n = 0;
    assert_non_null(dir);
    while ((entry = readdir(dir)) != NULL)
        n += strcmp(entry->d_name, ".") != 0 && strcmp(entry->d_name, "..") != 0;
    closedir(dir);
    return n;
}

/* ddp-launch SIGKILLed 0-10 ms after it starts, while it forks its four workers, each of
 * which forks a child of its own at once: no process of the job survives (the guard
 * knows each worker's group before the worker's program runs), and no empty log
 * directory is left in TMPDIR (the guard knows of it before it is made). 30 trials here,
 * DDP_TEST_ORPHAN_TRIALS in the stress suite (300). Each trial's processes carry a mark
 * of their own in the environment, by which the survivors are found. */
static void test_early_sigkill_leaves_no_orphans(void **state)
{
    const char *argv[] = {th_launcher(), "--nproc-per-node=4",           "--no-python", "/bin/sh",
                          "-c",          "sleep 1000 & exec sleep 1000", NULL};
    const char *text = getenv("DDP_TEST_ORPHAN_TRIALS");
    int trials = text != NULL && atoi(text) > 0 ? atoi(text) : 30, orphans = 0, dirs = 0;
    const char *tmpdir = getenv("TMPDIR");
    for (int trial = 0; trial < trials; trial++) {
        char mark[64];
        snprintf(mark, sizeof mark, "DDP_TEST_TRIAL=%d-%d", (int)getpid(), trial);
        const char *env[] = {mark, NULL};
        th_proc_t p;
        th_start(&p, argv, env);
        usleep((useconds_t)((trial * 37 % 100) * 100)); /* 0 to 9.9 ms, spread */
        kill(p.pid, SIGKILL);
        TH_ASSERT(&p, th_wait_exit(&p, 30));
        int left = th_end_marked(mark, 5);
        if (left > 0)
            fprintf(stderr, "trial %d (SIGKILL after %.1f ms): %d process(es) survived\n", trial,
                    (trial * 37 % 100) / 10.0, left);
        orphans += left;
        if (entries(tmpdir) > 0) {
            fprintf(stderr, "trial %d: a log directory was left in TMPDIR\n", trial);
            dirs++;
            th_rmtree(tmpdir);
            assert_int_equal(mkdir(tmpdir, 0700), 0);
        }
        th_cleanup(&p);
    }
    printf("%d trials: %d orphans, %d log directories left\n", trials, orphans, dirs);
    assert_int_equal(orphans, 0);
    assert_int_equal(dirs, 0);
}

static void test_stop_takes_grandchildren(void **state)
{
    const char *argv[] = {th_launcher(), "--nproc-per-node=2", "--no-python",
                          th_worker(),   "grandchild",         NULL};
    th_proc_t p;
    pid_t pids[4];
    th_start(&p, argv, NULL);
    TH_ASSERT(&p, th_wait_output(&p, 1, "pids", 2, 30));
    TH_ASSERT(&p, collect_pids(ddp_buf_str(&p.out), "pids", pids, 4) == 4);
    kill(p.pid, SIGINT);
    TH_ASSERT(&p, th_wait_exit(&p, 30));
    TH_ASSERT(&p, th_status(&p) == 128 + SIGINT);
    expect_all_gone(&p, pids, 4);
    th_cleanup(&p);
}

static void test_leftover_children_are_killed(void **state)
{
    /* The worker exits 0 but leaves a child in its process group: SIGTERM ends it
     * within the grace, quietly; one that ignores SIGTERM gets SIGKILL after it, said. */
    const char *argv[] = {th_launcher(), "--no-python", th_worker(), "leave-child", NULL, NULL};
    for (int stubborn = 0; stubborn <= 1; stubborn++) {
        th_proc_t p;
        pid_t pids[2];
        argv[4] = stubborn ? "stubborn" : NULL;
        double started = th_now();
        th_run(&p, argv, NULL, 60);
        TH_ASSERT(&p, th_status(&p) == 0);
        TH_ASSERT(&p, collect_pids(ddp_buf_str(&p.out), "pids", pids, 2) == 2);
        TH_ASSERT(&p, (strstr(ddp_buf_str(&p.err),
                              "left processes behind in its process group "
                              "that did not end within 2 s of SIGTERM") != NULL) == stubborn);
        TH_ASSERT(&p, stubborn || th_now() - started < 1.5); /* no grace waited out */
        expect_all_gone(&p, pids + 1, 1);
        th_cleanup(&p);
    }
    /* Ctrl-C during the grace: the job ends at once (130), the child killed. */
    argv[4] = "stubborn";
    th_proc_t p;
    pid_t pids[2];
    th_start(&p, argv, NULL);
    TH_ASSERT(&p, th_wait_output(&p, 1, "pids", 1, 30));
    TH_ASSERT(&p, collect_pids(ddp_buf_str(&p.out), "pids", pids, 2) == 2);
    TH_ASSERT(&p, th_wait_gone(pids[0], 30)); /* the worker has ended: the grace runs */
    double signalled = th_now();
    TH_ASSERT(&p, kill(p.pid, SIGINT) == 0);
    TH_ASSERT(&p, th_wait_exit(&p, 30));
    TH_ASSERT(&p, th_status(&p) == 130);
    TH_ASSERT(&p, th_now() - signalled < 1.5);
    expect_all_gone(&p, pids + 1, 1);
    th_cleanup(&p);
}

/* What a worker leaves in a session or process group of its own (start_new_session, a
 * daemon) comes to ddp-launch, a child subreaper, when the worker ends, and goes with
 * the attempt, named: SIGTERM, then after the grace SIGKILL for one that ignores it
 * (torchrun leaves it running after the job). */
static void test_escaped_children_are_ended(void **state)
{
    const char *argv[] = {th_launcher(), "--no-python", th_worker(), "leave-child",
                          NULL,          NULL,          NULL};
    const char *ways[][2] = {{"session", NULL}, {"group", "stubborn"}};
    for (int k = 0; k < 2; k++) {
        bool stubborn = ways[k][1] != NULL;
        th_proc_t p;
        pid_t pids[2];
        char said[256];
        argv[4] = ways[k][0];
        argv[5] = ways[k][1];
        double started = th_now();
        th_run(&p, argv, NULL, 60);
        TH_ASSERT(&p, th_status(&p) == 0);
        TH_ASSERT(&p, collect_pids(ddp_buf_str(&p.out), "pids", pids, 2) == 2);
        const char *err = ddp_buf_str(&p.err);
        snprintf(said, sizeof said,
                 "ending 1 process(es) the workers left in sessions or process groups of "
                 "their own: pid %d (ddp-test-worker): SIGTERM, SIGKILL after 2 s",
                 (int)pids[1]);
        TH_ASSERT(&p, strstr(err, said) != NULL);
        snprintf(said, sizeof said,
                 "1 process(es) the workers left outside their process groups did not end "
                 "within 2 s of SIGTERM: pid %d",
                 (int)pids[1]);
        TH_ASSERT(&p, (strstr(err, said) != NULL) == stubborn);
        TH_ASSERT(&p, stubborn || th_now() - started < 1.5); /* no grace waited out */
        expect_all_gone(&p, pids + 1, 1);
        th_cleanup(&p);
    }
}

/* A restart does not begin beside what the failed attempt's workers left in sessions of
 * their own (holding a GPU's memory, a port): it has ended, and been reaped, first. */
static void test_escaped_children_end_before_a_restart(void **state)
{
    char *dir = th_tmpdir(), script[600], mark[600];
    snprintf(script, sizeof script, "%s/worker.sh", dir);
    snprintf(mark, sizeof mark, "%s/escaped", dir);
    FILE *f = fopen(script, "w");
    assert_non_null(f);
    fprintf(f,
            "if [ \"$TORCHELASTIC_RESTART_COUNT\" = 0 ]; then\n"
            "  setsid sh -c 'echo $$ > %s.new; mv %s.new %s; exec sleep 300' "
            "</dev/null >/dev/null 2>&1 &\n"
            "  for i in $(seq 200); do [ -s %s ] && exit 1; sleep 0.05; done\n"
            "  exit 2\n"
            "fi\n"
            "pid=$(cat %s)\n"
            "if kill -0 \"$pid\" 2>/dev/null; then echo \"still there $pid\"; "
            "else echo \"gone $pid\"; fi\n",
            mark, mark, mark, mark, mark);
    assert_int_equal(fclose(f), 0);
    const char *argv[] = {th_launcher(), "--max-restarts=1", "--no-python", "/bin/sh", script,
                          NULL};
    th_proc_t p;
    th_run(&p, argv, NULL, 60);
    TH_ASSERT(&p, th_status(&p) == 0);
    const char *out = ddp_buf_str(&p.out), *err = ddp_buf_str(&p.err);
    const char *ending = strstr(err, "ending 1 process(es) the workers left in sessions");
    const char *restart = strstr(err, "restarting the workers as attempt 1");
    TH_ASSERT(&p, ending != NULL && restart != NULL && ending < restart);
    TH_ASSERT(&p, strstr(out, "gone ") != NULL);
    TH_ASSERT(&p, strstr(out, "still there") == NULL);
    th_cleanup(&p);
    th_rmtree(dir);
    free(dir);
}

/* A worker stopped (SIGSTOP) that handles SIGTERM acts on the stop at once: the stop
 * sends SIGCONT after the signal, so it does not wait out the grace period stopped.
 * ($$$$ is the shell's $$ once the launcher has expanded its templates.) */
static void test_stopped_worker_is_continued(void **state)
{
    const char *script = "if [ \"$LOCAL_RANK\" = 0 ]; then trap 'exit 7' TERM; kill -STOP $$$$; "
                         "sleep 30; else sleep 0.3; exit 3; fi";
    const char *argv[] = {th_launcher(),
                          "--nproc-per-node=2",
                          "--shutdown-timeout=20",
                          "--no-python",
                          "/bin/sh",
                          "-c",
                          script,
                          NULL};
    th_proc_t p;
    double started = th_now();
    th_run(&p, argv, NULL, 60);
    TH_ASSERT(&p, th_status(&p) == 1);
    TH_ASSERT(&p, th_now() - started < 10);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "sending SIGKILL") == NULL);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "  exitcode  : 3 (pid: ") != NULL);
    th_cleanup(&p);
}

/* Waits up to `timeout` s until every one of pids[] is (or is not) stopped. */
static bool all_stopped(const pid_t *pids, int n, bool stopped, double timeout)
{
    for (double end = th_now() + timeout;; usleep(20 * 1000)) {
        int k = 0;
        while (k < n && (th_proc_state(pids[k]) == 'T') == stopped)
            k++;
        if (k == n)
            return true;
        if (th_now() > end)
            return false;
    }
}

/* Ctrl-Z: the workers, each in a session of its own, stop with the launcher (they went
 * on alone) and continue with it; the time stopped, longer than --hang-timeout, is no
 * hang. A worker stopped while its shell waits for a vfork()ed child shows as D, not
 * T: that it stopped is seen in the ticks it writes to a file of its own. */
static void test_ctrl_z_stops_the_workers(void **state)
{
    char *dir = th_tmpdir(), ticks[700];
    snprintf(ticks, sizeof ticks, "TICKS=%s/ticks", dir);
    const char *script = "i=0; while [ $i -lt 40 ]; do echo \"tick $RANK $i\"; echo $i >> "
                         "\"$TICKS.$RANK\"; i=$((i + 1)); sleep 0.05; done";
    const char *argv[] = {th_launcher(),
                          "--nproc-per-node=2",
                          "--hang-timeout=2",
                          "--no-python",
                          "/bin/sh",
                          "-c",
                          script,
                          NULL};
    const char *env[] = {ticks, NULL};
    th_proc_t p;
    th_start(&p, argv, env);
    TH_ASSERT(&p,
              th_wait_output(&p, 1, "tick 0 3", 1, 30) && th_wait_output(&p, 1, "tick 1 3", 1, 30));
    TH_ASSERT(&p, kill(p.pid, SIGTSTP) == 0);
    TH_ASSERT(&p, all_stopped(&p.pid, 1, true, 10));
    usleep(300 * 1000); /* a SIGSTOP sent is taken at the next return to user space */
    int before = th_lines_in(ticks + strlen("TICKS="), 2);
    usleep(3 * 1000 * 1000);
    int after = th_lines_in(ticks + strlen("TICKS="), 2);
    printf("ticks while stopped: %d, then %d\n", before, after);
    TH_ASSERT(&p, after == before && before < 80);
    TH_ASSERT(&p, all_stopped(&p.pid, 1, true, 0)); /* still */
    TH_ASSERT(&p, kill(p.pid, SIGCONT) == 0);
    TH_ASSERT(&p, th_wait_exit(&p, 30));
    const char *err = ddp_buf_str(&p.err);
    TH_ASSERT(&p, th_status(&p) == 0);
    TH_ASSERT(&p, th_count(ddp_buf_str(&p.out), "tick ") == 80 &&
                      th_lines_in(ticks + strlen("TICKS="), 2) == 80);
    TH_ASSERT(&p, strstr(err, "stopped (SIGTSTP): 2 worker(s) stop with ddp-launch") != NULL);
    TH_ASSERT(&p, strstr(err, "continued: the 2 stopped worker(s) continue") != NULL);
    TH_ASSERT(&p, strstr(err, "hang") == NULL);
    th_cleanup(&p);
    th_rmtree(dir);
    free(dir);
}

/* Under nohup (SIGHUP ignored when the launcher starts) a hangup ends nothing: the
 * launcher and its workers keep it ignored (it stopped the job, as torchrun's handler
 * does); --signals-to-handle naming SIGHUP takes it back. */
static void test_nohup_survives_hangup(void **state)
{
    for (int given = 0; given < 2; given++) {
        const char *argv[] = {"/bin/sh",
                              "-c",
                              "trap '' HUP; exec \"$@\"",
                              "sh",
                              th_launcher(),
                              "--nproc-per-node=2",
                              given ? "--signals-to-handle=SIGTERM,SIGHUP" : "--role=default",
                              "--no-python",
                              "/bin/sh",
                              "-c",
                              "echo started; sleep 1.5; echo survived",
                              NULL};
        th_proc_t p;
        th_start(&p, argv, NULL);
        TH_ASSERT(&p, th_wait_output(&p, 1, "started", 2, 30));
        TH_ASSERT(&p, kill(p.pid, SIGHUP) == 0);
        TH_ASSERT(&p, th_wait_exit(&p, 60));
        const char *said = "SIGHUP was ignored when ddp-launch started (nohup, say): it stays "
                           "ignored, by ddp-launch and its workers";
        if (given) {
            TH_ASSERT(&p, th_status(&p) == 128 + SIGHUP);
            TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), said) == NULL);
        } else {
            TH_ASSERT(&p, th_status(&p) == 0);
            TH_ASSERT(&p, th_count(ddp_buf_str(&p.out), "survived") == 2);
            TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), said) != NULL);
        }
        th_cleanup(&p);
    }
}

/* A launcher started by --hosts (DDP_LAUNCH_SSH_NODE=1) whose ssh input ends in its first
 * 2 s: with the supervisor's end word before it (its node 0 ended before ssh had started
 * this one), a hangup: the job ends (129); with none (ssh -n: an input that ends at once), said,
 * and the job goes on. Under load the end word's absence left a late node running for ever
 * (test_ssh's test_node0_failing_at_start_ends_every_node in a clean clone's CI). */
static void test_ssh_session_end_word(void **state)
{
    for (int told = 0; told < 2; told++) {
        const char *argv[] = {"/bin/sh",
                              "-c",
                              told ? "exec \"$@\" <<EOF\n\x04\nEOF\n" : "exec \"$@\" <<EOF\nEOF\n",
                              "sh",
                              th_launcher(),
                              "--nproc-per-node=1",
                              "--no-python",
                              "/bin/sh",
                              "-c",
                              told ? "sleep 30" : "sleep 1; echo survived",
                              NULL};
        const char *env[] = {"DDP_LAUNCH_SSH_NODE=1", NULL};
        th_proc_t p;
        double started = th_now();
        th_start(&p, argv, env);
        TH_ASSERT(&p, th_wait_exit(&p, 20));
        const char *err = ddp_buf_str(&p.err);
        if (told) {
            TH_ASSERT(&p, th_status(&p) == 128 + SIGHUP && th_now() - started < 10);
            TH_ASSERT(&p, strstr(err, "the ssh session that started this node has ended") != NULL);
            TH_ASSERT(&p, strstr(err, "ended at once") == NULL);
        } else {
            TH_ASSERT(&p, th_status(&p) == 0);
            TH_ASSERT(&p, strstr(ddp_buf_str(&p.out), "survived") != NULL);
            TH_ASSERT(&p, strstr(err, "ended at once: the command does not pass it on") != NULL);
        }
        th_cleanup(&p);
    }
}

/* An argument runs only the tests whose names match it (the stress suite's orphan loop). */
/* scancel, systemd's stop: SIGTERM to every process of the job at once, and the workers'
 * deaths may be seen before the launcher's own signal (here 20 ms before). The job ends as
 * for that signal (143, no failure report); it restarted, and stopped the new workers a
 * moment later. A worker that SIGTERM kills alone is a failure: restarted. */
static void test_job_signal_seen_first_by_workers(void **state)
{
    const char *argv[] = {th_launcher(), "--nproc-per-node=2", "--max-restarts=3", "--no-python",
                          "/bin/sh", "-c",
                          /* "$$$$": the arguments are templates, as torchrun's */
                          "echo \"ready $RANK $$$$\"; exec sleep 60", NULL};
    const struct timespec gap = {0, 20 * 1000 * 1000};
    pid_t pids[2];
    th_proc_t p;
    th_start(&p, argv, NULL);
    TH_ASSERT(&p, th_wait_output(&p, 1, "ready", 2, 30));
    TH_ASSERT(&p, collect_pids(ddp_buf_str(&p.out), "ready", pids, 2) == 2);
    kill(pids[0], SIGTERM);
    kill(pids[1], SIGTERM);
    nanosleep(&gap, NULL);
    kill(p.pid, SIGTERM);
    TH_ASSERT(&p, th_wait_exit(&p, 30));
    const char *err = ddp_buf_str(&p.err);
    TH_ASSERT(&p, th_status(&p) == 128 + SIGTERM);
    TH_ASSERT(&p, th_count(ddp_buf_str(&p.out), "ready") == 2);
    TH_ASSERT(&p, strstr(err, "restarting") == NULL && strstr(err, "FAILED") == NULL);
    TH_ASSERT(&p, strstr(err, "received SIGTERM: ending (it has ended the workers already)"));
    th_cleanup(&p);

    th_start(&p, argv, NULL);
    TH_ASSERT(&p, th_wait_output(&p, 1, "ready", 2, 30));
    TH_ASSERT(&p, collect_pids(ddp_buf_str(&p.out), "ready", pids, 2) == 2);
    kill(pids[1], SIGTERM);
    TH_ASSERT(&p, th_wait_output(&p, 1, "ready", 4, 30));
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "restarting the workers as attempt 1"));
    kill(p.pid, SIGTERM);
    TH_ASSERT(&p, th_wait_exit(&p, 30) && th_status(&p) == 128 + SIGTERM);
    th_cleanup(&p);
}

/* ddp-launch as a container's init (pid 1, a pod's command; here a pid namespace): a
 * worker's orphans (a DataLoader's processes) are reaped, not left as zombies; and SIGTSTP
 * is ignored, as by any init (an init cannot stop itself: it stopped its workers, said they
 * stop with it, and continued them at once). */
static void test_container_init(void **state)
{
    const char *probe[] = {"/usr/bin/unshare", "--pid",     "--fork",
                           "--mount-proc",     "/bin/true", NULL};
    th_proc_t p;
    if (!th_succeeds(probe, 30)) {
        printf("cannot make a pid namespace (not root?): skipped\n");
        return;
    }
    /* An orphan that ends at once, then 40 ticks, then the zombies in the namespace. */
    const char *worker =
        "sh -c 'sleep 0.1 & exit 0'; echo ready; i=0; "
        "while [ $i -lt 40 ]; do echo \"tick $i\"; sleep 0.05; i=$((i+1)); done; "
        "echo \"zombies $(grep -l '^[0-9]* ([^)]*) Z' /proc/[0-9]*/stat | wc -l)\"";
    const char *argv[] = {"/usr/bin/unshare", "--pid",   "--fork", "--mount-proc", th_launcher(),
                          "--no-python",      "/bin/sh", "-c",     worker,         NULL};
    th_start(&p, argv, NULL);
    TH_ASSERT(&p, th_wait_output(&p, 1, "ready", 1, 30));
    /* The launcher: unshare's child. */
    char path[64], text[64] = "";
    snprintf(path, sizeof path, "/proc/%d/task/%d/children", (int)p.pid, (int)p.pid);
    FILE *f = fopen(path, "r");
    TH_ASSERT(&p, f != NULL && fgets(text, sizeof text, f) != NULL);
    fclose(f);
    pid_t init = (pid_t)atoi(text);
    TH_ASSERT(&p, init > 0 && kill(init, SIGTSTP) == 0);
    TH_ASSERT(&p, th_wait_exit(&p, 30));
    TH_ASSERT(&p, th_status(&p) == 0);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.out), "tick 39\nzombies 0\n") != NULL);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "SIGTSTP") == NULL);
    th_cleanup(&p);
}

int main(int argc, char **argv)
{
    if (argc > 1)
        cmocka_set_test_filter(argv[1]);
    const struct CMUnitTest tests[] = {
        TH_TEST(test_sigterm_is_forwarded),
        TH_TEST(test_grace_then_sigkill),
        TH_TEST(test_grace_from_torch_elastic_variable),
        TH_TEST(test_sigusr1_can_be_forwarded),
        TH_TEST(test_second_signal_kills_at_once),
        TH_TEST(test_signal_after_the_end),
        TH_TEST(test_sigkill_leaves_no_orphans),
        TH_TEST(test_early_sigkill_leaves_no_orphans),
        TH_TEST(test_stop_takes_grandchildren),
        TH_TEST(test_leftover_children_are_killed),
        TH_TEST(test_escaped_children_are_ended),
        TH_TEST(test_escaped_children_end_before_a_restart),
        TH_TEST(test_stopped_worker_is_continued),
        TH_TEST(test_ctrl_z_stops_the_workers),
        TH_TEST(test_nohup_survives_hangup),
        TH_TEST(test_ssh_session_end_word),
        TH_TEST(test_job_signal_seen_first_by_workers),
        TH_TEST(test_container_init),
        TH_TEST(test_unforwarded_signal_stops_cleanly),
        TH_TEST(test_forwarded_signal_stops_nothing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
