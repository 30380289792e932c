/* The progress ring's reader (see progress.h). */
#include "progress.h"

#include "ddp_errors.h"
#include "io.h"

int ddp_progress_read(const char *path, ddp_progress_ring_t *out)
{
    int err = ddp_read_head(path, out, sizeof *out);
    if (err)
        return err;
    if (out->magic != DDP_PROGRESS_MAGIC || out->version != DDP_PROGRESS_VERSION)
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
