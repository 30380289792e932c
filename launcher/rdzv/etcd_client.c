/* etcd's v3 gateway (see etcd_client.h) over one of two transports, chosen at ddp_etcd_new:
 * plain http over libuv's TCP with http-parser (etcd_http.c), where it was built in; else,
 * and always for https, libcurl's multi-socket interface (loaded then, never for http with
 * http-parser: its loading and start cost a launcher more CPU than a whole c10d
 * rendezvous). Runs on the loop's thread only. libcurl's handles on the loop: one uv_poll_t
 * a socket it opens (its CURL_POLL_* wishes), one timer for its own deadlines. */
#include "rdzv/etcd_client.h"

#include "base64.h"
#include "config/config.h"
#include "ddp_config.h"
#include "dl.h"
#include "error.h"
#include "io.h"
#include "rdzv/etcd_http.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if DDP_HAVE_LIBCURL || DDP_HAVE_HTTP_PARSER
#if DDP_HAVE_LIBCURL
#include <curl/curl.h>

/* libcurl's functions, from dlopen. */
typedef struct {
    void *lib;
    CURLcode (*global_init)(long);
    CURLM *(*multi_init)(void);
    CURLMcode (*multi_setopt)(CURLM *, CURLMoption, ...);
    CURLMcode (*multi_socket_action)(CURLM *, curl_socket_t, int, int *);
    CURLMsg *(*multi_info_read)(CURLM *, int *);
    CURLMcode (*multi_add_handle)(CURLM *, CURL *);
    CURLMcode (*multi_remove_handle)(CURLM *, CURL *);
    CURLMcode (*multi_assign)(CURLM *, curl_socket_t, void *);
    CURLMcode (*multi_cleanup)(CURLM *);
    CURL *(*easy_init)(void);
    CURLcode (*easy_setopt)(CURL *, CURLoption, ...);
    CURLcode (*easy_getinfo)(CURL *, CURLINFO, ...);
    void (*easy_cleanup)(CURL *);
    const char *(*easy_strerror)(CURLcode);
    struct curl_slist *(*slist_append)(struct curl_slist *, const char *);
    void (*slist_free_all)(struct curl_slist *);
} curl_api_t;
#endif

struct ddp_etcd_call_s {
    ddp_etcd_t *e;
#if DDP_HAVE_LIBCURL
    CURL *easy;
#endif
#if DDP_HAVE_HTTP_PARSER
    ddp_http_req_t *req;
#endif
    char *path, *body;
    bool stream;
    ddp_etcd_cb_t cb;
    void *ctx;
    size_t first;    /* the endpoint it was first sent to */
    size_t tried;    /* endpoints tried */
    uint64_t until;  /* the loop's ms by which it ends, at every endpoint together */
    ddp_buf_t in;    /* the reply so far (a stream: its unfinished message) */
    size_t scanned;  /* (a stream) bytes of `in` known to hold no newline */
    bool too_big;    /* a message over DDP_ETCD_MAX_REPLY */
    bool delivered;  /* a stream: a message came (then an end is not the endpoint's fault) */
    bool cancelled;  /* during a dispatch: freed at its end (the graveyard) */
    bool pending;    /* posted during a dispatch: started at its end */
    char error[256]; /* the transport's words on a failure (CURL_ERROR_SIZE) */
    ddp_etcd_call_t *prev, *next;
};

#if DDP_HAVE_LIBCURL
/* A socket libcurl watches: its poll handle, freed once closed. */
typedef struct sock_s {
    uv_poll_t poll;
    ddp_etcd_t *e;
    curl_socket_t fd;
    struct sock_s *prev, *next; /* the client's, until its handle closes */
} sock_t;
#endif

struct ddp_etcd_s {
    uv_loop_t *loop;
    const ddp_log_t *log;
#if DDP_HAVE_HTTP_PARSER
    ddp_http_t *http; /* plain http: the transport; NULL: libcurl's */
#endif
#if DDP_HAVE_LIBCURL
    curl_api_t api;
    CURLM *multi;
    struct curl_slist *headers;
    sock_t *socks;
#endif
    uv_timer_t timer; /* libcurl's; closed last, then the client freed */
    char **endpoints;
    size_t nendpoints, current;
    char *all_endpoints;
    bool answered; /* etcd answered a request (status 200) once */
    /* What the headers of etcd's answers said (ddp_etcd_data_lost): the cluster id first
     * seen, the highest revision, and the first sign since that etcd lost its data (a
     * revision gone back is taken back once one reaches `lost_from` again: a member that
     * lagged, not a loss). */
    char cluster_id[32], last_cluster_id[32];
    int64_t revision, lost_from, last_revision;
    char data_lost[160];
    bool https;
    char *cacert, *cert, *key;
    long timeout_ms;
    ddp_etcd_call_t *calls; /* in flight */
    /* Inside on_poll or on_timer (libcurl's callbacks may be on the stack): a call cancelled
     * meanwhile waits in `graveyard`, one posted in `pending`, and the client's own free,
     * until the dispatch ends (libcurl allows no handle to be added or removed from its
     * callbacks). */
    bool dispatching, freeing;
    ddp_etcd_call_t *graveyard, *pending;
};

#if DDP_HAVE_LIBCURL
static int load_curl(curl_api_t *api, ddp_buf_t *why)
{
    api->lib = dlopen("libcurl.so.4", RTLD_NOW | RTLD_LOCAL);
    if (api->lib == NULL) {
        ddp_buf_printf(why, "--rdzv-backend=etcd needs libcurl (libcurl.so.4): %s", dlerror());
        return DDP_EUSAGE;
    }
    bool ok = true;
#define SYM(field, name) ok = ddp_dl_symbol(api->lib, name, &api->field, sizeof api->field) && ok
    SYM(global_init, "curl_global_init");
    SYM(multi_init, "curl_multi_init");
    SYM(multi_setopt, "curl_multi_setopt");
    SYM(multi_socket_action, "curl_multi_socket_action");
    SYM(multi_info_read, "curl_multi_info_read");
    SYM(multi_add_handle, "curl_multi_add_handle");
    SYM(multi_remove_handle, "curl_multi_remove_handle");
    SYM(multi_assign, "curl_multi_assign");
    SYM(multi_cleanup, "curl_multi_cleanup");
    SYM(easy_init, "curl_easy_init");
    SYM(easy_setopt, "curl_easy_setopt");
    SYM(easy_getinfo, "curl_easy_getinfo");
    SYM(easy_cleanup, "curl_easy_cleanup");
    SYM(easy_strerror, "curl_easy_strerror");
    SYM(slist_append, "curl_slist_append");
    SYM(slist_free_all, "curl_slist_free_all");
#undef SYM
    if (!ok || api->global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        ddp_buf_printf(why, "--rdzv-backend=etcd: the libcurl here (libcurl.so.4) lacks the "
                            "multi-socket interface, or would not start");
        dlclose(api->lib);
        api->lib = NULL;
        return DDP_EUSAGE;
    }
    return 0;
}
#endif

/* Completed transfers. */

static void call_unlink(ddp_etcd_call_t *call)
{
    ddp_etcd_t *e = call->e;
    if (call->prev != NULL)
        call->prev->next = call->next;
    else
        e->calls = call->next;
    if (call->next != NULL)
        call->next->prev = call->prev;
    call->prev = call->next = NULL;
}

/* The call's transfer, if any, ended without its callbacks. */
static void drop_transfer(ddp_etcd_call_t *call)
{
#if DDP_HAVE_HTTP_PARSER
    ddp_http_cancel(call->req);
    call->req = NULL;
#endif
#if DDP_HAVE_LIBCURL
    ddp_etcd_t *e = call->e;
    if (call->easy != NULL) {
        e->api.multi_remove_handle(e->multi, call->easy);
        e->api.easy_cleanup(call->easy);
        call->easy = NULL;
    }
#else
    (void)call;
#endif
}

static void call_free(ddp_etcd_call_t *call)
{
    drop_transfer(call);
    free(call->path);
    free(call->body);
    ddp_buf_free(&call->in);
    free(call);
}

/* A reply's JSON checked: an object, and not an error of the gateway's ({"error": ...,
 * "code": N}); a stream's message is {"result": {...}} or such an error. */
static int check_reply(const char *text, size_t len, ddp_json_t **out, ddp_buf_t *why)
{
    ddp_json_t *root = NULL;
    int err = ddp_json_parse(text, len, &root);
    if (err != 0 || ddp_json_type(root) != DDP_JSON_OBJECT) {
        ddp_buf_printf(why, "not a reply of etcd's v3 gateway: '%.80s'", text);
        ddp_json_free(root);
        return DDP_EPROTO;
    }
    /* {"error": "...", "code": N, "message": "..."}, or in a stream {"error": {"message": ...}} */
    const ddp_json_t *error = ddp_json_get(root, "error");
    if (error != NULL) {
        const char *text_of = ddp_json_string(ddp_json_get(root, "message"), NULL);
        if (text_of == NULL)
            text_of = ddp_json_string(ddp_json_get(error, "message"), NULL);
        if (text_of == NULL)
            text_of = ddp_json_string(error, NULL);
        ddp_buf_printf(why, "etcd: %s", text_of != NULL ? text_of : "an error without a message");
        ddp_json_free(root);
        return DDP_EPROTO;
    }
    *out = root;
    return 0;
}

/* A reply's header ({"header": ...}, a stream's in its result) as etcd's data goes. */
static void note_header(ddp_etcd_t *e, const ddp_json_t *reply)
{
    const ddp_json_t *header = ddp_json_get(reply, "header");
    if (header == NULL)
        header = ddp_json_get(ddp_json_get(reply, "result"), "header");
    size_t len = 0;
    const char *id = ddp_json_string(ddp_json_get(header, "cluster_id"), &len);
    if (id != NULL && len > 0 && len < sizeof e->cluster_id) {
        memcpy(e->last_cluster_id, id, len + 1);
        if (e->cluster_id[0] == '\0')
            memcpy(e->cluster_id, id, len + 1);
        else if (strcmp(e->cluster_id, id) != 0 && (e->data_lost[0] == '\0' || e->lost_from > 0)) {
            snprintf(e->data_lost, sizeof e->data_lost, "its cluster id changed from %s to %s",
                     e->cluster_id, id);
            e->lost_from = 0; /* for good */
        }
    }
    int64_t revision;
    if (!ddp_etcd_int(header, "revision", &revision))
        return;
    e->last_revision = revision;
    if (revision < e->revision && e->data_lost[0] == '\0') {
        snprintf(e->data_lost, sizeof e->data_lost, "its revision went back from %lld to %lld",
                 (long long)e->revision, (long long)revision);
        e->lost_from = e->revision;
    } else if (e->lost_from > 0 && revision >= e->lost_from) {
        e->data_lost[0] = '\0';
        e->lost_from = 0;
    }
    if (revision > e->revision)
        e->revision = revision;
}

/* The message text[len] (a whole reply, or one line of a stream) to `cb`. */
static void deliver(ddp_etcd_call_t *call, ddp_etcd_cb_t cb, void *ctx, const char *text,
                    size_t len)
{
    ddp_buf_t why = DDP_BUF_INIT;
    ddp_json_t *root = NULL;
    int err = check_reply(text, len, &root, &why);
    const ddp_json_t *reply = root;
    if (err == 0 && call->stream && ddp_json_get(root, "result") != NULL)
        reply = ddp_json_get(root, "result");
    call->delivered = call->delivered || err == 0;
    if (err == 0)
        note_header(call->e, reply);
    cb(ctx, err, err == 0 ? reply : NULL, ddp_buf_str(&why));
    ddp_json_free(root);
    ddp_buf_free(&why);
}

/* Bytes of a reply: false ends the transfer. `messages`: a stream's answer (its messages
 * delivered as they come). */
static bool take_data(ddp_etcd_call_t *call, bool messages, const char *data, size_t len)
{
    if (call->cancelled)
        return false; /* the transfer ends: finished() frees it */
    if (call->in.len + len > DDP_ETCD_MAX_REPLY) {
        call->too_big = true;
        return false;
    }
    if (ddp_buf_append(&call->in, data, len) != 0)
        return false;
    if (!messages)
        return true;
    /* A stream's messages end with a newline: each whole one now, the bytes scanned before
     * not scanned again (a message in many small pieces is not scanned whole each time),
     * the lines taken moved out once (not the rest after each: a read of many short lines
     * would be the square of its size). The callback may cancel the call (then nothing
     * more is read). */
    size_t start = 0, scan = call->scanned;
    char *nl;
    while (!call->cancelled &&
           (nl = memchr(call->in.data + scan, '\n', call->in.len - scan)) != NULL) {
        size_t end = (size_t)(nl - call->in.data);
        if (end > start)
            deliver(call, call->cb, call->ctx, call->in.data + start, end - start);
        start = scan = end + 1;
    }
    if (start > 0) {
        memmove(call->in.data, call->in.data + start, call->in.len - start);
        call->in.len -= start;
        call->in.data[call->in.len] = '\0';
    }
    call->scanned = call->in.len;
    return !call->cancelled;
}

#if DDP_HAVE_LIBCURL
static size_t on_data(char *data, size_t size, size_t n, void *userdata)
{
    ddp_etcd_call_t *call = userdata;
    size_t len = size * n;
    return take_data(call, call->stream, data, len) ? len : 0;
}
#endif

static int start_on(ddp_etcd_call_t *call, size_t endpoint);

/* Whether an HTTP status is the endpoint's failure, not the request's: a member or a proxy
 * that cannot serve now (5xx: etcd's "no leader", "request timed out", a gateway's 502 or
 * 504; 429: etcd's "too many requests"; 408), where another member may. 501 is a server
 * that is not etcd's gateway at all; another 4xx is the request's own fault (etcd's
 * "invalid argument"): the same at every member. */
static bool endpoint_status(long status)
{
    return (status >= 500 && status <= 599 && status != 501) || status == 429 || status == 408;
}

/* Whether a failure is the endpoint's (another may answer): it could not be reached, did
 * not answer in time, answered what is not HTTP or an HTTP error of its own
 * (endpoint_status), before any reply came. */
static bool endpoint_failed(const ddp_etcd_call_t *call, ddp_http_end_t ended, long status)
{
    return !call->delivered &&
           (ended == DDP_HTTP_UNREACHED || ended == DDP_HTTP_TIMEDOUT || ended == DDP_HTTP_LOST ||
            ended == DDP_HTTP_BROKEN || (ended == DDP_HTTP_REPLIED && endpoint_status(status)));
}

/* Sends the call again, to the next endpoint, where its own failed and time is left:
 * true when it went. Where it is not sent again, the client's next calls begin at the
 * endpoint after the one that failed last. */
static bool retry_elsewhere(ddp_etcd_call_t *call, ddp_http_end_t ended, long status)
{
    ddp_etcd_t *e = call->e;
    if (!endpoint_failed(call, ended, status))
        return false;
    size_t last = (call->first + call->tried - 1) % e->nendpoints;
    size_t next = (last + 1) % e->nendpoints;
    if (ended == DDP_HTTP_REPLIED) /* (the transport's words are none): the status and body */
        snprintf(call->error, sizeof call->error, "HTTP status %ld: %.160s", status,
                 call->in.data != NULL ? call->in.data : "");
    if (call->tried >= e->nendpoints || uv_now(e->loop) >= call->until) {
        if (e->current == last)
            e->current = next;
        return false;
    }
    ddp_log_debug(e->log, "etcd %s: %s: trying %s", e->endpoints[last], call->error,
                  e->endpoints[next]);
    e->current = next;
    drop_transfer(call);
    ddp_buf_clear(&call->in);
    call->scanned = 0;
    return start_on(call, next) == 0;
}

/* Why a call ended without a reply, into `why`: its error code. */
static int failure(ddp_etcd_call_t *call, ddp_http_end_t ended, long status, ddp_buf_t *why)
{
    ddp_etcd_t *e = call->e;
    const char *where = call->tried > 1
                            ? e->all_endpoints
                            : e->endpoints[(call->first + call->tried - 1) % e->nendpoints];
    if (call->too_big) {
        ddp_buf_printf(why, "etcd at %s: a reply over %u bytes", where, DDP_ETCD_MAX_REPLY);
        return DDP_ETOOBIG;
    }
    if (ended == DDP_HTTP_REPLIED && status == 200) {
        ddp_buf_printf(why, "etcd at %s ended the stream", where);
        return DDP_ECLOSED;
    }
    if (ended == DDP_HTTP_REPLIED) { /* the gateway's error is JSON too: its message */
        ddp_json_t *root = NULL;
        ddp_buf_t said = DDP_BUF_INIT;
        const char *body = call->in.data ? call->in.data : "";
        int err = check_reply(body, call->in.len, &root, &said);
        if (err == 0 || (err == DDP_EPROTO && ddp_json_parse(body, call->in.len, &root) != 0)) {
            ddp_buf_clear(&said); /* not etcd's JSON at all */
            ddp_buf_printf(&said,
                           "HTTP status %ld: not etcd's v3 gateway (etcd 3.4 or later answers "
                           "POST %s)",
                           status, call->path);
        }
        ddp_buf_printf(why, "etcd at %s: %s", where, ddp_buf_str(&said));
        ddp_json_free(root);
        ddp_buf_free(&said);
        return status == 404 || status == 405 || status == 501 ? DDP_EUSAGE : DDP_EPROTO;
    }
    ddp_buf_printf(why, "etcd at %s: %s", where, call->error);
    /* A plain request lost with its connection after it went may have been done, as one
     * unanswered in time may. */
    return ended == DDP_HTTP_TIMEDOUT || (ended == DDP_HTTP_LOST && !call->stream) ? DDP_ETIMEOUT
                                                                                   : DDP_ECLOSED;
}

/* A transfer's end (its words in call->error). Runs where the transport allows the
 * transfer to be removed. */
static void finished(ddp_etcd_call_t *call, ddp_http_end_t ended, long status)
{
    if (call->cancelled)
        return; /* in the graveyard */
    if (retry_elsewhere(call, ended, status))
        return;
    ddp_etcd_cb_t cb = call->cb;
    void *ctx = call->ctx;
    call_unlink(call);
    call->cancelled = true; /* a cancel from its own callback is a no-op */
    call->e->answered = call->e->answered || (ended == DDP_HTTP_REPLIED && status == 200);
    if (ended == DDP_HTTP_REPLIED && status == 200 && !call->stream) {
        deliver(call, cb, ctx, call->in.data != NULL ? call->in.data : "", call->in.len);
    } else {
        ddp_buf_t why = DDP_BUF_INIT;
        int err = failure(call, ended, status, &why);
        cb(ctx, err, NULL, ddp_buf_str(&why));
        ddp_buf_free(&why);
    }
    call_free(call);
}

static void really_free(ddp_etcd_t *e);

/* The end of a dispatch: what waited for it. */
static void dispatch_end(ddp_etcd_t *e)
{
    e->dispatching = false;
    while (e->graveyard != NULL) {
        ddp_etcd_call_t *call = e->graveyard;
        e->graveyard = call->next;
        call_free(call);
    }
    while (e->pending != NULL && !e->freeing) {
        ddp_etcd_call_t *call = e->pending;
        e->pending = call->next;
        call->next = NULL;
        call->pending = false;
        if (start_on(call, call->first) == 0) {
            call->next = e->calls;
            if (e->calls != NULL)
                e->calls->prev = call;
            e->calls = call;
        } else {
            ddp_etcd_cb_t cb = call->cb;
            void *ctx = call->ctx;
            call_free(call);
            cb(ctx, -ENOMEM, NULL, "etcd: out of memory");
        }
    }
    if (e->freeing)
        really_free(e);
}

#if DDP_HAVE_LIBCURL
/* libcurl's result as a transport's end, its words in call->error. */
static void finished_curl(ddp_etcd_call_t *call, CURLcode code)
{
    ddp_etcd_t *e = call->e;
    long status = 0;
    ddp_http_end_t ended = DDP_HTTP_FAILED;
    if (call->cancelled)
        return; /* in the graveyard */
    e->api.easy_getinfo(call->easy, CURLINFO_RESPONSE_CODE, &status);
    switch (code) {
    case CURLE_OK:
        ended = DDP_HTTP_REPLIED;
        break;
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_CONNECT:
    case CURLE_SEND_ERROR:
    case CURLE_SSL_CONNECT_ERROR:
        ended = DDP_HTTP_UNREACHED;
        break;
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING: /* the request went: it may have been done */
        ended = DDP_HTTP_LOST;
        break;
    case CURLE_OPERATION_TIMEDOUT:
        ended = DDP_HTTP_TIMEDOUT;
        break;
    case CURLE_WRITE_ERROR:
        ended = DDP_HTTP_STOPPED;
        break;
    default:
        break;
    }
    if (call->error[0] == '\0')
        snprintf(call->error, sizeof call->error, "%s", e->api.easy_strerror(code));
    finished(call, ended, status);
}

static void check_done(ddp_etcd_t *e)
{
    CURLMsg *msg;
    int left;
    while ((msg = e->api.multi_info_read(e->multi, &left)) != NULL) {
        if (msg->msg != CURLMSG_DONE)
            continue;
        ddp_etcd_call_t *call = NULL;
        e->api.easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&call);
        CURLcode code = msg->data.result;
        if (call != NULL)
            finished_curl(call, code);
    }
}

/* libcurl's sockets and timer on the loop. */

static void on_poll(uv_poll_t *handle, int status, int events)
{
    sock_t *s = handle->data;
    ddp_etcd_t *e = s->e;
    int flags = 0, running;
    if (status < 0)
        flags = CURL_CSELECT_ERR;
    if (events & UV_READABLE)
        flags |= CURL_CSELECT_IN;
    if (events & UV_WRITABLE)
        flags |= CURL_CSELECT_OUT;
    e->dispatching = true;
    e->api.multi_socket_action(e->multi, s->fd, flags, &running);
    check_done(e);
    dispatch_end(e);
}

static void free_sock(uv_handle_t *handle)
{
    free(handle->data);
}

static void close_sock(sock_t *s)
{
    ddp_etcd_t *e = s->e;
    if (s->prev != NULL)
        s->prev->next = s->next;
    else
        e->socks = s->next;
    if (s->next != NULL)
        s->next->prev = s->prev;
    uv_poll_stop(&s->poll);
    uv_close((uv_handle_t *)&s->poll, free_sock);
}

static int on_socket(CURL *easy, curl_socket_t fd, int what, void *userp, void *socketp)
{
    (void)easy;
    ddp_etcd_t *e = userp;
    sock_t *s = socketp;
    if (what == CURL_POLL_REMOVE) {
        if (s != NULL) {
            close_sock(s);
            e->api.multi_assign(e->multi, fd, NULL);
        }
        return 0;
    }
    if (s == NULL) {
        s = calloc(1, sizeof *s);
        if (s == NULL || uv_poll_init_socket(e->loop, &s->poll, fd) != 0) {
            free(s);
            return -1;
        }
        s->e = e;
        s->fd = fd;
        s->poll.data = s;
        s->next = e->socks;
        if (e->socks != NULL)
            e->socks->prev = s;
        e->socks = s;
        e->api.multi_assign(e->multi, fd, s);
    }
    int events = 0;
    if (what == CURL_POLL_IN || what == CURL_POLL_INOUT)
        events |= UV_READABLE;
    if (what == CURL_POLL_OUT || what == CURL_POLL_INOUT)
        events |= UV_WRITABLE;
    uv_poll_start(&s->poll, events, on_poll);
    return 0;
}

static void on_timer(uv_timer_t *timer)
{
    ddp_etcd_t *e = timer->data;
    int running;
    e->dispatching = true;
    e->api.multi_socket_action(e->multi, CURL_SOCKET_TIMEOUT, 0, &running);
    check_done(e);
    dispatch_end(e);
}

static int on_curl_timer(CURLM *multi, long ms, void *userp)
{
    (void)multi;
    ddp_etcd_t *e = userp;
    if (ms < 0)
        uv_timer_stop(&e->timer);
    else
        uv_timer_start(&e->timer, on_timer, (uint64_t)ms, 0);
    return 0;
}

static int start_curl(ddp_etcd_call_t *call, size_t endpoint, long timeout_ms)
{
    ddp_etcd_t *e = call->e;
    const curl_api_t *api = &e->api;
    char url[600];
    snprintf(url, sizeof url, "%s://%s%s", e->https ? "https" : "http", e->endpoints[endpoint],
             call->path);
    CURL *easy = api->easy_init();
    if (easy == NULL)
        return -ENOMEM;
    call->easy = easy;
    api->easy_setopt(easy, CURLOPT_URL, url);
    api->easy_setopt(easy, CURLOPT_PRIVATE, (char *)call);
    api->easy_setopt(easy, CURLOPT_POSTFIELDS, call->body);
    api->easy_setopt(easy, CURLOPT_HTTPHEADER, e->headers);
    api->easy_setopt(easy, CURLOPT_WRITEFUNCTION, on_data);
    api->easy_setopt(easy, CURLOPT_WRITEDATA, call);
    api->easy_setopt(easy, CURLOPT_ERRORBUFFER, call->error);
    api->easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
    api->easy_setopt(easy, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms);
    api->easy_setopt(easy, CURLOPT_PROTOCOLS_STR, e->https ? "https" : "http");
    if (!call->stream)
        api->easy_setopt(easy, CURLOPT_TIMEOUT_MS, timeout_ms);
    if (e->cacert != NULL)
        api->easy_setopt(easy, CURLOPT_CAINFO, e->cacert);
    if (e->cert != NULL)
        api->easy_setopt(easy, CURLOPT_SSLCERT, e->cert);
    if (e->key != NULL)
        api->easy_setopt(easy, CURLOPT_SSLKEY, e->key);
    if (api->multi_add_handle(e->multi, easy) != CURLM_OK) {
        api->easy_cleanup(easy);
        call->easy = NULL;
        return -ENOMEM;
    }
    return 0;
}
#endif

#if DDP_HAVE_HTTP_PARSER
/* etcd_http's callbacks: a dispatch of their own (as libcurl's), so that a call cancelled,
 * posted or the client freed from a reply's callback waits for its end. */
static bool on_http_body(void *ctx, int status, const char *data, size_t len)
{
    ddp_etcd_call_t *call = ctx;
    ddp_etcd_t *e = call->e;
    e->dispatching = true;
    bool go = take_data(call, call->stream && status == 200, data, len);
    dispatch_end(e);
    return go;
}

static void on_http_end(void *ctx, ddp_http_end_t end, int status, const char *why)
{
    ddp_etcd_call_t *call = ctx;
    ddp_etcd_t *e = call->e;
    call->req = NULL; /* the transport's request is gone */
    snprintf(call->error, sizeof call->error, "%s", why);
    e->dispatching = true;
    finished(call, (ddp_http_end_t)end, status);
    dispatch_end(e);
}

static const ddp_http_cbs_t http_cbs = {.body = on_http_body, .end = on_http_end};
#endif

/* Requests. */

/* The time of a call's try at its next endpoint. Until etcd has answered the client once
 * (is there etcd at all?), what is left of a plain request's timeout, shared by the
 * endpoints not yet tried (one that fails at once leaves its share to the rest),
 * ATTEMPT_MIN_MS at least while that much is left: the request ends within its timeout
 * however many endpoints there are, and those it had no time for are where the client's
 * next request begins. Once etcd has answered, each endpoint has the whole timeout (a
 * member that lost its leader answers after the new election, which a share would not wait
 * for; the session's keep-alive limit bounds the whole then). A stream (whose timeout is
 * its connection's alone) has the whole timeout at each endpoint too. */
#define ATTEMPT_MIN_MS 100

static long attempt_ms(ddp_etcd_call_t *call)
{
    ddp_etcd_t *e = call->e;
    uint64_t now = uv_now(e->loop);
    if (call->stream || e->answered) {
        call->until = UINT64_MAX;
        return e->timeout_ms;
    }
    if (call->tried == 0)
        call->until = now + (uint64_t)e->timeout_ms;
    long left = call->until > now ? (long)(call->until - now) : 1;
    long share = left / (long)(e->nendpoints - call->tried);
    if (share < ATTEMPT_MIN_MS)
        share = left < ATTEMPT_MIN_MS ? left : ATTEMPT_MIN_MS;
    return share > 0 ? share : 1;
}

#if DDP_HAVE_HTTP_PARSER
/* Whether a request to `path` is the same done twice (a read, a lease's refresh), so that
 * one lost with its connection may be sent again: not a txn, a put, a delete, a lease's
 * grant or revoke (the round record's compare-and-swap done twice fails its compare). */
static bool idempotent(const char *path)
{
    return strcmp(path, "/v3/kv/range") == 0 || strcmp(path, "/v3/lease/keepalive") == 0;
}
#endif

static int start_on(ddp_etcd_call_t *call, size_t endpoint)
{
    long timeout_ms = attempt_ms(call);
    call->tried++;
    call->error[0] = '\0';
#if DDP_HAVE_HTTP_PARSER
    ddp_etcd_t *e = call->e;
    if (e->http != NULL)
        return ddp_http_post(e->http, e->endpoints[endpoint], call->path, call->body, call->stream,
                             idempotent(call->path), timeout_ms, &http_cbs, call, &call->req);
#endif
#if DDP_HAVE_LIBCURL
    return start_curl(call, endpoint, timeout_ms);
#else
    (void)endpoint, (void)timeout_ms;
    return -ENOSYS;
#endif
}

int ddp_etcd_post(ddp_etcd_t *e, const char *path, const char *body, bool stream, ddp_etcd_cb_t cb,
                  void *ctx, ddp_etcd_call_t **out)
{
    ddp_etcd_call_t *call = calloc(1, sizeof *call);
    if (call == NULL)
        return -ENOMEM;
    call->e = e;
    call->path = strdup(path);
    call->body = strdup(body);
    call->stream = stream;
    call->cb = cb;
    call->ctx = ctx;
    call->first = e->current;
    if (call->path == NULL || call->body == NULL) {
        call_free(call);
        return -ENOMEM;
    }
    if (e->dispatching) { /* started at the dispatch's end */
        call->pending = true;
        call->next = e->pending;
        e->pending = call;
        if (out != NULL)
            *out = call;
        return 0;
    }
    if (start_on(call, e->current) != 0) {
        call_free(call);
        return -ENOMEM;
    }
    call->next = e->calls;
    if (e->calls != NULL)
        e->calls->prev = call;
    e->calls = call;
    if (out != NULL)
        *out = call;
    return 0;
}

void ddp_etcd_cancel(ddp_etcd_call_t *call)
{
    if (call == NULL || call->cancelled)
        return;
    ddp_etcd_t *e = call->e;
    if (call->pending) { /* no transfer yet: out of the pending list, and gone */
        ddp_etcd_call_t **at = &e->pending;
        while (*at != call)
            at = &(*at)->next;
        *at = call->next;
        call_free(call);
        return;
    }
    call_unlink(call);
    call->cancelled = true;
    if (!e->dispatching) {
        call_free(call);
        return;
    }
    call->next = e->graveyard;
    e->graveyard = call;
}

const char *ddp_etcd_endpoint(const ddp_etcd_t *e)
{
    return e->endpoints[e->current];
}

uv_loop_t *ddp_etcd_loop(const ddp_etcd_t *e)
{
    return e->loop;
}

const char *ddp_etcd_endpoints(const ddp_etcd_t *e)
{
    return e->all_endpoints;
}

const char *ddp_etcd_data_lost(const ddp_etcd_t *e)
{
    return e->data_lost[0] != '\0' ? e->data_lost : NULL;
}

void ddp_etcd_data_lost_clear(ddp_etcd_t *e)
{
    if (e->data_lost[0] == '\0')
        return;
    memcpy(e->cluster_id, e->last_cluster_id, sizeof e->cluster_id);
    e->revision = e->last_revision;
    e->lost_from = 0;
    e->data_lost[0] = '\0';
}

/* Setup and teardown. */

static void free_client(ddp_etcd_t *e)
{
    for (size_t i = 0; i < e->nendpoints; i++)
        free(e->endpoints[i]);
    free(e->endpoints);
    free(e->all_endpoints);
    free(e->cacert);
    free(e->cert);
    free(e->key);
#if DDP_HAVE_LIBCURL
    if (e->headers != NULL)
        e->api.slist_free_all(e->headers);
    if (e->api.lib != NULL)
        dlclose(e->api.lib);
#endif
    free(e);
}

static void on_timer_closed(uv_handle_t *handle)
{
    free_client(handle->data);
}

static char *copy_or_null(const char *text, bool *ok)
{
    char *copy = text != NULL ? strdup(text) : NULL;
    *ok = *ok && (text == NULL || copy != NULL);
    return copy;
}

static int start_transport(ddp_etcd_t *e, ddp_buf_t *why);

int ddp_etcd_new(uv_loop_t *loop, const ddp_etcd_opts_t *opts, const ddp_log_t *log,
                 ddp_etcd_t **out, ddp_buf_t *why)
{
    if (opts->nendpoints == 0) {
        ddp_buf_puts(why, "--rdzv-backend=etcd: no endpoint (--rdzv-endpoint=HOST:PORT,...)");
        return DDP_EUSAGE;
    }
    /* A TLS file that cannot be read is said as such, not as a handshake's failure; what
     * is not a regular file (a FIFO would block libcurl's open) is never given to it. */
    const char *const files[][2] = {
        {"cacert", opts->cacert}, {"cert", opts->cert}, {"key", opts->key}};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        const char *problem =
            files[i][1] != NULL ? ddp_small_file_problem(files[i][1], DDP_ETCD_FILE_MAX) : NULL;
        if (problem != NULL) {
            ddp_buf_printf(why, "--rdzv-conf %s=%s: %s", files[i][0], files[i][1], problem);
            return DDP_EUSAGE;
        }
    }
    ddp_etcd_t *e = calloc(1, sizeof *e);
    if (e == NULL)
        return -ENOMEM;
    e->loop = loop;
    e->log = log;
    e->https = opts->https;
    e->timeout_ms = (long)(opts->timeout * 1000);
    bool ok = true;
    e->cacert = copy_or_null(opts->cacert, &ok);
    e->cert = copy_or_null(opts->cert, &ok);
    e->key = copy_or_null(opts->key, &ok);
    e->endpoints = calloc(opts->nendpoints, sizeof *e->endpoints);
    ddp_buf_t all = DDP_BUF_INIT;
    for (size_t i = 0; ok && e->endpoints != NULL && i < opts->nendpoints; i++) {
        e->endpoints[i] = copy_or_null(opts->endpoints[i], &ok);
        e->nendpoints += e->endpoints[i] != NULL;
    }
    ok = ok && ddp_etcd_endpoints_text(&all, opts->endpoints, opts->nendpoints) == 0;
    e->all_endpoints = ddp_buf_steal(&all);
    /* Launchers begin at endpoints of their own (by pid): a thousand joining at once load
     * every member's gateway, not the first one's alone. */
    e->current = e->nendpoints > 0 ? (size_t)getpid() % e->nendpoints : 0;
    if (!ok || e->endpoints == NULL || e->all_endpoints == NULL) {
        free_client(e);
        return -ENOMEM;
    }
    int err = start_transport(e, why);
    if (err != 0) {
        free_client(e);
        return err;
    }
    uv_timer_init(loop, &e->timer);
    e->timer.data = e;
    *out = e;
    return 0;
}

#if DDP_HAVE_LIBCURL
static int start_curl_multi(ddp_etcd_t *e, ddp_buf_t *why)
{
    int err = load_curl(&e->api, why);
    if (err != 0)
        return err;
    e->headers = e->api.slist_append(NULL, "Content-Type: application/json");
    e->multi = e->api.multi_init();
    if (e->headers == NULL || e->multi == NULL) {
        if (e->multi != NULL)
            e->api.multi_cleanup(e->multi);
        e->multi = NULL;
        return -ENOMEM;
    }
    e->api.multi_setopt(e->multi, CURLMOPT_SOCKETFUNCTION, on_socket);
    e->api.multi_setopt(e->multi, CURLMOPT_SOCKETDATA, e);
    e->api.multi_setopt(e->multi, CURLMOPT_TIMERFUNCTION, on_curl_timer);
    e->api.multi_setopt(e->multi, CURLMOPT_TIMERDATA, e);
    return 0;
}
#endif

/* Plain http over etcd_http where it was built in; else, and for https, libcurl. */
static int start_transport(ddp_etcd_t *e, ddp_buf_t *why)
{
#if DDP_HAVE_HTTP_PARSER
    if (!e->https) {
        e->http = ddp_http_new(e->loop, e->log);
        return e->http != NULL ? 0 : -ENOMEM;
    }
#endif
#if DDP_HAVE_LIBCURL
    return start_curl_multi(e, why);
#else
    ddp_buf_puts(why, "--rdzv-backend=etcd with protocol=https: this ddp-launch was built "
                      "without libcurl's headers (libcurl4-openssl-dev)");
    return DDP_EUSAGE;
#endif
}

void ddp_etcd_free(ddp_etcd_t *e)
{
    if (e == NULL)
        return;
    if (e->dispatching) {
        e->freeing = true;
        return;
    }
    really_free(e);
}

static void really_free(ddp_etcd_t *e)
{
    while (e->pending != NULL) {
        ddp_etcd_call_t *call = e->pending;
        e->pending = call->next;
        call_free(call);
    }
    while (e->calls != NULL)
        ddp_etcd_cancel(e->calls);
#if DDP_HAVE_HTTP_PARSER
    ddp_http_free(e->http);
    e->http = NULL;
#endif
#if DDP_HAVE_LIBCURL
    if (e->multi != NULL)
        e->api.multi_cleanup(e->multi);
    e->multi = NULL;
    while (e->socks != NULL) /* those the cleanup did not say it removed */
        close_sock(e->socks);
#endif
    uv_timer_stop(&e->timer);
    uv_close((uv_handle_t *)&e->timer, on_timer_closed);
}

#else /* built without libcurl's headers or http-parser */

int ddp_etcd_new(uv_loop_t *loop, const ddp_etcd_opts_t *opts, const ddp_log_t *log,
                 ddp_etcd_t **out, ddp_buf_t *why)
{
    (void)loop, (void)opts, (void)log, (void)out;
    ddp_buf_puts(why, "--rdzv-backend=etcd: this ddp-launch was built without libcurl's headers "
                      "(libcurl4-openssl-dev) and without http-parser (libhttp-parser-dev)");
    return DDP_EUSAGE;
}

int ddp_etcd_post(ddp_etcd_t *e, const char *path, const char *body, bool stream, ddp_etcd_cb_t cb,
                  void *ctx, ddp_etcd_call_t **out)
{
    (void)e, (void)path, (void)body, (void)stream, (void)cb, (void)ctx, (void)out;
    return -ENOSYS;
}

void ddp_etcd_cancel(ddp_etcd_call_t *call)
{
    (void)call;
}

const char *ddp_etcd_endpoint(const ddp_etcd_t *e)
{
    (void)e;
    return "";
}

uv_loop_t *ddp_etcd_loop(const ddp_etcd_t *e)
{
    (void)e;
    return NULL;
}

const char *ddp_etcd_endpoints(const ddp_etcd_t *e)
{
    (void)e;
    return "";
}

const char *ddp_etcd_data_lost(const ddp_etcd_t *e)
{
    (void)e;
    return NULL;
}

void ddp_etcd_data_lost_clear(ddp_etcd_t *e)
{
    (void)e;
}

void ddp_etcd_free(ddp_etcd_t *e)
{
    (void)e;
}

#endif

/* At most this many endpoints, and the second and later ones only within this many bytes,
 * are named in a message: a line holds the reason after them. */
#define ENDPOINTS_SHOWN      3
#define ENDPOINTS_TEXT_BYTES 160

int ddp_etcd_endpoints_text(ddp_buf_t *out, const char *const *endpoints, size_t n)
{
    size_t shown = 0, start = out->len;
    int err = 0;
    while (err == 0 && shown < n && shown < ENDPOINTS_SHOWN &&
           (shown == 0 || out->len - start + strlen(endpoints[shown]) < ENDPOINTS_TEXT_BYTES)) {
        err = ddp_buf_printf(out, "%s%s", shown > 0 ? "," : "", endpoints[shown]);
        shown++;
    }
    if (err == 0 && shown < n)
        err = ddp_buf_printf(out, " and %zu more", n - shown);
    return err;
}

/* Bodies and replies. */

static int append_b64_field(ddp_buf_t *out, const char *name, const void *data, size_t len)
{
    int err = ddp_buf_printf(out, "\"%s\": \"", name);
    if (err == 0)
        err = ddp_base64_encode(out, data, len);
    return err != 0 ? err : ddp_buf_puts(out, "\"");
}

/* The key after every key beginning with `key`: the last byte below 0xff incremented,
 * what follows dropped (etcd's prefix range end); "\0" for every key at all. */
static size_t prefix_end(const char *key, char *end, size_t cap)
{
    size_t len = strlen(key);
    if (len >= cap)
        len = cap - 1;
    memcpy(end, key, len);
    while (len > 0 && (unsigned char)end[len - 1] == 0xff)
        len--;
    if (len == 0) {
        end[0] = '\0';
        return 1;
    }
    end[len - 1] = (char)((unsigned char)end[len - 1] + 1);
    return len;
}

static int append_range(ddp_buf_t *out, const char *key, bool prefix)
{
    int err = append_b64_field(out, "key", key, strlen(key));
    if (err == 0 && prefix) {
        char end[1024];
        size_t n = prefix_end(key, end, sizeof end);
        err = ddp_buf_puts(out, ", ");
        if (err == 0)
            err = append_b64_field(out, "range_end", end, n);
    }
    return err;
}

int ddp_etcd_body_put(ddp_buf_t *out, const char *key, const void *value, size_t len, int64_t lease)
{
    int err = ddp_buf_puts(out, "{");
    if (err == 0)
        err = append_b64_field(out, "key", key, strlen(key));
    if (err == 0)
        err = ddp_buf_puts(out, ", ");
    if (err == 0)
        err = append_b64_field(out, "value", value, len);
    if (err == 0 && lease != 0)
        err = ddp_buf_printf(out, ", \"lease\": \"%lld\"", (long long)lease);
    return err != 0 ? err : ddp_buf_puts(out, "}");
}

int ddp_etcd_body_range(ddp_buf_t *out, const char *key, bool prefix)
{
    int err = ddp_buf_puts(out, "{");
    if (err == 0)
        err = append_range(out, key, prefix);
    return err != 0 ? err : ddp_buf_puts(out, "}");
}

int ddp_etcd_body_watch(ddp_buf_t *out, const char *key, bool prefix, int64_t from)
{
    int err = ddp_buf_puts(out, "{\"create_request\": {");
    if (err == 0)
        err = append_range(out, key, prefix);
    if (err == 0 && from > 0)
        err = ddp_buf_printf(out, ", \"start_revision\": \"%lld\"", (long long)from);
    return err != 0 ? err : ddp_buf_puts(out, "}}");
}

int ddp_etcd_body_create(ddp_buf_t *out, const char *key, const void *value, size_t len,
                         int64_t lease)
{
    int err = ddp_buf_puts(out, "{\"compare\": [{\"target\": \"CREATE\", ");
    if (err == 0)
        err = append_b64_field(out, "key", key, strlen(key));
    if (err == 0)
        err = ddp_buf_puts(out, ", \"create_revision\": \"0\"}], \"success\": [{\"request_put\": ");
    if (err == 0)
        err = ddp_etcd_body_put(out, key, value, len, lease);
    if (err == 0)
        err = ddp_buf_puts(out, "}], \"failure\": [{\"request_range\": ");
    if (err == 0)
        err = ddp_etcd_body_range(out, key, false);
    return err != 0 ? err : ddp_buf_puts(out, "}]}");
}

int ddp_etcd_body_put_if(ddp_buf_t *out, const char *key, const void *value, size_t len,
                         int64_t mod_revision)
{
    int err = ddp_buf_puts(out, "{\"compare\": [{\"target\": \"MOD\", ");
    if (err == 0)
        err = append_b64_field(out, "key", key, strlen(key));
    if (err == 0)
        err =
            ddp_buf_printf(out, ", \"mod_revision\": \"%lld\"}], \"success\": [{\"request_put\": ",
                           (long long)mod_revision);
    if (err == 0)
        err = ddp_etcd_body_put(out, key, value, len, 0);
    return err != 0 ? err : ddp_buf_puts(out, "}]}");
}

/* {"compare": [{"target": "CREATE", K[, range_end], "create_revision": "0"}]: none of the
 * keys exists. */
static int append_absent(ddp_buf_t *out, const char *key, bool prefix)
{
    int err = ddp_buf_puts(out, "{\"target\": \"CREATE\", ");
    if (err == 0)
        err = append_range(out, key, prefix);
    return err != 0 ? err : ddp_buf_puts(out, ", \"create_revision\": \"0\"}");
}

/* ", {request_put: K=V under lease}" */
static int append_put_op(ddp_buf_t *out, const char *key, const char *value, int64_t lease)
{
    int err = ddp_buf_puts(out, ", {\"request_put\": ");
    if (err == 0)
        err = ddp_etcd_body_put(out, key, value, strlen(value), lease);
    return err != 0 ? err : ddp_buf_puts(out, "}");
}

/* The join's election: the coordinator's key taken where absent, else read (a nested
 * transaction); without `record`, only read. */
static int append_elect_op(ddp_buf_t *out, const ddp_etcd_join_t *j)
{
    int err;
    if (j->record == NULL) {
        err = ddp_buf_puts(out, ", {\"request_range\": ");
        if (err == 0)
            err = ddp_etcd_body_range(out, j->coord_key, false);
        return err != 0 ? err : ddp_buf_puts(out, "}");
    }
    err = ddp_buf_puts(out, ", {\"request_txn\": {\"compare\": [");
    if (err == 0)
        err = append_absent(out, j->coord_key, false);
    if (err == 0)
        err = ddp_buf_puts(out, "], \"success\": [{\"request_put\": ");
    if (err == 0)
        err = ddp_etcd_body_put(out, j->coord_key, j->record, strlen(j->record), j->lease);
    if (err == 0)
        err = ddp_buf_puts(out, "}], \"failure\": [{\"request_range\": ");
    if (err == 0)
        err = ddp_etcd_body_range(out, j->coord_key, false);
    return err != 0 ? err : ddp_buf_puts(out, "}]}}");
}

int ddp_etcd_body_join(ddp_buf_t *out, const ddp_etcd_join_t *j)
{
    char members[1024], after[1024];
    snprintf(members, sizeof members, "%snode/", j->prefix);
    snprintf(after, sizeof after, "%snode0", j->prefix); /* ('/' + 1: past node/) */
    /* The first branch needs the outer compare to hold; the second its failure. */
    int err = ddp_buf_puts(out, "{\"compare\": [");
    if (err == 0 && j->clear)
        err = append_absent(out, members, true);
    if (err == 0 && !j->clear && j->keep) {
        err = ddp_buf_puts(out, "{\"target\": \"VALUE\", ");
        if (err == 0)
            err = append_b64_field(out, "key", j->coord_key, strlen(j->coord_key));
        if (err == 0)
            err = ddp_buf_puts(out, ", ");
        if (err == 0)
            err = append_b64_field(out, "value", j->record, strlen(j->record));
        if (err == 0)
            err = ddp_buf_puts(out, "}");
    }
    if (err == 0)
        err = ddp_buf_puts(out, "], \"success\": [{\"request_put\": ");
    if (err == 0)
        err = ddp_etcd_body_put(out, j->member_key, j->member, strlen(j->member), j->lease);
    if (err == 0)
        err = ddp_buf_puts(out, "}");
    if (err == 0 && j->clear) { /* the prefix, but its member keys (none: the compare) */
        char start[1024];
        size_t n = prefix_end(j->prefix, start, sizeof start);
        err = ddp_buf_puts(out, ", {\"request_delete_range\": {");
        if (err == 0)
            err = append_b64_field(out, "key", j->prefix, strlen(j->prefix));
        if (err == 0)
            err = ddp_buf_puts(out, ", ");
        if (err == 0)
            err = append_b64_field(out, "range_end", members, strlen(members));
        if (err == 0)
            err = ddp_buf_puts(out, "}}, {\"request_delete_range\": {");
        if (err == 0)
            err = append_b64_field(out, "key", after, strlen(after));
        if (err == 0)
            err = ddp_buf_puts(out, ", ");
        if (err == 0)
            err = append_b64_field(out, "range_end", start, n);
        if (err == 0)
            err = ddp_buf_puts(out, "}}");
    } else if (err == 0 && j->keep && j->record != NULL) {
        err = append_put_op(out, j->coord_key, j->record, j->lease);
    } else if (err == 0) {
        err = append_elect_op(out, j);
    }
    if (err == 0)
        err = ddp_buf_puts(out, "], \"failure\": [{\"request_put\": ");
    if (err == 0)
        err = ddp_etcd_body_put(out, j->member_key, j->member, strlen(j->member), j->lease);
    if (err == 0)
        err = ddp_buf_puts(out, "}");
    if (err == 0)
        err = append_elect_op(out, j);
    return err != 0 ? err : ddp_buf_puts(out, "]}");
}

bool ddp_etcd_succeeded(const ddp_json_t *txn)
{
    /* (the gateway leaves out a false; another may write it) */
    return ddp_json_true(ddp_json_get(txn, "succeeded"));
}

bool ddp_etcd_int(const ddp_json_t *object, const char *field, int64_t *out)
{
    const ddp_json_t *v = ddp_json_get(object, field);
    size_t len;
    const char *text = ddp_json_string(v, &len);
    double d;
    if (text != NULL) {
        char *end;
        errno = 0;
        long long n = strtoll(text, &end, 10);
        if (errno != 0 || end == text || *end != '\0')
            return false;
        *out = n;
        return true;
    }
    if (ddp_json_number(v, &d) && d >= -9.0e15 && d <= 9.0e15 && d == (double)(int64_t)d) {
        *out = (int64_t)d;
        return true;
    }
    return false;
}

int ddp_etcd_bytes(const ddp_json_t *kv, const char *field, ddp_buf_t *out)
{
    size_t len = 0;
    const char *text = ddp_json_string(ddp_json_get(kv, field), &len);
    ddp_buf_clear(out);
    if (ddp_json_get(kv, field) != NULL && text == NULL)
        return DDP_EPARSE;
    return ddp_base64_decode(out, text != NULL ? text : "", len);
}
