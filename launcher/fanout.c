/* One launcher on every node through srun (see fanout.h). */
#include "fanout.h"

#include "buf.h"
#include "env.h"
#include "error.h"
#include "io.h"
#include "slurm.h"
#include "spawn.h"

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A word for a shell: as it is when it is plain, else in single quotes. */
static void shell_word(ddp_buf_t *out, const char *word)
{
    bool plain = *word != '\0';
    for (const char *c = word; *c != '\0' && plain; c++)
        plain = strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_=./:,+@%",
                       *c) != NULL;
    if (plain) {
        ddp_buf_puts(out, word);
        return;
    }
    ddp_buf_puts(out, "'");
    for (const char *c = word; *c != '\0'; c++)
        ddp_buf_puts(out, *c == '\'' ? "'\\''" : (char[]){*c, '\0'});
    ddp_buf_puts(out, "'");
}

/* The launcher's own arguments, but --dry-run (for the lines a dry run prints). */
static void own_args(ddp_buf_t *out, int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--dry-run") == 0 || strcmp(argv[i], "--dry_run") == 0)
            continue;
        ddp_buf_puts(out, " ");
        shell_word(out, argv[i]);
    }
}

typedef struct {
    ddp_buf_t *out;
    const char *self, *first;
    int nodes, index, port, argc;
    char **argv;
} node_line_t;

static int node_line(void *ctx, const char *host)
{
    node_line_t *n = ctx;
    ddp_buf_printf(n->out, "  on %s: %s --nnodes=%d --node-rank=%d --master-addr=%s", host, n->self,
                   n->nodes, n->index, n->first);
    if (n->port > 0)
        ddp_buf_printf(n->out, " --master-port=%d", n->port);
    own_args(n->out, n->argc, n->argv);
    ddp_buf_puts(n->out, "\n");
    return ++n->index >= n->nodes;
}

static int dry_run(const ddp_launch_config_t *cfg, int argc, char **argv, char *const *envp,
                   char *const *srun, int fd)
{
    const char *list = ddp_env_lookup(envp, ddp_env_name(DDP_ENV_SLURM_JOB_NODELIST)),
               *job = ddp_env_lookup(envp, ddp_env_name(DDP_ENV_SLURM_JOB_ID));
    ddp_buf_t out = DDP_BUF_INIT, why = DDP_BUF_INIT;
    char first[256] = "?";
    ddp_buf_printf(&out,
                   "Slurm job %s, %d nodes (%s); outside a step: one ddp-launch a node "
                   "through srun:\n ",
                   job, cfg->slurm_fanout, list != NULL ? list : "?");
    for (int i = 0; srun[i] != NULL && i < 6; i++) {
        ddp_buf_puts(&out, " ");
        shell_word(&out, srun[i]);
    }
    own_args(&out, argc, argv);
    ddp_buf_puts(&out, "\neach node then runs, as Slurm's variables make it:\n");
    node_line_t n = {&out, srun[5], first, cfg->slurm_fanout, 0, ddp_slurm_port(job), argc, argv};
    if (list != NULL && ddp_slurm_first_host(list, first, sizeof first, &why) == 0)
        (void)ddp_slurm_hostlist_each(list, node_line, &n, &why);
    if (why.len > 0)
        ddp_buf_printf(&out, "  (SLURM_JOB_NODELIST: %s)\n", ddp_buf_str(&why));
    int err = ddp_write_all(fd, out.data, out.len);
    ddp_buf_free(&out);
    ddp_buf_free(&why);
    return err == 0 ? DDP_EXIT_OK : DDP_EXIT_LAUNCH_FAILED;
}

int ddp_fanout_slurm(const ddp_launch_config_t *cfg, int argc, char **argv, char *const *envp,
                     int fd, const ddp_log_t *log)
{
    char self[PATH_MAX], nodes[32], tasks[32], *srun_path = NULL;
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len <= 0) {
        ddp_log_error(log, "unable to find this ddp-launch's own path (/proc/self/exe): %s",
                      strerror(errno));
        return DDP_EXIT_LAUNCH_FAILED;
    }
    self[len] = '\0';
    int err = ddp_proc_find("srun", ddp_env_get(DDP_ENV_PATH), &srun_path);
    if (err) {
        ddp_log_error(log,
                      "inside a Slurm allocation of %d nodes (outside a step), ddp-launch starts "
                      "itself on each node with srun, which is not on PATH: %s (or start one "
                      "ddp-launch a node yourself)",
                      cfg->slurm_fanout, ddp_strerror(err));
        return DDP_EXIT_NOT_FOUND;
    }
    snprintf(nodes, sizeof nodes, "--nodes=%d", cfg->slurm_fanout);
    snprintf(tasks, sizeof tasks, "--ntasks=%d", cfg->slurm_fanout);
    char **args = calloc((size_t)argc + 7, sizeof *args);
    if (args == NULL) {
        free(srun_path);
        return DDP_EXIT_LAUNCH_FAILED;
    }
    char *head[] = {srun_path, nodes, tasks, "--ntasks-per-node=1", "--kill-on-bad-exit=1", self};
    memcpy(args, head, sizeof head);
    memcpy(args + 6, argv + 1, (size_t)(argc - 1) * sizeof *args);
    int code;
    if (cfg->dry_run) {
        code = dry_run(cfg, argc, argv, envp, args, fd);
    } else {
        ddp_log_info(log,
                     "Slurm allocation of %d nodes, outside a step: starting one ddp-launch a "
                     "node with %s %s %s --ntasks-per-node=1 --kill-on-bad-exit=1",
                     cfg->slurm_fanout, srun_path, nodes, tasks);
        execv(srun_path, args);
        ddp_log_error(log, "unable to execute %s: %s", srun_path, strerror(errno));
        code = errno == ENOENT ? DDP_EXIT_NOT_FOUND : DDP_EXIT_NOT_EXECUTABLE;
    }
    free(args);
    free(srun_path);
    return code;
}
