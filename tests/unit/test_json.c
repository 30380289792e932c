/* Unit tests of common/json.c: PyTorch's error files, escapes, hostile input. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "error.h"
#include "json.h"

#include <stdlib.h>
#include <string.h>

static ddp_json_t *parse_ok(const char *text)
{
    ddp_json_t *root = NULL;
    int err = ddp_json_parse(text, strlen(text), &root);
    if (err != 0)
        fail_msg("'%s' did not parse: %d", text, err);
    return root;
}

static void test_pytorch_error_file(void **state)
{
    ddp_json_t *root =
        parse_ok("{\"message\": {\"message\": \"RuntimeError: boom\", \"extraInfo\": "
                 "{\"py_callstack\": \"Traceback:\\n  line 1\", \"timestamp\": \"1795324255\"}}}");
    const ddp_json_t *extra = ddp_json_get(ddp_json_get(root, "message"), "extraInfo");
    assert_string_equal(ddp_json_string(ddp_json_get(extra, "py_callstack"), NULL),
                        "Traceback:\n  line 1");
    assert_string_equal(ddp_json_string(ddp_json_get(extra, "timestamp"), NULL), "1795324255");
    assert_null(ddp_json_get(root, "absent"));
    assert_null(ddp_json_string(ddp_json_get(root, "message"), NULL)); /* an object */
    ddp_json_free(root);
}

static void test_values(void **state)
{
    ddp_json_t *root =
        parse_ok(" [1, -2.5e3, true, false, null, \"s\", {}, [], {\"a\": {\"b\": 7}}] ");
    assert_int_equal(ddp_json_type(root), DDP_JSON_ARRAY);
    ddp_json_free(root);
    root = parse_ok("{\"n\": -2.5e3, \"a\": 1, \"a\": 2}");
    double v;
    assert_true(ddp_json_number(ddp_json_get(root, "n"), &v));
    assert_true(v == -2500);
    assert_true(ddp_json_number(ddp_json_get(root, "a"), &v)); /* the last of repeats */
    assert_true(v == 2);
    assert_false(ddp_json_number(NULL, &v));
    ddp_json_free(root);
    root = parse_ok("[true, false, \"true\", 1, null]");
    const ddp_json_t *e = ddp_json_first(root);
    assert_true(ddp_json_true(e));
    for (e = ddp_json_next(e); e != NULL; e = ddp_json_next(e))
        assert_false(ddp_json_true(e));
    assert_false(ddp_json_true(NULL));
    ddp_json_free(root);
}

static void test_string_escapes(void **state)
{
    size_t len;
    ddp_json_t *root = parse_ok("\"a\\\"b\\\\c\\/d\\n\\t\\u00e9\\u20ac\\ud83d\\ude00\\u0000z\"");
    const char *s = ddp_json_string(root, &len);
    const char expected[] = "a\"b\\c/d\n\t\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\0z";
    assert_int_equal(len, sizeof expected - 1);
    assert_memory_equal(s, expected, len);
    ddp_json_free(root);
    /* A lone surrogate becomes U+FFFD instead of failing. */
    root = parse_ok("\"\\ud800x\"");
    assert_string_equal(ddp_json_string(root, NULL), "\xef\xbf\xbdx");
    ddp_json_free(root);
}

static void test_malformed_input_is_an_error(void **state)
{
    static const char *const bad[] = {
        "",
        "   ",
        "{",
        "}",
        "[1,]",
        "{\"a\" 1}",
        "{\"a\": }",
        "{1: 2}",
        "\"unterminated",
        "\"bad \\x escape\"",
        "\"\\u12\"",
        "tru",
        "nul",
        "01x",
        "-",
        "[1 2]",
        "{} {}",
        "\"raw\ncontrol\"",
        "{\"message\": {\"message\": ",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ddp_json_t *root = NULL;
        int err = ddp_json_parse(bad[i], strlen(bad[i]), &root);
        if (err != DDP_EPARSE)
            fail_msg("'%s' parsed (%d)", bad[i], err);
        assert_null(root);
    }
}

static void test_depth_is_bounded(void **state)
{
    char deep[2 * DDP_JSON_MAX_DEPTH + 8];
    size_t n = 0;
    for (int i = 0; i < DDP_JSON_MAX_DEPTH + 2; i++)
        deep[n++] = '[';
    for (int i = 0; i < DDP_JSON_MAX_DEPTH + 2; i++)
        deep[n++] = ']';
    ddp_json_t *root = NULL;
    assert_int_equal(ddp_json_parse(deep, n, &root), DDP_EPARSE);
    /* Exactly the limit is fine. */
    n = 0;
    for (int i = 0; i < DDP_JSON_MAX_DEPTH; i++)
        deep[n++] = '[';
    for (int i = 0; i < DDP_JSON_MAX_DEPTH; i++)
        deep[n++] = ']';
    assert_int_equal(ddp_json_parse(deep, n, &root), 0);
    ddp_json_free(root);
}

static void test_escape_round_trip(void **state)
{
    const char text[] = "quote\" backslash\\ nl\n tab\t ctl\x01 bell\x07 utf8 \xc3\xa9";
    ddp_buf_t out = DDP_BUF_INIT;
    assert_int_equal(ddp_json_append_string(&out, text, sizeof text - 1), 0);
    assert_non_null(strstr(out.data, "\\u0001"));
    ddp_json_t *root = parse_ok(out.data);
    size_t len;
    assert_memory_equal(ddp_json_string(root, &len), text, sizeof text - 1);
    assert_int_equal(len, sizeof text - 1);
    ddp_json_free(root);
    ddp_buf_free(&out);
}

/* Arrays and objects are walked in order; a scalar or NULL has no children. */
static void test_children_in_order(void **state)
{
    const char *text = "{\"events\": [{\"n\": 1}, {\"n\": 2}, {\"n\": 3}], \"x\": 7}";
    ddp_json_t *root = NULL;
    assert_int_equal(ddp_json_parse(text, strlen(text), &root), 0);
    double n = 0, want = 1;
    int count = 0;
    for (const ddp_json_t *e = ddp_json_first(ddp_json_get(root, "events")); e != NULL;
         e = ddp_json_next(e), want++, count++) {
        assert_true(ddp_json_number(ddp_json_get(e, "n"), &n));
        assert_true(n == want);
    }
    assert_int_equal(count, 3);
    const ddp_json_t *first = ddp_json_first(root);
    assert_non_null(first);
    assert_non_null(ddp_json_next(first));
    assert_null(ddp_json_next(ddp_json_next(first)));
    assert_null(ddp_json_first(ddp_json_get(root, "x")));
    assert_null(ddp_json_first(NULL));
    assert_null(ddp_json_next(NULL));
    ddp_json_free(root);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pytorch_error_file),
        cmocka_unit_test(test_values),
        cmocka_unit_test(test_string_escapes),
        cmocka_unit_test(test_malformed_input_is_an_error),
        cmocka_unit_test(test_depth_is_bounded),
        cmocka_unit_test(test_escape_round_trip),
        cmocka_unit_test(test_children_in_order),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
