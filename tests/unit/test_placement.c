/* Unit tests of where the job's store is (launcher/agent/placement.c): without etcd the
 * caller's configuration and nothing to do; with etcd where no member answers, the job
 * ends (status 5) naming the endpoints, the agent asked through ops->end_job and no
 * rendezvous started; the configuration the agent runs with is the part's own copy. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "agent/placement.h"
#include "group_fixture.h"

#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* A loopback port nobody listens on (bound, then closed). */
static int closed_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof sa;
    assert_true(fd >= 0);
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
    close(fd);
    return ntohs(sa.sin_port);
}

static void test_other_backends_untouched(void **state)
{
    (void)state;
    group_fixture_t f;
    gf_init(&f, 1);
    ddp_placement_t *p = NULL;
    assert_int_equal(ddp_placement_new(&f.g, &f.cfg, &p), 0);
    assert_ptr_equal(ddp_placement_cfg(p), &f.cfg);
    f.g.state = DDP_AGENT_WAITING;
    ddp_placement_rejoin(p); /* no store was lost: nothing */
    assert_int_equal(f.rendezvous_started, 0);
    assert_int_equal(f.ended, -1);
    ddp_placement_close(p, false, NULL, NULL);
    gf_free(&f);
    ddp_placement_free(p);
}

static bool ended(const group_fixture_t *f)
{
    return f->ended >= 0;
}

static void test_no_etcd_ends_the_job(void **state)
{
    (void)state;
    group_fixture_t f;
    gf_init(&f, 1);
    char endpoint[64];
    snprintf(endpoint, sizeof endpoint, "127.0.0.1:%d", closed_port());
    char **endpoints = calloc(2, sizeof *endpoints); /* owned by the configuration */
    assert_non_null(endpoints);
    endpoints[0] = strdup(endpoint);
    f.cfg.rdzv_backend = DDP_RDZV_ETCD;
    f.cfg.nnodes_min = 2;
    f.cfg.nnodes_max = 2;
    free(f.cfg.run_id);
    f.cfg.run_id = strdup("placement-test");
    snprintf(f.cfg.master_addr, sizeof f.cfg.master_addr, "127.0.0.1");
    f.cfg.etcd.given = strdup(endpoint);
    f.cfg.etcd.endpoints = endpoints;
    f.cfg.etcd.nendpoints = 1;
    ddp_placement_t *p = NULL;
    assert_int_equal(ddp_placement_new(&f.g, &f.cfg, &p), 0);
    const ddp_launch_config_t *cfg = ddp_placement_cfg(p);
    assert_ptr_not_equal(cfg, &f.cfg); /* the part's copy, which the election fills in */
    assert_string_equal(cfg->etcd.given, endpoint);
    f.g.cfg = cfg;
    f.g.state = DDP_AGENT_WAITING;
    ddp_placement_start(p);
    assert_true(gf_run_until(&f, ended, 30));
    assert_int_equal(f.ended, DDP_EXIT_RDZV_FAILED);
    assert_int_equal(f.rendezvous_started, 0);
    char *log = gf_log(&f);
    if (strstr(log, endpoint) == NULL)
        fail_msg("the endpoint is not named: %s", log);
    free(log);
    ddp_placement_close(p, false, NULL, NULL);
    gf_free(&f);
    ddp_placement_free(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_other_backends_untouched),
        cmocka_unit_test(test_no_etcd_ends_the_job),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
