/* In-memory checkpoints' checksums, in the background (see agent/checkpoint_sums.h). The
 * thread's look: every rank<R>.<s> file of the directory, opened following no link, its
 * header read with pread (a worker may cut its file at any time: never a mapping), a
 * complete slot without a checksum of its generation summed a MiB at a time, the header
 * read again (ckpt.h's sequence lock) and the sum written, then its generation, through a
 * descriptor of the same file. What is wrong with a file is said once for that file. */
#include "agent/checkpoint_sums.h"

#include "buf.h"
#include "ckpt.h"
#include "ckpt_file.h"
#include "error.h"
#include "io.h"
#ifdef DDP_HAVE_TORCHZIP
#include "torchzip.h"
#endif

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* How often the directory is looked at while it holds files (a save is written through a
 * mapping: no file event says it); the thread's nice value (below the workers'); its rest
 * after a look, at least REST_SHARE times the look's time (sums and copies): at most a
 * quarter of a CPU, whatever the workers save. While the directory holds no file (a job
 * that keeps no checkpoint) the thread sleeps until one is made there (inotify), or
 * EMPTY_LOOK_MS; EMPTY_POLL_MS where inotify is refused (fs.inotify.max_user_instances,
 * 128 a user by default: thousands of simulated nodes on one host): they do not each wake
 * ten times a second for nothing. */
#define LOOK_MS       100
#define EMPTY_LOOK_MS 10000
#define EMPTY_POLL_MS 1000
#define NICE          10
#define REST_SHARE    3.0
/* The files whose trouble is remembered (said once each); more are said each look. */
#define SAID_MAX 256

/* A file whose trouble was said: said again only once it is another file. */
typedef struct {
    char name[64];
    dev_t dev;
    ino_t ino;
    off_t size;
} said_t;

/* A rank's newest complete, checksummed slot at a look; or what was persisted of it. */
typedef struct {
    int rank;
    uint64_t generation;
    char name[64];
} newest_t;

struct ddp_checkpoint_sums_s {
    char dir[PATH_MAX];
    char persist_dir[PATH_MAX]; /* --checkpoint-dir, or "" */
    int every;                  /* --checkpoint-persist-every */
    bool persist_all;           /* the last look: every rank's newest is persisted */
    newest_t *newest, *persisted;
    size_t nnewest, npersisted;
    const ddp_log_t *log;
    pthread_t thread;
    pthread_mutex_t lock; /* stop and persist_all */
    int wake_fd;          /* an eventfd: stop was asked */
    int notify_fd;        /* inotify on dir (files made, moved in); -1: none */
    int wd;               /* its watch; -1: none */
    bool watching;        /* the watch is of the directory the last look read */
    bool stop;
    bool empty; /* the last look found no file in dir */
    atomic_bool cancel;
    _Atomic uint64_t held, peak;
    said_t said[SAID_MAX];
    int nsaid;
    void (*summed)(void *ctx); /* told after a look that wrote a sum (NULL: none) */
    void *summed_ctx;
    bool wrote; /* this look wrote a sum */
};

/* Whether trouble was said of this file (this name, inode and size) already; remembers it
 * where not. */
static bool said_before(ddp_checkpoint_sums_t *s, const char *name, const struct stat *st)
{
    for (int i = 0; i < s->nsaid; i++)
        if (strcmp(s->said[i].name, name) == 0) {
            bool same = s->said[i].dev == st->st_dev && s->said[i].ino == st->st_ino &&
                        s->said[i].size == st->st_size;
            s->said[i] = (said_t){.dev = st->st_dev, .ino = st->st_ino, .size = st->st_size};
            snprintf(s->said[i].name, sizeof s->said[i].name, "%s", name);
            return same;
        }
    if (s->nsaid < SAID_MAX) {
        s->said[s->nsaid] = (said_t){.dev = st->st_dev, .ino = st->st_ino, .size = st->st_size};
        snprintf(s->said[s->nsaid++].name, sizeof s->said[0].name, "%s", name);
    }
    return false;
}

static void say(ddp_checkpoint_sums_t *s, const char *name, const struct stat *st, const char *why)
{
    if (!said_before(s, name, st))
        ddp_log_warn(s->log, "in-memory checkpoints: %s/%s is not checksummed: %s", s->dir, name,
                     why);
}

/* Writes `sum` and then `generation` into the slot at `path`, through a descriptor of the
 * same file as `st` (the name may have been given to another meanwhile); whether it did. */
static bool write_sum(const char *path, const struct stat *st, uint64_t sum, uint64_t generation)
{
    struct stat now;
    bool written = false;
    int fd = open(path, O_WRONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return false;
    if (fstat(fd, &now) == 0 && now.st_dev == st->st_dev && now.st_ino == st->st_ino &&
        pwrite(fd, &sum, 8, offsetof(ddp_ckpt_header_t, checksum)) == 8)
        written = pwrite(fd, &generation, 8, offsetof(ddp_ckpt_header_t, checksum_generation)) == 8;
    close(fd);
    return written;
}

/* One slot file, `name` in the directory: summed where it is complete and not yet. True
 * when it is complete and summed now, its header in *out. */
static bool sum_slot(ddp_checkpoint_sums_t *s, const char *name, const struct stat *st,
                     ddp_ckpt_header_t *out)
{
    bool summed = false;
    char path[PATH_MAX + 64];
    ddp_buf_t why = DDP_BUF_INIT;
    ddp_ckpt_header_t h, again;
    uint64_t size, sum;
    snprintf(path, sizeof path, "%s/%s", s->dir, name);
    if (S_ISLNK(st->st_mode) || !S_ISREG(st->st_mode)) {
        say(s, name, st,
            S_ISLNK(st->st_mode) ? "it is a symbolic link" : "it is not a regular file");
        return false;
    }
    int fd = ddp_open_worker_file(path);
    if (fd < 0)
        return false; /* gone, or replaced meanwhile: the next look */
    if (ddp_ckpt_pread_header(fd, &h, &size, NULL) != 0 || h.state != DDP_CKPT_COMPLETE)
        goto out; /* being written */
    if (ddp_ckpt_size_check(&h, st, &why) != 0) {
        say(s, name, st, ddp_buf_str(&why));
        goto out;
    }
    if (h.checksum_generation == h.generation)
        summed = true;
    else if (ddp_ckpt_sum_file(fd, &h, &s->cancel, &sum, NULL) == 0 &&
             ddp_ckpt_pread_header(fd, &again, &size, NULL) == 0 &&
             again.generation == h.generation && again.state == DDP_CKPT_COMPLETE &&
             again.checksum_generation != h.generation)
        s->wrote = summed = write_sum(path, st, sum, h.generation);
out:
    close(fd);
    ddp_buf_free(&why);
    if (summed)
        *out = h;
    return summed;
}

/* Rank `rank`'s entry in `list` (of *n), added (generation 0) where it is not there; NULL
 * without memory. */
static newest_t *entry_of(newest_t **list, size_t *n, int rank)
{
    for (size_t i = 0; i < *n; i++)
        if ((*list)[i].rank == rank)
            return &(*list)[i];
    newest_t *grown = realloc(*list, (*n + 1) * sizeof *grown);
    if (grown == NULL)
        return NULL;
    *list = grown;
    grown[*n] = (newest_t){.rank = rank};
    return &grown[(*n)++];
}

#ifdef DDP_HAVE_TORCHZIP
/* Writes the copy at `copy` (this launcher's own file, mapped whole and read only) in
 * torch.save's format as <dir>/rank<R>.pt, under another name first, synced and renamed,
 * for resume code that calls torch.load. 0, or an error with `why`. */
static int write_pt(const char *dir, int rank, const char *copy, ddp_buf_t *why)
{
    char tmp[PATH_MAX + 64], final[PATH_MAX + 64];
    struct stat st;
    ddp_ckpt_t c;
    void *map = MAP_FAILED;
    int out = -1, err = 0;
    snprintf(final, sizeof final, "%s/rank%d.pt", dir, rank);
    snprintf(tmp, sizeof tmp, "%s/.rank%d.pt.%d.tmp", dir, rank, (int)getpid());
    errno = 0;
    int in = open(copy, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (in < 0 || fstat(in, &st) != 0 || st.st_size < DDP_CKPT_HEADER_BYTES ||
        (map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, in, 0)) == MAP_FAILED)
        err = -errno != 0 ? -errno : -EINVAL;
    if (err == 0)
        err = ddp_ckpt_parse(map, (size_t)st.st_size, &c, why);
    if (err == 0 &&
        (out = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600)) < 0)
        err = -errno;
    if (err == 0)
        err = ddp_torchzip_write_slot(out, &c, NULL, why);
    if (err == 0 && fsync(out) != 0)
        err = -errno;
    if (out >= 0 && close(out) != 0 && err == 0)
        err = -errno;
    if (err == 0 && rename(tmp, final) != 0)
        err = -errno;
    if (err != 0 && out >= 0)
        unlink(tmp);
    if (map != MAP_FAILED)
        munmap(map, (size_t)st.st_size);
    if (in >= 0)
        close(in);
    return err;
}
#endif

/* --checkpoint-dir: rank `n`'s newest slot copied to <dir>/rank<R>.ckpt where it is due (the
 * --checkpoint-persist-every-th save since the last copy, or the last look's). */
static void persist(ddp_checkpoint_sums_t *s, const newest_t *n)
{
    newest_t *done = entry_of(&s->persisted, &s->npersisted, n->rank);
    if (done == NULL || n->generation <= done->generation ||
        !(s->persist_all ||
          (s->every > 0 && n->generation >= done->generation + (uint64_t)s->every)))
        return;
    char path[PATH_MAX + 64], name[64];
    ddp_buf_t why = DDP_BUF_INIT;
    ddp_ckpt_header_t h = {0};
    uint64_t size;
    snprintf(path, sizeof path, "%s/%s", s->dir, n->name);
    snprintf(name, sizeof name, "rank%d.ckpt", n->rank);
    int fd = ddp_open_worker_file(path), err = fd < 0 ? fd : 0;
    if (err == 0 && (ddp_ckpt_pread_header(fd, &h, &size, NULL) != 0 ||
                     h.generation != n->generation || h.state != DDP_CKPT_COMPLETE))
        err = -EAGAIN; /* taken by a save meanwhile: the next look */
    if (err == 0)
        err = ddp_ckpt_copy(fd, &h, s->persist_dir, name, &s->cancel, &why);
    if (fd >= 0)
        close(fd);
    if (err != -EAGAIN) /* a failure is said once for this generation */
        done->generation = n->generation;
#ifdef DDP_HAVE_TORCHZIP
    char copy[PATH_MAX + 64];
    ddp_buf_t pt_why = DDP_BUF_INIT;
    snprintf(copy, sizeof copy, "%s/%s", s->persist_dir, name);
    bool want_pt = err == 0 && h.kind != DDP_CKPT_BUFFERS; /* (libddp's: the .ckpt) */
    int pt = want_pt ? write_pt(s->persist_dir, n->rank, copy, &pt_why) : 0;
    if (want_pt && pt == 0)
        snprintf(name, sizeof name, "rank%d.ckpt and .pt", n->rank);
    else if (want_pt)
        ddp_log_warn(s->log,
                     "in-memory checkpoints: rank %d's step %" PRId64
                     " not written in torch.save's format to %s: %s",
                     n->rank, h.step, s->persist_dir,
                     pt_why.len > 0 ? ddp_buf_str(&pt_why) : ddp_strerror(pt));
    ddp_buf_free(&pt_why);
#endif
    if (err == 0)
        ddp_log_info(s->log, "in-memory checkpoints: rank %d's step %" PRId64 " copied to %s/%s",
                     n->rank, h.step, s->persist_dir, name);
    else if (err != -EAGAIN && err != -ECANCELED)
        ddp_log_warn(s->log, "in-memory checkpoints: rank %d's checkpoint not copied to %s: %s",
                     n->rank, s->persist_dir, why.len > 0 ? ddp_buf_str(&why) : ddp_strerror(err));
    ddp_buf_free(&why);
}

/* Whether `name` is a slot's: rank<R>.<0 or 1> (*rank set). */
static bool slot_name(const char *name, int *rank)
{
    int slot, end = 0;
    return sscanf(name, "rank%d.%d%n", rank, &slot, &end) == 2 && name[end] == '\0' && *rank >= 0 &&
           (slot == 0 || slot == 1);
}

/* The watch's events read and dropped (they are not needed: a look reads the directory),
 * so that those of a directory with files, not waited on, do not pile up; a bounded read. */
static void drain(ddp_checkpoint_sums_t *s)
{
    char events[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
    for (int i = 0; i < 64 && s->notify_fd >= 0; i++)
        if (read(s->notify_fd, events, sizeof events) <= 0)
            break;
}

/* The watch on the directory open at `dfd`, made again where it is of another one (the
 * directory removed, or another put in its place, by a worker: the old watch would never
 * fire again, and the thread sleep its EMPTY_LOOK_MS through saves). */
static void watch(ddp_checkpoint_sums_t *s, int dfd)
{
    struct stat open_st, named_st;
    drain(s);
    s->watching = false;
    if (s->notify_fd < 0 || dfd < 0 || fstat(dfd, &open_st) != 0)
        return;
    int wd = inotify_add_watch(s->notify_fd, s->dir,
                               IN_CREATE | IN_MOVED_TO | IN_DELETE_SELF | IN_MOVE_SELF |
                                   IN_ONLYDIR | IN_DONT_FOLLOW);
    if (s->wd >= 0 && wd != s->wd) /* (one of a directory since gone, or moved away) */
        (void)inotify_rm_watch(s->notify_fd, s->wd);
    s->wd = wd;
    s->watching = wd >= 0 && fstatat(AT_FDCWD, s->dir, &named_st, AT_SYMLINK_NOFOLLOW) == 0 &&
                  named_st.st_dev == open_st.st_dev && named_st.st_ino == open_st.st_ino;
}

/* One look at the directory: the bytes held, and the slots summed. */
static void look(ddp_checkpoint_sums_t *s)
{
    int dfd = open(s->dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    watch(s, dfd);
    DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
    if (d == NULL) {
        if (dfd >= 0)
            close(dfd);
        return;
    }
    uint64_t held = 0;
    const struct dirent *e;
    s->nnewest = 0;
    s->empty = true;
    while ((e = readdir(d)) != NULL && !atomic_load(&s->cancel)) {
        struct stat st;
        ddp_ckpt_header_t h;
        newest_t *n;
        int rank;
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        s->empty = false;
        if (e->d_name[0] == '.' || fstatat(dfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0)
            continue;
        if (S_ISREG(st.st_mode))
            held += (uint64_t)st.st_blocks * 512;
        if (slot_name(e->d_name, &rank) && sum_slot(s, e->d_name, &st, &h) &&
            s->persist_dir[0] != '\0' && h.rank == (uint32_t)rank &&
            (n = entry_of(&s->newest, &s->nnewest, rank)) != NULL && h.generation > n->generation) {
            n->generation = h.generation;
            snprintf(n->name, sizeof n->name, "%.63s", e->d_name);
        }
    }
    closedir(d);
    for (size_t i = 0; i < s->nnewest && !atomic_load(&s->cancel); i++)
        persist(s, &s->newest[i]);
    atomic_store(&s->held, held);
    if (held > atomic_load(&s->peak))
        atomic_store(&s->peak, held);
}

/* The thread's rest after a look: until `until` (monotonic), or a stop; with `files`
 * watched, a file made in the directory ends it at `soonest` (a look's least rest: a worker
 * that makes files in a loop gets no more looks than one that saves). */
static void rest_until(ddp_checkpoint_sums_t *s, double until, double soonest, bool files)
{
    struct pollfd fds[2] = {{.fd = s->wake_fd, .events = POLLIN},
                            {.fd = files ? s->notify_fd : -1, .events = POLLIN}};
    for (double left; (left = until - ddp_clock_mono()) > 0;) {
        int n = poll(fds, 2, (int)(left * 1000) + 1);
        if (n < 0 && errno != EINTR)
            return;
        if (n > 0 && fds[0].revents != 0)
            return;
        if (n > 0 && fds[1].revents != 0) {
            drain(s);
            fds[1].fd = -1;
            until = soonest < until ? soonest : until;
        }
    }
}

static bool stopping(ddp_checkpoint_sums_t *s)
{
    pthread_mutex_lock(&s->lock);
    bool stop = s->stop;
    pthread_mutex_unlock(&s->lock);
    return stop;
}

static void *sums_main(void *arg)
{
    ddp_checkpoint_sums_t *s = arg;
    (void)setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), NICE); /* this thread only */
    while (!stopping(s)) {
        double began = ddp_clock_mono();
        s->wrote = false;
        look(s);
        if (s->wrote && s->summed != NULL)
            s->summed(s->summed_ctx);
        double now = ddp_clock_mono(), rest = REST_SHARE * (now - began);
        double least = !s->empty ? LOOK_MS : s->watching ? EMPTY_LOOK_MS : EMPTY_POLL_MS;
        double soonest = now + (rest > LOOK_MS / 1e3 ? rest : LOOK_MS / 1e3);
        if (rest < least / 1e3)
            rest = least / 1e3;
        rest_until(s, now + rest, soonest, s->empty && s->watching);
    }
    pthread_mutex_lock(&s->lock);
    bool last = s->persist_all;
    pthread_mutex_unlock(&s->lock);
    if (last) /* the job failed or was stopped: every rank's newest to disk */
        look(s);
    return NULL;
}

static void close_sums_fds(ddp_checkpoint_sums_t *s)
{
    if (s != NULL && s->wake_fd >= 0)
        close(s->wake_fd);
    if (s != NULL && s->notify_fd >= 0)
        close(s->notify_fd);
}

int ddp_checkpoint_sums_start(const char *dir, const char *persist_dir, int every,
                              void (*summed)(void *ctx), void *ctx, const ddp_log_t *log,
                              ddp_checkpoint_sums_t **out)
{
    ddp_checkpoint_sums_t *s = calloc(1, sizeof *s);
    int err = s == NULL ? ENOMEM : 0;
    if (err == 0) {
        s->notify_fd = -1;
        s->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        err = s->wake_fd < 0 ? errno : 0;
    }
    if (err == 0) {
        snprintf(s->dir, sizeof s->dir, "%s", dir);
        snprintf(s->persist_dir, sizeof s->persist_dir, "%s", persist_dir ? persist_dir : "");
        s->every = every;
        s->summed = summed;
        s->summed_ctx = ctx;
        s->log = log;
        pthread_mutex_init(&s->lock, NULL);
        /* (without a watch: an empty directory looked at every EMPTY_POLL_MS; the watch
         * is made at each look, watch()) */
        s->notify_fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
        s->wd = -1;
        err = pthread_create(&s->thread, NULL, sums_main, s);
        if (err == 0)
            (void)pthread_setname_np(s->thread, "ddp-ckpt-sums");
    }
    if (err != 0) {
        ddp_log_warn(log,
                     "in-memory checkpoints: unable to start the checksums' thread: %s; "
                     "slots are loaded unchecked",
                     strerror(err));
        if (s != NULL && s->wake_fd >= 0)
            pthread_mutex_destroy(&s->lock);
        close_sums_fds(s);
        free(s);
        return -err;
    }
    *out = s;
    return 0;
}

uint64_t ddp_checkpoint_sums_held(const ddp_checkpoint_sums_t *s, uint64_t *peak)
{
    if (peak != NULL)
        *peak = s != NULL ? atomic_load(&s->peak) : 0;
    return s != NULL ? atomic_load(&s->held) : 0;
}

void ddp_checkpoint_sums_stop(ddp_checkpoint_sums_t *s, bool persist)
{
    if (s == NULL)
        return;
    persist = persist && s->persist_dir[0] != '\0';
    if (!persist)
        atomic_store(&s->cancel, true);
    pthread_mutex_lock(&s->lock);
    s->stop = true;
    s->persist_all = persist;
    pthread_mutex_unlock(&s->lock);
    uint64_t one = 1;
    (void)!write(s->wake_fd, &one, sizeof one);
    pthread_join(s->thread, NULL);
    pthread_mutex_destroy(&s->lock);
    close_sums_fds(s);
    free(s->newest);
    free(s->persisted);
    free(s);
}
