/* The rendezvous store's TCP server: PyTorch's TCPStore protocol (both generations) on
 * the launcher's libuv loop.
 *
 * Each connection's generation is told from its first bytes; its requests are decoded
 * incrementally and answered in order. A new request on a connection whose WAIT is
 * pending cancels that wait: PyTorch clients send one request at a time, so the client
 * has given up (torch 1.13 clients time out without a CANCEL_WAIT). A malformed, oversize or
 * unsupported request closes that connection with a log line; the server, the job and
 * the other clients go on. Everything runs on the loop thread.
 *
 * Busy polling: a PyTorch client makes one round trip at a time, and a server the kernel
 * must wake for each one (a halted virtual CPU woken by an interrupt) spends longer
 * waking than answering. So for busy_poll_us after each request the server keeps the
 * loop polling without sleep (a libuv idle handle), calling sched_yield between polls so
 * that the workers and clients on the same CPU run first. With no requests the loop
 * sleeps as before: an idle store costs no CPU. */
#ifndef DDP_LAUNCHER_STORE_SERVER_H
#define DDP_LAUNCHER_STORE_SERVER_H

#include "buf.h"
#include "log.h"
#include "store/store.h"
#include "store_codec.h"

#include <sys/socket.h>
#include <uv.h>

typedef struct ddp_store_server_s ddp_store_server_t;

typedef struct ddp_store_server_options_s {
    const char *host; /* address or name to bind (every address it resolves to) */
    int port;         /* 0: a free port */
    ddp_codec_limits_t limits;
    const ddp_log_t *log;
    /* After answering a request, poll for the next one this long (µs) before the loop
     * sleeps again, yielding the CPU to any thread that can run meanwhile; 0: never. */
    unsigned busy_poll_us;
    /* The most client connections open at once (0: no cap); past it a new one is closed
     * at once with a log line, so idle clients cannot take the descriptors the launcher
     * needs for its own work. `nofile` is the open-file limit it was derived from, for
     * that line. */
    size_t max_connections;
    unsigned long long nofile;
    /* Other machines connect (a multi-node job): a host *name* this machine resolves to
     * loopback alone (Debian's /etc/hosts gives its own name 127.0.1.1), which the other
     * nodes resolve to its real address, is served on every interface, as torchrun's
     * TCPStore serves any address; said once on `log`. */
    bool remote_clients;
} ddp_store_server_options_t;

/* Binds and listens. On failure returns -errno (-EADDRINUSE when the port is taken,
 * -EADDRNOTAVAIL when the host is not an address of this machine) or DDP_EPARSE (the
 * host does not resolve), with `err` saying what happened; the loop must then run once
 * more to close what was opened. */
int ddp_store_server_start(uv_loop_t *loop, const ddp_store_server_options_t *options,
                           ddp_store_server_t **out, ddp_buf_t *err);

/* The port it listens on (useful with port 0). */
int ddp_store_server_port(const ddp_store_server_t *server);

/* The contents, to clear keys between attempts. */
ddp_store_t *ddp_store_server_store(ddp_store_server_t *server);

/* The number of client connections open now. */
size_t ddp_store_server_connections(const ddp_store_server_t *server);

/* The number of connections with a WAIT pending. */
size_t ddp_store_server_waiting(const ddp_store_server_t *server);

/* A client's WAIT that has been pending long (not a launcher's: a connection that wrote
 * under the watched prefix, or a wait for a key under it): its peer, how long (s), and the first of
 * its keys that did not exist when it began, shown with printable bytes as they are (others \xNN),
 * at most 160 of them. */
#define DDP_STORE_WAIT_KEY_MAX 200
typedef struct ddp_store_long_wait_s {
    struct sockaddr_storage peer;
    double waited;
    char key[DDP_STORE_WAIT_KEY_MAX];
} ddp_store_long_wait_t;

/* The WAITs pending for `older` seconds or more, oldest first, the first `cap` of them
 * into out[]; returns how many there are. Costs what it finds (the pending ones are
 * kept in the order they began). */
size_t ddp_store_server_long_waits(const ddp_store_server_t *server, double older,
                                   ddp_store_long_wait_t *out, size_t cap);

/* The requests served, ever. */
uint64_t ddp_store_server_requests(const ddp_store_server_t *server);

/* The keys named by the requests served, ever (a WAIT or MULTI_GET of n keys: n; an empty
 * key not counted). */
uint64_t ddp_store_server_keys(const ddp_store_server_t *server);

/* The loop turns spent busy polling, ever. */
uint64_t ddp_store_server_busy_polls(const ddp_store_server_t *server);

/* Watching the writes under one key prefix (the launcher's rendezvous coordinator):
 * on_write runs on the loop after every request of a client that wrote a key starting
 * with `prefix` (SET, ADD, COMPARE_SET, APPEND, MULTI_SET), with the value the key now
 * holds; *tag is the connection's own tag, NULL until on_write sets it. on_close runs
 * when a connection with a tag closes (its client died, or gave up). A connection that
 * has a tag is not busy-polled for: its traffic is the launchers', not a worker's.
 * Neither callback may close connections; both may write to the store through
 * ddp_store_server_set. */
typedef struct ddp_store_server_watch_s {
    const char *prefix;
    void (*on_write)(void *ctx, void **tag, ddp_store_key_t key, const uint8_t *value, size_t len);
    void (*on_close)(void *ctx, void *tag);
    void *ctx;
} ddp_store_server_watch_t;

/* Installs `watch` (borrowed until replaced), or removes it with NULL. */
void ddp_store_server_watch(ddp_store_server_t *server, const ddp_store_server_watch_t *watch);

/* SET from the loop itself (a watcher's callback, a timer): the clients whose WAIT it
 * completes are answered when the request being handled is done, or else on the next
 * loop turn, never from inside the caller. 0 or -ENOMEM. */
int ddp_store_server_set(ddp_store_server_t *server, const char *key, const void *value,
                         size_t len);

/* Closes the listeners and every connection; the server is freed once the loop has
 * run their close callbacks. */
void ddp_store_server_close(ddp_store_server_t *server);

#endif
