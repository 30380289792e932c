/* Unit tests: the environment record a node publishes, and the comparison of many. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "rdzv/envcheck.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void test_record(void **state)
{
    ddp_launch_config_t cfg;
    char *extra[] = {"MY_SETTING", "NOT_HERE"};
    char *envp[] = {"NCCL_SOCKET_IFNAME=eth0",
                    "NCCL_DEBUG_FILE=/tmp/n.%h.%p",
                    "HOME=/root",
                    "OMP_NUM_THREADS=4",
                    "TORCH_NCCL_BLOCKING_WAIT=1",
                    "MY_SETTING=x",
                    "CUDA_VISIBLE_DEVICES=0,1,3",
                    "NCCL_=odd",
                    NULL};
    ddp_buf_t out = DDP_BUF_INIT;
    ddp_config_defaults(&cfg);
    cfg.env_check = extra;
    cfg.nenv_check = 2;
    assert_int_equal(ddp_envcheck_record(&cfg, envp, &out), 0);
    const char *r = ddp_buf_str(&out);
    /* sorted; per-process NCCL variables, unrelated ones and a bare prefix left out */
    assert_non_null(strstr(r, "MY_SETTING=x\nNCCL_SOCKET_IFNAME=eth0\nOMP_NUM_THREADS=4\n"
                              "TORCH_NCCL_BLOCKING_WAIT=1\nNOT_HERE\n(visible GPUs)=3\n"));
    assert_null(strstr(r, "NCCL_DEBUG_FILE"));
    assert_null(strstr(r, "HOME"));
    assert_null(strstr(r, "NCCL_=odd"));
    cfg.env_check = NULL; /* not the config's to free */
    cfg.nenv_check = 0;
    ddp_config_free(&cfg);
    ddp_buf_free(&out);
}

static void test_compare_groups(void **state)
{
    const char *same[] = {"NCCL_IB_DISABLE=1\n", "NCCL_IB_DISABLE=1\n"};
    ddp_buf_t out = DDP_BUF_INIT;
    assert_int_equal(ddp_envcheck_compare(same, 2, 5, &out), 0);
    assert_int_equal(out.len, 0);
    const char *records[] = {"NCCL_IB_DISABLE=1\nNCCL_SOCKET_IFNAME=eth0\n",
                             "NCCL_IB_DISABLE=1\nNCCL_SOCKET_IFNAME=eth1\n",
                             "NCCL_SOCKET_IFNAME=eth0\nMINE=1\n", "NCCL_IB_DISABLE=1\nMINE\n",
                             NULL};
    assert_int_equal(ddp_envcheck_compare(records, 5, 5, &out), 3);
    const char *text = ddp_buf_str(&out);
    assert_non_null(
        strstr(text, "NCCL_IB_DISABLE differs: '1' on nodes 0-1, 3, unset on nodes 2, 4"));
    assert_non_null(strstr(text, "NCCL_SOCKET_IFNAME differs: 'eth0' on nodes 0, 2, 'eth1' on "
                                 "node 1, unset on nodes 3-4"));
    /* MINE: compared only where checked (nodes 2 and 3), not "unset" elsewhere */
    assert_non_null(strstr(text, "MINE differs: '1' on node 2, unset on node 3\n"));
    ddp_buf_clear(&out);
    const char *mine[] = {"MINE=1\n", "MINE\n", ""};
    assert_int_equal(ddp_envcheck_compare(mine, 3, 5, &out), 1);
    assert_non_null(strstr(ddp_buf_str(&out), "MINE differs: '1' on node 0, unset on node 1"));
    ddp_buf_free(&out);
}

/* A thousand nodes of which three differ: one line, the three named. A value per node
 * (a host name in a checked variable) stays a few values, not thousands. */
static void test_thousand_nodes_few_lines(void **state)
{
    enum { N = 1000 };
    static char storage[N][64];
    const char *records[N];
    for (int i = 0; i < N; i++) {
        snprintf(storage[i], sizeof storage[i], "NCCL_SOCKET_IFNAME=%s\nHOSTNAME_X=h%d\n",
                 i == 17 || i == 500 || i == 501 ? "ib0" : "eth0", i);
        records[i] = storage[i];
    }
    ddp_buf_t out = DDP_BUF_INIT;
    assert_int_equal(ddp_envcheck_compare(records, N, 5, &out), 2);
    const char *text = ddp_buf_str(&out);
    assert_non_null(strstr(text, "NCCL_SOCKET_IFNAME differs: 'eth0' on nodes 0-16, 18-499, "
                                 "502-999, 'ib0' on nodes 17, 500-501"));
    assert_non_null(strstr(text, "and more values on other nodes"));
    int lines = 1;
    for (const char *c = text; *c != '\0'; c++)
        lines += *c == '\n';
    assert_true(lines <= 3);
    assert_true(out.len < 1200);
    ddp_buf_free(&out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_record),
        cmocka_unit_test(test_compare_groups),
        cmocka_unit_test(test_thousand_nodes_few_lines),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
