/* The auto backend where NCCL is built in and a GPU is seen: what PyTorch 2.x's default
 * process group is ("cpu:gloo,cuda:nccl"), in libddp's terms. Host buffers go through
 * the CPU ring, connected at init; device buffers through NCCL, whose communicator is
 * created by the first collective on device memory. Every rank makes the same calls, so
 * every rank creates it in the same call. A program with host buffers alone never pays
 * for NCCL and may run more workers than there are GPUs. */
#include "internal.h"

#include <errno.h>
#include <stdlib.h>

typedef struct {
    void *cpu, *nccl; /* the backends' states; nccl NULL until first needed */
} auto_t;

static int auto_init(ddp_t *ddp, void **state)
{
    auto_t *a = calloc(1, sizeof *a);
    if (a == NULL)
        return ddp_fail(ddp, -ENOMEM, "out of memory");
    int err = ddp_cpu_backend.init(ddp, &a->cpu);
    if (err) {
        free(a);
        return err;
    }
    *state = a;
    return 0;
}

static int auto_resolve(ddp_t *ddp, void *state, const void *p, const ddp_backend_t **be,
                        void **be_state)
{
    auto_t *a = state;
    if (!ddp_nccl_is_device_memory(ddp, p)) {
        *be = &ddp_cpu_backend;
        *be_state = a->cpu;
        return 0;
    }
    if (a->nccl == NULL) {
        int err = ddp_nccl_backend.init(ddp, &a->nccl);
        if (err)
            return err;
    }
    *be = &ddp_nccl_backend;
    *be_state = a->nccl;
    return 0;
}

static int auto_barrier(ddp_t *ddp, void *state)
{
    auto_t *a = state;
    return ddp_cpu_backend.barrier(ddp, a->cpu);
}

static void auto_finalize(void *state)
{
    auto_t *a = state;
    if (a == NULL)
        return;
    if (a->nccl != NULL)
        ddp_nccl_backend.finalize(a->nccl);
    ddp_cpu_backend.finalize(a->cpu);
    free(a);
}

/* No collectives or memory of its own but the barrier: ddp.c sends each collective, and
 * the reducer its buckets, to the backend ddp_backend_for() picks for the buffers. */
const ddp_backend_t ddp_auto_backend = {
    .name = "cpu+nccl",
    .init = auto_init,
    .barrier = auto_barrier,
    .finalize = auto_finalize,
    .resolve = auto_resolve,
};
