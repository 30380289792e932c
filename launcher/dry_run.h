/* --dry-run: print what each worker would run, start nothing.
 *
 * Shares the argv and environment builders with the agent, so what it prints is what
 * the agent would execute. Main thread; starts no process and makes or writes no file (it
 * reads --checkpoint-dir's copies, as a one-node job's start would). */
#ifndef DDP_LAUNCHER_DRY_RUN_H
#define DDP_LAUNCHER_DRY_RUN_H

#include "config/config.h"

/* Writes the plan to `fd`. Returns 0 or -ENOMEM. */
int ddp_dry_run_print(const ddp_launch_config_t *cfg, char *const *envp, int fd);

#endif
