/* Unit tests of the etcd client's plain-http transport (rdzv/etcd_http.c under
 * rdzv/etcd_client.c) against a fake server on a thread of this process, which answers
 * what a test scripts: what is not a whole HTTP/1.1 response (headers cut short, garbage,
 * a connection closed mid-body), a body over DDP_ETCD_MAX_REPLY, a chunked stream split at
 * odd places, an HTTP 500, and a kept connection reused. No etcd; the client's loop runs in
 * the test's thread. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "ddp_config.h"
#include "error.h"
#include "rdzv/etcd_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define PIECES  8
#define WAIT_MS 10000 /* the longest any step of the server or the client waits */

/* What the server answers to one request: pieces written in turn (piece i > 0 once the
 * client has taken after[i] messages, so that the client reads it apart from the ones
 * before), then `big` bytes of 'x'. */
typedef struct {
    const char *pieces[PIECES];
    int after[PIECES];
    size_t big;
    int hold_ms; /* before the answer */
    bool drop;   /* held, the connection closed unanswered; the request read again on a new
                  * one, held again, answered there */
} answer_script_t;

typedef struct {
    answer_script_t answers[4]; /* one a request, all on one connection */
    int nanswers;
    bool keep_open; /* after the answers, wait for the client's close */
    bool one_each;  /* a connection for each request, closed after its answer */
    bool reaccept;  /* a request not read on a connection (the client closed it): on the next */
    int listen_fd, port;
    atomic_int delivered; /* messages the client took */
    atomic_int sent;      /* pieces written */
    atomic_int closed;    /* connections closed after their answer (one_each) */
    int accepted, served; /* connections accepted, requests read */
    pthread_t thread;
} server_t;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static bool wait_readable(int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    return poll(&p, 1, WAIT_MS) == 1;
}

/* One request's head and body read: false at the client's close or after WAIT_MS. */
static bool read_request(int fd)
{
    char buf[8192];
    size_t len = 0;
    char *end = NULL;
    while (end == NULL) {
        if (len == sizeof buf - 1 || !wait_readable(fd))
            return false;
        ssize_t n = recv(fd, buf + len, sizeof buf - 1 - len, 0);
        if (n <= 0)
            return false;
        len += (size_t)n;
        buf[len] = '\0';
        end = strstr(buf, "\r\n\r\n");
    }
    const char *cl = strcasestr(buf, "Content-Length:");
    size_t body = cl != NULL ? strtoul(cl + 15, NULL, 10) : 0;
    size_t have = len - (size_t)(end + 4 - buf);
    while (have < body) {
        if (!wait_readable(fd))
            return false;
        ssize_t n = recv(fd, buf, sizeof buf, 0);
        if (n <= 0)
            return false;
        have += (size_t)n;
    }
    return true;
}

static void send_all(int fd, const char *data, size_t len)
{
    while (len > 0) {
        ssize_t n = send(fd, data, len, MSG_NOSIGNAL);
        if (n <= 0)
            return; /* the client closed: it may, on a body over its bound */
        data += n;
        len -= (size_t)n;
    }
}

static void hold(int ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

static void answer(server_t *s, int fd, const answer_script_t *a)
{
    hold(a->hold_ms);
    for (int i = 0; i < PIECES && a->pieces[i] != NULL; i++) {
        double until = now_s() + WAIT_MS / 1000.0;
        while (atomic_load(&s->delivered) < a->after[i] && now_s() < until)
            sched_yield();
        send_all(fd, a->pieces[i], strlen(a->pieces[i]));
        atomic_fetch_add(&s->sent, 1);
    }
    if (a->big > 0) {
        char *x = malloc(a->big);
        assert_non_null(x);
        memset(x, 'x', a->big);
        send_all(fd, x, a->big);
        free(x);
    }
}

static int accept_one(server_t *s)
{
    if (!wait_readable(s->listen_fd))
        return -1;
    int fd = accept(s->listen_fd, NULL, NULL);
    if (fd < 0)
        return -1;
    s->accepted++;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

static void *serve(void *arg)
{
    server_t *s = arg;
    int fd = accept_one(s);
    if (fd < 0)
        return NULL;
    for (int i = 0; i < s->nanswers; i++) {
        if (!read_request(fd)) {
            close(fd);
            if (!s->reaccept || (fd = accept_one(s)) < 0 || !read_request(fd))
                return NULL;
        }
        s->served++;
        if (s->answers[i].drop) {
            hold(s->answers[i].hold_ms);
            close(fd);
            if ((fd = accept_one(s)) < 0 || !read_request(fd))
                return NULL;
            s->served++;
        }
        answer(s, fd, &s->answers[i]);
        if (s->one_each && i + 1 < s->nanswers) {
            close(fd);
            atomic_fetch_add(&s->closed, 1);
            if ((fd = accept_one(s)) < 0)
                return NULL;
        }
    }
    if (s->keep_open) { /* until the client's close */
        char buf[256];
        while (wait_readable(fd) && recv(fd, buf, sizeof buf, 0) > 0)
            ;
    }
    close(fd);
    /* A second connection is refused: the test counts connections. */
    struct pollfd p = {.fd = s->listen_fd, .events = POLLIN};
    if (s->keep_open && poll(&p, 1, 0) == 1 && (fd = accept(s->listen_fd, NULL, NULL)) >= 0) {
        s->accepted++;
        close(fd);
    }
    return NULL;
}

static void server_start(server_t *s)
{
    s->listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(s->listen_fd >= 0);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof addr;
    assert_int_equal(bind(s->listen_fd, (struct sockaddr *)&addr, sizeof addr), 0);
    assert_int_equal(listen(s->listen_fd, 4), 0);
    assert_int_equal(getsockname(s->listen_fd, (struct sockaddr *)&addr, &alen), 0);
    s->port = ntohs(addr.sin_port);
    assert_int_equal(pthread_create(&s->thread, NULL, serve, s), 0);
}

static void server_end(server_t *s)
{
    pthread_join(s->thread, NULL);
    close(s->listen_fd);
}

/* The client and what its callbacks took. */
typedef struct {
    uv_loop_t loop;
    ddp_log_t log;
    ddp_etcd_t *etcd;
    server_t *server;
    int ends, err;
    char why[600];
    char messages[1024]; /* each message's "n", in order */
    int replies;
} client_t;

/* A client of the endpoints at ports[n] (`timeout` s a request), the one at ports[0] the
 * first it uses (the client begins at its pid's), its replies counted at `s`. */
static void client_up_at(client_t *c, server_t *s, const int *ports, size_t n, double timeout)
{
    char endpoints[8][32];
    const char *list[8];
    assert_true(n <= 8);
    for (size_t i = 0; i < n; i++) {
        size_t at = ((size_t)getpid() + i) % n;
        snprintf(endpoints[at], sizeof endpoints[at], "127.0.0.1:%d", ports[i]);
        list[at] = endpoints[at];
    }
    memset(c, 0, sizeof *c);
    c->server = s;
    assert_int_equal(uv_loop_init(&c->loop), 0);
    ddp_log_init(&c->log, "test", DDP_LOG_WARN);
    ddp_etcd_opts_t opts = {.endpoints = list, .nendpoints = n, .timeout = timeout};
    ddp_buf_t why = DDP_BUF_INIT;
    if (ddp_etcd_new(&c->loop, &opts, &c->log, &c->etcd, &why) != 0)
        fail_msg("ddp_etcd_new: %s", ddp_buf_str(&why));
    ddp_buf_free(&why);
}

static void client_up(client_t *c, server_t *s)
{
    client_up_at(c, s, &s->port, 1, WAIT_MS / 1000.0);
}

static void client_down(client_t *c)
{
    ddp_etcd_free(c->etcd);
    uv_run(&c->loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&c->loop), 0);
}

static void on_reply(void *ctx, int err, const ddp_json_t *reply, const char *why)
{
    client_t *c = ctx;
    if (err != 0) {
        c->ends++;
        c->err = err;
        snprintf(c->why, sizeof c->why, "%s", why);
        return;
    }
    int64_t n = -1;
    (void)ddp_etcd_int(reply, "n", &n);
    size_t len = strlen(c->messages);
    snprintf(c->messages + len, sizeof c->messages - len, "%s%lld", len ? "," : "", (long long)n);
    c->replies++;
    atomic_fetch_add(&c->server->delivered, 1);
}

/* Posts to `path` and runs the loop until `ends` ends (or replies of a plain request)
 * come. */
static void post_to_and_wait(client_t *c, const char *path, bool stream, int ends)
{
    assert_int_equal(ddp_etcd_post(c->etcd, path, "{\"key\": \"aw==\"}", stream, on_reply, c, NULL),
                     0);
    double until = now_s() + 2 * WAIT_MS / 1000.0;
    while (c->ends + (stream ? 0 : c->replies) < ends && now_s() < until)
        uv_run(&c->loop, UV_RUN_ONCE);
    if (c->ends + (stream ? 0 : c->replies) < ends)
        fail_msg("no end within %d ms", 2 * WAIT_MS);
}

static void post_and_wait(client_t *c, bool stream, int ends)
{
    post_to_and_wait(c, "/v3/kv/range", stream, ends);
}

/* A failure the client says: `err`, `why` holding `words`. */
static void expect_failure(const answer_script_t *a, int err, const char *words)
{
    server_t s = {.nanswers = 1};
    s.answers[0] = *a;
    server_start(&s);
    client_t c;
    client_up(&c, &s);
    post_and_wait(&c, false, 1);
    assert_int_equal(c.replies, 0);
    if (c.err != err || strstr(c.why, words) == NULL)
        fail_msg("%d '%s', not %d '%s'", c.err, c.why, err, words);
    client_down(&c);
    server_end(&s);
}

static void test_headers_cut_short(void **state)
{
    (void)state;
    answer_script_t a = {.pieces = {"HTTP/1.1 200 OK\r\nContent-Le"}};
    expect_failure(&a, DDP_ECLOSED, "in the middle of a response");
}

static void test_not_http(void **state)
{
    (void)state;
    answer_script_t a = {.pieces = {"SSH-2.0-OpenSSH_9.2p1\r\n"}};
    expect_failure(&a, DDP_ECLOSED, "not an HTTP/1.1 response");
}

static void test_closed_mid_body(void **state)
{
    (void)state;
    answer_script_t a = {.pieces = {"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"n\": "}};
    expect_failure(&a, DDP_ECLOSED, "in the middle of a response");
}

static void test_body_over_the_bound(void **state)
{
    (void)state;
    char head[128];
    snprintf(head, sizeof head, "HTTP/1.1 200 OK\r\nContent-Length: %u\r\n\r\n",
             DDP_ETCD_MAX_REPLY + 1);
    answer_script_t a = {.pieces = {head}, .big = DDP_ETCD_MAX_REPLY + 1};
    expect_failure(&a, DDP_ETOOBIG, "a reply over");
}

static void test_http_500(void **state)
{
    (void)state;
    /* The gateway's own error: its message said. */
    answer_script_t a = {
        .pieces = {"HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\n"
                   "Content-Length: 89\r\n\r\n{\"error\": \"etcdserver: request timed out\", "
                   "\"code\": 14, \"message\": \"etcdserver: too busy\"}"}};
    expect_failure(&a, DDP_EPROTO, "etcd: etcdserver: too busy");
    /* A 500 of something else: not etcd. */
    answer_script_t b = {.pieces = {"HTTP/1.1 500 Oops\r\nContent-Length: 5\r\n\r\noops\n"}};
    expect_failure(&b, DDP_EPROTO, "HTTP status 500: not etcd's v3 gateway");
}

/* A watch's messages in chunks, the pieces split inside a chunk's size line, inside its
 * CRLF and inside a message; each piece sent once the client has taken the messages
 * before it. The stream's last chunk is its end. */
static void test_chunked_stream_split_at_odd_places(void **state)
{
    (void)state;
    server_t s = {.nanswers = 1};
    s.answers[0] = (answer_script_t){
        .pieces = {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                   "15\r\n{\"result\": {\"n\": 1}}\n\r\n1",    /* (the 2nd's size cut) */
                   "b\r\n{\"result\": {\"n\": 2}}\n{\"resu\r", /* 2, half of 3, a CR */
                   "\n7\r\nlt\": {\"\r\n",
                   "d\r\nn\": 3}}\n{\"res\r\n10\r\nult\": {\"n\": 4}}\n\r\n0\r\n\r\n"},
        .after = {0, 1, 2, 2}};
    server_start(&s);
    client_t c;
    client_up(&c, &s);
    post_and_wait(&c, true, 1);
    assert_string_equal(c.messages, "1,2,3,4");
    assert_int_equal(c.err, DDP_ECLOSED);
    if (strstr(c.why, "ended the stream") == NULL)
        fail_msg("'%s'", c.why);
    client_down(&c);
    server_end(&s);
}

/* A watch's message of 1 MiB in chunks of one byte each: each piece is not a scan of
 * the whole message so far (it took ~5 s, growing with the square of its size). */
static void test_message_in_tiny_pieces(void **state)
{
    (void)state;
    enum { PAD = 1 << 20 };
    char head[64];
    int len = snprintf(head, sizeof head, "{\"result\": {\"n\": 5, \"pad\": \"");
    size_t size = (size_t)len + PAD + 4; /* "}}\n", one byte a chunk: "1\r\nX\r\n" */
    char *body = malloc(size * 6 + 8), *at = body;
    assert_non_null(body);
    for (size_t i = 0; i < size; i++) {
        char x = i < (size_t)len ? head[i] : i < (size_t)len + PAD ? 'x' : "\"}}\n"[i - len - PAD];
        at += sprintf(at, "1\r\n%c\r\n", x);
    }
    strcpy(at, "0\r\n\r\n");
    server_t s = {.nanswers = 1};
    s.answers[0] = (answer_script_t){
        .pieces = {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", body}};
    server_start(&s);
    client_t c;
    client_up(&c, &s);
    double t0 = now_s();
    post_and_wait(&c, true, 1);
    double took = now_s() - t0;
    assert_string_equal(c.messages, "5");
    if (took > 1.0)
        fail_msg("the message took %.2f s", took);
    client_down(&c);
    server_end(&s);
    free(body);
}

/* A watch's 4 MiB of empty lines, then a message: each read's lines are consumed without
 * moving the rest of the read after each (~0.1 s a 64 KiB read, the loop standing still). */
static void test_many_short_lines(void **state)
{
    (void)state;
    enum { LINES = 4 << 20 };
    const char *last = "{\"result\": {\"n\": 5}}\n";
    char *body = malloc(LINES + 128), *at = body;
    assert_non_null(body);
    at += sprintf(at, "%x\r\n", (unsigned)LINES);
    memset(at, '\n', LINES);
    at += LINES;
    sprintf(at, "\r\n%zx\r\n%s\r\n0\r\n\r\n", strlen(last), last);
    server_t s = {.nanswers = 1};
    s.answers[0] = (answer_script_t){
        .pieces = {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", body}};
    server_start(&s);
    client_t c;
    client_up(&c, &s);
    double t0 = now_s();
    post_and_wait(&c, true, 1);
    double took = now_s() - t0;
    assert_string_equal(c.messages, "5");
    if (took > 1.0)
        fail_msg("the lines took %.2f s", took);
    client_down(&c);
    server_end(&s);
    free(body);
}

/* Plain requests one after another go over one kept connection. */
static void test_connection_kept(void **state)
{
    (void)state;
    server_t s = {.nanswers = 3, .keep_open = true};
    for (int i = 0; i < 3; i++)
        s.answers[i] = (answer_script_t){
            .pieces = {i == 1 ? "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                                "6\r\n{\"n\": \r\n3\r\n12}\r\n0\r\n\r\n"
                              : "HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\n{\"n\": 7}"}};
    server_start(&s);
    client_t c;
    client_up(&c, &s);
    for (int i = 1; i <= 3; i++)
        post_and_wait(&c, false, i);
    assert_string_equal(c.messages, "7,12,7");
    assert_int_equal(c.ends, 0);
    client_down(&c); /* its close ends the server's wait */
    server_end(&s);
    assert_int_equal(s.accepted, 1);
    assert_int_equal(s.served, 3);
}

static void on_reply_then_post(void *ctx, int err, const ddp_json_t *reply, const char *why)
{
    client_t *c = ctx;
    on_reply(c, err, reply, why);
    if (c->replies == 1) /* at once: the kept connection's close not yet read */
        assert_int_equal(ddp_etcd_post(c->etcd, "/v3/kv/range", "{}", false, on_reply, c, NULL), 0);
}

/* The server closes a kept connection after its answer: the next request, sent on it
 * before the close is seen, goes again on a new connection, unharmed. */
static void test_kept_connection_closed_by_the_server(void **state)
{
    (void)state;
    server_t s = {.nanswers = 2, .one_each = true};
    for (int i = 0; i < 2; i++)
        s.answers[i] =
            (answer_script_t){.pieces = {"HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\n{\"n\": 5}"}};
    server_start(&s);
    client_t c;
    client_up(&c, &s);
    assert_int_equal(
        ddp_etcd_post(c.etcd, "/v3/kv/range", "{}", false, on_reply_then_post, &c, NULL), 0);
    double until = now_s() + 2 * WAIT_MS / 1000.0;
    while (c.replies + c.ends < 2 && now_s() < until)
        uv_run(&c.loop, UV_RUN_ONCE);
    assert_string_equal(c.messages, "5,5");
    assert_int_equal(c.ends, 0);
    client_down(&c);
    server_end(&s);
    assert_int_equal(s.accepted, 2);
}

/* The server reads a txn on a kept connection, then closes it without an answer (it may
 * have done it): the txn is not sent again (done twice, a compare-and-swap fails its
 * compare), its failure said at once, as one that may have been done (DDP_ETIMEOUT, as
 * unanswered in time). */
static void test_txn_not_sent_again(void **state)
{
    (void)state;
    server_t s = {.nanswers = 2};
    s.answers[0] =
        (answer_script_t){.pieces = {"HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\n{\"n\": 1}"}};
    server_start(&s);
    client_t c;
    client_up_at(&c, &s, &s.port, 1, 3.0);
    post_and_wait(&c, false, 1);
    double t0 = now_s();
    post_to_and_wait(&c, "/v3/kv/txn", false, 2);
    double took = now_s() - t0;
    assert_int_equal(c.err, DDP_ETIMEOUT);
    if (strstr(c.why, "lost before a response") == NULL || took > 2.0)
        fail_msg("after %.2f s: '%s'", took, c.why);
    client_down(&c);
    server_end(&s);
    assert_int_equal(s.served, 2);
    assert_int_equal(s.accepted, 1);
}

/* An answer nobody asked for comes after the last one, in the socket before the next
 * request takes the kept connection: the connection is not reused (its bytes would be
 * taken for the next answer, every later one shifted by one), the request goes on a new
 * one. */
static void test_stray_answer_not_taken(void **state)
{
    (void)state;
    server_t s = {.nanswers = 2, .reaccept = true};
    s.answers[0] =
        (answer_script_t){.pieces = {"HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\n{\"n\": 1}",
                                     "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n{\"n\": 666}"},
                          .after = {0, 1}};
    s.answers[1] =
        (answer_script_t){.pieces = {"HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\n{\"n\": 2}"}};
    server_start(&s);
    client_t c;
    client_up(&c, &s);
    post_and_wait(&c, false, 1);
    double until = now_s() + WAIT_MS / 1000.0; /* the stray in the socket, not yet read */
    while (atomic_load(&s.sent) < 2 && now_s() < until)
        sched_yield();
    assert_int_equal(atomic_load(&s.sent), 2);
    post_and_wait(&c, false, 2);
    assert_string_equal(c.messages, "1,2");
    assert_int_equal(c.ends, 0);
    client_down(&c);
    server_end(&s);
    assert_int_equal(s.accepted, 2);
}

/* The server answers, then closes the connection while idle (no "Connection: close"; a
 * proxy's idle timeout): a txn posted once the close is in the socket goes on a new
 * connection, answered (it took the closed one and failed, never read by the server). */
static void test_idle_close_not_reused(void **state)
{
    (void)state;
    server_t s = {.nanswers = 2, .one_each = true};
    s.answers[0] =
        (answer_script_t){.pieces = {"HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\n{\"n\": 1}"}};
    s.answers[1] =
        (answer_script_t){.pieces = {"HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\n{\"n\": 2}"}};
    server_start(&s);
    client_t c;
    client_up(&c, &s);
    post_and_wait(&c, false, 1);
    double until = now_s() + WAIT_MS / 1000.0; /* the close in the socket, not yet read */
    while (atomic_load(&s.closed) < 1 && now_s() < until)
        sched_yield();
    assert_int_equal(atomic_load(&s.closed), 1);
    post_to_and_wait(&c, "/v3/kv/txn", false, 2);
    if (strcmp(c.messages, "1,2") != 0 || c.ends != 0)
        fail_msg("'%s', %d failed: '%s'", c.messages, c.ends, c.why);
    client_down(&c);
    server_end(&s);
    assert_int_equal(s.accepted, 2);
}

/* A range on a kept connection held 0.8 s, the connection then closed unanswered: sent
 * again on a new one, held 0.8 s there too. It ends at its 1 s timeout from its post, not
 * a new timeout from its resend (answered after 1.6 s). */
static void test_resend_keeps_the_deadline(void **state)
{
    (void)state;
    server_t s = {.nanswers = 2};
    const char *ok = "HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\n{\"n\": 1}";
    s.answers[0] = (answer_script_t){.pieces = {ok}};
    s.answers[1] = (answer_script_t){.pieces = {ok}, .hold_ms = 800, .drop = true};
    server_start(&s);
    client_t c;
    client_up_at(&c, &s, &s.port, 1, 1.0);
    post_and_wait(&c, false, 1);
    double t0 = now_s();
    post_and_wait(&c, false, 2);
    double took = now_s() - t0;
    assert_int_equal(c.replies, 1);
    assert_int_equal(c.err, DDP_ETIMEOUT);
    if (took < 0.9 || took > 1.5)
        fail_msg("ended after %.2f s, not its 1 s timeout: '%s'", took, c.why);
    client_down(&c);
    server_end(&s);
    assert_int_equal(s.accepted, 2);
}

/* Interim answers (100 Continue, 103 Early Hints) before the final one: skipped, the final
 * one read on the same connection, which is kept for the next request. */
static void test_interim_answers_skipped(void **state)
{
    (void)state;
    server_t s = {.nanswers = 3, .keep_open = true};
    s.answers[0] = (answer_script_t){.pieces = {"HTTP/1.1 100 Continue\r\n\r\n",
                                                "HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\n"
                                                "{\"n\": 3}"}};
    s.answers[1] = (answer_script_t){
        .pieces = {"HTTP/1.1 103 Early Hints\r\nLink: </a>; rel=preload\r\n\r\n"
                   "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\n"
                   "{\"n\": 4}"}};
    /* A broken server's 1xx with a body: the body is not the final answer's. */
    s.answers[2] = (answer_script_t){
        .pieces = {"HTTP/1.1 100 Continue\r\nContent-Length: 10\r\n\r\n{\"n\": 666}"
                   "HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\n{\"n\": 5}"}};
    server_start(&s);
    client_t c;
    client_up(&c, &s);
    post_and_wait(&c, false, 1);
    post_and_wait(&c, false, 2);
    post_and_wait(&c, false, 3);
    assert_string_equal(c.messages, "3,4,5");
    assert_int_equal(c.ends, 0);
    client_down(&c);
    server_end(&s);
    assert_int_equal(s.accepted, 1);
}

/* The server's wait for a connection ended by one of the test's own (counted). */
static void server_release(server_t *s)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in addr = {.sin_family = AF_INET,
                               .sin_port = htons((uint16_t)s->port),
                               .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(connect(fd, (struct sockaddr *)&addr, sizeof addr), 0);
    close(fd);
    server_end(s);
}

#define NO_LEADER                                                                             \
    "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"                  \
    "Content-Length: 77\r\n\r\n{\"error\":\"etcdserver: no leader\",\"code\":14,\"message\":" \
    "\"etcdserver: no leader\"}"

/* A member that answers 503 "no leader" (one cut off from the others, or a proxy in front
 * of a dead one), then a healthy one: the request goes on to the healthy one, and the next
 * request goes there first. */
static void test_error_reply_fails_over(void **state)
{
    (void)state;
    server_t bad = {.nanswers = 1}, good = {.nanswers = 2, .keep_open = true};
    bad.answers[0] = (answer_script_t){.pieces = {NO_LEADER}};
    for (int i = 0; i < 2; i++)
        good.answers[i] =
            (answer_script_t){.pieces = {"HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\n{\"n\": 9}"}};
    server_start(&bad);
    server_start(&good);
    client_t c;
    client_up_at(&c, &good, (int[]){bad.port, good.port}, 2, WAIT_MS / 1000.0);
    post_and_wait(&c, false, 1);
    post_and_wait(&c, false, 2);
    assert_string_equal(c.messages, "9,9");
    assert_int_equal(c.ends, 0);
    client_down(&c);
    server_end(&bad);
    server_end(&good);
    assert_int_equal(bad.served, 1);
    assert_int_equal(good.served, 2);
}

/* etcd's "invalid argument" (HTTP 400) is the request's fault, the same at every member:
 * said, not sent to the next endpoint; an error of every endpoint is said naming them. */
static void test_request_error_not_retried(void **state)
{
    (void)state;
    server_t bad = {.nanswers = 1}, other = {.nanswers = 1};
    bad.answers[0] = (answer_script_t){
        .pieces = {"HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\n"
                   "Content-Length: 96\r\n\r\n{\"error\":\"etcdserver: key is not provided\","
                   "\"code\":3,\"message\":\"etcdserver: key is not provided\"}"}};
    other.answers[0] = (answer_script_t){.pieces = {NO_LEADER}};
    server_start(&bad);
    server_start(&other);
    client_t c;
    client_up_at(&c, &other, (int[]){bad.port, other.port}, 2, WAIT_MS / 1000.0);
    post_and_wait(&c, false, 1);
    assert_int_equal(c.err, DDP_EPROTO);
    if (strstr(c.why, "etcdserver: key is not provided") == NULL)
        fail_msg("'%s'", c.why);
    client_down(&c);
    server_end(&bad);
    server_release(&other);
    assert_int_equal(other.accepted, 1); /* the test's own */

    /* Every member without a leader: the last one's words, every endpoint named. */
    server_t first = {.nanswers = 1}, second = {.nanswers = 1};
    first.answers[0] = second.answers[0] = (answer_script_t){.pieces = {NO_LEADER}};
    server_start(&first);
    server_start(&second);
    client_up_at(&c, &second, (int[]){first.port, second.port}, 2, WAIT_MS / 1000.0);
    post_and_wait(&c, false, 1);
    assert_int_equal(c.err, DDP_EPROTO);
    char both[80];
    snprintf(both, sizeof both, "127.0.0.1:%d,127.0.0.1:%d", first.port, second.port);
    char other_way[80];
    snprintf(other_way, sizeof other_way, "127.0.0.1:%d,127.0.0.1:%d", second.port, first.port);
    if (strstr(c.why, "etcd: etcdserver: no leader") == NULL ||
        (strstr(c.why, both) == NULL && strstr(c.why, other_way) == NULL))
        fail_msg("'%s'", c.why);
    client_down(&c);
    server_end(&first);
    server_end(&second);
    assert_int_equal(first.served + second.served, 2);
}

/* Endpoints that take connections and never answer: a request ends within its timeout
 * in all, each endpoint tried for its share, not the whole timeout at each (5 s for 5). */
static void test_silent_endpoints_within_the_timeout(void **state)
{
    (void)state;
    enum { SILENT = 5 };
    int fds[SILENT], ports[SILENT];
    for (int i = 0; i < SILENT; i++) {
        fds[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_in addr = {.sin_family = AF_INET,
                                   .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        socklen_t len = sizeof addr;
        assert_int_equal(bind(fds[i], (struct sockaddr *)&addr, sizeof addr), 0);
        assert_int_equal(listen(fds[i], 4), 0); /* connections wait, never accepted */
        assert_int_equal(getsockname(fds[i], (struct sockaddr *)&addr, &len), 0);
        ports[i] = ntohs(addr.sin_port);
    }
    server_t none = {0};
    client_t c;
    client_up_at(&c, &none, ports, SILENT, 1.0);
    double t0 = now_s();
    post_and_wait(&c, false, 1);
    double took = now_s() - t0;
    assert_int_equal(c.err, DDP_ETIMEOUT);
    if (took < 0.9 || took > 2.5)
        fail_msg("ended after %.2f s, not the timeout's 1 s: '%s'", took, c.why);
    int named = 0;
    for (int i = 0; i < SILENT; i++) { /* each one was tried; 3 named, the others counted */
        char endpoint[32];
        snprintf(endpoint, sizeof endpoint, "127.0.0.1:%d", ports[i]);
        struct pollfd p = {.fd = fds[i], .events = POLLIN};
        if (poll(&p, 1, 0) != 1)
            fail_msg("%s not tried: '%s'", endpoint, c.why);
        named += strstr(c.why, endpoint) != NULL;
        close(fds[i]);
    }
    if (named != 3 || strstr(c.why, " and 2 more") == NULL)
        fail_msg("not 3 endpoints named and 2 counted: '%s'", c.why);
    client_down(&c);
}

int main(void)
{
#if !DDP_HAVE_HTTP_PARSER
    printf("skipped: built without http-parser (libhttp-parser-dev)\n");
    return 77;
#endif
    signal(SIGPIPE, SIG_IGN); /* as the launcher does (etcd_http.h) */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_headers_cut_short),
        cmocka_unit_test(test_not_http),
        cmocka_unit_test(test_closed_mid_body),
        cmocka_unit_test(test_body_over_the_bound),
        cmocka_unit_test(test_http_500),
        cmocka_unit_test(test_chunked_stream_split_at_odd_places),
        cmocka_unit_test(test_message_in_tiny_pieces),
        cmocka_unit_test(test_many_short_lines),
        cmocka_unit_test(test_connection_kept),
        cmocka_unit_test(test_kept_connection_closed_by_the_server),
        cmocka_unit_test(test_interim_answers_skipped),
        cmocka_unit_test(test_txn_not_sent_again),
        cmocka_unit_test(test_stray_answer_not_taken),
        cmocka_unit_test(test_idle_close_not_reused),
        cmocka_unit_test(test_resend_keeps_the_deadline),
        cmocka_unit_test(test_error_reply_fails_over),
        cmocka_unit_test(test_request_error_not_retried),
        cmocka_unit_test(test_silent_endpoints_within_the_timeout),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
