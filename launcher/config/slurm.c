/* Slurm host lists (see slurm.h), expanded as Slurm's hostlist.c does: the text is
 * walked once per host, bracket by bracket, so nothing is allocated but the name being
 * built. */
#include "config/slurm.h"

#include "config/flags.h"
#include "env.h"
#include "error.h"

#include <ctype.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_HOSTS 1000000
#define MAX_NAME  1024

typedef struct {
    int (*emit)(void *ctx, const char *host);
    void *ctx;
    ddp_buf_t *why;
    const char *entry; /* for messages */
    size_t entry_len;
    size_t hosts;
    bool stop;
    char name[MAX_NAME];
} walk_t;

static int bad(walk_t *w, const char *what)
{
    ddp_buf_printf(w->why, "the host list entry '%.*s': %s", (int)w->entry_len, w->entry, what);
    return DDP_EPARSE;
}

static int append(walk_t *w, size_t *len, const char *text, size_t n)
{
    if (*len + n >= sizeof w->name)
        return bad(w, "a host name over 1023 characters");
    memcpy(w->name + *len, text, n);
    *len += n;
    w->name[*len] = '\0';
    return 0;
}

/* Reads a decimal number of at most 9 digits at *p; its digit count goes to *width. */
static bool number(const char **p, const char *end, long *value, int *width)
{
    const char *s = *p;
    long v = 0;
    int n = 0;
    while (s < end && isdigit((unsigned char)*s) && n < 10) {
        v = v * 10 + (*s - '0');
        s++;
        n++;
    }
    if (n == 0 || n > 9)
        return false;
    *p = s;
    *value = v;
    *width = n;
    return true;
}

/* Expands text[0, n) after the name's first `len` characters. */
static int expand(walk_t *w, size_t len, const char *text, size_t n)
{
    const char *open = memchr(text, '[', n), *end = text + n;
    int err;
    if (open == NULL) {
        if (memchr(text, ']', n) != NULL)
            return bad(w, "']' without '['");
        if ((err = append(w, &len, text, n)) != 0)
            return err;
        if (len == 0)
            return bad(w, "an empty host name");
        if (++w->hosts > MAX_HOSTS)
            return bad(w, "more than 1000000 hosts");
        if (w->emit(w->ctx, w->name) != 0)
            w->stop = true;
        return 0;
    }
    const char *close = memchr(open, ']', (size_t)(end - open));
    if (close == NULL)
        return bad(w, "'[' without ']'");
    if (memchr(text, ']', (size_t)(open - text)) != NULL)
        return bad(w, "']' without '['");
    if ((err = append(w, &len, text, (size_t)(open - text))) != 0)
        return err;
    /* Each range of the bracket in turn, each value of the range in turn. */
    const char *p = open + 1;
    if (p == close)
        return bad(w, "an empty '[]'");
    while (p < close && !w->stop) {
        long lo, hi;
        int width, hi_width;
        if (!number(&p, close, &lo, &width))
            return bad(w, "a bracket holds something other than numbers and ranges");
        hi = lo;
        if (p < close && *p == '-') {
            p++;
            if (!number(&p, close, &hi, &hi_width))
                return bad(w, "a range without its upper bound");
            if (hi < lo)
                return bad(w, "a range whose upper bound is below its lower one");
        }
        if (p < close && *p != ',')
            return bad(w, "a bracket holds something other than numbers and ranges");
        if (p < close)
            p++;
        if (p == close && p[-1] == ',')
            return bad(w, "a bracket ends with ','");
        for (long v = lo; v <= hi && !w->stop; v++) {
            char digits[16];
            int k = snprintf(digits, sizeof digits, "%0*ld", width, v);
            size_t at = len;
            if ((err = append(w, &at, digits, (size_t)k)) != 0 ||
                (err = expand(w, at, close + 1, (size_t)(end - close - 1))) != 0)
                return err;
        }
    }
    return 0;
}

int ddp_slurm_hostlist_each(const char *list, int (*emit)(void *ctx, const char *host), void *ctx,
                            ddp_buf_t *why)
{
    walk_t w = {.emit = emit, .ctx = ctx, .why = why};
    const char *p = list;
    if (list == NULL || *list == '\0') {
        ddp_buf_puts(why, "the host list is empty");
        return DDP_EPARSE;
    }
    /* Entries end at a comma outside brackets. */
    while (!w.stop) {
        const char *q = p;
        int depth = 0;
        while (*q != '\0' && (*q != ',' || depth > 0)) {
            depth += *q == '[' ? 1 : *q == ']' ? -1 : 0;
            q++;
        }
        w.entry = p;
        w.entry_len = (size_t)(q - p);
        int err = expand(&w, 0, p, (size_t)(q - p));
        if (err)
            return err;
        if (*q == '\0')
            break;
        p = q + 1;
    }
    return 0;
}

typedef struct {
    char *out;
    size_t cap;
    bool fits;
} first_t;

static int take_first(void *ctx, const char *host)
{
    first_t *f = ctx;
    f->fits = strlen(host) < f->cap;
    if (f->fits)
        strcpy(f->out, host);
    return 1;
}

int ddp_slurm_first_host(const char *list, char *out, size_t cap, ddp_buf_t *why)
{
    first_t f = {out, cap, false};
    int err = ddp_slurm_hostlist_each(list, take_first, &f, why);
    if (err == 0 && !f.fits) {
        ddp_buf_printf(why, "the first host of '%s' is over %zu characters", list, cap - 1);
        return DDP_EPARSE;
    }
    return err;
}

int ddp_slurm_tasks_on_node(const char *spec, int node, int *count, ddp_buf_t *why)
{
    const char *p = spec, *end;
    long first = 0; /* the first node of the current entry */
    int found = -1;
    if (spec == NULL || *spec == '\0' || node < 0) {
        ddp_buf_puts(why, "no task counts");
        return DDP_EPARSE;
    }
    end = spec + strlen(spec);
    /* Every entry is read, so that a malformed list is one whatever the node. */
    for (;;) {
        long tasks, repeat = 1;
        int width;
        if (!number(&p, end, &tasks, &width))
            goto bad;
        if (*p == '(') {
            p++;
            if (*p++ != 'x' || !number(&p, end, &repeat, &width) || *p++ != ')' || repeat < 1)
                goto bad;
        }
        if (found < 0 && node < first + repeat)
            found = (int)tasks;
        first += repeat;
        if (*p == '\0')
            break;
        if (*p++ != ',')
            goto bad;
    }
    if (found >= 0) {
        *count = found;
        return 0;
    }
    ddp_buf_printf(why, "'%s' counts tasks for %ld node(s), not node %d", spec, first, node);
    return DDP_EPARSE;
bad:
    ddp_buf_printf(why, "'%s' is not a list of task counts like 2(x3),1", spec);
    return DDP_EPARSE;
}

int ddp_slurm_port(const char *job_id, const char *step_id)
{
    char *end;
    unsigned long long id = strtoull(job_id, &end, 10), step = 0;
    if (*job_id == '\0' || *end != '\0')
        return -1;
    if (step_id != NULL && *step_id != '\0') {
        step = strtoull(step_id, &end, 10);
        if (*end != '\0')
            step = 0; /* "batch", "extern": not a step of srun's */
    }
    return (int)(DDP_SLURM_PORT_BASE +
                 (id % DDP_SLURM_PORT_SPAN + DDP_SLURM_STEP_STRIDE * (step % DDP_SLURM_PORT_SPAN)) %
                     DDP_SLURM_PORT_SPAN);
}

/* Whether this launcher runs in a Slurm allocation but outside any step (sbatch's
 * script, salloc's shell), where Slurm's variables describe the allocation, not a place
 * in a step. A hand-set environment without SLURM_JOB_ID counts as a step. */
static bool slurm_outside_step(char *const *envp)
{
    const char *job = ddp_env_lookup(envp, ddp_env_name(DDP_ENV_SLURM_JOB_ID)),
               *step = ddp_env_lookup(envp, ddp_env_name(DDP_ENV_SLURM_STEP_ID));
    return job != NULL && *job != '\0' && (step == NULL || *step == '\0');
}

/* A step of more than one task on this node would start that many launchers, each with
 * all its workers, as the same node. */
static int slurm_one_task(char *const *envp, ddp_buf_t *err)
{
    const char *name = ddp_env_name(DDP_ENV_SLURM_STEP_TASKS_PER_NODE);
    const char *spec = ddp_env_lookup(envp, name),
               *node = ddp_env_lookup(envp, ddp_env_name(DDP_ENV_SLURM_NODEID));
    int tasks = 1;
    ddp_buf_t why = DDP_BUF_INIT;
    if (spec == NULL || *spec == '\0' || node == NULL ||
        ddp_slurm_tasks_on_node(spec, atoi(node), &tasks, &why) != 0 || tasks <= 1) {
        ddp_buf_free(&why); /* unreadable counts: Slurm's business, not a reason to stop */
        return 0;
    }
    return ddp_flag_usage(
        err, name,
        "%s: srun started %d tasks on this node, but ddp-launch runs once per node and "
        "starts --nproc-per-node workers itself: use srun --ntasks-per-node=1",
        spec, tasks);
}

/* Inside a Slurm job step, what neither a flag nor a PET_ variable gave: --nnodes from
 * SLURM_NNODES (the step's), --node-rank from SLURM_NODEID, --master-addr from the first
 * host of SLURM_STEP_NODELIST (of SLURM_JOB_NODELIST where there is none). Not with
 * --standalone, one node by its definition, nor outside a step, where the launcher starts
 * itself on every node (fanout.h). `host` holds the first host while the values are
 * applied. */
int ddp_slurm_defaults(ddp_flag_raw_t *raw, char *const *envp, char *host, size_t cap,
                       const ddp_log_t *log, ddp_buf_t *err)
{
    static const struct {
        const char *flag;
        ddp_env_id_t var;
    } from[] = {
        {"nnodes", DDP_ENV_SLURM_NNODES},
        {"node-rank", DDP_ENV_SLURM_NODEID},
        {"master-addr", DDP_ENV_SLURM_STEP_NODELIST},
        {"master-addr", DDP_ENV_SLURM_JOB_NODELIST},
    };
    if (raw[ddp_flag_index("standalone")].set || slurm_outside_step(envp))
        return 0;
    int rc = slurm_one_task(envp, err);
    for (size_t i = 0; i < sizeof from / sizeof from[0] && rc == 0; i++) {
        ddp_flag_raw_t *slot = &raw[ddp_flag_index(from[i].flag)];
        const char *name = ddp_env_name(from[i].var), *value = ddp_env_lookup(envp, name);
        if (slot->set || value == NULL || *value == '\0')
            continue;
        if (from[i].var == DDP_ENV_SLURM_JOB_NODELIST ||
            from[i].var == DDP_ENV_SLURM_STEP_NODELIST) {
            ddp_buf_t why = DDP_BUF_INIT;
            if (ddp_slurm_first_host(value, host, cap, &why) != 0)
                rc = ddp_flag_usage(err, name, "%s", ddp_buf_str(&why));
            ddp_buf_free(&why);
            value = host;
        }
        slot->value = value;
        slot->set = rc == 0;
        snprintf(slot->origin, sizeof slot->origin, "%s", name);
        if (rc == 0)
            ddp_log_info(log, "--%s=%s from %s", from[i].flag, value, name);
    }
    return rc;
}

typedef struct {
    const char *self;
    bool found;
} host_search_t;

static int is_this_host(void *ctx, const char *host)
{
    host_search_t *h = ctx;
    size_t len = strcspn(h->self, "."), hlen = strcspn(host, ".");
    h->found = len == hlen && strncmp(h->self, host, len) == 0; /* n1 is n1.cluster */
    return h->found;
}

/* Whether `name` is a host of the Slurm host list in variable `var`; `unknown` where that
 * cannot be told. */
static bool in_nodelist(char *const *envp, ddp_env_id_t var, const char *name, bool unknown)
{
    const char *list = ddp_env_lookup(envp, ddp_env_name(var));
    ddp_buf_t why = DDP_BUF_INIT;
    if (list == NULL || *list == '\0' || *name == '\0')
        return unknown;
    host_search_t h = {name, false};
    int err = ddp_slurm_hostlist_each(list, is_this_host, &h, &why);
    ddp_buf_free(&why);
    return err != 0 ? unknown : h.found;
}

/* Whether this host is one of the allocation's (SLURM_JOB_NODELIST); true where that
 * cannot be told. */
static bool here_allocated(char *const *envp)
{
    char self[256] = "";
    if (gethostname(self, sizeof self - 1) != 0)
        return true;
    return in_nodelist(envp, DDP_ENV_SLURM_JOB_NODELIST, self, true);
}

/* After the flags: a multi-node job of a Slurm allocation whose store port nobody gave
 * gets its job's own (slurm.h), and an allocation of more than one node outside any step,
 * without --node-rank and --nnodes (or with the allocation's count), is started on every
 * node through srun; another --nnodes there is said at once to start only this node. */
void ddp_slurm_after(ddp_launch_config_t *cfg, const ddp_flag_raw_t *raw, char *const *envp,
                     const ddp_log_t *log)
{
    const char *job = ddp_env_lookup(envp, ddp_env_name(DDP_ENV_SLURM_JOB_ID)),
               *nodes = ddp_env_lookup(envp, ddp_env_name(DDP_ENV_SLURM_JOB_NUM_NODES));
    if (cfg->standalone || job == NULL || cfg->hosts != NULL || cfg->hostfile != NULL)
        return;
    int allocated = nodes != NULL ? atoi(nodes) : 0;
    /* One node, from a shell elsewhere (salloc's, on the login host): srun runs the job
     * on the node Slurm gave, not here. */
    if (slurm_outside_step(envp) && !raw[ddp_flag_index("node-rank")].set && allocated == 1 &&
        cfg->nnodes_max == 1 && !here_allocated(envp)) {
        cfg->slurm_fanout = 1;
        return;
    }
    /* (etcd: an elastic MIN:MAX whose MAX is the allocation's, too.) */
    bool fixed = !raw[ddp_flag_index("nnodes")].set ||
                 ((cfg->nnodes_min == cfg->nnodes_max || cfg->rdzv_backend == DDP_RDZV_ETCD) &&
                  cfg->nnodes_max == allocated);
    if (slurm_outside_step(envp) && !raw[ddp_flag_index("node-rank")].set && allocated > 1 &&
        fixed) {
        cfg->slurm_fanout = allocated; /* --nnodes, where given, says the same */
        return;
    }
    if (slurm_outside_step(envp) && !raw[ddp_flag_index("node-rank")].set && cfg->nnodes_max > 1)
        ddp_log_warn(log,
                     "--nnodes=%d inside Slurm allocation %s of %d node(s), outside a step: this "
                     "command is node 0 only, and the others must be started (srun "
                     "--ntasks-per-node=1 ddp-launch ..., or leave out --nnodes in an allocation "
                     "of that many nodes: ddp-launch then starts itself on each through srun)",
                     cfg->nnodes_max, job, allocated);
    const char *step = ddp_env_lookup(envp, ddp_env_name(DDP_ENV_SLURM_STEP_ID));
    cfg->slurm_step = !slurm_outside_step(envp);
    /* The store's launcher is a task of this step: node 0, or the c10d endpoint's host
     * where that is a node of the step. */
    cfg->store_in_step =
        cfg->slurm_step &&
        (cfg->rdzv_backend == DDP_RDZV_STATIC ||
         (cfg->rdzv_backend == DDP_RDZV_C10D &&
          in_nodelist(envp, DDP_ENV_SLURM_STEP_NODELIST, cfg->rdzv_endpoint_host, false)));
    int port = ddp_slurm_port(job, step);
    if (cfg->nnodes_max > 1 && !raw[ddp_flag_index("rdzv-id")].set && port >= 0 &&
        asprintf(&cfg->run_id, "slurm-%s.%s", job, step != NULL && *step ? step : "0") < 0)
        cfg->run_id = NULL;
    if (raw[ddp_flag_index("master-port")].set || port < 0 || cfg->nnodes_max <= 1 ||
        cfg->rdzv_backend != DDP_RDZV_STATIC)
        return;
    cfg->master_port = port;
    ddp_log_info(log,
                 "--master-port=%d from SLURM_JOB_ID=%s and SLURM_STEP_ID=%s (one port a job "
                 "step; --rdzv-id %s)",
                 port, job, step != NULL && *step ? step : "0", cfg->run_id);
}
