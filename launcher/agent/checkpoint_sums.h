/* In-memory checkpoints' checksums, written in the background (agent/checkpoint_sums.c): a
 * thread of its own looks at the slots in the launcher's checkpoint directory every
 * LOOK_MS while it holds files (while it holds none, when one is made there: inotify, and
 * every EMPTY_LOOK_MS; every EMPTY_POLL_MS without inotify), checksums each one that is
 * complete and not summed yet, and writes the sum, then the generation it covers
 * (common/ckpt.h's contract), so that a torn or corrupted slot is never loaded. It counts
 * the bytes the directory's files hold, and with
 * --checkpoint-dir copies each rank's newest slot to disk (every --checkpoint-persist-every
 * saves, and at the end of a job that failed or was stopped). A slot file that
 * is a link, not a regular file, or that says more bytes than it holds is said once and
 * left alone. The thread reads with pread, one slot at a time at a low priority, resting
 * three times as long as it worked (at most a quarter of a CPU), and ends with the part; the
 * functions here run on the agent's loop thread. */
#ifndef DDP_LAUNCHER_AGENT_CHECKPOINT_SUMS_H
#define DDP_LAUNCHER_AGENT_CHECKPOINT_SUMS_H

#include "log.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct ddp_checkpoint_sums_s ddp_checkpoint_sums_t;

/* Starts the thread over the slots in `dir` (copied). With `persist_dir` (--checkpoint-dir;
 * NULL: none) a rank's newest checksummed slot is copied there as rank<R>.ckpt every
 * `every` saves (0: never but at the end). `summed` (NULL: none) is called with `ctx` on the
 * thread after each look that wrote a sum. 0 and *out, or -errno (said). */
int ddp_checkpoint_sums_start(const char *dir, const char *persist_dir, int every,
                              void (*summed)(void *ctx), void *ctx, const ddp_log_t *log,
                              ddp_checkpoint_sums_t **out);

/* The bytes the directory's files hold (their pages), at the last look, and at most. */
uint64_t ddp_checkpoint_sums_held(const ddp_checkpoint_sums_t *s, uint64_t *peak);

/* Ends the thread (a sum under way stops at its next MiB) and frees. With `persist` (the job
 * failed or was stopped) and a persist_dir, a last look first copies every rank's newest
 * checkpoint there. NULL: nothing. */
void ddp_checkpoint_sums_stop(ddp_checkpoint_sums_t *s, bool persist);

#endif
