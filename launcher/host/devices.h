/* Counting the accelerators of this node for --nproc-per-node=gpu|auto.
 *
 * The launcher never links CUDA: when ddp-launch is built with CUDA it dlopens the
 * driver (libcuda.so.1) and asks it, so the same binary runs where no driver is
 * installed. Main thread, before the loop. */
#ifndef DDP_LAUNCHER_HOST_DEVICES_H
#define DDP_LAUNCHER_HOST_DEVICES_H

#include "buf.h"

/* Sets *count to the CUDA devices visible to this process (CUDA_VISIBLE_DEVICES
 * applies). Returns 0, DDP_ENOCUDA when built without CUDA, or DDP_ECUDA when the
 * driver is missing, fails or finds no device; `why` says which. */
int ddp_devices_cuda_count(int *count, ddp_buf_t *why);

/* Sets *count to the Intel GPUs (XPUs) the workers' torch sees: PYTHON_EXEC `python` (found
 * in PATH) asks torch.xpu, as torchrun does; there is no way to count them without torch.
 * Blocking, at most 120 s. Returns 0, or DDP_EUSAGE with `why` (none available, no torch,
 * no python, no answer). */
int ddp_devices_xpu_count(const char *python, int *count, ddp_buf_t *why);

#endif
