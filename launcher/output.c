/* Worker output (see output.h): sinks, and the piped streams on the loop. */
#include "output.h"

#include "error.h"
#include "io.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* One piped stream (stdout or stderr) of a worker; freed when its poll handle closes. */
struct ddp_stream_s {
    uv_poll_t poll;
    ddp_output_t *output;
    ddp_stream_t **owner; /* the worker's pointer to this stream */
    int fd;               /* read end of the pipe */
    int file_fd;          /* the log file of a tee'd stream, else -1 */
    bool closing;
    uint64_t bytes; /* read so far */
    ddp_console_t *console;
    ddp_lines_t lines;
};

static void on_stream_closed(uv_handle_t *handle)
{
    ddp_stream_t *s = handle->data;
    ddp_output_discard(s);
}

static void stream_close(ddp_stream_t *s)
{
    if (s->closing)
        return;
    s->closing = true;
    ddp_lines_finish(&s->lines, s->console);
    *s->owner = NULL;
    uv_close((uv_handle_t *)&s->poll, on_stream_closed);
}

/* Reads what the pipe holds now (at most `budget` bytes), writes it to the log file and
 * the console, and closes the stream at EOF. */
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
            if (r < 0)
                ddp_log_warn(o->log, "unable to read a worker's output: %s", strerror(errno));
            stream_close(s);
            return;
        }
        s->bytes += (uint64_t)r;
        if (s->file_fd >= 0 && ddp_write_all(s->file_fd, o->scratch, (size_t)r) != 0) {
            ddp_log_warn(o->log,
                         "unable to write a worker's log file: %s; the rest goes to the "
                         "console only",
                         strerror(errno));
            close(s->file_fd);
            s->file_fd = -1;
        }
        if (ddp_lines_feed(&s->lines, s->console, o->scratch, (size_t)r) != 0)
            ddp_log_error(o->log, "out of memory while assembling a worker's output lines");
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

/* A pipe whose read end the loop reads, for a piped sink. Logs what failed. */
static int open_pipe(ddp_output_t *o, ddp_sink_t sink, const char *path, const char *prefix,
                     int std, int local_rank, int *child_fd, ddp_stream_t **stream)
{
    const char *name = std == DDP_STD_OUT ? "stdout" : "stderr";
    int fds[2] = {-1, -1}, err = 0;
    ddp_stream_t *s = calloc(1, sizeof *s);
    if (s == NULL) {
        ddp_log_error(o->log, "out of memory for the %s of worker local rank %d", name, local_rank);
        return -ENOMEM;
    }
    s->file_fd = -1;
    if (pipe2(fds, O_CLOEXEC) != 0 || fcntl(fds[0], F_SETFL, O_NONBLOCK) != 0) {
        err = -errno;
        ddp_log_error(o->log, "unable to create a pipe for the %s of worker local rank %d: %s",
                      name, local_rank, ddp_strerror(err));
        goto fail;
    }
    if (sink == DDP_SINK_TEE &&
        (s->file_fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666)) < 0) {
        err = -errno;
        ddp_log_error(o->log, "unable to open %s for worker local rank %d: %s", path, local_rank,
                      ddp_strerror(err));
        goto fail;
    }
    s->output = o;
    s->fd = fds[0];
    s->console = std == DDP_STD_OUT ? &o->console_out : &o->console_err;
    ddp_lines_init(&s->lines, sink == DDP_SINK_TEE ? prefix : "", DDP_LINE_MAX);
    s->poll.data = s;
    *child_fd = fds[1];
    *stream = s;
    return 0;
fail:
    if (fds[0] >= 0) {
        close(fds[0]);
        close(fds[1]);
    }
    free(s);
    return err;
}

int ddp_output_open(ddp_output_t *o, const ddp_launch_config_t *cfg, const char *attempt_dir,
                    int local_rank, const char *prefix, int std, int *child_fd,
                    ddp_stream_t **stream)
{
    const char *file = std == DDP_STD_OUT ? "stdout.log" : "stderr.log";
    ddp_sink_t sink = ddp_logs_sink(cfg, local_rank, std);
    char *path = NULL;
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
        err = open_pipe(o, sink, path, prefix, std, local_rank, child_fd, stream);
    }
    free(path);
    return err;
}

void ddp_output_watch(ddp_stream_t *s, ddp_stream_t **owner, int local_rank)
{
    int err = uv_poll_init(s->output->loop, &s->poll, s->fd);
    if (err != 0) {
        ddp_log_error(s->output->log, "unable to watch the output of worker local rank %d: %s",
                      local_rank, uv_strerror(err));
        ddp_output_discard(s); /* the worker then writes to a closed pipe */
        return;
    }
    s->owner = owner;
    *owner = s;
    uv_poll_start(&s->poll, UV_READABLE, on_stream_readable);
}

void ddp_output_discard(ddp_stream_t *s)
{
    if (s == NULL)
        return;
    close(s->fd);
    if (s->file_fd >= 0)
        close(s->file_fd);
    ddp_lines_free(&s->lines);
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
