/* The CPU backend: collectives over a ring of TCP connections, or of shared memory when
 * every rank is on one host.
 *
 * Rank r listens, creates its shared-memory inbox, publishes "host port shm-name nonce"
 * in the store, connects to rank r+1 and accepts rank r-1. If every rank could then map
 * both neighbours' inboxes (one host; decided by a vote over TCP), the data goes
 * through shared memory and the sockets stay only to notice a peer that dies (the
 * kernel closes them). All-reduce is a ring reduce-scatter then all-gather: each chunk
 * is reduced once, in ring order, by its owner and then copied to all, so every rank
 * holds the same bits. Every transfer sends to the next rank while it receives from the
 * previous one, and reduces data as it arrives. A transfer that makes no progress for
 * the timeout, or a peer that goes away, fails naming the peer. Every collective's
 * first transfer begins with a description of the call (which collective, its number
 * in the context, count, dtype, operation or root), checked against the previous
 * rank's before any of its data is used: ranks that call different collectives, or
 * the same with another count or dtype, fail at once saying so, instead of mixing
 * their data or waiting for the timeout. Runs on the thread that owns the context. */
#include "cpu.h"

#include "error.h"
#include "env.h"
#include "io.h"
#include "shm.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define HELLO_MAGIC 0x52504444u /* "DDPR" */
#define SCRATCH     ((size_t)4 << 20)
/* A ring that stays in a core's L2 cache: with 4 MiB, 2 ranks spent 10 % more CPU time
 * on a training step's all-reduce, and 4 ranks on 2 cores took 1.4x as long for 6 MB. */
#ifndef SHM_RING
#define SHM_RING ((size_t)1 << 20)
#endif
#ifndef SHM_CHUNK
#define SHM_CHUNK ((size_t)128 << 10)
#endif
#ifndef SMALL_BYTES
#define SMALL_BYTES ((size_t)8 << 10) /* all-reduces up to this size take n - 1 steps */
#endif
#define SHM_SPINS 200 /* tries without progress before sleeping on the doorbell, */
#ifndef SHM_SPIN_US
#define SHM_SPIN_US 50 /* and at least this long (not oversubscribed): a wake-up costs more */
#endif
#define SHM_NAP_MS 20 /* the longest sleep before looking at the peers' sockets */

void ddp_cpu_describe(const call_t *call, char *buf, size_t cap)
{
    int root = call->kind == CALL_REDUCE ? (int)call->root : (int)call->op;
    ddp_describe_call(call->kind, call->seq, call->count, call->dtype, (int)call->op, root, buf,
                      cap);
    size_t len = strlen(buf);
    if (call->kind == CALL_ALL_REDUCE && call->root && len < cap)
        snprintf(buf + len, cap - len, ", sent in that type");
}

/* The previous rank's description against this rank's: 0, or the failure saying both. */
static int check_call(ddp_t *ddp, cpu_t *c, const char *what, const call_t *mine,
                      const call_t *theirs)
{
    char here[128], there[128];
    if (memcmp(mine, theirs, sizeof *mine) == 0)
        return 0;
    if (theirs->magic != CALL_MAGIC)
        return ddp_fail(ddp, DDP_EPROTO,
                        "%s: rank %d (%s) sent no description of its collective: is it the same "
                        "version of libddp?",
                        what, c->prev, c->prev_addr);
    ddp_cpu_describe(mine, here, sizeof here);
    ddp_cpu_describe(theirs, there, sizeof there);
    /* A usage error, but found mid-collective: the links hold data no call will read,
     * so the context is broken as by any failed collective. */
    ddp->broken = DDP_EUSAGE;
    return ddp_fail(ddp, DDP_EUSAGE,
                    "collectives differ: this rank called %s, but rank %d (%s) called %s; every "
                    "rank must make the same collective calls in the same order, with the same "
                    "count, dtype and operation",
                    here, c->prev, c->prev_addr, there);
}

/* A neighbour we still wait on whose socket turned readable or broken has gone: with
 * shared memory nothing else comes on it. (One we no longer need may have finished and
 * closed already.) -1 if none. */
static int gone_peer(cpu_t *c, bool need_prev, bool need_next)
{
    struct pollfd fds[2] = {{.fd = need_prev ? c->prev_fd : -1, .events = POLLIN},
                            {.fd = need_next ? c->next_fd : -1, .events = POLLIN}};
    if (poll(fds, 2, 0) <= 0)
        return -1;
    return fds[0].revents ? c->prev : fds[1].revents ? c->next : -1;
}

static int transfer_shm(ddp_t *ddp, cpu_t *c, const char *what, const transfer_t *t)
{
    size_t es = ddp_dtype_size(t->dtype), sent = 0, got = 0;
    /* The call's description: its bytes sent and received, ahead of the data. */
    size_t hl = t->call != NULL ? sizeof(call_t) : 0, hs = 0, hg = 0;
    call_t theirs;
    double deadline = 0; /* set when the waiting begins: no clock read while data flows */
    int idle = 0, err;
    bool slept = false;
    double idle_since = 0; /* when the spinning began (0: not yet looked) */
    ddp_shm_align(&c->next_seg, true);
    ddp_shm_align(&c->own, false);
    while (hs < hl || hg < hl || sent < t->send_len || got < t->recv_len) {
        size_t sendable = t->forward ? (got < t->send_len ? got : t->send_len) : t->send_len;
        bool progress = false;
        if (hs < hl) {
            size_t w = ddp_shm_write(&c->next_seg, (const uint8_t *)t->call + hs, hl - hs, 8);
            hs += w;
            progress = w > 0;
        } else if (sent < sendable) {
            size_t want = sendable - sent < SHM_CHUNK ? sendable - sent : SHM_CHUNK;
            size_t w = ddp_shm_write(&c->next_seg, t->send + sent, want, es);
            sent += w;
            progress = w > 0;
        }
        bool header = hg < hl;
        if (header || got < t->recv_len) {
            size_t n, want = header ? hl - hg : t->recv_len - got;
            const uint8_t *data = ddp_shm_peek(&c->own, &n);
            n = n < want ? n : want;
            if (n > 0) {
                if (header)
                    memcpy((uint8_t *)&theirs + hg, data, n);
                else if (t->reduce)
                    ddp_reduce_into(t->recv + got, data, n / es, t->dtype, t->op, t->average_over);
                else
                    memcpy(t->recv + got, data, n);
                ddp_shm_consume(&c->own, n, &c->prev_seg);
                *(header ? &hg : &got) += n;
                progress = true;
                if (header && hg == hl && (err = check_call(ddp, c, what, t->call, &theirs)) != 0)
                    return err;
            }
        }
        if (progress) {
            deadline = 0;
            idle = 0;
            idle_since = 0;
            slept = false;
            continue;
        }
        if (slept) {
            /* Nothing came since the sleep. A neighbour that exits after its last write
             * is not gone for us until that write is read: hence only here. */
            slept = false;
            bool need_prev = hg < hl || got < t->recv_len,
                 need_next = hs < hl || sent < t->send_len;
            int gone = gone_peer(c, need_prev, need_next);
            if (gone >= 0)
                return ddp_fail_peer(ddp, DDP_ECLOSED, gone,
                                     "%s: rank %d (%s) is gone: it closed the connection", what,
                                     gone, gone == c->prev ? c->prev_addr : c->next_addr);
            if (ddp_clock_mono() >= deadline) {
                int peer = need_prev ? c->prev : c->next;
                return ddp_fail(ddp, DDP_ETIMEOUT,
                                "%s: no progress with rank %d (%s) for %g s over shared memory "
                                "(sent %zu of %zu bytes, received %zu of %zu)",
                                what, peer, peer == c->prev ? c->prev_addr : c->next_addr,
                                ddp->timeout, sent, t->send_len, got, t->recv_len);
            }
        }
        /* Spin a while: the peer usually answers within microseconds, and a sleep and
         * its wake-up cost tens. Oversubscribed, yield the CPU instead. */
        if (++idle >= SHM_SPINS && !c->oversubscribed && !slept && SHM_SPIN_US > 0) {
            double clock = ddp_clock_mono();
            if (idle_since == 0)
                idle_since = clock;
            if (clock - idle_since < SHM_SPIN_US * 1e-6)
                idle = SHM_SPINS - 64; /* look at the clock every 64 tries */
        }
        if (idle < SHM_SPINS) {
            if (c->oversubscribed)
                sched_yield();
            continue;
        }
        /* Sleep until a neighbour rings, unless what we wait for came meanwhile. */
        uint32_t seen = ddp_shm_bell_arm(&c->own);
        size_t readable;
        ddp_shm_peek(&c->own, &readable);
        bool ready = (hs < hl && ddp_shm_room(&c->next_seg) >= 8) ||
                     (hs == hl && sent < sendable && ddp_shm_room(&c->next_seg) >= es) ||
                     ((hg < hl || got < t->recv_len) && readable > 0);
        double now = ddp_clock_mono();
        if (deadline == 0)
            deadline = now + ddp->timeout;
        double left = deadline - now;
        /* The flight recorder's peer: the one whose data this rank still needs. */
        ddp_flight_peer(ddp, hg < hl || got < t->recv_len ? c->prev : c->next);
        if (!ready && left > 0)
            ddp_shm_bell_wait(&c->own, seen,
                              left * 1000 < SHM_NAP_MS ? (int)(left * 1000) + 1 : SHM_NAP_MS);
        ddp_shm_bell_disarm(&c->own);
        idle = SHM_SPINS; /* after a sleep, try once and sleep again */
        slept = true;
    }
    return 0;
}

int ddp_cpu_transfer(ddp_t *ddp, cpu_t *c, const char *what, const transfer_t *t)
{
    if (c->shm)
        return transfer_shm(ddp, c, what, t);
    size_t es = ddp_dtype_size(t->dtype), sent = 0, got = 0, reduced = 0, have = 0;
    size_t hl = t->call != NULL ? sizeof(call_t) : 0, hs = 0, hg = 0; /* as in transfer_shm */
    call_t theirs;
    double deadline = ddp_clock_mono() + ddp->timeout;
    while (hs < hl || hg < hl || sent < t->send_len || got < t->recv_len) {
        size_t sendable = t->forward ? (got < t->send_len ? got : t->send_len) : t->send_len;
        struct pollfd fds[2];
        int n = 0, send_slot = -1, recv_slot = -1;
        if (hs < hl || sent < sendable) {
            send_slot = n;
            fds[n++] = (struct pollfd){.fd = c->next_fd, .events = POLLOUT};
        }
        if (hg < hl || got < t->recv_len) {
            recv_slot = n;
            fds[n++] = (struct pollfd){.fd = c->prev_fd, .events = POLLIN};
        }
        double left = deadline - ddp_clock_mono();
        ddp_flight_peer(ddp, recv_slot >= 0 ? c->prev : c->next);
        int r = left <= 0 ? 0 : poll(fds, (nfds_t)n, (int)(left * 1000) + 1);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return ddp_fail(ddp, -errno, "%s: poll: %s", what, strerror(errno));
        if (r == 0) {
            int peer = hg < hl || got < t->recv_len ? c->prev : c->next;
            return ddp_fail(ddp, DDP_ETIMEOUT,
                            "%s: no progress with rank %d (%s) for %g s (sent %zu of %zu bytes, "
                            "received %zu of %zu)",
                            what, peer, peer == c->prev ? c->prev_addr : c->next_addr, ddp->timeout,
                            sent, t->send_len, got, t->recv_len);
        }
        if (send_slot >= 0 && fds[send_slot].revents) {
            ssize_t w = hs < hl ? send(c->next_fd, (const uint8_t *)t->call + hs, hl - hs,
                                       MSG_DONTWAIT | MSG_NOSIGNAL)
                                : send(c->next_fd, t->send + sent, sendable - sent,
                                       MSG_DONTWAIT | MSG_NOSIGNAL);
            if (w < 0 && errno != EAGAIN && errno != EINTR)
                return ddp_fail_peer(ddp, errno == EPIPE ? DDP_ECLOSED : -errno, c->next,
                                     "%s: rank %d (%s) is gone: %s", what, c->next, c->next_addr,
                                     strerror(errno));
            if (w > 0) {
                *(hs < hl ? &hs : &sent) += (size_t)w;
                deadline = ddp_clock_mono() + ddp->timeout;
            }
        }
        if (recv_slot >= 0 && fds[recv_slot].revents) {
            bool header = hg < hl;
            uint8_t *into = header      ? (uint8_t *)&theirs + hg
                            : t->reduce ? c->scratch + have
                                        : t->recv + got;
            size_t room = header ? hl - hg : t->recv_len - got;
            if (!header && t->reduce && room > SCRATCH - have)
                room = SCRATCH - have;
            ssize_t rd = recv(c->prev_fd, into, room, MSG_DONTWAIT);
            if (rd == 0 || (rd < 0 && errno != EAGAIN && errno != EINTR))
                return ddp_fail_peer(ddp, rd == 0 ? DDP_ECLOSED : -errno, c->prev,
                                     "%s: rank %d (%s) is gone: %s", what, c->prev, c->prev_addr,
                                     rd == 0 ? "it closed the connection" : strerror(errno));
            if (rd > 0 && header) {
                hg += (size_t)rd;
                deadline = ddp_clock_mono() + ddp->timeout;
                int err = hg == hl ? check_call(ddp, c, what, t->call, &theirs) : 0;
                if (err)
                    return err;
            } else if (rd > 0) {
                got += (size_t)rd;
                deadline = ddp_clock_mono() + ddp->timeout;
                if (t->reduce) {
                    /* Reduce the whole elements that came; keep a partial one. */
                    have += (size_t)rd;
                    size_t whole = have / es * es;
                    ddp_reduce_into(t->recv + reduced, c->scratch, whole / es, t->dtype, t->op,
                                    t->average_over);
                    reduced += whole;
                    memmove(c->scratch, c->scratch + whole, have - whole);
                    have -= whole;
                }
            }
        }
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
    if (count * es <= SMALL_BYTES)
        return small_all_reduce(ddp, c, what, b, count, dtype, op, &call);
    /* Reduce-scatter: after n-1 steps rank r owns the whole reduction of chunk r+1. The
     * last step, into that chunk, also divides an average: one pass over the data. */
    for (int s = 0; s < n - 1; s++) {
        int out = (r - s + n) % n, in = (r - s - 1 + n) % n;
        transfer_t t = {b + ddp_cpu_chunk_offset(count, n, out) * es,
                        ddp_cpu_chunk_count(count, n, out) * es,
                        b + ddp_cpu_chunk_offset(count, n, in) * es,
                        ddp_cpu_chunk_count(count, n, in) * es,
                        true,
                        false,
                        dtype,
                        op,
                        s == n - 2 ? n : 0,
                        s == 0 ? &call : NULL};
        int err = ddp_cpu_transfer(ddp, c, what, &t);
        if (err)
            return err;
    }
    /* All-gather: the owned chunks go round the ring. */
    for (int s = 0; s < n - 1; s++) {
        int out = (r + 1 - s + n) % n, in = (r - s + n) % n;
        transfer_t t = {b + ddp_cpu_chunk_offset(count, n, out) * es,
                        ddp_cpu_chunk_count(count, n, out) * es,
                        b + ddp_cpu_chunk_offset(count, n, in) * es,
                        ddp_cpu_chunk_count(count, n, in) * es,
                        false,
                        false,
                        dtype,
                        op,
                        0,
                        NULL};
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

static int cpu_all_reduce(ddp_t *ddp, void *state, void *buf, size_t count, ddp_dtype_t dtype,
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
    /* Around the ring from the root; each rank passes on what it has received so far,
     * but for the last, whose next is the root (which still hears its description). */
    bool first = ddp->rank == root, last = c->next == root;
    transfer_t t = {buf, last ? 0 : len, buf, first ? 0 : len, false, !first, dtype, DDP_SUM,
                    0,   &call};
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
    for (int s = 0; s < n - 1; s++) {
        int give = (r - s + n) % n, take = (r - s - 1 + n) % n;
        transfer_t t = {out + (size_t)give * block,
                        block,
                        out + (size_t)take * block,
                        block,
                        false,
                        false,
                        dtype,
                        DDP_SUM,
                        0,
                        s == 0 ? &call : NULL};
        int err = ddp_cpu_transfer(ddp, c, "all_gather", &t);
        if (err)
            return err;
    }
    return 0;
}

int ddp_cpu_listen_on(const char *host, int *fd_out, int *port)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICHOST}, *ai;
    if (getaddrinfo(host, "0", &hints, &ai) != 0)
        return -EINVAL;
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0), err = 0;
    struct sockaddr_storage addr;
    socklen_t len = sizeof addr;
    if (fd < 0 || bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, 16) != 0 ||
        getsockname(fd, (struct sockaddr *)&addr, &len) != 0)
        err = -errno;
    freeaddrinfo(ai);
    if (err) {
        if (fd >= 0)
            close(fd);
        return err;
    }
    *port = ntohs(addr.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&addr)->sin6_port
                                             : ((struct sockaddr_in *)&addr)->sin_port);
    *fd_out = fd;
    return 0;
}

void ddp_cpu_tune(int fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

int ddp_cpu_connect(const char *host, int port, double deadline, int *out)
{
    char port_text[16];
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICHOST}, *ai;
    snprintf(port_text, sizeof port_text, "%d", port);
    if (getaddrinfo(host, port_text, &hints, &ai) != 0)
        return DDP_EPROTO;
    int err = 0, fd = -1;
    for (;;) {
        fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) == 0)
            break;
        err = -errno;
        if (fd >= 0)
            close(fd);
        fd = -1;
        if (ddp_clock_mono() >= deadline)
            break;
        struct timespec pause = {0, 20 * 1000 * 1000}; /* the peer listens already */
        nanosleep(&pause, NULL);
    }
    freeaddrinfo(ai);
    *out = fd;
    return fd >= 0 ? 0 : err;
}

/* Connects to the next rank at "host port", retrying until the deadline. */
static int connect_next(ddp_t *ddp, cpu_t *c, const char *host, int port, double deadline)
{
    snprintf(c->next_addr, sizeof c->next_addr, strchr(host, ':') ? "[%s]:%d" : "%s:%d", host,
             port);
    int err = ddp_cpu_connect(host, port, deadline, &c->next_fd);
    if (err == DDP_EPROTO)
        return ddp_fail(ddp, DDP_EPROTO, "rank %d published an address that is not one: %s",
                        c->next, host);
    if (err)
        return ddp_fail(ddp, err, "unable to connect to rank %d at %s: %s", c->next, c->next_addr,
                        ddp_strerror(err));
    uint32_t hello[3] = {HELLO_MAGIC, (uint32_t)ddp->rank, (uint32_t)ddp->restart_count};
    if (ddp_write_all(c->next_fd, hello, sizeof hello) != 0)
        return ddp_fail(ddp, DDP_ECLOSED, "rank %d at %s closed the connection", c->next,
                        c->next_addr);
    return 0;
}

/* Accepts the previous rank and checks who it is. */
static int accept_prev(ddp_t *ddp, cpu_t *c, int listen_fd, double deadline)
{
    uint32_t hello[3];
    size_t got = 0;
    struct pollfd pfd = {.fd = listen_fd, .events = POLLIN};
    double left = deadline - ddp_clock_mono();
    if (poll(&pfd, 1, left > 0 ? (int)(left * 1000) + 1 : 0) <= 0)
        return ddp_fail(ddp, DDP_ETIMEOUT,
                        "rank %d did not connect within %g s (is it running? it publishes its "
                        "address under ddp/%d/%s/cpu/%d)",
                        c->prev, ddp->timeout, ddp->restart_count, ddp->group, c->prev);
    c->prev_fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);
    if (c->prev_fd < 0)
        return ddp_fail(ddp, -errno, "unable to accept rank %d: %s", c->prev, strerror(errno));
    while (got < sizeof hello) {
        pfd = (struct pollfd){.fd = c->prev_fd, .events = POLLIN};
        left = deadline - ddp_clock_mono();
        if (poll(&pfd, 1, left > 0 ? (int)(left * 1000) + 1 : 0) <= 0)
            return ddp_fail(ddp, DDP_ETIMEOUT, "rank %d connected but said nothing", c->prev);
        ssize_t r = recv(c->prev_fd, (char *)hello + got, sizeof hello - got, 0);
        if (r <= 0)
            return ddp_fail(ddp, DDP_ECLOSED, "rank %d closed the connection at once", c->prev);
        got += (size_t)r;
    }
    if (hello[0] != HELLO_MAGIC || hello[1] != (uint32_t)c->prev ||
        hello[2] != (uint32_t)ddp->restart_count)
        return ddp_fail(ddp, DDP_EPROTO,
                        "expected rank %d of attempt %d, but rank %u of attempt %u connected",
                        c->prev, ddp->restart_count, hello[1], hello[2]);
    return 0;
}

static void cpu_finalize(void *state)
{
    cpu_t *c = state;
    if (c == NULL)
        return;
    if (c->next_fd >= 0)
        close(c->next_fd);
    if (c->prev_fd >= 0)
        close(c->prev_fd);
    if (c->listen_fd >= 0)
        close(c->listen_fd);
    ddp_cpu_peers_close(c);
    ddp_shm_unlink(c->own_name);
    ddp_shm_close(&c->own);
    ddp_shm_close(&c->next_seg);
    ddp_shm_close(&c->prev_seg);
    free(c->scratch);
    free(c->small);
    for (int i = 0; i < 3; i++)
        free(c->kept[i]);
    free(c);
}

int ddp_cpu_fetch_published(ddp_t *ddp, int rank, ddp_cpu_published_t *out)
{
    char key[96];
    ddp_buf_t value = DDP_BUF_INIT;
    unsigned long long n0, n1;
    ddp_key(ddp, key, sizeof key, "cpu/%d", rank);
    char what[64];
    snprintf(what, sizeof what, "rank %d, which has not called ddp_init yet", rank);
    int err = ddp_wait_key_aloud(ddp, key, what);
    if (err == 0)
        err = ddp_store_client_get(ddp->store, key, &value);
    if (err == DDP_ETIMEOUT) {
        ddp_fail(ddp, err,
                 "rank %d never published its address within %g s (DDP_TIMEOUT): it has not "
                 "called ddp_init",
                 rank, ddp->timeout);
    } else if (err) {
        ddp_fail(ddp, err, "rank %d never published its address: %s", rank,
                 ddp_store_client_error(ddp->store));
    } else if (sscanf(ddp_buf_str(&value), "%45s %d %79s %llx %llx %d", out->host, &out->port,
                      out->shm_name, &n0, &n1, &out->p2p_port) != 6 ||
               out->port < 1 || out->port > 65535 || out->p2p_port < 1 || out->p2p_port > 65535) {
        err = ddp_fail(ddp, DDP_EPROTO,
                       "rank %d published '%s', not 'host port shm-name nonce p2p-port'", rank,
                       ddp_buf_str(&value));
    } else {
        out->nonce[0] = n0;
        out->nonce[1] = n1;
    }
    ddp_buf_free(&value);
    return err;
}

/* Maps a neighbour's inbox; false (the ring stays on TCP) where it cannot: another
 * host, DDP_SHM=0 there, or no /dev/shm. */
static bool map_neighbour(ddp_shm_seg_t *seg, const ddp_cpu_published_t *p)
{
    return p->shm_name[0] == '/' && ddp_shm_open(seg, p->shm_name, p->nonce) == 0;
}

/* Every rank votes whether it mapped both neighbours; shared memory only if all did. */
static int choose_transport(ddp_t *ddp, cpu_t *c, const ddp_cpu_published_t *next)
{
    ddp_cpu_published_t prev;
    int err = ddp_cpu_fetch_published(ddp, c->prev, &prev);
    if (err)
        return err;
    int32_t able = c->own.header != NULL && map_neighbour(&c->next_seg, next) &&
                   map_neighbour(&c->prev_seg, &prev);
    /* Over TCP still; returning, every rank has voted, so each has mapped what it can. */
    if ((err = cpu_all_reduce(ddp, c, &able, 1, DDP_INT32, DDP_MIN)) != 0)
        return err;
    ddp_shm_unlink(c->own_name);
    c->own_name[0] = '\0';
    if (able) {
        c->shm = true;
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        c->oversubscribed = cpus > 0 && ddp->local_world_size > cpus;
    } else {
        ddp_shm_close(&c->own);
        ddp_shm_close(&c->next_seg);
        ddp_shm_close(&c->prev_seg);
    }
    return 0;
}

static int cpu_init(ddp_t *ddp, void **state)
{
    cpu_t *c = calloc(1, sizeof *c);
    char host[INET6_ADDRSTRLEN], key[96], value[256];
    int listen_fd = -1, port, p2p_port, err;
    ddp_cpu_published_t next;
    uint64_t nonce[2] = {0, 0};
    double deadline = ddp_clock_mono() + ddp->timeout;
    if (c == NULL)
        return -ENOMEM;
    c->next_fd = c->prev_fd = c->listen_fd = -1;
    c->next = (ddp->rank + 1) % ddp->world_size;
    c->prev = (ddp->rank - 1 + ddp->world_size) % ddp->world_size;
    if (ddp->world_size == 1) {
        *state = c;
        return 0;
    }
    if ((c->scratch = malloc(SCRATCH)) == NULL ||
        (c->small = malloc(SMALL_BYTES * (size_t)ddp->world_size + 1)) == NULL) {
        err = -ENOMEM;
        goto fail;
    }
    /* The address this host reaches the store from is the one to offer the others. */
    if ((err = ddp_store_client_local_address(ddp->store, host, sizeof host)) != 0 ||
        (err = ddp_cpu_listen_on(host, &listen_fd, &port)) != 0 ||
        (err = ddp_cpu_listen_on(host, &c->listen_fd, &p2p_port)) != 0) {
        ddp_fail(ddp, err, "unable to listen for the other ranks: %s", ddp_strerror(err));
        goto fail;
    }
    /* No segment is no error: the ring then runs on TCP. */
    const char *shm = getenv(ddp_env_name(DDP_ENV_DDP_SHM));
    if (shm == NULL || strcmp(shm, "0") != 0) {
        /* The job's run id in the name says whose a segment is, should one be left
         * (a rank killed between creating and the vote). */
        const char *run_id = getenv(ddp_env_name(DDP_ENV_TORCHELASTIC_RUN_ID));
        char tag[64];
        int n = snprintf(tag, sizeof tag, "%.24s", run_id != NULL ? run_id : "none");
        for (int i = 0; i < n; i++) {
            if (!isalnum((unsigned char)tag[i]) && tag[i] != '_' && tag[i] != '.')
                tag[i] = '_';
        }
        snprintf(tag + n, sizeof tag - (size_t)n, "-a%d-r%d", ddp->restart_count, ddp->rank);
        if (ddp_shm_create(&c->own, tag, SHM_RING, c->own_name, sizeof c->own_name, nonce) != 0)
            c->own_name[0] = '\0';
    }
    ddp_key(ddp, key, sizeof key, "cpu/%d", ddp->rank);
    snprintf(value, sizeof value, "%s %d %s %llx %llx %d", host, port,
             c->own_name[0] ? c->own_name : "-", (unsigned long long)nonce[0],
             (unsigned long long)nonce[1], p2p_port);
    if ((err = ddp_store_client_set(ddp->store, key, value, strlen(value))) != 0) {
        ddp_fail(ddp, err, "%s", ddp_store_client_error(ddp->store));
        goto fail;
    }
    if ((err = ddp_cpu_fetch_published(ddp, c->next, &next)) != 0)
        goto fail;
    if ((err = connect_next(ddp, c, next.host, next.port, deadline)) != 0 ||
        (err = accept_prev(ddp, c, listen_fd, deadline)) != 0)
        goto fail;
    struct sockaddr_storage from;
    socklen_t from_len = sizeof from;
    char from_host[INET6_ADDRSTRLEN] = "?", from_port[16] = "?";
    if (getpeername(c->prev_fd, (struct sockaddr *)&from, &from_len) == 0)
        getnameinfo((struct sockaddr *)&from, from_len, from_host, sizeof from_host, from_port,
                    sizeof from_port, NI_NUMERICHOST | NI_NUMERICSERV);
    snprintf(c->prev_addr, sizeof c->prev_addr, strchr(from_host, ':') ? "[%s]:%s" : "%s:%s",
             from_host, from_port);
    ddp_cpu_tune(c->next_fd);
    ddp_cpu_tune(c->prev_fd);
    close(listen_fd);
    listen_fd = -1;
    if ((err = choose_transport(ddp, c, &next)) != 0)
        goto fail;
    *state = c;
    return 0;
fail:
    if (listen_fd >= 0)
        close(listen_fd);
    cpu_finalize(c);
    return err;
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
    .init = cpu_init,
    .barrier = cpu_barrier,
    .broadcast = cpu_broadcast,
    .all_reduce = cpu_all_reduce,
    .all_gather = cpu_all_gather,
    .reduce = ddp_cpu_reduce,
    .reduce_scatter = ddp_cpu_reduce_scatter,
    .all_to_all = ddp_cpu_all_to_all,
    .gather = ddp_cpu_gather,
    .scatter = ddp_cpu_scatter,
    .send = ddp_cpu_send,
    .recv = ddp_cpu_recv,
    .finalize = cpu_finalize,
    .alloc = cpu_alloc,
    .release = cpu_release,
    .copy = cpu_copy,
};
