/* Unit tests of the worker watchdog (file_timer.h) on a real loop and FIFO, with a real
 * child process as the "worker": a timer that expires signals it, a released one does not,
 * a pid the owner callback disowns is never signalled, and what a request may hold that
 * no client sends (no signal, a signal that does not exist, an expiry 1e308 s away,
 * malformed and overlong lines) is said and harmless. torch's own client is tested in the
 * torch suites (test_watchdog_timer). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "agent/file_timer.h"
#include "io.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct {
    pid_t child;  /* the process the owner callback owns (local rank 3) */
    int fired;    /* fired callbacks seen */
    int last_sig; /* the last one's signal */
    char scope[64];
} fixture_t;

static int owner(void *ctx, pid_t pid)
{
    fixture_t *f = ctx;
    return pid == f->child ? 3 : -1;
}

static void fired(void *ctx, pid_t pid, int local_rank, const char *scope, int sig)
{
    fixture_t *f = ctx;
    assert_int_equal(pid, f->child);
    assert_int_equal(local_rank, 3);
    f->fired++;
    f->last_sig = sig;
    snprintf(f->scope, sizeof f->scope, "%s", scope);
}

static void on_stop(uv_timer_t *handle)
{
    uv_stop(handle->loop);
}

static void run_for(uv_loop_t *loop, double seconds)
{
    uv_timer_t stop;
    uv_timer_init(loop, &stop);
    uv_timer_start(&stop, on_stop, (uint64_t)(seconds * 1000), 0);
    uv_run(loop, UV_RUN_DEFAULT);
    uv_close((uv_handle_t *)&stop, NULL);
    uv_run(loop, UV_RUN_NOWAIT); /* the close completes while `stop` exists */
}

/* A job's worth of the watchdog: requests[] are written to the FIFO one line each, then
 * the loop runs `seconds`; with `postpone` > 0, the loop first runs 0.1 s and the timers
 * are postponed that much (a Ctrl-Z's time). The log (what the watchdog said) is
 * returned (caller frees). */
static char *run_postponed(fixture_t *f, const char *const *requests, double seconds,
                           double postpone)
{
    char dir[] = "/tmp/ddp-file-timer-XXXXXX", log_path[64];
    assert_non_null(mkdtemp(dir));
    snprintf(log_path, sizeof log_path, "%s/log", dir);
    ddp_log_t log;
    ddp_log_init(&log, "test", DDP_LOG_DEBUG);
    log.fd = open(log_path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    assert_true(log.fd >= 0);
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    ddp_file_timer_t *t = NULL;
    ddp_buf_t why = DDP_BUF_INIT;
    assert_int_equal(ddp_file_timer_create(NULL, dir, &log, &t, &why), 0);
    const char *path = ddp_file_timer_path(t);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_true(S_ISFIFO(st.st_mode));
    assert_int_equal(st.st_mode & 0777, 0600);
    assert_int_equal(ddp_file_timer_watch(t, &loop, owner, fired, f), 0);
    int fd = open(path, O_WRONLY | O_NONBLOCK | O_CLOEXEC); /* as FileTimerClient does */
    assert_true(fd >= 0);
    for (int i = 0; requests[i] != NULL; i++) {
        assert_int_equal(ddp_write_all(fd, requests[i], strlen(requests[i])), 0);
        assert_int_equal(ddp_write_all(fd, "\n", 1), 0);
    }
    close(fd);
    if (postpone > 0) {
        run_for(&loop, 0.1);
        ddp_file_timer_postpone(t, postpone);
    }
    run_for(&loop, seconds);
    ddp_file_timer_close(t);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&loop), 0);
    char *copy = strdup(path);
    ddp_file_timer_free(t);
    assert_int_equal(access(copy, F_OK), -1); /* the FIFO is gone */
    free(copy);
    close(log.fd);
    char *text = NULL;
    size_t len = 0;
    assert_int_equal(ddp_read_file(log_path, 1 << 20, &text, &len), 0);
    unlink(log_path);
    rmdir(dir);
    ddp_buf_free(&why);
    return text;
}

static char *run(fixture_t *f, const char *const *requests, double seconds)
{
    return run_postponed(f, requests, seconds, 0);
}

static pid_t start_child(void)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        for (int i = 0; i < 300; i++) /* at most 30 s */
            usleep(100 * 1000);
        _exit(0);
    }
    return pid;
}

/* Whether the child still runs; if so it is ended (SIGKILL). Its status goes to *status. */
static bool end_child(pid_t pid, int *status)
{
    bool running = waitpid(pid, status, WNOHANG) == 0;
    if (running) {
        kill(pid, SIGKILL);
        waitpid(pid, status, 0);
    }
    return running;
}

static void request(char *out, size_t cap, int pid, const char *scope, double expires, int sig)
{
    snprintf(out, cap,
             "{\"version\": 1, \"pid\": %d, \"scope_id\": \"%s\", \"expiration_time\": %.6f, "
             "\"signal\": %d}",
             pid, scope, expires, sig);
}

static void test_expiry_signals_the_process(void **state)
{
    fixture_t f = {.child = start_child()};
    char set[256], other[256];
    request(set, sizeof set, f.child, "step", ddp_clock_wall() + 0.2, SIGTERM);
    request(other, sizeof other, f.child, "later", ddp_clock_wall() + 60, SIGKILL);
    const char *requests[] = {set, other, NULL};
    char *log = run(&f, requests, 1.0);
    int status = 0;
    assert_false(end_child(f.child, &status));
    assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM);
    assert_int_equal(f.fired, 1);
    assert_int_equal(f.last_sig, SIGTERM);
    assert_string_equal(f.scope, "step");
    assert_non_null(strstr(log, "watchdog timer 'step' of local rank 3 (pid "));
    assert_non_null(strstr(log, "expired: sending it SIGTERM"));
    free(log);
}

static void test_released_timer_does_nothing(void **state)
{
    fixture_t f = {.child = start_child()};
    char set[256], release[256];
    request(set, sizeof set, f.child, "step", ddp_clock_wall() + 0.2, SIGKILL);
    request(release, sizeof release, f.child, "step", -1, 0);
    const char *requests[] = {set, release, NULL};
    char *log = run(&f, requests, 0.6);
    int status;
    assert_true(end_child(f.child, &status));
    assert_int_equal(f.fired, 0);
    assert_null(strstr(log, "expired"));
    free(log);
}

/* The time the job stood stopped (Ctrl-Z) moves every expiry: a timer due meanwhile
 * fires that much later, not at once. */
static void test_postponed_timer_fires_later(void **state)
{
    fixture_t f = {.child = start_child()};
    char set[256];
    request(set, sizeof set, f.child, "step", ddp_clock_wall() + 0.3, SIGTERM);
    const char *requests[] = {set, NULL};
    char *log = run_postponed(&f, requests, 0.5, 1.0); /* due at 1.3 s; the run ends at 0.6 */
    int status;
    assert_true(end_child(f.child, &status));
    assert_int_equal(f.fired, 0);
    assert_null(strstr(log, "expired"));
    free(log);
    f.child = start_child();
    request(set, sizeof set, f.child, "step", ddp_clock_wall() + 0.3, SIGTERM);
    log = run_postponed(&f, requests, 1.0, 0.3); /* due at 0.6 s; the run ends at 1.1 */
    assert_false(end_child(f.child, &status));
    assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM);
    assert_int_equal(f.fired, 1);
    free(log);
}

static void test_foreign_pid_is_never_signalled(void **state)
{
    fixture_t f = {.child = start_child()};
    pid_t stranger = start_child();
    char set[256];
    request(set, sizeof set, stranger, "theirs", ddp_clock_wall(), SIGKILL);
    const char *requests[] = {set, NULL};
    char *log = run(&f, requests, 0.3);
    int status;
    assert_true(end_child(stranger, &status)); /* still ran: not signalled */
    assert_true(end_child(f.child, &status));
    assert_int_equal(f.fired, 0);
    assert_non_null(strstr(log, "is no process of this node's workers: not sending it SIGKILL"));
    free(log);
}

/* Nothing a client would send, all harmless: said, and no signal sent. */
static void test_odd_requests_are_harmless(void **state)
{
    fixture_t f = {.child = start_child()};
    char no_signal[256], bad_signal[256], far[256], long_line[10000];
    request(no_signal, sizeof no_signal, getpid(), "quiet", ddp_clock_wall(), 0);
    request(bad_signal, sizeof bad_signal, f.child, "odd", ddp_clock_wall(), 999);
    snprintf(far, sizeof far,
             "{\"pid\": %d, \"scope_id\": \"far\", \"expiration_time\": 1e308, \"signal\": 9}",
             (int)f.child);
    memset(long_line, 'x', sizeof long_line - 1);
    long_line[sizeof long_line - 1] = '\0';
    const char *requests[] = {"not json",
                              "{\"pid\": -4, \"scope_id\": \"s\", \"expiration_time\": 1}",
                              "{\"pid\": 7, \"expiration_time\": 1}",
                              long_line,
                              no_signal,
                              bad_signal,
                              far,
                              NULL};
    char *log = run(&f, requests, 0.4);
    int status;
    assert_true(end_child(f.child, &status));
    assert_int_equal(f.fired, 0);
    assert_non_null(strstr(log, "ignoring a request that is not JSON: not json"));
    assert_non_null(strstr(log, "ignoring a request that has no pid"));
    assert_non_null(strstr(log, "ignoring a request that has no scope_id"));
    assert_non_null(strstr(log, "further malformed requests are not said"));
    assert_non_null(strstr(log, "watchdog timer 'quiet' of pid "));
    assert_non_null(strstr(log, "it names no signal: nothing is done"));
    assert_non_null(strstr(log, "watchdog timer 'odd' of local rank 3"));
    assert_non_null(strstr(log, "unable to send it SIG999"));
    assert_null(strstr(log, "'far'"));
    free(log);
}

/* A request's text is the worker's: its escape sequences are shown as \xNN, in the
 * malformed request's line and in the scope (the log's and the report's). */
static void test_escapes_are_shown_escaped(void **state)
{
    fixture_t f = {.child = start_child()};
    char set[256];
    request(set, sizeof set, f.child, "a\\u001b[2Jb", ddp_clock_wall() + 0.1, SIGTERM);
    const char *requests[] = {"\x1b]0;owned\x07 not json", set, NULL};
    char *log = run(&f, requests, 0.6);
    int status = 0;
    assert_false(end_child(f.child, &status));
    assert_int_equal(f.fired, 1);
    assert_string_equal(f.scope, "a\\x1b[2Jb");
    assert_non_null(
        strstr(log, "ignoring a request that is not JSON: \\x1b]0;owned\\x07 not json"));
    assert_non_null(strstr(log, "watchdog timer 'a\\x1b[2Jb' of local rank 3"));
    assert_null(strchr(log, '\x1b'));
    assert_null(strchr(log, '\x07'));
    free(log);
}

/* A worker's text in a message is bounded: a scope of 1,500 carriage returns is shown as
 * its first 200 bytes (each \x0d) and "...", and so is a malformed request's line. */
static void test_long_scope_is_cut(void **state)
{
    fixture_t f = {.child = start_child()};
    char scope[3001], set[3200], junk[2001];
    for (int i = 0; i < 1500; i++)
        memcpy(scope + 2 * i, "\\r", 2);
    scope[3000] = '\0';
    memset(junk, '\r', 2000);
    junk[2000] = '\0';
    request(set, sizeof set, f.child, scope, ddp_clock_wall() + 0.1, SIGTERM);
    const char *requests[] = {junk, set, NULL};
    char *log = run(&f, requests, 0.6);
    int status = 0;
    assert_false(end_child(f.child, &status));
    assert_int_equal(f.fired, 1);
    const char *said = strstr(log, "watchdog timer '"), *end = NULL;
    assert_non_null(said);
    said += strlen("watchdog timer '");
    assert_non_null(end = strstr(said, "' of local rank 3"));
    assert_int_equal(end - said, 200 * 4 + 3);
    assert_memory_equal(end - 7, "\\x0d...", 7);
    said = strstr(log, "ignoring a request that is not JSON: ");
    assert_non_null(said);
    said += strlen("ignoring a request that is not JSON: ");
    assert_int_equal(strcspn(said, "\n"), 200 * 4 + 3);
    assert_null(strchr(log, '\r'));
    free(log);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_expiry_signals_the_process),
        cmocka_unit_test(test_released_timer_does_nothing),
        cmocka_unit_test(test_postponed_timer_fires_later),
        cmocka_unit_test(test_foreign_pid_is_never_signalled),
        cmocka_unit_test(test_odd_requests_are_harmless),
        cmocka_unit_test(test_escapes_are_shown_escaped),
        cmocka_unit_test(test_long_scope_is_cut),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
