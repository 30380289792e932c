/* The store's hash table, values, queues and waiters (see store.h). Loop thread only. */
#include "store/store.h"

#include "error.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

typedef struct queue_item_s {
    struct queue_item_s *next;
    size_t len;
    uint8_t data[];
} queue_item_t;

typedef struct entry_s {
    struct entry_s *next; /* in its bucket */
    uint64_t hash;
    uint8_t *key;
    size_t key_len;
    ddp_store_value_t *value;  /* NULL: no value (the entry holds a queue or waiters) */
    ddp_store_link_t *waiters; /* links of the waiters awaiting this key */
    queue_item_t *queue_head, *queue_tail;
    int64_t queue_len;
} entry_t;

/* One waiter awaiting one key: in the key's doubly linked list of waiters. */
struct ddp_store_link_s {
    ddp_store_waiter_t *waiter;
    entry_t *entry; /* NULL once the key has come */
    ddp_store_link_t *prev, *next;
};

struct ddp_store_s {
    entry_t **buckets;
    size_t nbuckets; /* a power of two */
    size_t nentries;
    int64_t nvalues;
    uint64_t k0, k1; /* the SipHash key */
};

/* SipHash-2-4 (Aumasson and Bernstein), keyed with random bytes at start-up. */
#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND           \
    do {                   \
        v0 += v1;          \
        v1 = ROTL(v1, 13); \
        v1 ^= v0;          \
        v0 = ROTL(v0, 32); \
        v2 += v3;          \
        v3 = ROTL(v3, 16); \
        v3 ^= v2;          \
        v0 += v3;          \
        v3 = ROTL(v3, 21); \
        v3 ^= v0;          \
        v2 += v1;          \
        v1 = ROTL(v1, 17); \
        v1 ^= v2;          \
        v2 = ROTL(v2, 32); \
    } while (0)

static uint64_t siphash(uint64_t k0, uint64_t k1, const uint8_t *in, size_t len)
{
    uint64_t v0 = 0x736f6d6570736575ULL ^ k0, v1 = 0x646f72616e646f6dULL ^ k1;
    uint64_t v2 = 0x6c7967656e657261ULL ^ k0, v3 = 0x7465646279746573ULL ^ k1;
    uint64_t b = (uint64_t)len << 56, m;
    size_t i;
    for (i = 0; i + 8 <= len; i += 8) {
        memcpy(&m, in + i, 8);
        v3 ^= m;
        SIPROUND;
        SIPROUND;
        v0 ^= m;
    }
    for (size_t j = 0; i + j < len; j++)
        b |= (uint64_t)in[i + j] << (8 * j);
    v3 ^= b;
    SIPROUND;
    SIPROUND;
    v0 ^= b;
    v2 ^= 0xff;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    return v0 ^ v1 ^ v2 ^ v3;
}

int ddp_store_new(ddp_store_t **out)
{
    ddp_store_t *s = calloc(1, sizeof *s);
    uint64_t key[2];
    if (s == NULL)
        return -ENOMEM;
    s->nbuckets = 1024;
    s->buckets = calloc(s->nbuckets, sizeof *s->buckets);
    if (s->buckets == NULL) {
        free(s);
        return -ENOMEM;
    }
    if (getrandom(key, sizeof key, 0) != (ssize_t)sizeof key) {
        /* No entropy source: a fixed key still works, it is only predictable. */
        key[0] = 0x0706050403020100ULL;
        key[1] = 0x0f0e0d0c0b0a0908ULL;
    }
    s->k0 = key[0];
    s->k1 = key[1];
    *out = s;
    return 0;
}

static void free_queue(entry_t *e)
{
    while (e->queue_head != NULL) {
        queue_item_t *next = e->queue_head->next;
        free(e->queue_head);
        e->queue_head = next;
    }
    e->queue_tail = NULL;
    e->queue_len = 0;
}

void ddp_store_free(ddp_store_t *store)
{
    if (store == NULL)
        return;
    for (size_t i = 0; i < store->nbuckets; i++) {
        entry_t *e = store->buckets[i];
        while (e != NULL) {
            entry_t *next = e->next;
            /* Waiters are their owners'; only detach them. */
            for (ddp_store_link_t *l = e->waiters; l != NULL; l = l->next)
                l->entry = NULL;
            free_queue(e);
            free(e->key);
            ddp_store_value_unref(e->value);
            free(e);
            e = next;
        }
    }
    free(store->buckets);
    free(store);
}

static entry_t *find(ddp_store_t *s, ddp_store_key_t key, uint64_t hash)
{
    for (entry_t *e = s->buckets[hash & (s->nbuckets - 1)]; e != NULL; e = e->next) {
        if (e->hash == hash && e->key_len == key.len && memcmp(e->key, key.data, key.len) == 0)
            return e;
    }
    return NULL;
}

static entry_t *lookup(ddp_store_t *s, ddp_store_key_t key)
{
    return find(s, key, siphash(s->k0, s->k1, key.data, key.len));
}

static void grow(ddp_store_t *s)
{
    size_t n = s->nbuckets * 2;
    entry_t **buckets = calloc(n, sizeof *buckets);
    if (buckets == NULL)
        return; /* longer chains, still correct */
    for (size_t i = 0; i < s->nbuckets; i++) {
        entry_t *e = s->buckets[i];
        while (e != NULL) {
            entry_t *next = e->next;
            e->next = buckets[e->hash & (n - 1)];
            buckets[e->hash & (n - 1)] = e;
            e = next;
        }
    }
    free(s->buckets);
    s->buckets = buckets;
    s->nbuckets = n;
}

/* The entry of `key`, created empty when missing; NULL when out of memory. */
static entry_t *intern(ddp_store_t *s, ddp_store_key_t key)
{
    uint64_t hash = siphash(s->k0, s->k1, key.data, key.len);
    entry_t *e = find(s, key, hash);
    if (e != NULL)
        return e;
    e = calloc(1, sizeof *e);
    if (e == NULL || (e->key = malloc(key.len ? key.len : 1)) == NULL) {
        free(e);
        return NULL;
    }
    memcpy(e->key, key.data, key.len);
    e->key_len = key.len;
    e->hash = hash;
    e->next = s->buckets[hash & (s->nbuckets - 1)];
    s->buckets[hash & (s->nbuckets - 1)] = e;
    if (++s->nentries > s->nbuckets)
        grow(s);
    return e;
}

/* Drops an entry that holds nothing any more (no value, queue or waiter). */
static void release(ddp_store_t *s, entry_t *e)
{
    if (e->value != NULL || e->queue_head != NULL || e->waiters != NULL)
        return;
    entry_t **slot = &s->buckets[e->hash & (s->nbuckets - 1)];
    while (*slot != e)
        slot = &(*slot)->next;
    *slot = e->next;
    s->nentries--;
    free(e->key);
    free(e);
}

static void unlink_waiter(ddp_store_link_t *l)
{
    if (l->prev != NULL)
        l->prev->next = l->next;
    else if (l->entry != NULL)
        l->entry->waiters = l->next;
    if (l->next != NULL)
        l->next->prev = l->prev;
    l->prev = l->next = NULL;
    l->entry = NULL;
}

/* The key came: every waiter on it counts it; those with nothing left are called. */
static void wake_all(entry_t *e)
{
    ddp_store_link_t *l = e->waiters;
    e->waiters = NULL;
    while (l != NULL) {
        ddp_store_link_t *next = l->next;
        ddp_store_waiter_t *w = l->waiter;
        l->entry = NULL;
        l->prev = l->next = NULL;
        if (w->awaited > 0 && --w->awaited == 0) {
            free(w->links);
            w->links = NULL;
            w->nlinks = 0;
            w->ready(w);
        }
        l = next;
    }
}

void ddp_store_value_ref(ddp_store_value_t *value)
{
    value->refs++;
}

void ddp_store_value_unref(ddp_store_value_t *value)
{
    if (value != NULL && --value->refs == 0)
        free(value);
}

static ddp_store_value_t *new_value(const uint8_t *data, size_t len)
{
    ddp_store_value_t *v = malloc(sizeof *v + len);
    if (v == NULL)
        return NULL;
    v->refs = 1;
    v->len = len;
    if (len)
        memcpy(v->data, data, len);
    return v;
}

static void put_value(ddp_store_t *s, entry_t *e, ddp_store_value_t *v)
{
    if (e->value == NULL)
        s->nvalues++;
    ddp_store_value_unref(e->value);
    e->value = v;
}

static int store_value(ddp_store_t *s, entry_t *e, const uint8_t *value, size_t len)
{
    ddp_store_value_t *v = new_value(value, len);
    if (v == NULL)
        return -ENOMEM;
    put_value(s, e, v);
    return 0;
}

/* Removes the entry's value; true when it had one. */
static bool drop_value(ddp_store_t *s, entry_t *e)
{
    if (e->value == NULL)
        return false;
    ddp_store_value_unref(e->value);
    e->value = NULL;
    s->nvalues--;
    return true;
}

int ddp_store_set(ddp_store_t *store, ddp_store_key_t key, const uint8_t *value, size_t len)
{
    entry_t *e = intern(store, key);
    if (e == NULL)
        return -ENOMEM;
    int err = store_value(store, e, value, len);
    if (err) {
        release(store, e);
        return err;
    }
    wake_all(e);
    return 0;
}

ddp_store_value_t *ddp_store_get_value(ddp_store_t *store, ddp_store_key_t key)
{
    entry_t *e = lookup(store, key);
    return e != NULL ? e->value : NULL;
}

bool ddp_store_get(ddp_store_t *store, ddp_store_key_t key, const uint8_t **value, size_t *len)
{
    ddp_store_value_t *v = ddp_store_get_value(store, key);
    if (v == NULL)
        return false;
    *value = v->data;
    *len = v->len;
    return true;
}

/* std::stoll as PyTorch applies it: leading blanks, a sign, digits; what follows
 * them is ignored; no digit at all is an error. */
static int parse_number(const uint8_t *text, size_t len, int64_t *out)
{
    char buf[64];
    size_t i = 0;
    while (i < len && (text[i] == ' ' || (text[i] >= '\t' && text[i] <= '\r')))
        i++;
    size_t n = 0;
    if (i < len && (text[i] == '-' || text[i] == '+'))
        buf[n++] = (char)text[i++];
    while (i < len && text[i] >= '0' && text[i] <= '9' && n < sizeof buf - 1)
        buf[n++] = (char)text[i++];
    buf[n] = '\0';
    if (n == 0 || (n == 1 && (buf[0] == '-' || buf[0] == '+')))
        return DDP_EPARSE;
    if (i < len && text[i] >= '0' && text[i] <= '9')
        return -ERANGE; /* more digits than any int64 has */
    char *end;
    errno = 0;
    long long v = strtoll(buf, &end, 10);
    if (errno == ERANGE)
        return -ERANGE;
    *out = (int64_t)v;
    return 0;
}

int ddp_store_add(ddp_store_t *store, ddp_store_key_t key, int64_t delta, int64_t *result)
{
    entry_t *e = intern(store, key);
    int64_t current = 0, sum;
    char text[32];
    int err;
    if (e == NULL)
        return -ENOMEM;
    if (e->value && (err = parse_number(e->value->data, e->value->len, &current)) != 0) {
        release(store, e);
        return err;
    }
    if (__builtin_add_overflow(current, delta, &sum)) {
        release(store, e);
        return -ERANGE;
    }
    int n = snprintf(text, sizeof text, "%" PRId64, sum);
    if ((err = store_value(store, e, (const uint8_t *)text, (size_t)n)) != 0) {
        release(store, e);
        return err;
    }
    wake_all(e);
    *result = sum;
    return 0;
}

int ddp_store_compare_set(ddp_store_t *store, ddp_store_key_t key, const uint8_t *expected,
                          size_t expected_len, const uint8_t *desired, size_t desired_len,
                          const uint8_t **answer, size_t *answer_len)
{
    entry_t *e = lookup(store, key);
    if (e == NULL || e->value == NULL) {
        if (expected_len != 0) {
            *answer = expected;
            *answer_len = expected_len;
            return 0;
        }
        int err = ddp_store_set(store, key, desired, desired_len);
        if (err)
            return err;
        *answer = desired;
        *answer_len = desired_len;
        return 0;
    }
    if (e->value->len == expected_len && memcmp(e->value->data, expected, expected_len) == 0) {
        int err = store_value(store, e, desired, desired_len);
        if (err)
            return err;
        wake_all(e);
    }
    *answer = e->value->data;
    *answer_len = e->value->len;
    return 0;
}

int ddp_store_append(ddp_store_t *store, ddp_store_key_t key, const uint8_t *value, size_t len)
{
    entry_t *e = intern(store, key);
    if (e == NULL)
        return -ENOMEM;
    if (e->value == NULL)
        return ddp_store_set(store, key, value, len);
    ddp_store_value_t *v = e->value;
    if (v->refs == 1) {
        /* Nobody else holds it (no reply in flight): grow it in place. */
        ddp_store_value_t *grown = realloc(v, sizeof *v + v->len + len);
        if (grown == NULL)
            return -ENOMEM;
        memcpy(grown->data + grown->len, value, len);
        grown->len += len;
        e->value = grown;
    } else {
        ddp_store_value_t *joined = malloc(sizeof *joined + v->len + len);
        if (joined == NULL)
            return -ENOMEM;
        joined->refs = 1;
        joined->len = v->len + len;
        memcpy(joined->data, v->data, v->len);
        memcpy(joined->data + v->len, value, len);
        put_value(store, e, joined);
    }
    wake_all(e);
    return 0;
}

bool ddp_store_delete(ddp_store_t *store, ddp_store_key_t key)
{
    entry_t *e = lookup(store, key);
    if (e == NULL || !drop_value(store, e))
        return false;
    release(store, e);
    return true;
}

bool ddp_store_exists(ddp_store_t *store, ddp_store_key_t key)
{
    entry_t *e = lookup(store, key);
    return e != NULL && (e->value != NULL || e->queue_len > 0);
}

int64_t ddp_store_num_keys(ddp_store_t *store)
{
    return store->nvalues;
}

int ddp_store_wait(ddp_store_t *store, ddp_store_waiter_t *waiter, const ddp_store_key_t *keys,
                   size_t n)
{
    size_t missing = 0;
    for (size_t i = 0; i < n; i++)
        missing += !ddp_store_exists(store, keys[i]);
    if (missing == 0)
        return 1;
    ddp_store_link_t *links = calloc(missing, sizeof *links);
    if (links == NULL)
        return -ENOMEM;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (ddp_store_exists(store, keys[i]))
            continue;
        entry_t *e = intern(store, keys[i]);
        if (e == NULL) {
            /* Undo the links made so far. */
            for (size_t j = 0; j < k; j++) {
                entry_t *owner = links[j].entry;
                unlink_waiter(&links[j]);
                release(store, owner);
            }
            free(links);
            return -ENOMEM;
        }
        links[k].waiter = waiter;
        links[k].entry = e;
        links[k].next = e->waiters;
        if (e->waiters != NULL)
            e->waiters->prev = &links[k];
        e->waiters = &links[k];
        k++;
    }
    waiter->links = links;
    waiter->nlinks = missing;
    waiter->awaited = missing;
    return 0;
}

void ddp_store_cancel(ddp_store_t *store, ddp_store_waiter_t *waiter)
{
    for (size_t i = 0; i < waiter->nlinks; i++) {
        entry_t *e = waiter->links[i].entry;
        if (e == NULL)
            continue;
        unlink_waiter(&waiter->links[i]);
        release(store, e);
    }
    free(waiter->links);
    waiter->links = NULL;
    waiter->nlinks = 0;
    waiter->awaited = 0;
}

int ddp_store_queue_push(ddp_store_t *store, ddp_store_key_t key, const uint8_t *value, size_t len)
{
    entry_t *e = intern(store, key);
    queue_item_t *item = malloc(sizeof *item + len);
    if (e == NULL || item == NULL) {
        free(item);
        if (e != NULL)
            release(store, e);
        return -ENOMEM;
    }
    memcpy(item->data, value, len);
    item->len = len;
    item->next = NULL;
    if (e->queue_tail != NULL)
        e->queue_tail->next = item;
    else
        e->queue_head = item;
    e->queue_tail = item;
    e->queue_len++;
    /* One item wakes one waiter: the first that awaits this key. */
    ddp_store_link_t *l = e->waiters;
    if (l != NULL) {
        ddp_store_waiter_t *w = l->waiter;
        unlink_waiter(l);
        if (w->awaited > 0 && --w->awaited == 0) {
            ddp_store_cancel(store, w);
            w->ready(w);
        }
    }
    return 0;
}

int ddp_store_queue_pop(ddp_store_t *store, ddp_store_key_t key, int64_t *length, uint8_t **value,
                        size_t *len)
{
    entry_t *e = lookup(store, key);
    *length = e ? e->queue_len : 0;
    if (e == NULL || e->queue_head == NULL)
        return 0;
    queue_item_t *item = e->queue_head;
    uint8_t *copy = malloc(item->len ? item->len : 1);
    if (copy == NULL)
        return -ENOMEM;
    memcpy(copy, item->data, item->len);
    *value = copy;
    *len = item->len;
    e->queue_head = item->next;
    if (e->queue_head == NULL)
        e->queue_tail = NULL;
    e->queue_len--;
    free(item);
    release(store, e);
    return 0;
}

int64_t ddp_store_queue_len(ddp_store_t *store, ddp_store_key_t key)
{
    entry_t *e = lookup(store, key);
    return e ? e->queue_len : 0;
}

size_t ddp_store_clear(ddp_store_t *store, const char *keep_prefix)
{
    size_t keep_len = keep_prefix ? strlen(keep_prefix) : 0, cleared = 0;
    for (size_t i = 0; i < store->nbuckets; i++) {
        entry_t *e = store->buckets[i];
        while (e != NULL) {
            entry_t *next = e->next;
            bool keep = keep_prefix != NULL && e->key_len >= keep_len &&
                        memcmp(e->key, keep_prefix, keep_len) == 0;
            if (!keep) {
                cleared += drop_value(store, e);
                free_queue(e);
                release(store, e);
            }
            e = next;
        }
    }
    return cleared;
}
