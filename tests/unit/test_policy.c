/* Unit tests of the restart policy (launcher/agent/policy.c): what comes after a
 * group's end by its stop, and the judgement of a failed attempt that would go on (no
 * progress: status 6; --exclude-after and --straggler-action=exclude: this node leaves). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "agent/policy.h"
#include "group_fixture.h"
#include "io.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* A failure of local rank `i` (exit `code`, `message` its error's text or NULL) at `at` s
 * after the attempt began. */
static void add_failure(group_fixture_t *f, int i, int code, const char *message, double at)
{
    ddp_failure_t *fl = &f->g.failures[f->g.nfailures++];
    assert_int_equal(
        ddp_failure_init(fl, i, i, 100 + i, W_EXITCODE(code, 0), f->g.attempt_began + at, NULL), 0);
    if (message != NULL)
        fl->message = strdup(message);
}

static void clear_failures(group_fixture_t *f)
{
    for (size_t i = 0; i < f->g.nfailures; i++)
        ddp_failure_free(&f->g.failures[i]);
    f->g.nfailures = 0;
}

/* A fake rendezvous: the policy only asks whether there is one (no straggler asked of it). */
static ddp_rdzv_t *multi_node(void)
{
    static char stand_in;
    return (ddp_rdzv_t *)(void *)&stand_in;
}

typedef struct {
    group_fixture_t f;
    ddp_policy_t *p; /* made by the test, once its configuration is set */
} policy_fixture_t;

static int setup(void **state)
{
    policy_fixture_t *t = calloc(1, sizeof *t);
    assert_non_null(t);
    gf_init(&t->f, 2);
    t->f.cfg.max_no_progress = 0;
    *state = t;
    return 0;
}

static int teardown(void **state)
{
    policy_fixture_t *t = *state;
    t->f.g.rdzv = NULL;
    t->f.g.coord = NULL;
    ddp_policy_free(t->p);
    gf_free(&t->f);
    free(t);
    return 0;
}

/* The policy of the fixture's group, as configured now. */
static ddp_policy_t *policy(policy_fixture_t *t)
{
    assert_int_equal(ddp_policy_new(&t->f.g, &t->p), 0);
    return t->p;
}

static void test_next_by_stop(void **state)
{
    policy_fixture_t *t = *state;
    group_fixture_t *f = &t->f;
    f->cfg.max_restarts = 1;
    ddp_policy_t *p = policy(t);
    ddp_policy_decision_t d;
    f->g.stop_reason = DDP_STOP_NONE;
    ddp_policy_next(p, &d);
    assert_int_equal(d.kind, DDP_POLICY_END);
    assert_int_equal(d.status, 0);
    f->g.stop_reason = DDP_STOP_SIGNAL;
    f->g.stop_signal = SIGINT;
    ddp_policy_next(p, &d);
    assert_int_equal(d.kind, DDP_POLICY_END);
    assert_int_equal(d.status, 128 + SIGINT);
    f->g.stop_reason = DDP_STOP_LAUNCH_ERROR;
    ddp_policy_next(p, &d);
    assert_int_equal(d.status, DDP_EXIT_LAUNCH_FAILED);
    f->g.stop_reason = DDP_STOP_ABORTED;
    f->g.abort_exit_code = 5;
    ddp_policy_next(p, &d);
    assert_int_equal(d.status, 5);
    /* A failure with a restart left: the next attempt; without: status 1, or the root
     * cause's own with --exit-code=worker. */
    add_failure(f, 1, 7, NULL, 1);
    f->g.stop_reason = DDP_STOP_FAILURE;
    ddp_policy_next(p, &d);
    assert_int_equal(d.kind, DDP_POLICY_RESTART);
    assert_true(d.after_failure);
    f->g.attempt = 1;
    ddp_policy_next(p, &d);
    assert_int_equal(d.kind, DDP_POLICY_END);
    assert_int_equal(d.status, 1);
    f->cfg.exit_code_mode = DDP_EXIT_CODE_WORKER;
    ddp_policy_next(p, &d);
    assert_int_equal(d.status, 7);
    /* Several nodes: the rendezvous decides, after a failure or a success alike. */
    f->g.rdzv = multi_node();
    ddp_policy_next(p, &d);
    assert_int_equal(d.kind, DDP_POLICY_GO_ON);
    assert_true(d.after_failure);
    f->g.stop_reason = DDP_STOP_NONE;
    ddp_policy_next(p, &d);
    assert_int_equal(d.kind, DDP_POLICY_GO_ON);
    assert_false(d.after_failure);
}

static int reads_wanted;

static bool reads_done(const group_fixture_t *f)
{
    return f->progress_read >= reads_wanted;
}

/* The group's end reads --progress-file off the loop: waits for the read to come back. */
static void measure(group_fixture_t *f, ddp_policy_t *p)
{
    reads_wanted = f->progress_read + 1;
    assert_true(ddp_policy_measure(p));
    assert_true(gf_run_until(f, reads_done, 10));
}

/* --progress-file that does not advance: the K-th failed attempt in a row ends the job
 * with status 6, said; one that advances starts the count again. */
static void test_progress_file_not_advancing(void **state)
{
    policy_fixture_t *t = *state;
    group_fixture_t *f = &t->f;
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/progress", f->dir);
    FILE *file = fopen(path, "w");
    fputs("100\n", file);
    fclose(file);
    f->cfg.progress_file = path;
    f->cfg.max_restarts = 10;
    f->cfg.max_no_progress = 2;
    ddp_policy_t *p = policy(t);
    ddp_policy_begin(p); /* 100: where the job starts */
    ddp_policy_decision_t d;
    f->g.stop_reason = DDP_STOP_FAILURE;
    add_failure(f, 0, 1, NULL, 30);
    measure(f, p);
    ddp_policy_next(p, &d);
    assert_false(ddp_policy_judge(p, false, &d)); /* 1 of 2 */
    file = fopen(path, "w");
    fputs("200\n", file);
    fclose(file);
    measure(f, p);
    ddp_policy_next(p, &d);
    assert_false(ddp_policy_judge(p, false, &d)); /* advanced: 0 of 2 */
    measure(f, p);
    ddp_policy_next(p, &d);
    assert_false(ddp_policy_judge(p, false, &d)); /* 1 of 2 */
    measure(f, p);
    ddp_policy_next(p, &d);
    assert_true(ddp_policy_judge(p, false, &d));
    assert_int_equal(d.kind, DDP_POLICY_END);
    assert_int_equal(d.status, DDP_EXIT_NO_PROGRESS);
    assert_non_null(strstr(d.why, "2 attempt(s) in a row failed without progress "
                                  "(--progress-file did not advance)"));
    char *log = gf_log(f);
    assert_non_null(strstr(log, "the job ends with status 6 (do not requeue) once 2 attempts"));
    assert_non_null(strstr(log, d.why));
    free(log);
}

/* Where nothing tells progress, attempts that fail the same way at their start count; one
 * that fails later, or otherwise, does not. */
static void test_same_failure_at_start(void **state)
{
    policy_fixture_t *t = *state;
    group_fixture_t *f = &t->f;
    f->cfg.max_restarts = 10;
    f->cfg.max_no_progress = 2;
    ddp_policy_t *p = policy(t);
    ddp_policy_decision_t d;
    f->g.stop_reason = DDP_STOP_FAILURE;
    add_failure(f, 0, 1, "ValueError: bad config", 1);
    ddp_policy_next(p, &d);
    assert_false(ddp_policy_judge(p, false, &d));
    clear_failures(f);
    add_failure(f, 0, 1, "ValueError: another config", 1);
    ddp_policy_next(p, &d);
    assert_false(ddp_policy_judge(p, false, &d)); /* another way: 1 again */
    clear_failures(f);
    add_failure(f, 0, 1, "ValueError: another config", 60);
    ddp_policy_next(p, &d);
    assert_false(ddp_policy_judge(p, false, &d)); /* not at its start: 0 */
    clear_failures(f);
    add_failure(f, 0, 1, "ValueError: another config", 1);
    ddp_policy_next(p, &d);
    assert_false(ddp_policy_judge(p, false, &d));
    ddp_policy_next(p, &d);
    assert_true(ddp_policy_judge(p, false, &d));
    assert_int_equal(d.status, DDP_EXIT_NO_PROGRESS);
    assert_non_null(strstr(d.why, "each the same way within 10 s of its start: exited with "
                                  "code 1: ValueError: another config"));
}

/* --exclude-after=2: a node whose workers failed in 2 rounds in a row leaves; a round
 * without a failure of its own starts the count again. */
static void test_exclude_after(void **state)
{
    policy_fixture_t *t = *state;
    group_fixture_t *f = &t->f;
    f->g.rdzv = multi_node();
    f->cfg.exclude_after = 2;
    ddp_policy_t *p = policy(t);
    ddp_policy_decision_t d;
    f->g.stop_reason = DDP_STOP_FAILURE;
    add_failure(f, 0, 1, NULL, 30);
    ddp_policy_next(p, &d);
    assert_false(ddp_policy_judge(p, false, &d));
    clear_failures(f);
    f->g.stop_reason = DDP_STOP_REMOTE; /* another node's failure: none of ours */
    ddp_policy_next(p, &d);
    assert_false(ddp_policy_judge(p, false, &d));
    add_failure(f, 0, 1, NULL, 30);
    ddp_policy_next(p, &d);
    assert_false(ddp_policy_judge(p, false, &d));
    ddp_policy_next(p, &d);
    assert_true(ddp_policy_judge(p, false, &d));
    assert_int_equal(d.kind, DDP_POLICY_LEAVE);
    assert_int_equal(d.status, DDP_EXIT_RDZV_FAILED);
    assert_string_equal(d.why, "its workers failed in 2 round(s) in a row (--exclude-after=2)");
}

/* --straggler-action=exclude: a node with a straggler leaves, unless it serves the store
 * (its leaving would end the job: said). */
static void test_straggler_leaves(void **state)
{
    policy_fixture_t *t = *state;
    group_fixture_t *f = &t->f;
    f->g.rdzv = multi_node();
    f->cfg.straggler_exclude = true;
    ddp_policy_t *p = policy(t);
    ddp_policy_decision_t d;
    f->g.stop_reason = DDP_STOP_REMOTE;
    f->g.coord = (ddp_rdzv_coord_t *)(void *)&d; /* serves the store */
    ddp_policy_next(p, &d);
    assert_false(ddp_policy_judge(p, true, &d));
    f->g.coord = NULL;
    ddp_policy_next(p, &d);
    assert_true(ddp_policy_judge(p, true, &d));
    assert_int_equal(d.kind, DDP_POLICY_LEAVE);
    char *log = gf_log(f);
    assert_non_null(strstr(log, "but this node serves the job's store: it stays"));
    assert_non_null(strstr(log, "it leaves the job at this restart"));
    free(log);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_next_by_stop, setup, teardown),
        cmocka_unit_test_setup_teardown(test_progress_file_not_advancing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_same_failure_at_start, setup, teardown),
        cmocka_unit_test_setup_teardown(test_exclude_after, setup, teardown),
        cmocka_unit_test_setup_teardown(test_straggler_leaves, setup, teardown),
    };
    if (argc > 1)
        cmocka_set_test_filter(argv[1]);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
