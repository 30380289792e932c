/* The two models of the FashionMNIST example on the CPU: an MLP, and the course's
 * FashionCNN (conv 1->32 pad 1, BN, ReLU, pool; conv 32->64, BN, ReLU, pool; FC
 * 2304->600, dropout 0.25, FC 600->120, FC 120->10).
 *
 * Parameters live in one block (so a checkpoint is one write) in PyTorch's order of
 * model.parameters(); batch-norm running statistics in another. The backward pass
 * reports each parameter's gradient as soon as it is final, last layer first, which
 * is when the reducer may start averaging it. */
#ifndef FM_MODEL_H
#define FM_MODEL_H

#include "layers.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum { FM_MLP, FM_CNN } fm_arch_t;

#define FM_MAX_PARAMS 16

typedef struct {
    const char *name;
    float *value, *grad;
    size_t count;
} fm_param_t;

typedef void (*fm_grad_ready_fn)(void *ctx, int param);

typedef struct fm_model_s {
    fm_arch_t arch;
    int batch_cap;
    fm_param_t params[FM_MAX_PARAMS];
    int nparams;
    float *values, *grads, *momentum;
    size_t nvalues;
    float *buffers; /* batch-norm running statistics */
    size_t nbuffers;

    /* layers: the MLP uses l1..l3, the CNN conv1, bn1, conv2, bn2, l1..l3 */
    fm_conv_t conv1, conv2;
    fm_bn_t bn1, bn2;
    fm_linear_t l1, l2, l3;
    float dropout;      /* probability; 0 = off */
    uint64_t rng;       /* dropout's */
    fm_all_sum_fn sync; /* SyncBatchNorm across ranks, or NULL */
    void *sync_ctx;

    /* activations of the last forward pass, sized for batch_cap */
    float *x, *a1, *p1, *a2, *p2, *f, *h1, *mask, *h2, *logits;
    int32_t *arg1, *arg2;
    float *d_big, *d_big2, *d_small, *d_small2;
    int batch;
    bool train;
} fm_model_t;

/* Builds `arch` for batches of at most `batch_cap`, with PyTorch's default initialization
 * from `seed`. 0 or -ENOMEM. */
int fm_model_init(fm_model_t *m, fm_arch_t arch, int batch_cap, uint64_t seed);
void fm_model_free(fm_model_t *m);

/* Forward pass of `batch` images (x: [batch][784], normalized): returns the mean loss;
 * `correct` counts right predictions. With train, batch norm uses batch statistics and
 * dropout is applied. Negative on an error of the sync callback. */
double fm_model_forward(fm_model_t *m, const float *x, const uint8_t *labels, int batch, bool train,
                        int *correct);
/* Backward pass of the last training forward: fills the gradients, calling `ready` with
 * each parameter's index once its gradient is final. 0 or the sync callback's error. */
int fm_model_backward(fm_model_t *m, const uint8_t *labels, fm_grad_ready_fn ready, void *ctx);

/* SGD with momentum, as torch.optim.SGD: buf = momentum * buf + grad; value -= lr * buf. */
void fm_model_sgd(fm_model_t *m, float lr, float momentum);

/* The learning rate of step `step` (of `steps`) of epoch `epoch` (of `epochs`): `lr`, or
 * with `cosine` annealed to 0 over the whole run, step by step (torch's
 * CosineAnnealingLR). */
float fm_lr(float lr, bool cosine, int epoch, int epochs, int step, int steps);

/* Writes the parameters, float32 in PyTorch's parameter order, to `path`: 0 or -1. */
int fm_model_dump(const fm_model_t *m, const char *path);

/* The optimizers on a range of `n` values (a ZeRO shard, or all of them) with their
 * gradients and state: fm_sgd as above (buf: n); fm_adam as torch.optim.Adam (m, v: n
 * each; step: the step number, from 1; betas 0.9 and 0.999, eps 1e-8). */
void fm_sgd(float *values, const float *grads, float *buf, size_t n, float lr, float momentum);
void fm_adam(float *values, const float *grads, float *m, float *v, size_t n, float lr, long step);

#endif
