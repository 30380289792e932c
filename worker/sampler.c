/* The distributed sampler: PyTorch's DistributedSampler semantics for C programs.
 *
 * Every rank computes the same permutation of the dataset (shuffled by seed + epoch, or
 * in order), pads it by repeating its start to a multiple of the world size (or, with
 * drop_last, cuts the tail), and takes every world-size-th index from its rank on: in
 * one epoch every sample goes to exactly one rank, save the padding. The permutation
 * is libddp's own (SplitMix64 and Fisher-Yates), not torch's randperm. Pure; the
 * public wrappers that take a context are in ddp.c. */
#include "sampler.h"

#include "error.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

size_t ddp_sample_count(size_t dataset_size, int replicas, bool drop_last)
{
    size_t n = (size_t)replicas;
    if (drop_last && dataset_size % n != 0)
        return dataset_size / n; /* ceil((len - n) / n), as PyTorch has it */
    return (dataset_size + n - 1) / n;
}

static uint64_t splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform in [0, bound): draws above the largest multiple of bound are redrawn. */
static uint64_t below(uint64_t *state, uint64_t bound)
{
    uint64_t limit = UINT64_MAX - UINT64_MAX % bound, x;
    do
        x = splitmix64(state);
    while (x >= limit);
    return x % bound;
}

int ddp_sample(size_t dataset_size, int rank, int replicas, const ddp_sampler_options_t *options,
               uint64_t epoch, size_t *indices, size_t capacity)
{
    bool shuffle = options == NULL || options->shuffle;
    bool drop_last = options != NULL && options->drop_last;
    uint64_t seed = options != NULL ? options->seed : 0;
    size_t per_rank = ddp_sample_count(dataset_size, replicas, drop_last);
    if (capacity < per_rank)
        return DDP_EUSAGE;
    if (dataset_size == 0)
        return 0;
    size_t *order = malloc(dataset_size * sizeof *order);
    if (order == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < dataset_size; i++)
        order[i] = i;
    if (shuffle) {
        uint64_t state = seed + epoch; /* torch seeds its generator with seed + epoch */
        for (size_t i = dataset_size - 1; i > 0; i--) {
            size_t j = (size_t)below(&state, (uint64_t)i + 1);
            size_t t = order[i];
            order[i] = order[j];
            order[j] = t;
        }
    }
    /* Position p < total of the padded (or cut) list is order[p % dataset_size]. */
    for (size_t k = 0; k < per_rank; k++)
        indices[k] = order[((size_t)rank + k * (size_t)replicas) % dataset_size];
    free(order);
    return 0;
}
