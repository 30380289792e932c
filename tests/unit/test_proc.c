/* Unit tests of launcher/host/proc.c's bounded helper run (ddp_proc_run_bounded): its time
 * limit holds however short, its process group gone at the end. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "io.h"
#include "host/proc.h"

#include <errno.h>
#include <signal.h>
#include <sys/wait.h>

/* A limit that runs out before the child has made its process group (0 s): the group is
 * made by the parent too, so the kill at the deadline reaches it and the run ends at once
 * (the kill found no group and the run waited for the whole command). */
static void test_limit_shorter_than_the_start(void **state)
{
    (void)state;
    for (int i = 0; i < 10; i++) {
        char *argv[] = {"/bin/sleep", "3", NULL};
        char tail[64];
        size_t kept = 0;
        int status = 0;
        double started = ddp_clock_mono();
        int rc = ddp_proc_run_bounded(argv, false, 0, tail, sizeof tail, &kept, &status);
        double took = ddp_clock_mono() - started;
        if (rc != 1 || took > 1)
            fail_msg("run %d: rc %d after %.2f s, expected 1 (time ran out) at once", i, rc, took);
        assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    }
}

/* A command that ends in time: its status, and its last stderr bytes. */
static void test_status_and_tail(void **state)
{
    (void)state;
    char *argv[] = {"/bin/sh", "-c", "echo one >&2; echo two >&2; exit 3", NULL};
    char tail[64];
    size_t kept = 0;
    int status = 0;
    assert_int_equal(ddp_proc_run_bounded(argv, false, 10, tail, sizeof tail, &kept, &status), 0);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 3);
    char line[64];
    ddp_proc_last_line(tail, kept, line, sizeof line);
    assert_string_equal(line, "two");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_limit_shorter_than_the_start),
        cmocka_unit_test(test_status_and_tail),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
