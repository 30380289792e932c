/* Worker output: where each stream goes, the log directory layout, and whole-line
 * console output.
 *
 * Console lines from different workers never mix: each worker stream is assembled
 * into whole lines here and written with one writev per batch of lines, on the loop
 * thread. Writes block (a stalled console stalls the launcher, as it would stall
 * torchrun's workers); a console that is gone (EPIPE) is dropped, files go on. */
#ifndef DDP_LAUNCHER_OUTPUT_LOGS_H
#define DDP_LAUNCHER_OUTPUT_LOGS_H

#include "buf.h"
#include "config/config.h"
#include "log.h"

#include <stdbool.h>
#include <stddef.h>

/* A line longer than this reaches the console in pieces of this size. */
#define DDP_LINE_MAX ((size_t)64 << 20)

typedef enum {
    DDP_SINK_NULL,    /* /dev/null: filtered out of the console and not redirected */
    DDP_SINK_FILE,    /* the worker writes its log file itself */
    DDP_SINK_CONSOLE, /* through the launcher to the console, no prefix */
    DDP_SINK_TEE,     /* through the launcher to its log file and the prefixed console */
} ddp_sink_t;

/* Where stream `std` (DDP_STD_OUT or DDP_STD_ERR) of `local_rank` goes. */
ddp_sink_t ddp_logs_sink(const ddp_launch_config_t *cfg, int local_rank, int std);

/* The prefix of a worker's tee'd console lines: "[<role><local_rank>]:" or the
 * expansion of TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE. *out is a new string. */
int ddp_logs_prefix(const ddp_launch_config_t *cfg, int rank, int local_rank, char **out);

/* Told the path of a new base directory before it is made (the orphan guard, which then
 * removes it if it is empty when the launcher is killed, at whatever moment). */
typedef void (*ddp_logs_announce_fn)(void *ctx, const char *dir);

/* Where new directories go when none is given: $TMPDIR (else /tmp) when this user can
 * write there, else the first of /tmp, /var/tmp and /usr/tmp that can be, as Python's
 * tempfile.gettempdir() chooses torchrun's; the fallback is warned of when `log` is given. */
const char *ddp_logs_temp_dir(const ddp_log_t *log);

/* Creates <base>/<run_id>_<random>/ and returns its path in *run_dir. With base NULL a
 * new base directory is made under ddp_logs_temp_dir() (announced first, when `announce` is given)
 * and *base_created is set. */
int ddp_logs_make_run_dir(const char *base, const char *run_id, ddp_logs_announce_fn announce,
                          void *ctx, char **base_out, bool *base_created, char **run_dir);

/* Creates <run_dir>/attempt_<n>/ and one directory per local rank in it. */
int ddp_logs_make_attempt_dir(const char *run_dir, int attempt, int nworkers, char **attempt_dir);

/* Removes `path` and everything under it if it holds no file (only empty
 * directories); a directory holding logs or error files is kept. With `rings`, libddp's
 * flight recorder rings (flight_*.ring), the progress rings (progress.ring) and
 * --hang-timeout=auto's hang_timeouts.json go first: of a job that succeeded, they are
 * nothing to read. */
void ddp_logs_remove_if_empty(const char *path, bool rings);

/* A console stream of the launcher (its stdout or stderr). Zero it before use. */
typedef struct ddp_console_s {
    int fd;
    bool broken; /* the reader is gone; output is dropped */
    /* The stream whose unfinished line the console shows last (ddp_lines_show): its next
     * bytes continue that line, any other stream's begin a new line. NULL: at a line's start. */
    const struct ddp_lines_s *open_line;
    /* Another console on the same file (a terminal's stdout and stderr) whose open_line
     * is this one's too; NULL: none. */
    struct ddp_console_s *same_file;
    double show_after; /* seconds an unfinished line waits for its end before it is shown;
                          0: until its end */
    /* The launcher's log's flag (ddp_log_t's open_line) where it writes to this console's
     * file: set while a line is open; found cleared, a message ended that line. NULL: none. */
    atomic_bool *log_line;
} ddp_console_t;

/* The unfinished last line of one worker stream. */
typedef struct ddp_lines_s {
    ddp_buf_t partial;
    size_t shown;       /* of partial, the bytes on the console already (ddp_lines_show) */
    bool redrawing;     /* its last line ended with a lone "\r": it redraws a progress bar */
    const char *prefix; /* borrowed; "" for none */
    size_t prefix_len;
    size_t max_line;
    /* Lines holding any of `filters` (borrowed, NULL-ended; "" matches all) are written to
     * `dup` as well, prefixed (--duplicate-stdout-filters); NULL: none. */
    ddp_console_t *dup;
    char *const *filters;
} ddp_lines_t;

void ddp_lines_init(ddp_lines_t *lines, const char *prefix, size_t max_line);

/* Writes the complete lines in data (after what was pending) to the console, each
 * with the prefix, and keeps the rest. A line ends with "\n", "\r\n", or a lone "\r",
 * so a progress bar that redraws itself with "\r" shows as it goes. Returns 0 or
 * -ENOMEM. */
int ddp_lines_feed(ddp_lines_t *lines, ddp_console_t *console, const char *data, size_t len);

/* Bytes of the unfinished line not on the console yet (a "\r" held last is none). */
size_t ddp_lines_unshown(const ddp_lines_t *lines);

/* Shows the unfinished line's new bytes now (a worker printing dots, a prompt, a progress
 * bar after its "\r"), without a newline: the line's next bytes continue it, and another
 * stream's line first ends it. Returns 0. */
int ddp_lines_show(ddp_lines_t *lines, ddp_console_t *console);

/* Writes the pending unfinished line, if any, with a newline added. */
int ddp_lines_finish(ddp_lines_t *lines, ddp_console_t *console);

void ddp_lines_free(ddp_lines_t *lines);

#endif
