/* The CPU backend's TCP transport (see cpu.h): a connection to the next rank and one
 * from the previous, non-blocking, without Nagle's delay. Received data to be reduced
 * waits in the context's scratch buffer until whole elements have come; data to be
 * copied goes straight where it belongs. A peer that closes its connection, or that
 * sends nothing for the timeout, fails the transfer naming it. Also the sockets'
 * helpers the ring's setup and ddp_send share. */
#include "cpu.h"
#include "env.h"

#include "error.h"
#include "io.h"
#include "netaddr.h"

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

static void tcp_begin(cpu_t *c)
{
    c->have = 0;
}

static long tcp_send_some(ddp_t *ddp, cpu_t *c, const char *what, const uint8_t *data, size_t len,
                          size_t unit)
{
    (void)unit; /* a stream: the receiver reassembles elements */
    ssize_t w = send(c->next_fd, data, len, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (w >= 0)
        return w;
    if (errno == EAGAIN || errno == EINTR)
        return 0;
    return ddp_fail_peer(ddp, ddp_error_from_errno(errno), c->next, "%s: rank %d (%s) is gone: %s",
                         what, c->next, c->next_addr, strerror(errno));
}

static long tcp_recv_some(ddp_t *ddp, cpu_t *c, const char *what, uint8_t *direct, size_t want,
                          size_t unit, const uint8_t **data)
{
    /* Bytes waiting in scratch are this transfer's already: no more than the rest. */
    uint8_t *into = direct != NULL ? direct : c->scratch + c->have;
    size_t room = direct != NULL ? want : want - c->have;
    if (direct == NULL && room > DDP_CPU_SCRATCH - c->have)
        room = DDP_CPU_SCRATCH - c->have;
    ssize_t rd = recv(c->prev_fd, into, room, MSG_DONTWAIT);
    if (rd == 0 || (rd < 0 && errno != EAGAIN && errno != EINTR))
        return ddp_fail_peer(ddp, rd == 0 ? DDP_ECLOSED : ddp_error_from_errno(errno), c->prev,
                             "%s: rank %d (%s) is gone: %s", what, c->prev, c->prev_addr,
                             rd == 0 ? "it closed the connection" : strerror(errno));
    if (rd < 0)
        rd = 0;
    if (direct != NULL) {
        *data = direct;
        return rd;
    }
    /* Whole elements are used; a partial one waits for the rest. */
    c->have += (size_t)rd;
    *data = c->scratch;
    return (long)(c->have / unit * unit);
}

static void tcp_consume(cpu_t *c, size_t n)
{
    memmove(c->scratch, c->scratch + n, c->have - n);
    c->have -= n;
}

static int tcp_wait(ddp_t *ddp, cpu_t *c, const char *what, cpu_progress_t *p)
{
    struct pollfd fds[2];
    nfds_t n = 0;
    bool need_prev = ddp_cpu_needs_prev(p);
    if (p->hs < p->hl || p->sent < p->sendable)
        fds[n++] = (struct pollfd){.fd = c->next_fd, .events = POLLOUT};
    if (need_prev)
        fds[n++] = (struct pollfd){.fd = c->prev_fd, .events = POLLIN};
    double now = ddp_clock_mono();
    if (p->deadline == 0)
        p->deadline = now + ddp->timeout;
    double left = p->deadline - now;
    ddp_flight_peer(ddp, need_prev ? c->prev : c->next);
    int r = left <= 0 ? 0 : poll(fds, n, (int)(left * 1000) + 1);
    if (r < 0 && errno != EINTR)
        return ddp_fail(ddp, -errno, "%s: poll: %s", what, strerror(errno));
    if (r != 0)
        return 0;
    return ddp_cpu_no_progress(ddp, c, what, p, "");
}

const cpu_transport_t ddp_cpu_tcp = {
    .name = "tcp",
    .begin = tcp_begin,
    .send_some = tcp_send_some,
    .recv_some = tcp_recv_some,
    .consume = tcp_consume,
    .wait = tcp_wait,
};

int ddp_cpu_offered_address(ddp_t *ddp, char *host, size_t cap)
{
    const char *spec = getenv(ddp_env_name(DDP_ENV_DDP_SOCKET_IFNAME));
    const char *local = getenv(ddp_env_name(DDP_ENV_DDP_LOCAL_ADDR));
    if (spec != NULL && *spec != '\0') {
        if (ddp_interface_selected(spec, host, cap, NULL, 0))
            return 0;
        return ddp_fail(ddp, -EADDRNOTAVAIL,
                        "DDP_SOCKET_IFNAME=%s: no interface here that is up and has an address "
                        "matches it",
                        spec);
    }
    if (local != NULL && *local != '\0') {
        if (ddp_host_numeric(local, host, cap))
            return 0;
        return ddp_fail(ddp, -EADDRNOTAVAIL,
                        "DDP_LOCAL_ADDR=%s (ddp-launch --local-addr): no such address or name here",
                        local);
    }
    int err = ddp_store_client_local_address(ddp->store, host, cap);
    if (err != 0)
        return ddp_fail(ddp, err, "unable to find the address of the store connection: %s",
                        ddp_strerror(err));
    const char *master = getenv(ddp_env_name(DDP_ENV_MASTER_ADDR));
    bool loopback = false;
    char found[INET6_ADDRSTRLEN];
    if (!ddp_host_is_literal(host, &loopback) || !loopback ||
        ddp->world_size <= ddp->local_world_size || master == NULL ||
        ddp_host_is_literal(master, NULL) || !ddp_interface_address(found, sizeof found, NULL, 0))
        return 0;
    ddp_log_info(&ddp->log,
                 "rank %d: MASTER_ADDR %s is loopback here (%s); the other machines' ranks "
                 "reach this one at %s",
                 ddp->rank, master, host, found);
    snprintf(host, cap, "%s", found);
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
