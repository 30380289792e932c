/* Unit tests of common/buf.c. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "buf.h"

#include <stdlib.h>
#include <string.h>

static void test_append_grow_and_terminate(void **state)
{
    ddp_buf_t b = DDP_BUF_INIT;
    assert_string_equal(ddp_buf_str(&b), "");
    for (int i = 0; i < 1000; i++)
        assert_int_equal(ddp_buf_printf(&b, "%d,", i), 0);
    assert_int_equal(strncmp(b.data, "0,1,2,", 6), 0);
    assert_int_equal(b.data[b.len], '\0');
    assert_true(b.cap > b.len);
    assert_int_equal(ddp_buf_append(&b, "\0x", 2), 0); /* binary data is kept */
    assert_int_equal(b.data[b.len - 2], '\0');
    ddp_buf_clear(&b);
    assert_int_equal(b.len, 0);
    assert_string_equal(ddp_buf_str(&b), "");
    ddp_buf_free(&b);
    assert_null(b.data);
}

static void test_steal(void **state)
{
    ddp_buf_t b = DDP_BUF_INIT;
    char *empty = ddp_buf_steal(&b);
    assert_string_equal(empty, "");
    free(empty);
    ddp_buf_puts(&b, "hello");
    char *s = ddp_buf_steal(&b);
    assert_string_equal(s, "hello");
    assert_null(b.data);
    assert_int_equal(b.len, 0);
    free(s);
}

/* The places not skipped, as runs, capped. */
static void test_runs(void **state)
{
    bool skip[10] = {true, false, false, false, true, false, true, true, true, false};
    ddp_buf_t out = DDP_BUF_INIT;
    ddp_buf_runs(&out, skip, 10, 20, 0);
    assert_string_equal(ddp_buf_str(&out), "1-3, 5, 9");
    ddp_buf_clear(&out);
    ddp_buf_runs(&out, skip, 10, 2, 0);
    assert_string_equal(ddp_buf_str(&out), "1-3, 5, ...");
    ddp_buf_clear(&out);
    ddp_buf_runs(&out, skip, 10, 20, 100); /* from base on */
    assert_string_equal(ddp_buf_str(&out), "101-103, 105, 109");
    ddp_buf_free(&out);
}

/* The same runs from values in any order, repeats and huge values included. */
static void test_runs_of(void **state)
{
    int values[] = {9, 3, 1, 5, 2, 3, 2147483647, 2147483646};
    ddp_buf_t out = DDP_BUF_INIT;
    ddp_buf_runs_of(&out, values, 8, 20);
    assert_string_equal(ddp_buf_str(&out), "1-3, 5, 9, 2147483646-2147483647");
    ddp_buf_clear(&out);
    ddp_buf_runs_of(&out, values, 8, 2);
    assert_string_equal(ddp_buf_str(&out), "1-3, 5, ...");
    ddp_buf_clear(&out);
    ddp_buf_runs_of(&out, values, 0, 2);
    assert_string_equal(ddp_buf_str(&out), "");
    ddp_buf_free(&out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_append_grow_and_terminate),
        cmocka_unit_test(test_steal),
        cmocka_unit_test(test_runs),
        cmocka_unit_test(test_runs_of),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
