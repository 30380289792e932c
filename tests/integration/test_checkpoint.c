/* Integration tests of in-memory checkpoints without the launcher's side, for one torch
 * flavour given as argv[1] ("1.13", "2.6" or "python", as tests/integration/test_torch.c):
 * the test plays the launcher, making DDP_CHECKPOINT_DIR itself (on /dev/shm; for 2.6 in
 * the test's TMPDIR, which the trixie root sees) and removing it.
 * torch.save's format as common/torchzip.c writes it (ZIP64 too), read by torch.load. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "harness.h"
#include "io.h"
#include "torchzip.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static th_torch_t torch;

/* The flavour's environment, with the tests' modules and the build's ddp_launch on
 * PYTHONPATH, and `extra` ("K=V" entries, NULL-terminated; may be NULL). */
static const char *const *python_env(const char *const *extra)
{
    static char path[2400];
    static const char *env[16];
    int n = 0;
    snprintf(path, sizeof path, "PYTHONPATH=%s/worker/python:%s/tests/python",
             getenv("DDP_TEST_BUILD_DIR"), th_source_dir());
    env[n++] = path;
    for (int i = 0; torch.env[i] != NULL; i++)
        env[n++] = torch.env[i];
    for (int i = 0; extra != NULL && extra[i] != NULL && n < 15; i++)
        env[n++] = extra[i];
    env[n] = NULL;
    return env;
}

/* Runs a test script with the flavour's python: args NULL-terminated, after the script. */
static void run_python(th_proc_t *p, const char *name, const char *const *args,
                       const char *const *extra_env, double timeout)
{
    const char *argv[16] = {torch.python, th_script(name)};
    int n = 2;
    for (int i = 0; args != NULL && args[i] != NULL && n < 15; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    th_run(p, argv, python_env(extra_env), timeout);
}

/* The records listed in DIR/index ("NAME FILE" lines) as torchzip entries, into `out` (the
 * names and bytes in `names` and `data`, which the caller frees). Their number. */
static size_t read_records(const char *dir, ddp_torchzip_entry_t *out, size_t cap, char **names,
                           char **data)
{
    char path[1200], name[256], file[256];
    snprintf(path, sizeof path, "%s/index", dir);
    FILE *index = fopen(path, "r");
    assert_non_null(index);
    size_t n = 0;
    while (n < cap && fscanf(index, "%255s %255s", name, file) == 2) {
        size_t len;
        snprintf(path, sizeof path, "%s/%s", dir, file);
        assert_int_equal(ddp_read_file(path, 1 << 26, &data[n], &len), 0);
        names[n] = strdup(name);
        out[n] = (ddp_torchzip_entry_t){names[n], data[n], len};
        n++;
    }
    fclose(index);
    return n;
}

static void write_zip(const char *path, const ddp_torchzip_entry_t *entries, size_t n,
                      const ddp_torchzip_options_t *options)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    assert_true(fd >= 0);
    ddp_buf_t why = DDP_BUF_INIT;
    int err = ddp_torchzip_write(fd, entries, n, options, &why);
    if (err)
        fail_msg("torchzip: %s", ddp_buf_str(&why));
    close(fd);
    ddp_buf_free(&why);
}

/* torch.save's records of a model's and an optimizer's state, written again by the zip
 * writer, plainly and with ZIP64's fields on every entry: torch.load reads both. */
static void test_zip_loaded_by_torch(void **state)
{
    char *dir = th_tmpdir(), plain[1100], zip64[1100];
    th_proc_t p;
    const char *records[] = {"records", dir, NULL};
    run_python(&p, "checkpoint_torchzip.py", records, NULL, 120);
    TH_ASSERT(&p, th_status(&p) == 0);
    th_cleanup(&p);
    ddp_torchzip_entry_t entries[64];
    char *names[64], *data[64];
    size_t n = read_records(dir, entries, 64, names, data);
    assert_true(n >= 3);
    snprintf(plain, sizeof plain, "%s/plain.pt", dir);
    snprintf(zip64, sizeof zip64, "%s/zip64.pt", dir);
    entries[n++] = (ddp_torchzip_entry_t){"version", "3\n", 2};
    write_zip(plain, entries, n, NULL);
    write_zip(zip64, entries, n, &(ddp_torchzip_options_t){.archive = "fm", .zip64_from = 1});
    const char *load[] = {"load", plain, zip64, NULL};
    run_python(&p, "checkpoint_torchzip.py", load, NULL, 120);
    TH_ASSERT(&p, th_status(&p) == 0);
    TH_ASSERT(&p, th_count(ddp_buf_str(&p.out), "loaded ") == 2);
    th_cleanup(&p);
    for (size_t i = 0; i < n - 1; i++) {
        free(names[i]);
        free(data[i]);
    }
    th_rmtree(dir);
    free(dir);
}

int main(int argc, char **argv)
{
    const char *flavour = argc > 1 ? argv[1] : "1.13";
    if (argc > 2) /* meson test checkpoint-1.13 --test-args NAME */
        cmocka_set_test_filter(argv[2]);
    th_torch_prepare(&torch, flavour);
    const struct CMUnitTest tests[] = {
        TH_TEST(test_zip_loaded_by_torch),
    };
    return cmocka_run_group_tests_name(flavour, tests, NULL, NULL);
}
