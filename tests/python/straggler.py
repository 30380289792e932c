"""A training loop that reports its steps to ddp-launch (ddp_launch.step()).

straggler.py STEPS STEP_MS SLOW_RANKS [EXTRA_MS] [gloo] [stop=R:N] [checkpoint=EVERY:MS]

Each step sleeps STEP_MS (the ranks in SLOW_RANKS, comma-separated or "-", EXTRA_MS more,
default 30), then with "gloo" all-reduces a tensor (torch.distributed, the store of
ddp-launch), then calls ddp_launch.step(). stop=R:N: rank R stops stepping after N steps
(it sleeps). checkpoint=EVERY:MS: every EVERY steps, a section "checkpoint" of MS.
"""
import os
import sys
import time

import ddp_launch

steps, step_ms = int(sys.argv[1]), float(sys.argv[2])
slow = set() if sys.argv[3] == "-" else {int(r) for r in sys.argv[3].split(",")}
extra_ms = float(sys.argv[4]) if len(sys.argv) > 4 and sys.argv[4][0].isdigit() else 30.0
options = sys.argv[4:]
rank = int(os.environ["RANK"])
stop = next((tuple(map(int, o[5:].split(":"))) for o in options if o.startswith("stop=")), None)
checkpoint = next((tuple(map(float, o[11:].split(":"))) for o in options
                   if o.startswith("checkpoint=")), None)
gloo = "gloo" in options
if gloo:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    tensor = torch.ones(4)
for i in range(steps):
    time.sleep((step_ms + (extra_ms if rank in slow else 0)) / 1000)
    if gloo:
        dist.all_reduce(tensor)
    if checkpoint and i > 0 and i % int(checkpoint[0]) == 0:
        with ddp_launch.section("checkpoint"):
            time.sleep(checkpoint[1] / 1000)
    ddp_launch.step()
    if stop is not None and rank == stop[0] and i + 1 >= stop[1]:
        time.sleep(3600)
if gloo:  # torch 2.6 aborts at exit with a process group left (gloo's threads)
    dist.barrier()
    dist.destroy_process_group()
print(f"rank {rank} done {steps} steps", flush=True)
