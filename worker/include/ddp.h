/* libddp: the worker side of ddp-launch for C and CUDA programs.
 *
 * A program started by ddp-launch calls ddp_init() to learn its place in the job
 * from the environment the launcher gives it (RANK, WORLD_SIZE, LOCAL_RANK,
 * LOCAL_WORLD_SIZE, ...), and ddp_finalize() at the end. Functions that can fail
 * return 0 or a negative code that ddp_strerror() describes; details are also
 * written to stderr, prefixed "libddp:". */
#ifndef DDP_H
#define DDP_H

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ddp_s ddp_t;

/* Reads this worker's place in the job from the environment. On success *out is a
 * new context, owned by the caller until ddp_finalize(). A missing or inconsistent
 * variable fails with a message naming it (for example when the program was not
 * started by ddp-launch). */
int ddp_init(ddp_t **out);

/* This worker's global rank, 0 <= rank < world size. */
int ddp_rank(const ddp_t *ddp);
/* The number of workers in the job. */
int ddp_world_size(const ddp_t *ddp);
/* This worker's rank among the workers of its node. */
int ddp_local_rank(const ddp_t *ddp);
/* The number of workers on this worker's node. */
int ddp_local_world_size(const ddp_t *ddp);
/* The attempt number of the job (TORCHELASTIC_RESTART_COUNT), from 0. */
int ddp_restart_count(const ddp_t *ddp);

/* Frees the context. NULL is allowed. */
void ddp_finalize(ddp_t *ddp);

/* A static description of an error code returned by libddp. */
const char *ddp_strerror(int err);

#ifdef __cplusplus
}
#endif

#endif
