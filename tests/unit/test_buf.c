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

/* Text of others shown on a terminal: escape sequences, controls, C1 controls, bytes of no
 * character and UTF-8 that is not well formed as \xNN; tabs, newlines (where asked),
 * ASCII and well-formed UTF-8 kept. */
static void test_printable(void **state)
{
    (void)state;
    static const struct {
        const char *in, *lines, *one_line;
    } cases[] = {
        {"plain words", "plain words", "plain words"},
        {"a\x1b[31mb\tc\r\nd", "a\\x1b[31mb\tc\\x0d\nd", "a\\x1b[31mb\tc\\x0d\\x0ad"},
        {"\x1b]0;owned\x07\x7f", "\\x1b]0;owned\\x07\\x7f", "\\x1b]0;owned\\x07\\x7f"},
        {"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80",
         "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"},
        {"\xc2\x9b"
         "2J",
         "\\xc2\\x9b2J", "\\xc2\\x9b2J"},                              /* C1 CSI */
        {"\xc0\xaf\xff\xed\xa0\x80", "\\xc0\\xaf\\xff\\xed\\xa0\\x80", /* overlong, surrogate */
         "\\xc0\\xaf\\xff\\xed\\xa0\\x80"},
        {"cut \xe2\x82", "cut \\xe2\\x82", "cut \\xe2\\x82"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ddp_buf_t b = DDP_BUF_INIT;
        assert_int_equal(ddp_buf_printable(&b, cases[i].in, strlen(cases[i].in), true), 0);
        assert_string_equal(ddp_buf_str(&b), cases[i].lines);
        ddp_buf_clear(&b);
        assert_int_equal(ddp_buf_printable(&b, cases[i].in, strlen(cases[i].in), false), 0);
        assert_string_equal(ddp_buf_str(&b), cases[i].one_line);
        ddp_buf_free(&b);
    }
    ddp_buf_t b = DDP_BUF_INIT;
    assert_int_equal(ddp_buf_printable(&b, "a\0b", 3, false), 0); /* a NUL is a byte too */
    assert_string_equal(ddp_buf_str(&b), "a\\x00b");
    ddp_buf_free(&b);
}

/* Its first bytes only, cut at a character's start, "..." where cut: an escape sequence
 * cut is shown escaped still. */
static void test_printable_cut(void **state)
{
    (void)state;
    static const struct {
        const char *in;
        size_t most;
        const char *out;
    } cases[] = {
        {"abcdef", 3, "abc..."},
        {"abc", 3, "abc"},
        {"ab\x1b"
         "cd",
         10, "ab\\x1bcd"},
        {"\x1b[2J\r", 2, "\\x1b[..."},
        {"ab\xc3\xa9z", 3, "ab..."},                  /* not half an e-acute */
        {"ab\xe2\x82\xacz", 4, "ab..."},              /* nor a third of a euro */
        {"ab\x80\x80\x80\x80", 4, "ab\\x80\\x80..."}, /* no character to keep whole */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ddp_buf_t b = DDP_BUF_INIT;
        assert_int_equal(
            ddp_buf_printable_cut(&b, cases[i].in, strlen(cases[i].in), cases[i].most, false), 0);
        assert_string_equal(ddp_buf_str(&b), cases[i].out);
        ddp_buf_free(&b);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_append_grow_and_terminate),
        cmocka_unit_test(test_steal),
        cmocka_unit_test(test_runs),
        cmocka_unit_test(test_runs_of),
        cmocka_unit_test(test_printable),
        cmocka_unit_test(test_printable_cut),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
