/* The command line of ddp-launch: the flag table, the parser and the validation.
 *
 * Parsing happens in two passes: collect each flag's raw text (the command line over
 * its PET_* default), then convert and validate it with the flag's apply function,
 * whose errors name the flag as the user gave it. Main thread, before the loop. */
#include "config/cli.h"

#include "ddp_config.h"
#include "env.h"
#include "error.h"
#include "io.h"
#include "parse.h"
#include "host/signals.h"
#include "output/events.h"
#include "host/health.h"
#include "config/slurm.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

typedef int (*apply_fn)(ddp_launch_config_t *cfg, const char *value, const char *origin,
                        const ddp_log_t *log, ddp_buf_t *err);

/* How a flag's value is read: most by kind into a field of the config; the rest by a
 * function of their own. */
typedef enum {
    KIND_SWITCH,  /* bool: no value on the command line (true), 0 or 1 from PET_ */
    KIND_INT,     /* int within [min, max] */
    KIND_SECONDS, /* double within [min, max] */
    KIND_SIZE,    /* uint64_t: digits with an optional K, M or G */
    KIND_TEXT,    /* const char * into argv or the environment: not empty, at most max bytes */
    KIND_CHOICE,  /* int (an enum): the index of the value among `choices`; no field: checked */
    KIND_STD,     /* ddp_std_spec_t: torchrun's 0..3 or LOCAL_RANK:STD,... */
    KIND_CODE,    /* apply() */
} flag_kind_t;

#define NO_FIELD SIZE_MAX

/* One row per flag: the parser, --help and the man-page lint all read this table. */
typedef struct {
    const char *name; /* the dash spelling without "--"; the underscore one is derived */
    char short_name;  /* 'm', 'r', 't', 'h' or 0 */
    flag_kind_t kind;
    size_t field;               /* offsetof(ddp_launch_config_t, ...), or NO_FIELD */
    double min, max;            /* KIND_INT, KIND_SECONDS: the range (a fraction for seconds);
                                 * KIND_TEXT: max, the most bytes */
    const char *const *choices; /* KIND_CHOICE: NULL-terminated */
    apply_fn apply;             /* KIND_CODE */
    bool pet;                   /* reads its default from PET_<NAME> */
    bool at_once;               /* acts as soon as it is seen (--help, --version) */
    int group;                  /* --help's heading: an index into group_names */
    const char *arg;            /* --help: the value's name ("" for a switch) */
    const char *help;           /* --help: what it does ("\n" continues the line) */
} flag_t;

/* Formats "<origin>: <message>" (or just the message when origin is NULL) into err and
 * returns DDP_EUSAGE. */
__attribute__((format(printf, 3, 4))) static int usage(ddp_buf_t *err, const char *origin,
                                                       const char *fmt, ...)
{
    va_list ap;
    ddp_buf_clear(err);
    if (origin != NULL)
        ddp_buf_printf(err, "%s: ", origin);
    va_start(ap, fmt);
    ddp_buf_vprintf(err, fmt, ap);
    va_end(ap);
    return DDP_EUSAGE;
}

static int bad_value(ddp_buf_t *err, const char *origin, const char *value, const char *expected)
{
    return usage(err, origin, "invalid value '%s': expected %s", value, expected);
}

static int parse_int_flag(const char *value, const char *origin, long min, long max, int *out,
                          ddp_buf_t *err)
{
    long v;
    int r = ddp_parse_long(value, min, max, &v);
    if (r == -ERANGE)
        return usage(err, origin, "invalid value '%s': must be between %ld and %ld", value, min,
                     max);
    if (r)
        return bad_value(err, origin, value, "an integer");
    *out = (int)v;
    return 0;
}

static int parse_seconds_flag(const char *value, const char *origin, double min, double max,
                              double *out, ddp_buf_t *err)
{
    int r = ddp_parse_double(value, min, max, out);
    if (r == -ERANGE)
        return usage(err, origin, "invalid value '%s': must be between %g and %g seconds", value,
                     min, max);
    if (r)
        return bad_value(err, origin, value, "a number of seconds");
    return 0;
}

/* A boolean flag: no value on the command line means true; PET_X gives 0 or 1. */
static int parse_switch(const char *value, const char *origin, bool *out, ddp_buf_t *err)
{
    if (value == NULL) {
        *out = true;
        return 0;
    }
    if (ddp_parse_bool(value, out) != 0)
        return bad_value(err, origin, value, "0 or 1");
    return 0;
}

static int copy_text(const char *value, const char *origin, char *dst, size_t cap, ddp_buf_t *err)
{
    size_t len = strlen(value);
    if (len == 0)
        return usage(err, origin, "the value must not be empty");
    if (len >= cap)
        return usage(err, origin, "the value is longer than %zu bytes", cap - 1);
    memcpy(dst, value, len + 1);
    return 0;
}

static int apply_nnodes(ddp_launch_config_t *cfg, const char *value, const char *origin,
                        const ddp_log_t *log, ddp_buf_t *err)
{
    (void)log;
    static const char expected[] = "N or MIN:MAX with 0 < MIN <= MAX";
    char text[64];
    long lo, hi;
    if (strlen(value) >= sizeof text)
        return bad_value(err, origin, value, expected);
    strcpy(text, value);
    char *colon = strchr(text, ':');
    if (colon != NULL)
        *colon = '\0';
    if (ddp_parse_long(text, 1, INT_MAX, &lo) != 0)
        return bad_value(err, origin, value, expected);
    hi = lo;
    if (colon != NULL && ddp_parse_long(colon + 1, 1, INT_MAX, &hi) != 0)
        return bad_value(err, origin, value, expected);
    if (lo > hi)
        return bad_value(err, origin, value, expected);
    cfg->nnodes_min = (int)lo;
    cfg->nnodes_max = (int)hi;
    return 0;
}

static int apply_nproc_per_node(ddp_launch_config_t *cfg, const char *value, const char *origin,
                                const ddp_log_t *log, ddp_buf_t *err)
{
    (void)log;
    static const struct {
        const char *name;
        ddp_nproc_kind_t kind;
    } kinds[] = {{"cpu", DDP_NPROC_CPU},
                 {"gpu", DDP_NPROC_GPU},
                 {"auto", DDP_NPROC_AUTO},
                 {"xpu", DDP_NPROC_XPU}};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        if (strcmp(value, kinds[i].name) == 0) {
            cfg->nproc_kind = kinds[i].kind;
            return 0;
        }
    }
    long n;
    int r = ddp_parse_long(value, 1, DDP_MAX_LOCAL_WORKERS, &n);
    if (r == -ERANGE)
        return usage(err, origin, "invalid value '%s': must be between 1 and %d", value,
                     DDP_MAX_LOCAL_WORKERS);
    if (r)
        return bad_value(err, origin, value, "an integer, cpu, gpu, xpu or auto");
    cfg->nproc_kind = DDP_NPROC_INT;
    cfg->nproc_per_node = (int)n;
    return 0;
}

static int apply_master_addr(ddp_launch_config_t *cfg, const char *value, const char *origin,
                             const ddp_log_t *log, ddp_buf_t *err)
{
    (void)log;
    for (const char *p = value; *p; p++) {
        if (isspace((unsigned char)*p))
            return bad_value(err, origin, value, "a host name or address");
    }
    size_t len = strlen(value);
    if (len > 2 && value[0] == '[' && value[len - 1] == ']') {
        /* torchrun's IPv6 form, [::1]: the address is what is between the brackets. */
        int rc = copy_text(value + 1, origin, cfg->master_addr, sizeof cfg->master_addr, err);
        if (rc == 0)
            cfg->master_addr[len - 2] = '\0';
        return rc;
    }
    return copy_text(value, origin, cfg->master_addr, sizeof cfg->master_addr, err);
}

static int apply_rdzv_backend(ddp_launch_config_t *cfg, const char *value, const char *origin,
                              const ddp_log_t *log, ddp_buf_t *err)
{
    (void)log;
    if (strcmp(value, "static") == 0) {
        cfg->rdzv_backend = DDP_RDZV_STATIC;
    } else if (strcmp(value, "c10d") == 0) {
        cfg->rdzv_backend = DDP_RDZV_C10D;
    } else if (strncmp(value, "etcd", 4) == 0) {
        return usage(err, origin,
                     "the %s rendezvous backend is not supported by ddp-launch: use c10d "
                     "(dynamic) or static",
                     value);
    } else {
        return bad_value(err, origin, value, "static or c10d");
    }
    return 0;
}

static int apply_rdzv_endpoint(ddp_launch_config_t *cfg, const char *value, const char *origin,
                               const ddp_log_t *log, ddp_buf_t *err)
{
    (void)log;
    if (*value == '\0') {
        cfg->rdzv_endpoint_set = false;
        return 0;
    }
    if (ddp_parse_host_port(value, -1, cfg->rdzv_endpoint_host, sizeof cfg->rdzv_endpoint_host,
                            &cfg->rdzv_endpoint_port) != 0)
        return bad_value(err, origin, value, "HOST, HOST:PORT or [IPV6]:PORT");
    cfg->rdzv_endpoint_set = true;
    return 0;
}

static int apply_rdzv_id(ddp_launch_config_t *cfg, const char *value, const char *origin,
                         const ddp_log_t *log, ddp_buf_t *err)
{
    (void)log;
    if (*value == '\0')
        return usage(err, origin, "the value must not be empty");
    if (strlen(value) > 255)
        return usage(err, origin, "the value is longer than 255 bytes");
    char *copy = strdup(value);
    if (copy == NULL)
        return -ENOMEM;
    free(cfg->run_id);
    cfg->run_id = copy;
    return 0;
}

static int apply_rdzv_conf(ddp_launch_config_t *cfg, const char *value, const char *origin,
                           const ddp_log_t *log, ddp_buf_t *err)
{
    /* Keys ddp-launch accepts from torchrun's backends without using them (yet). */
    static const char *const quiet_keys[] = {"use_libuv", "rank"};
    struct {
        const char *key;
        double *slot;
    } seconds[] = {
        {"join_timeout", &cfg->rdzv_conf.join_timeout},
        {"last_call_timeout", &cfg->rdzv_conf.last_call_timeout},
        {"close_timeout", &cfg->rdzv_conf.close_timeout},
        {"read_timeout", &cfg->rdzv_conf.read_timeout},
        {"timeout", &cfg->rdzv_conf.timeout},
        {"keep_alive_interval", &cfg->rdzv_conf.keep_alive_interval},
    };
    char *copy = strdup(value), *save = NULL;
    int rc = 0;
    if (copy == NULL)
        return -ENOMEM;
    for (char *item = strtok_r(copy, ",", &save); item != NULL; item = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(item, '=');
        if (eq == NULL || eq == item) {
            rc = usage(err, origin, "invalid entry '%s': expected KEY=VALUE[,KEY=VALUE...]", item);
            goto out;
        }
        *eq = '\0';
        const char *key = item, *text = eq + 1;
        bool known = false;
        for (size_t i = 0; i < sizeof seconds / sizeof seconds[0]; i++) {
            if (strcmp(key, seconds[i].key) == 0) {
                known = true;
                if (ddp_parse_double(text, 1e-3, 1e7, seconds[i].slot) != 0) {
                    rc = usage(err, origin,
                               "invalid %s '%s': expected a positive number of seconds", key, text);
                    goto out;
                }
            }
        }
        if (strcmp(key, "keep_alive_max_attempt") == 0) {
            long attempts;
            known = true;
            if (ddp_parse_long(text, 1, 1000000, &attempts) != 0) {
                rc = usage(err, origin, "invalid keep_alive_max_attempt '%s': expected 1 or more",
                           text);
                goto out;
            }
            cfg->rdzv_conf.keep_alive_max_attempt = (int)attempts;
        }
        if (strcmp(key, "is_host") == 0) {
            bool is_host;
            known = true;
            if (ddp_parse_bool(text, &is_host) != 0) {
                rc = usage(err, origin, "invalid is_host '%s': expected true or false", text);
                goto out;
            }
            cfg->rdzv_conf.is_host = is_host;
        }
        if (strcmp(key, "store_type") == 0) {
            known = true;
            if (strcasecmp(text, "file") == 0) {
                ddp_log_warn(log,
                             "%s: store_type=file is not supported: the rendezvous uses "
                             "ddp-launch's TCP store at the endpoint",
                             origin);
            } else if (strcasecmp(text, "tcp") != 0) {
                rc = usage(err, origin, "invalid store_type '%s': expected tcp (or file)", text);
                goto out;
            }
        }
        for (size_t i = 0; i < sizeof quiet_keys / sizeof quiet_keys[0]; i++)
            known = known || strcmp(key, quiet_keys[i]) == 0;
        if (!known)
            ddp_log_warn(log, "%s: ignoring unknown key '%s'", origin, key);
    }
out:
    free(copy);
    return rc;
}

static int apply_monitor_interval(ddp_launch_config_t *cfg, const char *value, const char *origin,
                                  const ddp_log_t *log, ddp_buf_t *err)
{
    (void)log;
    double v;
    int r = ddp_parse_double(value, 0, 86400, &v);
    if (r != 0 || v <= 0)
        return bad_value(err, origin, value, "a positive number of seconds");
    cfg->monitor_interval = v;
    return 0;
}

static int apply_event_log_handler(ddp_launch_config_t *cfg, const char *value, const char *origin,
                                   const ddp_log_t *log, ddp_buf_t *err)
{
    (void)log;
    if (!ddp_events_valid(value))
        return usage(err, origin, "invalid value '%s': expected null, console or file:PATH", value);
    cfg->event_log = value;
    return 0;
}

/* "0".."3" for every rank, or "LOCAL_RANK:STD[,LOCAL_RANK:STD...]" (any digits). */
static int parse_std_spec(const char *value, const char *origin, ddp_std_spec_t *spec,
                          ddp_buf_t *err)
{
    static const char expected[] = "0, 1, 2, 3 or a map like 0:1,1:3";
    if (value[0] >= '0' && value[0] <= '3' && value[1] == '\0') {
        free(spec->map);
        spec->map = NULL;
        spec->nmap = 0;
        spec->all = value[0] - '0';
        return 0;
    }
    size_t n = 1;
    for (const char *p = value; *p; p++)
        n += *p == ',';
    __typeof__(spec->map) map = calloc(n, sizeof *map);
    if (map == NULL)
        return -ENOMEM;
    const char *p = value;
    for (size_t i = 0; i < n; i++) {
        if (!isdigit((unsigned char)*p))
            goto bad;
        char *end;
        errno = 0;
        long rank = strtol(p, &end, 10);
        if (errno == ERANGE || rank > INT_MAX || *end != ':' || end[1] < '0' || end[1] > '3')
            goto bad;
        map[i].local_rank = rank;
        map[i].std = end[1] - '0';
        p = end + 2;
        if (*p != (i + 1 < n ? ',' : '\0'))
            goto bad;
        p++;
    }
    free(spec->map);
    spec->map = map;
    spec->nmap = n;
    spec->all = DDP_STD_NONE;
    return 0;
bad:
    free(map);
    return bad_value(err, origin, value, expected);
}

static int apply_local_ranks_filter(ddp_launch_config_t *cfg, const char *value, const char *origin,
                                    const ddp_log_t *log, ddp_buf_t *err)
{
    (void)log;
    static const char expected[] = "a comma-separated list of local ranks, e.g. 0,1";
    if (*value == '\0') {
        cfg->ranks_filter_set = false;
        return 0;
    }
    size_t n = 1;
    for (const char *p = value; *p; p++)
        n += *p == ',';
    long *ranks = calloc(n, sizeof *ranks);
    char *copy = strdup(value), *save = NULL;
    int rc = 0;
    if (ranks == NULL || copy == NULL) {
        rc = -ENOMEM;
        goto out;
    }
    size_t got = 0;
    for (char *item = strtok_r(copy, ",", &save); item != NULL; item = strtok_r(NULL, ",", &save)) {
        if (ddp_parse_long(item, 0, INT_MAX, &ranks[got]) != 0) {
            rc = bad_value(err, origin, value, expected);
            goto out;
        }
        got++;
    }
    if (got != n) { /* an empty item: "0,,1" or a trailing comma */
        rc = bad_value(err, origin, value, expected);
        goto out;
    }
    free(cfg->ranks_filter);
    cfg->ranks_filter = ranks;
    cfg->nranks_filter = n;
    cfg->ranks_filter_set = true;
    ranks = NULL;
out:
    free(ranks);
    free(copy);
    return rc;
}

static int apply_logs_specs(ddp_launch_config_t *cfg, const char *value, const char *origin,
                            const ddp_log_t *log, ddp_buf_t *err)
{
    (void)cfg;
    (void)log;
    if (*value == '\0')
        return 0;
    return usage(err, origin,
                 "'%s': ddp-launch has no torchrun.logs_specs plugins; its logs follow torchrun's "
                 "default layout (see --log-dir, --redirects and --tee)",
                 value);
}

static int apply_numa_binding(ddp_launch_config_t *cfg, const char *value, const char *origin,
                              const ddp_log_t *log, ddp_buf_t *err)
{
    (void)log;
    for (ddp_numa_mode_t mode = DDP_NUMA_NODE; mode <= DDP_NUMA_CORE_COMPLEX; mode++)
        if (strcmp(value, ddp_numa_mode_name(mode)) == 0) {
            cfg->numa_mode = mode;
            return 0;
        }
    return bad_value(err, origin, value, "node, socket, exclusive or core-complex");
}

/* A comma-separated list of forwardable signals into list[*count]. */
static int parse_signals(const char *value, const char *origin, int *list, int *count,
                         ddp_buf_t *err)
{
    char *copy = strdup(value), *save = NULL;
    int rc = 0, n = 0;
    if (copy == NULL)
        return -ENOMEM;
    for (char *item = strtok_r(copy, ",", &save); item != NULL; item = strtok_r(NULL, ",", &save)) {
        const char *name = strncasecmp(item, "SIG", 3) == 0 ? item + 3 : item;
        int sig = ddp_signal_forwardable(name);
        if (sig == 0) {
            rc = usage(err, origin,
                       "cannot handle '%s': choose among SIGTERM, SIGINT, SIGHUP, SIGQUIT, "
                       "SIGUSR1, SIGUSR2, SIGALRM, SIGXCPU, SIGVTALRM, SIGPROF, SIGPWR",
                       item);
            goto out;
        }
        bool seen = false;
        for (int i = 0; i < n; i++)
            seen = seen || list[i] == sig;
        if (!seen && n < DDP_MAX_SIGNALS)
            list[n++] = sig;
    }
    if (n == 0) {
        rc = bad_value(err, origin, value, "a comma-separated list of signal names");
        goto out;
    }
    *count = n;
out:
    free(copy);
    return rc;
}

static int apply_signals_to_handle(ddp_launch_config_t *cfg, const char *value, const char *origin,
                                   const ddp_log_t *log, ddp_buf_t *err)
{
    (void)log;
    cfg->signals_given = true;
    return parse_signals(value, origin, cfg->signals, &cfg->nsignals, err);
}

static int apply_forward_signals(ddp_launch_config_t *cfg, const char *value, const char *origin,
                                 const ddp_log_t *log, ddp_buf_t *err)
{
    (void)log;
    return parse_signals(value, origin, cfg->passed, &cfg->npassed, err);
}

/* --hang-timeout: seconds, or auto (each rank's own timeout, from its observed steps). */
static int apply_hang_timeout(ddp_launch_config_t *cfg, const char *value, const char *origin,
                              const ddp_log_t *log, ddp_buf_t *err)
{
    (void)log;
    cfg->hang_auto = strcmp(value, "auto") == 0;
    if (cfg->hang_auto) {
        cfg->hang_timeout = 0;
        return 0;
    }
    int r = ddp_parse_double(value, 0, 7 * 86400, &cfg->hang_timeout);
    if (r == -ERANGE)
        return usage(err, origin, "invalid value '%s': must be between 0 and %d seconds", value,
                     7 * 86400);
    return r ? bad_value(err, origin, value, "a number of seconds or auto") : 0;
}

static int apply_straggler_threshold(ddp_launch_config_t *cfg, const char *value,
                                     const char *origin, const ddp_log_t *log, ddp_buf_t *err)
{
    (void)log;
    int r = ddp_parse_double(value, 1.01, 1000, &cfg->straggler_threshold);
    return r ? bad_value(err, origin, value, "a ratio between 1.01 and 1000") : 0;
}

static int apply_straggler_action(ddp_launch_config_t *cfg, const char *value, const char *origin,
                                  const ddp_log_t *log, ddp_buf_t *err)
{
    (void)log;
    if (strcmp(value, "none") != 0 && strcmp(value, "exclude") != 0)
        return bad_value(err, origin, value, "none or exclude");
    cfg->straggler_exclude = strcmp(value, "exclude") == 0;
    return 0;
}

/* --preload MODULE[,MODULE]: dotted Python names. */
static int apply_preload(ddp_launch_config_t *cfg, const char *value, const char *origin,
                         const ddp_log_t *log, ddp_buf_t *err)
{
    (void)log;
    bool start = true;
    for (const char *p = value;; p++) {
        if (*p == '\0' || *p == ',' || *p == '.') {
            if (start)
                return bad_value(err, origin, value, "Python module names, e.g. torch,numpy");
            if (*p == '\0')
                break;
            start = true;
        } else if (isalpha((unsigned char)*p) || *p == '_' ||
                   (!start && isdigit((unsigned char)*p))) {
            start = false;
        } else {
            return bad_value(err, origin, value, "Python module names, e.g. torch,numpy");
        }
    }
    cfg->preload = value;
    return 0;
}

/* --health-check-path PATHS: comma-separated, at least one path (empty items are none). */
static int apply_health_paths(ddp_launch_config_t *cfg, const char *value, const char *origin,
                              const ddp_log_t *log, ddp_buf_t *err)
{
    (void)log;
    if (value[strspn(value, ",")] == '\0')
        return usage(err, origin, "'%s' names no path", value);
    cfg->health_paths = value;
    return 0;
}

/* A size in bytes: digits with an optional K, M or G (powers of 1024). */
static int parse_size_flag(const char *value, const char *origin, uint64_t *out, ddp_buf_t *err)
{
    static const char expected[] = "a size in bytes like 8192, 64K or 8M";
    char digits[32];
    size_t len = strlen(value);
    uint64_t scale = 1;
    if (len == 0 || len >= sizeof digits)
        return bad_value(err, origin, value, expected);
    memcpy(digits, value, len + 1);
    switch (digits[len - 1]) {
    case 'K':
    case 'k':
        scale = (uint64_t)1 << 10;
        break;
    case 'M':
    case 'm':
        scale = (uint64_t)1 << 20;
        break;
    case 'G':
    case 'g':
        scale = (uint64_t)1 << 30;
        break;
    default:
        break;
    }
    if (scale != 1)
        digits[len - 1] = '\0';
    long n;
    if (ddp_parse_long(digits, 1, (long)((UINT64_C(1) << 40) / scale), &n) != 0)
        return bad_value(err, origin, value, expected);
    *out = (uint64_t)n * scale;
    return 0;
}

static int apply_store_max_keys(ddp_launch_config_t *cfg, const char *value, const char *origin,
                                const ddp_log_t *log, ddp_buf_t *err)
{
    (void)log;
    long n;
    if (ddp_parse_long(value, 1, 1L << 30, &n) != 0)
        return bad_value(err, origin, value, "a number of keys between 1 and 2^30");
    cfg->store_limits.max_keys = (uint64_t)n;
    return 0;
}

static int apply_store_busy_poll(ddp_launch_config_t *cfg, const char *value, const char *origin,
                                 const ddp_log_t *log, ddp_buf_t *err)
{
    (void)log;
    long n;
    if (ddp_parse_long(value, 0, 1000000, &n) != 0)
        return bad_value(err, origin, value, "microseconds between 0 and 1000000");
    cfg->store_busy_poll_us = (unsigned)n;
    return 0;
}

/* --env and --env-list take effect in collect_env (they repeat); here they are checked. */
static int apply_env(ddp_launch_config_t *cfg, const char *value, const char *origin,
                     const ddp_log_t *log, ddp_buf_t *err)
{
    (void)cfg;
    (void)value;
    (void)origin;
    (void)log;
    (void)err;
    return 0;
}

/* Whether p[0, len) is a variable name: letters, digits and '_', not a digit first. */
static bool variable_name(const char *p, size_t len)
{
    bool good = len > 0 && !isdigit((unsigned char)*p);
    for (size_t i = 0; i < len && good; i++)
        good = isalnum((unsigned char)p[i]) || p[i] == '_';
    return good;
}

/* Appends `item` (taken over; NULL: out of memory) to the NULL-terminated list (*list,
 * *n entries): --env's and --env-check's. 0 or -ENOMEM. */
static int append_item(char ***list, int *n, char *item)
{
    char **grown = item != NULL ? realloc(*list, (size_t)(*n + 2) * sizeof *grown) : NULL;
    if (grown == NULL) {
        free(item);
        return -ENOMEM;
    }
    grown[(*n)++] = item;
    grown[*n] = NULL;
    *list = grown;
    return 0;
}

/* --env-check NAME,...: names compared across the nodes besides the built-in ones. */
static int apply_env_check(ddp_launch_config_t *cfg, const char *value, const char *origin,
                           const ddp_log_t *log, ddp_buf_t *err)
{
    (void)log;
    for (const char *p = value; *p != '\0';) {
        size_t len = strcspn(p, ",");
        if (!variable_name(p, len))
            return usage(err, origin, "'%.*s' is not a variable name", (int)len, p);
        if (append_item(&cfg->env_check, &cfg->nenv_check, strndup(p, len)) != 0)
            return -ENOMEM;
        p += len + (p[len] == ',');
    }
    return 0;
}

/* --duplicate-std{out,err}-filters A,B,...: torchrun's comma-separated list, ",," a comma
 * of a filter; the last given counts. An empty filter (as "" is) matches every line. */
static int apply_dup_filters(ddp_launch_config_t *cfg, int std, const char *value)
{
    char ***list = &cfg->dup_filters[std];
    int *n = &cfg->ndup_filters[std];
    for (int i = 0; i < *n; i++)
        free((*list)[i]);
    free(*list);
    *list = NULL;
    *n = 0;
    ddp_buf_t item = DDP_BUF_INIT;
    for (const char *p = value;; p++) {
        if (*p == ',' && p[1] == ',') {
            p++;
        } else if (*p == ',' || *p == '\0') {
            int rc = append_item(list, n, strdup(item.len > 0 ? ddp_buf_str(&item) : ""));
            ddp_buf_clear(&item);
            if (rc != 0 || *p == '\0') {
                ddp_buf_free(&item);
                return rc;
            }
            continue;
        }
        if (ddp_buf_append(&item, p, 1) != 0) {
            ddp_buf_free(&item);
            return -ENOMEM;
        }
    }
}

static int apply_dup_stdout(ddp_launch_config_t *cfg, const char *value, const char *origin,
                            const ddp_log_t *log, ddp_buf_t *err)
{
    (void)origin;
    (void)log;
    (void)err;
    return apply_dup_filters(cfg, DDP_STD_OUT, value);
}

static int apply_dup_stderr(ddp_launch_config_t *cfg, const char *value, const char *origin,
                            const ddp_log_t *log, ddp_buf_t *err)
{
    (void)origin;
    (void)log;
    (void)err;
    return apply_dup_filters(cfg, DDP_STD_ERR, value);
}

/* --help's headings, in its order. */
enum { G_WORKERS, G_RDZV, G_PROGRAM, G_SUPERVISION, G_OUTPUT, G_OTHER, NGROUPS };
static const char *const group_names[NGROUPS] = {
    "workers",     "rendezvous (ddp-launch hosts the store the workers meet in)",
    "the program", "supervision",
    "output",      NULL};

static const char *const local_rank_args[] = {"none", "underscore", "dash", NULL};
static const char *const exit_codes[] = {"torchrun", "worker", NULL};
static const char *const start_methods[] = {"spawn", "fork", "forkserver", NULL};

#define FIELD(f) offsetof(ddp_launch_config_t, f)
#define SWITCH(name, short_name, f, pet) \
    name, short_name, KIND_SWITCH, FIELD(f), 0, 0, NULL, NULL, pet
#define INT(name, f, lo, hi) name, 0, KIND_INT, FIELD(f), lo, hi, NULL, NULL, true
#define TEXT(name, f, most)  name, 0, KIND_TEXT, FIELD(f), 0, most, NULL, NULL, true
#define CODE(name, fn, pet)  name, 0, KIND_CODE, NO_FIELD, 0, 0, NULL, fn, pet

/* Every flag; the order is the order in which values are applied. */
static const flag_t flags[] = {
    {CODE("nnodes", apply_nnodes, true), false, G_WORKERS, "N|MIN:MAX",
     "nodes in the job (default 1; a fixed N: static rendezvous)"},
    {CODE("nproc-per-node", apply_nproc_per_node, true), false, G_WORKERS, "N|cpu|gpu|xpu|auto",
     "workers on this node (default 1)"},
    {INT("node-rank", node_rank, 0, INT_MAX - 1), false, G_WORKERS, "R",
     "this node's rank (default 0; node 0 hosts the store)"},
    {"hosts", 0, KIND_TEXT, FIELD(hosts), 0, 0, NULL, NULL, false, false, G_WORKERS, "H0,H1,...",
     "the job's nodes: node 0 is this one (H0), the others\nare started over ssh "
     "(Slurm's host list syntax)"},
    {"hostfile", 0, KIND_TEXT, FIELD(hostfile), 0, 0, NULL, NULL, false, false, G_WORKERS, "FILE",
     "as --hosts, one host a line: 'HOST [slots=N]' (N: its\n--nproc-per-node unless given)"},
    {CODE("master-addr", apply_master_addr, true), false, G_RDZV, "HOST",
     "node 0's store address (default 127.0.0.1)"},
    {INT("master-port", master_port, 0, 65535), false, G_RDZV, "PORT",
     "the store's port (default 29500; 0 = a free port)"},
    {TEXT("local-addr", local_addr, 0), false, G_RDZV, "HOST",
     "this node's address as other nodes see it (libddp's\nring listens there)"},
    {CODE("rdzv-backend", apply_rdzv_backend, true), false, G_RDZV, "static|c10d",
     "rendezvous backend (default static)"},
    {CODE("rdzv-endpoint", apply_rdzv_endpoint, true), false, G_RDZV, "HOST[:PORT]",
     "c10d: where the store listens (default port 29400)"},
    {CODE("rdzv-id", apply_rdzv_id, true), false, G_RDZV, "ID",
     "job id, exported as TORCHELASTIC_RUN_ID (default none)"},
    {CODE("rdzv-conf", apply_rdzv_conf, true), false, G_RDZV, "K=V,...",
     "join_timeout, last_call_timeout, close_timeout,\nread_timeout, timeout, "
     "keep_alive_interval,\nkeep_alive_max_attempt, is_host"},
    {SWITCH("standalone", 0, standalone, true), false, G_RDZV, "",
     "one node, a free port and a random run id"},
    {INT("max-restarts", max_restarts, 0, 1000000), false, G_SUPERVISION, "N",
     "restarts of the worker group before failing (default 0)"},
    {CODE("monitor-interval", apply_monitor_interval, true), false, G_SUPERVISION, "SECONDS",
     "accepted for torchrun; ddp-launch does not poll"},
    {"start-method", 0, KIND_CHOICE, NO_FIELD, 0, 0, start_methods, NULL, true, false,
     G_SUPERVISION, "METHOD", "accepted for torchrun (spawn, fork, forkserver)"},
    {CODE("event-log-handler", apply_event_log_handler, true), false, G_SUPERVISION,
     "null|console|file:PATH", "a JSON line for every launcher event (default null)"},
    {TEXT("role", role, 255), false, G_WORKERS, "NAME",
     "role name: ROLE_NAME and the tee prefix (default default)"},
    {SWITCH("virtual-local-rank", 0, virtual_local_rank, true), false, G_WORKERS, "",
     "every worker sees only the GPU of its local rank, as\ndevice 0: LOCAL_RANK=0 and "
     "CUDA_VISIBLE_DEVICES=that GPU"},
    {SWITCH("module", 'm', module, true), false, G_PROGRAM, "",
     "run the script as a module: python -u -m MODULE"},
    {SWITCH("no-python", 0, no_python, true), false, G_PROGRAM, "",
     "execute the script as a program (implied for a\ncompiled program, a #! script that "
     "names no python,\nor a name found only in PATH)"},
    {SWITCH("run-path", 0, run_path, true), false, G_PROGRAM, "",
     "run the script with python (torchrun's runpy mode)"},
    {SWITCH("use-env", 0, use_env, true), false, G_PROGRAM, "",
     "pass the local rank in LOCAL_RANK only (the default)"},
    {"local-rank-arg", 0, KIND_CHOICE, FIELD(local_rank_arg), 0, 0, local_rank_args, NULL, true,
     false, G_PROGRAM, "none|underscore|dash",
     "also pass --local_rank=N or --local-rank=N to the script,\nas torch.distributed.launch "
     "did (default: the spelling the script's\nadd_argument defines, else none)"},
    {TEXT("log-dir", log_dir, 0), false, G_OUTPUT, "DIR",
     "base directory of the log files (default: a new one in $TMPDIR)"},
    {"redirects", 'r', KIND_STD, FIELD(redirects), 0, 0, NULL, NULL, true, false, G_OUTPUT, "SPEC",
     "send streams to files: 0 none, 1 stdout, 2 stderr, 3 both,\nor per local rank, e.g. "
     "0:3,1:2"},
    {"tee", 't', KIND_STD, FIELD(tee), 0, 0, NULL, NULL, true, false, G_OUTPUT, "SPEC",
     "like --redirects, and also to the console with a prefix"},
    {CODE("local-ranks-filter", apply_local_ranks_filter, true), false, G_OUTPUT, "LIST",
     "only these local ranks reach the console, e.g. 0"},
    {CODE("duplicate-stdout-filters", apply_dup_stdout, true), false, G_OUTPUT, "A,B,...",
     "tee'd stdout lines that hold any of these also go to\nfiltered_stdout.log in the attempt's "
     "log directory"},
    {CODE("duplicate-stderr-filters", apply_dup_stderr, true), false, G_OUTPUT, "A,B,...",
     "the same for stderr (filtered_stderr.log)"},
    {CODE("logs-specs", apply_logs_specs, false), false, G_OUTPUT, "NAME",
     "accepted for torchrun when empty; no plugins"},
    {CODE("numa-binding", apply_numa_binding, false), false, G_SUPERVISION,
     "node|socket|exclusive|core-complex",
     "bind each worker to the CPUs and memory near the GPU\nof its local rank (torchrun's modes)"},
    {SWITCH("numa-binding-fallback", 0, numa_fallback, false), false, G_SUPERVISION, "",
     "a worker that cannot be bound runs unbound, with a\nwarning (default: the job does not "
     "start)"},
    {CODE("env", apply_env, false), false, G_PROGRAM, "NAME[=VALUE]",
     "set NAME for every worker: VALUE, or this launcher's\nvalue (repeatable; node 0's on every "
     "node it starts)"},
    {CODE("env-list", apply_env, false), false, G_PROGRAM, "NAME,...",
     "--env for each NAME (this launcher's value)"},
    {CODE("env-check", apply_env_check, true), false, G_RDZV, "NAME,...",
     "more variables the nodes must agree on (NCCL_* and\nothers are compared always)"},
    {SWITCH("env-check-strict", 0, env_check_strict, true), false, G_RDZV, "",
     "a variable that differs between nodes ends the job\n(status 5) before any worker starts"},
    {CODE("signals-to-handle", apply_signals_to_handle, true), false, G_SUPERVISION, "LIST",
     "signals forwarded to the workers\n(default SIGTERM,SIGINT,SIGHUP,SIGQUIT)"},
    {CODE("forward-signals", apply_forward_signals, true), false, G_SUPERVISION, "LIST",
     "signals passed to the workers, nothing stopped\n(Slurm's --signal=USR1@60 to "
     "checkpoint and go on)"},
    {"shutdown-timeout", 0, KIND_SECONDS, FIELD(shutdown_timeout), 0, 7 * 86400, NULL, NULL, true,
     false, G_SUPERVISION, "SECONDS",
     "grace between the stop signal and SIGKILL (default\n30, or TORCH_ELASTIC_SHUTDOWN_TIMEOUT)"},
    {CODE("hang-timeout", apply_hang_timeout, true), false, G_SUPERVISION, "SECONDS|auto",
     "no collective finished (libddp), or no output and no CPU\n(others), by any rank this "
     "long: report where every\nrank is, then stop as for a failure (default 0: off);\nauto: "
     "5x each rank's longest step (ddp_launch.step())\nor section, once learnt"},
    {"hang-timeout-floor", 0, KIND_SECONDS, FIELD(hang_floor), 0.01, 86400, NULL, NULL, true, false,
     G_SUPERVISION, "SECONDS", "--hang-timeout=auto's least timeout (default 10)"},
    {"store-wait-notice", 0, KIND_SECONDS, FIELD(store_wait_notice), 0, 7 * 86400, NULL, NULL, true,
     false, G_SUPERVISION, "SECONDS",
     "a worker that has waited this long in the store for a\nkey nobody has set is named, with "
     "the ranks that do not\nwait (default 60; 0: off)"},
    {"straggler-report", 0, KIND_SECONDS, FIELD(straggler_report), 0, 7 * 86400, NULL, NULL, true,
     false, G_SUPERVISION, "SECONDS",
     "every SECONDS, name the ranks that work a step longer\nthan the others (default 300; 0: "
     "off)"},
    {CODE("straggler-threshold", apply_straggler_threshold, true), false, G_SUPERVISION, "RATIO",
     "a straggler works over RATIO x the median rank\n(default 1.2)"},
    {CODE("straggler-action", apply_straggler_action, true), false, G_SUPERVISION, "none|exclude",
     "exclude: a straggler's node leaves the job at its next\nrestart (default none)"},
    {SWITCH("warm-restarts", 0, warm_restarts, true), false, G_SUPERVISION, "",
     "restarted Python workers are forked from a zygote that\nhas imported --preload's modules "
     "(no new interpreter)"},
    {CODE("preload", apply_preload, true), false, G_SUPERVISION, "MODULE,...",
     "--warm-restarts: what the zygote imports (default torch)"},
    {TEXT("health-check", health_command, 0), false, G_SUPERVISION, "CMD",
     "before each round, this node runs CMD (/bin/sh -c): not\nexit 0 = unhealthy, the job "
     "ends naming the node (5)"},
    {CODE("health-check-path", apply_health_paths, true), false, G_SUPERVISION, "PATHS",
     "before each round, every path (comma-separated) must\nbe readable"},
    {"health-check-timeout", 0, KIND_SECONDS, FIELD(health_timeout), 0.1, 86400, NULL, NULL, true,
     false, G_SUPERVISION, "SECONDS",
     "each health check's time: the command, a path, the\nGPUs (default 60)"},
    {INT("hot-spares", hot_spares, 0, 1000000), false, G_RDZV, "K",
     "c10d: up to K launchers beyond --nnodes wait without\nworkers and take a lost node's "
     "place (and ranks)"},
    {INT("exclude-after", exclude_after, 0, 1000000), false, G_RDZV, "K",
     "a node whose workers failed in K rounds in a row leaves\nthe job (a hot spare takes its "
     "place; default 0: never)"},
    {TEXT("progress-file", progress_file, 0), false, G_SUPERVISION, "PATH",
     "a file holding the last checkpointed iteration: the\njob's progress between restarts"},
    {INT("max-no-progress-restarts", max_no_progress, 0, 1000000), false, G_SUPERVISION, "K",
     "end the job with status 6 (do not requeue) after K\nfailed attempts in a row without "
     "progress (default 3;\n0: never)"},
    {"gpu-memory-reclaim-timeout", 0, KIND_SECONDS, FIELD(gpu_reclaim_timeout), 0, 86400, NULL,
     NULL, true, false, G_SUPERVISION, "SECONDS",
     "before a restart, wait until the GPUs' used memory is\nunder 512 MiB (NVML), at most "
     "this long (default 50)"},
    {SWITCH("hang-dump", 0, hang_dump, true), false, G_SUPERVISION, "",
     "a hang report also saves each worker's native stack\n(eu-stack or gdb) and Python "
     "stack in its log directory"},
    {"exit-code", 0, KIND_CHOICE, FIELD(exit_code_mode), 0, 0, exit_codes, NULL, true, false,
     G_SUPERVISION, "torchrun|worker",
     "exit 1 on a worker failure (default), or the failed\nworker's own status"},
    {"store-max-key", 0, KIND_SIZE, FIELD(store_limits.max_key), 0, 0, NULL, NULL, true, false,
     G_RDZV, "SIZE", "longest key the store takes (default 8K)"},
    {"store-max-value", 0, KIND_SIZE, FIELD(store_limits.max_value), 0, 0, NULL, NULL, true, false,
     G_RDZV, "SIZE", "largest value (default 8M)"},
    {CODE("store-max-keys", apply_store_max_keys, true), false, G_RDZV, "N",
     "most keys in one request (default 131072)"},
    {CODE("store-busy-poll", apply_store_busy_poll, true), false, G_RDZV, "USEC",
     "after a request, the store polls this long for the\nnext before it sleeps (default 200; "
     "0 = never)"},
    {SWITCH("dry-run", 0, dry_run, true), false, G_OTHER, "",
     "print each worker's command and environment; start nothing"},
    {SWITCH("help", 'h', help, false), true, G_OTHER, "", "this help"},
    {SWITCH("version", 0, version, false), true, G_OTHER, "", "the version"},
};
enum { NFLAGS = sizeof flags / sizeof flags[0] };

/* Whether `typed` (len bytes) names the flag `name` in its dash or underscore spelling,
 * exactly or as a prefix. */
static bool spelling_matches(const char *name, const char *typed, size_t len, bool exact)
{
    if (strlen(name) < len || (exact && strlen(name) != len))
        return false;
    for (size_t i = 0; i < len; i++) {
        char want = name[i], got = typed[i];
        if (want == got)
            continue;
        if (want == '-' && got == '_')
            continue;
        return false;
    }
    return true;
}

/* The underscore spelling must be all underscores (argparse compares the option string
 * literally): "nproc_per-node" is neither spelling. */
static bool one_spelling(const char *typed, size_t len)
{
    bool dash = false, underscore = false;
    for (size_t i = 0; i < len; i++) {
        dash = dash || typed[i] == '-';
        underscore = underscore || typed[i] == '_';
    }
    return !(dash && underscore);
}

/* Finds the flag for a long option (without "--"): an exact match, else the only flag
 * it is a prefix of. Returns the index, -1 when unknown, -2 when ambiguous. */
static int find_long(const char *typed, size_t len)
{
    if (len == 0 || !one_spelling(typed, len))
        return -1;
    for (int i = 0; i < NFLAGS; i++) {
        if (spelling_matches(flags[i].name, typed, len, true))
            return i;
    }
    int found = -1;
    for (int i = 0; i < NFLAGS; i++) {
        if (spelling_matches(flags[i].name, typed, len, false)) {
            if (found >= 0)
                return -2;
            found = i;
        }
    }
    return found;
}

static void list_prefix_matches(ddp_buf_t *err, const char *typed, size_t len)
{
    const char *sep = "";
    for (int i = 0; i < NFLAGS; i++) {
        if (spelling_matches(flags[i].name, typed, len, false)) {
            ddp_buf_printf(err, "%s--%s", sep, flags[i].name);
            sep = ", ";
        }
    }
}

static bool looks_like_number(const char *text)
{
    double v;
    return ddp_parse_double(text, -1e300, 1e300, &v) == 0;
}

typedef struct {
    const char *value; /* NULL for a switch given on the command line */
    char origin[64];   /* the flag or its PET_ variable, for messages */
    bool set;
} raw_value_t;

static void pet_name(const flag_t *flag, char *out, size_t cap)
{
    size_t n = (size_t)snprintf(out, cap, "PET_%s", flag->name);
    for (size_t i = 4; i < n && i < cap; i++)
        out[i] = flag->name[i - 4] == '-' ? '_' : (char)toupper((unsigned char)out[i]);
}

/* Reads the options in argv into raw[]; *script_index is where the script is (argc
 * when there is none). */
static int scan_argv(int argc, char **argv, raw_value_t *raw, int *script_index, ddp_buf_t *err)
{
    int i = 1;
    while (i < argc) {
        const char *arg = argv[i];
        if (strcmp(arg, "--") == 0) {
            i++;
            break;
        }
        if (arg[0] != '-' || arg[1] == '\0')
            break;
        int index;
        const char *value = NULL;
        bool inline_value = false;
        if (arg[1] == '-') {
            const char *name = arg + 2, *eq = strchr(name, '=');
            size_t len = eq ? (size_t)(eq - name) : strlen(name);
            index = find_long(name, len);
            if (index == -2) {
                usage(err, arg, "ambiguous option: could be ");
                list_prefix_matches(err, name, len);
                return DDP_EUSAGE;
            }
            if (index < 0)
                return usage(err, arg,
                             "unrecognized option (options for the training script go after "
                             "the script)");
            if (eq != NULL) {
                value = eq + 1;
                inline_value = true;
            }
        } else {
            index = -1;
            for (int f = 0; f < NFLAGS; f++) {
                if (flags[f].short_name == arg[1])
                    index = f;
            }
            if (index < 0 || (flags[index].kind == KIND_SWITCH && arg[2] != '\0'))
                return usage(err, arg, "unrecognized option");
            if (arg[2] != '\0') {
                value = arg[2] == '=' ? arg + 3 : arg + 2;
                inline_value = true;
            }
        }
        const flag_t *flag = &flags[index];
        raw_value_t *slot = &raw[index];
        snprintf(slot->origin, sizeof slot->origin, "--%s", flag->name);
        if (flag->kind == KIND_SWITCH) {
            if (inline_value)
                return usage(err, slot->origin, "takes no value");
            slot->value = NULL;
        } else if (!inline_value) {
            if (i + 1 >= argc || (argv[i + 1][0] == '-' && argv[i + 1][1] != '\0' &&
                                  !looks_like_number(argv[i + 1])))
                return usage(err, slot->origin, "expects a value");
            value = argv[++i];
        }
        if (flag->kind != KIND_SWITCH)
            slot->value = value;
        slot->set = true;
        i++;
        if (flag->at_once)
            break; /* like argparse: --help acts as soon as it is seen */
    }
    *script_index = i;
    return 0;
}

static int flag_index(const char *name)
{
    for (int f = 0; f < NFLAGS; f++) {
        if (strcmp(flags[f].name, name) == 0)
            return f;
    }
    return -1;
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
    return usage(err, name,
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
static int slurm_defaults(raw_value_t *raw, char *const *envp, char *host, size_t cap,
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
    if (raw[flag_index("standalone")].set || slurm_outside_step(envp))
        return 0;
    int rc = slurm_one_task(envp, err);
    for (size_t i = 0; i < sizeof from / sizeof from[0] && rc == 0; i++) {
        raw_value_t *slot = &raw[flag_index(from[i].flag)];
        const char *name = ddp_env_name(from[i].var), *value = ddp_env_lookup(envp, name);
        if (slot->set || value == NULL || *value == '\0')
            continue;
        if (from[i].var == DDP_ENV_SLURM_JOB_NODELIST ||
            from[i].var == DDP_ENV_SLURM_STEP_NODELIST) {
            ddp_buf_t why = DDP_BUF_INIT;
            if (ddp_slurm_first_host(value, host, cap, &why) != 0)
                rc = usage(err, name, "%s", ddp_buf_str(&why));
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
static void slurm_after(ddp_launch_config_t *cfg, const raw_value_t *raw, char *const *envp,
                        const ddp_log_t *log)
{
    const char *job = ddp_env_lookup(envp, ddp_env_name(DDP_ENV_SLURM_JOB_ID)),
               *nodes = ddp_env_lookup(envp, ddp_env_name(DDP_ENV_SLURM_JOB_NUM_NODES));
    if (cfg->standalone || job == NULL || cfg->hosts != NULL || cfg->hostfile != NULL)
        return;
    int allocated = nodes != NULL ? atoi(nodes) : 0;
    /* One node, from a shell elsewhere (salloc's, on the login host): srun runs the job
     * on the node Slurm gave, not here. */
    if (slurm_outside_step(envp) && !raw[flag_index("node-rank")].set && allocated == 1 &&
        cfg->nnodes_max == 1 && !here_allocated(envp)) {
        cfg->slurm_fanout = 1;
        return;
    }
    bool fixed = !raw[flag_index("nnodes")].set ||
                 (cfg->nnodes_min == cfg->nnodes_max && cfg->nnodes_max == allocated);
    if (slurm_outside_step(envp) && !raw[flag_index("node-rank")].set && allocated > 1 && fixed) {
        cfg->slurm_fanout = allocated; /* --nnodes, where given, says the same */
        return;
    }
    if (slurm_outside_step(envp) && !raw[flag_index("node-rank")].set && cfg->nnodes_max > 1)
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
    cfg->store_in_step = cfg->slurm_step && (cfg->rdzv_backend == DDP_RDZV_STATIC ||
                                             in_nodelist(envp, DDP_ENV_SLURM_STEP_NODELIST,
                                                         cfg->rdzv_endpoint_host, false));
    int port = ddp_slurm_port(job, step);
    if (cfg->nnodes_max > 1 && !raw[flag_index("rdzv-id")].set && port >= 0 &&
        asprintf(&cfg->run_id, "slurm-%s.%s", job, step != NULL && *step ? step : "0") < 0)
        cfg->run_id = NULL;
    if (raw[flag_index("master-port")].set || port < 0 || cfg->nnodes_max <= 1 ||
        cfg->rdzv_backend != DDP_RDZV_STATIC)
        return;
    cfg->master_port = port;
    ddp_log_info(log,
                 "--master-port=%d from SLURM_JOB_ID=%s and SLURM_STEP_ID=%s (one port a job "
                 "step; --rdzv-id %s)",
                 port, job, step != NULL && *step ? step : "0", cfg->run_id);
}

/* One --env entry: NAME=VALUE as given, or NAME with the value it has in `envp`. */
static int add_env(ddp_launch_config_t *cfg, const char *origin, const char *item, size_t len,
                   char *const *envp, ddp_buf_t *err)
{
    const char *eq = memchr(item, '=', len);
    size_t name_len = eq != NULL ? (size_t)(eq - item) : len;
    char name[256];
    if (name_len >= sizeof name || !variable_name(item, name_len))
        return usage(err, origin, "'%.*s' is not a variable name", (int)name_len, item);
    memcpy(name, item, name_len);
    name[name_len] = '\0';
    /* The worker contract is the launcher's: one of these set by hand breaks the job. */
    for (int id = DDP_ENV_LOCAL_RANK; id <= DDP_ENV_TORCHELASTIC_ERROR_FILE; id++) {
        if (strcmp(name, ddp_env_name((ddp_env_id_t)id)) == 0)
            return usage(err, origin, "%s is set by ddp-launch for each worker", name);
    }
    const char *value = eq != NULL ? eq + 1 : ddp_env_lookup(envp, name);
    /* In a multi-node job node 0's value is the one that counts, and the same command
     * runs on every node: unset here, the entry stays bare ("NAME"), node 0's value to
     * come (node 0 itself says so where it has none). */
    if (value == NULL && cfg->nnodes_max > 1)
        return append_item(&cfg->env_set, &cfg->nenv, strdup(name));
    if (value == NULL)
        return usage(err, origin, "%s is not set here: give %s=VALUE", name, name);
    int n = eq != NULL ? (int)(len - name_len - 1) : (int)strlen(value);
    char *entry;
    if (asprintf(&entry, "%s=%.*s", name, n, value) < 0)
        entry = NULL;
    return append_item(&cfg->env_set, &cfg->nenv, entry); /* NULL-ended, as an environment */
}

/* Every --env and --env-list before the script, in order (they repeat; the flag table
 * keeps one value a flag). */
static int collect_env(ddp_launch_config_t *cfg, char **argv, int script_index, char *const *envp,
                       ddp_buf_t *err)
{
    for (int i = 1; i < script_index; i++) {
        const char *arg = argv[i], *value = NULL;
        bool list = strncmp(arg, "--env-list", 10) == 0 || strncmp(arg, "--env_list", 10) == 0;
        size_t at = list ? 10 : 5;
        if (!list && strncmp(arg, "--env", 5) != 0)
            continue;
        if (arg[at] == '=')
            value = arg + at + 1;
        else if (arg[at] == '\0' && i + 1 < script_index)
            value = argv[++i];
        else
            continue; /* another flag (--event-log-handler) */
        for (const char *p = value;;) {
            size_t len = list ? strcspn(p, ",") : strlen(p);
            int rc = add_env(cfg, list ? "--env-list" : "--env", p, len, envp, err);
            if (rc != 0)
                return rc;
            if (p[len] == '\0')
                break;
            p += len + 1;
        }
    }
    return 0;
}

static int check_combinations(ddp_launch_config_t *cfg, const raw_value_t *raw, ddp_buf_t *err)
{
    if (cfg->rdzv_backend == DDP_RDZV_C10D && !cfg->rdzv_endpoint_set && !cfg->standalone)
        return usage(err, "--rdzv-backend",
                     "c10d needs --rdzv-endpoint HOST[:PORT] (or use --standalone)");
    /* A whole request may hold a key and two values (COMPARE_SET), or many of them. */
    uint64_t one = cfg->store_limits.max_key + 2 * cfg->store_limits.max_value + 64;
    cfg->store_limits.max_request = one > ((uint64_t)256 << 20) ? one : (uint64_t)256 << 20;
    if (cfg->hosts != NULL || cfg->hostfile != NULL) {
        const char *which = cfg->hosts != NULL ? "--hosts" : "--hostfile";
        if (cfg->hosts != NULL && cfg->hostfile != NULL)
            return usage(err, "--hosts", "and --hostfile both name the job's nodes: give one");
        if (cfg->standalone || cfg->rdzv_backend != DDP_RDZV_STATIC)
            return usage(err, which, "starts a static job of its hosts (not with %s)",
                         cfg->standalone ? "--standalone" : "--rdzv-backend=c10d");
        if (cfg->nnodes_max != 1 || cfg->node_rank != 0)
            return usage(err, which, "gives the nodes and their ranks: leave out %s",
                         cfg->nnodes_max != 1 ? "--nnodes" : "--node-rank");
    }
    if (cfg->use_env && cfg->local_rank_arg != DDP_LOCAL_RANK_ARG_NONE)
        return usage(err, "--use-env",
                     "contradicts --local-rank-arg, which passes the local rank "
                     "as an argument");
    if (cfg->module && cfg->no_python && !cfg->run_path)
        return usage(err, "--no-python", "cannot be combined with -m/--module");
    if (cfg->nnodes_min != cfg->nnodes_max && cfg->rdzv_backend == DDP_RDZV_STATIC)
        return usage(err, "--nnodes",
                     "%d:%d: a range of nodes needs elastic rendezvous: add "
                     "--rdzv-backend=c10d --rdzv-endpoint=HOST[:PORT] (static needs a fixed N)",
                     cfg->nnodes_min, cfg->nnodes_max);
    if (cfg->hot_spares > 0 && (cfg->rdzv_backend != DDP_RDZV_C10D || cfg->standalone))
        return usage(err, "--hot-spares",
                     "%d: spares wait at an elastic rendezvous: add --rdzv-backend=c10d "
                     "--rdzv-endpoint=HOST[:PORT] and --nnodes",
                     cfg->hot_spares);
    if (cfg->preload != NULL && !cfg->warm_restarts)
        return usage(err, raw[flag_index("preload")].origin,
                     "names what the zygote of --warm-restarts imports: add "
                     "--warm-restarts");
    if (cfg->nnodes_max > 1 && cfg->standalone)
        return usage(err, "--standalone", "is one node; it cannot run a job of --nnodes=%d",
                     cfg->nnodes_max);
    if (cfg->nnodes_max > 1 && cfg->master_port == 0)
        return usage(err, "--master-port",
                     "0 (a free port) serves one node only: the other nodes of a multi-node "
                     "job must know node 0's port; give the same fixed port on every node");
    if (cfg->nnodes_max > 1 && cfg->rdzv_endpoint_set && cfg->rdzv_endpoint_port == 0)
        return usage(err, "--rdzv-endpoint",
                     "port 0 (a free port) serves one node only: every launcher of a job of "
                     "%d nodes must know the store's port; give a fixed one (c10d's default: "
                     "29400)",
                     cfg->nnodes_max);
    if (cfg->node_rank >= cfg->nnodes_max)
        return usage(err, "--node-rank", "%d must be less than --nnodes (%d)", cfg->node_rank,
                     cfg->nnodes_max);
    if (cfg->rdzv_endpoint_set && cfg->rdzv_endpoint_port < 0)
        cfg->rdzv_endpoint_port = cfg->rdzv_backend == DDP_RDZV_C10D ? 29400 : cfg->master_port;
    return 0;
}

static int apply_text(const flag_t *f, const char *value, const char *origin, const char **field,
                      ddp_buf_t *err)
{
    if (*value == '\0')
        return usage(err, origin, "the value must not be empty");
    if (f->max > 0 && strlen(value) > (size_t)f->max)
        return usage(err, origin, "the value is longer than %.0f bytes", f->max);
    *field = value;
    return 0;
}

static int apply_choice(const flag_t *f, const char *value, const char *origin, int *field,
                        ddp_buf_t *err)
{
    char expected[160] = "";
    size_t len = 0;
    for (int i = 0; f->choices[i] != NULL; i++) {
        if (strcmp(value, f->choices[i]) == 0) {
            if (field != NULL)
                *field = i;
            return 0;
        }
        const char *sep = i == 0 ? "" : f->choices[i + 1] == NULL ? " or " : ", ";
        len += (size_t)snprintf(expected + len, len < sizeof expected ? sizeof expected - len : 0,
                                "%s%s", sep, f->choices[i]);
    }
    return bad_value(err, origin, value, expected);
}

/* Converts and checks one flag's value into the config, as its row says. */
static int apply_flag(const flag_t *f, ddp_launch_config_t *cfg, const raw_value_t *raw,
                      const ddp_log_t *log, ddp_buf_t *err)
{
    const char *value = raw->value, *origin = raw->origin;
    void *field = f->field == NO_FIELD ? NULL : (char *)cfg + f->field;
    switch (f->kind) {
    case KIND_SWITCH:
        return parse_switch(value, origin, field, err);
    case KIND_INT:
        return parse_int_flag(value, origin, (long)f->min, (long)f->max, field, err);
    case KIND_SECONDS:
        return parse_seconds_flag(value, origin, f->min, f->max, field, err);
    case KIND_SIZE:
        return parse_size_flag(value, origin, field, err);
    case KIND_TEXT:
        return apply_text(f, value, origin, field, err);
    case KIND_CHOICE:
        return apply_choice(f, value, origin, field, err);
    case KIND_STD:
        return parse_std_spec(value, origin, field, err);
    case KIND_CODE:
        break;
    }
    return f->apply(cfg, value, origin, log, err);
}

/* --duplicate-std*-filters copy tee'd lines only (torchrun's): without a --tee of that
 * stream they do nothing, said once. */
static void warn_untee_filters(const ddp_launch_config_t *cfg, const ddp_log_t *log)
{
    for (int std = DDP_STD_OUT; std <= DDP_STD_ERR; std++) {
        bool teed = (cfg->tee.all & std) != 0;
        for (size_t i = 0; i < cfg->tee.nmap && !teed; i++)
            teed = (cfg->tee.map[i].std & std) != 0;
        if (cfg->dup_filters[std] != NULL && !teed)
            ddp_log_warn(log,
                         "--duplicate-%s-filters copies only what --tee sends to the console, "
                         "and no %s is tee'd: nothing is copied",
                         std == DDP_STD_OUT ? "stdout" : "stderr",
                         std == DDP_STD_OUT ? "stdout" : "stderr");
    }
}

/* A flag given (by the command line or its PET_) that does nothing beside the others. */
typedef struct {
    const char *flag; /* its dash spelling */
    bool (*idle)(const ddp_launch_config_t *cfg);
    const char *why; /* "--FLAG=VALUE has no effect " and this */
} no_effect_t;

static bool hang_not_auto(const ddp_launch_config_t *cfg)
{
    return !cfg->hang_auto;
}

static bool stragglers_off(const ddp_launch_config_t *cfg)
{
    return cfg->straggler_report <= 0;
}

static bool numa_off(const ddp_launch_config_t *cfg)
{
    return cfg->numa_mode == DDP_NUMA_OFF;
}

static bool no_checks(const ddp_launch_config_t *cfg)
{
    return !ddp_health_checks_apply(cfg);
}

static bool no_restarts(const ddp_launch_config_t *cfg)
{
    return cfg->max_restarts == 0;
}

/* One node, and no more to come: --hosts, --hostfile and a Slurm allocation started from
 * outside a step set the nodes only after the flags. */
static bool one_node(const ddp_launch_config_t *cfg)
{
    return cfg->nnodes_max == 1 && cfg->hosts == NULL && cfg->hostfile == NULL &&
           cfg->slurm_fanout <= 1;
}

static bool one_node_no_restarts(const ddp_launch_config_t *cfg)
{
    return cfg->max_restarts == 0 && one_node(cfg);
}

static bool one_node_exclude(const ddp_launch_config_t *cfg)
{
    return cfg->straggler_exclude && one_node(cfg);
}

static bool assigned_ranks(const ddp_launch_config_t *cfg)
{
    return cfg->rdzv_backend == DDP_RDZV_C10D && cfg->nnodes_max > 1;
}

static const no_effect_t no_effects[] = {
    {"hang-timeout-floor", hang_not_auto, "without --hang-timeout=auto"},
    {"straggler-threshold", stragglers_off, "with --straggler-report=0 (no straggler reports)"},
    {"straggler-action", stragglers_off, "with --straggler-report=0 (no straggler reports)"},
    {"numa-binding-fallback", numa_off, "without --numa-binding"},
    {"health-check-timeout", no_checks,
     "without --health-check or --health-check-path (no check runs)"},
    {"max-no-progress-restarts", no_restarts, "with --max-restarts=0 (nothing is restarted)"},
    {"warm-restarts", one_node_no_restarts,
     "with --max-restarts=0 on one node (nothing is restarted)"},
    {"exclude-after", one_node, "on one node (there is no job for it to leave)"},
    {"straggler-action", one_node_exclude, "on one node (there is no job for it to leave)"},
    {"node-rank", assigned_ranks,
     "with --rdzv-backend=c10d: the rendezvous assigns each node its rank"},
};

/* Each flag given where it does nothing, said in one line (the job goes on: harmless). A
 * node rank Slurm gave (SLURM_NODEID) is no flag given. */
static void warn_without_effect(const ddp_launch_config_t *cfg, const raw_value_t *raw,
                                const ddp_log_t *log)
{
    for (size_t i = 0; i < sizeof no_effects / sizeof no_effects[0]; i++) {
        const no_effect_t *e = &no_effects[i];
        const raw_value_t *given = &raw[flag_index(e->flag)];
        if (!given->set || strncmp(given->origin, "SLURM_", 6) == 0 || !e->idle(cfg))
            continue;
        ddp_log_warn(log, "%s%s%s has no effect %s", given->origin, given->value != NULL ? "=" : "",
                     given->value != NULL ? given->value : "", e->why);
    }
}

/* PET_<NAME> of a flag that takes no default from the environment (as torchrun's own do
 * not, or one the same command on every node must not take: --hosts): said, not silently
 * passed over. */
static void warn_unread_pet(const raw_value_t *raw, char *const *envp, const ddp_log_t *log)
{
    for (int i = 0; i < NFLAGS; i++) {
        char name[64];
        if (flags[i].pet)
            continue;
        pet_name(&flags[i], name, sizeof name);
        const char *value = ddp_env_lookup(envp, name);
        if (value != NULL && *value != '\0')
            ddp_log_warn(log, "%s is ignored: --%s takes no default from the environment%s", name,
                         flags[i].name, raw[i].set ? " (and is given)" : "");
    }
}

int ddp_cli_parse(ddp_launch_config_t *cfg, int argc, char **argv, char *const *envp,
                  const ddp_log_t *log, ddp_buf_t *err)
{
    raw_value_t raw[NFLAGS];
    int script_index = argc, rc;
    memset(raw, 0, sizeof raw);
    ddp_config_defaults(cfg);

    for (int i = 0; i < NFLAGS; i++) {
        if (!flags[i].pet)
            continue;
        pet_name(&flags[i], raw[i].origin, sizeof raw[i].origin);
        const char *value = ddp_env_lookup(envp, raw[i].origin);
        if (value != NULL && *value != '\0') {
            raw[i].value = value;
            raw[i].set = true;
        }
    }
    if ((rc = scan_argv(argc, argv, raw, &script_index, err)) != 0)
        goto fail;
    /* torchrun's: without the flag (or PET_), TORCH_ELASTIC_SHUTDOWN_TIMEOUT, else 30 s. */
    raw_value_t *grace = &raw[flag_index("shutdown-timeout")];
    const char *grace_env = ddp_env_lookup(envp, "TORCH_ELASTIC_SHUTDOWN_TIMEOUT");
    if (!grace->set && grace_env != NULL && *grace_env != '\0') {
        grace->value = grace_env;
        grace->set = true;
        snprintf(grace->origin, sizeof grace->origin, "TORCH_ELASTIC_SHUTDOWN_TIMEOUT");
    }
    char slurm_host[256];
    if ((rc = slurm_defaults(raw, envp, slurm_host, sizeof slurm_host, log, err)) != 0)
        goto fail;
    for (int i = 0; i < NFLAGS; i++) {
        if (raw[i].set && (rc = apply_flag(&flags[i], cfg, &raw[i], log, err)) != 0)
            goto fail;
    }
    if (cfg->help || cfg->version)
        return 0;
    cfg->master_port_given = raw[flag_index("master-port")].set;
    cfg->nproc_per_node_given = raw[flag_index("nproc-per-node")].set;
    cfg->local_rank_arg_given = raw[flag_index("local-rank-arg")].set;
    slurm_after(cfg, raw, envp, log);
    if ((rc = collect_env(cfg, argv, script_index, envp, err)) != 0)
        goto fail;
    if ((rc = check_combinations(cfg, raw, err)) != 0)
        goto fail;
    warn_untee_filters(cfg, log);
    warn_without_effect(cfg, raw, log);
    warn_unread_pet(raw, envp, log);
    const char *python = ddp_env_lookup(envp, "PYTHON_EXEC");
    if (python != NULL && *python != '\0') {
        cfg->python_exec = python;
        cfg->python_exec_given = true;
    }
    const char *prefix = ddp_env_lookup(envp, "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE");
    if (prefix != NULL && *prefix != '\0')
        cfg->prefix_template = prefix;
    if (script_index >= argc) {
        rc = usage(err, NULL, "missing the training script (or program with --no-python)");
        goto fail;
    }
    if (*argv[script_index] == '\0') {
        rc = usage(err, NULL, "the training script must not be an empty string");
        goto fail;
    }
    cfg->script = argv[script_index];
    cfg->script_args = argv + script_index + 1;
    cfg->nscript_args = argc - script_index - 1;
    if (cfg->run_id == NULL && (cfg->run_id = strdup("none")) == NULL) {
        rc = -ENOMEM;
        goto fail;
    }
    return 0;
fail:
    ddp_config_free(cfg);
    return rc;
}

void ddp_cli_print_version(int fd)
{
    char text[160];
    int n = snprintf(text, sizeof text, "ddp-launch %s (CUDA device counting: %s)\n", DDP_VERSION,
                     DDP_HAVE_CUDA ? "built in" : "not built");
    (void)ddp_write_all(fd, text, (size_t)n);
}

#define HELP_COLUMN 30 /* where the flags' descriptions start */

/* One flag's lines: "  -r, --redirects SPEC" then its description at HELP_COLUMN. */
static void help_flag(ddp_buf_t *out, const flag_t *f)
{
    size_t start = out->len;
    ddp_buf_puts(out, "  ");
    if (f->short_name != 0)
        ddp_buf_printf(out, "-%c, ", f->short_name);
    ddp_buf_printf(out, "--%s%s%s", f->name, *f->arg ? " " : "", f->arg);
    size_t used = out->len - start;
    if (used + 2 <= HELP_COLUMN)
        ddp_buf_printf(out, "%*s", (int)(HELP_COLUMN - used), "");
    else /* as argparse: the description on a line of its own */
        ddp_buf_printf(out, "\n%*s", HELP_COLUMN, "");
    for (const char *line = f->help; *line;) {
        const char *end = strchr(line, '\n');
        size_t n = end ? (size_t)(end - line) : strlen(line);
        ddp_buf_append(out, line, n);
        ddp_buf_puts(out, "\n");
        if (end == NULL)
            break;
        line = end + 1;
        ddp_buf_printf(out, "%*s", HELP_COLUMN, "");
    }
}

void ddp_cli_print_help(int fd)
{
    ddp_buf_t out = DDP_BUF_INIT;
    ddp_buf_puts(&out,
                 "usage: ddp-launch [options] TRAINING_SCRIPT [SCRIPT ARGS...]\n"
                 "       ddp-launch [options] [--no-python] PROGRAM [ARGS...]\n"
                 "\n"
                 "Start and supervise data-parallel workers, like torchrun (same flags, same "
                 "worker\n"
                 "environment). Every --flag-name is also accepted as --flag_name, "
                 "--flag=value and\n"
                 "--flag value work, unambiguous prefixes are accepted, and each flag takes "
                 "its\n"
                 "default from PET_FLAG_NAME. Everything after the script goes to the script.\n");
    for (int g = 0; g < NGROUPS; g++) {
        ddp_buf_puts(&out, "\n");
        if (group_names[g] != NULL)
            ddp_buf_printf(&out, "%s:\n", group_names[g]);
        for (int i = 0; i < NFLAGS; i++) {
            if (flags[i].group == g)
                help_flag(&out, &flags[i]);
        }
    }
    ddp_buf_puts(&out,
                 "\n"
                 "Exit status: 0 success, 1 a worker failed, 2 usage error, 3 launcher failure,\n"
                 "4 the store cannot listen (port in use), 5 the nodes could not form or keep "
                 "the\n"
                 "job, 6 the job made no progress (do not requeue), 126/127 the program cannot\n"
                 "be executed / is not found, 128+N stopped by signal N. See ddp-launch(1) for\n"
                 "the worker environment, log layout and examples.\n");
    (void)ddp_write_all(fd, ddp_buf_str(&out), out.len);
    ddp_buf_free(&out);
}
