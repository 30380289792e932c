/* --warm-restarts on the agent's side (see agent_internal.h, zygote.h): the launcher made
 * a child subreaper, the zygote started once the first attempt's workers run, a later
 * attempt's workers forked from it or started cold (said once an attempt), and what the
 * subreaper adopts reaped. Runs on the loop thread; nothing here waits for the zygote but
 * a request's reply (zygote.h). */
#include "agent_internal.h"

#include "error.h"
#include "spawn.h"
#include "worker_spec.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

/* --warm-restarts where the workers are Python: the zygote's script, and this launcher a
 * child subreaper, so that the workers forked from the zygote become its children. */
void ddp_agent_warm_restarts(ddp_agent_t *a)
{
    const ddp_launch_config_t *cfg = a->cfg;
    if (!cfg->warm_restarts)
        return;
    if (cfg->no_python && !cfg->run_path)
        ddp_log_warn(a->log,
                     "--warm-restarts: the workers are not Python (%s); restarts start "
                     "cold",
                     cfg->script);
    else if (!ddp_zygote_script(a->zygote_script, sizeof a->zygote_script))
        ddp_log_warn(a->log, "--warm-restarts: ddp_launch/_zygote.py is not installed beside "
                             "this ddp-launch; restarts start cold");
    else if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0)
        ddp_log_warn(a->log,
                     "--warm-restarts: unable to become a child subreaper: %s; restarts "
                     "start cold",
                     strerror(errno));
    else
        a->warm = true;
}

/* --warm-restarts: the zygote, with local rank 0's environment less each worker's own,
 * once the first attempt's workers run; nothing waits for it. */
void ddp_agent_start_zygote(ddp_agent_t *a)
{
    const ddp_launch_config_t *cfg = a->cfg;
    char **added = NULL, **envp = NULL, **shared = NULL;
    if (!a->warm || a->zygote_started)
        return;
    a->zygote_started = true;
    char **argv = NULL;
    int err = ddp_agent_worker_env(a, &a->workers[0], "", &added, &envp);
    size_t n = 0, room = 64; /* a worker's command line, and room for longer local ranks */
    if (err == 0 && (err = ddp_worker_argv(cfg, 0, &argv)) == 0)
        for (size_t i = 0; argv[i] != NULL; i++)
            room += strlen(argv[i]) + 1;
    while (err == 0 && envp[n] != NULL)
        n++;
    if (err == 0 && (shared = calloc(n + 1, sizeof *shared)) == NULL)
        err = -ENOMEM;
    for (size_t i = 0, k = 0; err == 0 && i < n; i++)
        if (!ddp_worker_env_own(envp[i], cfg->virtual_local_rank))
            shared[k++] = envp[i];
    a->zygote.own_devices = cfg->virtual_local_rank;
    if (err == 0)
        err = ddp_zygote_start(&a->zygote, &a->loop, a->log, &a->guard, a->program,
                               cfg->python_exec, a->zygote_script,
                               cfg->preload != NULL ? cfg->preload : "torch", room, shared);
    else
        snprintf(a->zygote.why, sizeof a->zygote.why, "%s", ddp_strerror(err));
    if (err != 0)
        ddp_log_warn(a->log, "warm restarts: unable to start the zygote: %s; restarts start cold",
                     ddp_strerror(err));
    free(shared);
    free(envp);
    ddp_strv_free(added);
    ddp_strv_free(argv);
}

/* A worker of a later attempt is forked from the zygote where it can serve it, else it
 * starts cold as every worker of the first attempt does; why is said once an attempt. */
int ddp_agent_spawn_worker(ddp_agent_t *a, ddp_worker_t *w, const ddp_spawn_t *spec)
{
    char why[600];
    if (!a->zygote_started)
        return ddp_proc_spawn(spec, &w->pid);
    if (ddp_zygote_spawn(&a->zygote, spec, a->python_dir != NULL, &w->pid, why, sizeof why) == 0) {
        a->forked++;
        return 0;
    }
    if (!a->cold_said)
        ddp_log_info(a->log, "warm restarts: local rank %d of attempt %d starts cold: %s",
                     w->local_rank, a->attempt, why);
    a->cold_said = true;
    return ddp_proc_spawn(spec, &w->pid);
}

/* A child subreaper (--warm-restarts) also adopts what ends without its parent: a
 * worker's DataLoader processes, a health check's background job. Those are reaped here:
 * every child that leads no process group and is not in ours. What the launcher waits
 * for by pid is left alone: each worker, the zygote, the guard, a health check and an ssh
 * fan-out lead their own groups; a stack tool runs in ours. Their list is /proc's
 * children of each of our threads. */
void ddp_agent_reap_adopted(void)
{
    char path[64], text[4096];
    pid_t ours = getpgrp();
    DIR *tasks = opendir("/proc/self/task");
    struct dirent *task;
    while (tasks != NULL && (task = readdir(tasks)) != NULL) {
        if (task->d_name[0] < '0' || task->d_name[0] > '9')
            continue;
        snprintf(path, sizeof path, "/proc/self/task/%.16s/children", task->d_name);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        ssize_t len = fd >= 0 ? read(fd, text, sizeof text - 1) : -1;
        if (fd >= 0)
            close(fd);
        if (len <= 0)
            continue;
        text[len] = '\0';
        for (char *p = text, *end; *p != '\0'; p = end) {
            long pid = strtol(p, &end, 10);
            if (end == p)
                break;
            pid_t group = getpgid((pid_t)pid);
            if (group > 0 && group != pid && group != ours)
                (void)waitpid((pid_t)pid, NULL, WNOHANG);
        }
    }
    if (tasks != NULL)
        closedir(tasks);
}
