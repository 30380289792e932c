/* The MLP and FashionCNN on the CPU layers (see model.h). */
#include "model.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define IMAGE   784
#define CLASSES 10
#define MLP_H1  256
#define MLP_H2  128

/* Hands out consecutive slices of the parameter block in registration order. */
static float *take(fm_model_t *m, const char *name, size_t count, float **grad)
{
    fm_param_t *p = &m->params[m->nparams++];
    p->name = name;
    p->count = count;
    p->value = m->values + m->nvalues;
    p->grad = m->grads + m->nvalues;
    *grad = p->grad;
    m->nvalues += count;
    return p->value;
}

/* torch.nn's default: weights and biases uniform in +-1/sqrt(fan_in). */
static void init_uniform(float *v, size_t n, int fan_in, uint64_t *rng)
{
    double bound = 1.0 / sqrt((double)fan_in);
    for (size_t i = 0; i < n; i++)
        v[i] = (float)((2 * fm_uniform(rng) - 1) * bound);
}

static void add_linear(fm_model_t *m, fm_linear_t *l, int in, int out, const char *wname,
                       const char *bname, uint64_t *rng)
{
    l->in = in;
    l->out = out;
    l->w = take(m, wname, (size_t)in * out, &l->dw);
    l->b = take(m, bname, (size_t)out, &l->db);
    init_uniform(l->w, (size_t)in * out, in, rng);
    init_uniform(l->b, (size_t)out, in, rng);
}

static void add_conv(fm_model_t *m, fm_conv_t *c, int cin, int cout, int pad, const char *wname,
                     const char *bname, uint64_t *rng)
{
    c->cin = cin;
    c->cout = cout;
    c->pad = pad;
    c->w = take(m, wname, (size_t)cout * cin * 9, &c->dw);
    c->b = take(m, bname, (size_t)cout, &c->db);
    init_uniform(c->w, (size_t)cout * cin * 9, cin * 9, rng);
    init_uniform(c->b, (size_t)cout, cin * 9, rng);
}

static void add_bn(fm_model_t *m, fm_bn_t *bn, int c, const char *gname, const char *bname,
                   float **buffers)
{
    bn->c = c;
    bn->gamma = take(m, gname, (size_t)c, &bn->dgamma);
    bn->beta = take(m, bname, (size_t)c, &bn->dbeta);
    for (int i = 0; i < c; i++) {
        bn->gamma[i] = 1;
        bn->beta[i] = 0;
    }
    bn->running_mean = *buffers;
    bn->running_var = *buffers + c;
    for (int i = 0; i < c; i++) {
        bn->running_mean[i] = 0;
        bn->running_var[i] = 1;
    }
    *buffers += 2 * c;
}

int fm_model_init(fm_model_t *m, fm_arch_t arch, int batch_cap, uint64_t seed)
{
    memset(m, 0, sizeof *m);
    m->arch = arch;
    m->batch_cap = batch_cap;
    m->rng = seed ^ 0x5DEECE66Dull;
    uint64_t rng = seed;
    size_t B = (size_t)batch_cap, total;
    if (arch == FM_MLP)
        total = (size_t)IMAGE * MLP_H1 + MLP_H1 + (size_t)MLP_H1 * MLP_H2 + MLP_H2 +
                (size_t)MLP_H2 * CLASSES + CLASSES;
    else
        total = 32 * 9 + 32 + 64 + 64 * 32 * 9 + 64 + 128 + 2304 * 600 + 600 + 600 * 120 + 120 +
                120 * CLASSES + CLASSES;
    m->values = calloc(total, sizeof(float));
    m->grads = calloc(total, sizeof(float));
    m->momentum = calloc(total, sizeof(float));
    m->nbuffers = arch == FM_CNN ? 2 * (32 + 64) : 0;
    m->buffers = calloc(m->nbuffers + 1, sizeof(float));
    m->x = malloc(B * IMAGE * sizeof(float));
    m->logits = malloc(B * CLASSES * sizeof(float));
    if (arch == FM_MLP) {
        m->h1 = malloc(B * MLP_H1 * sizeof(float));
        m->h2 = malloc(B * MLP_H2 * sizeof(float));
        m->d_big = malloc(B * MLP_H1 * sizeof(float));
        m->d_small = malloc(B * MLP_H2 * sizeof(float));
        m->d_small2 = malloc(B * CLASSES * sizeof(float));
    } else {
        m->a1 = malloc(B * 32 * 784 * sizeof(float));
        m->arg1 = malloc(B * 32 * 196 * sizeof(int32_t));
        m->p1 = malloc(B * 32 * 196 * sizeof(float));
        m->a2 = malloc(B * 64 * 144 * sizeof(float));
        m->arg2 = malloc(B * 64 * 36 * sizeof(int32_t));
        m->p2 = malloc(B * 64 * 36 * sizeof(float));
        m->f = malloc(B * 2304 * sizeof(float));
        m->h1 = malloc(B * 600 * sizeof(float));
        m->mask = malloc(B * 600 * sizeof(float));
        m->h2 = malloc(B * 120 * sizeof(float));
        m->d_big = malloc(B * 32 * 784 * sizeof(float));
        m->d_big2 = malloc(B * 32 * 784 * sizeof(float));
        m->d_small = malloc(B * 2304 * sizeof(float));
        m->d_small2 = malloc(B * 2304 * sizeof(float));
    }
    if (m->values == NULL || m->grads == NULL || m->momentum == NULL || m->buffers == NULL ||
        m->x == NULL || m->logits == NULL || m->h1 == NULL || m->h2 == NULL || m->d_big == NULL ||
        m->d_small == NULL || m->d_small2 == NULL ||
        (arch == FM_CNN &&
         (m->a1 == NULL || m->arg1 == NULL || m->p1 == NULL || m->a2 == NULL || m->arg2 == NULL ||
          m->p2 == NULL || m->f == NULL || m->mask == NULL || m->d_big2 == NULL))) {
        fm_model_free(m);
        return -ENOMEM;
    }
    if (arch == FM_MLP) {
        add_linear(m, &m->l1, IMAGE, MLP_H1, "fc1.weight", "fc1.bias", &rng);
        add_linear(m, &m->l2, MLP_H1, MLP_H2, "fc2.weight", "fc2.bias", &rng);
        add_linear(m, &m->l3, MLP_H2, CLASSES, "fc3.weight", "fc3.bias", &rng);
    } else {
        float *buffers = m->buffers;
        add_conv(m, &m->conv1, 1, 32, 1, "layer1.0.weight", "layer1.0.bias", &rng);
        add_bn(m, &m->bn1, 32, "layer1.1.weight", "layer1.1.bias", &buffers);
        add_conv(m, &m->conv2, 32, 64, 0, "layer2.0.weight", "layer2.0.bias", &rng);
        add_bn(m, &m->bn2, 64, "layer2.1.weight", "layer2.1.bias", &buffers);
        add_linear(m, &m->l1, 2304, 600, "fc1.weight", "fc1.bias", &rng);
        add_linear(m, &m->l2, 600, 120, "fc2.weight", "fc2.bias", &rng);
        add_linear(m, &m->l3, 120, CLASSES, "fc3.weight", "fc3.bias", &rng);
        m->dropout = 0.25f;
    }
    return 0;
}

void fm_model_free(fm_model_t *m)
{
    fm_conv_free(&m->conv1);
    fm_conv_free(&m->conv2);
    fm_bn_free(&m->bn1);
    fm_bn_free(&m->bn2);
    float *blocks[] = {m->values, m->grads,  m->momentum, m->buffers, m->x,       m->a1,
                       m->p1,     m->a2,     m->p2,       m->f,       m->h1,      m->mask,
                       m->h2,     m->logits, m->d_big,    m->d_big2,  m->d_small, m->d_small2};
    for (size_t i = 0; i < sizeof blocks / sizeof blocks[0]; i++)
        free(blocks[i]);
    free(m->arg1);
    free(m->arg2);
    memset(m, 0, sizeof *m);
}

double fm_model_forward(fm_model_t *m, const float *x, const uint8_t *labels, int batch, bool train,
                        int *correct)
{
    int B = batch;
    m->batch = batch;
    m->train = train;
    memcpy(m->x, x, (size_t)B * IMAGE * sizeof(float));
    if (m->arch == FM_MLP) {
        fm_linear_forward(&m->l1, m->x, m->h1, B);
        fm_relu_forward(m->h1, (size_t)B * MLP_H1);
        fm_linear_forward(&m->l2, m->h1, m->h2, B);
        fm_relu_forward(m->h2, (size_t)B * MLP_H2);
        fm_linear_forward(&m->l3, m->h2, m->logits, B);
    } else {
        /* The input [B][1][28][28] is CNHW with one channel. */
        if (fm_conv_forward(&m->conv1, m->x, m->a1, B, 28, 28) != 0 ||
            fm_bn_forward(&m->bn1, m->a1, m->a1, B * 784, train, m->sync, m->sync_ctx) != 0)
            return -1;
        fm_relu_forward(m->a1, (size_t)B * 32 * 784);
        fm_maxpool_forward(m->a1, m->p1, m->arg1, 32 * B, 28, 28);
        if (fm_conv_forward(&m->conv2, m->p1, m->a2, B, 14, 14) != 0 ||
            fm_bn_forward(&m->bn2, m->a2, m->a2, B * 144, train, m->sync, m->sync_ctx) != 0)
            return -1;
        fm_relu_forward(m->a2, (size_t)B * 64 * 144);
        fm_maxpool_forward(m->a2, m->p2, m->arg2, 64 * B, 12, 12);
        fm_flatten(m->p2, m->f, 64, B, 36);
        fm_linear_forward(&m->l1, m->f, m->h1, B);
        if (train && m->dropout > 0)
            fm_dropout_forward(m->h1, m->mask, (size_t)B * 600, m->dropout, &m->rng);
        fm_linear_forward(&m->l2, m->h1, m->h2, B);
        fm_linear_forward(&m->l3, m->h2, m->logits, B);
    }
    (void)labels;
    return fm_cross_entropy(m->logits, labels, B, CLASSES, NULL, correct);
}

/* Reports parameters [first, last] ready, last first (the order backward finishes them). */
static void report(fm_grad_ready_fn ready, void *ctx, int first, int last)
{
    for (int p = last; p >= first && ready != NULL; p--)
        ready(ctx, p);
}

int fm_model_backward(fm_model_t *m, const uint8_t *labels, fm_grad_ready_fn ready, void *ctx)
{
    int B = m->batch, err;
    float *dlogits = m->arch == FM_MLP ? m->d_small2 : m->d_big;
    fm_cross_entropy(m->logits, labels, B, CLASSES, dlogits, NULL);
    if (m->arch == FM_MLP) {
        /* params: 0 fc1.w 1 fc1.b 2 fc2.w 3 fc2.b 4 fc3.w 5 fc3.b */
        fm_linear_backward(&m->l3, m->h2, dlogits, m->d_small, B);
        report(ready, ctx, 4, 5);
        fm_relu_backward(m->h2, m->d_small, (size_t)B * MLP_H2);
        fm_linear_backward(&m->l2, m->h1, m->d_small, m->d_big, B);
        report(ready, ctx, 2, 3);
        fm_relu_backward(m->h1, m->d_big, (size_t)B * MLP_H1);
        fm_linear_backward(&m->l1, m->x, m->d_big, NULL, B);
        report(ready, ctx, 0, 1);
        return 0;
    }
    /* params: 0 conv1.w 1 conv1.b 2 bn1.g 3 bn1.b 4 conv2.w 5 conv2.b 6 bn2.g 7 bn2.b
     * 8 fc1.w 9 fc1.b 10 fc2.w 11 fc2.b 12 fc3.w 13 fc3.b */
    float *d120 = m->d_small, *d600 = m->d_small2, *d2304 = m->d_small;
    fm_linear_backward(&m->l3, m->h2, dlogits, d120, B);
    report(ready, ctx, 12, 13);
    fm_linear_backward(&m->l2, m->h1, d120, d600, B);
    report(ready, ctx, 10, 11);
    if (m->train && m->dropout > 0)
        fm_dropout_backward(d600, m->mask, (size_t)B * 600);
    /* d600 lives in d_small2, d2304 in d_small: fc1's input gradient overwrites d120,
     * which fc2 no longer needs. */
    fm_linear_backward(&m->l1, m->f, d600, d2304, B);
    report(ready, ctx, 8, 9);
    float *dp2 = m->d_small2; /* [64][B][36] */
    fm_unflatten(d2304, dp2, 64, B, 36);
    float *da2 = m->d_big; /* [64][B][144] */
    fm_maxpool_backward(dp2, m->arg2, da2, 64 * B, 12, 12);
    fm_relu_backward(m->a2, da2, (size_t)B * 64 * 144);
    float *dbn2 = m->d_big2;
    if ((err = fm_bn_backward(&m->bn2, da2, dbn2, B * 144, m->sync, m->sync_ctx)) != 0)
        return err;
    report(ready, ctx, 6, 7);
    float *dp1 = m->d_big; /* [32][B][196] */
    fm_conv_backward(&m->conv2, dbn2, dp1, B, 14, 14);
    report(ready, ctx, 4, 5);
    float *da1 = m->d_big2; /* [32][B][784] */
    fm_maxpool_backward(dp1, m->arg1, da1, 32 * B, 28, 28);
    fm_relu_backward(m->a1, da1, (size_t)B * 32 * 784);
    float *dbn1 = m->d_big;
    if ((err = fm_bn_backward(&m->bn1, da1, dbn1, B * 784, m->sync, m->sync_ctx)) != 0)
        return err;
    report(ready, ctx, 2, 3);
    fm_conv_backward(&m->conv1, dbn1, NULL, B, 28, 28);
    report(ready, ctx, 0, 1);
    return 0;
}

void fm_sgd(float *values, const float *grads, float *buf, size_t n, float lr, float momentum)
{
    for (size_t i = 0; i < n; i++) {
        buf[i] = momentum * buf[i] + grads[i];
        values[i] -= lr * buf[i];
    }
}

void fm_model_sgd(fm_model_t *m, float lr, float momentum)
{
    fm_sgd(m->values, m->grads, m->momentum, m->nvalues, lr, momentum);
}

void fm_adam(float *values, const float *grads, float *m, float *v, size_t n, float lr, long step)
{
    const float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
    float c1 = 1.0f - powf(beta1, (float)step), c2 = 1.0f - powf(beta2, (float)step);
    for (size_t i = 0; i < n; i++) {
        m[i] = beta1 * m[i] + (1 - beta1) * grads[i];
        v[i] = beta2 * v[i] + (1 - beta2) * grads[i] * grads[i];
        values[i] -= lr * (m[i] / c1) / (sqrtf(v[i] / c2) + eps);
    }
}

float fm_lr(float lr, bool cosine, int epoch, int epochs, int step, int steps)
{
    double progress = (double)(epoch * steps + step) / ((double)epochs * steps);
    return cosine ? (float)(lr * 0.5 * (1 + cos(M_PI * progress))) : lr;
}

int fm_model_dump(const fm_model_t *m, const char *path)
{
    FILE *f = fopen(path, "wb");
    if (f == NULL)
        return -1;
    bool written = fwrite(m->values, sizeof(float), m->nvalues, f) == m->nvalues;
    return fclose(f) == 0 && written ? 0 : -1;
}
