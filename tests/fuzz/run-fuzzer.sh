#!/bin/sh
# Builds the store codec fuzzer with clang's libFuzzer (ASan and UBSan on) and runs it
# for a bounded time from the seed corpus. Skips (77) where clang or libFuzzer is
# missing. usage: run-fuzzer.sh SOURCE_ROOT BUILD_DIR SECONDS REPLAY_BINARY
set -eu
src=$1 out=$2/fuzz seconds=$3 replay=$4
clang=$(command -v clang || true)
if [ -z "$clang" ]; then
    echo "skipped: clang is not installed (apt-get install clang libclang-rt-14-dev)"
    exit 77
fi
mkdir -p "$out/corpus"
if ! echo 'int LLVMFuzzerTestOneInput(const char *d, long n){return 0;}' |
    "$clang" -x c -fsanitize=fuzzer - -o "$out/probe" 2>/dev/null; then
    echo "skipped: clang has no libFuzzer runtime (apt-get install libclang-rt-14-dev)"
    exit 77
fi
"$clang" -g -O1 -std=c11 -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined \
    -fno-sanitize-recover=undefined -I"$src/common" -I"$src/worker/include" -I"$2" \
    "$src/common/store_codec.c" "$src/common/buf.c" "$src/common/error.c" \
    "$src/tests/fuzz/fuzz_store_codec.c" -o "$out/fuzz_store_codec"
# The seeds become corpus files; what the fuzzer finds stays in the build directory
# between runs.
"$replay" --corpus "$out/corpus" "$src/tests/fuzz/store_seeds.txt"
exec "$out/fuzz_store_codec" -max_total_time="$seconds" -max_len=4096 -timeout=10 \
    -print_final_stats=1 "$out/corpus"
