/* Node health checks (see health.h). */
#include "health.h"

#include "devices.h"
#include "io.h"
#include "nvml.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define STDERR_KEEP 4096 /* the command's last stderr bytes kept for its reason */

bool ddp_health_checks_apply(const ddp_launch_config_t *cfg)
{
    return cfg->health_command != NULL || cfg->health_paths != NULL ||
           cfg->nproc_kind == DDP_NPROC_GPU;
}

/* --health-check-path: each of the comma-separated paths can be read (a directory listed). */
static int check_paths(const char *paths, ddp_buf_t *why)
{
    char *copy = strdup(paths), *save = NULL;
    int rc = copy == NULL ? -ENOMEM : 0;
    for (char *p = copy ? strtok_r(copy, ",", &save) : NULL; p != NULL && rc == 0;
         p = strtok_r(NULL, ",", &save)) {
        int fd = open(p, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
        if (fd < 0) {
            ddp_buf_printf(why, "--health-check-path: %s: %s", p, strerror(errno));
            rc = 1;
        } else {
            close(fd);
        }
    }
    free(copy);
    return rc;
}

/* With --nproc-per-node=gpu the node was sized by its GPUs: a GPU gone since (fallen off the
 * bus, the driver wedged) is a node that would start fewer workers than the job expects. */
static int check_gpu_count(const ddp_launch_config_t *cfg, ddp_buf_t *why)
{
    int count = 0;
    ddp_buf_t reason = DDP_BUF_INIT;
    int err = ddp_devices_cuda_count(&count, &reason);
    int rc = 0;
    if (err != 0) {
        ddp_buf_printf(why, "GPUs: %s", ddp_buf_str(&reason));
        rc = 1;
    } else if (cfg->nproc_per_node > 0 && count < cfg->nproc_per_node) {
        ddp_buf_printf(why, "GPUs: %d visible, %d expected (--nproc-per-node=gpu)", count,
                       cfg->nproc_per_node);
        rc = 1;
    }
    ddp_buf_free(&reason);
    return rc;
}

enum { NVML_UNCORRECTED = 1, NVML_VOLATILE = 0 };

/* Through NVML, where the driver is: a page retirement pending, a failed row remap, or
 * uncorrectable ECC errors since the driver loaded, on any GPU. A missing driver or a
 * query a GPU does not support is no finding. */
static int check_nvml(ddp_buf_t *why)
{
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
    for (unsigned int i = 0; i < n && rc == 0; i++) {
        void *device;
        int state = 0;
        unsigned int corrected = 0, uncorrected = 0, remap_pending = 0, failed = 0;
        unsigned long long errors = 0;
        if (nvml.handle(i, &device) != DDP_NVML_SUCCESS)
            continue;
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

/* The last non-empty line of `text`, into `out`. */
static void last_line(const char *text, size_t len, char *out, size_t cap)
{
    while (len > 0 && (text[len - 1] == '\n' || text[len - 1] == '\r' || text[len - 1] == ' '))
        len--;
    size_t start = len;
    while (start > 0 && text[start - 1] != '\n')
        start--;
    snprintf(out, cap, "%.*s", (int)(len - start), text + start);
}

/* /bin/sh -c `command` in its own process group, its stderr into the pipe `fds` (the write
 * end closed here). Returns its pid, or -errno. */
static pid_t spawn_check(const char *command, int fds[2])
{
    char *argv[] = {"/bin/sh", "-c", (char *)command, NULL};
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
        if (null < 0 || dup2(null, 0) < 0 || dup2(null, 1) < 0 || dup2(fds[1], 2) < 0)
            _exit(126);
        execve("/bin/sh", argv, environ);
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

/* --health-check=CMD with /bin/sh, in its own process group, for at most `timeout` s: exit 0
 * is healthy; otherwise its last line of stderr is the reason. */
static int check_command(const char *command, double timeout, ddp_buf_t *why)
{
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) {
        ddp_buf_printf(why, "--health-check: unable to create a pipe: %s", strerror(errno));
        return 1;
    }
    pid_t pid = spawn_check(command, fds);
    if (pid < 0) {
        close(fds[0]);
        ddp_buf_printf(why, "--health-check: unable to run /bin/sh: %s", strerror((int)-pid));
        return 1;
    }
    char tail[STDERR_KEEP];
    size_t kept = 0;
    double deadline = ddp_clock_mono() + timeout;
    bool timed_out = !read_tail(fds[0], deadline, tail, sizeof tail, &kept);
    close(fds[0]);
    int status = 0;
    /* Its stderr closed: it has ended or is about to; what is left of the time bounds it. */
    while (!timed_out && waitpid(pid, &status, WNOHANG) == 0) {
        if (ddp_clock_mono() >= deadline) {
            timed_out = true;
            break;
        }
        struct timespec tick = {0, 10 * 1000 * 1000};
        nanosleep(&tick, NULL);
    }
    if (timed_out) {
        kill(-pid, SIGKILL);
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
            ;
        ddp_buf_printf(why,
                       "--health-check: '%s' did not finish within %g s "
                       "(--health-check-timeout)",
                       command, timeout);
        return 1;
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return 0;
    char line[512];
    last_line(tail, kept, line, sizeof line);
    if (WIFEXITED(status))
        ddp_buf_printf(why, "--health-check: '%s' exited with %d%s%s", command, WEXITSTATUS(status),
                       line[0] ? ": " : "", line);
    else
        ddp_buf_printf(why, "--health-check: '%s' was killed by signal %d%s%s", command,
                       WTERMSIG(status), line[0] ? ": " : "", line);
    return 1;
}

int ddp_health_check(const ddp_launch_config_t *cfg, ddp_buf_t *why)
{
    int rc = 0;
    if (cfg->health_paths != NULL)
        rc = check_paths(cfg->health_paths, why);
    if (rc == 0 && cfg->nproc_kind == DDP_NPROC_GPU)
        rc = check_gpu_count(cfg, why);
    if (rc == 0 && ddp_health_checks_apply(cfg))
        rc = check_nvml(why);
    if (rc == 0 && cfg->health_command != NULL)
        rc = check_command(cfg->health_command, cfg->health_timeout, why);
    return rc;
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

int ddp_gpu_memory_used(ddp_gpu_memory_t *m, unsigned long long *used, int *gpu)
{
    unsigned long long most = 0;
    int at = 0;
    for (unsigned int i = 0; i < m->n; i++) {
        ddp_nvml_memory_t info;
        if (m->nvml.memory(m->devices[i], &info) != DDP_NVML_SUCCESS)
            return -EIO;
        if (info.used > most) {
            most = info.used;
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
