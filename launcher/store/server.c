/* The store's TCP server on the loop (see store/server.h).
 *
 * A connection reads into its own buffer; process_input() decodes and answers every
 * complete request there, collecting the replies into one write. When a WAIT is
 * answered later (a write on another connection completed its keys), the store's
 * callback only queues the reply and puts the connection on the resume list, which is
 * flushed once the request being handled is done: nothing touches a connection (a
 * failed write closes it, which changes the store) from inside the store. */
#include "store/server.h"

#include "error.h"
#include "io.h"
#include "netaddr.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_LISTENERS 8
/* Stop reading from a client whose replies pile up unread beyond this. */
#define WRITE_HIGH_WATER ((size_t)16 << 20)
/* ... or whose replies of its own (copies, not stored values) reach this. */
#define OWNED_HIGH_WATER ((size_t)4 << 20)
#define READ_CHUNK       ((size_t)64 << 10)
/* A GET value at least this large is written from the store itself, not copied. */
#define ZERO_COPY_MIN ((size_t)64 << 10)
/* The bytes of values one MULTI_GET reply copies; the rest go by reference. */
#define REPLY_COPY_MAX ((size_t)256 << 10)
/* Connections accepted in one loop turn. libuv (1.44) accepts in a loop until the backlog
 * is empty: clients that connect as fast as it accepts (a thousand launchers, their
 * connections given up and made again, or a flood) would hold the loop there, and no
 * request of a connection already open would be read. The connection past the budget
 * waits in libuv (its listener not watched) for the turn's check. */
#define ACCEPTS_PER_TURN 64
#define LISTEN_BACKLOG   65535

typedef struct conn_s conn_t;

/* A stored value written after the first `at` bytes of a connection's replies. */
typedef struct {
    size_t at;
    ddp_store_value_t *value; /* referenced */
} out_ref_t;

struct ddp_store_server_s {
    uv_loop_t *loop;
    const ddp_log_t *log;
    ddp_codec_limits_t limits;
    ddp_store_t *store;
    uv_tcp_t listeners[MAX_LISTENERS]; /* nslots used: those not closing listen */
    int nslots, nlisteners;
    int port;
    conn_t *conns; /* every open connection */
    size_t nconns;
    conn_t *resume; /* connections whose WAIT was answered: to flush after this request */
    bool draining;
    bool closing;
    size_t open_handles; /* handles not yet closed; the server is freed at 0 */
    bool accept_warned;
    uv_idle_t busy_poll;   /* active while polling for the next request */
    uint64_t busy_poll_ns; /* 0: no busy polling (and the handle is not initialised) */
    uint64_t poll_until;   /* uv_hrtime() at which polling stops without a new request */
    uint64_t polls;        /* loop turns spent polling, ever */
    uint64_t requests;     /* requests served, ever */
    uint64_t keys;         /* keys named by them, ever */
    size_t max_conns;      /* 0: no cap */
    unsigned long long nofile;
    uint64_t refused;                      /* connections refused at the cap, ever */
    const ddp_store_server_watch_t *watch; /* writes under a prefix, or NULL */
    size_t watch_prefix_len;
    bool in_request;            /* handling a request: its serve() drains the resume list after */
    conn_t *waits, *waits_tail; /* the connections with a WAIT pending, oldest first */
    uv_idle_t deferred;         /* drains the resume list on the next loop turn */
    uv_check_t accept_turn;     /* active while a turn has accepted: the budget anew */
    int accepts_left;           /* of ACCEPTS_PER_TURN, this turn */
    bool held[MAX_LISTENERS];   /* a listener's connection past the budget, for the check */
};

struct conn_s {
    uv_tcp_t tcp;
    ddp_store_server_t *server;
    conn_t *prev, *next;
    conn_t *resume_next;
    bool on_resume_list;
    char peer[64];
    ddp_codec_gen_t gen;
    ddp_codec_decoder_t decoder;
    ddp_buf_t in; /* bytes received and not yet consumed, from in_off */
    size_t in_off;
    ddp_buf_t out;   /* replies not yet handed to libuv */
    out_ref_t *refs; /* stored values among them */
    size_t nrefs, cap_refs;
    size_t ref_bytes; /* their lengths, summed */
    ddp_store_waiter_t waiter;
    bool waiting;
    /* A pending WAIT's place among the server's (oldest first), since when (monotonic),
     * and the first of its keys that did not exist then, shown (show_key). */
    conn_t *wait_prev, *wait_next;
    double wait_since;
    char wait_key[DDP_STORE_WAIT_KEY_MAX];
    struct sockaddr_storage peer_addr;
    bool reading;
    bool closing;
    size_t write_queued; /* bytes handed to libuv and not yet written */
    size_t owned_queued; /* of those, the connection's own (copies, bookkeeping) */
    void *tag;           /* the watcher's, once this client wrote under its prefix */
};

typedef struct {
    uv_write_t req;
    conn_t *conn;
    char *data; /* replies, owned */
    size_t len;
    ddp_store_value_t **values; /* stored values written among them (references) */
    size_t nvalues;
    size_t total; /* bytes written: len and the values' */
    size_t owned; /* what counts against OWNED_HIGH_WATER */
} write_req_t;

static void process_input(conn_t *c);
static void serve(conn_t *c);
static void on_connection(uv_stream_t *listener, int status);

static void handle_closed(ddp_store_server_t *s)
{
    if (--s->open_handles == 0 && s->closing) {
        ddp_store_free(s->store);
        free(s);
    }
}

static void on_own_handle_closed(uv_handle_t *handle)
{
    handle_closed(handle->data);
}

/* Each loop turn while busy polling (the loop then polls for I/O without sleeping),
 * until the window that each request extends (in handle) has passed. */
static void on_busy_poll(uv_idle_t *idle)
{
    ddp_store_server_t *s = idle->data;
    if (uv_hrtime() >= s->poll_until) {
        uv_idle_stop(idle);
        return;
    }
    s->polls++;
    sched_yield();
}

static void on_conn_closed(uv_handle_t *handle)
{
    conn_t *c = handle->data;
    ddp_store_server_t *s = c->server;
    ddp_buf_free(&c->in);
    ddp_buf_free(&c->out);
    for (size_t i = 0; i < c->nrefs; i++)
        ddp_store_value_unref(c->refs[i].value);
    free(c->refs);
    free(c);
    handle_closed(s);
}

/* Shows a key in a message: printable bytes as they are, others \xNN, at most `most` of
 * them (within cap). */
static const char *show_key(ddp_store_key_t key, size_t most, char *buf, size_t cap)
{
    size_t n = 0;
    for (size_t i = 0; i < key.len && n + 5 < cap && i < most; i++) {
        uint8_t b = key.data[i];
        n += (size_t)snprintf(buf + n, cap - n, b >= 0x20 && b < 0x7f ? "%c" : "\\x%02x", b);
    }
    buf[n] = '\0';
    return buf;
}

/* The WAIT of `c` begins, awaiting `missing`; or it ends (answered, cancelled, closed). */
static void wait_end(conn_t *c)
{
    ddp_store_server_t *s = c->server;
    if (!c->waiting)
        return;
    c->waiting = false;
    if (c->wait_prev != NULL)
        c->wait_prev->wait_next = c->wait_next;
    else
        s->waits = c->wait_next;
    if (c->wait_next != NULL)
        c->wait_next->wait_prev = c->wait_prev;
    else
        s->waits_tail = c->wait_prev;
    c->wait_prev = c->wait_next = NULL;
}

static void wait_begin(conn_t *c, ddp_store_key_t missing)
{
    ddp_store_server_t *s = c->server;
    wait_end(c); /* (none is pending: a new request cancels it first) */
    show_key(missing, 160, c->wait_key, sizeof c->wait_key);
    c->waiting = true;
    c->wait_since = ddp_clock_mono();
    c->wait_next = NULL;
    c->wait_prev = s->waits_tail;
    if (s->waits_tail != NULL)
        s->waits_tail->wait_next = c;
    else
        s->waits = c;
    s->waits_tail = c;
}

static void remove_from_resume(ddp_store_server_t *s, conn_t *c)
{
    if (!c->on_resume_list)
        return;
    for (conn_t **p = &s->resume; *p != NULL; p = &(*p)->resume_next) {
        if (*p == c) {
            *p = c->resume_next;
            break;
        }
    }
    c->on_resume_list = false;
}

__attribute__((format(printf, 2, 3))) static void conn_close(conn_t *c, const char *fmt, ...)
{
    ddp_store_server_t *s = c->server;
    if (c->closing)
        return;
    if (fmt != NULL) {
        char why[256];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, sizeof why, fmt, ap);
        va_end(ap);
        ddp_log_warn(s->log, "store: closing the connection from %s: %s", c->peer, why);
    }
    c->closing = true;
    if (c->tag != NULL && s->watch != NULL && s->watch->on_close != NULL)
        s->watch->on_close(s->watch->ctx, c->tag);
    ddp_store_cancel(s->store, &c->waiter);
    wait_end(c);
    remove_from_resume(s, c);
    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        s->conns = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    s->nconns--;
    uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
}

/* Writes.
 *
 * A connection's replies are bytes of its own (c->out) with stored values referenced in
 * between (c->refs): a large GET, and a MULTI_GET's values once its copies reach
 * REPLY_COPY_MAX, go out from the store itself. flush() hands both to libuv as one write.
 * What a connection may hold is bounded twice: decoding stops while its own bytes (copies,
 * headers, the references' bookkeeping) reach OWNED_HIGH_WATER or everything queued
 * reaches WRITE_HIGH_WATER, and goes on once the client has read half of it. */

static size_t ref_cost(size_t nrefs)
{
    return nrefs * (sizeof(ddp_store_value_t *) + sizeof(uv_buf_t) + sizeof(out_ref_t));
}

/* Whether `c` holds as many replies as it may before its client reads some. */
static bool over_water(const conn_t *c)
{
    return c->out.len + ref_cost(c->nrefs) + c->owned_queued >= OWNED_HIGH_WATER ||
           c->out.len + c->ref_bytes + c->write_queued >= WRITE_HIGH_WATER;
}

static bool under_low_water(const conn_t *c)
{
    return c->owned_queued < OWNED_HIGH_WATER / 2 && c->write_queued < WRITE_HIGH_WATER / 2;
}

static void write_req_free(write_req_t *w)
{
    for (size_t i = 0; i < w->nvalues; i++)
        ddp_store_value_unref(w->values[i]);
    free(w->values);
    free(w->data);
    free(w);
}

static void on_written(uv_write_t *req, int status)
{
    write_req_t *w = (write_req_t *)req;
    conn_t *c = w->conn;
    c->write_queued -= w->total;
    c->owned_queued -= w->owned;
    write_req_free(w);
    if (c->closing)
        return;
    if (status < 0) {
        conn_close(c, "unable to write a reply: %s", uv_strerror(status));
        return;
    }
    if (!c->reading && under_low_water(c)) {
        /* The client reads its replies again: go on with its requests. */
        serve(c);
    }
}

/* Appends a reference to `value` (borrowed from the store; len > 0) at the end of the
 * replies so far. 0 or -ENOMEM. */
static int put_ref(conn_t *c, ddp_store_value_t *value)
{
    if (c->nrefs == c->cap_refs) {
        size_t cap = c->cap_refs ? 2 * c->cap_refs : 8;
        out_ref_t *grown = realloc(c->refs, cap * sizeof *grown);
        if (grown == NULL)
            return -ENOMEM;
        c->refs = grown;
        c->cap_refs = cap;
    }
    ddp_store_value_ref(value); /* a SET meanwhile must not free it under the write */
    c->refs[c->nrefs++] = (out_ref_t){c->out.len, value};
    c->ref_bytes += value->len;
    return 0;
}

/* The write of everything collected: own bytes and references in order, described in
 * `local` (of `cap` entries) when they fit, else in an array to free. */
static write_req_t *take_replies(conn_t *c, uv_buf_t *local, size_t cap, uv_buf_t **bufs_out,
                                 unsigned *nbufs_out)
{
    write_req_t *w = calloc(1, sizeof *w);
    size_t need = 2 * c->nrefs + 1;
    uv_buf_t *bufs = need <= cap ? local : malloc(need * sizeof *bufs);
    ddp_store_value_t **values = c->nrefs ? malloc(c->nrefs * sizeof *values) : NULL;
    if (w == NULL || bufs == NULL || (c->nrefs && values == NULL)) {
        free(w), free(values);
        if (bufs != local)
            free(bufs);
        return NULL;
    }
    unsigned n = 0;
    size_t at = 0;
    w->conn = c;
    w->len = c->out.len;
    w->data = ddp_buf_steal(&c->out);
    for (size_t i = 0; i < c->nrefs; i++) {
        if (c->refs[i].at > at)
            bufs[n++] = uv_buf_init(w->data + at, (unsigned)(c->refs[i].at - at));
        at = c->refs[i].at;
        values[i] = c->refs[i].value;
        bufs[n++] = uv_buf_init((char *)values[i]->data, (unsigned)values[i]->len);
    }
    if (w->len > at)
        bufs[n++] = uv_buf_init(w->data + at, (unsigned)(w->len - at));
    w->values = values;
    w->nvalues = c->nrefs;
    w->total = w->len + c->ref_bytes;
    w->owned = w->len + ref_cost(c->nrefs);
    c->nrefs = 0;
    c->ref_bytes = 0;
    *bufs_out = bufs;
    *nbufs_out = n;
    return w;
}

/* Writes the replies collected so far. */
static void flush(conn_t *c)
{
    if (c->closing || (c->out.len == 0 && c->nrefs == 0))
        return;
    uv_buf_t local[8], *bufs, *rest;
    unsigned nbufs;
    write_req_t *w = take_replies(c, local, sizeof local / sizeof local[0], &bufs, &nbufs);
    if (w == NULL) {
        conn_close(c, "out of memory for a reply");
        return;
    }
    rest = bufs;
    /* Nothing queued before: write now, and queue only what the socket did not take
     * (libuv's queued writes arm and disarm write interest: a syscall each time). */
    int err = 0;
    if (c->write_queued == 0) {
        int n = uv_try_write((uv_stream_t *)&c->tcp, bufs, nbufs);
        size_t sent = n > 0 ? (size_t)n : 0;
        err = n < 0 && n != UV_EAGAIN ? n : 0;
        while (err == 0 && nbufs > 0 && sent >= rest->len) {
            sent -= rest->len;
            rest++;
            nbufs--;
        }
        if (err == 0 && nbufs > 0) {
            rest->base += sent;
            rest->len -= sent;
        }
        /* The rest is written and counted below; the counts cover the whole request. */
    }
    if (err == 0 && nbufs > 0)
        err = uv_write(&w->req, (uv_stream_t *)&c->tcp, rest, nbufs, on_written);
    if (bufs != local)
        free(bufs); /* libuv keeps its own copy of the array */
    if (err != 0 || nbufs == 0) {
        write_req_free(w); /* failed, or all written at once */
        if (err)
            conn_close(c, "unable to write a reply: %s", uv_strerror(err));
        return;
    }
    c->write_queued += w->total;
    c->owned_queued += w->owned;
}

/* Appends one value to the replies as a u64 length and the bytes: copied while small
 * (`copy_budget`, the bytes this reply may still copy, shrinks by what is copied),
 * referenced otherwise. A missing key is an empty value. */
static int put_value(conn_t *c, ddp_store_value_t *value, size_t *copy_budget)
{
    size_t len = value != NULL ? value->len : 0;
    int err = ddp_codec_put_u64(&c->out, len);
    if (err || len == 0)
        return err;
    if (len < ZERO_COPY_MIN && len <= *copy_budget) {
        *copy_budget -= len;
        return ddp_buf_append(&c->out, value->data, len);
    }
    return put_ref(c, value);
}

/* Requests. */

static void on_wait_ready(ddp_store_waiter_t *waiter)
{
    conn_t *c = (conn_t *)((char *)waiter - offsetof(conn_t, waiter));
    ddp_store_server_t *s = c->server;
    /* Inside a store write: only queue the answer and come back to this connection. */
    if (ddp_codec_put_u8(&c->out, DDP_CODEC_STOP_WAITING) != 0)
        return; /* out of memory: the client times out */
    wait_end(c);
    if (!c->on_resume_list) {
        c->on_resume_list = true;
        c->resume_next = s->resume;
        s->resume = c;
    }
}

static ddp_store_key_t key_of(const ddp_codec_request_t *req)
{
    return (ddp_store_key_t){req->key, req->key_len};
}

/* The keys of a CHECK, WAIT or MULTI_GET, in an array (caller frees). */
static ddp_store_key_t *collect_keys(const ddp_codec_request_t *req)
{
    ddp_store_key_t *keys = malloc((req->count ? req->count : 1) * sizeof *keys);
    ddp_codec_items_t it;
    const uint8_t *key, *value;
    size_t klen, vlen, n = 0;
    if (keys == NULL)
        return NULL;
    ddp_codec_items_init(&it, req);
    while (ddp_codec_items_next(&it, &key, &klen, &value, &vlen))
        keys[n++] = (ddp_store_key_t){key, klen};
    return keys;
}

/* Tells the watcher of a write of `key` by `c`, when the key is under its prefix. */
static void notify_write(conn_t *c, ddp_store_key_t key)
{
    ddp_store_server_t *s = c->server;
    const ddp_store_server_watch_t *w = s->watch;
    if (w == NULL || key.len < s->watch_prefix_len ||
        memcmp(key.data, w->prefix, s->watch_prefix_len) != 0)
        return;
    const uint8_t *value = NULL;
    size_t len = 0;
    (void)ddp_store_get(s->store, key, &value, &len);
    w->on_write(w->ctx, &c->tag, key, value, len);
}

/* CHECK: whether every key exists; WAIT: answered at once when they do, else when the
 * last one comes (the wait registered, awaiting the first missing key). 0 or -errno. */
static int check_or_wait(conn_t *c, const ddp_codec_request_t *req, ddp_buf_t *out)
{
    ddp_store_server_t *s = c->server;
    ddp_store_key_t *keys = collect_keys(req);
    int err = 0;
    if (keys == NULL)
        return -ENOMEM;
    if (req->op == DDP_CODEC_CHECK) {
        bool ready = true;
        for (uint64_t i = 0; i < req->count && ready; i++)
            ready = ddp_store_exists(s->store, keys[i]);
        err = ddp_codec_put_u8(out, ready ? DDP_CODEC_READY : DDP_CODEC_NOT_READY);
    } else {
        int r = ddp_store_wait(s->store, &c->waiter, keys, (size_t)req->count);
        size_t first = 0;
        while (r == 0 && first + 1 < req->count && ddp_store_exists(s->store, keys[first]))
            first++;
        if (r == 1)
            err = ddp_codec_put_u8(out, DDP_CODEC_STOP_WAITING);
        else if (r == 0)
            wait_begin(c, keys[first]);
        else
            err = r;
    }
    free(keys);
    return err;
}

/* --store-busy-poll: a worker's request keeps the loop polling for the next while. */
static void busy_poll_extend(ddp_store_server_t *s)
{
    s->poll_until = uv_hrtime() + s->busy_poll_ns;
    uv_idle_start(&s->busy_poll, on_busy_poll); /* no-op while already polling */
}

/* ADD: the new value; a value that is not a number, or would overflow, closes the
 * connection (DDP_ECLOSED), as PyTorch's server does. Else 0 or -errno. */
static int serve_add(conn_t *c, const ddp_codec_request_t *req)
{
    char shown[300];
    int64_t result;
    int err = ddp_store_add(c->server->store, key_of(req), req->delta, &result);
    if (err == DDP_EPARSE || err == -ERANGE) {
        conn_close(c, "ADD to key '%s', whose value %s",
                   show_key(key_of(req), 64, shown, sizeof shown),
                   err == DDP_EPARSE ? "is not a number" : "would overflow");
        return DDP_ECLOSED;
    }
    return err != 0 ? err : ddp_codec_put_i64(&c->out, result);
}

/* COMPARE_SET: the value the key holds after it. 0 or -errno. */
static int serve_compare_set(conn_t *c, const ddp_codec_request_t *req)
{
    const uint8_t *answer;
    size_t len;
    int err = ddp_store_compare_set(c->server->store, key_of(req), req->value, req->value_len,
                                    req->desired, req->desired_len, &answer, &len);
    return err != 0 ? err : ddp_codec_put_bytes(&c->out, answer, len);
}

/* MULTI_GET: each value in turn; MULTI_SET: each key set, the watcher told of each. */
static int serve_multi(conn_t *c, const ddp_codec_request_t *req)
{
    ddp_store_server_t *s = c->server;
    ddp_codec_items_t it;
    const uint8_t *key, *value;
    size_t klen, vlen, budget = REPLY_COPY_MAX;
    int err = 0;
    ddp_codec_items_init(&it, req);
    while (err == 0 && ddp_codec_items_next(&it, &key, &klen, &value, &vlen)) {
        ddp_store_key_t k = {key, klen};
        if (req->op == DDP_CODEC_MULTI_SET) {
            if ((err = ddp_store_set(s->store, k, value, vlen)) == 0)
                notify_write(c, k);
            continue;
        }
        err = put_value(c, ddp_store_get_value(s->store, k), &budget);
    }
    return err;
}

/* QUEUE_POP: the queue's length before, then the value popped where there was one. */
static int serve_queue_pop(conn_t *c, const ddp_codec_request_t *req)
{
    int64_t length;
    uint8_t *value = NULL;
    size_t len = 0;
    int err = ddp_store_queue_pop(c->server->store, key_of(req), &length, &value, &len);
    if (err == 0)
        err = ddp_codec_put_i64(&c->out, length);
    if (err == 0 && length > 0)
        err = ddp_codec_put_bytes(&c->out, value, len);
    free(value);
    return err;
}

/* Handles one complete request. Returns 0, or DDP_ECLOSED when it closed the connection
 * (a protocol error, a failed write). */
static int handle(conn_t *c, const ddp_codec_request_t *req)
{
    ddp_store_server_t *s = c->server;
    ddp_buf_t *out = &c->out;
    int err = 0;
    s->requests++;
    s->keys += req->count > 0 ? req->count : req->key_len > 0;
    if (s->busy_poll_ns > 0 && !s->closing && c->tag == NULL)
        busy_poll_extend(s);
    switch (req->op) {
    case DDP_CODEC_VALIDATE:
        if (req->word != DDP_CODEC_MAGIC) {
            conn_close(c, "VALIDATE with the wrong magic 0x%08" PRIx32, req->word);
            return DDP_ECLOSED;
        }
        break;
    case DDP_CODEC_PING:
        err = ddp_codec_put_u32(out, req->word);
        break;
    case DDP_CODEC_SET:
        err = ddp_store_set(s->store, key_of(req), req->value, req->value_len);
        break;
    case DDP_CODEC_GET: {
        size_t budget = ZERO_COPY_MIN;
        err = put_value(c, ddp_store_get_value(s->store, key_of(req)), &budget);
        break;
    }
    case DDP_CODEC_ADD:
        if ((err = serve_add(c, req)) == DDP_ECLOSED)
            return err;
        break;
    case DDP_CODEC_COMPARE_SET:
        err = serve_compare_set(c, req);
        break;
    case DDP_CODEC_CHECK:
    case DDP_CODEC_WAIT:
        err = check_or_wait(c, req, out);
        break;
    case DDP_CODEC_GETNUMKEYS:
        err = ddp_codec_put_i64(out, ddp_store_num_keys(s->store));
        break;
    case DDP_CODEC_DELETE_KEY:
        err = ddp_codec_put_i64(out, ddp_store_delete(s->store, key_of(req)) ? 1 : 0);
        break;
    case DDP_CODEC_APPEND:
        err = ddp_store_append(s->store, key_of(req), req->value, req->value_len);
        break;
    case DDP_CODEC_MULTI_GET:
    case DDP_CODEC_MULTI_SET:
        err = serve_multi(c, req);
        break;
    case DDP_CODEC_CANCEL_WAIT:
        /* A WAIT answered meanwhile has sent its 0 already; clients expect that. */
        ddp_store_cancel(s->store, &c->waiter);
        wait_end(c);
        err = ddp_codec_put_u8(out, DDP_CODEC_WAIT_CANCELED);
        break;
    case DDP_CODEC_QUEUE_PUSH:
        err = ddp_store_queue_push(s->store, key_of(req), req->value, req->value_len);
        break;
    case DDP_CODEC_QUEUE_POP:
        err = serve_queue_pop(c, req);
        break;
    case DDP_CODEC_QUEUE_LEN:
        err = ddp_codec_put_i64(out, ddp_store_queue_len(s->store, key_of(req)));
        break;
    case DDP_CODEC_WATCH_KEY:
    default:
        conn_close(c, "%s is not supported by ddp-launch's store", ddp_codec_op_name(req->op));
        return DDP_ECLOSED;
    }
    if (err) {
        conn_close(c, "unable to serve %s: %s", ddp_codec_op_name(req->op), ddp_strerror(err));
        return DDP_ECLOSED;
    }
    /* The watcher hears of each write (MULTI_SET's, key by key, above). */
    if (req->op == DDP_CODEC_SET || req->op == DDP_CODEC_ADD || req->op == DDP_CODEC_COMPARE_SET ||
        req->op == DDP_CODEC_APPEND)
        notify_write(c, key_of(req));
    return 0;
}

/* Flushes (and goes on reading) the connections whose WAIT was answered. */
static void drain_resumed(ddp_store_server_t *s)
{
    if (s->draining)
        return;
    s->draining = true;
    while (s->resume != NULL) {
        conn_t *c = s->resume;
        s->resume = c->resume_next;
        c->on_resume_list = false;
        process_input(c);
    }
    s->draining = false;
}

/* Every way into a connection (data, a write done, a new connection) comes here:
 * its requests, then those of connections whose WAIT they answered. */
static void serve(conn_t *c)
{
    ddp_store_server_t *s = c->server;
    process_input(c);
    drain_resumed(s);
}

static void on_alloc(uv_handle_t *handle, size_t suggested, uv_buf_t *buf)
{
    (void)suggested;
    conn_t *c = handle->data;
    if (ddp_buf_reserve(&c->in, READ_CHUNK) != 0) {
        buf->base = NULL;
        buf->len = 0; /* libuv reports UV_ENOBUFS */
        return;
    }
    buf->base = c->in.data + c->in.len;
    buf->len = READ_CHUNK;
}

static void on_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf)
{
    (void)buf;
    conn_t *c = stream->data;
    if (nread == UV_EOF) {
        conn_close(c, NULL);
        return;
    }
    if (nread < 0) {
        conn_close(c, "%s", uv_strerror((int)nread));
        return;
    }
    c->in.len += (size_t)nread;
    serve(c);
}

/* Decodes and answers the requests `c` has received, in order, until the input ends
 * in an incomplete one or the replies reach their bound. Returns true in the second
 * case (requests may remain), false when all is answered or the connection closed. */
static bool answer_requests(conn_t *c)
{
    ddp_store_server_t *s = c->server;
    while (!c->closing) {
        const uint8_t *data = (const uint8_t *)c->in.data + c->in_off;
        size_t len = c->in.len - c->in_off;
        if (len == 0)
            return false;
        if (over_water(c))
            return true;
        if (c->gen == DDP_CODEC_GEN_UNKNOWN) {
            c->gen = ddp_codec_detect(data, len);
            if (c->gen == DDP_CODEC_GEN_UNKNOWN)
                return false;
            ddp_codec_decoder_init(&c->decoder, c->gen, &s->limits);
        }
        ddp_codec_request_t req;
        int r = ddp_codec_decode(&c->decoder, data, len, &req);
        if (r == 0)
            return false;
        if (r < 0) {
            conn_close(c, "%s", c->decoder.why);
            return false;
        }
        if (c->waiting && req.op != DDP_CODEC_CANCEL_WAIT) {
            /* PyTorch clients send one request at a time: a request while a WAIT is
             * pending means the client gave up waiting (a torch 1.13 client times out
             * without CANCEL_WAIT). Forget the wait, so no stray answer arrives later
             * in the middle of the client's next reply. */
            ddp_store_cancel(s->store, &c->waiter);
            wait_end(c);
        }
        s->in_request = true;
        int handled = handle(c, &req);
        s->in_request = false;
        if (handled != 0)
            return false;
        c->in_off += req.size;
    }
    return false;
}

/* Answers what `c` has received, writes the replies, and reads on while its client
 * reads them. */
static void process_input(conn_t *c)
{
    /* A bound reached with requests left: write, and go on if the socket took it all. */
    while (answer_requests(c)) {
        flush(c);
        if (c->closing || over_water(c))
            break;
    }
    if (c->closing)
        return;
    /* Drop consumed bytes: all of them, or a large prefix. */
    if (c->in_off == c->in.len) {
        ddp_buf_clear(&c->in);
        c->in_off = 0;
    } else if (c->in_off >= READ_CHUNK) {
        memmove(c->in.data, c->in.data + c->in_off, c->in.len - c->in_off);
        c->in.len -= c->in_off;
        c->in_off = 0;
    }
    flush(c);
    if (c->closing)
        return;
    /* Backpressure: a client that does not read its replies is not read either (nor
     * are the requests it has sent answered) until it has read half of them. */
    bool want_read = !over_water(c);
    if (want_read && !c->reading) {
        int err = uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
        if (err) {
            conn_close(c, "unable to read: %s", uv_strerror(err));
            return;
        }
        c->reading = true;
    } else if (!want_read && c->reading) {
        uv_read_stop((uv_stream_t *)&c->tcp);
        c->reading = false;
    }
}

static void format_peer(uv_tcp_t *tcp, struct sockaddr_storage *out, char *buf, size_t cap)
{
    struct sockaddr_storage addr = {0};
    int len = sizeof addr;
    char host[INET6_ADDRSTRLEN] = "?";
    int port = 0;
    if (uv_tcp_getpeername(tcp, (struct sockaddr *)&addr, &len) == 0) {
        if (addr.ss_family == AF_INET6) {
            uv_ip6_name((struct sockaddr_in6 *)&addr, host, sizeof host);
            port = ntohs(((struct sockaddr_in6 *)&addr)->sin6_port);
        } else {
            uv_ip4_name((struct sockaddr_in *)&addr, host, sizeof host);
            port = ntohs(((struct sockaddr_in *)&addr)->sin_port);
        }
    }
    snprintf(buf, cap, addr.ss_family == AF_INET6 ? "[%s]:%d" : "%s:%d", host, port);
    *out = addr;
}

/* Takes the connection libuv holds for `listener` (which watches it again): 0, or
 * uv_accept's error (then libuv does not watch it again). */
static int accept_one(ddp_store_server_t *s, uv_stream_t *listener)
{
    conn_t *c = calloc(1, sizeof *c);
    if (c == NULL)
        return -ENOMEM;
    c->server = s;
    c->waiter.ready = on_wait_ready;
    uv_tcp_init(s->loop, &c->tcp);
    c->tcp.data = c;
    s->open_handles++;
    int err = uv_accept(listener, (uv_stream_t *)&c->tcp);
    if (err) {
        if (!s->accept_warned)
            ddp_log_warn(s->log, "store: unable to accept a connection: %s", uv_strerror(err));
        s->accept_warned = true;
        c->closing = true;
        uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
        return err;
    }
    format_peer(&c->tcp, &c->peer_addr, c->peer, sizeof c->peer);
    if (s->max_conns > 0 && s->nconns >= s->max_conns) {
        /* Said the first time, then every 100th: a flood must not flood the log too. */
        if (s->refused++ % 100 == 0)
            ddp_log_warn(s->log,
                         "store: refusing a connection from %s: %zu are open, the most the "
                         "open-file limit (%llu) leaves beside the launcher's own descriptors "
                         "(%llu refused so far)",
                         c->peer, s->nconns, s->nofile, (unsigned long long)s->refused);
        c->closing = true;
        uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
        return 0;
    }
    uv_tcp_nodelay(&c->tcp, 1);
    c->next = s->conns;
    if (s->conns != NULL)
        s->conns->prev = c;
    s->conns = c;
    s->nconns++;
    serve(c); /* starts reading */
    return 0;
}

/* After the turn's I/O: the budget anew, and the connections held past it taken. */
static void on_accept_turn(uv_check_t *check)
{
    ddp_store_server_t *s = check->data;
    bool held = false;
    s->accepts_left = ACCEPTS_PER_TURN;
    for (int i = 0; i < s->nslots && !s->closing; i++) {
        if (!s->held[i])
            continue;
        s->held[i] = false;
        uv_stream_t *listener = (uv_stream_t *)&s->listeners[i];
        if (uv_is_closing((uv_handle_t *)listener))
            continue;
        s->accepts_left--;
        int err = accept_one(s, listener);
        if (err == -ENOMEM) /* (still held: the next turn tries again) */
            s->held[i] = true;
        else if (err != 0) /* (listening again watches it again) */
            (void)uv_listen(listener, LISTEN_BACKLOG, on_connection);
    }
    for (int i = 0; i < s->nslots; i++)
        held = held || s->held[i];
    if (!held && s->accepts_left == ACCEPTS_PER_TURN)
        uv_check_stop(check);
}

static void on_connection(uv_stream_t *listener, int status)
{
    ddp_store_server_t *s = listener->data;
    if (status < 0 || s->closing)
        return;
    if (!uv_is_active((uv_handle_t *)&s->accept_turn))
        uv_check_start(&s->accept_turn, on_accept_turn);
    /* Not accepted (past the budget, or no memory for it): libuv holds it, and stops
     * watching the listener, until the check takes it. */
    bool hold = s->accepts_left <= 0;
    if (!hold) {
        s->accepts_left--;
        hold = accept_one(s, listener) == -ENOMEM;
    }
    if (hold)
        s->held[(uv_tcp_t *)listener - s->listeners] = true;
}

/* Listens on one resolved address (on the port the first one got, or a free one): 0,
 * or the libuv error (the handle is then closing). */
/* Every listener closed (a failed one is closing already). */
static void close_listeners(ddp_store_server_t *s)
{
    for (int i = 0; i < s->nslots; i++)
        if (!uv_is_closing((uv_handle_t *)&s->listeners[i]))
            uv_close((uv_handle_t *)&s->listeners[i], on_own_handle_closed);
    s->nlisteners = 0;
}

static int listen_one(ddp_store_server_t *s, struct addrinfo *ai)
{
    uv_tcp_t *tcp = &s->listeners[s->nslots++]; /* (a failed one's slot is closing: not reused) */
    if (s->port != 0) {
        if (ai->ai_family == AF_INET)
            ((struct sockaddr_in *)ai->ai_addr)->sin_port = htons((uint16_t)s->port);
        else if (ai->ai_family == AF_INET6)
            ((struct sockaddr_in6 *)ai->ai_addr)->sin6_port = htons((uint16_t)s->port);
    }
    uv_tcp_init(s->loop, tcp);
    tcp->data = s;
    s->open_handles++;
    unsigned flags = ai->ai_family == AF_INET6 ? UV_TCP_IPV6ONLY : 0;
    int e = uv_tcp_bind(tcp, ai->ai_addr, flags);
    if (e == 0)
        e = uv_listen((uv_stream_t *)tcp, LISTEN_BACKLOG, on_connection);
    if (e != 0) {
        uv_close((uv_handle_t *)tcp, on_own_handle_closed);
        return e;
    }
    if (s->port == 0) {
        struct sockaddr_storage bound;
        int len = sizeof bound;
        uv_tcp_getsockname(tcp, (struct sockaddr *)&bound, &len);
        s->port = ntohs(bound.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&bound)->sin6_port
                                                    : ((struct sockaddr_in *)&bound)->sin_port);
    }
    s->nlisteners++;
    return 0;
}

/* options->remote_clients: whether `host`, a name (no address, not localhost) that
 * `addrs` are all loopback for, is served on every interface instead (said). */
static bool serve_everywhere(const ddp_store_server_options_t *options,
                             const struct addrinfo *addrs)
{
    const char *host = options->host;
    if (!options->remote_clients || host == NULL || ddp_host_is_literal(host, NULL) ||
        !ddp_addrinfo_loopback(addrs))
        return false;
    char text[INET6_ADDRSTRLEN] = "?";
    (void)getnameinfo(addrs->ai_addr, addrs->ai_addrlen, text, sizeof text, NULL, 0,
                      NI_NUMERICHOST);
    ddp_log_info(options->log,
                 "%s is this machine's loopback here (%s, as /etc/hosts says), not an address "
                 "other nodes reach: the store listens on every interface, as torchrun's does",
                 host, text);
    return true;
}

/* Every address the host resolves to ("localhost": 127.0.0.1 and ::1), all on one port.
 * A taken port on any of them is fatal (clients of that address would reach the other
 * program); an address family this machine lacks (no IPv6) is skipped. 0, or an error
 * with `err` said (the listeners are then closing). */
static int listen_all(ddp_store_server_t *s, const ddp_store_server_options_t *options,
                      ddp_buf_t *err)
{
    char port_text[16];
    struct addrinfo hints = {0}, *addrs = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    snprintf(port_text, sizeof port_text, "%d", options->port);
    int gai = getaddrinfo(options->host, port_text, &hints, &addrs);
    if (gai != 0) {
        ddp_buf_printf(err, "unable to resolve the store address %s: %s", options->host,
                       gai_strerror(gai));
        return DDP_EPARSE;
    }
    if (serve_everywhere(options, addrs)) {
        freeaddrinfo(addrs);
        addrs = NULL;
        if ((gai = getaddrinfo(NULL, port_text, &hints, &addrs)) != 0) { /* 0.0.0.0 and :: */
            ddp_buf_printf(err, "unable to listen on every interface: %s", gai_strerror(gai));
            return DDP_EPARSE;
        }
    }
    int rc = -EADDRNOTAVAIL;
    for (struct addrinfo *ai = addrs; ai != NULL && s->nslots < MAX_LISTENERS; ai = ai->ai_next) {
        int e = listen_one(s, ai);
        if (e == UV_EADDRINUSE || (e != 0 && s->nlisteners == 0))
            rc = e;
        if (e == UV_EADDRINUSE)
            break;
    }
    freeaddrinfo(addrs);
    if (rc != UV_EADDRINUSE && s->nlisteners > 0)
        return 0;
    close_listeners(s);
    if (rc == -EADDRINUSE)
        ddp_buf_printf(err,
                       "port %d on %s is in use by another program (pick a free one "
                       "with --master-port, or 0, or use --standalone)",
                       options->port, options->host);
    else
        ddp_buf_printf(err, "unable to listen on %s:%d: %s", options->host, options->port,
                       uv_strerror(rc));
    return rc;
}

int ddp_store_server_start(uv_loop_t *loop, const ddp_store_server_options_t *options,
                           ddp_store_server_t **out, ddp_buf_t *err)
{
    int rc;
    ddp_store_server_t *s = calloc(1, sizeof *s);
    if (s == NULL)
        return -ENOMEM;
    s->loop = loop;
    s->log = options->log;
    s->limits = options->limits;
    s->max_conns = options->max_connections;
    s->nofile = options->nofile;
    if ((rc = ddp_store_new(&s->store)) != 0) {
        free(s);
        return rc;
    }
    if ((rc = listen_all(s, options, err)) != 0) {
        if (s->open_handles > 0) {
            /* Listeners that failed are closing; let their callbacks free the server. */
            s->closing = true;
            return rc;
        }
        ddp_store_free(s->store);
        free(s);
        return rc;
    }
    uv_idle_init(loop, &s->deferred);
    s->deferred.data = s;
    s->open_handles++;
    uv_check_init(loop, &s->accept_turn);
    s->accept_turn.data = s;
    s->open_handles++;
    s->accepts_left = ACCEPTS_PER_TURN;
    s->busy_poll_ns = (uint64_t)options->busy_poll_us * 1000;
    if (s->busy_poll_ns > 0) {
        uv_idle_init(loop, &s->busy_poll);
        s->busy_poll.data = s;
        s->open_handles++;
    }
    *out = s;
    return 0;
}

int ddp_store_server_port(const ddp_store_server_t *server)
{
    return server->port;
}

ddp_store_t *ddp_store_server_store(ddp_store_server_t *server)
{
    return server->store;
}

uint64_t ddp_store_server_busy_polls(const ddp_store_server_t *server)
{
    return server->polls;
}

uint64_t ddp_store_server_requests(const ddp_store_server_t *server)
{
    return server->requests;
}

uint64_t ddp_store_server_keys(const ddp_store_server_t *server)
{
    return server->keys;
}

size_t ddp_store_server_connections(const ddp_store_server_t *server)
{
    return server->nconns;
}

size_t ddp_store_server_waiting(const ddp_store_server_t *server)
{
    size_t n = 0;
    for (const conn_t *c = server->waits; c != NULL; c = c->wait_next)
        n++;
    return n;
}

size_t ddp_store_server_long_waits(const ddp_store_server_t *server, double older,
                                   ddp_store_long_wait_t *out, size_t cap)
{
    double now = ddp_clock_mono();
    size_t n = 0;
    for (const conn_t *c = server->waits; c != NULL && now - c->wait_since >= older;
         c = c->wait_next) {
        if (c->tag != NULL || (server->watch != NULL && strncmp(c->wait_key, server->watch->prefix,
                                                                server->watch_prefix_len) == 0))
            continue; /* a launcher's */
        if (n < cap) {
            out[n].peer = c->peer_addr;
            out[n].waited = now - c->wait_since;
            memcpy(out[n].key, c->wait_key, sizeof out[n].key);
        }
        n++;
    }
    return n;
}

void ddp_store_server_watch(ddp_store_server_t *server, const ddp_store_server_watch_t *watch)
{
    server->watch = watch;
    server->watch_prefix_len = watch != NULL ? strlen(watch->prefix) : 0;
}

static void on_deferred(uv_idle_t *idle)
{
    ddp_store_server_t *s = idle->data;
    uv_idle_stop(idle);
    drain_resumed(s);
}

int ddp_store_server_set(ddp_store_server_t *server, const char *key, const void *value, size_t len)
{
    ddp_store_key_t k = {(const uint8_t *)key, strlen(key)};
    int err = ddp_store_set(server->store, k, value, len);
    /* Inside a request, the serve() around it answers the waiters when it is done;
     * elsewhere (a timer, a connection closing) they are answered on the next loop turn,
     * from the top of the loop: never from inside the caller. */
    if (err == 0 && !server->in_request && !server->closing)
        uv_idle_start(&server->deferred, on_deferred);
    return err;
}

void ddp_store_server_close(ddp_store_server_t *server)
{
    if (server == NULL || server->closing)
        return;
    server->closing = true;
    while (server->conns != NULL)
        conn_close(server->conns, NULL);
    close_listeners(server);
    uv_close((uv_handle_t *)&server->deferred, on_own_handle_closed);
    uv_close((uv_handle_t *)&server->accept_turn, on_own_handle_closed);
    if (server->busy_poll_ns > 0)
        uv_close((uv_handle_t *)&server->busy_poll, on_own_handle_closed);
}
