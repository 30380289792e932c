/* Worker failures and the failure report printed when the job gives up.
 *
 * A failure record is made the moment a worker's exit is seen; it reads the worker's
 * error.json (PyTorch's nested form or the flat form) if there is one. The report has
 * torchrun's layout; its root cause is the earliest failure, unless that one blames a
 * peer rank (libddp writes extraInfo.peer_rank: the peer went away, or its collective
 * call was the odd one out) and that peer failed too: then the peer is. Pure apart
 * from reading the error file; used on the loop thread. */
#ifndef DDP_LAUNCHER_DIAGNOSE_REPORT_H
#define DDP_LAUNCHER_DIAGNOSE_REPORT_H

#include "buf.h"

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* The longest last line a failure keeps. */
#define DDP_LAST_LINE_MAX 400

/* Error files larger than this are not read. */
#define DDP_ERROR_FILE_MAX ((size_t)4 << 20)

typedef struct ddp_failure_s {
    int rank, local_rank;
    pid_t pid;
    int exitcode;     /* an exit status, or minus the signal number (torchrun's form) */
    double timestamp; /* the error file's time, else when the exit was seen */
    char *error_file; /* its path when the worker wrote one, else NULL */
    char *message;    /* from the error file: the traceback, else the message */
    int peer_rank;    /* from the error file: the rank this failure blames, or -1 */
    char *host;       /* another node's failure: its host (owned); NULL: this node's */
    char *last_line;  /* the last line it wrote where the launcher reads it (shown: escaped,
                         bounded), or NULL */
} ddp_failure_t;

/* Fills `f` for a worker that ended with waitpid status `wait_status`, seen at `now`
 * (seconds since the epoch). Reads `error_file` when it exists; an unreadable or
 * malformed one is reported in the message, never fatal. 0 or -ENOMEM. */
int ddp_failure_init(ddp_failure_t *f, int rank, int local_rank, pid_t pid, int wait_status,
                     double now, const char *error_file);
void ddp_failure_free(ddp_failure_t *f);

/* Sets f->last_line to text[0, len) up to its first line end, the worker's own text, as a
 * terminal may show it: escaped (ddp_buf_printable), its first DDP_LAST_LINE_MAX bytes.
 * 0 or -ENOMEM (then NULL). */
int ddp_failure_set_last_line(ddp_failure_t *f, const char *text, size_t len);

/* Appends `f` (of this node, `host`) as one line of JSON, for the job's report on the node
 * that prints it. 0 or -ENOMEM. */
int ddp_failure_to_json(const ddp_failure_t *f, const char *host, ddp_buf_t *out);

/* Reads one line of ddp_failure_to_json (another node's, through the store: checked, never
 * trusted) into `f` (free with ddp_failure_free). 0, DDP_EPARSE or -ENOMEM. */
int ddp_failure_from_json(const char *line, size_t len, ddp_failure_t *f);

/* A message's one line, malloc'd (NULL: no memory): a Python traceback's last line (the
 * exception raised, "ValueError: bad batch"), else the first line; as a terminal may show
 * it (ddp_buf_printable), its first DDP_LAST_LINE_MAX bytes ("..." where cut). */
char *ddp_failure_summary(const char *message);

/* What failure `f` said, in one line, malloc'd: its message's summary, else its last
 * line; NULL when it said nothing (or no memory). */
char *ddp_failure_said(const ddp_failure_t *f);

/* The failure's status as a shell reports it: the exit code, or 128+N for signal N. */
int ddp_failure_status(const ddp_failure_t *f);

/* One line for the log: "exited with code 7" or "was killed by SIGSEGV". */
const char *ddp_failure_describe(const ddp_failure_t *f, char *buf, size_t cap);

/* For a worker (pid, wait status) that dumped core, where the core went, as " (core
 * dumped: /path/core.123)" from the kernel's core_pattern (`pattern`: its text, NULL to
 * read /proc/sys/kernel/core_pattern; `uses_pid`: core_uses_pid, < 0 to read it) and the
 * worker's working directory `cwd`; "" for any other end. */
const char *ddp_core_dump_note(int status, pid_t pid, const char *pattern, int uses_pid,
                               const char *cwd, char *buf, size_t cap);

/* How the worker group stood when a worker ended. */
typedef struct {
    bool stopping;          /* the agent had begun stopping the group */
    bool for_failure;       /* ... because one of its workers failed */
    int sent_signal;        /* what the stop sent first */
    bool sent_sigkill;      /* the stop escalated to SIGKILL */
    size_t recorded_before; /* failures recorded before the stop began (its cause) */
} ddp_stop_state_t;

/* Whether failure `f` (a worker that did not succeed; its waitpid status `wait_status`)
 * is a failure of its own, for the report, rather than the effect of our stop. While
 * nothing is stopping, every failure is. While the group stops for a failure, so is a
 * worker killed by a signal that is not ours (its death may be the first, seen late),
 * and one that a recorded failure blames (recorded[0..n): the failures so far) as its lost
 * peer when it ends with an exit code or an error file of its own; blamed by a failure
 * from before the stop (the rank that failure waited for in vain), also when our stop is
 * what ended it. */
bool ddp_report_own_failure(const ddp_failure_t *f, int wait_status, const ddp_stop_state_t *stop,
                            const ddp_failure_t *recorded, size_t n);

/* Index of the first of recorded[0..n) that blames `rank`, or -1. */
int ddp_report_blamer(const ddp_failure_t *recorded, size_t n, int rank);

/* Index of the root cause: the earliest failure (the first of equals), then the failure
 * of the peer it names, and so on while there is one (at most `n` steps: a cycle of
 * ranks that each blame the next ends somewhere on the cycle). */
size_t ddp_report_root(const ddp_failure_t *failures, size_t n);

/* Appends torchrun's failure report for `n` > 0 failures of the job `name` on `host` (a
 * failure's own host where it has one).
 * `python` selects torchrun's hint for workers without an error file. */
int ddp_report_format(ddp_buf_t *out, const char *name, const char *host,
                      const ddp_failure_t *failures, size_t n, bool python);

#endif
