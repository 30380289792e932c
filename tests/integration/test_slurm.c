/* Multi-node jobs under a real Slurm (Debian's slurmctld, slurmd and munge): a cluster of
 * three nodes, each a network namespace with its own hostname, that
 * tests/support/cluster brings up for these tests and removes after them. Under
 * srun nothing is typed but the per-node command; in an allocation, one ddp-launch
 * starts the job on every node through srun. Skipped (77) where namespaces or the
 * packages are missing. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "harness.h"

#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define NODES        3
#define FASHION_DATA "/usr/share/datasets/fashion-mnist"

static th_cluster_t cluster; /* cluster.config: SLURM_CONF=... */

static int cluster_up(void **state)
{
    (void)state;
    th_cluster_up(&cluster, "slurm", NODES);
    printf("a Slurm cluster of %d nodes: %s\n", NODES, cluster.config);
    return 0;
}

static int cluster_down(void **state)
{
    (void)state;
    th_cluster_down(&cluster);
    return 0;
}

/* The environment of srun and sbatch: the cluster's configuration, no port of the
 * integration tests' (PET_MASTER_PORT=0 would ask every node for a free port of its own),
 * PyTorch's python for Python workers. */
static const char *const *job_env(void)
{
    static const char *env[4];
    env[0] = cluster.config;
    env[1] = "PET_MASTER_PORT";
    env[2] = "PYTHON_EXEC=/usr/bin/python3";
    env[3] = NULL;
    return env;
}

/* `srun -N3 --ntasks-per-node=1 ddp-launch ARGS...` (args: at most 12). */
static void srun_launchers(th_proc_t *p, const char *const *args, double timeout)
{
    const char *argv[24] = {"/usr/bin/srun", "--nodes=3", "--ntasks-per-node=1", "--time=5",
                            th_launcher()};
    for (int i = 0; i < 12 && args[i] != NULL; i++)
        argv[5 + i] = args[i];
    th_run(p, argv, job_env(), timeout);
}

/* Submits a batch script of `body` without waiting (with sbatch's --signal `signal`
 * where not NULL): its job id; its output goes to `output`. */
static int submit(const char *body, const char *dir, const char *output, const char *signal)
{
    char script[700], flag[720];
    snprintf(script, sizeof script, "%s/job.sh", dir);
    snprintf(flag, sizeof flag, "--output=%s", output);
    FILE *f = fopen(script, "w");
    assert_non_null(f);
    fprintf(f, "#!/bin/sh\n%s\n", body);
    fclose(f);
    chmod(script, 0755);
    /* With a warning signal, a one-minute job: Slurm sends it within that minute. */
    const char *argv[] = {"/usr/bin/sbatch",
                          "--parsable",
                          "--nodes=3",
                          signal != NULL ? "--time=1" : "--time=5",
                          flag,
                          signal != NULL ? signal : script,
                          signal != NULL ? script : NULL,
                          NULL};
    th_proc_t p;
    th_run(&p, argv, job_env(), 60);
    TH_ASSERT(&p, th_status(&p) == 0);
    int id = atoi(ddp_buf_str(&p.out));
    TH_ASSERT(&p, id > 0);
    th_cleanup(&p);
    return id;
}

/* The text of `path` (empty when it cannot be read); the caller frees. */
static char *slurp(const char *path)
{
    char *text = calloc(1, 1 << 20);
    assert_non_null(text);
    FILE *f = fopen(path, "r");
    if (f != NULL) {
        size_t len = fread(text, 1, (1 << 20) - 1, f);
        text[len] = '\0';
        fclose(f);
    }
    return text;
}

/* Polls `path` (every 50 ms, up to `timeout` s) until `needle` is in it `count` times. */
static bool wait_file(const char *path, const char *needle, int count, double timeout)
{
    double deadline = th_now() + timeout;
    for (;;) {
        char *text = slurp(path);
        bool there = th_count(text, needle) >= count;
        free(text);
        if (there || th_now() >= deadline)
            return there;
        struct timespec tick = {0, 50 * 1000 * 1000};
        nanosleep(&tick, NULL);
    }
}

/* Polls squeue (every 100 ms, up to `timeout` s) until job `id` has left the queue. */
static bool wait_job_gone(int id, double timeout)
{
    char job[32];
    snprintf(job, sizeof job, "--jobs=%d", id);
    const char *argv[] = {"/usr/bin/squeue", "--noheader", "--format=%i", job, NULL};
    double deadline = th_now() + timeout;
    for (;;) {
        th_proc_t p;
        th_run(&p, argv, job_env(), 30);
        bool gone = strstr(ddp_buf_str(&p.out), job + strlen("--jobs=")) == NULL;
        th_cleanup(&p);
        if (gone || th_now() >= deadline)
            return gone;
        struct timespec tick = {0, 100 * 1000 * 1000};
        nanosleep(&tick, NULL);
    }
}

/* Runs `scancel [flag] ID` for job `id`. */
static void scancel(int id, const char *flag)
{
    char job[32];
    snprintf(job, sizeof job, "%d", id);
    const char *argv[] = {"/usr/bin/scancel", flag != NULL ? flag : job, flag != NULL ? job : NULL,
                          NULL};
    th_proc_t p;
    th_run(&p, argv, job_env(), 30);
    TH_ASSERT(&p, th_status(&p) == 0);
    th_cleanup(&p);
}

/* Submits a batch script of `body` on the 3 nodes, waits for its end, and returns its
 * output (the caller frees). */
static char *sbatch(const char *body)
{
    char *dir = th_tmpdir(), output[700];
    snprintf(output, sizeof output, "%s/job.out", dir);
    int id = submit(body, dir, output, NULL);
    assert_true(wait_job_gone(id, 300));
    char *text = slurp(output);
    th_rmtree(dir);
    free(dir);
    return text;
}

static void assert_hellos(const char *out, int world, const char *const *hosts)
{
    char line[128];
    for (int r = 0; r < world; r++) {
        snprintf(line, sizeof line, "hello from rank %d of %d (", r, world);
        if (strstr(out, line) == NULL)
            fail_msg("no '%s' in:\n%s", line, out);
    }
    for (int i = 0; hosts[i] != NULL; i++) {
        snprintf(line, sizeof line, " on %s, pid", hosts[i]);
        if (strstr(out, line) == NULL)
            fail_msg("no rank ran on %s:\n%s", hosts[i], out);
    }
}

/* A program on n0 that holds TCP `port` (listening, never answering), until killed. */
static void hold_port_on_n0(th_proc_t *hold, int port)
{
    char net[80], code[400];
    snprintf(net, sizeof net, "--net=/run/netns/dds%sn0", cluster.tag);
    snprintf(code, sizeof code,
             "import socket, time\n"
             "s = socket.socket()\n"
             "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
             "s.bind(('0.0.0.0', %d))\n"
             "s.listen()\n"
             "print('holding', flush=True)\n"
             "time.sleep(150)\n",
             port);
    const char *holder[] = {"/usr/bin/nsenter", net, "/usr/bin/python3", "-c", code, NULL};
    th_start(hold, holder, NULL);
    TH_ASSERT(hold, th_wait_output(hold, 1, "holding", 1, 30));
}

/* Under srun, each launcher finds its place from Slurm's variables: 6 ranks on n0..n2,
 * the store on the first node at the job's own port. */
static void test_srun_forms_the_job(void **state)
{
    const char *args[] = {"--nproc-per-node=2", "--no-python", getenv("DDP_TEST_HELLO"), NULL};
    th_proc_t p;
    srun_launchers(&p, args, 120);
    const char *out = ddp_buf_str(&p.out), *err = ddp_buf_str(&p.err);
    const char *hosts[] = {"n0", "n1", "n2", NULL};
    TH_ASSERT(&p, th_status(&p) == 0);
    assert_hellos(out, 6, hosts);
    TH_ASSERT(&p, th_count(err, "--master-addr=n0 from SLURM_STEP_NODELIST") == 3);
    TH_ASSERT(&p, th_count(err, " from SLURM_JOB_ID=") == 3);
    th_cleanup(&p);
}

/* The C example trains on 3 nodes of 2 workers. */
static void test_srun_c_example_trains(void **state)
{
    const char *fashion = getenv("DDP_TEST_FASHION");
    if (fashion == NULL || *fashion == '\0' || access(FASHION_DATA, R_OK) != 0) {
        printf("no FashionMNIST example or data here: skipped\n");
        return;
    }
    const char *args[] = {"--nproc-per-node=2", "--no-python",       fashion, "--model=mlp",
                          "--max-steps=30",     "--limit-test=1200", NULL};
    th_proc_t p;
    srun_launchers(&p, args, 300);
    const char *out = ddp_buf_str(&p.out);
    TH_ASSERT(&p, th_status(&p) == 0);
    TH_ASSERT(&p, strstr(out, "training MLP on 60000 samples, 6 worker(s) x batch 64") != NULL);
    TH_ASSERT(&p, strstr(out, "test accuracy ") != NULL);
    th_cleanup(&p);
}

/* PyTorch's gloo across the 3 nodes: every rank sees the sum of 1..6. */
static void test_srun_pytorch_gloo(void **state)
{
    char script[600];
    snprintf(script, sizeof script, "%s/tests/python/gloo_allreduce.py", th_source_dir());
    const char *probe[] = {"/usr/bin/python3", "-c", "import torch", NULL};
    th_proc_t p;
    if (!th_succeeds(probe, 120)) {
        printf("no PyTorch for /usr/bin/python3: skipped\n");
        return;
    }
    const char *args[] = {"--nproc-per-node=2", script, NULL};
    srun_launchers(&p, args, 300);
    const char *out = ddp_buf_str(&p.out);
    TH_ASSERT(&p, th_status(&p) == 0);
    for (int r = 0; r < 6; r++) {
        char line[64];
        snprintf(line, sizeof line, "rank %d of 6 sum 21\n", r);
        TH_ASSERT(&p, strstr(out, line) != NULL);
    }
    th_cleanup(&p);
}

/* In an allocation, outside a step, one ddp-launch starts a launcher on every node
 * through srun; --dry-run shows the srun command and each node's; the job's exit status
 * is the batch script's. */
static void test_one_command_in_an_allocation(void **state)
{
    char body[2000];
    const char *hello = getenv("DDP_TEST_HELLO");
    snprintf(body, sizeof body,
             "'%s' --nproc-per-node=2 --dry-run --no-python '%s'\n"
             "'%s' --nproc-per-node=2 --no-python '%s'\necho \"exit=$?\"\n"
             "'%s' --nproc-per-node=1 --no-python /bin/sh -c 'exit 3'\necho \"exit=$?\"\n",
             th_launcher(), hello, th_launcher(), hello, th_launcher());
    char *out = sbatch(body);
    const char *hosts[] = {"n0", "n1", "n2", NULL};
    if (strstr(out, "exit=0\n") == NULL)
        fail_msg("the job failed:\n%s", out);
    assert_hellos(out, 6, hosts);
    assert_non_null(strstr(out, "--nodes=3 --ntasks=3 --ntasks-per-node=1 --label"));
    /* Each node's lines carry its task number (srun --label): node 2 runs ranks 4, 5. */
    if (strstr(out, "2: hello from rank 4 of 6 (") == NULL)
        fail_msg("no labelled line of node 2 in:\n%s", out);
    char line[256];
    snprintf(line, sizeof line,
             "on n2: %s --nnodes=3 --node-rank=2 --master-addr=n0 --master-port=", th_launcher());
    if (strstr(out, line) == NULL)
        fail_msg("no '%s' in:\n%s", line, out);
    /* A worker's failure is the job's. */
    if (strstr(out, "exit=1\n") == NULL)
        fail_msg("the failing job's status is not 1:\n%s", out);
    free(out);
}

/* Node 0 fails at start in the one-command form (--master-addr names node 2, not node 0):
 * it says why and exits 4; the other nodes, tasks of the same step, say so and end with 5
 * within seconds instead of waiting out the 900 s timeout. */
static void test_node0_failing_at_start_ends_the_job(void **state)
{
    char body[1000];
    snprintf(body, sizeof body,
             "'%s' --nproc-per-node=1 --master-addr=n2 --no-python /bin/true\necho \"exit=$?\"\n",
             th_launcher());
    double started = th_now();
    char *out = sbatch(body);
    double took = th_now() - started;
    if (took > 120 || strstr(out, "exit=5\n") == NULL)
        fail_msg("the job took %.0f s or did not end with 5:\n%s", took, out);
    if (strstr(out, "0: ddp-launch: error: ") == NULL ||
        th_count(out, "is not there 20 s after this Slurm step started") != 2)
        fail_msg("node 0's failure and the others' end are not said:\n%s", out);
    free(out);
}

/* The same for an elastic (c10d) job whose store's host is a node of the step: its port
 * held on n0, every node ends with 5 within seconds instead of waiting out the 900 s. */
static void test_c10d_store_host_failing_ends_the_job(void **state)
{
    char body[2000];
    th_proc_t hold;
    hold_port_on_n0(&hold, 29512);
    snprintf(body, sizeof body,
             "srun '%s' --nnodes=1:3 --rdzv-backend=c10d --rdzv-endpoint=n0:29512 "
             "--nproc-per-node=1 --no-python /bin/true\necho \"exit=$?\"\n",
             th_launcher());
    double started = th_now();
    char *out = sbatch(body);
    double took = th_now() - started;
    kill(hold.pid, SIGKILL);
    th_cleanup(&hold);
    if (took > 120 || strstr(out, "exit=5\n") == NULL ||
        th_count(out, "is not there 20 s after this Slurm step started") < 2)
        fail_msg("the job took %.0f s or did not end with 5:\n%s", took, out);
    free(out);
}

/* A program missing on the allocation's first node (where the batch script runs) is said
 * once there, 127, before srun starts a launcher on every node that would each say it. */
static void test_missing_program_said_before_srun(void **state)
{
    char body[1000];
    snprintf(body, sizeof body,
             "'%s' --nproc-per-node=1 --no-python /nonexistent/ddp-prog\necho \"exit=$?\"\n",
             th_launcher());
    char *out = sbatch(body);
    if (strstr(out, "exit=127\n") == NULL ||
        th_count(out, "/nonexistent/ddp-prog does not exist on n0, the first node") != 1 ||
        strstr(out, "starting one ddp-launch a node") != NULL)
        fail_msg("the missing program was not said once before srun:\n%s", out);
    free(out);
}

/* Two jobs sharing a node do not meet on 29500: with it held on the first node, the job
 * forms at its own port; given --master-port=29500, it cannot. */
static void test_port_of_the_job_not_29500(void **state)
{
    char body[2000];
    th_proc_t hold;
    hold_port_on_n0(&hold, 29500);
    const char *hello = getenv("DDP_TEST_HELLO");
    snprintf(body, sizeof body,
             "'%s' --nproc-per-node=1 --no-python '%s'\necho \"exit=$?\"\n"
             "srun --kill-on-bad-exit=1 '%s' --nproc-per-node=1 --master-port=29500 "
             "--no-python '%s'\n"
             "echo \"exit=$?\"\n",
             th_launcher(), hello, th_launcher(), hello);
    char *out = sbatch(body);
    const char *hosts[] = {"n0", "n1", "n2", NULL};
    kill(hold.pid, SIGKILL);
    th_cleanup(&hold);
    if (strstr(out, "exit=0\n") == NULL)
        fail_msg("the job did not form beside a held 29500:\n%s", out);
    assert_hellos(out, 3, hosts);
    if (strstr(out, "port 29500 on ") == NULL ||
        strstr(out, "is in use by another program") == NULL || th_count(out, "exit=0\n") != 1)
        fail_msg("--master-port=29500 did not fail, port in use:\n%s", out);
    free(out);
}

/* srun --ntasks-per-node=2 would start two launchers as one node: refused, saying why. */
static void test_two_tasks_a_node_refused(void **state)
{
    const char *argv[] = {"/usr/bin/srun", "--nodes=1",   "--ntasks-per-node=2",
                          "--time=2",      th_launcher(), "--nproc-per-node=1",
                          "--no-python",   "/bin/true",   NULL};
    th_proc_t p;
    th_run(&p, argv, job_env(), 120);
    TH_ASSERT(&p, th_status(&p) == 2);
    TH_ASSERT(&p, th_count(ddp_buf_str(&p.err), "srun started 2 tasks on this node") == 2);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "use srun --ntasks-per-node=1") != NULL);
    th_cleanup(&p);
}

/* A step on a part of the allocation (srun -N2 -r1: n1 and n2): its first node hosts the
 * store, not the allocation's. */
static void test_step_of_part_of_the_allocation(void **state)
{
    char body[1000];
    snprintf(body, sizeof body,
             "srun --nodes=2 --relative=1 '%s' --nproc-per-node=1 --no-python '%s'\n"
             "echo \"exit=$?\"\n",
             th_launcher(), getenv("DDP_TEST_HELLO"));
    char *out = sbatch(body);
    const char *hosts[] = {"n1", "n2", NULL};
    if (strstr(out, "exit=0\n") == NULL || strstr(out, "--master-addr=n1 from") == NULL)
        fail_msg("the step of n1 and n2 did not form at n1:\n%s", out);
    assert_hellos(out, 2, hosts);
    free(out);
}

/* Preemption: USR1 reaches every worker on every node through
 * --signals-to-handle=SIGTERM,SIGUSR1 (one command in the allocation): from `scancel
 * --signal=USR1`, or from `sbatch --signal=USR1@60` (Slurm sends it on its own timer,
 * within the job's first minute here). (slurmstepd signals every process of the step
 * itself too, so a worker may see it twice.) */
static void usr1_reaches_every_worker(const char *sbatch_flag, bool scancel_it)
{
    char *dir = th_tmpdir(), output[700], body[2000];
    snprintf(output, sizeof output, "%s/job.out", dir);
    snprintf(body, sizeof body,
             "'%s' --signals-to-handle=SIGTERM,SIGUSR1 --nproc-per-node=2 --no-python /bin/sh -c "
             "'trap \"echo got USR1 rank $RANK on $(hostname); exit 0\" USR1; echo ready rank "
             "$RANK; while :; do sleep 0.2; done'",
             th_launcher());
    int id = submit(body, dir, output, sbatch_flag);
    if (!wait_file(output, "ready rank ", 6, 60)) {
        char *text = slurp(output);
        fail_msg("the 6 workers did not start:\n%s", text);
    }
    if (scancel_it)
        scancel(id, "--signal=USR1");
    assert_true(wait_job_gone(id, 120));
    char *text = slurp(output);
    for (int r = 0; r < 6; r++) {
        char line[64];
        snprintf(line, sizeof line, "got USR1 rank %d on n%d\n", r, r / 2);
        if (th_count(text, line) < 1) {
            printf("%s\n", text); /* whole (fail_msg cuts long messages) */
            fail_msg("%d times '%s'", th_count(text, line), line);
        }
    }
    free(text);
    th_rmtree(dir);
    free(dir);
}

static void test_scancel_usr1_reaches_every_worker(void **state)
{
    usr1_reaches_every_worker(NULL, true);
}

static void test_sbatch_signal_reaches_every_worker(void **state)
{
    usr1_reaches_every_worker("--signal=USR1@60", false);
}

/* A job Slurm ends (scancel: SIGTERM, SIGKILL after KillWait=5 s) stops workers that
 * ignore SIGTERM within --shutdown-timeout, on every node, before Slurm's SIGKILL; no
 * process is left (the test's teardown looks for any that carries its mark). */
static void test_scancel_stops_every_node(void **state)
{
    char *dir = th_tmpdir(), output[700], body[2000];
    snprintf(output, sizeof output, "%s/job.out", dir);
    snprintf(body, sizeof body,
             "'%s' --shutdown-timeout=1 --nproc-per-node=2 --no-python /bin/sh -c "
             "'trap \"\" TERM; echo ready rank $RANK; while :; do sleep 0.2; done'",
             th_launcher());
    int id = submit(body, dir, output, NULL);
    if (!wait_file(output, "ready rank ", 6, 60)) {
        char *text = slurp(output);
        fail_msg("the 6 workers did not start:\n%s", text);
    }
    scancel(id, NULL);
    assert_true(wait_job_gone(id, 60));
    char *text = slurp(output);
    if (th_count(text, "still running 1 s after the stop signal") != 3)
        fail_msg("not every node's launcher stopped its workers itself:\n%s", text);
    free(text);
    th_rmtree(dir);
    free(dir);
}

/* The one command with --rdzv-backend=etcd (one etcd member on the cluster's bridge):
 * srun runs the same command on every node, each launcher takes the step's run id, etcd
 * elects the store's launcher, and the job of 6 ranks runs, 2 on each node. */
static void test_one_command_with_etcd(void **state)
{
    char host[48], body[2000];
    th_cluster_bridge_addr(&cluster, host, sizeof host);
    th_etcd_t etcd;
    th_etcd_up_at(&etcd, 1, host);
    snprintf(body, sizeof body,
             "'%s' --rdzv-backend=etcd --rdzv-endpoint=%s --nproc-per-node=2 --no-python "
             "'%s'\necho \"exit=$?\"\n",
             th_launcher(), etcd.endpoints, getenv("DDP_TEST_HELLO"));
    char *out = sbatch(body);
    const char *hosts[] = {"n0", "n1", "n2", NULL};
    if (strstr(out, "exit=0\n") == NULL || th_count(out, "etcd: elected") != 1)
        fail_msg("the job failed, or not one launcher was elected:\n%s", out);
    assert_hellos(out, 6, hosts);
    free(out);
    th_etcd_down(&etcd);
}

int main(int argc, char **argv)
{
    if (argc > 1)
        cmocka_set_test_filter(argv[1]);
    char why[600];
    snprintf(why, sizeof why, "'%s/tests/support/cluster' check slurm", th_source_dir());
    if (system(why) != 0)
        return 77; /* the script said why */
    const struct CMUnitTest tests[] = {
        TH_TEST(test_srun_forms_the_job),
        TH_TEST(test_two_tasks_a_node_refused),
        TH_TEST(test_one_command_in_an_allocation),
        TH_TEST(test_one_command_with_etcd),
        TH_TEST(test_node0_failing_at_start_ends_the_job),
        TH_TEST(test_missing_program_said_before_srun),
        TH_TEST(test_c10d_store_host_failing_ends_the_job),
        TH_TEST(test_step_of_part_of_the_allocation),
        TH_TEST(test_port_of_the_job_not_29500),
        TH_TEST(test_scancel_usr1_reaches_every_worker),
        TH_TEST(test_sbatch_signal_reaches_every_worker),
        TH_TEST(test_scancel_stops_every_node),
        TH_TEST(test_srun_c_example_trains),
        TH_TEST(test_srun_pytorch_gloo),
    };
    return cmocka_run_group_tests(tests, cluster_up, cluster_down);
}
