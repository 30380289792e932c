/* Worker output (see output.h): sinks, the piped streams on the loop, and the console
 * writer's thread. */
#include "output/output.h"

#include "error.h"
#include "io.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

/* A console-only stream's bytes the writer may hold before the loop stops reading it, and
 * how far they must fall before it reads again. */
#define PENDING_HIGH ((size_t)1 << 20)
#define PENDING_LOW  ((size_t)256 << 10)

/* One piped stream (stdout or stderr) of a worker; freed when its poll handle closes. */
struct ddp_stream_s {
    uv_poll_t poll;
    ddp_output_t *output;
    ddp_stream_t **owner; /* the worker's pointer to this stream */
    ddp_recent_t *recent; /* the worker's copy of the last bytes, or NULL */
    int fd;               /* read end of the pipe, or the pseudo-terminal's master */
    bool pty;             /* a pseudo-terminal: EIO is its end */
    int console_fd;       /* the terminal whose size a pseudo-terminal takes */
    ddp_stream_t *next_pty;
    int file_fd; /* the log file of a tee'd stream, else -1 */
    char *path;  /* that file's path (the writer reads it back) */
    bool closing;
    bool paused; /* not polled: its console copy is PENDING_HIGH behind */
    ddp_stream_t *next_paused;
    uint64_t bytes; /* read so far */
    ddp_console_t *console;
    const char *prefix;   /* borrowed until the stream is watched */
    ddp_tail_t *tail;     /* its console copy, handed to the writer */
    int dup_fd;           /* its filtered_*.log (--duplicate-*-filters), until watched; -1 */
    char *const *filters; /* which lines go there (the config's) */
};

/* What the console writer holds of one stream; it outlives the stream (the writer frees it
 * once the last line is out). Fields under the output's lock but `lines`, the writer's. */
struct ddp_tail_s {
    ddp_tail_t *next;
    ddp_console_t *console;
    ddp_lines_t lines;
    char *prefix;
    int file_fd;       /* a tee'd stream's log file, read back; -1: none */
    uint64_t written;  /* bytes in that file */
    uint64_t cursor;   /* of them, bytes the writer has copied */
    ddp_buf_t pending; /* bytes for the console only (no file, or the file failed) */
    ddp_console_t dup; /* the filtered copy's file (fd -1: none) */
    bool finished;     /* the stream closed: after the rest, its last partial line */
    bool resume;       /* the loop may read the stream again */
    double held_since; /* the writer's: since when its unfinished line has new bytes; 0 */
};

/* ---- The console writer (its own thread) ---- */

static bool tail_has_work(const ddp_tail_t *t)
{
    return t->cursor < t->written || t->pending.len > 0 || t->finished;
}

/* After the writer fed a tail: since when its unfinished line holds bytes not shown. */
static void note_partial(ddp_tail_t *t)
{
    if (ddp_lines_unshown(&t->lines) == 0 || t->console->show_after <= 0)
        t->held_since = 0;
    else if (t->held_since == 0)
        t->held_since = ddp_clock_mono();
}

/* Shows the unfinished lines held their console's show_after (dots, a prompt, a progress
 * bar after its "\r": as a worker's own console would); returns when the next is due (0:
 * none). Called and returns with the lock held; writes the console without it. */
static double show_partials(ddp_output_t *o)
{
    double next = 0, now = 0;
    for (ddp_tail_t *t = o->tails; t != NULL; t = t->next) {
        if (t->held_since == 0)
            continue;
        double due = t->held_since + t->console->show_after;
        if (now == 0) /* once a call, and only where a line is held */
            now = ddp_clock_mono();
        if (due > now) {
            next = next == 0 || due < next ? due : next;
            continue;
        }
        pthread_mutex_unlock(&o->lock);
        ddp_lines_show(&t->lines, t->console);
        pthread_mutex_lock(&o->lock);
        t->held_since = 0;
    }
    return next;
}

/* One piece of a tail's work: a chunk read back from its file, or what is pending. Called
 * and returns with the lock held; writes the console without it. False when there was none. */
static bool write_some(ddp_output_t *o, ddp_tail_t *t, char *chunk, size_t cap)
{
    if (t->cursor < t->written) {
        uint64_t left = t->written - t->cursor, at = t->cursor;
        size_t want = left < cap ? (size_t)left : cap;
        pthread_mutex_unlock(&o->lock);
        ssize_t got = pread(t->file_fd, chunk, want, (off_t)at);
        if (got > 0)
            (void)ddp_lines_feed(&t->lines, t->console, chunk, (size_t)got);
        note_partial(t);
        pthread_mutex_lock(&o->lock);
        /* A file that cannot be read back (cut short under us) costs its console copy. */
        t->cursor = got > 0 ? t->cursor + (uint64_t)got : t->written;
        return true;
    }
    if (t->pending.len > 0) {
        ddp_buf_t take = t->pending;
        memset(&t->pending, 0, sizeof t->pending);
        if (!t->resume && o->async_open)
            uv_async_send(&o->resume); /* the loop may read its stream again */
        t->resume = true;
        pthread_mutex_unlock(&o->lock);
        if (ddp_lines_feed(&t->lines, t->console, take.data, take.len) != 0)
            ddp_log_error(o->log, "out of memory while assembling a worker's output lines");
        note_partial(t);
        ddp_buf_free(&take);
        pthread_mutex_lock(&o->lock);
        return true;
    }
    return false;
}

static void tail_free(ddp_tail_t *t)
{
    if (t->file_fd >= 0)
        close(t->file_fd);
    if (t->dup.fd >= 0)
        close(t->dup.fd);
    ddp_lines_free(&t->lines);
    ddp_buf_free(&t->pending);
    free(t->prefix);
    free(t);
}

/* Takes every finished tail whose work is done off the list, its last line written. */
static void reap_tails(ddp_output_t *o)
{
    for (ddp_tail_t **at = &o->tails; *at != NULL;) {
        ddp_tail_t *t = *at;
        if (!t->finished || t->cursor < t->written || t->pending.len > 0) {
            at = &t->next;
            continue;
        }
        *at = t->next;
        pthread_mutex_unlock(&o->lock);
        ddp_lines_finish(&t->lines, t->console);
        tail_free(t);
        pthread_mutex_lock(&o->lock);
        at = &o->tails; /* the list may have grown at its head meanwhile */
    }
}

/* The console's stdout went away (EPIPE: the reader of its pipe quit, `| head`): the job
 * goes on, and says once, on stderr, that the console's share of the output is dropped.
 * Called with the lock held; logs without it. */
static void say_console_gone(ddp_output_t *o)
{
    if (!o->console_out.broken || o->said_gone)
        return;
    o->said_gone = true;
    pthread_mutex_unlock(&o->lock);
    ddp_log_warn(o->log, "stdout is closed (its reader went away): the job goes on, and what the "
                         "workers write there is dropped from now on, but in their log files "
                         "(--tee, --redirects)");
    pthread_mutex_lock(&o->lock);
}

static void *writer_main(void *arg)
{
    ddp_output_t *o = arg;
    char *chunk = malloc(64 * 1024);
    pthread_mutex_lock(&o->lock);
    for (;;) {
        bool did = false;
        /* One chunk of each tail in turn: a chatty worker cannot hold the others back. New
         * tails join at the head, and only this thread removes any, so `next` stays valid. */
        for (ddp_tail_t *t = o->tails; t != NULL && chunk != NULL; t = t->next)
            did = write_some(o, t, chunk, 64 * 1024) || did;
        reap_tails(o);
        say_console_gone(o);
        if (did) {
            (void)show_partials(o); /* a quiet rank's prompt, while others are busy */
            continue;
        }
        bool any = false;
        for (ddp_tail_t *t = o->tails; t != NULL && !any; t = t->next)
            any = tail_has_work(t);
        if (any && chunk != NULL)
            continue;
        o->busy = false;
        pthread_cond_broadcast(&o->idle);
        if (o->stopping)
            break;
        double due = show_partials(o);
        if (due == 0) {
            pthread_cond_wait(&o->work, &o->lock);
        } else {
            struct timespec until = ddp_clock_timespec(due);
            pthread_cond_timedwait(&o->work, &o->lock, &until);
        }
        o->busy = true;
    }
    pthread_mutex_unlock(&o->lock);
    free(chunk);
    return NULL;
}

/* ---- The loop's side ---- */

static void pause_stream(ddp_stream_t *s)
{
    if (s->paused || s->closing)
        return;
    uv_poll_stop(&s->poll);
    s->paused = true;
    s->next_paused = s->output->paused;
    s->output->paused = s;
}

static void unlist_paused(ddp_stream_t *s)
{
    for (ddp_stream_t **at = &s->output->paused; *at != NULL; at = &(*at)->next_paused)
        if (*at == s) {
            *at = s->next_paused;
            break;
        }
    s->paused = false;
}

static void on_stream_readable(uv_poll_t *handle, int status, int events);

/* The writer caught up with some paused streams: read them again. */
static void on_resume(uv_async_t *handle)
{
    ddp_output_t *o = handle->data;
    ddp_stream_t *s = o->paused, *next;
    for (; s != NULL; s = next) {
        next = s->next_paused;
        pthread_mutex_lock(&o->lock);
        bool go = s->tail->resume;
        pthread_mutex_unlock(&o->lock);
        if (!go)
            continue;
        unlist_paused(s);
        uv_poll_start(&s->poll, UV_READABLE, on_stream_readable);
    }
}

void ddp_output_init(ddp_output_t *o, uv_loop_t *loop, const ddp_log_t *log, bool merged)
{
    o->loop = loop;
    o->log = log;
    o->console_out.fd = 1;
    o->console_err.fd = 2;
    /* An unfinished line (dots, a prompt, a progress bar) shows soon on a terminal; in a
     * file or pipe a second on (a worker preempted inside a line splits it less often). */
    o->console_out.show_after = isatty(1) ? 0.1 : 1;
    o->console_err.show_after = isatty(2) ? 0.1 : 1;
    if (merged)
        o->console_err.same_file = &o->console_out;
    /* The launcher's messages (stderr) end a worker's open line there first. */
    (merged ? &o->console_out : &o->console_err)->log_line = log->fd == 2 ? log->open_line : NULL;
}

int ddp_output_start(ddp_output_t *o)
{
    int err = uv_async_init(o->loop, &o->resume, on_resume);
    if (err != 0)
        return err;
    o->resume.data = o;
    o->async_open = true;
    pthread_mutex_init(&o->lock, NULL);
    /* The deadlines (ddp_output_flush's, an unfinished line's): a clock step moves them not. */
    pthread_condattr_t monotonic;
    pthread_condattr_init(&monotonic);
    pthread_condattr_setclock(&monotonic, CLOCK_MONOTONIC);
    pthread_cond_init(&o->work, &monotonic);
    pthread_cond_init(&o->idle, &monotonic);
    pthread_condattr_destroy(&monotonic);
    o->busy = true; /* until the writer first waits */
    if ((err = pthread_create(&o->writer, NULL, writer_main, o)) != 0) {
        pthread_mutex_destroy(&o->lock);
        pthread_cond_destroy(&o->work);
        pthread_cond_destroy(&o->idle);
        return -err;
    }
    o->started = true;
    return 0;
}

void ddp_output_close_handles(ddp_output_t *o)
{
    if (!o->async_open)
        return;
    pthread_mutex_lock(&o->lock);
    o->async_open = false; /* the writer sends nothing more */
    pthread_mutex_unlock(&o->lock);
    uv_close((uv_handle_t *)&o->resume, NULL);
}

void ddp_output_flush(ddp_output_t *o, double timeout)
{
    if (!o->started)
        return;
    struct timespec until = ddp_clock_timespec(ddp_clock_mono() + (timeout >= 0 ? timeout : 0));
    pthread_mutex_lock(&o->lock);
    for (;;) {
        bool any = o->busy;
        for (ddp_tail_t *t = o->tails; t != NULL && !any; t = t->next)
            any = tail_has_work(t);
        if (!any)
            break;
        pthread_cond_signal(&o->work);
        if (timeout < 0)
            pthread_cond_wait(&o->idle, &o->lock);
        else if (pthread_cond_timedwait(&o->idle, &o->lock, &until) == ETIMEDOUT)
            break;
    }
    pthread_mutex_unlock(&o->lock);
}

void ddp_output_stop(ddp_output_t *o)
{
    if (!o->started)
        return;
    pthread_mutex_lock(&o->lock);
    o->stopping = true;
    pthread_cond_signal(&o->work);
    pthread_mutex_unlock(&o->lock);
    pthread_join(o->writer, NULL); /* it ends only with nothing left to write */
    for (ddp_tail_t *t = o->tails, *next; t != NULL; t = next) {
        next = t->next; /* a stream never closed (a failed start): its bytes are out */
        ddp_lines_finish(&t->lines, t->console);
        tail_free(t);
    }
    o->tails = NULL;
    pthread_mutex_destroy(&o->lock);
    pthread_cond_destroy(&o->work);
    pthread_cond_destroy(&o->idle);
    o->started = false;
}

static void on_stream_closed(uv_handle_t *handle)
{
    ddp_stream_t *s = handle->data;
    ddp_output_discard(s);
}

static void stream_close(ddp_stream_t *s)
{
    if (s->closing)
        return;
    if (s->paused)
        unlist_paused(s);
    s->closing = true;
    ddp_output_t *o = s->output;
    for (ddp_stream_t **at = &o->ptys; s->pty && *at != NULL; at = &(*at)->next_pty)
        if (*at == s) {
            *at = s->next_pty;
            break;
        }
    pthread_mutex_lock(&o->lock);
    s->tail->finished = true; /* the writer frees it once its last line is out */
    pthread_cond_signal(&o->work);
    pthread_mutex_unlock(&o->lock);
    s->tail = NULL;
    *s->owner = NULL;
    uv_close((uv_handle_t *)&s->poll, on_stream_closed);
}

/* Hands `len` bytes just read to the console writer: a tee'd stream's are in its file
 * already (the writer reads them back), the others are queued. */
static void hand_over(ddp_stream_t *s, const char *data, size_t len, bool in_file)
{
    ddp_output_t *o = s->output;
    bool full = false;
    pthread_mutex_lock(&o->lock);
    if (in_file) {
        s->tail->written += len;
    } else if (ddp_buf_append(&s->tail->pending, data, len) != 0) {
        ddp_log_error(o->log, "out of memory for a worker's console output: %zu bytes dropped",
                      len);
    } else {
        full = s->tail->pending.len > PENDING_HIGH;
        if (full)
            s->tail->resume = false;
    }
    pthread_cond_signal(&o->work);
    pthread_mutex_unlock(&o->lock);
    if (full)
        pause_stream(s);
}

/* Keeps the last sizeof data bytes of what the stream carried. */
static void keep_recent(ddp_recent_t *r, const char *data, size_t len)
{
    size_t cap = sizeof r->data;
    if (len >= cap) {
        memcpy(r->data, data + len - cap, cap);
        r->len = cap;
        return;
    }
    if (r->len + len > cap) {
        size_t drop = r->len + len - cap;
        memmove(r->data, r->data + drop, r->len - drop);
        r->len -= drop;
    }
    memcpy(r->data + r->len, data, len);
    r->len += len;
}

const char *ddp_recent_line(const ddp_recent_t *r, char *buf, size_t cap)
{
    size_t end = r->len, start;
    buf[0] = '\0';
    /* Past line ends and blanks, back to the start of the line they end. */
    while (end > 0 && (r->data[end - 1] == '\n' || r->data[end - 1] == '\r' ||
                       r->data[end - 1] == ' ' || r->data[end - 1] == '\t'))
        end--;
    for (start = end; start > 0 && r->data[start - 1] != '\n' && r->data[start - 1] != '\r';)
        start--;
    if (end == 0 || (start == 0 && r->len == sizeof r->data))
        return buf; /* nothing, or a line whose start was cut off */
    size_t n = end - start < cap - 1 ? end - start : cap - 1;
    memcpy(buf, r->data + start, n);
    buf[n] = '\0';
    return buf;
}

/* Reads what the pipe holds now (at most `budget` bytes), writes it to the log file, hands
 * it to the console writer, and closes the stream at EOF. */
static void stream_read(ddp_stream_t *s, size_t budget)
{
    ddp_output_t *o = s->output;
    while (!s->closing && budget > 0) {
        ssize_t r = read(s->fd, o->scratch, sizeof o->scratch);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        if (r <= 0) {
            /* A pseudo-terminal's master reads EIO once every slave is closed. */
            if (r < 0 && !(s->pty && errno == EIO))
                ddp_log_warn(o->log, "unable to read a worker's output: %s", strerror(errno));
            stream_close(s);
            return;
        }
        s->bytes += (uint64_t)r;
        if (s->recent != NULL)
            keep_recent(s->recent, o->scratch, (size_t)r);
        if (s->file_fd >= 0 && ddp_write_all(s->file_fd, o->scratch, (size_t)r) != 0) {
            ddp_log_warn(o->log,
                         "unable to write a worker's log file: %s; the rest goes to the "
                         "console only",
                         strerror(errno));
            close(s->file_fd);
            s->file_fd = -1;
        }
        hand_over(s, o->scratch, (size_t)r, s->file_fd >= 0 && s->tail->file_fd >= 0);
        budget -= (size_t)r < budget ? (size_t)r : budget;
    }
}

static void on_stream_readable(uv_poll_t *handle, int status, int events)
{
    (void)events;
    ddp_stream_t *s = handle->data;
    if (status < 0) {
        stream_close(s);
        return;
    }
    /* A bounded share per event keeps one chatty worker from starving the others. */
    stream_read(s, (size_t)1 << 20);
}

/* Terminal `from`'s size onto pseudo-terminal `to` (either end). */
static void copy_size(int from, int to)
{
    struct winsize size;
    if (ioctl(from, TIOCGWINSZ, &size) == 0)
        (void)ioctl(to, TIOCSWINSZ, &size);
}

void ddp_output_resize(ddp_output_t *o)
{
    for (ddp_stream_t *s = o->ptys; s != NULL; s = s->next_pty)
        copy_size(s->console_fd, s->fd);
}

/* A pseudo-terminal in fds (master, slave), for a stream that goes only to a console that
 * is a terminal: the worker sees a terminal, as torchrun's workers do when they write to
 * it themselves, so its stdio is line-buffered (a C program's printf shows at once, not
 * at exit) and isatty() is true. Raw (no \n -> \r\n: the console's own terminal does
 * that), with the console's size. -errno where there is none (no /dev/pts in a container,
 * the kernel's limit): the caller takes a pipe. */
static int open_pty(int console_fd, int fds[2])
{
    char name[64];
    int master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC), slave = -1;
    if (master < 0 || grantpt(master) != 0 || unlockpt(master) != 0 ||
        ptsname_r(master, name, sizeof name) != 0 ||
        (slave = open(name, O_RDWR | O_NOCTTY | O_CLOEXEC)) < 0) {
        int err = -errno;
        if (master >= 0)
            close(master);
        return err;
    }
    struct termios mode;
    if (tcgetattr(slave, &mode) == 0) {
        cfmakeraw(&mode);
        (void)tcsetattr(slave, TCSANOW, &mode);
    }
    copy_size(console_fd, slave);
    fds[0] = master;
    fds[1] = slave;
    return 0;
}

/* A pipe (or pseudo-terminal) whose read end the loop reads, for a piped sink. Logs what
 * failed. */
static int open_pipe(ddp_output_t *o, const ddp_launch_config_t *cfg, ddp_sink_t sink,
                     const char *path, const char *filtered, const char *prefix, int std,
                     int local_rank, int *child_fd, ddp_stream_t **stream)
{
    const char *name = std == DDP_STD_OUT ? "stdout" : "stderr";
    int fds[2] = {-1, -1}, err = 0;
    ddp_stream_t *s = calloc(1, sizeof *s);
    if (s == NULL) {
        ddp_log_error(o->log, "out of memory for the %s of worker local rank %d", name, local_rank);
        return -ENOMEM;
    }
    s->file_fd = -1;
    s->dup_fd = -1;
    int console_fd = std == DDP_STD_OUT ? o->console_out.fd : o->console_err.fd;
    if (sink == DDP_SINK_CONSOLE && isatty(console_fd)) {
        int why = open_pty(console_fd, fds);
        s->pty = why == 0;
        if (why != 0)
            ddp_log_debug(o->log,
                          "no pseudo-terminal for the %s of worker local rank %d (%s): "
                          "a pipe instead",
                          name, local_rank, ddp_strerror(why));
    }
    if ((!s->pty && pipe2(fds, O_CLOEXEC) != 0) || fcntl(fds[0], F_SETFL, O_NONBLOCK) != 0) {
        err = -errno;
        ddp_log_error(o->log, "unable to create a pipe for the %s of worker local rank %d: %s",
                      name, local_rank, ddp_strerror(err));
        goto fail;
    }
    if (sink == DDP_SINK_TEE &&
        ((s->file_fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666)) < 0 ||
         (s->path = strdup(path)) == NULL)) {
        err = s->file_fd < 0 ? -errno : -ENOMEM;
        ddp_log_error(o->log, "unable to open %s for worker local rank %d: %s", path, local_rank,
                      ddp_strerror(err));
        goto fail;
    }
    if (sink == DDP_SINK_TEE && cfg->dup_filters[std] != NULL) {
        /* Every tee'd stream of the attempt appends its matching lines to the one file. */
        s->filters = cfg->dup_filters[std];
        if ((s->dup_fd = open(filtered, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0666)) < 0)
            ddp_log_warn(o->log, "unable to open %s: %s; its lines of local rank %d are lost",
                         filtered, strerror(errno), local_rank);
    }
    s->output = o;
    s->fd = fds[0];
    s->console_fd = console_fd;
    s->console = std == DDP_STD_OUT ? &o->console_out : &o->console_err;
    s->prefix = sink == DDP_SINK_TEE ? prefix : "";
    s->poll.data = s;
    *child_fd = fds[1];
    *stream = s;
    return 0;
fail:
    if (fds[0] >= 0) {
        close(fds[0]);
        close(fds[1]);
    }
    if (s->file_fd >= 0)
        close(s->file_fd);
    if (s->dup_fd >= 0)
        close(s->dup_fd);
    free(s);
    return err;
}

int ddp_output_open(ddp_output_t *o, const ddp_launch_config_t *cfg, const char *attempt_dir,
                    int local_rank, const char *prefix, int std, int *child_fd,
                    ddp_stream_t **stream)
{
    const char *file = std == DDP_STD_OUT ? "stdout.log" : "stderr.log";
    ddp_sink_t sink = ddp_logs_sink(cfg, local_rank, std);
    char *path = NULL, *filtered = NULL;
    int err = 0;
    *child_fd = -1;
    *stream = NULL;
    if ((sink == DDP_SINK_FILE || sink == DDP_SINK_TEE) &&
        asprintf(&path, "%s/%d/%s", attempt_dir, local_rank, file) < 0)
        return -ENOMEM;
    if (sink == DDP_SINK_NULL || sink == DDP_SINK_FILE) {
        int fd = sink == DDP_SINK_NULL ? open("/dev/null", O_WRONLY | O_CLOEXEC)
                                       : open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
        if (fd < 0) {
            err = -errno;
            ddp_log_error(o->log, "unable to open %s for worker local rank %d: %s",
                          path ? path : "/dev/null", local_rank, ddp_strerror(err));
        } else {
            *child_fd = fd;
        }
    } else {
        if (asprintf(&filtered, "%s/filtered_%s", attempt_dir, file) < 0)
            filtered = NULL;
        err = filtered == NULL ? -ENOMEM
                               : open_pipe(o, cfg, sink, path, filtered, prefix, std, local_rank,
                                           child_fd, stream);
    }
    free(path);
    free(filtered);
    return err;
}

/* The stream's console copy, handed to the writer: a tee'd stream's file is read back
 * through a descriptor of its own. */
static int tail_new(ddp_stream_t *s)
{
    ddp_output_t *o = s->output;
    ddp_tail_t *t = calloc(1, sizeof *t);
    if (t == NULL || (t->prefix = strdup(s->prefix)) == NULL) {
        free(t);
        return -ENOMEM;
    }
    t->console = s->console;
    t->resume = true;
    t->file_fd = s->path != NULL ? open(s->path, O_RDONLY | O_CLOEXEC) : -1;
    ddp_lines_init(&t->lines, t->prefix, DDP_LINE_MAX);
    t->dup.fd = s->dup_fd; /* the tail's now: the writer writes it */
    s->dup_fd = -1;
    if (t->dup.fd >= 0) {
        t->lines.dup = &t->dup;
        t->lines.filters = s->filters;
    }
    pthread_mutex_lock(&o->lock);
    t->next = o->tails;
    o->tails = t;
    pthread_mutex_unlock(&o->lock);
    s->tail = t;
    return 0;
}

void ddp_output_watch(ddp_stream_t *s, ddp_stream_t **owner, ddp_recent_t *recent, int local_rank)
{
    int err = tail_new(s);
    if (err == 0)
        err = uv_poll_init(s->output->loop, &s->poll, s->fd);
    if (err != 0) {
        ddp_log_error(s->output->log, "unable to watch the output of worker local rank %d: %s",
                      local_rank, ddp_strerror(err));
        if (s->tail != NULL) {
            pthread_mutex_lock(&s->output->lock);
            s->tail->finished = true;
            pthread_mutex_unlock(&s->output->lock);
        }
        ddp_output_discard(s); /* the worker then writes to a closed pipe */
        return;
    }
    s->owner = owner;
    *owner = s;
    s->recent = recent;
    if (s->pty) { /* until stream_close */
        s->next_pty = s->output->ptys;
        s->output->ptys = s;
    }
    uv_poll_start(&s->poll, UV_READABLE, on_stream_readable);
}

void ddp_output_discard(ddp_stream_t *s)
{
    if (s == NULL)
        return;
    close(s->fd);
    if (s->file_fd >= 0)
        close(s->file_fd);
    if (s->dup_fd >= 0)
        close(s->dup_fd);
    free(s->path);
    free(s);
}

void ddp_output_drain(ddp_stream_t *s, bool close_after)
{
    if (s == NULL)
        return;
    stream_read(s, SIZE_MAX);
    if (close_after)
        stream_close(s);
}

uint64_t ddp_output_bytes(const ddp_stream_t *s)
{
    return s != NULL ? s->bytes : 0;
}
