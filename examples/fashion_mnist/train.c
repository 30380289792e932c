/* fashion-mnist: trains an MLP or the course's FashionCNN on FashionMNIST, data-parallel
 * under ddp-launch, with libddp's sampler, gradient reducer and checkpoints.
 *
 * Each rank takes its share of every epoch (ddp_sampler_indices), computes the forward
 * and backward passes of its batch, and hands each gradient to the reducer as soon as
 * backward has it, so the averaging overlaps the rest of the backward pass; wait, then
 * SGD. --sync-bn makes batch norm use the statistics of the global batch, over a second
 * libddp context ("syncbn") so that they do not queue behind the gradients. Rank 0
 * prints progress, saves a checkpoint after each epoch, and a restarted job resumes from
 * it; with --checkpoint-every N each rank keeps its state in memory every N steps
 * (libddp's in-memory checkpoints), and a restarted job resumes within the epoch.
 * Run: ddp-launch --nproc-per-node=2 --no-python ./fashion-mnist --epochs 1 */
#include "data.h"
#include "dp.h"
#include "model.h"
#include "model_cuda.h"

#include <ddp.h>

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    fm_arch_t arch;
    int epochs, batch, log_every, limit_train, limit_test, max_steps;
    int checkpoint_every; /* --checkpoint-every: steps between in-memory checkpoints; 0: none */
    int zero;             /* --zero: 0 (off), 1 or 2 */
    bool adam;
    int replicas; /* --parallel dp: threads; 0: ddp (processes) */
    float lr, momentum;
    uint64_t seed;
    const char *data, *checkpoint, *dump;
    bool sync_bn, dropout, cosine, cuda;
} options_t;

/* ddp averages the gradients (NCCL on the GPU with --device cuda); host holds the
 * collectives on host memory (the same context on the CPU, a CPU group beside NCCL). */
/* The optimizer's state: for the whole model, or with --zero for this rank's shard. */
typedef struct {
    ddp_zero_t *zero; /* --zero, or NULL */
    size_t offset, len;
    float *m, *v; /* momentum, or Adam's moments (v: Adam only) */
    long step;
} optim_t;

typedef struct {
    ddp_t *ddp, *host, *syncbn;
    ddp_reducer_t *reducer;
    optim_t optim;
    fm_gpu_t *gpu; /* --device cuda */
    int rank, world;
} job_t;

static void usage(FILE *to)
{
    fprintf(to,
            "usage: fashion-mnist [--model cnn|mlp] [--epochs N] [--batch-size B] [--lr LR]\n"
            "                     [--momentum M] [--seed S] [--data DIR] [--device cpu|cuda]\n"
            "                     [--sync-bn] [--no-dropout] [--checkpoint PATH]\n"
            "                     [--log-every N] [--limit-train N] [--limit-test N]\n"
            "                     [--max-steps N] [--dump-params PATH]\n"
            "                     [--lr-schedule cosine|constant] [--optimizer sgd|adam]\n"
            "                     [--zero 1|2] [--parallel ddp|dp] [--replicas N]\n"
            "                     [--checkpoint-every N]\n"
            "Trains on FashionMNIST under ddp-launch (1 worker without it). --batch-size is\n"
            "per worker (default 64); --lr defaults to 0.02 for cnn, 0.1 for mlp (SGD) or\n"
            "0.001 (Adam), annealed to 0 over the run (cosine). --zero shards the optimizer\n"
            "state over the ranks (ZeRO stage 1; 2 also reduce-scatters the gradients).\n"
            "--parallel dp: one process, --replicas threads (default 2), DataParallel's way.\n"
            "Data: Debian's dataset-fashion-mnist in %s.\n",
            FM_DEFAULT_DATA_DIR);
}

static int parse_int(const char *flag, const char *text, int min, int *out)
{
    char *end;
    long v = strtol(text, &end, 10);
    if (*text == '\0' || *end != '\0' || v < min || v > 1000000000) {
        fprintf(stderr, "fashion-mnist: %s %s: not an integer >= %d\n", flag, text, min);
        return -1;
    }
    *out = (int)v;
    return 0;
}

static int parse_float(const char *flag, const char *text, float *out)
{
    char *end;
    double v = strtod(text, &end);
    if (*text == '\0' || *end != '\0' || !(v >= 0) || v > 1e6) {
        fprintf(stderr, "fashion-mnist: %s %s: not a number >= 0\n", flag, text);
        return -1;
    }
    *out = (float)v;
    return 0;
}

/* A flag of two values: 0 for the first, 1 for the second; -1 (said) for neither. */
static int parse_choice(const char *flag, const char *text, const char *first, const char *second)
{
    if (strcmp(text, first) == 0 || strcmp(text, second) == 0)
        return strcmp(text, second) == 0;
    fprintf(stderr, "fashion-mnist: %s %s: %s or %s\n", flag, text, first, second);
    return -1;
}

/* What parse_args reads before it is in options_t. */
typedef struct {
    int seed, replicas;
    bool dp;
} flags_read_t;

/* One flag of getopt_long's (`c`, its value in optarg) into `o`: 0, or -1 (said). */
static int parse_flag(int c, options_t *o, flags_read_t *f)
{
    int k = 0;
    switch (c) {
    case 'm':
        if ((k = parse_choice("--model", optarg, "cnn", "mlp")) >= 0)
            o->arch = k ? FM_MLP : FM_CNN;
        break;
    case 'e':
        return parse_int("--epochs", optarg, 1, &o->epochs);
    case 'b':
        return parse_int("--batch-size", optarg, 1, &o->batch);
    case 'l':
        return parse_float("--lr", optarg, &o->lr);
    case 'M':
        return parse_float("--momentum", optarg, &o->momentum);
    case 's':
        return parse_int("--seed", optarg, 0, &f->seed);
    case 'd':
        o->data = optarg;
        break;
    case 'D':
        if ((k = parse_choice("--device", optarg, "cpu", "cuda")) >= 0)
            o->cuda = k;
        break;
    case 'S':
        o->sync_bn = true;
        break;
    case 'n':
        o->dropout = false;
        break;
    case 'c':
        o->checkpoint = optarg;
        break;
    case 'L':
        return parse_int("--log-every", optarg, 1, &o->log_every);
    case 't':
        return parse_int("--limit-train", optarg, 1, &o->limit_train);
    case 'T':
        return parse_int("--limit-test", optarg, 1, &o->limit_test);
    case 'x':
        return parse_int("--max-steps", optarg, 1, &o->max_steps);
    case 'p':
        o->dump = optarg;
        break;
    case 'C':
        if ((k = parse_choice("--lr-schedule", optarg, "cosine", "constant")) >= 0)
            o->cosine = !k;
        break;
    case 'O':
        if ((k = parse_choice("--optimizer", optarg, "sgd", "adam")) >= 0)
            o->adam = k;
        break;
    case 'Z':
        if ((k = parse_choice("--zero", optarg, "1", "2")) >= 0)
            o->zero = 1 + k;
        break;
    case 'P':
        if ((k = parse_choice("--parallel", optarg, "ddp", "dp")) >= 0)
            f->dp = k;
        break;
    case 'R':
        return parse_int("--replicas", optarg, 1, &f->replicas);
    case 'E':
        return parse_int("--checkpoint-every", optarg, 1, &o->checkpoint_every);
    case 'h':
        usage(stdout);
        exit(0);
    default:
        usage(stderr);
        return -1;
    }
    return k < 0 ? -1 : 0;
}

/* Flags that do not go together: what to say, or NULL. */
static const char *conflict(const options_t *o)
{
    if (o->replicas > 0 &&
        (o->cuda || o->zero || o->adam || o->checkpoint || o->sync_bn || o->checkpoint_every))
        return "--parallel dp is SGD on the cpu device, without --zero, --checkpoint, "
               "--checkpoint-every or --sync-bn";
    if ((o->zero || o->adam) && o->cuda)
        return "--zero and --optimizer adam run on the cpu device only";
    if ((o->zero || o->adam) && o->checkpoint != NULL)
        return "--checkpoint holds SGD's whole momentum: not with --zero (a shard of the state "
               "a rank) or --optimizer adam";
    if (o->cuda && o->sync_bn)
        return "--sync-bn runs on the cpu device only (cuDNN's batch norm takes the statistics "
               "of each GPU's own batch)";
    return NULL;
}

/* The flags together, and --device cuda's library: 0, or -1 (said). */
static int check_combinations(const options_t *o)
{
    char why[1024];
    const char *no = conflict(o);
    if (no != NULL) {
        fprintf(stderr, "fashion-mnist: %s\n", no);
        return -1;
    }
    if (o->cuda && fm_gpu_load(why, sizeof why) != 0) {
        fprintf(stderr, "fashion-mnist: --device cuda: %s\n", why);
        return -1;
    }
    return 0;
}

static int parse_args(int argc, char **argv, options_t *o)
{
    static const struct option flags[] = {
        {"model", required_argument, NULL, 'm'},
        {"epochs", required_argument, NULL, 'e'},
        {"batch-size", required_argument, NULL, 'b'},
        {"lr", required_argument, NULL, 'l'},
        {"momentum", required_argument, NULL, 'M'},
        {"seed", required_argument, NULL, 's'},
        {"data", required_argument, NULL, 'd'},
        {"device", required_argument, NULL, 'D'},
        {"sync-bn", no_argument, NULL, 'S'},
        {"no-dropout", no_argument, NULL, 'n'},
        {"checkpoint", required_argument, NULL, 'c'},
        {"log-every", required_argument, NULL, 'L'},
        {"limit-train", required_argument, NULL, 't'},
        {"limit-test", required_argument, NULL, 'T'},
        {"max-steps", required_argument, NULL, 'x'},
        {"dump-params", required_argument, NULL, 'p'},
        {"lr-schedule", required_argument, NULL, 'C'},
        {"optimizer", required_argument, NULL, 'O'},
        {"zero", required_argument, NULL, 'Z'},
        {"parallel", required_argument, NULL, 'P'},
        {"replicas", required_argument, NULL, 'R'},
        {"checkpoint-every", required_argument, NULL, 'E'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    *o = (options_t){.arch = FM_CNN,
                     .epochs = 1,
                     .batch = 64,
                     .log_every = 100,
                     .lr = -1,
                     .momentum = 0.9f,
                     .data = FM_DEFAULT_DATA_DIR,
                     .dropout = true,
                     .cosine = true};
    flags_read_t f = {.replicas = 2};
    int c;
    while ((c = getopt_long(argc, argv, "h", flags, NULL)) != -1) {
        if (parse_flag(c, o, &f) != 0)
            return -1;
    }
    if (optind < argc) {
        fprintf(stderr, "fashion-mnist: unexpected argument '%s'\n", argv[optind]);
        return -1;
    }
    o->seed = (uint64_t)f.seed;
    o->replicas = f.dp ? f.replicas : 0;
    if (o->lr < 0) /* stable from any seed; the targets in an epoch */
        o->lr = o->adam ? 0.001f : o->arch == FM_MLP ? 0.1f : 0.02f;
    return check_combinations(o);
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Stops the job with libddp's message (and the error file the launcher reads). */
static void check(job_t *job, ddp_t *ctx, const char *what, int err)
{
    if (err == 0)
        return;
    /* Without a context (a failed init) libddp's own line above says why. */
    const char *why = ctx != NULL ? ddp_last_error(ctx) : "see libddp's message above";
    fprintf(stderr, "fashion-mnist: rank %d: %s: %s%s%s\n", job->rank, what, ddp_strerror(err),
            *why != '\0' ? ": " : "", why);
    exit(1);
}

/* The model's steps on its device: the CPU layers, or cuDNN and cuBLAS. */
static void gpu_check(job_t *job, const char *what, int err)
{
    if (err == 0)
        return;
    fprintf(stderr, "fashion-mnist: rank %d: %s on the GPU: %s\n", job->rank, what,
            fm_gpu_error(job->gpu));
    exit(1);
}

static double forward(job_t *job, fm_model_t *m, const float *x, const uint8_t *labels, int batch,
                      bool train, int *correct)
{
    if (job->gpu == NULL)
        return fm_model_forward(m, x, labels, batch, train, correct);
    double loss = fm_gpu_forward(job->gpu, x, labels, batch, train, correct);
    gpu_check(job, "forward", loss < 0 ? -1 : 0);
    return loss;
}

/* Device to host (before the host copy is read: checkpoint, evaluation, dump), and back. */
static void pull(job_t *job)
{
    if (job->gpu != NULL)
        gpu_check(job, "copy to the host", fm_gpu_pull(job->gpu));
}

static void push(job_t *job)
{
    if (job->gpu != NULL)
        gpu_check(job, "copy to the device", fm_gpu_push(job->gpu));
}

static int all_sum(void *ctx, double *values, int n)
{
    return ddp_all_reduce(ctx, values, (size_t)n, DDP_FLOAT64, DDP_SUM);
}

static void grad_ready(void *ctx, int param)
{
    if (((job_t *)ctx)->optim.zero != NULL)
        return; /* --zero averages the gradients after the backward pass */
    job_t *job = ctx;
    check(job, job->ddp, "reducer_ready", ddp_reducer_ready(job->reducer, param));
}

/* Dropout's generator at the start of an epoch: each rank its own masks, and a function
 * of the epoch (as the sampler's order is), so a run resumed from the checkpoint of an
 * epoch draws the masks an uninterrupted run drew: the checkpoint holds the generator by
 * holding the epoch, whatever the world size of the resumed run. */
static uint64_t dropout_generator(uint64_t seed, int rank, int epoch)
{
    return seed ^ 0x5DEECE66Dull ^ ((uint64_t)rank + 1) * 0x9E3779B97F4A7C15ull ^
           ((uint64_t)epoch + 1) * 0xD1B54A32D192ED03ull;
}

/* The optimizer's state: SGD's momentum (the model's own, which checkpoints hold) or
 * Adam's moments, for every value, or with --zero for this rank's shard; rank 0 says how
 * much that is. */
static void optim_init(job_t *job, const options_t *o, fm_model_t *m)
{
    optim_t *op = &job->optim;
    op->offset = 0;
    op->len = m->nvalues;
    if (o->zero) {
        check(job, job->ddp, "zero_new", ddp_zero_new(job->ddp, m->nvalues, o->zero, &op->zero));
        ddp_zero_shard(op->zero, &op->offset, &op->len);
    }
    if (!o->zero && !o->adam) {
        op->m = m->momentum;
    } else if ((op->m = calloc(op->len + 1, sizeof *op->m)) == NULL ||
               (o->adam && (op->v = calloc(op->len + 1, sizeof *op->v)) == NULL)) {
        fprintf(stderr, "fashion-mnist: out of memory for the optimizer's state\n");
        exit(1);
    }
    size_t per_value = (o->adam ? 2 : 1) * sizeof(float);
    if (job->rank == 0)
        printf("optimizer %s%s: its state takes %.1f KiB on each rank (%.1f KiB unsharded)\n",
               o->adam ? "Adam" : "SGD with momentum",
               o->zero == 1   ? ", ZeRO stage 1"
               : o->zero == 2 ? ", ZeRO stage 2"
                              : "",
               (double)(op->len * per_value) / 1024, (double)(m->nvalues * per_value) / 1024);
}

/* After the backward pass (and, without --zero, the reducer's average): the step. With
 * --zero the gradients are averaged now (stage 1: all of them; stage 2: this rank's
 * shard), the shard updated, and the shards gathered into every rank's parameters. */
static void optim_step(job_t *job, const options_t *o, fm_model_t *m, float lr)
{
    optim_t *op = &job->optim;
    const float *grads = m->grads;
    if (op->zero != NULL)
        check(job, job->ddp, "zero_reduce", ddp_zero_reduce(op->zero, m->grads, &grads));
    op->step++;
    if (o->adam)
        fm_adam(m->values + op->offset, grads, op->m, op->v, op->len, lr, op->step);
    else
        fm_sgd(m->values + op->offset, grads, op->m, op->len, lr, o->momentum);
    if (op->zero != NULL)
        check(job, job->ddp, "zero_gather", ddp_zero_gather(op->zero, m->values));
}

static void optim_free(job_t *job, fm_model_t *m)
{
    ddp_zero_free(job->optim.zero);
    if (job->optim.m != m->momentum)
        free(job->optim.m);
    free(job->optim.v);
}

/* What a checkpoint holds: where to resume, then the parameters, the momentum buffers
 * and the batch-norm statistics of rank 0. */
typedef struct {
    char magic[8];
    int32_t arch, next_epoch;
    uint64_t nvalues, nbuffers;
} checkpoint_header_t;

static int save_checkpoint(job_t *job, const options_t *o, const fm_model_t *m, int next_epoch)
{
    size_t len = sizeof(checkpoint_header_t) + (2 * m->nvalues + m->nbuffers) * sizeof(float);
    char *blob = malloc(len);
    if (blob == NULL)
        return -ENOMEM;
    checkpoint_header_t h = {"FMNIST01", (int32_t)m->arch, next_epoch, m->nvalues, m->nbuffers};
    char *p = blob;
    memcpy(p, &h, sizeof h);
    p += sizeof h;
    memcpy(p, m->values, m->nvalues * sizeof(float));
    p += m->nvalues * sizeof(float);
    memcpy(p, m->momentum, m->nvalues * sizeof(float));
    p += m->nvalues * sizeof(float);
    memcpy(p, m->buffers, m->nbuffers * sizeof(float));
    int err = ddp_checkpoint_save_file(job->ddp, o->checkpoint, blob, len);
    free(blob);
    return err;
}

/* Resumes from the checkpoint if there is one: returns the epoch to start at. */
static int load_checkpoint(job_t *job, const options_t *o, fm_model_t *m)
{
    void *blob;
    size_t len;
    checkpoint_header_t h;
    int err = ddp_checkpoint_load_file(job->ddp, o->checkpoint, &blob, &len);
    if (err == -ENOENT)
        return 0;
    check(job, job->ddp, "checkpoint_load", err);
    memcpy(&h, blob, len >= sizeof h ? sizeof h : 0);
    if (len < sizeof h || memcmp(h.magic, "FMNIST01", 8) != 0 || h.arch != (int32_t)m->arch ||
        h.nvalues != m->nvalues || h.nbuffers != m->nbuffers ||
        len != sizeof h + (2 * m->nvalues + m->nbuffers) * sizeof(float)) {
        fprintf(stderr,
                "fashion-mnist: %s is a checkpoint of another model (remove it to start over)\n",
                o->checkpoint);
        exit(1);
    }
    const char *p = (const char *)blob + sizeof h;
    memcpy(m->values, p, m->nvalues * sizeof(float));
    p += m->nvalues * sizeof(float);
    memcpy(m->momentum, p, m->nvalues * sizeof(float));
    p += m->nvalues * sizeof(float);
    memcpy(m->buffers, p, m->nbuffers * sizeof(float));
    free(blob);
    return h.next_epoch;
}

/* Where training stands: what an in-memory checkpoint holds beside the model and the
 * optimizer, and where a run begins (0s for a fresh one). */
typedef struct {
    int64_t epoch, step; /* the next step to take: step `step` of epoch `epoch` */
    int64_t total_steps; /* taken so far (--max-steps) */
    uint64_t rng;        /* dropout's generator at that step (each rank its own) */
    int64_t arch;
} position_t;

/* This rank's state as libddp's named buffers: where it stands, the parameters, batch
 * norm's statistics, the optimizer's state (SGD's momentum, or this rank's shard of
 * Adam's moments with --zero). The number of buffers. */
static size_t memory_buffers(job_t *job, const options_t *o, fm_model_t *m, position_t *at,
                             ddp_checkpoint_buffer_t b[6])
{
    optim_t *op = &job->optim;
    size_t n = 0;
    b[n++] = (ddp_checkpoint_buffer_t){"position", at, sizeof *at};
    b[n++] = (ddp_checkpoint_buffer_t){"model/values", m->values, m->nvalues * sizeof(float)};
    b[n++] = (ddp_checkpoint_buffer_t){"model/buffers", m->buffers, m->nbuffers * sizeof(float)};
    b[n++] = (ddp_checkpoint_buffer_t){"optim/m", op->m, op->len * sizeof(float)};
    b[n++] = (ddp_checkpoint_buffer_t){"optim/step", &op->step, sizeof op->step};
    if (o->adam)
        b[n++] = (ddp_checkpoint_buffer_t){"optim/v", op->v, op->len * sizeof(float)};
    return n;
}

/* Every --checkpoint-every steps: this rank's state in memory (nothing outside ddp-launch's
 * DDP_CHECKPOINT_DIR); one that does not fit is said and training goes on. */
static void save_memory(job_t *job, const options_t *o, fm_model_t *m, position_t at)
{
    ddp_checkpoint_buffer_t b[6];
    pull(job);
    at.arch = m->arch;
    int err = ddp_checkpoint_save(job->ddp, at.total_steps, b, memory_buffers(job, o, m, &at, b));
    if (err == -ENOSPC)
        return; /* libddp said why; the previous checkpoint stays */
    check(job, job->ddp, "checkpoint_save", err);
}

/* The newest in-memory checkpoint every rank has, if any: *at says where to go on. */
static bool load_memory(job_t *job, const options_t *o, fm_model_t *m, position_t *at)
{
    ddp_checkpoint_buffer_t b[6];
    int64_t step;
    int err = ddp_checkpoint_load(job->ddp, &step, b, memory_buffers(job, o, m, at, b));
    if (err == -ENOENT)
        return false;
    check(job, job->ddp, "checkpoint_load", err);
    if (at->arch != m->arch) {
        fprintf(stderr, "fashion-mnist: the checkpoint in memory is of another model\n");
        exit(1);
    }
    return true;
}

/* Test accuracy: each rank a strided share of the test set, the counts summed. Batch norm
 * uses rank 0's running statistics everywhere (PyTorch's DDP broadcasts buffers). */
static double evaluate(job_t *job, fm_model_t *m, const fm_dataset_t *test, int limit, int batch)
{
    int n = limit > 0 && limit < test->count ? limit : test->count;
    float *x = malloc((size_t)batch * 784 * sizeof *x);
    uint8_t *y = malloc((size_t)batch);
    int64_t counts[2] = {0, 0};
    if (m->nbuffers > 0) {
        pull(job);
        check(job, job->host, "broadcast",
              ddp_broadcast(job->host, m->buffers, m->nbuffers, DDP_FLOAT32, 0));
        push(job);
    }
    for (int start = job->rank; start < n; start += batch * job->world) {
        int b = 0;
        for (int i = start; i < n && b < batch; i += job->world, b++) {
            fm_dataset_image(test, i, x + (size_t)b * 784);
            y[b] = test->labels[i];
        }
        int right;
        forward(job, m, x, y, b, false, &right);
        counts[0] += right;
        counts[1] += b;
    }
    check(job, job->host, "all_reduce", ddp_all_reduce(job->host, counts, 2, DDP_INT64, DDP_SUM));
    free(x);
    free(y);
    return counts[1] > 0 ? (double)counts[0] / (double)counts[1] : 0;
}

/* The contexts, from the launcher's environment (one worker without one): the gradients'
 * (NCCL with --device cuda, then a CPU group for host data). */
static void init_contexts(job_t *job, const options_t *o)
{
    if (getenv("WORLD_SIZE") == NULL) {
        setenv("RANK", "0", 0);
        setenv("WORLD_SIZE", "1", 0);
        setenv("LOCAL_RANK", "0", 0);
        setenv("LOCAL_WORLD_SIZE", "1", 0);
    }
    ddp_options_t grads = {.backend = o->cuda ? DDP_BACKEND_NCCL : DDP_BACKEND_CPU};
    /* Until init succeeds the rank is the launcher's word: a failed init says which. */
    job->rank = atoi(getenv("RANK") != NULL ? getenv("RANK") : "0");
    check(job, NULL, "init", ddp_init_with(&job->ddp, &grads));
    job->rank = ddp_rank(job->ddp);
    job->world = ddp_world_size(job->ddp);
    job->host = job->ddp;
    if (o->cuda) {
        ddp_options_t host = {.backend = DDP_BACKEND_CPU, .group = "host"};
        check(job, job->ddp, "init of group host", ddp_init_with(&job->host, &host));
    }
}

/* --parallel dp: one process, a replica a thread (dp.c). Its exit status. */
static int run_dp(job_t *job, const options_t *o, fm_dataset_t *train, fm_dataset_t *test)
{
    if (job->world > 1) {
        fprintf(stderr, "fashion-mnist: --parallel dp is one process: run it without "
                        "ddp-launch, or with --nproc-per-node=1\n");
        return 2;
    }
    fm_dp_options_t dp = {.arch = o->arch,
                          .replicas = o->replicas,
                          .epochs = o->epochs,
                          .batch = o->batch,
                          .log_every = o->log_every,
                          .limit_train = o->limit_train,
                          .limit_test = o->limit_test,
                          .max_steps = o->max_steps,
                          .lr = o->lr,
                          .momentum = o->momentum,
                          .seed = o->seed,
                          .dropout = o->dropout,
                          .cosine = o->cosine,
                          .dump = o->dump};
    return fm_dp_train(&dp, train, test, job->ddp);
}

/* The model as DDP's constructor leaves it: rank 0's parameters everywhere, batch norm
 * synchronized with --sync-bn, on the GPU with --device cuda, every gradient in the
 * reducer, the optimizer, and a checkpoint's state when there is one (in memory, else the
 * file's). Where to begin in *at; 0, or -1 (said). */
static int setup_model(job_t *job, const options_t *o, fm_model_t *m, position_t *at)
{
    char why[8192];
    if (fm_model_init(m, o->arch, o->batch, o->seed) != 0) {
        fprintf(stderr, "fashion-mnist: out of memory for the model\n");
        return -1;
    }
    if (!o->dropout)
        m->dropout = 0;
    check(job, job->host, "broadcast",
          ddp_broadcast(job->host, m->values, m->nvalues, DDP_FLOAT32, 0));
    if (o->sync_bn && job->world > 1 && o->arch == FM_CNN) {
        ddp_options_t group = {.group = "syncbn"};
        check(job, job->ddp, "init of group syncbn", ddp_init_with(&job->syncbn, &group));
        m->sync = all_sum;
        m->sync_ctx = job->syncbn;
    }
    if (o->cuda && fm_gpu_new(m, ddp_local_rank(job->ddp), &job->gpu, why, sizeof why) != 0) {
        fprintf(stderr, "fashion-mnist: rank %d: --device cuda: %s\n", job->rank, why);
        return -1;
    }
    check(job, job->ddp, "reducer_new", ddp_reducer_new(job->ddp, NULL, &job->reducer));
    for (int p = 0; p < m->nparams; p++) {
        float *grad = job->gpu != NULL ? fm_gpu_grad(job->gpu, p) : m->params[p].grad;
        int index = ddp_reducer_add(job->reducer, grad, m->params[p].count, DDP_FLOAT32);
        check(job, job->ddp, "reducer_add", index < 0 ? index : 0);
    }
    optim_init(job, o, m);
    *at = (position_t){0};
    if (o->checkpoint_every && load_memory(job, o, m, at)) {
        push(job);
        if (job->rank == 0)
            printf("resumed from memory at epoch %d step %d (attempt %d)\n", (int)at->epoch + 1,
                   (int)at->step + 1, ddp_restart_count(job->ddp));
        return 0;
    }
    at->epoch = o->checkpoint ? load_checkpoint(job, o, m) : 0;
    if (at->epoch > 0)
        push(job);
    if (at->epoch > 0 && job->rank == 0)
        printf("resumed from %s at epoch %d (attempt %d)\n", o->checkpoint, (int)at->epoch + 1,
               ddp_restart_count(job->ddp));
    return 0;
}

/* What an epoch draws from: this rank's share of the samples (the distributed sampler)
 * and one batch's buffers. */
typedef struct {
    int n, steps; /* samples used; full batches a rank and epoch (as drop_last) */
    ddp_sampler_options_t so;
    size_t per_rank, *indices;
    float *x;
    uint8_t *labels;
} batches_t;

static void batches_free(batches_t *b)
{
    free(b->indices);
    free(b->x);
    free(b->labels);
}

/* 0, or the exit status (said). */
static int batches_init(batches_t *b, const job_t *job, const options_t *o,
                        const fm_dataset_t *train)
{
    b->n = o->limit_train > 0 && o->limit_train < train->count ? o->limit_train : train->count;
    b->so = (ddp_sampler_options_t){.shuffle = true, .drop_last = true, .seed = o->seed};
    b->per_rank = ddp_sampler_count(job->ddp, (size_t)b->n, &b->so);
    b->indices = malloc((b->per_rank + 1) * sizeof *b->indices);
    b->x = malloc((size_t)o->batch * 784 * sizeof *b->x);
    b->labels = malloc((size_t)o->batch);
    if (b->indices == NULL || b->x == NULL || b->labels == NULL) {
        fprintf(stderr, "fashion-mnist: out of memory for a batch of %d\n", o->batch);
        return 1;
    }
    b->steps = (int)(b->per_rank / (size_t)o->batch);
    if (b->steps == 0) {
        fprintf(stderr, "fashion-mnist: %d samples on %d ranks make no batch of %d\n", b->n,
                job->world, o->batch);
        return 2;
    }
    if (job->rank == 0)
        printf("training %s on %d samples, %d worker(s) x batch %d, %d steps per epoch, on %s\n",
               o->arch == FM_CNN ? "FashionCNN" : "MLP", b->n, job->world, o->batch, b->steps,
               o->cuda ? "GPUs (cuDNN, NCCL)" : "CPUs (OpenBLAS)");
    return 0;
}

/* One step on batch `step` of the epoch: forward, backward with the gradients averaged
 * as they are ready, the optimizer. Its loss, or -1 (said); *exposed grows by the wait
 * for the last buckets that the backward pass did not hide. */
static double train_step(job_t *job, const options_t *o, fm_model_t *m, const batches_t *b,
                         const fm_dataset_t *train, int epoch, int step, double *exposed)
{
    for (int k = 0; k < o->batch; k++) {
        size_t i = b->indices[(size_t)step * o->batch + k];
        fm_dataset_image(train, (int)i, b->x + (size_t)k * 784);
        b->labels[k] = train->labels[i];
    }
    double loss = forward(job, m, b->x, b->labels, o->batch, true, NULL);
    if (loss >= 0 && job->gpu != NULL)
        gpu_check(job, "backward", fm_gpu_backward(job->gpu, b->labels, grad_ready, job));
    else if (loss >= 0 && fm_model_backward(m, b->labels, grad_ready, job) != 0)
        loss = -1;
    if (loss < 0) {
        fprintf(stderr, "fashion-mnist: rank %d: batch norm's all_reduce failed: %s\n", job->rank,
                ddp_last_error(job->syncbn));
        return -1;
    }
    if (job->optim.zero == NULL) {
        check(job, job->ddp, "reducer_wait", ddp_reducer_wait(job->reducer));
        ddp_reducer_timing_t t;
        ddp_reducer_timing(job->reducer, &t);
        *exposed += t.comm_end > t.last_ready ? t.comm_end - t.last_ready : 0;
    }
    float lr = fm_lr(o->lr, o->cosine, epoch, o->epochs, step, b->steps);
    if (job->gpu != NULL)
        gpu_check(job, "sgd", fm_gpu_sgd(job->gpu, lr, o->momentum));
    else
        optim_step(job, o, m, lr);
    return loss;
}

/* Every --log-every steps: the loss of every rank, averaged, and the job's rate. */
static void log_progress(job_t *job, const options_t *o, int epoch, int step, int steps,
                         double loss_sum, int loss_steps, double started)
{
    double mean[2] = {loss_sum, (double)loss_steps};
    check(job, job->host, "all_reduce", ddp_all_reduce(job->host, mean, 2, DDP_FLOAT64, DDP_SUM));
    double elapsed = now() - started;
    double rate = (double)(step + 1) * o->batch * job->world / elapsed;
    double eta = (double)(steps - step - 1) * o->batch * job->world / rate;
    if (job->rank == 0)
        printf("epoch %d/%d step %d/%d loss %.4f samples/s %.0f eta %d:%02d\n", epoch + 1,
               o->epochs, step + 1, steps, mean[0] / mean[1], rate, (int)eta / 60, (int)eta % 60);
}

/* One epoch (from at->step, where a run resumed within it), then its checkpoint; at
 * moves on. 0, or the exit status; *stop once --max-steps are done. */
static int train_epoch(job_t *job, const options_t *o, fm_model_t *m, const batches_t *b,
                       const fm_dataset_t *train, position_t *at, bool *stop)
{
    int epoch = (int)at->epoch;
    m->rng = at->step > 0 ? at->rng : dropout_generator(o->seed, job->rank, epoch);
    check(job, job->ddp, "sampler",
          ddp_sampler_indices(job->ddp, (size_t)b->n, &b->so, (uint64_t)epoch, b->indices,
                              b->per_rank));
    double started = now(), loss_sum = 0, exposed = 0;
    int loss_steps = 0, epoch_steps = 0;
    for (int step = (int)at->step; step < b->steps && !*stop; step++) {
        double loss = train_step(job, o, m, b, train, epoch, step, &exposed);
        if (loss < 0)
            return 1;
        loss_sum += loss;
        loss_steps++;
        epoch_steps++;
        if ((step + 1) % o->log_every == 0 || step + 1 == b->steps) {
            log_progress(job, o, epoch, step, b->steps, loss_sum, loss_steps, started);
            loss_sum = 0;
            loss_steps = 0;
        }
        at->total_steps++;
        *stop = o->max_steps > 0 && at->total_steps >= o->max_steps;
        /* The step after this one, as a resumed run takes it (the last of an epoch: the
         * next epoch's first, whose generator is the epoch's). */
        if (o->checkpoint_every && at->total_steps % o->checkpoint_every == 0 && !*stop)
            save_memory(job, o, m,
                        step + 1 < b->steps
                            ? (position_t){epoch, step + 1, at->total_steps, m->rng, 0}
                            : (position_t){epoch + 1, 0, at->total_steps, 0, 0});
    }
    at->epoch = epoch + 1;
    at->step = 0;
    double took = now() - started;
    if (job->rank == 0)
        printf("epoch %d/%d done in %.1f s: %.0f samples/s; %.1f ms a step, %.1f ms of it "
               "waiting for the all-reduce\n",
               epoch + 1, o->epochs, took, (double)epoch_steps * o->batch * job->world / took,
               1e3 * took / epoch_steps, 1e3 * exposed / epoch_steps);
    if (o->checkpoint != NULL && !*stop) {
        pull(job);
        check(job, job->ddp, "checkpoint_save_file", save_checkpoint(job, o, m, epoch + 1));
    }
    return 0;
}

/* The test set's accuracy (and with --dump-params the parameters), said by rank 0. 0, or
 * the exit status. */
static int report(job_t *job, const options_t *o, fm_model_t *m, const fm_dataset_t *test)
{
    double evaluated = now();
    double accuracy = evaluate(job, m, test, o->limit_test, o->batch);
    if (job->rank != 0)
        return 0;
    int tests = o->limit_test > 0 && o->limit_test < test->count ? o->limit_test : test->count;
    printf("inference: %.0f samples/s\n", tests / (now() - evaluated));
    printf("test accuracy %.2f%%\n", 100 * accuracy);
    if (o->dump != NULL) {
        pull(job);
        if (fm_model_dump(m, o->dump) != 0) {
            fprintf(stderr, "fashion-mnist: unable to write %s\n", o->dump);
            return 1;
        }
    }
    return 0;
}

static void job_free(job_t *job, fm_model_t *m)
{
    ddp_reducer_free(job->reducer);
    optim_free(job, m);
    fm_gpu_free(job->gpu);
    ddp_finalize(job->syncbn);
    if (job->host != job->ddp)
        ddp_finalize(job->host);
    ddp_finalize(job->ddp);
    fm_model_free(m);
}

int main(int argc, char **argv)
{
    options_t o;
    job_t job = {0};
    fm_dataset_t train, test;
    fm_model_t m;
    batches_t b = {0};
    char why[8192];
    /* Each line as it is printed: a pipe to the launcher would otherwise hold the first
     * ones until a buffer fills. */
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (parse_args(argc, argv, &o) != 0)
        return 2;
    init_contexts(&job, &o);
    if (fm_dataset_load(o.data, 1, &train, why, sizeof why) != 0 ||
        fm_dataset_load(o.data, 0, &test, why, sizeof why) != 0) {
        fprintf(stderr,
                "fashion-mnist: %s\n(install Debian's dataset-fashion-mnist, or give --data DIR "
                "with the four IDX files of FashionMNIST or MNIST)\n",
                why);
        return 1;
    }
    if (o.replicas > 0) {
        int status = run_dp(&job, &o, &train, &test);
        fm_dataset_free(&train);
        fm_dataset_free(&test);
        ddp_finalize(job.ddp);
        return status;
    }
    position_t at;
    if (setup_model(&job, &o, &m, &at) < 0)
        return 1;
    int status = batches_init(&b, &job, &o, &train);
    bool stop = false;
    while (at.epoch < o.epochs && !stop && status == 0)
        status = train_epoch(&job, &o, &m, &b, &train, &at, &stop);
    if (status == 0)
        status = report(&job, &o, &m, &test);
    /* A failed step may leave the reducer's thread in a collective with a gone rank: the
     * exit ends it, not a wait for the timeout. */
    if (status != 0)
        return status;
    job_free(&job, &m);
    fm_dataset_free(&train);
    fm_dataset_free(&test);
    batches_free(&b);
    return status;
}
