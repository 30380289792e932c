/* A stand-in for the CUDA runtime (libcudart.so.<major>) for the tests of a machine
 * without a GPU: the functions libddp's NCCL backend loads, with FAKE_CUDA_DEVICES GPUs
 * (0 when unset) whose "device memory" is the host's. It lets a test give each rank a
 * GPU or not, to check what libddp does around NCCL's init; NCCL itself stays the real
 * one (it carries its own runtime, so it still finds no GPU here). Built by the tests
 * only, put on the loader's path of the workers under test, never installed. */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int devices(void)
{
    const char *text = getenv("FAKE_CUDA_DEVICES");
    return text != NULL ? atoi(text) : 0;
}

cudaError_t cudaGetDeviceCount(int *count)
{
    *count = devices();
    return *count > 0 ? cudaSuccess : cudaErrorNoDevice;
}

cudaError_t cudaSetDevice(int device)
{
    return device >= 0 && device < devices() ? cudaSuccess : cudaErrorInvalidDevice;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned int flags)
{
    (void)flags;
    *stream = malloc(1);
    return *stream != NULL ? cudaSuccess : cudaErrorMemoryAllocation;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream)
{
    free(stream);
    return cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t stream)
{
    (void)stream;
    return cudaSuccess;
}

cudaError_t cudaMalloc(void **p, size_t size)
{
    *p = calloc(1, size > 0 ? size : 1);
    return *p != NULL ? cudaSuccess : cudaErrorMemoryAllocation;
}

cudaError_t cudaFree(void *p)
{
    free(p);
    return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void *p, int value, size_t count, cudaStream_t stream)
{
    (void)stream;
    memset(p, value, count);
    return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
                            cudaStream_t stream)
{
    (void)kind;
    (void)stream;
    memmove(dst, src, count);
    return cudaSuccess;
}

cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *attr, const void *p)
{
    (void)p;
    memset(attr, 0, sizeof *attr);
    attr->type = cudaMemoryTypeUnregistered;
    return cudaSuccess;
}

const char *cudaGetErrorString(cudaError_t error)
{
    static char text[64];
    if (error == cudaSuccess)
        return "no error";
    snprintf(text, sizeof text, "error %d of the tests' stand-in CUDA runtime", (int)error);
    return text;
}

cudaError_t cudaGetLastError(void)
{
    return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags)
{
    (void)flags;
    *event = malloc(1);
    return *event != NULL ? cudaSuccess : cudaErrorMemoryAllocation;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream)
{
    (void)event;
    (void)stream;
    return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t event)
{
    free(event);
    return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags)
{
    (void)stream;
    (void)event;
    (void)flags;
    return cudaSuccess;
}
