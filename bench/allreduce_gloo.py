"""The gloo side of bench/allreduce: the same protocol as ddp-bench-allreduce, with
torch.distributed's gloo backend (Debian's python3-torch), run under ddp-launch.

usage: python3 allreduce_gloo.py SECONDS BYTES...
"""
import sys
import time

import torch
import torch.distributed as dist


def main():
    seconds = float(sys.argv[1])
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    for arg in sys.argv[2:]:
        count = int(arg) // 4
        buf = (torch.arange(count, dtype=torch.float32) % 7).contiguous()
        dist.all_reduce(buf)
        dist.barrier()
        t0 = time.monotonic()
        dist.all_reduce(buf)
        one = time.monotonic() - t0
        # As ddp-bench-allreduce: warm-up ops for about 50 ms, then the timed ones.
        plan = torch.tensor([min(10000, max(1, int(0.05 / max(one, 1e-6)))),
                             min(100000, max(3, int(seconds / max(one, 1e-6))))])
        dist.broadcast(plan, 0)
        for _ in range(int(plan[0].item())):
            dist.all_reduce(buf)
        iters = int(plan[1].item())
        dist.barrier()
        t0 = time.monotonic()
        for _ in range(iters):
            dist.all_reduce(buf)
        dist.barrier()
        per_op = torch.tensor([(time.monotonic() - t0) / iters], dtype=torch.float64)
        dist.all_reduce(per_op, op=dist.ReduceOp.MAX)
        if rank == 0:
            print(f"bytes {count * 4} seconds_per_op {per_op.item():.9f} iters {iters}",
                  flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
