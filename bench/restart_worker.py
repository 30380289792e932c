"""bench/restart's worker: times a crash and the restarted rank's first collective.

usage: restart_worker.py RESULTS TRIGGER [gloo|nccl]

Attempt 0: every rank joins the group and all-reduces, writes "first <ns>" to RESULTS once
that all_reduce is done, prints "ready", then the last rank waits for the file TRIGGER (the bench makes it once the launcher is ready for the crash),
writes "crash <ns>" to RESULTS and dies (os._exit(1)); the others wait to be stopped. A
later attempt: the last rank writes "back <script start ns> <ns>" once its first
all_reduce is done.
Times are CLOCK_MONOTONIC, which every process of the machine shares.
"""
import os
import sys
import time

started = time.clock_gettime_ns(time.CLOCK_MONOTONIC)

import torch  # noqa: E402 (the import is what is timed)
import torch.distributed as dist  # noqa: E402

results, trigger = sys.argv[1], sys.argv[2]
backend = sys.argv[3] if len(sys.argv) > 3 else "gloo"
attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
local_rank = int(os.environ["LOCAL_RANK"])
device = torch.device("cuda", local_rank) if backend == "nccl" else torch.device("cpu")
if backend == "nccl":
    torch.cuda.set_device(device)
dist.init_process_group(backend)
rank = dist.get_rank()
last = dist.get_world_size() - 1
value = torch.ones(1, device=device)
dist.all_reduce(value)
if backend == "nccl":
    torch.cuda.synchronize()
now = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
if attempt == 0:
    with open(results, "a") as f:
        f.write(f"first {now}\n")
    print(f"rank {rank} ready", flush=True)
    if rank != last:
        time.sleep(600)
        sys.exit(0)
    deadline = time.monotonic() + 600
    while not os.path.exists(trigger) and time.monotonic() < deadline:
        time.sleep(0.01)
    with open(results, "a") as f:
        f.write(f"crash {time.clock_gettime_ns(time.CLOCK_MONOTONIC)}\n")
    os._exit(1)
if rank == last:
    with open(results, "a") as f:
        f.write(f"back {started} {now}\n")
dist.destroy_process_group()
