/* fork/exec of workers (see spawn.h). */
#include "spawn/spawn.h"

#include "io.h"

#include <dirent.h>
#include <linux/close_range.h>
#include <linux/mempolicy.h>
#include <errno.h>
#include <poll.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static int check_executable(const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return -errno;
    if (S_ISDIR(st.st_mode))
        return -EACCES;
    if (access(path, X_OK) != 0)
        return -errno;
    return 0;
}

int ddp_proc_find(const char *name, const char *path_env, char **out)
{
    if (*name == '\0')
        return -ENOENT;
    if (strchr(name, '/') != NULL) {
        int err = check_executable(name);
        if (err)
            return err;
        *out = strdup(name);
        return *out ? 0 : -ENOMEM;
    }
    int result = -ENOENT;
    const char *dir = path_env;
    while (dir != NULL) {
        const char *colon = strchr(dir, ':');
        size_t len = colon ? (size_t)(colon - dir) : strlen(dir);
        char *candidate;
        /* An empty entry means the current directory, as for execvp. */
        if (asprintf(&candidate, "%.*s%s%s", (int)len, dir, len ? "/" : "", name) < 0)
            return -ENOMEM;
        int err = check_executable(candidate);
        if (err == 0) {
            *out = candidate;
            return 0;
        }
        free(candidate);
        if (err == -EACCES)
            result = -EACCES;
        dir = colon ? colon + 1 : NULL;
    }
    return result;
}

int ddp_proc_self(char *buf, size_t cap)
{
    ssize_t len = readlink("/proc/self/exe", buf, cap);
    if (len < 0)
        return -errno;
    if (len == 0 || (size_t)len >= cap)
        return -ENAMETOOLONG;
    buf[len] = '\0';
    return 0;
}

/* In a child before its exec: descriptors from `first` on close at the exec, those the
 * launcher inherited from whoever started it included (a parent's pipe, a jobserver's),
 * as Python's subprocess (close_fds) does for torchrun's workers. A kernel without
 * close_range (before 5.11) leaves them. */
static void close_inherited(unsigned first)
{
    (void)syscall(SYS_close_range, first, ~0U, CLOSE_RANGE_CLOEXEC);
}

/* The child's stack while it shares the launcher's memory (CLONE_VM): what child_exec
 * needs with room to spare (its failure message's snprintf is the deepest). */
#define CHILD_STACK (64 * 1024)

/* In the child after its streams are in place: --numa-binding's CPUs (sched_setaffinity) and
 * preferred memory node (set_mempolicy), both kept across exec, as numactl would set them. */
static void bind_child(const ddp_spawn_t *spec)
{
    const ddp_numa_bind_t *b = spec->bind;
    const char *what = "CPUs";
    char msg[1024];
    int err = 0;
    if (sched_setaffinity(0, b->cpus.nwords * sizeof *b->cpus.bits,
                          (const cpu_set_t *)(const void *)b->cpus.bits) != 0) {
        err = errno;
    } else if (b->mem_node >= 0) {
        /* Room for the kernel's 1024 nodes and a word beyond, which it reads as zero. */
        unsigned long mask[1024 / (8 * sizeof(unsigned long)) + 1] = {0};
        size_t bits = 8 * sizeof *mask;
        mask[(size_t)b->mem_node / bits] |= 1UL << ((size_t)b->mem_node % bits);
        if (syscall(SYS_set_mempolicy, MPOL_PREFERRED, mask, (unsigned long)(8 * sizeof mask)) !=
            0) {
            err = errno;
            what = "its memory node";
        }
    }
    if (err == 0)
        return;
    int n = snprintf(msg, sizeof msg,
                     "ddp-launch: unable to bind worker local rank %d to %s (%s): %s%s\n",
                     spec->local_rank, what, b->text, strerror(err),
                     spec->bind_fallback ? "; it runs without (--numa-binding-fallback)" : "");
    if (n > 0)
        (void)!write(2, msg, (size_t)n < sizeof msg ? (size_t)n : sizeof msg - 1);
    if (!spec->bind_fallback)
        _exit(126);
}

/* In the child, between clone and exec: only async-signal-safe calls from here on,
 * apart from snprintf for the failure message. It runs in the launcher's memory
 * (CLONE_VM, the launcher suspended until the exec), so it writes nothing but its own
 * stack; its descriptors, signal dispositions and limits are its own. */
__attribute__((noreturn)) static void child_exec(const ddp_spawn_t *spec, pid_t parent)
{
    char msg[512];
    sigset_t none;
    /* Die with the launcher, even if it is SIGKILLed; if it is already gone, stop. */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent)
        _exit(128 + SIGKILL);
    setsid();
    if (spec->guard_fd >= 0) {
        /* Every signal is blocked here: a guard that is gone is EPIPE, not SIGPIPE. */
        int32_t group = (int32_t)getpid();
        (void)!write(spec->guard_fd, &group, sizeof group);
    }
    for (int sig = 1; sig < NSIG; sig++) {
        struct sigaction sa;
        if (sig == SIGKILL || sig == SIGSTOP || sigaction(sig, NULL, &sa) != 0)
            continue;
        /* Handlers of the launcher and the SIGPIPE it ignores must not reach the
         * worker; signals ignored by whoever started the launcher stay ignored. */
        if (sa.sa_handler != SIG_DFL && (sa.sa_handler != SIG_IGN || sig == SIGPIPE))
            signal(sig, SIG_DFL);
    }
    if (spec->nofile != 0) {
        struct rlimit rl;
        if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
            rl.rlim_cur = spec->nofile;
            setrlimit(RLIMIT_NOFILE, &rl);
        }
    }
    if ((spec->stdout_fd >= 0 && dup2(spec->stdout_fd, 1) < 0) ||
        (spec->stderr_fd >= 0 && dup2(spec->stderr_fd, 2) < 0))
        _exit(126);
    /* dup2 onto itself would keep close-on-exec. */
    if (spec->has_fd3 && (spec->fd3 == 3 ? fcntl(3, F_SETFD, 0) : dup2(spec->fd3, 3)) < 0)
        _exit(126);
    close_inherited(spec->has_fd3 ? 4 : 3);
    if (spec->bind != NULL && spec->bind->cpus.nwords > 0)
        bind_child(spec);
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    execve(spec->path, spec->argv, spec->envp);
    int err = errno;
    int n = snprintf(msg, sizeof msg, "ddp-launch: unable to execute %s: %s\n", spec->path,
                     strerror(err));
    if (n > 0)
        (void)!write(2, msg, (size_t)n < sizeof msg ? (size_t)n : sizeof msg - 1);
    _exit(err == ENOENT || err == ENOTDIR ? 127 : 126);
}

typedef struct {
    const ddp_spawn_t *spec;
    pid_t parent;
} child_arg_t;

static int child_main(void *arg)
{
    const child_arg_t *c = arg;
    child_exec(c->spec, c->parent);
}

int ddp_proc_spawn(const ddp_spawn_t *spec, pid_t *pid)
{
    sigset_t all, saved;
    child_arg_t arg = {spec, getpid()};
    char *stack = malloc(CHILD_STACK);
    if (stack == NULL)
        return -ENOMEM;
    sigfillset(&all);
    sigprocmask(SIG_SETMASK, &all, &saved);
    /* As posix_spawn does: no copy of the launcher's memory to make and tear down again
     * at the exec (a third of a re-forming node's CPU at 4096 nodes on two cores). */
    pid_t child = clone(child_main, stack + CHILD_STACK, CLONE_VM | CLONE_VFORK | SIGCHLD, &arg);
    if (child < 0 && (errno == EINVAL || errno == ENOSYS)) { /* valgrind refuses CLONE_VM */
        child = fork();
        if (child == 0)
            child_exec(spec, arg.parent);
    }
    int err = child < 0 ? -errno : 0;
    sigprocmask(SIG_SETMASK, &saved, NULL);
    free(stack);
    if (err)
        return err;
    *pid = child;
    return 0;
}

int ddp_proc_signal_group(pid_t pid, int sig)
{
    if (kill(-pid, sig) == 0)
        return 0;
    if (errno == ESRCH && kill(pid, sig) == 0)
        return 0;
    return -errno;
}

/* The state letter of /proc/<pid>/stat ("pid (comm) state ppid pgrp ..."; comm may hold
 * spaces and parentheses), its parent and its group; false if it cannot be read. */
static bool read_stat(const char *pid, char *state, int *ppid, int *pgrp)
{
    char path[300], text[512];
    snprintf(path, sizeof path, "/proc/%s/stat", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    ssize_t len = read(fd, text, sizeof text - 1);
    close(fd);
    if (len <= 0)
        return false;
    text[len] = '\0';
    char *after = strrchr(text, ')');
    return after != NULL && sscanf(after + 1, " %c %d %d", state, ppid, pgrp) == 3;
}

bool ddp_proc_stopped(pid_t pid)
{
    char name[16], state;
    int ppid, pgrp;
    snprintf(name, sizeof name, "%d", (int)pid);
    return read_stat(name, &state, &ppid, &pgrp) && state == 'T';
}

pid_t ddp_proc_parent(pid_t pid)
{
    char name[16], state;
    int ppid, pgrp;
    snprintf(name, sizeof name, "%d", (int)pid);
    return read_stat(name, &state, &ppid, &pgrp) ? (pid_t)ppid : 0;
}

int ddp_proc_groups_alive(const pid_t *pgids, size_t n, bool *alive)
{
    DIR *proc = opendir("/proc");
    struct dirent *entry;
    memset(alive, 0, n * sizeof *alive);
    if (proc == NULL)
        return -errno;
    while ((entry = readdir(proc)) != NULL) {
        char state;
        int ppid, pgrp;
        if (entry->d_name[0] < '0' || entry->d_name[0] > '9' ||
            !read_stat(entry->d_name, &state, &ppid, &pgrp))
            continue;
        if (state == 'Z' || state == 'X' || state == 'x')
            continue;
        for (size_t i = 0; i < n; i++)
            alive[i] = alive[i] || pgids[i] == pgrp;
    }
    closedir(proc);
    return 0;
}

/* argv[0] in its own process group, stdin and (unless `with_stdout`) stdout /dev/null,
 * stderr (and stdout) into the pipe `fds` (its write end closed here). Returns the pid or
 * -errno. */
static pid_t spawn_bounded(char *const argv[], bool with_stdout, int fds[2])
{
    /* fork, then only async-signal-safe calls until exec (this may be a thread's). */
    pid_t pid = fork();
    if (pid == 0) {
        sigset_t none;
        sigemptyset(&none);
        for (int sig = 1; sig < NSIG; sig++)
            if (sig != SIGKILL && sig != SIGSTOP)
                signal(sig, SIG_DFL);
        sigprocmask(SIG_SETMASK, &none, NULL);
        setpgid(0, 0);
        int null = open("/dev/null", O_RDWR);
        if (null < 0 || dup2(null, 0) < 0 || dup2(with_stdout ? fds[1] : null, 1) < 0 ||
            dup2(fds[1], 2) < 0)
            _exit(126);
        close_inherited(3);
        execve(argv[0], argv, environ);
        _exit(127);
    }
    int err = errno;
    close(fds[1]);
    return pid < 0 ? -err : pid;
}

/* Reads `fd` until its end or `deadline`, keeping the last bytes in tail[*kept]; false when
 * the deadline came first. */
static bool read_tail(int fd, double deadline, char *tail, size_t cap, size_t *kept)
{
    for (;;) {
        double left = deadline - ddp_clock_mono();
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int ready = left > 0 ? poll(&pfd, 1, (int)(left * 1000) + 1) : 0;
        if (ready <= 0) { /* the deadline, or a signal (EINTR): look again */
            if (ddp_clock_mono() >= deadline)
                return false;
            continue;
        }
        char chunk[1024];
        ssize_t r = read(fd, chunk, sizeof chunk);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return true;
        if (*kept + (size_t)r > cap) { /* a chunk is smaller than the tail */
            size_t drop = *kept + (size_t)r - cap;
            memmove(tail, tail + drop, *kept - drop);
            *kept -= drop;
        }
        memcpy(tail + *kept, chunk, (size_t)r);
        *kept += (size_t)r;
    }
}

int ddp_proc_run_bounded(char *const argv[], bool with_stdout, double timeout, char *tail,
                         size_t cap, size_t *kept, int *status)
{
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0)
        return -errno;
    pid_t pid = spawn_bounded(argv, with_stdout, fds);
    if (pid < 0) {
        close(fds[0]);
        return (int)pid;
    }
    /* The group is made here too: a deadline that comes before the child has run its own
     * setpgid must still find the group to kill (else the wait below is the command's). */
    setpgid(pid, pid);
    double deadline = ddp_clock_mono() + timeout;
    bool timed_out = !read_tail(fds[0], deadline, tail, cap, kept);
    close(fds[0]);
    /* Its output closed: it has ended or is about to; what is left of the time bounds it. */
    while (!timed_out && waitpid(pid, status, WNOHANG) == 0) {
        if (ddp_clock_mono() >= deadline) {
            timed_out = true;
            break;
        }
        struct timespec tick = {0, 10 * 1000 * 1000};
        nanosleep(&tick, NULL);
    }
    if (timed_out) {
        kill(-pid, SIGKILL);
        while (waitpid(pid, status, 0) < 0 && errno == EINTR)
            ;
        return 1;
    }
    return 0;
}

void ddp_proc_last_line(const char *text, size_t len, char *out, size_t cap)
{
    while (len > 0 && (text[len - 1] == '\n' || text[len - 1] == '\r' || text[len - 1] == ' '))
        len--;
    size_t start = len;
    while (start > 0 && text[start - 1] != '\n')
        start--;
    snprintf(out, cap, "%.*s", (int)(len - start), text + start);
}
