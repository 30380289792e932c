/* libddp's steps in the launcher's progress ring (common/progress.h), the ring that
 * ddp_launch.step() writes for Python workers: every iteration a reducer completes
 * (ddp_reducer_wait) is a step, its time blocked in wait() the step's wait (the rank the
 * others wait for waits least). One ring a process, mapped at its first step, at
 * DDP_PROGRESS_RING (made there exclusively: a file there that is no ring is left as it
 * is); without it (a program run by hand, or under torchrun), and in a process forked
 * after, nothing is written. A step is a few stores to shared memory. */
#include "internal.h"

#include "env.h"
#include "progress.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static ddp_progress_ring_t *ring; /* NULL: none (yet) */
static pid_t owner;               /* the process that mapped it (or tried to): 0 before */

static int64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The ring file at `path`, mapped: made here, exclusively, or one already there (a ring
 * of this version and size, which an earlier process of the worker made). Any other file
 * is left as it is, said on `log`: DDP_PROGRESS_RING may name one the worker's user
 * cares about. NULL where there is none. */
static ddp_progress_ring_t *map_ring(const ddp_log_t *log, const char *path)
{
    ddp_progress_ring_t *mapped = NULL;
    struct stat st;
    bool made = true;
    int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0 && errno == EEXIST) {
        made = false;
        /* Never opened but as a regular file: opening a device may act. */
        if (lstat(path, &st) == 0 && S_ISREG(st.st_mode))
            fd = open(path, O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    }
    if (fd >= 0 && fstat(fd, &st) == 0 &&
        (made ? ftruncate(fd, sizeof *mapped) == 0
              : S_ISREG(st.st_mode) && st.st_size == (off_t)sizeof *mapped)) {
        void *p = mmap(NULL, sizeof *mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        mapped = p != MAP_FAILED ? p : NULL;
    }
    if (fd >= 0)
        close(fd);
    if (mapped != NULL && made) {
        mapped->version = DDP_PROGRESS_VERSION;
        __atomic_store_n(&mapped->magic, DDP_PROGRESS_MAGIC, __ATOMIC_RELEASE);
    } else if (mapped != NULL &&
               (mapped->magic != DDP_PROGRESS_MAGIC || mapped->version != DDP_PROGRESS_VERSION)) {
        munmap(mapped, sizeof *mapped);
        mapped = NULL;
    }
    if (mapped == NULL && !made)
        ddp_log_warn(log,
                     "progress not recorded: %s exists and is not a progress ring; it is "
                     "left as it is",
                     path);
    return mapped;
}

/* The ring, mapped at the first call of this process; NULL where there is none. */
static ddp_progress_ring_t *attach(const ddp_log_t *log)
{
    if (owner != 0)
        return owner == getpid() ? ring : NULL; /* a forked child writes nothing */
    owner = getpid();
    const char *path = getenv(ddp_env_name(DDP_ENV_DDP_PROGRESS_RING));
    if (path == NULL || *path == '\0')
        return NULL;
    ring = map_ring(log, path);
    if (ring != NULL)
        ring->pid = owner;
    return ring;
}

int64_t ddp_progress_now(void)
{
    return mono_ns();
}

void ddp_progress_step(const ddp_log_t *log, int64_t wait_ns)
{
    pthread_mutex_lock(&lock);
    ddp_progress_ring_t *r = attach(log);
    if (r != NULL) {
        int64_t now = mono_ns(), last = r->last_step_ns, n = r->steps + 1;
        ddp_progress_slot_t *slot = &r->slots[(n - 1) % DDP_PROGRESS_SLOTS];
        __atomic_store_n(&slot->step, 0, __ATOMIC_RELAXED); /* torn while it is written */
        slot->end_ns = now;
        slot->dur_ns = last > 0 ? now - last : 0;
        slot->wait_ns = last > 0 && wait_ns < now - last ? wait_ns : 0;
        __atomic_store_n(&slot->step, n, __ATOMIC_RELEASE);
        if (last > 0 && now - last > r->longest_step_ns)
            r->longest_step_ns = now - last;
        r->wait_ns += wait_ns;
        r->last_step_ns = now;
        __atomic_store_n(&r->steps, n, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&lock);
}
