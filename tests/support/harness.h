/* Test support: run a real process (usually ddp-launch) with a deadline, capture its
 * output, wait for lines in it, send it signals, and make sure nothing outlives the
 * test.
 *
 * Every wait takes a timeout in seconds and returns false when it passes; nothing
 * sleeps to let things settle: waits are poll(2) on the output pipes and a pidfd. */
#ifndef DDP_TESTS_HARNESS_H
#define DDP_TESTS_HARNESS_H

#include "buf.h"

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

typedef struct th_proc_s {
    pid_t pid;
    int pidfd;
    int out_fd, err_fd; /* -1 once at EOF */
    ddp_buf_t out, err;
    bool exited;
    int status; /* waitpid status once exited */
    double started;
} th_proc_t;

/* Starts argv[0] (a path) with the test's environment changed by `env`: "K=V" sets K,
 * "K" alone removes it; NULL-terminated, may be NULL. Aborts the test on failure. */
void th_start(th_proc_t *p, const char *const *argv, const char *const *env);

/* As th_start, its stdout and stderr one pseudo-terminal (40 rows, 120 columns, raw),
 * read into p->out (p->err stays empty), as from an interactive shell. */
void th_start_terminal(th_proc_t *p, const char *const *argv, const char *const *env);

/* Waits until `needle` occurs `count` times in the stream (1 stdout, 2 stderr). */
bool th_wait_output(th_proc_t *p, int stream, const char *needle, int count, double timeout);

/* Waits for the process to exit and its output to reach EOF. */
bool th_wait_exit(th_proc_t *p, double timeout);

/* Its exit status as a shell shows it: the code, or 128+N for signal N. */
int th_status(const th_proc_t *p);

/* Runs to completion: start, wait (failing the test at the deadline). */
void th_run(th_proc_t *p, const char *const *argv, const char *const *env, double timeout);

/* Whether argv runs to status 0 within `timeout` (a probe for what a test needs). */
bool th_succeeds(const char *const *argv, double timeout);

/* A new trigger file's path in the test's TMPDIR, as "WARM_TRIGGER=PATH" in var[cap] for a
 * worker's environment (tests/python/warm_trigger.py waits for it); returns PATH, inside
 * var. th_touch creates such a file: false when it cannot. */
const char *th_trigger_var(char *var, size_t cap);
bool th_touch(const char *path);

/* As th_run, and once `needle` is on its stderr (NULL: at once) creates the file
 * `trigger`, which a worker of the test may wait for (an event, not a sleep). */
void th_run_after(th_proc_t *p, const char *const *argv, const char *const *env, const char *needle,
                  const char *trigger, double timeout);

/* Kills it if it still runs, reaps it and frees the buffers. */
void th_cleanup(th_proc_t *p);

/* Prints what the process wrote (for a failing assertion). */
void th_dump(const th_proc_t *p);

/* Waits until process `pid` (not necessarily our child) has ended. */
bool th_wait_gone(pid_t pid, double timeout);

/* Occurrences of `needle` in `text`. */
int th_count(const char *text, const char *needle);

/* /proc/<pid>/stat's state letter ('T': stopped), or 0 when it cannot be read. */
char th_proc_state(pid_t pid);

/* The CPU seconds process `pid` has used, its threads together; -1 when it cannot be read. */
double th_cpu_seconds(pid_t pid);

/* Lines in the files PREFIX.0 ... PREFIX.(N-1); a missing file holds none. */
int th_lines_in(const char *prefix, int n);

/* The python of the tests (DDP_TEST_PYTHON) where it imports torch, else NULL (the caller
 * skips, saying so). */
const char *th_torch_python(void);

/* The paths of the binaries under test, from the environment set by meson. */
const char *th_launcher(void);
const char *th_worker(void);
const char *th_source_dir(void);

/* The path of tests/python/NAME in the source tree (one of 4 buffers, used in turn). */
const char *th_script(const char *name);

/* A new empty directory (caller frees the string); th_rmtree removes one. */
char *th_tmpdir(void);

/* A new empty directory on /dev/shm, a tmpfs (caller frees the string): the test's teardown
 * removes it whatever the test's end, as a launcher removes its checkpoint directory. */
char *th_shm_tmpdir(void);
void th_rmtree(const char *path);

/* Per-test setup and teardown (cmocka_unit_test_setup_teardown): the test gets its own
 * TMPDIR and a session mark in the environment that every process it starts inherits;
 * teardown fails the test if a process with the mark is still alive once a deadline
 * passes (killing it), and removes the directory. */
int th_setup(void **state);
int th_teardown(void **state);
#define TH_TEST(f) cmocka_unit_test_setup_teardown(f, th_setup, th_teardown)

/* Ends the processes with `mark` ("K=V") in their environment: waits up to `timeout`
 * seconds for each to be gone, SIGKILLs (by pid) those that are not, and returns how
 * many had to be killed. */
int th_end_marked(const char *mark, double timeout);

/* A cluster of tests/support/cluster: `kind` "slurm" or "ssh", `nodes` nodes n0.., its
 * state in a directory under TMPDIR. `config` is the script's line for it ("SLURM_CONF=..."
 * or "DDP_SSH_CONFIG=..."), `tag` names its namespaces (dds<tag>n<i>). Fails the test when
 * the cluster cannot be brought up; th_cluster_down removes everything. */
typedef struct {
    char dir[512], script[512], config[700], tag[32];
} th_cluster_t;
void th_cluster_up(th_cluster_t *c, const char *kind, int nodes);
void th_cluster_down(th_cluster_t *c);
/* The address of this machine on the cluster's bridge, which every node reaches (its
 * controller's: 10.T.U.254), into addr[cap]. */
void th_cluster_bridge_addr(const th_cluster_t *c, char *addr, size_t cap);

/* A cluster of `n` (1..TH_ETCD_MAX) real etcd members (Debian's etcd-server) on loopback
 * ports, their data under the test's TMPDIR, each member a process the test ends (teardown
 * kills what is left). `endpoints` is "127.0.0.1:P0,127.0.0.1:P1,...". th_etcd_up returns
 * once every member answers (the test skips where etcd is not installed); th_etcd_kill
 * signals member i (SIGKILL waits for its end); th_etcd_leader is the index of the member
 * that leads now (-1: none within `timeout` s); th_etcd_down ends every member. */
#define TH_ETCD_MAX 5
typedef struct {
    int n;
    th_proc_t member[TH_ETCD_MAX];
    bool running[TH_ETCD_MAX];
    int client_port[TH_ETCD_MAX], peer_port[TH_ETCD_MAX];
    char endpoints[TH_ETCD_MAX * 24], dir[480];
    char certs[512]; /* th_etcd_up_tls: where tests/support/make-certs made them; else "" */
    char host[48];   /* where clients reach it: 127.0.0.1, or th_etcd_up_at's */
} th_etcd_t;
void th_etcd_up(th_etcd_t *c, int n);
/* As th_etcd_up, its clients served at `host` (an address of this machine that other
 * network namespaces reach: a test cluster's bridge). */
void th_etcd_up_at(th_etcd_t *c, int n, const char *host);
/* As th_etcd_up, its clients served over https only, with client certificates the test's
 * CA signed (c->certs: ca.pem, client.pem, client-key.pem; other-ca.pem signed nothing). */
void th_etcd_up_tls(th_etcd_t *c, int n);
/* Every member killed and started again at its ports from an empty data directory: the
 * cluster's keys and leases gone, its revision back to 1. */
void th_etcd_wipe(th_etcd_t *c);
void th_etcd_kill(th_etcd_t *c, int i, int sig);
int th_etcd_leader(th_etcd_t *c, double timeout);
void th_etcd_down(th_etcd_t *c);
/* etcdctl `args` against every endpoint of the cluster (its TLS files where it has them):
 * its output (stdout and stderr) into out[cap], and its wait status. */
int th_etcdctl(const th_etcd_t *c, const char *args, char *out, size_t cap);

/* A web server that is not etcd (Python's http.server) on 127.0.0.1:`port`, serving once
 * this returns; the test ends it (th_cleanup). */
void th_web_server(th_proc_t *p, int port);

/* A TCP port of 127.0.0.1 that was free a moment ago. */
int th_free_port(void);

/* Seconds on the monotonic clock. */
double th_now(void);
/* Whether the tests run built with AddressSanitizer (launches ten times as slow: a test may
 * take fewer samples of one path there). */
bool th_sanitized(void);
/* Whether our programs run under a tool (DDP_TEST_WRAPPER: the valgrind test setup). */
bool th_wrapped(void);

/* ||a - b|| / ||a|| of two files of float32 (parameter dumps); asserts both hold the
 * same number, over 1000. */
double th_relative_difference(const char *a_path, const char *b_path);

/* A torch flavour's python, for the tests with real PyTorch. */
typedef struct {
    char version[64];   /* the torch version its processes report */
    char python[1024];  /* the interpreter, or a wrapper that runs it (PYTHON_EXEC) */
    const char *env[4]; /* what its processes need, NULL-terminated: PYTHON_EXEC, ... */
    char exec_var[1100], root_var[1100];
} th_torch_t;

/* Makes the python of `flavour` ready: "1.13" DDP_TEST_PYTHON's (Debian bookworm's torch),
 * "2.6" the wrapper that runs the python of Debian trixie's root (tests/torch26, the root
 * built on first use), "python" DDP_TEST_TORCH_PYTHON's, any torch. Exits 77, saying why,
 * where it cannot be. */
void th_torch_prepare(th_torch_t *t, const char *flavour);

/* Asserts with the process's output shown when `cond` is false. */
#define TH_ASSERT(p, cond)                                    \
    do {                                                      \
        if (!(cond)) {                                        \
            th_dump(p);                                       \
            fail_msg("%s:%d: %s", __FILE__, __LINE__, #cond); \
        }                                                     \
    } while (0)

#endif
