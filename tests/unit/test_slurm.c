/* Slurm host lists, expanded as Slurm's `scontrol show hostnames` does. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "error.h"
#include "config/slurm.h"

#include <stdio.h>
#include <string.h>

static int collect(void *ctx, const char *host)
{
    ddp_buf_t *out = ctx;
    ddp_buf_printf(out, "%s%s", out->len ? " " : "", host);
    return 0;
}

/* The hosts of `list`, space-separated, or "error: <why>". */
static void check(const char *list, const char *want)
{
    ddp_buf_t out = DDP_BUF_INIT, why = DDP_BUF_INIT;
    int err = ddp_slurm_hostlist_each(list, collect, &out, &why);
    const char *got = out.len ? ddp_buf_str(&out) : "";
    if (err) {
        ddp_buf_clear(&out);
        ddp_buf_printf(&out, "error: %s", ddp_buf_str(&why));
        got = ddp_buf_str(&out);
    }
    if (strncmp(want, "error: ", 7) == 0 ? strstr(got, want + 7) == NULL || err == 0
                                         : strcmp(got, want) != 0)
        fail_msg("'%s' gave '%s', wanted '%s'", list, got, want);
    ddp_buf_free(&out);
    ddp_buf_free(&why);
}

static void test_expands_as_slurm(void **state)
{
    check("node01", "node01");
    check("node[01-04,07]", "node01 node02 node03 node04 node07");
    check("a,b[1-3],c", "a b1 b2 b3 c");
    check("n[8-11]", "n8 n9 n10 n11");
    check("n[098-101]", "n098 n099 n100 n101");
    check("rack[1-2]-n[01-02]", "rack1-n01 rack1-n02 rack2-n01 rack2-n02");
    check("gpu-[3],login", "gpu-3 login");
    check("x[0]y", "x0y");
}

static void test_rejects_bad_lists(void **state)
{
    check("", "error: empty");
    check("node[01-04", "error: '[' without ']'");
    check("node01]", "error: ']' without '['");
    check("node[]", "error: empty '[]'");
    check("node[4-2]", "error: upper bound is below");
    check("node[a-b]", "error: other than numbers");
    check("node[1-]", "error: without its upper bound");
    check("node[1,]", "error: ends with ','");
    check("a,,b", "error: empty host name");
    check("n[0-999999],m[0-9]", "error: more than 1000000 hosts");
}

static int stop_after_two(void *ctx, const char *host)
{
    int *seen = ctx;
    return ++*seen == 2;
}

static void test_first_host_and_early_stop(void **state)
{
    char first[64];
    ddp_buf_t why = DDP_BUF_INIT;
    assert_int_equal(ddp_slurm_first_host("node[07-09],login", first, sizeof first, &why), 0);
    assert_string_equal(first, "node07");
    /* A list too big to expand still gives its first host at once. */
    assert_int_equal(ddp_slurm_first_host("n[0-99999999]", first, sizeof first, &why), 0);
    assert_string_equal(first, "n0");
    char tiny[4];
    assert_int_equal(ddp_slurm_first_host("node1", tiny, sizeof tiny, &why), DDP_EPARSE);
    assert_non_null(strstr(ddp_buf_str(&why), "over 3 characters"));
    int seen = 0;
    assert_int_equal(ddp_slurm_hostlist_each("a[1-9]", stop_after_two, &seen, &why), 0);
    assert_int_equal(seen, 2);
    ddp_buf_free(&why);
}

/* Slurm's compressed task counts: "2(x3),1" is 2, 2, 2, 1. */
static void test_tasks_on_node(void **state)
{
    int count = -1;
    ddp_buf_t why = DDP_BUF_INIT;
    static const struct {
        const char *spec;
        int node, count;
    } good[] = {{"1", 0, 1},     {"1(x3)", 2, 1},       {"2(x3),1", 2, 2}, {"2(x3),1", 3, 1},
                {"1,4,1", 1, 4}, {"3(x2),1(x2)", 3, 1}, {"16", 0, 16}};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        assert_int_equal(ddp_slurm_tasks_on_node(good[i].spec, good[i].node, &count, &why), 0);
        assert_int_equal(count, good[i].count);
    }
    static const char *const bad[] = {"", "x", "2(x", "2(3)", "2(x0)", "2,", "2(x3)1", "-1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ddp_buf_clear(&why);
        assert_int_equal(ddp_slurm_tasks_on_node(bad[i], 0, &count, &why), DDP_EPARSE);
        assert_true(why.len > 0);
    }
    ddp_buf_clear(&why);
    assert_int_equal(ddp_slurm_tasks_on_node("2(x3)", 3, &count, &why), DDP_EPARSE);
    assert_non_null(strstr(ddp_buf_str(&why), "for 3 node(s), not node 3"));
    ddp_buf_free(&why);
}

/* One port a job step, the same wherever computed, never 29500 nor an ephemeral one;
 * two steps of one job differ (they may share a node: srun --overlap). */
static void test_port_of_a_job_step(void **state)
{
    assert_int_equal(ddp_slurm_port("12", NULL), DDP_SLURM_PORT_BASE + 12);
    assert_int_equal(ddp_slurm_port("12", "0"), DDP_SLURM_PORT_BASE + 12);
    assert_int_equal(ddp_slurm_port("12", "batch"), DDP_SLURM_PORT_BASE + 12);
    assert_int_equal(ddp_slurm_port("19012", NULL), DDP_SLURM_PORT_BASE + 12);
    assert_int_not_equal(ddp_slurm_port("13", NULL), ddp_slurm_port("12", NULL));
    assert_int_not_equal(ddp_slurm_port("12", "1"), ddp_slurm_port("12", "0"));
    assert_int_equal(ddp_slurm_port("12", "1"), DDP_SLURM_PORT_BASE + 12 + DDP_SLURM_STEP_STRIDE);
    for (unsigned long id = 0; id < 100000; id += 7) {
        char text[32], step[32];
        snprintf(text, sizeof text, "%lu", id);
        snprintf(step, sizeof step, "%lu", id % 50);
        int port = ddp_slurm_port(text, step);
        assert_true(port >= 10000 && port < 29000);
        /* A job's first steps all differ. */
        if (id % 50 > 0)
            assert_int_not_equal(port, ddp_slurm_port(text, "0"));
    }
    assert_int_equal(ddp_slurm_port("", NULL), -1);
    assert_int_equal(ddp_slurm_port("12_3", NULL), -1); /* an array job's id is not one number */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_expands_as_slurm),          cmocka_unit_test(test_rejects_bad_lists),
        cmocka_unit_test(test_first_host_and_early_stop), cmocka_unit_test(test_tasks_on_node),
        cmocka_unit_test(test_port_of_a_job_step),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
