/* The GPU models where cuDNN or cuBLAS was not found at build time: fm_gpu_new says so,
 * and nothing else is reachable. */
#include "model_cuda.h"

#include <stdio.h>

struct fm_gpu_s {
    char why[1];
};

int fm_gpu_built(char *why, size_t len)
{
    snprintf(why, len,
             "this fashion-mnist was built without cuDNN and cuBLAS: the cpu device only "
             "(rebuild where the CUDA toolkit and cuDNN are installed)");
    return -1;
}

int fm_gpu_new(fm_model_t *host, int device, fm_gpu_t **out, char *why, size_t len)
{
    (void)host;
    (void)device;
    *out = NULL;
    return fm_gpu_built(why, len);
}

void fm_gpu_free(fm_gpu_t *g)
{
    (void)g;
}

double fm_gpu_forward(fm_gpu_t *g, const float *x, const uint8_t *labels, int batch, bool train,
                      int *correct)
{
    (void)g, (void)x, (void)labels, (void)batch, (void)train, (void)correct;
    return -1;
}

int fm_gpu_backward(fm_gpu_t *g, const uint8_t *labels, fm_grad_ready_fn ready, void *ctx)
{
    (void)g, (void)labels, (void)ready, (void)ctx;
    return -1;
}

int fm_gpu_sgd(fm_gpu_t *g, float lr, float momentum)
{
    (void)g, (void)lr, (void)momentum;
    return -1;
}

float *fm_gpu_grad(const fm_gpu_t *g, int param)
{
    (void)g, (void)param;
    return NULL;
}

int fm_gpu_pull(fm_gpu_t *g)
{
    (void)g;
    return -1;
}

int fm_gpu_push(fm_gpu_t *g)
{
    (void)g;
    return -1;
}

const char *fm_gpu_error(const fm_gpu_t *g)
{
    (void)g;
    return "no CUDA device in this build";
}
