/* The NCCL backend: one communicator per context on the GPU of LOCAL_RANK, and the
 * unique-id exchange through the launcher's store.
 *
 * Each rank takes its GPU, and the ranks agree through the store that every one did (a
 * rank that could not is named by all: agree_on_setup). Rank 0 calls ncclGetUniqueId and
 * SETs the 128 bytes under ddp/<attempt>/<group>/nccl/<k>; the others GET them (the store
 * waits). The communicator is created non-blocking, and
 * every wait (init, each collective on the context's stream) polls
 * ncclCommGetAsyncError and the stream with a deadline: a peer that died or hangs ends
 * in ncclCommAbort and an error, never in a hang. Runs on the thread that owns the
 * context; CUDA and NCCL are loaded with dlopen (cuda_api.h). */
#include "internal.h"

#include "cuda_api.h"
#include "error.h"
#include "io.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    ddp_cuda_api_t *api;
    ncclComm_t comm;
    cudaStream_t stream;
    int32_t *scratch;   /* on the device, for the barrier */
    cudaEvent_t caller; /* the caller's work so far, for fence */
    int device;
    bool aborted;
} nccl_t;

static ddp_cuda_api_t *api_of(ddp_t *ddp)
{
    if (ddp->cuda == NULL)
        ddp->cuda = calloc(1, sizeof *ddp->cuda);
    return ddp->cuda;
}

void ddp_nccl_release(ddp_t *ddp)
{
    if (ddp->cuda != NULL)
        ddp_cuda_api_unload(ddp->cuda);
    free(ddp->cuda);
    ddp->cuda = NULL;
}

int ddp_nccl_device_count(ddp_t *ddp)
{
    ddp_cuda_api_t *api = api_of(ddp);
    return api != NULL ? ddp_cuda_api_device_count(api) : 0;
}

int ddp_nccl_exchange_id(ddp_t *ddp, void *id, size_t len)
{
    char why[512], key[96];
    ddp_cuda_api_t *api = api_of(ddp);
    ncclUniqueId uid;
    int err;
    if (api == NULL)
        return ddp_fail(ddp, -ENOMEM, "nccl_unique_id: out of memory");
    if (len < sizeof uid.internal)
        return ddp_fail(ddp, DDP_EUSAGE, "nccl_unique_id: %zu bytes is too small for an id (%zu)",
                        len, sizeof uid.internal);
    if ((err = ddp_cuda_api_load_nccl(api, why, sizeof why)) != 0)
        return ddp_fail(ddp, err, "unable to load NCCL: %s", why);
    ddp_key(ddp, key, sizeof key, "nccl/%d", ddp->nccl_ids);
    if (ddp->rank == 0) {
        ncclResult_t r = api->ncclGetUniqueId(&uid);
        if (r != ncclSuccess)
            return ddp_fail(ddp, DDP_ECUDA, "unable to get an NCCL unique id: %s",
                            api->ncclGetErrorString(r));
        if (ddp->store != NULL &&
            (err = ddp_store_client_set(ddp->store, key, uid.internal, sizeof uid.internal)) != 0)
            return ddp_fail(ddp, err, "unable to publish the NCCL unique id: %s",
                            ddp_store_client_error(ddp->store));
    } else {
        ddp_buf_t value = DDP_BUF_INIT;
        err = ddp_wait_key_aloud(ddp, key, "rank 0's NCCL unique id (its NCCL set-up)");
        if (err == 0)
            err = ddp_store_client_get(ddp->store, key, &value);
        if (err == DDP_ETIMEOUT)
            ddp_fail(ddp, err,
                     "rank 0 never published the NCCL unique id (%s) within %g s "
                     "(DDP_TIMEOUT)",
                     key, ddp->timeout);
        else if (err)
            ddp_fail(ddp, err, "rank 0 never published the NCCL unique id (%s): %s", key,
                     ddp_store_client_error(ddp->store));
        else if (value.len != sizeof uid.internal)
            err = ddp_fail(ddp, DDP_EPROTO, "the NCCL unique id under %s has %zu bytes, not %zu",
                           key, value.len, sizeof uid.internal);
        else
            memcpy(uid.internal, value.data, sizeof uid.internal);
        ddp_buf_free(&value);
        if (err)
            return err;
    }
    ddp->nccl_ids++;
    memcpy(id, uid.internal, sizeof uid.internal);
    return 0;
}

static void pause_briefly(int round)
{
    /* The first polls come fast (a collective of a few KiB takes microseconds), then
     * back off to 1 ms. */
    long ns = round < 100 ? 2000 : round < 1000 ? 50000 : 1000000;
    struct timespec ts = {0, ns};
    nanosleep(&ts, NULL);
}

static int nccl_fail(ddp_t *ddp, nccl_t *n, ncclResult_t r, const char *what)
{
    const char *detail = n->comm != NULL ? n->api->ncclGetLastError(n->comm) : "";
    return ddp_fail(ddp, r == ncclRemoteError || r == ncclSystemError ? DDP_ECLOSED : DDP_ECUDA,
                    "%s: NCCL: %s%s%s%s", what, n->api->ncclGetErrorString(r),
                    detail && *detail ? " (" : "", detail ? detail : "",
                    detail && *detail ? ")" : "");
}

static int abort_comm(ddp_t *ddp, nccl_t *n, int err, const char *what, const char *why)
{
    if (n->comm != NULL && !n->aborted) {
        n->api->ncclCommAbort(n->comm);
        n->aborted = true;
        n->comm = NULL;
    }
    return ddp_fail(ddp, err, "%s: %s; the NCCL communicator was aborted", what, why);
}

/* Waits until the communicator has finished a non-blocking call (init, finalize). */
static int wait_comm(ddp_t *ddp, nccl_t *n, const char *what)
{
    double deadline = ddp_clock_mono() + ddp->timeout;
    for (int round = 0;; round++) {
        ncclResult_t state = ncclInProgress;
        ncclResult_t r = n->api->ncclCommGetAsyncError(n->comm, &state);
        if (r != ncclSuccess)
            return nccl_fail(ddp, n, r, what);
        if (state == ncclSuccess)
            return 0;
        if (state != ncclInProgress) {
            int err = nccl_fail(ddp, n, state, what);
            return abort_comm(ddp, n, err, what, ddp->error);
        }
        if (ddp_clock_mono() >= deadline) {
            char why[128];
            snprintf(why, sizeof why, "not done after %g s (a rank missing?)", ddp->timeout);
            return abort_comm(ddp, n, DDP_ETIMEOUT, what, why);
        }
        pause_briefly(round);
    }
}

/* Waits for the work queued on the stream, watching the communicator for a peer's
 * failure meanwhile. */
static int wait_stream(ddp_t *ddp, nccl_t *n, const char *what)
{
    double deadline = ddp_clock_mono() + ddp->timeout;
    for (int round = 0;; round++) {
        cudaError_t c = n->api->cudaStreamQuery(n->stream);
        if (c == cudaSuccess)
            return 0;
        if (c != cudaErrorNotReady)
            return ddp_fail(ddp, DDP_ECUDA, "%s: CUDA: %s", what, n->api->cudaGetErrorString(c));
        ncclResult_t state = ncclSuccess;
        n->api->ncclCommGetAsyncError(n->comm, &state);
        if (state != ncclSuccess && state != ncclInProgress) {
            int err = nccl_fail(ddp, n, state, what);
            return abort_comm(ddp, n, err, what, "a peer failed");
        }
        if (ddp_clock_mono() >= deadline) {
            char why[160];
            snprintf(why, sizeof why, "no progress for %g s (a rank stopped calling it?)",
                     ddp->timeout);
            return abort_comm(ddp, n, DDP_ETIMEOUT, what, why);
        }
        pause_briefly(round);
    }
}

static void nccl_finalize(void *state);

/* Loads CUDA and NCCL and takes the GPU of LOCAL_RANK, with a stream and the barrier's
 * scratch word on it. */
static int set_up_device(ddp_t *ddp, nccl_t *n)
{
    char why[512];
    int err, count;
    if ((err = ddp_cuda_api_load_nccl(n->api, why, sizeof why)) != 0 ||
        (err = ddp_cuda_api_load_cudart(n->api, why, sizeof why)) != 0)
        return ddp_fail(ddp, err, "unable to load NCCL and the CUDA runtime: %s", why);
    count = ddp_cuda_api_device_count(n->api);
    if (count == 0) {
        const char *visible = getenv("CUDA_VISIBLE_DEVICES");
        return ddp_fail(ddp, DDP_ENOCUDA, "the NCCL backend needs a GPU and none is visible%s%s",
                        visible ? ": CUDA_VISIBLE_DEVICES=" : "", visible ? visible : "");
    }
    if (ddp->local_rank >= count)
        return ddp_fail(ddp, DDP_EUSAGE,
                        "LOCAL_RANK %d has no GPU of its own: %d visible (run at most %d workers "
                        "per node, --nproc-per-node=gpu)",
                        ddp->local_rank, count, count);
    n->device = ddp->local_rank;
    cudaError_t c = n->api->cudaSetDevice(n->device);
    if (c == cudaSuccess)
        c = n->api->cudaStreamCreateWithFlags(&n->stream, cudaStreamNonBlocking);
    if (c == cudaSuccess)
        c = n->api->cudaMalloc((void **)&n->scratch, sizeof *n->scratch);
    if (c != cudaSuccess)
        return ddp_fail(ddp, DDP_ECUDA, "unable to set up GPU %d: %s", n->device,
                        n->api->cudaGetErrorString(c));
    return 0;
}

/* The failed rank's word "R message" under `key`: R, and the message in *message. */
static int read_failure(ddp_t *ddp, const char *key, char *message, size_t cap)
{
    ddp_buf_t value = DDP_BUF_INIT;
    const char *keys[] = {key};
    int peer = -1, used = 0;
    if (ddp_store_client_multi_get(ddp->store, keys, 1, &value) != 0 || value.len == 0) {
        ddp_buf_free(&value);
        return -2; /* none failed (or the store cannot say: NCCL's init will) */
    }
    const char *text = ddp_buf_str(&value);
    if (sscanf(text, "%d %n", &peer, &used) != 1 || peer < 0 || peer >= ddp->world_size)
        peer = -1, used = 0;
    snprintf(message, cap, "%s", text + used);
    ddp_buf_free(&value);
    return peer;
}

/* Every rank's GPU set-up is agreed on before the communicator: the healthy ranks count
 * themselves in, and the last one in says .../setup/all. A rank that could not set up its
 * GPU (none of its own, a CUDA error) posts why under .../setup/failed (the first one's
 * word stays) and says .../setup/all at once, so that each peer fails naming it instead of
 * waiting in NCCL's init until the launcher stops it without a word. Since the failed
 * rank's exit makes the launcher stop the others, it waits (5 s at most) until every rank
 * has said what it had to. `own` is this rank's set-up result; the result is the
 * agreement's. Costs a healthy job three store round trips at init. */
static int agree_on_setup(ddp_t *ddp, int own)
{
    char failed[96], arrived[96], all[96], told[96], told_all[96], message[sizeof ddp->error];
    int64_t count = 0;
    bool mine = own != 0;
    int err;
    if (ddp->store == NULL)
        return own;
    ddp_key(ddp, failed, sizeof failed, "nccl/%d/setup/failed", ddp->nccl_ids);
    ddp_key(ddp, arrived, sizeof arrived, "nccl/%d/setup/arrived", ddp->nccl_ids);
    ddp_key(ddp, all, sizeof all, "nccl/%d/setup/all", ddp->nccl_ids);
    ddp_key(ddp, told, sizeof told, "nccl/%d/setup/told", ddp->nccl_ids);
    ddp_key(ddp, told_all, sizeof told_all, "nccl/%d/setup/told-all", ddp->nccl_ids);
    if (mine) {
        ddp_buf_t word = DDP_BUF_INIT, current = DDP_BUF_INIT;
        err = ddp_buf_printf(&word, "%d %s", ddp->rank, ddp->error);
        if (err == 0)
            err = ddp_store_client_compare_set(ddp->store, failed, "", 0, word.data, word.len,
                                               &current);
        ddp_buf_free(&word);
        ddp_buf_free(&current);
        if (err == 0) /* the agreement is reached: no need to wait for the rest */
            err = ddp_store_client_set(ddp->store, all, "1", 1);
    } else {
        err = ddp_store_client_add(ddp->store, arrived, 1, &count);
        if (err == 0 && count == ddp->world_size)
            err = ddp_store_client_set(ddp->store, all, "1", 1);
        if (err == 0)
            err = ddp_wait_key_aloud(ddp, all, "every rank's GPU set-up (before NCCL's init)");
        if (err == DDP_ETIMEOUT)
            return ddp_fail(ddp, err,
                            "not every rank came to the NCCL set-up within %g s (DDP_TIMEOUT)",
                            ddp->timeout);
        if (err)
            return ddp_fail(ddp, err, "unable to agree on the GPU set-up through the store: %s",
                            ddp_store_client_error(ddp->store));
        int peer = read_failure(ddp, failed, message, sizeof message);
        if (peer == -2)
            return 0;
        char who[32] = "a rank";
        if (peer >= 0)
            snprintf(who, sizeof who, "rank %d", peer);
        own = ddp_fail_peer(ddp, DDP_ENOCUDA, peer,
                            "%s could not set up its GPU, so no rank can create the NCCL "
                            "communicator: %s",
                            who, message);
        ddp_fail_fatal(ddp);
    }
    if (err == 0 && ddp_store_client_add(ddp->store, told, 1, &count) == 0 &&
        count == ddp->world_size)
        ddp_store_client_set(ddp->store, told_all, "1", 1);
    if (mine && err == 0) {
        const char *keys[] = {told_all};
        ddp_store_client_wait(ddp->store, keys, 1, ddp->timeout < 5 ? ddp->timeout : 5);
    }
    return own;
}

static int nccl_init(ddp_t *ddp, void **state)
{
    ncclUniqueId uid;
    nccl_t *n = calloc(1, sizeof *n);
    int err;
    if (n == NULL)
        return -ENOMEM;
    n->api = api_of(ddp);
    if (n->api == NULL) {
        free(n);
        return -ENOMEM;
    }
    if ((err = agree_on_setup(ddp, set_up_device(ddp, n))) != 0 ||
        (err = ddp_nccl_exchange_id(ddp, uid.internal, sizeof uid.internal)) != 0)
        goto fail;
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclResult_t r =
        n->api->ncclCommInitRankConfig(&n->comm, ddp->world_size, uid, ddp->rank, &config);
    if (r != ncclSuccess && r != ncclInProgress) {
        err = nccl_fail(ddp, n, r, "unable to create the NCCL communicator");
        goto fail;
    }
    if ((err = wait_comm(ddp, n, "NCCL communicator init")) != 0)
        goto fail;
    *state = n;
    return 0;
fail:
    nccl_finalize(n);
    return err;
}

static void nccl_finalize(void *state)
{
    nccl_t *n = state;
    if (n == NULL)
        return;
    if (n->comm != NULL) {
        /* Finalize flushes what is queued; a broken communicator is aborted instead. */
        ncclResult_t async = ncclSuccess;
        n->api->ncclCommGetAsyncError(n->comm, &async);
        if (async == ncclSuccess && n->api->ncclCommFinalize(n->comm) == ncclSuccess) {
            for (int round = 0; round < 20000; round++) {
                n->api->ncclCommGetAsyncError(n->comm, &async);
                if (async != ncclInProgress)
                    break;
                pause_briefly(round);
            }
        }
        if (async == ncclSuccess)
            n->api->ncclCommDestroy(n->comm);
        else
            n->api->ncclCommAbort(n->comm);
    }
    if (n->scratch != NULL)
        n->api->cudaFree(n->scratch);
    if (n->caller != NULL)
        n->api->cudaEventDestroy(n->caller);
    if (n->stream != NULL)
        n->api->cudaStreamDestroy(n->stream);
    free(n);
}

static bool nccl_type(ddp_dtype_t dtype, ncclDataType_t *out)
{
    switch (dtype) {
    case DDP_FLOAT32:
        *out = ncclFloat32;
        return true;
    case DDP_FLOAT64:
        *out = ncclFloat64;
        return true;
    case DDP_INT32:
        *out = ncclInt32;
        return true;
    case DDP_INT64:
        *out = ncclInt64;
        return true;
    case DDP_FLOAT16:
        *out = ncclFloat16;
        return true;
    case DDP_BFLOAT16:
        *out = ncclBfloat16;
        return true;
    }
    return false;
}

bool ddp_nccl_is_device_memory(ddp_t *ddp, const void *p)
{
    char why[256];
    ddp_cuda_api_t *api = api_of(ddp);
    struct cudaPointerAttributes attr;
    if (p == NULL || api == NULL || ddp_cuda_api_load_cudart(api, why, sizeof why) != 0)
        return false;
    if (api->cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
        api->cudaGetLastError();
        return false;
    }
    return attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged;
}

/* Buffers of the NCCL backend are device memory: a host pointer is the caller's
 * mistake, reported before NCCL would fault on it. */
static int check_device_pointer(ddp_t *ddp, const char *what, const void *p)
{
    if (p == NULL || ddp_nccl_is_device_memory(ddp, p))
        return 0;
    return ddp_fail(ddp, DDP_EUSAGE,
                    "%s: %p is host memory, but the nccl backend takes device pointers (use "
                    "DDP_BACKEND_CPU for host buffers)",
                    what, p);
}

/* The communicator is open, and the calling thread (the reducer's, say, not only the one
 * that called init) works on the context's GPU. */
static int usable(ddp_t *ddp, nccl_t *n, const char *what)
{
    if (n->comm == NULL)
        return ddp_fail(ddp, DDP_ECLOSED, "%s: the NCCL communicator was aborted", what);
    cudaError_t c = n->api->cudaSetDevice(n->device);
    if (c != cudaSuccess)
        return ddp_fail(ddp, DDP_ECUDA, "%s: cudaSetDevice(%d): %s", what, n->device,
                        n->api->cudaGetErrorString(c));
    return 0;
}

/* Before a collective: its dtype in NCCL's terms, a usable communicator, and device
 * buffers (`other` may be NULL). */
static int prepare(ddp_t *ddp, nccl_t *n, const char *what, ddp_dtype_t dtype, ncclDataType_t *type,
                   const void *buf, const void *other)
{
    int err;
    if (!nccl_type(dtype, type))
        return ddp_fail(ddp, DDP_EUSAGE, "%s: unknown dtype %d", what, (int)dtype);
    if ((err = usable(ddp, n, what)) != 0 || (err = check_device_pointer(ddp, what, buf)) != 0)
        return err;
    return other != NULL ? check_device_pointer(ddp, what, other) : 0;
}

/* After it is queued: NCCL's answer, then its completion (or the deadline). */
static int complete(ddp_t *ddp, nccl_t *n, ncclResult_t r, const char *what)
{
    if (r != ncclSuccess && r != ncclInProgress)
        return nccl_fail(ddp, n, r, what);
    return wait_stream(ddp, n, what);
}

static const ncclRedOp_t nccl_ops[] = {
    [DDP_SUM] = ncclSum, [DDP_AVG] = ncclAvg, [DDP_MIN] = ncclMin, [DDP_MAX] = ncclMax};

static int nccl_all_reduce(ddp_t *ddp, void *state, void *buf, size_t count, ddp_dtype_t dtype,
                           ddp_reduce_op_t op)
{
    nccl_t *n = state;
    ncclDataType_t type;
    int err;
    if (count == 0)
        return 0;
    if ((err = prepare(ddp, n, "all_reduce", dtype, &type, buf, NULL)) != 0)
        return err;
    return complete(ddp, n,
                    n->api->ncclAllReduce(buf, buf, count, type, nccl_ops[op], n->comm, n->stream),
                    "all_reduce");
}

static int nccl_barrier(ddp_t *ddp, void *state)
{
    nccl_t *n = state;
    int err = usable(ddp, n, "barrier");
    if (err)
        return err;
    cudaError_t c = n->api->cudaMemsetAsync(n->scratch, 0, sizeof *n->scratch, n->stream);
    if (c != cudaSuccess)
        return ddp_fail(ddp, DDP_ECUDA, "barrier: CUDA: %s", n->api->cudaGetErrorString(c));
    return nccl_all_reduce(ddp, state, n->scratch, 1, DDP_INT32, DDP_SUM);
}

static int nccl_broadcast(ddp_t *ddp, void *state, void *buf, size_t count, ddp_dtype_t dtype,
                          int root)
{
    nccl_t *n = state;
    ncclDataType_t type;
    int err;
    if (count == 0)
        return 0;
    if ((err = prepare(ddp, n, "broadcast", dtype, &type, buf, NULL)) != 0)
        return err;
    return complete(ddp, n, n->api->ncclBroadcast(buf, buf, count, type, root, n->comm, n->stream),
                    "broadcast");
}

static int nccl_all_gather(ddp_t *ddp, void *state, const void *send, void *recv, size_t count,
                           ddp_dtype_t dtype)
{
    nccl_t *n = state;
    ncclDataType_t type;
    int err;
    if (count == 0)
        return 0;
    if ((err = prepare(ddp, n, "all_gather", dtype, &type, send, recv)) != 0)
        return err;
    return complete(ddp, n, n->api->ncclAllGather(send, recv, count, type, n->comm, n->stream),
                    "all_gather");
}

static int nccl_reduce(ddp_t *ddp, void *state, void *buf, size_t count, ddp_dtype_t dtype,
                       ddp_reduce_op_t op, int root)
{
    nccl_t *n = state;
    ncclDataType_t type;
    int err;
    if (count == 0)
        return 0;
    if ((err = prepare(ddp, n, "reduce", dtype, &type, buf, NULL)) != 0)
        return err;
    /* In place: the receive buffer is only written on the root. */
    return complete(
        ddp, n, n->api->ncclReduce(buf, buf, count, type, nccl_ops[op], root, n->comm, n->stream),
        "reduce");
}

static int nccl_reduce_scatter(ddp_t *ddp, void *state, const void *send, void *recv, size_t count,
                               ddp_dtype_t dtype, ddp_reduce_op_t op)
{
    nccl_t *n = state;
    ncclDataType_t type;
    int err;
    if (count == 0)
        return 0;
    if ((err = prepare(ddp, n, "reduce_scatter", dtype, &type, send, recv)) != 0)
        return err;
    return complete(
        ddp, n,
        n->api->ncclReduceScatter(send, recv, count, type, nccl_ops[op], n->comm, n->stream),
        "reduce_scatter");
}

/* A group of NCCL sends and receives: `send` block j to rank j where to_all (else to
 * `root` alone), and from rank j into `recv` block j where from_all (else from `root`);
 * this rank's own block copied. What gather, scatter and all_to_all are made of. */
typedef struct {
    const char *what;
    const void *send;
    void *recv;
    bool to_all, from_all;
    int root;
} exchange_t;

static int exchange(ddp_t *ddp, nccl_t *n, const exchange_t *x, size_t count, ddp_dtype_t dtype)
{
    ncclDataType_t type;
    size_t block = count * ddp_dtype_size(dtype);
    const char *in = x->send;
    char *out = x->recv;
    int err = prepare(ddp, n, x->what, dtype, &type, x->send, x->recv);
    if (err || count == 0)
        return err;
    ncclResult_t r = n->api->ncclGroupStart();
    for (int j = 0; r == ncclSuccess && j < ddp->world_size; j++) {
        if (j == ddp->rank)
            continue;
        if (x->to_all || j == x->root)
            r = n->api->ncclSend(in + (x->to_all ? (size_t)j * block : 0), count, type, j, n->comm,
                                 n->stream);
        if (r == ncclSuccess && (x->from_all || j == x->root))
            r = n->api->ncclRecv(out + (x->from_all ? (size_t)j * block : 0), count, type, j,
                                 n->comm, n->stream);
    }
    ncclResult_t end = n->api->ncclGroupEnd();
    if (r == ncclSuccess)
        r = end;
    if (r == ncclSuccess && x->to_all && x->from_all) {
        cudaError_t c =
            n->api->cudaMemcpyAsync(out + (size_t)ddp->rank * block, in + (size_t)ddp->rank * block,
                                    block, cudaMemcpyDeviceToDevice, n->stream);
        if (c != cudaSuccess)
            return ddp_fail(ddp, DDP_ECUDA, "%s: CUDA: %s", x->what, n->api->cudaGetErrorString(c));
    }
    return complete(ddp, n, r, x->what);
}

static int nccl_all_to_all(ddp_t *ddp, void *state, const void *send, void *recv, size_t count,
                           ddp_dtype_t dtype)
{
    exchange_t x = {"all_to_all", send, recv, true, true, -1};
    return exchange(ddp, state, &x, count, dtype);
}

/* The root's own block, on the device. */
static int own_block(ddp_t *ddp, nccl_t *n, const char *what, void *dst, const void *src,
                     size_t bytes)
{
    if (dst == src || bytes == 0)
        return 0;
    int err = usable(ddp, n, what);
    cudaError_t c =
        err ? cudaSuccess
            : n->api->cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, n->stream);
    if (c != cudaSuccess)
        return ddp_fail(ddp, DDP_ECUDA, "%s: CUDA: %s", what, n->api->cudaGetErrorString(c));
    return err;
}

static int nccl_gather(ddp_t *ddp, void *state, const void *send, void *recv, size_t count,
                       ddp_dtype_t dtype, int root)
{
    bool at_root = ddp->rank == root;
    size_t block = count * ddp_dtype_size(dtype);
    exchange_t x = {"gather", send, recv, false, at_root, root};
    int err = 0;
    if (at_root)
        err = own_block(ddp, state, "gather", (char *)recv + (size_t)root * block, send, block);
    if (!at_root)
        x.recv = NULL; /* receives nothing */
    return err ? err : exchange(ddp, state, &x, count, dtype);
}

static int nccl_scatter(ddp_t *ddp, void *state, const void *send, void *recv, size_t count,
                        ddp_dtype_t dtype, int root)
{
    bool at_root = ddp->rank == root;
    size_t block = count * ddp_dtype_size(dtype);
    exchange_t x = {"scatter", send, recv, at_root, false, root};
    int err = 0;
    if (at_root)
        err = own_block(ddp, state, "scatter", recv, (const char *)send + (size_t)root * block,
                        block);
    if (!at_root)
        x.send = NULL; /* sends nothing */
    return err ? err : exchange(ddp, state, &x, count, dtype);
}

static int nccl_send(ddp_t *ddp, void *state, const void *buf, size_t count, ddp_dtype_t dtype,
                     int peer)
{
    nccl_t *n = state;
    ncclDataType_t type;
    int err;
    if (count == 0)
        return 0;
    if ((err = prepare(ddp, n, "send", dtype, &type, buf, NULL)) != 0)
        return err;
    return complete(ddp, n, n->api->ncclSend(buf, count, type, peer, n->comm, n->stream), "send");
}

static int nccl_recv(ddp_t *ddp, void *state, void *buf, size_t count, ddp_dtype_t dtype, int peer)
{
    nccl_t *n = state;
    ncclDataType_t type;
    int err;
    if (count == 0)
        return 0;
    if ((err = prepare(ddp, n, "recv", dtype, &type, buf, NULL)) != 0)
        return err;
    return complete(ddp, n, n->api->ncclRecv(buf, count, type, peer, n->comm, n->stream), "recv");
}

static int nccl_alloc(ddp_t *ddp, void *state, size_t bytes, void **out)
{
    nccl_t *n = state;
    cudaError_t c = n->api->cudaMalloc(out, bytes);
    if (c != cudaSuccess)
        return ddp_fail(ddp, DDP_ECUDA, "unable to allocate %zu bytes on GPU %d: %s", bytes,
                        n->device, n->api->cudaGetErrorString(c));
    return 0;
}

static void nccl_release(void *state, void *p)
{
    nccl_t *n = state;
    n->api->cudaFree(p);
}

static int nccl_copy(ddp_t *ddp, void *state, void *dst, const void *src, size_t bytes)
{
    nccl_t *n = state;
    int err = usable(ddp, n, "copy");
    if (err)
        return err;
    cudaError_t c = n->api->cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, n->stream);
    if (c != cudaSuccess)
        return ddp_fail(ddp, DDP_ECUDA, "unable to copy %zu bytes on GPU %d: %s", bytes, n->device,
                        n->api->cudaGetErrorString(c));
    return 0;
}

static int nccl_flush(ddp_t *ddp, void *state)
{
    return wait_stream(ddp, state, "copy");
}

/* The caller computes its gradients on the legacy default stream (or synchronizes with
 * it): what it queued there before ready() comes before the bucket's copies. */
static int nccl_fence(ddp_t *ddp, void *state)
{
    nccl_t *n = state;
    cudaError_t c = cudaSuccess;
    if (n->caller == NULL)
        c = n->api->cudaEventCreateWithFlags(&n->caller, cudaEventDisableTiming);
    if (c == cudaSuccess)
        c = n->api->cudaEventRecord(n->caller, cudaStreamLegacy);
    if (c == cudaSuccess)
        c = n->api->cudaStreamWaitEvent(n->stream, n->caller, 0);
    if (c != cudaSuccess)
        return ddp_fail(ddp, DDP_ECUDA, "unable to order the copies after the caller's work: %s",
                        n->api->cudaGetErrorString(c));
    return 0;
}

const ddp_backend_t ddp_nccl_backend = {
    .name = "nccl",
    .init = nccl_init,
    .barrier = nccl_barrier,
    .broadcast = nccl_broadcast,
    .all_reduce = nccl_all_reduce,
    .all_gather = nccl_all_gather,
    .reduce = nccl_reduce,
    .reduce_scatter = nccl_reduce_scatter,
    .all_to_all = nccl_all_to_all,
    .gather = nccl_gather,
    .scatter = nccl_scatter,
    .send = nccl_send,
    .recv = nccl_recv,
    .finalize = nccl_finalize,
    .alloc = nccl_alloc,
    .release = nccl_release,
    .copy = nccl_copy,
    .flush = nccl_flush,
    .fence = nccl_fence,
    .accepts = check_device_pointer,
};
