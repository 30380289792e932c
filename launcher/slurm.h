/* Slurm's environment: its host lists ("node[01-04,07]") and what a job step tells
 * ddp-launch when no flag does (SLURM_NNODES, SLURM_NODEID, the first host of
 * SLURM_JOB_NODELIST). Pure. */
#ifndef DDP_LAUNCHER_SLURM_H
#define DDP_LAUNCHER_SLURM_H

#include "buf.h"

#include <stddef.h>

/* Calls emit(ctx, host) for each host of a Slurm host list, in Slurm's order: entries
 * separated by commas, each a name with bracketed ranges ("n[1-3,7]", "r[1-2]-n[01-02]":
 * every combination, the last bracket varying fastest; a range keeps the width of its
 * zero-padded lower bound). emit returns nonzero to stop early. 0, or DDP_EINVAL with
 * the reason in `why` (unbalanced brackets, a bad range, an empty name, more than
 * 1,000,000 hosts). */
int ddp_slurm_hostlist_each(const char *list, int (*emit)(void *ctx, const char *host), void *ctx,
                            ddp_buf_t *why);

/* The first host of `list` into out[cap]. 0, or DDP_EINVAL with the reason in `why`. */
int ddp_slurm_first_host(const char *list, char *out, size_t cap, ddp_buf_t *why);

#endif
