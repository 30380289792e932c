/* ddp-launch: parse the command line, then run the job or print what it would do.
 *
 * Everything happens on the main thread: the CLI and resolution before the loop,
 * then the agent's loop until the job ends; main only maps results to exit codes. */
#include "agent/agent.h"
#include "config/cli.h"
#include "config/resolve.h"
#include "dry_run.h"
#include "fanout/fanout.h"
#include "env.h"
#include "error.h"
#include "spawn/guard.h"
#include "host/health.h"
#include "log.h"
#include "diagnose/unwind.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>
#include <string.h>
#include <unistd.h>

extern char **environ;

/* A launcher started with stdin, stdout or stderr closed (`<&-`, some schedulers and
 * daemons) would give that number to its first pipe or socket: its messages would go
 * there, its workers would start without it, and libuv aborts when it closes a handle on
 * 0-2. Each closed one is /dev/null instead, as for any well-behaved program. */
static int open_std_fds(void)
{
    for (int fd = STDIN_FILENO; fd <= STDERR_FILENO; fd++) {
        if (fcntl(fd, F_GETFD) >= 0 || errno != EBADF)
            continue;
        int null = open("/dev/null", O_RDWR); /* the lowest free number: fd */
        if (null < 0)
            return -1;
        if (null != fd && (dup2(null, fd) < 0 || close(null) != 0))
            return -1;
    }
    return 0;
}

/* DDP_LAUNCH_LOG_LEVEL, else torchrun's LOGLEVEL (Python logging's names), else info. */
static ddp_log_level_t log_level(const ddp_log_t *log)
{
    static const struct {
        const char *name;
        ddp_log_level_t level;
    } python[] = {{"CRITICAL", DDP_LOG_ERROR}, {"FATAL", DDP_LOG_ERROR}, {"NOTSET", DDP_LOG_DEBUG}};
    ddp_log_level_t level = DDP_LOG_INFO;
    const char *own = getenv(ddp_env_name(DDP_ENV_DDP_LAUNCH_LOG_LEVEL));
    const char *torch = getenv(ddp_env_name(DDP_ENV_LOGLEVEL));
    if (own == NULL && torch != NULL && *torch != '\0') {
        for (size_t k = 0; k < sizeof python / sizeof python[0]; k++)
            if (strcasecmp(torch, python[k].name) == 0)
                return python[k].level;
        if (ddp_log_parse_level(torch, &level) != 0)
            ddp_log_warn(log,
                         "LOGLEVEL=%s is not DEBUG, INFO, WARNING, ERROR or CRITICAL; "
                         "ddp-launch says what info does",
                         torch);
        return level;
    }
    const char *text = ddp_env_get(DDP_ENV_DDP_LAUNCH_LOG_LEVEL);
    if (ddp_log_parse_level(text, &level) != 0)
        ddp_log_warn(
            log, "DDP_LAUNCH_LOG_LEVEL=%s is not error, warning, info or debug; using info", text);
    return level;
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[0], DDP_GUARD_NAME) == 0 && strcmp(argv[1], DDP_GUARD_ARG) == 0)
        return ddp_guard_main(DDP_GUARD_FD);
    if (argc == 2 && strcmp(argv[0], DDP_UNWIND_NAME) == 0)
        return ddp_unwind_main(argv[1]); /* --hang-dump's helper (unwind.h) */
    if (argc == DDP_HEALTH_ARGC && strcmp(argv[0], DDP_HEALTH_NAME) == 0)
        return ddp_health_main(argc, argv); /* the health checks' helper (health.h) */
    if (open_std_fds() != 0)
        return DDP_EXIT_LAUNCH_FAILED; /* no /dev/null: nowhere to say so either */

    ddp_log_t log;
    ddp_log_level_t level = DDP_LOG_INFO;
    ddp_launch_config_t cfg;
    ddp_buf_t err = DDP_BUF_INIT;
    ddp_fanout_hosts_t hosts = {0};
    int exit_code;

    atomic_bool open_line = false; /* the console's, for the log (see ddp_log_t) */
    ddp_log_init(&log, "ddp-launch", level);
    log.open_line = &open_line;
    log.level = log_level(&log);

    int rc = ddp_cli_parse(&cfg, argc, argv, environ, &log, &err);
    if (rc != 0) {
        ddp_log_error(&log, "%s", rc == DDP_EUSAGE ? ddp_buf_str(&err) : ddp_strerror(rc));
        fprintf(stderr,
                "usage: ddp-launch [options] TRAINING_SCRIPT [ARGS...]; see ddp-launch --help\n");
        ddp_buf_free(&err);
        return DDP_EXIT_USAGE;
    }
    if (cfg.help) {
        ddp_cli_print_help(1);
        exit_code = DDP_EXIT_OK;
        goto out;
    }
    if (cfg.version) {
        ddp_cli_print_version(1);
        exit_code = DDP_EXIT_OK;
        goto out;
    }
    if (cfg.hosts != NULL || cfg.hostfile != NULL) {
        bool here = false;
        if ((rc = ddp_fanout_hosts(&cfg, &hosts, &err)) != 0) {
            ddp_log_error(&log, "%s", ddp_buf_str(&err));
            exit_code = DDP_EXIT_USAGE;
            goto out;
        }
        exit_code = ddp_fanout_ssh(&cfg, &hosts, argc, argv, 1, &log, &here);
        if (!here)
            goto out;
    }
    if (cfg.slurm_fanout > 0) {
        exit_code = ddp_fanout_slurm(&cfg, argc, argv, environ, 1, &log);
        goto out;
    }
    if ((rc = ddp_resolve_config(&cfg, &log, &err)) != 0) {
        ddp_log_error(&log, "%s", ddp_buf_str(&err));
        exit_code = rc == DDP_EUSAGE ? DDP_EXIT_USAGE : DDP_EXIT_LAUNCH_FAILED;
        goto out;
    }
    if (cfg.dry_run) {
        /* (The environment it prints shows OMP_NUM_THREADS=1; no warning for a job that
         * does not run.) */
        exit_code = ddp_dry_run_print(&cfg, environ, 1) == 0 ? DDP_EXIT_OK : DDP_EXIT_LAUNCH_FAILED;
        goto out;
    }
    exit_code = ddp_agent_run(&cfg, &log);
out:
    ddp_fanout_hosts_free(&hosts);
    ddp_config_free(&cfg);
    ddp_buf_free(&err);
    return exit_code;
}
