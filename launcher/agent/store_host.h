/* Whether this launcher serves the rendezvous store, and its start (agent/store_host.c):
 * one node, or node 0 of a static job (a failure is fatal); with c10d, whoever can bind
 * the endpoint, unless is_host says (torchrun: the endpoint's machine hosts). The agent's
 * setup; runs on the loop thread, before any worker starts. */
#ifndef DDP_LAUNCHER_AGENT_STORE_HOST_H
#define DDP_LAUNCHER_AGENT_STORE_HOST_H

#include "config/config.h"
#include "log.h"
#include "store/server.h"

#include <uv.h>

/* The store of `cfg`'s job on `loop` where this launcher serves it (ddp_config_store_host),
 * its client connections capped to leave room for `nworkers` workers' descriptors: *out
 * and the port it listens on; *out NULL where another launcher serves it. 0, or -errno
 * (said, with what it likely means). */
int ddp_store_host_start(uv_loop_t *loop, const ddp_launch_config_t *cfg, const ddp_log_t *log,
                         int nworkers, ddp_store_server_t **out, int *port);

#endif
