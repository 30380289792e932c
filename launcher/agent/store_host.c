/* Whether and where this launcher serves the rendezvous store (see agent/store_host.h):
 * the cap on client connections that leaves the launcher its own descriptors, torchrun's
 * default port given up for a free one where only one node needs to know it, and what a
 * failure to listen likely means. Runs on the loop thread, before any worker starts. */
#include "agent/store_host.h"

#include "error.h"

#include <errno.h>
#include <stdbool.h>
#include <sys/resource.h>

/* Descriptors kept for the launcher's own work beside the store's clients: its loop,
 * the guard, log files, and each worker's pipes and error file while it starts. */
static size_t descriptor_reserve(int nworkers)
{
    return 64 + 8 * (size_t)nworkers;
}

/* The store at --master-addr:--master-port (port 0: a free one), or at the c10d endpoint:
 * with `quiet_if_not_ours`, an endpoint another launcher holds (or that is not this
 * machine's) is no failure: *out stays NULL. */
static int start_store(uv_loop_t *loop, const ddp_launch_config_t *cfg, const ddp_log_t *log,
                       int nworkers, bool quiet_if_not_ours, ddp_store_server_t **out, int *port)
{
    ddp_buf_t why = DDP_BUF_INIT;
    struct rlimit rl = {0, 0};
    size_t reserve = descriptor_reserve(nworkers), cap = 0;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
        cap = rl.rlim_cur > reserve + 16 ? (size_t)(rl.rlim_cur - reserve) : 16;
    ddp_store_server_options_t options = {
        .host = cfg->master_addr,
        .port = cfg->master_port,
        .limits = cfg->store_limits,
        .busy_poll_us = cfg->store_busy_poll_us,
        .log = log,
        .max_connections = cap,
        .nofile = (unsigned long long)rl.rlim_cur,
        .remote_clients = cfg->nnodes_max > 1,
    };
    int err = ddp_store_server_start(loop, &options, out, &why);
    if (err == -EADDRINUSE && cfg->nnodes_max == 1 && !cfg->master_port_given &&
        cfg->master_port != 0) {
        /* One node, torchrun's default port busy: nobody else needs to know the port,
         * so any free one does (the workers get it in MASTER_PORT). */
        ddp_log_info(log,
                     "port %d on %s is in use by another program: the store listens on a free "
                     "port instead (give --master-port to insist on one)",
                     cfg->master_port, cfg->master_addr);
        ddp_buf_free(&why);
        options.port = 0;
        err = ddp_store_server_start(loop, &options, out, &why);
    }
    if (err && quiet_if_not_ours && (err == -EADDRINUSE || err == -EADDRNOTAVAIL)) {
        /* c10d: another launcher hosts the endpoint (or it is not this machine's). */
        ddp_log_debug(log, "not hosting the store at %s:%d: %s", cfg->master_addr, cfg->master_port,
                      ddp_buf_str(&why));
        ddp_buf_free(&why);
        return 0;
    }
    if (err) {
        bool fanout = cfg->hosts != NULL || cfg->hostfile != NULL;
        if (err == -EADDRNOTAVAIL) /* node 0 elsewhere, or the wrong address given */
            ddp_buf_printf(&why,
                           " (no address of this machine: node 0 serves the store at %s; run "
                           "%s there, or %s)",
                           cfg->master_addr, fanout ? "ddp-launch" : "node 0",
                           fanout ? "list this machine first"
                                  : "give --master-addr this machine's address");
        ddp_log_error(log, "unable to start the rendezvous store: %s", ddp_buf_str(&why));
        ddp_buf_free(&why);
        return err;
    }
    ddp_buf_free(&why);
    *port = ddp_store_server_port(*out);
    ddp_log_debug(log, "the rendezvous store listens on %s:%d", cfg->master_addr, *port);
    return 0;
}

int ddp_store_host_start(uv_loop_t *loop, const ddp_launch_config_t *cfg, const ddp_log_t *log,
                         int nworkers, ddp_store_server_t **out, int *port)
{
    *out = NULL;
    switch (ddp_config_store_host(cfg)) {
    case DDP_STORE_HOST_SELF:
    case DDP_STORE_HOST_ELECTED: /* etcd: closed again where another launcher is elected */
        return start_store(loop, cfg, log, nworkers, false, out, port);
    case DDP_STORE_HOST_IF_FREE:
        return start_store(loop, cfg, log, nworkers, true, out, port);
    case DDP_STORE_HOST_NODE0:
    case DDP_STORE_HOST_ELSEWHERE:
        break;
    }
    return 0;
}
