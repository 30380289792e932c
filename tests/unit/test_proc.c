/* Unit tests of launcher/host/proc.c's bounded helper run (ddp_proc_run_bounded): its time
 * limit holds however short, its process group gone at the end. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "error.h"
#include "io.h"
#include "host/proc.h"

#include <errno.h>
#include <signal.h>
#include <unistd.h>
#include <sys/stat.h>
#include <string.h>
#include <stdio.h>
#include <stdlib.h>
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

/* A command that exits while a job it started in a session of its own still holds its
 * stderr: its end is its exit, not the pipe's (the run waited for the pipe, and ran into
 * its limit with the command long gone). */
static void test_end_is_the_exit(void **state)
{
    (void)state;
    char *argv[] = {"/bin/sh", "-c", "setsid sleep 5 & echo $! >&2; echo done >&2; exit 4", NULL};
    char tail[64];
    size_t kept = 0;
    int status = 0;
    double started = ddp_clock_mono();
    int rc = ddp_proc_run_bounded(argv, false, 3, tail, sizeof tail - 1, &kept, &status);
    double took = ddp_clock_mono() - started;
    tail[kept] = '\0';
    pid_t job = (pid_t)atoi(tail);
    if (job > 0)
        kill(job, SIGKILL);
    if (rc != 0 || took > 2)
        fail_msg("rc %d after %.2f s, expected 0 at the command's exit", rc, took);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 4);
    char line[64];
    ddp_proc_last_line(tail, kept, line, sizeof line);
    assert_string_equal(line, "done");
}

/* A file read by a child within a bound: what it holds, no such file, too big, not a
 * regular file (never waited on). */
static void test_read_file_bounded(void **state)
{
    (void)state;
    char dir[] = "/tmp/ddp-proc-XXXXXX", path[64], fifo[64];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/f", dir);
    snprintf(fifo, sizeof fifo, "%s/p", dir);
    FILE *f = fopen(path, "w");
    fputs("1234\n", f);
    fclose(f);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    char *text = NULL;
    size_t len = 0;
    assert_int_equal(ddp_proc_read_file_bounded(path, 64, 5, -1, &text, &len), 0);
    assert_int_equal(len, 5);
    assert_string_equal(text, "1234\n");
    free(text);
    text = NULL;
    assert_int_equal(ddp_proc_read_file_bounded(path, 3, 5, -1, &text, &len), DDP_ETOOBIG);
    assert_null(text);
    assert_int_equal(ddp_proc_read_file_bounded(fifo, 64, 5, -1, &text, &len), DDP_ENOTFILE);
    unlink(path);
    assert_int_equal(ddp_proc_read_file_bounded(path, 64, 5, -1, &text, &len), -ENOENT);
    assert_null(text);
    unlink(fifo);
    rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_limit_shorter_than_the_start),
        cmocka_unit_test(test_status_and_tail),
        cmocka_unit_test(test_end_is_the_exit),
        cmocka_unit_test(test_read_file_bounded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
