/* A stand-in libnccl.so.2 for the install tests, placed where PyTorch's wheels put NCCL
 * (site-packages/nvidia/nccl/lib): its unique ids spell out where they came from, so a
 * test sees which NCCL libddp loaded. It has every symbol libddp looks up; the calls
 * that would need a GPU fail as NCCL's do without one. The issue asked for a stub: the
 * real NCCL, also on this machine, could not be told apart. */
#include <stdio.h>
#include <string.h>

typedef struct {
    char internal[128];
} ncclUniqueId;

int ncclGetUniqueId(ncclUniqueId *id);
int ncclGetVersion(int *version);
const char *ncclGetErrorString(int result);
const char *ncclGetLastError(void *comm);

int ncclGetUniqueId(ncclUniqueId *id)
{
    static int calls; /* the two ids of one process differ, as NCCL's do */
    memset(id->internal, 0, sizeof id->internal);
    snprintf(id->internal, sizeof id->internal, "stub NCCL beside torch, id %d", ++calls);
    return 0;
}

int ncclGetVersion(int *version)
{
    *version = 22809;
    return 0;
}

const char *ncclGetErrorString(int result)
{
    return result == 0 ? "no error" : "the stub NCCL of the install tests has no GPU";
}

const char *ncclGetLastError(void *comm)
{
    (void)comm;
    return "the stub NCCL of the install tests has no GPU";
}

/* ncclInvalidUsage (5) for everything that needs a communicator. */
#define DDP_STUB(name) \
    int name(void);    \
    int name(void)     \
    {                  \
        return 5;      \
    }
DDP_STUB(ncclCommInitRankConfig)
DDP_STUB(ncclCommGetAsyncError)
DDP_STUB(ncclCommAbort)
DDP_STUB(ncclCommFinalize)
DDP_STUB(ncclCommDestroy)
DDP_STUB(ncclAllReduce)
DDP_STUB(ncclBroadcast)
DDP_STUB(ncclAllGather)
DDP_STUB(ncclReduce)
DDP_STUB(ncclReduceScatter)
DDP_STUB(ncclSend)
DDP_STUB(ncclRecv)
DDP_STUB(ncclGroupStart)
DDP_STUB(ncclGroupEnd)
