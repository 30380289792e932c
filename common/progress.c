/* The progress ring's reader (see progress.h). */
#include "progress.h"

#include "ddp_errors.h"
#include "io.h"

#include <stdbool.h>
#include <string.h>
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

/* The length of the UTF-8 character at s[0..left) (*cp its code point); 0 where the bytes
 * are no character, or one cut by the end (*cut). */
static size_t utf8_char(const unsigned char *s, size_t left, uint32_t *cp, bool *cut)
{
    static const uint32_t least[] = {0, 0, 0x80, 0x800, 0x10000};
    size_t n = s[0] < 0x80                   ? 1
               : s[0] >= 0xC2 && s[0] < 0xE0 ? 2
               : s[0] >= 0xE0 && s[0] < 0xF0 ? 3
               : s[0] >= 0xF0 && s[0] < 0xF5 ? 4
                                             : 0;
    uint32_t v = n == 1 ? s[0] : s[0] & (0x7Fu >> n);
    *cut = false;
    for (size_t i = 1; i < n; i++) {
        if (i == left) {
            *cut = true;
            return 0;
        }
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        v = v << 6 | (s[i] & 0x3Fu);
    }
    if (n == 0 || v < least[n] || v > 0x10FFFF || (v >= 0xD800 && v < 0xE000))
        return 0;
    *cp = v;
    return n;
}

/* A section's name as the launcher shows it, in a terminal and in JSON: a character cut at
 * the end (by a writer that cut the name mid-character) is dropped; a byte that is no
 * UTF-8 and a control character (C0, DEL, C1: a terminal acts on them) are a '?'. */
static void clean_name(char *name, size_t cap)
{
    name[cap - 1] = '\0';
    size_t len = strlen(name), kept = 0;
    for (size_t i = 0; i < len;) {
        uint32_t cp = 0;
        bool cut;
        size_t n = utf8_char((const unsigned char *)name + i, len - i, &cp, &cut);
        if (cut)
            break;
        if (n == 0 || cp < 0x20 || (cp >= 0x7F && cp < 0xA0)) {
            name[kept++] = '?';
            i += n > 0 ? n : 1;
            continue;
        }
        memmove(name + kept, name + i, n);
        kept += n;
        i += n;
    }
    name[kept] = '\0';
}

int ddp_progress_read(const char *path, ddp_progress_ring_t *out)
{
    int err = ddp_read_head(path, out, sizeof *out);
    if (err)
        return err;
    if (out->magic != DDP_PROGRESS_MAGIC || out->version != DDP_PROGRESS_VERSION || !in_range(out))
        return DDP_EPARSE;
    for (int i = 0; i < DDP_PROGRESS_SECTIONS; i++)
        if (out->sections[i].name[0] != '\0')
            clean_name(out->sections[i].name, DDP_PROGRESS_NAME);
    return 0;
}

const ddp_progress_slot_t *ddp_progress_slot(const ddp_progress_ring_t *ring, int64_t step)
{
    if (step <= 0)
        return NULL;
    const ddp_progress_slot_t *s = &ring->slots[(step - 1) % DDP_PROGRESS_SLOTS];
    return s->step == step ? s : NULL;
}
