/* libddp's insides: the context, the backend interface, and what backends share.
 *
 * A context is used by one thread at a time (the reducer's communication thread takes
 * it over while it runs collectives). Backends are a const table chosen at init. */
#ifndef DDP_WORKER_INTERNAL_H
#define DDP_WORKER_INTERNAL_H

#include "ddp.h"
#include "ddp_config.h"
#include "flight.h"
#include "log.h"
#include "store_client.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct ddp_backend_s {
    const char *name;
    /* Connects the peers; sets *state. */
    int (*init)(ddp_t *ddp, void **state);
    int (*barrier)(ddp_t *ddp, void *state);
    int (*broadcast)(ddp_t *ddp, void *state, void *buf, size_t count, ddp_dtype_t dtype, int root);
    int (*all_reduce)(ddp_t *ddp, void *state, void *buf, size_t count, ddp_dtype_t dtype,
                      ddp_reduce_op_t op);
    int (*all_gather)(ddp_t *ddp, void *state, const void *send, void *recv, size_t count,
                      ddp_dtype_t dtype);
    int (*reduce)(ddp_t *ddp, void *state, void *buf, size_t count, ddp_dtype_t dtype,
                  ddp_reduce_op_t op, int root);
    int (*reduce_scatter)(ddp_t *ddp, void *state, const void *send, void *recv, size_t count,
                          ddp_dtype_t dtype, ddp_reduce_op_t op);
    int (*all_to_all)(ddp_t *ddp, void *state, const void *send, void *recv, size_t count,
                      ddp_dtype_t dtype);
    int (*gather)(ddp_t *ddp, void *state, const void *send, void *recv, size_t count,
                  ddp_dtype_t dtype, int root);
    int (*scatter)(ddp_t *ddp, void *state, const void *send, void *recv, size_t count,
                   ddp_dtype_t dtype, int root);
    int (*send)(ddp_t *ddp, void *state, const void *buf, size_t count, ddp_dtype_t dtype,
                int peer);
    int (*recv)(ddp_t *ddp, void *state, void *buf, size_t count, ddp_dtype_t dtype, int peer);
    void (*finalize)(void *state);
    /* Memory of the backend's buffers (host for cpu, device for nccl), for the reducer's
     * buckets. A copy is ordered before the backend's next collective; flush waits for
     * the copies queued (NULL: they are done at once). fence (may be NULL) makes later
     * copies wait for the work the caller's thread has queued so far. */
    int (*alloc)(ddp_t *ddp, void *state, size_t bytes, void **out);
    void (*release)(void *state, void *p);
    int (*copy)(ddp_t *ddp, void *state, void *dst, const void *src, size_t bytes);
    int (*flush)(ddp_t *ddp, void *state);
    int (*fence)(ddp_t *ddp, void *state);
    /* 0 when `buf` is memory the backend works on, else the error, said (NULL: any
     * memory): a collective that needs no backend work (one rank) still refuses what the
     * backend would. */
    int (*accepts)(ddp_t *ddp, const char *what, const void *buf);
    /* The auto backend only (NULL for the others): the backend and state that serve
     * memory `p`. */
    int (*resolve)(ddp_t *ddp, void *state, const void *p, const struct ddp_backend_s **be,
                   void **be_state);
} ddp_backend_t;

extern const ddp_backend_t ddp_cpu_backend;
#if DDP_HAVE_NCCL
extern const ddp_backend_t ddp_nccl_backend;
extern const ddp_backend_t ddp_auto_backend;
#endif

/* The backend and state that serve memory `p`: the context's own, or the one the auto
 * backend picks for p's memory (auto.c). */
int ddp_backend_for(ddp_t *ddp, const void *p, const ddp_backend_t **be, void **state);

/* NCCL helpers (nccl.c; without NCCL built in, they fail with DDP_ENOCUDA). The k-th
 * exchange on every rank gets the id rank 0 made for it. */
int ddp_nccl_exchange_id(ddp_t *ddp, void *id, size_t len);
int ddp_nccl_device_count(ddp_t *ddp);
/* Whether `p` is device (or managed) memory; false where there is no CUDA runtime. Creates
 * no CUDA context. */
bool ddp_nccl_is_device_memory(ddp_t *ddp, const void *p);
void ddp_nccl_release(ddp_t *ddp);

struct ddp_s {
    ddp_log_t log;
    int rank, world_size;
    int local_rank, local_world_size;
    int restart_count;
    char master_addr[256];
    char group[33];
    int master_port;
    double timeout; /* s, for init and each collective */
    ddp_store_client_t *store;
    const ddp_backend_t *backend;
    void *backend_state;
    int broken;     /* a collective failed: the peers are out of step; later calls fail */
    int error_peer; /* the rank the last failure blames (gone, or the odd one out), or -1 */
    struct ddp_cuda_api_s *cuda; /* CUDA and NCCL, once loaded (nccl.c) */
    int nccl_ids;                /* unique ids exchanged so far */
    int checkpoints;             /* checkpoint saves and loads so far */
    /* The slot files of in-memory checkpoints, mapped for saves (checkpoint.c). */
    struct ddp_checkpoint_maps_s *checkpoint_maps;
    bool half_wire; /* the reducer's compression: a half all-reduce sends halves (cpu.c) */
    char error[1024];
    /* DDP_CONTEXT_MAGIC while the context lives; finalize clears it first, so a call on a
     * finalized context is refused (where the freed memory is not yet reused). Mid-struct,
     * where the allocator's free-list pointers do not land. */
    uint32_t magic;
    bool fatal_written; /* the error file holds this context's failure (the first) */
    /* The flight recorder (flight.c): the ring, mapped from a file beside the error file
     * or in plain memory, and where its dumps go ("" for none). */
    struct ddp_flight_ring_s *flight;
    bool flight_mapped;
    char flight_json[4096], flight_tmp[4200];
};

/* The flight recorder (flight.c). open: the context's ring (rank, world size and group
 * known), its dump signal armed; 0 or -ENOMEM. enter/leave bracket each collective
 * (leave with its result: a failure writes the dump); peer names the rank the current
 * collective waits on. close: unregisters and unmaps (the ring file stays, for the
 * launcher). */
/* progress.c: a completed iteration (a reducer's wait()) as a step of the launcher's
 * progress ring, `wait_ns` of it blocked in collectives (a file there that is no ring is
 * said once, on `log`, and left as it is); and the clock it is timed by. */
void ddp_progress_step(const ddp_log_t *log, int64_t wait_ns);
int64_t ddp_progress_now(void);

/* checkpoint.c: unmaps what the saves kept mapped (at finalize). */
void ddp_checkpoint_release(ddp_t *ddp);

int ddp_flight_open(ddp_t *ddp);
void ddp_flight_close(ddp_t *ddp);
void ddp_flight_enter(ddp_t *ddp, int op, size_t count, ddp_dtype_t dtype, int reduce_op, int root);
void ddp_flight_peer(ddp_t *ddp, int peer);
void ddp_flight_leave(ddp_t *ddp, int err);

#define DDP_CONTEXT_MAGIC 0x58544344u /* "DCTX" */

/* Whether `ddp` is a context ddp_init made and ddp_finalize has not ended. */
static inline bool ddp_live(const ddp_t *ddp)
{
    return ddp != NULL && ddp->magic == DDP_CONTEXT_MAGIC;
}

/* The refusal of entry point `what` given a NULL or dead `object` ("context",
 * "reducer"): says so on stderr; DDP_EUSAGE. */
int ddp_refuse_object(const char *what, const char *object, const void *p);

/* Entry point `what` returns DDP_EUSAGE unless `ddp` is a live context. */
#define DDP_NEED_CONTEXT(ddp, what)                         \
    do {                                                    \
        if (!ddp_live(ddp))                                 \
            return ddp_refuse_object(what, "context", ddp); \
    } while (0)

/* Records a failure of `ddp`: the message in ddp->error and on stderr. Returns err.
 * The error file (TORCHELASTIC_ERROR_FILE) gets it only when the failure ends the
 * context's use (ddp_fail_fatal): a usage error the caller may handle does not become
 * the job's root cause. */
int ddp_fail(ddp_t *ddp, int err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* The same for a failure caused by rank `peer`: it went away (its connection closed or
 * reset), or its collective call differs from the others'. The error file names the
 * peer, so the launcher's report blames it. */
int ddp_fail_peer(ddp_t *ddp, int err, int peer, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Writes the context's recorded failure (ddp->error, blaming ddp->error_peer) to the
 * error file, unless an earlier one is there: the first is the cause. */
void ddp_fail_fatal(ddp_t *ddp);

/* Waits until `key` is in the store, saying on stderr every 30 s (or a third of the
 * timeout) that this rank still waits for `what`; DDP_ETIMEOUT after the context's
 * timeout. */
int ddp_wait_key_aloud(ddp_t *ddp, const char *key, const char *what);

/* The store key of this attempt of the job for `name` ("ddp/<attempt>/<group>/<name>"). */
void ddp_key(const ddp_t *ddp, char *buf, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Bytes of one element; 0 for an unknown dtype. */
size_t ddp_dtype_size(ddp_dtype_t dtype);

/* dst[i] = dst[i] op src[i] for `count` elements on the CPU. AVG adds, and with
 * `average_over` > 0 (the last step of an average) also divides the result by it, in
 * the same pass: the bits are those of the sum divided afterwards (integers truncate
 * toward zero, as C does). f16/bf16 are reduced in f32 (ddp_half_widen first). */
void ddp_reduce_into(void *dst, const void *src, size_t count, ddp_dtype_t dtype,
                     ddp_reduce_op_t op, int average_over);

/* f16 or bf16 (`dtype`) to f32, exactly; and back, rounding to nearest even (NaNs stay
 * NaNs, f16's subnormals and overflow to infinity as IEEE 754 says). Vectorized kernels
 * (reduce.c). */
void ddp_half_widen(const uint16_t *restrict in, float *restrict out, size_t count,
                    ddp_dtype_t dtype);
void ddp_half_narrow(const float *restrict in, uint16_t *restrict out, size_t count,
                     ddp_dtype_t dtype);

#endif
