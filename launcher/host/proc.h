/* This machine's processes, as the launcher sees them: finding a program as execvp(3)
 * would, its own path, signalling a process group, what /proc says of a process (stopped,
 * its parent, which groups still have a live member), and a short helper command run to
 * its end within a bound. No configuration, no loop: used by the agent, the health checks,
 * the GPU count, the stack tools, the fan-out and the workers' spawn. */
#ifndef DDP_LAUNCHER_HOST_PROC_H
#define DDP_LAUNCHER_HOST_PROC_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* Runs argv[0] (a path) with `argv` in its own process group, its stdin and (unless
 * `with_stdout`) stdout /dev/null, its stderr (and stdout) into a pipe whose last `cap`
 * bytes are kept in tail (*kept), for at most `timeout` s (then SIGKILL to its group).
 * Blocking; for a short helper (a health check). Returns 0 with *status (waitpid's), 1
 * when time ran out, or -errno when it could not start. */
int ddp_proc_run_bounded(char *const argv[], bool with_stdout, double timeout, char *tail,
                         size_t cap, size_t *kept, int *status);

/* ddp_read_file(path, limit, ...) in a child process, waited for at most `timeout` s or
 * until `cancel_fd` (an eventfd, or -1) is readable: a file on a file system that does not
 * answer (a dead NFS server) holds the child, never the caller, who gets 1 (late; the
 * child is SIGKILLed) or -ECANCELED. Else ddp_read_file's return, with *out and *len as
 * it gives them. Blocking; for a thread of libuv's pool, never the loop. */
int ddp_proc_read_file_bounded(const char *path, size_t limit, double timeout, int cancel_fd,
                               char **out, size_t *len);

/* The last non-empty line of text[0, len) (such a tail: why it failed), into out[cap]. */
void ddp_proc_last_line(const char *text, size_t len, char *out, size_t cap);

/* Finds `name` as execvp(3) would: a name with a slash as it is, others in the
 * directories of `path_env`. *out is a new string. Returns 0, -ENOENT, or -EACCES when
 * only files without execute permission (or directories) were found. */
int ddp_proc_find(const char *name, const char *path_env, char **out);

/* This program's own path (readlink of /proc/self/exe: under valgrind still ours), into
 * buf[cap]. Returns 0, -errno, or -ENAMETOOLONG. */
int ddp_proc_self(char *buf, size_t cap);

/* In a child between fork (or clone) and exec: descriptors from `first` on close at the
 * exec, those the launcher inherited from whoever started it included (a parent's pipe, a
 * jobserver's), as Python's subprocess (close_fds) does for torchrun's workers. A kernel
 * without close_range (before 5.11) leaves them. Async-signal-safe. */
void ddp_proc_close_inherited(unsigned first);

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
