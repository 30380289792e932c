/* The hang report: where every rank stands, read from libddp's flight recorder rings
 * (common/flight.h) and /proc, as one table and a verdict ("rank 3 never entered
 * all_reduce #412; ranks 0-2, 4-7 wait in it").
 *
 * Each node's launcher makes the rows of its own workers (ddp_hang_row_from_dir,
 * ddp_hang_row_from_proc); a multi-node job carries them to the reporting launcher
 * through the store as text (ddp_hang_rows_format, ddp_hang_rows_parse), which prints
 * the table. Pure apart from the reads of the worker's directory and /proc. */
#ifndef DDP_LAUNCHER_DIAGNOSE_HANG_H
#define DDP_LAUNCHER_DIAGNOSE_HANG_H

#include "buf.h"
#include "flight.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* The file a worker's ring is in: <worker dir>/flight_<group>.ring. */
#define DDP_HANG_RING_PREFIX "flight_"
#define DDP_HANG_RING_SUFFIX ".ring"

/* Whether file name `name` is a flight recorder ring's (flight_<group>.ring). */
bool ddp_hang_is_ring(const char *name);

/* Whether the worker's directory `dir` holds a regular file whose name matches the
 * fnmatch(3) `pattern`; neither a directory nor a file that is a symbolic link counts
 * (nothing a worker links is followed), and only its first 4096 entries are looked at. */
bool ddp_hang_dir_has(const char *dir, const char *pattern);

typedef struct {
    int rank;
    bool ring;          /* from a libddp ring; else from /proc (note) */
    uint64_t completed; /* ring: the last collective that returned success (0: none) */
    uint64_t current;   /* ring: the collective it is in, or failed in (0: none) */
    bool failed;        /* current ended in failure */
    bool timed_out;     /* ... for a timeout */
    int peer;           /* current: the rank it waits on; -1: not known */
    double waited;      /* s inside current; with none, s since `completed` returned */
    char last[96];      /* `completed` described ("all_reduce #4 of 10 float32 (sum)") */
    char now[96];       /* `current` described */
    char note[160];     /* without a ring: what /proc and the output say */
} ddp_hang_row_t;

/* The row of the ring in worker directory `dir` (the ring of a collective in progress or
 * failed, else the first), as of wall time `now`, for the rank row->rank says (the
 * launcher's: the rank a ring claims is the worker's to write, and not believed). 0, or
 * -ENOENT when `dir` holds none. */
int ddp_hang_row_from_dir(const char *dir, double now, ddp_hang_row_t *row);

/* Progress of the worker in `dir`: the sum of its rings' `completed` (*found false and 0
 * when it has none yet). */
uint64_t ddp_hang_progress(const char *dir, bool *found);

/* A copy of the ring in worker directory `dir` with the most collectives completed (a
 * program's main context). 0, or -ENOENT when `dir` holds none. */
int ddp_hang_busiest_ring(const char *dir, ddp_flight_ring_t *out);

/* The row of a worker without a ring: its process state and kernel wait channel, and
 * `activity` (what its progress ring says), or else how long it has been idle (no output,
 * no CPU). */
void ddp_hang_row_from_proc(pid_t pid, int rank, double idle, const char *activity,
                            ddp_hang_row_t *row);

/* From <dir>/python_stack.txt (Python's faulthandler, armed by --hang-dump): where the
 * main thread of the last dump is, "all_reduce (distributed_c10d.py:1541)", into
 * buf[cap], shown as a terminal may (the file is the worker's: ddp_buf_printable); false
 * when there is no such file or thread. */
bool ddp_hang_python_frame(const char *dir, char *buf, size_t cap);

/* The CPU time of `pid` so far, in seconds (utime + stime); -1 when unreadable. */
double ddp_hang_cpu_seconds(pid_t pid);

/* Whether `pid` handles signal `sig` (SigCgt of /proc/<pid>/status): only then does the
 * launcher send it a dump request, which would otherwise end it. */
bool ddp_hang_catches(pid_t pid, int sig);

/* Rows as text, one line a row, and back. parse: DDP_EPARSE for a malformed line (the
 * rows before it are kept in *rows), -ENOMEM; *rows is malloc'd (the caller frees). */
int ddp_hang_rows_format(const ddp_hang_row_t *rows, size_t n, ddp_buf_t *out);
int ddp_hang_rows_parse(const char *text, ddp_hang_row_t **rows, size_t *n);

/* What a verdict could judge the ranks by. */
typedef enum {
    DDP_HANG_VERDICT_NONE,       /* none made (out of memory) */
    DDP_HANG_VERDICT_BLIND,      /* no rank runs libddp's flight recorder, no Python stack */
    DDP_HANG_VERDICT_PYTHON,     /* no ring: where the ranks' Python stacks are */
    DDP_HANG_VERDICT_BETWEEN,    /* the ranks with a ring are between collectives */
    DDP_HANG_VERDICT_COLLECTIVE, /* the latest collective: who never entered it, who waits */
} ddp_hang_verdict_t;

/* Sorts by rank; then the table (a header and a line a row, each ending "\n") and the
 * verdict (one line, no newline), whose kind is returned. */
void ddp_hang_sort(ddp_hang_row_t *rows, size_t n);
void ddp_hang_table(const ddp_hang_row_t *rows, size_t n, ddp_buf_t *out);
ddp_hang_verdict_t ddp_hang_verdict(const ddp_hang_row_t *rows, size_t n, ddp_buf_t *out);

#endif
