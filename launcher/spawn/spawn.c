/* fork/exec of workers (see spawn.h). */
#include "spawn/spawn.h"

#include "host/proc.h"
#include "io.h"

#include <linux/mempolicy.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

extern char **environ;

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
    ddp_proc_close_inherited(spec->has_fd3 ? 4 : 3);
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

int ddp_spawn(const ddp_spawn_t *spec, pid_t *pid)
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
