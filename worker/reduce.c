/* Element-wise reduction kernels of the CPU backend, one loop per type and operation so
 * the compiler can vectorize them (this file is built at -O3: see meson.build). Pure;
 * any thread. */
#include "internal.h"

#include <stdbool.h>
#include <stdint.h>

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
        break;
    }
}
