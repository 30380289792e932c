/* Element-wise reduction kernels of the CPU backend, one loop per type and operation so
 * the compiler can vectorize them. Pure; any thread. */
#include "internal.h"

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

const char *ddp_dtype_name(ddp_dtype_t dtype)
{
    static const char *const names[] = {"float32", "float64", "int32",
                                        "int64",   "float16", "bfloat16"};
    return (unsigned)dtype < sizeof names / sizeof names[0] ? names[dtype] : "?";
}

const char *ddp_op_name(ddp_reduce_op_t op)
{
    static const char *const names[] = {"sum", "avg", "min", "max"};
    return (unsigned)op < sizeof names / sizeof names[0] ? names[op] : "?";
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

void ddp_reduce_into(void *dst, const void *src, size_t count, ddp_dtype_t dtype,
                     ddp_reduce_op_t op)
{
    switch (dtype) {
    case DDP_FLOAT32:
        REDUCE_LOOPS(float);
        break;
    case DDP_FLOAT64:
        REDUCE_LOOPS(double);
        break;
    case DDP_INT32:
        /* Integer sums wrap, as they do in PyTorch and NCCL (unsigned arithmetic here
         * keeps that defined). */
        if (op == DDP_SUM || op == DDP_AVG) {
            uint32_t *restrict d = dst;
            const uint32_t *restrict s = src;
            for (size_t i = 0; i < count; i++)
                d[i] += s[i];
        } else {
            REDUCE_LOOPS(int32_t);
        }
        break;
    case DDP_INT64:
        if (op == DDP_SUM || op == DDP_AVG) {
            uint64_t *restrict d = dst;
            const uint64_t *restrict s = src;
            for (size_t i = 0; i < count; i++)
                d[i] += s[i];
        } else {
            REDUCE_LOOPS(int64_t);
        }
        break;
    case DDP_FLOAT16:
    case DDP_BFLOAT16:
        break;
    }
}

void ddp_divide(void *buf, size_t count, ddp_dtype_t dtype, int divisor)
{
    switch (dtype) {
    case DDP_FLOAT32: {
        float *b = buf, f = (float)divisor;
        for (size_t i = 0; i < count; i++)
            b[i] /= f;
        break;
    }
    case DDP_FLOAT64: {
        double *b = buf, f = (double)divisor;
        for (size_t i = 0; i < count; i++)
            b[i] /= f;
        break;
    }
    case DDP_INT32: {
        int32_t *b = buf;
        for (size_t i = 0; i < count; i++)
            b[i] /= divisor;
        break;
    }
    case DDP_INT64: {
        int64_t *b = buf;
        for (size_t i = 0; i < count; i++)
            b[i] /= divisor;
        break;
    }
    case DDP_FLOAT16:
    case DDP_BFLOAT16:
        break;
    }
}
