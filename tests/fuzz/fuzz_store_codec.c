/* libFuzzer target: the store request decoder and the reply decoder on hostile bytes.
 *
 * Input: one control byte, then a byte stream. The control byte picks the generation
 * (bit 0), small or PyTorch's limits (bit 1), and the size of the pieces the stream
 * arrives in (bits 2-7), as a connection would deliver it. Every complete request is
 * checked against the bytes it came from; any violation aborts. */
#include "store_codec.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)  \
    do {             \
        if (!(cond)) \
            abort(); \
    } while (0)

static int within(const uint8_t *p, size_t n, const uint8_t *base, size_t len)
{
    return n == 0 || (p >= base && (size_t)(p - base) <= len && n <= len - (size_t)(p - base));
}

static void check_request(const ddp_codec_request_t *req, const uint8_t *base, size_t len)
{
    CHECK(req->size > 0 && req->size <= len);
    CHECK(req->op < DDP_CODEC__NOPS);
    CHECK(within(req->key, req->key_len, base, req->size));
    CHECK(within(req->value, req->value_len, base, req->size));
    CHECK(within(req->desired, req->desired_len, base, req->size));
    CHECK(within(req->items, req->items_len, base, req->size));
    ddp_codec_items_t it;
    const uint8_t *key, *value;
    size_t klen, vlen;
    uint64_t n = 0;
    ddp_codec_items_init(&it, req);
    while (ddp_codec_items_next(&it, &key, &klen, &value, &vlen)) {
        CHECK(within(key, klen, req->items, req->items_len));
        if (req->op == DDP_CODEC_MULTI_SET)
            CHECK(within(value, vlen, req->items, req->items_len));
        n++;
    }
    CHECK(n == req->count || (req->items_len == 0 && req->count == 0));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    ddp_codec_gen_t gen = (data[0] & 1) ? DDP_CODEC_GEN2 : DDP_CODEC_GEN1;
    ddp_codec_limits_t limits =
        (data[0] & 2) ? DDP_CODEC_LIMITS_DEFAULT : (ddp_codec_limits_t){16, 64, 8, 512};
    size_t chunk = (size_t)(data[0] >> 2) + 1;
    const uint8_t *stream = data + 1;
    size_t len = size - 1, start = 0, avail = 0;
    ddp_codec_decoder_t d;
    ddp_codec_request_t req;
    ddp_codec_decoder_init(&d, gen, &limits);
    while (avail < len) {
        avail = len - avail < chunk ? len : avail + chunk;
        for (;;) {
            int r = ddp_codec_decode(&d, stream + start, avail - start, &req);
            if (r < 0) {
                CHECK(d.why[0] != '\0');
                goto replies; /* the server closes this connection */
            }
            if (r == 0) {
                CHECK(d.need > avail - start);
                break;
            }
            check_request(&req, stream + start, avail - start);
            start += req.size;
        }
    }
replies:
    for (int op = 0; op < DDP_CODEC__NOPS; op++) {
        ddp_codec_reply_t reply;
        size_t need = 0;
        int r = ddp_codec_decode_reply((ddp_codec_op_t)op, data[0] & 7, &limits, stream, len,
                                       &reply, &need);
        if (r == 1)
            CHECK(reply.size <= len && within(reply.value, reply.value_len, stream, len));
        if (r == 0)
            CHECK(need > len);
    }
    return 0;
}
