/* Shared-memory links of the CPU backend (see shm.h).
 *
 * A ring is a single-producer single-consumer byte stream: the writer copies, then
 * publishes `head` with release order; the reader reads `head` with acquire order,
 * uses the bytes, then publishes `tail` the same way. Each side keeps the other's
 * position as it last read it and reads it again only when that view is used up (the
 * writer: too little room; the reader: nothing left to read), so a position's cache line
 * crosses between the cores when it must, not at every write and read. Waking is by
 * doorbell: a sleeper counts itself in `sleepers`, reads `bell`, rechecks what it waits
 * for, and futex-waits on `bell` with the value read; a ringer publishes, bumps `bell`
 * and wakes only if someone sleeps (all sequentially consistent). Either the ringer sees
 * the count and wakes, or its bump came before the sleeper's read and the recheck sees
 * what it published: no lost wake-up. */
#include "shm.h"

#include "error.h"
#include "shm_name.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define SHM_MAGIC  0x4d48535250444444ull /* "DDDPRSHM" */
#define SHM_HEADER ((size_t)4096)

struct ddp_shm_header_s {
    uint64_t magic;
    uint64_t nonce[2];
    uint64_t size;       /* of the ring, */
    uint64_t board_size; /* and of the board behind it */
    /* Each on its own cache line: the writer, the reader and the ringers do not share. */
    _Alignas(64) _Atomic uint64_t head; /* bytes written, ever */
    _Alignas(64) _Atomic uint64_t tail; /* bytes consumed, ever */
    _Alignas(64) ddp_shm_bell_t door;
    /* Private to one side each, kept here so both sides of a link agree on alignment. */
    _Alignas(64) uint64_t write_pos; /* the writer's copy of head, */
    uint64_t tail_seen;              /* and the tail it last read */
    _Alignas(64) uint64_t read_pos;  /* the reader's copy of tail, */
    uint64_t head_seen;              /* and the head it last read */
};

_Static_assert(sizeof(ddp_shm_header_t) <= SHM_HEADER, "the header fits its page");

static uint64_t random64(void)
{
    uint64_t v = 0;
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        if (read(fd, &v, sizeof v) != (ssize_t)sizeof v)
            v = 0;
        close(fd);
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return v ^ ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)getpid();
}

/* Where the board begins: the first page behind the ring. */
static size_t board_offset(size_t ring_size)
{
    return SHM_HEADER + ((ring_size + SHM_HEADER - 1) / SHM_HEADER) * SHM_HEADER;
}

/* The bytes of a segment with this ring and board. */
static size_t segment_bytes(size_t ring_size, size_t board_size)
{
    return board_size > 0 ? board_offset(ring_size) + board_size : SHM_HEADER + ring_size;
}

/* The ring's and the board's sizes, and where the board is, as the header says. */
static void place(ddp_shm_seg_t *seg)
{
    const ddp_shm_header_t *h = seg->header;
    seg->size = h->size;
    seg->board_size = h->board_size;
    seg->board = h->board_size > 0 ? (uint8_t *)seg->header + board_offset(h->size) : NULL;
}

static int map(ddp_shm_seg_t *seg, int fd, size_t mapped)
{
    void *p = mmap(NULL, mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED)
        return -errno;
    seg->header = p;
    seg->ring = (uint8_t *)p + SHM_HEADER;
    seg->mapped = mapped;
    return 0;
}

int ddp_shm_create(ddp_shm_seg_t *seg, const char *tag, size_t ring_size, size_t board_size,
                   char *name, size_t name_cap, uint64_t nonce[2])
{
    char path[128];
    int fd = -1, err;
    memset(seg, 0, sizeof *seg);
    for (int tries = 0; fd < 0 && tries < 8; tries++) {
        int n = snprintf(path, sizeof path, "/" DDP_SHM_PID_PREFIX, (int)getpid());
        snprintf(path + n, sizeof path - (size_t)n, "%s-%016llx", tag,
                 (unsigned long long)random64());
        fd = shm_open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd < 0 && errno != EEXIST)
            return -errno;
    }
    if (fd < 0)
        return -EEXIST;
    size_t mapped = segment_bytes(ring_size, board_size);
    /* Reserve every page now: tmpfs would otherwise SIGBUS the first write past its
     * capacity. */
    err = -posix_fallocate(fd, 0, (off_t)mapped);
    if (err == -EOPNOTSUPP || err == -EINVAL)
        err = ftruncate(fd, (off_t)mapped) == 0 ? 0 : -errno;
    if (err == 0)
        err = map(seg, fd, mapped);
    close(fd);
    if (err) {
        shm_unlink(path);
        return err;
    }
    ddp_shm_header_t *h = seg->header;
    h->nonce[0] = nonce[0] = random64();
    h->nonce[1] = nonce[1] = random64();
    h->size = ring_size;
    h->board_size = board_size;
    h->magic = SHM_MAGIC;
    place(seg);
    snprintf(name, name_cap, "%s", path);
    return 0;
}

int ddp_shm_open(ddp_shm_seg_t *seg, const char *name, const uint64_t nonce[2])
{
    struct stat st;
    memset(seg, 0, sizeof *seg);
    int fd = shm_open(name, O_RDWR | O_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    int err = fstat(fd, &st) == 0 ? 0 : -errno;
    if (err == 0 && (size_t)st.st_size <= SHM_HEADER)
        err = DDP_EPROTO;
    if (err == 0)
        err = map(seg, fd, (size_t)st.st_size);
    close(fd);
    if (err)
        return err;
    ddp_shm_header_t *h = seg->header;
    if (h->magic != SHM_MAGIC || h->nonce[0] != nonce[0] || h->nonce[1] != nonce[1] ||
        h->size >= seg->mapped || segment_bytes(h->size, h->board_size) != seg->mapped) {
        ddp_shm_close(seg);
        return DDP_EPROTO;
    }
    place(seg);
    return 0;
}

void ddp_shm_unlink(const char *name)
{
    if (name != NULL && name[0] != '\0')
        shm_unlink(name);
}

void ddp_shm_close(ddp_shm_seg_t *seg)
{
    if (seg->header != NULL)
        munmap(seg->header, seg->mapped);
    memset(seg, 0, sizeof *seg);
}

void ddp_shm_align(ddp_shm_seg_t *seg, bool writer)
{
    uint64_t *pos = writer ? &seg->header->write_pos : &seg->header->read_pos;
    *pos = (*pos + 7) & ~(uint64_t)7;
    if (writer)
        atomic_store_explicit(&seg->header->head, *pos, memory_order_release);
    else
        atomic_store_explicit(&seg->header->tail, *pos, memory_order_release);
}

ddp_shm_bell_t *ddp_shm_doorbell(ddp_shm_seg_t *seg)
{
    return &seg->header->door;
}

void ddp_shm_ring(ddp_shm_bell_t *b)
{
    atomic_fetch_add(&b->bell, 1);
    if (atomic_load(&b->sleepers))
        syscall(SYS_futex, &b->bell, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

size_t ddp_shm_room(ddp_shm_seg_t *seg)
{
    ddp_shm_header_t *h = seg->header;
    h->tail_seen = atomic_load_explicit(&h->tail, memory_order_acquire);
    return seg->size - (size_t)(h->write_pos - h->tail_seen);
}

size_t ddp_shm_write(ddp_shm_seg_t *seg, const void *data, size_t len, size_t unit)
{
    ddp_shm_header_t *h = seg->header;
    /* The reader's tail is read only when the one last seen leaves too little room: its
     * line then stays with the reader, instead of crossing over at every write. */
    size_t room = seg->size - (size_t)(h->write_pos - h->tail_seen);
    if (room < len)
        room = ddp_shm_room(seg);
    size_t n = len < room ? len : room;
    n -= n % unit;
    if (n == 0)
        return 0;
    size_t at = (size_t)(h->write_pos % seg->size), first = seg->size - at;
    if (first > n)
        first = n;
    memcpy(seg->ring + at, data, first);
    memcpy(seg->ring, (const uint8_t *)data + first, n - first);
    h->write_pos += n;
    atomic_store_explicit(&h->head, h->write_pos, memory_order_release);
    ddp_shm_ring(&h->door);
    return n;
}

const uint8_t *ddp_shm_peek(const ddp_shm_seg_t *seg, size_t *len)
{
    ddp_shm_header_t *h = seg->header;
    /* The writer's head is read only when what was seen of it has been used. */
    uint64_t head = h->head_seen;
    if (head <= h->read_pos)
        h->head_seen = head = atomic_load_explicit(&h->head, memory_order_acquire);
    /* The reader aligns its position at the start of a transfer, which may be before
     * the writer has finished the previous one and aligned its own: head lags then. */
    size_t at = (size_t)(h->read_pos % seg->size),
           ready = head > h->read_pos ? (size_t)(head - h->read_pos) : 0;
    *len = ready < seg->size - at ? ready : seg->size - at;
    return seg->ring + at;
}

void ddp_shm_consume(ddp_shm_seg_t *seg, size_t len, ddp_shm_seg_t *writer_seg)
{
    ddp_shm_header_t *h = seg->header;
    h->read_pos += len;
    atomic_store_explicit(&h->tail, h->read_pos, memory_order_release);
    ddp_shm_ring(&writer_seg->header->door);
}

bool ddp_shm_look(const ddp_shm_seg_t *seg, void *out, size_t len)
{
    const ddp_shm_header_t *h = seg->header;
    uint64_t head = atomic_load_explicit(&h->head, memory_order_acquire);
    if (head < h->read_pos || head - h->read_pos < len)
        return false;
    size_t at = (size_t)(h->read_pos % seg->size), first = seg->size - at;
    if (first > len)
        first = len;
    memcpy(out, seg->ring + at, first);
    memcpy((uint8_t *)out + first, seg->ring, len - first);
    return true;
}

uint32_t ddp_shm_bell_arm(ddp_shm_bell_t *b)
{
    /* The count first, then the bell: a ringer that missed the count bumped the bell
     * before this read, so the caller's recheck sees what it published. */
    atomic_fetch_add(&b->sleepers, 1);
    return atomic_load(&b->bell);
}

void ddp_shm_bell_wait(ddp_shm_bell_t *b, uint32_t seen, int timeout_ms)
{
    struct timespec ts = {timeout_ms / 1000, (long)(timeout_ms % 1000) * 1000000L};
    syscall(SYS_futex, &b->bell, FUTEX_WAIT, seen, &ts, NULL, 0);
}

void ddp_shm_bell_disarm(ddp_shm_bell_t *b)
{
    atomic_fetch_sub(&b->sleepers, 1);
}
