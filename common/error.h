/* Error codes shared by the launcher and libddp: the DDP_E* codes of ddp_errors.h
 * beside this file (libddp installs it as its public header; system errors pass as
 * -errno, so libuv's codes flow through unchanged), and their messages. Pure; no
 * state. */
#ifndef DDP_COMMON_ERROR_H
#define DDP_COMMON_ERROR_H

#include "ddp_errors.h"

/* A static, human-readable string for any code returned by ddp functions. */
const char *ddp_strerror(int err);

/* A socket's system error `errnum` as a code: DDP_ECLOSED where the peer went away
 * (EPIPE, ECONNRESET, ECONNABORTED, ENOTCONN, ESHUTDOWN), else -errnum. */
int ddp_error_from_errno(int errnum);

#endif
