/* Sharded optimizer state (ZeRO stages 1 and 2): the parameters and gradients are one
 * float32 array of `count` elements; rank r owns block r of it padded to a multiple of
 * the world size, so the blocks are equal (the last one's padding is never real data).
 *
 * Stage 1 averages every gradient (all-reduce) and each rank updates its shard; stage 2
 * reduce-scatters, so each rank receives only its shard's average. Either way the
 * updated shards are then all-gathered into every rank's parameters. Runs on the
 * caller's thread, as every collective. */
#include "internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct ddp_zero_s {
    ddp_t *ddp;
    int stage;
    size_t count, block; /* block: the padded shard, count / world rounded up */
    float *padded;       /* world * block elements: the gradients or parameters, padded */
    float *shard;        /* stage 2: this rank's averaged gradient shard (block elements) */
};

int ddp_zero_new(ddp_t *ddp, size_t count, int stage, ddp_zero_t **out)
{
    DDP_NEED_CONTEXT(ddp, "ddp_zero_new");
    size_t n = (size_t)ddp->world_size;
    if (stage != 1 && stage != 2)
        return ddp_fail(ddp, DDP_EUSAGE, "zero: stage %d is not 1 or 2", stage);
    if (count == 0 || count > SIZE_MAX / sizeof(float) / 2)
        return ddp_fail(ddp, DDP_EUSAGE, "zero: %zu elements", count);
    ddp_zero_t *z = calloc(1, sizeof *z);
    if (z == NULL)
        return ddp_fail(ddp, -ENOMEM, "zero: out of memory");
    z->ddp = ddp;
    z->stage = stage;
    z->count = count;
    z->block = (count + n - 1) / n;
    z->padded = calloc(z->block * n, sizeof *z->padded);
    z->shard = stage == 2 ? calloc(z->block, sizeof *z->shard) : NULL;
    if (z->padded == NULL || (stage == 2 && z->shard == NULL)) {
        ddp_zero_free(z);
        return ddp_fail(ddp, -ENOMEM, "zero: out of memory for %zu elements", count);
    }
    *out = z;
    return 0;
}

/* A ZeRO entry point given NULL returns this. */
#define NEED_ZERO(z, what)                                   \
    do {                                                     \
        if ((z) == NULL)                                     \
            return ddp_refuse_object(what, "zero state", z); \
    } while (0)

void ddp_zero_shard(const ddp_zero_t *z, size_t *offset, size_t *len)
{
    if (z == NULL) {
        ddp_refuse_object("ddp_zero_shard", "zero state", z);
        *offset = *len = 0;
        return;
    }
    size_t start = z->block * (size_t)z->ddp->rank;
    *offset = start < z->count ? start : z->count;
    *len = start < z->count ? (z->count - start < z->block ? z->count - start : z->block) : 0;
}

int ddp_zero_reduce(ddp_zero_t *z, float *grads, const float **shard_grads)
{
    NEED_ZERO(z, "ddp_zero_reduce");
    size_t offset, len;
    ddp_zero_shard(z, &offset, &len);
    if (z->stage == 1) {
        int err = ddp_all_reduce(z->ddp, grads, z->count, DDP_FLOAT32, DDP_AVG);
        *shard_grads = err == 0 ? grads + offset : NULL;
        return err;
    }
    /* Stage 2: the padded copy's blocks are the shards; each rank receives its own. */
    memcpy(z->padded, grads, z->count * sizeof *grads);
    int err = ddp_reduce_scatter(z->ddp, z->padded, z->shard, z->block, DDP_FLOAT32, DDP_AVG);
    *shard_grads = err == 0 ? z->shard : NULL;
    return err;
}

int ddp_zero_gather(ddp_zero_t *z, float *params)
{
    NEED_ZERO(z, "ddp_zero_gather");
    size_t offset, len, rank = (size_t)z->ddp->rank;
    ddp_zero_shard(z, &offset, &len);
    memcpy(z->padded + rank * z->block, params + offset, len * sizeof *params);
    int err = ddp_all_gather(z->ddp, z->padded + rank * z->block, z->padded, z->block, DDP_FLOAT32);
    if (err == 0)
        memcpy(params, z->padded, z->count * sizeof *params);
    return err;
}

void ddp_zero_free(ddp_zero_t *z)
{
    if (z == NULL)
        return;
    free(z->padded);
    free(z->shard);
    free(z);
}
