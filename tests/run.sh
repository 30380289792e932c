#!/bin/sh
# Quick start, step 2: install what is missing, build with warnings as errors, and run
# every test (unit, integration, PyTorch compatibility, format). Extra arguments go to
# meson test, e.g. tests/run.sh --suite unit.
set -eu
cd "$(dirname "$0")/.."
.ci/install-deps test
if [ -f build/build.ninja ]; then
    meson configure build -Dwerror=true
else
    meson setup build -Dwerror=true
fi
meson compile -C build
meson test -C build --print-errorlogs "$@"
