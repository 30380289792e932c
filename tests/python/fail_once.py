"""Fails on the first attempt, succeeds on the next: a job restarted by ddp-launch.

Every rank joins a gloo group and all-reduces; on attempt 0 rank 1 then exits 3. On
attempt 1 the group forms again from scratch: with torch 2.x, whose store keys carry no
attempt prefix, this works only if the failed attempt's keys were cleared.
"""
import os
import sys

import torch
import torch.distributed as dist

attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
dist.init_process_group("gloo", init_method="env://")
rank = dist.get_rank()
value = torch.tensor([float(rank + 1)])
dist.all_reduce(value)
if attempt == 0 and rank == 1:
    print(f"rank 1 fails on attempt {attempt}", flush=True)
    sys.exit(3)
dist.barrier()
print(f"rank {rank} attempt {attempt} sum {int(value.item())}", flush=True)
dist.destroy_process_group()
