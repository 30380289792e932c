/* Integration tests with Python workers: PYTHON_EXEC and -u, -m, and the legacy
 * --local_rank argument (asked for, or found in the script's text). Skips (77) without python3.
 * PyTorch itself: test_torch.c. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "harness.h"
#include "io.h"

#include <glob.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
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
    /* Without the flag, the option is found in the script's text and passed as well. */
    const char *plain[] = {th_launcher(), "--nproc-per-node=2", script("legacy_args.py"), NULL};
    th_run(&p, plain, env, 120);
    TH_ASSERT(&p, th_status(&p) == 0);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.out), "legacy rank 1 lr 0.01\n") != NULL);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "legacy_args.py defines --local_rank: passing "
                                              "--local_rank=N to each worker") != NULL);
    th_cleanup(&p);
    /* --local-rank-arg=none (or --use-env) keeps it out: the script's argparse refuses to
     * start, a worker failure. */
    const char *off[] = {th_launcher(), "--local-rank-arg=none", script("legacy_args.py"), NULL};
    const char *use_env[] = {th_launcher(), "--use-env", script("legacy_args.py"), NULL};
    const char *const *refused[] = {off, use_env};
    for (int i = 0; i < 2; i++) {
        th_run(&p, refused[i], env, 120);
        TH_ASSERT(&p, th_status(&p) == 1);
        TH_ASSERT(&p, strstr(ddp_buf_str(&p.err),
                             "the following arguments are required: --local_rank") != NULL);
        TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "  exitcode  : 2 (pid: ") != NULL);
        TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "defines --local_rank") == NULL);
        th_cleanup(&p);
    }
}

/* Writes a script into the test's TMPDIR; returns its path (static). */
static const char *write_script(const char *name, const char *text)
{
    static char path[1100];
    snprintf(path, sizeof path, "%s/%s", getenv("TMPDIR"), name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_true(fputs(text, f) >= 0);
    assert_int_equal(fclose(f), 0);
    return path;
}

/* The tutorial's default of 0 would give every rank local rank 0 if nothing were passed;
 * torch 2's spelling is passed in that spelling. A script that names the option only in a
 * comment gets no argument. */
static void test_local_rank_spellings(void **state)
{
    const char *const *env = python_env(NULL);
    const char *dash = write_script(
        "dash.py", "import argparse, os, sys\n"
                   "parser = argparse.ArgumentParser()\n"
                   "parser.add_argument('--local-rank', type=int, default=0)\n"
                   "args = parser.parse_args()\n"
                   "print('dash rank', args.local_rank, 'env', os.environ['LOCAL_RANK'])\n");
    const char *argv[] = {th_launcher(), "--nproc-per-node=2", dash, NULL};
    th_proc_t p;
    th_run(&p, argv, env, 120);
    TH_ASSERT(&p, th_status(&p) == 0);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.out), "dash rank 0 env 0\n") != NULL);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.out), "dash rank 1 env 1\n") != NULL);
    TH_ASSERT(&p,
              strstr(ddp_buf_str(&p.err), "defines --local-rank: passing --local-rank=N") != NULL);
    th_cleanup(&p);
    const char *comment = write_script(
        "comment.py", "import os, sys\n"
                      "# parser.add_argument('--local_rank', type=int) is not needed: see below\n"
                      "print('comment rank', os.environ['LOCAL_RANK'], 'argv', sys.argv[1:])\n");
    argv[2] = comment;
    th_run(&p, argv, env, 120);
    TH_ASSERT(&p, th_status(&p) == 0);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.out), "comment rank 1 argv []\n") != NULL);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "defines") == NULL);
    th_cleanup(&p);
}

/* The workers' python has no torch (here the real one without its site packages, -S):
 * the report is followed by which interpreter ran them and how to pick another. A script
 * that does not import torch, failing the same way, gets no such line. */
static void test_python_without_torch_is_named(void **state)
{
    char wrapper_text[700];
    snprintf(wrapper_text, sizeof wrapper_text, "#!/bin/sh\nexec '%s' -S \"$@\"\n", python());
    const char *wrapper = write_script("python-nosite", wrapper_text);
    char exec[1200];
    snprintf(exec, sizeof exec, "PYTHON_EXEC=%s", wrapper);
    assert_int_equal(chmod(wrapper, 0755), 0);
    char wrapper_path[1100];
    snprintf(wrapper_path, sizeof wrapper_path, "%s", wrapper);
    const char *env[] = {exec, NULL};
    const char *uses = write_script("uses_torch.py", "import torch\nprint(torch.__version__)\n");
    const char *argv[] = {th_launcher(), uses, NULL};
    th_proc_t p;
    th_run(&p, argv, env, 120);
    TH_ASSERT(&p, th_status(&p) == 1);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "No module named 'torch'") != NULL);
    char want[1300];
    snprintf(want, sizeof want,
             "the workers' Python interpreter %s has no module named 'torch': set PYTHON_EXEC",
             wrapper_path);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), want) != NULL);
    /* No error file (the import fails before any @record): the report has its last line. */
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "\n  last line : ModuleNotFoundError: No module "
                                              "named 'torch'\n") != NULL);
    th_cleanup(&p);
    const char *other = write_script("fails.py", "import sys\nsys.exit(1)\n");
    argv[1] = other;
    th_run(&p, argv, env, 120);
    TH_ASSERT(&p, th_status(&p) == 1);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "has no module named 'torch'") == NULL);
    th_cleanup(&p);
}

/* NCCL_ASYNC_ERROR_HANDLING, the name torch < 2.2 reads, is set only for such a torch
 * (torch 2.2 and later warn of it, and their torchrun sets only the new name), found
 * from the workers' python without importing torch: Debian's 1.13 in dist-packages gets
 * both names; a venv (its python a link out of it) whose site-packages holds torch
 * 2.6's version.py gets only TORCH_NCCL_ASYNC_ERROR_HANDLING. TORCHELASTIC_SIGNALS_TO_HANDLE,
 * which torchrun 2.9 and later leave to their workers, only with such a torch (2.11). */
static void test_legacy_nccl_variable_follows_torch(void **state)
{
    static const char *const clean[] = {"NCCL_ASYNC_ERROR_HANDLING",
                                        "TORCH_NCCL_ASYNC_ERROR_HANDLING", NULL};
    char exec[1200], cmd[1400], dir[1100], venv[1200], venv_exec[1300];
    const char *argv[] = {th_launcher(), script("env_worker.py"), NULL};
    th_proc_t p;
    snprintf(exec, sizeof exec, "PYTHON_EXEC=%s", python());
    const char *env[] = {exec, clean[0], clean[1], NULL};
    th_run(&p, argv, env, 120);
    TH_ASSERT(&p, th_status(&p) == 0);
    if (access("/usr/lib/python3/dist-packages/torch/version.py", R_OK) == 0)
        TH_ASSERT(&p, strstr(ddp_buf_str(&p.out), "\"NCCL_ASYNC_ERROR_HANDLING\": \"1\"") != NULL);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.out), "\"TORCH_NCCL_ASYNC_ERROR_HANDLING\": \"1\""));
    /* A torch old enough for the legacy name (Debian's 1.13) gets no signal list; a newer
     * one of this python (a GPU machine's 2.11) is for the venv half's versions below. */
    if (strstr(ddp_buf_str(&p.out), "\"NCCL_ASYNC_ERROR_HANDLING\": \"1\"") != NULL)
        TH_ASSERT(&p,
                  strstr(ddp_buf_str(&p.out), "\"TORCHELASTIC_SIGNALS_TO_HANDLE\": null") != NULL);
    th_cleanup(&p);

    snprintf(dir, sizeof dir, "%s", write_script("venv-mark", ""));
    *strrchr(dir, '/') = '\0';
    snprintf(venv, sizeof venv, "%s/venv", dir);
    snprintf(cmd, sizeof cmd, "'%s' -m venv --without-pip '%s' >&2", python(), venv);
    if (system(cmd) != 0) {
        fprintf(stderr, "skipped the venv half: %s failed (apt-get install python3-venv)\n", cmd);
        return;
    }
    snprintf(cmd, sizeof cmd,
             "site=$(echo '%s'/lib/python3*/site-packages) && mkdir -p \"$site/torch\" && "
             "printf \"__version__ = '2.6.0+debian'\\n\" > \"$site/torch/version.py\"",
             venv);
    assert_int_equal(system(cmd), 0);
    snprintf(venv_exec, sizeof venv_exec, "PYTHON_EXEC=%s/bin/python3", venv);
    env[0] = venv_exec;
    th_run(&p, argv, env, 120);
    TH_ASSERT(&p, th_status(&p) == 0);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.out), "\"NCCL_ASYNC_ERROR_HANDLING\": null") != NULL);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.out), "\"TORCH_NCCL_ASYNC_ERROR_HANDLING\": \"1\""));
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.out), "\"TORCHELASTIC_SIGNALS_TO_HANDLE\": null") != NULL);
    th_cleanup(&p);

    snprintf(
        cmd, sizeof cmd,
        "printf \"__version__ = '2.11.0+cu130'\\n\" > \"$(echo '%s'/lib/python3*/site-packages)"
        "/torch/version.py\"",
        venv);
    assert_int_equal(system(cmd), 0);
    const char *usr1[] = {th_launcher(), "--signals-to-handle=term,SIGUSR1",
                          script("env_worker.py"), NULL};
    th_run(&p, argv, env, 120);
    TH_ASSERT(&p, th_status(&p) == 0);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.out), "\"TORCHELASTIC_SIGNALS_TO_HANDLE\": "
                                              "\"SIGTERM,SIGINT,SIGHUP,SIGQUIT\"") != NULL);
    th_cleanup(&p);
    th_run(&p, usr1, env, 120);
    TH_ASSERT(&p, th_status(&p) == 0);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.out), "\"TORCHELASTIC_SIGNALS_TO_HANDLE\": "
                                              "\"SIGTERM,SIGUSR1\"") != NULL);
    th_cleanup(&p);
}

/* `ddp-launch run.sh`: a shell script in the working directory, named without "./". The
 * launcher reads it there and runs it directly; it used to look the name up in PATH
 * then ("unable to execute run.sh", 127). */
static void test_script_in_the_working_directory(void **state)
{
    char dir[1100], cmd[2400];
    snprintf(dir, sizeof dir, "%s",
             write_script("run-here.sh", "#!/bin/sh\necho \"here $RANK\"\n"));
    assert_int_equal(chmod(dir, 0755), 0);
    *strrchr(dir, '/') = '\0';
    snprintf(cmd, sizeof cmd, "cd '%s' && exec '%s' --nproc-per-node=2 run-here.sh", dir,
             th_launcher());
    const char *argv[] = {"/bin/sh", "-c", cmd, NULL};
    th_proc_t p;
    th_run(&p, argv, python_env(NULL), 60);
    TH_ASSERT(&p, th_status(&p) == 0);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.out), "here 0\n") != NULL);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.out), "here 1\n") != NULL);
    th_cleanup(&p);
}

/* A worker that makes shared memory and exits without unlinking it: Python's resource
 * tracker (a process of the worker's group, which ignores SIGTERM) unlinks it once the
 * worker has gone. The launcher gives what a worker leaves a grace before SIGKILL, so
 * the segment is gone when ddp-launch exits, as under plain python and torchrun. */
static void test_shared_memory_is_unlinked(void **state)
{
    const char *leaky =
        write_script("leaky_shm.py", "from multiprocessing import shared_memory\n"
                                     "m = shared_memory.SharedMemory(create=True, size=4096)\n"
                                     "print('segment', m.name, flush=True)\n"
                                     "m.close()\n");
    const char *argv[] = {th_launcher(), leaky, NULL};
    th_proc_t p;
    double started = th_now();
    th_run(&p, argv, python_env(NULL), 60);
    const char *seg = strstr(ddp_buf_str(&p.out), "segment ");
    char name[128] = "", path[200];
    TH_ASSERT(&p, th_status(&p) == 0);
    TH_ASSERT(&p, seg != NULL && sscanf(seg, "segment %127s", name) == 1);
    snprintf(path, sizeof path, "/dev/shm/%s", name);
    TH_ASSERT(&p, access(path, F_OK) != 0);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "sending them SIGKILL") == NULL);
    TH_ASSERT(&p, th_now() - started < 30);
    if (access(path, F_OK) == 0)
        unlink(path);
    th_cleanup(&p);
}

/* The lines of `text` that begin with `prefix`, one string. */
static void lines_from(const char *text, const char *prefix, ddp_buf_t *out)
{
    for (const char *line = text; *line != '\0';) {
        size_t len = strcspn(line, "\n");
        if (strncmp(line, prefix, strlen(prefix)) == 0)
            ddp_buf_printf(out, "%.*s\n", (int)len, line);
        line += len + (line[len] == '\n');
    }
}

/* The lines of ranks 0 and 1 on stdout that begin with `tag`, a cold run's into cold_lines
 * and a warm one's into warm_lines. */
static void ranks_lines(const th_proc_t *cold, const th_proc_t *warm, const char *tag,
                        ddp_buf_t *cold_lines, ddp_buf_t *warm_lines)
{
    for (int rank = 0; rank < 2; rank++) {
        char prefix[64];
        snprintf(prefix, sizeof prefix, "[default%d]:%s", rank, tag);
        lines_from(ddp_buf_str(&cold->out), prefix, cold_lines);
        lines_from(ddp_buf_str(&warm->out), prefix, warm_lines);
    }
}

/* Fails the test saying `what`, with both, where the warm lines are not the cold ones. */
static void assert_same_lines(const ddp_buf_t *cold_lines, const ddp_buf_t *warm_lines,
                              const char *what)
{
    if (strcmp(ddp_buf_str(cold_lines), ddp_buf_str(warm_lines)) != 0) {
        printf("cold:\n%swarm:\n%s", ddp_buf_str(cold_lines), ddp_buf_str(warm_lines));
        fail_msg("%s", what);
    }
}

/* warm_plain.py (or -m warm_plain) with `mode`, rank 1 failing at attempt 0 once stderr
 * says `ready` (the zygote's answer; NULL: at once), restarted once, cold or with
 * --warm-restarts (its zygote importing json), streams teed. */
static void run_plain(th_proc_t *p, bool warm, bool module, const char *mode,
                      const char *const *more, const char *ready)
{
    char path[1100], trigger[1100];
    snprintf(path, sizeof path, "PYTHONPATH=%s/tests/python", th_source_dir());
    const char *file = th_trigger_var(trigger, sizeof trigger);
    const char *env[] = {python_env(NULL)[0], path, trigger, "CUDA_VISIBLE_DEVICES", NULL};
    const char *argv[24] = {th_launcher(), "--nproc-per-node=2", "--max-restarts=1",
                            "--shutdown-timeout=5", "--tee=3"};
    int n = 5;
    if (warm) {
        argv[n++] = "--warm-restarts";
        argv[n++] = "--preload=json";
    }
    for (int i = 0; more != NULL && more[i] != NULL && n < 18; i++)
        argv[n++] = more[i];
    if (module)
        argv[n++] = "-m";
    argv[n++] = module ? "warm_plain" : script("warm_plain.py");
    argv[n++] = mode;
    argv[n] = NULL;
    th_run_after(p, argv, env, ready, file, 120);
}

/* A script that raises at its warm restart: its traceback is the one a cold restart
 * prints (none of the zygote's frames), and the job's end is the same. */
static void test_warm_restart_traceback(void **state)
{
    th_proc_t cold, warm;
    ddp_buf_t cold_lines = DDP_BUF_INIT, warm_lines = DDP_BUF_INIT;
    run_plain(&cold, false, false, "raise", NULL, NULL);
    run_plain(&warm, true, false, "raise", NULL, "has imported json");
    TH_ASSERT(&warm, strstr(ddp_buf_str(&warm.err), "2 of 2 workers of attempt 1 forked") != NULL);
    TH_ASSERT(&cold, th_status(&cold) == 1);
    TH_ASSERT(&warm, th_status(&warm) == 1);
    lines_from(ddp_buf_str(&cold.err), "[default1]:", &cold_lines);
    lines_from(ddp_buf_str(&warm.err), "[default1]:", &warm_lines);
    TH_ASSERT(&warm, strstr(ddp_buf_str(&warm_lines), "[default1]:Traceback (most recent call "
                                                      "last):\n[default1]:  File \"") != NULL);
    TH_ASSERT(&warm, strstr(ddp_buf_str(&warm_lines), "in fail_here\n") != NULL);
    TH_ASSERT(&warm, strstr(ddp_buf_str(&warm_lines), "_zygote") == NULL);
    TH_ASSERT(&warm, strcmp(ddp_buf_str(&cold_lines), ddp_buf_str(&warm_lines)) == 0);
    TH_ASSERT(&warm, strstr(ddp_buf_str(&warm.err), "ValueError: deliberate failure of rank 1 "
                                                    "at attempt 1") != NULL);
    ddp_buf_free(&cold_lines);
    ddp_buf_free(&warm_lines);
    th_cleanup(&cold);
    th_cleanup(&warm);
}

/* python -m warm_plain restarted warm: sys.argv, sys.path[0], __file__ and __name__ are a
 * cold python -m's. */
static void test_warm_restart_module(void **state)
{
    th_proc_t cold, warm;
    ddp_buf_t cold_lines = DDP_BUF_INIT, warm_lines = DDP_BUF_INIT;
    run_plain(&cold, false, true, "show", NULL, NULL);
    run_plain(&warm, true, true, "show", NULL, "has imported json");
    TH_ASSERT(&cold, th_status(&cold) == 0);
    TH_ASSERT(&warm, th_status(&warm) == 0);
    TH_ASSERT(&warm, strstr(ddp_buf_str(&warm.err), "2 of 2 workers of attempt 1 forked") != NULL);
    ranks_lines(&cold, &warm, "SHOW", &cold_lines, &warm_lines);
    TH_ASSERT(&warm, strstr(ddp_buf_str(&warm_lines), "warm_plain.py', 'show'] ") != NULL);
    TH_ASSERT(&warm, strstr(ddp_buf_str(&warm_lines), " __main__\n") != NULL);
    assert_same_lines(&cold_lines, &warm_lines, "a warm python -m differs from a cold one");
    ddp_buf_free(&cold_lines);
    ddp_buf_free(&warm_lines);
    th_cleanup(&cold);
    th_cleanup(&warm);
}

/* --virtual-local-rank restarted warm: each forked worker has its own device list (not
 * the zygote's, which is rank 0's), and no worker starts cold for it. */
static void test_warm_restart_virtual_local_rank(void **state)
{
    th_proc_t warm;
    const char *more[] = {"--virtual-local-rank", NULL};
    run_plain(&warm, true, false, "devices", more, "has imported json");
    TH_ASSERT(&warm, th_status(&warm) == 0);
    TH_ASSERT(&warm, strstr(ddp_buf_str(&warm.err), "2 of 2 workers of attempt 1 forked") != NULL);
    TH_ASSERT(&warm,
              strstr(ddp_buf_str(&warm.out), "DEVICES rank 0 local rank 0 visible 0\n") != NULL);
    TH_ASSERT(&warm,
              strstr(ddp_buf_str(&warm.out), "DEVICES rank 1 local rank 0 visible 1\n") != NULL);
    th_cleanup(&warm);
}

/* A warm-restarted attempt that hangs, under --hang-dump: the report has each rank's
 * Python stack, written by the faulthandler armed in the forked worker. */
static void test_warm_restart_hang_dump(void **state)
{
    char *logs = th_tmpdir(), log_flag[600], pattern[700], *text = NULL;
    snprintf(log_flag, sizeof log_flag, "--log-dir=%s", logs);
    const char *more[] = {"--hang-timeout=3", "--hang-dump", log_flag, NULL};
    th_proc_t p;
    size_t len;
    glob_t g;
    run_plain(&p, true, false, "hang", more, "has imported json");
    TH_ASSERT(&p, th_status(&p) == 1);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "2 of 2 workers of attempt 1 forked") != NULL);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "in stuck_here (warm_plain.py:") != NULL);
    snprintf(pattern, sizeof pattern, "%s/*/attempt_1/1/python_stack.txt", logs);
    TH_ASSERT(&p, glob(pattern, 0, NULL, &g) == 0 && g.gl_pathc == 1);
    TH_ASSERT(&p, ddp_read_file(g.gl_pathv[0], 1 << 20, &text, &len) == 0);
    globfree(&g);
    TH_ASSERT(&p, strstr(text, "in stuck_here") != NULL);
    free(text);
    th_cleanup(&p);
    th_rmtree(logs);
    free(logs);
}

/* What the zygote writes itself (a preloaded module's output at import, a line without
 * its newline last) is in the launcher's log, each line said as the zygote's; none bare. */
static void test_warm_restart_zygote_output(void **state)
{
    const char *noisy[] = {"--preload=json,noisy_preload", NULL};
    th_proc_t p;
    run_plain(&p, true, false, "show", noisy, "has imported json,noisy_preload");
    const char *err = ddp_buf_str(&p.err), *out = ddp_buf_str(&p.out);
    TH_ASSERT(&p, th_status(&p) == 0);
    TH_ASSERT(&p, strstr(err, "2 of 2 workers of attempt 1 forked") != NULL);
    TH_ASSERT(&p, strstr(err, "warm restarts: zygote: noisy_preload: a line on stdout\n") != NULL);
    TH_ASSERT(&p, strstr(err, "warm restarts: zygote: noisy_preload: a line on stderr\n") != NULL);
    TH_ASSERT(&p, strstr(err, "warm restarts: zygote: noisy_preload: no newline\n") != NULL);
    TH_ASSERT(&p, th_count(err, "noisy_preload: ") == 3 && th_count(out, "noisy_preload") == 0);
    th_cleanup(&p);
}

/* A preloaded module that closes stdout and stderr, ignores SIGTERM, handles SIGUSR1, blocks
 * SIGUSR2 and sets the umask at import (hostile_preload.py): none of it reaches a forked
 * worker. Its lines arrive on both streams, its dispositions, mask and umask are a cold
 * worker's, and it ends at the SIGTERM that stops it after rank 1's failure (no SIGKILL
 * after --shutdown-timeout). */
static void test_warm_restart_resets_what_preload_set(void **state)
{
    const char *hostile[] = {"--preload=json,hostile_preload", NULL};
    th_proc_t cold, warm;
    ddp_buf_t cold_lines = DDP_BUF_INIT, warm_lines = DDP_BUF_INIT;
    run_plain(&cold, false, false, "process", NULL, NULL);
    TH_ASSERT(&cold, th_status(&cold) == 1);
    run_plain(&warm, true, false, "process", hostile, "has imported json,hostile_preload");
    const char *err = ddp_buf_str(&warm.err);
    TH_ASSERT(&warm, th_status(&warm) == 1);
    TH_ASSERT(&warm, strstr(err, "2 of 2 workers of attempt 1 forked") != NULL);
    TH_ASSERT(&warm, strstr(err, "[default0]:PROCESS rank 0 on stderr\n") != NULL);
    TH_ASSERT(&warm, strstr(err, "[default1]:PROCESS rank 1 on stderr\n") != NULL);
    ranks_lines(&cold, &warm, "PROCESS rank", &cold_lines, &warm_lines);
    TH_ASSERT(&warm, th_count(ddp_buf_str(&warm_lines), "PROCESS rank") == 2);
    assert_same_lines(&cold_lines, &warm_lines,
                      "a warm worker's signals, mask or umask differ from a cold one's");
    TH_ASSERT(&warm, strstr(err, "sending SIGKILL") == NULL);
    ddp_buf_free(&cold_lines);
    ddp_buf_free(&warm_lines);
    th_cleanup(&cold);
    th_cleanup(&warm);
}

/* What /proc shows of a forked worker is what it shows of a cold one: its command line,
 * with no padding after it (pgrep -f 'warm_plain.py proc$' finds it), and its environment,
 * RANK and the other variables of its own included (os.environ's, not the zygote's). */
static void test_warm_restart_proc_shows_the_worker(void **state)
{
    th_proc_t cold, warm;
    ddp_buf_t cold_lines = DDP_BUF_INIT, warm_lines = DDP_BUF_INIT;
    run_plain(&cold, false, false, "proc", NULL, NULL);
    TH_ASSERT(&cold, th_status(&cold) == 0);
    run_plain(&warm, true, false, "proc", NULL, "has imported json");
    TH_ASSERT(&warm, th_status(&warm) == 0);
    TH_ASSERT(&warm, strstr(ddp_buf_str(&warm.err), "2 of 2 workers of attempt 1 forked") != NULL);
    ranks_lines(&cold, &warm, "PROC rank", &cold_lines, &warm_lines);
    TH_ASSERT(&cold,
              th_count(ddp_buf_str(&cold_lines), "warm_plain.py', 'proc'] environ same\n") == 2);
    assert_same_lines(&cold_lines, &warm_lines,
                      "/proc shows a warm worker otherwise than a cold one");
    ddp_buf_free(&cold_lines);
    ddp_buf_free(&warm_lines);
    th_cleanup(&cold);
    th_cleanup(&warm);
}

/* The record worker `rank` printed at `attempt` ("STATE rank R attempt A {...}"), into
 * out[cap]; false when it printed none. */
static bool state_record(const th_proc_t *p, int rank, int attempt, char *out, size_t cap)
{
    char mark[64];
    snprintf(mark, sizeof mark, "[default%d]:STATE rank %d attempt %d ", rank, rank, attempt);
    const char *at = strstr(ddp_buf_str(&p->out), mark);
    if (at == NULL)
        return false;
    at += strlen(mark);
    snprintf(out, cap, "%.*s", (int)strcspn(at, "\n"), at);
    return true;
}

/* One set-up of a worker's process, held for both paths: in one job with --warm-restarts,
 * attempt 0's workers start cold (spawn/spawn.c) and attempt 1's are forked from the zygote
 * (worker/python/ddp_launch/_zygote.py), and each rank's record of its process is the same
 * at both: its session and group, its parent and the parent-death signal, its limits, CPUs
 * and memory policy, its signal dispositions and mask (Python's and the kernel's), its
 * descriptors, its environment and command line as /proc shows them, its cwd, umask,
 * niceness and scheduler (warm_plain.py's process_record). */
static void test_cold_and_warm_workers_start_alike(void **state)
{
    th_proc_t p;
    run_plain(&p, true, false, "state", NULL, "has imported json");
    TH_ASSERT(&p, th_status(&p) == 0);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "2 of 2 workers of attempt 1 forked") != NULL);
    for (int rank = 0; rank < 2; rank++) {
        static char cold[16384], warm[16384];
        TH_ASSERT(&p, state_record(&p, rank, 0, cold, sizeof cold));
        TH_ASSERT(&p, state_record(&p, rank, 1, warm, sizeof warm));
        TH_ASSERT(&p, strstr(cold, "\"pdeathsig\": 9") != NULL);
        TH_ASSERT(&p, strstr(cold, "\"session leader\": true") != NULL);
        if (strcmp(cold, warm) != 0) {
            printf("rank %d cold:\n%s\nwarm:\n%s\n", rank, cold, warm);
            fail_msg("a warm worker's process differs from a cold one's (rank %d)", rank);
        }
    }
    th_cleanup(&p);
}

/* warm_plain.py `mode`, 2 workers, --warm-restarts (json) and one restart, with `flag`
 * (may be NULL), started; once its zygote is ready, its pid. file[cap] gets the trigger
 * that lets rank 1 fail. */
static pid_t start_with_zygote(th_proc_t *p, char *file, size_t cap, const char *mode,
                               const char *flag)
{
    static char path[1100], trigger[1100];
    snprintf(path, sizeof path, "PYTHONPATH=%s/tests/python", th_source_dir());
    snprintf(file, cap, "%s", th_trigger_var(trigger, sizeof trigger));
    const char *env[] = {python_env(NULL)[0], path, trigger, NULL};
    const char *argv[10] = {th_launcher(),     "--nproc-per-node=2", "--max-restarts=1",
                            "--warm-restarts", "--preload=json",     "--tee=3"};
    int n = 6;
    if (flag != NULL)
        argv[n++] = flag;
    argv[n++] = script("warm_plain.py");
    argv[n++] = mode;
    th_start(p, argv, env);
    TH_ASSERT(p, th_wait_output(p, 2, "has imported json", 1, 60));
    const char *said = strstr(ddp_buf_str(&p->err), "the zygote (pid ");
    return said != NULL ? (pid_t)atoi(said + strlen("the zygote (pid ")) : 0;
}

#define CHILDREN_MAX 256

/* The children of `pid` (of its main thread), up to CHILDREN_MAX, into kids: how many. */
static int children_of(pid_t pid, pid_t kids[CHILDREN_MAX])
{
    char path[96], list[4096];
    int n = 0;
    snprintf(path, sizeof path, "/proc/%d/task/%d/children", (int)pid, (int)pid);
    FILE *f = fopen(path, "r");
    size_t len = f != NULL ? fread(list, 1, sizeof list - 1, f) : 0;
    if (f != NULL)
        fclose(f);
    list[len] = '\0';
    for (char *c = list, *end; *c != '\0' && n < CHILDREN_MAX; c = end) {
        long child = strtol(c, &end, 10);
        if (end == c)
            break;
        kids[n++] = (pid_t)child;
    }
    return n;
}

/* How many of `pid`'s children are zombies (ended, not waited for). */
static int zombie_children(pid_t pid)
{
    pid_t kids[CHILDREN_MAX];
    int zombies = 0;
    for (int i = 0, n = children_of(pid, kids); i < n; i++)
        zombies += th_proc_state(kids[i]) == 'Z';
    return zombies;
}

/* The child of `pid` whose command line holds `needle`, or 0. */
static pid_t child_running(pid_t pid, const char *needle)
{
    pid_t kids[CHILDREN_MAX], found = 0;
    for (int i = 0, n = children_of(pid, kids); i < n && found == 0; i++) {
        char path[64], *text = NULL;
        size_t len = 0;
        snprintf(path, sizeof path, "/proc/%d/cmdline", (int)kids[i]);
        if (ddp_read_file(path, 1 << 16, &text, &len) == 0 &&
            memmem(text, len, needle, strlen(needle)) != NULL)
            found = kids[i];
        free(text);
    }
    return found;
}

/* The launcher (a child subreaper, as --warm-restarts needs) adopts what ends without its
 * parent: a job each worker started in the background from a subshell that has ended,
 * here. Each is reaped when it ends, not left a zombie until the job ends. (A health
 * check's background job no longer comes to it: the checks' own helper ends it.) */
static void test_warm_restart_reaps_what_it_adopts(void **state)
{
    char *dir = th_tmpdir(), script[1200], done[1200];
    snprintf(script, sizeof script,
             "( (sleep 0.2; echo >> '%s/orphans') >/dev/null 2>&1 & ); echo ready; exec sleep 600",
             dir);
    snprintf(done, sizeof done, "%s/orphans", dir);
    const char *argv[] = {
        th_launcher(), "--nproc-per-node=2", "--no-python", "/bin/sh", "-c", script, NULL};
    th_proc_t p;
    th_start(&p, argv, NULL);
    TH_ASSERT(&p, th_wait_output(&p, 1, "ready", 2, 60));
    /* Both background jobs have ended (each wrote a line) and been reaped. */
    char *text = NULL;
    size_t len = 0;
    int zombies = -1;
    for (double deadline = th_now() + 10; th_now() < deadline;) {
        free(text);
        text = NULL;
        if (ddp_read_file(done, 4096, &text, &len) == 0 && len == 2 &&
            (zombies = zombie_children(p.pid)) == 0)
            break;
        nanosleep(&(struct timespec){.tv_nsec = 50000000}, NULL);
    }
    TH_ASSERT(&p, text != NULL && len == 2);
    TH_ASSERT(&p, zombies == 0);
    free(text);
    kill(p.pid, SIGTERM);
    TH_ASSERT(&p, th_wait_exit(&p, 60));
    th_cleanup(&p);
    th_rmtree(dir);
    free(dir);
}

/* The zygote takes no CPU from the first attempt's workers while they need every CPU: on
 * one CPU, while the one worker keeps it busy (its first half CPU second after it says so),
 * the zygote, whose preloaded module would keep it as busy (busy_preload.py), is stopped;
 * both rest together, the zygote then imports, and the restart is forked from it. */
static void test_warm_restart_zygote_waits_for_busy_workers(void **state)
{
    char path[1100], trigger[1100], rest[1200];
    cpu_set_t all, one;
    int first = 0;
    assert_int_equal(sched_getaffinity(0, sizeof all, &all), 0);
    while (first < CPU_SETSIZE - 1 && !CPU_ISSET(first, &all))
        first++;
    CPU_ZERO(&one);
    CPU_SET(first, &one);
    snprintf(path, sizeof path, "PYTHONPATH=%s/tests/python", th_source_dir());
    const char *file = th_trigger_var(trigger, sizeof trigger);
    snprintf(rest, sizeof rest, "%s.rest", file);
    const char *env[] = {python_env(NULL)[0], path, trigger, NULL};
    const char *argv[] = {th_launcher(),
                          "--nproc-per-node=1",
                          "--max-restarts=1",
                          "--warm-restarts",
                          "--preload=json,busy_preload",
                          "--tee=3",
                          script("warm_plain.py"),
                          "spin",
                          NULL};
    th_proc_t p;
    /* The launcher, its worker and its zygote on that one CPU (inherited). */
    assert_int_equal(sched_setaffinity(0, sizeof one, &one), 0);
    th_start(&p, argv, env);
    assert_int_equal(sched_setaffinity(0, sizeof all, &all), 0);
    TH_ASSERT(&p, th_wait_output(&p, 1, "SPINNING pid ", 1, 60));
    const char *at = strstr(ddp_buf_str(&p.out), "SPINNING pid ");
    pid_t worker = at != NULL ? (pid_t)atoi(at + strlen("SPINNING pid ")) : 0;
    pid_t zygote = child_running(p.pid, "_zygote.py");
    TH_ASSERT(&p, worker > 0 && zygote > 0);
    double spun = th_cpu_seconds(worker), zygote_cpu = th_cpu_seconds(zygote);
    for (double deadline = th_now() + 60; th_cpu_seconds(worker) < spun + 0.5;) {
        TH_ASSERT(&p, th_now() < deadline);
        th_wait_output(&p, 2, "has imported", 1, 0.05); /* (reads what comes meanwhile) */
    }
    double used = th_cpu_seconds(zygote) - zygote_cpu;
    if (used >= 0.2)
        fail_msg("the zygote used %.2f s of the CPU while the worker used 0.5 s", used);
    TH_ASSERT(&p, th_touch(rest));
    TH_ASSERT(&p, th_wait_output(&p, 1, "RESTING", 1, 60));
    TH_ASSERT(&p, th_wait_output(&p, 2, "has imported json,busy_preload", 1, 60));
    TH_ASSERT(&p, th_touch(file));
    TH_ASSERT(&p, th_wait_exit(&p, 60));
    TH_ASSERT(&p, th_status(&p) == 0);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "1 of 1 workers of attempt 1 forked") != NULL);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.out), "rank 0 done at attempt 1\n") != NULL);
    th_cleanup(&p);
}

/* Lets rank 1 fail (the trigger), and waits for the job to end well, both ranks restarted. */
static void restart_and_finish(th_proc_t *p, const char *file)
{
    TH_ASSERT(p, th_touch(file));
    TH_ASSERT(p, th_wait_exit(p, 60));
    TH_ASSERT(p, th_status(p) == 0);
    TH_ASSERT(p, th_count(ddp_buf_str(&p->out), "]:SHOW rank ") == 2);
}

/* A zygote that dies is started again in the background, said in one line; the restart
 * after it forks from the new one. */
static void test_warm_restart_zygote_dies(void **state)
{
    char file[1100];
    th_proc_t p;
    pid_t zygote = start_with_zygote(&p, file, sizeof file, "show", NULL);
    TH_ASSERT(&p, zygote > 0 && kill(zygote, SIGKILL) == 0);
    TH_ASSERT(&p, th_wait_output(&p, 2, "ended with status 137; starting another", 1, 60));
    TH_ASSERT(&p, th_wait_output(&p, 2, "has imported json", 2, 60));
    restart_and_finish(&p, file);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "2 of 2 workers of attempt 1 forked") != NULL);
    th_cleanup(&p);
}

/* A zygote that does not answer (stopped): after DDP_ZYGOTE_SPAWN_TIMEOUT_S (5 s) the
 * restart starts cold, saying why, and the zygote is ended. */
static void test_warm_restart_zygote_silent(void **state)
{
    char file[1100];
    th_proc_t p;
    pid_t zygote = start_with_zygote(&p, file, sizeof file, "show", NULL);
    TH_ASSERT(&p, zygote > 0 && kill(zygote, SIGSTOP) == 0);
    restart_and_finish(&p, file);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "local rank 0 of attempt 1 starts cold: the zygote "
                                              "did not answer in 5 s (it is ended)") != NULL);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "forked from the zygote") == NULL);
    TH_ASSERT(&p, th_wait_gone(zygote, 10));
    th_cleanup(&p);
}

/* What a zygote cannot serve starts cold, saying why: a preload module that is not there
 * (the restart still happens); workers that are not Python, a launcher without its Python
 * package (said at the start, naming the package). --dry-run
 * says what restarts will be; --preload without --warm-restarts is a usage error. */
static void test_warm_restart_cold_cases(void **state)
{
    const char *missing[] = {"--preload=no_such_module_here", NULL};
    th_proc_t p;
    run_plain(&p, true, false, "show", missing, "zygote refused");
    const char *err = ddp_buf_str(&p.err);
    TH_ASSERT(&p, th_status(&p) == 0);
    TH_ASSERT(&p, strstr(err, "the zygote refused to serve: unable to import "
                              "no_such_module_here: ModuleNotFoundError") != NULL);
    TH_ASSERT(&p, strstr(err, "local rank 0 of attempt 1 starts cold: the zygote refused") != NULL);
    TH_ASSERT(&p, th_count(ddp_buf_str(&p.out), "]:SHOW rank ") == 2);
    th_cleanup(&p);

    const char *program[] = {
        th_launcher(), "--nproc-per-node=1", "--warm-restarts", th_worker(), "exit", "0", NULL};
    th_run(&p, program, NULL, 60);
    TH_ASSERT(&p, th_status(&p) == 0);
    TH_ASSERT(&p,
              strstr(ddp_buf_str(&p.err), "--warm-restarts: the workers are not Python") != NULL);
    th_cleanup(&p);

    /* A launcher without its Python package beside it (a binary copied elsewhere) says
     * where the zygote comes from. */
    char *alone_dir = th_tmpdir(), copy[800], cmd[2000];
    snprintf(copy, sizeof copy, "%s/ddp-launch", alone_dir);
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", th_launcher(), copy);
    TH_ASSERT(&p, system(cmd) == 0);
    char ok[820];
    snprintf(ok, sizeof ok, "%s/ok.py", alone_dir);
    snprintf(cmd, sizeof cmd, "echo 'print(\"ok\")' > '%s'", ok);
    TH_ASSERT(&p, system(cmd) == 0);
    const char *copied[] = {copy, "--warm-restarts", "--max-restarts=1", ok, NULL};
    th_run(&p, copied, python_env(NULL), 60);
    TH_ASSERT(&p, th_status(&p) == 0);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "is not installed beside this ddp-launch (Debian: "
                                              "apt install python3-ddp-launch") != NULL);
    th_cleanup(&p);
    th_rmtree(alone_dir);
    free(alone_dir);

    const char *dry[] = {th_launcher(), "--warm-restarts",       "--preload=json",
                         "--dry-run",   script("warm_plain.py"), "show",
                         NULL};
    th_run(&p, dry, python_env(NULL), 60);
    TH_ASSERT(&p, th_status(&p) == 0);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.out), "restarts: forked from a zygote that imports json "
                                              "(--warm-restarts)") != NULL);
    th_cleanup(&p);

    const char *alone[] = {th_launcher(), "--preload=torch", script("warm_plain.py"), "show", NULL};
    th_run(&p, alone, python_env(NULL), 60);
    TH_ASSERT(&p, th_status(&p) == 2);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "add --warm-restarts") != NULL);
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

/* An argument runs only the tests whose names match it (a glob). */
int main(int argc, char **argv)
{
    if (argc > 1)
        cmocka_set_test_filter(argv[1]);
    const struct CMUnitTest tests[] = {
        TH_TEST(test_python_worker),
        TH_TEST(test_python_module),
        TH_TEST(test_legacy_local_rank),
        TH_TEST(test_local_rank_spellings),
        TH_TEST(test_python_without_torch_is_named),
        TH_TEST(test_legacy_nccl_variable_follows_torch),
        TH_TEST(test_script_in_the_working_directory),
        TH_TEST(test_shared_memory_is_unlinked),
        TH_TEST(test_warm_restart_traceback),
        TH_TEST(test_warm_restart_module),
        TH_TEST(test_warm_restart_virtual_local_rank),
        TH_TEST(test_warm_restart_hang_dump),
        TH_TEST(test_warm_restart_cold_cases),
        TH_TEST(test_warm_restart_reaps_what_it_adopts),
        TH_TEST(test_warm_restart_zygote_output),
        TH_TEST(test_warm_restart_resets_what_preload_set),
        TH_TEST(test_warm_restart_proc_shows_the_worker),
        TH_TEST(test_cold_and_warm_workers_start_alike),
        TH_TEST(test_warm_restart_zygote_dies),
        TH_TEST(test_warm_restart_zygote_waits_for_busy_workers),
        TH_TEST(test_warm_restart_zygote_silent),
    };
    return cmocka_run_group_tests(tests, need_python, NULL);
}
