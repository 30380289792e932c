/* Multi-node jobs with static rendezvous: one real ddp-launch per "node". Each node is a
 * Linux network namespace the test creates (a veth pair to a bridge, an address of its
 * own: node i is 10.A.B.(i+1)), and node 0's launcher hosts the store at its address;
 * where namespaces cannot be made (no root, no ip), every node is a launcher on
 * 127.0.0.1 instead. The namespaces and the bridge are removed at the end. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "ckpt.h"
#include "harness.h"
#include "io.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_NODES 3 /* network namespaces: node rank r lives in namespace r */
#define JOB_MAX   8 /* launchers of one job (spares share their node rank's namespace) */

/* Where the nodes live. */
static struct {
    bool netns;
    const char *ip; /* the ip program */
    char bridge[16];
    char ns[MAX_NODES][32];
    char addr[MAX_NODES][32];
    char dev[MAX_NODES][16]; /* the node's interface, inside its namespace */
} net;

static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...)
{
    char cmd[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    return system(cmd);
}

static int net_teardown(void **state)
{
    if (!net.netns)
        return 0;
    for (int i = 0; i < MAX_NODES; i++)
        sh("%s netns del %s 2>/dev/null", net.ip, net.ns[i]);
    sh("%s link del %s 2>/dev/null", net.ip, net.bridge);
    /* Nothing of ours may be left. */
    int left = sh("%s netns list | grep -q '^%s' || %s link show %s >/dev/null 2>&1", net.ip,
                  net.ns[0], net.ip, net.bridge);
    net.netns = false;
    if (left == 0)
        fail_msg("a namespace or the bridge %s outlived the tests", net.bridge);
    return 0;
}

static int net_setup(void **state)
{
    /* Names carry the whole pid (a killed run's are found by it); addresses a part of it. */
    int tag = (int)getpid(), a = 100 + tag % 100, b = tag / 100 % 250;
    for (int i = 0; i < MAX_NODES; i++)
        snprintf(net.addr[i], sizeof net.addr[i], "127.0.0.1");
    net.ip = access("/usr/sbin/ip", X_OK) == 0 ? "/usr/sbin/ip"
             : access("/sbin/ip", X_OK) == 0   ? "/sbin/ip"
                                               : NULL;
    if (net.ip == NULL || geteuid() != 0) {
        printf("no network namespaces (%s): every node on 127.0.0.1\n",
               net.ip == NULL ? "no ip program" : "not root");
        return 0;
    }
    /* What a run of this test that was killed left (its tag a pid no longer running):
     * namespaces (their veths go with them) and bridges. */
    sh("for ns in $(%s netns list | awk '{print $1}' | grep -E '^ddp[0-9]+n[0-9]+$'); do "
       "t=${ns#ddp}; kill -0 ${t%%n*} 2>/dev/null || %s netns del $ns; done; "
       "for br in $(%s -o link show type bridge | grep -oE 'ddpb[0-9]+' | sort -u); do "
       "kill -0 ${br#ddpb} 2>/dev/null || %s link del $br; done",
       net.ip, net.ip, net.ip, net.ip);
    snprintf(net.bridge, sizeof net.bridge, "ddpb%d", tag);
    net.netns = true; /* from here on, teardown removes what exists */
    int err = sh("%s link add %s type bridge && %s link set %s up", net.ip, net.bridge, net.ip,
                 net.bridge);
    for (int i = 0; i < MAX_NODES && err == 0; i++) {
        char host_end[16];
        snprintf(net.ns[i], sizeof net.ns[i], "ddp%dn%d", tag, i);
        snprintf(net.addr[i], sizeof net.addr[i], "10.%d.%d.%d", a, b, i + 1);
        snprintf(net.dev[i], sizeof net.dev[i], "ddp%dp%d", tag, i);
        snprintf(host_end, sizeof host_end, "ddp%dv%d", tag, i);
        const char *ip = net.ip, *ns = net.ns[i], *dev = net.dev[i];
        err = sh("%s netns add %s", ip, ns);
        err = err ? err : sh("%s link add %s type veth peer name %s", ip, host_end, dev);
        err = err ? err : sh("%s link set %s netns %s", ip, dev, ns);
        err = err ? err : sh("%s link set %s master %s", ip, host_end, net.bridge);
        err = err ? err : sh("%s link set %s up", ip, host_end);
        err = err ? err : sh("%s -n %s addr add %s/24 dev %s", ip, ns, net.addr[i], dev);
        err = err ? err : sh("%s -n %s link set %s up", ip, ns, dev);
        err = err ? err : sh("%s -n %s link set lo up", ip, ns);
    }
    if (err != 0) {
        net_teardown(state);
        for (int i = 0; i < MAX_NODES; i++)
            snprintf(net.addr[i], sizeof net.addr[i], "127.0.0.1");
        printf("network namespaces cannot be made here: every node on 127.0.0.1\n");
        return 0;
    }
    printf("nodes in network namespaces %s.. on bridge %s, 10.%d.%d.0/24\n", net.ns[0], net.bridge,
           a, b);
    return 0;
}

typedef struct {
    int port;
    char run_id[64];
    th_proc_t node[JOB_MAX];
    int n;
} job_t;

static void job_init(job_t *job)
{
    memset(job, 0, sizeof *job);
    job->port = th_free_port();
    snprintf(job->run_id, sizeof job->run_id, "mn-%d-%d", (int)getpid(), job->port);
}

/* Starts a launcher: `flags` (space-separated, at most 6) then the program and its
 * arguments (NULL-terminated), with `env` added to the environment (may be NULL). */
static th_proc_t *start_node_env(job_t *job, int nnodes, int node_rank, int nproc,
                                 const char *flags, const char *const *program,
                                 const char *const *env)
{
    static char buf[JOB_MAX][12][128];
    char f[256];
    snprintf(f, sizeof f, "%s", flags ? flags : "");
    const char *argv[40];
    int n = 0, b = 0;
    char(*mine)[128] = buf[job->n];
    if (net.netns) {
        argv[n++] = net.ip;
        argv[n++] = "netns";
        argv[n++] = "exec";
        argv[n++] = net.ns[node_rank];
    }
    argv[n++] = th_launcher();
    if (nnodes > 0) { /* else the flags say */
        snprintf(mine[b], sizeof mine[b], "--nnodes=%d", nnodes);
        argv[n++] = mine[b++];
    }
    snprintf(mine[b], sizeof mine[b], "--node-rank=%d", node_rank);
    argv[n++] = mine[b++];
    snprintf(mine[b], sizeof mine[b], "--nproc-per-node=%d", nproc);
    argv[n++] = mine[b++];
    snprintf(mine[b], sizeof mine[b], "--master-port=%d", job->port);
    argv[n++] = mine[b++];
    snprintf(mine[b], sizeof mine[b], "--rdzv-id=%s", job->run_id);
    argv[n++] = mine[b++];
    snprintf(mine[b], sizeof mine[b], "--master-addr=%s", net.addr[0]);
    argv[n++] = mine[b++];
    if (strstr(program[0], ".py") == NULL)
        argv[n++] = "--no-python";
    for (char *save, *tok = strtok_r(f, " ", &save); tok != NULL; tok = strtok_r(NULL, " ", &save))
        argv[n++] = tok;
    for (int i = 0; program[i] != NULL; i++)
        argv[n++] = program[i];
    argv[n] = NULL;
    assert_true(job->n < JOB_MAX);
    th_proc_t *p = &job->node[job->n++];
    th_start(p, argv, env);
    return p;
}

static th_proc_t *start_node(job_t *job, int nnodes, int node_rank, int nproc, const char *flags,
                             const char *const *program)
{
    return start_node_env(job, nnodes, node_rank, nproc, flags, program, NULL);
}

static void job_wait(job_t *job, double timeout)
{
    for (int i = 0; i < job->n; i++)
        TH_ASSERT(&job->node[i], th_wait_exit(&job->node[i], timeout));
}

static void job_cleanup(job_t *job)
{
    for (int i = 0; i < job->n; i++)
        th_cleanup(&job->node[i]);
}

static const char *out(th_proc_t *p)
{
    return ddp_buf_str(&p->out);
}

static const char *err(th_proc_t *p)
{
    return ddp_buf_str(&p->err);
}

/* Nodes with different --nproc-per-node: ranks follow node order, every worker gets the
 * job's world and its node's share, and they all reach node 0's store. */
static void test_nodes_form_one_job(void **state)
{
    const char *env[] = {th_worker(), "env", NULL};
    job_t job;
    job_init(&job);
    th_proc_t *n1 = start_node(&job, 3, 1, 2, NULL, env);
    th_proc_t *n2 = start_node(&job, 3, 2, 1, NULL, env);
    th_proc_t *n0 = start_node(&job, 3, 0, 1, NULL, env); /* the store comes last */
    job_wait(&job, 60);
    for (int i = 0; i < 3; i++)
        TH_ASSERT(&job.node[i], th_status(&job.node[i]) == 0);
    char port[64];
    snprintf(port, sizeof port, "MASTER_PORT=%d\n", job.port);
    TH_ASSERT(n0, strstr(out(n0), "RANK=0\n") != NULL && strstr(out(n0), "GROUP_RANK=0\n"));
    TH_ASSERT(n1, strstr(out(n1), "\nRANK=1\n") != NULL && strstr(out(n1), "\nRANK=2\n"));
    TH_ASSERT(n1, th_count(out(n1), "LOCAL_WORLD_SIZE=2\n") == 2);
    TH_ASSERT(n1, th_count(out(n1), "GROUP_RANK=1\n") == 2);
    TH_ASSERT(n2, strstr(out(n2), "\nRANK=3\n") != NULL && strstr(out(n2), "GROUP_RANK=2\n"));
    for (int i = 0; i < 3; i++) {
        th_proc_t *p = &job.node[i];
        int workers = p == n1 ? 2 : 1;
        TH_ASSERT(p, th_count(out(p), "\nWORLD_SIZE=4\n") == workers);
        TH_ASSERT(p, th_count(out(p), "GROUP_WORLD_SIZE=3\n") == workers);
        TH_ASSERT(p, th_count(out(p), port) == workers);
        TH_ASSERT(p, th_count(out(p), "TORCHELASTIC_RESTART_COUNT=0\n") == workers);
    }
    job_cleanup(&job);
}

/* A worker failing on node 1 stops node 0's workers too, and both nodes start round 1
 * (TORCHELASTIC_RESTART_COUNT=1 everywhere); --max-restarts is the job's budget. */
static void test_failure_restarts_every_node(void **state)
{
    const char *waits[] = {th_worker(), "wait-until", "1", NULL};
    const char *fails[] = {th_worker(), "fail-until", "1", "3", NULL};
    job_t job;
    job_init(&job);
    th_proc_t *n0 = start_node(&job, 2, 0, 2, "--max-restarts=1", waits);
    th_proc_t *n1 = start_node(&job, 2, 1, 1, "--max-restarts=1", fails);
    job_wait(&job, 60);
    TH_ASSERT(n0, th_status(n0) == 0);
    TH_ASSERT(n1, th_status(n1) == 0);
    TH_ASSERT(n1, strstr(out(n1), "failing on attempt 0 rank 0") != NULL);
    TH_ASSERT(n1, strstr(out(n1), "succeeded on attempt 1 rank 0") != NULL);
    /* Round 0's workers on node 0 were stopped: the failure reaches them within
     * milliseconds, so one may not have said "ready" yet. */
    TH_ASSERT(n0, th_count(out(n0), "ready ") <= 2);
    TH_ASSERT(n0, th_count(out(n0), "TORCHELASTIC_RESTART_COUNT=1\n") == 2);
    TH_ASSERT(n0, strstr(err(n0), "the round failed on another node (node 1") != NULL);
    TH_ASSERT(n0, strstr(err(n0), "worker rank 2 (local rank 0") != NULL);
    job_cleanup(&job);
}

/* Without a restart left the job fails on every node: node 1 with its report, node 0
 * naming node 1's failure. */
static void test_failure_without_restarts_ends_every_node(void **state)
{
    const char *waits[] = {th_worker(), "wait", NULL};
    const char *fails[] = {th_worker(), "exit", "7", NULL};
    job_t job;
    job_init(&job);
    th_proc_t *n0 = start_node(&job, 2, 0, 1, NULL, waits);
    th_proc_t *n1 = start_node(&job, 2, 1, 1, NULL, fails);
    double started = th_now();
    job_wait(&job, 60);
    TH_ASSERT(n0, th_now() - started < 30);
    TH_ASSERT(n1, th_status(n1) == 1);
    TH_ASSERT(n0, th_status(n0) == 1);
    TH_ASSERT(n0, strstr(err(n0), "no restart left") != NULL);
    TH_ASSERT(n0, strstr(err(n0), "node 1 (") != NULL);
    /* One report for the job, by the launcher serving the store, with node 1's failure as
     * its root cause; node 1 says where it is. */
    const char *root = strstr(err(n0), "Root Cause");
    TH_ASSERT(n0, root != NULL && strstr(root, "exitcode  : 7") != NULL &&
                      strstr(root, "rank      : 1 (local_rank: 0)") != NULL);
    TH_ASSERT(n1, strstr(err(n1), "Root Cause") == NULL);
    TH_ASSERT(n1, strstr(err(n1), "this node's failures (rank 1) are in the job's failure report, "
                                  "printed by the launcher serving the store at ") != NULL);
    job_cleanup(&job);
}

/* A node whose ranks finished (exit 0) while another node's ran, before the job failed
 * there, says so with the likely cause (a loop left early on some ranks): node 1 with all
 * its ranks done, node 0 with one done and one still running when the failure came. The
 * failure's line on the other nodes has what the failed rank said last. */
static void test_ranks_left_early_named(void **state)
{
    const char *n0_prog[] = {"/bin/sh", "-c", "if [ $LOCAL_RANK = 1 ]; then exec sleep 30; fi",
                             NULL};
    const char *n1_prog[] = {"/bin/sh", "-c", "exit 0", NULL};
    const char *n2_prog[] = {"/bin/sh", "-c", "sleep 3; echo 'scratch: disk full' >&2; exit 4",
                             NULL};
    job_t job;
    job_init(&job);
    th_proc_t *n0 = start_node(&job, 3, 0, 2, NULL, n0_prog);
    th_proc_t *n1 = start_node(&job, 3, 1, 1, NULL, n1_prog);
    th_proc_t *n2 = start_node(&job, 3, 2, 1, NULL, n2_prog);
    job_wait(&job, 60);
    for (int i = 0; i < 3; i++)
        TH_ASSERT(&job.node[i], th_status(&job.node[i]) == 1);
    const char *why = " s before the round failed on another node, while other ranks ran: a rank "
                      "that leaves the training loop early";
    TH_ASSERT(n0, strstr(err(n0), "warning: this node's rank 0 had finished (exit 0) ") != NULL);
    TH_ASSERT(n0, strstr(err(n0), why) != NULL);
    TH_ASSERT(n1, strstr(err(n1), "warning: this node's rank 2 had finished (exit 0) ") != NULL);
    TH_ASSERT(n1, strstr(err(n1), why) != NULL);
    TH_ASSERT(n2, strstr(err(n2), "had finished") == NULL); /* the failure's own node */
    /* The other nodes' line names the failure's cause: what it said last. */
    TH_ASSERT(n1, strstr(err(n1), "exited with code 4: scratch: disk full") != NULL);
    job_cleanup(&job);
}

/* No progress across rounds: the node that sees it ends the job with status 6 on every node. */
static void test_no_progress_ends_every_node(void **state)
{
    const char *fails[] = {th_worker(), "exit", "3", NULL};
    char *dir = th_tmpdir(), flags[800], file[600];
    snprintf(file, sizeof file, "%s/iteration", dir);
    FILE *f = fopen(file, "w");
    assert_non_null(f);
    fputs("7\n", f);
    fclose(f);
    snprintf(flags, sizeof flags,
             "--max-restarts=5 --max-no-progress-restarts=2 --progress-file=%s", file);
    job_t job;
    job_init(&job);
    th_proc_t *n0 = start_node(&job, 2, 0, 1, flags, fails);
    th_proc_t *n1 = start_node(&job, 2, 1, 1, flags, fails);
    job_wait(&job, 60);
    TH_ASSERT(n0, th_status(n0) == 6);
    TH_ASSERT(n1, th_status(n1) == 6);
    TH_ASSERT(n0, strstr(err(n0), "in a row failed without progress") != NULL);
    job_cleanup(&job);
    th_rmtree(dir);
    free(dir);
}

/* A node that fails its health check does not join: every node ends with 5 before any
 * worker starts, naming the node and the check. */
static void test_unhealthy_node_ends_the_job(void **state)
{
    const char *env[] = {th_worker(), "env", NULL};
    job_t job;
    job_init(&job);
    th_proc_t *n0 = start_node(&job, 2, 0, 1, NULL, env);
    th_proc_t *n1 = start_node(&job, 2, 1, 1, "--health-check=false", env);
    double started = th_now();
    job_wait(&job, 60);
    TH_ASSERT(n0, th_now() - started < 30);
    TH_ASSERT(n0, th_status(n0) == 5);
    TH_ASSERT(n1, th_status(n1) == 5);
    TH_ASSERT(n0, strstr(err(n0), "node 1 on ") != NULL &&
                      strstr(err(n0), "which failed its health check: --health-check: ") != NULL);
    TH_ASSERT(n1, strstr(err(n1), "this node failed its health check: ") != NULL);
    TH_ASSERT(n0, strstr(out(n0), "RANK=") == NULL); /* no worker started */
    TH_ASSERT(n1, strstr(out(n1), "RANK=") == NULL);
    job_cleanup(&job);
}

/* Failures on several nodes: one report, on the node serving the store, lists every node's
 * (each with its host); no other node prints one. */
static void test_failures_on_two_nodes_one_report(void **state)
{
    const char *waits[] = {th_worker(), "wait", NULL};
    const char *fails7[] = {th_worker(), "exit", "7", NULL};
    const char *fails8[] = {th_worker(), "exit", "8", NULL};
    job_t job;
    job_init(&job);
    th_proc_t *n[3];
    n[0] = start_node(&job, 3, 0, 1, NULL, waits);
    n[1] = start_node(&job, 3, 1, 1, NULL, fails7);
    n[2] = start_node(&job, 3, 2, 1, NULL, fails8);
    job_wait(&job, 60);
    int reports = 0;
    for (int i = 0; i < 3; i++) {
        TH_ASSERT(n[i], th_status(n[i]) == 1);
        reports += th_count(err(n[i]), "Root Cause");
    }
    TH_ASSERT(n[0], reports == 1 && strstr(err(n[0]), "Root Cause") != NULL);
    /* Each failure a node saw of its own is in node 0's report. */
    for (int i = 1; i < 3; i++) {
        char seen[64], listed[64];
        snprintf(seen, sizeof seen, "worker rank %d (local rank 0", i);
        snprintf(listed, sizeof listed, "rank      : %d (local_rank: 0)", i);
        if (strstr(err(n[i]), seen) != NULL)
            TH_ASSERT(n[0], strstr(err(n[0]), listed) != NULL);
    }
    job_cleanup(&job);
}

/* Rendezvous errors end every node with status 5 and a message naming the node. */
static void test_node_that_never_joins(void **state)
{
    const char *env[] = {th_worker(), "env", NULL};
    job_t job;
    job_init(&job);
    th_proc_t *n0 = start_node(&job, 3, 0, 1, "--rdzv-conf=timeout=7", env);
    th_proc_t *n2 = start_node(&job, 3, 2, 1, "--rdzv-conf=timeout=7", env);
    double started = th_now();
    job_wait(&job, 60);
    TH_ASSERT(n0, th_now() - started < 25);
    TH_ASSERT(n0, th_status(n0) == 5);
    /* Said while it waits (after 5 s), then the error. */
    TH_ASSERT(n0, strstr(err(n0), "round 0: waiting for node(s) 1 to join (") != NULL);
    TH_ASSERT(n0, strstr(err(n0), "node(s) 1 did not join within 7 s") != NULL);
    TH_ASSERT(n2, th_status(n2) == 5);
    TH_ASSERT(n2, strstr(err(n2), "node(s) 1 did not join") != NULL);
    TH_ASSERT(n0, strstr(out(n0), "RANK=") == NULL); /* no worker started */
    job_cleanup(&job);
}

static void test_store_unreachable(void **state)
{
    const char *env[] = {th_worker(), "env", NULL};
    job_t job;
    job_init(&job);
    th_proc_t *n1 = start_node(&job, 2, 1, 1, "--rdzv-conf=timeout=7", env);
    job_wait(&job, 60);
    char want[128], waiting[128];
    snprintf(want, sizeof want, "node 0's rendezvous store at %s:%d could not be reached",
             net.addr[0], job.port);
    /* Not silent meanwhile: after 5 s it says what it waits for. */
    snprintf(waiting, sizeof waiting, "still waiting for the rendezvous store at %s:%d after ",
             net.addr[0], job.port);
    TH_ASSERT(n1, th_status(n1) == 5);
    TH_ASSERT(n1, strstr(err(n1), want) != NULL);
    TH_ASSERT(n1, strstr(err(n1), waiting) != NULL);
    job_cleanup(&job);
}

/* Node 0 started where --master-addr is no address (TEST-NET-2: bound by no machine
 * here, and no packet is sent): said so, with what to do, before any worker. */
static void test_node0_on_the_wrong_machine(void **state)
{
    char port[32];
    snprintf(port, sizeof port, "--master-port=%d", th_free_port());
    const char *argv[] = {
        th_launcher(), "--nnodes=2",  "--node-rank=0", "--master-addr=198.51.100.77",
        port,          "--no-python", "/bin/echo",     "ran",
        NULL};
    th_proc_t p;
    th_run(&p, argv, NULL, 60);
    TH_ASSERT(&p, th_status(&p) != 0);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.out), "ran") == NULL);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err),
                         "address not available (no address of this machine: node 0 serves the "
                         "store at 198.51.100.77; run node 0 there, or give --master-addr this "
                         "machine's address)") != NULL);
    th_cleanup(&p);
}

static void test_mismatched_nnodes(void **state)
{
    const char *env[] = {th_worker(), "env", NULL};
    job_t job;
    job_init(&job);
    th_proc_t *n0 = start_node(&job, 2, 0, 1, "--rdzv-conf=timeout=20", env);
    th_proc_t *n1 = start_node(&job, 3, 1, 1, "--rdzv-conf=timeout=20", env);
    job_wait(&job, 60);
    TH_ASSERT(n0, th_status(n0) == 5);
    TH_ASSERT(n0, strstr(err(n0), "runs with --nnodes=3") != NULL);
    TH_ASSERT(n1, th_status(n1) == 5);
    TH_ASSERT(n1, strstr(err(n1), "runs with --nnodes=3") != NULL);
    job_cleanup(&job);
}

static void two_waiting_nodes(job_t *job, const char *flags, th_proc_t **n0, th_proc_t **n1);
static void elastic_flags(const job_t *job, const char *range, int last_call, int join, char *out,
                          size_t cap);

/* A job runs (nodes 0 and 1, workers waiting) when a third launcher claims node rank 1
 * (another job or Slurm step on the same port): it is sent away alone, status 5, saying
 * so; the running job is untouched (it used to end with status 5 on every node), and
 * ends only when stopped. (Two claims while the job forms end it: test_rdzv.) */
static void test_stranger_refused_job_untouched(void **state)
{
    const char *waits[] = {th_worker(), "wait", NULL};
    job_t job;
    th_proc_t *n0, *n1;
    job_init(&job);
    two_waiting_nodes(&job, "--rdzv-conf=timeout=20", &n0, &n1);
    th_proc_t *stranger = start_node(&job, 2, 1, 1, "--rdzv-conf=timeout=20", waits);
    TH_ASSERT(stranger, th_wait_exit(stranger, 30));
    TH_ASSERT(stranger, th_status(stranger) == 5);
    TH_ASSERT(stranger, strstr(err(stranger), "is held by a running launcher") != NULL &&
                            strstr(err(stranger), "this launcher is not part of that job") != NULL);
    TH_ASSERT(n0, kill(n0->pid, 0) == 0 && kill(n1->pid, 0) == 0); /* (and 143 below, not 5) */
    TH_ASSERT(n0,
              strstr(out(n0), "ready ") != NULL && strstr(err(n0), "node rank 1 is taken") == NULL);
    kill(n0->pid, SIGTERM);
    job_wait(&job, 60);
    TH_ASSERT(n0, th_status(n0) == 128 + SIGTERM);
    job_cleanup(&job);
}

/* Waits until process `pid` is stopped ('T'), at most `timeout` s. */
static bool wait_stopped(pid_t pid, double timeout)
{
    double deadline = th_now() + timeout;
    while (th_proc_state(pid) != 'T' && th_now() < deadline)
        usleep(10 * 1000);
    return th_proc_state(pid) == 'T';
}

/* Two launchers of the elastic job of `flags`, one worker each ("ready WORLD_SIZE"): *host,
 * which serves the store, and *other, both running round 0. */
static void two_elastic_nodes(job_t *job, const char *flags, th_proc_t **host, th_proc_t **other)
{
    static const char *const workers[] = {"/bin/sh", "-c",
                                          "echo \"ready $WORLD_SIZE\"; exec sleep 600", NULL};
    *host = start_node(job, 0, 0, 1, flags, workers);
    TH_ASSERT(*host, th_wait_output(*host, 2, "hosting its store", 1, 30));
    *other = start_node(job, 0, 1, 1, flags, workers);
    TH_ASSERT(*host, th_wait_output(*host, 1, "ready 2", 1, 30));
    TH_ASSERT(*other, th_wait_output(*other, 1, "ready 2", 1, 30));
}

/* Launcher `p` is sent away alone: it ends (5) having started no worker, saying `says`, and
 * the store's host `host` says whom it refused. */
static void refused_alone(th_proc_t *p, th_proc_t *host, const char *says)
{
    TH_ASSERT(p, th_wait_exit(p, 30));
    TH_ASSERT(p, th_status(p) == 5 && strstr(out(p), "ready") == NULL);
    TH_ASSERT(p, strstr(err(p), says) != NULL);
    TH_ASSERT(host, th_wait_output(host, 2, "refused launcher", 1, 10));
}

/* SIGTERM to both: each ends with 143, the job having gone on until then (not 5). */
static void end_two(job_t *job, th_proc_t *a, th_proc_t *b)
{
    kill(a->pid, SIGTERM);
    kill(b->pid, SIGTERM);
    job_wait(job, 60);
    TH_ASSERT(a, th_status(a) == 128 + SIGTERM);
    TH_ASSERT(b, th_status(b) == 128 + SIGTERM);
}

/* A stray launcher with other flags than the running job's: a third with --nnodes=1:3 at a
 * c10d job of 1:2 running with 2 nodes, and one claiming node rank 1 of a running static
 * job with --max-restarts=3. Each is sent away alone (5, saying why; the store's host says
 * whom it refused); the job goes on (it used to end with status 5 on every node) until
 * stopped. */
static void test_stray_with_other_flags_refused_alone(void **state)
{
    const char *workers[] = {th_worker(), "wait", NULL};
    char flags[256], stray_flags[256];
    th_proc_t *n0, *n1;
    job_t job;
    job_init(&job);
    elastic_flags(&job, "1:2", 1, 60, flags, sizeof flags);
    elastic_flags(&job, "1:3", 1, 60, stray_flags, sizeof stray_flags);
    two_elastic_nodes(&job, flags, &n0, &n1);
    th_proc_t *stray = start_node(&job, 0, 2, 1, stray_flags, workers);
    refused_alone(stray, n0,
                  "runs with --nnodes=1:3, the running job with 1:2; it is not part of "
                  "that job");
    end_two(&job, n0, n1);
    TH_ASSERT(n0, th_count(out(n0), "ready 2") == 1 && th_count(out(n1), "ready 2") == 1);
    job_cleanup(&job);

    job_init(&job);
    two_waiting_nodes(&job, "--rdzv-conf=timeout=20", &n0, &n1);
    stray = start_node(&job, 2, 1, 1, "--rdzv-conf=timeout=20 --max-restarts=3", workers);
    refused_alone(stray, n0, "runs with --max-restarts=3, the running job with 0");
    end_two(&job, n0, n1);
    job_cleanup(&job);
}

/* The store's host stopped (Ctrl-Z) while the job forms: a node that comes meanwhile says
 * the store's launcher may be stopped (it said only that another program may hold the
 * port). */
static void test_stopped_store_host_named(void **state)
{
    const char *waits[] = {th_worker(), "wait", NULL};
    job_t job;
    job_init(&job);
    th_proc_t *n0 = start_node(&job, 2, 0, 1, NULL, waits);
    TH_ASSERT(n0, th_wait_output(n0, 2, "joining the job", 1, 30));
    TH_ASSERT(n0, kill(n0->pid, SIGTSTP) == 0 && wait_stopped(n0->pid, 10));
    th_proc_t *n1 = start_node(&job, 2, 1, 1, "--rdzv-conf=timeout=2", waits);
    TH_ASSERT(n1, th_wait_exit(n1, 30));
    TH_ASSERT(n1, th_status(n1) == 5);
    TH_ASSERT(n1,
              strstr(err(n1), "accepts connections but does not answer as a TCPStore: the "
                              "launcher serving it is stopped (Ctrl-Z there?) or hung") != NULL);
    /* Continued and ended at once, though its rendezvous thread may have been stopped while
     * it connected to the store, which is gone now (it tried for read_timeout, 60 s). */
    kill(n0->pid, SIGCONT);
    kill(n0->pid, SIGTERM);
    double ended = th_now();
    TH_ASSERT(n0, th_wait_exit(n0, 60));
    TH_ASSERT(n0, th_status(n0) == 128 + SIGTERM && th_now() - ended < 10);
    job_cleanup(&job);
}

/* The store's host stopped (SIGSTOP: no word to the others, as a Ctrl-Z's pause gives)
 * after node 1 joined: node 1's heartbeat goes unanswered past read_timeout (2 s), and it
 * ends (status 5) saying that the store took its connection but stopped answering, its
 * launcher stopped or hung, not only that it timed out. */
static void test_store_host_stopped_after_a_join_named(void **state)
{
    const char *waits[] = {th_worker(), "wait", NULL};
    const char *debug[] = {"DDP_LAUNCH_LOG_LEVEL=debug", NULL}; /* (its join said) */
    job_t job;
    job_init(&job);
    th_proc_t *n0 = start_node(&job, 3, 0, 1, "--rdzv-conf=read_timeout=2", waits);
    th_proc_t *n1 = start_node_env(&job, 3, 1, 1, "--rdzv-conf=read_timeout=2", waits, debug);
    TH_ASSERT(n1, th_wait_output(n1, 2, "joined the rendezvous at ", 1, 30));
    TH_ASSERT(n0, kill(n0->pid, SIGSTOP) == 0 && wait_stopped(n0->pid, 10));
    double stopped = th_now();
    TH_ASSERT(n1, th_wait_exit(n1, 30));
    printf("node 1 ended %.1f s after the store's host stopped\n", th_now() - stopped);
    TH_ASSERT(n1, th_status(n1) == 5 && th_now() - stopped < 15);
    TH_ASSERT(n1, strstr(err(n1), "lost the rendezvous store") != NULL);
    TH_ASSERT(n1, strstr(err(n1), "timed out; it took this launcher's connection but stopped "
                                  "answering: the launcher serving it is stopped (Ctrl-Z "
                                  "there?) or hung") != NULL);
    /* Continued, it ends: at the SIGTERM, or, where its own rendezvous thread's read of its
     * store passed read_timeout while it was stopped, first, saying so (status 5). */
    kill(n0->pid, SIGCONT);
    kill(n0->pid, SIGTERM);
    TH_ASSERT(n0, th_wait_exit(n0, 30));
    TH_ASSERT(n0, th_status(n0) == 128 + SIGTERM || th_status(n0) == 5);
    job_cleanup(&job);
}

/* Node 1 comes with another --rdzv-id: it ends (status 5) naming both jobs, and node 0,
 * which goes on waiting for its own node 1, says a launcher of the other job came. */
static void test_other_rdzv_id_named_on_both_sides(void **state)
{
    const char *waits[] = {th_worker(), "wait", NULL};
    job_t job;
    job_init(&job);
    th_proc_t *n0 = start_node(&job, 2, 0, 1, "--rdzv-conf=timeout=30", waits);
    th_proc_t *n1 = start_node(&job, 2, 1, 1, "--rdzv-id=beta", waits);
    TH_ASSERT(n1, th_wait_exit(n1, 30));
    char want[200];
    snprintf(want, sizeof want, "serves job '%s', not this launcher's 'beta'", job.run_id);
    TH_ASSERT(n1, th_status(n1) == 5 && strstr(err(n1), want) != NULL);
    TH_ASSERT(n0, th_wait_output(n0, 2, "a launcher of job 'beta' (node 1,", 1, 30));
    kill(n0->pid, SIGTERM);
    job_wait(&job, 60);
    job_cleanup(&job);
}

/* A listening socket on a free port of 127.0.0.1 (*port): another program's. */
static int listen_free(int *port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof sa;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    assert_int_equal(listen(fd, 16), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
    *port = ntohs(sa.sin_port);
    return fd;
}

/* Node 1 pointed at a port another program holds. One that answers (an HTTP server's
 * 400): status 5 at once, saying so (it used to wait out read_timeout, and ignore the
 * rendezvous timeout). One that accepts and says nothing: the rendezvous timeout holds
 * (3 s), naming it; and SIGTERM ends the launcher at once while it tries. */
static void test_port_held_by_another_program(void **state)
{
    int port, fd = listen_free(&port);
    char flags[128];
    snprintf(flags, sizeof flags,
             "--nnodes=2 --node-rank=1 --master-addr=127.0.0.1 "
             "--master-port=%d --rdzv-conf=timeout=3",
             port);
    pid_t server = fork();
    if (server == 0) {
        for (int i = 0; i < 50; i++) { /* answers like an HTTP server, whatever is asked */
            static const char reply[] = "HTTP/1.0 400 Bad Request\r\n\r\n";
            char buf[256];
            int c = accept(fd, NULL, NULL);
            if (c < 0)
                _exit(1);
            (void)!read(c, buf, sizeof buf);
            (void)!write(c, reply, sizeof reply - 1);
            close(c);
        }
        _exit(0);
    }
    const char *prog[] = {"/bin/true", NULL};
    char *argv[16];
    int n = 0;
    argv[n++] = (char *)th_launcher();
    char copy[128];
    snprintf(copy, sizeof copy, "%s", flags);
    for (char *save, *w = strtok_r(copy, " ", &save); w != NULL; w = strtok_r(NULL, " ", &save))
        argv[n++] = w;
    argv[n++] = "--no-python";
    argv[n++] = (char *)prog[0];
    argv[n] = NULL;
    th_proc_t p;
    double started = th_now();
    th_run(&p, (const char *const *)argv, NULL, 60);
    TH_ASSERT(&p, th_status(&p) == 5);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "answered, but not as a TCPStore") != NULL);
    TH_ASSERT(&p, th_now() - started < 2.5); /* at once, not after the timeout */
    th_cleanup(&p);
    kill(server, SIGKILL);
    waitpid(server, NULL, 0);

    /* Silent: the socket listens, nobody accepts (the kernel completes connections). */
    started = th_now();
    th_run(&p, (const char *const *)argv, NULL, 60);
    TH_ASSERT(&p, th_status(&p) == 5);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "accepts connections but does not answer as a "
                                              "TCPStore") != NULL);
    TH_ASSERT(&p, th_now() - started < 10); /* the 3 s timeout, not read_timeout's 60 */
    th_cleanup(&p);
    argv[5] = "--rdzv-conf=timeout=60";
    th_start(&p, (const char *const *)argv, NULL);
    TH_ASSERT(&p, th_wait_output(&p, 2, "joining the job at", 1, 30));
    started = th_now();
    kill(p.pid, SIGTERM);
    TH_ASSERT(&p, th_wait_exit(&p, 30));
    TH_ASSERT(&p, th_status(&p) == 128 + SIGTERM);
    TH_ASSERT(&p, th_now() - started < 3);
    th_cleanup(&p);
    close(fd);
}

/* Two nodes of one worker each ("wait"), both ready: *n0 (the store's host), *n1. */
static void two_waiting_nodes(job_t *job, const char *flags, th_proc_t **n0, th_proc_t **n1)
{
    const char *waits[] = {th_worker(), "wait", NULL};
    *n0 = start_node(job, 2, 0, 1, flags, waits);
    *n1 = start_node(job, 2, 1, 1, flags, waits);
    TH_ASSERT(*n0, th_wait_output(*n0, 1, "ready ", 1, 30));
    TH_ASSERT(*n1, th_wait_output(*n1, 1, "ready ", 1, 30));
}

/* Node 1's launcher SIGKILLed (its workers go with it): node 0 notices its silence
 * within 5 s (heartbeats), stops its workers and tries round 1, which node 1 never
 * joins: the job ends naming it. */
static void test_node_loss_noticed(void **state)
{
    job_t job;
    th_proc_t *n0, *n1;
    job_init(&job);
    two_waiting_nodes(&job, "--max-restarts=1 --rdzv-conf=timeout=3", &n0, &n1);
    double killed = th_now();
    assert_int_equal(kill(n1->pid, SIGKILL), 0);
    TH_ASSERT(n0, th_wait_output(n0, 2, ")'s launcher stopped answering", 1, 30));
    TH_ASSERT(n0, strstr(err(n0), "node 1 (") != NULL);
    double noticed = th_now() - killed;
    printf("node 1's loss noticed after %.1f s\n", noticed);
    TH_ASSERT(n0, noticed <= 5.5);
    job_wait(&job, 60);
    TH_ASSERT(n0, th_status(n0) == 5);
    TH_ASSERT(n0, strstr(err(n0), "round 1: node(s) 1 did not join within 3 s") != NULL);
    job_cleanup(&job);
}

/* The same loss with no restart left: the job could not keep its nodes, status 5 (not a
 * worker's 1), naming the lost node and its host. */
static void test_node_loss_without_restarts_is_5(void **state)
{
    job_t job;
    th_proc_t *n0, *n1;
    job_init(&job);
    two_waiting_nodes(&job, "--max-restarts=0", &n0, &n1);
    assert_int_equal(kill(n1->pid, SIGKILL), 0);
    job_wait(&job, 60);
    TH_ASSERT(n0, th_status(n0) == 5);
    TH_ASSERT(n0, strstr(err(n0), "node 1 (") != NULL &&
                      strstr(err(n0), ")'s launcher stopped answering") != NULL);
    job_cleanup(&job);
}

/* The same loss inside a Slurm job step (the store's host sees SLURM_JOB_ID and
 * SLURM_STEP_ID), restarts left: srun starts no task again, so the job ends (status 5)
 * within seconds instead of waiting out the next round's 60 s join timeout. */
static void test_node_loss_in_a_slurm_step_ends_the_job(void **state)
{
    const char *waits[] = {th_worker(), "wait", NULL};
    const char *step[] = {"SLURM_JOB_ID=77", "SLURM_STEP_ID=3", NULL};
    job_t job;
    job_init(&job);
    th_proc_t *n0 =
        start_node_env(&job, 2, 0, 1, "--max-restarts=3 --rdzv-conf=timeout=60", waits, step);
    th_proc_t *n1 = start_node(&job, 2, 1, 1, "--max-restarts=3 --rdzv-conf=timeout=60", waits);
    TH_ASSERT(n0, th_wait_output(n0, 1, "ready ", 1, 30));
    TH_ASSERT(n1, th_wait_output(n1, 1, "ready ", 1, 30));
    double killed = th_now();
    assert_int_equal(kill(n1->pid, SIGKILL), 0);
    TH_ASSERT(n0, th_wait_exit(n0, 40));
    TH_ASSERT(n0, th_status(n0) == 5);
    TH_ASSERT(n0, th_now() - killed < 20);
    TH_ASSERT(n0, strstr(err(n0), "in a Slurm job step nothing starts it again") != NULL);
    job_wait(&job, 30);
    job_cleanup(&job);
}

/* Node 0's launcher SIGKILLed: its store goes with it, and node 1 ends at once (status
 * 5), its workers stopped, saying the store is lost and that etcd's rendezvous survives
 * it. */
static void test_store_host_lost(void **state)
{
    job_t job;
    th_proc_t *n0, *n1;
    job_init(&job);
    two_waiting_nodes(&job, NULL, &n0, &n1);
    double killed = th_now();
    assert_int_equal(kill(n0->pid, SIGKILL), 0);
    TH_ASSERT(n1, th_wait_exit(n1, 30));
    TH_ASSERT(n1, th_now() - killed < 10);
    TH_ASSERT(n1, th_status(n1) == 5);
    TH_ASSERT(n1, strstr(err(n1), "lost the rendezvous store") != NULL);
    TH_ASSERT(n1, strstr(err(n1), "--rdzv-backend=etcd survives the loss of any node") != NULL);
    TH_ASSERT(n1, strstr(err(n1), "stopped answering") == NULL); /* closed, not silent */
    job_wait(&job, 10);
    job_cleanup(&job);
}

/* Ctrl-Z on node `stopped` (0: the store's host) of two, stopped 4 s, past
 * read_timeout, the keep-alive limit (3 s) and --hang-timeout: every node's workers stop
 * with it and the job goes on when it continues, each node saying so (`says`: what the
 * stopped node says when it stops and when it continues, then what the other says).
 * The workers tick into files of their own. */
static void ctrl_z_pauses_the_job(int stopped, const char *const says[4])
{
    char *dir = th_tmpdir(), ticks[700];
    snprintf(ticks, sizeof ticks, "TICKS=%s/ticks", dir);
    const char *env[] = {ticks, NULL};
    const char *script[] = {"/bin/sh", "-c",
                            "i=0; while [ $i -lt 40 ]; do echo \"tick $RANK $i\"; "
                            "echo $i >> \"$TICKS.$RANK\"; i=$((i + 1)); sleep 0.05; done",
                            NULL};
    job_t job;
    job_init(&job);
    const char *flags = "--rdzv-conf=read_timeout=2 --hang-timeout=2";
    th_proc_t *n1 = start_node_env(&job, 2, 1, 1, flags, script, env);
    th_proc_t *n0 = start_node_env(&job, 2, 0, 1, flags, script, env);
    th_proc_t *stop = stopped == 0 ? n0 : n1, *other = stopped == 0 ? n1 : n0;
    char prefix[700];
    snprintf(prefix, sizeof prefix, "%s/ticks", dir);
    for (int i = 0; i < 300 && th_lines_in(prefix, 2) < 8; i++)
        usleep(20 * 1000);
    TH_ASSERT(stop, th_lines_in(prefix, 2) >= 8);
    TH_ASSERT(stop, kill(stop->pid, SIGTSTP) == 0);
    TH_ASSERT(other, th_wait_output(other, 2, says[2], 1, 10));
    usleep(800 * 1000); /* the stopped node stops 0.3 s after telling; a SIGSTOP lands at once */
    int before = th_lines_in(prefix, 2);
    TH_ASSERT(other, !th_wait_exit(other, 4));
    int after = th_lines_in(prefix, 2);
    printf("ticks while stopped: %d, then %d\n", before, after);
    TH_ASSERT(stop, th_proc_state(stop->pid) == 'T');
    TH_ASSERT(stop, after == before && before < 80);
    TH_ASSERT(stop, kill(stop->pid, SIGCONT) == 0);
    job_wait(&job, 60);
    TH_ASSERT(n0, th_status(n0) == 0);
    TH_ASSERT(n1, th_status(n1) == 0);
    TH_ASSERT(n0, th_lines_in(prefix, 2) == 80);
    TH_ASSERT(stop, strstr(err(stop), says[0]) != NULL);
    TH_ASSERT(stop, strstr(err(stop), says[1]) != NULL);
    TH_ASSERT(other, strstr(err(other), says[3]) != NULL);
    for (int i = 0; i < 2; i++) /* stopped longer than --hang-timeout: no hang */
        TH_ASSERT(&job.node[i], strstr(err(&job.node[i]), "hang") == NULL);
    job_cleanup(&job);
    th_rmtree(dir);
    free(dir);
}

/* Ctrl-Z on the node that serves the store: the other nodes are told first (node 1's
 * workers went on alone), and wait though the store stands still longer than their
 * read_timeout (which used to end them: "lost the rendezvous store"). */
static void test_ctrl_z_on_the_store_host_stops_every_node(void **state)
{
    const char *const says[4] = {
        "1 worker(s) here and every other node's (the job's store is here) stop with ddp-launch",
        "continued: the 1 stopped worker(s) here and the other nodes' continue",
        "the node serving the job's store was stopped (Ctrl-Z there): this node's 1 worker(s) "
        "stop with it until it continues",
        "the node serving the job's store continued: so do this node's workers"};
    ctrl_z_pauses_the_job(0, says);
}

/* The store's host ended by SIGTERM while node 1's launcher is frozen (SIGSTOP, 2 s:
 * under the 3 s keep-alive limit, as a launcher slow on a loaded machine): the store
 * stays until node 1 has read how the job ended, so node 1 stops its workers for the
 * host's signal (status 128 + 15) instead of finding the store gone (status 5). */
static void test_slow_node_reads_the_end(void **state)
{
    job_t job;
    th_proc_t *n0, *n1;
    job_init(&job);
    two_waiting_nodes(&job, NULL, &n0, &n1);
    assert_int_equal(kill(n1->pid, SIGSTOP), 0);
    assert_int_equal(kill(n0->pid, SIGTERM), 0);
    nanosleep(&(struct timespec){.tv_sec = 2}, NULL);
    assert_int_equal(kill(n1->pid, SIGCONT), 0);
    job_wait(&job, 30);
    TH_ASSERT(n0, th_status(n0) == 128 + SIGTERM);
    TH_ASSERT(n1, th_status(n1) == 128 + SIGTERM);
    /* (Named as node 0, or as the store's launcher when its signal's own record had not
     * reached its store before it finished.) */
    TH_ASSERT(n1, strstr(err(n1), "the job was ended by ") != NULL);
    TH_ASSERT(n1, strstr(err(n1), "received SIGTERM") != NULL);
    TH_ASSERT(n1, strstr(err(n1), "lost the rendezvous store") == NULL);
    job_cleanup(&job);
}

/* As above, but node 1 stays frozen past the keep-alive limit (3 s): the host judges it
 * lost and leaves then, instead of waiting close_timeout (30 s) for it. */
static void test_silent_node_not_waited_for(void **state)
{
    job_t job;
    th_proc_t *n0, *n1;
    job_init(&job);
    two_waiting_nodes(&job, NULL, &n0, &n1);
    assert_int_equal(kill(n1->pid, SIGSTOP), 0);
    double stopped = th_now();
    assert_int_equal(kill(n0->pid, SIGTERM), 0);
    bool left = th_wait_exit(n0, 20);
    double took = th_now() - stopped;
    kill(n1->pid, SIGCONT);
    TH_ASSERT(n0, left);
    printf("the host left %.1f s after its SIGTERM\n", took);
    TH_ASSERT(n0, took < 10);
    TH_ASSERT(n0, th_status(n0) == 128 + SIGTERM);
    job_wait(&job, 30);
    job_cleanup(&job);
}

/* While the host waits for a frozen node to read how the job ended, another signal (an
 * operator's Ctrl-C) ends the wait at once, saying so. */
static void test_second_signal_ends_the_hosts_wait(void **state)
{
    job_t job;
    th_proc_t *n0, *n1;
    job_init(&job);
    two_waiting_nodes(&job, "--rdzv-conf=keep_alive_max_attempt=30", &n0, &n1);
    assert_int_equal(kill(n1->pid, SIGSTOP), 0);
    assert_int_equal(kill(n0->pid, SIGTERM), 0);
    bool ended = th_wait_exit(n0, 2);
    TH_ASSERT(n0, !ended); /* waiting for node 1 */
    assert_int_equal(kill(n0->pid, SIGINT), 0);
    ended = th_wait_exit(n0, 5);
    kill(n1->pid, SIGCONT);
    TH_ASSERT(n0, ended);
    TH_ASSERT(n0, th_status(n0) == 128 + SIGTERM && WIFEXITED(n0->status));
    TH_ASSERT(n0, strstr(err(n0), "received SIGINT: closing the store now") != NULL);
    job_wait(&job, 30);
    job_cleanup(&job);
}

/* A handled signal that reaches the store's launcher after its own workers have finished
 * (under Slurm, slurmstepd signals the workers themselves too, and they may end first):
 * the job still ends as that signal's, so node 1's workers get SIGUSR1 forwarded, not
 * the SIGTERM of a store that went away. */
static void test_signal_between_rounds_on_the_host(void **state)
{
    const char *done[] = {"/bin/sh", "-c", "echo finished", NULL};
    const char *traps[] = {"/bin/sh", "-c",
                           "trap 'echo got USR1; exit 0' USR1; echo ready; "
                           "while :; do sleep 0.1; done",
                           NULL};
    const char *flags = "--signals-to-handle=SIGTERM,SIGUSR1";
    job_t job;
    job_init(&job);
    th_proc_t *n0 = start_node(&job, 2, 0, 1, flags, done);
    th_proc_t *n1 = start_node(&job, 2, 1, 1, flags, traps);
    TH_ASSERT(n0, th_wait_output(n0, 1, "finished", 1, 30));
    TH_ASSERT(n1, th_wait_output(n1, 1, "ready", 1, 30));
    /* Time for node 0's launcher to see its worker's end and wait between rounds. */
    nanosleep(&(struct timespec){.tv_sec = 1}, NULL);
    assert_int_equal(kill(n0->pid, SIGUSR1), 0);
    job_wait(&job, 30);
    TH_ASSERT(n0, th_status(n0) == 128 + SIGUSR1);
    TH_ASSERT(n1, strstr(out(n1), "got USR1") != NULL);
    TH_ASSERT(n1, th_status(n1) == 128 + SIGUSR1);
    job_cleanup(&job);
}

/* Slurm's `scancel --signal=USR1` reaches each node's launcher at its own moment: node 1's
 * first ends the job, node 0 (the store's) stops for that news, and node 2 is slow (its
 * launcher frozen here). Node 0's own SIGUSR1 then comes while it waits for node 2 to
 * read how the job ended: it stays (a launcher killed by it would take the news away),
 * and node 2 forwards SIGUSR1 to its workers instead of finding the store gone. */
static void test_signal_on_every_node_while_the_host_lingers(void **state)
{
    const char *traps[] = {"/bin/sh", "-c",
                           "trap 'echo got USR1; exit 0' USR1; echo ready; "
                           "while :; do sleep 0.1; done",
                           NULL};
    /* (Node 2 frozen for up to 10 missed heartbeats before it is judged lost.) */
    const char *flags = "--signals-to-handle=SIGTERM,SIGUSR1 --rdzv-conf=keep_alive_max_attempt=10";
    job_t job;
    job_init(&job);
    th_proc_t *n[3];
    for (int i = 0; i < 3; i++)
        n[i] = start_node(&job, 3, i, 1, flags, traps);
    for (int i = 0; i < 3; i++)
        TH_ASSERT(n[i], th_wait_output(n[i], 1, "ready", 1, 30));
    assert_int_equal(kill(n[2]->pid, SIGSTOP), 0);
    assert_int_equal(kill(n[1]->pid, SIGUSR1), 0);
    TH_ASSERT(n[1], th_wait_exit(n[1], 30));
    TH_ASSERT(n[0], th_wait_output(n[0], 1, "got USR1", 1, 30));
    /* Node 0's worker has ended: its launcher finishes within a loop turn or two. */
    nanosleep(&(struct timespec){.tv_nsec = 300000000}, NULL);
    assert_int_equal(kill(n[0]->pid, SIGUSR1), 0);
    bool ended = th_wait_exit(n[0], 1);
    kill(n[2]->pid, SIGCONT);
    TH_ASSERT(n[0], !ended);
    job_wait(&job, 30);
    TH_ASSERT(n[0], strstr(err(n[0]), "received SIGUSR1 after the job ended by it") != NULL);
    for (int i = 0; i < 3; i++) {
        TH_ASSERT(n[i], th_status(n[i]) == 128 + SIGUSR1 && WIFEXITED(n[i]->status));
        TH_ASSERT(n[i], strstr(out(n[i]), "got USR1") != NULL);
    }
    TH_ASSERT(n[2], strstr(err(n[2]), "the job was ended by node 1") != NULL);
    TH_ASSERT(n[2], strstr(err(n[2]), "lost the rendezvous store") == NULL);
    job_cleanup(&job);
}

/* Node 1's launcher SIGKILLed, then started again at once (its machine back): the new
 * launcher finds its rank held by the lost one, waits that one out, and both nodes go on
 * with round 1. */
static void test_lost_node_returns(void **state)
{
    const char *workers[] = {th_worker(), "wait-until", "1", NULL};
    job_t job;
    job_init(&job);
    th_proc_t *n0 = start_node(&job, 2, 0, 1, "--max-restarts=1", workers);
    th_proc_t *n1 = start_node(&job, 2, 1, 1, "--max-restarts=1", workers);
    TH_ASSERT(n0, th_wait_output(n0, 1, "ready ", 1, 30));
    TH_ASSERT(n1, th_wait_output(n1, 1, "ready ", 1, 30));
    assert_int_equal(kill(n1->pid, SIGKILL), 0);
    TH_ASSERT(n1, th_wait_exit(n1, 10));
    th_proc_t *again = start_node(&job, 2, 1, 1, "--max-restarts=1", workers);
    job_wait(&job, 60);
    TH_ASSERT(n0, th_status(n0) == 0);
    TH_ASSERT(again, th_status(again) == 0);
    TH_ASSERT(n0, strstr(out(n0), "TORCHELASTIC_RESTART_COUNT=1\n") != NULL);
    TH_ASSERT(again, strstr(out(again), "TORCHELASTIC_RESTART_COUNT=1\n") != NULL);
    TH_ASSERT(again, strstr(out(again), "\nRANK=1\n") != NULL);
    job_cleanup(&job);
}

/* Elastic (c10d) flags: --nnodes=RANGE at node 0's address, last call after `last_call`
 * seconds, at most `join` seconds for MIN nodes. */
static void elastic_flags(const job_t *job, const char *range, int last_call, int join, char *out,
                          size_t cap)
{
    snprintf(out, cap,
             "--nnodes=%s --rdzv-backend=c10d --rdzv-endpoint=%s:%d "
             "--rdzv-conf=last_call_timeout=%d,join_timeout=%d",
             range, net.addr[0], job->port, last_call, join);
}

/* --hot-spares: with 4 nodes training, a fifth launcher waits without workers (a sixth is
 * not needed: told so, 5); when a node's launcher is SIGKILLed the spare takes its node
 * rank, and every other node keeps its own. */
static void test_hot_spare_takes_a_lost_nodes_place(void **state)
{
    char *dir = th_tmpdir(), marker[600], script[1400], flags[512];
    snprintf(marker, sizeof marker, "%s/go", dir);
    snprintf(script, sizeof script,
             "if [ -e '%s' ]; then echo \"GROUP_RANK=$GROUP_RANK RANK=$RANK\"; exit 0; fi; "
             "echo ready; exec sleep 600",
             marker);
    const char *workers[] = {"/bin/sh", "-c", script, NULL};
    job_t job;
    job_init(&job);
    char elastic[256];
    elastic_flags(&job, "4:4", 1, 60, elastic, sizeof elastic);
    snprintf(flags, sizeof flags, "%s --hot-spares=1", elastic);
    for (int i = 0; i < 4; i++)
        start_node(&job, 0, 0, 1, flags, workers);
    for (int i = 0; i < 4; i++)
        TH_ASSERT(&job.node[i], th_wait_output(&job.node[i], 1, "ready", 1, 30));
    const char *debug[] = {"DDP_LAUNCH_LOG_LEVEL=debug", NULL};
    th_proc_t *spare = start_node_env(&job, 0, 0, 1, flags, workers, debug);
    TH_ASSERT(spare, th_wait_output(spare, 2, "waiting for a place in a round", 1, 30));
    th_proc_t *extra = start_node(&job, 0, 0, 1, flags, workers);
    TH_ASSERT(extra, th_wait_exit(extra, 30));
    TH_ASSERT(extra, th_status(extra) == 5 && strstr(err(extra), "is not needed") != NULL);
    TH_ASSERT(spare, !spare->exited && strstr(out(spare), "ready") == NULL);
    int old_rank[4] = {-1, -1, -1, -1}, lost = -1;
    for (int i = 0; i < 4; i++) {
        const char *at = strstr(err(&job.node[i]), "this is node ");
        TH_ASSERT(&job.node[i], at != NULL);
        old_rank[i] = atoi(at + strlen("this is node "));
        /* (Not the launcher that hosts the endpoint's store: the job would end with it.) */
        if (lost < 0 && strstr(err(&job.node[i]), "hosting its store") == NULL)
            lost = i;
    }
    TH_ASSERT(&job.node[0], lost >= 0);
    FILE *f = fopen(marker, "w");
    assert_non_null(f);
    fclose(f);
    assert_int_equal(kill(job.node[lost].pid, SIGKILL), 0);
    for (int i = 0; i < 4; i++) {
        if (i == lost)
            continue;
        th_proc_t *p = &job.node[i];
        char want[64];
        TH_ASSERT(p, th_wait_exit(p, 60));
        TH_ASSERT(p, th_status(p) == 0);
        snprintf(want, sizeof want, "GROUP_RANK=%d RANK=%d\n", old_rank[i], old_rank[i]);
        TH_ASSERT(p, strstr(out(p), want) != NULL);
    }
    TH_ASSERT(spare, th_wait_exit(spare, 60));
    TH_ASSERT(spare, th_status(spare) == 0);
    char took[96];
    snprintf(took, sizeof took, "GROUP_RANK=%d RANK=%d\n", old_rank[lost], old_rank[lost]);
    TH_ASSERT(spare, strstr(out(spare), took) != NULL);
    snprintf(took, sizeof took, "waited as a hot spare: it takes node rank %d", old_rank[lost]);
    TH_ASSERT(spare, strstr(err(spare), took) != NULL);
    th_wait_exit(&job.node[lost], 10);
    job_cleanup(&job);
    th_rmtree(dir);
    free(dir);
}

/* A hot spare with another --nproc-per-node than the running nodes' (2 against 1) would
 * move every other node's global ranks when it took a lost node's place: it is refused when
 * it joins (5, saying why; the store's host says whom it refused), and the job goes on. */
static void test_spare_with_other_nproc_refused(void **state)
{
    const char *workers[] = {th_worker(), "wait", NULL};
    char elastic[256], flags[512];
    th_proc_t *n0, *n1;
    job_t job;
    job_init(&job);
    elastic_flags(&job, "2:2", 1, 60, elastic, sizeof elastic);
    snprintf(flags, sizeof flags, "%s --hot-spares=1", elastic);
    two_elastic_nodes(&job, flags, &n0, &n1);
    th_proc_t *spare = start_node(&job, 0, 1, 2, flags, workers);
    refused_alone(spare, n0,
                  "with --nproc-per-node=2 this launcher cannot be a hot spare of this "
                  "job: its nodes run 1 worker(s) each");
    end_two(&job, n0, n1);
    job_cleanup(&job);
}

/* The end of a job of `host` and `other` with `spare` waiting: the file `marker` made (the
 * workers' sign to end well), other's launcher SIGKILLed; host and the spare end well, the
 * spare having taken other's node rank `lost_rank`. */
static void spare_takes_over(th_proc_t *host, th_proc_t *other, th_proc_t *spare,
                             const char *marker, int lost_rank)
{
    char took[96];
    TH_ASSERT(spare, th_touch(marker));
    TH_ASSERT(other, kill(other->pid, SIGKILL) == 0);
    TH_ASSERT(host, th_wait_exit(host, 60));
    TH_ASSERT(spare, th_wait_exit(spare, 60));
    TH_ASSERT(host, th_status(host) == 0);
    TH_ASSERT(spare, th_status(spare) == 0);
    snprintf(took, sizeof took, "waited as a hot spare: it takes node rank %d", lost_rank);
    TH_ASSERT(spare, strstr(err(spare), took) != NULL);
}

/* --hot-spares with --warm-restarts: a spare's zygote imports while the spare waits, so
 * the workers it starts when it takes a lost node's place are forked from it, as a warm
 * restart's are, not started cold (a new interpreter importing the modules again). */
static void test_hot_spare_forks_from_a_ready_zygote(void **state)
{
    const char *python = getenv("DDP_TEST_PYTHON");
    if (python == NULL || *python == '\0' || access(python, X_OK) != 0)
        skip();
    char *dir = th_tmpdir(), exec[600], path[1100], marker[700], script[1100], flags[512];
    snprintf(exec, sizeof exec, "PYTHON_EXEC=%s", python);
    snprintf(path, sizeof path, "PYTHONPATH=%s/tests/python", th_source_dir());
    snprintf(marker, sizeof marker, "WARM_TRIGGER=%s/go", dir);
    snprintf(script, sizeof script, "%s/tests/python/warm_plain.py", th_source_dir());
    const char *env[] = {exec, path, marker, NULL};
    const char *workers[] = {script, "marker", NULL};
    job_t job;
    job_init(&job);
    char elastic[256];
    elastic_flags(&job, "2:2", 1, 60, elastic, sizeof elastic);
    snprintf(flags, sizeof flags, "%s --hot-spares=1 --warm-restarts --preload=json", elastic);
    th_proc_t *host = start_node_env(&job, 0, 0, 1, flags, workers, env);
    TH_ASSERT(host, th_wait_output(host, 2, "hosting its store", 1, 30));
    th_proc_t *other = start_node_env(&job, 0, 0, 1, flags, workers, env);
    TH_ASSERT(host, th_wait_output(host, 1, "ready", 1, 30));
    TH_ASSERT(other, th_wait_output(other, 1, "ready", 1, 30));
    const char *at = strstr(err(other), "this is node ");
    TH_ASSERT(other, at != NULL);
    int lost_rank = atoi(at + strlen("this is node "));
    th_proc_t *spare = start_node_env(&job, 0, 0, 1, flags, workers, env);
    TH_ASSERT(spare, th_wait_output(spare, 2, "warm restarts: the zygote (pid ", 1, 30));
    spare_takes_over(host, other, spare, strchr(marker, '=') + 1, lost_rank);
    TH_ASSERT(spare, strstr(err(spare), "1 of 1 workers of attempt ") != NULL);
    TH_ASSERT(spare, strstr(err(spare), "starts cold") == NULL);
    char done[64];
    snprintf(done, sizeof done, "DONE group rank %d", lost_rank);
    TH_ASSERT(spare, strstr(out(spare), done) != NULL);
    th_wait_exit(other, 10);
    job_cleanup(&job);
    th_rmtree(dir);
    free(dir);
}

/* Ctrl-Z on node 1, which does not serve the store: node 1 asks the store's host to pause
 * the job, and no node is taken as lost for its missing heartbeats meanwhile (the job
 * failed with "no heartbeat"). */
static void test_ctrl_z_on_another_node_stops_every_node(void **state)
{
    const char *const says[4] = {
        "1 worker(s) here and every other node's stop with ddp-launch",
        "continued: the 1 stopped worker(s) here and the other nodes' continue",
        ") was stopped (Ctrl-Z there): this node's 1 worker(s) stop with it until it continues",
        ") continued: so do this node's workers"};
    ctrl_z_pauses_the_job(1, says);
}

/* Ctrl-Z on nodes 1 and 2 of three: the job stays paused until both have continued (node
 * 2's own stop, on workers node 1's pause had stopped already, left them stopped for good,
 * and the job hung). */
static void test_ctrl_z_on_two_nodes_holds_until_both_continue(void **state)
{
    char *dir = th_tmpdir(), ticks[700];
    snprintf(ticks, sizeof ticks, "TICKS=%s/ticks", dir);
    const char *env[] = {ticks, NULL};
    const char *script[] = {"/bin/sh", "-c",
                            "i=0; while [ $i -lt 40 ]; do echo \"tick $RANK $i\"; "
                            "echo $i >> \"$TICKS.$RANK\"; i=$((i + 1)); sleep 0.05; done",
                            NULL};
    job_t job;
    job_init(&job);
    const char *flags = "--rdzv-conf=read_timeout=2";
    th_proc_t *n[3];
    for (int i = 2; i >= 0; i--)
        n[i] = start_node_env(&job, 3, i, 1, flags, script, env);
    char prefix[700];
    snprintf(prefix, sizeof prefix, "%s/ticks", dir);
    for (int i = 0; i < 300 && th_lines_in(prefix, 3) < 12; i++)
        usleep(20 * 1000);
    TH_ASSERT(n[0], th_lines_in(prefix, 3) >= 12);
    TH_ASSERT(n[1], kill(n[1]->pid, SIGTSTP) == 0);
    TH_ASSERT(n[2], th_wait_output(n[2], 2, "node 1 (", 1, 10));
    TH_ASSERT(n[2], kill(n[2]->pid, SIGTSTP) == 0);
    usleep(800 * 1000); /* both stop 0.3 s after asking */
    TH_ASSERT(n[1], th_proc_state(n[1]->pid) == 'T');
    TH_ASSERT(n[2], th_proc_state(n[2]->pid) == 'T');
    TH_ASSERT(n[1], kill(n[1]->pid, SIGCONT) == 0);
    TH_ASSERT(n[1],
              th_wait_output(n[1], 2, "once every node stopped by Ctrl-Z has continued", 1, 10));
    int before = th_lines_in(prefix, 3);
    TH_ASSERT(n[0], !th_wait_exit(n[0], 1.5)); /* node 2 holds the pause */
    int after = th_lines_in(prefix, 3);
    printf("ticks while node 2 holds the pause: %d, then %d\n", before, after);
    TH_ASSERT(n[0], after == before && before < 120);
    TH_ASSERT(n[2], kill(n[2]->pid, SIGCONT) == 0);
    TH_ASSERT(n[2], th_wait_output(n[2], 2, "continue when the job's pause ends", 1, 10));
    job_wait(&job, 60);
    for (int i = 0; i < 3; i++)
        TH_ASSERT(n[i], th_status(n[i]) == 0);
    TH_ASSERT(n[0], th_lines_in(prefix, 3) == 120);
    job_cleanup(&job);
    th_rmtree(dir);
    free(dir);
}

/* SIGCONT within the 0.3 s the store's host waits, after Ctrl-Z, for the other nodes to stop:
 * the stop is off, and the host is not left stopped after its continue (as it was). The
 * SIGCONT goes once the host says it took the SIGTSTP (a SIGCONT sent before would discard
 * it); on a loaded machine it may land past the 0.3 s, a plain stop and continue: up to
 * three jobs are tried for one that lands within, and none may be left stopped. */
static void test_continue_before_the_store_host_stops(void **state)
{
    const char *script[] = {"/bin/sh", "-c",
                            "i=0; while [ $i -lt 30 ]; do echo \"tick $RANK $i\"; i=$((i + 1)); "
                            "sleep 0.05; done",
                            NULL};
    const char *debug[] = {"DDP_LAUNCH_LOG_LEVEL=debug", NULL};
    bool within = false;
    for (int attempt = 0; attempt < 3 && !within; attempt++) {
        job_t job;
        job_init(&job);
        const char *flags = "--rdzv-conf=read_timeout=2";
        th_proc_t *n1 = start_node(&job, 2, 1, 1, flags, script);
        th_proc_t *n0 = start_node_env(&job, 2, 0, 1, flags, script, debug);
        TH_ASSERT(n0, th_wait_output(n0, 1, "tick 0 3", 1, 30) &&
                          th_wait_output(n1, 1, "tick 1 3", 1, 30));
        TH_ASSERT(n0, kill(n0->pid, SIGTSTP) == 0);
        TH_ASSERT(n0, th_wait_output(n0, 2, "stopping here in 300 ms", 1, 10));
        TH_ASSERT(n0, kill(n0->pid, SIGCONT) == 0);
        usleep(600 * 1000); /* past the 0.3 s */
        char st = th_proc_state(n0->pid);
        if (st == 'T')
            kill(n0->pid, SIGCONT); /* (so that the job ends either way) */
        TH_ASSERT(n0, st != 'T');
        job_wait(&job, 60);
        TH_ASSERT(n0, th_status(n0) == 0);
        TH_ASSERT(n1, th_status(n1) == 0);
        TH_ASSERT(n0, th_count(out(n0), "tick ") == 30);
        TH_ASSERT(n1, th_count(out(n1), "tick ") == 30);
        within = strstr(err(n0), "continued before it stopped (SIGCONT within 300 ms") != NULL;
        if (within)
            TH_ASSERT(n1, strstr(err(n1), "the node serving the job's store continued") != NULL);
        printf("attempt %d: the SIGCONT landed %s the 0.3 s\n", attempt,
               within ? "within" : "past");
        job_cleanup(&job);
    }
    assert_true(within);
}

/* Ctrl-Z on the launcher that serves an elastic job's store, a hot spare waiting: the spare
 * is told too, and waits without heartbeats (which the stopped store could not answer) for
 * as long as the pause lasts, here twice read_timeout; then it still takes a lost node's
 * place. While it waits it says what the running round is, not the forming round's count,
 * and says it once. */
static void test_ctrl_z_with_a_hot_spare_waiting(void **state)
{
    char *dir = th_tmpdir(), marker[600], script[1400], flags[512];
    snprintf(marker, sizeof marker, "%s/go", dir);
    snprintf(script, sizeof script,
             "if [ -e '%s' ]; then echo \"GROUP_RANK=$GROUP_RANK\"; exit 0; fi; "
             "echo ready; exec sleep 600",
             marker);
    const char *workers[] = {"/bin/sh", "-c", script, NULL};
    job_t job;
    job_init(&job);
    snprintf(flags, sizeof flags,
             "--nnodes=2:2 --rdzv-backend=c10d --rdzv-endpoint=%s:%d "
             "--rdzv-conf=last_call_timeout=1,join_timeout=60,read_timeout=2 --hot-spares=1",
             net.addr[0], job.port);
    th_proc_t *host = start_node(&job, 0, 0, 1, flags, workers);
    TH_ASSERT(host, th_wait_output(host, 2, "hosting its store", 1, 30));
    th_proc_t *other = start_node(&job, 0, 0, 1, flags, workers);
    TH_ASSERT(host, th_wait_output(host, 1, "ready", 1, 30));
    TH_ASSERT(other, th_wait_output(other, 1, "ready", 1, 30));
    const char *at = strstr(err(other), "this is node ");
    TH_ASSERT(other, at != NULL);
    int lost_rank = atoi(at + strlen("this is node "));
    th_proc_t *spare = start_node(&job, 0, 0, 1, flags, workers);
    TH_ASSERT(spare, th_wait_output(spare, 2,
                                    "round 0 runs with 2 node(s), all it may have "
                                    "(--nnodes=2:2); this launcher waits as a hot spare",
                                    1, 30));
    TH_ASSERT(host, kill(host->pid, SIGTSTP) == 0);
    TH_ASSERT(spare, th_wait_output(spare, 2,
                                    "the node serving the job's store was stopped (Ctrl-Z "
                                    "there): this node waits until it continues",
                                    1, 10));
    TH_ASSERT(other,
              th_wait_output(other, 2, "the node serving the job's store was stopped", 1, 10));
    TH_ASSERT(spare, !th_wait_exit(spare, 4)); /* twice read_timeout */
    TH_ASSERT(host, kill(host->pid, SIGCONT) == 0);
    TH_ASSERT(spare, th_wait_output(spare, 2, "the node serving the job's store continued", 1, 10));
    /* Its next note is due 5 s after the continue: the same status is not said again. */
    TH_ASSERT(spare, !th_wait_output(spare, 2, "this launcher waits as a hot spare", 2, 6));
    spare_takes_over(host, other, spare, marker, lost_rank);
    char took[96];
    snprintf(took, sizeof took, "GROUP_RANK=%d\n", lost_rank);
    TH_ASSERT(spare, strstr(out(spare), took) != NULL);
    TH_ASSERT(spare, strstr(err(spare), "lost the rendezvous store") == NULL);
    th_wait_exit(other, 10);
    job_cleanup(&job);
    th_rmtree(dir);
    free(dir);
}

/* --store-wait-notice names workers only: the launchers' own waits in the store (a node's
 * for the round's end, a hot spare's for a place) are not named, however long. */
static void test_launchers_waits_not_named(void **state)
{
    const char *workers[] = {"/bin/sh", "-c", "echo ready; sleep 2", NULL};
    for (int elastic = 0; elastic <= 1; elastic++) {
        job_t job;
        char flags[512];
        job_init(&job);
        elastic_flags(&job, "2:2", 1, 60, flags, sizeof flags);
        strcat(flags, " --hot-spares=1 --store-wait-notice=0.2");
        for (int i = 0; i < (elastic ? 3 : 2); i++)
            start_node(&job, elastic ? 0 : 2, elastic ? 0 : i, 1,
                       elastic ? flags : "--store-wait-notice=0.2", workers);
        job_wait(&job, 60);
        int ran = 0;
        for (int i = 0; i < job.n; i++) {
            ran += strstr(out(&job.node[i]), "ready") != NULL;
            TH_ASSERT(&job.node[i], strstr(err(&job.node[i]), "in the store") == NULL);
        }
        TH_ASSERT(&job.node[0], ran == 2);
        job_cleanup(&job);
    }
}

/* A wait in the store by another node's worker is named by its node's address on the
 * node that serves the store, with that node's rank that does not wait (which would set
 * the key); the job goes on once it does. */
static void test_remote_wait_named(void **state)
{
    char *dir = th_tmpdir(), go[600], line[256];
    snprintf(go, sizeof go, "%s/go", dir);
    const char *workers[] = {th_worker(), "store-meet", "/meet", go, NULL};
    job_t job;
    job_init(&job);
    th_proc_t *n0 = start_node(&job, 2, 0, 1, "--store-wait-notice=0.3", workers);
    th_proc_t *n1 = start_node(&job, 2, 1, 1, "--store-wait-notice=0.3", workers);
    TH_ASSERT(n0, th_wait_output(n0, 2, "not waiting in the store: rank 0 (pid ", 1, 60));
    snprintf(line, sizeof line, "ddp-launch: warning: 1 client(s) at %s has waited ",
             net.netns ? net.addr[1] : "127.0.0.1");
    const char *said = strstr(err(n0), line), *eol = said ? strchr(said, '\n') : NULL;
    TH_ASSERT(n0, eol != NULL && strstr(said, " s in the store for '/meet', which nobody has "
                                              "set yet\n") == eol - 53);
    TH_ASSERT(n0, th_touch(go));
    job_wait(&job, 60);
    for (int i = 0; i < 2; i++) {
        TH_ASSERT(&job.node[i], th_status(&job.node[i]) == 0);
        TH_ASSERT(&job.node[i], strstr(out(&job.node[i]), "met /meet") != NULL);
    }
    TH_ASSERT(n1, strstr(err(n1), "in the store") == NULL); /* its launcher serves none */
    job_cleanup(&job);
    th_rmtree(dir);
    free(dir);
}

/* A node whose workers keep failing leaves (--exclude-after) and one that fails its health
 * check does not join: with a hot spare, the job goes on at full size without them. */
static void test_bad_nodes_replaced_by_spares(void **state)
{
    char *dir = th_tmpdir(), good_script[1200], bad_script[1200];
    snprintf(good_script, sizeof good_script,
             "if [ -e '%s/failed' ]; then echo RANK=$RANK; exit 0; fi; echo ready; "
             "exec sleep 600",
             dir);
    snprintf(bad_script, sizeof bad_script, ": > '%s/failed'; exit 3", dir);
    const char *good[] = {"/bin/sh", "-c", good_script, NULL};
    const char *bad[] = {"/bin/sh", "-c", bad_script, NULL};
    const char *debug[] = {"DDP_LAUNCH_LOG_LEVEL=debug", NULL};
    char elastic[256], flags[512];
    job_t job;
    job_init(&job);
    elastic_flags(&job, "2:2", 1, 60, elastic, sizeof elastic);
    snprintf(flags, sizeof flags, "%s --hot-spares=1 --max-restarts=2 --exclude-after=1", elastic);
    th_proc_t *a = start_node(&job, 0, 0, 1, flags, good);
    TH_ASSERT(a, th_wait_output(a, 2, "hosting its store", 1, 30));
    th_proc_t *b = start_node_env(&job, 0, 0, 1, flags, bad, debug);
    TH_ASSERT(b, th_wait_output(b, 2, "waiting for a place in a round", 1, 30));
    th_proc_t *spare = start_node(&job, 0, 0, 1, flags, good);
    job_wait(&job, 90);
    TH_ASSERT(b, th_status(b) == 5);
    TH_ASSERT(b, strstr(err(b), "failed in 1 round(s) in a row (--exclude-after=1): it leaves the "
                                "job, and a hot spare takes its place") != NULL);
    /* The store's host says why it left (not that it stopped answering), and the node that
     * left prints its own failure report: the job's, which goes on, has no place for it. */
    TH_ASSERT(a, strstr(err(a), "leaves the job: its workers failed in 1 round(s) in a row "
                                "(--exclude-after=1)") != NULL &&
                     strstr(err(a), "stopped answering") == NULL);
    TH_ASSERT(b, strstr(err(b), "Root Cause (first observed failure):") != NULL &&
                     strstr(err(b), "are in the job's failure report") == NULL);
    TH_ASSERT(a, th_status(a) == 0 && strstr(out(a), "RANK=") != NULL);
    TH_ASSERT(spare, th_status(spare) == 0 && strstr(out(spare), "RANK=") != NULL);
    job_cleanup(&job);

    /* Unhealthy before the first round: it does not join; the spare makes up the job. */
    const char *works[] = {"/bin/sh", "-c", "echo RANK=$RANK", NULL};
    job_init(&job);
    elastic_flags(&job, "2:2", 1, 60, elastic, sizeof elastic);
    snprintf(flags, sizeof flags, "%s --hot-spares=1", elastic);
    char sick[600];
    snprintf(sick, sizeof sick, "%s --hot-spares=1 --health-check=false", elastic);
    th_proc_t *n0 = start_node(&job, 0, 0, 1, flags, works);
    /* (The launcher that hosts the endpoint's store must stay: it is the job's.) */
    TH_ASSERT(n0, th_wait_output(n0, 2, "hosting its store", 1, 30));
    th_proc_t *n1 = start_node(&job, 0, 0, 1, sick, works);
    TH_ASSERT(n1, th_wait_exit(n1, 30)); /* (before the job can form and end without it) */
    th_proc_t *n2 = start_node(&job, 0, 0, 1, flags, works);
    job_wait(&job, 60);
    TH_ASSERT(n1, th_status(n1) == 5 && strstr(err(n1), "it leaves the job") != NULL);
    TH_ASSERT(n0, th_status(n0) == 0 && strstr(out(n0), "RANK=") != NULL);
    TH_ASSERT(n2, th_status(n2) == 0 && strstr(out(n2), "RANK=") != NULL);
    job_cleanup(&job);
    th_rmtree(dir);
    free(dir);
}

/* c10d with --nnodes=2:3: the round closes at once when 3 launchers come; each gets a
 * node rank of its own, and the node hosting the endpoint serves the store. */
static void test_elastic_closes_when_full(void **state)
{
    const char *env[] = {th_worker(), "env", NULL};
    char flags[256];
    job_t job;
    job_init(&job);
    elastic_flags(&job, "2:3", 60, 60, flags, sizeof flags);
    for (int i = 0; i < 3; i++)
        start_node(&job, 0, i, i == 1 ? 2 : 1, flags, env);
    double started = th_now();
    job_wait(&job, 60);
    TH_ASSERT(&job.node[0], th_now() - started < 30); /* not the 60 s last call */
    int ranks[3] = {0, 0, 0};
    for (int i = 0; i < 3; i++) {
        th_proc_t *p = &job.node[i];
        TH_ASSERT(p, th_status(p) == 0);
        TH_ASSERT(p, strstr(out(p), "GROUP_WORLD_SIZE=3\n") != NULL);
        TH_ASSERT(p, strstr(out(p), "\nWORLD_SIZE=4\n") != NULL);
        const char *g = strstr(out(p), "GROUP_RANK=");
        TH_ASSERT(p, g != NULL && atoi(g + 11) >= 0 && atoi(g + 11) < 3);
        ranks[atoi(g + 11)]++;
    }
    assert_int_equal(ranks[0] * ranks[1] * ranks[2], 1); /* 0, 1 and 2, once each */
    job_cleanup(&job);
}

/* Two launchers of --nnodes=2:3: the round closes with 2 once the last call (1 s) passes;
 * a third that comes while they run makes them re-form with it (round 1), keeping their
 * node ranks, the newcomer last, and no restart spent. */
static void test_elastic_late_joiner(void **state)
{
    const char *workers[] = {th_worker(), "until-world", "3", NULL};
    char flags[256];
    job_t job;
    job_init(&job);
    elastic_flags(&job, "2:3", 1, 60, flags, sizeof flags);
    th_proc_t *a = start_node(&job, 0, 0, 1, flags, workers);
    th_proc_t *b = start_node(&job, 0, 1, 1, flags, workers);
    TH_ASSERT(a, th_wait_output(a, 1, "ready ", 1, 30));
    TH_ASSERT(b, th_wait_output(b, 1, "ready ", 1, 30));
    th_proc_t *late = start_node(&job, 0, 2, 1, flags, workers);
    job_wait(&job, 60);
    for (int i = 0; i < 3; i++) {
        th_proc_t *p = &job.node[i];
        TH_ASSERT(p, th_status(p) == 0);
        TH_ASSERT(p, strstr(out(p), "GROUP_WORLD_SIZE=3\n") != NULL);
        TH_ASSERT(p, strstr(out(p), "TORCHELASTIC_RESTART_COUNT=0\n") != NULL);
    }
    TH_ASSERT(late, strstr(out(late), "GROUP_RANK=2\n") != NULL);
    TH_ASSERT(late, strstr(out(late), "\nRANK=2\n") != NULL);
    TH_ASSERT(a, strstr(err(a), "re-forming the job as round 1") != NULL);
    /* A newcomer is no failure: said as what it is, on both running nodes. */
    for (int i = 0; i < 2; i++) {
        th_proc_t *p = &job.node[i];
        TH_ASSERT(p, strstr(err(p), "the round failed on another node") == NULL);
        TH_ASSERT(p, strstr(err(p), "the nodes changed (1 node(s) waiting to join): stopping this "
                                    "node's workers to re-form the job") != NULL);
    }
    job_cleanup(&job);
}

/* Three launchers of --nnodes=2:3; one is SIGKILLed: the other two re-form without it
 * (2 >= MIN) and their workers see a world of 2. */
static void test_elastic_reforms_without_a_lost_node(void **state)
{
    const char *workers[] = {th_worker(), "until-world", "2", NULL};
    char flags[256];
    job_t job;
    job_init(&job);
    elastic_flags(&job, "2:3", 1, 60, flags, sizeof flags);
    th_proc_t *a = start_node(&job, 0, 0, 1, flags, workers);
    th_proc_t *b = start_node(&job, 0, 1, 1, flags, workers);
    th_proc_t *c = start_node(&job, 0, 2, 1, flags, workers);
    for (int i = 0; i < 3; i++)
        TH_ASSERT(&job.node[i], th_wait_output(&job.node[i], 1, "ready ", 1, 30));
    assert_int_equal(kill(c->pid, SIGKILL), 0);
    TH_ASSERT(a, th_wait_exit(a, 60));
    TH_ASSERT(b, th_wait_exit(b, 60));
    for (int i = 0; i < 2; i++) {
        th_proc_t *p = &job.node[i];
        TH_ASSERT(p, th_status(p) == 0);
        TH_ASSERT(p, strstr(out(p), "GROUP_WORLD_SIZE=2\n") != NULL);
        TH_ASSERT(p, strstr(err(p), "stopped answering") != NULL ||
                         strstr(err(p), "the nodes changed") != NULL);
    }
    th_wait_exit(c, 10);
    job_cleanup(&job);
}

/* Fewer than MIN launchers for join_timeout: status 5, saying how many came. */
static void test_elastic_too_few_nodes(void **state)
{
    const char *env[] = {th_worker(), "env", NULL};
    char flags[256];
    job_t job;
    job_init(&job);
    elastic_flags(&job, "2:3", 30, 7, flags, sizeof flags);
    th_proc_t *a = start_node(&job, 0, 0, 1, flags, env);
    job_wait(&job, 60);
    TH_ASSERT(a, th_status(a) == 5);
    TH_ASSERT(a, strstr(err(a), "round 0: 1 node(s) here, waiting for --nnodes=2:3 (") != NULL);
    TH_ASSERT(a, strstr(err(a), "1 node(s) joined within 7 s") != NULL);
    TH_ASSERT(a, strstr(out(a), "RANK=") == NULL);
    job_cleanup(&job);
}

/* --env on node 0 (the store's host) reaches the workers of every node, over a node's
 * own --env of the same name; a node's other --env stays its own. */
static void test_env_of_node0_everywhere(void **state)
{
    const char *prog[] = {"/bin/sh", "-c", "echo \"rank $RANK: $NCCL_DEBUG/$DDP_X/$DDP_Y\"", NULL};
    const char *node0[] = {"DDP_X=node0", NULL};
    job_t job;
    job_init(&job);
    th_proc_t *n1 = start_node(&job, 2, 1, 2, "--env DDP_X=node1 --env DDP_Y=mine", prog);
    th_proc_t *n0 = start_node_env(&job, 2, 0, 1, "--env NCCL_DEBUG=INFO --env DDP_X", prog, node0);
    job_wait(&job, 60);
    TH_ASSERT(n0, th_status(n0) == 0 && th_status(n1) == 0);
    TH_ASSERT(n0, strstr(out(n0), "rank 0: INFO/node0/\n") != NULL);
    TH_ASSERT(n1, strstr(out(n1), "rank 1: INFO/node0/mine\n") != NULL);
    TH_ASSERT(n1, strstr(out(n1), "rank 2: INFO/node0/mine\n") != NULL);
    job_cleanup(&job);
}

/* The same command on every node: --env NAME, set on node 0 only, is accepted on node 1
 * (it used to exit 2, "not set here") and its workers get node 0's value; a value of
 * node 1's own that differs is named in a warning on node 1 and yields to node 0's. */
static void test_same_env_command_on_every_node(void **state)
{
    const char *prog[] = {"/bin/sh", "-c", "echo \"rank $RANK: $DDP_X/$DDP_Y\"", NULL};
    const char *node0[] = {"DDP_X=node0", "DDP_Y=y0", NULL};
    const char *node1[] = {"DDP_X", "DDP_Y=y1", NULL};
    job_t job;
    job_init(&job);
    th_proc_t *n1 = start_node_env(&job, 2, 1, 1, "--env DDP_X --env DDP_Y", prog, node1);
    th_proc_t *n0 = start_node_env(&job, 2, 0, 1, "--env DDP_X --env DDP_Y", prog, node0);
    job_wait(&job, 60);
    TH_ASSERT(n0, th_status(n0) == 0 && th_status(n1) == 0);
    TH_ASSERT(n0, strstr(out(n0), "rank 0: node0/y0\n") != NULL);
    TH_ASSERT(n1, strstr(out(n1), "rank 1: node0/y0\n") != NULL);
    TH_ASSERT(n1, strstr(err(n1), "--env DDP_Y: this node's value 'y1' differs from node 0's "
                                  "'y0', which the workers get") != NULL);
    TH_ASSERT(n1, strstr(err(n1), "--env DDP_X") == NULL);
    TH_ASSERT(n0, strstr(err(n0), "differs from node 0's") == NULL);
    job_cleanup(&job);
}

/* A variable set on one node only (NCCL_SOCKET_IFNAME, as from one node's profile): every
 * node warns, naming it and both sides; the job runs. */
static void test_environment_difference_warned(void **state)
{
    const char *prog[] = {"/bin/echo", "worker ran", NULL};
    const char *one[] = {"NCCL_SOCKET_IFNAME=eth7", NULL};
    job_t job;
    job_init(&job);
    start_node(&job, 2, 1, 1, NULL, prog);
    start_node_env(&job, 2, 0, 1, NULL, prog, one);
    job_wait(&job, 60);
    for (int i = 0; i < 2; i++) {
        th_proc_t *p = &job.node[i];
        TH_ASSERT(p, th_status(p) == 0);
        TH_ASSERT(p, strstr(err(p), "the nodes' environments differ") != NULL);
        TH_ASSERT(p, strstr(err(p), "NCCL_SOCKET_IFNAME differs: 'eth7' on node 0, unset on "
                                    "node 1") != NULL);
        TH_ASSERT(p, strstr(out(p), "worker ran") != NULL);
    }
    job_cleanup(&job);
}

/* --env-check-strict (given to the store's host): the difference ends the job, status 5
 * on every node, before any worker starts; a variable named by --env-check counts. */
static void test_environment_difference_strict(void **state)
{
    const char *prog[] = {"/bin/echo", "worker ran", NULL};
    const char *value[] = {"DDP_TEST_SETTING=a", NULL};
    job_t job;
    job_init(&job);
    start_node(&job, 2, 1, 1, "--env-check=DDP_TEST_SETTING", prog);
    start_node_env(&job, 2, 0, 1, "--env-check-strict --env-check=DDP_TEST_SETTING", prog, value);
    job_wait(&job, 60);
    for (int i = 0; i < 2; i++) {
        th_proc_t *p = &job.node[i];
        TH_ASSERT(p, th_status(p) == 5);
        TH_ASSERT(p, strstr(err(p), "--env-check-strict: no worker started") != NULL);
        TH_ASSERT(p, strstr(err(p), "DDP_TEST_SETTING differs: 'a' on node 0, unset on node 1"));
        TH_ASSERT(p, strstr(out(p), "worker ran") == NULL);
    }
    job_cleanup(&job);
}

/* libddp's collectives across the nodes' workers (2 + 1 ranks), all of them. */
static void test_libddp_across_nodes(void **state)
{
    const char *collectives[] = {getenv("DDP_TEST_COLLECTIVES"), "collectives", NULL};
    job_t job;
    job_init(&job);
    th_proc_t *n0 = start_node(&job, 2, 0, 2, NULL, collectives);
    th_proc_t *n1 = start_node(&job, 2, 1, 1, NULL, collectives);
    job_wait(&job, 120);
    TH_ASSERT(n0, th_status(n0) == 0);
    TH_ASSERT(n1, th_status(n1) == 0);
    TH_ASSERT(n0, th_count(out(n0), "collectives ok, world 3") == 2);
    TH_ASSERT(n1, th_count(out(n1), "collectives ok, world 3") == 1);
    job_cleanup(&job);
    /* reduce, reduce_scatter, all_to_all, gather, scatter, send and recv across them (the
     * point-to-point connections between nodes too). */
    const char *more[] = {getenv("DDP_TEST_COLLECTIVES"), "more", "1000", NULL};
    job_init(&job);
    n0 = start_node(&job, 2, 0, 2, NULL, more);
    n1 = start_node(&job, 2, 1, 1, NULL, more);
    job_wait(&job, 300);
    TH_ASSERT(n0, th_status(n0) == 0);
    TH_ASSERT(n1, th_status(n1) == 0);
    TH_ASSERT(n0, th_count(out(n0), "more ok: 180 cases, world 3") == 2);
    TH_ASSERT(n1, th_count(out(n1), "more ok: 180 cases, world 3") == 1);
    job_cleanup(&job);
}

/* The launchers' in-memory checkpoint directories of `job` still in /dev/shm. */
static int checkpoint_dirs_left(const job_t *job)
{
    char prefix[128];
    int n = 0;
    snprintf(prefix, sizeof prefix, "ddp-ckpt-%s-", job->run_id);
    DIR *d = opendir("/dev/shm");
    for (struct dirent *e; d != NULL && (e = readdir(d)) != NULL;)
        n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
    if (d != NULL)
        closedir(d);
    return n;
}

/* In-memory checkpoints across nodes (libddp workers, the collectives helper's memnodes 5):
 * node 0's ranks save steps 1 to 5, node 1's 1 to 4, then node 1's last rank is SIGKILLed ->
 * each node publishes the steps its ranks hold, and every rank of round 1 loads step 4, the
 * newest every rank of both nodes holds, named in DDP_CHECKPOINT_STEP (node 0 alone would
 * have named 5). Nothing is left in /dev/shm. */
static void test_checkpoint_step_agreed_across_nodes(void **state)
{
    const char *memnodes[] = {getenv("DDP_TEST_COLLECTIVES"), "memnodes", "5", NULL};
    const char *env[] = {"DDP_CHECKPOINT_DIR", NULL};
    char loaded[96];
    job_t job;
    job_init(&job);
    th_proc_t *n0 = start_node_env(&job, 2, 0, 2, "--max-restarts=1", memnodes, env);
    th_proc_t *n1 = start_node_env(&job, 2, 1, 2, "--max-restarts=1", memnodes, env);
    job_wait(&job, 120);
    TH_ASSERT(n0, th_status(n0) == 0);
    TH_ASSERT(n1, th_status(n1) == 0);
    TH_ASSERT(n1, strstr(err(n1), "rank 3: killed after step 5") != NULL);
    for (int rank = 0; rank < 4; rank++) {
        th_proc_t *p = rank < 2 ? n0 : n1;
        snprintf(loaded, sizeof loaded, "memnodes %d 1 loaded 4 (DDP_CHECKPOINT_STEP=4)\n", rank);
        TH_ASSERT(p, strstr(out(p), loaded) != NULL);
    }
    for (int i = 0; i < 2; i++)
        TH_ASSERT(&job.node[i], strstr(err(&job.node[i]),
                                       "the workers resume from step 4, the newest every rank of "
                                       "the round's 2 nodes holds") != NULL);
    assert_int_equal(checkpoint_dirs_left(&job), 0);
    job_cleanup(&job);
}

/* Waits (a deadline) until `holder`'s DIR/replica<R>.<s> holds the used bytes of `source`'s
 * DIR/rank<R>.<s> of step 3 (the slot file may be longer) for one of the slots s; the dirs
 * as the workers printed them. */
static void wait_replica(th_proc_t *p, const char source[1024], const char holder[1024], int rank)
{
    double deadline = th_now() + 60;
    for (;;) {
        for (int slot = 0; slot < 2; slot++) {
            char a[1100], b[1100], *x = NULL, *y = NULL;
            size_t xn = 0, yn = 0;
            snprintf(a, sizeof a, "%.1000s/rank%d.%d", source, rank, slot);
            snprintf(b, sizeof b, "%.1000s/replica%d.%d", holder, rank, slot);
            bool same = ddp_read_file(a, 1 << 26, &x, &xn) == 0 &&
                        ddp_read_file(b, 1 << 26, &y, &yn) == 0 && yn <= xn && yn > 128 &&
                        memcmp(x, y, yn) == 0 && memcmp(x + 24, "\3\0\0\0\0\0\0\0", 8) == 0;
            free(x);
            free(y);
            if (same)
                return;
        }
        TH_ASSERT(p, th_now() < deadline);
        poll(NULL, 0, 20); /* (the files are looked at again) */
    }
}

/* The directory rank `rank` printed ("MODE RANK saved 3 dir DIR"), into dir. */
static void saved_dir(th_proc_t *p, const char *mode, int rank, char *dir, size_t cap)
{
    char needle[64];
    snprintf(needle, sizeof needle, "%s %d saved 3 dir ", mode, rank);
    TH_ASSERT(p, th_wait_output(p, 1, needle, 1, 60));
    const char *at = strstr(out(p), needle) + strlen(needle);
    size_t n = strcspn(at, "\n");
    TH_ASSERT(p, n > 0 && n < cap);
    snprintf(dir, cap, "%.*s", (int)n, at);
}

/* Replicas (--checkpoint-replicas's default, 1): 2 nodes x 2 ranks save steps 1 to 3 (libddp,
 * the collectives helper's memhold) -> each rank's slot of step 3 is on the other node too,
 * byte for byte, as replica<R>.<s> in its launcher's directory; the launchers stopped, each
 * says the bytes it received, and nothing is left in /dev/shm. */
static void test_checkpoints_replicated_to_the_next_node(void **state)
{
    const char *memhold[] = {getenv("DDP_TEST_COLLECTIVES"), "memhold", "3", NULL};
    const char *env[] = {"DDP_CHECKPOINT_DIR", NULL};
    char dirs[4][1024];
    job_t job;
    job_init(&job);
    th_proc_t *n0 = start_node_env(&job, 2, 0, 2, NULL, memhold, env);
    th_proc_t *n1 = start_node_env(&job, 2, 1, 2, NULL, memhold, env);
    for (int rank = 0; rank < 4; rank++)
        saved_dir(rank < 2 ? n0 : n1, "memhold", rank, dirs[rank], sizeof dirs[rank]);
    for (int rank = 0; rank < 4; rank++)
        wait_replica(rank < 2 ? n0 : n1, dirs[rank], dirs[rank < 2 ? 2 : 0], rank);
    kill(n0->pid, SIGTERM);
    job_wait(&job, 60);
    for (int i = 0; i < 2; i++)
        TH_ASSERT(&job.node[i], strstr(err(&job.node[i]), "bytes of other nodes' replicas were "
                                                          "received and kept") != NULL);
    assert_int_equal(checkpoint_dirs_left(&job), 0);
    job_cleanup(&job);
}

/* SIGKILLs `pid` and its children (the orphan guard, the workers) at once: a node lost
 * whole. */
static void kill_node(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task/%d/children", (int)pid, (int)pid);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    for (int child; fscanf(f, "%d", &child) == 1;)
        kill(child, SIGKILL);
    fclose(f);
    assert_int_equal(kill(pid, SIGKILL), 0);
}

/* A 2-node job of 1 rank each and a hot spare (c10d; libddp, the collectives helper's
 * memspare 3), both ranks' step 3 saved and the one of the node to be lost replicated to the
 * other: its parts (dirs[0]: the lost node's directory, dirs[1]: the kept one's). */
typedef struct {
    th_proc_t *lost, *kept, *spare;
    int lost_rank, kept_rank;
    char dirs[2][1024];
} spare_job_t;

static void spare_job_start(job_t *job, spare_job_t *s)
{
    const char *memspare[] = {getenv("DDP_TEST_COLLECTIVES"), "memspare", "3", NULL};
    const char *env[] = {"DDP_CHECKPOINT_DIR", NULL};
    const char *spare_env[] = {"DDP_CHECKPOINT_DIR", "DDP_LAUNCH_LOG_LEVEL=debug", NULL};
    char flags[512], elastic[256];
    elastic_flags(job, "2:2", 1, 60, elastic, sizeof elastic);
    snprintf(flags, sizeof flags, "%s --hot-spares=1", elastic);
    th_proc_t *a = start_node_env(job, 0, 0, 1, flags, memspare, env);
    th_proc_t *b = start_node_env(job, 0, 1, 1, flags, memspare, env);
    TH_ASSERT(a, th_wait_output(a, 1, " saved 3 dir ", 1, 60));
    TH_ASSERT(b, th_wait_output(b, 1, " saved 3 dir ", 1, 60));
    s->spare = start_node_env(job, 0, 0, 1, flags, memspare, spare_env);
    TH_ASSERT(s->spare, th_wait_output(s->spare, 2, "waiting for a place in a round", 1, 30));
    s->lost = strstr(err(a), "hosting its store") == NULL ? a : b;
    s->kept = s->lost == a ? b : a;
    const char *at = strstr(err(s->lost), "this is node ");
    TH_ASSERT(s->lost, at != NULL);
    s->lost_rank = atoi(at + strlen("this is node "));
    s->kept_rank = 1 - s->lost_rank;
    saved_dir(s->lost, "memspare", s->lost_rank, s->dirs[0], sizeof s->dirs[0]);
    saved_dir(s->kept, "memspare", s->kept_rank, s->dirs[1], sizeof s->dirs[1]);
    wait_replica(s->lost, s->dirs[0], s->dirs[1], s->lost_rank);
}

/* The lost node SIGKILLed whole (launcher, orphan guard, worker: its own directory stays, as
 * a lost machine's memory would be gone, and is removed here). */
static void spare_job_lose(spare_job_t *s)
{
    kill_node(s->lost->pid);
    TH_ASSERT(s->lost, th_wait_exit(s->lost, 10));
    bool left = access(s->dirs[0], F_OK) == 0; /* (its guard went with it) */
    th_rmtree(s->dirs[0]); /* the lost node's memory: nobody was left to remove it */
    TH_ASSERT(s->lost, left);
}

/* A node lost, a hot spare in its place (spare_job_t): once the lost node's rank's step 3
 * is on the other node as a replica, that node is SIGKILLed whole -> the spare fetches the
 * rank's step 3 from the survivor before its worker starts, the common step counts it,
 * and both ranks load step 3 (DDP_CHECKPOINT_STEP=3). Nothing of the others is left in
 * /dev/shm. */
static void test_spare_resumes_from_the_replica(void **state)
{
    char want[96];
    spare_job_t s;
    job_t job;
    job_init(&job);
    spare_job_start(&job, &s);
    spare_job_lose(&s);
    TH_ASSERT(s.kept, th_wait_exit(s.kept, 60) && th_status(s.kept) == 0);
    TH_ASSERT(s.spare, th_wait_exit(s.spare, 60) && th_status(s.spare) == 0);
    snprintf(want, sizeof want, "memspare %d loaded 3 (DDP_CHECKPOINT_STEP=3)\n", s.kept_rank);
    TH_ASSERT(s.kept, strstr(out(s.kept), want) != NULL);
    snprintf(want, sizeof want, "memspare %d loaded 3 (DDP_CHECKPOINT_STEP=3)\n", s.lost_rank);
    TH_ASSERT(s.spare, strstr(out(s.spare), want) != NULL);
    snprintf(want, sizeof want, "rank %d's step 3 fetched from node %d's replica", s.lost_rank,
             s.kept_rank);
    TH_ASSERT(s.spare, strstr(err(s.spare), want) != NULL);
    assert_int_equal(checkpoint_dirs_left(&job), 0);
    job_cleanup(&job);
}

/* The spare's launcher directory (the one of `job` in /dev/shm that is neither of s's),
 * into dir. */
static void spare_dir(const job_t *job, const spare_job_t *s, char *dir, size_t cap)
{
    char prefix[128];
    snprintf(prefix, sizeof prefix, "ddp-ckpt-%s-", job->run_id);
    dir[0] = '\0';
    DIR *d = opendir("/dev/shm");
    for (struct dirent *e; d != NULL && (e = readdir(d)) != NULL;) {
        snprintf(dir, cap, "/dev/shm/%s", e->d_name);
        if (strncmp(e->d_name, prefix, strlen(prefix)) == 0 && strcmp(dir, s->dirs[0]) != 0 &&
            strcmp(dir, s->dirs[1]) != 0)
            break;
        dir[0] = '\0';
    }
    if (d != NULL)
        closedir(d);
    TH_ASSERT(s->spare, dir[0] != '\0');
}

/* The spare's fetch of the lost rank's step 3 fails (the file it receives into is a
 * directory there) while the survivor holds its own rank's step 3 -> both nodes leave
 * DDP_CHECKPOINT_STEP unset, each saying why in one line (the survivor naming the spare's
 * node), and neither rank loads step 3: they agree on none and start over. */
static void test_failed_fetch_leaves_every_step_unset(void **state)
{
    char want[160], dir[1024], blocker[1200];
    spare_job_t s;
    job_t job;
    job_init(&job);
    spare_job_start(&job, &s);
    spare_dir(&job, &s, dir, sizeof dir);
    snprintf(blocker, sizeof blocker, "%s/.rank%d.0.incoming", dir, s.lost_rank);
    TH_ASSERT(s.spare, mkdir(blocker, 0700) == 0);
    spare_job_lose(&s);
    snprintf(want, sizeof want, "memspare %d saved 3 dir ", s.kept_rank);
    TH_ASSERT(s.kept, th_wait_output(s.kept, 1, want, 2, 60));
    snprintf(want, sizeof want, "memspare %d saved 3 dir ", s.lost_rank);
    TH_ASSERT(s.spare, th_wait_output(s.spare, 1, want, 1, 60));
    TH_ASSERT(s.kept, strstr(out(s.kept), " loaded ") == NULL);
    TH_ASSERT(s.spare, strstr(out(s.spare), " loaded ") == NULL);
    snprintf(want, sizeof want,
             "no step agreed across the nodes (node %d: unable to fetch rank %d's step 3 from "
             "node %d",
             s.lost_rank, s.lost_rank, s.kept_rank);
    TH_ASSERT(s.kept, strstr(err(s.kept), want) != NULL);
    snprintf(want, sizeof want,
             "no step agreed across the nodes (unable to fetch rank %d's step 3 from node %d",
             s.lost_rank, s.kept_rank);
    TH_ASSERT(s.spare, strstr(err(s.spare), want) != NULL);
    kill(s.kept->pid, SIGTERM);
    kill(s.spare->pid, SIGTERM);
    TH_ASSERT(s.kept, th_wait_exit(s.kept, 60));
    TH_ASSERT(s.spare, th_wait_exit(s.spare, 60));
    assert_int_equal(checkpoint_dirs_left(&job), 0);
    job_cleanup(&job);
}

/* Flips the first data byte of rank `rank`'s slot of step 3 in `dir` (the slot's header
 * says its step at offset 24); the slot's number. */
static int corrupt_step_3(th_proc_t *p, const char *dir, int rank)
{
    char path[1100];
    for (int slot = 0; slot < 2; slot++) {
        int64_t step = -1;
        unsigned char byte;
        snprintf(path, sizeof path, "%.1000s/rank%d.%d", dir, rank, slot);
        int fd = open(path, O_RDWR | O_CLOEXEC);
        bool ok = fd >= 0 && pread(fd, &step, sizeof step, 24) == sizeof step && step == 3 &&
                  pread(fd, &byte, 1, DDP_CKPT_HEADER_BYTES) == 1;
        byte ^= 0xff;
        ok = ok && pwrite(fd, &byte, 1, DDP_CKPT_HEADER_BYTES) == 1;
        if (fd >= 0)
            close(fd);
        if (ok)
            return slot;
    }
    TH_ASSERT(p, !"no slot of step 3");
    return -1;
}

/* SIGKILLs the worker (the child running `mode`) of the launcher `p`. */
static void kill_worker(th_proc_t *p, const char *mode)
{
    char path[64], cmdline[4096];
    snprintf(path, sizeof path, "/proc/%d/task/%d/children", (int)p->pid, (int)p->pid);
    FILE *f = fopen(path, "r");
    TH_ASSERT(p, f != NULL);
    int killed = 0;
    for (int child; fscanf(f, "%d", &child) == 1;) {
        snprintf(path, sizeof path, "/proc/%d/cmdline", child);
        FILE *c = fopen(path, "r");
        size_t n = c != NULL ? fread(cmdline, 1, sizeof cmdline - 1, c) : 0;
        if (c != NULL)
            fclose(c);
        for (size_t i = 0; i < n; i++)
            cmdline[i] = cmdline[i] == '\0' ? ' ' : cmdline[i];
        cmdline[n] = '\0';
        if (strstr(cmdline, mode) != NULL)
            killed += kill(child, SIGKILL) == 0;
    }
    fclose(f);
    TH_ASSERT(p, killed == 1);
}

/* A corrupted slot in a multi-node job with replicas (2 nodes x 1 rank, the collectives
 * helper's memspare 3, --max-restarts=1): rank 1's slot of step 3 has a byte flipped once
 * its replica is on node 0, then its worker is SIGKILLed -> node 1's launcher says the slot
 * fails its checksum, fetches rank 1's step 3 from node 0's replica, and both ranks load
 * step 3. Nothing is left in /dev/shm. */
static void test_corrupted_slot_replaced_by_the_replica(void **state)
{
    const char *memspare[] = {getenv("DDP_TEST_COLLECTIVES"), "memspare", "3", NULL};
    const char *env[] = {"DDP_CHECKPOINT_DIR", NULL};
    char dirs[2][1024], want[1200];
    job_t job;
    job_init(&job);
    th_proc_t *n0 = start_node_env(&job, 2, 0, 1, "--max-restarts=1", memspare, env);
    th_proc_t *n1 = start_node_env(&job, 2, 1, 1, "--max-restarts=1", memspare, env);
    saved_dir(n0, "memspare", 0, dirs[0], sizeof dirs[0]);
    saved_dir(n1, "memspare", 1, dirs[1], sizeof dirs[1]);
    wait_replica(n1, dirs[1], dirs[0], 1);
    int slot = corrupt_step_3(n1, dirs[1], 1);
    kill_worker(n1, "memspare");
    job_wait(&job, 60);
    TH_ASSERT(n0, th_status(n0) == 0);
    TH_ASSERT(n1, th_status(n1) == 0);
    snprintf(want, sizeof want,
             "rank 1's slot %d (%s/rank1.%d) is not counted: its data does "
             "not match its checksum (step 3",
             slot, dirs[1], slot);
    TH_ASSERT(n1, strstr(err(n1), want) != NULL);
    TH_ASSERT(n1, strstr(err(n1), "rank 1's step 3 fetched from node 0's replica") != NULL);
    TH_ASSERT(n0, strstr(out(n0), "memspare 0 loaded 3 (DDP_CHECKPOINT_STEP=3)\n") != NULL);
    TH_ASSERT(n1, strstr(out(n1), "memspare 1 loaded 3 (DDP_CHECKPOINT_STEP=3)\n") != NULL);
    assert_int_equal(checkpoint_dirs_left(&job), 0);
    job_cleanup(&job);
}

/* --checkpoint-dir across nodes (2 nodes x 1 rank, one directory for both, as a shared
 * file system is; the collectives helper's memspare 3): the job is stopped (SIGTERM) once
 * both ranks saved step 3 -> each node copies its rank's step 3 there; a fresh 2-node job
 * puts each node's rank's copy in place, agrees on step 3 across the nodes, and both ranks
 * load it (DDP_CHECKPOINT_STEP=3). Nothing is left in /dev/shm. */
static void test_checkpoint_dir_resumes_across_nodes(void **state)
{
    const char *memspare[] = {getenv("DDP_TEST_COLLECTIVES"), "memspare", "3", NULL};
    const char *env[] = {"DDP_CHECKPOINT_DIR", NULL};
    char *disk = th_shm_tmpdir(), flags[1200], want[1200];
    snprintf(flags, sizeof flags, "--checkpoint-dir=%s", disk);
    job_t job;
    job_init(&job);
    th_proc_t *n0 = start_node_env(&job, 2, 0, 1, flags, memspare, env);
    th_proc_t *n1 = start_node_env(&job, 2, 1, 1, flags, memspare, env);
    TH_ASSERT(n0, th_wait_output(n0, 1, "memspare 0 saved 3 dir ", 1, 60));
    TH_ASSERT(n1, th_wait_output(n1, 1, "memspare 1 saved 3 dir ", 1, 60));
    kill(n0->pid, SIGTERM);
    kill(n1->pid, SIGTERM);
    job_wait(&job, 60);
    assert_int_equal(checkpoint_dirs_left(&job), 0);
    job_cleanup(&job);
    job_init(&job);
    n0 = start_node_env(&job, 2, 0, 1, flags, memspare, env);
    n1 = start_node_env(&job, 2, 1, 1, flags, memspare, env);
    job_wait(&job, 60);
    for (int rank = 0; rank < 2; rank++) {
        th_proc_t *p = &job.node[rank];
        TH_ASSERT(p, th_status(p) == 0);
        snprintf(want, sizeof want, "rank %d starts from its step 3 (%s/rank%d.ckpt)", rank, disk,
                 rank);
        TH_ASSERT(p, strstr(err(p), want) != NULL);
        TH_ASSERT(p, strstr(err(p), "the workers resume from step 3, the newest every rank of "
                                    "the round's 2 nodes holds") != NULL);
        snprintf(want, sizeof want, "memspare %d loaded 3 (DDP_CHECKPOINT_STEP=3)\n", rank);
        TH_ASSERT(p, strstr(out(p), want) != NULL);
    }
    assert_int_equal(checkpoint_dirs_left(&job), 0);
    job_cleanup(&job);
    th_rmtree(disk);
    free(disk);
}

/* PyTorch (Debian's 1.13) with gloo across 2 nodes of 1 and 2 ranks. */
static void test_torch_gloo_across_nodes(void **state)
{
    const char *python = th_torch_python();
    char script[1024], python_exec[1100];
    if (python == NULL) {
        printf("no python with torch (apt-get install python3-torch): skipped\n");
        skip();
    }
    snprintf(script, sizeof script, "%s/tests/python/gloo_allreduce.py", th_source_dir());
    snprintf(python_exec, sizeof python_exec, "PYTHON_EXEC=%s", python);
    /* gloo binds the address of the host's name unless told the interface. */
    char ifname[2][64];
    for (int i = 0; i < 2; i++)
        snprintf(ifname[i], sizeof ifname[i], "GLOO_SOCKET_IFNAME=%s",
                 net.netns ? net.dev[i] : "lo");
    const char *program[] = {script, NULL}, *env0[] = {python_exec, ifname[0], NULL},
               *env1[] = {python_exec, ifname[1], NULL};
    job_t job;
    job_init(&job);
    th_proc_t *n0 = start_node_env(&job, 2, 0, 1, NULL, program, env0);
    th_proc_t *n1 = start_node_env(&job, 2, 1, 2, NULL, program, env1);
    job_wait(&job, 300);
    TH_ASSERT(n0, th_status(n0) == 0);
    TH_ASSERT(n1, th_status(n1) == 0);
    TH_ASSERT(n0, strstr(out(n0), "rank 0 of 3 sum 6") != NULL);
    TH_ASSERT(n1, strstr(out(n1), "rank 1 of 3 sum 6") != NULL);
    TH_ASSERT(n1, strstr(out(n1), "rank 2 of 3 sum 6") != NULL);
    job_cleanup(&job);
}

/* A two-node job of warm_plain.py show: the trigger `file` made, rank 1 fails; the job
 * ends well, and round 1's worker of each node was forked from its zygote. */
static void fail_and_fork(job_t *job, const char *file)
{
    TH_ASSERT(&job->node[1], th_touch(file));
    job_wait(job, 120);
    for (int i = 0; i < 2; i++) {
        th_proc_t *p = &job->node[i];
        TH_ASSERT(p, th_status(p) == 0);
        TH_ASSERT(p, strstr(err(p), "1 of 1 workers of attempt 1 forked from the zygote") != NULL);
        TH_ASSERT(p, strstr(err(p), "of attempt 1 starts cold") == NULL);
    }
}

/* --warm-restarts on both nodes: after rank 1 (node 1) fails, round 1's workers of both
 * nodes are forked from their node's zygote (each with its node's environment). */
static void test_warm_restart_across_nodes(void **state)
{
    const char *python = getenv("DDP_TEST_PYTHON");
    if (python == NULL || *python == '\0' || access(python, X_OK) != 0) {
        printf("no python3: skipped\n");
        skip();
    }
    char script[1024], python_exec[1100], trigger[1100];
    snprintf(script, sizeof script, "%s/tests/python/warm_plain.py", th_source_dir());
    snprintf(python_exec, sizeof python_exec, "PYTHON_EXEC=%s", python);
    const char *file = th_trigger_var(trigger, sizeof trigger);
    const char *program[] = {script, "show", NULL}, *env[] = {python_exec, trigger, NULL};
    const char *flags = "--max-restarts=1 --warm-restarts --preload=json --shutdown-timeout=5";
    job_t job;
    job_init(&job);
    th_proc_t *n0 = start_node_env(&job, 2, 0, 1, flags, program, env);
    th_proc_t *n1 = start_node_env(&job, 2, 1, 1, flags, program, env);
    TH_ASSERT(n0, th_wait_output(n0, 2, "has imported json", 1, 60));
    TH_ASSERT(n1, th_wait_output(n1, 2, "has imported json", 1, 60));
    fail_and_fork(&job, file);
    TH_ASSERT(n0, strstr(out(n0), "SHOW rank 0 ") != NULL);
    TH_ASSERT(n1, strstr(out(n1), "SHOW rank 1 ") != NULL);
    job_cleanup(&job);
}

/* --warm-restarts with --hot-spares: each launcher starts its zygote as it joins, before it
 * has node 0's --env values (here node 1 gives none); once its first round gives them, a
 * zygote whose environment is not the workers' is started again with theirs, and round
 * 1's workers of both nodes are forked from their zygotes (node 1's went cold: "its
 * WARM_JOB differs from the zygote's"). */
static void test_zygote_at_join_gets_the_job_env(void **state)
{
    const char *python = getenv("DDP_TEST_PYTHON");
    if (python == NULL || *python == '\0' || access(python, X_OK) != 0)
        skip();
    char script[1024], python_exec[1100], trigger[1100], elastic[256], flags[2][512];
    snprintf(script, sizeof script, "%s/tests/python/warm_plain.py", th_source_dir());
    snprintf(python_exec, sizeof python_exec, "PYTHON_EXEC=%s", python);
    const char *file = th_trigger_var(trigger, sizeof trigger);
    const char *program[] = {script, "show", NULL}, *env[] = {python_exec, trigger, NULL};
    job_t job;
    job_init(&job);
    elastic_flags(&job, "2:2", 1, 60, elastic, sizeof elastic);
    for (int i = 0; i < 2; i++)
        snprintf(flags[i], sizeof flags[i],
                 "%s --hot-spares=1 --max-restarts=1 --warm-restarts --preload=json "
                 "--shutdown-timeout=5%s",
                 elastic, i == 0 ? " --env=WARM_JOB=node0" : "");
    th_proc_t *n0 = start_node_env(&job, 0, 0, 1, flags[0], program, env);
    TH_ASSERT(n0, th_wait_output(n0, 2, "hosting its store", 1, 30));
    th_proc_t *n1 = start_node_env(&job, 0, 0, 1, flags[1], program, env);
    TH_ASSERT(n1, th_wait_output(n1, 2, "its WARM_JOB differs from the zygote's): starting another",
                                 1, 60));
    /* The second zygote's import: what the first said of its own came before. */
    char *before = strndup(err(n1), (size_t)(strstr(err(n1), "starting another") - err(n1)));
    int first = th_count(before, "has imported json");
    free(before);
    TH_ASSERT(n1, th_wait_output(n1, 2, "has imported json", first + 1, 60));
    TH_ASSERT(n0, th_wait_output(n0, 2, "has imported json", 1, 60));
    fail_and_fork(&job, file);
    TH_ASSERT(n0, strstr(err(n0), "starting another") == NULL);
    job_cleanup(&job);
}

/* A hang across 2 nodes of 2 ranks (rank 3 never enters all_reduce #5): under
 * --hang-timeout one node gathers every node's rows through the store and prints the
 * job's report before any worker is stopped; the other says its ranks are in it. The job
 * ends with the failure report of the store's node, whose root cause is rank 3 (node 1's
 * rank not waiting in a collective; there was none). */
static void test_hang_report_across_nodes(void **state)
{
    const char *skip[] = {getenv("DDP_TEST_COLLECTIVES"), "skip", "3", "5", NULL};
    const char *env[] = {"DDP_TIMEOUT=300", NULL};
    job_t job;
    job_init(&job);
    th_proc_t *n0 = start_node_env(&job, 2, 0, 2, "--hang-timeout=3", skip, env);
    th_proc_t *n1 = start_node_env(&job, 2, 1, 2, "--hang-timeout=3", skip, env);
    job_wait(&job, 120);
    TH_ASSERT(n0, th_status(n0) == 1);
    TH_ASSERT(n1, th_status(n1) == 1);
    const char *verdict = "verdict: rank 3 never entered all_reduce #5; ranks 0-2 wait in it";
    const char *in_it = "this node's ranks are in the hang report";
    th_proc_t *reporter = strstr(err(n0), verdict) ? n0 : n1, *other = reporter == n0 ? n1 : n0;
    const char *said = strstr(err(reporter), verdict), *stop = strstr(err(reporter), "SIGTERM");
    TH_ASSERT(reporter, said != NULL && stop != NULL && said < stop);
    TH_ASSERT(reporter, th_count(err(reporter), "all_reduce #4 of 1000 float32 (sum)") == 4);
    TH_ASSERT(other, strstr(err(other), verdict) == NULL);
    const char *told = strstr(err(other), in_it), *stopped = strstr(err(other), "SIGTERM");
    TH_ASSERT(other, told != NULL && stopped != NULL && told < stopped);
    const char *root = strstr(err(n0), "Root Cause (first observed failure):");
    TH_ASSERT(n0, root != NULL && strstr(root, "rank      : 3 (local_rank: 1)") != NULL);
    TH_ASSERT(n0, strstr(root, "the job hung") != NULL);
    job_cleanup(&job);
}

/* A slow rank on node 1: the launcher serving the store (node 0) names it, with its node,
 * from the rows node 1 posts; node 1 prints no report of its own. */
static void test_straggler_on_another_node(void **state)
{
    const char *slow[] = {getenv("DDP_TEST_COLLECTIVES"), "slow", "150", "10", "3", NULL};
    job_t job;
    job_init(&job);
    th_proc_t *n0 = start_node(&job, 2, 0, 2, "--straggler-report=2", slow);
    th_proc_t *n1 = start_node(&job, 2, 1, 2, "--straggler-report=2", slow);
    job_wait(&job, 120);
    TH_ASSERT(n0, th_status(n0) == 0);
    TH_ASSERT(n1, th_status(n1) == 0);
    TH_ASSERT(n0, strstr(err(n0), "straggler: rank 3 (node 1 on ") != NULL);
    /* Who the collectives waited for, across the nodes: rank 3, nearly always. */
    const char *waited = strstr(err(n0), "the collectives waited for it ");
    int percent = 0;
    TH_ASSERT(n0, waited != NULL &&
                      sscanf(waited, "the collectives waited for it %d%%", &percent) == 1);
    TH_ASSERT(n0, percent >= 50);
    for (int r = 0; r < 3; r++) {
        char line[64];
        snprintf(line, sizeof line, "straggler: rank %d ", r);
        TH_ASSERT(n0, strstr(err(n0), line) == NULL);
    }
    TH_ASSERT(n1, strstr(err(n1), "straggler:") == NULL);
    job_cleanup(&job);
}

/* The node rank a launcher holds ("this is node R" in its lines), or -1. */
static int node_rank_of(th_proc_t *p)
{
    const char *at = strstr(err(p), "this is node ");
    return at != NULL ? atoi(at + strlen("this is node ")) : -1;
}

/* --nnodes=3:4 --hot-spares=2: two losses in a row are made up by the two spares, each
 * holding the lost node's rank; a third, with no spare left, shrinks the job to 3 by the
 * elastic rules; the three that end it hold ranks 0-2 of a world of 3. */
static void test_both_spares_then_elastic_rules(void **state)
{
    char *dir = th_tmpdir(), script[1400], flags[512], elastic[256];
    snprintf(script, sizeof script,
             "echo \"ready $GROUP_WORLD_SIZE\"; while [ ! -e '%s/go' ]; do sleep 0.1; done; "
             "echo \"GROUP_RANK=$GROUP_RANK GROUP_WORLD_SIZE=$GROUP_WORLD_SIZE\"",
             dir);
    const char *workers[] = {"/bin/sh", "-c", script, NULL};
    const char *debug[] = {"DDP_LAUNCH_LOG_LEVEL=debug", NULL};
    job_t job;
    job_init(&job);
    elastic_flags(&job, "3:4", 1, 60, elastic, sizeof elastic);
    snprintf(flags, sizeof flags, "%s --hot-spares=2", elastic);
    th_proc_t *host = start_node(&job, 0, 0, 1, flags, workers);
    TH_ASSERT(host, th_wait_output(host, 2, "hosting its store", 1, 30));
    for (int i = 1; i < 4; i++)
        start_node(&job, 0, 0, 1, flags, workers);
    for (int i = 0; i < 4; i++)
        TH_ASSERT(&job.node[i], th_wait_output(&job.node[i], 1, "ready 4", 1, 30));
    th_proc_t *spares[2];
    for (int k = 0; k < 2; k++) {
        spares[k] = start_node_env(&job, 0, 0, 1, flags, workers, debug);
        TH_ASSERT(spares[k], th_wait_output(spares[k], 2, "waiting for a place in a round", 1, 30));
    }
    /* Two losses: each taken up by a spare, with the lost node's rank. */
    for (int loss = 1; loss <= 2; loss++) {
        int rank = node_rank_of(&job.node[loss]);
        TH_ASSERT(&job.node[loss], rank >= 0);
        assert_int_equal(kill(job.node[loss].pid, SIGKILL), 0);
        char took[96];
        snprintf(took, sizeof took, "waited as a hot spare: it takes node rank %d", rank);
        double deadline = th_now() + 60;
        th_proc_t *promoted = NULL;
        while (promoted == NULL && th_now() < deadline) {
            for (int k = 0; k < 2 && promoted == NULL; k++)
                if (th_wait_output(spares[k], 2, took, 1, 0.05))
                    promoted = spares[k];
        }
        if (promoted == NULL) {
            printf("loss %d (rank %d): no spare took it\n", loss, rank);
            for (int k = 0; k < 6; k++)
                printf("-- launcher %d:\n%s\n", k, err(&job.node[k]));
            fail_msg("loss %d: no spare took it", loss);
        }
        TH_ASSERT(promoted, th_wait_output(promoted, 1, "ready 4", 1, 30));
        th_wait_exit(&job.node[loss], 10);
    }
    /* A third, no spare left: the job goes on with 3 (3:4). */
    assert_int_equal(kill(job.node[3].pid, SIGKILL), 0);
    th_proc_t *left[3] = {host, spares[0], spares[1]};
    for (int k = 0; k < 3; k++)
        TH_ASSERT(left[k], th_wait_output(left[k], 1, "ready 3", 1, 60));
    char go[700];
    snprintf(go, sizeof go, "%s/go", dir);
    FILE *f = fopen(go, "w");
    assert_non_null(f);
    fclose(f);
    bool seen[3] = {false, false, false};
    for (int k = 0; k < 3; k++) {
        TH_ASSERT(left[k], th_wait_exit(left[k], 60));
        TH_ASSERT(left[k], th_status(left[k]) == 0);
        const char *at = strstr(out(left[k]), "GROUP_RANK=");
        int rank = at != NULL ? atoi(at + strlen("GROUP_RANK=")) : -1;
        TH_ASSERT(left[k],
                  rank >= 0 && rank < 3 && !seen[rank] && strstr(at, "GROUP_WORLD_SIZE=3") != NULL);
        seen[rank] = true;
    }
    th_wait_exit(&job.node[3], 10);
    job_cleanup(&job);
    th_rmtree(dir);
    free(dir);
}

/* --straggler-action=exclude, elastic 1:2: node 1's rank is slow and named; when rank 0
 * fails (once), node 1 leaves the job at the restart (5, node_excluded) and node 0 goes on
 * alone and succeeds. */
static void test_straggler_node_excluded_at_restart(void **state)
{
    /* (c10d assigns node ranks: node B's rank, whichever it is, is the slow one.) */
    const char *fast[] = {getenv("DDP_TEST_COLLECTIVES"), "slow", "150", "10", "-", "100", NULL};
    const char *slow[] = {getenv("DDP_TEST_COLLECTIVES"), "slow", "150", "10", "0,1", "100", NULL};
    char flags[512], conf[256];
    job_t job;
    job_init(&job);
    elastic_flags(&job, "1:2", 1, 60, conf, sizeof conf);
    snprintf(flags, sizeof flags,
             "%s --max-restarts=1 --straggler-report=1 --straggler-action=exclude", conf);
    th_proc_t *a = start_node(&job, 0, 0, 1, flags, fast);
    TH_ASSERT(a, th_wait_output(a, 2, "joining the elastic job", 1, 30));
    th_proc_t *b = start_node(&job, 0, 1, 1, flags, slow);
    job_wait(&job, 120);
    TH_ASSERT(a, th_status(a) == 0);
    TH_ASSERT(a, strstr(err(a), "straggler: rank ") != NULL);
    TH_ASSERT(a, strstr(out(a), "slow: rank 0 of 1 finished 150 steps") != NULL);
    TH_ASSERT(b, th_status(b) == 5);
    TH_ASSERT(b, strstr(err(b), "was named a straggler (--straggler-action=exclude): it leaves") !=
                     NULL);
    job_cleanup(&job);
}

/* --straggler-action=exclude, static 2 nodes: the straggler is node 0's rank, and node 0
 * serves the store: it stays, at the restart (rank 0 fails once) and in every report
 * before and after it (they said "its node leaves the job at the next restart"). */
static void test_straggler_on_the_store_host_stays(void **state)
{
    const char *slow[] = {getenv("DDP_TEST_COLLECTIVES"), "slow", "50", "10", "0", "30", NULL};
    const char *flags = "--max-restarts=1 --straggler-report=1 --straggler-action=exclude";
    job_t job;
    job_init(&job);
    th_proc_t *n0 = start_node(&job, 2, 0, 1, flags, slow);
    th_proc_t *n1 = start_node(&job, 2, 1, 1, flags, slow);
    job_wait(&job, 120);
    TH_ASSERT(n0, th_status(n0) == 0);
    TH_ASSERT(n1, th_status(n1) == 0);
    TH_ASSERT(n0, strstr(err(n0), "straggler: rank 0 (node 0 on ") != NULL);
    TH_ASSERT(n0, strstr(err(n0), "serves the job's store: it stays") != NULL);
    TH_ASSERT(n0, strstr(err(n0), "leaves the job") == NULL);
    TH_ASSERT(n0, strstr(out(n0), "slow: rank 0 of 2 finished 50 steps") != NULL);
    job_cleanup(&job);
}

/* An argument runs only the tests whose names match it (a glob). */
int main(int argc, char **argv)
{
    if (argc > 1)
        cmocka_set_test_filter(argv[1]);
    const struct CMUnitTest tests[] = {
        TH_TEST(test_nodes_form_one_job),
        TH_TEST(test_warm_restart_across_nodes),
        TH_TEST(test_zygote_at_join_gets_the_job_env),
        TH_TEST(test_hang_report_across_nodes),
        TH_TEST(test_straggler_on_another_node),
        TH_TEST(test_straggler_node_excluded_at_restart),
        TH_TEST(test_straggler_on_the_store_host_stays),
        TH_TEST(test_failure_restarts_every_node),
        TH_TEST(test_failure_without_restarts_ends_every_node),
        TH_TEST(test_ranks_left_early_named),
        TH_TEST(test_failures_on_two_nodes_one_report),
        TH_TEST(test_unhealthy_node_ends_the_job),
        TH_TEST(test_no_progress_ends_every_node),
        TH_TEST(test_hot_spare_takes_a_lost_nodes_place),
        TH_TEST(test_spare_with_other_nproc_refused),
        TH_TEST(test_hot_spare_forks_from_a_ready_zygote),
        TH_TEST(test_launchers_waits_not_named),
        TH_TEST(test_remote_wait_named),
        TH_TEST(test_bad_nodes_replaced_by_spares),
        TH_TEST(test_both_spares_then_elastic_rules),
        TH_TEST(test_node_that_never_joins),
        TH_TEST(test_store_unreachable),
        TH_TEST(test_node0_on_the_wrong_machine),
        TH_TEST(test_mismatched_nnodes),
        TH_TEST(test_stranger_refused_job_untouched),
        TH_TEST(test_stray_with_other_flags_refused_alone),
        TH_TEST(test_stopped_store_host_named),
        TH_TEST(test_store_host_stopped_after_a_join_named),
        TH_TEST(test_port_held_by_another_program),
        TH_TEST(test_other_rdzv_id_named_on_both_sides),
        TH_TEST(test_node_loss_noticed),
        TH_TEST(test_node_loss_without_restarts_is_5),
        TH_TEST(test_node_loss_in_a_slurm_step_ends_the_job),
        TH_TEST(test_lost_node_returns),
        TH_TEST(test_store_host_lost),
        TH_TEST(test_ctrl_z_on_the_store_host_stops_every_node),
        TH_TEST(test_ctrl_z_with_a_hot_spare_waiting),
        TH_TEST(test_ctrl_z_on_another_node_stops_every_node),
        TH_TEST(test_ctrl_z_on_two_nodes_holds_until_both_continue),
        TH_TEST(test_continue_before_the_store_host_stops),
        TH_TEST(test_slow_node_reads_the_end),
        TH_TEST(test_silent_node_not_waited_for),
        TH_TEST(test_signal_between_rounds_on_the_host),
        TH_TEST(test_signal_on_every_node_while_the_host_lingers),
        TH_TEST(test_second_signal_ends_the_hosts_wait),
        TH_TEST(test_elastic_closes_when_full),
        TH_TEST(test_elastic_late_joiner),
        TH_TEST(test_elastic_reforms_without_a_lost_node),
        TH_TEST(test_elastic_too_few_nodes),
        TH_TEST(test_env_of_node0_everywhere),
        TH_TEST(test_same_env_command_on_every_node),
        TH_TEST(test_environment_difference_warned),
        TH_TEST(test_environment_difference_strict),
        TH_TEST(test_libddp_across_nodes),
        TH_TEST(test_checkpoint_step_agreed_across_nodes),
        TH_TEST(test_checkpoints_replicated_to_the_next_node),
        TH_TEST(test_spare_resumes_from_the_replica),
        TH_TEST(test_failed_fetch_leaves_every_step_unset),
        TH_TEST(test_corrupted_slot_replaced_by_the_replica),
        TH_TEST(test_checkpoint_dir_resumes_across_nodes),
        TH_TEST(test_torch_gloo_across_nodes),
    };
    return cmocka_run_group_tests(tests, net_setup, net_teardown);
}
