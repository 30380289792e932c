/* Growable byte buffer (see buf.h). */
#include "buf.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int ddp_buf_reserve(ddp_buf_t *buf, size_t extra)
{
    if (extra > (size_t)-1 / 2 - buf->len)
        return -ENOMEM;
    size_t need = buf->len + extra + 1;
    if (need <= buf->cap)
        return 0;
    size_t cap = buf->cap ? buf->cap : 64;
    while (cap < need)
        cap *= 2;
    char *data = realloc(buf->data, cap);
    if (data == NULL)
        return -ENOMEM;
    buf->data = data;
    buf->cap = cap;
    return 0;
}

int ddp_buf_append(ddp_buf_t *buf, const void *data, size_t len)
{
    int err = ddp_buf_reserve(buf, len);
    if (err)
        return err;
    if (len)
        memcpy(buf->data + buf->len, data, len);
    buf->len += len;
    buf->data[buf->len] = '\0';
    return 0;
}

int ddp_buf_puts(ddp_buf_t *buf, const char *text)
{
    return ddp_buf_append(buf, text, strlen(text));
}

int ddp_buf_vprintf(ddp_buf_t *buf, const char *fmt, va_list ap)
{
    va_list copy;
    va_copy(copy, ap);
    int n = vsnprintf(NULL, 0, fmt, copy);
    va_end(copy);
    if (n < 0)
        return -EINVAL;
    int err = ddp_buf_reserve(buf, (size_t)n);
    if (err)
        return err;
    vsnprintf(buf->data + buf->len, (size_t)n + 1, fmt, ap);
    buf->len += (size_t)n;
    return 0;
}

int ddp_buf_printf(ddp_buf_t *buf, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int err = ddp_buf_vprintf(buf, fmt, ap);
    va_end(ap);
    return err;
}

const char *ddp_buf_str(const ddp_buf_t *buf)
{
    return buf->data ? buf->data : "";
}

void ddp_buf_clear(ddp_buf_t *buf)
{
    buf->len = 0;
    if (buf->data)
        buf->data[0] = '\0';
}

void ddp_buf_free(ddp_buf_t *buf)
{
    free(buf->data);
    buf->data = NULL;
    buf->len = 0;
    buf->cap = 0;
}

char *ddp_buf_steal(ddp_buf_t *buf)
{
    if (buf->data == NULL && ddp_buf_reserve(buf, 0) != 0)
        return NULL;
    buf->data[buf->len] = '\0';
    char *data = buf->data;
    buf->data = NULL;
    buf->len = 0;
    buf->cap = 0;
    return data;
}

void ddp_buf_runs(ddp_buf_t *out, const bool *skip, int n, int most, int base)
{
    int runs = 0;
    for (int i = 0; i < n; i++) {
        if (skip[i])
            continue;
        int last = i;
        while (last + 1 < n && !skip[last + 1])
            last++;
        if (runs == most) {
            ddp_buf_puts(out, ", ...");
            return;
        }
        ddp_buf_printf(out, "%s%d", runs ? ", " : "", base + i);
        if (last > i)
            ddp_buf_printf(out, "-%d", base + last);
        runs++;
        i = last;
    }
}

static int compare_ints(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

void ddp_buf_runs_of(ddp_buf_t *out, int *values, size_t n, int most)
{
    qsort(values, n, sizeof *values, compare_ints);
    int runs = 0;
    for (size_t i = 0; i < n;) {
        size_t last = i;
        while (last + 1 < n && (values[last + 1] == values[last] ||
                                (values[last] < INT_MAX && values[last + 1] == values[last] + 1)))
            last++;
        if (runs == most) {
            ddp_buf_puts(out, ", ...");
            return;
        }
        ddp_buf_printf(out, "%s%d", runs ? ", " : "", values[i]);
        if (values[last] > values[i])
            ddp_buf_printf(out, "-%d", values[last]);
        runs++;
        i = last + 1;
    }
}

/* The length of the well-formed UTF-8 sequence at s[0, len) of a code point U+00A0 or above
 * (no C1 control, no surrogate, no overlong form, at most U+10FFFF); 0 where there is none. */
static size_t utf8_printable(const unsigned char *s, size_t len)
{
    size_t n = s[0] >= 0xc2 && s[0] <= 0xdf   ? 2
               : s[0] >= 0xe0 && s[0] <= 0xef ? 3
               : s[0] >= 0xf0 && s[0] <= 0xf4 ? 4
                                              : 0;
    if (n == 0 || n > len)
        return 0;
    unsigned long cp = s[0] & (0x7f >> n);
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (s[i] & 0x3f);
    }
    static const unsigned long least[] = {0, 0, 0xa0, 0x800, 0x10000};
    bool ok = cp >= least[n] && cp <= 0x10ffff && (cp < 0xd800 || cp > 0xdfff);
    return ok ? n : 0;
}

int ddp_buf_printable(ddp_buf_t *out, const char *text, size_t len, bool lines)
{
    const unsigned char *s = (const unsigned char *)text;
    int err = 0;
    for (size_t i = 0; i < len && err == 0;) {
        size_t run = 0, n;
        while (i + run < len && ((s[i + run] >= 0x20 && s[i + run] < 0x7f) || s[i + run] == '\t' ||
                                 (lines && s[i + run] == '\n')))
            run++;
        if (run > 0) {
            err = ddp_buf_append(out, s + i, run);
            i += run;
        } else if ((n = utf8_printable(s + i, len - i)) > 0) {
            err = ddp_buf_append(out, s + i, n);
            i += n;
        } else {
            err = ddp_buf_printf(out, "\\x%02x", s[i]);
            i++;
        }
    }
    return err;
}

int ddp_buf_printable_cut(ddp_buf_t *out, const char *text, size_t len, size_t most, bool lines)
{
    size_t shown = len;
    if (len > most) { /* back to the start of the character cut, if it is a well-formed one */
        shown = most;
        for (size_t back = 0; back < 3 && shown > 0 && ((unsigned char)text[shown] & 0xc0) == 0x80;
             back++)
            shown--;
        if (utf8_printable((const unsigned char *)text + shown, len - shown) == 0)
            shown = most; /* no character there: its bytes are \xNN anyway */
    }
    int err = ddp_buf_printable(out, text, shown, lines);
    return err == 0 && shown < len ? ddp_buf_puts(out, "...") : err;
}
