/* The command line of ddp-launch: reading argv and --help (see cli.h); the flags themselves,
 * their conversions and checks, are the table's (flags.h).
 *
 * Parsing happens in two passes: collect each flag's raw text (the command line over
 * its PET_* default, Slurm's variables under both), then convert and validate it with the
 * flag's row, whose errors name the flag as the user gave it. Main thread, before the
 * loop. */
#include "config/cli.h"

#include "config/flags.h"
#include "config/slurm.h"
#include "ddp_config.h"
#include "env.h"
#include "error.h"
#include "io.h"
#include "parse.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    for (int i = 0; i < ddp_nflags; i++) {
        if (spelling_matches(ddp_flags[i].name, typed, len, true))
            return i;
    }
    int found = -1;
    for (int i = 0; i < ddp_nflags; i++) {
        if (spelling_matches(ddp_flags[i].name, typed, len, false)) {
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
    for (int i = 0; i < ddp_nflags; i++) {
        if (spelling_matches(ddp_flags[i].name, typed, len, false)) {
            ddp_buf_printf(err, "%s--%s", sep, ddp_flags[i].name);
            sep = ", ";
        }
    }
}

static bool looks_like_number(const char *text)
{
    double v;
    return ddp_parse_double(text, -1e300, 1e300, &v) == 0;
}

static void pet_name(const ddp_flag_t *flag, char *out, size_t cap)
{
    size_t n = (size_t)snprintf(out, cap, "PET_%s", flag->name);
    for (size_t i = 4; i < n && i < cap; i++)
        out[i] = flag->name[i - 4] == '-' ? '_' : (char)toupper((unsigned char)out[i]);
}

/* Reads the options in argv into raw[]; *script_index is where the script is (argc
 * when there is none). */
static int scan_argv(int argc, char **argv, ddp_flag_raw_t *raw, int *script_index, ddp_buf_t *err)
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
                ddp_flag_usage(err, arg, "ambiguous option: could be ");
                list_prefix_matches(err, name, len);
                return DDP_EUSAGE;
            }
            if (index < 0)
                return ddp_flag_usage(
                    err, arg,
                    "unrecognized option (options for the training script go after "
                    "the script)");
            if (eq != NULL) {
                value = eq + 1;
                inline_value = true;
            }
        } else {
            index = -1;
            for (int f = 0; f < ddp_nflags; f++) {
                if (ddp_flags[f].short_name == arg[1])
                    index = f;
            }
            if (index < 0 || (ddp_flags[index].kind == DDP_FLAG_SWITCH && arg[2] != '\0'))
                return ddp_flag_usage(err, arg, "unrecognized option");
            if (arg[2] != '\0') {
                value = arg[2] == '=' ? arg + 3 : arg + 2;
                inline_value = true;
            }
        }
        const ddp_flag_t *flag = &ddp_flags[index];
        ddp_flag_raw_t *slot = &raw[index];
        snprintf(slot->origin, sizeof slot->origin, "--%s", flag->name);
        if (flag->kind == DDP_FLAG_SWITCH) {
            if (inline_value)
                return ddp_flag_usage(err, slot->origin, "takes no value");
            slot->value = NULL;
        } else if (!inline_value) {
            if (i + 1 >= argc || (argv[i + 1][0] == '-' && argv[i + 1][1] != '\0' &&
                                  !looks_like_number(argv[i + 1])))
                return ddp_flag_usage(err, slot->origin, "expects a value");
            value = argv[++i];
        }
        if (flag->kind != DDP_FLAG_SWITCH)
            slot->value = value;
        slot->set = true;
        i++;
        if (flag->at_once)
            break; /* like argparse: --help acts as soon as it is seen */
    }
    *script_index = i;
    return 0;
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
            int rc = ddp_flag_add_env(cfg, list ? "--env-list" : "--env", p, len, envp, err);
            if (rc != 0)
                return rc;
            if (p[len] == '\0')
                break;
            p += len + 1;
        }
    }
    return 0;
}

/* PET_<NAME> of a flag that takes no default from the environment (as torchrun's own do
 * not, or one the same command on every node must not take: --hosts): said, not silently
 * passed over. */
static void warn_unread_pet(const ddp_flag_raw_t *raw, char *const *envp, const ddp_log_t *log)
{
    for (int i = 0; i < ddp_nflags; i++) {
        char name[64];
        if (ddp_flags[i].pet)
            continue;
        pet_name(&ddp_flags[i], name, sizeof name);
        const char *value = ddp_env_lookup(envp, name);
        if (value != NULL && *value != '\0')
            ddp_log_warn(log, "%s is ignored: --%s takes no default from the environment%s", name,
                         ddp_flags[i].name, raw[i].set ? " (and is given)" : "");
    }
}

int ddp_cli_parse(ddp_launch_config_t *cfg, int argc, char **argv, char *const *envp,
                  const ddp_log_t *log, ddp_buf_t *err)
{
    ddp_flag_raw_t raw[DDP_FLAGS_MAX];
    int script_index = argc, rc;
    memset(raw, 0, sizeof raw);
    ddp_config_defaults(cfg);

    for (int i = 0; i < ddp_nflags; i++) {
        if (!ddp_flags[i].pet)
            continue;
        pet_name(&ddp_flags[i], raw[i].origin, sizeof raw[i].origin);
        const char *value = ddp_env_lookup(envp, raw[i].origin);
        if (value != NULL && *value != '\0') {
            raw[i].value = value;
            raw[i].set = true;
        }
    }
    if ((rc = scan_argv(argc, argv, raw, &script_index, err)) != 0)
        goto fail;
    /* torchrun's: without the flag (or PET_), TORCH_ELASTIC_SHUTDOWN_TIMEOUT, else 30 s. */
    ddp_flag_raw_t *grace = &raw[ddp_flag_index("shutdown-timeout")];
    const char *grace_env = ddp_env_lookup(envp, "TORCH_ELASTIC_SHUTDOWN_TIMEOUT");
    if (!grace->set && grace_env != NULL && *grace_env != '\0') {
        grace->value = grace_env;
        grace->set = true;
        snprintf(grace->origin, sizeof grace->origin, "TORCH_ELASTIC_SHUTDOWN_TIMEOUT");
    }
    char slurm_host[256];
    if ((rc = ddp_slurm_defaults(raw, envp, slurm_host, sizeof slurm_host, log, err)) != 0)
        goto fail;
    for (int i = 0; i < ddp_nflags; i++) {
        if (raw[i].set && (rc = ddp_flag_apply(&ddp_flags[i], cfg, &raw[i], log, err)) != 0)
            goto fail;
    }
    if (cfg->help || cfg->version)
        return 0;
    cfg->master_port_given = raw[ddp_flag_index("master-port")].set;
    cfg->nproc_per_node_given = raw[ddp_flag_index("nproc-per-node")].set;
    cfg->local_rank_arg_given = raw[ddp_flag_index("local-rank-arg")].set;
    ddp_slurm_after(cfg, raw, envp, log);
    if ((rc = collect_env(cfg, argv, script_index, envp, err)) != 0)
        goto fail;
    if ((rc = ddp_flags_check(cfg, raw, err)) != 0)
        goto fail;
    ddp_flags_warn(cfg, raw, log);
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
        rc = ddp_flag_usage(err, NULL, "missing the training script (or program with --no-python)");
        goto fail;
    }
    if (*argv[script_index] == '\0') {
        rc = ddp_flag_usage(err, NULL, "the training script must not be an empty string");
        goto fail;
    }
    cfg->script = argv[script_index];
    cfg->script_args = argv + script_index + 1;
    cfg->nscript_args = argc - script_index - 1;
    /* --hosts with etcd: every node the same run id, and without --rdzv-id one of this
     * job's own (two such jobs on one etcd must not meet). */
    char uuid[37] = "none";
    if (cfg->run_id == NULL && cfg->rdzv_backend == DDP_RDZV_ETCD && !cfg->standalone &&
        (cfg->hosts != NULL || cfg->hostfile != NULL) && (rc = ddp_random_uuid(uuid)) != 0)
        goto fail;
    if (cfg->run_id == NULL && (cfg->run_id = strdup(uuid)) == NULL) {
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
static void help_flag(ddp_buf_t *out, const ddp_flag_t *f)
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
    for (int g = 0; g < DDP_FLAG_NGROUPS; g++) {
        ddp_buf_puts(&out, "\n");
        if (ddp_flag_groups[g] != NULL)
            ddp_buf_printf(&out, "%s:\n", ddp_flag_groups[g]);
        for (int i = 0; i < ddp_nflags; i++) {
            if (ddp_flags[i].group == g)
                help_flag(&out, &ddp_flags[i]);
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
