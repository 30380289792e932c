/* Slurm host lists (see slurm.h), expanded as Slurm's hostlist.c does: the text is
 * walked once per host, bracket by bracket, so nothing is allocated but the name being
 * built. */
#include "config/slurm.h"

#include "error.h"

#include <ctype.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_HOSTS 1000000
#define MAX_NAME  1024

typedef struct {
    int (*emit)(void *ctx, const char *host);
    void *ctx;
    ddp_buf_t *why;
    const char *entry; /* for messages */
    size_t entry_len;
    size_t hosts;
    bool stop;
    char name[MAX_NAME];
} walk_t;

static int bad(walk_t *w, const char *what)
{
    ddp_buf_printf(w->why, "the host list entry '%.*s': %s", (int)w->entry_len, w->entry, what);
    return DDP_EPARSE;
}

static int append(walk_t *w, size_t *len, const char *text, size_t n)
{
    if (*len + n >= sizeof w->name)
        return bad(w, "a host name over 1023 characters");
    memcpy(w->name + *len, text, n);
    *len += n;
    w->name[*len] = '\0';
    return 0;
}

/* Reads a decimal number of at most 9 digits at *p; its digit count goes to *width. */
static bool number(const char **p, const char *end, long *value, int *width)
{
    const char *s = *p;
    long v = 0;
    int n = 0;
    while (s < end && isdigit((unsigned char)*s) && n < 10) {
        v = v * 10 + (*s - '0');
        s++;
        n++;
    }
    if (n == 0 || n > 9)
        return false;
    *p = s;
    *value = v;
    *width = n;
    return true;
}

/* Expands text[0, n) after the name's first `len` characters. */
static int expand(walk_t *w, size_t len, const char *text, size_t n)
{
    const char *open = memchr(text, '[', n), *end = text + n;
    int err;
    if (open == NULL) {
        if (memchr(text, ']', n) != NULL)
            return bad(w, "']' without '['");
        if ((err = append(w, &len, text, n)) != 0)
            return err;
        if (len == 0)
            return bad(w, "an empty host name");
        if (++w->hosts > MAX_HOSTS)
            return bad(w, "more than 1000000 hosts");
        if (w->emit(w->ctx, w->name) != 0)
            w->stop = true;
        return 0;
    }
    const char *close = memchr(open, ']', (size_t)(end - open));
    if (close == NULL)
        return bad(w, "'[' without ']'");
    if (memchr(text, ']', (size_t)(open - text)) != NULL)
        return bad(w, "']' without '['");
    if ((err = append(w, &len, text, (size_t)(open - text))) != 0)
        return err;
    /* Each range of the bracket in turn, each value of the range in turn. */
    const char *p = open + 1;
    if (p == close)
        return bad(w, "an empty '[]'");
    while (p < close && !w->stop) {
        long lo, hi;
        int width, hi_width;
        if (!number(&p, close, &lo, &width))
            return bad(w, "a bracket holds something other than numbers and ranges");
        hi = lo;
        if (p < close && *p == '-') {
            p++;
            if (!number(&p, close, &hi, &hi_width))
                return bad(w, "a range without its upper bound");
            if (hi < lo)
                return bad(w, "a range whose upper bound is below its lower one");
        }
        if (p < close && *p != ',')
            return bad(w, "a bracket holds something other than numbers and ranges");
        if (p < close)
            p++;
        if (p == close && p[-1] == ',')
            return bad(w, "a bracket ends with ','");
        for (long v = lo; v <= hi && !w->stop; v++) {
            char digits[16];
            int k = snprintf(digits, sizeof digits, "%0*ld", width, v);
            size_t at = len;
            if ((err = append(w, &at, digits, (size_t)k)) != 0 ||
                (err = expand(w, at, close + 1, (size_t)(end - close - 1))) != 0)
                return err;
        }
    }
    return 0;
}

int ddp_slurm_hostlist_each(const char *list, int (*emit)(void *ctx, const char *host), void *ctx,
                            ddp_buf_t *why)
{
    walk_t w = {.emit = emit, .ctx = ctx, .why = why};
    const char *p = list;
    if (list == NULL || *list == '\0') {
        ddp_buf_puts(why, "the host list is empty");
        return DDP_EPARSE;
    }
    /* Entries end at a comma outside brackets. */
    while (!w.stop) {
        const char *q = p;
        int depth = 0;
        while (*q != '\0' && (*q != ',' || depth > 0)) {
            depth += *q == '[' ? 1 : *q == ']' ? -1 : 0;
            q++;
        }
        w.entry = p;
        w.entry_len = (size_t)(q - p);
        int err = expand(&w, 0, p, (size_t)(q - p));
        if (err)
            return err;
        if (*q == '\0')
            break;
        p = q + 1;
    }
    return 0;
}

typedef struct {
    char *out;
    size_t cap;
    bool fits;
} first_t;

static int take_first(void *ctx, const char *host)
{
    first_t *f = ctx;
    f->fits = strlen(host) < f->cap;
    if (f->fits)
        strcpy(f->out, host);
    return 1;
}

int ddp_slurm_first_host(const char *list, char *out, size_t cap, ddp_buf_t *why)
{
    first_t f = {out, cap, false};
    int err = ddp_slurm_hostlist_each(list, take_first, &f, why);
    if (err == 0 && !f.fits) {
        ddp_buf_printf(why, "the first host of '%s' is over %zu characters", list, cap - 1);
        return DDP_EPARSE;
    }
    return err;
}

int ddp_slurm_tasks_on_node(const char *spec, int node, int *count, ddp_buf_t *why)
{
    const char *p = spec, *end;
    long first = 0; /* the first node of the current entry */
    int found = -1;
    if (spec == NULL || *spec == '\0' || node < 0) {
        ddp_buf_puts(why, "no task counts");
        return DDP_EPARSE;
    }
    end = spec + strlen(spec);
    /* Every entry is read, so that a malformed list is one whatever the node. */
    for (;;) {
        long tasks, repeat = 1;
        int width;
        if (!number(&p, end, &tasks, &width))
            goto bad;
        if (*p == '(') {
            p++;
            if (*p++ != 'x' || !number(&p, end, &repeat, &width) || *p++ != ')' || repeat < 1)
                goto bad;
        }
        if (found < 0 && node < first + repeat)
            found = (int)tasks;
        first += repeat;
        if (*p == '\0')
            break;
        if (*p++ != ',')
            goto bad;
    }
    if (found >= 0) {
        *count = found;
        return 0;
    }
    ddp_buf_printf(why, "'%s' counts tasks for %ld node(s), not node %d", spec, first, node);
    return DDP_EPARSE;
bad:
    ddp_buf_printf(why, "'%s' is not a list of task counts like 2(x3),1", spec);
    return DDP_EPARSE;
}

int ddp_slurm_port(const char *job_id, const char *step_id)
{
    char *end;
    unsigned long long id = strtoull(job_id, &end, 10), step = 0;
    if (*job_id == '\0' || *end != '\0')
        return -1;
    if (step_id != NULL && *step_id != '\0') {
        step = strtoull(step_id, &end, 10);
        if (*end != '\0')
            step = 0; /* "batch", "extern": not a step of srun's */
    }
    return (int)(DDP_SLURM_PORT_BASE +
                 (id % DDP_SLURM_PORT_SPAN + DDP_SLURM_STEP_STRIDE * (step % DDP_SLURM_PORT_SPAN)) %
                     DDP_SLURM_PORT_SPAN);
}
