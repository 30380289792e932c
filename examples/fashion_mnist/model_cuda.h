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
 * gradients in place. Functions return 0, or -1 with the reason in fm_gpu_error(). */
#ifndef FM_MODEL_CUDA_H
#define FM_MODEL_CUDA_H

#include "model.h"

typedef struct fm_gpu_s fm_gpu_t;

/* 0 where this build has the GPU path, else -1 with the reason in `why`. */
int fm_gpu_built(char *why, size_t len);

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

#endif
