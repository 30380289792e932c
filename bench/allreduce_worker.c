/* ddp-bench-allreduce: the libddp side of bench/allreduce, run under ddp-launch.
 *
 *   ddp-bench-allreduce SECONDS BYTES...
 *
 * For each size, all-reduces (float32, sum) a buffer of BYTES: a warm-up, then as many
 * ops as fill about SECONDS (rank 0 decides, so every rank runs the same number), timed
 * between two barriers. Rank 0 prints "bytes B seconds_per_op T" per size, T being the
 * slowest rank's time over the ops. */
#include <ddp.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void check(ddp_t *ddp, int err)
{
    if (err != 0) {
        fprintf(stderr, "ddp-bench-allreduce: %s: %s\n", ddp_strerror(err),
                ddp ? ddp_last_error(ddp) : "");
        exit(1);
    }
}

int main(int argc, char **argv)
{
    ddp_t *ddp = NULL;
    if (argc < 3) {
        fprintf(stderr, "usage: ddp-bench-allreduce SECONDS BYTES...\n");
        return 2;
    }
    double seconds = atof(argv[1]);
    check(NULL, ddp_init(&ddp));
    for (int a = 2; a < argc; a++) {
        size_t count = strtoull(argv[a], NULL, 10) / sizeof(float);
        float *buf = calloc(count + 1, sizeof *buf);
        for (size_t i = 0; i < count; i++)
            buf[i] = (float)(i % 7);
        /* Warm up, and measure one op to choose how many fill the time. */
        check(ddp, ddp_all_reduce(ddp, buf, count, DDP_FLOAT32, DDP_SUM));
        check(ddp, ddp_barrier(ddp));
        double t0 = now();
        check(ddp, ddp_all_reduce(ddp, buf, count, DDP_FLOAT32, DDP_SUM));
        double one = now() - t0;
        int64_t iters = (int64_t)(seconds / (one > 1e-6 ? one : 1e-6));
        iters = iters < 3 ? 3 : iters > 100000 ? 100000 : iters;
        check(ddp, ddp_broadcast(ddp, &iters, 1, DDP_INT64, 0));
        check(ddp, ddp_barrier(ddp));
        t0 = now();
        for (int64_t i = 0; i < iters; i++)
            check(ddp, ddp_all_reduce(ddp, buf, count, DDP_FLOAT32, DDP_SUM));
        check(ddp, ddp_barrier(ddp));
        double per_op = (now() - t0) / (double)iters;
        check(ddp, ddp_all_reduce(ddp, &per_op, 1, DDP_FLOAT64, DDP_MAX));
        if (ddp_rank(ddp) == 0)
            printf("bytes %zu seconds_per_op %.9f iters %lld\n", count * sizeof(float), per_op,
                   (long long)iters);
        fflush(stdout);
        free(buf);
    }
    ddp_finalize(ddp);
    return 0;
}
