/* Base64 (RFC 4648, with padding), as etcd's JSON gateway writes keys and values. Pure. */
#ifndef DDP_COMMON_BASE64_H
#define DDP_COMMON_BASE64_H

#include "buf.h"

#include <stddef.h>

/* Appends the encoding of data[len] to `out`. 0 or -ENOMEM. */
int ddp_base64_encode(ddp_buf_t *out, const void *data, size_t len);

/* Appends the bytes text[len] encodes to `out` (NUL-terminated after them, as every
 * ddp_buf_t). 0, DDP_EPARSE (not base64: a bad character, bad padding, a length not a
 * multiple of 4), or -ENOMEM; `out` is unchanged on failure. */
int ddp_base64_decode(ddp_buf_t *out, const char *text, size_t len);

#endif
