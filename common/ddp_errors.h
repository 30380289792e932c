/* libddp's error codes, shared with ddp-launch.
 *
 * Fallible functions return 0 or a negative code: a system error passes as -errno,
 * libddp's own failures use the DDP_E* codes below, generated from one table together
 * with the messages ddp_strerror() returns. The values are part of the ABI: new codes
 * go at the end. */
#ifndef DDP_ERRORS_H
#define DDP_ERRORS_H

#define DDP_ERROR_MAP(X)                       \
    X(USAGE, "invalid usage")                  \
    X(PARSE, "malformed input")                \
    X(TOOBIG, "input over its size limit")     \
    X(TIMEOUT, "timed out")                    \
    X(PROTO, "protocol error")                 \
    X(CLOSED, "connection closed by the peer") \
    X(NOCUDA, "no GPU or no CUDA support")     \
    X(CUDA, "CUDA driver error")               \
    X(INTERNAL, "internal error")              \
    X(NOTFILE, "it is not a regular file")

enum {
    DDP__ERROR_FIRST = -20000,
#define DDP_ERROR_ENUM(name, msg) DDP_E##name,
    DDP_ERROR_MAP(DDP_ERROR_ENUM)
#undef DDP_ERROR_ENUM
        DDP__ERROR_LAST
};

#endif
