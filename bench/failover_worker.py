"""bench/failover's PyTorch worker: joins the gloo group its launcher describes (env://),
says when it did ("started <wall time> world <size>": from then the job trains again),
then all-reduces a tensor every 50 ms; a lost peer makes the all-reduce fail, and the
worker with it, as training would."""
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
print(f"started {time.time():.6f} world {dist.get_world_size()}", flush=True)
tensor = torch.ones(1)
while True:
    dist.all_reduce(tensor)
    time.sleep(0.05)
