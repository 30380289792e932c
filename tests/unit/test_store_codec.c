/* Unit tests of common/store_codec.c: the captured bytes of a real torch 1.13 client,
 * generation 2 handshakes, incremental decoding, limits and hostile lengths, replies. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "error.h"
#include "store_codec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Hex text ("03 0500..") to bytes; returns the length. */
static size_t unhex(const char *hex, uint8_t *out, size_t cap)
{
    size_t n = 0;
    for (const char *p = hex; *p;) {
        if (*p == ' ') {
            p++;
            continue;
        }
        unsigned byte;
        assert_int_equal(sscanf(p, "%2x", &byte), 1);
        assert_true(n < cap);
        out[n++] = (uint8_t)byte;
        p += 2;
    }
    return n;
}

/* Decodes `len` bytes fed one at a time: 0 until the last byte, then the request. */
static void decode_bytewise(ddp_codec_gen_t gen, const uint8_t *bytes, size_t len,
                            ddp_codec_request_t *req)
{
    ddp_codec_decoder_t d;
    ddp_codec_decoder_init(&d, gen, NULL);
    for (size_t n = 0; n < len; n++) {
        int r = ddp_codec_decode(&d, bytes, n, req);
        if (r != 0)
            fail_msg("a prefix of %zu of %zu bytes decoded to %d", n, len, r);
        assert_true(d.need > n && d.need <= len); /* the hint never overshoots */
    }
    assert_int_equal(ddp_codec_decode(&d, bytes, len, req), 1);
    assert_int_equal(req->size, len);
}

/* The captures of tcpstore-protocol.md, from Debian's torch 1.13 client. */
static void test_captured_gen1_requests(void **state)
{
    uint8_t b[256];
    ddp_codec_request_t req;
    size_t n;

    n = unhex("03 0500000000000000 696e69742f 0100000000000000", b, sizeof b);
    decode_bytewise(DDP_CODEC_GEN1, b, n, &req);
    assert_int_equal(req.op, DDP_CODEC_ADD);
    assert_int_equal(req.key_len, 5);
    assert_memory_equal(req.key, "init/", 5);
    assert_int_equal(req.delta, 1);

    n = unhex("00 0300000000000000 2f6b31 0500000000000000 68656c6c6f", b, sizeof b);
    decode_bytewise(DDP_CODEC_GEN1, b, n, &req);
    assert_int_equal(req.op, DDP_CODEC_SET);
    assert_memory_equal(req.key, "/k1", 3);
    assert_int_equal(req.value_len, 5);
    assert_memory_equal(req.value, "hello", 5);

    n = unhex("05 0100000000000000 0300000000000000 2f6b31", b, sizeof b);
    decode_bytewise(DDP_CODEC_GEN1, b, n, &req);
    assert_int_equal(req.op, DDP_CODEC_WAIT);
    assert_int_equal(req.count, 1);
    ddp_codec_items_t it;
    const uint8_t *key, *value;
    size_t klen, vlen;
    ddp_codec_items_init(&it, &req);
    assert_true(ddp_codec_items_next(&it, &key, &klen, &value, &vlen));
    assert_int_equal(klen, 3);
    assert_memory_equal(key, "/k1", 3);
    assert_false(ddp_codec_items_next(&it, &key, &klen, &value, &vlen));

    n = unhex("02 0300000000000000 2f6b31", b, sizeof b);
    decode_bytewise(DDP_CODEC_GEN1, b, n, &req);
    assert_int_equal(req.op, DDP_CODEC_GET);

    n = unhex("03 0400000000000000 2f636e74 feffffffffffffff", b, sizeof b);
    decode_bytewise(DDP_CODEC_GEN1, b, n, &req);
    assert_int_equal(req.op, DDP_CODEC_ADD);
    assert_int_equal(req.delta, -2);

    n = unhex("01 0400000000000000 2f636173 0200000000000000 7631 0200000000000000 7632", b,
              sizeof b);
    decode_bytewise(DDP_CODEC_GEN1, b, n, &req);
    assert_int_equal(req.op, DDP_CODEC_COMPARE_SET);
    assert_memory_equal(req.key, "/cas", 4);
    assert_memory_equal(req.value, "v1", 2);
    assert_memory_equal(req.desired, "v2", 2);

    n = unhex("06", b, sizeof b);
    decode_bytewise(DDP_CODEC_GEN1, b, n, &req);
    assert_int_equal(req.op, DDP_CODEC_GETNUMKEYS);

    n = unhex("08 0300000000000000 2f6b31", b, sizeof b);
    decode_bytewise(DDP_CODEC_GEN1, b, n, &req);
    assert_int_equal(req.op, DDP_CODEC_DELETE_KEY);
}

static void test_encoding_matches_captures(void **state)
{
    uint8_t want[256];
    ddp_buf_t b = DDP_BUF_INIT;
    size_t n = unhex("01 0400000000000000 2f636173 0200000000000000 7631 0200000000000000 7632",
                     want, sizeof want);
    assert_int_equal(ddp_codec_put_op(&b, DDP_CODEC_GEN1, DDP_CODEC_COMPARE_SET), 0);
    ddp_codec_put_bytes(&b, "/cas", 4);
    ddp_codec_put_bytes(&b, "v1", 2);
    ddp_codec_put_bytes(&b, "v2", 2);
    assert_int_equal(b.len, n);
    assert_memory_equal(b.data, want, n);
    ddp_buf_clear(&b);
    /* The same request in generation 2 differs only in the opcode. */
    assert_int_equal(ddp_codec_put_op(&b, DDP_CODEC_GEN2, DDP_CODEC_COMPARE_SET), 0);
    assert_int_equal((uint8_t)b.data[0], 2);
    ddp_buf_clear(&b);
    /* Replies: GET's value, ADD's number. */
    n = unhex("0500000000000000 68656c6c6f", want, sizeof want);
    ddp_codec_put_bytes(&b, "hello", 5);
    assert_memory_equal(b.data, want, n);
    ddp_buf_clear(&b);
    n = unhex("feffffffffffffff", want, sizeof want);
    ddp_codec_put_i64(&b, -2);
    assert_memory_equal(b.data, want, n);
    /* An operation a generation lacks. */
    assert_int_equal(ddp_codec_put_op(&b, DDP_CODEC_GEN1, DDP_CODEC_PING), DDP_EPROTO);
    assert_int_equal(ddp_codec_put_op(&b, DDP_CODEC_GEN2, DDP_CODEC_WATCH_KEY), DDP_EPROTO);
    ddp_buf_free(&b);
}

static void test_generation_detection(void **state)
{
    static const struct {
        const char *hex;
        ddp_codec_gen_t gen;
    } cases[] = {
        {"", DDP_CODEC_GEN_UNKNOWN},
        {"00", DDP_CODEC_GEN_UNKNOWN},
        {"00 CE F7 85", DDP_CODEC_GEN_UNKNOWN},
        {"00 CE F7 85 3C", DDP_CODEC_GEN2},
        {"00 CE F7 85 3C 0D 01020304", DDP_CODEC_GEN2},
        {"06", DDP_CODEC_GEN1},    /* GETNUMKEYS: one byte, must not wait */
        {"03 05", DDP_CODEC_GEN1}, /* ADD init/ */
        {"00 03", DDP_CODEC_GEN1}, /* SET of a 3-byte key */
        {"00 CE F7 85 3D", DDP_CODEC_GEN1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint8_t b[32];
        size_t n = unhex(cases[i].hex, b, sizeof b);
        if (ddp_codec_detect(b, n) != cases[i].gen)
            fail_msg("'%s': detected %d", cases[i].hex, ddp_codec_detect(b, n));
    }
}

static void test_gen2_handshake_and_new_ops(void **state)
{
    uint8_t b[512];
    ddp_codec_decoder_t d;
    ddp_codec_request_t req;
    /* VALIDATE, PING, ADD init/, QUEUE_PUSH, QUEUE_POP, CANCEL_WAIT, MULTI_SET (2 pairs)
     * back to back, as one stream. */
    size_t n = unhex("00 CEF7853C"
                     "0D 78563412"
                     "04 0500000000000000 696e69742f 0100000000000000"
                     "0E 0100000000000000 71 0200000000000000 7878"
                     "0F 0100000000000000 71"
                     "0C"
                     "0B 0200000000000000 0100000000000000 61 0100000000000000 31"
                     "0100000000000000 62 0000000000000000",
                     b, sizeof b);
    ddp_codec_decoder_init(&d, DDP_CODEC_GEN2, NULL);
    size_t off = 0;
    static const ddp_codec_op_t ops[] = {
        DDP_CODEC_VALIDATE,  DDP_CODEC_PING,        DDP_CODEC_ADD,       DDP_CODEC_QUEUE_PUSH,
        DDP_CODEC_QUEUE_POP, DDP_CODEC_CANCEL_WAIT, DDP_CODEC_MULTI_SET,
    };
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
        assert_int_equal(ddp_codec_decode(&d, b + off, n - off, &req), 1);
        assert_int_equal(req.op, ops[i]);
        if (req.op == DDP_CODEC_VALIDATE)
            assert_int_equal(req.word, DDP_CODEC_MAGIC);
        if (req.op == DDP_CODEC_PING)
            assert_int_equal(req.word, 0x12345678u);
        if (req.op == DDP_CODEC_MULTI_SET) {
            ddp_codec_items_t it;
            const uint8_t *key, *value;
            size_t klen, vlen;
            assert_int_equal(req.count, 2);
            ddp_codec_items_init(&it, &req);
            assert_true(ddp_codec_items_next(&it, &key, &klen, &value, &vlen));
            assert_memory_equal(key, "a", 1);
            assert_memory_equal(value, "1", 1);
            assert_true(ddp_codec_items_next(&it, &key, &klen, &value, &vlen));
            assert_memory_equal(key, "b", 1);
            assert_int_equal(vlen, 0);
            assert_false(ddp_codec_items_next(&it, &key, &klen, &value, &vlen));
        }
        off += req.size;
    }
    assert_int_equal(off, n);
    assert_int_equal(ddp_codec_decode(&d, b + off, 0, &req), 0);
}

static void expect_error(ddp_codec_gen_t gen, const ddp_codec_limits_t *limits, const char *hex,
                         int err, const char *why)
{
    uint8_t b[256];
    size_t n = unhex(hex, b, sizeof b);
    ddp_codec_decoder_t d;
    ddp_codec_request_t req;
    ddp_codec_decoder_init(&d, gen, limits);
    int r = ddp_codec_decode(&d, b, n, &req);
    if (r != err || strstr(d.why, why) == NULL)
        fail_msg("'%s': %d '%s', expected %d '%s'", hex, r, d.why, err, why);
}

static void test_hostile_input(void **state)
{
    /* Unknown opcodes. */
    expect_error(DDP_CODEC_GEN1, NULL, "0D", DDP_EPROTO, "unknown opcode 13");
    expect_error(DDP_CODEC_GEN1, NULL, "FF", DDP_EPROTO, "unknown opcode 255");
    expect_error(DDP_CODEC_GEN2, NULL, "11", DDP_EPROTO, "unknown opcode 17");
    /* Lengths near 2^64 are refused from the 8-byte length alone, never summed. */
    expect_error(DDP_CODEC_GEN1, NULL, "02 ffffffffffffffff", DDP_ETOOBIG, "a key of 18446744073");
    expect_error(DDP_CODEC_GEN1, NULL, "00 0100000000000000 41 f8ffffffffffffff", DDP_ETOOBIG,
                 "a value of");
    expect_error(DDP_CODEC_GEN1, NULL, "05 ffffffffffffffff", DDP_ETOOBIG,
                 "keys in WAIT are over the limit of 131072");
    /* PyTorch's limits, and configured ones. */
    expect_error(DDP_CODEC_GEN2, NULL, "03 0120000000000000", DDP_ETOOBIG,
                 "over the limit of 8192");
    ddp_codec_limits_t small = {4, 8, 2, 64};
    expect_error(DDP_CODEC_GEN2, &small, "03 0500000000000000", DDP_ETOOBIG, "over the limit of 4");
    expect_error(DDP_CODEC_GEN2, &small, "01 0100000000000000 41 0900000000000000", DDP_ETOOBIG,
                 "a value of 9 bytes");
    expect_error(DDP_CODEC_GEN2, &small, "06 0300000000000000", DDP_ETOOBIG,
                 "3 keys in WAIT are over the limit of 2");
    /* The whole request: two 8-byte values and a 4-byte key are over 40 bytes. */
    ddp_codec_limits_t tight = {8, 8, 8, 40};
    expect_error(DDP_CODEC_GEN2, &tight,
                 "02 0400000000000000 6b6b6b6b 0800000000000000 0102030405060708 0800000000000000",
                 DDP_ETOOBIG, "request over the limit of 40 bytes");
}

static void test_every_prefix_is_incomplete(void **state)
{
    /* A MULTI_SET big enough to be read in many pieces, then any split in two. */
    ddp_buf_t b = DDP_BUF_INIT;
    ddp_codec_put_op(&b, DDP_CODEC_GEN2, DDP_CODEC_MULTI_SET);
    ddp_codec_put_u64(&b, 50);
    for (int i = 0; i < 50; i++) {
        char key[16];
        snprintf(key, sizeof key, "key%d", i);
        ddp_codec_put_bytes(&b, key, strlen(key));
        ddp_codec_put_bytes(&b, key, (size_t)i % 5);
    }
    ddp_codec_request_t req;
    decode_bytewise(DDP_CODEC_GEN2, (const uint8_t *)b.data, b.len, &req);
    assert_int_equal(req.count, 50);
    /* Split at every point: the second call completes it. */
    for (size_t cut = 0; cut < b.len; cut += 7) {
        ddp_codec_decoder_t d;
        ddp_codec_decoder_init(&d, DDP_CODEC_GEN2, NULL);
        assert_int_equal(ddp_codec_decode(&d, (const uint8_t *)b.data, cut, &req), 0);
        assert_int_equal(ddp_codec_decode(&d, (const uint8_t *)b.data, b.len, &req), 1);
        assert_int_equal(req.size, b.len);
        ddp_codec_items_t it;
        const uint8_t *key, *value;
        size_t klen, vlen, count = 0;
        ddp_codec_items_init(&it, &req);
        while (ddp_codec_items_next(&it, &key, &klen, &value, &vlen)) {
            assert_int_equal(vlen, count % 5);
            count++;
        }
        assert_int_equal(count, 50);
    }
    ddp_buf_free(&b);
}

static void test_replies(void **state)
{
    uint8_t b[128];
    ddp_codec_reply_t r;
    size_t need = 0, n;
    n = unhex("0500000000000000 68656c6c6f", b, sizeof b);
    for (size_t k = 0; k < n; k++)
        assert_int_equal(ddp_codec_decode_reply(DDP_CODEC_GET, 0, NULL, b, k, &r, &need), 0);
    assert_int_equal(ddp_codec_decode_reply(DDP_CODEC_GET, 0, NULL, b, n, &r, &need), 1);
    assert_int_equal(r.size, n);
    assert_memory_equal(r.value, "hello", 5);

    n = unhex("0200000000000000", b, sizeof b);
    assert_int_equal(ddp_codec_decode_reply(DDP_CODEC_ADD, 0, NULL, b, n, &r, &need), 1);
    assert_int_equal(r.number, 2);

    n = unhex("01", b, sizeof b);
    assert_int_equal(ddp_codec_decode_reply(DDP_CODEC_CHECK, 0, NULL, b, n, &r, &need), 1);
    assert_int_equal(r.byte, DDP_CODEC_NOT_READY);

    n = unhex("78563412", b, sizeof b);
    assert_int_equal(ddp_codec_decode_reply(DDP_CODEC_PING, 0, NULL, b, n, &r, &need), 1);
    assert_int_equal(r.word, 0x12345678u);

    n = unhex("0100000000000000 61 0000000000000000", b, sizeof b);
    assert_int_equal(ddp_codec_decode_reply(DDP_CODEC_MULTI_GET, 2, NULL, b, n - 1, &r, &need), 0);
    assert_int_equal(need, n);
    assert_int_equal(ddp_codec_decode_reply(DDP_CODEC_MULTI_GET, 2, NULL, b, n, &r, &need), 1);
    assert_int_equal(r.items_len, n);

    /* QUEUE_POP: the length before the pop, then the value only when there was one. */
    n = unhex("0000000000000000", b, sizeof b);
    assert_int_equal(ddp_codec_decode_reply(DDP_CODEC_QUEUE_POP, 0, NULL, b, n, &r, &need), 1);
    assert_int_equal(r.size, 8);
    n = unhex("0300000000000000 0200000000000000 7878", b, sizeof b);
    assert_int_equal(ddp_codec_decode_reply(DDP_CODEC_QUEUE_POP, 0, NULL, b, n, &r, &need), 1);
    assert_int_equal(r.number, 3);
    assert_memory_equal(r.value, "xx", 2);

    /* A reply value over the limit; an op without a reply. */
    n = unhex("ffffffffffffff7f", b, sizeof b);
    assert_int_equal(ddp_codec_decode_reply(DDP_CODEC_GET, 0, NULL, b, n, &r, &need), DDP_ETOOBIG);
    assert_int_equal(ddp_codec_decode_reply(DDP_CODEC_SET, 0, NULL, b, n, &r, &need), DDP_EPROTO);
    assert_false(ddp_codec_op_has_reply(DDP_CODEC_SET));
    assert_true(ddp_codec_op_has_reply(DDP_CODEC_GET));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_captured_gen1_requests),
        cmocka_unit_test(test_encoding_matches_captures),
        cmocka_unit_test(test_generation_detection),
        cmocka_unit_test(test_gen2_handshake_and_new_ops),
        cmocka_unit_test(test_hostile_input),
        cmocka_unit_test(test_every_prefix_is_incomplete),
        cmocka_unit_test(test_replies),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
