/* Unit tests: in-memory checkpoints' format (common/ckpt.h): the checksum (pinned values,
 * which ddp_launch.checkpoint's Python sum must give too, any split of the data, every bit
 * seen), the reader's bounds on forged headers and tables, the choice of a slot, record
 * names; and common/ckpt_file.h: headers read following no link, the room a save has, a
 * slot's sum read from its file, its size believed, a copy, a directory removed following
 * no link, a dead copier's temporaries removed and nothing else. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "ckpt.h"
#include "ckpt_file.h"
#include "ddp_errors.h"

#include "io.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* The bytes of the pinned vectors: byte i is (i * 131 + 7) & 0xff. */
static uint8_t *pattern(size_t len)
{
    uint8_t *p = malloc(len + 1);
    assert_non_null(p);
    for (size_t i = 0; i < len; i++)
        p[i] = (uint8_t)(i * 131 + 7);
    return p;
}

/* The checksum's definition, pinned: tests/python/checkpoint_format.py holds the same
 * values for the Python sum (a row of 4096 words and more, a partial word, a seed). */
static void test_checksum_pinned(void **state)
{
    uint8_t *p = pattern(100003);
    assert_int_equal(ddp_ckpt_checksum("", 0, 0), 0xe3cb0f2f7effd322ull);
    assert_int_equal(ddp_ckpt_checksum("abc", 3, 0), 0x15dea4d7bb6c09c0ull);
    assert_int_equal(ddp_ckpt_checksum(p, 100003, 0x1234), 0x7474cb9fe311aa93ull);
    free(p);
}

/* The same sum whatever the split of the data into updates. */
static void test_checksum_any_split(void **state)
{
    size_t len = 3 * 8 * DDP_CKPT_LANES + 77;
    uint8_t *p = pattern(len);
    uint64_t whole = ddp_ckpt_checksum(p, len, 42);
    static ddp_ckpt_sum_t sum;
    const size_t steps[] = {1, 3, 7, 8, 13, 4095, 8 * DDP_CKPT_LANES + 5};
    for (size_t k = 0; k < sizeof steps / sizeof steps[0]; k++) {
        ddp_ckpt_sum_init(&sum, 42);
        for (size_t at = 0; at < len; at += steps[k])
            ddp_ckpt_sum_update(&sum, p + at, len - at < steps[k] ? len - at : steps[k]);
        assert_int_equal(ddp_ckpt_sum_final(&sum), whole);
    }
    free(p);
}

/* Every flipped bit, two words swapped, a zero byte more, another seed: another sum. */
static void test_checksum_sees_changes(void **state)
{
    size_t len = 8 * DDP_CKPT_LANES + 24;
    uint8_t *p = pattern(len + 1);
    p[8 * DDP_CKPT_LANES] ^= 0xFF; /* the pattern repeats every 256 bytes */
    uint64_t base = ddp_ckpt_checksum(p, len, 0);
    for (size_t bit = 0; bit < 8 * 64; bit++) {
        size_t at = (bit / 8) * 97 % len;
        p[at] ^= (uint8_t)(1u << (bit % 8));
        assert_true(ddp_ckpt_checksum(p, len, 0) != base);
        p[at] ^= (uint8_t)(1u << (bit % 8));
    }
    uint8_t word[8];
    memcpy(word, p, 8);
    memcpy(p, p + 8 * DDP_CKPT_LANES, 8); /* two words of one lane */
    memcpy(p + 8 * DDP_CKPT_LANES, word, 8);
    assert_true(ddp_ckpt_checksum(p, len, 0) != base);
    memcpy(p + 8 * DDP_CKPT_LANES, p, 8);
    memcpy(p, word, 8);
    assert_int_equal(ddp_ckpt_checksum(p, len, 0), base);
    p[len] = 0;
    assert_true(ddp_ckpt_checksum(p, len + 1, 0) != base);
    assert_true(ddp_ckpt_checksum(p, len, 1) != base);
    free(p);
}

/* A slot as a writer leaves it: records of `sizes` bytes (named r0, r1, ...) filled with
 * their index, the table, a complete header; `size` is the file's length. */
typedef struct {
    uint8_t *data;
    size_t size;
    ddp_ckpt_header_t *h;
    ddp_ckpt_record_t *table;
} slot_t;

static slot_t build(const uint64_t *sizes, uint32_t n)
{
    uint64_t at = DDP_CKPT_HEADER_BYTES;
    for (uint32_t i = 0; i < n; i++)
        at = ddp_ckpt_align(at) + sizes[i];
    uint64_t table = ddp_ckpt_align(at), used = table + 64ull * n;
    slot_t s = {.data = aligned_alloc(64, used + 64), .size = used};
    assert_non_null(s.data);
    memset(s.data, 0xEE, used + 64);
    s.h = (ddp_ckpt_header_t *)s.data;
    s.table = (ddp_ckpt_record_t *)(s.data + table);
    *s.h = (ddp_ckpt_header_t){.version = DDP_CKPT_VERSION,
                               .state = DDP_CKPT_COMPLETE,
                               .generation = 3,
                               .step = 37,
                               .world_size = 4,
                               .rank = 2,
                               .kind = DDP_CKPT_BUFFERS,
                               .records = n,
                               .table_offset = table,
                               .used_bytes = used};
    memcpy(s.h->magic, DDP_CKPT_MAGIC, 8);
    at = DDP_CKPT_HEADER_BYTES;
    for (uint32_t i = 0; i < n; i++) {
        at = ddp_ckpt_align(at);
        memset(&s.table[i], 0, sizeof s.table[i]);
        snprintf(s.table[i].name, sizeof s.table[i].name, "r%u", i);
        s.table[i].offset = at;
        s.table[i].size = sizes[i];
        memset(s.data + at, (int)i, sizes[i]);
        at += sizes[i];
    }
    return s;
}

static void sealed(slot_t *s)
{
    ddp_ckpt_t c;
    assert_int_equal(ddp_ckpt_parse(s->data, s->size, &c, NULL), 0);
    s->h->checksum = ddp_ckpt_slot_sum(&c);
    s->h->checksum_generation = s->h->generation;
}

static void test_parse_good(void **state)
{
    const uint64_t sizes[] = {100, 0, 64, 1};
    slot_t s = build(sizes, 4);
    ddp_ckpt_t c;
    assert_int_equal(ddp_ckpt_parse(s.data, s.size + 64, &c, NULL), 0);
    assert_int_equal(c.header->step, 37);
    const ddp_ckpt_record_t *r = ddp_ckpt_find(&c, "r2");
    assert_non_null(r);
    assert_int_equal(r->size, 64);
    assert_int_equal(c.base[r->offset], 2);
    assert_null(ddp_ckpt_find(&c, "r4"));
    bool verified = true;
    assert_int_equal(ddp_ckpt_verify(&c, &verified, NULL), 0);
    assert_false(verified); /* no checksum yet */
    sealed(&s);
    assert_int_equal(ddp_ckpt_verify(&c, &verified, NULL), 0);
    assert_true(verified);
    free(s.data);
}

/* What a header may not say: each is refused with a reason, none read past the bytes. */
static void test_forged_headers(void **state)
{
    const uint64_t sizes[] = {10, 20};
    struct {
        const char *why; /* a word of the reason */
        size_t field;    /* offsetof the field forged */
        size_t width;
        uint64_t value;
    } cases[] = {
        {"magic", offsetof(ddp_ckpt_header_t, magic), 1, 'X'},
        {"version", offsetof(ddp_ckpt_header_t, version), 4, 2},
        {"state", offsetof(ddp_ckpt_header_t, state), 4, 7},
        {"generation", offsetof(ddp_ckpt_header_t, generation), 8, 0},
        {"generation", offsetof(ddp_ckpt_header_t, generation), 8, UINT64_MAX},
        {"step", offsetof(ddp_ckpt_header_t, step), 8, (uint64_t)-1},
        {"rank", offsetof(ddp_ckpt_header_t, rank), 4, 4},
        {"rank", offsetof(ddp_ckpt_header_t, world_size), 4, 0},
        {"kind", offsetof(ddp_ckpt_header_t, kind), 4, 0},
        {"kind", offsetof(ddp_ckpt_header_t, kind), 4, 9},
        {"records", offsetof(ddp_ckpt_header_t, records), 4, UINT32_MAX},
        {"table", offsetof(ddp_ckpt_header_t, records), 4, 3},
        {"table", offsetof(ddp_ckpt_header_t, table_offset), 8, 200},
        {"table", offsetof(ddp_ckpt_header_t, table_offset), 8, 64},
        {"table", offsetof(ddp_ckpt_header_t, table_offset), 8, UINT64_MAX - 63},
        {"table", offsetof(ddp_ckpt_header_t, used_bytes), 8, 100},
        {"bytes", offsetof(ddp_ckpt_header_t, used_bytes), 8, 0},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        slot_t s = build(sizes, 2);
        if (strcmp(cases[k].why, "bytes") == 0) {
            s.size -= 1; /* the file is shorter than used_bytes */
        } else {
            uint64_t v = cases[k].value;
            memcpy((uint8_t *)s.h + cases[k].field, &v, cases[k].width);
        }
        ddp_buf_t why = DDP_BUF_INIT;
        ddp_ckpt_t c;
        int err = ddp_ckpt_parse(s.data, s.size, &c, &why);
        if (err != DDP_EPARSE || strstr(ddp_buf_str(&why), cases[k].why) == NULL)
            fail_msg("case %zu (%s): %d '%s'", k, cases[k].why, err, ddp_buf_str(&why));
        ddp_buf_free(&why);
        free(s.data);
    }
}

/* Records out of place or badly named; slots not complete; a file shorter than a header. */
static void test_forged_tables(void **state)
{
    const uint64_t sizes[] = {100, 200, 300};
    struct {
        const char *why;
        int record;
        uint64_t offset, size;
        const char *name;
    } cases[] = {
        {"record 1", 1, 128, 200, NULL},              /* overlaps record 0 */
        {"record 1", 1, 260, 200, NULL},              /* not aligned */
        {"record 2", 2, 576, UINT64_MAX - 100, NULL}, /* its end wraps */
        {"record 2", 2, 576, 10000, NULL},            /* into the table */
        {"record 0", 0, 64, 10, NULL},                /* in the header */
        {"record 0", 0, 0, 0, "../etc/passwd"},
        {"record 0", 0, 0, 0, "a b"},
        {"record 0", 0, 0, 0, ""},
        {"record 0", 0, 0, 0, "/abs"},
        {"record 2", 2, 0, 0, "r\n"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        slot_t s = build(sizes, 3);
        ddp_ckpt_record_t *r = &s.table[cases[k].record];
        if (cases[k].name != NULL) {
            memset(r->name, 0, sizeof r->name);
            memcpy(r->name, cases[k].name, strlen(cases[k].name));
        } else {
            r->offset = cases[k].offset;
            r->size = cases[k].size;
        }
        ddp_buf_t why = DDP_BUF_INIT;
        ddp_ckpt_t c;
        int err = ddp_ckpt_parse(s.data, s.size, &c, &why);
        if (err != DDP_EPARSE || strstr(ddp_buf_str(&why), cases[k].why) == NULL)
            fail_msg("case %zu: %d '%s'", k, err, ddp_buf_str(&why));
        ddp_buf_free(&why);
        free(s.data);
    }
    slot_t s = build(sizes, 3);
    memset(s.table[0].name, 'a', sizeof s.table[0].name); /* no NUL */
    ddp_ckpt_t c;
    assert_int_equal(ddp_ckpt_parse(s.data, s.size, &c, NULL), DDP_EPARSE);
    free(s.data);
    s = build(sizes, 3);
    for (uint32_t st = DDP_CKPT_EMPTY; st < DDP_CKPT_COMPLETE; st++) {
        ddp_buf_t why = DDP_BUF_INIT;
        s.h->state = st;
        assert_int_equal(ddp_ckpt_parse(s.data, s.size, &c, &why), DDP_EPARSE);
        assert_non_null(strstr(ddp_buf_str(&why), st == 0 ? "empty" : "not complete"));
        ddp_buf_free(&why);
    }
    assert_int_equal(ddp_ckpt_parse(s.data, 100, &c, NULL), DDP_EPARSE);
    free(s.data);
}

/* A byte of data or a field of the header changed after the checksum: refused. */
static void test_verify_sees_corruption(void **state)
{
    const uint64_t sizes[] = {5000, 70};
    slot_t s = build(sizes, 2);
    sealed(&s);
    ddp_ckpt_t c;
    ddp_buf_t why = DDP_BUF_INIT;
    assert_int_equal(ddp_ckpt_parse(s.data, s.size, &c, NULL), 0);
    s.data[s.table[0].offset + 4999] ^= 0x10;
    assert_int_equal(ddp_ckpt_verify(&c, NULL, &why), DDP_EPARSE);
    assert_non_null(strstr(ddp_buf_str(&why), "checksum"));
    s.data[s.table[0].offset + 4999] ^= 0x10;
    assert_int_equal(ddp_ckpt_verify(&c, NULL, NULL), 0);
    s.h->step = 38;
    assert_int_equal(ddp_ckpt_verify(&c, NULL, NULL), DDP_EPARSE);
    s.h->step = 37;
    s.table[1].name[1] = '9';
    assert_int_equal(ddp_ckpt_verify(&c, NULL, NULL), DDP_EPARSE);
    ddp_buf_free(&why);
    free(s.data);
}

static void test_slot_choice(void **state)
{
    ddp_ckpt_header_t a = {.state = DDP_CKPT_COMPLETE, .generation = 4, .step = 10};
    ddp_ckpt_header_t b = {.state = DDP_CKPT_COMPLETE, .generation = 5, .step = 11};
    ddp_ckpt_header_t w = {.state = DDP_CKPT_WRITING, .generation = 6, .step = 12};
    ddp_ckpt_header_t e = {.state = DDP_CKPT_EMPTY, .generation = 7};
    struct {
        const ddp_ckpt_header_t *s0, *s1;
        int write;
        uint64_t generation;
        int newest, step10, step12;
    } cases[] = {
        {NULL, NULL, 0, 1, -ENOENT, -ENOENT, -ENOENT},
        {&a, NULL, 1, 5, 0, 0, -ENOENT},
        {NULL, &a, 0, 5, 1, 1, -ENOENT},
        {&a, &b, 0, 6, 1, 0, -ENOENT},
        {&b, &a, 1, 6, 0, 1, -ENOENT},
        {&w, &b, 0, 7, 1, -ENOENT, -ENOENT}, /* the save that died is taken again */
        {&b, &w, 1, 7, 0, -ENOENT, -ENOENT},
        {&e, &a, 0, 8, 1, 1, -ENOENT}, /* a retired slot's generation is not used again */
        {&w, &e, 0, 8, -ENOENT, -ENOENT, -ENOENT},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        ddp_ckpt_slots_t slots = {cases[k].s0, cases[k].s1};
        uint64_t generation = 0;
        if (ddp_ckpt_slot_to_write(slots, &generation) != cases[k].write ||
            generation != cases[k].generation ||
            ddp_ckpt_slot_to_load(slots, -1) != cases[k].newest ||
            ddp_ckpt_slot_to_load(slots, 10) != cases[k].step10 ||
            ddp_ckpt_slot_to_load(slots, 12) != cases[k].step12)
            fail_msg("case %zu", k);
    }
    /* Both of one step (saved twice): the newer. */
    ddp_ckpt_header_t c = a;
    c.generation = 9;
    ddp_ckpt_slots_t slots = {&a, &c};
    assert_int_equal(ddp_ckpt_slot_to_load(slots, 10), 1);
}

static void test_names(void **state)
{
    const char *good[] = {"data.pkl", "data/0", ".data/version", "byteorder",
                          "a..b",     "x/..y",  "weights-1_2"};
    const char *bad[] = {
        "",       "/data", "..", "../x", "x/..",
        "x/../y", "a b",   "ü",  "a\\b", "0123456789012345678901234567890123456789012345678"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
        if (!ddp_ckpt_name_ok(good[i]))
            fail_msg("'%s' refused", good[i]);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (ddp_ckpt_name_ok(bad[i]))
            fail_msg("'%s' taken", bad[i]);
    assert_int_equal(ddp_ckpt_align(0), 0);
    assert_int_equal(ddp_ckpt_align(1), 64);
    assert_int_equal(ddp_ckpt_align(128), 128);
    assert_int_equal(ddp_ckpt_align(UINT64_MAX - 3), UINT64_MAX);
}

static char dir[64];

static int setup(void **state)
{
    snprintf(dir, sizeof dir, "/tmp/ddp-test-ckpt-XXXXXX");
    return mkdtemp(dir) == NULL ? -1 : 0;
}

static int teardown(void **state)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd);
}

static void put(const char *path, const void *data, size_t len)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, data, len), (ssize_t)len);
    close(fd);
}

/* A slot's header: read and checked; missing, short, a link or a FIFO refused. */
static void test_read_header(void **state)
{
    char path[128], other[128];
    ddp_ckpt_header_t h;
    uint64_t size;
    const uint64_t sizes[] = {10};
    slot_t s = build(sizes, 1);
    assert_int_equal(ddp_ckpt_slot_path(path, sizeof path, dir, 2, 1), 0);
    assert_non_null(strstr(path, "/rank2.1"));
    assert_int_equal(ddp_ckpt_read_header(path, &h, &size, NULL), -ENOENT);
    put(path, s.data, s.size);
    assert_int_equal(ddp_ckpt_read_header(path, &h, &size, NULL), 0);
    assert_int_equal(h.step, 37);
    assert_int_equal(size, s.size);
    put(path, s.data, 100);
    ddp_buf_t why = DDP_BUF_INIT;
    assert_int_equal(ddp_ckpt_read_header(path, &h, &size, &why), DDP_EPARSE);
    assert_non_null(strstr(ddp_buf_str(&why), "less than a header"));
    ddp_buf_free(&why);
    snprintf(other, sizeof other, "%s/elsewhere", dir);
    put(other, s.data, s.size);
    unlink(path);
    assert_int_equal(symlink(other, path), 0);
    assert_int_equal(ddp_ckpt_read_header(path, &h, &size, NULL), -ELOOP);
    unlink(path);
    assert_int_equal(mkfifo(path, 0600), 0);
    assert_int_equal(ddp_ckpt_read_header(path, &h, &size, NULL), DDP_ENOTFILE);
    char longer[300];
    memset(longer, 'd', sizeof longer - 1);
    longer[sizeof longer - 1] = '\0';
    assert_int_equal(ddp_ckpt_slot_path(path, sizeof path, longer, 0, 0), -ENAMETOOLONG);
    free(s.data);
}

/* A slot's file: its sum as ddp_ckpt_slot_sum of a copy; a sparse file that says more than
 * it holds refused, a whole one taken; a copy to another name, whole, its temporary file
 * gone; a copy whose source was taken by a save meanwhile (its generation changed) left. */
static void test_sum_size_copy(void **state)
{
    char path[128], copy[160];
    const uint64_t sizes[] = {5000, 3 << 20};
    slot_t s = build(sizes, 2);
    sealed(&s);
    ddp_ckpt_t c;
    assert_int_equal(ddp_ckpt_parse(s.data, s.size, &c, NULL), 0);
    snprintf(path, sizeof path, "%s/rank2.0", dir);
    put(path, s.data, s.size);
    int fd = open(path, O_RDONLY);
    assert_true(fd >= 0);
    uint64_t sum = 0;
    atomic_bool cancel = false;
    assert_int_equal(ddp_ckpt_sum_file(fd, s.h, &cancel, &sum, NULL), 0);
    assert_true(sum == ddp_ckpt_slot_sum(&c) && sum == s.h->checksum);
    cancel = true;
    assert_int_equal(ddp_ckpt_sum_file(fd, s.h, &cancel, &sum, NULL), -ECANCELED);
    struct stat st;
    assert_int_equal(fstat(fd, &st), 0);
    assert_int_equal(ddp_ckpt_size_check(s.h, &st, NULL), 0);
    ddp_ckpt_header_t lie = *s.h;
    lie.used_bytes = 1ull << 40;
    ddp_buf_t why = DDP_BUF_INIT;
    assert_int_equal(ddp_ckpt_size_check(&lie, &st, &why), DDP_EPARSE);
    assert_non_null(strstr(ddp_buf_str(&why), "a sparse file"));
    ddp_buf_free(&why);
    assert_int_equal(ddp_ckpt_copy(fd, s.h, dir, "rank2.ckpt", NULL, &why), 0);
    snprintf(copy, sizeof copy, "%s/rank2.ckpt", dir);
    char *back;
    size_t len;
    assert_int_equal(ddp_read_file(copy, 1 << 24, &back, &len), 0);
    assert_int_equal(len, s.size);
    assert_memory_equal(back, s.data, s.size);
    free(back);
    lie = *s.h;
    lie.generation++; /* what the copy was asked for is no longer there */
    assert_int_equal(ddp_ckpt_copy(fd, &lie, dir, "other.ckpt", NULL, &why), -EAGAIN);
    assert_non_null(strstr(ddp_buf_str(&why), "written again meanwhile"));
    snprintf(copy, sizeof copy, "%s/other.ckpt", dir);
    assert_int_equal(access(copy, F_OK), -1);
    DIR *d = opendir(dir);
    for (const struct dirent *e; (e = readdir(d)) != NULL;)
        assert_null(strstr(e->d_name, ".tmp")); /* no temporary file left */
    closedir(d);
    ddp_buf_free(&why);
    close(fd);
    free(s.data);
}

/* A checkpoint directory removed with its files, a link in it removed and not what it
 * points to, an empty directory in it removed; a directory that is a link refused. */
static void test_remove_dir(void **state)
{
    char ckpt[128], path[192], target[128];
    snprintf(ckpt, sizeof ckpt, "%s/ckpt", dir);
    snprintf(target, sizeof target, "%s/target", dir);
    assert_int_equal(mkdir(ckpt, 0700), 0);
    put(target, "keep", 4);
    snprintf(path, sizeof path, "%s/rank0.0", ckpt);
    put(path, "slot", 4);
    snprintf(path, sizeof path, "%s/rank0.1", ckpt);
    assert_int_equal(symlink(target, path), 0);
    snprintf(path, sizeof path, "%s/empty", ckpt);
    assert_int_equal(mkdir(path, 0700), 0);
    snprintf(path, sizeof path, "%s/link", dir);
    assert_int_equal(symlink(ckpt, path), 0);
    int err = ddp_ckpt_remove_dir(path); /* (O_DIRECTORY | O_NOFOLLOW on a link) */
    assert_true(err == -ELOOP || err == -ENOTDIR);
    assert_int_equal(access(ckpt, F_OK), 0);
    assert_int_equal(ddp_ckpt_remove_dir(ckpt), 0);
    assert_int_equal(access(ckpt, F_OK), -1);
    assert_int_equal(access(target, F_OK), 0);
    assert_int_equal(ddp_ckpt_remove_dir(ckpt), -ENOENT);
}

/* A pid that no process has: a child's, reaped. */
static pid_t dead_pid(void)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        _exit(0);
    assert_int_equal(waitpid(pid, NULL, 0), pid);
    return pid;
}

/* A copier's temporaries whose pid is dead are removed (.ckpt's and .pt's); a live one's,
 * this process's, a user's files whose names are near it, a link and a directory of that
 * name are kept. With an owner (the orphan guard's launcher), only its own are removed. */
static void test_remove_stale(void **state)
{
    char path[256], name[128];
    ddp_buf_t removed = DDP_BUF_INIT;
    pid_t dead = dead_pid();
    const char *kept[] = {".rank0.ckpt.tmp",
                          "notes.rank0.ckpt.1.tmp",
                          ".rank0.ckpt.1.tmp.bak",
                          ".rank0.zip.1.tmp",
                          "rank0.ckpt",
                          NULL};
    for (int i = 0; kept[i] != NULL; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, kept[i]);
        put(path, "user", 4);
    }
    snprintf(path, sizeof path, "%s/.rank0.ckpt.%d.tmp", dir, (int)getppid()); /* live */
    put(path, "live", 4);
    snprintf(path, sizeof path, "%s/.rank1.ckpt.%d.tmp", dir, (int)getpid());
    put(path, "mine", 4);
    snprintf(path, sizeof path, "%s/.rank2.ckpt.%d.tmp", dir, (int)dead);
    assert_int_equal(symlink("/nonexistent", path), 0);
    snprintf(path, sizeof path, "%s/.rank3.pt.%d.tmp", dir, (int)dead);
    assert_int_equal(mkdir(path, 0700), 0);
    snprintf(path, sizeof path, "%s/.rank0.ckpt.%d.tmp", dir, (int)dead);
    put(path, "dead", 4);
    snprintf(path, sizeof path, "%s/.rank12.pt.%d.tmp", dir, (int)dead);
    put(path, "dead", 4);
    assert_int_equal(ddp_ckpt_remove_stale(dir, getppid(), NULL), 1); /* the live one, named */
    snprintf(path, sizeof path, "%s/.rank0.ckpt.%d.tmp", dir, (int)getppid());
    assert_int_equal(access(path, F_OK), -1);
    snprintf(path, sizeof path, "%s/.rank12.pt.%d.tmp", dir, (int)dead);
    assert_int_equal(ddp_ckpt_remove_stale(dir, 0, &removed), 2);
    snprintf(name, sizeof name, ".rank0.ckpt.%d.tmp", (int)dead);
    assert_non_null(strstr(ddp_buf_str(&removed), name));
    assert_int_equal(access(path, F_OK), -1);
    for (int i = 0; kept[i] != NULL; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, kept[i]);
        assert_int_equal(access(path, F_OK), 0);
    }
    assert_int_equal(ddp_ckpt_remove_stale(dir, 0, &removed), 0);
    snprintf(path, sizeof path, "%s/nothing", dir);
    assert_int_equal(ddp_ckpt_remove_stale(path, 0, &removed), -ENOENT);
    ddp_buf_free(&removed);
}

static void mkdirs(const char *path)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", path);
    assert_int_equal(system(cmd), 0);
}

static void put_text(const char *dir_path, const char *file, const char *text)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir_path, file);
    put(path, text, strlen(text));
}

/* The room: the file system's free bytes, or a cgroup's headroom (v2, v1), the tightest of
 * the cgroup and those above it, said. */
static void test_room(void **state)
{
    char root[128], proc[128], cg[256];
    ddp_ckpt_room_t room;
    snprintf(proc, sizeof proc, "%s/cgroup", dir);
    snprintf(root, sizeof root, "%s/sys", dir);
    /* No cgroup file: the file system's. */
    assert_int_equal(ddp_ckpt_room(dir, root, proc, &room), 0);
    assert_true(room.bytes > 0);
    assert_non_null(strstr(room.limit, "file system"));
    uint64_t disk = room.bytes;
    /* v2: job.slice limits more than its child (which has none) and the root. */
    put_text(dir, "cgroup", "0::/job.slice/worker\n");
    snprintf(cg, sizeof cg, "%s/job.slice/worker", root);
    mkdirs(cg);
    put_text(cg, "memory.max", "max\n");
    put_text(cg, "memory.current", "1000\n");
    snprintf(cg, sizeof cg, "%s/job.slice", root);
    put_text(cg, "memory.max", "5000\n");
    put_text(cg, "memory.current", "3000\n");
    assert_int_equal(ddp_ckpt_room(dir, root, proc, &room), 0);
    assert_int_equal(room.bytes, disk < 2000 ? disk : 2000);
    assert_non_null(strstr(room.limit, "job.slice (memory.max 5000 bytes, 3000 in use)"));
    /* Over its limit already: no room. */
    put_text(cg, "memory.current", "6000\n");
    assert_int_equal(ddp_ckpt_room(dir, root, proc, &room), 0);
    assert_int_equal(room.bytes, 0);
    /* v1's memory controller wins over the v2 line; its "no limit" is a huge number. */
    put_text(dir, "cgroup", "4:memory:/box\n0::/job.slice/worker\n");
    snprintf(cg, sizeof cg, "%s/memory/box", root);
    mkdirs(cg);
    put_text(cg, "memory.limit_in_bytes", "9223372036854771712\n");
    put_text(cg, "memory.usage_in_bytes", "100\n");
    assert_int_equal(ddp_ckpt_room(dir, root, proc, &room), 0);
    assert_non_null(strstr(room.limit, "file system"));
    put_text(cg, "memory.limit_in_bytes", "1100\n");
    assert_int_equal(ddp_ckpt_room(dir, root, proc, &room), 0);
    assert_int_equal(room.bytes, 1000);
    assert_non_null(strstr(room.limit, "memory.limit_in_bytes"));
    /* A file that holds no number sets no limit. */
    put_text(cg, "memory.limit_in_bytes", "lots\n");
    assert_int_equal(ddp_ckpt_room(dir, root, proc, &room), 0);
    assert_non_null(strstr(room.limit, "file system"));
    assert_int_equal(ddp_ckpt_room("/nonexistent/dir", root, proc, &room), -ENOENT);
}

/* A replica of `s` at DIR/NAME, of `generation`, received at `when` (its mtime). */
static void put_replica(slot_t *s, const char *name, uint64_t generation, time_t when)
{
    char path[128];
    struct timespec times[2] = {{.tv_sec = when}, {.tv_sec = when}};
    snprintf(path, sizeof path, "%s/%s", dir, name);
    s->h->generation = generation;
    put(path, s->data, s->size);
    assert_int_equal(utimensat(AT_FDCWD, path, times, 0), 0);
}

/* The launcher's rename of a newer replica (swap_from, a path) onto the name swap_name of
 * the directory, done by this test's unlinkat or renameat just before they act on that name
 * (once): the moment between ddp_ckpt_drop_replicas' listing and its removal. */
static const char *swap_from, *swap_name;

static void swap_in(int dfd, const char *name)
{
    const char *from = swap_from;
    if (from != NULL && strcmp(name, swap_name) == 0) {
        swap_from = NULL;
        assert_int_equal(syscall(SYS_renameat2, AT_FDCWD, from, dfd, name, 0), 0);
    }
}

int unlinkat(int dfd, const char *name, int flags)
{
    swap_in(dfd, name);
    return (int)syscall(SYS_unlinkat, dfd, name, flags);
}

int renameat(int old_dfd, const char *old, int new_dfd, const char *new)
{
    swap_in(old_dfd, old);
    return (int)syscall(SYS_renameat2, old_dfd, old, new_dfd, new, 0);
}

static bool there(const char *name)
{
    char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return faccessat(AT_FDCWD, path, F_OK, AT_SYMLINK_NOFOLLOW) == 0;
}

/* Room for a save from the replicas: the one that is not its rank's newest first (though
 * received last), then the oldest received; only as many as the room asked for; nothing
 * but replicas (a file with no header, a link, a directory, names near theirs, the node's
 * own slot). */
static void test_drop_replicas(void **state)
{
    const uint64_t sizes[] = {8192};
    slot_t s = build(sizes, 1);
    char path[128], other[128];
    int count = -1;
    put_replica(&s, "replica3.0", 1, 300); /* rank 3's older generation, received last */
    put_replica(&s, "replica3.1", 2, 100); /* rank 3's newest, received first */
    put_replica(&s, "replica5.0", 4, 200);
    const char *kept[] = {"rank3.0",     "replica7.0.bak", "replica3.2",
                          "replica+3.0", "replica3.",      "xreplica3.0"};
    for (size_t i = 0; i < sizeof kept / sizeof kept[0]; i++)
        put_replica(&s, kept[i], 1, 50);
    snprintf(path, sizeof path, "%s/replica6.0", dir);
    put(path, "no header", 9);
    snprintf(path, sizeof path, "%s/replica8.0", dir);
    snprintf(other, sizeof other, "%s/rank3.0", dir);
    assert_int_equal(symlink(other, path), 0);
    snprintf(path, sizeof path, "%s/replica9.1", dir);
    assert_int_equal(mkdir(path, 0700), 0);
    int64_t one = ddp_ckpt_drop_replicas(dir, 1, &count);
    assert_true(one >= (int64_t)s.size && count == 1);
    assert_false(there("replica3.0"));
    assert_true(there("replica3.1") && there("replica5.0"));
    put_replica(&s, "replica3.0", 1, 300);
    assert_int_equal(ddp_ckpt_drop_replicas(dir, (uint64_t)one + 1, &count), 2 * one);
    assert_int_equal(count, 2);
    assert_false(there("replica3.0") || there("replica3.1"));
    assert_true(there("replica5.0"));
    assert_int_equal(ddp_ckpt_drop_replicas(dir, UINT64_MAX, &count), one);
    assert_int_equal(count, 1);
    assert_int_equal(ddp_ckpt_drop_replicas(dir, UINT64_MAX, &count), 0);
    assert_int_equal(count, 0);
    for (size_t i = 0; i < sizeof kept / sizeof kept[0]; i++)
        assert_true(there(kept[i]));
    assert_true(there("replica6.0") && there("replica8.0") && there("replica9.1"));
    snprintf(path, sizeof path, "%s/nothing", dir);
    assert_int_equal(ddp_ckpt_drop_replicas(path, 1, &count), -ENOENT);
    free(s.data);
}

/* A newer replica renamed onto a listed one's name before its removal is kept: only the
 * file listed is removed (here it is already gone, replaced: nothing is counted). */
static void test_drop_keeps_a_replica_renamed_in(void **state)
{
    const uint64_t sizes[] = {8192};
    slot_t s = build(sizes, 1);
    char newer[128], path[128];
    int count = -1;
    ddp_ckpt_header_t h;
    uint64_t size;
    put_replica(&s, "replica3.0", 1, 100);
    put_replica(&s, ".replica3.0.7.incoming", 2, 200);
    snprintf(newer, sizeof newer, "%s/.replica3.0.7.incoming", dir);
    swap_from = newer;
    swap_name = "replica3.0";
    assert_int_equal(ddp_ckpt_drop_replicas(dir, 1, &count), 0);
    assert_true(swap_from == NULL && count == 0);
    snprintf(path, sizeof path, "%s/replica3.0", dir);
    assert_int_equal(ddp_ckpt_read_header(path, &h, &size, NULL), 0);
    assert_int_equal(h.generation, 2);
    DIR *d = opendir(dir);
    assert_non_null(d);
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        if (strstr(e->d_name, ".dropping") != NULL)
            fail_msg("%s left", e->d_name);
    closedir(d);
    free(s.data);
}

/* The aside of a drop whose dropper died between its rename and its unlink is removed by
 * the next drop (it was left for the rest of the job, its room taken); a live dropper's
 * (this process's) is left to it. */
static void test_drop_removes_a_dead_droppers_aside(void **state)
{
    (void)state;
    const uint64_t sizes[] = {8192};
    slot_t s = build(sizes, 1);
    char dead[64], live[64], path[192];
    int count = -1;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        _exit(0);
    assert_int_equal(waitpid(pid, NULL, 0), pid); /* (no process has that pid now) */
    snprintf(dead, sizeof dead, ".replica3.0.%d.dropping", (int)pid);
    snprintf(live, sizeof live, ".replica4.1.%d.dropping", (int)getpid());
    put_replica(&s, dead, 1, 100);
    put_replica(&s, live, 1, 100);
    int64_t freed = ddp_ckpt_drop_replicas(dir, 1, &count);
    assert_true(freed >= 8192);
    assert_int_equal(count, 0);
    snprintf(path, sizeof path, "%s/%s", dir, dead);
    assert_int_equal(access(path, F_OK), -1);
    snprintf(path, sizeof path, "%s/%s", dir, live);
    assert_int_equal(access(path, F_OK), 0);
    assert_int_equal(unlink(path), 0);
    free(s.data);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_checksum_pinned),
        cmocka_unit_test(test_checksum_any_split),
        cmocka_unit_test(test_checksum_sees_changes),
        cmocka_unit_test(test_parse_good),
        cmocka_unit_test(test_forged_headers),
        cmocka_unit_test(test_forged_tables),
        cmocka_unit_test(test_verify_sees_corruption),
        cmocka_unit_test(test_slot_choice),
        cmocka_unit_test(test_names),
        cmocka_unit_test_setup_teardown(test_read_header, setup, teardown),
        cmocka_unit_test_setup_teardown(test_room, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sum_size_copy, setup, teardown),
        cmocka_unit_test_setup_teardown(test_remove_dir, setup, teardown),
        cmocka_unit_test_setup_teardown(test_remove_stale, setup, teardown),
        cmocka_unit_test_setup_teardown(test_drop_replicas, setup, teardown),
        cmocka_unit_test_setup_teardown(test_drop_keeps_a_replica_renamed_in, setup, teardown),
        cmocka_unit_test_setup_teardown(test_drop_removes_a_dead_droppers_aside, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
