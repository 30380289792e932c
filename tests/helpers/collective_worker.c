/* ddp-test-collectives: a libddp worker that checks the collectives, run under ddp-launch
 * by the tests.
 *
 *   check [MAX_ELEMENTS]   all_reduce of every dtype and op, sizes 0 .. MAX_ELEMENTS,
 *                          against a serial reference of every rank's input (each rank
 *                          computes all inputs), and bitwise equal across ranks
 *   collectives            broadcast from every root, all_gather, barrier
 *   more [MAX_ELEMENTS]    reduce to every root and reduce_scatter (every dtype and op),
 *                          all_to_all, gather and scatter from every root, send and recv
 *                          between every pair, against serial references, for counts
 *                          0, 1, world-1, world+1, 7, 1000, 65537 (up to MAX_ELEMENTS);
 *                          the ranks' buffers that must not change do not
 *   p2p-mismatch           rank 0 sends 10 int32, rank 1 receives 11 float32; then a
 *                          barrier and a send that match
 *   misuse CASE            one misuse a program can make (see mode_misuse)
 *   nccl-id                two ddp_nccl_unique_id calls: every rank must hold rank 0's
 *                          128 bytes (gathered and compared), not zero, and the two ids
 *                          differ; prints "nccl-id <hex of the first id>". Built without
 *                          NCCL, checks the call fails with DDP_ENOCUDA instead.
 *   reducer [LAYOUT]       five gradients (f32 and f64) in a reducer with 2 MiB buckets:
 *                          three iterations of a simulated backward pass (50 ms of
 *                          "compute" before each ready, last registered first); each
 *                          gradient must hold the average over the ranks; a gradient
 *                          left unmarked is an error naming it. Prints the bucket count
 *                          and "overlap yes" when the first bucket's all-reduce began
 *                          before the last gradient was ready.
 *   reducer-modes          the reducer's no_sync (three accumulating iterations without
 *                          communication, then one that averages the sums) and its bf16
 *                          and f16 compression (rounded once, exactly; f64 left alone)
 *   sampler                every rank's indices gathered: each sample exactly once per
 *                          epoch (save PyTorch's padding), for several sizes, with and
 *                          without drop_last; epochs differ
 *   checkpoint DIR         save and load round trips in DIR (rank 0's data reaches all),
 *                          no checkpoint yet, corrupt / truncated / foreign files, a file
 *                          only rank 0 sees
 *   resume DIR STEPS       a training loop that saves a checkpoint each step; attempt 0's
 *                          rank 1 fails after step 3; a restarted attempt resumes from it
 *   memory                 in-memory checkpoints in DDP_CHECKPOINT_DIR: none yet; round
 *                          trips of each rank's own buffers; the newest step every rank
 *                          has (rank 0 alone saved a newer one, which the load retires);
 *                          DDP_CHECKPOINT_STEP; buffers of another name or size; a slot
 *                          of another world size; without DDP_CHECKPOINT_DIR nothing
 *   memresume STEPS        resume with in-memory checkpoints: attempt 0's rank 1 SIGKILLs
 *                          itself after step 3's save; attempt 1 loads step 3
 *   memcommon S            2 ranks, the launcher's DDP_CHECKPOINT_STEP: each attempt prints
 *                          "memcommon RANK ATTEMPT loaded STEP (DDP_CHECKPOINT_STEP=V) pid
 *                          PID dir DIR" (-1: none loaded). Attempt 0: steps 1 .. S-1 saved,
 *                          rank 0 saves S, rank 1 is SIGKILLed (a thread of its own) while
 *                          its save of S is being written. Attempt 1: steps S and S+1
 *                          saved, "memcommon RANK paused", and a wait (the test corrupts a
 *                          slot and SIGKILLs rank 1). Attempt 2: the load only
 *   memnodes S             the step agreed across nodes: each attempt prints "memnodes RANK
 *                          ATTEMPT loaded STEP (DDP_CHECKPOINT_STEP=V)" (-1: none loaded).
 *                          Attempt 0: steps 1 .. S-1 saved, S too by the first half of the
 *                          ranks, then the last rank SIGKILLed. Later attempts: the load only
 *   memhold S              steps 1 .. S saved, "memhold RANK saved S dir DIR", and a wait
 *                          (the launcher's stop ends it)
 *   memspare S             a lost node's ranks resumed from their replicas: where a load
 *                          finds a checkpoint, "memspare RANK loaded STEP
 *                          (DDP_CHECKPOINT_STEP=V)" and the end; else steps 1 .. S saved,
 *                          "memspare RANK saved S dir DIR", and a wait
 *   groups                 a second context (group "second") beside the first: their
 *                          all_reduces interleave and each gets its own answer
 *   skip VICTIM SEQ [S]    20 all_reduces of 1000 float32, each printed when done; rank
 *                          VICTIM skips the SEQ-th (counting from 1) and sleeps S
 *                          seconds (default 600) instead: the others wait in it;
 *                          DDP_TEST_PAUSE_MS=N: rank 0 pauses N ms before each
 *   die VICTIM             all_reduce in a loop; rank VICTIM SIGKILLs itself in the
 *                          middle; the others must fail with an error, not hang. They
 *                          ignore SIGTERM, so what ends them is libddp's own detection.
 * Prints "<mode> ok" and exits 0 on success; exits 1 on a wrong result, 3 when a
 * collective fails. After init each rank prints "rank R transport shm" or "... tcp":
 * whether it has a libddp segment of /dev/shm mapped. DDP_TEST_NO_SHM_RANK=R sets
 * DDP_SHM=0 for rank R alone. */
#include <ddp.h>

#include "elements.h"
#include "hash.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static ddp_t *ddp;
static int rank, world;

static void fail_collective(const char *what, int err)
{
    fprintf(stderr, "rank %d: %s failed: %s: %s\n", rank, what, ddp_strerror(err),
            ddp_last_error(ddp));
    exit(3);
}

#define CALL(what, expr)                 \
    do {                                 \
        int err_ = (expr);               \
        if (err_ != 0)                   \
            fail_collective(what, err_); \
    } while (0)

/* The input of `r` at index `i`: any rank can compute any rank's. */
static double input(int r, size_t i, int dtype)
{
    uint64_t h =
        (uint64_t)i * 0x9E3779B97F4A7C15ull + (uint64_t)r * 0xBF58476D1CE4E5B9ull + (uint64_t)dtype;
    h ^= h >> 31;
    return (double)(int)(h % 2001) - 1000.0; /* integers in [-1000, 1000] */
}

static void store_value(void *buf, size_t i, ddp_dtype_t t, double v)
{
    switch (t) {
    case DDP_FLOAT32:
        ((float *)buf)[i] = (float)(v / 8.0); /* fractions, exactly representable */
        break;
    case DDP_FLOAT64:
        ((double *)buf)[i] = v / 8.0;
        break;
    case DDP_INT32:
        ((int32_t *)buf)[i] = (int32_t)v;
        break;
    case DDP_INT64:
        ((int64_t *)buf)[i] = (int64_t)v * 1000003;
        break;
    case DDP_FLOAT16:
    case DDP_BFLOAT16:
        /* Eighths up to 125: exact in f16; bf16 keeps 8 bits of them. */
        element_store_half(buf, i, t, element_round_half(v / 8.0, t == DDP_BFLOAT16));
        break;
    }
}

static bool half_type(ddp_dtype_t t)
{
    return t == DDP_FLOAT16 || t == DDP_BFLOAT16;
}

/* Every rank holds the same bits: their hashes, gathered, are all equal. */
static void same_everywhere(const void *buf, size_t len, const char *what)
{
    int64_t mine = (int64_t)ddp_fnv1a64(buf, len);
    int64_t *all = malloc((size_t)world * sizeof *all);
    CALL("all_gather", ddp_all_gather(ddp, &mine, all, 1, DDP_INT64));
    for (int r = 0; r < world; r++) {
        if (all[r] != mine) {
            fprintf(stderr, "rank %d: %s differs from rank %d's bits\n", rank, what, r);
            exit(1);
        }
    }
    free(all);
}

/* The serial reference of element `i` of every rank's input, in the element type, over
 * ranks 0..n-1; *mag: the sum of the magnitudes (the float tolerance's scale). */
static double reference(ddp_dtype_t t, ddp_reduce_op_t op, size_t i, double *mag)
{
    double ref = 0, one_value[1];
    void *one = one_value;
    *mag = 0;
    for (int r = 0; r < world; r++) {
        store_value(one, 0, t, input(r, i, (int)t));
        double v = element_load(one, 0, t);
        *mag += fabs(v);
        if (r == 0)
            ref = v;
        else if (op == DDP_SUM || op == DDP_AVG)
            ref += v;
        else if (op == DDP_MIN)
            ref = v < ref ? v : ref;
        else
            ref = v > ref ? v : ref;
    }
    if (op == DDP_AVG)
        ref = (t == DDP_INT32 || t == DDP_INT64) ? trunc(ref / world) : ref / world;
    return ref;
}

/* `got` at [at] must be the reduction of every rank's input element `i`. */
static void expect_reduced(const char *what, ddp_dtype_t t, ddp_reduce_op_t op, size_t count,
                           size_t at, size_t i, double got)
{
    double mag, ref = reference(t, op, i, &mag);
    double eps = t == DDP_FLOAT32 ? FLT_EPSILON : t == DDP_FLOAT64 ? DBL_EPSILON : 0;
    if (half_type(t)) {
        /* Reduced in f32 (these sums are exact there; an average divided there), then
         * rounded once: exactly this. */
        double sum = op == DDP_AVG ? reference(t, DDP_SUM, i, &mag) : ref;
        float in_f32 = op == DDP_AVG ? (float)sum / (float)world : (float)sum;
        ref = element_round_half(in_f32, t == DDP_BFLOAT16);
    }
    if (fabs(got - ref) > 4 * world * eps * mag) {
        fprintf(stderr, "rank %d: %s dtype %d op %d count %zu: [%zu] = %.17g, expected %.17g\n",
                rank, what, (int)t, (int)op, count, at, got, ref);
        exit(1);
    }
}

static int check_one(ddp_dtype_t t, ddp_reduce_op_t op, size_t count)
{
    size_t es = element_size(t);
    void *buf = malloc(count * es + 1), *one = malloc(es);
    for (size_t i = 0; i < count; i++)
        store_value(buf, i, t, input(rank, i, (int)t));
    CALL("all_reduce", ddp_all_reduce(ddp, buf, count, t, op));
    for (size_t i = 0; i < count; i++)
        expect_reduced("all_reduce", t, op, count, i, i, element_load(buf, i, t));
    same_everywhere(buf, count * es, "all_reduce");
    free(buf);
    free(one);
    return 1;
}

static void mode_check(size_t max_elements)
{
    static const size_t sizes[] = {0, 1, 2, 3, 5, 7, 8, 13, 64, 100, 1000, 4097, 65537, 1000003};
    static const ddp_dtype_t types[] = {DDP_FLOAT32, DDP_FLOAT64, DDP_INT32,
                                        DDP_INT64,   DDP_FLOAT16, DDP_BFLOAT16};
    int cases = 0;
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        if (sizes[s] > max_elements)
            continue;
        for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
            for (int op = DDP_SUM; op <= DDP_MAX; op++)
                cases += check_one(types[t], (ddp_reduce_op_t)op, sizes[s]);
        }
    }
    /* The largest sizes for one op of each kind. */
    if (max_elements >= (16u << 20)) {
        cases += check_one(DDP_FLOAT32, DDP_SUM, 16u << 20);
        cases += check_one(DDP_INT64, DDP_MAX, (16u << 20) + 1);
        cases += check_one(DDP_FLOAT64, DDP_AVG, (16u << 20) - 1);
    }
    printf("check ok: %d cases, world %d\n", cases, world);
}

static void mode_collectives(void)
{
    static const size_t sizes[] = {0, 1, 7, 1000, (1u << 20) + 1};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        size_t n = sizes[s];
        int64_t *buf = malloc((n + 1) * sizeof *buf), *all = malloc((n * world + 1) * 8);
        for (int root = 0; root < world; root++) {
            for (size_t i = 0; i < n; i++)
                buf[i] = rank == root ? (int64_t)(i * 3 + (size_t)root) : -1;
            CALL("broadcast", ddp_broadcast(ddp, buf, n, DDP_INT64, root));
            for (size_t i = 0; i < n; i++) {
                if (buf[i] != (int64_t)(i * 3 + (size_t)root)) {
                    fprintf(stderr, "rank %d: broadcast from %d: [%zu] = %" PRId64 "\n", rank, root,
                            i, buf[i]);
                    exit(1);
                }
            }
        }
        for (size_t i = 0; i < n; i++)
            buf[i] = (int64_t)(rank * 1000000 + (int)i);
        CALL("all_gather", ddp_all_gather(ddp, buf, all, n, DDP_INT64));
        for (int r = 0; r < world; r++) {
            for (size_t i = 0; i < n; i++) {
                if (all[(size_t)r * n + i] != (int64_t)(r * 1000000 + (int)i)) {
                    fprintf(stderr, "rank %d: all_gather: block %d [%zu] wrong\n", rank, r, i);
                    exit(1);
                }
            }
        }
        free(buf);
        free(all);
    }
    for (int i = 0; i < 50; i++)
        CALL("barrier", ddp_barrier(ddp));
    printf("collectives ok, world %d\n", world);
}

static void mode_nccl_id(void)
{
    unsigned char id[2][DDP_NCCL_UNIQUE_ID_BYTES];
    int err = ddp_nccl_unique_id(ddp, id[0], sizeof id[0]);
    if (err == DDP_ENOCUDA) {
        printf("nccl-id unavailable: %s\n", ddp_last_error(ddp));
        return;
    }
    CALL("nccl_unique_id", err);
    CALL("nccl_unique_id", ddp_nccl_unique_id(ddp, id[1], sizeof id[1]));
    unsigned char zero[DDP_NCCL_UNIQUE_ID_BYTES] = {0};
    if (memcmp(id[0], zero, sizeof zero) == 0 || memcmp(id[0], id[1], sizeof zero) == 0) {
        fprintf(stderr, "rank %d: the ids are zero or equal\n", rank);
        exit(1);
    }
    for (int k = 0; k < 2; k++) {
        unsigned char *all = malloc((size_t)world * sizeof id[k]);
        CALL("all_gather", ddp_all_gather(ddp, id[k], all, sizeof id[k] / 8, DDP_INT64));
        for (int r = 0; r < world; r++) {
            if (memcmp(all + (size_t)r * sizeof id[k], id[k], sizeof id[k]) != 0) {
                fprintf(stderr, "rank %d: id %d differs from rank %d's\n", rank, k, r);
                exit(1);
            }
        }
        free(all);
    }
    char hex[2 * DDP_NCCL_UNIQUE_ID_BYTES + 1];
    for (size_t i = 0; i < sizeof id[0]; i++)
        snprintf(hex + 2 * i, 3, "%02x", id[0][i]);
    printf("nccl-id %s\n", hex);
    printf("nccl-id ok, world %d\n", world);
}

static float grad_value(int r, int g, size_t i, int iter)
{
    return (float)((int)((i * 7 + (size_t)g * 13 + (size_t)iter * 5) % 97) - 48 + r * 3);
}

static void compute_for(double seconds)
{
    struct timespec ts = {0, (long)(seconds * 1e9)};
    nanosleep(&ts, NULL);
}

/* `layout`: "separate" buffers, one "block" in registration order (each bucket is then
 * averaged in place), or "mixed" (rank 0 a block, the others separate). */
/* Whether a thread of this process has `name` (/proc/self/task/TID/comm). */
static bool has_thread_named(const char *name)
{
    DIR *dir = opendir("/proc/self/task");
    bool found = false;
    for (struct dirent *e; dir != NULL && !found && (e = readdir(dir)) != NULL;) {
        char path[300], comm[32] = "";
        snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
        FILE *f = fopen(path, "r");
        if (f == NULL)
            continue;
        if (fgets(comm, sizeof comm, f) != NULL) {
            comm[strcspn(comm, "\n")] = '\0';
            found = strcmp(comm, name) == 0;
        }
        fclose(f);
    }
    if (dir != NULL)
        closedir(dir);
    return found;
}

/* Gradient g of iteration `iter` after the reducer: every rank's grad_value averaged
 * (in its own type), or the rank exits 1 saying where it differs. */
static void check_averaged(const void *grad, size_t count, ddp_dtype_t type, int g, int iter)
{
    for (size_t i = 0; i < count; i++) {
        double sum = 0;
        for (int r = 0; r < world; r++)
            sum += grad_value(r, g, i, iter);
        double want = type == DDP_FLOAT32 ? (double)((float)sum / (float)world) : sum / world;
        double got = type == DDP_FLOAT32 ? ((const float *)grad)[i] : ((const double *)grad)[i];
        if (got != want) {
            fprintf(stderr, "rank %d: iteration %d gradient %d [%zu] = %g, want %g\n", rank, iter,
                    g, i, got, want);
            exit(1);
        }
    }
}

static void mode_reducer(const char *layout)
{
    static const size_t counts[] = {1000000, 100000, 10000, 300000, 200000};
    static const ddp_dtype_t types[] = {DDP_FLOAT32, DDP_FLOAT32, DDP_FLOAT64, DDP_FLOAT32,
                                        DDP_FLOAT32};
    enum { G = 5 };
    void *grads[G];
    ddp_reducer_t *reducer;
    ddp_reducer_options_t options = {.bucket_bytes = 2u << 20};
    CALL("reducer_new", ddp_reducer_new(ddp, &options, &reducer));
    bool block = strcmp(layout, "block") == 0 || (strcmp(layout, "mixed") == 0 && rank == 0);
    size_t total = 0;
    for (int g = 0; g < G; g++)
        total += counts[g] * element_size(types[g]);
    char *all = block ? malloc(total) : NULL;
    for (int g = 0, offset = 0; g < G; g++) {
        grads[g] = block ? all + offset : malloc(counts[g] * 8);
        offset += (int)(counts[g] * element_size(types[g]));
        int index = ddp_reducer_add(reducer, grads[g], counts[g], types[g]);
        if (index != g)
            fail_collective("reducer_add", index < 0 ? index : -1);
    }
    bool overlapped = true;
    for (int iter = 0; iter < 3; iter++) {
        for (int g = G - 1; g >= 0; g--) {
            compute_for(0.05);
            for (size_t i = 0; i < counts[g]; i++) {
                float v = grad_value(rank, g, i, iter);
                if (types[g] == DDP_FLOAT32)
                    ((float *)grads[g])[i] = v;
                else
                    ((double *)grads[g])[i] = v;
            }
            if (iter == 2 && g == 1)
                continue; /* forgotten: wait() must say so */
            CALL("reducer_ready", ddp_reducer_ready(reducer, g));
        }
        int err = ddp_reducer_wait(reducer);
        if (iter == 2) {
            if (err != DDP_EUSAGE || strstr(ddp_last_error(ddp), "not marked ready") == NULL ||
                strstr(ddp_last_error(ddp), "(1)") == NULL) {
                fprintf(stderr, "rank %d: a forgotten gradient gave %d: %s\n", rank, err,
                        ddp_last_error(ddp));
                exit(1);
            }
            CALL("reducer_ready", ddp_reducer_ready(reducer, 1));
            err = ddp_reducer_wait(reducer);
        }
        CALL("reducer_wait", err);
        for (int g = 0; g < G; g++)
            check_averaged(grads[g], counts[g], types[g], g, iter);
        ddp_reducer_timing_t t;
        ddp_reducer_timing(reducer, &t);
        if (world == 1)
            overlapped = overlapped && t.first_comm_start == 0 && t.comm_end == 0;
        else if (!(t.first_ready <= t.first_comm_start && t.first_comm_start < t.last_ready &&
                   t.last_ready <= t.comm_end))
            overlapped = false;
        printf("rank %d iteration %d: first bucket began %.1f ms before the last gradient was "
               "ready\n",
               rank, iter, (t.last_ready - t.first_comm_start) * 1e3);
    }
    printf("buckets %d\n", ddp_reducer_buckets(reducer));
    /* Alone: nothing communicated, no thread (the average of one is the gradient). */
    printf("%s %s\n", world == 1 ? "communication none" : "overlap", overlapped ? "yes" : "no");
    printf("thread named %s\n", has_thread_named("ddp-reducer") ? "yes" : "no");
    ddp_reducer_free(reducer);
    for (int g = 0; g < G && !block; g++)
        free(grads[g]);
    free(all);
    printf("reducer ok, world %d\n", world);
}

static void mode_sampler(void)
{
    static const size_t sizes[] = {1000, 1001, 3, 0};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        for (int drop = 0; drop <= 1; drop++) {
            size_t size = sizes[s], *first = NULL;
            ddp_sampler_options_t o = {true, drop != 0, 7};
            size_t per = ddp_sampler_count(ddp, size, &o), total = per * (size_t)world;
            for (uint64_t epoch = 0; epoch < 3; epoch++) {
                int64_t *mine = malloc((per + 1) * 8), *all = malloc((total + 1) * 8);
                size_t *idx = malloc((per + 1) * sizeof *idx);
                CALL("sampler", ddp_sampler_indices(ddp, size, &o, epoch, idx, per));
                for (size_t i = 0; i < per; i++)
                    mine[i] = (int64_t)idx[i];
                CALL("all_gather", ddp_all_gather(ddp, mine, all, per, DDP_INT64));
                unsigned *seen = calloc(size + 1, sizeof *seen);
                size_t distinct = 0;
                for (size_t i = 0; i < total; i++) {
                    if (all[i] < 0 || (size_t)all[i] >= size) {
                        fprintf(stderr, "rank %d: index %" PRId64 " of %zu\n", rank, all[i], size);
                        exit(1);
                    }
                    distinct += seen[all[i]]++ == 0;
                }
                /* Without drop_last all are seen; with it, `total` distinct ones. */
                if (distinct != (drop ? total : size)) {
                    fprintf(stderr, "rank %d: size %zu drop %d epoch %d: %zu distinct of %zu\n",
                            rank, size, drop, (int)epoch, distinct, total);
                    exit(1);
                }
                if (epoch == 0) {
                    first = idx;
                } else {
                    if (size >= 1000 && memcmp(first, idx, per * sizeof *idx) == 0) {
                        fprintf(stderr, "rank %d: epoch %d repeats epoch 0\n", rank, (int)epoch);
                        exit(1);
                    }
                    free(idx);
                }
                free(seen);
                free(mine);
                free(all);
            }
            free(first);
        }
    }
    printf("sampler ok, world %d\n", world);
}

static unsigned char payload_byte(size_t i, int version)
{
    return (unsigned char)(i * 31 + (size_t)version * 7 + 1);
}

/* Loads `path`; exits unless the result is `want` (0: and the payload is version's). */
static void expect_load(const char *path, int want, int version, const char *words)
{
    void *data = NULL;
    size_t len = 0;
    int err = ddp_checkpoint_load_file(ddp, path, &data, &len);
    if (err != want || (words != NULL && strstr(ddp_last_error(ddp), words) == NULL)) {
        fprintf(stderr, "rank %d: load %s gave %d (%s), wanted %d and '%s'\n", rank, path, err,
                ddp_last_error(ddp), want, words ? words : "");
        exit(1);
    }
    if (want == 0) {
        for (size_t i = 0; i < len; i++) {
            if (len != (1u << 20) + 3 || ((unsigned char *)data)[i] != payload_byte(i, version)) {
                fprintf(stderr, "rank %d: the loaded checkpoint is not version %d\n", rank,
                        version);
                exit(1);
            }
        }
        free(data);
    }
}

/* Rank 0 alone rewrites the file, between barriers. */
static void tamper(const char *path, const char *how)
{
    CALL("barrier", ddp_barrier(ddp));
    if (rank == 0) {
        FILE *f = fopen(path, strcmp(how, "foreign") == 0 ? "w" : "r+");
        if (strcmp(how, "flip") == 0) {
            fseek(f, 32 + 1000, SEEK_SET);
            fputc(0x5a, f);
        } else if (strcmp(how, "foreign") == 0) {
            fputs("not a checkpoint at all, but longer than a header is\n", f);
        }
        fclose(f);
        if (strcmp(how, "truncate") == 0 && truncate(path, 32 + 100) != 0)
            exit(3);
    }
    CALL("barrier", ddp_barrier(ddp));
}

static void mode_checkpoint(const char *dir)
{
    char path[4096];
    size_t len = (1u << 20) + 3;
    unsigned char *data = malloc(len);
    snprintf(path, sizeof path, "%s/ckpt.bin", dir);
    expect_load(path, -ENOENT, 0, "no checkpoint at");
    for (int version = 1; version <= 2; version++) {
        /* Every rank passes its own bytes; rank 0's are the ones written. */
        for (size_t i = 0; i < len; i++)
            data[i] = rank == 0 ? payload_byte(i, version) : 0xee;
        CALL("checkpoint_save_file", ddp_checkpoint_save_file(ddp, path, data, len));
        expect_load(path, 0, version, NULL);
    }
    tamper(path, "flip");
    expect_load(path, DDP_EPARSE, 0, "checksum");
    tamper(path, "truncate");
    expect_load(path, DDP_EPARSE, 0, "truncated");
    tamper(path, "foreign");
    expect_load(path, DDP_EPARSE, 0, "not a libddp checkpoint");
    /* A save into a directory that does not exist fails on every rank alike. */
    char bad[4200];
    snprintf(bad, sizeof bad, "%s/no/such/dir/ckpt.bin", dir);
    int err = ddp_checkpoint_save_file(ddp, bad, data, len);
    if (err != -ENOENT || strstr(ddp_last_error(ddp), "no/such/dir") == NULL) {
        fprintf(stderr, "rank %d: a save into a missing directory gave %d: %s\n", rank, err,
                ddp_last_error(ddp));
        exit(1);
    }
    /* The same relative path is a file for rank 0 and nothing for the others, as on
     * node-local disks. */
    if (world > 1) {
        char own[4200];
        snprintf(own, sizeof own, "%s/rank%d", dir, rank);
        if (mkdir(own, 0755) != 0 || chdir(own) != 0)
            exit(3);
        for (size_t i = 0; i < len; i++)
            data[i] = payload_byte(i, 1);
        /* A valid file at rank 0's ./local.bin, saved through its absolute path. */
        char local0[4300];
        snprintf(local0, sizeof local0, "%s/rank0/local.bin", dir);
        CALL("checkpoint_save_file", ddp_checkpoint_save_file(ddp, local0, data, len));
        expect_load("local.bin", DDP_EUSAGE, 0, "exists for 1 of the");
    }
    free(data);
    printf("checkpoint ok, world %d\n", world);
}

static void mode_resume(const char *dir, int steps)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/resume.bin", dir);
    int64_t step = 0;
    void *data;
    size_t len;
    int err = ddp_checkpoint_load_file(ddp, path, &data, &len);
    if (err == 0 && len == sizeof step) {
        memcpy(&step, data, sizeof step);
        free(data);
        printf("rank %d attempt %d resumed at step %d\n", rank, ddp_restart_count(ddp), (int)step);
    } else if (err != -ENOENT) {
        fail_collective("checkpoint_load", err);
    }
    for (; step < steps; step++) {
        int64_t x = step;
        CALL("all_reduce", ddp_all_reduce(ddp, &x, 1, DDP_INT64, DDP_SUM));
        int64_t next = step + 1;
        CALL("checkpoint_save_file", ddp_checkpoint_save_file(ddp, path, &next, sizeof next));
        if (ddp_restart_count(ddp) == 0 && rank == 1 && next == 3) {
            fprintf(stderr, "rank 1: failing after step 3\n");
            exit(5);
        }
    }
    printf("rank %d finished %d steps on attempt %d\n", rank, steps, ddp_restart_count(ddp));
}

/* A rank's buffers of step `step`: 1000 floats and a counter, its own values. */
typedef struct {
    float values[1000];
    int64_t counter;
} mem_state_t;

static void mem_fill(mem_state_t *m, int64_t step)
{
    for (int i = 0; i < 1000; i++)
        m->values[i] = (float)(rank * 1000 + i) + 0.5f * (float)step;
    m->counter = step * 10 + rank;
}

static size_t mem_buffers(mem_state_t *m, ddp_checkpoint_buffer_t b[2])
{
    b[0] = (ddp_checkpoint_buffer_t){"model/values", m->values, sizeof m->values};
    b[1] = (ddp_checkpoint_buffer_t){"counter", &m->counter, sizeof m->counter};
    return 2;
}

/* A load that gives `want` (0: step `step` with its buffers), the error saying `words`. */
static void expect_mem_load(int want, int64_t step, const char *words)
{
    mem_state_t m, ref;
    ddp_checkpoint_buffer_t b[2];
    int64_t got = -1;
    memset(&m, 0, sizeof m);
    int err = ddp_checkpoint_load(ddp, &got, b, mem_buffers(&m, b));
    mem_fill(&ref, step);
    if (err != want || (words != NULL && strstr(ddp_last_error(ddp), words) == NULL) ||
        (want == 0 && (got != step || memcmp(&m, &ref, sizeof m) != 0))) {
        fprintf(stderr,
                "rank %d: load gave %d, step %" PRId64 " (%s); wanted %d, step %" PRId64
                " and '%s'\n",
                rank, err, got, ddp_last_error(ddp), want, step, words ? words : "");
        exit(1);
    }
}

static void mem_save(int64_t step)
{
    mem_state_t m;
    ddp_checkpoint_buffer_t b[2];
    mem_fill(&m, step);
    CALL("checkpoint_save", ddp_checkpoint_save(ddp, step, b, mem_buffers(&m, b)));
}

/* Where a slot's header says its world size: offsetof(ddp_ckpt_header_t, world_size) of
 * common/ckpt.h, which this helper, built against the installed libddp too, cannot include. */
#define SLOT_WORLD_SIZE_AT 32

/* The header field at `offset` of this rank's slot `slot` set to the 4 bytes of `value`. */
static void mem_forge(int slot, size_t offset, uint32_t value)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/rank%d.%d", getenv("DDP_CHECKPOINT_DIR"), rank, slot);
    int fd = open(path, O_WRONLY);
    if (fd < 0 || pwrite(fd, &value, 4, (off_t)offset) != 4)
        exit(3);
    close(fd);
}

static void mode_memory(void)
{
    expect_mem_load(-ENOENT, 0, "no checkpoint in");
    for (int64_t step = 1; step <= 3; step++) {
        mem_save(step);
        expect_mem_load(0, step, NULL);
    }
    /* Slots: 0 holds step 3, 1 step 2. Rank 0 alone saves step 4 (into slot 1): the newest
     * step every rank has is 3, and rank 0's step 4 is retired. */
    if (rank == 0)
        mem_save(4);
    expect_mem_load(0, world > 1 ? 3 : 4, NULL);
    setenv("DDP_CHECKPOINT_STEP", "3", 1);
    expect_mem_load(0, 3, NULL);
    setenv("DDP_CHECKPOINT_STEP", "7", 1);
    expect_mem_load(DDP_EPARSE, 7, "no checkpoint of step 7");
    unsetenv("DDP_CHECKPOINT_STEP");
    /* Buffers the checkpoint does not hold as they are. */
    float few[10];
    int64_t got;
    ddp_checkpoint_buffer_t other[] = {{"model/values", few, sizeof few}};
    ddp_checkpoint_buffer_t missing[] = {{"optimizer", few, sizeof few}};
    ddp_checkpoint_buffer_t twice[] = {{"a", few, 4}, {"a", few, 4}};
    ddp_checkpoint_buffer_t badname[] = {{"../x", few, 4}};
    if (ddp_checkpoint_load(ddp, &got, other, 1) != DDP_EUSAGE ||
        strstr(ddp_last_error(ddp), "holds 4000 bytes, the buffer 40") == NULL ||
        ddp_checkpoint_load(ddp, &got, missing, 1) != DDP_EUSAGE ||
        strstr(ddp_last_error(ddp), "has no 'optimizer'") == NULL ||
        ddp_checkpoint_save(ddp, 5, twice, 2) != DDP_EUSAGE ||
        ddp_checkpoint_save(ddp, 5, badname, 1) != DDP_EUSAGE ||
        ddp_checkpoint_save(ddp, -1, NULL, 0) != DDP_EUSAGE) {
        fprintf(stderr, "rank %d: a misuse was not refused: %s\n", rank, ddp_last_error(ddp));
        exit(1);
    }
    /* Every slot of this rank says a world size of 9. */
    mem_forge(0, SLOT_WORLD_SIZE_AT, 9);
    mem_forge(1, SLOT_WORLD_SIZE_AT, 9);
    expect_mem_load(DDP_EUSAGE, 0, "world size 9; this one has");
    /* Outside ddp-launch: a save does nothing, a load finds nothing. */
    char *dir = strdup(getenv("DDP_CHECKPOINT_DIR"));
    unsetenv("DDP_CHECKPOINT_DIR");
    mem_state_t m;
    ddp_checkpoint_buffer_t b[2];
    if (ddp_checkpoint_save(ddp, 9, b, mem_buffers(&m, b)) != 0)
        exit(1);
    expect_mem_load(-ENOENT, 0, "DDP_CHECKPOINT_DIR");
    setenv("DDP_CHECKPOINT_DIR", dir, 1);
    free(dir);
    CALL("barrier", ddp_barrier(ddp));
    printf("memory ok, world %d\n", world);
}

/* attempt 0: steps saved in memory each step, rank 1 SIGKILLs itself once every rank has
 * saved step 3; attempt 1 resumes from step 3 on every rank. */
static void mode_memresume(int steps)
{
    mem_state_t m;
    ddp_checkpoint_buffer_t b[2];
    int64_t step = 0;
    int err = ddp_checkpoint_load(ddp, &step, b, mem_buffers(&m, b));
    if (err == 0)
        printf("rank %d attempt %d resumed at step %d\n", rank, ddp_restart_count(ddp), (int)step);
    else if (err != -ENOENT)
        fail_collective("checkpoint_load", err);
    for (; step < steps; step++) {
        int64_t x = step;
        CALL("all_reduce", ddp_all_reduce(ddp, &x, 1, DDP_INT64, DDP_SUM));
        mem_save(step + 1);
        if (ddp_restart_count(ddp) == 0 && step + 1 == 3) {
            /* Every rank has saved step 3 before rank 1 dies (rank 0, stopped before its
             * save, would make step 2 the newest every rank holds). */
            CALL("barrier", ddp_barrier(ddp));
            if (rank == 1) {
                fprintf(stderr, "rank 1: killed after step 3\n");
                raise(SIGKILL);
            }
        }
    }
    printf("rank %d finished %d steps on attempt %d\n", rank, steps, ddp_restart_count(ddp));
}

/* Where a slot's header says its state, and the value of WRITING (common/ckpt.h). */
#define SLOT_STATE_AT 12
#define SLOT_WRITING  1

/* A thread of mode_memcommon's: SIGKILLs the process once the slot file at `arg` is being
 * written. */
static void *kill_when_writing(void *arg)
{
    const char *path = arg;
    for (;;) {
        uint32_t state = 0;
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd >= 0 && pread(fd, &state, 4, SLOT_STATE_AT) == 4 && state == SLOT_WRITING)
            raise(SIGKILL);
        if (fd >= 0)
            close(fd);
    }
    return NULL;
}

/* Rank 1's save of step `step` (64 MiB more than the others: it takes a while), SIGKILLed
 * by a thread once the slot it takes, the one of step - 2, is being written. */
static void save_killed(int64_t step)
{
    static char path[2][4200];
    mem_state_t m;
    ddp_checkpoint_buffer_t b[3];
    size_t n = mem_buffers(&m, b), ballast = 64u << 20;
    int target = -1;
    for (int slot = 0; slot < 2; slot++) {
        int64_t held = -1;
        snprintf(path[slot], sizeof path[slot], "%s/rank%d.%d", getenv("DDP_CHECKPOINT_DIR"), rank,
                 slot);
        int fd = open(path[slot], O_RDONLY | O_CLOEXEC);
        if (fd >= 0 && pread(fd, &held, 8, 24) == 8 && held == step - 2) /* its step */
            target = slot;
        if (fd >= 0)
            close(fd);
    }
    pthread_t thread;
    mem_fill(&m, step);
    b[n++] = (ddp_checkpoint_buffer_t){"ballast", calloc(ballast, 1), ballast};
    if (target < 0 || b[2].data == NULL ||
        pthread_create(&thread, NULL, kill_when_writing, path[target]) != 0) {
        fprintf(stderr, "rank %d: no slot of step %" PRId64 ", or no thread\n", rank, step - 2);
        exit(3);
    }
    CALL("checkpoint_save", ddp_checkpoint_save(ddp, step, b, n));
    fprintf(stderr, "rank %d: step %" PRId64 " was saved before the kill\n", rank, step);
    exit(3);
}

static void mode_memcommon(int s)
{
    mem_state_t m;
    ddp_checkpoint_buffer_t b[2];
    int64_t step = -1, x = 0;
    int attempt = ddp_restart_count(ddp);
    const char *asked = getenv("DDP_CHECKPOINT_STEP"), *dir = getenv("DDP_CHECKPOINT_DIR");
    int err = ddp_checkpoint_load(ddp, &step, b, mem_buffers(&m, b));
    if (err != 0 && err != -ENOENT)
        fail_collective("checkpoint_load", err);
    printf("memcommon %d %d loaded %" PRId64 " (DDP_CHECKPOINT_STEP=%s) pid %d dir %s\n", rank,
           attempt, err == 0 ? step : -1, asked ? asked : "-", (int)getpid(), dir ? dir : "-");
    fflush(stdout);
    if (attempt == 0) {
        for (int64_t i = 1; i < s; i++)
            mem_save(i);
        if (rank == 0)
            mem_save(s);
        CALL("all_reduce", ddp_all_reduce(ddp, &x, 1, DDP_INT64, DDP_SUM)); /* rank 0 saved */
        if (rank == 1)
            save_killed(s);
        pause(); /* the launcher's stop ends it */
    } else if (attempt == 1) {
        mem_save(s);
        mem_save(s + 1);
        CALL("all_reduce", ddp_all_reduce(ddp, &x, 1, DDP_INT64, DDP_SUM));
        printf("memcommon %d paused\n", rank);
        fflush(stdout);
        pause();
    }
}

static void mode_memnodes(int s)
{
    mem_state_t m;
    ddp_checkpoint_buffer_t b[2];
    int64_t step = -1, x = 0;
    int attempt = ddp_restart_count(ddp);
    const char *asked = getenv("DDP_CHECKPOINT_STEP");
    int err = ddp_checkpoint_load(ddp, &step, b, mem_buffers(&m, b));
    if (err != 0 && err != -ENOENT)
        fail_collective("checkpoint_load", err);
    printf("memnodes %d %d loaded %" PRId64 " (DDP_CHECKPOINT_STEP=%s)\n", rank, attempt,
           err == 0 ? step : -1, asked ? asked : "-");
    fflush(stdout);
    if (attempt > 0)
        return;
    for (int64_t i = 1; i < s; i++)
        mem_save(i);
    if (rank < world / 2)
        mem_save(s);
    CALL("all_reduce", ddp_all_reduce(ddp, &x, 1, DDP_INT64, DDP_SUM)); /* every save done */
    if (rank == world - 1) {
        fprintf(stderr, "rank %d: killed after step %d\n", rank, s);
        raise(SIGKILL);
    }
    pause(); /* the launcher's stop ends it */
}

static void mode_memhold(int s)
{
    for (int64_t i = 1; i <= s; i++)
        mem_save(i);
    printf("memhold %d saved %d dir %s\n", rank, s, getenv("DDP_CHECKPOINT_DIR"));
    fflush(stdout);
    pause(); /* the launcher's stop ends it */
}

static void mode_memspare(int s)
{
    mem_state_t m;
    ddp_checkpoint_buffer_t b[2];
    int64_t step = -1, x = 0;
    const char *asked = getenv("DDP_CHECKPOINT_STEP");
    int err = ddp_checkpoint_load(ddp, &step, b, mem_buffers(&m, b));
    if (err != 0 && err != -ENOENT)
        fail_collective("checkpoint_load", err);
    if (err == 0) {
        printf("memspare %d loaded %" PRId64 " (DDP_CHECKPOINT_STEP=%s)\n", rank, step,
               asked ? asked : "-");
        return;
    }
    for (int64_t i = 1; i <= s; i++)
        mem_save(i);
    CALL("all_reduce", ddp_all_reduce(ddp, &x, 1, DDP_INT64, DDP_SUM)); /* every save done */
    printf("memspare %d saved %d dir %s\n", rank, s, getenv("DDP_CHECKPOINT_DIR"));
    fflush(stdout);
    pause(); /* the launcher's stop ends it */
}

static void mode_groups(void)
{
    ddp_t *second;
    ddp_options_t options = {.group = "second"};
    CALL("init of group second", ddp_init_with(&second, &options));
    for (int i = 0; i < 20; i++) {
        int64_t a = rank + i, b = 1000 * rank - i;
        CALL("all_reduce", ddp_all_reduce(ddp, &a, 1, DDP_INT64, DDP_SUM));
        int err = ddp_all_reduce(second, &b, 1, DDP_INT64, DDP_MAX);
        if (err)
            fail_collective("all_reduce of group second", err);
        if (a != (int64_t)world * (world - 1) / 2 + (int64_t)world * i ||
            b != 1000 * (world - 1) - i) {
            fprintf(stderr, "rank %d: groups mixed up: %lld %lld\n", rank, (long long)a,
                    (long long)b);
            exit(1);
        }
    }
    ddp_t *bad;
    options.group = "no/slashes";
    if (ddp_init_with(&bad, &options) != DDP_EUSAGE) {
        fprintf(stderr, "rank %d: a bad group name was accepted\n", rank);
        exit(1);
    }
    ddp_finalize(second);
    printf("groups ok, world %d\n", world);
}

static void mode_die(int victim)
{
    size_t n = 4u << 20;
    float *buf = calloc(n, sizeof *buf);
    signal(SIGTERM, SIG_IGN); /* only libddp's own detection may end us */
    CALL("barrier", ddp_barrier(ddp));
    for (int i = 0; i < 1000; i++) {
        if (rank == victim && i == 3) {
            fprintf(stderr, "rank %d: dying now\n", rank);
            raise(SIGKILL);
        }
        CALL("all_reduce", ddp_all_reduce(ddp, buf, n, DDP_FLOAT32, DDP_SUM));
    }
    printf("die: rank %d was never stopped\n", rank);
}

/* The last rank makes a collective call that differs from the others' by `how` (count,
 * dtype, op or kind): its neighbours must fail at once saying so (a rank further away
 * finds its neighbour gone), and a later collective must fail too. */
static void mode_mismatch(const char *how, int odd_rank)
{
    size_t n = 1000;
    float *buf = calloc(n + 1, sizeof *buf); /* float32 or int32 elements */
    bool odd = rank == odd_rank;
    int err;
    CALL("barrier", ddp_barrier(ddp));
    if (odd && strcmp(how, "count") == 0)
        err = ddp_all_reduce(ddp, buf, n + 1, DDP_FLOAT32, DDP_SUM);
    else if (odd && strcmp(how, "dtype") == 0)
        err = ddp_all_reduce(ddp, buf, n, DDP_INT32, DDP_SUM);
    else if (odd && strcmp(how, "op") == 0)
        err = ddp_all_reduce(ddp, buf, n, DDP_FLOAT32, DDP_MAX);
    else if (odd && strcmp(how, "kind") == 0)
        err = ddp_broadcast(ddp, buf, n, DDP_FLOAT32, 0);
    else
        err = ddp_all_reduce(ddp, buf, n, DDP_FLOAT32, DDP_SUM);
    int later = ddp_barrier(ddp);
    printf("rank %d: mismatch %s: %s; then %s\n", rank, how, err ? ddp_strerror(err) : "no error",
           later ? "failed too" : "went on");
    fflush(stdout);
    free(buf);
    exit(err ? 3 : 0);
}

/* Rank `victim` leaves: it closes its links and exits with code 5 a second later, on its
 * own (our stop's SIGTERM ignored), after the others have failed for it, each with one
 * more collective (which fails too, and must still blame the victim) before exiting. */
static void mode_leave(int victim)
{
    float x = 1;
    CALL("barrier", ddp_barrier(ddp));
    if (rank == victim) {
        signal(SIGTERM, SIG_IGN);
        ddp_finalize(ddp);
        fprintf(stderr, "rank %d: leaving\n", rank);
        sleep(1);
        exit(5);
    }
    int err = ddp_all_reduce(ddp, &x, 1, DDP_FLOAT32, DDP_SUM);
    if (err != 0 && ddp_barrier(ddp) != 0)
        fail_collective("all_reduce", err);
    printf("leave: rank %d was never stopped\n", rank);
}

static void mode_skip(int victim, int skipped, int seconds)
{
    float buf[1000] = {0};
    const char *pause = getenv("DDP_TEST_PAUSE_MS");
    long pause_ms = pause != NULL ? atol(pause) : 0;
    for (int i = 1; i <= 20; i++) {
        if (rank == victim && i == skipped) {
            printf("rank %d: skipping all_reduce #%d\n", rank, i);
            fflush(stdout);
            /* A signal (the launcher's dump request) cuts a sleep short: sleep on. */
            time_t until = time(NULL) + seconds;
            while (time(NULL) < until)
                sleep((unsigned)(until - time(NULL)));
            exit(4);
        }
        if (rank == 0 && pause_ms > 0)
            nanosleep(&(struct timespec){pause_ms / 1000, (pause_ms % 1000) * 1000000L}, NULL);
        CALL("all_reduce", ddp_all_reduce(ddp, buf, 1000, DDP_FLOAT32, DDP_SUM));
        printf("rank %d: all_reduce #%d done\n", rank, i);
        fflush(stdout);
    }
    printf("skip: rank %d finished\n", rank);
}

/* A training loop of `steps` steps: each sleeps `step_ms` (the ranks in `slow`, a comma-
 * separated list or "-", 30 ms more), then all-reduces (with DDP_TEST_REDUCER=1, through a
 * reducer: one gradient marked ready, then wait()): the launcher's straggler report sees
 * who the others wait for. `fail_at` > 0: rank 0 of the first attempt exits 1 after that
 * many steps. */
static void mode_slow(int steps, long step_ms, const char *slow, int fail_at)
{
    const char *restart = getenv("TORCHELASTIC_RESTART_COUNT"), *use = getenv("DDP_TEST_REDUCER");
    bool first = restart == NULL || strcmp(restart, "0") == 0;
    ddp_reducer_t *reducer = NULL;
    float grad[256] = {0};
    if (use != NULL && strcmp(use, "1") == 0) {
        CALL("reducer_new", ddp_reducer_new(ddp, NULL, &reducer));
        if (ddp_reducer_add(reducer, grad, 256, DDP_FLOAT32) != 0)
            fail_collective("reducer_add", -1);
    }
    float buf[256] = {0};
    bool slowed = false;
    for (const char *p = slow; *p != '\0' && !slowed; p += strcspn(p, ","), p += *p == ',')
        slowed = *p != '-' && atoi(p) == rank;
    long ms = step_ms + (slowed ? 30 : 0);
    for (int i = 1; i <= steps; i++) {
        nanosleep(&(struct timespec){ms / 1000, (ms % 1000) * 1000000L}, NULL);
        if (reducer != NULL) {
            CALL("reducer_ready", ddp_reducer_ready(reducer, 0));
            CALL("reducer_wait", ddp_reducer_wait(reducer));
        } else {
            CALL("all_reduce", ddp_all_reduce(ddp, buf, 256, DDP_FLOAT32, DDP_SUM));
        }
        if (rank == 0 && first && fail_at > 0 && i == fail_at) {
            printf("slow: rank 0 fails after %d steps\n", i);
            fflush(stdout);
            exit(1);
        }
    }
    ddp_reducer_free(reducer);
    printf("slow: rank %d of %d finished %d steps\n", rank, world, steps);
}

/* A gradient registered: its index, or the failure. */
static void added(int index)
{
    if (index < 0)
        fail_collective("reducer_add", index);
}

/* An eighth in [-4, 4] from rank r's input: sums of up to 8 ranks stay exact in bf16. */
static float small(int r, size_t i, int it)
{
    return (float)((int)fmod(input(r, i, it) + 1000.0, 65.0) - 32) / 8.0f;
}

/* no_sync: three iterations only accumulate (no communication, each rank's sums its own),
 * the fourth averages the sums; compression: f32 buckets travel as bf16 and as f16, the
 * average computed in f32 and rounded once to the type (an f64 gradient beside them is
 * left alone). */
enum { NA = 1000, NB = 2001 };

/* no_sync: three accumulating iterations, then one that averages the sums. */
static void check_no_sync(float *a, float *b)
{
    ddp_reducer_t *r;
    ddp_reducer_timing_t timing;
    CALL("reducer_new", ddp_reducer_new(ddp, NULL, &r));
    added(ddp_reducer_add(r, a, NA, DDP_FLOAT32));
    added(ddp_reducer_add(r, b, NB, DDP_FLOAT32));
    CALL("reducer_set_sync", ddp_reducer_set_sync(r, false));
    for (int it = 0; it < 4; it++) {
        if (it == 3)
            CALL("reducer_set_sync", ddp_reducer_set_sync(r, true));
        for (size_t i = 0; i < NB; i++)
            b[i] += small(rank, i, it);
        CALL("ready", ddp_reducer_ready(r, 1));
        for (size_t i = 0; i < NA; i++)
            a[i] += small(rank, i + NB, it);
        CALL("ready", ddp_reducer_ready(r, 0));
        CALL("wait", ddp_reducer_wait(r));
        ddp_reducer_timing(r, &timing);
        /* Alone (world 1) nothing is ever communicated. */
        if ((it < 3 || world == 1) != (timing.comm_end == 0)) {
            fprintf(stderr, "rank %d: iteration %d %s\n", rank, it,
                    it < 3 ? "communicated under no_sync" : "did not communicate");
            exit(1);
        }
        for (size_t i = 0; i < NB; i++) {
            double want = 0;
            for (int k = 0; k <= it; k++)
                for (int q = 0; q < (it < 3 ? 1 : world); q++)
                    want += small(it < 3 ? rank : q, i, k);
            if (it == 3)
                want /= world;
            if (fabs(b[i] - want) > 1e-5) {
                fprintf(stderr, "rank %d: no_sync iteration %d: b[%zu] = %g, want %g\n", rank, it,
                        i, b[i], want);
                exit(1);
            }
        }
    }
    ddp_reducer_free(r);
}

/* Compression in bf16 and f16: the average rounded once, exactly; f64 left alone. */
static void check_compression(float *b)
{
    double f64[5] = {0};
    ddp_reducer_t *r;
    static const ddp_compress_t kinds[] = {DDP_COMPRESS_BFLOAT16, DDP_COMPRESS_FLOAT16};
    for (int k = 0; k < 2; k++) {
        ddp_reducer_options_t options = {.compress = kinds[k]};
        int rounded = 0;
        CALL("reducer_new", ddp_reducer_new(ddp, &options, &r));
        added(ddp_reducer_add(r, b, NB, DDP_FLOAT32));
        added(ddp_reducer_add(r, f64, 5, DDP_FLOAT64));
        for (size_t i = 0; i < NB; i++)
            b[i] = small(rank, i, 7);
        for (size_t i = 0; i < 5; i++)
            f64[i] = rank + 0.1 * (double)i;
        CALL("ready", ddp_reducer_ready(r, 1));
        CALL("ready", ddp_reducer_ready(r, 0));
        CALL("wait", ddp_reducer_wait(r));
        for (size_t i = 0; i < NB; i++) {
            double sum = 0;
            for (int q = 0; q < world; q++)
                sum += small(q, i, 7);
            float exact = (float)sum / (float)world;
            double want = element_round_half(exact, kinds[k] == DDP_COMPRESS_BFLOAT16);
            rounded += want != exact;
            if (b[i] != want) {
                fprintf(stderr, "rank %d: compressed in %s: b[%zu] = %.9g, want %.9g\n", rank,
                        kinds[k] == DDP_COMPRESS_BFLOAT16 ? "bf16" : "f16", i, b[i], want);
                exit(1);
            }
        }
        for (size_t i = 0; i < 5; i++) {
            if (fabs(f64[i] - ((world - 1) / 2.0 + 0.1 * (double)i)) > 1e-12) {
                fprintf(stderr, "rank %d: the f64 gradient was compressed too\n", rank);
                exit(1);
            }
        }
        /* With 3 ranks, thirds do not fit 8 bits: the rounding is seen. */
        if (world == 3 && rounded == 0) {
            fprintf(stderr, "rank %d: nothing was rounded: not compressed?\n", rank);
            exit(1);
        }
        ddp_reducer_free(r);
    }
}

static void mode_reducer_modes(void)
{
    float *a = calloc(NA, sizeof *a), *b = calloc(NB, sizeof *b);
    check_no_sync(a, b);
    check_compression(b);
    free(a);
    free(b);
    printf("reducer modes ok, world %d\n", world);
}

/* `count` elements of rank r's input from element `first` on, into buf. */
static void *inputs(int r, size_t first, size_t count, ddp_dtype_t t)
{
    void *buf = malloc(count * element_size(t) + 1);
    for (size_t i = 0; i < count; i++)
        store_value(buf, i, t, input(r, first + i, (int)t));
    return buf;
}

/* buf must hold rank r's input from element `first` on, bit for bit. */
static void expect_inputs(const char *what, const void *buf, int r, size_t first, size_t count,
                          ddp_dtype_t t)
{
    void *want = inputs(r, first, count, t);
    if (memcmp(buf, want, count * element_size(t)) != 0) {
        fprintf(stderr, "rank %d: %s dtype %d count %zu: not rank %d's data from %zu\n", rank, what,
                (int)t, count, r, first);
        exit(1);
    }
    free(want);
}

/* reduce to every root and reduce_scatter, for one dtype, op and count. */
static void check_reductions(ddp_dtype_t t, ddp_reduce_op_t op, size_t count)
{
    size_t es = element_size(t), all = count * (size_t)world;
    for (int root = 0; root < world; root++) {
        void *buf = inputs(rank, 0, count, t);
        CALL("reduce", ddp_reduce(ddp, buf, count, t, op, root));
        for (size_t i = 0; rank == root && i < count; i++)
            expect_reduced("reduce", t, op, count, i, i, element_load(buf, i, t));
        if (rank != root)
            expect_inputs("reduce (not the root)", buf, rank, 0, count, t);
        free(buf);
    }
    void *send = inputs(rank, 0, all, t), *recv = malloc(count * es + 1);
    CALL("reduce_scatter", ddp_reduce_scatter(ddp, send, recv, count, t, op));
    for (size_t i = 0; i < count; i++)
        expect_reduced("reduce_scatter", t, op, count, i, (size_t)rank * count + i,
                       element_load(recv, i, t));
    expect_inputs("reduce_scatter's send", send, rank, 0, all, t);
    free(send);
    free(recv);
}

/* all_to_all, gather and scatter from every root, send and recv between every pair. */
static void check_movements(ddp_dtype_t t, size_t count)
{
    size_t es = element_size(t), all = count * (size_t)world;
    void *send = inputs(rank, 0, all, t), *recv = malloc(all * es + 1);
    CALL("all_to_all", ddp_all_to_all(ddp, send, recv, count, t));
    for (int j = 0; j < world; j++)
        expect_inputs("all_to_all", (char *)recv + (size_t)j * count * es, j, (size_t)rank * count,
                      count, t);
    for (int root = 0; root < world; root++) {
        memset(recv, 0x5a, all * es);
        CALL("gather", ddp_gather(ddp, send, rank == root ? recv : NULL, count, t, root));
        for (int j = 0; rank == root && j < world; j++)
            expect_inputs("gather", (char *)recv + (size_t)j * count * es, j, 0, count, t);
        CALL("scatter", ddp_scatter(ddp, rank == root ? send : NULL, recv, count, t, root));
        expect_inputs("scatter", recv, root, (size_t)rank * count, count, t);
    }
    /* Every ordered pair in one order that all ranks follow: a send blocks only its two. */
    for (int a = 0; a < world; a++) {
        for (int b = 0; b < world; b++) {
            if (a == b || (rank != a && rank != b))
                continue;
            if (rank == a)
                CALL("send", ddp_send(ddp, send, count, t, b));
            else
                CALL("recv", ddp_recv(ddp, recv, count, t, a));
            if (rank == b)
                expect_inputs("recv", recv, a, 0, count, t);
        }
    }
    free(send);
    free(recv);
}

static void mode_more(size_t max_elements)
{
    size_t sizes[] = {0, 1, (size_t)world - 1, (size_t)world + 1, 7, 1000, 65537};
    static const ddp_dtype_t types[] = {DDP_FLOAT32, DDP_FLOAT64, DDP_INT32,
                                        DDP_INT64,   DDP_FLOAT16, DDP_BFLOAT16};
    int cases = 0;
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        if (sizes[s] > max_elements || (s > 0 && sizes[s] == 0))
            continue;
        for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
            for (int op = DDP_SUM; op <= DDP_MAX; op++, cases++)
                check_reductions(types[t], (ddp_reduce_op_t)op, sizes[s]);
            check_movements(types[t], sizes[s]);
            cases++;
        }
    }
    same_everywhere(&cases, sizeof cases, "the case count");
    printf("more ok: %d cases, world %d\n", cases, world);
}

/* Rank 0 sends 10 int32 to rank 1, which expects 11 float32: rank 1 fails naming both,
 * and the context stays usable: a barrier and a matching send and recv follow. */
static void mode_p2p_mismatch(void)
{
    int32_t buf[11] = {0};
    int err = 0;
    if (rank == 0)
        err = ddp_send(ddp, buf, 10, DDP_INT32, 1);
    else if (rank == 1)
        err = ddp_recv(ddp, buf, 11, DDP_FLOAT32, 0);
    printf("rank %d: p2p mismatch: %s\n", rank, err ? ddp_last_error(ddp) : "no error");
    buf[0] = 42;
    CALL("barrier", ddp_barrier(ddp));
    if (rank == 0)
        CALL("send", ddp_send(ddp, buf, 1, DDP_INT32, 1));
    else if (rank == 1)
        CALL("recv", ddp_recv(ddp, buf, 1, DDP_INT32, 0));
    printf("rank %d: after the mismatch: barrier and send %d\n", rank, buf[0]);
    fflush(stdout);
    exit(0);
}

/* Whether `err` is DDP_EUSAGE; prints the case either way. */
static bool refused(const char *what, int err)
{
    printf("rank %d: %s: %s\n", rank, what, err == DDP_EUSAGE ? "refused" : ddp_strerror(err));
    return err == DDP_EUSAGE;
}

/* Misuse a program can make, one case a run (the test reads the output and stderr):
 *   peer         send to rank 7 and recv from -1: refused, the context usable
 *   null         every kind of entry point given a NULL context or object
 *   finalized    a barrier on a finalized context: refused at once
 *   handled      rank 1 handles a refused recv, then dies of SIGSEGV
 *   gather-null  gather to rank 0, whose receive buffer is NULL: nobody waits
 *   both-send    both ranks send 64 MiB before receiving: the one with the longer
 *                DDP_TIMEOUT sees the other go (exit and reset) as DDP_ECLOSED */
static void mode_misuse(const char *how)
{
    static float big[16u << 20];
    float x[4] = {1, 2, 3, 4};
    bool ok = true;
    if (strcmp(how, "peer") == 0) {
        ok = refused("send to 7", ddp_send(ddp, x, 1, DDP_FLOAT32, 7)) &&
             refused("recv from -1", ddp_recv(ddp, x, 1, DDP_FLOAT32, -1));
        ok = ok && ddp_barrier(ddp) == 0;
    } else if (strcmp(how, "null") == 0) {
        ddp_reducer_t *r = NULL;
        ddp_reducer_timing_t t;
        ok = refused("barrier", ddp_barrier(NULL)) &&
             refused("all_reduce", ddp_all_reduce(NULL, x, 4, DDP_FLOAT32, DDP_SUM)) &&
             refused("send", ddp_send(NULL, x, 1, DDP_FLOAT32, 0)) &&
             refused("rank", ddp_rank(NULL)) &&
             refused("reducer_new", ddp_reducer_new(NULL, NULL, &r)) &&
             refused("reducer_ready", ddp_reducer_ready(NULL, 0)) &&
             refused("zero_new", ddp_zero_new(NULL, 4, 1, NULL)) &&
             refused("checkpoint_save_file", ddp_checkpoint_save_file(NULL, "x", x, sizeof x)) &&
             refused("checkpoint_save", ddp_checkpoint_save(NULL, 1, NULL, 0)) &&
             ddp_sampler_count(NULL, 10, NULL) == 0;
        ddp_reducer_timing(NULL, &t);
        ddp_finalize(NULL);
        ok = ok && ddp_barrier(ddp) == 0;
    } else if (strcmp(how, "finalized") == 0) {
#if defined(__SANITIZE_ADDRESS__)
        printf("rank %d: finalized: skipped (AddressSanitizer reports a use after free itself)\n",
               rank);
#else
        ddp_finalize(ddp);
        ok = refused("barrier after finalize", ddp_barrier(ddp));
#endif
        fflush(stdout);
        exit(ok ? 0 : 1);
    } else if (strcmp(how, "handled") == 0) {
        if (rank == 1 && refused("recv from -1", ddp_recv(ddp, x, 1, DDP_FLOAT32, -1))) {
            fflush(stdout);
            signal(SIGSEGV, SIG_DFL); /* a real crash's end, also under AddressSanitizer */
            raise(SIGSEGV);
        }
        pause(); /* until the launcher stops this rank */
    } else if (strcmp(how, "gather-null") == 0) {
        float all[64];
        int err = ddp_gather(ddp, x, rank == 0 ? NULL : all, 4, DDP_FLOAT32, 0);
        ok = rank == 0 ? refused("gather into NULL", err) : err == 0;
        ok = ok && ddp_barrier(ddp) == 0 && ddp_gather(ddp, x, all, 4, DDP_FLOAT32, 0) == 0;
    } else if (strcmp(how, "both-send") == 0) {
        signal(SIGTERM, SIG_IGN); /* only libddp's own detection may end the survivor */
        int err = ddp_send(ddp, big, sizeof big / sizeof big[0], DDP_FLOAT32, 1 - rank);
        printf("rank %d: both-send: %s\n", rank, ddp_strerror(err));
        fflush(stdout);
        exit(err == DDP_ECLOSED ? 0 : 3);
    } else {
        ok = false;
    }
    printf("rank %d: misuse %s: %s\n", rank, how, ok ? "ok" : "FAILED");
    fflush(stdout);
}

static const char *transport(void)
{
    char line[512];
    const char *found = "tcp";
    FILE *maps = fopen("/proc/self/maps", "r");
    while (maps != NULL && fgets(line, sizeof line, maps) != NULL) {
        if (strstr(line, "/dev/shm/ddp-") != NULL)
            found = "shm";
    }
    if (maps != NULL)
        fclose(maps);
    return found;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "check";
    const char *no_shm = getenv("DDP_TEST_NO_SHM_RANK"), *my_rank = getenv("RANK");
    if (no_shm != NULL && my_rank != NULL && strcmp(no_shm, my_rank) == 0)
        setenv("DDP_SHM", "0", 1);
    /* DDP_TEST_LATE_RANK=R:S: rank R sleeps S seconds before joining. */
    const char *late = getenv("DDP_TEST_LATE_RANK");
    int late_rank, late_seconds;
    if (late != NULL && my_rank != NULL && sscanf(late, "%d:%d", &late_rank, &late_seconds) == 2 &&
        late_rank == atoi(my_rank))
        sleep((unsigned)late_seconds);
    int err = ddp_init(&ddp);
    if (err != 0) {
        fprintf(stderr, "ddp_init: %s\n", ddp_strerror(err));
        return 3;
    }
    rank = ddp_rank(ddp);
    world = ddp_world_size(ddp);
    printf("rank %d transport %s\n", rank, transport());
    fflush(stdout);
    if (strcmp(mode, "check") == 0)
        mode_check(argc > 2 ? strtoul(argv[2], NULL, 10) : (16u << 20));
    else if (strcmp(mode, "collectives") == 0)
        mode_collectives();
    else if (strcmp(mode, "reducer") == 0)
        mode_reducer(argc > 2 ? argv[2] : "separate");
    else if (strcmp(mode, "groups") == 0)
        mode_groups();
    else if (strcmp(mode, "sampler") == 0)
        mode_sampler();
    else if (strcmp(mode, "checkpoint") == 0 && argc > 2)
        mode_checkpoint(argv[2]);
    else if (strcmp(mode, "resume") == 0 && argc > 3)
        mode_resume(argv[2], atoi(argv[3]));
    else if (strcmp(mode, "memory") == 0)
        mode_memory();
    else if (strcmp(mode, "memresume") == 0 && argc > 2)
        mode_memresume(atoi(argv[2]));
    else if (strcmp(mode, "memcommon") == 0 && argc > 2)
        mode_memcommon(atoi(argv[2]));
    else if (strcmp(mode, "memnodes") == 0 && argc > 2)
        mode_memnodes(atoi(argv[2]));
    else if (strcmp(mode, "memhold") == 0 && argc > 2)
        mode_memhold(atoi(argv[2]));
    else if (strcmp(mode, "memspare") == 0 && argc > 2)
        mode_memspare(atoi(argv[2]));
    else if (strcmp(mode, "nccl-id") == 0)
        mode_nccl_id();
    else if (strcmp(mode, "mismatch") == 0 && argc > 2)
        mode_mismatch(argv[2], argc > 3 ? atoi(argv[3]) : world - 1);
    else if (strcmp(mode, "leave") == 0)
        mode_leave(argc > 2 ? atoi(argv[2]) : 0);
    else if (strcmp(mode, "reducer-modes") == 0)
        mode_reducer_modes();
    else if (strcmp(mode, "more") == 0)
        mode_more(argc > 2 ? strtoul(argv[2], NULL, 10) : 65537);
    else if (strcmp(mode, "p2p-mismatch") == 0)
        mode_p2p_mismatch();
    else if (strcmp(mode, "misuse") == 0 && argc > 2)
        mode_misuse(argv[2]);
    else if (strcmp(mode, "skip") == 0 && argc > 3)
        mode_skip(atoi(argv[2]), atoi(argv[3]), argc > 4 ? atoi(argv[4]) : 600);
    else if (strcmp(mode, "slow") == 0 && argc > 4)
        mode_slow(atoi(argv[2]), atol(argv[3]), argv[4], argc > 5 ? atoi(argv[5]) : 0);
    else if (strcmp(mode, "die") == 0)
        mode_die(argc > 2 ? atoi(argv[2]) : 1);
    else
        return 2;
    ddp_finalize(ddp);
    return 0;
}
