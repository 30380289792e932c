#!/bin/sh
# Makes the directory tree of a machine recorded by record.sh, for DDP_TOPOLOGY_ROOT:
#   tests/data/topology/unpack.sh tests/data/topology/dgx-a100.txt /tmp/dgx
#   DDP_TOPOLOGY_ROOT=/tmp/dgx ddp-launch --numa-binding=exclusive --nproc-per-node=8 --dry-run train.py
set -eu
[ $# = 2 ] || { echo "usage: unpack.sh RECORDED.txt DIR" >&2; exit 2; }
tab=$(printf '\t')
grep -v '^#' "$1" | while IFS="$tab" read -r path line; do
    [ -n "$path" ] || continue
    case $path in /*|*..*) echo "unpack.sh: skipping unsafe path '$path'" >&2; continue ;; esac
    mkdir -p "$2/$(dirname "$path")"
    printf '%s\n' "$line" > "$2/$path"
done
