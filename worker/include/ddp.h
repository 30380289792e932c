/* libddp: the worker side of ddp-launch for C and CUDA programs.
 *
 * A program started by ddp-launch calls ddp_init() to learn its place in the job from
 * the environment the launcher gives it (RANK, WORLD_SIZE, LOCAL_RANK,
 * LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), meets its peers through the launcher's
 * store, and then runs collectives: barrier, broadcast, all-reduce, all-gather, reduce,
 * reduce-scatter, all-to-all, gather and scatter, and sends messages point to point.
 * Functions that can fail return 0 or a negative code that ddp_strerror() describes;
 * ddp_last_error() then says what failed (naming the peer, the key, the variable), and
 * the same text goes to stderr as "libddp: error: rank N: ...". A failure that ends the
 * context's use (a failed collective, init that cannot join the job) is also written to
 * TORCHELASTIC_ERROR_FILE so that ddp-launch's failure report shows the cause; a usage
 * error the program may handle is not. Every entry point refuses a NULL (or finalized)
 * context with DDP_EUSAGE. A peer that went away is DDP_ECLOSED. A failed collective leaves the
 * workers out of step: every later collective of that context fails at once (the job
 * is restarted by the launcher, not repaired). Each collective fails when a peer makes
 * no progress for the timeout or goes away; it never waits forever. On the CPU backend,
 * ranks whose calls differ (another collective, count, dtype, op or root) fail at once
 * with DDP_EUSAGE, naming both calls. A context is used by one thread at a time. */
#ifndef DDP_H
#define DDP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

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
    DDP_FLOAT16,  /* on the CPU, reduced in f32 and rounded once (to nearest even) */
    DDP_BFLOAT16, /* the same */
} ddp_dtype_t;

typedef enum {
    DDP_SUM,
    DDP_AVG, /* the sum divided by the world size */
    DDP_MIN,
    DDP_MAX,
} ddp_reduce_op_t;

typedef enum {
    /* DDP_BACKEND if set; else, where NCCL is built in and a GPU is seen, CPU for host
     * buffers and NCCL for device buffers (PyTorch 2.x's "cpu:gloo,cuda:nccl"; NCCL's
     * communicator is made by the first collective on device memory); else CPU. */
    DDP_BACKEND_AUTO,
    DDP_BACKEND_CPU,  /* a ring: shared memory when all ranks are on one host, else TCP */
    DDP_BACKEND_NCCL, /* NCCL on the GPU of LOCAL_RANK; buffers are device pointers */
} ddp_backend_kind_t;

typedef struct ddp_options_s {
    ddp_backend_kind_t backend;
    double timeout; /* seconds for init and for each collective; 0: DDP_TIMEOUT or 300 */
    /* The context's group name (letters, digits, '_', '.', '-'; at most 32): a process
     * may hold several contexts, as PyTorch has several process groups, each with its
     * own connections, when every rank creates them with the same names in the same
     * order. NULL: "main". */
    const char *group;
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
/* "cpu", "nccl", or "cpu+nccl" (the auto backend where a GPU is seen). */
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

/* Reduces `count` elements of `buf` across the ranks into `buf` on rank `root`; the
 * other ranks' `buf` is left as it was. */
int ddp_reduce(ddp_t *ddp, void *buf, size_t count, ddp_dtype_t dtype, ddp_reduce_op_t op,
               int root);

/* Reduces world size * `count` elements of `send` across the ranks; rank r receives
 * block r of the result (elements r * count to r * count + count - 1) in `recv`. `send`
 * is left as it was and must not overlap `recv`. */
int ddp_reduce_scatter(ddp_t *ddp, const void *send, void *recv, size_t count, ddp_dtype_t dtype,
                       ddp_reduce_op_t op);

/* Block j (`count` elements) of each rank's `send` goes to rank j, into block r of its
 * `recv`, where r is the sender: the ranks' blocks transposed. `send` and `recv` hold
 * world size * count elements each and must not overlap. */
int ddp_all_to_all(ddp_t *ddp, const void *send, void *recv, size_t count, ddp_dtype_t dtype);

/* Gathers `count` elements of `send` from every rank into `recv` on rank `root` (world
 * size * count elements, rank 0's first); elsewhere `recv` is not used (may be NULL). A
 * NULL `recv` on the root fails the root's call (DDP_EUSAGE) after it has taken part,
 * so the others' calls succeed and nobody waits. */
int ddp_gather(ddp_t *ddp, const void *send, void *recv, size_t count, ddp_dtype_t dtype, int root);

/* Block r (`count` elements) of `send` on rank `root` goes to rank r's `recv`; elsewhere
 * `send` is not used (may be NULL). */
int ddp_scatter(ddp_t *ddp, const void *send, void *recv, size_t count, ddp_dtype_t dtype,
                int root);

/* Point to point: `count` elements of `buf` to rank `peer`, which takes them with
 * ddp_recv(..., this rank). The k-th send from a rank to another pairs with the other's
 * k-th recv from it, whose count and dtype must be the same (else DDP_EUSAGE at the
 * receiver, naming both; the send's data is dropped and both contexts stay usable). A
 * send returns once its data is on its way (a large one waits for the receiver to read);
 * other ranks take no part. Sending to oneself or to a peer that is not a rank is
 * DDP_EUSAGE. */
int ddp_send(ddp_t *ddp, const void *buf, size_t count, ddp_dtype_t dtype, int peer);
int ddp_recv(ddp_t *ddp, void *buf, size_t count, ddp_dtype_t dtype, int peer);

/* The gradient reducer, as PyTorch's DDP has: the program registers its gradient
 * buffers once; in each backward pass it marks each one ready as soon as it is
 * computed, and a communication thread averages full buckets across the ranks while
 * the backward pass goes on; ddp_reducer_wait() before the optimizer step returns when
 * every gradient holds the average. Buckets take the gradients last registered first
 * (the order backward produces them), one dtype each, the first up to first_bucket_bytes
 * (1 MiB) so communication starts early, the others up to bucket_bytes (25 MiB); they
 * are reduced in order, so every rank runs the same collectives. Buffers are the
 * backend's memory (host for cpu, device for nccl, computed on the default stream).
 * From a ready() until wait() the reducer owns the context and the ready gradients:
 * the program makes no other call on either. */
typedef struct ddp_reducer_s ddp_reducer_t;

/* How the reducer's float32 buckets travel. The values are the dtypes' (DDP_FLOAT16,
 * DDP_BFLOAT16), which programs written before this type passed. */
typedef enum {
    DDP_COMPRESS_NONE = 0,
    DDP_COMPRESS_FLOAT16 = 4,  /* DDP_FLOAT16: PyTorch's fp16_compress_hook */
    DDP_COMPRESS_BFLOAT16 = 5, /* DDP_BFLOAT16: PyTorch's bf16_compress_hook */
} ddp_compress_t;

typedef struct ddp_reducer_options_s {
    size_t bucket_bytes;       /* 0: 25 MiB */
    size_t first_bucket_bytes; /* 0: 1 MiB */
    /* DDP_COMPRESS_NONE (0), or float32 buckets travel as f16 or bf16, half the bytes:
     * rounded to it, averaged with each step's arithmetic in f32, written back as
     * float32. f16 overflows past 65504; bf16 keeps f32's range with 8 bits of
     * precision. Host gradients (the CPU backend) only. Every rank must compress alike. */
    ddp_compress_t compress;
} ddp_reducer_options_t;

/* When the last iteration's events happened, in seconds of CLOCK_MONOTONIC. */
typedef struct ddp_reducer_timing_s {
    double first_ready;      /* the first gradient marked ready */
    double last_ready;       /* the last gradient marked ready */
    double first_comm_start; /* the first bucket's all-reduce began */
    double comm_end;         /* the last bucket's results were in place */
} ddp_reducer_timing_t;

/* A reducer of `ddp` (options may be NULL); freed with ddp_reducer_free(). */
int ddp_reducer_new(ddp_t *ddp, const ddp_reducer_options_t *options, ddp_reducer_t **out);
/* Registers `count` elements at `grad` (the reducer borrows it); returns its index, from
 * 0, or a negative error. All before the first ready(). */
int ddp_reducer_add(ddp_reducer_t *reducer, void *grad, size_t count, ddp_dtype_t dtype);
/* Gradient `index` is computed for this iteration: its bucket starts once all of its
 * gradients are. Twice in one iteration is DDP_EUSAGE. */
int ddp_reducer_ready(ddp_reducer_t *reducer, int index);
/* Waits until every bucket is averaged and copied back. A gradient not marked ready is
 * DDP_EUSAGE, naming it (mark it and wait again); a failed collective is its error. */
int ddp_reducer_wait(ddp_reducer_t *reducer);
/* sync false: the iterations that follow only accumulate, as PyTorch's no_sync(): ready()
 * marks, wait() checks every gradient was marked and returns without communicating (the
 * program goes on adding into its gradients); the next iteration with sync true averages
 * what was summed. Between iterations only (DDP_EUSAGE during one). Every rank must
 * switch alike. */
int ddp_reducer_set_sync(ddp_reducer_t *reducer, bool sync);
/* The number of buckets (after the first ready()). */
int ddp_reducer_buckets(const ddp_reducer_t *reducer);
/* The timing of the last iteration that wait() completed (first_comm_start and comm_end
 * are 0 for one that only accumulated). */
void ddp_reducer_timing(const ddp_reducer_t *reducer, ddp_reducer_timing_t *out);
/* Finishes the iteration in flight, if any, stops the thread and frees. NULL is allowed. */
void ddp_reducer_free(ddp_reducer_t *reducer);

/* Sharded optimizer state, ZeRO stages 1 and 2 (DeepSpeed's; PyTorch's
 * ZeroRedundancyOptimizer is stage 1): the parameters and their gradients are each one
 * float32 array of `count` elements, split in world-size shards; a rank keeps optimizer
 * state (momentum, Adam's moments) for its shard only and updates only that shard. Each
 * step, after the backward pass: ddp_zero_reduce, then the program's optimizer on the
 * shard, then ddp_zero_gather. Host memory (the CPU backend). */
typedef struct ddp_zero_s ddp_zero_t;

/* stage 1: the gradients are all-reduced (each rank has them all, uses its shard);
 * stage 2: reduce-scattered (each rank receives only its shard's average). */
int ddp_zero_new(ddp_t *ddp, size_t count, int stage, ddp_zero_t **out);
/* This rank's shard: elements [*offset, *offset + *len) of the parameters (*len may be 0
 * where there are fewer elements than ranks). */
void ddp_zero_shard(const ddp_zero_t *zero, size_t *offset, size_t *len);
/* Averages the gradients across the ranks; *shard_grads points to the average of this
 * rank's shard (*len elements): inside `grads` with stage 1, the zero's own memory with
 * stage 2 (valid until the next call). */
int ddp_zero_reduce(ddp_zero_t *zero, float *grads, const float **shard_grads);
/* After the shard of `params` was updated: every rank's shard into every rank's
 * `params` (all-gather). */
int ddp_zero_gather(ddp_zero_t *zero, float *params);
void ddp_zero_free(ddp_zero_t *zero);

/* The distributed sampler, with PyTorch's DistributedSampler semantics: each epoch, every
 * rank takes its share of one permutation of 0 .. dataset_size-1 (shuffled by seed +
 * epoch, the same on every rank), so every sample goes to exactly one rank. Without
 * drop_last the list is padded by repeating its start to a multiple of the world size
 * (each rank gets ceil(size / world) indices); with it the tail is cut (floor). The
 * permutation is libddp's own, not torch's randperm. */
typedef struct ddp_sampler_options_s {
    bool shuffle;
    bool drop_last;
    uint64_t seed;
} ddp_sampler_options_t;

/* PyTorch's defaults; NULL options mean the same. */
#define DDP_SAMPLER_OPTIONS_DEFAULT ((ddp_sampler_options_t){true, false, 0})

/* The number of indices this rank gets per epoch. */
size_t ddp_sampler_count(const ddp_t *ddp, size_t dataset_size,
                         const ddp_sampler_options_t *options);
/* This rank's indices of epoch `epoch`, in the order to visit them, into `indices`
 * (room for `capacity`; DDP_EUSAGE if short of ddp_sampler_count). */
int ddp_sampler_indices(ddp_t *ddp, size_t dataset_size, const ddp_sampler_options_t *options,
                        uint64_t epoch, size_t *indices, size_t capacity);

/* In-memory checkpoints: each rank keeps its own last two checkpoints in shared memory, in
 * the directory ddp-launch names in DDP_CHECKPOINT_DIR (a tmpfs), as named buffers of host
 * memory. ddp_checkpoint_save() copies the `n` buffers into the slot that does not hold the
 * newest complete checkpoint and marks it complete last: a crash in the middle of a save
 * leaves the previous one whole. It takes no collective and writes nothing to disk.
 * -ENOSPC (said) when the checkpoint does not fit (the directory's file system, the memory
 * cgroup's limit), once the replicas of other nodes' ranks that ddp-launch keeps there were
 * removed for it where they held the room (said): the previous one stays, the context stays
 * usable. Outside ddp-launch
 * (no DDP_CHECKPOINT_DIR) it does nothing and returns 0.
 * ddp_checkpoint_load(): every rank calls it; it fills each buffer from the record of its
 * name (the sizes must be the saved ones) and *step with the step loaded: the step of
 * DDP_CHECKPOINT_STEP where the launcher sets it, else the newest step every rank holds
 * (agreed through the store). -ENOENT (quietly) when there is none, or outside ddp-launch;
 * DDP_EUSAGE for a checkpoint of another world size, a name it does not hold, another size;
 * DDP_EPARSE when the step asked for is missing or its slot cannot be loaded (being
 * written, torn, corrupted, forged: checked before use, and the other slot taken where no
 * step is asked for, said). Buffers are host memory; a name is 1 to 47 of [A-Za-z0-9._-/],
 * each once. */
typedef struct ddp_checkpoint_buffer_s {
    const char *name;
    void *data; /* read by a save, written by a load */
    size_t size;
} ddp_checkpoint_buffer_t;

int ddp_checkpoint_save(ddp_t *ddp, int64_t step, const ddp_checkpoint_buffer_t *buffers, size_t n);
int ddp_checkpoint_load(ddp_t *ddp, int64_t *step, const ddp_checkpoint_buffer_t *buffers,
                        size_t n);

/* Checkpoints in a file, rank 0's (libddp 0.1's ddp_checkpoint_save and _load, renamed).
 * ddp_checkpoint_save_file(): every rank calls it; after a barrier, rank 0 writes `len`
 * bytes of `data` to `path` atomically (a temporary file, fsync, rename) with a checksum,
 * and every rank returns rank 0's result. ddp_checkpoint_load_file(): every rank reads
 * `path` between two barriers, into *data (malloc'd; the caller frees) and *len. -ENOENT
 * (quietly) when there is no checkpoint yet; DDP_EPARSE for a file that is not one, is
 * truncated or fails its checksum; DDP_EUSAGE when only some ranks see the file (not a
 * shared filesystem). */
int ddp_checkpoint_save_file(ddp_t *ddp, const char *path, const void *data, size_t len);
int ddp_checkpoint_load_file(ddp_t *ddp, const char *path, void **data, size_t *len);

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

/* Leaves the job and frees the context. NULL is allowed; the context must not be used
 * after (a call on it is refused with DDP_EUSAGE while its memory is not reused). */
void ddp_finalize(ddp_t *ddp);

/* A static description of an error code returned by libddp. */
const char *ddp_strerror(int err);

#ifdef __cplusplus
}
#endif

#endif
