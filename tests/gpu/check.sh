#!/bin/sh
# The GPU check a session lent a GPU machine runs in one call.
#
#   tests/gpu/check.sh pack   here, after `meson compile -C build`: puts the build's
#                             binaries, the shared libraries the lent machine lacks (libuv,
#                             cmocka, OpenBLAS with libgfortran and libquadmath, libunwind)
#                             and Debian's FashionMNIST into .gpu-carry.tar.xz (about
#                             40 MB; the repository ignores it)
#   tests/gpu/check.sh run [SECONDS [PART...]]
#                             there (the device tool's run, carrying .gpu-carry.tar.xz):
#                             unpacks it, finds CUDA and NCCL beside the machine's torch,
#                             and runs, most wanted first: the gpu suite; NVML on the real
#                             driver (health checks, the memory wait before a restart);
#                             more workers than GPUs (C and PyTorch examples); an epoch of
#                             the C example against PyTorch's on the same GPU; a warm
#                             restart with NCCL (bench/restart); a --numa-binding=node job;
#                             then the integration and torch suites side by side in what
#                             is left of SECONDS (default 1800). Prints one table; with
#                             DDP_GPU_CHECK_OUT=DIR each row is also added to DIR/table.txt
#                             as it comes, and the logs are copied there at the end. PARTs
#                             run only those: gpu nvml fewer epochs restart numa, or a
#                             suite (env_contract ... torch)
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
        itest_store itest_python itest_libddp itest_multinode itest_progress itest_fashion \
        itest_torch; do
        [ -e "$build/tests/$f" ] && cp -a "$build/tests/$f" "$stage/build/tests/"
    done
    # What the integration suites load: the stand-in NVML, the stepped clock.
    cp -a "$build/tests/fake_nvml" "$stage/build/tests/"
    rm -rf "$stage/build/tests/fake_nvml/"*.p
    cp -a "$build/tests/libclock-step.so" "$stage/build/tests/"
    for f in ddp-hello fashion-mnist fashion-mnist-cuda.so; do
        [ -e "$build/examples/$f" ] && cp -a "$build/examples/$f" "$stage/build/examples/"
    done
    # What the lent machine lacks: everything ldd finds but glibc, libgcc_s and what
    # CUDA's and NCCL's wheels bring (found beside torch there); libunwind is dlopen'd.
    for lib in $(libs_of "$stage"/build/*/* "$stage"/build/tests/*/*) \
        /usr/lib/x86_64-linux-gnu/libunwind.so.8 \
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
    line=$(printf '%-38s %-44s %s' "$1" "$2" "$3")
    rows="$rows$line
"
    [ -z "${DDP_GPU_CHECK_OUT:-}" ] || echo "$line" >>"$DDP_GPU_CHECK_OUT/table.txt"
}

# Whether run was asked for this part (gpu, nvml, fewer, epochs, restart, numa, or a suite's
# name): all of them where it was given none.
part() {
    [ "$parts" = "  " ] || case "$parts" in *" $1 "*) ;; *) return 1 ;; esac
}

# Seconds left of run's budget.
left() {
    echo $((budget - ($(date +%s) - began)))
}

logname() {
    echo "$work/logs/$(echo "$1" | tr -c 'a-zA-Z0-9_\n' '-').log"
}

# Runs a command (seconds allowed, log, command...) with its output in the log: sets status
# (timeout's: 124 when it ran out) and took (seconds).
bounded() {
    limit=$1 log=$2
    shift 2
    start=$(date +%s)
    set +e
    timeout "$limit" "$@" >"$log" 2>&1
    status=$?
    set -e
    took=$(($(date +%s) - start))
}

# A finished command's row: name, status, seconds taken, log.
judge() {
    case $2 in
    0) row "$1" "ok" "${3} s" ;;
    77)
        why=$(grep -m1 -i skip "$4" | sed 's/^skipped: *//' | cut -c1-40)
        row "$1" "skipped: $why" "${3} s"
        ;;
    124) row "$1" "TIMED OUT" "${3} s" && failed=1 ;;
    *) row "$1" "FAILED ($2): see $(basename "$4")" "${3} s" && failed=1 ;;
    esac
}

run_test() { # name, seconds allowed (at most what is left), command...
    name=$1 limit=$2
    shift 2
    [ "$(left)" -lt "$limit" ] && limit=$(left)
    if [ "$limit" -lt 10 ]; then
        row "$name" "not run: out of time" ""
        return
    fi
    log=$(logname "$name")
    bounded "$limit" "$log" "$@"
    judge "$name" "$status" "$took" "$log"
}

# The suites named (itest_NAME; "torch" runs itest_torch against this machine's torch) side
# by side, each bounded by what is left.
run_suites() {
    limit=$(left)
    names=""
    for t in "$@"; do
        [ -x "$b/tests/itest_$t" ] || continue
        log=$(logname "suite $t")
        arg=""
        [ "$t" = torch ] && arg=python
        (
            bounded "$limit" "$log" "$b/tests/itest_$t" $arg
            echo "$status $took" >"$log.status"
        ) &
        names="$names $t"
    done
    wait
    for t in $names; do
        log=$(logname "suite $t")
        read -r status took <"$log.status" || status=1 took=0
        judge "integration $t" "$status" "$took" "$log"
    done
}

epoch() { # name, command...: the epoch's samples/s from its "done in" line (and the C
    # example's time a step, with what of it waits for the all-reduce); a warning it printed
    # (torch 2.11's "barrier(): using the device under current context") fails it
    name=$1
    shift
    log=$(logname "$name")
    bounded 300 "$log" "$@"
    rate=$(sed -n 's/.*done in \([0-9.]*\) s: \([0-9]*\) samples\/s.*/\2 samples\/s (\1 s)/p' "$log" |
        tail -1)
    step=$(sed -n 's/.*; \([0-9.]*\) ms a step, \([0-9.]*\) ms of it waiting.*/; \1 ms a step, \2/p' \
        "$log" | tail -1)
    [ -z "$step" ] || step="$step all-reduce wait"
    warned=$(grep -m1 -o '[A-Za-z]*Warning: .*' "$log" | cut -c1-40 || true)
    if [ -n "$warned" ]; then
        row "$name" "WARNED: $warned" ""
        failed=1
    elif [ "$status" = 0 ] && [ -n "$rate" ]; then
        row "$name" "$rate$step" ""
    else
        row "$name" "FAILED ($status): see $(basename "$log")" ""
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
    budget=${1:-1800}
    [ $# -eq 0 ] || shift
    parts=" $* "
    began=$(date +%s)
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
    # What the fashion suite hides to show the example runs without CUDA: the wheels too.
    cuda_dirs=/usr/local/cuda
    [ -z "$nvidia" ] || cuda_dirs="$("$python" -c 'import nvidia; print(":".join(nvidia.__path__))'):$cuda_dirs"
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
        DDP_TEST_CUDA_ROOT="$cuda_dirs" PYTHON_EXEC="$python" \
        DDP_TEST_FAKE_NVML_DIR="$b/tests/fake_nvml" DDP_TEST_CLOCK_STEP_LIB="$b/tests/libclock-step.so" \
        DDP_TEST_BUILD_DIR="$b"
    machine=$( (nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null ||
        echo "no GPU seen") | head -1)
    torch=$("$python" -c 'import torch; print(torch.__version__, "CUDA", torch.version.cuda,
"NCCL", ".".join(map(str, torch.cuda.nccl.version())) if torch.cuda.is_available() else "")' \
        2>/dev/null || echo "no torch")
    [ -z "${DDP_GPU_CHECK_OUT:-}" ] || echo "GPU check on: $machine; torch $torch" \
        >"$DDP_GPU_CHECK_OUT/table.txt"
    self="$root/tests/gpu/check.sh"
    if part gpu; then
        [ -x "$b/tests/gtest_nccl" ] && run_test "gpu suite" 300 "$b/tests/gtest_nccl"
    fi
    if part nvml; then
        run_test "NVML: health checks pass" 60 "$self" nvml health "$b" "$work"
        run_test "NVML: a killed worker's memory" 120 "$self" nvml killed "$b" "$work"
        run_test "NVML: memory held elsewhere waited" 120 "$self" nvml held "$b" "$work"
    fi
    if part fewer; then
        run_test "more workers than GPUs: C example" 120 "$self" fewer c "$b" "$data"
        run_test "more workers than GPUs: PyTorch" 300 "$self" fewer torch "$b" "$data"
    fi
    if part epochs; then
        epoch "C example, 1 GPU, batch 64" "$b/launcher/ddp-launch" --nproc-per-node=1 \
            --no-python "$b/examples/fashion-mnist" --device cuda --epochs 1 --data "$data"
        epoch "C example, 1 GPU, batch 256" "$b/launcher/ddp-launch" --nproc-per-node=1 \
            --no-python "$b/examples/fashion-mnist" --device cuda --epochs 1 --batch-size 256 \
            --data "$data"
        epoch "PyTorch example, 1 GPU, batch 64" "$b/launcher/ddp-launch" --nproc-per-node=1 \
            examples/torch/train_fashion.py --device cuda --epochs 1 --data "$data"
    fi
    # --warm-restarts with NCCL: crash -> the restarted rank's first all-reduce, cold, warm
    # and torchrun (issue 38's target: warm <= 1.5 s); its table is in the log.
    torchrun=$(dirname "$python")/torchrun
    [ -x "$torchrun" ] || torchrun=none
    part restart && run_test "warm restart, NCCL (bench/restart)" 240 "$root/bench/restart" \
        --build "$b" --backend nccl --nproc 1 --runs 3 --python "$python" --torchrun "$torchrun"
    part numa && run_test "numa binding (node)" 60 "$self" numa "$b" "$work/logs"
    suites=""
    for t in env_contract exit_codes restarts signals output store python libddp multinode \
        progress fashion torch; do
        part "$t" && suites="$suites $t"
    done
    # shellcheck disable=SC2086 # one word each
    run_suites $suites
    echo
    echo "GPU check on: $machine; torch $torch; $(uname -sr)"
    printf '%-38s %-44s %s\n' "what" "result" "time"
    printf '%s' "$rows"
    echo "logs: $work/logs"
    [ -z "${DDP_GPU_CHECK_OUT:-}" ] || tar -C "$work" -czf "$DDP_GPU_CHECK_OUT/logs.tar.gz" logs
    exit $failed
}

gpus() { # how many GPUs this machine's driver shows
    nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true
}

# NVML on the real driver (check.sh nvml CASE BUILD WORK, which run() runs, bounded):
#   health  a --nproc-per-node=gpu job's health check passes, NVML answering for every GPU
#   killed  a worker holding 8 GiB is SIGKILLed: the restart does not wait out
#           --gpu-memory-reclaim-timeout (the driver frees a dead process's memory)
#   held    another process holds 4 GiB for 6 s when a worker fails: the restart waits until
#           it lets go, and says so
nvml_check() {
    b=$2 work=$3
    launcher="$b/launcher/ddp-launch"
    case $1 in
    health)
        out=$(DDP_LAUNCH_LOG_LEVEL=info "$launcher" --nproc-per-node=gpu --health-check-path=/ \
            --no-python /bin/echo started 2>&1) || { echo "$out"; return 1; }
        echo "$out"
        n=$(gpus)
        echo "$out" | grep -q "passed: paths / readable; $n GPU(s) visible; NVML: $n GPU(s) without"
        ;;
    killed)
        cat >"$work/hold_and_die.py" <<'PY'
import os, signal, torch
if os.environ["TORCHELASTIC_RESTART_COUNT"] == "0":
    held = torch.ones(8 << 30, dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    print("holding", held.numel() >> 20, "MiB", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
print("attempt", os.environ["TORCHELASTIC_RESTART_COUNT"], flush=True)
PY
        started=$(date +%s)
        out=$("$launcher" --max-restarts=1 --gpu-memory-reclaim-timeout=30 \
            "$work/hold_and_die.py" 2>&1) || { echo "$out"; return 1; }
        echo "$out"
        echo "took $(($(date +%s) - started)) s"
        echo "$out" | grep -q "holding 8192 MiB" && echo "$out" | grep -q "attempt 1" &&
            ! echo "$out" | grep -q "in use after"
        ;;
    held)
        rm -f "$work/held"
        python3 -c 'import sys, time, torch
held = torch.ones(4 << 30, dtype=torch.uint8, device="cuda")
torch.cuda.synchronize()
open(sys.argv[1], "w").close()
time.sleep(6)' "$work/held" &
        holder=$!
        i=0
        while [ ! -e "$work/held" ] && [ $i -lt 600 ] && kill -0 $holder 2>/dev/null; do
            sleep 0.1
            i=$((i + 1))
        done
        out=$("$launcher" --max-restarts=1 --no-python /bin/sh -c \
            '[ "$TORCHELASTIC_RESTART_COUNT" = 1 ] || exit 3; echo attempt 1' 2>&1) || true
        kill $holder 2>/dev/null || true
        wait $holder || true
        echo "$out"
        echo "$out" | grep -q "attempt 1" &&
            echo "$out" | grep -q "still has [0-9]* MiB in use: waiting up to" &&
            echo "$out" | grep -q "back under 512 MiB after"
        ;;
    esac
}

# More workers than GPUs (check.sh fewer c|torch BUILD DATA): the C example with --device
# cuda fails, the rank without a GPU saying so and rank 0 naming it; the PyTorch example
# trains on the CPU with gloo, saying why in one line.
fewer_check() {
    b=$2 data=$3
    n=$(($(gpus) + 1))
    case $1 in
    c)
        out=$("$b/launcher/ddp-launch" --nproc-per-node=$n --no-python "$b/examples/fashion-mnist" \
            --device cuda --max-steps 5 --data "$data" 2>&1) && { echo "$out" && return 1; }
        echo "$out"
        echo "$out" | grep -q "rank $((n - 1)): LOCAL_RANK $((n - 1)) has no GPU of its own" &&
            echo "$out" | grep -q "rank 0: rank $((n - 1)) could not set up its GPU"
        ;;
    torch)
        out=$("$b/launcher/ddp-launch" --nproc-per-node=$n "$root/examples/torch/train_fashion.py" \
            --epochs 1 --limit-train 4000 --limit-test 1000 --data "$data" 2>&1) ||
            { echo "$out" && return 1; }
        echo "$out"
        echo "$out" | grep -q "training on the CPU with gloo"
        ;;
    esac
}

case "${1:-}" in
pack) shift && pack "$@" ;;
run) shift && run "$@" ;;
numa) shift && numa_check "$@" ;;
nvml) shift && nvml_check "$@" ;;
fewer) shift && fewer_check "$@" ;;
*)
    echo "usage: tests/gpu/check.sh pack [BUILD_DIR] | run [SECONDS [PART...]]" >&2
    exit 2
    ;;
esac
