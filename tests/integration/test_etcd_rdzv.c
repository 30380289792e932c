/* Integration tests of --rdzv-backend=etcd: real ddp-launch processes against real etcd
 * members on loopback (tests/support/harness.h th_etcd_up; skipped where Debian's etcd-server
 * is not installed). The flags checked before anything starts (status 2); no etcd at the
 * endpoints, a server that is not etcd, a refused TLS handshake (status 5, no worker
 * started); launchers forming a c10d-ruled job at the store of the launcher etcd elects; two
 * run ids on one etcd never meeting; a finished job's keys not confusing the next. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "harness.h"
#include "io.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAX_ARGS 24

/* A launcher's argv: ddp-launch --rdzv-backend=etcd, the flags (space-separated, in
 * `flags`, which is cut up), then the worker program: `worker`, or th_worker() "env" (every
 * worker prints its environment). */
static void launcher_argv(const char **argv, char *flags, const char *const *worker)
{
    int n = 0;
    argv[n++] = th_launcher();
    argv[n++] = "--rdzv-backend=etcd";
    argv[n++] = "--local-addr=127.0.0.1";
    for (char *save = NULL, *f = strtok_r(flags, " ", &save); f != NULL && n < MAX_ARGS - 3;
         f = strtok_r(NULL, " ", &save))
        argv[n++] = f;
    for (int i = 0; worker != NULL && worker[i] != NULL && n < MAX_ARGS - 1; i++)
        argv[n++] = worker[i];
    if (worker == NULL) {
        argv[n++] = th_worker();
        argv[n++] = "env";
    }
    argv[n] = NULL;
}

static void start_worker(th_proc_t *p, const char *const *worker, const char *const *env,
                         const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void start_worker(th_proc_t *p, const char *const *worker, const char *const *env,
                         const char *fmt, ...)
{
    char flags[2048];
    const char *argv[MAX_ARGS];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(flags, sizeof flags, fmt, ap);
    va_end(ap);
    launcher_argv(argv, flags, worker);
    th_start(p, argv, env);
}

#define start_launcher(p, ...) start_worker(p, NULL, NULL, __VA_ARGS__)

static const char *out(const th_proc_t *p)
{
    return ddp_buf_str(&p->out);
}

static const char *err(const th_proc_t *p)
{
    return ddp_buf_str(&p->err);
}

/* A launcher that ends by itself within `timeout` with `status`, its stderr saying `says`,
 * no worker started. */
static void ends_before_workers(th_proc_t *p, double timeout, int status, const char *says)
{
    TH_ASSERT(p, th_wait_exit(p, timeout));
    TH_ASSERT(p, th_status(p) == status);
    TH_ASSERT(p, strstr(err(p), says) != NULL);
    TH_ASSERT(p, strstr(out(p), "RANK=") == NULL);
    th_cleanup(p);
}

/* The flags etcd's rendezvous takes, each wrong one said before anything starts (status 2);
 * no etcd is needed for these. */
static void test_flags_checked(void **state)
{
    static const struct {
        const char *flags, *says;
    } cases[] = {
        {"--nnodes=2", "etcd needs --rdzv-endpoint"},
        {"--rdzv-endpoint=127.0.0.1:x", "invalid value '127.0.0.1:x'"},
        {"--rdzv-endpoint=127.0.0.1,,:5", "invalid etcd endpoint ':5'"},
        {"--rdzv-endpoint=127.0.0.1 --rdzv-conf=protocol=ftp", "invalid protocol 'ftp'"},
        {"--rdzv-endpoint=127.0.0.1 --rdzv-conf=cacert=/etc/hostname",
         "cacert, cert and key are for etcd over TLS: add protocol=https"},
        {"--rdzv-endpoint=127.0.0.1 --rdzv-conf=protocol=https,cert=/etc/hostname",
         "cert without key"},
        {"--rdzv-endpoint=127.0.0.1 --rdzv-conf=protocol=https,cacert=/nowhere/ca.pem",
         "cacert=/nowhere/ca.pem: unable to read it: No such file or directory"},
        {"--rdzv-endpoint=127.0.0.1 --hosts=a,b --node-rank=1",
         "--hosts: with --rdzv-backend=etcd, node ranks go in joining order"},
        {"--rdzv-endpoint=127.0.0.1 --hosts=a,b --nnodes=2:3",
         "--hosts: names 2 host(s), fewer than --nnodes=2:3"},
    };
    (void)state;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        th_proc_t p;
        start_launcher(&p, "%s", cases[i].flags);
        ends_before_workers(&p, 30, 2, cases[i].says);
    }
    /* etcd's keys and lists are refused to the other backends, named. */
    const char *c10d[] = {th_launcher(), "--rdzv-backend=c10d",
                          "--nnodes=2",  "--rdzv-endpoint=127.0.0.1:1,127.0.0.1:2",
                          th_worker(),   "env",
                          NULL};
    th_proc_t p;
    th_start(&p, c10d, NULL);
    ends_before_workers(&p, 30, 2, "a list of endpoints is etcd's");
    const char *tls[] = {th_launcher(), "--rdzv-conf=protocol=https", th_worker(), "env", NULL};
    th_start(&p, tls, NULL);
    ends_before_workers(&p, 30, 2, "protocol, cacert, cert and key are etcd's");
    /* A TLS file that is not a regular file is refused before libcurl opens it (a FIFO
     * would block the loop there, deaf to signals): a FIFO, a directory, a device; so is
     * an empty one. */
    char *dir = th_shm_tmpdir(), fifo[600], empty[600];
    snprintf(fifo, sizeof fifo, "%s/fifo", dir);
    snprintf(empty, sizeof empty, "%s/empty", dir);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    assert_true(th_touch(empty));
    const char *files[][2] = {{fifo, "not a regular file"},
                              {dir, "not a regular file"},
                              {"/dev/zero", "not a regular file"},
                              {empty, "empty"}};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char says[800];
        snprintf(says, sizeof says, "cacert=%s: unable to read it: %s", files[i][0], files[i][1]);
        start_launcher(&p, "--rdzv-endpoint=127.0.0.1 --rdzv-conf=protocol=https,cacert=%s",
                       files[i][0]);
        ends_before_workers(&p, 30, 2, says);
    }
    th_rmtree(dir);
    free(dir);
}

/* No etcd at any endpoint, or a web server that is not etcd: status 5 at once, the message
 * naming the endpoints, no worker started. */
static void test_no_etcd_there(void **state)
{
    (void)state;
    int a = th_free_port(), b = th_free_port();
    th_proc_t p;
    char says[128];
    start_launcher(&p, "--nnodes=2 --rdzv-endpoint=127.0.0.1:%d,127.0.0.1:%d", a, b);
    snprintf(says, sizeof says, "127.0.0.1:%d", b);
    ends_before_workers(&p, 30, 5, says);

    th_proc_t server;
    th_web_server(&server, a);
    start_launcher(&p, "--nnodes=2 --rdzv-endpoint=127.0.0.1:%d", a);
    ends_before_workers(&p, 30, 5, "not etcd's v3 gateway");
    kill(server.pid, SIGTERM);
    th_wait_exit(&server, 10);
    th_cleanup(&server);

    /* Ports that take connections and never answer: said after the first joins' time (3
     * tries of a request's 2 s in all, whatever the number of endpoints, and 2 waits of 2 s
     * at most), not retried for join_timeout (600 s) as a join burst's late answer is. */
    enum { SILENT = 5 };
    int silent[SILENT];
    char endpoints[SILENT * 24] = "";
    for (int i = 0; i < SILENT; i++) {
        silent[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_in addr = {.sin_family = AF_INET,
                                   .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        socklen_t len = sizeof addr;
        assert_int_equal(bind(silent[i], (struct sockaddr *)&addr, sizeof addr), 0);
        assert_int_equal(listen(silent[i], 16), 0);
        assert_int_equal(getsockname(silent[i], (struct sockaddr *)&addr, &len), 0);
        size_t used = strlen(endpoints);
        snprintf(endpoints + used, sizeof endpoints - used, "%s127.0.0.1:%d", i ? "," : "",
                 ntohs(addr.sin_port));
    }
    start_launcher(&p, "--nnodes=2 --rdzv-endpoint=%s", endpoints);
    ends_before_workers(&p, 16, 5, "did not answer this launcher's first 3 joins");
    for (int i = 0; i < SILENT; i++)
        close(silent[i]);
}

/* etcd over https with client certificates: the job runs with the right CA and
 * certificate; with another CA the handshake is refused, said, status 5. */
static void test_tls(void **state)
{
    (void)state;
    th_etcd_t etcd;
    th_etcd_up_tls(&etcd, 1);
    const char *d = etcd.certs;
    th_proc_t p;
    start_launcher(&p,
                   "--rdzv-id=tls --rdzv-endpoint=%s --rdzv-conf=protocol=https,cacert=%s/"
                   "other-ca.pem,cert=%s/client.pem,key=%s/client-key.pem",
                   etcd.endpoints, d, d, d);
    ends_before_workers(&p, 30, 5, "unable to use etcd");
    start_launcher(&p,
                   "--rdzv-id=tls --rdzv-endpoint=%s --rdzv-conf=protocol=https,cacert=%s/"
                   "ca.pem,cert=%s/client.pem,key=%s/client-key.pem",
                   etcd.endpoints, d, d, d);
    TH_ASSERT(&p, th_wait_exit(&p, 30));
    TH_ASSERT(&p, th_status(&p) == 0);
    TH_ASSERT(&p, strstr(out(&p), "\nRANK=0\n") != NULL);
    th_cleanup(&p);
    th_etcd_down(&etcd);
}

/* The value of NAME=... in a worker's output ("" when absent). */
static const char *value_of(const th_proc_t *p, const char *name, char *buf, size_t cap)
{
    char needle[64];
    snprintf(needle, sizeof needle, "\n%s=", name);
    const char *at = strstr(out(p), needle);
    buf[0] = '\0';
    if (at != NULL)
        snprintf(buf, cap, "%.*s", (int)strcspn(at + strlen(needle), "\n"), at + strlen(needle));
    return buf;
}

/* Three launchers of --nnodes=2:3 against a 3-member etcd: one is elected and serves the
 * store; every worker is in one job of 3 nodes, node ranks 0, 1 and 2 once each, and every
 * worker's MASTER_ADDR:MASTER_PORT is that one store. The job's keys are gone after it. */
static void test_three_launchers_form_one_job(void **state)
{
    (void)state;
    th_etcd_t etcd;
    th_etcd_up(&etcd, 3);
    th_proc_t node[3];
    for (int i = 0; i < 3; i++)
        start_launcher(&node[i],
                       "--nnodes=2:3 --rdzv-id=form --rdzv-endpoint=%s "
                       "--rdzv-conf=last_call_timeout=30",
                       etcd.endpoints);
    int ranks[3] = {0, 0, 0}, elected = 0;
    char port0[16], port[16], buf[16];
    for (int i = 0; i < 3; i++) {
        th_proc_t *p = &node[i];
        TH_ASSERT(p, th_wait_exit(p, 30));
        TH_ASSERT(p, th_status(p) == 0);
        TH_ASSERT(p, strstr(out(p), "GROUP_WORLD_SIZE=3\n") != NULL);
        TH_ASSERT(p, strstr(out(p), "\nMASTER_ADDR=127.0.0.1\n") != NULL);
        int g = atoi(value_of(p, "GROUP_RANK", buf, sizeof buf));
        TH_ASSERT(p, g >= 0 && g < 3);
        ranks[g]++;
        elected += strstr(err(p), "etcd: elected: this launcher serves the job's store") != NULL;
        value_of(p, "MASTER_PORT", i == 0 ? port0 : port, sizeof port);
        TH_ASSERT(p, i == 0 || strcmp(port, port0) == 0);
    }
    assert_int_equal(ranks[0] * ranks[1] * ranks[2], 1);
    assert_int_equal(elected, 1);
    char keys[4096];
    assert_int_equal(th_etcdctl(&etcd, "get --prefix ddp-launch/form/", keys, sizeof keys), 0);
    assert_string_equal(keys, "");
    for (int i = 0; i < 3; i++)
        th_cleanup(&node[i]);
    th_etcd_down(&etcd);
}

/* Two jobs of 2 nodes with different run ids on one etcd: each forms alone (a world of 2);
 * then a new job with a run id whose keys a dead job left (a coordinator's record with no
 * live launcher) forms as if they were not there; then job "a" ends and leaves job "a/x"'s
 * keys. */
static void test_run_ids_apart_leftovers_cleared(void **state)
{
    (void)state;
    th_etcd_t etcd;
    th_etcd_up(&etcd, 1);
    th_proc_t node[4];
    for (int i = 0; i < 4; i++)
        start_launcher(&node[i], "--nnodes=2 --rdzv-id=job%d --rdzv-endpoint=%s", i % 2,
                       etcd.endpoints);
    for (int i = 0; i < 4; i++) {
        TH_ASSERT(&node[i], th_wait_exit(&node[i], 30));
        TH_ASSERT(&node[i], th_status(&node[i]) == 0);
        TH_ASSERT(&node[i], strstr(out(&node[i]), "\nWORLD_SIZE=2\n") != NULL);
        TH_ASSERT(&node[i], th_count(out(&node[i]), "TORCHELASTIC_RUN_ID=job") == 1);
        char id[16];
        snprintf(id, sizeof id, "RUN_ID=job%d\n", i % 2);
        TH_ASSERT(&node[i], strstr(out(&node[i]), id) != NULL);
        th_cleanup(&node[i]);
    }
    char said[4096];
    assert_int_equal(
        th_etcdctl(&etcd, "put ddp-launch/old/coord '127.0.0.1:1 gone'", said, sizeof said), 0);
    assert_int_equal(th_etcdctl(&etcd, "put ddp-launch/old/state 'round 7'", said, sizeof said), 0);
    for (int i = 0; i < 2; i++)
        start_launcher(&node[i], "--nnodes=2 --rdzv-id=old --rdzv-endpoint=%s", etcd.endpoints);
    for (int i = 0; i < 2; i++) {
        TH_ASSERT(&node[i], th_wait_exit(&node[i], 30));
        TH_ASSERT(&node[i], th_status(&node[i]) == 0);
        TH_ASSERT(&node[i], strstr(out(&node[i]), "\nWORLD_SIZE=2\n") != NULL);
        TH_ASSERT(&node[i], strstr(out(&node[i]), "\nMASTER_PORT=1\n") == NULL);
        th_cleanup(&node[i]);
    }
    /* A run id holding '/' ("a/x", one launcher of two waiting) and its first part ("a"):
     * job "a" ends and deletes its keys, never job "a/x"'s (a%2Fx in the keys), which its
     * second launcher then forms. */
    start_launcher(&node[0], "--nnodes=2 --rdzv-id=a/x --rdzv-endpoint=%s", etcd.endpoints);
    TH_ASSERT(&node[0], th_wait_output(&node[0], 2, "etcd: elected", 1, 30));
    start_launcher(&node[1], "--nnodes=1 --rdzv-id=a --rdzv-endpoint=%s", etcd.endpoints);
    TH_ASSERT(&node[1], th_wait_exit(&node[1], 30));
    TH_ASSERT(&node[1], th_status(&node[1]) == 0);
    th_cleanup(&node[1]);
    assert_int_equal(th_etcdctl(&etcd, "get --prefix ddp-launch/ --keys-only", said, sizeof said),
                     0);
    assert_non_null(strstr(said, "ddp-launch/a%2Fx/coord"));
    start_launcher(&node[1], "--nnodes=2 --rdzv-id=a/x --rdzv-endpoint=%s", etcd.endpoints);
    for (int i = 0; i < 2; i++) {
        TH_ASSERT(&node[i], th_wait_exit(&node[i], 30));
        TH_ASSERT(&node[i], th_status(&node[i]) == 0);
        TH_ASSERT(&node[i], strstr(out(&node[i]), "\nWORLD_SIZE=2\n") != NULL);
        TH_ASSERT(&node[i], strstr(out(&node[i]), "\nTORCHELASTIC_RUN_ID=a/x\n") != NULL);
        th_cleanup(&node[i]);
    }
    th_etcd_down(&etcd);
}

/* Two launchers with one identity: each PID 1 of its own pid namespace, one --local-addr
 * (two containers with --network=host): still two nodes of one job (a world of 2, node
 * ranks 0 and 1), not one member key taken twice and a job that never forms. */
static void test_same_host_and_pid(void **state)
{
    const char *probe[] = {"/usr/bin/unshare", "--pid",     "--fork",
                           "--mount-proc",     "/bin/true", NULL};
    (void)state;
    if (!th_succeeds(probe, 30)) {
        printf("cannot make a pid namespace (not root?): skipped\n");
        return;
    }
    th_etcd_t etcd;
    th_etcd_up(&etcd, 1);
    char endpoint[300];
    snprintf(endpoint, sizeof endpoint, "--rdzv-endpoint=%s", etcd.endpoints);
    const char *argv[] = {"/usr/bin/unshare",
                          "--pid",
                          "--fork",
                          "--mount-proc",
                          th_launcher(),
                          "--rdzv-backend=etcd",
                          "--nnodes=2",
                          "--local-addr=127.0.0.1",
                          "--rdzv-id=sameid",
                          endpoint,
                          th_worker(),
                          "env",
                          NULL};
    th_proc_t node[2];
    for (int i = 0; i < 2; i++)
        th_start(&node[i], argv, NULL);
    int ranks[2] = {0, 0};
    for (int i = 0; i < 2; i++) {
        char buf[16];
        TH_ASSERT(&node[i], th_wait_exit(&node[i], 30));
        TH_ASSERT(&node[i], th_status(&node[i]) == 0);
        TH_ASSERT(&node[i], strstr(out(&node[i]), "\nWORLD_SIZE=2\n") != NULL);
        int g = atoi(value_of(&node[i], "GROUP_RANK", buf, sizeof buf));
        TH_ASSERT(&node[i], g == 0 || g == 1);
        ranks[g]++;
    }
    assert_int_equal(ranks[0] * ranks[1], 1);
    for (int i = 0; i < 2; i++)
        th_cleanup(&node[i]);
    th_etcd_down(&etcd);
}

/* A launcher given SIGTERM mid-job (the one not elected, which joined second) ends the job
 * on the other, which names it by the node rank the round gave it (not --node-rank's
 * default, 0: the elected one's). */
static void test_signal_names_the_node(void **state)
{
    (void)state;
    th_etcd_t etcd;
    th_etcd_up(&etcd, 1);
    const char *worker[] = {"/bin/sh", "-c", "echo \"rank=$GROUP_RANK\"; exec sleep 60", NULL};
    th_proc_t node[2];
    start_worker(&node[0], worker, NULL, "--nnodes=2 --rdzv-id=named --rdzv-endpoint=%s",
                 etcd.endpoints);
    TH_ASSERT(&node[0], th_wait_output(&node[0], 2, "etcd: elected", 1, 30));
    start_worker(&node[1], worker, NULL, "--nnodes=2 --rdzv-id=named --rdzv-endpoint=%s",
                 etcd.endpoints);
    for (int i = 0; i < 2; i++)
        TH_ASSERT(&node[i], th_wait_output(&node[i], 1, "rank=", 1, 30));
    char says[128];
    snprintf(says, sizeof says, "the job was ended by node %d (127.0.0.1): ",
             atoi(strstr(out(&node[1]), "rank=") + 5));
    TH_ASSERT(&node[1], strstr(out(&node[1]), "rank=1\n") != NULL);
    assert_int_equal(kill(node[1].pid, SIGTERM), 0);
    for (int i = 0; i < 2; i++) {
        TH_ASSERT(&node[i], th_wait_exit(&node[i], 30));
        TH_ASSERT(&node[i], th_status(&node[i]) == 128 + SIGTERM);
    }
    TH_ASSERT(&node[0], strstr(err(&node[0]), says) != NULL);
    for (int i = 0; i < 2; i++)
        th_cleanup(&node[i]);
    th_etcd_down(&etcd);
}

/* Two launchers of one job (1 and 2 workers) on a 1-member etcd running `program` (with
 * `env`); every launcher ends with status 0. */
static void two_nodes_run(const char *const *program, const char *const *env, th_proc_t *node)
{
    th_etcd_t etcd;
    th_etcd_up(&etcd, 1);
    for (int i = 0; i < 2; i++)
        start_worker(&node[i], program, env,
                     "--nnodes=2 --nproc-per-node=%d --rdzv-id=real "
                     "--rdzv-endpoint=%s",
                     i + 1, etcd.endpoints);
    for (int i = 0; i < 2; i++) {
        TH_ASSERT(&node[i], th_wait_exit(&node[i], 120));
        TH_ASSERT(&node[i], th_status(&node[i]) == 0);
    }
    th_etcd_down(&etcd);
}

/* Every rank R of 3 said "<before>R<after>" on one of the two nodes; both freed. */
static void every_rank_said(th_proc_t *node, const char *before, const char *after)
{
    char both[16384], want[128];
    snprintf(both, sizeof both, "%s%s", out(&node[0]), out(&node[1]));
    for (int r = 0; r < 3; r++) {
        snprintf(want, sizeof want, "%s%d%s", before, r, after);
        TH_ASSERT(&node[0], strstr(both, want) != NULL);
    }
    th_cleanup(&node[0]);
    th_cleanup(&node[1]);
}

/* libddp's workers (ddp-hello) across two launchers placed by etcd: every rank of 3 is
 * there, each at its node. */
static void test_libddp_job(void **state)
{
    (void)state;
    const char *program[] = {getenv("DDP_TEST_HELLO"), NULL};
    th_proc_t node[2];
    two_nodes_run(program, NULL, node);
    every_rank_said(node, "hello from rank ", " of 3");
}

/* PyTorch (Debian's 1.13) with gloo across two launchers placed by etcd: env:// init at
 * the elected launcher's store, an all_reduce, a barrier. */
static void test_torch_gloo_job(void **state)
{
    (void)state;
    const char *python = th_torch_python();
    char script[1024], python_exec[1100];
    if (python == NULL) {
        printf("no python with torch (apt-get install python3-torch): skipped\n");
        skip();
    }
    snprintf(script, sizeof script, "%s/tests/python/gloo_allreduce.py", th_source_dir());
    snprintf(python_exec, sizeof python_exec, "PYTHON_EXEC=%s", python);
    const char *program[] = {script, NULL}, *env[] = {python_exec, "GLOO_SOCKET_IFNAME=lo", NULL};
    th_proc_t node[2];
    two_nodes_run(program, env, node);
    every_rank_said(node, "rank ", " of 3 sum 6");
}

/* Until a launcher's worker says "ready" (1) or the launcher that it waits as a hot spare
 * (2), at most `timeout` s (0). */
static int wait_running_or_spare(th_proc_t *p, double timeout)
{
    for (double deadline = th_now() + timeout; th_now() < deadline;) {
        if (th_wait_output(p, 1, "ready", 1, 0.1))
            return 1;
        if (th_wait_output(p, 2, "waits as a hot spare", 1, 0.1))
            return 2;
    }
    return 0;
}

/* The elected launcher SIGKILLed mid-job (its guard takes its worker), with a hot spare
 * waiting (`with_spare`, --nnodes=2:2; else --nnodes=2:3, three running): the others see the
 * store go, etcd elects one of them, its store takes the job over from the round record in
 * etcd, and the two run round 1 to the end as the job's 2 nodes (with the spare, the
 * survivor keeps its node rank and the spare takes the lost node's), within seconds of the
 * kill. The event log has the store's loss and its successor. */
static void elected_launcher_lost(bool with_spare, bool torch)
{
    const char *python = th_torch_python();
    if (torch && python == NULL) {
        printf("no python with torch (apt-get install python3-torch): skipped\n");
        skip();
    }
    th_etcd_t etcd;
    th_etcd_up(&etcd, 3);
    char *dir = th_tmpdir(), marker[600], script[1400];
    snprintf(marker, sizeof marker, "%s/go", dir);
    if (!torch)
        snprintf(script, sizeof script,
                 "if [ -e '%s' ]; then echo \"DONE GROUP_RANK=$GROUP_RANK "
                 "GROUP_WORLD_SIZE=$GROUP_WORLD_SIZE STORE=$MASTER_PORT\"; exit 0; fi; "
                 "echo ready; exec sleep 600",
                 marker);
    else /* (an all_reduce on each round's gloo group: round 0 waits after it) */
        snprintf(
            script, sizeof script,
            "import os, time, torch, torch.distributed as dist\n"
            "dist.init_process_group('gloo', init_method='env://')\n"
            "v = torch.tensor([float(dist.get_rank() + 1)])\n"
            "dist.all_reduce(v)\n"
            "e = os.environ\n"
            "if os.path.exists('%s'):\n"
            "    print('DONE GROUP_RANK=%%s GROUP_WORLD_SIZE=%%s STORE=%%s RANK=%%d SUM=%%d' %% "
            "(e['GROUP_RANK'], e['GROUP_WORLD_SIZE'], e['MASTER_PORT'], dist.get_rank(), "
            "v.item()), flush=True)\n"
            "else:\n"
            "    print('ready', flush=True)\n"
            "    time.sleep(600)\n",
            marker);
    const char *shell[] = {"/bin/sh", "-c", script, NULL}, *py[] = {python, "-c", script, NULL};
    const char *const *worker = torch ? py : shell, *env[] = {"GLOO_SOCKET_IFNAME=lo", NULL};
    /* The first launcher is elected, and in the first round (it joins first). */
    th_proc_t node[3];
    int elected = 0, spare = -1;
    for (int i = 0; i < 3; i++) {
        start_worker(&node[i], worker, env,
                     "%s --rdzv-id=lose --rdzv-endpoint=%s --rdzv-conf=last_call_timeout=1 "
                     "--event-log-handler=file:%s/events.jsonl",
                     with_spare ? "--nnodes=2:2 --hot-spares=1" : "--nnodes=2:3", etcd.endpoints,
                     dir);
        TH_ASSERT(&node[i], th_wait_output(&node[i], 2, "joining the elastic job", 1, 30));
    }
    TH_ASSERT(&node[0], strstr(err(&node[0]), "etcd: elected") != NULL);
    for (int i = 0; i < 3; i++) {
        th_proc_t *p = &node[i];
        int said = wait_running_or_spare(p, 30);
        TH_ASSERT(p, said != 0);
        if (said == 2)
            spare = i;
    }
    TH_ASSERT(&node[elected], with_spare ? spare > 0 : spare < 0);
    int old_rank[3] = {-1, -1, -1};
    for (int i = 0; i < 3; i++) {
        const char *at = strstr(err(&node[i]), "this is node ");
        TH_ASSERT(&node[i], i == spare || at != NULL);
        old_rank[i] = at != NULL ? atoi(at + strlen("this is node ")) : -1;
    }
    TH_ASSERT(&node[elected], th_touch(marker));
    double killed = th_now();
    assert_int_equal(kill(node[elected].pid, SIGKILL), 0);
    int ranks[2] = {0, 0}, took_over = 0;
    for (int i = 0; i < 3; i++) {
        th_proc_t *p = &node[i];
        if (i == elected)
            continue;
        TH_ASSERT(p, th_wait_exit(p, 30));
        TH_ASSERT(p, th_status(p) == 0);
        TH_ASSERT(p, strstr(err(p), "the job goes on at the store of the launcher etcd elects "
                                    "next") != NULL);
        const char *done = strstr(out(p), "DONE GROUP_RANK=");
        TH_ASSERT(p, done != NULL && strstr(done, "GROUP_WORLD_SIZE=2") != NULL);
        int g = atoi(done + strlen("DONE GROUP_RANK="));
        TH_ASSERT(p, g == 0 || g == 1);
        ranks[g]++;
        /* Ranks kept: the survivor its own, the spare the lost node's; round 1 of the job. */
        TH_ASSERT(p, !with_spare || g == (i == spare ? old_rank[elected] : old_rank[i]));
        TH_ASSERT(p, strstr(err(p), "round 1: 2 node(s)") != NULL);
        /* PyTorch: the rank is the node's (one worker each), round 1's all_reduce 1 + 2. */
        char rank[32];
        snprintf(rank, sizeof rank, " RANK=%d SUM=3", g);
        TH_ASSERT(p, !torch || strstr(done, rank) != NULL);
        took_over += strstr(err(p), "taking the job over after round 0") != NULL;
    }
    double took = th_now() - killed;
    assert_int_equal(ranks[0] * ranks[1], 1);
    assert_int_equal(took_over, 1);
    printf("%s%s: round 1 done %.2f s after the kill\n", torch ? "PyTorch, " : "",
           with_spare ? "spare" : "shrunk", took);
    assert_true(took < 10);
    th_wait_exit(&node[elected], 10);
    /* The event log (one file, every launcher's lines): the first store placed, its loss
     * seen by both others, the next one placed after it, round 1 formed on both. */
    char events[700], *text = NULL;
    size_t len = 0;
    snprintf(events, sizeof events, "%s/events.jsonl", dir);
    assert_int_equal(ddp_read_file(events, 1 << 20, &text, &len), 0);
    assert_int_equal(th_count(text, "\"event\": \"store_lost\""), 2);
    assert_int_equal(th_count(text, "\"elected\": true, \"after_loss\": false"), 1);
    assert_int_equal(th_count(text, "\"elected\": true, \"after_loss\": true"), 1);
    assert_int_equal(th_count(text, "\"event\": \"round_formed\""), with_spare ? 4 : 5);
    assert_int_equal(th_count(text, "\"round\": 1, \"nnodes\": 2"), 2);
    free(text);
    for (int i = 0; i < 3; i++)
        th_cleanup(&node[i]);
    th_etcd_down(&etcd);
    th_rmtree(dir);
    free(dir);
}

static void test_elected_launcher_lost_spare_takes_over(void **state)
{
    (void)state;
    elected_launcher_lost(true, false);
}

/* The same without a spare, --nnodes=2:3: the job shrinks to the 2 survivors, round 1,
 * and completes. */
static void test_elected_launcher_lost_job_shrinks(void **state)
{
    (void)state;
    elected_launcher_lost(false, false);
}

/* The same with PyTorch (gloo) workers and a hot spare: each round's workers meet in its
 * store (env://) and all_reduce; round 1's, at the new store, with the ranks kept. */
static void test_elected_launcher_lost_torch_spare(void **state)
{
    (void)state;
    elected_launcher_lost(true, true);
}

/* A 3-member etcd and two launchers of --nnodes=2 under run id `id` (more flags in `conf`)
 * on it, their workers running until `marker` (in the directory returned, which the caller
 * removes) exists; they look every 0.1 s. */
static char *two_waiting(th_etcd_t *etcd, th_proc_t *node, const char *id, const char *conf,
                         char *marker, size_t cap)
{
    char script[1400], *dir = th_tmpdir();
    th_etcd_up(etcd, 3);
    snprintf(marker, cap, "%s/go", dir);
    snprintf(script, sizeof script,
             "echo ready; while [ ! -e '%s' ]; do sleep 0.1; done; echo DONE", marker);
    const char *worker[] = {"/bin/sh", "-c", script, NULL};
    for (int i = 0; i < 2; i++)
        start_worker(&node[i], worker, NULL, "--nnodes=2 --rdzv-id=%s --rdzv-endpoint=%s %s", id,
                     etcd->endpoints, conf);
    for (int i = 0; i < 2; i++)
        TH_ASSERT(&node[i], th_wait_output(&node[i], 1, "ready", 1, 30));
    return dir;
}

static void two_done(th_etcd_t *etcd, th_proc_t *node, char *dir)
{
    for (int i = 0; i < 2; i++)
        th_cleanup(&node[i]);
    th_etcd_down(etcd);
    th_rmtree(dir);
    free(dir);
}

/* Whether every lease etcd holds is kept alive after `since`: each seen with its remaining
 * time back near its TTL once more than a third of it has passed, within `timeout` s. */
static bool leases_renewed_after(const th_etcd_t *etcd, double since, double timeout)
{
    char list[4096], one[512], args[128], renewed[8][40];
    int nrenewed = 0, leases = 0;
    for (double deadline = th_now() + timeout; th_now() < deadline;) {
        nanosleep(&(struct timespec){.tv_nsec = 100 * 1000 * 1000}, NULL);
        if (th_now() - since < 2.5 || th_etcdctl(etcd, "lease list", list, sizeof list) != 0)
            continue;
        leases = 0;
        for (char *save = NULL, *id = strtok_r(list, "\n", &save); id != NULL;
             id = strtok_r(NULL, "\n", &save)) {
            bool seen = strncmp(id, "found", 5) == 0 || strlen(id) >= sizeof renewed[0];
            for (int k = 0; k < nrenewed && !seen; k++)
                seen = strcmp(renewed[k], id) == 0;
            leases += strncmp(id, "found", 5) != 0;
            if (seen || nrenewed == 8)
                continue;
            snprintf(args, sizeof args, "lease timetolive %s", id);
            const char *left =
                th_etcdctl(etcd, args, one, sizeof one) == 0 ? strstr(one, "remaining(") : NULL;
            if (left != NULL && atoi(left + strlen("remaining(")) >= 5)
                snprintf(renewed[nrenewed++], sizeof renewed[0], "%s", id);
        }
        if (leases >= 2 && nrenewed >= leases)
            return true;
    }
    return false;
}

/* The etcd leader SIGKILLed mid-job: the launchers' keep-alives go to the other members
 * (their leases renewed after the kill), and the job runs to its end, nothing said. */
static void test_etcd_leader_lost_job_goes_on(void **state)
{
    (void)state;
    th_etcd_t etcd;
    th_proc_t node[2];
    char marker[600], *dir = two_waiting(&etcd, node, "leader", "", marker, sizeof marker);
    int leader = th_etcd_leader(&etcd, 10);
    assert_true(leader >= 0);
    double killed = th_now();
    th_etcd_kill(&etcd, leader, SIGKILL);
    assert_true(leases_renewed_after(&etcd, killed, 15));
    TH_ASSERT(&node[0], th_touch(marker));
    for (int i = 0; i < 2; i++) {
        TH_ASSERT(&node[i], th_wait_exit(&node[i], 30));
        TH_ASSERT(&node[i], th_status(&node[i]) == 0);
        TH_ASSERT(&node[i], strstr(out(&node[i]), "DONE") != NULL);
        TH_ASSERT(&node[i], strstr(err(&node[i]), "warning") == NULL);
    }
    two_done(&etcd, node, dir);
}

/* Two of three etcd members SIGKILLed mid-job (no quorum): every launcher ends with status
 * 5 (saying etcd could not be reached, naming its endpoints, or that the store's launcher
 * ended for that), within the lease's time and its requests', its workers stopped; no
 * hang. */
static void test_etcd_quorum_lost_ends_the_job(void **state)
{
    (void)state;
    th_etcd_t etcd;
    th_proc_t node[2];
    /* A lease of 2 s (2 x 0.5 s x 2 beats), for a short test. */
    char marker[600], *dir = two_waiting(&etcd, node, "quorum",
                                         "--rdzv-conf=keep_alive_interval=0.5,"
                                         "keep_alive_max_attempt=2",
                                         marker, sizeof marker);
    double killed = th_now();
    th_etcd_kill(&etcd, 0, SIGKILL);
    th_etcd_kill(&etcd, 1, SIGKILL);
    int named = 0;
    for (int i = 0; i < 2; i++) {
        TH_ASSERT(&node[i], th_wait_exit(&node[i], 30));
        TH_ASSERT(&node[i], th_status(&node[i]) == 5);
        TH_ASSERT(&node[i], strstr(out(&node[i]), "DONE") == NULL);
        named += strstr(err(&node[i]), etcd.endpoints) != NULL;
    }
    /* (A launcher may hear first that the store's launcher has ended for it.) */
    assert_true(named >= 1);
    double took = th_now() - killed;
    printf("quorum lost: every launcher ended %.1f s after\n", took);
    assert_true(took < 10);
    two_done(&etcd, node, dir);
}

/* The leases etcd holds revoked (etcdctl), as etcd does with a lease whose keep-alives
 * went unanswered for its time: every one (`key` NULL), or those whose keys include `key`
 * (`with`) or do not: the number revoked. */
static int revoke_leases(const th_etcd_t *etcd, const char *key, bool with)
{
    char list[4096], said[1024], args[128];
    int revoked = 0;
    if (th_etcdctl(etcd, "lease list", list, sizeof list) != 0)
        return 0;
    for (char *save = NULL, *id = strtok_r(list, "\n", &save); id != NULL;
         id = strtok_r(NULL, "\n", &save)) {
        if (strncmp(id, "found", 5) == 0 || strlen(id) > 40)
            continue;
        snprintf(args, sizeof args, "lease timetolive --keys %s", id);
        if (key != NULL &&
            (th_etcdctl(etcd, args, said, sizeof said) != 0 || (strstr(said, key) != NULL) != with))
            continue;
        snprintf(args, sizeof args, "lease revoke %s", id);
        revoked += th_etcdctl(etcd, args, said, sizeof said) == 0;
    }
    return revoked;
}

static int revoke_every_lease(const th_etcd_t *etcd)
{
    return revoke_leases(etcd, NULL, false);
}

/* Two launchers of --nnodes=3 wait for a third; etcd ends both leases (the elected
 * launcher's too): each takes a new lease and joins again, the elected one keeping its
 * store, and once the third comes the job of 3 forms and completes at that store. */
static void test_lease_lost_while_forming_rejoins(void **state)
{
    (void)state;
    th_etcd_t etcd;
    th_etcd_up(&etcd, 1);
    th_proc_t node[3];
    /* A lease of 2 s (2 x 0.5 s x 2 beats): the loss is seen within a second or two. */
#define REJOIN_FLAGS                                  \
    "--nnodes=3 --rdzv-id=rejoin --rdzv-endpoint=%s " \
    "--rdzv-conf=keep_alive_interval=0.5,keep_alive_max_attempt=2"
    for (int i = 0; i < 2; i++)
        start_launcher(&node[i], REJOIN_FLAGS, etcd.endpoints);
    for (int i = 0; i < 2; i++)
        TH_ASSERT(&node[i], th_wait_output(&node[i], 2, "the job's store", 1, 30));
    double revoked = th_now();
    assert_int_equal(revoke_every_lease(&etcd), 2);
    for (int i = 0; i < 2; i++)
        TH_ASSERT(&node[i], th_wait_output(&node[i], 2, "joined again, under a new lease", 1, 15));
    printf("leases revoked: both launchers joined again %.1f s after\n", th_now() - revoked);
    for (int i = 0; i < 2; i++)
        TH_ASSERT(&node[i], strstr(err(&node[i]), "taking a new lease and joining again") != NULL);
    start_launcher(&node[2], REJOIN_FLAGS, etcd.endpoints);
    char port0[16], port[16];
    for (int i = 0; i < 3; i++) {
        th_proc_t *p = &node[i];
        TH_ASSERT(p, th_wait_exit(p, 30));
        TH_ASSERT(p, th_status(p) == 0);
        TH_ASSERT(p, strstr(out(p), "GROUP_WORLD_SIZE=3\n") != NULL);
        value_of(p, "MASTER_PORT", i == 0 ? port0 : port, sizeof port);
        TH_ASSERT(p, i == 0 || strcmp(port, port0) == 0);
    }
    for (int i = 0; i < 3; i++)
        th_cleanup(&node[i]);
    th_etcd_down(&etcd);
}

/* The elected launcher stopped (SIGSTOP, as Ctrl-Z stops it) while the job forms, its lease
 * ended meanwhile, and a launcher that came then elected itself: continued, the first one
 * leaves (status 5, said) with no word of an end; the launcher waiting at its store goes on
 * at the new one's, and the job of 3 forms there and completes. */
static void test_stopped_elected_leaves_for_the_new_one(void **state)
{
    (void)state;
    th_etcd_t etcd;
    th_etcd_up(&etcd, 1);
    th_proc_t node[4]; /* a (elected, stopped), b, c (elected meanwhile), d */
#define DEPOSED_FLAGS                                  \
    "--nnodes=3 --rdzv-id=deposed --rdzv-endpoint=%s " \
    "--rdzv-conf=keep_alive_interval=0.5,keep_alive_max_attempt=2"
    start_launcher(&node[0], DEPOSED_FLAGS, etcd.endpoints);
    TH_ASSERT(&node[0], th_wait_output(&node[0], 2, "etcd: elected", 1, 30));
    start_launcher(&node[1], DEPOSED_FLAGS, etcd.endpoints);
    TH_ASSERT(&node[1], th_wait_output(&node[1], 2, "the job's store is the elected", 1, 30));
    assert_int_equal(kill(node[0].pid, SIGSTOP), 0);
    assert_int_equal(revoke_leases(&etcd, "coord", true), 1);
    start_launcher(&node[2], DEPOSED_FLAGS, etcd.endpoints);
    TH_ASSERT(&node[2], th_wait_output(&node[2], 2, "etcd: elected", 1, 30));
    assert_int_equal(kill(node[0].pid, SIGCONT), 0);
    TH_ASSERT(&node[0], th_wait_exit(&node[0], 20));
    TH_ASSERT(&node[0], th_status(&node[0]) == 5);
    TH_ASSERT(&node[0], strstr(err(&node[0]), "this launcher leaves") != NULL);
    start_launcher(&node[3], DEPOSED_FLAGS, etcd.endpoints);
    char port[16], port_c[16];
    for (int i = 1; i < 4; i++) {
        th_proc_t *p = &node[i];
        TH_ASSERT(p, th_wait_exit(p, 40));
        TH_ASSERT(p, th_status(p) == 0);
        TH_ASSERT(p, strstr(out(p), "GROUP_WORLD_SIZE=3\n") != NULL);
    }
    value_of(&node[2], "MASTER_PORT", port_c, sizeof port_c); /* the new elected's store */
    for (int i = 1; i < 4; i++)
        TH_ASSERT(&node[i],
                  strcmp(value_of(&node[i], "MASTER_PORT", port, sizeof port), port_c) == 0);
    for (int i = 0; i < 4; i++)
        th_cleanup(&node[i]);
    th_etcd_down(&etcd);
}

/* A job SIGKILLed whole leaves its keys under a lease that runs on (here 9 s: a launcher
 * of --rdzv-conf keep_alive_interval=0.5 would hold one of 18 s while its job forms; 9 s
 * keeps the test short): a new job with its run id finds the coordinator's record naming a
 * store that refuses connections, sees in etcd that nobody keeps that lease alive (its
 * keep-alive overdue: a third of the lease and 2 s after its last, 5 s here), ends it and
 * elects one of its own launchers, not after the lease. */
static void test_dead_jobs_live_record_deposed(void **state)
{
    (void)state;
    th_etcd_t etcd;
    th_etcd_up(&etcd, 1);
    char said[4096], lease[64] = "", args[256];
    assert_int_equal(th_etcdctl(&etcd, "lease grant 9", said, sizeof said), 0);
    assert_int_equal(sscanf(said, "lease %63s granted", lease), 1);
    snprintf(args, sizeof args, "put --lease=%s ddp-launch/dead/coord '127.0.0.1:%d gone'", lease,
             th_free_port());
    assert_int_equal(th_etcdctl(&etcd, args, said, sizeof said), 0);
    snprintf(args, sizeof args, "put --lease=%s ddp-launch/dead/node/gone x", lease);
    assert_int_equal(th_etcdctl(&etcd, args, said, sizeof said), 0);
    double started = th_now();
    th_proc_t node[2];
    for (int i = 0; i < 2; i++)
        start_launcher(&node[i], "--nnodes=2 --rdzv-id=dead --rdzv-endpoint=%s", etcd.endpoints);
    int deposed = 0;
    for (int i = 0; i < 2; i++) {
        TH_ASSERT(&node[i], th_wait_exit(&node[i], 30));
        TH_ASSERT(&node[i], th_status(&node[i]) == 0);
        TH_ASSERT(&node[i], strstr(out(&node[i]), "\nWORLD_SIZE=2\n") != NULL);
        deposed += strstr(err(&node[i]), "refuses connections: unless its launcher keeps its "
                                         "lease alive") != NULL;
    }
    printf("the new job ran %.2f s after the start\n", th_now() - started);
    assert_true(deposed >= 1);
    assert_true(th_now() - started < 16);
    for (int i = 0; i < 2; i++)
        th_cleanup(&node[i]);
    th_etcd_down(&etcd);
}

/* The coordinator's key of job `id` put by hand under a lease, as a dead job's would be
 * (9 s: see test_dead_jobs_live_record_deposed), naming host:port. */
static void squatted_key(th_etcd_t *etcd, const char *id, const char *host, int port)
{
    char said[4096], lease[64] = "", args[256];
    assert_int_equal(th_etcdctl(etcd, "lease grant 9", said, sizeof said), 0);
    assert_int_equal(sscanf(said, "lease %63s granted", lease), 1);
    snprintf(args, sizeof args, "put --lease=%s ddp-launch/%s/coord '%s:%d gone'", lease, id, host,
             port);
    assert_int_equal(th_etcdctl(etcd, args, said, sizeof said), 0);
    snprintf(args, sizeof args, "put --lease=%s ddp-launch/%s/node/gone x", lease, id);
    assert_int_equal(th_etcdctl(etcd, args, said, sizeof said), 0);
}

/* The same by a host name (the default --local-addr), which the loop's probe does not try:
 * the node thread's connection, refused, says that store is gone; its lease is ended once
 * etcd shows it not kept alive (5 s after its last keep-alive here), not the connection tried again
 * for join_timeout (600 s by default). */
static void test_dead_jobs_named_record_deposed(void **state)
{
    (void)state;
    th_etcd_t etcd;
    th_etcd_up(&etcd, 1);
    int port = th_free_port();
    squatted_key(&etcd, "named", "localhost", port);
    double started = th_now();
    th_proc_t p;
    start_launcher(&p, "--nnodes=1 --rdzv-id=named --rdzv-endpoint=%s", etcd.endpoints);
    TH_ASSERT(&p, th_wait_exit(&p, 30));
    printf("went on from the dead store's host name %.2f s after the start\n", th_now() - started);
    char says[200];
    snprintf(says, sizeof says,
             "the store at localhost:%d that etcd's key ddp-launch/named/coord names refuses "
             "connections: the job goes on",
             port);
    TH_ASSERT(&p, th_status(&p) == 0);
    TH_ASSERT(&p, strstr(out(&p), "\nWORLD_SIZE=1\n") != NULL);
    TH_ASSERT(&p, strstr(err(&p), says) != NULL);
    TH_ASSERT(&p, strstr(err(&p), "unless its launcher keeps its lease alive") != NULL);
    TH_ASSERT(&p, th_now() - started < 15);
    th_cleanup(&p);
    th_etcd_down(&etcd);
}

/* A job started again within a lease's time of its crash (every launcher SIGKILLed, a
 * restart spent): the dead job's round record names none of the new job's launchers. The
 * new job runs round 0 with its whole budget, not round 2 with none left. */
static void test_dead_jobs_round_record_not_inherited(void **state)
{
    (void)state;
    th_etcd_t etcd;
    th_etcd_up(&etcd, 1);
    char said[4096];
    squatted_key(&etcd, "crashed", "127.0.0.1", th_free_port());
    assert_int_equal(th_etcdctl(&etcd,
                                "put ddp-launch/crashed/state 'round 1 restarts 1 ranks gone "
                                "gone2'",
                                said, sizeof said),
                     0);
    double started = th_now();
    th_proc_t node[2];
    for (int i = 0; i < 2; i++)
        start_launcher(&node[i], "--nnodes=2 --max-restarts=1 --rdzv-id=crashed --rdzv-endpoint=%s",
                       etcd.endpoints);
    int fresh = 0;
    for (int i = 0; i < 2; i++) {
        TH_ASSERT(&node[i], th_wait_exit(&node[i], 30));
        TH_ASSERT(&node[i], th_status(&node[i]) == 0);
        TH_ASSERT(&node[i], strstr(out(&node[i]), "\nTORCHELASTIC_RESTART_COUNT=0\n") != NULL);
        TH_ASSERT(&node[i], strstr(err(&node[i]), "round 0: 2 node(s)") != NULL);
        fresh += strstr(err(&node[i]), "the round record of round 1 (1 restart(s) spent) names "
                                       "no launcher of this job: a new job") != NULL;
    }
    printf("the new job ran %.2f s after the start\n", th_now() - started);
    assert_int_equal(fresh, 1);
    assert_true(th_now() - started < 15);
    for (int i = 0; i < 2; i++)
        th_cleanup(&node[i]);
    th_etcd_down(&etcd);
}

/* A launcher that moved on from a key naming another program's port (`says` of it), elected
 * itself and ran the job of one, within `bound` s of `started`. */
static void moved_on(th_proc_t *p, double started, double bound, const char *says)
{
    TH_ASSERT(p, th_wait_exit(p, 30));
    printf("moved on from the other program's port %.2f s after the start\n", th_now() - started);
    TH_ASSERT(p, th_status(p) == 0);
    TH_ASSERT(p, strstr(out(p), "\nWORLD_SIZE=1\n") != NULL);
    TH_ASSERT(p, strstr(err(p), says) != NULL);
    TH_ASSERT(p, strstr(err(p), "did not answer as a ddp-launch store") != NULL);
    TH_ASSERT(p, th_now() - started < bound);
    th_cleanup(p);
}

/* The next connection to `listener` taken and answered with what a web server says; it is
 * returned, to be closed once the launcher has read that (closed with its request unread,
 * it would be reset first). */
static int answer_garbage(int listener)
{
    struct pollfd pfd = {.fd = listener, .events = POLLIN};
    assert_int_equal(poll(&pfd, 1, 20000), 1);
    int conn = accept(listener, NULL, NULL);
    assert_true(conn >= 0);
    static const char garbage[] = "HTTP/1.0 400 Bad Request\r\n\r\n";
    assert_int_equal(write(conn, garbage, sizeof garbage - 1), (ssize_t)(sizeof garbage - 1));
    return conn;
}

/* The coordinator's key of job `id` put by hand under no lease, naming 127.0.0.1:port, and
 * a member key (so that the join keeps the prefix). */
static void bare_key(th_etcd_t *etcd, const char *id, int port)
{
    char said[4096], args[256];
    snprintf(args, sizeof args, "put ddp-launch/%s/coord '127.0.0.1:%d x'", id, port);
    assert_int_equal(th_etcdctl(etcd, args, said, sizeof said), 0);
    snprintf(args, sizeof args, "put ddp-launch/%s/node/x x", id);
    assert_int_equal(th_etcdctl(etcd, args, said, sizeof said), 0);
}

/* A launcher that found the coordinator's key under no lease: status 5 at once, `says`,
 * and no word of ending a lease it cannot end. */
static void ends_unleased(th_proc_t *p, const char *says)
{
    TH_ASSERT(p, th_wait_exit(p, 10));
    TH_ASSERT(p, th_status(p) == 5);
    TH_ASSERT(p, strstr(err(p), says) != NULL);
    TH_ASSERT(p, strstr(err(p), "ending its lease") == NULL);
    TH_ASSERT(p, strstr(out(p), "RANK=") == NULL);
    th_cleanup(p);
}

/* A launcher run in a mount namespace where the name ddp-view is `view` (its /etc/hosts
 * bound over), for the 2-node job "view": --local-addr `local`, workers that sleep. */
static void start_in_name_view(th_proc_t *p, const th_etcd_t *etcd, const char *dir,
                               const char *who, const char *view, const char *local)
{
    char hosts[600], script[2048];
    snprintf(hosts, sizeof hosts, "%s/hosts-%s", dir, who);
    FILE *f = fopen(hosts, "w");
    assert_non_null(f);
    fprintf(f, "127.0.0.1 localhost\n%s ddp-view\n", view);
    fclose(f);
    snprintf(script, sizeof script,
             "mount --bind %s /etc/hosts || exit 77; exec %s --rdzv-backend=etcd "
             "--rdzv-endpoint=%s --nnodes=2 --rdzv-id=view --local-addr=%s "
             "--rdzv-conf=join_timeout=40 --no-python /bin/sleep 60",
             hosts, th_launcher(), etcd->endpoints, local);
    const char *argv[] = {"/usr/bin/unshare", "-m", "/bin/sh", "-c", script, NULL};
    th_start(p, argv, NULL);
}

/* This machine's first IPv4 address other than a loopback one, in `addr`; false if none. */
static bool outer_address(char *addr, size_t cap)
{
    struct ifaddrs *ifs = NULL;
    bool found = false;
    if (getifaddrs(&ifs) != 0)
        return false;
    for (struct ifaddrs *i = ifs; i != NULL && !found; i = i->ifa_next) {
        if (i->ifa_addr == NULL || i->ifa_addr->sa_family != AF_INET ||
            (i->ifa_flags & IFF_UP) == 0 || (i->ifa_flags & IFF_LOOPBACK) != 0)
            continue;
        found = inet_ntop(AF_INET, &((struct sockaddr_in *)i->ifa_addr)->sin_addr, addr,
                          (socklen_t)cap) != NULL;
    }
    freeifaddrs(ifs);
    return found;
}

/* The elected launcher serves its store at its --local-addr, a host name (ddp-view: this
 * machine's outer address, where alone it listens); a launcher joining from a node whose
 * view of that name is another address (127.0.0.1, where nothing listens: refused) used to
 * take the refusal for the elected launcher's death and
 * end its lease at once: the healthy elected launcher left its job. Now etcd is asked
 * first: that launcher keeps its lease alive, so it lives; the joiner alone ends (status
 * 5), saying it cannot reach the store that the job's launchers can. */
static void test_refused_by_a_live_elected_launcher(void **state)
{
    (void)state;
    char outer[64];
    if (!outer_address(outer, sizeof outer)) {
        print_message("skipped: this machine has no IPv4 address but loopback ones\n");
        skip();
    }
    th_etcd_t etcd;
    th_etcd_up(&etcd, 1);
    char *dir = th_tmpdir(), said[4096] = "";
    th_proc_t a, b;
    start_in_name_view(&a, &etcd, dir, "a", outer, "ddp-view");
    bool serves = th_wait_output(&a, 2, "elected: this launcher serves the job's store", 1, 20);
    if (!serves && th_wait_exit(&a, 0) && th_status(&a) == 77) {
        print_message("skipped: no mount namespace here (not root?)\n");
        th_cleanup(&a);
        th_etcd_down(&etcd);
        free(dir);
        skip();
    }
    TH_ASSERT(&a, serves);
    (void)th_etcdctl(&etcd, "get ddp-launch/view/coord --print-value-only", said, sizeof said);
    TH_ASSERT(&a, strstr(said, "ddp-view:") != NULL);
    char elected[4096];
    snprintf(elected, sizeof elected, "%s", said);
    double started = th_now();
    start_in_name_view(&b, &etcd, dir, "b", "127.0.0.1", "127.0.0.1");
    TH_ASSERT(&b, th_wait_exit(&b, 30));
    printf("the joiner ended %.2f s after its start\n", th_now() - started);
    TH_ASSERT(&b, th_status(&b) == 5);
    TH_ASSERT(&b, strstr(err(&b), "the elected launcher keeps its lease alive (it lives), yet "
                                  "from this node its store at ddp-view:") != NULL);
    TH_ASSERT(&b, strstr(out(&b), "RANK=") == NULL);
    /* The elected launcher is still there, still elected, told nothing. */
    TH_ASSERT(&a, !th_wait_exit(&a, 0));
    (void)th_etcdctl(&etcd, "get ddp-launch/view/coord --print-value-only", said, sizeof said);
    TH_ASSERT(&a, strcmp(said, elected) == 0);
    TH_ASSERT(&a, strstr(err(&a), "another launcher was elected") == NULL);
    kill(a.pid, SIGTERM);
    TH_ASSERT(&a, th_wait_exit(&a, 20));
    th_cleanup(&a);
    th_cleanup(&b);
    char path[700];
    snprintf(path, sizeof path, "%s/hosts-a", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/hosts-b", dir);
    unlink(path);
    rmdir(dir);
    free(dir);
    th_etcd_down(&etcd);
}

/* IPv6 stores are named in brackets: a dead launcher's at [::1]:PORT (refused), and this
 * launcher's own, at --local-addr=::1 ("::1:PORT" read as a host before). */
static void test_ipv6_store_named_in_brackets(void **state)
{
    (void)state;
    th_etcd_t etcd;
    th_etcd_up(&etcd, 1);
    int refused = th_free_port();
    squatted_key(&etcd, "v6", "[::1]", refused);
    double started = th_now();
    th_proc_t p;
    start_launcher(&p, "--nnodes=1 --rdzv-id=v6 --rdzv-endpoint=%s --local-addr=::1",
                   etcd.endpoints);
    TH_ASSERT(&p, th_wait_exit(&p, 20));
    printf("done %.2f s after the start\n", th_now() - started);
    TH_ASSERT(&p, th_status(&p) == 0);
    char says[200];
    snprintf(says, sizeof says, "the elected launcher's store at [::1]:%d refuses connections",
             refused);
    TH_ASSERT(&p, strstr(err(&p), says) != NULL);
    TH_ASSERT(&p, strstr(err(&p), "joining the elastic job (1 to 1 nodes) at [::1]:") != NULL);
    th_cleanup(&p);
    th_etcd_down(&etcd);
}

/* The coordinator's key names a port where another program listens (here the test's own
 * socket): one that answers the handshake with bytes a TCPStore does not send (by address,
 * then by a host name), then one that takes the connection and says nothing. Each time the
 * launcher says so, naming the address, ends that key's lease and elects itself: the
 * silent one within a lease's time while the job forms (6 s here, 3 times the keep-alive
 * limit), not after the store's connect timeout. A key under no lease
 * (put by no launcher) ends the launcher, named. One naming this launcher's own store's
 * address (a restart at a fixed --master-port) is a dead launcher's: deposed at once. */
static void test_coordinator_key_names_another_program(void **state)
{
    (void)state;
    th_etcd_t etcd;
    th_etcd_up(&etcd, 1);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof addr;
    int listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(listener >= 0);
    assert_int_equal(bind(listener, (struct sockaddr *)&addr, sizeof addr), 0);
    assert_int_equal(listen(listener, 64), 0);
    assert_int_equal(getsockname(listener, (struct sockaddr *)&addr, &len), 0);
    int port = ntohs(addr.sin_port);
    char says[200];
#define SQUAT_FLAGS                                                                   \
    "--nnodes=1 --rdzv-id=%s --rdzv-endpoint=%s --rdzv-conf=keep_alive_interval=0.5," \
    "keep_alive_max_attempt=2"
    squatted_key(&etcd, "garbled", "127.0.0.1", port);
    double started = th_now();
    th_proc_t p;
    start_launcher(&p, SQUAT_FLAGS, "garbled", etcd.endpoints);
    int conn = answer_garbage(listener);
    snprintf(says, sizeof says, "names 127.0.0.1:%d, which answered its handshake with bytes",
             port);
    moved_on(&p, started, 15, says);
    close(conn);
    /* By a host name, the node thread's connection judges: the same. */
    squatted_key(&etcd, "named", "localhost", port);
    started = th_now();
    start_launcher(&p, SQUAT_FLAGS, "named", etcd.endpoints);
    conn = answer_garbage(listener);
    snprintf(says, sizeof says,
             "the store at localhost:%d that etcd's key ddp-launch/named/coord names did not "
             "answer as a ddp-launch store",
             port);
    moved_on(&p, started, 15, says);
    close(conn);
    /* A key under no lease is no launcher's: not deleted, said (status 5), no lease said to
     * end; the same for one naming a port that refuses connections. */
    bare_key(&etcd, "bare", port);
    start_launcher(&p, SQUAT_FLAGS, "bare", etcd.endpoints);
    conn = answer_garbage(listener);
    ends_unleased(&p, "ddp-launch/bare/coord names 127.0.0.1");
    close(conn);
    int refused = th_free_port();
    bare_key(&etcd, "refused", refused);
    start_launcher(&p, SQUAT_FLAGS, "refused", etcd.endpoints);
    snprintf(says, sizeof says,
             "ddp-launch/refused/coord names 127.0.0.1:%d, which refuses connections, and is "
             "under no lease",
             refused);
    ends_unleased(&p, says);
    squatted_key(&etcd, "silent", "127.0.0.1", port);
    started = th_now();
    start_launcher(&p, SQUAT_FLAGS, "silent", etcd.endpoints);
    snprintf(says, sizeof says, "names 127.0.0.1:%d, which took the connection and said nothing",
             port);
    moved_on(&p, started, 25, says);
    close(listener);
    /* A restart with a fixed --master-port: the dead launcher's key names the port this
     * launcher's store listens at now, under that launcher's id. Its lease is ended and this
     * launcher elected, not a handshake with its own store taken for the job's. */
    int own = th_free_port();
    squatted_key(&etcd, "restart", "127.0.0.1", own);
    started = th_now();
    start_launcher(&p, SQUAT_FLAGS " --master-port=%d", "restart", etcd.endpoints, own);
    TH_ASSERT(&p, th_wait_exit(&p, 20));
    printf("restarted at its own port: %.2f s\n", th_now() - started);
    TH_ASSERT(&p, th_status(&p) == 0);
    TH_ASSERT(&p, strstr(out(&p), "\nWORLD_SIZE=1\n") != NULL);
    TH_ASSERT(&p,
              strstr(err(&p), "this launcher's own store, under another launcher's id") != NULL);
    TH_ASSERT(&p, th_now() - started < 10);
    th_cleanup(&p);
    th_etcd_down(&etcd);
}

#define QUICK_LEASE "--rdzv-conf=keep_alive_interval=0.5,keep_alive_max_attempt=2"
/* A coordinator's key that keeps changing while a launcher joins (another program re-putting
 * two dead launchers' records in turn, each under a lease nobody keeps alive): each record's
 * depose waits on a lease check of its own (8 s), which the next record cuts short. The
 * election ends join_timeout after the key's first change (status 5, the key named), not
 * never; so does one whose records name a host, which the loop does not probe (the node
 * thread's refused connection judges each: that "placement" does not end the election), and
 * one re-put with the same record under the other lease each time (hostile round 11: its
 * check started over at each, and no change was counted). */
static void test_coordinator_key_keeps_changing(void **state)
{
    (void)state;
    th_etcd_t etcd;
    th_etcd_up(&etcd, 1);
    enum { KINDS = 3 }; /* by address, by host name, one record under two leases */
    const char *hosts[KINDS] = {"127.0.0.1", "localhost", "127.0.0.1"};
    char said[4096], lease[2][64], args[256], id[KINDS][16];
    int port[2];
    for (int i = 0; i < 2; i++) {
        assert_int_equal(th_etcdctl(&etcd, "lease grant 600", said, sizeof said), 0);
        assert_int_equal(sscanf(said, "lease %63s granted", lease[i]), 1);
        port[i] = th_free_port();
    }
    for (int k = 0; k < KINDS; k++) {
        snprintf(id[k], sizeof id[k], "flip%d", k);
        snprintf(args, sizeof args, "put --lease=%s ddp-launch/%s/node/gone x", lease[0], id[k]);
        assert_int_equal(th_etcdctl(&etcd, args, said, sizeof said), 0);
    }
    double started = th_now();
    th_proc_t p[KINDS];
    int running = KINDS;
    for (int i = 0; i < 20 && running > 0; i++) { /* 40 s at most: the 8 s check never ends */
        for (int k = 0; k < KINDS; k++) {
            int which = k == 2 ? 0 : i % 2;
            snprintf(args, sizeof args, "put --lease=%s ddp-launch/%s/coord '%s:%d gone%d'",
                     lease[i % 2], id[k], hosts[k], port[which], which);
            assert_int_equal(th_etcdctl(&etcd, args, said, sizeof said), 0);
            if (i == 0)
                start_launcher(&p[k],
                               "--nnodes=1 --rdzv-id=%s --rdzv-endpoint=%s " QUICK_LEASE
                               ",join_timeout=6",
                               id[k], etcd.endpoints);
        }
        running = 0;
        for (int k = 0; k < KINDS; k++)
            running += !th_wait_exit(&p[k], k == 0 ? 2 : 0);
    }
    /* The bound: join_timeout, or one record's judgement where longer (the probe's silence,
     * 3 x 2 s, then the 8 s lease check and its last read's timeout, 2/3 s, and 1 s). */
    char says[300];
    for (int k = 0; k < KINDS; k++) {
        TH_ASSERT(&p[k], th_wait_exit(&p[k], 10));
        printf("%s%s: the election ended %.2f s after the start\n", hosts[k],
               k == 2 ? " (one record)" : "", th_now() - started);
        snprintf(says, sizeof says,
                 "no store was placed within 15.6667 s (--rdzv-conf join_timeout, or one record's "
                 "probe and lease check where longer) of the first change of the coordinator's "
                 "key ddp-launch/%s/coord",
                 id[k]);
        TH_ASSERT(&p[k], th_status(&p[k]) == 5);
        TH_ASSERT(&p[k], strstr(err(&p[k]), says) != NULL);
        TH_ASSERT(&p[k], strstr(out(&p[k]), "RANK=") == NULL);
        TH_ASSERT(&p[k], th_now() - started < 26);
        th_cleanup(&p[k]);
    }
    th_etcd_down(&etcd);
}

/* etcd stopped (SIGSTOP) as the job ends: the launcher's end (the prefix's delete, then the
 * lease's revoke) is bounded in all, not 2 s per endpoint per request (12 s with the one
 * member given 3 times here); a SIGTERM during it ends the launcher at once, its status the
 * job's. Stopped while the worker runs: the launcher ends at the keep-alive limit it names
 * (2 s after etcd's last answer here), not at the next keep-alive's timeout after it, and
 * tries no revoke that etcd would leave unanswered too. */
static void test_end_bounded_with_etcd_stopped(void **state)
{
    (void)state;
    th_etcd_t etcd;
    th_etcd_up(&etcd, 1);
    char *dir = th_tmpdir(), trigger[600], script[800], endpoints[600];
    snprintf(endpoints, sizeof endpoints, "%s,%s,%s", etcd.endpoints, etcd.endpoints,
             etcd.endpoints);
    const char *const env[] = {"DDP_LAUNCH_LOG_LEVEL=debug", NULL};
    static const char *const cases[] = {"the end bounded", "SIGTERM during the end",
                                        "stopped while the worker runs"};
    for (int c = 0; c < 3; c++) {
        th_proc_t p;
        snprintf(trigger, sizeof trigger, "%s/go%d", dir, c);
        snprintf(script, sizeof script, "while [ ! -e %s ]; do sleep 0.02; done", trigger);
        const char *const worker[] = {"/bin/sh", "-c", script, NULL};
        /* (the last case with a keep-alive limit of 2 s, for a short test) */
        start_worker(&p, worker, env, "--nnodes=1 --rdzv-id=end%d --rdzv-endpoint=%s %s", c,
                     endpoints, c < 2 ? "" : QUICK_LEASE);
        TH_ASSERT(&p, th_wait_output(&p, 2, "started worker rank 0", 1, 30));
        th_etcd_kill(&etcd, 0, SIGSTOP);
        double stopped = th_now();
        if (c < 2)
            TH_ASSERT(&p, th_touch(trigger));
        if (c == 1) { /* once the worker's end is seen: the job's end has begun */
            TH_ASSERT(&p, th_wait_output(&p, 2, "etcd: the job's end here", 1, 10));
            assert_int_equal(kill(p.pid, SIGTERM), 0);
        }
        TH_ASSERT(&p, th_wait_exit(&p, 30));
        double took = th_now() - stopped;
        printf("%s: the launcher ended %.2f s after etcd stopped\n", cases[c], took);
        th_etcd_kill(&etcd, 0, SIGCONT);
        static const char *const says[] = {"did not answer the job's end within 2.5 s",
                                           "received SIGTERM after the job ended",
                                           "did not answer a keep-alive for 2 s"};
        TH_ASSERT(&p, th_status(&p) == (c < 2 ? 0 : 5));
        TH_ASSERT(&p, strstr(err(&p), says[c]) != NULL);
        TH_ASSERT(&p, took < (c == 0 ? 5 : c == 1 ? 2 : 3));
        th_cleanup(&p);
    }
    th_rmtree(dir);
    free(dir);
    th_etcd_down(&etcd);
}

/* The elected launcher `a` (started first, waited for) and launcher `b` of one job on
 * `etcd`, each running its own worker program, with the same flags (`flags`; `b_flags`
 * more for b), b waited for until it joins or ends. */
static void elected_and_other(th_etcd_t *etcd, th_proc_t *a, const char *const *a_worker,
                              th_proc_t *b, const char *const *b_worker, const char *id,
                              const char *flags, const char *b_flags)
{
    start_worker(a, a_worker, NULL, "--rdzv-id=%s --rdzv-endpoint=%s %s", id, etcd->endpoints,
                 flags);
    TH_ASSERT(a, th_wait_output(a, 2, "joining the elastic job", 1, 30));
    TH_ASSERT(a, strstr(err(a), "etcd: elected") != NULL);
    start_worker(b, b_worker, NULL, "--rdzv-id=%s --rdzv-endpoint=%s %s %s", id, etcd->endpoints,
                 flags, b_flags);
    for (double deadline = th_now() + 30; th_now() < deadline;)
        if (th_wait_output(b, 2, "joining the elastic job", 1, 0.1) || th_wait_exit(b, 0.1))
            break;
}

/* The node rank a launcher said it has in its last round ("this is node N"), -1: none. */
static int node_rank_of(const th_proc_t *p)
{
    const char *at = NULL;
    for (const char *s = err(p); (s = strstr(s, "this is node ")) != NULL; s++)
        at = s;
    return at != NULL ? atoi(at + strlen("this is node ")) : -1;
}

/* The restart budget: a worker failing on the launcher etcd did not elect restarts the
 * whole job (round 1 on both: TORCHELASTIC_RESTART_COUNT=1), and after --max-restarts=1
 * the job ends on both with the worker's status; the elected launcher prints the job's
 * failure report naming the failed rank and its node, the other says where it is. */
static void test_restart_budget(void **state)
{
    (void)state;
    th_etcd_t etcd;
    th_etcd_up(&etcd, 3);
    const char *waits[] = {th_worker(), "wait-until", "9", NULL};
    const char *fails[] = {"/bin/sh", "-c", "echo \"attempt $TORCHELASTIC_RESTART_COUNT\"; exit 7",
                           NULL};
    th_proc_t a, b;
    elected_and_other(&etcd, &a, waits, &b, fails, "budget", "--nnodes=2 --max-restarts=1", "");
    for (th_proc_t *p = &a; p != NULL; p = p == &a ? &b : NULL) {
        TH_ASSERT(p, th_wait_exit(p, 60));
        TH_ASSERT(p, th_status(p) == 1);
    }
    TH_ASSERT(&b, strstr(out(&b), "attempt 0") != NULL && strstr(out(&b), "attempt 1") != NULL);
    TH_ASSERT(&a, strstr(err(&a), "no restart left") != NULL);
    int node = node_rank_of(&b);
    char rank[64], named[64];
    snprintf(rank, sizeof rank, "rank      : %d (local_rank: 0)", node);
    snprintf(named, sizeof named, "node %d (", node);
    const char *root = strstr(err(&a), "Root Cause");
    TH_ASSERT(&a,
              root != NULL && strstr(root, "exitcode  : 7") != NULL && strstr(root, rank) != NULL);
    TH_ASSERT(&a, strstr(err(&a), named) != NULL);
    TH_ASSERT(&b, strstr(err(&b), "Root Cause") == NULL);
    TH_ASSERT(&b, strstr(err(&b), "are in the job's failure report, printed by the launcher "
                                  "serving the store at ") != NULL);
    th_cleanup(&a);
    th_cleanup(&b);
    th_etcd_down(&etcd);
}

/* --exclude-after=1 under etcd, --nnodes=2:3: the launcher whose worker fails (the elected
 * one where `elected`) leaves the job, saying why, and the two others go on at the smaller
 * size and complete, the failed round counted as a restart (TORCHELASTIC_RESTART_COUNT=1);
 * where it served the store, they go on at the next one etcd elects (with c10d the job ends
 * with its store's host), which counts it too. (Once the round after the failure still
 * counted the leaving launcher and was re-formed without it: the coordinator is c10d's.) */
static void exclude_after(bool elected)
{
    th_etcd_t etcd;
    th_etcd_up(&etcd, 3);
    char *dir = th_tmpdir(), good_script[1200], bad_script[1200];
    snprintf(good_script, sizeof good_script,
             "if [ -e '%s/failed' ]; then echo \"DONE $GROUP_WORLD_SIZE restart "
             "$TORCHELASTIC_RESTART_COUNT\"; exit 0; fi; "
             "echo ready; exec sleep 600",
             dir);
    snprintf(bad_script, sizeof bad_script, ": > '%s/failed'; exit 3", dir);
    const char *good[] = {"/bin/sh", "-c", good_script, NULL};
    const char *bad[] = {"/bin/sh", "-c", bad_script, NULL};
    const char *flags = "--nnodes=2:3 --max-restarts=2 --exclude-after=1 "
                        "--rdzv-conf=last_call_timeout=1";
    th_proc_t a, b, c;
    elected_and_other(&etcd, &a, elected ? bad : good, &b, elected ? good : bad, "exclude", flags,
                      "");
    start_worker(&c, good, NULL, "--rdzv-id=exclude --rdzv-endpoint=%s %s", etcd.endpoints, flags);
    th_proc_t *all[] = {&a, &b, &c}, *leaver = elected ? &a : &b;
    int took_over = 0;
    for (int i = 0; i < 3; i++)
        TH_ASSERT(all[i], th_wait_exit(all[i], 60));
    TH_ASSERT(leaver, th_status(leaver) == 5);
    TH_ASSERT(leaver, strstr(err(leaver), "failed in 1 round(s) in a row (--exclude-after=1): it "
                                          "leaves the job") != NULL);
    TH_ASSERT(&a, elected || strstr(err(&a), "leaves the job: its workers failed in 1 round(s) "
                                             "in a row (--exclude-after=1)") != NULL);
    for (int i = 0; i < 3; i++) {
        if (all[i] == leaver)
            continue;
        TH_ASSERT(all[i], th_status(all[i]) == 0);
        TH_ASSERT(all[i], strstr(out(all[i]), "DONE 2 restart 1\n") != NULL);
        TH_ASSERT(all[i], !elected || strstr(err(all[i]), "the job goes on at the store of the "
                                                          "launcher etcd elects next") != NULL);
        took_over += strstr(err(all[i]), "taking the job over after round 0 (1 restart(s) "
                                         "spent)") != NULL;
    }
    assert_int_equal(took_over, elected ? 1 : 0);
    for (int i = 0; i < 3; i++)
        th_cleanup(all[i]);
    th_etcd_down(&etcd);
    th_rmtree(dir);
    free(dir);
}

static void test_exclude_after(void **state)
{
    (void)state;
    exclude_after(false);
}

static void test_exclude_after_on_the_elected_node(void **state)
{
    (void)state;
    exclude_after(true);
}

/* --straggler-action=exclude under etcd, --nnodes=1:2: one launcher's rank is slow (the
 * elected one's where `elected`) and named by the elected launcher's report; when rank 0
 * fails (once), the slow one's launcher leaves the job at the restart (status 5, said) and
 * the other goes on alone and succeeds: where the slow one served the store, at its own,
 * etcd electing it (with c10d the store's host stays, as its leaving would end the job). */
static void straggler_excluded(bool elected)
{
    th_etcd_t etcd;
    th_etcd_up(&etcd, 1);
    const char *fast[] = {getenv("DDP_TEST_COLLECTIVES"), "slow", "120", "2", "-", "100", NULL};
    const char *slow[] = {getenv("DDP_TEST_COLLECTIVES"), "slow", "120", "2", "0,1", "100", NULL};
    const char *flags = "--nnodes=1:2 --max-restarts=1 --straggler-report=1 "
                        "--straggler-action=exclude --rdzv-conf=last_call_timeout=1";
    th_proc_t a, b;
    double started = th_now();
    elected_and_other(&etcd, &a, elected ? slow : fast, &b, elected ? fast : slow,
                      elected ? "slow-elected" : "slow-other", flags, "");
    th_proc_t *leaver = elected ? &a : &b, *stayer = elected ? &b : &a;
    TH_ASSERT(leaver, th_wait_exit(leaver, 60));
    TH_ASSERT(stayer, th_wait_exit(stayer, 60));
    printf("straggler excluded (%s): %.2f s\n", elected ? "elected" : "other", th_now() - started);
    TH_ASSERT(&a, strstr(err(&a), "straggler: rank ") != NULL);
    TH_ASSERT(leaver, th_status(leaver) == 5);
    TH_ASSERT(leaver, strstr(err(leaver), "was named a straggler (--straggler-action=exclude): it "
                                          "leaves") != NULL);
    TH_ASSERT(stayer, th_status(stayer) == 0);
    TH_ASSERT(stayer, strstr(out(stayer), "slow: rank 0 of 1 finished 120 steps") != NULL);
    /* (The elected one's failed round counted: the round after is restart 1, where the
     * rank that failed at restart 0 does not fail again.) */
    TH_ASSERT(stayer, !elected || strstr(out(stayer), "fails after") == NULL);
    th_cleanup(&a);
    th_cleanup(&b);
    th_etcd_down(&etcd);
}

static void test_straggler_excluded(void **state)
{
    (void)state;
    straggler_excluded(false);
}

static void test_straggler_on_the_elected_node_excluded(void **state)
{
    (void)state;
    straggler_excluded(true);
}

/* --health-check failing on one launcher under etcd, --nnodes=2:2 with a hot spare: it
 * does not join (status 5, saying why), and the job forms and completes at the two
 * healthy ones. */
static void test_health_check(void **state)
{
    (void)state;
    th_etcd_t etcd;
    th_etcd_up(&etcd, 3);
    const char *works[] = {"/bin/sh", "-c", "echo \"DONE $GROUP_WORLD_SIZE\"", NULL};
    const char *flags = "--nnodes=2:2 --hot-spares=1";
    th_proc_t a, b, c;
    elected_and_other(&etcd, &a, works, &b, works, "health", flags, "--health-check=false");
    TH_ASSERT(&b, th_wait_exit(&b, 30)); /* (before the job can form and end without it) */
    TH_ASSERT(&b, th_status(&b) == 5);
    TH_ASSERT(&b, strstr(err(&b), "this node failed its health check: ") != NULL &&
                      strstr(err(&b), "it leaves the job") != NULL);
    start_worker(&c, works, NULL, "--rdzv-id=health --rdzv-endpoint=%s %s", etcd.endpoints, flags);
    for (th_proc_t *p = &a; p != NULL; p = p == &a ? &c : NULL) {
        TH_ASSERT(p, th_wait_exit(p, 60));
        TH_ASSERT(p, th_status(p) == 0);
        TH_ASSERT(p, strstr(out(p), "DONE 2\n") != NULL);
        th_cleanup(p);
    }
    th_cleanup(&b);
    th_etcd_down(&etcd);
}

/* Ctrl-Z under etcd on the elected launcher (`on_elected`) or the other of two, stopped 4 s
 * (past read_timeout, --hang-timeout and the keep-alive limit of 2 s): every node's workers
 * stop with it and the job goes on when it continues; nobody is judged lost, no store
 * moves. Meanwhile etcd ends the stopped launcher's lease (revoked, as at its end, 6 s
 * here: sooner than waiting it out): continued, it takes a new lease and puts its keys
 * again, the coordinator's too where it is the elected one. The workers tick into files
 * of their own. */
static void ctrl_z_pauses_the_job(bool on_elected)
{
    th_etcd_t etcd;
    th_etcd_up(&etcd, 3);
    char *dir = th_tmpdir(), ticks[700], prefix[700];
    snprintf(ticks, sizeof ticks, "TICKS=%s/ticks", dir);
    snprintf(prefix, sizeof prefix, "%s/ticks", dir);
    const char *env[] = {ticks, NULL};
    const char *script[] = {"/bin/sh", "-c",
                            "i=0; while [ $i -lt 60 ]; do echo \"tick $RANK $i\"; "
                            "echo $i >> \"$TICKS.$RANK\"; i=$((i + 1)); sleep 0.05; done",
                            NULL};
    th_proc_t node[2];
    for (int i = 0; i < 2; i++) {
        start_worker(&node[i], script, env,
                     "--nnodes=2 --rdzv-id=pause --rdzv-endpoint=%s --hang-timeout=2 "
                     "--rdzv-conf=read_timeout=2,keep_alive_interval=0.5,"
                     "keep_alive_max_attempt=2",
                     etcd.endpoints);
        TH_ASSERT(&node[i], th_wait_output(&node[i], 2, "joining the elastic job", 1, 30));
    }
    TH_ASSERT(&node[0], strstr(err(&node[0]), "etcd: elected") != NULL);
    th_proc_t *stop = on_elected ? &node[0] : &node[1], *other = on_elected ? &node[1] : &node[0];
    for (int i = 0; i < 300 && th_lines_in(prefix, 2) < 8; i++)
        usleep(20 * 1000);
    TH_ASSERT(stop, th_lines_in(prefix, 2) >= 8);
    TH_ASSERT(stop, kill(stop->pid, SIGTSTP) == 0);
    TH_ASSERT(other, th_wait_output(other, 2,
                                    "was stopped (Ctrl-Z there): this node's 1 worker(s) "
                                    "stop with it until it continues",
                                    1, 10));
    usleep(800 * 1000); /* the stopped node stops 0.3 s after telling */
    int before = th_lines_in(prefix, 2);
    TH_ASSERT(stop, revoke_leases(&etcd, "ddp-launch/pause/coord", on_elected) == 1);
    TH_ASSERT(other, !th_wait_exit(other, 4));
    int after = th_lines_in(prefix, 2);
    printf("ticks while stopped: %d, then %d\n", before, after);
    TH_ASSERT(stop, th_proc_state(stop->pid) == 'T');
    TH_ASSERT(stop, after == before && before < 120);
    TH_ASSERT(stop, kill(stop->pid, SIGCONT) == 0);
    for (int i = 0; i < 2; i++) {
        TH_ASSERT(&node[i], th_wait_exit(&node[i], 60));
        TH_ASSERT(&node[i], th_status(&node[i]) == 0);
        TH_ASSERT(&node[i], strstr(err(&node[i]), "hang") == NULL);
        TH_ASSERT(&node[i], strstr(err(&node[i]), "etcd elects next") == NULL);
        TH_ASSERT(&node[i], strstr(err(&node[i]), "round 1") == NULL);
    }
    TH_ASSERT(stop, strstr(err(stop), "continued: the 1 stopped worker(s) here and the other "
                                      "nodes' continue") != NULL);
    TH_ASSERT(stop, strstr(err(stop), "lease (") != NULL &&
                        strstr(err(stop), ") while the launcher was stopped") != NULL);
    TH_ASSERT(stop, strstr(err(stop), "the job goes on: taking a new lease") != NULL);
    TH_ASSERT(stop, strstr(err(stop), "joined again, under a new lease") != NULL);
    TH_ASSERT(other, strstr(err(other), "lease") == NULL);
    TH_ASSERT(other, strstr(err(other), " continued: so do this node's workers") != NULL);
    TH_ASSERT(stop, th_lines_in(prefix, 2) == 120);
    for (int i = 0; i < 2; i++)
        th_cleanup(&node[i]);
    th_etcd_down(&etcd);
    th_rmtree(dir);
    free(dir);
}

static void test_ctrl_z_on_another_node(void **state)
{
    (void)state;
    ctrl_z_pauses_the_job(false);
}

static void test_ctrl_z_on_the_elected_node(void **state)
{
    (void)state;
    ctrl_z_pauses_the_job(true);
}

/* --warm-restarts under etcd: after rank 1 fails (a Python worker exiting 3), round 1's
 * workers of both launchers are forked from their own zygote, as under c10d. */
static void test_warm_restart(void **state)
{
    (void)state;
    const char *python = getenv("DDP_TEST_PYTHON");
    if (python == NULL || *python == '\0' || access(python, X_OK) != 0) {
        printf("no python3: skipped\n");
        skip();
    }
    th_etcd_t etcd;
    th_etcd_up(&etcd, 3);
    char script[1024], python_exec[1100], trigger[1100];
    snprintf(script, sizeof script, "%s/tests/python/warm_plain.py", th_source_dir());
    snprintf(python_exec, sizeof python_exec, "PYTHON_EXEC=%s", python);
    const char *file = th_trigger_var(trigger, sizeof trigger);
    const char *program[] = {script, "show", NULL}, *env[] = {python_exec, trigger, NULL};
    th_proc_t node[2];
    for (int i = 0; i < 2; i++)
        start_worker(&node[i], program, env,
                     "--nnodes=2 --rdzv-id=warm --rdzv-endpoint=%s --max-restarts=1 "
                     "--warm-restarts --preload=json --shutdown-timeout=5",
                     etcd.endpoints);
    for (int i = 0; i < 2; i++)
        TH_ASSERT(&node[i], th_wait_output(&node[i], 2, "has imported json", 1, 60));
    TH_ASSERT(&node[0], th_touch(file));
    int shown = 0;
    for (int i = 0; i < 2; i++) {
        th_proc_t *p = &node[i];
        TH_ASSERT(p, th_wait_exit(p, 120));
        TH_ASSERT(p, th_status(p) == 0);
        TH_ASSERT(p, strstr(err(p), "1 of 1 workers of attempt 1 forked from the zygote") != NULL);
        shown += strstr(out(p), "SHOW rank 0 ") != NULL   ? 1
                 : strstr(out(p), "SHOW rank 1 ") != NULL ? 2
                                                          : 0;
    }
    assert_int_equal(shown, 3);
    for (int i = 0; i < 2; i++)
        th_cleanup(&node[i]);
    th_etcd_down(&etcd);
    unlink(file);
}

/* DDP_LAUNCH_SSH=... for a stand-in for ssh that runs the command here, written in `dir`. */
static void local_ssh(const char *dir, char *var, size_t cap)
{
    char path[700];
    snprintf(path, sizeof path, "%s/ssh.sh", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("# ssh's stand-in: -o BatchMode=yes HOST COMMAND, run here\nshift 3\n"
          "exec /bin/sh -c \"$1\"\n",
          f);
    assert_int_equal(fclose(f), 0);
    snprintf(var, cap, "DDP_LAUNCH_SSH=/bin/sh %s", path);
}

/* One command's launchers (every worker printing its environment) ended 0 as one job of 3
 * nodes, each node rank once. */
static void one_job_of_three(th_proc_t *p)
{
    TH_ASSERT(p, th_wait_exit(p, 60));
    TH_ASSERT(p, th_status(p) == 0);
    for (int r = 0; r < 3; r++) {
        char rank[32];
        snprintf(rank, sizeof rank, "\nGROUP_RANK=%d\n", r);
        TH_ASSERT(p, th_count(out(p), rank) == 1);
    }
    TH_ASSERT(p, th_count(out(p), "\nGROUP_WORLD_SIZE=3\n") == 3);
    TH_ASSERT(p, th_count(err(p), "etcd: elected") == 1);
}

/* --hosts with etcd: one command starts a launcher on every host (a local stand-in for
 * ssh), each with the same etcd endpoints and run id (one the command made: none was
 * given) and no place given: etcd elects one, node ranks go in joining order, and the job
 * of 3 runs to its end. --dry-run shows it. */
static void test_hosts_start_every_node(void **state)
{
    (void)state;
    th_etcd_t etcd;
    th_etcd_up(&etcd, 1);
    char *dir = th_tmpdir(), ssh_var[800];
    local_ssh(dir, ssh_var, sizeof ssh_var);
    const char *env[] = {ssh_var, NULL};
    th_proc_t p;
    start_worker(&p, NULL, env, "--hosts=h0,h1,h2 --rdzv-endpoint=%s --dry-run", etcd.endpoints);
    TH_ASSERT(&p, th_wait_exit(&p, 30));
    TH_ASSERT(&p, th_status(&p) == 0);
    const char *node2 = strstr(out(&p), "node 2 (h2): /bin/sh ");
    TH_ASSERT(&p, node2 != NULL && strstr(node2, " --nnodes=3:3 --rdzv-id=") != NULL &&
                      strstr(out(&p), "--node-rank") == NULL &&
                      strstr(out(&p), "--master-addr") == NULL);
    th_cleanup(&p);
    start_worker(&p, NULL, env, "--hosts=h0,h1,h2 --rdzv-endpoint=%s", etcd.endpoints);
    one_job_of_three(&p);
    char id[128], all_id[160];
    value_of(&p, "TORCHELASTIC_RUN_ID", id, sizeof id);
    TH_ASSERT(&p, strlen(id) == 36); /* a uuid */
    snprintf(all_id, sizeof all_id, "TORCHELASTIC_RUN_ID=%s\n", id);
    TH_ASSERT(&p, th_count(out(&p), all_id) == 3);
    th_cleanup(&p);
    th_etcd_down(&etcd);
    th_rmtree(dir);
    free(dir);
}

/* The process group of process `pid` (0: none). */
static int group_of(const char *pid)
{
    char path[128], stat[512];
    snprintf(path, sizeof path, "/proc/%s/stat", pid);
    FILE *f = fopen(path, "r");
    size_t n = f != NULL ? fread(stat, 1, sizeof stat - 1, f) : 0;
    if (f != NULL)
        fclose(f);
    stat[n] = '\0';
    const char *after = strrchr(stat, ')');
    int group = 0;
    return after != NULL && sscanf(after, ") %*c %*d %d", &group) == 1 ? group : 0;
}

/* The launcher that one command (--hosts) runs here (`here`): the child of `command` in
 * its process group; else one that it runs over ssh: a child in a group of its own (the
 * local stand-in for ssh execs the launcher); 0: none. */
static pid_t launcher_of(pid_t command, bool here)
{
    char path[128], children[512], self[32];
    snprintf(path, sizeof path, "/proc/%d/task/%d/children", (int)command, (int)command);
    snprintf(self, sizeof self, "%d", (int)command);
    FILE *f = fopen(path, "r");
    size_t n = f != NULL ? fread(children, 1, sizeof children - 1, f) : 0;
    if (f != NULL)
        fclose(f);
    children[n] = '\0';
    int group = group_of(self);
    for (char *save = NULL, *w = strtok_r(children, " \n", &save); w != NULL;
         w = strtok_r(NULL, " \n", &save))
        if (group != 0 && (group_of(w) == group) == here)
            return (pid_t)atoi(w);
    return 0;
}

/* One command (--hosts, 3 hosts, --nnodes=2:3, run id `id`) running `worker`; once each
 * host's worker is ready, `marker` made and the launcher here (`here`) or another host's
 * SIGKILLed: the command ends 0 (in `p`), the two others' workers done. */
static void one_launcher_lost(th_proc_t *p, const th_etcd_t *etcd, const char *const *worker,
                              const char *const *env, const char *marker, const char *id, bool here)
{
    unlink(marker);
    start_worker(p, worker, env,
                 "--hosts=h0,h1,h2 --nnodes=2:3 --rdzv-id=%s --rdzv-endpoint=%s "
                 "--rdzv-conf=last_call_timeout=2",
                 id, etcd->endpoints);
    TH_ASSERT(p, th_wait_output(p, 1, "ready 3\n", 3, 30));
    pid_t launcher = launcher_of(p->pid, here);
    TH_ASSERT(p, launcher > 0);
    TH_ASSERT(p, th_touch(marker));
    assert_int_equal(kill(launcher, SIGKILL), 0);
    TH_ASSERT(p, th_wait_exit(p, 60));
    TH_ASSERT(p, th_status(p) == 0);
    TH_ASSERT(p, th_count(out(p), "DONE 2\n") == 2);
}

/* --hosts with etcd, --nnodes=2:3: the launcher the command runs here SIGKILLed mid-job
 * is one more node lost: the two others finish the job as round 1 (etcd elects another
 * store where it was that launcher's), and the command's status is the job's, 0; the same
 * for another host's launcher. A SIGTERM to the command ends the job on every node. */
static void test_hosts_first_node_lost(void **state)
{
    (void)state;
    th_etcd_t etcd;
    th_etcd_up(&etcd, 1);
    char *dir = th_tmpdir(), ssh_var[800], script[1400], marker[700];
    local_ssh(dir, ssh_var, sizeof ssh_var);
    snprintf(marker, sizeof marker, "%s/go", dir);
    snprintf(script, sizeof script,
             "if [ -e '%s' ]; then echo \"DONE $GROUP_WORLD_SIZE\"; exit 0; fi; "
             "echo \"ready $GROUP_WORLD_SIZE\"; exec sleep 600",
             marker);
    const char *worker[] = {"/bin/sh", "-c", script, NULL}, *env[] = {ssh_var, NULL};
    th_proc_t p;
    one_launcher_lost(&p, &etcd, worker, env, marker, "here", true);
    TH_ASSERT(&p, strstr(err(&p), "round 1: 2 node(s)") != NULL);
    th_cleanup(&p);
    /* Another host's launcher SIGKILLed: the same, the command says so and goes on. */
    one_launcher_lost(&p, &etcd, worker, env, marker, "there", false);
    TH_ASSERT(&p,
              strstr(err(&p), "is out of the job, which goes on at the other 2 node(s)") != NULL);
    th_cleanup(&p);

    /* SIGTERM to the command: its launcher here ends the job on every node. */
    unlink(marker);
    start_worker(&p, worker, env, "--hosts=h0,h1,h2 --rdzv-id=term --rdzv-endpoint=%s",
                 etcd.endpoints);
    TH_ASSERT(&p, th_wait_output(&p, 1, "ready 3\n", 3, 30));
    double sent = th_now();
    assert_int_equal(kill(p.pid, SIGTERM), 0);
    TH_ASSERT(&p, th_wait_exit(&p, 30));
    printf("SIGTERM: every node ended %.2f s after\n", th_now() - sent);
    TH_ASSERT(&p, th_status(&p) == 128 + SIGTERM);
    TH_ASSERT(&p, th_now() - sent < 10);
    th_cleanup(&p);
    th_etcd_down(&etcd);
    th_rmtree(dir);
    free(dir);
}

/* Slurm's one command with etcd: in an allocation of 3 nodes outside a step, ddp-launch
 * runs itself on every node through srun (here a stand-in that runs the step's 3 tasks on
 * this machine, each with a task's Slurm variables); each takes the step's run id
 * (slurm-JOB.STEP) and etcd places them: one job of 3, node ranks once each. --dry-run
 * shows every node's same command. */
static void test_slurm_one_command(void **state)
{
    (void)state;
    th_etcd_t etcd;
    th_etcd_up(&etcd, 1);
    char *dir = th_tmpdir(), srun[700], path[800];
    snprintf(srun, sizeof srun, "%s/srun", dir);
    FILE *f = fopen(srun, "w");
    assert_non_null(f);
    fputs("#!/bin/sh\n# srun's stand-in: --nodes=N --ntasks=N --ntasks-per-node=1 --label "
          "PROGRAM ARGS, the N tasks here\nn=${1#--nodes=}; shift 4; pids=; i=0\n"
          "while [ $i -lt $n ]; do\n"
          "  SLURM_STEP_ID=0 SLURM_NODEID=$i SLURM_PROCID=$i SLURM_LOCALID=0 SLURM_NNODES=$n "
          "SLURM_STEP_NUM_NODES=$n SLURM_NTASKS=$n SLURM_STEP_TASKS_PER_NODE=\"1(x$n)\" "
          "SLURM_STEP_NODELIST=\"$SLURM_JOB_NODELIST\" \"$@\" &\n"
          "  pids=\"$pids $!\"; i=$((i + 1))\ndone\n"
          "rc=0; for p in $pids; do wait $p || rc=$?; done; exit $rc\n",
          f);
    assert_int_equal(fclose(f), 0);
    assert_int_equal(chmod(srun, 0755), 0);
    snprintf(path, sizeof path, "PATH=%s:/usr/bin:/bin", dir);
    const char *env[] = {path, "SLURM_JOB_ID=77", "SLURM_JOB_NUM_NODES=3",
                         "SLURM_JOB_NODELIST=n[1-3]", NULL};
    th_proc_t p;
    start_worker(&p, NULL, env, "--rdzv-endpoint=%s --dry-run", etcd.endpoints);
    TH_ASSERT(&p, th_wait_exit(&p, 30));
    TH_ASSERT(&p, th_status(&p) == 0);
    TH_ASSERT(&p, th_count(out(&p), " --nnodes=3:3 --rdzv-id=slurm-<job>.<step> ") == 3 &&
                      strstr(out(&p), "--node-rank") == NULL);
    th_cleanup(&p);
    start_worker(&p, NULL, env, "--rdzv-endpoint=%s", etcd.endpoints);
    one_job_of_three(&p);
    TH_ASSERT(&p, th_count(out(&p), "TORCHELASTIC_RUN_ID=slurm-77.0\n") == 3);
    th_cleanup(&p);
    th_etcd_down(&etcd);
    th_rmtree(dir);
    free(dir);
}

int main(int argc, char **argv)
{
    if (argc > 1)
        cmocka_set_test_filter(argv[1]);
    const struct CMUnitTest tests[] = {
        TH_TEST(test_flags_checked),
        TH_TEST(test_no_etcd_there),
        TH_TEST(test_tls),
        TH_TEST(test_three_launchers_form_one_job),
        TH_TEST(test_libddp_job),
        TH_TEST(test_torch_gloo_job),
        TH_TEST(test_run_ids_apart_leftovers_cleared),
        TH_TEST(test_same_host_and_pid),
        TH_TEST(test_signal_names_the_node),
        TH_TEST(test_dead_jobs_live_record_deposed),
        TH_TEST(test_dead_jobs_named_record_deposed),
        TH_TEST(test_dead_jobs_round_record_not_inherited),
        TH_TEST(test_coordinator_key_names_another_program),
        TH_TEST(test_coordinator_key_keeps_changing),
        TH_TEST(test_refused_by_a_live_elected_launcher),
        TH_TEST(test_ipv6_store_named_in_brackets),
        TH_TEST(test_end_bounded_with_etcd_stopped),
        TH_TEST(test_elected_launcher_lost_spare_takes_over),
        TH_TEST(test_elected_launcher_lost_job_shrinks),
        TH_TEST(test_elected_launcher_lost_torch_spare),
        TH_TEST(test_etcd_leader_lost_job_goes_on),
        TH_TEST(test_etcd_quorum_lost_ends_the_job),
        TH_TEST(test_lease_lost_while_forming_rejoins),
        TH_TEST(test_stopped_elected_leaves_for_the_new_one),
        TH_TEST(test_restart_budget),
        TH_TEST(test_exclude_after),
        TH_TEST(test_exclude_after_on_the_elected_node),
        TH_TEST(test_straggler_excluded),
        TH_TEST(test_straggler_on_the_elected_node_excluded),
        TH_TEST(test_health_check),
        TH_TEST(test_ctrl_z_on_another_node),
        TH_TEST(test_ctrl_z_on_the_elected_node),
        TH_TEST(test_warm_restart),
        TH_TEST(test_hosts_start_every_node),
        TH_TEST(test_hosts_first_node_lost),
        TH_TEST(test_slurm_one_command),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
