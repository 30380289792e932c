#!/bin/sh
# What users install, on a distribution other than the one that built it: a Debian trixie
# root (tests/torch26/setup.sh makes it once; it has python3-torch 2.6 and nothing of
# ddp-launch) seen through an overlay in a mount namespace of this test's own, so the
# root itself stays as it was and nothing stays mounted when the test ends, however it ends.
# 1. The Debian packages: built with dpkg-buildpackage (packaging/build-debs), checked by
#    lintian (no error, no warning that debian/ does not explain), installed with dpkg -i;
#    there ddp-launch --version, man, pkg-config libddp, a libddp program built with
#    pkg-config and run on 2 workers, ddp-hello, and a torch 2.6 gloo script; `import
#    ddp_launch` in a plain python3, outside ddp-launch; workers run as root, of the system's
#    python3 and of a venv's (which imports the launcher's copy), write no bytecode into
#    /usr; dpkg --purge leaves /usr and /etc as they were, even where a root worker of
#    another Python wrote its bytecode beside the module.
# 2. The wheel: pip --no-index into a venv of trixie's python3 (3.13; it was built for
#    3.11 on bookworm), and a 2-worker libddp job from that venv.
# usage: clean-root.sh SOURCE_DIR ROOT SETUP
# Exits 77 (skipped), saying why, where the root cannot be made (no root user, no network).
set -eu
source=$(cd "$1" && pwd)
root=$2
setup=$3
skip() {
    echo "skipped: $*"
    exit 77
}
fail() {
    echo "clean-root.sh: $*" >&2
    exit 1
}
[ "$(id -u)" = 0 ] || skip "dpkg -i into a root and chroot need root"
sh "$setup" "$root" || {
    status=$?
    [ $status -eq 77 ] && exit 77
    fail "$setup $root failed ($status)"
}
version=$(sed -n "s/^  version: '\(.*\)',\$/\1/p" "$source/meson.build")
scratch=$(mktemp -d /tmp/ddp-root-test.XXXXXX)
trap 'rm -rf "$scratch"' EXIT
trap 'exit 143' TERM
trap 'exit 130' INT

changes=$("$source/packaging/build-debs" "$scratch/dist")
[ "$(basename "$changes")" = "ddp-launch_${version}_amd64.changes" ] ||
    fail "$changes is not ddp-launch_${version}_amd64.changes"
lintian --fail-on error,warning "$changes" >"$scratch/lintian" 2>&1 || {
    cat "$scratch/lintian" >&2
    fail "lintian found errors or unexplained warnings (above)"
}
echo "lintian: no error, no warning ($(grep -c . "$scratch/lintian" || true) line(s) of notes)"
wheel=$("$source/packaging/build-wheel" "$scratch/dist")

# What the root is given: the packages, the wheel, the test programs' sources.
mkdir -p "$scratch/upper/opt/test" "$scratch/work" "$scratch/merged"
for deb in "$scratch"/dist/*.deb; do
    case $deb in *-dbgsym_*) ;; *) cp "$deb" "$scratch/upper/opt/test/" ;; esac
done
cp "$wheel" "$source/tests/helpers/collective_worker.c" "$source/tests/helpers/elements.h" \
    "$source/common/hash.h" "$source/tests/python/gloo_allreduce.py" \
    "$source/tests/torch26/no_libuv.py" "$source/tests/install/warm-restart.sh" \
    "$scratch/upper/opt/test/"
cat >"$scratch/upper/opt/test/inside.sh" <<'INSIDE'
set -eu
version=$1
cd /opt/test
fail() {
    echo "clean-root.sh (in the root): $*" >&2
    exit 1
}
snapshot() { find /usr /etc -xdev | sort; }
snapshot >/opt/test/before
packages=$(for deb in ./*.deb; do dpkg-deb -f "$deb" Package; done)
dpkg -i ./*.deb >dpkg.log 2>&1 || { cat dpkg.log >&2; fail "dpkg -i failed"; }
[ "$(command -v ddp-launch)" = /usr/bin/ddp-launch ] || fail "ddp-launch is not /usr/bin/ddp-launch"
[ "$(ddp-launch --version | cut -d' ' -f1-2)" = "ddp-launch $version" ] ||
    fail "ddp-launch --version: $(ddp-launch --version)"
[ "$(man -w ddp-launch)" = /usr/share/man/man1/ddp-launch.1.gz ] || fail "man -w ddp-launch: $(man -w ddp-launch)"
MANWIDTH=80 man ddp-launch 2>/dev/null | grep -q "torchrun" || fail "man ddp-launch shows no page"
[ "$(man -w 3 libddp)" = /usr/share/man/man3/libddp.3.gz ] || fail "man -w 3 libddp: $(man -w 3 libddp)"
[ "$(pkg-config --modversion libddp)" = "$version" ] || fail "pkg-config libddp: $(pkg-config --modversion libddp)"
echo "dpkg -i: ddp-launch $version, man ddp-launch, man 3 libddp, pkg-config libddp: ok"
cc $(pkg-config --cflags libddp) -o collectives collective_worker.c $(pkg-config --libs libddp) -lm
export PET_MASTER_PORT=0 DDP_LAUNCH_LOG_LEVEL=error
out=$(timeout 120 ddp-launch --nproc-per-node=2 --no-python ./collectives collectives 2>&1) ||
    fail "the libddp job failed: $out"
[ "$(printf '%s\n' "$out" | grep -c '^collectives ok, world 2$')" -eq 2 ] || fail "libddp job: $out"
out=$(timeout 120 ddp-launch --nproc-per-node=2 --no-python ddp-hello 2>&1) || fail "ddp-hello: $out"
[ "$(printf '%s\n' "$out" | grep -c '^hello from rank [01] of 2 ')" -eq 2 ] || fail "ddp-hello: $out"
echo "libddp job built with pkg-config, ddp-hello, 2 workers: ok"
out=$(timeout 300 ddp-launch --nproc-per-node=2 no_libuv.py gloo_allreduce.py 2>&1) ||
    fail "the torch 2.6 gloo job failed: $out"
for rank in 0 1; do
    printf '%s\n' "$out" | grep -q "^rank $rank of 2 sum 3$" || fail "torch 2.6 gloo job: $out"
done
echo "PyTorch 2.6 gloo job under the packaged ddp-launch, 2 workers: ok"
sh ./warm-restart.sh /opt/test /usr/share/ddp-launch/python \
    env DDP_LAUNCH_LOG_LEVEL=info ddp-launch || fail "a warm restart under the packaged ddp-launch"

# ddp_launch, the module of the packages, in a plain python3 outside ddp-launch.
out=$(cd / && python3 -c 'import ddp_launch; ddp_launch.step(); print(ddp_launch.__version__)' 2>&1) ||
    fail "import ddp_launch outside ddp-launch: $out"
[ "$out" = "$version" ] || fail "import ddp_launch outside ddp-launch: version $out, not $version"
[ "$(cd / && python3 -m ddp_launch --version | cut -d' ' -f1-2)" = "ddp-launch $version" ] ||
    fail "python3 -m ddp_launch --version: $(python3 -m ddp_launch --version 2>&1)"
echo "import ddp_launch and python3 -m ddp_launch in python3, outside ddp-launch: ok"
# Root workers that import it, from the system's python3 and from a venv's (without the
# system's site-packages: the launcher's own copy, on its PYTHONPATH), write nothing in /usr.
python3 -m venv --without-pip /opt/test/plain
cat >step.py <<'PY'
import ddp_launch
ddp_launch.step()
print("step from", ddp_launch.__file__)
PY
snapshot >/opt/test/installed
out=$(timeout 120 ddp-launch --nproc-per-node=2 step.py 2>&1) || fail "a job of ddp_launch.step(): $out"
[ "$(printf '%s\n' "$out" | grep -c '^step from /usr/lib/python3/dist-packages/ddp_launch/')" = 2 ] ||
    fail "the system's python3 workers did not import python3-ddp-launch's module: $out"
out=$(PYTHON_EXEC=/opt/test/plain/bin/python timeout 120 ddp-launch --nproc-per-node=2 step.py 2>&1) ||
    fail "a job of ddp_launch.step() in a venv: $out"
[ "$(printf '%s\n' "$out" | grep -c '^step from /usr/share/ddp-launch/python/ddp_launch/')" = 2 ] ||
    fail "the venv's workers did not import the launcher's copy of ddp_launch: $out"
snapshot >/opt/test/jobs
diff /opt/test/installed /opt/test/jobs >&2 || fail "root workers importing ddp_launch wrote in /usr (above)"
echo "workers importing ddp_launch as root (python3, a venv's): nothing written in /usr"
# What a root worker of another Python (another bytecode tag) writes beside the module goes
# with the packages.
python3 -c 'import py_compile, sys; py_compile.compile(sys.argv[1], cfile=sys.argv[2], doraise=True)' \
    /usr/share/ddp-launch/python/ddp_launch/_progress.py \
    /usr/share/ddp-launch/python/ddp_launch/__pycache__/_progress.cpython-399.pyc ||
    fail "unable to write another Python's bytecode beside ddp_launch"
dpkg --purge $packages >>dpkg.log 2>&1 || { cat dpkg.log >&2; fail "dpkg --purge failed"; }
[ ! -e /usr/share/ddp-launch ] || fail "dpkg --purge left $(find /usr/share/ddp-launch)"
snapshot >/opt/test/after
diff /opt/test/before /opt/test/after >&2 || fail "dpkg --purge left files in /usr or /etc (above)"
echo "dpkg --purge: /usr and /etc as they were"

python3 -m venv /opt/test/venv
/opt/test/venv/bin/pip install --no-index --quiet /opt/test/ddp_launch-*.whl
cc -I"$(/opt/test/venv/bin/python -m ddp_launch --include-dir)" -o collectives-wheel \
    collective_worker.c -L"$(/opt/test/venv/bin/python -m ddp_launch --library-dir)" \
    -Wl,-rpath,"$(/opt/test/venv/bin/python -m ddp_launch --library-dir)" -lddp -lm
out=$(timeout 120 /opt/test/venv/bin/ddp-launch --nproc-per-node=2 --no-python ./collectives-wheel \
    collectives 2>&1) || fail "the libddp job from the wheel on trixie failed: $out"
[ "$(printf '%s\n' "$out" | grep -c '^collectives ok, world 2$')" -eq 2 ] || fail "wheel job: $out"
echo "the wheel in a venv of $(python3 --version): a libddp job, 2 workers: ok"
INSIDE
# The root through an overlay whose upper layer is this test's; /proc, /dev and /tmp of its
# own mount namespace, all gone with it.
timeout 900 unshare --mount --propagation private sh -c '
    set -e
    mount -t overlay overlay -o "lowerdir=$1,upperdir=$2/upper,workdir=$2/work" "$2/merged"
    mount -t proc proc "$2/merged/proc"
    mount --bind /dev "$2/merged/dev"
    mount -t tmpfs tmpfs "$2/merged/tmp"
    exec chroot "$2/merged" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
        sh /opt/test/inside.sh "$3"' sh "$root" "$scratch" "$version"
