"""A DistributedDataParallel model (gloo, CPU) whose all-reduces ddp-launch sees through
ddp_launch.watch(model), reporting its steps with ddp_launch.step().

ddp_watch.py STEPS STEP_MS SLOW_RANKS [EXTRA_MS] [stop=R:N]

Each step sleeps STEP_MS (the ranks in SLOW_RANKS, comma-separated or "-", EXTRA_MS more,
default 30: their forward pass is slower), then runs forward and backward (DDP all-reduces
the gradients in several buckets inside backward()), the optimizer's step and
ddp_launch.step(). stop=R:N: rank R stops after N steps (it sleeps; the others wait in
the next backward's all-reduce).
"""
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

import ddp_launch

steps, step_ms = int(sys.argv[1]), float(sys.argv[2])
slow = set() if sys.argv[3] == "-" else {int(r) for r in sys.argv[3].split(",")}
extra_ms = float(sys.argv[4]) if len(sys.argv) > 4 and sys.argv[4][0].isdigit() else 30.0
stop = next((tuple(map(int, o[5:].split(":"))) for o in sys.argv[4:] if o.startswith("stop=")),
            None)
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
net = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
# Buckets of 10 KB: the gradients go in several all-reduces.
model = ddp_launch.watch(DistributedDataParallel(net, bucket_cap_mb=0.01))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(32, 64), torch.randn(32, 8)
for i in range(steps):
    time.sleep((step_ms + (extra_ms if rank in slow else 0)) / 1000)
    optimizer.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()
    ddp_launch.step()
    if stop is not None and rank == stop[0] and i + 1 >= stop[1]:
        time.sleep(3600)
dist.barrier()
dist.destroy_process_group()  # torch 2.6 aborts at exit with a process group left
print(f"rank {rank} done {steps} steps, loss {float(torch.nn.functional.mse_loss(model(x), y)):.4f}",
      flush=True)
