/* The FashionMNIST models on a CUDA GPU: the same layers as model.c on cuDNN
 * (convolution, batch norm, ReLU, max pooling, the dropout product) and cuBLAS (fully
 * connected layers, SGD), on the legacy default stream, which is what libddp's reducer
 * orders its NCCL all-reduces after.
 *
 * A GPU model mirrors a host model (model.h): the host one keeps the initialization,
 * the dropout masks (drawn on the host from its generator, so both devices drop the
 * same units from the same seed), the cross-entropy of the logits (ten per image) and
 * the copies that checkpoints read and write; pull and push move the parameters, the
 * momentum and the batch-norm statistics between the two. Parameters, gradients and
 * momentum are each one device block in the host's order, so the reducer averages the
 * gradients in place. Functions return 0, or -1 with the reason in fm_gpu_error().
 *
 * The GPU path is a module, fashion-mnist-cuda.so, that the program loads only for
 * --device cuda (model_gpu.c): the program starts, and trains on the CPU, where the
 * CUDA runtime, cuDNN or cuBLAS are absent, and without their start-up cost. The
 * module's one exported symbol, fm_gpu_module(), returns its table of functions. */
#ifndef FM_MODEL_CUDA_H
#define FM_MODEL_CUDA_H

#include "model.h"

typedef struct fm_gpu_s fm_gpu_t;

/* Loads the GPU module: 0, or -1 with the reason in `why` (a build without cuDNN, the
 * module not found, or a library it needs missing). */
int fm_gpu_load(char *why, size_t len);

/* The GPU copy of `host` on CUDA device `device`; host's values, momentum and
 * statistics are uploaded. -1 with the reason in `why` (no GPU, no driver, out of
 * memory, or a build without cuDNN). */
int fm_gpu_new(fm_model_t *host, int device, fm_gpu_t **out, char *why, size_t len);
void fm_gpu_free(fm_gpu_t *g);
/* fm_model_forward's contract on the GPU (x and labels are host memory); negative on a
 * CUDA error. */
double fm_gpu_forward(fm_gpu_t *g, const float *x, const uint8_t *labels, int batch, bool train,
                      int *correct);
int fm_gpu_backward(fm_gpu_t *g, const uint8_t *labels, fm_grad_ready_fn ready, void *ctx);
int fm_gpu_sgd(fm_gpu_t *g, float lr, float momentum);
/* Parameter `param`'s gradient, in device memory (for the reducer). */
float *fm_gpu_grad(const fm_gpu_t *g, int param);
/* Device to host (values, momentum, statistics) and back. */
int fm_gpu_pull(fm_gpu_t *g);
int fm_gpu_push(fm_gpu_t *g);
const char *fm_gpu_error(const fm_gpu_t *g);

/* What the module implements, in the order of the functions above. */
#define FM_GPU_ABI 1
typedef struct {
    int abi; /* FM_GPU_ABI of the module's build */
    int (*new_model)(fm_model_t *host, int device, fm_gpu_t **out, char *why, size_t len);
    void (*free_model)(fm_gpu_t *g);
    double (*forward)(fm_gpu_t *g, const float *x, const uint8_t *labels, int batch, bool train,
                      int *correct);
    int (*backward)(fm_gpu_t *g, const uint8_t *labels, fm_grad_ready_fn ready, void *ctx);
    int (*sgd)(fm_gpu_t *g, float lr, float momentum);
    float *(*grad)(const fm_gpu_t *g, int param);
    int (*pull)(fm_gpu_t *g);
    int (*push)(fm_gpu_t *g);
    const char *(*error)(const fm_gpu_t *g);
} fm_gpu_ops_t;
#define FM_GPU_MODULE_SYMBOL "fm_gpu_module"
const fm_gpu_ops_t *fm_gpu_module(void);

#endif
