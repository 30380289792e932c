/* NVML, the NVIDIA driver's management library, loaded at run time (dlopen) as the GPU
 * count loads the driver, so that one binary runs where there is none: the functions
 * ddp-launch uses (GPUs' PCI addresses and UUIDs for --numa-binding, health findings and
 * used memory). No NVIDIA header is needed: the two structures are laid out as nvml.h
 * lays them out. Any thread; each user opens and closes its own. */
#ifndef DDP_LAUNCHER_HOST_NVML_H
#define DDP_LAUNCHER_HOST_NVML_H

#include "buf.h"

/* nvmlPciInfo_t (nvmlDeviceGetPciInfo_v3). */
typedef struct {
    char bus_id_legacy[16];
    unsigned int domain, bus, device, pci_device_id, pci_subsystem_id;
    char bus_id[32];
} ddp_nvml_pci_t;

/* nvmlMemory_t: `used` counts the driver's own reservation (about 600 MiB of an H200). */
typedef struct {
    unsigned long long total, free, used;
} ddp_nvml_memory_t;

/* nvmlMemory_v2_t (drivers from R510): `used` is what processes hold, the reservation apart.
 * `version` is DDP_NVML_MEMORY_V2. */
typedef struct {
    unsigned int version;
    unsigned long long total, reserved, free, used;
} ddp_nvml_memory_v2_t;

#define DDP_NVML_MEMORY_V2 ((unsigned int)sizeof(ddp_nvml_memory_v2_t) | 2U << 24)

enum { DDP_NVML_SUCCESS = 0, DDP_NVML_FEATURE_ENABLED = 1 };

typedef struct ddp_nvml_s {
    void *lib;
    int (*shutdown)(void);
    int (*count)(unsigned int *count);
    int (*handle)(unsigned int index, void **device);
    /* Optional: NULL where this driver lacks them. */
    int (*pci)(void *device, ddp_nvml_pci_t *pci);
    int (*uuid)(void *device, char *uuid, unsigned int length);
    int (*pending)(void *device, int *state);
    int (*remap)(void *device, unsigned int *corrected, unsigned int *uncorrected,
                 unsigned int *pending, unsigned int *failed);
    int (*ecc)(void *device, int error_type, int counter_type, unsigned long long *count);
    int (*memory)(void *device, ddp_nvml_memory_t *memory);
    int (*memory_v2)(void *device, ddp_nvml_memory_v2_t *memory);
    const char *(*error)(int result);
} ddp_nvml_t;

/* Loads libnvidia-ml.so.1 and initialises it. Returns 0; -ENOENT where there is no
 * driver, or -EIO when it lacks what every use needs or nvmlInit_v2 fails: `why` says. */
int ddp_nvml_open(ddp_nvml_t *nvml, ddp_buf_t *why);

/* Shuts NVML down and unloads it; a closed or never opened one is harmless. */
void ddp_nvml_close(ddp_nvml_t *nvml);

#endif
