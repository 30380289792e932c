/* Unit tests of starting a worker on the agent's side (launcher/agent/worker_start.c): its
 * environment, torchrun's contract with the group's round in it; a cold start, and one
 * that fails; and --warm-restarts where it cannot apply (said, every worker cold). How a
 * cold and a warm worker compare is the integration test's (test_python.c). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "agent/worker_start.h"
#include "env.h"
#include "group_fixture.h"
#include "io.h"
#include "output/output.h"
#include "spawn/worker_env.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

static void test_environment(void **state)
{
    (void)state;
    group_fixture_t f;
    gf_init(&f, 2);
    f.cfg.nproc_per_node = 2;
    f.g.world_size = 6;
    f.g.nnodes = 3;
    f.g.group_rank = 2;
    f.g.rank_offset = 4;
    f.g.workers[1].rank = 5;
    f.g.attempt = 1;
    char **added = NULL, **envp = NULL;
    assert_int_equal(ddp_worker_start_env(&f.g, &f.g.workers[1], "/x/error.json", &added, &envp),
                     0);
    assert_string_equal(ddp_env_lookup(envp, "RANK"), "5");
    assert_string_equal(ddp_env_lookup(envp, "LOCAL_RANK"), "1");
    assert_string_equal(ddp_env_lookup(envp, "WORLD_SIZE"), "6");
    assert_string_equal(ddp_env_lookup(envp, "LOCAL_WORLD_SIZE"), "2");
    assert_string_equal(ddp_env_lookup(envp, "GROUP_RANK"), "2");
    assert_string_equal(ddp_env_lookup(envp, "TORCHELASTIC_RESTART_COUNT"), "1");
    assert_string_equal(ddp_env_lookup(envp, "TORCHELASTIC_ERROR_FILE"), "/x/error.json");
    assert_string_equal(ddp_env_lookup(envp, "MASTER_PORT"), "29500");
    assert_non_null(strstr(ddp_env_lookup(envp, "DDP_PROGRESS_RING"), "/attempt_0/1/"));
    ddp_strv_free(added);
    free(envp);
    gf_free(&f);
}

/* A cold start: the program with the worker's argv, its own process group, its
 * environment, its stdout into the attempt's log file (--redirects), what it holds to end
 * the agent's (prefix, error file). */
static void test_cold_start(void **state)
{
    (void)state;
    group_fixture_t f;
    gf_init(&f, 1);
    /* It leads its process group (field 5 of its stat), and has its rank ("$$": an argument
     * is a template, torchrun's ${local_rank}). */
    char *args[] = {"-c",
                    "[ \"$(cut -d' ' -f5 /proc/$$$$/stat)\" -eq $$$$ ] && echo rank=$RANK; exit 3"};
    f.cfg.no_python = true;
    f.cfg.script = "/bin/sh";
    f.cfg.script_args = args;
    f.cfg.nscript_args = 2;
    f.cfg.redirects.all = DDP_STD_OUT;
    f.g.program = "/bin/sh";
    f.g.workers[0].rank = 4;
    ddp_worker_start_t *s = NULL;
    assert_int_equal(ddp_worker_start_new(&f.g, &s), 0);
    ddp_worker_start_attempt(s);
    ddp_started_t started;
    assert_int_equal(ddp_worker_start_spawn(s, &f.g.workers[0], &started), 0);
    int status = 0;
    assert_int_equal(waitpid(started.pid, &status, 0), started.pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 3);
    assert_null(started.out); /* a file, not a pipe */
    assert_non_null(strstr(started.error_file, "/attempt_0/0/error.json"));
    assert_int_equal(ddp_worker_start_forked(s), 0);
    char path[PATH_MAX], *text = NULL;
    size_t len = 0;
    snprintf(path, sizeof path, "%s/0/stdout.log", f.g.attempt_dir);
    assert_int_equal(ddp_read_file(path, 4096, &text, &len), 0);
    assert_string_equal(text, "rank=4\n");
    free(text);
    free(started.prefix);
    free(started.error_file);
    ddp_output_discard(started.err);
    ddp_worker_start_close(s);
    gf_free(&f);
    ddp_worker_start_free(s);
}

/* A worker that cannot start says why. */
static void test_start_failure_said(void **state)
{
    (void)state;
    group_fixture_t f;
    gf_init(&f, 1);
    f.cfg.no_python = true;
    f.cfg.script = "prog";
    free(f.g.attempt_dir); /* its directory gone: the stream's log file cannot be made */
    f.cfg.redirects.all = DDP_STD_OUT;
    assert_true(asprintf(&f.g.attempt_dir, "%s/none", f.dir) > 0);
    f.g.program = "/bin/true";
    ddp_worker_start_t *s = NULL;
    assert_int_equal(ddp_worker_start_new(&f.g, &s), 0);
    ddp_started_t started;
    assert_true(ddp_worker_start_spawn(s, &f.g.workers[0], &started) < 0);
    char *log = gf_log(&f);
    assert_non_null(strstr(log, "unable to start worker local rank 0 (rank 0): its stdout and "
                                "stderr: "));
    free(log);
    ddp_worker_start_close(s);
    gf_free(&f);
    ddp_worker_start_free(s);
}

/* --warm-restarts for a program that is not Python: said, and no zygote. */
static void test_warm_needs_python(void **state)
{
    (void)state;
    group_fixture_t f;
    gf_init(&f, 1);
    f.cfg.warm_restarts = true;
    f.cfg.no_python = true;
    f.cfg.script = "./train";
    f.g.subreaper = true;
    ddp_worker_start_t *s = NULL;
    assert_int_equal(ddp_worker_start_new(&f.g, &s), 0);
    ddp_worker_start_zygote(s);
    assert_int_equal(ddp_worker_start_zygote_pid(s), 0);
    char *log = gf_log(&f);
    assert_non_null(strstr(log, "--warm-restarts: the workers are not Python (./train); "
                                "restarts start cold"));
    free(log);
    ddp_worker_start_close(s);
    gf_free(&f);
    ddp_worker_start_free(s);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_environment),
        cmocka_unit_test(test_cold_start),
        cmocka_unit_test(test_start_failure_said),
        cmocka_unit_test(test_warm_needs_python),
    };
    if (argc > 1)
        cmocka_set_test_filter(argv[1]);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
