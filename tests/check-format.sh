#!/bin/sh
# Fails when a C source under the tree is not formatted as .clang-format says.
# usage: check-format.sh CLANG_FORMAT SOURCE_ROOT
set -eu
cd "$2"
files=$(git ls-files '*.c' '*.h' 2>/dev/null || find common launcher worker examples tests bench -name '*.[ch]')
[ -n "$files" ] || exit 0
# shellcheck disable=SC2086
"$1" --dry-run --Werror $files
