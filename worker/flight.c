/* libddp's flight recorder: each context's ring of its last collectives (common/flight.h)
 * and its dump as JSON.
 *
 * The ring lives in a file beside the worker's error file, mapped shared, so the
 * launcher reads it even from a rank that is stuck; without an error file (a program
 * run by hand) it is plain memory. The rank writes flight_<group>.json beside it when a
 * collective fails (a timeout most of all) and when the launcher asks with the signal
 * DDP_DUMP_SIGNAL names. The dump runs inside that signal's handler, so everything it
 * calls is async-signal-safe: it formats into a buffer on the stack by hand, then
 * open, write, rename. The handler is installed once per process, and only where the
 * signal has no handler of the program's. */
#include "internal.h"

#include "env.h"
#include "flight.h"
#include "parse.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define REGISTRY   16         /* contexts a process's dump signal reaches */
#define DUMP_BYTES (24 << 10) /* the JSON of a full ring and an error fits */

static _Atomic(ddp_t *) registry[REGISTRY];
static atomic_int armed_signal; /* 0 until the handler is installed */

/* The coarse wall clock: a few milliseconds of resolution, plenty to say how long a rank
 * has waited, at a fraction of the cost (the precise clock's two reads were a tenth of
 * an 8-byte all-reduce between two ranks). */
static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME_COARSE, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The async-signal-safe formatter: appends what fits, drops the rest. */
typedef struct {
    char *p;
    size_t len, cap;
} out_t;

static void put(out_t *o, const char *s)
{
    while (*s != '\0' && o->len < o->cap)
        o->p[o->len++] = *s++;
}

static void put_u(out_t *o, uint64_t v)
{
    char digits[24];
    int n = 0;
    do
        digits[n++] = (char)('0' + v % 10);
    while ((v /= 10) != 0);
    while (n > 0 && o->len < o->cap)
        o->p[o->len++] = digits[--n];
}

static void put_i(out_t *o, int64_t v)
{
    if (v < 0) {
        put(o, "-");
        put_u(o, (uint64_t)0 - (uint64_t)v);
    } else {
        put_u(o, (uint64_t)v);
    }
}

/* Nanoseconds as seconds with three decimals. */
static void put_seconds(out_t *o, int64_t ns)
{
    if (ns < 0) {
        put(o, "-");
        ns = -ns;
    }
    int64_t ms = ns / 1000000;
    char frac[5] = {'.', (char)('0' + ms % 1000 / 100), (char)('0' + ms % 100 / 10),
                    (char)('0' + ms % 10), '\0'};
    put_u(o, (uint64_t)(ms / 1000));
    put(o, frac);
}

/* A JSON string: quotes, backslashes and control characters escaped. */
static void put_string(out_t *o, const char *s)
{
    static const char hex[] = "0123456789abcdef";
    put(o, "\"");
    for (; *s != '\0'; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            char esc[3] = {'\\', (char)c, '\0'};
            put(o, esc);
        } else if (c < 0x20) {
            char esc[7] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15], '\0'};
            put(o, esc);
        } else {
            char one[2] = {(char)c, '\0'};
            put(o, one);
        }
    }
    put(o, "\"");
}

static void put_key(out_t *o, const char *key)
{
    put(o, ", \"");
    put(o, key);
    put(o, "\": ");
}

static void put_entry(out_t *o, const ddp_flight_entry_t *e, int64_t now)
{
    put(o, "{\"seq\": ");
    put_u(o, e->seq);
    put_key(o, "op");
    put_string(o, ddp_flight_op_name(e->op));
    if (e->op != DDP_FLIGHT_BARRIER) {
        put_key(o, "count");
        put_u(o, e->count);
        put_key(o, "dtype");
        put_string(o, ddp_dtype_name((ddp_dtype_t)e->dtype));
    }
    if (e->op == DDP_FLIGHT_ALL_REDUCE || e->op == DDP_FLIGHT_REDUCE ||
        e->op == DDP_FLIGHT_REDUCE_SCATTER) {
        put_key(o, "reduce_op");
        put_string(o, ddp_op_name((ddp_reduce_op_t)e->reduce_op));
    }
    if (e->op == DDP_FLIGHT_BROADCAST || e->op == DDP_FLIGHT_REDUCE || e->op == DDP_FLIGHT_GATHER ||
        e->op == DDP_FLIGHT_SCATTER) {
        put_key(o, "root");
        put_i(o, e->root);
    }
    put_key(o, "peer");
    if (e->peer >= 0)
        put_i(o, e->peer);
    else
        put(o, "null");
    put_key(o, "entered");
    put_seconds(o, e->entered_ns);
    put_key(o, "state");
    put_string(o, e->left_ns == 0 ? "in progress" : e->error == 0 ? "done" : "failed");
    put_key(o, "seconds");
    put_seconds(o, (e->left_ns != 0 ? e->left_ns : now) - e->entered_ns);
    if (e->left_ns != 0 && e->error != 0) {
        put_key(o, "error");
        put_string(o, e->error > DDP__ERROR_FIRST ? ddp_strerror(e->error) : "system error");
    }
    put(o, "}");
}

/* Writes the context's ring and state as JSON (async-signal-safe). */
static void dump(ddp_t *ddp, const char *reason)
{
    const ddp_flight_ring_t *ring = ddp->flight;
    char text[DUMP_BYTES];
    out_t o = {text, 0, sizeof text - 1};
    int64_t now = now_ns();
    if (ring == NULL || ddp->flight_json[0] == '\0')
        return;
    uint64_t entered = ring->entered, completed = ring->completed;
    put(&o, "{\"rank\": ");
    put_i(&o, ring->rank);
    put_key(&o, "world_size");
    put_i(&o, ring->world_size);
    put_key(&o, "group");
    put_string(&o, ring->group);
    put_key(&o, "pid");
    put_i(&o, ring->pid);
    put_key(&o, "reason");
    put_string(&o, reason);
    put_key(&o, "time");
    put_seconds(&o, now);
    put_key(&o, "entered");
    put_u(&o, entered);
    put_key(&o, "completed");
    put_u(&o, completed);
    /* Where the rank is now: inside collective `entered`, or between two. */
    const ddp_flight_entry_t *cur = ddp_flight_entry(ring, entered);
    put_key(&o, "current");
    if (cur != NULL && (cur->left_ns == 0 || cur->error != 0)) /* in it, or failed in it */
        put_entry(&o, cur, now);
    else
        put(&o, "null");
    if (ddp->error[0] != '\0') {
        put_key(&o, "last_error");
        put_string(&o, ddp->error);
    }
    put_key(&o, "collectives");
    put(&o, "[");
    uint64_t first = entered > DDP_FLIGHT_SLOTS ? entered - DDP_FLIGHT_SLOTS + 1 : 1;
    bool any = false;
    for (uint64_t s = first; s <= entered && s != 0; s++) {
        const ddp_flight_entry_t *e = ddp_flight_entry(ring, s);
        if (e == NULL)
            continue;
        put(&o, any ? ",\n  " : "\n  ");
        put_entry(&o, e, now);
        any = true;
    }
    put(&o, "]}\n");
    int fd = open(ddp->flight_tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return;
    size_t done = 0;
    while (done < o.len) {
        ssize_t w = write(fd, text + done, o.len - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            break;
        done += (size_t)w;
    }
    if (close(fd) == 0 && done == o.len)
        rename(ddp->flight_tmp, ddp->flight_json);
    else
        unlink(ddp->flight_tmp);
}

static void on_dump_signal(int sig)
{
    (void)sig;
    int saved = errno;
    for (int i = 0; i < REGISTRY; i++) {
        ddp_t *ddp = atomic_load(&registry[i]);
        if (ddp != NULL)
            dump(ddp, "request");
    }
    errno = saved;
}

/* Installs the dump signal's handler once, where DDP_DUMP_SIGNAL names a signal that
 * has none of the program's. */
static void arm(ddp_t *ddp)
{
    const char *text = getenv(ddp_env_name(DDP_ENV_DDP_DUMP_SIGNAL));
    long sig;
    if (text == NULL || *text == '\0' || atomic_load(&armed_signal) != 0)
        return;
    if (ddp_parse_long(text, 1, SIGRTMAX, &sig) != 0 || sig == SIGKILL || sig == SIGSTOP) {
        ddp_log_warn(&ddp->log,
                     "rank %d: DDP_DUMP_SIGNAL=%s is not a signal number: no dumps on "
                     "request",
                     ddp->rank, text);
        return;
    }
    struct sigaction old, sa = {.sa_handler = on_dump_signal, .sa_flags = SA_RESTART};
    sigemptyset(&sa.sa_mask);
    int expected = 0;
    if (sigaction((int)sig, NULL, &old) != 0 || (old.sa_flags & SA_SIGINFO) != 0 ||
        old.sa_handler != SIG_DFL)
        return; /* the program's own */
    if (atomic_compare_exchange_strong(&armed_signal, &expected, (int)sig))
        sigaction((int)sig, &sa, NULL);
}

int ddp_flight_open(ddp_t *ddp)
{
    const char *error_file = getenv(ddp_env_name(DDP_ENV_TORCHELASTIC_ERROR_FILE));
    const char *slash = error_file != NULL ? strrchr(error_file, '/') : NULL;
    char path[sizeof ddp->flight_json];
    int fd = -1;
    if (error_file != NULL && *error_file != '\0') {
        int dir = slash != NULL ? (int)(slash - error_file) + 1 : 0;
        int n = snprintf(path, sizeof path, "%.*sflight_%s.ring", dir, error_file, ddp->group);
        int m = snprintf(ddp->flight_json, sizeof ddp->flight_json, "%.*sflight_%s.json", dir,
                         error_file, ddp->group);
        int k = snprintf(ddp->flight_tmp, sizeof ddp->flight_tmp, "%s.tmp%d", ddp->flight_json,
                         (int)getpid());
        if (n > 0 && (size_t)n < sizeof path && m > 0 && (size_t)m < sizeof ddp->flight_json &&
            k > 0 && (size_t)k < sizeof ddp->flight_tmp)
            fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0)
            ddp->flight_json[0] = '\0';
    }
    if (fd >= 0 && ftruncate(fd, sizeof(ddp_flight_ring_t)) == 0) {
        void *p = mmap(NULL, sizeof(ddp_flight_ring_t), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (p != MAP_FAILED) {
            ddp->flight = p;
            ddp->flight_mapped = true;
        }
    }
    if (fd >= 0)
        close(fd);
    if (ddp->flight == NULL) {
        ddp->flight_json[0] = '\0';
        if ((ddp->flight = calloc(1, sizeof *ddp->flight)) == NULL)
            return -ENOMEM;
    }
    ddp_flight_ring_t *ring = ddp->flight;
    ring->version = DDP_FLIGHT_VERSION;
    ring->rank = ddp->rank;
    ring->world_size = ddp->world_size;
    ring->pid = (int32_t)getpid();
    snprintf(ring->group, sizeof ring->group, "%s", ddp->group);
    __atomic_store_n(&ring->magic, DDP_FLIGHT_MAGIC,
                     __ATOMIC_RELEASE); /* last: a reader sees a whole header */
    for (int i = 0; i < REGISTRY; i++) {
        ddp_t *empty = NULL;
        if (atomic_compare_exchange_strong(&registry[i], &empty, ddp))
            break;
    }
    arm(ddp);
    return 0;
}

void ddp_flight_close(ddp_t *ddp)
{
    if (ddp->flight == NULL)
        return;
    for (int i = 0; i < REGISTRY; i++) {
        ddp_t *self = ddp;
        atomic_compare_exchange_strong(&registry[i], &self, NULL);
    }
    if (ddp->flight_mapped)
        munmap(ddp->flight, sizeof *ddp->flight);
    else
        free(ddp->flight);
    ddp->flight = NULL;
}

void ddp_flight_enter(ddp_t *ddp, int op, size_t count, ddp_dtype_t dtype, int reduce_op, int root)
{
    ddp_flight_ring_t *ring = ddp->flight;
    if (ring == NULL)
        return;
    uint64_t seq = ring->entered + 1;
    ddp_flight_entry_t *e = &ring->slots[(seq - 1) % DDP_FLIGHT_SLOTS];
    __atomic_store_n(&e->seq, 0, __ATOMIC_RELEASE); /* a reader skips it while rewritten */
    *e = (ddp_flight_entry_t){.count = count,
                              .entered_ns = now_ns(),
                              .op = op,
                              .dtype = (int32_t)dtype,
                              .reduce_op = reduce_op,
                              .root = root,
                              .peer = -1};
    __atomic_store_n(&e->seq, seq, __ATOMIC_RELEASE);
    __atomic_store_n(&ring->entered, seq, __ATOMIC_RELEASE);
}

void ddp_flight_peer(ddp_t *ddp, int peer)
{
    ddp_flight_ring_t *ring = ddp->flight;
    if (ring != NULL && ring->entered > 0)
        ring->slots[(ring->entered - 1) % DDP_FLIGHT_SLOTS].peer = peer;
}

void ddp_flight_leave(ddp_t *ddp, int err)
{
    ddp_flight_ring_t *ring = ddp->flight;
    if (ring == NULL || ring->entered == 0)
        return;
    ddp_flight_entry_t *e = &ring->slots[(ring->entered - 1) % DDP_FLIGHT_SLOTS];
    e->error = err;
    __atomic_store_n(&e->left_ns, now_ns(), __ATOMIC_RELEASE);
    if (err == 0)
        __atomic_store_n(&ring->completed, ring->entered, __ATOMIC_RELEASE);
    else
        dump(ddp, err == DDP_ETIMEOUT ? "timeout" : "error");
}
