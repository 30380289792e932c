/* The GPU models' functions in the program: each one calls the GPU module's (see
 * model_cuda.h), which fm_gpu_load() finds and loads with dlopen. In a build without
 * cuDNN (FM_GPU_MODULE undefined) loading says so, and nothing else is reachable. */
#include "model_cuda.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static const fm_gpu_ops_t *ops;

#ifdef FM_GPU_MODULE
/* Where the module is: beside the program (the build tree, or a copy of both), else the
 * directory it is installed in. */
static void module_path(char *path, size_t len)
{
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash != NULL) {
            *slash = '\0';
            snprintf(path, len, "%s/%s", exe, FM_GPU_MODULE);
            if (access(path, F_OK) == 0)
                return;
        }
    }
    snprintf(path, len, "%s/%s", FM_GPU_MODULE_DIR, FM_GPU_MODULE);
}
#endif

int fm_gpu_load(char *why, size_t len)
{
#ifndef FM_GPU_MODULE
    snprintf(why, len,
             "this fashion-mnist was built without cuDNN and cuBLAS: the cpu device only "
             "(rebuild where the CUDA toolkit and cuDNN are installed)");
    return -1;
#else
    if (ops != NULL)
        return 0;
    char path[PATH_MAX + 64];
    module_path(path, sizeof path);
    if (access(path, F_OK) != 0) {
        snprintf(why, len, "the GPU module %s is not installed (%s)", path, strerror(errno));
        return -1;
    }
    void *module = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (module == NULL) {
        const char *error = dlerror();
        bool missing = strstr(error, "cannot open shared object file") != NULL;
        snprintf(why, len, "cannot load the GPU module: %s%s", error,
                 missing ? " (it needs the CUDA runtime, cuBLAS and cuDNN 9: install them or add "
                           "their directory to LD_LIBRARY_PATH)"
                         : "");
        return -1;
    }
    const fm_gpu_ops_t *(*entry)(void);
    *(void **)&entry = dlsym(module, FM_GPU_MODULE_SYMBOL);
    const fm_gpu_ops_t *found = entry != NULL ? entry() : NULL;
    if (found == NULL || found->abi != FM_GPU_ABI) {
        snprintf(why, len, "%s is not this fashion-mnist's GPU module (%s)", path,
                 found == NULL ? "no " FM_GPU_MODULE_SYMBOL "()" : "another version");
        dlclose(module);
        return -1;
    }
    ops = found; /* kept loaded until the program ends */
    return 0;
#endif
}

int fm_gpu_new(fm_model_t *host, int device, fm_gpu_t **out, char *why, size_t len)
{
    *out = NULL;
    if (fm_gpu_load(why, len) != 0)
        return -1;
    return ops->new_model(host, device, out, why, len);
}

void fm_gpu_free(fm_gpu_t *g)
{
    if (g != NULL)
        ops->free_model(g);
}

double fm_gpu_forward(fm_gpu_t *g, const float *x, const uint8_t *labels, int batch, bool train,
                      int *correct)
{
    return ops->forward(g, x, labels, batch, train, correct);
}

int fm_gpu_backward(fm_gpu_t *g, const uint8_t *labels, fm_grad_ready_fn ready, void *ctx)
{
    return ops->backward(g, labels, ready, ctx);
}

int fm_gpu_sgd(fm_gpu_t *g, float lr, float momentum)
{
    return ops->sgd(g, lr, momentum);
}

float *fm_gpu_grad(const fm_gpu_t *g, int param)
{
    return ops->grad(g, param);
}

int fm_gpu_pull(fm_gpu_t *g)
{
    return ops->pull(g);
}

int fm_gpu_push(fm_gpu_t *g)
{
    return ops->push(g);
}

const char *fm_gpu_error(const fm_gpu_t *g)
{
    return ops->error(g);
}
