/* Messages for the error codes of error.h. */
#include "error.h"

#include <errno.h>
#include <string.h>

const char *ddp_strerror(int err)
{
    switch (err) {
#define DDP_ERROR_CASE(name, msg) \
    case DDP_E##name:             \
        return msg;
        DDP_ERROR_MAP(DDP_ERROR_CASE)
#undef DDP_ERROR_CASE
    default:
        break;
    }
    if (err == 0)
        return "success";
    if (err < 0 && err > DDP__ERROR_FIRST)
        return strerror(-err);
    return "unknown error";
}

int ddp_error_from_errno(int errnum)
{
    switch (errnum) {
    case EPIPE:
    case ECONNRESET:
    case ECONNABORTED:
    case ENOTCONN:
    case ESHUTDOWN:
        return DDP_ECLOSED;
    default:
        return -errnum;
    }
}
