/* Starting a worker (see agent/worker_start.h): its environment, and --warm-restarts (zygote.h):
 * where the launcher
 * is a child subreaper, the zygote started once the first attempt's workers run (or as a
 * launcher that may wait as a hot spare joins), held while it imports as long as the
 * workers need every CPU, a later attempt's workers forked from it or started cold (said
 * once an attempt). Runs on the loop thread; nothing here waits for the zygote but a
 * request's reply (zygote.h). */
#include "agent/worker_start.h"

#include "agent/file_timer.h"
#include "diagnose/hang.h"
#include "env.h"
#include "error.h"
#include "io.h"
#include "output/logs.h"
#include "output/output.h"
#include "progress.h"
#include "host/proc.h"
#include "spawn/spawn.h"
#include "config/torch_version.h"
#include "spawn/worker_env.h"
#include "spawn/zygote.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

/* The zygote imports only where it takes no CPU from the workers' own start (importing
 * torch too, on as many cores as there are workers): it is held (stopped) while as many
 * workers as the launcher has CPUs are busy, their main thread running or waiting for a
 * CPU for BUSY_SHARE of a look or more. Looked at every LOOK_MS until it is ready; held at
 * most HOLD_MAX_S after its start (workers that never rest: training on every CPU). */
#define LOOK_MS    200
#define BUSY_SHARE 0.5
#define HOLD_MAX_S 30.0

typedef enum {
    WARM_OFF,     /* every worker starts cold */
    WARM_ON,      /* --warm-restarts: the zygote is not started yet */
    WARM_STARTED, /* the zygote is started (it may serve, or not) */
} warm_phase_t;

struct ddp_worker_start_s {
    ddp_group_t *g;
    warm_phase_t warm;
    char zygote_script[PATH_MAX];
    ddp_zygote_t zygote;
    uv_timer_t zygote_timer; /* looks at it while it imports */
    double zygote_looked;    /* the last look (monotonic s) */
    double *runnable;        /* by local rank: its main thread's seconds running or waiting
                              * for a CPU, at the last look */
    bool cold_said;          /* this attempt's line on why a worker started cold */
    bool guard_warned;       /* that the orphan guard is gone */
    int forked;              /* this attempt's workers forked from the zygote */
};

static void warm_restarts(ddp_worker_start_t *s);

int ddp_worker_start_new(ddp_group_t *g, ddp_worker_start_t **out)
{
    ddp_worker_start_t *s = calloc(1, sizeof *s);
    if (s == NULL || (s->runnable = calloc((size_t)g->nworkers + 1, sizeof *s->runnable)) == NULL) {
        free(s);
        return -ENOMEM;
    }
    s->g = g;
    s->zygote.fd = s->zygote.out_fd = -1;
    uv_timer_init(g->loop, &s->zygote_timer);
    s->zygote_timer.data = s;
    warm_restarts(s);
    *out = s;
    return 0;
}

void ddp_worker_start_close(ddp_worker_start_t *s)
{
    uv_close((uv_handle_t *)&s->zygote_timer, NULL);
    ddp_zygote_stop(&s->zygote);
}

void ddp_worker_start_free(ddp_worker_start_t *s)
{
    if (s == NULL)
        return;
    free(s->runnable);
    free(s);
}

void ddp_worker_start_attempt(ddp_worker_start_t *s)
{
    s->cold_said = false;
    s->forked = 0;
}

int ddp_worker_start_forked(const ddp_worker_start_t *s)
{
    return s->forked;
}

pid_t ddp_worker_start_zygote_pid(const ddp_worker_start_t *s)
{
    return s->zygote.pid;
}

extern char **environ;

/* A training script that is not on this node (the program of a C job built on the
 * submit host only, say) would reach python in every worker after the rendezvous, as
 * "can't open file": it is 127 before anything starts, naming the node. */
static int find_script(const ddp_launch_config_t *cfg, const ddp_log_t *log, const char *host)
{
    char cwd[PATH_MAX];
    if (cfg->module || (cfg->no_python && !cfg->run_path) || access(cfg->script, F_OK) == 0 ||
        errno != ENOENT)
        return 0;
    ddp_log_error(log,
                  "the training script %s does not exist on this node (%s, in %s): every node "
                  "needs it at the same path",
                  cfg->script, host, getcwd(cwd, sizeof cwd) != NULL ? cwd : "?");
    return DDP_EXIT_NOT_FOUND;
}

/* What --no-python's program that cannot be executed likely meant: the file in the current
 * directory (PATH does not search it), a script to make executable or to run with python.
 * "" when nothing fits; else "; ..." in buf[cap]. */
static const char *exec_hint(const char *name, int err, char *buf, size_t cap)
{
    struct stat st;
    size_t len = strlen(name);
    bool here = err == -ENOENT && strchr(name, '/') == NULL,
         py = len > 3 && !strcmp(name + len - 3, ".py");
    buf[0] = '\0';
    if ((!here && err != -EACCES) || stat(name, &st) != 0 || !S_ISREG(st.st_mode))
        return buf;
    bool runnable = access(name, X_OK) == 0;
    if (py)
        snprintf(buf, cap, "; %s %s: leave out --no-python to run it with python", name,
                 here ? "is in the current directory, which PATH does not search"
                      : "is not executable");
    else if (here)
        snprintf(buf, cap,
                 "; the current directory has it, which PATH does not search: give ./%s%s", name,
                 runnable ? "" : " (and chmod +x it)");
    else if (!runnable)
        snprintf(buf, cap, "; it is not executable: chmod +x %s", name);
    return buf;
}

/* As torchrun's, once the program is known to be there (a job that cannot start says
 * why alone). */
static void warn_omp_threads(const ddp_launch_config_t *cfg, const ddp_log_t *log)
{
    if (cfg->nproc_per_node > 1 && ddp_env_lookup(environ, "OMP_NUM_THREADS") == NULL)
        ddp_log_warn(log,
                     "setting OMP_NUM_THREADS=1 for each of the %d workers to avoid overloading "
                     "the machine; set it yourself to tune performance",
                     cfg->nproc_per_node);
}

int ddp_worker_start_find_program(const ddp_launch_config_t *cfg, const ddp_log_t *log,
                                  const char *host, char **program, int *torch_version)
{
    bool python = cfg->run_path || !cfg->no_python;
    const char *name = python ? cfg->python_exec : cfg->script;
    char hint[PATH_MAX + 160], *found = NULL;
    int err = ddp_proc_find(name, ddp_env_get(DDP_ENV_PATH), &found);
    if (err == 0 && (err = find_script(cfg, log, host)) != 0) {
        free(found);
        return err; /* the interpreter is there, the script is not */
    }
    if (err == 0) {
        char where[PATH_MAX];
        *program = found;
        *torch_version = ddp_torch_version_of_workers(cfg, environ, where, sizeof where);
        if (*torch_version != 0)
            ddp_log_debug(log, "the workers' torch is %d.%d (%s)", *torch_version / 1000,
                          *torch_version % 1000, where);
        warn_omp_threads(cfg, log);
        return 0;
    }
    if (python)
        ddp_log_error(log,
                      "unable to execute the Python interpreter %s: %s (set PYTHON_EXEC to the "
                      "python that has your packages, or use --no-python for a program)",
                      name, ddp_strerror(err));
    else
        ddp_log_error(log, "unable to execute %s on this node (%s): %s%s", name, host,
                      ddp_strerror(err), exec_hint(name, err, hint, sizeof hint));
    return err == -ENOENT ? DDP_EXIT_NOT_FOUND : DDP_EXIT_NOT_EXECUTABLE;
}

int ddp_worker_start_env(const ddp_group_t *g, const ddp_worker_t *w, const char *error_file,
                         char ***added, char ***envp)
{
    const ddp_launch_config_t *cfg = g->cfg;
    char ring[PATH_MAX];
    snprintf(ring, sizeof ring, "%s/%d/%s", g->attempt_dir, w->local_rank, DDP_PROGRESS_FILE);
    ddp_worker_info_t info = {
        .local_rank = w->local_rank,
        .rank = w->rank,
        .local_world_size = cfg->nproc_per_node,
        .world_size = g->world_size,
        .group_rank = g->group_rank,
        .group_world_size = g->nnodes,
        .restart_count = g->rdzv != NULL ? g->restart_count : g->attempt,
        .use_agent_store = true,
        .master_addr = cfg->master_addr,
        .master_port = g->store != NULL ? g->store_port : cfg->master_port,
        .error_file = error_file,
        .job_env = g->job_env,
        .dump_signal = g->dump_signal,
        .python_dir = g->python_dir,
        .module_dir = g->module_dir[0] != '\0' ? g->module_dir : NULL,
        .progress_ring = g->attempt_dir != NULL ? ring : NULL, /* (none yet: a zygote's) */
        .torch_version = g->torch_version,
        .timer_file = g->file_timer != NULL ? ddp_file_timer_path(g->file_timer) : NULL,
        .checkpoint_dir = g->checkpoint_dir,
        .checkpoint_step = g->checkpoint_step,
    };
    int err = ddp_worker_env_added(cfg, &info, environ, added);
    if (err == 0 && (err = ddp_worker_env_merge(environ, *added, envp)) != 0) {
        ddp_strv_free(*added);
        *added = NULL;
    }
    return err;
}

/* --warm-restarts where the workers are Python: the zygote's script, where this launcher
 * is a child subreaper (agent/leftovers.c), so that the workers forked from the zygote
 * become its children. */
static void warm_restarts(ddp_worker_start_t *s)
{
    const ddp_group_t *g = s->g;
    const ddp_launch_config_t *cfg = g->cfg;
    if (!cfg->warm_restarts)
        return;
    if (cfg->no_python && !cfg->run_path)
        ddp_log_warn(g->log,
                     "--warm-restarts: the workers are not Python (%s); restarts start "
                     "cold",
                     cfg->script);
    else if (!ddp_zygote_script(s->zygote_script, sizeof s->zygote_script))
        ddp_log_warn(g->log, "--warm-restarts: ddp_launch/_zygote.py is not installed beside "
                             "this ddp-launch (Debian: apt install python3-ddp-launch; pip: the "
                             "ddp-launch wheel has it); restarts start cold");
    else if (!g->subreaper)
        ddp_log_warn(g->log, "--warm-restarts: this launcher could not become a child "
                             "subreaper; restarts start cold");
    else
        s->warm = WARM_ON;
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
static int busy_workers(ddp_worker_start_t *s, double interval)
{
    const ddp_group_t *g = s->g;
    int busy = 0;
    for (int i = 0; i < g->nworkers; i++) {
        const ddp_worker_t *w = &g->workers[i];
        double now = w->running ? runnable_seconds(w->pid) : -1;
        if (now >= 0 && (interval <= 0 || now - s->runnable[i] >= BUSY_SHARE * interval))
            busy++;
        s->runnable[i] = now;
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
static void look_at_zygote(ddp_worker_start_t *s)
{
    ddp_zygote_t *z = &s->zygote;
    double now = ddp_clock_mono(), interval = s->zygote_looked > 0 ? now - s->zygote_looked : 0;
    s->zygote_looked = now;
    if (z->pid <= 0 || z->ready || z->given_up || now - z->started >= HOLD_MAX_S) {
        ddp_zygote_hold(z, false);
        uv_timer_stop(&s->zygote_timer);
        return;
    }
    ddp_zygote_hold(z, busy_workers(s, interval) >= cpus_here());
}

static void on_zygote_timer(uv_timer_t *timer)
{
    look_at_zygote(timer->data);
}

/* The zygote's looks while it imports (again after a SIGCHLD has started another). */
static void watch_zygote(ddp_worker_start_t *s)
{
    s->zygote_looked = 0;
    look_at_zygote(s);
    if (s->zygote.pid > 0 && !s->zygote.ready)
        uv_timer_start(&s->zygote_timer, on_zygote_timer, LOOK_MS, LOOK_MS);
}

void ddp_worker_start_reap(ddp_worker_start_t *s)
{
    if (s->warm != WARM_OFF && ddp_zygote_reap(&s->zygote))
        watch_zygote(s); /* (another may have started) */
}

/* A zygote started as this launcher joined (it may wait as a hot spare) has the
 * environment its workers would have had then, without node 0's --env values, which it
 * learns with its first round: where the workers' environment now differs (`envp`, local
 * rank 0's), every restart would start cold; it is ended, and true: another is to start. */
static bool zygote_outdated(ddp_worker_start_t *s, char *const *envp)
{
    char why[300];
    if (s->warm != WARM_STARTED || s->zygote.given_up || s->g->job_env == NULL ||
        ddp_zygote_env_matches(&s->zygote, envp, why, sizeof why))
        return false;
    ddp_log_info(s->g->log,
                 "warm restarts: the zygote started before this node had the job's environment "
                 "(for a worker now, %s): starting another",
                 why);
    uv_timer_stop(&s->zygote_timer);
    ddp_zygote_stop(&s->zygote);
    memset(&s->zygote, 0, sizeof s->zygote);
    s->zygote.fd = s->zygote.out_fd = -1;
    s->warm = WARM_ON;
    return true;
}

/* --warm-restarts: the zygote, with local rank 0's environment less each worker's own,
 * once the first attempt's workers run, or before as a launcher that may wait as a hot
 * spare joins (then started again once its first round has given it node 0's --env
 * values: zygote_outdated); nothing waits for it. One still importing is looked at again
 * for the workers just started. */
void ddp_worker_start_zygote(ddp_worker_start_t *s)
{
    const ddp_group_t *g = s->g;
    const ddp_launch_config_t *cfg = g->cfg;
    char **added = NULL, **envp = NULL, **shared = NULL;
    if (s->warm == WARM_OFF)
        return;
    int err = ddp_worker_start_env(g, &g->workers[0], "", &added, &envp);
    if (err == 0 && !zygote_outdated(s, envp) && s->warm == WARM_STARTED && !s->zygote.ready)
        watch_zygote(s);
    if (s->warm != WARM_ON) {
        free(envp);
        ddp_strv_free(added);
        return;
    }
    s->warm = WARM_STARTED;
    char **argv = NULL;
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
    s->zygote.own_devices = cfg->virtual_local_rank;
    if (err == 0)
        err = ddp_zygote_start(&s->zygote, g->loop, g->log, g->guard, g->program, cfg->python_exec,
                               s->zygote_script, cfg->preload != NULL ? cfg->preload : "torch",
                               room, shared);
    else
        snprintf(s->zygote.why, sizeof s->zygote.why, "%s", ddp_strerror(err));
    if (err != 0)
        ddp_log_warn(g->log, "warm restarts: unable to start the zygote: %s; restarts start cold",
                     ddp_strerror(err));
    else
        watch_zygote(s);
    free(shared);
    free(envp);
    ddp_strv_free(added);
    ddp_strv_free(argv);
}

/* A worker of a later attempt is forked from the zygote where it can serve it, else it
 * starts cold as every worker of the first attempt does; why is said once an attempt. */
static int fork_or_exec(ddp_worker_start_t *s, const ddp_worker_t *w, const ddp_spawn_t *spec,
                        pid_t *pid)
{
    const ddp_group_t *g = s->g;
    char why[600];
    if (s->warm != WARM_STARTED)
        return ddp_spawn(spec, pid);
    if (ddp_zygote_spawn(&s->zygote, spec, g->python_dir != NULL, pid, why, sizeof why) == 0) {
        s->forked++;
        return 0;
    }
    if (!s->cold_said)
        ddp_log_info(g->log, "warm restarts: local rank %d of attempt %d starts cold: %s",
                     w->local_rank, g->attempt, why);
    s->cold_said = true;
    return ddp_spawn(spec, pid);
}

/* Where worker `w`'s stdout and stderr go (output.h): the descriptors it gets and the
 * streams the loop reads, its lines prefixed with `prefix`. Where the console's stdout and
 * stderr are one file (2>&1, a terminal), its two console streams share one pipe, so their
 * lines keep the order written. On failure the caller closes and discards what was
 * opened. */
static int open_streams(const ddp_group_t *g, const ddp_worker_t *w, const char *prefix,
                        int *out_fd, int *err_fd, ddp_stream_t **out, ddp_stream_t **err_stream)
{
    const ddp_launch_config_t *cfg = g->cfg;
    bool merged = g->console_merged &&
                  ddp_logs_sink(cfg, w->local_rank, DDP_STD_OUT) == DDP_SINK_CONSOLE &&
                  ddp_logs_sink(cfg, w->local_rank, DDP_STD_ERR) == DDP_SINK_CONSOLE;
    int err = ddp_output_open(g->output, cfg, g->attempt_dir, w->local_rank, prefix, DDP_STD_OUT,
                              out_fd, out);
    if (err == 0 && merged && (*err_fd = fcntl(*out_fd, F_DUPFD_CLOEXEC, 3)) < 0)
        err = -errno;
    if (err == 0 && !merged)
        err = ddp_output_open(g->output, cfg, g->attempt_dir, w->local_rank, prefix, DDP_STD_ERR,
                              err_fd, err_stream);
    return err;
}

/* Why worker w did not start; out of descriptors, the limit and how to raise it. */
static void say_start_failed(const ddp_group_t *g, const ddp_worker_t *w, const char *what, int err)
{
    struct rlimit rl;
    char hint[200] = "";
    if ((err == -EMFILE || err == -ENFILE) && getrlimit(RLIMIT_NOFILE, &rl) == 0)
        snprintf(hint, sizeof hint,
                 " (%s: ddp-launch holds a few per worker; the limit here is %llu, its hard "
                 "limit %llu: raise it with ulimit -n)",
                 err == -EMFILE ? "this process is out of file descriptors"
                                : "the system is out of file descriptors",
                 (unsigned long long)rl.rlim_cur, (unsigned long long)rl.rlim_max);
    ddp_log_error(g->log, "unable to start worker local rank %d (rank %d): %s: %s%s", w->local_rank,
                  w->rank, what, ddp_strerror(err), hint);
}

int ddp_worker_start_spawn(ddp_worker_start_t *s, const ddp_worker_t *w, ddp_started_t *out)
{
    const ddp_group_t *g = s->g;
    const ddp_launch_config_t *cfg = g->cfg;
    char **argv = NULL, **added = NULL, **envp = NULL, *prefix = NULL, *error_file = NULL;
    ddp_stream_t *out_stream = NULL, *err_stream = NULL;
    int out_fd = -1, err_fd = -1, err;
    pid_t pid = 0;
    const char *what = "its command line and environment";
    if (asprintf(&error_file, "%s/%d/error.json", g->attempt_dir, w->local_rank) < 0) {
        error_file = NULL;
        err = -ENOMEM;
        goto out;
    }
    if ((err = ddp_logs_prefix(cfg, w->rank, w->local_rank, &prefix)) != 0 ||
        (err = ddp_worker_argv(cfg, w->local_rank, &argv)) != 0 ||
        (err = ddp_worker_start_env(g, w, error_file, &added, &envp)) != 0)
        goto out;
    what = "its stdout and stderr";
    if ((err = open_streams(g, w, prefix, &out_fd, &err_fd, &out_stream, &err_stream)) != 0)
        goto out;
    ddp_spawn_t spec = {
        .path = g->program,
        .argv = argv,
        .envp = envp,
        .stdout_fd = out_fd,
        .stderr_fd = err_fd,
        .nofile = g->nofile,
        .guard_fd = g->guard->fd,
        .bind = cfg->numa_binds != NULL ? &cfg->numa_binds[w->local_rank] : NULL,
        .bind_fallback = cfg->numa_fallback,
        .local_rank = w->local_rank,
    };
    what = "the process";
    if ((err = fork_or_exec(s, w, &spec, &pid)) != 0)
        goto out;
    if (ddp_guard_check(g->guard) != 0 && !s->guard_warned) {
        s->guard_warned = true;
        ddp_log_warn(g->log, "the orphan guard is gone: workers still die with ddp-launch, but "
                             "their children may not");
    }
    *out = (ddp_started_t){pid, prefix, error_file, out_stream, err_stream};
    prefix = error_file = NULL;
    out_stream = err_stream = NULL;
out:
    if (err != 0)
        say_start_failed(g, w, what, err);
    free(prefix);
    free(error_file);
    if (out_fd >= 0)
        close(out_fd);
    if (err_fd >= 0)
        close(err_fd);
    ddp_output_discard(out_stream);
    ddp_output_discard(err_stream);
    ddp_strv_free(argv);
    ddp_strv_free(added);
    free(envp);
    return err;
}
