/* The command line of ddp-launch: torchrun's flags (both spellings, prefixes, PET_*
 * defaults) parsed and validated into a ddp_launch_config_t.
 *
 * Parsing is pure apart from reading the environment array it is given; it never
 * exits. Errors come back as DDP_EUSAGE with a message naming the flag, so main()
 * can print it and exit 2. Runs once on the main thread before the loop starts. */
#ifndef DDP_LAUNCHER_CONFIG_CLI_H
#define DDP_LAUNCHER_CONFIG_CLI_H

#include "buf.h"
#include "config/config.h"
#include "log.h"

/* Parses argv (argv[0] is the program) with PET_* defaults and PYTHON_EXEC etc. from
 * `envp`. Warnings (flags accepted but meaningless) go to `log`. On error returns
 * DDP_EUSAGE with the message in `err`, or -ENOMEM. On success free with
 * ddp_config_free. Strings in the config point into argv and envp, which must outlive it. */
int ddp_cli_parse(ddp_launch_config_t *cfg, int argc, char **argv, char *const *envp,
                  const ddp_log_t *log, ddp_buf_t *err);

void ddp_cli_print_help(int fd);
void ddp_cli_print_version(int fd);

#endif
