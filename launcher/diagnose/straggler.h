/* Stragglers (--straggler-report): how long each rank works a step, and who is slower
 * than the others.
 *
 * A rank's "work" is the time of its steps less its wait inside collectives: in a
 * synchronous job every rank's step takes as long as the slowest's, and the slow one is
 * the one that waits least. It comes from the rank's progress ring (ddp_launch.step();
 * progress.h) or from libddp's flight ring (each collective a unit: the time from leaving
 * one to entering the next), taken in by sampling (a ring keeps the last 64) and summed
 * over the report's window. On one node the flight rings also say which rank entered
 * each collective last: the one the others waited for.
 *
 * Each node makes the rows of its ranks; a multi-node job carries them to the launcher
 * serving the store as text (ddp_straggler_rows_format/parse), which finds the stragglers
 * against the median of every rank. Pure apart from the reads of the rings. */
#ifndef DDP_LAUNCHER_DIAGNOSE_STRAGGLER_H
#define DDP_LAUNCHER_DIAGNOSE_STRAGGLER_H

#include "buf.h"
#include "flight.h"
#include "progress.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A rank's sums over the window so far, and where its sampling stands. */
typedef struct {
    int64_t last_step;    /* progress ring: the last step taken in */
    uint64_t last_seq;    /* flight ring: the last collective taken in */
    int64_t prev_left_ns; /* flight ring: when the collective before it left (0: unknown) */
    bool steps;           /* its units are steps (a progress ring), else collectives */
    double units, work_s, wait_s;
    int arrivals;    /* collectives whose last rank to enter (of this node) it was */
    int collectives; /* collectives compared for that */
} ddp_straggler_acc_t;

/* Takes in what `ring` holds past the last sample. */
void ddp_straggler_take_progress(ddp_straggler_acc_t *acc, const ddp_progress_ring_t *ring);
void ddp_straggler_take_flight(ddp_straggler_acc_t *acc, const ddp_flight_ring_t *ring);

/* A node's last entry into one collective: for the store host, which finds across nodes
 * who each collective waited for. A node keeps those of its last DDP_STRAGGLER_ENTRIES
 * collectives (sampled), across windows: the nodes post at their own times. */
#define DDP_STRAGGLER_ENTRIES 256
typedef struct {
    uint64_t seq; /* 0: none */
    int rank;     /* the local index (take_arrivals), the global rank (rows) */
    int64_t entered_ns;
} ddp_straggler_entry_t;

/* The collectives past *common that every one of the n rings (one a local rank; those not
 * `present` left out) has completed: the rank that entered each last (alone) gets an
 * arrival; every rank a compared collective. Each one's last entry goes to
 * latest[(seq - 1) % DDP_STRAGGLER_ENTRIES] (latest may be NULL). *common moves on. */
void ddp_straggler_take_arrivals(ddp_straggler_acc_t *accs, const ddp_flight_ring_t *rings,
                                 const bool *present, int n, uint64_t *common,
                                 ddp_straggler_entry_t *latest);

/* Ends the window: the sums are zeroed, the sampling places kept. */
void ddp_straggler_window_reset(ddp_straggler_acc_t *acc);

typedef struct {
    int rank, node, local_rank;
    bool steps; /* units are steps, else collectives */
    double units, work_s, wait_s;
    int arrivals, collectives;
    char host[64];
} ddp_straggler_row_t;

/* Across nodes (the store host): for every collective that each node has an entry for
 * (as many entries as the most any collective has, two at least), the rank that entered
 * it last gets an arrival in its row (matched by rank), and every row the count of such
 * collectives: the node-local counts are replaced. Sorts both arrays. */
void ddp_straggler_global_arrivals(ddp_straggler_row_t *rows, size_t n,
                                   ddp_straggler_entry_t *entries, size_t nentries);

/* Rows as text, one line a row, then entries ("e SEQ RANK NS"), and back (DDP_EPARSE for a
 * malformed line, what came before it kept; -ENOMEM). *rows and *entries are malloc'd:
 * the caller frees (entries may be NULL: none taken). */
int ddp_straggler_rows_format(const ddp_straggler_row_t *rows, size_t n, ddp_buf_t *out);
int ddp_straggler_entries_format(const ddp_straggler_entry_t *entries, size_t n, ddp_buf_t *out);
int ddp_straggler_rows_parse(const char *text, ddp_straggler_row_t **rows, size_t *n,
                             ddp_straggler_entry_t **entries, size_t *nentries);

/* The stragglers of `rows`: each rank with 3 units or more whose work a unit is over
 * `threshold` times the median rank's and at least 2 ms over it. Their indexes go to
 * found[] (at most n), their ratios to ratio[]; *median gets the median work a unit (s).
 * Returns how many. */
size_t ddp_straggler_find(const ddp_straggler_row_t *rows, size_t n, double threshold,
                          size_t *found, double *ratio, double *median);

/* One report line for a row (no newline): "straggler: rank 2 (node 0 on h, local rank 2)
 * works 31.2 ms a step, 1.42x the median rank's 22.0 ms, over the last 300 s (and ...)". */
void ddp_straggler_describe(const ddp_straggler_row_t *row, double ratio, double median,
                            double window, ddp_buf_t *out);

#endif
