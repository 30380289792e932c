/* Running real processes under a deadline for the integration tests (see harness.h). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "harness.h"

#include "io.h"

#include <dirent.h>
#include <errno.h>
#include <arpa/inet.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

double th_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

bool th_sanitized(void)
{
#if defined(__SANITIZE_ADDRESS__)
    return true;
#else
    return false;
#endif
}

bool th_wrapped(void)
{
    const char *wrapper = getenv("DDP_TEST_WRAPPER");
    return wrapper != NULL && *wrapper != '\0';
}

static int pidfd_open(pid_t pid)
{
    return (int)syscall(SYS_pidfd_open, pid, 0);
}

static const char *required_env(const char *name)
{
    const char *value = getenv(name);
    if (value == NULL || *value == '\0')
        fail_msg("%s is not set: run the tests with meson test", name);
    return value;
}

const char *th_launcher(void)
{
    return required_env("DDP_TEST_LAUNCHER");
}

const char *th_worker(void)
{
    return required_env("DDP_TEST_WORKER");
}

const char *th_source_dir(void)
{
    return required_env("DDP_TEST_SOURCE_DIR");
}

/* environ changed by `changes` ("K=V" sets, "K" removes). */
static char **build_env(const char *const *changes)
{
    size_t n = 0, m = 0;
    while (environ[n] != NULL)
        n++;
    while (changes != NULL && changes[m] != NULL)
        m++;
    char **env = calloc(n + m + 1, sizeof *env);
    size_t k = 0;
    assert_non_null(env);
    for (size_t i = 0; i < n; i++) {
        const char *eq = strchr(environ[i], '=');
        size_t len = eq ? (size_t)(eq - environ[i]) : strlen(environ[i]);
        bool changed = false;
        for (size_t j = 0; j < m && !changed; j++) {
            const char *ceq = strchr(changes[j], '=');
            size_t clen = ceq ? (size_t)(ceq - changes[j]) : strlen(changes[j]);
            changed = clen == len && strncmp(changes[j], environ[i], len) == 0;
        }
        if (!changed)
            env[k++] = environ[i];
    }
    for (size_t j = 0; j < m; j++) {
        if (strchr(changes[j], '=') != NULL)
            env[k++] = (char *)changes[j];
    }
    env[k] = NULL;
    return env;
}

/* A pseudo-terminal of `rows` x `cols` in fds (master, slave), raw: what a program writes
 * is read unchanged. */
static void open_terminal(int fds[2], int rows, int cols)
{
    char name[64];
    struct termios mode;
    struct winsize size = {.ws_row = (unsigned short)rows, .ws_col = (unsigned short)cols};
    fds[0] = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
    assert_true(fds[0] >= 0);
    assert_int_equal(grantpt(fds[0]), 0);
    assert_int_equal(unlockpt(fds[0]), 0);
    assert_int_equal(ptsname_r(fds[0], name, sizeof name), 0);
    fds[1] = open(name, O_RDWR | O_NOCTTY | O_CLOEXEC);
    assert_true(fds[1] >= 0);
    assert_int_equal(tcgetattr(fds[1], &mode), 0);
    cfmakeraw(&mode);
    assert_int_equal(tcsetattr(fds[1], TCSANOW, &mode), 0);
    assert_int_equal(ioctl(fds[1], TIOCSWINSZ, &size), 0);
}

static void start(th_proc_t *p, const char *const *argv, const char *const *env, bool terminal);

void th_start(th_proc_t *p, const char *const *argv, const char *const *env)
{
    start(p, argv, env, false);
}

void th_start_terminal(th_proc_t *p, const char *const *argv, const char *const *env)
{
    start(p, argv, env, true);
}

static void start(th_proc_t *p, const char *const *argv, const char *const *env, bool terminal)
{
    int out[2], err[2] = {-1, -1};
    memset(p, 0, sizeof *p);
    if (terminal) {
        open_terminal(out, 40, 120);
    } else {
        assert_int_equal(pipe2(out, O_CLOEXEC), 0);
        assert_int_equal(pipe2(err, O_CLOEXEC), 0);
    }
    char **envp = build_env(env);
    /* DDP_TEST_WRAPPER (the valgrind test setup) runs our programs under a tool. */
    const char *wrapper = getenv("DDP_TEST_WRAPPER");
    char *words = NULL;
    const char *wrapped[64];
    const char *store = getenv("DDP_TEST_STORE");
    bool ours =
        strcmp(argv[0], th_launcher()) == 0 || (store != NULL && strcmp(argv[0], store) == 0);
    if (wrapper != NULL && *wrapper != '\0' && ours) {
        int n = 0;
        words = strdup(wrapper);
        for (char *w = strtok(words, " "); w != NULL && n < 32; w = strtok(NULL, " "))
            wrapped[n++] = w;
        for (int i = 0; argv[i] != NULL && n < 63; i++)
            wrapped[n++] = argv[i];
        wrapped[n] = NULL;
        argv = wrapped;
    }
    p->started = th_now();
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(out[1], 1);
        dup2(terminal ? out[1] : err[1], 2);
        int null = open("/dev/null", O_RDONLY);
        dup2(null, 0);
        /* As from an interactive shell, whatever the test runner ignores (a runner started
         * in the background ignores SIGINT and SIGQUIT; meson, SIGPIPE and SIGXFSZ): a
         * launcher keeps a signal ignored at its start ignored. */
        for (int sig = 1; sig < 32; sig++)
            if (sig != SIGKILL && sig != SIGSTOP)
                signal(sig, SIG_DFL);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        execve(argv[0], (char *const *)argv, envp);
        fprintf(stderr, "harness: unable to execute %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    free(envp);
    free(words);
    close(out[1]);
    if (err[1] >= 0)
        close(err[1]);
    p->pid = pid;
    p->out_fd = out[0];
    p->err_fd = err[0];
    p->pidfd = pidfd_open(pid);
    assert_true(p->pidfd >= 0);
    fcntl(p->out_fd, F_SETFL, O_NONBLOCK);
    if (p->err_fd >= 0)
        fcntl(p->err_fd, F_SETFL, O_NONBLOCK);
}

static void drain(int *fd, ddp_buf_t *buf)
{
    char chunk[65536];
    while (*fd >= 0) {
        ssize_t r = read(*fd, chunk, sizeof chunk);
        if (r > 0) {
            assert_int_equal(ddp_buf_append(buf, chunk, (size_t)r), 0);
            continue;
        }
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 && errno == EAGAIN)
            return;
        close(*fd);
        *fd = -1;
    }
}

static void reap(th_proc_t *p)
{
    if (p->exited)
        return;
    if (waitpid(p->pid, &p->status, WNOHANG) == p->pid)
        p->exited = true;
}

/* One round of waiting: output and the exit, for at most `timeout` seconds. */
static void pump(th_proc_t *p, double timeout)
{
    struct pollfd fds[3];
    int n = 0;
    if (p->out_fd >= 0)
        fds[n++] = (struct pollfd){.fd = p->out_fd, .events = POLLIN};
    if (p->err_fd >= 0)
        fds[n++] = (struct pollfd){.fd = p->err_fd, .events = POLLIN};
    if (!p->exited)
        fds[n++] = (struct pollfd){.fd = p->pidfd, .events = POLLIN};
    if (n == 0)
        return;
    int ms = timeout <= 0 ? 0 : (int)(timeout * 1000) + 1;
    if (poll(fds, (nfds_t)n, ms) < 0 && errno != EINTR)
        fail_msg("poll: %s", strerror(errno));
    drain(&p->out_fd, &p->out);
    drain(&p->err_fd, &p->err);
    reap(p);
}

bool th_wait_output(th_proc_t *p, int stream, const char *needle, int count, double timeout)
{
    double deadline = th_now() + timeout;
    ddp_buf_t *buf = stream == 1 ? &p->out : &p->err;
    for (;;) {
        if (th_count(ddp_buf_str(buf), needle) >= count)
            return true;
        double left = deadline - th_now();
        if (left <= 0 || (p->exited && p->out_fd < 0 && p->err_fd < 0))
            return false;
        pump(p, left);
    }
}

bool th_wait_exit(th_proc_t *p, double timeout)
{
    double deadline = th_now() + timeout;
    for (;;) {
        if (p->exited && p->out_fd < 0 && p->err_fd < 0)
            return true;
        double left = deadline - th_now();
        if (left <= 0)
            return false;
        pump(p, left);
    }
}

int th_status(const th_proc_t *p)
{
    if (!p->exited)
        return -1;
    return WIFSIGNALED(p->status) ? 128 + WTERMSIG(p->status) : WEXITSTATUS(p->status);
}

void th_run(th_proc_t *p, const char *const *argv, const char *const *env, double timeout)
{
    th_start(p, argv, env);
    if (!th_wait_exit(p, timeout)) {
        th_dump(p);
        th_cleanup(p);
        fail_msg("%s did not finish within %g s", argv[0], timeout);
    }
}

bool th_succeeds(const char *const *argv, double timeout)
{
    th_proc_t p;
    th_run(&p, argv, NULL, timeout);
    bool ok = th_status(&p) == 0;
    th_cleanup(&p);
    return ok;
}

const char *th_trigger_var(char *var, size_t cap)
{
    static int next;
    snprintf(var, cap, "WARM_TRIGGER=%s/warm-go-%d", getenv("TMPDIR"), next++);
    return var + strlen("WARM_TRIGGER=");
}

bool th_touch(const char *path)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    return fd >= 0 && close(fd) == 0;
}

void th_run_after(th_proc_t *p, const char *const *argv, const char *const *env, const char *needle,
                  const char *trigger, double timeout)
{
    th_start(p, argv, env);
    bool seen = needle == NULL || th_wait_output(p, 2, needle, 1, timeout);
    bool made = th_touch(trigger);
    if (!seen || !made || !th_wait_exit(p, timeout)) {
        th_dump(p);
        th_cleanup(p);
        fail_msg("%s: %s", argv[0],
                 !seen   ? "never said what the test waited for"
                 : !made ? "unable to create the trigger file"
                         : "did not finish in time");
    }
}

void th_cleanup(th_proc_t *p)
{
    if (p->pid > 0 && !p->exited) {
        kill(p->pid, SIGKILL);
        while (waitpid(p->pid, &p->status, 0) < 0 && errno == EINTR)
            ;
        p->exited = true;
    }
    if (p->out_fd >= 0)
        close(p->out_fd);
    if (p->err_fd >= 0)
        close(p->err_fd);
    if (p->pidfd >= 0)
        close(p->pidfd);
    p->out_fd = p->err_fd = p->pidfd = -1;
    ddp_buf_free(&p->out);
    ddp_buf_free(&p->err);
}

void th_dump(const th_proc_t *p)
{
    const size_t max = 8192;
    fprintf(stderr,
            "--- status %d; stdout (%zu bytes) ---\n%.*s\n--- stderr (%zu bytes) ---\n%.*s\n---\n",
            th_status(p), p->out.len, (int)(p->out.len < max ? p->out.len : max),
            ddp_buf_str(&p->out), p->err.len, (int)(p->err.len < max ? p->err.len : max),
            ddp_buf_str(&p->err));
}

bool th_wait_gone(pid_t pid, double timeout)
{
    int fd = pidfd_open(pid);
    if (fd < 0)
        return errno == ESRCH;
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    double deadline = th_now() + timeout;
    int r = 0;
    while (r == 0) {
        double left = deadline - th_now();
        if (left <= 0)
            break;
        r = poll(&pfd, 1, (int)(left * 1000) + 1);
        if (r < 0 && errno == EINTR)
            r = 0;
    }
    close(fd);
    return r > 0;
}

int th_count(const char *text, const char *needle)
{
    int n = 0;
    size_t len = strlen(needle);
    for (const char *p = strstr(text, needle); p != NULL; p = strstr(p + len, needle))
        n++;
    return n;
}

/* /proc/<pid>/stat into buf[cap]: what follows "pid (comm)" (comm may hold spaces and
 * parentheses), from its state on; NULL when it cannot be read. */
static const char *stat_after_comm(pid_t pid, char *buf, size_t cap)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    size_t n = f != NULL ? fread(buf, 1, cap - 1, f) : 0;
    if (f != NULL)
        fclose(f);
    buf[n] = '\0';
    const char *paren = strrchr(buf, ')');
    return paren != NULL && paren[1] == ' ' ? paren + 2 : NULL;
}

char th_proc_state(pid_t pid)
{
    char buf[512];
    const char *state = stat_after_comm(pid, buf, sizeof buf);
    return state != NULL ? state[0] : 0;
}

double th_cpu_seconds(pid_t pid)
{
    char buf[1024];
    unsigned long long utime, stime;
    const char *state = stat_after_comm(pid, buf, sizeof buf);
    /* state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime */
    if (state == NULL ||
        sscanf(state, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &utime, &stime) != 2)
        return -1;
    return (double)(utime + stime) / (double)sysconf(_SC_CLK_TCK);
}

int th_lines_in(const char *prefix, int n)
{
    int lines = 0;
    for (int i = 0; i < n; i++) {
        char path[PATH_MAX + 16], line[256];
        snprintf(path, sizeof path, "%s.%d", prefix, i);
        FILE *f = fopen(path, "r");
        if (f == NULL)
            continue;
        while (fgets(line, sizeof line, f) != NULL)
            if (strchr(line, '\n') != NULL)
                lines++;
        fclose(f);
    }
    return lines;
}

const char *th_script(const char *name)
{
    static char path[4][1024];
    static int next;
    char *p = path[next++ % 4];
    snprintf(p, sizeof path[0], "%s/tests/python/%s", th_source_dir(), name);
    return p;
}

char *th_tmpdir(void)
{
    const char *base = getenv("TMPDIR");
    char *path;
    assert_true(asprintf(&path, "%s/ddp-test-XXXXXX", base && *base ? base : "/tmp") > 0);
    assert_non_null(mkdtemp(path));
    return path;
}

void th_rmtree(const char *path)
{
    DIR *dir = opendir(path);
    struct dirent *entry;
    while (dir != NULL && (entry = readdir(dir)) != NULL) {
        if (strcmp(entry->d_name, ".") == 0 || strcmp(entry->d_name, "..") == 0)
            continue;
        char *child;
        if (asprintf(&child, "%s/%s", path, entry->d_name) < 0)
            continue;
        struct stat st;
        if (lstat(child, &st) == 0 && S_ISDIR(st.st_mode))
            th_rmtree(child);
        else
            unlink(child);
        free(child);
    }
    if (dir != NULL)
        closedir(dir);
    rmdir(path);
}

typedef struct {
    char *tmpdir;
    char *saved_tmpdir; /* TMPDIR before the test, NULL when unset */
    char mark[64];
    double began; /* th_now's at the setup: the test's time is said at its end */
} th_session_t;

int th_setup(void **state)
{
    th_session_t *session = calloc(1, sizeof *session);
    assert_non_null(session);
    const char *saved = getenv("TMPDIR");
    session->saved_tmpdir = saved ? strdup(saved) : NULL;
    session->tmpdir = th_tmpdir();
    snprintf(session->mark, sizeof session->mark, "DDP_TEST_SESSION=%d-%.0f", (int)getpid(),
             th_now() * 1e6);
    setenv("TMPDIR", session->tmpdir, 1);
    setenv("DDP_TEST_SESSION", strchr(session->mark, '=') + 1, 1);
    session->began = th_now();
    *state = session;
    return 0;
}

/* Whether process `pid` is alive (not a zombie) and carries `mark` in its environment. */
static bool carries_mark(const char *pid, const char *mark)
{
    char path[300], stat_text[512];
    snprintf(path, sizeof path, "/proc/%s/stat", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    ssize_t len = read(fd, stat_text, sizeof stat_text - 1);
    close(fd);
    char *after = len > 0 ? (stat_text[len] = '\0', strrchr(stat_text, ')')) : NULL;
    if (after == NULL || after[2] == 'Z' || after[2] == 'X')
        return false;
    snprintf(path, sizeof path, "/proc/%s/environ", pid);
    char *env = NULL;
    size_t env_len = 0;
    if (ddp_read_file(path, (size_t)1 << 20, &env, &env_len) != 0)
        return false;
    bool found = false;
    size_t mark_len = strlen(mark);
    for (size_t i = 0; i < env_len && !found; i += strlen(env + i) + 1)
        found = strncmp(env + i, mark, mark_len) == 0 && env[i + mark_len] == '\0';
    free(env);
    return found;
}

int th_end_marked(const char *mark, double timeout)
{
    int left = 0;
    DIR *proc = opendir("/proc");
    struct dirent *entry;
    while (proc != NULL && (entry = readdir(proc)) != NULL) {
        if (entry->d_name[0] < '0' || entry->d_name[0] > '9')
            continue;
        pid_t pid = atoi(entry->d_name);
        if (pid == getpid() || !carries_mark(entry->d_name, mark))
            continue;
        /* A process killed a moment ago may still be on its way out. */
        if (!th_wait_gone(pid, timeout)) {
            fprintf(stderr, "harness: process %d outlived its test; killing it\n", (int)pid);
            kill(pid, SIGKILL);
            left++;
        }
    }
    if (proc != NULL)
        closedir(proc);
    return left;
}

/* The directories th_shm_tmpdir made for the running test, which its teardown removes. */
static char *shm_dirs[8];

char *th_shm_tmpdir(void)
{
    size_t k = 0;
    while (k < sizeof shm_dirs / sizeof shm_dirs[0] && shm_dirs[k] != NULL)
        k++;
    assert_true(k < sizeof shm_dirs / sizeof shm_dirs[0]);
    char *path = strdup("/dev/shm/ddp-test-XXXXXX");
    assert_non_null(path);
    assert_non_null(mkdtemp(path));
    shm_dirs[k] = strdup(path);
    return path;
}

int th_teardown(void **state)
{
    th_session_t *session = *state;
    /* (CI's log then shows where a suite's time goes) */
    printf("(%.1f s)\n", th_now() - session->began);
    fflush(stdout);
    int left = th_end_marked(session->mark, 10);
    th_rmtree(session->tmpdir);
    for (size_t k = 0; k < sizeof shm_dirs / sizeof shm_dirs[0] && shm_dirs[k] != NULL; k++) {
        th_rmtree(shm_dirs[k]);
        free(shm_dirs[k]);
        shm_dirs[k] = NULL;
    }
    if (session->saved_tmpdir != NULL)
        setenv("TMPDIR", session->saved_tmpdir, 1);
    else
        unsetenv("TMPDIR");
    free(session->saved_tmpdir);
    free(session->tmpdir);
    free(session);
    unsetenv("DDP_TEST_SESSION");
    if (left > 0)
        fail_msg("%d process(es) outlived the test", left);
    return 0;
}

static int read_floats(const char *path, float **out)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return -1;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    *out = malloc((size_t)len + 4);
    size_t got = fread(*out, 1, (size_t)len, f);
    fclose(f);
    return got == (size_t)len ? (int)(len / 4) : -1;
}

double th_relative_difference(const char *a_path, const char *b_path)
{
    float *a, *b;
    int n = read_floats(a_path, &a), m = read_floats(b_path, &b);
    assert_true(n > 1000);
    assert_int_equal(n, m);
    double diff = 0, norm = 0;
    for (int i = 0; i < n; i++) {
        diff += pow((double)a[i] - b[i], 2);
        norm += pow(a[i], 2);
    }
    free(a);
    free(b);
    return sqrt(diff / norm);
}

const char *th_torch_python(void)
{
    const char *python = getenv("DDP_TEST_PYTHON");
    char probe[1200];
    snprintf(probe, sizeof probe, "%s -c 'import torch' 2>/dev/null", python ? python : "");
    return python != NULL && *python != '\0' && system(probe) == 0 ? python : NULL;
}

void th_web_server(th_proc_t *p, int port)
{
    char portarg[16];
    snprintf(portarg, sizeof portarg, "%d", port);
    const char *argv[] = {"/usr/bin/python3", "-c",
                          "import http.server, sys\n"
                          "s = http.server.HTTPServer(('127.0.0.1', int(sys.argv[1])),"
                          " http.server.SimpleHTTPRequestHandler)\n"
                          "print('serving', flush=True)\n"
                          "s.serve_forever()\n",
                          portarg, NULL};
    th_start(p, argv, NULL);
    TH_ASSERT(p, th_wait_output(p, 1, "serving", 1, 20));
}

int th_free_port(void)
{
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof addr;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    assert_int_equal(bind(fd, (struct sockaddr *)&addr, sizeof addr), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&addr, &len), 0);
    close(fd);
    return ntohs(addr.sin_port);
}

/* Runs the cluster script with `args`; its output into out[cap]. */
static void cluster_script(const th_cluster_t *c, const char *args, char *out, size_t cap)
{
    char cmd[1400];
    snprintf(cmd, sizeof cmd, "'%s' %s", c->script, args);
    FILE *f = popen(cmd, "r");
    assert_non_null(f);
    size_t len = fread(out, 1, cap - 1, f);
    out[len] = '\0';
    int status = pclose(f);
    if (status != 0)
        fail_msg("%s failed (%d): %s", cmd, status, out);
}

/* The line of `text` that starts with `name`, into out[cap]. */
static void cluster_line(const char *text, const char *name, bool whole, char *out, size_t cap)
{
    const char *at = strstr(text, name);
    if (at == NULL)
        fail_msg("the cluster script printed no %s: %s", name, text);
    if (!whole)
        at += strlen(name);
    snprintf(out, cap, "%.*s", (int)strcspn(at, "\n"), at);
}

void th_cluster_up(th_cluster_t *c, const char *kind, int nodes)
{
    char out[4096], args[700];
    const char *base = getenv("TMPDIR");
    snprintf(c->script, sizeof c->script, "%s/tests/support/cluster", th_source_dir());
    snprintf(c->dir, sizeof c->dir, "%s/ddp-%s-%d", base && *base ? base : "/tmp", kind,
             (int)getpid());
    snprintf(args, sizeof args, "up %s '%s' %d", kind, c->dir, nodes);
    cluster_script(c, args, out, sizeof out);
    cluster_line(out, strcmp(kind, "slurm") == 0 ? "SLURM_CONF=" : "DDP_SSH_CONFIG=", true,
                 c->config, sizeof c->config);
    cluster_line(out, "DDP_CLUSTER_TAG=", false, c->tag, sizeof c->tag);
}

void th_cluster_bridge_addr(const th_cluster_t *c, char *addr, size_t cap)
{
    char path[600], net[32] = "";
    snprintf(path, sizeof path, "%s/net", c->dir);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    assert_non_null(fgets(net, sizeof net, f));
    fclose(f);
    net[strcspn(net, "\n")] = '\0';
    snprintf(addr, cap, "%s.254", net);
}

void th_cluster_down(th_cluster_t *c)
{
    char out[4096], args[700];
    snprintf(args, sizeof args, "down '%s'", c->dir);
    cluster_script(c, args, out, sizeof out);
}

void th_torch_prepare(th_torch_t *t, const char *flavour)
{
    memset(t, 0, sizeof *t);
    snprintf(t->version, sizeof t->version, "%s", flavour);
    if (strcmp(flavour, "2.6") != 0) {
        /* DDP_TEST_PYTHON's torch, Debian's 1.13; or with "python" whichever torch
         * DDP_TEST_TORCH_PYTHON has (set by whoever runs the test). */
        bool any = strcmp(flavour, "python") == 0;
        const char *py = getenv(any ? "DDP_TEST_TORCH_PYTHON" : "DDP_TEST_PYTHON");
        if (any && (py == NULL || *py == '\0')) {
            printf("skipped: DDP_TEST_TORCH_PYTHON names no python to test with\n");
            exit(77);
        }
        char cmd[1200];
        snprintf(cmd, sizeof cmd,
                 "'%s' -c 'import torch.distributed, torch; print(torch.__version__)' 2>/dev/null",
                 py ? py : "");
        FILE *out = py != NULL && *py != '\0' ? popen(cmd, "r") : NULL;
        char found[64] = "";
        if (out != NULL) {
            if (fgets(found, sizeof found, out) == NULL)
                found[0] = '\0';
            found[strcspn(found, "\n")] = '\0';
            pclose(out);
        }
        if (found[0] == '\0') {
            printf("skipped: %s cannot import torch (apt-get install python3-torch)\n",
                   py && *py ? py : "no python3");
            exit(77);
        }
        if (any) {
            snprintf(t->version, sizeof t->version, "%s", found);
        } else if (strncmp(found, flavour, strlen(flavour)) != 0) {
            printf("skipped: %s has torch %s, not %s (run with the flavour python)\n", py, found,
                   flavour);
            exit(77);
        }
        snprintf(t->python, sizeof t->python, "%s", py);
    } else {
        const char *setup = getenv("DDP_TORCH26_SETUP"), *root = getenv("DDP_TORCH26_ROOT");
        const char *wrapper = getenv("DDP_TORCH26_PYTHON");
        char cmd[2200];
        if (setup == NULL || root == NULL || wrapper == NULL) {
            printf("skipped: run with meson test (DDP_TORCH26_* are not set)\n");
            exit(77);
        }
        snprintf(cmd, sizeof cmd, "'%s' '%s'", setup, root);
        int status = system(cmd);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
            exit(WIFEXITED(status) && WEXITSTATUS(status) == 77 ? 77 : 1);
        snprintf(t->python, sizeof t->python, "%s", wrapper);
        snprintf(t->root_var, sizeof t->root_var, "DDP_TRIXIE_ROOT=%s", root);
        t->env[1] = t->root_var;
        t->env[2] = "USE_LIBUV=0"; /* Debian's 2.6 has no libuv (pytorch#148283) */
    }
    snprintf(t->exec_var, sizeof t->exec_var, "PYTHON_EXEC=%s", t->python);
    t->env[0] = t->exec_var;
}

/* etcd clusters (th_etcd_up). Members are told apart by their client port. */

#define ETCD      "/usr/bin/etcd"
#define ETCDCTL   "/usr/bin/etcdctl"
#define ETCD_UP_S 30.0

/* etcdctl's answer for `endpoints` of cluster `c` (`args` after them), into out[cap]: its
 * exit status. */
static int etcdctl(const th_etcd_t *c, const char *endpoints, const char *args, char *out,
                   size_t cap)
{
    char cmd[2400], tls[1600] = "";
    if (c->certs[0] != '\0')
        snprintf(tls, sizeof tls, "--cacert=%s/ca.pem --cert=%s/client.pem --key=%s/client-key.pem",
                 c->certs, c->certs, c->certs);
    snprintf(cmd, sizeof cmd,
             "ETCDCTL_API=3 %s --dial-timeout=1s --command-timeout=2s %s --endpoints=%s %s 2>&1",
             ETCDCTL, tls, endpoints, args);
    FILE *f = popen(cmd, "r");
    assert_non_null(f);
    size_t len = fread(out, 1, cap - 1, f);
    out[len] = '\0';
    return pclose(f);
}

int th_etcdctl(const th_etcd_t *c, const char *args, char *out, size_t cap)
{
    return etcdctl(c, c->endpoints, args, out, cap);
}

static void etcd_up(th_etcd_t *c, int n, bool tls, const char *host);
static void etcd_start_members(th_etcd_t *c, bool tls, bool same_ports);
static const char *etcd_wait_healthy(th_etcd_t *c);
static void etcd_stop_members(th_etcd_t *c);

void th_etcd_up(th_etcd_t *c, int n)
{
    etcd_up(c, n, false, "127.0.0.1");
}

void th_etcd_up_tls(th_etcd_t *c, int n)
{
    etcd_up(c, n, true, "127.0.0.1");
}

void th_etcd_up_at(th_etcd_t *c, int n, const char *host)
{
    etcd_up(c, n, false, host);
}

static void etcd_up(th_etcd_t *c, int n, bool tls, const char *host)
{
    assert_true(n >= 1 && n <= TH_ETCD_MAX);
    if (access(ETCD, X_OK) != 0 || access(ETCDCTL, X_OK) != 0) {
        printf("skipped: no etcd here (%s, %s: Debian's etcd-server and etcd-client)\n", ETCD,
               ETCDCTL);
        skip();
    }
    memset(c, 0, sizeof *c);
    c->n = n;
    snprintf(c->host, sizeof c->host, "%s", host);
    /* On a tmpfs where there is one: etcd syncs its log at every write, and on a disk that
     * other tests load, an election took more than 10 s. Removed at the test's end. */
    char *shm = access("/dev/shm", W_OK) == 0 ? th_shm_tmpdir() : NULL;
    snprintf(c->dir, sizeof c->dir, "%s/etcd", shm != NULL ? shm : required_env("TMPDIR"));
    free(shm);
    assert_int_equal(mkdir(c->dir, 0700), 0);
    if (tls) {
        char script[600];
        snprintf(c->certs, sizeof c->certs, "%s/certs", c->dir);
        snprintf(script, sizeof script, "%s/tests/support/make-certs", th_source_dir());
        const char *argv[] = {script, c->certs, NULL};
        if (!th_succeeds(argv, 60))
            fail_msg("tests/support/make-certs could not make certificates (openssl)");
    }
    /* A member whose port another test took meanwhile (th_free_port only says it was free)
     * exits at once: the cluster is made again on other ports, three times at most. */
    for (int attempt = 1;; attempt++) {
        etcd_start_members(c, tls, false);
        const char *why = etcd_wait_healthy(c);
        if (why == NULL)
            return;
        etcd_stop_members(c);
        if (attempt == 3)
            fail_msg("etcd (%d member(s) at %s) not up after 3 tries: %s", n, c->endpoints, why);
        printf("etcd (%d member(s) at %s) not up, again on other ports: %s\n", n, c->endpoints,
               why);
    }
}

/* Starts c->n members on ports free a moment ago (`same_ports`: their ports before), each
 * with a fresh data directory. */
static void etcd_start_members(th_etcd_t *c, bool tls, bool same_ports)
{
    int n = c->n;
    char cluster[TH_ETCD_MAX * 48] = "";
    c->endpoints[0] = '\0';
    for (int i = 0; i < n; i++) {
        if (!same_ports) {
            c->client_port[i] = th_free_port();
            c->peer_port[i] = th_free_port();
        }
        size_t len = strlen(cluster), elen = strlen(c->endpoints);
        snprintf(cluster + len, sizeof cluster - len, "%sm%d=http://127.0.0.1:%d", i ? "," : "", i,
                 c->peer_port[i]);
        snprintf(c->endpoints + elen, sizeof c->endpoints - elen, "%s%s:%d", i ? "," : "", c->host,
                 c->client_port[i]);
    }
    for (int i = 0; i < n; i++) {
        char name[16], data[600], client[64], peer[64], initial[TH_ETCD_MAX * 48 + 32];
        snprintf(name, sizeof name, "m%d", i);
        snprintf(data, sizeof data, "%s/m%d", c->dir, i);
        snprintf(client, sizeof client, "%s://%s:%d", tls ? "https" : "http", c->host,
                 c->client_port[i]);
        snprintf(peer, sizeof peer, "http://127.0.0.1:%d", c->peer_port[i]);
        snprintf(initial, sizeof initial, "%s", cluster);
        /* Its log in its data directory: a pipe nobody reads could fill and stop it. */
        char log[640], cert[600], key[600], ca[600];
        snprintf(log, sizeof log, "%s/m%d.log", c->dir, i);
        const char *argv[40] = {ETCD,    "--name",
                                name,    "--data-dir",
                                data,    "--listen-client-urls",
                                client,  "--advertise-client-urls",
                                client,  "--listen-peer-urls",
                                peer,    "--initial-advertise-peer-urls",
                                peer,    "--initial-cluster",
                                initial, "--initial-cluster-state",
                                "new",   "--initial-cluster-token",
                                c->dir,  "--logger",
                                "zap",   "--log-outputs",
                                log,     "--log-level",
                                "error"};
        size_t k = 0;
        while (argv[k] != NULL)
            k++;
        if (tls) {
            snprintf(cert, sizeof cert, "%s/server.pem", c->certs);
            snprintf(key, sizeof key, "%s/server-key.pem", c->certs);
            snprintf(ca, sizeof ca, "%s/ca.pem", c->certs);
            argv[k++] = "--cert-file";
            argv[k++] = cert;
            argv[k++] = "--key-file";
            argv[k++] = key;
            argv[k++] = "--trusted-ca-file";
            argv[k++] = ca;
            argv[k++] = "--client-cert-auth";
        }
        th_start(&c->member[i], argv, NULL);
        c->running[i] = true;
    }
}

/* NULL once every member answers healthy; else (a member ended, or ETCD_UP_S passed) why,
 * with the ended member's log, in a static buffer. */
static const char *etcd_wait_healthy(th_etcd_t *c)
{
    static char why[8192];
    char out[4096];
    for (double deadline = th_now() + ETCD_UP_S;;) {
        if (etcdctl(c, c->endpoints, "endpoint health", out, sizeof out) == 0)
            return NULL;
        for (int i = 0; i < c->n; i++) {
            if (!th_wait_exit(&c->member[i], 0.01))
                continue;
            char log[640], text[4096] = "";
            snprintf(log, sizeof log, "%s/m%d.log", c->dir, i);
            FILE *f = fopen(log, "r");
            if (f != NULL) {
                text[fread(text, 1, sizeof text - 1, f)] = '\0';
                fclose(f);
            }
            snprintf(why, sizeof why,
                     "member m%d (client port %d, peer port %d) ended, status %d: %s", i,
                     c->client_port[i], c->peer_port[i], th_status(&c->member[i]), text);
            return why;
        }
        if (th_now() > deadline) {
            snprintf(why, sizeof why, "not healthy within %g s: %s", ETCD_UP_S, out);
            return why;
        }
        nanosleep(&(struct timespec){.tv_nsec = 50 * 1000 * 1000}, NULL);
    }
}

/* Ends every member still running and removes their data and logs. */
static void etcd_stop_members(th_etcd_t *c)
{
    for (int i = 0; i < c->n; i++) {
        if (!c->running[i])
            continue;
        if (!c->member[i].exited)
            kill(c->member[i].pid, SIGKILL);
        th_wait_exit(&c->member[i], 30);
        th_cleanup(&c->member[i]);
        c->running[i] = false;
        char path[640];
        snprintf(path, sizeof path, "%s/m%d", c->dir, i);
        th_rmtree(path);
        snprintf(path, sizeof path, "%s/m%d.log", c->dir, i);
        unlink(path);
    }
}

void th_etcd_wipe(th_etcd_t *c)
{
    etcd_stop_members(c);
    etcd_start_members(c, c->certs[0] != '\0', true);
    const char *why = etcd_wait_healthy(c);
    if (why != NULL)
        fail_msg("etcd (%d member(s) at %s) not up again after its wipe: %s", c->n, c->endpoints,
                 why);
}

void th_etcd_kill(th_etcd_t *c, int i, int sig)
{
    assert_true(i >= 0 && i < c->n && c->running[i]);
    assert_int_equal(kill(c->member[i].pid, sig), 0);
    if (sig == SIGKILL || sig == SIGTERM) {
        assert_true(th_wait_exit(&c->member[i], 30));
        th_cleanup(&c->member[i]);
        c->running[i] = false;
    }
}

int th_etcd_leader(th_etcd_t *c, double timeout)
{
    char out[4096], endpoint[64];
    for (double deadline = th_now() + timeout;;) {
        for (int i = 0; i < c->n; i++) {
            if (!c->running[i])
                continue;
            snprintf(endpoint, sizeof endpoint, "%s:%d", c->host, c->client_port[i]);
            /* "ENDPOINT, ID, VERSION, DB SIZE, IS LEADER, ..." */
            if (etcdctl(c, endpoint, "endpoint status -w simple", out, sizeof out) == 0 &&
                strstr(out, ", true, ") != NULL)
                return i;
        }
        if (th_now() > deadline)
            return -1;
        nanosleep(&(struct timespec){.tv_nsec = 50 * 1000 * 1000}, NULL);
    }
}

void th_etcd_down(th_etcd_t *c)
{
    for (int i = 0; i < c->n; i++)
        if (c->running[i])
            th_etcd_kill(c, i, SIGTERM);
}
