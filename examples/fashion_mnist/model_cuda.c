/* The FashionMNIST models on cuDNN and cuBLAS (see model_cuda.h).
 *
 * Tensors are NCHW (PyTorch's layout, so the flatten before fc1 is free); fully
 * connected activations [batch][features] are, to cuBLAS (column-major), matrices
 * features x batch, and a weight [out][in] is the matrix in x out: y = W^T x. The
 * convolutions run in FP32 FMA math (no TF32), on fixed algorithms, so the GPU path
 * stays comparable with the CPU one. */
#include "model_cuda.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define IMAGE       784
#define CLASSES     10
#define MLP_H1      256
#define MLP_H2      128
#define BN_EPS      1e-5
#define BN_MOMENTUM 0.1

#define FWD_ALGO        CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM
#define BWD_DATA_ALGO   CUDNN_CONVOLUTION_BWD_DATA_ALGO_1
#define BWD_FILTER_ALGO CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1

typedef struct {
    int in, out;
    int param; /* its weight's index; the bias follows */
} linear_t;

/* conv 3x3 (+ bias), batch norm, ReLU, max-pool 2 */
typedef struct {
    int cin, cout, pad, h, w; /* h x w: the input plane */
    int param;                /* the convolution's weight: bias, gamma, beta follow */
    cudnnFilterDescriptor_t filter;
    cudnnConvolutionDescriptor_t conv;
    cudnnTensorDescriptor_t in, out, pooled, channels;
    float *conv_out, *bn_out, *pooled_out, *saved_mean, *saved_inv_var;
    float *d_bn_out, *d_relu, *d_conv_out;
    float *running_mean, *running_var;
} block_t;

struct fm_gpu_s {
    fm_model_t *host;
    int batch_cap, shaped; /* the batch the descriptors are set for */
    cudnnHandle_t dnn;
    cublasHandle_t blas;
    cudnnActivationDescriptor_t relu;
    cudnnPoolingDescriptor_t pool;
    cudnnOpTensorDescriptor_t mul;
    cudnnTensorDescriptor_t t600, t256, t128;
    float *arena;
    float *values, *grads, *momentum, *buffers, *ones;
    float *value[FM_MAX_PARAMS], *grad[FM_MAX_PARAMS];
    void *workspace;
    size_t workspace_size;
    block_t b1, b2;
    linear_t l1, l2, l3;
    /* activations and their gradients */
    float *x, *h1, *h1d, *mask, *h2, *logits;
    float *d_logits, *d_h2, *d_h1, *d_h1d, *d_f, *d_r2, *d_r1;
    bool train, dropped;
    int batch;
    char why[512];
};

static int fail(fm_gpu_t *g, const char *fmt, ...)
{
    if (g->why[0] == '\0') { /* the first error is the cause */
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(g->why, sizeof g->why, fmt, ap);
        va_end(ap);
    }
    return -1;
}

/* Returns the library's reason, with the line, when `call` does not give `ok`. */
#define CHECKED(g, type, ok, library, reason, call)                                 \
    do {                                                                            \
        type s_ = (call);                                                           \
        if (s_ != (ok))                                                             \
            return fail(g, library ": %s (model_cuda.c:%d)", reason(s_), __LINE__); \
    } while (0)
#define CUDA(g, call) CHECKED(g, cudaError_t, cudaSuccess, "CUDA", cudaGetErrorString, call)
#define DNN(g, call) \
    CHECKED(g, cudnnStatus_t, CUDNN_STATUS_SUCCESS, "cuDNN", cudnnGetErrorString, call)
#define BLAS(g, call) \
    CHECKED(g, cublasStatus_t, CUBLAS_STATUS_SUCCESS, "cuBLAS", cublasGetStatusString, call)

static const float one = 1, zero = 0;

static void gpu_free(fm_gpu_t *g);
static int gpu_push(fm_gpu_t *g);

static const char *gpu_error(const fm_gpu_t *g)
{
    return g->why;
}

static float *gpu_grad(const fm_gpu_t *g, int param)
{
    return g->grad[param];
}

/* ---- memory ---- */

typedef struct {
    float **at;
    size_t count;
} slot_t;

/* One device block for everything, each piece 256-byte aligned. */
static int carve(fm_gpu_t *g, const slot_t *slots, int n)
{
    size_t total = 0;
    for (int i = 0; i < n; i++)
        total += (slots[i].count + 63) / 64 * 64;
    CUDA(g, cudaMalloc((void **)&g->arena, total * sizeof(float)));
    CUDA(g, cudaMemset(g->arena, 0, total * sizeof(float)));
    float *p = g->arena;
    for (int i = 0; i < n; i++) {
        *slots[i].at = p;
        p += (slots[i].count + 63) / 64 * 64;
    }
    return 0;
}

static int allocate(fm_gpu_t *g)
{
    fm_model_t *m = g->host;
    size_t B = (size_t)g->batch_cap;
    slot_t common[] = {
        {&g->values, m->nvalues},
        {&g->grads, m->nvalues},
        {&g->momentum, m->nvalues},
        {&g->buffers, m->nbuffers + 1},
        {&g->ones, B},
        {&g->x, B * IMAGE},
        {&g->logits, B * CLASSES},
        {&g->d_logits, B * CLASSES},
    };
    slot_t mlp[] = {
        {&g->h1, B * MLP_H1},   {&g->h2, B * MLP_H2},   {&g->d_h1, B * MLP_H1},
        {&g->d_r1, B * MLP_H1}, {&g->d_h2, B * MLP_H2}, {&g->d_r2, B * MLP_H2},
    };
    block_t *k1 = &g->b1, *k2 = &g->b2;
    size_t a1 = B * 32 * 784, q1 = B * 32 * 196, a2 = B * 64 * 144, q2 = B * 64 * 36;
    slot_t cnn[] = {
        {&k1->conv_out, a1}, {&k1->bn_out, a1},     {&k1->pooled_out, q1}, {&k1->d_bn_out, a1},
        {&k1->d_relu, a1},   {&k1->d_conv_out, a1}, {&k1->saved_mean, 32}, {&k1->saved_inv_var, 32},
        {&k2->conv_out, a2}, {&k2->bn_out, a2},     {&k2->pooled_out, q2}, {&k2->d_bn_out, a2},
        {&k2->d_relu, a2},   {&k2->d_conv_out, a2}, {&k2->saved_mean, 64}, {&k2->saved_inv_var, 64},
        {&g->h1, B * 600},   {&g->h1d, B * 600},    {&g->mask, B * 600},   {&g->h2, B * 120},
        {&g->d_h2, B * 120}, {&g->d_h1, B * 600},   {&g->d_h1d, B * 600},  {&g->d_f, B * 2304},
        {&g->d_r1, q1}, /* conv2's input gradient: block 1's pooled output's */
    };
    enum { NC = sizeof common / sizeof common[0], NM = sizeof mlp / sizeof mlp[0] };
    enum { NN = sizeof cnn / sizeof cnn[0] };
    slot_t all[NC + NN];
    memcpy(all, common, sizeof common);
    if (m->arch == FM_MLP)
        memcpy(all + NC, mlp, sizeof mlp);
    else
        memcpy(all + NC, cnn, sizeof cnn);
    if (carve(g, all, NC + (m->arch == FM_MLP ? NM : NN)) != 0)
        return -1;
    for (int p = 0; p < m->nparams; p++) {
        size_t offset = (size_t)(m->params[p].value - m->values);
        g->value[p] = g->values + offset;
        g->grad[p] = g->grads + offset;
    }
    float *ones = malloc(B * sizeof *ones);
    if (ones == NULL)
        return fail(g, "out of host memory");
    for (size_t i = 0; i < B; i++)
        ones[i] = 1;
    cudaError_t e = cudaMemcpy(g->ones, ones, B * sizeof *ones, cudaMemcpyHostToDevice);
    free(ones);
    CUDA(g, e);
    return 0;
}

/* ---- descriptors ---- */

static int nchw(fm_gpu_t *g, cudnnTensorDescriptor_t t, int n, int c, int h, int w)
{
    DNN(g, cudnnSetTensor4dDescriptor(t, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, c, h, w));
    return 0;
}

static int block_init(fm_gpu_t *g, block_t *k, int cin, int cout, int pad, int h, int w, int param,
                      const fm_bn_t *host_bn)
{
    k->cin = cin;
    k->cout = cout;
    k->pad = pad;
    k->h = h;
    k->w = w;
    k->param = param;
    k->running_mean = g->buffers + (host_bn->running_mean - g->host->buffers);
    k->running_var = g->buffers + (host_bn->running_var - g->host->buffers);
    DNN(g, cudnnCreateFilterDescriptor(&k->filter));
    DNN(g, cudnnCreateConvolutionDescriptor(&k->conv));
    DNN(g, cudnnCreateTensorDescriptor(&k->in));
    DNN(g, cudnnCreateTensorDescriptor(&k->out));
    DNN(g, cudnnCreateTensorDescriptor(&k->pooled));
    DNN(g, cudnnCreateTensorDescriptor(&k->channels));
    DNN(g, cudnnSetFilter4dDescriptor(k->filter, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, cout, cin, 3,
                                      3));
    DNN(g, cudnnSetConvolution2dDescriptor(k->conv, pad, pad, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION,
                                           CUDNN_DATA_FLOAT));
    DNN(g, cudnnSetConvolutionMathType(k->conv, CUDNN_FMA_MATH));
    return nchw(g, k->channels, 1, cout, 1, 1);
}

static void block_free(block_t *k)
{
    if (k->filter != NULL)
        cudnnDestroyFilterDescriptor(k->filter);
    if (k->conv != NULL)
        cudnnDestroyConvolutionDescriptor(k->conv);
    cudnnTensorDescriptor_t t[] = {k->in, k->out, k->pooled, k->channels};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (t[i] != NULL)
            cudnnDestroyTensorDescriptor(t[i]);
}

/* The block's tensors for a batch of B; `need` grows to its convolutions' workspace. */
static int block_shape(fm_gpu_t *g, block_t *k, int B, size_t *need)
{
    int oh = k->h + 2 * k->pad - 2, ow = k->w + 2 * k->pad - 2;
    size_t size;
    if (nchw(g, k->in, B, k->cin, k->h, k->w) != 0 || nchw(g, k->out, B, k->cout, oh, ow) != 0 ||
        nchw(g, k->pooled, B, k->cout, oh / 2, ow / 2) != 0)
        return -1;
    DNN(g, cudnnGetConvolutionForwardWorkspaceSize(g->dnn, k->in, k->filter, k->conv, k->out,
                                                   FWD_ALGO, &size));
    *need = size > *need ? size : *need;
    DNN(g, cudnnGetConvolutionBackwardFilterWorkspaceSize(g->dnn, k->in, k->out, k->conv, k->filter,
                                                          BWD_FILTER_ALGO, &size));
    *need = size > *need ? size : *need;
    DNN(g, cudnnGetConvolutionBackwardDataWorkspaceSize(g->dnn, k->filter, k->out, k->conv, k->in,
                                                        BWD_DATA_ALGO, &size));
    *need = size > *need ? size : *need;
    return 0;
}

static int shape(fm_gpu_t *g, int B)
{
    if (B == g->shaped)
        return 0;
    if (B < 1 || B > g->batch_cap)
        return fail(g, "a batch of %d: the model was built for 1 to %d", B, g->batch_cap);
    size_t need = 0;
    if (g->host->arch == FM_MLP) {
        if (nchw(g, g->t256, B, MLP_H1, 1, 1) != 0 || nchw(g, g->t128, B, MLP_H2, 1, 1) != 0)
            return -1;
    } else if (block_shape(g, &g->b1, B, &need) != 0 || block_shape(g, &g->b2, B, &need) != 0 ||
               nchw(g, g->t600, B, 600, 1, 1) != 0) {
        return -1;
    }
    if (need > g->workspace_size) {
        if (g->workspace != NULL)
            CUDA(g, cudaFree(g->workspace));
        g->workspace = NULL;
        g->workspace_size = 0;
        CUDA(g, cudaMalloc(&g->workspace, need));
        g->workspace_size = need;
    }
    g->shaped = B;
    return 0;
}

static int setup(fm_gpu_t *g, int device)
{
    fm_model_t *m = g->host;
    CUDA(g, cudaSetDevice(device));
    DNN(g, cudnnCreate(&g->dnn));
    BLAS(g, cublasCreate(&g->blas));
    DNN(g, cudnnCreateActivationDescriptor(&g->relu));
    DNN(g,
        cudnnSetActivationDescriptor(g->relu, CUDNN_ACTIVATION_RELU, CUDNN_NOT_PROPAGATE_NAN, 0));
    DNN(g, cudnnCreatePoolingDescriptor(&g->pool));
    DNN(g, cudnnSetPooling2dDescriptor(g->pool, CUDNN_POOLING_MAX, CUDNN_NOT_PROPAGATE_NAN, 2, 2, 0,
                                       0, 2, 2));
    DNN(g, cudnnCreateOpTensorDescriptor(&g->mul));
    DNN(g, cudnnSetOpTensorDescriptor(g->mul, CUDNN_OP_TENSOR_MUL, CUDNN_DATA_FLOAT,
                                      CUDNN_NOT_PROPAGATE_NAN));
    DNN(g, cudnnCreateTensorDescriptor(&g->t600));
    DNN(g, cudnnCreateTensorDescriptor(&g->t256));
    DNN(g, cudnnCreateTensorDescriptor(&g->t128));
    if (allocate(g) != 0)
        return -1;
    if (m->arch == FM_MLP) {
        g->l1 = (linear_t){IMAGE, MLP_H1, 0};
        g->l2 = (linear_t){MLP_H1, MLP_H2, 2};
        g->l3 = (linear_t){MLP_H2, CLASSES, 4};
    } else {
        if (block_init(g, &g->b1, 1, 32, 1, 28, 28, 0, &m->bn1) != 0 ||
            block_init(g, &g->b2, 32, 64, 0, 14, 14, 4, &m->bn2) != 0)
            return -1;
        g->l1 = (linear_t){2304, 600, 8};
        g->l2 = (linear_t){600, 120, 10};
        g->l3 = (linear_t){120, CLASSES, 12};
    }
    if (shape(g, g->batch_cap) != 0)
        return -1;
    return gpu_push(g);
}

static int gpu_new(fm_model_t *host, int device, fm_gpu_t **out, char *why, size_t len)
{
    fm_gpu_t *g = calloc(1, sizeof *g);
    if (g == NULL) {
        snprintf(why, len, "out of memory");
        return -1;
    }
    g->host = host;
    g->batch_cap = host->batch_cap;
    if (setup(g, device) != 0) {
        snprintf(why, len, "GPU %d: %s", device, g->why);
        gpu_free(g);
        return -1;
    }
    *out = g;
    return 0;
}

static void gpu_free(fm_gpu_t *g)
{
    if (g == NULL)
        return;
    block_free(&g->b1);
    block_free(&g->b2);
    cudnnTensorDescriptor_t t[] = {g->t600, g->t256, g->t128};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (t[i] != NULL)
            cudnnDestroyTensorDescriptor(t[i]);
    if (g->relu != NULL)
        cudnnDestroyActivationDescriptor(g->relu);
    if (g->pool != NULL)
        cudnnDestroyPoolingDescriptor(g->pool);
    if (g->mul != NULL)
        cudnnDestroyOpTensorDescriptor(g->mul);
    if (g->blas != NULL)
        cublasDestroy(g->blas);
    if (g->dnn != NULL)
        cudnnDestroy(g->dnn);
    cudaFree(g->workspace);
    cudaFree(g->arena);
    free(g);
}

/* ---- moving state ---- */

static int gpu_pull(fm_gpu_t *g)
{
    fm_model_t *m = g->host;
    size_t bytes = m->nvalues * sizeof(float);
    CUDA(g, cudaMemcpy(m->values, g->values, bytes, cudaMemcpyDeviceToHost));
    CUDA(g, cudaMemcpy(m->momentum, g->momentum, bytes, cudaMemcpyDeviceToHost));
    CUDA(g,
         cudaMemcpy(m->buffers, g->buffers, m->nbuffers * sizeof(float), cudaMemcpyDeviceToHost));
    return 0;
}

static int gpu_push(fm_gpu_t *g)
{
    fm_model_t *m = g->host;
    size_t bytes = m->nvalues * sizeof(float);
    CUDA(g, cudaMemcpy(g->values, m->values, bytes, cudaMemcpyHostToDevice));
    CUDA(g, cudaMemcpy(g->momentum, m->momentum, bytes, cudaMemcpyHostToDevice));
    CUDA(g,
         cudaMemcpy(g->buffers, m->buffers, m->nbuffers * sizeof(float), cudaMemcpyHostToDevice));
    return 0;
}

/* ---- layers ---- */

/* y[B][out] = x[B][in] W^T + b: column-major, y (out x B) = W' (in x out)^T x (in x B),
 * then the bias added to every column (a rank-1 update with ones). */
static int linear_forward(fm_gpu_t *g, const linear_t *l, const float *x, float *y, int B)
{
    BLAS(g, cublasSgemm(g->blas, CUBLAS_OP_T, CUBLAS_OP_N, l->out, B, l->in, &one,
                        g->value[l->param], l->in, x, l->in, &zero, y, l->out));
    BLAS(g, cublasSger(g->blas, l->out, B, &one, g->value[l->param + 1], 1, g->ones, 1, y, l->out));
    return 0;
}

/* dW' (in x out) = x dy^T; db = dy ones; dx (in x B) = W' dy (skipped when NULL). */
static int linear_backward(fm_gpu_t *g, const linear_t *l, const float *x, const float *dy,
                           float *dx, int B)
{
    BLAS(g, cublasSgemm(g->blas, CUBLAS_OP_N, CUBLAS_OP_T, l->in, l->out, B, &one, x, l->in, dy,
                        l->out, &zero, g->grad[l->param], l->in));
    BLAS(g, cublasSgemv(g->blas, CUBLAS_OP_N, l->out, B, &one, dy, l->out, g->ones, 1, &zero,
                        g->grad[l->param + 1], 1));
    if (dx != NULL)
        BLAS(g, cublasSgemm(g->blas, CUBLAS_OP_N, CUBLAS_OP_N, l->in, B, l->out, &one,
                            g->value[l->param], l->in, dy, l->out, &zero, dx, l->in));
    return 0;
}

/* ReLU in place over a [B][features] tensor described by t. */
static int relu_forward(fm_gpu_t *g, cudnnTensorDescriptor_t t, float *x)
{
    DNN(g, cudnnActivationForward(g->dnn, g->relu, &one, t, x, &zero, t, x));
    return 0;
}

static int relu_backward(fm_gpu_t *g, cudnnTensorDescriptor_t t, const float *y, const float *dy,
                         float *dx)
{
    DNN(g, cudnnActivationBackward(g->dnn, g->relu, &one, t, y, t, dy, t, y, &zero, t, dx));
    return 0;
}

static int block_forward(fm_gpu_t *g, block_t *k, const float *x, bool train)
{
    float *w = g->value[k->param], *b = g->value[k->param + 1];
    float *gamma = g->value[k->param + 2], *beta = g->value[k->param + 3];
    DNN(g, cudnnConvolutionForward(g->dnn, &one, k->in, x, k->filter, w, k->conv, FWD_ALGO,
                                   g->workspace, g->workspace_size, &zero, k->out, k->conv_out));
    DNN(g, cudnnAddTensor(g->dnn, &one, k->channels, b, &one, k->out, k->conv_out));
    /* PyTorch's BatchNorm2d: batch statistics and running ones updated with momentum 0.1
     * (cuDNN keeps the unbiased variance, as PyTorch does) in training; running ones in
     * evaluation. */
    if (train)
        DNN(g, cudnnBatchNormalizationForwardTraining(
                   g->dnn, CUDNN_BATCHNORM_SPATIAL, &one, &zero, k->out, k->conv_out, k->out,
                   k->bn_out, k->channels, gamma, beta, BN_MOMENTUM, k->running_mean,
                   k->running_var, BN_EPS, k->saved_mean, k->saved_inv_var));
    else
        DNN(g, cudnnBatchNormalizationForwardInference(
                   g->dnn, CUDNN_BATCHNORM_SPATIAL, &one, &zero, k->out, k->conv_out, k->out,
                   k->bn_out, k->channels, gamma, beta, k->running_mean, k->running_var, BN_EPS));
    if (relu_forward(g, k->out, k->bn_out) != 0)
        return -1;
    DNN(g, cudnnPoolingForward(g->dnn, g->pool, &one, k->out, k->bn_out, &zero, k->pooled,
                               k->pooled_out));
    return 0;
}

/* Parameters [first, last] are ready, last first. */
static void report(fm_grad_ready_fn ready, void *ctx, int first, int last)
{
    for (int p = last; p >= first && ready != NULL; p--)
        ready(ctx, p);
}

/* From the gradient of the block's pooled output to its parameters' (reported as soon
 * as queued: the reducer's all-reduce waits for the work queued before) and, unless
 * dx is NULL, its input's. */
static int block_backward(fm_gpu_t *g, block_t *k, const float *x, const float *d_pooled, float *dx,
                          fm_grad_ready_fn ready, void *ctx)
{
    float *w = g->value[k->param], *gamma = g->value[k->param + 2];
    DNN(g, cudnnPoolingBackward(g->dnn, g->pool, &one, k->pooled, k->pooled_out, k->pooled,
                                d_pooled, k->out, k->bn_out, &zero, k->out, k->d_bn_out));
    if (relu_backward(g, k->out, k->bn_out, k->d_bn_out, k->d_relu) != 0)
        return -1;
    DNN(g, cudnnBatchNormalizationBackward(
               g->dnn, CUDNN_BATCHNORM_SPATIAL, &one, &zero, &one, &zero, k->out, k->conv_out,
               k->out, k->d_relu, k->out, k->d_conv_out, k->channels, gamma, g->grad[k->param + 2],
               g->grad[k->param + 3], BN_EPS, k->saved_mean, k->saved_inv_var));
    report(ready, ctx, k->param + 2, k->param + 3);
    DNN(g, cudnnConvolutionBackwardBias(g->dnn, &one, k->out, k->d_conv_out, &zero, k->channels,
                                        g->grad[k->param + 1]));
    DNN(g, cudnnConvolutionBackwardFilter(g->dnn, &one, k->in, x, k->out, k->d_conv_out, k->conv,
                                          BWD_FILTER_ALGO, g->workspace, g->workspace_size, &zero,
                                          k->filter, g->grad[k->param]));
    report(ready, ctx, k->param, k->param + 1);
    if (dx != NULL)
        DNN(g, cudnnConvolutionBackwardData(g->dnn, &one, k->filter, w, k->out, k->d_conv_out,
                                            k->conv, BWD_DATA_ALGO, g->workspace, g->workspace_size,
                                            &zero, k->in, dx));
    return 0;
}

/* ---- the model ---- */

static int forward(fm_gpu_t *g, const float *x, int B, bool train)
{
    fm_model_t *m = g->host;
    if (shape(g, B) != 0)
        return -1;
    g->batch = B;
    g->train = train;
    g->dropped = false;
    CUDA(g, cudaMemcpy(g->x, x, (size_t)B * IMAGE * sizeof(float), cudaMemcpyHostToDevice));
    if (m->arch == FM_MLP) {
        if (linear_forward(g, &g->l1, g->x, g->h1, B) != 0 || relu_forward(g, g->t256, g->h1) ||
            linear_forward(g, &g->l2, g->h1, g->h2, B) != 0 || relu_forward(g, g->t128, g->h2) ||
            linear_forward(g, &g->l3, g->h2, g->logits, B) != 0)
            return -1;
    } else {
        if (block_forward(g, &g->b1, g->x, train) != 0 ||
            block_forward(g, &g->b2, g->b1.pooled_out, train) != 0 ||
            linear_forward(g, &g->l1, g->b2.pooled_out, g->h1, B) != 0)
            return -1;
        const float *h = g->h1;
        if (train && m->dropout > 0) {
            /* The host draws the mask (the CPU path's generator, the same units dropped). */
            size_t n = (size_t)B * 600;
            float keep = 1.0f / (1.0f - m->dropout);
            for (size_t i = 0; i < n; i++)
                m->mask[i] = fm_uniform(&m->rng) < m->dropout ? 0.0f : keep;
            CUDA(g, cudaMemcpy(g->mask, m->mask, n * sizeof(float), cudaMemcpyHostToDevice));
            DNN(g, cudnnOpTensor(g->dnn, g->mul, &one, g->t600, g->h1, &one, g->t600, g->mask,
                                 &zero, g->t600, g->h1d));
            h = g->h1d;
            g->dropped = true;
        }
        if (linear_forward(g, &g->l2, h, g->h2, B) != 0 ||
            linear_forward(g, &g->l3, g->h2, g->logits, B) != 0)
            return -1;
    }
    CUDA(g, cudaMemcpy(m->logits, g->logits, (size_t)B * CLASSES * sizeof(float),
                       cudaMemcpyDeviceToHost));
    return 0;
}

static double gpu_forward(fm_gpu_t *g, const float *x, const uint8_t *labels, int batch, bool train,
                          int *correct)
{
    if (forward(g, x, batch, train) != 0)
        return -1;
    return fm_cross_entropy(g->host->logits, labels, batch, CLASSES, NULL, correct);
}

static int gpu_backward(fm_gpu_t *g, const uint8_t *labels, fm_grad_ready_fn ready, void *ctx)
{
    fm_model_t *m = g->host;
    int B = g->batch;
    /* The loss's gradient on the host (ten numbers an image), like its value. */
    float *d_logits = m->arch == FM_MLP ? m->d_small2 : m->d_big;
    fm_cross_entropy(m->logits, labels, B, CLASSES, d_logits, NULL);
    CUDA(g, cudaMemcpy(g->d_logits, d_logits, (size_t)B * CLASSES * sizeof(float),
                       cudaMemcpyHostToDevice));
    if (m->arch == FM_MLP) {
        /* params: 0 fc1.w 1 fc1.b 2 fc2.w 3 fc2.b 4 fc3.w 5 fc3.b */
        if (linear_backward(g, &g->l3, g->h2, g->d_logits, g->d_h2, B) != 0)
            return -1;
        report(ready, ctx, 4, 5);
        if (relu_backward(g, g->t128, g->h2, g->d_h2, g->d_r2) != 0 ||
            linear_backward(g, &g->l2, g->h1, g->d_r2, g->d_h1, B) != 0)
            return -1;
        report(ready, ctx, 2, 3);
        if (relu_backward(g, g->t256, g->h1, g->d_h1, g->d_r1) != 0 ||
            linear_backward(g, &g->l1, g->x, g->d_r1, NULL, B) != 0)
            return -1;
        report(ready, ctx, 0, 1);
        return 0;
    }
    /* params: 0 conv1.w 1 conv1.b 2 bn1.g 3 bn1.b 4 conv2.w 5 conv2.b 6 bn2.g 7 bn2.b
     * 8 fc1.w 9 fc1.b 10 fc2.w 11 fc2.b 12 fc3.w 13 fc3.b */
    const float *h = g->dropped ? g->h1d : g->h1;
    if (linear_backward(g, &g->l3, g->h2, g->d_logits, g->d_h2, B) != 0)
        return -1;
    report(ready, ctx, 12, 13);
    if (linear_backward(g, &g->l2, h, g->d_h2, g->d_h1, B) != 0)
        return -1;
    report(ready, ctx, 10, 11);
    const float *d_h = g->d_h1;
    if (g->dropped) {
        DNN(g, cudnnOpTensor(g->dnn, g->mul, &one, g->t600, g->d_h1, &one, g->t600, g->mask, &zero,
                             g->t600, g->d_h1d));
        d_h = g->d_h1d;
    }
    if (linear_backward(g, &g->l1, g->b2.pooled_out, d_h, g->d_f, B) != 0)
        return -1;
    report(ready, ctx, 8, 9);
    /* d_r1: the gradient of block 1's pooled output, which is conv2's input. */
    if (block_backward(g, &g->b2, g->b1.pooled_out, g->d_f, g->d_r1, ready, ctx) != 0 ||
        block_backward(g, &g->b1, g->x, g->d_r1, NULL, ready, ctx) != 0)
        return -1;
    return 0;
}

/* torch.optim.SGD with momentum: buf = momentum buf + grad; value -= lr buf. */
static int gpu_sgd(fm_gpu_t *g, float lr, float momentum)
{
    int n = (int)g->host->nvalues;
    float step = -lr;
    BLAS(g, cublasSscal(g->blas, n, &momentum, g->momentum, 1));
    BLAS(g, cublasSaxpy(g->blas, n, &one, g->grads, 1, g->momentum, 1));
    BLAS(g, cublasSaxpy(g->blas, n, &step, g->momentum, 1, g->values, 1));
    return 0;
}

/* The module's one exported symbol (model_cuda.h). */
__attribute__((visibility("default"))) const fm_gpu_ops_t *fm_gpu_module(void)
{
    static const fm_gpu_ops_t ops = {
        .abi = FM_GPU_ABI,
        .new_model = gpu_new,
        .free_model = gpu_free,
        .forward = gpu_forward,
        .backward = gpu_backward,
        .sgd = gpu_sgd,
        .grad = gpu_grad,
        .pull = gpu_pull,
        .push = gpu_push,
        .error = gpu_error,
    };
    return &ops;
}
