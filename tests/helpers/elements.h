/* The test workers' view of one element of a buffer of any libddp dtype: its size, its
 * value as a double, and the half-precision conversions they need. Exact for the small
 * integers and halves the workers put in: no rounding. */
#ifndef DDP_TEST_ELEMENTS_H
#define DDP_TEST_ELEMENTS_H

#include <ddp.h>

#include <math.h>
#include <stdbool.h>
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

/* v rounded to the nearest f16 (bf16 where `bf`) value, ties to the even mantissa: a
 * reference by arithmetic (the value scaled to the type's unit in the last place, then
 * nearbyint in the default mode), independent of libddp's bit tricks. Finite results
 * only (the workers' values are small). */
static inline double element_round_half(double v, bool bf)
{
    int mant = bf ? 7 : 10, min_exp = bf ? -126 : -14, e;
    if (v == 0)
        return v;
    frexp(v, &e); /* |v| in [2^(e-1), 2^e) */
    e = e - 1 < min_exp ? min_exp : e - 1;
    double ulp = ldexp(1, e - mant);
    return nearbyint(v / ulp) * ulp;
}

/* Stores v, which the type holds exactly, as element i. */
static inline void element_store_half(void *buf, size_t i, ddp_dtype_t t, double v)
{
    float f = (float)v;
    uint32_t x;
    memcpy(&x, &f, 4);
    if (t == DDP_BFLOAT16)
        ((uint16_t *)buf)[i] = (uint16_t)(x >> 16);
    else if (f != 0 && fabs(v) < 0x1p-14) /* f16 subnormal: mant * 2^-24 */
        ((uint16_t *)buf)[i] = (uint16_t)((x >> 16 & 0x8000u) | (uint16_t)(fabs(v) * 0x1p24));
    else
        ((uint16_t *)buf)[i] = element_to_half(f);
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
