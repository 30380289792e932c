/* Element-wise reduction kernels of the CPU backend, one loop per type and operation so
 * the compiler can vectorize them (this file is built at -O3: see meson.build). Pure;
 * any thread. */
#include "internal.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

size_t ddp_dtype_size(ddp_dtype_t dtype)
{
    switch (dtype) {
    case DDP_FLOAT32:
    case DDP_INT32:
        return 4;
    case DDP_FLOAT64:
    case DDP_INT64:
        return 8;
    case DDP_FLOAT16:
    case DDP_BFLOAT16:
        return 2;
    }
    return 0;
}

#define REDUCE_LOOPS(T)                           \
    do {                                          \
        T *restrict d = dst;                      \
        const T *restrict s = src;                \
        switch (op) {                             \
        case DDP_SUM:                             \
        case DDP_AVG:                             \
            for (size_t i = 0; i < count; i++)    \
                d[i] += s[i];                     \
            break;                                \
        case DDP_MIN:                             \
            for (size_t i = 0; i < count; i++)    \
                d[i] = s[i] < d[i] ? s[i] : d[i]; \
            break;                                \
        case DDP_MAX:                             \
            for (size_t i = 0; i < count; i++)    \
                d[i] = s[i] > d[i] ? s[i] : d[i]; \
            break;                                \
        }                                         \
    } while (0)

/* The last step of a float average: (d + s) / n. Where n is a power of two, x * (1/n)
 * is the same correctly rounded value as x / n, and a multiplication is cheaper. */
#define AVERAGE_LOOP(T)                                 \
    do {                                                \
        T *restrict d = dst;                            \
        const T *restrict s = src;                      \
        T n = (T)average_over, inv = (T)1 / n;          \
        if ((average_over & (average_over - 1)) == 0) { \
            for (size_t i = 0; i < count; i++)          \
                d[i] = (d[i] + s[i]) * inv;             \
        } else {                                        \
            for (size_t i = 0; i < count; i++)          \
                d[i] = (d[i] + s[i]) / n;               \
        }                                               \
    } while (0)

/* Integer sums wrap, as they do in PyTorch and NCCL (unsigned arithmetic keeps that
 * defined); an average divides the wrapped sum, signed. */
#define INTEGER_LOOPS(S, U)                                      \
    do {                                                         \
        if (average) {                                           \
            S *restrict d = dst;                                 \
            const S *restrict s = src;                           \
            for (size_t i = 0; i < count; i++)                   \
                d[i] = (S)((U)d[i] + (U)s[i]) / (S)average_over; \
        } else if (op == DDP_SUM || op == DDP_AVG) {             \
            U *restrict d = dst;                                 \
            const U *restrict s = src;                           \
            for (size_t i = 0; i < count; i++)                   \
                d[i] += s[i];                                    \
        } else {                                                 \
            REDUCE_LOOPS(S);                                     \
        }                                                        \
    } while (0)

static void reduce_half(uint16_t *dst, const uint16_t *src, size_t count, ddp_dtype_t dtype,
                        ddp_reduce_op_t op, int average_over);

void ddp_reduce_into(void *dst, const void *src, size_t count, ddp_dtype_t dtype,
                     ddp_reduce_op_t op, int average_over)
{
    bool average = op == DDP_AVG && average_over > 0;
    switch (dtype) {
    case DDP_FLOAT32:
        if (average)
            AVERAGE_LOOP(float);
        else
            REDUCE_LOOPS(float);
        break;
    case DDP_FLOAT64:
        if (average)
            AVERAGE_LOOP(double);
        else
            REDUCE_LOOPS(double);
        break;
    case DDP_INT32:
        INTEGER_LOOPS(int32_t, uint32_t);
        break;
    case DDP_INT64:
        INTEGER_LOOPS(int64_t, uint64_t);
        break;
    case DDP_FLOAT16:
    case DDP_BFLOAT16:
        reduce_half(dst, src, count, dtype, op, average_over);
        break;
    }
}

/* Half precision. f16: 1 sign, 5 exponent (bias 15), 10 mantissa bits; bf16: the high
 * half of an f32. Widening is exact; narrowing rounds to nearest, ties to even, keeps
 * infinities, makes NaNs quiet NaNs, and goes through f16's subnormals. Written without
 * branches on the data, so the loops vectorize. */

static inline uint32_t bits_of(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    return x;
}

static inline float float_of(uint32_t x)
{
    float f;
    memcpy(&f, &x, sizeof f);
    return f;
}

/* x where mask is all ones, else y: a select without a branch. */
static inline uint32_t pick(uint32_t mask, uint32_t x, uint32_t y)
{
    return (mask & x) | (~mask & y);
}

static inline float f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, rest = h & 0x7fffu;
    /* Shifted into place and rescaled by 2^112 (the exponents' bias difference): exact
     * for normal numbers and subnormals (which become normal f32), and zero stays zero. */
    uint32_t scaled = bits_of(float_of(rest << 13) * 0x1p112f);
    /* The top exponent (infinity, NaN) keeps its meaning. */
    uint32_t special = 0x7f800000u | (rest & 0x3ffu) << 13;
    return float_of(sign | pick(0u - (rest >= 0x7c00u), special, scaled));
}

static inline uint16_t f32_to_f16(float f)
{
    uint32_t x = bits_of(f), sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
    /* Normal results: drop 13 mantissa bits rounding to nearest even, rebias by -112;
     * a carry out of the mantissa moves the exponent up, as it should. */
    uint32_t normal = (ax + 0xfffu + ((ax >> 13) & 1u) - (112u << 23)) >> 13;
    /* Subnormal results (below 2^-14): adding 0.5 (2^-1) makes the FPU round the value
     * to a multiple of 2^-24, f16's subnormal step, in its own mode (nearest even); the
     * low bits are then the f16 bits. */
    uint32_t subnormal = bits_of(float_of(ax) + 0.5f) - bits_of(0.5f);
    uint32_t out = pick(0u - (ax < (113u << 23)), subnormal, normal);
    out = pick(0u - (ax >= (143u << 23)), 0x7c00u, out); /* 65536 and above: infinity */
    out = pick(0u - (ax > 0x7f800000u), 0x7e00u | ((ax >> 13) & 0x1ffu), out); /* NaN */
    return (uint16_t)(sign | out);
}

static inline float bf16_to_f32(uint16_t h)
{
    return float_of((uint32_t)h << 16);
}

static inline uint16_t f32_to_bf16(float f)
{
    uint32_t x = bits_of(f);
    uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
    return (uint16_t)pick(0u - ((x & 0x7fffffffu) > 0x7f800000u), (x >> 16) | 0x40u, rounded);
}

void ddp_half_widen(const uint16_t *restrict in, float *restrict out, size_t count,
                    ddp_dtype_t dtype)
{
    if (dtype == DDP_BFLOAT16)
        for (size_t i = 0; i < count; i++)
            out[i] = bf16_to_f32(in[i]);
    else
        for (size_t i = 0; i < count; i++)
            out[i] = f16_to_f32(in[i]);
}

void ddp_half_narrow(const float *restrict in, uint16_t *restrict out, size_t count,
                     ddp_dtype_t dtype)
{
    if (dtype == DDP_BFLOAT16)
        for (size_t i = 0; i < count; i++)
            out[i] = f32_to_bf16(in[i]);
    else
        for (size_t i = 0; i < count; i++)
            out[i] = f32_to_f16(in[i]);
}

/* Half values on the wire (the reducer's compression): each step widens both sides,
 * reduces in f32 (an average's division too) and rounds the result to the type, in
 * blocks that stay in the cache. */
static void reduce_half(uint16_t *dst, const uint16_t *src, size_t count, ddp_dtype_t dtype,
                        ddp_reduce_op_t op, int average_over)
{
    enum { BLOCK = 512 };
    float d[BLOCK], s[BLOCK];
    for (size_t at = 0; at < count; at += BLOCK) {
        size_t n = count - at < BLOCK ? count - at : BLOCK;
        ddp_half_widen(dst + at, d, n, dtype);
        ddp_half_widen(src + at, s, n, dtype);
        ddp_reduce_into(d, s, n, DDP_FLOAT32, op, average_over);
        ddp_half_narrow(d, dst + at, n, dtype);
    }
}
