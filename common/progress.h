/* The progress ring: a worker's steps and sections as the launcher sees them, written by
 * the `ddp_launch` Python module (ddp_launch.step(), ddp_launch.section()) into the file
 * the launcher names in DDP_PROGRESS_RING (<worker dir>/progress.ring).
 *
 * One writer, the worker's thread that calls step(); a call is a few stores into shared
 * memory (mmap), no system call. Every field is a little-endian int64 ("word"); times are
 * CLOCK_MONOTONIC nanoseconds, the same clock as the launcher's on that host. A reader
 * takes a copy (ddp_progress_read) and trusts a step slot whose step number matches its
 * place: one being rewritten may be torn, which costs one sample. The worker may write
 * anything there: the reader takes no ring with a value out of range, so that what it
 * returns bounds every loop and sum over it. Pure layout and reader. */
#ifndef DDP_COMMON_PROGRESS_H
#define DDP_COMMON_PROGRESS_H

#include <stddef.h>
#include <stdint.h>

#define DDP_PROGRESS_MAGIC    0x3130304750504444ll /* "DDPPG001", little-endian */
#define DDP_PROGRESS_VERSION  1
#define DDP_PROGRESS_SLOTS    64 /* the last steps kept */
#define DDP_PROGRESS_SECTIONS 16 /* section names kept (the first 16 seen) */
#define DDP_PROGRESS_NAME     24 /* bytes of a section's name, NUL-padded */
#define DDP_PROGRESS_FILE     "progress.ring"
/* The most steps a ring counts: a step a microsecond for 285 years, exact in a double. */
#define DDP_PROGRESS_MAX_STEPS (1ll << 53)

typedef struct {
    int64_t step;    /* the step that ended here, from 1; 0: an empty slot */
    int64_t end_ns;  /* when step() was called */
    int64_t dur_ns;  /* since the step before (or the first call) */
    int64_t wait_ns; /* of it, inside collectives (torch.distributed's, timed) */
} ddp_progress_slot_t;

typedef struct {
    char name[DDP_PROGRESS_NAME]; /* "" for an unused entry; UTF-8 */
    int64_t count;                /* times it ended */
    int64_t max_ns;               /* its longest */
    int64_t total_ns;
} ddp_progress_section_t;

typedef struct {
    int64_t magic, version, pid;
    int64_t steps;           /* step() calls */
    int64_t last_step_ns;    /* the last one's time (0: none yet) */
    int64_t wait_ns;         /* time inside collectives so far */
    int64_t section;         /* 1 + the index of the section it is in; 0: none */
    int64_t section_ns;      /* when it entered that section */
    int64_t section_exit_ns; /* when it last left a section */
    int64_t longest_step_ns; /* longest time between steps spent outside sections */
    int64_t collective_ns;   /* when it began waiting in a collective it is in (0: none) */
    int64_t reserved[5];
    ddp_progress_slot_t slots[DDP_PROGRESS_SLOTS]; /* step s at slots[(s - 1) % SLOTS] */
    ddp_progress_section_t sections[DDP_PROGRESS_SECTIONS];
} ddp_progress_ring_t;

_Static_assert(sizeof(ddp_progress_slot_t) == 32, "a step slot is 4 words");
_Static_assert(sizeof(ddp_progress_section_t) == 48, "a section is 6 words");
_Static_assert(sizeof(ddp_progress_ring_t) == 128 + 32 * 64 + 48 * 16, "the ring's size");

/* Reads the ring file at `path` into *out (ddp_read_head: following no link). 0; -errno;
 * DDP_EPARSE when it is not a ring of this version (too short, another magic) or holds a
 * value out of range: steps and slots' steps in 0..DDP_PROGRESS_MAX_STEPS, `section` in
 * 0..DDP_PROGRESS_SECTIONS, times and durations (not waits, not sections' totals) in
 * 0..now. Section names come back as valid UTF-8 without control characters (a character
 * cut at the end dropped, others a '?'). */
int ddp_progress_read(const char *path, ddp_progress_ring_t *out);

/* The slot of step `step`, or NULL when the ring no longer (or never) held it. */
const ddp_progress_slot_t *ddp_progress_slot(const ddp_progress_ring_t *ring, int64_t step);

#endif
