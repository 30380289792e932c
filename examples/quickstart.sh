#!/bin/sh
# Quick start, step 1: install what is missing, build, and run the main job: the
# FashionCNN trained for one epoch on FashionMNIST by two workers under ddp-launch on
# this machine (about two minutes on two cores).
set -eu
cd "$(dirname "$0")/.."
.ci/install-deps build
[ -f build/build.ninja ] || meson setup build
meson compile -C build
exec build/launcher/ddp-launch --nproc-per-node=2 --no-python build/examples/fashion-mnist \
    --model cnn --epochs 1
