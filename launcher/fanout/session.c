/* A node started over ssh by --hosts ends with its ssh session (see session.h). */
#include "fanout/session.h"

#include "env.h"
#include "io.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#define SESSION_GRACE_S 2.0

static void on_session_closed(uv_handle_t *handle)
{
    ddp_session_t *s = handle->data;
    close(s->fd);
    s->fd = -1;
}

static void on_session(uv_poll_t *handle, int status, int events)
{
    ddp_session_t *s = handle->data;
    int pending = 0;
    bool told = false;
    /* Only the supervisor's end is ever written to it (DDP_SESSION_END); anything else is
     * discarded; readable and empty is its end. */
    if (status == 0 && !(events & UV_DISCONNECT) && ioctl(s->fd, FIONREAD, &pending) == 0 &&
        pending > 0) {
        char sink[4096];
        ssize_t n =
            read(s->fd, sink, (size_t)pending < sizeof sink ? (size_t)pending : sizeof sink);
        told = n > 0 && memchr(sink, DDP_SESSION_END, (size_t)n) != NULL;
        if (!told)
            return;
    }
    uv_poll_stop(handle);
    /* An end at once without the supervisor's word is ssh -n's (its input /dev/null); the
     * supervisor's, after node 0 ended, may reach a launcher that ssh started late. */
    if (!told && ddp_clock_mono() - s->since < SESSION_GRACE_S) {
        ddp_log_warn(s->log, "this node's input (its DDP_LAUNCH_SSH session's) ended at once: the "
                             "command does not pass it on (ssh -n?), so this node cannot end "
                             "with the ddp-launch --hosts that started it");
        return;
    }
    ddp_log_warn(s->log, "the ssh session that started this node has ended (the ddp-launch --hosts "
                         "that started it is gone, or ended the job): stopping as on SIGHUP");
    raise(SIGHUP);
}

void ddp_session_watch(uv_loop_t *loop, ddp_session_t *s, const ddp_log_t *log)
{
    const char *mark = getenv(ddp_env_name(DDP_ENV_DDP_LAUNCH_SSH_NODE));
    s->fd = -1;
    s->watching = false;
    s->log = log;
    s->since = ddp_clock_mono();
    if (mark == NULL || strcmp(mark, "1") != 0)
        return;
    unsetenv(ddp_env_name(DDP_ENV_DDP_LAUNCH_SSH_NODE));
    int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
    s->fd = fcntl(STDIN_FILENO, F_DUPFD_CLOEXEC, 3);
    if (null < 0 || s->fd < 0 || dup2(null, STDIN_FILENO) < 0) {
        ddp_log_warn(log,
                     "unable to watch the ssh session's stdin: %s (this node will not end "
                     "with its session)",
                     strerror(errno));
        if (null >= 0)
            close(null);
        if (s->fd >= 0)
            close(s->fd);
        s->fd = -1;
        return;
    }
    close(null);
    int err = uv_poll_init(loop, &s->poll, s->fd);
    if (err == 0) {
        s->poll.data = s;
        s->watching = true;
        err = uv_poll_start(&s->poll, UV_READABLE | UV_DISCONNECT, on_session);
    }
    if (err != 0)
        ddp_log_warn(log,
                     "unable to watch the ssh session's stdin: %s (this node will not end "
                     "with its session)",
                     uv_strerror(err));
}

void ddp_session_close(ddp_session_t *s)
{
    if (s->watching)
        uv_close((uv_handle_t *)&s->poll, on_session_closed);
    else if (s->fd >= 0)
        close(s->fd);
    if (!s->watching)
        s->fd = -1;
    s->watching = false;
}
