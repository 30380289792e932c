/* Stragglers (see straggler.h). */
#include "diagnose/straggler.h"

#include "error.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MIN_UNITS 3
#define MIN_GAP_S 0.002 /* a straggler works at least this much longer than the median */

void ddp_straggler_take_progress(ddp_straggler_acc_t *acc, const ddp_progress_ring_t *ring)
{
    acc->steps = true;
    int64_t first = acc->last_step + 1;
    if (ring->steps - first >= DDP_PROGRESS_SLOTS) /* more than the ring holds: the latest */
        first = ring->steps - DDP_PROGRESS_SLOTS + 1;
    for (int64_t s = first; s <= ring->steps; s++) {
        const ddp_progress_slot_t *slot = ddp_progress_slot(ring, s);
        if (slot == NULL || slot->dur_ns <= 0 || slot->wait_ns < 0 || slot->wait_ns > slot->dur_ns)
            continue; /* the first step (no duration), or torn */
        acc->units += 1;
        acc->work_s += (double)(slot->dur_ns - slot->wait_ns) / 1e9;
        acc->wait_s += (double)slot->wait_ns / 1e9;
    }
    if (ring->steps > acc->last_step)
        acc->last_step = ring->steps;
}

void ddp_straggler_take_flight(ddp_straggler_acc_t *acc, const ddp_flight_ring_t *ring)
{
    uint64_t first = acc->last_seq + 1;
    if (ring->completed >= first + DDP_FLIGHT_SLOTS)
        first = ring->completed - DDP_FLIGHT_SLOTS + 1;
    if (first != acc->last_seq + 1)
        acc->prev_left_ns = 0;
    for (uint64_t seq = first; seq <= ring->completed; seq++) {
        const ddp_flight_entry_t *e = ddp_flight_entry(ring, seq);
        if (e == NULL || e->left_ns == 0 || e->left_ns < e->entered_ns) {
            acc->prev_left_ns = 0;
            continue;
        }
        if (acc->prev_left_ns > 0 && e->entered_ns >= acc->prev_left_ns) {
            acc->units += 1;
            acc->work_s += (double)(e->entered_ns - acc->prev_left_ns) / 1e9;
            acc->wait_s += (double)(e->left_ns - e->entered_ns) / 1e9;
        }
        acc->prev_left_ns = e->left_ns;
    }
    if (ring->completed > acc->last_seq)
        acc->last_seq = ring->completed;
}

void ddp_straggler_take_arrivals(ddp_straggler_acc_t *accs, const ddp_flight_ring_t *rings,
                                 const bool *present, int n, uint64_t *common,
                                 ddp_straggler_entry_t *latest)
{
    uint64_t upto = UINT64_MAX;
    for (int i = 0; i < n; i++)
        if (present[i] && rings[i].completed < upto)
            upto = rings[i].completed;
    if (upto == UINT64_MAX)
        return;
    uint64_t first = *common + 1;
    if (upto >= first + DDP_FLIGHT_SLOTS)
        first = upto - DDP_FLIGHT_SLOTS + 1;
    for (uint64_t seq = first; seq <= upto; seq++) {
        int last = -1, there = 0;
        int64_t top_ns = 0;
        bool tie = false;
        for (int i = 0; i < n; i++) {
            const ddp_flight_entry_t *e = present[i] ? ddp_flight_entry(&rings[i], seq) : NULL;
            if (e == NULL)
                continue;
            there++;
            if (last < 0 || e->entered_ns > top_ns) {
                tie = false;
                last = i;
                top_ns = e->entered_ns;
            } else if (e->entered_ns == top_ns) {
                tie = true;
            }
        }
        if (latest != NULL && there > 0)
            latest[(seq - 1) % DDP_STRAGGLER_ENTRIES] = (ddp_straggler_entry_t){seq, last, top_ns};
        if (there < 2)
            continue;
        for (int i = 0; i < n; i++)
            accs[i].collectives += present[i];
        if (!tie)
            accs[last].arrivals++;
    }
    if (upto > *common)
        *common = upto;
}

static int by_seq(const void *a, const void *b)
{
    const ddp_straggler_entry_t *x = a, *y = b;
    return (x->seq > y->seq) - (x->seq < y->seq);
}

static int by_rank(const void *a, const void *b)
{
    const ddp_straggler_row_t *x = a, *y = b;
    return (x->rank > y->rank) - (x->rank < y->rank);
}

void ddp_straggler_global_arrivals(ddp_straggler_row_t *rows, size_t n,
                                   ddp_straggler_entry_t *entries, size_t nentries)
{
    size_t nodes = 0;
    if (entries == NULL || nentries == 0 || rows == NULL || n == 0)
        return;
    qsort(entries, nentries, sizeof *entries, by_seq);
    for (size_t i = 0, j; i < nentries; i = j) {
        for (j = i; j < nentries && entries[j].seq == entries[i].seq; j++)
            ;
        nodes = j - i > nodes ? j - i : nodes;
    }
    if (nodes < 2)
        return;
    qsort(rows, n, sizeof *rows, by_rank);
    int compared = 0;
    for (size_t i = 0; i < n; i++)
        rows[i].arrivals = 0;
    for (size_t i = 0; i < nentries;) {
        size_t j = i, top = i;
        bool tie = false;
        for (; j < nentries && entries[j].seq == entries[i].seq; j++) {
            if (entries[j].entered_ns > entries[top].entered_ns) {
                top = j;
                tie = false;
            } else if (j != top && entries[j].entered_ns == entries[top].entered_ns) {
                tie = true;
            }
        }
        if (j - i == nodes) { /* every node's entry: who came last is known */
            compared++;
            ddp_straggler_row_t key = {.rank = entries[top].rank};
            ddp_straggler_row_t *row = tie ? NULL : bsearch(&key, rows, n, sizeof *rows, by_rank);
            if (row != NULL)
                row->arrivals++;
        }
        i = j;
    }
    for (size_t i = 0; i < n; i++)
        rows[i].collectives = compared;
}

void ddp_straggler_window_reset(ddp_straggler_acc_t *acc)
{
    acc->units = acc->work_s = acc->wait_s = 0;
    acc->arrivals = acc->collectives = 0;
}

int ddp_straggler_rows_format(const ddp_straggler_row_t *rows, size_t n, ddp_buf_t *out)
{
    int err = 0;
    for (size_t i = 0; i < n && !err; i++) {
        const ddp_straggler_row_t *r = &rows[i];
        char host[sizeof r->host];
        snprintf(host, sizeof host, "%s", r->host);
        for (char *c = host; *c != '\0'; c++)
            if (*c == '\t' || *c == '\n' || *c == ' ')
                *c = '_';
        err = ddp_buf_printf(out, "%d %d %d %c %.0f %.6f %.6f %d %d %s\n", r->rank, r->node,
                             r->local_rank, r->steps ? 's' : 'c', r->units, r->work_s, r->wait_s,
                             r->arrivals, r->collectives, host[0] != '\0' ? host : "?");
    }
    return err;
}

int ddp_straggler_entries_format(const ddp_straggler_entry_t *entries, size_t n, ddp_buf_t *out)
{
    int err = 0;
    for (size_t i = 0; i < n && !err; i++)
        if (entries[i].seq > 0)
            err = ddp_buf_printf(out, "e %" PRIu64 " %d %" PRId64 "\n", entries[i].seq,
                                 entries[i].rank, entries[i].entered_ns);
    return err;
}

/* An "e SEQ RANK NS" line into *entries (grown by doubling). */
static int parse_entry(const char *line, ddp_straggler_entry_t **entries, size_t *n, size_t *cap)
{
    ddp_straggler_entry_t e = {0};
    int used = 0;
    unsigned long long seq;
    long long ns;
    if (sscanf(line, "e %llu %d %lld%n", &seq, &e.rank, &ns, &used) != 3 ||
        (size_t)used != strlen(line) || seq == 0 || e.rank < 0)
        return DDP_EPARSE;
    e.seq = seq;
    e.entered_ns = ns;
    if (*n == *cap) {
        size_t grown = *cap ? 2 * *cap : 64;
        ddp_straggler_entry_t *more = realloc(*entries, grown * sizeof *more);
        if (more == NULL)
            return -ENOMEM;
        *entries = more;
        *cap = grown;
    }
    (*entries)[(*n)++] = e;
    return 0;
}

int ddp_straggler_rows_parse(const char *text, ddp_straggler_row_t **rows, size_t *n,
                             ddp_straggler_entry_t **entries, size_t *nentries)
{
    *rows = NULL;
    *n = 0;
    size_t cap = 0, ecap = 0;
    if (entries != NULL) {
        *entries = NULL;
        *nentries = 0;
    }
    for (const char *p = text; *p != '\0';) {
        const char *end = strchr(p, '\n');
        size_t len = end != NULL ? (size_t)(end - p) : strlen(p);
        char line[256], kind;
        ddp_straggler_row_t r = {0};
        int used = 0;
        if (len >= sizeof line)
            return DDP_EPARSE;
        memcpy(line, p, len);
        line[len] = '\0';
        if (line[0] == 'e') {
            int err = entries != NULL ? parse_entry(line, entries, nentries, &ecap) : 0;
            if (err != 0)
                return err;
            p += len + (end != NULL);
            continue;
        }
        if (sscanf(line, "%d %d %d %c %lf %lf %lf %d %d %63s%n", &r.rank, &r.node, &r.local_rank,
                   &kind, &r.units, &r.work_s, &r.wait_s, &r.arrivals, &r.collectives, r.host,
                   &used) != 10 ||
            (size_t)used != len || (kind != 's' && kind != 'c') || r.rank < 0 || r.units < 0 ||
            r.work_s < 0 || r.wait_s < 0 || r.arrivals < 0 || r.collectives < r.arrivals)
            return DDP_EPARSE;
        r.steps = kind == 's';
        if (*n == cap) {
            size_t grown = cap ? 2 * cap : 16;
            ddp_straggler_row_t *more = realloc(*rows, grown * sizeof *more);
            if (more == NULL)
                return -ENOMEM;
            *rows = more;
            cap = grown;
        }
        (*rows)[(*n)++] = r;
        p += len + (end != NULL);
    }
    return 0;
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

size_t ddp_straggler_find(const ddp_straggler_row_t *rows, size_t n, double threshold,
                          size_t *found, double *ratio, double *median)
{
    double *per = malloc((n ? n : 1) * sizeof *per);
    size_t m = 0, count = 0;
    *median = 0;
    if (per == NULL)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (rows[i].units >= MIN_UNITS)
            per[m++] = rows[i].work_s / rows[i].units;
    if (m < 2) {
        free(per);
        return 0;
    }
    qsort(per, m, sizeof *per, by_value);
    *median = m % 2 ? per[m / 2] : (per[m / 2 - 1] + per[m / 2]) / 2;
    free(per);
    for (size_t i = 0; i < n; i++) {
        if (rows[i].units < MIN_UNITS)
            continue;
        double work = rows[i].work_s / rows[i].units;
        if (work - *median < MIN_GAP_S || work <= *median * threshold)
            continue;
        found[count] = i;
        ratio[count++] = *median > 0 ? work / *median : 0;
    }
    return count;
}

void ddp_straggler_describe(const ddp_straggler_row_t *row, double ratio, double median,
                            double window, ddp_buf_t *out)
{
    const char *unit = row->steps ? "a step" : "between collectives";
    double work = row->work_s / row->units, wait = row->wait_s / row->units;
    ddp_buf_printf(out, "straggler: rank %d (node %d on %s, local rank %d) works %.1f ms %s, ",
                   row->rank, row->node, row->host, row->local_rank, work * 1e3, unit);
    if (ratio > 0)
        ddp_buf_printf(out, "%.2fx the median rank's %.1f ms", ratio, median * 1e3);
    else
        ddp_buf_printf(out, "the median rank %.1f ms", median * 1e3);
    ddp_buf_printf(out, ", over the last %.0f s", window);
    if (row->steps)
        ddp_buf_printf(out, " (and %.1f ms a step in collectives)", wait * 1e3);
    if (row->collectives > 0)
        ddp_buf_printf(out, "; the collectives waited for it %.0f%% of the time",
                       100.0 * row->arrivals / row->collectives);
}
