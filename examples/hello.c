/* ddp-hello: the smallest ddp-launch worker. Prints where it stands in the job.
 *
 * Run it with: ddp-launch --nproc-per-node=2 --no-python ./ddp-hello */
#include <ddp.h>

#include <stdio.h>
#include <unistd.h>

int main(void)
{
    ddp_t *ddp;
    char host[256] = "?";
    int err = ddp_init(&ddp);
    if (err != 0) {
        fprintf(stderr, "ddp-hello: %s\n", ddp_strerror(err));
        return 1;
    }
    gethostname(host, sizeof host - 1);
    printf("hello from rank %d of %d (local rank %d of %d on %s, pid %d, attempt %d)\n",
           ddp_rank(ddp), ddp_world_size(ddp), ddp_local_rank(ddp), ddp_local_world_size(ddp), host,
           (int)getpid(), ddp_restart_count(ddp));
    ddp_finalize(ddp);
    return 0;
}
