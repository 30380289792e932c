/* The rendezvous store's contents and PyTorch's semantics, without any networking.
 *
 * Keys and values are byte strings in a hash table with a random SipHash key (so a
 * client cannot flood one bucket). Waiters (a connection's pending WAIT) hang off the
 * keys they await and are called back when every one of them exists; every write
 * (SET, ADD, COMPARE_SET that writes, APPEND, MULTI_SET) wakes them. Queues live beside
 * values under the same names. Used by store/server.c on the loop thread; not
 * thread-safe. */
#ifndef DDP_LAUNCHER_STORE_STORE_H
#define DDP_LAUNCHER_STORE_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct ddp_store_s ddp_store_t;
typedef struct ddp_store_link_s ddp_store_link_t;

/* A pending WAIT. The owner embeds it and sets `ready`, which the store calls (at
 * most once per wait) when the last awaited key comes into existence. */
typedef struct ddp_store_waiter_s {
    void (*ready)(struct ddp_store_waiter_s *waiter);
    size_t awaited;          /* keys still missing */
    ddp_store_link_t *links; /* one per awaited key, owned by the store */
    size_t nlinks;
} ddp_store_waiter_t;

/* A stored value, shared: a reply can be written from it while the key is overwritten
 * or deleted. Whoever keeps one past the store's next write of the key takes a
 * reference. */
typedef struct ddp_store_value_s {
    unsigned refs;
    size_t len;
    uint8_t data[];
} ddp_store_value_t;

void ddp_store_value_ref(ddp_store_value_t *value);
void ddp_store_value_unref(ddp_store_value_t *value);

typedef struct ddp_store_key_s {
    const uint8_t *data;
    size_t len;
} ddp_store_key_t;

/* Keys under this prefix belong to the launcher and outlive attempts and rounds (PyTorch's
 * clients put "/" before every user key, so none of theirs starts so). */
#define DDP_STORE_KEEP "ddp-launch/"

int ddp_store_new(ddp_store_t **out);
void ddp_store_free(ddp_store_t *store);

/* SET: stores a copy of the value and wakes waiters. 0 or -ENOMEM. */
int ddp_store_set(ddp_store_t *store, ddp_store_key_t key, const uint8_t *value, size_t len);

/* GET: the value (borrowed until the next write of the key), or false when missing. */
bool ddp_store_get(ddp_store_t *store, ddp_store_key_t key, const uint8_t **value, size_t *len);

/* GET as the shared value itself (borrowed; NULL when missing). */
ddp_store_value_t *ddp_store_get_value(ddp_store_t *store, ddp_store_key_t key);

/* ADD: the value as a decimal number plus `delta`, stored back as decimal text (a
 * missing key counts as 0). DDP_EPARSE when the stored value is not a number,
 * -ERANGE on overflow, -ENOMEM. */
int ddp_store_add(ddp_store_t *store, ddp_store_key_t key, int64_t delta, int64_t *result);

/* COMPARE_SET with PyTorch's answers: a missing key with an empty `expected` is set
 * to `desired` (answer: desired); a missing key otherwise stays missing (answer:
 * expected); a present key is replaced when it equals `expected`; the answer is then
 * its current value. *answer is borrowed (from the store or from the arguments). */
int ddp_store_compare_set(ddp_store_t *store, ddp_store_key_t key, const uint8_t *expected,
                          size_t expected_len, const uint8_t *desired, size_t desired_len,
                          const uint8_t **answer, size_t *answer_len);

/* APPEND: concatenates (creating the key) and wakes waiters. */
int ddp_store_append(ddp_store_t *store, ddp_store_key_t key, const uint8_t *value, size_t len);

/* DELETE_KEY: true when a value was removed. Waiters stay. */
bool ddp_store_delete(ddp_store_t *store, ddp_store_key_t key);

/* Whether the key has a value or a non-empty queue (CHECK's test). */
bool ddp_store_exists(ddp_store_t *store, ddp_store_key_t key);

/* The number of keys with a value (GETNUMKEYS). */
int64_t ddp_store_num_keys(ddp_store_t *store);

/* WAIT: 1 when every key exists already (nothing registered); 0 when the waiter is
 * registered and will be called back; -ENOMEM. The waiter must not be waiting. */
int ddp_store_wait(ddp_store_t *store, ddp_store_waiter_t *waiter, const ddp_store_key_t *keys,
                   size_t n);

/* Forgets a waiter's pending wait (CANCEL_WAIT, a closed connection). Harmless when
 * it is not waiting. */
void ddp_store_cancel(ddp_store_t *store, ddp_store_waiter_t *waiter);

/* QUEUE_PUSH: appends to the queue and wakes one waiter of the key. */
int ddp_store_queue_push(ddp_store_t *store, ddp_store_key_t key, const uint8_t *value, size_t len);

/* QUEUE_POP: *length is the queue's length before the pop; when it was > 0, *value is
 * the popped value (caller frees). 0 or -ENOMEM. */
int ddp_store_queue_pop(ddp_store_t *store, ddp_store_key_t key, int64_t *length, uint8_t **value,
                        size_t *len);

int64_t ddp_store_queue_len(ddp_store_t *store, ddp_store_key_t key);

/* Removes every value and queue whose key does not start with `keep_prefix` (NULL:
 * every one), as between attempts. Pending waiters stay. Returns how many keys lost
 * their value. */
size_t ddp_store_clear(ddp_store_t *store, const char *keep_prefix);

#endif
