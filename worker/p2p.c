/* The CPU backend's point to point: ddp_send and ddp_recv between any two ranks.
 *
 * Each ordered pair has a TCP connection of its own, made by the sender on its first
 * send to the peer's p2p port (published at init) and accepted by the receiver on its
 * first receive from it; a connection carries one direction only, so two ranks sending
 * to each other at once never race to make one. Every message is a call description
 * (kind send, its number on the pair, count, dtype) and the data; the receiver checks
 * the description against its own call. A send returns once the kernel has the data
 * (a large one waits for the receiver to read); both fail after the context's timeout
 * without progress, or when the peer is gone, naming it. */
#include "cpu.h"

#include "error.h"
#include "io.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define P2P_MAGIC 0x50504444u /* "DDPP" */

struct ddp_cpu_peer_s {
    int out_fd; /* made by this rank: what it sends to the peer */
    int in_fd;  /* accepted from the peer: what the peer sends to this rank */
    uint64_t sent, received;
};

static int peers(ddp_t *ddp, cpu_t *c)
{
    if (c->peers != NULL)
        return 0;
    if ((c->peers = calloc((size_t)ddp->world_size, sizeof *c->peers)) == NULL)
        return ddp_fail(ddp, -ENOMEM, "point to point: out of memory");
    c->npeers = ddp->world_size;
    for (int i = 0; i < ddp->world_size; i++)
        c->peers[i].out_fd = c->peers[i].in_fd = -1;
    return 0;
}

void ddp_cpu_peers_close(cpu_t *c)
{
    for (int i = 0; c->peers != NULL && i < c->npeers; i++) {
        if (c->peers[i].out_fd >= 0)
            close(c->peers[i].out_fd);
        if (c->peers[i].in_fd >= 0)
            close(c->peers[i].in_fd);
    }
    free(c->peers);
    c->peers = NULL;
}

/* Waits for `events` on fd until `deadline`: 1 ready, 0 the deadline passed. */
static int ready(int fd, short events, double deadline)
{
    for (;;) {
        double left = deadline - ddp_clock_mono();
        struct pollfd pfd = {.fd = fd, .events = events};
        int n = poll(&pfd, 1, left > 0 ? (int)(left * 1000) + 1 : 0);
        if (n > 0 || (n == 0 && left <= 0))
            return n > 0;
        if (n < 0 && errno != EINTR)
            return 1; /* the call that follows says what is wrong */
    }
}

/* All `len` bytes to or from the peer; the deadline moves with each bit of progress. */
static int move_all(ddp_t *ddp, int fd, void *p, size_t len, bool out, int peer, const char *what)
{
    size_t done = 0;
    double deadline = ddp_clock_mono() + ddp->timeout;
    while (done < len) {
        ssize_t n = out ? send(fd, (uint8_t *)p + done, len - done, MSG_DONTWAIT | MSG_NOSIGNAL)
                        : recv(fd, (uint8_t *)p + done, len - done, MSG_DONTWAIT);
        if (n > 0) {
            done += (size_t)n;
            deadline = ddp_clock_mono() + ddp->timeout;
            continue;
        }
        if (n == 0 || (errno != EAGAIN && errno != EINTR))
            return ddp_fail_peer(ddp, n == 0 ? DDP_ECLOSED : ddp_error_from_errno(errno), peer,
                                 "%s: rank %d is gone: %s", what, peer,
                                 n == 0 ? "it closed the connection" : strerror(errno));
        if (!ready(fd, out ? POLLOUT : POLLIN, deadline))
            return ddp_fail(ddp, DDP_ETIMEOUT,
                            "%s: no progress with rank %d for %g s (%s %zu of %zu bytes)", what,
                            peer, ddp->timeout, out ? "sent" : "received", done, len);
    }
    return 0;
}

static int connect_peer(ddp_t *ddp, cpu_t *c, int peer, const char *what)
{
    ddp_cpu_published_t at;
    int fd, err = ddp_cpu_fetch_published(ddp, peer, &at);
    if (err)
        return err;
    err = ddp_cpu_connect(at.host, at.p2p_port, ddp_clock_mono() + ddp->timeout, &fd);
    if (err == DDP_EPROTO)
        return ddp_fail(ddp, DDP_EPROTO, "%s: rank %d published an address that is not one: %s",
                        what, peer, at.host);
    if (err)
        return ddp_fail_peer(ddp, err, peer, "%s: unable to connect to rank %d at %s:%d: %s", what,
                             peer, at.host, at.p2p_port, ddp_strerror(err));
    ddp_cpu_tune(fd);
    c->peers[peer].out_fd = fd;
    uint32_t hello[3] = {P2P_MAGIC, (uint32_t)ddp->rank, (uint32_t)ddp->restart_count};
    return move_all(ddp, fd, hello, sizeof hello, true, peer, what);
}

/* Accepts connections until `peer`'s has come (others met meanwhile are kept). */
static int accept_peer(ddp_t *ddp, cpu_t *c, int peer, const char *what)
{
    double deadline = ddp_clock_mono() + ddp->timeout;
    while (c->peers[peer].in_fd < 0) {
        if (!ready(c->listen_fd, POLLIN, deadline))
            return ddp_fail(ddp, DDP_ETIMEOUT,
                            "%s: rank %d did not connect within %g s: has it called ddp_send?",
                            what, peer, ddp->timeout);
        int fd = accept4(c->listen_fd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0)
            continue; /* gone again (EAGAIN, ECONNABORTED) */
        ddp_cpu_tune(fd);
        uint32_t hello[3];
        int err = move_all(ddp, fd, hello, sizeof hello, false, peer, what);
        if (err) {
            close(fd);
            return err;
        }
        uint32_t from = hello[1];
        if (hello[0] != P2P_MAGIC || hello[2] != (uint32_t)ddp->restart_count ||
            from >= (uint32_t)ddp->world_size || from == (uint32_t)ddp->rank ||
            c->peers[from].in_fd >= 0) {
            close(fd);
            return ddp_fail(ddp, DDP_EPROTO,
                            "%s: a connection that is not a send of this job's attempt %d (rank "
                            "%u of attempt %u)",
                            what, ddp->restart_count, from, hello[2]);
        }
        c->peers[from].in_fd = fd;
    }
    return 0;
}

int ddp_cpu_send(ddp_t *ddp, void *state, const void *buf, size_t count, ddp_dtype_t dtype,
                 int peer)
{
    cpu_t *c = state;
    int err = peers(ddp, c);
    if (err == 0 && c->peers[peer].out_fd < 0)
        err = connect_peer(ddp, c, peer, "send");
    if (err)
        return err;
    call_t call = {.magic = CALL_MAGIC,
                   .kind = CALL_SEND,
                   .dtype = (uint16_t)dtype,
                   .seq = ++c->peers[peer].sent,
                   .count = count};
    int fd = c->peers[peer].out_fd;
    err = move_all(ddp, fd, &call, sizeof call, true, peer, "send");
    return err ? err
               : move_all(ddp, fd, (void *)buf, count * ddp_dtype_size(dtype), true, peer, "send");
}

/* Reads and drops the data of `theirs`, a send that does not match this rank's recv
 * `mine`, where it is one (its number on the pair is the recv's): 0, the pair in step
 * again. Otherwise the context breaks (0 too; the caller fails the call). */
static int drop_send(ddp_t *ddp, int fd, const call_t *mine, const call_t *theirs, int peer)
{
    size_t unit = ddp_dtype_size((ddp_dtype_t)theirs->dtype);
    if (theirs->magic != CALL_MAGIC || theirs->kind != CALL_SEND || theirs->seq != mine->seq ||
        unit == 0 || theirs->count > SIZE_MAX / 8 / unit) {
        ddp->broken = DDP_EUSAGE; /* its data, if any, is on the line for no call */
        return 0;
    }
    uint8_t sink[64 << 10];
    for (size_t left = (size_t)theirs->count * unit; left > 0;) {
        size_t n = left < sizeof sink ? left : sizeof sink;
        int err = move_all(ddp, fd, sink, n, false, peer, "recv");
        if (err)
            return err;
        left -= n;
    }
    return 0;
}

int ddp_cpu_recv(ddp_t *ddp, void *state, void *buf, size_t count, ddp_dtype_t dtype, int peer)
{
    cpu_t *c = state;
    int err = peers(ddp, c);
    if (err == 0 && c->peers[peer].in_fd < 0)
        err = accept_peer(ddp, c, peer, "recv");
    if (err)
        return err;
    call_t mine = {.magic = CALL_MAGIC,
                   .kind = CALL_SEND,
                   .dtype = (uint16_t)dtype,
                   .seq = ++c->peers[peer].received,
                   .count = count},
           theirs;
    int fd = c->peers[peer].in_fd;
    if ((err = move_all(ddp, fd, &theirs, sizeof theirs, false, peer, "recv")) != 0)
        return err;
    if (memcmp(&mine, &theirs, sizeof mine) != 0) {
        char here[128], there[128];
        ddp_cpu_describe(&mine, here, sizeof here);
        ddp_cpu_describe(&theirs, there, sizeof there);
        /* A send of this pair's sequence: its data is read and dropped, so the pair (and
         * the context) stays in step. Anything else leaves bytes on the line for no call. */
        if ((err = drop_send(ddp, fd, &mine, &theirs, peer)) != 0)
            return err;
        return ddp_fail(ddp, DDP_EUSAGE,
                        "send and recv differ: rank %d sent %s, but this rank's recv is %s; "
                        "each recv must match its send's count and dtype%s",
                        peer, theirs.magic == CALL_MAGIC ? there : "something else", here,
                        ddp->broken ? "" : " (the send's data was dropped)");
    }
    return move_all(ddp, fd, buf, count * ddp_dtype_size(dtype), false, peer, "recv");
}
