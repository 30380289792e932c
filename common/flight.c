/* The flight recorder ring's reader (see flight.h). */
#include "flight.h"

#include "ddp_errors.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

const char *ddp_flight_op_name(int32_t op)
{
    static const char *const names[] = {"?",          "all_reduce", "barrier",        "broadcast",
                                        "all_gather", "reduce",     "reduce_scatter", "all_to_all",
                                        "gather",     "scatter"};
    return op > 0 && (size_t)op < sizeof names / sizeof names[0] ? names[op] : "?";
}

const char *ddp_dtype_name(int dtype)
{
    static const char *const names[] = {"float32", "float64", "int32",
                                        "int64",   "float16", "bfloat16"};
    return dtype >= 0 && (size_t)dtype < sizeof names / sizeof names[0] ? names[dtype] : "?";
}

const char *ddp_op_name(int op)
{
    static const char *const names[] = {"sum", "avg", "min", "max"};
    return op >= 0 && (size_t)op < sizeof names / sizeof names[0] ? names[op] : "?";
}

void ddp_flight_describe(const ddp_flight_entry_t *e, char *buf, size_t cap)
{
    const char *dtype = ddp_dtype_name(e->dtype);
    unsigned long long seq = (unsigned long long)e->seq, count = (unsigned long long)e->count;
    switch (e->op) {
    case DDP_FLIGHT_ALL_REDUCE:
        snprintf(buf, cap, "all_reduce #%llu of %llu %s (%s)", seq, count, dtype,
                 ddp_op_name(e->reduce_op));
        break;
    case DDP_FLIGHT_BROADCAST:
        snprintf(buf, cap, "broadcast #%llu of %llu %s from rank %d", seq, count, dtype, e->root);
        break;
    case DDP_FLIGHT_ALL_GATHER:
    case DDP_FLIGHT_ALL_TO_ALL:
        snprintf(buf, cap, "%s #%llu of %llu %s a rank", ddp_flight_op_name(e->op), seq, count,
                 dtype);
        break;
    case DDP_FLIGHT_REDUCE_SCATTER:
        snprintf(buf, cap, "reduce_scatter #%llu of %llu %s a rank (%s)", seq, count, dtype,
                 ddp_op_name(e->reduce_op));
        break;
    case DDP_FLIGHT_REDUCE:
        snprintf(buf, cap, "reduce #%llu of %llu %s (%s) to rank %d", seq, count, dtype,
                 ddp_op_name(e->reduce_op), e->root);
        break;
    case DDP_FLIGHT_GATHER:
        snprintf(buf, cap, "%s #%llu of %llu %s to rank %d", ddp_flight_op_name(e->op), seq, count,
                 dtype, e->root);
        break;
    case DDP_FLIGHT_SCATTER:
        snprintf(buf, cap, "%s #%llu of %llu %s from rank %d", ddp_flight_op_name(e->op), seq,
                 count, dtype, e->root);
        break;
    default:
        snprintf(buf, cap, "%s #%llu", ddp_flight_op_name(e->op), seq);
        break;
    }
}

int ddp_flight_read(const char *path, ddp_flight_ring_t *out)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return -errno;
    ssize_t n = pread(fd, out, sizeof *out, 0);
    int err = n < 0 ? -errno : 0;
    close(fd);
    if (err)
        return err;
    if ((size_t)n < sizeof *out || out->magic != DDP_FLIGHT_MAGIC ||
        out->version != DDP_FLIGHT_VERSION)
        return DDP_EPARSE;
    out->group[sizeof out->group - 1] = '\0';
    return 0;
}

const ddp_flight_entry_t *ddp_flight_entry(const ddp_flight_ring_t *ring, uint64_t seq)
{
    if (seq == 0)
        return NULL;
    const ddp_flight_entry_t *e = &ring->slots[(seq - 1) % DDP_FLIGHT_SLOTS];
    return e->seq == seq ? e : NULL;
}
