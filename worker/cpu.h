/* The CPU backend's insides, shared by its files: the ring's state (set up in
 * cpu_ring.c), the call descriptions every collective begins with, the one primitive the
 * algorithms are written in, a transfer (cpu.c: one loop, whatever the transport), the
 * two transports behind a table (cpu_tcp.c, cpu_shm.c), and the collectives (cpu.c,
 * collectives.c, p2p.c). Everything runs on the thread that owns the context. */
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

#define DDP_CPU_SCRATCH ((size_t)4 << 20) /* TCP: received data waiting to be reduced */
#ifndef DDP_CPU_SMALL_BYTES
#define DDP_CPU_SMALL_BYTES ((size_t)8 << 10) /* all-reduces up to this size take n - 1 steps */
#endif
#ifndef DDP_CPU_PIECE_BYTES
/* Two ranks on shared memory: an all-reduce's steps alternate in pieces of this size
 * (cpu.c; 64, 128 and 192 KiB measured: 128 best from 4 MiB up). */
#define DDP_CPU_PIECE_BYTES ((size_t)128 << 10)
#endif
#ifndef DDP_CPU_BOARD_BYTES
/* On one host, collectives of up to this size a rank take one step (cpu_board.c). */
#define DDP_CPU_BOARD_BYTES ((size_t)4 << 10)
#endif

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

typedef struct cpu_transport_s cpu_transport_t;

typedef struct {
    const cpu_transport_t *transport; /* TCP, or shared memory when every rank is here */
    int next_fd, prev_fd;
    int next, prev; /* their ranks */
    char next_addr[128], prev_addr[128];
    uint8_t *scratch;    /* TCP: received data waiting to be reduced, */
    size_t have;         /* this many bytes of it */
    uint8_t *small;      /* every rank's buffer of a small all-reduce (cpu.c) */
    bool oversubscribed; /* more ranks here than CPUs: spin by yielding */
    ddp_shm_seg_t own, next_seg, prev_seg;
    uint8_t *board;               /* every rank of the host: rank 0's (cpu_board.c); NULL: none */
    ddp_shm_seg_t board_seg;      /* its segment, mapped once more (but on rank 0) */
    uint64_t board_calls;         /* collectives over it so far */
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

/* Where a transfer stands: the call description's bytes (hl of them) sent and got, the
 * data's, what may be sent so far (all, or with `forward` what has come), and the
 * transport's own waiting state. */
typedef struct {
    const transfer_t *t;
    size_t hl, hs, hg, sent, got, sendable;
    double deadline;   /* no progress past this fails; 0 until the waiting begins */
    int idle;          /* shared memory: tries without progress, */
    double idle_since; /* since when (0: not looked), */
    bool slept;        /* and whether it slept since the last progress */
} cpu_progress_t;

/* A transport: what moves bytes between ring neighbours. Every function may fail with a
 * negative code, the failure recorded with ddp_fail (a peer gone, the timeout). */
struct cpu_transport_s {
    const char *name;
    /* Before a transfer's first byte. */
    void (*begin)(cpu_t *c);
    /* Up to `len` bytes, whole `unit`s, towards the next rank without waiting: how many. */
    long (*send_some)(ddp_t *ddp, cpu_t *c, const char *what, const uint8_t *data, size_t len,
                      size_t unit);
    /* Up to `want` bytes from the previous rank without waiting (whole `unit`s when
     * `direct` is NULL): straight into `direct` where given and the transport can (then
     * *data == direct), else *data points into the transport's own buffer until consume. */
    long (*recv_some)(ddp_t *ddp, cpu_t *c, const char *what, uint8_t *direct, size_t want,
                      size_t unit, const uint8_t **data);
    /* The first `n` bytes of that buffer are used. */
    void (*consume)(cpu_t *c, size_t n);
    /* Nothing moved: waits until something may (briefly; the loop tries again). */
    int (*wait)(ddp_t *ddp, cpu_t *c, const char *what, cpu_progress_t *p);
};

extern const cpu_transport_t ddp_cpu_tcp, ddp_cpu_shm;

/* Shared memory's patience (cpu_shm.c), counted in `p`: whether to try again at once
 * (oversubscribed, after yielding the CPU) rather than sleep. */
bool ddp_cpu_shm_spin(const cpu_t *c, cpu_progress_t *p);
/* The end of a wait on `bell`, armed when it read `seen`: unless `ready` (what the caller
 * waits for came before its recheck), sleeps until a ringer, the deadline (set at the
 * first sleep since progress: the context's timeout) or a short nap's end (the caller
 * then looks at its neighbours' sockets), with `peer` as the one the flight recorder
 * says this rank waits on; disarms; the next look that finds nothing sleeps again. */
void ddp_cpu_shm_sleep(ddp_t *ddp, ddp_shm_bell_t *bell, uint32_t seen, bool ready, int peer,
                       cpu_progress_t *p);
/* A neighbour still waited on (prev, next) whose socket turned readable or broken has
 * gone: with shared memory nothing else comes on it. (One no longer needed may have
 * finished and closed already.) Its rank, or -1. */
int ddp_cpu_shm_gone(const cpu_t *c, bool need_prev, bool need_next);

/* The board (cpu_board.c): its bytes for `world` ranks, whether a rank's `bytes` go over
 * it, and the collectives of up to DDP_CPU_BOARD_BYTES a rank over it in one step, each
 * with its call description. With 2 ranks the ring is one step too: the board only up to
 * half that (at 4 KiB it took 1.1-1.4x the ring's time there). */
size_t ddp_cpu_board_size(int world);
static inline bool ddp_cpu_on_board(const ddp_t *ddp, const cpu_t *c, size_t bytes)
{
    return c->board != NULL && bytes * (ddp->world_size == 2 ? 2 : 1) <= DDP_CPU_BOARD_BYTES;
}
int ddp_cpu_board_all_reduce(ddp_t *ddp, cpu_t *c, const char *what, uint8_t *buf, size_t count,
                             ddp_dtype_t dtype, ddp_reduce_op_t op, const call_t *call);
/* Reduce to `root`; reduce-scatter of `count` elements a rank; all-gather of `block`
 * bytes a rank (this rank's already in place in `recv`); broadcast of `len` bytes from
 * `root`: over the board. */
int ddp_cpu_board_reduce(ddp_t *ddp, cpu_t *c, uint8_t *buf, size_t count, ddp_dtype_t dtype,
                         ddp_reduce_op_t op, int root, const call_t *call);
int ddp_cpu_board_reduce_scatter(ddp_t *ddp, cpu_t *c, const uint8_t *send, uint8_t *recv,
                                 size_t count, ddp_dtype_t dtype, ddp_reduce_op_t op,
                                 const call_t *call);
int ddp_cpu_board_all_gather(ddp_t *ddp, cpu_t *c, uint8_t *recv, size_t block, const call_t *call);
int ddp_cpu_board_broadcast(ddp_t *ddp, cpu_t *c, uint8_t *buf, size_t len, int root,
                            const call_t *call);

/* Whether a transfer still needs bytes from the previous rank, or to send to the next. */
static inline bool ddp_cpu_needs_prev(const cpu_progress_t *p)
{
    return p->hg < p->hl || p->got < p->t->recv_len;
}

static inline bool ddp_cpu_needs_next(const cpu_progress_t *p)
{
    return p->hs < p->hl || p->sent < p->t->send_len;
}

/* A rank's address, for messages: the neighbours' are known; the others share the
 * board, so they are on this host. */
static inline const char *ddp_cpu_addr(const cpu_t *c, int peer)
{
    return peer == c->prev ? c->prev_addr : peer == c->next ? c->next_addr : "on this host";
}

/* `theirs` (rank `peer`'s description of its collective) against this rank's: 0, or the
 * failure saying both, blaming rank `blame` in the error file (-1: none; where every
 * call is seen, the odd one out; DDP_CPU_BLAME_RING: over a ring, asked of the store). */
#define DDP_CPU_BLAME_RING (-2)
int ddp_cpu_check_call(ddp_t *ddp, cpu_t *c, const char *what, const call_t *mine,
                       const call_t *theirs, int peer, int blame);

/* The timeout's failure of a transfer at `p` ("over shared memory", say, in `over`). */
int ddp_cpu_no_progress(ddp_t *ddp, const cpu_t *c, const char *what, const cpu_progress_t *p,
                        const char *over);

/* The address to listen on and offer the other ranks, in host[cap]: DDP_SOCKET_IFNAME's
 * interface's, else DDP_LOCAL_ADDR (ddp-launch --local-addr), else the local address of the
 * store's connection (the interface that reaches node 0), unless that is loopback while
 * ranks run on other machines and MASTER_ADDR is a name (Debian's /etc/hosts gives a
 * machine's own name 127.0.1.1): then this machine's first up, non-loopback IPv4 address
 * (else IPv6, not link-local), where the others can reach it. 0, or -errno failed (said). */
int ddp_cpu_offered_address(ddp_t *ddp, char *host, size_t cap);

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

/* The ring (cpu_ring.c): set up at ddp_init, over TCP and then shared memory where every
 * rank can; closed at ddp_finalize. */
int ddp_cpu_init(ddp_t *ddp, void **state);
void ddp_cpu_finalize(void *state);
/* The all-reduce of cpu.c (the ring's vote on its transport runs one). */
int ddp_cpu_all_reduce(ddp_t *ddp, void *state, void *buf, size_t count, ddp_dtype_t dtype,
                       ddp_reduce_op_t op);

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
