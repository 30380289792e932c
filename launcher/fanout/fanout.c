/* One launcher on every node through srun (see fanout.h). */
#include "fanout/fanout.h"

#include "buf.h"
#include "env.h"
#include "error.h"
#include "io.h"
#include "parse.h"
#include "config/slurm.h"
#include "fanout/session.h"
#include "host/proc.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int ddp_shell_word(ddp_buf_t *out, const char *word)
{
    bool plain = *word != '\0';
    for (const char *p = word; *p && plain; p++)
        plain = strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:,+@%",
                       *p) != NULL;
    if (plain)
        return ddp_buf_puts(out, word);
    int err = ddp_buf_puts(out, "'");
    for (const char *p = word; *p && err == 0; p++)
        err = *p == '\'' ? ddp_buf_puts(out, "'\\''") : ddp_buf_append(out, p, 1);
    return err ? err : ddp_buf_puts(out, "'");
}

/* Whether `arg` is the flag called `name`, alone or with "=VALUE" ('_' for '-' too). */
static bool is_flag(const char *arg, const char *name, bool *with_value)
{
    if (strncmp(arg, "--", 2) != 0)
        return false;
    arg += 2;
    for (; *name != '\0'; name++, arg++)
        if (*arg != *name && !(*name == '-' && *arg == '_'))
            return false;
    *with_value = *arg == '=';
    return *arg == '\0' || *arg == '=';
}

/* The launcher's arguments as another node gets them: its --env entries with this
 * node's values (NAME=VALUE), then the arguments without --dry-run, --hosts, --hostfile,
 * --env and --env-list (and their values) before the script at argv[script]. */
static void own_args(ddp_buf_t *out, const ddp_launch_config_t *cfg, int argc, char **argv,
                     int script)
{
    static const char *const dropped[] = {"hosts", "hostfile", "env", "env-list"};
    for (int i = 0; i < cfg->nenv; i++) {
        ddp_buf_puts(out, " --env ");
        ddp_shell_word(out, cfg->env_set[i]);
    }
    for (int i = 1; i < argc; i++) {
        bool with_value = false, drop = i < script && is_flag(argv[i], "dry-run", &with_value);
        for (size_t k = 0; k < sizeof dropped / sizeof dropped[0] && i < script && !drop; k++) {
            drop = is_flag(argv[i], dropped[k], &with_value);
            i += drop && !with_value; /* its value */
        }
        if (drop)
            continue;
        ddp_buf_puts(out, " ");
        ddp_shell_word(out, argv[i]);
    }
}

typedef struct {
    ddp_buf_t *out;
    const ddp_launch_config_t *cfg;
    const char *self, *first;
    int nodes, index, port, argc, script;
    char **argv;
} node_line_t;

static int node_line(void *ctx, const char *host)
{
    node_line_t *n = ctx;
    if (n->cfg->rdzv_backend == DDP_RDZV_ETCD) /* the same on every node: etcd places them */
        ddp_buf_printf(n->out, "  on %s: %s --nnodes=%d:%d%s", host, n->self,
                       n->cfg->nnodes_max > 1 ? n->cfg->nnodes_min : n->nodes, n->nodes,
                       n->cfg->run_id == NULL || strcmp(n->cfg->run_id, "none") == 0
                           ? " --rdzv-id=slurm-<job>.<step>"
                           : "");
    else
        ddp_buf_printf(n->out, "  on %s: %s --nnodes=%d --node-rank=%d --master-addr=%s", host,
                       n->self, n->nodes, n->index, n->first);
    if (n->port > 0 && n->cfg->rdzv_backend != DDP_RDZV_ETCD) /* the step id gives the port */
        ddp_buf_printf(n->out, " --master-port=<%d + (job + %d x step) mod %d>",
                       DDP_SLURM_PORT_BASE, DDP_SLURM_STEP_STRIDE, DDP_SLURM_PORT_SPAN);
    own_args(n->out, n->cfg, n->argc, n->argv, n->script);
    ddp_buf_puts(n->out, "\n");
    return ++n->index >= n->nodes;
}

static int dry_run(const ddp_launch_config_t *cfg, int argc, char **argv, char *const *envp,
                   char *const *srun, int fd)
{
    const char *list = ddp_env_lookup(envp, ddp_env_name(DDP_ENV_SLURM_JOB_NODELIST)),
               *job = ddp_env_lookup(envp, ddp_env_name(DDP_ENV_SLURM_JOB_ID));
    ddp_buf_t out = DDP_BUF_INIT, why = DDP_BUF_INIT;
    char first[256] = "?";
    ddp_buf_printf(&out,
                   "Slurm job %s, %d nodes (%s); outside a step: one ddp-launch a node "
                   "through srun:\n ",
                   job, cfg->slurm_fanout, list != NULL ? list : "?");
    for (int i = 0; i < 6 && srun[i] != NULL; i++) {
        ddp_buf_puts(&out, " ");
        ddp_shell_word(&out, srun[i]);
    }
    int script = (int)(cfg->script_args - argv) - 1;
    own_args(&out, cfg, argc, argv, script);
    ddp_buf_puts(&out, "\neach node then runs, as Slurm's variables make it:\n");
    node_line_t n = {&out, cfg,    srun[5], first, cfg->slurm_fanout, 0, ddp_slurm_port(job, NULL),
                     argc, script, argv};
    if (list != NULL && ddp_slurm_first_host(list, first, sizeof first, &why) == 0)
        (void)ddp_slurm_hostlist_each(list, node_line, &n, &why);
    if (why.len > 0)
        ddp_buf_printf(&out, "  (SLURM_JOB_NODELIST: %s)\n", ddp_buf_str(&why));
    int err = ddp_write_all(fd, out.data, out.len);
    ddp_buf_free(&out);
    ddp_buf_free(&why);
    return err == 0 ? DDP_EXIT_OK : DDP_EXIT_LAUNCH_FAILED;
}

/* In a batch script, this host is the allocation's first node, so a training script or
 * program missing here is missing on a node of the job: said once, before srun starts a
 * launcher on every node that would each say it (salloc's shell may be on a login host
 * that is not a node: nothing is decided there). */
static int missing_on_first_node(const ddp_launch_config_t *cfg, const ddp_log_t *log)
{
    const char *node = ddp_env_get(DDP_ENV_SLURMD_NODENAME);
    char *found = NULL, cwd[PATH_MAX];
    if (node == NULL || cfg->module || cfg->dry_run)
        return 0;
    int err = 0;
    if (!cfg->no_python || cfg->run_path)
        err = access(cfg->script, F_OK) == 0 ? 0 : -errno;
    else
        err = ddp_proc_find(cfg->script, ddp_env_get(DDP_ENV_PATH), &found);
    free(found);
    if (err != -ENOENT)
        return 0;
    bool program = cfg->no_python && !cfg->run_path;
    ddp_log_error(log,
                  "%s %s %s on %s, the first node of the allocation (in %s): not starting the "
                  "job on its %d nodes (every node needs it at the same path)",
                  program ? "the program" : "the training script", cfg->script,
                  program && strchr(cfg->script, '/') == NULL ? "is not on PATH" : "does not exist",
                  node, getcwd(cwd, sizeof cwd) != NULL ? cwd : "?", cfg->slurm_fanout);
    return DDP_EXIT_NOT_FOUND;
}

int ddp_fanout_slurm(const ddp_launch_config_t *cfg, int argc, char **argv, char *const *envp,
                     int fd, const ddp_log_t *log)
{
    char self[PATH_MAX], nodes[32], tasks[32], *srun_path = NULL;
    int missing = missing_on_first_node(cfg, log);
    if (missing != 0)
        return missing;
    int err = ddp_proc_self(self, sizeof self);
    if (err) {
        ddp_log_error(log, "unable to find this ddp-launch's own path (/proc/self/exe): %s",
                      strerror(-err));
        return DDP_EXIT_LAUNCH_FAILED;
    }
    err = ddp_proc_find("srun", ddp_env_get(DDP_ENV_PATH), &srun_path);
    if (err) {
        ddp_log_error(log,
                      "inside a Slurm allocation of %d nodes (outside a step), ddp-launch starts "
                      "itself on each node with srun, which is not on PATH: %s (or start one "
                      "ddp-launch a node yourself)",
                      cfg->slurm_fanout, ddp_strerror(err));
        return DDP_EXIT_NOT_FOUND;
    }
    snprintf(nodes, sizeof nodes, "--nodes=%d", cfg->slurm_fanout);
    snprintf(tasks, sizeof tasks, "--ntasks=%d", cfg->slurm_fanout);
    char **args = calloc((size_t)argc + 7, sizeof *args);
    if (args == NULL) {
        free(srun_path);
        return DDP_EXIT_LAUNCH_FAILED;
    }
    /* No --kill-on-bad-exit: the nodes end together through the rendezvous, each with its
     * own report (srun would kill the others mid-way, as they forward a signal). */
    /* --label: each node's lines (its launcher's and its workers') carry its task
     * number, as the nodes' launchers print alike and would interleave unnamed. */
    char *head[] = {srun_path, nodes, tasks, "--ntasks-per-node=1", "--label", self};
    memcpy(args, head, sizeof head);
    memcpy(args + 6, argv + 1, (size_t)(argc - 1) * sizeof *args);
    int code;
    if (cfg->dry_run) {
        code = dry_run(cfg, argc, argv, envp, args, fd);
    } else {
        ddp_log_info(log,
                     "Slurm allocation of %d nodes, outside a step: starting one ddp-launch a "
                     "node with %s %s %s --ntasks-per-node=1",
                     cfg->slurm_fanout, srun_path, nodes, tasks);
        execv(srun_path, args);
        ddp_log_error(log, "unable to execute %s: %s", srun_path, strerror(errno));
        code = errno == ENOENT ? DDP_EXIT_NOT_FOUND : DDP_EXIT_NOT_EXECUTABLE;
    }
    free(args);
    free(srun_path);
    return code;
}

/* --hosts and --hostfile: node 0 here, the others over ssh. */

static int add_host(ddp_fanout_hosts_t *h, const char *name, int slots)
{
    char **names = realloc(h->names, (size_t)(h->n + 1) * sizeof *names);
    if (names == NULL)
        return -ENOMEM;
    h->names = names;
    int *counts = realloc(h->slots, (size_t)(h->n + 1) * sizeof *counts);
    if (counts == NULL)
        return -ENOMEM;
    h->slots = counts;
    if ((h->names[h->n] = strdup(name)) == NULL)
        return -ENOMEM;
    h->slots[h->n++] = slots;
    return 0;
}

/* One host as a line or --hosts names it: [USER@]HOST, with `slots` (0: none), or
 * HOST:N, MPICH's and Horovod's way to give its slots. A name that begins with '-' would
 * be an option to ssh. 0, -ENOMEM, or DDP_EPARSE with the reason in `why`. */
static int add_entry(ddp_fanout_hosts_t *out, const char *word, long slots, ddp_buf_t *why)
{
    char name[1024];
    if (snprintf(name, sizeof name, "%s", word) >= (int)sizeof name) {
        ddp_buf_printf(why, "a host name is over %zu characters", sizeof name - 1);
        return DDP_EPARSE;
    }
    char *colon = strchr(name, ':'), *at = strrchr(name, '@');
    if (colon != NULL && strchr(colon + 1, ':') == NULL) { /* one colon: no IPv6 address */
        long n = 0;
        if (ddp_parse_long(colon + 1, 1, 1 << 20, &n) != 0 || slots > 0) {
            ddp_buf_printf(why, "'%s' is not HOST:N (N a count from 1, and no slots=N beside)",
                           word);
            return DDP_EPARSE;
        }
        *colon = '\0';
        slots = n;
    }
    if (name[0] == '-' || name[0] == '\0' || (at != NULL && at[1] == '\0')) {
        ddp_buf_printf(why, "'%s' is no host name%s", word,
                       name[0] == '-' ? " (ssh would take it for an option)" : "");
        return DDP_EPARSE;
    }
    return add_host(out, name, (int)slots) != 0 ? -ENOMEM : 0;
}

typedef struct {
    ddp_fanout_hosts_t *out;
    ddp_buf_t *why;
    int err;
} emit_ctx_t;

static int emit_host(void *ctx, const char *host)
{
    emit_ctx_t *e = ctx;
    e->err = add_entry(e->out, host, 0, e->why);
    return e->err != 0;
}

int ddp_fanout_parse_hostfile(const char *text, ddp_fanout_hosts_t *out, ddp_buf_t *why)
{
    int number = 0;
    for (const char *p = text; *p != '\0';) {
        const char *end = strchr(p, '\n');
        size_t len = end != NULL ? (size_t)(end - p) : strlen(p);
        char line[1024], *save, *word;
        number++;
        if (len >= sizeof line) {
            ddp_buf_printf(why, "line %d is over %zu characters", number, sizeof line - 1);
            return DDP_EPARSE;
        }
        memcpy(line, p, len);
        line[len] = '\0';
        p += len + (end != NULL);
        char *hash = strchr(line, '#');
        if (hash != NULL)
            *hash = '\0';
        char *host = strtok_r(line, " \t\r", &save);
        if (host == NULL)
            continue;
        long slots = 0, most = 0;
        while ((word = strtok_r(NULL, " \t\r", &save)) != NULL) {
            /* Open MPI's max_slots (max-slots) is taken, and held against slots. */
            bool max = strncmp(word, "max_slots=", 10) == 0 || strncmp(word, "max-slots=", 10) == 0;
            if ((max && ddp_parse_long(word + 10, 1, 1 << 20, &most)) ||
                (!max && (strncmp(word, "slots=", 6) != 0 ||
                          ddp_parse_long(word + 6, 1, 1 << 20, &slots)))) {
                ddp_buf_printf(why, "line %d: '%s' is not slots=N or max_slots=N (a count from 1)",
                               number, word);
                return DDP_EPARSE;
            }
        }
        if (most > 0 && slots > most) {
            ddp_buf_printf(why, "line %d: slots=%ld is over its max_slots=%ld", number, slots,
                           most);
            return DDP_EPARSE;
        }
        ddp_buf_t bad = DDP_BUF_INIT;
        int err = add_entry(out, host, slots, &bad);
        if (err == DDP_EPARSE)
            ddp_buf_printf(why, "line %d: %s", number, ddp_buf_str(&bad));
        ddp_buf_free(&bad);
        if (err != 0)
            return err;
    }
    if (out->n == 0) {
        ddp_buf_puts(why, "it names no host");
        return DDP_EPARSE;
    }
    return 0;
}

void ddp_fanout_hosts_free(ddp_fanout_hosts_t *hosts)
{
    for (int i = 0; i < hosts->n; i++)
        free(hosts->names[i]);
    free(hosts->names);
    free(hosts->slots);
    memset(hosts, 0, sizeof *hosts);
}

int ddp_fanout_hosts(ddp_launch_config_t *cfg, ddp_fanout_hosts_t *out, ddp_buf_t *err)
{
    ddp_buf_t why = DDP_BUF_INIT;
    const char *origin = cfg->hosts != NULL ? "--hosts" : "--hostfile";
    int rc;
    memset(out, 0, sizeof *out);
    if (cfg->hosts != NULL) {
        emit_ctx_t e = {out, &why, 0};
        rc = ddp_slurm_hostlist_each(cfg->hosts, emit_host, &e, &why);
        rc = rc != 0 ? rc : e.err;
    } else {
        char *text = NULL;
        size_t len;
        rc = ddp_read_file(cfg->hostfile, 1 << 20, &text, &len);
        if (rc != 0)
            ddp_buf_printf(&why, "cannot read %s: %s", cfg->hostfile, ddp_strerror(rc));
        else
            rc = ddp_fanout_parse_hostfile(text, out, &why);
        free(text);
    }
    if (rc == 0 && strlen(out->names[0]) >= sizeof cfg->master_addr) {
        ddp_buf_printf(&why, "the first host's name is over %zu characters",
                       sizeof cfg->master_addr - 1);
        rc = DDP_EPARSE;
    }
    bool etcd = cfg->rdzv_backend == DDP_RDZV_ETCD;
    if (rc == 0 && etcd && cfg->nnodes_max > out->n) {
        ddp_buf_printf(&why, "names %d host(s), fewer than --nnodes=%d:%d", out->n, cfg->nnodes_min,
                       cfg->nnodes_max);
        rc = DDP_EPARSE;
    }
    if (rc == 0 && !etcd && out->n > 1 && cfg->master_port == 0) {
        ddp_buf_puts(&why, "--master-port 0 (a free port) serves one node only: give a fixed port");
        rc = DDP_EPARSE;
    }
    if (rc != 0) {
        ddp_buf_printf(err, "%s: %s", origin, ddp_buf_str(&why));
        ddp_buf_free(&why);
        ddp_fanout_hosts_free(out);
        return DDP_EUSAGE;
    }
    ddp_buf_free(&why);
    if (!etcd || cfg->nnodes_max == 1) /* (etcd: as given, within the hosts' count) */
        cfg->nnodes_min = cfg->nnodes_max = out->n;
    cfg->node_rank = 0;
    const char *at = strrchr(out->names[0], '@'); /* the store's address: no ssh user */
    if (!etcd && strcmp(cfg->master_addr, "127.0.0.1") == 0)
        snprintf(cfg->master_addr, sizeof cfg->master_addr, "%s",
                 at != NULL ? at + 1 : out->names[0]);
    if (!cfg->nproc_per_node_given && out->slots[0] > 0) {
        cfg->nproc_kind = DDP_NPROC_INT;
        cfg->nproc_per_node = out->slots[0];
    }
    return 0;
}

/* What node i runs: the same launcher, its place given; for another node (`cwd` not
 * NULL), in this working directory. */
static void node_command(ddp_buf_t *cmd, const ddp_launch_config_t *cfg,
                         const ddp_fanout_hosts_t *hosts, int i, const char *self, const char *cwd,
                         int argc, char **argv)
{
    static const char *const passed[] = {"PYTHON_EXEC", "DDP_LAUNCH_LOG_LEVEL", "LOGLEVEL",
                                         "OMP_NUM_THREADS"};
    if (cwd != NULL) {
        ddp_buf_puts(cmd, "cd ");
        ddp_shell_word(cmd, cwd);
        ddp_buf_puts(cmd, " && exec ");
    }
    ddp_buf_puts(cmd, "env");
    if (cwd != NULL) /* its stdin is its ssh session's: it ends with the session */
        ddp_buf_puts(cmd, " DDP_LAUNCH_SSH_NODE=1");
    for (size_t k = 0; k < sizeof passed / sizeof passed[0]; k++) {
        const char *value = getenv(passed[k]);
        if (value == NULL)
            continue;
        ddp_buf_printf(cmd, " %s=", passed[k]);
        ddp_shell_word(cmd, value);
    }
    ddp_buf_puts(cmd, " ");
    ddp_shell_word(cmd, self);
    if (cfg->rdzv_backend == DDP_RDZV_ETCD) {
        /* None is special: the same job, etcd, run id and flags on every node. */
        ddp_buf_printf(cmd, " --nnodes=%d:%d --rdzv-id=", cfg->nnodes_min, cfg->nnodes_max);
        ddp_shell_word(cmd, cfg->run_id);
    } else {
        ddp_buf_printf(cmd, " --nnodes=%d --node-rank=%d --master-addr=", hosts->n, i);
        ddp_shell_word(cmd, cfg->master_addr);
        ddp_buf_printf(cmd, " --master-port=%d", cfg->master_port);
    }
    if (!cfg->nproc_per_node_given && hosts->slots[i] > 0)
        ddp_buf_printf(cmd, " --nproc-per-node=%d", hosts->slots[i]);
    own_args(cmd, cfg, argc, argv, (int)(cfg->script_args - argv) - 1);
}

/* The ssh command's words: DDP_LAUNCH_SSH split at blanks (default ssh), then
 * -o BatchMode=yes HOST COMMAND. Its stdin is a pipe of the supervisor's (start_ssh). */
static char **ssh_argv(const char *host, const char *command, char *words)
{
    char **argv = calloc(64, sizeof *argv), *save;
    int n = 0;
    if (argv == NULL)
        return NULL;
    for (char *w = strtok_r(words, " \t", &save); w != NULL && n < 56;
         w = strtok_r(NULL, " \t", &save))
        argv[n++] = w;
    if (n == 0)
        argv[n++] = "ssh";
    argv[n++] = "-o";
    argv[n++] = "BatchMode=yes";
    argv[n++] = (char *)host;
    argv[n++] = (char *)command;
    return argv;
}

static int fanout_dry_run(const ddp_launch_config_t *cfg, const ddp_fanout_hosts_t *hosts, int argc,
                          char **argv, const char *self, const char *cwd, int fd)
{
    ddp_buf_t out = DDP_BUF_INIT;
    for (int i = 0; i < hosts->n; i++) {
        ddp_buf_t cmd = DDP_BUF_INIT;
        node_command(&cmd, cfg, hosts, i, self, i == 0 ? NULL : cwd, argc, argv);
        char *words = i == 0 ? NULL : strdup(ddp_env_get(DDP_ENV_DDP_LAUNCH_SSH));
        char **ssh = words != NULL ? ssh_argv(hosts->names[i], ddp_buf_str(&cmd), words) : NULL;
        ddp_buf_printf(&out, "node %d (%s%s):", i, hosts->names[i], i == 0 ? ", here" : "");
        if (i == 0)
            ddp_buf_printf(&out, " %s", ddp_buf_str(&cmd));
        for (int k = 0; ssh != NULL && ssh[k] != NULL; k++) { /* what start_ssh runs */
            ddp_buf_puts(&out, " ");
            ddp_shell_word(&out, ssh[k]);
        }
        ddp_buf_puts(&out, "\n");
        free(ssh);
        free(words);
        ddp_buf_free(&cmd);
    }
    int err = ddp_write_all(fd, out.data, out.len);
    ddp_buf_free(&out);
    return err == 0 ? DDP_EXIT_OK : DDP_EXIT_LAUNCH_FAILED;
}

#define SSH_GRACE  5.0  /* s: a node's ssh failed, the job has not ended: node 0 is ended */
#define SSH_LINGER 30.0 /* s: node 0 has ended, the other nodes' ssh sessions have not */

typedef struct {
    const ddp_fanout_hosts_t *hosts;
    const ddp_log_t *log;
    pid_t node0, *pids; /* pids[i] for node i >= 1; 0 once reaped */
    int *session;       /* session[i]: the write end of node i's ssh stdin; -1 closed */
    int code0, first_remote_code, left;
    double failed_at, node0_ended_at;
    bool node0_done, ended_node0, closed_sessions, sent_term, sent_kill;
    /* etcd: node 0 is a node like the others, whose loss the job survives; a node that
     * ended 0 saw the job complete. The job is ended only when fewer than `min_nodes`
     * can still run (`failed`: the other nodes whose ssh could not start or ended). */
    bool etcd, remote_ok;
    int failed, min_nodes;
} supervisor_t;

/* Node i's ssh could not start or ended with a failure while the job runs: the job ends
 * (node 0 gets SIGTERM after SSH_GRACE), but with etcd only where too few nodes are left
 * for it to go on. */
static void remote_failed(supervisor_t *s, int i, double now)
{
    s->failed++;
    if (s->etcd && s->hosts->n - s->failed >= s->min_nodes) {
        ddp_log_warn(s->log,
                     "node %d (%s) is out of the job, which goes on at the other %d node(s) "
                     "(--rdzv-backend=etcd; it needs %d)",
                     i, s->hosts->names[i], s->hosts->n - s->failed, s->min_nodes);
        return;
    }
    if (s->failed_at < 0)
        s->failed_at = now;
}

static int status_code(int status)
{
    return WIFEXITED(status) ? WEXITSTATUS(status) : DDP_EXIT_SIGNAL_BASE + WTERMSIG(status);
}

static void reap(supervisor_t *s, double now)
{
    int status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
        int code = status_code(status);
        if (pid == s->node0) {
            s->code0 = code;
            s->node0_done = true;
            s->node0_ended_at = now;
            continue;
        }
        for (int i = 1; i < s->hosts->n; i++) {
            if (s->pids[i] != pid)
                continue;
            s->pids[i] = 0;
            s->left--;
            if (code != 0 && s->first_remote_code == 0)
                s->first_remote_code = code;
            s->remote_ok = s->remote_ok || code == 0;
            if (code != 0 && !s->node0_done) {
                ddp_log_error(
                    s->log, "node %d (%s): its ssh ended with status %d while the job runs%s", i,
                    s->hosts->names[i], code,
                    code == 255   ? " (ssh could not run it: its message is above)"
                    : code == 127 ? " (its shell found no ddp-launch at this one's path: it must "
                                    "be installed at the same path on every host, as in a venv "
                                    "on a shared file system)"
                    : code == 126 ? " (its shell could not execute ddp-launch there)"
                                  : "");
                remote_failed(s, i, now);
            }
        }
    }
}

/* Node i's ssh stdin's end word (DDP_SESSION_END: else a node that ssh started less than
 * 2 s before would take the end for ssh -n's), never blocking; an ssh gone meanwhile (its
 * pipe's SIGPIPE, blocked here, is taken back) is no error. */
static void tell_end(int fd)
{
    static const char end = DDP_SESSION_END;
    sigset_t sigpipe, old;
    struct timespec none = {0, 0};
    sigemptyset(&sigpipe);
    sigaddset(&sigpipe, SIGPIPE);
    sigprocmask(SIG_BLOCK, &sigpipe, &old);
    if (fcntl(fd, F_SETFL, O_NONBLOCK) == 0 && write(fd, &end, 1) < 0 && errno == EPIPE)
        while (sigtimedwait(&sigpipe, NULL, &none) == SIGPIPE) {
        }
    sigprocmask(SIG_SETMASK, &old, NULL);
}

/* Closes every node's ssh stdin (where `tell`, its end word first): ssh passes the end on,
 * and a launcher started over ssh ends as on a hangup when its stdin ends
 * (fanout/session.c), whatever its rendezvous is doing. */
static void close_sessions(supervisor_t *s, bool tell)
{
    for (int i = 1; i < s->hosts->n; i++) {
        if (s->session[i] >= 0 && tell)
            tell_end(s->session[i]);
        if (s->session[i] >= 0)
            close(s->session[i]);
        s->session[i] = -1;
    }
}

static void deadlines(supervisor_t *s, double now)
{
    if (!s->node0_done && s->failed_at >= 0 && now - s->failed_at >= SSH_GRACE && !s->ended_node0) {
        ddp_log_error(s->log,
                      "a node of the job is not running: ending the job (SIGTERM to node 0)");
        kill(s->node0, SIGTERM);
        s->ended_node0 = true;
    }
    if (!s->node0_done || s->left == 0 || (s->etcd && s->code0 != 0))
        return;
    /* Node 0 failed (at start, say, before its store could tell anyone): the others'
     * launchers would wait out the rendezvous timeout for it; they end after a grace.
     * (etcd: the job goes on without it, on the others, which end by themselves.) */
    double linger = s->code0 != 0 ? SSH_GRACE : SSH_LINGER, since = now - s->node0_ended_at;
    if (since < linger)
        return;
    if (!s->closed_sessions) {
        ddp_log_warn(s->log,
                     "%d node(s) still running %g s after node 0 ended (status %d): closing "
                     "their ssh sessions' input, which ends their launchers",
                     s->left, linger, s->code0);
        close_sessions(s, true);
        s->closed_sessions = true;
    }
    int sig = since < linger + 2 * SSH_GRACE ? SIGTERM : SIGKILL;
    if (since < linger + SSH_GRACE || (sig == SIGTERM && s->sent_term) ||
        (sig == SIGKILL && s->sent_kill))
        return;
    ddp_log_warn(s->log, "%d node(s)' ssh still running %g s after node 0 ended: sending %s",
                 s->left, since, sig == SIGTERM ? "SIGTERM" : "SIGKILL");
    for (int i = 1; i < s->hosts->n; i++)
        if (s->pids[i] > 0)
            kill(-s->pids[i], sig);
    s->sent_term = true;
    s->sent_kill = sig == SIGKILL;
}

/* A child of the supervisor ends with it, however it ends (SIGKILL included): node 0's
 * launcher then ends the job on every node, as on a signal, and an ssh takes its remote
 * side with it. Called between fork and exec (or node 0's return). */
static void die_with(pid_t supervisor)
{
    if (prctl(PR_SET_PDEATHSIG, SIGTERM) != 0 || getppid() != supervisor)
        raise(SIGTERM); /* gone already (or no way to know when it goes) */
}

/* Starts node i's ssh in a process group of its own (a Ctrl-C at the terminal is node
 * 0's to forward; the other nodes hear of it through the store). Its stdin is a pipe
 * whose write end (*session) only the supervisor holds: nothing is written, and the end
 * of the supervisor, however it ends, is the end of the remote launcher's stdin. */
static pid_t start_ssh(const ddp_launch_config_t *cfg, const ddp_fanout_hosts_t *hosts, int i,
                       const char *self, const char *cwd, int argc, char **argv,
                       const sigset_t *old, const ddp_log_t *log, int *session)
{
    ddp_buf_t cmd = DDP_BUF_INIT;
    char *words = strdup(ddp_env_get(DDP_ENV_DDP_LAUNCH_SSH));
    int input[2] = {-1, -1};
    node_command(&cmd, cfg, hosts, i, self, cwd, argc, argv);
    char **args = words != NULL ? ssh_argv(hosts->names[i], ddp_buf_str(&cmd), words) : NULL;
    pid_t supervisor = getpid();
    pid_t pid = args != NULL && pipe2(input, O_CLOEXEC) == 0 ? fork() : -1;
    if (pid == 0) {
        /* The supervisor has one thread and no handlers: the dispositions are defaults. */
        setpgid(0, 0);
        sigprocmask(SIG_SETMASK, old, NULL);
        die_with(supervisor);
        if (dup2(input[0], STDIN_FILENO) < 0)
            _exit(126);
        execvp(args[0], args);
        _exit(127);
    }
    int err = pid < 0 ? (args == NULL ? ENOMEM : errno) : 0;
    if (input[0] >= 0)
        close(input[0]);
    *session = pid > 0 ? input[1] : -1;
    if (pid <= 0 && input[1] >= 0)
        close(input[1]);
    if (err != 0) {
        ddp_log_error(log, "node %d (%s): unable to run %s: %s", i, hosts->names[i],
                      args != NULL ? args[0] : "ssh", strerror(err));
        pid = -1;
    } else {
        ddp_log_info(log, "node %d (%s): started over ssh", i, hosts->names[i]);
    }
    free(args);
    free(words);
    ddp_buf_free(&cmd);
    return pid;
}

int ddp_fanout_ssh(const ddp_launch_config_t *cfg, const ddp_fanout_hosts_t *hosts, int argc,
                   char **argv, int fd, const ddp_log_t *log, bool *run_here)
{
    static const int forwarded[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};
    char self[PATH_MAX], cwd[PATH_MAX];
    int err = ddp_proc_self(self, sizeof self);
    *run_here = false;
    if (err == 0 && getcwd(cwd, sizeof cwd) == NULL)
        err = -errno;
    if (err) {
        ddp_log_error(log, "unable to find this ddp-launch's path or working directory: %s",
                      strerror(-err));
        return DDP_EXIT_LAUNCH_FAILED;
    }
    if (cfg->dry_run)
        return fanout_dry_run(cfg, hosts, argc, argv, self, cwd, fd);
    sigset_t mask, old;
    sigemptyset(&mask);
    sigaddset(&mask, SIGCHLD);
    for (size_t k = 0; k < sizeof forwarded / sizeof forwarded[0]; k++)
        sigaddset(&mask, forwarded[k]);
    sigprocmask(SIG_BLOCK, &mask, &old);
    supervisor_t s = {.hosts = hosts,
                      .log = log,
                      .failed_at = -1,
                      .left = 0,
                      .etcd = cfg->rdzv_backend == DDP_RDZV_ETCD,
                      .min_nodes = cfg->nnodes_min};
    s.pids = calloc((size_t)hosts->n, sizeof *s.pids);
    s.session = calloc((size_t)hosts->n, sizeof *s.session);
    pid_t supervisor = getpid();
    s.node0 = s.pids != NULL && s.session != NULL ? fork() : -1;
    if (s.node0 == 0) {
        sigprocmask(SIG_SETMASK, &old, NULL);
        die_with(supervisor);
        free(s.pids);
        free(s.session);
        *run_here = true;
        return DDP_EXIT_OK;
    }
    if (s.node0 < 0) {
        ddp_log_error(log, "unable to start node 0: %s", strerror(errno));
        sigprocmask(SIG_SETMASK, &old, NULL);
        free(s.pids);
        free(s.session);
        return DDP_EXIT_LAUNCH_FAILED;
    }
    for (int i = 1; i < hosts->n; i++) {
        s.pids[i] = start_ssh(cfg, hosts, i, self, cwd, argc, argv, &old, log, &s.session[i]);
        if (s.pids[i] > 0)
            s.left++;
        else /* (where the job ends for it, at once) */
            remote_failed(&s, i, ddp_clock_mono() - SSH_GRACE);
    }
    while (!s.node0_done || s.left > 0) {
        struct timespec tick = {0, 200 * 1000 * 1000};
        int sig = sigtimedwait(&mask, NULL, &tick);
        if (sig > 0 && sig != SIGCHLD && !s.node0_done)
            kill(s.node0, sig); /* node 0 ends the job on every node */
        else if (sig > 0 && sig != SIGCHLD && s.etcd && !s.closed_sessions) {
            /* etcd, node 0 gone: the others end as on a hangup */
            close_sessions(&s, true);
            s.closed_sessions = true;
        }
        double now = ddp_clock_mono();
        reap(&s, now);
        deadlines(&s, now);
    }
    sigprocmask(SIG_SETMASK, &old, NULL);
    close_sessions(&s, false); /* (every node has ended) */
    free(s.pids);
    free(s.session);
    if (s.ended_node0)
        return DDP_EXIT_RDZV_FAILED;
    if (s.etcd && (s.code0 == 0 || s.remote_ok)) /* the job completed (another node lost) */
        return DDP_EXIT_OK;
    return s.code0 != 0 ? s.code0 : s.first_remote_code;
}
