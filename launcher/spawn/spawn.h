/* Starting one worker process: its own session and process group, a parent-death
 * signal, its standard streams, exec.
 *
 * Runs on the loop thread. The child shares the launcher's memory until it execs
 * (clone with CLONE_VM | CLONE_VFORK, as posix_spawn; fork where that is refused);
 * signals are blocked around it so no handler of the launcher runs in the child.
 * Exits are observed by the agent (SIGCHLD, waitpid by pid), not here. */
#ifndef DDP_LAUNCHER_SPAWN_SPAWN_H
#define DDP_LAUNCHER_SPAWN_SPAWN_H

#include "host/numa.h"

#include <stdbool.h>
#include <stddef.h>
#include <sys/resource.h>
#include <sys/types.h>

typedef struct ddp_spawn_s {
    const char *path;  /* the executable, as found by ddp_proc_find */
    char *const *argv; /* argv[0] is shown as the program name */
    char *const *envp;
    int stdout_fd;               /* dup'd onto 1 in the child; -1 inherits the launcher's */
    int stderr_fd;               /* dup'd onto 2 in the child; -1 inherits */
    rlim_t nofile;               /* soft RLIMIT_NOFILE to restore in the child; 0 leaves it */
    int guard_fd;                /* the orphan guard's pipe (guard.h), or -1 */
    const ddp_numa_bind_t *bind; /* --numa-binding: its CPUs and memory node, or NULL */
    bool bind_fallback;          /* a binding the kernel refuses is a warning, not exit 126 */
    int local_rank;              /* for the binding's messages */
    bool has_fd3;                /* fd3 is dup'd onto descriptor 3 in the child */
    int fd3;                     /* (the warm-restart zygote's socket, zygote.h) */
} ddp_spawn_t;

/* Runs argv[0] (a path) with `argv` in its own process group, its stdin and (unless
 * `with_stdout`) stdout /dev/null, its stderr (and stdout) into a pipe whose last `cap`
 * bytes are kept in tail (*kept), for at most `timeout` s (then SIGKILL to its group).
 * Blocking; for a short helper (a health check). Returns 0 with *status (waitpid's), 1
 * when time ran out, or -errno when it could not start. */
int ddp_proc_run_bounded(char *const argv[], bool with_stdout, double timeout, char *tail,
                         size_t cap, size_t *kept, int *status);

/* The last non-empty line of text[0, len) (such a tail: why it failed), into out[cap]. */
void ddp_proc_last_line(const char *text, size_t len, char *out, size_t cap);

/* Finds `name` as execvp(3) would: a name with a slash as it is, others in the
 * directories of `path_env`. *out is a new string. Returns 0, -ENOENT, or -EACCES when
 * only files without execute permission (or directories) were found. */
int ddp_proc_find(const char *name, const char *path_env, char **out);

/* This program's own path (readlink of /proc/self/exe: under valgrind still ours), into
 * buf[cap]. Returns 0, -errno, or -ENAMETOOLONG. */
int ddp_proc_self(char *buf, size_t cap);

/* Starts a child and execs. In the child: PR_SET_PDEATHSIG=SIGKILL (so the worker dies with
 * the launcher), setsid() (its own process group, led by its pid), the group written
 * to the orphan guard's pipe (so the guard knows it before any program of the group
 * runs, even when the launcher dies before fork returns; a guard that is gone does not
 * stop the start), default signal dispositions and an empty mask, the standard streams, the
 * binding's CPU affinity and preferred memory node (a refusal: a message on its stderr and exit
 * 126, unless bind_fallback). If exec
 * fails, the child writes why to its stderr and exits 127 (not found) or 126. Returns 0 and the
 * pid, or -errno when the child cannot be made. */
int ddp_proc_spawn(const ddp_spawn_t *spec, pid_t *pid);

/* Sends `sig` to the process group led by `pid`, or to `pid` alone if it has not
 * made its group yet. Returns 0 or -errno (-ESRCH when nothing is left). */
int ddp_proc_signal_group(pid_t pid, int sig);

/* Whether process `pid` is stopped by a signal (SIGSTOP, Ctrl-Z: state T in /proc; not
 * a debugger's tracing stop). */
bool ddp_proc_stopped(pid_t pid);

/* The parent of process `pid` as /proc says, or 0 where it cannot be read. */
pid_t ddp_proc_parent(pid_t pid);

/* For each i, whether the process group led by pgids[i] still holds a process that is
 * not a zombie (one scan of /proc). Returns 0 or -errno. */
int ddp_proc_groups_alive(const pid_t *pgids, size_t n, bool *alive);

#endif
