/* Base64 (see base64.h). */
#include "base64.h"

#include "error.h"

#include <errno.h>
#include <stdint.h>

static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

int ddp_base64_encode(ddp_buf_t *out, const void *data, size_t len)
{
    const unsigned char *p = data;
    size_t need = (len + 2) / 3 * 4;
    if (ddp_buf_reserve(out, need) != 0)
        return -ENOMEM;
    char *w = out->data + out->len;
    for (size_t i = 0; i < len; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16;
        if (i + 1 < len)
            v |= (uint32_t)p[i + 1] << 8;
        if (i + 2 < len)
            v |= p[i + 2];
        *w++ = alphabet[v >> 18 & 63];
        *w++ = alphabet[v >> 12 & 63];
        *w++ = i + 1 < len ? alphabet[v >> 6 & 63] : '=';
        *w++ = i + 2 < len ? alphabet[v & 63] : '=';
    }
    out->len += need;
    out->data[out->len] = '\0';
    return 0;
}

static int value_of(char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    return c == '+' ? 62 : c == '/' ? 63 : -1;
}

int ddp_base64_decode(ddp_buf_t *out, const char *text, size_t len)
{
    if (len % 4 != 0)
        return DDP_EPARSE;
    if (ddp_buf_reserve(out, len / 4 * 3) != 0)
        return -ENOMEM;
    char *w = out->data + out->len;
    size_t n = 0;
    for (size_t i = 0; i < len; i += 4) {
        int pad = text[i + 3] == '=' ? text[i + 2] == '=' ? 2 : 1 : 0;
        uint32_t v = 0;
        for (int k = 0; k < 4; k++) {
            int d = k >= 4 - pad ? 0 : value_of(text[i + (size_t)k]);
            if (d < 0 || (pad > 0 && i + 4 != len)) { /* padding only at the end */
                w[0] = '\0';                          /* the buffer as it was */
                return DDP_EPARSE;
            }
            v = v << 6 | (uint32_t)d;
        }
        w[n++] = (char)(v >> 16);
        if (pad < 2)
            w[n++] = (char)(v >> 8 & 255);
        if (pad < 1)
            w[n++] = (char)(v & 255);
    }
    out->len += n;
    out->data[out->len] = '\0';
    return 0;
}
