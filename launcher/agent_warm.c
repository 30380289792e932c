/* --warm-restarts on the agent's side (see agent_internal.h, zygote.h): where the launcher
 * is a child subreaper, the zygote started once the first attempt's workers run (or as a
 * launcher that may wait as a hot spare joins), held while it imports as long as the
 * workers need every CPU, a later attempt's workers forked from it or started cold (said
 * once an attempt). Runs on the loop thread; nothing here waits for the zygote but a
 * request's reply (zygote.h). */
#include "agent_internal.h"

#include "error.h"
#include "hang.h"
#include "io.h"
#include "spawn.h"
#include "worker_spec.h"

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The zygote imports only where it takes no CPU from the workers' own start (importing
 * torch too, on as many cores as there are workers): it is held (stopped) while as many
 * workers as the launcher has CPUs are busy, their main thread running or waiting for a
 * CPU for BUSY_SHARE of a look or more. Looked at every LOOK_MS until it is ready; held at
 * most HOLD_MAX_S after its start (workers that never rest: training on every CPU). */
#define LOOK_MS    200
#define BUSY_SHARE 0.5
#define HOLD_MAX_S 30.0

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

/* The seconds process `pid`'s main thread has run or waited to run (schedstat), or, where
 * the kernel does not say, the CPU seconds of all its threads; -1 when it is gone. */
static double runnable_seconds(pid_t pid)
{
    char path[64], *text = NULL;
    size_t len;
    unsigned long long on_cpu, waiting;
    snprintf(path, sizeof path, "/proc/%d/schedstat", (int)pid);
    int found = ddp_read_file(path, 256, &text, &len) == 0 &&
                sscanf(text, "%llu %llu", &on_cpu, &waiting) == 2;
    free(text);
    return found ? (double)(on_cpu + waiting) / 1e9 : ddp_hang_cpu_seconds(pid);
}

/* How many running workers were busy since the last look (each one's runnable seconds
 * kept for the next); all of them at the first look, which has nothing to compare. */
static int busy_workers(ddp_agent_t *a, double interval)
{
    int busy = 0;
    for (int i = 0; i < a->nworkers; i++) {
        ddp_worker_t *w = &a->workers[i];
        double now = w->running ? runnable_seconds(w->pid) : -1;
        if (now >= 0 && (interval <= 0 || now - w->runnable >= BUSY_SHARE * interval))
            busy++;
        w->runnable = now;
    }
    return busy;
}

static int cpus_here(void)
{
    cpu_set_t set;
    return sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0 ? CPU_COUNT(&set) : 1;
}

/* One look at an importing zygote: held while the workers need every CPU; no more looks
 * once it is ready, ended, or past HOLD_MAX_S. */
static void look_at_zygote(ddp_agent_t *a)
{
    ddp_zygote_t *z = &a->zygote;
    double now = ddp_clock_mono(), interval = a->zygote_looked > 0 ? now - a->zygote_looked : 0;
    a->zygote_looked = now;
    if (z->pid <= 0 || z->ready || z->given_up || now - z->started >= HOLD_MAX_S) {
        ddp_zygote_hold(z, false);
        uv_timer_stop(&a->zygote_timer);
        return;
    }
    ddp_zygote_hold(z, busy_workers(a, interval) >= cpus_here());
}

static void on_zygote_timer(uv_timer_t *timer)
{
    look_at_zygote(timer->data);
}

void ddp_agent_watch_zygote(ddp_agent_t *a)
{
    a->zygote_looked = 0;
    look_at_zygote(a);
    if (a->zygote.pid > 0 && !a->zygote.ready)
        uv_timer_start(&a->zygote_timer, on_zygote_timer, LOOK_MS, LOOK_MS);
}

/* --warm-restarts: the zygote, with local rank 0's environment less each worker's own,
 * once the first attempt's workers run, or before as a launcher that may wait as a hot
 * spare joins (then without node 0's --env values, which it learns with its first round);
 * nothing waits for it. One still importing is looked at again for the workers just
 * started. */
void ddp_agent_start_zygote(ddp_agent_t *a)
{
    const ddp_launch_config_t *cfg = a->cfg;
    char **added = NULL, **envp = NULL, **shared = NULL;
    if (a->warm && a->zygote_started && !a->zygote.ready)
        ddp_agent_watch_zygote(a);
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
    else
        ddp_agent_watch_zygote(a);
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
