/* Node health checks (see health.h): the checker, the process that runs them, and the
 * launcher's side, which starts it and waits for its verdict.
 *
 * The checker and the launcher speak over a socketpair of datagrams (SOCK_SEQPACKET): the
 * checker sends a record as each check begins (what it checks, so that a check past its
 * time is named), the command's process group, then the verdict; the launcher sends one
 * byte to end it early, and its end of the socket closing (the launcher gone, even
 * SIGKILLed) does the same. The checker never outlives what it started: when the command
 * exits, or is to end, its group and whatever came to the checker as a subreaper are
 * SIGKILLed and reaped, for at most LEFTOVER_S (a process stuck in the kernel is left). */
#include "host/health.h"

#include "host/devices.h"
#include "error.h"
#include "io.h"
#include "host/nvml.h"
#include "host/proc.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <uv.h>

extern char **environ;

#define STDERR_KEEP 4096 /* the command's last stderr bytes kept for its reason */
#define RECORD_MAX  8192 /* a record's bytes: its kind, then text */
#define CTL_FD      3    /* the checker's end of the socket */
#define GUARD_FD    4    /* the orphan guard's pipe in the checker, where there is one */
#define LEFTOVER_S  1.0  /* the checker's wait for what it killed to be gone */
#define END_GRACE_S 1.5  /* the launcher's for the checker to end what the command left */
#define REAP_S      1.0  /* the launcher's for the checker's own end */

/* The records' kinds: checker to launcher, then the launcher's one. */
enum {
    REC_PATH = 'p',    /* --health-check-path: this path (text) is read now */
    REC_GPUS = 'g',    /* the GPUs are counted now */
    REC_NVML = 'n',    /* NVML is asked now */
    REC_COMMAND = 'c', /* --health-check runs now, in process group (text) */
    REC_PASS = '+',    /* healthy: what was checked (text) */
    REC_FAIL = '-',    /* unhealthy: why (text) */
    REC_END = 'e',     /* launcher to checker: end now */
};

bool ddp_health_checks_apply(const ddp_health_spec_t *spec)
{
    return spec->command != NULL || spec->paths != NULL || spec->gpus >= 0;
}

/* The checker's side. */

typedef struct {
    int ctl;      /* CTL_FD */
    int guard;    /* GUARD_FD, or -1 */
    int children; /* a signalfd of SIGCHLD (blocked) */
} checker_t;

static void send_record(const checker_t *k, char kind, const char *text)
{
    char record[RECORD_MAX];
    size_t len = strlen(text) < sizeof record - 1 ? strlen(text) : sizeof record - 1;
    record[0] = kind;
    memcpy(record + 1, text, len);
    while (send(k->ctl, record, len + 1, MSG_NOSIGNAL) < 0 && errno == EINTR)
        ;
}

/* Whether the launcher wants the checks to end: a byte from it, or its end closed. */
static bool told_to_end(const checker_t *k)
{
    struct pollfd pfd = {.fd = k->ctl, .events = POLLIN};
    return poll(&pfd, 1, 0) > 0;
}

/* Whether `path` can be read: a directory listed (its first entry), a regular file's
 * first byte read, anything else opened. 0 or an errno value. */
static int read_path(const char *path)
{
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY), err = 0;
    struct stat st;
    if (fd < 0)
        return errno;
    if (fstat(fd, &st) != 0) {
        err = errno;
    } else if (S_ISDIR(st.st_mode)) {
        DIR *dir = fdopendir(fd);
        if (dir == NULL)
            err = errno;
        errno = 0;
        if (dir != NULL && readdir(dir) == NULL && errno != 0)
            err = errno;
        if (dir != NULL) {
            closedir(dir);
            fd = -1;
        }
    } else if (S_ISREG(st.st_mode)) {
        char c;
        if (read(fd, &c, 1) < 0)
            err = errno;
    }
    if (fd >= 0)
        close(fd);
    return err;
}

/* --health-check-path: every path of the comma-separated list can be read (empty items
 * are none); `passed` gets "paths A, B readable; ". 0, or 1 with `why`. */
static int check_paths(const checker_t *k, const char *paths, ddp_buf_t *passed, ddp_buf_t *why)
{
    ddp_buf_t names = DDP_BUF_INIT;
    char *copy = strdup(paths), *save = NULL;
    int rc = 0;
    if (copy == NULL) {
        ddp_buf_puts(why, "--health-check-path: out of memory");
        return 1;
    }
    for (char *p = strtok_r(copy, ",", &save); p != NULL && rc == 0;
         p = strtok_r(NULL, ",", &save)) {
        send_record(k, REC_PATH, p);
        int err = read_path(p);
        if (err != 0) {
            ddp_buf_printf(why, "--health-check-path: %s: %s", p, strerror(err));
            rc = 1;
        }
        ddp_buf_printf(&names, "%s%s", names.len > 0 ? ", " : "", p);
    }
    if (rc == 0)
        ddp_buf_printf(passed, "paths %s readable; ", ddp_buf_str(&names));
    ddp_buf_free(&names);
    free(copy);
    return rc;
}

/* With --nproc-per-node=gpu the node was sized by its GPUs: a GPU gone since (fallen off the
 * bus, the driver wedged) is a node that would start fewer workers than the job expects. */
static int check_gpu_count(int expected, ddp_buf_t *why, int *visible)
{
    int count = 0;
    ddp_buf_t reason = DDP_BUF_INIT;
    int err = ddp_devices_cuda_count(&count, &reason);
    int rc = 0;
    if (err != 0) {
        ddp_buf_printf(why, "GPUs: %s", ddp_buf_str(&reason));
        rc = 1;
    } else if (count < expected) {
        ddp_buf_printf(why, "GPUs: %d visible, %d expected (--nproc-per-node=gpu)", count,
                       expected);
        rc = 1;
    }
    *visible = count;
    ddp_buf_free(&reason);
    return rc;
}

enum { NVML_UNCORRECTED = 1, NVML_VOLATILE = 0 };

/* Through NVML, where the driver is: a page retirement pending, a failed row remap, or
 * uncorrectable ECC errors since the driver loaded, on any GPU. A missing driver or a
 * query a GPU does not support is no finding. `looked` gets the GPUs NVML answered for
 * (-1: no NVML). */
static int check_nvml(ddp_buf_t *why, int *looked)
{
    *looked = -1;
    ddp_nvml_t nvml;
    ddp_buf_t ignored = DDP_BUF_INIT;
    int opened = ddp_nvml_open(&nvml, &ignored);
    ddp_buf_free(&ignored);
    if (opened != 0)
        return 0;
    unsigned int n = 0;
    int rc = 0;
    if (nvml.count(&n) != DDP_NVML_SUCCESS)
        n = 0;
    *looked = 0;
    for (unsigned int i = 0; i < n && rc == 0; i++) {
        void *device;
        int state = 0;
        unsigned int corrected = 0, uncorrected = 0, remap_pending = 0, failed = 0;
        unsigned long long errors = 0;
        if (nvml.handle(i, &device) != DDP_NVML_SUCCESS)
            continue;
        ++*looked;
        if (nvml.pending != NULL && nvml.pending(device, &state) == DDP_NVML_SUCCESS &&
            state == DDP_NVML_FEATURE_ENABLED) {
            ddp_buf_printf(why, "GPU %u (NVML): a page retirement is pending (reset the GPU)", i);
            rc = 1;
        } else if (nvml.remap != NULL &&
                   nvml.remap(device, &corrected, &uncorrected, &remap_pending, &failed) ==
                       DDP_NVML_SUCCESS &&
                   failed != 0) {
            ddp_buf_printf(why, "GPU %u (NVML): a row remapping failed", i);
            rc = 1;
        } else if (nvml.ecc != NULL &&
                   nvml.ecc(device, NVML_UNCORRECTED, NVML_VOLATILE, &errors) == DDP_NVML_SUCCESS &&
                   errors > 0) {
            ddp_buf_printf(why,
                           "GPU %u (NVML): %llu uncorrectable ECC error(s) since the driver "
                           "loaded",
                           i, errors);
            rc = 1;
        }
    }
    ddp_nvml_close(&nvml);
    return rc;
}

/* The command's process, between fork and exec: its own process group (the guard told
 * before anything of it runs, as for a worker), dead with the checker, stdin and stdout
 * /dev/null, stderr the checker's pipe. */
__attribute__((noreturn)) static void command_exec(const checker_t *k, const char *command,
                                                   int stderr_fd, pid_t checker)
{
    char *argv[] = {"/bin/sh", "-c", (char *)command, NULL};
    sigset_t none;
    setpgid(0, 0);
    if (k->guard >= 0) {
        int32_t group = (int32_t)getpid();
        (void)!write(k->guard, &group, sizeof group);
    }
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != checker)
        _exit(128 + SIGKILL);
    signal(SIGPIPE, SIG_DFL); /* the launcher's own; others ignored when it started stay so */
    int null = open("/dev/null", O_RDWR);
    if (null < 0 || dup2(null, 0) < 0 || dup2(null, 1) < 0 || dup2(stderr_fd, 2) < 0)
        _exit(126);
    (void)syscall(SYS_close_range, 3U, ~0U, 0U);
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    execve(argv[0], argv, environ);
    _exit(127);
}

/* Appends what `fd` holds now to the tail (its last `cap` bytes); false at its end. */
static bool read_some(int fd, char *tail, size_t cap, size_t *kept)
{
    char chunk[1024];
    ssize_t r = read(fd, chunk, sizeof chunk);
    if (r < 0)
        return errno == EINTR || errno == EAGAIN;
    if (r == 0)
        return false;
    if (*kept + (size_t)r > cap) { /* a chunk is smaller than the tail */
        size_t drop = *kept + (size_t)r - cap;
        memmove(tail, tail + drop, *kept - drop);
        *kept -= drop;
    }
    memcpy(tail + *kept, chunk, (size_t)r);
    *kept += (size_t)r;
    return true;
}

/* Waits for the command (`pid`) to exit, reading its stderr meanwhile: 0 with *status,
 * or 1 when the launcher wants the checks to end first. The exit is the end: a process it
 * left holding the pipe is not waited for (what the pipe holds by then is read). */
static int wait_command(const checker_t *k, pid_t pid, int err_fd, char *tail, size_t cap,
                        size_t *kept, int *status)
{
    for (;;) {
        struct pollfd fds[3] = {{.fd = k->children, .events = POLLIN},
                                {.fd = k->ctl, .events = POLLIN},
                                {.fd = err_fd, .events = POLLIN}};
        if (waitpid(pid, status, WNOHANG) == pid)
            break;
        if (poll(fds, err_fd >= 0 ? 3 : 2, -1) < 0 && errno != EINTR)
            return 1;
        if (fds[1].revents != 0)
            return 1;
        if (fds[0].revents != 0) {
            struct signalfd_siginfo info;
            (void)!read(k->children, &info, sizeof info);
        }
        if (err_fd >= 0 && fds[2].revents != 0 && !read_some(err_fd, tail, cap, kept)) {
            close(err_fd);
            err_fd = -1;
        }
    }
    if (err_fd >= 0) {
        fcntl(err_fd, F_SETFL, O_NONBLOCK);
        for (;;) {
            errno = 0;
            if (!read_some(err_fd, tail, cap, kept) || errno == EAGAIN)
                break;
        }
        close(err_fd);
    }
    return 0;
}

/* SIGKILL for every child this checker has: the command's jobs, adopted once their parent
 * ended (the checker is a child subreaper), and their groups. How many there were. */
static int kill_children(void)
{
    char path[64], *text = NULL;
    size_t len = 0;
    int n = 0;
    snprintf(path, sizeof path, "/proc/self/task/%d/children", (int)getpid());
    if (ddp_read_file(path, 1 << 20, &text, &len) != 0)
        return 0;
    for (char *p = text, *end; *p != '\0'; p = end) {
        long pid = strtol(p, &end, 10);
        if (end == p)
            break;
        if (getpgid((pid_t)pid) == (pid_t)pid)
            kill((pid_t)-pid, SIGKILL);
        kill((pid_t)pid, SIGKILL);
        n++;
    }
    free(text);
    return n;
}

/* The command's group, and everything else the checker has come to hold, SIGKILLed and
 * reaped; then the guard forgets the group. At most LEFTOVER_S: one stuck in the kernel is
 * left (to the launcher, a subreaper too, or to init). */
static void end_leftovers(const checker_t *k, pid_t group)
{
    double deadline = ddp_clock_mono() + LEFTOVER_S;
    kill(-group, SIGKILL);
    for (;;) {
        (void)kill_children();
        while (waitpid(-1, NULL, WNOHANG) > 0)
            ;
        if (waitpid(-1, NULL, WNOHANG) < 0 && errno == ECHILD)
            break;
        double left = deadline - ddp_clock_mono();
        struct pollfd pfd = {.fd = k->children, .events = POLLIN};
        struct signalfd_siginfo info;
        if (left <= 0)
            break;
        if (poll(&pfd, 1, (int)(left * 1000) + 1) > 0)
            (void)!read(k->children, &info, sizeof info);
    }
    if (k->guard >= 0 && kill(-group, 0) != 0 && errno == ESRCH) {
        int32_t forget = -(int32_t)group;
        (void)!write(k->guard, &forget, sizeof forget);
    }
}

/* --health-check=CMD with /bin/sh: exit 0 is healthy; otherwise its last line of stderr
 * is the reason. 0, 1 with `why`, or -1 when the launcher wants the checks to end (the
 * command and what it left are ended). */
static int check_command(const checker_t *k, const char *command, ddp_buf_t *why)
{
    char tail[STDERR_KEEP], text[32];
    size_t kept = 0;
    int status = 0, fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) {
        ddp_buf_printf(why, "--health-check: unable to make a pipe: %s", strerror(errno));
        return 1;
    }
    pid_t checker = getpid(), pid = fork();
    if (pid == 0)
        command_exec(k, command, fds[1], checker);
    close(fds[1]);
    if (pid < 0) {
        ddp_buf_printf(why, "--health-check: unable to run /bin/sh: %s", strerror(errno));
        close(fds[0]);
        return 1;
    }
    /* The group is made here too: whoever runs first, it is there to be killed. */
    setpgid(pid, pid);
    snprintf(text, sizeof text, "%d", (int)pid);
    send_record(k, REC_COMMAND, text);
    bool ended = wait_command(k, pid, fds[0], tail, sizeof tail, &kept, &status) != 0;
    if (ended)
        kill(-pid, SIGKILL);
    end_leftovers(k, pid);
    if (ended)
        return -1;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return 0;
    char line[512];
    ddp_proc_last_line(tail, kept, line, sizeof line);
    if (WIFEXITED(status))
        ddp_buf_printf(why, "--health-check: '%s' exited with %d%s%s", command, WEXITSTATUS(status),
                       line[0] ? ": " : "", line);
    else
        ddp_buf_printf(why, "--health-check: '%s' was killed by signal %d%s%s", command,
                       WTERMSIG(status), line[0] ? ": " : "", line);
    return 1;
}

/* Every check that argv names, in order, each begun with its record, then the verdict;
 * -1 where the launcher wants the checks to end (no verdict then). */
static int run_checks(const checker_t *k, char **argv, ddp_buf_t *passed, ddp_buf_t *why)
{
    const char *paths = argv[1], *command = argv[3];
    int gpus = atoi(argv[2]), rc = 0, visible = 0, looked = -1;
    if (*paths != '\0')
        rc = check_paths(k, paths, passed, why);
    if (rc == 0 && gpus > 0 && !told_to_end(k)) {
        send_record(k, REC_GPUS, "");
        if ((rc = check_gpu_count(gpus, why, &visible)) == 0)
            ddp_buf_printf(passed, "%d GPU(s) visible; ", visible);
    }
    if (rc == 0 && !told_to_end(k)) {
        send_record(k, REC_NVML, "");
        if ((rc = check_nvml(why, &looked)) == 0 && looked < 0)
            ddp_buf_puts(passed, "no NVML; ");
        else if (rc == 0)
            ddp_buf_printf(passed,
                           "NVML: %d GPU(s) without a pending page retirement, failed "
                           "row remap or uncorrectable ECC error; ",
                           looked);
    }
    if (rc == 0 && *command != '\0' && !told_to_end(k) &&
        (rc = check_command(k, command, why)) == 0)
        ddp_buf_puts(passed, "--health-check exited 0; ");
    return rc == 0 && told_to_end(k) ? -1 : rc;
}

int ddp_health_main(int argc, char **argv)
{
    struct stat st;
    sigset_t chld;
    checker_t k = {.ctl = CTL_FD, .guard = fcntl(GUARD_FD, F_GETFD) >= 0 ? GUARD_FD : -1};
    if (argc != DDP_HEALTH_ARGC || fstat(CTL_FD, &st) != 0 || !S_ISSOCK(st.st_mode))
        return 2; /* not started by ddp-launch */
    prctl(PR_SET_NAME, DDP_HEALTH_NAME);
    /* What the command leaves comes here when its parent ends, not to the launcher. */
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    sigprocmask(SIG_BLOCK, &chld, NULL);
    if ((k.children = signalfd(-1, &chld, SFD_CLOEXEC)) < 0)
        return 1;
    ddp_buf_t passed = DDP_BUF_INIT, why = DDP_BUF_INIT;
    int rc = run_checks(&k, argv, &passed, &why);
    if (rc == 0 && passed.len >= 2) /* without the last "; " */
        passed.data[passed.len -= 2] = '\0';
    if (rc >= 0)
        send_record(&k, rc == 0 ? REC_PASS : REC_FAIL,
                    rc == 0 ? ddp_buf_str(&passed) : ddp_buf_str(&why));
    ddp_buf_free(&passed);
    ddp_buf_free(&why);
    return 0;
}

/* The launcher's side. */

typedef struct {
    pid_t pid;             /* the checker */
    int ctl;               /* our end of the socket */
    char phase;            /* the record of the check that runs (0: none begun yet) */
    char what[RECORD_MAX]; /* its text: the path read, or the command's group */
    bool verdict;          /* it has given its verdict (and ends on its own) */
} waiting_t;

/* In the child between fork and exec (async-signal-safe calls only: the launcher has
 * threads): its own process group, out of the reach of the terminal's Ctrl-C, which is the
 * launcher's to act on; the socket and the guard's pipe at their numbers, nothing else
 * open; the launcher's handlers gone before any signal is let in. */
__attribute__((noreturn)) static void checker_exec(const char *self, char *const argv[], int ctl,
                                                   int guard)
{
    static const char failed[] = "-unable to start the health checks' helper (" DDP_HEALTH_NAME
                                 "): this binary could not be executed again";
    sigset_t none;
    setpgid(0, 0);
    /* Above the numbers they go to first: one may be the other's target. */
    int ctl_high = fcntl(ctl, F_DUPFD, 10),
        guard_high = guard >= 0 ? fcntl(guard, F_DUPFD, 10) : -1;
    int null = open("/dev/null", O_RDWR);
    if (ctl_high < 0 || null < 0 || dup2(null, 0) < 0 || dup2(null, 1) < 0 || dup2(null, 2) < 0 ||
        dup2(ctl_high, CTL_FD) < 0)
        _exit(127);
    if (guard_high < 0 || dup2(guard_high, GUARD_FD) < 0)
        close(GUARD_FD);
    (void)syscall(SYS_close_range, (unsigned)GUARD_FD + 1, ~0U, 0U);
    for (int sig = 1; sig < NSIG; sig++) {
        struct sigaction sa;
        if (sig != SIGKILL && sig != SIGSTOP && sigaction(sig, NULL, &sa) == 0 &&
            sa.sa_handler != SIG_DFL && sa.sa_handler != SIG_IGN)
            signal(sig, SIG_DFL);
    }
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    if (self[0] != '\0')
        execve(self, argv, environ);
    execve("/proc/self/exe", argv, environ); /* (a binary replaced since it started) */
    (void)!send(CTL_FD, failed, sizeof failed - 1, MSG_NOSIGNAL);
    _exit(127);
}

/* Starts the checker for `spec`'s checks. 0 or -errno. */
static int start_checker(const ddp_health_spec_t *spec, int guard_fd, waiting_t *w)
{
    char self[PATH_MAX], gpus[16];
    int sv[2];
    if (ddp_proc_self(self, sizeof self) != 0)
        self[0] = '\0';
    snprintf(gpus, sizeof gpus, "%d", spec->gpus > 0 ? spec->gpus : 0);
    char *argv[] = {DDP_HEALTH_NAME, (char *)(spec->paths ? spec->paths : ""), gpus,
                    (char *)(spec->command ? spec->command : ""), NULL};
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0)
        return -errno;
    sigset_t all, saved;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &saved);
    pid_t pid = fork();
    if (pid == 0)
        checker_exec(self, argv, sv[1], guard_fd);
    int err = pid < 0 ? -errno : 0;
    pthread_sigmask(SIG_SETMASK, &saved, NULL);
    close(sv[1]);
    if (err != 0) {
        close(sv[0]);
        return err;
    }
    setpgid(pid, pid); /* as the child does: the group is there whoever runs first */
    w->pid = pid;
    w->ctl = sv[0];
    w->phase = 0;
    w->what[0] = '\0';
    w->verdict = false;
    return 0;
}

/* What is said of a check past its time: the one that runs, named. */
static void say_late(const waiting_t *w, const ddp_health_spec_t *spec, ddp_buf_t *why)
{
    double t = spec->timeout;
    switch (w->phase) {
    case REC_PATH:
        ddp_buf_printf(why,
                       "--health-check-path: %s did not answer within %g s "
                       "(--health-check-timeout): a hung file system?",
                       w->what, t);
        break;
    case REC_GPUS:
        ddp_buf_printf(why,
                       "GPUs: the CUDA driver did not answer within %g s "
                       "(--health-check-timeout)",
                       t);
        break;
    case REC_NVML:
        ddp_buf_printf(why,
                       "GPU (NVML): the driver did not answer within %g s "
                       "(--health-check-timeout)",
                       t);
        break;
    case REC_COMMAND:
        ddp_buf_printf(why,
                       "--health-check: '%s' did not finish within %g s (--health-check-timeout)",
                       spec->command, t);
        break;
    default:
        ddp_buf_printf(why, "the health checks did not begin within %g s (--health-check-timeout)",
                       t);
        break;
    }
}

/* One record from the checker: a check begins (its deadline then starts), or the
 * verdict. -1 while the checks go on; else 0 or 1, with `why`. */
static int take_record(waiting_t *w, const ddp_health_spec_t *spec, double *deadline,
                       ddp_buf_t *why)
{
    char record[RECORD_MAX + 1];
    ssize_t n = recv(w->ctl, record, sizeof record - 1, 0);
    if (n < 0)
        return errno == EINTR || errno == EAGAIN ? -1 : 1;
    if (n == 0) {
        ddp_buf_puts(why, "the health checks' helper ended without a verdict");
        return 1;
    }
    record[n] = '\0';
    switch (record[0]) {
    case REC_PASS:
    case REC_FAIL:
        w->verdict = true;
        ddp_buf_puts(why, record + 1);
        return record[0] == REC_PASS ? 0 : 1;
    case REC_PATH:
    case REC_GPUS:
    case REC_NVML:
    case REC_COMMAND:
        w->phase = record[0];
        snprintf(w->what, sizeof w->what, "%s", record + 1);
        *deadline = ddp_clock_mono() + spec->timeout;
        return -1;
    default:
        ddp_buf_printf(why, "the health checks' helper sent a record of unknown kind %d",
                       record[0]);
        return 1;
    }
}

/* Reaps the checker where it ends within `seconds`; whether it did. */
static bool reap_within(pid_t pid, double seconds)
{
    int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    for (double deadline = ddp_clock_mono() + seconds;;) {
        if (waitpid(pid, NULL, WNOHANG) == pid)
            break;
        double left = deadline - ddp_clock_mono();
        if (left <= 0) {
            if (pidfd >= 0)
                close(pidfd);
            return false;
        }
        struct pollfd pfd = {.fd = pidfd, .events = POLLIN};
        if (pidfd < 0) /* (a kernel before 5.3) */
            pfd.fd = -1;
        (void)poll(&pfd, 1, pidfd >= 0 ? (int)(left * 1000) + 1 : 10);
    }
    if (pidfd >= 0)
        close(pidfd);
    return true;
}

/* Takes the records the checker sent since the wait ended (the command may have begun
 * meanwhile); true when its end of the socket is closed. */
static bool catch_up(waiting_t *w)
{
    char record[RECORD_MAX + 1];
    ssize_t n;
    while ((n = recv(w->ctl, record, sizeof record - 1, MSG_DONTWAIT)) > 0) {
        record[n] = '\0';
        if (record[0] == REC_PASS || record[0] == REC_FAIL) {
            w->verdict = true;
        } else {
            w->phase = record[0];
            snprintf(w->what, sizeof w->what, "%s", record + 1);
        }
    }
    return n == 0;
}

/* Tells a checker cut short in the command to end it and what it left: true once it has
 * (its end of the socket closed), within END_GRACE_S. */
static bool tell_to_end(waiting_t *w)
{
    char end = REC_END, drop[RECORD_MAX];
    struct pollfd pfd = {.fd = w->ctl, .events = POLLIN};
    (void)send(w->ctl, &end, 1, MSG_NOSIGNAL);
    for (double deadline = ddp_clock_mono() + END_GRACE_S;;) {
        double left = deadline - ddp_clock_mono();
        if (left <= 0)
            return false;
        if (poll(&pfd, 1, (int)(left * 1000) + 1) > 0 && recv(w->ctl, drop, sizeof drop, 0) <= 0)
            return true;
    }
}

/* The wait is over: a checker that gave its verdict, or ended the command when told, ends
 * on its own; any other (cut short before the command: it may be stuck in the kernel on a
 * hung mount) is SIGKILLed, with the command's group where it did not end it. One that
 * does not end even then is left, not waited for. */
static void end_checker(waiting_t *w, int guard_fd)
{
    bool closed = catch_up(w);
    pid_t group = w->phase == REC_COMMAND ? (pid_t)atoi(w->what) : 0;
    bool ends = w->verdict || closed || (group > 0 && tell_to_end(w));
    close(w->ctl);
    if (reap_within(w->pid, ends ? REAP_S : 0))
        return;
    kill(w->pid, SIGKILL);
    if (group > 0)
        kill(-group, SIGKILL);
    bool reaped = reap_within(w->pid, REAP_S);
    if (group > 0 && guard_fd >= 0 && reaped && kill(-group, 0) != 0) {
        int32_t forget = -(int32_t)group; /* (the checker's to do, had it ended itself) */
        (void)!write(guard_fd, &forget, sizeof forget);
    }
}

int ddp_health_check(const ddp_health_spec_t *spec, const ddp_health_ctx_t *ctx, ddp_buf_t *why)
{
    waiting_t w;
    int err = start_checker(spec, ctx->guard_fd, &w);
    if (err != 0) {
        ddp_buf_printf(why, "unable to start the health checks: %s", ddp_strerror(err));
        return 1;
    }
    double deadline = ddp_clock_mono() + spec->timeout;
    int rc = -1;
    while (rc == -1) {
        struct pollfd fds[2] = {{.fd = w.ctl, .events = POLLIN},
                                {.fd = ctx->cancel_fd, .events = POLLIN}};
        double left = deadline - ddp_clock_mono();
        int n = left > 0 ? poll(fds, ctx->cancel_fd >= 0 ? 2 : 1, (int)(left * 1000) + 1) : 0;
        if (n < 0 && errno == EINTR)
            continue;
        if (n > 0 && ctx->cancel_fd >= 0 && fds[1].revents != 0) {
            rc = -ECANCELED;
        } else if (n > 0) {
            rc = take_record(&w, spec, &deadline, why);
        } else if (ddp_clock_mono() >= deadline) {
            say_late(&w, spec, why);
            rc = 1;
        }
    }
    end_checker(&w, ctx->guard_fd);
    return rc;
}

/* The checks of a one-node job on libuv's thread pool. */

struct ddp_health_run_s {
    uv_work_t work;
    ddp_health_spec_t spec;
    ddp_health_ctx_t ctx; /* its cancel_fd: an eventfd of the run's own */
    void (*done)(void *ctx, int rc, const char *why);
    void *done_ctx;
    bool cancelled;
    int rc;
    ddp_buf_t why;
};

static void run_checks_on_pool(uv_work_t *work)
{
    ddp_health_run_t *run = work->data;
    run->rc = ddp_health_check(&run->spec, &run->ctx, &run->why);
}

static void after_checks(uv_work_t *work, int status)
{
    ddp_health_run_t *run = work->data;
    (void)status;
    if (!run->cancelled)
        run->done(run->done_ctx, run->rc == 0 ? 0 : 1, ddp_buf_str(&run->why));
    close(run->ctx.cancel_fd);
    ddp_buf_free(&run->why);
    free(run);
}

int ddp_health_start(uv_loop_t *loop, const ddp_health_spec_t *spec, int guard_fd,
                     void (*done)(void *ctx, int rc, const char *why), void *ctx,
                     ddp_health_run_t **out)
{
    ddp_health_run_t *run = calloc(1, sizeof *run);
    if (run == NULL)
        return -ENOMEM;
    run->spec = *spec;
    run->done = done;
    run->done_ctx = ctx;
    run->ctx.guard_fd = guard_fd;
    run->work.data = run;
    if ((run->ctx.cancel_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0) {
        int err = -errno;
        free(run);
        return err;
    }
    int err = uv_queue_work(loop, &run->work, run_checks_on_pool, after_checks);
    if (err != 0) {
        close(run->ctx.cancel_fd);
        free(run);
        return err;
    }
    *out = run;
    return 0;
}

void ddp_health_cancel(ddp_health_run_t *run)
{
    uint64_t one = 1;
    run->cancelled = true;
    if (uv_cancel((uv_req_t *)&run->work) == 0)
        return; /* not begun: after_checks frees it */
    while (write(run->ctx.cancel_fd, &one, sizeof one) < 0 && errno == EINTR)
        ;
}

struct ddp_gpu_memory_s {
    ddp_nvml_t nvml;
    void *devices[64];
    unsigned int n;
};

ddp_gpu_memory_t *ddp_gpu_memory_open(void)
{
    ddp_gpu_memory_t *m = calloc(1, sizeof *m);
    ddp_buf_t ignored = DDP_BUF_INIT;
    if (m == NULL)
        return NULL;
    int opened = ddp_nvml_open(&m->nvml, &ignored);
    ddp_buf_free(&ignored);
    unsigned int n = 0;
    if (opened != 0 || m->nvml.memory == NULL || m->nvml.count(&n) != DDP_NVML_SUCCESS)
        n = 0;
    for (unsigned int i = 0; i < n && m->n < 64; i++)
        if (m->nvml.handle(i, &m->devices[m->n]) == DDP_NVML_SUCCESS)
            m->n++;
    if (m->n == 0) {
        ddp_gpu_memory_close(m);
        return NULL;
    }
    return m;
}

/* What processes hold on `device`: _v2's `used`, without the driver's reservation, where
 * the driver has it; else the first version's, which counts the reservation. */
static int device_memory_used(ddp_nvml_t *nvml, void *device, unsigned long long *used)
{
    ddp_nvml_memory_v2_t v2 = {.version = DDP_NVML_MEMORY_V2};
    if (nvml->memory_v2 != NULL && nvml->memory_v2(device, &v2) == DDP_NVML_SUCCESS) {
        *used = v2.used;
        return 0;
    }
    ddp_nvml_memory_t v1;
    if (nvml->memory(device, &v1) != DDP_NVML_SUCCESS)
        return -EIO;
    *used = v1.used;
    return 0;
}

int ddp_gpu_memory_used(ddp_gpu_memory_t *m, unsigned long long *used, int *gpu)
{
    unsigned long long most = 0;
    int at = 0;
    for (unsigned int i = 0; i < m->n; i++) {
        unsigned long long held;
        if (device_memory_used(&m->nvml, m->devices[i], &held) != 0)
            return -EIO;
        if (held > most) {
            most = held;
            at = (int)i;
        }
    }
    *used = most;
    *gpu = at;
    return 0;
}

void ddp_gpu_memory_close(ddp_gpu_memory_t *m)
{
    if (m == NULL)
        return;
    ddp_nvml_close(&m->nvml);
    free(m);
}
