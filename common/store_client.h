/* A blocking client of the rendezvous store, speaking TCPStore protocol generation 2.
 *
 * Used by libddp and by launchers on other nodes: no event loop, one connection, one
 * request at a time, every call bounded by a deadline. Keys are sent as given (PyTorch's
 * own client puts "/" before user keys; a C program sharing keys with PyTorch workers
 * adds it itself). Not thread-safe: one thread per client, or a lock around it.
 * Functions return 0 or a negative code (DDP_ETIMEOUT, DDP_ECLOSED, DDP_EPROTO,
 * DDP_ETOOBIG, -errno); ddp_store_client_error() then says what failed, naming the
 * store's address and the key. */
#ifndef DDP_COMMON_STORE_CLIENT_H
#define DDP_COMMON_STORE_CLIENT_H

#include "buf.h"
#include "store_codec.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct ddp_store_client_s ddp_store_client_t;

typedef struct ddp_store_client_options_s {
    double connect_timeout; /* s: connection attempts go on (with backoff) this long */
    double timeout;         /* s: each operation's deadline (WAIT takes its own) */
    ddp_codec_limits_t limits;
    /* Told once, with a sentence, when connecting has failed for slow_after seconds
     * (NULL: nobody). */
    void (*on_slow)(void *ctx, const char *what);
    void *slow_ctx;
    double slow_after;
    /* A connection every address of the host refuses ends the attempts at once,
     * -ECONNREFUSED (for a server known to listen already: it is gone). */
    bool refused_ends;
    /* Where set, connecting looks at it every 0.2 s and gives up (-ECANCELED) when it says
     * so. */
    bool (*cancelled)(void *ctx);
    void *cancel_ctx;
    /* A name's sole address, connected, has its handshake answered within this many
     * seconds where that is past connect_timeout: a caller that connects in short slices
     * (to look at its own end) is not queued again behind a burst of joins at each. */
    double answer_within;
} ddp_store_client_options_t;

#define DDP_STORE_CLIENT_OPTIONS_DEFAULT                                                          \
    ((ddp_store_client_options_t){300, 300, DDP_CODEC_LIMITS_DEFAULT, NULL, NULL, 5, false, NULL, \
                                  NULL, 0})

/* Connects to host:port, retrying with exponential backoff until connect_timeout, then
 * VALIDATE and PING (generation 2, torch 2.2 and later). A server that resets VALIDATE
 * (generation 1: torch 1.13 and 2.0) is spoken to in generation 1 instead, where the
 * operations it lacks (PING aside, answered by GETNUMKEYS) fail with DDP_EPROTO and a
 * WAIT is polled with CHECK (there is no CANCEL_WAIT to end one that timed out). The
 * handshake's answer is due by connect_timeout too. A name with several addresses has each
 * tried in turn, connection and handshake, for at most 5 s (10 s shared among them where
 * they are more than two, a second each at least), so one that stays silent does not hide
 * the next. A server that answers, but not as a
 * TCPStore, is DDP_EPROTO at once (no retry); one that accepts and stays silent is
 * retried, and named so when the time is up (a refused one too, unless refused_ends). On
 * failure *out is untouched and `err` (may be NULL) says why. */
int ddp_store_client_connect(const char *host, int port, const ddp_store_client_options_t *options,
                             ddp_store_client_t **out, ddp_buf_t *err);

/* What the last failed call did wrong, or "". */
const char *ddp_store_client_error(const ddp_store_client_t *client);
/* Its code (0: none). DDP_ETIMEOUT on a connected client: the store took the request, or
 * stopped taking bytes, and did not answer in time. */
int ddp_store_client_failure(const ddp_store_client_t *client);

/* Why a store that accepts connections would not answer, for messages: a launcher's store
 * is served by its loop, which a stop (SIGSTOP, Ctrl-Z) or a hang holds. */
#define DDP_STORE_CLIENT_SILENT_WHY "the launcher serving it is stopped (Ctrl-Z there?) or hung"

int ddp_store_client_set(ddp_store_client_t *client, const char *key, const void *value,
                         size_t len);

/* Waits (up to the client's timeout) for the key, then reads its value into *value. */
int ddp_store_client_get(ddp_store_client_t *client, const char *key, ddp_buf_t *value);

int ddp_store_client_add(ddp_store_client_t *client, const char *key, int64_t delta,
                         int64_t *result);

/* An ADD whose reply is not waited for: it is taken by the next request, or by the next
 * call here. *sent is false (and nothing is sent) while the reply of the last one has not
 * come, so a busy server is never sent more than it answers; DDP_ETIMEOUT when that reply
 * is older than the client's timeout. A heartbeat costs one send, no wait. */
int ddp_store_client_add_async(ddp_store_client_t *client, const char *key, int64_t delta,
                               bool *sent);

/* COMPARE_SET; *current receives the server's answer (see store semantics). */
int ddp_store_client_compare_set(ddp_store_client_t *client, const char *key, const void *expected,
                                 size_t expected_len, const void *desired, size_t desired_len,
                                 ddp_buf_t *current);

int ddp_store_client_check(ddp_store_client_t *client, const char *const *keys, size_t n,
                           bool *ready);

/* Waits until every key exists, at most `timeout` seconds; then DDP_ETIMEOUT (the wait
 * is cancelled on the server with CANCEL_WAIT; an answer to it that has not come within
 * min(client timeout, 30 s) is taken before the next request's, within that one's). */
int ddp_store_client_wait(ddp_store_client_t *client, const char *const *keys, size_t n,
                          double timeout);

/* The same, but it also ends (the wait cancelled on the server) as soon as `wake_fd` is
 * readable: then 1. With wake_fd < 0 it is ddp_store_client_wait. The caller empties
 * wake_fd; it may be readable already when called (then 1 at once, after a round trip). */
int ddp_store_client_wait_or_wake(ddp_store_client_t *client, const char *const *keys, size_t n,
                                  double timeout, int wake_fd);

/* Work done every so often while a WAIT is outstanding, without cancelling it: fn is
 * called once ddp_clock_mono() reaches *due, and moves *due on. A nonzero return ends the
 * wait with that error (the WAIT is left outstanding: the client is then to be closed). */
typedef struct ddp_store_tick_s {
    int (*fn)(void *ctx, double now);
    void *ctx;
    const double *due;
} ddp_store_tick_t;

/* ddp_store_client_wait_or_wake, calling `tick` (may be NULL) when it is due. For a
 * heartbeat on another connection while this one waits (a beat on the same connection
 * would end the WAIT: a PyTorch client sends one request at a time). */
int ddp_store_client_wait_ticking(ddp_store_client_t *client, const char *const *keys, size_t n,
                                  double timeout, int wake_fd, const ddp_store_tick_t *tick);

int ddp_store_client_num_keys(ddp_store_client_t *client, int64_t *count);

int ddp_store_client_delete(ddp_store_client_t *client, const char *key, bool *deleted);

int ddp_store_client_append(ddp_store_client_t *client, const char *key, const void *value,
                            size_t len);

/* values[i] receives the value of keys[i] (an empty value for a missing key). */
int ddp_store_client_multi_get(ddp_store_client_t *client, const char *const *keys, size_t n,
                               ddp_buf_t *values);

int ddp_store_client_multi_set(ddp_store_client_t *client, const char *const *keys,
                               const void *const *values, const size_t *lens, size_t n);

int ddp_store_client_queue_push(ddp_store_client_t *client, const char *key, const void *value,
                                size_t len);

/* Pops without waiting: *got is false when the queue was empty. */
int ddp_store_client_queue_pop(ddp_store_client_t *client, const char *key, ddp_buf_t *value,
                               bool *got);

int ddp_store_client_queue_len(ddp_store_client_t *client, const char *key, int64_t *count);

/* The local address of the connection, as text: the address of this host that the
 * store's host (and so, likely, other workers) can reach. 0 or -errno. */
int ddp_store_client_local_address(const ddp_store_client_t *client, char *host, size_t cap);

/* A round trip with a random nonce. */
int ddp_store_client_ping(ddp_store_client_t *client);

void ddp_store_client_close(ddp_store_client_t *client);

#endif
