/* What the command line leaves to be found out: `cpu`/`gpu`/`auto` become a worker
 * count (the GPUs counted through the CUDA driver, loaded at run time), --standalone a
 * random run id and a free port, c10d the endpoint as the store's address, and a
 * compiled program or a non-Python #! script is run directly. Main thread, once, after
 * ddp_cli_parse and before the agent. */
#ifndef DDP_LAUNCHER_CONFIG_RESOLVE_H
#define DDP_LAUNCHER_CONFIG_RESOLVE_H

#include "buf.h"
#include "config/config.h"
#include "log.h"

/* Resolves `cfg` in place. DDP_EUSAGE with `err` set when the count cannot be found
 * (`gpu` without CUDA), or -errno. */
int ddp_resolve_config(ddp_launch_config_t *cfg, const ddp_log_t *log, ddp_buf_t *err);

#endif
