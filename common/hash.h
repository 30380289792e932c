/* FNV-1a, 64 bits: the checksum of libddp's checkpoints, and how the tests compare the
 * bits every rank holds. Pure, header-only. */
#ifndef DDP_COMMON_HASH_H
#define DDP_COMMON_HASH_H

#include <stddef.h>
#include <stdint.h>

static inline uint64_t ddp_fnv1a64(const void *data, size_t len)
{
    const uint8_t *p = data;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < len; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

#endif
