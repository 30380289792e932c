/* What the launcher learns from a Python training script's text, without running it.
 *
 * A small tokenizer of Python's surface: comments, string literals (with their prefixes
 * and triple quotes) and names. Enough to find a call such as
 * parser.add_argument("--local_rank", type=int) outside comments and strings. Pure
 * functions of the text, so the unit tests need no files. */
#ifndef DDP_LAUNCHER_CONFIG_PYSCAN_H
#define DDP_LAUNCHER_CONFIG_PYSCAN_H

#include "config/config.h"

#include <stdbool.h>
#include <stddef.h>

/* The most of a script the launcher reads to scan it (a larger one is not scanned). */
#define DDP_PYSCAN_MAX ((size_t)8 << 20)

/* The local rank option the script defines in an add_argument call: the first of
 * "--local_rank" (DDP_LOCAL_RANK_ARG_UNDERSCORE) and "--local-rank" (DASH) among the
 * call's string arguments, or DDP_LOCAL_RANK_ARG_NONE when no call defines either. A
 * name only mentioned in a comment, a docstring or another call does not count. */
ddp_local_rank_arg_t ddp_pyscan_local_rank_option(const char *text, size_t len);

/* Whether the script imports `module` (import module[.x] / from module[.x] import). */
bool ddp_pyscan_imports(const char *text, size_t len, const char *module);

#endif
