/* Checkpoints in a file: rank 0 writes, atomically; every rank reads; barriers around both
 * (ddp_checkpoint_save_file and _load_file; the in-memory ones are checkpoint.c's).
 *
 * A file is a 32-byte header (the magic "DDPCKPT1", then the payload's length and its
 * FNV-1a hash, little-endian 64-bit, then 8 reserved bytes) and the payload. Rank 0
 * writes a temporary file beside the target, fsyncs it, renames it over the target and
 * fsyncs the directory: a reader sees the old checkpoint or the new one, never half.
 * Rank 0's outcome reaches the others through the store, so every rank returns the
 * same result; a load checks that every rank found the file (a path that is not on a
 * shared filesystem shows here). Runs on the thread that owns the context. */
#include "internal.h"

#include "error.h"
#include "hash.h"
#include "io.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAGIC  "DDPCKPT1"
#define HEADER 32

static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* Rank 0's part of a save: 0 or -errno, with what failed in `why`. */
static int write_checkpoint(const char *path, const void *data, size_t len, char *why,
                            size_t why_cap)
{
    char tmp[PATH_MAX], dir[PATH_MAX];
    uint8_t header[HEADER] = {0};
    int err = 0;
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid()) >= (int)sizeof tmp) {
        snprintf(why, why_cap, "the path is too long");
        return -ENAMETOOLONG;
    }
    memcpy(header, MAGIC, 8);
    put64(header + 8, len);
    put64(header + 16, ddp_fnv1a64(data, len));
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        err = -errno;
        snprintf(why, why_cap, "unable to create %s: %s", tmp, strerror(errno));
        return err;
    }
    const char *step = "write";
    if ((err = ddp_write_all(fd, header, HEADER)) == 0 &&
        (err = ddp_write_all(fd, data, len)) == 0 && fsync(fd) != 0) {
        err = -errno;
        step = "sync";
    }
    if (close(fd) != 0 && err == 0) {
        err = -errno;
        step = "close";
    }
    if (err)
        snprintf(why, why_cap, "unable to %s %s: %s", step, tmp, strerror(-err));
    if (err == 0 && rename(tmp, path) != 0) {
        err = -errno;
        snprintf(why, why_cap, "unable to rename %s to %s: %s", tmp, path, strerror(-err));
    }
    if (err) {
        unlink(tmp);
        return err;
    }
    /* The rename itself is durable once the directory is synced. */
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash == NULL)
        snprintf(dir, sizeof dir, ".");
    else if (slash == dir)
        dir[1] = '\0';
    else
        *slash = '\0';
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
    return 0;
}

int ddp_checkpoint_save_file(ddp_t *ddp, const char *path, const void *data, size_t len)
{
    char key[96], why[PATH_MAX + 256] = "";
    int err;
    DDP_NEED_CONTEXT(ddp, "ddp_checkpoint_save_file");
    if (path == NULL || *path == '\0' || (data == NULL && len > 0))
        return ddp_fail(ddp, DDP_EUSAGE, "checkpoint_save_file: no path or no data");
    /* Before: nobody still reads the previous checkpoint at this path. */
    if ((err = ddp_barrier(ddp)) != 0)
        return err;
    int k = ddp->checkpoints++;
    ddp_key(ddp, key, sizeof key, "ckpt/%d/saved", k);
    if (ddp->rank == 0) {
        err = write_checkpoint(path, data, len, why, sizeof why);
        if (ddp->store != NULL) {
            char value[sizeof why + 32];
            snprintf(value, sizeof value, "%d %s", err, why);
            int set = ddp_store_client_set(ddp->store, key, value, strlen(value));
            if (set)
                return ddp_fail(ddp, set, "checkpoint_save_file: unable to tell the others: %s",
                                ddp_store_client_error(ddp->store));
        }
        if (err)
            return ddp_fail(ddp, err, "checkpoint_save_file: %s", why);
        return 0;
    }
    /* After: rank 0's outcome, which also holds everyone until the file is in place. */
    ddp_buf_t value = DDP_BUF_INIT;
    if ((err = ddp_store_client_get(ddp->store, key, &value)) != 0) {
        ddp_fail(ddp, err, "checkpoint_save_file: rank 0 never said whether it saved %s: %s", path,
                 ddp_store_client_error(ddp->store));
    } else {
        int offset = 0;
        if (sscanf(ddp_buf_str(&value), "%d %n", &err, &offset) != 1)
            err = ddp_fail(ddp, DDP_EPROTO, "checkpoint_save_file: rank 0 answered '%s'",
                           ddp_buf_str(&value));
        else if (err)
            ddp_fail(ddp, err, "checkpoint_save_file: rank 0 could not save: %s",
                     ddp_buf_str(&value) + offset);
    }
    ddp_buf_free(&value);
    return err;
}

/* One rank's read: 0 with the payload, -ENOENT, or an error with `why`. */
static int read_checkpoint(const char *path, void **out, size_t *out_len, char *why, size_t why_cap)
{
    struct stat st;
    int fd = open(path, O_RDONLY | O_CLOEXEC), err = 0;
    uint8_t header[HEADER];
    if (fd < 0) {
        err = -errno;
        if (err != -ENOENT)
            snprintf(why, why_cap, "unable to open %s: %s", path, strerror(errno));
        return err;
    }
    uint8_t *data = NULL;
    ssize_t got = fstat(fd, &st) == 0 ? read(fd, header, HEADER) : -1;
    if (got != HEADER || memcmp(header, MAGIC, 8) != 0) {
        err = DDP_EPARSE;
        snprintf(why, why_cap, "%s is not a libddp checkpoint", path);
        goto out;
    }
    uint64_t len = get64(header + 8), hash = get64(header + 16);
    if ((uint64_t)st.st_size != HEADER + len) {
        err = DDP_EPARSE;
        snprintf(why, why_cap,
                 "%s is truncated or has extra bytes: %lld bytes of payload, the "
                 "header says %llu",
                 path, (long long)st.st_size - HEADER, (unsigned long long)len);
        goto out;
    }
    if ((data = malloc(len + 1)) == NULL) {
        err = -ENOMEM;
        snprintf(why, why_cap, "no memory for the %llu bytes of %s", (unsigned long long)len, path);
        goto out;
    }
    size_t have = 0;
    while (have < len) {
        ssize_t r = read(fd, data + have, len - have);
        if (r <= 0) {
            err = r == 0 ? DDP_EPARSE : -errno;
            snprintf(why, why_cap, "unable to read %s: %s", path,
                     r == 0 ? "it ended early" : strerror(errno));
            goto out;
        }
        have += (size_t)r;
    }
    if (ddp_fnv1a64(data, len) != hash) {
        err = DDP_EPARSE;
        snprintf(why, why_cap, "%s is corrupt: its payload does not match its checksum", path);
        goto out;
    }
    *out = data;
    *out_len = len;
    data = NULL;
out:
    free(data);
    close(fd);
    return err;
}

int ddp_checkpoint_load_file(ddp_t *ddp, const char *path, void **data, size_t *len)
{
    char key[96], why[PATH_MAX + 256] = "";
    void *payload = NULL;
    size_t payload_len = 0;
    int err;
    DDP_NEED_CONTEXT(ddp, "ddp_checkpoint_load_file");
    if (path == NULL || *path == '\0' || data == NULL || len == NULL)
        return ddp_fail(ddp, DDP_EUSAGE,
                        "checkpoint_load_file: no path or nowhere to put the data");
    /* Before: a save in progress elsewhere has finished. */
    if ((err = ddp_barrier(ddp)) != 0)
        return err;
    int k = ddp->checkpoints++;
    int found = read_checkpoint(path, &payload, &payload_len, why, sizeof why);
    /* Every rank must see the same file: count those that found one. */
    int64_t finders = found == -ENOENT ? 0 : 1;
    if (ddp->store != NULL) {
        ddp_key(ddp, key, sizeof key, "ckpt/%d/found", k);
        int64_t ignored;
        if ((err = ddp_store_client_add(ddp->store, key, finders, &ignored)) == 0) {
            /* After: every rank has read (and counted) before any goes on to write. */
            if ((err = ddp_barrier(ddp)) != 0) {
                free(payload);
                return err;
            }
            err = ddp_store_client_add(ddp->store, key, 0, &finders);
        }
        if (err) {
            free(payload);
            return ddp_fail(ddp, err, "checkpoint_load_file: %s",
                            ddp_store_client_error(ddp->store));
        }
    }
    if (finders != 0 && finders != ddp->world_size) {
        free(payload);
        return ddp_fail(ddp, DDP_EUSAGE,
                        "checkpoint_load_file: %s exists for %lld of the %d ranks (%s here): put "
                        "checkpoints on a filesystem that every node shares",
                        path, (long long)finders, ddp->world_size,
                        found == -ENOENT ? "missing" : "present");
    }
    if (found == -ENOENT) {
        /* No checkpoint yet is the normal start of a job: said, not logged. */
        snprintf(ddp->error, sizeof ddp->error, "no checkpoint at %s", path);
        return -ENOENT;
    }
    if (found != 0)
        return ddp_fail(ddp, found, "checkpoint_load_file: %s", why);
    *data = payload;
    *len = payload_len;
    return 0;
}
