/* The CUDA runtime and NCCL, loaded with dlopen when a context first needs them.
 *
 * libddp links neither: a CPU job never maps the 200 MB of libnccl, and a libddp built
 * with the toolkit runs where it is absent. The tables hold the functions the NCCL
 * backend calls, typed from the toolkit's own headers. Loaded once per context; no
 * global state. Only built where the toolkit's headers were found. */
#ifndef DDP_WORKER_CUDA_API_H
#define DDP_WORKER_CUDA_API_H

#include <cuda_runtime_api.h>
#include <nccl.h>
#include <stddef.h>

#define DDP_CUDART_FUNCTIONS(X)  \
    X(cudaGetDeviceCount)        \
    X(cudaSetDevice)             \
    X(cudaStreamCreateWithFlags) \
    X(cudaStreamDestroy)         \
    X(cudaStreamQuery)           \
    X(cudaMalloc)                \
    X(cudaFree)                  \
    X(cudaMemsetAsync)           \
    X(cudaPointerGetAttributes)  \
    X(cudaGetErrorString)        \
    X(cudaGetLastError)          \
    X(cudaMemcpyAsync)           \
    X(cudaEventCreateWithFlags)  \
    X(cudaEventRecord)           \
    X(cudaEventDestroy)          \
    X(cudaStreamWaitEvent)

#define DDP_NCCL_FUNCTIONS(X) \
    X(ncclGetVersion)         \
    X(ncclGetUniqueId)        \
    X(ncclCommInitRankConfig) \
    X(ncclCommGetAsyncError)  \
    X(ncclCommAbort)          \
    X(ncclCommFinalize)       \
    X(ncclCommDestroy)        \
    X(ncclAllReduce)          \
    X(ncclBroadcast)          \
    X(ncclAllGather)          \
    X(ncclReduce)             \
    X(ncclReduceScatter)      \
    X(ncclSend)               \
    X(ncclRecv)               \
    X(ncclGroupStart)         \
    X(ncclGroupEnd)           \
    X(ncclGetErrorString)     \
    X(ncclGetLastError)

typedef struct ddp_cuda_api_s {
    void *cudart_lib, *nccl_lib;
#define DDP_API_MEMBER(name) __typeof__(name) *name;
    DDP_CUDART_FUNCTIONS(DDP_API_MEMBER)
    DDP_NCCL_FUNCTIONS(DDP_API_MEMBER)
#undef DDP_API_MEMBER
} ddp_cuda_api_t;

/* Loads NCCL alone (enough for ncclGetUniqueId, which needs no GPU): 0, or DDP_ENOCUDA
 * with the loader's reason in `why`. */
int ddp_cuda_api_load_nccl(ddp_cuda_api_t *api, char *why, size_t why_cap);
/* Loads the CUDA runtime too. */
int ddp_cuda_api_load_cudart(ddp_cuda_api_t *api, char *why, size_t why_cap);
/* The number of GPUs the runtime sees, 0 where there is no runtime, driver or GPU. */
int ddp_cuda_api_device_count(ddp_cuda_api_t *api);
void ddp_cuda_api_unload(ddp_cuda_api_t *api);

#endif
