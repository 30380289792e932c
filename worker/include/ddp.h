/* libddp: the worker side of ddp-launch for C and CUDA programs.
 *
 * A program started by ddp-launch calls ddp_init() to learn its place in the job from
 * the environment the launcher gives it (RANK, WORLD_SIZE, LOCAL_RANK,
 * LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), meets its peers through the launcher's
 * store, and then runs collectives: barrier, broadcast, all-reduce and all-gather.
 * Functions that can fail return 0 or a negative code that ddp_strerror() describes;
 * ddp_last_error() then says what failed (naming the peer, the key, the variable), the
 * same text goes to stderr prefixed "libddp:", and TORCHELASTIC_ERROR_FILE receives it
 * so that ddp-launch's failure report shows the cause. A failed collective leaves the
 * workers out of step: every later collective of that context fails at once (the job
 * is restarted by the launcher, not repaired). Each collective fails when a peer makes
 * no progress for the timeout or goes away; it never waits forever. A context is used
 * by one thread at a time. */
#ifndef DDP_H
#define DDP_H

#include <stddef.h>

#include "ddp_errors.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ddp_s ddp_t;

typedef enum {
    DDP_FLOAT32,
    DDP_FLOAT64,
    DDP_INT32,
    DDP_INT64,
    DDP_FLOAT16,  /* NCCL backend only */
    DDP_BFLOAT16, /* NCCL backend only */
} ddp_dtype_t;

typedef enum {
    DDP_SUM,
    DDP_AVG, /* the sum divided by the world size */
    DDP_MIN,
    DDP_MAX,
} ddp_reduce_op_t;

typedef enum {
    DDP_BACKEND_AUTO, /* DDP_BACKEND if set, else NCCL where built in and a GPU is seen, else CPU */
    DDP_BACKEND_CPU,  /* a ring: shared memory when all ranks are on one host, else TCP */
    DDP_BACKEND_NCCL, /* NCCL on the GPU of LOCAL_RANK; buffers are device pointers */
} ddp_backend_kind_t;

typedef struct ddp_options_s {
    ddp_backend_kind_t backend;
    double timeout; /* seconds for init and for each collective; 0: DDP_TIMEOUT or 300 */
} ddp_options_t;

/* Joins the job: reads the environment, connects to the store (retrying until the
 * timeout), and connects to the peers. On success *out is a new context, owned by the
 * caller until ddp_finalize(). A missing or inconsistent variable, an unreachable
 * store or a peer that never comes fails with a message naming it. The worker is also
 * made to die with its parent (the launcher). */
int ddp_init(ddp_t **out);
int ddp_init_with(ddp_t **out, const ddp_options_t *options);

/* This worker's global rank, 0 <= rank < world size. */
int ddp_rank(const ddp_t *ddp);
/* The number of workers in the job. */
int ddp_world_size(const ddp_t *ddp);
/* This worker's rank among the workers of its node. */
int ddp_local_rank(const ddp_t *ddp);
/* The number of workers on this worker's node. */
int ddp_local_world_size(const ddp_t *ddp);
/* The attempt number of the job (TORCHELASTIC_RESTART_COUNT), from 0. */
int ddp_restart_count(const ddp_t *ddp);
/* "cpu" or "nccl". */
const char *ddp_backend_name(const ddp_t *ddp);

/* Returns once every worker has called it. */
int ddp_barrier(ddp_t *ddp);

/* Copies `count` elements of `buf` on rank `root` into `buf` on every rank. */
int ddp_broadcast(ddp_t *ddp, void *buf, size_t count, ddp_dtype_t dtype, int root);

/* Reduces `count` elements of `buf` across the workers, in place. Every rank ends with
 * bitwise-identical results (the reduction order is the same for all). */
int ddp_all_reduce(ddp_t *ddp, void *buf, size_t count, ddp_dtype_t dtype, ddp_reduce_op_t op);

/* Gathers `count` elements of `send` from every rank into `recv` (world size * count
 * elements, rank 0's first). `send` may be inside `recv` at this rank's place. */
int ddp_all_gather(ddp_t *ddp, const void *send, void *recv, size_t count, ddp_dtype_t dtype);

/* The bytes of an NCCL unique id (NCCL_UNIQUE_ID_BYTES). */
#define DDP_NCCL_UNIQUE_ID_BYTES 128

/* For a program that makes its own NCCL communicators: rank 0 calls ncclGetUniqueId and
 * publishes the id in the launcher's store, every other rank waits for it; each rank
 * gets the same DDP_NCCL_UNIQUE_ID_BYTES bytes in `id` (`len` at least that), ready for
 * ncclCommInitRank. Every rank must make the same number of calls: the k-th call pairs
 * with the k-th. Needs no GPU. DDP_ENOCUDA where libddp was built without NCCL or
 * libnccl.so.2 cannot be loaded. */
int ddp_nccl_unique_id(ddp_t *ddp, void *id, size_t len);

/* What the last failed call of this context did wrong, or "". */
const char *ddp_last_error(const ddp_t *ddp);

/* Leaves the job and frees the context. NULL is allowed. */
void ddp_finalize(ddp_t *ddp);

/* A static description of an error code returned by libddp. */
const char *ddp_strerror(int err);

#ifdef __cplusplus
}
#endif

#endif
