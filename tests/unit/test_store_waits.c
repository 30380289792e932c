/* Unit tests of long waits in the store on the agent's side (launcher/agent/store_waits.c;
 * --store-wait-notice): a real store on the loop and a worker (a child process) blocked in
 * a WAIT for a key nobody sets: it is named with its rank and pid, and so are the ranks of
 * this node that do not wait. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "agent/store_waits.h"
#include "group_fixture.h"
#include "io.h"
#include "store_client.h"
#include "store/server.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static bool noticed(const group_fixture_t *f)
{
    char *log = gf_log(f);
    bool found = strstr(log, "not waiting in the store") != NULL;
    free(log);
    return found;
}

static void test_long_wait_named(void **state)
{
    (void)state;
    group_fixture_t f;
    gf_init(&f, 2);
    f.cfg.store_wait_notice = 0.3;
    ddp_store_server_options_t options = {
        .host = "127.0.0.1",
        .port = 0,
        .limits = DDP_CODEC_LIMITS_DEFAULT,
        .log = &f.log,
    };
    ddp_buf_t why = DDP_BUF_INIT;
    assert_int_equal(ddp_store_server_start(&f.loop, &options, &f.g.store, &why), 0);
    f.g.store_port = ddp_store_server_port(f.g.store);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) { /* worker rank 0: waits for a key nobody sets */
        setpgid(0, 0);
        ddp_store_client_t *client = NULL;
        ddp_store_client_options_t copts = DDP_STORE_CLIENT_OPTIONS_DEFAULT;
        const char *keys[] = {"peer_address"};
        if (ddp_store_client_connect("127.0.0.1", f.g.store_port, &copts, &client, NULL) == 0)
            (void)ddp_store_client_wait(client, keys, 1, 30);
        _exit(0);
    }
    setpgid(pid, pid);
    gf_adopt_worker(&f, 0, pid);
    gf_start_worker(&f, 1);
    ddp_store_waits_t *w = NULL;
    assert_int_equal(ddp_store_waits_new(&f.g, &w), 0);
    ddp_store_waits_attempt(w);
    assert_true(gf_run_until(&f, noticed, 10));
    char *log = gf_log(&f), expected[128];
    snprintf(expected, sizeof expected, "rank 0 (pid %d) has waited", (int)pid);
    assert_non_null(strstr(log, expected));
    assert_non_null(strstr(log, "in the store for 'peer_address', which nobody has set yet"));
    snprintf(expected, sizeof expected, "not waiting in the store: rank 1 (pid %d): it may not",
             (int)f.g.workers[1].pid);
    assert_non_null(strstr(log, expected));
    free(log);
    ddp_store_waits_stop(w);
    ddp_store_waits_close(w);
    ddp_store_server_close(f.g.store);
    gf_free(&f);
    ddp_store_waits_free(w);
    ddp_buf_free(&why);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_long_wait_named),
    };
    if (argc > 1)
        cmocka_set_test_filter(argv[1]);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
