/* ddp-bench-allreduce: the libddp side of bench/allreduce, run under ddp-launch.
 *
 *   ddp-bench-allreduce [--op all_reduce|reduce_scatter|all_gather] SECONDS BYTES...
 *   ddp-bench-allreduce --memcpy SECONDS BYTES...
 *
 * For each size, all-reduces (float32, sum) a buffer of BYTES (reduce_scatter: BYTES in,
 * BYTES / ranks out; all_gather: BYTES / ranks in, BYTES out): a warm-up, then as many
 * ops as fill about SECONDS (rank 0 decides, so every rank runs the same number), timed
 * between two barriers. Rank 0 prints "bytes B seconds_per_op T" per size, T being the
 * slowest rank's time over the ops. --memcpy, without a launcher, times one memcpy of
 * BYTES instead: the machine's bound the table is measured against. */
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

/* One memcpy of each size, in a single process. */
static int time_memcpy(double seconds, int argc, char **argv)
{
    for (int a = 0; a < argc; a++) {
        size_t bytes = strtoull(argv[a], NULL, 10);
        char *src = malloc(bytes + 1), *dst = malloc(bytes + 1);
        memset(src, 7, bytes + 1);
        memset(dst, 0, bytes + 1);
        memcpy(dst, src, bytes); /* warm up */
        int64_t iters = 0;
        double t0 = now(), t;
        do {
            memcpy(dst, src, bytes);
            iters++;
        } while ((t = now() - t0) < seconds && iters < 1000000);
        printf("bytes %zu seconds_per_op %.9f iters %lld\n", bytes, t / (double)iters,
               (long long)iters);
        free(src);
        free(dst);
    }
    return 0;
}

typedef enum { ALL_REDUCE, REDUCE_SCATTER, ALL_GATHER } op_t;

static int run(ddp_t *ddp, op_t op, float *in, float *out, size_t count)
{
    size_t part = count / (size_t)ddp_world_size(ddp);
    if (op == ALL_REDUCE)
        return ddp_all_reduce(ddp, in, count, DDP_FLOAT32, DDP_SUM);
    if (op == REDUCE_SCATTER)
        return ddp_reduce_scatter(ddp, in, out, part, DDP_FLOAT32, DDP_SUM);
    return ddp_all_gather(ddp, in, out, part, DDP_FLOAT32);
}

int main(int argc, char **argv)
{
    ddp_t *ddp = NULL;
    op_t op = ALL_REDUCE;
    if (argc > 2 && strcmp(argv[1], "--memcpy") == 0)
        return time_memcpy(atof(argv[2]), argc - 3, argv + 3);
    if (argc > 2 && strcmp(argv[1], "--op") == 0) {
        op = strcmp(argv[2], "reduce_scatter") == 0 ? REDUCE_SCATTER
             : strcmp(argv[2], "all_gather") == 0   ? ALL_GATHER
                                                    : ALL_REDUCE;
        argc -= 2;
        argv += 2;
    }
    if (argc < 3) {
        fprintf(stderr, "usage: ddp-bench-allreduce [--op all_reduce|reduce_scatter|all_gather] "
                        "SECONDS BYTES...\n");
        return 2;
    }
    double seconds = atof(argv[1]);
    check(NULL, ddp_init(&ddp));
    for (int a = 2; a < argc; a++) {
        size_t count = strtoull(argv[a], NULL, 10) / sizeof(float);
        float *buf = calloc(count + 1, sizeof *buf), *out = calloc(count + 1, sizeof *out);
        for (size_t i = 0; i < count; i++)
            buf[i] = (float)(i % 7);
        /* One op to learn its time; then, rank 0 deciding for all, warm-up ops for about
         * 50 ms (caches, the CPUs' clocks, the peers' spinning) and the timed ones. */
        check(ddp, run(ddp, op, buf, out, count));
        check(ddp, ddp_barrier(ddp));
        double t0 = now();
        check(ddp, run(ddp, op, buf, out, count));
        double one = now() - t0;
        int64_t plan[2] = {(int64_t)(0.05 / (one > 1e-6 ? one : 1e-6)),
                           (int64_t)(seconds / (one > 1e-6 ? one : 1e-6))};
        plan[0] = plan[0] < 1 ? 1 : plan[0] > 10000 ? 10000 : plan[0];
        plan[1] = plan[1] < 3 ? 3 : plan[1] > 100000 ? 100000 : plan[1];
        check(ddp, ddp_broadcast(ddp, plan, 2, DDP_INT64, 0));
        for (int64_t i = 0; i < plan[0]; i++)
            check(ddp, run(ddp, op, buf, out, count));
        int64_t iters = plan[1];
        check(ddp, ddp_barrier(ddp));
        t0 = now();
        for (int64_t i = 0; i < iters; i++)
            check(ddp, run(ddp, op, buf, out, count));
        check(ddp, ddp_barrier(ddp));
        double per_op = (now() - t0) / (double)iters;
        check(ddp, ddp_all_reduce(ddp, &per_op, 1, DDP_FLOAT64, DDP_MAX));
        if (ddp_rank(ddp) == 0)
            printf("bytes %zu seconds_per_op %.9f iters %lld\n", count * sizeof(float), per_op,
                   (long long)iters);
        fflush(stdout);
        free(buf);
        free(out);
    }
    ddp_finalize(ddp);
    return 0;
}
