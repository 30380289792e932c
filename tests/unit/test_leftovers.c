/* Unit tests of what the workers leave behind (launcher/agent/leftovers.c), at the group's
 * end: a process left in a worker's process group, or in a session of its own (the
 * launcher a child subreaper, it comes to it once the worker has ended), gets SIGTERM and
 * a grace; one that ignores SIGTERM gets SIGKILL once the grace is over; either way the
 * agent hears of the end (ops->leftovers_done); with nothing left the group's end goes on
 * at once; libddp's shared memory a worker left goes. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "agent/leftovers.h"
#include "agent/worker_start.h"
#include "group_fixture.h"
#include "io.h"
#include "shm_name.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

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
    ddp_leftovers_close(t->l);
    ddp_worker_start_close(t->start);
    gf_free(&t->f);
    ddp_leftovers_free(t->l);
    ddp_worker_start_free(t->start);
    free(t);
    return 0;
}

/* A worker (its own group) that starts a process, in a session of its own where
 * `own_session`, which ignores SIGTERM where `stubborn`, and exits; reaped here. The
 * process it left. */
static pid_t worker_leaving_one(group_fixture_t *f, bool own_session, bool stubborn)
{
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t worker = fork();
    assert_true(worker >= 0);
    if (worker == 0) {
        setpgid(0, 0);
        pid_t left = fork();
        if (left == 0) {
            if (own_session)
                setsid();
            if (stubborn)
                signal(SIGTERM, SIG_IGN);
            pid_t self = getpid();
            (void)!write(fds[1], &self, sizeof self);
            for (int k = 0; k < 300; k++) /* at most 30 s */
                usleep(100 * 1000);
            _exit(0);
        }
        _exit(left > 0 ? 0 : 1);
    }
    setpgid(worker, worker);
    close(fds[1]);
    pid_t left = 0;
    assert_int_equal(read(fds[0], &left, sizeof left), (ssize_t)sizeof left);
    close(fds[0]);
    int status = 0;
    assert_int_equal(waitpid(worker, &status, 0), worker);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    f->g.workers[0].pid = worker; /* ended: its pid stays until the group's end */
    return left;
}

/* The adopted process `pid` has ended and been reaped (as after a SIGCHLD). */
static bool reaped(ddp_leftovers_t *l, pid_t pid)
{
    ddp_leftovers_reap_adopted(l);
    return kill(pid, 0) != 0;
}

static bool done(const group_fixture_t *f)
{
    return f->leftovers_done > 0;
}

static void test_nothing_left(void **state)
{
    leftovers_fixture_t *t = *state;
    pid_t worker = fork();
    assert_true(worker >= 0);
    if (worker == 0) {
        setpgid(0, 0);
        _exit(0);
    }
    setpgid(worker, worker);
    assert_int_equal(waitpid(worker, NULL, 0), worker);
    t->f.g.workers[0].pid = worker;
    assert_false(ddp_leftovers_end(t->l));
    assert_int_equal(t->f.leftovers_done, 0);
}

static void test_left_in_own_session(void **state)
{
    leftovers_fixture_t *t = *state;
    pid_t left = worker_leaving_one(&t->f, true, false);
    assert_true(ddp_leftovers_end(t->l));
    assert_true(gf_run_until(&t->f, done, 5));
    assert_true(reaped(t->l, left));
    char *log = gf_log(&t->f), expected[200];
    snprintf(expected, sizeof expected,
             "ending 1 process(es) the workers left in sessions or process groups of their "
             "own: pid %d",
             (int)left);
    assert_non_null(strstr(log, expected));
    assert_non_null(strstr(log, "SIGTERM, SIGKILL after 2 s"));
    free(log);
}

/* A process left in the worker's own process group: SIGTERM to the group, and one that
 * ignores it is sent SIGKILL once the grace is over. */
static void test_stubborn_in_the_group(void **state)
{
    leftovers_fixture_t *t = *state;
    pid_t left = worker_leaving_one(&t->f, false, true);
    double began = ddp_clock_mono();
    assert_true(ddp_leftovers_end(t->l));
    assert_true(ddp_leftovers_end(t->l)); /* (a second end waits with the first) */
    assert_true(gf_run_until(&t->f, done, 10));
    assert_true(ddp_clock_mono() - began >= 1.9);
    int status = 0;
    assert_int_equal(waitpid(left, &status, 0), left);
    assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    char *log = gf_log(&t->f);
    assert_non_null(strstr(log, "left processes behind in its process group that did not end "
                                "within 2 s of SIGTERM: sending them SIGKILL"));
    free(log);
}

/* A signal cuts the grace short. */
static void test_cut_short(void **state)
{
    leftovers_fixture_t *t = *state;
    pid_t left = worker_leaving_one(&t->f, true, true);
    assert_false(ddp_leftovers_cut_short(t->l));
    assert_true(ddp_leftovers_end(t->l));
    double began = ddp_clock_mono();
    assert_true(ddp_leftovers_cut_short(t->l));
    assert_true(gf_run_until(&t->f, done, 5));
    assert_true(ddp_clock_mono() - began < 1.5);
    assert_int_equal(waitpid(left, NULL, 0), left);
}

/* libddp's segments a worker left in /dev/shm (named after its pid) are removed. */
static void test_shared_memory_removed(void **state)
{
    leftovers_fixture_t *t = *state;
    t->f.g.workers[0].pid = 999999; /* a pid no process has */
    char name[64];
    snprintf(name, sizeof name, "/" DDP_SHM_PID_PREFIX "ring", 999999);
    int fd = shm_open(name, O_CREAT | O_RDWR | O_CLOEXEC, 0600);
    assert_true(fd >= 0);
    close(fd);
    ddp_leftovers_remove_shm(t->l);
    assert_true(shm_open(name, O_RDWR | O_CLOEXEC, 0600) < 0);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_nothing_left, setup, teardown),
        cmocka_unit_test_setup_teardown(test_left_in_own_session, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stubborn_in_the_group, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cut_short, setup, teardown),
        cmocka_unit_test_setup_teardown(test_shared_memory_removed, setup, teardown),
    };
    if (argc > 1)
        cmocka_set_test_filter(argv[1]);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
