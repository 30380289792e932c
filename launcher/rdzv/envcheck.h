/* The environment the nodes of a job must agree on (see ddp-launch(1), ENVIRONMENT
 * CHECK): each launcher publishes its values in one record a round; the coordinator
 * compares the records of the round's members and says what differs, grouped by value,
 * in a few lines however many nodes there are. */
#ifndef DDP_LAUNCHER_RDZV_ENVCHECK_H
#define DDP_LAUNCHER_RDZV_ENVCHECK_H

#include "buf.h"
#include "config/config.h"

#define DDP_ENVCHECK_VALUE_MAX 160 /* longer values are compared and shown cut, with "..." */

/* This launcher's record: "NAME=VALUE" lines, sorted, for the variables set in `envp`
 * that are compared (NCCL_* but the per-process ones, TORCH_NCCL_*,
 * TORCH_DISTRIBUTED_DEBUG, GLOO_SOCKET_IFNAME, OMP_NUM_THREADS, PYTHONHASHSEED and
 * cfg->env_check's names), plus "(visible GPUs)" (CUDA_VISIBLE_DEVICES' entries, else the
 * /dev/nvidiaN devices) and "(NCCL version)" where libnccl.so.2 loads. */
int ddp_envcheck_record(const ddp_launch_config_t *cfg, char *const *envp, ddp_buf_t *out);

/* Compares the records of nodes 0..n-1 (records[i] NULL: none; every variable unset).
 * Appends one line a differing variable to `out` ("NCCL_IB_DISABLE differs: '1' on
 * nodes 0-2, unset on node 3"), at most `most` lines and values, and returns how many
 * variables differ. */
int ddp_envcheck_compare(const char *const *records, int n, int most, ddp_buf_t *out);

#endif
