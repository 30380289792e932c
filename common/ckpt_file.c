/* In-memory checkpoints' files: headers and room (see ckpt_file.h). */
#include "ckpt_file.h"

#include "error.h"
#include "io.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

/* The run id's characters kept in a directory's name. */
#define NAME_ID_MAX 48

void ddp_ckpt_shm_dir_name(char *out, size_t cap, const char *run_id, const char *pid,
                           const char *unique)
{
    char id[NAME_ID_MAX + 1];
    size_t n = 0;
    for (; run_id != NULL && run_id[n] != '\0' && n < NAME_ID_MAX; n++) {
        char c = run_id[n];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '.' || c == '_' || c == '-';
        id[n] = ok ? c : '_';
    }
    id[n] = '\0';
    snprintf(out, cap, "/dev/shm/ddp-ckpt-%s-%s-%s", id, pid, unique);
}

int ddp_ckpt_slot_path(char *path, size_t cap, const char *dir, int rank, int slot)
{
    int n = snprintf(path, cap, "%s/" DDP_CKPT_SLOT_FILE, dir, rank, slot);
    return n < 0 || (size_t)n >= cap ? -ENAMETOOLONG : 0;
}

int ddp_ckpt_pread_header(int fd, ddp_ckpt_header_t *header, uint64_t *file_size, ddp_buf_t *why)
{
    ddp_ckpt_header_t h;
    struct stat st;
    int err = 0;
    ssize_t n = fstat(fd, &st) == 0 ? pread(fd, &h, sizeof h, 0) : -1;
    if (n < 0)
        err = -errno;
    else if ((size_t)n < sizeof h)
        err = why != NULL
                  ? (ddp_buf_printf(why, "it has %zd bytes, less than a header", n), DDP_EPARSE)
                  : DDP_EPARSE;
    else
        err = ddp_ckpt_header_check(&h, (uint64_t)st.st_size, why);
    if (err == 0) {
        *header = h;
        *file_size = (uint64_t)st.st_size;
    }
    return err;
}

/* What a sum reads at once. */
#define SUM_CHUNK (1u << 20)

int ddp_ckpt_sum_file(int fd, const ddp_ckpt_header_t *h, const atomic_bool *cancel, uint64_t *sum,
                      ddp_buf_t *why)
{
    ddp_ckpt_sum_t *state = malloc(sizeof *state);
    uint8_t *chunk = malloc(SUM_CHUNK);
    int err = state == NULL || chunk == NULL ? -ENOMEM : 0;
    if (err == 0)
        ddp_ckpt_sum_init(state, ddp_ckpt_header_seed(h));
    for (uint64_t at = DDP_CKPT_HEADER_BYTES; err == 0 && at < h->used_bytes;) {
        size_t want = h->used_bytes - at < SUM_CHUNK ? (size_t)(h->used_bytes - at) : SUM_CHUNK;
        ssize_t n = 0;
        if (cancel != NULL && atomic_load(cancel))
            err = -ECANCELED;
        else if ((n = pread(fd, chunk, want, (off_t)at)) < 0 && errno != EINTR)
            err = -errno;
        else if (n == 0)
            err = why != NULL
                      ? (ddp_buf_printf(why, "it ends at %" PRIu64 " bytes, before its %" PRIu64,
                                        at, h->used_bytes),
                         DDP_EPARSE)
                      : DDP_EPARSE;
        if (n > 0) {
            ddp_ckpt_sum_update(state, chunk, (size_t)n);
            at += (uint64_t)n;
        }
    }
    if (err == 0)
        *sum = ddp_ckpt_sum_final(state);
    free(state);
    free(chunk);
    return err;
}

/* errno as -errno, with "unable to WHAT PATH: reason" in `why`. */
static int failed(ddp_buf_t *why, const char *what, const char *path)
{
    int err = -errno;
    ddp_buf_printf(why, "unable to %s %s: %s", what, path, strerror(-err));
    return err;
}

/* The copy's bytes, SUM_CHUNK at a time; 0, -ECANCELED or -errno (what failed in `why`). */
static int copy_bytes(int from, int to, uint64_t bytes, const char *tmp, const atomic_bool *cancel,
                      ddp_buf_t *why)
{
    uint8_t *chunk = malloc(SUM_CHUNK);
    int err = chunk == NULL ? -ENOMEM : 0;
    for (uint64_t at = 0; err == 0 && at < bytes;) {
        size_t want = bytes - at < SUM_CHUNK ? (size_t)(bytes - at) : SUM_CHUNK;
        ssize_t n = 0;
        if (cancel != NULL && atomic_load(cancel))
            err = -ECANCELED;
        else if ((n = pread(from, chunk, want, (off_t)at)) < 0 && errno != EINTR)
            err = failed(why, "read", "the slot");
        else if (n == 0)
            err = (ddp_buf_printf(why, "it ends at %" PRIu64 " bytes", at), -EAGAIN);
        else if (n > 0 && ddp_write_all(to, chunk, (size_t)n) != 0)
            err = failed(why, "write", tmp);
        if (n > 0)
            at += (uint64_t)n;
    }
    free(chunk);
    return err;
}

int ddp_ckpt_copy(int fd, const ddp_ckpt_header_t *h, const char *dir, const char *name,
                  const atomic_bool *cancel, ddp_buf_t *why)
{
    char tmp[PATH_MAX], final[PATH_MAX];
    ddp_ckpt_header_t again;
    uint64_t size;
    if (snprintf(tmp, sizeof tmp, "%s/.%s.%d.tmp", dir, name, (int)getpid()) >= (int)sizeof tmp ||
        snprintf(final, sizeof final, "%s/%s", dir, name) >= (int)sizeof final)
        return (ddp_buf_printf(why, "its path is too long"), -ENAMETOOLONG);
    int out = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600), err = 0;
    if (out < 0)
        return failed(why, "create", tmp);
    err = copy_bytes(fd, out, h->used_bytes, tmp, cancel, why);
    if (err == 0 && fsync(out) != 0)
        err = failed(why, "sync", tmp);
    if (close(out) != 0 && err == 0)
        err = failed(why, "write", tmp);
    if (err == 0 && (ddp_ckpt_pread_header(fd, &again, &size, NULL) != 0 ||
                     again.generation != h->generation || again.state != h->state))
        err = (ddp_buf_printf(why, "it was written again meanwhile"), -EAGAIN);
    if (err == 0 && rename(tmp, final) != 0)
        err = failed(why, "rename", tmp);
    if (err != 0) {
        unlink(tmp);
        return err;
    }
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        (void)fsync(dfd);
        close(dfd);
    }
    return 0;
}

/* Slack for a file's last page and what a file system keeps beside the data. */
#define SIZE_SLACK (64u << 10)

int ddp_ckpt_size_check(const ddp_ckpt_header_t *h, const struct stat *st, ddp_buf_t *why)
{
    uint64_t held = (uint64_t)st->st_blocks * 512;
    if (h->state == DDP_CKPT_EMPTY || h->used_bytes <= held + SIZE_SLACK)
        return 0;
    if (why != NULL)
        ddp_buf_printf(why,
                       "it says %" PRIu64 " bytes, but the file holds %" PRIu64
                       " (a sparse file: refused)",
                       h->used_bytes, held);
    return DDP_EPARSE;
}

int ddp_ckpt_verify_file(int fd, const ddp_ckpt_header_t *h, const atomic_bool *cancel,
                         ddp_buf_t *why)
{
    uint64_t sum;
    int err = ddp_ckpt_sum_file(fd, h, cancel, &sum, why);
    if (err == 0 && sum != h->checksum)
        err = (ddp_buf_printf(why,
                              "its data does not match its checksum (step %" PRId64
                              ", generation %" PRIu64 ")",
                              h->step, h->generation),
               DDP_EPARSE);
    return err;
}

int ddp_ckpt_copy_check(int fd, const ddp_ckpt_header_t *h, int rank, int world,
                        const atomic_bool *cancel, ddp_buf_t *why)
{
    struct stat st;
    int err = fstat(fd, &st) != 0 ? -errno : 0;
    if (err == 0 && h->state != DDP_CKPT_COMPLETE)
        err = (ddp_buf_printf(why, "it is not complete"), DDP_EPARSE);
    if (err == 0 && (h->rank != (uint32_t)rank || h->world_size != (uint32_t)world))
        err = (ddp_buf_printf(why, "it is rank %u's of a world of %u, not rank %d's of %d", h->rank,
                              h->world_size, rank, world),
               DDP_EPARSE);
    if (err == 0)
        err = ddp_ckpt_size_check(h, &st, why);
    if (err == 0 && h->checksum_generation != h->generation)
        err = (ddp_buf_printf(why, "it has no checksum"), DDP_EPARSE);
    if (err == 0)
        err = ddp_ckpt_verify_file(fd, h, cancel, why);
    return err;
}

/* Whether `name` is a copier's temporary, .rank<R>.ckpt.<pid>.tmp or .rank<R>.pt.<pid>.tmp,
 * exactly (*pid set). */
static bool stale_name(const char *name, pid_t *pid)
{
    char kind[8];
    int rank, id, end = 0;
    if (sscanf(name, ".rank%d.%7[a-z].%d.tmp%n", &rank, kind, &id, &end) != 3 ||
        name[end] != '\0' || rank < 0 || id <= 0 ||
        (strcmp(kind, "ckpt") != 0 && strcmp(kind, "pt") != 0))
        return false;
    *pid = (pid_t)id;
    return true;
}

/* The directory `dir`, following no link, open for readdir at *out: 0, or -errno. */
static int open_dir(const char *dir, DIR **out)
{
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
    if (d == NULL) {
        int err = -errno;
        if (dfd >= 0)
            close(dfd);
        return err;
    }
    *out = d;
    return 0;
}

int ddp_ckpt_remove_stale(const char *dir, pid_t owner, ddp_buf_t *removed)
{
    DIR *d;
    int err = open_dir(dir, &d);
    if (err != 0)
        return err;
    int n = 0;
    for (const struct dirent *e; (e = readdir(d)) != NULL;) {
        struct stat st;
        pid_t pid;
        if (!stale_name(e->d_name, &pid) || pid == getpid() ||
            (owner > 0 ? pid != owner : kill(pid, 0) == 0 || errno != ESRCH) ||
            fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode) ||
            st.st_uid != geteuid() || unlinkat(dirfd(d), e->d_name, 0) != 0)
            continue;
        if (removed != NULL)
            ddp_buf_printf(removed, "%s%s", n > 0 ? " " : "", e->d_name);
        n++;
    }
    closedir(d);
    return n;
}

/* A replica the directory holds, as ddp_ckpt_drop_replicas sees it. */
typedef struct {
    char name[32];
    int rank;
    uint64_t generation, bytes;
    struct timespec received;
    dev_t dev; /* the file listed */
    ino_t ino;
    bool newest; /* of its rank's */
} held_replica_t;

/* Whether `name` is exactly "replica<R>.<s>" (R digits, s 0 or 1): *rank. */
static bool replica_name(const char *name, int *rank)
{
    const char *p = name + strlen("replica");
    long r = 0;
    if (strncmp(name, "replica", strlen("replica")) != 0 || *p < '0' || *p > '9')
        return false;
    for (; *p >= '0' && *p <= '9'; p++)
        if ((r = r * 10 + (*p - '0')) > INT_MAX / 10)
            return false;
    *rank = (int)r;
    return p[0] == '.' && (p[1] == '0' || p[1] == '1') && p[2] == '\0';
}

/* Those that are not the newest of their rank first, then the oldest received. */
static int by_age(const void *a, const void *b)
{
    const held_replica_t *x = a, *y = b;
    if (x->newest != y->newest)
        return x->newest ? 1 : -1;
    if (x->received.tv_sec != y->received.tv_sec)
        return x->received.tv_sec < y->received.tv_sec ? -1 : 1;
    return (x->received.tv_nsec > y->received.tv_nsec) -
           (x->received.tv_nsec < y->received.tv_nsec);
}

/* The replicas in the directory open at `d`, into *out (malloc'd): their number. */
static size_t held_replicas(DIR *d, held_replica_t **out)
{
    held_replica_t *held = NULL;
    size_t n = 0, cap = 0;
    for (const struct dirent *e; (e = readdir(d)) != NULL;) {
        int rank, fd;
        struct stat st;
        ddp_ckpt_header_t h;
        uint64_t size;
        if (strlen(e->d_name) >= sizeof held->name || !replica_name(e->d_name, &rank) ||
            (fd = openat(dirfd(d), e->d_name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)) < 0)
            continue;
        bool ok = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() &&
                  ddp_ckpt_pread_header(fd, &h, &size, NULL) == 0;
        close(fd);
        if (ok && n == cap) {
            held_replica_t *more = realloc(held, (cap = cap * 2 + 16) * sizeof *held);
            ok = more != NULL;
            held = more != NULL ? more : held;
        }
        if (!ok)
            continue;
        held[n] = (held_replica_t){.rank = rank,
                                   .generation = h.generation,
                                   .bytes = (uint64_t)st.st_blocks * 512,
                                   .received = st.st_mtim,
                                   .dev = st.st_dev,
                                   .ino = st.st_ino};
        snprintf(held[n++].name, sizeof held->name, "%s", e->d_name);
    }
    for (size_t i = 0; i < n; i++) {
        held[i].newest = true;
        for (size_t j = 0; j < n; j++)
            if (held[j].rank == held[i].rank && held[j].generation > held[i].generation)
                held[i].newest = false;
    }
    *out = held;
    return n;
}

/* Removes the replica `r` listed in the directory open at `dfd`, where its name still is that
 * file: moved aside to a name of this process's first (atomic: what the receiver renames
 * onto the name meanwhile is never taken), removed where it is the file listed, else (a
 * newer replica renamed in since the listing) linked back under its name, or removed where a
 * newer one yet holds that name. Whether the file listed was removed. */
static bool drop_listed(int dfd, const held_replica_t *r)
{
    char aside[64];
    struct stat st;
    snprintf(aside, sizeof aside, ".%s.%d.dropping", r->name, (int)getpid());
    if (renameat(dfd, r->name, dfd, aside) != 0)
        return false; /* (gone meanwhile) */
    bool listed = fstatat(dfd, aside, &st, AT_SYMLINK_NOFOLLOW) == 0 && st.st_dev == r->dev &&
                  st.st_ino == r->ino;
    if (!listed && linkat(dfd, aside, dfd, r->name, 0) != 0 && errno != EEXIST) {
        (void)renameat(dfd, aside, dfd, r->name); /* (no link here: back as it was) */
        return false;
    }
    (void)unlinkat(dfd, aside, 0);
    return listed;
}

/* Whether `name` is a drop's aside, .replica<R>.<s>.<pid>.dropping, exactly (*pid set). */
static bool dropping_name(const char *name, pid_t *pid)
{
    int rank, slot, id, end = 0;
    if (sscanf(name, ".replica%d.%d.%d.dropping%n", &rank, &slot, &id, &end) != 3 ||
        name[end] != '\0' || rank < 0 || (slot != 0 && slot != 1) || id <= 0)
        return false;
    *pid = (pid_t)id;
    return true;
}

int64_t ddp_ckpt_remove_stale_drops(const char *dir)
{
    DIR *d;
    int err = open_dir(dir, &d);
    if (err != 0)
        return err;
    uint64_t freed = 0;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    for (const struct dirent *e; (e = readdir(d)) != NULL;) {
        struct stat st;
        pid_t pid;
        if (!dropping_name(e->d_name, &pid) ||
            fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode) ||
            st.st_uid != geteuid())
            continue;
        bool dead = pid != getpid() && kill(pid, 0) != 0 && errno == ESRCH;
        if ((dead || now.tv_sec - st.st_ctim.tv_sec > DDP_CKPT_DROPPING_MAX_S) &&
            unlinkat(dirfd(d), e->d_name, 0) == 0)
            freed += (uint64_t)st.st_blocks * 512;
    }
    closedir(d);
    return (int64_t)freed;
}

int64_t ddp_ckpt_drop_replicas(const char *dir, uint64_t need, int *count)
{
    DIR *d;
    int err = open_dir(dir, &d);
    if (err != 0)
        return err;
    int64_t stale = ddp_ckpt_remove_stale_drops(dir); /* (a dropper killed midway's) */
    held_replica_t *held = NULL;
    size_t n = held_replicas(d, &held);
    uint64_t freed = stale > 0 ? (uint64_t)stale : 0;
    int removed = 0;
    if (n > 0)
        qsort(held, n, sizeof *held, by_age);
    for (size_t i = 0; i < n && freed < need; i++)
        if (drop_listed(dirfd(d), &held[i])) {
            freed += held[i].bytes;
            removed++;
        }
    free(held);
    closedir(d);
    *count = removed;
    return (int64_t)freed;
}

int ddp_ckpt_read_header(const char *path, ddp_ckpt_header_t *header, uint64_t *file_size,
                         ddp_buf_t *why)
{
    int fd = ddp_open_worker_file(path);
    if (fd < 0)
        return fd;
    int err = ddp_ckpt_pread_header(fd, header, file_size, why);
    close(fd);
    return err;
}

/* A cgroup file's number: "max" (or a v1 limit of 2^62 and more, its way of saying none)
 * is UINT64_MAX; false when the file cannot be read or holds no number. */
static bool read_bytes(const char *dir, const char *file, uint64_t *out)
{
    char path[PATH_MAX + 64], *text = NULL, *end;
    size_t len;
    snprintf(path, sizeof path, "%s/%s", dir, file);
    if (ddp_read_file(path, 64, &text, &len) != 0)
        return false;
    bool ok = true;
    if (strncmp(text, "max", 3) == 0) {
        *out = UINT64_MAX;
    } else {
        errno = 0;
        unsigned long long v = strtoull(text, &end, 10);
        ok = errno == 0 && end != text && (*end == '\n' || *end == '\0');
        *out = v >= (1ull << 62) ? UINT64_MAX : v;
    }
    free(text);
    return ok;
}

/* The memory cgroup's path from /proc/self/cgroup's text: the v2 line ("0::PATH"), else
 * v1's memory controller ("N:...memory...:PATH", *v1 set). false when neither is there. */
static bool cgroup_path(char *text, char *path, size_t cap, bool *v1)
{
    bool found = false;
    for (char *line = strtok(text, "\n"); line != NULL; line = strtok(NULL, "\n")) {
        char *first = strchr(line, ':'), *second = first ? strchr(first + 1, ':') : NULL;
        if (second == NULL || second[1] != '/')
            continue;
        size_t controllers = (size_t)(second - first - 1);
        bool memory = false;
        for (char *c = first + 1; c < second; c += strcspn(c, ",:") + 1)
            memory = memory || (strncmp(c, "memory", 6) == 0 && (c[6] == ',' || c[6] == ':'));
        if ((controllers == 0 && !found) || memory) {
            snprintf(path, cap, "%s", second + 1);
            *v1 = memory;
            found = true;
        }
    }
    return found;
}

/* Lowers out->bytes to the headroom of the memory cgroup at `dir` and each one above it,
 * up to `top` (their limit less their use), saying which one sets it. */
static void cgroup_room(char *dir, size_t top, bool v1, ddp_ckpt_room_t *out)
{
    const char *max_file = v1 ? "memory.limit_in_bytes" : "memory.max";
    const char *use_file = v1 ? "memory.usage_in_bytes" : "memory.current";
    for (;;) {
        uint64_t max, used;
        if (read_bytes(dir, max_file, &max) && max != UINT64_MAX &&
            read_bytes(dir, use_file, &used)) {
            uint64_t left = used < max ? max - used : 0;
            if (left < out->bytes) {
                out->bytes = left;
                snprintf(out->limit, sizeof out->limit,
                         "the memory cgroup %.300s (%s %" PRIu64 " bytes, %" PRIu64 " in use)", dir,
                         max_file, max, used);
            }
        }
        char *slash = strrchr(dir, '/');
        if (slash == NULL || (size_t)(slash - dir) < top)
            return;
        *slash = '\0';
    }
}

int ddp_ckpt_room(const char *dir, const char *cgroup_root, const char *proc_cgroup,
                  ddp_ckpt_room_t *out)
{
    struct statvfs vfs;
    if (statvfs(dir, &vfs) != 0)
        return -errno;
    out->bytes = (uint64_t)vfs.f_bavail * vfs.f_frsize;
    snprintf(out->limit, sizeof out->limit, "the file system of %.400s (%" PRIu64 " bytes free)",
             dir, out->bytes);
    char *text = NULL, path[PATH_MAX], cgroup[PATH_MAX + 16];
    size_t len;
    bool v1 = false;
    if (ddp_read_file(proc_cgroup, 1 << 16, &text, &len) != 0)
        return 0;
    if (cgroup_path(text, path, sizeof path, &v1)) {
        size_t top = strlen(cgroup_root) + (v1 ? strlen("/memory") : 0);
        snprintf(cgroup, sizeof cgroup, "%s%s%s", cgroup_root, v1 ? "/memory" : "",
                 strcmp(path, "/") == 0 ? "" : path);
        cgroup_room(cgroup, top, v1, out);
    }
    free(text);
    return 0;
}

/* One pass over the entries of the directory open at `fd`: each removed (an empty directory
 * too). 0 or the first -errno. */
static int remove_entries(int fd)
{
    int dup = fcntl(fd, F_DUPFD_CLOEXEC, 3);
    DIR *d = dup >= 0 ? fdopendir(dup) : NULL;
    if (d == NULL) {
        int err = -errno;
        if (dup >= 0)
            close(dup);
        return err;
    }
    int err = 0;
    const struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        int r = unlinkat(fd, e->d_name, 0);
        if (r != 0 && errno == EISDIR)
            r = unlinkat(fd, e->d_name, AT_REMOVEDIR);
        if (r != 0 && errno != ENOENT && err == 0)
            err = -errno;
    }
    closedir(d);
    return err;
}

int ddp_ckpt_remove_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    int err = 0;
    for (int pass = 0; pass < 3; pass++) {
        err = remove_entries(fd);
        if (rmdir(dir) == 0) {
            err = 0;
            break;
        }
        if (err == 0)
            err = -errno;
        if (err != -ENOTEMPTY)
            break;
    }
    close(fd);
    return err;
}
