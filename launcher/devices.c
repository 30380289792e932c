/* CUDA device counting through the driver API, loaded at run time (see devices.h). */
#include "devices.h"

#include "ddp_config.h"
#include "dl.h"
#include "error.h"

#include <dlfcn.h>
#include <string.h>

#if DDP_HAVE_CUDA
typedef int (*cu_init_fn)(unsigned int flags);
typedef int (*cu_count_fn)(int *count);
typedef int (*cu_error_string_fn)(int error, const char **text);

/* ISO C has no cast from the object pointer dlsym returns to a function pointer;
 * copying the bytes is what POSIX prescribes instead. */
int ddp_devices_cuda_count(int *count, ddp_buf_t *why)
{
    int rc = DDP_ECUDA, n = 0;
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        ddp_buf_printf(why, "no CUDA driver: %s", dlerror());
        return DDP_ECUDA;
    }
    cu_init_fn cu_init;
    cu_count_fn cu_count;
    cu_error_string_fn cu_error_string;
    ddp_dl_symbol(lib, "cuInit", &cu_init, sizeof cu_init);
    ddp_dl_symbol(lib, "cuDeviceGetCount", &cu_count, sizeof cu_count);
    ddp_dl_symbol(lib, "cuGetErrorString", &cu_error_string, sizeof cu_error_string);
    if (cu_init == NULL || cu_count == NULL) {
        ddp_buf_puts(why, "the CUDA driver lacks cuInit or cuDeviceGetCount");
        goto out;
    }
    int cu = cu_init(0);
    if (cu == 0)
        cu = cu_count(&n);
    if (cu != 0) {
        const char *text = NULL;
        if (cu_error_string == NULL || cu_error_string(cu, &text) != 0 || text == NULL)
            text = "unknown error";
        ddp_buf_printf(why, "the CUDA driver failed: %s (error %d)", text, cu);
        goto out;
    }
    if (n == 0) {
        ddp_buf_puts(why, "no CUDA device is visible (check CUDA_VISIBLE_DEVICES)");
        goto out;
    }
    *count = n;
    rc = 0;
out:
    dlclose(lib);
    return rc;
}
#else
int ddp_devices_cuda_count(int *count, ddp_buf_t *why)
{
    (void)count;
    ddp_buf_puts(why, "ddp-launch was built without CUDA, so it cannot count GPUs; give a "
                      "number, cpu or auto");
    return DDP_ENOCUDA;
}
#endif
