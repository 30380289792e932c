/* Unit tests of common/parse.c. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "error.h"
#include "parse.h"

#include <errno.h>
#include <limits.h>
#include <string.h>

static void test_long(void **state)
{
    long v = 99;
    assert_int_equal(ddp_parse_long("42", 0, 100, &v), 0);
    assert_int_equal(v, 42);
    assert_int_equal(ddp_parse_long("-7", -10, 10, &v), 0);
    assert_int_equal(v, -7);
    static const char *const junk[] = {"", " 1", "1 ", "1x", "0x10", "--1", "1.5", "+"};
    for (size_t i = 0; i < sizeof junk / sizeof junk[0]; i++) {
        v = 99;
        assert_int_equal(ddp_parse_long(junk[i], LONG_MIN, LONG_MAX, &v), DDP_EPARSE);
        assert_int_equal(v, 99); /* untouched on failure */
    }
    assert_int_equal(ddp_parse_long("101", 0, 100, &v), -ERANGE);
    assert_int_equal(ddp_parse_long("99999999999999999999999", LONG_MIN, LONG_MAX, &v), -ERANGE);
    assert_int_equal(ddp_parse_long(NULL, 0, 1, &v), DDP_EPARSE);
}

static void test_double(void **state)
{
    double v = 0;
    assert_int_equal(ddp_parse_double("2.5", 0, 10, &v), 0);
    assert_true(v == 2.5);
    assert_int_equal(ddp_parse_double("1e-3", 0, 10, &v), 0);
    assert_int_equal(ddp_parse_double("nan", 0, 10, &v), DDP_EPARSE);
    assert_int_equal(ddp_parse_double("inf", 0, 10, &v), DDP_EPARSE);
    assert_int_equal(ddp_parse_double("11", 0, 10, &v), -ERANGE);
    assert_int_equal(ddp_parse_double("1s", 0, 10, &v), DDP_EPARSE);
}

static void test_bool(void **state)
{
    bool v = false;
    assert_int_equal(ddp_parse_bool("1", &v), 0);
    assert_true(v);
    assert_int_equal(ddp_parse_bool("False", &v), 0);
    assert_false(v);
    assert_int_equal(ddp_parse_bool("YES", &v), 0);
    assert_true(v);
    assert_int_equal(ddp_parse_bool("2", &v), DDP_EPARSE);
    assert_int_equal(ddp_parse_bool("", &v), DDP_EPARSE);
}

static void test_host_port(void **state)
{
    static const struct {
        const char *text;
        int rc;
        const char *host;
        int port;
    } cases[] = {
        {"node1:29400", 0, "node1", 29400},
        {"node1", 0, "node1", -1},
        {"10.0.0.1:0", 0, "10.0.0.1", 0},
        {"[::1]:5", 0, "::1", 5},
        {"[fe80::1%eth0]", 0, "fe80::1%eth0", -1},
        {"fe80::1", 0, "fe80::1", -1},
        {":80", DDP_EPARSE, NULL, 0},
        {"", DDP_EPARSE, NULL, 0},
        {"[::1", DDP_EPARSE, NULL, 0},
        {"[::1]x", DDP_EPARSE, NULL, 0},
        {"[]:1", DDP_EPARSE, NULL, 0},
        {"h:65536", DDP_EPARSE, NULL, 0},
        {"h:", DDP_EPARSE, NULL, 0},
        {"h:-1", DDP_EPARSE, NULL, 0},
        /* Several colons are an IPv6 address or nothing: never a host that takes them all. */
        {"http://127.0.0.1:2379", DDP_EPARSE, NULL, 0},
        {"127.0.0.1:2379:1", DDP_EPARSE, NULL, 0},
        {"etcd1:2379:2379", DDP_EPARSE, NULL, 0},
        {"fe80::1%", DDP_EPARSE, NULL, 0},
        {"[etcd1]:2379", DDP_EPARSE, NULL, 0},
        {"[127.0.0.1]:2379", DDP_EPARSE, NULL, 0},
        {"::ffff:10.0.0.1", 0, "::ffff:10.0.0.1", -1},
        {"user@127.0.0.1:2379", DDP_EPARSE, NULL, 0},
        {"127.0.0.1:2379/v3", DDP_EPARSE, NULL, 0},
        {"my_host-1.example.org:5", 0, "my_host-1.example.org", 5},
        {"a b", DDP_EPARSE, NULL, 0},
        {"[::]:7", 0, "::", 7},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char host[64] = "";
        int port = -1;
        int rc = ddp_parse_host_port(cases[i].text, -1, host, sizeof host, &port);
        if (rc != cases[i].rc)
            fail_msg("'%s': rc %d, expected %d", cases[i].text, rc, cases[i].rc);
        if (rc == 0) {
            assert_string_equal(host, cases[i].host);
            assert_int_equal(port, cases[i].port);
        }
    }
    char tiny[4];
    int port;
    assert_int_equal(ddp_parse_host_port("longhost:1", -1, tiny, sizeof tiny, &port),
                     -ENAMETOOLONG);
    char text[64];
    ddp_host_port_text(text, sizeof text, "::1", 5);
    assert_string_equal(text, "[::1]:5");
    ddp_host_port_text(text, sizeof text, "node1", 29400);
    assert_string_equal(text, "node1:29400");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_long),
        cmocka_unit_test(test_double),
        cmocka_unit_test(test_bool),
        cmocka_unit_test(test_host_port),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
