/* ddp-bench-allreduce-mpi: the Open MPI side of bench/allreduce, run with mpirun.
 *
 *   ddp-bench-allreduce-mpi OP SECONDS BYTES...
 *
 * OP is all_reduce (MPI_Allreduce of BYTES), reduce_scatter (MPI_Reduce_scatter_block:
 * BYTES in, BYTES / ranks out) or all_gather (MPI_Allgather: BYTES / ranks in, BYTES
 * out), float32 sums; the protocol is ddp-bench-allreduce's (a warm-up, as many ops as
 * fill about SECONDS as rank 0 decides, between two barriers; the slowest rank's time
 * per op). Rank 0 prints "bytes B seconds_per_op T iters N" per size. */
#include <mpi.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int op_of(const char *name)
{
    return strcmp(name, "all_reduce") == 0       ? 0
           : strcmp(name, "reduce_scatter") == 0 ? 1
           : strcmp(name, "all_gather") == 0     ? 2
                                                 : -1;
}

static void run(int op, float *in, float *out, size_t count, int ranks)
{
    int part = (int)(count / (size_t)ranks);
    if (op == 0)
        MPI_Allreduce(MPI_IN_PLACE, in, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    else if (op == 1)
        MPI_Reduce_scatter_block(in, out, part, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    else
        MPI_Allgather(in, part, MPI_FLOAT, out, part, MPI_FLOAT, MPI_COMM_WORLD);
}

int main(int argc, char **argv)
{
    int rank, ranks, op = argc > 1 ? op_of(argv[1]) : -1;
    if (argc < 4 || op < 0) {
        fprintf(stderr, "usage: ddp-bench-allreduce-mpi all_reduce|reduce_scatter|all_gather "
                        "SECONDS BYTES...\n");
        return 2;
    }
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    double seconds = atof(argv[2]);
    for (int a = 3; a < argc; a++) {
        size_t count = strtoull(argv[a], NULL, 10) / sizeof(float);
        float *in = calloc(count + 1, sizeof *in), *out = calloc(count + 1, sizeof *out);
        for (size_t i = 0; i < count; i++)
            in[i] = (float)(i % 7);
        run(op, in, out, count, ranks);
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        run(op, in, out, count, ranks);
        double one = MPI_Wtime() - t0;
        /* As ddp-bench-allreduce: warm-up ops for about 50 ms, then the timed ones. */
        int64_t plan[2] = {(int64_t)(0.05 / (one > 1e-6 ? one : 1e-6)),
                           (int64_t)(seconds / (one > 1e-6 ? one : 1e-6))};
        plan[0] = plan[0] < 1 ? 1 : plan[0] > 10000 ? 10000 : plan[0];
        plan[1] = plan[1] < 3 ? 3 : plan[1] > 100000 ? 100000 : plan[1];
        MPI_Bcast(plan, 2, MPI_INT64_T, 0, MPI_COMM_WORLD);
        for (int64_t i = 0; i < plan[0]; i++)
            run(op, in, out, count, ranks);
        int64_t iters = plan[1];
        MPI_Barrier(MPI_COMM_WORLD);
        t0 = MPI_Wtime();
        for (int64_t i = 0; i < iters; i++)
            run(op, in, out, count, ranks);
        MPI_Barrier(MPI_COMM_WORLD);
        double per_op = (MPI_Wtime() - t0) / (double)iters, slowest;
        MPI_Allreduce(&per_op, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        if (rank == 0)
            printf("bytes %zu seconds_per_op %.9f iters %lld\n", count * sizeof(float), slowest,
                   (long long)iters);
        fflush(stdout);
        free(in);
        free(out);
    }
    MPI_Finalize();
    return 0;
}
