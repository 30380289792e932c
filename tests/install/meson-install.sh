#!/bin/sh
# Installs the build into a scratch root with meson install, then builds the collectives
# test worker against the installed ddp.h and libddp through pkg-config, shared and
# static, and runs each under ddp-launch on 2 ranks: the installed library and headers
# stand alone.
# usage: meson-install.sh BUILD_DIR SOURCE_DIR
set -eu
build=$1
source=$2
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
meson install -C "$build" --destdir "$root" --no-rebuild --quiet >/dev/null
pc=$(find "$root" -name libddp.pc)
[ -n "$pc" ] || { echo "meson-install.sh: no libddp.pc installed" >&2; exit 1; }
export PKG_CONFIG_PATH="$(dirname "$pc")" PKG_CONFIG_SYSROOT_DIR="$root"
libdir=$(pkg-config --variable=libdir libddp) # already under the sysroot
cflags=$(pkg-config --cflags libddp)
# The helper hashes with common's header-only FNV-1a: that one file, and nothing else of
# the source tree, is visible beside what was installed.
mkdir "$root/helper"
cp "$source/common/hash.h" "$root/helper/"
cflags="$cflags -I$root/helper"
cc $cflags -o "$root/shared" "$source/tests/helpers/collective_worker.c" \
    $(pkg-config --libs libddp) -lm
# Static: the archive alone, with the libraries pkg-config lists as private.
cc $cflags -o "$root/static" "$source/tests/helpers/collective_worker.c" \
    "$libdir/libddp.a" $(pkg-config --libs --static libddp | sed 's/-lddp//') -lm
for kind in shared static; do
    out=$(LD_LIBRARY_PATH="$libdir" "$root/usr/local/bin/ddp-launch" \
        --nproc-per-node=2 --no-python "$root/$kind" collectives 2>&1) || {
        echo "$out" >&2
        exit 1
    }
    n=$(printf '%s\n' "$out" | grep -c '^collectives ok, world 2$' || true)
    [ "$n" -eq 2 ] || { echo "meson-install.sh: $kind: $out" >&2; exit 1; }
    echo "$kind: ok"
done
if [ "$(ldd "$root/static" | grep -c libddp || true)" -ne 0 ]; then
    echo "meson-install.sh: the static build links libddp.so" >&2
    exit 1
fi
# The installed launcher gives its Python workers the installed ddp_launch package (step()).
py=${DDP_TEST_PYTHON:-python3}
if command -v "$py" >/dev/null 2>&1; then
    cat >"$root/steps.py" <<'PY'
import os, ddp_launch
for _ in range(3):
    ddp_launch.step()
print("module", ddp_launch.__file__, "ring", os.path.getsize(os.environ["DDP_PROGRESS_RING"]))
PY
    out=$(PYTHON_EXEC="$py" "$root/usr/local/bin/ddp-launch" --log-dir="$root/logs" \
        "$root/steps.py" 2>&1) || { echo "$out" >&2; exit 1; }
    case "$out" in
    *"module $root/usr/local/share/ddp-launch/python/ddp_launch/__init__.py ring 2944"*) ;;
    *) echo "meson-install.sh: the installed ddp_launch was not used: $out" >&2; exit 1 ;;
    esac
    echo "ddp_launch.step(): ok"
    "$(dirname "$0")/warm-restart.sh" "$root" "$root/usr/local/share/ddp-launch/python" \
        env PYTHON_EXEC="$py" DDP_LAUNCH_LOG_LEVEL=info "$root/usr/local/bin/ddp-launch" \
        --log-dir="$root/logs"
fi
# The example's GPU module, where it was built, is installed where the installed program
# looks for it.
if [ -f "$build/examples/fashion-mnist-cuda.so" ]; then
    [ -f "$libdir/ddp-launch/fashion-mnist-cuda.so" ] || {
        echo "meson-install.sh: no fashion-mnist-cuda.so in $libdir/ddp-launch" >&2
        exit 1
    }
    grep -aq "${libdir#"$root"}/ddp-launch" "$root/usr/local/bin/fashion-mnist" || {
        echo "meson-install.sh: fashion-mnist does not look in ${libdir#"$root"}/ddp-launch" >&2
        exit 1
    }
    echo "fashion-mnist-cuda.so: ok"
fi
