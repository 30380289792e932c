/* In-memory checkpoints: the checksum, a slot's checks and the choice of a slot (see
 * ckpt.h). Pure functions over bytes; what is wrong goes to a `why` buffer. */
#include "ckpt.h"

#include "ddp_errors.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <string.h>

#define K1 0x9E3779B185EBCA87ull
#define K2 0xC2B2AE3D27D4EB4Full

static inline uint64_t mix(uint64_t lane, uint64_t word)
{
    uint64_t a = (lane ^ word) * K1;
    return a ^ (a >> 29);
}

void ddp_ckpt_sum_init(ddp_ckpt_sum_t *sum, uint64_t seed)
{
    for (uint64_t l = 0; l < DDP_CKPT_LANES; l++)
        sum->lane[l] = seed ^ ((l + 1) * K2);
    sum->seed = seed;
    sum->length = 0;
    memset(sum->partial, 0, sizeof sum->partial);
}

/* Whole words from `p` (little-endian) into the lanes from lane `l` on; returns the lane
 * after the last. The loop over a row of lanes is what the compiler keeps in flight. */
static size_t add_words(uint64_t *lane, size_t l, const uint8_t *p, size_t words)
{
    while (words > 0 && l != 0) {
        uint64_t w;
        memcpy(&w, p, 8);
        lane[l] = mix(lane[l], w);
        l = (l + 1) % DDP_CKPT_LANES;
        p += 8;
        words--;
    }
    for (; words >= DDP_CKPT_LANES; words -= DDP_CKPT_LANES, p += 8 * DDP_CKPT_LANES) {
        for (size_t k = 0; k < DDP_CKPT_LANES; k++) {
            uint64_t w;
            memcpy(&w, p + 8 * k, 8);
            lane[k] = mix(lane[k], w);
        }
    }
    for (; words > 0; words--, p += 8, l++) {
        uint64_t w;
        memcpy(&w, p, 8);
        lane[l] = mix(lane[l], w);
    }
    return l;
}

void ddp_ckpt_sum_update(ddp_ckpt_sum_t *sum, const void *data, size_t len)
{
    const uint8_t *p = data;
    size_t have = sum->length % 8;
    size_t l = (size_t)(sum->length / 8) % DDP_CKPT_LANES;
    sum->length += len;
    if (have > 0) {
        size_t take = len < 8 - have ? len : 8 - have;
        memcpy(sum->partial + have, p, take);
        p += take;
        len -= take;
        if (have + take < 8)
            return;
        add_words(sum->lane, l, sum->partial, 1);
        memset(sum->partial, 0, sizeof sum->partial);
        l = (l + 1) % DDP_CKPT_LANES;
    }
    add_words(sum->lane, l, p, len / 8);
    memcpy(sum->partial, p + (len - len % 8), len % 8);
}

uint64_t ddp_ckpt_sum_final(const ddp_ckpt_sum_t *sum)
{
    size_t last = (size_t)(sum->length / 8) % DDP_CKPT_LANES;
    uint64_t h = sum->seed ^ (sum->length * K2);
    for (size_t l = 0; l < DDP_CKPT_LANES; l++) {
        uint64_t lane = sum->lane[l];
        if (l == last && sum->length % 8 != 0) {
            uint64_t w;
            memcpy(&w, sum->partial, 8);
            lane = mix(lane, w);
        }
        h = mix(h, lane);
    }
    /* MurmurHash3's finalizer: every bit of the result depends on every bit of h. */
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    return h ^ (h >> 33);
}

uint64_t ddp_ckpt_checksum(const void *data, size_t len, uint64_t seed)
{
    ddp_ckpt_sum_t sum;
    ddp_ckpt_sum_init(&sum, seed);
    ddp_ckpt_sum_update(&sum, data, len);
    return ddp_ckpt_sum_final(&sum);
}

uint64_t ddp_ckpt_header_seed(const ddp_ckpt_header_t *header)
{
    ddp_ckpt_header_t h = *header;
    h.state = 0;
    h.checksum = 0;
    h.checksum_generation = 0;
    return ddp_ckpt_checksum(&h, sizeof h, 0);
}

uint64_t ddp_ckpt_align(uint64_t offset)
{
    if (offset > UINT64_MAX - (DDP_CKPT_ALIGN - 1))
        return UINT64_MAX;
    return (offset + DDP_CKPT_ALIGN - 1) / DDP_CKPT_ALIGN * DDP_CKPT_ALIGN;
}

static int refuse(ddp_buf_t *why, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int refuse(ddp_buf_t *why, const char *fmt, ...)
{
    if (why != NULL) {
        va_list ap;
        va_start(ap, fmt);
        ddp_buf_vprintf(why, fmt, ap);
        va_end(ap);
    }
    return DDP_EPARSE;
}

/* The fields every header has, whatever its state. */
static int check_identity(const ddp_ckpt_header_t *h, ddp_buf_t *why)
{
    if (memcmp(h->magic, DDP_CKPT_MAGIC, sizeof h->magic) != 0)
        return refuse(why, "it is not a checkpoint slot (no magic " DDP_CKPT_MAGIC ")");
    if (h->version != DDP_CKPT_VERSION)
        return refuse(why, "it is a slot of version %" PRIu32 ", not %d", h->version,
                      DDP_CKPT_VERSION);
    if (h->state > DDP_CKPT_COMPLETE)
        return refuse(why, "its state %" PRIu32 " is none of empty, writing, complete", h->state);
    if (h->generation > DDP_CKPT_MAX_GENERATION)
        return refuse(why, "its generation %" PRIu64 " is out of range", h->generation);
    return 0;
}

int ddp_ckpt_header_check(const ddp_ckpt_header_t *h, uint64_t file_size, ddp_buf_t *why)
{
    int err = check_identity(h, why);
    if (err || h->state == DDP_CKPT_EMPTY)
        return err;
    if (h->generation == 0)
        return refuse(why, "its generation is 0");
    if (h->step < 0 || h->step > DDP_CKPT_MAX_STEP)
        return refuse(why, "its step %" PRId64 " is out of range", h->step);
    if (h->world_size == 0 || h->world_size > DDP_CKPT_MAX_WORLD || h->rank >= h->world_size)
        return refuse(why, "its rank %" PRIu32 " of world size %" PRIu32 " cannot be", h->rank,
                      h->world_size);
    if (h->kind < DDP_CKPT_BUFFERS || h->kind > DDP_CKPT_TORCH)
        return refuse(why, "its kind %" PRIu32 " is unknown", h->kind);
    if (h->state == DDP_CKPT_WRITING)
        return 0; /* the rest is being written */
    if (h->records > DDP_CKPT_MAX_RECORDS)
        return refuse(why, "it says %" PRIu32 " records, over %u", h->records,
                      DDP_CKPT_MAX_RECORDS);
    if (h->table_offset < DDP_CKPT_HEADER_BYTES || h->table_offset % DDP_CKPT_ALIGN != 0 ||
        h->table_offset > h->used_bytes ||
        h->used_bytes - h->table_offset != (uint64_t)h->records * sizeof(ddp_ckpt_record_t))
        return refuse(why,
                      "its table at %" PRIu64 " of %" PRIu32 " records does not end its %" PRIu64
                      " bytes",
                      h->table_offset, h->records, h->used_bytes);
    if (h->used_bytes > file_size)
        return refuse(why, "it says %" PRIu64 " bytes, the file has %" PRIu64, h->used_bytes,
                      file_size);
    return 0;
}

bool ddp_ckpt_name_ok(const char *name)
{
    size_t len = strnlen(name, DDP_CKPT_NAME_BYTES);
    if (len == 0 || len == DDP_CKPT_NAME_BYTES || name[0] == '/')
        return false;
    size_t part = 0; /* where the current '/'-separated part began */
    for (size_t i = 0; i <= len; i++) {
        char c = name[i];
        if (c == '/' || c == '\0') {
            /* A ".." part: a zip of the slot must hold nothing that climbs out of its folder. */
            if (i - part == 2 && name[part] == '.' && name[part + 1] == '.')
                return false;
            part = i + 1;
            continue;
        }
        bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                     c == '.' || c == '_' || c == '-';
        if (!plain)
            return false;
    }
    return true;
}

int ddp_ckpt_parse(const void *data, size_t size, ddp_ckpt_t *out, ddp_buf_t *why)
{
    const ddp_ckpt_header_t *h = data;
    if (size < sizeof *h)
        return refuse(why, "it has %zu bytes, less than a header", size);
    int err = ddp_ckpt_header_check(h, size, why);
    if (err)
        return err;
    if (h->state != DDP_CKPT_COMPLETE)
        return refuse(why, "it is %s",
                      h->state == DDP_CKPT_EMPTY ? "empty"
                                                 : "not complete: being written, or its save died");
    const uint8_t *base = data;
    const ddp_ckpt_record_t *table = (const ddp_ckpt_record_t *)(base + h->table_offset);
    uint64_t end = DDP_CKPT_HEADER_BYTES;
    for (uint32_t i = 0; i < h->records; i++) {
        const ddp_ckpt_record_t *r = &table[i];
        if (!ddp_ckpt_name_ok(r->name))
            return refuse(why, "record %" PRIu32 " has no name or a name that cannot be", i);
        if (r->offset < end || r->offset % DDP_CKPT_ALIGN != 0 || r->offset > h->table_offset ||
            r->size > h->table_offset - r->offset)
            return refuse(why,
                          "record %" PRIu32 " ('%s') at %" PRIu64 ", %" PRIu64
                          " bytes, is not between the previous one and the table",
                          i, r->name, r->offset, r->size);
        end = r->offset + r->size;
    }
    out->header = h;
    out->records = table;
    out->base = base;
    return 0;
}

const ddp_ckpt_record_t *ddp_ckpt_find(const ddp_ckpt_t *ckpt, const char *name)
{
    for (uint32_t i = 0; i < ckpt->header->records; i++)
        if (strncmp(ckpt->records[i].name, name, DDP_CKPT_NAME_BYTES) == 0)
            return &ckpt->records[i];
    return NULL;
}

uint64_t ddp_ckpt_slot_sum(const ddp_ckpt_t *ckpt)
{
    const ddp_ckpt_header_t *h = ckpt->header;
    return ddp_ckpt_checksum(ckpt->base + DDP_CKPT_HEADER_BYTES,
                             h->used_bytes - DDP_CKPT_HEADER_BYTES, ddp_ckpt_header_seed(h));
}

int ddp_ckpt_verify(const ddp_ckpt_t *ckpt, bool *verified, ddp_buf_t *why)
{
    const ddp_ckpt_header_t *h = ckpt->header;
    if (verified != NULL)
        *verified = false;
    if (h->checksum_generation != h->generation)
        return 0;
    uint64_t sum = ddp_ckpt_slot_sum(ckpt);
    if (sum != h->checksum)
        return refuse(why,
                      "its data does not match its checksum (step %" PRId64 ", %" PRIu64
                      " bytes): torn or corrupted",
                      h->step, h->used_bytes);
    if (verified != NULL)
        *verified = true;
    return 0;
}

int ddp_ckpt_slot_to_write(const ddp_ckpt_slots_t slots, uint64_t *generation)
{
    uint64_t most = 0;
    int newest = -1;
    for (int s = 0; s < 2; s++) {
        const ddp_ckpt_header_t *h = slots[s];
        if (h == NULL)
            continue;
        if (h->generation > most)
            most = h->generation;
        if (h->state == DDP_CKPT_COMPLETE &&
            (newest < 0 || h->generation > slots[newest]->generation))
            newest = s;
    }
    *generation = most + 1;
    return newest == 0 ? 1 : 0;
}

int ddp_ckpt_slot_to_load(const ddp_ckpt_slots_t slots, int64_t step)
{
    int best = -ENOENT;
    for (int s = 0; s < 2; s++) {
        const ddp_ckpt_header_t *h = slots[s];
        if (h == NULL || h->state != DDP_CKPT_COMPLETE || (step >= 0 && h->step != step))
            continue;
        if (best < 0 || h->generation > slots[best]->generation)
            best = s;
    }
    return best;
}
