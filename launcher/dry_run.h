/* --dry-run: print what each worker would run, start nothing.
 *
 * Shares the argv and environment builders with the agent, so what it prints is what
 * the agent would execute. Main thread; touches no file or process. */
#ifndef DDP_LAUNCHER_DRY_RUN_H
#define DDP_LAUNCHER_DRY_RUN_H

#include "config/config.h"

/* Appends `word` for a POSIX shell: as it is when plain, else in single quotes. 0 or
 * -ENOMEM. (Also the fan-out's command lines, fanout.c.) */
int ddp_shell_word(ddp_buf_t *out, const char *word);

/* Writes the plan to `fd`. Returns 0 or -ENOMEM. */
int ddp_dry_run_print(const ddp_launch_config_t *cfg, char *const *envp, int fd);

#endif
