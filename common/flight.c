/* The flight recorder ring's reader (see flight.h). */
#include "flight.h"

#include "ddp_errors.h"
#include "io.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

const char *ddp_flight_op_name(int32_t op)
{
    static const char *const names[] = {
        "?",      "all_reduce",     "barrier",    "broadcast", "all_gather",
        "reduce", "reduce_scatter", "all_to_all", "gather",    "scatter",
        "send"};
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

void ddp_describe_call(int op, uint64_t seq, uint64_t count, int dtype, int reduce_op, int root,
                       char *buf, size_t cap)
{
    int n = snprintf(buf, cap, "%s #%llu", ddp_flight_op_name(op), (unsigned long long)seq);
    if (n < 0 || (size_t)n >= cap || op == DDP_FLIGHT_BARRIER)
        return;
    char *at = buf + n;
    size_t left = cap - (size_t)n;
    unsigned long long elements = (unsigned long long)count;
    const char *type = ddp_dtype_name(dtype), *how = ddp_op_name(reduce_op);
    switch (op) {
    case DDP_FLIGHT_ALL_REDUCE:
    case DDP_FLIGHT_REDUCE_SCATTER:
        snprintf(at, left, " of %llu %s (%s)", elements, type, how);
        break;
    case DDP_FLIGHT_REDUCE:
        snprintf(at, left, " of %llu %s (%s) to rank %d", elements, type, how, root);
        break;
    case DDP_FLIGHT_BROADCAST:
    case DDP_FLIGHT_SCATTER:
        snprintf(at, left, " of %llu %s from rank %d", elements, type, root);
        break;
    case DDP_FLIGHT_GATHER:
        snprintf(at, left, " of %llu %s to rank %d", elements, type, root);
        break;
    case DDP_FLIGHT_SEND:
        snprintf(at, left, " of %llu %s", elements, type);
        break;
    default:
        snprintf(at, left, " of %llu %s a rank", elements, type);
        break;
    }
}

void ddp_flight_describe(const ddp_flight_entry_t *e, char *buf, size_t cap)
{
    ddp_describe_call(e->op, e->seq, e->count, e->dtype, e->reduce_op, e->root, buf, cap);
}

/* Whether every value the launcher uses is in range (see ddp_flight_read). */
static bool in_range(const ddp_flight_ring_t *ring)
{
    if (ring->entered > DDP_FLIGHT_MAX_SEQ || ring->completed > DDP_FLIGHT_MAX_SEQ ||
        ring->world_size < 0 || ring->world_size > DDP_FLIGHT_MAX_WORLD || ring->rank < -1 ||
        ring->rank >= DDP_FLIGHT_MAX_WORLD)
        return false;
    for (int i = 0; i < DDP_FLIGHT_SLOTS; i++) {
        const ddp_flight_entry_t *e = &ring->slots[i];
        if (e->seq > DDP_FLIGHT_MAX_SEQ || e->entered_ns < 0 || e->entered_ns > DDP_FLIGHT_MAX_NS ||
            e->left_ns < 0 || e->left_ns > DDP_FLIGHT_MAX_NS)
            return false;
    }
    return true;
}

int ddp_flight_read(const char *path, ddp_flight_ring_t *out)
{
    int err = ddp_read_head(path, out, sizeof *out);
    if (err)
        return err;
    if (out->magic != DDP_FLIGHT_MAGIC || out->version != DDP_FLIGHT_VERSION || !in_range(out))
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
