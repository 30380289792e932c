/* Unit tests of launcher/config/config.c: torchrun's defaults and who hosts the store. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "config/config.h"

#include <signal.h>
#include <string.h>

static void test_defaults(void **state)
{
    ddp_launch_config_t cfg;
    ddp_config_defaults(&cfg);
    assert_int_equal(cfg.nnodes_min, 1);
    assert_int_equal(cfg.nnodes_max, 1);
    assert_int_equal(cfg.master_port, 29500);
    assert_string_equal(cfg.master_addr, "127.0.0.1");
    assert_int_equal(cfg.rdzv_conf.is_host, -1);
    assert_true(cfg.rdzv_conf.keep_alive_interval == 1);
    assert_int_equal(cfg.rdzv_conf.keep_alive_max_attempt, 3);
    assert_int_equal(cfg.nsignals, 4);
    assert_int_equal(cfg.signals[0], SIGTERM);
    ddp_config_free(&cfg);
}

/* Who serves the store, for every kind of job: a table. */
static void test_store_host(void **state)
{
    static const struct {
        int min, max, node_rank, is_host;
        ddp_rdzv_backend_t backend;
        ddp_store_host_t host;
    } cases[] = {
        {1, 1, 0, -1, DDP_RDZV_STATIC, DDP_STORE_HOST_SELF},  /* one node */
        {1, 1, 0, -1, DDP_RDZV_C10D, DDP_STORE_HOST_SELF},    /* --standalone */
        {2, 2, 0, -1, DDP_RDZV_STATIC, DDP_STORE_HOST_SELF},  /* node 0 */
        {2, 2, 1, -1, DDP_RDZV_STATIC, DDP_STORE_HOST_NODE0}, /* another node */
        {2, 4, 0, -1, DDP_RDZV_C10D, DDP_STORE_HOST_IF_FREE},
        {2, 2, 0, -1, DDP_RDZV_C10D, DDP_STORE_HOST_IF_FREE},
        {2, 4, 0, 1, DDP_RDZV_C10D, DDP_STORE_HOST_SELF},
        {2, 4, 0, 0, DDP_RDZV_C10D, DDP_STORE_HOST_ELSEWHERE},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ddp_launch_config_t cfg;
        ddp_config_defaults(&cfg);
        cfg.nnodes_min = cases[i].min;
        cfg.nnodes_max = cases[i].max;
        cfg.node_rank = cases[i].node_rank;
        cfg.rdzv_conf.is_host = cases[i].is_host;
        cfg.rdzv_backend = cases[i].backend;
        if (ddp_config_store_host(&cfg) != cases[i].host)
            fail_msg("case %zu: host %d, expected %d", i, (int)ddp_config_store_host(&cfg),
                     (int)cases[i].host);
        ddp_config_free(&cfg);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_store_host),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
