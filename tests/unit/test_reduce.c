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
#include <stdbool.h>
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

/* What an f16 (bf16 with `bf`) encoding means, from the format's definition. */
static double half_meaning(uint16_t h, bool bf)
{
    int mant_bits = bf ? 7 : 10, exp_bits = bf ? 8 : 5, bias = bf ? 127 : 15;
    int e = (h >> mant_bits) & ((1 << exp_bits) - 1), m = h & ((1 << mant_bits) - 1);
    double sign = h & 0x8000 ? -1 : 1;
    if (e == (1 << exp_bits) - 1)
        return m ? NAN : sign * INFINITY;
    if (e == 0)
        return sign * ldexp(m, 1 - bias - mant_bits);
    return sign * ldexp(m + (1 << mant_bits), e - bias - mant_bits);
}

static uint16_t narrow(float f, ddp_dtype_t t)
{
    uint16_t h;
    ddp_half_narrow(&f, &h, 1, t);
    return h;
}

/* Every encoding widens to its meaning exactly; every finite one narrows back to itself;
 * the midpoint between two neighbours goes to the one with an even mantissa, a hair off
 * it to the nearer; past the largest finite value (by half an ulp or more) is infinity;
 * NaNs stay NaNs. Run through the vectorized loops (all values of a type at once). */
static void check_half_format(ddp_dtype_t t)
{
    bool bf = t == DDP_BFLOAT16;
    static uint16_t all[65536], back[65536];
    static float wide[65536];
    for (uint32_t h = 0; h < 65536; h++)
        all[h] = (uint16_t)h;
    ddp_half_widen(all, wide, 65536, t);
    ddp_half_narrow(wide, back, 65536, t);
    for (uint32_t h = 0; h < 65536; h++) {
        double want = half_meaning((uint16_t)h, bf);
        if (isnan(want)) {
            assert_true(isnan(wide[h]));
            assert_true(isnan(half_meaning(back[h], bf)));
            continue;
        }
        assert_true((double)wide[h] == want);
        assert_int_equal(back[h], h);
    }
    /* Between neighbours, over the positive finite values (the sign is a bit apart). */
    uint16_t top = bf ? 0x7f7f : 0x7bff;
    for (uint16_t h = 0; h < top; h++) {
        float lo = wide[h], hi = wide[h + 1], mid = (float)(((double)lo + hi) / 2);
        assert_true((double)mid == ((double)lo + hi) / 2); /* f32 holds it exactly */
        assert_int_equal(narrow(mid, t), h % 2 == 0 ? h : h + 1);
        assert_int_equal(narrow(nextafterf(mid, INFINITY), t), h + 1);
        assert_int_equal(narrow(nextafterf(mid, 0), t), h);
        assert_int_equal(narrow(-mid, t), (h % 2 == 0 ? h : h + 1) | 0x8000);
    }
    float max = wide[top],
          past = (float)((double)max + (half_meaning(top, bf) - half_meaning(top - 1, bf)) / 2);
    assert_int_equal(narrow(nextafterf(past, 0), t), top);
    assert_int_equal(narrow(past, t), bf ? 0x7f80 : 0x7c00);
    assert_int_equal(narrow(-INFINITY, t), bf ? 0xff80 : 0xfc00);
    assert_int_equal(narrow(FLT_MAX, t), bf ? 0x7f80 : 0x7c00);
    assert_true(isnan(half_meaning(narrow(NAN, t), bf)));
    assert_true(isnan(half_meaning(narrow(-NAN, t), bf)));
}

static void test_f16_conversions(void **state)
{
    (void)state;
    check_half_format(DDP_FLOAT16);
    /* Below f16's smallest subnormal (2^-24): half of it and less go to zero. */
    assert_int_equal(narrow(0x1p-25f, DDP_FLOAT16), 0);
    assert_int_equal(narrow(nextafterf(0x1p-25f, 1), DDP_FLOAT16), 1);
    assert_int_equal(narrow(1e-30f, DDP_FLOAT16), 0);
}

static void test_bf16_conversions(void **state)
{
    (void)state;
    check_half_format(DDP_BFLOAT16);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_float_average_is_sum_then_divide),
        cmocka_unit_test(test_sum_steps),
        cmocka_unit_test(test_integers),
        cmocka_unit_test(test_min_max_ignore_the_divisor),
        cmocka_unit_test(test_f16_conversions),
        cmocka_unit_test(test_bf16_conversions),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
