/* Integration tests of in-memory checkpoints, for one torch flavour given as argv[1] ("1.13",
 * "2.6" or "python", as tests/integration/test_torch.c).
 * The worker's side, the test playing the launcher (making DDP_CHECKPOINT_DIR itself, on
 * /dev/shm; for 2.6 in the test's TMPDIR; writing the slots' checksums, turning a slot into
 * a torch.save file): torch.save's format as common/torchzip.c writes it (ZIP64 too), read
 * by torch.load; ddp_launch.checkpoint (tests/python/checkpoint_worker.py): round trips of
 * a model's and an optimizer's state, bit for bit, and its refusals; a slot read by
 * torch.load once in torch.save's format; with 1.13 only (what does not depend on torch's
 * version): a plain state without torch, two ranks agreeing on the step to load (in the
 * user's own directory, which the launcher leaves alone), a save SIGKILLed midway (the
 * previous step loads), a slot whose data no longer matches the checksum the test wrote,
 * and forged headers.
 * The launcher's side (tests/python/checkpoint_train.py, a DDP job saving every step): a
 * worker SIGKILLed at step 37 resumes there, the run's losses those of an uninterrupted one
 * bit for bit, nothing left in /dev/shm or TMPDIR; ddp-launch SIGTERMed or SIGINTed: the
 * directory gone at its exit; SIGKILLed: the orphan guard removes it. libddp workers (the
 * collectives helper): the step every rank resumes from after a crash during a save and
 * after a corrupted slot; slot files that are a link or a sparse lie, refused. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "ckpt_file.h"
#include "harness.h"
#include "io.h"
#include "torchzip.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static th_torch_t torch;
static char ckpt_dir[1100];     /* the test's DDP_CHECKPOINT_DIR */
static char ckpt_var[1200];     /* "DDP_CHECKPOINT_DIR=..." */
static bool ckpt_on_shm = true; /* /dev/shm, but for 2.6 */

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

/* Makes the test's checkpoint directory (ckpt_dir, ckpt_var), which its teardown removes:
 * on /dev/shm, or for 2.6 in the test's TMPDIR. */
static void make_ckpt_dir(void)
{
    char *dir = ckpt_on_shm ? th_shm_tmpdir() : th_tmpdir();
    snprintf(ckpt_dir, sizeof ckpt_dir, "%s", dir);
    snprintf(ckpt_var, sizeof ckpt_var, "DDP_CHECKPOINT_DIR=%s", dir);
    free(dir);
}

/* Slot `slot` of rank `rank` read whole and checked: the caller frees *file. */
static ddp_ckpt_t read_slot(int rank, int slot, char **file)
{
    char path[1200];
    size_t len;
    ddp_ckpt_t c;
    ddp_buf_t why = DDP_BUF_INIT;
    assert_int_equal(ddp_ckpt_slot_path(path, sizeof path, ckpt_dir, rank, slot), 0);
    assert_int_equal(ddp_read_file(path, 1u << 30, file, &len), 0);
    if (ddp_ckpt_parse(*file, len, &c, &why) != 0)
        fail_msg("%s: %s", path, ddp_buf_str(&why));
    ddp_buf_free(&why);
    return c;
}

/* What the launcher will do once a slot is complete: its checksum, then the generation it
 * covers, two 8-byte writes in that order. */
static void seal(int rank, int slot)
{
    char *file, path[1200];
    ddp_ckpt_t c = read_slot(rank, slot, &file);
    uint64_t sum = ddp_ckpt_slot_sum(&c), generation = c.header->generation;
    assert_int_equal(ddp_ckpt_slot_path(path, sizeof path, ckpt_dir, rank, slot), 0);
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, &sum, 8, offsetof(ddp_ckpt_header_t, checksum)), 8);
    assert_int_equal(pwrite(fd, &generation, 8, offsetof(ddp_ckpt_header_t, checksum_generation)),
                     8);
    close(fd);
    free(file);
}

/* The newest complete slot of `rank` in torch.save's format, at `out`. */
static void export_newest(int rank, const char *out)
{
    ddp_ckpt_header_t h[2];
    uint64_t size;
    char path[1200], *file;
    ddp_ckpt_slots_t slots = {NULL, NULL};
    for (int s = 0; s < 2; s++) {
        assert_int_equal(ddp_ckpt_slot_path(path, sizeof path, ckpt_dir, rank, s), 0);
        if (ddp_ckpt_read_header(path, &h[s], &size, NULL) == 0)
            slots[s] = &h[s];
    }
    int newest = ddp_ckpt_slot_to_load(slots, -1);
    assert_true(newest >= 0);
    ddp_ckpt_t c = read_slot(rank, newest, &file);
    int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    assert_true(fd >= 0);
    ddp_buf_t why = DDP_BUF_INIT;
    if (ddp_torchzip_write_slot(fd, &c, NULL, &why) != 0)
        fail_msg("export: %s", ddp_buf_str(&why));
    ddp_buf_free(&why);
    close(fd);
    free(file);
}

/* The names in the checkpoint directory, sorted, joined by spaces, into `out`. */
static void listing(ddp_buf_t *out)
{
    struct dirent **names;
    int n = scandir(ckpt_dir, &names, NULL, alphasort);
    assert_true(n >= 0);
    for (int i = 0; i < n; i++) {
        if (names[i]->d_name[0] != '.')
            ddp_buf_printf(out, "%s%s", out->len > 0 ? " " : "", names[i]->d_name);
        free(names[i]);
    }
    free(names);
}

static int by_string(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Round trips of a model's and an optimizer's state as rank 1 of 2 (its slots rank1.0 and
 * rank1.1, no other file), the refusals (tests/python/checkpoint_worker.py api), and the
 * newest slot in torch.save's format, which torch.load reads as the state saved. */
static void test_round_trips_and_refusals(void **state)
{
    char *cgroup = th_tmpdir(), pt[1200];
    ddp_buf_t names = DDP_BUF_INIT;
    make_ckpt_dir();
    const char *env[] = {ckpt_var, "RANK=1", "WORLD_SIZE=2", NULL};
    const char *api[] = {"api", cgroup, NULL};
    th_proc_t p;
    run_python(&p, "checkpoint_worker.py", api, env, 300);
    TH_ASSERT(&p, th_status(&p) == 0 && strstr(ddp_buf_str(&p.out), "api ok") != NULL);
    const char *err = ddp_buf_str(&p.err);
    TH_ASSERT(&p, strstr(err, "step 5 not saved: it needs ") != NULL);
    TH_ASSERT(&p, strstr(err, "the memory cgroup ") != NULL);
    TH_ASSERT(&p,
              strstr(err, "bytes free) leaves 1048576; the checkpoint of step 4 stays") != NULL);
    th_cleanup(&p);
    listing(&names);
    assert_string_equal(ddp_buf_str(&names), "rank1.0 rank1.1");
    ddp_buf_free(&names);
    snprintf(pt, sizeof pt, "%s/step5.pt", cgroup);
    export_newest(1, pt);
    const char *load[] = {"load-pt", pt, "5", NULL};
    run_python(&p, "checkpoint_worker.py", load, env, 300);
    TH_ASSERT(&p, th_status(&p) == 0 && strstr(ddp_buf_str(&p.out), "load-pt ok") != NULL);
    th_cleanup(&p);
    free(cgroup);
}

/* Under ddp-launch with torch.distributed up (gloo), without DDP_CHECKPOINT_STEP: rank 0
 * has saved a step more than rank 1 (its save of it died, say); both load the newest step
 * both have, and rank 0's newer one is retired. The DDP_CHECKPOINT_DIR the test set is
 * used, and left where it is. */
static void test_ranks_agree_on_a_step(void **state)
{
    make_ckpt_dir();
    const char *argv[] = {th_launcher(), "--nproc-per-node=2", th_script("checkpoint_worker.py"),
                          "agree", NULL};
    const char *extra[] = {ckpt_var, NULL};
    th_proc_t p;
    th_run(&p, argv, python_env(extra), 300);
    TH_ASSERT(&p, th_status(&p) == 0);
    TH_ASSERT(&p, th_count(ddp_buf_str(&p.out), "agree ok") == 2);
    th_cleanup(&p);
    ddp_buf_t names = DDP_BUF_INIT; /* the user's directory: used, and not removed */
    listing(&names);
    assert_string_equal(ddp_buf_str(&names), "rank0.0 rank0.1 rank1.0 rank1.1");
    ddp_buf_free(&names);
}

/* A save short of room that replicas of other nodes' ranks hold: the oldest that is not its
 * rank's newest is removed, said once, and the save goes on (tests/python/checkpoint_worker.py
 * replicas). */
static void test_replicas_make_room(void **state)
{
    make_ckpt_dir();
    const char *env[] = {ckpt_var, NULL};
    const char *replicas[] = {"replicas", NULL};
    th_proc_t p;
    run_python(&p, "checkpoint_worker.py", replicas, env, 120);
    TH_ASSERT(&p, th_status(&p) == 0 && strstr(ddp_buf_str(&p.out), "replicas ok") != NULL);
    const char *err = ddp_buf_str(&p.err), *said = strstr(err, "1 replicas of other nodes' ranks");
    TH_ASSERT(&p, said != NULL && strstr(said + strlen("1 replicas"),
                                         "replicas of other nodes' ranks") == NULL);
    TH_ASSERT(&p, strstr(err, "step 2 needs ") != NULL);
    th_cleanup(&p);
}

/* Without torch: the state pickled whole, loaded back; in torch.save's format, torch.load
 * reads it. */
static void test_plain_state(void **state)
{
    char pt[1200];
    make_ckpt_dir();
    const char *env[] = {ckpt_var, NULL};
    const char *plain[] = {"plain", NULL};
    th_proc_t p;
    run_python(&p, "checkpoint_worker.py", plain, env, 120);
    TH_ASSERT(&p, th_status(&p) == 0 && strstr(ddp_buf_str(&p.out), "plain ok") != NULL);
    th_cleanup(&p);
    snprintf(pt, sizeof pt, "%s/plain.pt", getenv("TMPDIR"));
    export_newest(0, pt);
    const char *load[] = {"load-pt", pt, "plain", NULL};
    run_python(&p, "checkpoint_worker.py", load, env, 300);
    TH_ASSERT(&p, th_status(&p) == 0 && strstr(ddp_buf_str(&p.out), "load-pt ok") != NULL);
    th_cleanup(&p);
}

/* SIGKILLed while its save of step 3 is being written (a thread of the process kills it as
 * soon as it sees the slot WRITING): that slot stays WRITING, step 2's is whole, and the
 * next process loads step 2. */
static void test_crash_during_save(void **state)
{
    make_ckpt_dir();
    const char *env[] = {ckpt_var, NULL};
    const char *crash[] = {"crash", "64", NULL}, *after[] = {"after-crash", "64", NULL};
    th_proc_t p;
    run_python(&p, "checkpoint_worker.py", crash, env, 300);
    TH_ASSERT(&p, th_status(&p) == 128 + 9);
    th_cleanup(&p);
    int states[3] = {0, 0, 0};
    for (int s = 0; s < 2; s++) {
        ddp_ckpt_header_t h;
        uint64_t size;
        char path[1200];
        assert_int_equal(ddp_ckpt_slot_path(path, sizeof path, ckpt_dir, 0, s), 0);
        assert_int_equal(ddp_ckpt_read_header(path, &h, &size, NULL), 0);
        states[h.state]++;
        if (h.state == DDP_CKPT_COMPLETE)
            assert_int_equal(h.step, 2);
    }
    assert_int_equal(states[DDP_CKPT_WRITING], 1);
    assert_int_equal(states[DDP_CKPT_COMPLETE], 1);
    run_python(&p, "checkpoint_worker.py", after, env, 300);
    TH_ASSERT(&p, th_status(&p) == 0 && strstr(ddp_buf_str(&p.out), "after-crash ok") != NULL);
    th_cleanup(&p);
}

/* Both slots checksummed by this test (C), as the launcher will: Python's sum agrees (step 2
 * loads); a byte of step 2's data changed: refused when asked for, and otherwise step 1
 * loads, said; forged headers refused, said. */
static void test_corrupt_slot_refused(void **state)
{
    make_ckpt_dir();
    const char *env[] = {ckpt_var, NULL};
    const char *steps[] = {"steps", NULL}, *corrupt[] = {"corrupt", NULL};
    th_proc_t p;
    run_python(&p, "checkpoint_worker.py", steps, env, 300);
    TH_ASSERT(&p, th_status(&p) == 0);
    th_cleanup(&p);
    seal(0, 0);
    seal(0, 1);
    run_python(&p, "checkpoint_worker.py", corrupt, env, 300);
    TH_ASSERT(&p, th_status(&p) == 0 && strstr(ddp_buf_str(&p.out), "corrupt ok") != NULL);
    const char *err = ddp_buf_str(&p.err);
    TH_ASSERT(&p, strstr(err, "does not match its checksum (step 2, ") != NULL);
    TH_ASSERT(&p, strstr(err, "; loading the one before") != NULL);
    TH_ASSERT(&p, strstr(err, "/rank0.0: its table at ") != NULL);
    th_cleanup(&p);
}

/* The launcher's side. */

/* The "WORD R S HEX" lines of `text` ("loss", "ref") as "R S HEX" lines, sorted, each once,
 * into `out`; fails where a rank's step has two different losses. */
static void losses(const char *text, const char *word, ddp_buf_t *out)
{
    char **lines = NULL, needle[16];
    size_t n = 0;
    snprintf(needle, sizeof needle, "%s ", word);
    for (const char *p = strstr(text, needle); p != NULL; p = strstr(p + 1, needle)) {
        int rank, step;
        char hex[64];
        if ((p != text && p[-1] != '\n' && p[-1] != ' ' && p[-1] != ']') ||
            sscanf(p + strlen(needle), "%d %d %63s", &rank, &step, hex) != 3)
            continue;
        lines = realloc(lines, (n + 1) * sizeof *lines);
        assert_non_null(lines);
        assert_true(asprintf(&lines[n++], "%d %04d %s", rank, step, hex) > 0);
    }
    qsort(lines, n, sizeof *lines, by_string);
    for (size_t i = 0; i < n; i++) {
        bool again = i > 0 && strcmp(lines[i], lines[i - 1]) == 0;
        if (i > 0 && !again && strncmp(lines[i], lines[i - 1], 7) == 0)
            fail_msg("two losses of one step: %s, %s", lines[i - 1], lines[i]);
        if (!again)
            ddp_buf_printf(out, "%s\n", lines[i]);
    }
    for (size_t i = 0; i < n; i++)
        free(lines[i]);
    free(lines);
}

/* What rank `rank` said after `word` ("pid", "dir") in `text`, into buf[cap]. */
static const char *said(const char *text, const char *word, int rank, char *buf, size_t cap)
{
    char needle[64];
    snprintf(needle, sizeof needle, "%s %d ", word, rank);
    const char *p = strstr(text, needle);
    assert_non_null(p);
    p += strlen(needle);
    size_t len = strcspn(p, "\r\n");
    assert_true(len > 0 && len < cap);
    memcpy(buf, p, len);
    buf[len] = '\0';
    return buf;
}

/* The entries of /dev/shm whose names begin with `prefix`. */
static int shm_entries(const char *prefix)
{
    DIR *d = opendir("/dev/shm");
    assert_non_null(d);
    int n = 0;
    for (const struct dirent *e; (e = readdir(d)) != NULL;)
        n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
    closedir(d);
    return n;
}

/* The entries of directory `dir` (not . and ..), their names appended to `names` (may be
 * NULL). Not counted: what torch 2.x itself leaves where a worker is killed, a directory
 * holding the template of torch.distributed.nn's remote module (removed at its exit). */
static int entries(const char *dir, ddp_buf_t *names)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    for (const struct dirent *e; (e = readdir(d)) != NULL;) {
        char torch_own[1400];
        snprintf(torch_own, sizeof torch_own, "%s/%s/_remote_module_non_scriptable.py", dir,
                 e->d_name);
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0 ||
            access(torch_own, F_OK) == 0)
            continue;
        n++;
        if (names != NULL)
            ddp_buf_printf(names, " %s", e->d_name);
    }
    closedir(d);
    return n;
}

/* The job's checkpoint directory, from what rank 0 said: on /dev/shm, made by the
 * launcher for run `id`. */
static void launcher_dir(const th_proc_t *p, const char *id, char *dir, size_t cap)
{
    char prefix[256];
    said(ddp_buf_str(&p->out), "dir", 0, dir, cap);
    snprintf(prefix, sizeof prefix, "/dev/shm/ddp-ckpt-%s-", id);
    TH_ASSERT(p, strncmp(dir, prefix, strlen(prefix)) == 0);
}

/* A DDP job (gloo, tests/python/checkpoint_train.py) saving every step in the directory the
 * launcher made: rank 1 SIGKILLs itself once step 37 is saved; both ranks of the restarted
 * attempt (forked from the zygote, or cold) load step 37, the launcher's
 * DDP_CHECKPOINT_STEP, and the losses of the whole run equal bit for bit those of a
 * reference model that trains on the same batches from step 1 in every attempt (an
 * uninterrupted run's). Nothing is left in /dev/shm or TMPDIR. */
static void test_launcher_keeps_checkpoints(void **state)
{
    char id[64], dir[1100], prefix[128], rdzv_id[128];
    ddp_buf_t resumed = DDP_BUF_INIT, reference = DDP_BUF_INIT, left = DDP_BUF_INIT;
    const char *tmp = getenv("TMPDIR");
    int before = entries(tmp, NULL);
    snprintf(id, sizeof id, "ckpttest-%d", (int)getpid());
    snprintf(prefix, sizeof prefix, "ddp-ckpt-%s-", id);
    snprintf(rdzv_id, sizeof rdzv_id, "--rdzv-id=%s", id);
    const char *argv[] = {th_launcher(),
                          "--nproc-per-node=2",
                          rdzv_id,
                          "--max-restarts=1",
                          "--warm-restarts",
                          th_script("checkpoint_train.py"),
                          "40",
                          "0:kill:37",
                          NULL};
    const char *extra[] = {"DDP_CHECKPOINT_DIR", NULL};
    th_proc_t p;
    th_start(&p, argv, python_env(extra));
    TH_ASSERT(&p, th_wait_exit(&p, 300) && th_status(&p) == 0);
    const char *out = ddp_buf_str(&p.out);
    TH_ASSERT(&p, strstr(out, "loaded 0 37 (DDP_CHECKPOINT_STEP=37)") != NULL &&
                      strstr(out, "loaded 1 37 (DDP_CHECKPOINT_STEP=37)") != NULL);
    TH_ASSERT(&p, th_count(out, "done ") == 2);
    launcher_dir(&p, id, dir, sizeof dir);
    losses(out, "loss", &resumed);
    losses(out, "ref", &reference);
    TH_ASSERT(&p, th_count(ddp_buf_str(&reference), "\n") == 80);
    if (strcmp(ddp_buf_str(&resumed), ddp_buf_str(&reference)) != 0) {
        th_dump(&p);
        fail_msg("the losses differ:\n%s\nfrom the reference's:\n%s", ddp_buf_str(&resumed),
                 ddp_buf_str(&reference));
    }
    TH_ASSERT(&p, access(dir, F_OK) != 0 && errno == ENOENT);
    TH_ASSERT(&p, shm_entries(prefix) == 0);
    if (entries(tmp, &left) != before)
        fail_msg("left in TMPDIR:%s", ddp_buf_str(&left));
    th_cleanup(&p);
    ddp_buf_free(&left);
    ddp_buf_free(&resumed);
    ddp_buf_free(&reference);
}

/* What "memcommon RANK ATTEMPT loaded " of the collectives helper was followed by, into
 * buf[cap] up to " pid". */
static const char *memcommon_loaded(const th_proc_t *p, int rank, int attempt, char *buf,
                                    size_t cap)
{
    char needle[64];
    snprintf(needle, sizeof needle, "memcommon %d %d loaded ", rank, attempt);
    const char *at = strstr(ddp_buf_str(&p->out), needle), *end;
    TH_ASSERT(p, at != NULL && (end = strstr(at, " pid ")) != NULL);
    at += strlen(needle);
    snprintf(buf, cap, "%.*s", (int)(end - at), at);
    return buf;
}

/* Waits (a deadline) until the launcher's thread has checksummed slot `slot` of `rank`,
 * complete: the sum it wrote is the slot's. */
static void wait_summed(int rank, int slot)
{
    double deadline = th_now() + 60;
    for (;;) {
        char *file;
        ddp_ckpt_t c = read_slot(rank, slot, &file);
        bool summed = c.header->checksum_generation == c.header->generation;
        uint64_t sum = ddp_ckpt_slot_sum(&c), written = c.header->checksum;
        free(file);
        if (summed) {
            assert_true(written == sum);
            return;
        }
        if (th_now() > deadline)
            fail_msg("the launcher did not checksum rank %d's slot %d", rank, slot);
        (void)poll(NULL, 0, 20);
    }
}

/* Rank 1 paused with steps 5 and 6 saved: every slot checksummed by the launcher in the
 * background, a byte of the data of rank 1's step 6 changed, and rank 1 SIGKILLed. */
static void corrupt_and_kill(th_proc_t *p)
{
    char *file, path[1200], needle[] = "memcommon 1 1 loaded ";
    const char *line = strstr(ddp_buf_str(&p->out), needle), *pid;
    TH_ASSERT(p, line != NULL && (pid = strstr(line, " pid ")) != NULL);
    int slot6 = -1;
    for (int rank = 0; rank < 2; rank++)
        for (int slot = 0; slot < 2; slot++) {
            wait_summed(rank, slot);
            ddp_ckpt_t c = read_slot(rank, slot, &file);
            if (rank == 1 && c.header->step == 6)
                slot6 = slot;
            free(file);
        }
    TH_ASSERT(p, slot6 >= 0);
    ddp_ckpt_t c = read_slot(1, slot6, &file);
    uint64_t at = c.records[0].offset;
    uint8_t byte = (uint8_t)(c.base[at] ^ 0x40);
    free(file);
    assert_int_equal(ddp_ckpt_slot_path(path, sizeof path, ckpt_dir, 1, slot6), 0);
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, &byte, 1, (off_t)at), 1);
    close(fd);
    assert_int_equal(kill((pid_t)atoi(pid + strlen(" pid ")), SIGKILL), 0);
}

/* The step every rank resumes from, the launcher's (libddp workers, the collectives
 * helper's memcommon 5): rank 1 SIGKILLed in the middle of its save of step 5 (rank 0's is
 * complete) -> every rank loads step 4; then, with steps 5 and 6 saved and checksummed by
 * the launcher in the background, a byte of rank 1's step 6 changed before the restart ->
 * said (rank, slot, why), not counted, and every rank loads step 5. The bytes the launcher
 * held are said. */
static void test_launcher_common_step(void **state)
{
    char rdzv_id[64], prefix[128], loaded[128];
    snprintf(rdzv_id, sizeof rdzv_id, "--rdzv-id=ckptstep-%d", (int)getpid());
    snprintf(prefix, sizeof prefix, "/dev/shm/ddp-ckpt-ckptstep-%d-", (int)getpid());
    const char *argv[] = {
        th_launcher(), "--nproc-per-node=2",           rdzv_id,     "--max-restarts=2",
        "--no-python", getenv("DDP_TEST_COLLECTIVES"), "memcommon", "5",
        NULL};
    const char *env[] = {"DDP_CHECKPOINT_DIR", NULL};
    th_proc_t p;
    th_start(&p, argv, env);
    TH_ASSERT(&p, th_wait_output(&p, 1, "memcommon 1 paused", 1, 120) &&
                      th_wait_output(&p, 1, "memcommon 0 paused", 1, 120));
    const char *dir = strstr(ddp_buf_str(&p.out), " dir ");
    TH_ASSERT(&p, dir != NULL && sscanf(dir, " dir %1023s", ckpt_dir) == 1);
    TH_ASSERT(&p, strncmp(ckpt_dir, prefix, strlen(prefix)) == 0);
    corrupt_and_kill(&p);
    TH_ASSERT(&p, th_wait_exit(&p, 120) && th_status(&p) == 0);
    for (int rank = 0; rank < 2; rank++) {
        assert_string_equal(memcommon_loaded(&p, rank, 0, loaded, sizeof loaded),
                            "-1 (DDP_CHECKPOINT_STEP=-)");
        assert_string_equal(memcommon_loaded(&p, rank, 1, loaded, sizeof loaded),
                            "4 (DDP_CHECKPOINT_STEP=4)");
        assert_string_equal(memcommon_loaded(&p, rank, 2, loaded, sizeof loaded),
                            "5 (DDP_CHECKPOINT_STEP=5)");
    }
    const char *err = ddp_buf_str(&p.err);
    TH_ASSERT(&p, strstr(err, "rank 1's slot ") != NULL &&
                      strstr(err, "is not counted: its data does not match its checksum (step "
                                  "6, generation ") != NULL);
    TH_ASSERT(&p, strstr(err, "the workers resume from step 4, the newest every rank") != NULL &&
                      strstr(err, "the workers resume from step 5, the newest every rank") != NULL);
    TH_ASSERT(&p, th_count(err, "is not counted") == 1);
    const char *held = strstr(err, "in-memory checkpoints: the launcher held ");
    TH_ASSERT(&p, held != NULL && strtoull(held + strlen("in-memory checkpoints: the launcher "
                                                         "held "),
                                           NULL, 10) > 0);
    TH_ASSERT(&p, access(ckpt_dir, F_OK) != 0 && errno == ENOENT);
    th_cleanup(&p);
}

/* Slot files the workers could leave to trouble the launcher, next to their real slots
 * (tests/python/checkpoint_worker.py hold, step 1 each): rank 1's slot 1 a symbolic link to
 * a file of the test's, rank 0's slot 1 a complete header of step 2 that says a terabyte in
 * a sparse file. The launcher's checksums say each once and leave them; after rank 1 is SIGKILLed,
 * the restart's reading of the slots says each, counts neither, and both ranks, forked from
 * the zygote (--warm-restarts), load step 1 (DDP_CHECKPOINT_STEP); at the end the link is
 * removed, not what it points to. */
static void test_launcher_refuses_odd_slots(void **state)
{
    char rdzv_id[64], target[1100], path[1200], pid[32];
    snprintf(rdzv_id, sizeof rdzv_id, "--rdzv-id=ckptodd-%d", (int)getpid());
    const char *argv[] = {th_launcher(),
                          "--nproc-per-node=2",
                          rdzv_id,
                          "--max-restarts=1",
                          "--warm-restarts",
                          "--preload=os",
                          th_script("checkpoint_worker.py"),
                          "hold",
                          NULL};
    const char *extra[] = {"DDP_CHECKPOINT_DIR", NULL};
    th_proc_t p;
    th_start(&p, argv, python_env(extra));
    TH_ASSERT(&p, th_wait_output(&p, 1, "held ", 2, 120));
    const char *line = strstr(ddp_buf_str(&p.out), "held 1 ");
    TH_ASSERT(&p, line != NULL && sscanf(line, "held 1 %31s %1023s", pid, ckpt_dir) == 2);
    snprintf(target, sizeof target, "%s/target", getenv("TMPDIR"));
    assert_true(th_touch(target));
    assert_int_equal(ddp_ckpt_slot_path(path, sizeof path, ckpt_dir, 1, 1), 0);
    assert_int_equal(symlink(target, path), 0);
    ddp_ckpt_header_t h;
    uint64_t size;
    assert_int_equal(ddp_ckpt_slot_path(path, sizeof path, ckpt_dir, 0, 0), 0);
    assert_int_equal(ddp_ckpt_read_header(path, &h, &size, NULL), 0);
    h.step = 2; /* newer than the real one: what a load would take, were it not refused */
    h.generation++;
    h.used_bytes = 1ull << 40;
    h.table_offset = h.used_bytes - 64ull * h.records;
    h.checksum_generation = 0;
    assert_int_equal(ddp_ckpt_slot_path(path, sizeof path, ckpt_dir, 0, 1), 0);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, &h, sizeof h, 0), (ssize_t)sizeof h);
    assert_int_equal(ftruncate(fd, (off_t)h.used_bytes), 0);
    close(fd);
    TH_ASSERT(&p,
              th_wait_output(&p, 2, "rank1.1 is not checksummed: it is a symbolic link", 1, 60));
    TH_ASSERT(&p, th_wait_output(&p, 2, "rank0.1 is not checksummed: it says 1099511627776 bytes",
                                 1, 60));
    TH_ASSERT(&p, th_wait_output(&p, 2, "has imported os", 1, 60)); /* the zygote serves */
    assert_int_equal(kill((pid_t)atoi(pid), SIGKILL), 0);
    TH_ASSERT(&p, th_wait_exit(&p, 120) && th_status(&p) == 0);
    const char *out = ddp_buf_str(&p.out), *err = ddp_buf_str(&p.err);
    TH_ASSERT(&p, strstr(err, "2 of 2 workers of attempt 1 forked from the zygote") != NULL);
    TH_ASSERT(&p, strstr(out, "loaded 0 1 (DDP_CHECKPOINT_STEP=1)") != NULL &&
                      strstr(out, "loaded 1 1 (DDP_CHECKPOINT_STEP=1)") != NULL);
    TH_ASSERT(&p, th_count(err, "is not checksummed") == 2);
    TH_ASSERT(&p,
              strstr(err, "rank 1's slot 1 (") != NULL && strstr(err, "rank 0's slot 1 (") != NULL);
    TH_ASSERT(&p, strstr(err, "is not counted: it says 1099511627776 bytes, but the file holds ") !=
                      NULL);
    TH_ASSERT(&p, th_count(err, "is not counted") == 2);
    TH_ASSERT(&p, access(ckpt_dir, F_OK) != 0 && errno == ENOENT && access(target, F_OK) == 0);
    th_cleanup(&p);
}

/* ddp-launch signalled with `sig` while its workers (without torch) hold a checkpoint:
 * the directory is gone once it has exited (SIGTERM, SIGINT: its own end), or once the
 * orphan guard has SIGKILLed the workers and removed it (SIGKILL: a bounded wait). With
 * `disk`, --checkpoint-dir: the temporaries of the launcher's copies cut short (planted,
 * named after its pid) go with it too where it is SIGKILLed (the guard's), a user's file
 * named as another live process's stays. */
static void launcher_signalled(int sig, const char *disk)
{
    char rdzv_id[64], dir[1100], prefix[128], dir_flag[1200], mine[1200], user[1200];
    snprintf(rdzv_id, sizeof rdzv_id, "--rdzv-id=ckptkill-%d", (int)getpid());
    snprintf(prefix, sizeof prefix, "/dev/shm/ddp-ckpt-ckptkill-%d-", (int)getpid());
    snprintf(dir_flag, sizeof dir_flag, "--checkpoint-dir=%s", disk != NULL ? disk : "");
    const char *argv[] = {th_launcher(),
                          "--nproc-per-node=2",
                          rdzv_id,
                          disk != NULL ? dir_flag : th_script("checkpoint_worker.py"),
                          disk != NULL ? th_script("checkpoint_worker.py") : "hold",
                          disk != NULL ? "hold" : NULL,
                          NULL};
    const char *extra[] = {"DDP_CHECKPOINT_DIR", NULL};
    th_proc_t p;
    th_start(&p, argv, python_env(extra));
    TH_ASSERT(&p, th_wait_output(&p, 1, "held ", 2, 120));
    pid_t workers[2];
    for (int r = 0; r < 2; r++) {
        char needle[16];
        int pid = 0;
        snprintf(needle, sizeof needle, "held %d ", r);
        const char *line = strstr(ddp_buf_str(&p.out), needle);
        TH_ASSERT(&p, line != NULL && sscanf(line + strlen(needle), "%d %1023s", &pid, dir) == 2);
        workers[r] = (pid_t)pid;
    }
    TH_ASSERT(&p, strncmp(dir, prefix, strlen(prefix)) == 0 && entries(dir, NULL) == 2);
    for (int i = 0; disk != NULL && i < 2; i++) {
        snprintf(mine, sizeof mine, "%s/.rank%d.%s.%d.tmp", disk, i, i == 0 ? "ckpt" : "pt",
                 (int)p.pid);
        int fd = open(mine, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        assert_true(fd >= 0);
        close(fd);
    }
    snprintf(user, sizeof user, "%s/.rank0.ckpt.%d.tmp", disk != NULL ? disk : "", (int)getpid());
    int fd = disk != NULL ? open(user, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600) : -1;
    if (fd >= 0)
        close(fd);
    assert_int_equal(kill(p.pid, sig), 0);
    TH_ASSERT(&p, th_wait_exit(&p, 60) && th_status(&p) == 128 + sig);
    if (sig != SIGKILL)
        TH_ASSERT(&p, access(dir, F_OK) != 0 && errno == ENOENT);
    for (int r = 0; r < 2; r++)
        TH_ASSERT(&p, th_wait_gone(workers[r], 60));
    /* The guard removes them after its SIGKILLs: looked at until a deadline. */
    double deadline = th_now() + 60;
    while ((access(dir, F_OK) == 0 || (disk != NULL && access(mine, F_OK) == 0)) &&
           th_now() < deadline)
        (void)poll(NULL, 0, 20);
    TH_ASSERT(&p, access(dir, F_OK) != 0 && errno == ENOENT);
    if (disk != NULL) {
        snprintf(mine, sizeof mine, "%s/.rank0.ckpt.%d.tmp", disk, (int)p.pid);
        TH_ASSERT(&p, access(mine, F_OK) != 0 && access(user, F_OK) == 0);
        snprintf(mine, sizeof mine, "%s/.rank1.pt.%d.tmp", disk, (int)p.pid);
        TH_ASSERT(&p, access(mine, F_OK) != 0);
    }
    th_cleanup(&p);
}

static void test_launcher_killed(void **state)
{
    char disk[1100];
    snprintf(disk, sizeof disk, "%s/disk", getenv("TMPDIR"));
    assert_int_equal(mkdir(disk, 0700), 0);
    launcher_signalled(SIGKILL, disk);
}

static void test_launcher_terminated(void **state)
{
    launcher_signalled(SIGTERM, NULL);
    launcher_signalled(SIGINT, NULL);
}

/* ddp-launch --checkpoint-dir=`disk` [`flag`] on checkpoint_worker.py persist DISK N THEN,
 * started; no DDP_CHECKPOINT_DIR of the test's. */
static void start_persisting(th_proc_t *p, const char *disk, const char *flag, const char *n,
                             const char *then)
{
    char dir_flag[1200];
    snprintf(dir_flag, sizeof dir_flag, "--checkpoint-dir=%s", disk);
    const char *argv[] = {th_launcher(),
                          "--nproc-per-node=2",
                          dir_flag,
                          flag,
                          th_script("checkpoint_worker.py"),
                          "persist",
                          disk,
                          n,
                          then,
                          NULL};
    const char *extra[] = {"DDP_CHECKPOINT_DIR", NULL};
    th_start(p, argv, python_env(extra));
}

/* ddp-launch --dry-run --checkpoint-dir=`disk` of two workers for run `id`, with `extra_env`
 * (may be NULL): it exits 0 having made nothing in /dev/shm. */
static void dry_run(th_proc_t *p, const char *disk, const char *id, const char *const *extra_env)
{
    char dir_flag[1200], rdzv_id[128], prefix[160];
    snprintf(dir_flag, sizeof dir_flag, "--checkpoint-dir=%s", disk);
    snprintf(rdzv_id, sizeof rdzv_id, "--rdzv-id=%s", id);
    snprintf(prefix, sizeof prefix, "ddp-ckpt-%s-", id);
    const char *argv[] = {th_launcher(), "--dry-run", "--nproc-per-node=2",
                          dir_flag,      rdzv_id,     th_script("checkpoint_worker.py"),
                          NULL};
    const char *extra[4] = {"DDP_CHECKPOINT_DIR", NULL};
    for (int i = 0; extra_env != NULL && extra_env[i] != NULL && i < 3; i++)
        extra[i] = extra_env[i];
    th_run(p, argv, python_env(extra), 60);
    TH_ASSERT(p, th_status(p) == 0);
    TH_ASSERT(p, shm_entries(prefix) == 0);
}

/* --dry-run shows each worker's DDP_CHECKPOINT_DIR (the launcher's /dev/shm directory's
 * pattern, made by nobody; or the user's own) and, from --checkpoint-dir's copies `disk`
 * holds of step `step` (-1: none), the DDP_CHECKPOINT_STEP a job would start from. */
static void dry_run_shows(const char *disk, int step)
{
    char id[64], var[256], step_var[64];
    th_proc_t p;
    snprintf(id, sizeof id, "ckptdry-%d", (int)getpid());
    snprintf(var, sizeof var, "'DDP_CHECKPOINT_DIR=/dev/shm/ddp-ckpt-%s-<pid>-<random>'", id);
    snprintf(step_var, sizeof step_var, "DDP_CHECKPOINT_STEP=%d\n", step);
    dry_run(&p, disk, id, NULL);
    const char *out = ddp_buf_str(&p.out);
    TH_ASSERT(&p, th_count(out, var) == 2);
    if (step < 0)
        TH_ASSERT(&p, th_count(out, "DDP_CHECKPOINT_STEP=") == 0 &&
                          th_count(out, "has no copy there") == 1);
    else
        TH_ASSERT(&p,
                  th_count(out, step_var) == 2 && th_count(out, "would start from its step") == 2);
    th_cleanup(&p);
    const char *own[] = {"DDP_CHECKPOINT_DIR=/nonexistent/own", NULL};
    dry_run(&p, disk, id, own);
    out = ddp_buf_str(&p.out);
    TH_ASSERT(&p, strstr(out, "DDP_CHECKPOINT_DIR=/nonexistent/own, yours") != NULL &&
                      strstr(out, "DDP_CHECKPOINT_STEP=") == NULL &&
                      strstr(out, "/dev/shm/ddp-ckpt-") == NULL);
    th_cleanup(&p);
}

/* --checkpoint-dir: a job copies each rank's every second save to disk (the workers wait
 * for the copy of step 4) and ends; torch.load reads the copy in torch.save's format; a new
 * job removes the temporary a dead copier left (and not a user's file of a near name) and
 * starts from those copies (step 4, the
 * launcher's DDP_CHECKPOINT_STEP), saves steps 5 and 6 and is stopped (SIGTERM): its
 * newest (6) is copied at the stop; a third job starts from step 6. */
static void test_checkpoint_dir(void **state)
{
    char disk[1100];
    snprintf(disk, sizeof disk, "%s/disk", getenv("TMPDIR"));
    assert_int_equal(mkdir(disk, 0700), 0);
    dry_run_shows(disk, -1);
    th_proc_t p;
    start_persisting(&p, disk, "--checkpoint-persist-every=2", "4", "wait");
    TH_ASSERT(&p, th_wait_exit(&p, 120) && th_status(&p) == 0);
    TH_ASSERT(&p, th_count(ddp_buf_str(&p.out), "(DDP_CHECKPOINT_STEP=-)") == 2);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err),
                         "in-memory checkpoints: rank 1's step 4 copied to ") != NULL);
    th_cleanup(&p);
    char pt[1200];
    snprintf(pt, sizeof pt, "%s/rank1.pt", disk);
    const char *load[] = {"load-pt", pt, "1:4", NULL};
    run_python(&p, "checkpoint_worker.py", load, NULL, 120);
    TH_ASSERT(&p, th_status(&p) == 0 && strstr(ddp_buf_str(&p.out), "load-pt ok") != NULL);
    th_cleanup(&p);
    dry_run_shows(disk, 4);
    char stale[1200], user[1200];
    pid_t dead = fork(); /* a pid no process has: a copier SIGKILLed midway's */
    assert_true(dead >= 0);
    if (dead == 0)
        _exit(0);
    assert_int_equal(waitpid(dead, NULL, 0), dead);
    snprintf(stale, sizeof stale, "%s/.rank1.ckpt.%d.tmp", disk, (int)dead);
    snprintf(user, sizeof user, "%s/.rank1.ckpt.tmp", disk);
    for (int i = 0; i < 2; i++) {
        int fd = open(i == 0 ? stale : user, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        assert_true(fd >= 0 && write(fd, "torn", 4) == 4);
        close(fd);
    }
    start_persisting(&p, disk, "--checkpoint-persist-every=0", "2", "stay");
    TH_ASSERT(&p, th_wait_output(&p, 1, "held ", 2, 120));
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err), "removed what copies cut short left: .rank1.ckpt.") &&
                      access(stale, F_OK) != 0 && access(user, F_OK) == 0);
    const char *out = ddp_buf_str(&p.out);
    TH_ASSERT(&p, strstr(out, "loaded 0 4 (DDP_CHECKPOINT_STEP=4)") != NULL &&
                      strstr(out, "loaded 1 4 (DDP_CHECKPOINT_STEP=4)") != NULL);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err),
                         "in-memory checkpoints: rank 0 starts from its step 4") != NULL);
    assert_int_equal(kill(p.pid, SIGTERM), 0);
    TH_ASSERT(&p, th_wait_exit(&p, 120) && th_status(&p) == 128 + SIGTERM);
    TH_ASSERT(&p, strstr(ddp_buf_str(&p.err),
                         "in-memory checkpoints: rank 0's step 6 copied to ") != NULL);
    th_cleanup(&p);
    start_persisting(&p, disk, "--checkpoint-persist-every=0", "0", "exit");
    TH_ASSERT(&p, th_wait_exit(&p, 120) && th_status(&p) == 0);
    out = ddp_buf_str(&p.out);
    TH_ASSERT(&p, strstr(out, "loaded 0 6 (DDP_CHECKPOINT_STEP=6)") != NULL &&
                      strstr(out, "loaded 1 6 (DDP_CHECKPOINT_STEP=6)") != NULL);
    th_cleanup(&p);
}

/* /dev/shm read-only (a tmpfs mounted so in a mount namespace of the job's own): one
 * warning, and the job runs without DDP_CHECKPOINT_DIR. Skipped where the test cannot make
 * the namespace (not root). */
static void test_no_shm(void **state)
{
    const char *argv[] = {"/usr/bin/unshare",
                          "--mount",
                          "--propagation",
                          "private",
                          "/bin/sh",
                          "-c",
                          "mount -t tmpfs -o ro tmpfs /dev/shm || exit 77; exec \"$@\"",
                          "sh",
                          th_launcher(),
                          "--nproc-per-node=1",
                          "--no-python",
                          "/bin/sh",
                          "-c",
                          "echo \"dir=${DDP_CHECKPOINT_DIR-unset}\"",
                          NULL};
    const char *env[] = {"DDP_CHECKPOINT_DIR", NULL};
    th_proc_t p;
    th_run(&p, argv, env, 60);
    if (th_status(&p) == 77 ||
        (th_status(&p) != 0 && strstr(ddp_buf_str(&p.err), "unshare") != NULL)) {
        printf("skipped: no mount namespace here\n");
        th_cleanup(&p);
        return;
    }
    TH_ASSERT(&p, th_status(&p) == 0 && strstr(ddp_buf_str(&p.out), "dir=unset") != NULL);
    TH_ASSERT(&p, th_count(ddp_buf_str(&p.err), "in-memory checkpoints: unable to create a "
                                                "directory in /dev/shm: ") == 1);
    TH_ASSERT(&p,
              strstr(ddp_buf_str(&p.err), "; the workers' checkpoint saves do nothing") != NULL);
    th_cleanup(&p);
}

int main(int argc, char **argv)
{
    const char *flavour = argc > 1 ? argv[1] : "1.13";
    if (argc > 2) /* meson test checkpoint-1.13 --test-args NAME */
        cmocka_set_test_filter(argv[2]);
    th_torch_prepare(&torch, flavour);
    ckpt_on_shm = strcmp(flavour, "2.6") != 0; /* the trixie root sees the host's /tmp only */
    /* The first three with every flavour; what does not depend on torch's version with 1.13
     * (or "python") only. */
    const struct CMUnitTest tests[] = {
        TH_TEST(test_zip_loaded_by_torch),
        TH_TEST(test_round_trips_and_refusals),
        TH_TEST(test_launcher_keeps_checkpoints),
        TH_TEST(test_plain_state),
        TH_TEST(test_replicas_make_room),
        TH_TEST(test_ranks_agree_on_a_step),
        TH_TEST(test_crash_during_save),
        TH_TEST(test_corrupt_slot_refused),
        TH_TEST(test_launcher_killed),
        TH_TEST(test_launcher_common_step),
        TH_TEST(test_launcher_refuses_odd_slots),
        TH_TEST(test_launcher_terminated),
        TH_TEST(test_checkpoint_dir),
        TH_TEST(test_no_shm),
    };
    size_t n = strcmp(flavour, "2.6") == 0 ? 3 : sizeof tests / sizeof tests[0];
    return _cmocka_run_group_tests(flavour, tests, n, NULL, NULL);
}
