/* Where a worker's stdout and stderr go: /dev/null, a log file, or a pipe that the loop
 * reads into the log file and onto the console in whole lines with the worker's prefix.
 *
 * Runs on the agent's loop. A piped stream is read as the pipe becomes readable (a
 * bounded share per event, so one chatty worker cannot starve the others) and drained
 * when its worker ends; it frees itself once its poll handle has closed. The console is
 * written by a thread of its own (the console writer), so a slow console (a pager, a full
 * pipe) never holds up the loop: a --tee'd stream's log file is written at once and its
 * console copy is read back from the file as the console takes it (it may lag, in bounded
 * memory, as torchrun's tail does); a stream that only goes to the console waits for it
 * past 1 MiB behind, as a worker writing to that console itself would. */
#ifndef DDP_LAUNCHER_OUTPUT_OUTPUT_H
#define DDP_LAUNCHER_OUTPUT_OUTPUT_H

#include "config/config.h"
#include "log.h"
#include "output/logs.h"

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include <pthread.h>

typedef struct ddp_stream_s ddp_stream_t;

/* The last bytes a worker's piped streams carried: for its last line in a failure's
 * report. Owned by the worker, so it outlives the streams. */
typedef struct {
    char data[512];
    size_t len;
} ddp_recent_t;

/* The last line with something on it in `recent` (an unfinished last one too), without
 * its line end, in buf[cap]; "" when there is none. */
const char *ddp_recent_line(const ddp_recent_t *recent, char *buf, size_t cap);
typedef struct ddp_tail_s ddp_tail_t;

/* What every stream of one agent shares. */
typedef struct {
    uv_loop_t *loop;
    const ddp_log_t *log;
    ddp_console_t console_out, console_err; /* written by the console writer only */
    char scratch[64 * 1024];                /* one read's bytes */
    /* The console writer. Under `lock`: the tails, `busy`, `stopping`. */
    pthread_t writer;
    pthread_mutex_t lock;
    pthread_cond_t work, idle;
    ddp_tail_t *tails;
    bool started, busy, stopping, async_open;
    bool said_gone;       /* the writer's: that the console's stdout went away */
    uv_async_t resume;    /* the writer asks the loop to read paused streams again */
    ddp_stream_t *paused; /* loop only: streams waiting for the console */
    ddp_stream_t *ptys;   /* loop only: the open streams on pseudo-terminals */
} ddp_output_t;

/* Sets up `output` for `loop` and `log`: its consoles the launcher's stdout and stderr,
 * one file where `merged` (a terminal's: they share what line is open). */
void ddp_output_init(ddp_output_t *output, uv_loop_t *loop, const ddp_log_t *log, bool merged);

/* Starts the console writer (after the loop is initialised, before any stream is watched).
 * Returns 0 or -errno. */
int ddp_output_start(ddp_output_t *output);

/* Closes the writer's loop handle (with the loop's other handles). */
void ddp_output_close_handles(ddp_output_t *output);

/* Waits until the console writer has written everything handed to it: at most `timeout`
 * seconds, or for good when `timeout` < 0. */
void ddp_output_flush(ddp_output_t *output, double timeout);

/* Writes everything still pending (no time limit: nothing is lost) and ends the writer. */
void ddp_output_stop(ddp_output_t *output);

/* Opens where stream `std` (DDP_STD_OUT or DDP_STD_ERR) of local rank `local_rank` goes,
 * under `attempt_dir`, its lines prefixed with `prefix` when tee'd (borrowed until the
 * stream closes). *child_fd is the descriptor the worker gets (the caller closes it
 * after the spawn); *stream is set for a piped stream (NULL otherwise). Logs and
 * returns -errno on failure. */
int ddp_output_open(ddp_output_t *output, const ddp_launch_config_t *cfg, const char *attempt_dir,
                    int local_rank, const char *prefix, int std, int *child_fd,
                    ddp_stream_t **stream);

/* Once the worker runs: reads the stream as it becomes readable; *owner is set to it,
 * and back to NULL when it closes; its last bytes go to `recent` (NULL: nowhere), which
 * must outlive it. On failure (logged) the stream is discarded and the worker writes into
 * a closed pipe. */
void ddp_output_watch(ddp_stream_t *stream, ddp_stream_t **owner, ddp_recent_t *recent,
                      int local_rank);

/* A stream that was never watched (the spawn failed). NULL is harmless. */
void ddp_output_discard(ddp_stream_t *stream);

/* The console's terminal was resized: every stream on a pseudo-terminal takes its size. */
void ddp_output_resize(ddp_output_t *output);

/* The bytes read from the stream so far (0 for NULL). */
uint64_t ddp_output_bytes(const ddp_stream_t *stream);

/* Reads everything the pipe holds now; then closes the stream when `close_after`. NULL
 * is harmless. */
void ddp_output_drain(ddp_stream_t *stream, bool close_after);

#endif
