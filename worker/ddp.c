/* libddp's context: init from the launcher's environment, the store connection, the
 * backend, collective entry points, failures (stderr and TORCHELASTIC_ERROR_FILE).
 *
 * Runs on the caller's thread; holds no global state. */
#include "internal.h"

#include "buf.h"
#include "env.h"
#include "error.h"
#include "flight.h"
#include "io.h"
#include "json.h"
#include "parse.h"
#include "sampler.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

/* PyTorch's error file form, which ddp-launch's report (and torchrun's) reads:
 * {"message": {"message": ..., "extraInfo": {"py_callstack": ..., "timestamp": "N"}}},
 * with "peer_rank": "P" in extraInfo when the failure is rank P going away, or rank P not
 * coming to a collective within the timeout (ddp-launch then reports P's failure as the
 * root cause). Written to a temporary name and renamed,
 * so a reader never sees half of it. */
static void write_error_file(const char *message, int peer)
{
    const char *path = getenv(ddp_env_name(DDP_ENV_TORCHELASTIC_ERROR_FILE));
    char ts[32], *tmp = NULL;
    ddp_buf_t json = DDP_BUF_INIT;
    if (path == NULL || *path == '\0')
        return;
    snprintf(ts, sizeof ts, "%lld", (long long)time(NULL));
    int err = ddp_buf_puts(&json, "{\"message\": {\"message\": ");
    err = err ? err : ddp_json_append_string(&json, message, strlen(message));
    err = err ? err : ddp_buf_puts(&json, ", \"extraInfo\": {\"py_callstack\": ");
    err = err ? err : ddp_json_append_string(&json, message, strlen(message));
    err = err ? err : ddp_buf_printf(&json, ", \"timestamp\": \"%s\"", ts);
    if (peer >= 0)
        err = err ? err : ddp_buf_printf(&json, ", \"peer_rank\": \"%d\"", peer);
    err = err ? err : ddp_buf_puts(&json, "}}}\n");
    if (err == 0 && asprintf(&tmp, "%s.tmp%d", path, (int)getpid()) > 0) {
        int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd >= 0 && write(fd, json.data, json.len) == (ssize_t)json.len && close(fd) == 0)
            rename(tmp, path);
        else if (fd >= 0)
            close(fd);
        unlink(tmp);
    }
    free(tmp);
    ddp_buf_free(&json);
}

/* "rank N: " where the rank is known (not before RANK is read). */
static const char *rank_prefix(const ddp_t *ddp, char *buf, size_t cap)
{
    if (ddp->rank < 0)
        return "";
    snprintf(buf, cap, "rank %d: ", ddp->rank);
    return buf;
}

static int fail(ddp_t *ddp, int err, int peer, const char *fmt, va_list ap)
{
    char who[32];
    vsnprintf(ddp->error, sizeof ddp->error, fmt, ap);
    ddp->error_peer = peer;
    ddp_log_error(&ddp->log, "%s%s", rank_prefix(ddp, who, sizeof who), ddp->error);
    return err;
}

void ddp_fail_fatal(ddp_t *ddp)
{
    char message[1200], who[32];
    if (ddp->fatal_written || ddp->error[0] == '\0')
        return;
    /* The form of the stderr line, which ddp_log gives "libddp: error: ". */
    snprintf(message, sizeof message, "libddp: error: %s%s", rank_prefix(ddp, who, sizeof who),
             ddp->error);
    write_error_file(message, ddp->error_peer);
    ddp->fatal_written = true;
}

int ddp_refuse_object(const char *what, const char *object, const void *p)
{
    ddp_log_t log;
    ddp_log_init(&log, "libddp", DDP_LOG_INFO);
    if (p == NULL)
        ddp_log_error(&log, "%s: the %s is NULL (did the call that makes it fail?)", what, object);
    else
        ddp_log_error(&log, "%s: %p is not a live %s (used after it was freed or finalized?)", what,
                      p, object);
    return DDP_EUSAGE;
}

int ddp_fail(ddp_t *ddp, int err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fail(ddp, err, -1, fmt, ap);
    va_end(ap);
    return err;
}

int ddp_fail_peer(ddp_t *ddp, int err, int peer, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fail(ddp, err, peer, fmt, ap);
    va_end(ap);
    return err;
}

void ddp_key(const ddp_t *ddp, char *buf, size_t cap, const char *fmt, ...)
{
    va_list ap;
    int n = snprintf(buf, cap, "ddp/%d/%s/", ddp->restart_count, ddp->group);
    va_start(ap, fmt);
    if (n > 0 && (size_t)n < cap)
        vsnprintf(buf + n, cap - (size_t)n, fmt, ap);
    va_end(ap);
}

/* Reads an integer variable in [min, max]; a missing or bad one fails by name. */
static int read_int(ddp_t *ddp, ddp_env_id_t id, long min, long max, int *out)
{
    const char *name = ddp_env_name(id);
    const char *text = getenv(name);
    long v;
    if (text == NULL || *text == '\0')
        return ddp_fail(ddp, DDP_EUSAGE,
                        "%s is not set: start this program with ddp-launch (or torchrun), which "
                        "sets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and "
                        "MASTER_PORT",
                        name);
    if (ddp_parse_long(text, min, max, &v) != 0)
        return ddp_fail(ddp, DDP_EUSAGE, "%s=%s is not an integer between %ld and %ld", name, text,
                        min, max);
    *out = (int)v;
    return 0;
}

static int read_environment(ddp_t *ddp)
{
    int err;
    if ((err = read_int(ddp, DDP_ENV_WORLD_SIZE, 1, INT_MAX, &ddp->world_size)) != 0 ||
        (err = read_int(ddp, DDP_ENV_RANK, 0, ddp->world_size - 1, &ddp->rank)) != 0 ||
        (err = read_int(ddp, DDP_ENV_LOCAL_WORLD_SIZE, 1, ddp->world_size,
                        &ddp->local_world_size)) != 0 ||
        (err = read_int(ddp, DDP_ENV_LOCAL_RANK, 0, ddp->local_world_size - 1, &ddp->local_rank)) !=
            0)
        return err;
    if (getenv(ddp_env_name(DDP_ENV_TORCHELASTIC_RESTART_COUNT)) != NULL &&
        (err = read_int(ddp, DDP_ENV_TORCHELASTIC_RESTART_COUNT, 0, INT_MAX,
                        &ddp->restart_count)) != 0)
        return err;
    if (ddp->world_size == 1)
        return 0; /* alone: no store needed */
    const char *addr = getenv(ddp_env_name(DDP_ENV_MASTER_ADDR));
    if (addr == NULL || *addr == '\0')
        return ddp_fail(ddp, DDP_EUSAGE,
                        "MASTER_ADDR is not set: start this program with ddp-launch");
    if (strlen(addr) >= sizeof ddp->master_addr)
        return ddp_fail(ddp, DDP_EUSAGE, "MASTER_ADDR is longer than %zu bytes",
                        sizeof ddp->master_addr - 1);
    strcpy(ddp->master_addr, addr);
    return read_int(ddp, DDP_ENV_MASTER_PORT, 1, 65535, &ddp->master_port);
}

static double default_timeout(void)
{
    const char *text = getenv(ddp_env_name(DDP_ENV_DDP_TIMEOUT));
    double v;
    if (text != NULL && ddp_parse_double(text, 0.001, 1e7, &v) == 0)
        return v;
    return atof(ddp_env_default(DDP_ENV_DDP_TIMEOUT));
}

/* The program's choice, else DDP_BACKEND; auto is CPU and NCCL by memory (auto.c) where
 * NCCL is built in and this process sees a GPU, else CPU. */
static int choose_backend(ddp_t *ddp, ddp_backend_kind_t kind)
{
    const char *name = ddp_env_name(DDP_ENV_DDP_BACKEND), *text = getenv(name);
    if (kind == DDP_BACKEND_AUTO && text != NULL && *text != '\0') {
        if (strcmp(text, "cpu") == 0)
            kind = DDP_BACKEND_CPU;
        else if (strcmp(text, "nccl") == 0)
            kind = DDP_BACKEND_NCCL;
        else if (strcmp(text, "auto") != 0)
            return ddp_fail(ddp, DDP_EUSAGE, "%s=%s is not cpu, nccl or auto", name, text);
    }
#if DDP_HAVE_NCCL
    if (kind == DDP_BACKEND_AUTO)
        ddp->backend = ddp_nccl_device_count(ddp) > 0 ? &ddp_auto_backend : &ddp_cpu_backend;
    else
        ddp->backend = kind == DDP_BACKEND_NCCL ? &ddp_nccl_backend : &ddp_cpu_backend;
#else
    if (kind == DDP_BACKEND_NCCL)
        return ddp_fail(ddp, DDP_ENOCUDA,
                        "the NCCL backend is not built into this libddp (built without CUDA and "
                        "NCCL)");
    ddp->backend = &ddp_cpu_backend;
#endif
    return 0;
}

#if !DDP_HAVE_NCCL
int ddp_nccl_exchange_id(ddp_t *ddp, void *id, size_t len)
{
    (void)id;
    (void)len;
    return ddp_fail(ddp, DDP_ENOCUDA, "nccl_unique_id: libddp was built without NCCL");
}

void ddp_nccl_release(ddp_t *ddp)
{
    (void)ddp;
}
#endif

int ddp_nccl_unique_id(ddp_t *ddp, void *id, size_t len)
{
    DDP_NEED_CONTEXT(ddp, "ddp_nccl_unique_id");
    if (id == NULL)
        return ddp_fail(ddp, DDP_EUSAGE, "nccl_unique_id: the id buffer is NULL");
    return ddp_nccl_exchange_id(ddp, id, len);
}

/* Connecting to the store takes long: say so (the launcher's store may not be up yet,
 * or MASTER_ADDR and MASTER_PORT point elsewhere). */
static void say_store_slow(void *ctx, const char *what)
{
    const ddp_t *ddp = ctx;
    ddp_log_warn(&ddp->log, "rank %d: %s (MASTER_ADDR, MASTER_PORT; DDP_TIMEOUT)", ddp->rank, what);
}

int ddp_init(ddp_t **out)
{
    return ddp_init_with(out, NULL);
}

int ddp_init_with(ddp_t **out, const ddp_options_t *options)
{
    ddp_options_t opts = options ? *options : (ddp_options_t){DDP_BACKEND_AUTO, 0, NULL};
    ddp_t *ddp = calloc(1, sizeof *ddp);
    int err;
    bool fatal = false; /* the program's own options are its to correct; the rest ends it */
    if (ddp == NULL)
        return -ENOMEM;
    ddp_log_init(&ddp->log, "libddp", DDP_LOG_INFO);
    ddp->magic = DDP_CONTEXT_MAGIC;
    ddp->rank = -1; /* unknown until RANK is read: messages say no rank */
    ddp->timeout = opts.timeout > 0 ? opts.timeout : default_timeout();
    const char *group = opts.group != NULL ? opts.group : "main";
    size_t group_len = strlen(group);
    if (group_len == 0 || group_len >= sizeof ddp->group ||
        strspn(group, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-") !=
            group_len) {
        err = ddp_fail(ddp, DDP_EUSAGE,
                       "group name '%s' is not 1 to 32 letters, digits, '_', '.' or '-'", group);
        goto fail;
    }
    if ((unsigned)opts.backend > DDP_BACKEND_NCCL) {
        err = ddp_fail(ddp, DDP_EUSAGE, "unknown backend %d", (int)opts.backend);
        goto fail;
    }
    memcpy(ddp->group, group, group_len + 1);
    fatal = true;
    if ((err = read_environment(ddp)) != 0)
        goto fail;
    /* Die with the launcher. ddp-launch sets this itself; other launchers may not.
     * Only under a launcher: a program run by hand keeps its shell's behaviour. */
    if (getenv(ddp_env_name(DDP_ENV_TORCHELASTIC_RUN_ID)) != NULL) {
        pid_t parent = getppid();
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) == 0 && getppid() != parent)
            raise(SIGKILL); /* the launcher died already */
    }
    /* An explicit NCCL backend the program may replace by the CPU's where there is none. */
    if ((err = choose_backend(ddp, opts.backend)) != 0) {
        fatal = opts.backend != DDP_BACKEND_NCCL;
        goto fail;
    }
    if ((err = ddp_flight_open(ddp)) != 0)
        goto fail;
    if (ddp->world_size > 1) {
        ddp_store_client_options_t so = DDP_STORE_CLIENT_OPTIONS_DEFAULT;
        ddp_buf_t why = DDP_BUF_INIT;
        so.connect_timeout = so.timeout = ddp->timeout;
        so.on_slow = say_store_slow;
        so.slow_ctx = ddp;
        err = ddp_store_client_connect(ddp->master_addr, ddp->master_port, &so, &ddp->store, &why);
        if (err) {
            ddp_fail(ddp, err, "%s", ddp_buf_str(&why));
            ddp_buf_free(&why);
            goto fail;
        }
    }
    if ((err = ddp->backend->init(ddp, &ddp->backend_state)) != 0)
        goto fail;
    *out = ddp;
    return 0;
fail:
    /* A job that cannot form (or an environment that is wrong) ends the program; a bad
     * option is the caller's to handle (another group name, the CPU backend). */
    if (fatal)
        ddp_fail_fatal(ddp);
    ddp->magic = 0;
    ddp_store_client_close(ddp->store);
    ddp_nccl_release(ddp);
    ddp_flight_close(ddp);
    ddp_checkpoint_release(ddp);
    free(ddp);
    return err;
}

/* The getters answer DDP_EUSAGE (negative, never a rank) for a NULL or dead context. */
int ddp_rank(const ddp_t *ddp)
{
    DDP_NEED_CONTEXT(ddp, "ddp_rank");
    return ddp->rank;
}

int ddp_world_size(const ddp_t *ddp)
{
    DDP_NEED_CONTEXT(ddp, "ddp_world_size");
    return ddp->world_size;
}

int ddp_local_rank(const ddp_t *ddp)
{
    DDP_NEED_CONTEXT(ddp, "ddp_local_rank");
    return ddp->local_rank;
}

int ddp_local_world_size(const ddp_t *ddp)
{
    DDP_NEED_CONTEXT(ddp, "ddp_local_world_size");
    return ddp->local_world_size;
}

int ddp_restart_count(const ddp_t *ddp)
{
    DDP_NEED_CONTEXT(ddp, "ddp_restart_count");
    return ddp->restart_count;
}

const char *ddp_backend_name(const ddp_t *ddp)
{
    return ddp_live(ddp) ? ddp->backend->name : "none (no context)";
}

const char *ddp_last_error(const ddp_t *ddp)
{
    if (!ddp_live(ddp))
        return ddp == NULL ? "the context is NULL" : "not a live context (finalized?)";
    return ddp->error;
}

/* What every collective checks first: a usable context and a supported type. */
static int check(ddp_t *ddp, const char *what, const void *buf, ddp_dtype_t dtype, size_t count)
{
    if (ddp->broken) {
        char earlier[sizeof ddp->error];
        memcpy(earlier, ddp->error, sizeof earlier); /* ddp_fail rewrites ddp->error */
        /* ddp->error_peer stays what the earlier failure blamed. */
        return ddp_fail_peer(ddp, ddp->broken, ddp->error_peer,
                             "%s after an earlier collective failed: %s", what, earlier);
    }
    if (buf == NULL && count > 0)
        return ddp_fail(ddp, DDP_EUSAGE, "%s: the buffer is NULL", what);
    if (ddp_dtype_size(dtype) == 0)
        return ddp_fail(ddp, DDP_EUSAGE, "%s: unknown dtype %d", what, (int)dtype);
    if (count > SIZE_MAX / 8)
        return ddp_fail(ddp, DDP_EUSAGE, "%s: %zu elements is too many", what, count);
    return 0;
}

/* `rank`, the call's `role` ("root", "peer"), is a rank of the job. */
static int check_rank(ddp_t *ddp, const char *what, const char *role, int rank)
{
    if (rank < 0 || rank >= ddp->world_size)
        return ddp_fail(ddp, DDP_EUSAGE, "%s: %s %d is not a rank of the %d", what, role, rank,
                        ddp->world_size);
    return 0;
}

int ddp_wait_key_aloud(ddp_t *ddp, const char *key, const char *what)
{
    double started = ddp_clock_mono(), deadline = started + ddp->timeout;
    double every = ddp->timeout / 3 < 30 ? ddp->timeout / 3 : 30;
    const char *keys[] = {key};
    for (;;) {
        double left = deadline - ddp_clock_mono();
        int err = ddp_store_client_wait(ddp->store, keys, 1,
                                        left < every ? (left > 0.001 ? left : 0.001) : every);
        double now = ddp_clock_mono();
        if (err != DDP_ETIMEOUT || now >= deadline - 0.001)
            return err;
        ddp_log_warn(&ddp->log,
                     "rank %d: still waiting for %s (%.0f s; giving up in %.0f s, "
                     "DDP_TIMEOUT)",
                     ddp->rank, what, now - started, deadline - now);
    }
}

int ddp_backend_for(ddp_t *ddp, const void *p, const ddp_backend_t **be, void **state)
{
    if (ddp->backend->resolve != NULL)
        return ddp->backend->resolve(ddp, ddp->backend_state, p, be, state);
    *be = ddp->backend;
    *state = ddp->backend_state;
    return 0;
}

/* The backend that serves `buf` (and `other`, on the same memory). */
static int serve(ddp_t *ddp, const char *what, const void *buf, const void *other,
                 const ddp_backend_t **be, void **state)
{
    int err = ddp_backend_for(ddp, buf, be, state);
    if (err)
        return err;
    if (other != NULL && ddp->backend->resolve != NULL) {
        const ddp_backend_t *other_be;
        void *other_state;
        if ((err = ddp_backend_for(ddp, other, &other_be, &other_state)) != 0)
            return err;
        if (other_be != *be)
            return ddp_fail(ddp, DDP_EUSAGE,
                            "%s: one buffer is host memory and the other device memory", what);
    }
    return 0;
}

static int check_op(ddp_t *ddp, const char *what, ddp_reduce_op_t op)
{
    if ((unsigned)op > DDP_MAX)
        return ddp_fail(ddp, DDP_EUSAGE, "%s: unknown operation %d", what, (int)op);
    return 0;
}

/* Two buffers (of `alen` and `blen` bytes) that must not share any. */
static int apart(ddp_t *ddp, const char *what, const void *a, size_t alen, const void *b,
                 size_t blen)
{
    const char *x = a, *y = b;
    if (alen > 0 && blen > 0 && x < y + blen && y < x + alen)
        return ddp_fail(ddp, DDP_EUSAGE, "%s: the send and receive buffers overlap", what);
    return 0;
}

/* Whether the backend has the collective (NCCL lacks some of the CPU's). */
static int offered(ddp_t *ddp, const ddp_backend_t *be, bool has, const char *what)
{
    return has ? 0
               : ddp_fail(ddp, DDP_EUSAGE, "%s is not offered by the %s backend", what, be->name);
}

/* A failed collective leaves the peers out of step: remember it, and write the error
 * file (the program cannot go on with this context). A usage error (a bad argument this
 * rank refused before communicating) is the caller's to fix and leaves the context as
 * it was, and the error file alone; one found mid-collective (calls that differ) set
 * ddp->broken itself. */
static int after(ddp_t *ddp, int err)
{
    if (err && err != DDP_EUSAGE)
        ddp->broken = err;
    if (err && ddp->broken)
        ddp_fail_fatal(ddp);
    return err;
}

/* A collective's run through the backend, in the flight recorder. */
#define RECORDED(ddp, op, count, dtype, reduce_op, root, call)                    \
    (ddp_flight_enter(ddp, op, count, dtype, (int)(reduce_op), root), err = call, \
     ddp_flight_leave(ddp, err), err)

int ddp_barrier(ddp_t *ddp)
{
    DDP_NEED_CONTEXT(ddp, "ddp_barrier");
    int err = check(ddp, "barrier", NULL, DDP_INT32, 0);
    if (err == 0)
        err = RECORDED(ddp, DDP_FLIGHT_BARRIER, 0, DDP_INT32, 0, 0,
                       ddp->backend->barrier(ddp, ddp->backend_state));
    return err ? after(ddp, err) : 0;
}

int ddp_broadcast(ddp_t *ddp, void *buf, size_t count, ddp_dtype_t dtype, int root)
{
    const ddp_backend_t *be;
    void *state;
    DDP_NEED_CONTEXT(ddp, "ddp_broadcast");
    int err = check(ddp, "broadcast", buf, dtype, count);
    if (err == 0)
        err = check_rank(ddp, "broadcast", "root", root);
    if (err == 0)
        err = serve(ddp, "broadcast", buf, NULL, &be, &state);
    if (err == 0)
        err = RECORDED(ddp, DDP_FLIGHT_BROADCAST, count, dtype, 0, root,
                       be->broadcast(ddp, state, buf, count, dtype, root));
    return after(ddp, err);
}

int ddp_all_reduce(ddp_t *ddp, void *buf, size_t count, ddp_dtype_t dtype, ddp_reduce_op_t op)
{
    const ddp_backend_t *be;
    void *state;
    DDP_NEED_CONTEXT(ddp, "ddp_all_reduce");
    int err = check(ddp, "all_reduce", buf, dtype, count);
    if (err == 0)
        err = check_op(ddp, "all_reduce", op);
    if (err == 0)
        err = serve(ddp, "all_reduce", buf, NULL, &be, &state);
    /* Alone, every operation's result is the buffer as it is: no backend work (NCCL
     * would launch a kernel; the reducer skips even this call), but memory the backend
     * would refuse is refused, as it would be with more ranks. */
    if (err == 0 && ddp->world_size == 1 && be->accepts != NULL)
        err = be->accepts(ddp, "all_reduce", buf);
    if (err == 0)
        err =
            RECORDED(ddp, DDP_FLIGHT_ALL_REDUCE, count, dtype, op, 0,
                     ddp->world_size == 1 ? 0 : be->all_reduce(ddp, state, buf, count, dtype, op));
    return after(ddp, err);
}

int ddp_all_gather(ddp_t *ddp, const void *send, void *recv, size_t count, ddp_dtype_t dtype)
{
    const ddp_backend_t *be;
    void *state;
    DDP_NEED_CONTEXT(ddp, "ddp_all_gather");
    int err = check(ddp, "all_gather", recv, dtype, count);
    if (err == 0 && send == NULL && count > 0)
        err = ddp_fail(ddp, DDP_EUSAGE, "all_gather: the send buffer is NULL");
    if (err == 0)
        err = serve(ddp, "all_gather", recv, send, &be, &state);
    if (err == 0)
        err = RECORDED(ddp, DDP_FLIGHT_ALL_GATHER, count, dtype, 0, 0,
                       be->all_gather(ddp, state, send, recv, count, dtype));
    return after(ddp, err);
}

int ddp_reduce(ddp_t *ddp, void *buf, size_t count, ddp_dtype_t dtype, ddp_reduce_op_t op, int root)
{
    const ddp_backend_t *be;
    void *state;
    DDP_NEED_CONTEXT(ddp, "ddp_reduce");
    int err = check(ddp, "reduce", buf, dtype, count);
    if (err == 0)
        err = check_rank(ddp, "reduce", "root", root);
    if (err == 0)
        err = check_op(ddp, "reduce", op);
    if (err == 0)
        err = serve(ddp, "reduce", buf, NULL, &be, &state);
    if (err == 0)
        err = offered(ddp, be, be->reduce != NULL, "reduce");
    if (err == 0)
        err = RECORDED(ddp, DDP_FLIGHT_REDUCE, count, dtype, op, root,
                       be->reduce(ddp, state, buf, count, dtype, op, root));
    return after(ddp, err);
}

int ddp_reduce_scatter(ddp_t *ddp, const void *send, void *recv, size_t count, ddp_dtype_t dtype,
                       ddp_reduce_op_t op)
{
    const ddp_backend_t *be;
    void *state;
    DDP_NEED_CONTEXT(ddp, "ddp_reduce_scatter");
    int err = check(ddp, "reduce_scatter", recv, dtype, count);
    if (err == 0 && send == NULL && count > 0)
        err = ddp_fail(ddp, DDP_EUSAGE, "reduce_scatter: the send buffer is NULL");
    if (err == 0)
        err = check_op(ddp, "reduce_scatter", op);
    if (err == 0)
        err = apart(ddp, "reduce_scatter", recv, count * ddp_dtype_size(dtype), send,
                    count * ddp_dtype_size(dtype) * (size_t)ddp->world_size);
    if (err == 0)
        err = serve(ddp, "reduce_scatter", recv, send, &be, &state);
    if (err == 0)
        err = offered(ddp, be, be->reduce_scatter != NULL, "reduce_scatter");
    if (err == 0)
        err = RECORDED(ddp, DDP_FLIGHT_REDUCE_SCATTER, count, dtype, op, 0,
                       be->reduce_scatter(ddp, state, send, recv, count, dtype, op));
    return after(ddp, err);
}

int ddp_all_to_all(ddp_t *ddp, const void *send, void *recv, size_t count, ddp_dtype_t dtype)
{
    const ddp_backend_t *be;
    void *state;
    DDP_NEED_CONTEXT(ddp, "ddp_all_to_all");
    size_t all = count * ddp_dtype_size(dtype) * (size_t)ddp->world_size;
    int err = check(ddp, "all_to_all", recv, dtype, count);
    if (err == 0 && send == NULL && count > 0)
        err = ddp_fail(ddp, DDP_EUSAGE, "all_to_all: the send buffer is NULL");
    if (err == 0)
        err = apart(ddp, "all_to_all", send, all, recv, all);
    if (err == 0)
        err = serve(ddp, "all_to_all", recv, send, &be, &state);
    if (err == 0)
        err = offered(ddp, be, be->all_to_all != NULL, "all_to_all");
    if (err == 0)
        err = RECORDED(ddp, DDP_FLIGHT_ALL_TO_ALL, count, dtype, 0, 0,
                       be->all_to_all(ddp, state, send, recv, count, dtype));
    return after(ddp, err);
}

/* The root's receive buffer is NULL, which only the root can see: the other ranks are in
 * the gather already, so the root still takes their blocks (into scratch, dropped) and
 * no rank waits for it; then the root's call fails as a usage error, the context usable
 * everywhere. */
static int gather_refused(ddp_t *ddp, const ddp_backend_t *be, void *state, const void *send,
                          size_t count, ddp_dtype_t dtype, int root)
{
    void *scratch = NULL;
    size_t block = count * ddp_dtype_size(dtype);
    int err = block > SIZE_MAX / (size_t)ddp->world_size
                  ? -ENOMEM
                  : be->alloc(ddp, state, block * (size_t)ddp->world_size, &scratch);
    if (err == 0)
        err = RECORDED(ddp, DDP_FLIGHT_GATHER, count, dtype, 0, root,
                       be->gather(ddp, state, send, scratch, count, dtype, root));
    if (scratch != NULL)
        be->release(state, scratch);
    if (err)
        return err == -ENOMEM ? ddp_fail(ddp, err, "gather: out of memory") : err;
    return ddp_fail(ddp, DDP_EUSAGE,
                    "gather: the root's receive buffer is NULL (the other ranks' blocks were "
                    "dropped; their calls succeeded)");
}

int ddp_gather(ddp_t *ddp, const void *send, void *recv, size_t count, ddp_dtype_t dtype, int root)
{
    const ddp_backend_t *be;
    void *state;
    DDP_NEED_CONTEXT(ddp, "ddp_gather");
    int err = check(ddp, "gather", send, dtype, count);
    if (err == 0)
        err = check_rank(ddp, "gather", "root", root);
    if (err == 0)
        err = serve(ddp, "gather", send, ddp->rank == root ? recv : NULL, &be, &state);
    if (err == 0)
        err = offered(ddp, be, be->gather != NULL, "gather");
    if (err == 0 && ddp->rank == root && recv == NULL && count > 0)
        return after(ddp, gather_refused(ddp, be, state, send, count, dtype, root));
    if (err == 0)
        err = RECORDED(ddp, DDP_FLIGHT_GATHER, count, dtype, 0, root,
                       be->gather(ddp, state, send, recv, count, dtype, root));
    return after(ddp, err);
}

int ddp_scatter(ddp_t *ddp, const void *send, void *recv, size_t count, ddp_dtype_t dtype, int root)
{
    const ddp_backend_t *be;
    void *state;
    DDP_NEED_CONTEXT(ddp, "ddp_scatter");
    int err = check(ddp, "scatter", recv, dtype, count);
    if (err == 0)
        err = check_rank(ddp, "scatter", "root", root);
    if (err == 0 && ddp->rank == root && send == NULL && count > 0)
        err = ddp_fail(ddp, DDP_EUSAGE, "scatter: the root's send buffer is NULL");
    if (err == 0)
        err = serve(ddp, "scatter", recv, ddp->rank == root ? send : NULL, &be, &state);
    if (err == 0)
        err = offered(ddp, be, be->scatter != NULL, "scatter");
    if (err == 0)
        err = RECORDED(ddp, DDP_FLIGHT_SCATTER, count, dtype, 0, root,
                       be->scatter(ddp, state, send, recv, count, dtype, root));
    return after(ddp, err);
}

/* What send and recv check first: the peer is another rank. */
static int check_peer(ddp_t *ddp, const char *what, const void *buf, size_t count,
                      ddp_dtype_t dtype, int peer)
{
    int err = check(ddp, what, buf, dtype, count);
    if (err == 0)
        err = check_rank(ddp, what, "peer", peer);
    if (err == 0 && peer == ddp->rank)
        err = ddp_fail(ddp, DDP_EUSAGE, "%s: rank %d is this rank", what, peer);
    return err;
}

int ddp_send(ddp_t *ddp, const void *buf, size_t count, ddp_dtype_t dtype, int peer)
{
    const ddp_backend_t *be;
    void *state;
    DDP_NEED_CONTEXT(ddp, "ddp_send");
    int err = check_peer(ddp, "send", buf, count, dtype, peer);
    if (err == 0)
        err = serve(ddp, "send", buf, NULL, &be, &state);
    if (err == 0)
        err = offered(ddp, be, be->send != NULL, "send");
    if (err == 0)
        err = be->send(ddp, state, buf, count, dtype, peer); /* not a collective: no record */
    return after(ddp, err);
}

int ddp_recv(ddp_t *ddp, void *buf, size_t count, ddp_dtype_t dtype, int peer)
{
    const ddp_backend_t *be;
    void *state;
    DDP_NEED_CONTEXT(ddp, "ddp_recv");
    int err = check_peer(ddp, "recv", buf, count, dtype, peer);
    if (err == 0)
        err = serve(ddp, "recv", buf, NULL, &be, &state);
    if (err == 0)
        err = offered(ddp, be, be->recv != NULL, "recv");
    if (err == 0)
        err = be->recv(ddp, state, buf, count, dtype, peer);
    return after(ddp, err);
}

size_t ddp_sampler_count(const ddp_t *ddp, size_t dataset_size,
                         const ddp_sampler_options_t *options)
{
    if (!ddp_live(ddp))
        return 0;
    return ddp_sample_count(dataset_size, ddp->world_size, options != NULL && options->drop_last);
}

int ddp_sampler_indices(ddp_t *ddp, size_t dataset_size, const ddp_sampler_options_t *options,
                        uint64_t epoch, size_t *indices, size_t capacity)
{
    DDP_NEED_CONTEXT(ddp, "ddp_sampler_indices");
    if (indices == NULL && capacity > 0)
        return ddp_fail(ddp, DDP_EUSAGE, "sampler: the index buffer is NULL");
    int err =
        ddp_sample(dataset_size, ddp->rank, ddp->world_size, options, epoch, indices, capacity);
    if (err == DDP_EUSAGE)
        return ddp_fail(ddp, err, "sampler: room for %zu indices, %zu needed", capacity,
                        ddp_sampler_count(ddp, dataset_size, options));
    if (err)
        return ddp_fail(ddp, err, "sampler: out of memory for %zu indices", dataset_size);
    return 0;
}

void ddp_finalize(ddp_t *ddp)
{
    if (ddp == NULL)
        return;
    if (!ddp_live(ddp)) {
        ddp_refuse_object("ddp_finalize", "context", ddp); /* twice, say: no double free */
        return;
    }
    ddp->magic = 0;
    if (ddp->backend != NULL && ddp->backend->finalize != NULL)
        ddp->backend->finalize(ddp->backend_state);
    ddp_store_client_close(ddp->store);
    ddp_nccl_release(ddp);
    ddp_flight_close(ddp);
    ddp_checkpoint_release(ddp);
    free(ddp);
}
