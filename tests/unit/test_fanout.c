/* Unit tests: the nodes --hosts and --hostfile name, and the job they make. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "config/config.h"
#include "error.h"
#include "fanout/fanout.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void test_hostfile(void **state)
{
    ddp_fanout_hosts_t h = {0};
    ddp_buf_t why = DDP_BUF_INIT;
    assert_int_equal(ddp_fanout_parse_hostfile("# a comment\n worker-1 slots=4\n\nworker-2\t# x\n"
                                               "worker-3 slots=1",
                                               &h, &why),
                     0);
    assert_int_equal(h.n, 3);
    assert_string_equal(h.names[0], "worker-1");
    assert_int_equal(h.slots[0], 4);
    assert_string_equal(h.names[1], "worker-2");
    assert_int_equal(h.slots[1], 0);
    assert_int_equal(h.slots[2], 1);
    ddp_fanout_hosts_free(&h);
    static const char *const bad[] = {"a slots=0\n", "a slots=x\n", "a gpus=2\n", "# none\n\n", ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ddp_buf_clear(&why);
        assert_int_equal(ddp_fanout_parse_hostfile(bad[i], &h, &why), DDP_EPARSE);
        assert_true(why.len > 0);
        ddp_fanout_hosts_free(&h);
    }
    /* MPICH's and Horovod's HOST:N; an ssh user; an IPv6 address is a name. */
    assert_int_equal(ddp_fanout_parse_hostfile("gpu1:8\nme@gpu2 slots=2\nfe80::1\n", &h, &why), 0);
    assert_int_equal(h.n, 3);
    assert_string_equal(h.names[0], "gpu1");
    assert_int_equal(h.slots[0], 8);
    assert_string_equal(h.names[1], "me@gpu2");
    assert_int_equal(h.slots[1], 2);
    assert_string_equal(h.names[2], "fe80::1");
    assert_int_equal(h.slots[2], 0);
    ddp_fanout_hosts_free(&h);
    static const char *const bad_names[] = {"a\n-oProxyCommand=x\n", "a\nb:0\n", "a\nb:x\n",
                                            "a\nb:2 slots=2\n",      "a\nme@\n", "a\n:4\n"};
    for (size_t i = 0; i < sizeof bad_names / sizeof bad_names[0]; i++) {
        ddp_buf_clear(&why);
        assert_int_equal(ddp_fanout_parse_hostfile(bad_names[i], &h, &why), DDP_EPARSE);
        assert_non_null(strstr(ddp_buf_str(&why), "line 2: '"));
        ddp_fanout_hosts_free(&h);
    }
    ddp_buf_clear(&why);
    assert_int_equal(ddp_fanout_parse_hostfile("a\nb slots=2 slots=x\n", &h, &why), DDP_EPARSE);
    assert_non_null(strstr(ddp_buf_str(&why), "line 2: 'slots=x'"));
    ddp_fanout_hosts_free(&h);
    /* Open MPI's hostfile: max_slots (or max-slots) taken, and slots may not pass it. */
    assert_int_equal(ddp_fanout_parse_hostfile("a slots=2 max_slots=4\nb max-slots=8\n", &h, &why),
                     0);
    assert_int_equal(h.n, 2);
    assert_int_equal(h.slots[0], 2);
    assert_int_equal(h.slots[1], 0);
    ddp_fanout_hosts_free(&h);
    ddp_buf_clear(&why);
    assert_int_equal(ddp_fanout_parse_hostfile("a\nb slots=4 max_slots=2\n", &h, &why), DDP_EPARSE);
    assert_non_null(strstr(ddp_buf_str(&why), "line 2: slots=4 is over its max_slots=2"));
    ddp_fanout_hosts_free(&h);
    ddp_buf_clear(&why);
    assert_int_equal(ddp_fanout_parse_hostfile("a max_slots=0\n", &h, &why), DDP_EPARSE);
    assert_non_null(strstr(ddp_buf_str(&why), "is not slots=N or max_slots=N"));
    ddp_fanout_hosts_free(&h);
    ddp_buf_free(&why);
}

/* --hosts in Slurm's syntax: the count is --nnodes, this node is 0, the first host is
 * the store's unless --master-addr says; slots give --nproc-per-node unless given. */
static void test_the_job_they_make(void **state)
{
    ddp_launch_config_t cfg;
    ddp_fanout_hosts_t h;
    ddp_buf_t err = DDP_BUF_INIT;
    ddp_config_defaults(&cfg);
    cfg.hosts = "gpu[07-09]";
    assert_int_equal(ddp_fanout_hosts(&cfg, &h, &err), 0);
    assert_int_equal(h.n, 3);
    assert_int_equal(cfg.nnodes_max, 3);
    assert_int_equal(cfg.nnodes_min, 3);
    assert_int_equal(cfg.node_rank, 0);
    assert_string_equal(cfg.master_addr, "gpu07");
    ddp_fanout_hosts_free(&h);

    char path[] = "/tmp/ddp-hostfile-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "a slots=3\nb slots=1\n", 20), 20);
    close(fd);
    ddp_config_defaults(&cfg);
    cfg.hostfile = path;
    snprintf(cfg.master_addr, sizeof cfg.master_addr, "10.0.0.9");
    assert_int_equal(ddp_fanout_hosts(&cfg, &h, &err), 0);
    assert_int_equal(cfg.nproc_per_node, 3);
    assert_string_equal(cfg.master_addr, "10.0.0.9");
    ddp_fanout_hosts_free(&h);
    ddp_config_defaults(&cfg);
    cfg.hostfile = path;
    cfg.nproc_per_node = 2;
    cfg.nproc_per_node_given = true;
    assert_int_equal(ddp_fanout_hosts(&cfg, &h, &err), 0);
    assert_int_equal(cfg.nproc_per_node, 2);
    ddp_fanout_hosts_free(&h);
    unlink(path);

    ddp_config_defaults(&cfg);
    cfg.hostfile = path; /* gone now */
    assert_int_equal(ddp_fanout_hosts(&cfg, &h, &err), DDP_EUSAGE);
    assert_non_null(strstr(ddp_buf_str(&err), "--hostfile: cannot read"));
    ddp_buf_clear(&err);
    /* The store is at the first host's address, without its ssh user; HOST:N its slots. */
    ddp_config_defaults(&cfg);
    cfg.hosts = "me@gpu[1-2]:4";
    assert_int_equal(ddp_fanout_hosts(&cfg, &h, &err), 0);
    assert_int_equal(h.n, 2);
    assert_string_equal(h.names[1], "me@gpu2");
    assert_string_equal(cfg.master_addr, "gpu1");
    assert_int_equal(cfg.nproc_per_node, 4);
    ddp_fanout_hosts_free(&h);
    ddp_config_defaults(&cfg);
    cfg.hosts = "a,-b";
    assert_int_equal(ddp_fanout_hosts(&cfg, &h, &err), DDP_EUSAGE);
    assert_non_null(strstr(ddp_buf_str(&err), "--hosts: '-b' is no host name (ssh would take"));
    ddp_buf_clear(&err);
    ddp_config_defaults(&cfg);
    cfg.hosts = "a,b";
    cfg.master_port = 0;
    assert_int_equal(ddp_fanout_hosts(&cfg, &h, &err), DDP_EUSAGE);
    assert_non_null(strstr(ddp_buf_str(&err), "serves one node only"));
    ddp_buf_free(&err);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hostfile),
        cmocka_unit_test(test_the_job_they_make),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
