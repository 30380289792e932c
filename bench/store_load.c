/* ddp-bench-store-load: a TCPStore load generator speaking protocol generation 1, so it
 * drives ddp-launch's store and PyTorch 1.13's own server alike.
 *
 *   ddp-bench-store-load ops HOST PORT CLIENTS VALUE_BYTES SECONDS [DEPTH]
 *       CLIENTS threads, each on its own connection, SET then GET its key (the GET's
 *       answer is read and checked) for SECONDS. Prints "ops N seconds S". DEPTH (1 by
 *       default, as PyTorch's clients) SET+GET pairs are sent before the answers are
 *       read: the server's own capacity, beyond one round trip at a time.
 *   ddp-bench-store-load ops-events HOST PORT CLIENTS VALUE_BYTES SECONDS [DEPTH]
 *       The same load from one thread: CLIENTS connections on one epoll set, each with
 *       its DEPTH pairs in flight and the next sent when the last answer is in (as
 *       redis-benchmark's clients). The server sees the same traffic; the generator
 *       spends less of the machine on thread switches, which on few cores otherwise
 *       hides the server's own cost.
 *   ddp-bench-store-load barrier HOST PORT CLIENTS
 *       CLIENTS connections at once, each ADD /arrived 1 then WAIT /open; when the count
 *       reaches CLIENTS, one more connection SETs /open. Prints "clients N seconds S
 *       retried R", from the first connect to the last WAIT answered; R connections the
 *       kernel reset before the server saw them (its accept queue full) were begun again. */
#include "buf.h"
#include "io.h"
#include "store_codec.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

static struct sockaddr_in server;

static void die(const char *what)
{
    fprintf(stderr, "ddp-bench-store-load: %s: %s\n", what, strerror(errno));
    exit(1);
}

static int connect_blocking(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
    if (fd < 0 || connect(fd, (struct sockaddr *)&server, sizeof server) != 0)
        die("connect");
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

typedef struct {
    int id;
    size_t value_bytes;
    int depth;
    double until;
    long ops;
} worker_t;

/* Buffered reading of GET answers: one recv usually brings several. */
typedef struct {
    int fd;
    char *buf;
    size_t cap, start, end;
} reader_t;

/* Makes `need` bytes readable; without `block`, false when the socket has no more now. */
static bool reader_fill(reader_t *r, size_t need, bool block)
{
    if (r->end - r->start >= need)
        return true;
    memmove(r->buf, r->buf + r->start, r->end - r->start);
    r->end -= r->start;
    r->start = 0;
    while (r->end < need) {
        ssize_t got = recv(r->fd, r->buf + r->end, r->cap - r->end, block ? 0 : MSG_DONTWAIT);
        if (got < 0 && !block && (errno == EAGAIN || errno == EWOULDBLOCK))
            return false;
        if (got <= 0)
            die("recv");
        r->end += (size_t)got;
    }
    return true;
}

/* One GET answer, whose length must be `expect`; without `block`, false (and nothing
 * consumed) when it has not all arrived yet. */
static bool read_answer(reader_t *r, size_t expect, bool block)
{
    uint64_t len;
    if (!reader_fill(r, 8, block))
        return false;
    memcpy(&len, r->buf + r->start, 8);
    if (len != expect) {
        fprintf(stderr, "ddp-bench-store-load: GET answered %llu bytes, not %zu\n",
                (unsigned long long)len, expect);
        exit(1);
    }
    if (!reader_fill(r, 8 + len, block))
        return false;
    r->start += 8 + len;
    return true;
}

/* A client's connection: DEPTH pairs of one SET and one GET of its key, sent together
 * (SET has no answer in generation 1), and the reader of their answers. */
typedef struct {
    reader_t r;
    ddp_buf_t req;
    int due; /* answers still to come (ops-events) */
} bench_conn_t;

static void bench_conn_open(bench_conn_t *c, int id, const char *value, size_t value_bytes,
                            int depth)
{
    char key[32];
    snprintf(key, sizeof key, "/bench/%d", id);
    *c = (bench_conn_t){.req = DDP_BUF_INIT};
    for (int i = 0; i < depth; i++) {
        ddp_codec_put_op(&c->req, DDP_CODEC_GEN1, DDP_CODEC_SET);
        ddp_codec_put_bytes(&c->req, key, strlen(key));
        ddp_codec_put_bytes(&c->req, value, value_bytes);
        ddp_codec_put_op(&c->req, DDP_CODEC_GEN1, DDP_CODEC_GET);
        ddp_codec_put_bytes(&c->req, key, strlen(key));
    }
    c->r.fd = connect_blocking();
    c->r.cap = (8 + value_bytes) * (size_t)depth + 65536;
    c->r.buf = malloc(c->r.cap);
}

static void bench_conn_send(bench_conn_t *c)
{
    if (ddp_write_all(c->r.fd, c->req.data, c->req.len) != 0)
        die("send");
}

static void bench_conn_close(bench_conn_t *c)
{
    close(c->r.fd);
    free(c->r.buf);
    ddp_buf_free(&c->req);
}

static void *ops_thread(void *arg)
{
    worker_t *w = arg;
    char *value = malloc(w->value_bytes ? w->value_bytes : 1);
    memset(value, 'a' + w->id % 26, w->value_bytes);
    bench_conn_t c;
    bench_conn_open(&c, w->id, value, w->value_bytes, w->depth);
    while (ddp_clock_mono() < w->until) {
        bench_conn_send(&c);
        for (int i = 0; i < w->depth; i++)
            read_answer(&c.r, w->value_bytes, true);
        w->ops += 2 * w->depth;
    }
    bench_conn_close(&c);
    free(value);
    return NULL;
}

static int run_ops(int clients, size_t value_bytes, double seconds, int depth)
{
    pthread_t threads[256];
    worker_t workers[256];
    if (clients < 1 || clients > 256)
        return 2;
    double start = ddp_clock_mono();
    for (int i = 0; i < clients; i++) {
        workers[i] = (worker_t){i, value_bytes, depth < 1 ? 1 : depth, start + seconds, 0};
        pthread_create(&threads[i], NULL, ops_thread, &workers[i]);
    }
    long ops = 0;
    for (int i = 0; i < clients; i++) {
        pthread_join(threads[i], NULL);
        ops += workers[i].ops;
    }
    printf("ops %ld seconds %.6f\n", ops, ddp_clock_mono() - start);
    return 0;
}

static int run_ops_events(int clients, size_t value_bytes, double seconds, int depth)
{
    if (clients < 1 || clients > 4096 || depth < 1)
        return 2;
    bench_conn_t *conns = calloc((size_t)clients, sizeof *conns);
    char *value = malloc(value_bytes ? value_bytes : 1);
    memset(value, 'a', value_bytes);
    int ep = epoll_create1(EPOLL_CLOEXEC);
    for (int i = 0; i < clients; i++) {
        bench_conn_open(&conns[i], i, value, value_bytes, depth);
        struct epoll_event ev = {.events = EPOLLIN, .data.u32 = (uint32_t)i};
        epoll_ctl(ep, EPOLL_CTL_ADD, conns[i].r.fd, &ev);
    }
    double start = ddp_clock_mono(), until = start + seconds;
    long ops = 0;
    int busy = clients;
    for (int i = 0; i < clients; i++) {
        bench_conn_send(&conns[i]);
        conns[i].due = depth;
    }
    struct epoll_event events[256];
    while (busy > 0) {
        int k = epoll_wait(ep, events, 256, 30000);
        if (k <= 0)
            die("epoll_wait");
        bool more = ddp_clock_mono() < until;
        for (int e = 0; e < k; e++) {
            bench_conn_t *c = &conns[events[e].data.u32];
            if (c->due == 0)
                continue;
            while (c->due > 0 && read_answer(&c->r, value_bytes, false))
                c->due--;
            if (c->due > 0)
                continue;
            ops += 2L * depth;
            if (!more) {
                busy--;
                continue;
            }
            bench_conn_send(c);
            c->due = depth;
        }
    }
    printf("ops %ld seconds %.6f\n", ops, ddp_clock_mono() - start);
    for (int i = 0; i < clients; i++)
        bench_conn_close(&conns[i]);
    close(ep);
    free(conns);
    free(value);
    return 0;
}

typedef struct {
    int fd;
    int stage; /* 0 connecting, 1 waiting for ADD's answer, 2 for WAIT's, 3 done */
    uint8_t in[9];
    size_t have;
    int retries;
} client_t;

#define BARRIER_RETRIES 5 /* connections a client may begin again */

/* Client i's connection, begun (non-blocking) and watched for its end. */
static void barrier_connect(int ep, client_t *clients, int i)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0), one = 1;
    if (fd < 0)
        die("socket");
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(fd, (struct sockaddr *)&server, sizeof server) != 0 && errno != EINPROGRESS)
        die("connect");
    clients[i].fd = fd;
    clients[i].stage = 0;
    struct epoll_event ev = {.events = EPOLLOUT, .data.u32 = (uint32_t)i};
    epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
}

/* A connection the kernel refused or reset before the server answered anything (its
 * accept queue overflowed: thousands of clients at once, more than net.core.somaxconn):
 * the server never saw its ADD, so the client begins again, as a real one would retry;
 * false when it has no retry left. */
static bool barrier_retry(int ep, client_t *clients, int i, int err)
{
    client_t *c = &clients[i];
    if ((err != ECONNRESET && err != ECONNREFUSED) || c->have > 0 || c->retries >= BARRIER_RETRIES)
        return false;
    c->retries++;
    epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    barrier_connect(ep, clients, i);
    return true;
}

/* Client i's connection ended its connect: ADD sent, or begun again (returns 1). */
static int barrier_connected(int ep, client_t *clients, int i, const ddp_buf_t *arrive)
{
    client_t *c = &clients[i];
    int so = 0;
    socklen_t len = sizeof so;
    getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &so, &len);
    if (so != 0 && barrier_retry(ep, clients, i, so))
        return 1;
    if (so != 0) {
        errno = so;
        die("connect");
    }
    if (send(c->fd, arrive->data, arrive->len, MSG_NOSIGNAL) != (ssize_t)arrive->len)
        die("send");
    c->stage = 1;
    struct epoll_event ev = {.events = EPOLLIN, .data.u32 = (uint32_t)i};
    epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
    return 0;
}

static int run_barrier(int n)
{
    client_t *clients = calloc((size_t)n, sizeof *clients);
    ddp_buf_t arrive = DDP_BUF_INIT, open = DDP_BUF_INIT;
    const char *keys[] = {"/open"};
    ddp_codec_put_op(&arrive, DDP_CODEC_GEN1, DDP_CODEC_ADD);
    ddp_codec_put_bytes(&arrive, "/arrived", 8);
    ddp_codec_put_i64(&arrive, 1);
    ddp_codec_put_op(&arrive, DDP_CODEC_GEN1, DDP_CODEC_WAIT);
    ddp_codec_put_u64(&arrive, 1);
    ddp_codec_put_bytes(&arrive, keys[0], strlen(keys[0]));
    ddp_codec_put_op(&open, DDP_CODEC_GEN1, DDP_CODEC_SET);
    ddp_codec_put_bytes(&open, "/open", 5);
    ddp_codec_put_bytes(&open, "1", 1);
    int coordinator = connect_blocking();
    int ep = epoll_create1(EPOLL_CLOEXEC);
    double start = ddp_clock_mono();
    for (int i = 0; i < n; i++)
        barrier_connect(ep, clients, i);
    int done = 0, retried = 0;
    struct epoll_event events[1024];
    while (done < n) {
        int k = epoll_wait(ep, events, 1024, 30000);
        if (k <= 0) {
            fprintf(stderr, "ddp-bench-store-load: barrier stuck at %d of %d\n", done, n);
            return 1;
        }
        for (int e = 0; e < k; e++) {
            client_t *c = &clients[events[e].data.u32];
            if (c->stage == 0) {
                retried += barrier_connected(ep, clients, (int)events[e].data.u32, &arrive);
                continue;
            }
            ssize_t r = recv(c->fd, c->in + c->have, sizeof c->in - c->have, 0);
            if (r <= 0) {
                if (r < 0 && errno == EAGAIN)
                    continue;
                if (r < 0 && barrier_retry(ep, clients, (int)events[e].data.u32, errno)) {
                    retried++;
                    continue;
                }
                die("recv");
            }
            c->have += (size_t)r;
            if (c->stage == 1 && c->have >= 8) {
                int64_t arrived;
                memcpy(&arrived, c->in, 8);
                if (arrived == n && ddp_write_all(coordinator, open.data, open.len) != 0)
                    die("send");
                c->stage = 2;
            }
            if (c->stage == 2 && c->have >= 9) {
                c->stage = 3;
                close(c->fd);
                done++;
            }
        }
    }
    printf("clients %d seconds %.6f retried %d\n", n, ddp_clock_mono() - start, retried);
    close(coordinator);
    close(ep);
    free(clients);
    ddp_buf_free(&arrive);
    ddp_buf_free(&open);
    return 0;
}

int main(int argc, char **argv)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    if (argc < 5) {
        fprintf(stderr,
                "usage: %s ops HOST PORT CLIENTS VALUE_BYTES SECONDS [DEPTH]\n"
                "       %s ops-events HOST PORT CLIENTS VALUE_BYTES SECONDS [DEPTH]\n"
                "       %s barrier HOST PORT CLIENTS\n",
                argv[0], argv[0], argv[0]);
        return 2;
    }
    server.sin_family = AF_INET;
    server.sin_port = htons((uint16_t)atoi(argv[3]));
    if (inet_pton(AF_INET, argv[2], &server.sin_addr) != 1) {
        fprintf(stderr, "ddp-bench-store-load: %s is not an IPv4 address\n", argv[2]);
        return 2;
    }
    if (strcmp(argv[1], "ops") == 0 && (argc == 7 || argc == 8))
        return run_ops(atoi(argv[4]), strtoul(argv[5], NULL, 10), atof(argv[6]),
                       argc == 8 ? atoi(argv[7]) : 1);
    if (strcmp(argv[1], "ops-events") == 0 && (argc == 7 || argc == 8))
        return run_ops_events(atoi(argv[4]), strtoul(argv[5], NULL, 10), atof(argv[6]),
                              argc == 8 ? atoi(argv[7]) : 1);
    if (strcmp(argv[1], "barrier") == 0)
        return run_barrier(atoi(argv[4]));
    return 2;
}
