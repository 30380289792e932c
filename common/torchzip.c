/* torch.save's file format, written (see torchzip.h). The ZIP layout is APPNOTE 6.3's; the
 * alignment padding is torch's ("FB" extra field, caffe2/serialize/inline_container.cc). */
#include "torchzip.h"

#include "ddp_errors.h"
#include "io.h"

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#define LOCAL_SIG    0x04034b50u
#define CENTRAL_SIG  0x02014b50u
#define END_SIG      0x06054b50u
#define END64_SIG    0x06064b50u
#define LOCATOR_SIG  0x07064b50u
#define ZIP64_ID     0x0001u
#define PAD_ID       0x4246u /* "FB": torch's padding field */
#define DOS_DATE     0x21u   /* 1980-01-01: the same bytes for the same checkpoint */
#define VERSION_20   20u     /* stored entries */
#define VERSION_45   45u     /* ZIP64 */
#define NAME_MAX_ZIP 0xFFFFu
#define U32_FULL     0xFFFFFFFFu
#define U16_FULL     0xFFFFu

/* Little-endian fields appended to a header being assembled. */
typedef struct {
    uint8_t bytes[256];
    size_t len;
} fields_t;

static void put(fields_t *f, uint64_t v, int width)
{
    for (int i = 0; i < width; i++)
        f->bytes[f->len++] = (uint8_t)(v >> (8 * i));
}

/* What the central directory needs of a written entry. */
typedef struct {
    uint64_t offset, size;
    uint32_t crc;
} written_t;

static uint32_t crc_of(const void *data, uint64_t size)
{
    const uint8_t *p = data;
    uLong crc = crc32(0L, Z_NULL, 0);
    while (size > 0) {
        uInt chunk = size > (1u << 30) ? (1u << 30) : (uInt)size;
        crc = crc32(crc, p, chunk);
        p += chunk;
        size -= chunk;
    }
    return (uint32_t)crc;
}

/* The writer's place in the file and where what failed is said. */
typedef struct {
    int fd;
    uint64_t at;
    uint64_t zip64_from;
    const char *archive;
    ddp_buf_t *why;
} zip_t;

static int emit(zip_t *z, const void *data, uint64_t size, const char *what)
{
    const uint8_t *p = data;
    while (size > 0) {
        size_t chunk = size > (1u << 30) ? (1u << 30) : (size_t)size;
        int err = ddp_write_all(z->fd, p, chunk);
        if (err) {
            if (z->why != NULL)
                ddp_buf_printf(z->why, "unable to write %s: %s", what, strerror(-err));
            return err;
        }
        p += chunk;
        size -= chunk;
        z->at += chunk;
    }
    return 0;
}

/* An entry's name in the archive's folder: "<archive>/<name>". */
static int emit_name(zip_t *z, const char *name)
{
    int err = emit(z, z->archive, strlen(z->archive), "a name");
    if (!err)
        err = emit(z, "/", 1, "a name");
    if (!err)
        err = emit(z, name, strlen(name), "a name");
    return err;
}

/* The entry's local header (its ZIP64 sizes where needed, padding to 64 bytes), then its
 * data. */
static int write_entry(zip_t *z, const ddp_torchzip_entry_t *e, size_t name_len, written_t *out)
{
    uint8_t zeds[DDP_CKPT_ALIGN];
    memset(zeds, 'Z', sizeof zeds);
    bool big = e->size >= z->zip64_from;
    fields_t h = {.len = 0};
    out->offset = z->at;
    out->size = e->size;
    out->crc = crc_of(e->data, e->size);
    put(&h, LOCAL_SIG, 4);
    put(&h, big ? VERSION_45 : VERSION_20, 2);
    put(&h, 0, 2); /* flags */
    put(&h, 0, 2); /* stored */
    put(&h, 0, 2); /* time */
    put(&h, DOS_DATE, 2);
    put(&h, out->crc, 4);
    put(&h, big ? U32_FULL : e->size, 4);
    put(&h, big ? U32_FULL : e->size, 4);
    put(&h, name_len, 2);
    uint64_t fixed = z->at + h.len + 2 + name_len + (big ? 20 : 0) + 4;
    uint64_t pad = (DDP_CKPT_ALIGN - fixed % DDP_CKPT_ALIGN) % DDP_CKPT_ALIGN;
    put(&h, (big ? 20 : 0) + 4 + pad, 2);
    int err = emit(z, h.bytes, h.len, "a local header");
    if (!err)
        err = emit_name(z, e->name);
    h.len = 0;
    if (big) {
        put(&h, ZIP64_ID, 2);
        put(&h, 16, 2);
        put(&h, e->size, 8);
        put(&h, e->size, 8);
    }
    put(&h, PAD_ID, 2);
    put(&h, pad, 2);
    if (!err)
        err = emit(z, h.bytes, h.len, "an extra field");
    if (!err)
        err = emit(z, zeds, pad, "padding");
    if (!err)
        err = emit(z, e->data, e->size, e->name);
    return err;
}

/* The entry's central directory record, ZIP64's fields for what does not fit. */
static int write_central(zip_t *z, const ddp_torchzip_entry_t *e, size_t name_len,
                         const written_t *w)
{
    bool big_size = w->size >= z->zip64_from, big_offset = w->offset >= z->zip64_from;
    fields_t h = {.len = 0}, x = {.len = 0};
    if (big_size || big_offset) {
        put(&x, ZIP64_ID, 2);
        put(&x, (big_size ? 16 : 0) + (big_offset ? 8 : 0), 2);
        if (big_size) {
            put(&x, w->size, 8);
            put(&x, w->size, 8);
        }
        if (big_offset)
            put(&x, w->offset, 8);
    }
    put(&h, CENTRAL_SIG, 4);
    put(&h, VERSION_45, 2); /* made by */
    put(&h, x.len > 0 ? VERSION_45 : VERSION_20, 2);
    put(&h, 0, 2);
    put(&h, 0, 2);
    put(&h, 0, 2);
    put(&h, DOS_DATE, 2);
    put(&h, w->crc, 4);
    put(&h, big_size ? U32_FULL : w->size, 4);
    put(&h, big_size ? U32_FULL : w->size, 4);
    put(&h, name_len, 2);
    put(&h, x.len, 2);
    put(&h, 0, 2); /* comment */
    put(&h, 0, 2); /* disk */
    put(&h, 0, 2); /* internal attributes */
    put(&h, 0, 4); /* external attributes */
    put(&h, big_offset ? U32_FULL : w->offset, 4);
    int err = emit(z, h.bytes, h.len, "the central directory");
    if (!err)
        err = emit_name(z, e->name);
    if (!err)
        err = emit(z, x.bytes, x.len, "the central directory");
    return err;
}

/* The end records: ZIP64's record and locator where a count or an offset needs them. */
static int write_end(zip_t *z, uint64_t count, uint64_t cd_offset)
{
    uint64_t cd_size = z->at - cd_offset;
    bool big = count >= U16_FULL || cd_offset >= z->zip64_from || cd_size >= z->zip64_from;
    fields_t h = {.len = 0};
    if (big) {
        uint64_t end64 = z->at;
        put(&h, END64_SIG, 4);
        put(&h, 44, 8); /* the record's size after this field */
        put(&h, VERSION_45, 2);
        put(&h, VERSION_45, 2);
        put(&h, 0, 4);
        put(&h, 0, 4);
        put(&h, count, 8);
        put(&h, count, 8);
        put(&h, cd_size, 8);
        put(&h, cd_offset, 8);
        put(&h, LOCATOR_SIG, 4);
        put(&h, 0, 4);
        put(&h, end64, 8);
        put(&h, 1, 4);
    }
    put(&h, END_SIG, 4);
    put(&h, 0, 2);
    put(&h, 0, 2);
    put(&h, big ? U16_FULL : count, 2);
    put(&h, big ? U16_FULL : count, 2);
    put(&h, big ? U32_FULL : cd_size, 4);
    put(&h, big ? U32_FULL : cd_offset, 4);
    put(&h, 0, 2);
    return emit(z, h.bytes, h.len, "the end of the central directory");
}

int ddp_torchzip_write(int fd, const ddp_torchzip_entry_t *entries, size_t n,
                       const ddp_torchzip_options_t *options, ddp_buf_t *why)
{
    zip_t z = {.fd = fd, .why = why, .archive = "archive", .zip64_from = U32_FULL};
    if (options != NULL && options->archive != NULL)
        z.archive = options->archive;
    if (options != NULL && options->zip64_from > 0 && options->zip64_from < U32_FULL)
        z.zip64_from = options->zip64_from;
    size_t archive_len = strlen(z.archive);
    for (size_t i = 0; i < n; i++) {
        size_t len = strlen(entries[i].name);
        if (len == 0 || archive_len == 0 || archive_len + 1 + len > NAME_MAX_ZIP) {
            if (why != NULL)
                ddp_buf_printf(why, "entry %zu's name '%s' cannot be a ZIP entry's", i,
                               entries[i].name);
            return DDP_EUSAGE;
        }
    }
    written_t *w = calloc(n + 1, sizeof *w);
    if (w == NULL)
        return -ENOMEM;
    int err = 0;
    for (size_t i = 0; i < n && !err; i++)
        err = write_entry(&z, &entries[i], archive_len + 1 + strlen(entries[i].name), &w[i]);
    uint64_t cd_offset = z.at;
    for (size_t i = 0; i < n && !err; i++)
        err = write_central(&z, &entries[i], archive_len + 1 + strlen(entries[i].name), &w[i]);
    if (!err)
        err = write_end(&z, n, cd_offset);
    free(w);
    return err;
}

int ddp_torchzip_write_slot(int fd, const ddp_ckpt_t *ckpt, const ddp_torchzip_options_t *options,
                            ddp_buf_t *why)
{
    const ddp_ckpt_header_t *h = ckpt->header;
    if (h->kind != DDP_CKPT_TORCH && h->kind != DDP_CKPT_PICKLE) {
        if (why != NULL)
            ddp_buf_printf(why, "a checkpoint of libddp's buffers has no torch.save form");
        return DDP_EUSAGE;
    }
    ddp_torchzip_entry_t *e = calloc((size_t)h->records + 1, sizeof *e);
    if (e == NULL)
        return -ENOMEM;
    size_t n = 0;
    for (uint32_t i = 0; i < h->records; i++) {
        const ddp_ckpt_record_t *r = &ckpt->records[i];
        e[n++] = (ddp_torchzip_entry_t){r->name, ckpt->base + r->offset, r->size};
    }
    /* torch's writer adds the file format's version itself; torch.load needs it. */
    if (ddp_ckpt_find(ckpt, "version") == NULL && ddp_ckpt_find(ckpt, ".data/version") == NULL)
        e[n++] = (ddp_torchzip_entry_t){"version", "3\n", 2};
    int err = ddp_torchzip_write(fd, e, n, options, why);
    free(e);
    return err;
}
