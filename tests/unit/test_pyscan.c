/* Unit tests of launcher/config/pyscan.c: the local rank option a script defines. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "config/pyscan.h"

#include <string.h>

static ddp_local_rank_arg_t scan(const char *text)
{
    return ddp_pyscan_local_rank_option(text, strlen(text));
}

static void test_defined_options(void **state)
{
    /* The APEX-era tutorial. */
    assert_int_equal(scan("import argparse\n"
                          "parser = argparse.ArgumentParser()\n"
                          "parser.add_argument(\"--local_rank\", default=0, type=int)\n"
                          "args = parser.parse_args()\n"),
                     DDP_LOCAL_RANK_ARG_UNDERSCORE);
    /* torch 2.x's spelling, single quotes, spread over lines. */
    assert_int_equal(scan("p.add_argument(\n    '--local-rank',\n    type=int,\n)\n"),
                     DDP_LOCAL_RANK_ARG_DASH);
    /* Both in one call: the first is passed (argparse takes either). */
    assert_int_equal(scan("p.add_argument('--local-rank', '--local_rank', type=int)"),
                     DDP_LOCAL_RANK_ARG_DASH);
    assert_int_equal(scan("p.add_argument(\"--local_rank\", \"--local-rank\", type=int)"),
                     DDP_LOCAL_RANK_ARG_UNDERSCORE);
    /* After other options, with nested calls and parentheses in strings. */
    assert_int_equal(scan("p.add_argument('--lr', type=float, help='rate (x)')\n"
                          "p.add_argument('--epochs', default=int(os.environ.get('E', 3)))\n"
                          "group.add_argument(r'--local_rank', type=int, default=-1)\n"),
                     DDP_LOCAL_RANK_ARG_UNDERSCORE);
}

static void test_mentions_are_not_definitions(void **state)
{
    /* A comment, a docstring, another call, an option of another name. */
    assert_int_equal(scan("# parser.add_argument('--local_rank', type=int)\n"
                          "local_rank = int(os.environ['LOCAL_RANK'])\n"),
                     DDP_LOCAL_RANK_ARG_NONE);
    assert_int_equal(scan("\"\"\"Run with: parser.add_argument('--local_rank')\n"
                          "no longer needed.\"\"\"\nimport os\n"),
                     DDP_LOCAL_RANK_ARG_NONE);
    assert_int_equal(scan("print('--local_rank is gone')\n"
                          "p.add_argument('--local_ranks', type=int)\n"
                          "p.add_argument('--lr', help='not --local_rank')\n"),
                     DDP_LOCAL_RANK_ARG_NONE);
    assert_int_equal(scan("x = '--local_rank'\nadd_arguments('--local_rank')\n"),
                     DDP_LOCAL_RANK_ARG_NONE);
    /* Unterminated strings and calls end the scan without a find. */
    assert_int_equal(scan("p.add_argument('--local_rank"), DDP_LOCAL_RANK_ARG_NONE);
    assert_int_equal(scan("p.add_argument("), DDP_LOCAL_RANK_ARG_NONE);
    assert_int_equal(scan(""), DDP_LOCAL_RANK_ARG_NONE);
}

static void test_imports(void **state)
{
    const char *yes[] = {"import torch\n", "import torch.distributed as dist\n",
                         "from torch.nn.parallel import DistributedDataParallel as DDP\n",
                         "import os\nfrom torch import nn\n"};
    for (size_t i = 0; i < 4; i++)
        assert_true(ddp_pyscan_imports(yes[i], strlen(yes[i]), "torch"));
    const char *no[] = {"import torchvision\n", "# import torch\n", "print('import torch')\n",
                        "x = torch\n"};
    for (size_t i = 0; i < 4; i++)
        assert_false(ddp_pyscan_imports(no[i], strlen(no[i]), "torch"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defined_options),
        cmocka_unit_test(test_mentions_are_not_definitions),
        cmocka_unit_test(test_imports),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
