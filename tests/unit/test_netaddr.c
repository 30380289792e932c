/* Unit tests: loopback told apart from other addresses, names from numeric addresses,
 * and the interface address offered where a name is loopback here (netaddr.h). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "netaddr.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>

static void test_literals(void **state)
{
    static const struct {
        const char *host;
        bool literal, loopback;
    } cases[] = {
        {"localhost", true, true},     {"LocalHost", true, true}, {"127.0.0.1", true, true},
        {"127.0.1.1", true, true},     {"::1", true, true},       {"10.1.2.3", true, false},
        {"fe80::1", true, false},      {"::", true, false},       {"node0", false, false},
        {"127.example", false, false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        bool loopback = !cases[i].loopback;
        assert_int_equal(ddp_host_is_literal(cases[i].host, &loopback), cases[i].literal);
        assert_int_equal(loopback, cases[i].loopback);
    }
    assert_true(ddp_host_is_literal("::1", NULL));
}

static void test_sockaddrs(void **state)
{
    struct sockaddr_in v4 = {.sin_family = AF_INET};
    struct sockaddr_in6 v6 = {.sin6_family = AF_INET6};
    inet_pton(AF_INET, "127.255.0.9", &v4.sin_addr);
    assert_true(ddp_addr_is_loopback((struct sockaddr *)&v4));
    inet_pton(AF_INET, "128.0.0.1", &v4.sin_addr);
    assert_false(ddp_addr_is_loopback((struct sockaddr *)&v4));
    inet_pton(AF_INET6, "::1", &v6.sin6_addr);
    assert_true(ddp_addr_is_loopback((struct sockaddr *)&v6));
    inet_pton(AF_INET6, "::ffff:127.0.0.1", &v6.sin6_addr); /* mapped: not ::1 */
    assert_false(ddp_addr_is_loopback((struct sockaddr *)&v6));
}

/* "localhost" is loopback here (a name that is not in /etc/hosts would ask DNS: none
 * here); the interface address, where this machine has one, is none of loopback's. */
static void test_here(void **state)
{
    char addr[64] = "", ifname[64] = "";
    assert_true(ddp_name_is_loopback_here("localhost", addr, sizeof addr));
    bool loopback = false;
    assert_true(ddp_host_is_literal(addr, &loopback) && loopback);
    if (ddp_interface_address(addr, sizeof addr, ifname, sizeof ifname)) {
        assert_true(ddp_host_is_literal(addr, &loopback));
        assert_false(loopback);
        assert_true(ifname[0] != '\0' && strcmp(ifname, "lo") != 0);
    }
}

/* NCCL_SOCKET_IFNAME's syntax: prefixes, "=" exact names, "^" all but those; loopback
 * where named. ddp_host_numeric resolves names and passes addresses through. */
static void test_selected_interface(void **state)
{
    char addr[64] = "", ifname[64] = "";
    assert_true(ddp_interface_selected("=lo", addr, sizeof addr, ifname, sizeof ifname));
    assert_string_equal(addr, "127.0.0.1");
    assert_string_equal(ifname, "lo");
    assert_true(ddp_interface_selected("nosuch,l", addr, sizeof addr, ifname, sizeof ifname));
    assert_string_equal(ifname, "lo");
    assert_false(ddp_interface_selected("=l", addr, sizeof addr, ifname, sizeof ifname));
    assert_false(ddp_interface_selected("nosuch", addr, sizeof addr, ifname, sizeof ifname));
    assert_false(ddp_interface_selected("", addr, sizeof addr, ifname, sizeof ifname));
    if (ddp_interface_selected("^lo", addr, sizeof addr, ifname, sizeof ifname))
        assert_string_not_equal(ifname, "lo");
    /* All but a name no interface has: any, loopback included. */
    assert_true(ddp_interface_selected("^=nosuch", addr, sizeof addr, ifname, sizeof ifname));
    assert_true(ddp_host_numeric("127.0.0.3", addr, sizeof addr));
    assert_string_equal(addr, "127.0.0.3");
    assert_true(ddp_host_numeric("localhost", addr, sizeof addr));
    assert_false(ddp_host_numeric("no-such-host.invalid", addr, sizeof addr));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_literals),
        cmocka_unit_test(test_sockaddrs),
        cmocka_unit_test(test_here),
        cmocka_unit_test(test_selected_interface),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
