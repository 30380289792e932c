/* Small blocking I/O helpers over file descriptors: whole writes, whole small files.
 *
 * Used on the launcher's loop thread for console and log output (which are allowed to
 * block: a stalled console stalls the launcher as it would stall torchrun's workers)
 * and by libddp's threads. They retry EINTR and wait out EAGAIN on non-blocking fds. */
#ifndef DDP_COMMON_IO_H
#define DDP_COMMON_IO_H

#include <stddef.h>
#include <time.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>

/* Writes all `len` bytes. Returns 0 or -errno (e.g. -EPIPE when the reader is gone). */
int ddp_write_all(int fd, const void *data, size_t len);

/* Writes every byte of the `n` buffers, in order; `iov` is modified. 0 or -errno. */
int ddp_writev_all(int fd, struct iovec *iov, int n);

/* Reads at most `limit` bytes of the regular file at `path` into a new NUL-terminated
 * buffer (*out, caller frees; *len without the NUL). Never blocks on what is not a
 * regular file (a FIFO, a device, a directory): DDP_ENOTFILE. Returns 0, -errno,
 * DDP_ENOTFILE, or DDP_ETOOBIG when the file holds more than `limit` bytes. */
int ddp_read_file(const char *path, size_t limit, char **out, size_t *len);
/* As ddp_read_file, into buf[limit + 1] of the caller's (NUL-terminated, *len bytes),
 * allocating nothing: for a child forked by a threaded process, whose allocator may be
 * left locked by another thread (a sanitizer's is). */
int ddp_read_file_to(const char *path, char *buf, size_t limit, size_t *len);

/* Why the file at `path` cannot be a small input file (a certificate, a key): NULL where
 * it is a regular file of 1 to `limit` bytes that can be read; else in a few words ("not
 * a regular file (a FIFO, a device or a directory)", "empty", "larger than the limit",
 * strerror's). Never blocks on what is not a regular file (it is read as ddp_read_file). */
const char *ddp_small_file_problem(const char *path, size_t limit);

/* As ddp_read_file, for a file a worker controls (in its directory): neither the file nor
 * the directory it is in may be a symbolic link (-ELOOP or -ENOTDIR), which a worker could
 * point anywhere, into a hung file system too. */
int ddp_read_worker_file(const char *path, size_t limit, char **out, size_t *len);

/* Opens the regular file at `path` in a worker's directory for reading (non-blocking,
 * close-on-exec), following no link as ddp_read_worker_file. The descriptor, -errno or
 * DDP_ENOTFILE. */
int ddp_open_worker_file(const char *path);

/* Creates (or truncates) the regular file at `path` in a worker's directory for writing,
 * following no link as ddp_read_worker_file (a worker could point one anywhere). The
 * descriptor (non-blocking, close-on-exec), -errno or DDP_ENOTFILE. */
int ddp_create_worker_file(const char *path);

/* stat(2) of a worker's file (in its directory), following no link as
 * ddp_read_worker_file: a link is itself. 0 or -errno. */
int ddp_stat_worker_file(const char *path, struct stat *st);

/* Reads the first `size` bytes of the worker's file at `path` into `out` (a shared-memory
 * ring's copy: one pread, never blocking on a FIFO, following no link as
 * ddp_read_worker_file). 0; -errno; DDP_ENOTFILE; DDP_EPARSE when it is shorter. */
int ddp_read_head(const char *path, void *out, size_t size);

/* A random version 4 UUID ("1b4e28ba-2fa1-4d2b-883f-0016d3cca427"), as torchrun makes run
 * ids and file names, into out[37]. 0 or -errno (no randomness). */
int ddp_random_uuid(char out[37]);

/* Seconds on CLOCK_MONOTONIC and CLOCK_REALTIME. */
double ddp_clock_mono(void);
double ddp_clock_wall(void);

/* Non-negative `seconds` as a timespec: a duration (nanosleep), or a time of
 * ddp_clock_mono() (a condition waiting on CLOCK_MONOTONIC). */
struct timespec ddp_clock_timespec(double seconds);

#endif
