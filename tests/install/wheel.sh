#!/bin/sh
# The wheel as a user installs it: built offline (packaging/build-wheel), installed with
# pip --no-index into a fresh venv (python3 -m venv), then used from that venv alone, with
# nothing of the build tree on any path: the launcher is the ELF in the venv's bin/, a
# 2-worker libddp job built with pkg-config pointed at the wheel, a PyTorch gloo script
# (Debian's torch 1.13 through PYTHON_EXEC), python -m ddp_launch, man, libddp finding
# NCCL where PyTorch's wheels put it (a stub libnccl.so.2 in site-packages/nvidia/nccl/lib),
# and pip uninstall leaving the venv as it was.
# usage: wheel.sh SOURCE_DIR    (DDP_TEST_HAVE_NCCL=1: libddp has NCCL built in)
set -eu
source=$(cd "$1" && pwd)
python=/usr/bin/python3 # Debian's: it has venv, ensurepip and torch
scratch=$(mktemp -d /tmp/ddp-wheel-test.XXXXXX)
trap 'rm -rf "$scratch"' EXIT
trap 'exit 143' TERM
trap 'exit 130' INT
fail() {
    echo "wheel.sh: $*" >&2
    exit 1
}
"$python" -c 'import ensurepip, venv' 2>/dev/null || {
    echo "skipped: $python has no venv module (apt-get install python3-venv)"
    exit 77
}
version=$(sed -n "s/^  version: '\(.*\)',\$/\1/p" "$source/meson.build")
[ -n "$version" ] || fail "no version in $source/meson.build"

wheel=$("$source/packaging/build-wheel" "$scratch/dist")
size=$(stat -c %s "$wheel")
echo "wheel: $(basename "$wheel"), $size bytes"
[ "$size" -le 2000000 ] || fail "the wheel is $size bytes, over 2 MB"
case $(basename "$wheel") in
"ddp_launch-$version-py3-none-manylinux_"*"_x86_64.whl") ;;
*) fail "$(basename "$wheel"): not ddp_launch-$version-py3-none-manylinux_*_x86_64" ;;
esac

# wheel-tag refuses a wheel whose programs need more than glibc: the same wheel, named as
# meson-python names it, with a program added that needs libz and libexpat.
mkdir "$scratch/foreign"
foreign="$scratch/foreign/ddp_launch-$version-py3-none-linux_x86_64.whl"
cp "$wheel" "$foreign"
"$python" -c 'import sys, zipfile
zipfile.ZipFile(sys.argv[1], "a").write(sys.argv[2], sys.argv[3])' "$foreign" \
    "$(readlink -f "$python")" "ddp_launch-$version.data/scripts/python-with-libz"
if why=$("$python" "$source/packaging/wheel-tag" "$foreign" 2>&1); then
    fail "wheel-tag gave a wheel needing libz a manylinux tag: $why"
fi
case $why in
*"python-with-libz needs "*"libz.so.1"*) echo "wheel-tag refuses a program that needs libz: ok" ;;
*) fail "wheel-tag's refusal does not name the program and libz: $why" ;;
esac

venv=$scratch/venv
"$python" -m venv "$venv"
# pip's own files change as it runs (its caches): they are left out of the comparison, and
# so are folders: pip leaves share/man behind, empty, as for any wheel with man pages.
snapshot() {
    (cd "$venv" && find . ! -type d ! -path './lib/python3*/site-packages/pip*' | sort)
    # ddp folders holding anything but folders (pip leaves share/ddp-launch/python, empty)
    (cd "$venv" && find . -type d -name '*ddp*' | while read -r d; do
        [ -z "$(find "$d" ! -type d | head -n 1)" ] || echo "$d"
    done)
}
snapshot >"$scratch/before"
"$venv/bin/pip" install --no-index --no-cache-dir --quiet "$wheel"
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')

# Everything below runs from the venv alone: a clean environment whose PATH has the
# venv's bin/ and the system's, in a folder of its own.
mkdir "$scratch/work" "$scratch/home"
cd "$scratch/work"
alone() {
    env -i HOME="$scratch/home" PATH="$venv/bin:/usr/bin:/bin" PET_MASTER_PORT=0 \
        DDP_LAUNCH_LOG_LEVEL=error "$@"
}
launcher=$(alone sh -c 'command -v ddp-launch')
[ "$launcher" = "$venv/bin/ddp-launch" ] || fail "ddp-launch on the venv's PATH is $launcher"
[ "$(head -c 4 "$launcher" | od -An -c | tr -d ' ')" = '177ELF' ] ||
    fail "$launcher is not the ELF itself"
[ "$(alone ddp-launch --version | cut -d' ' -f1-2)" = "ddp-launch $version" ] ||
    fail "ddp-launch --version says $(alone ddp-launch --version), not $version"
echo "ddp-launch: $launcher, the ELF, version $version"

# A C libddp program built against the wheel: pkg-config alone says where libddp is.
pcdir=$(alone python -m ddp_launch --pkgconfig-dir)
[ "$pcdir" = "$site/ddp_launch/lib/pkgconfig" ] || fail "the pkg-config folder is $pcdir"
# The test helper (and the header-only FNV-1a of common/ it hashes with) is the source
# tree's; what it includes of libddp comes from the wheel.
mkdir helper
cp "$source/common/hash.h" helper/
alone sh -c 'cc $(PKG_CONFIG_PATH="$0" pkg-config --cflags libddp) -Ihelper -o collectives \
    "$1" $(PKG_CONFIG_PATH="$0" pkg-config --libs libddp) -lm' \
    "$pcdir" "$source/tests/helpers/collective_worker.c"
alone ldd ./collectives | grep -q "libddp.so => $site/ddp_launch/lib/pkgconfig/../../lib/libddp.so" ||
    fail "the program does not find libddp in the venv: $(alone ldd ./collectives)"
out=$(alone timeout 120 ddp-launch --nproc-per-node=2 --no-python ./collectives collectives 2>&1) ||
    fail "the 2-worker libddp job failed: $out"
[ "$(printf '%s\n' "$out" | grep -c '^collectives ok, world 2$')" -eq 2 ] ||
    fail "the 2-worker libddp job did not say ok twice: $out"
echo "libddp job, 2 workers: ok"

# A PyTorch script: Debian's torch 1.13 through PYTHON_EXEC, gloo over the launcher's store.
cp "$source/tests/python/gloo_allreduce.py" .
out=$(alone PYTHON_EXEC=/usr/bin/python3 timeout 300 ddp-launch --nproc-per-node=2 \
    gloo_allreduce.py 2>&1) || fail "the PyTorch gloo job failed: $out"
for rank in 0 1; do
    printf '%s\n' "$out" | grep -q "^rank $rank of 2 sum 3$" ||
        fail "the PyTorch gloo job: no sum from rank $rank: $out"
done
echo "PyTorch gloo job, 2 workers: ok"

# ddp_launch.step() in workers: the venv's python imports the wheel's package; another
# python (PYTHON_EXEC) the copy in the venv's share/ that the launcher adds.
printf 'import os, ddp_launch\nddp_launch.step()\nprint("module", ddp_launch.__file__, os.path.getsize(os.environ["DDP_PROGRESS_RING"]))\n' >steps.py
out=$(alone timeout 60 ddp-launch steps.py 2>&1) || fail "ddp_launch.step() in the venv: $out"
case "$out" in
"module $site/ddp_launch/__init__.py 2944") ;;
*) fail "the venv's worker did not use the wheel's ddp_launch: $out" ;;
esac
out=$(alone PYTHON_EXEC=/usr/bin/python3 timeout 60 ddp-launch steps.py 2>&1) ||
    fail "ddp_launch.step() under /usr/bin/python3: $out"
case "$out" in
"module $venv/share/ddp-launch/python/ddp_launch/__init__.py 2944") ;;
*) fail "/usr/bin/python3's worker did not use the venv's share/ copy: $out" ;;
esac
echo "ddp_launch.step() in workers of both pythons: ok"
# The venv not activated (its bin/ not on PATH), as a batch script calls it: the scripts
# run with the venv's python (torchrun's sys.executable), not PATH's python3.
printf 'import sys, ddp_launch\nprint("python", sys.executable, ddp_launch.__file__)\n' >which.py
out=$(env -i HOME="$scratch/home" PATH=/usr/bin:/bin PET_MASTER_PORT=0 timeout 60 \
    "$venv/bin/ddp-launch" --nproc-per-node=2 which.py 2>&1) ||
    fail "the venv's ddp-launch, not on PATH: $out"
[ "$(printf '%s\n' "$out" | grep -c "^python $venv/bin/python3 $site/ddp_launch/__init__.py$")" -eq 2 ] ||
    fail "the venv's ddp-launch, not on PATH, did not run the venv's python: $out"
printf '%s\n' "$out" | grep -q "running Python scripts with $venv/bin/python3, the python of the environment" ||
    fail "the venv's ddp-launch did not say which python it runs: $out"
out=$(env -i HOME="$scratch/home" PATH=/usr/bin:/bin PET_MASTER_PORT=0 PYTHON_EXEC=/usr/bin/python3 \
    timeout 60 "$venv/bin/ddp-launch" which.py 2>&1) || fail "PYTHON_EXEC=/usr/bin/python3: $out"
case "$out" in
"python /usr/bin/python3 $venv/share/ddp-launch/python/ddp_launch/__init__.py") ;;
*) fail "PYTHON_EXEC did not choose the python: $out" ;;
esac
echo "the venv's ddp-launch, not activated: the venv's python (PYTHON_EXEC another): ok"
# A warm restart: the zygote from the venv's share/ copy, for /usr/bin/python3's workers.
"$source/tests/install/warm-restart.sh" "$PWD" "$venv/share/ddp-launch/python" \
    env -i HOME="$scratch/home" PATH="$venv/bin:/usr/bin:/bin" PET_MASTER_PORT=0 \
    PYTHON_EXEC=/usr/bin/python3 DDP_LAUNCH_LOG_LEVEL=info ddp-launch

# python -m ddp_launch runs the launcher with the arguments as they were.
out=$(alone timeout 60 python -m ddp_launch --nproc-per-node=2 --no-python \
    /bin/sh -c 'echo "rank $RANK says $0"' 'two words' 2>&1) || fail "python -m ddp_launch: $out"
[ "$(printf '%s\n' "$out" | grep -c '^rank [01] says two words$')" -eq 2 ] ||
    fail "python -m ddp_launch: $out"
echo "python -m ddp_launch: ok"

# NCCL where torch's wheels have it, ahead of the system's (this machine may have one).
if [ "${DDP_TEST_HAVE_NCCL:-0}" = 1 ]; then
    mkdir -p "$site/nvidia/nccl/lib"
    cc -shared -fPIC -o "$site/nvidia/nccl/lib/libnccl.so.2" "$source/tests/install/nccl_stub.c"
    out=$(alone timeout 120 ddp-launch --nproc-per-node=2 --no-python ./collectives nccl-id 2>&1) ||
        fail "the NCCL id job failed: $out"
    stub=$(printf 'stub NCCL beside torch, id 1' | od -An -tx1 | tr -d ' \n')
    [ "$(printf '%s\n' "$out" | grep -c "^nccl-id $stub")" -eq 2 ] ||
        fail "libddp did not load the NCCL in $site/nvidia/nccl/lib: $out"
    rm -r "$site/nvidia"
    echo "NCCL from site-packages/nvidia/nccl/lib: ok"
else
    echo "NCCL from site-packages: not tried (libddp is built without NCCL here)"
fi

# man finds the pages of what is on PATH.
if command -v man >/dev/null; then
    page=$(alone man -w ddp-launch)
    [ "$page" = "$venv/share/man/man1/ddp-launch.1" ] || fail "man -w ddp-launch: $page"
    page=$(alone man -w 3 libddp)
    [ "$page" = "$venv/share/man/man3/libddp.3" ] || fail "man -w 3 libddp: $page"
    echo "man ddp-launch, man 3 libddp: ok"
fi

cd "$scratch"
"$venv/bin/pip" uninstall --yes --quiet ddp-launch
snapshot >"$scratch/after"
diff "$scratch/before" "$scratch/after" >"$scratch/left" ||
    fail "pip uninstall left the venv changed: $(cat "$scratch/left")"
echo "pip uninstall: no file or ddp folder is left"
