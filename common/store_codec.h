/* The c10d TCPStore wire codec: both protocol generations, as pure functions.
 *
 * Requests are one opcode byte and their fields (u64-length strings, i64, u32, u64
 * counts) in host byte order; nothing frames a request. The decoder reads them
 * incrementally from the unconsumed bytes of a connection and keeps its progress
 * between calls, so a request arriving a byte at a time costs linear work. Input is
 * untrusted: every length is checked against limits before anything is sized by it,
 * and nothing here allocates. This is the part the fuzzer drives. */
#ifndef DDP_COMMON_STORE_CODEC_H
#define DDP_COMMON_STORE_CODEC_H

#include "buf.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum {
    DDP_CODEC_GEN_UNKNOWN = 0, /* not enough bytes yet to tell */
    DDP_CODEC_GEN1 = 1,        /* torch 1.13 and 2.0: no handshake */
    DDP_CODEC_GEN2 = 2,        /* torch 2.2 and later: VALIDATE + PING first */
} ddp_codec_gen_t;

#define DDP_CODEC_MAGIC 0x3C85F7CEu /* VALIDATE's u32 */

/* Operations of both generations in one numbering; the wire codes differ. */
typedef enum {
    DDP_CODEC_VALIDATE,
    DDP_CODEC_SET,
    DDP_CODEC_COMPARE_SET,
    DDP_CODEC_GET,
    DDP_CODEC_ADD,
    DDP_CODEC_CHECK,
    DDP_CODEC_WAIT,
    DDP_CODEC_GETNUMKEYS,
    DDP_CODEC_WATCH_KEY,
    DDP_CODEC_DELETE_KEY,
    DDP_CODEC_APPEND,
    DDP_CODEC_MULTI_GET,
    DDP_CODEC_MULTI_SET,
    DDP_CODEC_CANCEL_WAIT,
    DDP_CODEC_PING,
    DDP_CODEC_QUEUE_PUSH,
    DDP_CODEC_QUEUE_POP,
    DDP_CODEC_QUEUE_LEN,
    DDP_CODEC__NOPS
} ddp_codec_op_t;

/* One-byte replies. */
enum {
    DDP_CODEC_READY = 0,         /* CHECK */
    DDP_CODEC_NOT_READY = 1,     /* CHECK */
    DDP_CODEC_STOP_WAITING = 0,  /* WAIT */
    DDP_CODEC_WAIT_CANCELED = 1, /* CANCEL_WAIT */
};

/* The operation's name ("SET"), for messages. */
const char *ddp_codec_op_name(ddp_codec_op_t op);

/* The wire code of `op` in `gen`, or -1 when that generation lacks it. */
int ddp_codec_op_code(ddp_codec_gen_t gen, ddp_codec_op_t op);

/* Whether the server answers `op` (SET, APPEND, MULTI_SET, QUEUE_PUSH and VALIDATE
 * have no reply). */
bool ddp_codec_op_has_reply(ddp_codec_op_t op);

/* Tells the generation of a connection from its first bytes: GEN2 once they are
 * VALIDATE with the magic, GEN1 as soon as they cannot be (a first byte other than
 * 0, which a 1-byte gen-1 request like GETNUMKEYS would be), UNKNOWN meanwhile. A
 * gen-1 SET (opcode 0) is at least 17 bytes, so waiting for 5 never deadlocks. */
ddp_codec_gen_t ddp_codec_detect(const uint8_t *buf, size_t len);

typedef struct ddp_codec_limits_s {
    uint64_t max_key;     /* bytes of a key (PyTorch: 8 KiB) */
    uint64_t max_value;   /* bytes of a value (PyTorch: 8 MiB) */
    uint64_t max_keys;    /* keys in one CHECK, WAIT or MULTI_* (PyTorch: 131072) */
    uint64_t max_request; /* bytes of one whole request */
} ddp_codec_limits_t;

#define DDP_CODEC_LIMITS_DEFAULT \
    ((ddp_codec_limits_t){8192, (uint64_t)8 << 20, 131072, (uint64_t)256 << 20})

/* A decoded request; pointers are into the buffer given to the decoder. */
typedef struct ddp_codec_request_s {
    ddp_codec_op_t op;
    size_t size; /* bytes of the whole request, opcode included */
    const uint8_t *key;
    size_t key_len;
    const uint8_t *value; /* SET, APPEND, QUEUE_PUSH; COMPARE_SET's expected value */
    size_t value_len;
    const uint8_t *desired; /* COMPARE_SET */
    size_t desired_len;
    int64_t delta;        /* ADD */
    uint32_t word;        /* VALIDATE's magic, PING's nonce */
    uint64_t count;       /* CHECK, WAIT, MULTI_GET, MULTI_SET: how many keys */
    const uint8_t *items; /* those keys (with their values for MULTI_SET), checked */
    size_t items_len;
} ddp_codec_request_t;

/* Walks the keys (and values) of a CHECK, WAIT or MULTI_* request. */
typedef struct ddp_codec_items_s {
    const uint8_t *p, *end;
    bool pairs;
} ddp_codec_items_t;

void ddp_codec_items_init(ddp_codec_items_t *it, const ddp_codec_request_t *req);
/* The next key (and value for MULTI_SET); false at the end. */
bool ddp_codec_items_next(ddp_codec_items_t *it, const uint8_t **key, size_t *key_len,
                          const uint8_t **value, size_t *value_len);

typedef struct ddp_codec_decoder_s {
    ddp_codec_gen_t gen;
    ddp_codec_limits_t limits;
    /* Progress through the request at the start of the buffer. */
    int op;             /* -1 before the opcode is read */
    const char *fields; /* what is left to read: the op's field program */
    size_t pos;         /* bytes of the request read so far */
    int slot;           /* next string slot: 0 key, 1 value, 2 desired */
    size_t off[3], len[3];
    uint64_t items_left;
    size_t items_start;
    int64_t delta;
    uint32_t word;
    uint64_t count;
    size_t need;   /* after a 0 return: total bytes that can complete the next field */
    char why[160]; /* after an error: what was wrong */
} ddp_codec_decoder_t;

void ddp_codec_decoder_init(ddp_codec_decoder_t *d, ddp_codec_gen_t gen,
                            const ddp_codec_limits_t *limits);

/* Decodes the request at the start of `buf` (`len` unconsumed bytes; the caller keeps
 * them and appends what arrives, and may move them in memory). Returns 1 when the
 * request is complete (*req describes it, req->size bytes to drop; the decoder is
 * then ready for the next request), 0 when more bytes are needed (at least d->need in
 * all), DDP_EPROTO for a malformed request (unknown opcode, a key of the other
 * generation's syntax) or DDP_ETOOBIG for one over a limit, with d->why saying which.
 * After an error the connection cannot be resynchronized. */
int ddp_codec_decode(ddp_codec_decoder_t *d, const uint8_t *buf, size_t len,
                     ddp_codec_request_t *req);

/* Encoding, for requests and replies. Each returns 0 or -ENOMEM. */
int ddp_codec_put_u8(ddp_buf_t *out, uint8_t v);
int ddp_codec_put_u32(ddp_buf_t *out, uint32_t v);
int ddp_codec_put_u64(ddp_buf_t *out, uint64_t v);
int ddp_codec_put_i64(ddp_buf_t *out, int64_t v);
/* u64 length, then the bytes. */
int ddp_codec_put_bytes(ddp_buf_t *out, const void *data, size_t len);
/* The opcode byte of `op` in `gen`; DDP_EPROTO when that generation lacks it. */
int ddp_codec_put_op(ddp_buf_t *out, ddp_codec_gen_t gen, ddp_codec_op_t op);

/* A decoded reply; pointers are into the buffer given. */
typedef struct ddp_codec_reply_s {
    size_t size;          /* bytes of the reply */
    const uint8_t *value; /* GET, COMPARE_SET; QUEUE_POP when a value came */
    size_t value_len;
    int64_t number;       /* ADD, GETNUMKEYS, DELETE_KEY, QUEUE_LEN; QUEUE_POP's length */
    uint8_t byte;         /* CHECK, WAIT, CANCEL_WAIT, WATCH_KEY */
    uint32_t word;        /* PING */
    const uint8_t *items; /* MULTI_GET: `count` values, each u64 length and bytes */
    size_t items_len;
} ddp_codec_reply_t;

/* Decodes the reply to `op` at the start of `buf` (`count`: the number of keys of a
 * MULTI_GET). Returns 1 (complete), 0 (more bytes needed, at least *need in all) or
 * DDP_ETOOBIG (a value over limits->max_value) / DDP_EPROTO (no reply exists). */
int ddp_codec_decode_reply(ddp_codec_op_t op, uint64_t count, const ddp_codec_limits_t *limits,
                           const uint8_t *buf, size_t len, ddp_codec_reply_t *reply, size_t *need);

#endif
