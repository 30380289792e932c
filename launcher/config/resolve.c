/* The configuration's resolution, after parsing and before the job (see resolve.h). */
#include "config/resolve.h"

#include "host/devices.h"
#include "env.h"
#include "error.h"
#include "io.h"
#include "netaddr.h"
#include "config/pyscan.h"
#include "host/proc.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* CPUs this process may run on (its affinity, as set by Slurm or taskset). */
static int usable_cpus(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
        return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

static int random_run_id(char **out)
{
    char text[37];
    int err = ddp_random_uuid(text);
    if (err != 0)
        return err;
    char *copy = strdup(text);
    if (copy == NULL)
        return -ENOMEM;
    free(*out);
    *out = copy;
    return 0;
}

/* Whether a program's name is a Python interpreter's: python, python3.11, pypy3. */
static bool python_name(const char *path)
{
    const char *base = strrchr(path, '/') != NULL ? strrchr(path, '/') + 1 : path;
    size_t n = strncmp(base, "python", 6) == 0 ? 6 : strncmp(base, "pypy", 4) == 0 ? 4 : 0;
    return n > 0 && base[n + strspn(base + n, "0123456789.")] == '\0';
}

/* Installed by pip in a virtual environment (bin/../pyvenv.cfg) or a conda one
 * (bin/../conda-meta), ddp-launch runs scripts with that environment's python, as the
 * torchrun installed there would (its sys.executable), whether the environment is
 * activated or not: PATH's python3 may have no torch, or another. PYTHON_EXEC chooses. */
static void resolve_python(ddp_launch_config_t *cfg, const ddp_log_t *log)
{
    static const char *const marks[] = {"pyvenv.cfg", "conda-meta"};
    static const char *const names[] = {"python3", "python"};
    char self[PATH_MAX], *slash;
    if (cfg->python_exec_given || (cfg->no_python && !cfg->run_path) ||
        ddp_proc_self(self, sizeof self) != 0 || (slash = strrchr(self, '/')) == NULL)
        return;
    *slash = '\0';
    char file[PATH_MAX + 32];
    bool environment = false;
    for (size_t k = 0; k < sizeof marks / sizeof marks[0] && !environment; k++) {
        snprintf(file, sizeof file, "%s/../%s", self, marks[k]);
        environment = access(file, F_OK) == 0;
    }
    for (size_t k = 0; k < sizeof names / sizeof names[0] && environment; k++) {
        snprintf(file, sizeof file, "%s/%s", self, names[k]);
        char *own = NULL, *on_path = NULL;
        if (ddp_proc_find(file, NULL, &own) != 0)
            continue;
        /* The same file (lstat: a venv's python is a link to the system's) is silent. */
        struct stat a, b;
        if (ddp_proc_find(cfg->python_exec, ddp_env_get(DDP_ENV_PATH), &on_path) != 0 ||
            lstat(own, &a) != 0 || lstat(on_path, &b) != 0 || a.st_dev != b.st_dev ||
            a.st_ino != b.st_ino)
            ddp_log_info(log,
                         "running Python scripts with %s, the python of the environment "
                         "ddp-launch is installed in (PATH's %s is %s; PYTHON_EXEC chooses "
                         "another)",
                         own, cfg->python_exec, on_path != NULL ? on_path : "not found");
        free(on_path);
        free(cfg->python_found);
        cfg->python_exec = cfg->python_found = own;
        return;
    }
}

/* A bare name that is no file here but a program on PATH ("ddp-launch hostname", as
 * with mpirun), which torchrun would hand to python ("can't open file"): a Python
 * interpreter followed by a script ("ddp-launch python train.py") becomes PYTHON_EXEC
 * and that script (so -u, --local-rank-arg and warm restarts apply); another program
 * runs directly, as with --no-python. Each node resolves its own PATH. */
static void resolve_program_name(ddp_launch_config_t *cfg, const ddp_log_t *log)
{
    char *found = NULL;
    if (cfg->no_python || cfg->module || cfg->run_path || strchr(cfg->script, '/') != NULL ||
        access(cfg->script, F_OK) == 0 || errno != ENOENT ||
        ddp_proc_find(cfg->script, ddp_env_get(DDP_ENV_PATH), &found) != 0)
        return;
    if (python_name(cfg->script) && cfg->nscript_args > 0 && cfg->script_args[0][0] != '-') {
        ddp_log_info(log,
                     "%s is the interpreter %s: running the script %s with it, as PYTHON_EXEC=%s "
                     "would (ddp-launch runs a script with python itself)",
                     cfg->script, found, cfg->script_args[0], cfg->script);
        cfg->python_exec = cfg->script;
        cfg->python_exec_given = true;
        cfg->script = cfg->script_args[0];
        cfg->script_args++;
        cfg->nscript_args--;
    } else {
        ddp_log_info(log,
                     "%s is no file here but the program %s: running it directly, as --no-python "
                     "does",
                     cfg->script, found);
        cfg->no_python = true;
    }
    free(found);
}

/* Whether python could run the training script at all. A compiled program (ELF), or an
 * executable script whose #! line names neither python nor pypy, would fail in every
 * worker with a SyntaxError: it runs directly instead, as with --no-python. A script
 * that cannot be read is left to python, which says why. */
static void resolve_script(ddp_launch_config_t *cfg, const ddp_log_t *log)
{
    if (cfg->no_python || cfg->module || cfg->run_path)
        return;
    char head[256];
    ssize_t n = -1;
    int fd = open(cfg->script, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    struct stat st;
    if (fd >= 0) {
        if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode))
            n = read(fd, head, sizeof head - 1);
        close(fd);
    }
    if (n < 4)
        return;
    head[n] = '\0';
    const char *kind = NULL;
    if (memcmp(head, "\177ELF", 4) == 0) {
        kind = "a compiled program (ELF)";
    } else if (head[0] == '#' && head[1] == '!' && access(cfg->script, X_OK) == 0) {
        char *eol = strchr(head, '\n');
        if (eol != NULL)
            *eol = '\0';
        if (strstr(head, "python") == NULL && strstr(head, "pypy") == NULL)
            kind = "a script for another interpreter";
    }
    if (kind == NULL)
        return;
    cfg->no_python = true;
    ddp_log_info(log, "%s is %s, not a Python script: running it directly, as --no-python does",
                 cfg->script, kind);
    /* The file read is the one to run: a bare name ("run.sh", read in the working
     * directory) must not be looked up in PATH instead, as it would with --no-python. */
    if (strchr(cfg->script, '/') == NULL && asprintf(&cfg->script_path, "./%s", cfg->script) > 0)
        cfg->script = cfg->script_path;
    else if (strchr(cfg->script, '/') == NULL)
        cfg->script_path = NULL;
}

/* torch.distributed.launch passed --local_rank=N (torch 2: --local-rank=N); torchrun
 * does not, and a tutorial's script that parses the option with a default of 0 would
 * put every rank on local rank 0 (on GPUs: all on GPU 0). When the Python script
 * defines the option and neither --local-rank-arg nor --use-env says otherwise, it is
 * passed in the script's spelling, and said. */
static void resolve_local_rank_arg(ddp_launch_config_t *cfg, const ddp_log_t *log)
{
    if (cfg->no_python || cfg->module || cfg->use_env || cfg->local_rank_arg_given)
        return;
    char *text = NULL;
    size_t len;
    if (ddp_read_file(cfg->script, DDP_PYSCAN_MAX, &text, &len) != 0)
        return; /* python says why it cannot read it */
    ddp_local_rank_arg_t found = ddp_pyscan_local_rank_option(text, len);
    free(text);
    if (found == DDP_LOCAL_RANK_ARG_NONE)
        return;
    const char *option = found == DDP_LOCAL_RANK_ARG_DASH ? "--local-rank" : "--local_rank";
    cfg->local_rank_arg = found;
    ddp_log_info(log,
                 "%s defines %s: passing %s=N to each worker, as torch.distributed.launch did "
                 "(--local-rank-arg=none turns this off)",
                 cfg->script, option, option);
}

extern char **environ;

/* --numa-binding: every worker's CPUs and memory node, found once for the whole job (the
 * number of workers of a node never changes). A machine where binding means nothing is one
 * info line; a worker that cannot be bound stops the launch before anything starts. */
static int resolve_numa(ddp_launch_config_t *cfg, const ddp_log_t *log, ddp_buf_t *err)
{
    ddp_buf_t why = DDP_BUF_INIT;
    const char *mode = ddp_numa_mode_name(cfg->numa_mode);
    int rc =
        ddp_numa_plan(cfg->numa_mode, cfg->numa_fallback, cfg->nproc_per_node,
                      ddp_env_get(DDP_ENV_DDP_TOPOLOGY_ROOT), environ, log, &cfg->numa_binds, &why);
    if (rc == 0 && cfg->numa_binds == NULL) {
        ddp_log_info(log, "--numa-binding=%s: the workers are not bound: %s", mode,
                     ddp_buf_str(&why));
        if (asprintf(&cfg->numa_note, "not bound: %s", ddp_buf_str(&why)) < 0) {
            cfg->numa_note = NULL;
            rc = -ENOMEM;
        }
    }
    if (rc != 0) {
        ddp_buf_clear(err);
        if (why.len > 0)
            ddp_buf_puts(err, ddp_buf_str(&why));
        else
            ddp_buf_printf(err, "--numa-binding=%s: %s", mode, ddp_strerror(rc));
    }
    ddp_buf_free(&why);
    return rc;
}

/* --virtual-local-rank: each worker's CUDA_VISIBLE_DEVICES, the entry of its local rank in
 * this node's (its --env, else its environment), as torchrun maps it; unset: the local
 * rank itself (cfg->virtual_devices stays NULL). Too few entries end the job before it
 * starts, naming them. */
static int resolve_virtual_devices(ddp_launch_config_t *cfg, ddp_buf_t *err)
{
    const char *name = ddp_env_name(DDP_ENV_CUDA_VISIBLE_DEVICES);
    const char *visible = ddp_env_lookup(cfg->env_set, name);
    if (visible == NULL)
        visible = ddp_env_get(DDP_ENV_CUDA_VISIBLE_DEVICES);
    if (visible == NULL)
        return 0;
    int n = 1;
    for (const char *p = visible; *p; p++)
        n += *p == ',';
    if (n < cfg->nproc_per_node) {
        ddp_buf_clear(err);
        ddp_buf_printf(err,
                       "--virtual-local-rank: CUDA_VISIBLE_DEVICES=%s names %d device(s) for %d "
                       "workers on this node (local rank %d has none)",
                       visible, n, cfg->nproc_per_node, n);
        return DDP_EUSAGE;
    }
    char **devices = calloc((size_t)cfg->nproc_per_node + 1, sizeof *devices);
    if (devices == NULL)
        return -ENOMEM;
    cfg->virtual_devices = devices;
    const char *p = visible;
    for (int i = 0; i < cfg->nproc_per_node; i++) {
        size_t len = strcspn(p, ",");
        const char *start = p, *end = p + len;
        while (start < end && isspace((unsigned char)*start))
            start++;
        while (end > start && isspace((unsigned char)end[-1]))
            end--;
        if ((devices[i] = strndup(start, (size_t)(end - start))) == NULL)
            return -ENOMEM;
        p += len + (p[len] == ',');
    }
    return 0;
}

/* A job across machines (its store not on loopback) of Python workers, which torch's gloo
 * serves: where this machine's name resolves to loopback alone (Debian's /etc/hosts gives
 * it 127.0.1.1), gloo offers that address to the other nodes, whose connections then fail
 * or hang, unless GLOO_SOCKET_IFNAME names an interface. Said, with the one to name. */
static void warn_gloo_loopback(const ddp_launch_config_t *cfg, const ddp_log_t *log)
{
    char name[256], addr[64], found[64], ifname[64];
    bool loopback = false;
    if (cfg->nnodes_max <= 1 || (cfg->no_python && !cfg->run_path) ||
        ddp_env_get(DDP_ENV_GLOO_SOCKET_IFNAME) != NULL ||
        (ddp_host_is_literal(cfg->master_addr, &loopback) && loopback) ||
        gethostname(name, sizeof name) != 0 ||
        !ddp_name_is_loopback_here(name, addr, sizeof addr) ||
        !ddp_interface_address(found, sizeof found, ifname, sizeof ifname))
        return;
    ddp_log_warn(log,
                 "this machine's name %s resolves to %s alone here (/etc/hosts): torch's gloo "
                 "backend would offer that address to the other nodes, whose connections to it "
                 "then fail or hang; set GLOO_SOCKET_IFNAME=%s (this machine's interface at "
                 "%s), or give the name that address in /etc/hosts",
                 name, addr, ifname, found);
}

int ddp_resolve_config(ddp_launch_config_t *cfg, const ddp_log_t *log, ddp_buf_t *err)
{
    int rc, gpus = 0;
    resolve_program_name(cfg, log);
    resolve_script(cfg, log);
    resolve_python(cfg, log);
    resolve_local_rank_arg(cfg, log);
    if (cfg->nproc_kind == DDP_NPROC_GPU || cfg->nproc_kind == DDP_NPROC_AUTO) {
        ddp_buf_t why = DDP_BUF_INIT;
        rc = ddp_devices_cuda_count(&gpus, &why);
        if (rc != 0 && cfg->nproc_kind == DDP_NPROC_GPU) {
            ddp_buf_clear(err);
            ddp_buf_printf(err, "--nproc-per-node: gpu: %s", ddp_buf_str(&why));
            ddp_buf_free(&why);
            return DDP_EUSAGE;
        }
        ddp_buf_free(&why);
        if (rc != 0)
            gpus = 0;
    }
    switch (cfg->nproc_kind) {
    case DDP_NPROC_INT:
        break;
    case DDP_NPROC_CPU:
        cfg->nproc_per_node = usable_cpus();
        break;
    case DDP_NPROC_GPU:
        cfg->nproc_per_node = gpus;
        break;
    case DDP_NPROC_AUTO:
        cfg->nproc_per_node = gpus > 0 ? gpus : usable_cpus();
        break;
    case DDP_NPROC_XPU: {
        ddp_buf_t why = DDP_BUF_INIT;
        rc = ddp_devices_xpu_count(cfg->python_exec, &cfg->nproc_per_node, &why);
        if (rc != 0) {
            ddp_buf_clear(err);
            ddp_buf_printf(err, "--nproc-per-node: xpu: %s", ddp_buf_str(&why));
        }
        ddp_buf_free(&why);
        if (rc != 0)
            return rc;
        break;
    }
    }
    if (cfg->nproc_per_node > DDP_MAX_LOCAL_WORKERS)
        cfg->nproc_per_node = DDP_MAX_LOCAL_WORKERS;
    if (cfg->nproc_kind != DDP_NPROC_INT)
        ddp_log_debug(log, "using %d workers per node (--nproc-per-node=%s)", cfg->nproc_per_node,
                      cfg->nproc_kind == DDP_NPROC_CPU   ? "cpu"
                      : cfg->nproc_kind == DDP_NPROC_GPU ? "gpu"
                      : cfg->nproc_kind == DDP_NPROC_XPU ? "xpu"
                                                         : "auto");
    if (cfg->numa_mode != DDP_NUMA_OFF && (rc = resolve_numa(cfg, log, err)) != 0)
        return rc;
    if (cfg->virtual_local_rank && (rc = resolve_virtual_devices(cfg, err)) != 0)
        return rc;

    if (cfg->standalone) {
        /* torchrun: a c10d store on localhost at a free port, with a random run id;
         * explicit rendezvous values are overridden. Port 0: the store picks one. */
        cfg->rdzv_backend = DDP_RDZV_C10D;
        if ((rc = random_run_id(&cfg->run_id)) != 0)
            return rc;
        strcpy(cfg->master_addr, "127.0.0.1");
        cfg->master_port = 0;
    } else if (cfg->rdzv_backend == DDP_RDZV_C10D) {
        /* The launcher hosts the c10d store at the endpoint; workers use it too. */
        strcpy(cfg->master_addr, cfg->rdzv_endpoint_host);
        cfg->master_port = cfg->rdzv_endpoint_port;
        cfg->master_port_given = true;
    } else if (cfg->rdzv_backend == DDP_RDZV_ETCD) {
        /* Every launcher serves a store of its own address (--local-addr, else its host
         * name), on a free port unless --master-port says one; the one etcd elects keeps
         * it, and the others and every worker learn its address from etcd. */
        if (cfg->local_addr != NULL)
            snprintf(cfg->master_addr, sizeof cfg->master_addr, "%s", cfg->local_addr);
        else if (gethostname(cfg->master_addr, sizeof cfg->master_addr - 1) != 0)
            strcpy(cfg->master_addr, "localhost");
        if (!cfg->master_port_given)
            cfg->master_port = 0;
    }
    warn_gloo_loopback(cfg, log);
    return 0;
}
