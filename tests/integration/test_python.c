/* Integration tests with Python workers: PYTHON_EXEC and -u, -m, and the legacy
 * --local_rank argument. Skips (77) without python3. PyTorch itself: test_torch.c. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char script_path[1024];

static const char *script(const char *name)
{
    snprintf(script_path, sizeof script_path, "%s/tests/python/%s", th_source_dir(), name);
    return script_path;
}

static const char *python(void)
{
    return getenv("DDP_TEST_PYTHON");
}

/* PYTHON_EXEC for the launcher, and optionally one more variable. */
static const char *const *python_env(const char *extra)
{
    static char exec[600];
    static const char *env[3];
    snprintf(exec, sizeof exec, "PYTHON_EXEC=%s", python());
    env[0] = exec;
    env[1] = extra;
    env[2] = NULL;
    return env;
}

static void test_python_worker(void **state)
{
    const char *const *env = python_env(NULL);
    const char *argv[] = {th_launcher(), "--nproc-per-node=2", script("env_worker.py"),
                          "--lr",        "${local_rank}",      NULL};
    th_proc_t p;
    th_run(&p, argv, env, 120);
    const char *out = ddp_buf_str(&p.out);
    TH_ASSERT(&p, th_status(&p) == 0);
    TH_ASSERT(&p, th_count(out, "WORKER ") == 2);
    /* -u: unbuffered, as torchrun runs Python workers. */
    TH_ASSERT(&p, th_count(out, "\"unbuffered\": 1") == 2);
    TH_ASSERT(&p, strstr(out, "\"RANK\": \"1\"") != NULL);
    TH_ASSERT(&p, strstr(out, "\"WORLD_SIZE\": \"2\"") != NULL);
    TH_ASSERT(&p, strstr(out, "\"--lr\", \"1\"]") != NULL);
    TH_ASSERT(&p, strstr(out, "\"--lr\", \"0\"]") != NULL);
    TH_ASSERT(&p, strstr(out, "\"module\": \"__main__\"") != NULL);
    th_cleanup(&p);
}

static void test_python_module(void **state)
{
    char path[1100];
    snprintf(path, sizeof path, "PYTHONPATH=%s/tests/python", th_source_dir());
    const char *const *env = python_env(path);
    const char *argv[] = {th_launcher(), "-m", "env_worker", "x", NULL};
    th_proc_t p;
    th_run(&p, argv, env, 120);
    TH_ASSERT(&p, th_status(&p) == 0);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.out), "\"module\": \"__main__\"") != NULL);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.out), "env_worker.py\", \"x\"]") != NULL);
    th_cleanup(&p);
}

static void test_legacy_local_rank(void **state)
{
    const char *const *env = python_env(NULL);
    const char *legacy[] = {th_launcher(),
                            "--nproc-per-node=2",
                            "--local-rank-arg=underscore",
                            script("legacy_args.py"),
                            "--lr",
                            "0.5",
                            NULL};
    th_proc_t p;
    th_run(&p, legacy, env, 120);
    TH_ASSERT(&p, th_status(&p) == 0);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.out), "legacy rank 1 lr 0.5\n") != NULL);
    th_cleanup(&p);
    /* Without it the script's own argparse refuses to start: a worker failure. */
    const char *modern[] = {th_launcher(), script("legacy_args.py"), NULL};
    th_run(&p, modern, env, 120);
    TH_ASSERT(&p, th_status(&p) == 1);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err),
                         "the following arguments are required: --local_rank") != NULL);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "  exitcode  : 2 (pid: ") != NULL);
    th_cleanup(&p);
}

static int need_python(void **state)
{
    const char *py = python();
    if (py == NULL || *py == '\0' || access(py, X_OK) != 0) {
        fprintf(stderr, "skipped: no python3 (DDP_TEST_PYTHON is empty)\n");
        exit(77);
    }
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        TH_TEST(test_python_worker),
        TH_TEST(test_python_module),
        TH_TEST(test_legacy_local_rank),
    };
    return cmocka_run_group_tests(tests, need_python, NULL);
}
