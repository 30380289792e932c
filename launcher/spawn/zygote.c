/* The warm-restart zygote: its start, its messages, workers forked from it (see zygote.h). */
#include "spawn/zygote.h"

#include "buf.h"
#include "error.h"
#include "host/proc.h"
#include "io.h"
#include "spawn/worker_env.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

/* The largest message either side sends: a request carries a worker's whole environment. */
#define MESSAGE_MAX (1 << 20)

bool ddp_zygote_script(char *buf, size_t cap)
{
    char dir[PATH_MAX];
    if (!ddp_launcher_python_dir(dir, sizeof dir))
        return false;
    int n = snprintf(buf, cap, "%s/ddp_launch/_zygote.py", dir);
    return n > 0 && (size_t)n < cap && access(buf, R_OK) == 0;
}

static void on_poll_closed(uv_handle_t *handle)
{
    free(handle);
}

/* A watched descriptor done with: its poll closed (*poll NULL), itself closed (*fd -1). */
static void close_watched(uv_poll_t **poll, int *fd)
{
    if (*poll != NULL) {
        uv_poll_stop(*poll);
        uv_close((uv_handle_t *)*poll, on_poll_closed);
        *poll = NULL;
    }
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
}

/* The socket is done with (the zygote ended, or is being given up). */
static void close_socket(ddp_zygote_t *z)
{
    close_watched(&z->poll, &z->fd);
    z->ready = false;
}

/* Logs what the zygote wrote up to its last newline (all of it when `all`). */
static void log_output(ddp_zygote_t *z, bool all)
{
    const char *text = ddp_buf_str(&z->out_line);
    size_t done = 0, len = z->out_line.len;
    if (len == 0)
        return;
    for (;;) {
        const char *nl = memchr(text + done, '\n', len - done);
        if (nl == NULL && !(all && done < len))
            break;
        size_t end = nl != NULL ? (size_t)(nl - text) : len;
        ddp_log_info(z->log, "warm restarts: zygote: %.*s", (int)(end - done), text + done);
        done = nl != NULL ? end + 1 : len;
    }
    memmove(z->out_line.data, text + done, len - done);
    z->out_line.len = len - done;
    z->out_line.data[z->out_line.len] = '\0';
}

/* Reads what the zygote's output pipe holds; false at its end (or an error). */
static bool read_output(ddp_zygote_t *z)
{
    char chunk[4096];
    for (;;) {
        ssize_t n = read(z->out_fd, chunk, sizeof chunk);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            return true;
        if (n <= 0)
            return false;
        if (ddp_buf_append(&z->out_line, chunk, (size_t)n) != 0)
            return false;
        /* A line longer than four chunks is logged in pieces. */
        log_output(z, z->out_line.len > 4 * sizeof chunk);
    }
}

/* The zygote's output is done with: what is left is read and logged. */
static void close_output(ddp_zygote_t *z)
{
    if (z->out_fd >= 0)
        (void)read_output(z);
    log_output(z, true);
    ddp_buf_free(&z->out_line);
    close_watched(&z->out_poll, &z->out_fd);
}

static void on_output(uv_poll_t *handle, int status, int events)
{
    (void)events;
    ddp_zygote_t *z = handle->data;
    if (status < 0 || !read_output(z))
        close_output(z);
}

void ddp_zygote_hold(ddp_zygote_t *z, bool hold)
{
    double now = ddp_clock_mono();
    if (z->pid <= 0 || hold == z->held || (hold && z->ready))
        return;
    /* The zygote alone: what it forks leads groups of its own. */
    if (kill(z->pid, hold ? SIGSTOP : SIGCONT) != 0)
        return;
    if (!hold)
        z->held_s += now - z->held_since;
    z->held_since = now;
    z->held = hold;
    ddp_log_debug(z->log, "warm restarts: the zygote %s",
                  hold ? "waits (stopped) while the "
                         "workers need every CPU"
                       : "goes on");
}

/* A message that is not a reply to a request: ready, or refused. Others are ignored. */
static void heard(ddp_zygote_t *z, const char *msg, size_t len)
{
    size_t first = strnlen(msg, len);
    const char *field = first < len ? msg + first + 1 : "";
    if (strcmp(msg, "ready") == 0) {
        char held[96] = "";
        ddp_zygote_hold(z, false); /* (stopped after it said so, before this was read) */
        z->ready = true;
        z->why[0] = '\0';
        if (z->held_s >= 0.05)
            snprintf(held, sizeof held,
                     " (%.1f s of it stopped while the workers needed every CPU)", z->held_s);
        ddp_log_info(z->log, "warm restarts: the zygote (pid %d) has imported %s in %.1f s%s%s%s",
                     (int)z->pid, z->preload, ddp_clock_mono() - z->started, held,
                     strcmp(field, "1") != 0 ? "; threads running in it: " : "",
                     strcmp(field, "1") != 0 ? field : "");
    } else if (strcmp(msg, "refused") == 0) {
        snprintf(z->why, sizeof z->why, "the zygote refused to serve: %s", field);
        ddp_log_warn(z->log, "warm restarts: %s", z->why);
        z->given_up = true;
    }
}

/* Receives one message into buf (NUL-terminated); its length, 0 at the end, or -errno. */
static ssize_t receive(int fd, char *buf, size_t cap)
{
    ssize_t n;
    do
        n = recv(fd, buf, cap - 1, MSG_DONTWAIT);
    while (n < 0 && errno == EINTR);
    if (n < 0)
        return -errno;
    buf[n] = '\0';
    return n;
}

static void on_readable(uv_poll_t *handle, int status, int events)
{
    (void)events;
    ddp_zygote_t *z = handle->data;
    char msg[4096];
    ssize_t n = status == 0 ? receive(z->fd, msg, sizeof msg) : -EIO;
    if (n == -EAGAIN)
        return;
    if (n > 0) {
        heard(z, msg, (size_t)n);
        if (!z->ready)
            return;
    }
    /* Ready (replies are read by the request itself), or the end: no more to hear. */
    uv_poll_stop(handle);
}

/* Watches `fd` on the loop for input and its end: *poll, or -errno (nothing watched). */
static int watch(ddp_zygote_t *z, int fd, uv_poll_cb cb, uv_poll_t **poll)
{
    uv_poll_t *handle = malloc(sizeof *handle);
    if (handle == NULL)
        return -ENOMEM;
    int err = uv_poll_init(z->loop, handle, fd);
    if (err != 0) {
        free(handle);
        return err;
    }
    handle->data = z;
    uv_poll_start(handle, UV_READABLE | UV_DISCONNECT, cb);
    *poll = handle;
    return 0;
}

/* The pipe of the zygote's stdout and stderr, its read end watched: 0 or -errno (then
 * *write_end is -1 and the zygote writes where the launcher does). */
static int open_output(ddp_zygote_t *z, int *write_end)
{
    int fds[2], err;
    *write_end = -1;
    if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0)
        return -errno;
    /* Its end blocks as any stdout does; ours is read as it becomes readable. */
    err = fcntl(fds[1], F_SETFL, 0) == 0 ? 0 : -errno;
    if (err == 0)
        err = watch(z, fds[0], on_output, &z->out_poll);
    if (err != 0) {
        close(fds[0]);
        close(fds[1]);
        return err;
    }
    z->out_fd = fds[0];
    *write_end = fds[1];
    return 0;
}

static int start_process(ddp_zygote_t *z)
{
    int sv[2], err, out;
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0)
        return -errno;
    if ((err = open_output(z, &out)) != 0)
        ddp_log_debug(z->log, "warm restarts: the zygote writes unprefixed: %s", ddp_strerror(err));
    ddp_spawn_t spec = {
        .path = z->path,
        .argv = z->argv,
        .envp = z->envp,
        .stdout_fd = out,
        .stderr_fd = out,
        .guard_fd = z->guard->fd,
        .has_fd3 = true,
        .fd3 = sv[1],
    };
    err = ddp_spawn(&spec, &z->pid);
    close(sv[1]);
    if (out >= 0)
        close(out);
    if (err == 0)
        err = watch(z, sv[0], on_readable, &z->poll);
    z->fd = sv[0];
    if (err != 0) {
        if (z->pid > 0) {
            ddp_proc_signal_group(z->pid, SIGKILL);
            waitpid(z->pid, NULL, 0);
            ddp_guard_forget(z->guard, z->pid);
        }
        z->pid = 0;
        close_socket(z);
        close_output(z);
        return err;
    }
    z->starts++;
    z->started = ddp_clock_mono();
    z->held = false;
    z->held_s = 0;
    snprintf(z->why, sizeof z->why, "the zygote is still importing %s", z->preload);
    ddp_log_debug(z->log, "warm restarts: started the zygote as pid %d", (int)z->pid);
    return 0;
}

int ddp_zygote_start(ddp_zygote_t *z, uv_loop_t *loop, const ddp_log_t *log, ddp_guard_t *guard,
                     const char *path, const char *python, const char *script, const char *preload,
                     size_t room, char *const *envp)
{
    char *pad = malloc(room + 1);
    char *const argv[] = {(char *)python, "-u", (char *)script, "3", (char *)preload, pad, NULL};
    int err = 0;
    if (pad == NULL)
        return -ENOMEM;
    memset(pad, ' ', room);
    pad[room] = '\0';
    z->loop = loop;
    z->log = log;
    z->guard = guard;
    z->fd = z->out_fd = -1;
    z->path = strdup(path);
    z->preload = strdup(preload);
    z->argv = ddp_strv_copy(argv);
    z->envp = ddp_strv_copy(envp);
    free(pad);
    if (z->path == NULL || z->preload == NULL || z->argv == NULL || z->envp == NULL)
        err = -ENOMEM;
    if (err == 0)
        err = start_process(z);
    if (err != 0) {
        z->given_up = true;
        snprintf(z->why, sizeof z->why, "unable to start the zygote: %s", ddp_strerror(err));
    }
    return err;
}

bool ddp_zygote_reap(ddp_zygote_t *z)
{
    int status;
    if (z->pid <= 0 || waitpid(z->pid, &status, WNOHANG) != z->pid)
        return false;
    ddp_guard_forget(z->guard, z->pid);
    close_socket(z);
    close_output(z);
    int code = WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
    pid_t pid = z->pid;
    z->pid = 0;
    if (z->given_up)
        return true;
    if (z->starts >= DDP_ZYGOTE_MAX_STARTS) {
        z->given_up = true;
        snprintf(z->why, sizeof z->why, "the zygote ended %d times (the last with status %d)",
                 z->starts, code);
        ddp_log_warn(z->log, "warm restarts: %s; restarts start cold", z->why);
        return true;
    }
    ddp_log_warn(z->log,
                 "warm restarts: the zygote (pid %d) ended with status %d; starting "
                 "another",
                 (int)pid, code);
    int err = start_process(z);
    if (err != 0) {
        z->given_up = true;
        snprintf(z->why, sizeof z->why, "unable to start the zygote again: %s", ddp_strerror(err));
        ddp_log_warn(z->log, "warm restarts: %s; restarts start cold", z->why);
    }
    return true;
}

/* Whether the worker's environment, less its own variables, is the zygote's: what the
 * interpreter and the preloaded modules read when they started. Else why[cap] names a
 * variable that differs. */
static bool same_environment(const ddp_zygote_t *z, char *const *envp, char *why, size_t cap)
{
    size_t shared = 0, zygote = 0;
    for (size_t i = 0; envp[i] != NULL; i++) {
        if (ddp_worker_env_own(envp[i], z->own_devices))
            continue;
        shared++;
        bool found = false;
        for (size_t k = 0; z->envp[k] != NULL && !found; k++)
            found = strcmp(z->envp[k], envp[i]) == 0;
        if (!found) {
            snprintf(why, cap, "its %.*s differs from the zygote's", (int)strcspn(envp[i], "="),
                     envp[i]);
            return false;
        }
    }
    while (z->envp[zygote] != NULL)
        zygote++;
    if (zygote != shared) {
        snprintf(why, cap, "it lacks a variable the zygote has");
        return false;
    }
    return true;
}

bool ddp_zygote_env_matches(const ddp_zygote_t *z, char *const *envp, char *why, size_t cap)
{
    return z->envp != NULL && same_environment(z, envp, why, cap);
}

/* Appends one field to a message: a NUL before every field but the first. */
__attribute__((format(printf, 2, 3))) static int field(ddp_buf_t *msg, const char *fmt, ...)
{
    va_list ap;
    int err = msg->len > 0 ? ddp_buf_append(msg, "", 1) : 0;
    va_start(ap, fmt);
    err = err ? err : ddp_buf_vprintf(msg, fmt, ap);
    va_end(ap);
    return err;
}

/* The request's fields (zygote.h) into msg. */
static int request(const ddp_spawn_t *spec, bool python_stacks, ddp_buf_t *msg)
{
    char cwd[PATH_MAX];
    const ddp_numa_bind_t *b = spec->bind;
    ddp_buf_t cpus = DDP_BUF_INIT;
    size_t argc = 0, per_word = 8 * sizeof(unsigned long);
    int err = getcwd(cwd, sizeof cwd) != NULL ? 0 : -errno;
    while (spec->argv[argc] != NULL)
        argc++;
    for (size_t i = 0; b != NULL && err == 0 && i < b->cpus.nwords * per_word; i++)
        if (b->cpus.bits[i / per_word] & (1UL << (i % per_word)))
            err = ddp_buf_printf(&cpus, "%zu,", i);
    err = err ? err : field(msg, "spawn");
    err = err ? err : field(msg, "%d", spec->local_rank);
    err = err ? err : field(msg, "%s", cwd);
    err = err ? err : field(msg, "%llu", (unsigned long long)spec->nofile);
    err = err ? err : field(msg, "%s", ddp_buf_str(&cpus));
    err = err ? err : field(msg, "%d", b != NULL ? b->mem_node : -1);
    err = err ? err : field(msg, "%d", spec->bind_fallback);
    err = err ? err : field(msg, "%s", b != NULL && b->text != NULL ? b->text : "");
    err = err ? err : field(msg, "%d", python_stacks);
    err = err ? err : field(msg, "%d", spec->guard_fd >= 0);
    err = err ? err : field(msg, "%zu", argc);
    for (size_t i = 0; err == 0 && i < argc; i++)
        err = field(msg, "%s", spec->argv[i]);
    for (size_t i = 0; err == 0 && spec->envp[i] != NULL; i++)
        err = field(msg, "%s", spec->envp[i]);
    ddp_buf_free(&cpus);
    return err;
}

static int send_request(int fd, const ddp_buf_t *msg, const ddp_spawn_t *spec)
{
    int fds[3] = {spec->stdout_fd, spec->stderr_fd, spec->guard_fd};
    size_t nfds = spec->guard_fd >= 0 ? 3 : 2;
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(sizeof fds)];
    } control;
    struct iovec iov = {.iov_base = msg->data, .iov_len = msg->len};
    struct msghdr mh = {
        .msg_iov = &iov,
        .msg_iovlen = 1,
        .msg_control = control.buf,
        .msg_controllen = CMSG_SPACE(nfds * sizeof(int)),
    };
    memset(&control, 0, sizeof control);
    struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(nfds * sizeof(int));
    memcpy(CMSG_DATA(cm), fds, nfds * sizeof(int));
    ssize_t n;
    do
        n = sendmsg(fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
    while (n < 0 && errno == EINTR);
    return n < 0 ? -errno : 0;
}

/* Waits for the reply to a request: 0 and *pid, or a negative code and why. */
static int await_reply(ddp_zygote_t *z, pid_t *pid, char *why, size_t cap)
{
    double deadline = ddp_clock_mono() + DDP_ZYGOTE_SPAWN_TIMEOUT_S;
    char msg[4096];
    for (;;) {
        double left = deadline - ddp_clock_mono();
        struct pollfd pfd = {.fd = z->fd, .events = POLLIN};
        int ready = left > 0 ? poll(&pfd, 1, (int)(left * 1000) + 1) : 0;
        if (ready < 0 && errno == EINTR)
            continue;
        if (ready <= 0) {
            snprintf(why, cap, "the zygote did not answer in %.0f s (it is ended)",
                     DDP_ZYGOTE_SPAWN_TIMEOUT_S);
            ddp_proc_signal_group(z->pid, SIGKILL); /* reaped as any ended zygote */
            close_socket(z);
            snprintf(z->why, sizeof z->why, "%s", why);
            return -ETIMEDOUT;
        }
        ssize_t n = receive(z->fd, msg, sizeof msg);
        if (n == -EAGAIN)
            continue;
        if (n <= 0) {
            snprintf(why, cap, "the zygote ended");
            close_socket(z);
            snprintf(z->why, sizeof z->why, "%s", why);
            return n < 0 ? (int)n : -EPIPE;
        }
        size_t first = strnlen(msg, (size_t)n);
        const char *field = first < (size_t)n ? msg + first + 1 : "";
        if (strcmp(msg, "spawned") == 0) {
            char *end;
            long value = strtol(field, &end, 10);
            if (end == field || *end != '\0' || value <= 1 || value > INT_MAX) {
                snprintf(why, cap, "the zygote answered a pid '%.32s'", field);
                return -EPROTO;
            }
            /* Adopted already: the reply comes after the intermediate was reaped. */
            if (ddp_proc_parent((pid_t)value) != getpid()) {
                snprintf(why, cap, "the zygote answered pid %ld, not a child of ddp-launch", value);
                return -EPROTO;
            }
            *pid = (pid_t)value;
            return 0;
        }
        if (strcmp(msg, "failed") == 0) {
            snprintf(why, cap, "the zygote could not fork it: %s", field);
            return -EAGAIN;
        }
        heard(z, msg, (size_t)n);
    }
}

int ddp_zygote_spawn(ddp_zygote_t *z, const ddp_spawn_t *spec, bool python_stacks, pid_t *pid,
                     char *why, size_t cap)
{
    ddp_buf_t msg = DDP_BUF_INIT;
    int err;
    if (!z->ready || z->fd < 0) {
        snprintf(why, cap, "%s", z->why[0] ? z->why : "no zygote runs");
        return -EAGAIN;
    }
    ddp_zygote_hold(z, false);
    if (strcmp(spec->path, z->path) != 0 || spec->argv[1] == NULL ||
        strcmp(spec->argv[1], "-u") != 0) {
        snprintf(why, cap, "its command is not the zygote's %s -u", z->argv[0]);
        return -EINVAL;
    }
    if (!same_environment(z, spec->envp, why, cap))
        return -EINVAL;
    if ((err = request(spec, python_stacks, &msg)) != 0 || msg.len > MESSAGE_MAX) {
        snprintf(why, cap, "its request is too large (%zu bytes)", msg.len);
        ddp_buf_free(&msg);
        return err ? err : -EMSGSIZE;
    }
    err = send_request(z->fd, &msg, spec);
    ddp_buf_free(&msg);
    if (err != 0) {
        snprintf(why, cap, "unable to ask the zygote: %s", ddp_strerror(err));
        return err;
    }
    return await_reply(z, pid, why, cap);
}

void ddp_zygote_stop(ddp_zygote_t *z)
{
    z->given_up = true;
    close_socket(z);
    if (z->pid > 0) {
        ddp_proc_signal_group(z->pid, SIGKILL);
        while (waitpid(z->pid, NULL, 0) < 0 && errno == EINTR)
            ;
        ddp_guard_forget(z->guard, z->pid);
        z->pid = 0;
    }
    close_output(z);
    free(z->path);
    free(z->preload);
    ddp_strv_free(z->argv);
    ddp_strv_free(z->envp);
    z->path = z->preload = NULL;
    z->argv = z->envp = NULL;
}
