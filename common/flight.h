/* The flight recorder's ring: libddp's record of a context's last collectives (point to
 * point sends and receives are not collectives and are not in it), in a
 * file beside the worker's error file ("flight_<group>.ring") that the launcher reads
 * too, so a hung rank's state is known without the rank's help.
 *
 * One writer, the thread that runs the context's collectives; each entry is a few
 * stores to shared memory per call. Readers take a copy (ddp_flight_read) and trust an
 * entry whose seq matches its place: one being rewritten at that moment may be torn,
 * which costs a diagnosis one line, never the job. The worker may write anything there:
 * the reader takes no ring with a value out of range, so that what it returns bounds
 * every loop, allocation and difference over it. Pure layout and a reader; no
 * allocation. */
#ifndef DDP_COMMON_FLIGHT_H
#define DDP_COMMON_FLIGHT_H

#include <stddef.h>
#include <stdint.h>

#define DDP_FLIGHT_MAGIC     0x3130305246504444ull /* "DDPFR001", little-endian */
#define DDP_FLIGHT_SLOTS     64                    /* the last collectives kept */
#define DDP_FLIGHT_VERSION   1
#define DDP_FLIGHT_MAX_SEQ   (1ull << 53) /* a collective a microsecond for 285 years */
#define DDP_FLIGHT_MAX_WORLD (1 << 24)    /* ranks */
#define DDP_FLIGHT_MAX_NS    (1ll << 62)  /* a time: the year 2116 */

typedef enum {
    DDP_FLIGHT_ALL_REDUCE = 1,
    DDP_FLIGHT_BARRIER,
    DDP_FLIGHT_BROADCAST,
    DDP_FLIGHT_ALL_GATHER,
    DDP_FLIGHT_REDUCE,
    DDP_FLIGHT_REDUCE_SCATTER,
    DDP_FLIGHT_ALL_TO_ALL,
    DDP_FLIGHT_GATHER,
    DDP_FLIGHT_SCATTER,
    DDP_FLIGHT_SEND, /* never in a ring: named for the CPU backend's descriptions */
} ddp_flight_op_t;

typedef struct {
    uint64_t seq;       /* the context's collective number, from 1; 0: an empty slot */
    uint64_t count;     /* elements */
    int64_t entered_ns; /* CLOCK_REALTIME_COARSE */
    int64_t left_ns;    /* 0 while the rank is in it */
    int32_t op;         /* ddp_flight_op_t */
    int32_t dtype;      /* ddp_dtype_t */
    int32_t reduce_op;  /* ddp_reduce_op_t (all_reduce) */
    int32_t root;       /* broadcast, reduce, gather, scatter */
    int32_t peer;       /* the rank it waits on (or last did); -1: not known */
    int32_t error;      /* 0, or the negative code it failed with */
    int64_t reserved;
} ddp_flight_entry_t;

typedef struct ddp_flight_ring_s {
    uint64_t magic;
    int32_t version, rank, world_size, pid;
    char group[40];
    uint64_t entered;   /* collectives entered: the current or last one's seq */
    uint64_t completed; /* the seq of the last collective that returned success */
    int64_t reserved[6];
    ddp_flight_entry_t slots[DDP_FLIGHT_SLOTS]; /* seq s at slots[(s - 1) % SLOTS] */
} ddp_flight_ring_t;

_Static_assert(sizeof(ddp_flight_entry_t) == 64, "a flight entry is 64 bytes");
_Static_assert(sizeof(ddp_flight_ring_t) == 128 + 64 * DDP_FLIGHT_SLOTS, "the ring's size");

/* "all_reduce", "barrier", "broadcast", "all_gather", "reduce", ..., or "?". */
const char *ddp_flight_op_name(int32_t op);
/* The names of a ddp_dtype_t ("float32") and a ddp_reduce_op_t ("sum"), or "?". */
const char *ddp_dtype_name(int dtype);
const char *ddp_op_name(int op);

/* A collective for people, into buf[cap]: "all_reduce #4 of 1000 float32 (sum)",
 * "barrier #2", "broadcast #3 of 10 int64 from rank 0", "all_gather #5 of 8 float32 a
 * rank", "gather #6 of 4 int32 to rank 2". `op` is a ddp_flight_op_t (the CPU backend's
 * call kinds have the same numbers); `root` the root (broadcast, reduce, gather, scatter);
 * `reduce_op` the reduction. Of a ring's entry, or of any call. */
void ddp_describe_call(int op, uint64_t seq, uint64_t count, int dtype, int reduce_op, int root,
                       char *buf, size_t cap);
void ddp_flight_describe(const ddp_flight_entry_t *e, char *buf, size_t cap);

/* Reads the ring file at `path` into *out (ddp_read_head: following no link). 0; -errno;
 * DDP_EPARSE when it is not a ring of this version (too short, another magic) or holds a
 * value out of range: entered, completed and the entries' seq past DDP_FLIGHT_MAX_SEQ,
 * world_size past DDP_FLIGHT_MAX_WORLD, a rank below -1 or not below it, an entry's time
 * outside 0..DDP_FLIGHT_MAX_NS. */
int ddp_flight_read(const char *path, ddp_flight_ring_t *out);

/* The entry of collective `seq` in `ring`, or NULL when the ring no longer (or never)
 * held it. */
const ddp_flight_entry_t *ddp_flight_entry(const ddp_flight_ring_t *ring, uint64_t seq);

#endif
