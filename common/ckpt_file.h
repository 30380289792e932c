/* In-memory checkpoints' files: a slot's header read following no link, and the room a save
 * has (the file system's free bytes, the memory cgroup's limit: a tmpfs file's pages are
 * charged to the cgroup that writes them). Blocking I/O on small files, for libddp's caller
 * and the launcher's threads, never its loop. */
#ifndef DDP_COMMON_CKPT_FILE_H
#define DDP_COMMON_CKPT_FILE_H

#include "buf.h"
#include "ckpt.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

/* The directory a launcher makes for its workers' checkpoints, into out[cap]:
 * /dev/shm/ddp-ckpt-<run id>-<pid>-<unique>, the run id's characters outside [A-Za-z0-9._-]
 * written '_' and at most 48 of them kept; `pid` and `unique` as given (--dry-run's
 * "<pid>"). */
void ddp_ckpt_shm_dir_name(char *out, size_t cap, const char *run_id, const char *pid,
                           const char *unique);

/* "DIR/rank<R>.<slot>" into path[cap]: 0, or -ENAMETOOLONG. */
int ddp_ckpt_slot_path(char *path, size_t cap, const char *dir, int rank, int slot);

/* Reads and checks (ddp_ckpt_header_check) the header of the slot file at `path`, which
 * neither it nor its directory may reach through a link: 0 with *header and *file_size;
 * -ENOENT when there is no file; DDP_ENOTFILE for what is not a regular file; DDP_EPARSE
 * for one shorter than a header or a header refused, with `why`; or -errno. */
int ddp_ckpt_read_header(const char *path, ddp_ckpt_header_t *header, uint64_t *file_size,
                         ddp_buf_t *why);

/* As ddp_ckpt_read_header, of the slot file open at `fd` (the caller's, which it opened
 * following no link): 0 with *header and *file_size, DDP_EPARSE with `why`, or -errno. */
int ddp_ckpt_pread_header(int fd, ddp_ckpt_header_t *header, uint64_t *file_size, ddp_buf_t *why);

/* The checksum of the slot open at `fd` (header `h`, which ddp_ckpt_header_check took for
 * the file's size), as ddp_ckpt_slot_sum computes it of a copy: its used bytes read with
 * pread a MiB at a time, each chunk looked at by no one else. 0 with *sum; -ECANCELED once
 * *cancel is set (looked at between chunks; may be NULL); DDP_EPARSE with `why` where the
 * file ends early (cut meanwhile); -ENOMEM; or -errno. Blocking: for a thread. */
int ddp_ckpt_sum_file(int fd, const ddp_ckpt_header_t *h, const atomic_bool *cancel, uint64_t *sum,
                      ddp_buf_t *why);

/* Whether the data of the slot open at `fd` (header `h`, checked) is what its checksum
 * says. 0, DDP_EPARSE with `why`, -ECANCELED (*cancel set; may be NULL), or -errno.
 * Blocking. */
int ddp_ckpt_verify_file(int fd, const ddp_ckpt_header_t *h, const atomic_bool *cancel,
                         ddp_buf_t *why);

/* Whether the copy open at `fd` (header `h`, a --checkpoint-dir copy) may be rank `rank`'s
 * checkpoint in a world of `world`: complete, of that rank and world size, not sparse, its
 * checksum written and matched. 0, or an error with `why` (-ECANCELED: *cancel set; may be
 * NULL). Blocking. */
int ddp_ckpt_copy_check(int fd, const ddp_ckpt_header_t *h, int rank, int world,
                        const atomic_bool *cancel, ddp_buf_t *why);

/* Whether a slot's size is believable: the used_bytes of its header `h` are not more than
 * the file `st` holds in memory (a sparse file that says a terabyte would cost a terabyte's
 * read to check). 0, or DDP_EPARSE with `why`. */
int ddp_ckpt_size_check(const ddp_ckpt_header_t *h, const struct stat *st, ddp_buf_t *why);

/* Copies the used bytes of the slot open at `fd` (header `h`, checked) to DIR/NAME: written
 * as DIR/.NAME.<pid>.tmp (following no link), synced, the source's header read again
 * (ckpt.h's sequence lock: -EAGAIN, nothing left, where its generation or state changed),
 * then renamed to NAME and the directory synced. 0, -ECANCELED (*cancel set; may be NULL),
 * or -errno with `why`. Blocking: for a thread, or before the loop runs. */
int ddp_ckpt_copy(int fd, const ddp_ckpt_header_t *h, const char *dir, const char *name,
                  const atomic_bool *cancel, ddp_buf_t *why);

typedef struct {
    uint64_t bytes;  /* what a save may add to the files in the directory */
    char limit[512]; /* what sets it, for a refusal's message */
} ddp_ckpt_room_t;

/* The room in `dir`: the free bytes of its file system (statvfs), or less where this
 * process's memory cgroup, or one above it, is closer to its limit: memory.max less
 * memory.current (cgroup v2), memory.limit_in_bytes less memory.usage_in_bytes (v1, under
 * CGROUP_ROOT/memory). `cgroup_root` is /sys/fs/cgroup and `proc_cgroup` /proc/self/cgroup
 * but in tests; a cgroup file missing or unreadable sets no limit. 0, or -errno from
 * statvfs. */
int ddp_ckpt_room(const char *dir, const char *cgroup_root, const char *proc_cgroup,
                  ddp_ckpt_room_t *out);

/* Room in `dir` for a save of this node's own ranks, taken from the replicas of other nodes'
 * ranks the launcher keeps there (DDP_CKPT_REPLICA_FILE, exactly that name: a regular file of
 * this user with a slot's header, following no link): they are removed, the oldest received
 * (by their time) first, those that are not the newest of their rank (by generation) before
 * any that is, until the pages removed reach `need`; each only where its name still holds the
 * file listed (moved aside first, so a newer replica the launcher renames onto that name
 * meanwhile is kept). A replica still arriving (.replica<R>.<s>.<n>.incoming) is not
 * removed: its transfer ends within its deadline. The bytes removed (0: none), their number
 * in *count; or -errno where `dir` cannot be read. Blocking: a worker's save. */
int64_t ddp_ckpt_drop_replicas(const char *dir, uint64_t need, int *count);

/* A drop's aside (.replica<R>.<s>.<pid>.dropping) lives between a rename and an unlink; a
 * dropper killed between them leaves it, room taken for the rest of the job. */
#define DDP_CKPT_DROPPING_MAX_S 60

/* Removes from `dir` the asides of drops cut short: a regular file of this user named
 * exactly .replica<R>.<s>.<pid>.dropping whose pid is no process here (ESRCH) or that was
 * renamed there more than DDP_CKPT_DROPPING_MAX_S ago. The bytes removed, or -errno where
 * `dir` cannot be read. ddp_ckpt_drop_replicas does it first. Blocking. */
int64_t ddp_ckpt_remove_stale_drops(const char *dir);

/* Removes from `dir` the temporaries of ddp_ckpt_copy and of the torch.save copies
 * (.rank<R>.ckpt.<pid>.tmp, .rank<R>.pt.<pid>.tmp) that a copier SIGKILLed midway left: a
 * regular file of this user whose name is exactly that, following no link, and whose pid
 * is `owner` (a launcher known dead: its orphan guard's) or, with `owner` 0, no process here
 * (ESRCH); anything else is left as it is. The names removed are appended to `removed`
 * (space-separated; may be NULL). The number removed, or -errno where `dir` cannot be read.
 * Blocking: before the loop runs, or the orphan guard. */
int ddp_ckpt_remove_stale(const char *dir, pid_t owner, ddp_buf_t *removed);

/* Removes the checkpoint directory `dir` and what is in it, following no link: a link in it
 * is removed, not followed; a directory in it is removed only where empty. What appears
 * while it runs (a save finishing as its writer dies) is looked for again, twice. 0, -ENOENT
 * when there is no `dir`, or the first other -errno. Blocking: for a launcher's thread, its
 * end, or the orphan guard. */
int ddp_ckpt_remove_dir(const char *dir);

#endif
