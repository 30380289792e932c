/* The distributed sampler's arithmetic (sampler.c), apart from any context. */
#ifndef DDP_WORKER_SAMPLER_H
#define DDP_WORKER_SAMPLER_H

#include "ddp.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Indices per rank: ceil(size / replicas), or with drop_last and a remainder,
 * floor(size / replicas). */
size_t ddp_sample_count(size_t dataset_size, int replicas, bool drop_last);

/* Rank `rank`'s indices of epoch `epoch` into `indices` (ddp_sample_count of them):
 * 0, DDP_EUSAGE when `capacity` is short, or -ENOMEM. NULL options: shuffle, no
 * drop_last, seed 0. */
int ddp_sample(size_t dataset_size, int rank, int replicas, const ddp_sampler_options_t *options,
               uint64_t epoch, size_t *indices, size_t capacity);

#endif
