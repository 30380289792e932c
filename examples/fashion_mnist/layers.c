/* The CPU layers (see layers.h). */
#include "layers.h"

#include <cblas.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

void fm_linear_forward(const fm_linear_t *l, const float *x, float *y, int batch)
{
    for (int i = 0; i < batch; i++)
        memcpy(y + (size_t)i * l->out, l->b, (size_t)l->out * sizeof *y);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, batch, l->out, l->in, 1.0f, x, l->in, l->w,
                l->in, 1.0f, y, l->out);
}

void fm_linear_backward(const fm_linear_t *l, const float *x, const float *dy, float *dx, int batch)
{
    /* dW[out][in] = dy^T x; db = sum over the batch; dx = dy W */
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, l->out, l->in, batch, 1.0f, dy, l->out, x,
                l->in, 0.0f, l->dw, l->in);
    for (int o = 0; o < l->out; o++) {
        float s = 0;
        for (int i = 0; i < batch; i++)
            s += dy[(size_t)i * l->out + o];
        l->db[o] = s;
    }
    if (dx != NULL)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, batch, l->in, l->out, 1.0f, dy,
                    l->out, l->w, l->in, 0.0f, dx, l->in);
}

/* col[(ci * 9 + k)][b * oh * ow + oy * ow + ox] = x[ci][b][oy + ky - pad][ox + kx - pad]
 * for k = ky * 3 + kx, 0 outside the input. */
static void im2col(const float *x, float *col, int cin, int batch, int h, int w, int pad)
{
    int oh = h + 2 * pad - 2, ow = w + 2 * pad - 2;
    size_t plane = (size_t)h * w, oplane = (size_t)oh * ow, n = (size_t)batch * oplane;
    for (int ci = 0; ci < cin; ci++) {
        for (int k = 0; k < 9; k++) {
            int ky = k / 3 - pad, kx = k % 3 - pad;
            float *row = col + ((size_t)ci * 9 + (size_t)k) * n;
            for (int b = 0; b < batch; b++) {
                const float *src = x + ((size_t)ci * batch + (size_t)b) * plane;
                float *dst = row + (size_t)b * oplane;
                for (int oy = 0; oy < oh; oy++) {
                    int sy = oy + ky;
                    float *out = dst + (size_t)oy * ow;
                    if (sy < 0 || sy >= h) {
                        memset(out, 0, (size_t)ow * sizeof *out);
                        continue;
                    }
                    /* Columns [x0, x1) read the input; the padding outside them is 0. */
                    const float *in = src + (size_t)sy * w + kx;
                    int x0 = kx < 0 ? -kx : 0, x1 = w - kx < ow ? w - kx : ow;
                    for (int ox = 0; ox < x0; ox++)
                        out[ox] = 0.0f;
                    memcpy(out + x0, in + x0, (size_t)(x1 - x0) * sizeof *out);
                    for (int ox = x1; ox < ow; ox++)
                        out[ox] = 0.0f;
                }
            }
        }
    }
}

/* The adjoint of im2col: dx[ci][b][sy][sx] = the sum of the col entries taken from there. */
static void col2im(const float *col, float *dx, int cin, int batch, int h, int w, int pad)
{
    int oh = h + 2 * pad - 2, ow = w + 2 * pad - 2;
    size_t plane = (size_t)h * w, oplane = (size_t)oh * ow, n = (size_t)batch * oplane;
    memset(dx, 0, (size_t)cin * batch * plane * sizeof *dx);
    for (int ci = 0; ci < cin; ci++) {
        for (int k = 0; k < 9; k++) {
            int ky = k / 3 - pad, kx = k % 3 - pad;
            const float *row = col + ((size_t)ci * 9 + (size_t)k) * n;
            for (int b = 0; b < batch; b++) {
                float *dst = dx + ((size_t)ci * batch + (size_t)b) * plane;
                const float *src = row + (size_t)b * oplane;
                for (int oy = 0; oy < oh; oy++) {
                    int sy = oy + ky;
                    if (sy < 0 || sy >= h)
                        continue;
                    int x0 = kx < 0 ? -kx : 0, x1 = w - kx < ow ? w - kx : ow;
                    float *to = dst + (size_t)sy * w + kx;
                    const float *from = src + (size_t)oy * ow;
                    for (int ox = x0; ox < x1; ox++)
                        to[ox] += from[ox];
                }
            }
        }
    }
}

int fm_conv_forward(fm_conv_t *c, const float *x, float *y, int batch, int h, int w)
{
    size_t n = (size_t)batch * (size_t)(h + 2 * c->pad - 2) * (size_t)(w + 2 * c->pad - 2);
    size_t need = (size_t)c->cin * 9 * n;
    if (need > c->col_cap) {
        free(c->col);
        if ((c->col = malloc(need * sizeof *c->col)) == NULL) {
            c->col_cap = 0;
            return -ENOMEM;
        }
        c->col_cap = need;
    }
    im2col(x, c->col, c->cin, batch, h, w, c->pad);
    for (int o = 0; o < c->cout; o++) {
        float *row = y + (size_t)o * n;
        for (size_t i = 0; i < n; i++)
            row[i] = c->b[o];
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, c->cout, (int)n, c->cin * 9, 1.0f, c->w,
                c->cin * 9, c->col, (int)n, 1.0f, y, (int)n);
    return 0;
}

void fm_conv_backward(fm_conv_t *c, const float *dy, float *dx, int batch, int h, int w)
{
    int n = batch * (h + 2 * c->pad - 2) * (w + 2 * c->pad - 2), k = c->cin * 9;
    /* dW[cout][k] = dy[cout][n] col^T; db = row sums of dy */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, c->cout, k, n, 1.0f, dy, n, c->col, n,
                0.0f, c->dw, k);
    for (int o = 0; o < c->cout; o++) {
        double s = 0;
        for (int i = 0; i < n; i++)
            s += dy[(size_t)o * n + i];
        c->db[o] = (float)s;
    }
    if (dx == NULL)
        return;
    /* dcol[k][n] = W^T dy, into the im2col buffer, which is no longer needed. */
    float *dcol = c->col;
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, k, n, c->cout, 1.0f, c->w, k, dy, n, 0.0f,
                dcol, n);
    col2im(dcol, dx, c->cin, batch, h, w, c->pad);
}

void fm_conv_free(fm_conv_t *c)
{
    free(c->col);
    c->col = NULL;
    c->col_cap = 0;
}

#define BN_EPS      1e-5
#define BN_MOMENTUM 0.1

static int bn_reserve(fm_bn_t *bn, int n)
{
    size_t need = (size_t)bn->c * (size_t)n;
    if (bn->inv_std == NULL) {
        bn->inv_std = calloc((size_t)bn->c, sizeof *bn->inv_std);
        bn->scratch = calloc(3 * (size_t)bn->c, sizeof *bn->scratch);
        if (bn->inv_std == NULL || bn->scratch == NULL)
            return -ENOMEM;
    }
    if (need > bn->xhat_cap) {
        free(bn->xhat);
        if ((bn->xhat = malloc(need * sizeof *bn->xhat)) == NULL) {
            bn->xhat_cap = 0;
            return -ENOMEM;
        }
        bn->xhat_cap = need;
    }
    return 0;
}

int fm_bn_forward(fm_bn_t *bn, const float *x, float *y, int n, bool train, fm_all_sum_fn sync,
                  void *ctx)
{
    int c = bn->c, err = bn_reserve(bn, n);
    if (err)
        return err;
    if (!train) {
        for (int ch = 0; ch < c; ch++) {
            double inv = 1.0 / sqrt((double)bn->running_var[ch] + BN_EPS);
            float scale = (float)(bn->gamma[ch] * inv);
            float shift = bn->beta[ch] - bn->running_mean[ch] * scale;
            const float *in = x + (size_t)ch * n;
            float *out = y + (size_t)ch * n;
            for (int i = 0; i < n; i++)
                out[i] = in[i] * scale + shift;
        }
        return 0;
    }
    /* Sums of x and x^2 per channel, and the count: over the global batch with sync. */
    double *s = bn->scratch;
    for (int ch = 0; ch < c; ch++) {
        const float *in = x + (size_t)ch * n;
        double sum = 0, sq = 0;
        for (int i = 0; i < n; i++) {
            sum += in[i];
            sq += (double)in[i] * in[i];
        }
        s[ch] = sum;
        s[c + ch] = sq;
    }
    s[2 * c] = n;
    if (sync != NULL && (err = sync(ctx, s, 2 * c + 1)) != 0)
        return err;
    double count = s[2 * c];
    bn->count = count;
    for (int ch = 0; ch < c; ch++) {
        double mean = s[ch] / count, var = s[c + ch] / count - mean * mean;
        if (var < 0)
            var = 0;
        double inv = 1.0 / sqrt(var + BN_EPS);
        bn->inv_std[ch] = inv;
        const float *in = x + (size_t)ch * n;
        float *xhat = bn->xhat + (size_t)ch * n, *out = y + (size_t)ch * n;
        float m = (float)mean, is = (float)inv, gamma = bn->gamma[ch], beta = bn->beta[ch];
        for (int i = 0; i < n; i++) { /* in float: vectorized */
            xhat[i] = (in[i] - m) * is;
            out[i] = gamma * xhat[i] + beta;
        }
        double unbiased = count > 1 ? var * count / (count - 1) : var;
        bn->running_mean[ch] =
            (float)((1 - BN_MOMENTUM) * bn->running_mean[ch] + BN_MOMENTUM * mean);
        bn->running_var[ch] =
            (float)((1 - BN_MOMENTUM) * bn->running_var[ch] + BN_MOMENTUM * unbiased);
    }
    return 0;
}

int fm_bn_backward(fm_bn_t *bn, const float *dy, float *dx, int n, fm_all_sum_fn sync, void *ctx)
{
    int c = bn->c, err;
    double *s = bn->scratch;
    /* dgamma and dbeta are this rank's (the reducer averages them as any gradient); the
     * input gradient needs the global sums of dy and dy * xhat. */
    for (int ch = 0; ch < c; ch++) {
        const float *g = dy + (size_t)ch * n, *xhat = bn->xhat + (size_t)ch * n;
        double sum = 0, dot = 0;
        for (int i = 0; i < n; i++) {
            sum += g[i];
            dot += (double)g[i] * xhat[i];
        }
        bn->dbeta[ch] = (float)sum;
        bn->dgamma[ch] = (float)dot;
        s[ch] = sum;
        s[c + ch] = dot;
    }
    if (dx == NULL)
        return 0;
    if (sync != NULL && (err = sync(ctx, s, 2 * c)) != 0)
        return err;
    /* With sync, the sums over every rank and the global count give each rank the
     * gradient of the sum of all ranks' losses through the shared statistics, as
     * PyTorch's SyncBatchNorm computes it; the reducer's average then makes it the
     * gradient of the mean loss. */
    double total = sync != NULL ? bn->count : n;
    for (int ch = 0; ch < c; ch++) {
        float mean_dy = (float)(s[ch] / total), mean_dot = (float)(s[c + ch] / total);
        float scale = (float)(bn->gamma[ch] * bn->inv_std[ch]);
        const float *g = dy + (size_t)ch * n, *xhat = bn->xhat + (size_t)ch * n;
        float *out = dx + (size_t)ch * n;
        for (int i = 0; i < n; i++)
            out[i] = scale * (g[i] - mean_dy - xhat[i] * mean_dot);
    }
    return 0;
}

void fm_bn_free(fm_bn_t *bn)
{
    free(bn->xhat);
    free(bn->inv_std);
    free(bn->scratch);
    bn->xhat = NULL;
    bn->inv_std = bn->scratch = NULL;
    bn->xhat_cap = 0;
}

void fm_relu_forward(float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] = x[i] > 0 ? x[i] : 0;
}

void fm_relu_backward(const float *y, float *dy, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dy[i] = y[i] > 0 ? dy[i] : 0;
}

void fm_maxpool_forward(const float *x, float *y, int32_t *arg, int planes, int h, int w)
{
    int oh = h / 2, ow = w / 2;
    for (int p = 0; p < planes; p++) {
        const float *in = x + (size_t)p * h * w;
        float *out = y + (size_t)p * oh * ow;
        int32_t *where = arg + (size_t)p * oh * ow;
        for (int yy = 0; yy < oh; yy++) {
            for (int xx = 0; xx < ow; xx++) {
                int best = (2 * yy) * w + 2 * xx;
                const int cand[3] = {best + 1, best + w, best + w + 1};
                for (int k = 0; k < 3; k++) {
                    if (in[cand[k]] > in[best])
                        best = cand[k];
                }
                out[yy * ow + xx] = in[best];
                where[yy * ow + xx] = best;
            }
        }
    }
}

void fm_maxpool_backward(const float *dy, const int32_t *arg, float *dx, int planes, int h, int w)
{
    int o = (h / 2) * (w / 2);
    memset(dx, 0, (size_t)planes * h * w * sizeof *dx);
    for (int p = 0; p < planes; p++) {
        for (int i = 0; i < o; i++)
            dx[(size_t)p * h * w + arg[(size_t)p * o + i]] += dy[(size_t)p * o + i];
    }
}

void fm_flatten(const float *x, float *y, int c, int batch, int hw)
{
    for (int ch = 0; ch < c; ch++)
        for (int b = 0; b < batch; b++)
            memcpy(y + ((size_t)b * c + ch) * hw, x + ((size_t)ch * batch + b) * hw,
                   (size_t)hw * sizeof *y);
}

void fm_unflatten(const float *dy, float *dx, int c, int batch, int hw)
{
    for (int ch = 0; ch < c; ch++)
        for (int b = 0; b < batch; b++)
            memcpy(dx + ((size_t)ch * batch + b) * hw, dy + ((size_t)b * c + ch) * hw,
                   (size_t)hw * sizeof *dx);
}

double fm_uniform(uint64_t *rng)
{
    uint64_t z = (*rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (double)(z >> 11) * 0x1.0p-53;
}

void fm_dropout_forward(float *x, float *mask, size_t n, float p, uint64_t *rng)
{
    float keep = 1.0f / (1.0f - p);
    for (size_t i = 0; i < n; i++) {
        mask[i] = fm_uniform(rng) < p ? 0.0f : keep;
        x[i] *= mask[i];
    }
}

void fm_dropout_backward(float *dy, const float *mask, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dy[i] *= mask[i];
}

double fm_cross_entropy(const float *logits, const uint8_t *labels, int batch, int classes,
                        float *dlogits, int *correct)
{
    double loss = 0;
    int right = 0;
    for (int b = 0; b < batch; b++) {
        const float *z = logits + (size_t)b * classes;
        float max = -FLT_MAX;
        int arg = 0;
        for (int k = 0; k < classes; k++) {
            if (z[k] > max) {
                max = z[k];
                arg = k;
            }
        }
        right += arg == labels[b];
        double sum = 0;
        for (int k = 0; k < classes; k++)
            sum += exp((double)z[k] - max);
        double log_sum = log(sum) + max;
        loss += log_sum - z[labels[b]];
        if (dlogits != NULL) {
            for (int k = 0; k < classes; k++) {
                double p = exp((double)z[k] - log_sum);
                dlogits[(size_t)b * classes + k] = (float)((p - (k == labels[b])) / batch);
            }
        }
    }
    if (correct != NULL)
        *correct = right;
    return loss / batch;
}
