/* The agent: runs the worker group of this node on one libuv loop.
 *
 * Starts the workers, reads their output, notices each exit the moment SIGCHLD says
 * so, stops the group (signal, grace, SIGKILL) on a failure or a forwarded signal,
 * restarts it while restarts are left, and reports. Owns the loop and every worker
 * process. No exit is found by polling; what has no event of its own (a hang, progress
 * rings, the store's long waits, what the workers left, GPU memory) is looked at on a
 * timer, by the part that owns it (agent/group.h). */
#ifndef DDP_LAUNCHER_AGENT_AGENT_H
#define DDP_LAUNCHER_AGENT_AGENT_H

#include "config/config.h"
#include "log.h"

/* Runs the job described by `cfg` (resolved) to its end and returns ddp-launch's
 * exit status (the DDP_EXIT_* table of config/config.h). */
int ddp_agent_run(const ddp_launch_config_t *cfg, const ddp_log_t *log);

#endif
