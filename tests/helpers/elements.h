/* The test workers' view of one element of a buffer of any libddp dtype: its size, its
 * value as a double, and the half-precision conversions they need. Exact for the small
 * integers and halves the workers put in: no rounding. */
#ifndef DDP_TEST_ELEMENTS_H
#define DDP_TEST_ELEMENTS_H

#include <ddp.h>

#include <stddef.h>
#include <stdint.h>
#include <string.h>

static inline size_t element_size(ddp_dtype_t t)
{
    return t == DDP_FLOAT64 || t == DDP_INT64 ? 8 : t == DDP_FLOAT16 || t == DDP_BFLOAT16 ? 2 : 4;
}

static inline uint16_t element_to_half(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u, exp = (x >> 23) & 0xffu, mant = x & 0x7fffffu;
    if (exp == 0)
        return (uint16_t)sign;
    return (uint16_t)(sign | ((exp - 127 + 15) << 10) | (mant >> 13));
}

static inline float element_from_half(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
    uint32_t x = exp == 0 && mant == 0 ? sign : sign | ((exp - 15 + 127) << 23) | (mant << 13);
    float f;
    memcpy(&f, &x, 4);
    return f;
}

static inline double element_load(const void *buf, size_t i, ddp_dtype_t t)
{
    uint32_t x;
    float f;
    switch (t) {
    case DDP_FLOAT32:
        return ((const float *)buf)[i];
    case DDP_FLOAT64:
        return ((const double *)buf)[i];
    case DDP_INT32:
        return ((const int32_t *)buf)[i];
    case DDP_INT64:
        return (double)((const int64_t *)buf)[i];
    case DDP_FLOAT16:
        return element_from_half(((const uint16_t *)buf)[i]);
    case DDP_BFLOAT16:
        x = (uint32_t)((const uint16_t *)buf)[i] << 16;
        memcpy(&f, &x, 4);
        return f;
    }
    return 0;
}

#endif
