/* The c10d TCPStore wire codec (see store_codec.h). Pure; allocates nothing. */
#include "store_codec.h"

#include "error.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* What each operation's request holds after its opcode, one letter a field:
 * K a key, V a value (the first V is the value, a second the desired value),
 * I an i64, W a u32, L a u64 count and that many keys, P a count and key/value pairs. */
static const char *const programs[DDP_CODEC__NOPS] = {
    [DDP_CODEC_VALIDATE] = "W",    [DDP_CODEC_SET] = "KV",       [DDP_CODEC_COMPARE_SET] = "KVV",
    [DDP_CODEC_GET] = "K",         [DDP_CODEC_ADD] = "KI",       [DDP_CODEC_CHECK] = "L",
    [DDP_CODEC_WAIT] = "L",        [DDP_CODEC_GETNUMKEYS] = "",  [DDP_CODEC_WATCH_KEY] = "K",
    [DDP_CODEC_DELETE_KEY] = "K",  [DDP_CODEC_APPEND] = "KV",    [DDP_CODEC_MULTI_GET] = "L",
    [DDP_CODEC_MULTI_SET] = "P",   [DDP_CODEC_CANCEL_WAIT] = "", [DDP_CODEC_PING] = "W",
    [DDP_CODEC_QUEUE_PUSH] = "KV", [DDP_CODEC_QUEUE_POP] = "K",  [DDP_CODEC_QUEUE_LEN] = "K",
};

static const char *const names[DDP_CODEC__NOPS] = {
    [DDP_CODEC_VALIDATE] = "VALIDATE",
    [DDP_CODEC_SET] = "SET",
    [DDP_CODEC_COMPARE_SET] = "COMPARE_SET",
    [DDP_CODEC_GET] = "GET",
    [DDP_CODEC_ADD] = "ADD",
    [DDP_CODEC_CHECK] = "CHECK",
    [DDP_CODEC_WAIT] = "WAIT",
    [DDP_CODEC_GETNUMKEYS] = "GETNUMKEYS",
    [DDP_CODEC_WATCH_KEY] = "WATCH_KEY",
    [DDP_CODEC_DELETE_KEY] = "DELETE_KEY",
    [DDP_CODEC_APPEND] = "APPEND",
    [DDP_CODEC_MULTI_GET] = "MULTI_GET",
    [DDP_CODEC_MULTI_SET] = "MULTI_SET",
    [DDP_CODEC_CANCEL_WAIT] = "CANCEL_WAIT",
    [DDP_CODEC_PING] = "PING",
    [DDP_CODEC_QUEUE_PUSH] = "QUEUE_PUSH",
    [DDP_CODEC_QUEUE_POP] = "QUEUE_POP",
    [DDP_CODEC_QUEUE_LEN] = "QUEUE_LEN",
};

/* Wire codes: torch 1.13/2.0 (generation 1) and 2.2+ (generation 2). */
static const ddp_codec_op_t gen1_ops[] = {
    DDP_CODEC_SET,         DDP_CODEC_COMPARE_SET, DDP_CODEC_GET,        DDP_CODEC_ADD,
    DDP_CODEC_CHECK,       DDP_CODEC_WAIT,        DDP_CODEC_GETNUMKEYS, DDP_CODEC_WATCH_KEY,
    DDP_CODEC_DELETE_KEY,  DDP_CODEC_APPEND,      DDP_CODEC_MULTI_GET,  DDP_CODEC_MULTI_SET,
    DDP_CODEC_CANCEL_WAIT,
};
static const ddp_codec_op_t gen2_ops[] = {
    DDP_CODEC_VALIDATE,    DDP_CODEC_SET,    DDP_CODEC_COMPARE_SET, DDP_CODEC_GET,
    DDP_CODEC_ADD,         DDP_CODEC_CHECK,  DDP_CODEC_WAIT,        DDP_CODEC_GETNUMKEYS,
    DDP_CODEC_DELETE_KEY,  DDP_CODEC_APPEND, DDP_CODEC_MULTI_GET,   DDP_CODEC_MULTI_SET,
    DDP_CODEC_CANCEL_WAIT, DDP_CODEC_PING,   DDP_CODEC_QUEUE_PUSH,  DDP_CODEC_QUEUE_POP,
    DDP_CODEC_QUEUE_LEN,
};

const char *ddp_codec_op_name(ddp_codec_op_t op)
{
    return op < DDP_CODEC__NOPS ? names[op] : "?";
}

static int op_from_code(ddp_codec_gen_t gen, uint8_t code)
{
    if (gen == DDP_CODEC_GEN1 && code < sizeof gen1_ops / sizeof gen1_ops[0])
        return (int)gen1_ops[code];
    if (gen == DDP_CODEC_GEN2 && code < sizeof gen2_ops / sizeof gen2_ops[0])
        return (int)gen2_ops[code];
    return -1;
}

int ddp_codec_op_code(ddp_codec_gen_t gen, ddp_codec_op_t op)
{
    const ddp_codec_op_t *ops = gen == DDP_CODEC_GEN1 ? gen1_ops : gen2_ops;
    size_t n = gen == DDP_CODEC_GEN1 ? sizeof gen1_ops / sizeof gen1_ops[0]
                                     : sizeof gen2_ops / sizeof gen2_ops[0];
    if (gen != DDP_CODEC_GEN1 && gen != DDP_CODEC_GEN2)
        return -1;
    for (size_t i = 0; i < n; i++) {
        if (ops[i] == op)
            return (int)i;
    }
    return -1;
}

bool ddp_codec_op_has_reply(ddp_codec_op_t op)
{
    return op != DDP_CODEC_SET && op != DDP_CODEC_APPEND && op != DDP_CODEC_MULTI_SET &&
           op != DDP_CODEC_QUEUE_PUSH && op != DDP_CODEC_VALIDATE;
}

ddp_codec_gen_t ddp_codec_detect(const uint8_t *buf, size_t len)
{
    static const uint8_t validate[5] = {0x00, 0xCE, 0xF7, 0x85, 0x3C};
    size_t n = len < sizeof validate ? len : sizeof validate;
    if (len == 0)
        return DDP_CODEC_GEN_UNKNOWN;
    if (memcmp(buf, validate, n) != 0)
        return DDP_CODEC_GEN1;
    return n == sizeof validate ? DDP_CODEC_GEN2 : DDP_CODEC_GEN_UNKNOWN;
}

static uint64_t load_u64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

void ddp_codec_decoder_init(ddp_codec_decoder_t *d, ddp_codec_gen_t gen,
                            const ddp_codec_limits_t *limits)
{
    memset(d, 0, sizeof *d);
    d->gen = gen;
    d->limits = limits ? *limits : DDP_CODEC_LIMITS_DEFAULT;
    d->op = -1;
}

__attribute__((format(printf, 3, 4))) static int fail(ddp_codec_decoder_t *d, int err,
                                                      const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(d->why, sizeof d->why, fmt, ap);
    va_end(ap);
    return err;
}

/* Makes sure `size` more bytes fit the request limit and are in the buffer.
 * 1: there; 0: d->need set; <0: over the limit. */
static int want(ddp_codec_decoder_t *d, size_t len, uint64_t size)
{
    if (size > d->limits.max_request || d->pos > d->limits.max_request - size)
        return fail(d, DDP_ETOOBIG, "%s request over the limit of %" PRIu64 " bytes",
                    ddp_codec_op_name((ddp_codec_op_t)d->op), d->limits.max_request);
    if (len < d->pos || len - d->pos < size) {
        d->need = d->pos + (size_t)size;
        return 0;
    }
    return 1;
}

/* A u64 length and its bytes, at most `max`. Sets *off and *slen on 1. */
static int read_string(ddp_codec_decoder_t *d, const uint8_t *buf, size_t len, uint64_t max,
                       const char *what, size_t *off, size_t *slen)
{
    int r = want(d, len, 8);
    if (r <= 0)
        return r;
    uint64_t n = load_u64(buf + d->pos);
    if (n > max)
        return fail(d, DDP_ETOOBIG, "%s of %" PRIu64 " bytes in %s is over the limit of %" PRIu64,
                    what, n, ddp_codec_op_name((ddp_codec_op_t)d->op), max);
    if ((r = want(d, len, 8 + n)) <= 0)
        return r;
    *off = d->pos + 8;
    *slen = (size_t)n;
    d->pos += 8 + (size_t)n;
    return 1;
}

static int read_fixed(ddp_codec_decoder_t *d, const uint8_t *buf, size_t len, void *out,
                      size_t size)
{
    int r = want(d, len, size);
    if (r <= 0)
        return r;
    memcpy(out, buf + d->pos, size);
    d->pos += size;
    return 1;
}

/* Reads the next field of the program (or the next list item). 1: read; 0: need
 * more bytes; <0: malformed. */
static int read_field(ddp_codec_decoder_t *d, const uint8_t *buf, size_t len)
{
    size_t off, slen;
    int r;
    char f = *d->fields;
    if ((f == 'L' || f == 'P') && d->items_left > 0) {
        /* One list item: its key, and for pairs its value (both read again if the
         * value is not there yet: a key is at most max_key bytes). */
        size_t start = d->pos;
        if ((r = read_string(d, buf, len, d->limits.max_key, "a key", &off, &slen)) <= 0)
            return r;
        if (f == 'P' &&
            (r = read_string(d, buf, len, d->limits.max_value, "a value", &off, &slen)) <= 0) {
            d->pos = start;
            return r;
        }
        d->items_left--;
        if (d->items_left == 0)
            d->fields++;
        return 1;
    }
    switch (f) {
    case 'K':
        r = read_string(d, buf, len, d->limits.max_key, "a key", &d->off[0], &d->len[0]);
        d->slot = r == 1 ? 1 : d->slot;
        break;
    case 'V':
        if (d->slot < 1 || d->slot > 2)
            return fail(d, DDP_EPROTO, "internal: bad field program");
        r = read_string(d, buf, len, d->limits.max_value, "a value", &d->off[d->slot],
                        &d->len[d->slot]);
        d->slot += r == 1;
        break;
    case 'I':
        r = read_fixed(d, buf, len, &d->delta, sizeof d->delta);
        break;
    case 'W':
        r = read_fixed(d, buf, len, &d->word, sizeof d->word);
        break;
    case 'L':
    case 'P':
        /* The count; the items follow (a count of 0 ends the field at once). */
        if ((r = read_fixed(d, buf, len, &d->count, sizeof d->count)) <= 0)
            return r;
        if (d->count > d->limits.max_keys)
            return fail(d, DDP_ETOOBIG, "%" PRIu64 " keys in %s are over the limit of %" PRIu64,
                        d->count, ddp_codec_op_name((ddp_codec_op_t)d->op), d->limits.max_keys);
        d->items_left = d->count;
        d->items_start = d->pos;
        if (d->count == 0)
            d->fields++;
        return 1;
    default:
        return fail(d, DDP_EPROTO, "internal: bad field program");
    }
    if (r == 1)
        d->fields++;
    return r;
}

int ddp_codec_decode(ddp_codec_decoder_t *d, const uint8_t *buf, size_t len,
                     ddp_codec_request_t *req)
{
    if (d->op < 0) {
        if (len < 1) {
            d->need = 1;
            return 0;
        }
        int op = op_from_code(d->gen, buf[0]);
        if (op < 0)
            return fail(d, DDP_EPROTO, "unknown opcode %u for a generation %d client", buf[0],
                        (int)d->gen);
        d->op = op;
        d->fields = programs[op];
        d->pos = 1;
        d->slot = 0;
        d->items_left = 0;
        d->items_start = 1;
        d->count = 0;
        memset(d->off, 0, sizeof d->off);
        memset(d->len, 0, sizeof d->len);
    }
    while (*d->fields != '\0') {
        int r = read_field(d, buf, len);
        if (r <= 0)
            return r;
    }
    memset(req, 0, sizeof *req);
    req->op = (ddp_codec_op_t)d->op;
    req->size = d->pos;
    req->key = buf + d->off[0];
    req->key_len = d->len[0];
    req->value = buf + d->off[1];
    req->value_len = d->len[1];
    req->desired = buf + d->off[2];
    req->desired_len = d->len[2];
    req->delta = d->delta;
    req->word = d->word;
    req->count = d->count;
    req->items = buf + d->items_start;
    req->items_len = d->count ? d->pos - d->items_start : 0;
    d->op = -1;
    return 1;
}

void ddp_codec_items_init(ddp_codec_items_t *it, const ddp_codec_request_t *req)
{
    it->p = req->items;
    it->end = req->items + req->items_len;
    it->pairs = req->op == DDP_CODEC_MULTI_SET;
}

/* Items were checked by the decoder; this only walks them. */
static const uint8_t *next_string(const uint8_t *p, const uint8_t **s, size_t *len)
{
    *len = (size_t)load_u64(p);
    *s = p + 8;
    return p + 8 + *len;
}

bool ddp_codec_items_next(ddp_codec_items_t *it, const uint8_t **key, size_t *key_len,
                          const uint8_t **value, size_t *value_len)
{
    if (it->p >= it->end)
        return false;
    it->p = next_string(it->p, key, key_len);
    if (it->pairs)
        it->p = next_string(it->p, value, value_len);
    return true;
}

int ddp_codec_put_u8(ddp_buf_t *out, uint8_t v)
{
    return ddp_buf_append(out, &v, sizeof v);
}

int ddp_codec_put_u32(ddp_buf_t *out, uint32_t v)
{
    return ddp_buf_append(out, &v, sizeof v);
}

int ddp_codec_put_u64(ddp_buf_t *out, uint64_t v)
{
    return ddp_buf_append(out, &v, sizeof v);
}

int ddp_codec_put_i64(ddp_buf_t *out, int64_t v)
{
    return ddp_buf_append(out, &v, sizeof v);
}

int ddp_codec_put_bytes(ddp_buf_t *out, const void *data, size_t len)
{
    int err = ddp_buf_reserve(out, 8 + len);
    if (err == 0)
        err = ddp_codec_put_u64(out, (uint64_t)len);
    return err ? err : ddp_buf_append(out, data, len);
}

int ddp_codec_put_op(ddp_buf_t *out, ddp_codec_gen_t gen, ddp_codec_op_t op)
{
    int code = ddp_codec_op_code(gen, op);
    return code < 0 ? DDP_EPROTO : ddp_codec_put_u8(out, (uint8_t)code);
}

/* Reply fields: 1 read, 0 need more (*need set), <0 over the limit. */
static int reply_bytes(const uint8_t *buf, size_t len, size_t *pos, uint64_t max,
                       const uint8_t **data, size_t *dlen, size_t *need)
{
    if (len - *pos < 8) {
        *need = *pos + 8;
        return 0;
    }
    uint64_t n = load_u64(buf + *pos);
    if (n > max)
        return DDP_ETOOBIG;
    if (len - *pos - 8 < n) {
        *need = *pos + 8 + (size_t)n;
        return 0;
    }
    *data = buf + *pos + 8;
    *dlen = (size_t)n;
    *pos += 8 + (size_t)n;
    return 1;
}

static int reply_fixed(const uint8_t *buf, size_t len, size_t *pos, void *out, size_t size,
                       size_t *need)
{
    if (len - *pos < size) {
        *need = *pos + size;
        return 0;
    }
    memcpy(out, buf + *pos, size);
    *pos += size;
    return 1;
}

int ddp_codec_decode_reply(ddp_codec_op_t op, uint64_t count, const ddp_codec_limits_t *limits,
                           const uint8_t *buf, size_t len, ddp_codec_reply_t *reply, size_t *need)
{
    uint64_t max_value = limits ? limits->max_value : DDP_CODEC_LIMITS_DEFAULT.max_value;
    size_t pos = 0;
    int r;
    memset(reply, 0, sizeof *reply);
    switch (op) {
    case DDP_CODEC_GET:
    case DDP_CODEC_COMPARE_SET:
        r = reply_bytes(buf, len, &pos, max_value, &reply->value, &reply->value_len, need);
        break;
    case DDP_CODEC_ADD:
    case DDP_CODEC_GETNUMKEYS:
    case DDP_CODEC_DELETE_KEY:
    case DDP_CODEC_QUEUE_LEN:
        r = reply_fixed(buf, len, &pos, &reply->number, sizeof reply->number, need);
        break;
    case DDP_CODEC_CHECK:
    case DDP_CODEC_WAIT:
    case DDP_CODEC_CANCEL_WAIT:
    case DDP_CODEC_WATCH_KEY:
        r = reply_fixed(buf, len, &pos, &reply->byte, 1, need);
        break;
    case DDP_CODEC_PING:
        r = reply_fixed(buf, len, &pos, &reply->word, sizeof reply->word, need);
        break;
    case DDP_CODEC_MULTI_GET:
        r = 1;
        for (uint64_t i = 0; i < count && r == 1; i++) {
            const uint8_t *v;
            size_t vlen;
            r = reply_bytes(buf, len, &pos, max_value, &v, &vlen, need);
        }
        reply->items = buf;
        reply->items_len = pos;
        break;
    case DDP_CODEC_QUEUE_POP:
        r = reply_fixed(buf, len, &pos, &reply->number, sizeof reply->number, need);
        if (r == 1 && reply->number > 0)
            r = reply_bytes(buf, len, &pos, max_value, &reply->value, &reply->value_len, need);
        break;
    default:
        return DDP_EPROTO;
    }
    if (r == 1)
        reply->size = pos;
    return r;
}
