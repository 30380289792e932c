/* The hang report's rows, their text form and the table (see hang.h). */
#include "diagnose/hang.h"

#include "error.h"
#include "flight.h"
#include "io.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

bool ddp_hang_is_ring(const char *name)
{
    size_t len = strlen(name), plen = strlen(DDP_HANG_RING_PREFIX),
           slen = strlen(DDP_HANG_RING_SUFFIX);
    return len > plen + slen && strncmp(name, DDP_HANG_RING_PREFIX, plen) == 0 &&
           strcmp(name + len - slen, DDP_HANG_RING_SUFFIX) == 0;
}

/* A worker's directory is looked at up to this many entries, and this many rings: a
 * worker that fills it costs the loop no more. */
#define MOST_ENTRIES 4096
#define MOST_RINGS   64

/* The worker's directory `dir` to read, or NULL: one the worker replaced with a symbolic
 * link is none (it could point into a hung file system). */
static DIR *open_worker_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (d == NULL && fd >= 0)
        close(fd);
    return d;
}

bool ddp_hang_dir_has(const char *dir, const char *pattern)
{
    DIR *d = open_worker_dir(dir);
    struct dirent *e;
    bool found = false;
    for (int seen = 0; d != NULL && !found && seen < MOST_ENTRIES && (e = readdir(d)) != NULL;
         seen++) {
        struct stat st;
        found = fnmatch(pattern, e->d_name, FNM_PERIOD) == 0 &&
                fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode);
    }
    if (d != NULL)
        closedir(d);
    return found;
}

/* Calls `fn` with each ring of the worker's directory `dir` (in the order readdir gives);
 * a ring that is a symbolic link is none (ddp_flight_read). */
static int each_ring(const char *dir, void (*fn)(const ddp_flight_ring_t *ring, void *ctx),
                     void *ctx)
{
    DIR *d = open_worker_dir(dir);
    struct dirent *e;
    int found = 0, seen = 0;
    if (d == NULL)
        return 0;
    while (seen++ < MOST_ENTRIES && found < MOST_RINGS && (e = readdir(d)) != NULL) {
        if (!ddp_hang_is_ring(e->d_name))
            continue;
        char path[4096];
        ddp_flight_ring_t ring;
        if (snprintf(path, sizeof path, "%s/%s", dir, e->d_name) >= (int)sizeof path ||
            ddp_flight_read(path, &ring) != 0)
            continue;
        fn(&ring, ctx);
        found++;
    }
    closedir(d);
    return found;
}

static void add_progress(const ddp_flight_ring_t *ring, void *ctx)
{
    *(uint64_t *)ctx += ring->completed;
}

uint64_t ddp_hang_progress(const char *dir, bool *found)
{
    uint64_t sum = 0;
    *found = each_ring(dir, add_progress, &sum) > 0;
    return sum;
}

typedef struct {
    ddp_flight_ring_t *out;
    bool have;
} busiest_t;

static void pick_busiest(const ddp_flight_ring_t *ring, void *ctx)
{
    busiest_t *b = ctx;
    if (!b->have || ring->completed > b->out->completed) {
        *b->out = *ring;
        b->have = true;
    }
}

int ddp_hang_busiest_ring(const char *dir, ddp_flight_ring_t *out)
{
    busiest_t b = {out, false};
    (void)each_ring(dir, pick_busiest, &b);
    return b.have ? 0 : -ENOENT;
}

typedef struct {
    ddp_hang_row_t *row;
    double now;
    bool have, inside; /* a row is set; it is of a collective in progress or failed */
} pick_t;

static void pick_ring(const ddp_flight_ring_t *ring, void *ctx)
{
    pick_t *p = ctx;
    const ddp_flight_entry_t *cur = ddp_flight_entry(ring, ring->entered);
    bool inside = cur != NULL && ring->entered > ring->completed;
    /* The ring of a collective in progress wins; among equals, the group "main". */
    bool better = !p->have || (inside && !p->inside) ||
                  (inside == p->inside && strcmp(ring->group, "main") == 0);
    if (!better)
        return;
    ddp_hang_row_t *row = p->row;
    int rank = row->rank;
    memset(row, 0, sizeof *row);
    row->rank = rank; /* the launcher's, whatever the ring says */
    row->ring = true;
    row->peer = -1;
    row->completed = ring->completed;
    const ddp_flight_entry_t *last = ddp_flight_entry(ring, ring->completed);
    if (last != NULL)
        ddp_flight_describe(last, row->last, sizeof row->last);
    if (inside) {
        row->current = cur->seq;
        row->failed = cur->left_ns != 0 && cur->error != 0;
        row->timed_out = row->failed && cur->error == DDP_ETIMEOUT;
        row->peer = cur->peer;
        ddp_flight_describe(cur, row->now, sizeof row->now);
        int64_t end = cur->left_ns != 0 ? cur->left_ns : (int64_t)(p->now * 1e9);
        row->waited = (double)(end - cur->entered_ns) / 1e9;
    } else if (last != NULL && last->left_ns != 0) {
        row->waited = p->now - (double)last->left_ns / 1e9;
    }
    p->have = true;
    p->inside = inside;
}

int ddp_hang_row_from_dir(const char *dir, double now, ddp_hang_row_t *row)
{
    pick_t p = {.row = row, .now = now};
    return each_ring(dir, pick_ring, &p) > 0 ? 0 : -ENOENT;
}

/* The fields of /proc/<pid>/stat after the command (which may hold blanks). */
static char *stat_fields(pid_t pid, char *buf, size_t cap)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return NULL;
    size_t n = fread(buf, 1, cap - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *close = strrchr(buf, ')');
    return close != NULL && close[1] == ' ' ? close + 2 : NULL;
}

bool ddp_hang_python_frame(const char *dir, char *buf, size_t cap)
{
    char path[4096];
    char *text = NULL;
    size_t len;
    if (snprintf(path, sizeof path, "%s/python_stack.txt", dir) >= (int)sizeof path ||
        ddp_read_worker_file(path, 1 << 20, &text, &len) != 0)
        return false;
    /* The main thread of the first dump (one report an attempt): the block (after "Thread ..." or
     * "Current thread ...") whose frames end in <module>; its first frame is the innermost. */
    bool found = false;
    char *block = NULL;
    for (char *line = text; *line != '\0' && !found;) {
        char *end = line + strcspn(line, "\n"), saved = *end;
        *end = '\0'; /* this line alone */
        if (strncmp(line, "Thread ", 7) == 0 || strncmp(line, "Current thread ", 15) == 0)
            block = end;
        else if (block != NULL && strstr(line, " in <module>") != NULL)
            found = true;
        *end = saved;
        line = *end != '\0' ? end + 1 : end;
    }
    char file[256], func[128];
    int lineno;
    if (found &&
        sscanf(block + 1, "  File \"%255[^\"]\", line %d in %127s", file, &lineno, func) == 3) {
        const char *base = strrchr(file, '/');
        char raw[sizeof file + sizeof func + 32];
        ddp_buf_t shown = DDP_BUF_INIT; /* the worker's file: shown as a terminal may */
        snprintf(raw, sizeof raw, "%s (%s:%d)", func, base != NULL ? base + 1 : file, lineno);
        found = ddp_buf_printable(&shown, raw, strlen(raw), false) == 0;
        snprintf(buf, cap, "%s", ddp_buf_str(&shown));
        ddp_buf_free(&shown);
    } else {
        found = false;
    }
    free(text);
    return found;
}

double ddp_hang_cpu_seconds(pid_t pid)
{
    char buf[1024];
    char *p = stat_fields(pid, buf, sizeof buf);
    unsigned long long utime, stime;
    /* state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime */
    if (p == NULL ||
        sscanf(p, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &utime, &stime) != 2)
        return -1;
    long hz = sysconf(_SC_CLK_TCK);
    return (double)(utime + stime) / (double)(hz > 0 ? hz : 100);
}

void ddp_hang_row_from_proc(pid_t pid, int rank, double idle, const char *activity,
                            ddp_hang_row_t *row)
{
    char buf[1024], wchan[64] = "", path[64];
    char *p = stat_fields(pid, buf, sizeof buf);
    memset(row, 0, sizeof *row);
    row->rank = rank;
    row->peer = -1;
    row->waited = idle;
    snprintf(path, sizeof path, "/proc/%d/wchan", (int)pid);
    FILE *f = fopen(path, "r");
    if (f != NULL) {
        size_t n = fread(wchan, 1, sizeof wchan - 1, f);
        wchan[n] = '\0';
        fclose(f);
    }
    const char *state = "gone";
    switch (p != NULL ? *p : '?') {
    case 'R':
        state = "running";
        break;
    case 'S':
        state = "sleeping";
        break;
    case 'D':
        state = "in uninterruptible I/O";
        break;
    case 'T':
    case 't':
        state = "stopped";
        break;
    case 'Z':
        state = "exited";
        break;
    }
    char idle_text[64];
    snprintf(idle_text, sizeof idle_text, "no output and no CPU for %.0f s", idle);
    snprintf(row->note, sizeof row->note, "no libddp ring; %s; %s%s%s",
             activity != NULL ? activity : idle_text, state,
             wchan[0] != '\0' && strcmp(wchan, "0") != 0 ? " in " : "",
             strcmp(wchan, "0") != 0 ? wchan : "");
}

bool ddp_hang_catches(pid_t pid, int sig)
{
    char path[64], line[256];
    unsigned long long mask = 0;
    bool found = false;
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    while (f != NULL && !found && fgets(line, sizeof line, f) != NULL)
        found = sscanf(line, "SigCgt: %llx", &mask) == 1;
    if (f != NULL)
        fclose(f);
    return found && sig >= 1 && sig <= 64 && (mask >> (sig - 1) & 1) != 0;
}

/* Text: a line a row, fields split by tabs (which the strings never hold). */

static int put_text(ddp_buf_t *out, const char *s)
{
    for (; *s != '\0'; s++) {
        char c = *s == '\t' || *s == '\n' || *s == '\r' ? ' ' : *s;
        int err = ddp_buf_append(out, &c, 1);
        if (err)
            return err;
    }
    return 0;
}

int ddp_hang_rows_format(const ddp_hang_row_t *rows, size_t n, ddp_buf_t *out)
{
    int err = 0;
    for (size_t i = 0; i < n && !err; i++) {
        const ddp_hang_row_t *r = &rows[i];
        err = ddp_buf_printf(out, "%d\t%s%s%s-\t%" PRIu64 "\t%" PRIu64 "\t%d\t%.3f\t", r->rank,
                             r->ring ? "r" : "", r->failed ? "f" : "", r->timed_out ? "t" : "",
                             r->completed, r->current, r->peer, r->waited);
        err = err ? err : put_text(out, r->last);
        err = err ? err : ddp_buf_puts(out, "\t");
        err = err ? err : put_text(out, r->now);
        err = err ? err : ddp_buf_puts(out, "\t");
        err = err ? err : put_text(out, r->note);
        err = err ? err : ddp_buf_puts(out, "\n");
    }
    return err;
}

/* Copies the next tab-ended field of *p into buf[cap]; false when there is none. */
static bool field(const char **p, char *buf, size_t cap, char end)
{
    size_t len = strcspn(*p, "\t\n");
    if ((*p)[len] != end && !(end == '\n' && (*p)[len] == '\0'))
        return false;
    snprintf(buf, cap, "%.*s", (int)len, *p);
    *p += len + ((*p)[len] != '\0');
    return true;
}

static bool parse_row(const char **p, ddp_hang_row_t *r)
{
    char num[5][32], flags[8];
    char *end;
    memset(r, 0, sizeof *r);
    if (!field(p, num[0], sizeof num[0], '\t') || !field(p, flags, sizeof flags, '\t') ||
        !field(p, num[1], sizeof num[1], '\t') || !field(p, num[2], sizeof num[2], '\t') ||
        !field(p, num[3], sizeof num[3], '\t') || !field(p, num[4], sizeof num[4], '\t') ||
        !field(p, r->last, sizeof r->last, '\t') || !field(p, r->now, sizeof r->now, '\t') ||
        !field(p, r->note, sizeof r->note, '\n'))
        return false;
    long rank = strtol(num[0], &end, 10);
    if (*end != '\0' || rank < 0 || rank > INT32_MAX || strchr(flags, '-') == NULL)
        return false;
    r->rank = (int)rank;
    r->ring = strchr(flags, 'r') != NULL;
    r->failed = strchr(flags, 'f') != NULL;
    r->timed_out = strchr(flags, 't') != NULL;
    r->completed = strtoull(num[1], &end, 10);
    if (*end != '\0' || !isdigit((unsigned char)num[1][0]))
        return false;
    r->current = strtoull(num[2], &end, 10);
    if (*end != '\0' || !isdigit((unsigned char)num[2][0]))
        return false;
    long peer = strtol(num[3], &end, 10);
    if (*end != '\0' || peer < -1 || peer > INT32_MAX)
        return false;
    r->peer = (int)peer;
    r->waited = strtod(num[4], &end);
    return *end == '\0';
}

int ddp_hang_rows_parse(const char *text, ddp_hang_row_t **rows, size_t *n)
{
    size_t cap = 0;
    *rows = NULL;
    *n = 0;
    while (*text != '\0') {
        if (*n == cap) {
            size_t more = cap ? cap * 2 : 16;
            ddp_hang_row_t *grown = realloc(*rows, more * sizeof *grown);
            if (grown == NULL)
                return -ENOMEM;
            *rows = grown;
            cap = more;
        }
        if (!parse_row(&text, &(*rows)[*n]))
            return DDP_EPARSE;
        (*n)++;
    }
    return 0;
}

static int by_rank(const void *a, const void *b)
{
    const ddp_hang_row_t *x = a, *y = b;
    return (x->rank > y->rank) - (x->rank < y->rank);
}

void ddp_hang_sort(ddp_hang_row_t *rows, size_t n)
{
    if (n > 1)
        qsort(rows, n, sizeof *rows, by_rank);
}

void ddp_hang_table(const ddp_hang_row_t *rows, size_t n, ddp_buf_t *out)
{
    ddp_buf_printf(out, "  %5s  %-38s  %-50s  %8s  %s\n", "rank", "last completed", "now in", "for",
                   "waits on");
    for (size_t i = 0; i < n; i++) {
        const ddp_hang_row_t *r = &rows[i];
        if (!r->ring) {
            ddp_buf_printf(out, "  %5d  %s\n", r->rank, r->note);
            continue;
        }
        char now[128], peer[32] = "-";
        if (r->current == 0)
            snprintf(now, sizeof now, "(between collectives)");
        else
            snprintf(now, sizeof now, "%s%s", r->now,
                     r->timed_out ? " (timed out)"
                     : r->failed  ? " (failed)"
                                  : "");
        if (r->current != 0 && r->peer >= 0)
            snprintf(peer, sizeof peer, "rank %d", r->peer);
        ddp_buf_printf(out, "  %5d  %-38s  %-50s  %6.1f s  %s\n", r->rank,
                       r->last[0] != '\0' ? r->last : "(none)", now, r->waited, peer);
    }
}

/* Appends "; " (between parts) and "rank(s) LIST" of the rows where want[i]; returns how
 * many there are (none: nothing appended). */
static size_t say_ranks(const ddp_hang_row_t *rows, size_t n, const bool *want, ddp_buf_t *out)
{
    int *ranks = malloc((n > 0 ? n : 1) * sizeof *ranks);
    size_t count = 0;
    if (ranks == NULL)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (want[i])
            ranks[count++] = rows[i].rank;
    if (count > 0) {
        ddp_buf_printf(out, "%srank%s ", out->len > 0 ? "; " : "", count > 1 ? "s" : "");
        ddp_buf_runs_of(out, ranks, count, 16);
    }
    free(ranks);
    return count;
}

/* Where the ranks' Python main threads are (--hang-dump), ranks of one place together:
 * "ranks 0, 2 in all_reduce (distributed_c10d.py:1541); rank 1 in wait (train.py:3)".
 * want[n] is scratch. */
static void say_python_places(const ddp_hang_row_t *rows, size_t n, bool *want, ddp_buf_t *out)
{
    bool *done = calloc(n ? n : 1, sizeof *done);
    for (size_t i = 0; done != NULL && i < n; i++) {
        const char *frame = strstr(rows[i].note, "Python in ");
        if (done[i] || frame == NULL)
            continue;
        for (size_t k = 0; k < n; k++) {
            const char *other = strstr(rows[k].note, "Python in ");
            want[k] = !done[k] && other != NULL && strcmp(other, frame) == 0;
            done[k] = done[k] || want[k];
        }
        say_ranks(rows, n, want, out);
        ddp_buf_printf(out, " in %s", frame + strlen("Python in "));
    }
    free(done);
}

ddp_hang_verdict_t ddp_hang_verdict(const ddp_hang_row_t *rows, size_t n, ddp_buf_t *out)
{
    bool *want = calloc(n ? n : 1, sizeof *want);
    uint64_t top = 0;
    const ddp_hang_row_t *in_top = NULL;
    size_t rings = 0;
    ddp_buf_t text = DDP_BUF_INIT;
    ddp_hang_verdict_t kind;
    if (want == NULL)
        return DDP_HANG_VERDICT_NONE;
    for (size_t i = 0; i < n; i++) {
        rings += rows[i].ring;
        if (rows[i].ring && rows[i].current > top) {
            top = rows[i].current;
            in_top = &rows[i];
        }
    }
    if (rings == 0) {
        kind = DDP_HANG_VERDICT_PYTHON;
        say_python_places(rows, n, want, &text);
        if (text.len == 0) {
            kind = DDP_HANG_VERDICT_BLIND;
            ddp_buf_puts(&text, "no rank runs libddp's flight recorder: see each rank's state "
                                "above (--hang-dump saves their stacks)");
        }
    } else if (top == 0) {
        kind = DDP_HANG_VERDICT_BETWEEN;
        for (size_t i = 0; i < n; i++)
            want[i] = rows[i].ring;
        say_ranks(rows, n, want, &text);
        ddp_buf_puts(&text, " between collectives, in none");
    } else {
        /* The latest collective anyone is in ("all_reduce #412"): who never entered it,
         * who waits in it, who is in an earlier one, further behind, or past it. */
        kind = DDP_HANG_VERDICT_COLLECTIVE;
        char what[96];
        size_t words = strcspn(in_top->now, " ");
        words += strspn(in_top->now + words, " ");
        words += strcspn(in_top->now + words, " ");
        snprintf(what, sizeof what, "%.*s", (int)words, in_top->now);
        for (size_t i = 0; i < n; i++)
            want[i] = rows[i].ring && rows[i].current == 0 && rows[i].completed + 1 == top;
        size_t never = say_ranks(rows, n, want, &text);
        if (never > 0)
            ddp_buf_printf(&text, " never entered %s", what);
        for (size_t i = 0; i < n; i++)
            want[i] = rows[i].ring && rows[i].current == top;
        size_t waiting = say_ranks(rows, n, want, &text);
        ddp_buf_printf(&text, " %s in %s", waiting > 1 ? "wait" : "waits", never ? "it" : what);
        for (size_t i = 0; i < n; i++) {
            const ddp_hang_row_t *r = &rows[i];
            if (!r->ring || r->current == top)
                continue;
            if (r->current != 0)
                ddp_buf_printf(&text, "; rank %d is in %s", r->rank, r->now);
            else if (r->completed + 1 < top)
                ddp_buf_printf(&text, "; rank %d is behind, between collectives after #%" PRIu64,
                               r->rank, r->completed);
            else if (r->completed >= top)
                ddp_buf_printf(&text, "; rank %d has finished #%" PRIu64, r->rank, top);
        }
    }
    for (size_t i = 0; i < n; i++)
        want[i] = !rows[i].ring;
    if (rings > 0 && say_ranks(rows, n, want, &text) > 0)
        ddp_buf_puts(&text, " without a flight recorder");
    ddp_buf_append(out, text.data, text.len);
    ddp_buf_free(&text);
    free(want);
    return kind;
}
