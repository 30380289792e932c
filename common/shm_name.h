/* The names of libddp's shared-memory segments, known to the launcher too: each begins with
 * its creator's pid, so the launcher can remove what a worker that died mid-way (between
 * creating its ring and the ranks' vote, after which it is unlinked) left in /dev/shm.
 * Header-only, pure. */
#ifndef DDP_COMMON_SHM_NAME_H
#define DDP_COMMON_SHM_NAME_H

/* "ddp-p<pid>-": the start of a segment's name in /dev/shm (shm_open adds the '/'). */
#define DDP_SHM_PID_PREFIX "ddp-p%d-"

#endif
