/* What the workers leave outside their process groups (see agent/leftovers.h): this
 * launcher is a child subreaper, so a process a worker started in a session or process
 * group of its own (subprocess's start_new_session, setsid, a daemon) comes to it once
 * its parent has ended, instead of to init, where it would outlive the job. Such
 * processes are found and ended with the group's leftovers (agent.c), at the end of every
 * attempt; what else is adopted is reaped as it ends. Runs on the loop thread. */
#include "agent/leftovers.h"

#include "error.h"
#include "io.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#define CHILDREN_MAX (1 << 20) /* bytes of one thread's list of children */
#define NAMED_MAX    6         /* processes named in a line */

struct ddp_leftovers_s {
    ddp_group_t *g;
    const ddp_worker_start_t *start;
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
    *out = l;
    return 0;
}

void ddp_leftovers_free(ddp_leftovers_t *l)
{
    if (l == NULL)
        return;
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

int ddp_leftovers_escaped(ddp_leftovers_t *l, bool kill_now, double grace)
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
