/* Integration tests: the real ddp-launch gives real workers torchrun's environment and
 * argv, checked variable by variable; --dry-run, the example, and start-up errors. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

/* The value a worker printed for `name` under --tee 1 (its lines prefixed
 * "[default<local_rank>]:"), or NULL. Returns a pointer into a static buffer. */
static const char *worker_value(const th_proc_t *p, int local_rank, const char *name)
{
    static char value[1024];
    char needle[128];
    snprintf(needle, sizeof needle, "[default%d]:%s=", local_rank, name);
    const char *at = strstr(ddp_buf_str(&p->out), needle);
    if (at == NULL)
        return NULL;
    at += strlen(needle);
    size_t len = strcspn(at, "\n");
    snprintf(value, sizeof value, "%.*s", (int)len, at);
    return value;
}

static void expect_var(const th_proc_t *p, int local_rank, const char *name, const char *want)
{
    const char *got = worker_value(p, local_rank, name);
    if (got == NULL || strcmp(got, want) != 0) {
        th_dump(p);
        fail_msg("local rank %d: %s is '%s', expected '%s'", local_rank, name,
                 got ? got : "(unset)", want);
    }
}

static void expect_unset(const th_proc_t *p, int local_rank, const char *name)
{
    char needle[128];
    snprintf(needle, sizeof needle, "[default%d]:%s is unset", local_rank, name);
    TH_ASSERT(p, strstr(ddp_buf_str(&p->out), needle) != NULL);
}

static const char *const clean_env[] = {"OMP_NUM_THREADS",
                                        "NCCL_ASYNC_ERROR_HANDLING",
                                        "TORCH_NCCL_ASYNC_ERROR_HANDLING",
                                        "RANK",
                                        "DDP_TEST_MARK=inherited",
                                        NULL};

static void test_contract_four_workers(void **state)
{
    char *logs = th_tmpdir();
    char log_flag[512];
    snprintf(log_flag, sizeof log_flag, "--log-dir=%s", logs);
    const char *argv[] = {
        th_launcher(),    "--nproc-per-node=4", "--tee=1",   log_flag, "--max-restarts=2",
        "--rdzv-id=job7", "--no-python",        th_worker(), "env",    NULL};
    th_proc_t p;
    th_run(&p, argv, clean_env, 60);
    TH_ASSERT(&p, th_status(&p) == 0);
    for (int lr = 0; lr < 4; lr++) {
        char num[16];
        snprintf(num, sizeof num, "%d", lr);
        expect_var(&p, lr, "LOCAL_RANK", num);
        expect_var(&p, lr, "RANK", num);
        expect_var(&p, lr, "ROLE_RANK", num);
        expect_var(&p, lr, "GROUP_RANK", "0");
        expect_var(&p, lr, "GROUP_WORLD_SIZE", "1");
        expect_var(&p, lr, "LOCAL_WORLD_SIZE", "4");
        expect_var(&p, lr, "WORLD_SIZE", "4");
        expect_var(&p, lr, "ROLE_WORLD_SIZE", "4");
        expect_var(&p, lr, "ROLE_NAME", "default");
        expect_var(&p, lr, "MASTER_ADDR", "127.0.0.1");
        /* The store's port (PET_MASTER_PORT=0 in the tests: a free one), the same for
         * every worker. */
        const char *port = worker_value(&p, lr, "MASTER_PORT");
        TH_ASSERT(&p, port != NULL && atoi(port) > 0 && atoi(port) < 65536);
        char first_port[16];
        snprintf(first_port, sizeof first_port, "%s", worker_value(&p, 0, "MASTER_PORT"));
        expect_var(&p, lr, "MASTER_PORT", first_port);
        expect_var(&p, lr, "TORCHELASTIC_USE_AGENT_STORE", "True");
        expect_var(&p, lr, "TORCHELASTIC_RESTART_COUNT", "0");
        expect_var(&p, lr, "TORCHELASTIC_MAX_RESTARTS", "2");
        expect_var(&p, lr, "TORCHELASTIC_RUN_ID", "job7");
        expect_var(&p, lr, "TORCH_NCCL_ASYNC_ERROR_HANDLING", "1");
        expect_var(&p, lr, "NCCL_ASYNC_ERROR_HANDLING", "1");
        expect_var(&p, lr, "OMP_NUM_THREADS", "1");
        expect_var(&p, lr, "DDP_TEST_MARK", "inherited"); /* the launcher's own env passes */
        /* <log_dir>/<run_id>_<rand>/attempt_0/<local_rank>/error.json, in a directory
         * that exists so the worker can write it. */
        const char *error_file = worker_value(&p, lr, "TORCHELASTIC_ERROR_FILE");
        TH_ASSERT(&p, error_file != NULL);
        char prefix[600], suffix[64];
        snprintf(prefix, sizeof prefix, "%s/job7_", logs);
        snprintf(suffix, sizeof suffix, "/attempt_0/%d/error.json", lr);
        TH_ASSERT(&p, strncmp(error_file, prefix, strlen(prefix)) == 0);
        TH_ASSERT(&p, strlen(error_file) > strlen(suffix) &&
                          strcmp(error_file + strlen(error_file) - strlen(suffix), suffix) == 0);
        char dir[1024];
        struct stat st;
        snprintf(dir, sizeof dir, "%.*s", (int)(strlen(error_file) - strlen("/error.json")),
                 error_file);
        TH_ASSERT(&p, stat(dir, &st) == 0 && S_ISDIR(st.st_mode));
    }
    /* The OMP_NUM_THREADS warning, once. */
    TH_ASSERT(&p, th_count(ddp_buf_str(&p.err), "OMP_NUM_THREADS=1") == 1);
    th_cleanup(&p);
    th_rmtree(logs);
    free(logs);
}

static void test_contract_one_worker(void **state)
{
    const char *argv[] = {th_launcher(), "--tee", "1", "--no-python", th_worker(), "env", NULL};
    th_proc_t p;
    th_run(&p, argv, clean_env, 60);
    TH_ASSERT(&p, th_status(&p) == 0);
    expect_var(&p, 0, "RANK", "0");
    expect_var(&p, 0, "WORLD_SIZE", "1");
    expect_var(&p, 0, "TORCHELASTIC_RUN_ID", "none");
    expect_var(&p, 0, "TORCHELASTIC_MAX_RESTARTS", "0");
    expect_unset(&p, 0, "OMP_NUM_THREADS"); /* torchrun sets it only for nproc > 1 */
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "OMP_NUM_THREADS") == NULL);
    th_cleanup(&p);
}

static void test_user_settings_are_kept(void **state)
{
    const char *env[] = {"OMP_NUM_THREADS=5", "NCCL_ASYNC_ERROR_HANDLING=0",
                         "TORCH_NCCL_ASYNC_ERROR_HANDLING", NULL};
    const char *argv[] = {th_launcher(), "--nproc_per_node", "2",         "--tee", "1", "--role",
                          "trainer",     "--no_python",      th_worker(), "env",   NULL};
    th_proc_t p;
    th_run(&p, argv, env, 60);
    TH_ASSERT(&p, th_status(&p) == 0);
    /* With --role the prefix changes too; read the values under it. */
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.out), "[trainer1]:OMP_NUM_THREADS=5\n") != NULL);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.out), "[trainer0]:NCCL_ASYNC_ERROR_HANDLING=0\n") != NULL);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.out), "[trainer0]:TORCH_NCCL_ASYNC_ERROR_HANDLING=1\n") !=
                      NULL);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.out), "[trainer1]:ROLE_NAME=trainer\n") != NULL);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "setting OMP_NUM_THREADS") == NULL);
    th_cleanup(&p);
}

/* --virtual-local-rank (torchrun's): LOCAL_RANK=0 and CUDA_VISIBLE_DEVICES the device of
 * the local rank, from this node's list (--env's over the environment's, each entry
 * without its blanks) or the local rank itself; too short a list ends the job before it
 * starts (2), naming it. Other ranks and the legacy argument are as without it. */
static void test_virtual_local_rank(void **state)
{
    const char *argv[] = {th_launcher(),
                          "--nproc-per-node=3",
                          "--virtual-local-rank",
                          "--tee=1",
                          "--no-python",
                          th_worker(),
                          "env",
                          NULL};
    const char *unset[] = {"CUDA_VISIBLE_DEVICES", NULL};
    th_proc_t p;
    th_run(&p, argv, unset, 60);
    TH_ASSERT(&p, th_status(&p) == 0);
    for (int i = 0; i < 3; i++) {
        char device[8], rank[8];
        snprintf(device, sizeof device, "%d", i);
        snprintf(rank, sizeof rank, "%d", i);
        expect_var(&p, i, "LOCAL_RANK", "0");
        expect_var(&p, i, "RANK", rank);
        expect_var(&p, i, "LOCAL_WORLD_SIZE", "3");
        expect_var(&p, i, "CUDA_VISIBLE_DEVICES", device);
    }
    th_cleanup(&p);

    const char *listed[] = {"CUDA_VISIBLE_DEVICES=6, 4,GPU-5b2c,1", NULL};
    th_run(&p, argv, listed, 60);
    TH_ASSERT(&p, th_status(&p) == 0);
    expect_var(&p, 0, "CUDA_VISIBLE_DEVICES", "6");
    expect_var(&p, 1, "CUDA_VISIBLE_DEVICES", "4");
    expect_var(&p, 2, "CUDA_VISIBLE_DEVICES", "GPU-5b2c");
    th_cleanup(&p);

    const char *by_env[] = {
        th_launcher(), "--nproc-per-node=2", "--env",     "CUDA_VISIBLE_DEVICES=9,8",
        "--tee=1",     "--no-python",        th_worker(), "env",
        NULL};
    const char *pet[] = {"PET_VIRTUAL_LOCAL_RANK=1", "CUDA_VISIBLE_DEVICES=0,1", NULL};
    th_run(&p, by_env, pet, 60);
    TH_ASSERT(&p, th_status(&p) == 0);
    expect_var(&p, 0, "CUDA_VISIBLE_DEVICES", "9");
    expect_var(&p, 1, "CUDA_VISIBLE_DEVICES", "8");
    expect_var(&p, 1, "LOCAL_RANK", "0");
    TH_ASSERT(&p, th_count(ddp_buf_str(&p.out), "CUDA_VISIBLE_DEVICES=") == 2);
    th_cleanup(&p);

    const char *few[] = {"CUDA_VISIBLE_DEVICES=2,3", NULL};
    th_run(&p, argv, few, 60);
    TH_ASSERT(&p, th_status(&p) == 2);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err),
                         "--virtual-local-rank: CUDA_VISIBLE_DEVICES=2,3 names 2 device(s) for 3 "
                         "workers on this node (local rank 2 has none)") != NULL);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.out), "LOCAL_RANK") == NULL);
    th_cleanup(&p);

    /* Without it, the inherited list reaches every worker as it is. */
    const char *plain[] = {
        th_launcher(), "--nproc-per-node=2", "--tee=1", "--no-python", th_worker(), "env", NULL};
    th_run(&p, plain, few, 60);
    TH_ASSERT(&p, th_status(&p) == 0);
    expect_var(&p, 1, "LOCAL_RANK", "1");
    expect_var(&p, 1, "CUDA_VISIBLE_DEVICES", "2,3");
    th_cleanup(&p);
}

/* --master-addr in torchrun's IPv6 form, [::1]: the store listens on ::1, and the workers
 * get the address without its brackets. */
static void test_master_addr_ipv6_brackets(void **state)
{
    int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in6 loopback = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT};
    bool ipv6 = fd >= 0 && bind(fd, (struct sockaddr *)&loopback, sizeof loopback) == 0;
    if (fd >= 0)
        close(fd);
    if (!ipv6) {
        printf("no IPv6 loopback here: skipped\n");
        skip();
    }
    const char *argv[] = {
        th_launcher(), "--master-addr=[::1]", "--master-port=0", "--nproc-per-node=2",
        "--tee=1",     "--no-python",         th_worker(),       "env",
        NULL};
    th_proc_t p;
    th_run(&p, argv, clean_env, 60);
    TH_ASSERT(&p, th_status(&p) == 0);
    expect_var(&p, 0, "MASTER_ADDR", "::1");
    expect_var(&p, 1, "MASTER_ADDR", "::1");
    th_cleanup(&p);
}

static void test_standalone_gets_a_free_port_and_run_id(void **state)
{
    const char *argv[] = {th_launcher(),
                          "--standalone",
                          "--nproc-per-node=2",
                          "--tee=1",
                          "--no-python",
                          th_worker(),
                          "env",
                          NULL};
    th_proc_t p;
    th_run(&p, argv, clean_env, 60);
    TH_ASSERT(&p, th_status(&p) == 0);
    char port[32], run_id[64];
    snprintf(port, sizeof port, "%s", worker_value(&p, 0, "MASTER_PORT"));
    snprintf(run_id, sizeof run_id, "%s", worker_value(&p, 0, "TORCHELASTIC_RUN_ID"));
    TH_ASSERT(&p, atoi(port) > 0 && atoi(port) < 65536 && strcmp(port, "29500") != 0);
    TH_ASSERT(&p, strlen(run_id) == 36 && run_id[8] == '-');
    expect_var(&p, 1, "MASTER_PORT", port);
    expect_var(&p, 1, "TORCHELASTIC_RUN_ID", run_id);
    th_cleanup(&p);
}

/* The lines local rank `rank` wrote, its "[default<rank>]:" prefix cut: the workers
 * write at once and their lines may interleave, so each one's are taken apart before
 * they are compared. */
static void lines_of_rank(const char *out, int rank, ddp_buf_t *mine)
{
    char prefix[32];
    int n = snprintf(prefix, sizeof prefix, "[default%d]:", rank);
    for (const char *line = out; *line;) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) + 1 : strlen(line);
        if (strncmp(line, prefix, (size_t)n) == 0)
            ddp_buf_append(mine, line + n, len - (size_t)n);
        line += len;
    }
}

static void test_argv_reaches_the_worker(void **state)
{
    const char *argv[] = {th_launcher(),
                          "--nproc-per-node=2",
                          "--tee=1",
                          "--no-python",
                          th_worker(),
                          "env",
                          "--lr",
                          "0.1",
                          "${local_rank}",
                          "x${local_rank}y",
                          "$$HOME",
                          "--nproc-per-node",
                          "9",
                          "-m",
                          NULL};
    th_proc_t p;
    th_run(&p, argv, clean_env, 60);
    TH_ASSERT(&p, th_status(&p) == 0);
    for (int lr = 0; lr < 2; lr++) {
        char want[256];
        ddp_buf_t mine = DDP_BUF_INIT;
        lines_of_rank(ddp_buf_str(&p.out), lr, &mine);
        snprintf(want, sizeof want,
                 "argv[2]=--lr\nargv[3]=0.1\nargv[4]=%d\nargv[5]=x%dy\nargv[6]=$HOME\n"
                 "argv[7]=--nproc-per-node\nargv[8]=9\nargv[9]=-m\n",
                 lr, lr);
        TH_ASSERT(&p, strstr(ddp_buf_str(&mine), want) != NULL);
        ddp_buf_free(&mine);
    }
    th_cleanup(&p);
}

static void test_legacy_local_rank_argument(void **state)
{
    const char *argv[] = {
        th_launcher(), "--nproc-per-node=2", "--tee=1", "--local-rank-arg=underscore",
        "--no-python", th_worker(),          "env",     "--after",
        NULL};
    th_proc_t p;
    th_run(&p, argv, clean_env, 60);
    TH_ASSERT(&p, th_status(&p) == 0);
    for (int rank = 0; rank < 2; rank++) {
        char want[128];
        ddp_buf_t mine = DDP_BUF_INIT;
        lines_of_rank(ddp_buf_str(&p.out), rank, &mine);
        snprintf(want, sizeof want, "argv[1]=--local_rank=%d\nargv[2]=env\nargv[3]=--after\n",
                 rank);
        TH_ASSERT(&p, strstr(ddp_buf_str(&mine), want) != NULL);
        ddp_buf_free(&mine);
    }
    th_cleanup(&p);
}

static void test_dry_run_starts_nothing(void **state)
{
    char *dir = th_tmpdir();
    char marker[600];
    snprintf(marker, sizeof marker, "%s/touched-${local_rank}", dir);
    const char *dry[] = {th_launcher(), "--dry-run",      "--nproc-per-node=2",
                         "--no-python", "/usr/bin/touch", marker,
                         NULL};
    th_proc_t p;
    th_run(&p, dry, clean_env, 60);
    TH_ASSERT(&p, th_status(&p) == 0);
    char want[700], file[700];
    snprintf(want, sizeof want, "argv: /usr/bin/touch %s/touched-1\n", dir);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.out), want) != NULL);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.out), "    LOCAL_RANK=1\n") != NULL);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.out), "    WORLD_SIZE=2\n") != NULL);
    /* OMP_NUM_THREADS=1 is shown in the environment, without the warning of a real run. */
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.out), "    OMP_NUM_THREADS=1\n") != NULL);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "setting OMP_NUM_THREADS=1") == NULL);
    snprintf(file, sizeof file, "%s/touched-0", dir);
    TH_ASSERT(&p, access(file, F_OK) != 0);
    th_cleanup(&p);
    /* The same command without --dry-run does run (the check above can fail). */
    const char *real[] = {
        th_launcher(), "--nproc-per-node=2", "--no-python", "/usr/bin/touch", marker, NULL};
    th_run(&p, real, clean_env, 60);
    TH_ASSERT(&p, th_status(&p) == 0);
    TH_ASSERT(&p, access(file, F_OK) == 0);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "setting OMP_NUM_THREADS=1") != NULL);
    th_cleanup(&p);
    th_rmtree(dir);
    free(dir);
}

/* Writes `text` to DIR/NAME, mode 0755; its path in `path`. */
static void write_executable(char *path, size_t cap, const char *dir, const char *name,
                             const char *text)
{
    snprintf(path, cap, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
    assert_int_equal(chmod(path, 0755), 0);
}

/* A compiled program and a shell script given without --no-python run as programs:
 * python (a PYTHON_EXEC that does not exist here) is never started for them. */
static void test_program_without_no_python(void **state)
{
    char *dir = th_tmpdir();
    char marker[600], script[600], file[700];
    snprintf(marker, sizeof marker, "%s/touched-${local_rank}", dir);
    const char *no_python[] = {"PYTHON_EXEC=/nonexistent/python9", "OMP_NUM_THREADS", NULL};
    const char *elf[] = {th_launcher(), "--nproc-per-node=2", "/usr/bin/touch", marker, NULL};
    th_proc_t p;
    th_run(&p, elf, no_python, 60);
    TH_ASSERT(&p, th_status(&p) == 0);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err),
                         "/usr/bin/touch is a compiled program (ELF), not a Python script: "
                         "running it directly, as --no-python does") != NULL);
    snprintf(file, sizeof file, "%s/touched-1", dir);
    TH_ASSERT(&p, access(file, F_OK) == 0);
    th_cleanup(&p);

    write_executable(script, sizeof script, dir, "train.sh",
                     "#!/bin/sh\necho \"rank $RANK of $WORLD_SIZE, args $*\"\n");
    const char *sh[] = {th_launcher(), "--nproc-per-node=2", script, "--lr", "0.1", NULL};
    th_run(&p, sh, no_python, 60);
    TH_ASSERT(&p, th_status(&p) == 0);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.out), "rank 1 of 2, args --lr 0.1") != NULL);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "is a script for another interpreter") != NULL);
    th_cleanup(&p);

    /* A Python script still goes to PYTHON_EXEC, as in torchrun: here it fails to start. */
    write_executable(script, sizeof script, dir, "train.py",
                     "#!/usr/bin/env python3\nprint('ran')\n");
    const char *py[] = {th_launcher(), script, NULL};
    th_run(&p, py, no_python, 60);
    TH_ASSERT(&p, th_status(&p) == 127);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "PYTHON_EXEC") != NULL);
    th_cleanup(&p);
    th_rmtree(dir);
    free(dir);
}

/* On node 1 of a static job: the store is node 0's, and the ranks shown rest on every
 * node running as many workers as this one, which the header says. */
static void test_dry_run_of_another_node(void **state)
{
    const char *dry[] = {th_launcher(),
                         "--dry-run",
                         "--nnodes=2",
                         "--node-rank=1",
                         "--master-addr=10.9.9.9",
                         "--master-port=29500",
                         "--nproc-per-node=2",
                         "--no-python",
                         "/bin/true",
                         NULL};
    th_proc_t p;
    th_run(&p, dry, clean_env, 60);
    const char *out = ddp_buf_str(&p.out);
    TH_ASSERT(&p, th_status(&p) == 0);
    TH_ASSERT(&p, strstr(out, "the rendezvous store: 10.9.9.9:29500, hosted by node 0\n") != NULL);
    TH_ASSERT(&p, strstr(out, "every node as running 2 worker(s)") != NULL);
    TH_ASSERT(&p, strstr(out, "would listen") == NULL);
    TH_ASSERT(&p, strstr(out, "worker 0: rank 2, local rank 0\n") != NULL);
    TH_ASSERT(&p, strstr(out, "    WORLD_SIZE=4\n") != NULL);
    th_cleanup(&p);
}

/* A bare name that is no file here but a program in PATH runs as a program, not as
 * python's script; a Python interpreter's name followed by a script runs that script
 * with it, as PYTHON_EXEC would (-u, arguments after the script). */
static void test_program_in_path(void **state)
{
    char *dir = th_tmpdir();
    char bin[600], path[700], tool[700], python[700], script[700];
    snprintf(bin, sizeof bin, "%s/bin", dir);
    assert_int_equal(mkdir(bin, 0755), 0);
    snprintf(path, sizeof path, "PATH=%s:/usr/bin:/bin", bin);
    write_executable(tool, sizeof tool, bin, "ddp-test-tool",
                     "#!/bin/sh\necho \"tool rank $RANK of $WORLD_SIZE, args $*\"\n");
    write_executable(python, sizeof python, bin, "python3.99",
                     "#!/bin/sh\necho \"interpreter rank $RANK, args $*\"\n");
    write_executable(script, sizeof script, dir, "train.py", "print('not run')\n");
    const char *env[] = {path, "PYTHON_EXEC=/nonexistent/python9", "OMP_NUM_THREADS", NULL};
    const char *program[] = {th_launcher(), "--nproc-per-node=2", "ddp-test-tool", "a", "b", NULL};
    th_proc_t p;
    th_run(&p, program, env, 60);
    TH_ASSERT(&p, th_status(&p) == 0);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.out), "tool rank 1 of 2, args a b\n") != NULL);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "ddp-test-tool is no file here but the program ") !=
                      NULL);
    th_cleanup(&p);

    const char *interpreter[] = {
        th_launcher(), "--nproc-per-node=2", "python3.99", script, "--lr", "0.1", NULL};
    th_run(&p, interpreter, env, 60);
    TH_ASSERT(&p, th_status(&p) == 0);
    char line[900];
    snprintf(line, sizeof line, "interpreter rank 1, args -u %s --lr 0.1\n", script);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.out), line) != NULL);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.out), "not run") == NULL);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "python3.99 is the interpreter ") != NULL);
    th_cleanup(&p);

    /* An interpreter followed by its own options runs as the program it is. */
    const char *options[] = {th_launcher(), "python3.99", "-c", "pass", NULL};
    th_run(&p, options, env, 60);
    TH_ASSERT(&p, th_status(&p) == 0);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.out), "interpreter rank 0, args -c pass\n") != NULL);
    th_cleanup(&p);

    /* In neither the working directory nor PATH: not found, as before. */
    const char *missing[] = {th_launcher(), "ddp-test-no-such-tool", NULL};
    const char *env_python[] = {path, "PYTHON_EXEC=python3.99", NULL};
    th_run(&p, missing, env_python, 60);
    TH_ASSERT(&p, th_status(&p) == 127);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err),
                         "the training script ddp-test-no-such-tool does not exist") != NULL);
    th_cleanup(&p);
    th_rmtree(dir);
    free(dir);
}

/* --nproc-per-node=xpu: the workers' python counts the XPUs with torch.xpu, as torchrun
 * does: its answer is the worker count; none available, no torch, or no such python end
 * the job before it starts (2), saying which. */
static void test_nproc_per_node_xpu(void **state)
{
    char *dir = th_tmpdir();
    char three[700], none[700], exec_three[800], exec_none[800];
    write_executable(three, sizeof three, dir, "python-three",
                     "#!/bin/sh\necho 'imported'; echo 'ddp-launch xpu count: 3'\n");
    write_executable(none, sizeof none, dir, "python-none",
                     "#!/bin/sh\necho 'ddp-launch xpu count: -1'\n");
    snprintf(exec_three, sizeof exec_three, "PYTHON_EXEC=%s", three);
    snprintf(exec_none, sizeof exec_none, "PYTHON_EXEC=%s", none);
    const char *argv[] = {th_launcher(), "--nproc-per-node=xpu", "--dry-run", "train.py", NULL};
    const char *env_three[] = {exec_three, NULL};
    th_proc_t p;
    th_run(&p, argv, env_three, 60);
    TH_ASSERT(&p, th_status(&p) == 0);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.out), "3 worker(s) on node 0 of 1") != NULL);
    th_cleanup(&p);

    const char *env_none[] = {exec_none, NULL};
    th_run(&p, argv, env_none, 60);
    TH_ASSERT(&p, th_status(&p) == 2);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "--nproc-per-node: xpu: no XPU is available to the "
                                              "torch of ") != NULL);
    th_cleanup(&p);

    const char *env_missing[] = {"PYTHON_EXEC=/nonexistent/python9", NULL};
    th_run(&p, argv, env_missing, 60);
    TH_ASSERT(&p, th_status(&p) == 2);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "counting XPUs needs the workers' python with "
                                              "torch: /nonexistent/python9") != NULL);
    th_cleanup(&p);

    /* The real torch here (Debian's) has no XPU to offer. */
    const char *python = getenv("DDP_TEST_PYTHON");
    if (python != NULL && *python != '\0') {
        char exec[600];
        snprintf(exec, sizeof exec, "PYTHON_EXEC=%s", python);
        const char *env_real[] = {exec, NULL};
        th_run(&p, argv, env_real, 120);
        TH_ASSERT(&p, th_status(&p) == 2);
        TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "--nproc-per-node: xpu: ") != NULL);
        th_cleanup(&p);
    }
    th_rmtree(dir);
    free(dir);
}

static void test_hello_example(void **state)
{
    const char *argv[] = {th_launcher(), "--nproc-per-node=2", "--no-python",
                          getenv("DDP_TEST_HELLO"), NULL};
    th_proc_t p;
    th_run(&p, argv, clean_env, 60);
    TH_ASSERT(&p, th_status(&p) == 0);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.out), "hello from rank 0 of 2 (local rank 0 of 2") != NULL);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.out), "hello from rank 1 of 2 (local rank 1 of 2") != NULL);
    th_cleanup(&p);
    /* Outside ddp-launch the example says what is missing. */
    const char *alone[] = {getenv("DDP_TEST_HELLO"), NULL};
    const char *no_env[] = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", NULL};
    th_run(&p, alone, no_env, 60);
    TH_ASSERT(&p, th_status(&p) == 1);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "WORLD_SIZE is not set") != NULL);
    th_cleanup(&p);
}

/* --nnodes=2 typed in an sbatch script of a 3-node allocation (outside a step): this
 * command is node 0 alone, said at once (it used to wait out the join timeout). */
static void test_nnodes_outside_a_slurm_step_said(void **state)
{
    const char *argv[] = {th_launcher(), "--nnodes=2",  "--master-port=29999",
                          "--dry-run",   "--no-python", "/bin/true",
                          NULL};
    const char *env[] = {"SLURM_JOB_ID=9", "SLURM_JOB_NUM_NODES=3", "SLURM_STEP_ID", NULL};
    th_proc_t p;
    th_run(&p, argv, env, 60);
    TH_ASSERT(&p, th_status(&p) == 0);
    TH_ASSERT(&p,
              strstr(ddp_buf_str(&p.err), "--nnodes=2 inside Slurm allocation 9 of 3 node(s), "
                                          "outside a step: this command is node 0 only") != NULL);
    th_cleanup(&p);
}

/* --no-python's program is looked for in PATH, as torchrun's: one in the current
 * directory only is named, with what was likely meant. */
static void test_program_only_in_the_working_directory(void **state)
{
    th_proc_t p;
    char *dir = th_tmpdir(), path[700];
    snprintf(path, sizeof path, "%s/train.py", dir);
    assert_true(th_touch(path));
    snprintf(path, sizeof path, "%s/train", dir);
    assert_true(th_touch(path) && chmod(path, 0755) == 0);
    const char *script_here[] = {"/bin/sh",  "-c", "cd \"$1\" && exec \"$2\" --no-python \"$3\"",
                                 "sh",       dir,  th_launcher(),
                                 "train.py", NULL};
    th_run(&p, script_here, NULL, 60);
    TH_ASSERT(&p, th_status(&p) == 127);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "train.py is in the current directory, which PATH "
                                              "does not search: leave out --no-python to run it "
                                              "with python") != NULL);
    th_cleanup(&p);
    script_here[6] = "train";
    th_run(&p, script_here, NULL, 60);
    TH_ASSERT(&p, th_status(&p) == 127);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "the current directory has it, which PATH does "
                                              "not search: give ./train\n") != NULL);
    th_cleanup(&p);
    th_rmtree(dir);
    free(dir);
}

static void test_start_up_errors(void **state)
{
    th_proc_t p;
    const char *missing[] = {th_launcher(), "--no-python", "/nonexistent/train", NULL};
    th_run(&p, missing, NULL, 60);
    TH_ASSERT(&p, th_status(&p) == 127);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "unable to execute /nonexistent/train on this "
                                              "node (") != NULL);
    th_cleanup(&p);

    /* A Python-run script (the default) that is not on this node: 127 before anything
     * starts, naming the node, not python's "can't open file" in every worker after the
     * rendezvous (a C program built on the submit host only); nothing is said of the
     * workers that will not start (the OMP_NUM_THREADS warning). */
    const char *absent[] = {th_launcher(), "--nnodes=1", "--nproc-per-node=2",
                            "/nonexistent/ddp-hello", NULL};
    const char *no_omp[] = {"OMP_NUM_THREADS", NULL};
    th_run(&p, absent, no_omp, 60);
    TH_ASSERT(&p, th_status(&p) == 127);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "the training script /nonexistent/ddp-hello does "
                                              "not exist on this node (") != NULL);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "can't open file") == NULL);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "OMP_NUM_THREADS") == NULL);
    th_cleanup(&p);

    char not_executable[600];
    snprintf(not_executable, sizeof not_executable, "%s/README.md", th_source_dir());
    const char *noexec[] = {th_launcher(), "--no-python", not_executable, NULL};
    th_run(&p, noexec, NULL, 60);
    TH_ASSERT(&p, th_status(&p) == 126);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), ": Permission denied; it is not executable: chmod "
                                              "+x ") != NULL);
    th_cleanup(&p);

    const char *python[] = {th_launcher(), "train.py", NULL};
    const char *bad_python[] = {"PYTHON_EXEC=/nonexistent/python9", NULL};
    th_run(&p, python, bad_python, 60);
    TH_ASSERT(&p, th_status(&p) == 127);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "PYTHON_EXEC") != NULL);
    th_cleanup(&p);

    const char *usage[] = {th_launcher(), "--nproc-per-node=many", "t.py", NULL};
    th_run(&p, usage, NULL, 60);
    TH_ASSERT(&p, th_status(&p) == 2);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "--nproc-per-node: invalid value 'many'") != NULL);
    th_cleanup(&p);

    const char *multi[] = {th_launcher(), "--nnodes=2", "t.py", NULL};
    th_run(&p, multi, NULL, 60);
    TH_ASSERT(&p, th_status(&p) == 2);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "multi-node") != NULL);
    th_cleanup(&p);

    const char *nothing[] = {th_launcher(), NULL};
    th_run(&p, nothing, NULL, 60);
    TH_ASSERT(&p, th_status(&p) == 2);
    th_cleanup(&p);

    const char *help[] = {th_launcher(), "--help", NULL};
    th_run(&p, help, NULL, 60);
    TH_ASSERT(&p, th_status(&p) == 0);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.out), "--nproc-per-node") != NULL);
    th_cleanup(&p);

    const char *version[] = {th_launcher(), "--version", NULL};
    th_run(&p, version, NULL, 60);
    TH_ASSERT(&p, th_status(&p) == 0);
    TH_ASSERT(&p, strncmp(ddp_buf_str(&p.out), "ddp-launch ", 11) == 0);
    th_cleanup(&p);
}

/* The store host's name resolves first to an address this machine lacks (here a mount
 * namespace's /etc/hosts: fd00::77, then 127.0.0.1): that address is skipped and the store
 * listens on the other (the launcher aborted on a libuv assertion: the failed listener's
 * closing handle was initialised again for the next address). */
static void test_store_name_with_an_address_not_here(void **state)
{
    (void)state;
    char *dir = th_tmpdir(), hosts[512], script[2048];
    snprintf(hosts, sizeof hosts, "%s/hosts", dir);
    FILE *f = fopen(hosts, "w");
    assert_non_null(f);
    fputs("127.0.0.1 localhost\nfd00::77 ddp-not-here\n127.0.0.1 ddp-not-here\n", f);
    fclose(f);
    snprintf(script, sizeof script,
             "mount --bind %s /etc/hosts || exit 77; exec %s --master-addr=ddp-not-here "
             "--master-port=0 --no-python %s env",
             hosts, th_launcher(), th_worker());
    const char *argv[] = {"/usr/bin/unshare", "-m", "/bin/sh", "-c", script, NULL};
    th_proc_t p;
    th_run(&p, argv, clean_env, 60);
    if (th_status(&p) == 77 || strstr(ddp_buf_str(&p.err), "unshare failed") != NULL) {
        printf("cannot make a mount namespace (not root?): skipped\n");
        th_cleanup(&p);
        free(dir);
        skip();
    }
    TH_ASSERT(&p, th_status(&p) == 0);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.out), "MASTER_ADDR=ddp-not-here") != NULL);
    th_cleanup(&p);
    unlink(hosts);
    rmdir(dir);
    free(dir);
}

static void test_store_port_in_use(void **state)
{
    /* Another program holds a port: the launcher says so and exits 4. */
    struct sockaddr_in addr = {.sin_family = AF_INET};
    socklen_t len = sizeof addr;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(fd, (struct sockaddr *)&addr, sizeof addr), 0);
    assert_int_equal(listen(fd, 1), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&addr, &len), 0);
    char flag[32];
    snprintf(flag, sizeof flag, "--master-port=%d", ntohs(addr.sin_port));
    const char *argv[] = {th_launcher(), flag, "--no-python", th_worker(), "env", NULL};
    th_proc_t p;
    th_run(&p, argv, NULL, 60);
    TH_ASSERT(&p, th_status(&p) == 4);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "is in use by another program") != NULL);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.out), "LOCAL_RANK") == NULL); /* no worker ran */
    th_cleanup(&p);
    close(fd);
}

/* One node with torchrun's default port (29500) busy and no --master-port: the store
 * takes a free port and says which; with the port given explicitly, a busy one is still
 * exit 4. (29500 is held here for the test when it is free; busy already is as good.) */
static void test_default_port_busy_takes_a_free_one(void **state)
{
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons(29500)};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_true(fd >= 0);
    if (bind(fd, (struct sockaddr *)&addr, sizeof addr) == 0)
        assert_int_equal(listen(fd, 1), 0);
    const char *env[] = {"PET_MASTER_PORT", NULL};
    const char *plain[] = {th_launcher(), "--tee=1", "--no-python", th_worker(), "env", NULL};
    th_proc_t p;
    th_run(&p, plain, env, 60);
    TH_ASSERT(&p, th_status(&p) == 0);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "port 29500 on 127.0.0.1 is in use by another "
                                              "program: the store listens on a free port") != NULL);
    int port = atoi(worker_value(&p, 0, "MASTER_PORT"));
    TH_ASSERT(&p, port > 0 && port != 29500);
    th_cleanup(&p);
    const char *given[] = {th_launcher(), "--master-port=29500", "--no-python", th_worker(), "env",
                           NULL};
    th_run(&p, given, env, 60);
    TH_ASSERT(&p, th_status(&p) == 4);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "is in use by another program (pick a free") != NULL);
    th_cleanup(&p);
    close(fd);
}

/* ---- --numa-binding, run for real on a tree that tells ddp-launch this machine has two NUMA
 * nodes: node 0 with this process's CPUs and GPUs 0 and 1, node 1 with memory only (or, with
 * `node1_cpus`, those CPUs too) and GPU 2. Node 1 does not exist here, so the kernel refuses a
 * memory policy that prefers it. */

typedef struct {
    char *root;
    int cpus[256], ncpus; /* this process's CPUs, ascending */
    char allowed[1024];   /* their list, as /proc says */
} numa_tree_t;

static void tree_put(const numa_tree_t *t, const char *path, const char *text)
{
    char full[4096];
    snprintf(full, sizeof full, "%s/%s", t->root, path);
    for (char *p = full + strlen(t->root) + 1; (p = strchr(p, '/')) != NULL; p++) {
        *p = '\0';
        (void)mkdir(full, 0755);
        *p = '/';
    }
    FILE *f = fopen(full, "w");
    assert_non_null(f);
    fprintf(f, "%s\n", text);
    fclose(f);
}

static void numa_tree(numa_tree_t *t, bool node1_cpus)
{
    char line[1200];
    memset(t, 0, sizeof *t);
    t->root = th_tmpdir();
    FILE *f = fopen("/proc/self/status", "r");
    assert_non_null(f);
    while (fgets(line, sizeof line, f) != NULL)
        if (sscanf(line, "Cpus_allowed_list: %1023s", t->allowed) == 1)
            break;
    fclose(f);
    for (char *p = t->allowed; *p != '\0' && t->ncpus < 256;) {
        char *end;
        long lo = strtol(p, &end, 10), hi = lo;
        if (*end == '-')
            hi = strtol(end + 1, &end, 10);
        for (long c = lo; c <= hi && t->ncpus < 256; c++)
            t->cpus[t->ncpus++] = (int)c;
        p = *end == ',' ? end + 1 : end;
        if (end == p && *p != '\0')
            break;
    }
    snprintf(line, sizeof line, "Cpus_allowed_list:\t%s", t->allowed);
    tree_put(t, "proc/self/status", line);
    tree_put(t, "sys/devices/system/cpu/online", t->allowed);
    tree_put(t, "sys/devices/system/node/online", "0-1");
    tree_put(t, "sys/devices/system/node/has_memory", "0-1");
    tree_put(t, "sys/devices/system/node/node0/cpulist", t->allowed);
    tree_put(t, "sys/devices/system/node/node1/cpulist", node1_cpus ? t->allowed : "");
    for (int i = 0; i < t->ncpus; i++) {
        char path[128], own[16];
        snprintf(own, sizeof own, "%d", t->cpus[i]); /* every CPU a core of its own */
        snprintf(path, sizeof path, "sys/devices/system/cpu/cpu%d/topology/thread_siblings_list",
                 t->cpus[i]);
        tree_put(t, path, own);
        snprintf(path, sizeof path, "sys/devices/system/cpu/cpu%d/topology/physical_package_id",
                 t->cpus[i]);
        tree_put(t, path, "0");
    }
    static const char *const gpus[][2] = {
        {"0000:01:00.0", "0"}, {"0000:02:00.0", "0"}, {"0000:03:00.0", "1"}};
    for (size_t g = 0; g < 3; g++) {
        char path[128];
        snprintf(path, sizeof path, "sys/bus/pci/devices/%s/vendor", gpus[g][0]);
        tree_put(t, path, "0x10de");
        snprintf(path, sizeof path, "sys/bus/pci/devices/%s/class", gpus[g][0]);
        tree_put(t, path, "0x030200");
        snprintf(path, sizeof path, "sys/bus/pci/devices/%s/numa_node", gpus[g][0]);
        tree_put(t, path, gpus[g][1]);
    }
}

static void numa_tree_free(numa_tree_t *t)
{
    th_rmtree(t->root);
    free(t->root);
}

/* CPUs cpus[from..to) as a kernel list. */
static void cpu_list(const numa_tree_t *t, int from, int to, char *out, size_t cap)
{
    size_t len = 0;
    out[0] = '\0';
    for (int i = from; i < to; i++) {
        int last = i;
        while (last + 1 < to && t->cpus[last + 1] == t->cpus[last] + 1)
            last++;
        len += (size_t)snprintf(out + len, cap - len, last == i ? "%s%d" : "%s%d-%d",
                                len ? "," : "", t->cpus[i], t->cpus[last]);
        i = last;
    }
}

/* ddp-launch `flags` (NULL-ended) on the placement worker, which prints where it runs: on
 * tree `t` (NULL: this machine), with CUDA_VISIBLE_DEVICES=`visible` (NULL: unset). */
static void run_placement(const numa_tree_t *t, const char *visible, const char *const *flags,
                          th_proc_t *p)
{
    char root_env[600] = "DDP_TOPOLOGY_ROOT", gpus[64] = "CUDA_VISIBLE_DEVICES";
    if (t != NULL)
        snprintf(root_env, sizeof root_env, "DDP_TOPOLOGY_ROOT=%s", t->root);
    if (visible != NULL)
        snprintf(gpus, sizeof gpus, "CUDA_VISIBLE_DEVICES=%s", visible);
    const char *env[] = {root_env, gpus, NULL};
    const char *argv[16];
    int n = 0;
    argv[n++] = th_launcher();
    for (int i = 0; flags[i] != NULL && n < 12; i++)
        argv[n++] = flags[i];
    argv[n++] = "--no-python";
    argv[n++] = th_worker();
    argv[n++] = "placement";
    argv[n] = NULL;
    th_run(p, argv, env, 60);
}

/* exclusive: GPUs 0 and 1 share node 0, so its cores are split between the two workers; each
 * prefers node 0's memory. /proc of the workers shows both. */
static void test_numa_binding_applied(void **state)
{
    numa_tree_t t;
    numa_tree(&t, false);
    if (t.ncpus < 2) {
        numa_tree_free(&t);
        skip();
    }
    char first[1024], second[1024];
    int half = (t.ncpus + 1) / 2;
    cpu_list(&t, 0, half, first, sizeof first);
    cpu_list(&t, half, t.ncpus, second, sizeof second);
    const char *run[] = {"--nproc-per-node=2", "--numa-binding=exclusive", "--tee=1", NULL};
    th_proc_t p;
    run_placement(&t, NULL, run, &p);
    TH_ASSERT(&p, th_status(&p) == 0);
    expect_var(&p, 0, "CPUS", first);
    expect_var(&p, 1, "CPUS", second);
    expect_var(&p, 0, "POLICY", "prefer:0");
    expect_var(&p, 1, "POLICY", "prefer:0");
    char said[1200];
    snprintf(said, sizeof said,
             "worker local rank 1 near GPU 1 (0000:02:00.0): CPUs %s, memory "
             "node 0",
             second);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), said) != NULL);
    th_cleanup(&p);

    /* --dry-run says the same and starts nothing. */
    const char *dry[] = {"--nproc-per-node=2", "--numa-binding=exclusive", "--dry-run", NULL};
    run_placement(&t, NULL, dry, &p);
    TH_ASSERT(&p, th_status(&p) == 0);
    snprintf(said, sizeof said, "  numa binding (exclusive): CPUs %s, memory node 0\n", first);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.out), said) != NULL);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.out), "CPUS=") == NULL);
    th_cleanup(&p);
    numa_tree_free(&t);
}

/* --warm-restarts under the same binding: the workers forked from the zygote bind
 * themselves as the launcher binds a cold one (CPUs and memory node of their local rank). */
static void test_numa_binding_in_warm_restarts(void **state)
{
    const char *python = getenv("DDP_TEST_PYTHON");
    numa_tree_t t;
    if (python == NULL || *python == '\0') {
        printf("no python3: skipped\n");
        skip();
    }
    numa_tree(&t, false);
    if (t.ncpus < 2) {
        numa_tree_free(&t);
        skip();
    }
    char first[1024], second[1024], root_env[600], exec[600], trigger[700], script[1100];
    int half = (t.ncpus + 1) / 2;
    cpu_list(&t, 0, half, first, sizeof first);
    cpu_list(&t, half, t.ncpus, second, sizeof second);
    snprintf(root_env, sizeof root_env, "DDP_TOPOLOGY_ROOT=%s", t.root);
    snprintf(exec, sizeof exec, "PYTHON_EXEC=%s", python);
    const char *file = th_trigger_var(trigger, sizeof trigger);
    snprintf(script, sizeof script, "%s/tests/python/warm_plain.py", th_source_dir());
    const char *env[] = {root_env, exec, trigger, "CUDA_VISIBLE_DEVICES", NULL};
    const char *argv[] = {th_launcher(),
                          "--nproc-per-node=2",
                          "--numa-binding=exclusive",
                          "--tee=1",
                          "--max-restarts=1",
                          "--warm-restarts",
                          "--preload=json",
                          script,
                          "place",
                          NULL};
    th_proc_t p;
    th_run_after(&p, argv, env, "has imported json", file, 60);
    TH_ASSERT(&p, th_status(&p) == 0);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "2 of 2 workers of attempt 1 forked") != NULL);
    expect_var(&p, 0, "CPUS", first);
    expect_var(&p, 1, "CPUS", second);
    expect_var(&p, 0, "POLICY", "prefer:0");
    expect_var(&p, 1, "POLICY", "prefer:0");
    th_cleanup(&p);
    numa_tree_free(&t);
}

/* GPU 2 sits on node 1, which has no CPU: the launch stops before any worker starts, naming
 * the worker; --numa-binding-fallback runs it unbound with a warning. */
static void test_numa_binding_refused(void **state)
{
    numa_tree_t t;
    numa_tree(&t, false);
    const char *plain[] = {"--numa-binding=node", "--tee=1", "--exit-code=worker", NULL};
    const char *fallback[] = {"--numa-binding=node", "--tee=1", "--numa-binding-fallback", NULL};
    th_proc_t p;
    run_placement(&t, "2", plain, &p);
    TH_ASSERT(&p, th_status(&p) == 3);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err),
                         "unable to bind worker local rank 0 (--numa-binding=node): NUMA node 1 "
                         "of GPU 0 (0000:03:00.0) has no CPU ddp-launch may use") != NULL);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.out), "CPUS=") == NULL);
    th_cleanup(&p);
    run_placement(&t, "2", fallback, &p);
    TH_ASSERT(&p, th_status(&p) == 0);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "worker local rank 0 runs unbound") != NULL);
    expect_var(&p, 0, "CPUS", t.allowed);
    expect_var(&p, 0, "POLICY", "default");
    th_cleanup(&p);
    numa_tree_free(&t);
}

/* The tree gives node 1 CPUs, so the plan holds, but the kernel has no node 1: the worker's
 * memory policy is refused in its child, which says so on its stderr and exits 126 (or, with
 * the fallback, runs on). */
static void test_numa_binding_kernel_refusal(void **state)
{
    numa_tree_t t;
    numa_tree(&t, true);
    const char *plain[] = {"--numa-binding=node", "--tee=1", "--exit-code=worker", NULL};
    const char *fallback[] = {"--numa-binding=node", "--tee=1", "--numa-binding-fallback", NULL};
    th_proc_t p;
    run_placement(&t, "2", plain, &p);
    TH_ASSERT(&p, th_status(&p) == 126);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "unable to bind worker local rank 0 to its memory "
                                              "node (CPUs ") != NULL);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), ", memory node 1): Invalid argument") != NULL);
    th_cleanup(&p);
    run_placement(&t, "2", fallback, &p);
    TH_ASSERT(&p, th_status(&p) == 0);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "it runs without (--numa-binding-fallback)") != NULL);
    expect_var(&p, 0, "POLICY", "default");
    th_cleanup(&p);
    numa_tree_free(&t);
}

/* On this machine itself (one NUMA node, no GPU) binding is a no-op, said once. */
static void test_numa_binding_no_op_here(void **state)
{
    const char *flags[] = {"--nproc-per-node=2", "--numa-binding=socket", "--tee=1", NULL};
    th_proc_t p;
    run_placement(NULL, NULL, flags, &p);
    TH_ASSERT(&p, th_status(&p) == 0);
    TH_ASSERT(&p, th_count(ddp_buf_str(&p.err), "--numa-binding=socket: the workers are not "
                                                "bound: ") == 1);
    expect_var(&p, 1, "POLICY", "default");
    th_cleanup(&p);
}

/* A descriptor the launcher inherited (a parent's pipe, make's jobserver) does not reach
 * the workers, as Python's subprocess (close_fds) keeps it from torchrun's: a worker's
 * leftover process would hold the parent's pipe open after the job. */
static void test_inherited_descriptors_stay_out(void **state)
{
    const char *argv[] = {"/bin/sh",
                          "-c",
                          "exec 7</dev/null; (: <&7) && echo 'launcher has 7' && exec \"$@\"",
                          "sh",
                          th_launcher(),
                          "--nproc-per-node=2",
                          "--no-python",
                          "/bin/sh",
                          "-c",
                          "if (: <&7) 2>/dev/null; then echo 'worker has 7'; else echo 'worker "
                          "without 7'; fi",
                          NULL};
    th_proc_t p;
    th_run(&p, argv, NULL, 60);
    const char *out = ddp_buf_str(&p.out);
    TH_ASSERT(&p, th_status(&p) == 0);
    TH_ASSERT(&p, th_count(out, "launcher has 7\n") == 1);
    TH_ASSERT(&p, th_count(out, "worker without 7\n") == 2);
    th_cleanup(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        TH_TEST(test_contract_four_workers),
        TH_TEST(test_contract_one_worker),
        TH_TEST(test_user_settings_are_kept),
        TH_TEST(test_standalone_gets_a_free_port_and_run_id),
        TH_TEST(test_master_addr_ipv6_brackets),
        TH_TEST(test_virtual_local_rank),
        TH_TEST(test_argv_reaches_the_worker),
        TH_TEST(test_legacy_local_rank_argument),
        TH_TEST(test_dry_run_starts_nothing),
        TH_TEST(test_dry_run_of_another_node),
        TH_TEST(test_program_without_no_python),
        TH_TEST(test_program_in_path),
        TH_TEST(test_nproc_per_node_xpu),
        TH_TEST(test_hello_example),
        TH_TEST(test_start_up_errors),
        TH_TEST(test_program_only_in_the_working_directory),
        TH_TEST(test_nnodes_outside_a_slurm_step_said),
        TH_TEST(test_store_port_in_use),
        TH_TEST(test_store_name_with_an_address_not_here),
        TH_TEST(test_default_port_busy_takes_a_free_one),
        TH_TEST(test_numa_binding_applied),
        TH_TEST(test_numa_binding_in_warm_restarts),
        TH_TEST(test_numa_binding_refused),
        TH_TEST(test_numa_binding_kernel_refusal),
        TH_TEST(test_numa_binding_no_op_here),
        TH_TEST(test_inherited_descriptors_stay_out),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
