/* The torch a Python worker will import, from its version.py (see torch_version.h). */
#include "config/torch_version.h"

#include "env.h"
#include "host/proc.h"
#include "io.h"

#include <dirent.h>
#include <stdarg.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAX_PYTHONS 8 /* interpreter versions tried where the name says none */

typedef struct {
    const char *package; /* the package looked for ("torch") */
    char *where;
    size_t cap;
    bool found; /* the package was seen: the search is over */
    int version;
} search_t;

int ddp_torch_parse_version(const char *text)
{
    char *end;
    long major = strtol(text, &end, 10);
    if (end == text || *end != '.' || major < 0 || major > 99)
        return 0;
    const char *minor_text = end + 1;
    long minor = strtol(minor_text, &end, 10);
    if (end == minor_text || minor < 0 || minor > 999)
        return 0;
    return DDP_TORCH_VERSION((int)major, (int)minor);
}

/* The value of `__version__ = '...'` (or "..."; an annotation allowed) in a version.py. */
static int version_of_file(const char *text)
{
    for (const char *line = text; line != NULL && *line != '\0';) {
        if (strncmp(line, "__version__", 11) == 0) {
            const char *p = line + 11 + strcspn(line + 11, "=\n");
            if (*p == '=') {
                p += 1 + strspn(p + 1, " \t");
                if (*p == '\'' || *p == '"')
                    return ddp_torch_parse_version(p + 1);
            }
        }
        line = strchr(line, '\n');
        line = line != NULL ? line + 1 : NULL;
    }
    return 0;
}

/* Looks for torch in site directory `site`. */
static void try_site(search_t *s, const char *site);

/* try_site of the directory `fmt` makes (skipped where it does not fit a path). */
__attribute__((format(printf, 2, 3))) static void try_sitef(search_t *s, const char *fmt, ...)
{
    char site[PATH_MAX];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(site, sizeof site, fmt, ap);
    va_end(ap);
    if (n > 0 && n < (int)sizeof site)
        try_site(s, site);
}

static void try_site(search_t *s, const char *site)
{
    char path[PATH_MAX];
    struct stat st;
    char *text = NULL;
    size_t len;
    if (s->found || snprintf(path, sizeof path, "%s/%s", site, s->package) >= (int)sizeof path ||
        stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
        return;
    s->found = true;
    if (strcmp(s->package, "torch") != 0 ||
        snprintf(path, sizeof path, "%s/torch/version.py", site) >= (int)sizeof path ||
        ddp_read_file(path, 64 << 10, &text, &len) != 0)
        return;
    s->version = version_of_file(text);
    free(text);
    if (s->where != NULL && s->version != 0)
        snprintf(s->where, s->cap, "%s", path);
}

/* The interpreter versions ("3.12") whose directories to try under `prefix`/lib: the
 * one the executable's name says (python3.12), else every python3.N there. */
static int python_versions(const char *real_name, const char *prefix, char xy[][16])
{
    int n = 0, major, minor;
    if (sscanf(real_name, "python%d.%d", &major, &minor) == 2) {
        snprintf(xy[0], 16, "%d.%d", major, minor);
        return 1;
    }
    char lib[PATH_MAX];
    DIR *d = snprintf(lib, sizeof lib, "%s/lib", prefix) < (int)sizeof lib ? opendir(lib) : NULL;
    struct dirent *e;
    while (d != NULL && n < MAX_PYTHONS && (e = readdir(d)) != NULL) {
        if (sscanf(e->d_name, "python%d.%d", &major, &minor) == 2)
            snprintf(xy[n++], 16, "%d.%d", major, minor);
    }
    if (d != NULL)
        closedir(d);
    return n;
}

/* `path` without its last two components ("/opt/venv/bin/python3" → "/opt/venv"). */
static void prefix_of(const char *path, char *out, size_t cap)
{
    snprintf(out, cap, "%s", path);
    for (int i = 0; i < 2; i++) {
        char *slash = strrchr(out, '/');
        if (slash == NULL) {
            snprintf(out, cap, ".");
            return;
        }
        *slash = '\0';
    }
    if (out[0] == '\0')
        snprintf(out, cap, "/");
}

/* A venv's own site-packages; whether the interpreter's base ones follow. */
static bool try_venv(search_t *s, const char *prefix, const char *real_name)
{
    char cfg_path[PATH_MAX], xy[MAX_PYTHONS][16], *cfg = NULL;
    size_t len;
    if (snprintf(cfg_path, sizeof cfg_path, "%s/pyvenv.cfg", prefix) >= (int)sizeof cfg_path ||
        ddp_read_file(cfg_path, 64 << 10, &cfg, &len) != 0)
        return true; /* not a venv */
    int n = python_versions(real_name, prefix, xy);
    for (int i = 0; i < n; i++)
        try_sitef(s, "%s/lib/python%s/site-packages", prefix, xy[i]);
    bool system = strstr(cfg, "include-system-site-packages = true") != NULL;
    free(cfg);
    return system;
}

/* Where `python` would import s->package from, first found (see torch_version.h). */
static void search(search_t *s, const char *python, const char *pythonpath, const char *home)
{
    char real[PATH_MAX], prefix[PATH_MAX], site[PATH_MAX], xy[MAX_PYTHONS][16];
    if (python == NULL || realpath(python, real) == NULL)
        return;
    const char *real_name = strrchr(real, '/') ? strrchr(real, '/') + 1 : real;
    /* 1. PYTHONPATH, first to last. */
    for (const char *p = pythonpath; p != NULL && *p != '\0' && !s->found;) {
        size_t n = strcspn(p, ":");
        if (n > 0 && n < sizeof site) {
            snprintf(site, sizeof site, "%.*s", (int)n, p);
            try_site(s, site);
        }
        p += n + (p[n] == ':');
    }
    /* 2. A venv's site-packages (its bin/python links out of it). */
    prefix_of(python, prefix, sizeof prefix);
    bool base = try_venv(s, prefix, real_name);
    /* 3. The base interpreter's prefix: the user's site, then Debian's and the usual. */
    prefix_of(real, prefix, sizeof prefix);
    int n = python_versions(real_name, prefix, xy);
    for (int i = 0; i < n && base && home != NULL && *home != '\0'; i++)
        try_sitef(s, "%s/.local/lib/python%s/site-packages", home, xy[i]);
    for (int i = 0; i < n && base; i++) {
        try_sitef(s, "%s/local/lib/python%s/dist-packages", prefix, xy[i]);
        try_sitef(s, "%s/lib/python%s/site-packages", prefix, xy[i]);
    }
    if (base)
        try_sitef(s, "%s/lib/python3/dist-packages", prefix);
}

int ddp_torch_version(const char *python, const char *pythonpath, const char *home, char *where,
                      size_t cap)
{
    search_t s = {.package = "torch", .where = where, .cap = cap};
    if (where != NULL && cap > 0)
        where[0] = '\0';
    search(&s, python, pythonpath, home);
    return s.version;
}

bool ddp_python_has_package(const char *python, const char *pythonpath, const char *home,
                            const char *package)
{
    search_t s = {.package = package};
    search(&s, python, pythonpath, home);
    return s.found;
}

int ddp_torch_version_of_workers(const ddp_launch_config_t *cfg, char *const *envp, char *where,
                                 size_t cap)
{
    char *python = NULL;
    if (where != NULL && cap > 0)
        where[0] = '\0';
    if ((!cfg->run_path && cfg->no_python) ||
        ddp_proc_find(cfg->python_exec, ddp_env_lookup(envp, ddp_env_name(DDP_ENV_PATH)),
                      &python) != 0)
        return 0;
    int version = ddp_torch_version(python, ddp_env_lookup(envp, ddp_env_name(DDP_ENV_PYTHONPATH)),
                                    ddp_env_lookup(envp, ddp_env_name(DDP_ENV_HOME)), where, cap);
    free(python);
    return version;
}
