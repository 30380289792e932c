/* Unit tests of launcher/config/cli.c: every flag in every spelling, PET_* defaults,
 * prefixes, bad values (naming the flag), the positional script, and resolution. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "config/cli.h"
#include "config/resolve.h"
#include "host/signals.h"
#include "error.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A parse of a space-separated command line (no quoting needed in these tests) with a
 * space-separated environment; the result stays valid until the next parse. */
typedef struct {
    char *argv_text, *env_text;
    char *argv[64];
    char *envp[16];
    ddp_launch_config_t cfg;
    ddp_buf_t err;
    ddp_log_t log;
    int rc;
} parse_t;

static int split(char *text, char **out, int max)
{
    int n = 0;
    for (char *tok = strtok(text, " "); tok != NULL && n < max - 1; tok = strtok(NULL, " "))
        out[n++] = tok;
    out[n] = NULL;
    return n;
}

/* A parse whose log, at `level` and up, goes to `log_fd` (taken over). */
static void parse_to(parse_t *p, const char *args, const char *env, ddp_log_level_t level,
                     int log_fd)
{
    memset(p, 0, sizeof *p);
    assert_true(asprintf(&p->argv_text, "ddp-launch %s", args) > 0);
    p->env_text = strdup(env ? env : "");
    int argc = split(p->argv_text, p->argv, 64);
    split(p->env_text, p->envp, 16);
    ddp_log_init(&p->log, "test", level);
    p->log.fd = log_fd;
    p->rc = ddp_cli_parse(&p->cfg, argc, p->argv, p->envp, &p->log, &p->err);
}

static void parse(parse_t *p, const char *args, const char *env)
{
    parse_to(p, args, env, DDP_LOG_ERROR, open("/dev/null", O_WRONLY | O_CLOEXEC));
}

static void done(parse_t *p)
{
    if (p->rc == 0)
        ddp_config_free(&p->cfg);
    close(p->log.fd);
    ddp_buf_free(&p->err);
    free(p->argv_text);
    free(p->env_text);
}

/* field()'s output flags; false for another flag. */
static bool output_field(const ddp_launch_config_t *c, const char *flag, char *out, size_t cap)
{
    if (strcmp(flag, "redirects") == 0 || strcmp(flag, "tee") == 0) {
        const ddp_std_spec_t *s = flag[0] == 'r' ? &c->redirects : &c->tee;
        size_t len = (size_t)snprintf(out, cap, "all=%d", s->all);
        for (size_t i = 0; i < s->nmap && len < cap; i++)
            len += (size_t)snprintf(out + len, cap - len, " %ld:%d", s->map[i].local_rank,
                                    s->map[i].std);
    } else if (strcmp(flag, "local-ranks-filter") == 0) {
        size_t len = (size_t)snprintf(out, cap, "%s", c->ranks_filter_set ? "set" : "unset");
        for (size_t i = 0; i < c->nranks_filter && len < cap; i++)
            len += (size_t)snprintf(out + len, cap - len, " %ld", c->ranks_filter[i]);
    } else if (strcmp(flag, "duplicate-stdout-filters") == 0 ||
               strcmp(flag, "duplicate-stderr-filters") == 0) {
        char **list = c->dup_filters[flag[13] == 'o' ? DDP_STD_OUT : DDP_STD_ERR];
        size_t len = 0;
        out[0] = '\0';
        for (int i = 0; list != NULL && list[i] != NULL && len < cap; i++)
            len += (size_t)snprintf(out + len, cap - len, "<%s>", list[i]);
    } else {
        return false;
    }
    return true;
}

/* The parsed value of one flag, as text, for comparing against the table. */
static void field(const ddp_launch_config_t *c, const char *flag, char *out, size_t cap)
{
    static const char *const kinds[] = {"int", "cpu", "gpu", "auto", "xpu"};
    static const char *const rank_args[] = {"none", "underscore", "dash"};
    if (strcmp(flag, "nnodes") == 0) {
        snprintf(out, cap, "%d:%d", c->nnodes_min, c->nnodes_max);
    } else if (strcmp(flag, "nproc-per-node") == 0) {
        snprintf(out, cap, "%s:%d", kinds[c->nproc_kind], c->nproc_per_node);
    } else if (strcmp(flag, "node-rank") == 0) {
        snprintf(out, cap, "%d", c->node_rank);
    } else if (strcmp(flag, "master-addr") == 0) {
        snprintf(out, cap, "%s", c->master_addr);
    } else if (strcmp(flag, "master-port") == 0) {
        snprintf(out, cap, "%d", c->master_port);
    } else if (strcmp(flag, "local-addr") == 0) {
        snprintf(out, cap, "%s", c->local_addr ? c->local_addr : "(null)");
    } else if (strcmp(flag, "rdzv-backend") == 0) {
        snprintf(out, cap, "%s", c->rdzv_backend == DDP_RDZV_C10D ? "c10d" : "static");
    } else if (strcmp(flag, "rdzv-endpoint") == 0) {
        snprintf(out, cap, "%s|%d", c->rdzv_endpoint_host, c->rdzv_endpoint_port);
    } else if (strcmp(flag, "rdzv-id") == 0) {
        snprintf(out, cap, "%s", c->run_id);
    } else if (strcmp(flag, "rdzv-conf") == 0) {
        snprintf(out, cap, "%g %g %g %g %g %d", c->rdzv_conf.join_timeout,
                 c->rdzv_conf.last_call_timeout, c->rdzv_conf.close_timeout,
                 c->rdzv_conf.read_timeout, c->rdzv_conf.timeout, c->rdzv_conf.is_host);
    } else if (strcmp(flag, "standalone") == 0) {
        snprintf(out, cap, "%d", c->standalone);
    } else if (strcmp(flag, "max-restarts") == 0) {
        snprintf(out, cap, "%d", c->max_restarts);
    } else if (strcmp(flag, "monitor-interval") == 0) {
        snprintf(out, cap, "%g", c->monitor_interval);
    } else if (strcmp(flag, "role") == 0) {
        snprintf(out, cap, "%s", c->role);
    } else if (strcmp(flag, "module") == 0) {
        snprintf(out, cap, "%d", c->module);
    } else if (strcmp(flag, "no-python") == 0) {
        snprintf(out, cap, "%d", c->no_python);
    } else if (strcmp(flag, "run-path") == 0) {
        snprintf(out, cap, "%d", c->run_path);
    } else if (strcmp(flag, "use-env") == 0) {
        snprintf(out, cap, "%d", c->use_env);
    } else if (strcmp(flag, "local-rank-arg") == 0) {
        snprintf(out, cap, "%s", rank_args[c->local_rank_arg]);
    } else if (strcmp(flag, "log-dir") == 0) {
        snprintf(out, cap, "%s", c->log_dir ? c->log_dir : "(null)");
    } else if (strcmp(flag, "signals-to-handle") == 0) {
        size_t len = 0;
        out[0] = '\0';
        for (int i = 0; i < c->nsignals && len < cap; i++)
            len += (size_t)snprintf(out + len, cap - len, "%s%d", i ? "," : "", c->signals[i]);
    } else if (strcmp(flag, "shutdown-timeout") == 0) {
        snprintf(out, cap, "%g", c->shutdown_timeout);
    } else if (strcmp(flag, "exit-code") == 0) {
        snprintf(out, cap, "%s", c->exit_code_mode == DDP_EXIT_CODE_WORKER ? "worker" : "torchrun");
    } else if (strcmp(flag, "dry-run") == 0) {
        snprintf(out, cap, "%d", c->dry_run);
    } else if (strcmp(flag, "start-method") == 0) {
        snprintf(out, cap, "accepted");
    } else if (strcmp(flag, "virtual-local-rank") == 0) {
        snprintf(out, cap, "%d", c->virtual_local_rank);
    } else if (strcmp(flag, "event-log-handler") == 0) {
        snprintf(out, cap, "%s", c->event_log != NULL ? c->event_log : "null");
    } else if (!output_field(c, flag, out, cap)) {
        fail_msg("no field for flag %s", flag);
    }
}

typedef struct {
    const char *flag;     /* dash spelling */
    const char *value;    /* NULL for a switch */
    const char *expected; /* field() after parsing */
} good_case_t;

static const good_case_t good_cases[] = {
    {"nnodes", "1", "1:1"},
    {"nnodes", "1:1", "1:1"},
    {"nnodes", "3", "3:3"},
    {"nnodes", "2:2", "2:2"},
    {"nproc-per-node", "4", "int:4"},
    {"nproc-per-node", "4096", "int:4096"},
    {"nproc-per-node", "cpu", "cpu:1"},
    {"nproc-per-node", "gpu", "gpu:1"},
    {"nproc-per-node", "auto", "auto:1"},
    {"nproc-per-node", "xpu", "xpu:1"},
    {"node-rank", "0", "0"},
    {"master-addr", "10.1.2.3", "10.1.2.3"},
    {"master-addr", "node-0.cluster", "node-0.cluster"},
    {"master-addr", "[::1]", "::1"},
    {"master-addr", "fe80::1", "fe80::1"},
    {"master-port", "1234", "1234"},
    {"master-port", "0", "0"},
    {"local-addr", "node7", "node7"},
    {"rdzv-backend", "static", "static"},
    {"rdzv-endpoint", "host:1234", "host|1234"},
    {"rdzv-endpoint", "[::1]:5", "::1|5"},
    {"rdzv-endpoint", "host", "host|29500"},
    {"rdzv-id", "job7", "job7"},
    {"rdzv-conf", "join_timeout=5,is_host=true", "5 30 30 60 900 1"},
    {"rdzv-conf", "last_call_timeout=1.5,close_timeout=2,read_timeout=3,timeout=4,is_host=0",
     "600 1.5 2 3 4 0"},
    {"rdzv-conf", "keep_alive_interval=5", "600 30 30 60 900 -1"},
    {"rdzv-conf", "store_type=TCP,use_libuv=0,store_type=file", "600 30 30 60 900 -1"},
    {"standalone", NULL, "1"},
    {"max-restarts", "3", "3"},
    {"monitor-interval", "0.5", "0.5"},
    {"start-method", "fork", "accepted"},
    {"event-log-handler", "null", "null"},
    {"event-log-handler", "console", "console"},
    {"event-log-handler", "file:/tmp/events.jsonl", "file:/tmp/events.jsonl"},
    {"role", "trainer", "trainer"},
    {"virtual-local-rank", NULL, "1"},
    {"duplicate-stdout-filters", "loss,a,,b,,,c", "<loss><a,b,><c>"},
    {"duplicate-stderr-filters", "warn", "<warn>"},
    {"module", NULL, "1"},
    {"no-python", NULL, "1"},
    {"run-path", NULL, "1"},
    {"use-env", NULL, "1"},
    {"local-rank-arg", "underscore", "underscore"},
    {"local-rank-arg", "dash", "dash"},
    {"log-dir", "/tmp/logs", "/tmp/logs"},
    {"redirects", "3", "all=3"},
    {"redirects", "0:1,12:2,123:3", "all=0 0:1 12:2 123:3"},
    {"tee", "1", "all=1"},
    {"tee", "9:0", "all=0 9:0"},
    {"local-ranks-filter", "0,2", "set 0 2"},
    {"signals-to-handle", "SIGTERM,SIGUSR1", "15,10"},
    {"signals-to-handle", "usr2,INT,SIGINT", "12,2"},
    {"shutdown-timeout", "2.5", "2.5"},
    {"shutdown-timeout", "0", "0"},
    {"exit-code", "worker", "worker"},
    {"dry-run", NULL, "1"},
};

static void underscore(const char *dash, char *out, size_t cap)
{
    snprintf(out, cap, "%s", dash);
    for (char *p = out; *p; p++)
        *p = *p == '-' ? '_' : *p;
}

static void pet(const char *dash, char *out, size_t cap)
{
    char u[64];
    underscore(dash, u, sizeof u);
    snprintf(out, cap, "PET_%s", u);
    for (char *p = out; *p; p++)
        *p = (char)(*p >= 'a' && *p <= 'z' ? *p - 32 : *p);
}

static void expect_field(const char *args, const char *env, const good_case_t *c)
{
    parse_t p;
    char got[512];
    parse(&p, args, env);
    if (p.rc != 0)
        fail_msg("'%s' (env '%s'): %s", args, env ? env : "", ddp_buf_str(&p.err));
    field(&p.cfg, c->flag, got, sizeof got);
    if (strcmp(got, c->expected) != 0)
        fail_msg("'%s' (env '%s'): %s is '%s', expected '%s'", args, env ? env : "", c->flag, got,
                 c->expected);
    done(&p);
}

static void test_every_flag_every_spelling(void **state)
{
    for (size_t i = 0; i < sizeof good_cases / sizeof good_cases[0]; i++) {
        const good_case_t *c = &good_cases[i];
        char u[64], args[512], env[256];
        underscore(c->flag, u, sizeof u);
        const char *names[2] = {c->flag, u};
        for (int s = 0; s < 2; s++) {
            if (c->value == NULL) {
                snprintf(args, sizeof args, "--%s train.py", names[s]);
                expect_field(args, NULL, c);
                continue;
            }
            snprintf(args, sizeof args, "--%s=%s train.py", names[s], c->value);
            expect_field(args, NULL, c);
            snprintf(args, sizeof args, "--%s %s train.py", names[s], c->value);
            expect_field(args, NULL, c);
        }
        /* The same value as a PET_* default. */
        pet(c->flag, env, sizeof env);
        size_t len = strlen(env);
        snprintf(env + len, sizeof env - len, "=%s", c->value ? c->value : "1");
        expect_field("train.py", env, c);
    }
}

typedef struct {
    const char *args;
    const char *env;
    const char *message; /* the error must contain this */
} bad_case_t;

static const bad_case_t bad_cases[] = {
    {"--nnodes=0 t.py", NULL, "--nnodes: invalid value '0'"},
    {"--nnodes=2:1 t.py", NULL, "--nnodes: invalid value '2:1'"},
    {"--nnodes=1:2:3 t.py", NULL, "--nnodes"},
    {"--nnodes=x t.py", NULL, "--nnodes"},
    {"--nnodes=1:4 t.py", NULL, "--nnodes: 1:4: a range of nodes needs elastic rendezvous"},
    {"--nnodes=2 --master-port=0 t.py", NULL, "--master-port: 0 (a free port) serves one node"},
    {"--nnodes=1:2 --rdzv-backend=c10d --rdzv-endpoint=h:0 t.py", NULL,
     "--rdzv-endpoint: port 0 (a free port) serves one node only: every launcher of a job of 2"},
    {"--nnodes=2 --standalone t.py", NULL, "--standalone: is one node"},
    {"--nnodes=2 --node-rank=2 t.py", NULL, "--node-rank: 2 must be less than --nnodes (2)"},
    {"--nproc-per-node=0 t.py", NULL, "--nproc-per-node: invalid value '0'"},
    {"--nproc_per_node=-1 t.py", NULL, "--nproc-per-node"},
    {"--nproc-per-node=many t.py", NULL, "expected an integer, cpu, gpu, xpu or auto"},
    {"t.py", "TORCH_ELASTIC_SHUTDOWN_TIMEOUT=soon",
     "TORCH_ELASTIC_SHUTDOWN_TIMEOUT: invalid value 'soon'"},
    {"--nproc-per-node=4097 t.py", NULL, "between 1 and 4096"},
    {"--node-rank=-1 t.py", NULL, "--node-rank"},
    {"--node-rank=1 t.py", NULL, "--node-rank: 1 must be less than --nnodes (1)"},
    {"--master-port=65536 t.py", NULL, "--master-port: invalid value '65536'"},
    {"--master-port=http t.py", NULL, "--master-port"},
    {"--rdzv-backend=etcd t.py", NULL, "etcd needs --rdzv-endpoint HOST[:PORT][,HOST[:PORT]...]"},
    {"--rdzv-backend=etcd --rdzv-endpoint=a,b:x t.py", NULL, "invalid etcd endpoint 'b:x'"},
    {"--rdzv-backend=etcd --rdzv-endpoint=127.0.0.1:2379:1 t.py", NULL,
     "--rdzv-endpoint: invalid value '127.0.0.1:2379:1': expected HOST, HOST:PORT, [IPV6]:PORT "
     "or an IPv6 address (etcd's: http:// or https:// before it or not)"},
    {"--rdzv-backend=etcd --rdzv-endpoint=e,127.0.0.1:2379:1 t.py", NULL,
     "invalid etcd endpoint '127.0.0.1:2379:1': expected HOST, HOST:PORT, [IPV6]:PORT or an IPv6 "
     "address, http:// or https:// before it or not, a list of them with commas"},
    {"--rdzv-backend=etcd --rdzv-endpoint=a,etcd1:2379:2379 t.py", NULL,
     "invalid etcd endpoint 'etcd1:2379:2379'"},
    {"--rdzv-backend=etcd --rdzv-endpoint=ftp://a:1 t.py", NULL, "invalid value 'ftp://a:1'"},
    {"--rdzv-backend=etcd --rdzv-endpoint=http://a:1,https://b:1 t.py", NULL,
     "'https://b:1': http:// and https:// endpoints mixed"},
    {"--rdzv-backend=etcd --rdzv-endpoint=https://a:1 --rdzv-conf=protocol=http t.py", NULL,
     "--rdzv-endpoint: https:// endpoints with --rdzv-conf protocol=http: give one way"},
    {"--rdzv-backend=etcd --rdzv-endpoint=http://a --rdzv-conf=protocol=https t.py", NULL,
     "http:// endpoints with --rdzv-conf protocol=https"},
    {"--rdzv-backend=c10d --rdzv-endpoint=http://a:1 t.py", NULL,
     "--rdzv-endpoint: an http:// endpoint is etcd's (--rdzv-backend=etcd); c10d's store has one, "
     "HOST[:PORT] (given 'http://a:1')"},
    {"--rdzv-backend=c10d --rdzv-endpoint=a:1:2 t.py", NULL, "--rdzv-endpoint: invalid value"},
    {"--rdzv-backend=etcd --rdzv-endpoint=a --rdzv-conf=protocol=gopher t.py", NULL,
     "--rdzv-conf: invalid protocol 'gopher'"},
    {"--rdzv-backend=etcd --rdzv-endpoint=a --rdzv-conf=key=/etc/hostname t.py", NULL,
     "cacert, cert and key are for etcd over TLS: add protocol=https"},
    {"--rdzv-backend=etcd --rdzv-endpoint=a --rdzv-conf=protocol=https,key=/etc/hostname t.py",
     NULL, "key without cert"},
    {"--rdzv-backend=etcd --rdzv-endpoint=a --rdzv-conf=protocol=https,cacert=/nowhere t.py", NULL,
     "--rdzv-conf: cacert=/nowhere: unable to read it"},
    {"--rdzv-conf=protocol=https t.py", NULL, "protocol, cacert, cert and key are etcd's"},
    {"--rdzv-backend=c10d --rdzv-endpoint=a,b t.py", NULL, "a list of endpoints is etcd's"},
    {"--rdzv-backend=c10d t.py", NULL, "c10d needs --rdzv-endpoint HOST[:PORT]"},
    {"t.py", "PET_RDZV_BACKEND=c10d", "c10d needs --rdzv-endpoint"},
    {"--rdzv-backend=zookeeper t.py", NULL, "expected static, c10d or etcd"},
    {"--rdzv-endpoint=[::1 t.py", NULL, "--rdzv-endpoint"},
    {"--rdzv-endpoint=h:99999 t.py", NULL, "--rdzv-endpoint"},
    {"--rdzv-conf=join_timeout=soon t.py", NULL, "--rdzv-conf: invalid join_timeout 'soon'"},
    {"--rdzv-conf=is_host=perhaps t.py", NULL, "--rdzv-conf: invalid is_host"},
    {"--rdzv-conf=novalue t.py", NULL, "--rdzv-conf: invalid entry 'novalue'"},
    {"--rdzv-conf=store_type=etcd t.py", NULL, "--rdzv-conf: invalid store_type 'etcd'"},
    {"--rdzv-conf=keep_alive_max_attempt=0 t.py", NULL, "invalid keep_alive_max_attempt '0'"},
    {"--rdzv-conf=keep_alive_interval=-1 t.py", NULL, "invalid keep_alive_interval '-1'"},
    {"--rdzv-backend=etcd --rdzv-endpoint=a "
     "--rdzv-conf=keep_alive_interval=1e7,keep_alive_max_attempt=1000 t.py",
     NULL,
     "--rdzv-conf: keep_alive_interval=10000000 and keep_alive_max_attempt=1000 ask a lease of "
     "60000000000 s from etcd (6 times their product), over its longest, 9000000000 s"},
    {"--standalone=1 t.py", NULL, "--standalone: takes no value"},
    {"t.py", "PET_STANDALONE=maybe", "PET_STANDALONE: invalid value 'maybe'"},
    {"t.py", "PET_NPROC_PER_NODE=zero", "PET_NPROC_PER_NODE: invalid value 'zero'"},
    {"--max-restarts=-1 t.py", NULL, "--max-restarts: invalid value '-1'"},
    {"--max-restarts -1 t.py", NULL, "--max-restarts: invalid value '-1'"},
    {"--monitor-interval=0 t.py", NULL, "--monitor-interval"},
    {"--start-method=thread t.py", NULL, "--start-method: invalid value 'thread'"},
    {"--local-rank-arg=both t.py", NULL, "--local-rank-arg"},
    {"--redirects=4 t.py", NULL, "--redirects: invalid value '4'"},
    {"-r 0:4 t.py", NULL, "--redirects"},
    {"--tee=a:1 t.py", NULL, "--tee"},
    {"--tee=1: t.py", NULL, "--tee"},
    {"--tee=0:1, t.py", NULL, "--tee"},
    {"--local-ranks-filter=a t.py", NULL, "--local-ranks-filter"},
    {"--local-ranks-filter=0,,1 t.py", NULL, "--local-ranks-filter"},
    {"--local-ranks-filter=-1 t.py", NULL, "--local-ranks-filter"},
    {"--logs-specs=custom t.py", NULL, "--logs-specs: 'custom': ddp-launch has no"},
    {"--numa-binding=Node t.py", NULL, "--numa-binding: invalid value 'Node'"},
    {"--hot-spares=2 t.py", NULL, "--hot-spares: 2: spares wait at an elastic rendezvous"},
    {"--hot-spares=-1 t.py", NULL, "--hot-spares"},
    {"--checkpoint-replica-rate=1 t.py", NULL,
     "--checkpoint-replica-rate: invalid value '1': less than the least, 64K"},
    {"--checkpoint-replica-rate=63K t.py", NULL, "less than the least, 64K"},
    {"--checkpoint-replica-rate=1000G t.py", NULL,
     "--checkpoint-replica-rate: invalid value '1000G': more than the most, 64G"},
    {"--numa-binding=far t.py", NULL, "--numa-binding: invalid value 'far'"},
    {"--signals-to-handle=SIGKILL t.py", NULL, "cannot handle 'SIGKILL'"},
    {"--signals-to-handle=SIGFOO t.py", NULL, "cannot handle 'SIGFOO'"},
    {"--signals-to-handle=, t.py", NULL, "--signals-to-handle"},
    {"--shutdown-timeout=-1 t.py", NULL, "--shutdown-timeout"},
    {"--exit-code=maybe t.py", NULL, "--exit-code"},
    {"--store-max-key=0 t.py", NULL, "--store-max-key: invalid value '0'"},
    {"--store-max-value=8X t.py", NULL, "--store-max-value: invalid value '8X'"},
    {"--store-max-keys=-3 t.py", NULL, "--store-max-keys"},
    {"--store-busy-poll=-1 t.py", NULL, "--store-busy-poll: invalid value '-1'"},
    {"--store-busy-poll=2000000 t.py", NULL, "microseconds between 0 and 1000000"},
    {"--store-busy-poll=fast t.py", NULL, "--store-busy-poll: invalid value 'fast'"},
    {"--role= t.py", NULL, "--role: the value must not be empty"},
    {"--log-dir= t.py", NULL, "--log-dir"},
    {"--master-addr= t.py", NULL, "--master-addr"},
    {"--rdzv-id= t.py", NULL, "--rdzv-id"},
    {"--bogus t.py", NULL, "--bogus: unrecognized option"},
    {"--n=1 t.py", NULL, "ambiguous option: could be --nnodes, --nproc-per-node, --node-rank"},
    {"--nproc_per-node=2 t.py", NULL, "unrecognized option"},
    {"-x t.py", NULL, "-x: unrecognized option"},
    {"-mx t.py", NULL, "unrecognized option"},
    {"--role", NULL, "--role: expects a value"},
    {"--role --tee 3 t.py", NULL, "--role: expects a value"},
    {"-m --no-python mod", NULL, "--no-python: cannot be combined with -m/--module"},
    {"--use-env --local-rank-arg=dash t.py", NULL, "--use-env: contradicts"},
    /* Fractional least values are what they say (0.1 was a long: 0 was accepted). */
    {"--health-check-timeout=0 t.py", NULL,
     "--health-check-timeout: invalid value '0': must be between 0.1 and 86400 seconds"},
    {"--health-check-timeout=0.05 t.py", NULL, "must be between 0.1 and 86400 seconds"},
    {"--hang-timeout-floor=0 t.py", NULL,
     "--hang-timeout-floor: invalid value '0': must be between 0.01 and 86400 seconds"},
    {"--health-check-path=, t.py", NULL, "--health-check-path: ',' names no path"},
    {"--health-check-path=,,, t.py", NULL, "names no path"},
    /* PET_PRELOAD is --preload's default, which needs --warm-restarts as the flag does. */
    {"t.py", "PET_PRELOAD=numpy", "PET_PRELOAD: names what the zygote of --warm-restarts imports"},
    {"--nproc-per-node=2", NULL, "missing the training script"},
    {"", NULL, "missing the training script"},
};

/* torchrun's four modes, both spellings; like torchrun, no PET_NUMA_BINDING. */
static void test_numa_flags(void **state)
{
    static const struct {
        const char *args, *env;
        ddp_numa_mode_t mode;
        bool fallback;
    } cases[] = {
        {"--numa-binding=node t.py", NULL, DDP_NUMA_NODE, false},
        {"--numa_binding socket t.py", NULL, DDP_NUMA_SOCKET, false},
        {"--numa-binding=exclusive --numa-binding-fallback t.py", NULL, DDP_NUMA_EXCLUSIVE, true},
        {"--numa-binding=core-complex t.py", NULL, DDP_NUMA_CORE_COMPLEX, false},
        {"t.py", "PET_NUMA_BINDING=node", DDP_NUMA_OFF, false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        parse_t p;
        parse(&p, cases[i].args, cases[i].env);
        assert_int_equal(p.rc, 0);
        assert_int_equal(p.cfg.numa_mode, cases[i].mode);
        assert_int_equal(p.cfg.numa_fallback, cases[i].fallback);
        done(&p);
    }
}

static void test_bad_values_name_the_flag(void **state)
{
    for (size_t i = 0; i < sizeof bad_cases / sizeof bad_cases[0]; i++) {
        const bad_case_t *c = &bad_cases[i];
        parse_t p;
        parse(&p, c->args, c->env);
        if (p.rc != DDP_EUSAGE)
            fail_msg("'%s' (env '%s'): expected a usage error, got %d", c->args,
                     c->env ? c->env : "", p.rc);
        if (strstr(ddp_buf_str(&p.err), c->message) == NULL)
            fail_msg("'%s': error '%s' does not contain '%s'", c->args, ddp_buf_str(&p.err),
                     c->message);
        done(&p);
    }
}

static void test_prefixes(void **state)
{
    static const good_case_t cases[] = {
        {"nproc-per-node", "3", "int:3"},    /* --nproc: both spellings, one flag */
        {"max-restarts", "2", "2"},          /* --max-r (--max: --max-no-progress-restarts too) */
        {"standalone", NULL, "1"},           /* --stand */
        {"local-ranks-filter", "1", "set 1"} /* --local-ranks */
    };
    static const char *const typed[] = {"--nproc", "--max-r", "--stand", "--local-ranks"};
    for (size_t i = 0; i < 4; i++) {
        char args[128];
        if (cases[i].value)
            snprintf(args, sizeof args, "%s %s t.py", typed[i], cases[i].value);
        else
            snprintf(args, sizeof args, "%s t.py", typed[i]);
        expect_field(args, NULL, &cases[i]);
    }
    /* An exact name wins over being a prefix of a longer one. */
    static const good_case_t tee = {"tee", "2", "all=2"};
    expect_field("--tee 2 t.py", NULL, &tee);
    /* Short options: -r3, -r=3, -r 3, -m. */
    static const good_case_t r3 = {"redirects", "3", "all=3"};
    expect_field("-r3 t.py", NULL, &r3);
    expect_field("-r=3 t.py", NULL, &r3);
    expect_field("-r 3 t.py", NULL, &r3);
    static const good_case_t m = {"module", NULL, "1"};
    expect_field("-m pkg.train", NULL, &m);
}

static void test_command_line_beats_pet(void **state)
{
    static const good_case_t c = {"nproc-per-node", "2", "int:2"};
    expect_field("--nproc-per-node=2 t.py", "PET_NPROC_PER_NODE=3", &c);
    static const good_case_t off = {"standalone", NULL, "0"};
    expect_field("t.py", "PET_STANDALONE=0", &off);
    /* An empty PET_ variable is as good as unset. */
    static const good_case_t role = {"role", "default", "default"};
    expect_field("t.py", "PET_ROLE=", &role);
}

/* etcd's endpoints, each with its default port, torchrun's name for the backend too; its
 * store's port left free (every launcher's own), its node ranks assigned. */
static void test_etcd_flags(void **state)
{
    (void)state;
    parse_t p;
    parse(&p,
          "--nnodes=2:3 --rdzv-backend=etcd-v2 --rdzv-endpoint=e1,e2:5,[::1] "
          "--rdzv-conf=protocol=https,cacert=/etc/hostname t.py",
          NULL);
    assert_int_equal(p.rc, 0);
    assert_int_equal(p.cfg.rdzv_backend, DDP_RDZV_ETCD);
    assert_int_equal(p.cfg.etcd.nendpoints, 3);
    assert_string_equal(p.cfg.etcd.endpoints[0], "e1:2379");
    assert_string_equal(p.cfg.etcd.endpoints[1], "e2:5");
    assert_string_equal(p.cfg.etcd.endpoints[2], "[::1]:2379");
    assert_null(p.cfg.etcd.endpoints[3]);
    assert_true(p.cfg.etcd.https);
    assert_string_equal(p.cfg.etcd.cacert, "/etc/hostname");
    assert_true(ddp_config_dynamic(&p.cfg));
    assert_int_equal(ddp_config_store_host(&p.cfg), DDP_STORE_HOST_ELECTED);
    done(&p);
    /* etcdctl's schemes: https:// is TLS, as protocol=https; http:// is not. */
    static const struct {
        const char *args;
        const char *first;
        bool https;
    } schemes[] = {
        {"--rdzv-endpoint=HTTP://127.0.0.1:25880", "127.0.0.1:25880", false},
        {"--rdzv-endpoint=https://e1,https://[::1]:5", "e1:2379", true},
        {"--rdzv-endpoint=https://e1,e2 --rdzv-conf=protocol=https", "e1:2379", true},
        {"--rdzv-endpoint=http://e1,e2 --rdzv-conf=protocol=http", "e1:2379", false},
        {"--rdzv-endpoint=fe80::1%eth0", "[fe80::1%eth0]:2379", false},
    };
    for (size_t i = 0; i < sizeof schemes / sizeof schemes[0]; i++) {
        char args[256];
        snprintf(args, sizeof args, "--nnodes=2 --rdzv-backend=etcd %s t.py", schemes[i].args);
        parse(&p, args, NULL);
        if (p.rc != 0)
            fail_msg("'%s': %s", args, ddp_buf_str(&p.err));
        assert_string_equal(p.cfg.etcd.endpoints[0], schemes[i].first);
        assert_int_equal(p.cfg.etcd.https, schemes[i].https);
        done(&p);
    }
    /* c10d's endpoint as before: HOST[:PORT], [IPV6]:PORT or an IPv6 address. */
    static const char *const c10d[] = {"head:29400", "[::1]:29400", "::1", "head"};
    for (size_t i = 0; i < sizeof c10d / sizeof c10d[0]; i++) {
        char args[256];
        snprintf(args, sizeof args, "--nnodes=2 --rdzv-backend=c10d --rdzv-endpoint=%s t.py",
                 c10d[i]);
        parse(&p, args, NULL);
        if (p.rc != 0)
            fail_msg("'%s': %s", args, ddp_buf_str(&p.err));
        done(&p);
    }
}

/* An elastic job: a range of nodes with c10d. */
static void test_elastic_nodes(void **state)
{
    parse_t p;
    parse(&p, "--nnodes=1:4 --rdzv-backend=c10d --rdzv-endpoint=head:29400 t.py", NULL);
    assert_int_equal(p.rc, 0);
    assert_int_equal(p.cfg.nnodes_min, 1);
    assert_int_equal(p.cfg.nnodes_max, 4);
    done(&p);
}

/* Inside a Slurm job: SLURM_NNODES, SLURM_NODEID and the first host of
 * SLURM_JOB_NODELIST where neither a flag nor PET_ gives them; not with --standalone. */
static void test_slurm_environment(void **state)
{
    const char *slurm = "SLURM_NNODES=1 SLURM_NODEID=0 SLURM_JOB_NODELIST=gpu[07-09,12],login";
    static const good_case_t addr = {"master-addr", NULL, "gpu07"};
    expect_field("t.py", slurm, &addr);
    static const good_case_t flag = {"master-addr", NULL, "10.0.0.1"};
    expect_field("--master-addr=10.0.0.1 t.py", slurm, &flag);
    static const good_case_t pet = {"master-addr", NULL, "head"};
    expect_field("t.py", "PET_MASTER_ADDR=head SLURM_JOB_NODELIST=gpu[07-09]", &pet);
    static const good_case_t standalone = {"master-addr", NULL, "127.0.0.1"};
    expect_field("--standalone t.py", slurm, &standalone);
    static const good_case_t nodes = {"nnodes", NULL, "1:1"};
    expect_field("t.py", slurm, &nodes);

    parse_t p;
    parse(&p, "t.py", "SLURM_JOB_NODELIST=gpu[07-");
    assert_int_equal(p.rc, DDP_EUSAGE);
    assert_non_null(strstr(ddp_buf_str(&p.err), "SLURM_JOB_NODELIST"));
    assert_non_null(strstr(ddp_buf_str(&p.err), "'[' without ']'"));
    done(&p);
    parse(&p, "t.py", "SLURM_NODEID=x");
    assert_int_equal(p.rc, DDP_EUSAGE);
    assert_non_null(strstr(ddp_buf_str(&p.err), "SLURM_NODEID: invalid value 'x'"));
    done(&p);
    /* Slurm's node id beyond its node count is the same error as the flags'. */
    parse(&p, "t.py", "SLURM_NNODES=1 SLURM_NODEID=3");
    assert_int_equal(p.rc, DDP_EUSAGE);
    assert_non_null(strstr(ddp_buf_str(&p.err), "3 must be less than --nnodes (1)"));
    done(&p);
}

/* A real step: the step's node list names the store's host; more than one task on this
 * node is refused; the job's id gives the port of a multi-node job (not of one node, not
 * over a given port). */
static void test_slurm_step(void **state)
{
    const char *step = "SLURM_JOB_ID=77 SLURM_STEP_ID=0 SLURM_NNODES=2 SLURM_NODEID=1 "
                       "SLURM_JOB_NODELIST=n[0-2] SLURM_STEP_NODELIST=n[1-2] "
                       "SLURM_STEP_TASKS_PER_NODE=1(x2)";
    static const good_case_t addr = {"master-addr", NULL, "n1"};
    expect_field("t.py", step, &addr);
    static const good_case_t port = {"master-port", NULL, "10077"};
    expect_field("t.py", step, &port);
    static const good_case_t given = {"master-port", NULL, "29400"};
    expect_field("--master-port=29400 t.py", step, &given);
    static const good_case_t one = {"master-port", NULL, "29500"};
    expect_field("t.py", "SLURM_JOB_ID=77 SLURM_STEP_ID=0 SLURM_NNODES=1 SLURM_NODEID=0", &one);
    parse_t p;
    parse(&p, "t.py",
          "SLURM_JOB_ID=77 SLURM_STEP_ID=0 SLURM_NNODES=2 SLURM_NODEID=1 "
          "SLURM_STEP_TASKS_PER_NODE=1,2");
    assert_int_equal(p.rc, DDP_EUSAGE);
    assert_non_null(strstr(ddp_buf_str(&p.err), "srun started 2 tasks on this node"));
    done(&p);
    parse(&p, "t.py", step);
    assert_int_equal(p.rc, 0);
    assert_int_equal(p.cfg.slurm_fanout, 0);
    done(&p);
}

/* In an allocation outside a step (sbatch's script): no place from Slurm's variables,
 * which describe the allocation; one launcher a node through srun instead, unless the
 * node flags are given or the allocation is one node. */
static void test_slurm_allocation(void **state)
{
    const char *batch = "SLURM_JOB_ID=9 SLURM_JOB_NUM_NODES=3 SLURM_NNODES=3 SLURM_NODEID=0 "
                        "SLURM_JOB_NODELIST=n[0-2]";
    parse_t p;
    parse(&p, "--nproc-per-node=2 t.py", batch);
    assert_int_equal(p.rc, 0);
    assert_int_equal(p.cfg.slurm_fanout, 3);
    assert_int_equal(p.cfg.nnodes_max, 1);
    done(&p);
    parse(&p, "--nnodes=1 t.py", batch);
    assert_int_equal(p.rc, 0);
    assert_int_equal(p.cfg.slurm_fanout, 0);
    done(&p);
    /* --nnodes typed as the allocation's count starts every node too; another count does
     * not (ddp-launch says so at once: see test_env_contract). */
    parse(&p, "--nnodes=3 t.py", batch);
    assert_int_equal(p.rc, 0);
    assert_int_equal(p.cfg.slurm_fanout, 3);
    done(&p);
    parse(&p, "--nnodes=2 t.py", batch);
    assert_int_equal(p.rc, 0);
    assert_int_equal(p.cfg.slurm_fanout, 0);
    done(&p);
    parse(&p, "t.py", "SLURM_JOB_ID=9 SLURM_JOB_NUM_NODES=1 SLURM_NNODES=1");
    assert_int_equal(p.rc, 0);
    assert_int_equal(p.cfg.slurm_fanout, 0);
    done(&p);
    /* One node allocated elsewhere (salloc's shell on a login host): srun runs it there;
     * on the allocated node itself (sbatch's script) it runs here. */
    parse(&p, "t.py", "SLURM_JOB_ID=9 SLURM_JOB_NUM_NODES=1 SLURM_JOB_NODELIST=gpu-elsewhere-7");
    assert_int_equal(p.rc, 0);
    assert_int_equal(p.cfg.slurm_fanout, 1);
    done(&p);
    char self[200], env[400];
    assert_int_equal(gethostname(self, sizeof self), 0);
    snprintf(env, sizeof env, "SLURM_JOB_ID=9 SLURM_JOB_NUM_NODES=1 SLURM_JOB_NODELIST=%s", self);
    parse(&p, "t.py", env);
    assert_int_equal(p.rc, 0);
    assert_int_equal(p.cfg.slurm_fanout, 0);
    done(&p);
    parse(&p, "--standalone t.py", batch);
    assert_int_equal(p.rc, 0);
    assert_int_equal(p.cfg.slurm_fanout, 0);
    done(&p);
}

/* --hosts and --hostfile name the nodes: one of them, a static job (no node flags) or an
 * etcd one (no --node-rank); and no srun fan-out inside a Slurm allocation when they are
 * given. */
static void test_hosts_flags(void **state)
{
    static const struct {
        const char *args, *message;
    } bad[] = {
        {"--hosts=a,b --hostfile=f t.py", "--hosts: and --hostfile both name the job's nodes"},
        {"--hosts=a,b --nnodes=2 t.py",
         "--hosts: gives the nodes and their ranks: leave out --nnodes"},
        {"--hostfile=f --node-rank=1 --nnodes=1 t.py", "leave out --node-rank"},
        {"--hosts=a,b --standalone t.py", "not with --standalone"},
        {"--hosts=a,b --rdzv-backend=c10d --rdzv-endpoint=a t.py",
         "not with --rdzv-backend=c10d: its store's host is the endpoint's"},
        {"--hosts=a,b --rdzv-backend=etcd --rdzv-endpoint=e --node-rank=1 t.py",
         "with --rdzv-backend=etcd, node ranks go in joining order: leave out --node-rank"},
    };
    parse_t p;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        parse(&p, bad[i].args, NULL);
        assert_int_equal(p.rc, DDP_EUSAGE);
        if (strstr(ddp_buf_str(&p.err), bad[i].message) == NULL)
            fail_msg("'%s': '%s'", bad[i].args, ddp_buf_str(&p.err));
        done(&p);
    }
    parse(&p, "--hosts=a,b --nproc-per-node=2 t.py", "SLURM_JOB_ID=9 SLURM_JOB_NUM_NODES=3");
    assert_int_equal(p.rc, 0);
    assert_string_equal(p.cfg.hosts, "a,b");
    assert_int_equal(p.cfg.slurm_fanout, 0);
    assert_true(p.cfg.nproc_per_node_given);
    done(&p);
    /* etcd: --nnodes as given, and a run id of the job's own (a UUID) where none is. */
    parse(&p, "--hosts=a,b,c --rdzv-backend=etcd --rdzv-endpoint=e --nnodes=2:3 t.py", NULL);
    assert_int_equal(p.rc, 0);
    assert_int_equal(p.cfg.nnodes_min, 2);
    assert_int_equal(p.cfg.nnodes_max, 3);
    assert_int_equal(strlen(p.cfg.run_id), 36);
    done(&p);
    parse(&p, "--hosts=a,b --rdzv-backend=etcd --rdzv-endpoint=e --rdzv-id=j t.py", NULL);
    assert_int_equal(p.rc, 0);
    assert_string_equal(p.cfg.run_id, "j");
    done(&p);
}

/* --env and --env-list repeat, in order: NAME=VALUE as given, NAME with this launcher's
 * value; a name that is not one, one not set, or one of the worker contract's is refused;
 * the script's own --env is the script's. */
static void test_env_flags(void **state)
{
    parse_t p;
    parse(&p, "--env A=1 --env=B --env-list C,D --env_list=A t.py --env X=2", "B=b C=c=c D= A=z");
    assert_int_equal(p.rc, 0);
    assert_int_equal(p.cfg.nenv, 5);
    static const char *const want[] = {"A=1", "B=b", "C=c=c", "D=", "A=z"};
    for (int i = 0; i < 5; i++)
        assert_string_equal(p.cfg.env_set[i], want[i]);
    done(&p);
    /* A multi-node job: a name unset here stays bare, for node 0's value. */
    parse(&p, "--nnodes=2 --node-rank=1 --master-addr=h --env NOPE --env A t.py", "A=1");
    assert_int_equal(p.rc, 0);
    assert_int_equal(p.cfg.nenv, 2);
    assert_string_equal(p.cfg.env_set[0], "NOPE");
    assert_string_equal(p.cfg.env_set[1], "A=1");
    done(&p);
    static const struct {
        const char *args, *env, *message;
    } bad[] = {
        {"--env NOPE t.py", NULL, "--env: NOPE is not set here: give NOPE=VALUE"},
        {"--env-list A,NOPE t.py", "A=1", "--env-list: NOPE is not set here"},
        {"--env 9A=1 t.py", NULL, "'9A' is not a variable name"},
        {"--env A-B=1 t.py", NULL, "'A-B' is not a variable name"},
        {"--env =1 t.py", NULL, "'' is not a variable name"},
        {"--env WORLD_SIZE=8 t.py", NULL, "WORLD_SIZE is set by ddp-launch for each worker"},
        {"--env-list MASTER_PORT t.py", "MASTER_PORT=1", "MASTER_PORT is set by ddp-launch"},
        {"--event-log-handler=json t.py", NULL, "expected null, console or file:PATH"},
        {"--event-log-handler=file: t.py", NULL, "expected null, console or file:PATH"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        parse(&p, bad[i].args, bad[i].env);
        assert_int_equal(p.rc, DDP_EUSAGE);
        if (strstr(ddp_buf_str(&p.err), bad[i].message) == NULL)
            fail_msg("'%s': '%s'", bad[i].args, ddp_buf_str(&p.err));
        done(&p);
    }
}

static void test_script_and_its_arguments_untouched(void **state)
{
    parse_t p;
    parse(&p, "--nproc-per-node 2 train.py --lr 0.1 --nproc-per-node 4 -m --", NULL);
    assert_int_equal(p.rc, 0);
    assert_string_equal(p.cfg.script, "train.py");
    assert_int_equal(p.cfg.nproc_per_node, 2);
    assert_int_equal(p.cfg.nscript_args, 6);
    assert_string_equal(p.cfg.script_args[0], "--lr");
    assert_string_equal(p.cfg.script_args[2], "--nproc-per-node");
    assert_string_equal(p.cfg.script_args[3], "4");
    assert_string_equal(p.cfg.script_args[4], "-m");
    assert_string_equal(p.cfg.script_args[5], "--");
    assert_false(p.cfg.module);
    done(&p);

    /* "--" ends the options: a script whose name starts with a dash. */
    parse(&p, "--nproc 2 -- -odd-name.py --x", NULL);
    assert_int_equal(p.rc, 0);
    assert_string_equal(p.cfg.script, "-odd-name.py");
    assert_int_equal(p.cfg.nscript_args, 1);
    done(&p);
}

/* A parse whose log (warnings and up) is read back into `logged`. */
static void parse_logged(parse_t *p, const char *args, const char *env, ddp_buf_t *logged)
{
    char path[] = "/tmp/test_cli_log_XXXXXX", text[4096];
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    unlink(path);
    parse_to(p, args, env, DDP_LOG_WARN, fd);
    ssize_t n = pread(fd, text, sizeof text - 1, 0);
    ddp_buf_clear(logged);
    if (n > 0)
        ddp_buf_append(logged, text, (size_t)n);
}

/* A flag that does nothing in its combination is said, in one line naming it and why;
 * the same flag where it acts, or left at its default, says nothing. */
static void test_flags_without_effect_are_said(void **state)
{
    static const struct {
        const char *args, *env;
        const char *said; /* NULL: nothing */
    } cases[] = {
        {"--hang-timeout-floor=5 t.py", NULL,
         "--hang-timeout-floor=5 has no effect without --hang-timeout=auto"},
        {"--hang-timeout=auto --hang-timeout-floor=5 t.py", NULL, NULL},
        {"--straggler-report=0 --straggler-threshold=2 t.py", NULL,
         "--straggler-threshold=2 has no effect with --straggler-report=0"},
        {"--straggler-threshold=2 t.py", NULL, NULL},
        {"--numa-binding-fallback t.py", NULL,
         "--numa-binding-fallback has no effect without --numa-binding"},
        {"--health-check-timeout=5 t.py", NULL,
         "--health-check-timeout=5 has no effect without --health-check or --health-check-path"},
        {"--health-check-path=/tmp --health-check-timeout=5 t.py", NULL, NULL},
        {"--max-no-progress-restarts=2 t.py", NULL,
         "--max-no-progress-restarts=2 has no effect with --max-restarts=0"},
        {"--max-restarts=3 --max-no-progress-restarts=2 t.py", NULL, NULL},
        {"--warm-restarts t.py", NULL,
         "--warm-restarts has no effect with --max-restarts=0 on one node"},
        {"--warm-restarts --max-restarts=1 t.py", NULL, NULL},
        {"--exclude-after=2 t.py", NULL, "--exclude-after=2 has no effect on one node"},
        {"--hosts=a,b --exclude-after=2 t.py", NULL, NULL}, /* (two nodes, from --hosts) */
        {"--straggler-action=exclude t.py", NULL,
         "--straggler-action=exclude has no effect on one node"},
        {"--nnodes=1:2 --rdzv-backend=c10d --rdzv-endpoint=h --node-rank=1 t.py", NULL,
         "--node-rank=1 has no effect with --rdzv-backend=c10d"},
        {"t.py", "PET_HOSTS=a,b",
         "PET_HOSTS is ignored: --hosts takes no default from the "
         "environment"},
        {"t.py", "PET_NUMA_BINDING=node", "PET_NUMA_BINDING is ignored"},
        {"t.py", "PET_WARM_RESTARTS=1 PET_MAX_RESTARTS=2", NULL},
        {"t.py", NULL, NULL},
    };
    ddp_buf_t logged = DDP_BUF_INIT;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        parse_t p;
        parse_logged(&p, cases[i].args, cases[i].env, &logged);
        if (p.rc != 0)
            fail_msg("'%s': %s", cases[i].args, ddp_buf_str(&p.err));
        const char *text = ddp_buf_str(&logged);
        if (cases[i].said == NULL && logged.len > 0)
            fail_msg("'%s' (env '%s'): expected nothing said, got '%s'", cases[i].args,
                     cases[i].env ? cases[i].env : "", text);
        if (cases[i].said != NULL && strstr(text, cases[i].said) == NULL)
            fail_msg("'%s' (env '%s'): expected '%s', got '%s'", cases[i].args,
                     cases[i].env ? cases[i].env : "", cases[i].said, text);
        if (cases[i].said != NULL && strchr(text, '\n') != strrchr(text, '\n'))
            fail_msg("'%s': more than one line: '%s'", cases[i].args, text);
        done(&p);
    }
    ddp_buf_free(&logged);
    /* PET_WARM_RESTARTS and PET_PRELOAD are the flags' defaults, as every PET_ is. */
    parse_t p;
    parse(&p, "t.py", "PET_WARM_RESTARTS=1 PET_PRELOAD=numpy PET_MAX_RESTARTS=1");
    assert_int_equal(p.rc, 0);
    assert_true(p.cfg.warm_restarts);
    assert_string_equal(p.cfg.preload, "numpy");
    done(&p);
    /* The paths checked are the named ones: empty items are no path. */
    parse(&p, "--health-check-path=/tmp,,/data, t.py", NULL);
    assert_int_equal(p.rc, 0);
    assert_string_equal(p.cfg.health_paths, "/tmp,,/data,");
    assert_true(p.cfg.health_timeout == 60);
    done(&p);
}

/* --help's list of exit statuses has every status ddp-launch(1) documents. */
static void test_help_lists_every_exit_status(void **state)
{
    char path[] = "/tmp/test_cli_help_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    unlink(path);
    ddp_cli_print_help(fd);
    char text[32768];
    ssize_t n = pread(fd, text, sizeof text - 1, 0);
    close(fd);
    assert_true(n > 0);
    text[n] = '\0';
    const char *list = strstr(text, "Exit status:");
    assert_non_null(list);
    static const char *const statuses[] = {"0 success",  "1 a worker failed", "2 usage error",
                                           "3 launcher", "4 the store",       "5 the nodes",
                                           "6 the job",  "126/127",           "128+N"};
    for (size_t i = 0; i < sizeof statuses / sizeof *statuses; i++)
        if (strstr(list, statuses[i]) == NULL)
            fail_msg("--help's exit statuses lack '%s': %s", statuses[i], list);
}

static void test_help_and_version_act_at_once(void **state)
{
    parse_t p;
    parse(&p, "--nproc-per-node=2 --help --bogus", NULL);
    assert_int_equal(p.rc, 0);
    assert_true(p.cfg.help);
    done(&p);
    parse(&p, "-h", NULL);
    assert_int_equal(p.rc, 0);
    assert_true(p.cfg.help);
    done(&p);
    parse(&p, "--version", NULL);
    assert_int_equal(p.rc, 0);
    assert_true(p.cfg.version);
    done(&p);
}

static void test_defaults_and_environment(void **state)
{
    parse_t p;
    parse(&p, "train.py",
          "PYTHON_EXEC=/opt/py/bin/python TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE=[${rank}]:");
    assert_int_equal(p.rc, 0);
    assert_int_equal(p.cfg.nnodes_min, 1);
    assert_int_equal(p.cfg.nproc_per_node, 1);
    assert_string_equal(p.cfg.master_addr, "127.0.0.1");
    assert_int_equal(p.cfg.master_port, 29500);
    assert_string_equal(p.cfg.run_id, "none");
    assert_string_equal(p.cfg.role, "default");
    assert_int_equal(p.cfg.max_restarts, 0);
    assert_true(p.cfg.shutdown_timeout == 30);
    assert_false(p.cfg.virtual_local_rank);
    assert_null(p.cfg.dup_filters[DDP_STD_OUT]);
    assert_int_equal(p.cfg.nsignals, 4);
    assert_int_equal(p.cfg.signals[0], SIGTERM);
    assert_int_equal(p.cfg.signals[3], SIGQUIT);
    assert_string_equal(p.cfg.python_exec, "/opt/py/bin/python");
    assert_string_equal(p.cfg.prefix_template, "[${rank}]:");
    assert_int_equal(p.cfg.local_rank_arg, DDP_LOCAL_RANK_ARG_NONE);
    done(&p);
    parse(&p, "train.py", NULL);
    assert_int_equal(p.rc, 0);
    assert_string_equal(p.cfg.python_exec, "python3");
    assert_null(p.cfg.prefix_template);
    done(&p);
    /* torchrun's TORCH_ELASTIC_SHUTDOWN_TIMEOUT, under the flag and its PET_. */
    parse(&p, "train.py", "TORCH_ELASTIC_SHUTDOWN_TIMEOUT=120");
    assert_true(p.rc == 0 && p.cfg.shutdown_timeout == 120);
    done(&p);
    parse(&p, "train.py", "TORCH_ELASTIC_SHUTDOWN_TIMEOUT=120 PET_SHUTDOWN_TIMEOUT=7");
    assert_true(p.rc == 0 && p.cfg.shutdown_timeout == 7);
    done(&p);
    parse(&p, "--shutdown-timeout=3 train.py", "TORCH_ELASTIC_SHUTDOWN_TIMEOUT=120");
    assert_true(p.rc == 0 && p.cfg.shutdown_timeout == 3);
    done(&p);
    /* An empty filter list ("") is one filter that every line holds, as in torchrun. */
    parse(&p, "--duplicate-stdout-filters= train.py", NULL);
    assert_int_equal(p.rc, 0);
    assert_int_equal(p.cfg.ndup_filters[DDP_STD_OUT], 1);
    assert_string_equal(p.cfg.dup_filters[DDP_STD_OUT][0], "");
    done(&p);
}

static void test_std_spec_and_filter_lookup(void **state)
{
    parse_t p;
    parse(&p, "-r 0:1,12:2 -t 3 --local-ranks-filter 1,12 t.py", NULL);
    assert_int_equal(p.rc, 0);
    assert_int_equal(ddp_std_for(&p.cfg.redirects, 0), DDP_STD_OUT);
    assert_int_equal(ddp_std_for(&p.cfg.redirects, 12), DDP_STD_ERR);
    assert_int_equal(ddp_std_for(&p.cfg.redirects, 5), DDP_STD_NONE);
    assert_int_equal(ddp_std_for(&p.cfg.tee, 7), DDP_STD_ALL);
    assert_true(ddp_config_rank_shown(&p.cfg, 12));
    assert_false(ddp_config_rank_shown(&p.cfg, 0));
    done(&p);
    parse(&p, "t.py", NULL);
    assert_true(ddp_config_rank_shown(&p.cfg, 99));
    done(&p);
}

static void test_resolve(void **state)
{
    parse_t p;
    parse(&p, "--nproc-per-node=cpu t.py", NULL);
    assert_int_equal(p.rc, 0);
    assert_int_equal(ddp_resolve_config(&p.cfg, &p.log, &p.err), 0);
    assert_true(p.cfg.nproc_per_node >= 1);
    assert_int_equal(p.cfg.master_port, 29500); /* static keeps its port */
    done(&p);

    /* No GPU on a test machine: gpu is a clear usage error, auto falls back to CPUs. */
    parse(&p, "--nproc-per-node=gpu t.py", NULL);
    assert_int_equal(p.rc, 0);
    int rc = ddp_resolve_config(&p.cfg, &p.log, &p.err);
    if (rc == 0) {
        assert_true(p.cfg.nproc_per_node >= 1); /* a machine with a GPU */
    } else {
        assert_int_equal(rc, DDP_EUSAGE);
        assert_non_null(strstr(ddp_buf_str(&p.err), "--nproc-per-node: gpu:"));
        assert_non_null(strstr(ddp_buf_str(&p.err), "CUDA"));
    }
    done(&p);
    parse(&p, "--nproc-per-node=auto t.py", NULL);
    assert_int_equal(ddp_resolve_config(&p.cfg, &p.log, &p.err), 0);
    assert_true(p.cfg.nproc_per_node >= 1);
    done(&p);

    /* --standalone: a random run id (a UUID) and port 0 (the store picks a free one),
     * explicit values ignored. */
    parse(&p, "--standalone --rdzv-id=mine --master-port=1 t.py", NULL);
    assert_int_equal(ddp_resolve_config(&p.cfg, &p.log, &p.err), 0);
    assert_int_equal(strlen(p.cfg.run_id), 36);
    assert_int_equal(p.cfg.run_id[14], '4');
    assert_int_equal(p.cfg.master_port, 0);
    assert_int_equal(p.cfg.rdzv_backend, DDP_RDZV_C10D);
    assert_string_equal(p.cfg.master_addr, "127.0.0.1");
    char first[40];
    snprintf(first, sizeof first, "%s", p.cfg.run_id);
    done(&p);
    parse(&p, "--standalone t.py", NULL);
    assert_int_equal(ddp_resolve_config(&p.cfg, &p.log, &p.err), 0);
    assert_string_not_equal(first, p.cfg.run_id);
    done(&p);

    /* c10d: the store listens at the endpoint (29400 by default). */
    parse(&p, "--rdzv-backend=c10d --rdzv-endpoint=node7 t.py", NULL);
    assert_int_equal(p.rc, 0);
    assert_int_equal(ddp_resolve_config(&p.cfg, &p.log, &p.err), 0);
    assert_string_equal(p.cfg.master_addr, "node7");
    assert_int_equal(p.cfg.master_port, 29400);
    assert_int_equal(p.cfg.rdzv_backend, DDP_RDZV_C10D);
    done(&p);

    /* The store's limits: PyTorch's by default, sizes with K/M/G. */
    parse(&p, "t.py", NULL);
    assert_int_equal(p.cfg.store_limits.max_key, 8192);
    assert_int_equal(p.cfg.store_limits.max_value, 8u << 20);
    assert_int_equal(p.cfg.store_limits.max_keys, 131072);
    assert_int_equal(p.cfg.store_busy_poll_us, 200);
    done(&p);
    parse(&p, "--store_busy_poll=0 t.py", NULL);
    assert_int_equal(p.rc, 0);
    assert_int_equal(p.cfg.store_busy_poll_us, 0);
    done(&p);
    parse(&p, "t.py", "PET_STORE_BUSY_POLL=50");
    assert_int_equal(p.rc, 0);
    assert_int_equal(p.cfg.store_busy_poll_us, 50);
    done(&p);
    parse(&p, "--store-max-key=16K --store_max_value 64M --store-max-keys=10 t.py", NULL);
    assert_int_equal(p.rc, 0);
    assert_int_equal(p.cfg.store_limits.max_key, 16384);
    assert_int_equal(p.cfg.store_limits.max_value, 64u << 20);
    assert_int_equal(p.cfg.store_limits.max_keys, 10);
    assert_true(p.cfg.store_limits.max_request >= (uint64_t)(128u << 20));
    done(&p);
}

/* A file in a fresh directory with `head` as its content and `mode`; its path in `out`. */
static void write_script(char *dir, char *out, size_t cap, const char *name, const char *head,
                         size_t len, mode_t mode)
{
    snprintf(out, cap, "%s/%s", dir, name);
    int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, head, len), (ssize_t)len);
    close(fd);
    assert_int_equal(chmod(out, mode), 0);
}

/* Whether resolution runs `script` (with `flags` before it) directly, without python. */
static bool runs_directly(const char *flags, const char *script)
{
    parse_t p;
    char args[600];
    snprintf(args, sizeof args, "%s %s --lr 1", flags, script);
    parse(&p, args, NULL);
    assert_int_equal(p.rc, 0);
    assert_int_equal(ddp_resolve_config(&p.cfg, &p.log, &p.err), 0);
    bool direct = p.cfg.no_python;
    done(&p);
    return direct;
}

/* What python could never run runs as a program; a Python script, or anything that
 * is not clearly something else, still goes to python, as in torchrun. */
static void test_resolve_program_or_script(void **state)
{
    char dir[] = "/tmp/ddp-test-cli-XXXXXX", path[600];
    assert_non_null(mkdtemp(dir));
    static const char elf[] = "\177ELF\2\1\1\0\0\0\0\0\0\0\0\0";
    write_script(dir, path, sizeof path, "train", elf, sizeof elf, 0755);
    assert_true(runs_directly("", path));
    assert_true(runs_directly("--nproc-per-node=2", path));
    assert_false(runs_directly("--run-path", path)); /* python asked for explicitly */
    static const char sh[] = "#!/bin/sh\necho $RANK\n";
    write_script(dir, path, sizeof path, "train.sh", sh, sizeof sh - 1, 0755);
    assert_true(runs_directly("", path));
    write_script(dir, path, sizeof path, "noexec.sh", sh, sizeof sh - 1, 0644);
    assert_false(runs_directly("", path)); /* it could not be executed either */
    static const char py[] = "#!/usr/bin/env python3\nimport os\n";
    write_script(dir, path, sizeof path, "train.py", py, sizeof py - 1, 0755);
    assert_false(runs_directly("", path));
    static const char py_s[] = "#!/usr/bin/env -S python3 -u\n# sh would say: not found\n";
    write_script(dir, path, sizeof path, "s.py", py_s, sizeof py_s - 1, 0755);
    assert_false(runs_directly("", path));
    static const char pypy[] = "#!/usr/bin/env pypy3\nimport os\n";
    write_script(dir, path, sizeof path, "p.py", pypy, sizeof pypy - 1, 0755);
    assert_false(runs_directly("", path));
    write_script(dir, path, sizeof path, "plain.py", "import os\n", 10, 0644);
    assert_false(runs_directly("", path));
    write_script(dir, path, sizeof path, "tiny", "1", 1, 0755);
    assert_false(runs_directly("", path));
    assert_false(runs_directly("", "/nonexistent/train.py")); /* python says why */
    assert_false(runs_directly("", dir));       /* python runs a directory's __main__.py */
    assert_false(runs_directly("-m", "train")); /* a module name, not a path */
    assert_true(runs_directly("--no-python", "/nonexistent/prog"));

    static const char *names[] = {"train", "train.sh", "noexec.sh", "train.py",
                                  "s.py",  "p.py",     "plain.py",  "tiny"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        assert_int_equal(unlink(path), 0);
    }
    assert_int_equal(rmdir(dir), 0);
}

static void test_signal_names(void **state)
{
    char buf[32];
    assert_string_equal(ddp_signal_name(SIGSEGV, buf, sizeof buf), "SIGSEGV");
    assert_string_equal(ddp_signal_name(SIGKILL, buf, sizeof buf), "SIGKILL");
    assert_string_equal(ddp_signal_name(SIGRTMIN + 1, buf, sizeof buf), buf);
    assert_int_equal(strncmp(buf, "SIG", 3), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_flag_every_spelling),
        cmocka_unit_test(test_bad_values_name_the_flag),
        cmocka_unit_test(test_numa_flags),
        cmocka_unit_test(test_prefixes),
        cmocka_unit_test(test_command_line_beats_pet),
        cmocka_unit_test(test_slurm_environment),
        cmocka_unit_test(test_slurm_step),
        cmocka_unit_test(test_slurm_allocation),
        cmocka_unit_test(test_hosts_flags),
        cmocka_unit_test(test_env_flags),
        cmocka_unit_test(test_elastic_nodes),
        cmocka_unit_test(test_etcd_flags),
        cmocka_unit_test(test_script_and_its_arguments_untouched),
        cmocka_unit_test(test_help_and_version_act_at_once),
        cmocka_unit_test(test_flags_without_effect_are_said),
        cmocka_unit_test(test_help_lists_every_exit_status),
        cmocka_unit_test(test_defaults_and_environment),
        cmocka_unit_test(test_std_spec_and_filter_lookup),
        cmocka_unit_test(test_resolve),
        cmocka_unit_test(test_resolve_program_or_script),
        cmocka_unit_test(test_signal_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
