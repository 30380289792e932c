/* CUDA device counting through the driver API, loaded at run time (see devices.h). */
#include "host/devices.h"

#include "ddp_config.h"
#include "dl.h"
#include "env.h"
#include "error.h"
#include "host/proc.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

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

#define XPU_ANSWER  "ddp-launch xpu count: "
#define XPU_TIMEOUT 120.0

int ddp_devices_xpu_count(const char *python, int *count, ddp_buf_t *why)
{
    static const char script[] =
        "import torch\n"
        "xpu = getattr(torch, 'xpu', None)\n"
        "print('" XPU_ANSWER "%d' % (xpu.device_count() if xpu is not None and "
        "xpu.is_available() else -1), flush=True)\n";
    char *path = NULL, tail[4096];
    size_t kept = 0;
    int status = 0, rc = ddp_proc_find(python, ddp_env_get(DDP_ENV_PATH), &path);
    if (rc != 0) {
        ddp_buf_printf(why, "counting XPUs needs the workers' python with torch: %s: %s", python,
                       ddp_strerror(rc));
        return DDP_EUSAGE;
    }
    char *argv[] = {path, "-c", (char *)script, NULL};
    rc = ddp_proc_run_bounded(argv, true, XPU_TIMEOUT, tail, sizeof tail - 1, &kept, &status);
    free(path);
    tail[kept] = '\0';
    const char *answer = NULL;
    for (const char *at = strstr(tail, XPU_ANSWER); at != NULL; at = strstr(at + 1, XPU_ANSWER))
        answer = at + strlen(XPU_ANSWER);
    int n = -1;
    if (rc == 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0 && answer != NULL &&
        sscanf(answer, "%d", &n) == 1 && n > 0) {
        *count = n;
        return 0;
    }
    if (rc < 0) {
        ddp_buf_printf(why, "unable to run %s to count XPUs: %s", python, ddp_strerror(rc));
    } else if (rc == 1) {
        ddp_buf_printf(why, "%s did not count the XPUs within %g s", python, XPU_TIMEOUT);
    } else if (answer != NULL) {
        ddp_buf_printf(why, "no XPU is available to the torch of %s (torch.xpu)", python);
    } else {
        char line[512]; /* the last it wrote: a traceback's (torch missing) */
        ddp_proc_last_line(tail, kept, line, sizeof line);
        ddp_buf_printf(why, "%s could not count the XPUs with torch: %s", python, line);
    }
    return DDP_EUSAGE;
}
