/* Shared-memory links of the CPU backend: one inbox segment per rank in /dev/shm.
 *
 * Rank r's segment holds the byte ring that rank r-1 writes into and r reads from,
 * and r's doorbell: a futex word that r sleeps on, rung by r-1 when it writes and by
 * r+1 when it frees room in its own inbox. Each rank maps its own segment and its two
 * neighbours', and rank 0's, whose segment also holds the board every rank of the host
 * posts its small collectives on (cpu_board.c). The owner unlinks the name once every
 * rank has it mapped. Used by the thread that owns the context; no locks, only atomics
 * on the shared header. */
#ifndef DDP_WORKER_SHM_H
#define DDP_WORKER_SHM_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct ddp_shm_header_s ddp_shm_header_t;

/* A doorbell: a futex word that sleepers wait on and ringers bump, and how many sleep. */
typedef struct {
    _Atomic uint32_t bell;
    _Atomic uint32_t sleepers;
} ddp_shm_bell_t;

typedef struct ddp_shm_seg_s {
    ddp_shm_header_t *header;
    uint8_t *ring;
    size_t size;       /* bytes of the ring */
    uint8_t *board;    /* behind the ring, page-aligned: what every rank of the host maps */
    size_t board_size; /* (cpu_board.c; rank 0's inbox only), 0: none */
    size_t mapped;
} ddp_shm_seg_t;

/* Creates this rank's segment: a new name under /dev/shm from `tag`, a ring of
 * `ring_size` bytes (a multiple of 8) and a board of `board_size` bytes (zeroed; 0 for
 * none), reserved up front, so a full /dev/shm is an error here and never a SIGBUS
 * later. `name` (at least 64 bytes) and `nonce` receive what the others need to open and
 * check it. 0 or -errno. */
int ddp_shm_create(ddp_shm_seg_t *seg, const char *tag, size_t ring_size, size_t board_size,
                   char *name, size_t name_cap, uint64_t nonce[2]);

/* Maps a neighbour's segment and checks that it is the one it published (`nonce`): a
 * name from another host's /dev/shm never matches. 0, -errno, or DDP_EPROTO. */
int ddp_shm_open(ddp_shm_seg_t *seg, const char *name, const uint64_t nonce[2]);

void ddp_shm_unlink(const char *name);
void ddp_shm_close(ddp_shm_seg_t *seg);

/* The stream positions of a link; every transfer starts both at a multiple of 8. */
void ddp_shm_align(ddp_shm_seg_t *inbox_of_peer, bool writer);

/* Writer side, on the peer's inbox: copies up to `len` bytes, in whole multiples of
 * `unit`, as room allows, and rings the peer. Returns the bytes written. */
size_t ddp_shm_write(ddp_shm_seg_t *peer_inbox, const void *data, size_t len, size_t unit);
/* Room the writer has now (the reader's tail read afresh, and kept). */
size_t ddp_shm_room(ddp_shm_seg_t *peer_inbox);

/* Reader side, on the own inbox: a pointer to the readable bytes that are contiguous
 * and their count (0: none yet). */
const uint8_t *ddp_shm_peek(const ddp_shm_seg_t *inbox, size_t *len);
/* Copies the first `len` readable bytes to `out` without using them up: whether there
 * were that many. */
bool ddp_shm_look(const ddp_shm_seg_t *inbox, void *out, size_t len);
/* Releases `len` bytes read and rings the writer (whose doorbell is in `writer_seg`). */
void ddp_shm_consume(ddp_shm_seg_t *inbox, size_t len, ddp_shm_seg_t *writer_seg);

/* A segment's doorbell (its ring's reader sleeps on it). */
ddp_shm_bell_t *ddp_shm_doorbell(ddp_shm_seg_t *seg);
/* Bumps the bell and wakes whoever sleeps on it. */
void ddp_shm_ring(ddp_shm_bell_t *b);
/* Arm: count oneself a sleeper and read the bell; wait: sleep until it moves from that or
 * `timeout_ms` passes (the caller rechecks its conditions between the two: see shm.c);
 * disarm: a sleeper no more. */
uint32_t ddp_shm_bell_arm(ddp_shm_bell_t *b);
void ddp_shm_bell_wait(ddp_shm_bell_t *b, uint32_t seen, int timeout_ms);
void ddp_shm_bell_disarm(ddp_shm_bell_t *b);

#endif
