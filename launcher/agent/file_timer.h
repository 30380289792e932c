/* torchrun's worker watchdog (TORCHELASTIC_ENABLE_FILE_TIMER=1), on the agent's loop.
 *
 * The launcher makes a FIFO (TORCHELASTIC_TIMER_FILE, or a new name) that every worker is
 * told of; torch.distributed.elastic.timer's FileTimerClient writes one JSON request a
 * line to it: {"version": 1, "pid": P, "scope_id": S, "expiration_time": T (wall clock,
 * s), "signal": N}, a negative time releasing the timer (pid, scope). A timer that
 * expires sends its signal to its process (SIGKILL by the client's default), which then
 * fails as any worker does; its timers go with it. As torchrun's FileTimerServer, with
 * these differences: only a process of one of this node's workers' process groups is
 * signalled (the FIFO is the user's alone, mode 0600, and a request naming another pid
 * is said and dropped); an expired timer without a signal is said once and dropped
 * rather than every 0.1 s; a malformed request is said and skipped. Requests are read
 * as they come (no polling interval) and the next expiry is a loop timer, so nothing is
 * O(timers) per interval but the expiry itself. */
#ifndef DDP_LAUNCHER_AGENT_FILE_TIMER_H
#define DDP_LAUNCHER_AGENT_FILE_TIMER_H

#include "buf.h"
#include "log.h"

#include <stdbool.h>
#include <sys/types.h>
#include <uv.h>

typedef struct ddp_file_timer_s ddp_file_timer_t;

/* The local rank of the worker whose process group holds `pid`, or -1. */
typedef int (*ddp_file_timer_owner_fn)(void *ctx, pid_t pid);

/* A timer expired: `sig` was sent to `pid` of `local_rank` (its scope `scope`, as a message
 * shows it: escaped, its first 200 bytes). */
typedef void (*ddp_file_timer_fired_fn)(void *ctx, pid_t pid, int local_rank, const char *scope,
                                        int sig);

/* Makes the FIFO at `path` (what was there is replaced, as torchrun does), or, with
 * `path` NULL, at <dir>/watchdog_timer_<uuid>. Returns 0, or -errno with `why` set. */
int ddp_file_timer_create(const char *path, const char *dir, const ddp_log_t *log,
                          ddp_file_timer_t **out, ddp_buf_t *why);

/* The FIFO's path, for the workers' TORCHELASTIC_TIMER_FILE. */
const char *ddp_file_timer_path(const ddp_file_timer_t *t);

/* Reads requests on `loop` from now on. Returns 0 or a libuv error. */
int ddp_file_timer_watch(ddp_file_timer_t *t, uv_loop_t *loop, ddp_file_timer_owner_fn owner,
                         ddp_file_timer_fired_fn fired, void *ctx);

/* Forgets every timer (a new attempt: the old workers are gone). */
void ddp_file_timer_clear(ddp_file_timer_t *t);

/* Moves every timer's expiry `seconds` later: the time the job stood stopped (Ctrl-Z)
 * is no worker's. NULL is harmless. */
void ddp_file_timer_postpone(ddp_file_timer_t *t, double seconds);

/* While held, no timer fires (the workers are stopped while this loop runs: the store's
 * host was stopped); released, they fire as due (postpone them first). NULL is harmless. */
void ddp_file_timer_hold(ddp_file_timer_t *t, bool hold);

/* Stops reading (with the loop's other handles). NULL is harmless. */
void ddp_file_timer_close(ddp_file_timer_t *t);

/* After the loop: removes the FIFO and frees. NULL is harmless. */
void ddp_file_timer_free(ddp_file_timer_t *t);

#endif
