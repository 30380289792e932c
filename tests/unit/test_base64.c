/* Unit tests of common/base64: RFC 4648's vectors both ways, every byte value round-trips,
 * and what is not base64 is refused with the buffer unchanged. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "base64.h"
#include "error.h"

#include <string.h>

static const char *const vectors[][2] = {
    {"", ""},
    {"f", "Zg=="},
    {"fo", "Zm8="},
    {"foo", "Zm9v"},
    {"foob", "Zm9vYg=="},
    {"fooba", "Zm9vYmE="},
    {"foobar", "Zm9vYmFy"},
};

static void test_rfc_vectors(void **state)
{
    for (size_t i = 0; i < sizeof vectors / sizeof vectors[0]; i++) {
        ddp_buf_t enc = DDP_BUF_INIT, dec = DDP_BUF_INIT;
        assert_int_equal(ddp_base64_encode(&enc, vectors[i][0], strlen(vectors[i][0])), 0);
        assert_string_equal(ddp_buf_str(&enc), vectors[i][1]);
        assert_int_equal(ddp_base64_decode(&dec, vectors[i][1], strlen(vectors[i][1])), 0);
        assert_int_equal(dec.len, strlen(vectors[i][0]));
        assert_string_equal(ddp_buf_str(&dec), vectors[i][0]);
        ddp_buf_free(&enc);
        ddp_buf_free(&dec);
    }
}

static void test_every_byte_round_trips(void **state)
{
    unsigned char bytes[256 + 2];
    for (int i = 0; i < 258; i++)
        bytes[i] = (unsigned char)(255 - i % 256);
    for (size_t len = 0; len <= sizeof bytes; len++) {
        ddp_buf_t enc = DDP_BUF_INIT, dec = DDP_BUF_INIT;
        assert_int_equal(ddp_base64_encode(&enc, bytes, len), 0);
        assert_int_equal(enc.len % 4, 0);
        assert_int_equal(ddp_base64_decode(&dec, enc.data ? enc.data : "", enc.len), 0);
        assert_int_equal(dec.len, len);
        assert_memory_equal(dec.data ? dec.data : "", bytes, len);
        ddp_buf_free(&enc);
        ddp_buf_free(&dec);
    }
}

static void test_not_base64_is_refused(void **state)
{
    static const char *const bad[] = {
        "Zg=", "Zg", "Z===", "Zm9v!A==", "Zg==Zg==", "=Zg=", "Zm9\n", "Z\0g="};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ddp_buf_t out = DDP_BUF_INIT;
        assert_int_equal(ddp_buf_puts(&out, "kept"), 0);
        size_t len = i == 7 ? 4 : strlen(bad[i]);
        if (ddp_base64_decode(&out, bad[i], len) != DDP_EPARSE)
            fail_msg("'%s' was taken for base64", bad[i]);
        assert_string_equal(ddp_buf_str(&out), "kept");
        ddp_buf_free(&out);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rfc_vectors),
        cmocka_unit_test(test_every_byte_round_trips),
        cmocka_unit_test(test_not_base64_is_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
