/* NVML loaded at run time (see nvml.h). */
#include "host/nvml.h"

#include "dl.h"

#include <errno.h>
#include <string.h>

#define LOAD(nvml, name, field) \
    ddp_dl_symbol((nvml)->lib, name, &(nvml)->field, sizeof(nvml)->field)

int ddp_nvml_open(ddp_nvml_t *n, ddp_buf_t *why)
{
    memset(n, 0, sizeof *n);
    n->lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (n->lib == NULL) {
        ddp_buf_puts(why, "no NVIDIA driver: libnvidia-ml.so.1 cannot be loaded");
        return -ENOENT;
    }
    int (*init)(void) = NULL;
    ddp_dl_symbol(n->lib, "nvmlInit_v2", &init, sizeof init);
    LOAD(n, "nvmlShutdown", shutdown);
    LOAD(n, "nvmlDeviceGetCount_v2", count);
    LOAD(n, "nvmlDeviceGetHandleByIndex_v2", handle);
    LOAD(n, "nvmlDeviceGetPciInfo_v3", pci);
    LOAD(n, "nvmlDeviceGetUUID", uuid);
    LOAD(n, "nvmlDeviceGetRetiredPagesPendingStatus", pending);
    LOAD(n, "nvmlDeviceGetRemappedRows", remap);
    LOAD(n, "nvmlDeviceGetTotalEccErrors", ecc);
    LOAD(n, "nvmlDeviceGetMemoryInfo", memory);
    LOAD(n, "nvmlDeviceGetMemoryInfo_v2", memory_v2);
    LOAD(n, "nvmlErrorString", error);
    if (init == NULL || n->shutdown == NULL || n->count == NULL || n->handle == NULL) {
        ddp_buf_puts(why, "the NVIDIA driver's NVML lacks a function ddp-launch uses");
        dlclose(n->lib);
        memset(n, 0, sizeof *n);
        return -EIO;
    }
    int rc = init();
    if (rc != DDP_NVML_SUCCESS) {
        const char *text = n->error != NULL ? n->error(rc) : NULL;
        ddp_buf_printf(why, "NVML failed: %s (error %d)", text ? text : "unknown", rc);
        dlclose(n->lib);
        memset(n, 0, sizeof *n);
        return -EIO;
    }
    return 0;
}

void ddp_nvml_close(ddp_nvml_t *n)
{
    if (n->lib == NULL)
        return;
    n->shutdown();
    dlclose(n->lib);
    memset(n, 0, sizeof *n);
}
