/* The CPU backend's ring, set up at ddp_init: rank r listens, creates its shared-memory
 * inbox, publishes "host port shm-name nonce p2p-port" in the store, connects to rank
 * r+1 and accepts rank r-1 (each connection begins with who it is, for this attempt).
 * If every rank could then map both neighbours' inboxes and rank 0's board (one host;
 * decided by a vote over TCP), the data goes through shared memory (cpu_shm.c, and
 * cpu_board.c for collectives of up to 4 KiB); else it stays on TCP (cpu_tcp.c). */
#include "cpu.h"

#include "env.h"
#include "error.h"
#include "io.h"
#include "shm.h"

#include <ctype.h>
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define HELLO_MAGIC 0x52504444u /* "DDPR" */
/* A ring that stays in a core's L2 cache: with 4 MiB, 2 ranks spent 10 % more CPU time
 * on a training step's all-reduce, and 4 ranks on 2 cores took 1.4x as long for 6 MB. */
#ifndef SHM_RING
#define SHM_RING ((size_t)1 << 20)
#endif

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

void ddp_cpu_finalize(void *state)
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
    ddp_shm_close(&c->board_seg);
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

/* The board (cpu_board.c) is behind rank 0's ring: rank 0 has it, the others map rank
 * 0's segment once more (`zero`: what rank 0 published). Used once the vote is won. */
static bool map_board(const ddp_t *ddp, cpu_t *c, const ddp_cpu_published_t *zero)
{
    if (ddp->rank == 0)
        return c->own.board_size >= ddp_cpu_board_size(ddp->world_size);
    return map_neighbour(&c->board_seg, zero) &&
           c->board_seg.board_size >= ddp_cpu_board_size(ddp->world_size);
}

/* Every rank votes whether it mapped both neighbours and the board; shared memory only if
 * all did. */
static int choose_transport(ddp_t *ddp, cpu_t *c, const ddp_cpu_published_t *next)
{
    ddp_cpu_published_t prev, fetched;
    int err = ddp_cpu_fetch_published(ddp, c->prev, &prev);
    /* Rank 0's record: a neighbour's is at hand already. */
    const ddp_cpu_published_t *zero = c->next == 0 ? next : c->prev == 0 ? &prev : &fetched;
    if (err == 0 && ddp->rank != 0 && zero == &fetched)
        err = ddp_cpu_fetch_published(ddp, 0, &fetched);
    if (err)
        return err;
    int32_t able = c->own.header != NULL && map_neighbour(&c->next_seg, next) &&
                   map_neighbour(&c->prev_seg, &prev) && map_board(ddp, c, zero);
    /* Over TCP still; returning, every rank has voted, so each has mapped what it can. */
    if ((err = ddp_cpu_all_reduce(ddp, c, &able, 1, DDP_INT32, DDP_MIN)) != 0)
        return err;
    ddp_shm_unlink(c->own_name);
    c->own_name[0] = '\0';
    if (able) {
        c->transport = &ddp_cpu_shm;
        c->board = ddp->rank == 0 ? c->own.board : c->board_seg.board;
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        c->oversubscribed = cpus > 0 && ddp->local_world_size > cpus;
    } else {
        ddp_shm_close(&c->own);
        ddp_shm_close(&c->next_seg);
        ddp_shm_close(&c->prev_seg);
        ddp_shm_close(&c->board_seg);
    }
    return 0;
}

/* This rank's shared-memory inbox, unless DDP_SHM=0. No segment is no error: the ring
 * then runs on TCP (c->own_name stays empty). */
static void create_inbox(const ddp_t *ddp, cpu_t *c, uint64_t nonce[2])
{
    const char *shm = getenv(ddp_env_name(DDP_ENV_DDP_SHM));
    if (shm != NULL && strcmp(shm, "0") == 0)
        return;
    /* The job's run id in the name says whose a segment is, should one be left (a rank
     * killed between creating and the vote). */
    const char *run_id = getenv(ddp_env_name(DDP_ENV_TORCHELASTIC_RUN_ID));
    char tag[64];
    int n = snprintf(tag, sizeof tag, "%.24s", run_id != NULL ? run_id : "none");
    for (int i = 0; i < n; i++) {
        if (!isalnum((unsigned char)tag[i]) && tag[i] != '_' && tag[i] != '.')
            tag[i] = '_';
    }
    snprintf(tag + n, sizeof tag - (size_t)n, "-a%d-r%d", ddp->restart_count, ddp->rank);
    size_t board = ddp->rank == 0 ? ddp_cpu_board_size(ddp->world_size) : 0;
    if (ddp_shm_create(&c->own, tag, SHM_RING, board, c->own_name, sizeof c->own_name, nonce) != 0)
        c->own_name[0] = '\0';
}

int ddp_cpu_init(ddp_t *ddp, void **state)
{
    cpu_t *c = calloc(1, sizeof *c);
    char host[INET6_ADDRSTRLEN], key[96], value[256];
    int listen_fd = -1, port, p2p_port, err;
    ddp_cpu_published_t next;
    uint64_t nonce[2] = {0, 0};
    double deadline = ddp_clock_mono() + ddp->timeout;
    if (c == NULL)
        return -ENOMEM;
    c->transport = &ddp_cpu_tcp;
    c->next_fd = c->prev_fd = c->listen_fd = -1;
    c->next = (ddp->rank + 1) % ddp->world_size;
    c->prev = (ddp->rank - 1 + ddp->world_size) % ddp->world_size;
    if (ddp->world_size == 1) {
        *state = c;
        return 0;
    }
    if ((c->scratch = malloc(DDP_CPU_SCRATCH)) == NULL ||
        (c->small = malloc(DDP_CPU_SMALL_BYTES * (size_t)ddp->world_size + 1)) == NULL) {
        err = -ENOMEM;
        goto fail;
    }
    /* The address this host reaches the store from is the one to offer the others. */
    if ((err = ddp_cpu_offered_address(ddp, host, sizeof host)) != 0)
        goto fail;
    if ((err = ddp_cpu_listen_on(host, &listen_fd, &port)) != 0 ||
        (err = ddp_cpu_listen_on(host, &c->listen_fd, &p2p_port)) != 0) {
        ddp_fail(ddp, err, "unable to listen for the other ranks on %s: %s", host,
                 ddp_strerror(err));
        goto fail;
    }
    create_inbox(ddp, c, nonce);
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
    ddp_cpu_finalize(c);
    return err;
}
