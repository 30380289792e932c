/* The CPU backend's insides, shared by its files: the ring's state (cpu.c: setup and
 * the two transports), the call descriptions every collective begins with, and the one
 * primitive the algorithms are written in, a transfer (cpu.c; the collectives in cpu.c
 * and collectives.c). Everything runs on the thread that owns the context. */
#ifndef DDP_WORKER_CPU_H
#define DDP_WORKER_CPU_H

#include "flight.h"
#include "internal.h"
#include "shm.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What a rank says of the collective it is in: the first bytes of every collective's
 * first transfer. A multiple of 8 bytes, as the rings' positions are. */
typedef struct {
    uint32_t magic;
    uint16_t kind; /* collective_t */
    uint16_t dtype;
    uint32_t op;   /* the reduction, or the root of a broadcast, gather or scatter */
    uint32_t root; /* the root of a reduce; 0 otherwise */
    uint64_t seq;  /* its number in the context: 0 is init's vote, the program's first is 1 */
    uint64_t count;
} call_t;

_Static_assert(sizeof(call_t) == 32, "a call description is 32 bytes");

#define CALL_MAGIC 0x43504444u /* "DDPC" */

/* The numbers of ddp_flight_op_t (common/flight.h), which names and describes them. */
typedef enum {
    CALL_ALL_REDUCE = DDP_FLIGHT_ALL_REDUCE,
    CALL_BARRIER = DDP_FLIGHT_BARRIER,
    CALL_BROADCAST = DDP_FLIGHT_BROADCAST,
    CALL_ALL_GATHER = DDP_FLIGHT_ALL_GATHER,
    CALL_REDUCE = DDP_FLIGHT_REDUCE,
    CALL_REDUCE_SCATTER = DDP_FLIGHT_REDUCE_SCATTER,
    CALL_ALL_TO_ALL = DDP_FLIGHT_ALL_TO_ALL,
    CALL_GATHER = DDP_FLIGHT_GATHER,
    CALL_SCATTER = DDP_FLIGHT_SCATTER,
    CALL_SEND = DDP_FLIGHT_SEND,
} collective_t;

typedef struct {
    int next_fd, prev_fd;
    int next, prev; /* their ranks */
    char next_addr[128], prev_addr[128];
    uint8_t *scratch;    /* received data waiting to be reduced */
    uint8_t *small;      /* every rank's buffer of a small all-reduce (cpu.c) */
    bool shm;            /* the data goes through the segments below */
    bool oversubscribed; /* more ranks here than CPUs: spin by yielding */
    ddp_shm_seg_t own, next_seg, prev_seg;
    char own_name[80];            /* until unlinked */
    uint64_t calls;               /* collectives so far: the next one's number */
    int listen_fd;                /* where the other ranks connect for ddp_send (p2p.c) */
    struct ddp_cpu_peer_s *peers; /* point to point, by rank (p2p.c); NULL: none yet */
    int npeers;
    uint8_t *kept[3]; /* the step buffers of collectives.c, kept between calls */
    size_t kept_bytes;
    int described; /* f16/bf16 reduced in f32: the dtype the call description says; 0 none */
} cpu_t;

/* One transfer: `send` to the next rank while `recv` comes from the previous one. With
 * `reduce`, received elements are reduced into `recv` instead of copied. With
 * `forward`, what is sent is what has been received (the send buffer is the receive
 * buffer), as a broadcast passes data on. With `call`, this rank's description of the
 * collective goes first, and the previous rank's must be the same before its data is
 * taken. */
typedef struct {
    const uint8_t *send;
    size_t send_len;
    uint8_t *recv;
    size_t recv_len;
    bool reduce, forward;
    ddp_dtype_t dtype;
    ddp_reduce_op_t op;
    int average_over; /* the last step of an average: divide by this as data comes */
    const call_t *call;
} transfer_t;

/* Listens on an ephemeral port of `host` (*port); makes a socket non-blocking, without
 * Nagle's delay. */
int ddp_cpu_listen_on(const char *host, int *fd_out, int *port);
void ddp_cpu_tune(int fd);
/* Connects to host:port (a numeric address), retrying every 20 ms until `deadline` (the
 * peer may not listen yet): 0 and *fd; DDP_EPROTO for an address that is not one; the
 * last -errno. */
int ddp_cpu_connect(const char *host, int port, double deadline, int *fd);

/* Runs one transfer to its end: 0, or the failure (a timeout, a peer gone, a call
 * description that differs), recorded with ddp_fail. */
int ddp_cpu_transfer(ddp_t *ddp, cpu_t *c, const char *what, const transfer_t *t);

/* This rank's description of the collective it begins, numbered in the context. */
call_t ddp_cpu_begin_call(cpu_t *c, collective_t kind, size_t count, ddp_dtype_t dtype,
                          unsigned op_or_root);

/* A collective without data (count 0) still checks that every rank made the same call. */
int ddp_cpu_call_only(ddp_t *ddp, cpu_t *c, const char *what, const call_t *call);

/* "all_reduce #4 of 1000 float32 (sum)", of a description that may come from a peer. */
void ddp_cpu_describe(const call_t *call, char *buf, size_t cap);

/* f16 and bf16 reductions: `buf` (`count` elements) widened into a new f32 buffer
 * (*out; NULL where dtype is not a half type: the caller reduces in place), with the
 * call described in `dtype` until ddp_cpu_narrow; narrow writes the result back (when
 * `into` is not NULL), rounding once, and frees. */
int ddp_cpu_widen(ddp_t *ddp, cpu_t *c, const char *what, const void *buf, size_t count,
                  ddp_dtype_t dtype, float **out);
void ddp_cpu_narrow(cpu_t *c, float *wide, void *into, size_t count, ddp_dtype_t dtype);

/* Chunk i of `count` elements split in n: sizes differ by at most one element. */
size_t ddp_cpu_chunk_offset(size_t count, int n, int i);
size_t ddp_cpu_chunk_count(size_t count, int n, int i);

/* What a rank publishes at init: "host port shm-name nonce0 nonce1 p2p-port" ("-" for
 * no segment; p2p-port: where ddp_send connects); fetch waits for rank's (the context's
 * timeout). */
typedef struct {
    char host[46];
    int port, p2p_port;
    char shm_name[80];
    uint64_t nonce[2];
} ddp_cpu_published_t;

int ddp_cpu_fetch_published(ddp_t *ddp, int rank, ddp_cpu_published_t *out);

/* The collectives of collectives.c and p2p.c (the backend table's entries). */
int ddp_cpu_reduce(ddp_t *ddp, void *state, void *buf, size_t count, ddp_dtype_t dtype,
                   ddp_reduce_op_t op, int root);
int ddp_cpu_reduce_scatter(ddp_t *ddp, void *state, const void *send, void *recv, size_t count,
                           ddp_dtype_t dtype, ddp_reduce_op_t op);
int ddp_cpu_all_to_all(ddp_t *ddp, void *state, const void *send, void *recv, size_t count,
                       ddp_dtype_t dtype);
int ddp_cpu_gather(ddp_t *ddp, void *state, const void *send, void *recv, size_t count,
                   ddp_dtype_t dtype, int root);
int ddp_cpu_scatter(ddp_t *ddp, void *state, const void *send, void *recv, size_t count,
                    ddp_dtype_t dtype, int root);
int ddp_cpu_send(ddp_t *ddp, void *state, const void *buf, size_t count, ddp_dtype_t dtype,
                 int peer);
int ddp_cpu_recv(ddp_t *ddp, void *state, void *buf, size_t count, ddp_dtype_t dtype, int peer);
/* Closes the point-to-point connections. */
void ddp_cpu_peers_close(cpu_t *c);

#endif
