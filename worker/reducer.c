/* The gradient reducer: registered gradient buffers packed into buckets, each bucket
 * all-reduced (averaged) as soon as its last gradient is marked ready, on a
 * communication thread, while the caller computes the rest of the backward pass.
 *
 * As in PyTorch's DDP, buckets are formed in reverse order of registration (gradients
 * become ready from the last layer back), the first capped at 1 MiB so communication
 * starts early, the others at 25 MiB, one dtype per bucket. Buckets are launched
 * strictly in order, so every rank runs the same collectives in the same order even if
 * its gradients become ready in another. The communication thread owns the context
 * from the first ready() of an iteration until wait() returns; the mutex guards the
 * iteration's bookkeeping, never a collective. Alone (world size 1) the average is the
 * gradient itself: no thread, no bucket memory, no copy, fence or collective; wait()
 * only checks the marks and records each bucket in the flight recorder (progress). */
#include "internal.h"

#include "error.h"
#include "io.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_BUCKET_BYTES       ((size_t)25 << 20)
#define DEFAULT_FIRST_BUCKET_BYTES ((size_t)1 << 20)

typedef struct {
    void *buf;
    size_t count;
    ddp_dtype_t dtype;
    int bucket;
    size_t offset; /* bytes into the bucket */
    bool ready;
} grad_t;

typedef struct {
    ddp_dtype_t dtype;
    size_t count;
    void *flat; /* the backend's memory, or the gradients' own when in_place */
    bool in_place;
    uint16_t *wire; /* compression: the bucket in half precision (host memory), or NULL */
    int *members;   /* ascending: the bucket's layout is in registration order */
    int nmembers;
    int pending; /* members not yet ready in this iteration */
} bucket_t;

struct ddp_reducer_s {
    ddp_t *ddp;
    size_t bucket_bytes, first_bucket_bytes;
    ddp_dtype_t compress; /* DDP_FLOAT16 or DDP_BFLOAT16; DDP_FLOAT32: none */
    bool sync;            /* false: iterations accumulate (no_sync) */
    bool alone;           /* world size 1: nothing to communicate */
    grad_t *grads;
    int ngrads, grads_cap;
    bucket_t *buckets;
    int nbuckets;
    bool frozen;
    const ddp_backend_t *be; /* the backend of the gradients' memory, once frozen */
    void *be_state;

    pthread_t thread;
    bool thread_started;
    pthread_mutex_t mutex;
    pthread_cond_t changed;
    bool stop;
    bool active; /* an iteration has begun (a gradient is ready) */
    int next;    /* the next bucket to launch */
    int err;     /* the first failure of this iteration */
    ddp_reducer_timing_t now, last;
};

int ddp_reducer_new(ddp_t *ddp, const ddp_reducer_options_t *options, ddp_reducer_t **out)
{
    DDP_NEED_CONTEXT(ddp, "ddp_reducer_new");
    if (out == NULL)
        return ddp_fail(ddp, DDP_EUSAGE, "reducer: out is NULL");
    ddp_reducer_t *r = calloc(1, sizeof *r);
    if (r == NULL)
        return ddp_fail(ddp, -ENOMEM, "reducer: out of memory");
    r->ddp = ddp;
    r->alone = ddp->world_size == 1;
    r->bucket_bytes =
        options && options->bucket_bytes ? options->bucket_bytes : DEFAULT_BUCKET_BYTES;
    r->first_bucket_bytes = options && options->first_bucket_bytes ? options->first_bucket_bytes
                                                                   : DEFAULT_FIRST_BUCKET_BYTES;
    r->sync = true;
    switch (options ? options->compress : DDP_COMPRESS_NONE) {
    case DDP_COMPRESS_NONE:
        r->compress = DDP_FLOAT32;
        break;
    case DDP_COMPRESS_FLOAT16:
        r->compress = DDP_FLOAT16;
        break;
    case DDP_COMPRESS_BFLOAT16:
        r->compress = DDP_BFLOAT16;
        break;
    default:
        free(r);
        return ddp_fail(ddp, DDP_EUSAGE,
                        "reducer: compress %d is not DDP_COMPRESS_NONE, DDP_COMPRESS_FLOAT16 or "
                        "DDP_COMPRESS_BFLOAT16",
                        (int)options->compress);
    }
    pthread_mutex_init(&r->mutex, NULL);
    pthread_cond_init(&r->changed, NULL);
    *out = r;
    return 0;
}

/* A reducer entry point given NULL returns this. */
#define NEED_REDUCER(r, what)                             \
    do {                                                  \
        if ((r) == NULL)                                  \
            return ddp_refuse_object(what, "reducer", r); \
    } while (0)

int ddp_reducer_add(ddp_reducer_t *r, void *grad, size_t count, ddp_dtype_t dtype)
{
    NEED_REDUCER(r, "ddp_reducer_add");
    ddp_t *ddp = r->ddp;
    if (r->frozen)
        return ddp_fail(ddp, DDP_EUSAGE,
                        "reducer: add after the first ready(): register every "
                        "gradient before the first backward pass");
    if (ddp_dtype_size(dtype) == 0)
        return ddp_fail(ddp, DDP_EUSAGE, "reducer: unknown dtype %d", (int)dtype);
    if (grad == NULL && count > 0)
        return ddp_fail(ddp, DDP_EUSAGE, "reducer: gradient %d is NULL", r->ngrads);
    if (r->ngrads == r->grads_cap) {
        int cap = r->grads_cap ? 2 * r->grads_cap : 16;
        grad_t *grads = realloc(r->grads, (size_t)cap * sizeof *grads);
        if (grads == NULL)
            return ddp_fail(ddp, -ENOMEM, "reducer: out of memory");
        r->grads = grads;
        r->grads_cap = cap;
    }
    r->grads[r->ngrads] = (grad_t){grad, count, dtype, -1, 0, false};
    return r->ngrads++;
}

/* Packs the gradients, last registered first, into buckets of one dtype each. */
/* The backend every bucket goes through: the gradients are all host or all device
 * memory (the auto backend tells which); compression takes host gradients. */
static int choose_backend(ddp_reducer_t *r)
{
    ddp_t *ddp = r->ddp;
    for (int g = 0; g < r->ngrads; g++) {
        const ddp_backend_t *be;
        void *state;
        int err = ddp_backend_for(ddp, r->grads[g].buf, &be, &state);
        if (err)
            return err;
        if (g == 0) {
            r->be = be;
            r->be_state = state;
        } else if (be != r->be) {
            return ddp_fail(ddp, DDP_EUSAGE,
                            "reducer: gradients 0 and %d are not both host or both device memory",
                            g);
        }
    }
    if (r->compress != DDP_FLOAT32 && r->be != &ddp_cpu_backend)
        return ddp_fail(ddp, DDP_EUSAGE,
                        "reducer: compression takes host gradients (the CPU backend); on the GPU "
                        "it would need a conversion kernel, which libddp has not");
    return 0;
}

/* A bucket's members (added last first) laid out first to last, as their addresses run
 * when the gradients are one block. Then the bucket is that memory itself, averaged in
 * place without a copy (PyTorch's gradient_as_bucket_view); else it gets its own flat
 * buffer (not for a rank alone, which never copies). Either way the elements are in the
 * same order, so ranks that differ agree. */
static int lay_out(ddp_reducer_t *r, bucket_t *bucket)
{
    size_t es = ddp_dtype_size(bucket->dtype), offset = 0;
    bucket->pending = bucket->nmembers;
    for (int i = 0, j = bucket->nmembers - 1; i < j; i++, j--) {
        int t = bucket->members[i];
        bucket->members[i] = bucket->members[j];
        bucket->members[j] = t;
    }
    bucket->in_place = true;
    for (int i = 0; i < bucket->nmembers; i++) {
        grad_t *g = &r->grads[bucket->members[i]];
        g->offset = offset;
        if ((char *)r->grads[bucket->members[0]].buf + offset != (char *)g->buf)
            bucket->in_place = false;
        offset += g->count * es;
    }
    if (bucket->in_place) {
        bucket->flat = r->grads[bucket->members[0]].buf;
        return 0;
    }
    if (r->alone)
        return 0;
    return r->be->alloc(r->ddp, r->be_state, bucket->count * es + 8, &bucket->flat);
}

static int form_buckets(ddp_reducer_t *r)
{
    ddp_t *ddp = r->ddp;
    int err = choose_backend(r);
    if (err)
        return err;
    r->buckets = calloc((size_t)r->ngrads + 1, sizeof *r->buckets);
    if (r->buckets == NULL)
        return ddp_fail(ddp, -ENOMEM, "reducer: out of memory");
    /* One open bucket per dtype, as PyTorch keeps one per (dtype, device). */
    int open[DDP_BFLOAT16 + 1];
    for (int t = 0; t <= DDP_BFLOAT16; t++)
        open[t] = -1;
    for (int g = r->ngrads - 1; g >= 0; g--) {
        grad_t *grad = &r->grads[g];
        size_t es = ddp_dtype_size(grad->dtype);
        int b = open[grad->dtype];
        if (b < 0) {
            b = open[grad->dtype] = r->nbuckets++;
            r->buckets[b].dtype = grad->dtype;
            r->buckets[b].members = calloc((size_t)r->ngrads, sizeof(int));
            if (r->buckets[b].members == NULL)
                return ddp_fail(ddp, -ENOMEM, "reducer: out of memory");
        }
        bucket_t *bucket = &r->buckets[b];
        grad->bucket = b;
        bucket->count += grad->count;
        bucket->members[bucket->nmembers++] = g;
        size_t limit = b == 0 ? r->first_bucket_bytes : r->bucket_bytes;
        if (bucket->count * es >= limit)
            open[grad->dtype] = -1; /* full: the next gradient of this type opens one */
    }
    for (int b = 0; b < r->nbuckets && err == 0; b++)
        err = lay_out(r, &r->buckets[b]);
    return err;
}

/* The bucket's average across the ranks, in place: compressed, its half copy is what
 * travels (and halves are what the ranks average), widened back after. */
static int average(ddp_reducer_t *r, bucket_t *bucket)
{
    ddp_t *ddp = r->ddp;
    if (bucket->wire == NULL)
        return ddp_all_reduce(ddp, bucket->flat, bucket->count, bucket->dtype, DDP_AVG);
    ddp_half_narrow(bucket->flat, bucket->wire, bucket->count, r->compress);
    ddp->half_wire = true;
    int err = ddp_all_reduce(ddp, bucket->wire, bucket->count, r->compress, DDP_AVG);
    ddp->half_wire = false;
    if (err == 0)
        ddp_half_widen(bucket->wire, bucket->flat, bucket->count, r->compress);
    return err;
}

/* Copies the bucket's gradients in, averages it across the ranks, copies them back (no
 * copies for a bucket in place). */
static int reduce_bucket(ddp_reducer_t *r, bucket_t *bucket)
{
    ddp_t *ddp = r->ddp;
    const ddp_backend_t *be = r->be;
    size_t es = ddp_dtype_size(bucket->dtype);
    int err = 0;
    if (bucket->in_place)
        return average(r, bucket);
    for (int i = 0; i < bucket->nmembers && err == 0; i++) {
        grad_t *g = &r->grads[bucket->members[i]];
        err = be->copy(ddp, r->be_state, (char *)bucket->flat + g->offset, g->buf, g->count * es);
    }
    if (err == 0)
        err = average(r, bucket);
    for (int i = 0; i < bucket->nmembers && err == 0; i++) {
        grad_t *g = &r->grads[bucket->members[i]];
        err = be->copy(ddp, r->be_state, g->buf, (char *)bucket->flat + g->offset, g->count * es);
    }
    if (err == 0 && be->flush != NULL)
        err = be->flush(ddp, r->be_state);
    return err;
}

static void *communicate(void *arg)
{
    ddp_reducer_t *r = arg;
    pthread_mutex_lock(&r->mutex);
    for (;;) {
        while (!r->stop &&
               !(r->active && r->next < r->nbuckets && r->buckets[r->next].pending == 0))
            pthread_cond_wait(&r->changed, &r->mutex);
        if (r->stop)
            break;
        bucket_t *bucket = &r->buckets[r->next];
        if (r->now.first_comm_start == 0)
            r->now.first_comm_start = ddp_clock_mono();
        pthread_mutex_unlock(&r->mutex);
        int err = reduce_bucket(r, bucket);
        pthread_mutex_lock(&r->mutex);
        if (err) {
            r->err = err;
            r->next = r->nbuckets; /* the rest would fail too: the context is broken */
        } else {
            r->next++;
        }
        if (r->next == r->nbuckets)
            r->now.comm_end = ddp_clock_mono();
        pthread_cond_broadcast(&r->changed);
    }
    pthread_mutex_unlock(&r->mutex);
    return NULL;
}

/* Compression: each float32 bucket gets its half-precision copy, the one that travels. */
static int compress_buckets(ddp_reducer_t *r)
{
    for (int b = 0; r->compress != DDP_FLOAT32 && b < r->nbuckets; b++) {
        bucket_t *bucket = &r->buckets[b];
        if (bucket->dtype == DDP_FLOAT32 && (bucket->wire = malloc(bucket->count * 2 + 2)) == NULL)
            return ddp_fail(r->ddp, -ENOMEM, "reducer: out of memory");
    }
    return 0;
}

static int freeze(ddp_reducer_t *r)
{
    ddp_t *ddp = r->ddp;
    int err = form_buckets(r);
    if (err == 0 && !r->alone)
        err = compress_buckets(r);
    if (err)
        return err;
    if (r->alone) {
        r->frozen = true;
        return 0;
    }
    if ((err = pthread_create(&r->thread, NULL, communicate, r)) != 0)
        return ddp_fail(ddp, -err, "reducer: unable to start the communication thread: %s",
                        strerror(err));
    /* Its name in top -H, gdb and perf. */
    (void)pthread_setname_np(r->thread, "ddp-reducer");
    r->thread_started = true;
    r->frozen = true;
    return 0;
}

int ddp_reducer_ready(ddp_reducer_t *r, int index)
{
    NEED_REDUCER(r, "ddp_reducer_ready");
    ddp_t *ddp = r->ddp;
    int err;
    if (index < 0 || index >= r->ngrads)
        return ddp_fail(ddp, DDP_EUSAGE, "reducer: ready(%d): there are %d gradients", index,
                        r->ngrads);
    if (!r->frozen && (err = freeze(r)) != 0)
        return err;
    /* With the NCCL backend, the bucket's copies wait for the work queued so far. */
    if (!r->alone && r->be->fence != NULL && (err = r->be->fence(ddp, r->be_state)) != 0)
        return err;
    pthread_mutex_lock(&r->mutex);
    grad_t *g = &r->grads[index];
    if (g->ready) {
        pthread_mutex_unlock(&r->mutex);
        return ddp_fail(ddp, DDP_EUSAGE,
                        "reducer: gradient %d was marked ready twice in one iteration", index);
    }
    double t = ddp_clock_mono();
    if (!r->active) {
        r->active = true;
        r->now.first_ready = t;
    }
    r->now.last_ready = t;
    g->ready = true;
    /* Accumulating (no_sync): nothing to send. */
    if (r->sync && !r->alone && --r->buckets[g->bucket].pending == 0)
        pthread_cond_broadcast(&r->changed);
    pthread_mutex_unlock(&r->mutex);
    return 0;
}

int ddp_reducer_wait(ddp_reducer_t *r)
{
    NEED_REDUCER(r, "ddp_reducer_wait");
    ddp_t *ddp = r->ddp;
    int64_t waited_from = ddp_progress_now();
    char missing[160] = "";
    int nmissing = 0;
    if (!r->frozen)
        return r->ngrads == 0 ? 0
                              : ddp_fail(ddp, DDP_EUSAGE,
                                         "reducer: wait() before any gradient was marked ready");
    pthread_mutex_lock(&r->mutex);
    for (int g = 0; g < r->ngrads; g++) {
        if (!r->grads[g].ready && nmissing++ < 8) {
            size_t len = strlen(missing);
            snprintf(missing + len, sizeof missing - len, "%s%d", len ? ", " : "", g);
        }
    }
    if (nmissing > 0) {
        pthread_mutex_unlock(&r->mutex);
        return ddp_fail(
            ddp, DDP_EUSAGE,
            "reducer: wait(): %d gradient(s) not marked ready in this iteration (%s%s); "
            "every rank must mark every gradient ready",
            nmissing, missing, nmissing > 8 ? ", ..." : "");
    }
    while (r->sync && !r->alone && r->next < r->nbuckets)
        pthread_cond_wait(&r->changed, &r->mutex);
    for (int b = 0; r->sync && r->alone && b < r->nbuckets; b++) {
        /* Each bucket's average, of one rank: done, as the flight recorder says. */
        ddp_flight_enter(ddp, DDP_FLIGHT_ALL_REDUCE, r->buckets[b].count, r->buckets[b].dtype,
                         DDP_AVG, 0);
        ddp_flight_leave(ddp, 0);
    }
    int err = r->err;
    r->last = r->now;
    memset(&r->now, 0, sizeof r->now);
    r->active = false;
    r->next = 0;
    r->err = 0;
    for (int b = 0; b < r->nbuckets; b++)
        r->buckets[b].pending = r->buckets[b].nmembers;
    for (int g = 0; g < r->ngrads; g++)
        r->grads[g].ready = false;
    pthread_mutex_unlock(&r->mutex);
    if (err == 0)
        ddp_progress_step(&ddp->log, ddp_progress_now() - waited_from);
    return err;
}

int ddp_reducer_set_sync(ddp_reducer_t *r, bool sync)
{
    NEED_REDUCER(r, "ddp_reducer_set_sync");
    pthread_mutex_lock(&r->mutex);
    bool during = r->active;
    if (!during)
        r->sync = sync;
    pthread_mutex_unlock(&r->mutex);
    if (during)
        return ddp_fail(r->ddp, DDP_EUSAGE,
                        "reducer: set_sync during an iteration (between wait() and the next "
                        "ready() only)");
    return 0;
}

int ddp_reducer_buckets(const ddp_reducer_t *r)
{
    NEED_REDUCER(r, "ddp_reducer_buckets");
    return r->nbuckets;
}

void ddp_reducer_timing(const ddp_reducer_t *r, ddp_reducer_timing_t *out)
{
    if (out == NULL)
        return;
    if (r == NULL)
        ddp_refuse_object("ddp_reducer_timing", "reducer", r);
    *out = r != NULL ? r->last : (ddp_reducer_timing_t){0};
}

void ddp_reducer_free(ddp_reducer_t *r)
{
    if (r == NULL)
        return;
    if (r->thread_started) {
        /* An iteration in flight finishes first: its collectives are the peers' too. */
        pthread_mutex_lock(&r->mutex);
        while (r->active && r->next < r->nbuckets && r->buckets[r->next].pending == 0)
            pthread_cond_wait(&r->changed, &r->mutex);
        r->stop = true;
        pthread_cond_broadcast(&r->changed);
        pthread_mutex_unlock(&r->mutex);
        pthread_join(r->thread, NULL);
    }
    for (int b = 0; b < r->nbuckets; b++) {
        if (r->buckets[b].flat != NULL && !r->buckets[b].in_place)
            r->be->release(r->be_state, r->buckets[b].flat);
        free(r->buckets[b].members);
        free(r->buckets[b].wire);
    }
    free(r->buckets);
    free(r->grads);
    pthread_mutex_destroy(&r->mutex);
    pthread_cond_destroy(&r->changed);
    free(r);
}
