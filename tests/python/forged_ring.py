"""A worker that forges a ring the launcher reads, then prints "tick 1".."tick 10", one
every 0.1 s, and waits to be stopped: forged_ring.py KIND

KIND "progress": its progress ring (DDP_PROGRESS_RING) with a step counter of INT64_MAX;
"flight": a libddp flight ring beside it (flight_main.ring) with entered and completed
2^64-1. Each "tick" line is output the launcher's loop must still pass on (a launcher
that spins on the ring holds it back, and ignores SIGTERM).
"""
import os
import struct
import sys
import time

kind = sys.argv[1]
ring = os.environ["DDP_PROGRESS_RING"]
now = time.monotonic_ns()
if kind == "progress":
    words = [0] * (16 + 4 * 64 + 6 * 16)
    words[0:5] = [0x3130304750504444, 1, os.getpid(), 2**63 - 1, now]
    slot = 16 + ((2**63 - 2) % 64) * 4  # the slot of step INT64_MAX
    words[slot:slot + 4] = [2**63 - 1, now, 10**6, 0]
    data = struct.pack("<%dq" % len(words), *words)
    path = ring
else:
    header = struct.pack("<Qiiii40sQQ48x", 0x3130305246504444, 1, 0, 1, os.getpid(),
                         b"main", 2**64 - 1, 2**64 - 1)
    data = header + bytes(64 * 64)
    path = os.path.join(os.path.dirname(ring), "flight_main.ring")
with open(path, "wb") as f:
    f.write(data)
for i in range(1, 11):
    print(f"tick {i}", flush=True)
    time.sleep(0.1)
time.sleep(600)
