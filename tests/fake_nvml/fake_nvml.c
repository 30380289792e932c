/* A stand-in for the NVIDIA driver's NVML (libnvidia-ml.so.1) for the tests of a machine
 * without a GPU: the functions ddp-launch loads, answering from the environment.
 *
 *   FAKE_NVML_GPUS=0000:07:00.0,...   the GPUs, in NVML's order (their PCI addresses)
 *   FAKE_NVML_PENDING=I               GPU I has a page retirement pending
 *   FAKE_NVML_REMAP_FAILED=I          GPU I has a failed row remapping
 *   FAKE_NVML_ECC=I:N                 GPU I has N volatile uncorrectable ECC errors
 *   FAKE_NVML_INIT_FAILS=1            nvmlInit_v2 fails (a driver that is not loaded)
 *   FAKE_NVML_USED_MIB=M:N            every GPU has M MiB in use for the first N memory
 *                                     queries of GPU 0 since the library was loaded, then 0
 *   FAKE_NVML_RESERVED_MIB=R          the driver keeps R MiB of each GPU for itself: "used"
 *                                     to nvmlDeviceGetMemoryInfo, not to its _v2
 *   FAKE_NVML_NO_V2=1                 nvmlDeviceGetMemoryInfo_v2 is not supported
 * Each GPU's UUID is GPU-00000000-0000-0000-0000-00000000000I (I its index). It is built by
 * the tests only, put on the loader's path of the launcher under test, and never
 * installed. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FAKE_MAX 64

typedef struct {
    char bus_id_legacy[16];
    unsigned int domain, bus, device, pci_device_id, pci_subsystem_id;
    char bus_id[32];
} fake_pci_t;

enum { OK = 0, INVALID_ARGUMENT = 2, NOT_SUPPORTED = 3, UNKNOWN = 999 };

/* The i-th address of FAKE_NVML_GPUS into `out`; the count. */
static int gpus(int i, char *out, size_t cap)
{
    const char *list = getenv("FAKE_NVML_GPUS");
    int n = 0;
    for (const char *p = list; p != NULL && *p != '\0' && n < FAKE_MAX; n++) {
        size_t len = strcspn(p, ",");
        if (n == i && out != NULL)
            snprintf(out, cap, "%.*s", (int)len, p);
        p += len + (p[len] == ',');
    }
    return n;
}

static int index_of(void *device)
{
    return (int)(uintptr_t)device - 1;
}

static int env_index(const char *name)
{
    const char *v = getenv(name);
    return v != NULL ? atoi(v) : -1;
}

int nvmlInit_v2(void);
int nvmlShutdown(void);
int nvmlDeviceGetCount_v2(unsigned int *count);
int nvmlDeviceGetHandleByIndex_v2(unsigned int index, void **device);
int nvmlDeviceGetPciInfo_v3(void *device, fake_pci_t *pci);
int nvmlDeviceGetUUID(void *device, char *uuid, unsigned int length);
int nvmlDeviceGetRetiredPagesPendingStatus(void *device, int *state);
int nvmlDeviceGetRemappedRows(void *device, unsigned int *corrected, unsigned int *uncorrected,
                              unsigned int *pending, unsigned int *failed);
int nvmlDeviceGetTotalEccErrors(void *device, int error_type, int counter_type,
                                unsigned long long *count);
const char *nvmlErrorString(int result);
typedef struct {
    unsigned long long total, free, used;
} fake_memory_t;
typedef struct {
    unsigned int version;
    unsigned long long total, reserved, free, used;
} fake_memory_v2_t;
int nvmlDeviceGetMemoryInfo(void *device, fake_memory_t *memory);
int nvmlDeviceGetMemoryInfo_v2(void *device, fake_memory_v2_t *memory);

/* The memory the processes hold on `device` (FAKE_NVML_USED_MIB), and the driver's own. */
static void memory_now(void *device, unsigned long long *used, unsigned long long *reserved)
{
    static int queries; /* of GPU 0, since the library was loaded */
    const char *v = getenv("FAKE_NVML_USED_MIB");
    const char *r = getenv("FAKE_NVML_RESERVED_MIB");
    unsigned long long mib = 0;
    int polls = 0;
    if (v != NULL && sscanf(v, "%llu:%d", &mib, &polls) != 2)
        mib = 0;
    if (index_of(device) == 0)
        queries++;
    *used = queries <= polls ? mib << 20 : 0;
    *reserved = r != NULL ? strtoull(r, NULL, 10) << 20 : 0;
}

/* The first version counts the driver's reservation as used, as the real one does. */
int nvmlDeviceGetMemoryInfo(void *device, fake_memory_t *memory)
{
    unsigned long long used, reserved;
    memory_now(device, &used, &reserved);
    memory->total = 80ULL << 30;
    memory->used = used + reserved;
    memory->free = memory->total - memory->used;
    return OK;
}

int nvmlDeviceGetMemoryInfo_v2(void *device, fake_memory_v2_t *memory)
{
    if (getenv("FAKE_NVML_NO_V2") != NULL)
        return NOT_SUPPORTED;
    if (memory->version != ((unsigned int)sizeof *memory | 2U << 24))
        return INVALID_ARGUMENT;
    unsigned long long used, reserved;
    memory_now(device, &used, &reserved);
    memory->total = 80ULL << 30;
    memory->reserved = reserved;
    memory->used = used;
    memory->free = memory->total - used - reserved;
    return OK;
}

int nvmlInit_v2(void)
{
    return getenv("FAKE_NVML_INIT_FAILS") != NULL ? UNKNOWN : OK;
}

int nvmlShutdown(void)
{
    return OK;
}

int nvmlDeviceGetCount_v2(unsigned int *count)
{
    *count = (unsigned int)gpus(-1, NULL, 0);
    return OK;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned int index, void **device)
{
    if ((int)index >= gpus(-1, NULL, 0))
        return INVALID_ARGUMENT;
    *device = (void *)(uintptr_t)(index + 1);
    return OK;
}

int nvmlDeviceGetPciInfo_v3(void *device, fake_pci_t *pci)
{
    char addr[64];
    unsigned int domain, bus, dev, function;
    if (index_of(device) < 0 || gpus(index_of(device), addr, sizeof addr) <= index_of(device) ||
        sscanf(addr, "%x:%x:%x.%x", &domain, &bus, &dev, &function) != 4)
        return INVALID_ARGUMENT;
    memset(pci, 0, sizeof *pci);
    pci->domain = domain;
    pci->bus = bus;
    pci->device = dev;
    snprintf(pci->bus_id, sizeof pci->bus_id, "%08X:%02X:%02X.0", domain, bus, dev);
    snprintf(pci->bus_id_legacy, sizeof pci->bus_id_legacy, "%04X:%02X:%02X.0", domain & 0xffff,
             bus & 0xff, dev & 0x1f);
    return OK;
}

int nvmlDeviceGetUUID(void *device, char *uuid, unsigned int length)
{
    snprintf(uuid, length, "GPU-00000000-0000-0000-0000-%012d", index_of(device));
    return OK;
}

int nvmlDeviceGetRetiredPagesPendingStatus(void *device, int *state)
{
    *state = index_of(device) == env_index("FAKE_NVML_PENDING");
    return OK;
}

int nvmlDeviceGetRemappedRows(void *device, unsigned int *corrected, unsigned int *uncorrected,
                              unsigned int *pending, unsigned int *failed)
{
    *corrected = *uncorrected = *pending = 0;
    *failed = index_of(device) == env_index("FAKE_NVML_REMAP_FAILED");
    return OK;
}

int nvmlDeviceGetTotalEccErrors(void *device, int error_type, int counter_type,
                                unsigned long long *count)
{
    const char *v = getenv("FAKE_NVML_ECC");
    int i = -1;
    unsigned long long n = 0;
    if (error_type != 1 || counter_type != 0)
        return NOT_SUPPORTED;
    if (v != NULL && sscanf(v, "%d:%llu", &i, &n) != 2)
        i = -1;
    *count = index_of(device) == i ? n : 0;
    return OK;
}

const char *nvmlErrorString(int result)
{
    return result == UNKNOWN ? "Unknown Error (fake)" : "fake NVML error";
}
