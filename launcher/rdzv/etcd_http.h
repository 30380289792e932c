/* Plain HTTP/1.1 POSTs on a libuv loop, the etcd client's transport where TLS is not asked:
 * libuv's TCP carries them, http-parser (libhttp-parser-dev) reads every response (status,
 * headers, a body by Content-Length, chunked or to the close; interim 1xx answers but 101
 * skipped for the final one); the requests are written here.
 *
 * Runs on the loop's thread only; nothing blocks (a name is resolved on libuv's pool, a
 * numeric address at once). A plain request reuses a connection kept alive to its endpoint
 * (one request at a time on each; a few are kept idle); a stream has a connection of its
 * own. A request's callbacks may cancel it, post others and free the client. The process
 * ignores SIGPIPE (the launcher does, agent.c): a write to a connection the server closed
 * is an error of its request, not a signal. Built only with http-parser
 * (DDP_HAVE_HTTP_PARSER). */
#ifndef DDP_LAUNCHER_ETCD_HTTP_H
#define DDP_LAUNCHER_ETCD_HTTP_H

#include "log.h"

#include <stdbool.h>
#include <stddef.h>
#include <uv.h>

#define DDP_HTTP_IDLE_MAX 4 /* connections kept idle for the next requests, all endpoints */

typedef struct ddp_http_s ddp_http_t;
typedef struct ddp_http_req_s ddp_http_req_t;

/* How a request ended. */
typedef enum {
    DDP_HTTP_REPLIED,   /* a whole response came: `status` is its */
    DDP_HTTP_UNREACHED, /* not resolved, refused: the request not sent */
    DDP_HTTP_TIMEDOUT,  /* no whole response within the time (a stream: no connection) */
    DDP_HTTP_LOST,      /* the connection lost after the request went, before a response: the
                         * server may have done it */
    DDP_HTTP_BROKEN,    /* what came is not HTTP/1.1, or the connection lost mid-response */
    DDP_HTTP_STOPPED,   /* the body callback said to stop */
    DDP_HTTP_FAILED,    /* (never this transport's: libcurl's for a failure that is not the
                         * endpoint's) */
} ddp_http_end_t;

typedef struct {
    /* Bytes of the response's body as they come (chunks undone), with its status: false ends
     * the request (DDP_HTTP_STOPPED). */
    bool (*body)(void *ctx, int status, const char *data, size_t len);
    /* The request's end, once, unless cancelled: `why` says a failure ("" when REPLIED).
     * The request is gone when it returns. */
    void (*end)(void *ctx, ddp_http_end_t end, int status, const char *why);
} ddp_http_cbs_t;

/* A client on `loop`. NULL: out of memory. */
ddp_http_t *ddp_http_new(uv_loop_t *loop, const ddp_log_t *log);

/* POSTs `body` (JSON, copied) to http://`endpoint``path`; `endpoint` is "HOST:PORT" or
 * "[ADDR]:PORT" (copied). A plain request must end within `timeout_ms` (connecting, a
 * name's next addresses and a resend included); a stream (`stream`) must connect within it, then
 * has no deadline. A plain request found its kept connection closed before any byte of its response
 * is sent again on a new connection only where it is `idempotent` (the same done twice: a read), as
 * the server may have done it before its close. `cbs` must outlive the request. 0, DDP_EUSAGE (an
 * endpoint that is not HOST:PORT) or -ENOMEM; no callback then. */
int ddp_http_post(ddp_http_t *h, const char *endpoint, const char *path, const char *body,
                  bool stream, bool idempotent, long timeout_ms, const ddp_http_cbs_t *cbs,
                  void *ctx, ddp_http_req_t **out);

/* Ends a request before its end without a callback; its connection is closed. */
void ddp_http_cancel(ddp_http_req_t *req);

/* Ends every request without its callbacks and frees the client once its handles have
 * closed on the loop. */
void ddp_http_free(ddp_http_t *h);

#endif
