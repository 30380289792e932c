/* The progress ring's reader (see progress.h). */
#include "progress.h"

#include "ddp_errors.h"
#include "io.h"

#include <stdbool.h>
#include <time.h>

static bool within(int64_t value, int64_t most)
{
    return value >= 0 && value <= most;
}

/* Whether every value the launcher uses is in range. Times and durations are of this
 * host's CLOCK_MONOTONIC (read after the copy), which none the worker measured can pass;
 * waits, summed over the worker's threads, are not (a step's is used only within its
 * duration). */
static bool in_range(const ddp_progress_ring_t *ring)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    int64_t now = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
    if (!within(ring->steps, DDP_PROGRESS_MAX_STEPS) ||
        !within(ring->section, DDP_PROGRESS_SECTIONS) || !within(ring->last_step_ns, now) ||
        !within(ring->section_ns, now) || !within(ring->section_exit_ns, now) ||
        !within(ring->longest_step_ns, now))
        return false;
    for (int i = 0; i < DDP_PROGRESS_SLOTS; i++) {
        const ddp_progress_slot_t *s = &ring->slots[i];
        if (!within(s->step, DDP_PROGRESS_MAX_STEPS) || !within(s->end_ns, now) ||
            !within(s->dur_ns, now))
            return false;
    }
    for (int i = 0; i < DDP_PROGRESS_SECTIONS; i++)
        if (!within(ring->sections[i].count, INT64_MAX) || !within(ring->sections[i].max_ns, now))
            return false;
    return true;
}

int ddp_progress_read(const char *path, ddp_progress_ring_t *out)
{
    int err = ddp_read_head(path, out, sizeof *out);
    if (err)
        return err;
    if (out->magic != DDP_PROGRESS_MAGIC || out->version != DDP_PROGRESS_VERSION || !in_range(out))
        return DDP_EPARSE;
    for (int i = 0; i < DDP_PROGRESS_SECTIONS; i++)
        out->sections[i].name[DDP_PROGRESS_NAME - 1] = '\0';
    return 0;
}

const ddp_progress_slot_t *ddp_progress_slot(const ddp_progress_ring_t *ring, int64_t step)
{
    if (step <= 0)
        return NULL;
    const ddp_progress_slot_t *s = &ring->slots[(step - 1) % DDP_PROGRESS_SLOTS];
    return s->step == step ? s : NULL;
}
