"""bench/failover's PyTorch worker: joins the gloo group its launcher describes (env://),
says when it did ("started <wall time> world <size> rank <rank> pid <pid>": from then the
job trains again),
and when its first all-reduce has returned ("reduced <wall time>"), then all-reduces a
tensor every 50 ms; a lost peer makes the all-reduce fail, and the
worker with it, as training would."""
import os
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
print(f"started {time.time():.6f} world {dist.get_world_size()} rank {dist.get_rank()} "
      f"pid {os.getpid()}", flush=True)
tensor = torch.ones(1)
dist.all_reduce(tensor)
print(f"reduced {time.time():.6f}", flush=True)  # the round's first all-reduce
while True:
    dist.all_reduce(tensor)
    time.sleep(0.05)
