/* What the workers leave behind (see agent/leftovers.h), at the end of every attempt,
 * once every worker has been reaped:
 *
 *   IDLE       the group's end: processes left in the workers' process groups or in
 *              sessions of their own get SIGTERM  --> GRACE (none: SIGKILL for what a
 *              SIGKILLed group still holds, and the group's end goes on)
 *   GRACE      none left, or LEFTOVER_GRACE_S passed (SIGKILL then), or a signal  --> IDLE
 *   IDLE       before the job goes on after a failure, a GPU holds the stopped workers'
 *              memory  --> RECLAIM (NVML polled)
 *   RECLAIM    under the tolerance, --gpu-memory-reclaim-timeout passed, or a signal
 *              --> RECLAIMED, and the group's end comes back (ops->leftovers_done)
 *   RECLAIMED  the group's end goes on  --> IDLE
 *
 * A process a worker started in a session or process group of its own (subprocess's
 * start_new_session, setsid, a daemon) comes to this launcher, a child subreaper, once its
 * parent has ended, instead of to init, where it would outlive the job; what else is
 * adopted is reaped as it ends. Runs on the loop thread. */
#include "agent/leftovers.h"

#include "error.h"
#include "host/health.h"
#include "io.h"
#include "shm_name.h"
#include "host/proc.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#define CHILDREN_MAX (1 << 20) /* bytes of one thread's list of children */
#define NAMED_MAX    6         /* processes named in a line */

/* Processes a worker left in its process group (a data loader, a shell's background
 * job, Python's resource tracker) go with it, after a grace: SIGTERM, then up to
 * LEFTOVER_GRACE_S for them to end on their own (the resource tracker ignores SIGTERM
 * and unlinks the worker's shared memory once the worker has gone), then SIGKILL.
 * Groups that were SIGKILLed already are only finishing dying. What the workers left in
 * sessions or groups of their own goes the same way. */
#define LEFTOVER_GRACE_S 2.0
#define LEFTOVER_POLL_MS 20

#define RECLAIM_TOLERANCE ((unsigned long long)512 << 20) /* bytes in use on a GPU that is free */
#define RECLAIM_POLL_MS   100

typedef enum { END_IDLE, END_GRACE, END_RECLAIM, END_RECLAIMED } end_phase_t;

struct ddp_leftovers_s {
    ddp_group_t *g;
    const ddp_worker_start_t *start;
    end_phase_t phase;
    uv_timer_t timer; /* GRACE, RECLAIM: the looks */
    double deadline;  /* ... until (CLOCK_MONOTONIC) */
    ddp_gpu_memory_t *reclaim;
    double reclaim_started;
    /* Those found at a group's end, ended with its leftovers. */
    pid_t *escaped;
    int nescaped, escaped_cap;
};

bool ddp_leftovers_become_subreaper(const ddp_log_t *log)
{
    if (prctl(PR_SET_CHILD_SUBREAPER, 1) == 0)
        return true;
    ddp_log_debug(log,
                  "unable to become a child subreaper: %s; what the workers start in "
                  "sessions of their own may outlive them",
                  strerror(errno));
    return false;
}

int ddp_leftovers_new(ddp_group_t *g, const ddp_worker_start_t *start, ddp_leftovers_t **out)
{
    ddp_leftovers_t *l = calloc(1, sizeof *l);
    if (l == NULL)
        return -ENOMEM;
    l->g = g;
    l->start = start;
    uv_timer_init(g->loop, &l->timer);
    l->timer.data = l;
    *out = l;
    return 0;
}

void ddp_leftovers_close(ddp_leftovers_t *l)
{
    uv_close((uv_handle_t *)&l->timer, NULL);
}

void ddp_leftovers_free(ddp_leftovers_t *l)
{
    if (l == NULL)
        return;
    ddp_gpu_memory_close(l->reclaim); /* a wait the job's end cut short */
    free(l->escaped);
    free(l);
}

/* fn(l, pid) for each child of each of our threads (/proc's lists). */
static void each_child(ddp_leftovers_t *l, void (*fn)(ddp_leftovers_t *, pid_t))
{
    char path[64];
    DIR *tasks = opendir("/proc/self/task");
    struct dirent *task;
    while (tasks != NULL && (task = readdir(tasks)) != NULL) {
        if (task->d_name[0] < '0' || task->d_name[0] > '9')
            continue;
        snprintf(path, sizeof path, "/proc/self/task/%.16s/children", task->d_name);
        char *text = NULL;
        size_t len;
        if (ddp_read_file(path, CHILDREN_MAX, &text, &len) != 0)
            continue;
        for (char *p = text, *end; *p != '\0'; p = end) {
            long pid = strtol(p, &end, 10);
            if (end == p)
                break;
            fn(l, (pid_t)pid);
        }
        free(text);
    }
    if (tasks != NULL)
        closedir(tasks);
}

/* An adopted process that leads no process group and is not in ours: a DataLoader
 * process of a worker that died, a worker's background job. What the launcher waits for
 * by pid is left alone: each worker, the zygote, the guard, the health checks' helper and
 * an ssh fan-out lead their own groups; a stack tool runs in ours. (What a health check
 * leaves comes to its helper, a subreaper too, not here.) */
static void reap_member(ddp_leftovers_t *l, pid_t pid)
{
    (void)l;
    pid_t group = getpgid(pid);
    if (group > 0 && group != pid && group != getpgrp())
        (void)waitpid(pid, NULL, WNOHANG);
}

/* The escaped processes that have ended are reaped and leave the list. */
static void reap_escaped(ddp_leftovers_t *l)
{
    int kept = 0;
    for (int i = 0; i < l->nescaped; i++) {
        pid_t r = waitpid(l->escaped[i], NULL, WNOHANG);
        if (r == 0 || (r < 0 && errno == EINTR))
            l->escaped[kept++] = l->escaped[i];
    }
    l->nescaped = kept;
}

void ddp_leftovers_reap_adopted(ddp_leftovers_t *l)
{
    each_child(l, reap_member);
    reap_escaped(l);
}

/* Whether child `pid` is one the workers left outside their groups: not a process the
 * launcher started itself (a worker, the zygote, the guard; a stack tool or the health
 * checks' helper is in our session), nor a member of a worker's group (those go with the
 * group). */
static bool escaped(const ddp_leftovers_t *l, pid_t pid)
{
    const ddp_group_t *g = l->g;
    if (pid == g->guard->pid || pid == ddp_worker_start_zygote_pid(l->start))
        return false;
    pid_t session = getsid(pid), group = getpgid(pid);
    if (session < 0 || group < 0 || session == getsid(0))
        return false;
    for (int i = 0; i < g->nworkers; i++)
        if (g->workers[i].pid == pid || g->workers[i].pid == group)
            return false;
    for (int i = 0; i < l->nescaped; i++)
        if (l->escaped[i] == pid)
            return false; /* known already */
    return true;
}

static void find_escaped(ddp_leftovers_t *l, pid_t pid)
{
    if (!escaped(l, pid) || waitpid(pid, NULL, WNOHANG) == pid)
        return; /* ended already: reaped */
    if (l->nescaped == l->escaped_cap) {
        int cap = l->escaped_cap ? 2 * l->escaped_cap : 8;
        pid_t *grown = realloc(l->escaped, (size_t)cap * sizeof *grown);
        if (grown == NULL)
            return; /* found again at the next look */
        l->escaped = grown;
        l->escaped_cap = cap;
    }
    l->escaped[l->nescaped++] = pid;
}

/* "pid 123 (sleep), pid 124 (python3)" for escaped[from..to), the first NAMED_MAX. */
static void name_escaped(const ddp_leftovers_t *l, int from, int to, ddp_buf_t *out)
{
    for (int i = from; i < to && i < from + NAMED_MAX; i++) {
        char path[48], comm[32] = "";
        snprintf(path, sizeof path, "/proc/%d/comm", (int)l->escaped[i]);
        FILE *f = fopen(path, "re");
        if (f != NULL) {
            if (fgets(comm, sizeof comm, f) != NULL)
                comm[strcspn(comm, "\n")] = '\0';
            fclose(f);
        }
        ddp_buf_printf(out, "%spid %d%s%s%s", i > from ? ", " : "", (int)l->escaped[i],
                       comm[0] ? " (" : "", comm, comm[0] ? ")" : "");
    }
    if (to - from > NAMED_MAX)
        ddp_buf_printf(out, " and %d more", to - from - NAMED_MAX);
}

/* `sig` to the process and, where it leads one, its process group. */
static void signal_escaped(pid_t pid, int sig)
{
    if (getpgid(pid) == pid)
        (void)kill(-pid, sig);
    (void)kill(pid, sig);
}

/* The processes the workers left in sessions or process groups of their own, once every
 * worker has been reaped: those newly found get SIGTERM (named, with the `grace` that
 * follows) or, `kill_now`, SIGKILL, as do those found before (which outlived the grace).
 * Returns how many are left, reaped ones aside (0 where this launcher is no subreaper). */
static int end_escaped(ddp_leftovers_t *l, bool kill_now, double grace)
{
    const ddp_group_t *g = l->g;
    if (!g->subreaper)
        return 0;
    reap_escaped(l);
    int known = l->nescaped;
    each_child(l, find_escaped);
    ddp_buf_t names = DDP_BUF_INIT;
    if (l->nescaped > known) {
        name_escaped(l, known, l->nescaped, &names);
        if (kill_now)
            ddp_log_warn(g->log,
                         "ending %d process(es) the workers left in sessions or process "
                         "groups of their own: %s: SIGKILL",
                         l->nescaped - known, ddp_buf_str(&names));
        else
            ddp_log_info(g->log,
                         "ending %d process(es) the workers left in sessions or process "
                         "groups of their own: %s: SIGTERM, SIGKILL after %g s",
                         l->nescaped - known, ddp_buf_str(&names), grace);
        for (int i = known; i < l->nescaped; i++)
            signal_escaped(l->escaped[i], kill_now ? SIGKILL : SIGTERM);
    }
    if (kill_now && known > 0) {
        ddp_buf_clear(&names);
        name_escaped(l, 0, known, &names);
        ddp_log_warn(g->log,
                     "%d process(es) the workers left outside their process groups did not "
                     "end within %g s of SIGTERM: %s: sending SIGKILL",
                     known, grace, ddp_buf_str(&names));
        for (int i = 0; i < known; i++)
            signal_escaped(l->escaped[i], SIGKILL);
    }
    ddp_buf_free(&names);
    return l->nescaped;
}

/* Which workers' groups still have a live member (zombies aside): how many. */
static int leftover_groups(const ddp_group_t *g, bool *alive)
{
    /* Usually no group has a member left at all (kill fails with ESRCH): then there
     * is no need to read /proc, which only tells live members from zombies. */
    bool any = false;
    for (int i = 0; i < g->nworkers && !any; i++)
        any = g->workers[i].pid > 0 && kill(-g->workers[i].pid, 0) == 0;
    if (!any)
        return 0;
    pid_t *pgids = calloc((size_t)g->nworkers, sizeof *pgids);
    if (pgids == NULL)
        return 0;
    for (int i = 0; i < g->nworkers; i++)
        pgids[i] = g->workers[i].pid;
    if (ddp_proc_groups_alive(pgids, (size_t)g->nworkers, alive) != 0)
        memset(alive, 1, (size_t)g->nworkers * sizeof *alive); /* no /proc: assume so */
    int n = 0;
    for (int i = 0; i < g->nworkers; i++) {
        alive[i] = alive[i] && pgids[i] > 0;
        n += alive[i];
    }
    free(pgids);
    return n;
}

/* The grace is over (or was not wanted): SIGKILL for what is left. */
static void kill_leftovers(ddp_leftovers_t *l)
{
    const ddp_group_t *g = l->g;
    (void)end_escaped(l, true, LEFTOVER_GRACE_S);
    bool *alive = calloc((size_t)(g->nworkers > 0 ? g->nworkers : 1), sizeof *alive);
    if (alive != NULL && leftover_groups(g, alive) > 0) {
        for (int i = 0; i < g->nworkers; i++) {
            if (!alive[i])
                continue;
            if (!g->sent_sigkill)
                ddp_log_warn(g->log,
                             "worker local rank %d (pid %d) left processes behind in its "
                             "process group that did not end within %g s of SIGTERM: sending "
                             "them SIGKILL",
                             i, (int)g->workers[i].pid, LEFTOVER_GRACE_S);
            kill(-g->workers[i].pid, SIGKILL);
        }
    }
    free(alive);
}

/* The wait is over: the group's end comes back to the agent. */
static void done(ddp_leftovers_t *l, end_phase_t next)
{
    uv_timer_stop(&l->timer);
    l->phase = next;
    l->g->ops->leftovers_done(l->g);
}

/* The reclaim wait's look: under the tolerance, past the deadline (or a signal), or NVML
 * failing ends it. */
static void reclaim_look(ddp_leftovers_t *l)
{
    const ddp_group_t *g = l->g;
    unsigned long long used = 0;
    int gpu = 0;
    double now = ddp_clock_mono(), waited = now - l->reclaim_started;
    int err = ddp_gpu_memory_used(l->reclaim, &used, &gpu);
    bool under = err == 0 && used <= RECLAIM_TOLERANCE;
    if (!under && err == 0 && now < l->deadline)
        return; /* the repeating timer looks again */
    if (under)
        ddp_log_info(g->log, "the GPUs' memory was back under %llu MiB after %.1f s",
                     RECLAIM_TOLERANCE >> 20, waited);
    else if (err == 0 && g->stop_reason != DDP_STOP_SIGNAL)
        ddp_log_warn(
            g->log,
            "GPU %d still has %llu MiB in use after %.1f s (--gpu-memory-reclaim-timeout): "
            "going on",
            gpu, used >> 20, waited);
    ddp_gpu_memory_close(l->reclaim);
    l->reclaim = NULL;
    done(l, END_RECLAIMED);
}

/* The grace's look: nothing left, or past the deadline (SIGKILL then), ends it. */
static void grace_look(ddp_leftovers_t *l)
{
    const ddp_group_t *g = l->g;
    bool *alive = calloc((size_t)(g->nworkers > 0 ? g->nworkers : 1), sizeof *alive);
    bool left = alive == NULL || leftover_groups(g, alive) > 0;
    free(alive);
    left = end_escaped(l, false, LEFTOVER_GRACE_S) > 0 || left;
    if (left && ddp_clock_mono() < l->deadline)
        return; /* the repeating timer looks again */
    kill_leftovers(l);
    done(l, END_IDLE);
}

static void on_timer(uv_timer_t *timer)
{
    ddp_leftovers_t *l = timer->data;
    if (l->phase == END_RECLAIM)
        reclaim_look(l);
    else if (l->phase == END_GRACE)
        grace_look(l);
}

bool ddp_leftovers_end(ddp_leftovers_t *l)
{
    const ddp_group_t *g = l->g;
    if (l->phase == END_GRACE || l->phase == END_RECLAIM)
        return true; /* (the group's end comes from the timer) */
    bool *alive = calloc((size_t)(g->nworkers > 0 ? g->nworkers : 1), sizeof *alive);
    int n = alive != NULL && !g->sent_sigkill ? leftover_groups(g, alive) : 0;
    for (int i = 0; i < g->nworkers && n > 0; i++) {
        if (alive[i])
            kill(-g->workers[i].pid, SIGTERM);
    }
    free(alive);
    int escaped = !g->sent_sigkill ? end_escaped(l, false, LEFTOVER_GRACE_S) : 0;
    if (n == 0 && escaped == 0) {
        kill_leftovers(l);
        return false;
    }
    if (n > 0)
        ddp_log_debug(g->log, "%d worker group(s) have processes left: SIGTERM, %g s to end", n,
                      LEFTOVER_GRACE_S);
    l->phase = END_GRACE;
    l->deadline = ddp_clock_mono() + LEFTOVER_GRACE_S;
    uv_timer_start(&l->timer, on_timer, LEFTOVER_POLL_MS, LEFTOVER_POLL_MS);
    return true;
}

bool ddp_leftovers_reclaimed(const ddp_leftovers_t *l)
{
    return l->phase == END_RECLAIMED;
}

bool ddp_leftovers_reclaim(ddp_leftovers_t *l, bool goes_on)
{
    const ddp_group_t *g = l->g;
    if (l->phase == END_RECLAIMED) {
        l->phase = END_IDLE; /* the wait for this group's end is over */
        return false;
    }
    if (g->cfg->gpu_reclaim_timeout <= 0 || !goes_on)
        return false;
    ddp_gpu_memory_t *m = ddp_gpu_memory_open();
    unsigned long long used = 0;
    int gpu = 0;
    if (m == NULL || ddp_gpu_memory_used(m, &used, &gpu) != 0 || used <= RECLAIM_TOLERANCE) {
        ddp_gpu_memory_close(m);
        return false;
    }
    ddp_log_info(g->log,
                 "GPU %d still has %llu MiB in use: waiting up to %g s for the stopped "
                 "workers' memory before going on",
                 gpu, used >> 20, g->cfg->gpu_reclaim_timeout);
    ddp_buf_t fields = DDP_BUF_INIT;
    ddp_events_int(&fields, "gpu", gpu);
    ddp_events_int(&fields, "used_mib", (long long)(used >> 20));
    ddp_events_emit(&g->events, "gpu_memory_wait", &fields);
    ddp_buf_free(&fields);
    l->reclaim = m;
    l->reclaim_started = ddp_clock_mono();
    l->phase = END_RECLAIM;
    l->deadline = l->reclaim_started + g->cfg->gpu_reclaim_timeout;
    uv_timer_start(&l->timer, on_timer, RECLAIM_POLL_MS, RECLAIM_POLL_MS);
    return true;
}

bool ddp_leftovers_cut_short(ddp_leftovers_t *l)
{
    if (l->phase != END_GRACE && l->phase != END_RECLAIM)
        return false;
    l->deadline = 0; /* the next look ends it */
    return true;
}

void ddp_leftovers_remove_shm(const ddp_leftovers_t *l)
{
    const ddp_group_t *g = l->g;
    DIR *dir = opendir("/dev/shm");
    struct dirent *entry;
    while (dir != NULL && (entry = readdir(dir)) != NULL) {
        int pid = 0, used = 0;
        if (strncmp(entry->d_name, "ddp-p", 5) != 0 ||
            sscanf(entry->d_name, DDP_SHM_PID_PREFIX "%n", &pid, &used) != 1 || used == 0)
            continue;
        for (int i = 0; i < g->nworkers; i++) {
            if (g->workers[i].pid != pid)
                continue;
            char name[300];
            snprintf(name, sizeof name, "/%s", entry->d_name);
            if (shm_unlink(name) == 0)
                ddp_log_debug(g->log, "removed %s, left by worker local rank %d", name, i);
        }
    }
    if (dir != NULL)
        closedir(dir);
}
