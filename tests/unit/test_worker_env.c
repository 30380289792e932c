/* Unit tests of launcher/spawn/worker_spec.c: argv and the torchrun environment contract. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "config/cli.h"
#include "env.h"
#include "spawn/worker_env.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void config(ddp_launch_config_t *cfg, const char *args, char **envp)
{
    /* The config points into argv and its strings: both must outlive it. */
    static char text[512];
    static char *argv[32];
    int argc = 0;
    ddp_buf_t err = DDP_BUF_INIT;
    ddp_log_t log;
    ddp_log_init(&log, "test", DDP_LOG_ERROR);
    snprintf(text, sizeof text, "ddp-launch %s", args);
    for (char *tok = strtok(text, " "); tok && argc < 31; tok = strtok(NULL, " "))
        argv[argc++] = tok;
    argv[argc] = NULL;
    if (ddp_cli_parse(cfg, argc, argv, envp, &log, &err) != 0)
        fail_msg("%s: %s", args, ddp_buf_str(&err));
    ddp_buf_free(&err);
}

static void expect_argv(const char *args, char **envp, int local_rank, const char *expected)
{
    ddp_launch_config_t cfg;
    char **argv, joined[512] = "";
    config(&cfg, args, envp);
    assert_int_equal(ddp_worker_argv(&cfg, local_rank, &argv), 0);
    for (char **p = argv; *p; p++) {
        strcat(joined, p == argv ? "" : " ");
        strcat(joined, *p);
    }
    if (strcmp(joined, expected) != 0)
        fail_msg("%s: argv '%s', expected '%s'", args, joined, expected);
    ddp_strv_free(argv);
    ddp_config_free(&cfg);
}

static void test_argv(void **state)
{
    char *no_env[] = {NULL};
    char *py_env[] = {"PYTHON_EXEC=/usr/bin/python3", NULL};
    expect_argv("train.py --lr 0.1", no_env, 0, "python3 -u train.py --lr 0.1");
    expect_argv("train.py --lr 0.1", py_env, 0, "/usr/bin/python3 -u train.py --lr 0.1");
    expect_argv("-m pkg.train --x", no_env, 1, "python3 -u -m pkg.train --x");
    expect_argv("--no-python ./train --out=r${local_rank}.log", no_env, 3, "./train --out=r3.log");
    expect_argv("--run-path --no-python /abs/t.py", no_env, 0, "python3 -u /abs/t.py");
    /* torch.distributed.launch's argument comes before the script's own. */
    expect_argv("--local-rank-arg=underscore t.py --a", no_env, 2,
                "python3 -u t.py --local_rank=2 --a");
    expect_argv("--local-rank-arg dash --no-python ./t --a", no_env, 2, "./t --local-rank=2 --a");
    expect_argv("t.py $$HOME ${local_rank}x $local_rank", no_env, 5, "python3 -u t.py $HOME 5x 5");
}

static const char *value_of(char **env, const char *name)
{
    return ddp_env_lookup(env, name);
}

static void test_environment_contract(void **state)
{
    char *base[] = {"PATH=/bin", "RANK=99", NULL};
    ddp_launch_config_t cfg;
    char **added, **merged;
    config(&cfg, "--nproc-per-node=4 --max-restarts=3 --rdzv-id=job9 --role=trainer t.py", base);
    ddp_worker_info_t info = {.local_rank = 2,
                              .rank = 2,
                              .local_world_size = 4,
                              .world_size = 4,
                              .group_rank = 0,
                              .group_world_size = 1,
                              .restart_count = 1,
                              .use_agent_store = true,
                              .master_addr = "10.0.0.5",
                              .master_port = 41000,
                              .error_file = "/logs/job9_x/attempt_1/2/error.json"};
    assert_int_equal(ddp_worker_env_added(&cfg, &info, base, &added), 0);
    static const struct {
        const char *name, *value;
    } want[] = {
        {"LOCAL_RANK", "2"},
        {"RANK", "2"},
        {"GROUP_RANK", "0"},
        {"GROUP_WORLD_SIZE", "1"},
        {"ROLE_RANK", "2"},
        {"ROLE_WORLD_SIZE", "4"},
        {"ROLE_NAME", "trainer"},
        {"LOCAL_WORLD_SIZE", "4"},
        {"WORLD_SIZE", "4"},
        {"MASTER_ADDR", "10.0.0.5"},
        {"MASTER_PORT", "41000"},
        {"TORCHELASTIC_USE_AGENT_STORE", "True"},
        {"TORCHELASTIC_RESTART_COUNT", "1"},
        {"TORCHELASTIC_MAX_RESTARTS", "3"},
        {"TORCHELASTIC_RUN_ID", "job9"},
        {"TORCHELASTIC_ERROR_FILE", "/logs/job9_x/attempt_1/2/error.json"},
        {"TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"},
        {"NCCL_ASYNC_ERROR_HANDLING", "1"},
        {"OMP_NUM_THREADS", "1"},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const char *got = value_of(added, want[i].name);
        if (got == NULL || strcmp(got, want[i].value) != 0)
            fail_msg("%s is '%s', expected '%s'", want[i].name, got ? got : "(unset)",
                     want[i].value);
    }
    assert_int_equal(ddp_worker_env_merge(base, added, &merged), 0);
    assert_string_equal(value_of(merged, "RANK"), "2"); /* the launcher's RANK is replaced */
    assert_string_equal(value_of(merged, "PATH"), "/bin");
    int ranks = 0;
    for (char **p = merged; *p; p++)
        ranks += strncmp(*p, "RANK=", 5) == 0;
    assert_int_equal(ranks, 1);
    free(merged);
    ddp_strv_free(added);
    ddp_config_free(&cfg);
}

static void test_user_values_are_kept(void **state)
{
    char *base[] = {"OMP_NUM_THREADS=8", "NCCL_ASYNC_ERROR_HANDLING=0", NULL};
    ddp_launch_config_t cfg;
    char **added;
    config(&cfg, "--nproc-per-node=2 t.py", base);
    ddp_worker_info_t info = {.local_rank = 0,
                              .local_world_size = 2,
                              .world_size = 2,
                              .group_world_size = 1,
                              .master_addr = "127.0.0.1",
                              .master_port = 29500,
                              .error_file = "e"};
    assert_int_equal(ddp_worker_env_added(&cfg, &info, base, &added), 0);
    assert_null(value_of(added, "OMP_NUM_THREADS"));
    assert_null(value_of(added, "NCCL_ASYNC_ERROR_HANDLING"));
    assert_string_equal(value_of(added, "TORCH_NCCL_ASYNC_ERROR_HANDLING"), "1");
    ddp_strv_free(added);
    ddp_config_free(&cfg);

    /* One worker: no OMP_NUM_THREADS default, as torchrun. */
    char *empty[] = {NULL};
    config(&cfg, "t.py", empty);
    info.local_world_size = info.world_size = 1;
    assert_int_equal(ddp_worker_env_added(&cfg, &info, empty, &added), 0);
    assert_null(value_of(added, "OMP_NUM_THREADS"));
    ddp_strv_free(added);
    ddp_config_free(&cfg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_argv),
        cmocka_unit_test(test_environment_contract),
        cmocka_unit_test(test_user_values_are_kept),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
