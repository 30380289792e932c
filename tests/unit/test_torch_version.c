/* Unit tests of launcher/config/torch_version.c: the workers' torch found in the layouts Python
 * has (a venv whose python links out of it, a prefix such as pyenv's, Debian's
 * dist-packages, PYTHONPATH, the user's site), built as trees in a temporary directory;
 * and the version strings torch's version.py holds. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "config/torch_version.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
    char root[64];
} tree_t;

/* Creates every directory of `path` (under the tree) and, with `text`, the file. */
static void put(const tree_t *t, const char *path, const char *text)
{
    char full[PATH_MAX];
    snprintf(full, sizeof full, "%s/%s", t->root, path);
    for (char *p = full + strlen(t->root) + 1; (p = strchr(p, '/')) != NULL; p++) {
        *p = '\0';
        (void)mkdir(full, 0755);
        *p = '/';
    }
    if (text == NULL) {
        (void)mkdir(full, 0755);
        return;
    }
    FILE *f = fopen(full, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void link_to(const tree_t *t, const char *target, const char *path)
{
    char full[PATH_MAX], to[PATH_MAX];
    snprintf(full, sizeof full, "%s/%s", t->root, path);
    snprintf(to, sizeof to, "%s/%s", t->root, target);
    assert_int_equal(symlink(to, full), 0);
}

static int setup(void **state)
{
    tree_t *t = calloc(1, sizeof *t);
    snprintf(t->root, sizeof t->root, "/tmp/ddp-torchver-XXXXXX");
    assert_non_null(mkdtemp(t->root));
    /* A base interpreter at <root>/usr/bin/python3.12 (python3 links to it). */
    put(t, "usr/bin/python3.12", "#!/bin/false\n");
    link_to(t, "usr/bin/python3.12", "usr/bin/python3");
    *state = t;
    return 0;
}

static int teardown(void **state)
{
    tree_t *t = *state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", t->root);
    assert_int_equal(system(cmd), 0);
    free(t);
    return 0;
}

static int version_of(const tree_t *t, const char *python, const char *pythonpath, const char *home,
                      char *where)
{
    char exe[PATH_MAX], pp[PATH_MAX], h[PATH_MAX];
    snprintf(exe, sizeof exe, "%s/%s", t->root, python);
    if (pythonpath != NULL)
        snprintf(pp, sizeof pp, "/nonexistent:%s/%s", t->root, pythonpath);
    if (home != NULL)
        snprintf(h, sizeof h, "%s/%s", t->root, home);
    return ddp_torch_version(exe, pythonpath ? pp : NULL, home ? h : NULL, where, PATH_MAX);
}

static void test_parse(void **state)
{
    assert_int_equal(ddp_torch_parse_version("2.11.0+cu130"), DDP_TORCH_VERSION(2, 11));
    assert_int_equal(ddp_torch_parse_version("1.13.0a0"), DDP_TORCH_VERSION(1, 13));
    assert_int_equal(ddp_torch_parse_version("2.6.0+debian"), DDP_TORCH_VERSION(2, 6));
    assert_int_equal(ddp_torch_parse_version("2.2"), DDP_TORCH_VERSION(2, 2));
    assert_int_equal(ddp_torch_parse_version("2"), 0);
    assert_int_equal(ddp_torch_parse_version("x.1"), 0);
    assert_int_equal(ddp_torch_parse_version(""), 0);
}

/* A venv (pyvenv.cfg; bin/python3 links to the base interpreter) has torch 2.11; the
 * base prefix has an older one, which the venv hides. */
static void test_venv_first(void **state)
{
    tree_t *t = *state;
    char where[PATH_MAX];
    put(t, "venv/pyvenv.cfg", "home = /usr/bin\ninclude-system-site-packages = false\n");
    put(t, "venv/bin", NULL);
    link_to(t, "usr/bin/python3", "venv/bin/python3");
    put(t, "venv/lib/python3.12/site-packages/torch/version.py",
        "from typing import Optional\n__all__ = ['__version__']\n__version__ = '2.11.0+cu130'\n");
    put(t, "usr/lib/python3/dist-packages/torch/version.py", "__version__ = '1.13.0a0'\n");
    assert_int_equal(version_of(t, "venv/bin/python3", NULL, NULL, where),
                     DDP_TORCH_VERSION(2, 11));
    assert_non_null(strstr(where, "/venv/lib/python3.12/site-packages/torch/version.py"));
    /* The base interpreter itself sees Debian's dist-packages. */
    assert_int_equal(version_of(t, "usr/bin/python3", NULL, NULL, where), DDP_TORCH_VERSION(1, 13));
    assert_non_null(strstr(where, "/usr/lib/python3/dist-packages/torch/version.py"));
}

/* A venv without torch and without the system's site: nothing, not the base's torch;
 * with include-system-site-packages, the base's. */
static void test_venv_without_torch(void **state)
{
    tree_t *t = *state;
    put(t, "usr/lib/python3/dist-packages/torch/version.py", "__version__ = \"2.6.0+debian\"\n");
    put(t, "venv/pyvenv.cfg", "include-system-site-packages = false\n");
    put(t, "venv/lib/python3.12/site-packages", NULL);
    put(t, "venv/bin", NULL);
    link_to(t, "usr/bin/python3", "venv/bin/python3");
    assert_int_equal(version_of(t, "venv/bin/python3", NULL, NULL, NULL), 0);
    put(t, "venv/pyvenv.cfg", "include-system-site-packages = true\n");
    assert_int_equal(version_of(t, "venv/bin/python3", NULL, NULL, NULL), DDP_TORCH_VERSION(2, 6));
}

/* PYTHONPATH comes first, then the user's site, then /usr/local's dist-packages (pip on
 * Debian or Ubuntu), then the prefix's site-packages. */
static void test_search_order(void **state)
{
    tree_t *t = *state;
    char where[PATH_MAX];
    put(t, "usr/lib/python3.12/site-packages/torch/version.py", "__version__ = '2.1.0'\n");
    assert_int_equal(version_of(t, "usr/bin/python3", NULL, NULL, NULL), DDP_TORCH_VERSION(2, 1));
    put(t, "usr/local/lib/python3.12/dist-packages/torch/version.py", "__version__ = '2.3.1'\n");
    assert_int_equal(version_of(t, "usr/bin/python3", NULL, NULL, NULL), DDP_TORCH_VERSION(2, 3));
    put(t, "home/.local/lib/python3.12/site-packages/torch/version.py", "__version__ = '2.4.0'\n");
    assert_int_equal(version_of(t, "usr/bin/python3", NULL, "home", NULL), DDP_TORCH_VERSION(2, 4));
    put(t, "src/torch/version.py", "__version__ = '2.7.0a0+git1234'\n");
    assert_int_equal(version_of(t, "usr/bin/python3", "src", "home", where),
                     DDP_TORCH_VERSION(2, 7));
    assert_non_null(strstr(where, "/src/torch/version.py"));
}

/* A torch without a readable version (a source checkout before its build), an
 * interpreter named without its version (pyenv's shims, conda's python), none at all. */
static void test_unknown_and_unnamed(void **state)
{
    tree_t *t = *state;
    put(t, "conda/bin/python", "#!/bin/false\n");
    put(t, "conda/lib/python3.10/site-packages/torch/version.py", "__version__ = '2.0.1'\n");
    assert_int_equal(version_of(t, "conda/bin/python", NULL, NULL, NULL), DDP_TORCH_VERSION(2, 0));
    put(t, "usr/lib/python3/dist-packages/torch/__init__.py", "");
    assert_int_equal(version_of(t, "usr/bin/python3", NULL, NULL, NULL), 0);
    assert_int_equal(version_of(t, "usr/bin/missing", NULL, NULL, NULL), 0);
    assert_int_equal(ddp_torch_version(NULL, NULL, NULL, NULL, 0), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse),
        cmocka_unit_test_setup_teardown(test_venv_first, setup, teardown),
        cmocka_unit_test_setup_teardown(test_venv_without_torch, setup, teardown),
        cmocka_unit_test_setup_teardown(test_search_order, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unknown_and_unnamed, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
