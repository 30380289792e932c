#!/bin/sh
# Records what ddp-launch's --numa-binding reads of this machine, one file a line
# ("PATH<TAB>FIRST LINE", paths relative to /), for tests/unit/test_numa.c or for planning
# this machine's binding elsewhere (DDP_TOPOLOGY_ROOT on the tree the test's loader makes).
#   tests/data/topology/record.sh "what machine this is" > tests/data/topology/NAME.txt
set -eu
printf '# %s\n' "${1:-a machine}"
printf '# recorded %s by tests/data/topology/record.sh on Linux %s\n' "$(date -u +%Y-%m-%d)" "$(uname -r)"
one() { # one file, if it exists
    [ -r "$1" ] && printf '%s\t%s\n' "${1#/}" "$(head -n 1 "$1")" || true
}
printf 'proc/self/status\t%s\n' "$(grep '^Cpus_allowed_list:' /proc/self/status)"
for f in online possible; do one /sys/devices/system/cpu/$f; done
for f in online possible has_memory; do one /sys/devices/system/node/$f; done
for node in /sys/devices/system/node/node[0-9]*; do
    [ -d "$node" ] && one "$node/cpulist"
done
for cpu in /sys/devices/system/cpu/cpu[0-9]*; do
    [ -d "$cpu/topology" ] || continue
    one "$cpu/topology/physical_package_id"
    one "$cpu/topology/thread_siblings_list"
    for index in "$cpu"/cache/index[0-9]*; do
        [ -d "$index" ] || continue
        for f in level type shared_cpu_list; do one "$index/$f"; done
    done
done
for dev in /sys/bus/pci/devices/*; do
    [ "$(cat "$dev/vendor" 2>/dev/null)" = 0x10de ] || continue
    for f in vendor class numa_node; do one "$dev/$f"; done
done
