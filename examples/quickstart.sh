#!/bin/sh
# Quick start, step 1: install what is missing, build, and run the main job: two
# workers of the example program under ddp-launch on this machine.
set -eu
cd "$(dirname "$0")/.."
.ci/install-deps build
[ -f build/build.ninja ] || meson setup build
meson compile -C build
exec build/launcher/ddp-launch --nproc-per-node=2 --no-python build/examples/ddp-hello
