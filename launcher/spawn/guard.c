/* The orphan guard process and its pipe protocol (see guard.h).
 *
 * The protocol is a stream of native int32 records: +pgid watch (written by the group's
 * first process, spawn.c), -pgid forget, 0 goodbye, 1 "are you there" (never a worker's
 * group), DIR_RECORD, a length and that many bytes: the log directory to remove if it is
 * empty, CKPT_RECORD, the same: the checkpoint directory to remove with what it holds,
 * and PERSIST_RECORD: --checkpoint-dir, where the launcher's own temporaries are removed. Each
 * record is one write of at most PIPE_BUF bytes, so it is atomic on the pipe, whoever writes it. */
#include "spawn/guard.h"

#include "ckpt_file.h"
#include "io.h"
#include "output/logs.h"
#include "host/proc.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* Closes every descriptor above `keep` and puts /dev/null on the standard ones, so
 * the guard holds no console or pipe of the launcher open (which would delay EOF for
 * whoever reads the launcher's output). `keep` is DDP_GUARD_FD, above 0, 1 and 2. */
static void close_others(int keep)
{
    if (close_range((unsigned)keep + 1, ~0U, 0) != 0) {
        long max = sysconf(_SC_OPEN_MAX);
        for (int fd = keep + 1; fd < (max > 0 && max < 65536 ? max : 65536); fd++)
            close(fd);
    }
    int null = open("/dev/null", O_RDWR);
    for (int fd = 0; fd < keep; fd++) {
        if (fd != null)
            dup2(null, fd);
    }
    if (null > keep)
        close(null);
}

/* Never a -pgid: pids stay below 2^22. Its path is shorter than DIR_MAX, so that the
 * whole record fits one atomic write. */
#define DIR_RECORD     INT32_MIN
#define CKPT_RECORD    (INT32_MIN + 1)
#define PERSIST_RECORD (INT32_MIN + 2)
#define DIR_MAX        (PIPE_BUF - 2 * sizeof(int32_t))

static bool read_exact(int fd, void *out, size_t len)
{
    size_t got = 0;
    while (got < len) {
        ssize_t r = read(fd, (char *)out + got, len - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return false;
        got += (size_t)r;
    }
    return true;
}

/* A DIR_RECORD's, CKPT_RECORD's or PERSIST_RECORD's path, into dir (PIPE_BUF bytes); an
 * empty one (not a DIR_RECORD's) forgets the last. */
static bool read_dir(int fd, char *dir)
{
    int32_t len;
    if (!read_exact(fd, &len, sizeof len) || len < 0 || (size_t)len >= DIR_MAX ||
        !read_exact(fd, dir, (size_t)len))
        return false;
    dir[len] = '\0';
    return true;
}

int ddp_guard_main(int fd)
{
    static const int ignored[] = {SIGHUP,  SIGINT,  SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2,
                                  SIGPIPE, SIGTSTP, SIGTTIN, SIGTTOU, SIGALRM};
    pid_t *groups = NULL;
    size_t n = 0, cap = 0;
    static char dir[PIPE_BUF], ckpt[PIPE_BUF], persist[PIPE_BUF];
    pid_t launcher = getppid(); /* whose temporaries in --checkpoint-dir are removed */
    sigset_t none;
    for (size_t i = 0; i < sizeof ignored / sizeof ignored[0]; i++)
        signal(ignored[i], SIG_IGN);
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    setsid(); /* out of the launcher's group: a kill of that group spares the guard */
    prctl(PR_SET_NAME, "ddp-guard");
    close_others(fd);
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISFIFO(st.st_mode))
        return 2; /* not started by ddp-launch */
    bool goodbye = false;
    for (;;) {
        int32_t rec;
        if (!read_exact(fd, &rec, sizeof rec))
            break; /* EOF or error: the launcher is gone */
        if (rec == 0) {
            goodbye = true;
            break;
        }
        if (rec == DIR_RECORD || rec == CKPT_RECORD || rec == PERSIST_RECORD) {
            if (!read_dir(fd, rec == DIR_RECORD ? dir : rec == CKPT_RECORD ? ckpt : persist))
                break;
            continue;
        }
        if (rec == 1 || rec == -1)
            continue; /* never a worker's group; kill(-1) would reach every process */
        if (rec > 0) {
            if (n == cap) {
                size_t next = cap ? cap * 2 : 64;
                pid_t *grown = realloc(groups, next * sizeof *groups);
                if (grown == NULL)
                    continue;
                groups = grown;
                cap = next;
            }
            groups[n++] = rec;
        } else {
            for (size_t i = 0; i < n; i++) {
                if (groups[i] == -rec) {
                    groups[i] = groups[--n];
                    break;
                }
            }
        }
    }
    for (size_t i = 0; i < n && !goodbye; i++)
        kill(-groups[i], SIGKILL);
    if (!goodbye && dir[0] != '\0')
        ddp_logs_remove_if_empty(dir, false);
    /* After the SIGKILLs: a worker being killed may still finish a file there. */
    if (!goodbye && ckpt[0] != '\0')
        (void)ddp_ckpt_remove_dir(ckpt);
    if (!goodbye && persist[0] != '\0' && launcher > 1)
        (void)ddp_ckpt_remove_stale(persist, launcher, NULL);
    free(groups);
    return 0;
}

/* The guard's own program: this binary (`self`) again, named ddp-guard, so that a pkill
 * aimed at the job's command line (pkill -9 -f train.py) does not take the guard with it. */
__attribute__((noreturn)) static void guard_exec(const char *self, int fd)
{
    char *const argv[] = {(char *)DDP_GUARD_NAME, (char *)DDP_GUARD_ARG, NULL};
    if (fd != DDP_GUARD_FD) {
        dup2(fd, DDP_GUARD_FD); /* dup2 clears close-on-exec on the copy */
        close(fd);
    } else {
        fcntl(fd, F_SETFD, 0);
    }
    if (self != NULL)
        execv(self, argv);
    /* The binary is gone (or unknown): guard from this process image instead. */
    _exit(ddp_guard_main(DDP_GUARD_FD));
}

int ddp_guard_start(ddp_guard_t *guard)
{
    int fds[2];
    char self[PATH_MAX];
    guard->pid = 0;
    guard->fd = -1;
    /* The path of this binary, read before the fork: under a tool like valgrind the
     * file /proc/self/exe is the tool, while readlink answers with our program. */
    if (ddp_proc_self(self, sizeof self) != 0)
        self[0] = '\0';
    if (pipe2(fds, O_CLOEXEC) != 0)
        return -errno;
    pid_t pid = fork();
    if (pid < 0) {
        int err = -errno;
        close(fds[0]);
        close(fds[1]);
        return err;
    }
    if (pid == 0)
        guard_exec(self[0] != '\0' ? self : NULL, fds[0]);
    close(fds[0]);
    guard->pid = pid;
    guard->fd = fds[1];
    return 0;
}

/* One record, in one write (at most PIPE_BUF bytes: atomic). */
static int send_bytes(ddp_guard_t *guard, const void *rec, size_t len)
{
    return guard->fd < 0 ? -EPIPE : ddp_write_all(guard->fd, rec, len);
}

static int send_record(ddp_guard_t *guard, int32_t rec)
{
    return send_bytes(guard, &rec, sizeof rec);
}

int ddp_guard_check(ddp_guard_t *guard)
{
    return send_record(guard, 1);
}

/* A directory's record (DIR_RECORD, CKPT_RECORD, PERSIST_RECORD). */
static int send_dir(ddp_guard_t *guard, int32_t kind, const char *dir)
{
    size_t len = strlen(dir);
    char rec[PIPE_BUF];
    int32_t head[2] = {kind, (int32_t)len};
    if ((len == 0 && kind == DIR_RECORD) || len >= DIR_MAX)
        return -ENAMETOOLONG;
    memcpy(rec, head, sizeof head);
    memcpy(rec + sizeof head, dir, len);
    return send_bytes(guard, rec, sizeof head + len);
}

int ddp_guard_log_dir(ddp_guard_t *guard, const char *dir)
{
    return send_dir(guard, DIR_RECORD, dir);
}

int ddp_guard_checkpoint_dir(ddp_guard_t *guard, const char *dir)
{
    return send_dir(guard, CKPT_RECORD, dir);
}

int ddp_guard_persist_dir(ddp_guard_t *guard, const char *dir)
{
    return send_dir(guard, PERSIST_RECORD, dir);
}

int ddp_guard_forget(ddp_guard_t *guard, pid_t pgid)
{
    return send_record(guard, -(int32_t)pgid);
}

void ddp_guard_stop(ddp_guard_t *guard)
{
    if (guard->fd >= 0) {
        (void)send_record(guard, 0);
        close(guard->fd);
        guard->fd = -1;
    }
    if (guard->pid > 0) {
        while (waitpid(guard->pid, NULL, 0) < 0 && errno == EINTR)
            ;
        guard->pid = 0;
    }
}
