/* One command starts every node over ssh (--hosts, --hostfile): three nodes, each a
 * network namespace with its own hostname and a real sshd (Debian's openssh-server) that
 * tests/support/cluster brings up with keys it makes, and removes after the tests. The
 * launcher runs as node 0 (n0). Skipped (77) where namespaces or sshd are missing. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "harness.h"

#include <dirent.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define NODES 3

static th_cluster_t cluster;
static char ssh_command[800]; /* DDP_LAUNCH_SSH=ssh -F <the cluster's config> */

static int cluster_up(void **state)
{
    (void)state;
    th_cluster_up(&cluster, "ssh", NODES);
    snprintf(ssh_command, sizeof ssh_command, "DDP_LAUNCH_SSH=ssh -F %s",
             strchr(cluster.config, '=') + 1);
    return 0;
}

static int cluster_down(void **state)
{
    (void)state;
    th_cluster_down(&cluster);
    return 0;
}

/* Starts `ddp-launch ARGS...` (at most 12) on node 0 with the cluster's ssh command. */
static void start_on_node0(th_proc_t *p, const char *const *args)
{
    const char *argv[24] = {cluster.script, "run", cluster.dir, "0", th_launcher()};
    for (int i = 0; i < 12 && args[i] != NULL; i++)
        argv[5 + i] = args[i];
    const char *env[] = {ssh_command, "PET_MASTER_PORT", "PYTHON_EXEC=/usr/bin/python3", NULL};
    th_start(p, argv, env);
}

/* The processes left in node i's namespace, sshd aside. */
static int left_on_node(int i)
{
    char cmd[700], out[4096], pid_path[600];
    snprintf(pid_path, sizeof pid_path, "%s/sshd-n%d.pid", cluster.dir, i);
    snprintf(cmd, sizeof cmd, "ip netns pids dds%sn%d | grep -vx \"$(cat '%s')\" | wc -l",
             cluster.tag, i, pid_path);
    FILE *f = popen(cmd, "r");
    assert_non_null(f);
    size_t len = fread(out, 1, sizeof out - 1, f);
    out[len] = '\0';
    pclose(f);
    return atoi(out);
}

/* Polls (every 50 ms, up to 10 s) until nodes 1.. have nothing left but their sshd. */
static bool remote_nodes_empty(void)
{
    double deadline = th_now() + 10;
    for (;;) {
        int left = 0;
        for (int i = 1; i < NODES; i++)
            left += left_on_node(i);
        if (left == 0 || th_now() >= deadline)
            return left == 0;
        struct timespec tick = {0, 50 * 1000 * 1000};
        nanosleep(&tick, NULL);
    }
}

/* `ddp-launch ARGS...` on node 0 (3 nodes of ddp-hello, 2 ranks each) ended 0, every rank
 * of 6 saying hello (on node r / 2 where `ranks_by_host`: node ranks in host order);
 * its output in *out and *err. */
static void every_rank_said_hello(th_proc_t *p, const char *const *args, bool ranks_by_host,
                                  const char **out, const char **err)
{
    start_on_node0(p, args);
    TH_ASSERT(p, th_wait_exit(p, 120));
    *out = ddp_buf_str(&p->out);
    *err = ddp_buf_str(&p->err);
    TH_ASSERT(p, th_status(p) == 0);
    for (int r = 0; r < 6; r++) {
        char line[96];
        int n = snprintf(line, sizeof line, "hello from rank %d of 6 (local rank %d of 2 on n", r,
                         r % 2);
        if (ranks_by_host)
            snprintf(line + n, sizeof line - (size_t)n, "%d,", r / 2);
        TH_ASSERT(p, strstr(*out, line) != NULL);
    }
}

static void test_hosts_start_every_node(void **state)
{
    const char *args[] = {"--hosts=n[0-2]", "--nproc-per-node=2", "--no-python",
                          getenv("DDP_TEST_HELLO"), NULL};
    th_proc_t p;
    const char *out, *err;
    every_rank_said_hello(&p, args, true, &out, &err);
    TH_ASSERT(&p, strstr(err, "node 1 (n1): started over ssh") != NULL);
    TH_ASSERT(&p, strstr(err, "node 2 (n2): started over ssh") != NULL);
    th_cleanup(&p);
    assert_true(remote_nodes_empty());
}

/* A hostfile's slots are each node's workers (slots=N, or HOST:N); a host may name its ssh
 * user, which the store's address leaves out; --dry-run shows each node's command. */
static void test_hostfile_slots_and_dry_run(void **state)
{
    char *dir = th_tmpdir(), path[600], flag[620];
    snprintf(path, sizeof path, "%s/hostfile", dir);
    snprintf(flag, sizeof flag, "--hostfile=%s", path);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("# two nodes\nroot@n0 slots=1\n\nroot@n2:2   # the second\n", f);
    fclose(f);
    const char *dry[] = {flag, "--dry-run", "--no-python", getenv("DDP_TEST_HELLO"), "a b", NULL};
    th_proc_t p;
    start_on_node0(&p, dry);
    TH_ASSERT(&p, th_wait_exit(&p, 60));
    const char *out = ddp_buf_str(&p.out);
    TH_ASSERT(&p, th_status(&p) == 0);
    TH_ASSERT(&p, strstr(out, "node 0 (root@n0, here): ") != NULL);
    TH_ASSERT(&p, strstr(out, "node 1 (root@n2): ssh -F ") != NULL);
    TH_ASSERT(&p, strstr(out, " -o BatchMode=yes root@n2 'cd ") != NULL);
    TH_ASSERT(&p, strstr(out, "--nnodes=2 --node-rank=1 --master-addr=n0 --master-port=29500 "
                              "--nproc-per-node=2 --no-python") != NULL);
    TH_ASSERT(&p, strstr(out, "--hostfile") == NULL);
    th_cleanup(&p);
    const char *run[] = {flag, "--no-python", getenv("DDP_TEST_HELLO"), NULL};
    start_on_node0(&p, run);
    TH_ASSERT(&p, th_wait_exit(&p, 120));
    out = ddp_buf_str(&p.out);
    TH_ASSERT(&p, th_status(&p) == 0);
    TH_ASSERT(&p, strstr(out, "hello from rank 0 of 3 (local rank 0 of 1 on n0,") != NULL);
    TH_ASSERT(&p, strstr(out, "hello from rank 2 of 3 (local rank 1 of 2 on n2,") != NULL);
    th_cleanup(&p);
    th_rmtree(dir);
    free(dir);
}

/* --env NAME: node 0's value reaches the workers of every node (the other nodes' sshd
 * sessions do not have it); --env NAME=VALUE as given. */
static void test_env_reaches_every_node(void **state)
{
    const char *argv[] = {
        cluster.script,
        "run",
        cluster.dir,
        "0",
        "/usr/bin/env",
        "DDP_TEST_FROM_NODE0=node 0's value",
        th_launcher(),
        "--hosts=n0,n1,n2",
        "--env",
        "DDP_TEST_FROM_NODE0",
        "--env=DDP_TEST_GIVEN=a=b",
        "--no-python",
        "/bin/sh",
        "-c",
        "echo \"rank $RANK on $(hostname): $DDP_TEST_FROM_NODE0/$DDP_TEST_GIVEN\"",
        NULL};
    const char *env[] = {ssh_command, "PET_MASTER_PORT", NULL};
    th_proc_t p;
    th_start(&p, argv, env);
    TH_ASSERT(&p, th_wait_exit(&p, 120));
    const char *out = ddp_buf_str(&p.out);
    TH_ASSERT(&p, th_status(&p) == 0);
    for (int r = 0; r < 3; r++) {
        char line[128];
        snprintf(line, sizeof line, "rank %d on n%d: node 0's value/a=b\n", r, r);
        TH_ASSERT(&p, strstr(out, line) != NULL);
    }
    th_cleanup(&p);
}

/* Node 0's own name is its loopback there (Debian's /etc/hosts: "127.0.1.1 n0"), its real
 * address everywhere else: the store listens on every interface, so node 1 reaches it
 * (it listened on 127.0.1.1 alone, and node 1 waited out the rendezvous timeout), as
 * torchrun's does; libddp's ring offers node 1 the interface's address (it offered
 * 127.0.1.1, and the ring hung). Both launchers started by hand (no ssh), in c10d and
 * static form. */
static void test_own_name_on_loopback(void **state)
{
    static const char *const backends[][3] = {
        {"--master-addr=n0", "--master-port=29513", "--rdzv-backend=static"},
        {"--rdzv-endpoint=n0:29514", "--rdzv-backend=c10d", "--rdzv-id=loopback"}};
    char *dir = th_tmpdir(), hosts[600];
    snprintf(hosts, sizeof hosts, "%s/hosts-n0", dir);
    for (int b = 0; b < 2; b++) {
        th_proc_t p[2];
        for (int node = 0; node < 2; node++) {
            char rank[32];
            snprintf(rank, sizeof rank, "--node-rank=%d", node);
            const char *argv[] = {cluster.script,
                                  "run",
                                  cluster.dir,
                                  node == 0 ? "0" : "1",
                                  "/bin/sh",
                                  "-c",
                                  node == 0 ? "sed 's/.* n0$/127.0.1.1 n0/' /etc/hosts > \"$0\" && "
                                              "mount --bind \"$0\" /etc/hosts && exec \"$@\""
                                            : "exec \"$@\"",
                                  hosts,
                                  th_launcher(),
                                  "--nnodes=2",
                                  rank,
                                  backends[b][0],
                                  backends[b][1],
                                  backends[b][2],
                                  "--rdzv-conf=timeout=30,join_timeout=30",
                                  "--no-python",
                                  getenv("DDP_TEST_HELLO"),
                                  NULL};
            const char *env[] = {"PET_MASTER_PORT", NULL};
            th_start(&p[node], argv, env);
        }
        for (int node = 0; node < 2; node++) {
            TH_ASSERT(&p[node], th_wait_exit(&p[node], 90));
            TH_ASSERT(&p[node], th_status(&p[node]) == 0);
        }
        TH_ASSERT(&p[0], strstr(ddp_buf_str(&p[0].err),
                                "n0 is this machine's loopback here (127.0.1.1, as /etc/hosts "
                                "says), not an address other nodes reach: the store listens on "
                                "every interface") != NULL);
        /* libddp's rank there (0, or 1 as c10d may order them) offers the other node its
         * interface's address, not 127.0.1.1. */
        static const char reach[] = "); the other machines' ranks reach this one at ";
        const char *offered = strstr(ddp_buf_str(&p[0].err), ": MASTER_ADDR n0 is loopback here "
                                                             "(127.");
        offered = offered != NULL ? strstr(offered, reach) : NULL;
        TH_ASSERT(&p[0], offered != NULL && strncmp(offered + strlen(reach), "127.", 4) != 0 &&
                             offered[strlen(reach)] != '\n');
        TH_ASSERT(&p[1], strstr(ddp_buf_str(&p[1].out), " of 2 (local rank 0 of 1 on n1,") != NULL);
        TH_ASSERT(&p[0], strstr(ddp_buf_str(&p[0].out), " of 2 (local rank 0 of 1 on n0,") != NULL);
        th_cleanup(&p[0]);
        th_cleanup(&p[1]);
    }
    th_rmtree(dir);
    free(dir);
}

/* Python workers would use torch's gloo, which offers the machine's name's address
 * (127.0.1.1 on node 0, as above): the launcher says so, and which interface to name in
 * GLOO_SOCKET_IFNAME. */
static void test_gloo_warned_of_a_loopback_name(void **state)
{
    char *dir = th_tmpdir(), hosts[600], script[600];
    snprintf(hosts, sizeof hosts, "%s/hosts-n0", dir);
    snprintf(script, sizeof script, "%s/tests/python/warm_restart.py", th_source_dir());
    const char *dry[] = {cluster.script,
                         "run",
                         cluster.dir,
                         "0",
                         "/bin/sh",
                         "-c",
                         "sed 's/.* n0$/127.0.1.1 n0/' /etc/hosts > \"$0\" && "
                         "mount --bind \"$0\" /etc/hosts && exec \"$@\"",
                         hosts,
                         th_launcher(),
                         "--nnodes=2",
                         "--master-addr=n1",
                         "--dry-run",
                         script,
                         NULL};
    th_proc_t p;
    th_start(&p, dry, (const char *const[]){"PET_MASTER_PORT", "GLOO_SOCKET_IFNAME", NULL});
    TH_ASSERT(&p, th_wait_exit(&p, 60));
    TH_ASSERT(&p, th_status(&p) == 0);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err),
                         "warning: this machine's name n0 resolves to 127.0.1.1 alone here "
                         "(/etc/hosts): torch's gloo backend would offer that address") != NULL);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "set GLOO_SOCKET_IFNAME=dds") != NULL);
    th_cleanup(&p);
    th_rmtree(dir);
    free(dir);
}

/* A host ssh cannot reach: said at once, and the job ends (status 5) instead of waiting
 * the rendezvous timeout for it. */
static void test_unreachable_host_ends_the_job(void **state)
{
    const char *args[] = {"--hosts=n0,n1,nowhere", "--no-python", "/bin/sleep", "100", NULL};
    th_proc_t p;
    start_on_node0(&p, args);
    TH_ASSERT(&p, th_wait_exit(&p, 60));
    const char *err = ddp_buf_str(&p.err);
    TH_ASSERT(&p, th_status(&p) == 5);
    TH_ASSERT(&p, strstr(err, "node 2 (nowhere): its ssh ended with status 255") != NULL);
    TH_ASSERT(&p, strstr(err, "a node of the job is not running: ending the job") != NULL);
    th_cleanup(&p);
    assert_true(remote_nodes_empty());
}

/* A node whose shell finds no ddp-launch at this one's path (installed elsewhere there, a
 * venv on a disk of this host only): said with why (status 127), and the job ends. Here
 * node 0's launcher is a copy on a tmpfs of node 0's own mount namespace. */
static void test_launcher_missing_on_a_node(void **state)
{
    char *dir = th_tmpdir(), script[1400];
    snprintf(script, sizeof script,
             "mount -t tmpfs none '%s' && cp \"$0\" '%s/ddp-launch' && exec '%s/ddp-launch' \"$@\"",
             dir, dir, dir);
    const char *argv[] = {cluster.script,  "run",         cluster.dir,  "0",    "/usr/bin/unshare",
                          "--mount",       "/bin/sh",     "-c",         script, th_launcher(),
                          "--hosts=n0,n1", "--no-python", "/bin/sleep", "100",  NULL};
    const char *env[] = {ssh_command, "PET_MASTER_PORT", NULL};
    th_proc_t p;
    th_start(&p, argv, env);
    TH_ASSERT(&p, th_wait_exit(&p, 60));
    TH_ASSERT(&p, th_status(&p) == 5);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err),
                         "node 1 (n1): its ssh ended with status 127 while the job runs (its "
                         "shell found no ddp-launch at this one's path") != NULL);
    th_cleanup(&p);
    assert_true(remote_nodes_empty());
    th_rmtree(dir);
    free(dir);
}

/* A worker failing on another node fails the job (status 1), every node ends. */
static void test_remote_failure_is_the_jobs(void **state)
{
    const char *args[] = {"--hosts=n0,n1,n2",
                          "--no-python",
                          "/bin/sh",
                          "-c",
                          "if [ \"$RANK\" = 2 ]; then exit 3; fi; sleep 100",
                          NULL};
    th_proc_t p;
    start_on_node0(&p, args);
    TH_ASSERT(&p, th_wait_exit(&p, 60));
    TH_ASSERT(&p, th_status(&p) == 1);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "exited with code 3") != NULL);
    th_cleanup(&p);
    assert_true(remote_nodes_empty());
}

/* Node 0 fails at start (its store's port is held on n0): the command ends with node 0's
 * status within seconds, and the other nodes' launchers, waiting for a store that will
 * never come, end with their ssh sessions instead of waiting out the 900 s timeout (they
 * were left running after their ssh had been killed 30 s later). */
static void test_node0_failing_at_start_ends_every_node(void **state)
{
    const char *holder[] = {cluster.script,
                            "run",
                            cluster.dir,
                            "0",
                            "/usr/bin/python3",
                            "-c",
                            "import socket, time\n"
                            "s = socket.socket()\n"
                            "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
                            "s.bind(('0.0.0.0', 29511))\n"
                            "s.listen()\n"
                            "print('holding', flush=True)\n"
                            "time.sleep(120)\n",
                            NULL};
    th_proc_t hold, p;
    th_start(&hold, holder, NULL);
    TH_ASSERT(&hold, th_wait_output(&hold, 1, "holding", 1, 30));
    const char *args[] = {"--hosts=n0,n1,n2", "--master-port=29511", "--no-python", "/bin/true",
                          NULL};
    double started = th_now();
    start_on_node0(&p, args);
    TH_ASSERT(&p, th_wait_exit(&p, 60));
    double took = th_now() - started;
    kill(hold.pid, SIGKILL);
    th_cleanup(&hold);
    const char *err = ddp_buf_str(&p.err);
    if (th_status(&p) != 4 || took > 25 || strstr(err, "port 29511 on n0 is in use") == NULL ||
        th_count(err, "the ssh session that started this node has ended") != 2)
        fail_msg("status %d after %.0f s:\n%s", th_status(&p), took, err);
    th_cleanup(&p);
    assert_true(remote_nodes_empty());
}

/* DDP_LAUNCH_SSH with -n (the nodes' input closed at once): the job still runs; each
 * other node says it cannot end with its session. */
static void test_ssh_without_input_still_runs(void **state)
{
    char command[900];
    snprintf(command, sizeof command, "DDP_LAUNCH_SSH=ssh -n -F %s",
             strchr(cluster.config, '=') + 1);
    const char *argv[] = {cluster.script,
                          "run",
                          cluster.dir,
                          "0",
                          th_launcher(),
                          "--hosts=n0,n1,n2",
                          "--no-python",
                          "/bin/sh",
                          "-c",
                          "sleep 3; echo done $RANK",
                          NULL};
    const char *env[] = {command, "PET_MASTER_PORT", NULL};
    th_proc_t p;
    th_start(&p, argv, env);
    TH_ASSERT(&p, th_wait_exit(&p, 120));
    TH_ASSERT(&p, th_status(&p) == 0);
    TH_ASSERT(&p, th_count(ddp_buf_str(&p.out), "done ") == 3);
    TH_ASSERT(&p,
              th_count(ddp_buf_str(&p.err), "ended at once: the command does not pass it") == 2);
    th_cleanup(&p);
    assert_true(remote_nodes_empty());
}

/* A job of three nodes whose workers wait, every one of them started. */
static void start_waiting_job(th_proc_t *p)
{
    const char *args[] = {"--hosts=n0,n1,n2",
                          "--no-python",
                          "/bin/sh",
                          "-c",
                          "echo ready $RANK; exec sleep 100",
                          NULL};
    start_on_node0(p, args);
    TH_ASSERT(p, th_wait_output(p, 1, "ready ", 3, 60));
}

/* Ctrl-C (SIGINT to the command) ends the job on every node with 130, nothing left. */
static void test_interrupt_ends_every_node(void **state)
{
    th_proc_t p;
    start_waiting_job(&p);
    TH_ASSERT(&p, kill(p.pid, SIGINT) == 0);
    TH_ASSERT(&p, th_wait_exit(&p, 60));
    TH_ASSERT(&p, th_status(&p) == 130);
    th_cleanup(&p);
    assert_true(remote_nodes_empty());
}

/* SIGKILL of the ddp-launch the user started (the supervisor of the ssh sessions, whose
 * forked child is node 0's launcher): the job still ends on every node, nothing left in
 * any namespace (node 0's launcher, its workers, the ssh sessions and what they started
 * were seen running 35 s later). */
static void test_sigkill_of_the_command_ends_every_node(void **state)
{
    th_proc_t p;
    start_waiting_job(&p);
    TH_ASSERT(&p, kill(p.pid, SIGKILL) == 0);
    TH_ASSERT(&p, th_wait_exit(&p, 60));
    th_cleanup(&p);
    double deadline = th_now() + 30;
    int left = -1;
    while (th_now() < deadline &&
           (left = left_on_node(0) + left_on_node(1) + left_on_node(2)) > 0) {
        struct timespec tick = {0, 100 * 1000 * 1000};
        nanosleep(&tick, NULL);
    }
    printf("processes left in the namespaces: %d\n", left);
    assert_int_equal(left, 0);
}

/* --hosts with --rdzv-backend=etcd (one etcd member on the cluster's bridge, which every
 * node reaches): every node runs the same command over real ssh, none given a place;
 * etcd elects the store's launcher, and the libddp job of 6 ranks runs, 2 on each node. */
static void test_hosts_with_etcd(void **state)
{
    char host[48], endpoint[160];
    th_cluster_bridge_addr(&cluster, host, sizeof host);
    th_etcd_t etcd;
    th_etcd_up_at(&etcd, 1, host);
    snprintf(endpoint, sizeof endpoint, "--rdzv-endpoint=%s", etcd.endpoints);
    const char *args[] = {
        "--hosts=n[0-2]", "--rdzv-backend=etcd",    endpoint, "--nproc-per-node=2",
        "--no-python",    getenv("DDP_TEST_HELLO"), NULL};
    th_proc_t p;
    const char *out, *err;
    every_rank_said_hello(&p, args, false, &out, &err);
    for (int i = 0; i < NODES; i++) {
        char on[32];
        snprintf(on, sizeof on, " of 2 on n%d,", i);
        TH_ASSERT(&p, th_count(out, on) == 2);
    }
    TH_ASSERT(&p, th_count(err, "etcd: elected") == 1);
    TH_ASSERT(&p, strstr(err, "node 2 (n2): started over ssh") != NULL);
    th_cleanup(&p);
    th_etcd_down(&etcd);
    assert_true(remote_nodes_empty());
}

int main(int argc, char **argv)
{
    if (argc > 1)
        cmocka_set_test_filter(argv[1]);
    char check[600];
    snprintf(check, sizeof check, "'%s/tests/support/cluster' check ssh", th_source_dir());
    if (system(check) != 0)
        return 77; /* the script said why */
    const struct CMUnitTest tests[] = {
        TH_TEST(test_hosts_start_every_node),
        TH_TEST(test_hostfile_slots_and_dry_run),
        TH_TEST(test_env_reaches_every_node),
        TH_TEST(test_unreachable_host_ends_the_job),
        TH_TEST(test_launcher_missing_on_a_node),
        TH_TEST(test_node0_failing_at_start_ends_every_node),
        TH_TEST(test_ssh_without_input_still_runs),
        TH_TEST(test_remote_failure_is_the_jobs),
        TH_TEST(test_interrupt_ends_every_node),
        TH_TEST(test_sigkill_of_the_command_ends_every_node),
        TH_TEST(test_own_name_on_loopback),
        TH_TEST(test_gloo_warned_of_a_loopback_name),
        TH_TEST(test_hosts_with_etcd),
    };
    return cmocka_run_group_tests(tests, cluster_up, cluster_down);
}
