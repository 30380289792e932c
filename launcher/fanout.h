/* One launcher on every node from one command: inside a Slurm allocation (sbatch's
 * script, salloc's shell) but outside a step, ddp-launch runs itself once per node of the
 * allocation through srun, as mpirun does, and the job's exit status is srun's. Each of
 * those launchers is in a step and finds its place from Slurm's variables (cli.c). */
#ifndef DDP_LAUNCHER_FANOUT_H
#define DDP_LAUNCHER_FANOUT_H

#include "config.h"
#include "log.h"

/* Replaces this process with `srun --nodes=N --ntasks=N --ntasks-per-node=1
 * --kill-on-bad-exit=1 <this ddp-launch> ARGS...` (argv[1..] as given); with --dry-run,
 * prints that command and the one each node then runs to `fd` instead. Returns an exit
 * code only when it cannot: srun not on PATH (DDP_EXIT_NOT_FOUND), exec failed. */
int ddp_fanout_slurm(const ddp_launch_config_t *cfg, int argc, char **argv, char *const *envp,
                     int fd, const ddp_log_t *log);

#endif
