/* Unit tests: the FashionMNIST example's CPU layers and model (examples/fashion_mnist)
 * against finite differences. Each check defines a scalar loss, sum(y * r) for a fixed
 * random r unless the layer is the loss itself, and compares the analytic gradient of
 * every input and parameter with a central difference. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "layers.h"
#include "model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EPS 1e-3f

static uint64_t rng = 12345;

static float *randoms(size_t n, float scale)
{
    float *v = malloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++)
        v[i] = (float)((2 * fm_uniform(&rng) - 1) * scale);
    return v;
}

static double dot(const float *a, const float *b, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += (double)a[i] * b[i];
    return s;
}

/* The loss as a function of whatever `ctx` perturbs. */
typedef double (*loss_fn)(void *ctx);

/* Compares `analytic` with central differences of `loss` in each of the first `n`
 * entries of `values` (every `stride`-th, to keep big tensors quick). `allowed_bad` is
 * the fraction of entries that may disagree: a whole network has thousands of ReLU and
 * max-pool kinks, some of which a finite difference crosses; then the gradient as a
 * whole must still point the same way (cosine similarity >= 0.99), which a wrong
 * layout or formula never does. */
static void check_gradient_within(const char *what, float *values, const float *analytic, size_t n,
                                  size_t stride, loss_fn loss, void *ctx, double allowed_bad)
{
    int bad = 0, checked = 0;
    double dot_an = 0, an2 = 0, fd2 = 0;
    for (size_t i = 0; i < n; i += stride) {
        float saved = values[i];
        values[i] = saved + EPS;
        double up = loss(ctx);
        values[i] = saved - EPS;
        double down = loss(ctx);
        values[i] = saved;
        double numeric = (up - down) / (2.0 * EPS), a = analytic[i];
        double tolerance = 2e-2 * fmax(fabs(numeric), fabs(a)) + 2e-3;
        dot_an += numeric * a;
        an2 += a * a;
        fd2 += numeric * numeric;
        checked++;
        if (fabs(numeric - a) > tolerance && bad++ < 5)
            fprintf(stderr, "%s[%zu]: analytic %.6g, finite difference %.6g\n", what, i, a,
                    numeric);
    }
    if (bad > allowed_bad * checked)
        fail_msg("%s: %d of %d gradient entries disagree with finite differences", what, bad,
                 checked);
    double cosine = an2 > 0 && fd2 > 0 ? dot_an / sqrt(an2 * fd2) : 1;
    /* A gradient that is zero in truth (a convolution's bias before batch norm, which
     * removes any constant) is noise on both sides, about 1e-5 for a float loss near 2
     * and EPS 1e-3: its direction means nothing, and the entries were compared above. */
    double rms = sqrt(fmax(an2, fd2) / checked);
    if (rms > 1e-4 && cosine < 0.99)
        fail_msg("%s: the gradient points elsewhere than finite differences (cosine %.4f)", what,
                 cosine);
}

static void check_gradient(const char *what, float *values, const float *analytic, size_t n,
                           size_t stride, loss_fn loss, void *ctx)
{
    check_gradient_within(what, values, analytic, n, stride, loss, ctx, 0);
}

typedef struct {
    fm_linear_t l;
    float *x, *y, *r;
    int batch;
} linear_case_t;

static double linear_loss(void *ctx)
{
    linear_case_t *c = ctx;
    fm_linear_forward(&c->l, c->x, c->y, c->batch);
    return dot(c->y, c->r, (size_t)c->batch * c->l.out);
}

static void test_linear(void **state)
{
    linear_case_t c = {.batch = 3};
    c.l = (fm_linear_t){.in = 5, .out = 4};
    c.l.w = randoms(20, 1);
    c.l.b = randoms(4, 1);
    c.l.dw = calloc(20, sizeof(float));
    c.l.db = calloc(4, sizeof(float));
    c.x = randoms(15, 1);
    c.y = calloc(12, sizeof(float));
    c.r = randoms(12, 1);
    float *dx = calloc(15, sizeof(float));
    linear_loss(&c);
    fm_linear_backward(&c.l, c.x, c.r, dx, c.batch);
    check_gradient("linear x", c.x, dx, 15, 1, linear_loss, &c);
    check_gradient("linear w", c.l.w, c.l.dw, 20, 1, linear_loss, &c);
    check_gradient("linear b", c.l.b, c.l.db, 4, 1, linear_loss, &c);
    free(c.l.w), free(c.l.b), free(c.l.dw), free(c.l.db), free(c.x), free(c.y), free(c.r), free(dx);
}

typedef struct {
    fm_conv_t conv;
    float *x, *y, *r;
    int batch, h, w;
    size_t out;
} conv_case_t;

static double conv_loss(void *ctx)
{
    conv_case_t *c = ctx;
    assert_int_equal(fm_conv_forward(&c->conv, c->x, c->y, c->batch, c->h, c->w), 0);
    return dot(c->y, c->r, c->out);
}

static void run_conv(int pad)
{
    conv_case_t c = {.batch = 2, .h = 5, .w = 6};
    c.conv = (fm_conv_t){.cin = 3, .cout = 4, .pad = pad};
    int oh = c.h + 2 * pad - 2, ow = c.w + 2 * pad - 2;
    size_t in = (size_t)3 * 2 * 5 * 6, wn = 4 * 3 * 9;
    c.out = (size_t)4 * 2 * oh * ow;
    c.conv.w = randoms(wn, 1);
    c.conv.b = randoms(4, 1);
    c.conv.dw = calloc(wn, sizeof(float));
    c.conv.db = calloc(4, sizeof(float));
    c.x = randoms(in, 1);
    c.y = calloc(c.out, sizeof(float));
    c.r = randoms(c.out, 1);
    float *dx = calloc(in, sizeof(float));
    conv_loss(&c);
    fm_conv_backward(&c.conv, c.r, dx, c.batch, c.h, c.w);
    char what[32];
    snprintf(what, sizeof what, "conv pad %d x", pad);
    check_gradient(what, c.x, dx, in, 1, conv_loss, &c);
    snprintf(what, sizeof what, "conv pad %d w", pad);
    check_gradient(what, c.conv.w, c.conv.dw, wn, 1, conv_loss, &c);
    snprintf(what, sizeof what, "conv pad %d b", pad);
    check_gradient(what, c.conv.b, c.conv.db, 4, 1, conv_loss, &c);
    fm_conv_free(&c.conv);
    free(c.conv.w), free(c.conv.b), free(c.conv.dw), free(c.conv.db), free(c.x), free(c.y),
        free(c.r), free(dx);
}

static void test_conv(void **state)
{
    run_conv(1);
    run_conv(0);
}

typedef struct {
    fm_bn_t bn;
    float *x, *y, *r;
    int n;
} bn_case_t;

static double bn_loss(void *ctx)
{
    bn_case_t *c = ctx;
    assert_int_equal(fm_bn_forward(&c->bn, c->x, c->y, c->n, true, NULL, NULL), 0);
    return dot(c->y, c->r, (size_t)c->bn.c * c->n);
}

static void test_batch_norm(void **state)
{
    bn_case_t c = {.n = 7};
    c.bn = (fm_bn_t){.c = 3};
    c.bn.gamma = randoms(3, 1);
    c.bn.beta = randoms(3, 1);
    c.bn.dgamma = calloc(3, sizeof(float));
    c.bn.dbeta = calloc(3, sizeof(float));
    c.bn.running_mean = calloc(3, sizeof(float));
    c.bn.running_var = calloc(3, sizeof(float));
    c.x = randoms(21, 2);
    c.y = calloc(21, sizeof(float));
    c.r = randoms(21, 1);
    float *dx = calloc(21, sizeof(float));
    bn_loss(&c);
    assert_int_equal(fm_bn_backward(&c.bn, c.r, dx, c.n, NULL, NULL), 0);
    check_gradient("batch norm x", c.x, dx, 21, 1, bn_loss, &c);
    check_gradient("batch norm gamma", c.bn.gamma, c.bn.dgamma, 3, 1, bn_loss, &c);
    check_gradient("batch norm beta", c.bn.beta, c.bn.dbeta, 3, 1, bn_loss, &c);
    /* Evaluation uses the running statistics: momentum 0.1 from (0, 1), unbiased. */
    memset(c.bn.running_mean, 0, 3 * sizeof(float));
    for (int ch = 0; ch < 3; ch++)
        c.bn.running_var[ch] = 1;
    bn_loss(&c);
    for (int ch = 0; ch < 3; ch++) {
        double mean = 0, var = 0;
        for (int i = 0; i < c.n; i++)
            mean += c.x[ch * c.n + i];
        mean /= c.n;
        for (int i = 0; i < c.n; i++)
            var += pow(c.x[ch * c.n + i] - mean, 2);
        var /= c.n - 1;
        assert_true(fabs(c.bn.running_mean[ch] - 0.1 * mean) < 1e-5);
        assert_true(fabs(c.bn.running_var[ch] - (0.9 + 0.1 * var)) < 1e-4);
    }
    fm_bn_free(&c.bn);
    free(c.bn.gamma), free(c.bn.beta), free(c.bn.dgamma), free(c.bn.dbeta), free(c.bn.running_mean),
        free(c.bn.running_var), free(c.x), free(c.y), free(c.r), free(dx);
}

typedef struct {
    float *x, *y, *r;
    int32_t *arg;
} pool_case_t;

static double pool_loss(void *ctx)
{
    pool_case_t *c = ctx;
    fm_maxpool_forward(c->x, c->y, c->arg, 2, 4, 6);
    return dot(c->y, c->r, 2 * 2 * 3);
}

static void test_max_pool(void **state)
{
    pool_case_t c = {randoms(48, 1), calloc(12, sizeof(float)), randoms(12, 1),
                     calloc(12, sizeof(int32_t))};
    float *dx = calloc(48, sizeof(float));
    pool_loss(&c);
    fm_maxpool_backward(c.r, c.arg, dx, 2, 4, 6);
    check_gradient("max pool x", c.x, dx, 48, 1, pool_loss, &c);
    free(c.x), free(c.y), free(c.r), free(c.arg), free(dx);
}

typedef struct {
    float *logits;
    uint8_t labels[4];
} ce_case_t;

static double ce_loss(void *ctx)
{
    ce_case_t *c = ctx;
    return fm_cross_entropy(c->logits, c->labels, 4, 10, NULL, NULL);
}

static void test_cross_entropy(void **state)
{
    ce_case_t c = {randoms(40, 3), {3, 0, 9, 5}};
    float *d = calloc(40, sizeof(float));
    int correct;
    fm_cross_entropy(c.logits, c.labels, 4, 10, d, &correct);
    check_gradient("cross entropy", c.logits, d, 40, 1, ce_loss, &c);
    /* Uniform logits: log(10) per sample. */
    float flat[40] = {0};
    assert_true(fabs(fm_cross_entropy(flat, c.labels, 4, 10, NULL, NULL) - log(10)) < 1e-6);
    free(c.logits), free(d);
}

/* The whole FashionCNN (dropout off), so that the layers' composition, the layouts and
 * the shared scratch buffers are checked too: the gradient of the loss in a sample of
 * every parameter tensor. */
typedef struct {
    fm_model_t m;
    float *x;
    uint8_t labels[3];
} model_case_t;

static double model_loss(void *ctx)
{
    model_case_t *c = ctx;
    return fm_model_forward(&c->m, c->x, c->labels, 3, true, NULL);
}

static void run_model(fm_arch_t arch)
{
    model_case_t c = {.labels = {1, 7, 4}};
    assert_int_equal(fm_model_init(&c.m, arch, 3, 99), 0);
    c.m.dropout = 0;
    c.x = randoms(3 * 784, 1.5f);
    model_loss(&c);
    assert_int_equal(fm_model_backward(&c.m, c.labels, NULL, NULL), 0);
    /* The gradients are overwritten by the probes' forward passes: keep them. */
    float *grads = malloc(c.m.nvalues * sizeof *grads);
    memcpy(grads, c.m.grads, c.m.nvalues * sizeof *grads);
    for (int p = 0; p < c.m.nparams; p++) {
        fm_param_t *param = &c.m.params[p];
        size_t stride = param->count > 200 ? param->count / 97 : 1;
        check_gradient_within(param->name, param->value, grads + (param->value - c.m.values),
                              param->count, stride, model_loss, &c, 0.15);
    }
    free(grads);
    free(c.x);
    fm_model_free(&c.m);
}

static void test_cnn_model(void **state)
{
    run_model(FM_CNN);
}

static void test_mlp_model(void **state)
{
    run_model(FM_MLP);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_linear),        cmocka_unit_test(test_conv),
        cmocka_unit_test(test_batch_norm),    cmocka_unit_test(test_max_pool),
        cmocka_unit_test(test_cross_entropy), cmocka_unit_test(test_cnn_model),
        cmocka_unit_test(test_mlp_model),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
