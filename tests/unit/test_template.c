/* Unit tests of common/template.c against Python's string.Template.safe_substitute. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "template.h"

#include <stdlib.h>
#include <string.h>

static void test_safe_substitute(void **state)
{
    /* Expected values are what Python 3.11 prints for
     * Template(text).safe_substitute(local_rank=3, rank=11). */
    static const struct {
        const char *text, *expected;
    } cases[] = {
        {"${local_rank}", "3"},
        {"x${local_rank}y", "x3y"},
        {"$local_rank", "3"},
        {"$local_rank.log", "3.log"},
        {"$local_rankx", "$local_rankx"},
        {"${local_rank}x", "3x"},
        {"$$", "$"},
        {"$$local_rank", "$local_rank"},
        {"$$$local_rank", "$3"},
        {"${other}", "${other}"},
        {"$other", "$other"},
        {"$", "$"},
        {"a$", "a$"},
        {"${local_rank", "${local_rank"},
        {"${ local_rank}", "${ local_rank}"},
        {"$1", "$1"},
        {"$LOCAL_RANK", "$LOCAL_RANK"},
        {"[${rank}/${local_rank}]:", "[11/3]:"},
        {"", ""},
        {"plain", "plain"},
    };
    const ddp_template_var_t vars[] = {{"local_rank", "3"}, {"rank", "11"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *out = NULL;
        assert_int_equal(ddp_template_substitute(cases[i].text, vars, 2, &out), 0);
        if (strcmp(out, cases[i].expected) != 0)
            fail_msg("'%s' -> '%s', expected '%s'", cases[i].text, out, cases[i].expected);
        free(out);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_safe_substitute),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
