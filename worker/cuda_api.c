/* The CUDA runtime and NCCL through dlopen (see cuda_api.h). */
#include "cuda_api.h"

#include "ddp_config.h"
#include "dl.h"
#include "error.h"

#include <dlfcn.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#if DDP_WHEEL
/* Installed from the wheel, libddp.so is site-packages/ddp_launch/lib/libddp.so, and
 * PyTorch's CUDA wheels put NCCL and the runtime in site-packages/nvidia/<part>/lib. torch
 * loads them from there through its RPATH, ahead of the loader's path; libddp looks there
 * first too, so that a C worker in torch's environment uses torch's NCCL. `parts` ends
 * with NULL and lives in libddp, which is how dladdr finds the library's own path. */
static void *open_beside_torch(const char *soname, const char *const *parts)
{
    Dl_info self;
    char path[4096];
    if (dladdr(parts, &self) == 0 || self.dli_fname == NULL)
        return NULL;
    const char *slash = strrchr(self.dli_fname, '/');
    int dir_len = slash != NULL ? (int)(slash - self.dli_fname) : 1;
    const char *dir = slash != NULL ? self.dli_fname : ".";
    for (; *parts != NULL; parts++) {
        int len = snprintf(path, sizeof path, "%.*s/../../nvidia/%s/lib/%s", dir_len, dir, *parts,
                           soname);
        void *lib =
            len > 0 && (size_t)len < sizeof path ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : NULL;
        if (lib != NULL)
            return lib;
    }
    return NULL;
}
#endif

/* Where torch's wheels have it (a libddp from the wheel), then the loader's path, then the
 * directory of the toolkit we were built with, for a toolkit not in the loader's path. */
static void *open_library(const char *soname, const char *const *wheel_parts, char *why,
                          size_t why_cap)
{
    char path[512];
    void *lib = NULL;
#if DDP_WHEEL
    if ((lib = open_beside_torch(soname, wheel_parts)) != NULL)
        return lib;
#else
    (void)wheel_parts;
#endif
    if ((lib = dlopen(soname, RTLD_NOW | RTLD_LOCAL)) != NULL)
        return lib;
    snprintf(why, why_cap, "%s", dlerror());
    snprintf(path, sizeof path, "%s/%s", DDP_CUDA_LIB_DIR, soname);
    lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    return lib;
}

/* ISO C has no cast from the object pointer dlsym returns to a function pointer; POSIX
 * guarantees the representations match, so the bytes are copied. */
int ddp_cuda_api_load_nccl(ddp_cuda_api_t *api, char *why, size_t why_cap)
{
    static const char *const wheel_parts[] = {"nccl", NULL};
    const char *soname = "libnccl.so.2";
    if (api->nccl_lib != NULL)
        return 0;
    void *lib = open_library(soname, wheel_parts, why, why_cap);
    if (lib == NULL)
        return DDP_ENOCUDA;
#define DDP_API_LOAD(name)                                                \
    if (!ddp_dl_symbol(lib, #name, &api->name, sizeof api->name)) {       \
        snprintf(why, why_cap, "%s has no %s (too old?)", soname, #name); \
        dlclose(lib);                                                     \
        return DDP_ENOCUDA;                                               \
    }
    DDP_NCCL_FUNCTIONS(DDP_API_LOAD)
    api->nccl_lib = lib;
    return 0;
}

int ddp_cuda_api_load_cudart(ddp_cuda_api_t *api, char *why, size_t why_cap)
{
    if (api->cudart_lib != NULL)
        return 0;
    /* CUDA 12's runtime wheel has cuda_runtime/lib; CUDA 13's are all in cu13/lib. */
    static const char *const wheel_parts[] = {"cuda_runtime", "cu13", NULL};
    char soname[64];
    snprintf(soname, sizeof soname, "libcudart.so.%d", CUDART_VERSION / 1000);
    void *lib = open_library(soname, wheel_parts, why, why_cap);
    if (lib == NULL)
        return DDP_ENOCUDA;
    DDP_CUDART_FUNCTIONS(DDP_API_LOAD)
#undef DDP_API_LOAD
    api->cudart_lib = lib;
    return 0;
}

int ddp_cuda_api_device_count(ddp_cuda_api_t *api)
{
    char why[256];
    int count = 0;
    if (ddp_cuda_api_load_cudart(api, why, sizeof why) != 0 ||
        api->cudaGetDeviceCount(&count) != cudaSuccess) {
        if (api->cudart_lib != NULL)
            api->cudaGetLastError(); /* the runtime keeps the error otherwise */
        return 0;
    }
    return count;
}

void ddp_cuda_api_unload(ddp_cuda_api_t *api)
{
    /* The runtime stays mapped: unloading it under live CUDA state is undefined. */
    memset(api, 0, sizeof *api);
}
