/* ddp-test-nccl: a libddp worker on the NCCL backend, run under ddp-launch by the gpu
 * suite (tests/gpu/test_gpu.c).
 *
 *   count        prints "gpus N" (the CUDA runtime's device count); no launcher needed
 *   collectives  all_reduce of every dtype (f16 and bf16 too) and op at several sizes
 *                against a serial reference, bitwise equal across ranks; broadcast from
 *                every root; all_gather; barrier; a host pointer refused with DDP_EUSAGE
 *   more         reduce to every root, reduce_scatter, all_to_all, gather and scatter from
 *                every root, send and recv around the ring, on device buffers of f32,
 *                int64, bf16 and f16, exact against the inputs
 *   die VICTIM   all_reduce in a loop; rank VICTIM SIGKILLs itself; the others ignore
 *                SIGTERM and must end with libddp's error, not hang
 *   auto         the auto backend ("cpu+nccl"): host buffers on the CPU ring, device
 *                buffers on NCCL (created by the first of them), a reducer of device
 *                gradients; mixing host and device memory refused; f16 on the host summed
 * Prints "<mode> ok, world N" on success; exits 1 on a wrong result, 3 when a call fails. */
#include <ddp.h>

#include "../helpers/elements.h"
#include "hash.h"

#include <cuda_runtime_api.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static ddp_t *ddp;
static int rank, world;

#define CALL(what, expr)                                                                    \
    do {                                                                                    \
        int err_ = (expr);                                                                  \
        if (err_ != 0) {                                                                    \
            fprintf(stderr, "rank %d: %s failed: %s: %s\n", rank, what, ddp_strerror(err_), \
                    ddp_last_error(ddp));                                                   \
            exit(3);                                                                        \
        }                                                                                   \
    } while (0)

#define CUDA(expr)                                                                     \
    do {                                                                               \
        cudaError_t c_ = (expr);                                                       \
        if (c_ != cudaSuccess) {                                                       \
            fprintf(stderr, "rank %d: %s: %s\n", rank, #expr, cudaGetErrorString(c_)); \
            exit(3);                                                                   \
        }                                                                              \
    } while (0)

/* Small integers, so that every sum of up to 8 ranks is exact in every type (bf16 has 8
 * bits of mantissa). */
static double input(int r, size_t i)
{
    uint64_t h = (uint64_t)i * 0x9E3779B97F4A7C15ull + (uint64_t)r * 0xBF58476D1CE4E5B9ull;
    h ^= h >> 31;
    return (double)(int)(h % 31) - 15.0;
}

static void put(void *buf, size_t i, ddp_dtype_t t, double v)
{
    float f = (float)v;
    uint32_t x;
    switch (t) {
    case DDP_FLOAT32:
        ((float *)buf)[i] = f;
        break;
    case DDP_FLOAT64:
        ((double *)buf)[i] = v;
        break;
    case DDP_INT32:
        ((int32_t *)buf)[i] = (int32_t)v;
        break;
    case DDP_INT64:
        ((int64_t *)buf)[i] = (int64_t)v;
        break;
    case DDP_FLOAT16:
        ((uint16_t *)buf)[i] = element_to_half(f);
        break;
    case DDP_BFLOAT16:
        memcpy(&x, &f, 4);
        ((uint16_t *)buf)[i] = (uint16_t)(x >> 16);
        break;
    }
}

static void same_everywhere(const void *host, size_t len)
{
    int64_t mine = (int64_t)ddp_fnv1a64(host, len), *d_mine, *d_all,
            *all = malloc((size_t)world * 8);
    CUDA(cudaMalloc((void **)&d_mine, 8));
    CUDA(cudaMalloc((void **)&d_all, (size_t)world * 8));
    CUDA(cudaMemcpy(d_mine, &mine, 8, cudaMemcpyHostToDevice));
    CALL("all_gather", ddp_all_gather(ddp, d_mine, d_all, 1, DDP_INT64));
    CUDA(cudaMemcpy(all, d_all, (size_t)world * 8, cudaMemcpyDeviceToHost));
    for (int r = 0; r < world; r++) {
        if (all[r] != mine) {
            fprintf(stderr, "rank %d: all_reduce result differs from rank %d's bits\n", rank, r);
            exit(1);
        }
    }
    cudaFree(d_mine);
    cudaFree(d_all);
    free(all);
}

static void check_all_reduce(ddp_dtype_t t, ddp_reduce_op_t op, size_t count)
{
    size_t es = element_size(t);
    uint8_t *host = malloc(count * es + 8), *one = malloc(8);
    void *dev;
    for (size_t i = 0; i < count; i++)
        put(host, i, t, input(rank, i));
    CUDA(cudaMalloc(&dev, count * es + 8));
    CUDA(cudaMemcpy(dev, host, count * es, cudaMemcpyHostToDevice));
    CALL("all_reduce", ddp_all_reduce(ddp, dev, count, t, op));
    CUDA(cudaMemcpy(host, dev, count * es, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < count; i++) {
        double ref = 0;
        for (int r = 0; r < world; r++) {
            double v = input(r, i);
            if (r == 0 || op == DDP_SUM || op == DDP_AVG)
                ref = r == 0 ? v : ref + v;
            else
                ref = op == DDP_MIN ? fmin(ref, v) : fmax(ref, v);
        }
        if (op == DDP_AVG) {
            ref = (t == DDP_INT32 || t == DDP_INT64) ? trunc(ref / world) : ref / world;
            put(one, 0, t, ref); /* the average as the type holds it */
            ref = element_load(one, 0, t);
        }
        double got = element_load(host, i, t), tol = op == DDP_AVG ? fabs(ref) * 1e-2 + 1e-2 : 0;
        if (fabs(got - ref) > tol) {
            fprintf(stderr, "rank %d: dtype %d op %d count %zu: [%zu] = %g, expected %g\n", rank,
                    (int)t, (int)op, count, i, got, ref);
            exit(1);
        }
    }
    same_everywhere(host, count * es);
    cudaFree(dev);
    free(host);
    free(one);
}

/* Expects `err` to be a usage error whose message holds `want`. */
static void refused(const char *what, int err, const char *want)
{
    if (err != DDP_EUSAGE || strstr(ddp_last_error(ddp), want) == NULL) {
        fprintf(stderr, "rank %d: %s gave %d: %s\n", rank, what, err, ddp_last_error(ddp));
        exit(1);
    }
}

static void mode_collectives(void)
{
    static const size_t sizes[] = {0, 1, 7, 1000, (1u << 20) + 3};
    static const ddp_dtype_t types[] = {DDP_FLOAT32, DDP_FLOAT64, DDP_INT32,
                                        DDP_INT64,   DDP_FLOAT16, DDP_BFLOAT16};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
        for (size_t t = 0; t < sizeof types / sizeof types[0]; t++)
            for (int op = DDP_SUM; op <= DDP_MAX; op++)
                check_all_reduce(types[t], (ddp_reduce_op_t)op, sizes[s]);
    /* Broadcast from every root and all_gather, of int64. */
    size_t n = 4099;
    int64_t *host = malloc(n * world * 8), *dev, *dev_all;
    CUDA(cudaMalloc((void **)&dev, n * 8));
    CUDA(cudaMalloc((void **)&dev_all, n * world * 8));
    for (int root = 0; root < world; root++) {
        for (size_t i = 0; i < n; i++)
            host[i] = rank == root ? (int64_t)(i * 5 + (size_t)root) : -1;
        CUDA(cudaMemcpy(dev, host, n * 8, cudaMemcpyHostToDevice));
        CALL("broadcast", ddp_broadcast(ddp, dev, n, DDP_INT64, root));
        CUDA(cudaMemcpy(host, dev, n * 8, cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < n; i++) {
            if (host[i] != (int64_t)(i * 5 + (size_t)root)) {
                fprintf(stderr, "rank %d: broadcast from %d wrong at %zu\n", rank, root, i);
                exit(1);
            }
        }
    }
    for (size_t i = 0; i < n; i++)
        host[i] = rank * 1000000 + (int64_t)i;
    CUDA(cudaMemcpy(dev, host, n * 8, cudaMemcpyHostToDevice));
    CALL("all_gather", ddp_all_gather(ddp, dev, dev_all, n, DDP_INT64));
    CUDA(cudaMemcpy(host, dev_all, n * world * 8, cudaMemcpyDeviceToHost));
    for (int r = 0; r < world; r++) {
        for (size_t i = 0; i < n; i++) {
            if (host[(size_t)r * n + i] != r * 1000000 + (int64_t)i) {
                fprintf(stderr, "rank %d: all_gather block %d wrong at %zu\n", rank, r, i);
                exit(1);
            }
        }
    }
    for (int i = 0; i < 20; i++)
        CALL("barrier", ddp_barrier(ddp));
    /* A host buffer is the caller's mistake, said so; a fresh context is not broken by it. */
    float on_host[4] = {0};
    refused("a host pointer", ddp_all_reduce(ddp, on_host, 4, DDP_FLOAT32, DDP_SUM), "host memory");
    cudaFree(dev);
    cudaFree(dev_all);
    free(host);
    printf("collectives ok, world %d\n", world);
}

/* A device buffer holding rank r's input elements first .. first + count - 1. */
static void *device_inputs(int r, size_t first, size_t count, ddp_dtype_t t)
{
    size_t es = element_size(t);
    uint8_t *host = malloc(count * es + 8);
    void *dev;
    for (size_t i = 0; i < count; i++)
        put(host, i, t, input(r, first + i));
    CUDA(cudaMalloc(&dev, count * es + 8));
    CUDA(cudaMemcpy(dev, host, count * es, cudaMemcpyHostToDevice));
    free(host);
    return dev;
}

/* The device buffer must hold `count` elements equal to want(i). */
static void expect(const char *what, const void *dev, size_t count, ddp_dtype_t t,
                   double (*want)(size_t i, const void *ctx), const void *ctx)
{
    size_t es = element_size(t);
    uint8_t *host = malloc(count * es + 8);
    CUDA(cudaMemcpy(host, dev, count * es, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < count; i++) {
        if (element_load(host, i, t) != want(i, ctx)) {
            fprintf(stderr, "rank %d: %s dtype %d count %zu: [%zu] = %g, expected %g\n", rank, what,
                    (int)t, count, i, element_load(host, i, t), want(i, ctx));
            exit(1);
        }
    }
    free(host);
}

typedef struct {
    int rank;      /* whose input; -1: the sum (or max) over the ranks */
    size_t first;  /* from which element */
    size_t stride; /* block j of `count` elements comes from rank j (all_to_all, gather) */
    bool max;
} source_t;

static double value_of(size_t i, const void *ctx)
{
    const source_t *s = ctx;
    if (s->stride > 0)
        return input((int)(i / s->stride), s->first + i % s->stride);
    if (s->rank >= 0)
        return input(s->rank, s->first + i);
    double v = input(0, s->first + i);
    for (int r = 1; r < world; r++)
        v = s->max ? fmax(v, input(r, s->first + i)) : v + input(r, s->first + i);
    return v;
}

/* reduce, reduce_scatter, all_to_all, gather, scatter and send/recv on device buffers,
 * exact on the small integers of input() in every dtype. */
static void mode_more(void)
{
    static const ddp_dtype_t types[] = {DDP_FLOAT32, DDP_INT64, DDP_BFLOAT16, DDP_FLOAT16};
    static const size_t sizes[] = {1, 7, 1000};
    for (size_t ti = 0; ti < 4; ti++) {
        for (size_t si = 0; si < 3; si++) {
            ddp_dtype_t t = types[ti];
            size_t n = sizes[si], all = n * (size_t)world;
            for (int root = 0; root < world; root++) {
                void *buf = device_inputs(rank, 0, n, t);
                CALL("reduce", ddp_reduce(ddp, buf, n, t, DDP_SUM, root));
                source_t sum = {.rank = -1}, mine = {.rank = rank};
                expect("reduce", buf, n, t, value_of, rank == root ? &sum : &mine);
                cudaFree(buf);
            }
            void *send = device_inputs(rank, 0, all, t), *recv;
            CUDA(cudaMalloc(&recv, all * element_size(t) + 8));
            CALL("reduce_scatter", ddp_reduce_scatter(ddp, send, recv, n, t, DDP_MAX));
            source_t block = {.rank = -1, .first = (size_t)rank * n, .max = true};
            expect("reduce_scatter", recv, n, t, value_of, &block);
            CALL("all_to_all", ddp_all_to_all(ddp, send, recv, n, t));
            source_t transposed = {.first = (size_t)rank * n, .stride = n};
            expect("all_to_all", recv, all, t, value_of, &transposed);
            for (int root = 0; root < world; root++) {
                CALL("gather", ddp_gather(ddp, send, rank == root ? recv : NULL, n, t, root));
                source_t gathered = {.stride = n};
                if (rank == root)
                    expect("gather", recv, all, t, value_of, &gathered);
                CALL("scatter", ddp_scatter(ddp, rank == root ? send : NULL, recv, n, t, root));
                source_t part = {.rank = root, .first = (size_t)rank * n};
                expect("scatter", recv, n, t, value_of, &part);
            }
            /* Around the ring: even ranks send first, odd ones receive first. */
            int next = (rank + 1) % world, prev = (rank - 1 + world) % world;
            for (int k = 0; k < 2 && world > 1; k++) {
                if ((rank % 2 == 0) == (k == 0))
                    CALL("send", ddp_send(ddp, send, n, t, next));
                else
                    CALL("recv", ddp_recv(ddp, recv, n, t, prev));
            }
            source_t from_prev = {.rank = prev};
            if (world > 1)
                expect("recv", recv, n, t, value_of, &from_prev);
            cudaFree(send);
            cudaFree(recv);
        }
    }
    printf("more ok, world %d\n", world);
}

static void mode_auto(void)
{
    /* Host memory: the CPU ring. */
    int64_t host[3] = {rank, 1, -rank}, want = (int64_t)world * (world - 1) / 2;
    CALL("host all_reduce", ddp_all_reduce(ddp, host, 3, DDP_INT64, DDP_SUM));
    if (host[0] != want || host[1] != world || host[2] != -want) {
        fprintf(stderr, "rank %d: host all_reduce gave %lld %lld %lld\n", rank, (long long)host[0],
                (long long)host[1], (long long)host[2]);
        exit(1);
    }
    /* Device memory: NCCL, its communicator made now. */
    float values[2] = {(float)rank, 2.0f}, *dev;
    CUDA(cudaMalloc((void **)&dev, sizeof values));
    CUDA(cudaMemcpy(dev, values, sizeof values, cudaMemcpyHostToDevice));
    CALL("device all_reduce", ddp_all_reduce(ddp, dev, 2, DDP_FLOAT32, DDP_AVG));
    CUDA(cudaMemcpy(values, dev, sizeof values, cudaMemcpyDeviceToHost));
    if (values[0] != (float)(world - 1) / 2 || values[1] != 2.0f) {
        fprintf(stderr, "rank %d: device all_reduce gave %g %g\n", rank, values[0], values[1]);
        exit(1);
    }
    /* f16 on the host: the CPU ring, in f32. 1.5 from every rank sums exactly. */
    uint16_t half[2] = {0x3e00, 0x3e00}; /* 1.5 */
    CALL("f16 on the host", ddp_all_reduce(ddp, half, 2, DDP_FLOAT16, DDP_SUM));
    if (element_from_half(half[0]) != 1.5f * (float)world) {
        fprintf(stderr, "rank %d: f16 on the host summed to %g\n", rank,
                element_from_half(half[0]));
        exit(1);
    }
    /* Refused before any communication: the context stays usable. */
    int64_t *gathered;
    CUDA(cudaMalloc((void **)&gathered, (size_t)world * 8));
    refused("all_gather from host to device", ddp_all_gather(ddp, host, gathered, 1, DDP_INT64),
            "one buffer is host memory and the other device memory");
    /* A reducer of device gradients (NCCL), then one that mixes memories. */
    ddp_reducer_t *reducer;
    float g[8], *grads;
    for (int i = 0; i < 8; i++)
        g[i] = (float)(rank + i);
    CUDA(cudaMalloc((void **)&grads, sizeof g));
    CUDA(cudaMemcpy(grads, g, sizeof g, cudaMemcpyHostToDevice));
    CALL("reducer_new", ddp_reducer_new(ddp, NULL, &reducer));
    if (ddp_reducer_add(reducer, grads, 5, DDP_FLOAT32) < 0 ||
        ddp_reducer_add(reducer, grads + 5, 3, DDP_FLOAT32) < 0)
        CALL("reducer_add", -1);
    CALL("reducer_ready", ddp_reducer_ready(reducer, 1));
    CALL("reducer_ready", ddp_reducer_ready(reducer, 0));
    CALL("reducer_wait", ddp_reducer_wait(reducer));
    CUDA(cudaMemcpy(g, grads, sizeof g, cudaMemcpyDeviceToHost));
    for (int i = 0; i < 8; i++) {
        if (g[i] != (float)(world - 1) / 2 + (float)i) {
            fprintf(stderr, "rank %d: reducer gave [%d] = %g\n", rank, i, g[i]);
            exit(1);
        }
    }
    ddp_reducer_free(reducer);
    float on_host[4];
    CALL("reducer_new", ddp_reducer_new(ddp, NULL, &reducer));
    if (ddp_reducer_add(reducer, grads, 8, DDP_FLOAT32) < 0 ||
        ddp_reducer_add(reducer, on_host, 4, DDP_FLOAT32) < 0)
        CALL("reducer_add", -1);
    refused("a reducer of host and device gradients", ddp_reducer_ready(reducer, 0),
            "not both host or both device memory");
    ddp_reducer_free(reducer);
    CALL("barrier", ddp_barrier(ddp));
    cudaFree(gathered);
    cudaFree(grads);
    cudaFree(dev);
    printf("auto ok, world %d\n", world);
}

static void mode_die(int victim)
{
    size_t n = 16u << 20;
    float *dev;
    CUDA(cudaMalloc((void **)&dev, n * sizeof *dev));
    CUDA(cudaMemset(dev, 0, n * sizeof *dev));
    signal(SIGTERM, SIG_IGN);
    CALL("barrier", ddp_barrier(ddp));
    for (int i = 0; i < 100000; i++) {
        if (rank == victim && i == 5) {
            fprintf(stderr, "rank %d: dying now\n", rank);
            raise(SIGKILL);
        }
        CALL("all_reduce", ddp_all_reduce(ddp, dev, n, DDP_FLOAT32, DDP_SUM));
    }
    printf("die: rank %d was never stopped\n", rank);
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "collectives";
    if (strcmp(mode, "count") == 0) {
        int count = 0;
        if (cudaGetDeviceCount(&count) != cudaSuccess)
            count = 0;
        printf("gpus %d\n", count);
        return 0;
    }
    bool automatic = strcmp(mode, "auto") == 0;
    ddp_options_t options = {.backend = automatic ? DDP_BACKEND_AUTO : DDP_BACKEND_NCCL};
    int err = ddp_init_with(&ddp, &options);
    if (err != 0) {
        fprintf(stderr, "ddp_init: %s\n", ddp_strerror(err));
        return 3;
    }
    rank = ddp_rank(ddp);
    world = ddp_world_size(ddp);
    const char *backend = automatic ? "cpu+nccl" : "nccl";
    if (strcmp(ddp_backend_name(ddp), backend) != 0) {
        fprintf(stderr, "rank %d: backend %s, not %s\n", rank, ddp_backend_name(ddp), backend);
        return 1;
    }
    if (automatic)
        mode_auto();
    else if (strcmp(mode, "collectives") == 0)
        mode_collectives();
    else if (strcmp(mode, "more") == 0)
        mode_more();
    else if (strcmp(mode, "die") == 0)
        mode_die(argc > 2 ? atoi(argv[2]) : 1);
    else
        return 2;
    ddp_finalize(ddp);
    return 0;
}
