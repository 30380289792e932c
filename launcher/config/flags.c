/* The flag table: every flag's row, its conversion of a value, the combinations that cannot
 * be and the flags given where they do nothing (see flags.h). Main thread, before the
 * loop. */
#include "config/flags.h"

#include "env.h"
#include "error.h"
#include "host/health.h"
#include "host/signals.h"
#include "io.h"
#include "parse.h"
#include "strv.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

int ddp_flag_usage(ddp_buf_t *err, const char *origin, const char *fmt, ...)
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
    return ddp_flag_usage(err, origin, "invalid value '%s': expected %s", value, expected);
}

static int parse_int_flag(const char *value, const char *origin, long min, long max, int *out,
                          ddp_buf_t *err)
{
    long v;
    int r = ddp_parse_long(value, min, max, &v);
    if (r == -ERANGE)
        return ddp_flag_usage(err, origin, "invalid value '%s': must be between %ld and %ld", value,
                              min, max);
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
        return ddp_flag_usage(err, origin, "invalid value '%s': must be between %g and %g seconds",
                              value, min, max);
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
        return ddp_flag_usage(err, origin, "the value must not be empty");
    if (len >= cap)
        return ddp_flag_usage(err, origin, "the value is longer than %zu bytes", cap - 1);
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
        return ddp_flag_usage(err, origin, "invalid value '%s': must be between 1 and %d", value,
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
    if (strcmp(value, "static") == 0)
        cfg->rdzv_backend = DDP_RDZV_STATIC;
    else if (strcmp(value, "c10d") == 0)
        cfg->rdzv_backend = DDP_RDZV_C10D;
    else if (strcmp(value, "etcd") == 0 || strcmp(value, "etcd-v2") == 0) /* torchrun's names */
        cfg->rdzv_backend = DDP_RDZV_ETCD;
    else
        return bad_value(err, origin, value, "static, c10d or etcd");
    return 0;
}

/* The scheme before an etcd endpoint (etcdctl's http:// or https://), if any. */
typedef enum { SCHEME_NONE, SCHEME_HTTP, SCHEME_HTTPS } etcd_scheme_t;

/* etcd's endpoints may start with a scheme, as etcdctl's do: where `text` starts with
 * "http://" or "https://" (any case), *rest is past it and the scheme is returned. */
static etcd_scheme_t etcd_scheme(const char *text, const char **rest)
{
    *rest = text;
    if (strncasecmp(text, "http://", 7) == 0)
        *rest = text + 7;
    else if (strncasecmp(text, "https://", 8) == 0)
        *rest = text + 8;
    return *rest == text ? SCHEME_NONE : text[4] == ':' ? SCHEME_HTTP : SCHEME_HTTPS;
}

/* HOST[:PORT]: c10d's store; etcd's members, [SCHEME://]HOST[:PORT],... (the backend may
 * come later: the list, and an endpoint with a scheme, are read by ddp_flags_check). */
static int apply_rdzv_endpoint(ddp_launch_config_t *cfg, const char *value, const char *origin,
                               const ddp_log_t *log, ddp_buf_t *err)
{
    (void)log;
    free(cfg->etcd.given);
    cfg->etcd.given = NULL;
    if (*value == '\0') {
        cfg->rdzv_endpoint_set = false;
        return 0;
    }
    if ((cfg->etcd.given = strdup(value)) == NULL)
        return -ENOMEM;
    cfg->rdzv_endpoint_set = true;
    const char *rest;
    if (strchr(value, ',') != NULL || etcd_scheme(value, &rest) != SCHEME_NONE) {
        /* etcd's, checked with the backend */
        cfg->rdzv_endpoint_host[0] = '\0';
        cfg->rdzv_endpoint_port = -1;
        return 0;
    }
    if (ddp_parse_host_port(value, -1, cfg->rdzv_endpoint_host, sizeof cfg->rdzv_endpoint_host,
                            &cfg->rdzv_endpoint_port) != 0)
        return bad_value(err, origin, value,
                         "HOST, HOST:PORT, [IPV6]:PORT or an IPv6 address (etcd's: http:// "
                         "or https:// before it or not)");
    return 0;
}

static int apply_rdzv_id(ddp_launch_config_t *cfg, const char *value, const char *origin,
                         const ddp_log_t *log, ddp_buf_t *err)
{
    (void)log;
    if (*value == '\0')
        return ddp_flag_usage(err, origin, "the value must not be empty");
    if (strlen(value) > 255)
        return ddp_flag_usage(err, origin, "the value is longer than 255 bytes");
    char *copy = strdup(value);
    if (copy == NULL)
        return -ENOMEM;
    free(cfg->run_id);
    cfg->run_id = copy;
    return 0;
}

/* etcd's keys of --rdzv-conf (torchrun's): protocol=http|https, cacert, cert, key. */
static int apply_etcd_key(ddp_launch_config_t *cfg, const char *key, const char *text,
                          const char *origin, bool *known, ddp_buf_t *err)
{
    char **slot = strcmp(key, "cacert") == 0 ? &cfg->etcd.cacert
                  : strcmp(key, "cert") == 0 ? &cfg->etcd.cert
                  : strcmp(key, "key") == 0  ? &cfg->etcd.key
                                             : NULL;
    if (strcmp(key, "protocol") == 0) {
        *known = true;
        if (strcasecmp(text, "http") != 0 && strcasecmp(text, "https") != 0)
            return ddp_flag_usage(err, origin, "invalid protocol '%s': expected http or https",
                                  text);
        cfg->etcd.https = strcasecmp(text, "https") == 0;
        cfg->etcd.protocol_given = true;
    } else if (slot != NULL) {
        *known = true;
        if (*text == '\0')
            return ddp_flag_usage(err, origin, "%s: expected the path of a PEM file", key);
        free(*slot);
        if ((*slot = strdup(text)) == NULL)
            return -ENOMEM;
    }
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
            rc = ddp_flag_usage(err, origin,
                                "invalid entry '%s': expected KEY=VALUE[,KEY=VALUE...]", item);
            goto out;
        }
        *eq = '\0';
        const char *key = item, *text = eq + 1;
        bool known = false;
        for (size_t i = 0; i < sizeof seconds / sizeof seconds[0]; i++) {
            if (strcmp(key, seconds[i].key) == 0) {
                known = true;
                if (ddp_parse_double(text, 1e-3, 1e7, seconds[i].slot) != 0) {
                    rc = ddp_flag_usage(err, origin,
                                        "invalid %s '%s': expected a positive number of seconds",
                                        key, text);
                    goto out;
                }
            }
        }
        if (strcmp(key, "keep_alive_max_attempt") == 0) {
            long attempts;
            known = true;
            if (ddp_parse_long(text, 1, 1000000, &attempts) != 0) {
                rc = ddp_flag_usage(
                    err, origin, "invalid keep_alive_max_attempt '%s': expected 1 or more", text);
                goto out;
            }
            cfg->rdzv_conf.keep_alive_max_attempt = (int)attempts;
        }
        if (strcmp(key, "is_host") == 0) {
            bool is_host;
            known = true;
            if (ddp_parse_bool(text, &is_host) != 0) {
                rc = ddp_flag_usage(err, origin, "invalid is_host '%s': expected true or false",
                                    text);
                goto out;
            }
            cfg->rdzv_conf.is_host = is_host;
        }
        if ((rc = apply_etcd_key(cfg, key, text, origin, &known, err)) != 0)
            goto out;
        if (strcmp(key, "store_type") == 0) {
            known = true;
            if (strcasecmp(text, "file") == 0) {
                ddp_log_warn(log,
                             "%s: store_type=file is not supported: the rendezvous uses "
                             "ddp-launch's TCP store at the endpoint",
                             origin);
            } else if (strcasecmp(text, "tcp") != 0) {
                rc = ddp_flag_usage(err, origin, "invalid store_type '%s': expected tcp (or file)",
                                    text);
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
    if (!ddp_config_events_valid(value))
        return ddp_flag_usage(err, origin,
                              "invalid value '%s': expected null, console or file:PATH", value);
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
    return ddp_flag_usage(
        err, origin,
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
            rc =
                ddp_flag_usage(err, origin,
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
        return ddp_flag_usage(err, origin, "invalid value '%s': must be between 0 and %d seconds",
                              value, 7 * 86400);
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
        return ddp_flag_usage(err, origin, "'%s' names no path", value);
    cfg->health_paths = value;
    return 0;
}

/* A size in bytes: digits with an optional K, M or G (powers of 1024), min to max (0: 1T). */
static int parse_size_flag(const char *value, const char *origin, uint64_t min, uint64_t max,
                           uint64_t *out, ddp_buf_t *err)
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
    if ((uint64_t)n * scale < min)
        return ddp_flag_usage(err, origin, "invalid value '%s': less than the least, %" PRIu64 "K",
                              value, min >> 10);
    if (max > 0 && (uint64_t)n * scale > max)
        return ddp_flag_usage(err, origin, "invalid value '%s': more than the most, %" PRIu64 "G",
                              value, max >> 30);
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
            return ddp_flag_usage(err, origin, "'%.*s' is not a variable name", (int)len, p);
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

int ddp_flag_add_env(ddp_launch_config_t *cfg, const char *origin, const char *item, size_t len,
                     char *const *envp, ddp_buf_t *err)
{
    const char *eq = memchr(item, '=', len);
    size_t name_len = eq != NULL ? (size_t)(eq - item) : len;
    char name[256];
    if (name_len >= sizeof name || !variable_name(item, name_len))
        return ddp_flag_usage(err, origin, "'%.*s' is not a variable name", (int)name_len, item);
    memcpy(name, item, name_len);
    name[name_len] = '\0';
    /* The worker contract is the launcher's: one of these set by hand breaks the job. */
    for (int id = DDP_ENV_LOCAL_RANK; id <= DDP_ENV_TORCHELASTIC_ERROR_FILE; id++) {
        if (strcmp(name, ddp_env_name((ddp_env_id_t)id)) == 0)
            return ddp_flag_usage(err, origin, "%s is set by ddp-launch for each worker", name);
    }
    const char *value = eq != NULL ? eq + 1 : ddp_env_lookup(envp, name);
    /* In a multi-node job node 0's value is the one that counts, and the same command
     * runs on every node: unset here, the entry stays bare ("NAME"), node 0's value to
     * come (node 0 itself says so where it has none). */
    if (value == NULL && cfg->nnodes_max > 1)
        return append_item(&cfg->env_set, &cfg->nenv, strdup(name));
    if (value == NULL)
        return ddp_flag_usage(err, origin, "%s is not set here: give %s=VALUE", name, name);
    int n = eq != NULL ? (int)(len - name_len - 1) : (int)strlen(value);
    char *entry;
    if (asprintf(&entry, "%s=%.*s", name, n, value) < 0)
        entry = NULL;
    return append_item(&cfg->env_set, &cfg->nenv, entry); /* NULL-ended, as an environment */
}

const char *const ddp_flag_groups[DDP_FLAG_NGROUPS] = {
    "workers",     "rendezvous (ddp-launch hosts the store the workers meet in)",
    "the program", "supervision",
    "output",      NULL};

static const char *const local_rank_args[] = {"none", "underscore", "dash", NULL};
static const char *const exit_codes[] = {"torchrun", "worker", NULL};
static const char *const start_methods[] = {"spawn", "fork", "forkserver", NULL};

#define FIELD(f) offsetof(ddp_launch_config_t, f)
#define SWITCH(name, short_name, f, pet) \
    name, short_name, DDP_FLAG_SWITCH, FIELD(f), 0, 0, NULL, NULL, pet
#define INT(name, f, lo, hi) name, 0, DDP_FLAG_INT, FIELD(f), lo, hi, NULL, NULL, true
#define TEXT(name, f, most)  name, 0, DDP_FLAG_TEXT, FIELD(f), 0, most, NULL, NULL, true
#define CODE(name, fn, pet)  name, 0, DDP_FLAG_CODE, DDP_FLAG_NO_FIELD, 0, 0, NULL, fn, pet

/* Every flag; the order is the order in which values are applied. */
const ddp_flag_t ddp_flags[] = {
    {CODE("nnodes", apply_nnodes, true), false, DDP_FLAG_GROUP_WORKERS, "N|MIN:MAX",
     "nodes in the job (default 1; a fixed N: static rendezvous)"},
    {CODE("nproc-per-node", apply_nproc_per_node, true), false, DDP_FLAG_GROUP_WORKERS,
     "N|cpu|gpu|xpu|auto", "workers on this node (default 1)"},
    {INT("node-rank", node_rank, 0, INT_MAX - 1), false, DDP_FLAG_GROUP_WORKERS, "R",
     "this node's rank (default 0; node 0 hosts the store)"},
    {"hosts", 0, DDP_FLAG_TEXT, FIELD(hosts), 0, 0, NULL, NULL, false, false,
     DDP_FLAG_GROUP_WORKERS, "H0,H1,...",
     "the job's nodes: node 0 is this one (H0), the others\nare started over ssh "
     "(Slurm's host list syntax)"},
    {"hostfile", 0, DDP_FLAG_TEXT, FIELD(hostfile), 0, 0, NULL, NULL, false, false,
     DDP_FLAG_GROUP_WORKERS, "FILE",
     "as --hosts, one host a line: 'HOST [slots=N]' (N: its\n--nproc-per-node unless given)"},
    {CODE("master-addr", apply_master_addr, true), false, DDP_FLAG_GROUP_RDZV, "HOST",
     "node 0's store address (default 127.0.0.1)"},
    {INT("master-port", master_port, 0, 65535), false, DDP_FLAG_GROUP_RDZV, "PORT",
     "the store's port (default 29500; 0 = a free port)"},
    {TEXT("local-addr", local_addr, 0), false, DDP_FLAG_GROUP_RDZV, "HOST",
     "this node's address as other nodes see it (libddp's\nring listens there)"},
    {CODE("rdzv-backend", apply_rdzv_backend, true), false, DDP_FLAG_GROUP_RDZV, "static|c10d|etcd",
     "rendezvous backend (default static)"},
    {CODE("rdzv-endpoint", apply_rdzv_endpoint, true), false, DDP_FLAG_GROUP_RDZV,
     "HOST[:PORT][,...]",
     "c10d: where the store listens (default port 29400);\netcd: the cluster's members "
     "(default port 2379)"},
    {CODE("rdzv-id", apply_rdzv_id, true), false, DDP_FLAG_GROUP_RDZV, "ID",
     "job id, exported as TORCHELASTIC_RUN_ID (default none)"},
    {CODE("rdzv-conf", apply_rdzv_conf, true), false, DDP_FLAG_GROUP_RDZV, "K=V,...",
     "join_timeout, last_call_timeout, close_timeout,\nread_timeout, timeout, "
     "keep_alive_interval,\nkeep_alive_max_attempt, is_host; etcd: protocol,\ncacert, cert, "
     "key"},
    {SWITCH("standalone", 0, standalone, true), false, DDP_FLAG_GROUP_RDZV, "",
     "one node, a free port and a random run id"},
    {INT("max-restarts", max_restarts, 0, 1000000), false, DDP_FLAG_GROUP_SUPERVISION, "N",
     "restarts of the worker group before failing (default 0)"},
    {CODE("monitor-interval", apply_monitor_interval, true), false, DDP_FLAG_GROUP_SUPERVISION,
     "SECONDS", "accepted for torchrun; ddp-launch does not poll"},
    {"start-method", 0, DDP_FLAG_CHOICE, DDP_FLAG_NO_FIELD, 0, 0, start_methods, NULL, true, false,
     DDP_FLAG_GROUP_SUPERVISION, "METHOD", "accepted for torchrun (spawn, fork, forkserver)"},
    {CODE("event-log-handler", apply_event_log_handler, true), false, DDP_FLAG_GROUP_SUPERVISION,
     "null|console|file:PATH", "a JSON line for every launcher event (default null)"},
    {TEXT("role", role, 255), false, DDP_FLAG_GROUP_WORKERS, "NAME",
     "role name: ROLE_NAME and the tee prefix (default default)"},
    {SWITCH("virtual-local-rank", 0, virtual_local_rank, true), false, DDP_FLAG_GROUP_WORKERS, "",
     "every worker sees only the GPU of its local rank, as\ndevice 0: LOCAL_RANK=0 and "
     "CUDA_VISIBLE_DEVICES=that GPU"},
    {SWITCH("module", 'm', module, true), false, DDP_FLAG_GROUP_PROGRAM, "",
     "run the script as a module: python -u -m MODULE"},
    {SWITCH("no-python", 0, no_python, true), false, DDP_FLAG_GROUP_PROGRAM, "",
     "execute the script as a program (implied for a\ncompiled program, a #! script that "
     "names no python,\nor a name found only in PATH)"},
    {SWITCH("run-path", 0, run_path, true), false, DDP_FLAG_GROUP_PROGRAM, "",
     "run the script with python (torchrun's runpy mode)"},
    {SWITCH("use-env", 0, use_env, true), false, DDP_FLAG_GROUP_PROGRAM, "",
     "pass the local rank in LOCAL_RANK only (the default)"},
    {"local-rank-arg", 0, DDP_FLAG_CHOICE, FIELD(local_rank_arg), 0, 0, local_rank_args, NULL, true,
     false, DDP_FLAG_GROUP_PROGRAM, "none|underscore|dash",
     "also pass --local_rank=N or --local-rank=N to the script,\nas torch.distributed.launch "
     "did (default: the spelling the script's\nadd_argument defines, else none)"},
    {TEXT("log-dir", log_dir, 0), false, DDP_FLAG_GROUP_OUTPUT, "DIR",
     "base directory of the log files (default: a new one in $TMPDIR)"},
    {"redirects", 'r', DDP_FLAG_STD, FIELD(redirects), 0, 0, NULL, NULL, true, false,
     DDP_FLAG_GROUP_OUTPUT, "SPEC",
     "send streams to files: 0 none, 1 stdout, 2 stderr, 3 both,\nor per local rank, e.g. "
     "0:3,1:2"},
    {"tee", 't', DDP_FLAG_STD, FIELD(tee), 0, 0, NULL, NULL, true, false, DDP_FLAG_GROUP_OUTPUT,
     "SPEC", "like --redirects, and also to the console with a prefix"},
    {CODE("local-ranks-filter", apply_local_ranks_filter, true), false, DDP_FLAG_GROUP_OUTPUT,
     "LIST", "only these local ranks reach the console, e.g. 0"},
    {CODE("duplicate-stdout-filters", apply_dup_stdout, true), false, DDP_FLAG_GROUP_OUTPUT,
     "A,B,...",
     "tee'd stdout lines that hold any of these also go to\nfiltered_stdout.log in the attempt's "
     "log directory"},
    {CODE("duplicate-stderr-filters", apply_dup_stderr, true), false, DDP_FLAG_GROUP_OUTPUT,
     "A,B,...", "the same for stderr (filtered_stderr.log)"},
    {CODE("logs-specs", apply_logs_specs, false), false, DDP_FLAG_GROUP_OUTPUT, "NAME",
     "accepted for torchrun when empty; no plugins"},
    {CODE("numa-binding", apply_numa_binding, false), false, DDP_FLAG_GROUP_SUPERVISION,
     "node|socket|exclusive|core-complex",
     "bind each worker to the CPUs and memory near the GPU\nof its local rank (torchrun's modes)"},
    {SWITCH("numa-binding-fallback", 0, numa_fallback, false), false, DDP_FLAG_GROUP_SUPERVISION,
     "",
     "a worker that cannot be bound runs unbound, with a\nwarning (default: the job does not "
     "start)"},
    {CODE("env", apply_env, false), false, DDP_FLAG_GROUP_PROGRAM, "NAME[=VALUE]",
     "set NAME for every worker: VALUE, or this launcher's\nvalue (repeatable; node 0's on every "
     "node it starts)"},
    {CODE("env-list", apply_env, false), false, DDP_FLAG_GROUP_PROGRAM, "NAME,...",
     "--env for each NAME (this launcher's value)"},
    {CODE("env-check", apply_env_check, true), false, DDP_FLAG_GROUP_RDZV, "NAME,...",
     "more variables the nodes must agree on (NCCL_* and\nothers are compared always)"},
    {SWITCH("env-check-strict", 0, env_check_strict, true), false, DDP_FLAG_GROUP_RDZV, "",
     "a variable that differs between nodes ends the job\n(status 5) before any worker starts"},
    {CODE("signals-to-handle", apply_signals_to_handle, true), false, DDP_FLAG_GROUP_SUPERVISION,
     "LIST", "signals forwarded to the workers\n(default SIGTERM,SIGINT,SIGHUP,SIGQUIT)"},
    {CODE("forward-signals", apply_forward_signals, true), false, DDP_FLAG_GROUP_SUPERVISION,
     "LIST",
     "signals passed to the workers, nothing stopped\n(Slurm's --signal=USR1@60 to "
     "checkpoint and go on)"},
    {"shutdown-timeout", 0, DDP_FLAG_SECONDS, FIELD(shutdown_timeout), 0, 7 * 86400, NULL, NULL,
     true, false, DDP_FLAG_GROUP_SUPERVISION, "SECONDS",
     "grace between the stop signal and SIGKILL (default\n30, or TORCH_ELASTIC_SHUTDOWN_TIMEOUT)"},
    {CODE("hang-timeout", apply_hang_timeout, true), false, DDP_FLAG_GROUP_SUPERVISION,
     "SECONDS|auto",
     "no collective finished (libddp), or no output and no CPU\n(others), by any rank this "
     "long: report where every\nrank is, then stop as for a failure (default 0: off);\nauto: "
     "5x each rank's longest step (ddp_launch.step())\nor section, once learnt"},
    {"hang-timeout-floor", 0, DDP_FLAG_SECONDS, FIELD(hang_floor), 0.01, 86400, NULL, NULL, true,
     false, DDP_FLAG_GROUP_SUPERVISION, "SECONDS",
     "--hang-timeout=auto's least timeout (default 10)"},
    {"store-wait-notice", 0, DDP_FLAG_SECONDS, FIELD(store_wait_notice), 0, 7 * 86400, NULL, NULL,
     true, false, DDP_FLAG_GROUP_SUPERVISION, "SECONDS",
     "a worker that has waited this long in the store for a\nkey nobody has set is named, with "
     "the ranks that do not\nwait (default 60; 0: off)"},
    {"finished-wait-notice", 0, DDP_FLAG_SECONDS, FIELD(finished_wait_notice), 0, 7 * 86400, NULL,
     NULL, true, false, DDP_FLAG_GROUP_SUPERVISION, "SECONDS",
     "when some ranks finished and others run this long,\nsay which run, then every 300 s "
     "(default 60; 0: off)"},
    {"straggler-report", 0, DDP_FLAG_SECONDS, FIELD(straggler_report), 0, 7 * 86400, NULL, NULL,
     true, false, DDP_FLAG_GROUP_SUPERVISION, "SECONDS",
     "every SECONDS, name the ranks that work a step longer\nthan the others (default 300; 0: "
     "off)"},
    {CODE("straggler-threshold", apply_straggler_threshold, true), false,
     DDP_FLAG_GROUP_SUPERVISION, "RATIO",
     "a straggler works over RATIO x the median rank\n(default 1.2)"},
    {CODE("straggler-action", apply_straggler_action, true), false, DDP_FLAG_GROUP_SUPERVISION,
     "none|exclude",
     "exclude: a straggler's node leaves the job at its next\nrestart (default none)"},
    {SWITCH("warm-restarts", 0, warm_restarts, true), false, DDP_FLAG_GROUP_SUPERVISION, "",
     "restarted Python workers are forked from a zygote that\nhas imported --preload's modules "
     "(no new interpreter)"},
    {CODE("preload", apply_preload, true), false, DDP_FLAG_GROUP_SUPERVISION, "MODULE,...",
     "--warm-restarts: what the zygote imports (default torch)"},
    {TEXT("checkpoint-dir", checkpoint_dir, 0), false, DDP_FLAG_GROUP_SUPERVISION, "PATH",
     "in-memory checkpoints are copied to PATH when the job\nfails or is stopped; a new job "
     "starts from them"},
    {INT("checkpoint-persist-every", checkpoint_persist_every, 0, 1000000000), false,
     DDP_FLAG_GROUP_SUPERVISION, "N",
     "--checkpoint-dir: also each rank's every N-th save\n(default 0: only at a failure or "
     "stop)"},
    {INT("checkpoint-replicas", checkpoint_replicas, 0, 1000000), false, DDP_FLAG_GROUP_SUPERVISION,
     "N",
     "in-memory checkpoints are copied to the next N nodes\n(default 1 with several nodes; 0: "
     "none)"},
    {"checkpoint-replica-rate", 0, DDP_FLAG_SIZE, FIELD(checkpoint_replica_rate),
     DDP_CHECKPOINT_REPLICA_MIN_RATE, DDP_CHECKPOINT_REPLICA_MAX_RATE, NULL, NULL, true, false,
     DDP_FLAG_GROUP_SUPERVISION, "BYTES",
     "bytes a second a node sends its replicas at (K, M, G;\ndefault 1G)"},
    {TEXT("health-check", health_command, 0), false, DDP_FLAG_GROUP_SUPERVISION, "CMD",
     "before each round, this node runs CMD (/bin/sh -c): not\nexit 0 = unhealthy, the job "
     "ends naming the node (5)"},
    {CODE("health-check-path", apply_health_paths, true), false, DDP_FLAG_GROUP_SUPERVISION,
     "PATHS", "before each round, every path (comma-separated) must\nbe readable"},
    {"health-check-timeout", 0, DDP_FLAG_SECONDS, FIELD(health_timeout), 0.1, 86400, NULL, NULL,
     true, false, DDP_FLAG_GROUP_SUPERVISION, "SECONDS",
     "each health check's time: the command, a path, the\nGPUs (default 60)"},
    {INT("hot-spares", hot_spares, 0, 1000000), false, DDP_FLAG_GROUP_RDZV, "K",
     "c10d: up to K launchers beyond --nnodes wait without\nworkers and take a lost node's "
     "place (and ranks)"},
    {INT("exclude-after", exclude_after, 0, 1000000), false, DDP_FLAG_GROUP_RDZV, "K",
     "a node whose workers failed in K rounds in a row leaves\nthe job (a hot spare takes its "
     "place; default 0: never)"},
    {TEXT("progress-file", progress_file, 0), false, DDP_FLAG_GROUP_SUPERVISION, "PATH",
     "a file holding the last checkpointed iteration: the\njob's progress between restarts"},
    {INT("max-no-progress-restarts", max_no_progress, 0, 1000000), false,
     DDP_FLAG_GROUP_SUPERVISION, "K",
     "end the job with status 6 (do not requeue) after K\nfailed attempts in a row without "
     "progress (default 3;\n0: never)"},
    {"gpu-memory-reclaim-timeout", 0, DDP_FLAG_SECONDS, FIELD(gpu_reclaim_timeout), 0, 86400, NULL,
     NULL, true, false, DDP_FLAG_GROUP_SUPERVISION, "SECONDS",
     "before a restart, wait until the GPUs' used memory is\nunder 512 MiB (NVML), at most "
     "this long (default 50)"},
    {SWITCH("hang-dump", 0, hang_dump, true), false, DDP_FLAG_GROUP_SUPERVISION, "",
     "a hang report also saves each worker's native stack\n(eu-stack or gdb) and Python "
     "stack in its log directory"},
    {"exit-code", 0, DDP_FLAG_CHOICE, FIELD(exit_code_mode), 0, 0, exit_codes, NULL, true, false,
     DDP_FLAG_GROUP_SUPERVISION, "torchrun|worker",
     "exit 1 on a worker failure (default), or the failed\nworker's own status"},
    {"store-max-key", 0, DDP_FLAG_SIZE, FIELD(store_limits.max_key), 0, 0, NULL, NULL, true, false,
     DDP_FLAG_GROUP_RDZV, "SIZE", "longest key the store takes (default 8K)"},
    {"store-max-value", 0, DDP_FLAG_SIZE, FIELD(store_limits.max_value), 0, 0, NULL, NULL, true,
     false, DDP_FLAG_GROUP_RDZV, "SIZE", "largest value (default 8M)"},
    {CODE("store-max-keys", apply_store_max_keys, true), false, DDP_FLAG_GROUP_RDZV, "N",
     "most keys in one request (default 131072)"},
    {CODE("store-busy-poll", apply_store_busy_poll, true), false, DDP_FLAG_GROUP_RDZV, "USEC",
     "after a request, the store polls this long for the\nnext before it sleeps (default 200; "
     "0 = never)"},
    {SWITCH("dry-run", 0, dry_run, true), false, DDP_FLAG_GROUP_OTHER, "",
     "print each worker's command and environment; start nothing"},
    {SWITCH("help", 'h', help, false), true, DDP_FLAG_GROUP_OTHER, "", "this help"},
    {SWITCH("version", 0, version, false), true, DDP_FLAG_GROUP_OTHER, "", "the version"},
};
const int ddp_nflags = (int)(sizeof ddp_flags / sizeof ddp_flags[0]);
_Static_assert(sizeof ddp_flags / sizeof ddp_flags[0] <= DDP_FLAGS_MAX, "raise DDP_FLAGS_MAX");

int ddp_flag_index(const char *name)
{
    for (int f = 0; f < ddp_nflags; f++) {
        if (strcmp(ddp_flags[f].name, name) == 0)
            return f;
    }
    return -1;
}

/* One endpoint of etcd's list (default port 2379) appended as "HOST:PORT"; the scheme
 * before it (http:// or https://) is the list's: one of each is refused. */
static int add_etcd_endpoint(ddp_etcd_conf_t *etcd, const char *text, etcd_scheme_t *scheme,
                             ddp_buf_t *err)
{
    char host[DDP_HOST_MAX], **grown;
    int port = 2379;
    const char *rest;
    etcd_scheme_t own = etcd_scheme(text, &rest);
    if (ddp_parse_host_port(rest, 2379, host, sizeof host, &port) != 0 || port == 0)
        return ddp_flag_usage(err, "--rdzv-endpoint",
                              "invalid etcd endpoint '%s': expected HOST, HOST:PORT, "
                              "[IPV6]:PORT or an IPv6 address, http:// or https:// before it "
                              "or not, a list of them with commas",
                              text);
    if (own != SCHEME_NONE && *scheme != SCHEME_NONE && own != *scheme)
        return ddp_flag_usage(err, "--rdzv-endpoint",
                              "'%s': http:// and https:// endpoints mixed: etcd is reached "
                              "one way (https:// is --rdzv-conf protocol=https)",
                              text);
    if (own != SCHEME_NONE)
        *scheme = own;
    grown = realloc(etcd->endpoints, (etcd->nendpoints + 2) * sizeof *grown);
    if (grown == NULL)
        return -ENOMEM;
    etcd->endpoints = grown;
    if (asprintf(&grown[etcd->nendpoints], strchr(host, ':') != NULL ? "[%s]:%d" : "%s:%d", host,
                 port) < 0)
        return -ENOMEM;
    grown[++etcd->nendpoints] = NULL;
    return 0;
}

/* A TLS file of --rdzv-conf that cannot be read is said now, before the job starts. */
/* A TLS file (cacert, cert, key): a readable regular file of at most DDP_ETCD_FILE_MAX
 * bytes, checked without blocking (libcurl's open of a FIFO would block the loop, deaf to
 * signals; a directory or a device would fail only at the handshake, as etcd's refusal). */
static int check_etcd_file(const char *key, const char *path, ddp_buf_t *err)
{
    const char *problem = path != NULL ? ddp_small_file_problem(path, DDP_ETCD_FILE_MAX) : NULL;
    if (problem == NULL)
        return 0;
    return ddp_flag_usage(err, "--rdzv-conf",
                          "%s=%s: unable to read it: %s (a PEM file of at most %d MiB is needed)",
                          key, path, problem, DDP_ETCD_FILE_MAX >> 20);
}

/* etcd's longest lease (its MaxLeaseTTL, 9e9 s: a grant for longer is refused). */
#define ETCD_LEASE_TTL_MAX 9e9

/* A launcher's lease, while the job forms, is three times its keep-alive limit, which is
 * twice keep_alive_interval times keep_alive_max_attempt (etcd_place.c's lease_s,
 * etcd_session.c's lease_ttl): over etcd's longest, every grant would be refused. */
static int check_etcd_lease(const ddp_launch_config_t *cfg, ddp_buf_t *err)
{
    double lease =
        3 * 2 * cfg->rdzv_conf.keep_alive_interval * cfg->rdzv_conf.keep_alive_max_attempt;
    if (lease <= ETCD_LEASE_TTL_MAX)
        return 0;
    return ddp_flag_usage(err, "--rdzv-conf",
                          "keep_alive_interval=%.15g and keep_alive_max_attempt=%d ask a lease "
                          "of %.15g s from etcd (6 times their product), over its longest, "
                          "%.15g s",
                          cfg->rdzv_conf.keep_alive_interval, cfg->rdzv_conf.keep_alive_max_attempt,
                          lease, ETCD_LEASE_TTL_MAX);
}

/* --rdzv-backend=etcd: its endpoints (every member of the cluster), its TLS files and its
 * lease. */
static int check_etcd(ddp_launch_config_t *cfg, ddp_buf_t *err)
{
    ddp_etcd_conf_t *etcd = &cfg->etcd;
    int rc = 0;
    if (etcd->given == NULL)
        return ddp_flag_usage(err, "--rdzv-backend",
                              "etcd needs --rdzv-endpoint HOST[:PORT][,HOST[:PORT]...]: the "
                              "members of the etcd cluster");
    char *copy = strdup(etcd->given), *save = NULL;
    if (copy == NULL)
        return -ENOMEM;
    ddp_strv_free(etcd->endpoints);
    etcd->endpoints = NULL;
    etcd->nendpoints = 0;
    etcd_scheme_t scheme = SCHEME_NONE;
    for (char *one = strtok_r(copy, ",", &save); one != NULL && rc == 0;
         one = strtok_r(NULL, ",", &save))
        rc = add_etcd_endpoint(etcd, one, &scheme, err);
    free(copy);
    if (rc == 0 && etcd->nendpoints == 0)
        rc = add_etcd_endpoint(etcd, "", &scheme, err);
    if (rc != 0)
        return rc;
    /* As etcdctl: https:// endpoints are reached over TLS; a protocol given says the same. */
    bool https = scheme == SCHEME_HTTPS;
    if (scheme != SCHEME_NONE && etcd->protocol_given && etcd->https != https)
        return ddp_flag_usage(err, "--rdzv-endpoint",
                              "%s endpoints with --rdzv-conf protocol=%s: give one way",
                              https ? "https://" : "http://", etcd->https ? "https" : "http");
    if (scheme != SCHEME_NONE)
        etcd->https = https;
    bool tls_files = etcd->cacert != NULL || etcd->cert != NULL || etcd->key != NULL;
    if (tls_files && !etcd->https)
        return ddp_flag_usage(err, "--rdzv-conf",
                              "cacert, cert and key are for etcd over TLS: add protocol=https");
    if ((etcd->cert != NULL) != (etcd->key != NULL))
        return ddp_flag_usage(
            err, "--rdzv-conf", "%s without %s: a client certificate needs both cert and key",
            etcd->cert != NULL ? "cert" : "key", etcd->cert != NULL ? "key" : "cert");
    if ((rc = check_etcd_file("cacert", etcd->cacert, err)) != 0 ||
        (rc = check_etcd_file("cert", etcd->cert, err)) != 0 ||
        (rc = check_etcd_file("key", etcd->key, err)) != 0 ||
        (rc = check_etcd_lease(cfg, err)) != 0)
        return rc;
    /* The first endpoint stands for the cluster where one address is shown. */
    (void)ddp_parse_host_port(etcd->endpoints[0], 2379, cfg->rdzv_endpoint_host,
                              sizeof cfg->rdzv_endpoint_host, &cfg->rdzv_endpoint_port);
    return 0;
}

/* The keys of --rdzv-conf and the forms of --rdzv-endpoint that only etcd takes. */
static int check_not_etcd(const ddp_launch_config_t *cfg, ddp_buf_t *err)
{
    const ddp_etcd_conf_t *etcd = &cfg->etcd;
    if (etcd->protocol_given || etcd->cacert != NULL || etcd->cert != NULL || etcd->key != NULL)
        return ddp_flag_usage(err, "--rdzv-conf",
                              "protocol, cacert, cert and key are etcd's: add "
                              "--rdzv-backend=etcd");
    const char *rest;
    if (cfg->rdzv_endpoint_set && cfg->rdzv_endpoint_host[0] == '\0')
        return ddp_flag_usage(err, "--rdzv-endpoint",
                              "%s is etcd's (--rdzv-backend=etcd); c10d's store has one, "
                              "HOST[:PORT] (given '%.100s'%s)",
                              strchr(etcd->given, ',') != NULL ? "a list of endpoints"
                              : etcd_scheme(etcd->given, &rest) == SCHEME_HTTPS
                                  ? "an https:// endpoint"
                                  : "an http:// endpoint",
                              etcd->given, strlen(etcd->given) > 100 ? "..." : "");
    return 0;
}

int ddp_flags_check(ddp_launch_config_t *cfg, const ddp_flag_raw_t *raw, ddp_buf_t *err)
{
    int rc = cfg->rdzv_backend == DDP_RDZV_ETCD && !cfg->standalone ? check_etcd(cfg, err)
                                                                    : check_not_etcd(cfg, err);
    if (rc != 0)
        return rc;
    if (cfg->rdzv_backend == DDP_RDZV_C10D && !cfg->rdzv_endpoint_set && !cfg->standalone)
        return ddp_flag_usage(err, "--rdzv-backend",
                              "c10d needs --rdzv-endpoint HOST[:PORT] (or use --standalone)");
    /* A whole request may hold a key and two values (COMPARE_SET), or many of them. */
    uint64_t one = cfg->store_limits.max_key + 2 * cfg->store_limits.max_value + 64;
    cfg->store_limits.max_request = one > ((uint64_t)256 << 20) ? one : (uint64_t)256 << 20;
    if (cfg->hosts != NULL || cfg->hostfile != NULL) {
        const char *which = cfg->hosts != NULL ? "--hosts" : "--hostfile";
        if (cfg->hosts != NULL && cfg->hostfile != NULL)
            return ddp_flag_usage(err, "--hosts",
                                  "and --hostfile both name the job's nodes: give one");
        bool etcd = cfg->rdzv_backend == DDP_RDZV_ETCD && !cfg->standalone;
        if (cfg->standalone || cfg->rdzv_backend == DDP_RDZV_C10D)
            return ddp_flag_usage(err, which,
                                  "starts a static job of its hosts, or an etcd one (not with "
                                  "%s)",
                                  cfg->standalone ? "--standalone, one node"
                                                  : "--rdzv-backend=c10d: its store's host is "
                                                    "the endpoint's, not a host of the list");
        if (etcd && cfg->node_rank != 0)
            return ddp_flag_usage(err, which,
                                  "with --rdzv-backend=etcd, node ranks go in joining order: "
                                  "leave out --node-rank");
        if (!etcd && (cfg->nnodes_max != 1 || cfg->node_rank != 0))
            return ddp_flag_usage(err, which, "gives the nodes and their ranks: leave out %s",
                                  cfg->nnodes_max != 1 ? "--nnodes" : "--node-rank");
    }
    if (cfg->use_env && cfg->local_rank_arg != DDP_LOCAL_RANK_ARG_NONE)
        return ddp_flag_usage(err, "--use-env",
                              "contradicts --local-rank-arg, which passes the local rank "
                              "as an argument");
    if (cfg->module && cfg->no_python && !cfg->run_path)
        return ddp_flag_usage(err, "--no-python", "cannot be combined with -m/--module");
    if (cfg->nnodes_min != cfg->nnodes_max && cfg->rdzv_backend == DDP_RDZV_STATIC)
        return ddp_flag_usage(
            err, "--nnodes",
            "%d:%d: a range of nodes needs elastic rendezvous: add "
            "--rdzv-backend=c10d --rdzv-endpoint=HOST[:PORT] (static needs a fixed N)",
            cfg->nnodes_min, cfg->nnodes_max);
    if (cfg->hot_spares > 0 && (cfg->rdzv_backend == DDP_RDZV_STATIC || cfg->standalone))
        return ddp_flag_usage(err, "--hot-spares",
                              "%d: spares wait at an elastic rendezvous: add --rdzv-backend=c10d "
                              "--rdzv-endpoint=HOST[:PORT] and --nnodes",
                              cfg->hot_spares);
    if (cfg->preload != NULL && !cfg->warm_restarts)
        return ddp_flag_usage(err, raw[ddp_flag_index("preload")].origin,
                              "names what the zygote of --warm-restarts imports: add "
                              "--warm-restarts");
    if (cfg->nnodes_max > 1 && cfg->standalone)
        return ddp_flag_usage(err, "--standalone",
                              "is one node; it cannot run a job of --nnodes=%d", cfg->nnodes_max);
    /* (etcd: each launcher's store takes a free port, and the elected one says which.) */
    if (cfg->nnodes_max > 1 && cfg->master_port == 0 && cfg->rdzv_backend != DDP_RDZV_ETCD)
        return ddp_flag_usage(
            err, "--master-port",
            "0 (a free port) serves one node only: the other nodes of a multi-node "
            "job must know node 0's port; give the same fixed port on every node");
    if (cfg->nnodes_max > 1 && cfg->rdzv_endpoint_set && cfg->rdzv_endpoint_port == 0 &&
        cfg->rdzv_backend != DDP_RDZV_ETCD)
        return ddp_flag_usage(
            err, "--rdzv-endpoint",
            "port 0 (a free port) serves one node only: every launcher of a job of "
            "%d nodes must know the store's port; give a fixed one (c10d's default: "
            "29400)",
            cfg->nnodes_max);
    if (cfg->node_rank >= cfg->nnodes_max)
        return ddp_flag_usage(err, "--node-rank", "%d must be less than --nnodes (%d)",
                              cfg->node_rank, cfg->nnodes_max);
    if (cfg->rdzv_endpoint_set && cfg->rdzv_endpoint_port < 0)
        cfg->rdzv_endpoint_port = cfg->rdzv_backend == DDP_RDZV_C10D ? 29400 : cfg->master_port;
    return 0;
}

static int apply_text(const ddp_flag_t *f, const char *value, const char *origin,
                      const char **field, ddp_buf_t *err)
{
    if (*value == '\0')
        return ddp_flag_usage(err, origin, "the value must not be empty");
    if (f->max > 0 && strlen(value) > (size_t)f->max)
        return ddp_flag_usage(err, origin, "the value is longer than %.0f bytes", f->max);
    *field = value;
    return 0;
}

static int apply_choice(const ddp_flag_t *f, const char *value, const char *origin, int *field,
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

int ddp_flag_apply(const ddp_flag_t *f, ddp_launch_config_t *cfg, const ddp_flag_raw_t *raw,
                   const ddp_log_t *log, ddp_buf_t *err)
{
    const char *value = raw->value, *origin = raw->origin;
    void *field = f->field == DDP_FLAG_NO_FIELD ? NULL : (char *)cfg + f->field;
    switch (f->kind) {
    case DDP_FLAG_SWITCH:
        return parse_switch(value, origin, field, err);
    case DDP_FLAG_INT:
        return parse_int_flag(value, origin, (long)f->min, (long)f->max, field, err);
    case DDP_FLAG_SECONDS:
        return parse_seconds_flag(value, origin, f->min, f->max, field, err);
    case DDP_FLAG_SIZE:
        return parse_size_flag(value, origin, (uint64_t)f->min, (uint64_t)f->max, field, err);
    case DDP_FLAG_TEXT:
        return apply_text(f, value, origin, field, err);
    case DDP_FLAG_CHOICE:
        return apply_choice(f, value, origin, field, err);
    case DDP_FLAG_STD:
        return parse_std_spec(value, origin, field, err);
    case DDP_FLAG_CODE:
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
    ddp_health_spec_t spec;
    ddp_config_health_spec(cfg, &spec);
    return !ddp_health_checks_apply(&spec);
}

static bool no_restarts(const ddp_launch_config_t *cfg)
{
    return cfg->max_restarts == 0;
}

/* One node, and no more to come: --hosts, --hostfile and a Slurm allocation started from
 * outside a step set the nodes only after the flags. */
static bool no_checkpoint_dir(const ddp_launch_config_t *cfg)
{
    return cfg->checkpoint_dir == NULL;
}

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
    return (cfg->rdzv_backend == DDP_RDZV_C10D && cfg->nnodes_max > 1) ||
           cfg->rdzv_backend == DDP_RDZV_ETCD;
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
    {"checkpoint-persist-every", no_checkpoint_dir, "without --checkpoint-dir"},
    {"straggler-action", one_node_exclude, "on one node (there is no job for it to leave)"},
    {"node-rank", assigned_ranks,
     "with --rdzv-backend=c10d or etcd: the rendezvous assigns each node its rank"},
};

/* Each flag given where it does nothing; a node rank Slurm gave (SLURM_NODEID) is no flag
 * given. */
static void warn_without_effect(const ddp_launch_config_t *cfg, const ddp_flag_raw_t *raw,
                                const ddp_log_t *log)
{
    for (size_t i = 0; i < sizeof no_effects / sizeof no_effects[0]; i++) {
        const no_effect_t *e = &no_effects[i];
        const ddp_flag_raw_t *given = &raw[ddp_flag_index(e->flag)];
        if (!given->set || strncmp(given->origin, "SLURM_", 6) == 0 || !e->idle(cfg))
            continue;
        ddp_log_warn(log, "%s%s%s has no effect %s", given->origin, given->value != NULL ? "=" : "",
                     given->value != NULL ? given->value : "", e->why);
    }
}

void ddp_flags_warn(const ddp_launch_config_t *cfg, const ddp_flag_raw_t *raw, const ddp_log_t *log)
{
    warn_untee_filters(cfg, log);
    warn_without_effect(cfg, raw, log);
}
