/* --parallel dp: DataParallel's pattern, threads of one process (dp.c). */
#ifndef FM_DP_H
#define FM_DP_H

#include "data.h"
#include "model.h"

#include <ddp.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct {
    fm_arch_t arch;
    int replicas; /* threads, one model replica each */
    int epochs, batch, log_every, limit_train, limit_test, max_steps;
    float lr, momentum;
    uint64_t seed;
    bool dropout, cosine;
    const char *dump; /* --dump-params, or NULL */
} fm_dp_options_t;

/* Trains and tests as train.c does, with `replicas` threads each taking a `batch` slice
 * of every step (the step's batch: replicas x batch); prints the same lines, and the
 * inference rate. `ddp` is a world of one (its sampler). 0, or the exit status. */
int fm_dp_train(const fm_dp_options_t *o, const fm_dataset_t *train, const fm_dataset_t *test,
                ddp_t *ddp);

#endif
