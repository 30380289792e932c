/* The CUDA runtime and NCCL through dlopen (see cuda_api.h). */
#include "cuda_api.h"

#include "ddp_config.h"
#include "dl.h"
#include "error.h"

#include <dlfcn.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

/* The sonames the toolkit we were built with installs, then its directory, for a
 * toolkit that is not in the loader's path. */
static void *open_library(const char *soname, char *why, size_t why_cap)
{
    char path[512];
    void *lib = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
    if (lib != NULL)
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
    const char *soname = "libnccl.so.2";
    if (api->nccl_lib != NULL)
        return 0;
    void *lib = open_library(soname, why, why_cap);
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
    char soname[64];
    snprintf(soname, sizeof soname, "libcudart.so.%d", CUDART_VERSION / 1000);
    void *lib = open_library(soname, why, why_cap);
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
