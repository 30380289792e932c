/* This machine's processes, as the launcher sees them (see proc.h): finding a program,
 * signalling a process group, what /proc says of a process, and a short helper run to its
 * end with a bound. */
#include "host/proc.h"

#include "buf.h"
#include "io.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/close_range.h>
#include <poll.h>
#include <signal.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
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

void ddp_proc_close_inherited(unsigned first)
{
    (void)syscall(SYS_close_range, first, ~0U, CLOSE_RANGE_CLOEXEC);
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
        ddp_proc_close_inherited(3);
        execve(argv[0], argv, environ);
        _exit(127);
    }
    int err = errno;
    close(fds[1]);
    return pid < 0 ? -err : pid;
}

/* Keeps `chunk` (n bytes) as the last bytes of tail[cap] (*kept). */
static void keep_tail(const char *chunk, size_t n, char *tail, size_t cap, size_t *kept)
{
    if (n > cap) {
        chunk += n - cap;
        n = cap;
    }
    if (*kept + n > cap) {
        size_t drop = *kept + n - cap;
        memmove(tail, tail + drop, *kept - drop);
        *kept -= drop;
    }
    memcpy(tail + *kept, chunk, n);
    *kept += n;
}

#define EXIT_LOOK_MS 20 /* how often a run whose output stays open looks for its exit */

/* Reads `fd` into tail[cap] (*kept, its last bytes) until child `pid` has exited (*status)
 * and what it wrote before is read, or until `deadline`: false when the deadline came
 * first. The end is the exit, not the pipe's: a job the command left in a session of its
 * own may hold the pipe open long after. */
static bool read_until_exit(int fd, pid_t pid, int *status, double deadline, char *tail, size_t cap,
                            size_t *kept)
{
    bool exited = false, open = true;
    for (;;) {
        double left = deadline - ddp_clock_mono();
        if (left <= 0)
            return exited; /* (a job it left that writes on holds no one past it) */
        int wait_ms = exited ? 0 : (int)(left * 1000) + 1;
        if (!exited && wait_ms > EXIT_LOOK_MS)
            wait_ms = EXIT_LOOK_MS;
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int ready = open ? poll(&pfd, 1, wait_ms) : 0;
        if (ready > 0) {
            char chunk[1024];
            ssize_t r = read(fd, chunk, sizeof chunk);
            if (r > 0)
                keep_tail(chunk, (size_t)r, tail, cap, kept);
            else if (r == 0 || errno != EINTR)
                open = false;
            continue;
        }
        if (exited)
            return true; /* exited, and nothing more to read now */
        if (ready < 0 && errno == EINTR)
            continue;
        if (!open) { /* nothing more to read: only its exit */
            struct timespec tick = {0, EXIT_LOOK_MS * 1000 * 1000};
            nanosleep(&tick, NULL);
        }
        pid_t r;
        while ((r = waitpid(pid, status, WNOHANG)) < 0 && errno == EINTR)
            ;
        exited = r == pid;
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
    bool timed_out = !read_until_exit(fds[0], pid, status, deadline, tail, cap, kept);
    close(fds[0]);
    if (timed_out) {
        kill(-pid, SIGKILL);
        while (waitpid(pid, status, 0) < 0 && errno == EINTR)
            ;
        return 1;
    }
    return 0;
}

/* The child of ddp_proc_read_file_bounded: the read's return as an int, then what it
 * read, into `fd`; never returns. It allocates nothing (buf[limit + 1] is the parent's):
 * forked from a thread, another may have held the allocator's lock. */
static void read_file_child(const char *path, char *buf, size_t limit, int fd)
{
    size_t len = 0;
    int32_t err = ddp_read_file_to(path, buf, limit, &len);
    struct iovec iov[2] = {{&err, sizeof err}, {buf, err == 0 ? len : 0}};
    _exit(ddp_writev_all(fd, iov, 2) == 0 ? 0 : 1);
}

/* Waits for `fd` or `cancel_fd` (-1: none) until `deadline`: 1 when `fd` is readable, 0
 * past the deadline, -ECANCELED. */
static int wait_readable(int fd, int cancel_fd, double deadline)
{
    for (;;) {
        double left = deadline - ddp_clock_mono();
        if (left <= 0)
            return 0;
        struct pollfd fds[2] = {{.fd = fd, .events = POLLIN}, {.fd = cancel_fd, .events = POLLIN}};
        int n = poll(fds, cancel_fd >= 0 ? 2 : 1, (int)(left * 1000) + 1);
        if (n < 0 && errno != EINTR)
            return 0;
        if (n > 0 && cancel_fd >= 0 && fds[1].revents != 0)
            return -ECANCELED;
        if (n > 0 && fds[0].revents != 0)
            return 1;
    }
}

int ddp_proc_read_file_bounded(const char *path, size_t limit, double timeout, int cancel_fd,
                               char **out, size_t *len)
{
    int fds[2];
    char *scratch = malloc(limit + 1); /* the child's, before the fork */
    if (scratch == NULL)
        return -ENOMEM;
    if (pipe2(fds, O_CLOEXEC) != 0) {
        int failed = -errno;
        free(scratch);
        return failed;
    }
    sigset_t all, saved;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &saved);
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        read_file_child(path, scratch, limit, fds[1]);
    }
    int err = pid < 0 ? -errno : 0;
    pthread_sigmask(SIG_SETMASK, &saved, NULL);
    free(scratch);
    close(fds[1]);
    ddp_buf_t got = DDP_BUF_INIT;
    double deadline = ddp_clock_mono() + timeout;
    int rc = 0;
    while (err == 0 && (rc = wait_readable(fds[0], cancel_fd, deadline)) == 1) {
        char chunk[4096];
        ssize_t r = read(fds[0], chunk, sizeof chunk);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0 || got.len + (size_t)r > limit + sizeof(int32_t))
            break;
        err = ddp_buf_append(&got, chunk, (size_t)r);
    }
    close(fds[0]);
    if (pid > 0) {
        if (rc != 1)
            kill(pid, SIGKILL); /* a read held by the file system ends with it */
        /* Reaped within the bound; a child the kernel holds longer is left to the
         * subreaper. */
        for (double until = ddp_clock_mono() + 1.0; waitpid(pid, NULL, WNOHANG) == 0;) {
            if (ddp_clock_mono() >= until)
                break;
            nanosleep(&(struct timespec){.tv_nsec = 5 * 1000 * 1000}, NULL);
        }
    }
    if (err == 0 && rc != 1)
        err = rc == 0 ? 1 : rc;
    int32_t said = -EIO;
    if (err == 0 && got.len >= sizeof said)
        memcpy(&said, got.data, sizeof said);
    if (err == 0 && (err = said) == 0) {
        size_t n = got.len - sizeof said;
        char *text = malloc(n + 1);
        if (text == NULL) {
            err = -ENOMEM;
        } else {
            memcpy(text, got.data + sizeof said, n);
            text[n] = '\0';
            *out = text;
            *len = n;
        }
    }
    ddp_buf_free(&got);
    return err;
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
