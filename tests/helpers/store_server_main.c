/* ddp-test-store: the launcher's store server alone on a loop, for tests and benchmarks.
 *
 *   ddp-test-store [--host H] [--port P] [--max-key N] [--max-value N] [--max-keys N]
 *                  [--busy-poll USEC]
 *
 * Prints "listening <port>" once it listens, serves until SIGTERM or SIGINT, and says
 * "connections <n> waiting <m> busy-polls <k>" on SIGUSR1. Exits 4 when the port is in use. Busy
 * polls for 200 µs after a request, as ddp-launch does by default. */
#include "error.h"
#include "log.h"
#include "store/server.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

typedef struct {
    ddp_store_server_t *server;
    uv_signal_t term, intr, usr1;
} app_t;

static void on_stop(uv_signal_t *handle, int sig)
{
    app_t *app = handle->data;
    ddp_store_server_close(app->server);
    uv_close((uv_handle_t *)&app->term, NULL);
    uv_close((uv_handle_t *)&app->intr, NULL);
    uv_close((uv_handle_t *)&app->usr1, NULL);
}

static void on_usr1(uv_signal_t *handle, int sig)
{
    app_t *app = handle->data;
    printf("connections %zu waiting %zu busy-polls %" PRIu64 "\n",
           ddp_store_server_connections(app->server), ddp_store_server_waiting(app->server),
           ddp_store_server_busy_polls(app->server));
    fflush(stdout);
}

int main(int argc, char **argv)
{
    ddp_log_t log;
    ddp_store_server_options_t options = {
        .host = "127.0.0.1", .limits = DDP_CODEC_LIMITS_DEFAULT, .log = &log, .busy_poll_us = 200};
    ddp_buf_t err = DDP_BUF_INIT;
    app_t app;
    struct rlimit rl;
    ddp_log_init(&log, "ddp-test-store", DDP_LOG_INFO);
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--host") == 0)
            options.host = argv[i + 1];
        else if (strcmp(argv[i], "--port") == 0)
            options.port = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--max-key") == 0)
            options.limits.max_key = strtoull(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--max-value") == 0)
            options.limits.max_value = strtoull(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--max-keys") == 0)
            options.limits.max_keys = strtoull(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--busy-poll") == 0)
            options.busy_poll_us = (unsigned)strtoul(argv[i + 1], NULL, 10);
    }
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    uv_loop_t *loop = uv_default_loop();
    int rc = ddp_store_server_start(loop, &options, &app.server, &err);
    if (rc != 0) {
        fprintf(stderr, "ddp-test-store: %s\n", ddp_buf_str(&err));
        ddp_buf_free(&err);
        uv_run(loop, UV_RUN_DEFAULT); /* lets the failed listeners close */
        uv_loop_close(loop);
        return rc == -EADDRINUSE ? 4 : 1;
    }
    uv_signal_init(loop, &app.term);
    uv_signal_init(loop, &app.intr);
    uv_signal_init(loop, &app.usr1);
    app.term.data = app.intr.data = app.usr1.data = &app;
    uv_signal_start(&app.term, on_stop, SIGTERM);
    uv_signal_start(&app.intr, on_stop, SIGINT);
    uv_signal_start(&app.usr1, on_usr1, SIGUSR1);
    printf("listening %d\n", ddp_store_server_port(app.server));
    fflush(stdout);
    uv_run(loop, UV_RUN_DEFAULT);
    uv_loop_close(loop);
    return 0;
}
