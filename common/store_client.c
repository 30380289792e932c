/* The blocking store client (see store_client.h): poll(2) with deadlines on one socket. */
#include "store_client.h"

#include "error.h"
#include "io.h"
#include "parse.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* A request whose reply is still to be taken before the next one's. */
typedef enum {
    PENDING_NONE,
    PENDING_ADD,    /* an ADD sent without waiting (ddp_store_client_add_async) */
    PENDING_CANCEL, /* a CANCEL_WAIT the server had not answered when the wait ended */
} pending_t;

struct ddp_store_client_s {
    int fd;
    ddp_codec_gen_t gen; /* GEN2, or GEN1 once a server reset VALIDATE (torch 1.13, 2.0) */
    ddp_store_client_options_t options;
    char address[300]; /* "host:port", for messages */
    ddp_buf_t out;     /* the request being sent */
    ddp_buf_t in;      /* bytes received and not yet consumed */
    pending_t pending;
    double pending_sent; /* ... when it was sent */
    char error[1024];
    int failure;     /* error's code (0: none) */
    bool connecting; /* its waits end where options.cancelled says so */
};

__attribute__((format(printf, 3, 4))) static int fail(ddp_store_client_t *c, int err,
                                                      const char *fmt, ...)
{
    char what[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    snprintf(c->error, sizeof c->error, "store %s: unable to %s: %s", c->address, what,
             ddp_strerror(err));
    c->failure = err;
    return err;
}

const char *ddp_store_client_error(const ddp_store_client_t *client)
{
    return client->error;
}

int ddp_store_client_failure(const ddp_store_client_t *client)
{
    return client->failure;
}

/* How often a connecting client's waits look at options.cancelled. */
#define CANCEL_LOOK_S 0.2

/* Waits for `events` on the socket until `deadline` (monotonic seconds). It always
 * looks once, so what is known already (a refused connection) is seen even at the
 * deadline. A connecting client `c` (may be NULL) whose caller can cancel is looked at
 * every CANCEL_LOOK_S: -ECANCELED. */
static int wait_fd(const ddp_store_client_t *c, int fd, short events, double deadline)
{
    bool cancellable = c != NULL && c->connecting && c->options.cancelled != NULL;
    for (;;) {
        if (cancellable && c->options.cancelled(c->options.cancel_ctx))
            return -ECANCELED;
        double left = deadline - ddp_clock_mono();
        if (cancellable && left > CANCEL_LOOK_S)
            left = CANCEL_LOOK_S;
        struct pollfd pfd = {.fd = fd, .events = events};
        int ms = left <= 0 ? 0 : left > 86400 ? 86400 * 1000 : (int)(left * 1000) + 1;
        int r = poll(&pfd, 1, ms);
        if (r > 0)
            return 0;
        if (r < 0 && errno != EINTR)
            return -errno;
        if (r == 0 && ddp_clock_mono() >= deadline)
            return DDP_ETIMEOUT;
    }
}

static int send_all(ddp_store_client_t *c, double deadline)
{
    size_t done = 0;
    while (done < c->out.len) {
        ssize_t w = send(c->fd, c->out.data + done, c->out.len - done, MSG_NOSIGNAL);
        if (w > 0) {
            done += (size_t)w;
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
            return ddp_error_from_errno(errno);
        int err = wait_fd(c, c->fd, POLLOUT, deadline);
        if (err)
            return err;
    }
    ddp_buf_clear(&c->out);
    return 0;
}

/* Reads until the reply to `op` is complete; *reply points into c->in. */
static int recv_reply(ddp_store_client_t *c, ddp_codec_op_t op, uint64_t count,
                      ddp_codec_reply_t *reply, double deadline)
{
    for (;;) {
        size_t need = 0;
        int r = ddp_codec_decode_reply(op, count, &c->options.limits, (const uint8_t *)c->in.data,
                                       c->in.len, reply, &need);
        if (r != 0)
            return r < 0 ? r : 0;
        int err = ddp_buf_reserve(&c->in, 65536);
        if (err)
            return err;
        ssize_t got = recv(c->fd, c->in.data + c->in.len, 65536, 0);
        if (got > 0) {
            c->in.len += (size_t)got;
            continue;
        }
        if (got == 0)
            return DDP_ECLOSED;
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            return ddp_error_from_errno(errno);
        if ((err = wait_fd(c, c->fd, POLLIN, deadline)) != 0)
            return err;
    }
}

static void consume(ddp_store_client_t *c, size_t n)
{
    memmove(c->in.data, c->in.data + n, c->in.len - n);
    c->in.len -= n;
}

/* Sends c->out and, when `op` has one, reads its reply. */
static int round_trip(ddp_store_client_t *c, ddp_codec_op_t op, uint64_t count,
                      ddp_codec_reply_t *reply, double deadline)
{
    int err = send_all(c, deadline);
    if (err == 0 && ddp_codec_op_has_reply(op))
        err = recv_reply(c, op, count, reply, deadline);
    return err;
}

static double op_deadline(const ddp_store_client_t *c)
{
    return ddp_clock_mono() + c->options.timeout;
}

/* The answer to a CANCEL_WAIT: WAIT_CANCELED, after a STOP_WAITING when the keys came
 * before the cancel (then *came). */
static int recv_cancel(ddp_store_client_t *c, double deadline, bool *came)
{
    ddp_codec_reply_t reply;
    for (;;) {
        int err = recv_reply(c, DDP_CODEC_CANCEL_WAIT, 0, &reply, deadline);
        if (err)
            return err;
        uint8_t byte = reply.byte;
        consume(c, reply.size);
        if (byte == DDP_CODEC_WAIT_CANCELED)
            return 0;
        if (byte != DDP_CODEC_STOP_WAITING || *came)
            return DDP_EPROTO;
        *came = true;
    }
}

/* Takes the reply of the pending request (an ADD sent without waiting, a CANCEL_WAIT
 * answered late), if one is due, reading until `deadline` (now: only what has come). */
static int take_pending(ddp_store_client_t *c, double deadline)
{
    ddp_codec_reply_t reply;
    bool came = false;
    int err = 0;
    if (c->pending == PENDING_CANCEL) {
        err = recv_cancel(c, deadline, &came);
    } else if (c->pending == PENDING_ADD) {
        err = recv_reply(c, DDP_CODEC_ADD, 0, &reply, deadline);
        if (err == 0)
            consume(c, reply.size);
    }
    if (err == 0)
        c->pending = PENDING_NONE;
    return err;
}

/* A request begins: the reply of a pending request is taken first, so replies never mix. */
static int begin(ddp_store_client_t *c, ddp_codec_op_t op)
{
    c->error[0] = '\0';
    c->failure = 0;
    ddp_buf_clear(&c->out);
    int err = take_pending(c, op_deadline(c));
    return err ? err : ddp_codec_put_op(&c->out, c->gen, op);
}

static int put_key(ddp_store_client_t *c, const char *key)
{
    return ddp_codec_put_bytes(&c->out, key, strlen(key));
}

/* The request `op` on `key`, with `value` (len bytes) when it is not NULL, and its
 * reply in *reply (to consume) when `op` has one. A failure names the op and the key. */
static int keyed(ddp_store_client_t *c, ddp_codec_op_t op, const char *key, const void *value,
                 size_t len, ddp_codec_reply_t *reply)
{
    int err = begin(c, op);
    if (err == 0)
        err = put_key(c, key);
    if (err == 0 && value != NULL)
        err = ddp_codec_put_bytes(&c->out, value, len);
    if (err == 0)
        err = round_trip(c, op, 0, reply, op_deadline(c));
    return err ? fail(c, err, "%s '%s'", ddp_codec_op_name(op), key) : 0;
}

/* A non-blocking connection to one address, finished by `deadline`. */
static int connect_one(const struct addrinfo *ai, double deadline, int *out)
{
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -errno;
    int err = 0;
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
        if (errno != EINPROGRESS) {
            err = -errno;
        } else if ((err = wait_fd(NULL, fd, POLLOUT, deadline)) == 0) {
            int so = 0;
            socklen_t len = sizeof so;
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &so, &len);
            err = -so;
        }
    }
    if (err) {
        close(fd);
        return err;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    *out = fd;
    return 0;
}

/* Generation 2 opens with VALIDATE and a PING. A generation 1 server (torch 1.13 and
 * 2.0) takes VALIDATE for a SET with an absurd key length and resets the connection:
 * the caller then connects again and speaks generation 1, whose first request
 * (GETNUMKEYS, which changes nothing) shows the server answers. */
static int handshake(ddp_store_client_t *c, double deadline)
{
    int err = 0;
    if (c->gen == DDP_CODEC_GEN2) {
        err = ddp_codec_put_op(&c->out, DDP_CODEC_GEN2, DDP_CODEC_VALIDATE);
        if (err == 0)
            err = ddp_codec_put_u32(&c->out, DDP_CODEC_MAGIC);
        if (err == 0)
            err = send_all(c, deadline);
    }
    if (err)
        return err;
    /* The answer is due by the connection's deadline, not an operation's: a server that
     * accepts and stays silent must not hold the caller past its connect timeout. */
    double timeout = c->options.timeout, left = deadline - ddp_clock_mono();
    if (left < timeout)
        c->options.timeout = left > 0.001 ? left : 0.001;
    err = ddp_store_client_ping(c);
    c->options.timeout = timeout;
    return err;
}

/* Whether a failed generation 2 handshake looks like a generation 1 server's answer. */
static bool reset_by_gen1(int err)
{
    return err == DDP_ECLOSED || err == -ECONNRESET || err == -EPIPE;
}

/* Tells options.on_slow, once, that connecting has failed for `waited` seconds. */
static bool say_slow(const ddp_store_client_t *c, double waited, const char *why)
{
    char what[1000];
    if (c->options.on_slow == NULL)
        return false;
    snprintf(what, sizeof what,
             "still unable to connect to the store at %s after %.0f s (%s); trying until %g s "
             "have passed",
             c->address, waited, why, c->options.connect_timeout);
    c->options.on_slow(c->options.slow_ctx, what);
    return true;
}

/* Each address of a name that has several gets at most this long to connect and answer
 * the handshake before the next is tried (the list is tried again after a pause): a first
 * address that accepts and stays silent, or drops the SYN, must not use the whole
 * deadline. A name with one address has the whole deadline (a loaded server answers late);
 * one with many shares ADDRESSES_SLICE among them (a second each at least), so that a long
 * answer of the resolver does not put the last address out of reach. */
#define ADDRESS_SLICE   5.0
#define ADDRESSES_SLICE 10.0

/* What connecting to each address of a name came to, the worst kept. */
typedef struct {
    int other;        /* the last failure other than a refusal, 0 if none */
    bool silent;      /* an address accepted and did not answer the handshake in its slice */
    bool not_a_store; /* an address answered, but not as a TCPStore */
} tried_t;

/* A connection to the address `ai` and the store's handshake on it (c->fd), by
 * `deadline`: a generation 1 server's reset of the generation 2 handshake is taken at once
 * and the address connected again speaking generation 1. A name's sole address has its
 * handshake answered within options.answer_within where that is past `deadline`: a store busy with
 * a burst of joins answers a connection late, and one given up at a short connect_timeout (a
 * caller's slice) is queued again behind the burst, for ever where the burst is a thousand nodes.
 */
static int connect_address(ddp_store_client_t *c, const struct addrinfo *ai, double deadline,
                           bool sole, tried_t *tried)
{
    c->gen = DDP_CODEC_GEN2;
    for (;;) {
        int err = connect_one(ai, deadline, &c->fd);
        if (err)
            return err;
        double answer_by = deadline, waited = ddp_clock_mono() + c->options.answer_within;
        if (sole && waited > answer_by)
            answer_by = waited;
        if ((err = handshake(c, answer_by)) == 0)
            return 0;
        close(c->fd);
        c->fd = -1;
        ddp_buf_clear(&c->in);
        ddp_buf_clear(&c->out);
        c->pending = PENDING_NONE;
        if (c->gen == DDP_CODEC_GEN2 && reset_by_gen1(err)) {
            c->gen = DDP_CODEC_GEN1; /* again at once, not after a pause: the server is there */
            continue;
        }
        c->gen = DDP_CODEC_GEN2;
        if (err == -ECANCELED)
            return err;
        tried->silent = tried->silent || err == DDP_ETIMEOUT;
        tried->not_a_store = tried->not_a_store || err == DDP_EPROTO;
        return err;
    }
}

/* A connection to any address of host:port (c->fd), handshake done, by `deadline`: 0, or
 * DDP_EPROTO where an address answered but not as a TCPStore, DDP_ETIMEOUT (and
 * *silent) where one accepted and stayed silent, else the last failure other than a
 * refusal, -ECONNREFUSED where every address refused (DDP_EPARSE with *gai for a name
 * that cannot be looked up). */
static int connect_any(ddp_store_client_t *c, const char *host, const char *port, double deadline,
                       int *gai, bool *silent)
{
    struct addrinfo hints = {0}, *addrs = NULL;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    *gai = getaddrinfo(host, port, &hints, &addrs);
    if (*gai != 0) /* a name that does not resolve may yet (DNS not ready): retried */
        return *gai == EAI_NONAME || *gai == EAI_AGAIN ? -EHOSTUNREACH : DDP_EPARSE;
    int n = 0;
    for (struct addrinfo *ai = addrs; ai != NULL; ai = ai->ai_next)
        n++;
    double slice = ADDRESSES_SLICE / n < 1 ? 1 : ADDRESSES_SLICE / n;
    slice = slice > ADDRESS_SLICE ? ADDRESS_SLICE : slice;
    tried_t tried = {0};
    int err = -ECONNREFUSED;
    for (struct addrinfo *ai = addrs; ai != NULL; ai = ai->ai_next) {
        double by = n > 1 ? ddp_clock_mono() + slice : deadline;
        if ((err = connect_address(c, ai, by < deadline ? by : deadline, n == 1, &tried)) == 0)
            break;
        if (err == -ECANCELED)
            break;
        if (err != -ECONNREFUSED)
            tried.other = err;
    }
    freeaddrinfo(addrs);
    if (err == -ECANCELED)
        return err;
    *silent = err != 0 && tried.silent;
    if (err == 0)
        return 0;
    if (tried.not_a_store)
        return DDP_EPROTO;
    return tried.silent ? DDP_ETIMEOUT : tried.other != 0 ? tried.other : err;
}

/* A client that never connected, given up: `err` returned. */
static int abandon(ddp_store_client_t *c, int err)
{
    if (c->fd >= 0)
        close(c->fd);
    ddp_buf_free(&c->out);
    ddp_buf_free(&c->in);
    free(c);
    return err;
}

/* Exponential backoff with jitter, so many clients do not retry in step; never past
 * `deadline` (one last attempt there). */
static void back_off(double *delay, double now, double deadline)
{
    unsigned jitter = 0;
    (void)getrandom(&jitter, sizeof jitter, GRND_NONBLOCK);
    double pause = *delay * (0.5 + (jitter % 1000) / 1000.0);
    if (pause > deadline - now)
        pause = deadline - now;
    struct timespec ts = ddp_clock_timespec(pause);
    nanosleep(&ts, NULL);
    *delay = *delay * 2 > 1.0 ? 1.0 : *delay * 2;
}

int ddp_store_client_connect(const char *host, int port, const ddp_store_client_options_t *options,
                             ddp_store_client_t **out, ddp_buf_t *errbuf)
{
    ddp_store_client_t *c = calloc(1, sizeof *c);
    char port_text[16];
    double start = ddp_clock_mono(), delay = 0.01;
    if (c == NULL)
        return -ENOMEM;
    c->fd = -1;
    c->gen = DDP_CODEC_GEN2;
    c->options = options ? *options : DDP_STORE_CLIENT_OPTIONS_DEFAULT;
    ddp_host_port_text(c->address, sizeof c->address, host, port);
    snprintf(port_text, sizeof port_text, "%d", port);
    double deadline = start + c->options.connect_timeout;
    int gai = 0;
    bool said_slow = false, accepted_silent = false;
    for (int attempt = 1;; attempt++) {
        bool silent = false;
        c->connecting = true;
        int err = connect_any(c, host, port_text, deadline, &gai, &silent);
        c->connecting = false;
        if (err == 0) {
            *out = c;
            return 0;
        }
        if (err == -ECANCELED) {
            if (errbuf != NULL)
                ddp_buf_printf(errbuf, "connecting to the store at %s: given up (cancelled)",
                               c->address);
            return abandon(c, err);
        }
        if (err == DDP_EPROTO) { /* something answered, not as a TCPStore: retries cannot help */
            if (errbuf != NULL)
                ddp_buf_printf(errbuf,
                               "%s answered, but not as a TCPStore (another program holds that "
                               "port?)",
                               c->address);
            return abandon(c, DDP_EPROTO);
        }
        accepted_silent = accepted_silent || silent;
        if (err == -ECONNREFUSED && c->options.refused_ends) {
            if (errbuf != NULL)
                ddp_buf_printf(errbuf, "the store at %s refuses connections", c->address);
            return abandon(c, err);
        }
        double now = ddp_clock_mono();
        char why[300];
        if (gai != 0) /* said as the name's, not "No route to host" */
            snprintf(why, sizeof why, "the name %.200s does not resolve: %s", host,
                     gai_strerror(gai));
        else
            snprintf(why, sizeof why, "%s", ddp_strerror(err));
        if (!said_slow && now - start >= c->options.slow_after && now < deadline)
            said_slow = say_slow(c, now - start, why);
        if (err == DDP_EPARSE || now >= deadline) {
            if (errbuf != NULL && accepted_silent)
                ddp_buf_printf(errbuf,
                               "%s accepts connections but does not answer as a "
                               "TCPStore: " DDP_STORE_CLIENT_SILENT_WHY
                               ", or another program holds that port",
                               c->address);
            else if (errbuf != NULL)
                ddp_buf_printf(errbuf,
                               "unable to connect to the store at %s within %g s (%d attempts): "
                               "%s",
                               c->address, c->options.connect_timeout, attempt, why);
            return abandon(c, err == DDP_EPARSE ? err : DDP_ETIMEOUT);
        }
        back_off(&delay, now, deadline);
    }
}

int ddp_store_client_local_address(const ddp_store_client_t *client, char *host, size_t cap)
{
    struct sockaddr_storage addr;
    socklen_t len = sizeof addr;
    if (getsockname(client->fd, (struct sockaddr *)&addr, &len) != 0)
        return -errno;
    int gai =
        getnameinfo((struct sockaddr *)&addr, len, host, (socklen_t)cap, NULL, 0, NI_NUMERICHOST);
    return gai == 0 ? 0 : -EINVAL;
}

void ddp_store_client_close(ddp_store_client_t *client)
{
    if (client == NULL)
        return;
    if (client->fd >= 0)
        close(client->fd);
    ddp_buf_free(&client->out);
    ddp_buf_free(&client->in);
    free(client);
}

int ddp_store_client_ping(ddp_store_client_t *c)
{
    uint32_t nonce = 0x5eed;
    ddp_codec_reply_t reply;
    if (c->gen == DDP_CODEC_GEN1) {
        int64_t keys; /* generation 1 has no PING: a request that changes nothing */
        return ddp_store_client_num_keys(c, &keys);
    }
    (void)getrandom(&nonce, sizeof nonce, GRND_NONBLOCK);
    int err = begin(c, DDP_CODEC_PING);
    if (err == 0)
        err = ddp_codec_put_u32(&c->out, nonce);
    if (err == 0)
        err = round_trip(c, DDP_CODEC_PING, 0, &reply, op_deadline(c));
    if (err == 0 && reply.word != nonce)
        err = DDP_EPROTO;
    if (err)
        return fail(c, err, "PING");
    consume(c, reply.size);
    return 0;
}

int ddp_store_client_set(ddp_store_client_t *c, const char *key, const void *value, size_t len)
{
    return keyed(c, DDP_CODEC_SET, key, value ? value : "", len, NULL);
}

int ddp_store_client_get(ddp_store_client_t *c, const char *key, ddp_buf_t *value)
{
    ddp_codec_reply_t reply;
    int err = ddp_store_client_wait(c, &key, 1, c->options.timeout);
    if (err == 0)
        err = keyed(c, DDP_CODEC_GET, key, NULL, 0, &reply);
    if (err)
        return err; /* the message names the key already */
    ddp_buf_clear(value);
    err = ddp_buf_append(value, reply.value, reply.value_len);
    consume(c, reply.size);
    return err ? fail(c, err, "GET '%s'", key) : 0;
}

int ddp_store_client_add(ddp_store_client_t *c, const char *key, int64_t delta, int64_t *result)
{
    ddp_codec_reply_t reply;
    int err = begin(c, DDP_CODEC_ADD);
    if (err == 0)
        err = put_key(c, key);
    if (err == 0)
        err = ddp_codec_put_i64(&c->out, delta);
    if (err == 0)
        err = round_trip(c, DDP_CODEC_ADD, 0, &reply, op_deadline(c));
    if (err)
        return fail(c, err, "ADD to '%s'", key);
    *result = reply.number;
    consume(c, reply.size);
    return 0;
}

int ddp_store_client_add_async(ddp_store_client_t *c, const char *key, int64_t delta, bool *sent)
{
    double now = ddp_clock_mono();
    *sent = false;
    int err = take_pending(c, now);
    if (err == DDP_ETIMEOUT && now - c->pending_sent < c->options.timeout)
        return 0; /* the last one is not answered yet: none now */
    if (err == 0)
        err = begin(c, DDP_CODEC_ADD);
    if (err == 0)
        err = put_key(c, key);
    if (err == 0)
        err = ddp_codec_put_i64(&c->out, delta);
    if (err == 0)
        err = send_all(c, now + c->options.timeout);
    if (err)
        return fail(c, err, "ADD to '%s'", key);
    c->pending = PENDING_ADD;
    c->pending_sent = now;
    *sent = true;
    return 0;
}

int ddp_store_client_compare_set(ddp_store_client_t *c, const char *key, const void *expected,
                                 size_t expected_len, const void *desired, size_t desired_len,
                                 ddp_buf_t *current)
{
    ddp_codec_reply_t reply;
    int err = begin(c, DDP_CODEC_COMPARE_SET);
    if (err == 0)
        err = put_key(c, key);
    if (err == 0)
        err = ddp_codec_put_bytes(&c->out, expected, expected_len);
    if (err == 0)
        err = ddp_codec_put_bytes(&c->out, desired, desired_len);
    if (err == 0)
        err = round_trip(c, DDP_CODEC_COMPARE_SET, 0, &reply, op_deadline(c));
    if (err == 0) {
        ddp_buf_clear(current);
        err = ddp_buf_append(current, reply.value, reply.value_len);
        consume(c, reply.size);
    }
    return err ? fail(c, err, "COMPARE_SET '%s'", key) : 0;
}

static int put_keys(ddp_store_client_t *c, const char *const *keys, size_t n)
{
    int err = ddp_codec_put_u64(&c->out, (uint64_t)n);
    for (size_t i = 0; i < n && err == 0; i++)
        err = put_key(c, keys[i]);
    return err;
}

int ddp_store_client_check(ddp_store_client_t *c, const char *const *keys, size_t n, bool *ready)
{
    ddp_codec_reply_t reply;
    int err = begin(c, DDP_CODEC_CHECK);
    if (err == 0)
        err = put_keys(c, keys, n);
    if (err == 0)
        err = round_trip(c, DDP_CODEC_CHECK, 0, &reply, op_deadline(c));
    if (err)
        return fail(c, err, "CHECK %zu key(s) from '%s'", n, n ? keys[0] : "");
    *ready = reply.byte == DDP_CODEC_READY;
    consume(c, reply.size);
    return 0;
}

/* Waits until the socket has something to read (0), `wake_fd` is readable (1), or the
 * deadline passes (DDP_ETIMEOUT). */
static int wait_readable_or_wake(ddp_store_client_t *c, int wake_fd, double deadline)
{
    if (c->in.len > 0)
        return 0; /* the reply has begun to arrive already */
    for (;;) {
        double left = deadline - ddp_clock_mono();
        struct pollfd pfd[2] = {{.fd = c->fd, .events = POLLIN}, {.fd = wake_fd, .events = POLLIN}};
        int ms = left <= 0 ? 0 : left > 86400 ? 86400 * 1000 : (int)(left * 1000) + 1;
        int r = poll(pfd, 2, ms);
        if (r < 0 && errno != EINTR)
            return -errno;
        if (r > 0 && pfd[0].revents != 0)
            return 0;
        if (r > 0 && pfd[1].revents != 0)
            return 1;
        if (r == 0 && ddp_clock_mono() >= deadline)
            return DDP_ETIMEOUT;
    }
}

int ddp_store_client_wait(ddp_store_client_t *c, const char *const *keys, size_t n, double timeout)
{
    return ddp_store_client_wait_or_wake(c, keys, n, timeout, -1);
}

/* The tick's work when it is due (`tick` NULL: none). */
static int tick_if_due(const ddp_store_tick_t *tick)
{
    double now = ddp_clock_mono();
    return tick != NULL && now >= *tick->due ? tick->fn(tick->ctx, now) : 0;
}

/* Until `deadline` or the tick's next time, whichever is first. */
static double tick_until(const ddp_store_tick_t *tick, double deadline)
{
    return tick != NULL && *tick->due < deadline ? *tick->due : deadline;
}

/* Generation 1 has no CANCEL_WAIT: a WAIT that timed out would be answered later, in
 * the middle of the next reply. So it is CHECK, polled (1 ms apart at first, 100 ms at
 * most), sleeping on `wake_fd` between (-1: none). 0, 1 (woken) or an error. */
static int wait_by_checks(ddp_store_client_t *c, const char *const *keys, size_t n, double timeout,
                          int wake_fd, const ddp_store_tick_t *tick)
{
    double deadline = ddp_clock_mono() + timeout, pause = 0.001;
    for (;;) {
        bool ready;
        int err = tick_if_due(tick);
        if (err == 0)
            err = ddp_store_client_check(c, keys, n, &ready);
        if (err || ready)
            return err;
        double left = deadline - ddp_clock_mono();
        if (left <= 0)
            return fail(c, DDP_ETIMEOUT, "WAIT %g s for '%s'%s", timeout, n ? keys[0] : "",
                        n > 1 ? " and others" : "");
        struct pollfd pfd = {.fd = wake_fd, .events = POLLIN};
        double nap = pause < left ? pause : left;
        if (poll(&pfd, wake_fd >= 0 ? 1 : 0, (int)(nap * 1000) + 1) > 0)
            return 1;
        pause = pause * 2 < 0.1 ? pause * 2 : 0.1;
    }
}

/* The WAIT sent: its answer has come (0), a wake (1), the deadline (DDP_ETIMEOUT) or an
 * error, ticking meanwhile; a failed tick's error goes to *tick_err (and is returned). */
static int await_answer(ddp_store_client_t *c, int wake_fd, double deadline,
                        const ddp_store_tick_t *tick, int *tick_err)
{
    for (;;) {
        int err = wait_readable_or_wake(c, wake_fd, tick_until(tick, deadline));
        if (err != DDP_ETIMEOUT || ddp_clock_mono() >= deadline)
            return err;
        if ((*tick_err = tick_if_due(tick)) != 0)
            return *tick_err;
    }
}

/* Gives up a WAIT on the server too. It may have answered (the keys came) just before
 * the cancel: then *came, the keys are there after all. A server too busy to answer
 * within min(timeout, 30 s) leaves the answer pending, taken before the next request's
 * (a WAIT after it must not take it for its own). `woken` (a wake ended the WAIT: its owner
 * stops, a signal or the round's end): the cancel is sent within CANCEL_SEND_S and its
 * answer left pending at once (a silent server held a signal up to 30 s). */
#define CANCEL_SEND_S 0.5
static int cancel_wait(ddp_store_client_t *c, bool woken, bool *came)
{
    double now = ddp_clock_mono();
    double deadline = now + (c->options.timeout < 30 ? c->options.timeout : 30);
    if (woken) /* (its owner stops: the answer is not waited for, nor a full buffer long) */
        deadline = now + CANCEL_SEND_S;
    int err = begin(c, DDP_CODEC_CANCEL_WAIT);
    if (err == 0)
        err = send_all(c, deadline);
    if (err)
        return err;
    c->pending = PENDING_CANCEL;
    c->pending_sent = now;
    if (woken)
        return 0; /* taken before the next request's, if any */
    if ((err = recv_cancel(c, deadline, came)) == 0)
        c->pending = PENDING_NONE;
    return err == DDP_ETIMEOUT ? 0 : err;
}

int ddp_store_client_wait_or_wake(ddp_store_client_t *c, const char *const *keys, size_t n,
                                  double timeout, int wake_fd)
{
    return ddp_store_client_wait_ticking(c, keys, n, timeout, wake_fd, NULL);
}

int ddp_store_client_wait_ticking(ddp_store_client_t *c, const char *const *keys, size_t n,
                                  double timeout, int wake_fd, const ddp_store_tick_t *tick)
{
    ddp_codec_reply_t reply;
    double deadline = ddp_clock_mono() + timeout;
    if (c->gen == DDP_CODEC_GEN1)
        return wait_by_checks(c, keys, n, timeout, wake_fd, tick);
    int err = begin(c, DDP_CODEC_WAIT), tick_err = 0;
    bool woken = false;
    if (err == 0)
        err = put_keys(c, keys, n);
    if (err == 0 && wake_fd < 0 && tick == NULL) {
        err = round_trip(c, DDP_CODEC_WAIT, 0, &reply, deadline);
    } else if (err == 0 && (err = send_all(c, deadline)) == 0) {
        err = await_answer(c, wake_fd, deadline, tick, &tick_err);
        woken = err == 1;
        if (err == 0)
            err = recv_reply(c, DDP_CODEC_WAIT, 0, &reply, deadline);
        else if (woken)
            err = DDP_ETIMEOUT; /* cancelled below as a timeout is */
        else if (tick_err)
            return tick_err; /* its owner says why */
    }
    if (err == 0) {
        uint8_t byte = reply.byte;
        consume(c, reply.size);
        if (byte == DDP_CODEC_STOP_WAITING)
            return 0;
        err = DDP_EPROTO;
    }
    if (err != DDP_ETIMEOUT)
        return fail(c, err, "WAIT for '%s'", n ? keys[0] : "");
    bool came = false;
    if ((err = cancel_wait(c, woken, &came)) != 0)
        return fail(c, err, "cancel the WAIT for '%s'", n ? keys[0] : "");
    if (came)
        return 0;
    if (woken)
        return 1;
    return fail(c, DDP_ETIMEOUT, "WAIT %g s for '%s'%s", timeout, n ? keys[0] : "",
                n > 1 ? " and others" : "");
}

int ddp_store_client_num_keys(ddp_store_client_t *c, int64_t *count)
{
    ddp_codec_reply_t reply;
    int err = begin(c, DDP_CODEC_GETNUMKEYS);
    if (err == 0)
        err = round_trip(c, DDP_CODEC_GETNUMKEYS, 0, &reply, op_deadline(c));
    if (err)
        return fail(c, err, "GETNUMKEYS");
    *count = reply.number;
    consume(c, reply.size);
    return 0;
}

int ddp_store_client_delete(ddp_store_client_t *c, const char *key, bool *deleted)
{
    ddp_codec_reply_t reply;
    int err = keyed(c, DDP_CODEC_DELETE_KEY, key, NULL, 0, &reply);
    if (err)
        return err;
    *deleted = reply.number > 0;
    consume(c, reply.size);
    return 0;
}

int ddp_store_client_append(ddp_store_client_t *c, const char *key, const void *value, size_t len)
{
    return keyed(c, DDP_CODEC_APPEND, key, value ? value : "", len, NULL);
}

int ddp_store_client_multi_get(ddp_store_client_t *c, const char *const *keys, size_t n,
                               ddp_buf_t *values)
{
    ddp_codec_reply_t reply;
    int err = begin(c, DDP_CODEC_MULTI_GET);
    if (err == 0)
        err = put_keys(c, keys, n);
    if (err == 0)
        err = round_trip(c, DDP_CODEC_MULTI_GET, n, &reply, op_deadline(c));
    if (err)
        return fail(c, err, "MULTI_GET %zu key(s) from '%s'", n, n ? keys[0] : "");
    const uint8_t *p = reply.items;
    for (size_t i = 0; i < n && err == 0; i++) {
        uint64_t len;
        memcpy(&len, p, sizeof len);
        ddp_buf_clear(&values[i]);
        err = ddp_buf_append(&values[i], p + 8, (size_t)len);
        p += 8 + len;
    }
    consume(c, reply.size);
    return err ? fail(c, err, "MULTI_GET") : 0;
}

int ddp_store_client_multi_set(ddp_store_client_t *c, const char *const *keys,
                               const void *const *values, const size_t *lens, size_t n)
{
    int err = begin(c, DDP_CODEC_MULTI_SET);
    if (err == 0)
        err = ddp_codec_put_u64(&c->out, (uint64_t)n);
    for (size_t i = 0; i < n && err == 0; i++) {
        err = put_key(c, keys[i]);
        if (err == 0)
            err = ddp_codec_put_bytes(&c->out, values[i], lens[i]);
    }
    if (err == 0)
        err = round_trip(c, DDP_CODEC_MULTI_SET, 0, NULL, op_deadline(c));
    return err ? fail(c, err, "MULTI_SET %zu key(s) from '%s'", n, n ? keys[0] : "") : 0;
}

int ddp_store_client_queue_push(ddp_store_client_t *c, const char *key, const void *value,
                                size_t len)
{
    return keyed(c, DDP_CODEC_QUEUE_PUSH, key, value ? value : "", len, NULL);
}

int ddp_store_client_queue_pop(ddp_store_client_t *c, const char *key, ddp_buf_t *value, bool *got)
{
    ddp_codec_reply_t reply;
    int err = keyed(c, DDP_CODEC_QUEUE_POP, key, NULL, 0, &reply);
    if (err)
        return err;
    *got = reply.number > 0;
    ddp_buf_clear(value);
    if (*got)
        err = ddp_buf_append(value, reply.value, reply.value_len);
    consume(c, reply.size);
    return err ? fail(c, err, "QUEUE_POP from '%s'", key) : 0;
}

int ddp_store_client_queue_len(ddp_store_client_t *c, const char *key, int64_t *count)
{
    ddp_codec_reply_t reply;
    int err = keyed(c, DDP_CODEC_QUEUE_LEN, key, NULL, 0, &reply);
    if (err)
        return err;
    *count = reply.number;
    consume(c, reply.size);
    return 0;
}
