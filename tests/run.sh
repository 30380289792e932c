#!/bin/sh
# Quick start, step 2: install what is missing, build with warnings as errors, and run
# every test (unit, integration, PyTorch compatibility, fuzzing, format, gpu where there
# is one); then the unit and integration tests again built with ASan and UBSan, the
# store's tests under valgrind, and a build without the CUDA toolkit. Extra arguments
# go to the first meson test only (and skip the rest), e.g. tests/run.sh --suite unit.
set -eu
cd "$(dirname "$0")/.."
.ci/install-deps test
configure() { # DIR OPTIONS...: set up a build directory, or update its options
    dir=$1
    shift
    if [ -f "$dir/build.ninja" ]; then
        meson configure "$dir" "$@"
    else
        meson setup "$dir" "$@"
    fi
}
# The trixie root of the torch 2.6 tests (a download: disk and network, little CPU) is
# built meanwhile, from the start: those tests and the install suite then find it (its
# script's lock makes them wait for it) rather than build it at the end of the run.
if [ $# -eq 0 ]; then
    mkdir -p build/tests
    tests/torch26/setup.sh "$PWD/build/tests/trixie-root" >/dev/null 2>&1 &
fi
configure build -Dwerror=true
meson compile -C build
meson test -C build --print-errorlogs "$@"
[ $# -eq 0 ] || exit 0
configure build-asan -Dwerror=true -Db_sanitize=address,undefined -Db_lundef=false
meson compile -C build-asan
meson test -C build-asan --print-errorlogs --suite unit --suite integration --no-suite torch
meson test -C build --print-errorlogs --setup valgrind store store_codec store-codec-seeds
# As where the CUDA toolkit is absent: libddp without its NCCL parts still builds and works.
configure build-nocuda -Dwerror=true -Dcuda=disabled
meson compile -C build-nocuda
meson test -C build-nocuda --print-errorlogs --suite unit
meson test -C build-nocuda --print-errorlogs libddp
