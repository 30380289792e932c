/* Unit tests: the distributed sampler's arithmetic (worker/sampler.c) against
 * PyTorch's DistributedSampler semantics, for many dataset and world sizes. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "error.h"
#include "sampler.h"

#include <stdlib.h>
#include <string.h>

/* All ranks' indices of one epoch, rank-major; returns how many each got. */
static size_t all_ranks(size_t size, int world, const ddp_sampler_options_t *o, uint64_t epoch,
                        size_t **out)
{
    size_t per = ddp_sample_count(size, world, o->drop_last);
    size_t *all = calloc((size_t)world * per + 1, sizeof *all);
    for (int r = 0; r < world; r++)
        assert_int_equal(ddp_sample(size, r, world, o, epoch, all + (size_t)r * per, per), 0);
    *out = all;
    return per;
}

/* Every sample exactly once; the padding (without drop_last) repeats the start of the
 * permutation, so no sample comes more than twice when size >= world. */
static void test_every_sample_once_per_epoch(void **state)
{
    for (int drop = 0; drop <= 1; drop++) {
        for (int world = 1; world <= 7; world++) {
            for (size_t size = 0; size <= 60; size++) {
                ddp_sampler_options_t o = {true, drop != 0, 42};
                size_t *all, per = all_ranks(size, world, &o, 3, &all);
                size_t total = per * (size_t)world;
                unsigned *seen = calloc(size + 1, sizeof *seen);
                for (size_t i = 0; i < total; i++) {
                    assert_true(all[i] < size);
                    seen[all[i]]++;
                }
                if (drop) {
                    /* floor(size / world) each; nothing twice; exactly total distinct */
                    assert_int_equal(per, size / (size_t)world);
                    size_t distinct = 0;
                    for (size_t s = 0; s < size; s++) {
                        assert_true(seen[s] <= 1);
                        distinct += seen[s];
                    }
                    assert_int_equal(distinct, total);
                } else {
                    assert_int_equal(per, (size + (size_t)world - 1) / (size_t)world);
                    for (size_t s = 0; s < size; s++) {
                        assert_true(seen[s] >= 1);
                        if (size >= (size_t)world)
                            assert_true(seen[s] <= 2);
                    }
                }
                free(seen);
                free(all);
            }
        }
    }
}

/* Without shuffle, rank r takes r, r + world, ... then the padding from 0. */
static void test_sequential_layout(void **state)
{
    ddp_sampler_options_t o = {false, false, 0};
    size_t idx[4];
    assert_int_equal(ddp_sample(10, 1, 3, &o, 0, idx, 4), 0);
    size_t want[4] = {1, 4, 7, 0}; /* 10 padded to 12: positions 1, 4, 7, 10 -> 0 */
    assert_memory_equal(idx, want, sizeof want);
    o.drop_last = true;
    assert_int_equal(ddp_sample(10, 2, 3, &o, 0, idx, 4), 0);
    size_t want_dropped[3] = {2, 5, 8};
    assert_memory_equal(idx, want_dropped, sizeof want_dropped);
}

/* The same seed and epoch give the same order on every rank and run; another epoch or
 * seed another order. */
static void test_shuffle_by_seed_and_epoch(void **state)
{
    ddp_sampler_options_t o = DDP_SAMPLER_OPTIONS_DEFAULT;
    size_t a[100], b[100];
    assert_int_equal(ddp_sample(100, 0, 1, &o, 5, a, 100), 0);
    assert_int_equal(ddp_sample(100, 0, 1, &o, 5, b, 100), 0);
    assert_memory_equal(a, b, sizeof a);
    assert_int_equal(ddp_sample(100, 0, 1, &o, 6, b, 100), 0);
    assert_memory_not_equal(a, b, sizeof a);
    o.seed = 1;
    assert_int_equal(ddp_sample(100, 0, 1, &o, 5, b, 100), 0);
    assert_memory_not_equal(a, b, sizeof a);
    /* NULL options are PyTorch's defaults: shuffled, seed 0. */
    size_t c[100];
    o.seed = 0;
    assert_int_equal(ddp_sample(100, 0, 1, &o, 2, b, 100), 0);
    assert_int_equal(ddp_sample(100, 0, 1, NULL, 2, c, 100), 0);
    assert_memory_equal(b, c, sizeof b);
    /* A shuffle that moves nothing would be no shuffle. */
    size_t fixed = 0;
    for (size_t i = 0; i < 100; i++)
        fixed += a[i] == i;
    assert_true(fixed < 20);
}

static void test_short_buffer(void **state)
{
    size_t idx[3];
    assert_int_equal(ddp_sample(10, 0, 3, NULL, 0, idx, 3), DDP_EUSAGE); /* needs 4 */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_sample_once_per_epoch),
        cmocka_unit_test(test_sequential_layout),
        cmocka_unit_test(test_shuffle_by_seed_and_epoch),
        cmocka_unit_test(test_short_buffer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
