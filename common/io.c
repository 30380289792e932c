/* Whole-buffer writes and small-file reads (see io.h). */
#include "io.h"

#include "error.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* A non-blocking descriptor we did not open (a terminal another program set
 * O_NONBLOCK on) answers EAGAIN; wait for it instead of dropping output. */
static int wait_writable(int fd)
{
    struct pollfd pfd = {.fd = fd, .events = POLLOUT};
    for (;;) {
        int r = poll(&pfd, 1, -1);
        if (r >= 0)
            return 0;
        if (errno != EINTR)
            return -errno;
    }
}

int ddp_write_all(int fd, const void *data, size_t len)
{
    struct iovec iov = {.iov_base = (void *)data, .iov_len = len};
    return ddp_writev_all(fd, &iov, 1);
}

int ddp_writev_all(int fd, struct iovec *iov, int n)
{
    while (n > 0) {
        if (iov->iov_len == 0) {
            iov++;
            n--;
            continue;
        }
        ssize_t w = writev(fd, iov, n > IOV_MAX ? IOV_MAX : n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                int r = wait_writable(fd);
                if (r < 0)
                    return r;
                continue;
            }
            return -errno;
        }
        size_t done = (size_t)w;
        while (n > 0 && done >= iov->iov_len) {
            done -= iov->iov_len;
            iov++;
            n--;
        }
        if (n > 0) {
            iov->iov_base = (char *)iov->iov_base + done;
            iov->iov_len -= done;
        }
    }
    return 0;
}

/* The directory of `path`, opened (O_PATH) unless it is a symbolic link, and in *base
 * the name in it. The descriptor or -errno. */
static int open_parent(const char *path, const char **base)
{
    const char *slash = strrchr(path, '/');
    char dir[PATH_MAX];
    if (slash == NULL)
        snprintf(dir, sizeof dir, ".");
    else if ((size_t)(slash - path) >= sizeof dir)
        return -ENAMETOOLONG;
    else
        snprintf(dir, sizeof dir, "%.*s", slash == path ? 1 : (int)(slash - path), path);
    *base = slash != NULL ? slash + 1 : path;
    int fd = open(dir, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    return fd >= 0 ? fd : -errno;
}

int ddp_stat_worker_file(const char *path, struct stat *st)
{
    const char *base;
    int dirfd = open_parent(path, &base);
    if (dirfd < 0)
        return dirfd;
    int err = fstatat(dirfd, base, st, AT_SYMLINK_NOFOLLOW) == 0 ? 0 : -errno;
    close(dirfd);
    return err;
}

int ddp_create_worker_file(const char *path)
{
    const char *base;
    int dirfd = open_parent(path, &base);
    if (dirfd < 0)
        return dirfd;
    int fd = openat(dirfd, base, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC,
                    0644);
    int err = fd < 0 ? -errno : 0;
    close(dirfd);
    struct stat st;
    if (err == 0 && (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))) {
        err = DDP_ENOTFILE;
        close(fd);
    }
    return err != 0 ? err : fd;
}

/* Opens the regular file at `path` for reading, non-blocking (opening a FIFO for reading
 * would otherwise wait for a writer); with `unfollowed`, neither it nor its directory
 * through a symbolic link. The descriptor, -errno or DDP_ENOTFILE. */
static int open_regular(const char *path, bool unfollowed)
{
    int flags = O_RDONLY | O_CLOEXEC | O_NONBLOCK, fd;
    if (unfollowed) {
        const char *base;
        int dirfd = open_parent(path, &base);
        if (dirfd < 0)
            return dirfd;
        fd = openat(dirfd, base, flags | O_NOFOLLOW);
        int saved = errno;
        close(dirfd);
        errno = saved;
    } else {
        fd = open(path, flags);
    }
    if (fd < 0)
        return -errno;
    struct stat st;
    int err = fstat(fd, &st) != 0 ? -errno : S_ISREG(st.st_mode) ? 0 : DDP_ENOTFILE;
    if (err) {
        close(fd);
        return err;
    }
    return fd;
}

int ddp_open_worker_file(const char *path)
{
    return open_regular(path, true);
}

int ddp_read_head(const char *path, void *out, size_t size)
{
    int fd = open_regular(path, true);
    if (fd < 0)
        return fd;
    ssize_t n = pread(fd, out, size, 0);
    int err = n < 0 ? -errno : 0;
    close(fd);
    return err != 0 ? err : (size_t)n < size ? DDP_EPARSE : 0;
}

/* Reads what is left of `fd` (at most `limit` bytes) as ddp_read_file; closes it. */
static int read_all(int fd, size_t limit, char **out, size_t *len)
{
    size_t cap = 4096, used = 0;
    int err = 0;
    char *buf = malloc(cap + 1);
    if (buf == NULL) {
        err = -ENOMEM;
        goto out;
    }
    for (;;) {
        if (used == cap) {
            if (cap > limit) {
                err = DDP_ETOOBIG;
                goto out;
            }
            size_t next = cap * 2 > limit + 1 ? limit + 1 : cap * 2;
            char *grown = realloc(buf, next + 1);
            if (grown == NULL) {
                err = -ENOMEM;
                goto out;
            }
            buf = grown;
            cap = next;
        }
        ssize_t r = read(fd, buf + used, cap - used);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            err = -errno;
            goto out;
        }
        if (r == 0)
            break;
        used += (size_t)r;
    }
    if (used > limit) {
        err = DDP_ETOOBIG;
        goto out;
    }
    buf[used] = '\0';
    *out = buf;
    *len = used;
    buf = NULL;
out:
    free(buf);
    close(fd);
    return err;
}

int ddp_read_file(const char *path, size_t limit, char **out, size_t *len)
{
    int fd = open_regular(path, false);
    return fd < 0 ? fd : read_all(fd, limit, out, len);
}

const char *ddp_small_file_problem(const char *path, size_t limit)
{
    char *text = NULL;
    size_t len = 0;
    int err = ddp_read_file(path, limit, &text, &len);
    free(text);
    if (err == DDP_ENOTFILE)
        return "not a regular file (a FIFO, a device or a directory)";
    if (err == DDP_ETOOBIG)
        return "larger than the limit";
    if (err != 0)
        return strerror(-err);
    return len == 0 ? "empty" : NULL;
}

int ddp_read_file_to(const char *path, char *buf, size_t limit, size_t *len)
{
    int fd = open_regular(path, false), err = fd < 0 ? fd : 0;
    size_t used = 0;
    while (err == 0) {
        ssize_t r = read(fd, buf + used, limit + 1 - used);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            err = r < 0 ? -errno : 0;
            break;
        }
        used += (size_t)r;
        if (used > limit)
            err = DDP_ETOOBIG;
    }
    if (fd >= 0)
        close(fd);
    buf[used > limit ? limit : used] = '\0';
    *len = used > limit ? limit : used;
    return err;
}

int ddp_read_worker_file(const char *path, size_t limit, char **out, size_t *len)
{
    int fd = open_regular(path, true);
    return fd < 0 ? fd : read_all(fd, limit, out, len);
}

static double clock_seconds(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

double ddp_clock_mono(void)
{
    return clock_seconds(CLOCK_MONOTONIC);
}

double ddp_clock_wall(void)
{
    return clock_seconds(CLOCK_REALTIME);
}

struct timespec ddp_clock_timespec(double seconds)
{
    struct timespec ts;
    ts.tv_sec = (time_t)seconds;
    ts.tv_nsec = (long)((seconds - (double)ts.tv_sec) * 1e9);
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

int ddp_random_uuid(char out[37])
{
    unsigned char b[16];
    if (getrandom(b, sizeof b, 0) != (ssize_t)sizeof b)
        return -errno;
    b[6] = (unsigned char)((b[6] & 0x0F) | 0x40); /* version 4 */
    b[8] = (unsigned char)((b[8] & 0x3F) | 0x80); /* the RFC 4122 variant */
    snprintf(out, 37, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
             b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
             b[14], b[15]);
    return 0;
}
