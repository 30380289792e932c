/* Unit tests of what a launcher says of a job's end beside the report's table
 * (launcher/agent/end_notes.c): the report, the root cause's stderr tail where it went to its
 * log file only, the ranks the launcher's stop ended, the ranks that finished first (once
 * an attempt), and no OOM message for a worker the OOM killer did not end. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "agent/end_notes.h"
#include "group_fixture.h"
#include "io.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

static void test_report_and_stopped_ranks(void **state)
{
    (void)state;
    group_fixture_t f;
    gf_init(&f, 3);
    f.cfg.script = "train.py";
    f.g.program = "/usr/bin/python3";
    ddp_end_notes_t *n = NULL;
    assert_int_equal(ddp_end_notes_new(&f.g, &n), 0);
    ddp_end_notes_attempt(n);
    assert_int_equal(
        ddp_failure_init(&f.g.failures[0], 1, 1, 4242, W_EXITCODE(3, 0), ddp_clock_wall(), NULL),
        0);
    f.g.nfailures = 1;
    f.g.workers[0].stopped = f.g.workers[2].stopped = true;
    f.g.workers[2].stopped_error = strdup("RuntimeError: interrupted");
    f.g.sent_signal = SIGTERM;
    f.g.sent_sigkill = true;
    gf_capture_stderr(&f);
    ddp_end_notes_report(n, false);
    gf_release_stderr(&f);
    char *log = gf_log(&f);
    assert_non_null(strstr(log, "train.py FAILED"));
    assert_non_null(strstr(log, "exitcode  : 3 (pid: 4242)"));
    assert_non_null(strstr(log, "stopped by ddp-launch, not failures of their own: ranks 0, 2 "
                                "(SIGTERM, then SIGKILL)"));
    assert_non_null(strstr(log, "rank 2, stopped, had written its own error.json first: "
                                "RuntimeError: interrupted"));
    free(log);
    free(f.g.workers[2].stopped_error);
    ddp_end_notes_close(n);
    gf_free(&f);
    ddp_end_notes_free(n);
}

/* --redirects 2 without --tee: the root cause's last 10 lines of stderr follow the report;
 * another node's failure has its files there, and a report elsewhere is only named. */
static void test_stderr_tail(void **state)
{
    (void)state;
    group_fixture_t f;
    gf_init(&f, 1);
    f.cfg.script = "train.py";
    f.cfg.redirects.all = DDP_STD_ERR;
    f.g.program = "/usr/bin/python3";
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/0/stderr.log", f.g.attempt_dir);
    FILE *file = fopen(path, "w");
    for (int i = 1; i <= 12; i++)
        fprintf(file, "line %d\n", i);
    fclose(file);
    ddp_end_notes_t *n = NULL;
    assert_int_equal(ddp_end_notes_new(&f.g, &n), 0);
    assert_int_equal(
        ddp_failure_init(&f.g.failures[0], 0, 0, 99, W_EXITCODE(1, 0), ddp_clock_wall(), NULL), 0);
    f.g.nfailures = 1;
    gf_capture_stderr(&f);
    ddp_end_notes_report(n, false);
    gf_release_stderr(&f);
    char *log = gf_log(&f);
    assert_non_null(strstr(log, "the last lines of rank 0's stderr"));
    assert_null(strstr(log, "  | line 2\n"));
    assert_non_null(strstr(log, "  | line 3\n"));
    assert_non_null(strstr(log, "  | line 12\n"));
    free(log);
    ddp_end_notes_close(n);
    gf_free(&f);
    ddp_end_notes_free(n);
}

/* The ranks of this node that finished before the round failed elsewhere: said once an
 * attempt, and not where this node's own report says what failed. */
static void test_left_early_once(void **state)
{
    (void)state;
    group_fixture_t f;
    gf_init(&f, 2);
    ddp_end_notes_t *n = NULL;
    assert_int_equal(ddp_end_notes_new(&f.g, &n), 0);
    ddp_end_notes_attempt(n);
    ddp_end_notes_left_early(n); /* nothing finished yet */
    f.g.workers[1].succeeded = true;
    f.g.first_succeeded = ddp_clock_mono() - 2;
    ddp_end_notes_left_early(n);
    ddp_end_notes_left_early(n);
    char *log = gf_log(&f);
    const char *said = "rank 1 had finished (exit 0) 2.0 s before the round failed on another node";
    char *first = strstr(log, said);
    assert_non_null(first);
    assert_null(strstr(first + 1, said));
    free(log);
    ddp_end_notes_attempt(n); /* a new attempt may say it again */
    ddp_end_notes_left_early(n);
    log = gf_log(&f);
    assert_non_null(strstr(strstr(log, said) + 1, "had finished (exit 0)"));
    free(log);
    ddp_end_notes_close(n);
    gf_free(&f);
    ddp_end_notes_free(n);
}

/* No OOM message for a worker that exited, was killed by another signal, or was killed by
 * the launcher's own SIGKILL. */
static void test_no_oom_message_for_others(void **state)
{
    (void)state;
    group_fixture_t f;
    gf_init(&f, 1);
    ddp_end_notes_t *n = NULL;
    assert_int_equal(ddp_end_notes_new(&f.g, &n), 0);
    ddp_end_notes_attempt(n);
    assert_null(ddp_end_notes_oom_message(n, &f.g.workers[0], W_EXITCODE(137, 0)));
    assert_null(ddp_end_notes_oom_message(n, &f.g.workers[0], SIGTERM));
    f.g.sent_sigkill = true;
    assert_null(ddp_end_notes_oom_message(n, &f.g.workers[0], SIGKILL));
    ddp_end_notes_close(n);
    gf_free(&f);
    ddp_end_notes_free(n);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_report_and_stopped_ranks),
        cmocka_unit_test(test_stderr_tail),
        cmocka_unit_test(test_left_early_once),
        cmocka_unit_test(test_no_oom_message_for_others),
    };
    if (argc > 1)
        cmocka_set_test_filter(argv[1]);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
