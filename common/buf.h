/* A growable byte buffer, used to assemble lines, reports and command lines.
 *
 * The buffer owns its memory; data is always NUL-terminated after `len` bytes so
 * text can be used as a C string. Appends return 0 or -ENOMEM and leave the buffer
 * unchanged on failure. */
#ifndef DDP_COMMON_BUF_H
#define DDP_COMMON_BUF_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct ddp_buf_s {
    char *data; /* NULL until the first append */
    size_t len;
    size_t cap;
} ddp_buf_t;

#define DDP_BUF_INIT \
    {                \
        NULL, 0, 0   \
    }

int ddp_buf_reserve(ddp_buf_t *buf, size_t extra);
int ddp_buf_append(ddp_buf_t *buf, const void *data, size_t len);
int ddp_buf_puts(ddp_buf_t *buf, const char *text);
int ddp_buf_printf(ddp_buf_t *buf, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int ddp_buf_vprintf(ddp_buf_t *buf, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0)));

/* The text so far ("" for an empty buffer). */
const char *ddp_buf_str(const ddp_buf_t *buf);

/* Forgets the contents but keeps the memory. */
void ddp_buf_clear(ddp_buf_t *buf);

/* Gives the memory back; the buffer is empty and reusable afterwards. */
void ddp_buf_free(ddp_buf_t *buf);

/* Hands the memory to the caller (who frees it) and empties the buffer. Never NULL
 * unless out of memory. */
char *ddp_buf_steal(ddp_buf_t *buf);

/* Appends text[0, len) as a terminal may show it, whoever wrote it (a worker, a file, a
 * peer): printable ASCII, tabs, newlines where `lines`, and well-formed UTF-8 of U+00A0 and
 * above as they are; every other byte (a control character, an escape sequence's ESC, a C1
 * control, a byte of no character) as \xNN. 0 or -ENOMEM. */
int ddp_buf_printable(ddp_buf_t *out, const char *text, size_t len, bool lines);
/* As ddp_buf_printable, of text[0, len)'s first `most` bytes at most (cut at a character's
 * start), then "..." where some were left out: a line's share of what others wrote. */
int ddp_buf_printable_cut(ddp_buf_t *out, const char *text, size_t len, size_t most, bool lines);

/* Appends base + i for each i in [0, n) with skip[i] false, as runs ("1-3, 5, 9"), at most
 * `most` of them named (then ", ..."): the ranks, nodes or places a message lists. */
void ddp_buf_runs(ddp_buf_t *out, const bool *skip, int n, int most, int base);
/* As ddp_buf_runs, of the distinct values[0, n) in any order (sorted in place): its cost
 * follows n, not the largest value (a rank another node or a worker said). */
void ddp_buf_runs_of(ddp_buf_t *out, int *values, size_t n, int most);

#endif
