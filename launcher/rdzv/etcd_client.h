/* A client of etcd's v3 API through its HTTP/JSON gateway, on a libuv loop: libcurl's
 * multi-socket interface drives every request from the loop's own poll and timer handles.
 *
 * libcurl is loaded at run time (dlopen "libcurl.so.4"): ddp-launch needs it only with
 * --rdzv-backend=etcd, and the installed binary depends on nothing but glibc. Everything
 * runs on the loop's thread; nothing blocks. Requests go to one endpoint at a time (the first
 * one a launcher uses is chosen by its pid, spreading many launchers over the members); one
 * that cannot be reached (refused, no route, a TLS failure, no answer within the request's
 * time, an answer that is not HTTP or an HTTP error of its own: a 5xx but 501, 429, 408) is
 * left for the next, and the request is sent there, until every endpoint has been tried
 * once for it or its timeout has passed: until etcd has answered the client once, a plain
 * request's timeout is shared by the endpoints it has yet to try, so that it ends within
 * it however many there are. A reply is checked in value: what is not the JSON etcd
 * writes is an error, never trusted; a message over DDP_ETCD_MAX_REPLY bytes ends its
 * request. */
#ifndef DDP_LAUNCHER_ETCD_CLIENT_H
#define DDP_LAUNCHER_ETCD_CLIENT_H

#include "buf.h"
#include "json.h"
#include "log.h"

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#define DDP_ETCD_MAX_REPLY (8u << 20) /* bytes of one reply, or one message of a stream */

typedef struct ddp_etcd_s ddp_etcd_t;
typedef struct ddp_etcd_call_s ddp_etcd_call_t;

typedef struct {
    const char *const *endpoints; /* "HOST:PORT", IPv6 as "[ADDR]:PORT" */
    size_t nendpoints;
    bool https;                      /* protocol=https */
    const char *cacert, *cert, *key; /* TLS files, or NULL */
    double timeout; /* s a request may take (at every endpoint together until etcd answered) */
} ddp_etcd_opts_t;

/* A reply (err 0: `reply` is the JSON object etcd answered, valid during the call), or
 * the request's end (err < 0: `why` says what failed, naming the endpoints tried). A plain
 * request's DDP_ETIMEOUT: unanswered in time, or its connection lost after it went; either
 * way etcd may have done it. A stream's callback runs once a message, then once with its end
 * (err < 0; DDP_ECLOSED when the server ended it). */
typedef void (*ddp_etcd_cb_t)(void *ctx, int err, const ddp_json_t *reply, const char *why);

/* Loads libcurl and sets up a client on `loop` (the options are copied). 0; DDP_EUSAGE
 * with `why` (no libcurl here, no endpoint); -ENOMEM. */
int ddp_etcd_new(uv_loop_t *loop, const ddp_etcd_opts_t *opts, const ddp_log_t *log,
                 ddp_etcd_t **out, ddp_buf_t *why);

/* POSTs `body` (JSON, copied) to `path` ("/v3/kv/range", ...). A stream (`stream`: a watch,
 * or a keep-alive of many messages) has no deadline and calls back per message. The call
 * may be cancelled with ddp_etcd_cancel until its callback has said its end; *out may be
 * NULL. 0 or -ENOMEM (no callback then). */
int ddp_etcd_post(ddp_etcd_t *e, const char *path, const char *body, bool stream, ddp_etcd_cb_t cb,
                  void *ctx, ddp_etcd_call_t **out);

/* Ends a call in flight without its callback. */
void ddp_etcd_cancel(ddp_etcd_call_t *call);

/* The loop the client runs on. */
uv_loop_t *ddp_etcd_loop(const ddp_etcd_t *e);

/* The endpoint requests go to now ("HOST:PORT"), and all of them as one text for messages
 * (ddp_etcd_endpoints_text's). */
const char *ddp_etcd_endpoint(const ddp_etcd_t *e);
const char *ddp_etcd_endpoints(const ddp_etcd_t *e);

/* Whether etcd's answers showed it lost its data since this client first reached it (a
 * member restarted from an empty data directory): the cluster id in their headers changed,
 * or their revision went back (and has not come up to the highest seen again). Why, as
 * "its revision went back from X to Y", or NULL. */
const char *ddp_etcd_data_lost(const ddp_etcd_t *e);
/* What etcd's answers say now is the cluster from here on (a new lease taken in it): no
 * loss is seen in what came before. */
void ddp_etcd_data_lost_clear(ddp_etcd_t *e);

/* Appends `endpoints` (n of them) to `out` as a message names them: "A,B,C", or past three
 * (or 160 bytes) "A,B,C and N more", so that what follows in a line is never cut. 0 or
 * -ENOMEM. */
int ddp_etcd_endpoints_text(ddp_buf_t *out, const char *const *endpoints, size_t n);

/* Ends every call without its callback and frees the client once its handles have closed
 * on the loop. */
void ddp_etcd_free(ddp_etcd_t *e);

/* Bodies and replies. Keys and values travel in base64; numbers as decimal strings. */

/* {"key": K, "value": V[, "lease": L]} for /v3/kv/put. 0 or -ENOMEM. */
int ddp_etcd_body_put(ddp_buf_t *out, const char *key, const void *value, size_t len,
                      int64_t lease);

/* {"key": K[, "range_end": END]} for /v3/kv/range and /v3/kv/deleterange; `prefix`: every
 * key beginning with K. */
int ddp_etcd_body_range(ddp_buf_t *out, const char *key, bool prefix);

/* A watch of K (a prefix when `prefix`) from revision `from` (0: now). */
int ddp_etcd_body_watch(ddp_buf_t *out, const char *key, bool prefix, int64_t from);

/* A transaction that puts K=V (under `lease`, 0: none) when K does not exist, else reads
 * it. */
int ddp_etcd_body_create(ddp_buf_t *out, const char *key, const void *value, size_t len,
                         int64_t lease);

/* A transaction that puts K=V (no lease) where K was last modified at `mod_revision` (0:
 * where K does not exist): a compare-and-swap. */
int ddp_etcd_body_put_if(ddp_buf_t *out, const char *key, const void *value, size_t len,
                         int64_t mod_revision);

/* A launcher's join of a job under `prefix` in one transaction: its member key
 * `member_key`=`member` under `lease`, and the coordinator's key `coord_key` taken with
 * `record` where absent (NULL: only read). `clear`: where no key under <prefix>node/
 * exists (a finished job's leftovers, no live launcher), the rest of the prefix is deleted
 * instead of electing (succeeded, the key then absent). `keep`: where the coordinator's key
 * holds `record` (this launcher's, under a lease it lost), it is put again under `lease`
 * (succeeded). Otherwise the reply's responses hold the election's: a response_txn
 * (succeeded: taken; else its response_range) or a response_range. */
typedef struct {
    const char *prefix, *member_key, *member, *coord_key, *record;
    int64_t lease;
    bool clear, keep;
} ddp_etcd_join_t;

int ddp_etcd_body_join(ddp_buf_t *out, const ddp_etcd_join_t *j);

/* Whether a transaction's reply says its compare held. */
bool ddp_etcd_succeeded(const ddp_json_t *txn);

/* A decimal string or number field of a reply (etcd writes int64s as strings): false
 * when absent or not an integer. */
bool ddp_etcd_int(const ddp_json_t *object, const char *field, int64_t *out);

/* The base64 field `field` (key, value) of a key-value, decoded into `out` (cleared
 * first). 0, DDP_EPARSE, -ENOMEM; a missing field is empty. */
int ddp_etcd_bytes(const ddp_json_t *kv, const char *field, ddp_buf_t *out);

#endif
