/* In-memory checkpoints (ddp_checkpoint_save, ddp_checkpoint_load): a rank's named host
 * buffers in its two slot files in DDP_CHECKPOINT_DIR, in common/ckpt.h's format and
 * contract (the layout, the double buffering, the step the launcher names).
 *
 * A save writes the slot the double buffering gives it, mapped once and kept mapped (after
 * the first two saves no page is faulted in again: a save is the buffers' memcpy), WRITING
 * first and COMPLETE last; it takes no collective. A load reads the slot of
 * DDP_CHECKPOINT_STEP, or without it, in a job of several ranks, the newest step every rank
 * holds, agreed through the store: each rank adds 1 under a key of each step it can load,
 * a barrier, then the newest of its own steps that every rank counted (two keys a rank, the
 * same answer on every rank). Runs on the thread that owns the context. */
#include "internal.h"

#include "ckpt_file.h"
#include "env.h"
#include "error.h"
#include "io.h"
#include "parse.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define GROW (2u << 20) /* slot files grow in steps of 2 MiB */

/* A slot file mapped for saves, kept between them. */
typedef struct {
    int fd;
    uint8_t *addr;
    size_t size;
    char path[PATH_MAX];
} slot_map_t;

struct ddp_checkpoint_maps_s {
    slot_map_t slot[2];
};

static void unmap(slot_map_t *m)
{
    if (m->addr != NULL)
        munmap(m->addr, m->size);
    if (m->fd >= 0)
        close(m->fd);
    m->addr = NULL;
    m->size = 0;
    m->fd = -1;
    m->path[0] = '\0';
}

void ddp_checkpoint_release(ddp_t *ddp)
{
    if (ddp->checkpoint_maps == NULL)
        return;
    for (int s = 0; s < 2; s++)
        unmap(&ddp->checkpoint_maps->slot[s]);
    free(ddp->checkpoint_maps);
    ddp->checkpoint_maps = NULL;
}

/* DDP_CHECKPOINT_DIR, or NULL outside ddp-launch. */
static const char *checkpoint_dir(void)
{
    const char *dir = getenv(ddp_env_name(DDP_ENV_DDP_CHECKPOINT_DIR));
    return dir != NULL && *dir != '\0' ? dir : NULL;
}

/* Both slots' headers: slots[s] NULL where there is none or it is no slot's. */
static void read_slots(const char *dir, int rank, ddp_ckpt_header_t h[2], ddp_ckpt_slots_t slots)
{
    for (int s = 0; s < 2; s++) {
        char path[PATH_MAX];
        uint64_t size;
        slots[s] = ddp_ckpt_slot_path(path, sizeof path, dir, rank, s) == 0 &&
                           ddp_ckpt_read_header(path, &h[s], &size, NULL) == 0
                       ? &h[s]
                       : NULL;
    }
}

/* The buffers a caller passed: named as records may be, each name once, memory where the
 * size needs it, host memory (a device pointer is the caller's to copy first). */
static int check_buffers(ddp_t *ddp, const char *what, const ddp_checkpoint_buffer_t *buffers,
                         size_t n)
{
    if (n > 0 && buffers == NULL)
        return ddp_fail(ddp, DDP_EUSAGE, "%s: no buffers for %zu", what, n);
    if (n > DDP_CKPT_MAX_RECORDS)
        return ddp_fail(ddp, DDP_EUSAGE, "%s: %zu buffers, over %u", what, n, DDP_CKPT_MAX_RECORDS);
    for (size_t i = 0; i < n; i++) {
        const ddp_checkpoint_buffer_t *b = &buffers[i];
        if (b->name == NULL || !ddp_ckpt_name_ok(b->name))
            return ddp_fail(ddp, DDP_EUSAGE,
                            "%s: buffer %zu's name '%s' is not 1 to 47 of [A-Za-z0-9._-/]", what, i,
                            b->name ? b->name : "(null)");
        if (b->data == NULL && b->size > 0)
            return ddp_fail(ddp, DDP_EUSAGE, "%s: buffer '%s' has no memory", what, b->name);
#if DDP_HAVE_NCCL
        if (ddp->backend != &ddp_cpu_backend && ddp_nccl_is_device_memory(ddp, b->data))
            return ddp_fail(ddp, DDP_EUSAGE,
                            "%s: buffer '%s' is device memory: copy it to the host first", what,
                            b->name);
#endif
        for (size_t j = 0; j < i; j++)
            if (strcmp(buffers[j].name, b->name) == 0)
                return ddp_fail(ddp, DDP_EUSAGE, "%s: two buffers are named '%s'", what, b->name);
    }
    return 0;
}

/* The records' offsets (into `offsets`, n of them) and where the table starts. The bytes
 * the slot uses. */
static uint64_t layout(const ddp_checkpoint_buffer_t *buffers, size_t n, uint64_t *offsets,
                       uint64_t *table_offset)
{
    uint64_t at = DDP_CKPT_HEADER_BYTES;
    for (size_t i = 0; i < n; i++) {
        offsets[i] = ddp_ckpt_align(at);
        at = offsets[i] + buffers[i].size;
    }
    *table_offset = ddp_ckpt_align(at);
    return *table_offset + n * sizeof(ddp_ckpt_record_t);
}

/* Short of `more` bytes for the save of `step`: the replicas of other nodes' ranks the
 * launcher keeps in `dir` give them (this node's own ranks come first; the oldest go first,
 * the newest of each rank last), said in one line; the asides of drops cut short too. Whether
 * any bytes were removed. */
static bool drop_replicas(ddp_t *ddp, const char *dir, uint64_t more, int64_t step)
{
    int count = 0;
    int64_t freed = ddp_ckpt_drop_replicas(dir, more, &count);
    if (count > 0)
        ddp_log_warn(&ddp->log,
                     "checkpoint_save: step %" PRId64 " needs %" PRIu64 " more bytes in %s: %d "
                     "replicas of other nodes' ranks (%" PRId64 " bytes) removed for it, this "
                     "node's own ranks' checkpoints come first",
                     step, more, dir, count, freed);
    return freed > 0;
}

/* Slot `s` of the save mapped (kept from the last save where it can be), its file at least
 * `used` bytes long, where the directory has room for what the save adds to it (else
 * -ENOSPC, said: the previous checkpoint stays). */
static int map_for_save(ddp_t *ddp, const char *dir, const char *path, int s, uint64_t used,
                        int64_t step)
{
    if (ddp->checkpoint_maps == NULL) {
        if ((ddp->checkpoint_maps = calloc(1, sizeof *ddp->checkpoint_maps)) == NULL)
            return ddp_fail(ddp, -ENOMEM, "checkpoint_save: out of memory");
        for (int k = 0; k < 2; k++)
            ddp->checkpoint_maps->slot[k].fd = -1;
    }
    slot_map_t *m = &ddp->checkpoint_maps->slot[s];
    if (m->fd >= 0 && strcmp(m->path, path) != 0)
        unmap(m); /* another directory */
    if (m->fd < 0) {
        m->fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0600);
        if (m->fd < 0)
            return ddp_fail(ddp, -errno, "checkpoint_save: unable to open %s: %s", path,
                            strerror(errno));
        snprintf(m->path, sizeof m->path, "%s", path);
    }
    struct stat st;
    if (fstat(m->fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        unmap(m);
        return ddp_fail(ddp, DDP_ENOTFILE, "checkpoint_save: %s is not a regular file", path);
    }
    /* What the save adds: the pages of the file not there yet (a tmpfs file's are charged
     * to the memory cgroup as they are written). */
    uint64_t allocated = (uint64_t)st.st_blocks * 512,
             need = used > allocated ? used - allocated : 0;
    ddp_ckpt_room_t room;
    bool short_of_room = need > 0 &&
                         ddp_ckpt_room(dir, "/sys/fs/cgroup", "/proc/self/cgroup", &room) == 0 &&
                         need > room.bytes;
    if (short_of_room && drop_replicas(ddp, dir, need - room.bytes, step))
        short_of_room = ddp_ckpt_room(dir, "/sys/fs/cgroup", "/proc/self/cgroup", &room) == 0 &&
                        need > room.bytes;
    if (short_of_room)
        return ddp_fail(ddp, -ENOSPC,
                        "checkpoint_save: step %" PRId64 " not saved: it needs %" PRIu64
                        " bytes in %s (%" PRIu64 " more than this slot holds), and %s leaves "
                        "%" PRIu64 "; the previous checkpoint stays",
                        step, used, dir, need, room.limit, room.bytes);
    uint64_t size = (uint64_t)st.st_size;
    if (size < used) {
        size = (used + GROW - 1) / GROW * GROW;
        if (ftruncate(m->fd, (off_t)size) != 0)
            return ddp_fail(ddp, -errno, "checkpoint_save: unable to size %s: %s", path,
                            strerror(errno));
    }
    if (m->addr != NULL && m->size == size)
        return 0;
    if (m->addr != NULL)
        munmap(m->addr, m->size);
    m->addr = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, m->fd, 0);
    if (m->addr == MAP_FAILED) {
        m->addr = NULL;
        m->size = 0;
        return ddp_fail(ddp, -errno, "checkpoint_save: unable to map %s: %s", path,
                        strerror(errno));
    }
    m->size = size;
    return 0;
}

/* Writes the buffers into the mapped slot `m`: WRITING before anything else changes, the
 * records, the table, the header, COMPLETE last. */
static void write_slot(slot_map_t *m, const ddp_ckpt_header_t *header,
                       const ddp_checkpoint_buffer_t *buffers, size_t n, const uint64_t *offsets)
{
    ddp_ckpt_header_t *h = (ddp_ckpt_header_t *)m->addr;
    __atomic_store_n(&h->state, DDP_CKPT_WRITING, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_SEQ_CST); /* a reader sees WRITING before new data */
    *h = *header;
    ddp_ckpt_record_t *table = (ddp_ckpt_record_t *)(m->addr + header->table_offset);
    for (size_t i = 0; i < n; i++) {
        if (buffers[i].size > 0)
            memcpy(m->addr + offsets[i], buffers[i].data, buffers[i].size);
        memset(&table[i], 0, sizeof table[i]);
        memcpy(table[i].name, buffers[i].name, strlen(buffers[i].name));
        table[i].offset = offsets[i];
        table[i].size = buffers[i].size;
    }
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    h->saved_ns = (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
    __atomic_store_n(&h->state, DDP_CKPT_COMPLETE, __ATOMIC_RELEASE);
}

int ddp_checkpoint_save(ddp_t *ddp, int64_t step, const ddp_checkpoint_buffer_t *buffers, size_t n)
{
    DDP_NEED_CONTEXT(ddp, "ddp_checkpoint_save");
    const char *dir = checkpoint_dir();
    if (dir == NULL)
        return 0; /* not run by ddp-launch: nothing to do */
    if (step < 0 || step > DDP_CKPT_MAX_STEP)
        return ddp_fail(ddp, DDP_EUSAGE, "checkpoint_save: step %" PRId64 " is not in 0..2^62",
                        step);
    int err = check_buffers(ddp, "checkpoint_save", buffers, n);
    if (err)
        return err;
    ddp_ckpt_header_t h[2];
    ddp_ckpt_slots_t slots;
    read_slots(dir, ddp->rank, h, slots);
    uint64_t generation;
    int s = ddp_ckpt_slot_to_write(slots, &generation);
    uint64_t *offsets = calloc(n + 1, sizeof *offsets), table_offset;
    if (offsets == NULL)
        return ddp_fail(ddp, -ENOMEM, "checkpoint_save: out of memory");
    uint64_t used = layout(buffers, n, offsets, &table_offset);
    char path[PATH_MAX];
    if ((err = ddp_ckpt_slot_path(path, sizeof path, dir, ddp->rank, s)) != 0)
        err = ddp_fail(ddp, err, "checkpoint_save: %s: the path is too long", dir);
    else
        err = map_for_save(ddp, dir, path, s, used, step);
    if (err == 0) {
        ddp_ckpt_header_t header = {.version = DDP_CKPT_VERSION,
                                    .state = DDP_CKPT_WRITING,
                                    .generation = generation,
                                    .step = step,
                                    .world_size = (uint32_t)ddp->world_size,
                                    .rank = (uint32_t)ddp->rank,
                                    .kind = DDP_CKPT_BUFFERS,
                                    .records = (uint32_t)n,
                                    .table_offset = table_offset,
                                    .used_bytes = used};
        memcpy(header.magic, DDP_CKPT_MAGIC, sizeof header.magic);
        write_slot(&ddp->checkpoint_maps->slot[s], &header, buffers, n, offsets);
    }
    free(offsets);
    return err;
}

/* A slot of this rank mapped read-only and checked whole (a slot that cannot be loaded:
 * DDP_EPARSE; another job's world size: DDP_EUSAGE), said in `why`. */
typedef struct {
    uint8_t *addr;
    size_t size;
    ddp_ckpt_t ckpt;
} loaded_t;

static void unload(loaded_t *l)
{
    if (l->addr != NULL)
        munmap(l->addr, l->size);
    l->addr = NULL;
}

static int map_for_load(const ddp_t *ddp, const char *path, loaded_t *out, ddp_buf_t *why)
{
    int fd = ddp_open_worker_file(path);
    if (fd < 0) {
        ddp_buf_printf(why, "%s: unable to open it: %s", path, ddp_strerror(fd));
        return fd;
    }
    struct stat st;
    int err = fstat(fd, &st) == 0 ? 0 : -errno;
    void *addr = err == 0 && st.st_size > 0
                     ? mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0)
                     : MAP_FAILED;
    if (err == 0 && addr == MAP_FAILED)
        err = st.st_size > 0 ? -errno : DDP_EPARSE;
    close(fd);
    if (err) {
        ddp_buf_printf(why, "%s: unable to map it: %s", path, ddp_strerror(err));
        return err;
    }
    *out = (loaded_t){.addr = addr, .size = (size_t)st.st_size};
    ddp_buf_printf(why, "%s: ", path);
    if ((err = ddp_ckpt_parse(addr, out->size, &out->ckpt, why)) != 0 ||
        (err = ddp_ckpt_verify(&out->ckpt, NULL, why)) != 0) {
        unload(out);
        return err;
    }
    const ddp_ckpt_header_t *h = out->ckpt.header;
    if (h->world_size != (uint32_t)ddp->world_size)
        err = (ddp_buf_printf(why,
                              "it is a checkpoint of a job of world size %" PRIu32
                              "; this one has %d: it cannot be loaded here",
                              h->world_size, ddp->world_size),
               DDP_EUSAGE);
    else if (h->rank != (uint32_t)ddp->rank)
        err = (ddp_buf_printf(why, "it says it is rank %" PRIu32 "'s", h->rank), DDP_EPARSE);
    else if (h->kind != DDP_CKPT_BUFFERS)
        err = (ddp_buf_printf(why, "it is a Python state (ddp_launch.checkpoint), not buffers"),
               DDP_EUSAGE);
    if (err)
        unload(out);
    else
        ddp_buf_clear(why);
    return err;
}

/* The steps this rank can load: each complete slot mapped and checked (l[s].addr NULL for
 * one that cannot be loaded, said in why[s]). */
static void check_slots(const ddp_t *ddp, const char *dir, const ddp_ckpt_slots_t slots,
                        loaded_t l[2], int err[2], ddp_buf_t why[2])
{
    for (int s = 0; s < 2; s++) {
        char path[PATH_MAX];
        l[s].addr = NULL;
        err[s] = -ENOENT;
        if (slots[s] == NULL || slots[s]->state != DDP_CKPT_COMPLETE ||
            ddp_ckpt_slot_path(path, sizeof path, dir, ddp->rank, s) != 0)
            continue;
        err[s] = map_for_load(ddp, path, &l[s], &why[s]);
    }
}

/* The newest step every rank can load (-1: none), through the store: every rank adds 1 under
 * a key of each step it holds, waits for the others (a barrier), and takes the newest of its
 * own that all counted. */
static int agree_step(ddp_t *ddp, const loaded_t l[2], int64_t *out)
{
    char key[128];
    int k = ddp->checkpoints++, err = 0;
    int64_t mine[2] = {-1, -1}, count = 0;
    for (int s = 0; s < 2; s++)
        if (l[s].addr != NULL &&
            (s == 0 || l[0].addr == NULL || l[0].ckpt.header->step != l[s].ckpt.header->step))
            mine[s] = l[s].ckpt.header->step;
    for (int s = 0; s < 2 && err == 0; s++) {
        ddp_key(ddp, key, sizeof key, "mckpt/%d/step/%" PRId64, k, mine[s]);
        if (mine[s] >= 0)
            err = ddp_store_client_add(ddp->store, key, 1, &count);
    }
    if (err == 0 && (err = ddp_barrier(ddp)) != 0)
        return err;
    *out = -1;
    for (int s = 0; s < 2 && err == 0; s++) {
        ddp_key(ddp, key, sizeof key, "mckpt/%d/step/%" PRId64, k, mine[s]);
        if (mine[s] >= 0 && (err = ddp_store_client_add(ddp->store, key, 0, &count)) == 0 &&
            count == ddp->world_size && mine[s] > *out)
            *out = mine[s];
    }
    if (err)
        return ddp_fail(ddp, err, "checkpoint_load: unable to agree on a step: %s",
                        ddp_store_client_error(ddp->store));
    return 0;
}

/* The step to load: DDP_CHECKPOINT_STEP's, else the newest every rank holds (one rank: its
 * newest). -1 for none; or an error, said. */
static int step_to_load(ddp_t *ddp, const loaded_t l[2], int64_t *out)
{
    const char *text = getenv(ddp_env_name(DDP_ENV_DDP_CHECKPOINT_STEP));
    if (text != NULL && *text != '\0') {
        long step;
        if (ddp_parse_long(text, 0, LONG_MAX, &step) != 0)
            return ddp_fail(ddp, DDP_EUSAGE,
                            "checkpoint_load: DDP_CHECKPOINT_STEP=%s is not a step", text);
        *out = step;
        return 0;
    }
    if (ddp->world_size > 1 && ddp->store != NULL)
        return agree_step(ddp, l, out);
    int newest = -1;
    for (int s = 0; s < 2; s++)
        if (l[s].addr != NULL &&
            (newest < 0 || l[s].ckpt.header->generation > l[newest].ckpt.header->generation))
            newest = s;
    *out = newest >= 0 ? l[newest].ckpt.header->step : -1;
    return 0;
}

/* The loaded slot's records into the buffers: every name there, every size the same,
 * checked before the first copy. */
static int copy_out(ddp_t *ddp, const ddp_ckpt_t *c, const ddp_checkpoint_buffer_t *buffers,
                    size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const ddp_ckpt_record_t *r = ddp_ckpt_find(c, buffers[i].name);
        if (r == NULL)
            return ddp_fail(ddp, DDP_EUSAGE,
                            "checkpoint_load: the checkpoint of step %" PRId64 " has no '%s'",
                            c->header->step, buffers[i].name);
        if (r->size != buffers[i].size)
            return ddp_fail(ddp, DDP_EUSAGE,
                            "checkpoint_load: '%s' holds %" PRIu64 " bytes, the buffer %zu",
                            buffers[i].name, r->size, buffers[i].size);
    }
    for (size_t i = 0; i < n; i++) {
        const ddp_ckpt_record_t *r = ddp_ckpt_find(c, buffers[i].name);
        if (r->size > 0)
            memcpy(buffers[i].data, c->base + r->offset, r->size);
    }
    return 0;
}

/* A slot saved after the generation loaded becomes EMPTY (common/ckpt.h). */
static void retire_newer(const ddp_t *ddp, const char *dir, const ddp_ckpt_slots_t slots,
                         uint64_t generation)
{
    for (int s = 0; s < 2; s++) {
        char path[PATH_MAX];
        if (slots[s] == NULL || slots[s]->state != DDP_CKPT_COMPLETE ||
            slots[s]->generation <= generation ||
            ddp_ckpt_slot_path(path, sizeof path, dir, ddp->rank, s) != 0)
            continue;
        int fd = open(path, O_WRONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
        uint32_t empty = DDP_CKPT_EMPTY;
        if (fd >= 0) {
            if (pwrite(fd, &empty, sizeof empty, offsetof(ddp_ckpt_header_t, state)) < 0)
                ddp_log_warn(&ddp->log, "unable to retire %s: %s", path, strerror(errno));
            close(fd);
        }
    }
}

int ddp_checkpoint_load(ddp_t *ddp, int64_t *step, const ddp_checkpoint_buffer_t *buffers, size_t n)
{
    DDP_NEED_CONTEXT(ddp, "ddp_checkpoint_load");
    const char *dir = checkpoint_dir();
    if (dir == NULL) {
        snprintf(ddp->error, sizeof ddp->error, "no DDP_CHECKPOINT_DIR: not run by ddp-launch");
        return -ENOENT;
    }
    int err = step == NULL ? ddp_fail(ddp, DDP_EUSAGE, "checkpoint_load: no step to fill")
                           : check_buffers(ddp, "checkpoint_load", buffers, n);
    if (err)
        return err;
    ddp_ckpt_header_t h[2];
    ddp_ckpt_slots_t slots;
    loaded_t l[2];
    int found[2];
    ddp_buf_t why[2] = {DDP_BUF_INIT, DDP_BUF_INIT};
    read_slots(dir, ddp->rank, h, slots);
    check_slots(ddp, dir, slots, l, found, why);
    int64_t want = -1;
    err = step_to_load(ddp, l, &want);
    int pick = -1;
    for (int s = 0; s < 2 && err == 0; s++)
        if (l[s].addr != NULL && l[s].ckpt.header->step == want &&
            (pick < 0 || l[s].ckpt.header->generation > l[pick].ckpt.header->generation))
            pick = s;
    /* A slot that cannot be loaded is said: with the other one loaded, or with nothing to
     * load (a fresh start, as the other ranks'), or in the error when a step was asked. */
    int bad = -1;
    for (int s = 1; s >= 0; s--)
        if (found[s] != 0 && found[s] != -ENOENT)
            bad = s;
    if (err == 0 && pick < 0 && bad >= 0 && found[bad] == DDP_EUSAGE)
        err = ddp_fail(ddp, DDP_EUSAGE, "checkpoint_load: %s", ddp_buf_str(&why[bad]));
    else if (err == 0 && pick < 0 && want >= 0)
        err = ddp_fail(
            ddp, DDP_EPARSE,
            "checkpoint_load: rank %d has no checkpoint of step %" PRId64 " it can load in %s%s%s",
            ddp->rank, want, dir, bad >= 0 ? "; " : "", bad >= 0 ? ddp_buf_str(&why[bad]) : "");
    for (int s = 0; s < 2 && err == 0; s++)
        if (found[s] != 0 && found[s] != -ENOENT)
            ddp_log_warn(&ddp->log, "rank %d: checkpoint not loaded: %s", ddp->rank,
                         ddp_buf_str(&why[s]));
    if (err == 0 && pick < 0)
        err = (snprintf(ddp->error, sizeof ddp->error, "no checkpoint in %s", dir), -ENOENT);
    if (err == 0 && (err = copy_out(ddp, &l[pick].ckpt, buffers, n)) == 0) {
        *step = l[pick].ckpt.header->step;
        retire_newer(ddp, dir, slots, l[pick].ckpt.header->generation);
    }
    for (int s = 0; s < 2; s++) {
        unload(&l[s]);
        ddp_buf_free(&why[s]);
    }
    return err;
}
