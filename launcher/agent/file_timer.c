/* torchrun's worker watchdog: the FIFO, its requests and their expiry (see file_timer.h). */
#include "agent/file_timer.h"

#include "error.h"
#include "host/signals.h"
#include "io.h"
#include "json.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define LINE_MAX_BYTES 8192 /* a client sends at most PIPE_BUF (4096) bytes a request */
#define MAX_TIMERS     4096 /* set timers kept at once; more are said and dropped */
#define MALFORMED_SAID 3    /* malformed requests said one by one, then no more */
#define MAX_DELAY_MS   1e12 /* a timer further away is looked at again then (30 years) */
#define READS_PER_TURN 64   /* a worker writing without pause cannot hold the loop */
#define SHOWN_MAX      200  /* bytes of a request or a scope in a message */

typedef struct {
    pid_t pid;
    char *scope;
    char *shown;    /* the scope as a message shows it (the worker's text: escaped, bounded) */
    double expires; /* wall clock, s */
    int sig;        /* <= 0: none */
} entry_t;

struct ddp_file_timer_s {
    const ddp_log_t *log;
    char *path;
    int fd;      /* the FIFO's read end (non-blocking) */
    int keep_fd; /* a write end of our own: no end of file while no client has it open */
    uv_poll_t poll;
    uv_timer_t timer;
    bool watching;
    bool held;      /* ddp_file_timer_hold */
    ddp_buf_t line; /* a request not yet ended by its newline */
    bool skipping;  /* the rest of an overlong line */
    int malformed;
    bool full_said;
    entry_t *entries;
    size_t n, cap;
    ddp_file_timer_owner_fn owner;
    ddp_file_timer_fired_fn fired;
    void *ctx;
};

int ddp_file_timer_create(const char *path, const char *dir, const ddp_log_t *log,
                          ddp_file_timer_t **out, ddp_buf_t *why)
{
    ddp_file_timer_t *t = calloc(1, sizeof *t);
    char uuid[37];
    int err = 0;
    *out = NULL;
    if (t == NULL)
        return -ENOMEM;
    t->log = log;
    t->fd = t->keep_fd = -1;
    if (path != NULL)
        t->path = strdup(path);
    else if ((err = ddp_random_uuid(uuid)) != 0 ||
             asprintf(&t->path, "%s/watchdog_timer_%s", dir, uuid) < 0)
        t->path = NULL;
    if (t->path == NULL) {
        err = err ? err : -ENOMEM;
        ddp_buf_printf(why, "unable to name the watchdog's FIFO: %s", ddp_strerror(err));
        free(t);
        return err;
    }
    (void)unlink(t->path); /* torchrun's server replaces what is there */
    if (mkfifo(t->path, 0600) != 0 ||
        (t->fd = open(t->path, O_RDONLY | O_NONBLOCK | O_CLOEXEC)) < 0 ||
        (t->keep_fd = open(t->path, O_WRONLY | O_NONBLOCK | O_CLOEXEC)) < 0) {
        err = -errno;
        ddp_buf_printf(why, "unable to make the watchdog's FIFO %s: %s", t->path,
                       ddp_strerror(err));
        ddp_file_timer_free(t);
        return err;
    }
    *out = t;
    return 0;
}

const char *ddp_file_timer_path(const ddp_file_timer_t *t)
{
    return t->path;
}

static void remove_entry(ddp_file_timer_t *t, size_t i)
{
    free(t->entries[i].scope);
    free(t->entries[i].shown);
    t->entries[i] = t->entries[--t->n];
}

static size_t find(const ddp_file_timer_t *t, pid_t pid, const char *scope)
{
    for (size_t i = 0; i < t->n; i++)
        if (t->entries[i].pid == pid && strcmp(t->entries[i].scope, scope) == 0)
            return i;
    return SIZE_MAX;
}

static void on_timer(uv_timer_t *handle);

/* The loop timer at the next expiry, or stopped with none. */
static void rearm(ddp_file_timer_t *t)
{
    if (!t->watching)
        return;
    if (t->n == 0 || t->held) {
        uv_timer_stop(&t->timer);
        return;
    }
    double next = t->entries[0].expires;
    for (size_t i = 1; i < t->n; i++)
        next = t->entries[i].expires < next ? t->entries[i].expires : next;
    double delay = ceil((next - ddp_clock_wall()) * 1000); /* ms; a request may say 1e308 */
    uint64_t ms = delay <= 0 ? 0 : delay >= MAX_DELAY_MS ? (uint64_t)MAX_DELAY_MS : (uint64_t)delay;
    uv_timer_start(&t->timer, on_timer, ms, 0);
}

static void malformed(ddp_file_timer_t *t, const char *why, const char *line, size_t len)
{
    if (++t->malformed > MALFORMED_SAID)
        return;
    ddp_buf_t shown = DDP_BUF_INIT;
    (void)ddp_buf_printable_cut(&shown, line, len, SHOWN_MAX, false);
    ddp_log_warn(t->log, "watchdog timer: ignoring a request that %s: %s", why,
                 ddp_buf_str(&shown));
    ddp_buf_free(&shown);
    if (t->malformed == MALFORMED_SAID)
        ddp_log_warn(t->log, "watchdog timer: further malformed requests are not said");
}

/* A number that is a whole int within [lo, hi]. */
static bool whole(const ddp_json_t *value, double lo, double hi, int *out)
{
    double v;
    if (!ddp_json_number(value, &v) || v != floor(v) || v < lo || v > hi)
        return false;
    *out = (int)v;
    return true;
}

/* One request: set (or replace) the timer (pid, scope), or release it. */
static void request(ddp_file_timer_t *t, const char *line, size_t len)
{
    ddp_json_t *root = NULL;
    if (ddp_json_parse(line, len, &root) != 0) {
        malformed(t, "is not JSON", line, len);
        return;
    }
    int pid = 0, sig = 0;
    double expires;
    size_t scope_len = 0;
    const char *scope = ddp_json_string(ddp_json_get(root, "scope_id"), &scope_len);
    if (!whole(ddp_json_get(root, "pid"), 1, INT_MAX, &pid))
        malformed(t, "has no pid", line, len);
    else if (scope == NULL || strlen(scope) != scope_len)
        malformed(t, "has no scope_id", line, len);
    else if (!ddp_json_number(ddp_json_get(root, "expiration_time"), &expires) || isnan(expires))
        malformed(t, "has no expiration_time", line, len);
    else if (ddp_json_get(root, "signal") != NULL &&
             !whole(ddp_json_get(root, "signal"), -1e9, 1e9, &sig))
        malformed(t, "has no valid signal", line, len);
    else {
        size_t at = find(t, (pid_t)pid, scope);
        if (expires < 0) { /* a release */
            if (at != SIZE_MAX)
                remove_entry(t, at);
        } else if (at != SIZE_MAX) {
            t->entries[at].expires = expires;
            t->entries[at].sig = sig;
        } else if (t->n >= MAX_TIMERS) {
            if (!t->full_said)
                ddp_log_warn(t->log, "watchdog timer: %d timers are set; more are not kept",
                             MAX_TIMERS);
            t->full_said = true;
        } else {
            if (t->n == t->cap) {
                size_t cap = t->cap ? 2 * t->cap : 16;
                entry_t *grown = realloc(t->entries, cap * sizeof *grown);
                if (grown == NULL) {
                    ddp_json_free(root);
                    return;
                }
                t->entries = grown;
                t->cap = cap;
            }
            ddp_buf_t text = DDP_BUF_INIT;
            char *copy = strdup(scope), *shown = NULL;
            if (ddp_buf_printable_cut(&text, scope, scope_len, SHOWN_MAX, false) == 0)
                shown = ddp_buf_steal(&text);
            if (copy != NULL && shown != NULL)
                t->entries[t->n++] = (entry_t){(pid_t)pid, copy, shown, expires, sig};
            else
                free(copy), free(shown);
        }
        rearm(t);
    }
    ddp_json_free(root);
}

static void on_readable(uv_poll_t *handle, int status, int events)
{
    (void)events;
    ddp_file_timer_t *t = handle->data;
    char chunk[4096];
    if (status < 0)
        return;
    for (int turn = 0; turn < READS_PER_TURN; turn++) { /* the poll comes back for more */
        ssize_t r = read(t->fd, chunk, sizeof chunk);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return; /* EAGAIN: all read (our own write end keeps end of file away) */
        for (const char *p = chunk, *end = chunk + r; p < end;) {
            const char *nl = memchr(p, '\n', (size_t)(end - p));
            size_t take = (size_t)((nl != NULL ? nl : end) - p);
            if (!t->skipping && t->line.len + take > LINE_MAX_BYTES) {
                malformed(t, "is too long", t->line.data != NULL ? t->line.data : p,
                          t->line.len > 0 ? t->line.len : take);
                t->skipping = true;
                ddp_buf_clear(&t->line);
            }
            if (!t->skipping && ddp_buf_append(&t->line, p, take) != 0)
                t->skipping = true; /* out of memory: this request is lost */
            p += take;
            if (nl == NULL)
                break;
            p++; /* past the newline: the request is whole */
            if (!t->skipping && t->line.len > 0)
                request(t, t->line.data, t->line.len);
            t->skipping = false;
            ddp_buf_clear(&t->line);
        }
    }
}

/* Expired timers: for each process, the earliest with a signal sends it (its other timers
 * go too); expired ones without a signal are said and dropped. */
static void on_timer(uv_timer_t *handle)
{
    ddp_file_timer_t *t = handle->data;
    double now = ddp_clock_wall();
    for (size_t i = 0; i < t->n;) {
        if (t->entries[i].expires > now) {
            i++;
            continue;
        }
        pid_t pid = t->entries[i].pid;
        size_t chosen = SIZE_MAX;
        for (size_t k = 0; k < t->n; k++) {
            const entry_t *e = &t->entries[k];
            if (e->pid == pid && e->expires <= now && e->sig > 0 &&
                (chosen == SIZE_MAX || e->expires < t->entries[chosen].expires))
                chosen = k;
        }
        if (chosen == SIZE_MAX) {
            ddp_log_info(t->log,
                         "watchdog timer '%s' of pid %d expired; it names no signal: "
                         "nothing is done",
                         t->entries[i].shown, (int)pid);
            remove_entry(t, i);
            continue;
        }
        entry_t *e = &t->entries[chosen];
        char name[32];
        ddp_signal_name(e->sig, name, sizeof name);
        int rank = t->owner(t->ctx, pid);
        if (rank < 0) {
            ddp_log_warn(t->log,
                         "watchdog timer '%s' of pid %d expired, but pid %d is no process of "
                         "this node's workers: not sending it %s",
                         e->shown, (int)pid, (int)pid, name);
        } else if (kill(pid, e->sig) == 0) {
            ddp_log_warn(t->log,
                         "watchdog timer '%s' of local rank %d (pid %d) expired: sending it %s",
                         e->shown, rank, (int)pid, name);
            t->fired(t->ctx, pid, rank, e->shown, e->sig);
        } else if (errno != ESRCH) {
            ddp_log_warn(t->log,
                         "watchdog timer '%s' of local rank %d (pid %d) expired: "
                         "unable to send it %s: %s",
                         e->shown, rank, (int)pid, name, strerror(errno));
        }
        for (size_t k = t->n; k-- > 0;) /* its timers go with it (torchrun's) */
            if (t->entries[k].pid == pid)
                remove_entry(t, k);
        i = 0; /* the list has changed under us */
    }
    rearm(t);
}

int ddp_file_timer_watch(ddp_file_timer_t *t, uv_loop_t *loop, ddp_file_timer_owner_fn owner,
                         ddp_file_timer_fired_fn fired, void *ctx)
{
    t->owner = owner;
    t->fired = fired;
    t->ctx = ctx;
    int err = uv_poll_init(loop, &t->poll, t->fd);
    if (err != 0)
        return err;
    uv_timer_init(loop, &t->timer);
    t->poll.data = t->timer.data = t;
    t->watching = true;
    return uv_poll_start(&t->poll, UV_READABLE, on_readable);
}

void ddp_file_timer_clear(ddp_file_timer_t *t)
{
    while (t != NULL && t->n > 0)
        remove_entry(t, t->n - 1);
    if (t != NULL)
        rearm(t);
}

void ddp_file_timer_postpone(ddp_file_timer_t *t, double seconds)
{
    for (size_t i = 0; t != NULL && i < t->n; i++)
        t->entries[i].expires += seconds;
    if (t != NULL)
        rearm(t);
}

void ddp_file_timer_hold(ddp_file_timer_t *t, bool hold)
{
    if (t == NULL)
        return;
    t->held = hold;
    rearm(t);
}

void ddp_file_timer_close(ddp_file_timer_t *t)
{
    if (t == NULL || !t->watching)
        return;
    t->watching = false;
    uv_close((uv_handle_t *)&t->poll, NULL);
    uv_close((uv_handle_t *)&t->timer, NULL);
}

void ddp_file_timer_free(ddp_file_timer_t *t)
{
    if (t == NULL)
        return;
    if (t->fd >= 0)
        close(t->fd);
    if (t->keep_fd >= 0)
        close(t->keep_fd);
    if (t->path != NULL)
        (void)unlink(t->path);
    ddp_file_timer_clear(t);
    free(t->entries);
    ddp_buf_free(&t->line);
    free(t->path);
    free(t);
}
