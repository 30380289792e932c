/* Unit tests of hang reports on the agent's side (launcher/agent/hang_watch.c), one node, with
 * real child processes as workers: --hang-timeout finds workers that make no progress, the
 * report is printed and kept, and the attempt stops as a failure of the ranks it names;
 * a failure met during a report waits for its end; one report an attempt; a cancelled
 * report asks nothing of the agent. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "agent/hang_watch.h"
#include "agent/pause.h"
#include "group_fixture.h"
#include "io.h"

#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct {
    group_fixture_t f;
    ddp_pause_t *pause;
    ddp_hang_watch_t *hang;
} hang_fixture_t;

static void setup(hang_fixture_t *h, int nworkers)
{
    gf_init(&h->f, nworkers);
    for (int i = 0; i < nworkers; i++)
        gf_start_worker(&h->f, i);
    assert_int_equal(ddp_pause_new(&h->f.g, &h->pause), 0);
    assert_int_equal(ddp_hang_watch_new(&h->f.g, h->pause, &h->hang), 0);
}

static void teardown(hang_fixture_t *h)
{
    ddp_hang_watch_close(h->hang);
    ddp_pause_close(h->pause);
    gf_free(&h->f);
    ddp_hang_watch_free(h->hang);
    ddp_pause_free(h->pause);
}

static bool stopped(const group_fixture_t *f)
{
    return f->stops > 0 || f->fail_rounds > 0;
}

static void test_timeout_stops_the_attempt(void **state)
{
    (void)state;
    hang_fixture_t h;
    setup(&h, 2);
    h.f.cfg.hang_timeout = 0.3;
    ddp_hang_watch_attempt(h.hang);
    assert_true(ddp_hang_watch_may_begin(h.hang));
    /* The loop held for a second (a busy launcher's): its first look finds the workers
     * quiet that long, and the message says so, with the timeout as the limit. */
    (void)poll(NULL, 0, 1000);
    assert_true(gf_run_until(&h.f, stopped, 10));
    assert_int_equal(h.f.stops, 1);
    assert_int_equal(h.f.stop_signal, SIGTERM);
    assert_int_equal(h.f.stop_reason, DDP_STOP_FAILURE);
    assert_false(ddp_hang_watch_reporting(h.hang));
    assert_false(ddp_hang_watch_may_begin(h.hang)); /* one report an attempt */
    /* Neither rank waits in a collective: both are the hang's. */
    for (int i = 0; i < 2; i++) {
        const char *named = ddp_hang_watch_named(h.hang, i);
        assert_non_null(named);
        const char *said = strstr(named, "the job hung (no progress for ");
        double quiet = 0, limit = 0;
        assert_non_null(said);
        assert_int_equal(sscanf(said + strlen("the job hung (no progress for "),
                                "%lf s, the limit %lf s): ", &quiet, &limit),
                         2);
        assert_true(quiet >= 1.0 && quiet < 10);
        assert_true(limit == 0.3);
        assert_non_null(strstr(named, "/hang_report.txt)"));
    }
    char *log = gf_log(&h.f), path[PATH_MAX];
    assert_non_null(strstr(log, "(--hang-timeout): collecting where every rank stands"));
    assert_non_null(strstr(log, "hang report (no rank has made progress for"));
    assert_non_null(strstr(log, "verdict: "));
    free(log);
    snprintf(path, sizeof path, "%s/hang_report.txt", h.f.g.attempt_dir);
    assert_int_equal(access(path, R_OK), 0);
    ddp_hang_watch_attempt(h.hang); /* the next attempt: names nobody yet */
    assert_true(ddp_hang_watch_may_begin(h.hang));
    assert_null(ddp_hang_watch_named(h.hang, 0));
    ddp_hang_watch_stop(h.hang);
    teardown(&h);
}

/* A failure during the report: its stop waits, and the round fails with it at the end
 * (not the stall's own stop). The ranks named by the caller are the hang's. */
static void test_failure_waits_for_the_report(void **state)
{
    (void)state;
    hang_fixture_t h;
    setup(&h, 2);
    h.f.cfg.hang_auto = true; /* (--hang-timeout=auto names its own ranks) */
    ddp_hang_watch_attempt(h.hang);
    bool named[2] = {false, true};
    ddp_hang_watch_begin(h.hang, DDP_HANG_STALLED, "rank 1 has made no step", 12, 2.5, named);
    assert_true(ddp_hang_watch_reporting(h.hang));
    ddp_failure_t *fl = &h.f.g.failures[h.f.g.nfailures++];
    assert_int_equal(
        ddp_failure_init(fl, 0, 0, h.f.g.workers[0].pid, W_EXITCODE(1, 0), ddp_clock_wall(), NULL),
        0);
    assert_true(ddp_hang_watch_defer_failure(h.hang, fl));
    assert_int_equal(h.f.fail_rounds, 0);
    assert_true(gf_run_until(&h.f, stopped, 10));
    assert_int_equal(h.f.fail_rounds, 1);
    assert_int_equal(h.f.first_failure, 0);
    assert_int_equal(h.f.stops, 0);
    assert_null(ddp_hang_watch_named(h.hang, 0));
    assert_non_null(
        strstr(ddp_hang_watch_named(h.hang, 1), "no progress for 12 s, the limit 2.5 s): "));
    teardown(&h);
}

/* A signal's cancel ends the report where it is: nothing is asked of the agent. */
static void test_cancel(void **state)
{
    (void)state;
    hang_fixture_t h;
    setup(&h, 1);
    ddp_hang_watch_attempt(h.hang);
    ddp_hang_watch_begin(h.hang, DDP_HANG_STALLED, "stalled", 1, 0.5, NULL);
    ddp_hang_watch_cancel(h.hang);
    assert_false(ddp_hang_watch_reporting(h.hang));
    gf_run_for(&h.f, 0.8);
    assert_int_equal(h.f.stops + h.f.fail_rounds + h.f.finished, 0);
    assert_false(ddp_hang_watch_may_begin(h.hang));
    teardown(&h);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_timeout_stops_the_attempt),
        cmocka_unit_test(test_failure_waits_for_the_report),
        cmocka_unit_test(test_cancel),
    };
    if (argc > 1)
        cmocka_set_test_filter(argv[1]);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
