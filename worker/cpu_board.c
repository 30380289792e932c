/* The board: collectives of up to DDP_CPU_BOARD_BYTES a rank (all-reduce, reduce,
 * reduce-scatter, all-gather, broadcast) in one step where every rank is on one host
 * (the ring chose shared memory), instead of the ring's n - 1 steps, each of which waits
 * for one rank to be scheduled.
 *
 * The board is a region behind the ring of rank 0's inbox segment, which every rank
 * maps. Each rank has two slots there, used in turn by the board's calls (numbered 1, 2,
 * ... in the context): it writes its call description and data into one, then the
 * call's number with release order, and rings the board's doorbell. It waits until
 * every rank's slot holds that number, checks every rank's description against its own,
 * and takes what it needs: an all-reduce reduces the n buffers in rank order, so every
 * rank holds the same bits (a reduce, on the root; a reduce-scatter, each its block); an
 * all-gather copies each; a broadcast, the root's. Every board call waits for every
 * rank, roots too (see the invariant).
 *
 * Invariant: the slot a rank writes for call b held call b - 2, and every rank has read
 * it: the writer finished call b - 1, so every rank wrote b - 1, which a rank does only
 * after it has read all of b - 2. (A failed call breaks the context: no call follows.)
 *
 * Waiting is the transport's: spin (yielding when oversubscribed), then sleep on the
 * doorbell. A previous rank that called a collective of the ring instead (a different
 * call) sends its description into this rank's inbox: seen while a slot is missing, it
 * fails the call saying both. A neighbour that is gone, or the timeout, fails naming the
 * rank that has not come. */
#include "cpu.h"

#include "error.h"
#include "io.h"

#include <stdatomic.h>
#include <string.h>

typedef struct {
    _Atomic uint64_t seq; /* the board call whose data the slot holds (0: none yet) */
    uint8_t pad[24];
    call_t call;
} slot_t; /* then the data */

_Static_assert(sizeof(slot_t) == 64, "a slot's head is one cache line");
_Static_assert(DDP_CPU_BOARD_BYTES % 64 == 0, "slots begin on cache lines");

#define BOARD_BELL 64 /* the doorbell's line, then the slots */
#define SLOT_BYTES (sizeof(slot_t) + DDP_CPU_BOARD_BYTES)

size_t ddp_cpu_board_size(int world)
{
    return BOARD_BELL + (size_t)world * 2 * SLOT_BYTES;
}

static slot_t *slot_of(const cpu_t *c, int rank, uint64_t b)
{
    return (slot_t *)(c->board + BOARD_BELL + ((size_t)rank * 2 + (size_t)(b & 1)) * SLOT_BYTES);
}

static ddp_shm_bell_t *bell_of(const cpu_t *c)
{
    return (ddp_shm_bell_t *)c->board;
}

static bool has_come(const cpu_t *c, int rank, uint64_t b)
{
    return atomic_load_explicit(&slot_of(c, rank, b)->seq, memory_order_acquire) == b;
}

/* The first rank from `from` on that has not written call `b` yet; n: every rank has. */
static int first_missing(const cpu_t *c, int n, int from, uint64_t b)
{
    while (from < n && has_come(c, from, b))
        from++;
    return from;
}

/* Bytes in this rank's inbox during a board call: the previous rank began a collective
 * of the ring, this one's or the next (then every rank has come: writing the next, it
 * had seen every slot of this one, and the acquire of those bytes shows them here too).
 * 0 when nothing came or every rank has (*q is then n), else the failure saying both. */
static int ring_call_came(ddp_t *ddp, cpu_t *c, const char *what, const call_t *mine, uint64_t b,
                          int *q)
{
    call_t theirs;
    if (!ddp_shm_look(&c->own, &theirs, sizeof theirs))
        return 0;
    if ((*q = first_missing(c, ddp->world_size, *q, b)) == ddp->world_size)
        return 0;
    int err = ddp_cpu_check_call(ddp, c, what, mine, &theirs, c->prev, -1);
    if (err)
        return err;
    ddp->broken = DDP_EPROTO;
    return ddp_fail(ddp, DDP_EPROTO, "%s: rank %d (%s) made this call over the ring, not the board",
                    what, c->prev, ddp_cpu_addr(c, c->prev));
}

/* After a sleep with rank q missing: a neighbour not come whose socket turned readable or
 * broken has gone (with shared memory nothing else comes on it), or the timeout. */
static int check_after_sleep(ddp_t *ddp, cpu_t *c, const char *what, uint64_t b, int q,
                             double deadline)
{
    int gone = ddp_cpu_shm_gone(c, !has_come(c, c->prev, b), !has_come(c, c->next, b));
    if (gone >= 0)
        return ddp_fail_peer(ddp, DDP_ECLOSED, gone,
                             "%s: rank %d (%s) is gone: it closed the connection", what, gone,
                             ddp_cpu_addr(c, gone));
    if (ddp_clock_mono() < deadline)
        return 0;
    int came = 0;
    for (int r = 0; r < ddp->world_size; r++)
        came += has_come(c, r, b);
    return ddp_fail_peer(ddp, DDP_ETIMEOUT, q,
                         "%s: no progress with rank %d (%s) for %g s over shared memory (%d of %d "
                         "ranks have come to this call)",
                         what, q, ddp_cpu_addr(c, q), ddp->timeout, came, ddp->world_size);
}

/* Sleeps on the board's doorbell until a writer rings, unless what this rank waits for
 * (rank q's slot, or bytes in its inbox) came meanwhile. */
static void sleep_on_board(ddp_t *ddp, cpu_t *c, uint64_t b, int q, cpu_progress_t *p)
{
    ddp_shm_bell_t *bell = bell_of(c);
    uint32_t seen = ddp_shm_bell_arm(bell);
    size_t readable;
    ddp_shm_peek(&c->own, &readable);
    /* The flight recorder's peer: the one not come. */
    ddp_cpu_shm_sleep(ddp, bell, seen, has_come(c, q, b) || readable > 0, q, p);
}

/* Until every rank has written call `b`: 0, or the failure. */
static int wait_for_all(ddp_t *ddp, cpu_t *c, const char *what, const call_t *mine, uint64_t b)
{
    int n = ddp->world_size, q = 0;
    cpu_progress_t p = {0};
    for (;;) {
        int was = q;
        if ((q = first_missing(c, n, q, b)) == n)
            return 0;
        if (q > was)
            p = (cpu_progress_t){0};
        int err = ring_call_came(ddp, c, what, mine, b, &q);
        if (err || q == n)
            return err;
        if (p.slept) {
            p.slept = false;
            if ((err = check_after_sleep(ddp, c, what, b, q, p.deadline)) != 0)
                return err;
        }
        if (!ddp_cpu_shm_spin(c, &p))
            sleep_on_board(ddp, c, b, q, &p);
    }
}

/* How many ranks posted in call `b` the description rank `q` posted. */
static int sharing(const cpu_t *c, int n, uint64_t b, int q)
{
    int same = 0;
    for (int r = 0; r < n; r++)
        same += memcmp(&slot_of(c, r, b)->call, &slot_of(c, q, b)->call, sizeof(call_t)) == 0;
    return same;
}

/* Where the calls of board call `b` differ: the one rank whose call no other rank made
 * while every other rank made the same (the culprit, as a hang's verdict names the rank
 * that never entered), or -1 where there is no such rank (two ranks; several camps).
 * O(n) comparisons, and only on this failure's path. */
static int odd_one_out(const cpu_t *c, int n, uint64_t b)
{
    if (n < 3)
        return -1;
    int majority = sharing(c, n, b, 0) > 1 ? 0 : 1; /* rank 0, unless it is alone */
    if (sharing(c, n, b, majority) != n - 1)
        return -1;
    for (int r = 0; r < n; r++) {
        if (memcmp(&slot_of(c, r, b)->call, &slot_of(c, majority, b)->call, sizeof(call_t)) != 0)
            return r;
    }
    return -1;
}

/* Posts this rank's call description and `bytes` of `data` as the next board call, and
 * waits for every rank's, each checked against this one: 0 and the call's number *b, or
 * the failure. */
static int exchange(ddp_t *ddp, cpu_t *c, const char *what, const call_t *call, const void *data,
                    size_t bytes, uint64_t *b)
{
    *b = ++c->board_calls;
    slot_t *mine = slot_of(c, ddp->rank, *b);
    mine->call = *call;
    if (bytes > 0)
        memcpy(mine + 1, data, bytes);
    atomic_store_explicit(&mine->seq, *b, memory_order_release);
    ddp_shm_ring(bell_of(c));
    int n = ddp->world_size, err = wait_for_all(ddp, c, what, call, *b);
    int odd = err == 0 ? odd_one_out(c, n, *b) : -1;
    /* The odd one out first, blamed; then from the previous rank backwards: the rank a
     * ring collective would name first. */
    if (odd >= 0 && odd != ddp->rank)
        err = ddp_cpu_check_call(ddp, c, what, call, &slot_of(c, odd, *b)->call, odd, odd);
    for (int i = 1; i < n && err == 0; i++) {
        int q = (ddp->rank - i + n) % n;
        err = ddp_cpu_check_call(ddp, c, what, call, &slot_of(c, q, *b)->call, q, -1);
    }
    return err;
}

/* What rank q posted in board call b. */
static const uint8_t *posted(const cpu_t *c, int q, uint64_t b)
{
    return (const uint8_t *)(slot_of(c, q, b) + 1);
}

/* `result` gets the reduction, in rank order, of `count` elements at byte `at` of every
 * rank's post of call b. */
static void reduce_posts(const ddp_t *ddp, const cpu_t *c, uint64_t b, size_t at, uint8_t *result,
                         size_t count, ddp_dtype_t dtype, ddp_reduce_op_t op)
{
    int n = ddp->world_size;
    memcpy(result, posted(c, 0, b) + at, count * ddp_dtype_size(dtype));
    for (int q = 1; q < n; q++)
        ddp_reduce_into(result, posted(c, q, b) + at, count, dtype, op, q == n - 1 ? n : 0);
}

int ddp_cpu_board_all_reduce(ddp_t *ddp, cpu_t *c, const char *what, uint8_t *buf, size_t count,
                             ddp_dtype_t dtype, ddp_reduce_op_t op, const call_t *call)
{
    size_t bytes = count * ddp_dtype_size(dtype);
    uint64_t b;
    int err = exchange(ddp, c, what, call, buf, bytes, &b);
    if (err == 0)
        reduce_posts(ddp, c, b, 0, buf, count, dtype, op);
    return err;
}

int ddp_cpu_board_reduce(ddp_t *ddp, cpu_t *c, uint8_t *buf, size_t count, ddp_dtype_t dtype,
                         ddp_reduce_op_t op, int root, const call_t *call)
{
    uint64_t b;
    int err = exchange(ddp, c, "reduce", call, buf, count * ddp_dtype_size(dtype), &b);
    if (err == 0 && ddp->rank == root)
        reduce_posts(ddp, c, b, 0, buf, count, dtype, op);
    return err;
}

int ddp_cpu_board_reduce_scatter(ddp_t *ddp, cpu_t *c, const uint8_t *send, uint8_t *recv,
                                 size_t count, ddp_dtype_t dtype, ddp_reduce_op_t op,
                                 const call_t *call)
{
    uint64_t b;
    size_t block = count * ddp_dtype_size(dtype);
    int err = exchange(ddp, c, "reduce_scatter", call, send, block * (size_t)ddp->world_size, &b);
    if (err == 0)
        reduce_posts(ddp, c, b, block * (size_t)ddp->rank, recv, count, dtype, op);
    return err;
}

int ddp_cpu_board_all_gather(ddp_t *ddp, cpu_t *c, uint8_t *recv, size_t block, const call_t *call)
{
    uint64_t b;
    int err = exchange(ddp, c, "all_gather", call, recv + (size_t)ddp->rank * block, block, &b);
    for (int q = 0; q < ddp->world_size && err == 0; q++) {
        if (q != ddp->rank)
            memcpy(recv + (size_t)q * block, posted(c, q, b), block);
    }
    return err;
}

int ddp_cpu_board_broadcast(ddp_t *ddp, cpu_t *c, uint8_t *buf, size_t len, int root,
                            const call_t *call)
{
    uint64_t b;
    bool mine = ddp->rank == root;
    int err = exchange(ddp, c, "broadcast", call, buf, mine ? len : 0, &b);
    if (err == 0 && !mine)
        memcpy(buf, posted(c, root, b), len);
    return err;
}
