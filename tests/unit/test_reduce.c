/* Unit tests: the CPU backend's reduction kernels (worker/reduce.c), as libddp builds
 * them (vectorized). The fused last step of an average must give the bits of the sum
 * divided afterwards, for every world size, in every lane and in the loop's tail. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "internal.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define COUNT 1003 /* not a multiple of any vector width: the tail runs too */

/* Values of many magnitudes and both signs, some subnormal. */
static double value(uint64_t *state)
{
    *state = *state * 6364136223846793005ull + 1442695040888963407ull;
    uint64_t bits = *state >> 11;
    double mantissa = (double)(bits & 0xFFFFF) / 0x100000 + 0.5;
    int exponent = (int)((bits >> 20) % 80) - 40;
    double v = ldexp(mantissa, exponent) * ((bits >> 30) & 1 ? -1 : 1);
    return (bits >> 31) % 50 == 0 ? v * FLT_MIN * 1e-3 : v;
}

static void test_float_average_is_sum_then_divide(void **state)
{
    (void)state;
    static const int worlds[] = {2, 3, 4, 5, 7, 8, 16};
    uint64_t seed = 42;
    float d[COUNT], s[COUNT], fused[COUNT], ref[COUNT];
    double dd[COUNT], ds[COUNT], dfused[COUNT], dref[COUNT];
    for (size_t w = 0; w < sizeof worlds / sizeof worlds[0]; w++) {
        int n = worlds[w];
        for (int i = 0; i < COUNT; i++) {
            d[i] = (float)value(&seed);
            s[i] = (float)value(&seed);
            dd[i] = value(&seed);
            ds[i] = value(&seed);
        }
        memcpy(fused, d, sizeof d);
        ddp_reduce_into(fused, s, COUNT, DDP_FLOAT32, DDP_AVG, n);
        memcpy(dfused, dd, sizeof dd);
        ddp_reduce_into(dfused, ds, COUNT, DDP_FLOAT64, DDP_AVG, n);
        for (int i = 0; i < COUNT; i++) {
            volatile float sum = d[i] + s[i]; /* rounded to float before the division */
            ref[i] = sum / (float)n;
            volatile double dsum = dd[i] + ds[i];
            dref[i] = dsum / (double)n;
        }
        for (int i = 0; i < COUNT; i++) {
            if (memcmp(&fused[i], &ref[i], sizeof ref[i]) != 0)
                fail_msg("float32, world %d: [%d] = %a, (%a + %a) / %d = %a", n, i,
                         (double)fused[i], (double)d[i], (double)s[i], n, (double)ref[i]);
            if (memcmp(&dfused[i], &dref[i], sizeof dref[i]) != 0)
                fail_msg("float64, world %d: [%d] = %a, expected %a", n, i, dfused[i], dref[i]);
        }
    }
}

/* Without the divisor (an earlier step), AVG only adds; SUM never divides. */
static void test_sum_steps(void **state)
{
    (void)state;
    float d[COUNT], s[COUNT];
    for (int i = 0; i < COUNT; i++) {
        d[i] = (float)i;
        s[i] = 0.5f;
    }
    ddp_reduce_into(d, s, COUNT, DDP_FLOAT32, DDP_AVG, 0);
    ddp_reduce_into(d, s, COUNT, DDP_FLOAT32, DDP_SUM, 4);
    for (int i = 0; i < COUNT; i++)
        assert_true(d[i] == (float)i + 1.0f);
}

static void test_integers(void **state)
{
    (void)state;
    int32_t d[COUNT], s[COUNT];
    for (int i = 0; i < COUNT; i++) {
        d[i] = i % 2 ? -i : i;
        s[i] = i % 3 ? 1 : -2;
    }
    d[0] = INT32_MAX; /* wraps to INT32_MIN, then halves */
    s[0] = 1;
    int32_t before[COUNT];
    memcpy(before, d, sizeof d);
    ddp_reduce_into(d, s, COUNT, DDP_INT32, DDP_AVG, 2);
    assert_int_equal(d[0], INT32_MIN / 2);
    for (int i = 1; i < COUNT; i++)
        assert_int_equal(d[i], (before[i] + s[i]) / 2); /* truncated toward zero */

    int64_t big[COUNT], one[COUNT];
    for (int i = 0; i < COUNT; i++) {
        big[i] = INT64_MAX - i;
        one[i] = i + 1;
    }
    ddp_reduce_into(big, one, COUNT, DDP_INT64, DDP_SUM, 0);
    for (int i = 0; i < COUNT; i++)
        assert_true(big[i] == INT64_MIN);
    ddp_reduce_into(big, one, COUNT, DDP_INT64, DDP_AVG, 3);
    for (int i = 0; i < COUNT; i++)
        assert_true(big[i] == (INT64_MIN + i + 1) / 3);
}

static void test_min_max_ignore_the_divisor(void **state)
{
    (void)state;
    double d[COUNT], s[COUNT], lo[COUNT], hi[COUNT];
    for (int i = 0; i < COUNT; i++) {
        d[i] = (double)(i % 17) - 8;
        s[i] = (double)(i % 5) - 2;
    }
    memcpy(lo, d, sizeof d);
    memcpy(hi, d, sizeof d);
    ddp_reduce_into(lo, s, COUNT, DDP_FLOAT64, DDP_MIN, 2);
    ddp_reduce_into(hi, s, COUNT, DDP_FLOAT64, DDP_MAX, 2);
    for (int i = 0; i < COUNT; i++) {
        assert_true(lo[i] == (d[i] < s[i] ? d[i] : s[i]));
        assert_true(hi[i] == (d[i] > s[i] ? d[i] : s[i]));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_float_average_is_sum_then_divide),
        cmocka_unit_test(test_sum_steps),
        cmocka_unit_test(test_integers),
        cmocka_unit_test(test_min_max_ignore_the_divisor),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
