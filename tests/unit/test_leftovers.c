/* Unit tests of what the workers leave behind (launcher/agent/leftovers.c): the launcher a
 * child subreaper, a process a worker started in a session of its own comes to it once the
 * worker has ended; at the group's end it is found, named and ended (SIGTERM, then SIGKILL
 * for one that outlived the grace), and what ended is reaped. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "agent/leftovers.h"
#include "agent/worker_start.h"
#include "group_fixture.h"
#include "io.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* A worker (its own group) that starts a process in a session of its own, which ignores
 * SIGTERM where `stubborn`, writes its pid to fds[1], and exits; reaped here. The escaped
 * process's pid. */
static pid_t worker_leaving_one(group_fixture_t *f, bool stubborn)
{
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t worker = fork();
    assert_true(worker >= 0);
    if (worker == 0) {
        setpgid(0, 0);
        pid_t escaped = fork();
        if (escaped == 0) {
            setsid();
            if (stubborn)
                signal(SIGTERM, SIG_IGN);
            pid_t self = getpid();
            (void)!write(fds[1], &self, sizeof self);
            for (int k = 0; k < 300; k++) /* at most 30 s */
                usleep(100 * 1000);
            _exit(0);
        }
        _exit(escaped > 0 ? 0 : 1);
    }
    close(fds[1]);
    pid_t escaped = 0;
    assert_int_equal(read(fds[0], &escaped, sizeof escaped), (ssize_t)sizeof escaped);
    close(fds[0]);
    int status = 0;
    assert_int_equal(waitpid(worker, &status, 0), worker);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    f->g.workers[0].pid = worker; /* ended: its pid stays until the group's end */
    return escaped;
}

/* Whether `pid` has ended and been reaped (by the part, as after a SIGCHLD) within 5 s. */
static bool reaped(ddp_leftovers_t *l, pid_t pid)
{
    double deadline = ddp_clock_mono() + 5;
    while (kill(pid, 0) == 0 && ddp_clock_mono() < deadline) {
        ddp_leftovers_reap_adopted(l);
        usleep(10 * 1000);
    }
    return kill(pid, 0) != 0;
}

typedef struct {
    group_fixture_t f;
    ddp_worker_start_t *start; /* whose zygote (none) is left alone */
    ddp_leftovers_t *l;
} leftovers_fixture_t;

static int setup(void **state)
{
    leftovers_fixture_t *t = calloc(1, sizeof *t);
    assert_non_null(t);
    gf_init(&t->f, 1);
    t->f.g.subreaper = ddp_leftovers_become_subreaper(&t->f.log);
    assert_true(t->f.g.subreaper);
    assert_int_equal(ddp_worker_start_new(&t->f.g, &t->start), 0);
    assert_int_equal(ddp_leftovers_new(&t->f.g, t->start, &t->l), 0);
    *state = t;
    return 0;
}

static int teardown(void **state)
{
    leftovers_fixture_t *t = *state;
    t->f.g.workers[0].pid = 0; /* (reaped) */
    ddp_worker_start_close(t->start);
    gf_free(&t->f);
    ddp_leftovers_free(t->l);
    ddp_worker_start_free(t->start);
    free(t);
    return 0;
}

static void test_escaped_process_ended(void **state)
{
    leftovers_fixture_t *t = *state;
    group_fixture_t *f = &t->f;
    ddp_leftovers_t *l = t->l;
    pid_t escaped = worker_leaving_one(f, false);
    assert_int_equal(ddp_leftovers_escaped(l, false, 2.0), 1);
    assert_true(reaped(l, escaped));
    assert_int_equal(ddp_leftovers_escaped(l, false, 2.0), 0);
    char *log = gf_log(f), expected[200];
    snprintf(expected, sizeof expected,
             "ending 1 process(es) the workers left in sessions or process groups of their "
             "own: pid %d",
             (int)escaped);
    assert_non_null(strstr(log, expected));
    assert_non_null(strstr(log, "SIGTERM, SIGKILL after 2 s"));
    free(log);
}

/* One that ignores SIGTERM is sent SIGKILL once the grace is over. */
static void test_stubborn_process_killed(void **state)
{
    leftovers_fixture_t *t = *state;
    ddp_leftovers_t *l = t->l;
    pid_t escaped = worker_leaving_one(&t->f, true);
    assert_int_equal(ddp_leftovers_escaped(l, false, 0.1), 1);
    usleep(200 * 1000);
    assert_int_equal(ddp_leftovers_escaped(l, false, 0.1), 1); /* it ignores SIGTERM */
    (void)ddp_leftovers_escaped(l, true, 0.1);
    assert_int_equal(waitpid(escaped, NULL, 0), escaped);
    char *log = gf_log(&t->f);
    assert_non_null(strstr(log, "did not end within 0.1 s of SIGTERM"));
    free(log);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_escaped_process_ended, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stubborn_process_killed, setup, teardown),
    };
    if (argc > 1)
        cmocka_set_test_filter(argv[1]);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
