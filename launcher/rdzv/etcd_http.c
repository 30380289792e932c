/* Plain HTTP/1.1 for the etcd client over libuv's TCP, responses read by http-parser (see
 * etcd_http.h). Runs on the loop's thread only.
 *
 * A connection's states (conn_state_t):
 *   RESOLVING  --name resolved-->  CONNECTING  --connected-->  BUSY  --whole response,
 *   kept alive, not a stream-->  IDLE  --next request-->  BUSY
 *   any state  --failure, cancel, a stream's end, the client's free-->  CLOSING (freed once
 *   its handles have closed and its resolution returned)
 * An IDLE connection that reads anything (the server's close), or has bytes waiting when a
 * request would take it, is closed. An idempotent
 * plain request whose reused connection is found closed before any byte of its response
 * is sent once more on a new connection (the server may close an idle connection at any
 * moment); another may have been done by the server before its close, and is not. */
#include "rdzv/etcd_http.h"

#include "buf.h"
#include "ddp_config.h"
#include "error.h"

#if DDP_HAVE_HTTP_PARSER
#include <errno.h>
#include <http_parser.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

typedef enum { CONN_RESOLVING, CONN_CONNECTING, CONN_BUSY, CONN_IDLE, CONN_CLOSING } conn_state_t;

typedef struct conn_s conn_t;

struct ddp_http_req_s {
    const ddp_http_cbs_t *cbs;
    void *ctx;
    char *endpoint;
    ddp_buf_t text; /* the request as sent */
    bool stream;
    bool idempotent; /* the same if done twice: may be sent again */
    bool retried;    /* sent again after a reused connection's close */
    bool cancelled;  /* during a callback: dropped after it */
    bool stopped;    /* the body callback said to stop */
    long timeout_ms;
    uint64_t deadline; /* loop ms: the end of timeout_ms from its post, resends included */
    conn_t *conn;
};

struct conn_s {
    ddp_http_t *h;
    conn_state_t state;
    char *endpoint;
    uv_tcp_t tcp;
    uv_timer_t timer;
    uv_getaddrinfo_t resolve;
    uv_connect_t connect;
    uv_write_t write;
    int refs;               /* handles not yet closed, a resolution not yet returned */
    struct addrinfo *addrs; /* a name's addresses, the next tried on a refusal */
    struct addrinfo *next_addr;
    http_parser parser;
    ddp_http_req_t *req;
    ddp_buf_t out;     /* the bytes being written */
    int status;        /* the response's, once its headers came */
    bool began;        /* a byte of the response came */
    bool complete;     /* the whole response */
    bool reused;       /* it served a request before this one */
    bool in_callback;  /* the request's body callback runs */
    bool reading;      /* uv_read_start done */
    bool spare_bytes;  /* bytes came past the response: not reused */
    int deferred;      /* a failure found while posting, said from the loop */
    char in[64 << 10]; /* what one read takes */
    conn_t *prev, *next;
};

struct ddp_http_s {
    uv_loop_t *loop;
    const ddp_log_t *log;
    conn_t *conns; /* every connection not yet freed */
    bool freeing;  /* freed when the last connection is */
};

static void conn_close(conn_t *c);
static void conn_connect(conn_t *c, const struct sockaddr *addr);
static int attach(ddp_http_t *h, ddp_http_req_t *req, bool fresh);
static void fail(conn_t *c, ddp_http_end_t end, const char *what, const char *detail);
static void on_timeout(uv_timer_t *timer);
static void defer_failure(conn_t *c, int err);

/* The request's deadline on the connection's timer: what is left of its time since it was
 * posted (a resend, a name's next address get no time afresh). */
static void start_deadline(conn_t *c, ddp_http_req_t *req)
{
    uint64_t now = uv_now(c->h->loop);
    uv_timer_start(&c->timer, on_timeout, req->deadline > now ? req->deadline - now : 0, 0);
}

/* Connections. */

static void conn_unref(conn_t *c)
{
    if (--c->refs > 0)
        return;
    ddp_http_t *h = c->h;
    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        h->conns = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    if (c->addrs != NULL)
        uv_freeaddrinfo(c->addrs);
    ddp_buf_free(&c->out);
    free(c->endpoint);
    free(c);
    if (h->freeing && h->conns == NULL)
        free(h);
}

static void on_handle_closed(uv_handle_t *handle)
{
    conn_unref(handle->data);
}

static void req_free(ddp_http_req_t *req)
{
    free(req->endpoint);
    ddp_buf_free(&req->text);
    free(req);
}

/* Closes the connection; its request, if any, is dropped without callbacks (unless its body
 * callback runs: dropped when that returns). */
static void conn_close(conn_t *c)
{
    if (c->state == CONN_CLOSING)
        return;
    if (c->state == CONN_RESOLVING)
        (void)uv_cancel((uv_req_t *)&c->resolve); /* its callback comes even so */
    c->state = CONN_CLOSING;
    if (c->req != NULL && !c->in_callback) {
        req_free(c->req);
        c->req = NULL;
    }
    uv_close((uv_handle_t *)&c->tcp, on_handle_closed);
    uv_close((uv_handle_t *)&c->timer, on_handle_closed);
}

/* "HOST:PORT" or "[ADDR]:PORT" into host and port: false when it is neither. */
static bool split_endpoint(const char *endpoint, char *host, size_t cap, int *port)
{
    const char *colon = strrchr(endpoint, ':');
    const char *start = endpoint, *end = colon;
    if (colon == NULL || colon == endpoint)
        return false;
    if (endpoint[0] == '[') {
        if (colon[-1] != ']')
            return false;
        start++;
        end--;
    }
    char *stop;
    long p = strtol(colon + 1, &stop, 10);
    if (*stop != '\0' || stop == colon + 1 || p <= 0 || p > 65535 || end <= start ||
        (size_t)(end - start) >= cap)
        return false;
    memcpy(host, start, (size_t)(end - start));
    host[end - start] = '\0';
    *port = (int)p;
    return true;
}

static void on_resolved(uv_getaddrinfo_t *resolve, int status, struct addrinfo *addrs)
{
    conn_t *c = resolve->data;
    c->addrs = addrs;
    if (c->state == CONN_CLOSING) {
        conn_unref(c);
        return;
    }
    conn_unref(c);
    c->state = CONN_CONNECTING;
    if (status < 0 || addrs == NULL) {
        fail(c, DDP_HTTP_UNREACHED, "unable to resolve its name", uv_strerror(status));
        return;
    }
    c->next_addr = addrs->ai_next;
    conn_connect(c, addrs->ai_addr);
}

/* A new connection for `req`, its deadline running, not yet connecting. NULL: out of
 * memory. */
static conn_t *conn_new(ddp_http_t *h, ddp_http_req_t *req)
{
    conn_t *c = calloc(1, sizeof *c);
    if (c == NULL || (c->endpoint = strdup(req->endpoint)) == NULL) {
        free(c);
        return NULL;
    }
    c->h = h;
    c->tcp.data = c->timer.data = c->resolve.data = c->connect.data = c->write.data = c;
    uv_tcp_init(h->loop, &c->tcp);
    uv_timer_init(h->loop, &c->timer);
    c->refs = 2;
    c->next = h->conns;
    if (h->conns != NULL)
        h->conns->prev = c;
    h->conns = c;
    c->state = CONN_CONNECTING;
    c->req = req;
    req->conn = c;
    start_deadline(c, req);
    return c;
}

/* A new connection for `req` to its endpoint, resolving or connecting. 0; DDP_EUSAGE where
 * the endpoint is not HOST:PORT; -ENOMEM. */
static int conn_open(ddp_http_t *h, ddp_http_req_t *req)
{
    char host[256];
    int port;
    if (!split_endpoint(req->endpoint, host, sizeof host, &port))
        return DDP_EUSAGE;
    conn_t *c = conn_new(h, req);
    if (c == NULL)
        return -ENOMEM;
    /* A numeric address at once; a name on libuv's pool. */
    struct sockaddr_storage addr;
    if (uv_ip4_addr(host, port, (struct sockaddr_in *)&addr) == 0 ||
        uv_ip6_addr(host, port, (struct sockaddr_in6 *)&addr) == 0) {
        conn_connect(c, (const struct sockaddr *)&addr);
        return 0;
    }
    char service[8];
    snprintf(service, sizeof service, "%d", port);
    const struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    c->state = CONN_RESOLVING;
    c->refs++;
    if (uv_getaddrinfo(h->loop, &c->resolve, on_resolved, host, service, &hints) != 0) {
        c->refs--;
        c->state = CONN_CONNECTING; /* (nothing to cancel) */
        c->req = NULL;
        req->conn = NULL;
        conn_close(c);
        return -ENOMEM;
    }
    return 0;
}

/* The request's end: its connection kept for the next request or closed, then `end`. */
static void finish(conn_t *c, ddp_http_end_t end, const char *why)
{
    ddp_http_req_t *req = c->req;
    bool keep = end == DDP_HTTP_REPLIED && !req->stream && !c->spare_bytes &&
                http_should_keep_alive(&c->parser);
    c->req = NULL;
    req->conn = NULL;
    uv_timer_stop(&c->timer);
    if (keep) {
        c->state = CONN_IDLE;
        c->reused = true;
        size_t idle = 0;
        for (conn_t *o = c->h->conns; o != NULL; o = o->next) {
            if (o->state == CONN_IDLE && ++idle > DDP_HTTP_IDLE_MAX)
                conn_close(o); /* the oldest ones, last in the list */
        }
    } else {
        conn_close(c);
    }
    req->cbs->end(req->ctx, end, c->status, why != NULL ? why : "");
    req_free(req);
}

/* The request's end with a failure: "<what>: <detail>". */
static void fail(conn_t *c, ddp_http_end_t end, const char *what, const char *detail)
{
    char why[300];
    snprintf(why, sizeof why, "%s: %s", what, detail);
    finish(c, end, why);
}

/* A request found its reused connection closed before any byte of its response: once more
 * on a new one (true) where doing it twice is harmless, or not. */
static bool send_again(conn_t *c)
{
    ddp_http_req_t *req = c->req;
    if (!c->reused || c->began || req->stream || !req->idempotent || req->retried)
        return false;
    c->req = NULL;
    conn_close(c);
    req->retried = true;
    req->conn = NULL;
    if (attach(c->h, req, true) != 0) {
        req->cbs->end(req->ctx, DDP_HTTP_UNREACHED, 0, "out of memory");
        req_free(req);
    }
    return true;
}

/* The connection was lost (`status`, UV_EOF: closed by the server) before its response
 * was whole. */
static void lost(conn_t *c, int status)
{
    if (send_again(c))
        return;
    if (!c->began)
        fail(c, DDP_HTTP_LOST, "the connection lost before a response", uv_strerror(status));
    else
        fail(c, DDP_HTTP_BROKEN, "the connection lost in the middle of a response",
             uv_strerror(status));
}

/* Responses. */

static int on_headers_complete(http_parser *parser)
{
    conn_t *c = parser->data;
    c->status = parser->status_code;
    return 0;
}

static int on_body(http_parser *parser, const char *at, size_t len)
{
    conn_t *c = parser->data;
    ddp_http_req_t *req = c->req;
    if (c->status >= 100 && c->status < 200 && c->status != 101)
        return 0; /* an interim answer's (a broken server's: a 1xx has none): dropped */
    c->in_callback = true;
    bool go = req->cbs->body(req->ctx, c->status, at, len);
    c->in_callback = false;
    if (c->state == CONN_CLOSING || req->cancelled)
        return 1; /* the request, or the client, gone meanwhile: read() drops it */
    req->stopped = !go;
    return go ? 0 : 1;
}

static int on_message_complete(http_parser *parser)
{
    conn_t *c = parser->data;
    if (parser->status_code >= 100 && parser->status_code < 200 && parser->status_code != 101) {
        c->status = 0; /* an interim answer (100 Continue, 103): the final one follows */
        return 0;
    }
    c->complete = true;
    http_parser_pause(parser, 1); /* one response a request: what follows is not read */
    return 0;
}

static const http_parser_settings settings = {
    .on_headers_complete = on_headers_complete,
    .on_body = on_body,
    .on_message_complete = on_message_complete,
};

/* After the parser's callbacks: the request dropped where it was cancelled (or the
 * client freed), true then. */
static bool dropped(conn_t *c)
{
    if (c->req != NULL && (c->state == CONN_CLOSING || c->req->cancelled)) {
        req_free(c->req);
        c->req = NULL;
        conn_close(c);
    }
    return c->req == NULL;
}

/* Response bytes (len 0: the server closed the connection) through http-parser. */
static void feed(conn_t *c, const char *data, size_t len)
{
    c->began = c->began || len > 0;
    size_t used = http_parser_execute(&c->parser, &settings, data, len);
    if (dropped(c))
        return;
    enum http_errno err = HTTP_PARSER_ERRNO(&c->parser);
    if (c->req->stopped) {
        finish(c, DDP_HTTP_STOPPED, "the reader stopped");
    } else if (c->complete) {
        c->spare_bytes = used < len; /* bytes past the response: the connection not reused */
        http_parser_pause(&c->parser, 0);
        finish(c, DDP_HTTP_REPLIED, NULL);
    } else if (len == 0) {
        lost(c, UV_EOF);
    } else if (err != HPE_OK) {
        fail(c, DDP_HTTP_BROKEN, "not an HTTP/1.1 response", http_errno_description(err));
    }
}

static void on_alloc(uv_handle_t *handle, size_t size, uv_buf_t *buf)
{
    conn_t *c = handle->data;
    (void)size;
    *buf = uv_buf_init(c->in, sizeof c->in);
}

static void on_read(uv_stream_t *stream, ssize_t n, const uv_buf_t *buf)
{
    conn_t *c = stream->data;
    if (c->state == CONN_CLOSING || n == 0)
        return;
    if (c->state == CONN_IDLE) { /* the server's close of a kept connection, or noise */
        conn_close(c);
        return;
    }
    if (n == UV_EOF)
        feed(c, NULL, 0); /* a body that runs to the close ends here */
    else if (n < 0)
        lost(c, (int)n);
    else
        feed(c, buf->base, (size_t)n);
}

/* Requests. */

static void on_written(uv_write_t *write, int status)
{
    conn_t *c = write->data;
    if (c->state == CONN_CLOSING || c->req == NULL || status == 0)
        return;
    lost(c, status);
}

/* The request on a connected connection: written, its response read. */
static void send_request(conn_t *c)
{
    ddp_http_req_t *req = c->req;
    ddp_buf_clear(&c->out);
    http_parser_init(&c->parser, HTTP_RESPONSE);
    c->parser.data = c;
    c->status = 0;
    c->began = c->complete = c->spare_bytes = false;
    if (req->stream)
        uv_timer_stop(&c->timer); /* a stream has no deadline once connected */
    int err = ddp_buf_append(&c->out, req->text.data, req->text.len);
    uv_buf_t buf = uv_buf_init(c->out.data, (unsigned)c->out.len);
    if (err == 0 && !c->reading)
        err = uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
    c->reading = c->reading || err == 0;
    if (err == 0)
        err = uv_write(&c->write, (uv_stream_t *)&c->tcp, &buf, 1, on_written);
    if (err != 0)
        defer_failure(c, err);
}

/* A failure found while posting, said from the loop (the poster gets no callback in its
 * own call). */
static void on_deferred(uv_timer_t *timer)
{
    conn_t *c = timer->data;
    if (c->state == CONN_CLOSING || c->req == NULL)
        return;
    if (c->state == CONN_CONNECTING)
        fail(c, DDP_HTTP_UNREACHED, "unable to connect", uv_strerror(c->deferred));
    else
        lost(c, c->deferred);
}

static void defer_failure(conn_t *c, int err)
{
    c->deferred = err;
    uv_timer_start(&c->timer, on_deferred, 0, 0);
}

/* The next address of a name, on a new connection that takes the request and the rest. */
static void connect_next(conn_t *c)
{
    ddp_http_req_t *req = c->req;
    struct addrinfo *addrs = c->addrs, *next = c->next_addr;
    c->req = NULL;
    c->addrs = NULL;
    conn_close(c);
    conn_t *o = conn_new(c->h, req);
    if (o == NULL) {
        uv_freeaddrinfo(addrs);
        req->cbs->end(req->ctx, DDP_HTTP_UNREACHED, 0, "out of memory");
        req_free(req);
        return;
    }
    o->addrs = addrs;
    o->next_addr = next->ai_next;
    conn_connect(o, next->ai_addr);
}

static void on_connected(uv_connect_t *connect, int status)
{
    conn_t *c = connect->data;
    if (c->state == CONN_CLOSING || c->req == NULL)
        return;
    if (status < 0 && c->next_addr != NULL) {
        connect_next(c);
    } else if (status < 0) {
        fail(c, DDP_HTTP_UNREACHED, "unable to connect", uv_strerror(status));
    } else {
        c->state = CONN_BUSY;
        send_request(c);
    }
}

static void conn_connect(conn_t *c, const struct sockaddr *addr)
{
    int err = uv_tcp_connect(&c->connect, &c->tcp, addr, on_connected);
    if (err != 0)
        defer_failure(c, err);
}

static void on_timeout(uv_timer_t *timer)
{
    conn_t *c = timer->data;
    if (c->state == CONN_CLOSING || c->req == NULL)
        return;
    char limit[48];
    snprintf(limit, sizeof limit, "%ld ms", c->req->timeout_ms);
    fail(c, DDP_HTTP_TIMEDOUT,
         c->state == CONN_BUSY ? "no whole response within" : "not reached within", limit);
}

/* Whether a kept connection has bytes waiting that the loop has not read yet (an answer
 * nobody asked for, a body past its length: reused, they would be taken for the next
 * request's answer, and every later one shifted by one), or the server's close (FIONREAD
 * counts none; a peek reads 0: reused, a request the server never read would fail). */
static bool bytes_waiting(conn_t *c)
{
    uv_os_fd_t fd;
    int n = 0;
    char byte;
    if (uv_fileno((uv_handle_t *)&c->tcp, &fd) != 0 || ioctl(fd, FIONREAD, &n) != 0 || n > 0)
        return true;
    ssize_t got = recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    return got >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK);
}

/* The request on a connection to its endpoint: a kept one (not `fresh`, not a stream) with
 * nothing waiting to be read, or a new one. 0, DDP_EUSAGE, -ENOMEM. */
static int attach(ddp_http_t *h, ddp_http_req_t *req, bool fresh)
{
    conn_t *c = NULL;
    for (conn_t *o = h->conns; !fresh && !req->stream && o != NULL && c == NULL; o = o->next) {
        if (o->state != CONN_IDLE || strcmp(o->endpoint, req->endpoint) != 0)
            continue;
        if (bytes_waiting(o))
            conn_close(o);
        else
            c = o;
    }
    if (c == NULL)
        return conn_open(h, req);
    c->state = CONN_BUSY;
    c->req = req;
    req->conn = c;
    start_deadline(c, req);
    send_request(c);
    return 0;
}

int ddp_http_post(ddp_http_t *h, const char *endpoint, const char *path, const char *body,
                  bool stream, bool idempotent, long timeout_ms, const ddp_http_cbs_t *cbs,
                  void *ctx, ddp_http_req_t **out)
{
    ddp_http_req_t *req = calloc(1, sizeof *req);
    if (req == NULL)
        return -ENOMEM;
    req->cbs = cbs;
    req->ctx = ctx;
    req->stream = stream;
    req->idempotent = idempotent;
    req->timeout_ms = timeout_ms > 0 ? timeout_ms : 1;
    req->deadline = uv_now(h->loop) + (uint64_t)req->timeout_ms;
    req->endpoint = strdup(endpoint);
    size_t len = strlen(body);
    int err = req->endpoint != NULL ? 0 : -ENOMEM;
    if (err == 0)
        err = ddp_buf_printf(&req->text,
                             "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
                             "Content-Length: %zu\r\n\r\n",
                             path, endpoint, len);
    if (err == 0)
        err = ddp_buf_append(&req->text, body, len);
    if (err == 0)
        err = attach(h, req, false);
    if (err != 0) {
        req_free(req);
        return err;
    }
    if (out != NULL)
        *out = req;
    return 0;
}

void ddp_http_cancel(ddp_http_req_t *req)
{
    if (req == NULL || req->cancelled)
        return;
    conn_t *c = req->conn;
    if (c != NULL && c->in_callback) { /* dropped once the callback returns */
        req->cancelled = true;
        return;
    }
    if (c != NULL) {
        c->req = NULL;
        conn_close(c);
    }
    req_free(req);
}

ddp_http_t *ddp_http_new(uv_loop_t *loop, const ddp_log_t *log)
{
    ddp_http_t *h = calloc(1, sizeof *h);
    if (h != NULL) {
        h->loop = loop;
        h->log = log;
    }
    return h;
}

void ddp_http_free(ddp_http_t *h)
{
    if (h == NULL)
        return;
    h->freeing = true;
    if (h->conns == NULL) {
        free(h);
        return;
    }
    for (conn_t *c = h->conns; c != NULL; c = c->next)
        conn_close(c);
}

#endif
