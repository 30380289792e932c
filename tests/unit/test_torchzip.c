/* Unit tests: torch.save's format as common/torchzip.h writes it, read back by a ZIP reader
 * of the test's own (APPNOTE's records, checked field by field): every entry's data at a
 * multiple of 64 bytes, its CRC-32, its name in the archive's folder; ZIP64's fields where
 * asked for (forced on small files), the central directory's end; a slot's records with
 * the version record torch.load needs. torch.load itself reads these files in the
 * checkpoint integration tests. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "ckpt.h"
#include "ddp_errors.h"
#include "torchzip.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <zlib.h>

static uint64_t get(const uint8_t *p, int width)
{
    uint64_t v = 0;
    for (int i = 0; i < width; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* An entry as read back. */
typedef struct {
    char name[128];
    uint64_t offset, size; /* of the data */
    bool zip64;            /* the central record had ZIP64 fields */
} entry_t;

/* The file written to `fd`, in memory (caller frees). */
static uint8_t *slurp(int fd, size_t *len)
{
    off_t end = lseek(fd, 0, SEEK_END);
    assert_true(end > 0);
    uint8_t *p = malloc((size_t)end);
    assert_non_null(p);
    assert_int_equal(pread(fd, p, (size_t)end, 0), end);
    *len = (size_t)end;
    return p;
}

/* Reads the ZIP in p[0..len): its entries (up to `cap`) into `out`, checking every local
 * header against its central record and every CRC; *zip64_end whether the end had ZIP64's
 * records. The number of entries. */
static size_t read_zip(const uint8_t *p, size_t len, entry_t *out, size_t cap, bool *zip64_end)
{
    assert_true(len >= 22);
    const uint8_t *end = p + len - 22;
    assert_int_equal(get(end, 4), 0x06054b50);
    uint64_t count = get(end + 10, 2), cd_size = get(end + 12, 4), cd_offset = get(end + 16, 4);
    *zip64_end = count == 0xFFFF;
    if (*zip64_end) {
        const uint8_t *locator = end - 20;
        assert_int_equal(get(locator, 4), 0x07064b50);
        const uint8_t *end64 = p + get(locator + 8, 8);
        assert_int_equal(get(end64, 4), 0x06064b50);
        count = get(end64 + 32, 8);
        cd_size = get(end64 + 40, 8);
        cd_offset = get(end64 + 48, 8);
        assert_int_equal(cd_offset + cd_size, (uint64_t)(end64 - p));
    } else {
        assert_int_equal(cd_offset + cd_size, len - 22);
    }
    assert_true(count <= cap);
    const uint8_t *c = p + cd_offset;
    for (uint64_t i = 0; i < count; i++) {
        entry_t *e = &out[i];
        assert_int_equal(get(c, 4), 0x02014b50);
        assert_int_equal(get(c + 10, 2), 0); /* stored */
        uint32_t crc = (uint32_t)get(c + 16, 4);
        uint64_t size = get(c + 24, 4), offset = get(c + 42, 4);
        size_t name_len = get(c + 28, 2), extra_len = get(c + 30, 2);
        assert_true(name_len < sizeof e->name);
        memcpy(e->name, c + 46, name_len);
        e->name[name_len] = '\0';
        const uint8_t *x = c + 46 + name_len;
        e->zip64 = extra_len > 0;
        if (e->zip64) {
            assert_int_equal(get(x, 2), 1);
            const uint8_t *f = x + 4;
            if (size == 0xFFFFFFFF) {
                size = get(f, 8);
                assert_int_equal(get(f + 8, 8), size);
                f += 16;
            }
            if (offset == 0xFFFFFFFF)
                offset = get(f, 8);
        }
        const uint8_t *local = p + offset;
        assert_int_equal(get(local, 4), 0x04034b50);
        assert_int_equal(get(local + 14, 4), crc);
        assert_int_equal(get(local + 26, 2), name_len);
        assert_memory_equal(local + 30, e->name, name_len);
        e->offset = offset + 30 + name_len + get(local + 28, 2);
        e->size = size;
        assert_int_equal(e->offset % 64, 0);
        assert_true(e->offset + size <= cd_offset);
        assert_int_equal(crc32(crc32(0L, Z_NULL, 0), p + e->offset, (uInt)size), crc);
        c += 46 + name_len + extra_len;
    }
    return count;
}

/* Writes `in` (n entries), or the slot `slot` where it is not NULL, and reads the file back:
 * its bytes (caller frees), its entries into out[cap], their number in *count. */
static uint8_t *write_and_read(const ddp_torchzip_entry_t *in, size_t n, const ddp_ckpt_t *slot,
                               const ddp_torchzip_options_t *options, entry_t *out, size_t cap,
                               size_t *count, bool *zip64_end)
{
    int fd = memfd_create("torchzip", MFD_CLOEXEC);
    assert_true(fd >= 0);
    if (slot != NULL)
        assert_int_equal(ddp_torchzip_write_slot(fd, slot, options, NULL), 0);
    else
        assert_int_equal(ddp_torchzip_write(fd, in, n, options, NULL), 0);
    size_t len;
    uint8_t *p = slurp(fd, &len);
    close(fd);
    *count = read_zip(p, len, out, cap, zip64_end);
    return p;
}

static void test_entries_read_back(void **state)
{
    char big[5000];
    for (size_t i = 0; i < sizeof big; i++)
        big[i] = (char)(i * 7);
    const ddp_torchzip_entry_t in[] = {
        {"data.pkl", "\x80\x02}q\x00.", 7},
        {"data/0", big, sizeof big},
        {"data/1", "", 0},
        {"version", "3\n", 2},
    };
    entry_t out[8];
    size_t count;
    bool zip64_end;
    uint8_t *p = write_and_read(in, 4, NULL, NULL, out, 8, &count, &zip64_end);
    assert_int_equal(count, 4);
    assert_false(zip64_end);
    for (int i = 0; i < 4; i++) {
        char want[64];
        snprintf(want, sizeof want, "archive/%s", in[i].name);
        assert_string_equal(out[i].name, want);
        assert_int_equal(out[i].size, in[i].size);
        assert_memory_equal(p + out[i].offset, in[i].data, in[i].size);
        assert_false(out[i].zip64);
    }
    free(p);
}

/* ZIP64 forced from 1000 bytes: the large entry's sizes, the offsets past it and the end
 * take ZIP64's fields; the data is where the records say. */
static void test_zip64_fields(void **state)
{
    static char data[3000];
    memset(data, 'q', sizeof data);
    const ddp_torchzip_entry_t in[] = {
        {"data.pkl", "x", 1},
        {"data/0", data, sizeof data},
        {"data/1", data, 10},
    };
    const ddp_torchzip_options_t options = {.archive = "fm", .zip64_from = 1000};
    entry_t out[4];
    size_t count;
    bool zip64_end;
    uint8_t *p = write_and_read(in, 3, NULL, &options, out, 4, &count, &zip64_end);
    assert_int_equal(count, 3);
    assert_true(zip64_end);
    assert_string_equal(out[1].name, "fm/data/0");
    assert_false(out[0].zip64); /* small, at 0 */
    assert_true(out[1].zip64);  /* 3000 bytes */
    assert_true(out[2].zip64);  /* at an offset past 1000 */
    assert_int_equal(out[1].size, 3000);
    assert_memory_equal(p + out[2].offset, data, 10);
    free(p);
}

/* 70000 entries: more than ZIP's 16-bit count, so the end is ZIP64's. */
static void test_many_entries(void **state)
{
    size_t n = 70000;
    ddp_torchzip_entry_t *in = calloc(n, sizeof *in);
    char(*names)[16] = calloc(n, sizeof *names);
    entry_t *out = calloc(n, sizeof *out);
    assert_true(in != NULL && names != NULL && out != NULL);
    for (size_t i = 0; i < n; i++) {
        snprintf(names[i], sizeof names[i], "data/%zu", i);
        in[i] = (ddp_torchzip_entry_t){names[i], "ab", 2};
    }
    size_t count;
    bool zip64_end;
    uint8_t *p = write_and_read(in, n, NULL, NULL, out, n, &count, &zip64_end);
    assert_int_equal(count, n);
    assert_true(zip64_end);
    assert_string_equal(out[n - 1].name, "archive/data/69999");
    free(p);
    free(in);
    free(names);
    free(out);
}

static void test_refusals(void **state)
{
    const ddp_torchzip_entry_t empty[] = {{"", "", 0}};
    ddp_buf_t why = DDP_BUF_INIT;
    assert_int_equal(ddp_torchzip_write(-1, empty, 1, NULL, &why), DDP_EUSAGE);
    assert_non_null(strstr(ddp_buf_str(&why), "cannot be a ZIP entry's"));
    ddp_buf_free(&why);
    /* A descriptor that cannot be written: the error, said. */
    const ddp_torchzip_entry_t one[] = {{"version", "3\n", 2}};
    assert_int_equal(ddp_torchzip_write(-1, one, 1, NULL, &why), -EBADF);
    assert_non_null(strstr(ddp_buf_str(&why), "unable to write"));
    ddp_buf_free(&why);
}

/* A slot of torch's records in a ZIP: its records in order, and a version record; a slot of
 * libddp's buffers is refused. */
static void test_slot(void **state)
{
    static uint8_t file[1024] __attribute__((aligned(64)));
    ddp_ckpt_header_t *h = (ddp_ckpt_header_t *)file;
    ddp_ckpt_record_t *table = (ddp_ckpt_record_t *)(file + 256);
    *h = (ddp_ckpt_header_t){.version = DDP_CKPT_VERSION,
                             .state = DDP_CKPT_COMPLETE,
                             .generation = 1,
                             .step = 5,
                             .world_size = 1,
                             .kind = DDP_CKPT_TORCH,
                             .records = 2,
                             .table_offset = 256,
                             .used_bytes = 384};
    memcpy(h->magic, DDP_CKPT_MAGIC, 8);
    table[0] = (ddp_ckpt_record_t){.name = "data.pkl", .offset = 128, .size = 5};
    table[1] = (ddp_ckpt_record_t){.name = "data/0", .offset = 192, .size = 8};
    memcpy(file + 128, "pickl", 5);
    memcpy(file + 192, "12345678", 8);
    ddp_ckpt_t c;
    assert_int_equal(ddp_ckpt_parse(file, sizeof file, &c, NULL), 0);
    entry_t out[4];
    size_t count;
    bool zip64_end;
    uint8_t *p = write_and_read(NULL, 0, &c, NULL, out, 4, &count, &zip64_end);
    assert_int_equal(count, 3);
    assert_string_equal(out[0].name, "archive/data.pkl");
    assert_string_equal(out[1].name, "archive/data/0");
    assert_memory_equal(p + out[1].offset, "12345678", 8);
    assert_string_equal(out[2].name, "archive/version");
    assert_memory_equal(p + out[2].offset, "3\n", 2);
    free(p);
    h->kind = DDP_CKPT_BUFFERS;
    assert_int_equal(ddp_torchzip_write_slot(-1, &c, NULL, NULL), DDP_EUSAGE);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_entries_read_back),
        cmocka_unit_test(test_zip64_fields),
        cmocka_unit_test(test_many_entries),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_slot),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
