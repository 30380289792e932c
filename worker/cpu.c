/* The CPU backend's collectives over the ring (cpu_ring.c) and the one transfer loop
 * every algorithm is written in, whatever the transport (cpu_tcp.c, cpu_shm.c).
 *
 * All-reduce is a ring reduce-scatter then all-gather: each chunk is reduced once, in
 * ring order, by its owner and then copied to all, so every rank holds the same bits;
 * small ones send every rank's buffer round the ring and reduce in rank order; with two
 * ranks on shared memory the two steps alternate piece by piece. Every transfer sends to
 * the next rank while it receives from the previous one, and reduces data as it arrives.
 * A transfer that makes no progress for the timeout, or a peer that goes away, fails
 * naming the peer. Every collective's first transfer begins with a
 * description of the call (which collective, its number in the context, count, dtype,
 * operation or root), checked against the previous rank's before any of its data is
 * used: ranks that call different collectives, or the same with another count or
 * dtype, fail at once saying so, instead of mixing their data or waiting for the
 * timeout. Runs on the thread that owns the context. */
#include "cpu.h"

#include "error.h"
#include "io.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void ddp_cpu_describe(const call_t *call, char *buf, size_t cap)
{
    int root = call->kind == CALL_REDUCE ? (int)call->root : (int)call->op;
    ddp_describe_call(call->kind, call->seq, call->count, call->dtype, (int)call->op, root, buf,
                      cap);
    size_t len = strlen(buf);
    if (call->kind == CALL_ALL_REDUCE && call->root && len < cap)
        snprintf(buf + len, cap - len, ", sent in that type");
}

/* Over a ring a rank sees only its previous rank's call. With one odd rank k, ranks k
 * and k+1 each see a difference: each says so in the store (under the call's number and
 * its rank) and looks, for up to a second, for the other's word. Its next rank's means
 * this rank is the odd one (-1: nobody else to blame); its previous rank's means that
 * one is. Neither, or both: -1. Only on this failure's path. */
static int ring_culprit(ddp_t *ddp, cpu_t *c, uint64_t seq)
{
    char mine[96], next[96], prev[96];
    if (ddp->store == NULL || ddp->world_size < 3)
        return -1;
    ddp_key(ddp, mine, sizeof mine, "differ/%llu/%d", (unsigned long long)seq, ddp->rank);
    ddp_key(ddp, next, sizeof next, "differ/%llu/%d", (unsigned long long)seq, c->next);
    ddp_key(ddp, prev, sizeof prev, "differ/%llu/%d", (unsigned long long)seq, c->prev);
    if (ddp_store_client_set(ddp->store, mine, "1", 1) != 0)
        return -1;
    double deadline = ddp_clock_mono() + (ddp->timeout < 1 ? ddp->timeout : 1);
    for (;;) {
        const char *keys_next[] = {next}, *keys_prev[] = {prev};
        bool by_next = false, by_prev = false;
        if (ddp_store_client_check(ddp->store, keys_next, 1, &by_next) != 0 ||
            ddp_store_client_check(ddp->store, keys_prev, 1, &by_prev) != 0)
            return -1;
        if (by_next != by_prev)
            return by_prev ? c->prev : -1;
        if (by_next || ddp_clock_mono() >= deadline)
            return -1;
        struct timespec pause = {0, 10 * 1000 * 1000};
        nanosleep(&pause, NULL);
    }
}

int ddp_cpu_check_call(ddp_t *ddp, cpu_t *c, const char *what, const call_t *mine,
                       const call_t *theirs, int peer, int blame)
{
    char here[128], there[128];
    if (memcmp(mine, theirs, sizeof *mine) == 0)
        return 0;
    if (theirs->magic != CALL_MAGIC)
        return ddp_fail(ddp, DDP_EPROTO,
                        "%s: rank %d (%s) sent no description of its collective: is it the same "
                        "version of libddp?",
                        what, peer, ddp_cpu_addr(c, peer));
    ddp_cpu_describe(mine, here, sizeof here);
    ddp_cpu_describe(theirs, there, sizeof there);
    if (blame == DDP_CPU_BLAME_RING)
        blame = ring_culprit(ddp, c, mine->seq);
    /* A usage error, but found mid-collective: the links hold data no call will read,
     * so the context is broken as by any failed collective. */
    ddp->broken = DDP_EUSAGE;
    return ddp_fail_peer(
        ddp, DDP_EUSAGE, blame,
        "collectives differ: this rank called %s, but rank %d (%s) called %s; every "
        "rank must make the same collective calls in the same order, with the same "
        "count, dtype and operation",
        here, peer, ddp_cpu_addr(c, peer), there);
}

int ddp_cpu_no_progress(ddp_t *ddp, const cpu_t *c, const char *what, const cpu_progress_t *p,
                        const char *over)
{
    int peer = ddp_cpu_needs_prev(p) ? c->prev : c->next;
    /* The rank waited for is blamed: the launcher's report follows the ranks that waited,
     * each for its neighbour, to the one that never came. */
    return ddp_fail_peer(ddp, DDP_ETIMEOUT, peer,
                         "%s: no progress with rank %d (%s) for %g s%s (sent %zu of %zu bytes, "
                         "received %zu of %zu)",
                         what, peer, ddp_cpu_addr(c, peer), ddp->timeout, over, p->sent,
                         p->t->send_len, p->got, p->t->recv_len);
}

/* What came from the previous rank, taken in: the call description (checked once whole),
 * then the data, reduced or copied; the data right behind a header in the same pass.
 * Returns the bytes taken, or a failure. */
static long take(ddp_t *ddp, cpu_t *c, const char *what, cpu_progress_t *p, call_t *theirs)
{
    const transfer_t *t = p->t;
    const cpu_transport_t *tr = c->transport;
    size_t es = ddp_dtype_size(t->dtype);
    long taken = 0;
    while (ddp_cpu_needs_prev(p)) {
        bool header = p->hg < p->hl;
        uint8_t *direct = header ? (uint8_t *)theirs + p->hg : t->reduce ? NULL : t->recv + p->got;
        size_t want = header ? p->hl - p->hg : t->recv_len - p->got;
        const uint8_t *data = NULL;
        long m = tr->recv_some(ddp, c, what, direct, want, header ? 1 : es, &data);
        if (m < 0)
            return m;
        if (m > 0 && data != direct) {
            if (direct != NULL)
                memcpy(direct, data, (size_t)m);
            else
                ddp_reduce_into(t->recv + p->got, data, (size_t)m / es, t->dtype, t->op,
                                t->average_over);
            tr->consume(c, (size_t)m);
        }
        *(header ? &p->hg : &p->got) += (size_t)m;
        taken += m;
        int err = header && p->hg == p->hl ? ddp_cpu_check_call(ddp, c, what, t->call, theirs,
                                                                c->prev, DDP_CPU_BLAME_RING)
                                           : 0;
        if (err)
            return err;
        if (!header || p->hg < p->hl)
            break;
    }
    return taken;
}

/* What may go to the next rank, given: the call description, then the data right
 * behind it. Returns the bytes given, or a failure. */
static long give(ddp_t *ddp, cpu_t *c, const char *what, cpu_progress_t *p)
{
    const transfer_t *t = p->t;
    const cpu_transport_t *tr = c->transport;
    long given = 0, m;
    if (p->hs < p->hl) {
        if ((m = tr->send_some(ddp, c, what, (const uint8_t *)t->call + p->hs, p->hl - p->hs, 8)) <
            0)
            return m;
        p->hs += (size_t)m;
        given += m;
    }
    if (p->hs == p->hl && p->sent < p->sendable) {
        m = tr->send_some(ddp, c, what, t->send + p->sent, p->sendable - p->sent,
                          ddp_dtype_size(t->dtype));
        if (m < 0)
            return m;
        p->sent += (size_t)m;
        given += m;
    }
    return given;
}

/* One transfer, whatever the transport: what can go is given and what has come is
 * taken, until both are whole; the transport waits when neither moved. */
int ddp_cpu_transfer(ddp_t *ddp, cpu_t *c, const char *what, const transfer_t *t)
{
    cpu_progress_t p = {.t = t, .hl = t->call != NULL ? sizeof(call_t) : 0};
    call_t theirs;
    c->transport->begin(c);
    while (ddp_cpu_needs_prev(&p) || ddp_cpu_needs_next(&p)) {
        p.sendable = t->forward ? (p.got < t->send_len ? p.got : t->send_len) : t->send_len;
        long given = give(ddp, c, what, &p);
        if (given < 0)
            return (int)given;
        long taken = take(ddp, c, what, &p, &theirs);
        if (taken < 0)
            return (int)taken;
        if (given + taken > 0) {
            p.deadline = 0;
            p.idle = 0;
            p.idle_since = 0;
            p.slept = false;
            continue;
        }
        int err = c->transport->wait(ddp, c, what, &p);
        if (err)
            return err;
    }
    return 0;
}

/* Chunk i of `count` elements split in n: sizes differ by at most one element. */
size_t ddp_cpu_chunk_offset(size_t count, int n, int i)
{
    size_t base = count / (size_t)n, extra = count % (size_t)n;
    return base * (size_t)i + ((size_t)i < extra ? (size_t)i : extra);
}

size_t ddp_cpu_chunk_count(size_t count, int n, int i)
{
    return count / (size_t)n + ((size_t)i < count % (size_t)n ? 1 : 0);
}

/* This rank's description of the collective it begins, numbered in the context. */
call_t ddp_cpu_begin_call(cpu_t *c, collective_t kind, size_t count, ddp_dtype_t dtype,
                          unsigned op_or_root)
{
    return (call_t){.magic = CALL_MAGIC,
                    .kind = (uint16_t)kind,
                    .dtype = (uint16_t)(c->described ? c->described : (int)dtype),
                    .op = op_or_root,
                    .seq = c->calls++,
                    .count = count};
}

/* A collective without data (count 0) still checks that every rank made the same call. */
int ddp_cpu_call_only(ddp_t *ddp, cpu_t *c, const char *what, const call_t *call)
{
    transfer_t t = {.call = call, .dtype = (ddp_dtype_t)call->dtype};
    return ddp_cpu_transfer(ddp, c, what, &t);
}

/* Small buffers: every rank's whole buffer goes round the ring (n - 1 steps, not the
 * 2(n - 1) of reduce-scatter and all-gather), then each rank reduces the n of them in
 * rank order, so all hold the same bits. More bytes move, but at these sizes a step's
 * latency is what counts. */
static int small_all_reduce(ddp_t *ddp, cpu_t *c, const char *what, uint8_t *buf, size_t count,
                            ddp_dtype_t dtype, ddp_reduce_op_t op, const call_t *call)
{
    int n = ddp->world_size, r = ddp->rank;
    size_t bytes = count * ddp_dtype_size(dtype);
    uint8_t *all = c->small;
    memcpy(all + (size_t)r * bytes, buf, bytes);
    for (int s = 0; s < n - 1; s++) {
        int give = (r - s + n) % n, take = (r - s - 1 + n) % n;
        transfer_t t = {.send = all + (size_t)give * bytes,
                        .send_len = bytes,
                        .recv = all + (size_t)take * bytes,
                        .recv_len = bytes,
                        .dtype = dtype,
                        .call = s == 0 ? call : NULL};
        int err = ddp_cpu_transfer(ddp, c, what, &t);
        if (err)
            return err;
    }
    memcpy(buf, all, bytes);
    for (int q = 1; q < n; q++)
        ddp_reduce_into(buf, all + (size_t)q * bytes, count, dtype, op, q == n - 1 ? n : 0);
    return 0;
}

/* Two ranks on shared memory: the reduce-scatter and the all-gather go piece by piece
 * (DDP_CPU_PIECE_BYTES), in lockstep, instead of one after the other. This rank sends a
 * piece of its chunk while it reduces the peer's piece into the chunk it owns, then at
 * once sends that reduced piece back while it takes the peer's reduced piece into its own
 * chunk. A piece that recent is still in the caches: the reduced piece goes back without
 * a second read from memory, and the peer's result lands on lines just read to be sent
 * (no read before the write): 128 MiB of memory traffic a rank for 64 MiB, not 192.
 * Each element is reduced as in the ring's one step (the same bits); a buffer of one
 * piece is the ring's two steps. */
/* Elements of piece `at` (an offset) of a chunk of n, pieces of `piece`: 0 past its end. */
static size_t piece_count(size_t n, size_t at, size_t piece)
{
    return at >= n ? 0 : n - at < piece ? n - at : piece;
}

static int paired_all_reduce(ddp_t *ddp, cpu_t *c, const char *what, uint8_t *b, size_t count,
                             ddp_dtype_t dtype, ddp_reduce_op_t op, const call_t *call)
{
    size_t es = ddp_dtype_size(dtype), piece = DDP_CPU_PIECE_BYTES / es;
    int r = ddp->rank, own = 1 - r; /* rank r reduces chunk 1 - r, as the ring's step does */
    uint8_t *mine = b + ddp_cpu_chunk_offset(count, 2, r) * es;
    uint8_t *owned = b + ddp_cpu_chunk_offset(count, 2, own) * es;
    size_t mine_n = ddp_cpu_chunk_count(count, 2, r), owned_n = ddp_cpu_chunk_count(count, 2, own);
    size_t most = mine_n > owned_n ? mine_n : owned_n;
    for (size_t at = 0; at < most; at += piece) {
        size_t m = piece_count(mine_n, at, piece), o = piece_count(owned_n, at, piece);
        transfer_t scatter = {.send = mine + at * es,
                              .send_len = m * es,
                              .recv = owned + at * es,
                              .recv_len = o * es,
                              .reduce = true,
                              .dtype = dtype,
                              .op = op,
                              .average_over = 2,
                              .call = at == 0 ? call : NULL};
        transfer_t gather = {.send = owned + at * es,
                             .send_len = o * es,
                             .recv = mine + at * es,
                             .recv_len = m * es,
                             .dtype = dtype};
        int err = ddp_cpu_transfer(ddp, c, what, &scatter);
        if (err == 0)
            err = ddp_cpu_transfer(ddp, c, what, &gather);
        if (err)
            return err;
    }
    return 0;
}

static int ring_all_reduce(ddp_t *ddp, cpu_t *c, collective_t kind, void *buf, size_t count,
                           ddp_dtype_t dtype, ddp_reduce_op_t op)
{
    int n = ddp->world_size, r = ddp->rank;
    size_t es = ddp_dtype_size(dtype);
    uint8_t *b = buf;
    const char *what = kind == CALL_BARRIER ? "barrier" : "all_reduce";
    if (n == 1)
        return 0;
    call_t call = ddp_cpu_begin_call(c, kind, count, dtype, (unsigned)op);
    call.root = ddp->half_wire; /* halves on the wire: ranks must agree on that too */
    if (count == 0)
        return ddp_cpu_call_only(ddp, c, what, &call);
    if (ddp_cpu_on_board(ddp, c, count * es))
        return ddp_cpu_board_all_reduce(ddp, c, what, b, count, dtype, op, &call);
    if (count * es <= DDP_CPU_SMALL_BYTES)
        return small_all_reduce(ddp, c, what, b, count, dtype, op, &call);
    if (n == 2 && c->transport == &ddp_cpu_shm)
        return paired_all_reduce(ddp, c, what, b, count, dtype, op, &call);
    /* Reduce-scatter: after n-1 steps rank r owns the whole reduction of chunk r+1. The
     * last step, into that chunk, also divides an average: one pass over the data. */
    for (int s = 0; s < n - 1; s++) {
        int out = (r - s + n) % n, in = (r - s - 1 + n) % n;
        transfer_t t = {.send = b + ddp_cpu_chunk_offset(count, n, out) * es,
                        .send_len = ddp_cpu_chunk_count(count, n, out) * es,
                        .recv = b + ddp_cpu_chunk_offset(count, n, in) * es,
                        .recv_len = ddp_cpu_chunk_count(count, n, in) * es,
                        .reduce = true,
                        .dtype = dtype,
                        .op = op,
                        .average_over = s == n - 2 ? n : 0,
                        .call = s == 0 ? &call : NULL};
        int err = ddp_cpu_transfer(ddp, c, what, &t);
        if (err)
            return err;
    }
    /* All-gather: the owned chunks go round the ring. */
    for (int s = 0; s < n - 1; s++) {
        int out = (r + 1 - s + n) % n, in = (r - s + n) % n;
        transfer_t t = {.send = b + ddp_cpu_chunk_offset(count, n, out) * es,
                        .send_len = ddp_cpu_chunk_count(count, n, out) * es,
                        .recv = b + ddp_cpu_chunk_offset(count, n, in) * es,
                        .recv_len = ddp_cpu_chunk_count(count, n, in) * es,
                        .dtype = dtype};
        int err = ddp_cpu_transfer(ddp, c, what, &t);
        if (err)
            return err;
    }
    return 0;
}

int ddp_cpu_widen(ddp_t *ddp, cpu_t *c, const char *what, const void *buf, size_t count,
                  ddp_dtype_t dtype, float **out)
{
    *out = NULL;
    if (dtype != DDP_FLOAT16 && dtype != DDP_BFLOAT16)
        return 0;
    if ((*out = malloc(count * sizeof **out + 1)) == NULL)
        return ddp_fail(ddp, -ENOMEM, "%s: out of memory for %zu elements in f32", what, count);
    if (buf != NULL)
        ddp_half_widen(buf, *out, count, dtype);
    c->described = (int)dtype;
    return 0;
}

void ddp_cpu_narrow(cpu_t *c, float *wide, void *into, size_t count, ddp_dtype_t dtype)
{
    if (into != NULL)
        ddp_half_narrow(wide, into, count, dtype);
    c->described = 0;
    free(wide);
}

int ddp_cpu_all_reduce(ddp_t *ddp, void *state, void *buf, size_t count, ddp_dtype_t dtype,
                       ddp_reduce_op_t op)
{
    float *wide;
    if (ddp->half_wire) /* the data stays half; each step reduces in f32 (reduce.c) */
        return ring_all_reduce(ddp, state, CALL_ALL_REDUCE, buf, count, dtype, op);
    int err = ddp_cpu_widen(ddp, state, "all_reduce", buf, count, dtype, &wide);
    if (err || wide == NULL)
        return err ? err : ring_all_reduce(ddp, state, CALL_ALL_REDUCE, buf, count, dtype, op);
    err = ring_all_reduce(ddp, state, CALL_ALL_REDUCE, wide, count, DDP_FLOAT32, op);
    ddp_cpu_narrow(state, wide, err ? NULL : buf, count, dtype);
    return err;
}

static int cpu_barrier(ddp_t *ddp, void *state)
{
    /* One element a rank: every step of the ring carries data, so no rank leaves before
     * every rank has come. */
    int32_t *ones = malloc((size_t)ddp->world_size * sizeof *ones);
    if (ones == NULL)
        return ddp_fail(ddp, -ENOMEM, "barrier: out of memory");
    for (int i = 0; i < ddp->world_size; i++)
        ones[i] = 1;
    int err = ring_all_reduce(ddp, state, CALL_BARRIER, ones, (size_t)ddp->world_size, DDP_INT32,
                              DDP_SUM);
    free(ones);
    return err;
}

static int cpu_broadcast(ddp_t *ddp, void *state, void *buf, size_t count, ddp_dtype_t dtype,
                         int root)
{
    cpu_t *c = state;
    size_t len = count * ddp_dtype_size(dtype);
    if (ddp->world_size == 1)
        return 0;
    call_t call = ddp_cpu_begin_call(c, CALL_BROADCAST, count, dtype, (unsigned)root);
    if (len == 0)
        return ddp_cpu_call_only(ddp, c, "broadcast", &call);
    if (ddp_cpu_on_board(ddp, c, len))
        return ddp_cpu_board_broadcast(ddp, c, buf, len, root, &call);
    /* Around the ring from the root; each rank passes on what it has received so far,
     * but for the last, whose next is the root (which still hears its description). */
    bool first = ddp->rank == root, last = c->next == root;
    transfer_t t = {.send = buf,
                    .send_len = last ? 0 : len,
                    .recv = buf,
                    .recv_len = first ? 0 : len,
                    .forward = !first,
                    .dtype = dtype,
                    .call = &call};
    return ddp_cpu_transfer(ddp, c, "broadcast", &t);
}

static int cpu_all_gather(ddp_t *ddp, void *state, const void *send, void *recv, size_t count,
                          ddp_dtype_t dtype)
{
    cpu_t *c = state;
    int n = ddp->world_size, r = ddp->rank;
    size_t block = count * ddp_dtype_size(dtype);
    uint8_t *out = recv;
    if (out + (size_t)r * block != send)
        memmove(out + (size_t)r * block, send, block);
    if (n == 1)
        return 0;
    call_t call = ddp_cpu_begin_call(c, CALL_ALL_GATHER, count, dtype, 0);
    if (block == 0)
        return ddp_cpu_call_only(ddp, c, "all_gather", &call);
    if (ddp_cpu_on_board(ddp, c, block))
        return ddp_cpu_board_all_gather(ddp, c, out, block, &call);
    for (int s = 0; s < n - 1; s++) {
        int give = (r - s + n) % n, take = (r - s - 1 + n) % n;
        transfer_t t = {.send = out + (size_t)give * block,
                        .send_len = block,
                        .recv = out + (size_t)take * block,
                        .recv_len = block,
                        .dtype = dtype,
                        .call = s == 0 ? &call : NULL};
        int err = ddp_cpu_transfer(ddp, c, "all_gather", &t);
        if (err)
            return err;
    }
    return 0;
}

static int cpu_alloc(ddp_t *ddp, void *state, size_t bytes, void **out)
{
    (void)state;
    if ((*out = malloc(bytes)) == NULL)
        return ddp_fail(ddp, -ENOMEM, "unable to allocate %zu bytes", bytes);
    return 0;
}

static void cpu_release(void *state, void *p)
{
    (void)state;
    free(p);
}

static int cpu_copy(ddp_t *ddp, void *state, void *dst, const void *src, size_t bytes)
{
    (void)ddp;
    (void)state;
    memcpy(dst, src, bytes);
    return 0;
}

const ddp_backend_t ddp_cpu_backend = {
    .name = "cpu",
    .init = ddp_cpu_init,
    .barrier = cpu_barrier,
    .broadcast = cpu_broadcast,
    .all_reduce = ddp_cpu_all_reduce,
    .all_gather = cpu_all_gather,
    .reduce = ddp_cpu_reduce,
    .reduce_scatter = ddp_cpu_reduce_scatter,
    .all_to_all = ddp_cpu_all_to_all,
    .gather = ddp_cpu_gather,
    .scatter = ddp_cpu_scatter,
    .send = ddp_cpu_send,
    .recv = ddp_cpu_recv,
    .finalize = ddp_cpu_finalize,
    .alloc = cpu_alloc,
    .release = cpu_release,
    .copy = cpu_copy,
};
