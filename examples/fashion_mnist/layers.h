/* The CPU layers of the FashionMNIST example: forward and backward passes on float32,
 * matrix products on BLAS (cblas_sgemm).
 *
 * Convolution activations are laid out [channel][batch][height][width] ("CNHW"): a 3x3
 * convolution is then one sgemm of the weights by the im2col matrix of the whole batch,
 * and batch norm's statistics are over contiguous memory. Fully connected activations
 * are [batch][features], PyTorch's layout, as are the weights ([out][in]). A backward
 * pass overwrites the parameter gradients (no accumulation). Pure computation; the
 * caller owns every buffer, except the scratch a layer keeps for itself. */
#ifndef FM_LAYERS_H
#define FM_LAYERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* y[B][out] = x[B][in] W^T + b */
typedef struct {
    int in, out;
    float *w, *b, *dw, *db;
} fm_linear_t;
void fm_linear_forward(const fm_linear_t *l, const float *x, float *y, int batch);
/* dx may be NULL (the first layer). */
void fm_linear_backward(const fm_linear_t *l, const float *x, const float *dy, float *dx,
                        int batch);

/* A 3x3 convolution, stride 1, padding `pad` (0 or 1), CNHW in and out: an h x w input
 * gives (h + 2 pad - 2) x (w + 2 pad - 2). Keeps its im2col matrix from the forward pass
 * for the backward one. */
typedef struct {
    int cin, cout, pad;
    float *w /* [cout][cin][3][3] */, *b, *dw, *db;
    float *col;
    size_t col_cap;
} fm_conv_t;
int fm_conv_forward(fm_conv_t *c, const float *x, float *y, int batch, int h, int w);
void fm_conv_backward(fm_conv_t *c, const float *dy, float *dx, int batch, int h, int w);
void fm_conv_free(fm_conv_t *c);

/* Sums `n` doubles across the ranks in place (SyncBatchNorm); NULL: this rank alone. */
typedef int (*fm_all_sum_fn)(void *ctx, double *values, int n);

/* Batch norm over each channel of a CNHW tensor (n = batch * h * w values a channel),
 * PyTorch's BatchNorm2d: batch statistics (biased variance) in training, running
 * statistics (momentum 0.1, unbiased variance) in evaluation. With `sync`, the
 * statistics are those of the whole global batch. */
typedef struct {
    int c;
    float *gamma, *beta, *dgamma, *dbeta;
    float *running_mean, *running_var;
    float *xhat;     /* [c][n] from the forward pass */
    double *inv_std; /* [c] */
    double *scratch; /* [3c] */
    double count;    /* values a channel across the ranks */
    size_t xhat_cap;
} fm_bn_t;
int fm_bn_forward(fm_bn_t *bn, const float *x, float *y, int n, bool train, fm_all_sum_fn sync,
                  void *ctx);
int fm_bn_backward(fm_bn_t *bn, const float *dy, float *dx, int n, fm_all_sum_fn sync, void *ctx);
void fm_bn_free(fm_bn_t *bn);

/* In place: x = max(x, 0); backward zeroes dy where the output was 0. */
void fm_relu_forward(float *x, size_t n);
void fm_relu_backward(const float *y, float *dy, size_t n);

/* 2x2 max pooling, stride 2, over `planes` planes of h x w (even); `arg` keeps where each
 * maximum came from. */
void fm_maxpool_forward(const float *x, float *y, int32_t *arg, int planes, int h, int w);
void fm_maxpool_backward(const float *dy, const int32_t *arg, float *dx, int planes, int h, int w);

/* CNHW [c][batch][hw] <-> [batch][c * hw] (PyTorch's flatten of NCHW). */
void fm_flatten(const float *x, float *y, int c, int batch, int hw);
void fm_unflatten(const float *dy, float *dx, int c, int batch, int hw);

/* Inverted dropout with probability p: mask[i] is 0 or 1/(1-p), drawn from *rng. */
void fm_dropout_forward(float *x, float *mask, size_t n, float p, uint64_t *rng);
void fm_dropout_backward(float *dy, const float *mask, size_t n);

/* Mean cross-entropy of logits[B][classes] against labels; dlogits (may be NULL) is its
 * gradient. `correct` (may be NULL) receives how many argmaxes were right. */
double fm_cross_entropy(const float *logits, const uint8_t *labels, int batch, int classes,
                        float *dlogits, int *correct);

/* Uniform in [0, 1) from a SplitMix64 state. */
double fm_uniform(uint64_t *rng);

#endif
