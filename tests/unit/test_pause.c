/* Unit tests of the terminal's signals on the agent's side (launcher/agent/pause.c):
 * another node's Ctrl-Z stops this node's running workers until it continues, the time
 * stopped is nobody's quiet time, and this node's own pause of the job (its news coming
 * back) leaves its workers to its own Ctrl-Z. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "agent/pause.h"
#include "group_fixture.h"
#include "io.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Waits up to 5 s for process `pid` to be in state `want` ('T' stopped, else running or
 * sleeping). */
static bool in_state(pid_t pid, char want)
{
    char path[64], *text = NULL;
    size_t len;
    double deadline = ddp_clock_mono() + 5;
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    for (;;) {
        bool stopped = false;
        if (ddp_read_file(path, 4096, &text, &len) == 0) {
            const char *end = strrchr(text, ')');
            stopped = end != NULL && end[1] == ' ' && end[2] == 'T';
        }
        free(text);
        text = NULL;
        if (stopped == (want == 'T') || ddp_clock_mono() > deadline)
            return stopped == (want == 'T');
        usleep(10 * 1000);
    }
}

static void test_remote_pause_stops_and_continues(void **state)
{
    (void)state;
    group_fixture_t f;
    gf_init(&f, 2);
    gf_start_worker(&f, 0);
    gf_start_worker(&f, 1);
    ddp_pause_t *p = NULL;
    assert_int_equal(ddp_pause_new(&f.g, &p), 0);
    assert_false(ddp_pause_stopped(p));
    assert_true(ddp_pause_resumed_at(p) == 0);
    ddp_pause_remote(p, true, false, "node 1 (hostb)");
    assert_true(ddp_pause_stopped(p));
    assert_true(in_state(f.g.workers[0].pid, 'T'));
    assert_true(in_state(f.g.workers[1].pid, 'T'));
    double before = ddp_clock_mono();
    ddp_pause_remote(p, false, false, "node 1 (hostb)");
    assert_false(ddp_pause_stopped(p));
    assert_true(ddp_pause_resumed_at(p) >= before);
    assert_true(in_state(f.g.workers[0].pid, 'R'));
    assert_true(in_state(f.g.workers[1].pid, 'R'));
    char *log = gf_log(&f);
    assert_non_null(strstr(log, "node 1 (hostb) was stopped (Ctrl-Z there): this node's 2 "
                                "worker(s) stop with it until it continues"));
    assert_non_null(strstr(log, "node 1 (hostb) continued: so do this node's workers"));
    free(log);
    ddp_pause_close(p);
    gf_free(&f);
    ddp_pause_free(p);
}

/* The job's pause of this node's own Ctrl-Z: its news stops nothing here (its own stop
 * does), and its end continues only what a pause here stopped. */
static void test_own_pause_news(void **state)
{
    (void)state;
    group_fixture_t f;
    gf_init(&f, 1);
    gf_start_worker(&f, 0);
    ddp_pause_t *p = NULL;
    assert_int_equal(ddp_pause_new(&f.g, &p), 0);
    ddp_pause_remote(p, true, true, "this node");
    assert_false(ddp_pause_stopped(p));
    assert_true(in_state(f.g.workers[0].pid, 'R'));
    ddp_pause_remote(p, false, true, "this node");
    assert_false(ddp_pause_stopped(p));
    assert_true(ddp_pause_resumed_at(p) == 0); /* nothing was stopped, nothing continued */
    ddp_pause_close(p);
    gf_free(&f);
    ddp_pause_free(p);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_remote_pause_stops_and_continues),
        cmocka_unit_test(test_own_pause_news),
    };
    if (argc > 1)
        cmocka_set_test_filter(argv[1]);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
