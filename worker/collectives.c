/* The CPU backend's other collectives, written in transfers around the ring (cpu.h):
 * reduce, reduce-scatter, gather, scatter and all-to-all; and point to point, on
 * connections of their own.
 *
 * Ring positions: for a rooted collective, rank x sits at position (x - root - 1) mod n,
 * so the root's next is position 0 and the root is last (n - 1). Data for or from the
 * root flows along the positions, one hop a step, pipelined: n - 1 steps each. Every
 * collective's first step is a transfer on every rank, carrying the call description
 * (checked against the previous rank's), even where that rank has no data to move then. */
#include "cpu.h"

#include "error.h"
#include "io.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* Buffers a collective needs for its steps: the context's own, kept from one call to the
 * next (the same sizes again allocate nothing and fault in no fresh pages: a 4-rank
 * reduce-scatter of 16 MiB spent half its time on them), grown by doubling from 1 MiB to
 * fit; beyond KEEP_MAX each, allocated for the call. */
#define KEEP_MIN ((size_t)1 << 20)
#define KEEP_MAX ((size_t)64 << 20)

typedef struct {
    uint8_t *p[3];
    bool owned; /* allocated for this call: freed by give_back */
} scratch_t;

static int take(ddp_t *ddp, cpu_t *c, scratch_t *s, const char *what, size_t bytes, int n)
{
    bytes = bytes > 0 ? bytes : 1;
    s->owned = bytes > KEEP_MAX;
    if (!s->owned && c->kept_bytes < bytes) {
        size_t size = c->kept_bytes > 0 ? c->kept_bytes : KEEP_MIN;
        while (size < bytes)
            size *= 2;
        for (int i = 0; i < 3; i++) {
            free(c->kept[i]);
            c->kept[i] = NULL;
        }
        c->kept_bytes = size;
    }
    for (int i = 0; i < n; i++) {
        if (!s->owned && c->kept[i] == NULL)
            c->kept[i] = malloc(c->kept_bytes);
        s->p[i] = s->owned ? malloc(bytes) : c->kept[i];
        if (s->p[i] == NULL)
            return ddp_fail(ddp, -ENOMEM, "%s: out of memory for %zu bytes", what, bytes);
    }
    return 0;
}

static void give_back(scratch_t *s)
{
    for (int i = 0; s->owned && i < 3; i++)
        free(s->p[i]);
}

/* A step's transfer, skipped where this rank has nothing to move and no call to check. */
static int step(ddp_t *ddp, cpu_t *c, const char *what, const transfer_t *t)
{
    if (t->call == NULL && t->send_len == 0 && t->recv_len == 0)
        return 0;
    return ddp_cpu_transfer(ddp, c, what, t);
}

/* Reduce-scatter around the ring over the chunks of `send` (chunk i: `offset(i)`,
 * `len(i)` bytes): rank r ends with the reduction of chunk r in `own`, having left
 * `send` as it was. Chunk c's partial sum starts at rank c+1 and gains each rank's
 * contribution on its way round to c. `part` holds two chunks (the largest). */
typedef struct {
    const uint8_t *send;
    size_t count; /* elements, split in n chunks (equal blocks when count % n == 0) */
    size_t block; /* 0: chunks as ddp_cpu_chunk_*; else every chunk `block` elements */
} chunks_t;

static size_t chunk_at(const chunks_t *k, int n, int i, size_t es)
{
    return (k->block ? k->block * (size_t)i : ddp_cpu_chunk_offset(k->count, n, i)) * es;
}

static size_t chunk_len(const chunks_t *k, int n, int i, size_t es)
{
    return (k->block ? k->block : ddp_cpu_chunk_count(k->count, n, i)) * es;
}

static int ring_reduce_scatter(ddp_t *ddp, cpu_t *c, const char *what, const chunks_t *k,
                               uint8_t *own, uint8_t *const part[2], ddp_dtype_t dtype,
                               ddp_reduce_op_t op, const call_t *call)
{
    int n = ddp->world_size, r = ddp->rank;
    size_t es = ddp_dtype_size(dtype);
    for (int s = 0; s < n - 1; s++) {
        int out = (r - s - 1 + n) % n, in = (r - s - 2 + 2 * n) % n;
        bool last = s == n - 2;
        uint8_t *dst = last ? own : part[s % 2];
        const uint8_t *mine = k->send + chunk_at(k, n, in, es);
        if (dst != mine)
            memcpy(dst, mine, chunk_len(k, n, in, es));
        transfer_t t = {
            .send = s == 0 ? k->send + chunk_at(k, n, out, es) : part[(s - 1) % 2],
            .send_len = chunk_len(k, n, out, es),
            .recv = dst,
            .recv_len = chunk_len(k, n, in, es),
            .reduce = true,
            .dtype = dtype,
            .op = op,
            .average_over = last ? n : 0,
            .call = s == 0 ? call : NULL,
        };
        int err = step(ddp, c, what, &t);
        if (err)
            return err;
    }
    return 0;
}

static int reduce_scatter(ddp_t *ddp, void *state, const void *send, void *recv, size_t count,
                          ddp_dtype_t dtype, ddp_reduce_op_t op);

/* f16 and bf16: in f32, the result rounded once. */
int ddp_cpu_reduce_scatter(ddp_t *ddp, void *state, const void *send, void *recv, size_t count,
                           ddp_dtype_t dtype, ddp_reduce_op_t op)
{
    float *wide_send, *wide_recv = NULL;
    size_t all = count * (size_t)ddp->world_size;
    int err = ddp_cpu_widen(ddp, state, "reduce_scatter", send, all, dtype, &wide_send);
    if (err || wide_send == NULL)
        return err ? err : reduce_scatter(ddp, state, send, recv, count, dtype, op);
    if ((wide_recv = malloc(count * sizeof *wide_recv + 1)) == NULL)
        err = ddp_fail(ddp, -ENOMEM, "reduce_scatter: out of memory for %zu elements", count);
    if (err == 0)
        err = reduce_scatter(ddp, state, wide_send, wide_recv, count, DDP_FLOAT32, op);
    if (err == 0)
        ddp_half_narrow(wide_recv, recv, count, dtype);
    ddp_cpu_narrow(state, wide_send, NULL, all, dtype);
    free(wide_recv);
    return err;
}

static int reduce_scatter(ddp_t *ddp, void *state, const void *send, void *recv, size_t count,
                          ddp_dtype_t dtype, ddp_reduce_op_t op)
{
    cpu_t *c = state;
    int n = ddp->world_size;
    size_t bytes = count * ddp_dtype_size(dtype);
    scratch_t s = {0};
    if (n == 1) {
        memmove(recv, send, bytes);
        return 0;
    }
    call_t call = ddp_cpu_begin_call(c, CALL_REDUCE_SCATTER, count, dtype, (unsigned)op);
    if (bytes == 0)
        return ddp_cpu_call_only(ddp, c, "reduce_scatter", &call);
    if (ddp_cpu_on_board(ddp, c, bytes * (size_t)n))
        return ddp_cpu_board_reduce_scatter(ddp, c, send, recv, count, dtype, op, &call);
    chunks_t k = {.send = send, .count = count * (size_t)n, .block = count};
    int err = take(ddp, c, &s, "reduce_scatter", bytes, 2);
    if (err == 0)
        err = ring_reduce_scatter(ddp, c, "reduce_scatter", &k, recv, s.p, dtype, op, &call);
    give_back(&s);
    return err;
}

/* The position of rank x for a collective rooted at `root`. */
static int position(int x, int root, int n)
{
    return (x - root - 1 + n) % n;
}

/* The chunks every rank holds (chunk x at rank x; the root's already in place) move to
 * the root along the positions: at step s the rank at position p passes on the chunk of
 * position p - s (its own at step 0) and takes that of p - 1 - s; the root takes the
 * chunk of position n - 2 - s into `result`. `fwd` holds two chunks. */
static int ring_gather(ddp_t *ddp, cpu_t *c, const char *what, const chunks_t *k,
                       const uint8_t *own, uint8_t *result, uint8_t *const fwd[2], int root,
                       ddp_dtype_t dtype, const call_t *call)
{
    int n = ddp->world_size, p = position(ddp->rank, root, n);
    size_t es = ddp_dtype_size(dtype);
    for (int s = 0; s < n - 1; s++) {
        transfer_t t = {.dtype = dtype, .call = s == 0 ? call : NULL};
        if (ddp->rank == root) {
            int from = (root + n - 1 - s) % n; /* position n - 2 - s */
            t.recv = result + chunk_at(k, n, from, es);
            t.recv_len = chunk_len(k, n, from, es);
        } else {
            if (p >= s) {
                int of = (ddp->rank - s + n) % n;
                t.send = s == 0 ? own : fwd[(s - 1) % 2];
                t.send_len = chunk_len(k, n, of, es);
            }
            if (p >= s + 1) {
                int of = (ddp->rank - 1 - s + n) % n;
                t.recv = fwd[s % 2];
                t.recv_len = chunk_len(k, n, of, es);
            }
        }
        int err = step(ddp, c, what, &t);
        if (err)
            return err;
    }
    return 0;
}

static int reduce(ddp_t *ddp, void *state, void *buf, size_t count, ddp_dtype_t dtype,
                  ddp_reduce_op_t op, int root);

/* f16 and bf16: in f32; only the root's buffer gets the result, rounded once. */
int ddp_cpu_reduce(ddp_t *ddp, void *state, void *buf, size_t count, ddp_dtype_t dtype,
                   ddp_reduce_op_t op, int root)
{
    float *wide;
    int err = ddp_cpu_widen(ddp, state, "reduce", buf, count, dtype, &wide);
    if (err || wide == NULL)
        return err ? err : reduce(ddp, state, buf, count, dtype, op, root);
    err = reduce(ddp, state, wide, count, DDP_FLOAT32, op, root);
    ddp_cpu_narrow(state, wide, err == 0 && ddp->rank == root ? buf : NULL, count, dtype);
    return err;
}

static int reduce(ddp_t *ddp, void *state, void *buf, size_t count, ddp_dtype_t dtype,
                  ddp_reduce_op_t op, int root)
{
    cpu_t *c = state;
    int n = ddp->world_size, r = ddp->rank;
    size_t es = ddp_dtype_size(dtype);
    scratch_t s = {0};
    if (n == 1)
        return 0;
    call_t call = ddp_cpu_begin_call(c, CALL_REDUCE, count, dtype, (unsigned)op);
    call.root = (uint32_t)root;
    if (count == 0)
        return ddp_cpu_call_only(ddp, c, "reduce", &call);
    if (ddp_cpu_on_board(ddp, c, count * es))
        return ddp_cpu_board_reduce(ddp, c, buf, count, dtype, op, root, &call);
    /* Each rank reduces its chunk (the root in place: its input there is used only at
     * the step that completes it), then the chunks go to the root. Only the root's
     * buffer changes. */
    chunks_t k = {.send = buf, .count = count};
    size_t most = ddp_cpu_chunk_count(count, n, 0) * es;
    int err = take(ddp, c, &s, "reduce", most, 3);
    uint8_t *own = r == root ? (uint8_t *)buf + chunk_at(&k, n, r, es) : s.p[2];
    if (err == 0)
        err = ring_reduce_scatter(ddp, c, "reduce", &k, own, s.p, dtype, op, &call);
    if (err == 0)
        err = ring_gather(ddp, c, "reduce", &k, own, buf, s.p, root, dtype, NULL);
    give_back(&s);
    return err;
}

int ddp_cpu_gather(ddp_t *ddp, void *state, const void *send, void *recv, size_t count,
                   ddp_dtype_t dtype, int root)
{
    cpu_t *c = state;
    int n = ddp->world_size, r = ddp->rank;
    size_t block = count * ddp_dtype_size(dtype);
    scratch_t s = {0};
    if (r == root && (uint8_t *)recv + (size_t)r * block != send)
        memmove((uint8_t *)recv + (size_t)r * block, send, block);
    if (n == 1)
        return 0;
    call_t call = ddp_cpu_begin_call(c, CALL_GATHER, count, dtype, (unsigned)root);
    if (block == 0)
        return ddp_cpu_call_only(ddp, c, "gather", &call);
    chunks_t k = {.count = count * (size_t)n, .block = count};
    int err = take(ddp, c, &s, "gather", block, 2);
    if (err == 0)
        err = ring_gather(ddp, c, "gather", &k, send, recv, s.p, root, dtype, &call);
    give_back(&s);
    return err;
}

int ddp_cpu_scatter(ddp_t *ddp, void *state, const void *send, void *recv, size_t count,
                    ddp_dtype_t dtype, int root)
{
    cpu_t *c = state;
    int n = ddp->world_size, r = ddp->rank, p = position(r, root, n);
    size_t block = count * ddp_dtype_size(dtype);
    scratch_t s = {0};
    if (r == root && (const uint8_t *)send + (size_t)r * block != recv)
        memmove(recv, (const uint8_t *)send + (size_t)r * block, block);
    if (n == 1)
        return 0;
    call_t call = ddp_cpu_begin_call(c, CALL_SCATTER, count, dtype, (unsigned)root);
    if (block == 0)
        return ddp_cpu_call_only(ddp, c, "scatter", &call);
    int err = take(ddp, c, &s, "scatter", block, 2);
    /* The root sends the farthest position's block first; each rank passes on what is
     * for those after it; every block arrives at the last step. */
    for (int st = 0; err == 0 && st < n - 1; st++) {
        transfer_t t = {.dtype = dtype, .call = st == 0 ? &call : NULL};
        if (r == root) {
            int to = (root + n - 1 - st) % n; /* position n - 2 - st */
            t.send = (const uint8_t *)send + (size_t)to * block;
            t.send_len = block;
        } else {
            if (p <= st) {
                t.recv = st == n - 2 ? recv : s.p[st % 2];
                t.recv_len = block;
            }
            if (p <= st - 1) {
                t.send = s.p[(st - 1) % 2];
                t.send_len = block;
            }
        }
        err = step(ddp, c, "scatter", &t);
    }
    give_back(&s);
    return err;
}

int ddp_cpu_all_to_all(ddp_t *ddp, void *state, const void *send, void *recv, size_t count,
                       ddp_dtype_t dtype)
{
    cpu_t *c = state;
    int n = ddp->world_size, r = ddp->rank;
    size_t block = count * ddp_dtype_size(dtype);
    const uint8_t *in = send;
    uint8_t *out = recv;
    scratch_t s = {0};
    memmove(out + (size_t)r * block, in + (size_t)r * block, block);
    if (n == 1)
        return 0;
    call_t call = ddp_cpu_begin_call(c, CALL_ALL_TO_ALL, count, dtype, 0);
    if (block == 0)
        return ddp_cpu_call_only(ddp, c, "all_to_all", &call);
    /* At step st a rank passes on the blocks that rank r - st sent to the ranks more
     * than st hops from it, in order of distance; of those it takes from its previous
     * rank, the first is its own and the rest go on at the next step. */
    int err = take(ddp, c, &s, "all_to_all", (size_t)(n - 1) * block, 3);
    for (int d = 1; err == 0 && d < n; d++)
        memcpy(s.p[2] + (size_t)(d - 1) * block, in + (size_t)((r + d) % n) * block, block);
    for (int st = 0; err == 0 && st < n - 1; st++) {
        int from = (r - 1 - st + n) % n;
        uint8_t *got = s.p[st % 2];
        transfer_t t = {
            .send = st == 0 ? s.p[2] : s.p[(st - 1) % 2] + block,
            .send_len = (size_t)(n - 1 - st) * block,
            .recv = got,
            .recv_len = (size_t)(n - 1 - st) * block,
            .dtype = dtype,
            .call = st == 0 ? &call : NULL,
        };
        if ((err = step(ddp, c, "all_to_all", &t)) == 0)
            memcpy(out + (size_t)from * block, got, block);
    }
    give_back(&s);
    return err;
}
