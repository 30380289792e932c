/* --parallel dp: PyTorch's DataParallel pattern, beside DDP for the course's question.
 *
 * One process, one model replica per thread. Each step the main thread copies the
 * master parameters into every replica (DataParallel's replicate), gives each replica
 * its slice of the batch (scatter), the replicas run forward and backward at once, and
 * the main thread sums their gradients, each weighed by its slice's share of the batch
 * (each replica's loss is its slice's mean, the whole batch's mean is what DataParallel
 * differentiates), then takes the SGD step on the master. Batch norm normalizes each
 * slice with its own statistics; replica 0's running statistics are kept, as
 * DataParallel keeps device 0's buffers. Inference scatters the same way. */
#include "dp.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    fm_model_t model;
    const float *x;
    const uint8_t *labels;
    int batch;
    bool train;
    double loss;
    int correct, err;
    pthread_t thread;
} replica_t;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void *run_replica(void *arg)
{
    replica_t *r = arg;
    r->loss = fm_model_forward(&r->model, r->x, r->labels, r->batch, r->train, &r->correct);
    r->err = r->train ? fm_model_backward(&r->model, r->labels, NULL, NULL) : 0;
    return NULL;
}

/* One step over `batch` images: replicate, scatter, run the replicas in parallel (the
 * last on this thread), and gather. Returns the batch's mean loss; *correct counts. */
static double parallel_apply(fm_model_t *master, replica_t *reps, int n, const float *x,
                             const uint8_t *labels, int batch, bool train, int *correct)
{
    int started = 0, at = 0;
    for (int i = 0; i < n; i++) {
        replica_t *r = &reps[i];
        memcpy(r->model.values, master->values, master->nvalues * sizeof(float));
        memcpy(r->model.buffers, master->buffers, master->nbuffers * sizeof(float));
        r->batch = batch / n + (i < batch % n);
        r->x = x + (size_t)at * 784;
        r->labels = labels + at;
        r->train = train;
        at += r->batch;
    }
    for (int i = 0; i < n - 1; i++)
        if (reps[i].batch > 0 && pthread_create(&reps[i].thread, NULL, run_replica, &reps[i]) == 0)
            started = i + 1;
        else
            run_replica(&reps[i]); /* no thread: here, in turn */
    if (reps[n - 1].batch > 0)
        run_replica(&reps[n - 1]);
    for (int i = 0; i < started; i++)
        if (reps[i].batch > 0)
            pthread_join(reps[i].thread, NULL);
    double loss = 0;
    *correct = 0;
    for (int i = 0; i < n; i++) {
        double share = (double)reps[i].batch / batch;
        loss += reps[i].batch > 0 ? reps[i].loss * share : 0;
        *correct += reps[i].batch > 0 ? reps[i].correct : 0;
    }
    if (!train)
        return loss;
    /* Gather: the gradients summed on the main thread, weighed by slice. */
    memset(master->grads, 0, master->nvalues * sizeof(float));
    for (int i = 0; i < n; i++) {
        if (reps[i].batch == 0)
            continue;
        float share = (float)reps[i].batch / (float)batch;
        const float *g = reps[i].model.grads;
        for (size_t k = 0; k < master->nvalues; k++)
            master->grads[k] += share * g[k];
    }
    memcpy(master->buffers, reps[0].model.buffers, master->nbuffers * sizeof(float));
    return loss;
}

int fm_dp_train(const fm_dp_options_t *o, const fm_dataset_t *train, const fm_dataset_t *test,
                ddp_t *ddp)
{
    int n = o->replicas, batch = o->batch * n; /* each replica's slice: --batch-size */
    fm_model_t master;
    replica_t *reps = calloc((size_t)n, sizeof *reps);
    if (reps == NULL || fm_model_init(&master, o->arch, batch, o->seed) != 0)
        return fprintf(stderr, "fashion-mnist: out of memory for the model\n"), 1;
    for (int i = 0; i < n; i++) {
        if (fm_model_init(&reps[i].model, o->arch, o->batch + 1, o->seed) != 0)
            return fprintf(stderr, "fashion-mnist: out of memory for replica %d\n", i), 1;
        reps[i].model.dropout = o->dropout ? reps[i].model.dropout : 0;
        reps[i].model.rng = o->seed * 1000003u + (uint64_t)i + 1;
    }
    int count = o->limit_train > 0 && o->limit_train < train->count ? o->limit_train : train->count;
    ddp_sampler_options_t so = {.shuffle = true, .drop_last = true, .seed = o->seed};
    size_t *indices = malloc(((size_t)count + 1) * sizeof *indices);
    float *x = malloc((size_t)batch * 784 * sizeof *x);
    uint8_t *labels = malloc((size_t)batch);
    int steps = count / batch, total = 0;
    if (indices == NULL || x == NULL || labels == NULL || steps == 0)
        return fprintf(stderr, "fashion-mnist: %d samples make no batch of %d\n", count, batch), 2;
    printf("training %s on %d samples, DataParallel: %d replica thread(s) x batch %d, %d steps "
           "per epoch, on CPUs (OpenBLAS)\n",
           o->arch == FM_CNN ? "FashionCNN" : "MLP", count, n, o->batch, steps);
    for (int epoch = 0; epoch < o->epochs && (o->max_steps == 0 || total < o->max_steps); epoch++) {
        if (ddp_sampler_indices(ddp, (size_t)count, &so, (uint64_t)epoch, indices, (size_t)count) !=
            0)
            return fprintf(stderr, "fashion-mnist: sampler: %s\n", ddp_last_error(ddp)), 1;
        double started = now(), loss_sum = 0;
        int done = 0;
        for (int step = 0; step < steps && (o->max_steps == 0 || total < o->max_steps); step++) {
            for (int b = 0; b < batch; b++) {
                size_t i = indices[(size_t)step * batch + b];
                fm_dataset_image(train, (int)i, x + (size_t)b * 784);
                labels[b] = train->labels[i];
            }
            int right;
            loss_sum += parallel_apply(&master, reps, n, x, labels, batch, true, &right);
            fm_model_sgd(&master, fm_lr(o->lr, o->cosine, epoch, o->epochs, step, steps),
                         o->momentum);
            done++;
            total++;
            if ((step + 1) % o->log_every == 0)
                printf("epoch %d/%d step %d/%d loss %.4f samples/s %.0f\n", epoch + 1, o->epochs,
                       step + 1, steps, loss_sum / done, (double)done * batch / (now() - started));
        }
        double took = now() - started;
        printf("epoch %d/%d done in %.1f s: %.0f samples/s; %.1f ms a step\n", epoch + 1, o->epochs,
               took, (double)done * batch / took, 1e3 * took / done);
    }
    /* Inference: the test set in batches scattered over the replicas. */
    int tests = o->limit_test > 0 && o->limit_test < test->count ? o->limit_test : test->count;
    int right_all = 0;
    double started = now();
    for (int start = 0; start < tests; start += batch) {
        int b = tests - start < batch ? tests - start : batch, right;
        for (int k = 0; k < b; k++) {
            fm_dataset_image(test, start + k, x + (size_t)k * 784);
            labels[k] = test->labels[start + k];
        }
        parallel_apply(&master, reps, n, x, labels, b, false, &right);
        right_all += right;
    }
    printf("inference: %.0f samples/s\n", tests / (now() - started));
    printf("test accuracy %.2f%%\n", 100.0 * right_all / tests);
    int status = 0;
    if (o->dump != NULL && fm_model_dump(&master, o->dump) != 0) {
        fprintf(stderr, "fashion-mnist: unable to write %s\n", o->dump);
        status = 1;
    }
    for (int i = 0; i < n; i++)
        fm_model_free(&reps[i].model);
    fm_model_free(&master);
    free(reps);
    free(indices);
    free(x);
    free(labels);
    return status;
}
