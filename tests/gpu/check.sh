#!/bin/sh
# The GPU check a session lent a GPU machine runs in one call.
#
#   tests/gpu/check.sh pack   here, after `meson compile -C build`: puts the build's
#                             binaries, the shared libraries the lent machine lacks (libuv,
#                             cmocka, OpenBLAS with libgfortran and libquadmath, libunwind)
#                             and Debian's FashionMNIST into .gpu-carry.tar.xz (about
#                             40 MB; the repository ignores it)
#   tests/gpu/check.sh run    there (the device tool's run, carrying .gpu-carry.tar.xz):
#                             unpacks it, finds CUDA and NCCL beside the machine's torch,
#                             runs the gpu suite, the integration and torch tests against
#                             that torch, and one epoch of the C example against PyTorch's
#                             on the same GPU, a --numa-binding=node job, a warm
#                             restart with NCCL (bench/restart), then prints one table
#
# The lent machine (reference/gpu-machine.md) has torch, CUDA and NCCL in python3's venv
# and no libuv, cmocka, OpenBLAS, dataset, eu-stack or gdb, and downloads nothing. Where
# there is no GPU the gpu suite says "skipped" and the epochs fail: the rest still runs,
# so the check can be tried anywhere. Every test is bounded (timeout), and no test needs
# meson there (its version differs). Exit status: 0 when nothing failed.
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
carry="$root/.gpu-carry.tar.xz"

libs_of() { # the shared libraries ldd resolves for the files given, one a line
    ldd "$@" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// { print $3 }' | sort -u
}

pack() {
    build=${1:-build}
    [ -x "$build/launcher/ddp-launch" ] || {
        echo "check.sh: no build in $build (meson setup build && meson compile -C build)" >&2
        exit 2
    }
    stage=$(mktemp -d)
    trap 'rm -rf "$stage"' EXIT
    mkdir -p "$stage/build/launcher" "$stage/build/worker" "$stage/build/tests" \
        "$stage/build/examples" "$stage/lib" "$stage/fashion-mnist"
    cp -a "$build/launcher/ddp-launch" "$stage/build/launcher/"
    for f in "$build"/worker/libddp.so*; do
        [ -d "$f" ] || cp -a "$f" "$stage/build/worker/"
    done
    # The ddp_launch package (step(), the warm-restart zygote), found beside the launcher.
    cp -a "$build/worker/python" "$stage/build/worker/"
    for f in ddp-test-worker ddp-test-store ddp-test-collectives ddp-test-nccl gtest_nccl \
        itest_env_contract itest_exit_codes itest_restarts itest_signals itest_output \
        itest_store itest_python itest_libddp itest_multinode itest_fashion itest_torch; do
        [ -e "$build/tests/$f" ] && cp -a "$build/tests/$f" "$stage/build/tests/"
    done
    for f in ddp-hello fashion-mnist fashion-mnist-cuda.so; do
        [ -e "$build/examples/$f" ] && cp -a "$build/examples/$f" "$stage/build/examples/"
    done
    # What the lent machine lacks: everything ldd finds but glibc, libgcc_s and what
    # CUDA's and NCCL's wheels bring (found beside torch there); libunwind is dlopen'd.
    for lib in $(libs_of "$stage"/build/*/*) /usr/lib/x86_64-linux-gnu/libunwind.so.8 \
        /usr/lib/x86_64-linux-gnu/libunwind-x86_64.so.8 \
        /usr/lib/x86_64-linux-gnu/libunwind-ptrace.so.0; do
        case "$(basename "$lib")" in
        libc.so* | libm.so* | libdl.so* | libpthread.so* | librt.so* | ld-linux* | libgcc_s.so* | \
            libstdc++.so* | libz.so* | liblzma.so* | libddp.so* | libcuda* | libcudart* | \
            libcublas* | libcudnn* | libnccl* | libnvidia*) ;; # there, and newer: torch needs them
        *) [ -e "$lib" ] && cp -L "$lib" "$stage/lib/" ;;
        esac
    done
    cp /usr/share/datasets/fashion-mnist/*.gz "$stage/fashion-mnist/" 2>/dev/null ||
        echo "check.sh: no FashionMNIST here (apt-get install dataset-fashion-mnist)" >&2
    tar -C "$stage" -cJf "$carry" .
    echo "check.sh: packed $(du -h "$carry" | cut -f1) into $carry; on the GPU machine:"
    echo "  tests/gpu/check.sh run      (carry .gpu-carry.tar.xz)"
}

# "name result seconds" lines, the table's rows.
rows=""
failed=0
row() {
    rows="$rows$(printf '%-34s %-28s %s' "$1" "$2" "$3")
"
}

run_test() { # name, seconds allowed, command...
    name=$1 limit=$2
    shift 2
    log="$work/logs/$(echo "$name" | tr -c 'a-zA-Z0-9_\n' '-').log"
    start=$(date +%s)
    set +e
    timeout "$limit" "$@" >"$log" 2>&1
    status=$?
    set -e
    took=$(($(date +%s) - start))
    case $status in
    0) row "$name" "ok" "${took} s" ;;
    77) row "$name" "skipped: $(grep -m1 -i skip "$log" | sed 's/^skipped: *//' | cut -c1-60)" "${took} s" ;;
    124) row "$name" "TIMED OUT" "${took} s" && failed=1 ;;
    *) row "$name" "FAILED ($status): see $log" "${took} s" && failed=1 ;;
    esac
}

epoch() { # name, command...: the epoch's samples/s from its "done in" line
    name=$1
    shift
    log="$work/logs/$(echo "$name" | tr -c 'a-zA-Z0-9_\n' '-').log"
    set +e
    timeout 900 "$@" >"$log" 2>&1
    status=$?
    set -e
    rate=$(sed -n 's/.*done in \([0-9.]*\) s: \([0-9]*\) samples\/s.*/\2 samples\/s (\1 s)/p' "$log" |
        tail -1)
    if [ "$status" = 0 ] && [ -n "$rate" ]; then
        row "$name" "$rate" ""
    else
        row "$name" "FAILED ($status): see $log" ""
        failed=1
    fi
}

# --numa-binding=node on this machine's first GPU: bound (POLICY prefer:N and the CPUs of
# node N, as sysfs lists them) where the machine has several NUMA nodes, else the one info
# line and an unbound worker. Also records the machine for tests/data/topology.
#   check.sh numa BUILD LOG_DIR   (run() runs it, bounded)
numa_check() {
    b=$1
    "$root/tests/data/topology/record.sh" "the lent GPU machine" >"$2/topology.txt" 2>/dev/null ||
        true
    out=$("$b/launcher/ddp-launch" --numa-binding=node --tee=1 --no-python \
        "$b/tests/ddp-test-worker" placement 2>&1) || return 1
    echo "$out"
    cpus=$(echo "$out" | sed -n 's/^\[default0\]:CPUS=//p')
    policy=$(echo "$out" | sed -n 's/^\[default0\]:POLICY=//p')
    if echo "$out" | grep -q "the workers are not bound: "; then
        [ "$policy" = default ] && [ "$cpus" = "$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)" ]
    else
        node=${policy#prefer:}
        [ "$node" != "$policy" ] && [ "$cpus" = "$(cat /sys/devices/system/node/node"$node"/cpulist)" ]
    fi
}

run() {
    [ -f "$carry" ] || {
        echo "check.sh: no $carry: run 'tests/gpu/check.sh pack' where the build is" >&2
        exit 2
    }
    work=${TMPDIR:-/tmp}/ddp-gpu-check
    rm -rf "$work"
    mkdir -p "$work/logs"
    tar -C "$work" -xJf "$carry"
    b="$work/build"
    python=$(command -v python3 || true)
    # CUDA and NCCL from torch's wheels (site-packages/nvidia/*/lib), else the toolkit.
    nvidia=""
    if [ -n "$python" ]; then
        nvidia=$("$python" -c 'import glob, os, nvidia
print(":".join(sorted(d for p in nvidia.__path__ for d in glob.glob(os.path.join(p, "*", "lib")))))' \
            2>/dev/null || true)
    fi
    export LD_LIBRARY_PATH="$work/lib:$b/worker${nvidia:+:$nvidia}:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    # The dataset where the tests and examples look, if this machine lets us put it there.
    data=/usr/share/datasets/fashion-mnist
    if [ ! -f "$data/train-images-idx3-ubyte.gz" ] && [ -f "$work/fashion-mnist/train-images-idx3-ubyte.gz" ]; then
        if mkdir -p "$data" 2>/dev/null && cp "$work"/fashion-mnist/*.gz "$data/" 2>/dev/null; then
            echo "check.sh: FashionMNIST copied to $data"
        else
            data="$work/fashion-mnist"
        fi
    fi
    export DDP_TEST_LAUNCHER="$b/launcher/ddp-launch" DDP_TEST_WORKER="$b/tests/ddp-test-worker" \
        DDP_TEST_HELLO="$b/examples/ddp-hello" DDP_TEST_STORE="$b/tests/ddp-test-store" \
        DDP_TEST_COLLECTIVES="$b/tests/ddp-test-collectives" DDP_TEST_HAVE_NCCL=1 \
        DDP_TEST_SOURCE_DIR="$root" DDP_TEST_PYTHON="$python" DDP_TEST_TORCH_PYTHON="$python" \
        DDP_LAUNCH_LOG_LEVEL=info PET_MASTER_PORT=0 DDP_TEST_NCCL_WORKER="$b/tests/ddp-test-nccl" \
        DDP_TEST_FASHION="$b/examples/fashion-mnist" DDP_TEST_FASHION_GPU=1 \
        DDP_TEST_CUDA_ROOT=/usr/local/cuda PYTHON_EXEC="$python"
    machine=$( (nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null ||
        echo "no GPU seen") | head -1)
    torch=$("$python" -c 'import torch; print(torch.__version__, "CUDA", torch.version.cuda,
"NCCL", ".".join(map(str, torch.cuda.nccl.version())) if torch.cuda.is_available() else "")' \
        2>/dev/null || echo "no torch")
    [ -x "$b/tests/gtest_nccl" ] && run_test "gpu suite" 900 "$b/tests/gtest_nccl"
    for t in env_contract exit_codes restarts signals output store python libddp multinode \
        fashion; do
        [ -x "$b/tests/itest_$t" ] && run_test "integration $t" 600 "$b/tests/itest_$t"
    done
    run_test "numa binding (node)" 60 "$root/tests/gpu/check.sh" numa "$b" "$work/logs"
    [ -x "$b/tests/itest_torch" ] && run_test "torch (this machine's)" 1200 "$b/tests/itest_torch" python
    # --warm-restarts with NCCL: crash -> the restarted rank's first all-reduce, cold and
    # warm (issue 38's target: warm <= 1.5 s); its table is in the log.
    run_test "warm restart, NCCL (bench/restart)" 600 "$root/bench/restart" --build "$b" \
        --backend nccl --nproc 1 --runs 3 --python "$python" --torchrun none
    epoch "C example, 1 GPU, batch 64" "$b/launcher/ddp-launch" --nproc-per-node=1 --no-python \
        "$b/examples/fashion-mnist" --device cuda --epochs 1 --data "$data"
    epoch "PyTorch example, 1 GPU, batch 64" "$b/launcher/ddp-launch" --nproc-per-node=1 \
        examples/torch/train_fashion.py --device cuda --epochs 1 --data "$data"
    echo
    echo "GPU check on: $machine; torch $torch; $(uname -sr)"
    printf '%-34s %-28s %s\n' "what" "result" "time"
    printf '%s' "$rows"
    echo "logs: $work/logs"
    exit $failed
}

case "${1:-}" in
pack) shift && pack "$@" ;;
run) run ;;
numa) shift && numa_check "$@" ;;
*)
    echo "usage: tests/gpu/check.sh pack [BUILD_DIR] | run" >&2
    exit 2
    ;;
esac
