/* ddp-test-worker: a worker program with one behaviour per mode, for the integration
 * tests (libuv's spawn-helper pattern: the tests start ddp-launch on it).
 *
 *   env                      print the worker's environment contract and argv
 *
 * A leading --local_rank=N or --local-rank=N (the legacy launch argument) is skipped.
 *   exit CODE [RANK]         exit with CODE (only local rank RANK; the others wait)
 *   signal NAME [RANK]       die of signal NAME (SEGV, ABRT, KILL, ...)
 *   wait [ignore-term]       print "ready <local_rank> <pid>" and wait to be stopped
 *   catch NAME...            print "ready ..." then, on one of the signals, "caught
 *                            SIGNAME <local_rank>" and exit 0
 *   grandchild               fork a child that waits; print "pids <pid> <child>"; wait
 *   leave-child [stubborn] [session|group]
 *                            fork a child that waits (ignoring SIGTERM if stubborn; in
 *                            a session or process group of its own if asked); print
 *                            "pids ..."; exit 0
 *   fail-until N CODE        exit CODE while TORCHELASTIC_RESTART_COUNT < N, else 0
 *   wait-until N             wait to be stopped while TORCHELASTIC_RESTART_COUNT < N,
 *                            then as env
 *   until-world N            wait to be stopped unless WORLD_SIZE is N, then as env
 *   lines COUNT              COUNT lines, each written in three pieces
 *   big-line BYTES           one line of BYTES 'x' in 4 KiB writes
 *   binary                   bytes 0..255 but newline, "\n", then "end" with no newline
 *   streams                  "out <local_rank>" on stdout, "err <local_rank>" on stderr,
 *                            an empty line on stdout
 *   error-file FORM CODE     write TORCHELASTIC_ERROR_FILE (nested|flat), exit CODE
 *   store-attempt            on attempt 0 SET /stale in the launcher's store and exit 1;
 *                            later, exit 0 when /stale is gone ("no stale key"), else 2
 *   placement                "CPUS=<its Cpus_allowed_list>", "POLICY=<memory policy>"
 *   store-meet KEY FILE      rank 0 SETs KEY once FILE exists, the others WAIT for it
 *                            (60 s at most each); each says "met KEY"
 */
#include "store_client.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

static int local_rank(void)
{
    const char *v = getenv("LOCAL_RANK");
    return v ? atoi(v) : -1;
}

static void write_all(int fd, const char *data, size_t len)
{
    while (len > 0) {
        ssize_t w = write(fd, data, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            exit(90);
        data += w;
        len -= (size_t)w;
    }
}

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    write_all(1, line, (size_t)n);
}

static int signal_number(const char *name)
{
    if (strncmp(name, "SIG", 3) == 0)
        name += 3;
    for (int sig = 1; sig < NSIG; sig++) {
        const char *abbrev = sigabbrev_np(sig);
        if (abbrev != NULL && strcmp(abbrev, name) == 0)
            return sig;
    }
    fprintf(stderr, "test-worker: unknown signal %s\n", name);
    exit(91);
}

static _Noreturn void wait_forever(void)
{
    for (;;)
        pause();
}

/* "stdio <local rank> tty=<0|1>" through stdio, not flushed (line-buffered on a terminal,
 * held to the exit on a pipe), then waits up to 60 s for file argv[2] to exist. */
static int mode_stdio(int argc, char **argv)
{
    printf("stdio %d tty=%d\n", local_rank(), isatty(1) && isatty(2));
    for (int i = 0; i < 1200 && argc > 2 && access(argv[2], F_OK) != 0; i++)
        usleep(50 * 1000);
    return 0;
}

/* Where the kernel placed this worker, as /proc shows it: "CPUS=<Cpus_allowed_list>" and
 * "POLICY=<the memory policy numa_maps gives its first mapping>" (default, prefer:N, ...). */
static int mode_placement(void)
{
    char line[4096], cpus[4096] = "?", policy[64] = "?";
    FILE *f = fopen("/proc/self/status", "r");
    while (f != NULL && fgets(line, sizeof line, f) != NULL)
        if (sscanf(line, "Cpus_allowed_list: %4095s", cpus) == 1)
            break;
    if (f != NULL)
        fclose(f);
    f = fopen("/proc/self/numa_maps", "r");
    if (f != NULL && fgets(line, sizeof line, f) != NULL)
        sscanf(line, "%*s %63s", policy);
    if (f != NULL)
        fclose(f);
    printf("CPUS=%s\nPOLICY=%s\n", cpus, policy);
    return 0;
}

/* Only `rank` (or every rank when absent) does the thing; the others wait. */
static void others_wait(int argc, char **argv, int rank_arg)
{
    if (argc > rank_arg && atoi(argv[rank_arg]) != local_rank()) {
        say("ready %d %d\n", local_rank(), (int)getpid());
        wait_forever();
    }
}

static int mode_env(int argc, char **argv)
{
    static const char *const names[] = {"LOCAL_RANK",
                                        "RANK",
                                        "GROUP_RANK",
                                        "GROUP_WORLD_SIZE",
                                        "ROLE_RANK",
                                        "ROLE_WORLD_SIZE",
                                        "ROLE_NAME",
                                        "LOCAL_WORLD_SIZE",
                                        "WORLD_SIZE",
                                        "MASTER_ADDR",
                                        "MASTER_PORT",
                                        "TORCHELASTIC_USE_AGENT_STORE",
                                        "TORCHELASTIC_RESTART_COUNT",
                                        "TORCHELASTIC_MAX_RESTARTS",
                                        "TORCHELASTIC_RUN_ID",
                                        "TORCHELASTIC_ERROR_FILE",
                                        "TORCH_NCCL_ASYNC_ERROR_HANDLING",
                                        "NCCL_ASYNC_ERROR_HANDLING",
                                        "OMP_NUM_THREADS",
                                        "CUDA_VISIBLE_DEVICES",
                                        "DDP_TEST_MARK"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const char *v = getenv(names[i]);
        if (v != NULL)
            say("%s=%s\n", names[i], v);
        else
            say("%s is unset\n", names[i]);
    }
    for (int i = 0; i < argc; i++)
        say("argv[%d]=%s\n", i, argv[i]);
    return 0;
}

static volatile sig_atomic_t caught;
static void on_signal(int sig)
{
    caught = sig;
}

static int mode_catch(int argc, char **argv)
{
    sigset_t set, old;
    sigemptyset(&set);
    for (int i = 2; i < argc; i++) {
        int sig = signal_number(argv[i]);
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_signal;
        sigaction(sig, &sa, NULL);
        sigaddset(&set, sig);
    }
    sigprocmask(SIG_BLOCK, &set, &old);
    say("ready %d %d\n", local_rank(), (int)getpid());
    while (!caught)
        sigsuspend(&old);
    say("caught SIG%s %d\n", sigabbrev_np(caught), local_rank());
    return 0;
}

static int mode_lines(int argc, char **argv)
{
    int count = argc > 2 ? atoi(argv[2]) : 100;
    char payload[200];
    memset(payload, 'a' + local_rank() % 26, sizeof payload - 1);
    payload[sizeof payload - 1] = '\0';
    for (int i = 0; i < count; i++) {
        char head[64];
        int n = snprintf(head, sizeof head, "line rank=%d i=%d ", local_rank(), i);
        write_all(1, head, (size_t)n);
        write_all(1, payload, strlen(payload));
        write_all(1, " end\n", 5);
    }
    return 0;
}

static int mode_big_line(int argc, char **argv)
{
    size_t bytes = argc > 2 ? strtoul(argv[2], NULL, 10) : 1 << 20;
    char chunk[4096];
    memset(chunk, 'x', sizeof chunk);
    for (size_t done = 0; done < bytes;) {
        size_t n = bytes - done < sizeof chunk ? bytes - done : sizeof chunk;
        write_all(1, chunk, n);
        done += n;
    }
    write_all(1, "\n", 1);
    return 0;
}

static int mode_binary(void)
{
    char bytes[256];
    size_t n = 0;
    for (int c = 0; c < 256; c++) {
        if (c != '\n')
            bytes[n++] = (char)c;
    }
    write_all(1, bytes, n);
    write_all(1, "\nend", 4);
    return 0;
}

static int mode_error_file(int argc, char **argv)
{
    const char *path = getenv("TORCHELASTIC_ERROR_FILE");
    const char *form = argc > 2 ? argv[2] : "nested";
    int code = argc > 3 ? atoi(argv[3]) : 1;
    FILE *f = path ? fopen(path, "w") : NULL;
    if (f == NULL)
        return 92;
    if (strcmp(form, "flat") == 0)
        fprintf(f, "{\"message\": \"flat failure of rank %d\", \"timestamp\": %ld}", local_rank(),
                (long)time(NULL));
    else if (strcmp(form, "garbage") == 0)
        fprintf(f, "{\"message\": {\"message\": ");
    else
        fprintf(
            f,
            "{\"message\": {\"message\": \"RuntimeError: boom\", \"extraInfo\": "
            "{\"py_callstack\": \"Traceback (most recent call last):\\n  File \\\"train.py\\\", "
            "line 3\\nRuntimeError: boom on rank %d\", \"timestamp\": \"%ld\"}}}",
            local_rank(), (long)time(NULL));
    fclose(f);
    return code;
}

/* A client of the launcher's store (MASTER_ADDR:MASTER_PORT), or NULL said why. */
static ddp_store_client_t *connect_store(void)
{
    const char *addr = getenv("MASTER_ADDR"), *port = getenv("MASTER_PORT");
    ddp_store_client_options_t options = DDP_STORE_CLIENT_OPTIONS_DEFAULT;
    ddp_store_client_t *store = NULL;
    ddp_buf_t err = DDP_BUF_INIT;
    options.connect_timeout = options.timeout = 30;
    if (addr == NULL || port == NULL ||
        ddp_store_client_connect(addr, atoi(port), &options, &store, &err) != 0)
        fprintf(stderr, "test-worker: %s\n", addr && port ? ddp_buf_str(&err) : "no MASTER_*");
    ddp_buf_free(&err);
    return store;
}

static int mode_store_meet(int argc, char **argv)
{
    ddp_store_client_t *store = argc > 3 ? connect_store() : NULL;
    const char *rank = getenv("RANK"), *keys[] = {argc > 3 ? argv[2] : ""};
    int rc = 0;
    if (store == NULL || rank == NULL)
        return 96;
    if (atoi(rank) == 0) {
        for (int i = 0; i < 6000 && access(argv[3], F_OK) != 0; i++)
            nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
        if (ddp_store_client_set(store, keys[0], "1", 1) != 0 || ddp_store_client_ping(store) != 0)
            rc = 97;
    } else if (ddp_store_client_wait(store, keys, 1, 60) != 0) {
        rc = 98;
    }
    if (rc == 0)
        say("met %s\n", keys[0]);
    ddp_store_client_close(store);
    return rc;
}

static int mode_store_attempt(void)
{
    const char *attempt = getenv("TORCHELASTIC_RESTART_COUNT");
    ddp_store_client_t *store = attempt != NULL ? connect_store() : NULL;
    if (store == NULL)
        return 96;
    int rc = 0;
    if (atoi(attempt) == 0) {
        rc = ddp_store_client_set(store, "/stale", "attempt0", 8) == 0 ? 1 : 97;
        /* SET has no reply: a round trip makes sure it landed before we exit. */
        if (rc == 1 && ddp_store_client_ping(store) != 0)
            rc = 97;
        say("set /stale on attempt 0\n");
    } else {
        const char *keys[] = {"/stale"};
        bool there = true;
        if (ddp_store_client_check(store, keys, 1, &there) != 0)
            rc = 98;
        else if (there)
            rc = 2, say("the key of attempt 0 is still there on attempt %s\n", attempt);
        else
            say("no stale key on attempt %s\n", attempt);
    }
    ddp_store_client_close(store);
    return rc;
}

/* A child that waits forever (stubborn: it ignores SIGTERM; session, group: it leaves the
 * worker's; all set before the worker goes on: a pipe says so); the worker says both
 * pids, then waits too, or exits 0 (`leave`). */
static int mode_grandchild(int argc, char **argv, bool leave)
{
    bool stubborn = false, session = false, group = false;
    for (int i = 2; i < argc; i++) {
        stubborn = stubborn || strcmp(argv[i], "stubborn") == 0;
        session = session || strcmp(argv[i], "session") == 0;
        group = group || strcmp(argv[i], "group") == 0;
    }
    int ready[2];
    char byte = 0;
    if (pipe(ready) != 0)
        return 3;
    pid_t child = fork();
    if (child == 0) {
        if (stubborn)
            signal(SIGTERM, SIG_IGN);
        if ((session && setsid() < 0) || (group && setpgid(0, 0) != 0))
            _exit(3);
        if (write(ready[1], &byte, 1) != 1)
            _exit(3);
        wait_forever();
    }
    if (child < 0 || read(ready[0], &byte, 1) != 1)
        return 3;
    close(ready[0]);
    close(ready[1]);
    say("pids %d %d\n", (int)getpid(), (int)child);
    if (leave)
        return 0;
    wait_forever();
}

static int mode_fail_until(int argc, char **argv)
{
    const char *attempt = getenv("TORCHELASTIC_RESTART_COUNT");
    int n = attempt ? atoi(attempt) : 0;
    if (n < (argc > 2 ? atoi(argv[2]) : 1)) {
        say("failing on attempt %d rank %d\n", n, local_rank());
        return argc > 3 ? atoi(argv[3]) : 1;
    }
    say("succeeded on attempt %d rank %d\n", n, local_rank());
    return 0;
}

int main(int argc, char **argv)
{
    char **all = argv;
    int nall = argc;
    /* torch.distributed.launch's --local_rank=N comes before the script's arguments. */
    if (argc > 1 && (strncmp(argv[1], "--local_rank=", 13) == 0 ||
                     strncmp(argv[1], "--local-rank=", 13) == 0)) {
        argv++;
        argc--;
    }
    const char *mode = argc > 1 ? argv[1] : "env";
    struct rlimit no_core = {0, 0};
    setrlimit(RLIMIT_CORE, &no_core); /* the fault modes must not leave core files */
    if (strcmp(mode, "env") == 0)
        return mode_env(nall, all);
    if (strcmp(mode, "exit") == 0) {
        others_wait(argc, argv, 3);
        return argc > 2 ? atoi(argv[2]) : 0;
    }
    if (strcmp(mode, "signal") == 0) {
        others_wait(argc, argv, 3);
        int sig = signal_number(argc > 2 ? argv[2] : "SEGV");
        signal(sig, SIG_DFL);
        raise(sig);
        return 93;
    }
    if (strcmp(mode, "wait") == 0) {
        if (argc > 2 && strcmp(argv[2], "ignore-term") == 0)
            signal(SIGTERM, SIG_IGN);
        say("ready %d %d\n", local_rank(), (int)getpid());
        wait_forever();
    }
    if (strcmp(mode, "catch") == 0)
        return mode_catch(argc, argv);
    if (strcmp(mode, "grandchild") == 0 || strcmp(mode, "leave-child") == 0)
        return mode_grandchild(argc, argv, strcmp(mode, "leave-child") == 0);
    if (strcmp(mode, "fail-until") == 0)
        return mode_fail_until(argc, argv);
    if (strcmp(mode, "wait-until") == 0 || strcmp(mode, "until-world") == 0) {
        /* Waits (to be stopped) before attempt N, or in a world of another size. */
        const char *attempt = getenv("TORCHELASTIC_RESTART_COUNT"), *size = getenv("WORLD_SIZE");
        int want = argc > 2 ? atoi(argv[2]) : 1;
        if (strcmp(mode, "wait-until") == 0 ? (attempt ? atoi(attempt) : 0) < want
                                            : (size ? atoi(size) : 0) != want) {
            say("ready %d %d\n", local_rank(), (int)getpid());
            wait_forever();
        }
        return mode_env(nall, all);
    }
    if (strcmp(mode, "lines") == 0)
        return mode_lines(argc, argv);
    if (strcmp(mode, "big-line") == 0)
        return mode_big_line(argc, argv);
    if (strcmp(mode, "binary") == 0)
        return mode_binary();
    if (strcmp(mode, "streams") == 0) {
        say("out %d\n", local_rank());
        char line[64];
        int n = snprintf(line, sizeof line, "err %d\n", local_rank());
        write_all(2, line, (size_t)n);
        write_all(1, "\n", 1);
        return 0;
    }
    if (strcmp(mode, "error-file") == 0)
        return mode_error_file(argc, argv);
    if (strcmp(mode, "store-meet") == 0)
        return mode_store_meet(argc, argv);
    if (strcmp(mode, "store-attempt") == 0)
        return mode_store_attempt();
    if (strcmp(mode, "placement") == 0)
        return mode_placement();
    if (strcmp(mode, "stdio") == 0)
        return mode_stdio(argc, argv);
    fprintf(stderr, "test-worker: unknown mode %s\n", mode);
    return 94;
}
