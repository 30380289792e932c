/* One launcher on every node from one command.
 *
 * Inside a Slurm allocation (sbatch's script, salloc's shell) but outside a step,
 * ddp-launch runs itself once per node of the allocation through srun, as mpirun does,
 * and the job's exit status is srun's. Each of those launchers is in a step and finds its
 * place from Slurm's variables (config/slurm.c).
 *
 * Elsewhere, --hosts or --hostfile name the nodes: this launcher is node 0 (the first
 * host) and starts the others over ssh (BatchMode; DDP_LAUNCH_SSH is the ssh command),
 * each in this working directory with this launcher's PYTHON_EXEC, DDP_LAUNCH_LOG_LEVEL
 * and OMP_NUM_THREADS. A small supervisor process waits for all of them; node 0 runs in
 * a child of its own. With --rdzv-backend=etcd every host runs the same command with no
 * place given (etcd places them), and node 0 is a node like the others: the job goes on
 * without it, or without another, while --nnodes' MIN are left. */
#ifndef DDP_LAUNCHER_FANOUT_FANOUT_H
#define DDP_LAUNCHER_FANOUT_FANOUT_H

#include "config/config.h"
#include "log.h"

/* Replaces this process with `srun --nodes=N --ntasks=N --ntasks-per-node=1
 * <this ddp-launch> ARGS...` (argv[1..] as given); with --dry-run,
 * prints that command and the one each node then runs to `fd` instead. Returns an exit
 * code only when it cannot: srun not on PATH (DDP_EXIT_NOT_FOUND), exec failed. */
int ddp_fanout_slurm(const ddp_launch_config_t *cfg, int argc, char **argv, char *const *envp,
                     int fd, const ddp_log_t *log);

/* The nodes of --hosts or --hostfile. */
typedef struct {
    char **names;
    int *slots; /* a host's slots=N, 0 where none is given */
    int n;
} ddp_fanout_hosts_t;

/* Parses a hostfile: one host a line, "HOST [slots=N]", '#' comments, blank lines. 0, or
 * DDP_EPARSE with the line and the reason in `why`. */
int ddp_fanout_parse_hostfile(const char *text, ddp_fanout_hosts_t *out, ddp_buf_t *why);

/* The hosts of cfg->hosts or cfg->hostfile into `out` (freed with ddp_fanout_hosts_free),
 * and the job they make: --nnodes their count (etcd: unless given, at most that), node
 * rank 0, --master-addr the first host unless given (not with etcd), --nproc-per-node its
 * slots unless given. 0 or DDP_EUSAGE with why. */
int ddp_fanout_hosts(ddp_launch_config_t *cfg, ddp_fanout_hosts_t *out, ddp_buf_t *err);
void ddp_fanout_hosts_free(ddp_fanout_hosts_t *hosts);

/* Starts the job on `hosts`. With --dry-run, prints each node's command to `fd` and
 * returns. Else forks: in the child *run_here is set and it returns at once, to run node
 * 0's agent; the parent starts `ssh HOST 'cd DIR && exec env ... ddp-launch --nnodes=N
 * --node-rank=I --master-addr=H0 --master-port=P ARGS'` for every other host, forwards
 * the signals a launcher stops for to node 0 (which ends the job on every node), ends node
 * 0 when a node's ssh fails while the job runs, waits for everything, and returns the
 * job's exit status: node 0's, else the first other node's that is not 0. */
int ddp_fanout_ssh(const ddp_launch_config_t *cfg, const ddp_fanout_hosts_t *hosts, int argc,
                   char **argv, int fd, const ddp_log_t *log, bool *run_here);

/* Appends `word` for a POSIX shell: as it is when plain, else in single quotes. 0 or
 * -ENOMEM. (The nodes' command lines here, and --dry-run's.) */
int ddp_shell_word(ddp_buf_t *out, const char *word);

#endif
