/* --warm-restarts on the agent's side (see agent_internal.h, zygote.h): where the launcher
 * is a child subreaper, the zygote started once the first attempt's workers run, a later
 * attempt's workers forked from it or started cold (said once an attempt). Runs on the
 * loop thread; nothing here waits for the zygote but a request's reply (zygote.h). */
#include "agent_internal.h"

#include "error.h"
#include "spawn.h"
#include "worker_spec.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --warm-restarts where the workers are Python: the zygote's script, where this launcher
 * is a child subreaper (agent_orphans.c), so that the workers forked from the zygote
 * become its children. */
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
    else if (!a->subreaper)
        ddp_log_warn(a->log, "--warm-restarts: this launcher could not become a child "
                             "subreaper; restarts start cold");
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
