/* Integration tests: --max-restarts restarts the whole group with a new
 * TORCHELASTIC_RESTART_COUNT, each attempt in its own log directory. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "harness.h"
#include "io.h"
#include "json.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

static void test_restart_until_success(void **state)
{
    const char *argv[] = {th_launcher(),
                          "--nproc-per-node=2",
                          "--max-restarts=3",
                          "--no-python",
                          th_worker(),
                          "fail-until",
                          "2",
                          "9",
                          NULL};
    th_proc_t p;
    th_run(&p, argv, NULL, 60);
    const char *out = ddp_buf_str(&p.out), *err = ddp_buf_str(&p.err);
    TH_ASSERT(&p, th_status(&p) == 0);
    TH_ASSERT(&p, th_count(out, "failing on attempt 0 rank") >= 1);
    TH_ASSERT(&p, th_count(out, "failing on attempt 1 rank") >= 1);
    TH_ASSERT(&p, strstr(out, "succeeded on attempt 2 rank 0\n") != NULL);
    TH_ASSERT(&p, strstr(out, "succeeded on attempt 2 rank 1\n") != NULL);
    TH_ASSERT(&p, strstr(err, "restarting the workers as attempt 1 (restart 1 of 3)") != NULL);
    TH_ASSERT(&p, strstr(err, "restarting the workers as attempt 2 (restart 2 of 3)") != NULL);
    TH_ASSERT(&p, strstr(err, "attempt 3") == NULL);
    TH_ASSERT(&p, strstr(err, "FAILED") == NULL); /* a recovered job prints no report */
    th_cleanup(&p);
}

static bool is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static void test_restarts_run_out(void **state)
{
    char *logs = th_tmpdir();
    char log_flag[600];
    snprintf(log_flag, sizeof log_flag, "--log-dir=%s", logs);
    const char *argv[] = {th_launcher(), "--max-restarts=1", "--rdzv-id=r", log_flag, "--no-python",
                          th_worker(),   "fail-until",       "5",           "6",      NULL};
    th_proc_t p;
    th_run(&p, argv, NULL, 60);
    const char *out = ddp_buf_str(&p.out), *err = ddp_buf_str(&p.err);
    TH_ASSERT(&p, th_status(&p) == 1);
    TH_ASSERT(&p, th_count(out, "failing on attempt 0 rank 0") == 1);
    TH_ASSERT(&p, th_count(out, "failing on attempt 1 rank 0") == 1);
    TH_ASSERT(&p, strstr(out, "attempt 2") == NULL);
    TH_ASSERT(&p, th_count(err, "  exitcode  : 6 (pid: ") == 1); /* one report, at the end */
    /* Each attempt has its own directory under <log_dir>/<run_id>_<rand>/. */
    DIR *dir = opendir(logs);
    struct dirent *entry;
    char run_dir[900] = "";
    while (dir != NULL && (entry = readdir(dir)) != NULL) {
        if (strncmp(entry->d_name, "r_", 2) == 0)
            snprintf(run_dir, sizeof run_dir, "%s/%s", logs, entry->d_name);
    }
    if (dir != NULL)
        closedir(dir);
    TH_ASSERT(&p, run_dir[0] != '\0');
    char attempt[1000];
    snprintf(attempt, sizeof attempt, "%s/attempt_0/0", run_dir);
    TH_ASSERT(&p, is_dir(attempt));
    snprintf(attempt, sizeof attempt, "%s/attempt_1/0", run_dir);
    TH_ASSERT(&p, is_dir(attempt));
    snprintf(attempt, sizeof attempt, "%s/attempt_2", run_dir);
    TH_ASSERT(&p, !is_dir(attempt));
    th_cleanup(&p);
    th_rmtree(logs);
    free(logs);
}

static void test_a_failure_restarts_every_worker(void **state)
{
    /* Local rank 1 fails on every attempt; rank 0 is stopped and started again each time. */
    const char *argv[] = {th_launcher(),
                          "--nproc-per-node=2",
                          "--max-restarts=2",
                          "--no-python",
                          th_worker(),
                          "exit",
                          "3",
                          "1",
                          NULL};
    th_proc_t p;
    th_run(&p, argv, NULL, 60);
    TH_ASSERT(&p, th_status(&p) == 1);
    TH_ASSERT(&p, th_count(ddp_buf_str(&p.err), "stopping 1 worker(s): sending SIGTERM to the "
                                                "process group of local rank 0;") == 3);
    TH_ASSERT(&p, th_count(ddp_buf_str(&p.err), "restarting the workers") == 2);
    th_cleanup(&p);
}

static void test_store_keys_are_cleared_between_attempts(void **state)
{
    /* torch 2.x keys carry no attempt prefix: what attempt 0 wrote must be gone. */
    const char *argv[] = {th_launcher(), "--max-restarts=1", "--no-python",
                          th_worker(),   "store-attempt",    NULL};
    th_proc_t p;
    th_run(&p, argv, NULL, 60);
    TH_ASSERT(&p, th_status(&p) == 0);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.out), "set /stale on attempt 0\n") != NULL);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.out), "no stale key on attempt 1\n") != NULL);
    th_cleanup(&p);
}

/* Idle clients of the store cannot take the descriptors a restart needs: with an
 * open-file limit of 64 and 100 clients connected, the launcher keeps a reserve (it
 * refuses the clients past it, saying so) and the next attempt starts. */
static void test_idle_clients_cannot_block_a_restart(void **state)
{
    enum { CLIENTS = 100 };
    int port = th_free_port(), fds[CLIENTS];
    char flag[32];
    snprintf(flag, sizeof flag, "--master-port=%d", port);
    const char *argv[] = {"/bin/sh",
                          "-c",
                          "ulimit -n 64 && exec \"$@\"",
                          "sh",
                          th_launcher(),
                          flag,
                          "--max-restarts=1",
                          "--no-python",
                          th_worker(),
                          "wait",
                          NULL};
    th_proc_t p;
    th_start(&p, argv, NULL);
    TH_ASSERT(&p, th_wait_output(&p, 1, "ready 0 ", 1, 30));
    int worker = 0;
    TH_ASSERT(&p, sscanf(strstr(ddp_buf_str(&p.out), "ready 0 ") + 8, "%d", &worker) == 1);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    for (int i = 0; i < CLIENTS; i++) {
        fds[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        assert_true(fds[i] >= 0);
        assert_int_equal(connect(fds[i], (struct sockaddr *)&addr, sizeof addr), 0);
    }
    TH_ASSERT(&p, th_wait_output(&p, 2, "store: refusing a connection", 1, 30));
    kill(worker, SIGKILL);
    TH_ASSERT(&p, th_wait_output(&p, 1, "ready 0 ", 2, 30));
    kill(p.pid, SIGTERM);
    TH_ASSERT(&p, th_wait_exit(&p, 30));
    TH_ASSERT(&p, th_status(&p) == 128 + SIGTERM);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "restarting the workers as attempt 1") != NULL);
    for (int i = 0; i < CLIENTS; i++)
        close(fds[i]);
    th_cleanup(&p);
}

/* The text of `path` (the caller frees); fails the test when it cannot be read. */
static char *read_all(const char *path)
{
    char *text;
    size_t len;
    if (ddp_read_file(path, 1 << 20, &text, &len) != 0)
        fail_msg("cannot read %s", path);
    return text;
}

/* The string or number at `key` of an event, as text, into out[cap] ("" when absent). */
static void field(const ddp_json_t *event, const char *key, char *out, size_t cap)
{
    const ddp_json_t *v = ddp_json_get(event, key);
    double n;
    size_t len;
    const char *s = v != NULL ? ddp_json_string(v, &len) : NULL;
    if (s != NULL)
        snprintf(out, cap, "%.*s", (int)len, s);
    else if (v != NULL && ddp_json_number(v, &n))
        snprintf(out, cap, "%.0f", n);
    else
        snprintf(out, cap, "%s", "");
}

/* --event-log-handler=file:PATH: a job with one restart, its event log read back line by
 * line, every line JSON, in order, with the fields a scheduler reads. */
/* Health checks run before each attempt: this one passes once (a counter file), so the
 * first attempt runs and fails, and the restart finds the node unhealthy: the job ends with
 * 5 naming the check and its reason, no worker of the second attempt started, and the
 * event log has node_unhealthy. */
static void test_health_check_before_each_attempt(void **state)
{
    char *dir = th_tmpdir(), check[1200], events[700], flag[800];
    snprintf(check, sizeof check,
             "--health-check=echo x >> '%s/checks'; [ $(wc -l < '%s/checks') -lt 2 ] || "
             "{ echo 'scratch: disk full' >&2; exit 4; }",
             dir, dir);
    snprintf(events, sizeof events, "%s/events.jsonl", dir);
    snprintf(flag, sizeof flag, "--event-log-handler=file:%s", events);
    const char *argv[] = {
        th_launcher(), check,     flag, "--max-restarts=3",
        "--no-python", "/bin/sh", "-c", "echo started $TORCHELASTIC_RESTART_COUNT; exit 3",
        NULL};
    th_proc_t p;
    th_run(&p, argv, NULL, 60);
    TH_ASSERT(&p, th_status(&p) == 5);
    TH_ASSERT(&p, th_count(ddp_buf_str(&p.out), "started 0") == 1);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.out), "started 1") == NULL);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "this node failed its health check before attempt "
                                              "1: --health-check: ") != NULL);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "exited with 4: scratch: disk full; no worker "
                                              "started") != NULL);
    char *log = NULL;
    size_t len;
    TH_ASSERT(&p, ddp_read_file(events, 1 << 20, &log, &len) == 0);
    TH_ASSERT(&p, strstr(log, "\"event\": \"node_unhealthy\"") != NULL ||
                      strstr(log, "\"event\":\"node_unhealthy\"") != NULL);
    free(log);
    th_cleanup(&p);

    /* A path that cannot be read, and a command past its time, before the first attempt. */
    const char *path_argv[] = {th_launcher(), "--health-check-path=/tmp,/nonexistent/data",
                               "--no-python", "/bin/echo",
                               "started",     NULL};
    th_run(&p, path_argv, NULL, 60);
    TH_ASSERT(&p, th_status(&p) == 5);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "--health-check-path: /nonexistent/data: No such "
                                              "file or directory") != NULL);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.out), "started") == NULL);
    th_cleanup(&p);
    const char *slow_argv[] = {th_launcher(),
                               "--health-check=sleep 30",
                               "--health-check-timeout=0.5",
                               "--no-python",
                               "/bin/echo",
                               "started",
                               NULL};
    double started = th_now();
    th_run(&p, slow_argv, NULL, 60);
    TH_ASSERT(&p, th_status(&p) == 5 && th_now() - started < 10);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "did not finish within 0.5 s") != NULL);
    th_cleanup(&p);
    th_rmtree(dir);
    free(dir);
}

/* LD_LIBRARY_PATH=... with the tests' stand-in libnvidia-ml.so.1 first, then the loader path
 * the tests were given (where the launcher finds libuv on a machine without it). */
static void fake_nvml_path(char *path, size_t cap)
{
    const char *fake = getenv("DDP_TEST_FAKE_NVML_DIR"), *now = getenv("LD_LIBRARY_PATH");
    if (fake == NULL)
        fail_msg("DDP_TEST_FAKE_NVML_DIR is not set: run the tests with meson test");
    snprintf(path, cap, "LD_LIBRARY_PATH=%s%s%s", fake, now != NULL ? ":" : "", now ? now : "");
}

/* The NVML checks, against the tests' stand-in libnvidia-ml.so.1: each finding makes the
 * node unhealthy, naming the GPU; a clean report and a driver that fails are healthy, and
 * the info line says what was checked. */
static void test_health_check_nvml(void **state)
{
    char path[1200];
    fake_nvml_path(path, sizeof path);
    static const struct {
        const char *finding, *said;
    } cases[] = {
        {"FAKE_NVML_ECC=1:3", "GPU 1 (NVML): 3 uncorrectable ECC error(s) since the driver loaded"},
        {"FAKE_NVML_PENDING=0", "GPU 0 (NVML): a page retirement is pending"},
        {"FAKE_NVML_REMAP_FAILED=1", "GPU 1 (NVML): a row remapping failed"},
        {"FAKE_NVML_ECC=1:0", "passed: paths /tmp readable; NVML: 2 GPU(s) without a pending"},
        {"FAKE_NVML_INIT_FAILS=1", "passed: paths /tmp readable; no NVML"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const char *env[] = {path, "FAKE_NVML_GPUS=0000:01:00.0,0000:02:00.0", cases[i].finding,
                             "DDP_LAUNCH_LOG_LEVEL=info", NULL};
        const char *argv[] = {
            th_launcher(), "--health-check-path=/tmp", "--no-python", "/bin/echo", "started", NULL};
        th_proc_t p;
        th_run(&p, argv, env, 60);
        TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), cases[i].said) != NULL);
        if (strncmp(cases[i].said, "passed", 6) != 0) {
            TH_ASSERT(&p, th_status(&p) == 5);
            TH_ASSERT(&p, strstr(ddp_buf_str(&p.out), "started") == NULL);
        } else {
            TH_ASSERT(&p, th_status(&p) == 0);
            TH_ASSERT(&p, strstr(ddp_buf_str(&p.out), "started") != NULL);
        }
        th_cleanup(&p);
    }
}

/* Before a restart, the GPUs' memory (NVML: the tests' stand-in) is waited for until it is
 * under 512 MiB, and said; past --gpu-memory-reclaim-timeout the job goes on, said too. The
 * driver's own reservation (over 512 MiB on an H200) is not waited for. */
static void test_gpu_memory_reclaimed_before_restart(void **state)
{
    char path[1200];
    fake_nvml_path(path, sizeof path);
    const char *script = "echo attempt $TORCHELASTIC_RESTART_COUNT; "
                         "[ \"$TORCHELASTIC_RESTART_COUNT\" = 1 ] || exit 3";
    const char *frees[] = {path, "FAKE_NVML_GPUS=0000:01:00.0", "FAKE_NVML_USED_MIB=4096:4", NULL};
    const char *argv[] = {th_launcher(), "--max-restarts=1", "--no-python", "/bin/sh", "-c", script,
                          NULL};
    th_proc_t p;
    th_run(&p, argv, frees, 60);
    TH_ASSERT(&p, th_status(&p) == 0);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.out), "attempt 1") != NULL);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "GPU 0 still has 4096 MiB in use: waiting up to "
                                              "50 s") != NULL);
    TH_ASSERT(&p,
              strstr(ddp_buf_str(&p.err), "the GPUs' memory was back under 512 MiB after") != NULL);
    th_cleanup(&p);

    const char *stays[] = {path, "FAKE_NVML_GPUS=0000:01:00.0", "FAKE_NVML_USED_MIB=4096:100000",
                           NULL};
    const char *short_argv[] = {th_launcher(),
                                "--max-restarts=1",
                                "--gpu-memory-reclaim-timeout=0.5",
                                "--no-python",
                                "/bin/sh",
                                "-c",
                                script,
                                NULL};
    double started = th_now();
    th_run(&p, short_argv, stays, 60);
    TH_ASSERT(&p, th_status(&p) == 0 && th_now() - started < 20);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "GPU 0 still has 4096 MiB in use after 0.") != NULL);
    th_cleanup(&p);

    const char *reserved[] = {path, "FAKE_NVML_GPUS=0000:01:00.0", "FAKE_NVML_RESERVED_MIB=700",
                              NULL};
    th_run(&p, argv, reserved, 60);
    TH_ASSERT(&p, th_status(&p) == 0 && strstr(ddp_buf_str(&p.out), "attempt 1") != NULL);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "still has") == NULL);
    th_cleanup(&p);
    /* A driver without _v2 (before R510): its count, the reservation in it, is all there is. */
    const char *old_driver[] = {path, "FAKE_NVML_GPUS=0000:01:00.0", "FAKE_NVML_RESERVED_MIB=700",
                                "FAKE_NVML_NO_V2=1", NULL};
    th_run(&p, short_argv, old_driver, 60);
    TH_ASSERT(&p, th_status(&p) == 0);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "GPU 0 still has 700 MiB in use after 0.") != NULL);
    th_cleanup(&p);
}

/* No progress across restarts: with --progress-file not advancing, the job ends after K
 * failed attempts in a row with status 6 (do not requeue), not after every restart; one
 * that advances uses them all (status 1). The first restart says so. */
static void test_no_progress_stops_restarts(void **state)
{
    char *dir = th_tmpdir(), file[600], flag[700], script[1400];
    snprintf(file, sizeof file, "%s/iteration", dir);
    snprintf(flag, sizeof flag, "--progress-file=%s", file);
    FILE *f = fopen(file, "w");
    assert_non_null(f);
    fputs("100\n", f);
    fclose(f);
    const char *stuck[] = {th_launcher(),
                           flag,
                           "--max-restarts=10",
                           "--max-no-progress-restarts=2",
                           "--no-python",
                           "/bin/sh",
                           "-c",
                           "echo attempt $TORCHELASTIC_RESTART_COUNT; exit 3",
                           NULL};
    th_proc_t p;
    th_run(&p, stuck, NULL, 60);
    TH_ASSERT(&p, th_status(&p) == 6);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.out), "attempt 1") != NULL);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.out), "attempt 2") == NULL);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "2 attempt(s) in a row failed without progress "
                                              "(--progress-file did not advance)") != NULL);
    th_cleanup(&p);

    snprintf(script, sizeof script,
             "echo attempt $TORCHELASTIC_RESTART_COUNT; "
             "echo $((101 + TORCHELASTIC_RESTART_COUNT)) > '%s'; exit 3",
             file);
    const char *advancing[] = {th_launcher(),
                               flag,
                               "--max-restarts=3",
                               "--max-no-progress-restarts=2",
                               "--no-python",
                               "/bin/sh",
                               "-c",
                               script,
                               NULL};
    th_run(&p, advancing, NULL, 60);
    TH_ASSERT(&p, th_status(&p) == 1);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.out), "attempt 3") != NULL);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "in a row failed without progress") == NULL);
    /* The first restart says the budget, once. */
    TH_ASSERT(&p, th_count(ddp_buf_str(&p.err),
                           "status 6 (do not requeue) once 2 attempts in a row fail without "
                           "progress, before --max-restarts=3 runs out") == 1);
    th_cleanup(&p);
    th_rmtree(dir);
    free(dir);
}

/* A --progress-file that cannot be read as an integer ("step=101", "101.0", JSON; a FIFO,
 * a directory) is said once, with what it holds and what is expected, and is no measure
 * of progress: attempts that write it use every restart (after
 * --max-no-progress-restarts of them the job ended with status 6, "--progress-file did
 * not advance", with restarts left). The first restart says that budget. */
static void test_unreadable_progress_file_is_said(void **state)
{
    static const struct {
        const char *write; /* the worker's command writing the file ($1), or "" */
        const char *make;  /* "fifo", "dir" or NULL: made before the job */
        const char *said;  /* what the launcher says it found */
    } forms[] = {
        {"printf 'step=%s\\n' $((101 + N)) > \"$1\"", NULL, "holds 'step=101'"},
        {"printf '%s.0\\n' $((101 + N)) > \"$1\"", NULL, "holds '101.0'"},
        {"printf '{\"step\": %s}\\n' $((101 + N)) > \"$1\"", NULL, "holds '{\"step\": 101}'"},
        {"", "fifo", "is a FIFO"},
        {"", "dir", "is a directory"},
    };
    char *dir = th_tmpdir();
    for (size_t k = 0; k < sizeof forms / sizeof forms[0]; k++) {
        char file[700], flag[720], script[1200];
        snprintf(file, sizeof file, "%s/iteration.%zu", dir, k);
        snprintf(flag, sizeof flag, "--progress-file=%s", file);
        if (forms[k].make != NULL)
            assert_int_equal(
                strcmp(forms[k].make, "fifo") == 0 ? mkfifo(file, 0644) : mkdir(file, 0755), 0);
        /* Each attempt fails its own way: no "same failure at the start" either. */
        snprintf(script, sizeof script,
                 "N=$TORCHELASTIC_RESTART_COUNT; echo \"attempt $N\"; %s\n"
                 "echo \"failed in attempt $N\" >&2; exit 3",
                 forms[k].write);
        const char *argv[] = {th_launcher(),
                              flag,
                              "--max-restarts=2",
                              "--max-no-progress-restarts=2",
                              "--no-python",
                              "/bin/sh",
                              "-c",
                              script,
                              "sh",
                              file,
                              NULL};
        th_proc_t p;
        double began = th_now();
        th_run(&p, argv, NULL, 60);
        const char *err = ddp_buf_str(&p.err);
        TH_ASSERT(&p, th_status(&p) == 1);
        TH_ASSERT(&p, strstr(ddp_buf_str(&p.out), "attempt 2") != NULL);
        TH_ASSERT(&p, th_count(err, "unable to read --progress-file") == 1);
        TH_ASSERT(&p, strstr(err, forms[k].said) != NULL);
        TH_ASSERT(&p, strstr(err, "in a row failed without progress") == NULL);
        TH_ASSERT(&p, th_count(err, "(--max-no-progress-restarts=2") == 1);
        printf("%s: %.1f s\n", forms[k].said, th_now() - began);
        th_cleanup(&p);
    }
    th_rmtree(dir);
    free(dir);
}

/* ddp-launch with --progress-file=FILE in a FUSE mount that never answers (a dead NFS
 * server; tests/helpers/hung_mount.c), workers that fail at once, one restart; false (the
 * test skips) where no such mount can be made. */
static bool start_progress_on_hung_mount(th_proc_t *p, const char *hung)
{
    char flag[800];
    snprintf(flag, sizeof flag, "--progress-file=%s/iteration", hung);
    const char *argv[] = {getenv("DDP_TEST_HUNG_MOUNT"),
                          hung,
                          th_launcher(),
                          flag,
                          "--max-restarts=1",
                          "--max-no-progress-restarts=1",
                          "--no-python",
                          "/bin/sh",
                          "-c",
                          "echo attempt $TORCHELASTIC_RESTART_COUNT; exit 3",
                          NULL};
    th_start(p, argv, NULL);
    if (th_wait_exit(p, 0.3) && th_status(p) == 77) {
        printf("skipped: %s", ddp_buf_str(&p->err));
        th_cleanup(p);
        return false;
    }
    return true;
}

/* A --progress-file on a file system that never answers holds neither the job nor a
 * signal: it was read on the loop, where ddp-launch sat in the kernel before its first
 * worker, deaf to SIGTERM. Now the workers start at once; a read that takes longer than
 * 3 s is said once and the attempt is not judged by it; the restart comes; and a SIGTERM
 * while the group's end waits for the read ends ddp-launch at once. */
static void test_progress_file_on_a_hung_mount(void **state)
{
    char *dir = th_tmpdir(), hung[700];
    snprintf(hung, sizeof hung, "%s/hung", dir);
    assert_int_equal(mkdir(hung, 0700), 0);
    th_proc_t p;
    if (!start_progress_on_hung_mount(&p, hung))
        goto out;
    TH_ASSERT(&p, th_wait_output(&p, 1, "attempt 0", 1, 10));
    double failed = th_now();
    TH_ASSERT(&p, !th_wait_exit(&p, 0.5)); /* the group's end waits for the read */
    kill(p.pid, SIGTERM);
    TH_ASSERT(&p, th_wait_exit(&p, 10));
    TH_ASSERT(&p, th_now() - failed < 2.5);
    TH_ASSERT(&p, th_status(&p) == 128 + SIGTERM);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.out), "attempt 1") == NULL);
    th_cleanup(&p);

    if (!start_progress_on_hung_mount(&p, hung))
        goto out;
    TH_ASSERT(&p, th_wait_exit(&p, 30));
    const char *err = ddp_buf_str(&p.err);
    TH_ASSERT(&p, th_status(&p) == 1); /* restarts ran out: not judged "no progress" */
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.out), "attempt 1") != NULL);
    TH_ASSERT(&p, th_count(err, "unable to read --progress-file") == 1);
    TH_ASSERT(&p, strstr(err, "it did not answer within 3 s") != NULL);
    TH_ASSERT(&p, strstr(err, "in a row failed without progress") == NULL);
    th_cleanup(&p);
out:
    th_rmtree(dir);
    free(dir);
}

/* Where nothing tells progress (no --progress-file, no libddp): attempts that fail the
 * same way at their start (a SyntaxError, a missing file) are not restarted again and
 * again: status 6 after --max-no-progress-restarts of them, the failure named. Failures
 * that differ, or say nothing, use every restart as before. */
static void test_same_failure_at_start_stops_restarts(void **state)
{
    char *dir = th_tmpdir(), events[600], flag[700];
    snprintf(events, sizeof events, "%s/events.jsonl", dir);
    snprintf(flag, sizeof flag, "--event-log-handler=file:%s", events);
    const char *same[] = {
        th_launcher(),
        flag,
        "--nproc-per-node=2",
        "--max-restarts=10",
        "--no-python",
        "/bin/sh",
        "-c",
        "echo \"attempt $TORCHELASTIC_RESTART_COUNT\"; echo 'config.yaml: no such "
        "file' >&2; exit 2",
        NULL};
    th_proc_t p;
    th_run(&p, same, NULL, 120);
    TH_ASSERT(&p, th_status(&p) == 6);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.out), "attempt 2\n") != NULL);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.out), "attempt 3\n") == NULL);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err),
                         "3 attempt(s) in a row failed without progress (each the same way "
                         "within 10 s of its start: exited with code 2: config.yaml: no such "
                         "file): the job cannot make progress") != NULL);
    char *log = NULL;
    size_t len;
    TH_ASSERT(&p, ddp_read_file(events, 1 << 20, &log, &len) == 0);
    TH_ASSERT(&p, strstr(log, "\"no_progress_stop\"") != NULL &&
                      strstr(log, "\"same_failure_at_start\"") != NULL);
    free(log);
    th_cleanup(&p);
    const char *differ[] = {th_launcher(),
                            "--max-restarts=4",
                            "--no-python",
                            "/bin/sh",
                            "-c",
                            "echo \"attempt $TORCHELASTIC_RESTART_COUNT\"; echo \"error "
                            "$TORCHELASTIC_RESTART_COUNT\" >&2; exit 2",
                            NULL};
    th_run(&p, differ, NULL, 120);
    TH_ASSERT(&p, th_status(&p) == 1 && strstr(ddp_buf_str(&p.out), "attempt 4\n") != NULL);
    th_cleanup(&p);
    const char *off[] = {th_launcher(),
                         "--max-restarts=4",
                         "--max-no-progress-restarts=0",
                         "--no-python",
                         "/bin/sh",
                         "-c",
                         "echo \"attempt $TORCHELASTIC_RESTART_COUNT\"; echo same >&2; exit 2",
                         NULL};
    th_run(&p, off, NULL, 120);
    TH_ASSERT(&p, th_status(&p) == 1 && strstr(ddp_buf_str(&p.out), "attempt 4\n") != NULL);
    th_cleanup(&p);
    th_rmtree(dir);
    free(dir);
}

static void test_event_log_of_a_restart(void **state)
{
    char *dir = th_tmpdir(), path[600], flag[640];
    snprintf(path, sizeof path, "%s/events.jsonl", dir);
    snprintf(flag, sizeof flag, "--event-log-handler=file:%s", path);
    const char *argv[] = {th_launcher(),
                          flag,
                          "--max-restarts=1",
                          "--nproc-per-node=2",
                          "--no-python",
                          "/bin/sh",
                          "-c",
                          "if [ \"$TORCHELASTIC_RESTART_COUNT\" = 0 ] && [ \"$RANK\" = 1 ]; then "
                          "echo 'bad shard 7' >&2; exit 3; fi; sleep 0.3",
                          NULL};
    th_proc_t p;
    th_run(&p, argv, NULL, 60);
    TH_ASSERT(&p, th_status(&p) == 0);
    th_cleanup(&p);
    /* event, then key=value pairs it must have ("" ends them) */
    static const char *const want[][6] = {
        {"job_started", "nproc_per_node=2", "max_restarts=1", "program=/bin/sh", ""},
        {"worker_started", "attempt=0", ""},
        {"worker_started", "attempt=0", ""},
        {"worker_exited", "rank=1", "exit_code=3", "while=running", "last_line=bad shard 7", ""},
        {"stop_sent", "signal=SIGTERM", "reason=failure", "workers=1", ""},
        {"worker_exited", "rank=0", "signal=SIGTERM", "while=stopping", ""},
        {"restart", "attempt=1", ""},
        {"worker_started", "attempt=1", ""},
        {"worker_started", "attempt=1", ""},
        {"worker_exited", "attempt=1", "exit_code=0", ""},
        {"worker_exited", "attempt=1", "exit_code=0", ""},
        {"job_ended", "exit_code=0", "checkpoint_bytes=0", ""},
    };
    char *text = read_all(path), *save = NULL, value[256];
    size_t n = 0;
    double last = 0;
    for (char *line = strtok_r(text, "\n", &save); line != NULL;
         line = strtok_r(NULL, "\n", &save), n++) {
        ddp_json_t *event = NULL;
        if (ddp_json_parse(line, strlen(line), &event) != 0)
            fail_msg("line %zu is not JSON: %s", n + 1, line);
        if (n >= sizeof want / sizeof want[0])
            fail_msg("an event too many: %s", line);
        field(event, "event", value, sizeof value);
        if (strcmp(value, want[n][0]) != 0)
            fail_msg("event %zu is %s, expected %s: %s", n + 1, value, want[n][0], line);
        for (int k = 1; want[n][k][0] != '\0'; k++) {
            const char *eq = strchr(want[n][k], '=');
            char key[64];
            snprintf(key, sizeof key, "%.*s", (int)(eq - want[n][k]), want[n][k]);
            field(event, key, value, sizeof value);
            if (strcmp(value, eq + 1) != 0)
                fail_msg("event %zu: %s is '%s', expected '%s': %s", n + 1, key, value, eq + 1,
                         line);
        }
        const ddp_json_t *t = ddp_json_get(event, "time");
        double time;
        assert_true(t != NULL && ddp_json_number(t, &time) && time >= last);
        last = time;
        field(event, "node", value, sizeof value);
        assert_string_equal(value, "0");
        field(event, "run_id", value, sizeof value);
        assert_string_equal(value, "none");
        ddp_json_free(event);
    }
    assert_int_equal(n, sizeof want / sizeof want[0]);
    free(text);
    th_rmtree(dir);
    free(dir);
}

int main(int argc, char **argv)
{
    if (argc > 1)
        cmocka_set_test_filter(argv[1]);
    const struct CMUnitTest tests[] = {
        TH_TEST(test_restart_until_success),
        TH_TEST(test_restarts_run_out),
        TH_TEST(test_a_failure_restarts_every_worker),
        TH_TEST(test_store_keys_are_cleared_between_attempts),
        TH_TEST(test_idle_clients_cannot_block_a_restart),
        TH_TEST(test_event_log_of_a_restart),
        TH_TEST(test_health_check_before_each_attempt),
        TH_TEST(test_health_check_nvml),
        TH_TEST(test_gpu_memory_reclaimed_before_restart),
        TH_TEST(test_no_progress_stops_restarts),
        TH_TEST(test_unreadable_progress_file_is_said),
        TH_TEST(test_progress_file_on_a_hung_mount),
        TH_TEST(test_same_failure_at_start_stops_restarts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
