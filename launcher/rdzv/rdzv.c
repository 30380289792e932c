/* The loop's side of a launcher's rendezvous (see rdzv.h): the thread started and ended,
 * events posted to it under the mutex with an eventfd that wakes its store waits, and the
 * commands it hands back through a uv_async taken. The thread's side is rdzv/node.c. */
#include "rdzv/rdzv.h"

#include "rdzv/node.h"
#include "strv.h"

#include "error.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

/* Wakes the thread (under the mutex). */
static void wake(ddp_rdzv_t *r)
{
    uint64_t one = 1;
    while (write(r->wake_fd, &one, sizeof one) < 0 && errno == EINTR)
        ;
}

/* This launcher ends: a health check the thread waits for ends too (end_fd stays
 * readable: never read). */
static void ending(ddp_rdzv_t *r)
{
    uint64_t one = 1;
    while (write(r->end_fd, &one, sizeof one) < 0 && errno == EINTR)
        ;
}

static void on_async(uv_async_t *handle)
{
    ddp_rdzv_t *r = handle->data;
    r->on_command(r->ctx);
}

int ddp_rdzv_start(uv_loop_t *loop, const ddp_launch_config_t *cfg, const ddp_log_t *log,
                   const char *id, int guard_fd, void (*on_command)(void *ctx), void *ctx,
                   ddp_rdzv_t **out)
{
    ddp_rdzv_t *r = calloc(1, sizeof *r);
    if (r == NULL)
        return -ENOMEM;
    r->cfg = cfg;
    r->log = log;
    r->on_command = on_command;
    r->ctx = ctx;
    r->guard_fd = guard_fd;
    ddp_rdzv_own_host(cfg, r->host, sizeof r->host);
    snprintf(r->id, sizeof r->id, "%s", id);
    r->end_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (r->end_fd < 0 || (r->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0) {
        int err = -errno;
        if (r->end_fd >= 0)
            close(r->end_fd);
        free(r);
        return err;
    }
    pthread_mutex_init(&r->mutex, NULL);
    int err = uv_async_init(loop, &r->async, on_async);
    if (err) {
        close(r->wake_fd);
        close(r->end_fd);
        pthread_mutex_destroy(&r->mutex);
        free(r);
        return err;
    }
    r->async.data = r;
    if ((err = pthread_create(&r->thread, NULL, ddp_rdzv_node_run, r)) != 0) {
        r->closed = true;
        uv_close((uv_handle_t *)&r->async, NULL);
        *out = r; /* freed by ddp_rdzv_free after the loop has closed the handle */
        return -err;
    }
    (void)pthread_setname_np(r->thread, "ddp-rdzv");
    r->thread_started = true;
    *out = r;
    return 0;
}

void ddp_rdzv_post_abort(ddp_rdzv_t *r, int sig, const char *message)
{
    pthread_mutex_lock(&r->mutex);
    r->events.abort_signal = sig;
    pthread_mutex_unlock(&r->mutex);
    ddp_rdzv_post(r, DDP_RDZV_EV_ABORT, message);
}

void ddp_rdzv_post_end(ddp_rdzv_t *r, int exit_code, const char *message)
{
    ddp_rdzv_post_abort(r, -exit_code, message); /* a negative "signal": an exit status */
}

void ddp_rdzv_post(ddp_rdzv_t *r, ddp_rdzv_event_t event, const char *message)
{
    pthread_mutex_lock(&r->mutex);
    switch (event) {
    case DDP_RDZV_EV_FAILED:
        r->events.failed = true;
        break;
    case DDP_RDZV_EV_STOPPED:
        r->events.stopped = true;
        break;
    case DDP_RDZV_EV_SUCCEEDED:
        r->events.succeeded = true;
        break;
    case DDP_RDZV_EV_ABORT:
        r->events.aborted = true;
        ending(r);
        break;
    }
    if (message != NULL)
        snprintf(r->events.message, sizeof r->events.message, "%s", message);
    if (event != DDP_RDZV_EV_STOPPED || r->awaits_stop)
        wake(r);
    pthread_mutex_unlock(&r->mutex);
}

void ddp_rdzv_post_hang(ddp_rdzv_t *r, bool initiate, double wait, const char *rows)
{
    pthread_mutex_lock(&r->mutex);
    free(r->events.hang_rows);
    r->events.hang_rows = strdup(rows);
    r->events.hang_initiate = initiate;
    r->events.hang_wait = wait;
    wake(r);
    pthread_mutex_unlock(&r->mutex);
}

void ddp_rdzv_post_failures(ddp_rdzv_t *r, const char *lines)
{
    pthread_mutex_lock(&r->mutex);
    free(r->events.failures);
    free(r->events.stragglers);
    r->events.failures = strdup(lines);
    wake(r);
    pthread_mutex_unlock(&r->mutex);
}

void ddp_rdzv_post_leave(ddp_rdzv_t *r, const char *why)
{
    pthread_mutex_lock(&r->mutex);
    snprintf(r->events.leave, sizeof r->events.leave, "%s", why);
    r->left = true;
    wake(r);
    pthread_mutex_unlock(&r->mutex);
}

void ddp_rdzv_post_stragglers(ddp_rdzv_t *r, const char *rows)
{
    pthread_mutex_lock(&r->mutex);
    free(r->events.stragglers);
    r->events.stragglers = strdup(rows);
    wake(r);
    pthread_mutex_unlock(&r->mutex);
}

void ddp_rdzv_post_pause(ddp_rdzv_t *r, bool pause)
{
    pthread_mutex_lock(&r->mutex);
    r->events.pause_request = pause ? 1 : 2;
    wake(r);
    pthread_mutex_unlock(&r->mutex);
}

bool ddp_rdzv_straggler_named(ddp_rdzv_t *r)
{
    pthread_mutex_lock(&r->mutex);
    bool named = r->straggler_named;
    pthread_mutex_unlock(&r->mutex);
    return named;
}

bool ddp_rdzv_unhealthy(ddp_rdzv_t *r)
{
    pthread_mutex_lock(&r->mutex);
    bool unhealthy = r->unhealthy;
    pthread_mutex_unlock(&r->mutex);
    return unhealthy;
}

bool ddp_rdzv_failures_published(ddp_rdzv_t *r)
{
    if (r->thread_started) { /* its last posts are done once it has ended */
        pthread_join(r->thread, NULL);
        r->thread_started = false;
    }
    pthread_mutex_lock(&r->mutex);
    bool published = r->failures_published && !r->left;
    pthread_mutex_unlock(&r->mutex);
    return published;
}

char *ddp_rdzv_take_hang_rows(ddp_rdzv_t *r)
{
    pthread_mutex_lock(&r->mutex);
    char *rows = r->hang_rows;
    r->hang_rows = NULL;
    pthread_mutex_unlock(&r->mutex);
    return rows;
}

ddp_rdzv_cmd_t ddp_rdzv_take(ddp_rdzv_t *r, ddp_rdzv_world_t *world, int *exit_code, char *message,
                             size_t cap)
{
    pthread_mutex_lock(&r->mutex);
    ddp_rdzv_cmd_t cmd = DDP_RDZV_CMD_NONE;
    if (r->count > 0) {
        int at = r->head;
        cmd = r->queue[at].cmd;
        *world = r->queue[at].world;
        *exit_code = r->queue[at].exit_code;
        snprintf(message, cap, "%s", r->queue[at].message);
        r->head = (at + 1) % (int)(sizeof r->queue / sizeof r->queue[0]);
        r->count--;
    }
    pthread_mutex_unlock(&r->mutex);
    return cmd;
}

char **ddp_rdzv_job_env(ddp_rdzv_t *r)
{
    pthread_mutex_lock(&r->mutex);
    char **copy = ddp_strv_copy(r->job_env);
    pthread_mutex_unlock(&r->mutex);
    return copy;
}

void ddp_rdzv_close(ddp_rdzv_t *r)
{
    if (r == NULL)
        return;
    pthread_mutex_lock(&r->mutex);
    r->events.quit = true;
    bool was_closed = r->closed;
    r->closed = true;
    wake(r);
    ending(r);
    pthread_mutex_unlock(&r->mutex);
    if (!was_closed)
        uv_close((uv_handle_t *)&r->async, NULL);
}

void ddp_rdzv_free(ddp_rdzv_t *r)
{
    if (r == NULL)
        return;
    if (r->thread_started)
        pthread_join(r->thread, NULL);
    ddp_store_client_close(r->client);
    ddp_store_client_close(r->waiter);
    ddp_strv_free(r->job_env);
    free(r->hang_rows);
    free(r->events.hang_rows);
    free(r->events.failures);
    free(r->events.stragglers);
    close(r->wake_fd);
    close(r->end_fd);
    pthread_mutex_destroy(&r->mutex);
    free(r);
}
