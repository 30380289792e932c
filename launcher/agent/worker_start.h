/* Starting a worker, the agent's part (agent/worker_start.c): its environment, and --warm-restarts:
 * the zygote, started once the first attempt's workers run (or as a launcher that may wait
 * as a hot spare joins), held while it imports as long as the workers need every CPU; a
 * later attempt's workers forked from it where it serves, else started cold. Runs on the
 * agent's loop thread. */
#ifndef DDP_LAUNCHER_AGENT_WORKER_START_H
#define DDP_LAUNCHER_AGENT_WORKER_START_H

#include "agent/group.h"

#include <sys/types.h>

typedef struct ddp_worker_start_s ddp_worker_start_t;

/* The program every worker runs, found as execvp(3) would: python (PYTHON_EXEC), or the
 * script itself with --no-python (*program, malloc'd), and the workers' torch version
 * (*torch_version, 0: unknown); where it is not there, or the script is not (every node
 * needs it), said with a hint, and the exit status: 127 (not found) or 126. 0 once found
 * (torchrun's OMP_NUM_THREADS warning then said). */
int ddp_worker_start_find_program(const ddp_launch_config_t *cfg, const ddp_log_t *log,
                                  const char *host, char **program, int *torch_version);

/* The part of group `g` (which must outlive it), its handle made on g->loop; says where
 * --warm-restarts cannot apply (the workers are not Python, no zygote script, the
 * launcher is no child subreaper). 0 or -ENOMEM. */
int ddp_worker_start_new(ddp_group_t *g, ddp_worker_start_t **out);
/* Ends the zygote and closes the handle (with the loop's others); frees, once the loop
 * has closed it. */
void ddp_worker_start_close(ddp_worker_start_t *s);
void ddp_worker_start_free(ddp_worker_start_t *s);

/* Worker w's environment for this attempt, torchrun's (worker_spec.h) with its error file
 * `error_file`; *added holds the strings *envp points to, both the caller's. 0 or -errno. */
int ddp_worker_start_env(const ddp_group_t *g, const ddp_worker_t *w, const char *error_file,
                         char ***added, char ***envp);

/* What a started worker holds, for the agent's worker table. */
typedef struct {
    pid_t pid;
    char *prefix;            /* its lines' prefix (malloc'd; its streams borrow it) */
    char *error_file;        /* its error.json's path (malloc'd) */
    ddp_stream_t *out, *err; /* its piped streams, to be watched (NULL: not piped) */
} ddp_started_t;

/* A new attempt: none of its workers forked or said to start cold yet. */
void ddp_worker_start_attempt(ddp_worker_start_t *s);
/* Starts worker `w` of the attempt (its ranks set) in <attempt dir>/<local rank>: its
 * argv, environment and streams, then the process, forked from the zygote where it serves,
 * else cold (why said once an attempt), with its own process group, the orphan guard's
 * record, the binding and limits of spawn.h. 0 and *out, or -errno (what failed said;
 * nothing of it left open). */
int ddp_worker_start_spawn(ddp_worker_start_t *s, const ddp_worker_t *w, ddp_started_t *out);
/* How many of this attempt's workers were forked from the zygote. */
int ddp_worker_start_forked(const ddp_worker_start_t *s);

/* --warm-restarts: the zygote, once the first attempt's workers run, or as a launcher that
 * may be a hot spare joins; one still importing is looked at again for the workers just
 * started. Nothing waits for it. */
void ddp_worker_start_zygote(ddp_worker_start_t *s);
/* After a SIGCHLD: the zygote reaped where it ended (another may start, and is watched). */
void ddp_worker_start_reap(ddp_worker_start_t *s);
/* The zygote's pid, 0 where none runs. */
pid_t ddp_worker_start_zygote_pid(const ddp_worker_start_t *s);

#endif
