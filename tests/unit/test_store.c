/* Unit tests of launcher/store/store.c: PyTorch's store semantics without the network. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "error.h"
#include "store/store.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static ddp_store_key_t K(const char *text)
{
    return (ddp_store_key_t){(const uint8_t *)text, strlen(text)};
}

static int store_setup(void **state)
{
    ddp_store_t *s;
    assert_int_equal(ddp_store_new(&s), 0);
    *state = s;
    return 0;
}

static int store_teardown(void **state)
{
    ddp_store_free(*state);
    return 0;
}

static void expect_stored(ddp_store_t *s, const char *key, const char *value)
{
    const uint8_t *v;
    size_t len;
    if (value == NULL) {
        assert_false(ddp_store_get(s, K(key), &v, &len));
        return;
    }
    assert_true(ddp_store_get(s, K(key), &v, &len));
    assert_int_equal(len, strlen(value));
    assert_memory_equal(v, value, len);
}

static void test_set_get_delete_count(void **state)
{
    ddp_store_t *s = *state;
    expect_stored(s, "/k", NULL);
    assert_int_equal(ddp_store_set(s, K("/k"), (const uint8_t *)"v1", 2), 0);
    assert_int_equal(ddp_store_set(s, K("/k"), (const uint8_t *)"value2", 6), 0);
    expect_stored(s, "/k", "value2");
    assert_int_equal(ddp_store_set(s, K(""), (const uint8_t *)"", 0), 0); /* empty key, value */
    expect_stored(s, "", "");
    assert_int_equal(ddp_store_num_keys(s), 2);
    assert_true(ddp_store_delete(s, K("/k")));
    assert_false(ddp_store_delete(s, K("/k")));
    assert_int_equal(ddp_store_num_keys(s), 1);
    /* Binary keys with NULs are distinct keys. */
    const uint8_t a[] = {0, 1}, b[] = {0, 2};
    ddp_store_set(s, (ddp_store_key_t){a, 2}, a, 2);
    ddp_store_set(s, (ddp_store_key_t){b, 2}, b, 2);
    assert_int_equal(ddp_store_num_keys(s), 3);
}

static void test_add(void **state)
{
    ddp_store_t *s = *state;
    int64_t r;
    assert_int_equal(ddp_store_add(s, K("init/"), 1, &r), 0);
    assert_int_equal(r, 1);
    assert_int_equal(ddp_store_add(s, K("init/"), 1, &r), 0);
    assert_int_equal(ddp_store_add(s, K("init/"), -5, &r), 0);
    assert_int_equal(r, -3);
    expect_stored(s, "init/", "-3"); /* decimal text, as PyTorch stores it */
    ddp_store_set(s, K("/n"), (const uint8_t *)" 41xyz", 6); /* std::stoll ignores the tail */
    assert_int_equal(ddp_store_add(s, K("/n"), 1, &r), 0);
    assert_int_equal(r, 42);
    ddp_store_set(s, K("/text"), (const uint8_t *)"hello", 5);
    assert_int_equal(ddp_store_add(s, K("/text"), 1, &r), DDP_EPARSE);
    expect_stored(s, "/text", "hello"); /* untouched */
    ddp_store_set(s, K("/big"), (const uint8_t *)"9223372036854775807", 19);
    assert_int_equal(ddp_store_add(s, K("/big"), 1, &r), -ERANGE);
    ddp_store_set(s, K("/huge"), (const uint8_t *)"99999999999999999999999", 23);
    assert_int_equal(ddp_store_add(s, K("/huge"), 0, &r), -ERANGE);
}

static void test_compare_set(void **state)
{
    ddp_store_t *s = *state;
    const uint8_t *answer;
    size_t len;
    /* Missing key, expected non-empty: stays missing, the answer is `expected`. */
    assert_int_equal(ddp_store_compare_set(s, K("/c"), (const uint8_t *)"x", 1,
                                           (const uint8_t *)"y", 1, &answer, &len),
                     0);
    assert_memory_equal(answer, "x", 1);
    expect_stored(s, "/c", NULL);
    /* Missing key, expected empty: set to desired. */
    ddp_store_compare_set(s, K("/c"), (const uint8_t *)"", 0, (const uint8_t *)"v1", 2, &answer,
                          &len);
    assert_memory_equal(answer, "v1", 2);
    expect_stored(s, "/c", "v1");
    /* Present and equal: replaced; present and different: kept. The answer is current. */
    ddp_store_compare_set(s, K("/c"), (const uint8_t *)"v1", 2, (const uint8_t *)"v2", 2, &answer,
                          &len);
    assert_memory_equal(answer, "v2", 2);
    ddp_store_compare_set(s, K("/c"), (const uint8_t *)"zz", 2, (const uint8_t *)"v3", 2, &answer,
                          &len);
    assert_memory_equal(answer, "v2", 2);
    expect_stored(s, "/c", "v2");
}

typedef struct {
    ddp_store_waiter_t waiter;
    int woken;
} test_waiter_t;

static void on_ready(ddp_store_waiter_t *w)
{
    ((test_waiter_t *)w)->woken++;
}

static void test_wait_and_wake(void **state)
{
    ddp_store_t *s = *state;
    test_waiter_t a = {{on_ready, 0, NULL, 0}, 0}, b = {{on_ready, 0, NULL, 0}, 0};
    ddp_store_key_t ab[] = {K("/a"), K("/b")}, a_twice[] = {K("/a"), K("/a")};
    ddp_store_set(s, K("/b"), (const uint8_t *)"1", 1);
    assert_int_equal(ddp_store_wait(s, &a.waiter, ab, 2), 0); /* /a is missing */
    assert_int_equal(a.waiter.awaited, 1);
    assert_int_equal(ddp_store_wait(s, &b.waiter, a_twice, 2), 0);
    assert_int_equal(b.waiter.awaited, 2);
    /* Reads and writes of other keys wake nobody. */
    ddp_store_set(s, K("/other"), (const uint8_t *)"1", 1);
    assert_int_equal(a.woken + b.woken, 0);
    /* Any write of the key wakes every waiter on it, once. */
    int64_t r;
    ddp_store_add(s, K("/a"), 1, &r);
    assert_int_equal(a.woken, 1);
    assert_int_equal(b.woken, 1);
    ddp_store_set(s, K("/a"), (const uint8_t *)"2", 1);
    assert_int_equal(a.woken, 1);
    /* Everything there: ready at once, nothing registered. */
    assert_int_equal(ddp_store_wait(s, &a.waiter, ab, 2), 1);
    assert_int_equal(ddp_store_wait(s, &a.waiter, NULL, 0), 1);
}

static void test_cancel_and_append_wake(void **state)
{
    ddp_store_t *s = *state;
    test_waiter_t w = {{on_ready, 0, NULL, 0}, 0};
    ddp_store_key_t k[] = {K("/x"), K("/y")};
    assert_int_equal(ddp_store_wait(s, &w.waiter, k, 2), 0);
    ddp_store_cancel(s, &w.waiter);
    ddp_store_cancel(s, &w.waiter); /* harmless twice */
    ddp_store_set(s, K("/x"), (const uint8_t *)"1", 1);
    ddp_store_set(s, K("/y"), (const uint8_t *)"1", 1);
    assert_int_equal(w.woken, 0);
    assert_int_equal(ddp_store_num_keys(s), 2);
    /* APPEND creates and wakes. */
    ddp_store_key_t z[] = {K("/z")};
    assert_int_equal(ddp_store_wait(s, &w.waiter, z, 1), 0);
    ddp_store_append(s, K("/z"), (const uint8_t *)"ab", 2);
    ddp_store_append(s, K("/z"), (const uint8_t *)"cd", 2);
    assert_int_equal(w.woken, 1);
    expect_stored(s, "/z", "abcd");
    /* COMPARE_SET that writes wakes; one that does not write does not. */
    ddp_store_key_t c[] = {K("/c")};
    const uint8_t *answer;
    size_t len;
    assert_int_equal(ddp_store_wait(s, &w.waiter, c, 1), 0);
    ddp_store_compare_set(s, K("/c"), (const uint8_t *)"e", 1, (const uint8_t *)"d", 1, &answer,
                          &len);
    assert_int_equal(w.woken, 1);
    ddp_store_compare_set(s, K("/c"), (const uint8_t *)"", 0, (const uint8_t *)"d", 1, &answer,
                          &len);
    assert_int_equal(w.woken, 2);
}

static void test_queues(void **state)
{
    ddp_store_t *s = *state;
    test_waiter_t w1 = {{on_ready, 0, NULL, 0}, 0}, w2 = {{on_ready, 0, NULL, 0}, 0};
    ddp_store_key_t q[] = {K("q")};
    int64_t length;
    uint8_t *value = NULL;
    size_t len;
    assert_int_equal(ddp_store_queue_pop(s, K("q"), &length, &value, &len), 0);
    assert_int_equal(length, 0);
    assert_null(value);
    assert_int_equal(ddp_store_wait(s, &w1.waiter, q, 1), 0);
    assert_int_equal(ddp_store_wait(s, &w2.waiter, q, 1), 0);
    /* One item wakes one waiter. */
    ddp_store_queue_push(s, K("q"), (const uint8_t *)"a", 1);
    assert_int_equal(w1.woken + w2.woken, 1);
    ddp_store_queue_push(s, K("q"), (const uint8_t *)"bb", 2);
    assert_int_equal(w1.woken + w2.woken, 2);
    assert_int_equal(ddp_store_queue_len(s, K("q")), 2);
    assert_true(ddp_store_exists(s, K("q")));   /* CHECK sees a non-empty queue */
    assert_int_equal(ddp_store_num_keys(s), 0); /* but it is not a key */
    assert_int_equal(ddp_store_queue_pop(s, K("q"), &length, &value, &len), 0);
    assert_int_equal(length, 2); /* the length before the pop */
    assert_memory_equal(value, "a", 1);
    free(value);
    assert_int_equal(ddp_store_queue_pop(s, K("q"), &length, &value, &len), 0);
    assert_memory_equal(value, "bb", 2);
    free(value);
    assert_false(ddp_store_exists(s, K("q")));
}

static void test_clear_between_attempts(void **state)
{
    ddp_store_t *s = *state;
    test_waiter_t w = {{on_ready, 0, NULL, 0}, 0};
    ddp_store_set(s, K("/default_pg/0//cuda//0"), (const uint8_t *)"old-nccl-id", 11);
    ddp_store_set(s, K("/ddp-launch/round"), (const uint8_t *)"1", 1);
    ddp_store_queue_push(s, K("q"), (const uint8_t *)"x", 1);
    ddp_store_key_t k[] = {K("/later")};
    assert_int_equal(ddp_store_wait(s, &w.waiter, k, 1), 0);
    assert_int_equal(ddp_store_clear(s, "/ddp-launch/"), 1);
    expect_stored(s, "/default_pg/0//cuda//0", NULL); /* no stale NCCL id for attempt 1 */
    expect_stored(s, "/ddp-launch/round", "1");
    assert_int_equal(ddp_store_queue_len(s, K("q")), 0);
    assert_int_equal(ddp_store_num_keys(s), 1);
    /* The pending waiter is still there. */
    ddp_store_set(s, K("/later"), (const uint8_t *)"1", 1);
    assert_int_equal(w.woken, 1);
    assert_int_equal(ddp_store_clear(s, NULL), 2);
    assert_int_equal(ddp_store_num_keys(s), 0);
}

static void test_many_keys(void **state)
{
    ddp_store_t *s = *state;
    char key[32];
    for (int i = 0; i < 100000; i++) {
        snprintf(key, sizeof key, "/rank_%d", i);
        assert_int_equal(ddp_store_set(s, K(key), (const uint8_t *)key, strlen(key)), 0);
    }
    assert_int_equal(ddp_store_num_keys(s), 100000);
    for (int i = 0; i < 100000; i += 997) {
        snprintf(key, sizeof key, "/rank_%d", i);
        expect_stored(s, key, key);
    }
}

int main(void)
{
#define T(f) cmocka_unit_test_setup_teardown(f, store_setup, store_teardown)
    const struct CMUnitTest tests[] = {
        T(test_set_get_delete_count),
        T(test_add),
        T(test_compare_set),
        T(test_wait_and_wake),
        T(test_cancel_and_append_wake),
        T(test_queues),
        T(test_clear_between_attempts),
        T(test_many_keys),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
