/* One round for everyone: elastic (c10d) jobs of real launchers on 127.0.0.1 with a node
 * SIGKILLed at a random moment of a round (before it joins, during the last call,
 * while the round closes, after the workers started, while the job re-forms), with one
 * core kept busy by a spinning process. Every launcher that ran the job to its end must
 * have ended in the same round with the same members. DDP_TEST_STRESS_TRIALS sets the
 * number of trials (50). And a thousand static launchers of which three differ in one
 * variable: the environment check says so in one line. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "harness.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NODES 4 /* --nnodes=3:4; node 0 hosts the store and is never killed */

static void pause_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* A process that keeps one core busy until it is killed (by its pid). */
static pid_t spin_start(void)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        for (volatile unsigned long n = 0;; n++)
            ;
    }
    return pid;
}

static void start_node(th_proc_t *p, int port, const char *run_id, int node)
{
    char endpoint[64], conf[128], id[96];
    snprintf(endpoint, sizeof endpoint, "--rdzv-endpoint=127.0.0.1:%d", port);
    snprintf(conf, sizeof conf,
             "--rdzv-conf=last_call_timeout=0.5,join_timeout=30,timeout=3,is_host=%s",
             node == 0 ? "true" : "false");
    snprintf(id, sizeof id, "--rdzv-id=%s", run_id);
    const char *argv[] = {
        th_launcher(),        "--nnodes=3:4", "--rdzv-backend=c10d", endpoint,      conf, id,
        "--nproc-per-node=1", "--no-python",  th_worker(),           "until-world", "3",  NULL};
    const char *env[] = {"PET_MASTER_PORT", NULL}; /* the endpoint says where */
    th_start(p, argv, env);
}

/* The last "round R: K node(s), ... this is node X" a launcher said; false if none. */
static bool last_round(const th_proc_t *p, int *round, int *nnodes, int *node)
{
    const char *text = ddp_buf_str(&p->err), *at = NULL;
    for (const char *s = text; (s = strstr(s, "round ")) != NULL; s++) {
        int r, k, w, x;
        if (sscanf(s, "round %d: %d node(s), %d workers; this is node %d", &r, &k, &w, &x) == 4) {
            *round = r;
            *nnodes = k;
            *node = x;
            at = s;
        }
    }
    return at != NULL;
}

static void one_trial(int trial, unsigned seed)
{
    th_proc_t nodes[NODES];
    char run_id[64];
    int port = th_free_port();
    int before_last = (int)(seed % 800), before_kill = (int)(seed / 800 % 1500);
    int victim = 1 + (int)(seed / (800 * 1500) % 3);
    snprintf(run_id, sizeof run_id, "stress-%d-%d", (int)getpid(), trial);
    memset(nodes, 0, sizeof nodes);
    for (int i = 0; i < NODES - 1; i++)
        start_node(&nodes[i], port, run_id, i);
    pause_ms(before_last);
    start_node(&nodes[NODES - 1], port, run_id, NODES - 1);
    pause_ms(before_kill);
    kill(nodes[victim].pid, SIGKILL);
    for (int i = 0; i < NODES; i++)
        TH_ASSERT(&nodes[i], th_wait_exit(&nodes[i], 90));
    int round = -1, nnodes = -1, seen = 0, ranks = 0;
    for (int i = 0; i < NODES; i++) { /* node 0 first: it is in every round */
        th_proc_t *p = &nodes[i];
        int r, k, x;
        if (i == victim && th_status(p) == 128 + SIGKILL) {
            /* Killed after the job was done in a round it was a member of (its worker had
             * ended, its launcher was on its way out): that round's member all the same.
             * Killed during any other round, it is in none that the others end in. */
            if (last_round(p, &r, &k, &x) && r == round && k == nnodes) {
                TH_ASSERT(p, x >= 0 && x < k && !(ranks & (1 << x)));
                ranks |= 1 << x;
                seen++;
            }
            continue;
        }
        if (!last_round(p, &r, &k, &x)) {
            /* A latecomer to a job that had finished: told so, or, when the store had
             * gone with it already (or went while it connected), unable to reach it. */
            const char *err = ddp_buf_str(&p->err);
            TH_ASSERT(p, (th_status(p) == 0 && strstr(err, "finished before this node")) ||
                             (th_status(p) == 5 && (strstr(err, "could not be reached") ||
                                                    strstr(err, "lost the rendezvous store"))));
            continue;
        }
        TH_ASSERT(p, th_status(p) == 0);
        TH_ASSERT(p, round < 0 || (r == round && k == nnodes));
        TH_ASSERT(p, x >= 0 && x < k && !(ranks & (1 << x)));
        round = r;
        nnodes = k;
        ranks |= 1 << x;
        seen++;
    }
    printf("trial %d: node %d killed %d ms after the last started (%d ms after the first "
           "three); the job ended in round %d with %d node(s)\n",
           trial, victim, before_kill, before_last, round, nnodes);
    fflush(stdout);              /* the trial's line survives a failed assertion */
    assert_int_equal(nnodes, 3); /* the workers end only in a world of 3 */
    assert_int_equal(seen, nnodes);
    for (int i = 0; i < NODES; i++)
        th_cleanup(&nodes[i]);
}

static void test_one_round_for_everyone(void **state)
{
    const char *env = getenv("DDP_TEST_STRESS_TRIALS");
    int trials = env != NULL ? atoi(env) : 50;
    unsigned base = 0;
    (void)getrandom(&base, sizeof base, 0);
    printf("seed %u, %d trials, one core busy\n", base, trials);
    pid_t spinner = spin_start();
    for (int t = 0; t < trials; t++) {
        unsigned seed = base ^ ((unsigned)t * 2654435761u);
        one_trial(t, seed % (800u * 1500u * 3u));
    }
    kill(spinner, SIGKILL);
    waitpid(spinner, NULL, 0);
}

/* A thousand launchers (static, 127.0.0.1, a worker each) of which three have another
 * NCCL_SOCKET_IFNAME: node 0 warns in one line naming the three, not a line a node. */
static void test_thousand_nodes_three_differ(void **state)
{
    enum { N = 1000 };
    char cmd[1400], port[32], nnodes[32], run_id[64];
    int p = th_free_port();
    snprintf(port, sizeof port, "--master-port=%d", p);
    snprintf(nnodes, sizeof nnodes, "--nnodes=%d", N);
    snprintf(run_id, sizeof run_id, "--rdzv-id=envk%d", (int)getpid());
    snprintf(cmd, sizeof cmd,
             "i=1; while [ $i -lt %d ]; do "
             "if [ $i = 17 ] || [ $i = 500 ] || [ $i = 501 ]; then x=ib0; else x=eth0; fi; "
             "NCCL_SOCKET_IFNAME=$x '%s' %s --node-rank=$i --master-addr=127.0.0.1 %s %s "
             "--no-python /bin/true >/dev/null 2>&1 & i=$((i + 1)); done; wait",
             N, th_launcher(), nnodes, port, run_id);
    const char *others[] = {"/bin/sh", "-c", cmd, NULL};
    const char *node0[] = {th_launcher(), nnodes, "--node-rank=0", "--master-addr=127.0.0.1",
                           port,          run_id, "--no-python",   "/bin/true",
                           NULL};
    const char *env[] = {"NCCL_SOCKET_IFNAME=eth0", "PET_MASTER_PORT", NULL};
    th_proc_t rest, host;
    th_start(&rest, others, env);
    th_start(&host, node0, env);
    TH_ASSERT(&host, th_wait_exit(&host, 300));
    TH_ASSERT(&rest, th_wait_exit(&rest, 300));
    const char *err = ddp_buf_str(&host.err);
    TH_ASSERT(&host, th_status(&host) == 0);
    TH_ASSERT(&host, strstr(err, "NCCL_SOCKET_IFNAME differs: 'eth0' on nodes 0-16, 18-499, "
                                 "502-999, 'ib0' on nodes 17, 500-501\n") != NULL);
    TH_ASSERT(&host, th_count(err, "differs") == 1);
    th_cleanup(&host);
    th_cleanup(&rest);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        TH_TEST(test_thousand_nodes_three_differ),
        TH_TEST(test_one_round_for_everyone),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
